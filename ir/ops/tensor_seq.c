/* Tensor ops that work along one axis as a sequence: CumSum, TopK and
 * ReverseSequence.
 *
 * The numeric rules are the compiled kernels' (lowering/lower_tensor_seq.c)
 * so both give the same bits: CumSum adds one element at a time to the
 * previous output (floats in double, rounded to the element type at each
 * step, which for f32 is f32 addition); TopK orders by value with NaN above
 * every number and ties broken by the lower index (kernels/host/dataflow.h,
 * which libkiln_rt's TopK of staged modules shares). */
#include <string.h>

#include "ir/ops/tensor_impl.h"
#include "ir/ops/tensor_index.h"
#include "kernels/host/dataflow.h"

/* Splits |s| around |axis|: outer (dims before), n (the axis), inner. */
static void split_axis(const kiln_shape_t* s, int32_t axis, int64_t* outer, int64_t* n, int64_t* inner) {
  *outer = *inner = 1;
  for (int32_t k = 0; k < axis; ++k) *outer *= s->dims[k];
  for (int32_t k = axis + 1; k < s->rank; ++k) *inner *= s->dims[k];
  *n = s->dims[axis];
}

/* ---- CumSum ----------------------------------------------------------------- */

kiln_status_t kiln_tensor_cumsum_axis(const kiln_array_t* a, int32_t rank, int32_t* out) {
  int64_t v[1], n = 0;
  KILN_TRY(kiln_tensor_read_ints("CumSum", "axis", a, v, 1, &n));
  if (n != 1) return kiln_make_status(KILN_INVALID_ARGUMENT, "CumSum: axis must hold one value");
  return kiln_tensor_axis("CumSum", "axis", v[0], rank, out);
}

kiln_status_t kiln_tensor_cumsum_infer(kiln_infer_t* ctx) {
  const kiln_tensor_t* x = ctx->in[0];
  KILN_TRY(kiln_tensor_int_input(ctx, "CumSum", 1, "axis"));
  if (x->dtype == KILN_DTYPE_BOOL)
    return kiln_make_status(KILN_INVALID_ARGUMENT, "CumSum: input '%s' is bool", x->name);
  if (x->shape.rank == 0) return kiln_make_status(KILN_INVALID_ARGUMENT, "CumSum: input '%s' is a scalar", x->name);
  const kiln_array_t* a = kiln_tensor_value(ctx, 1);
  int32_t axis;
  if (a && x->shape.rank > 0) KILN_TRY(kiln_tensor_cumsum_axis(a, x->shape.rank, &axis));
  kiln_infer_set(ctx, 0, x->dtype, &x->shape);
  return NULL;
}

kiln_status_t kiln_tensor_cumsum_run(const kiln_ref_ctx_t* ctx) {
  const kiln_array_t* x = ctx->in[0];
  kiln_array_t* y = ctx->out[0];
  int32_t axis;
  int64_t excl = 0, rev = 0;
  KILN_TRY(kiln_tensor_cumsum_axis(ctx->in[1], x->shape.rank, &axis));
  KILN_TRY(kiln_attr_int(ctx->node, "exclusive", 0, &excl));
  KILN_TRY(kiln_attr_int(ctx->node, "reverse", 0, &rev));
  if (y->dtype != x->dtype || !kiln_shape_equal(&x->shape, &y->shape))
    return kiln_make_status(KILN_INTERNAL, "CumSum: output does not match the input");
  int64_t outer, n, inner;
  split_axis(&x->shape, axis, &outer, &n, &inner);
  const kiln_dtype_t dt = x->dtype;
  const bool fl = kiln_dtype_is_float(dt);
  for (int64_t o = 0; o < outer; ++o) {
    for (int64_t e = 0; e < inner; ++e) {
      for (int64_t a = 0; a < n; ++a) {
        int64_t pos = rev ? n - 1 - a : a, prev = rev ? pos + 1 : pos - 1;
        size_t at = (size_t)((o * n + pos) * inner + e), pat = (size_t)((o * n + prev) * inner + e);
        /* inclusive: y[pos] = y[prev] + x[pos]; exclusive: y[prev] + x[prev] */
        size_t src = excl ? pat : at;
        if (fl) {
          double v = a == 0 ? 0.0 : kiln_load_f64(dt, y->data, pat) + kiln_load_f64(dt, x->data, src);
          if (a == 0 && !excl) v = kiln_load_f64(dt, x->data, at);
          kiln_store_f64(dt, y->data, at, v);
        } else {
          int64_t v = 0;
          if (a > 0) v = (int64_t)((uint64_t)kiln_load_i64(dt, y->data, pat) + (uint64_t)kiln_load_i64(dt, x->data, src));
          if (a == 0 && !excl) v = kiln_load_i64(dt, x->data, at);
          kiln_store_i64(dt, y->data, at, v);
        }
      }
    }
  }
  return NULL;
}

/* ---- TopK -------------------------------------------------------------------- */

kiln_status_t kiln_tensor_topk_attrs(const kiln_node_t* node, int32_t rank, int32_t* axis, bool* largest) {
  int64_t a = -1, l = 1;
  KILN_TRY(kiln_attr_int(node, "axis", -1, &a));
  KILN_TRY(kiln_attr_int(node, "largest", 1, &l));
  *largest = l != 0;
  if (rank == 0) return kiln_make_status(KILN_INVALID_ARGUMENT, "TopK: input is a scalar");
  return kiln_tensor_axis("TopK", "axis", a, rank, axis);
}

static kiln_status_t topk_k(const kiln_array_t* a, int64_t n, int64_t* k) {
  int64_t v[1], cnt = 0;
  KILN_TRY(kiln_tensor_read_ints("TopK", "K", a, v, 1, &cnt));
  if (cnt != 1) return kiln_make_status(KILN_INVALID_ARGUMENT, "TopK: K must hold one value");
  if (v[0] < 0 || (kiln_dim_known(n) && v[0] > n))
    return kiln_make_status(KILN_INVALID_ARGUMENT, "TopK: K = %lld is not in [0, %lld]", (long long)v[0], (long long)n);
  *k = v[0];
  return NULL;
}

kiln_status_t kiln_tensor_topk_infer(kiln_infer_t* ctx) {
  const kiln_tensor_t* x = ctx->in[0];
  KILN_TRY(kiln_tensor_int_input(ctx, "TopK", 1, "K"));
  if (x->dtype == KILN_DTYPE_BOOL) return kiln_make_status(KILN_INVALID_ARGUMENT, "TopK: input '%s' is bool", x->name);
  if (ctx->opset < 10) return kiln_make_status(KILN_UNSUPPORTED, "TopK: opset %lld (K as an attribute) is not supported", (long long)ctx->opset);
  kiln_shape_t out = x->shape;
  if (x->shape.rank >= 0) {
    int32_t axis;
    bool largest;
    KILN_TRY(kiln_tensor_topk_attrs(ctx->node, x->shape.rank, &axis, &largest));
    const kiln_array_t* kv = kiln_tensor_value(ctx, 1);
    out.dims[axis] = KILN_DIM_UNKNOWN;
    if (kv) KILN_TRY(topk_k(kv, x->shape.dims[axis], &out.dims[axis]));
    /* K known only at run time: a data-dependent dim bounded by the axis */
    int64_t bound = kiln_dim_known(x->shape.dims[axis]) ? x->shape.dims[axis] : -1;
    if (!kv) KILN_TRY(kiln_infer_datadep(ctx, 0, "k", bound, &out.dims[axis]));
    if (!kv) KILN_TRY(kiln_infer_datadep(ctx, 1, "k", bound, &out.dims[axis]));
  }
  kiln_infer_set(ctx, 0, x->dtype, &out);
  kiln_infer_set(ctx, 1, KILN_DTYPE_I64, &out);
  return NULL;
}

/* The order, the heap of the K best and the copy: kernels/host/dataflow.h,
 * shared with libkiln_rt's host kernel for staged modules. */

kiln_status_t kiln_tensor_topk_run(const kiln_ref_ctx_t* ctx) {
  const kiln_array_t* x = ctx->in[0];
  kiln_array_t* yv = ctx->out[0];
  kiln_array_t* yi = ctx->n_out > 1 ? ctx->out[1] : NULL;
  int32_t axis;
  bool largest;
  KILN_TRY(kiln_tensor_topk_attrs(ctx->node, x->shape.rank, &axis, &largest));
  int64_t outer, n, inner, k = 0;
  split_axis(&x->shape, axis, &outer, &n, &inner);
  KILN_TRY(topk_k(ctx->in[1], n, &k));
  kiln_shape_t want = x->shape;
  want.dims[axis] = k;
  if ((yv && (yv->dtype != x->dtype || !kiln_shape_equal(&yv->shape, &want))) ||
      (yi && (yi->dtype != KILN_DTYPE_I64 || !kiln_shape_equal(&yi->shape, &want))))
    return kiln_make_status(KILN_INTERNAL, "TopK: outputs do not match the input");
  if (n == 0 || k == 0) return NULL;
  /* idx, scratch, and the line's values read once (not per comparison) */
  int64_t* idx = NULL;
  KILN_TRY(kiln_allocator_malloc(ctx->allocator, sizeof(int64_t) * (size_t)n * 3, "TopK scratch", (void**)&idx));
  kiln_topk_run(x, outer, n, inner, k, largest, yv ? yv->data : NULL, yi ? (int64_t*)yi->data : NULL, idx);
  kiln_allocator_free(ctx->allocator, idx);
  return NULL;
}

/* ---- ReverseSequence ----------------------------------------------------------- */

kiln_status_t kiln_tensor_revseq_axes(const kiln_node_t* node, int32_t rank, int32_t* batch, int32_t* time) {
  int64_t b = 1, t = 0;
  KILN_TRY(kiln_attr_int(node, "batch_axis", 1, &b));
  KILN_TRY(kiln_attr_int(node, "time_axis", 0, &t));
  if (rank < 2 || !((b == 0 && t == 1) || (b == 1 && t == 0)))
    return kiln_make_status(KILN_INVALID_ARGUMENT,
                            "ReverseSequence: batch_axis %lld and time_axis %lld must be 0 and 1 (in some order) of a "
                            "tensor of rank >= 2 (rank %d)", (long long)b, (long long)t, (int)rank);
  *batch = (int32_t)b;
  *time = (int32_t)t;
  return NULL;
}

kiln_status_t kiln_tensor_reverse_sequence_infer(kiln_infer_t* ctx) {
  const kiln_tensor_t* x = ctx->in[0];
  const kiln_tensor_t* l = ctx->in[1];
  if (l->dtype != KILN_DTYPE_UNDEFINED && l->dtype != KILN_DTYPE_I64)
    return kiln_make_status(KILN_INVALID_ARGUMENT, "ReverseSequence: sequence_lens '%s' have dtype %s, expected i64",
                            l->name, kiln_dtype_name(l->dtype));
  if (x->shape.rank >= 0) {
    int32_t b, t;
    KILN_TRY(kiln_tensor_revseq_axes(ctx->node, x->shape.rank, &b, &t));
    int64_t nb = x->shape.dims[b], nl = l->shape.rank == 1 ? l->shape.dims[0] : KILN_DIM_UNKNOWN;
    if (l->shape.rank >= 0 && (l->shape.rank != 1 || (kiln_dim_known(nb) && kiln_dim_known(nl) && nb != nl)))
      return kiln_make_status(KILN_INVALID_ARGUMENT, "ReverseSequence: sequence_lens '%s' must hold one length per batch (%lld)",
                              l->name, (long long)nb);
    /* Constant lengths are checked at load so a bad model fails early. */
    const kiln_array_t* v = kiln_tensor_value(ctx, 1);
    const int64_t nt = x->shape.dims[t];
    for (int64_t i = 0; v && kiln_dim_known(nt) && i < kiln_array_numel(v); ++i) {
      int64_t len = kiln_load_i64(v->dtype, v->data, (size_t)i);
      if (len < 0 || len > nt)
        return kiln_make_status(KILN_OUT_OF_RANGE,
                                "ReverseSequence: sequence length out of range: sequence_lens[%lld] = %lld is not in "
                                "[0, %lld]", (long long)i, (long long)len, (long long)nt);
    }
  }
  kiln_infer_set(ctx, 0, x->dtype, &x->shape);
  return NULL;
}

kiln_status_t kiln_tensor_reverse_sequence_run(const kiln_ref_ctx_t* ctx) {
  const kiln_array_t* x = ctx->in[0];
  const kiln_array_t* lens = ctx->in[1];
  kiln_array_t* y = ctx->out[0];
  int32_t b, t;
  KILN_TRY(kiln_tensor_revseq_axes(ctx->node, x->shape.rank, &b, &t));
  const int64_t nb = x->shape.dims[b], nt = x->shape.dims[t];
  if (lens->dtype != KILN_DTYPE_I64 || kiln_array_numel(lens) != nb || y->dtype != x->dtype ||
      !kiln_shape_equal(&x->shape, &y->shape))
    return kiln_make_status(KILN_INTERNAL, "ReverseSequence: shapes do not match");
  for (int64_t i = 0; i < nb; ++i) {
    int64_t v = ((const int64_t*)lens->data)[i];
    if (v < 0 || v > nt)
      return kiln_make_status(KILN_OUT_OF_RANGE,
                              "ReverseSequence: sequence length out of range: sequence_lens[%lld] = %lld is not in "
                              "[0, %lld]", (long long)i, (long long)v, (long long)nt);
  }
  int64_t inner = 1;
  for (int32_t k = 2; k < x->shape.rank; ++k) inner *= x->shape.dims[k];
  const size_t esz = kiln_dtype_size(x->dtype);
  const int64_t s_b = b == 0 ? nt * inner : inner, s_t = t == 0 ? nb * inner : inner;
  for (int64_t bi = 0; bi < nb; ++bi) {
    const int64_t len = ((const int64_t*)lens->data)[bi];
    for (int64_t ti = 0; ti < nt; ++ti) {
      int64_t src = ti < len ? len - 1 - ti : ti;
      memcpy((char*)y->data + (size_t)(bi * s_b + ti * s_t) * esz, (const char*)x->data + (size_t)(bi * s_b + src * s_t) * esz,
             (size_t)inner * esz);
    }
  }
  return NULL;
}
