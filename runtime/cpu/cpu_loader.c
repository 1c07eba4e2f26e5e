/* The CPU loader (see cpu_loader.h): a module's C unit -> shared object ->
 * loaded kernels, with an on-disk cache.
 *
 * The cache key is a 128-bit hash (two FNV-1a-64 lanes) of the source, the
 * compiler command, the flags, the compiler's `--version` output (run once
 * per process per compiler) and the CPU's identity (model and feature flags,
 * because -march=native code from one machine may not run on another).
 * Objects live in the code cache's "cpu" folder (runtime/code_cache.h) as
 * <key>.so entries: a whole, loadable entry is a hit and no compiler runs; a
 * truncated or corrupt one is rejected before dlopen and rebuilt. A unit
 * compiled as parts also leaves each part's object as a <key>.o entry (keyed
 * by the part's text), which a later unit with that part links instead of
 * compiling it (build_so).
 *
 * The compiler runs through posix_spawnp (no shell: flags are split on
 * whitespace), with stdout+stderr to a log file and LC_ALL=C so messages are
 * ASCII. Sources and objects are written under temporary names in the cache
 * folder and committed into place, so concurrent compiles of the same key
 * (threads or processes) never see a half-written file. */
#define _GNU_SOURCE
#include <dlfcn.h>
#include <link.h>
#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <spawn.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "runtime/cpu/cpu_loader.h"
#include "runtime/plugin.h"
#include "runtime/code_cache.h"
#include "runtime/progress.h"

extern char** environ;

/* -fno-math-errno changes no result (only errno): it lets the compiler
 * inline sqrt, CSE and hoist math calls, and vectorize more loops. */
#define DEFAULT_FLAGS "-O3 -march=native -fopenmp -fno-math-errno"
#define ABI_TAG "kiln-cpu-abi-1"
#define MAX_LOG_SHOWN 3000

/* Environment overrides of the defaults (for experiments and debugging):
 * KILN_CC compiler, KILN_CPU_FLAGS flags, KILN_CPU_DUMP dump directory. */
double kiln_cpu_now(void) {
  struct timespec t;
  clock_gettime(CLOCK_MONOTONIC, &t);
  return (double)t.tv_sec + (double)t.tv_nsec * 1e-9;
}

void kiln_cpu_options_default(kiln_cpu_options_t* o) {
  memset(o, 0, sizeof(*o));
  /* cc unless $KILN_CC names one; KILN_CC=auto: auto_compiler() (NULL) */
  const char* cc = getenv("KILN_CC");
  o->compiler = !cc || !*cc ? "cc" : strcmp(cc, "auto") == 0 ? NULL : cc;
  const char* fl = getenv("KILN_CPU_FLAGS");
  o->flags = fl && *fl ? fl : DEFAULT_FLAGS;
  const char* dump = getenv("KILN_CPU_DUMP");
  o->dump_dir = dump && *dump ? dump : NULL;
  o->cache_dir = NULL; /* the code cache's default folder (runtime/code_cache.h) */
  o->threads = 0;
}

/* ---- files ------------------------------------------------------------ */

static kiln_status_t write_file(const char* path, const char* data, size_t len) {
  FILE* f = fopen(path, "wb");
  if (!f) return kiln_make_status(KILN_IO_ERROR, "cpu: cannot write '%s': %s", path, strerror(errno));
  size_t w = fwrite(data, 1, len, f);
  int e = ferror(f);
  if (fclose(f) != 0 || w != len || e)
    return kiln_make_status(KILN_IO_ERROR, "cpu: writing '%s' failed", path);
  return NULL;
}

/* Whole file (at most |cap| bytes), NUL-terminated; "" when unreadable. */
static char* read_file(const char* path, size_t cap) {
  FILE* f = fopen(path, "rb");
  char* buf = malloc(cap + 1);
  size_t n = 0;
  if (buf && f) n = fread(buf, 1, cap, f);
  if (f) fclose(f);
  if (buf) buf[n] = 0;
  return buf;
}

/* ---- running the compiler -------------------------------------------- */

/* environ with LC_ALL=C (ASCII quotes in diagnostics); malloc'd array. */
static char** child_env(void) {
  size_t n = 0;
  while (environ && environ[n]) ++n;
  char** env = malloc((n + 2) * sizeof(char*));
  if (!env) return NULL;
  size_t k = 0;
  for (size_t i = 0; i < n; ++i)
    if (strncmp(environ[i], "LC_ALL=", 7) && strncmp(environ[i], "LC_MESSAGES=", 12) &&
        strncmp(environ[i], "LANG=", 5))
      env[k++] = environ[i];
  env[k++] = (char*)"LC_ALL=C";
  env[k] = NULL;
  return env;
}

/* Starts argv (PATH lookup) with stdout+stderr to |log_path|. */
static kiln_status_t spawn_tool(char* const* argv, const char* log_path, pid_t* out_pid) {
  posix_spawn_file_actions_t fa;
  if (posix_spawn_file_actions_init(&fa) != 0)
    return kiln_make_status(KILN_OUT_OF_MEMORY, "cpu: posix_spawn setup failed");
  posix_spawn_file_actions_addopen(&fa, 0, "/dev/null", O_RDONLY, 0);
  posix_spawn_file_actions_addopen(&fa, 1, log_path, O_WRONLY | O_CREAT | O_TRUNC, 0600);
  posix_spawn_file_actions_adddup2(&fa, 1, 2);
  char** env = child_env();
  int e = env ? posix_spawnp(out_pid, argv[0], &fa, NULL, argv, env) : ENOMEM;
  posix_spawn_file_actions_destroy(&fa);
  free(env);
  if (e != 0)
    return kiln_make_status(e == ENOENT ? KILN_NOT_FOUND : KILN_IO_ERROR,
                            "cpu: cannot run compiler '%s': %s (set KILN_CC or the compiler "
                            "option)",
                            argv[0], strerror(e));
  return NULL;
}

/* Waits for |pid| (|nohang|: only looks; *out_done says whether it had
 * ended); *out_rc is its exit status (128+signal when killed) and its CPU
 * seconds are added to *cpu_s (when not NULL): wait4 reports that child's
 * own, where RUSAGE_CHILDREN would mix in other threads' children. */
static kiln_status_t wait_tool_ex(pid_t pid, const char* what, bool nohang, bool* out_done,
                                  int* out_rc, double* cpu_s) {
  int st = 0;
  struct rusage ru;
  memset(&ru, 0, sizeof ru);
  pid_t r;
  while ((r = wait4(pid, &st, nohang ? WNOHANG : 0, &ru)) < 0) {
    if (errno != EINTR)
      return kiln_make_status(KILN_IO_ERROR, "cpu: waiting for '%s' failed: %s", what,
                              strerror(errno));
  }
  if (out_done) *out_done = r == pid;
  if (r != pid) return NULL;
  *out_rc = WIFEXITED(st) ? WEXITSTATUS(st) : 128 + (WIFSIGNALED(st) ? WTERMSIG(st) : 0);
  if (cpu_s)
    *cpu_s += (double)ru.ru_utime.tv_sec + 1e-6 * (double)ru.ru_utime.tv_usec +
              (double)ru.ru_stime.tv_sec + 1e-6 * (double)ru.ru_stime.tv_usec;
  return NULL;
}

static kiln_status_t run_tool_cpu(char* const* argv, const char* log_path, int* out_rc, double* cpu_s) {
  pid_t pid = 0;
  KILN_RETURN_IF_ERROR(spawn_tool(argv, log_path, &pid));
  return wait_tool_ex(pid, argv[0], false, NULL, out_rc, cpu_s);
}

static kiln_status_t run_tool(char* const* argv, const char* log_path, int* out_rc) {
  return run_tool_cpu(argv, log_path, out_rc, NULL);
}

/* Trimmed compiler output for an error message (malloc'd). */
static char* trim_log(const char* log) {
  size_t n = strlen(log);
  while (n && (log[n - 1] == '\n' || log[n - 1] == ' ' || log[n - 1] == '\r')) --n;
  size_t shown = n > MAX_LOG_SHOWN ? MAX_LOG_SHOWN : n;
  char* out = malloc(shown + 64);
  if (!out) return NULL;
  memcpy(out, log, shown);
  out[shown] = 0;
  if (shown < n) snprintf(out + shown, 64, "\n... (%zu more bytes)", n - shown);
  return out;
}

/* ---- per-process facts ------------------------------------------------ */

typedef struct version_entry_s {
  char* compiler;
  char* text;
} version_entry_t;

static pthread_mutex_t version_mu = PTHREAD_MUTEX_INITIALIZER;
static version_entry_t versions[8];

/* `<compiler> --version` output, run once per process per compiler. */
static kiln_status_t compiler_version(const char* cc, const char* workdir, kiln_code_cache_key_t* h) {
  pthread_mutex_lock(&version_mu);
  for (int i = 0; i < 8; ++i)
    if (versions[i].compiler && strcmp(versions[i].compiler, cc) == 0) {
      kiln_code_cache_key_str(h, versions[i].text);
      pthread_mutex_unlock(&version_mu);
      return NULL;
    }
  pthread_mutex_unlock(&version_mu);
  char log[1200];
  kiln_code_cache_temp_path(workdir, "version", ".log", log, sizeof log);
  char* argv[] = {(char*)cc, (char*)"--version", NULL};
  int rc = 0;
  kiln_status_t s = run_tool(argv, log, &rc);
  char* text = read_file(log, 1 << 16);
  unlink(log);
  if (!s && rc != 0) {
    char* t = trim_log(text ? text : "");
    s = kiln_make_status(KILN_NOT_FOUND, "cpu: '%s --version' failed (exit %d): %s", cc, rc,
                         t ? t : "");
    free(t);
  }
  if (s || !text) {
    free(text);
    return s ? s : kiln_make_status(KILN_OUT_OF_MEMORY, "cpu: out of memory");
  }
  kiln_code_cache_key_str(h, text);
  pthread_mutex_lock(&version_mu);
  bool kept = false;
  for (int i = 0; i < 8 && !kept; ++i)
    if (!versions[i].compiler) {
      versions[i].compiler = strdup(cc);
      versions[i].text = text;
      kept = versions[i].compiler != NULL;
      if (!kept) versions[i].text = NULL;
    }
  pthread_mutex_unlock(&version_mu);
  if (!kept) free(text);
  return NULL;
}

/* The compiler for KILN_CC=auto: clang where it is on PATH and builds
 * OpenMP code, else cc. On kiln's kernels clang 14 -O3 takes about 2/3 of
 * GCC 12's CPU time for the same C, with the same single-thread run time
 * (README, "Cold compile"). It is not the default: its kernels run on
 * libomp, whose shortest spin before a worker sleeps is 1 ms (KMP_BLOCKTIME
 * takes whole milliseconds), where libgomp's is set to about 10 us
 * (cpu_device.c); sleeping at once, MobileNetV2 at 2 threads took 4.0 ms
 * against GCC's 2.7 (the wake-up per kernel), and a 1 ms spin burns a core
 * between runs. clang is found on PATH without running
 * it; whether it links OpenMP (its libomp and omp.h installed) is tried only
 * when something must be compiled, so a cache hit never pays for the probe,
 * and once per process: a clang that fails it is not asked again. */
#define AUTO_CC "clang"
/* Except in sanitizer builds: LeakSanitizer's tracer crashes at exit on
 * libomp's parked worker threads (as on PoCL's, google/sanitizers#1353),
 * which would end every ASan run of CPU kernels; libgomp's do not. */
#if defined(__SANITIZE_ADDRESS__)
#define AUTO_CLANG_ALLOWED 0
#elif defined(__has_feature)
#if __has_feature(address_sanitizer)
#define AUTO_CLANG_ALLOWED 0
#endif
#endif
#ifndef AUTO_CLANG_ALLOWED
#define AUTO_CLANG_ALLOWED 1
#endif
static pthread_mutex_t auto_mu = PTHREAD_MUTEX_INITIALIZER;
static int auto_clang; /* 0 not tried, 1 links OpenMP, -1 does not */

static bool on_path(const char* exe) {
  const char* path = getenv("PATH");
  char buf[1200];
  for (const char* p = path ? path : ""; *p;) {
    size_t n = strcspn(p, ":");
    if (n > 0 && n + strlen(exe) + 2 < sizeof buf) {
      snprintf(buf, sizeof buf, "%.*s/%s", (int)n, p, exe);
      if (access(buf, X_OK) == 0) return true;
    }
    p += n + (p[n] == ':');
  }
  return false;
}

static const char* auto_compiler(void) {
  pthread_mutex_lock(&auto_mu);
  int st = auto_clang;
  pthread_mutex_unlock(&auto_mu);
  return AUTO_CLANG_ALLOWED && st >= 0 && on_path(AUTO_CC) ? AUTO_CC : "cc";
}

/* Whether clang builds an OpenMP shared object in |dir| (once per process). */
static bool auto_clang_works(const char* dir) {
  pthread_mutex_lock(&auto_mu);
  int st = auto_clang;
  pthread_mutex_unlock(&auto_mu);
  if (st) return st > 0;
  char c[1200], so[1200], log[1200];
  kiln_code_cache_temp_path(dir, "probe", ".c", c, sizeof c);
  kiln_code_cache_temp_path(dir, "probe", ".so", so, sizeof so);
  kiln_code_cache_temp_path(dir, "probe", ".log", log, sizeof log);
  static const char probe[] = "#include <omp.h>\nint kiln_probe(void) {\n  int n = 0;\n"
                              "#pragma omp parallel\n  n = omp_get_num_threads();\n  return n;\n}\n";
  int rc = 1;
  kiln_status_t ws = write_file(c, probe, sizeof probe - 1);
  if (ws) {
    kiln_status_free(ws);
  } else {
    char* argv[] = {(char*)AUTO_CC, (char*)"-fopenmp", (char*)"-shared", (char*)"-fPIC",
                    (char*)"-o", so, c, NULL};
    kiln_status_t s = run_tool(argv, log, &rc);
    if (s) {
      kiln_status_free(s);
      rc = 1;
    }
  }
  unlink(c);
  unlink(so);
  unlink(log);
  pthread_mutex_lock(&auto_mu);
  auto_clang = rc == 0 ? 1 : -1;
  pthread_mutex_unlock(&auto_mu);
  return rc == 0;
}

static pthread_once_t cpu_once = PTHREAD_ONCE_INIT;
static char cpu_identity[4096];

static void read_cpu_identity(void) {
  FILE* f = fopen("/proc/cpuinfo", "r");
  if (!f) return;
  char line[4096];
  size_t used = 0;
  bool model = false, flags = false;
  while ((!model || !flags) && fgets(line, sizeof line, f)) {
    bool is_model = !model && strncmp(line, "model name", 10) == 0;
    bool is_flags = !flags && (strncmp(line, "flags", 5) == 0 || strncmp(line, "Features", 8) == 0);
    if (!is_model && !is_flags) continue;
    model |= is_model;
    flags |= is_flags;
    size_t l = strlen(line);
    if (used + l < sizeof cpu_identity) {
      memcpy(cpu_identity + used, line, l);
      used += l;
    }
  }
  cpu_identity[used] = 0;
  fclose(f);
}

/* The key of what a compile depends on besides the C: the ABI, compiler,
 * flags, the compiler's version and the CPU (-march=native). A whole
 * unit's entry adds its text, a part's "part" and the part's text. */
static kiln_status_t base_key(const char* cc, const char* flags, const char* dir, kiln_code_cache_key_t* h) {
  kiln_code_cache_key_init(h);
  kiln_code_cache_key_str(h, ABI_TAG);
  kiln_code_cache_key_str(h, cc);
  kiln_code_cache_key_str(h, flags);
  pthread_once(&cpu_once, read_cpu_identity);
  kiln_code_cache_key_str(h, cpu_identity);
  return compiler_version(cc, dir, h);
}

/* The CPU folder's bound: after a miss adds an object, the least recently
 * used objects (hits touch theirs) and kept sources go when it holds more
 * than this. Unlinking an object another process has loaded is harmless. */
#define CACHE_MAX_ENTRIES 2048
#define CACHE_MAX_BYTES (1024ll << 20)

/* ---- loading ---------------------------------------------------------- */

/* The OpenMP runtime a kernel object pulls in must outlive the object: its
 * worker threads stay parked in the runtime after a parallel region, and
 * unloading it under them (dlclose of the last kernel object when the host
 * does not link OpenMP itself) crashes them. So every loaded OpenMP runtime
 * is promoted to RTLD_NODELETE.
 *
 * The runtimes are found with dl_iterate_phdr and promoted after it
 * returns: dlopen inside its callback would take the loader's lock while
 * the walk holds its list lock, the reverse of the order a dlopen on
 * another thread takes them in (a session created on each client thread
 * deadlocked that way, about one run in thirty). */
typedef struct {
  char** names;
  int n, cap;
} pin_list_t;

static int find_openmp(struct dl_phdr_info* info, size_t size, void* data) {
  (void)size;
  pin_list_t* list = data;
  const char* name = info->dlpi_name;
  if (!name || !*name) return 0;
  const char* base = strrchr(name, '/');
  base = base ? base + 1 : name;
  if (strncmp(base, "libgomp", 7) && strncmp(base, "libomp", 6) && strncmp(base, "libiomp", 7))
    return 0;
  if (list->n == list->cap) {
    const int cap = list->cap ? 2 * list->cap : 4;
    char** grown = realloc(list->names, sizeof *grown * (size_t)cap);
    if (!grown) return 0; /* out of memory: this one stays unpinned */
    list->names = grown;
    list->cap = cap;
  }
  char* copy = strdup(name);
  if (copy) list->names[list->n++] = copy; /* out of memory: this one stays unpinned */
  return 0;
}

void kiln_cpu_pin_openmp(void) {
  pin_list_t list = {NULL, 0, 0};
  dl_iterate_phdr(find_openmp, &list);
  for (int i = 0; i < list.n; ++i) {
    void* h = dlopen(list.names[i], RTLD_LAZY | RTLD_NOLOAD | RTLD_NODELETE);
    if (h) dlclose(h); /* drops our reference; NODELETE keeps it mapped */
    free(list.names[i]);
  }
  free(list.names);
}

kiln_status_t kiln_cpu_module_load_so(const char* path, const char* const* names, int32_t n,
                                      kiln_cpu_module_t* m) {
  dlerror();
  void* h = dlopen(path, RTLD_NOW | RTLD_LOCAL);
  if (!h) {
    const char* why = dlerror();
    return kiln_make_status(KILN_IO_ERROR, "cpu: cannot load '%s': %s", path, why ? why : "?");
  }
  /* Pinned before anything can fail: the object's OpenMP runtime has
   * initialised (and allocated) on load, and a dlclose that unloaded it
   * with the object on the error paths below would leak what it holds
   * (a module whose code lacks a kernel's symbol). */
  kiln_cpu_pin_openmp();
  kiln_cpu_kernel_fn* fns = calloc((size_t)(n ? n : 1), sizeof(*fns));
  if (!fns) {
    dlclose(h);
    return kiln_make_status(KILN_OUT_OF_MEMORY, "cpu: out of memory loading kernels");
  }
  const char* missing = NULL;
  for (int32_t i = 0; i < n && !missing; ++i) {
    void* sym = dlsym(h, names[i]);
    if (!sym) missing = names[i];
    memcpy(&fns[i], &sym, sizeof sym);
  }
  void* st = dlsym(h, "kiln_set_threads");
  void* abi = dlsym(h, "kiln_abi_version");
  int (*abi_fn)(void) = NULL;
  memcpy(&abi_fn, &abi, sizeof abi);
  if (!missing && !st) missing = "kiln_set_threads";
  if (!missing && (!abi_fn || abi_fn() != 1)) missing = "kiln_abi_version (== 1)";
  if (missing) {
    free(fns);
    dlclose(h);
    return kiln_make_status(KILN_NOT_FOUND, "cpu: symbol '%s' missing from '%s'", missing, path);
  }
  /* Kernels that call a plugin's CPU function get its address now, from
   * the plugins loaded in this process (targets/custom_kernel.c prints
   * kiln_plugin_bind only into units that have such kernels). */
  void* bind = dlsym(h, "kiln_plugin_bind");
  if (bind) {
    kiln_status_t bs = kiln_plugin_bind_cpu_fns(bind);
    if (bs) {
      free(fns);
      dlclose(h);
      return bs;
    }
  }
  memset(m, 0, sizeof *m); /* the caller may pass it uninitialised; it sets fd / owns_fd after */
  m->handle = h;
  m->fns = fns;
  memcpy(&m->set_threads, &st, sizeof st);
  return NULL;
}

void kiln_cpu_module_unload(kiln_cpu_module_t* m) {
  if (!m) return;
  free(m->fns);
  if (m->handle) dlclose(m->handle);
  if (m->owns_fd) close(m->fd);
  memset(m, 0, sizeof(*m));
}

/* The kernel a compiler error is in: GCC says "In function 'NAME'"; for any
 * compiler, the first "FILE:LINE:COL: error" line is mapped back to the
 * kernel definition enclosing LINE in the compiled file. */
static void failing_kernel(const char* log, const char* compiled, char* out, size_t n) {
  out[0] = 0;
  const char* s = strstr(log, "In function '");
  if (s) {
    s += 13;
    size_t k = 0;
    while (s[k] && s[k] != '\'' && k + 1 < n) {
      out[k] = s[k];
      ++k;
    }
    out[k] = 0;
    return;
  }
  size_t plen = strlen(compiled);
  long line = 0;
  if (!plen) return; /* a link: strstr(p + 1, "") would walk past the log */
  for (const char* p = strstr(log, compiled); p && !line; p = strstr(p + 1, compiled)) {
    const char* q = p + plen;
    if (*q != ':') continue;
    char* end = NULL;
    long l = strtol(q + 1, &end, 10);
    if (end && *end == ':' && strstr(end, ": error") == strchr(end + 1, ':')) line = l;
  }
  if (line <= 0) return;
  char* text = read_file(compiled, 64u << 20);
  if (!text) return;
  long cur = 1;
  const char* ln = text;
  for (const char* c = text; *c && cur <= line; ++c) {
    if (cur <= line && strncmp(ln, "void ", 5) == 0 && c == ln) {
      const char* open = strchr(ln + 5, '(');
      const char* eol = strchr(ln, '\n');
      if (open && (!eol || open < eol) && strncmp(open, "(void* const* args) {", 21) == 0) {
        size_t k = (size_t)(open - (ln + 5));
        if (k >= n) k = n - 1;
        memcpy(out, ln + 5, k);
        out[k] = 0;
      }
    }
    if (*c == '\n') {
      ++cur;
      ln = c + 1;
    }
  }
  free(text);
}

/* argv = compiler, the flags split on whitespace, then |extra| (NULL-ended).
 * Strings point into |flagbuf|/|extra|; argv has room for 128 entries. */
static kiln_status_t make_argv(const char* cc, const char* flags, char* flagbuf, size_t fbsize,
                               const char* const* extra, int32_t n_extra, char** argv) {
  if (strlen(flags) >= fbsize)
    return kiln_make_status(KILN_INVALID_ARGUMENT, "cpu: compiler flags longer than %zu bytes",
                            fbsize - 1);
  snprintf(flagbuf, fbsize, "%s", flags);
  int argc = 0;
  argv[argc++] = (char*)cc;
  char* save = NULL;
  for (char* t = strtok_r(flagbuf, " \t\n", &save); t; t = strtok_r(NULL, " \t\n", &save)) {
    if (argc >= 60) return kiln_make_status(KILN_INVALID_ARGUMENT, "cpu: more than 58 compiler flags");
    argv[argc++] = t;
  }
  if (argc + n_extra >= 127)
    return kiln_make_status(KILN_INVALID_ARGUMENT, "cpu: too many compiler arguments");
  for (int32_t i = 0; i < n_extra; ++i) argv[argc++] = (char*)extra[i];
  argv[argc] = NULL;
  return NULL;
}

static kiln_status_t build_failure(const char* cc, const char* flags, int rc, const char* log,
                                   const char* compiled, const char* kept, const char* part) {
  char* text = read_file(log, 1 << 20);
  char* t = trim_log(text ? text : "");
  char kname[256];
  failing_kernel(text ? text : "", compiled, kname, sizeof kname);
  kiln_status_t s = kiln_make_status(
      KILN_DEVICE_ERROR,
      "cpu: compiling the kernels failed (%s %s, exit %d)%s%s%s:\n%s\nsource kept at %s%s%s%s",
      cc, flags, rc, kname[0] ? " in kernel '" : "", kname, kname[0] ? "'" : "", t ? t : "", kept,
      part ? " (failing part: " : "", part ? part : "", part ? ")" : "");
  free(text);
  free(t);
  return s;
}

/* How many compiler processes to run at once. */
static int32_t compile_jobs(void) {
  const char* e = getenv("KILN_CPU_JOBS");
  if (e && *e) {
    int v = atoi(e);
    if (v >= 1) return v > 64 ? 64 : v;
  }
  long n = sysconf(_SC_NPROCESSORS_ONLN);
  return n < 1 ? 1 : n > 64 ? 64 : (int32_t)n;
}

/* Kernel units of a code section: parts 1 .. n_parts-2 (0 is the prelude,
 * the last the epilogue). */
static int32_t n_units(const kiln_program_code_t* c) { return c->n_parts - 2; }
static size_t unit_off(const kiln_program_code_t* c, int32_t u) { return (size_t)c->parts[2 * (u + 1)]; }
static size_t unit_len(const kiln_program_code_t* c, int32_t u) { return (size_t)c->parts[2 * (u + 1) + 1]; }

/* Part of each unit: a hash of its text up to the first '(' (the kernel's
 * name, or its shared body's), so a unit stays in its part when its own
 * code or another unit's changes (a tuned schedule) and only the parts
 * holding changed units miss the cache; the text sizes balanced the parts
 * before, but one changed size then moved many units. */
static void assign_parts(const kiln_program_code_t* src, int32_t nparts, int32_t* part) {
  for (int32_t u = 0; u < n_units(src); ++u) {
    const char* t = src->text + unit_off(src, u);
    size_t n = 0, len = unit_len(src, u);
    while (n < len && t[n] != '(') ++n;
    kiln_code_cache_key_t k;
    kiln_code_cache_key_init(&k);
    kiln_code_cache_key_feed(&k, t, n);
    part[u] = (int32_t)(k.a % (uint64_t)nparts);
  }
}

/* Parts per compiler job: more parts than jobs, handed to the jobs as they
 * free up, even out what the text sizes mispredict (a GEMM's few lines
 * unroll into far more work than an element-wise kernel's); each part
 * costs one more parse of the prelude. */
#define PARTS_PER_JOB 3
#define MAX_PARTS 64

/* What building a shared object did, for kiln_cpu_compile_stats_t. */
typedef struct build_info_s {
  double cpu_s;   /* compiler and linker CPU seconds */
  int32_t parts;  /* translation units (1: the code as one file) */
  int32_t jobs;   /* compilers run at once */
  int32_t reused; /* parts whose object came from the code cache */
} build_info_t;

/* Waits for one of the |n| running compiles in |pids| (-1: not running) to
 * end: polls them (a library must not reap children it did not start, so
 * no waitpid(-1)); returns its index in *out_q. */
static kiln_status_t wait_any(pid_t* pids, int32_t n, const char* cc, int32_t* out_q, int* out_rc,
                              double* cpu_s) {
  for (;;) {
    for (int32_t q = 0; q < n; ++q) {
      if (pids[q] < 0) continue;
      bool done = false;
      KILN_RETURN_IF_ERROR(wait_tool_ex(pids[q], cc, true, &done, out_rc, cpu_s));
      if (done) {
        pids[q] = -1;
        *out_q = q;
        return NULL;
      }
    }
    struct timespec ts = {0, 2000000}; /* 2 ms: compiles take 100s of ms */
    nanosleep(&ts, NULL);
  }
}

/* One part of a build: its files and its object's code-cache entry. */
typedef struct part_s {
  char c[1024], o[1024], log[1024]; /* its C, object and compiler log (temporaries) */
  char entry[40];                   /* <key>.o in the code cache ("" without one) */
  char epath[1024];                 /* the entry's path */
  size_t load;                      /* its units' text bytes */
  bool reused;                      /* the link reads the entry: nothing to compile */
  bool hit;                         /* the entry was there before this build */
} part_t;

/* Part |q|'s text (prelude, its units, part 0 the epilogue) into |f|, or
 * into |k| when |f| is NULL. */
static void part_text(const kiln_program_code_t* src, const int32_t* part, int32_t q, FILE* f,
                      kiln_code_cache_key_t* k) {
  for (int32_t u = -1; u <= n_units(src); ++u) {
    if (u >= 0 && u < n_units(src) ? part[u] != q : u >= 0 && q != 0) continue;
    size_t off = (size_t)src->parts[2 * (u + 1)], len = (size_t)src->parts[2 * (u + 1) + 1];
    if (f) fwrite(src->text + off, 1, len, f);
    else kiln_code_cache_key_feed(k, src->text + off, len);
  }
}

/* Compiles |src| into |so|. Small units (or one job) compile as one file;
 * otherwise parts are compiled to objects concurrently, at most |jobs| at a
 * time, and linked. With |cache| on, each part's object is an entry keyed
 * by |base| (compiler, flags, CPU) and the part's text: a whole entry is
 * linked instead of compiling the part, a compiled part is stored; an entry
 * the link refuses (whole but foreign) is dropped with a warning and its
 * part compiled. */
static kiln_status_t build_so(const char* cc, const char* flags, const kiln_program_code_t* src,
                              const char* dir, const char* key, const char* src_path,
                              const char* so, const char* kept, build_info_t* info, FILE* progress,
                              const kiln_code_cache_t* cache, const kiln_code_cache_key_t* base) {
  char flagbuf[2048], log[1024];
  char* argv[128];
  int32_t jobs = compile_jobs();
  int32_t nparts = n_units(src) / 4;
  if (jobs < 2) nparts = 1; /* nothing to overlap: parts would only add prelude parses */
  if (nparts > PARTS_PER_JOB * jobs) nparts = PARTS_PER_JOB * jobs;
  if (nparts > MAX_PARTS) nparts = MAX_PARTS;
  memset(info, 0, sizeof *info);
  info->parts = nparts < 2 ? 1 : nparts;
  info->jobs = nparts < 2 ? 1 : nparts < jobs ? nparts : jobs;
  /* the parts' compiles, then the link (one step when the C is one file) */
  kiln_progress_t pr;
  char what[80];
  snprintf(what, sizeof what, "cpu (%s, %d jobs)", cc, (int)info->jobs);
  kiln_progress_start(&pr, progress, what, nparts < 2 ? 1 : nparts + 1, "building");
  if (nparts < 2) {
    const char* extra[] = {"-pipe", "-shared", "-fPIC", "-o", so, src_path, "-lm"};
    KILN_RETURN_IF_ERROR(make_argv(cc, flags, flagbuf, sizeof flagbuf, extra, 7, argv));
    kiln_code_cache_temp_path(dir, key, ".log", log, sizeof log);
    int rc = 0;
    kiln_status_t s = run_tool_cpu(argv, log, &rc, &info->cpu_s);
    if (!s && rc != 0) s = build_failure(cc, flags, rc, log, src_path, kept, NULL);
    unlink(log);
    if (!s) kiln_progress_step(&pr, "compiled");
    kiln_progress_end(&pr);
    return s;
  }
  bool caching = cache && cache->dir[0] && base;
  int32_t* part = calloc((size_t)n_units(src) + 1, sizeof(int32_t));
  part_t* p = calloc((size_t)nparts, sizeof *p);
  pid_t pids[MAX_PARTS];
  int32_t order[MAX_PARTS];
  kiln_status_t s = NULL;
  int32_t failed = -1; /* the first part whose compile failed */
  int failed_rc = 0;
  if (!part || !p) {
    s = kiln_make_status(KILN_OUT_OF_MEMORY, "cpu: out of memory");
    goto done;
  }
  assign_parts(src, nparts, part);
  for (int32_t u = 0; u < n_units(src); ++u) p[part[u]].load += unit_len(src, u);
  for (int32_t q = 0; q < nparts; ++q) {
    char tag[64];
    snprintf(tag, sizeof tag, "%s-part%d", key, (int)q);
    kiln_code_cache_temp_path(dir, tag, ".c", p[q].c, sizeof p[q].c);
    kiln_code_cache_temp_path(dir, tag, ".o", p[q].o, sizeof p[q].o);
    kiln_code_cache_temp_path(dir, tag, ".log", p[q].log, sizeof p[q].log);
    /* heaviest first, so that the last compile to start is a short one */
    int32_t i = q;
    for (; i > 0 && p[order[i - 1]].load < p[q].load; --i) order[i] = order[i - 1];
    order[i] = q;
    if (!caching) continue;
    kiln_code_cache_key_t k = *base;
    kiln_code_cache_key_str(&k, "part");
    part_text(src, part, q, NULL, &k);
    char hex[33];
    kiln_code_cache_key_hex(&k, hex);
    snprintf(p[q].entry, sizeof p[q].entry, "%s.o", hex);
    if (!kiln_code_cache_path(cache, p[q].entry, p[q].epath, sizeof p[q].epath)) p[q].entry[0] = 0;
    else if (kiln_code_cache_check(cache, p[q].entry) == KILN_CODE_CACHE_HIT) {
      p[q].reused = p[q].hit = true;
      info->reused++;
      utimensat(AT_FDCWD, p[q].epath, NULL, 0); /* recently used: trimmed last */
      kiln_progress_step(&pr, "reused");
    }
  }
  /* Twice at most: the second time compiles the parts whose cached
   * objects the link refused. */
  for (int attempt = 0; attempt < 2 && !s; ++attempt) {
    /* Parts in order, at most info->jobs running; after an error no new
     * one starts and the running ones are waited for. */
    for (int32_t q = 0; q < nparts; ++q) pids[q] = -1;
    int32_t next = 0, running = 0;
    while (next < nparts || running > 0) {
      if (!s && failed < 0 && next < nparts && running < info->jobs) {
        part_t* pq = &p[order[next]];
        if (pq->reused) {
          next++;
          continue;
        }
        FILE* f = fopen(pq->c, "wb");
        if (!f) s = kiln_make_status(KILN_IO_ERROR, "cpu: cannot write '%s': %s", pq->c, strerror(errno));
        else {
          part_text(src, part, order[next], f, NULL);
          if (fclose(f) != 0) s = kiln_make_status(KILN_IO_ERROR, "cpu: writing '%s' failed", pq->c);
        }
        const char* extra[] = {"-pipe", "-fPIC", "-c", "-o", pq->o, pq->c};
        if (!s) s = make_argv(cc, flags, flagbuf, sizeof flagbuf, extra, 6, argv);
        if (!s) s = spawn_tool(argv, pq->log, &pids[order[next]]);
        if (!s) running++;
        next++;
        continue;
      }
      if (running == 0) break;
      int32_t q = -1;
      int rc = 0;
      kiln_status_t w = wait_any(pids, nparts, cc, &q, &rc, &info->cpu_s);
      if (w) { /* the children cannot be waited for: stop here */
        if (!s) s = w;
        else kiln_status_free(w);
        break;
      }
      running--;
      if (rc == 0) kiln_progress_step(&pr, "compiled");
      if (rc != 0 && failed < 0) {
        failed = q;
        failed_rc = rc;
      }
    }
    if (!s && failed >= 0)
      s = build_failure(cc, flags, failed_rc, p[failed].log, p[failed].c, kept, p[failed].c);
    if (s) break;
    const char* extra[MAX_PARTS + 6];
    int32_t ne = 0;
    extra[ne++] = "-shared";
    extra[ne++] = "-fPIC";
    extra[ne++] = "-o";
    extra[ne++] = so;
    for (int32_t q = 0; q < nparts; ++q) {
      /* a compiled part becomes an entry (a cache that cannot take it
       * links it from its temporary file) */
      if (!p[q].reused && p[q].entry[0] && kiln_code_cache_commit(cache, p[q].o, p[q].entry)) p[q].reused = true;
      extra[ne++] = p[q].reused ? p[q].epath : p[q].o;
    }
    extra[ne++] = "-lm";
    kiln_code_cache_temp_path(dir, key, ".log", log, sizeof log);
    s = make_argv(cc, flags, flagbuf, sizeof flagbuf, extra, ne, argv);
    int rc = 0;
    if (!s) s = run_tool_cpu(argv, log, &rc, &info->cpu_s);
    if (!s && rc != 0 && info->reused && attempt == 0) {
      fprintf(stderr, "kiln: warning: cpu cache: the link refused the %d part object%s reused from '%s'; "
              "compiling %s again\n", (int)info->reused, info->reused == 1 ? "" : "s", cache->dir,
              info->reused == 1 ? "it" : "them");
      for (int32_t q = 0; q < nparts; ++q)
        if (p[q].hit) {
          unlink(p[q].epath);
          p[q].reused = p[q].hit = false;
        }
      info->reused = 0;
      unlink(log);
      continue;
    }
    if (!s && rc != 0) s = build_failure(cc, flags, rc, log, "", kept, NULL);
    unlink(log);
    if (!s) kiln_progress_step(&pr, "linked");
    break;
  }
done:
  kiln_progress_end(&pr);
  for (int32_t q = 0; q < nparts && p; ++q) {
    if (!(s && q == failed)) unlink(p[q].c); /* the failing part is kept for the message */
    unlink(p[q].o);
    unlink(p[q].log);
  }
  free(part);
  free(p);
  return s;
}

kiln_status_t kiln_cpu_module_load(const kiln_program_code_t* src,
                                   const kiln_cpu_options_t* options, const char* const* names,
                                   int32_t n, kiln_cpu_module_t* out,
                                   kiln_cpu_compile_stats_t* stats) {
  kiln_cpu_options_t defaults;
  kiln_cpu_options_default(&defaults);
  const kiln_cpu_options_t* o = options ? options : &defaults;
  const char* cc = o->compiler && *o->compiler ? o->compiler : defaults.compiler;
  bool auto_cc = !cc; /* KILN_CC=auto (or options naming none over it) */
  if (auto_cc) cc = auto_compiler();
  const char* flags = o->flags ? o->flags : DEFAULT_FLAGS;
  const char* source = src->text ? src->text : "";
  size_t len = (size_t)src->text_len;
  memset(out, 0, sizeof(*out));

  /* The compiler works in the cache folder (temporaries are renamed into
   * place); without a cache, in a private folder removed afterwards. */
  kiln_code_cache_t cache;
  bool cached = kiln_code_cache_open(&cache, "cpu", o->cache_dir);
  char dir[sizeof cache.dir];
  if (cached) {
    memcpy(dir, cache.dir, sizeof dir);
  } else {
    const char* tmp = getenv("TMPDIR");
    snprintf(dir, sizeof dir, "%s/kiln-cpu-XXXXXX", tmp && *tmp ? tmp : "/tmp");
    if (!mkdtemp(dir))
      return kiln_make_status(KILN_IO_ERROR, "cpu: cannot create a temporary directory '%s': %s",
                              dir, strerror(errno));
  }

rekey:;
  double t0 = kiln_cpu_now();
  kiln_code_cache_key_t base, h;
  kiln_status_t s = base_key(cc, flags, dir, &base);
  h = base;
  kiln_code_cache_key_feed(&h, source, len);
  if (s && auto_cc && strcmp(cc, AUTO_CC) == 0) {
    kiln_status_free(s);
    pthread_mutex_lock(&auto_mu);
    auto_clang = -1;
    pthread_mutex_unlock(&auto_mu);
    cc = "cc";
    goto rekey;
  }
  if (s) {
    if (!cached) rmdir(dir);
    return s;
  }
  char key[33];
  kiln_code_cache_key_hex(&h, key);
  char so_name[48], so_path[1024], src_final[1024];
  snprintf(so_name, sizeof so_name, "%s.so", key);
  snprintf(so_path, sizeof so_path, "%s/%s", dir, so_name);
  snprintf(src_final, sizeof src_final, "%s/%s.c", dir, key);

  if (o->dump_dir && *o->dump_dir) {
    char dump[1024];
    KILN_RETURN_IF_ERROR(kiln_code_cache_make_dirs(o->dump_dir), "cpu dump");
    snprintf(dump, sizeof dump, "%s/kiln_cpu_%s.c", o->dump_dir, key);
    KILN_RETURN_IF_ERROR(write_file(dump, source, len));
  }

  if (stats) snprintf(stats->so_path, sizeof stats->so_path, "%s", so_path);
  /* Only a whole entry is loaded: a truncated object would load and then
   * fault (SIGBUS) when a kernel touches its missing pages. */
  if (cached && kiln_code_cache_check(&cache, so_name) == KILN_CODE_CACHE_HIT) {
    double tl = kiln_cpu_now();
    kiln_status_t ls = kiln_cpu_module_load_so(so_path, names, n, out);
    if (!ls) {
      utimensat(AT_FDCWD, so_path, NULL, 0); /* recently used: trimmed last */
      if (stats) {
        stats->cache_hit = true;
        stats->compile_s = tl - t0;
        stats->load_s = kiln_cpu_now() - tl;
      }
      return NULL;
    }
    /* A whole object that does not load is stale: rebuild. */
    kiln_status_free(ls);
    unlink(so_path);
  }

  /* a miss: the automatic clang must build OpenMP code, or cc compiles */
  if (auto_cc && strcmp(cc, AUTO_CC) == 0 && !auto_clang_works(dir)) {
    cc = "cc";
    goto rekey;
  }
  char src_tmp[sizeof dir + 96], so_tmp[sizeof dir + 96];
  build_info_t info = {0};
  kiln_code_cache_temp_path(dir, key, ".c", src_tmp, sizeof src_tmp);
  kiln_code_cache_temp_path(dir, key, ".so", so_tmp, sizeof so_tmp);
  s = write_file(src_tmp, source, len);
  if (!s) {
    s = build_so(cc, flags, src, dir, key, src_tmp, so_tmp, cached ? src_final : src_tmp, &info, o->progress,
                 cached ? &cache : NULL, &base);
    if (s) {
      unlink(so_tmp);
      if (cached) rename(src_tmp, src_final); /* kept for the error message */
      return s;
    }
  }
  if (s) {
    unlink(src_tmp);
    if (!cached) rmdir(dir);
    return s;
  }
  double t1 = kiln_cpu_now();
  /* A cache that cannot take the object only costs a compile next time
   * (the commit warned): the object is loaded from its temporary file. */
  bool committed = cached && kiln_code_cache_commit(&cache, so_tmp, so_name);
  const char* load_path = committed ? so_path : so_tmp;
  if (cached) {
    if (o->keep_source) rename(src_tmp, src_final);
    else unlink(src_tmp);
    kiln_code_cache_trim(&cache, CACHE_MAX_ENTRIES, CACHE_MAX_BYTES);
  }
  s = kiln_cpu_module_load_so(load_path, names, n, out);
  /* the mapping stays valid after the files are gone */
  if (!committed) unlink(so_tmp);
  if (!cached && !o->keep_source) {
    unlink(src_tmp);
    rmdir(dir);
  }
  if (s) return kiln_status_annotate(s, "cpu: freshly compiled kernels do not load");
  if (stats) {
    stats->cache_hit = false;
    stats->compile_s = t1 - t0;
    stats->compiler_cpu_s = info.cpu_s;
    stats->parts = info.parts;
    stats->parts_reused = info.reused;
    stats->jobs = info.jobs;
    snprintf(stats->compiler, sizeof stats->compiler, "%s", cc);
    stats->load_s = kiln_cpu_now() - t1;
    if (!committed) snprintf(stats->so_path, sizeof stats->so_path, "%s", so_tmp);
  }
  return NULL;
}

kiln_status_t kiln_cpu_build_object(const kiln_program_code_t* src, const char* cc, const char* flags,
                                    const char* so_path) {
  return kiln_cpu_build_object_stats(src, cc, flags, so_path, NULL);
}

kiln_status_t kiln_cpu_build_object_stats(const kiln_program_code_t* src, const char* cc, const char* flags,
                                          const char* so_path, kiln_cpu_compile_stats_t* stats) {
  const char* tmp = getenv("TMPDIR");
  char dir[1024];
  snprintf(dir, sizeof dir, "%s/kiln-aot-XXXXXX", tmp && *tmp ? tmp : "/tmp");
  if (!mkdtemp(dir))
    return kiln_make_status(KILN_IO_ERROR, "cpu: cannot create a temporary directory '%s': %s", dir,
                            strerror(errno));
  char src_path[1100];
  snprintf(src_path, sizeof src_path, "%s/kernels.c", dir);
  kiln_status_t s = write_file(src_path, src->text ? src->text : "", (size_t)src->text_len);
  build_info_t info;
  double t0 = kiln_cpu_now();
  /* The parts' objects are shared with the loader's through the code cache
   * (a module compiled again after one kernel changed recompiles its part);
   * without a compiler version (or a cache) nothing is reused. */
  kiln_code_cache_t cache;
  kiln_code_cache_key_t base = {0, 0};
  bool cached = !s && kiln_code_cache_open(&cache, "cpu", NULL);
  kiln_status_t bs = cached ? base_key(cc, flags, dir, &base) : NULL;
  kiln_status_free(bs);
  cached = cached && !bs;
  /* the parts' temporaries beside the entries they become (a rename) */
  if (!s)
    s = build_so(cc, flags, src, cached ? cache.dir : dir, "aot", src_path, so_path, src_path, &info, NULL,
                 cached ? &cache : NULL, &base);
  if (cached) kiln_code_cache_trim(&cache, CACHE_MAX_ENTRIES, CACHE_MAX_BYTES);
  if (!s && stats) {
    stats->compile_s += kiln_cpu_now() - t0;
    stats->compiler_cpu_s += info.cpu_s;
    stats->parts = info.parts;
    stats->parts_reused = info.reused;
    stats->jobs = info.jobs;
    snprintf(stats->compiler, sizeof stats->compiler, "%s", cc);
  }
  /* A failed build keeps the source its message points at. */
  if (!s) unlink(src_path);
  if (!s) rmdir(dir);
  return s;
}
