/* Tests for the runtime: sessions on the CPU device against the reference
 * interpreter and the direct CPU executor, module round trips bit for bit,
 * runs in flight on two slots, the memory plan a session uses, barriers
 * only on hazards, and profiles (table and Chrome trace). */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "compiler/compare.h"
#include "runtime/cpu/cpu_device.h"
#include "runtime/module_file.h"
#include "runtime/session_impl.h"
#include "runtime_util.h"
#include "targets/cpu/cpu_backend.h"

static kiln_device_t* cpu_device(void) {
  kiln_device_t* d = NULL;
  CHECK_OK(kiln_cpu_device_create(2, kiln_allocator_system(), &d));
  return d;
}

static void test_session_matches_reference_and_cpu_exec(void) {
  kiln_graph_t* g = rt_model();
  if (!g) return;
  kiln_array_t x = rt_random(4, rt_x_dims);
  kiln_array_t want[2] = {0}, direct[2] = {0}, got[2] = {0};
  CHECK_OK(kiln_ref_run(g, &x, NULL, want));
  /* The same plan through the old direct executor: the session must give the
   * same bits (same code, only the memory differs). */
  kiln_plan_options_t po = {KILN_TARGET_CLASS_CPU, 2, 0, 0, 0, 0};
  kiln_plan_t* plan = NULL;
  kiln_program_t* prog = NULL;
  CHECK_OK(kiln_plan_build(g, &po, kiln_allocator_system(), &plan));
  CHECK_OK(kiln_plan_fuse(plan, NULL, NULL));
  CHECK_OK(kiln_program_build(plan, kiln_target_find("cpu"), NULL, kiln_allocator_system(), &prog));
  kiln_cpu_options_t co;
  kiln_cpu_options_default(&co);
  co.threads = 2;
  kiln_cpu_exec_t* e = NULL;
  CHECK_OK(kiln_cpu_compile(plan, &co, &e, NULL));
  CHECK_OK(kiln_cpu_run(e, &x, direct, NULL, NULL));
  kiln_cpu_exec_destroy(e);
  kiln_module_t* m = NULL;
  kiln_device_t* d = cpu_device();
  kiln_session_t* s = NULL;
  if (prog && CHECK_OK(kiln_module_wrap(prog, &m)) && d && CHECK_OK(kiln_session_create(m, d, NULL, &s)) &&
      CHECK_OK(kiln_session_run(s, &x, got))) {
    for (int o = 0; o < 2; ++o) {
      kiln_compare_result_t cr;
      kiln_compare(&got[o], &want[o], 1e-4, 1e-5, &cr);
      CHECK_MSG(cr.ok, "output %d vs reference: %s", o, cr.message);
      CHECK_MSG(rt_same_bytes(&got[o], &direct[o]), "output %d differs from kiln_cpu_run", o);
    }
    kiln_session_memory_t mem;
    kiln_session_memory(s, &mem);
    CHECK(mem.slots == 2);
    CHECK(mem.lower_bound_bytes <= mem.arena_bytes && mem.arena_bytes <= mem.naive_bytes);
    CHECK(mem.dispatches == kiln_module_program(m)->n_kernels);
    CHECK_OK(kiln_memory_plan_verify(kiln_module_program(m), &s->mp, s->alignment));
  }
  kiln_session_destroy(s);
  kiln_device_release(d);
  kiln_module_release(m);
  kiln_plan_destroy(plan);
  rt_free_arrays(want, 2);
  rt_free_arrays(direct, 2);
  rt_free_arrays(got, 2);
  kiln_array_free(kiln_allocator_system(), &x);
  kiln_graph_destroy(g);
}

/* Serialise, parse, run: the same bits as the in-memory module. */
static void test_module_round_trip_bit_exact(void) {
  kiln_module_t* m = rt_module();
  kiln_device_t* d = cpu_device();
  if (!m || !d) return;
  uint8_t* bytes = NULL;
  size_t len = 0;
  kiln_module_t* m2 = NULL;
  kiln_session_t *s1 = NULL, *s2 = NULL;
  kiln_array_t x = rt_random(4, rt_x_dims);
  kiln_array_t a[2] = {0}, b[2] = {0};
  char path[] = "/tmp/kiln-test-rt-XXXXXX";
  int fd = mkstemp(path);
  CHECK(fd >= 0);
  if (fd >= 0) close(fd);
  if (CHECK_OK(kiln_module_write_file(kiln_module_program(m), path)) &&
      CHECK_OK(kiln_module_load_file(path, kiln_allocator_system(), &m2)) &&
      CHECK_OK(kiln_session_create(m, d, NULL, &s1)) && CHECK_OK(kiln_session_create(m2, d, NULL, &s2)) &&
      CHECK_OK(kiln_session_run(s1, &x, a)) && CHECK_OK(kiln_session_run(s2, &x, b))) {
    for (int o = 0; o < 2; ++o) CHECK_MSG(rt_same_bytes(&a[o], &b[o]), "output %d differs after a round trip", o);
    kiln_module_info_t mi;
    kiln_module_info(m2, &mi);
    CHECK(mi.n_inputs == 1 && mi.n_outputs == 2 && !strcmp(mi.target, "cpu"));
    CHECK(mi.format_version == KILN_MODULE_FORMAT_VERSION);
    CHECK(!strcmp(kiln_module_input_name(m2, 0), "x"));
    CHECK(!strcmp(kiln_module_output_name(m2, 1), "z"));
  }
  CHECK_OK(kiln_module_serialize(kiln_module_program(m), kiln_allocator_system(), &bytes, &len));
  kiln_allocator_free(kiln_allocator_system(), bytes);
  unlink(path);
  kiln_session_destroy(s1);
  kiln_session_destroy(s2);
  kiln_module_release(m2);
  kiln_module_release(m);
  kiln_device_release(d);
  rt_free_arrays(a, 2);
  rt_free_arrays(b, 2);
  kiln_array_free(kiln_allocator_system(), &x);
}

/* Two runs in flight (one per slot), retired out of order, give what the
 * same inputs give run one at a time; a third enqueue is refused. */
static void test_runs_in_flight(void) {
  kiln_module_t* m = rt_module();
  kiln_device_t* d = cpu_device();
  kiln_session_t* s = NULL;
  if (!m || !d || !CHECK_OK(kiln_session_create(m, d, NULL, &s))) goto out;
  kiln_array_t x1 = rt_random(4, rt_x_dims), x2 = rt_random(4, rt_x_dims);
  kiln_array_t s1[2] = {0}, s2[2] = {0}, p1[2] = {0}, p2[2] = {0};
  CHECK_OK(kiln_session_run(s, &x1, s1));
  CHECK_OK(kiln_session_run(s, &x2, s2));
  uint64_t r1 = 0, r2 = 0, r3 = 0;
  CHECK_OK(kiln_session_enqueue(s, &x1, &r1));
  CHECK_OK(kiln_session_enqueue(s, &x2, &r2));
  CHECK(r1 != r2);
  CHECK_ERR(kiln_session_enqueue(s, &x1, &r3), KILN_LIMIT_EXCEEDED, "slots");
  CHECK_OK(kiln_session_wait(s, r2, p2));
  CHECK_OK(kiln_session_wait(s, r1, p1));
  CHECK_ERR(kiln_session_wait(s, r1, p1 + 0), KILN_INVALID_ARGUMENT, "not in flight");
  for (int o = 0; o < 2; ++o) {
    CHECK_MSG(rt_same_bytes(&s1[o], &p1[o]), "run 1 output %d differs when pipelined", o);
    CHECK_MSG(rt_same_bytes(&s2[o], &p2[o]), "run 2 output %d differs when pipelined", o);
  }
  CHECK(!rt_same_bytes(&s1[0], &s2[0])); /* different inputs, different outputs */
  /* A session destroyed with a run in flight waits for it. */
  CHECK_OK(kiln_session_enqueue(s, &x1, &r3));
  rt_free_arrays(s1, 2);
  rt_free_arrays(s2, 2);
  rt_free_arrays(p1, 2);
  rt_free_arrays(p2, 2);
  kiln_array_free(kiln_allocator_system(), &x1);
  kiln_array_free(kiln_allocator_system(), &x2);
out:
  kiln_session_destroy(s);
  kiln_device_release(d);
  kiln_module_release(m);
}

/* Unfused, the model is a chain conv -> relu -> add -> sigmoid plus an
 * independent mul: every chain step needs a barrier (read after write),
 * the mul only reads x and writes z, so it needs none of its own unless
 * its range was touched. */
static void test_barriers_only_on_hazards(void) {
  kiln_graph_t* g = rt_model();
  kiln_program_t* prog = g ? rt_program(g, false) : NULL;
  kiln_graph_destroy(g);
  kiln_module_t* m = NULL;
  kiln_device_t* d = cpu_device();
  kiln_session_t* s = NULL;
  if (!prog || !CHECK_OK(kiln_module_wrap(prog, &m)) || !d || !CHECK_OK(kiln_session_create(m, d, NULL, &s)))
    goto out;
  const kiln_program_t* p = kiln_module_program(m);
  int32_t hazards = 0;
  for (int32_t k = 0; k < p->n_kernels; ++k) {
    /* Independent check: does kernel k read something an earlier kernel wrote
     * (since the last barrier), or overwrite something read or written? */
    bool need = false;
    for (int32_t j = k - 1; j >= 0 && !need; --j) {
      for (int32_t a = 0; a < p->kernels[k].n_args && !need; ++a)
        for (int32_t b = 0; b < p->kernels[j].n_args && !need; ++b) {
          uint64_t oa = s->mp.offsets[p->kernels[k].args[a]], ob = s->mp.offsets[p->kernels[j].args[b]];
          if (oa == UINT64_MAX || ob == UINT64_MAX) continue;
          uint64_t ea = oa + p->buffers[p->kernels[k].args[a]].bytes;
          uint64_t eb = ob + p->buffers[p->kernels[j].args[b]].bytes;
          bool overlap = oa < eb && ob < ea;
          bool kw = p->kernels[k].access[a] & KILN_ARG_WRITE, jw = p->kernels[j].access[b] & KILN_ARG_WRITE;
          if (overlap && (kw || jw)) need = true;
        }
      if (s->barrier_before[j]) break; /* earlier kernels are fenced off */
    }
    CHECK_MSG(need == (s->barrier_before[k] != 0), "kernel %d: barrier %d, hazard %d", (int)k,
              (int)s->barrier_before[k], (int)need);
    hazards += need;
  }
  kiln_session_memory_t mem;
  kiln_session_memory(s, &mem);
  CHECK(mem.barriers == hazards);
  CHECK(mem.barriers < mem.dispatches); /* the first kernel never needs one */
out:
  kiln_session_destroy(s);
  kiln_device_release(d);
  kiln_module_release(m);
}

static char* slurp(const char* path) {
  FILE* f = fopen(path, "rb");
  if (!f) return NULL;
  fseek(f, 0, SEEK_END);
  long n = ftell(f);
  fseek(f, 0, SEEK_SET);
  char* b = calloc((size_t)n + 1, 1);
  if (b && fread(b, 1, (size_t)n, f) != (size_t)n) b[0] = 0;
  fclose(f);
  return b;
}

static int count(const char* hay, const char* needle) {
  int n = 0;
  for (const char* p = hay; (p = strstr(p, needle)); p += strlen(needle)) ++n;
  return n;
}

static void test_profile_table_and_trace(void) {
  kiln_module_t* m = rt_module();
  kiln_device_t* d = cpu_device();
  kiln_session_t* s = NULL;
  kiln_session_options_t so;
  kiln_session_options_default(&so);
  so.profile = true;
  kiln_array_t x = rt_random(4, rt_x_dims);
  kiln_array_t out[2] = {0};
  if (!m || !d || !CHECK_OK(kiln_session_create(m, d, &so, &s))) goto done;
  CHECK_ERR(kiln_profile_write_trace(s, "/tmp/kiln-never-written.json"), KILN_INVALID_ARGUMENT, "no profiled run");
  /* A lone run is the profile; from the second on, the first (warm-up)
   * run leaves the totals. */
  int32_t n = 0, runs = 0;
  for (int r = 0; r < 3; ++r) {
    CHECK_OK(kiln_session_run(s, &x, out));
    rt_free_arrays(out, 2);
    kiln_session_profile(s, NULL, &runs);
    CHECK_MSG(runs == (r < 2 ? 1 : 2), "after run %d: %d profiled runs", r + 1, (int)runs);
  }
  const kiln_profile_entry_t* e = kiln_session_profile(s, &n, &runs);
  const kiln_program_t* p = kiln_module_program(m);
  CHECK(e && n == p->n_kernels && runs == 2);
  double total = 0;
  for (int32_t k = 0; e && k < n; ++k) {
    CHECK(e[k].total_s >= e[k].last_s && e[k].last_s >= 0);
    CHECK(!strcmp(e[k].kernel, p->kernels[k].name));
    if (k > 0) CHECK(e[k].start_s >= e[k - 1].start_s + e[k - 1].last_s - 1e-9);
    total += e[k].total_s;
  }
  CHECK(total > 0);
  char tpath[] = "/tmp/kiln-test-trace-XXXXXX";
  int fd = mkstemp(tpath);
  if (fd >= 0) close(fd);
  if (CHECK_OK(kiln_profile_write_trace(s, tpath))) {
    char* t = slurp(tpath);
    CHECK(t && strstr(t, "\"traceEvents\""));
    CHECK(t && count(t, "\"ph\":\"X\"") == n);
    for (int32_t k = 0; t && k < n; ++k) CHECK(strstr(t, p->kernels[k].name) != NULL);
    free(t);
  }
  unlink(tpath);
  FILE* tf = tmpfile();
  if (tf) {
    kiln_profile_print_table(s, tf, 0);
    rewind(tf);
    char buf[4096] = {0};
    size_t got = fread(buf, 1, sizeof buf - 1, tf);
    buf[got] = 0;
    CHECK(strstr(buf, "GFLOP/s") && strstr(buf, "GB/s") && strstr(buf, "2 runs"));
    /* every row names its node (the tail of a long one) and its kernel symbol */
    for (int32_t k = 0; k < n; ++k) {
      const char* node = p->kernels[k].node_name;
      const size_t nl = strlen(node);
      CHECK_MSG(strstr(buf, nl > 35 ? node + nl - 35 : node) != NULL, "profile table lacks node '%s'", node);
      CHECK_MSG(strstr(buf, p->kernels[k].name) != NULL, "profile table lacks kernel '%s'", p->kernels[k].name);
    }
    fclose(tf);
  }
done:
  kiln_array_free(kiln_allocator_system(), &x);
  kiln_session_destroy(s);
  kiln_device_release(d);
  kiln_module_release(m);
}

/* A session without profiling has no profile. */
static void test_profile_off(void) {
  kiln_module_t* m = rt_module();
  kiln_device_t* d = cpu_device();
  kiln_session_t* s = NULL;
  if (m && d && CHECK_OK(kiln_session_create(m, d, NULL, &s))) CHECK(kiln_session_profile(s, NULL, NULL) == NULL);
  kiln_session_destroy(s);
  kiln_device_release(d);
  kiln_module_release(m);
}

/* The device listing as text (kiln_device_api_list; the Python package's
 * kiln.devices() parses it): the CPU is API 0 and always has device 0. */
static void test_device_listing(void) {
  int32_t n = kiln_device_api_count();
  CHECK(n >= 1 && !strcmp(kiln_device_api_name_at(0), "cpu"));
  CHECK(kiln_device_api_name_at(n) == NULL && kiln_device_api_name_at(-1) == NULL);
  char* text = NULL;
  if (CHECK_OK(kiln_device_api_list(0, &text))) CHECK(text && strstr(text, "[0]"));
  kiln_free(text);
  text = NULL;
  CHECK_ERR(kiln_device_api_list(n, &text), KILN_OUT_OF_RANGE, "API");
  CHECK(text == NULL);
  kiln_free(NULL);
}

int main(void) {
  RUN(test_session_matches_reference_and_cpu_exec);
  RUN(test_module_round_trip_bit_exact);
  RUN(test_runs_in_flight);
  RUN(test_barriers_only_on_hazards);
  RUN(test_profile_table_and_trace);
  RUN(test_profile_off);
  RUN(test_device_listing);
  return kiln_test_finish();
}
