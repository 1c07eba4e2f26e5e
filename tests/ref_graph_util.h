/* Graph-building helpers of the op-family unit tests that run the reference
 * executor (test_ops_tensor.c, test_ops_geom.c): one-line shapes, names and
 * attributes, inputs and initializers, a reference run, and an element-wise
 * comparison with expected values. */
#ifndef KILN_TESTS_REF_GRAPH_UTIL_H_
#define KILN_TESTS_REF_GRAPH_UTIL_H_

#include <math.h>
#include <stdint.h>
#include <string.h>

#include "compiler/ref_exec.h"
#include "ir/op.h"
#include "testing.h"

#define RG_API static __attribute__((unused))

#define N_OF(T, ...) ((int32_t)(sizeof((T[]){__VA_ARGS__}) / sizeof(T)))
#define SHAPE(...) kiln_shape_make(N_OF(int64_t, __VA_ARGS__), (int64_t[]){__VA_ARGS__})
#define SCALAR kiln_shape_make(0, NULL)
#define NAMES(...) N_OF(const char*, __VA_ARGS__), (const char* []){__VA_ARGS__}
#define ATTRS(...) N_OF(kiln_attr_t, __VA_ARGS__), (kiln_attr_t[]){__VA_ARGS__}
#define NO_ATTRS 0, NULL
#define I64S(...) N_OF(int64_t, __VA_ARGS__), (int64_t[]){__VA_ARGS__}

RG_API kiln_allocator_t sys(void) { return kiln_allocator_system(); }

RG_API kiln_graph_t* graph(int64_t opset) {
  kiln_graph_t* g = NULL;
  CHECK_OK(kiln_graph_create(sys(), &g));
  CHECK_OK(kiln_graph_set_opset(g, "", opset));
  return g;
}

RG_API kiln_array_t array(kiln_dtype_t dt, kiln_shape_t s, const void* data) {
  kiln_array_t a;
  memset(&a, 0, sizeof a);
  CHECK_OK(kiln_array_alloc(sys(), dt, &s, &a));
  if (data && a.nbytes) memcpy(a.data, data, a.nbytes);
  return a;
}

RG_API void input(kiln_graph_t* g, const char* name, kiln_dtype_t dt, kiln_shape_t s) {
  CHECK_OK(kiln_graph_add_input(g, name, dt, &s, NULL));
}

RG_API void init(kiln_graph_t* g, const char* name, kiln_dtype_t dt, kiln_shape_t s, const void* data) {
  kiln_array_t a = array(dt, s, data);
  CHECK_OK(kiln_graph_add_initializer(g, name, &a, NULL));
}

/* Runs |g| on the reference executor; outputs go to |out| (freed by the
 * caller). */
RG_API kiln_status_t run(const kiln_graph_t* g, const kiln_array_t* in, kiln_array_t* out) {
  kiln_ref_options_t o;
  kiln_ref_options_default(&o);
  return kiln_ref_run(g, in, &o, out);
}

/* Checks |a| has |shape| and values |want| (any dtype, compared as double,
 * within 1e-5 + 1e-5 |want|). */
RG_API void expect(const kiln_array_t* a, kiln_shape_t shape, const double* want) {
  char b1[96], b2[96];
  CHECK_MSG(kiln_shape_equal(&a->shape, &shape), "shape %s, expected %s",
            kiln_shape_format(&a->shape, b1, sizeof b1), kiln_shape_format(&shape, b2, sizeof b2));
  if (!kiln_shape_equal(&a->shape, &shape)) return;
  int64_t n = kiln_shape_count(&shape);
  for (int64_t i = 0; i < n; ++i) {
    double got = kiln_load_f64(a->dtype, a->data, (size_t)i);
    CHECK_MSG(fabs(got - want[i]) <= 1e-5 + 1e-5 * fabs(want[i]), "element %lld is %g, expected %g",
              (long long)i, got, want[i]);
  }
}

#endif /* KILN_TESTS_REF_GRAPH_UTIL_H_ */
