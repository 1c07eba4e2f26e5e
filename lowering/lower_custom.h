/* Plugin ops in a plan (include/kiln/custom_op.h): lowering emits one
 * kernel per plugin node whose tensor-IR function has the node's present
 * inputs and its outputs as parameters and an empty body; the instance
 * below, hung on the plan kernel, is what the targets print instead
 * (targets/custom_kernel.h). Fusion leaves such kernels alone. */
#ifndef KILN_LOWERING_LOWER_CUSTOM_H_
#define KILN_LOWERING_LOWER_CUSTOM_H_

#include "kiln/custom_op.h"
#include "lowering/lower.h"
#include "lowering/plan.h"

#ifdef __cplusplus
extern "C" {
#endif

/* Kernels kiln's fusion may fold into one plugin kernel's output 0. */
#define KILN_CUSTOM_MAX_EPI 16

typedef struct kiln_custom_instance_s {
  const kiln_custom_op_t* op;
  const char* node; /* graph node name (the graph's storage) */
  /* per declared slot: dtype and static shape (data NULL); dtype UNDEFINED
   * for an omitted optional input */
  kiln_custom_tensor_t in[KILN_CUSTOM_MAX_IO], out[KILN_CUSTOM_MAX_IO];
  int32_t in_arg[KILN_CUSTOM_MAX_IO], out_arg[KILN_CUSTOM_MAX_IO]; /* kernel parameter, -1: none */
  kiln_custom_attr_t attrs[KILN_CUSTOM_MAX_ATTRS]; /* borrow the graph's storage */
  const char* epilogue; /* the activation fused into output 0 ("Relu", ...), or NULL */
  float epilogue_alpha; /* LeakyRelu's */
  /* CPU class with the op's cpu_fn: the kernel parameter of the node's
   * status word (kiln_lower_status), the last one, where the printed call
   * stores KILN_PB_CHECK_PLUGIN_FN when the function fails; else -1. */
  int32_t status_arg;
  /* Element-wise kernels kiln's fusion folded into output 0 after the
   * graph pass's activation (lowering/fuse.c), in order: each an f32
   * expression of its variable (the value so far) and constants. The
   * targets print each as a function and KILN_EPILOGUE0(v) as their
   * composition, so a chain costs its length, not the product of how
   * often each step reads its input (as one substituted tree would). */
  int32_t n_epi;
  const tir_expr_t* epi_expr[KILN_CUSTOM_MAX_EPI];
  const tir_var_t* epi_var[KILN_CUSTOM_MAX_EPI];
} kiln_custom_instance_t;

/* The lowering of every plugin op (its node's schema is custom). */
kiln_lower_op_t kiln_lower_custom;

/* For lowering/fuse.c: the epilogue step consumer kernel |kc| of |plan|
 * adds to a plugin kernel when folded into it. |value| is the consumer's
 * stored value in its naive nest over |vars| (|rank| of them), whose loads
 * of |x| (the plugin's output 0) use the identity index. True with
 * *out_expr (an f32 expression of *out_var) when |value| depends on
 * nothing but that element and constants of one element (inlined); false
 * when it depends on anything else (an index, another tensor): then the
 * fusion is not done. NULL in *out_expr with true: out of memory
 * (tir_ctx_status says). */
bool kiln_custom_epilogue_expr(tir_ctx_t* c, const kiln_plan_t* plan, const kiln_plan_kernel_t* kc,
                               const tir_buffer_t* x, const tir_expr_t* value, int32_t rank,
                               const tir_var_t* const* vars, const tir_expr_t** out_expr,
                               const tir_var_t** out_var);

#ifdef __cplusplus
}
#endif
#endif /* KILN_LOWERING_LOWER_CUSTOM_H_ */
