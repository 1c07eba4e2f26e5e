/* Host nodes of staged modules: the closed table of runtime/program_staged.h
 * run on plain arrays (runtime/staged_ops.c). */
#ifndef KILN_RUNTIME_STAGED_OPS_H_
#define KILN_RUNTIME_STAGED_OPS_H_

#include "kiln/array.h"
#include "kiln/status.h"
#include "runtime/program_staged.h"

/* Runs host node |seg| on |in| (seg->n_in; NULL: an omitted optional
 * input) into |out|, allocated with the system allocator at its real size.
 * Errors name |where| and the op: INVALID_ARGUMENT for inputs of the wrong
 * dtype, shape or size, OUT_OF_MEMORY. */
KILN_MUST_USE kiln_status_t kiln_staged_op_run(const kiln_staged_segment_t* seg, const kiln_array_t* const* in,
                                               kiln_array_t* out, const char* where);

#endif /* KILN_RUNTIME_STAGED_OPS_H_ */
