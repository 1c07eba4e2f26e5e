/* GridSample's attributes, shared by the reference kernel
 * (ir/ops/tensor_sample.c) and the lowering (lowering/lower_tensor_sample.c)
 * so both read them the same way. Internal to kiln. */
#ifndef KILN_IR_OPS_GRID_SAMPLE_H_
#define KILN_IR_OPS_GRID_SAMPLE_H_

#include "ir/op.h"

enum { GS_NEAREST, GS_LINEAR, GS_CUBIC };
enum { GS_ZEROS, GS_BORDER, GS_REFLECTION };

/* Spatial ranks GridSample takes (4-D and 5-D inputs). */
#define KILN_GS_MAX_SPATIAL 3

typedef struct {
  int mode, padding;
  bool align_corners;
} gs_attrs_t;

/* Reads mode (opset 16 spellings bilinear/bicubic and opset 20's
 * linear/cubic), padding_mode and align_corners. */
kiln_status_t kiln_gs_parse_attrs(const kiln_node_t* node, gs_attrs_t* a);

/* Corners per spatial axis: 1 (nearest), 2 (linear), 4 (cubic). */
static inline int kiln_gs_taps(int mode) {
  return mode == GS_NEAREST ? 1 : (mode == GS_LINEAR ? 2 : 4);
}

/* AffineGrid's base coordinate of index |i| on an axis of size |s| (pixel
 * centres in [-1, 1], or the corners with align_corners). */
double kiln_affine_grid_base(int64_t i, int64_t s, bool align_corners);

#endif
