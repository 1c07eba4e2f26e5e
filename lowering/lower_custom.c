/* Lowering of plugin ops (lowering/lower_custom.h). */
#include "lowering/lower_custom.h"

#include <string.h>

#include "ir/ops/custom.h"
#include "ir/tir_visit.h"
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
    /* one tensor in two slots (a pattern's fan-in, Add(x, Conv(x))) is
     * one kernel parameter: the targets alias the second slot to it */
    for (int32_t j = 0; j < np && ci->in_arg[i] < 0; ++j)
      if (params[j] == b) ci->in_arg[i] = j;
    if (ci->in_arg[i] >= 0) continue;
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

/* ---- epilogues from kiln's fusion (lowering/fuse.c) ---------------------- */

typedef struct epi_conv_s {
  const kiln_plan_t* plan;
  const kiln_plan_kernel_t* kc;
  const tir_buffer_t* x;
  const tir_expr_t* v; /* the value stored into x, as an f32 variable */
  int32_t rank;
  const tir_var_t* const* vars;
  bool ok;
} epi_conv_t;

/* A one-element float constant the consumer loads: its value. */
static bool const_value(const epi_conv_t* E, const tir_buffer_t* b, double* out) {
  if (b->dtype != KILN_DTYPE_F32 && b->dtype != KILN_DTYPE_F16) return false;
  for (int32_t i = 0; i < E->kc->func->n_params; ++i) {
    if (E->kc->func->params[i] != b) continue;
    const int32_t r = kiln_plan_root(E->plan, E->kc->args[i]);
    if (r < 0) return false;
    const kiln_plan_buffer_t* pb = &E->plan->buffers[r];
    if (pb->kind != KILN_PLAN_CONST || !pb->value.data || kiln_array_numel(&pb->value) != 1 ||
        pb->value.dtype != b->dtype)
      return false;
    *out = b->dtype == KILN_DTYPE_F32 ? (double)*(const float*)pb->value.data
                                      : (double)kiln_f16_to_f32(*(const uint16_t*)pb->value.data);
    return true;
  }
  return false;
}

static bool conv_pre(tir_mutator_t* m, const tir_expr_t* e, const tir_expr_t** out) {
  epi_conv_t* E = m->user;
  if (e->kind == TIR_VARREF) { /* an index outside a load of x: not element-wise in x alone */
    for (int32_t i = 0; i < E->rank; ++i) E->ok &= e->u.var != E->vars[i];
    return false;
  }
  if (e->kind != TIR_LOAD) return false;
  double v;
  if (e->u.load.buf == E->x) /* identity index (the caller checked) */
    *out = E->x->dtype == KILN_DTYPE_F32 ? E->v : tir_cast(m->ctx, E->x->dtype, E->v);
  else if (const_value(E, e->u.load.buf, &v))
    *out = tir_const(m->ctx, e->u.load.buf->dtype, v);
  else
    E->ok = false, *out = e;
  return true;
}

bool kiln_custom_epilogue_expr(tir_ctx_t* c, const kiln_plan_t* plan, const kiln_plan_kernel_t* kc,
                               const tir_buffer_t* x, const tir_expr_t* value, int32_t rank,
                               const tir_var_t* const* vars, const tir_expr_t** out_expr,
                               const tir_var_t** out_var) {
  *out_expr = NULL;
  *out_var = NULL;
  if (value->dtype != KILN_DTYPE_F32 && value->dtype != KILN_DTYPE_F16) return false;
  /* The variable stands for an f32 value (tir variables are I64 indices
   * elsewhere): a reference node retyped, read only by the printer. */
  const tir_var_t* var = tir_var(c, "v");
  const tir_expr_t* ref = var ? tir_ref(c, var) : NULL;
  tir_expr_t* fref = ref ? kiln_arena_alloc(&c->arena, sizeof *fref) : NULL;
  if (!fref) return true;
  *fref = *ref;
  fref->dtype = KILN_DTYPE_F32;
  epi_conv_t E = {plan, kc, x, fref, rank, vars, true};
  tir_mutator_t m = {.ctx = c, .user = &E, .expr_pre = conv_pre};
  const tir_expr_t* f = tir_mutate_expr(&m, value);
  if (!f) return true;
  if (!E.ok) return false;
  if (f->dtype != KILN_DTYPE_F32) f = tir_cast(c, KILN_DTYPE_F32, f);
  *out_expr = f;
  *out_var = f ? var : NULL;
  return true;
}
