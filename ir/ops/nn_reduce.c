/* The Reduce* family: Mean, Sum, Max, Min, Prod, L1, L2, SumSquare, LogSum
 * and LogSumExp.
 *
 * axes is an attribute before ReduceSum-13 / opset 18 for the others and an
 * optional input from then on; empty axes reduce everything unless
 * noop_with_empty_axes=1, which makes the op an identity. Each kind is a
 * map applied to every element (|x|, x*x, exp x), a fold (+, *, max, min)
 * and a finish (/n, sqrt, log). Floats accumulate in double; integer sums
 * and products wrap like two's complement instead of overflowing. L2,
 * LogSum and LogSumExp are float only here (their integer results would be
 * truncated floats, which no model asks for). Reductions over an empty set
 * give the fold's identity after the finish: 0 (Sum, L1, L2, SumSquare),
 * NaN (Mean), 1 (Prod), -inf (LogSum, LogSumExp), and -inf / +inf or the
 * dtype's limits (Max / Min).
 */
#include <math.h>
#include <string.h>

#include "ir/ops/nn_internal.h"

typedef kiln_nn_red_kind_t red_kind_t;


typedef struct red_s {
  red_kind_t kind;
  const char* op;
  bool keepdims;
  bool identity;        /* noop_with_empty_axes with empty axes */
  bool axes_known;      /* false at load time when axes is a runtime input */
  bool reduce[KILN_MAX_RANK];
  kiln_shape_t out;
} red_t;

const char* kiln_nn_red_name(kiln_nn_red_kind_t k) {
  static const char* const names[] = {
      "ReduceMean", "ReduceSum", "ReduceMax", "ReduceMin", "ReduceProd",
      "ReduceL1", "ReduceL2", "ReduceSumSquare", "ReduceLogSum", "ReduceLogSumExp"};
  return names[k];
}

static const char* red_name(red_kind_t k) { return kiln_nn_red_name(k); }

/* The kinds whose integer results are exact (the others are float only). */
static bool red_int_ok(red_kind_t k) {
  return k != KILN_NN_RED_L2 && k != KILN_NN_RED_LOGSUM && k != KILN_NN_RED_LOGSUMEXP;
}

/* Shared by infer (tensors, values maybe unknown) and run (static arrays):
 * |axes| is NULL when unknown; |axes_count| is the number of axes or -1
 * when even that is unknown. */
static kiln_status_t red_setup(red_kind_t kind, const kiln_node_t* node,
                               const kiln_shape_t* x, const int64_t* axes,
                               int64_t axes_count, red_t* r) {
  memset(r, 0, sizeof(*r));
  r->kind = kind;
  r->op = red_name(kind);
  int64_t keep = 1, noop = 0;
  KILN_RETURN_IF_ERROR(kiln_attr_int(node, "keepdims", 1, &keep));
  KILN_RETURN_IF_ERROR(kiln_attr_int(node, "noop_with_empty_axes", 0, &noop));
  r->keepdims = keep != 0;
  if (axes_count == 0 && noop) {
    r->identity = true;
    r->axes_known = true;
    r->out = *x;
    return NULL;
  }
  if (x->rank < 0) {
    r->out = kiln_shape_unknown();
    return NULL;
  }
  const int32_t rank = x->rank;
  if (axes_count > 0 && !axes) {
    /* Which axes is unknown until run time; the rank may still be known. */
    r->out = kiln_shape_unknown();
    if (r->keepdims) {
      r->out.rank = rank;
    } else if (axes_count <= rank) {
      r->out.rank = rank - (int32_t)axes_count;
    }
    return NULL;
  }
  if (axes_count < 0) {
    r->out = kiln_shape_unknown();
    if (r->keepdims) r->out.rank = rank;
    return NULL;
  }
  r->axes_known = true;
  if (axes_count == 0) {
    for (int32_t i = 0; i < rank; ++i) r->reduce[i] = true;
  }
  for (int64_t i = 0; i < axes_count; ++i) {
    int64_t a = axes[i];
    if (a < -(int64_t)rank || a >= rank) {
      return kiln_make_status(KILN_INVALID_ARGUMENT,
                              "%s: axes[%lld] = %lld is out of range for rank "
                              "%d",
                              r->op, (long long)i, (long long)a, (int)rank);
    }
    int32_t ax = (int32_t)(a < 0 ? a + rank : a);
    if (r->reduce[ax]) {
      return kiln_make_status(KILN_INVALID_ARGUMENT,
                              "%s: axis %d appears twice in axes", r->op,
                              (int)ax);
    }
    r->reduce[ax] = true;
  }
  r->out.rank = 0;
  for (int32_t i = 0; i < rank; ++i) {
    if (!r->reduce[i]) {
      r->out.dims[r->out.rank++] = x->dims[i];
    } else if (r->keepdims) {
      r->out.dims[r->out.rank++] = 1;
    }
  }
  return NULL;
}

static bool axes_from_input(red_kind_t kind, int64_t opset) {
  return opset >= (kind == KILN_NN_RED_SUM ? 13 : 18);
}

/* Reads axes from the attribute or input 1, whichever the opset uses. */
static kiln_status_t red_axes_attr(red_kind_t kind, const kiln_node_t* node,
                                   int64_t opset, bool has_input,
                                   const int64_t** axes, int64_t* count,
                                   bool* from_input) {
  const int64_t* v = NULL;
  int64_t n = -1;
  KILN_RETURN_IF_ERROR(kiln_attr_ints(node, "axes", &v, &n));
  *from_input = axes_from_input(kind, opset);
  if (*from_input && n >= 0) {
    return kiln_make_status(KILN_INVALID_ARGUMENT,
                            "%s: axes is an input since opset %d, but the "
                            "node has an 'axes' attribute (opset %lld)",
                            red_name(kind), kind == KILN_NN_RED_SUM ? 13 : 18,
                            (long long)opset);
  }
  if (!*from_input && has_input) {
    return kiln_make_status(KILN_INVALID_ARGUMENT,
                            "%s: axes is an attribute before opset %d, but the "
                            "node has a second input (opset %lld)",
                            red_name(kind), kind == KILN_NN_RED_SUM ? 13 : 18,
                            (long long)opset);
  }
  *axes = v;
  *count = n < 0 ? 0 : n;
  return NULL;
}

static kiln_status_t red_dtype(red_kind_t kind, kiln_dtype_t t,
                               const char* name) {
  if (t == KILN_DTYPE_UNDEFINED) return NULL;
  if ((t == KILN_DTYPE_BOOL && kind != KILN_NN_RED_MAX && kind != KILN_NN_RED_MIN) ||
      (!kiln_dtype_is_float(t) && !red_int_ok(kind))) {
    return kiln_make_status(KILN_UNSUPPORTED,
                            "%s: input '%s' has dtype %s, which %s does not "
                            "support",
                            red_name(kind), name, kiln_dtype_name(t),
                            red_name(kind));
  }
  return NULL;
}

static kiln_status_t red_infer(kiln_infer_t* ctx, red_kind_t kind) {
  const kiln_tensor_t* x = ctx->in[0];
  const kiln_tensor_t* at = ctx->n_in > 1 ? ctx->in[1] : NULL;
  KILN_RETURN_IF_ERROR(red_dtype(kind, x->dtype, kiln_nn_in_name(ctx, 0)));
  const int64_t* axes = NULL;
  int64_t count = 0;
  bool from_input;
  KILN_RETURN_IF_ERROR(red_axes_attr(kind, ctx->node, ctx->opset, at != NULL,
                                     &axes, &count, &from_input));
  int64_t buf[KILN_MAX_RANK];
  if (from_input && at) {
    if (at->dtype != KILN_DTYPE_UNDEFINED && at->dtype != KILN_DTYPE_I64 &&
        at->dtype != KILN_DTYPE_I32) {
      return kiln_make_status(KILN_INVALID_ARGUMENT,
                              "%s: axes input '%s' has dtype %s, expected i64",
                              red_name(kind), kiln_nn_in_name(ctx, 1),
                              kiln_dtype_name(at->dtype));
    }
    if (at->shape.rank > 1) {
      return kiln_make_status(KILN_INVALID_ARGUMENT,
                              "%s: axes input '%s' has rank %d, expected 1",
                              red_name(kind), kiln_nn_in_name(ctx, 1),
                              (int)at->shape.rank);
    }
    if (kiln_infer_has_value(ctx, 1)) {
      KILN_RETURN_IF_ERROR(kiln_infer_read_ints(ctx, 1, buf, KILN_MAX_RANK, &count),
                           "%s: axes", red_name(kind));
      axes = buf;
    } else {
      axes = NULL;
      count = at->shape.rank == 1 && kiln_dim_known(at->shape.dims[0])
                  ? at->shape.dims[0]
                  : at->shape.rank == 0 ? 1 : -1;
    }
  }
  red_t r;
  KILN_RETURN_IF_ERROR(red_setup(kind, ctx->node, &x->shape, axes, count, &r));
  kiln_infer_set(ctx, 0, x->dtype, &r.out);
  return NULL;
}

static int64_t red_flops(const kiln_infer_t* ctx) {
  const kiln_shape_t* x = &ctx->in[0]->shape;
  return kiln_shape_is_static(x) ? kiln_shape_count(x) : 0;
}

static double highest_f64(kiln_dtype_t t) {
  switch (t) {
    case KILN_DTYPE_I8: return 127.0;
    case KILN_DTYPE_U8: return 255.0;
    case KILN_DTYPE_BOOL: return 1.0;
    default: return INFINITY;
  }
}

static int64_t highest_i64(kiln_dtype_t t) {
  switch (t) {
    case KILN_DTYPE_I8: return 127;
    case KILN_DTYPE_U8: return 255;
    case KILN_DTYPE_BOOL: return 1;
    case KILN_DTYPE_I32: return INT32_MAX;
    default: return INT64_MAX;
  }
}

static double lowest_f64(kiln_dtype_t t) {
  switch (t) {
    case KILN_DTYPE_I8: return -128.0;
    case KILN_DTYPE_U8: return 0.0;
    case KILN_DTYPE_BOOL: return 0.0;
    default: return -INFINITY;
  }
}

static int64_t lowest_i64(kiln_dtype_t t) {
  switch (t) {
    case KILN_DTYPE_I8: return -128;
    case KILN_DTYPE_U8: return 0;
    case KILN_DTYPE_BOOL: return 0;
    case KILN_DTYPE_I32: return INT32_MIN;
    default: return INT64_MIN;
  }
}

static double red_ident_f64(red_kind_t k, kiln_dtype_t t) {
  return k == KILN_NN_RED_MAX ? lowest_f64(t) : k == KILN_NN_RED_MIN ? highest_f64(t) : k == KILN_NN_RED_PROD ? 1.0 : 0.0;
}

static int64_t red_ident_i64(red_kind_t k, kiln_dtype_t t) {
  return k == KILN_NN_RED_MAX ? lowest_i64(t) : k == KILN_NN_RED_MIN ? highest_i64(t) : k == KILN_NN_RED_PROD ? 1 : 0;
}

/* acc (fold) map(v). Max and Min propagate NaN, as numpy does. */
static double red_fold_f64(red_kind_t k, double acc, double v) {
  switch (k) {
    case KILN_NN_RED_MAX: return v > acc || isnan(v) ? v : acc;
    case KILN_NN_RED_MIN: return v < acc || isnan(v) ? v : acc;
    case KILN_NN_RED_PROD: return acc * v;
    case KILN_NN_RED_L1: return acc + fabs(v);
    case KILN_NN_RED_L2:
    case KILN_NN_RED_SUMSQ: return acc + v * v;
    case KILN_NN_RED_LOGSUMEXP: return acc + exp(v);
    default: return acc + v;
  }
}

/* Integer sums and products wrap (unsigned arithmetic, no overflow UB). */
static int64_t red_fold_i64(red_kind_t k, int64_t acc, int64_t v) {
  const uint64_t a = (uint64_t)acc, u = (uint64_t)v;
  switch (k) {
    case KILN_NN_RED_MAX: return v > acc ? v : acc;
    case KILN_NN_RED_MIN: return v < acc ? v : acc;
    case KILN_NN_RED_PROD: return (int64_t)(a * u);
    case KILN_NN_RED_L1: return (int64_t)(a + (v < 0 ? 0 - u : u));
    case KILN_NN_RED_SUMSQ: return (int64_t)(a + u * u);
    default: return (int64_t)(a + u);
  }
}

static kiln_status_t red_run(const kiln_ref_ctx_t* ctx, red_kind_t kind) {
  const kiln_array_t* X = ctx->in[0];
  const kiln_array_t* A = ctx->n_in > 1 ? ctx->in[1] : NULL;
  kiln_array_t* Y = ctx->out[0];
  const int64_t* axes = NULL;
  int64_t count = 0;
  bool from_input;
  KILN_RETURN_IF_ERROR(red_axes_attr(kind, ctx->node, ctx->opset, A != NULL,
                                     &axes, &count, &from_input));
  int64_t buf[KILN_MAX_RANK];
  if (from_input && A) {
    count = kiln_array_numel(A);
    if (count > KILN_MAX_RANK) {
      return kiln_make_status(KILN_INVALID_ARGUMENT,
                              "%s: %lld axes for a rank-%d input",
                              red_name(kind), (long long)count,
                              (int)X->shape.rank);
    }
    for (int64_t i = 0; i < count; ++i)
      buf[i] = kiln_load_i64(A->dtype, A->data, (size_t)i);
    axes = buf;
  }
  red_t r;
  KILN_RETURN_IF_ERROR(red_setup(kind, ctx->node, &X->shape, axes, count, &r));
  if (r.identity) {
    if (Y->nbytes) memcpy(Y->data, X->data, Y->nbytes);
    return NULL;
  }
  /* Output strides per input dim (0 on reduced dims). */
  const kiln_shape_t* xs = &X->shape;
  int64_t ostr[KILN_MAX_RANK];
  int64_t st = 1;
  for (int32_t i = xs->rank - 1; i >= 0; --i) {
    ostr[i] = r.reduce[i] ? 0 : st;
    if (!r.reduce[i]) st *= xs->dims[i];
  }
  const int64_t nin = kiln_array_numel(X), nout = kiln_array_numel(Y);
  int64_t group = 1;
  for (int32_t i = 0; i < xs->rank; ++i)
    if (r.reduce[i]) group *= xs->dims[i];
  const bool is_float = kiln_dtype_is_float(X->dtype);
  double* accf = NULL;
  int64_t* acci = NULL;
  kiln_status_t s =
      is_float ? kiln_nn_scratch(ctx, nout, sizeof(double), r.op, (void**)&accf)
               : kiln_nn_scratch(ctx, nout, sizeof(int64_t), r.op, (void**)&acci);
  if (s) return s;
  for (int64_t o = 0; o < nout; ++o) {
    if (is_float) accf[o] = red_ident_f64(kind, X->dtype);
    else acci[o] = red_ident_i64(kind, X->dtype);
  }
  int64_t idx[KILN_MAX_RANK] = {0};
  int64_t off = 0;
  const float* xf = X->dtype == KILN_DTYPE_F32 ? (const float*)X->data : NULL;
  for (int64_t i = 0; i < nin; ++i) {
    if (is_float) {
      double v = xf ? (double)xf[i] : kiln_load_f64(X->dtype, X->data, (size_t)i);
      accf[off] = red_fold_f64(kind, accf[off], v);
    } else {
      acci[off] = red_fold_i64(kind, acci[off], kiln_load_i64(X->dtype, X->data, (size_t)i));
    }
    for (int32_t d = xs->rank - 1; d >= 0; --d) {
      off += ostr[d];
      if (++idx[d] < xs->dims[d]) break;
      off -= ostr[d] * xs->dims[d];
      idx[d] = 0;
    }
  }
  for (int64_t o = 0; o < nout; ++o) {
    if (is_float) {
      double v = accf[o];
      if (kind == KILN_NN_RED_MEAN) v = v / (double)group; /* 0/0 = NaN on empty */
      if (kind == KILN_NN_RED_L2) v = sqrt(v);
      if (kind == KILN_NN_RED_LOGSUM || kind == KILN_NN_RED_LOGSUMEXP) v = log(v);
      kiln_store_f64(Y->dtype, Y->data, (size_t)o, v);
    } else {
      int64_t v = acci[o];
      if (kind == KILN_NN_RED_MEAN) v = group ? v / group : 0;
      kiln_store_i64(Y->dtype, Y->data, (size_t)o, v);
    }
  }
  kiln_nn_scratch_free(ctx, accf);
  kiln_nn_scratch_free(ctx, acci);
  return NULL;
}

kiln_status_t kiln_nn_reduce_mean_infer(kiln_infer_t* ctx) {
  return red_infer(ctx, KILN_NN_RED_MEAN);
}
kiln_status_t kiln_nn_reduce_mean_run(const kiln_ref_ctx_t* ctx) {
  return red_run(ctx, KILN_NN_RED_MEAN);
}
int64_t kiln_nn_reduce_mean_flops(const kiln_infer_t* ctx) { return red_flops(ctx); }

kiln_status_t kiln_nn_reduce_sum_infer(kiln_infer_t* ctx) {
  return red_infer(ctx, KILN_NN_RED_SUM);
}
kiln_status_t kiln_nn_reduce_sum_run(const kiln_ref_ctx_t* ctx) {
  return red_run(ctx, KILN_NN_RED_SUM);
}
int64_t kiln_nn_reduce_sum_flops(const kiln_infer_t* ctx) { return red_flops(ctx); }

kiln_status_t kiln_nn_reduce_max_infer(kiln_infer_t* ctx) {
  return red_infer(ctx, KILN_NN_RED_MAX);
}
kiln_status_t kiln_nn_reduce_max_run(const kiln_ref_ctx_t* ctx) {
  return red_run(ctx, KILN_NN_RED_MAX);
}
int64_t kiln_nn_reduce_max_flops(const kiln_infer_t* ctx) { return red_flops(ctx); }

/* The kinds added after Mean/Sum/Max: one line each. */
#define RED_ENTRY(fn, kind)                                                     \
  kiln_status_t kiln_nn_##fn##_infer(kiln_infer_t* ctx) { return red_infer(ctx, kind); } \
  kiln_status_t kiln_nn_##fn##_run(const kiln_ref_ctx_t* ctx) { return red_run(ctx, kind); } \
  int64_t kiln_nn_##fn##_flops(const kiln_infer_t* ctx) { return red_flops(ctx); }
RED_ENTRY(reduce_min, KILN_NN_RED_MIN)
RED_ENTRY(reduce_prod, KILN_NN_RED_PROD)
RED_ENTRY(reduce_l1, KILN_NN_RED_L1)
RED_ENTRY(reduce_l2, KILN_NN_RED_L2)
RED_ENTRY(reduce_sum_square, KILN_NN_RED_SUMSQ)
RED_ENTRY(reduce_log_sum, KILN_NN_RED_LOGSUM)
RED_ENTRY(reduce_log_sum_exp, KILN_NN_RED_LOGSUMEXP)
