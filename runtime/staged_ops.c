/* Host nodes of staged modules (runtime/program_staged.h): the kernels
 * libkiln_rt runs between compiled stages, with the semantics of the
 * reference kernels (ir/ops/tensor_dataflow.c, tensor_seq.c) -- the same
 * outputs, bit for bit: TopK and Compress compute through the
 * reference's own pieces (kernels/host/dataflow.h), NonZero and NMS are a
 * second copy (ir/ and runtime/ may not include each other), which
 * test_staged_module checks against the reference -- on plain
 * arrays, with every shape checked here, since the module that feeds them
 * may be hostile. Outputs are allocated with the
 * system allocator once their size is known. */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "runtime/staged_ops.h"

#include "kernels/host/dataflow.h"
#include "kernels/host/nms_box.h"

static kiln_status_t nonzero(const kiln_array_t* x, kiln_array_t* out, const char* where) {
  const int64_t n = kiln_array_numel(x);
  const bool fl = kiln_dtype_is_float(x->dtype);
  if ((uint64_t)n * kiln_dtype_size(x->dtype) > x->nbytes)
    return kiln_make_status(KILN_INVALID_ARGUMENT, "%s: NonZero: its input holds %zu bytes, fewer than its shape's", where,
                            x->nbytes);
  int64_t nnz = 0;
  for (int64_t i = 0; i < n; ++i)
    nnz += fl ? kiln_load_f64(x->dtype, x->data, (size_t)i) != 0.0 : kiln_load_i64(x->dtype, x->data, (size_t)i) != 0;
  const int32_t r = x->shape.rank;
  kiln_shape_t os = kiln_shape_make(2, (int64_t[]){r, nnz});
  KILN_RETURN_IF_ERROR(kiln_array_alloc(kiln_allocator_system(), KILN_DTYPE_I64, &os, out), "%s: NonZero", where);
  int64_t* o = out->data;
  int64_t stride[KILN_MAX_RANK];
  for (int32_t d = r - 1; d >= 0; --d) stride[d] = d == r - 1 ? 1 : stride[d + 1] * x->shape.dims[d + 1];
  for (int64_t i = 0, k = 0; i < n; ++i) {
    if (fl ? kiln_load_f64(x->dtype, x->data, (size_t)i) == 0.0 : kiln_load_i64(x->dtype, x->data, (size_t)i) == 0)
      continue;
    for (int32_t d = 0; d < r; ++d) o[d * nnz + k] = (i / stride[d]) % x->shape.dims[d];
    ++k;
  }
  return NULL;
}

/* ---- NonMaxSuppression: onnxruntime's rule, as the reference kernel ---- */


/* |idx| (n) by descending score, equal scores by index: a stable merge. */
static void by_score(const float* sc, int64_t* idx, int64_t* tmp, int64_t n) {
  for (int64_t w = 1; w < n; w *= 2) {
    for (int64_t lo = 0; lo < n; lo += 2 * w) {
      const int64_t mid = lo + w < n ? lo + w : n, hi = lo + 2 * w < n ? lo + 2 * w : n;
      int64_t a = lo, b = mid, k = lo;
      while (a < mid && b < hi) tmp[k++] = sc[idx[b]] > sc[idx[a]] ? idx[b++] : idx[a++];
      while (a < mid) tmp[k++] = idx[a++];
      while (b < hi) tmp[k++] = idx[b++];
    }
    memcpy(idx, tmp, sizeof(int64_t) * (size_t)n);
  }
}

/* Input |i| of NMS, a single number; |def| when omitted. */
static kiln_status_t scalar(const kiln_array_t* const* in, int32_t n_in, int32_t i, double def, const char* where,
                            double* out) {
  const kiln_array_t* a = i < n_in ? in[i] : NULL;
  *out = def;
  if (!a) return NULL;
  if (kiln_array_numel(a) != 1 || a->nbytes < kiln_dtype_size(a->dtype))
    return kiln_make_status(KILN_INVALID_ARGUMENT, "%s: NonMaxSuppression: input %d must hold one value, not %lld", where,
                            (int)i, (long long)kiln_array_numel(a));
  *out = kiln_dtype_is_float(a->dtype) ? kiln_load_f64(a->dtype, a->data, 0) : (double)kiln_load_i64(a->dtype, a->data, 0);
  return NULL;
}

kiln_status_t kiln_nms_select(const float* boxes, const float* scores, int64_t B, int64_t C, int64_t N, int64_t per,
                              float iou, bool has_sthr, float sthr, bool center, int64_t** out_sel, int64_t* out_n) {
  *out_sel = NULL;
  *out_n = 0;
  if (per < 0) per = 0;
  const int64_t cap = B * C * per;
  int64_t* buf = malloc(sizeof(int64_t) * (size_t)(3 * N + 1));
  int64_t* sel = malloc(sizeof(int64_t) * (size_t)(3 * cap + 1));
  kiln_nms_box_t* nb = malloc(sizeof(kiln_nms_box_t) * (size_t)(N + 1));
  if (!buf || !sel || !nb) {
    free(buf);
    free(sel);
    free(nb);
    return kiln_make_status(KILN_OUT_OF_MEMORY, "NonMaxSuppression: out of memory for %lld boxes", (long long)N);
  }
  int64_t *idx = buf, *tmp = buf + N, *keep = buf + 2 * N;
  int64_t n_sel = 0;
  for (int64_t b = 0; b < B && per > 0; ++b) {
    for (int64_t i = 0; i < N; ++i) nb[i] = kiln_nms_box(boxes + (b * N + i) * 4, center);
    for (int64_t c = 0; c < C; ++c) {
      const float* s = scores + (b * C + c) * N;
      int64_t n = 0, nk = 0;
      for (int64_t i = 0; i < N; ++i)
        if (!has_sthr || s[i] > sthr) idx[n++] = i;
      by_score(s, idx, tmp, n);
      for (int64_t k = 0; k < n && nk < per; ++k) {
        bool drop = false;
        for (int64_t j = 0; j < nk && !drop; ++j) drop = kiln_nms_suppress(&nb[keep[j]], &nb[idx[k]], iou);
        if (drop) continue;
        keep[nk++] = idx[k];
        sel[3 * n_sel] = b, sel[3 * n_sel + 1] = c, sel[3 * n_sel + 2] = idx[k];
        ++n_sel;
      }
    }
  }
  free(nb);
  free(buf);
  *out_sel = sel;
  *out_n = n_sel;
  return NULL;
}

static kiln_status_t nms(const kiln_array_t* const* in, int32_t n_in, int64_t cpb, kiln_array_t* out, const char* where) {
  const kiln_array_t *bx = in[0], *sc = in[1];
  if (bx->dtype != KILN_DTYPE_F32 || sc->dtype != KILN_DTYPE_F32 || bx->shape.rank != 3 || sc->shape.rank != 3 ||
      bx->shape.dims[2] != 4 || bx->shape.dims[0] != sc->shape.dims[0] || bx->shape.dims[1] != sc->shape.dims[2] ||
      bx->nbytes < sizeof(float) * (size_t)kiln_array_numel(bx) || sc->nbytes < sizeof(float) * (size_t)kiln_array_numel(sc))
    return kiln_make_status(KILN_INVALID_ARGUMENT,
                            "%s: NonMaxSuppression: boxes must be f32 [B,N,4] and scores f32 [B,C,N]", where);
  double maxo, iou, sthr;
  KILN_RETURN_IF_ERROR(scalar(in, n_in, 2, 0, where, &maxo));
  KILN_RETURN_IF_ERROR(scalar(in, n_in, 3, 0, where, &iou));
  KILN_RETURN_IF_ERROR(scalar(in, n_in, 4, -INFINITY, where, &sthr));
  const int64_t N = sc->shape.dims[2];
  const int64_t per = maxo <= 0 ? 0 : maxo < (double)N ? (int64_t)maxo : N;
  int64_t* sel = NULL;
  int64_t n_sel = 0;
  KILN_RETURN_IF_ERROR(kiln_nms_select(bx->data, sc->data, sc->shape.dims[0], sc->shape.dims[1], N, per, (float)iou,
                                       n_in > 4 && in[4], (float)sthr, cpb == 1, &sel, &n_sel),
                       "%s", where);
  kiln_shape_t os = kiln_shape_make(2, (int64_t[]){n_sel, 3});
  kiln_status_t st = kiln_array_alloc(kiln_allocator_system(), KILN_DTYPE_I64, &os, out);
  if (!st && n_sel) memcpy(out->data, sel, sizeof(int64_t) * 3 * (size_t)n_sel);
  free(sel);
  return st;
}

/* Attribute |name| of host node |seg|, |def| when it has none. */
static int64_t attr(const kiln_staged_segment_t* seg, const char* name, int64_t def) {
  for (int32_t k = 0; k < seg->n_attrs; ++k)
    if (!strcmp(seg->attrs[k].name, name)) return seg->attrs[k].value;
  return def;
}

/* |axis| (of |x|; |flat|: -1 when absent, the input flattened) split into
 * outer x len x inner. */
static kiln_status_t split(const kiln_array_t* x, int64_t axis, bool flat, int64_t* outer, int64_t* len,
                           int64_t* inner, int32_t* out_axis, const char* where, const char* op) {
  const int32_t r = x->shape.rank;
  *outer = *inner = 1;
  *len = kiln_array_numel(x);
  *out_axis = -1;
  if (flat && axis == -1 - (int64_t)KILN_MAX_RANK) return NULL;
  if (axis < -r || axis >= r || r == 0)
    return kiln_make_status(KILN_INVALID_ARGUMENT, "%s: %s: axis %lld is outside rank %d", where, op, (long long)axis,
                            (int)r);
  const int32_t a = (int32_t)(axis < 0 ? axis + r : axis);
  for (int32_t d = 0; d < a; ++d) *outer *= x->shape.dims[d];
  for (int32_t d = a + 1; d < r; ++d) *inner *= x->shape.dims[d];
  *len = x->shape.dims[a];
  *out_axis = a;
  return NULL;
}

/* Frees outputs[0..n) on an error. */
static kiln_status_t drop(kiln_status_t st, kiln_array_t* out, int32_t n) {
  for (int32_t k = 0; st && k < n; ++k) kiln_array_free(kiln_allocator_system(), &out[k]);
  return st;
}

static kiln_status_t topk(const kiln_staged_segment_t* seg, const kiln_array_t* const* in, kiln_array_t* out,
                          const char* where) {
  const kiln_array_t *x = in[0], *kv = in[1];
  int64_t outer, n, inner;
  int32_t a;
  if (x->dtype == KILN_DTYPE_BOOL)
    return kiln_make_status(KILN_INVALID_ARGUMENT, "%s: TopK: input is bool", where);
  KILN_RETURN_IF_ERROR(split(x, attr(seg, "axis", -1), false, &outer, &n, &inner, &a, where, "TopK"));
  if (kiln_array_numel(kv) != 1 || (kv->dtype != KILN_DTYPE_I64 && kv->dtype != KILN_DTYPE_I32))
    return kiln_make_status(KILN_INVALID_ARGUMENT, "%s: TopK: K must be one integer", where);
  const int64_t k = kiln_load_i64(kv->dtype, kv->data, 0);
  if (k < 0 || k > n)
    return kiln_make_status(KILN_INVALID_ARGUMENT, "%s: TopK: K = %lld is not in [0, %lld]", where, (long long)k,
                            (long long)n);
  kiln_shape_t os = x->shape;
  os.dims[a] = k;
  kiln_status_t st = kiln_array_alloc(kiln_allocator_system(), x->dtype, &os, &out[0]);
  if (!st && seg->n_out > 1) st = kiln_array_alloc(kiln_allocator_system(), KILN_DTYPE_I64, &os, &out[1]);
  int64_t* scratch = NULL;
  if (!st && n && k && !(scratch = malloc(sizeof(int64_t) * 3 * (size_t)n)))
    st = kiln_make_status(KILN_OUT_OF_MEMORY, "%s: TopK: out of memory", where);
  if (!st && n && k) kiln_topk_run(x, outer, n, inner, k, attr(seg, "largest", 1) != 0, out[0].data, out[1].data, scratch);
  free(scratch);
  return drop(st, out, seg->n_out);
}

static kiln_status_t compress(const kiln_staged_segment_t* seg, const kiln_array_t* const* in, kiln_array_t* out,
                              const char* where) {
  const kiln_array_t *x = in[0], *c = in[1];
  int64_t outer, len, inner;
  int32_t a;
  KILN_RETURN_IF_ERROR(split(x, attr(seg, "axis", -1 - KILN_MAX_RANK), true, &outer, &len, &inner, &a, where, "Compress"));
  const int64_t nc = kiln_array_numel(c);
  if (c->dtype != KILN_DTYPE_BOOL || c->shape.rank > 1 || nc > len)
    return kiln_make_status(KILN_INVALID_ARGUMENT, "%s: Compress: its condition is not a bool vector of at most %lld",
                            where, (long long)len);
  int64_t cnt = kiln_compress_count(c->data, nc);
  kiln_shape_t os = a < 0 ? kiln_shape_make(1, &cnt) : x->shape;
  if (a >= 0) os.dims[a] = cnt;
  KILN_RETURN_IF_ERROR(kiln_array_alloc(kiln_allocator_system(), x->dtype, &os, &out[0]), "%s: Compress", where);
  kiln_compress_copy(x->data, kiln_dtype_size(x->dtype), outer, len, inner, c->data, nc, out[0].data);
  return NULL;
}

kiln_status_t kiln_staged_op_run(const kiln_staged_segment_t* seg, const kiln_array_t* const* in, kiln_array_t* out,
                                 const char* where) {
  for (int32_t k = 0; k < seg->n_in; ++k)
    if (in[k] && kiln_array_numel(in[k]) &&
        (!in[k]->data || in[k]->nbytes < (size_t)kiln_array_numel(in[k]) * kiln_dtype_size(in[k]->dtype)))
      return kiln_make_status(KILN_INVALID_ARGUMENT, "%s: input %d has no data or too few bytes", where, (int)k);
  switch (seg->op) {
    case KILN_STAGED_NONZERO:
      return nonzero(in[0], out, where);
    case KILN_STAGED_NMS: {
      const int64_t cpb = attr(seg, "center_point_box", 0);
      if (cpb != 0 && cpb != 1)
        return kiln_make_status(KILN_INVALID_ARGUMENT, "%s: NonMaxSuppression: center_point_box = %lld is not 0 or 1",
                                where, (long long)cpb);
      return nms(in, seg->n_in, cpb, out, where);
    }
    case KILN_STAGED_TOPK:
      return topk(seg, in, out, where);
    case KILN_STAGED_COMPRESS:
      return compress(seg, in, out, where);
    default:
      return kiln_make_status(KILN_INTERNAL, "%s: op number %d is not a host node", where, (int)seg->op);
  }
}
