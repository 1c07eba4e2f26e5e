/* `kiln tune`: the command line of the tuner (compiler/tune.h) and of
 * the tuning cache's merge (compiler/tune_cache.h). */
#include "tools/tune_cmd.h"

#include <signal.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "api/driver.h"
#include "compiler/pipeline.h"
#include "compiler/tune.h"
#include "compiler/tune_micro.h"
#include "frontend/onnx.h"
#include "ir/passes.h"
#include "runtime/code_cache.h"
#include "runtime/device_registry.h"
#include "tools/cli_args.h"
#include "tools/runner.h"

static const char* tune_help =
    "usage: kiln tune MODEL.onnx -t TARGET [--budget 10m] [--trials N] [--cache FILE] [--resume]\n"
    "                 [--precision fp32|fp16 [--fp16-accumulate]]\n"
    "       kiln tune --merge A.tsv B.tsv ... -o C.tsv\n\n"
    "Measures other tiles for every distinct template kernel (OpenCL, Vulkan) or GEMM schedule (CPU)\n"
    "of the model (deduplicated by fingerprint) on the target's device and writes the fastest\n"
    "point per kernel to a tuning cache, which `kiln compile|run` read (docs/TUNING.md).\n"
    "  --target, -t T     the device: opencl[:N], vulkan[:N] or cpu (the targets with a search space)\n"
    "  --budget D         wall-clock budget from the command's start: 90s, 10m, 1h or seconds\n"
    "                     (default 10m); the closing whole-model build is planned within it, and\n"
    "                     a line at the end says where it went\n"
    "  --trials N         at most N candidates per kernel (default: until the budget)\n"
    "  --repeats N        timed runs per measurement after one warm-up (default 5)\n"
    "  --cache FILE       the tuning cache to add to (default: tuning.tsv in the cache folder,\n"
    "                     $KILN_CACHE_DIR or ~/.cache/kiln, which kiln compile|run read); its records for\n"
    "                     other devices, drivers or kiln versions seed the search\n"
    "  --resume           start every kernel from this device's record in the cache\n"
    "  --seed N           seed of the search and of the random inputs (default 0)\n"
    "  --threads N        CPU threads (default: all cores); on the CPU with 1, points and the\n"
    "                     whole model are compared by process CPU time\n"
    "  -O0 | -O1          graph passes and fusion (default -O1, as kiln run)\n"
    "  --precision P      fp32 (default) or fp16: the kernels `kiln compile|run --precision fp16`\n"
    "                     runs (f16 operands; OpenCL and Vulkan), whose records only those compiles use\n"
    "  --fp16-accumulate  with fp16: as the compile's flag; on Vulkan the GEMM and conv templates\n"
    "                     then have f16 sums as a knob (h)\n"
    "  --merge A B ... -o C  merge caches (the faster record per key wins), write C\n"
    "Each point is built and timed alone beside its kernel's default; the chosen points are\n"
    "checked in the whole model at the end. Ctrl-C ends the search after the current point\n"
    "and keeps what it found.\n";

static volatile sig_atomic_t stop_flag = 0;
static void on_sigint(int sig) {
  (void)sig;
  stop_flag = 1;
}

static bool parse_budget(const char* s, double* out) {
  char* end = NULL;
  double v = strtod(s, &end);
  if (end == s || !(v > 0) || v > 1e7) return false;
  double mul = 1;
  if (!strcmp(end, "m")) mul = 60;
  else if (!strcmp(end, "h")) mul = 3600;
  else if (strcmp(end, "s") != 0 && *end) return false;
  *out = v * mul;
  return true;
}

static int usage(const char* msg, const char* arg) {
  fprintf(stderr, "kiln tune: %s%s%s\n(kiln tune --help)\n", msg, arg ? ": " : "", arg ? arg : "");
  return 2;
}

/* Reads |path| into |c|, its warnings on stderr as "kiln: warning: ...". */
static kiln_status_t read_cache(kiln_tune_cache_t* c, const char* path) {
  char* buf = NULL;
  size_t len = 0;
  FILE* w = open_memstream(&buf, &len);
  kiln_status_t s = kiln_tune_cache_read(c, path, w);
  if (w) fclose(w);
  for (char* line = buf; line && *line;) {
    char* nl = strchr(line, '\n');
    if (nl) *nl = 0;
    fprintf(stderr, "kiln: %s\n", line);
    line = nl ? nl + 1 : NULL;
  }
  free(buf);
  return s;
}

static int merge(int argc, char** argv) {
  const char* out = NULL;
  kiln_tune_cache_t c = {0};
  int n_in = 0;
  for (int i = 0; i < argc; ++i) {
    if (!strcmp(argv[i], "--merge")) continue;
    if (!strcmp(argv[i], "-o") && i + 1 < argc) {
      out = argv[++i];
    } else if (argv[i][0] == '-') {
      kiln_tune_cache_free(&c);
      return usage("unknown option with --merge", argv[i]);
    } else {
      kiln_status_t s = read_cache(&c, argv[i]);
      if (s) {
        kiln_tune_cache_free(&c);
        return kiln_cli_fail(s);
      }
      ++n_in;
    }
  }
  if (!out || n_in == 0) {
    kiln_tune_cache_free(&c);
    return usage("--merge needs input caches and -o OUT", NULL);
  }
  kiln_status_t s = kiln_tune_cache_write(&c, out);
  if (!s) printf("merged %d caches: %d records (%d lines ignored) -> %s\n", n_in, (int)c.n, (int)c.skipped, out);
  kiln_tune_cache_free(&c);
  return s ? kiln_cli_fail(s) : 0;
}

int kiln_cmd_tune(int argc, char** argv) {
  for (int i = 0; i < argc; ++i) {
    if (!strcmp(argv[i], "--help") || !strcmp(argv[i], "-h")) {
      fputs(tune_help, stdout);
      return 0;
    }
    if (!strcmp(argv[i], "--merge")) return merge(argc, argv);
  }
  char default_cache[1100];
  kiln_tune_cache_default_path(default_cache, sizeof default_cache);
  const char *model = NULL, *target = NULL, *cache_path = default_cache;
  kiln_tune_options_t o;
  kiln_tune_options_default(&o);
  o.start_s = kiln_tune_clock_s(); /* the budget counts reading the model and the graph passes too */
  for (int i = 0; i < argc; ++i) {
    const char* a = argv[i];
    const bool has = i + 1 < argc;
    long long v;
    if ((!strcmp(a, "-t") || !strcmp(a, "--target")) && has) target = argv[++i];
    else if (!strcmp(a, "--budget") && has) {
      if (!parse_budget(argv[++i], &o.budget_s)) return usage("--budget: expected e.g. 90s, 10m, 1h", argv[i]);
    } else if (!strcmp(a, "--trials") && has) {
      if (!parse_int(argv[++i], 1, 1000000, &v)) return usage("--trials: expected 1..1000000", argv[i]);
      o.trials = (int32_t)v;
    } else if (!strcmp(a, "--repeats") && has) {
      if (!parse_int(argv[++i], 1, 1000, &v)) return usage("--repeats: expected 1..1000", argv[i]);
      o.repeats = (int32_t)v;
    } else if (!strcmp(a, "--seed") && has) {
      if (!parse_int(argv[++i], 0, INT64_MAX, &v)) return usage("--seed: expected a non-negative integer", argv[i]);
      o.seed = (uint64_t)v;
    } else if (!strcmp(a, "--threads") && has) {
      if (!parse_int(argv[++i], 0, 1024, &v)) return usage("--threads: expected 0..1024", argv[i]);
      o.threads = (int32_t)v;
    } else if (!strcmp(a, "--cache") && has) cache_path = argv[++i];
    else if (!strcmp(a, "--resume")) o.resume = true;
    else if (!strcmp(a, "--precision") && has) {
      const char* pv = argv[++i];
      if (strcmp(pv, "fp32") && strcmp(pv, "fp16")) return usage("--precision: expected fp32 or fp16", pv);
      o.fp16 = !strcmp(pv, "fp16");
    } else if (!strcmp(a, "--fp16-accumulate")) o.fp16_accumulate = true;
    else if (!strcmp(a, "-O0") || !strcmp(a, "-O1")) o.opt = a[2] - '0';
    else if (a[0] == '-') return usage("unknown option or missing value", a);
    else if (!model) model = a;
    else return usage("unexpected argument", a);
  }
  if (!model) return usage("no model given", NULL);
  if (o.fp16_accumulate && !o.fp16) return usage("--fp16-accumulate needs --precision fp16", NULL);
  if (!target) return usage("no target given (-t opencl)", NULL);
  char api[32];
  snprintf(api, sizeof api, "%.*s", (int)strcspn(target, ":"), target);
  const kiln_target_t* tg = kiln_target_find(api);
  if (!tg) return usage("unknown target", target);

  kiln_tune_cache_t cache = {0};
  kiln_graph_t* g = NULL;
  kiln_device_t* dev = NULL;
  /* a missing cache is a new one; a bad line in it is skipped with a warning */
  kiln_status_t s = access(cache_path, F_OK) == 0 ? read_cache(&cache, cache_path) : NULL;
  if (!s) s = kiln_onnx_parse_model(model, NULL, kiln_allocator_system(), &g);
  /* symbolic input dims: 1, as kiln run's random inputs */
  for (int32_t k = 0; !s && k < g->n_inputs; ++k) {
    kiln_tensor_t* t = &g->tensors[g->inputs[k]];
    for (int32_t d = 0; d < t->shape.rank; ++d)
      if (t->shape.dims[d] < 0) t->shape.dims[d] = 1;
  }
  if (!s) s = kiln_graph_prepare(g);
  /* Every round's program is new code: PoCL's own kernel cache would only
   * fill the disk with variants, and with it the default build (cached
   * from earlier runs) would understate what a round's build costs, which
   * the budget is planned from. An explicit setting wins. */
  setenv("POCL_KERNEL_CACHE", "0", 0);
  kiln_device_open_options_t oo = {o.threads, true, stderr};
  if (!s) s = kiln_device_open(target, &oo, kiln_allocator_system(), &dev);
  /* the graph passes as kiln compile runs them for this device: a QDQ
   * model's pairs folded or not by the same policy, so the kernels tuned
   * are the ones the compile builds */
  kiln_compile_log_t plog = {0};
  const char* skip = NULL;
  if (!s) s = kiln_driver_int8_fold_policy(tg, o.opt, g, dev, &plog, &skip);
  if (!s) s = kiln_compile_graph_passes_except(g, o.opt, tg, skip, &plog);
  for (int32_t k = 0; k < plog.n; ++k)
    if (!strcmp(plog.entries[k].section, "note") && plog.entries[k].text) printf("note: %s\n", plog.entries[k].text);
  kiln_compile_log_free(&plog);
  kiln_tune_summary_t sum;
  if (!s) {
    signal(SIGINT, on_sigint);
    o.stop = &stop_flag;
    o.log = stdout;
    o.device = target; /* a second one for the kernels alone: their builds stop at the deadline */
    s = kiln_tune_model(g, tg, dev, &o, &cache, &sum);
    signal(SIGINT, SIG_DFL);
  }
  if (!s && cache_path == default_cache) { /* the cache folder may not exist yet */
    char dir[1100];
    snprintf(dir, sizeof dir, "%s", default_cache);
    char* slash = strrchr(dir, '/');
    if (slash && slash != dir) *slash = 0;
    s = kiln_code_cache_make_dirs(dir);
  }
  if (!s) s = kiln_tune_cache_write(&cache, cache_path);
  if (!s && sum.default_abandoned)
    printf("model: not measured (the default build was not done within the budget); wrote %s (%d records)\n",
           cache_path, (int)cache.n);
  else if (!s) {
    printf("model: %.2f ms default, %.2f ms tuned (%.2fx); %d of %d kernels improved, %d reverted on "
           "re-measurement, %d rounds, %d trials, %d rejected, %.1f s%s\nwrote %s (%d records)\n",
           sum.default_ms, sum.tuned_ms, sum.tuned_ms > 0 ? sum.default_ms / sum.tuned_ms : 1.0, (int)sum.improved,
           (int)sum.kernels, (int)sum.reverted, (int)sum.rounds, (int)sum.trials, (int)sum.rejected,
           sum.elapsed_s, stop_flag ? " (interrupted: kept what was found)" : "", cache_path, (int)cache.n);
    if (sum.default_cpu_ms > 0)
      printf("model CPU time: %.3f ms default, %.3f ms tuned per run (process CPU time, medians of paired runs)%s\n",
             sum.default_cpu_ms, sum.tuned_cpu_ms, sum.cpu_reverted ? "; the tuned model was slower: nothing kept" : "");
    if (sum.model_reverted)
      printf("model: the tuned model was slower per run than the default beside it (medians of paired runs): nothing "
             "kept\n");
  }
  /* A point's driver build the deadline abandoned (a PoCL or lavapipe
   * compile cannot be stopped) is waited for while the budget's 5% margin
   * lasts; past it the process exits without it (the system reclaims it). */
  if (kiln_tune_abandoned_wait(o.start_s + 1.05 * o.budget_s) > 0) {
    printf("tune: a build stopped at the deadline is still running in the driver: exiting without waiting for it\n");
    const int rc = s ? kiln_cli_fail(s) : 0;
    fflush(stdout);
    fflush(stderr);
    _exit(rc);
  }
  kiln_tune_join_abandoned();
  kiln_device_release(dev);
  kiln_graph_destroy(g);
  kiln_tune_cache_free(&cache);
  return s ? kiln_cli_fail(s) : 0;
}

const char* kiln_cli_tuning_path(const char* given, bool off, char* buf, size_t n, bool* implicit) {
  *implicit = false;
  if (given) return given;
  if (off) return NULL;
  kiln_tune_cache_default_path(buf, n);
  if (access(buf, F_OK) != 0) return NULL; /* nothing tuned on this machine yet */
  *implicit = true;
  return buf;
}
