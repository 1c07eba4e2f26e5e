/* Dynamic outer dims: one plan that runs for a range of batch sizes.
 *
 * `kiln compile --dim batch=1..8` lowers the model with the dim at 1 (one
 * sample, after api/model_dyn.c has checked that no node mixes samples) and
 * then turns the plan into a per-sample one: every kernel takes one more
 * argument, the dims buffer (KILN_PLAN_DIMS, i64[1]), and runs its own
 * scheduled body once per sample in a loop whose run-time extent is read
 * from it (tir_for_dyn; its static bound is the top of the range). Sample i
 * of every input, output, intermediate and workspace buffer lies i times
 * its root's bytes from the buffer's start, the layout the runtime plans
 * (runtime/program.h, kiln_program_bytes_at): for model inputs and outputs
 * that is exactly the batched tensor. Schedules, tiles and vector widths are
 * those of one sample and need no remainder handling; the sample loop is
 * parallel (collapsed with the kernel's own parallel loop when it has one
 * at the top) or serial when the kernel's parallel loop is deeper. */
#ifndef KILN_LOWERING_PLAN_DYN_H_
#define KILN_LOWERING_PLAN_DYN_H_

#include "lowering/plan.h"

/* Makes |p| (lowered with dim |name| at 1, fused, its templates chosen)
 * per-sample for |name| in [lo, hi]. Every model input and output must have
 * 1 as dim 0. UNSUPPORTED naming the node and the dim for a kernel that
 * cannot take a run-time extent (a template instance, a plugin op's
 * kernel, a rank-0 buffer, a view whose stride does not divide a sample),
 * INVALID_ARGUMENT for a range outside 1..2^20. */
KILN_MUST_USE kiln_status_t kiln_plan_make_dynamic(kiln_plan_t* p, const char* name, int64_t lo, int64_t hi);

/* Whether plan buffer |b| has one slice per sample: its root is a model
 * input or output, an intermediate or a temporary (not a constant). */
bool kiln_plan_dyn_per_sample(const kiln_plan_t* p, int32_t b);

struct kiln_template_set_s;
/* The same, for a plan whose templates |set| chose (NULL: as above): a
 * template the set cannot run per sample (a GEMM without batch strides)
 * hands its kernel back to the tensor IR. */
KILN_MUST_USE kiln_status_t kiln_plan_make_dynamic_set(kiln_plan_t* p, const char* name, int64_t lo, int64_t hi,
                                                       const struct kiln_template_set_s* set);

/* Template kernel |k| of a plan being made per-sample in |dim| (plan_dyn_tmpl.c):
 * a GPU template takes the samples as its grid's dim 2, which the device
 * launches once per sample (its strides set here to the samples' distance;
 * it takes no dims buffer); *out_printed true when the kernel runs as its
 * own tensor IR instead (template dropped: the caller wraps it as any
 * printed kernel). UNSUPPORTED naming the node, kernel and template for one
 * that cannot step between samples. */
KILN_MUST_USE kiln_status_t kiln_plan_dyn_template(kiln_plan_t* p, int32_t k, const char* dim,
                                                   const struct kiln_template_set_s* set, bool* out_printed);

#endif
