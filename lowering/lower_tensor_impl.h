/* Private to the tensor family's lowerings (lowering/lower_tensor*.c):
 * index helpers the index-taking ops share. */
#ifndef KILN_LOWERING_LOWER_TENSOR_IMPL_H_
#define KILN_LOWERING_LOWER_TENSOR_IMPL_H_

#include "lowering/lower.h"

/* An index |v| loaded from an i32/i64 buffer, made non-negative (v < 0:
 * v + n) and clamped into [0, n-1] (n >= 1), as I64: the access it feeds
 * stays in bounds whatever the value; bad values are the check kernel's. */
const tir_expr_t* kiln_ltx_safe_index(tir_ctx_t* c, const tir_expr_t* v, int64_t n);

/* A run-time check kernel over every element of the index buffer |ind|:
 * an element outside [-n, n) stores KILN_CHECK_INDEX_RANGE into a new
 * status word of the node. With |nb| == 1 every element has bound[0]; else
 * element (..., j) of the last dim has bound[j] (|nb| = that dim, the
 * tuples of GatherND / ScatterND). Emit it before the kernels that read
 * |ind|. */
kiln_status_t kiln_ltx_check_indices(kiln_lower_ctx_t* ctx, const tir_buffer_t* ind, const int64_t* bound,
                                     int32_t nb);

/* Lowerings named by their lines in ir/ops/tensor.def (lowering/lower_tensor_index.c, lowering/lower_tensor_gen.c, lowering/lower_tensor_seq.c, lowering/lower_tensor_einsum.c, lowering/lower_tensor_sample.c, lowering/lower_tensor_col2im.c, lowering/lower_tensor_dft.c, lowering/lower_tensor_roi_align.c). */
kiln_lower_op_t kiln_lower_tensor_gather_elements, kiln_lower_tensor_gather_nd,
    kiln_lower_tensor_scatter_elements, kiln_lower_tensor_scatter_nd, kiln_lower_tensor_tile,
    kiln_lower_tensor_range, kiln_lower_tensor_trilu, kiln_lower_tensor_eye_like,
    kiln_lower_tensor_size, kiln_lower_tensor_one_hot, kiln_lower_tensor_depth_to_space,
    kiln_lower_tensor_space_to_depth, kiln_lower_tensor_cumsum, kiln_lower_tensor_topk,
    kiln_lower_tensor_reverse_sequence, kiln_lower_tensor_einsum, kiln_lower_tensor_hann_window,
    kiln_lower_tensor_hamming_window, kiln_lower_tensor_blackman_window,
    kiln_lower_tensor_center_crop_pad, kiln_lower_tensor_upsample,
    kiln_lower_tensor_mel_weight_matrix, kiln_lower_tensor_grid_sample,
    kiln_lower_tensor_affine_grid, kiln_lower_tensor_col2im, kiln_lower_tensor_dft,
    kiln_lower_tensor_stft, kiln_lower_tensor_roi_align, kiln_lower_tensor_max_unpool;
/* lowering/lower_tensor_host.c: the ops that run on the host between
 * compiled stages (data-dependent shapes, control flow) */
kiln_lower_op_t kiln_lower_tensor_host;

#endif /* KILN_LOWERING_LOWER_TENSOR_IMPL_H_ */
