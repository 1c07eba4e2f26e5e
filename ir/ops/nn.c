/* The nn op family: convolutions, matrix products, pooling, normalisations
 * and reductions. The schemas live in the split files nn_conv.c,
 * nn_matmul.c, nn_pool.c, nn_norm.c, nn_groupnorm.c, nn_norm_more.c,
 * nn_reduce.c and nn_argmax.c; shared helpers in nn_common.c.
 */
#include "ir/ops/nn_internal.h"

#define KILN_OP(type, stem, min_in, max_in, min_out, max_out, flops, pattern, tmpl, lower) \
  {type, min_in, max_in, min_out, max_out, kiln_nn_##stem##_infer,                         \
   kiln_nn_##stem##_run, flops, KILN_PATTERN_##pattern, tmpl},

static const kiln_op_schema_t nn_ops[] = {
#include "ir/ops/nn.def"
};
#undef KILN_OP

const kiln_op_family_t kiln_ops_nn = {
    "nn", nn_ops, sizeof(nn_ops) / sizeof(nn_ops[0])};
