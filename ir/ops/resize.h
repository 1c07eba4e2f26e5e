/* Resize's attribute parsing, output-size plan and coordinate mapping,
 * shared by the reference kernel (ir/ops/tensor_resize.c) and the CPU
 * lowering (lowering/lower_tensor.c) so both compute the same coordinates.
 * Internal to kiln. */
#ifndef KILN_IR_OPS_RESIZE_H_
#define KILN_IR_OPS_RESIZE_H_

#include "ir/op.h"

enum { MODE_NEAREST, MODE_LINEAR };
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

/* Reads and validates Resize's attributes for |opset|; UNSUPPORTED for
 * cubic mode and antialias. */
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

#endif
