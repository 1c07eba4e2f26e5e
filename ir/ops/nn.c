/* The nn op family: convolutions, matrix products, pooling, normalisations
 * and reductions. The schemas live in the split files nn_conv.c,
 * nn_matmul.c, nn_pool.c, nn_norm.c and nn_reduce.c; shared helpers in
 * nn_common.c.
 */
#include "ir/ops/nn_internal.h"

#define OP(type, fn, min_in, max_in, min_out, max_out)                     \
  {type, min_in, max_in, min_out, max_out, kiln_nn_##fn##_infer,           \
   kiln_nn_##fn##_run, kiln_nn_##fn##_flops}

static const kiln_op_schema_t nn_ops[] = {
    OP("Conv", conv, 2, 3, 1, 1),
    OP("ConvTranspose", conv_transpose, 2, 3, 1, 1),
    OP("MatMul", matmul, 2, 2, 1, 1),
    OP("Gemm", gemm, 2, 3, 1, 1),
    /* Outputs 2..5 exist only in training mode, which infer rejects. */
    OP("BatchNormalization", batchnorm, 5, 5, 1, 5),
    OP("MaxPool", maxpool, 1, 1, 1, 2),
    OP("AveragePool", avgpool, 1, 1, 1, 1),
    OP("GlobalAveragePool", global_avgpool, 1, 1, 1, 1),
    OP("Softmax", softmax, 1, 1, 1, 1),
    OP("LogSoftmax", log_softmax, 1, 1, 1, 1),
    OP("LayerNormalization", layernorm, 2, 3, 1, 3),
    OP("ReduceMean", reduce_mean, 1, 2, 1, 1),
    OP("ReduceSum", reduce_sum, 1, 2, 1, 1),
    OP("ReduceMax", reduce_max, 1, 2, 1, 1),
};

const kiln_op_family_t kiln_ops_nn = {
    "nn", nn_ops, sizeof(nn_ops) / sizeof(nn_ops[0])};
