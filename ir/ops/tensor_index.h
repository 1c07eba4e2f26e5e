/* Attribute and parameter rules of the index and generator tensor ops
 * (ir/ops/tensor_index.c, tensor_gen.c) that their lowerings
 * (lowering/lower_tensor_index.c, lower_tensor_gen.c) share, so a compiled
 * kernel and the reference kernel read a node the same way. Each returns a
 * status naming the op. */
#ifndef KILN_IR_OPS_TENSOR_INDEX_H_
#define KILN_IR_OPS_TENSOR_INDEX_H_

#include "ir/op.h"

/* ScatterElements-16 / ScatterND-16 reductions; "none" replaces. */
enum { KILN_SCATTER_NONE = 0, KILN_SCATTER_ADD, KILN_SCATTER_MUL, KILN_SCATTER_MAX, KILN_SCATTER_MIN };
/* The 'reduction' attribute as a KILN_SCATTER_* value; reductions on bool
 * data are UNSUPPORTED. */
kiln_status_t kiln_tensor_scatter_reduction(const kiln_node_t* node, const char* op,
                                            kiln_dtype_t dt, int* out);
/* EyeLike's output dtype: the 'dtype' attribute, else the input's. */
kiln_status_t kiln_tensor_eye_like_dtype(const kiln_node_t* node, kiln_dtype_t in, kiln_dtype_t* out);
/* OneHot's depth input (one number, truncated) as an integer >= 1. */
kiln_status_t kiln_tensor_one_hot_depth(const kiln_array_t* d, int64_t* out);
/* DepthToSpace / SpaceToDepth (|op|): blocksize and whether the mode is CRD. */
kiln_status_t kiln_tensor_d2s_attrs(const kiln_node_t* node, const char* op, int64_t* b, bool* crd);
/* The 6-d view of the input that the output is, in output order: dims and
 * source element strides for input dims |xd| ([N, C, H, W]). */
void kiln_tensor_d2s_view(bool d2s, bool crd, int64_t b, const int64_t* xd, int64_t* dims, int64_t* st);

/* CumSum's axis input (one integer) normalised against |rank|. */
kiln_status_t kiln_tensor_cumsum_axis(const kiln_array_t* a, int32_t rank, int32_t* out);
/* TopK's axis (normalised) and 'largest'. */
kiln_status_t kiln_tensor_topk_attrs(const kiln_node_t* node, int32_t rank, int32_t* axis, bool* largest);
/* ReverseSequence's batch and time axes (0 and 1 in some order). */
kiln_status_t kiln_tensor_revseq_axes(const kiln_node_t* node, int32_t rank, int32_t* batch, int32_t* time);

#endif /* KILN_IR_OPS_TENSOR_INDEX_H_ */
