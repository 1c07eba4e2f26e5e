/* Ops whose output shape depends on input values: NonZero, Compress, Unique,
 * NonMaxSuppression (and the TopK whose K is known only at run time, in
 * tensor_seq.c).
 *
 * At load time infer gives each value-dependent dim a symbol of its own with
 * the upper bound it can reach (kiln_infer_datadep: the output is marked
 * KILN_TENSOR_DATADEP), so consumers see a symbolic dim rather than a wrong
 * number, and nothing folds a Shape of it into a constant. When every input
 * is a known constant the op is computed at load time instead (a constant
 * NonZero feeding an If condition folds away). At run time infer leaves the
 * dim unknown and the reference kernel allocates its outputs after it has
 * counted (kiln_op_sizes_outputs): the executors never size them from a
 * guess. Compiled targets run these nodes on the host between compiled stages
 * (compiler/staged.h); their lowering refuses them with the reason. */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "ir/ops/tensor_impl.h"
#include "kernels/host/dataflow.h"
#include "kernels/host/nms_box.h"

static const char* const k_sizes_outputs[] = {"NonZero", "Compress", "Unique", "NonMaxSuppression",
                                              "If",      "Loop",     "Scan"};

bool kiln_op_sizes_outputs(const kiln_node_t* n) {
  if (n->domain && n->domain[0] && strcmp(n->domain, "ai.onnx") != 0) return false;
  for (size_t i = 0; i < sizeof k_sizes_outputs / sizeof k_sizes_outputs[0]; ++i)
    if (strcmp(n->op_type, k_sizes_outputs[i]) == 0) return true;
  return false;
}

bool kiln_op_is_host_only(const kiln_graph_t* g, const kiln_node_t* n) {
  if (kiln_op_sizes_outputs(n)) return true;
  /* TopK with a K nothing at compile time knows: its outputs carry a
   * data-dependent dim. */
  if (strcmp(n->op_type, "TopK") == 0 && n->n_inputs >= 2 && n->inputs[1] >= 0)
    return !(g->tensors[n->inputs[1]].flags & KILN_TENSOR_CONST);
  return false;
}

kiln_status_t kiln_infer_datadep(kiln_infer_t* ctx, int32_t i, const char* what, int64_t bound, int64_t* out_dim) {
  *out_dim = KILN_DIM_UNKNOWN;
  if (ctx->runtime || !ctx->graph) return NULL;
  KILN_TRY(kiln_graph_datadep_dim(ctx->graph, ctx->node->name, what, bound, out_dim));
  if (i < ctx->n_out && ctx->out[i]) ctx->out[i]->flags |= KILN_TENSOR_DATADEP;
  return NULL;
}

/* At load time with every input known: runs |run| and stores its outputs as
 * the values (*done true). Otherwise leaves everything to the caller. */
static kiln_status_t fold_known(kiln_infer_t* ctx, kiln_status_t (*run)(const kiln_ref_ctx_t*), bool* done) {
  *done = false;
  if (ctx->runtime || !ctx->graph || ctx->n_out > 8 || ctx->n_in > 8) return NULL;
  for (int32_t i = 0; i < ctx->n_in; ++i)
    if (ctx->in[i] && !kiln_infer_has_value(ctx, i)) return NULL;
  const kiln_array_t* in[8];
  kiln_array_t outs[8];
  kiln_array_t* outp[8];
  memset(outs, 0, sizeof outs);
  for (int32_t i = 0; i < ctx->n_in; ++i) in[i] = ctx->in[i] ? &ctx->in[i]->value : NULL;
  for (int32_t i = 0; i < ctx->n_out; ++i) outp[i] = ctx->out[i] ? &outs[i] : NULL;
  kiln_ref_ctx_t rc = {ctx->node, ctx->opset, ctx->n_in, in, ctx->n_out, outp, ctx->allocator, NULL, NULL};
  kiln_status_t s = run(&rc);
  for (int32_t i = 0; i < ctx->n_out && !s; ++i)
    if (outp[i]) s = kiln_infer_set_value(ctx, i, &outs[i]);
  for (int32_t i = 0; i < ctx->n_out; ++i) kiln_array_free(ctx->allocator, &outs[i]);
  if (!s) *done = true;
  return s;
}

static bool elem_nonzero(kiln_dtype_t t, const void* data, size_t i) {
  return kiln_dtype_is_float(t) ? kiln_load_f64(t, data, i) != 0.0 : kiln_load_i64(t, data, i) != 0;
}

/* ---- NonZero --------------------------------------------------------------- */

kiln_status_t kiln_tensor_nonzero_infer(kiln_infer_t* ctx) {
  const kiln_tensor_t* x = ctx->in[0];
  if (!kiln_dtype_size(x->dtype)) return kiln_make_status(KILN_INVALID_ARGUMENT, "NonZero: input '%s' has no type", x->name);
  bool done;
  KILN_TRY(fold_known(ctx, kiln_tensor_nonzero_run, &done));
  if (done) return NULL;
  kiln_shape_t out = kiln_tensor_unknown_rank(2);
  if (x->shape.rank >= 0) out.dims[0] = x->shape.rank;
  int64_t bound = -1;
  if (kiln_shape_is_static(&x->shape)) KILN_TRY(kiln_shape_numel(&x->shape, &bound));
  KILN_TRY(kiln_infer_datadep(ctx, 0, "count", bound, &out.dims[1]));
  kiln_infer_set(ctx, 0, KILN_DTYPE_I64, &out);
  return NULL;
}

kiln_status_t kiln_tensor_nonzero_run(const kiln_ref_ctx_t* ctx) {
  const kiln_array_t* x = ctx->in[0];
  int64_t n = kiln_array_numel(x), nnz = 0;
  for (int64_t i = 0; i < n; ++i) nnz += elem_nonzero(x->dtype, x->data, (size_t)i);
  int32_t r = x->shape.rank;
  kiln_shape_t os = kiln_shape_make(2, (int64_t[]){r, nnz});
  KILN_TRY(kiln_array_alloc(ctx->allocator, KILN_DTYPE_I64, &os, ctx->out[0]));
  int64_t* o = (int64_t*)ctx->out[0]->data;
  int64_t strides[KILN_MAX_RANK];
  kiln_tensor_strides(&x->shape, strides);
  for (int64_t i = 0, k = 0; i < n; ++i) {
    if (!elem_nonzero(x->dtype, x->data, (size_t)i)) continue;
    for (int32_t d = 0; d < r; ++d) o[d * nnz + k] = (i / strides[d]) % x->shape.dims[d];
    ++k;
  }
  return NULL;
}

/* ---- Compress ---------------------------------------------------------------- */

/* Axis of Compress (-1: the input flattened). */
static kiln_status_t compress_axis(const kiln_node_t* n, int32_t rank, int32_t* axis) {
  *axis = -1;
  if (!kiln_node_attr(n, "axis")) return NULL;
  int64_t a;
  KILN_TRY(kiln_attr_int(n, "axis", 0, &a));
  return kiln_tensor_axis("Compress", "axis", a, rank, axis);
}

kiln_status_t kiln_tensor_compress_infer(kiln_infer_t* ctx) {
  const kiln_tensor_t* x = ctx->in[0];
  const kiln_tensor_t* c = ctx->in[1];
  if (c->dtype != KILN_DTYPE_BOOL)
    return kiln_make_status(KILN_INVALID_ARGUMENT, "Compress: condition '%s' is %s, not bool", c->name,
                            kiln_dtype_name(c->dtype));
  if (c->shape.rank > 1)
    return kiln_make_status(KILN_INVALID_ARGUMENT, "Compress: condition '%s' has rank %d, not 1", c->name,
                            c->shape.rank);
  bool done;
  KILN_TRY(fold_known(ctx, kiln_tensor_compress_run, &done));
  if (done) return NULL;
  if (x->shape.rank < 0) {
    kiln_shape_t u = kiln_shape_unknown();
    kiln_infer_set(ctx, 0, x->dtype, &u);
    return NULL;
  }
  int32_t axis;
  KILN_TRY(compress_axis(ctx->node, x->shape.rank, &axis));
  kiln_shape_t out = x->shape;
  int64_t bound = -1;
  if (axis < 0) {
    out = kiln_tensor_unknown_rank(1);
    if (kiln_shape_is_static(&x->shape)) KILN_TRY(kiln_shape_numel(&x->shape, &bound));
  } else if (kiln_dim_known(x->shape.dims[axis])) {
    bound = x->shape.dims[axis];
  }
  KILN_TRY(kiln_infer_datadep(ctx, 0, "count", bound, &out.dims[axis < 0 ? 0 : axis]));
  kiln_infer_set(ctx, 0, x->dtype, &out);
  return NULL;
}

kiln_status_t kiln_tensor_compress_run(const kiln_ref_ctx_t* ctx) {
  const kiln_array_t* x = ctx->in[0];
  const kiln_array_t* c = ctx->in[1];
  if (c->dtype != KILN_DTYPE_BOOL || c->shape.rank > 1)
    return kiln_make_status(KILN_INVALID_ARGUMENT, "Compress: condition is not a 1-D bool tensor");
  int32_t axis;
  KILN_TRY(compress_axis(ctx->node, x->shape.rank, &axis));
  int64_t outer = 1, len = kiln_array_numel(x), inner = 1;
  if (axis >= 0) {
    len = x->shape.dims[axis];
    for (int32_t d = 0; d < axis; ++d) outer *= x->shape.dims[d];
    for (int32_t d = axis + 1; d < x->shape.rank; ++d) inner *= x->shape.dims[d];
  }
  int64_t nc = kiln_array_numel(c);
  if (nc > len)
    return kiln_make_status(KILN_INVALID_ARGUMENT, "Compress: condition has %lld entries, the %s has %lld",
                            (long long)nc, axis < 0 ? "flattened input" : "axis", (long long)len);
  const uint8_t* cv = (const uint8_t*)c->data;
  int64_t cnt = kiln_compress_count(cv, nc);
  kiln_shape_t os = axis < 0 ? kiln_shape_make(1, &cnt) : x->shape;
  if (axis >= 0) os.dims[axis] = cnt;
  KILN_TRY(kiln_array_alloc(ctx->allocator, x->dtype, &os, ctx->out[0]));
  kiln_compress_copy(x->data, kiln_dtype_size(x->dtype), outer, len, inner, cv, nc, ctx->out[0]->data);
  return NULL;
}

/* ---- Unique ------------------------------------------------------------------ */

/* The order, the grouping and the outputs: kernels/host/dataflow.h. */

static kiln_status_t unique_attrs(const kiln_node_t* n, int32_t rank, int32_t* axis, bool* sorted) {
  int64_t s = 1;
  KILN_TRY(kiln_attr_int(n, "sorted", 1, &s));
  *sorted = s != 0;
  *axis = -1;
  if (!kiln_node_attr(n, "axis")) return NULL;
  int64_t a;
  KILN_TRY(kiln_attr_int(n, "axis", 0, &a));
  return kiln_tensor_axis("Unique", "axis", a, rank, axis);
}

kiln_status_t kiln_tensor_unique_infer(kiln_infer_t* ctx) {
  const kiln_tensor_t* x = ctx->in[0];
  if (!kiln_dtype_size(x->dtype) || x->dtype == KILN_DTYPE_BOOL)
    return kiln_make_status(KILN_INVALID_ARGUMENT, "Unique: input '%s' is %s", x->name, kiln_dtype_name(x->dtype));
  bool done;
  KILN_TRY(fold_known(ctx, kiln_tensor_unique_run, &done));
  if (done) return NULL;
  kiln_shape_t y = kiln_shape_unknown(), inv = kiln_tensor_unknown_rank(1), one = kiln_tensor_unknown_rank(1);
  if (x->shape.rank >= 0) {
    int32_t axis;
    bool sorted;
    KILN_TRY(unique_attrs(ctx->node, x->shape.rank, &axis, &sorted));
    int64_t bound = -1;
    if (axis < 0) {
      if (kiln_shape_is_static(&x->shape)) KILN_TRY(kiln_shape_numel(&x->shape, &bound));
      y = kiln_tensor_unknown_rank(1);
    } else {
      y = x->shape;
      if (kiln_dim_known(x->shape.dims[axis])) bound = x->shape.dims[axis];
    }
    inv.dims[0] = bound;
    int64_t d;
    for (int32_t i = 0; i < 4; ++i)
      if (i != 2) KILN_TRY(kiln_infer_datadep(ctx, i, "unique", bound, &d));
    y.dims[axis < 0 ? 0 : axis] = d;
    one.dims[0] = d;
  }
  kiln_infer_set(ctx, 0, x->dtype, &y);
  kiln_infer_set(ctx, 1, KILN_DTYPE_I64, &one);
  kiln_infer_set(ctx, 2, KILN_DTYPE_I64, &inv);
  kiln_infer_set(ctx, 3, KILN_DTYPE_I64, &one);
  return NULL;
}

kiln_status_t kiln_tensor_unique_run(const kiln_ref_ctx_t* ctx) {
  const kiln_array_t* x = ctx->in[0];
  int32_t axis;
  bool sorted;
  KILN_TRY(unique_attrs(ctx->node, x->shape.rank, &axis, &sorted));
  kiln_uniq_t u = {x, 1, kiln_array_numel(x), 1};
  if (axis >= 0) {
    u.len = x->shape.dims[axis];
    for (int32_t d = 0; d < axis; ++d) u.outer *= x->shape.dims[d];
    for (int32_t d = axis + 1; d < x->shape.rank; ++d) u.inner *= x->shape.dims[d];
  }
  int64_t m = u.len;
  int64_t* buf = NULL;
  KILN_TRY(kiln_allocator_malloc(ctx->allocator, sizeof(int64_t) * (size_t)(4 * m + 1), "Unique", (void**)&buf));
  int64_t nu = kiln_uniq_group(&u, sorted, buf);
  kiln_status_t s = NULL;
  kiln_shape_t ys = axis < 0 ? kiln_shape_make(1, &nu) : x->shape;
  if (axis >= 0) ys.dims[axis] = nu;
  kiln_shape_t us = kiln_shape_make(1, &nu), ms = kiln_shape_make(1, &m);
  kiln_array_t* o[4] = {NULL, NULL, NULL, NULL};
  for (int32_t i = 0; i < 4 && i < ctx->n_out; ++i) o[i] = ctx->out[i];
  if (o[0]) s = kiln_array_alloc(ctx->allocator, x->dtype, &ys, o[0]);
  for (int32_t i = 1; i < 4 && !s; ++i)
    if (o[i]) s = kiln_array_alloc(ctx->allocator, KILN_DTYPE_I64, i == 2 ? &ms : &us, o[i]);
  if (!s)
    kiln_uniq_write(&u, buf, nu, o[0] ? o[0]->data : NULL, o[1] ? (int64_t*)o[1]->data : NULL,
                    o[2] ? (int64_t*)o[2]->data : NULL, o[3] ? (int64_t*)o[3]->data : NULL);
  kiln_allocator_free(ctx->allocator, buf);
  if (s)
    for (int32_t i = 0; i < ctx->n_out; ++i)
      if (ctx->out[i]) kiln_array_free(ctx->allocator, ctx->out[i]);
  return s;
}

/* ---- NonMaxSuppression -------------------------------------------------------- */

static kiln_status_t nms_shapes(const kiln_shape_t* b, const kiln_shape_t* sc, const char* bn, const char* sn) {
  if (b->rank >= 0 && (b->rank != 3 || (kiln_dim_known(b->dims[2]) && b->dims[2] != 4)))
    return kiln_make_status(KILN_INVALID_ARGUMENT,
                            "NonMaxSuppression: boxes '%s' must be [batches, boxes, 4] (rank %d%s)", bn, b->rank,
                            b->rank == 3 ? ", last dim not 4" : "");
  if (sc->rank >= 0 && sc->rank != 3)
    return kiln_make_status(KILN_INVALID_ARGUMENT,
                            "NonMaxSuppression: scores '%s' must be [batches, classes, boxes] (rank %d)", sn, sc->rank);
  if (b->rank == 3 && sc->rank == 3) {
    if (kiln_dim_known(b->dims[0]) && kiln_dim_known(sc->dims[0]) && b->dims[0] != sc->dims[0])
      return kiln_make_status(KILN_INVALID_ARGUMENT, "NonMaxSuppression: boxes '%s' have %lld batches, scores '%s' %lld",
                              bn, (long long)b->dims[0], sn, (long long)sc->dims[0]);
    if (kiln_dim_known(b->dims[1]) && kiln_dim_known(sc->dims[2]) && b->dims[1] != sc->dims[2])
      return kiln_make_status(KILN_INVALID_ARGUMENT, "NonMaxSuppression: boxes '%s' hold %lld boxes, scores '%s' score %lld",
                              bn, (long long)b->dims[1], sn, (long long)sc->dims[2]);
  }
  return NULL;
}

kiln_status_t kiln_tensor_nms_infer(kiln_infer_t* ctx) {
  const kiln_tensor_t* b = ctx->in[0];
  const kiln_tensor_t* sc = ctx->in[1];
  if (b->dtype != KILN_DTYPE_F32 || sc->dtype != KILN_DTYPE_F32)
    return kiln_make_status(KILN_UNSUPPORTED, "NonMaxSuppression: boxes and scores must be f32 (got %s and %s)",
                            kiln_dtype_name(b->dtype), kiln_dtype_name(sc->dtype));
  KILN_TRY(nms_shapes(&b->shape, &sc->shape, b->name, sc->name));
  int64_t cpb;
  KILN_TRY(kiln_attr_int(ctx->node, "center_point_box", 0, &cpb));
  if (cpb != 0 && cpb != 1)
    return kiln_make_status(KILN_INVALID_ARGUMENT, "NonMaxSuppression: center_point_box = %lld is not 0 or 1",
                            (long long)cpb);
  if (ctx->n_in > 2 && ctx->in[2]) KILN_TRY(kiln_tensor_int_input(ctx, "NonMaxSuppression", 2, "max_output_boxes_per_class"));
  bool done;
  KILN_TRY(fold_known(ctx, kiln_tensor_nms_run, &done));
  if (done) return NULL;
  int64_t bound = -1;
  if (kiln_shape_is_static(&b->shape) && kiln_shape_is_static(&sc->shape)) {
    int64_t per = sc->shape.dims[2];
    const kiln_array_t* mv = kiln_tensor_value(ctx, 2);
    int64_t mx[1], cnt = 0;
    if (ctx->n_in > 2 && !ctx->in[2]) per = 0;
    if (mv && !kiln_tensor_read_ints("NonMaxSuppression", "max_output_boxes_per_class", mv, mx, 1, &cnt) && cnt == 1)
      per = mx[0] < 0 ? 0 : mx[0] < per ? mx[0] : per;
    bound = sc->shape.dims[0] * sc->shape.dims[1] * per;
  }
  kiln_shape_t out = kiln_shape_make(2, (int64_t[]){0, 3});
  KILN_TRY(kiln_infer_datadep(ctx, 0, "selected", bound, &out.dims[0]));
  kiln_infer_set(ctx, 0, KILN_DTYPE_I64, &out);
  return NULL;
}


/* Sorts |idx| (n) by descending score, ties by index (stable merge). */
static void nms_sort(const float* sc, int64_t* idx, int64_t* tmp, int64_t n) {
  for (int64_t w = 1; w < n; w *= 2) {
    for (int64_t lo = 0; lo < n; lo += 2 * w) {
      int64_t mid = lo + w < n ? lo + w : n, hi = lo + 2 * w < n ? lo + 2 * w : n;
      int64_t a = lo, b = mid, k = lo;
      while (a < mid && b < hi) tmp[k++] = sc[idx[b]] > sc[idx[a]] ? idx[b++] : idx[a++];
      while (a < mid) tmp[k++] = idx[a++];
      while (b < hi) tmp[k++] = idx[b++];
    }
    memcpy(idx, tmp, sizeof(int64_t) * (size_t)n);
  }
}

static kiln_status_t nms_scalar(const kiln_ref_ctx_t* ctx, int32_t i, double def, double* out) {
  const kiln_array_t* a = i < ctx->n_in ? ctx->in[i] : NULL;
  *out = def;
  if (!a) return NULL;
  if (kiln_array_numel(a) != 1)
    return kiln_make_status(KILN_INVALID_ARGUMENT, "NonMaxSuppression: input %d must hold one value, not %lld", i,
                            (long long)kiln_array_numel(a));
  *out = kiln_dtype_is_float(a->dtype) ? kiln_load_f64(a->dtype, a->data, 0) : (double)kiln_load_i64(a->dtype, a->data, 0);
  return NULL;
}

kiln_status_t kiln_tensor_nms_run(const kiln_ref_ctx_t* ctx) {
  const kiln_array_t* bx = ctx->in[0];
  const kiln_array_t* sc = ctx->in[1];
  KILN_TRY(nms_shapes(&bx->shape, &sc->shape, "boxes", "scores"));
  if (bx->shape.rank != 3 || sc->shape.rank != 3 || bx->shape.dims[2] != 4 || bx->shape.dims[0] != sc->shape.dims[0] ||
      bx->shape.dims[1] != sc->shape.dims[2])
    return kiln_make_status(KILN_INVALID_ARGUMENT, "NonMaxSuppression: boxes and scores shapes disagree");
  int64_t cpb;
  KILN_TRY(kiln_attr_int(ctx->node, "center_point_box", 0, &cpb));
  double maxo, iou, sthr;
  KILN_TRY(nms_scalar(ctx, 2, 0, &maxo));
  KILN_TRY(nms_scalar(ctx, 3, 0, &iou));
  KILN_TRY(nms_scalar(ctx, 4, -INFINITY, &sthr));
  bool has_sthr = ctx->n_in > 4 && ctx->in[4];
  int64_t B = sc->shape.dims[0], C = sc->shape.dims[1], N = sc->shape.dims[2];
  int64_t per = maxo <= 0 ? 0 : maxo < (double)N ? (int64_t)maxo : N;
  int64_t* buf = NULL;
  kiln_nms_box_t* nb = NULL;
  int64_t cap = B * C * per;
  KILN_TRY(kiln_allocator_malloc(ctx->allocator, sizeof(int64_t) * (size_t)(3 * N + 3 * cap + 1), "NonMaxSuppression",
                                 (void**)&buf));
  kiln_status_t ms = kiln_allocator_malloc(ctx->allocator, sizeof(kiln_nms_box_t) * (size_t)(N + 1), "NonMaxSuppression boxes",
                                           (void**)&nb);
  if (ms) {
    kiln_allocator_free(ctx->allocator, buf);
    return ms;
  }
  int64_t *idx = buf, *tmp = buf + N, *keep = buf + 2 * N, *sel = buf + 3 * N;
  const float* boxes = (const float*)bx->data;
  const float* scores = (const float*)sc->data;
  int64_t n_sel = 0;
  for (int64_t b = 0; b < B && per > 0; ++b) {
    for (int64_t i = 0; i < N; ++i) nb[i] = kiln_nms_box(boxes + (b * N + i) * 4, cpb == 1);
    for (int64_t c = 0; c < C; ++c) {
      const float* s = scores + (b * C + c) * N;
      int64_t n = 0;
      for (int64_t i = 0; i < N; ++i)
        if (!has_sthr || s[i] > (float)sthr) idx[n++] = i;
      nms_sort(s, idx, tmp, n);
      int64_t nk = 0;
      for (int64_t k = 0; k < n && nk < per; ++k) {
        const kiln_nms_box_t* cand = &nb[idx[k]];
        bool drop = false;
        for (int64_t j = 0; j < nk && !drop; ++j) drop = kiln_nms_suppress(&nb[keep[j]], cand, (float)iou);
        if (drop) continue;
        keep[nk++] = idx[k];
        sel[3 * n_sel] = b, sel[3 * n_sel + 1] = c, sel[3 * n_sel + 2] = idx[k];
        ++n_sel;
      }
    }
  }
  kiln_shape_t os = kiln_shape_make(2, (int64_t[]){n_sel, 3});
  kiln_status_t s = kiln_array_alloc(ctx->allocator, KILN_DTYPE_I64, &os, ctx->out[0]);
  if (!s && n_sel) memcpy(ctx->out[0]->data, sel, sizeof(int64_t) * 3 * (size_t)n_sel);
  kiln_allocator_free(ctx->allocator, nb);
  kiln_allocator_free(ctx->allocator, buf);
  return s;
}
