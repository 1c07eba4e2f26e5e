/* Test helper: examples/tinycnn.onnx as `kiln tune` takes a model (the
 * batch bound to 1, the graph prepared and optimized at -O1), for the
 * tuning tests. Include after "testing.h", "frontend/onnx.h",
 * "ir/passes.h" and <stdio.h> / <stdlib.h>. */
#ifndef KILN_TESTS_TUNE_GRAPH_UTIL_H
#define KILN_TESTS_TUNE_GRAPH_UTIL_H

/* The graph, or NULL after a failed (checked) parse or preparation. */
static kiln_graph_t* tinycnn(void) {
  char path[1024];
  const char* src = getenv("KILN_TEST_SRC");
  snprintf(path, sizeof path, "%s/../examples/tinycnn.onnx", src ? src : "tests");
  kiln_graph_t* g = NULL;
  if (!CHECK_OK(kiln_onnx_parse_model(path, NULL, kiln_allocator_system(), &g))) return NULL;
  for (int32_t k = 0; k < g->n_inputs; ++k) { /* N = 1, as `kiln tune` binds it */
    kiln_tensor_t* t = &g->tensors[g->inputs[k]];
    for (int32_t d = 0; d < t->shape.rank; ++d)
      if (t->shape.dims[d] < 0) t->shape.dims[d] = 1;
  }
  if (!CHECK_OK(kiln_graph_prepare(g)) || !CHECK_OK(kiln_graph_optimize_except(g, 1, NULL, NULL))) {
    kiln_graph_destroy(g);
    return NULL;
  }
  return g;
}

#endif /* KILN_TESTS_TUNE_GRAPH_UTIL_H */
