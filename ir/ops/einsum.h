/* Einsum equations (ir/ops/tensor_einsum.c), shared by the reference kernel
 * and the lowering (lowering/lower_tensor_einsum.c) so both read an equation
 * the same way.
 *
 * An equation names every dim of every operand with a label (a letter, or
 * one of the dims an ellipsis stands for); the output's labels are the
 * explicit right-hand side, or (without "->") the ellipsis dims followed by
 * the letters used exactly once, in ASCII order. Output element o is the sum,
 * over every value of the labels missing from the output, of the product of
 * the operands' elements those labels address. A label repeated within an
 * operand takes its diagonal. A label's size is its dims' size; a dim of
 * size 1 broadcasts against a larger one (ellipsis dims are right-aligned
 * and may be missing in an operand, as in numpy). */
#ifndef KILN_IR_OPS_EINSUM_H_
#define KILN_IR_OPS_EINSUM_H_

#include "ir/op.h"

#define KILN_EINSUM_MAX_INPUTS 8
#define KILN_EINSUM_MAX_LABELS (52 + KILN_MAX_RANK)

typedef struct kiln_einsum_s {
  int32_t n_in;
  int32_t in_rank[KILN_EINSUM_MAX_INPUTS];
  int32_t in_label[KILN_EINSUM_MAX_INPUTS][KILN_MAX_RANK];
  int32_t out_rank;
  int32_t out_label[KILN_MAX_RANK];
  /* Labels summed over (used by an operand, absent from the output). */
  int32_t n_sum;
  int32_t sum_label[KILN_EINSUM_MAX_LABELS];
  /* Per label id: its size (KILN_DIM_UNKNOWN when a dim is unknown), or -2
   * for an id no operand uses. */
  int64_t size[KILN_EINSUM_MAX_LABELS];
} kiln_einsum_t;

/* Parses |eq| for |n_in| operands of shapes |shapes| (ranks known; dims may
 * be unknown). INVALID_ARGUMENT naming the problem for a malformed equation,
 * a rank that disagrees with the operand's labels or sizes that do not
 * match; UNSUPPORTED beyond KILN_EINSUM_MAX_INPUTS operands. */
kiln_status_t kiln_einsum_parse(const char* eq, int32_t n_in, const kiln_shape_t* const* shapes, kiln_einsum_t* out);

#endif /* KILN_IR_OPS_EINSUM_H_ */
