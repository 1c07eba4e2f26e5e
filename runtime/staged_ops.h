/* Host nodes of staged modules: the closed table of runtime/program_staged.h
 * run on plain arrays (runtime/staged_ops.c). */
#ifndef KILN_RUNTIME_STAGED_OPS_H_
#define KILN_RUNTIME_STAGED_OPS_H_

#include "kiln/array.h"
#include "kiln/status.h"
#include "runtime/program_staged.h"

/* Runs host node |seg| on |in| (seg->n_in; NULL: an omitted optional
 * input) into |out| (seg->n_out arrays, zeroed, KILN_STAGED_MAX_IO room:
 * every output is made, those nothing reads too), allocated with the
 * system allocator at their real sizes; on an error none is left.
 * Errors name |where| and the op: INVALID_ARGUMENT for inputs of the wrong
 * dtype, shape or size, OUT_OF_MEMORY. */
KILN_MUST_USE kiln_status_t kiln_staged_op_run(const kiln_staged_segment_t* seg, const kiln_array_t* const* in,
                                               kiln_array_t* out, const char* where);

/* NonMaxSuppression's selection (onnxruntime's rule: per batch and class,
 * boxes above |sthr| when |has_sthr| by descending score, ties by index,
 * each kept unless a kept one overlaps it by IoU > |iou|; at most |per| per
 * class) of |boxes| [B,N,4] (corners in either order, or center + size when
 * |center|) and |scores| [B,C,N]: *out_sel (malloc'd, free it) gets *out_n
 * rows of (batch, class, box); the reference kernel's rule, bit for bit
 * (ir/ may not include runtime/, so that kernel keeps its own copy; the
 * staged tests compare the two). Errors: OUT_OF_MEMORY. */
KILN_MUST_USE kiln_status_t kiln_nms_select(const float* boxes, const float* scores, int64_t B, int64_t C, int64_t N,
                                            int64_t per, float iou, bool has_sthr, float sthr, bool center,
                                            int64_t** out_sel, int64_t* out_n);

#endif /* KILN_RUNTIME_STAGED_OPS_H_ */
