/* GridSample (opsets 16, 20) and AffineGrid (opset 20).
 *
 * GridSample reads X [N, C, D1..Dk] at the normalised points of grid
 * [N, O1..Ok, k] (last axis in reverse order: x, y, z) and writes
 * Y [N, C, O1..Ok], k = 2 or 3. The math follows the ONNX reference (f32
 * coordinates): denormalise (align_corners or not), round half to even for
 * nearest, move an outside coordinate in by padding_mode (border: clamp,
 * reflection: fold), then sum the 1, 2 or 4 taps per axis (nearest, linear,
 * cubic with a = -0.75) whose pixels are zero (zeros), clamped (border) or
 * reflected (reflection) outside the input. The per-axis interpolation is a
 * tensor product; the reference nests it axis by axis, so results agree to
 * f32 rounding.
 *
 * AffineGrid builds the normalised grid of size (N, C, H, W) or
 * (N, C, D, H, W) from theta [N, 2, 3] / [N, 3, 4]: each output point is
 * theta[n] applied to (x, y[, z], 1) of the base grid (pixel centres in
 * [-1, 1], or the corners with align_corners). The size must be known at
 * load time (it is the output shape).
 */
#include <math.h>
#include <string.h>

#include "ir/ops/grid_sample.h"
#include "ir/ops/tensor_impl.h"

kiln_status_t kiln_gs_parse_attrs(const kiln_node_t* node, gs_attrs_t* a) {
  const char* s;
  KILN_TRY(kiln_attr_string(node, "mode", "linear", &s));
  if (strcmp(s, "nearest") == 0) {
    a->mode = GS_NEAREST;
  } else if (strcmp(s, "linear") == 0 || strcmp(s, "bilinear") == 0) {
    a->mode = GS_LINEAR;
  } else if (strcmp(s, "cubic") == 0 || strcmp(s, "bicubic") == 0) {
    a->mode = GS_CUBIC;
  } else {
    return kiln_make_status(KILN_INVALID_ARGUMENT,
                            "GridSample: mode '%s' is not nearest, linear or cubic", s);
  }
  KILN_TRY(kiln_attr_string(node, "padding_mode", "zeros", &s));
  if (strcmp(s, "zeros") == 0) {
    a->padding = GS_ZEROS;
  } else if (strcmp(s, "border") == 0) {
    a->padding = GS_BORDER;
  } else if (strcmp(s, "reflection") == 0) {
    a->padding = GS_REFLECTION;
  } else {
    return kiln_make_status(KILN_INVALID_ARGUMENT,
                            "GridSample: padding_mode '%s' is not zeros, border or "
                            "reflection",
                            s);
  }
  int64_t ac = 0;
  KILN_TRY(kiln_attr_int(node, "align_corners", 0, &ac));
  a->align_corners = ac != 0;
  return NULL;
}

static bool gs_float(kiln_dtype_t t) {
  return t == KILN_DTYPE_F32 || t == KILN_DTYPE_F16 || t == KILN_DTYPE_UNDEFINED;
}

kiln_status_t kiln_tensor_grid_sample_infer(kiln_infer_t* ctx) {
  const kiln_tensor_t* x = ctx->in[0];
  const kiln_tensor_t* g = ctx->in[1];
  gs_attrs_t a;
  KILN_TRY(kiln_gs_parse_attrs(ctx->node, &a));
  if (!gs_float(x->dtype) || !gs_float(g->dtype)) {
    return kiln_make_status(KILN_UNSUPPORTED,
                            "GridSample: X of %s and grid of %s: only f32 and f16 are "
                            "supported",
                            kiln_dtype_name(x->dtype), kiln_dtype_name(g->dtype));
  }
  int32_t r = x->shape.rank >= 0 ? x->shape.rank : g->shape.rank;
  if (r < 0) {
    kiln_infer_set(ctx, 0, x->dtype, &x->shape);
    return NULL;
  }
  if (r < 4 || r > 2 + KILN_GS_MAX_SPATIAL) {
    return kiln_make_status(KILN_UNSUPPORTED,
                            "GridSample: X of rank %d: only 4-D and 5-D inputs are "
                            "supported",
                            (int)r);
  }
  if ((x->shape.rank >= 0 && x->shape.rank != r) || (g->shape.rank >= 0 && g->shape.rank != r)) {
    return kiln_make_status(KILN_INVALID_ARGUMENT,
                            "GridSample: X has rank %d and grid rank %d; they must match",
                            (int)x->shape.rank, (int)g->shape.rank);
  }
  int64_t last = g->shape.rank >= 0 ? g->shape.dims[r - 1] : KILN_DIM_UNKNOWN;
  if (kiln_dim_known(last) && last != r - 2) {
    return kiln_make_status(KILN_INVALID_ARGUMENT,
                            "GridSample: grid's last dim is %lld, expected %d (one "
                            "coordinate per spatial axis)",
                            (long long)last, (int)(r - 2));
  }
  kiln_shape_t out = kiln_tensor_unknown_rank(r);
  if (x->shape.rank >= 0) {
    out.dims[0] = x->shape.dims[0];
    out.dims[1] = x->shape.dims[1];
  }
  if (g->shape.rank >= 0) {
    int64_t gn = g->shape.dims[0];
    if (kiln_dim_known(gn) && kiln_dim_known(out.dims[0]) && gn != out.dims[0]) {
      return kiln_make_status(KILN_INVALID_ARGUMENT,
                              "GridSample: X has batch %lld and grid batch %lld",
                              (long long)out.dims[0], (long long)gn);
    }
    if (!kiln_dim_known(out.dims[0])) out.dims[0] = gn;
    for (int32_t k = 2; k < r; ++k) out.dims[k] = g->shape.dims[k - 1];
  }
  kiln_infer_set(ctx, 0, x->dtype, &out);
  return NULL;
}

static double gs_load(const kiln_array_t* a, int64_t i) {
  if (a->dtype == KILN_DTYPE_F32) return ((const float*)a->data)[i];
  return kiln_f16_to_f32(((const uint16_t*)a->data)[i]);
}

/* Folds |x| into [lo, hi] as the reference's _gs_reflect does. */
static double gs_reflect(double x, double lo, double hi) {
  double rng = hi - lo;
  if (!(rng > 0.0)) return lo; /* one pixel with align_corners */
  if (x < lo) {
    double dx = lo - x, n = floor(dx / rng), r = dx - n * rng;
    return fmod(n, 2.0) == 0.0 ? lo + r : hi - r;
  }
  if (x > hi) {
    double dx = x - hi, n = floor(dx / rng), r = dx - n * rng;
    return fmod(n, 2.0) == 0.0 ? hi - r : lo + r;
  }
  return x;
}

/* Cubic convolution weights of the taps at offsets -1, 0, 1, 2 for the
 * fraction t in [0, 1) (Keys, a = -0.75). */
static void gs_cubic(double t, double* w) {
  const double A = -0.75;
  double x0 = t + 1.0, x1 = t, x2 = 1.0 - t, x3 = 2.0 - t;
  w[0] = ((A * x0 - 5.0 * A) * x0 + 8.0 * A) * x0 - 4.0 * A;
  w[1] = ((A + 2.0) * x1 - (A + 3.0)) * x1 * x1 + 1.0;
  w[2] = ((A + 2.0) * x2 - (A + 3.0)) * x2 * x2 + 1.0;
  w[3] = ((A * x3 - 5.0 * A) * x3 + 8.0 * A) * x3 - 4.0 * A;
}

kiln_status_t kiln_tensor_grid_sample_run(const kiln_ref_ctx_t* ctx) {
  const kiln_array_t* x = ctx->in[0];
  const kiln_array_t* g = ctx->in[1];
  kiln_array_t* y = ctx->out[0];
  gs_attrs_t a;
  KILN_TRY(kiln_gs_parse_attrs(ctx->node, &a));
  int32_t r = x->shape.rank, D = r - 2;
  if (r < 4 || r > 2 + KILN_GS_MAX_SPATIAL || g->shape.rank != r || g->shape.dims[r - 1] != D ||
      g->shape.dims[0] != x->shape.dims[0] || y->shape.rank != r || y->dtype != x->dtype ||
      !gs_float(x->dtype) || !gs_float(g->dtype)) {
    return kiln_make_status(KILN_INVALID_ARGUMENT, "GridSample: X, grid and Y do not match");
  }
  for (int32_t k = 2; k < r; ++k) {
    if (y->shape.dims[k] != g->shape.dims[k - 1] || y->shape.dims[0] != x->shape.dims[0] ||
        y->shape.dims[1] != x->shape.dims[1]) {
      return kiln_make_status(KILN_INVALID_ARGUMENT, "GridSample: Y's shape does not match");
    }
  }
  int64_t numel = kiln_array_numel(y);
  if (numel == 0) return NULL;
  const int64_t N = x->shape.dims[0], C = x->shape.dims[1];
  int64_t dims[KILN_GS_MAX_SPATIAL], xstr[KILN_MAX_RANK], pts = 1;
  for (int32_t k = 0; k < D; ++k) {
    dims[k] = x->shape.dims[2 + k];
    pts *= y->shape.dims[2 + k];
    if (dims[k] == 0) {
      return kiln_make_status(KILN_INVALID_ARGUMENT, "GridSample: X has an empty spatial axis");
    }
  }
  kiln_tensor_strides(&x->shape, xstr);
  const int taps = kiln_gs_taps(a.mode);
  for (int64_t n = 0; n < N; ++n) {
    for (int64_t p = 0; p < pts; ++p) {
      /* Per axis: tap indices (-1: a zero pixel) and weights. */
      int64_t idx[KILN_GS_MAX_SPATIAL][4];
      double w[KILN_GS_MAX_SPATIAL][4];
      for (int32_t k = 0; k < D; ++k) {
        int64_t d = dims[k];
        double gv = gs_load(g, (n * pts + p) * D + (D - 1 - k));
        float v = a.align_corners ? (float)((gv + 1.0) / 2.0 * (double)(d - 1))
                                  : (float)(((gv + 1.0) * (double)d - 1.0) / 2.0);
        if (a.mode == GS_NEAREST) v = nearbyintf(v);
        double lo = a.align_corners ? 0.0 : -0.5;
        double hi = a.align_corners ? (double)(d - 1) : (double)d - 0.5;
        if (v < lo || v > hi) {
          if (a.padding == GS_BORDER) v = v < 0.0f ? 0.0f : ((double)v > (double)(d - 1) ? (float)(d - 1) : v);
          if (a.padding == GS_REFLECTION) v = (float)gs_reflect(v, lo, hi);
        }
        /* Far outside (zeros) every tap is zero anyway; keep the integer
         * conversion in range (and NaN at a defined place). */
        if (!(v > -4.0f)) v = -4.0f;
        if (v > (float)d + 4.0f) v = (float)d + 4.0f;
        double f = a.mode == GS_NEAREST ? trunc(v) : floor(v), t = v - f;
        if (a.mode == GS_LINEAR) {
          w[k][0] = 1.0 - t;
          w[k][1] = t;
        } else if (a.mode == GS_CUBIC) {
          gs_cubic(t, w[k]);
        } else {
          w[k][0] = 1.0;
        }
        int64_t first = (int64_t)f - (a.mode == GS_CUBIC ? 1 : 0);
        for (int j = 0; j < taps; ++j) {
          int64_t i = first + j;
          if (a.padding == GS_ZEROS) {
            if (i < 0 || i >= d) i = -1;
          } else {
            if (a.padding == GS_REFLECTION) i = (int64_t)gs_reflect((double)i, lo, hi);
            i = i < 0 ? 0 : (i >= d ? d - 1 : i);
          }
          idx[k][j] = i;
        }
      }
      int64_t corners = 1;
      for (int32_t k = 0; k < D; ++k) corners *= taps;
      for (int64_t c = 0; c < C; ++c) {
        int64_t base = n * xstr[0] + c * xstr[1];
        double acc = 0.0;
        for (int64_t m = 0; m < corners; ++m) {
          int64_t rest = m, off = base;
          double wt = 1.0;
          bool zero = false;
          for (int32_t k = D - 1; k >= 0; --k) {
            int j = (int)(rest % taps);
            rest /= taps;
            if (idx[k][j] < 0) zero = true;
            off += idx[k][j] * xstr[2 + k];
            wt *= w[k][j];
          }
          if (!zero) acc += wt * gs_load(x, off);
        }
        int64_t e = (n * C + c) * pts + p;
        if (y->dtype == KILN_DTYPE_F32) {
          ((float*)y->data)[e] = (float)acc;
        } else {
          ((uint16_t*)y->data)[e] = kiln_f32_to_f16((float)acc);
        }
      }
    }
  }
  return NULL;
}

/* ---- AffineGrid ---------------------------------------------------------- */

/* The output size (N, C, [D,] H, W) from the 'size' input. */
static kiln_status_t ag_size(const kiln_array_t* sz, int64_t* size, int32_t* n) {
  int64_t cnt = 0;
  KILN_TRY(kiln_tensor_read_ints("AffineGrid", "size", sz, size, KILN_MAX_RANK, &cnt));
  if (cnt != 4 && cnt != 5) {
    return kiln_make_status(KILN_INVALID_ARGUMENT,
                            "AffineGrid: 'size' has %lld values, expected 4 (N, C, H, W) "
                            "or 5 (N, C, D, H, W)",
                            (long long)cnt);
  }
  for (int64_t k = 0; k < cnt; ++k) {
    if (size[k] < 0 || size[k] > ((int64_t)1 << 31)) {
      return kiln_make_status(KILN_INVALID_ARGUMENT, "AffineGrid: size[%lld] is %lld",
                              (long long)k, (long long)size[k]);
    }
  }
  *n = (int32_t)cnt;
  return NULL;
}

kiln_status_t kiln_tensor_affine_grid_infer(kiln_infer_t* ctx) {
  const kiln_tensor_t* th = ctx->in[0];
  if (!gs_float(th->dtype)) {
    return kiln_make_status(KILN_UNSUPPORTED,
                            "AffineGrid: theta of %s: only f32 and f16 are supported",
                            kiln_dtype_name(th->dtype));
  }
  KILN_TRY(kiln_tensor_int_input(ctx, "AffineGrid", 1, "size"));
  const kiln_array_t* sv = kiln_tensor_value(ctx, 1);
  if (!sv) {
    int64_t len = kiln_tensor_len_1d(ctx->in[1]);
    kiln_shape_t out = kiln_tensor_unknown_rank(len == 4 || len == 5 ? (int32_t)len : -1);
    kiln_infer_set(ctx, 0, th->dtype, &out);
    return NULL;
  }
  int64_t size[KILN_MAX_RANK];
  int32_t n;
  KILN_TRY(ag_size(sv, size, &n));
  int32_t D = n - 2;
  if (th->shape.rank >= 0) {
    const int64_t want[3] = {size[0], D, D + 1};
    for (int32_t k = 0; k < 3 && th->shape.rank == 3; ++k) {
      if (kiln_dim_known(th->shape.dims[k]) && th->shape.dims[k] != want[k]) {
        return kiln_make_status(KILN_INVALID_ARGUMENT,
                                "AffineGrid: theta dim %d is %lld, expected %lld", (int)k,
                                (long long)th->shape.dims[k], (long long)want[k]);
      }
    }
    if (th->shape.rank != 3) {
      return kiln_make_status(KILN_INVALID_ARGUMENT, "AffineGrid: theta has rank %d, expected 3",
                              (int)th->shape.rank);
    }
  }
  kiln_shape_t out = kiln_tensor_unknown_rank(n);
  out.dims[0] = size[0];
  for (int32_t k = 0; k < D; ++k) out.dims[1 + k] = size[2 + k];
  out.dims[n - 1] = D;
  kiln_infer_set(ctx, 0, th->dtype, &out);
  return NULL;
}

double kiln_affine_grid_base(int64_t i, int64_t s, bool align_corners) {
  if (align_corners) return s > 1 ? -1.0 + 2.0 * (double)i / (double)(s - 1) : -1.0;
  return -1.0 + (2.0 * (double)i + 1.0) / (double)s;
}

kiln_status_t kiln_tensor_affine_grid_run(const kiln_ref_ctx_t* ctx) {
  const kiln_array_t* th = ctx->in[0];
  kiln_array_t* y = ctx->out[0];
  int64_t size[KILN_MAX_RANK], ac = 0;
  int32_t n;
  KILN_TRY(ag_size(ctx->in[1], size, &n));
  KILN_TRY(kiln_attr_int(ctx->node, "align_corners", 0, &ac));
  const int32_t D = n - 2;
  if (th->shape.rank != 3 || th->shape.dims[0] != size[0] || th->shape.dims[1] != D ||
      th->shape.dims[2] != D + 1 || y->shape.rank != n || y->dtype != th->dtype) {
    return kiln_make_status(KILN_INVALID_ARGUMENT, "AffineGrid: theta, size and output do not match");
  }
  int64_t pts = 1;
  for (int32_t k = 0; k < D; ++k) {
    if (y->shape.dims[1 + k] != size[2 + k]) {
      return kiln_make_status(KILN_INVALID_ARGUMENT, "AffineGrid: output shape mismatch");
    }
    pts *= size[2 + k];
  }
  for (int64_t b = 0; b < size[0]; ++b) {
    for (int64_t p = 0; p < pts; ++p) {
      /* base[j]: coordinate j (x, y, z) = spatial axis D-1-j. */
      double base[KILN_GS_MAX_SPATIAL + 1];
      int64_t rest = p;
      for (int32_t k = D - 1; k >= 0; --k) {
        int64_t s = size[2 + k];
        base[D - 1 - k] = kiln_affine_grid_base(rest % s, s, ac != 0);
        rest /= s;
      }
      base[D] = 1.0;
      for (int32_t j = 0; j < D; ++j) {
        double v = 0.0;
        for (int32_t k = 0; k <= D; ++k) v += gs_load(th, (b * D + j) * (D + 1) + k) * base[k];
        int64_t e = (b * pts + p) * D + j;
        if (y->dtype == KILN_DTYPE_F32) {
          ((float*)y->data)[e] = (float)v;
        } else {
          ((uint16_t*)y->data)[e] = kiln_f32_to_f16((float)v);
        }
      }
    }
  }
  return NULL;
}
