/* Slice's arguments and the start/step/count plan, shared by the reference
 * kernel (ir/ops/tensor_move.c) and the CPU lowering (lowering/lower_tensor.c)
 * so both clamp and count the same way. Internal to kiln. */
#ifndef KILN_IR_OPS_SLICE_H_
#define KILN_IR_OPS_SLICE_H_

#include "ir/op.h"

typedef struct {
  int64_t starts[KILN_MAX_RANK], ends[KILN_MAX_RANK];
  int64_t axes[KILN_MAX_RANK], steps[KILN_MAX_RANK];
  int64_t n;
} slice_args_t;

/* Slice-1: starts/ends/axes attributes. */
kiln_status_t kiln_slice_args_attr(const kiln_node_t* node, slice_args_t* a);
/* Slice-10+: the starts, ends and optional axes, steps arrays (in[0..3],
 * NULL when absent). */
kiln_status_t kiln_slice_args_arrays(const kiln_array_t* const* in, slice_args_t* a);
/* Per input axis of |xs|: first index, step and element count, with ONNX's
 * clamping; axes not sliced keep start 0, step 1 and their size. */
kiln_status_t kiln_slice_plan(const slice_args_t* a, const kiln_shape_t* xs, int64_t* start,
                              int64_t* step, int64_t* count);

#endif
