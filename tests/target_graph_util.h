/* Graphs built in code, compiled for one target through the runtime as
 * `kiln run` does, and run beside the reference executor: the helpers of the
 * per-target op tests (test_bad_runtime_arith.c, test_tensor_ops_target.c,
 * test_lower_targets.c).
 * Each test binary sets g_target_name, g_target and g_device in main (the
 * device opened strictly: a missing GPU fails the test, never passes it). */
#ifndef KILN_TESTS_TARGET_GRAPH_UTIL_H_
#define KILN_TESTS_TARGET_GRAPH_UTIL_H_

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "compiler/ref_exec.h"
#include "ir/graph.h"
#include "ir/passes.h"
#include "kiln/runtime.h"
#include "lowering/fuse.h"
#include "lowering/plan.h"
#include "runtime/device.h"
#include "runtime/module_impl.h"
#include "targets/program_build.h"
#include "targets/registry.h"
#include "testing.h"

static const char* g_target_name = "cpu";
static const kiln_target_t* g_target = NULL;
static kiln_device_t* g_device = NULL;
/* KILN_GPU_LACKS_* the compiles assume of the device (0: every feature) */
static uint32_t g_gpu_lacks = 0;

static inline kiln_allocator_t al(void) { return kiln_allocator_system(); }

static inline kiln_array_t arr(kiln_dtype_t t, int rank, const int64_t* dims) {
  kiln_array_t a;
  kiln_shape_t s = kiln_shape_make(rank, dims);
  memset(&a, 0, sizeof a);
  if (!CHECK_OK(kiln_array_alloc(al(), t, &s, &a))) memset(&a, 0, sizeof a);
  return a;
}

/* An empty graph at opset 17. */
static inline kiln_graph_t* graph_new(void) {
  kiln_graph_t* g = NULL;
  if (!CHECK_OK(kiln_graph_create(al(), &g))) return NULL;
  if (!CHECK_OK(kiln_graph_set_opset(g, "", 17))) {
    kiln_graph_destroy(g);
    return NULL;
  }
  return g;
}

static inline bool input(kiln_graph_t* g, const char* name, kiln_dtype_t t, int rank, const int64_t* dims) {
  kiln_shape_t s = kiln_shape_make(rank, dims);
  return CHECK_OK(kiln_graph_add_input(g, name, t, &s, NULL));
}

static inline bool node1(kiln_graph_t* g, const char* op, const char* name, int n_in, const char* const* in,
                  const char* out, int n_attrs, const kiln_attr_t* attrs) {
  return CHECK_OK(kiln_graph_add_node(g, op, name, n_in, in, 1, (const char*[]){out}, n_attrs, attrs, NULL));
}

/* The module of prepared graph |g| for the target, with kernel fusion when
 * |fuse| (-O1; -O0 without), or NULL. */
static inline kiln_module_t* compile_fused(const kiln_graph_t* g, bool fuse) {
  /* lowering splits work to the device's loop limit, as kiln run does */
  kiln_plan_options_t po = {g_target->lowering, 2, g_device ? g_device->info.loop_limit : 0, 0, 0,
                            g_target->ew_lanes};
  kiln_plan_t* plan = NULL;
  kiln_program_t* prog = NULL;
  kiln_module_t* m = NULL;
  kiln_template_set_t templates;
  kiln_program_templates(g_target, &templates);
  templates.gpu_lacks = g_gpu_lacks;
  if (CHECK_OK(kiln_plan_build(g, &po, al(), &plan)) && (!fuse || CHECK_OK(kiln_plan_fuse(plan, NULL, NULL))) &&
      CHECK_OK(kiln_template_choose(plan, &templates))) {
    /* the device's work-group counts, as kiln run reads them */
    for (int j = 0; g_device && g_target->lowering == KILN_TARGET_CLASS_GPU && j < 3; ++j)
      plan->max_groups[j] = g_device->info.max_groups[j];
    CHECK_OK(kiln_program_build(plan, g_target, NULL, al(), &prog));
  }
  kiln_plan_destroy(plan);
  const char* dump = getenv("KILN_TEST_DUMP"); /* the generated code, to debug */
  if (dump && prog && prog->code.text) {
    char path[512];
    snprintf(path, sizeof path, "%s/%s.%s.txt", dump, g->nodes[0].name, g_target_name);
    FILE* f = fopen(path, "wb");
    if (f) fwrite(prog->code.text, 1, (size_t)prog->code.text_len, f);
    if (f) fclose(f);
  }
  if (prog && !CHECK_OK(kiln_module_wrap(prog, &m))) return NULL;
  return m;
}

/* The same with fusion (what `kiln run` does at -O1). */
static inline kiln_module_t* compile(const kiln_graph_t* g) { return compile_fused(g, true); }

static inline kiln_session_t* session(kiln_module_t* m) {
  kiln_session_options_t so;
  kiln_session_options_default(&so);
  so.slots = 1;
  kiln_session_t* s = NULL;
  if (!m || !CHECK_OK(kiln_session_create(m, g_device, &so, &s))) return NULL;
  return s;
}

static inline void free_arrays(kiln_array_t* a, int n) {
  for (int i = 0; i < n; ++i) kiln_array_free(al(), &a[i]);
}

/* Runs |g| on the reference and the target with |in|: both must fail with
 * |code|, each message naming node |node| and holding |needle|. */
static inline void both_fail(const kiln_graph_t* g, kiln_session_t* s, const kiln_array_t* in, int code,
                      const char* node, const char* needle) {
  char quoted[96];
  snprintf(quoted, sizeof quoted, "node '%s'", node);
  kiln_array_t out[1];
  memset(out, 0, sizeof out);
  kiln_status_t st = kiln_ref_run(g, in, NULL, out);
  CHECK_MSG(st && strstr(kiln_status_message(st), quoted), "reference: expected an error naming %s", quoted);
  CHECK_ERR(st, code, needle);
  if (!s) return;
  memset(out, 0, sizeof out);
  st = kiln_session_run(s, in, out);
  CHECK_MSG(st && strstr(kiln_status_message(st), quoted), "%s: expected an error naming %s, got %s",
            g_target_name, quoted, st ? kiln_status_message(st) : "success");
  CHECK_ERR(st, code, needle);
  CHECK(out[0].data == NULL); /* a failed run hands back nothing */
}

/* Runs |g| on both with |in| and checks its |n_out| (<= 4) outputs agree
 * exactly. */
static inline void both_agree_n(const kiln_graph_t* g, kiln_session_t* s, const kiln_array_t* in, int n_out) {
  kiln_array_t want[4], got[4];
  memset(want, 0, sizeof want);
  memset(got, 0, sizeof got);
  if (!CHECK_OK(kiln_ref_run(g, in, NULL, want))) return;
  if (s && CHECK_OK(kiln_session_run(s, in, got))) {
    for (int k = 0; k < n_out; ++k) {
      CHECK(got[k].dtype == want[k].dtype && got[k].nbytes == want[k].nbytes);
      CHECK_MSG(got[k].nbytes == want[k].nbytes && !memcmp(got[k].data, want[k].data, want[k].nbytes),
                "%s: output %d differs from the reference", g_target_name, k);
    }
  }
  free_arrays(want, n_out);
  free_arrays(got, n_out);
}

/* The same for a graph with one output. */
static inline void both_agree(const kiln_graph_t* g, kiln_session_t* s, const kiln_array_t* in) {
  both_agree_n(g, s, in, 1);
}

/* Parses "[--target cpu|opencl|vulkan]" and opens that target's device
 * strictly into g_target / g_device: 0, or the exit code for main (2 for
 * bad usage, 1 when the target or its device is missing). */
static inline int target_open(int argc, char** argv) {
  for (int i = 1; i < argc; ++i) {
    if (!strcmp(argv[i], "--target") && i + 1 < argc) {
      g_target_name = argv[++i];
    } else {
      fprintf(stderr, "usage: %s [--target cpu|opencl|vulkan]\n", argv[0]);
      return 2;
    }
  }
  g_target = kiln_target_find(g_target_name);
  kiln_device_open_options_t oo = {2, true, stderr};
  if (!g_target || !CHECK_OK(kiln_device_open(g_target_name, &oo, al(), &g_device))) {
    fprintf(stderr, "no target or device '%s'\n", g_target_name);
    return 1;
  }
  return 0;
}

#endif /* KILN_TESTS_TARGET_GRAPH_UTIL_H_ */
