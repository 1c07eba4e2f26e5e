/* Long and wide graphs for the compile-time tests and benchmark (BAD_INPUTS
 * row 28): built in memory, no files.
 *
 *   kiln_graph_t* g = NULL;
 *   kiln_status_t s = kiln_long_graph(KILN_LONG_CHAIN, 20000, 8, &g);
 *
 * KILN_LONG_CHAIN: x -> n element-wise nodes in a chain, cycling Relu, Add
 *   (a scalar), Mul (a scalar), Sigmoid; output "y", and the tensors of
 *   nodes n/3 and 2n/3 are graph outputs too ("tap1", "tap2"), so a fused
 *   plan has to keep them and a test can compare them.
 * KILN_LONG_WIDE: n/2 branches reading x, each Add or Mul with its own
 *   scalar (so that CSE cannot merge them), summed by a balanced tree of Adds
 *   into "y": about n nodes, n/2 of them live at once.
 * x is f32[1, width]. The caller destroys *out_g. Header-only (static) so that
 * the tests and bench/ share it. */
#ifndef KILN_TESTS_LONG_GRAPHS_H_
#define KILN_TESTS_LONG_GRAPHS_H_

#include <stdio.h>
#include <stdlib.h>

#include "ir/graph.h"

typedef enum kiln_long_kind_e { KILN_LONG_CHAIN, KILN_LONG_WIDE } kiln_long_kind_t;

static kiln_status_t kiln_long_scalar(kiln_graph_t* g, const char* name, float v) {
  kiln_array_t a;
  kiln_shape_t s = kiln_shape_make(0, NULL);
  KILN_RETURN_IF_ERROR(kiln_array_alloc(g->allocator, KILN_DTYPE_F32, &s, &a));
  ((float*)a.data)[0] = v;
  return kiln_graph_add_initializer(g, name, &a, NULL);
}

static kiln_status_t kiln_long_build(kiln_graph_t* g, kiln_long_kind_t kind, int32_t n, int64_t width) {
  int64_t dims[2] = {1, width};
  kiln_shape_t xs = kiln_shape_make(2, dims);
  KILN_RETURN_IF_ERROR(kiln_graph_set_opset(g, "", 17));
  KILN_RETURN_IF_ERROR(kiln_graph_add_input(g, "x", KILN_DTYPE_F32, &xs, NULL));
  char nm[64], in[64], out[64];
  if (kind == KILN_LONG_CHAIN) {
    static const char* const ops[4] = {"Relu", "Add", "Mul", "Sigmoid"};
    KILN_RETURN_IF_ERROR(kiln_long_scalar(g, "c_add", 0.25f));
    KILN_RETURN_IF_ERROR(kiln_long_scalar(g, "c_mul", 0.75f));
    snprintf(in, sizeof in, "x");
    for (int32_t i = 0; i < n; ++i) {
      const char* op = ops[i % 4];
      if (i + 1 == n) snprintf(out, sizeof out, "y");
      else if (i == n / 3) snprintf(out, sizeof out, "tap1");
      else if (i == 2 * n / 3) snprintf(out, sizeof out, "tap2");
      else snprintf(out, sizeof out, "t%d", (int)i);
      snprintf(nm, sizeof nm, "n%d", (int)i);
      const char* ins[2] = {in, i % 4 == 1 ? "c_add" : "c_mul"};
      int32_t n_in = (i % 4 == 1 || i % 4 == 2) ? 2 : 1;
      KILN_RETURN_IF_ERROR(kiln_graph_add_node(g, op, nm, n_in, ins, 1, (const char*[]){out}, 0, NULL, NULL));
      snprintf(in, sizeof in, "%s", out);
    }
    KILN_RETURN_IF_ERROR(kiln_graph_add_output(g, "y"));
    if (n >= 3) {
      KILN_RETURN_IF_ERROR(kiln_graph_add_output(g, "tap1"));
      KILN_RETURN_IF_ERROR(kiln_graph_add_output(g, "tap2"));
    }
    return NULL;
  }
  /* wide: branches b0..b(m-1) (level 0), then levels of pairwise Adds
   * s<level>_<k>; an odd one out moves up through an Identity. */
  int32_t m = n / 2 > 1 ? n / 2 : 2;
  kiln_status_t s = NULL;
  for (int32_t i = 0; i < m && !s; ++i) {
    char c[32];
    snprintf(c, sizeof c, "c%d", (int)i);
    s = kiln_long_scalar(g, c, 1.0f + 1e-4f * (float)i);
    snprintf(nm, sizeof nm, "b%d", (int)i);
    const char* ins[2] = {"x", c};
    if (!s) s = kiln_graph_add_node(g, i % 2 ? "Mul" : "Add", nm, 2, ins, 1, (const char*[]){nm}, 0, NULL, NULL);
  }
  for (int32_t cnt = m, lv = 1; cnt > 1 && !s; cnt = (cnt + 1) / 2, ++lv) {
    for (int32_t k = 0; 2 * k < cnt && !s; ++k) {
      char a[64], b[64];
      if (lv == 1) {
        snprintf(a, sizeof a, "b%d", (int)(2 * k));
        snprintf(b, sizeof b, "b%d", (int)(2 * k + 1));
      } else {
        snprintf(a, sizeof a, "s%d_%d", (int)lv - 1, (int)(2 * k));
        snprintf(b, sizeof b, "s%d_%d", (int)lv - 1, (int)(2 * k + 1));
      }
      if (cnt <= 2) snprintf(out, sizeof out, "y");
      else snprintf(out, sizeof out, "s%d_%d", (int)lv, (int)k);
      if (2 * k + 1 < cnt)
        s = kiln_graph_add_node(g, "Add", out, 2, (const char*[]){a, b}, 1, (const char*[]){out}, 0, NULL, NULL);
      else
        s = kiln_graph_add_node(g, "Identity", out, 1, (const char*[]){a}, 1, (const char*[]){out}, 0, NULL, NULL);
    }
  }
  if (!s) s = kiln_graph_add_output(g, "y");
  return s;
}

/* Creates the graph (see the top of this file). */
static kiln_status_t kiln_long_graph(kiln_long_kind_t kind, int32_t n, int64_t width, kiln_graph_t** out_g) {
  kiln_graph_t* g = NULL;
  KILN_RETURN_IF_ERROR(kiln_graph_create(kiln_allocator_system(), &g));
  kiln_status_t s = kiln_long_build(g, kind, n, width);
  if (s) {
    kiln_graph_destroy(g);
    return s;
  }
  *out_g = g;
  return NULL;
}

#endif /* KILN_TESTS_LONG_GRAPHS_H_ */
