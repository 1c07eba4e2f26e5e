/* Ahead-of-time CPU modules (targets/cpu/cpu_aot.c, runtime/cpu/cpu_native.h,
 * the 'NATV' section of runtime/module_file.h): examples/tinycnn.onnx
 * compiled with this CPU's level ("host") runs from the module's machine
 * code with no compiler reachable (PATH empty, KILN_CC pointing nowhere) and
 * gives the same output as its C source built by the system compiler; the
 * section round-trips byte for byte; and every broken object -- no ELF
 * magic, truncated, another machine's, an unknown level, one this CPU lacks
 * -- is refused before the dynamic loader sees it, with a message naming the
 * module and level: the C source is then the fallback where a compiler
 * exists, and without one the error says both reasons; a signature covers
 * the machine code (one byte of it changed and the module is refused); a
 * module file is mapped and a session uses its weights in place; sessions
 * created on several threads at once load their machine code side by side. */
#define _GNU_SOURCE
#include <elf.h>
#include <math.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "frontend/onnx.h"
#include "ir/graph.h"
#include "ir/passes.h"
#include "kiln/runtime.h"
#include "lowering/fuse.h"
#include "lowering/plan.h"
#include "runtime/cpu/cpu_native.h"
#include "runtime/device_registry.h"
#include "runtime/module_file.h"
#include "runtime/module_impl.h"
#include "runtime/module_sign.h"
#include "runtime/session_impl.h"
#include "targets/program_build.h"
#include "testing.h"

static kiln_allocator_t sys(void) { return kiln_allocator_system(); }

/* The module bytes of tinycnn with machine code for |levels|. */
/* tinycnn compiled into a program with machine code for |levels| (NULL:
 * the C alone), as `kiln compile` does. */
static bool tiny_program(const char* levels, kiln_program_t** out) {
  const char* src = getenv("KILN_TEST_SRC");
  char path[4096];
  snprintf(path, sizeof path, "%s/../examples/tinycnn.onnx", src ? src : "tests");
  kiln_onnx_options_t oo;
  kiln_onnx_options_default(&oo);
  kiln_graph_t* g = NULL;
  kiln_plan_t* plan = NULL;
  kiln_plan_options_t po = {KILN_TARGET_CLASS_CPU, 2, 0, 0, 0, 0};
  kiln_program_build_options_t bo = {.model_name = "tiny.kiln", .cpu_targets = levels};
  bool ok = CHECK_OK(kiln_onnx_parse_model(path, &oo, sys(), &g));
  if (ok) {
    /* bind the symbolic batch to 1 as `kiln compile` does */
    for (int32_t i = 0; i < g->n_inputs; ++i) {
      kiln_tensor_t* t = &g->tensors[g->inputs[i]];
      for (int32_t d = 0; d < t->shape.rank; ++d)
        if (kiln_dim_symbol(t->shape.dims[d])) t->shape.dims[d] = 1;
    }
  }
  ok = ok && CHECK_OK(kiln_graph_prepare(g)) && CHECK_OK(kiln_graph_optimize(g, 1, NULL)) &&
       CHECK_OK(kiln_plan_build(g, &po, sys(), &plan)) && CHECK_OK(kiln_plan_fuse(plan, NULL, NULL)) &&
       CHECK_OK(kiln_program_build(plan, kiln_target_find("cpu"), &bo, sys(), out));
  kiln_plan_destroy(plan);
  kiln_graph_destroy(g);
  return ok;
}

static bool compile_tiny(const char* levels, uint8_t** out, size_t* out_len) {
  kiln_program_t* prog = NULL;
  bool ok = tiny_program(levels, &prog) && CHECK_OK(kiln_module_serialize(prog, sys(), out, out_len));
  kiln_program_destroy(prog);
  return ok;
}

static kiln_status_t run_bytes(const uint8_t* b, size_t n, kiln_array_t* out, char* report, size_t rn) {
  kiln_module_t* m = NULL;
  kiln_device_t* d = NULL;
  kiln_session_t* s = NULL;
  kiln_array_t in = {0};
  KILN_RETURN_IF_ERROR(kiln_module_load_memory(b, n, "tiny.kiln", sys(), &m));
  kiln_device_open_options_t dop = {2, true, NULL};
  kiln_status_t st = kiln_device_open("cpu", &dop, sys(), &d);
  kiln_session_options_t so;
  kiln_session_options_default(&so);
  so.cache_dir = ""; /* nothing cached: every build here is what it says */
  if (!st) st = kiln_session_create(m, d, &so, &s);
  if (!st && report) {
    FILE* f = fmemopen(report, rn, "w");
    if (f) {
      const kiln_device_api_t* api = kiln_device_api_find("cpu");
      api->executable_report(s->exe, f);
      fclose(f);
    }
  }
  kiln_dtype_t dt;
  kiln_shape_t sh = kiln_module_input_shape(m, 0, &dt);
  if (!st) st = kiln_array_alloc(sys(), dt, &sh, &in);
  for (int64_t i = 0; !st && i < kiln_shape_count(&sh); ++i) ((float*)in.data)[i] = (float)sin(0.37 * (double)i);
  if (!st) st = kiln_session_run(s, &in, out);
  kiln_array_free(sys(), &in);
  kiln_session_destroy(s);
  kiln_device_release(d);
  kiln_module_release(m);
  return st;
}

/* No compiler anywhere: what a phone is. */
static char* saved_path;
static void no_compiler(void) {
  const char* p = getenv("PATH");
  if (!saved_path) saved_path = strdup(p ? p : "/usr/bin:/bin");
  setenv("PATH", "", 1);
  setenv("KILN_CC", "/nonexistent/kiln-no-cc", 1);
}
static void with_compiler(void) {
  if (saved_path) setenv("PATH", saved_path, 1);
  unsetenv("KILN_CC");
}

static uint8_t* g_bytes;
static size_t g_len;
static kiln_array_t g_expect; /* the C source's output, built by cc */

/* The module's program, to edit and write again. */
static kiln_program_t* parse(void) {
  kiln_program_t* p = NULL;
  CHECK_OK(kiln_module_parse(g_bytes, g_len, "tiny.kiln", sys(), &p));
  return p;
}

static void check_output(const kiln_array_t* got, const char* what) {
  CHECK_MSG(got->nbytes == g_expect.nbytes, "%s: %zu output bytes, expected %zu", what, got->nbytes, g_expect.nbytes);
  double worst = 0;
  for (size_t i = 0; got->nbytes == g_expect.nbytes && i < got->nbytes / 4; ++i) {
    double a = ((const float*)got->data)[i], e = ((const float*)g_expect.data)[i];
    worst = fmax(worst, fabs(a - e));
  }
  CHECK_MSG(worst <= 1e-5, "%s: differs from the C source's output by %g", what, worst);
}

/* Writes |p| and runs it; the output is checked, the error returned. */
static kiln_status_t run_program(kiln_program_t* p, char* report, size_t rn) {
  uint8_t* b = NULL;
  size_t n = 0;
  kiln_status_t s = kiln_module_serialize(p, sys(), &b, &n);
  kiln_array_t out = {0};
  if (!s) s = run_bytes(b, n, &out, report, rn);
  if (!s) check_output(&out, "edited module");
  kiln_array_free(sys(), &out);
  kiln_allocator_free(sys(), b);
  return s;
}

static void test_runs_without_compiler(void) {
  const kiln_cpu_isa_t* host = kiln_cpu_isa_host();
  kiln_program_t* p = parse();
  CHECK(p && p->code.n_native == 1 && host && !strcmp(p->code.native[0].isa, host->name));
  /* the reference: the same module with its C source only, built by cc */
  with_compiler();
  p->code.n_native = 0;
  uint8_t* b = NULL;
  size_t n = 0;
  CHECK_OK(kiln_module_serialize(p, sys(), &b, &n));
  CHECK_OK(run_bytes(b, n, &g_expect, NULL, 0));
  p->code.n_native = 1;
  kiln_allocator_free(sys(), b);
  kiln_program_destroy(p);

  no_compiler();
  kiln_array_t out = {0};
  char report[1024] = "";
  CHECK_OK(run_bytes(g_bytes, g_len, &out, report, sizeof report));
  check_output(&out, "machine code");
  CHECK_MSG(strstr(report, "machine code (no compiler)"), "report: %s", report);
  kiln_array_free(sys(), &out);
  /* and without it nothing runs: the test really has no compiler */
  p = parse();
  p->code.n_native = 0;
  char why[64];
  snprintf(why, sizeof why, "cannot run compiler");
  CHECK_ERR(run_program(p, NULL, 0), -1, why);
  p->code.n_native = 1;
  kiln_program_destroy(p);
}

/* Several levels of this architecture: the best one the CPU runs is
 * loaded (x86-64-v4 where AVX-512 is, x86-64-v3 on AVX2 alone). */
static void test_best_level(void) {
#if defined(__x86_64__)
  uint8_t* b = NULL;
  size_t n = 0;
  with_compiler();
  if (!compile_tiny("x86-64-v4,x86-64-v3", &b, &n)) return;
  no_compiler();
  kiln_array_t out = {0};
  char report[1024] = "", want[128];
  snprintf(want, sizeof want, "the module's %s machine code", kiln_cpu_isa_host()->name);
  CHECK_OK(run_bytes(b, n, &out, report, sizeof report));
  CHECK_MSG(strstr(report, want), "report '%s', expected '%s'", report, want);
  check_output(&out, "best level");
  kiln_array_free(sys(), &out);
  kiln_allocator_free(sys(), b);
  with_compiler();
#endif
}

/* Old readers skip the section; this one writes the same bytes back. */
static void test_round_trip(void) {
  kiln_program_t* p = parse();
  uint8_t* b = NULL;
  size_t n = 0;
  CHECK(p && CHECK_OK(kiln_module_serialize(p, sys(), &b, &n)));
  CHECK(n == g_len && b && memcmp(b, g_bytes, n) == 0);
  kiln_allocator_free(sys(), b);
  kiln_program_destroy(p);
}

typedef void (*edit_fn)(kiln_program_native_t* nv);
static void no_magic(kiln_program_native_t* nv) { nv->bytes[1] = 'X'; }
static void truncated(kiln_program_native_t* nv) { nv->len = nv->len * 2 / 3; }
static void header_only(kiln_program_native_t* nv) { nv->len = sizeof(Elf64_Ehdr) - 1; }
static void other_machine(kiln_program_native_t* nv) {
  uint16_t m = EM_RISCV;
  memcpy(nv->bytes + offsetof(Elf64_Ehdr, e_machine), &m, 2);
}
static void phdrs_outside(kiln_program_native_t* nv) {
  uint64_t off = nv->len - 8;
  memcpy(nv->bytes + offsetof(Elf64_Ehdr, e_phoff), &off, 8);
}

/* A broken object for this CPU: refused by the check (never dlopen'd), the
 * C source built instead with a note, or with no compiler an error that
 * names the module, the level and the defect. */
static void check_broken(const char* what, edit_fn edit, const char* needle) {
  kiln_program_t* p = parse();
  if (!p) return;
  edit(&p->code.native[0]);
  char report[1024] = "";
  with_compiler();
  CHECK_OK(run_program(p, report, sizeof report));
  CHECK_MSG(strstr(report, "note: tiny.kiln:") && strstr(report, needle), "%s: report %s", what, report);
  no_compiler();
  kiln_status_t s = run_program(p, NULL, 0);
  CHECK_MSG(s && strstr(kiln_status_message(s), needle) && strstr(kiln_status_message(s), "tiny.kiln") &&
                strstr(kiln_status_message(s), "compiling its C source instead failed"),
            "%s: %s", what, kiln_status_message(s));
  kiln_status_free(s);
  kiln_program_destroy(p);
}

static void test_broken_objects(void) {
  check_broken("magic", no_magic, "no ELF magic");
  check_broken("truncated", truncated, "past the end");
  check_broken("header", header_only, "shorter than an ELF header");
  check_broken("machine", other_machine, "built for another machine");
  check_broken("phdrs", phdrs_outside, "program headers past the end");
}

/* Objects for other machines or unknown levels are not this CPU's: the C
 * source runs, and without a compiler the error lists what there is. */
static void test_no_object_for_this_cpu(void) {
  const char* names[] = {"aarch64", "riscv64-future"};
#if defined(__aarch64__)
  names[0] = "x86-64-v3";
#endif
  for (int i = 0; i < 2; ++i) {
    kiln_program_t* p = parse();
    if (!p) return;
    kiln_allocator_free(sys(), p->code.native[0].isa);
    p->code.native[0].isa = NULL;
    CHECK_OK(kiln_program_strdup(p, names[i], &p->code.native[0].isa));
    with_compiler();
    char report[1024] = "";
    CHECK_OK(run_program(p, report, sizeof report));
    CHECK_MSG(strstr(report, "has machine code for") && strstr(report, names[i]), "report %s", report);
    no_compiler();
    CHECK_ERR(run_program(p, NULL, 0), KILN_NOT_FOUND, names[i]);
    kiln_program_destroy(p);
  }
}

/* The reader refuses malformed sections before anything is allocated. */
static void test_bad_section(void) {
  kiln_program_t* p = parse();
  if (!p) return;
  /* an empty ISA name cannot be written ... */
  p->code.native[0].isa[0] = 0;
  uint8_t* b = NULL;
  size_t n = 0;
  CHECK_ERR(kiln_module_serialize(p, sys(), &b, &n), KILN_INVALID_ARGUMENT, "native code ISA name");
  kiln_program_destroy(p);
  /* ... nor read: the object's length field claiming more than is there */
  uint8_t* copy = malloc(g_len);
  memcpy(copy, g_bytes, g_len);
  uint8_t* natv = memmem(copy, g_len, "NATV", 4);
  CHECK(natv != NULL);
  if (natv) {
    uint8_t* name_len = natv + 16 + 8; /* header, count */
    uint32_t il;
    memcpy(&il, name_len, 4);
    uint64_t huge = 1ull << 40;
    memcpy(name_len + 4 + il, &huge, 8);
    kiln_module_reseal(copy, g_len);
    kiln_program_t* q = NULL;
    CHECK_ERR(kiln_module_parse(copy, g_len, "tiny.kiln", sys(), &q), KILN_PARSE_ERROR,
              "section 'NATV': native code object 0: ");
  }
  free(copy);
}

/* A signature covers the machine code like every other byte: one byte of
 * the object changed (checksums recomputed) and the module is refused. */
static void test_signed_machine_code(void) {
  char dir[] = "/tmp/kiln-aot-sign-XXXXXX", base[64];
  if (!mkdtemp(dir)) return;
  snprintf(base, sizeof base, "%s/k", dir);
  kiln_sign_public_key_t pub;
  kiln_sign_secret_key_t sk;
  uint8_t* signed_bytes = NULL;
  size_t n = 0;
  if (CHECK_OK(kiln_sign_keygen(base, &pub))) {
    char path[96];
    snprintf(path, sizeof path, "%s.key", base);
    if (CHECK_OK(kiln_sign_secret_key_read(path, &sk)) &&
        CHECK_OK(kiln_module_sign(g_bytes, g_len, "tiny.kiln", &sk, sys(), &signed_bytes, &n))) {
      CHECK_OK(kiln_module_verify(signed_bytes, n, "tiny.kiln", &pub));
      uint8_t* natv = memmem(signed_bytes, n, "NATV", 4);
      CHECK(natv != NULL);
      if (natv) {
        natv[16 + 8 + 4 + 16 + 8 + 200] ^= 0x40; /* inside the object, past its ELF header */
        kiln_module_reseal(signed_bytes, n);
        CHECK_ERR(kiln_module_verify(signed_bytes, n, "tiny.kiln", &pub), KILN_PERMISSION_DENIED,
                  "does not match the module's bytes");
      }
    }
    kiln_sign_secret_key_wipe(&sk);
    unlink(path);
    snprintf(path, sizeof path, "%s.pub", base);
    unlink(path);
  }
  rmdir(dir);
  kiln_allocator_free(sys(), signed_bytes);
}

/* A session of |m| on a CPU device that counts its calls, given |so|: with
 * |in_place| its weights bound where they lie (buffer_wrap once, no weight
 * written to the device); the output of a seeded input is the C source's
 * (|what| names the case). */
static void check_counted_session(kiln_module_t* m, const kiln_session_options_t* so, bool in_place,
                                  const char* what) {
  kiln_device_t *d = NULL, *fd = NULL;
  kiln_session_t* s = NULL;
  kiln_array_t in = {0}, out = {0};
  kiln_fault_spec_t never = {KILN_DEVICE_CALL_ANY, 1 << 30, KILN_FAULT_FAIL}; /* counts only */
  kiln_device_open_options_t dop = {2, true, NULL};
  if (CHECK_OK(kiln_device_open("cpu", &dop, sys(), &d)) && CHECK_OK(kiln_device_fault_wrap(d, &never, &fd)) &&
      CHECK_OK(kiln_session_create(m, fd, so, &s))) {
    if (in_place) {
      CHECK(kiln_device_fault_count(fd, KILN_DEVICE_CALL_BUFFER_WRAP) == 1);
      CHECK_MSG(kiln_device_fault_count(fd, KILN_DEVICE_CALL_BUFFER_WRITE) == 0, "%s: %d buffer writes building a session",
                what, kiln_device_fault_count(fd, KILN_DEVICE_CALL_BUFFER_WRITE));
    }
    kiln_dtype_t dt;
    kiln_shape_t sh = kiln_module_input_shape(m, 0, &dt);
    if (CHECK_OK(kiln_array_alloc(sys(), dt, &sh, &in))) {
      for (int64_t i = 0; i < kiln_shape_count(&sh); ++i) ((float*)in.data)[i] = (float)sin(0.37 * (double)i);
      if (CHECK_OK(kiln_session_run(s, &in, &out))) check_output(&out, what);
    }
  }
  kiln_array_free(sys(), &in);
  kiln_array_free(sys(), &out);
  kiln_session_destroy(s);
  kiln_device_release(fd);
  kiln_device_release(d);
}

/* A module file is mapped and its weights used where they lie: the
 * program's weights point into the mapping and the session wraps them
 * (buffer_wrap once, no weight written to the device) -- and the output is
 * that of the copied path (no_map: read, weights copied, uploaded). */
static void test_mapped_in_place(void) {
  char dir[] = "/tmp/kiln-aot-map-XXXXXX", path[64];
  if (!mkdtemp(dir)) return;
  snprintf(path, sizeof path, "%s/tiny.kiln", dir);
  FILE* f = fopen(path, "wb");
  CHECK(f && fwrite(g_bytes, 1, g_len, f) == g_len);
  if (f) fclose(f);
  no_compiler();
  for (int mapped = 1; mapped >= 0; --mapped) {
    kiln_module_load_options_t lo = {.no_map = !mapped};
    kiln_module_t* m = NULL;
    if (CHECK_OK(kiln_module_load_file_opts(path, &lo, sys(), &m))) {
      const kiln_program_t* p = kiln_module_program(m);
      CHECK(p->weights_len > 0 && p->weights_borrowed == mapped);
      check_counted_session(m, NULL, mapped, mapped ? "mapped" : "read and copied");
    }
    kiln_module_release(m);
  }
  /* Wrapping the weights fails (or a view of them, or the device is lost
   * there): the session is refused with the device's error, nothing leaks. */
  const kiln_fault_spec_t faults[3] = {{KILN_DEVICE_CALL_BUFFER_WRAP, 1, KILN_FAULT_FAIL},
                                       {KILN_DEVICE_CALL_BUFFER_WRAP, 1, KILN_FAULT_DEVICE_LOST},
                                       {KILN_DEVICE_CALL_VIEW_CREATE, 2, KILN_FAULT_OUT_OF_MEMORY}};
  for (int f = 0; f < 3; ++f) {
    kiln_module_t* m = NULL;
    kiln_device_t *d = NULL, *fd = NULL;
    kiln_session_t* s = NULL;
    kiln_device_open_options_t dop = {2, true, NULL};
    if (CHECK_OK(kiln_module_load_file(path, sys(), &m)) && CHECK_OK(kiln_device_open("cpu", &dop, sys(), &d)) &&
        CHECK_OK(kiln_device_fault_wrap(d, &faults[f], &fd)))
      CHECK_ERR(kiln_session_create(m, fd, NULL, &s), -1, d->info.name);
    CHECK(s == NULL);
    kiln_device_release(fd);
    kiln_device_release(d);
    kiln_module_release(m);
  }
  with_compiler();
  unlink(path);
  rmdir(dir);
}

/* A program just compiled (kiln run's path: no module file) keeps its
 * weights in a 64-byte aligned blob, so the CPU session binds them where
 * they lie as it does a mapped module's (buffer_wrap once, no weight
 * written to the device) instead of copying them after the C compiler;
 * the output is the C source's. */
static void test_compiled_in_place(void) {
  with_compiler();
  kiln_program_t* prog = NULL;
  kiln_module_t* m = NULL;
  kiln_session_options_t so;
  kiln_session_options_default(&so);
  so.cache_dir = ""; /* nothing cached */
  /* a few programs alive at once: a 16-byte aligned malloc block is 64-byte
   * aligned by chance a quarter of the time, all four of them rarely */
  kiln_program_t* more[3] = {NULL, NULL, NULL};
  for (int k = 0; k < 3; ++k)
    if (tiny_program(NULL, &more[k]))
      CHECK_MSG(more[k]->weights_len > 0 && ((uintptr_t)more[k]->weights & 63) == 0,
                "program %d: weights at %p, not 64-byte aligned", k, (void*)more[k]->weights);
  for (int k = 0; k < 3; ++k) kiln_program_destroy(more[k]);
  if (!tiny_program(NULL, &prog)) return;
  CHECK_MSG(prog->weights_len > 0 && ((uintptr_t)prog->weights & 63) == 0 && !prog->weights_borrowed,
            "weights at %p, not 64-byte aligned", (void*)prog->weights);
  kiln_status_t ws = kiln_module_wrap(prog, &m);
  prog = NULL; /* the module's now (wrap destroys it on an error) */
  if (CHECK_OK(ws)) check_counted_session(m, &so, true, "compiled, weights in place");
  kiln_module_release(m);
}

/* Sessions created on several threads at once, as kiln-rt-run --clients
 * does: each loads its own copy of the machine code while the others load
 * theirs. The loader once promoted the OpenMP runtime to NODELETE by
 * calling dlopen inside dl_iterate_phdr's callback, which takes the
 * loader's two locks in the reverse of a plain dlopen's order; two threads
 * deadlocked about one run in thirty. Here 4 threads load 30 each; a
 * deadlock is the test's timeout. */
#define LOAD_THREADS 4
#define LOADS_EACH 30

typedef struct {
  int failed;
  char why[256];
} load_worker_t;

static void* load_worker(void* arg) {
  load_worker_t* w = arg;
  for (int i = 0; i < LOADS_EACH && !w->failed; ++i) {
    kiln_array_t out = {0};
    kiln_status_t s = run_bytes(g_bytes, g_len, &out, NULL, 0);
    if (s) {
      snprintf(w->why, sizeof w->why, "load %d: %s", i, kiln_status_message(s));
      w->failed = 1;
      kiln_status_free(s);
    } else if (out.nbytes != g_expect.nbytes || memcmp(out.data, g_expect.data, out.nbytes)) {
      /* the same machine code on the same input: the same bytes */
      snprintf(w->why, sizeof w->why, "load %d: output differs from the first load's", i);
      w->failed = 1;
    }
    kiln_array_free(sys(), &out);
  }
  return NULL;
}

static void test_concurrent_loads(void) {
  no_compiler();
  kiln_array_free(sys(), &g_expect);
  if (!CHECK_OK(run_bytes(g_bytes, g_len, &g_expect, NULL, 0))) return;
  pthread_t th[LOAD_THREADS];
  load_worker_t w[LOAD_THREADS];
  memset(w, 0, sizeof w);
  int started = 0;
  for (int t = 0; t < LOAD_THREADS; ++t) {
    int rc = pthread_create(&th[t], NULL, load_worker, &w[t]);
    CHECK_MSG(rc == 0, "thread %d: pthread_create: %s", t, strerror(rc));
    if (rc) break;
    started = t + 1;
  }
  for (int t = 0; t < started; ++t) {
    pthread_join(th[t], NULL);
    CHECK_MSG(!w[t].failed, "thread %d: %s", t, w[t].why);
  }
}

int main(void) {
  if (!kiln_cpu_isa_host()) {
    printf("skipped: this CPU has none of kiln's ISA levels (%s)\n", kiln_cpu_isa_names());
    return 0;
  }
  if (!compile_tiny("host", &g_bytes, &g_len)) return kiln_test_finish();
  RUN(test_runs_without_compiler);
  RUN(test_best_level);
  RUN(test_round_trip);
  RUN(test_broken_objects);
  RUN(test_no_object_for_this_cpu);
  RUN(test_bad_section);
  RUN(test_signed_machine_code);
  RUN(test_mapped_in_place);
  RUN(test_compiled_in_place);
  RUN(test_concurrent_loads);
  with_compiler();
  free(saved_path);
  kiln_array_free(sys(), &g_expect);
  kiln_allocator_free(sys(), g_bytes);
  return kiln_test_finish();
}
