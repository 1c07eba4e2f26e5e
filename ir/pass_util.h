/* Helpers shared by the graph passes (ir/pass_*.c). Internal to ir/. */
#ifndef KILN_IR_PASS_UTIL_H_
#define KILN_IR_PASS_UTIL_H_

#include "ir/op.h"
#include "ir/passes.h"

/* Keep in sync with graph.c: the tensor's value.data is graph-owned. */
#define PU_OWNED_VALUE (1u << 31)

/* The pass entry points (listed in kiln_graph_passes). */
kiln_status_t kiln_pass_remove_noops(kiln_graph_t* g, kiln_pass_stats_t* st);
kiln_status_t kiln_pass_fold_constants(kiln_graph_t* g, kiln_pass_stats_t* st);
kiln_status_t kiln_pass_fold_batchnorm(kiln_graph_t* g, kiln_pass_stats_t* st);
kiln_status_t kiln_pass_fold_chains(kiln_graph_t* g, kiln_pass_stats_t* st);
kiln_status_t kiln_pass_patterns(kiln_graph_t* g, kiln_pass_stats_t* st);
kiln_status_t kiln_pass_cse(kiln_graph_t* g, kiln_pass_stats_t* st);
kiln_status_t kiln_pass_dce(kiln_graph_t* g, kiln_pass_stats_t* st);
kiln_status_t kiln_pass_fold_qdq(kiln_graph_t* g, kiln_pass_stats_t* st);
kiln_status_t kiln_pass_einsum(kiln_graph_t* g, kiln_pass_stats_t* st);
kiln_status_t kiln_pass_plugin_patterns(kiln_graph_t* g, kiln_pass_stats_t* st);
kiln_status_t kiln_pass_inline_const_if(kiln_graph_t* g, kiln_pass_stats_t* st); /* pass_control.c */

/* Per-pass scratch: consumer counts and the dead-node mask. */
typedef struct pu_ctx_s {
  kiln_graph_t* g;
  int32_t* uses; /* n_tensors: number of node inputs reading the tensor */
  bool* dead;    /* n_nodes (capacity grows with added nodes) */
  int32_t cap_dead;
  int32_t cap_uses;
  int32_t n_new; /* counter for fresh names */
} pu_ctx_t;

kiln_status_t pu_begin(pu_ctx_t* c, kiln_graph_t* g);
/* Recounts uses (after rewiring). */
void pu_count_uses(pu_ctx_t* c);
/* Removes the dead nodes (if any) and re-prepares; frees the scratch. */
kiln_status_t pu_end(pu_ctx_t* c, kiln_status_t s);
/* Grows |dead| and |uses| to the current node and tensor counts. */
kiln_status_t pu_sync(pu_ctx_t* c);

static inline bool pu_is_const(const kiln_graph_t* g, int32_t t) {
  return t >= 0 && (g->tensors[t].flags & KILN_TENSOR_CONST) && g->tensors[t].value.data &&
         !(g->tensors[t].flags & KILN_TENSOR_INPUT);
}
static inline bool pu_is_output(const kiln_graph_t* g, int32_t t) {
  return t >= 0 && (g->tensors[t].flags & KILN_TENSOR_OUTPUT);
}
/* Node producing |t| when it is alive, else -1. */
int32_t pu_producer(const pu_ctx_t* c, int32_t t);
/* True when |t| is read by exactly one node and is not a graph output. */
bool pu_single_use(const pu_ctx_t* c, int32_t t);
/* Constant scalar (any element count 1) as double. */
bool pu_const_scalar(const kiln_graph_t* g, int32_t t, double* out);
/* Constant of any element count whose elements all equal |v| (within tol). */
bool pu_const_all(const kiln_graph_t* g, int32_t t, double v, double tol);
bool pu_op(const kiln_node_t* n, const char* op);
/* For a two-input node: the index (0/1) of the input equal to |t|, or -1. */
int32_t pu_other(const kiln_node_t* n, int32_t t);

/* Drops a tensor's known value (its producer changed). */
void pu_clear_value(kiln_graph_t* g, int32_t t);
/* Makes every node read |to| instead of |from|. */
void pu_rewire(pu_ctx_t* c, int32_t from, int32_t to);
/* Node |ni|'s output |old| is to be replaced by |repl| (same value) and the
 * node removed. Graph outputs keep their names: when |old| is one, the
 * producer of |repl| is made to write |old| instead. Returns false (and
 * changes nothing) when that is impossible. Marks |ni| dead. */
bool pu_forward(pu_ctx_t* c, int32_t ni, int32_t old, int32_t repl);
/* Detaches output |t| from its producer so a new node may write it. */
void pu_detach(pu_ctx_t* c, int32_t t);
/* Fresh tensor name "<base>__<pass>_<n>". */
const char* pu_name(pu_ctx_t* c, const char* base, const char* tag, char* buf, size_t n);
/* Adds a f32 initializer (data copied). */
kiln_status_t pu_add_f32(pu_ctx_t* c, const char* base, const kiln_shape_t* shape,
                         const float* data, int32_t* out_t);
/* Adds an initializer of any dtype (|data| holds its elements, copied). */
kiln_status_t pu_add_const(pu_ctx_t* c, const char* base, kiln_dtype_t dt,
                           const kiln_shape_t* shape, const void* data, int32_t* out_t);
/* A fresh intermediate tensor "<base>__<tag>_<n>" (shape and dtype left to
 * inference). */
kiln_status_t pu_new_tensor(pu_ctx_t* c, const char* base, const char* tag, int32_t* out_t);
kiln_status_t pu_add_i64(pu_ctx_t* c, const char* base, const int64_t* data, int32_t n,
                         int32_t* out_t);
/* Adds a node by tensor indices (outputs must be unproduced); grows dead.
 * Named "<name>__<op>". */
kiln_status_t pu_add_node(pu_ctx_t* c, const char* op, const char* name, int32_t n_in,
                          const int32_t* in, int32_t out, int32_t n_attrs,
                          const kiln_attr_t* attrs, int32_t* out_node);
/* pu_add_node with |name| as given (up to KILN_MAX_NODE_INPUTS inputs). */
kiln_status_t pu_add_node_named(pu_ctx_t* c, const char* op, const char* name, int32_t n_in,
                                const int32_t* in, int32_t out, int32_t n_attrs,
                                const kiln_attr_t* attrs, int32_t* out_node);
/* Reads a constant as f32 into a malloc'd buffer (caller frees). */
kiln_status_t pu_read_f32(pu_ctx_t* c, int32_t t, float** out);

#endif
