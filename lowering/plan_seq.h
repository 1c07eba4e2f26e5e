/* A range on a dim inside the kernels' shapes (a sequence length): one plan
 * for every value, found by anti-unifying plans lowered at a few sizes.
 *
 * `kiln compile enc.onnx --dim seq=8..256` lowers and fuses the model at
 * five values of the dim (lo, lo + 1, the middle, hi - 1, hi). Every plan
 * must have the same buffers, kernels and arguments, and every kernel the
 * same loop nest apart from integers: an integer (a loop extent, an index
 * offset, a clamp) that differs between the plans becomes a polynomial of
 * degree <= 2 in the dim's run-time value (read from the dims buffer, as
 * in lowering/plan_dyn.h), fitted on three of the values and checked on the
 * other two; a loop whose extent changes becomes a tir_for_dyn loop whose
 * static bound is its largest extent in the range. A buffer whose shape
 * changes is indexed flat, with strides that are such polynomials (dense
 * at the run's value), and keeps the size of the top of the range. A
 * kernel whose scheduled form differs between the values (tiles and
 * remainders fixed per size) is taken in its naive form, which lowering
 * builds from the shapes alone. What does not unify is refused naming the
 * node and the dim: another loop nest, a float constant or a constant
 * tensor computed from the dim, a template or plugin kernel, an input or
 * output whose shape has the dim other than as one whole axis.
 *
 * The result is the plan at hi, made dynamic in place: n_dims 1 and
 * |dim_axis| set (the axis of every model input and output that has the
 * dim; lowering/plan_seq_mem.h gives the buffers their sizes per value). */
#ifndef KILN_LOWERING_PLAN_SEQ_H_
#define KILN_LOWERING_PLAN_SEQ_H_

#include "lowering/plan.h"

/* Sizes kiln_plan_seq_unify takes its plans at, for dim range [lo, hi]
 * (hi - lo >= 4): lo, lo + 1, (lo + hi) / 2, hi - 1, hi. */
#define KILN_PLAN_SEQ_SIZES 5
void kiln_plan_seq_sizes(int64_t lo, int64_t hi, int64_t out[KILN_PLAN_SEQ_SIZES]);

/* Makes plans[KILN_PLAN_SEQ_SIZES - 1] (the plan at hi) the plan for every
 * value of dim |name| in [lo, hi]; plans[i] was lowered (and fused) with
 * the dim at kiln_plan_seq_sizes' value i. The other plans are only read.
 * UNSUPPORTED naming the node, its op and the dim for what does not unify
 * (see above), INVALID_ARGUMENT for a range of fewer than 5 values or
 * outside 1..2^20. */
KILN_MUST_USE kiln_status_t kiln_plan_seq_unify(kiln_plan_t* const* plans, const char* name, int64_t lo, int64_t hi);

#endif
