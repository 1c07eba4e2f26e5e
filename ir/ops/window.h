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

/* MelWeightMatrix: reads its five scalar inputs |in| (num_mel_bins,
 * dft_length, sample_rate, lower_edge_hertz, upper_edge_hertz), checks
 * them (errors name |node|) and gives the output dims [dft_length / 2 + 1,
 * num_mel_bins]; with |out| non-NULL (dims[0] * dims[1] doubles) also fills
 * the matrix as the ONNX reference does. */
kiln_status_t kiln_mel_weights(const kiln_node_t* node, const kiln_array_t* const* in, int64_t* dims,
                               double* out);

#endif /* KILN_IR_OPS_WINDOW_H_ */
