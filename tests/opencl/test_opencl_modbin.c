/* OpenCL program binaries in modules (module section 'DBIN', `kiln compile
 * -t opencl -o`): a small conv model compiled for OpenCL device 0 (PoCL in
 * CI) gets the device's binary embedded; the module round trip loads it
 * without building; a binary the driver refuses
 * (header wiped) or built from other source falls back to the source with
 * a warning naming the module, and one keyed for another driver, kiln or
 * vendor is rebuilt from source quietly; every way matches the
 * reference. The section's bad inputs are parse errors naming it.
 * POCL_CACHE_DIR points at an empty folder of the test's so PoCL's own
 * kernel cache cannot stand in for the module's binary. */
#include <fcntl.h>
#include <stdlib.h>
#include <sys/stat.h>
#include <unistd.h>

#include "compiler/pipeline.h"
#include "compiler/ref_exec.h"
#include "graph_harness.h"
#include "runtime/device_registry.h"
#include "runtime/module_file.h"
#include "runtime/opencl/opencl_device.h"
#include "targets/registry.h"
#include "testing.h"

static kiln_allocator_t A(void) { return kiln_allocator_system(); }
static char tmp_root[256];

/* Conv 3x3 (pads 1) + Relu over a 1x4xHxH input. */
static kiln_program_t* compile_model_h(int64_t h, kiln_array_t* feeds, kiln_array_t* want) {
  gb_t b;
  gb_init(&b);
  input(&b, "x", DIMS(1, 4, h, h));
  konst(&b, "w", DIMS(8, 4, 3, 3));
  kiln_attr_t ca[1] = {kiln_attr_make_ints("pads", 4, (int64_t[]){1, 1, 1, 1})};
  node(&b, "Conv", IN("x", "w"), "c", 1, ca);
  node(&b, "Relu", IN("c"), "y", 0, NULL);
  kiln_program_t* p = NULL;
  if (!b.st) b.st = kiln_graph_add_output(b.g, "y");
  if (!CHECK_OK(b.st) || !CHECK_OK(kiln_graph_prepare(b.g))) goto done;
  kiln_ref_options_t ro;
  kiln_ref_options_default(&ro);
  if (!CHECK_OK(kiln_ref_run(b.g, b.feeds, &ro, want))) goto done;
  kiln_compile_config_t cc = {.target = kiln_target_find("opencl"), .opt = 1, .model_name = "modbin.onnx"};
  kiln_compile_log_t log = {0};
  CHECK_OK(kiln_compile_program(b.g, &cc, &log, &p));
  kiln_compile_log_free(&log);
  feeds[0] = b.feeds[0];
  b.feeds[0].data = NULL;
done:
  for (int i = 0; i < b.n_feeds; ++i) kiln_array_free(A(), &b.feeds[i]);
  kiln_graph_destroy(b.g);
  return p;
}

static kiln_program_t* compile_model(kiln_array_t* feeds, kiln_array_t* want) {
  return compile_model_h(9, feeds, want);
}

/* |p| serialised and parsed back: what a module file round trip gives. */
static kiln_program_t* round_trip(const kiln_program_t* p) {
  uint8_t* bytes = NULL;
  size_t len = 0;
  kiln_program_t* q = NULL;
  if (CHECK_OK(kiln_module_serialize(p, A(), &bytes, &len)))
    CHECK_OK(kiln_module_parse(bytes, len, "modbin.kiln", A(), &q));
  kiln_allocator_free(A(), bytes);
  return q;
}

/* Builds |p| on |dev| without the binary cache and returns its stats; what
 * it wrote on stderr goes to |err| (a file of |cap| bytes at most). */
static bool build_stats(kiln_device_t* dev, const kiln_program_t* p, kiln_opencl_build_stats_t* st, char* err,
                        size_t cap) {
  char path[300];
  snprintf(path, sizeof path, "%s/stderr.txt", tmp_root);
  fflush(stderr);
  int saved = dup(2), fd = open(path, O_CREAT | O_TRUNC | O_WRONLY, 0600);
  if (fd >= 0) dup2(fd, 2);
  kiln_device_build_options_t bo = {.cache_dir = ""};
  kiln_device_executable_t* e = NULL;
  kiln_status_t s = dev->vt->executable_create(dev, p, &bo, &e);
  fflush(stderr);
  dup2(saved, 2);
  close(saved);
  if (fd >= 0) close(fd);
  err[0] = 0;
  FILE* f = fopen(path, "r");
  if (f) {
    size_t n = fread(err, 1, cap - 1, f);
    err[n] = 0;
    fclose(f);
  }
  if (!CHECK_OK(s)) return false;
  kiln_opencl_executable_stats(e, st);
  dev->vt->executable_destroy(dev, e);
  return true;
}

static void check_runs(kiln_device_t* dev, const kiln_program_t* p, const kiln_array_t* feeds,
                       const kiln_array_t* want, const char* what) {
  kiln_array_t got[1];
  memset(got, 0, sizeof got);
  CHECK(p->n_outputs == 1);
  if (p->n_outputs == 1 && CHECK_OK(run_on(dev, p, feeds, got))) close_enough(&got[0], &want[0], what);
  kiln_array_free(A(), &got[0]);
}

static void test_embedded_binaries(void) {
  kiln_device_t* dev = open_opencl_device_0();
  if (!dev) return;
  kiln_array_t feeds[1], want[1];
  memset(feeds, 0, sizeof feeds);
  memset(want, 0, sizeof want);
  kiln_program_t* p = compile_model(feeds, want);
  kiln_program_t *q = NULL, *t = NULL;
  char err[4096];
  kiln_opencl_build_stats_t st;
  if (!p) goto done;
  const kiln_device_api_t* api = kiln_device_api_find("opencl");
  CHECK(api && api->embed_binaries);
  /* The progress line, not on a terminal: a line per tenth of the steps,
   * the last one all of them (the program, then each kernel). */
  FILE* prog_log = tmpfile();
  if (!api || !api->embed_binaries || !CHECK_OK(api->embed_binaries(dev, p, prog_log))) {
    if (prog_log) fclose(prog_log);
    goto done;
  }
  if (prog_log) {
    char text[2048] = "", want_end[128];
    rewind(prog_log);
    size_t n = fread(text, 1, sizeof text - 1, prog_log);
    text[n] = 0;
    fclose(prog_log);
    snprintf(want_end, sizeof want_end, "kernels compiled, %d/%d steps", (int)p->n_kernels + 1,
             (int)p->n_kernels + 1);
    CHECK_MSG(strstr(text, "building for ") && strstr(text, want_end) && !strchr(text, '\r'), "progress '%s'", text);
  }
  CHECK(p->code.n_devbin == 1 && p->code.devbin[0].len > 0);
  CHECK(!strcmp(p->code.devbin[0].device, dev->info.name) && p->code.devbin[0].driver[0] &&
        p->code.devbin[0].kiln[0]);
  /* Embedding twice replaces the entry for the same key. */
  CHECK_OK(api->embed_binaries(dev, p, NULL));
  CHECK_MSG(p->code.n_devbin == 1, "%d binaries after embedding twice", (int)p->code.n_devbin);

  /* Round trip: the binary is used, nothing is built from source. */
  q = round_trip(p);
  if (!q) goto done;
  CHECK(q->code.n_devbin == 1 && q->code.devbin[0].len == p->code.devbin[0].len &&
        !memcmp(q->code.devbin[0].bytes, p->code.devbin[0].bytes, (size_t)p->code.devbin[0].len));
  if (build_stats(dev, q, &st, err, sizeof err))
    CHECK_MSG(st.embedded_used && !st.embedded_refused && !st.cache_hit && !err[0],
              "used %d refused %d cache %d, stderr '%s'", st.embedded_used, st.embedded_refused, st.cache_hit, err);
  check_runs(dev, q, feeds, want, "from the module's binary");

  /* PoCL caches programs itself: kiln's binary cache is not used there (its
   * binary query compiles every kernel once more). */
  if (strstr(dev->info.driver, "PoCL")) {
    char dir[300];
    snprintf(dir, sizeof dir, "%s/kiln-cache", tmp_root);
    kiln_device_build_options_t bo = {.cache_dir = dir};
    kiln_device_executable_t* e = NULL;
    kiln_program_t* bare = round_trip(q);
    if (bare) {
      kiln_program_devbins_free(bare);
      if (CHECK_OK(dev->vt->executable_create(dev, bare, &bo, &e))) {
        kiln_opencl_executable_stats(e, &st);
        CHECK_MSG(st.driver_cache && !st.cache_hit && !st.cache_path[0], "driver cache %d, kiln cache '%s'",
                  st.driver_cache, st.cache_path);
        dev->vt->executable_destroy(dev, e);
      }
      kiln_program_destroy(bare);
    }
  }

  /* A binary the driver refuses (header wiped), and the binary of another
   * model (same kernel names, other shapes) moved into this module's
   * section: refused before the driver sees it. A truncated binary is not
   * tried: PoCL reads past the end of one (the module's checksum is what
   * catches a cut file). */
  for (int variant = 0; variant < 2; ++variant) {
    kiln_program_destroy(t);
    t = round_trip(q);
    if (!t) goto done;
    kiln_program_devbin_t* b = &t->code.devbin[0];
    if (variant == 0) {
      memset(b->bytes, 0, b->len < 64 ? (size_t)b->len : 64);
    } else {
      kiln_array_t f2[1], w2[1];
      memset(f2, 0, sizeof f2);
      memset(w2, 0, sizeof w2);
      kiln_program_t* other = compile_model_h(7, f2, w2);
      kiln_array_free(A(), &f2[0]);
      kiln_array_free(A(), &w2[0]);
      if (!other) goto done;
      if (CHECK_OK(api->embed_binaries(dev, other, NULL)) && other->code.n_devbin == 1) {
        kiln_program_devbin_t* ob = &other->code.devbin[0];
        uint8_t* tmp = b->bytes;
        b->bytes = ob->bytes;
        ob->bytes = tmp;
        uint64_t tl = b->len;
        b->len = ob->len;
        ob->len = tl;
        b->source_crc = ob->source_crc;
      }
      kiln_program_destroy(other);
    }
    kiln_program_t* u = round_trip(t);
    kiln_program_destroy(t);
    t = u;
    if (!t) goto done;
    if (build_stats(dev, t, &st, err, sizeof err)) {
      CHECK_MSG(!st.embedded_used && st.embedded_refused, "variant %d: used %d refused %d", variant,
                st.embedded_used, st.embedded_refused);
      CHECK_MSG(strstr(err, "warning") && strstr(err, "modbin.onnx") && strstr(err, "building the program from source") &&
                    (variant == 0 || strstr(err, "built from other source")),
                "variant %d: stderr '%s'", variant, err);
    }
    check_runs(dev, t, feeds, want, variant ? "another model's binary, from source" : "wiped binary, from source");
  }

  /* Keyed for another driver (or another kiln): rebuilt from source, quietly. */
  for (int field = 0; field < 3; ++field) {
    kiln_program_destroy(t);
    t = round_trip(q);
    if (!t) goto done;
    kiln_program_devbin_t* b = &t->code.devbin[0];
    char** s = field == 0 ? &b->driver : field == 1 ? &b->kiln : &b->vendor;
    kiln_allocator_free(A(), *s);
    CHECK_OK(kiln_program_strdup(t, "0.0-other", s));
    if (build_stats(dev, t, &st, err, sizeof err))
      CHECK_MSG(!st.embedded_used && !st.embedded_refused && st.n_embedded == 1 && !err[0],
                "field %d: used %d refused %d n %d stderr '%s'", field, st.embedded_used, st.embedded_refused,
                (int)st.n_embedded, err);
  }
  check_runs(dev, t, feeds, want, "other device's binary, from source");
done:
  kiln_program_destroy(t);
  kiln_program_destroy(q);
  kiln_program_destroy(p);
  kiln_array_free(A(), &feeds[0]);
  kiln_array_free(A(), &want[0]);
  kiln_device_release(dev);
}

/* Bad 'DBIN' contents are parse errors naming the section; a binary on a
 * target that carries none is refused by validation. */
static void test_bad_sections(void) {
  kiln_array_t feeds[1], want[1];
  memset(feeds, 0, sizeof feeds);
  memset(want, 0, sizeof want);
  kiln_program_t* p = compile_model(feeds, want);
  if (!p) goto done;
  kiln_program_devbin_t key = {"dev", "vendor", "driver 1", "0.1.0", 0, NULL, 0};
  const uint8_t blob[8] = {1, 2, 3, 4, 5, 6, 7, 8};
  if (!CHECK_OK(kiln_program_devbin_add(p, &key, blob, sizeof blob))) goto done;
  CHECK_ERR(kiln_program_devbin_add(p, &key, blob, 0), KILN_INVALID_ARGUMENT, "without bytes");
  uint8_t* bytes = NULL;
  size_t len = 0;
  kiln_program_t* q = NULL;
  /* An empty device name. */
  p->code.devbin[0].device[0] = 0;
  if (CHECK_OK(kiln_module_serialize(p, A(), &bytes, &len)))
    CHECK_ERR(kiln_module_parse(bytes, len, "bad.kiln", A(), &q), KILN_PARSE_ERROR, "'DBIN'");
  kiln_allocator_free(A(), bytes);
  p->code.devbin[0].device[0] = 'd';
  /* A length past the section's end (the file resealed after the edit). */
  if (CHECK_OK(kiln_module_serialize(p, A(), &bytes, &len))) {
    uint8_t* at = NULL;
    for (size_t i = 0; i + 8 <= len && !at; ++i)
      if (!memcmp(bytes + i, blob, sizeof blob)) at = bytes + i;
    CHECK(at);
    if (at) {
      at[-8] = 0xff; /* the u64 length before the bytes */
      kiln_module_reseal(bytes, len);
      CHECK_ERR(kiln_module_parse(bytes, len, "bad.kiln", A(), &q), KILN_PARSE_ERROR, "claims");
    }
  }
  kiln_allocator_free(A(), bytes);
  /* The CPU target carries machine code, not device binaries. */
  p->target = "cpu";
  CHECK_ERR(kiln_program_validate(p), KILN_PARSE_ERROR, "device program binaries");
  p->target = "opencl";
  CHECK_OK(kiln_program_validate(p));
done:
  kiln_program_destroy(p);
  kiln_array_free(A(), &feeds[0]);
  kiln_array_free(A(), &want[0]);
}

int main(void) {
  snprintf(tmp_root, sizeof tmp_root, "/tmp/kiln_ocl_modbin_%d", (int)getpid());
  mkdir(tmp_root, 0700);
  char pocl[300];
  snprintf(pocl, sizeof pocl, "%s/pocl", tmp_root);
  mkdir(pocl, 0700);
  setenv("POCL_CACHE_DIR", pocl, 1);
  RUN(test_embedded_binaries);
  RUN(test_bad_sections);
  char cmd[400];
  snprintf(cmd, sizeof cmd, "rm -rf %s", tmp_root);
  if (system(cmd) != 0) fprintf(stderr, "could not remove %s\n", tmp_root);
  return kiln_test_finish();
}
