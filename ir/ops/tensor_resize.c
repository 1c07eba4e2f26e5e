/* Resize (opsets 10-19): nearest, linear and cubic interpolation over any axes.
 *
 * Supported: modes nearest (any dtype), linear and cubic (f32, f16; cubic
 * with cubic_coeff_a and exclude_outside; antialias for linear and cubic
 * downscaling: the reference's filters widened by 1/scale); coordinate
 * transformations half_pixel, half_pixel_symmetric, pytorch_half_pixel,
 * align_corners, asymmetric, tf_half_pixel_for_nn and tf_crop_and_resize
 * (with extrapolation_value); nearest modes round_prefer_floor/ceil, floor,
 * ceil; scales or sizes; keep_aspect_ratio_policy and axes (opset 18).
 *
 * Coordinates follow the ONNX reference implementation (float64 math, the
 * unrounded output length scale * in for align_corners and friends). The
 * kernel precomputes, per axis and output index, the one (nearest) or two
 * (linear) source indices and the weight, then visits 2^K corners per output
 * element where K counts the axes that really interpolate (2 for NCHW).
 * Cubic, antialias and exclude_outside use per-axis filter-tap tables
 * (kiln_resize_axis_taps) instead: K taps per output index. */
#include <math.h>
#include <string.h>

#include "ir/ops/tensor_impl.h"

#include "ir/ops/resize.h"


/* Finds |s| in |names| (|n| of them); -1 when absent. */
static int lookup(const char* s, const char* const* names, int n) {
  for (int k = 0; k < n; ++k) {
    if (strcmp(s, names[k]) == 0) return k;
  }
  return -1;
}

kiln_status_t kiln_resize_parse_attrs(const kiln_node_t* node, int64_t opset,
                                      resize_attrs_t* a) {
  memset(a, 0, sizeof *a);
  const char* s;
  KILN_TRY(kiln_attr_string(node, "mode", "nearest", &s));
  static const char* const modes[] = {"nearest", "linear", "cubic"};
  if ((a->mode = lookup(s, modes, 3)) < 0) {
    return kiln_make_status(KILN_INVALID_ARGUMENT,
                            "Resize: mode '%s' is not nearest, linear or cubic", s);
  }
  int64_t antialias = 0, exclude = 0;
  KILN_TRY(kiln_attr_int(node, "antialias", 0, &antialias));
  if (antialias != 0 && a->mode == MODE_NEAREST) {
    return kiln_make_status(KILN_INVALID_ARGUMENT,
                            "Resize: antialias=%lld needs mode linear or cubic",
                            (long long)antialias);
  }
  a->antialias = antialias != 0;
  KILN_TRY(kiln_attr_int(node, "exclude_outside", 0, &exclude));
  a->exclude_outside = exclude != 0;
  float ca = -0.75f;
  KILN_TRY(kiln_attr_float(node, "cubic_coeff_a", -0.75f, &ca));
  a->cubic_a = ca;
  KILN_TRY(kiln_attr_float(node, "extrapolation_value", 0.0f, &a->extrapolation));
  if (opset < 11) {
    /* Resize-10 is Upsample with scales as input 1: asymmetric coordinates
     * and onnxruntime's "simple" nearest rounding. */
    a->coord = CT_ASYMMETRIC;
    a->nearest = NM_SIMPLE;
    a->i_roi = a->i_sizes = -1;
    a->i_scales = 1;
    a->n_axes = -1;
    return NULL;
  }
  a->i_roi = 1;
  a->i_scales = 2;
  a->i_sizes = 3;
  static const char* const coords[] = {
      "half_pixel",    "half_pixel_symmetric",  "pytorch_half_pixel", "align_corners",
      "asymmetric",    "tf_half_pixel_for_nn", "tf_crop_and_resize"};
  KILN_TRY(kiln_attr_string(node, "coordinate_transformation_mode", "half_pixel", &s));
  if ((a->coord = lookup(s, coords, 7)) < 0) {
    return kiln_make_status(KILN_UNSUPPORTED,
                            "Resize: coordinate_transformation_mode '%s' is not "
                            "supported",
                            s);
  }
  static const char* const nearest[] = {"round_prefer_floor", "round_prefer_ceil",
                                        "floor", "ceil"};
  KILN_TRY(kiln_attr_string(node, "nearest_mode", "round_prefer_floor", &s));
  if ((a->nearest = lookup(s, nearest, 4)) < 0) {
    return kiln_make_status(KILN_INVALID_ARGUMENT,
                            "Resize: nearest_mode '%s' is not supported", s);
  }
  static const char* const keeps[] = {"stretch", "not_larger", "not_smaller"};
  KILN_TRY(kiln_attr_string(node, "keep_aspect_ratio_policy", "stretch", &s));
  if ((a->keep = lookup(s, keeps, 3)) < 0) {
    return kiln_make_status(KILN_INVALID_ARGUMENT,
                            "Resize: keep_aspect_ratio_policy '%s' is not "
                            "stretch, not_larger or not_smaller",
                            s);
  }
  const int64_t* axes = NULL;
  KILN_TRY(kiln_attr_ints(node, "axes", &axes, &a->n_axes));
  if (a->n_axes > KILN_MAX_RANK) {
    return kiln_make_status(KILN_INVALID_ARGUMENT, "Resize: %lld axes",
                            (long long)a->n_axes);
  }
  if (a->n_axes > 0) memcpy(a->axes, axes, (size_t)a->n_axes * sizeof(int64_t));
  return NULL;
}

/* The resized axes normalised against |rank| (all axes by default). */
kiln_status_t kiln_resize_axes(const resize_attrs_t* a, int32_t rank, int32_t* axes,
                               int32_t* n) {
  if (a->n_axes < 0) {
    for (int32_t k = 0; k < rank; ++k) axes[k] = k;
    *n = rank;
    return NULL;
  }
  *n = (int32_t)a->n_axes;
  return kiln_tensor_axes("Resize", a->axes, a->n_axes, rank, axes);
}


static kiln_status_t out_from_scale(double scale, int64_t d, int64_t* out) {
  double o = scale * (double)d;
  if (!(o < 1e15)) {
    return kiln_make_status(KILN_LIMIT_EXCEEDED,
                            "Resize: scale %g makes an axis of size %lld too large",
                            scale, (long long)d);
  }
  *out = (int64_t)o;
  return NULL;
}

/* Computes the plan from the known |scales| or |sizes| array (exactly one is
 * non-NULL). Dims of |xs| may be unknown at load time: they stay unknown
 * unless the scale is 1 or a size pins them. */
kiln_status_t kiln_resize_plan(const resize_attrs_t* a, const kiln_shape_t* xs,
                               const kiln_array_t* scales, const kiln_array_t* sizes,
                               resize_plan_t* p) {
  int32_t r = xs->rank, axes[KILN_MAX_RANK], n;
  KILN_TRY(kiln_resize_axes(a, r, axes, &n));
  for (int32_t k = 0; k < r; ++k) {
    p->out[k] = xs->dims[k];
    p->scale[k] = 1.0;
    p->out_f[k] = (double)xs->dims[k];
  }
  const kiln_array_t* v = scales ? scales : sizes;
  if (kiln_array_numel(v) != n) {
    return kiln_make_status(KILN_INVALID_ARGUMENT,
                            "Resize: '%s' has %lld values, expected %d (one per "
                            "resized axis)",
                            scales ? "scales" : "sizes",
                            (long long)kiln_array_numel(v), (int)n);
  }
  if (scales) {
    if (!kiln_dtype_is_float(scales->dtype)) {
      return kiln_make_status(KILN_INVALID_ARGUMENT, "Resize: scales have dtype %s",
                              kiln_dtype_name(scales->dtype));
    }
    for (int32_t i = 0; i < n; ++i) {
      int32_t k = axes[i];
      /* float64 of the stored float, as the reference computes. */
      double s = kiln_load_f64(scales->dtype, scales->data, (size_t)i);
      if (!(s > 0.0) || isinf(s)) {
        return kiln_make_status(KILN_INVALID_ARGUMENT,
                                "Resize: scales[%d] is %g, must be > 0", (int)i, s);
      }
      p->scale[k] = s;
      int64_t d = xs->dims[k];
      if (kiln_dim_known(d)) {
        KILN_TRY(out_from_scale(s, d, &p->out[k]));
        p->out_f[k] = s * (double)d;
      } else if (s != 1.0) {
        p->out[k] = KILN_DIM_UNKNOWN;
      }
    }
    return NULL;
  }
  if (sizes->dtype != KILN_DTYPE_I64 && sizes->dtype != KILN_DTYPE_I32) {
    return kiln_make_status(KILN_INVALID_ARGUMENT, "Resize: sizes have dtype %s",
                            kiln_dtype_name(sizes->dtype));
  }
  int64_t want[KILN_MAX_RANK];
  bool dims_known = true;
  for (int32_t i = 0; i < n; ++i) {
    want[i] = kiln_load_i64(sizes->dtype, sizes->data, (size_t)i);
    if (want[i] < 0) {
      return kiln_make_status(KILN_INVALID_ARGUMENT,
                              "Resize: sizes[%d] is %lld, must be >= 0", (int)i,
                              (long long)want[i]);
    }
    int64_t d = xs->dims[axes[i]];
    if (!kiln_dim_known(d)) {
      dims_known = false;
    } else if (d == 0 && want[i] != 0) {
      return kiln_make_status(KILN_INVALID_ARGUMENT,
                              "Resize: axis %d is empty and cannot be resized to %lld",
                              (int)axes[i], (long long)want[i]);
    }
  }
  if (a->keep == KEEP_STRETCH) {
    for (int32_t i = 0; i < n; ++i) {
      int32_t k = axes[i];
      int64_t d = xs->dims[k];
      p->out[k] = want[i];
      p->out_f[k] = (double)want[i];
      p->scale[k] = (kiln_dim_known(d) && d > 0) ? (double)want[i] / (double)d : 1.0;
    }
    return NULL;
  }
  /* keep_aspect_ratio_policy: one scale for every resized axis. */
  if (!dims_known) {
    for (int32_t i = 0; i < n; ++i) p->out[axes[i]] = KILN_DIM_UNKNOWN;
    return NULL;
  }
  double scale = 0.0;
  for (int32_t i = 0; i < n; ++i) {
    int64_t d = xs->dims[axes[i]];
    double s = d > 0 ? (double)want[i] / (double)d : 1.0;
    if (i == 0 || (a->keep == KEEP_NOT_LARGER ? s < scale : s > scale)) scale = s;
  }
  for (int32_t i = 0; i < n; ++i) {
    int32_t k = axes[i];
    int64_t d = xs->dims[k];
    p->scale[k] = scale;
    p->out_f[k] = scale * (double)d;
    KILN_TRY(out_from_scale(scale, d, &p->out[k]));
    p->out[k] = (int64_t)(scale * (double)d + 0.5); /* round half up */
  }
  return NULL;
}

/* ---- filter taps ---------------------------------------------------------- */

/* First tap offset of the antialiased filters (the reference's i_start /
 * start): floor(-support / scale) + 1, scale capped at 1. */
static double aa_start(double support, double scale) {
  return floor(-support / (scale < 1.0 ? scale : 1.0)) + 1.0;
}

kiln_status_t kiln_resize_tap_count(const resize_attrs_t* a, double scale, int64_t* k) {
  double n = 4.0;
  if (a->antialias) {
    n = 2.0 - 2.0 * aa_start(a->mode == MODE_CUBIC ? 2.0 : 1.0, scale);
  } else if (a->mode == MODE_LINEAR) {
    n = 2.0;
  }
  if (!(n <= KILN_RESIZE_MAX_TAPS)) {
    return kiln_make_status(KILN_LIMIT_EXCEEDED,
                            "Resize: antialiasing at scale %g needs %g taps per output "
                            "(at most %d)",
                            scale, n, KILN_RESIZE_MAX_TAPS);
  }
  *k = (int64_t)n;
  return NULL;
}

/* Keys cubic kernel with coefficient |A| at distance |x|. */
static double cubic_kernel(double x, double A) {
  x = fabs(x);
  if (x <= 1.0) return ((A + 2.0) * x - (A + 3.0)) * x * x + 1.0;
  if (x < 2.0) return ((A * x - 5.0 * A) * x + 8.0 * A) * x - 4.0 * A;
  return 0.0;
}

void kiln_resize_taps(const resize_attrs_t* a, double x, double scale, int64_t d, int64_t k,
                      int64_t* idx, double* w) {
  /* Keep x finite and within a few taps of the axis, keeping its fraction
   * (the weights depend on it); the window is clamped below anyway. */
  double lim = (double)(d + k + 2);
  if (!(x == x)) x = 0.0;
  if (x < -lim) x = -lim + (x - floor(x));
  if (x > lim) x = lim + (x - floor(x));
  /* ratio in (0, 1]: an integer coordinate takes its left neighbour at 1. */
  double fl = floor(x), ratio = x == fl ? 1.0 : x - fl;
  int64_t left = (int64_t)(x - ratio); /* the tap at offset 0 */
  if (!a->antialias && a->mode == MODE_CUBIC) {
    double r1 = 1.0 - ratio, A = a->cubic_a;
    w[0] = ((A * (ratio + 1) - 5 * A) * (ratio + 1) + 8 * A) * (ratio + 1) - 4 * A;
    w[1] = ((A + 2) * ratio - (A + 3)) * ratio * ratio + 1;
    w[2] = ((A + 2) * r1 - (A + 3)) * r1 * r1 + 1;
    w[3] = ((A * (r1 + 1) - 5 * A) * (r1 + 1) + 8 * A) * (r1 + 1) - 4 * A;
  } else if (!a->antialias) {
    w[0] = 1.0 - ratio;
    w[1] = ratio;
  } else {
    bool cubic = a->mode == MODE_CUBIC;
    double s = scale < 1.0 ? scale : 1.0, sum = 0.0;
    double i0 = aa_start(cubic ? 2.0 : 1.0, scale);
    for (int64_t j = 0; j < k; ++j) {
      double t = ((i0 + (double)j) - ratio) * s;
      if (cubic) {
        w[j] = cubic_kernel(t, a->cubic_a);
      } else {
        double v = 1.0 - fabs(t);
        w[j] = v < 0.0 ? 0.0 : (v > 1.0 ? 1.0 : v);
      }
      sum += w[j];
    }
    for (int64_t j = 0; j < k; ++j) w[j] /= sum;
  }
  /* The k nearest neighbours of x in the edge-padded axis (pad ceil(k/2)),
   * preferring the left: a window starting k/2 - 1 left of |left|, moved
   * back inside the padded axis. */
  int64_t pad = (k + 1) / 2, start = left - k / 2 + 1;
  if (start < -pad) start = -pad;
  if (start > d + pad - k) start = d + pad - k;
  double sum = 0.0;
  for (int64_t j = 0; j < k; ++j) {
    int64_t i = start + j;
    if (a->exclude_outside && (i < 0 || i >= d)) w[j] = 0.0;
    sum += w[j];
    idx[j] = i < 0 ? 0 : (i >= d ? d - 1 : i);
  }
  if (a->exclude_outside && sum != 0.0) {
    for (int64_t j = 0; j < k; ++j) w[j] /= sum;
  }
}

/* True when input |t| is given with at least one element (an empty scales
 * or sizes tensor counts as absent; unknown length counts as given). */
static bool given(const kiln_tensor_t* t) {
  if (!t) return false;
  return kiln_tensor_len_1d(t) != 0;
}

static bool arr_given(const kiln_array_t* a) {
  return a && kiln_array_numel(a) > 0;
}

kiln_status_t kiln_tensor_resize_infer(kiln_infer_t* ctx) {
  const kiln_tensor_t* x = ctx->in[0];
  resize_attrs_t a;
  KILN_TRY(kiln_resize_parse_attrs(ctx->node, ctx->opset, &a));
  if (a.mode != MODE_NEAREST && x->dtype != KILN_DTYPE_UNDEFINED &&
      !kiln_dtype_is_float(x->dtype)) {
    return kiln_make_status(KILN_UNSUPPORTED,
                            "Resize: mode linear/cubic on %s data is not supported",
                            kiln_dtype_name(x->dtype));
  }
  const kiln_tensor_t* st = a.i_scales >= 0 ? kiln_tensor_in(ctx, a.i_scales) : NULL;
  const kiln_tensor_t* zt = a.i_sizes >= 0 ? kiln_tensor_in(ctx, a.i_sizes) : NULL;
  bool has_scales = given(st), has_sizes = given(zt);
  if (has_scales == has_sizes) {
    return kiln_make_status(KILN_INVALID_ARGUMENT,
                            has_scales ? "Resize: both scales and sizes are given"
                                       : "Resize: neither scales nor sizes is given");
  }
  if (a.coord == CT_TF_CROP_AND_RESIZE && !kiln_tensor_in(ctx, a.i_roi)) {
    return kiln_make_status(KILN_INVALID_ARGUMENT,
                            "Resize: tf_crop_and_resize needs the 'roi' input");
  }
  int32_t r = x->shape.rank;
  const kiln_array_t* sv = has_scales ? kiln_tensor_value(ctx, a.i_scales) : NULL;
  const kiln_array_t* zv = has_sizes ? kiln_tensor_value(ctx, a.i_sizes) : NULL;
  kiln_shape_t out = kiln_tensor_unknown_rank(r);
  if (r >= 0 && (sv || zv)) {
    resize_plan_t p;
    KILN_TRY(kiln_resize_plan(&a, &x->shape, sv, zv, &p));
    for (int32_t k = 0; k < r; ++k) out.dims[k] = p.out[k];
  } else if (r >= 0 && a.n_axes >= 0) {
    /* Unknown scales/sizes: only the resized axes become unknown. */
    int32_t axes[KILN_MAX_RANK], n;
    KILN_TRY(kiln_resize_axes(&a, r, axes, &n));
    out = x->shape;
    for (int32_t i = 0; i < n; ++i) out.dims[axes[i]] = KILN_DIM_UNKNOWN;
  }
  kiln_infer_set(ctx, 0, x->dtype, &out);
  return NULL;
}

int64_t kiln_tensor_resize_flops(const kiln_infer_t* ctx) {
  const kiln_tensor_t* x = ctx->in[0];
  const kiln_tensor_t* y = ctx->out[0];
  const char* mode = "nearest";
  kiln_status_t s = kiln_attr_string(ctx->node, "mode", "nearest", &mode);
  if (s) {
    kiln_status_free(s);
    return 0;
  }
  /* Taps per resized axis: 2 (linear) or 4 (cubic; antialiasing widens
   * both, not counted here). */
  int64_t taps = strcmp(mode, "linear") == 0 ? 2 : (strcmp(mode, "cubic") == 0 ? 4 : 0);
  if (!taps || !kiln_shape_is_static(&y->shape) || x->shape.rank != y->shape.rank) return 0;
  int64_t corners = 1;
  for (int32_t k = 0; k < y->shape.rank; ++k) {
    if (x->shape.dims[k] != y->shape.dims[k]) corners *= taps;
  }
  return kiln_shape_count(&y->shape) * corners * 2;
}

/* ---- kernel ------------------------------------------------------------ */

/* Source coordinate of output index |o| on an axis of input size |d|. */
double kiln_resize_source_coord(int coord, double o, int64_t d, double scale,
                           int64_t out, double out_f, double roi_lo,
                           double roi_hi) {
  switch (coord) {
    case CT_ALIGN_CORNERS:
      return out_f == 1.0 ? 0.0 : o * (double)(d - 1) / (out_f - 1.0);
    case CT_ASYMMETRIC:
      return o / scale;
    case CT_TF_HALF_PIXEL_FOR_NN:
      return (o + 0.5) / scale;
    case CT_TF_CROP_AND_RESIZE: {
      double x = out_f == 1.0 ? (roi_hi - roi_lo) * (double)(d - 1) / 2.0
                              : o * (roi_hi - roi_lo) * (double)(d - 1) / (out_f - 1.0);
      return x + roi_lo * (double)(d - 1);
    }
    case CT_PYTORCH_HALF_PIXEL:
      return out_f == 1.0 ? -0.5 : (o + 0.5) / scale - 0.5;
    case CT_HALF_PIXEL_SYMMETRIC: {
      double adjustment = (double)out / out_f;
      double center = (double)d / 2.0;
      return center * (1.0 - adjustment) + (o + 0.5) / scale - 0.5;
    }
    default:
      return (o + 0.5) / scale - 0.5;
  }
}

int64_t kiln_resize_round_nearest(int mode, double x, double scale) {
  double f = floor(x);
  if (x == f) return (int64_t)f;
  double frac = x - f;
  switch (mode) {
    case NM_ROUND_PREFER_FLOOR: return (int64_t)(frac <= 0.5 ? f : f + 1.0);
    case NM_ROUND_PREFER_CEIL: return (int64_t)(frac < 0.5 ? f : f + 1.0);
    case NM_FLOOR: return (int64_t)f;
    case NM_CEIL: return (int64_t)(f + 1.0);
    default: return (int64_t)(scale < 1.0 ? f + 1.0 : f); /* NM_SIMPLE */
  }
}

int64_t kiln_resize_clamp_index(double x, int64_t d) {
  if (!(x > 0.0)) return 0; /* also NaN */
  if (x >= (double)(d - 1)) return d - 1;
  return (int64_t)x;
}

/* Per-axis tables, laid end to end over all output indices of all axes. */
typedef struct {
  int64_t* off0; /* element offset (index * stride) of the first source */
  int64_t* off1; /* of the second source (linear) */
  double* w1;    /* weight of the second source */
  uint8_t* oob;  /* tf_crop_and_resize: outside the input -> extrapolation */
} resize_tables_t;

static double load_f(const kiln_array_t* x, int64_t i) {
  if (x->dtype == KILN_DTYPE_F32) return ((const float*)x->data)[i];
  return kiln_f16_to_f32(((const uint16_t*)x->data)[i]);
}

kiln_status_t kiln_resize_axis_taps(const resize_attrs_t* a, const resize_plan_t* p, int32_t k,
                                   int64_t d, double roi_lo, double roi_hi, int64_t* k_taps,
                                   int64_t* idx, double* w, uint8_t* oob) {
  int64_t out = p->out[k], n;
  KILN_TRY(kiln_resize_tap_count(a, p->scale[k], &n));
  bool single = true;
  for (int64_t o = 0; o < out; ++o) {
    double c = kiln_resize_source_coord(a->coord, (double)o, d, p->scale[k], p->out[k],
                                        p->out_f[k], roi_lo, roi_hi);
    oob[o] = a->coord == CT_TF_CROP_AND_RESIZE && (c < 0.0 || c > (double)(d - 1));
    kiln_resize_taps(a, c, p->scale[k], d, n, idx + o * n, w + o * n);
    for (int64_t j = 0; j < n; ++j) {
      double wj = w[o * n + j];
      if (wj != 0.0 && wj != 1.0) single = false;
    }
  }
  *k_taps = n;
  if (!single) return NULL;
  /* Every output copies one source (scale 1 on an integer grid): one tap. */
  for (int64_t o = 0; o < out; ++o) {
    int64_t pick = idx[o * n];
    double wt = 0.0;
    for (int64_t j = 0; j < n; ++j) {
      if (w[o * n + j] == 1.0) {
        pick = idx[o * n + j];
        wt = 1.0;
      }
    }
    idx[o] = pick;
    w[o] = wt;
  }
  *k_taps = 1;
  return NULL;
}

/* The filter-tap kernel (cubic, antialias, exclude_outside): per axis a
 * table of K indices and weights per output index; each output sums the
 * product of the taps of the axes that mix. */
static kiln_status_t run_taps(const kiln_ref_ctx_t* ctx, const resize_attrs_t* a,
                              const resize_plan_t* p, const double* roi_lo,
                              const double* roi_hi) {
  const kiln_array_t* x = ctx->in[0];
  kiln_array_t* y = ctx->out[0];
  int32_t r = x->shape.rank;
  int64_t at[KILN_MAX_RANK], kt[KILN_MAX_RANK], xs[KILN_MAX_RANK], total = 0;
  kiln_tensor_strides(&x->shape, xs);
  for (int32_t k = 0; k < r; ++k) {
    at[k] = total;
    total += y->shape.dims[k] * KILN_RESIZE_MAX_TAPS;
  }
  char* block = NULL;
  KILN_TRY(kiln_allocator_malloc(ctx->allocator, (size_t)total * (2 * sizeof(int64_t) + 1),
                                 "Resize tap tables", (void**)&block));
  int64_t* idx = (int64_t*)block;
  double* w = (double*)(idx + total);
  uint8_t* oob = (uint8_t*)(w + total);
  int32_t mix[KILN_MAX_RANK], n_mix = 0;
  for (int32_t k = 0; k < r; ++k) {
    kiln_status_t s = kiln_resize_axis_taps(a, p, k, x->shape.dims[k], roi_lo[k], roi_hi[k],
                                            &kt[k], idx + at[k], w + at[k], oob + at[k]);
    if (s) {
      kiln_allocator_free(ctx->allocator, block);
      return s;
    }
    if (kt[k] > 1) mix[n_mix++] = k;
  }
  int64_t numel = kiln_array_numel(y), o[KILN_MAX_RANK] = {0};
  for (int64_t e = 0; e < numel; ++e) {
    bool out_of_roi = false;
    int64_t base = 0;
    for (int32_t k = 0; k < r; ++k) {
      if (oob[at[k] + o[k]]) out_of_roi = true;
      if (kt[k] == 1) base += idx[at[k] + o[k]] * xs[k];
    }
    double v = a->extrapolation;
    if (!out_of_roi) {
      int64_t j[KILN_MAX_RANK] = {0};
      v = 0.0;
      for (;;) {
        int64_t off = base;
        double wt = 1.0;
        for (int32_t m = 0; m < n_mix; ++m) {
          int32_t k = mix[m];
          int64_t t = at[k] + o[k] * kt[k] + j[m];
          off += idx[t] * xs[k];
          wt *= w[t];
        }
        for (int32_t k = 0; k < r; ++k) {
          if (kt[k] == 1) wt *= w[at[k] + o[k]];
        }
        if (wt != 0.0) v += wt * load_f(x, off);
        int32_t m = n_mix - 1;
        while (m >= 0 && ++j[m] == kt[mix[m]]) j[m--] = 0;
        if (m < 0) break;
      }
    }
    if (y->dtype == KILN_DTYPE_F32) {
      ((float*)y->data)[e] = (float)v;
    } else {
      ((uint16_t*)y->data)[e] = kiln_f32_to_f16((float)v);
    }
    for (int32_t k = r - 1; k >= 0; --k) {
      if (++o[k] < y->shape.dims[k]) break;
      o[k] = 0;
    }
  }
  kiln_allocator_free(ctx->allocator, block);
  return NULL;
}

kiln_status_t kiln_tensor_resize_run(const kiln_ref_ctx_t* ctx) {
  const kiln_array_t* x = ctx->in[0];
  kiln_array_t* y = ctx->out[0];
  resize_attrs_t a;
  KILN_TRY(kiln_resize_parse_attrs(ctx->node, ctx->opset, &a));
  const kiln_array_t* sv = a.i_scales >= 0 ? kiln_tensor_arr(ctx, a.i_scales) : NULL;
  const kiln_array_t* zv = a.i_sizes >= 0 ? kiln_tensor_arr(ctx, a.i_sizes) : NULL;
  if (!arr_given(sv)) sv = NULL;
  if (!arr_given(zv)) zv = NULL;
  if (!sv == !zv) {
    return kiln_make_status(KILN_INVALID_ARGUMENT,
                            "Resize: exactly one of scales and sizes must be given");
  }
  int32_t r = x->shape.rank;
  resize_plan_t p;
  KILN_TRY(kiln_resize_plan(&a, &x->shape, sv, zv, &p));
  if (y->dtype != x->dtype || y->shape.rank != r) {
    return kiln_make_status(KILN_INTERNAL, "Resize: output does not match input");
  }
  for (int32_t k = 0; k < r; ++k) {
    if (y->shape.dims[k] != p.out[k]) {
      return kiln_make_status(KILN_INTERNAL, "Resize: output shape mismatch");
    }
  }
  bool linear = (a.mode != MODE_NEAREST);
  if (linear && x->dtype != KILN_DTYPE_F32 && x->dtype != KILN_DTYPE_F16) {
    return kiln_make_status(KILN_UNSUPPORTED,
                            "Resize: mode linear/cubic on %s data is not supported",
                            kiln_dtype_name(x->dtype));
  }
  int64_t numel = kiln_array_numel(y);
  if (numel == 0) return NULL;
  if (kiln_array_numel(x) == 0) {
    return kiln_make_status(KILN_INVALID_ARGUMENT, "Resize: input is empty");
  }

  /* roi: [starts..., ends...] over the resized axes; (0, 1) elsewhere. */
  double roi_lo[KILN_MAX_RANK], roi_hi[KILN_MAX_RANK];
  for (int32_t k = 0; k < r; ++k) {
    roi_lo[k] = 0.0;
    roi_hi[k] = 1.0;
  }
  if (a.coord == CT_TF_CROP_AND_RESIZE) {
    const kiln_array_t* roi = kiln_tensor_arr(ctx, a.i_roi);
    int32_t axes[KILN_MAX_RANK], n;
    KILN_TRY(kiln_resize_axes(&a, r, axes, &n));
    if (!roi || !kiln_dtype_is_float(roi->dtype) || kiln_array_numel(roi) != 2 * n) {
      return kiln_make_status(KILN_INVALID_ARGUMENT,
                              "Resize: tf_crop_and_resize needs a float roi of "
                              "%d values",
                              (int)(2 * n));
    }
    for (int32_t i = 0; i < n; ++i) {
      roi_lo[axes[i]] = kiln_load_f64(roi->dtype, roi->data, (size_t)i);
      roi_hi[axes[i]] = kiln_load_f64(roi->dtype, roi->data, (size_t)(n + i));
    }
  }

  if (kiln_resize_uses_taps(&a)) return run_taps(ctx, &a, &p, roi_lo, roi_hi);

  int64_t total = 0, at[KILN_MAX_RANK], xs[KILN_MAX_RANK];
  kiln_tensor_strides(&x->shape, xs);
  for (int32_t k = 0; k < r; ++k) {
    at[k] = total;
    total += y->shape.dims[k];
  }
  size_t per = 2 * sizeof(int64_t) + sizeof(double) + 1;
  char* block = NULL;
  KILN_TRY(kiln_allocator_malloc(ctx->allocator, (size_t)total * per,
                                 "Resize tables", (void**)&block));
  resize_tables_t t;
  t.off0 = (int64_t*)block;
  t.off1 = t.off0 + total;
  t.w1 = (double*)(t.off1 + total);
  t.oob = (uint8_t*)(t.w1 + total);

  /* Axes whose output really mixes two sources (at most KILN_MAX_RANK). */
  int32_t mix[KILN_MAX_RANK], n_mix = 0;
  bool any_oob = false;
  for (int32_t k = 0; k < r; ++k) {
    int64_t d = x->shape.dims[k];
    bool mixes = false;
    for (int64_t o = 0; o < y->shape.dims[k]; ++o) {
      int64_t j = at[k] + o;
      double c = kiln_resize_source_coord(a.coord, (double)o, d, p.scale[k], p.out[k],
                              p.out_f[k], roi_lo[k], roi_hi[k]);
      t.oob[j] = (a.coord == CT_TF_CROP_AND_RESIZE && (c < 0.0 || c > (double)(d - 1)));
      any_oob |= t.oob[j];
      /* Keep the coordinate finite and near the axis before any integer
       * conversion (tiny scales or a NaN roi would overflow it). */
      if (!(c == c)) c = 0.0;
      if (c > (double)d) c = (double)d;
      if (c < -1.0) c = -1.0;
      if (!linear) {
        int64_t i = kiln_resize_round_nearest(a.nearest, c, p.scale[k]);
        i = i < 0 ? 0 : (i >= d ? d - 1 : i);
        t.off0[j] = t.off1[j] = i * xs[k];
        t.w1[j] = 0.0;
        continue;
      }
      double f = floor(c);
      double w = c - f;
      int64_t i0 = kiln_resize_clamp_index(f, d), i1 = kiln_resize_clamp_index(f + 1.0, d);
      if (w == 0.0 || i0 == i1) {
        i1 = i0;
        w = 0.0;
      }
      t.off0[j] = i0 * xs[k];
      t.off1[j] = i1 * xs[k];
      t.w1[j] = w;
      mixes |= (i0 != i1);
    }
    if (mixes) mix[n_mix++] = k;
  }

  size_t esz = kiln_dtype_size(x->dtype);
  int64_t idx[KILN_MAX_RANK] = {0};
  for (int64_t e = 0; e < numel; ++e) {
    bool out_of_roi = false;
    int64_t base = 0;
    for (int32_t k = 0; k < r; ++k) {
      int64_t j = at[k] + idx[k];
      base += t.off0[j];
      if (any_oob && t.oob[j]) out_of_roi = true;
    }
    if (!linear) {
      if (out_of_roi) {
        kiln_store_f64(y->dtype, y->data, (size_t)e, a.extrapolation);
      } else {
        memcpy((char*)y->data + e * (int64_t)esz,
               (const char*)x->data + base * (int64_t)esz, esz);
      }
    } else {
      double v = a.extrapolation;
      if (!out_of_roi) {
        /* Sum over the 2^n_mix corners; |base| already holds every off0. */
        v = 0.0;
        for (int32_t c = 0; c < (1 << n_mix); ++c) {
          double w = 1.0;
          int64_t off = base;
          for (int32_t m = 0; m < n_mix; ++m) {
            int64_t j = at[mix[m]] + idx[mix[m]];
            if (c & (1 << m)) {
              w *= t.w1[j];
              off += t.off1[j] - t.off0[j];
            } else {
              w *= 1.0 - t.w1[j];
            }
          }
          if (w != 0.0) v += w * load_f(x, off);
        }
      }
      if (y->dtype == KILN_DTYPE_F32) {
        ((float*)y->data)[e] = (float)v;
      } else {
        ((uint16_t*)y->data)[e] = kiln_f32_to_f16((float)v);
      }
    }
    for (int32_t k = r - 1; k >= 0; --k) {
      if (++idx[k] < y->shape.dims[k]) break;
      idx[k] = 0;
    }
  }
  kiln_allocator_free(ctx->allocator, block);
  return NULL;
}
