/* Shared by the window generators' schema (ir/ops/tensor_window.c) and
 * lowering (lowering/lower_tensor_window.c). */
#ifndef KILN_IR_OPS_WINDOW_H_
#define KILN_IR_OPS_WINDOW_H_

#include "ir/op.h"

/* Coefficients a[0..2] of y[i] = a0 - a1 cos(2 pi i / m) + a2 cos(4 pi i / m)
 * for window |op| ("HannWindow", "HammingWindow", "BlackmanWindow") of
 * |size| elements, and m (from the node's periodic attribute). */
kiln_status_t kiln_window_coeffs(const char* op, const kiln_node_t* node, int64_t size, double* a,
                                 double* m);

#endif /* KILN_IR_OPS_WINDOW_H_ */
