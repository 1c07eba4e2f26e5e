/* Shared by the runtime tests (test_runtime.c, test_bad_device.c): a small
 * model built in memory and compiled to a module for the CPU target.
 *
 *   x[1,8,12,12] -> Conv(3x3, pad 1) -> Relu -> Add(x) -> Sigmoid -> y
 *                \-> Mul(x, x) ------------------------------------> z
 *
 * which exercises a GEMM-style kernel, fused epilogues, an element-wise
 * kernel that may run in place, two outputs and a constant. */
#ifndef KILN_TESTS_RUNTIME_UTIL_H_
#define KILN_TESTS_RUNTIME_UTIL_H_

#include "ir/graph.h"
#include "ir/passes.h"
#include "kiln/runtime.h"
#include "lowering/fuse.h"
#include "lowering/plan.h"
#include "runtime/module_impl.h"
#include "compiler/ref_exec.h"
#include "targets/program_build.h"
#include "testing.h"

static uint64_t rt_rng = 0x9E3779B97F4A7C15ull;
static inline double rt_rnd(void) {
  rt_rng ^= rt_rng << 13;
  rt_rng ^= rt_rng >> 7;
  rt_rng ^= rt_rng << 17;
  return (double)(rt_rng >> 11) / (double)(1ull << 52) - 1.0;
}

static inline kiln_array_t rt_random(int rank, const int64_t* dims) {
  kiln_array_t a;
  kiln_shape_t s = kiln_shape_make(rank, dims);
  KILN_ASSERT(!kiln_array_alloc(kiln_allocator_system(), KILN_DTYPE_F32, &s, &a));
  for (int64_t i = 0; i < kiln_array_numel(&a); ++i) ((float*)a.data)[i] = (float)rt_rnd();
  return a;
}

static const int64_t rt_x_dims[4] = {1, 8, 12, 12};

/* The model above, prepared (and optimized at -O1). */
static inline kiln_graph_t* rt_model(void) {
  kiln_graph_t* g = NULL;
  if (!CHECK_OK(kiln_graph_create(kiln_allocator_system(), &g))) return NULL;
  kiln_shape_t xs = kiln_shape_make(4, rt_x_dims);
  bool ok = CHECK_OK(kiln_graph_set_opset(g, "", 17)) &&
            CHECK_OK(kiln_graph_add_input(g, "x", KILN_DTYPE_F32, &xs, NULL));
  kiln_array_t w = rt_random(4, (int64_t[]){8, 8, 3, 3});
  ok = ok && CHECK_OK(kiln_graph_add_initializer(g, "w", &w, NULL));
  kiln_attr_t conv_attrs[2] = {kiln_attr_make_ints("pads", 4, (int64_t[]){1, 1, 1, 1}),
                               kiln_attr_make_ints("kernel_shape", 2, (int64_t[]){3, 3})};
  ok = ok && CHECK_OK(kiln_graph_add_node(g, "Conv", "conv", 2, (const char*[]){"x", "w"}, 1,
                                          (const char*[]){"c"}, 2, conv_attrs, NULL));
  ok = ok && CHECK_OK(kiln_graph_add_node(g, "Relu", "relu", 1, (const char*[]){"c"}, 1,
                                          (const char*[]){"r"}, 0, NULL, NULL));
  ok = ok && CHECK_OK(kiln_graph_add_node(g, "Add", "add", 2, (const char*[]){"r", "x"}, 1,
                                          (const char*[]){"a"}, 0, NULL, NULL));
  ok = ok && CHECK_OK(kiln_graph_add_node(g, "Sigmoid", "sig", 1, (const char*[]){"a"}, 1,
                                          (const char*[]){"y"}, 0, NULL, NULL));
  ok = ok && CHECK_OK(kiln_graph_add_node(g, "Mul", "square", 2, (const char*[]){"x", "x"}, 1,
                                          (const char*[]){"z"}, 0, NULL, NULL));
  ok = ok && CHECK_OK(kiln_graph_add_output(g, "y")) && CHECK_OK(kiln_graph_add_output(g, "z"));
  ok = ok && CHECK_OK(kiln_graph_prepare(g)) && CHECK_OK(kiln_graph_optimize(g, 1, NULL));
  if (!ok) {
    kiln_graph_destroy(g);
    return NULL;
  }
  return g;
}

/* Lowers, fuses (when |fuse|) and builds the CPU program of |g|. */
static inline kiln_program_t* rt_program(const kiln_graph_t* g, bool fuse) {
  kiln_plan_options_t po = {KILN_TARGET_CLASS_CPU, 2, 0, 0, 0, 0};
  kiln_plan_t* plan = NULL;
  kiln_program_t* prog = NULL;
  if (CHECK_OK(kiln_plan_build(g, &po, kiln_allocator_system(), &plan)) &&
      (!fuse || CHECK_OK(kiln_plan_fuse(plan, NULL, NULL))))
    CHECK_OK(kiln_program_build(plan, kiln_target_find("cpu"), NULL, kiln_allocator_system(), &prog));
  kiln_plan_destroy(plan);
  return prog;
}

/* The model's module (owned by the caller), or NULL. */
static inline kiln_module_t* rt_module(void) {
  kiln_graph_t* g = rt_model();
  kiln_program_t* prog = g ? rt_program(g, true) : NULL;
  kiln_graph_destroy(g);
  kiln_module_t* m = NULL;
  if (prog && !CHECK_OK(kiln_module_wrap(prog, &m))) return NULL;
  return m;
}

static inline void rt_free_arrays(kiln_array_t* a, int n) {
  for (int i = 0; i < n; ++i) kiln_array_free(kiln_allocator_system(), &a[i]);
}

static inline bool rt_same_bytes(const kiln_array_t* a, const kiln_array_t* b) {
  return a->dtype == b->dtype && kiln_shape_equal(&a->shape, &b->shape) && a->nbytes == b->nbytes &&
         memcmp(a->data, b->data, a->nbytes) == 0;
}

#endif /* KILN_TESTS_RUNTIME_UTIL_H_ */
