/* Lowering registry and the helpers lowering functions use to emit kernels,
 * workspaces, compile-time constants and aliases into a plan. */
#include "lowering/lower.h"

#include <ctype.h>
#include <stdio.h>
#include <string.h>

#include "lowering/plan.h"

kiln_lower_fn kiln_lower_lookup(const char* op_type) {
  const struct {
    const kiln_lower_entry_t* t;
    size_t n;
  } tables[] = {
      {kiln_lower_elementwise, kiln_lower_elementwise_count},
      {kiln_lower_tensor, kiln_lower_tensor_count},
      {kiln_lower_tensor_index, kiln_lower_tensor_index_count},
      {kiln_lower_tensor_gen, kiln_lower_tensor_gen_count},
      {kiln_lower_tensor_seq, kiln_lower_tensor_seq_count},
      {kiln_lower_tensor_einsum, kiln_lower_tensor_einsum_count},
      {kiln_lower_nn, kiln_lower_nn_count},
  };
  for (size_t k = 0; k < sizeof tables / sizeof tables[0]; ++k)
    for (size_t i = 0; i < tables[k].n; ++i)
      if (strcmp(tables[k].t[i].op_type, op_type) == 0) return tables[k].t[i].fn;
  return NULL;
}

/* Plan-internal (plan.c). */
kiln_status_t kiln_plan_add_buffer(kiln_plan_t* p, const tir_buffer_t* b,
                                   kiln_plan_buffer_kind_t kind, int32_t tensor,
                                   int32_t* out_index);
int32_t kiln_plan_find_buffer(const kiln_plan_t* p, const tir_buffer_t* b);
kiln_status_t kiln_plan_add_kernel(kiln_plan_t* p, int32_t node, tir_func_t* func,
                                   const tir_func_t* naive, const tir_schedule_t* sched);

const char* kiln_lower_kernel_name(kiln_lower_ctx_t* ctx) {
  char buf[96];
  size_t o = 0;
  const char* nm = ctx->node->name;
  buf[o++] = 'k';
  buf[o++] = '_';
  for (; *nm && o < 60; ++nm) buf[o++] = isalnum((unsigned char)*nm) ? *nm : '_';
  snprintf(buf + o, sizeof buf - o, "_%d", ctx->plan->name_counter++);
  return kiln_arena_strndup(&ctx->tir->arena, buf, strlen(buf));
}

static const char* where(const kiln_lower_ctx_t* ctx) {
  return ctx->node ? ctx->node->name : "?";
}

kiln_status_t kiln_lower_emit(kiln_lower_ctx_t* ctx, tir_func_t* naive,
                              const tir_schedule_t* schedule) {
  KILN_RETURN_IF_ERROR(tir_ctx_status(ctx->tir), "lowering node '%s'", where(ctx));
  if (!naive)
    return kiln_make_status(KILN_INTERNAL, "lowering node '%s' emitted no kernel", where(ctx));
  for (int32_t i = 0; i < naive->n_params; ++i)
    if (kiln_plan_find_buffer(ctx->plan, naive->params[i]) < 0)
      return kiln_make_status(KILN_INTERNAL,
                              "kernel %s: parameter '%s' is not a buffer of the plan", naive->name,
                              naive->params[i]->name);
  KILN_RETURN_IF_ERROR(tir_verify(naive), "node '%s' (%s): naive kernel", where(ctx),
                       ctx->node->op_type);
  tir_func_t* f = NULL;
  if (schedule && schedule->n > 0) {
    KILN_RETURN_IF_ERROR(tir_schedule_apply(ctx->tir, naive, schedule, &f),
                         "node '%s' (%s): default schedule", where(ctx), ctx->node->op_type);
  } else {
    f = tir_simplify_func(ctx->tir, naive);
    KILN_RETURN_IF_ERROR(tir_ctx_status(ctx->tir));
  }
  KILN_RETURN_IF_ERROR(tir_verify(f), "node '%s' (%s): scheduled kernel", where(ctx),
                       ctx->node->op_type);
  return kiln_plan_add_kernel(ctx->plan, ctx->node_index, f, naive, schedule);
}

kiln_status_t kiln_lower_temp(kiln_lower_ctx_t* ctx, const char* name, kiln_dtype_t dtype,
                              int32_t rank, const int64_t* shape, const tir_buffer_t** out) {
  char buf[128];
  snprintf(buf, sizeof buf, "%s_%s", where(ctx), name);
  tir_buffer_t* b = tir_buffer(ctx->tir, buf, dtype, rank, shape, TIR_SCOPE_GLOBAL);
  if (!b) return tir_ctx_status(ctx->tir);
  KILN_RETURN_IF_ERROR(kiln_plan_add_buffer(ctx->plan, b, KILN_PLAN_TEMP, -1, NULL));
  *out = b;
  return NULL;
}

kiln_status_t kiln_lower_status(kiln_lower_ctx_t* ctx, const tir_buffer_t** out) {
  char buf[128];
  snprintf(buf, sizeof buf, "%s_status%d", where(ctx), (int)ctx->plan->n_buffers);
  const int64_t one = 1;
  tir_buffer_t* b = tir_buffer(ctx->tir, buf, KILN_DTYPE_I32, 1, &one, TIR_SCOPE_GLOBAL);
  if (!b) return tir_ctx_status(ctx->tir);
  KILN_RETURN_IF_ERROR(kiln_plan_add_buffer(ctx->plan, b, KILN_PLAN_STATUS, -1, NULL));
  *out = b;
  return NULL;
}

kiln_status_t kiln_lower_const(kiln_lower_ctx_t* ctx, const char* name, kiln_array_t* value,
                               const tir_buffer_t** out) {
  char buf[128];
  snprintf(buf, sizeof buf, "%s_%s", where(ctx), name);
  tir_buffer_t* b =
      tir_buffer(ctx->tir, buf, value->dtype, value->shape.rank, value->shape.dims, TIR_SCOPE_GLOBAL);
  if (!b) {
    kiln_array_free(kiln_allocator_system(), value);
    return tir_ctx_status(ctx->tir);
  }
  int32_t idx;
  kiln_status_t s = kiln_plan_add_buffer(ctx->plan, b, KILN_PLAN_CONST, -1, &idx);
  if (s) {
    kiln_array_free(kiln_allocator_system(), value);
    return s;
  }
  ctx->plan->buffers[idx].value = *value;
  ctx->plan->buffers[idx].owned = true;
  memset(value, 0, sizeof(*value));
  *out = b;
  return NULL;
}

kiln_status_t kiln_lower_alias(kiln_lower_ctx_t* ctx, int32_t out_index, int32_t in_index) {
  if (out_index < 0 || out_index >= ctx->n_out || in_index < 0 || in_index >= ctx->n_in ||
      !ctx->out[out_index] || !ctx->in[in_index])
    return kiln_make_status(KILN_INTERNAL, "node '%s': bad alias %d <- %d", where(ctx), out_index,
                            in_index);
  const tir_buffer_t* o = ctx->out[out_index];
  const tir_buffer_t* i = ctx->in[in_index];
  if (tir_buffer_numel(o) != tir_buffer_numel(i) || o->dtype != i->dtype)
    return kiln_make_status(KILN_INTERNAL, "node '%s': alias of '%s' to '%s' changes size or dtype",
                            where(ctx), o->name, i->name);
  int32_t oi = kiln_plan_find_buffer(ctx->plan, o), ii = kiln_plan_find_buffer(ctx->plan, i);
  if (oi < 0 || ii < 0) return kiln_make_status(KILN_INTERNAL, "alias of unknown buffers");
  ctx->plan->buffers[oi].alias_of = ii;
  return NULL;
}
