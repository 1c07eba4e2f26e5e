/* The CPU loader's choice of compiler (runtime/cpu/cpu_loader.c): cc by
 * default; with KILN_CC=auto clang where it is on PATH and links OpenMP
 * code, else cc.
 *
 * - without KILN_CC the default options name cc;
 * - with the PATH's own compilers: the unit compiles and runs, with clang
 *   exactly when a `clang -fopenmp -shared` of this test builds, and a
 *   second load is a cache hit;
 * - (in a child process: the probe's answer is kept per process) a `clang`
 *   first on PATH that reports a version but cannot link OpenMP code: the
 *   loader falls back to cc, the unit runs, and a second load hits the
 *   cache under cc's key without asking that clang again.
 * In sanitizer builds the loader keeps cc (LSan's tracer crashes at exit on
 * libomp's threads): there cc is expected and the broken clang never asked.
 * KILN_TEST_NO_CPU=1 skips it (no native compiler). */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include "runtime/cpu/cpu_loader.h"
#include "testing.h"

extern const char kiln_cf_c_prelude[];

static const char unit[] =
    "void k_iota(void* const* a) {\n"
    "  float* y = a[0];\n"
    "  #pragma omp parallel for schedule(static)\n"
    "  for (int64_t i = 0; i < 64; i++) y[i] = (float)i * 0.5f;\n"
    "}\n";
static const char kEpilogue[] =
    "int kiln_abi_version(void) { return 1; }\nvoid kiln_set_threads(int n) { (void)n; }\n";

/* Loads the unit with the default options (no compiler named) from the
 * cache in |dir|; checks k_iota; *out_compiler: the compiler that ran ("" on
 * a cache hit). */
static bool load_run(const char* dir, bool* hit, char* out_compiler, size_t n) {
  size_t lp = strlen(kiln_cf_c_prelude), lu = strlen(unit), le = strlen(kEpilogue);
  char* text = malloc(lp + lu + le + 1);
  if (!text) return false;
  memcpy(text, kiln_cf_c_prelude, lp);
  memcpy(text + lp, unit, lu);
  memcpy(text + lp + lu, kEpilogue, le + 1);
  uint64_t parts[6] = {0, lp, lp, lu, lp + lu, le};
  kiln_program_code_t code = {.text = text, .text_len = lp + lu + le, .n_parts = 3, .parts = parts};
  kiln_cpu_options_t o;
  kiln_cpu_options_default(&o);
  o.cache_dir = dir;
  const char* names[] = {"k_iota"};
  kiln_cpu_module_t m;
  kiln_cpu_compile_stats_t st;
  memset(&st, 0, sizeof st);
  bool ok = CHECK_OK(kiln_cpu_module_load(&code, &o, names, 1, &m, &st));
  free(text);
  if (!ok) return false;
  float y[64] = {0};
  void* args[1] = {y};
  m.fns[0](args);
  bool right = true;
  for (int i = 0; i < 64; ++i) right = right && y[i] == (float)i * 0.5f;
  CHECK(right);
  kiln_cpu_module_unload(&m);
  *hit = st.cache_hit;
  snprintf(out_compiler, n, "%s", st.cache_hit ? "" : st.compiler);
  return right;
}

static void make_dir(char* buf, size_t n, const char* tag) {
  const char* tmp = getenv("TMPDIR");
  snprintf(buf, n, "%s/kiln-cc-%s-XXXXXX", tmp && *tmp ? tmp : "/tmp", tag);
  CHECK(mkdtemp(buf) != NULL);
}

static void remove_tree(const char* dir) {
  char cmd[1200];
  snprintf(cmd, sizeof cmd, "rm -rf '%s'", dir);
  CHECK(system(cmd) == 0);
}

/* Whether clang on PATH builds an OpenMP shared object (what the loader's
 * probe asks). */
static bool clang_links_openmp(const char* dir) {
  char c[1100], cmd[4000];
  snprintf(c, sizeof c, "%s/omp.c", dir);
  FILE* f = fopen(c, "w");
  if (!f) return false;
  fputs("#include <omp.h>\nint p(void) { int n = 0;\n#pragma omp parallel\n n = omp_get_num_threads();\n"
        " return n; }\n",
        f);
  fclose(f);
  snprintf(cmd, sizeof cmd, "clang -fopenmp -shared -fPIC -o '%s/omp.so' '%s' >/dev/null 2>&1", dir, c);
  return system(cmd) == 0;
}

/* Sanitizer builds keep cc (the loader's AUTO_CLANG_ALLOWED: LSan's tracer
 * crashes at exit on libomp's threads). */
#if defined(__SANITIZE_ADDRESS__)
#define SANITIZED 1
#elif defined(__has_feature)
#if __has_feature(address_sanitizer)
#define SANITIZED 1
#endif
#endif
#ifndef SANITIZED
#define SANITIZED 0
#endif

static void test_path_compilers(void) {
  char dir[1024], probe[1024];
  make_dir(dir, sizeof dir, "cache");
  make_dir(probe, sizeof probe, "probe");
  bool want_clang = !SANITIZED && clang_links_openmp(probe);
  bool hit = true;
  char cc[64];
  if (load_run(dir, &hit, cc, sizeof cc)) {
    CHECK(!hit);
    CHECK_MSG(strcmp(cc, want_clang ? "clang" : "cc") == 0, "compiled with '%s'", cc);
  }
  if (load_run(dir, &hit, cc, sizeof cc)) CHECK(hit);
  remove_tree(dir);
  remove_tree(probe);
}

/* The child's checks: a clang on PATH that cannot link OpenMP code. */
static int broken_clang_child(void) {
  char bin[1024], dir[1024], path[1100];
  make_dir(bin, sizeof bin, "bin");
  make_dir(dir, sizeof dir, "cache");
  snprintf(path, sizeof path, "%s/clang", bin);
  FILE* f = fopen(path, "w");
  if (!f) return 1;
  fprintf(f,
          "#!/bin/sh\ncase \"$*\" in *--version*) echo 'broken clang 0'; exit 0;; esac\n"
          "echo \"$*\" >> '%s/asked'\necho 'ld: cannot find -lomp' >&2\nexit 1\n",
          bin);
  fclose(f);
  chmod(path, 0755);
  const char* old = getenv("PATH");
  char* np = malloc(strlen(bin) + (old ? strlen(old) : 0) + 2);
  if (!np) return 1;
  sprintf(np, "%s:%s", bin, old ? old : "");
  setenv("PATH", np, 1);
  free(np);
  bool hit = true;
  char cc[64];
  if (load_run(dir, &hit, cc, sizeof cc)) {
    CHECK(!hit);
    CHECK_MSG(strcmp(cc, "cc") == 0, "compiled with '%s'", cc);
  }
  /* asked once (the probe); the second load neither asks it nor misses */
  snprintf(path, sizeof path, "%s/asked", bin);
  struct stat st0, st1;
  bool asked = stat(path, &st0) == 0;
  CHECK_MSG(asked == !SANITIZED, "the broken clang was %s probed", asked ? "" : "never");
  if (load_run(dir, &hit, cc, sizeof cc)) CHECK(hit);
  CHECK(!asked || (stat(path, &st1) == 0 && st1.st_size == st0.st_size));
  remove_tree(dir);
  remove_tree(bin);
  return kiln_test_finish();
}

static void test_broken_clang(void) {
  fflush(NULL);
  pid_t pid = fork();
  CHECK(pid >= 0);
  if (pid == 0) _exit(broken_clang_child());
  int status = 0;
  CHECK(waitpid(pid, &status, 0) == pid);
  CHECK_MSG(WIFEXITED(status) && WEXITSTATUS(status) == 0, "child status %d", status);
}

static void test_default_cc(void) {
  unsetenv("KILN_CC");
  kiln_cpu_options_t o;
  kiln_cpu_options_default(&o);
  CHECK_MSG(o.compiler && strcmp(o.compiler, "cc") == 0, "default compiler '%s'", o.compiler ? o.compiler : "(auto)");
  setenv("KILN_CC", "auto", 1);
  kiln_cpu_options_default(&o);
  CHECK_MSG(!o.compiler, "KILN_CC=auto gave '%s'", o.compiler ? o.compiler : "");
}

int main(void) {
  if (getenv("KILN_TEST_NO_CPU")) return 0;
  RUN(test_default_cc); /* leaves KILN_CC=auto for the tests below */
  RUN(test_broken_clang); /* first: a child forked later would inherit the probe's answer */
  RUN(test_path_compilers);
  return kiln_test_finish();
}
