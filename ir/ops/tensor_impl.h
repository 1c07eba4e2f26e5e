/* Private to the tensor op family (ir/ops/tensor*.c): shared helpers and the
 * infer/run entry points that ir/ops/tensor.c gathers into kiln_ops_tensor.
 *
 * The family is split by concept:
 *   tensor.c         family table, value readers, strided copy
 *   tensor_shape.c   Reshape Flatten Squeeze Unsqueeze Expand Shape Constant
 *                    ConstantOfShape (ops that only re-label or fill)
 *   tensor_move.c    Transpose Concat Split Slice Gather (ops that move data)
 *   tensor_pad.c     Pad
 *   tensor_resize.c  Resize
 *   tensor_index.c   GatherElements GatherND ScatterElements ScatterND
 *   tensor_gen.c     Tile Range Trilu EyeLike Size OneHot DepthToSpace
 *                    SpaceToDepth
 *   tensor_seq.c     CumSum TopK ReverseSequence (ops along one axis)
 *   tensor_einsum.c  Einsum
 *   tensor_sample.c  GridSample AffineGrid
 *   tensor_col2im.c  Col2Im
 *   tensor_dft.c     DFT STFT
 *   tensor_roi_align.c RoiAlign
 *   tensor_unpool.c  MaxUnpool
 *   tensor_dataflow.c NonZero Compress Unique NonMaxSuppression (outputs
 *                    sized by values)
 *   tensor_control.c If Loop Scan (subgraphs)
 *
 * Every infer works on possibly-unknown shapes (load time) and on static
 * shapes with every value known (run time); when an integer input such as a
 * Reshape target is not known at load time it yields unknown dims. Every run
 * recomputes its parameters from the input arrays and bounds-checks them, so
 * it never trusts that infer saw the same values.
 */
#ifndef KILN_IR_OPS_TENSOR_IMPL_H_
#define KILN_IR_OPS_TENSOR_IMPL_H_

#include "ir/op.h"

/* Most integer-list inputs (shapes, axes, pads, starts) hold at most this
 * many values; Split's split list may be as long as its output count. */
#define KILN_TENSOR_MAX_INTS (KILN_MAX_RANK * 2)

/* Propagates a failure unchanged (KILN_RETURN_IF_ERROR without a context
 * trips -Wformat-zero-length). */
#define KILN_TRY(expr)              \
  do {                              \
    kiln_status_t kiln_t_ = (expr); \
    if (kiln_t_) return kiln_t_;    \
  } while (0)

/* ---- input access ---------------------------------------------------- */

/* Input |i| of an infer call, or NULL when it is omitted. */
static inline kiln_tensor_t* kiln_tensor_in(const kiln_infer_t* ctx, int32_t i) {
  return (i < ctx->n_in) ? ctx->in[i] : NULL;
}
/* Input |i| of a run call, or NULL when it is omitted. */
static inline const kiln_array_t* kiln_tensor_arr(const kiln_ref_ctx_t* ctx,
                                                  int32_t i) {
  return (i < ctx->n_in) ? ctx->in[i] : NULL;
}
/* The known value of input |i| at infer time, or NULL (omitted or unknown). */
const kiln_array_t* kiln_tensor_value(const kiln_infer_t* ctx, int32_t i);

/* Reads an integer array (i32/i64, rank 0 or 1) into |out| (capacity |cap|).
 * |op| and |what| name it in errors ("Reshape: input 'shape' ..."). */
kiln_status_t kiln_tensor_read_ints(const char* op, const char* what,
                                    const kiln_array_t* a, int64_t* out,
                                    int64_t cap, int64_t* out_count);
/* The length of a 1-D integer input from its shape, -1 when unknown. */
int64_t kiln_tensor_len_1d(const kiln_tensor_t* t);

/* ---- shapes ---------------------------------------------------------- */

/* A shape of |rank| unknown dims (rank may be -1). */
kiln_shape_t kiln_tensor_unknown_rank(int32_t rank);
/* Row-major element strides of a static shape. */
void kiln_tensor_strides(const kiln_shape_t* s, int64_t* strides);
/* Error when |rank| exceeds KILN_MAX_RANK. */
kiln_status_t kiln_tensor_check_rank(const char* op, int64_t rank);
/* Normalises |axis| into [0, rank) with a message naming |op| and |what|. */
kiln_status_t kiln_tensor_axis(const char* op, const char* what, int64_t axis,
                               int32_t rank, int32_t* out_axis);
/* Normalises a list of axes against |rank|; duplicates are errors. */
kiln_status_t kiln_tensor_axes(const char* op, const int64_t* axes,
                               int64_t n, int32_t rank, int32_t* out_axes);
/* Formats |s| for messages (symbolic dims by name when the graph is known). */
const char* kiln_tensor_fmt(const kiln_infer_t* ctx, const kiln_shape_t* s,
                            char* buf, size_t n);

/* ---- data movement ---------------------------------------------------- */

/* Copies a strided view of |src| into the contiguous |dst|: output element
 * (i0..ir-1) of |dims| reads src element soff + sum(i_k * sstrides[k]).
 * The caller guarantees every such element lies inside |src|. */
void kiln_tensor_strided_copy(void* dst, const void* src, size_t esz,
                              int32_t rank, const int64_t* dims,
                              const int64_t* sstrides, int64_t soff);
/* Fills |n| elements of |dst| with the |esz|-byte element |elem|. */
void kiln_tensor_fill(void* dst, const void* elem, size_t esz, int64_t n);
/* Error unless every present input in [first, last] has the dtype of input
 * |first| (inputs of undefined dtype are skipped). */
kiln_status_t kiln_tensor_same_dtype(const kiln_infer_t* ctx, const char* op,
                                     int32_t first, int32_t last);
/* Error unless input |i| is an integer (i32/i64) tensor. */
kiln_status_t kiln_tensor_int_input(const kiln_infer_t* ctx, const char* op,
                                    int32_t i, const char* what);

int64_t kiln_tensor_no_flops(const kiln_infer_t* ctx);

/* ---- entry points ------------------------------------------------------ */

#define KILN_TENSOR_OP(name)                                   \
  kiln_status_t kiln_tensor_##name##_infer(kiln_infer_t* ctx); \
  kiln_status_t kiln_tensor_##name##_run(const kiln_ref_ctx_t* ctx)

KILN_TENSOR_OP(reshape);
KILN_TENSOR_OP(flatten);
KILN_TENSOR_OP(squeeze);
KILN_TENSOR_OP(unsqueeze);
KILN_TENSOR_OP(expand);
KILN_TENSOR_OP(shape);
KILN_TENSOR_OP(constant);
KILN_TENSOR_OP(constant_of_shape);
KILN_TENSOR_OP(transpose);
KILN_TENSOR_OP(concat);
KILN_TENSOR_OP(split);
KILN_TENSOR_OP(slice);
KILN_TENSOR_OP(gather);
KILN_TENSOR_OP(pad);
KILN_TENSOR_OP(resize);
KILN_TENSOR_OP(hann_window);
KILN_TENSOR_OP(hamming_window);
KILN_TENSOR_OP(blackman_window);
KILN_TENSOR_OP(mel_weight_matrix);
KILN_TENSOR_OP(center_crop_pad);
KILN_TENSOR_OP(upsample);
int64_t kiln_tensor_resize_flops(const kiln_infer_t* ctx);
KILN_TENSOR_OP(gather_elements);
KILN_TENSOR_OP(gather_nd);
KILN_TENSOR_OP(scatter_elements);
KILN_TENSOR_OP(scatter_nd);
KILN_TENSOR_OP(tile);
KILN_TENSOR_OP(range);
KILN_TENSOR_OP(trilu);
KILN_TENSOR_OP(eye_like);
KILN_TENSOR_OP(size);
KILN_TENSOR_OP(one_hot);
KILN_TENSOR_OP(depth_to_space);
KILN_TENSOR_OP(space_to_depth);
KILN_TENSOR_OP(cumsum);
KILN_TENSOR_OP(topk);
KILN_TENSOR_OP(reverse_sequence);
KILN_TENSOR_OP(einsum);
int64_t kiln_tensor_einsum_flops(const kiln_infer_t* ctx);
KILN_TENSOR_OP(grid_sample);
KILN_TENSOR_OP(affine_grid);
KILN_TENSOR_OP(col2im);
KILN_TENSOR_OP(dft);
KILN_TENSOR_OP(stft);
KILN_TENSOR_OP(roi_align);
KILN_TENSOR_OP(max_unpool);
KILN_TENSOR_OP(nonzero);
KILN_TENSOR_OP(compress);
KILN_TENSOR_OP(unique);
KILN_TENSOR_OP(nms);
KILN_TENSOR_OP(if);
KILN_TENSOR_OP(loop);
KILN_TENSOR_OP(scan);

#undef KILN_TENSOR_OP

#endif /* KILN_IR_OPS_TENSOR_IMPL_H_ */
