/* kiln graph IR: tensors, nodes and attributes of one model.
 *
 * A graph owns an arena for its names, attributes and index arrays, and owns
 * the data of its constant tensors (initializers, Constant outputs, values
 * folded by inference). Tensors and nodes are addressed by int32 index;
 * tensor index -1 in a node's input list is an omitted optional input.
 *
 * Build a graph with the frontend (frontend/onnx.h) or by hand:
 *   kiln_graph_create(kiln_allocator_system(), &g);
 *   kiln_graph_add_input(g, "x", KILN_DTYPE_F32, &shape, NULL);
 *   kiln_graph_add_node(g, "Relu", "relu0", 1, (const char*[]){"x"}, 1,
 *                       (const char*[]){"y"}, NULL);
 *   kiln_graph_add_output(g, "y");
 *   kiln_graph_infer(g);   // shape/type inference + verification
 * Thread-compatible: one thread at a time.
 */
#ifndef KILN_IR_GRAPH_H_
#define KILN_IR_GRAPH_H_

#include <stdio.h>
#include <string.h>

#include "ir/arena.h"
#include "kiln/array.h"

#ifdef __cplusplus
extern "C" {
#endif

struct kiln_op_schema_s;

typedef enum kiln_attr_type_e {
  KILN_ATTR_UNDEFINED = 0,
  KILN_ATTR_FLOAT,
  KILN_ATTR_INT,
  KILN_ATTR_STRING,
  KILN_ATTR_TENSOR,
  KILN_ATTR_GRAPH, /* a subgraph (If/Loop/Scan bodies): kiln_attr_t.graph */
  KILN_ATTR_FLOATS,
  KILN_ATTR_INTS,
  KILN_ATTR_STRINGS,
  KILN_ATTR_TENSORS,
  KILN_ATTR_GRAPHS,
} kiln_attr_type_t;

typedef struct kiln_attr_s {
  const char* name;
  kiln_attr_type_t type;
  float f;
  int64_t i;
  const char* s; /* NUL-terminated; s_len excludes the NUL */
  size_t s_len;
  int64_t count; /* elements of floats/ints/strings/tensors */
  const float* floats;
  const int64_t* ints;
  const char* const* strings;
  kiln_array_t* tensor;  /* TENSOR: one; TENSORS: |count| */
  /* GRAPH: the subgraph, owned by the graph holding the node (its
   * |subgraphs| list; copying the attribute copies the pointer). NULL for a
   * GRAPH attribute made by hand without one. */
  struct kiln_graph_s* graph;
} kiln_attr_t;

enum {
  KILN_TENSOR_INPUT = 1u << 0,       /* graph input (fed at run time) */
  KILN_TENSOR_OUTPUT = 1u << 1,      /* graph output */
  KILN_TENSOR_INITIALIZER = 1u << 2, /* weights from the model file */
  KILN_TENSOR_CONST = 1u << 3,       /* value known at compile time */
  /* A dim of it depends on values, not shapes (NonZero, Unique, NMS, a TopK
   * with a run-time K, Loop's scan outputs): the dim is a symbol of its own
   * whose upper bound, where known, is in the graph's |datadep| list, and
   * executors size the tensor after its producer ran (compiler/staged.h). */
  KILN_TENSOR_DATADEP = 1u << 4,
};

typedef struct kiln_tensor_s {
  const char* name;
  kiln_dtype_t dtype;  /* UNDEFINED until inferred */
  kiln_shape_t shape;  /* rank -1 until inferred */
  int32_t producer;    /* node index, -1 for inputs/initializers */
  uint32_t flags;
  /* When flags has KILN_TENSOR_CONST: the value (graph-owned data). */
  kiln_array_t value;
} kiln_tensor_t;

typedef struct kiln_node_s {
  const char* name;    /* never NULL; "" in the model becomes "<op>_<index>" */
  const char* op_type;
  const char* domain;  /* "" for ai.onnx */
  int32_t n_inputs;
  int32_t* inputs;     /* tensor indices, -1 = omitted optional */
  int32_t n_outputs;
  int32_t* outputs;    /* tensor indices, -1 = omitted optional */
  int32_t n_attrs;
  kiln_attr_t* attrs;
  const struct kiln_op_schema_s* schema; /* set by kiln_graph_resolve_ops */
} kiln_node_t;

typedef struct kiln_opset_s {
  const char* domain;
  int64_t version;
} kiln_opset_t;

typedef struct kiln_graph_s {
  kiln_allocator_t allocator;
  kiln_arena_t arena;
  const char* name;
  const char* source; /* file the graph came from, for messages; may be "" */

  kiln_tensor_t* tensors;
  int32_t n_tensors, cap_tensors;
  kiln_node_t* nodes;
  int32_t n_nodes, cap_nodes;

  int32_t* inputs; /* graph inputs in declaration order (not initializers) */
  int32_t n_inputs, cap_inputs;
  int32_t* outputs;
  int32_t n_outputs, cap_outputs;

  const char** symbols; /* symbols[1..n_symbols]: dim_param names */
  int32_t n_symbols, cap_symbols;

  kiln_opset_t* opsets;
  int32_t n_opsets, cap_opsets;
  int64_t opset; /* ai.onnx version in force (0 if not imported) */

  /* name -> tensor index hash table (open addressing). */
  int32_t* name_table;
  int32_t name_table_cap;

  /* Control flow. The subgraphs of this graph's If/Loop/Scan nodes, owned
   * (destroyed with it). In a subgraph, the last |n_outer| inputs are the
   * names it reads from the enclosing scope: the frontend appends them to
   * the owning node's inputs too, so that dependencies, liveness and
   * ordering see them. |sub_prepared|: inference ran on it once (the
   * owning node's infer prepares it with the outer tensors' types). */
  struct kiln_graph_s** subgraphs;
  int32_t n_subgraphs, cap_subgraphs;
  int32_t n_outer;
  bool sub_prepared;
  /* Data-dependent dims (KILN_TENSOR_DATADEP): symbol and upper bound
   * (-1: none known) of each. */
  struct kiln_datadep_dim_s* datadep;
  int32_t n_datadep, cap_datadep;
} kiln_graph_t;

typedef struct kiln_datadep_dim_s {
  int32_t sym;
  int64_t bound;
} kiln_datadep_dim_t;

kiln_status_t kiln_graph_create(kiln_allocator_t allocator,
                                kiln_graph_t** out_graph);
void kiln_graph_destroy(kiln_graph_t* graph);

/* Copies |s| into the graph arena. */
const char* kiln_graph_strdup(kiln_graph_t* g, const char* s);

/* Index of tensor |name| or -1. */
int32_t kiln_graph_find_tensor(const kiln_graph_t* g, const char* name);
/* Returns the index of tensor |name|, creating an empty one if absent. */
kiln_status_t kiln_graph_get_or_add_tensor(kiln_graph_t* g, const char* name,
                                           int32_t* out_index);
/* Symbol index for dim_param |name| (created if new). */
kiln_status_t kiln_graph_symbol(kiln_graph_t* g, const char* name,
                                int32_t* out_sym);

/* Declares a graph input. Fails on a duplicate name. */
kiln_status_t kiln_graph_add_input(kiln_graph_t* g, const char* name,
                                   kiln_dtype_t dtype,
                                   const kiln_shape_t* shape,
                                   int32_t* out_index);
/* Adds a constant tensor; the graph takes ownership of |value|->data
 * (allocated with the graph's allocator) and zeroes *value. */
kiln_status_t kiln_graph_add_initializer(kiln_graph_t* g, const char* name,
                                         kiln_array_t* value,
                                         int32_t* out_index);
/* Specializes graph input |input_index| to |value| (copied): the tensor
 * becomes a known constant for inference and lowering while staying a graph
 * input. Used when an input determines tensor shapes (a Reshape target fed at
 * run time) and a target needs static shapes; callers must then check that
 * the arrays they run with equal the bound value. Call before prepare. */
kiln_status_t kiln_graph_bind_input_value(kiln_graph_t* g, int32_t input_index,
                                          const kiln_array_t* value);
/* True when every tensor some node reads or writes has a static shape. */
bool kiln_graph_all_static(const kiln_graph_t* g);
/* Marks an existing-or-future tensor as a graph output. */
kiln_status_t kiln_graph_add_output(kiln_graph_t* g, const char* name);
/* Adds a node; input/output names are resolved or created. "" names an
 * omitted optional. |attrs| (may be NULL) are deep-copied. Fails when an
 * output name is already produced (duplicate tensor names). */
kiln_status_t kiln_graph_add_node(kiln_graph_t* g, const char* op_type,
                                  const char* name, int32_t n_inputs,
                                  const char* const* inputs, int32_t n_outputs,
                                  const char* const* outputs, int32_t n_attrs,
                                  const kiln_attr_t* attrs,
                                  int32_t* out_node);
/* Sets the opset for |domain| ("" = ai.onnx). */
kiln_status_t kiln_graph_set_opset(kiln_graph_t* g, const char* domain,
                                   int64_t version);

/* Attribute values for kiln_graph_add_node (which deep-copies them). The
 * returned structs borrow |name| and the pointed-to data. */
static inline kiln_attr_t kiln_attr_make_int(const char* name, int64_t v) {
  kiln_attr_t a = {.name = name, .type = KILN_ATTR_INT, .i = v};
  return a;
}
static inline kiln_attr_t kiln_attr_make_float(const char* name, float v) {
  kiln_attr_t a = {.name = name, .type = KILN_ATTR_FLOAT, .f = v};
  return a;
}
static inline kiln_attr_t kiln_attr_make_string(const char* name, const char* v) {
  kiln_attr_t a = {.name = name, .type = KILN_ATTR_STRING, .s = v, .s_len = strlen(v)};
  return a;
}
static inline kiln_attr_t kiln_attr_make_ints(const char* name, int64_t n, const int64_t* v) {
  kiln_attr_t a = {.name = name, .type = KILN_ATTR_INTS, .count = n, .ints = v};
  return a;
}
static inline kiln_attr_t kiln_attr_make_tensor(const char* name, kiln_array_t* t) {
  kiln_attr_t a = {.name = name, .type = KILN_ATTR_TENSOR, .tensor = t};
  return a;
}

/* Takes ownership of |sub| (destroyed with |g|, or at once on failure). */
kiln_status_t kiln_graph_adopt_subgraph(kiln_graph_t* g, kiln_graph_t* sub);
/* Makes every tensor |sub|'s nodes or outputs read that nothing in |sub|
 * defines an input from the enclosing scope (appended to its inputs with
 * no type yet; |sub|->n_outer counts them). Call after adding its nodes. */
kiln_status_t kiln_graph_collect_outer(kiln_graph_t* sub);
/* A fresh data-dependent dim for output |what| of node |node| (a symbol
 * named "node:what") with upper bound |bound| (-1: unknown): the dim
 * value to put in the shape. */
kiln_status_t kiln_graph_datadep_dim(kiln_graph_t* g, const char* node, const char* what, int64_t bound,
                                     int64_t* out_dim);
/* The upper bound of data-dependent dim |dim|, or -1 (not one, or none
 * known). */
int64_t kiln_graph_datadep_bound(const kiln_graph_t* g, int64_t dim);

/* Attribute lookup; NULL if absent. */
const kiln_attr_t* kiln_node_attr(const kiln_node_t* n, const char* name);

/* Resolves every node's schema. Every node whose op kiln lacks is listed in
 * one UNSUPPORTED error: "unsupported op X (domain 'd', opset N), ...". */
kiln_status_t kiln_graph_resolve_ops(kiln_graph_t* g);
/* Reorders nodes topologically. Fails on a cycle naming a node in it, or on
 * a node input that nothing produces. */
kiln_status_t kiln_graph_toposort(kiln_graph_t* g);
/* Runs shape/type inference node by node (folds small constant subgraphs
 * such as Shape->Gather->Concat so Reshape targets become known). */
kiln_status_t kiln_graph_infer(kiln_graph_t* g);
/* Structural checks: indices in range, each tensor produced once, inputs
 * defined before use, outputs produced. */
kiln_status_t kiln_graph_verify(const kiln_graph_t* g);
/* resolve_ops + toposort + infer + verify: what a loader calls. */
kiln_status_t kiln_graph_prepare(kiln_graph_t* g);

/* "[1,3,N,224]" with symbolic dims spelled by name, "?" for unknown. */
char* kiln_graph_format_shape(const kiln_graph_t* g, const kiln_shape_t* s,
                              char* buf, size_t n);
/* Text dump: inputs, initializers (shape only), nodes with attributes. */
void kiln_graph_dump(const kiln_graph_t* g, FILE* f);
/* Graphviz dot. */
void kiln_graph_write_dot(const kiln_graph_t* g, FILE* f);

#ifdef __cplusplus
}
#endif
#endif /* KILN_IR_GRAPH_H_ */
