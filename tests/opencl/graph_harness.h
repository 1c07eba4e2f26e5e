/* Shared harness of the OpenCL end-to-end tests (test_opencl_plan.c,
 * test_opencl_conv.c, ...): random f32 arrays, a small graph builder whose
 * inputs come with random feeds, running a program kernel by kernel on a
 * device with one device buffer per program root, and the comparison with
 * the reference (|got - want| <= 1e-5 max(1, max |want|) + 1e-4 |want|, or
 * a tolerance of the caller's: fp16). */
#ifndef KILN_TESTS_OPENCL_GRAPH_HARNESS_H_
#define KILN_TESTS_OPENCL_GRAPH_HARNESS_H_

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "ir/graph.h"
#include "kiln/array.h"
#include "runtime/device.h"
#include "runtime/program.h"
#include "targets/opencl/opencl_target.h"

/* Uniform in [-1, 1), one fixed sequence per process. */
float rnd(void);
kiln_array_t rand_f32(int rank, const int64_t* dims);

/* Rounds every element of an f32 array (|n| floats at |v|) to the nearest
 * f16 value (kept f32). */
void round_f16(kiln_array_t* a);
void round_f16_floats(float* v, size_t n);

/* A graph under construction; the first error sticks in |st|. With
 * |f16_exact| set (after gb_init) every feed and initializer the builder
 * makes holds values an f16 holds exactly, so fp16 storage changes no input
 * or weight and the f32 reference is what fp16 storage with f32 sums should
 * compute but for the rounding of activations and outputs. */
typedef struct gb_s {
  kiln_graph_t* g;
  kiln_status_t st;
  kiln_array_t feeds[4];
  int n_feeds;
  bool f16_exact;
} gb_t;

void gb_init(gb_t* b);
/* An input with a random feed. */
void gb_input(gb_t* b, const char* name, int rank, const int64_t* dims);
/* A random initializer. */
void gb_const(gb_t* b, const char* name, int rank, const int64_t* dims);
/* An initializer holding |values| (numel of |dims| floats; rounded to f16
 * with f16_exact). */
void gb_const_values(gb_t* b, const char* name, int rank, const int64_t* dims, const float* values);
void gb_node(gb_t* b, const char* op, const char* name, int n_in, const char* const* in,
             const char* out, int n_attrs, const kiln_attr_t* attrs);

/* Literal lists with their counts, for the short forms below:
 *   input(b, "x", DIMS(1, 8, 7, 7));  konst(b, "w", DIMS(16, 8, 3, 3));
 *   node(b, "Conv", IN("x", "w"), "y", n_attrs, attrs);
 * (the node is named after its output). */
#define DIMS(...) (int64_t[]){__VA_ARGS__}, (int)(sizeof((int64_t[]){__VA_ARGS__}) / sizeof(int64_t))
#define IN(...) (const char* const[]){__VA_ARGS__}, (int)(sizeof((const char*[]){__VA_ARGS__}) / sizeof(char*))

static inline void input(gb_t* b, const char* name, const int64_t* d, int r) { gb_input(b, name, r, d); }
static inline void konst(gb_t* b, const char* name, const int64_t* d, int r) { gb_const(b, name, r, d); }
static inline void node(gb_t* b, const char* op, const char* const* in, int n_in, const char* out,
                        int n_attrs, const kiln_attr_t* attrs) {
  gb_node(b, op, out, n_in, in, out, n_attrs, attrs);
}

/* OpenCL device 0, or NULL after printing why there is none (the test
 * then fails: a missing device must never look like a pass). */
kiln_device_t* open_opencl_device_0(void);

/* Runs |p| on |dev| (every kernel, a barrier after each) with |feeds|;
 * allocates |outs| (one per program output). KILN_TEST_DUMP=DIR writes the
 * source there. */
kiln_status_t run_on(kiln_device_t* dev, const kiln_program_t* p, const kiln_array_t* feeds,
                     kiln_array_t* outs);

/* Checks |got| against |want| (shape, dtype, tolerance); reports the worst
 * element under |what|. */
/* Chooses |plan|'s templates from the OpenCL set |to| allows
 * (kiln_opencl_templates, then kiln_template_choose): what the runner does
 * between the precision pass and kiln_program_build. */
kiln_status_t choose_opencl_templates(kiln_plan_t* plan, const kiln_opencl_template_options_t* to);

bool close_enough(const kiln_array_t* got, const kiln_array_t* want, const char* what);
/* Runs |p| on |dev| with |feeds| (run_on) and checks each of its
 * |n_outputs| outputs against |want| (close_enough), printing "ok" or
 * "FAIL" with |label|; true when it ran and all matched. At most 4 outputs. */
bool run_and_check(kiln_device_t* dev, const kiln_program_t* p, const kiln_array_t* feeds,
                   const kiln_array_t* want, int n_outputs, const char* label);
/* The same with |got - want| <= atol s + rtol |want|, s = max(1, max |want|)
 * (fp16: rtol 1e-2, atol 1e-3); *out_ratio (may be NULL) gets the largest
 * |got - want| / (atol s + rtol |want|), 1 at the limit. */
bool close_enough_tol(const kiln_array_t* got, const kiln_array_t* want, double rtol, double atol,
                      const char* what, double* out_ratio);

#endif /* KILN_TESTS_OPENCL_GRAPH_HARNESS_H_ */
