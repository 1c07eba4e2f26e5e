/* The code cache (runtime/code_cache.h) against the faults of BAD_INPUTS.md
 * row 25: entries that are FIFOs, symbolic links, truncated or corrupt; an
 * unwritable folder; KILN_CACHE_DIR naming a file; two writers of one key.
 * Also folder resolution, and the CPU loader's use of the cache: a
 * truncated shared object is rebuilt, never loaded. */
#define _GNU_SOURCE
#include <dirent.h>
#include <fcntl.h>
#include <ftw.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "runtime/code_cache.h"
#include "runtime/cpu/cpu_loader.h"
#include "testing.h"

static char root[256];

static int rm_one(const char* path, const struct stat* st, int flag, struct FTW* ftw) {
  (void)st;
  (void)flag;
  (void)ftw;
  chmod(path, 0700); /* an unwritable folder of a test can still be emptied */
  return remove(path);
}

static void rm_tree(const char* path) { nftw(path, rm_one, 16, FTW_DEPTH | FTW_PHYS); }

/* A cache on the folder <root>/<sub>. */
static bool open_at(kiln_code_cache_t* c, const char* sub) {
  char dir[400];
  snprintf(dir, sizeof dir, "%s/%s", root, sub);
  return kiln_code_cache_open(c, "test", dir);
}

static void entry_path(const kiln_code_cache_t* c, const char* name, char* out, size_t n) {
  CHECK(kiln_code_cache_path(c, name, out, n));
}

static void test_round_trip(void) {
  kiln_code_cache_t c;
  CHECK(open_at(&c, "rt"));
  uint8_t* got = NULL;
  size_t len = 0;
  CHECK(kiln_code_cache_read(&c, "a.bin", &got, &len) == KILN_CODE_CACHE_MISS && !got);
  const char msg[] = "compiled code";
  CHECK(kiln_code_cache_write(&c, "a.bin", msg, sizeof msg));
  CHECK(kiln_code_cache_read(&c, "a.bin", &got, &len) == KILN_CODE_CACHE_HIT);
  CHECK(got && len == sizeof msg && memcmp(got, msg, len) == 0);
  free(got);
  CHECK(kiln_code_cache_check(&c, "a.bin") == KILN_CODE_CACHE_HIT);
  /* an empty payload is an entry too */
  CHECK(kiln_code_cache_write(&c, "empty", "", 0));
  CHECK(kiln_code_cache_read(&c, "empty", &got, &len) == KILN_CODE_CACHE_HIT && len == 0);
  free(got);
  /* "" turns the cache off: nothing is read or written */
  kiln_code_cache_t off;
  CHECK(!kiln_code_cache_open(&off, "test", ""));
  CHECK(!kiln_code_cache_write(&off, "a.bin", msg, sizeof msg));
  CHECK(kiln_code_cache_read(&off, "a.bin", &got, &len) == KILN_CODE_CACHE_MISS);
}

/* Opening a FIFO for reading would wait for a writer: the read must return
 * at once, rejecting it. */
static void test_fifo_entry(void) {
  kiln_code_cache_t c;
  CHECK(open_at(&c, "fifo"));
  char path[1024];
  entry_path(&c, "x.bin", path, sizeof path);
  CHECK(mkfifo(path, 0600) == 0);
  uint8_t* got = NULL;
  size_t len = 0;
  time_t t0 = time(NULL);
  CHECK(kiln_code_cache_read(&c, "x.bin", &got, &len) == KILN_CODE_CACHE_REJECTED && !got);
  CHECK(kiln_code_cache_check(&c, "x.bin") == KILN_CODE_CACHE_REJECTED);
  CHECK(time(NULL) - t0 < 5);
  /* a write replaces it with a regular entry */
  CHECK(kiln_code_cache_write(&c, "x.bin", "ok", 2));
  CHECK(kiln_code_cache_check(&c, "x.bin") == KILN_CODE_CACHE_HIT);
}

static void test_symlink_entry(void) {
  kiln_code_cache_t c;
  CHECK(open_at(&c, "link"));
  CHECK(kiln_code_cache_write(&c, "real.bin", "payload", 7));
  char real[1024], link[1024];
  entry_path(&c, "real.bin", real, sizeof real);
  entry_path(&c, "link.bin", link, sizeof link);
  CHECK(symlink(real, link) == 0);
  uint8_t* got = NULL;
  size_t len = 0;
  /* even a link to a valid entry is not followed */
  CHECK(kiln_code_cache_read(&c, "link.bin", &got, &len) == KILN_CODE_CACHE_REJECTED && !got);
  /* a dangling one neither */
  entry_path(&c, "dangling.bin", link, sizeof link);
  CHECK(symlink("/nonexistent/kiln", link) == 0);
  CHECK(kiln_code_cache_check(&c, "dangling.bin") == KILN_CODE_CACHE_REJECTED);
}

static void test_truncated_and_corrupt(void) {
  kiln_code_cache_t c;
  CHECK(open_at(&c, "trunc"));
  uint8_t data[4096];
  for (size_t i = 0; i < sizeof data; ++i) data[i] = (uint8_t)(i * 7);
  char path[1024];
  entry_path(&c, "e.bin", path, sizeof path);
  uint8_t* got = NULL;
  size_t len = 0;
  /* cut at the end, in the payload, to nothing; then a flipped byte */
  const off_t cuts[] = {sizeof data + 23, sizeof data / 2, 3, 0};
  for (int i = 0; i < 4; ++i) {
    CHECK(kiln_code_cache_write(&c, "e.bin", data, sizeof data));
    CHECK(truncate(path, cuts[i]) == 0);
    CHECK_MSG(kiln_code_cache_read(&c, "e.bin", &got, &len) == KILN_CODE_CACHE_REJECTED && !got,
              "cut at %lld accepted", (long long)cuts[i]);
  }
  CHECK(kiln_code_cache_write(&c, "e.bin", data, sizeof data));
  FILE* f = fopen(path, "r+b");
  CHECK(f != NULL);
  if (f) {
    fseek(f, 100, SEEK_SET);
    fputc(data[100] ^ 0x5a, f);
    fclose(f);
  }
  CHECK(kiln_code_cache_read(&c, "e.bin", &got, &len) == KILN_CODE_CACHE_REJECTED && !got);
  CHECK(kiln_code_cache_check(&c, "e.bin") == KILN_CODE_CACHE_REJECTED);
  /* padding after a valid entry is caught by the length */
  CHECK(kiln_code_cache_write(&c, "e.bin", data, sizeof data));
  f = fopen(path, "ab");
  if (f) {
    fputs("tail", f);
    fclose(f);
  }
  CHECK(kiln_code_cache_check(&c, "e.bin") == KILN_CODE_CACHE_REJECTED);
  /* rewritten, it is good again */
  CHECK(kiln_code_cache_write(&c, "e.bin", data, sizeof data));
  CHECK(kiln_code_cache_read(&c, "e.bin", &got, &len) == KILN_CODE_CACHE_HIT);
  CHECK(len == sizeof data && got && memcmp(got, data, len) == 0);
  free(got);
}

/* A folder the cache cannot write turns it off with a warning: it never
 * fails the caller. Root ignores permission bits, so /proc/self (which no
 * one can create files in) stands in for an unwritable folder too. */
static void test_unwritable_folder(void) {
  kiln_code_cache_t c;
  char dir[400];
  snprintf(dir, sizeof dir, "%s/ro", root);
  CHECK(mkdir(dir, 0700) == 0);
  CHECK(chmod(dir, 0500) == 0);
  if (geteuid() != 0) CHECK(!kiln_code_cache_open(&c, "test", dir));
  CHECK(!kiln_code_cache_open(&c, "test", "/proc/self"));
  CHECK(c.dir[0] == 0);
  CHECK(!kiln_code_cache_write(&c, "a.bin", "x", 1));
  /* a folder others can write is not trusted */
  snprintf(dir, sizeof dir, "%s/shared", root);
  CHECK(mkdir(dir, 0700) == 0);
  CHECK(chmod(dir, 0777) == 0);
  CHECK(!kiln_code_cache_open(&c, "test", dir));
  /* a write into a folder that became unwritable after opening warns */
  CHECK(open_at(&c, "gone"));
  char gone[400];
  snprintf(gone, sizeof gone, "%s/gone", root);
  CHECK(rmdir(gone) == 0);
  CHECK(!kiln_code_cache_write(&c, "a.bin", "x", 1));
}

static void test_resolution(void) {
  char want[600], file[400];
  kiln_code_cache_t c;
  setenv("KILN_CACHE_DIR", root, 1);
  CHECK(kiln_code_cache_open(&c, "vulkan", NULL));
  snprintf(want, sizeof want, "%s/vulkan", root);
  CHECK_MSG(strcmp(c.dir, want) == 0, "dir '%s', want '%s'", c.dir, want);
  /* XDG_CACHE_HOME counts for every kind (the Vulkan cache used to skip it) */
  unsetenv("KILN_CACHE_DIR");
  char xdg[400];
  snprintf(xdg, sizeof xdg, "%s/xdg", root);
  setenv("XDG_CACHE_HOME", xdg, 1);
  const char* kinds[] = {"cpu", "opencl", "vulkan"};
  for (int i = 0; i < 3; ++i) {
    CHECK(kiln_code_cache_open(&c, kinds[i], NULL));
    snprintf(want, sizeof want, "%s/kiln/%s", xdg, kinds[i]);
    CHECK_MSG(strcmp(c.dir, want) == 0, "dir '%s', want '%s'", c.dir, want);
  }
  unsetenv("XDG_CACHE_HOME");
  char* home = getenv("HOME") ? strdup(getenv("HOME")) : NULL;
  setenv("HOME", root, 1);
  CHECK(kiln_code_cache_open(&c, "opencl", NULL));
  snprintf(want, sizeof want, "%s/.cache/kiln/opencl", root);
  CHECK_MSG(strcmp(c.dir, want) == 0, "dir '%s', want '%s'", c.dir, want);
  if (home) setenv("HOME", home, 1);
  else unsetenv("HOME");
  free(home);
  /* KILN_CACHE_DIR naming a file: off with a warning */
  snprintf(file, sizeof file, "%s/a-file", root);
  FILE* f = fopen(file, "wb");
  if (f) fclose(f);
  setenv("KILN_CACHE_DIR", file, 1);
  CHECK(!kiln_code_cache_open(&c, "cpu", NULL));
  unsetenv("KILN_CACHE_DIR");
}

typedef struct writer_s {
  kiln_code_cache_t* c;
  uint8_t fill;
  int rounds;
} writer_t;

static void* writer_main(void* arg) {
  writer_t* w = arg;
  size_t n = 256 << 10;
  uint8_t* data = malloc(n);
  if (!data) return NULL;
  memset(data, w->fill, n);
  for (int i = 0; i < w->rounds; ++i) kiln_code_cache_write(w->c, "key.bin", data, n);
  free(data);
  return NULL;
}

/* Two writers of one key while a reader reads it: every read sees a whole
 * entry of one writer (or none yet), never a mix or a part. */
static void test_two_writers(void) {
  kiln_code_cache_t c;
  CHECK(open_at(&c, "race"));
  writer_t w[2] = {{&c, 0x11, 40}, {&c, 0x22, 40}};
  pthread_t t[2];
  for (int i = 0; i < 2; ++i) CHECK(pthread_create(&t[i], NULL, writer_main, &w[i]) == 0);
  int bad = 0, hits = 0;
  for (int r = 0; r < 200; ++r) {
    uint8_t* got = NULL;
    size_t len = 0;
    kiln_code_cache_result_t res = kiln_code_cache_read(&c, "key.bin", &got, &len);
    if (res == KILN_CODE_CACHE_REJECTED) ++bad;
    if (res == KILN_CODE_CACHE_HIT) {
      ++hits;
      bool same = len == (256u << 10) && (got[0] == 0x11 || got[0] == 0x22);
      for (size_t i = 1; same && i < len; ++i) same = got[i] == got[0];
      bad += !same;
    }
    free(got);
  }
  for (int i = 0; i < 2; ++i) pthread_join(t[i], NULL);
  CHECK_MSG(bad == 0, "%d of 200 reads saw a broken entry (%d hits)", bad, hits);
  CHECK(kiln_code_cache_check(&c, "key.bin") == KILN_CODE_CACHE_HIT);
  /* no temporary files left behind: the folder holds the entry alone */
  DIR* d = opendir(c.dir);
  int files = 0;
  struct dirent* ent;
  while (d && (ent = readdir(d))) files += ent->d_name[0] != '.';
  if (d) closedir(d);
  CHECK_MSG(files == 1, "%d files in %s", files, c.dir);
}

/* ---- the CPU loader over the cache ------------------------------------- */

static const char cpu_text[] =
    "int kiln_abi_version(void) { return 1; }\n"
    "void kiln_set_threads(int n) { (void)n; }\n"
    "void k_answer(void* const* args) { ((float*)args[0])[0] = 42.0f; }\n"
    "\n";

static void cpu_code(kiln_program_code_t* code, uint64_t parts[6]) {
  size_t prelude = strstr(cpu_text, "void k_answer") - cpu_text;
  size_t unit_end = strlen(cpu_text) - 1;
  parts[0] = 0, parts[1] = prelude;
  parts[2] = prelude, parts[3] = unit_end - prelude;
  parts[4] = unit_end, parts[5] = 1;
  memset(code, 0, sizeof *code);
  code->text = (char*)cpu_text;
  code->text_len = strlen(cpu_text);
  code->n_parts = 3;
  code->parts = parts;
}

static bool cpu_load_and_run(const kiln_cpu_options_t* o, kiln_cpu_compile_stats_t* st) {
  kiln_program_code_t code;
  uint64_t parts[6];
  cpu_code(&code, parts);
  const char* names[] = {"k_answer"};
  kiln_cpu_module_t m;
  memset(st, 0, sizeof *st);
  if (!CHECK_OK(kiln_cpu_module_load(&code, o, names, 1, &m, st))) return false;
  float out = 0.0f;
  void* args[1] = {&out};
  m.fns[0]((void* const*)args);
  kiln_cpu_module_unload(&m);
  CHECK(out == 42.0f);
  return out == 42.0f;
}

static void test_cpu_loader(void) {
  kiln_cpu_options_t o;
  kiln_cpu_options_default(&o);
  o.flags = "-O0";
  char dir[400];
  snprintf(dir, sizeof dir, "%s/cpu", root);
  o.cache_dir = dir;
  kiln_cpu_compile_stats_t s1, s2, s3;
  if (!cpu_load_and_run(&o, &s1) || !cpu_load_and_run(&o, &s2)) return;
  CHECK(!s1.cache_hit && s2.cache_hit && strcmp(s1.so_path, s2.so_path) == 0);
  /* A truncated object must not be dlopen'ed (it would SIGBUS on first
   * touch of a missing page): it is rejected and rebuilt. */
  struct stat st;
  CHECK(stat(s1.so_path, &st) == 0);
  CHECK(truncate(s1.so_path, st.st_size / 2) == 0);
  if (!cpu_load_and_run(&o, &s3)) return;
  CHECK(!s3.cache_hit);
  CHECK(cpu_load_and_run(&o, &s3) && s3.cache_hit);
  /* A FIFO or a symlink in the object's place: rejected, rebuilt. */
  CHECK(unlink(s1.so_path) == 0);
  CHECK(mkfifo(s1.so_path, 0600) == 0);
  CHECK(cpu_load_and_run(&o, &s3) && !s3.cache_hit);
  CHECK(unlink(s1.so_path) == 0);
  CHECK(symlink("/dev/zero", s1.so_path) == 0);
  CHECK(cpu_load_and_run(&o, &s3) && !s3.cache_hit);
  /* Unusable caches are warnings, never errors: KILN_CACHE_DIR naming a
   * file, an unwritable folder. */
  char file[400];
  snprintf(file, sizeof file, "%s/a-file", root);
  FILE* f = fopen(file, "wb");
  if (f) fclose(f);
  o.cache_dir = NULL;
  setenv("KILN_CACHE_DIR", file, 1);
  CHECK(cpu_load_and_run(&o, &s3) && !s3.cache_hit);
  unsetenv("KILN_CACHE_DIR");
  o.cache_dir = "/proc/self";
  CHECK(cpu_load_and_run(&o, &s3) && !s3.cache_hit);
}

int main(void) {
  const char* tmp = getenv("TMPDIR");
  snprintf(root, sizeof root, "%s/kiln-test-cache-XXXXXX", tmp && *tmp ? tmp : "/tmp");
  if (!mkdtemp(root)) {
    perror("mkdtemp");
    return 1;
  }
  RUN(test_round_trip);
  RUN(test_fifo_entry);
  RUN(test_symlink_entry);
  RUN(test_truncated_and_corrupt);
  RUN(test_unwritable_folder);
  RUN(test_resolution);
  RUN(test_two_writers);
  RUN(test_cpu_loader);
  rm_tree(root);
  return kiln_test_finish();
}
