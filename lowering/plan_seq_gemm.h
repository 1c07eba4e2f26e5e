/* A range program's MatMul kernels with a fused bias Add (a Linear layer:
 * MatMul then Add of a [N] constant, which the range's plain lowering
 * fuses into the GEMM kernel, a residual Add or a Gelu after it too) as
 * GEMM template descriptors: the template's bias (GHAS_BIAS, broadcast
 * along the rows, beta 1) computes the Add, GHAS_RES the residual, GACT
 * the Gelu.
 * kiln_template_gemm_match takes kernels without fused nodes only. */
#ifndef KILN_LOWERING_PLAN_SEQ_GEMM_H_
#define KILN_LOWERING_PLAN_SEQ_GEMM_H_

#include "lowering/template.h"

/* True when plan kernel |k| is a MatMul whose fused nodes are an Add of
 * its output and a tensor C of shape [N] (leading 1s allowed) and
 * optionally a second Add of that and a tensor R of Y's shape (a
 * residual: has_res, role 'R') or, where |gelu|, a Gelu of it (act), with
 * parameters A [..., M, K], B [K, N]
 * (one matrix), C, (R,) Y [..., M, N], all dense f32 and nothing else;
 * fills |out| (A's batches stacked into M, batch 1, has_bias with bias_sm
 * 0, bias_sn 1, alpha and beta 1). The OpenCL and Vulkan templates add the bias
 * then the residual, the graph's order. */
bool kiln_plan_seq_gemm_bias_match(const kiln_plan_t* plan, int32_t k, bool gelu, kiln_template_gemm_t* out);

#endif
