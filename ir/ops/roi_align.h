/* RoiAlign's attributes, shared by the reference kernel
 * (ir/ops/tensor_roi_align.c) and the lowering
 * (lowering/lower_tensor_roi_align.c). Internal to kiln. */
#ifndef KILN_IR_OPS_ROI_ALIGN_H_
#define KILN_IR_OPS_ROI_ALIGN_H_

#include "ir/op.h"

typedef struct {
  bool max;        /* mode max (else avg) */
  bool half_pixel; /* coordinate_transformation_mode half_pixel */
  int64_t out_h, out_w, sampling;
  float scale;     /* spatial_scale */
} roi_align_t;

/* Reads the attributes (opset 10 has no coordinate_transformation_mode:
 * output_half_pixel). */
kiln_status_t kiln_roi_align_attrs(const kiln_node_t* node, int64_t opset, roi_align_t* a);

#endif
