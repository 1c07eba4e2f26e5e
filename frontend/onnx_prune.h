/* kiln ONNX prune writer: rewrites an ONNX model file by a pruning plan
 * (ir/prune_plan.h) into a plain ONNX model with fewer channels that
 * onnxruntime, and kiln itself, load.
 *
 *   KILN_RETURN_IF_ERROR(kiln_onnx_write_pruned("m.onnx", &plan, "m.pruned.onnx"));
 *
 * The original file is re-read with protobuf-c and everything the plan does
 * not name is kept as it was, except the graph's value_info (intermediate
 * shapes the pruning changes; runtimes infer them again). Sliced
 * initializers are written as raw_data; a graph input that shares an
 * initializer's name gets the new dims. Initializers in external files are
 * refused. Errors name the file and the tensor or node. Thread-safe.
 */
#ifndef KILN_FRONTEND_ONNX_PRUNE_H_
#define KILN_FRONTEND_ONNX_PRUNE_H_

#include "ir/prune_plan.h"
#include "kiln/status.h"

#ifdef __cplusplus
extern "C" {
#endif

KILN_MUST_USE kiln_status_t kiln_onnx_write_pruned(const char* in_path, const kiln_prune_plan_t* plan,
                                                   const char* out_path);

/* `kiln prune --sparsity` (compiler/prune_sparse.h): a copy of the model
 * with the elements of initializer |names|[i] that |masks|[i] marks (1 =
 * zero it; |counts|[i] elements; a NULL mask leaves it) set to zero, the
 * shapes and everything else as they were. Float initializers only. */
KILN_MUST_USE kiln_status_t kiln_onnx_write_zeroed(const char* in_path, int32_t n, const char* const* names,
                                                   const uint8_t* const* masks, const int64_t* counts,
                                                   const char* out_path);

#ifdef __cplusplus
}
#endif
#endif /* KILN_FRONTEND_ONNX_PRUNE_H_ */
