/* DeformConv's geometry (2-D), shared by the reference kernel
 * (ir/ops/nn_deform_conv.c) and the lowering (lowering/lower_nn_deform_conv.c).
 * Internal to kiln. */
#ifndef KILN_IR_OPS_DEFORM_CONV_H_
#define KILN_IR_OPS_DEFORM_CONV_H_

#include "ir/op.h"

typedef struct {
  int64_t n, ic, ih, iw, oc, oh, ow, kh, kw;
  int64_t sh, sw, dh, dw, ph, pw; /* strides, dilations, begin pads */
  int64_t group, offset_group, icpg, ocpg, icpog; /* channels per group / offset group */
} deform_t;

/* From the static shapes of X, W and offset and the attributes; checks the
 * offset (and |mask| when non-NULL) shape against them. */
kiln_status_t kiln_deform_geometry(const kiln_node_t* node, const kiln_shape_t* x, const kiln_shape_t* w,
                                   const kiln_shape_t* offset, const kiln_shape_t* mask, deform_t* g);

#endif
