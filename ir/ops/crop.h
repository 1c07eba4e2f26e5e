/* Shared by CenterCropPad's schema (ir/ops/tensor_crop.c) and lowering
 * (lowering/lower_tensor_crop.c). */
#ifndef KILN_IR_OPS_CROP_H_
#define KILN_IR_OPS_CROP_H_

#include <stdint.h>

/* Output index o reads input index o - offset along an axis of |in|
 * elements cropped or padded to |out|: a pad of (out - in) / 2 leading
 * zeros, or a crop dropping (in - out) / 2 leading elements. */
static inline int64_t kiln_center_crop_offset(int64_t in, int64_t out) {
  return out >= in ? (out - in) / 2 : -((in - out) / 2);
}

#endif /* KILN_IR_OPS_CROP_H_ */
