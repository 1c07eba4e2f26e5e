/* The lowering of the ops that never become tensor-IR kernels: those whose
 * output shape depends on values (NonZero, Compress, Unique,
 * NonMaxSuppression, a TopK with a run-time K) and control flow (If, Loop,
 * Scan). A compiled program's buffers have fixed sizes, so these run on the
 * host between compiled stages (compiler/staged.h), which sizes their
 * outputs after they ran and compiles what follows for the real shape. A
 * plain compile that reaches one is refused with that reason (and a GPU
 * target's partition hands it to the CPU, whose lowering refuses it too). */
#include "lowering/lower_tensor_impl.h"

kiln_status_t kiln_lower_tensor_host(kiln_lower_ctx_t* ctx) {
  return kiln_make_status(KILN_UNSUPPORTED,
                          "%s: its output shape depends on values or on a subgraph; it runs on the host between "
                          "compiled stages (staged execution), not inside one program",
                          ctx->node->op_type);
}
