/* Quantization parameters shared by the quantized ops' schemas
 * (ir/ops/nn_quant.c) and their lowering (lowering/lower_nn_quant.c).
 *
 * A scale or zero-point tensor applies to the elements of a data tensor x
 * in one of three ways (ONNX QuantizeLinear/DequantizeLinear):
 *   per tensor  one element (a scalar or shape [1]);
 *   per axis    a 1-D tensor of x.shape[axis] elements;
 *   blocked     x's rank, equal to x's shape except along axis, where it has
 *               ceil(x.shape[axis] / block_size) elements (opset 21).
 * Element e of x (row-major) reads parameter element kiln_nn_qp_at(q, e). */
#ifndef KILN_IR_OPS_NN_QUANT_H_
#define KILN_IR_OPS_NN_QUANT_H_

#include "ir/ops/nn_internal.h"

typedef enum kiln_nn_qp_kind_e {
  KILN_NN_QP_TENSOR = 0,
  KILN_NN_QP_AXIS,
  KILN_NN_QP_BLOCK,
} kiln_nn_qp_kind_t;

typedef struct kiln_nn_qp_s {
  kiln_nn_qp_kind_t kind;
  int32_t axis;       /* normalised; meaningful for AXIS and BLOCK */
  int64_t inner;      /* product of x's dims after axis */
  int64_t dim;        /* x.shape[axis] */
  int64_t block, nb;  /* BLOCK: block size, blocks along axis */
} kiln_nn_qp_t;

/* Classifies parameter shape |p| (named |pname|) against the static shape
 * |x| of data |xname| for |op|. |axis| is the raw attribute value and
 * |block| the block_size attribute (0: none). Errors name the op, the
 * tensors and the counts: an axis outside x's rank, a per-axis count that
 * differs from x.shape[axis], a blocked shape that does not fit. */
kiln_status_t kiln_nn_qp_setup(const char* op, const kiln_shape_t* x, const char* xname,
                               const kiln_shape_t* p, const char* pname, int64_t axis,
                               int64_t block, kiln_nn_qp_t* out);

/* Parameter element for element |e| of x. */
static inline int64_t kiln_nn_qp_at(const kiln_nn_qp_t* q, int64_t e) {
  if (q->kind == KILN_NN_QP_TENSOR) return 0;
  const int64_t a = (e / q->inner) % q->dim;
  if (q->kind == KILN_NN_QP_AXIS) return a;
  return (e / (q->inner * q->dim)) * q->nb * q->inner + (a / q->block) * q->inner +
         e % q->inner;
}

/* The inclusive range of a quantized integer dtype (u8, i8, u16, i16, i32);
 * false for any other dtype. */
bool kiln_nn_quant_range(kiln_dtype_t t, int64_t* lo, int64_t* hi);

/* The integer convolutions' (ConvInteger, QLinearConv) checks and output
 * shape: Conv's attribute rules (kernel_shape, strides, dilations, pads,
 * auto_pad, group) for data |x| and weight |w|; |b| the bias shape or NULL.
 * |win| and |group| receive the parsed window (pads resolved when the
 * shapes are static). Defined in nn_conv.c beside Conv's own. */
kiln_status_t kiln_nn_conv_shape(const kiln_node_t* node, const char* op, const kiln_shape_t* x,
                                 const char* xname, const kiln_shape_t* w, const char* wname,
                                 const kiln_shape_t* b, kiln_nn_window_t* win, int64_t* group,
                                 kiln_shape_t* out);

#endif /* KILN_IR_OPS_NN_QUANT_H_ */
