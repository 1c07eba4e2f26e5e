/* libFuzzer harness: the tuning cache (compiler/tune_cache.c) and every
 * reader of it (BAD_INPUTS.md rows 15 and 25, issue 24):
 *
 *   1. the load `kiln compile|run --tuning-cache` does (kiln_tune_cache_read
 *      with a warning sink): every skipped line is one warning naming the
 *      file and line, and nothing but OUT_OF_MEMORY fails;
 *   2. the records applied to a small model's templates (fuzz_tune_util.h):
 *      on the CPU through kiln_tune_cpu_plan_build (this machine's CPU
 *      device, as compile opens it), on OpenCL and Vulkan through
 *      kiln_tune_choose with made-up devices (no device is opened: the
 *      checks need only the key and the limits). A point the checks accept
 *      must build: the program is built (kernels printed, the Vulkan ones
 *      compiled to SPIR-V) and marked, once per distinct set of points;
 *   3. `kiln tune --merge`: the input split at the first 0x1e byte into two
 *      caches (without one: the input and a fixed cache the real writer
 *      made), read in both orders (the same keys and the same fastest time
 *      per key either way), written and read back (no warning, the same
 *      records: what kiln reads, it can write and read again).
 *
 * A broken invariant aborts (a finding, with the input in artifacts/).
 * kiln's notes and warnings go to memory streams, not the terminal. */
#include "bad_model_util.h" /* first: it sets _GNU_SOURCE */

#include <math.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "fuzz_tune_util.h"
#include "fuzz_util.h"

#define MARKER 0x1e

static kiln_graph_t* g_graph;
static kiln_device_t* g_cpu;
static kiln_tune_device_t g_cpu_key; /* this machine's CPU as records name it */
static const kiln_target_t* g_gpu[2];
static FILE* g_null;

static void die(const char* what, const char* detail) {
  fprintf(stderr, "fuzz_tune: %s%s%s\n", what, detail ? ": " : "", detail ? detail : "");
  abort();
}

static void die_status(const char* what, kiln_status_t s) { die(what, kiln_status_message(s)); }

/* Every program built once with the default points, before the first
 * input: what a first build keeps for the process (shaderc's and
 * glslang's set-up) is then not counted against an input, so libFuzzer
 * keeps its leak check after every input. */
static void warm_up(void) {
  for (int32_t i = -1; i < FZT_N_GPU_DEVICES; i += 2) {
    const kiln_target_t* t = i < 0 ? kiln_target_find("cpu") : g_gpu[i / 2];
    if (!t) continue;
    kiln_plan_t* plan = NULL;
    kiln_program_t* prog = NULL;
    kiln_template_set_t set;
    const kiln_tune_device_t d = fzt_gpu_device(i < 0 ? 0 : i);
    kiln_plan_options_t po = fzt_cpu_options();
    kiln_fusion_report_t fr;
    kiln_status_t s = NULL;
    if (i < 0) {
      kiln_program_templates(t, &set);
      s = kiln_plan_build(g_graph, &po, kiln_allocator_system(), &plan);
      if (!s) s = kiln_plan_fuse(plan, &fr, NULL);
    } else {
      set = fzt_gpu_set(t, &d);
      s = fzt_gpu_plan(g_graph, t, &d, &plan);
    }
    if (!s) s = kiln_template_choose(plan, &set);
    if (!s) s = kiln_program_build(plan, t, NULL, kiln_allocator_system(), &prog);
    if (s) die_status(t->name, s);
    kiln_program_destroy(prog);
    kiln_plan_destroy(plan);
  }
}

static void init(void) {
  /* kiln's own memo of compiled shaders would keep memory across inputs
   * (the harness builds each distinct set of points once instead) */
  setenv("KILN_SPIRV_MEMO", "off", 1);
  char model[256];
  if (!fzt_write_model(fz_path(model, sizeof model, "model.onnx"))) die("cannot write the model", model);
  kiln_status_t s = fzt_graph(model, &g_graph);
  if (s) die_status("model", s);
  kiln_device_open_options_t oo = {1, true, NULL};
  if ((s = kiln_device_open("cpu", &oo, kiln_allocator_system(), &g_cpu))) die_status("cpu device", s);
  kiln_tune_device_of(g_cpu, &g_cpu_key);
  g_gpu[0] = kiln_target_find("opencl");
  g_gpu[1] = kiln_target_find("vulkan");
  g_null = fopen("/dev/null", "w");
  if (!g_null) die("cannot open /dev/null", NULL);
  warm_up();
}

/* ---- points already built -------------------------------------------------
 * Building a program (the Vulkan one compiles GLSL) costs far more than the
 * rest of an input, and most inputs that reach it repeat a seed's points:
 * each distinct set of chosen points is built once per process. */

#define SEEN_CAP (1 << 14)
static uint64_t g_seen[SEEN_CAP];

static bool first_time(uint64_t h) {
  if (!h) h = 1;
  for (uint32_t i = (uint32_t)h & (SEEN_CAP - 1), n = 0; n < SEEN_CAP; i = (i + 1) & (SEEN_CAP - 1), ++n) {
    if (g_seen[i] == h) return false;
    if (!g_seen[i]) {
      g_seen[i] = h;
      return true;
    }
  }
  return true; /* full: build every time */
}

static uint64_t mix(uint64_t h, uint64_t v) {
  h ^= v + 0x9e3779b97f4a7c15ull + (h << 6) + (h >> 2);
  return h * 0xff51afd7ed558ccdull;
}

static uint64_t plan_points(const kiln_plan_t* plan, uint64_t h) {
  for (int32_t k = 0; k < plan->n_kernels; ++k) {
    const kiln_template_t* t = kiln_template_tunable_of(plan, k);
    h = mix(h, (uint64_t)k);
    if (!t) continue;
    h = mix(h, (uint64_t)t->kind);
    for (int32_t i = 0; i < t->tiles.n; ++i) h = mix(h, (uint64_t)(uint32_t)t->tiles.v[i]);
    h = mix(h, plan->kernels[k].tmpl ? (uint64_t)plan->kernels[k].tmpl->kind + 1 : 0);
  }
  return h;
}

/* ---- 1. the load ---------------------------------------------------------- */

/* Reads |path| into |c| and checks the warnings: one per skipped line,
 * each "warning: PATH:LINE: why; ignored". */
static void read_checked(kiln_tune_cache_t* c, const char* path) {
  char* text = NULL;
  size_t len = 0;
  FILE* w = open_memstream(&text, &len);
  if (!w) die("open_memstream", NULL);
  const int32_t skipped = c->skipped;
  kiln_status_t s = kiln_tune_cache_read(c, path, w);
  fclose(w);
  if (s && kiln_status_code(s) != KILN_OUT_OF_MEMORY) die_status("read failed", s);
  kiln_status_free(s);
  char head[300];
  snprintf(head, sizeof head, "warning: %s:", path);
  int32_t lines = 0;
  for (char* p = text; p && *p;) {
    char* nl = strchr(p, '\n');
    if (!nl) die("a warning without its newline", p);
    *nl = 0;
    if (strncmp(p, head, strlen(head)) || !strstr(p, "; ignored")) die("a warning not naming file and line", p);
    char* end = NULL;
    const long long line = strtoll(p + strlen(head), &end, 10);
    if (line < 1 || !end || *end != ':') die("a warning without a line number", p);
    ++lines;
    p = nl + 1;
  }
  if (lines != c->skipped - skipped) {
    char why[96];
    snprintf(why, sizeof why, "%d warnings, %d lines skipped", (int)lines, (int)(c->skipped - skipped));
    die("warnings and skipped lines disagree", why);
  }
  free(text);
  for (int32_t i = 0; i < c->n; ++i) {
    const kiln_tune_record_t* r = &c->r[i];
    if (!(r->default_us > 0 && r->tuned_us > 0) || !isfinite(r->default_us) || !isfinite(r->tuned_us) ||
        r->tiles.n < 1 || r->tiles.n > KILN_TEMPLATE_TILES_MAX)
      die("a record out of range was read", path);
    for (int32_t j = 0; j < r->tiles.n; ++j)
      if (r->tiles.v[j] < 0) die("a negative tile was read", path);
  }
}

static void check_report(const kiln_tune_use_report_t* r, const char* where) {
  if (r->tuned + r->kept + r->untuned + r->refused != r->instances || r->stale > r->untuned || r->tuned < 0 ||
      r->kept < 0 || r->untuned < 0 || r->refused < 0 || r->stale < 0)
    die("the use report's counts do not add up", where);
}

/* ---- 2. the records applied ----------------------------------------------
 * Building a plan is most of an input's time: a target's records are
 * applied only when one names its target and device, as the ones that
 * reach the checks and the stale ones (another driver) do. */

static bool names(const kiln_tune_cache_t* c, const char* target, const char* device) {
  for (int32_t i = 0; i < c->n; ++i)
    if (!strcmp(c->r[i].key.target, target) && !strcmp(c->r[i].key.device, device)) return true;
  return false;
}

static void apply_cpu(const kiln_tune_cache_t* c, const char* path) {
  if (!names(c, "cpu", g_cpu_key.device)) return;
  kiln_plan_options_t po = fzt_cpu_options();
  kiln_tune_cpu_table_t table;
  kiln_tune_use_report_t rep;
  kiln_plan_t* plan = NULL;
  kiln_status_t s = kiln_tune_cpu_plan_build(g_graph, &po, path, g_cpu, g_null, false, &table, &rep, &plan);
  if (s) die_status("cpu plan with the cache", s);
  check_report(&rep, "cpu");
  if (rep.tuned > 0) {
    uint64_t h = 0x5eed;
    for (int32_t i = 0; i < table.n; ++i) {
      h = mix(h, table.e[i].has_point);
      for (int32_t j = 0; table.e[i].has_point && j < table.e[i].point.n; ++j)
        h = mix(h, (uint64_t)(uint32_t)table.e[i].point.v[j]);
    }
    kiln_fusion_report_t fr;
    kiln_template_set_t set;
    kiln_program_templates(kiln_target_find("cpu"), &set);
    kiln_program_t* prog = NULL;
    if (first_time(h)) {
      if ((s = kiln_plan_fuse(plan, &fr, NULL))) die_status("cpu plan fuse with accepted points", s);
      if ((s = kiln_template_choose(plan, &set))) die_status("cpu templates with accepted points", s);
      if ((s = kiln_program_build(plan, kiln_target_find("cpu"), NULL, kiln_allocator_system(), &prog)))
        die_status("cpu program with accepted points", s);
      if ((s = kiln_tune_cpu_mark_program(g_graph, &table, prog))) die_status("cpu mark", s);
      kiln_program_destroy(prog);
    }
  }
  kiln_plan_destroy(plan);
  kiln_tune_cpu_table_free(&table);
}

static void apply_gpu(const kiln_tune_cache_t* c) {
  for (int32_t i = 0; i < FZT_N_GPU_DEVICES; ++i) {
    const kiln_target_t* t = g_gpu[i / 2];
    if (!t) continue;
    const kiln_tune_device_t d = fzt_gpu_device(i);
    if (!names(c, d.target, d.device)) continue;
    const kiln_template_set_t set = fzt_gpu_set(t, &d);
    kiln_plan_t* plan = NULL;
    kiln_status_t s = fzt_gpu_plan(g_graph, t, &d, &plan);
    if (s) die_status("gpu plan", s);
    kiln_tune_use_report_t rep;
    if ((s = kiln_tune_choose(plan, &set, c, &d, g_null, &rep))) die_status("kiln_tune_choose", s);
    check_report(&rep, t->name);
    /* every point taken passed the target's checks on this device */
    for (int32_t k = 0; k < plan->n_kernels; ++k) {
      const kiln_template_t* tt = kiln_template_tunable_of(plan, k);
      if (tt && tt->tuned_speedup > 0 && set.tiles_check && set.tiles_check(tt, &tt->tiles, &d.limits))
        die("a point the checks refuse was taken", set.tiles_check(tt, &tt->tiles, &d.limits));
    }
    if (rep.tuned > 0 && first_time(plan_points(plan, (uint64_t)i + 1))) {
      kiln_program_t* prog = NULL;
      if ((s = kiln_program_build(plan, t, NULL, kiln_allocator_system(), &prog)))
        die_status("a point the checks accept does not build", s);
      if ((s = kiln_tune_mark_program(plan, prog))) die_status("mark", s);
      kiln_program_destroy(prog);
    }
    kiln_plan_destroy(plan);
  }
}

/* ---- 3. the merge --------------------------------------------------------- */

static void same_fastest(const kiln_tune_cache_t* a, const kiln_tune_cache_t* b) {
  if (a->n != b->n) die("merging in the two orders gives different record counts", NULL);
  for (int32_t i = 0; i < a->n; ++i) {
    const kiln_tune_record_t* r = kiln_tune_cache_find(b, &a->r[i].key);
    if (!r) die("a key is missing from the merge in the other order", NULL);
    if (r->tuned_us != a->r[i].tuned_us) die("the merge keeps a slower record in one order", NULL);
  }
}

/* |c| written and read back: nothing ignored, the same records (times to
 * the file's 0.001 us). */
static void round_trip(const kiln_tune_cache_t* c, const char* out) {
  kiln_status_t s = kiln_tune_cache_write(c, out);
  if (s) die_status("write", s);
  kiln_tune_cache_t back = {0};
  read_checked(&back, out);
  if (back.skipped) die("kiln ignores lines of a cache it wrote itself", out);
  if (back.n != c->n) die("the cache read back holds another number of records", out);
  for (int32_t i = 0; i < c->n; ++i) {
    const kiln_tune_record_t* a = &c->r[i];
    const kiln_tune_record_t* b = kiln_tune_cache_find(&back, &a->key);
    if (!b) die("a record is lost when written and read back", out);
    if (b->tiles.n != a->tiles.n || memcmp(b->tiles.v, a->tiles.v, sizeof(int32_t) * (size_t)a->tiles.n))
      die("a record's tiles change when written and read back", out);
    if (fabs(b->tuned_us - a->tuned_us) > 6e-4 + 1e-12 * a->tuned_us ||
        fabs(b->default_us - a->default_us) > 6e-4 + 1e-12 * a->default_us)
      die("a record's times change when written and read back", out);
  }
  kiln_tune_cache_free(&back);
}

static void merge(const uint8_t* data, size_t size, const char* whole) {
  static char pa[256], pb[256], po[256], fixed[256];
  if (!pa[0]) {
    fz_path(pa, sizeof pa, "a.tsv");
    fz_path(pb, sizeof pb, "b.tsv");
    fz_path(po, sizeof po, "merged.tsv");
    /* the fixed cache: one record per GPU device and template kernel at its
     * default tiles, written by kiln */
    fz_path(fixed, sizeof fixed, "fixed.tsv");
    kiln_tune_cache_t c = {0};
    for (int32_t i = 0; i < FZT_N_GPU_DEVICES; ++i) {
      const kiln_target_t* t = g_gpu[i / 2];
      if (!t) continue;
      const kiln_tune_device_t d = fzt_gpu_device(i);
      const kiln_template_set_t set = fzt_gpu_set(t, &d);
      kiln_plan_t* plan = NULL;
      kiln_status_t s = fzt_gpu_plan(g_graph, t, &d, &plan);
      if (!s) s = kiln_template_select(plan, &set);
      if (s) die_status("fixed cache", s);
      for (int32_t k = 0; k < plan->n_kernels; ++k) {
        const kiln_template_t* tt = kiln_template_tunable_of(plan, k);
        kiln_template_space_t sp;
        if (!tt || !set.space || !set.space(tt, &sp)) continue;
        kiln_tune_record_t r = {.default_us = 100 + k, .tuned_us = 90};
        r.key = fzt_key(kiln_template_fingerprint(tt), sp.version, &d);
        r.tiles = tt->tiles;
        if ((s = kiln_tune_cache_put(&c, &r, false))) die_status("fixed cache", s);
      }
      kiln_plan_destroy(plan);
    }
    kiln_status_t s = kiln_tune_cache_write(&c, fixed);
    if (s) die_status("fixed cache", s);
    kiln_tune_cache_free(&c);
  }
  const uint8_t* m = size ? memchr(data, MARKER, size) : NULL;
  const char* a = whole;
  const char* b = fixed;
  if (m) {
    fz_write(pa, data, (size_t)(m - data));
    fz_write(pb, m + 1, size - (size_t)(m - data) - 1);
    a = pa;
    b = pb;
  }
  kiln_tune_cache_t ab = {0}, ba = {0};
  read_checked(&ab, a);
  read_checked(&ab, b);
  read_checked(&ba, b);
  read_checked(&ba, a);
  same_fastest(&ab, &ba);
  round_trip(&ab, po);
  kiln_tune_cache_free(&ab);
  kiln_tune_cache_free(&ba);
}

int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  static char path[256];
  if (!g_graph) {
    init();
    fz_path(path, sizeof path, "tuning.tsv");
  }
  fz_write(path, data, size);
  kiln_tune_cache_t c = {0};
  read_checked(&c, path);
  apply_cpu(&c, path);
  apply_gpu(&c);
  kiln_tune_cache_free(&c);
  merge(data, size, path);
  return 0;
}
