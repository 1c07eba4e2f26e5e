/* RoiAlign (opsets 10, 16, 22): per region of interest [x1, y1, x2, y2]
 * (scaled by spatial_scale, shifted by half a pixel with half_pixel) and
 * per output bin, the avg or max of sampling_ratio^2 bilinear samples of
 * the image batch_indices[r] (sampling_ratio 0: ceil(roi size / bins)
 * samples, data-dependent, so only the reference kernel takes it). Follows
 * the ONNX reference, including its max mode (the max over samples of the
 * largest weighted corner) and its sample rules (outside [-1, size]: 0;
 * clamped to the last pixel). */
#include <math.h>
#include <string.h>

#include "ir/ops/roi_align.h"
#include "ir/ops/tensor_impl.h"

kiln_status_t kiln_roi_align_attrs(const kiln_node_t* node, int64_t opset, roi_align_t* a) {
  const char* s;
  KILN_TRY(kiln_attr_string(node, "mode", "avg", &s));
  if (strcmp(s, "avg") != 0 && strcmp(s, "max") != 0) {
    return kiln_make_status(KILN_INVALID_ARGUMENT, "RoiAlign: mode '%s' is not avg or max", s);
  }
  a->max = strcmp(s, "max") == 0;
  KILN_TRY(kiln_attr_string(node, "coordinate_transformation_mode",
                            opset >= 16 ? "half_pixel" : "output_half_pixel", &s));
  if (strcmp(s, "half_pixel") != 0 && strcmp(s, "output_half_pixel") != 0) {
    return kiln_make_status(KILN_INVALID_ARGUMENT,
                            "RoiAlign: coordinate_transformation_mode '%s' is not half_pixel "
                            "or output_half_pixel",
                            s);
  }
  a->half_pixel = strcmp(s, "half_pixel") == 0;
  KILN_TRY(kiln_attr_int(node, "output_height", 1, &a->out_h));
  KILN_TRY(kiln_attr_int(node, "output_width", 1, &a->out_w));
  KILN_TRY(kiln_attr_int(node, "sampling_ratio", 0, &a->sampling));
  KILN_TRY(kiln_attr_float(node, "spatial_scale", 1.0f, &a->scale));
  if (a->out_h < 1 || a->out_w < 1 || a->out_h > (1 << 20) || a->out_w > (1 << 20) ||
      a->sampling < 0 || a->sampling > 1024) {
    return kiln_make_status(KILN_INVALID_ARGUMENT,
                            "RoiAlign: output_height %lld, output_width %lld, sampling_ratio "
                            "%lld are out of range",
                            (long long)a->out_h, (long long)a->out_w, (long long)a->sampling);
  }
  return NULL;
}

kiln_status_t kiln_tensor_roi_align_infer(kiln_infer_t* ctx) {
  const kiln_tensor_t* x = ctx->in[0];
  const kiln_tensor_t* rois = ctx->in[1];
  const kiln_tensor_t* bi = ctx->in[2];
  roi_align_t a;
  KILN_TRY(kiln_roi_align_attrs(ctx->node, ctx->opset, &a));
  if ((x->dtype != KILN_DTYPE_UNDEFINED && x->dtype != KILN_DTYPE_F32 && x->dtype != KILN_DTYPE_F16) ||
      (rois->dtype != KILN_DTYPE_UNDEFINED && rois->dtype != x->dtype)) {
    return kiln_make_status(KILN_UNSUPPORTED, "RoiAlign: X of %s and rois of %s: only f32/f16 are supported",
                            kiln_dtype_name(x->dtype), kiln_dtype_name(rois->dtype));
  }
  KILN_TRY(kiln_tensor_int_input(ctx, "RoiAlign", 2, "batch_indices"));
  if ((x->shape.rank >= 0 && x->shape.rank != 4) || (rois->shape.rank >= 0 && rois->shape.rank != 2) ||
      (bi->shape.rank >= 0 && bi->shape.rank != 1)) {
    return kiln_make_status(KILN_INVALID_ARGUMENT,
                            "RoiAlign: X must be 4-D, rois 2-D and batch_indices 1-D");
  }
  if (rois->shape.rank == 2 && kiln_dim_known(rois->shape.dims[1]) && rois->shape.dims[1] != 4) {
    return kiln_make_status(KILN_INVALID_ARGUMENT, "RoiAlign: rois have %lld columns, expected 4",
                            (long long)rois->shape.dims[1]);
  }
  kiln_shape_t out = kiln_tensor_unknown_rank(4);
  if (rois->shape.rank == 2) out.dims[0] = rois->shape.dims[0];
  if (!kiln_dim_known(out.dims[0]) && bi->shape.rank == 1) out.dims[0] = bi->shape.dims[0];
  if (bi->shape.rank == 1 && kiln_dim_known(bi->shape.dims[0]) && kiln_dim_known(out.dims[0]) &&
      bi->shape.dims[0] != out.dims[0]) {
    return kiln_make_status(KILN_INVALID_ARGUMENT, "RoiAlign: %lld rois but %lld batch indices",
                            (long long)out.dims[0], (long long)bi->shape.dims[0]);
  }
  if (x->shape.rank == 4) out.dims[1] = x->shape.dims[1];
  out.dims[2] = a.out_h;
  out.dims[3] = a.out_w;
  kiln_infer_set(ctx, 0, x->dtype, &out);
  return NULL;
}

/* Bilinear sample (y, x) of the H x W plane |p| as the reference computes
 * it; |mx| gets the largest weighted corner (max mode). */
static double sample(const kiln_array_t* x, int64_t base, int64_t H, int64_t W, double y,
                     double xx, double* mx) {
  if (y < -1.0 || y > (double)H || xx < -1.0 || xx > (double)W) {
    *mx = 0.0;
    return 0.0;
  }
  if (y < 0.0) y = 0.0;
  if (xx < 0.0) xx = 0.0;
  int64_t yl = (int64_t)y, xl = (int64_t)xx, yh, xh;
  if (yl >= H - 1) {
    yh = yl = H - 1;
    y = (double)yl;
  } else {
    yh = yl + 1;
  }
  if (xl >= W - 1) {
    xh = xl = W - 1;
    xx = (double)xl;
  } else {
    xh = xl + 1;
  }
  double ly = y - (double)yl, lx = xx - (double)xl, hy = 1.0 - ly, hx = 1.0 - lx;
  double v1 = hy * hx * kiln_load_f64(x->dtype, x->data, (size_t)(base + yl * W + xl));
  double v2 = hy * lx * kiln_load_f64(x->dtype, x->data, (size_t)(base + yl * W + xh));
  double v3 = ly * hx * kiln_load_f64(x->dtype, x->data, (size_t)(base + yh * W + xl));
  double v4 = ly * lx * kiln_load_f64(x->dtype, x->data, (size_t)(base + yh * W + xh));
  *mx = fmax(fmax(v1, v2), fmax(v3, v4));
  return v1 + v2 + v3 + v4;
}

kiln_status_t kiln_tensor_roi_align_run(const kiln_ref_ctx_t* ctx) {
  const kiln_array_t* x = ctx->in[0];
  const kiln_array_t* rois = ctx->in[1];
  const kiln_array_t* bi = ctx->in[2];
  kiln_array_t* y = ctx->out[0];
  roi_align_t a;
  KILN_TRY(kiln_roi_align_attrs(ctx->node, ctx->opset, &a));
  if (x->shape.rank != 4 || rois->shape.rank != 2 || rois->shape.dims[1] != 4 || bi->shape.rank != 1 ||
      bi->shape.dims[0] != rois->shape.dims[0] || y->shape.rank != 4 ||
      y->shape.dims[0] != rois->shape.dims[0] || y->shape.dims[1] != x->shape.dims[1] ||
      y->shape.dims[2] != a.out_h || y->shape.dims[3] != a.out_w) {
    return kiln_make_status(KILN_INVALID_ARGUMENT, "RoiAlign: X, rois, batch_indices and Y do not match");
  }
  const int64_t R = rois->shape.dims[0], C = x->shape.dims[1], H = x->shape.dims[2], W = x->shape.dims[3];
  if (R > 0 && (H == 0 || W == 0)) return kiln_make_status(KILN_INVALID_ARGUMENT, "RoiAlign: X is empty");
  const double off = a.half_pixel ? 0.5 : 0.0;
  for (int64_t r = 0; r < R; ++r) {
    int64_t b = kiln_load_i64(bi->dtype, bi->data, (size_t)r);
    if (b < 0 || b >= x->shape.dims[0]) {
      return kiln_make_status(KILN_INVALID_ARGUMENT, "RoiAlign: batch_indices[%lld] is %lld, outside [0, %lld)",
                              (long long)r, (long long)b, (long long)x->shape.dims[0]);
    }
    double v[4];
    for (int k = 0; k < 4; ++k) v[k] = kiln_load_f64(rois->dtype, rois->data, (size_t)(r * 4 + k)) * a.scale - off;
    double rw = v[2] - v[0], rh = v[3] - v[1];
    if (!a.half_pixel) {
      rw = fmax(rw, 1.0);
      rh = fmax(rh, 1.0);
    }
    double bh = rh / (double)a.out_h, bw = rw / (double)a.out_w;
    double gh_f = a.sampling > 0 ? (double)a.sampling : ceil(rh / (double)a.out_h);
    double gw_f = a.sampling > 0 ? (double)a.sampling : ceil(rw / (double)a.out_w);
    if (!(gh_f < 1e6) || !(gw_f < 1e6)) {
      return kiln_make_status(KILN_LIMIT_EXCEEDED, "RoiAlign: roi %lld needs %g x %g samples per bin",
                              (long long)r, gh_f, gw_f);
    }
    int64_t gh = (int64_t)gh_f, gw = (int64_t)gw_f;
    double count = (double)(gh * gw > 1 ? gh * gw : 1);
    for (int64_t c = 0; c < C; ++c) {
      int64_t base = (b * C + c) * H * W;
      for (int64_t ph = 0; ph < a.out_h; ++ph) {
        for (int64_t pw = 0; pw < a.out_w; ++pw) {
          double acc = 0.0;
          for (int64_t iy = 0; iy < gh; ++iy) {
            double yy = v[1] + (double)ph * bh + ((double)iy + 0.5) * bh / (double)gh;
            for (int64_t ix = 0; ix < gw; ++ix) {
              double xx = v[0] + (double)pw * bw + ((double)ix + 0.5) * bw / (double)gw, mx;
              double s = sample(x, base, H, W, yy, xx, &mx);
              if (!a.max) {
                acc += s;
              } else {
                acc = (iy == 0 && ix == 0) ? mx : fmax(acc, mx);
              }
            }
          }
          if (!a.max) acc /= count;
          kiln_store_f64(y->dtype, y->data, (size_t)(((r * C + c) * a.out_h + ph) * a.out_w + pw), acc);
        }
      }
    }
  }
  return NULL;
}
