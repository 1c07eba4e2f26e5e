/* The CPU loader's part objects in the code cache (runtime/cpu/cpu_loader.c):
 * a unit that differs from a cached one in one kernel compiles only the
 * part holding that kernel (counted by the build's parts_reused, not by
 * timing); part entries that are corrupt, foreign (a valid trailer around
 * something the linker refuses), symbolic links or FIFOs are recompiled
 * with a warning and the module runs correctly (BAD_INPUTS.md row 25); a
 * folder over its entry bound is trimmed, the new entries kept; the
 * ahead-of-time build shares the part entries; a CPU device asked for
 * reuse_code with the cache off (kiln tune's builds) keeps the parts in a
 * folder of its own, removed with the device. */
#define _GNU_SOURCE
#include <dirent.h>
#include <fcntl.h>
#include <ftw.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "kiln/runtime.h"
#include "runtime/code_cache.h"
#include "runtime/cpu/cpu_loader.h"
#include "runtime/device.h"
#include "runtime/device_registry.h"
#include "program_util.h"
#include "testing.h"

#define N_UNITS 16 /* 4 parts at 2 jobs (a part per 4 units, at most 3 per job) */

static char root[256];
static char dir[400]; /* the CPU cache folder of the tests */

static int rm_one(const char* path, const struct stat* st, int flag, struct FTW* ftw) {
  (void)st, (void)flag, (void)ftw;
  remove(path);
  return 0;
}

/* A unit of N_UNITS kernels, k_i storing vals[i]. */
typedef struct unit_s {
  char text[8192];
  uint64_t parts[2 * (N_UNITS + 2)];
  kiln_program_code_t code;
} unit_t;

static void make_unit(unit_t* u, const int* vals) {
  /* every part has the prelude, part 0 the epilogue */
  size_t n = (size_t)snprintf(u->text, sizeof u->text, "static inline float kiln_val(int v) { return (float)v; }\n");
  u->parts[0] = 0, u->parts[1] = n;
  for (int i = 0; i < N_UNITS; ++i) {
    size_t off = n;
    n += (size_t)snprintf(u->text + n, sizeof u->text - n,
                          "void k_%d(void* const* args) { ((float*)args[0])[0] = kiln_val(%d); }\n", i, vals[i]);
    u->parts[2 * (i + 1)] = off, u->parts[2 * (i + 1) + 1] = n - off;
  }
  size_t off = n;
  n += (size_t)snprintf(u->text + n, sizeof u->text - n,
                        "int kiln_abi_version(void) { return 1; }\n"
                        "void kiln_set_threads(int n) { (void)n; }\n");
  u->parts[2 * (N_UNITS + 1)] = off, u->parts[2 * (N_UNITS + 1) + 1] = n - off;
  memset(&u->code, 0, sizeof u->code);
  u->code.text = u->text;
  u->code.text_len = n;
  u->code.n_parts = N_UNITS + 2;
  u->code.parts = u->parts;
}

/* Loads the unit of |vals| and checks every kernel's value. */
static bool load_and_run(const int* vals, kiln_cpu_compile_stats_t* st) {
  unit_t* u = malloc(sizeof *u);
  CHECK(u != NULL);
  if (!u) return false;
  make_unit(u, vals);
  char names_buf[N_UNITS][16];
  const char* names[N_UNITS];
  for (int i = 0; i < N_UNITS; ++i) {
    snprintf(names_buf[i], sizeof names_buf[i], "k_%d", i);
    names[i] = names_buf[i];
  }
  kiln_cpu_options_t o;
  kiln_cpu_options_default(&o);
  o.flags = "-O0";
  o.cache_dir = dir;
  kiln_cpu_module_t m;
  memset(st, 0, sizeof *st);
  bool ok = CHECK_OK(kiln_cpu_module_load(&u->code, &o, names, N_UNITS, &m, st));
  free(u);
  if (!ok) return false;
  for (int i = 0; i < N_UNITS; ++i) {
    float out = -1.0f;
    void* args[1] = {&out};
    m.fns[i]((void* const*)args);
    CHECK_MSG(out == (float)vals[i], "k_%d gave %g, not %d", i, out, vals[i]);
    ok &= out == (float)vals[i];
  }
  kiln_cpu_module_unload(&m);
  return ok;
}

/* The part entries (<key>.o) of the folder, at most |cap| names. */
static int part_entries(char (*names)[96], int cap) {
  DIR* d = opendir(dir);
  int n = 0;
  struct dirent* ent;
  while (d && (ent = readdir(d))) {
    size_t l = strlen(ent->d_name);
    if (l == 34 && strcmp(ent->d_name + 32, ".o") == 0) {
      if (n < cap) snprintf(names[n], sizeof names[n], "%s", ent->d_name);
      n++;
    }
  }
  if (d) closedir(d);
  return n;
}

/* load_and_run with stderr into a file; true when that output holds |want|. */
static bool stderr_has(const int* vals, kiln_cpu_compile_stats_t* st, const char* want, bool* ran) {
  char path[300];
  snprintf(path, sizeof path, "%.250s/stderr.txt", root);
  fflush(stderr);
  int saved = dup(2);
  int fd = open(path, O_WRONLY | O_CREAT | O_TRUNC, 0600);
  dup2(fd, 2);
  close(fd);
  *ran = load_and_run(vals, st);
  fflush(stderr);
  dup2(saved, 2);
  close(saved);
  char buf[4096] = {0};
  FILE* f = fopen(path, "rb");
  size_t n = f ? fread(buf, 1, sizeof buf - 1, f) : 0;
  if (f) fclose(f);
  buf[n] = 0;
  fputs(buf, stderr); /* shown in the test's log */
  return strstr(buf, want) != NULL;
}

static int vals_a[N_UNITS], vals_b[N_UNITS];

static void test_one_kernel_changed(void) {
  kiln_cpu_compile_stats_t s1, s2, s3;
  if (!load_and_run(vals_a, &s1)) return;
  CHECK(!s1.cache_hit && s1.parts == 4 && s1.parts_reused == 0);
  char names[8][96];
  CHECK_MSG(part_entries(names, 8) == 4, "%d part entries", part_entries(names, 8));
  /* one kernel changed: its part compiles, the three others are linked */
  memcpy(vals_b, vals_a, sizeof vals_b);
  vals_b[5] = 105;
  if (!load_and_run(vals_b, &s2)) return;
  CHECK(!s2.cache_hit);
  CHECK_MSG(s2.parts == 4 && s2.parts_reused == 3, "%d of %d parts reused", (int)s2.parts_reused, (int)s2.parts);
  /* two changed: at most two parts compile */
  vals_b[11] = 111;
  if (!load_and_run(vals_b, &s3)) return;
  CHECK_MSG(s3.parts_reused >= 2 && s3.parts_reused <= 3, "%d parts reused", (int)s3.parts_reused);
  /* the first unit again: the whole object's entry */
  CHECK(load_and_run(vals_a, &s3) && s3.cache_hit);
}

/* Every part entry spoiled by |how|; a new variant (k_0 changed, so no
 * whole-object hit) must compile those parts again and run. */
static void spoil_all(int how) {
  char names[64][96];
  int n = part_entries(names, 64);
  kiln_code_cache_t c;
  CHECK(kiln_code_cache_open(&c, "cpu", dir));
  for (int i = 0; i < n && i < 64; ++i) {
    char path[600];
    snprintf(path, sizeof path, "%.400s/%.95s", dir, names[i]);
    if (how == 0) { /* one byte flipped: the checksum refuses it */
      int fd = open(path, O_RDWR);
      unsigned char b = 0;
      CHECK(pread(fd, &b, 1, 64) == 1);
      b ^= 0x5a;
      CHECK(pwrite(fd, &b, 1, 64) == 1);
      close(fd);
    } else if (how == 1) { /* whole, but not an object: the link refuses it */
      static const char junk[] = "not an object file\n";
      CHECK(kiln_code_cache_write(&c, names[i], junk, sizeof junk - 1));
    } else if (how == 2) {
      CHECK(unlink(path) == 0 && symlink("/dev/zero", path) == 0);
    } else {
      CHECK(unlink(path) == 0 && mkfifo(path, 0600) == 0);
    }
  }
}

static void test_spoiled_parts(void) {
  static const char* const want[] = {"checksum mismatch", "the link refused", "symbolic link",
                                     "not a regular file"};
  for (int how = 0; how < 4; ++how) {
    int vals[N_UNITS];
    memcpy(vals, vals_a, sizeof vals);
    vals[0] = 1000 + how;
    kiln_cpu_compile_stats_t st;
    bool ran = false;
    /* the last variant's entries were rewritten by its build: spoil them */
    spoil_all(how);
    bool warned = stderr_has(vals, &st, want[how], &ran);
    CHECK_MSG(ran && warned, "spoil %d: ran %d, warning '%s' %d", how, ran, want[how], warned);
    CHECK_MSG(!st.cache_hit && st.parts_reused == 0, "spoil %d: %d reused", how, (int)st.parts_reused);
    /* they were stored again: the next variant reuses all but its own part */
    vals[0] = 2000 + how;
    CHECK(load_and_run(vals, &st) && st.parts_reused == 3);
  }
}

/* Part entries count against the folder's bound like whole objects: a
 * folder of 2100 old entries is trimmed to 3/4 of 2048 by a build, and the
 * build's new part entries stay. */
static void test_bound(void) {
  char path[600];
  for (int i = 0; i < 2100; ++i) {
    snprintf(path, sizeof path, "%s/old%04d.o", dir, i);
    FILE* f = fopen(path, "wb");
    if (f) fclose(f);
    struct timespec ts[2] = {{1000000 + i, 0}, {1000000 + i, 0}};
    utimensat(AT_FDCWD, path, ts, 0);
  }
  int vals[N_UNITS];
  memcpy(vals, vals_a, sizeof vals);
  vals[7] = 707;
  kiln_cpu_compile_stats_t st;
  if (!load_and_run(vals, &st)) return;
  CHECK(!st.cache_hit);
  DIR* d = opendir(dir);
  int files = 0, old = 0;
  struct dirent* ent;
  while (d && (ent = readdir(d))) {
    if (ent->d_name[0] == '.') continue;
    files++;
    old += strncmp(ent->d_name, "old", 3) == 0;
  }
  if (d) closedir(d);
  CHECK_MSG(files <= 2048 * 3 / 4 + 8 && old > 1000, "%d files (%d old) after the build", files, old);
  snprintf(path, sizeof path, "%s/old0000.o", dir);
  CHECK(access(path, F_OK) != 0); /* the oldest went */
  /* the parts of this build stayed: the same unit with k_7 again reuses all
   * parts but k_7's */
  vals[7] = 708;
  CHECK(load_and_run(vals, &st) && st.parts_reused == 3);
}

/* kiln compile's ahead-of-time build reads and writes the same entries. */
static void test_aot_shares_parts(void) {
  unit_t* u = malloc(sizeof *u);
  CHECK(u != NULL);
  if (!u) return;
  setenv("KILN_CACHE_DIR", root, 1); /* its "cpu" folder is |dir| */
  char so[512];
  snprintf(so, sizeof so, "%s/aot.so", root);
  int vals[N_UNITS];
  memcpy(vals, vals_a, sizeof vals);
  vals[3] = 303;
  make_unit(u, vals);
  kiln_cpu_compile_stats_t st;
  memset(&st, 0, sizeof st);
  CHECK_OK(kiln_cpu_build_object_stats(&u->code, "cc", "-O1", so, &st));
  CHECK(st.parts == 4 && st.parts_reused == 0);
  vals[3] = 304;
  make_unit(u, vals);
  memset(&st, 0, sizeof st);
  CHECK_OK(kiln_cpu_build_object_stats(&u->code, "cc", "-O1", so, &st));
  CHECK_MSG(st.parts_reused == 3, "%d parts reused", (int)st.parts_reused);
  const char* names[] = {"k_3"};
  kiln_cpu_module_t m;
  if (CHECK_OK(kiln_cpu_module_load_so(so, names, 1, &m))) {
    float out = 0.0f;
    void* args[1] = {&out};
    m.fns[0]((void* const*)args);
    CHECK(out == 304.0f);
    kiln_cpu_module_unload(&m);
  }
  unsetenv("KILN_CACHE_DIR");
  free(u);
}


/* The device's build of the unit of |vals| with |bo|; *out_reused from its
 * report ("N reused"), -1 when it has none. */
static void device_build(kiln_device_t* d, const int* vals, const kiln_device_build_options_t* bo, int* out_reused) {
  *out_reused = -1;
  unit_t* u = malloc(sizeof *u);
  kiln_program_t* p = NULL;
  CHECK(u != NULL);
  if (!u || !CHECK_OK(kiln_program_create(kiln_allocator_system(), &p))) {
    free(u);
    return;
  }
  make_unit(u, vals);
  p->n_kernels = N_UNITS;
  p->kernels = pu_alloc(p, sizeof(kiln_program_kernel_t) * N_UNITS);
  memset(p->kernels, 0, sizeof(kiln_program_kernel_t) * N_UNITS);
  for (int i = 0; i < N_UNITS; ++i) {
    char nm[16];
    snprintf(nm, sizeof nm, "k_%d", i);
    p->kernels[i].name = pu_str(p, nm);
  }
  p->code = u->code;
  kiln_device_executable_t* e = NULL;
  if (CHECK_OK(d->vt->executable_create(d, p, bo, &e))) {
    char* text = NULL;
    size_t len = 0;
    FILE* f = open_memstream(&text, &len);
    const kiln_device_api_t* api = kiln_device_api_find("cpu");
    if (f && api && api->executable_report) api->executable_report(e, f);
    if (f) fclose(f);
    const char* r = text ? strstr(text, " reused)") : NULL;
    while (r && r > text && r[-1] >= '0' && r[-1] <= '9') --r;
    if (r) *out_reused = atoi(r);
    free(text);
    if (d->vt->executable_destroy) d->vt->executable_destroy(d, e);
  }
  memset(&p->code, 0, sizeof p->code); /* |u|'s */
  kiln_program_destroy(p);
  free(u);
}

/* The memo folders (kiln-cpu-memo-*) in |root|. */
static int memo_dirs(void) {
  DIR* d = opendir(root);
  int n = 0;
  struct dirent* ent;
  while (d && (ent = readdir(d))) n += strncmp(ent->d_name, "kiln-cpu-memo-", 14) == 0;
  if (d) closedir(d);
  return n;
}

static void test_device_memo(void) {
  setenv("TMPDIR", root, 1);
  kiln_device_t* d = NULL;
  if (!CHECK_OK(kiln_device_open("cpu", NULL, kiln_allocator_system(), &d))) return;
  kiln_device_build_options_t bo = {"", NULL, 1, NULL, true};
  int vals[N_UNITS], reused = -1;
  memcpy(vals, vals_a, sizeof vals);
  vals[2] = 4202; /* not in the shared cache folder */
  device_build(d, vals, &bo, &reused);
  CHECK_MSG(reused == 0, "%d reused", reused);
  CHECK(memo_dirs() == 1);
  vals[9] = 4209; /* one kernel changed: the others' parts come from the memo */
  device_build(d, vals, &bo, &reused);
  CHECK_MSG(reused == 3, "%d reused", reused);
  /* without reuse_code, the cache off means nothing is kept */
  bo.reuse_code = false;
  vals[9] = 4210;
  device_build(d, vals, &bo, &reused);
  CHECK_MSG(reused == 0, "%d reused", reused);
  kiln_device_release(d);
  CHECK(memo_dirs() == 0);
  unsetenv("TMPDIR");
}

int main(void) {
  const char* tmp = getenv("TMPDIR");
  snprintf(root, sizeof root, "%s/kiln-test-parts-XXXXXX", tmp && *tmp ? tmp : "/tmp");
  if (!mkdtemp(root)) {
    perror("mkdtemp");
    return 1;
  }
  snprintf(dir, sizeof dir, "%s/cpu", root);
  setenv("KILN_CPU_JOBS", "2", 1);
  for (int i = 0; i < N_UNITS; ++i) vals_a[i] = i;
  RUN(test_one_kernel_changed);
  RUN(test_spoiled_parts);
  RUN(test_bound);
  RUN(test_aot_shares_parts);
  RUN(test_device_memo);
  nftw(root, rm_one, 16, FTW_DEPTH | FTW_PHYS);
  return kiln_test_finish();
}
