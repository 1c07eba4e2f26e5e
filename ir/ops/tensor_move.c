/* Tensor ops that move data around: Transpose, Concat, Split, Slice and
 * Gather. Each run() re-derives its parameters from the arrays it is given
 * and checks them against the allocated outputs, so a kernel never reads or
 * writes outside its buffers even if it disagrees with inference. */
#include <string.h>

#include "ir/ops/tensor_impl.h"
#include "ir/ops/slice.h"

static int64_t prod(const int64_t* dims, int32_t from, int32_t to) {
  int64_t p = 1;
  for (int32_t k = from; k < to; ++k) p *= dims[k];
  return p;
}

/* ---- Transpose -------------------------------------------------------- */

/* The permutation: the attribute (validated) or the reversal of |rank|. */
static kiln_status_t transpose_perm(const kiln_node_t* node, int32_t rank,
                                    int32_t* perm) {
  const int64_t* p = NULL;
  int64_t n = -1;
  KILN_TRY(kiln_attr_ints(node, "perm", &p, &n));
  if (n < 0) {
    for (int32_t k = 0; k < rank; ++k) perm[k] = rank - 1 - k;
    return NULL;
  }
  if (n != rank) {
    return kiln_make_status(KILN_INVALID_ARGUMENT,
                            "Transpose: perm has %lld entries, input has rank %d",
                            (long long)n, (int)rank);
  }
  bool seen[KILN_MAX_RANK] = {false};
  for (int32_t k = 0; k < rank; ++k) {
    if (p[k] < 0 || p[k] >= rank || seen[p[k]]) {
      return kiln_make_status(KILN_INVALID_ARGUMENT,
                              "Transpose: perm[%d] = %lld is not a permutation "
                              "entry for rank %d",
                              (int)k, (long long)p[k], (int)rank);
    }
    seen[p[k]] = true;
    perm[k] = (int32_t)p[k];
  }
  return NULL;
}

kiln_status_t kiln_tensor_transpose_infer(kiln_infer_t* ctx) {
  const kiln_tensor_t* x = ctx->in[0];
  int32_t r = x->shape.rank;
  if (r < 0) {
    const int64_t* p = NULL;
    int64_t n = -1;
    KILN_TRY(kiln_attr_ints(ctx->node, "perm", &p, &n));
    KILN_TRY(kiln_tensor_check_rank("Transpose", n));
    kiln_shape_t s = kiln_tensor_unknown_rank((int32_t)n);
    kiln_infer_set(ctx, 0, x->dtype, &s);
    return NULL;
  }
  int32_t perm[KILN_MAX_RANK];
  KILN_TRY(transpose_perm(ctx->node, r, perm));
  kiln_shape_t out = kiln_tensor_unknown_rank(r);
  for (int32_t k = 0; k < r; ++k) out.dims[k] = x->shape.dims[perm[k]];
  kiln_infer_set(ctx, 0, x->dtype, &out);
  return NULL;
}

kiln_status_t kiln_tensor_transpose_run(const kiln_ref_ctx_t* ctx) {
  const kiln_array_t* x = ctx->in[0];
  kiln_array_t* y = ctx->out[0];
  int32_t r = x->shape.rank;
  int32_t perm[KILN_MAX_RANK];
  KILN_TRY(transpose_perm(ctx->node, r, perm));
  int64_t xs[KILN_MAX_RANK], ss[KILN_MAX_RANK];
  kiln_tensor_strides(&x->shape, xs);
  if (y->shape.rank != r) {
    return kiln_make_status(KILN_INTERNAL, "Transpose: output rank mismatch");
  }
  for (int32_t k = 0; k < r; ++k) {
    if (y->shape.dims[k] != x->shape.dims[perm[k]]) {
      return kiln_make_status(KILN_INTERNAL, "Transpose: output shape mismatch");
    }
    ss[k] = xs[perm[k]];
  }
  kiln_tensor_strided_copy(y->data, x->data, kiln_dtype_size(x->dtype), r,
                           y->shape.dims, ss, 0);
  return NULL;
}

/* ---- Concat ----------------------------------------------------------- */

static kiln_status_t concat_axis(const kiln_node_t* node, int64_t opset,
                                 int32_t rank, int32_t* out_axis) {
  int64_t axis = 1;
  if (opset >= 4) {
    KILN_TRY(kiln_attr_int_required(node, "axis", &axis));
  } else {
    KILN_TRY(kiln_attr_int(node, "axis", 1, &axis));
  }
  if (rank == 0) {
    return kiln_make_status(KILN_INVALID_ARGUMENT, "Concat: inputs are scalars");
  }
  return kiln_tensor_axis("Concat", "axis", axis, rank, out_axis);
}

kiln_status_t kiln_tensor_concat_infer(kiln_infer_t* ctx) {
  int32_t r = -1;
  for (int32_t i = 0; i < ctx->n_in; ++i) {
    const kiln_tensor_t* t = ctx->in[i];
    if (!t) {
      return kiln_make_status(KILN_INVALID_ARGUMENT, "Concat: input %d is omitted",
                              (int)i);
    }
    if (t->shape.rank < 0) continue;
    if (r >= 0 && t->shape.rank != r) {
      return kiln_make_status(KILN_INVALID_ARGUMENT,
                              "Concat: input %d '%s' has rank %d, input 0 has %d",
                              (int)i, t->name, (int)t->shape.rank, (int)r);
    }
    r = t->shape.rank;
  }
  KILN_TRY(kiln_tensor_same_dtype(ctx, "Concat", 0, ctx->n_in - 1));
  kiln_dtype_t dt = ctx->in[0]->dtype;
  if (r < 0) {
    kiln_shape_t s = kiln_shape_unknown();
    kiln_infer_set(ctx, 0, dt, &s);
    return NULL;
  }
  int32_t axis;
  KILN_TRY(concat_axis(ctx->node, ctx->opset, r, &axis));
  kiln_shape_t out = kiln_tensor_unknown_rank(r);
  int64_t sum = 0;
  bool sum_known = true;
  for (int32_t k = 0; k < r; ++k) {
    int64_t d = KILN_DIM_UNKNOWN;
    for (int32_t i = 0; i < ctx->n_in; ++i) {
      const kiln_shape_t* s = &ctx->in[i]->shape;
      int64_t e = s->rank < 0 ? KILN_DIM_UNKNOWN : s->dims[k];
      if (k == axis) {
        if (!kiln_dim_known(e) || __builtin_add_overflow(sum, e, &sum)) sum_known = false;
        continue;
      }
      if (kiln_dim_known(e) && kiln_dim_known(d) && e != d) {
        char a[160], b[160];
        return kiln_make_status(
            KILN_INVALID_ARGUMENT,
            "Concat: input %d '%s' has shape %s, which differs from %s in dim "
            "%d (only axis %d may differ)",
            (int)i, ctx->in[i]->name, kiln_tensor_fmt(ctx, s, a, sizeof a),
            kiln_tensor_fmt(ctx, &ctx->in[0]->shape, b, sizeof b), (int)k,
            (int)axis);
      }
      /* Prefer a known size, then a symbol, over unknown. */
      if (kiln_dim_known(e) || d == KILN_DIM_UNKNOWN) d = e;
    }
    out.dims[k] = d;
  }
  out.dims[axis] = sum_known ? sum : KILN_DIM_UNKNOWN;
  kiln_infer_set(ctx, 0, dt, &out);
  return NULL;
}

kiln_status_t kiln_tensor_concat_run(const kiln_ref_ctx_t* ctx) {
  kiln_array_t* y = ctx->out[0];
  int32_t r = y->shape.rank, axis;
  KILN_TRY(concat_axis(ctx->node, ctx->opset, r, &axis));
  size_t esz = kiln_dtype_size(y->dtype);
  int64_t outer = prod(y->shape.dims, 0, axis);
  int64_t inner = prod(y->shape.dims, axis + 1, r);
  /* Check every input against the output before copying anything. */
  int64_t sum = 0;
  for (int32_t i = 0; i < ctx->n_in; ++i) {
    const kiln_array_t* x = ctx->in[i];
    bool ok = x && x->dtype == y->dtype && x->shape.rank == r;
    for (int32_t k = 0; ok && k < r; ++k) {
      ok = (k == axis) || x->shape.dims[k] == y->shape.dims[k];
    }
    if (!ok) {
      return kiln_make_status(KILN_INVALID_ARGUMENT,
                              "Concat: input %d does not match the output", (int)i);
    }
    sum += x->shape.dims[axis];
  }
  if (sum != y->shape.dims[axis]) {
    return kiln_make_status(KILN_INTERNAL, "Concat: output axis size mismatch");
  }
  char* dst = (char*)y->data;
  for (int64_t o = 0; o < outer; ++o) {
    for (int32_t i = 0; i < ctx->n_in; ++i) {
      size_t chunk = (size_t)(ctx->in[i]->shape.dims[axis] * inner) * esz;
      if (!chunk) continue;
      memcpy(dst, (const char*)ctx->in[i]->data + (size_t)o * chunk, chunk);
      dst += chunk;
    }
  }
  return NULL;
}

/* ---- Split ------------------------------------------------------------ */

/* How the split axis is cut: an explicit list (attribute or input) or equal
 * parts of |chunk| with a smaller last part. */
typedef struct {
  const int64_t* list;     /* from the attribute */
  const kiln_array_t* arr; /* from the input */
  int64_t chunk, last;     /* equal parts when list and arr are NULL */
} split_plan_t;

static int64_t plan_size(const split_plan_t* p, int32_t i, int32_t n_out) {
  if (p->list) return p->list[i];
  if (p->arr) return kiln_load_i64(p->arr->dtype, p->arr->data, (size_t)i);
  return (i == n_out - 1) ? p->last : p->chunk;
}

/* Builds the plan for an axis of size |dim| (maybe unknown). |arr| is the
 * 'split' input's value (NULL when omitted); |arr_unknown| says it is given
 * but unknown. *out_known is false when the sizes cannot be told. */
static kiln_status_t split_plan(const kiln_node_t* node, int64_t opset,
                                int32_t n_out, int64_t dim,
                                const kiln_array_t* arr, bool arr_unknown,
                                split_plan_t* p, bool* out_known) {
  memset(p, 0, sizeof *p);
  *out_known = false;
  int64_t n_list = -1;
  if (arr) {
    if (arr->dtype != KILN_DTYPE_I64 && arr->dtype != KILN_DTYPE_I32) {
      return kiln_make_status(KILN_INVALID_ARGUMENT,
                              "Split: input 'split' has dtype %s, expected i64",
                              kiln_dtype_name(arr->dtype));
    }
    p->arr = arr;
    n_list = kiln_array_numel(arr);
  } else if (arr_unknown) {
    return NULL;
  } else if (opset < 13) {
    KILN_TRY(kiln_attr_ints(node, "split", &p->list, &n_list));
  }
  int64_t num = -1;
  KILN_TRY(kiln_attr_int(node, "num_outputs", -1, &num));
  if (n_list >= 0 && num >= 0) {
    return kiln_make_status(KILN_INVALID_ARGUMENT,
                            "Split: both 'split' and num_outputs are given");
  }
  if (n_list == 0) {
    /* An empty split input reads as "not given" (Split-13 equal parts). */
    p->arr = NULL;
    p->list = NULL;
    n_list = -1;
  }
  if (n_list >= 0) {
    if (n_list != n_out) {
      return kiln_make_status(KILN_INVALID_ARGUMENT,
                              "Split: 'split' has %lld entries for %d outputs",
                              (long long)n_list, (int)n_out);
    }
    int64_t sum = 0;
    for (int32_t i = 0; i < n_out; ++i) {
      int64_t s = plan_size(p, i, n_out);
      if (s < 0) {
        return kiln_make_status(KILN_INVALID_ARGUMENT,
                                "Split: split[%d] is %lld, sizes must be >= 0",
                                (int)i, (long long)s);
      }
      if (__builtin_add_overflow(sum, s, &sum)) sum = INT64_MAX;
    }
    if (kiln_dim_known(dim) && sum != dim) {
      return kiln_make_status(KILN_INVALID_ARGUMENT,
                              "Split: split sizes add up to %lld, the axis has "
                              "size %lld",
                              (long long)sum, (long long)dim);
    }
    *out_known = true;
    return NULL;
  }
  if (num >= 0 && num != n_out) {
    return kiln_make_status(KILN_INVALID_ARGUMENT,
                            "Split: num_outputs is %lld but the node has %d "
                            "outputs",
                            (long long)num, (int)n_out);
  }
  if (!kiln_dim_known(dim)) return NULL;
  if (opset >= 18) {
    /* Equal parts of ceil(dim / n) with a smaller last part. */
    p->chunk = (dim + n_out - 1) / n_out;
    p->last = dim - p->chunk * (n_out - 1);
    if (p->last < 0) {
      return kiln_make_status(KILN_INVALID_ARGUMENT,
                              "Split: an axis of size %lld cannot be split into "
                              "%d parts of %lld",
                              (long long)dim, (int)n_out, (long long)p->chunk);
    }
  } else {
    if (dim % n_out != 0) {
      return kiln_make_status(KILN_INVALID_ARGUMENT,
                              "Split: an axis of size %lld cannot be split into "
                              "%d equal parts",
                              (long long)dim, (int)n_out);
    }
    p->chunk = p->last = dim / n_out;
  }
  *out_known = true;
  return NULL;
}

kiln_status_t kiln_tensor_split_infer(kiln_infer_t* ctx) {
  const kiln_tensor_t* x = ctx->in[0];
  if (kiln_tensor_in(ctx, 1)) KILN_TRY(kiln_tensor_int_input(ctx, "Split", 1, "split"));
  int32_t r = x->shape.rank;
  if (r < 0) {
    kiln_shape_t s = kiln_shape_unknown();
    for (int32_t i = 0; i < ctx->n_out; ++i) kiln_infer_set(ctx, i, x->dtype, &s);
    return NULL;
  }
  int64_t a = 0;
  int32_t axis;
  KILN_TRY(kiln_attr_int(ctx->node, "axis", 0, &a));
  KILN_TRY(kiln_tensor_axis("Split", "axis", a, r, &axis));
  const kiln_array_t* arr = kiln_tensor_value(ctx, 1);
  bool arr_unknown = kiln_tensor_in(ctx, 1) && !arr;
  split_plan_t plan;
  bool known;
  KILN_TRY(split_plan(ctx->node, ctx->opset, ctx->n_out, x->shape.dims[axis],
                      arr, arr_unknown, &plan, &known));
  for (int32_t i = 0; i < ctx->n_out; ++i) {
    kiln_shape_t s = x->shape;
    s.dims[axis] = known ? plan_size(&plan, i, ctx->n_out) : KILN_DIM_UNKNOWN;
    kiln_infer_set(ctx, i, x->dtype, &s);
  }
  return NULL;
}

kiln_status_t kiln_tensor_split_run(const kiln_ref_ctx_t* ctx) {
  const kiln_array_t* x = ctx->in[0];
  int32_t r = x->shape.rank, axis;
  int64_t a = 0;
  KILN_TRY(kiln_attr_int(ctx->node, "axis", 0, &a));
  KILN_TRY(kiln_tensor_axis("Split", "axis", a, r, &axis));
  split_plan_t plan;
  bool known;
  KILN_TRY(split_plan(ctx->node, ctx->opset, ctx->n_out, x->shape.dims[axis],
                      kiln_tensor_arr(ctx, 1), false, &plan, &known));
  if (!known) return kiln_make_status(KILN_INTERNAL, "Split: sizes unknown at run time");
  for (int32_t i = 0; i < ctx->n_out; ++i) {
    const kiln_array_t* y = ctx->out[i];
    if (!y) continue;
    bool ok = y->dtype == x->dtype && y->shape.rank == r;
    for (int32_t k = 0; ok && k < r; ++k) {
      ok = y->shape.dims[k] ==
           (k == axis ? plan_size(&plan, i, ctx->n_out) : x->shape.dims[k]);
    }
    if (!ok) return kiln_make_status(KILN_INTERNAL, "Split: output %d shape mismatch", (int)i);
  }
  size_t esz = kiln_dtype_size(x->dtype);
  int64_t outer = prod(x->shape.dims, 0, axis);
  int64_t inner = prod(x->shape.dims, axis + 1, r);
  size_t row = (size_t)(x->shape.dims[axis] * inner) * esz;
  size_t off = 0; /* byte offset of output i's part inside one row */
  for (int32_t i = 0; i < ctx->n_out; ++i) {
    size_t chunk = (size_t)(plan_size(&plan, i, ctx->n_out) * inner) * esz;
    kiln_array_t* y = ctx->out[i];
    if (y && chunk) {
      for (int64_t o = 0; o < outer; ++o) {
        memcpy((char*)y->data + (size_t)o * chunk,
               (const char*)x->data + (size_t)o * row + off, chunk);
      }
    }
    off += chunk;
  }
  return NULL;
}

/* ---- Slice ------------------------------------------------------------ */


/* Slice-1 carries starts/ends/axes as attributes. */
kiln_status_t kiln_slice_args_attr(const kiln_node_t* node, slice_args_t* a) {
  const int64_t *s = NULL, *e = NULL, *ax = NULL;
  int64_t ns = -1, ne = -1, na = -1;
  KILN_TRY(kiln_attr_ints(node, "starts", &s, &ns));
  KILN_TRY(kiln_attr_ints(node, "ends", &e, &ne));
  KILN_TRY(kiln_attr_ints(node, "axes", &ax, &na));
  if (ns < 0 || ne < 0) {
    return kiln_make_status(KILN_INVALID_ARGUMENT,
                            "Slice: missing required attribute '%s'",
                            ns < 0 ? "starts" : "ends");
  }
  if (ns != ne || (na >= 0 && na != ns)) {
    return kiln_make_status(KILN_INVALID_ARGUMENT,
                            "Slice: starts, ends and axes have %lld, %lld and "
                            "%lld entries",
                            (long long)ns, (long long)ne, (long long)na);
  }
  if (ns > KILN_MAX_RANK) {
    return kiln_make_status(KILN_INVALID_ARGUMENT, "Slice: %lld starts for at most %d axes",
                            (long long)ns, KILN_MAX_RANK);
  }
  a->n = ns;
  for (int64_t k = 0; k < ns; ++k) {
    a->starts[k] = s[k];
    a->ends[k] = e[k];
    a->axes[k] = na >= 0 ? ax[k] : k;
    a->steps[k] = 1;
  }
  return NULL;
}

/* Slice-10+ reads starts, ends and the optional axes and steps inputs. */
kiln_status_t kiln_slice_args_arrays(const kiln_array_t* const* in, slice_args_t* a) {
  static const char* const names[] = {"starts", "ends", "axes", "steps"};
  int64_t* dst[] = {a->starts, a->ends, a->axes, a->steps};
  int64_t n[4] = {-1, -1, -1, -1};
  for (int k = 0; k < 4; ++k) {
    if (!in[k]) continue;
    KILN_TRY(kiln_tensor_read_ints("Slice", names[k], in[k], dst[k], KILN_MAX_RANK, &n[k]));
  }
  if (n[0] < 0 || n[1] < 0) {
    return kiln_make_status(KILN_INVALID_ARGUMENT, "Slice: missing required input '%s'",
                            n[0] < 0 ? "starts" : "ends");
  }
  if (n[1] != n[0] || (n[2] >= 0 && n[2] != n[0]) || (n[3] >= 0 && n[3] != n[0])) {
    return kiln_make_status(KILN_INVALID_ARGUMENT,
                            "Slice: starts, ends, axes and steps have %lld, "
                            "%lld, %lld and %lld entries",
                            (long long)n[0], (long long)n[1], (long long)n[2],
                            (long long)n[3]);
  }
  a->n = n[0];
  for (int64_t k = 0; k < a->n; ++k) {
    if (n[2] < 0) a->axes[k] = k;
    if (n[3] < 0) a->steps[k] = 1;
  }
  return NULL;
}

/* Per input axis: first index, step and element count of the slice. Axes
 * not named keep start 0, step 1 and their full size. Unknown dims get an
 * unknown count unless the slice obviously keeps the whole axis. */
kiln_status_t kiln_slice_plan(const slice_args_t* a, const kiln_shape_t* xs, int64_t* start,
                              int64_t* step, int64_t* count) {
  int32_t r = xs->rank;
  int32_t axes[KILN_MAX_RANK];
  KILN_TRY(kiln_tensor_axes("Slice", a->axes, a->n, r, axes));
  for (int32_t k = 0; k < r; ++k) {
    start[k] = 0;
    step[k] = 1;
    count[k] = xs->dims[k];
  }
  for (int64_t i = 0; i < a->n; ++i) {
    int32_t k = axes[i];
    int64_t d = xs->dims[k], s = a->starts[i], e = a->ends[i], st = a->steps[i];
    if (st == 0) {
      return kiln_make_status(KILN_INVALID_ARGUMENT, "Slice: steps[%lld] is 0",
                              (long long)i);
    }
    step[k] = st;
    if (!kiln_dim_known(d)) {
      /* x[0:INT_MAX] (as exporters write "everything") keeps the dim. */
      bool whole = st == 1 && s == 0 && e >= INT32_MAX;
      count[k] = whole ? d : KILN_DIM_UNKNOWN;
      continue;
    }
    if (s < 0) s += d;
    if (e < 0) e += d;
    if (d == 0) {
      count[k] = 0; /* the clamping below assumes a non-empty axis */
    } else if (st > 0) {
      s = s < 0 ? 0 : (s > d ? d : s);
      e = e < 0 ? 0 : (e > d ? d : e);
      count[k] = e > s ? (e - s - 1) / st + 1 : 0;
    } else {
      int64_t ast = (st == INT64_MIN) ? INT64_MAX : -st;
      s = s < 0 ? 0 : (s > d - 1 ? d - 1 : s);
      e = e < -1 ? -1 : (e > d - 1 ? d - 1 : e);
      count[k] = s > e ? (s - e - 1) / ast + 1 : 0;
    }
    start[k] = count[k] ? s : 0;
  }
  return NULL;
}

kiln_status_t kiln_tensor_slice_infer(kiln_infer_t* ctx) {
  const kiln_tensor_t* x = ctx->in[0];
  int32_t r = x->shape.rank;
  slice_args_t a;
  bool known = true;
  if (ctx->opset < 10) {
    KILN_TRY(kiln_slice_args_attr(ctx->node, &a));
  } else {
    const kiln_array_t* v[4] = {NULL, NULL, NULL, NULL};
    static const char* const names[] = {"starts", "ends", "axes", "steps"};
    for (int32_t k = 0; k < 4; ++k) {
      if (!kiln_tensor_in(ctx, k + 1)) continue;
      KILN_TRY(kiln_tensor_int_input(ctx, "Slice", k + 1, names[k]));
      v[k] = kiln_tensor_value(ctx, k + 1);
      if (!v[k]) known = false;
    }
    if (!kiln_tensor_in(ctx, 1) || !kiln_tensor_in(ctx, 2)) {
      return kiln_make_status(KILN_INVALID_ARGUMENT,
                              "Slice: missing required input '%s'",
                              kiln_tensor_in(ctx, 1) ? "ends" : "starts");
    }
    if (known) KILN_TRY(kiln_slice_args_arrays(v, &a));
  }
  if (r < 0 || !known) {
    kiln_shape_t s = kiln_tensor_unknown_rank(r);
    /* Starts/ends known only at run time: when the sliced axes are known,
     * the other axes keep their dims. */
    int64_t axes[KILN_MAX_RANK], n = -1;
    const kiln_array_t* av = kiln_tensor_value(ctx, 3);
    if (r >= 0 && av) {
      KILN_TRY(kiln_tensor_read_ints("Slice", "axes", av, axes, KILN_MAX_RANK, &n));
    } else if (r >= 0 && !kiln_tensor_in(ctx, 3)) {
      n = kiln_tensor_len_1d(ctx->in[1]);
      for (int64_t k = 0; k >= 0 && k < n && k < KILN_MAX_RANK; ++k) axes[k] = k;
    }
    int32_t norm[KILN_MAX_RANK];
    if (n >= 0 && n <= r) {
      /* Bad axes are reported when the values are all known (run time). */
      kiln_status_t bad = kiln_tensor_axes("Slice", axes, n, r, norm);
      if (!bad) {
        s = x->shape;
        for (int64_t k = 0; k < n; ++k) s.dims[norm[k]] = KILN_DIM_UNKNOWN;
      }
      kiln_status_free(bad);
    }
    kiln_infer_set(ctx, 0, x->dtype, &s);
    return NULL;
  }
  int64_t start[KILN_MAX_RANK], step[KILN_MAX_RANK];
  kiln_shape_t out = kiln_tensor_unknown_rank(r);
  KILN_TRY(kiln_slice_plan(&a, &x->shape, start, step, out.dims));
  kiln_infer_set(ctx, 0, x->dtype, &out);
  return NULL;
}

kiln_status_t kiln_tensor_slice_run(const kiln_ref_ctx_t* ctx) {
  const kiln_array_t* x = ctx->in[0];
  kiln_array_t* y = ctx->out[0];
  int32_t r = x->shape.rank;
  slice_args_t a;
  if (ctx->opset < 10) {
    KILN_TRY(kiln_slice_args_attr(ctx->node, &a));
  } else {
    const kiln_array_t* v[4];
    for (int32_t k = 0; k < 4; ++k) v[k] = kiln_tensor_arr(ctx, k + 1);
    KILN_TRY(kiln_slice_args_arrays(v, &a));
  }
  int64_t start[KILN_MAX_RANK], step[KILN_MAX_RANK], count[KILN_MAX_RANK];
  KILN_TRY(kiln_slice_plan(&a, &x->shape, start, step, count));
  if (y->shape.rank != r || y->dtype != x->dtype) {
    return kiln_make_status(KILN_INTERNAL, "Slice: output does not match input");
  }
  int64_t xs[KILN_MAX_RANK], ss[KILN_MAX_RANK], off = 0;
  kiln_tensor_strides(&x->shape, xs);
  for (int32_t k = 0; k < r; ++k) {
    if (y->shape.dims[k] != count[k]) {
      return kiln_make_status(KILN_INTERNAL, "Slice: output shape mismatch");
    }
    off += start[k] * xs[k];
    /* With at most one element on an axis the step is never taken; a zero
     * stride keeps huge steps (INT64_MAX) from overflowing. */
    ss[k] = count[k] <= 1 ? 0 : step[k] * xs[k];
  }
  kiln_tensor_strided_copy(y->data, x->data, kiln_dtype_size(x->dtype), r,
                           y->shape.dims, ss, off);
  return NULL;
}

/* ---- Gather ----------------------------------------------------------- */

static kiln_status_t gather_index(const kiln_array_t* idx, int64_t k,
                                  int64_t n, int32_t axis, int64_t* out) {
  int64_t i = kiln_load_i64(idx->dtype, idx->data, (size_t)k);
  if (i < -n || i >= n) {
    return kiln_make_status(KILN_OUT_OF_RANGE,
                            "Gather: index %lld out of range [%lld, %lld) on "
                            "axis %d",
                            (long long)i, (long long)-n, (long long)n, (int)axis);
  }
  *out = i < 0 ? i + n : i;
  return NULL;
}

kiln_status_t kiln_tensor_gather_infer(kiln_infer_t* ctx) {
  const kiln_tensor_t* x = ctx->in[0];
  const kiln_tensor_t* ind = ctx->in[1];
  if (ind->dtype != KILN_DTYPE_UNDEFINED && ind->dtype != KILN_DTYPE_I64 &&
      ind->dtype != KILN_DTYPE_I32) {
    return kiln_make_status(KILN_INVALID_ARGUMENT,
                            "Gather: indices '%s' have dtype %s, expected i32 "
                            "or i64",
                            ind->name, kiln_dtype_name(ind->dtype));
  }
  int32_t r = x->shape.rank, q = ind->shape.rank;
  if (r == 0) {
    return kiln_make_status(KILN_INVALID_ARGUMENT, "Gather: data is a scalar");
  }
  if (r < 0 || q < 0) {
    kiln_shape_t s = kiln_shape_unknown();
    kiln_infer_set(ctx, 0, x->dtype, &s);
    return NULL;
  }
  int64_t a = 0;
  int32_t axis;
  KILN_TRY(kiln_attr_int(ctx->node, "axis", 0, &a));
  KILN_TRY(kiln_tensor_axis("Gather", "axis", a, r, &axis));
  KILN_TRY(kiln_tensor_check_rank("Gather", (int64_t)q + r - 1));
  /* Constant indices are checked now, so a bad model fails at load. */
  const kiln_array_t* v = kiln_tensor_value(ctx, 1);
  int64_t n = x->shape.dims[axis];
  if (v && kiln_dim_known(n)) {
    int64_t cnt = kiln_array_numel(v), tmp;
    for (int64_t k = 0; k < cnt; ++k) KILN_TRY(gather_index(v, k, n, axis, &tmp));
  }
  kiln_shape_t out = kiln_tensor_unknown_rank(q + r - 1);
  int32_t j = 0;
  for (int32_t k = 0; k < axis; ++k) out.dims[j++] = x->shape.dims[k];
  for (int32_t k = 0; k < q; ++k) out.dims[j++] = ind->shape.dims[k];
  for (int32_t k = axis + 1; k < r; ++k) out.dims[j++] = x->shape.dims[k];
  kiln_infer_set(ctx, 0, x->dtype, &out);
  return NULL;
}

kiln_status_t kiln_tensor_gather_run(const kiln_ref_ctx_t* ctx) {
  const kiln_array_t* x = ctx->in[0];
  const kiln_array_t* ind = ctx->in[1];
  kiln_array_t* y = ctx->out[0];
  int32_t r = x->shape.rank, axis;
  int64_t a = 0;
  KILN_TRY(kiln_attr_int(ctx->node, "axis", 0, &a));
  KILN_TRY(kiln_tensor_axis("Gather", "axis", a, r, &axis));
  if (ind->dtype != KILN_DTYPE_I64 && ind->dtype != KILN_DTYPE_I32) {
    return kiln_make_status(KILN_INVALID_ARGUMENT, "Gather: indices dtype %s",
                            kiln_dtype_name(ind->dtype));
  }
  int64_t outer = prod(x->shape.dims, 0, axis);
  int64_t inner = prod(x->shape.dims, axis + 1, r);
  int64_t n = x->shape.dims[axis];
  int64_t cnt = kiln_array_numel(ind);
  if (y->dtype != x->dtype || kiln_array_numel(y) != outer * cnt * inner) {
    return kiln_make_status(KILN_INTERNAL, "Gather: output shape mismatch");
  }
  /* Validate every index first: an error leaves no partial output. */
  int64_t tmp;
  for (int64_t k = 0; k < cnt; ++k) KILN_TRY(gather_index(ind, k, n, axis, &tmp));
  size_t esz = kiln_dtype_size(x->dtype);
  size_t block = (size_t)inner * esz;
  if (!block) return NULL;
  char* dst = (char*)y->data;
  const char* src = (const char*)x->data;
  for (int64_t o = 0; o < outer; ++o) {
    for (int64_t k = 0; k < cnt; ++k) {
      int64_t i = 0;
      KILN_TRY(gather_index(ind, k, n, axis, &i));
      memcpy(dst, src + (size_t)(o * n + i) * block, block);
      dst += block;
    }
  }
  return NULL;
}
