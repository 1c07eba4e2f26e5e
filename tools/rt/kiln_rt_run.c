/* kiln-rt-run: runs a .kiln module with nothing but libkiln_rt -- what an
 * application that ships compiled models does, and the proof that the
 * runtime library stands alone (no compiler, no ONNX, no protobuf).
 *
 *   kiln-rt-run MODULE.kiln [--device cpu|opencl[:N]|vulkan[:N]]
 *               [--input NAME=FILE.npy ...] [--output DIR] [--runs N]
 *               [--max-io-bytes N] [--verify-key KEY.pub] [--dim NAME=VALUE] [--no-map]
 *
 * --dim sets a module's dynamic dim (kiln compile --dim NAME=LO..HI) for
 * the zero inputs; inputs from files bring their own (dim 0), and the I/O
 * cap is checked at the top of the dim's range. A module with shape
 * buckets (kiln compile --dim seq=16,64,128) takes --dim seq=64 too: the
 * zero inputs then have that bucket's shapes (at most one --dim of each).
 * Inputs not given are zero. An --input naming no input of the module, or
 * naming one twice, is an error that lists the module's inputs. Every input
 * and output's byte size is checked, overflow-safe, against a cap before
 * anything is allocated (--max-io-bytes, else the environment variable
 * KILN_MAX_IO_BYTES, else 16 GiB, the ONNX loader's default weights cap):
 * a module's I/O shapes come from the file, and a forged one must not make
 * us allocate terabytes. Outputs are written as DIR/<name>.npy (DIR is
 * created; '/', '\' and a leading '.' in a name become '_'). With --runs
 * N > 1 the runs are pipelined through the session's slots (enqueue the next
 * before waiting for the previous) and the throughput is printed. With
 * --verify-key the module must be signed by that key (docs/TRUST.md);
 * anything else is refused before its code is built. The module file is
 * mapped and its weights used in place (kiln_module_load_options_t.no_map);
 * --no-map reads and copies it instead. The times printed -- module load,
 * session build, first run and their sum -- are what an app pays at start.
 *
 *   kiln-rt-run MODULE.kiln --clients N [--max-batch N] [--max-delay-us US]
 *               [--requests N | --seconds S] [--sample-module M1.kiln]
 *
 * drives the dynamic batcher (include/kiln/batcher.h, tools/rt/rt_clients.c):
 * N client threads send single-sample requests, first each with its own
 * session of the batch-1 module (--sample-module; MODULE itself when its
 * batch is 1), then all through one batcher of MODULE, and the throughput
 * and p50/p99 latency of both are printed (--requests per client and phase,
 * default 20, or --seconds per phase). */
#include <errno.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>

#include "kiln/custom_op.h"
#include "kiln/npy.h"
#include "kiln/runtime.h"
#include "tools/rt/rt_clients.h"

#define DEFAULT_MAX_IO_BYTES (16ull << 30)

static const char usage[] =
    "usage: kiln-rt-run MODULE.kiln [--device D] [--input NAME=FILE.npy ...] [--output DIR] [--runs N] "
    "[--max-io-bytes N] [--verify-key KEY.pub] [--plugin LIB.so ...] [--dim NAME=VALUE] [--no-map]\n"
    "       kiln-rt-run MODULE.kiln --clients N [--max-batch N] [--max-delay-us US] [--requests N | --seconds S]\n"
    "                   [--sample-module M1.kiln] [--device D] [--verify-key KEY.pub]\n";

static double now_s(void) {
  struct timespec t;
  clock_gettime(CLOCK_MONOTONIC, &t);
  return (double)t.tv_sec + 1e-9 * (double)t.tv_nsec;
}

static int fail(kiln_status_t s) {
  fprintf(stderr, "kiln-rt-run: error: %s\n", kiln_status_message(s));
  kiln_status_free(s);
  return 1;
}

/* A whole decimal number in [lo, hi], nothing after it. */
static bool parse_u64(const char* s, unsigned long long lo, unsigned long long hi, unsigned long long* out) {
  if (!s || !*s || *s == '-' || *s == '+') return false;
  char* end = NULL;
  errno = 0;
  unsigned long long v = strtoull(s, &end, 10);
  if (errno || *end || v < lo || v > hi) return false;
  *out = v;
  return true;
}

/* Bytes of |dtype| x |shape|, overflow-checked; false when the shape has no
 * size (unknown dims) or the product passes 64 bits. */
static bool io_bytes(kiln_dtype_t dtype, const kiln_shape_t* sh, unsigned long long* out) {
  unsigned long long n = kiln_dtype_size(dtype);
  if (!n || sh->rank < 0) return false;
  for (int32_t d = 0; d < sh->rank; ++d) {
    if (sh->dims[d] < 0) return false;
    if (__builtin_mul_overflow(n, (unsigned long long)sh->dims[d], &n)) return false;
  }
  *out = n;
  return true;
}

/* "image (f32 [1,1,28,28]), mask (u8 [1,28,28])". */
static void list_inputs(const kiln_module_t* m, int32_t n, char* out, size_t cap) {
  size_t at = 0;
  out[0] = 0;
  for (int32_t k = 0; k < n && at < cap; ++k) {
    kiln_dtype_t dt;
    kiln_shape_t sh = kiln_module_input_shape(m, k, &dt);
    char shape[160];
    kiln_shape_format(&sh, shape, sizeof shape);
    at += (size_t)snprintf(out + at, cap - at, "%s%s (%s %s)", k ? ", " : "", kiln_module_input_name(m, k),
                           kiln_dtype_name(dt), shape);
  }
  if (!n) snprintf(out, cap, "(none)");
}

/* Checks every --input against the module: NAME=FILE with NAME one of its
 * inputs, each at most once; |which[i]| gets the input index of argument i. */
static kiln_status_t match_inputs(const kiln_module_t* m, int32_t n_in, const char* const* args, int n_args,
                                  int32_t* which) {
  for (int i = 0; i < n_args; ++i) {
    const char* eq = strchr(args[i], '=');
    which[i] = -1;
    if (!eq || eq == args[i] || !eq[1])
      return kiln_make_status(KILN_INVALID_ARGUMENT, "--input '%s' is not NAME=FILE.npy", args[i]);
    size_t len = (size_t)(eq - args[i]);
    for (int32_t k = 0; k < n_in && which[i] < 0; ++k) {
      const char* name = kiln_module_input_name(m, k);
      if (strlen(name) == len && !memcmp(name, args[i], len)) which[i] = k;
    }
    if (which[i] < 0) {
      char list[1024];
      list_inputs(m, n_in, list, sizeof list);
      return kiln_make_status(KILN_INVALID_ARGUMENT, "--input names '%.*s', which is not an input of the module; "
                              "its inputs are: %s", (int)len, args[i], list);
    }
    for (int j = 0; j < i; ++j)
      if (which[j] == which[i])
        return kiln_make_status(KILN_INVALID_ARGUMENT, "input '%s' is given twice (--input %s and --input %s)",
                                kiln_module_input_name(m, which[i]), args[j], args[i]);
  }
  return NULL;
}

/* Every input and output of the module fits the cap; inputs from files
 * are also checked by file size before the reader allocates. */
static kiln_status_t check_io_sizes(const kiln_module_t* m, int32_t n_in, int32_t n_out, const char* const* args,
                                    int n_args, const int32_t* which, unsigned long long cap) {
  for (int t = 0; t < 2; ++t) {
    for (int32_t k = 0; k < (t ? n_out : n_in); ++k) {
      kiln_dtype_t dt;
      /* the largest shape bucket's shapes (the last) */
      const int32_t nb = kiln_module_bucket_count(m), last = nb ? nb - 1 : 0;
      kiln_shape_t sh = t ? kiln_module_bucket_output_shape(m, last, k, &dt) : kiln_module_bucket_input_shape(m, last, k, &dt);
      const char* name = t ? kiln_module_output_name(m, k) : kiln_module_input_name(m, k);
      const char* dim;
      int64_t lo, hi;
      const int32_t ax = kiln_module_dim_axis(m, t != 0, k);
      if (kiln_module_dim_count(m) > 0 && ax >= 0 && sh.rank > ax && !kiln_module_dim(m, 0, &dim, &lo, &hi))
        sh.dims[ax] = hi;
      char shape[160];
      kiln_shape_format(&sh, shape, sizeof shape);
      unsigned long long bytes = 0;
      if (!io_bytes(dt, &sh, &bytes))
        return kiln_make_status(KILN_LIMIT_EXCEEDED, "%s '%s' (%s %s) has a byte size that overflows 64 bits",
                                t ? "output" : "input", name, kiln_dtype_name(dt), shape);
      if (bytes > cap)
        return kiln_make_status(KILN_LIMIT_EXCEEDED,
                                "%s '%s' (%s %s) needs %llu bytes, above the %llu-byte I/O cap "
                                "(--max-io-bytes or KILN_MAX_IO_BYTES)",
                                t ? "output" : "input", name, kiln_dtype_name(dt), shape, bytes, cap);
    }
  }
  for (int i = 0; i < n_args; ++i) {
    const char* file = strchr(args[i], '=') + 1;
    struct stat sb;
    if (stat(file, &sb) == 0 && S_ISREG(sb.st_mode) && (unsigned long long)sb.st_size > cap &&
        (unsigned long long)sb.st_size - cap > 65536) /* the .npy header */
      return kiln_make_status(KILN_LIMIT_EXCEEDED, "input '%s': %s is %lld bytes, above the %llu-byte I/O cap",
                              kiln_module_input_name(m, which[i]), file, (long long)sb.st_size, cap);
  }
  return NULL;
}

static int bad_number(const char* flag, const char* value, const char* range) {
  fprintf(stderr, "kiln-rt-run: error: %s '%s' is not a whole number in %s\n", flag, value, range);
  return 2;
}

/* Parses the command line; 0, or the exit status of a usage error (printed). */
static int parse_args(int argc, char** argv, const char** path, const char** device, const char** outdir,
                      const char** inputs, int* n_inputs, unsigned long long* runs, unsigned long long* cap,
                      const char** verify_key, const char** dims, bool* no_map, rt_clients_options_t* co) {
  const char* env = getenv("KILN_MAX_IO_BYTES");
  if (env && !parse_u64(env, 1, ULLONG_MAX, cap)) {
    fprintf(stderr, "kiln-rt-run: error: KILN_MAX_IO_BYTES='%s' is not a positive whole number of bytes\n", env);
    return 2;
  }
  unsigned long long v = 0;
  for (int i = 1; i < argc; ++i) {
    const bool has = i + 1 < argc;
    if (!strcmp(argv[i], "--device") && has) *device = argv[++i];
    else if (!strcmp(argv[i], "--output") && has) *outdir = argv[++i];
    else if (!strcmp(argv[i], "--input") && has) inputs[(*n_inputs)++] = argv[++i];
    else if (!strcmp(argv[i], "--verify-key") && has) *verify_key = argv[++i];
    else if (!strcmp(argv[i], "--dim") && has) {
      /* the dynamic dim and the bucketed dim: at most one each */
      if (dims[0] && dims[1]) {
        fprintf(stderr, "kiln-rt-run: error: --dim given more than twice\n");
        return 2;
      }
      dims[dims[0] ? 1 : 0] = argv[++i];
    }
    else if (!strcmp(argv[i], "--no-map")) *no_map = true;
    else if (!strcmp(argv[i], "--plugin") && has) {
      /* a module using plugin ops loads only with their plugins */
      kiln_status_t s = kiln_plugin_load(argv[++i]);
      if (s) return fail(s);
    }
    else if (!strcmp(argv[i], "--runs") && has) {
      if (!parse_u64(argv[++i], 1, 1000000000, runs)) {
        fprintf(stderr, "kiln-rt-run: error: --runs '%s' is not a whole number in [1, 1e9]\n", argv[i]);
        return 2;
      }
    } else if (!strcmp(argv[i], "--clients") && has) {
      if (!parse_u64(argv[++i], 1, 1024, &v)) return bad_number("--clients", argv[i], "[1, 1024]");
      co->clients = (int32_t)v;
    } else if (!strcmp(argv[i], "--max-batch") && has) {
      if (!parse_u64(argv[++i], 1, 1 << 20, &v)) return bad_number("--max-batch", argv[i], "[1, 2^20]");
      co->max_batch = (int32_t)v;
    } else if (!strcmp(argv[i], "--max-delay-us") && has) {
      if (!parse_u64(argv[++i], 0, 60000000, &v)) return bad_number("--max-delay-us", argv[i], "[0, 6e7]");
      co->max_delay_us = (int64_t)v;
    } else if (!strcmp(argv[i], "--requests") && has) {
      if (!parse_u64(argv[++i], 1, 1000000000, &v)) return bad_number("--requests", argv[i], "[1, 1e9]");
      co->requests = (int64_t)v;
    } else if (!strcmp(argv[i], "--seconds") && has) {
      if (!parse_u64(argv[++i], 1, 86400, &v)) return bad_number("--seconds", argv[i], "[1, 86400]");
      co->seconds = (double)v;
    } else if (!strcmp(argv[i], "--sample-module") && has) {
      co->sample_module = argv[++i];
    } else if (!strcmp(argv[i], "--max-io-bytes") && has) {
      if (!parse_u64(argv[++i], 1, ULLONG_MAX, cap)) {
        fprintf(stderr, "kiln-rt-run: error: --max-io-bytes '%s' is not a positive whole number of bytes\n",
                argv[i]);
        return 2;
      }
    } else if (argv[i][0] != '-' && !*path) *path = argv[i];
    else {
      fputs(usage, stderr);
      return 2;
    }
  }
  if (!*path) {
    fputs(usage, stderr);
    return 2;
  }
  if (co->clients && (*n_inputs || *outdir || *runs != 1)) {
    fprintf(stderr, "kiln-rt-run: error: --clients sends its own seeded samples: it takes no --input, "
                    "--output or --runs\n");
    return 2;
  }
  if (!co->clients && (co->max_batch || co->max_delay_us >= 0 || co->requests || co->seconds > 0 ||
                       co->sample_module)) {
    fprintf(stderr, "kiln-rt-run: error: --max-batch, --max-delay-us, --requests, --seconds and "
                    "--sample-module go with --clients\n");
    return 2;
  }
  return 0;
}

int main(int argc, char** argv) {
  const char* path = NULL;
  const char* device = NULL;
  const char* outdir = NULL;
  const char* verify_key = NULL;
  const char* dims[2] = {NULL, NULL};
  const char** inputs = calloc((size_t)argc + 1, sizeof(char*));
  int32_t* which = calloc((size_t)argc + 1, sizeof(int32_t));
  int n_inputs = 0;
  unsigned long long runs = 1, cap = DEFAULT_MAX_IO_BYTES;
  if (!inputs || !which) {
    fprintf(stderr, "kiln-rt-run: out of memory\n");
    free(inputs);
    free(which);
    return 1;
  }
  rt_clients_options_t co = {.max_delay_us = -1};
  bool no_map = false;
  const int usage_rc = parse_args(argc, argv, &path, &device, &outdir, inputs, &n_inputs, &runs, &cap, &verify_key,
                                  dims, &no_map, &co);
  if (usage_rc) {
    free(inputs);
    free(which);
    return usage_rc;
  }
  kiln_allocator_t al = kiln_allocator_system();
  kiln_module_t* m = NULL;
  kiln_device_t* d = NULL;
  kiln_session_t* s = NULL;
  kiln_array_t* in = NULL;
  kiln_array_t* out = NULL;
  kiln_module_info_t mi = {0};
  kiln_module_load_options_t lo = {.verify_key_file = verify_key, .no_map = no_map};
  const double t_load = now_s();
  kiln_status_t st = kiln_module_load_file_opts(path, &lo, al, &m);
  const double t_loaded = now_s();
  if (st) goto done;
  if (co.clients) {
    co.device = device;
    co.verify_key = verify_key;
    if (co.max_delay_us < 0) co.max_delay_us = 2000;
    if (!co.requests) co.requests = 20;
    st = rt_clients_run(m, path, &co);
    goto done;
  }
  kiln_module_info(m, &mi);
  in = calloc((size_t)mi.n_inputs + 1, sizeof(kiln_array_t));
  out = calloc((size_t)mi.n_outputs + 1, sizeof(kiln_array_t));
  if (!in || !out) {
    st = kiln_make_status(KILN_OUT_OF_MEMORY, "out of memory");
    goto done;
  }
  /* --dim: the dynamic dim's value (dim 0) and the shape bucket of the
   * zero inputs */
  int64_t dim_value = 0;
  int32_t bucket = 0;
  for (int i = 0; i < 2 && dims[i] && !st; ++i) {
    st = kiln_module_bucket_parse(m, dims[i], &bucket);
    if (st && kiln_status_code(st) == KILN_NOT_FOUND) {
      kiln_status_free(st);
      st = kiln_module_dim_parse(m, dims[i], &dim_value);
    }
  }
  if (!st) st = match_inputs(m, mi.n_inputs, inputs, n_inputs, which);
  if (!st) st = check_io_sizes(m, mi.n_inputs, mi.n_outputs, inputs, n_inputs, which, cap);
  for (int i = 0; i < n_inputs && !st; ++i) {
    st = kiln_npy_read(strchr(inputs[i], '=') + 1, al, &in[which[i]]);
    if (st) st = kiln_status_annotate(st, "input '%s'", kiln_module_input_name(m, which[i]));
  }
  for (int32_t k = 0; k < mi.n_inputs && !st; ++k) {
    if (in[k].data) continue;
    kiln_dtype_t dt;
    kiln_shape_t sh = kiln_module_bucket_input_shape(m, bucket, k, &dt);
    const int32_t ax = kiln_module_dim_axis(m, false, k);
    if (dim_value && ax >= 0 && sh.rank > ax) sh.dims[ax] = dim_value;
    st = kiln_array_alloc(al, dt, &sh, &in[k]);
    if (st) st = kiln_status_annotate(st, "zeros for input '%s'", kiln_module_input_name(m, k));
  }
  if (!st) st = kiln_device_open(device ? device : mi.target, NULL, al, &d);
  double t_session = now_s();
  if (!st) st = kiln_session_create(m, d, NULL, &s);
  if (st) goto done;
  double t0 = now_s();
  /* load and build cost, apart from reading the inputs: what an app pays
   * once at start (a CPU module with machine code runs no compiler) */
  printf("%s: module loaded in %.1f ms, session built in %.1f ms\n", path, (t_loaded - t_load) * 1e3,
         (t0 - t_session) * 1e3);
  uint64_t prev = 0;
  bool have_prev = false;
  double first_s = 0;
  for (unsigned long long r = 0; r < runs && !st; ++r) {
    uint64_t run;
    st = kiln_session_enqueue(s, in, &run);
    if (!st && have_prev) {
      for (int32_t k = 0; k < mi.n_outputs; ++k) kiln_array_free(al, &out[k]);
      st = kiln_session_wait(s, prev, out);
    }
    prev = run;
    have_prev = !st;
    if (r == 0 && !st) {
      /* the first run alone, so load + first run can be reported */
      for (int32_t k = 0; k < mi.n_outputs; ++k) kiln_array_free(al, &out[k]);
      st = kiln_session_wait(s, prev, out);
      have_prev = false;
      first_s = now_s() - t0;
    }
  }
  if (!st && have_prev) {
    for (int32_t k = 0; k < mi.n_outputs; ++k) kiln_array_free(al, &out[k]);
    st = kiln_session_wait(s, prev, out);
  }
  if (st) goto done;
  double dt = now_s() - t0;
  printf("%s on %s: %llu runs in %.2f ms (%.3f ms/run, pipelined); first run %.1f ms; load + first run %.1f ms\n",
         path, kiln_device_name(d), runs, dt * 1e3, dt * 1e3 / (double)runs, first_s * 1e3,
         (t_loaded - t_load + t0 - t_session + first_s) * 1e3);
  if (outdir && mkdir(outdir, 0777) != 0 && errno != EEXIST) {
    st = kiln_make_status(KILN_IO_ERROR, "--output %s: cannot create the folder: %s", outdir, strerror(errno));
    goto done;
  }
  for (int32_t k = 0; k < mi.n_outputs && outdir && !st; ++k) {
    char p[4096], safe[256];
    const char* nm = kiln_module_output_name(m, k);
    size_t j = 0;
    for (; nm[j] && j < sizeof safe - 1; ++j)
      safe[j] = (nm[j] == '/' || nm[j] == '\\' || (nm[j] == '.' && j == 0)) ? '_' : nm[j];
    safe[j] = 0;
    snprintf(p, sizeof p, "%s/%s.npy", outdir, safe);
    st = kiln_npy_write(p, &out[k]);
    if (!st) printf("wrote %s\n", p);
  }
done:
  {
    int rc = st ? fail(st) : 0;
    for (int32_t k = 0; in && k < mi.n_inputs; ++k) kiln_array_free(al, &in[k]);
    for (int32_t k = 0; out && k < mi.n_outputs; ++k) kiln_array_free(al, &out[k]);
    free(in);
    free(out);
    free(inputs);
    free(which);
    kiln_session_destroy(s);
    kiln_device_release(d);
    kiln_module_release(m);
    return rc;
  }
}
