/* DFT's parameters, shared by the reference kernel (ir/ops/tensor_dft.c) and
 * the lowering (lowering/lower_tensor_dft.c). Internal to kiln. */
#ifndef KILN_IR_OPS_DFT_H_
#define KILN_IR_OPS_DFT_H_

#include "ir/op.h"

typedef struct {
  int32_t axis;     /* normalised signal axis of the input */
  int64_t length;   /* DFT length L (dft_length, else the axis size) */
  int64_t n_out;    /* output size on the axis: L, or L / 2 + 1 onesided */
  int64_t n_in;     /* input samples used: min(L, axis size) */
  bool inverse, complex_in;
} dft_t;

/* Parameters for |node| at |opset| on an input of shape |xs| (static on the
 * signal axis and the last dim); |len| and |axis| are the dft_length and
 * (opset 20) axis input values, NULL when absent. */
kiln_status_t kiln_dft_params(const kiln_node_t* node, int64_t opset, const kiln_shape_t* xs,
                              const kiln_array_t* len, const kiln_array_t* axis, dft_t* d);

/* STFT (opset 17): frames of |length| samples every |step| of signal
 * [batch, len, 1 or 2], each weighted by the window (input 2, optional)
 * and transformed; bins L / 2 + 1 when onesided (the default). */
typedef struct {
  int64_t step, length, frames, bins;
  bool complex_in;
} stft_t;

/* |xs| is the signal's shape; |step|, |window| (its length only) and
 * |flen| are the input values (window and flen may be NULL). */
kiln_status_t kiln_stft_params(const kiln_node_t* node, const kiln_shape_t* xs, const kiln_array_t* step,
                               const kiln_shape_t* window, const kiln_array_t* flen, stft_t* p);

#endif
