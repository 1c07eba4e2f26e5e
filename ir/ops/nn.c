/* The nn op family: convolutions, matrix products, pooling, normalisations
 * and reductions. The schemas live in the split files nn_conv.c,
 * nn_matmul.c, nn_pool.c, nn_norm.c, nn_groupnorm.c, nn_norm_more.c,
 * nn_reduce.c and nn_argmax.c; shared helpers in nn_common.c.
 */
#include "ir/ops/nn_internal.h"

#define OP(type, fn, min_in, max_in, min_out, max_out, pattern)            \
  {type, min_in, max_in, min_out, max_out, kiln_nn_##fn##_infer,           \
   kiln_nn_##fn##_run, kiln_nn_##fn##_flops, KILN_PATTERN_##pattern}

static const kiln_op_schema_t nn_ops[] = {
    OP("Conv", conv, 2, 3, 1, 1, OUT_ELEMWISE_FUSABLE),
    OP("ConvTranspose", conv_transpose, 2, 3, 1, 1, OUT_ELEMWISE_FUSABLE),
    OP("MatMul", matmul, 2, 2, 1, 1, OUT_ELEMWISE_FUSABLE),
    OP("Gemm", gemm, 2, 3, 1, 1, OUT_ELEMWISE_FUSABLE),
    /* Outputs 2..5 exist only in training mode, which infer rejects. */
    OP("BatchNormalization", batchnorm, 5, 5, 1, 5, BROADCAST),
    OP("MaxPool", maxpool, 1, 1, 1, 2, REDUCTION),
    OP("AveragePool", avgpool, 1, 1, 1, 1, REDUCTION),
    OP("LpPool", lppool, 1, 1, 1, 1, REDUCTION),
    OP("GlobalAveragePool", global_avgpool, 1, 1, 1, 1, REDUCTION),
    OP("GlobalMaxPool", global_maxpool, 1, 1, 1, 1, REDUCTION),
    OP("Softmax", softmax, 1, 1, 1, 1, REDUCTION),
    OP("LogSoftmax", log_softmax, 1, 1, 1, 1, REDUCTION),
    OP("LayerNormalization", layernorm, 2, 3, 1, 3, REDUCTION),
    OP("InstanceNormalization", instancenorm, 3, 3, 1, 1, REDUCTION),
    OP("GroupNormalization", groupnorm, 3, 3, 1, 1, REDUCTION),
    OP("LRN", lrn, 1, 1, 1, 1, REDUCTION),
    OP("LpNormalization", lpnorm, 1, 1, 1, 1, REDUCTION),
    OP("MeanVarianceNormalization", mvn, 1, 1, 1, 1, REDUCTION),
    OP("ReduceMean", reduce_mean, 1, 2, 1, 1, REDUCTION),
    OP("ReduceSum", reduce_sum, 1, 2, 1, 1, REDUCTION),
    OP("ReduceMax", reduce_max, 1, 2, 1, 1, REDUCTION),
    OP("ReduceMin", reduce_min, 1, 2, 1, 1, REDUCTION),
    OP("ReduceProd", reduce_prod, 1, 2, 1, 1, REDUCTION),
    OP("ReduceL1", reduce_l1, 1, 2, 1, 1, REDUCTION),
    OP("ReduceL2", reduce_l2, 1, 2, 1, 1, REDUCTION),
    OP("ReduceSumSquare", reduce_sum_square, 1, 2, 1, 1, REDUCTION),
    OP("ReduceLogSum", reduce_log_sum, 1, 2, 1, 1, REDUCTION),
    OP("ReduceLogSumExp", reduce_log_sum_exp, 1, 2, 1, 1, REDUCTION),
    OP("ArgMax", argmax, 1, 1, 1, 1, REDUCTION),
    OP("ArgMin", argmin, 1, 1, 1, 1, REDUCTION),
    OP("Hardmax", hardmax, 1, 1, 1, 1, REDUCTION),
};

const kiln_op_family_t kiln_ops_nn = {
    "nn", nn_ops, sizeof(nn_ops) / sizeof(nn_ops[0])};
