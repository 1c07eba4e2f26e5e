/* The compile of a range on a dim inside the kernels' shapes (kiln compile
 * --dim seq=8..256): the graph prepared at the sizes lowering/plan_seq.h
 * takes, lowered and fused at each, the plans anti-unified into one, and
 * that plan's program built once. */
#ifndef KILN_COMPILER_PIPELINE_SEQ_H_
#define KILN_COMPILER_PIPELINE_SEQ_H_

#include "compiler/pipeline.h"
#include "lowering/plan_seq.h"

/* |gs|: the graph prepared (and optimized) with dim |name| at each of
 * kiln_plan_seq_sizes(lo, hi); read only. fp32 on the CPU target only
 * (UNSUPPORTED naming the target or precision otherwise). */
KILN_MUST_USE kiln_status_t kiln_compile_program_seq(kiln_graph_t* const* gs, const char* name, int64_t lo, int64_t hi,
                                                     const kiln_compile_config_t* c, kiln_compile_log_t* log,
                                                     kiln_program_t** out);

/* compiler/pipeline_seq_mem.c: the sizes per value of the dim
 * (lowering/plan_seq_mem.h) of |plans| (as kiln_plan_seq_unify left them)
 * given to program |p| built from plans[KILN_PLAN_SEQ_SIZES - 1], which is
 * validated again, and a line in |log| on the arena at both ends of the
 * range against the lower bound at each. */
KILN_MUST_USE kiln_status_t kiln_compile_seq_memory(kiln_plan_t* const* plans, const char* name, int64_t lo, int64_t hi,
                                                    kiln_compile_log_t* log, kiln_program_t* p);
/* "arena A MB at NAME=LO (lower bound B MB), C MB at NAME=HI (lower bound D
 * MB)" for a program with a dim inside the shapes, planned at |alignment|
 * (the session's: 64 on the CPU) into |buf|. */
KILN_MUST_USE kiln_status_t kiln_seq_memory_text(const kiln_program_t* p, uint64_t alignment, char* buf, size_t len);

#endif
