/* The `kiln` command line: info, run, dot, dump and ops.
 *
 * Every subcommand prints its own --help. Errors go to stderr as
 * "kiln: error: <message>" and exit 1; usage errors exit 2; `kiln run
 * --compare` exits 3 when outputs are outside tolerance. */
#include <errno.h>
#include <limits.h>
#include <math.h>
#if defined(__GLIBC__)
#include <malloc.h>
#endif
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "frontend/onnx.h"
#include "ir/op.h"
#include "ir/passes.h"
#include "lowering/fuse.h"
#include "compiler/compare.h"
#include "runtime/device_registry.h"
#include "kiln/custom_op.h"
#include "kiln/npy.h"
#include "compiler/ref_exec.h"
#include "compiler/staged.h"
#include "api/quantize_graph.h"
#include "runtime/module_file.h"
#include "runtime/module_impl.h"
#include "api/driver.h"
#include "lowering/sparse_block.h"
#include "api/model_dims.h"
#include "tools/runner.h"
#include "tools/bench_cmd.h"
#include "tools/cli_args.h"
#include "tools/graph_info.h"
#include "tools/compile_native.h"
#include "tools/module_cmd.h"
#include "tools/quantize_cmd.h"
#include "tools/prune_cmd.h"
#include "tools/eval_cmd.h"
#include "tools/tune_cmd.h"
#include "runtime/module_sign.h"

#define MAX_ARGS 64
/* kiln run's default cap on one input's bytes (--max-input-bytes): the ONNX
 * frontend's default cap on one tensor. */
#define KILN_RUN_MAX_INPUT_BYTES (4ull << 30)

static int usage_error(const char* cmd, const char* fmt, ...) KILN_PRINTF(2, 3);
static int usage_error(const char* cmd, const char* fmt, ...) {
  fprintf(stderr, "kiln %s: ", cmd);
  va_list ap;
  va_start(ap, fmt);
  vfprintf(stderr, fmt, ap);
  va_end(ap);
  fprintf(stderr, "\nTry 'kiln %s --help'.\n", cmd);
  return 2;
}

/* ---- shared option handling ------------------------------------------ */

typedef struct {
  const char* model;
  const char* dims[MAX_ARGS]; /* SYM=VALUE */
  int n_dims;
  bool bind_rest_to_one;      /* symbols without --dim become 1 (kiln info) */
  bool no_prepare;            /* parse and bind --dim only (kiln run binds the rest) */
} load_opts_t;

/* Parses the model, binds --dim symbols in the input shapes, prepares. */
static kiln_status_t load(const load_opts_t* lo, kiln_graph_t** out) {
  kiln_graph_t* g = NULL;
  KILN_RETURN_IF_ERROR(kiln_onnx_parse_model(lo->model, NULL, kiln_allocator_system(), &g));
  for (int i = 0; i < lo->n_dims; ++i) {
    kiln_status_t s = kiln_model_bind_dim(g, lo->dims[i]);
    if (s) {
      kiln_graph_destroy(g);
      return s;
    }
  }
  char bound[1024];
  if (lo->bind_rest_to_one && kiln_model_bind_rest_to_one(g, bound, sizeof bound))
    printf("note: symbolic dims bound to 1 for costs (set with --dim):%s\n", bound);
  if (lo->no_prepare) {
    *out = g;
    return NULL;
  }
  kiln_status_t s = kiln_graph_prepare(g);
  if (s) {
    kiln_graph_destroy(g);
    return s;
  }
  *out = g;
  return NULL;
}

static bool is_help(const char* a) { return !strcmp(a, "--help") || !strcmp(a, "-h"); }

/* Strict number parsing for options: the whole string must be a number. */
static bool parse_double(const char* s, double* out) {
  char* end = NULL;
  errno = 0;
  double v = strtod(s, &end);
  if (!s[0] || *end || errno || !isfinite(v) || v < 0) return false;
  *out = v;
  return true;
}

/* --precision and its companions, shared by kiln run and kiln compile.
 * Returns 1 when argv[*i] was one (consuming its value), 0 when it is not,
 * or the usage-error exit status (2) after printing the message. */
static const char* precision_help =
    "  --precision P           fp32 (default), fp16 (fp16 weights and activations; fp16\n"
    "                          arithmetic for element-wise kernels where the device has it,\n"
    "                          else fp32 arithmetic with a warning) or auto (calibrate:\n"
    "                          fp16 only for the fused groups that keep the outputs within\n"
    "                          --tolerance of fp32) or int8 (needs --calibrate: kiln\n"
    "                          quantize's post-training quantization in memory, minmax\n"
    "                          ranges, with its per-layer report; then compiled)\n"
    "  --precision-policy FILE rules 'NAME fp16|fp32' per line: op:TYPE, node:NAME, or a\n"
    "                          plain name (a node's, else an op type); later rules win\n"
    "  --fp16-accumulate       accumulators (reductions, GEMM/conv, softmax, norms) in fp16 too\n"
    "  --fp16-workspaces       CPU: the im2col/phase workspaces GEMMs read in fp16 too\n"
    "                          (GEMM outputs are fp16 already; the C GEMM loops then\n"
    "                          convert every workspace load: ResNet-18 1.8x slower)\n"
    "  --fp16-weights-only     only the weights in fp16 (activations fp32): half the weights\n"
    "                          and no arena saving (CPU: the GEMM loops convert each weight\n"
    "                          they broadcast: 1.6-3x slower than fp32 today)\n"
    "  --calibrate DIR         auto, int8: inputs DIR/NAME.npy, or DIR/*/NAME.npy per sample\n"
    "                          (auto's default: --calibrate-count seeded random samples)\n"
    "  --calibrate-count N     auto: random calibration samples (default 4)\n"
    "  --tolerance R           auto: rtol of the outputs against fp32 (default 1e-2, atol 1e-3)\n"
    "  --write-policy FILE     write the chosen per-node policy (auto) or the effective one\n"
    "  --precision-report FILE per-group calibration results and per-kernel precisions\n";

static int parse_precision_opt(const char* cmd, int argc, char** argv, int* i, kiln_cli_precision_t* p) {
  const char* a = argv[*i];
  bool has = *i + 1 < argc;
  if (!strcmp(a, "--fp16-accumulate")) {
    p->fp16_accumulate = true;
    return 1;
  }
  if (!strcmp(a, "--fp16-workspaces")) {
    p->fp16_workspaces = true;
    return 1;
  }
  if (!strcmp(a, "--fp16-weights-only")) {
    p->weights_only = true;
    return 1;
  }
  if (!has) return 0;
  const char* v = argv[*i + 1];
  if (!strcmp(a, "--precision")) {
    if (!kiln_precision_parse_mode(v, &p->mode))
      return usage_error(cmd, "--precision '%s': expected fp32, fp16, auto or int8", v);
  } else if (!strcmp(a, "--precision-policy")) {
    p->policy_path = v;
  } else if (!strcmp(a, "--calibrate")) {
    p->calibrate_dir = v;
  } else if (!strcmp(a, "--calibrate-count")) {
    long long n;
    if (!parse_int(v, 1, 100000, &n)) return usage_error(cmd, "--calibrate-count '%s': expected an integer in 1..100000", v);
    p->calibrate_count = (int)n;
  } else if (!strcmp(a, "--tolerance")) {
    if (!parse_double(v, &p->tolerance) || p->tolerance <= 0)
      return usage_error(cmd, "--tolerance '%s': expected a positive number", v);
  } else if (!strcmp(a, "--write-policy")) {
    p->write_policy = v;
  } else if (!strcmp(a, "--precision-report")) {
    p->report_path = v;
  } else {
    return 0;
  }
  ++*i;
  return 1;
}

/* Options that only mean something with --precision fp16|auto|int8. */
static int check_precision_opts(const char* cmd, const kiln_cli_precision_t* p) {
  bool int8 = p->mode == KILN_PRECISION_INT8;
  if (int8 && !p->calibrate_dir)
    return usage_error(cmd, "%s--precision int8 needs --calibrate DIR (the calibration inputs: DIR/NAME.npy per "
                       "model input, or DIR/*/NAME.npy per sample)", "");
  if (p->mode != KILN_PRECISION_AUTO && (p->calibrate_count != 4 || p->tolerance != 1e-2))
    return usage_error(cmd, "%s--calibrate-count and --tolerance need --precision auto", "");
  if (p->mode != KILN_PRECISION_AUTO && !int8 && p->calibrate_dir)
    return usage_error(cmd, "%s--calibrate needs --precision auto or int8", "");
  if ((p->mode == KILN_PRECISION_FP32 || int8) && (p->policy_path || p->fp16_accumulate || p->fp16_workspaces || p->weights_only || p->write_policy ||
                                        p->report_path))
    return usage_error(cmd, "%s--precision-policy, --fp16-accumulate, --fp16-workspaces, --fp16-weights-only, --write-policy and --precision-report "
                       "need --precision fp16 or auto", "");
  return 0;
}

/* ---- kiln info ------------------------------------------------------- */

static const char* info_help =
    "usage: kiln info MODEL.onnx [--dim SYMBOL=SIZE ...] [--symbolic] [--fused]\n"
    "       kiln info MODULE.kiln [--verify-key KEY.pub]\n"
    "\n"
    "On a module: its target, inputs, outputs and sizes, and whether it is signed\n"
    "and by which key id (checked against KEY.pub with --verify-key; docs/TRUST.md).\n"
    "Prints the model's inputs and outputs, an op histogram, and one line per\n"
    "node with its output shape, parameter count, FLOPs and bytes moved (inputs\n"
    "read + outputs written), then totals. Symbolic dims (dim_param) are bound\n"
    "to 1 for the costs unless set with --dim, e.g. --dim N=8; --symbolic keeps\n"
    "them symbolic (costs that depend on them print as '?').\n"
    "--fused also runs the graph passes, lowering and kernel fusion and prints the\n"
    "fusion report: kernels before/after, the ops each kernel computes, and the\n"
    "intermediate bytes no longer written to and read from memory.\n";

static bool is_module_file(const char* path);

static int cmd_info(int argc, char** argv) {
  load_opts_t lo = {0};
  lo.bind_rest_to_one = true;
  bool fused = false;
  const char* verify_key = NULL;
  for (int i = 0; i < argc; ++i) {
    if (is_help(argv[i])) {
      fputs(info_help, stdout);
      return 0;
    } else if (!strcmp(argv[i], "--symbolic")) {
      lo.bind_rest_to_one = false;
    } else if (!strcmp(argv[i], "--fused")) {
      fused = true;
    } else if (!strcmp(argv[i], "--dim") && i + 1 < argc) {
      if (lo.n_dims < MAX_ARGS) lo.dims[lo.n_dims++] = argv[++i];
    } else if (!strcmp(argv[i], "--verify-key") && i + 1 < argc) {
      verify_key = argv[++i];
    } else if (argv[i][0] == '-') {
      return usage_error("info", "unknown option '%s'", argv[i]);
    } else if (!lo.model) {
      lo.model = argv[i];
    } else {
      return usage_error("info", "unexpected argument '%s'", argv[i]);
    }
  }
  if (!lo.model) return usage_error("info", "%sno model given", "");
  if (is_module_file(lo.model)) {
    if (fused || lo.n_dims || !lo.bind_rest_to_one)
      return usage_error("info", "%s: --fused, --symbolic and --dim apply to ONNX models, not modules", lo.model);
    return kiln_cmd_module_info(lo.model, verify_key);
  }
  if (verify_key) return usage_error("info", "%s: --verify-key applies to module files (.kiln)", lo.model);
  kiln_graph_t* g = NULL;
  kiln_status_t s = load(&lo, &g);
  if (s) return kiln_cli_fail(s);
  s = kiln_cli_print_graph_info(g, lo.model, fused);
  kiln_graph_destroy(g);
  return s ? kiln_cli_fail(s) : 0;
}

/* ---- kiln run -------------------------------------------------------- */

static const char* run_help =
    "usage: kiln run MODEL.onnx|MODULE.kiln [options]\n"
    "\n"
    "Runs the model (compiling it first) or a module written by `kiln compile -o`, and\n"
    "prints a summary of each output.\n"
    "  --target, -t T          a device: %s (N: index in\n"
    "                          `kiln devices`; default cpu, C built with the system compiler;\n"
    "                          without the driver kiln falls back to the CPU and says why)\n"
    "                          or ref (the reference interpreter). A module runs on its own\n"
    "                          target.\n"
    "  --strict                a GPU target that cannot be opened is an error, not a fallback;\n"
    "                          so is a node the GPU target cannot run (without it: on the CPU)\n"
    "  --tuning-cache FILE     template tiles from a cache `kiln tune` wrote (records for\n"
    "                          this device, driver and kiln version; the rest keep defaults);\n"
    "                          default: tuning.tsv in the cache folder when it exists\n"
    "  --no-tuning-cache       the default tiles, whatever the cache folder holds\n"
    "  --verify-key KEY.pub    a module must be signed by this key (`kiln keygen`,\n"
    "                          `kiln compile --sign`); unsigned or changed modules are refused\n"
    "                          before any of their code is built (docs/TRUST.md)\n"
    "  --threads N             CPU threads (default: all cores)\n"
    "  --dump DIR              write the generated source and the plan to DIR\n"
    "  --input NAME=FILE.npy   input array (repeatable); inputs not given get seeded\n"
    "                          random values (floats ~ N(0,1), ints in [0,4))\n"
    "  --seed N                seed for random inputs (default 0)\n"
    "  --dim SYMBOL=SIZE       size of a symbolic dim for random inputs (default 1)\n"
    "  --max-input-bytes N     cap on each input's bytes, random or from --input (default\n"
    "                          4 GiB); float64 --input files are rounded to float32 with a\n"
    "                          warning, an error with --strict\n"
    "  --output DIR            write every output to DIR/<name>.npy (DIR is created)\n"
    "  --compare [NAME=]FILE.npy  expected output (repeatable; without NAME, outputs in\n"
    "                          order); exit status 3 when any output is outside tolerance\n"
    "  --rtol R --atol A       tolerance for --compare (default 1e-4 / 1e-5)\n"
    "  --repeat N              run N more times after one warm-up and print\n"
    "                          'latency: median X ms, min Y ms over N runs'\n"
    "  --profile               per-kernel table from device timestamps (time, share, GFLOP/s,\n"
    "                          GB/s; slowest first) and a Chrome-trace JSON with one event per\n"
    "                          dispatch (MODEL.trace.json, or --trace FILE), for Perfetto\n"
    "  --trace FILE            where --profile writes the trace (implies --profile)\n"
    "  -O0 | -O1               graph passes and kernel fusion off / on (default -O1)\n"
    "  --layout nchw|auto      CPU: NCHWc where the layout pass chooses it (auto, the default at\n"
    "                          -O1; or KILN_LAYOUT) or NCHW everywhere (-O0 always)\n"
    "  --sparse auto|on|off    CPU: convs with block-sparse weights on the sparse kernel where at\n"
    "                          least half their blocks are zero (auto, the default), always, never\n"
    "  --check-ref             also run the reference interpreter on the same inputs and\n"
    "                          compare every output with it (--rtol/--atol, default 1e-2 /\n"
    "                          1e-3 with --precision fp16|auto); exit 3 on a mismatch\n"
    "  --progress              the progress line of the device build (the C compiler's parts,\n"
    "                          OpenCL's program and kernels, Vulkan's pipelines) on stderr even\n"
    "                          when it is not a terminal (a line per tenth of the work); on a\n"
    "                          terminal it is shown unless --quiet\n"
    "  --quiet                 no progress line\n";

typedef struct {
  double* t;
  int32_t n;
} prof_t;

static void on_node(void* user, const kiln_graph_t* g, int32_t node, double seconds) {
  prof_t* p = user;
  p->t[node] += seconds;
}

static uint64_t rng_next(uint64_t* s) {
  *s ^= *s << 13;
  *s ^= *s >> 7;
  *s ^= *s << 17;
  return *s;
}

/* Seeded values for an input named |name|: floats ~ N(0,1), ints in [0,4).
 * The stream depends only on the seed, the name and the shape, so a model
 * and the module compiled from it get the same inputs. */
static kiln_status_t random_array(const char* name, kiln_dtype_t dtype, const kiln_shape_t* sh,
                                  uint64_t seed, uint64_t max_bytes, kiln_array_t* out) {
  /* Sized before allocating: a declared shape (or --dim) may ask for any
   * number of bytes. */
  uint64_t bytes = kiln_dtype_size(dtype);
  for (int32_t d = 0; d < sh->rank; ++d)
    if (sh->dims[d] < 0 || __builtin_mul_overflow(bytes, (uint64_t)sh->dims[d], &bytes)) bytes = UINT64_MAX;
  if (bytes > max_bytes) {
    char b[160], nb[32];
    if (bytes == UINT64_MAX) snprintf(nb, sizeof nb, "more than 2^64");
    else snprintf(nb, sizeof nb, "%llu", (unsigned long long)bytes);
    return kiln_make_status(KILN_LIMIT_EXCEEDED,
                            "input '%s': random values of shape %s (%s) need %s bytes, over the "
                            "--max-input-bytes cap of %llu",
                            name, kiln_shape_format(sh, b, sizeof b), kiln_dtype_name(dtype), nb,
                            (unsigned long long)max_bytes);
  }
  KILN_RETURN_IF_ERROR(kiln_array_alloc(kiln_allocator_system(), dtype, sh, out), "input '%s'", name);
  uint64_t s = seed * 0x9E3779B97F4A7C15ull + 0x1234567;
  for (const char* c = name; *c; ++c) s = (s ^ (unsigned char)*c) * 0x100000001B3ull;
  if (!s) s = 1;
  int64_t n = kiln_shape_count(sh);
  for (int64_t i = 0; i < n; ++i) {
    if (kiln_dtype_is_float(dtype) || kiln_dtype_is_f8(dtype)) {
      double u1 = ((double)(rng_next(&s) >> 11) + 1.0) / 9007199254740993.0;
      double u2 = (double)(rng_next(&s) >> 11) / 9007199254740992.0;
      /* float8: to nearest even, saturated */
      kiln_store_f64(dtype, out->data, (size_t)i, sqrt(-2 * log(u1)) * cos(6.283185307179586 * u2));
    } else {
      kiln_store_i64(dtype, out->data, (size_t)i, (int64_t)(rng_next(&s) % 4));
    }
  }
  return NULL;
}

static kiln_status_t random_input(const kiln_graph_t* g, const kiln_tensor_t* t, uint64_t seed,
                                  const int64_t* sym_val, uint64_t max_bytes, kiln_array_t* out) {
  kiln_shape_t sh = t->shape;
  if (sh.rank < 0)
    return kiln_make_status(KILN_INVALID_ARGUMENT,
                            "input '%s' has unknown rank; pass it with --input", t->name);
  for (int32_t d = 0; d < sh.rank; ++d)
    if (sh.dims[d] < 0) {
      int32_t sym = kiln_dim_symbol(sh.dims[d]);
      sh.dims[d] = sym && sym_val[sym] >= 0 ? sym_val[sym] : 1;
    }
  return random_array(t->name, t->dtype, &sh, seed, max_bytes, out);
}

static void summarize(const char* name, const kiln_array_t* a) {
  char b[256];
  int64_t n = kiln_shape_count(&a->shape);
  double mn = INFINITY, mx = -INFINITY, sum = 0;
  for (int64_t i = 0; i < n; ++i) {
    double v = kiln_load_f64(a->dtype, a->data, (size_t)i);
    if (v < mn) mn = v;
    if (v > mx) mx = v;
    sum += v;
  }
  printf("output %s: %s%s", name, kiln_dtype_name(a->dtype), kiln_shape_format(&a->shape, b, sizeof b));
  if (n) printf("  min %.6g max %.6g mean %.6g", mn, mx, sum / (double)n);
  printf("\n  [");
  for (int64_t i = 0; i < n && i < 8; ++i) printf("%s%.6g", i ? ", " : "", kiln_load_f64(a->dtype, a->data, (size_t)i));
  printf("%s]\n", n > 8 ? ", ..." : "");
  if (n > 1 && kiln_dtype_is_float(a->dtype) && a->shape.rank >= 1) {
    int64_t arg = 0;
    for (int64_t i = 1; i < n; ++i)
      if (kiln_load_f64(a->dtype, a->data, (size_t)i) > kiln_load_f64(a->dtype, a->data, (size_t)arg)) arg = i;
    printf("  argmax %lld\n", (long long)arg);
  }
}

static int cmp_double_asc(const void* a, const void* b) {
  double x = *(const double*)a, y = *(const double*)b;
  return x < y ? -1 : x > y;
}

static double now_s(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

/* One executor behind `kiln run`: the reference interpreter, or a module
 * (compiled here from the graph, or loaded from a .kiln file) run in a
 * session on a device. */
typedef struct {
  kiln_graph_t* g;        /* NULL when running a module file */
  bool ref;
  kiln_ref_options_t* ro;
  kiln_module_t* module;
  kiln_device_t* dev;
  kiln_session_t* session;
  /* a graph with data-dependent shapes or control flow: compiled stage by
   * stage between its host nodes (compiler/staged.h), no single module */
  kiln_staged_t* staged;
} runner_t;

static kiln_status_t runner_run(runner_t* r, const kiln_array_t* in, kiln_array_t* out) {
  if (r->ref) return kiln_ref_run(r->g, in, r->ro, out);
  if (r->staged) return kiln_staged_run(r->staged, in, out);
  return kiln_session_run(r->session, in, out);
}

static void runner_destroy(runner_t* r) {
  kiln_staged_destroy(r->staged);
  kiln_session_destroy(r->session);
  kiln_device_release(r->dev);
  kiln_module_release(r->module);
  memset(r, 0, sizeof(*r));
}

/* mkdir -p: |dir| and the folders above it; an existing folder is fine,
 * anything else there is an error naming the path. */
static kiln_status_t make_dirs(const char* what, const char* dir) {
  size_t n = strlen(dir);
  char* p = malloc(n + 1);
  if (!p) return kiln_make_status(KILN_OUT_OF_MEMORY, "%s '%s'", what, dir);
  memcpy(p, dir, n + 1);
  kiln_status_t s = NULL;
  for (size_t i = 1; i <= n && !s; ++i) {
    if (p[i] != '/' && p[i] != 0) continue;
    char c = p[i];
    p[i] = 0;
    struct stat st;
    if (mkdir(p, 0777) != 0 && errno != EEXIST)
      s = kiln_make_status(KILN_IO_ERROR, "%s '%s': cannot create '%s': %s", what, dir, p, strerror(errno));
    else if (stat(p, &st) != 0 || !S_ISDIR(st.st_mode))
      s = kiln_make_status(KILN_IO_ERROR, "%s '%s': '%s' exists and is not a folder", what, dir, p);
    p[i] = c;
  }
  free(p);
  return s;
}

/* True when |path| starts with the module file magic. */
static bool is_module_file(const char* path) {
  FILE* f = fopen(path, "rb");
  if (!f) return false;
  char magic[8] = {0};
  size_t n = fread(magic, 1, sizeof magic, f);
  fclose(f);
  return n == sizeof magic && memcmp(magic, KILN_MODULE_MAGIC, sizeof magic) == 0;
}

/* Inputs of a run: what the model or module declares, filled from --input
 * files or seeded random values. */
static kiln_status_t read_input_files(const char* const* specs, int n, int32_t n_in,
                                      const char* (*name_of)(void*, int32_t),
                                      kiln_dtype_t (*dtype_of)(void*, int32_t), void* ctx,
                                      uint64_t max_bytes, bool strict, kiln_array_t* in) {
  for (int i = 0; i < n; ++i) {
    const char* eq = strchr(specs[i], '=');
    if (!eq) return kiln_make_status(KILN_INVALID_ARGUMENT, "--input '%s': expected NAME=FILE.npy", specs[i]);
    int32_t found = -1;
    for (int32_t k = 0; k < n_in; ++k) {
      const char* nm = name_of(ctx, k);
      if (strlen(nm) == (size_t)(eq - specs[i]) && !strncmp(nm, specs[i], (size_t)(eq - specs[i]))) found = k;
    }
    if (found < 0)
      return kiln_make_status(KILN_NOT_FOUND, "--input '%s': the model has no input named '%.*s'", specs[i],
                              (int)(eq - specs[i]), specs[i]);
    kiln_array_free(kiln_allocator_system(), &in[found]);
    /* float64 data for an input that is not f64 (numpy's default dtype fed
     * to an f32 model): the values are rounded to float32, which --strict
     * refuses and otherwise is said out loud. An f64 input reads it as is. */
    const bool want_f64 = dtype_of(ctx, found) == KILN_DTYPE_F64;
    kiln_npy_read_options_t ro = {.max_bytes = max_bytes, .refuse_f64 = strict && !want_f64,
                                  .f64_to_f32 = !want_f64};
    bool f64 = false;
    KILN_RETURN_IF_ERROR(kiln_npy_read_with(eq + 1, &ro, kiln_allocator_system(), &in[found], &f64),
                         "--input '%s'%s", name_of(ctx, found), strict ? " (--strict)" : "");
    if (f64)
      fprintf(stderr, "warning: --input '%s': %s holds float64 values; they were rounded to float32 "
                      "(--strict refuses this)\n", name_of(ctx, found), eq + 1);
  }
  return NULL;
}

static const char* graph_input_name(void* ctx, int32_t k) {
  const kiln_graph_t* g = ctx;
  return g->tensors[g->inputs[k]].name;
}

static const char* module_input_name(void* ctx, int32_t k) { return kiln_module_input_name(ctx, k); }

static kiln_dtype_t graph_input_dtype(void* ctx, int32_t k) {
  const kiln_graph_t* g = ctx;
  return g->tensors[g->inputs[k]].dtype;
}

static kiln_dtype_t module_input_dtype(void* ctx, int32_t k) {
  kiln_dtype_t dt = KILN_DTYPE_UNDEFINED;
  (void)kiln_module_input_shape(ctx, k, &dt);
  return dt;
}

/* --sparse: the CPU's block-sparse convs (lowering/sparse_block.h); -1 when
 * |v| is none of auto, on, off. */
static int parse_sparse(const char* v) {
  return !strcmp(v, "auto") ? KILN_SPARSE_AUTO : !strcmp(v, "on") ? KILN_SPARSE_ON : !strcmp(v, "off") ? KILN_SPARSE_OFF : -1;
}

static int cmd_run(int argc, char** argv) {
  load_opts_t lo = {0};
  const char* inputs[MAX_ARGS];
  const char* compares[MAX_ARGS];
  int n_inputs = 0, n_compares = 0, repeat = 0;
  const char* outdir = NULL;
  const char* target = NULL;
  const char* dump_dir = NULL;
  const char* trace_path = NULL;
  const char* verify_key = NULL;
  const char* tuning_path = NULL;
  bool no_tuning = false, tuning_default = false;
  char tuning_buf[1100];
  int threads = 0;
  runner_t R;
  memset(&R, 0, sizeof R);
  double rtol = 1e-4, atol = 1e-5;
  bool tol_set = false;
  kiln_cli_precision_t prec;
  kiln_cli_precision_default(&prec);
  kiln_driver_graph_t dg; /* the compile driver's graph (not a model file) */
  memset(&dg, 0, sizeof dg);
  uint64_t seed = 0;
  uint64_t max_input_bytes = KILN_RUN_MAX_INPUT_BYTES;
  bool profile = false;
  bool check_ref = false;
  bool strict = false;
  bool progress = false, quiet = false;
  int opt = 1, layout = 0, sparse = KILN_SPARSE_AUTO;
  char names[256]; /* the registry's target names, for help and errors */
  for (int i = 0; i < argc; ++i) {
    const char* a = argv[i];
    bool has = i + 1 < argc;
    int pr;
    if (is_help(a)) {
      printf(run_help, kiln_device_api_names("[:N]", names, sizeof names));
      fputs(precision_help, stdout);
      return 0;
    } else if (!strcmp(a, "--input") && has) {
      if (n_inputs < MAX_ARGS) inputs[n_inputs++] = argv[++i];
    } else if (!strcmp(a, "--compare") && has) {
      if (n_compares < MAX_ARGS) compares[n_compares++] = argv[++i];
    } else if (!strcmp(a, "--dim") && has) {
      if (lo.n_dims < MAX_ARGS) lo.dims[lo.n_dims++] = argv[++i];
    } else if (!strcmp(a, "--output") && has) {
      outdir = argv[++i];
    } else if ((!strcmp(a, "--target") || !strcmp(a, "-t")) && has) {
      target = argv[++i];
    } else if (!strcmp(a, "--rtol") && has) {
      if (!parse_double(argv[++i], &rtol))
        return usage_error("run", "--rtol '%s': expected a non-negative number", argv[i]);
      tol_set = true;
    } else if (!strcmp(a, "--atol") && has) {
      if (!parse_double(argv[++i], &atol))
        return usage_error("run", "--atol '%s': expected a non-negative number", argv[i]);
      tol_set = true;
    } else if (!strcmp(a, "--seed") && has) {
      long long v;
      if (!parse_int(argv[++i], 0, INT64_MAX, &v))
        return usage_error("run", "--seed '%s': expected a non-negative integer", argv[i]);
      seed = (uint64_t)v;
    } else if (!strcmp(a, "--max-input-bytes") && has) {
      long long v;
      if (!parse_int(argv[++i], 1, INT64_MAX, &v))
        return usage_error("run", "--max-input-bytes '%s': expected a positive integer", argv[i]);
      max_input_bytes = (uint64_t)v;
    } else if (!strcmp(a, "--repeat") && has) {
      long long v;
      if (!parse_int(argv[++i], 0, 1000000, &v))
        return usage_error("run", "--repeat '%s': expected an integer in 0..1000000", argv[i]);
      repeat = (int)v;
    } else if (!strcmp(a, "--profile")) {
      profile = true;
    } else if (!strcmp(a, "--verify-key") && has) {
      verify_key = argv[++i];
    } else if (!strcmp(a, "--tuning-cache") && has) {
      tuning_path = argv[++i];
    } else if (!strcmp(a, "--no-tuning-cache")) {
      no_tuning = true;
    } else if (!strcmp(a, "--trace") && has) {
      trace_path = argv[++i];
      profile = true;
    } else if (!strcmp(a, "--check-ref")) {
      check_ref = true;
    } else if (!strcmp(a, "--strict")) {
      strict = true;
    } else if (!strcmp(a, "--progress")) {
      progress = true;
    } else if (!strcmp(a, "--quiet")) {
      quiet = true;
    } else if (!strcmp(a, "-O0") || !strcmp(a, "-O1")) {
      opt = a[2] - '0';
    } else if (!strcmp(a, "--layout") && has) {
      layout = kiln_compile_layout_parse(argv[++i]);
      if (layout < 0) return usage_error("run", "--layout '%s': expected nchw or auto", argv[i]);
    } else if (!strcmp(a, "--sparse") && has) {
      sparse = parse_sparse(argv[++i]);
      if (sparse < 0) return usage_error("run", "--sparse '%s': expected auto, on or off", argv[i]);
    } else if (!strcmp(a, "--threads") && has) {
      long long v;
      if (!parse_int(argv[++i], 0, 1024, &v))
        return usage_error("run", "--threads '%s': expected an integer in 0..1024", argv[i]);
      threads = (int)v;
    } else if (!strcmp(a, "--dump") && has) {
      dump_dir = argv[++i];
    } else if ((pr = parse_precision_opt("run", argc, argv, &i, &prec)) != 0) {
      if (pr != 1) return pr;
    } else if (a[0] == '-') {
      return usage_error("run", "unknown option or missing value: '%s'", a);
    } else if (!lo.model) {
      lo.model = a;
    } else {
      return usage_error("run", "unexpected argument '%s'", a);
    }
  }
  if (!lo.model) return usage_error("run", "%sno model given", "");
  if (outdir) { /* before the run: a bad folder should not cost a run */
    kiln_status_t ds = make_dirs("--output", outdir);
    if (ds) return kiln_cli_fail(ds);
  }
  if (dump_dir) { /* made as --dump-graph's is, before the compile */
    kiln_status_t ds = make_dirs("--dump", dump_dir);
    if (ds) return kiln_cli_fail(ds);
  }
  int prc = check_precision_opts("run", &prec);
  if (prc) return prc;
  bool module_file = is_module_file(lo.model);
  if (verify_key && !module_file)
    return usage_error("run", "%s: --verify-key applies to module files (.kiln), not models", lo.model);
  if (tuning_path && module_file)
    return usage_error("run", "%s: a compiled module keeps the tiles it was compiled with; drop --tuning-cache",
                       lo.model);
  if (no_tuning && tuning_path) return usage_error("run", "%s--tuning-cache and --no-tuning-cache", "");
  if (!module_file)
    tuning_path = kiln_cli_tuning_path(tuning_path, no_tuning, tuning_buf, sizeof tuning_buf, &tuning_default);
  if (prec.mode != KILN_PRECISION_FP32 && module_file)
    return usage_error("run", "%s: a compiled module keeps the precision it was compiled with; drop --precision",
                       lo.model);
  if (prec.mode != KILN_PRECISION_FP32 && !tol_set) {
    rtol = 1e-2; /* the fp16 tolerances (DESIGN.md) */
    atol = 1e-3;
  }
  /* The device: --target's api and index ("opencl:1"), else the module's
   * target, else the CPU. */
  char api[32] = "cpu";
  if (target) snprintf(api, sizeof api, "%.*s", (int)strcspn(target, ":"), target);
  const kiln_target_t* ptarget = kiln_target_find(api);
  bool use_ref = !strcmp(api, "ref");
  if (!use_ref && !ptarget)
    return usage_error("run", "--target '%s': expected ref or %s", target,
                       kiln_device_api_names("[:N]", names, sizeof names));
  if (use_ref && prec.mode != KILN_PRECISION_FP32 && prec.mode != KILN_PRECISION_INT8)
    return usage_error("run", "%s--precision fp16|auto applies to compiled targets, not ref", "");
  if (module_file && (use_ref || check_ref))
    return usage_error("run", "%s: a compiled module has no graph for the reference interpreter", lo.model);
  kiln_allocator_t al = kiln_allocator_system();
  kiln_graph_t* g = NULL;
  kiln_status_t s = NULL;
  int rc = 0;
  int32_t n_in = 0, n_out = 0;
  kiln_array_t* in = NULL;
  kiln_array_t* out = NULL;
  int64_t* sym_val = NULL;
  double* ptimes = NULL;
  kiln_ref_options_t ro;
  kiln_ref_options_default(&ro);
  prof_t prof = {NULL, 0};
  if (module_file) {
    kiln_module_load_options_t mlo = {.verify_key_file = verify_key};
    if ((s = kiln_module_load_file_opts(lo.model, &mlo, al, &R.module))) goto done;
    kiln_module_info_t mi;
    kiln_module_info(R.module, &mi);
    if (!target) {
      snprintf(api, sizeof api, "%s", mi.target);
    } else if (strcmp(api, mi.target) != 0) {
      s = kiln_make_status(KILN_INVALID_ARGUMENT, "%s was compiled for target %s; recompile with -t %s",
                           lo.model, mi.target, api);
      goto done;
    }
    printf("module %s: %s target, %s, %d kernels, %d inputs, %d outputs, %.1f MB of weights (%s)\n", lo.model,
           mi.target, mi.precision, (int)mi.n_kernels, (int)mi.n_inputs, (int)mi.n_outputs,
           (double)mi.weights_bytes / 1e6, mi.options);
    n_in = mi.n_inputs;
    n_out = mi.n_outputs;
  } else {
    lo.no_prepare = true;
    if ((s = load(&lo, &g))) return kiln_cli_fail(s);
    n_in = g->n_inputs;
    n_out = g->n_outputs;
  }
  in = calloc((size_t)n_in + 1, sizeof(kiln_array_t));
  out = calloc((size_t)n_out + 1, sizeof(kiln_array_t));
  if (!in || !out) {
    s = kiln_make_status(KILN_OUT_OF_MEMORY, "out of memory");
    goto done;
  }
  if (module_file) {
    if ((s = read_input_files(inputs, n_inputs, n_in, module_input_name, module_input_dtype, R.module, max_input_bytes, strict, in)))
      goto done;
    /* --dim NAME=V on a module: the value of its dynamic dim for the random
     * inputs (dim 0; one sample's shape otherwise). */
    int64_t dyn_value = 0;
    int32_t bucket = 0; /* shape buckets: --dim seq=64 picks the bucket */
    if ((s = kiln_cli_module_dims(R.module, lo.dims, lo.n_dims, &dyn_value, &bucket))) goto done;
    for (int32_t k = 0; k < n_in; ++k) {
      if (in[k].data) continue;
      kiln_dtype_t dt;
      kiln_shape_t sh = kiln_module_bucket_input_shape(R.module, bucket, k, &dt);
      const int32_t ax = kiln_module_dim_axis(R.module, false, k);
      if (dyn_value && ax >= 0 && sh.rank > ax) sh.dims[ax] = dyn_value;
      if ((s = random_array(kiln_module_input_name(R.module, k), dt, &sh, seed, max_input_bytes, &in[k])))
        goto done;
    }
  } else {
    sym_val = malloc(sizeof(int64_t) * (size_t)(g->n_symbols + 1));
    if (!sym_val) {
      s = kiln_make_status(KILN_OUT_OF_MEMORY, "out of memory");
      goto done;
    }
    for (int32_t k = 0; k <= g->n_symbols; ++k) sym_val[k] = -1;
    if ((s = read_input_files(inputs, n_inputs, n_in, graph_input_name, graph_input_dtype, g, max_input_bytes, strict, in)))
      goto done;
    /* Check the given inputs against the declarations (binding symbols from
     * them); the other symbols (for random inputs) are 1 unless --dim set
     * them. Then shapes are static and the graph is prepared. */
    for (int32_t k = 0; k < g->n_inputs; ++k)
      if (in[k].data && (s = kiln_check_input(g, k, &in[k], sym_val))) goto done;
    for (int32_t k = 0; k < g->n_inputs; ++k)
      if (!in[k].data &&
          (s = random_input(g, &g->tensors[g->inputs[k]], seed, sym_val, max_input_bytes, &in[k])))
        goto done;
    for (int32_t k = 0; k < g->n_inputs; ++k) {
      kiln_tensor_t* t = &g->tensors[g->inputs[k]];
      if (t->shape.rank < 0 && in[k].data) t->shape = in[k].shape;
      for (int32_t d = 0; d < t->shape.rank && d < in[k].shape.rank; ++d)
        if (t->shape.dims[d] < 0) t->shape.dims[d] = in[k].shape.dims[d];
    }
  }
  R.ref = use_ref;
  R.ro = &ro;
  /* The device first: a GPU that falls back to the CPU gets CPU code. */
  if (!use_ref && (s = kiln_cli_open_device(target ? target : api, strict, threads, &R.dev))) goto done;
  if (!module_file) {
    /* The compile driver's steps (api/driver.h), as `kiln compile` takes
     * them: the graph bound to the inputs' shapes above, then prepare,
     * int8 quantization, passes, the device's answers and the pipeline.
     * The graph stays here for the reference interpreter. */
    prec.strict = strict;
    prec.seed = seed;
    if (!use_ref && !(ptarget = kiln_target_find(kiln_device_api(R.dev)))) {
      s = kiln_make_status(KILN_INTERNAL, "device api '%s' has no target", kiln_device_api(R.dev));
      goto done;
    }
    kiln_driver_request_t rq = {.model_path = lo.model, .target = use_ref ? NULL : ptarget, .opt = opt,
                                .threads = threads, .fp16_arith = -1, .precision = prec, .dump_dir = dump_dir,
                                .tuning_path = tuning_path, .tuning_default = tuning_default, .loop_limit = -1,
                                .run_device = R.dev, .layout = layout, .sparse = sparse};
    kiln_compile_log_t log = {0};
    s = kiln_driver_graph(&rq, g, &log, &dg);
    g = NULL; /* dg's now */
    int32_t printed = kiln_cli_print_log_but(&log, 0, "passes");
    kiln_program_t* prog = NULL;
    if (!s && !use_ref && kiln_graph_needs_staging(dg.g)) {
      /* data-dependent shapes or control flow (compiler/staged.h): the host
       * nodes named (on a GPU target as CPU fallbacks; --strict refuses
       * them), the stages compiled as each run meets their shapes */
      s = kiln_staged_log(dg.g, ptarget, &log);
      dg.prec.fp16_arith = R.dev->info.fp16_arith;
      dg.prec.device = kiln_device_name(R.dev);
      kiln_staged_options_t sto = {ptarget, R.dev, opt, threads, R.dev->info.loop_limit, strict, 0, &dg.prec};
      if (!s) s = kiln_staged_create(dg.g, &sto, &R.staged);
    } else if (!s && !use_ref) {
      s = kiln_driver_build(&rq, &dg, &log, &prog);
    }
    kiln_cli_print_log_but(&log, printed, "passes");
    kiln_compile_log_free(&log);
    if (s) goto done;
    g = dg.g;
    if (prog && (s = kiln_module_wrap(prog, &R.module))) goto done;
    ptimes = calloc((size_t)g->n_nodes + 1, sizeof(double));
    if (!ptimes) {
      s = kiln_make_status(KILN_OUT_OF_MEMORY, "out of memory");
      goto done;
    }
    prof = (prof_t){ptimes, g->n_nodes};
    if (profile && use_ref) {
      ro.on_node = on_node;
      ro.user = &prof;
    }
  }
  R.g = g;
  if (!use_ref) {
    kiln_session_options_t so;
    kiln_session_options_default(&so);
    so.profile = profile;
    so.threads = threads;
    so.dump_dir = dump_dir;
    so.build_progress = kiln_cli_progress_file(progress, quiet);
    if (!R.staged && (s = kiln_cli_session(R.module, R.dev, &so, &R.session))) goto done;
    if (R.session && (s = kiln_cli_first_launches(R.session, so.build_progress))) goto done;
  }
  double t0 = now_s();
  if ((s = runner_run(&R, in, out))) goto done;
  double first = now_s() - t0;
  printf("ran %s on target %s in %.2f ms\n", lo.model, use_ref ? "ref" : kiln_device_api(R.dev), first * 1e3);
  if (repeat > 0) {
    double* ts = calloc((size_t)repeat, sizeof(double));
    if (!ts) {
      s = kiln_make_status(KILN_OUT_OF_MEMORY, "out of memory");
      goto done;
    }
    for (int r = 0; r < repeat && !s; ++r) {
      kiln_array_t* tmp = calloc((size_t)n_out + 1, sizeof(kiln_array_t));
      double a0 = now_s();
      s = tmp ? runner_run(&R, in, tmp) : kiln_make_status(KILN_OUT_OF_MEMORY, "oom");
      ts[r] = now_s() - a0;
      for (int32_t k = 0; tmp && !s && k < n_out; ++k) kiln_array_free(al, &tmp[k]);
      free(tmp);
    }
    if (!s) {
      qsort(ts, (size_t)repeat, sizeof(double), cmp_double_asc);
      printf("latency: median %.3f ms, min %.3f ms over %d runs\n", ts[repeat / 2] * 1e3, ts[0] * 1e3,
             repeat);
    }
    free(ts);
    if (s) goto done;
  }
  /* A module with a dynamic dim: the plan at the value this run had (the
   * session line above is the plan at the bottom of the range). */
  int32_t dax = -1, din = 0;
  for (int32_t k = 0; R.module && k < n_in && dax < 0; ++k)
    if ((dax = kiln_module_dim_axis(R.module, false, k)) >= 0) din = k;
  if (R.session && R.module && kiln_module_dim_count(R.module) > 0 && dax >= 0 && in[din].shape.rank > dax) {
    kiln_session_memory_t sm;
    const char* dn;
    int64_t dlo, dhi;
    const int64_t dv = in[din].shape.dims[dax];
    if (!(s = kiln_module_dim(R.module, 0, &dn, &dlo, &dhi)) && !(s = kiln_session_memory_at(R.session, dv, &sm)))
      printf("dynamic dim '%s' = %lld (range %lld..%lld): arena %llu bytes, lower bound %llu (%.3fx)\n", dn,
             (long long)dv, (long long)dlo, (long long)dhi, (unsigned long long)sm.arena_bytes,
             (unsigned long long)sm.lower_bound_bytes,
             sm.lower_bound_bytes ? (double)sm.arena_bytes / (double)sm.lower_bound_bytes : 1.0);
    if (s) goto done;
  }
  /* Shape buckets: the plan of the bucket this run took */
  if (R.session && R.module && (s = kiln_cli_print_bucket_memory(R.module, R.session, in, n_in))) goto done;
  if (R.staged) {
    kiln_staged_stats_t ss;
    kiln_staged_stats(R.staged, &ss);
    printf("staged: %d stages around %d host nodes; %d stage programs compiled (%.1f s), %d runs reused one, %d "
           "stage runs on the reference kernels; %.1f ms in host nodes over all runs\n",
           ss.stages, ss.host_nodes, ss.compiles, ss.compile_s, ss.reuses, ss.on_reference, ss.host_s * 1e3);
  }
  if (profile && !use_ref && R.session) {
    kiln_profile_print_table(R.session, stdout, 40);
    char tpath[4096];
    if (!trace_path) {
      const char* base = strrchr(lo.model, '/');
      base = base ? base + 1 : lo.model;
      snprintf(tpath, sizeof tpath, "%.*s.trace.json", (int)strcspn(base, "."), base);
      trace_path = tpath;
    }
    if ((s = kiln_profile_write_trace(R.session, trace_path))) goto done;
    printf("wrote %s (Chrome trace: open in Perfetto or chrome://tracing)\n", trace_path);
  }
  if (profile && use_ref) {
    int32_t* order = malloc(sizeof(int32_t) * (size_t)(g->n_nodes + 1));
    double total = 0;
    for (int32_t k = 0; k < g->n_nodes; ++k) total += ptimes[k];
    if (order) {
      for (int32_t k = 0; k < g->n_nodes; ++k) order[k] = k;
      for (int32_t a = 1; a < g->n_nodes; ++a) /* insertion sort, slowest first */
        for (int32_t b = a; b > 0 && ptimes[order[b]] > ptimes[order[b - 1]]; --b) {
          int32_t tmp = order[b];
          order[b] = order[b - 1];
          order[b - 1] = tmp;
        }
      printf("profile (reference kernels, %d runs):\n  %-32s %-18s %10s %7s\n", 1 + repeat, "node", "op",
             "ms/run", "share");
      for (int32_t k = 0; k < g->n_nodes && k < 40; ++k) {
        const kiln_node_t* n = &g->nodes[order[k]];
        printf("  %-32.32s %-18.18s %10.3f %6.1f%%\n", n->name, n->op_type,
               ptimes[order[k]] * 1e3 / (1 + repeat), total > 0 ? 100 * ptimes[order[k]] / total : 0);
      }
      free(order);
    }
  }
  for (int32_t k = 0; k < n_out; ++k)
    summarize(module_file ? kiln_module_output_name(R.module, k) : g->tensors[g->outputs[k]].name, &out[k]);
  if (outdir) {
    for (int32_t k = 0; k < n_out; ++k) {
      char path[4096], safe[256];
      const char* nm = module_file ? kiln_module_output_name(R.module, k) : g->tensors[g->outputs[k]].name;
      size_t j = 0;
      for (; nm[j] && j < 200; ++j)
        safe[j] = (nm[j] == '/' || nm[j] == '\\' || (nm[j] == '.' && j == 0)) ? '_' : nm[j];
      safe[j] = 0;
      /* A cut name could match another output's: the index keeps them apart. */
      if (nm[j]) snprintf(safe + j, sizeof safe - j, "~%d", (int)k);
      snprintf(path, sizeof path, "%s/%s.npy", outdir, safe);
      if ((s = kiln_npy_write(path, &out[k]))) goto done;
      printf("wrote %s\n", path);
    }
  }
  if (check_ref && !use_ref) {
    kiln_array_t* ref = calloc((size_t)g->n_outputs + 1, sizeof(kiln_array_t));
    if (!ref) {
      s = kiln_make_status(KILN_OUT_OF_MEMORY, "out of memory");
      goto done;
    }
    if ((s = kiln_ref_run(g, in, NULL, ref))) {
      free(ref);
      goto done;
    }
    for (int32_t k = 0; k < g->n_outputs; ++k) {
      kiln_compare_result_t cr;
      kiln_compare(&out[k], &ref[k], rtol, atol, &cr);
      printf("check %s vs reference interpreter: %s\n", g->tensors[g->outputs[k]].name, cr.message);
      if (!cr.ok) rc = 3;
      kiln_array_free(al, &ref[k]);
    }
    free(ref);
  }
  for (int i = 0; i < n_compares; ++i) {
    const char* spec = compares[i];
    const char* eq = strchr(spec, '=');
    int32_t k = i;
    const char* file = spec;
    if (eq) {
      k = -1;
      for (int32_t j = 0; j < n_out; ++j) {
        const char* nm = module_file ? kiln_module_output_name(R.module, j) : g->tensors[g->outputs[j]].name;
        if (strlen(nm) == (size_t)(eq - spec) && !strncmp(nm, spec, (size_t)(eq - spec))) k = j;
      }
      file = eq + 1;
      if (k < 0) {
        s = kiln_make_status(KILN_NOT_FOUND, "--compare '%s': the model has no output named '%.*s'",
                             spec, (int)(eq - spec), spec);
        goto done;
      }
    } else if (k >= n_out) {
      s = kiln_make_status(KILN_INVALID_ARGUMENT, "--compare '%s': the model has only %d outputs",
                           spec, (int)n_out);
      goto done;
    }
    kiln_array_t want;
    if ((s = kiln_npy_read(file, al, &want))) goto done;
    kiln_compare_result_t cr;
    kiln_compare(&out[k], &want, rtol, atol, &cr);
    printf("compare %s vs %s: %s\n",
           module_file ? kiln_module_output_name(R.module, k) : g->tensors[g->outputs[k]].name, file, cr.message);
    if (!cr.ok) rc = 3;
    kiln_array_free(al, &want);
  }
done:
  if (s) rc = kiln_cli_fail(s);
  for (int32_t k = 0; in && k < n_in; ++k) kiln_array_free(al, &in[k]);
  for (int32_t k = 0; out && k < n_out; ++k) kiln_array_free(al, &out[k]);
  free(in);
  free(out);
  free(sym_val);
  free(ptimes);
  runner_destroy(&R);
  if (g != dg.g) kiln_graph_destroy(g);
  kiln_driver_graph_free(&dg);
  return rc;
}

/* ---- kiln compile ---------------------------------------------------- */

static const char* compile_help =
    "usage: kiln compile MODEL.onnx [-t TARGET] [-o FILE.kiln [--sign KEY.key]] [-O0|-O1]\n"
    "                    [--dim SYMBOL=SIZE ...] [--threads N] [--dump-graph DIR] [--dump DIR]\n"
    "\n"
    "Runs the graph passes, lowers every node to the tensor IR, fuses kernels and\n"
    "generates the target's code, printing what each step did. With -o it writes a\n"
    "module file (plan, kernels, weights, metadata; versioned and checksummed) that\n"
    "`kiln run FILE.kiln` and libkiln_rt run without the compiler. Without -o it\n"
    "builds the code for the device (filling the compile cache) and reports the\n"
    "memory plan. Symbolic dims are bound to 1 unless set with --dim.\n"
    "  -t, --target T     %s (default cpu)\n"
    "  -o FILE.kiln       write the module\n"
    "  --layout nchw|auto CPU: NCHWc where the layout pass chooses it (auto, the default at -O1;\n"
    "                     or KILN_LAYOUT) or NCHW everywhere (-O0 always)\n"
    "  --sparse auto|on|off  CPU: convs with block-sparse weights on the sparse kernel where at\n"
    "                     least half their blocks are zero (auto, the default), always, never\n"
    "  --device N|none    with -o and a target whose driver builds binaries (-t opencl): embed the\n"
    "                     program binary built on device N (default 0, skipped with a note when\n"
    "                     it cannot be had); a load on the same device, driver and kiln version\n"
    "                     uses it instead of building, others build the source. none: source only\n"
    "  --progress         the device build's progress line on stderr even when it is not a\n"
    "                     terminal (one line per tenth of the work); on a terminal it is shown\n"
    "                     unless --quiet\n"
    "  --quiet            no progress line\n"
    "  --cpu-target LIST  with -t cpu -o: also compile the C to machine code for these ISA\n"
    "                     levels (comma-separated: x86-64-v3, x86-64-v4, aarch64, host, none;\n"
    "                     default host), so libkiln_rt runs the module without a C compiler;\n"
    "                     the best level the running CPU has is loaded, the C is the fallback\n"
    "  --sign KEY.key     sign the module with this secret key (`kiln keygen`); load it with\n"
    "                     --verify-key KEY.pub to refuse anything else (docs/TRUST.md)\n"
    "  --dump-graph DIR   write the graph before and after the passes:\n"
    "                     DIR/graph.before.{txt,dot}, DIR/graph.after.{txt,dot}\n"
    "  --dump DIR         write the plan (kernels, schedules, tensor IR) and the generated source\n"
    "  --tuning-cache FILE  template tiles from a cache `kiln tune` wrote, for the target's\n"
    "                     device on this machine (docs/TUNING.md); default: tuning.tsv in the\n"
    "                     cache folder ($KILN_CACHE_DIR or ~/.cache/kiln) when it exists\n"
    "  --no-tuning-cache  the default tiles, whatever the cache folder holds\n"
    "  --strict           --precision fp16|auto on a target without fp16 arithmetic is an error;\n"
    "                     so is a node the GPU target cannot run (without it: a line per node\n"
    "                     it runs on the CPU of the same session)\n"
    "  --fp16-arith yes|no  with --precision fp16|auto: whether the device the module is for\n"
    "                     computes in half (OpenCL cl_khr_fp16, Vulkan shaderFloat16), instead\n"
    "                     of asking this machine's; for a module built here to run elsewhere\n"
    "                     (an OpenCL module with it then needs cl_khr_fp16 to load)\n"
    "  --loop-limit N     loop iterations one shader invocation of the device the module is for\n"
    "                     may run in all (0: none), instead of asking this machine's (lavapipe's:\n"
    "                     65535); kernels are split over more invocations to stay under it\n";

static kiln_status_t write_graph_files(const kiln_graph_t* g, const char* dir, const char* tag) {
  char path[4096];
  mkdir(dir, 0777);
  for (int k = 0; k < 2; ++k) {
    snprintf(path, sizeof path, "%s/graph.%s.%s", dir, tag, k ? "dot" : "txt");
    FILE* f = fopen(path, "w");
    if (!f) return kiln_make_status(KILN_IO_ERROR, "%s: cannot create: %s", path, strerror(errno));
    if (k) kiln_graph_write_dot(g, f);
    else kiln_graph_dump(g, f);
    if (fclose(f) != 0) return kiln_make_status(KILN_IO_ERROR, "%s: write failed", path);
    printf("wrote %s\n", path);
  }
  return NULL;
}

/* --dump-graph DIR: the graph before and after the passes, its "wrote"
 * lines after what the compile logged so far. */
typedef struct {
  const char* dir;
  const kiln_compile_log_t* log;
  int32_t printed;
} graph_dump_t;

static kiln_status_t dump_graph(void* user, const kiln_graph_t* g, bool after) {
  graph_dump_t* d = user;
  kiln_cli_print_log(d->log, d->printed);
  d->printed = d->log->n;
  return write_graph_files(g, d->dir, after ? "after" : "before");
}

/* A figure of the compile log (0 when it has none). */
static double log_figure(const kiln_compile_log_t* log, const char* section, const char* key) {
  for (int32_t i = 0; i < log->n; ++i)
    if (!strcmp(log->entries[i].section, section) &&
        log->entries[i].key && !strcmp(log->entries[i].key, key))
      return log->entries[i].value;
  return 0.0;
}

/* A compile moves the weights through several buffers of their whole size
 * (the model file, the parsed tensors, the re-laid-out constants, the
 * program's weights blob), each freed before or soon after the next is
 * filled. glibc gives blocks this large to mmap and back to the kernel at
 * free, so every one is fresh pages the kernel faults in and zeroes: for
 * ResNet-50's 102 MB about 20% of kiln's own CPU time. A compile is a short
 * process, so it keeps freed memory in the heap, where the next buffer
 * reuses the pages. */
static void compile_heap_setup(void) {
#if defined(__GLIBC__)
  mallopt(M_MMAP_MAX, 0);
  mallopt(M_TRIM_THRESHOLD, INT_MAX);
#endif
}

static int cmd_compile(int argc, char** argv) {
  compile_heap_setup();
  load_opts_t lo = {0}; /* the model and --dim (kiln_driver_compile binds the rest to 1) */
  const char* graph_dir = NULL;
  const char* dump_dir = NULL;
  const char* out_path = NULL;
  const char* sign_key = NULL;
  const char* cpu_targets = NULL;
  const char* tuning_path = NULL;
  bool no_tuning = false, tuning_default = false;
  char tuning_buf[1100];
  const char* target = "cpu";
  int opt = 1, threads = 0, layout = 0, sparse = KILN_SPARSE_AUTO;
  int32_t device = -1; /* --device: -1 device 0 if it can be had, KILN_CLI_NO_DEVICE none */
  char device_name[64];
  bool strict = false, progress = false, quiet = false;
  char names[256]; /* the registry's target names, for help and errors */
  int fp16_arith = -1; /* --fp16-arith: -1 ask the device, 0 no, 1 yes */
  long long loop_limit = -1; /* --loop-limit: -1 ask the device */
  uint64_t seed = 0;
  kiln_cli_precision_t prec;
  kiln_cli_precision_default(&prec);
  for (int i = 0; i < argc; ++i) {
    const char* a = argv[i];
    bool has = i + 1 < argc;
    int pr;
    if (is_help(a)) {
      printf(compile_help, kiln_device_api_names("", names, sizeof names));
      fputs("  --seed N           auto: seed of the random calibration inputs (default 0)\n", stdout);
      fputs(precision_help, stdout);
      return 0;
    } else if (!strcmp(a, "-O0") || !strcmp(a, "-O1")) {
      opt = a[2] - '0';
    } else if (!strcmp(a, "--layout") && has) {
      layout = kiln_compile_layout_parse(argv[++i]);
      if (layout < 0) return usage_error("compile", "--layout '%s': expected nchw or auto", argv[i]);
    } else if (!strcmp(a, "--sparse") && has) {
      sparse = parse_sparse(argv[++i]);
      if (sparse < 0) return usage_error("compile", "--sparse '%s': expected auto, on or off", argv[i]);
    } else if (!strcmp(a, "--dim") && has) {
      if (lo.n_dims < MAX_ARGS) lo.dims[lo.n_dims++] = argv[++i];
    } else if (!strcmp(a, "--dump-graph") && has) {
      graph_dir = argv[++i];
    } else if (!strcmp(a, "--dump") && has) {
      dump_dir = argv[++i];
    } else if ((!strcmp(a, "-t") || !strcmp(a, "--target")) && has) {
      target = argv[++i];
    } else if (!strcmp(a, "-o") && has) {
      out_path = argv[++i];
    } else if (!strcmp(a, "--sign") && has) {
      sign_key = argv[++i];
    } else if (!strcmp(a, "--cpu-target") && has) {
      cpu_targets = argv[++i];
    } else if (!strcmp(a, "--device") && has) {
      long long v;
      if (!strcmp(argv[++i], "none")) device = KILN_CLI_NO_DEVICE;
      else if (parse_int(argv[i], 0, 63, &v)) device = (int32_t)v;
      else return usage_error("compile", "--device '%s': expected a device index (0..63) or none", argv[i]);
    } else if (!strcmp(a, "--tuning-cache") && has) {
      tuning_path = argv[++i];
    } else if (!strcmp(a, "--no-tuning-cache")) {
      no_tuning = true;
    } else if (!strcmp(a, "--threads") && has) {
      long long v;
      if (!parse_int(argv[++i], 0, 1024, &v))
        return usage_error("compile", "--threads '%s': expected an integer in 0..1024", argv[i]);
      threads = (int)v;
    } else if (!strcmp(a, "--strict")) {
      strict = true;
    } else if (!strcmp(a, "--progress")) {
      progress = true;
    } else if (!strcmp(a, "--quiet")) {
      quiet = true;
    } else if (!strcmp(a, "--fp16-arith") && has) {
      const char* v = argv[++i];
      if (strcmp(v, "yes") && strcmp(v, "no"))
        return usage_error("compile", "--fp16-arith '%s': expected yes or no", v);
      fp16_arith = !strcmp(v, "yes");
    } else if (!strcmp(a, "--loop-limit") && has) {
      if (!parse_int(argv[++i], 0, INT64_MAX, &loop_limit))
        return usage_error("compile", "--loop-limit '%s': expected a non-negative integer", argv[i]);
    } else if (!strcmp(a, "--seed") && has) {
      long long v;
      if (!parse_int(argv[++i], 0, INT64_MAX, &v))
        return usage_error("compile", "--seed '%s': expected a non-negative integer", argv[i]);
      seed = (uint64_t)v;
    } else if ((pr = parse_precision_opt("compile", argc, argv, &i, &prec)) != 0) {
      if (pr != 1) return pr;
    } else if (a[0] == '-') {
      return usage_error("compile", "unknown option or missing value: '%s'", a);
    } else if (!lo.model) {
      lo.model = a;
    } else {
      return usage_error("compile", "unexpected argument '%s'", a);
    }
  }
  if (!lo.model) return usage_error("compile", "%sno model given", "");
  if (no_tuning && tuning_path) return usage_error("compile", "%s--tuning-cache and --no-tuning-cache", "");
  tuning_path = kiln_cli_tuning_path(tuning_path, no_tuning, tuning_buf, sizeof tuning_buf, &tuning_default);
  int prc = check_precision_opts("compile", &prec);
  if (prc) return prc;
  if (fp16_arith >= 0 && (prec.mode == KILN_PRECISION_FP32 || prec.mode == KILN_PRECISION_INT8))
    return usage_error("compile", "%s--fp16-arith needs --precision fp16 or auto", "");
  const kiln_target_t* ptarget = kiln_target_find(target);
  if (!ptarget)
    return usage_error("compile", "--target '%s': expected %s", target,
                       kiln_device_api_names("", names, sizeof names));
  if (sign_key && !out_path) return usage_error("compile", "%s--sign needs -o FILE.kiln", "");
  if (dump_dir) { /* made as --dump-graph's is, before the compile */
    kiln_status_t ds = make_dirs("--dump", dump_dir);
    if (ds) return kiln_cli_fail(ds);
  }
  if (cpu_targets && (!out_path || !ptarget->emit_native))
    return usage_error("compile", "%s--cpu-target needs -o FILE.kiln and a target with machine code (-t cpu)", "");
  const kiln_device_api_t* papi = kiln_device_api_find(target);
  if (device != -1 && (!out_path || !papi || !papi->embed_binaries))
    return usage_error("compile", "%s--device needs -o FILE.kiln and a target whose driver builds binaries (-t opencl)",
                       "");
  /* A CPU module carries this machine's machine code unless told otherwise:
   * libkiln_rt then runs it where no C compiler is. */
  if (!cpu_targets && out_path && ptarget->emit_native) cpu_targets = "host";
  /* that machine code built on a thread of its own while the module's
   * weights are written (tools/compile_native.h); a signed module is
   * signed over its whole bytes, so it is built first */
  const bool native_async = out_path && !sign_key && kiln_cli_native_async_ok(ptarget, cpu_targets);
  kiln_cli_native_job_t* native_job = NULL;
  kiln_native_build_stats_t native_stats;
  memset(&native_stats, 0, sizeof native_stats);
  /* The key is read before compiling: a bad key should not cost a compile. */
  kiln_sign_secret_key_t sk;
  memset(&sk, 0, sizeof sk);
  kiln_status_t s = sign_key ? kiln_sign_secret_key_read(sign_key, &sk) : NULL;
  if (s) return kiln_cli_fail(kiln_status_annotate(s, "--sign"));
  runner_t R;
  memset(&R, 0, sizeof R);
  kiln_program_t* prog = NULL;
  prec.strict = strict;
  prec.seed = seed;
  kiln_compile_log_t log = {0};
  graph_dump_t gd = {graph_dir, &log, 0};
  kiln_driver_request_t rq = {lo.model, lo.dims, lo.n_dims, ptarget, target, opt, threads, fp16_arith, prec,
                              dump_dir, lo.model, graph_dir ? dump_graph : NULL, &gd,
                              native_async ? NULL : cpu_targets, tuning_path, tuning_default, loop_limit, sparse,
                              NULL, layout};
  if (device >= 0) { /* its fp16 arithmetic and loop limit count too */
    snprintf(device_name, sizeof device_name, "%s:%d", target, (int)device);
    rq.device = device_name;
  }
  double t_compile = now_s();
  s = kiln_driver_compile(&rq, NULL, &log, &prog);
  if (!s && native_async && !kiln_cli_native_async_fits(prog)) {
    /* stages or buckets carry code of their own: compiled again, the
     * native code with it */
    kiln_program_destroy(prog);
    prog = NULL;
    kiln_compile_log_free(&log);
    memset(&log, 0, sizeof log);
    rq.cpu_targets = cpu_targets;
    s = kiln_driver_compile(&rq, NULL, &log, &prog);
  } else if (!s && native_async) {
    s = kiln_cli_native_start(ptarget, prog, cpu_targets, &native_job);
  }
  t_compile = now_s() - t_compile;
  kiln_cli_print_log(&log, gd.printed);
  /* where the time went: the pipeline's figures, then the device's build */
  double passes_ms = log_figure(&log, "passes", "ms"), lower_ms = log_figure(&log, "timing", "lowering_ms");
  double codegen_ms = log_figure(&log, "timing", "codegen_ms");
  kiln_compile_log_free(&log);
  if (s) goto done;
  if (out_path &&
      (s = kiln_cli_embed_binaries(prog, target, device, threads, kiln_cli_progress_file(progress, quiet))))
    goto done;
  if (out_path) {
    double t_write = now_s();
    if ((s = native_job ? kiln_module_write_file_then(prog, out_path, kiln_cli_native_wait, native_job)
             : sign_key ? kiln_module_write_signed_file(prog, out_path, &sk)
                        : kiln_module_write_file(prog, out_path)))
      goto done;
    t_write = now_s() - t_write;
    struct stat st;
    printf("wrote %s (%.1f KB)\n", out_path, stat(out_path, &st) == 0 ? (double)st.st_size / 1e3 : 0.0);
    if (native_job) {
      kiln_cli_native_finish(native_job, &native_stats);
      native_job = NULL;
      printf("compile time %.2f s: graph passes %.1f ms, lowering %.1f ms, %s code generation %.1f ms, "
             "the rest of the pipeline %.1f ms; C compiler %s %.1f ms (%.1f s of CPU, %d part%s on %d job%s, %d reused) "
             "beside writing the module, %.1f ms for both\n",
             t_compile + t_write, passes_ms, lower_ms, target, codegen_ms,
             t_compile * 1e3 - passes_ms - lower_ms - codegen_ms, native_stats.compiler, native_stats.wall_s * 1e3,
             native_stats.compiler_cpu_s, (int)native_stats.parts, native_stats.parts == 1 ? "" : "s",
             (int)native_stats.jobs, native_stats.jobs == 1 ? "" : "s", (int)native_stats.parts_reused, t_write * 1e3);
    }
    if (sign_key) {
      char id[KILN_SIGN_KEY_ID_TEXT + 1];
      kiln_sign_key_id_text(sk.pub.id, id);
      printf("signed with %s (key id %s)\n", sign_key, id);
    }
  } else {
    /* No file: build the device code now (fills the cache) and report the
     * memory plan the runtime would use. */
    if ((s = kiln_module_wrap(prog, &R.module))) goto done;
    prog = NULL;
    kiln_session_options_t so;
    kiln_session_options_default(&so);
    so.threads = threads;
    so.dump_dir = dump_dir;
    so.build_progress = kiln_cli_progress_file(progress, quiet);
    s = kiln_cli_open_device(target, true, threads, &R.dev);
    double t_build = now_s();
    if (!s) s = kiln_cli_session(R.module, R.dev, &so, &R.session);
    t_build = now_s() - t_build;
    if (!s)
      printf("compile time %.2f s: graph passes %.1f ms, lowering %.1f ms, %s code generation %.1f ms, "
             "the rest of the pipeline %.1f ms, device build (%s) %.1f ms\n",
             t_compile + t_build, passes_ms, lower_ms, target, codegen_ms,
             t_compile * 1e3 - passes_ms - lower_ms - codegen_ms,
             !strcmp(kiln_device_api(R.dev), "cpu") ? "the C compiler" : "the driver", t_build * 1e3);
  }
done:
  kiln_cli_native_finish(native_job, NULL); /* an error before the write: the build ends first */
  kiln_sign_secret_key_wipe(&sk);
  kiln_program_destroy(prog);
  runner_destroy(&R);
  return s ? kiln_cli_fail(s) : 0;
}

/* ---- kiln dot / dump / ops ------------------------------------------- */

static int cmd_graph_print(const char* cmd, int argc, char** argv) {
  load_opts_t lo = {0};
  const char* outpath = NULL;
  for (int i = 0; i < argc; ++i) {
    if (is_help(argv[i])) {
      if (!strcmp(cmd, "dot"))
        printf("usage: kiln dot MODEL.onnx [-o FILE.dot] [--dim SYMBOL=SIZE ...]\n\n"
               "Writes the graph as Graphviz dot (stdout by default); render with\n"
               "  dot -Tsvg FILE.dot -o graph.svg\n");
      else
        printf("usage: kiln dump MODEL.onnx [-o FILE] [--dim SYMBOL=SIZE ...]\n\n"
               "Writes the graph IR as text after shape inference: inputs, weights,\n"
               "one line per node with attributes and inferred output types.\n");
      return 0;
    } else if (!strcmp(argv[i], "-o") && i + 1 < argc) {
      outpath = argv[++i];
    } else if (!strcmp(argv[i], "--dim") && i + 1 < argc) {
      if (lo.n_dims < MAX_ARGS) lo.dims[lo.n_dims++] = argv[++i];
    } else if (argv[i][0] == '-') {
      return usage_error(cmd, "unknown option '%s'", argv[i]);
    } else if (!lo.model) {
      lo.model = argv[i];
    } else {
      return usage_error(cmd, "unexpected argument '%s'", argv[i]);
    }
  }
  if (!lo.model) return usage_error(cmd, "%sno model given", "");
  kiln_graph_t* g = NULL;
  kiln_status_t s = load(&lo, &g);
  if (s) return kiln_cli_fail(s);
  FILE* f = outpath ? fopen(outpath, "w") : stdout;
  if (!f) {
    kiln_graph_destroy(g);
    return kiln_cli_fail(kiln_make_status(KILN_IO_ERROR, "%s: cannot create: %s", outpath, strerror(errno)));
  }
  if (!strcmp(cmd, "dot")) kiln_graph_write_dot(g, f);
  else kiln_graph_dump(g, f);
  int rc = 0;
  if (outpath && fclose(f) != 0)
    rc = kiln_cli_fail(kiln_make_status(KILN_IO_ERROR, "%s: write failed", outpath));
  kiln_graph_destroy(g);
  return rc;
}

static int cmd_ops(int argc, char** argv) {
  if (argc && is_help(argv[0])) {
    printf("usage: kiln ops [--plugin LIB.so ...]\n\nLists the ONNX ops (domain ai.onnx) kiln supports, then the\n"
           "ops of the plugins loaded (domain/name, version and plugin).\n");
    return 0;
  }
  if (argc) return usage_error("ops", "unexpected argument '%s'", argv[0]);
  for (size_t i = 0; i < kiln_op_count(); ++i) printf("%s\n", kiln_op_at(i)->op_type);
  for (int32_t i = 0; i < kiln_custom_op_count(); ++i) {
    const kiln_custom_op_t* op = kiln_custom_op_at(i);
    printf("%s/%s version %d (plugin %s)\n", op->domain, op->name, (int)op->version, kiln_custom_op_plugin(op));
  }
  return 0;
}

static const char* main_help =
    "usage: kiln COMMAND [args]\n"
    "\n"
    "kiln compiles and runs ONNX models.\n"
    "\n"
    "commands:\n"
    "  info MODEL.onnx   inputs/outputs, op histogram, per-layer shapes, params, FLOPs, bytes\n"
    "  run MODEL.onnx|MODULE.kiln  compile (or load) and run (random or .npy inputs), compare\n"
    "  compile MODEL.onnx  graph passes, lowering, fusion, code generation; -o writes a\n"
    "                    module file (.kiln) that `kiln run` runs without the compiler\n"
    "  quantize MODEL.onnx --calibrate DIR -o OUT.onnx  post-training int8 quantization\n"
    "                    into a QDQ ONNX model, with a per-layer SQNR report\n"
    "  prune MODEL.onnx -o OUT.onnx --ratio R  structured channel pruning (also --flops,\n"
    "                    --latency-ms, --calibrate DIR --tolerance T; --analyze)\n"
    "  eval MODEL.onnx --variants fp32,fp16,int8,auto,prune:R  latency, size and accuracy\n"
    "                    of each variant compiled for the target, in one table\n"
    "  keygen -o KEYBASE  an Ed25519 key pair for signing modules (docs/TRUST.md)\n"
    "  tune MODEL.onnx -t T  measure the template kernels' tiles into a tuning cache\n"
    "  devices           the CPU, OpenCL and Vulkan devices kiln can use\n"
    "  bench             kernel microbenchmarks (GFLOP/s, GB/s, % of measured peak)\n"
    "  dot MODEL.onnx    Graphviz dot of the graph\n"
    "  dump MODEL.onnx   text dump of the graph IR after shape inference\n"
    "  ops               list supported ONNX ops\n"
    "\n"
    "'kiln COMMAND --help' describes each command. --plugin LIB.so (any command,\n"
    "repeatable) loads a plugin of custom ops first (include/kiln/custom_op.h).\n";

/* --plugin LIB.so (any command, repeatable; include/kiln/custom_op.h):
 * loaded before the command runs and taken out of argv. */
static int load_plugins(int* argc, char** argv) {
  int o = 0;
  for (int i = 0; i < *argc; ++i) {
    if (!strcmp(argv[i], "--plugin")) {
      if (i + 1 >= *argc) {
        fprintf(stderr, "kiln: --plugin needs the path of a plugin library\n");
        return 2;
      }
      kiln_status_t s = kiln_plugin_load(argv[++i]);
      if (s) return kiln_cli_fail(s);
      continue;
    }
    argv[o++] = argv[i];
  }
  *argc = o;
  argv[o] = NULL;
  return 0;
}

int main(int argc, char** argv) {
  const int prc = load_plugins(&argc, argv);
  if (prc) return prc;
  if (argc < 2 || is_help(argv[1])) {
    fputs(main_help, argc < 2 ? stderr : stdout);
    return argc < 2 ? 2 : 0;
  }
  const char* cmd = argv[1];
  if (!strcmp(cmd, "info")) return cmd_info(argc - 2, argv + 2);
  if (!strcmp(cmd, "run")) return cmd_run(argc - 2, argv + 2);
  if (!strcmp(cmd, "dot") || !strcmp(cmd, "dump")) return cmd_graph_print(cmd, argc - 2, argv + 2);
  if (!strcmp(cmd, "ops")) return cmd_ops(argc - 2, argv + 2);
  if (!strcmp(cmd, "compile")) return cmd_compile(argc - 2, argv + 2);
  if (!strcmp(cmd, "bench")) return kiln_cmd_bench(argc - 1, argv + 1);
  if (!strcmp(cmd, "devices")) return kiln_cmd_devices(argc - 2, argv + 2);
  if (!strcmp(cmd, "keygen")) return kiln_cmd_keygen(argc - 2, argv + 2);
  if (!strcmp(cmd, "quantize")) return kiln_cmd_quantize(argc - 2, argv + 2);
  if (!strcmp(cmd, "prune")) return kiln_cmd_prune(argc - 2, argv + 2);
  if (!strcmp(cmd, "eval")) return kiln_cmd_eval(argc - 2, argv + 2);
  if (!strcmp(cmd, "tune")) return kiln_cmd_tune(argc - 2, argv + 2);
  fprintf(stderr, "kiln: unknown command '%s'\n\n%s", cmd, main_help);
  return 2;
}
