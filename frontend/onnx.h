/* kiln ONNX frontend: reads .onnx model files and TensorProto (.pb) files.
 *
 * Parsing uses protobuf-c code generated at build time from the system
 * onnx.proto. Before protobuf-c sees the bytes, a bounded walker checks the
 * wire format (nesting depth, field sizes) so hostile files fail cleanly.
 * Initializers are read from raw_data, the typed repeated fields, or external
 * data files; external locations must be relative paths that stay inside the
 * model's folder (no "..", no absolute paths, no symlinks leading out).
 *
 *   kiln_onnx_options_t o; kiln_onnx_options_default(&o);
 *   kiln_graph_t* g = NULL;
 *   KILN_RETURN_IF_ERROR(kiln_onnx_load_model("m.onnx", &o, alloc, &g));
 *
 * Errors name the file and the node/tensor concerned. Thread-safe (no
 * global state).
 */
#ifndef KILN_FRONTEND_ONNX_H_
#define KILN_FRONTEND_ONNX_H_

#include "ir/graph.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef struct kiln_onnx_options_s {
  int64_t max_file_bytes;     /* model file size cap (default 4 GiB) */
  int64_t max_tensor_bytes;   /* one tensor's bytes (default 4 GiB) */
  int64_t max_total_bytes;    /* all weights together (default 16 GiB) */
  int32_t max_nesting;        /* protobuf message nesting (default 32) */
  int64_t max_nodes;          /* default 1,000,000 */
  bool allow_external_data;   /* default true */
} kiln_onnx_options_t;

void kiln_onnx_options_default(kiln_onnx_options_t* o);

/* Parses |path| into a new graph without inference. */
kiln_status_t kiln_onnx_parse_model(const char* path,
                                    const kiln_onnx_options_t* options,
                                    kiln_allocator_t allocator,
                                    kiln_graph_t** out_graph);
/* Parses and prepares (resolve ops, toposort, infer, verify). */
kiln_status_t kiln_onnx_load_model(const char* path,
                                   const kiln_onnx_options_t* options,
                                   kiln_allocator_t allocator,
                                   kiln_graph_t** out_graph);
/* Reads one serialized TensorProto (the ONNX test-data format) into |out|
 * (data allocated with |allocator|). |out_name| (optional) receives a
 * malloc'd copy of the tensor's name, or NULL when it has none. */
kiln_status_t kiln_onnx_load_tensor(const char* path,
                                    const kiln_onnx_options_t* options,
                                    kiln_allocator_t allocator,
                                    kiln_array_t* out, char** out_name);

#ifdef __cplusplus
}
#endif
#endif /* KILN_FRONTEND_ONNX_H_ */
