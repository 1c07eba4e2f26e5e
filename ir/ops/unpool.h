/* MaxUnpool's scatter shape, shared by the reference kernel
 * (ir/ops/tensor_unpool.c) and the lowering (lowering/lower_tensor_unpool.c).
 * Internal to kiln. */
#ifndef KILN_IR_OPS_UNPOOL_H_
#define KILN_IR_OPS_UNPOOL_H_

#include "ir/op.h"

/* [N, C, (in - 1) * stride - pads + kernel ...] from X's shape |xs| and the
 * node's attributes; unknown spatial dims stay unknown. */
kiln_status_t kiln_max_unpool_shape(const kiln_node_t* node, const kiln_shape_t* xs, int64_t* dims);

#endif
