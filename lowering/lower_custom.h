/* Plugin ops in a plan (include/kiln/custom_op.h): lowering emits one
 * kernel per plugin node whose tensor-IR function has the node's present
 * inputs and its outputs as parameters and an empty body; the instance
 * below, hung on the plan kernel, is what the targets print instead
 * (targets/custom_kernel.h). Fusion leaves such kernels alone. */
#ifndef KILN_LOWERING_LOWER_CUSTOM_H_
#define KILN_LOWERING_LOWER_CUSTOM_H_

#include "kiln/custom_op.h"
#include "lowering/lower.h"

#ifdef __cplusplus
extern "C" {
#endif

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
} kiln_custom_instance_t;

/* The lowering of every plugin op (its node's schema is custom). */
kiln_lower_op_t kiln_lower_custom;

#ifdef __cplusplus
}
#endif
#endif /* KILN_LOWERING_LOWER_CUSTOM_H_ */
