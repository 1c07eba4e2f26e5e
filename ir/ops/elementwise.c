/* The elementwise op family: the schema table plus the helpers shared by
 * elementwise_unary.c, elementwise_binary.c and elementwise_cast.c (dtype
 * checks, load-time folding, the broadcast iterator). See elementwise_impl.h
 * for the layout of the family and its numeric rules. */
#include <string.h>

#include "ir/ops/elementwise_impl.h"

static const char* op_name(const kiln_node_t* n) {
  return n && n->op_type ? n->op_type : "elementwise";
}

/* ---- checks ---------------------------------------------------------- */

kiln_status_t kiln_ew_check_dtype(const kiln_infer_t* ctx, int32_t i,
                                  const char* what, uint32_t mask) {
  const char* op = op_name(ctx->node);
  const kiln_tensor_t* t = kiln_ew_in(ctx, i);
  if (!t) {
    return kiln_make_status(KILN_INVALID_ARGUMENT,
                            "%s: missing required input '%s'", op, what);
  }
  if (t->dtype <= KILN_DTYPE_UNDEFINED || t->dtype >= KILN_DTYPE_COUNT_) {
    return kiln_make_status(KILN_INVALID_ARGUMENT,
                            "%s: input '%s' ('%s') has no known dtype", op,
                            what, t->name ? t->name : "");
  }
  if (!(mask & KILN_EW_BIT(t->dtype))) {
    return kiln_make_status(KILN_UNSUPPORTED,
                            "%s: input '%s' has dtype %s, which is not "
                            "supported",
                            op, what, kiln_dtype_name(t->dtype));
  }
  return NULL;
}

kiln_status_t kiln_ew_same_dtype(const kiln_infer_t* ctx, int32_t i,
                                 const char* what_i, int32_t j,
                                 const char* what_j) {
  const kiln_tensor_t* a = kiln_ew_in(ctx, i);
  const kiln_tensor_t* b = kiln_ew_in(ctx, j);
  if (a && b && a->dtype != b->dtype) {
    return kiln_make_status(KILN_INVALID_ARGUMENT,
                            "%s: inputs '%s' and '%s' must have the same "
                            "dtype, got %s and %s",
                            op_name(ctx->node), what_i, what_j,
                            kiln_dtype_name(a->dtype),
                            kiln_dtype_name(b->dtype));
  }
  return NULL;
}

kiln_status_t kiln_ew_check_out(const char* op, const kiln_array_t* out,
                                kiln_dtype_t dtype, int64_t numel) {
  if (!out || out->dtype != dtype || kiln_array_numel(out) != numel ||
      (numel > 0 && !out->data)) {
    return kiln_make_status(KILN_INTERNAL,
                            "%s: output array does not match its input "
                            "(expected %lld elements of %s)",
                            op, (long long)numel, kiln_dtype_name(dtype));
  }
  return NULL;
}

char* kiln_ew_shape_str(const kiln_infer_t* ctx, const kiln_shape_t* s,
                        char* buf, size_t n) {
  if (ctx && ctx->graph) return kiln_graph_format_shape(ctx->graph, s, buf, n);
  return kiln_shape_format(s, buf, n);
}

/* ---- scalar stores --------------------------------------------------- */

void kiln_ew_st_i(kiln_dtype_t t, void* data, int64_t i, int64_t v) {
  /* Conversions to narrower integers go through uint64 so they wrap
   * (two's complement) instead of relying on signed overflow. */
  switch (t) {
    case KILN_DTYPE_I8: ((int8_t*)data)[i] = (int8_t)(uint8_t)(uint64_t)v; break;
    case KILN_DTYPE_U8: ((uint8_t*)data)[i] = (uint8_t)(uint64_t)v; break;
    case KILN_DTYPE_I32:
      ((int32_t*)data)[i] = (int32_t)(uint32_t)(uint64_t)v;
      break;
    case KILN_DTYPE_I64: ((int64_t*)data)[i] = v; break;
    case KILN_DTYPE_BOOL: ((uint8_t*)data)[i] = v != 0; break;
    case KILN_DTYPE_F32: ((float*)data)[i] = (float)v; break;
    case KILN_DTYPE_F16: ((uint16_t*)data)[i] = kiln_f32_to_f16((float)v); break;
    /* the rest convert or wrap exactly as kiln_store_i64 does */
    default: kiln_store_i64(t, data, (size_t)i, v); break;
  }
}

void kiln_ew_st_f(kiln_dtype_t t, void* data, int64_t i, double v) {
  switch (t) {
    case KILN_DTYPE_F32: ((float*)data)[i] = (float)v; break;
    case KILN_DTYPE_F16: ((uint16_t*)data)[i] = kiln_f32_to_f16((float)v); break;
    case KILN_DTYPE_F64: ((double*)data)[i] = v; break;
    case KILN_DTYPE_BOOL: ((uint8_t*)data)[i] = v != 0.0; break;
    default: kiln_ew_st_i(t, data, i, kiln_ew_f2i(v)); break;
  }
}

/* ---- load-time folding ----------------------------------------------- */

#define FOLD_MAX_IN 16
#define FOLD_MAX_OUT 4

kiln_status_t kiln_ew_fold(kiln_infer_t* ctx,
                           kiln_status_t (*run)(const kiln_ref_ctx_t*)) {
  if (ctx->runtime || !ctx->graph) return NULL;
  if (ctx->n_in > FOLD_MAX_IN || ctx->n_out > FOLD_MAX_OUT || ctx->n_out < 1)
    return NULL;
  const kiln_array_t* ins[FOLD_MAX_IN] = {0};
  for (int32_t i = 0; i < ctx->n_in; ++i) {
    if (!ctx->in[i]) continue;
    if (!kiln_infer_has_value(ctx, i)) return NULL;
    ins[i] = &ctx->in[i]->value;
  }
  for (int32_t o = 0; o < ctx->n_out; ++o) {
    const kiln_tensor_t* t = ctx->out[o];
    if (!t) continue;
    if (t->dtype == KILN_DTYPE_UNDEFINED || !kiln_shape_is_static(&t->shape))
      return NULL;
    int64_t numel = 0;
    kiln_status_t s = kiln_shape_numel(&t->shape, &numel);
    if (s) {
      kiln_status_free(s);
      return NULL;
    }
    if (numel > KILN_EW_FOLD_MAX_ELEMS) return NULL;
  }

  kiln_array_t arrs[FOLD_MAX_OUT];
  kiln_array_t* outs[FOLD_MAX_OUT] = {0};
  memset(arrs, 0, sizeof arrs);
  kiln_status_t st = NULL;
  for (int32_t o = 0; o < ctx->n_out && !st; ++o) {
    const kiln_tensor_t* t = ctx->out[o];
    if (!t) continue;
    st = kiln_array_alloc(ctx->allocator, t->dtype, &t->shape, &arrs[o]);
    if (!st) outs[o] = &arrs[o];
  }
  if (!st) {
    kiln_ref_ctx_t rc = {
        .node = ctx->node,
        .opset = ctx->opset,
        .n_in = ctx->n_in,
        .in = ins,
        .n_out = ctx->n_out,
        .out = outs,
        .allocator = ctx->allocator,
    };
    st = run(&rc);
  }
  for (int32_t o = 0; o < ctx->n_out && !st; ++o)
    if (outs[o]) st = kiln_infer_set_value(ctx, o, outs[o]);
  for (int32_t o = 0; o < ctx->n_out; ++o) kiln_array_free(ctx->allocator, &arrs[o]);
  return st;
}

/* ---- broadcast iterator ---------------------------------------------- */

kiln_status_t kiln_ew_apply(const char* op, kiln_array_t* out, int32_t n_in,
                            const kiln_array_t* const* in,
                            kiln_ew_kernel_t kernel, const void* params) {
  KILN_ASSERT(n_in >= 0 && n_in < KILN_EW_MAX_OPERANDS);
  const kiln_shape_t* os = &out->shape;
  const int32_t r = os->rank;
  const int32_t n_ops = n_in + 1;
  if (r < 0 || r > KILN_MAX_RANK) {
    return kiln_make_status(KILN_INTERNAL, "%s: output rank %d is invalid", op,
                            (int)r);
  }
  int64_t st[KILN_EW_MAX_OPERANDS][KILN_MAX_RANK];
  size_t es[KILN_EW_MAX_OPERANDS];
  char* base[KILN_EW_MAX_OPERANDS];

  int64_t total = 1;
  for (int32_t k = r - 1; k >= 0; --k) {
    st[0][k] = total;
    total *= os->dims[k];
  }
  if (total == 0) return NULL;
  if (!out->data) {
    return kiln_make_status(KILN_INTERNAL, "%s: output is not allocated", op);
  }
  es[0] = kiln_dtype_size(out->dtype);
  base[0] = (char*)out->data;

  for (int32_t j = 0; j < n_in; ++j) {
    const kiln_shape_t* s = &in[j]->shape;
    bool ok = s->rank >= 0 && s->rank <= r && in[j]->data;
    for (int32_t k = 0; ok && k < s->rank; ++k) {
      int64_t d = s->dims[k], od = os->dims[r - s->rank + k];
      ok = d == od || d == 1;
    }
    if (!ok) {
      char a[96], b[96];
      return kiln_make_status(KILN_INTERNAL,
                              "%s: input %d of shape %s does not broadcast to "
                              "the output shape %s",
                              op, (int)j, kiln_shape_format(s, a, sizeof a),
                              kiln_shape_format(os, b, sizeof b));
    }
    kiln_broadcast_strides(s, os, st[j + 1]);
    es[j + 1] = kiln_dtype_size(in[j]->dtype);
    base[j + 1] = (char*)in[j]->data;
  }

  /* Collapse the loop nest, innermost dim first: size-1 dims vanish, and a
   * dim merges into the one inside it when every operand steps through both
   * as one contiguous (or one broadcast) run. */
  int64_t dims[KILN_MAX_RANK];
  int64_t cs[KILN_EW_MAX_OPERANDS][KILN_MAX_RANK];
  int32_t m = 0;
  for (int32_t k = r - 1; k >= 0; --k) {
    int64_t d = os->dims[k];
    if (d == 1) continue;
    if (m > 0) {
      bool merge = true;
      for (int32_t o = 0; o < n_ops && merge; ++o)
        merge = st[o][k] == cs[o][m - 1] * dims[m - 1];
      if (merge) {
        dims[m - 1] *= d;
        continue;
      }
    }
    dims[m] = d;
    for (int32_t o = 0; o < n_ops; ++o) cs[o][m] = st[o][k];
    ++m;
  }
  if (m == 0) {
    dims[0] = 1;
    for (int32_t o = 0; o < n_ops; ++o) cs[o][0] = 0;
    m = 1;
  }

  char* p[KILN_EW_MAX_OPERANDS];
  int64_t inner[KILN_EW_MAX_OPERANDS];
  int64_t step[KILN_EW_MAX_OPERANDS][KILN_MAX_RANK]; /* bytes per index step */
  for (int32_t o = 0; o < n_ops; ++o) {
    p[o] = base[o];
    inner[o] = cs[o][0];
    for (int32_t d = 1; d < m; ++d) step[o][d] = cs[o][d] * (int64_t)es[o];
  }
  int64_t idx[KILN_MAX_RANK] = {0};
  const int64_t outer = total / dims[0];
  for (int64_t it = 0; it < outer; ++it) {
    kernel(p, inner, dims[0], params);
    for (int32_t d = 1; d < m; ++d) {
      for (int32_t o = 0; o < n_ops; ++o) p[o] += step[o][d];
      if (++idx[d] < dims[d]) break;
      for (int32_t o = 0; o < n_ops; ++o) p[o] -= step[o][d] * dims[d];
      idx[d] = 0;
    }
  }
  return NULL;
}

/* ---- schema table ---------------------------------------------------- */

/* Identity, Dropout and Cast move data and do no arithmetic. */
static int64_t flops_zero(const kiln_infer_t* ctx) {
  (void)ctx;
  return 0;
}

/* Variadic Max/Min: one comparison per output element per extra input. */
static int64_t flops_variadic(const kiln_infer_t* ctx) {
  const kiln_tensor_t* t = ctx->n_out > 0 ? ctx->out[0] : NULL;
  if (!t || !kiln_shape_is_static(&t->shape)) return 0;
  int64_t n = kiln_shape_count(&t->shape);
  return ctx->n_in > 1 ? n * (ctx->n_in - 1) : 0;
}

#define KILN_OP(type, stem, min_in, max_in, min_out, max_out, flops, pattern, tmpl, lower) \
  {type, min_in, max_in, min_out, max_out, kiln_ew_infer_##stem,                           \
   kiln_ew_run_##stem, flops, KILN_PATTERN_##pattern, tmpl},

static const kiln_op_schema_t ops[] = {
#include "ir/ops/elementwise.def"
};
#undef KILN_OP

const kiln_op_family_t kiln_ops_elementwise = {
    "elementwise", ops, sizeof(ops) / sizeof(ops[0])};
