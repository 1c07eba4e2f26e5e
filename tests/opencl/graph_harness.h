/* Shared harness of the OpenCL end-to-end tests (test_opencl_plan.c,
 * test_opencl_conv.c, ...): random f32 arrays, a small graph builder whose
 * inputs come with random feeds, running a program kernel by kernel on a
 * device with one device buffer per program root, and the comparison with
 * the reference (|got - want| <= 1e-5 max(1, max |want|) + 1e-4 |want|). */
#ifndef KILN_TESTS_OPENCL_GRAPH_HARNESS_H_
#define KILN_TESTS_OPENCL_GRAPH_HARNESS_H_

#include <stdbool.h>
#include <stdint.h>

#include "ir/graph.h"
#include "kiln/array.h"
#include "runtime/device.h"
#include "runtime/program.h"

/* Uniform in [-1, 1), one fixed sequence per process. */
float rnd(void);
kiln_array_t rand_f32(int rank, const int64_t* dims);

/* A graph under construction; the first error sticks in |st|. */
typedef struct gb_s {
  kiln_graph_t* g;
  kiln_status_t st;
  kiln_array_t feeds[4];
  int n_feeds;
} gb_t;

void gb_init(gb_t* b);
/* An input with a random feed. */
void gb_input(gb_t* b, const char* name, int rank, const int64_t* dims);
/* A random initializer. */
void gb_const(gb_t* b, const char* name, int rank, const int64_t* dims);
void gb_node(gb_t* b, const char* op, const char* name, int n_in, const char* const* in,
             const char* out, int n_attrs, const kiln_attr_t* attrs);

/* Runs |p| on |dev| (every kernel, a barrier after each) with |feeds|;
 * allocates |outs| (one per program output). KILN_TEST_DUMP=DIR writes the
 * source there. */
kiln_status_t run_on(kiln_device_t* dev, const kiln_program_t* p, const kiln_array_t* feeds,
                     kiln_array_t* outs);

/* Checks |got| against |want| (shape, dtype, tolerance); reports the worst
 * element under |what|. */
bool close_enough(const kiln_array_t* got, const kiln_array_t* want, const char* what);

#endif /* KILN_TESTS_OPENCL_GRAPH_HARNESS_H_ */
