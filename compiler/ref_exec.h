/* kiln reference executor: runs a prepared graph node by node on the CPU
 * reference kernels. It is the oracle every target is compared against.
 *
 * Shapes are re-inferred at run time from the actual inputs, so symbolic dims
 * (dim_param) take the sizes of the arrays passed in. Intermediates are freed
 * as soon as their last consumer ran.
 *
 * Thread-compatible: concurrent runs of one graph are fine (the graph is only
 * read); a single run uses one thread.
 */
#ifndef KILN_COMPILER_REF_EXEC_H_
#define KILN_COMPILER_REF_EXEC_H_

#include "ir/op.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef struct kiln_ref_node_stat_s {
  int32_t node;    /* node index */
  double seconds;  /* wall time of the reference kernel */
} kiln_ref_node_stat_t;

typedef struct kiln_ref_options_s {
  kiln_allocator_t allocator;
  /* Largest tensor one node may produce (default 16 GiB); bigger is a
   * LIMIT_EXCEEDED error before anything is allocated. */
  int64_t max_tensor_bytes;
  /* Optional: called after each node with its time. */
  void (*on_node)(void* user, const kiln_graph_t* g, int32_t node,
                  double seconds);
  /* Optional: called after each node that ran with its output arrays
   * (n_outputs entries, NULL for omitted ones). It may read them and change
   * their values in place (kiln quantize records ranges, and simulates int8
   * by rounding them); a returned status stops the run with that error. */
  kiln_status_t (*on_outputs)(void* user, const kiln_graph_t* g, int32_t node,
                              kiln_array_t* const* outputs);
  void* user;
} kiln_ref_options_t;

void kiln_ref_options_default(kiln_ref_options_t* o);

/* Checks array |arr| against graph input |input|'s declared dtype and shape
 * (before any binding). |sym_val| (g->n_symbols + 1 entries, -1 = unbound)
 * binds symbolic dims to the first size seen; later inputs must agree. The
 * error names the input and both shapes, e.g. "input 'x': expected
 * f32[N,3,224,224], got f32[1,10]". */
kiln_status_t kiln_check_input(const kiln_graph_t* g, int32_t input, const kiln_array_t* arr,
                               int64_t* sym_val);

/* Runs |g| on |inputs| (g->n_inputs arrays, in graph input order). Checks
 * each input's dtype and shape against the declaration (symbolic dims bind
 * to the first size seen and must agree everywhere after). On success
 * |outputs| (g->n_outputs entries) receive newly allocated arrays the caller
 * frees with kiln_array_free(options->allocator, ...). On failure nothing is
 * allocated and the error names the node and tensor. */
kiln_status_t kiln_ref_run(const kiln_graph_t* g, const kiln_array_t* inputs,
                           const kiln_ref_options_t* options,
                           kiln_array_t* outputs);

/* Runs node |ni| of |g| alone: re-infers it from |vals| (per tensor of |g|,
 * its inputs' values), allocates its outputs into |vals| (marking them in
 * |owned|; a kernel that sizes its outputs allocates them itself) and runs
 * its reference kernel with |run_graph| for its subgraphs. |aout| receives
 * the node's output arrays (NULL for omitted ones), |out_seconds| the
 * kernel's time. Errors name the node; outputs allocated before a failure
 * stay marked in |owned| for the caller to free. The staged executor runs
 * its host nodes with it (compiler/staged.h). */
kiln_status_t kiln_ref_node_run(const kiln_graph_t* g, int32_t ni, kiln_array_t* vals, uint8_t* owned,
                                const kiln_ref_options_t* options,
                                kiln_status_t (*run_graph)(void*, const kiln_graph_t*, const kiln_array_t*,
                                                           kiln_array_t*),
                                void* run_graph_user, kiln_array_t** aout, double* out_seconds);

#ifdef __cplusplus
}
#endif
#endif /* KILN_COMPILER_REF_EXEC_H_ */
