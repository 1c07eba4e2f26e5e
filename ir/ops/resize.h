/* Resize's attribute parsing, output-size plan and coordinate mapping,
 * shared by the reference kernel (ir/ops/tensor_resize.c) and the CPU
 * lowering (lowering/lower_tensor.c) so both compute the same coordinates.
 * Internal to kiln. */
#ifndef KILN_IR_OPS_RESIZE_H_
#define KILN_IR_OPS_RESIZE_H_

#include "ir/op.h"

enum { MODE_NEAREST, MODE_LINEAR, MODE_CUBIC };
enum {
  CT_HALF_PIXEL,
  CT_HALF_PIXEL_SYMMETRIC,
  CT_PYTORCH_HALF_PIXEL,
  CT_ALIGN_CORNERS,
  CT_ASYMMETRIC,
  CT_TF_HALF_PIXEL_FOR_NN,
  CT_TF_CROP_AND_RESIZE,
};
enum { NM_ROUND_PREFER_FLOOR, NM_ROUND_PREFER_CEIL, NM_FLOOR, NM_CEIL, NM_SIMPLE };
enum { KEEP_STRETCH, KEEP_NOT_LARGER, KEEP_NOT_SMALLER };

typedef struct {
  int mode, coord, nearest, keep;
  float extrapolation;
  bool antialias, exclude_outside;
  double cubic_a; /* cubic_coeff_a */
  int64_t axes[KILN_MAX_RANK];
  int64_t n_axes; /* -1: all axes */
  int32_t i_roi, i_scales, i_sizes; /* input slots, -1 when the opset lacks one */
} resize_attrs_t;

/* Per axis of the input: output size, scale and the unrounded output length
 * the coordinate formulas use. */
typedef struct {
  int64_t out[KILN_MAX_RANK];
  double scale[KILN_MAX_RANK];
  double out_f[KILN_MAX_RANK];
} resize_plan_t;

/* Reads and validates Resize's attributes for |opset|. */
kiln_status_t kiln_resize_parse_attrs(const kiln_node_t* node, int64_t opset,
                                      resize_attrs_t* a);
/* The resized axes (all of them when the attribute is absent). */
kiln_status_t kiln_resize_axes(const resize_attrs_t* a, int32_t rank, int32_t* axes,
                               int32_t* n);
/* Output sizes and scales from the known |scales| or |sizes| (exactly one
 * non-NULL); unknown dims of |xs| stay unknown unless pinned. */
kiln_status_t kiln_resize_plan(const resize_attrs_t* a, const kiln_shape_t* xs,
                               const kiln_array_t* scales, const kiln_array_t* sizes,
                               resize_plan_t* p);
/* Source coordinate of output index |o| on an axis of input size |d|. */
double kiln_resize_source_coord(int coord, double o, int64_t d, double scale, int64_t out,
                                double out_f, double roi_lo, double roi_hi);
/* Nearest-mode rounding of a source coordinate. */
int64_t kiln_resize_round_nearest(int mode, double x, double scale);
/* Clamps a source coordinate to a valid index of an axis of size |d|. */
int64_t kiln_resize_clamp_index(double x, int64_t d);

/* Filter taps (cubic, and antialiased linear/cubic): every output index of
 * an axis reads K consecutive source indices with weights, as the ONNX
 * reference's _interpolate_1d_with_x does (edge-padded neighbours,
 * exclude_outside renormalising). Nearest and plain linear keep their own
 * one- and two-index tables. */
static inline bool kiln_resize_uses_taps(const resize_attrs_t* a) {
  return a->mode == MODE_CUBIC ||
         (a->mode == MODE_LINEAR && (a->antialias || a->exclude_outside));
}
/* Taps per output index on an axis with scale |scale|; at most
 * KILN_RESIZE_MAX_TAPS (error beyond: a scale that small would read most of
 * the axis for every output). */
#define KILN_RESIZE_MAX_TAPS 64
kiln_status_t kiln_resize_tap_count(const resize_attrs_t* a, double scale, int64_t* k);
/* The |k| source indices (clamped into [0, d)) and weights of source
 * coordinate |x| on an axis of size |d|. */
void kiln_resize_taps(const resize_attrs_t* a, double x, double scale, int64_t d, int64_t k,
                      int64_t* idx, double* w);
/* The taps of every output index of axis |k| (input size |d|): K per index
 * into |k_taps| (1 when every output copies one source), indices and
 * weights at [o * K + j] (room for out * KILN_RESIZE_MAX_TAPS), and the
 * tf_crop_and_resize outside flag per output index. */
kiln_status_t kiln_resize_axis_taps(const resize_attrs_t* a, const resize_plan_t* p, int32_t k,
                                   int64_t d, double roi_lo, double roi_hi, int64_t* k_taps,
                                   int64_t* idx, double* w, uint8_t* oob);

#endif
