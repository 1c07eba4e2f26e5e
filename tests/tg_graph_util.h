/* f32 graphs built in code with seeded random inputs and weights, for the
 * CPU lowering tests that run a plan beside the reference executor
 * (test_layout.c, test_conv_pad_fold.c, test_conv_stem.c, test_conv_wino_cpu.c,
 * test_cpu_tune_dw.c). Include after testing.h and the
 * graph headers; MAX_FEEDS may be defined first. */
#ifndef KILN_TESTS_TG_GRAPH_UTIL_H_
#define KILN_TESTS_TG_GRAPH_UTIL_H_

#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "targets/cpu/cpu_backend.h"

#define F32 KILN_DTYPE_F32
#define DIMS(...) (int64_t[]){__VA_ARGS__}
#define NAMES(...) (const char*[]){__VA_ARGS__}
#ifndef MAX_FEEDS
#define MAX_FEEDS 20
#endif

static inline kiln_allocator_t A(void) { return kiln_allocator_system(); }

static uint64_t rng_state = 0x9E3779B97F4A7C15ull;
static inline double rnd(void) {
  rng_state ^= rng_state << 13;
  rng_state ^= rng_state >> 7;
  rng_state ^= rng_state << 17;
  return (double)(rng_state >> 11) / (double)(1ull << 52) - 1.0;
}

static inline kiln_array_t rand_array(int rank, const int64_t* dims) {
  kiln_array_t a;
  kiln_shape_t s = kiln_shape_make(rank, dims);
  KILN_ASSERT(!kiln_array_alloc(A(), F32, &s, &a));
  int64_t n = kiln_array_numel(&a);
  for (int64_t i = 0; i < n; ++i) kiln_store_f64(F32, a.data, (size_t)i, rnd());
  return a;
}

typedef struct tg_s {
  kiln_graph_t* g;
  kiln_array_t feeds[MAX_FEEDS];
  int n_feeds;
  bool ok;
} tg_t;

static inline void tg_init(tg_t* t) {
  memset(t, 0, sizeof(*t));
  t->ok = CHECK_OK(kiln_graph_create(A(), &t->g));
  if (t->ok) t->ok = CHECK_OK(kiln_graph_set_opset(t->g, "", 17));
}

static inline void tg_input(tg_t* t, const char* name, const int64_t* d) {
  if (!t->ok) return;
  KILN_ASSERT(t->n_feeds < MAX_FEEDS);
  t->feeds[t->n_feeds] = rand_array(4, d);
  t->ok = CHECK_OK(kiln_graph_add_input(t->g, name, F32, &t->feeds[t->n_feeds].shape, NULL));
  t->n_feeds++;
}

static inline void tg_const(tg_t* t, const char* name, int rank, const int64_t* d) {
  if (!t->ok) return;
  kiln_array_t a = rand_array(rank, d);
  t->ok = CHECK_OK(kiln_graph_add_initializer(t->g, name, &a, NULL));
}

static inline void tg_scalar(tg_t* t, const char* name, double v) {
  if (!t->ok) return;
  kiln_array_t a;
  kiln_shape_t s = kiln_shape_make(0, NULL);
  KILN_ASSERT(!kiln_array_alloc(A(), F32, &s, &a));
  kiln_store_f64(F32, a.data, 0, v);
  t->ok = CHECK_OK(kiln_graph_add_initializer(t->g, name, &a, NULL));
}

static inline void tg_node(tg_t* t, const char* op, const char* name, int n_in, const char* const* in, const char* out,
                    int n_attrs, const kiln_attr_t* attrs) {
  if (!t->ok) return;
  t->ok = CHECK_OK(kiln_graph_add_node(t->g, op, name, n_in, in, 1, (const char*[]){out}, n_attrs, attrs, NULL));
}

static inline void tg_output(tg_t* t, const char* name) {
  if (t->ok) t->ok = CHECK_OK(kiln_graph_add_output(t->g, name));
}

static inline void tg_free(tg_t* t) {
  for (int i = 0; i < t->n_feeds; ++i) kiln_array_free(A(), &t->feeds[i]);
  kiln_graph_destroy(t->g);
}

static inline kiln_attr_t ints(const char* name, int n, const int64_t* v) {
  return (kiln_attr_t){.name = name, .type = KILN_ATTR_INTS, .count = n, .ints = v};
}
static inline kiln_attr_t one_int(const char* name, int64_t v) {
  return (kiln_attr_t){.name = name, .type = KILN_ATTR_INT, .i = v};
}

/* The fused-epilogue tail of conv case |i| after its output |h| (the conv
 * tests' epi field): epi 1 clamps h to [0, 0.5] (Clip "e<i>" with the
 * bounds as initializers lo<i>, hi<i>); otherwise h plus a new input z<i>
 * of dims |zd| (seeded values appended to feeds[*n_feeds]) through Add
 * "e<i>" and Relu "r<i>". The tail's output is |y|. Returns whether |ok|
 * and every addition succeeded (checked). */
static inline bool tg_conv_epilogue(kiln_graph_t* g, bool ok, int epi, int i, const char* h, const char* y,
                                    const int64_t* zd, kiln_array_t* feeds, int* n_feeds) {
  char z[16], a[16], n1[16], n2[16], lo[16], hi[16];
  snprintf(z, sizeof z, "z%d", i), snprintf(a, sizeof a, "a%d", i), snprintf(n1, sizeof n1, "e%d", i);
  snprintf(n2, sizeof n2, "r%d", i), snprintf(lo, sizeof lo, "lo%d", i), snprintf(hi, sizeof hi, "hi%d", i);
  if (epi == 1) {
    kiln_array_t la, ha;
    kiln_shape_t s0 = kiln_shape_make(0, NULL);
    KILN_ASSERT(!kiln_array_alloc(A(), F32, &s0, &la) && !kiln_array_alloc(A(), F32, &s0, &ha));
    kiln_store_f64(F32, la.data, 0, 0.0);
    kiln_store_f64(F32, ha.data, 0, 0.5);
    return ok && CHECK_OK(kiln_graph_add_initializer(g, lo, &la, NULL)) &&
           CHECK_OK(kiln_graph_add_initializer(g, hi, &ha, NULL)) &&
           CHECK_OK(kiln_graph_add_node(g, "Clip", n1, 3, NAMES(h, lo, hi), 1, NAMES(y), 0, NULL, NULL));
  }
  feeds[*n_feeds] = rand_array(4, zd);
  return ok && CHECK_OK(kiln_graph_add_input(g, z, F32, &feeds[(*n_feeds)++].shape, NULL)) &&
         CHECK_OK(kiln_graph_add_node(g, "Add", n1, 2, NAMES(h, z), 1, NAMES(a), 0, NULL, NULL)) &&
         CHECK_OK(kiln_graph_add_node(g, "Relu", n2, 1, NAMES(a), 1, NAMES(y), 0, NULL, NULL));
}

/* Compiles plan |p| for the CPU (2 threads) and runs it on |feeds| into
 * |got|: true when the outputs are there to compare. A failed compile or
 * run is checked; KILN_TEST_NO_CPU=1 skips the native run (false). */
static inline bool tg_cpu_run(const kiln_plan_t* p, const kiln_array_t* feeds, kiln_array_t* got) {
  if (getenv("KILN_TEST_NO_CPU")) return false;
  kiln_cpu_options_t o;
  kiln_cpu_options_default(&o);
  o.threads = 2;
  kiln_cpu_exec_t* e = NULL;
  const bool ran = CHECK_OK(kiln_cpu_compile(p, &o, &e, NULL)) && CHECK_OK(kiln_cpu_run(e, feeds, got, NULL, NULL));
  kiln_cpu_exec_destroy(e);
  return ran;
}

static inline int32_t tensor(const kiln_graph_t* g, const char* name) { return kiln_graph_find_tensor(g, name); }
/* Largest |got - want| / (1 + |want|) over the elements (NaN counts). */
static inline double max_err(const kiln_array_t* got, const kiln_array_t* want) {
  if (!kiln_shape_equal(&got->shape, &want->shape)) return INFINITY;
  double e = 0;
  for (int64_t i = 0; i < kiln_array_numel(want); ++i) {
    double gv = kiln_load_f64(F32, got->data, (size_t)i), wv = kiln_load_f64(F32, want->data, (size_t)i);
    double d = fabs(gv - wv) / (1.0 + fabs(wv));
    if (!(d <= e)) e = d; /* NaN counts */
  }
  return e;
}

#endif  // KILN_TESTS_TG_GRAPH_UTIL_H_
