/* The tuning cache file (compiler/tune_cache.h; BAD_INPUTS.md rows 15 and
 * 25): records round-trip through the file, merging keeps the faster
 * record per key, and truncated, corrupt, hostile (huge numbers, negative
 * tiles, a 10 MB line, deep nesting, NUL bytes) or foreign files cost a
 * warning naming the file and line and that line only: the good records
 * around them are read, nothing is fatal, a FIFO never blocks. Also the
 * knob-space helpers and the fingerprint the records are keyed by. */
#include <fcntl.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "compiler/tune_cache.h"
#include "lowering/template.h"
#include "testing.h"

static char dir[256];

static const char* path_of(const char* name) {
  static char buf[4][512];
  static int i;
  char* p = buf[i++ % 4];
  snprintf(p, 512, "%s/%s", dir, name);
  return p;
}

static void write_file(const char* path, const char* text, size_t n) {
  FILE* f = fopen(path, "wb");
  CHECK(f != NULL);
  if (!f) return;
  fwrite(text, 1, n, f);
  fclose(f);
}

static kiln_tune_record_t rec(uint64_t fp, const char* driver, int32_t tm, double def, double tuned) {
  kiln_tune_record_t r;
  memset(&r, 0, sizeof r);
  r.key.fingerprint = fp;
  snprintf(r.key.target, sizeof r.key.target, "opencl");
  snprintf(r.key.space, sizeof r.key.space, "opencl.conv.1");
  snprintf(r.key.device, sizeof r.key.device, "pthread-cpu X");
  snprintf(r.key.driver, sizeof r.key.driver, "%s", driver);
  snprintf(r.key.kiln, sizeof r.key.kiln, "dev");
  r.tiles = (kiln_template_tiles_t){.n = 8, .v = {tm, 32, 16, 1, 1, 128, 8, 4}};
  r.default_us = def;
  r.tuned_us = tuned;
  return r;
}

/* Reads |path| with warnings into a file; returns the warnings' text. */
static char* read_warn(kiln_tune_cache_t* c, const char* path) {
  const char* wp = path_of("warnings.txt");
  FILE* w = fopen(wp, "w+");
  CHECK(w != NULL);
  if (!w) return strdup("");
  CHECK_OK(kiln_tune_cache_read(c, path, w));
  fflush(w);
  rewind(w);
  static char buf[65536];
  size_t n = fread(buf, 1, sizeof buf - 1, w);
  buf[n] = 0;
  fclose(w);
  return strdup(buf);
}

static void test_round_trip_and_merge(void) {
  kiln_tune_cache_t a = {0}, b = {0}, m = {0};
  kiln_tune_record_t r1 = rec(0x1234abcd5678ef00ull, "drv 1", 4, 100, 80);
  kiln_tune_record_t r2 = rec(0x1ull, "drv 1", 8, 50, 50);
  CHECK_OK(kiln_tune_cache_put(&a, &r1, false));
  CHECK_OK(kiln_tune_cache_put(&a, &r2, false));
  CHECK_OK(kiln_tune_cache_write(&a, path_of("a.tsv")));
  kiln_tune_cache_t back = {0};
  char* w = read_warn(&back, path_of("a.tsv"));
  CHECK_MSG(w[0] == 0, "warnings on a file kiln wrote: %s", w);
  free(w);
  CHECK(back.n == 2 && back.skipped == 0);
  const kiln_tune_record_t* f = kiln_tune_cache_find(&back, &r1.key);
  CHECK(f && f->tiles.n == 8 && f->tiles.v[0] == 4 && f->tiles.v[5] == 128 && f->tuned_us == 80 &&
        f->default_us == 100);
  /* b: the same key measured faster, and another machine's driver */
  kiln_tune_record_t r1b = rec(0x1234abcd5678ef00ull, "drv 1", 2, 100, 60);
  kiln_tune_record_t r1c = rec(0x1234abcd5678ef00ull, "drv 2", 16, 100, 90);
  CHECK_OK(kiln_tune_cache_put(&b, &r1b, false));
  CHECK_OK(kiln_tune_cache_put(&b, &r1c, false));
  CHECK_OK(kiln_tune_cache_write(&b, path_of("b.tsv")));
  /* merging in either order keeps the faster record per key */
  for (int order = 0; order < 2; ++order) {
    kiln_tune_cache_free(&m);
    CHECK_OK(kiln_tune_cache_read(&m, path_of(order ? "b.tsv" : "a.tsv"), stderr));
    CHECK_OK(kiln_tune_cache_read(&m, path_of(order ? "a.tsv" : "b.tsv"), stderr));
    CHECK(m.n == 3);
    f = kiln_tune_cache_find(&m, &r1.key);
    CHECK(f && f->tuned_us == 60 && f->tiles.v[0] == 2);
    /* another driver's record is only near, never exact */
    kiln_tune_key_t k3 = r1.key;
    snprintf(k3.driver, sizeof k3.driver, "drv 3");
    CHECK(kiln_tune_cache_find(&m, &k3) == NULL);
    const kiln_tune_record_t* near = kiln_tune_cache_find_near(&m, &k3);
    CHECK(near && near->tuned_us == 60);
  }
  CHECK_OK(kiln_tune_cache_write(&m, path_of("m.tsv")));
  kiln_tune_cache_t again = {0};
  CHECK_OK(kiln_tune_cache_read(&again, path_of("m.tsv"), stderr));
  CHECK(again.n == 3 && again.skipped == 0);
  /* a replace put overwrites even when slower (kiln tune's fresh result) */
  kiln_tune_record_t slow = rec(0x1ull, "drv 1", 1, 50, 70);
  CHECK_OK(kiln_tune_cache_put(&again, &slow, true));
  CHECK(kiln_tune_cache_find(&again, &slow.key)->tiles.v[0] == 1);
  kiln_tune_cache_free(&a);
  kiln_tune_cache_free(&b);
  kiln_tune_cache_free(&m);
  kiln_tune_cache_free(&back);
  kiln_tune_cache_free(&again);
}

#define GOOD "00000000000000aa\topencl\topencl.conv.1\tdev X\tdrv\tdev\t8,32,16,1,1,128,8,4\t10.5\t9.25\n"

static void test_bad_lines(void) {
  static const char* bad[] = {
      "00000000000000aa\topencl\topencl.conv.1\tdev X\tdrv\tdev\t8,32,16,1,1,128,8,4\t10.5\n", /* 8 fields */
      "00000000000000aa\topencl\topencl.conv.1\tdev X\tdrv\tdev\t8,32\t10\t9\textra\n",      /* 10 fields */
      "0000000000000zaa\topencl\topencl.conv.1\tdev X\tdrv\tdev\t8\t10\t9\n",                 /* not hex */
      "aa\topencl\topencl.conv.1\tdev X\tdrv\tdev\t8\t10\t9\n",                               /* short fp */
      "00000000000000aa\tOpenCL!\topencl.conv.1\tdev X\tdrv\tdev\t8\t10\t9\n",                /* bad target */
      "00000000000000aa\topencl\topencl.conv.1\tdev X\tdrv\tdev\t-8,32\t10\t9\n",             /* negative tile */
      "00000000000000aa\topencl\topencl.conv.1\tdev X\tdrv\tdev\t8,+32\t10\t9\n",             /* sign */
      "00000000000000aa\topencl\topencl.conv.1\tdev X\tdrv\tdev\t99999999999999999999\t10\t9\n", /* huge */
      "00000000000000aa\topencl\topencl.conv.1\tdev X\tdrv\tdev\t1,2,3,4,5,6,7,8,9\t10\t9\n", /* 9 tiles */
      "00000000000000aa\topencl\topencl.conv.1\tdev X\tdrv\tdev\t8,,4\t10\t9\n",              /* empty tile */
      "00000000000000aa\topencl\topencl.conv.1\tdev X\tdrv\tdev\t8,\t10\t9\n",                /* trailing comma */
      "00000000000000aa\topencl\topencl.conv.1\tdev X\tdrv\tdev\t8\t1e400\t9\n",              /* inf time */
      "00000000000000aa\topencl\topencl.conv.1\tdev X\tdrv\tdev\t8\tnan\t9\n",                /* NaN time */
      "00000000000000aa\topencl\topencl.conv.1\tdev X\tdrv\tdev\t8\t10\t-9\n",                /* negative */
      "00000000000000aa\topencl\topencl.conv.1\tdev X\tdrv\tdev\t8\t10\t9ms\n",               /* unit */
      /* below the file's resolution: a merge would write it back as 0.000
       * (found by fuzz_tune) */
      "00000000000000aa\topencl\topencl.conv.1\tdev X\tdrv\tdev\t8\t10\t0.0004\n",
      "00000000000000aa\topencl\topencl.conv.1\tdev X\tdrv\tdev\t8\t1e-9\t10\n",
      "00000000000000aa\topencl\t\tdev X\tdrv\tdev\t8\t10\t9\n",                              /* empty space */
      "[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[{\"a\":[[[[[[[[[[[[]]]]]]]]]]]]}\n",   /* nesting */
      "{\"fingerprint\": \"00000000000000aa\", \"tiles\": [8, 32]}\n",                        /* JSON */
  };
  const size_t nb = sizeof bad / sizeof bad[0];
  /* good, then every bad line, then good again: both goods read, each bad
   * line named by its number */
  size_t cap = 4096 + nb * 256;
  char* text = malloc(cap);
  size_t n = 0;
  n += (size_t)snprintf(text + n, cap - n, "# a comment\n\n%s", GOOD);
  for (size_t i = 0; i < nb; ++i) n += (size_t)snprintf(text + n, cap - n, "%s", bad[i]);
  /* another fingerprint, CRLF line end */
  n += (size_t)snprintf(text + n, cap - n,
                        "00000000000000ab\topencl\topencl.conv.1\tdev X\tdrv\tdev\t4,16,4,1,1,64,2,0\t7\t6\r\n");
  write_file(path_of("bad.tsv"), text, n);
  free(text);
  kiln_tune_cache_t c = {0};
  char* w = read_warn(&c, path_of("bad.tsv"));
  CHECK_MSG(c.n == 2, "good records read around bad lines: %d", (int)c.n);
  /* a 0 tile is a value (a Winograd switch off, Vulkan's direct reads) */
  CHECK(c.n == 2 && c.r[1].tiles.n == 8 && c.r[1].tiles.v[7] == 0);
  CHECK_MSG(c.skipped == (int32_t)nb, "skipped %d of %d bad lines", (int)c.skipped, (int)nb);
  char want[600];
  snprintf(want, sizeof want, "%s:4: ", path_of("bad.tsv")); /* first bad line: line 4 */
  CHECK_MSG(strstr(w, want) != NULL, "warning names file and line: %s", w);
  CHECK(strstr(w, "ignored") != NULL);
  free(w);
  kiln_tune_cache_free(&c);
}

/* The smallest times read (the file's 0.001 us) survive a write and a
 * read: what kiln reads, `kiln tune --merge` writes back readable. */
static void test_time_resolution(void) {
  const char* line = "00000000000000aa\topencl\topencl.conv.1\tdev X\tdrv\tdev\t8\t0.0015\t0.001\n";
  write_file(path_of("res.tsv"), line, strlen(line));
  kiln_tune_cache_t c = {0}, back = {0};
  char* w = read_warn(&c, path_of("res.tsv"));
  CHECK_MSG(c.n == 1 && c.skipped == 0, "0.001 us read: %s", w);
  free(w);
  CHECK_OK(kiln_tune_cache_write(&c, path_of("res2.tsv")));
  w = read_warn(&back, path_of("res2.tsv"));
  CHECK_MSG(back.n == 1 && back.skipped == 0 && w[0] == 0, "written back: %s", w);
  CHECK(back.n == 1 && back.r[0].tuned_us == 0.001 && back.r[0].default_us >= 0.001);
  free(w);
  kiln_tune_cache_free(&c);
  kiln_tune_cache_free(&back);
}

static void test_hostile_files(void) {
  kiln_tune_cache_t c = {0};
  /* a 10 MB line between two good ones */
  size_t big = 10u << 20;
  char* text = malloc(big + 1024);
  size_t n = (size_t)snprintf(text, 1024, "%s", GOOD);
  memset(text + n, 'x', big);
  n += big;
  text[n++] = '\n';
  n += (size_t)snprintf(text + n, 1024, "%s", GOOD);
  write_file(path_of("long.tsv"), text, n);
  free(text);
  char* w = read_warn(&c, path_of("long.tsv"));
  CHECK(c.n == 1 && c.skipped == 1 && strstr(w, "longer than") != NULL);
  free(w);
  kiln_tune_cache_free(&c);
  /* NUL bytes, truncated last line (no newline), empty and 8-byte files */
  const char nul[] = "00000000000000aa\topencl\0\topencl.conv.1\tdev X\tdrv\tdev\t8\t10\t9\n";
  write_file(path_of("nul.tsv"), nul, sizeof nul - 1);
  w = read_warn(&c, path_of("nul.tsv"));
  CHECK(c.n == 0 && strstr(w, "NUL") != NULL);
  free(w);
  write_file(path_of("trunc.tsv"), GOOD, strlen(GOOD) - 3);
  w = read_warn(&c, path_of("trunc.tsv"));
  CHECK(c.n == 0 && c.skipped >= 1);
  free(w);
  write_file(path_of("empty.tsv"), "", 0);
  w = read_warn(&c, path_of("empty.tsv"));
  CHECK(c.n == 0 && w[0] == 0);
  free(w);
  write_file(path_of("eight.tsv"), "\x01\x02\x03\x04\xff\xfe\n\n", 8);
  w = read_warn(&c, path_of("eight.tsv"));
  CHECK(c.n == 0);
  free(w);
  /* not a regular file: a folder, a FIFO (must not block), a symlink, a
   * missing file: a warning each, an empty cache */
  w = read_warn(&c, dir);
  CHECK(c.n == 0 && strstr(w, "not a regular file") != NULL);
  free(w);
  const char* fifo = path_of("fifo.tsv");
  CHECK(mkfifo(fifo, 0600) == 0);
  w = read_warn(&c, fifo);
  CHECK(c.n == 0 && strstr(w, "not a regular file") != NULL);
  free(w);
  write_file(path_of("real.tsv"), GOOD, strlen(GOOD));
  CHECK(symlink(path_of("real.tsv"), path_of("link.tsv")) == 0);
  w = read_warn(&c, path_of("link.tsv"));
  CHECK(c.n == 0 && strstr(w, "symbolic link") != NULL);
  free(w);
  w = read_warn(&c, path_of("missing.tsv"));
  CHECK(c.n == 0 && strstr(w, "missing.tsv") != NULL);
  free(w);
  /* writing where it cannot: an error naming the path, not a crash */
  CHECK_ERR(kiln_tune_cache_write(&c, "/nonexistent-dir/x.tsv"), KILN_IO_ERROR, "/nonexistent-dir/x.tsv");
  kiln_tune_cache_free(&c);
}

static void test_space_and_fingerprint(void) {
  kiln_template_knob_t k = {.name = "tm"};
  kiln_template_knob_add(&k, 8);
  kiln_template_knob_add(&k, 2);
  kiln_template_knob_add(&k, 8);
  kiln_template_knob_add(&k, 4);
  CHECK(k.n == 3 && k.v[0] == 2 && k.v[1] == 4 && k.v[2] == 8);
  kiln_template_space_t sp = {.version = "x.1", .n_knobs = 1};
  sp.knobs[0] = k;
  int32_t idx[KILN_TEMPLATE_TILES_MAX];
  kiln_template_tiles_t t4 = {.n = 1, .v = {4}}, t5 = {.n = 1, .v = {5}}, t2n = {.n = 2, .v = {4, 4}};
  CHECK(kiln_template_space_index(&sp, &t4, idx) && idx[0] == 1);
  CHECK(!kiln_template_space_index(&sp, &t5, idx));
  CHECK(!kiln_template_space_index(&sp, &t2n, idx));

  kiln_template_t a;
  memset(&a, 0, sizeof a);
  a.kind = KILN_TEMPLATE_GEMM;
  a.gemm = (kiln_template_gemm_t){.M = 64, .N = 128, .K = 256, .batch = 1, .lda = 256, .ldb = 128, .ldy = 128,
                                  .alpha = 1, .n_params = 3, .roles = "ABY"};
  kiln_template_t b = a;
  b.tiles = (kiln_template_tiles_t){.n = 8, .v = {1, 2, 3, 4, 5, 6, 7, 8}};
  b.weights.buffer = 17; /* plan buffer indices do not count */
  CHECK(kiln_template_fingerprint(&a) == kiln_template_fingerprint(&b));
  b.gemm.K = 255;
  CHECK(kiln_template_fingerprint(&a) != kiln_template_fingerprint(&b));
  b = a;
  b.gemm.f16[0] = true;
  CHECK(kiln_template_fingerprint(&a) != kiln_template_fingerprint(&b));
  b = a;
  b.kind = KILN_TEMPLATE_MERGED;
  CHECK(kiln_template_fingerprint(&b) == 0);
  CHECK(!strcmp(kiln_template_kind_name(KILN_TEMPLATE_WINOGRAD), "winograd"));
}

int main(void) {
  snprintf(dir, sizeof dir, "/tmp/kiln_test_tune_cache_%ld", (long)getpid());
  mkdir(dir, 0700);
  RUN(test_round_trip_and_merge);
  RUN(test_bad_lines);
  RUN(test_time_resolution);
  RUN(test_hostile_files);
  RUN(test_space_and_fingerprint);
  char cmd[600];
  snprintf(cmd, sizeof cmd, "rm -rf '%s'", dir);
  if (system(cmd) != 0) fprintf(stderr, "could not remove %s\n", dir);
  return kiln_test_finish();
}
