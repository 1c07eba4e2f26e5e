/* Host nodes of staged modules (runtime/program_staged.h): the kernels
 * libkiln_rt runs between compiled stages, with the semantics of the
 * reference kernels (ir/ops/tensor_dataflow.c) -- the same outputs, bit for
 * bit; ir/ and runtime/ may not include each other, so this is a second
 * copy, which test_staged_module checks against the reference -- on plain
 * arrays, with every shape checked here, since the module that feeds them
 * may be hostile. Outputs are allocated with the
 * system allocator once their size is known. */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "runtime/staged_ops.h"

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

kiln_status_t kiln_staged_op_run(const kiln_staged_segment_t* seg, const kiln_array_t* const* in, kiln_array_t* out,
                                 const char* where) {
  for (int32_t k = 0; k < seg->n_in; ++k)
    if (in[k] && kiln_array_numel(in[k]) && !in[k]->data)
      return kiln_make_status(KILN_INVALID_ARGUMENT, "%s: input %d has no data", where, (int)k);
  switch (seg->op) {
    case KILN_STAGED_NONZERO:
      return nonzero(in[0], out, where);
    case KILN_STAGED_NMS: {
      int64_t cpb = 0;
      for (int32_t k = 0; k < seg->n_attrs; ++k)
        if (!strcmp(seg->attrs[k].name, "center_point_box")) cpb = seg->attrs[k].value;
      if (cpb != 0 && cpb != 1)
        return kiln_make_status(KILN_INVALID_ARGUMENT, "%s: NonMaxSuppression: center_point_box = %lld is not 0 or 1",
                                where, (long long)cpb);
      return nms(in, seg->n_in, cpb, out, where);
    }
    default:
      return kiln_make_status(KILN_INTERNAL, "%s: op number %d is not a host node", where, (int)seg->op);
  }
}
