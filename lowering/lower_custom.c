/* Lowering of plugin ops (lowering/lower_custom.h). */
#include "lowering/lower_custom.h"

#include <string.h>

#include "ir/ops/custom.h"
#include "lowering/plan.h"

kiln_status_t kiln_lower_custom(kiln_lower_ctx_t* ctx) {
  const kiln_custom_op_t* op = kiln_custom_op_of(ctx->node);
  if (!op) return kiln_make_status(KILN_INTERNAL, "node '%s': plugin op not registered", ctx->node->name);
  kiln_custom_instance_t* ci = kiln_arena_alloc(&ctx->tir->arena, sizeof *ci);
  if (!ci) return kiln_make_status(KILN_OUT_OF_MEMORY, "node '%s': plugin kernel", ctx->node->name);
  memset(ci, 0, sizeof *ci);
  ci->op = op;
  ci->node = ctx->node->name;
  KILN_RETURN_IF_ERROR(kiln_custom_node_attrs(op, ctx->node, ci->attrs));
  ci->epilogue = op->epilogue ? kiln_custom_node_epilogue(ctx->node, &ci->epilogue_alpha) : NULL;
  const tir_buffer_t* params[2 * KILN_CUSTOM_MAX_IO + 1];
  int32_t np = 0;
  for (int32_t i = 0; i < op->n_inputs; ++i) {
    ci->in_arg[i] = -1;
    const tir_buffer_t* b = i < ctx->n_in ? ctx->in[i] : NULL;
    if (!b) continue;
    ci->in[i].dtype = b->dtype;
    ci->in[i].rank = b->rank;
    for (int32_t d = 0; d < b->rank; ++d) ci->in[i].dims[d] = b->shape[d];
    ci->in_arg[i] = np;
    params[np++] = b;
  }
  for (int32_t j = 0; j < op->n_outputs; ++j) {
    ci->out_arg[j] = -1;
    const tir_buffer_t* b = j < ctx->n_out ? ctx->out[j] : NULL;
    if (!b) continue;
    ci->out[j].dtype = b->dtype;
    ci->out[j].rank = b->rank;
    for (int32_t d = 0; d < b->rank; ++d) ci->out[j].dims[d] = b->shape[d];
    ci->out_arg[j] = np;
    params[np++] = b;
  }
  /* A CPU function cannot return an error through the kernel's void
   * signature: it reports through the node's status word, which the
   * runtime checks after the run like kiln's own run-time checks. */
  ci->status_arg = -1;
  if (ctx->target == KILN_TARGET_CLASS_CPU && op->cpu_fn) {
    const tir_buffer_t* st = NULL;
    KILN_RETURN_IF_ERROR(kiln_lower_status(ctx, &st));
    ci->status_arg = np;
    params[np++] = st;
  }
  tir_func_t* f = tir_func(ctx->tir, kiln_lower_kernel_name(ctx), np, params, tir_seq(ctx->tir, 0, NULL));
  if (!f) return tir_ctx_status(ctx->tir);
  KILN_RETURN_IF_ERROR(kiln_lower_emit(ctx, f, NULL));
  ctx->plan->kernels[ctx->plan->n_kernels - 1].custom = ci;
  return NULL;
}
