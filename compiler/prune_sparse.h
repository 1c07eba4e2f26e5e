/* kiln block sparsity: `kiln prune --sparsity S`.
 *
 * Per layer -- Conv (not depthwise: those run the direct kernel), Gemm and
 * 2-D MatMul whose weights are an initializer -- the weights are cut into
 * the blocks the CPU's block-sparse kernel skips (lowering/sparse_block.h:
 * 4 output channels x one input channel with all its taps, 4 x 4 for 1x1
 * convs and GEMMs, aligned within each conv group), each block is scored by
 * the mean |w| of its weights, and the round(S x blocks) lowest-scoring
 * blocks of the layer are zeroed (ties: the earlier block). The result is a
 * mask per weight initializer (1: zero this element) that
 * frontend/onnx_sparse.h writes into a copy of the model file; kiln's
 * compiler then finds the zero blocks (lowering/lower_nn_sparse.c) as it
 * would in any model.
 *
 *   kiln_sparsifier_t sp;
 *   KILN_RETURN_IF_ERROR(kiln_sparsify(g, 0.8, keep, n_keep, &sp));
 *   kiln_sparsify_report_print(g, &sp, stdout);
 *   ... kiln_onnx_write_zeroed(path, sp.names, sp.masks, sp.n_layers, out) ...
 *   kiln_sparsify_free(&sp);
 *
 * Thread-compatible.
 */
#ifndef KILN_COMPILER_PRUNE_SPARSE_H_
#define KILN_COMPILER_PRUNE_SPARSE_H_

#include <stdio.h>

#include "ir/graph.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef struct kiln_sparse_layer_s {
  int32_t node;           /* the layer */
  const char* weight;     /* its weight initializer's name (the graph's) */
  int64_t rows, cols;     /* block shape: output channels x (input channels x taps) */
  int64_t blocks, zeroed; /* blocks of the layer, blocks this run zeroed */
  double before, after;   /* fraction of zero weights before and after */
  const char* skipped;    /* NULL, or why the layer was left as it was */
  uint8_t* mask;          /* per weight element, 1: zero it (NULL when skipped) */
  int64_t count;          /* weight elements */
} kiln_sparse_layer_t;

typedef struct kiln_sparsifier_s {
  kiln_sparse_layer_t* layers;
  int32_t n_layers;
  int64_t weights, zeros_before, zeros_after; /* over the layers not skipped */
} kiln_sparsifier_t;

/* Chooses the blocks to zero in every eligible layer of prepared |g| at
 * sparsity |s| in [0, 1) (an error otherwise, naming --sparsity), leaving
 * the layers named in |keep| (node names; one that is no node is an error
 * naming it) as they are. Free with kiln_sparsify_free. */
KILN_MUST_USE kiln_status_t kiln_sparsify(const kiln_graph_t* g, double s, const char* const* keep, int32_t n_keep,
                                          kiln_sparsifier_t* out);
void kiln_sparsify_free(kiln_sparsifier_t* sp);

/* A line per layer: node, weight, block shape, blocks zeroed, the zero
 * fraction before and after (or why it was skipped), and the totals. */
void kiln_sparsify_report_print(const kiln_graph_t* g, const kiln_sparsifier_t* sp, FILE* out);

#ifdef __cplusplus
}
#endif
#endif /* KILN_COMPILER_PRUNE_SPARSE_H_ */
