/* kiln op schemas: per-op shape/type inference, cost and reference kernel.
 *
 * Every supported ONNX op has one kiln_op_schema_t. Schemas are grouped in
 * families (elementwise, nn, tensor) each exporting a kiln_op_family_t; the
 * registry (ir/ops/registry.c) looks them up by op type.
 *
 * infer() is used twice:
 *   - at load time, on graph tensors whose shapes may hold symbolic or unknown
 *     dims and whose values are known only for constants (in[i]->flags has
 *     KILN_TENSOR_CONST and in[i]->value.data != NULL);
 *   - at run time by the reference executor, on tensors with static shapes
 *     and every value known.
 * It must set dtype and shape of every present output, validate attributes and
 * input ranks/dtypes, and return a status naming the problem (the caller adds
 * the node name, op and model file). When an input shape it needs is unknown
 * it sets the output shape to kiln_shape_unknown() (or partially known dims).
 * It may also compute an output's value (e.g. Shape of a static tensor) with
 * kiln_infer_set_value().
 *
 * run() is the reference kernel: plain, obviously-correct C over host arrays.
 * Outputs arrive allocated (dtype and static shape from infer). It must be
 * bounds-safe for any input values (e.g. Gather indices are checked).
 */
#ifndef KILN_IR_OP_H_
#define KILN_IR_OP_H_

#include "ir/graph.h"

#ifdef __cplusplus
extern "C" {
#endif

/* Most inputs/outputs one node may have (Concat/Split/Max fan-in/out). */
#define KILN_MAX_NODE_INPUTS 256
#define KILN_MAX_NODE_OUTPUTS 256

typedef struct kiln_infer_s {
  kiln_graph_t* graph;       /* for symbols and value storage; may be NULL at run time */
  const kiln_node_t* node;
  int64_t opset;             /* ai.onnx opset in force */
  int32_t n_in;
  kiln_tensor_t* const* in;  /* in[i] NULL for an omitted optional input */
  int32_t n_out;
  kiln_tensor_t* const* out; /* out[i] NULL for an omitted optional output */
  kiln_allocator_t allocator;/* for kiln_infer_set_value */
  bool runtime;              /* true when called by the executor */
} kiln_infer_t;

typedef struct kiln_ref_ctx_s {
  const kiln_node_t* node;
  int64_t opset;
  int32_t n_in;
  const kiln_array_t* const* in;  /* NULL for omitted optional inputs */
  int32_t n_out;
  kiln_array_t* const* out;       /* NULL for omitted optional outputs */
  kiln_allocator_t allocator;     /* for scratch */
  /* Runs subgraph |g| (an If branch, a Loop or Scan body) on |inputs|
   * (g->n_inputs: its formal inputs, then its outer-scope ones), filling
   * |outputs| (g->n_outputs, allocated with |allocator|). Set by the
   * executor running the graph (the reference executor runs it on the
   * reference kernels, the staged executor on compiled subprograms); NULL
   * where nothing can run a subgraph (constant folding). */
  kiln_status_t (*run_graph)(void* user, const kiln_graph_t* g, const kiln_array_t* inputs,
                             kiln_array_t* outputs);
  void* run_graph_user;
} kiln_ref_ctx_t;

/* What an op's kernel may fuse with, in the spirit of TVM's op patterns
 * (lowering/fuse.h applies them): ELEMWISE (Relu, Clip, ...), BROADCAST
 * (binary ops whose smaller operand broadcasts, per-channel affine maps),
 * INJECTIVE (each output element is one input element: Transpose, Pad,
 * Concat, Gather...), REDUCTION, OUT_ELEMWISE_FUSABLE (Conv, Gemm, MatMul:
 * anchors whose element-wise consumers fuse into their epilogue), OPAQUE
 * (never fused; Shape, and any op without a schema). */
typedef enum kiln_op_pattern_e {
  KILN_PATTERN_ELEMWISE = 0,
  KILN_PATTERN_BROADCAST,
  KILN_PATTERN_INJECTIVE,
  KILN_PATTERN_REDUCTION,
  KILN_PATTERN_OUT_ELEMWISE_FUSABLE,
  KILN_PATTERN_OPAQUE,
} kiln_op_pattern_t;

/* Which template kernels of the lowering (lowering/template.h) may compute
 * an op's plan kernel, so the matchers ask the schema instead of comparing op
 * names. A bit only makes the op a candidate: the matcher still checks the
 * node's operands, attributes and buffers. */
enum {
  KILN_OP_TMPL_GEMM = 1u << 0,       /* GEMM template (MatMul, Gemm) */
  KILN_OP_TMPL_GEMM_ATTRS = 1u << 1, /* with GEMM: the op has Gemm's bias input C and
                                        transA/transB/alpha/beta attributes */
  KILN_OP_TMPL_CONV = 1u << 2,       /* conv, Winograd and depthwise templates (Conv) */
};

/* One op: its arity, shape/type inference, reference kernel, cost, fusion
 * pattern and template eligibility. Each is one line of its family's
 * X-macro list (ir/ops/<family>.def), which also names the op's lowering
 * function: the family's .c file expands the list into this table, and
 * lowering/lower_<family>.c into the lowering table (which ir/ may not
 * import). */
typedef struct kiln_op_schema_s {
  const char* op_type;
  int16_t min_inputs, max_inputs;   /* max -1: variadic */
  int16_t min_outputs, max_outputs;
  kiln_status_t (*infer)(kiln_infer_t* ctx);
  kiln_status_t (*run)(const kiln_ref_ctx_t* ctx);
  /* Floating-point operations for `kiln info` (inputs/outputs inferred).
   * NULL: one per output element. */
  int64_t (*flops)(const kiln_infer_t* ctx);
  kiln_op_pattern_t pattern;
  uint32_t templates; /* KILN_OP_TMPL_* bits */
} kiln_op_schema_t;

typedef struct kiln_op_family_s {
  const char* name;
  const kiln_op_schema_t* ops;
  size_t count;
} kiln_op_family_t;

/* Families (each defined in ir/ops/<family>.c). */
extern const kiln_op_family_t kiln_ops_elementwise;
extern const kiln_op_family_t kiln_ops_nn;
extern const kiln_op_family_t kiln_ops_tensor;

/* Schema for ai.onnx |op_type| (domain "" or "ai.onnx"), or NULL. */
const kiln_op_schema_t* kiln_op_lookup(const char* domain, const char* op_type);
/* KILN_OP_TMPL_* bits of |n|'s op: of its schema when resolved, else looked
 * up by domain and op type (passes add nodes after resolve); 0 without one. */
uint32_t kiln_op_node_templates(const kiln_node_t* n);
/* All schemas, for listing the claimed op set. */
size_t kiln_op_count(void);
const kiln_op_schema_t* kiln_op_at(size_t i);

/* True when |n|'s reference kernel sizes its outputs itself: its output
 * shapes depend on values (NonZero, Unique, Compress, NonMaxSuppression)
 * or on a subgraph's run (If, Loop, Scan). Executors then pass the outputs
 * zeroed and the kernel allocates them with the context's allocator. */
bool kiln_op_sizes_outputs(const kiln_node_t* n);
/* True when |n| must run on the host between compiled stages: it sizes its
 * outputs, or it is a TopK whose K is not known at compile time. */
bool kiln_op_is_host_only(const kiln_graph_t* g, const kiln_node_t* n);

/* ---- attribute helpers (node may be any node) ------------------------ */

/* Value of an INT attribute or |def| when absent. A present attribute of the
 * wrong type is an error. */
kiln_status_t kiln_attr_int(const kiln_node_t* n, const char* name,
                            int64_t def, int64_t* out);
kiln_status_t kiln_attr_float(const kiln_node_t* n, const char* name,
                              float def, float* out);
/* STRING attribute; |def| when absent. Returned pointer lives with the node. */
kiln_status_t kiln_attr_string(const kiln_node_t* n, const char* name,
                               const char* def, const char** out);
/* INTS attribute: *out_count = -1 and *out = NULL when absent. */
kiln_status_t kiln_attr_ints(const kiln_node_t* n, const char* name,
                             const int64_t** out, int64_t* out_count);
kiln_status_t kiln_attr_floats(const kiln_node_t* n, const char* name,
                               const float** out, int64_t* out_count);
/* Required variants: absent is an INVALID_ARGUMENT naming the attribute. */
kiln_status_t kiln_attr_int_required(const kiln_node_t* n, const char* name,
                                     int64_t* out);

/* ---- inference helpers ---------------------------------------------- */

/* Multidirectional (numpy) broadcast of |a| and |b| into |out|; unknown and
 * symbolic dims are combined conservatively. Error names both shapes. */
kiln_status_t kiln_infer_broadcast(const kiln_shape_t* a,
                                   const kiln_shape_t* b, kiln_shape_t* out);
/* Normalises |axis| against |rank| (negative counts from the end). */
kiln_status_t kiln_infer_axis(int64_t axis, int32_t rank, int32_t* out_axis);
/* True when input |i| is present and its value is known. */
bool kiln_infer_has_value(const kiln_infer_t* ctx, int32_t i);
/* Reads a known 1-D (or scalar) integer input |i| into |out| (cap
 * KILN_MAX_RANK*2 or |cap| elements). Error when absent/unknown/too long. */
kiln_status_t kiln_infer_read_ints(const kiln_infer_t* ctx, int32_t i,
                                   int64_t* out, int64_t cap,
                                   int64_t* out_count);
/* Stores a computed value for output |i| (copied; sets dtype and shape). At
 * load time this marks the tensor CONST so later nodes can use it. */
kiln_status_t kiln_infer_set_value(kiln_infer_t* ctx, int32_t i,
                                   const kiln_array_t* value);
/* The dim to put where output |i|'s size depends on values: at load time a
 * fresh data-dependent symbol with upper bound |bound| (-1: unknown), the
 * output marked KILN_TENSOR_DATADEP; at run time KILN_DIM_UNKNOWN (the
 * kernel sizes it). */
kiln_status_t kiln_infer_datadep(kiln_infer_t* ctx, int32_t i, const char* what, int64_t bound,
                                 int64_t* out_dim);
/* Sets output |i| dtype and shape if present. */
void kiln_infer_set(kiln_infer_t* ctx, int32_t i, kiln_dtype_t dtype,
                    const kiln_shape_t* shape);

/* ---- reference-kernel helpers ---------------------------------------- */

/* Strides (in elements) of |s| broadcast to |out| rank: 0 for broadcast
 * dims. |s| rank <= out rank. */
void kiln_broadcast_strides(const kiln_shape_t* s, const kiln_shape_t* out,
                            int64_t* strides);

#ifdef __cplusplus
}
#endif
#endif /* KILN_IR_OP_H_ */
