/* The public compiler API (include/kiln/compiler.h): options as strings,
 * the pipeline of compiler/pipeline.h, the module as bytes. */
#include "kiln/compiler.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "api/compiler_staged.h"
#include "api/driver.h"
#include "lowering/sparse_block.h"
#include "frontend/onnx.h"
#include "kiln/custom_op.h"
#include "runtime/device_registry.h"
#include "runtime/module_file.h"

#define KILN_COMPILER_MAX_DIMS 64

/* Option strings the compiler owns (copies of what set_option got). */
enum {
  OPT_TARGET,
  OPT_DEVICE,
  OPT_POLICY,
  OPT_CALIBRATE,
  OPT_MODEL_NAME,
  OPT_DUMP,
  OPT_CPU_TARGET,
  OPT_TUNING_CACHE,
  OPT_COUNT
};

struct kiln_compiler_s {
  char* model_path;
  kiln_graph_t* parsed; /* from load_model, consumed by the first compile */
  char* strs[OPT_COUNT];
  char* dims[KILN_COMPILER_MAX_DIMS];
  int32_t n_dims;
  int opt, threads;
  int fp16_arith; /* -1: ask the device */
  int64_t loop_limit; /* -1: ask the device (GPU targets) */
  int32_t sparse;     /* kiln_sparse_mode_t */
  int layout;         /* kiln_layout_mode_t (0: KILN_LAYOUT, else auto) */
  kiln_compile_precision_t prec;
  uint8_t* module;
  size_t module_len;
  kiln_api_staged_t* staged; /* instead of a module: a model run in stages */
  kiln_compile_log_t log;
};

kiln_api_staged_t* kiln_api_compiler_staged(const kiln_compiler_t* c) { return c ? c->staged : NULL; }

#define STR2(x) #x
#define STR(x) STR2(x)
const char* kiln_version(void) { return STR(KILN_VERSION_MAJOR) "." STR(KILN_VERSION_MINOR) "." STR(KILN_VERSION_PATCH); }
int32_t kiln_compiler_abi_version(void) { return KILN_COMPILER_ABI_VERSION; }

kiln_status_t kiln_compiler_create(int32_t abi_version, kiln_compiler_t** out_compiler) {
  if (!out_compiler) return kiln_make_status(KILN_INVALID_ARGUMENT, "kiln_compiler_create: NULL out_compiler");
  if (abi_version != KILN_COMPILER_ABI_VERSION)
    return kiln_make_status(KILN_UNSUPPORTED,
                            "kiln_compiler_create: the program was built for compiler ABI %d, this libkiln %s has "
                            "ABI %d",
                            (int)abi_version, kiln_version(), KILN_COMPILER_ABI_VERSION);
  kiln_compiler_t* c = calloc(1, sizeof *c);
  if (!c) return kiln_make_status(KILN_OUT_OF_MEMORY, "kiln_compiler_create: out of memory");
  c->opt = 1;
  c->fp16_arith = -1;
  c->loop_limit = -1;
  kiln_compile_precision_default(&c->prec);
  *out_compiler = c;
  return NULL;
}

static void drop_results(kiln_compiler_t* c) {
  free(c->module);
  c->module = NULL;
  c->module_len = 0;
  kiln_api_staged_release(c->staged);
  c->staged = NULL;
  kiln_compile_log_free(&c->log);
}

void kiln_compiler_destroy(kiln_compiler_t* c) {
  if (!c) return;
  drop_results(c);
  kiln_graph_destroy(c->parsed);
  free(c->model_path);
  for (int i = 0; i < OPT_COUNT; ++i) free(c->strs[i]);
  for (int32_t i = 0; i < c->n_dims; ++i) free(c->dims[i]);
  free(c);
}

kiln_status_t kiln_compiler_load_plugin(const char* path) { return kiln_plugin_load(path); }

kiln_status_t kiln_compiler_load_model(kiln_compiler_t* c, const char* path) {
  if (!c || !path || !*path)
    return kiln_make_status(KILN_INVALID_ARGUMENT, "kiln_compiler_load_model: NULL compiler or empty path");
  kiln_graph_t* g = NULL;
  KILN_RETURN_IF_ERROR(kiln_onnx_parse_model(path, NULL, kiln_allocator_system(), &g));
  char* p = strdup(path);
  if (!p) {
    kiln_graph_destroy(g);
    return kiln_make_status(KILN_OUT_OF_MEMORY, "%s: out of memory", path);
  }
  drop_results(c);
  kiln_graph_destroy(c->parsed);
  free(c->model_path);
  c->parsed = g;
  c->model_path = p;
  return NULL;
}

static kiln_status_t set_str(kiln_compiler_t* c, int which, const char* value) {
  char* v = strdup(value);
  if (!v) return kiln_make_status(KILN_OUT_OF_MEMORY, "kiln_compiler_set_option: out of memory");
  free(c->strs[which]);
  c->strs[which] = v;
  return NULL;
}

static kiln_status_t parse_yes_no(const char* name, const char* value, bool* out) {
  if (!strcmp(value, "yes") || !strcmp(value, "1") || !strcmp(value, "true")) *out = true;
  else if (!strcmp(value, "no") || !strcmp(value, "0") || !strcmp(value, "false")) *out = false;
  else return kiln_make_status(KILN_INVALID_ARGUMENT, "option %s='%s': expected yes or no", name, value);
  return NULL;
}

static kiln_status_t parse_int(const char* name, const char* value, long long lo, long long hi, long long* out) {
  char* end = NULL;
  errno = 0;
  long long v = strtoll(value, &end, 10);
  if (!*value || *end || errno == ERANGE || v < lo || v > hi)
    return kiln_make_status(KILN_INVALID_ARGUMENT, "option %s='%s': expected an integer in %lld..%lld", name, value,
                            lo, hi);
  *out = v;
  return NULL;
}

kiln_status_t kiln_compiler_set_option(kiln_compiler_t* c, const char* name, const char* value) {
  if (!c || !name || !value)
    return kiln_make_status(KILN_INVALID_ARGUMENT, "kiln_compiler_set_option: NULL argument");
  long long v = 0;
  bool b = false;
  if (!strcmp(name, "target")) {
    if (!kiln_target_find(value)) {
      char names[256];
      return kiln_make_status(KILN_INVALID_ARGUMENT, "option target='%s': this build has %s", value,
                              kiln_device_api_names("", names, sizeof names));
    }
    return set_str(c, OPT_TARGET, value);
  }
  if (!strcmp(name, "precision")) {
    if (!kiln_precision_parse_mode(value, &c->prec.mode))
      return kiln_make_status(KILN_INVALID_ARGUMENT, "option precision='%s': expected fp32, fp16, auto or int8", value);
    return NULL;
  }
  if (!strcmp(name, "opt-level")) {
    KILN_RETURN_IF_ERROR(parse_int(name, value, 0, 1, &v));
    c->opt = (int)v;
    return NULL;
  }
  if (!strcmp(name, "threads")) {
    KILN_RETURN_IF_ERROR(parse_int(name, value, 0, 1024, &v));
    c->threads = (int)v;
    return NULL;
  }
  if (!strcmp(name, "dim")) {
    const char* eq = strchr(value, '=');
    if (!eq) return kiln_make_status(KILN_INVALID_ARGUMENT, "option dim='%s': expected SYMBOL=SIZE", value);
    /* a symbol set again takes the new size */
    int32_t at = c->n_dims;
    for (int32_t i = 0; i < c->n_dims; ++i)
      if (!strncmp(c->dims[i], value, (size_t)(eq - value) + 1)) at = i;
    if (at == KILN_COMPILER_MAX_DIMS)
      return kiln_make_status(KILN_LIMIT_EXCEEDED, "option dim='%s': more than %d dims", value, KILN_COMPILER_MAX_DIMS);
    char* v = strdup(value);
    if (!v) return kiln_make_status(KILN_OUT_OF_MEMORY, "kiln_compiler_set_option: out of memory");
    if (at < c->n_dims) free(c->dims[at]);
    else c->n_dims++;
    c->dims[at] = v;
    return NULL;
  }
  if (!strcmp(name, "fp16-arith")) {
    KILN_RETURN_IF_ERROR(parse_yes_no(name, value, &b));
    c->fp16_arith = b;
    return NULL;
  }
  if (!strcmp(name, "fp16-accumulate")) return parse_yes_no(name, value, &c->prec.fp16_accumulate);
  if (!strcmp(name, "fp16-workspaces")) return parse_yes_no(name, value, &c->prec.fp16_workspaces);
  if (!strcmp(name, "fp16-weights-only")) return parse_yes_no(name, value, &c->prec.weights_only);
  if (!strcmp(name, "strict")) return parse_yes_no(name, value, &c->prec.strict);
  if (!strcmp(name, "calibrate-count")) {
    KILN_RETURN_IF_ERROR(parse_int(name, value, 1, 1000000, &v));
    c->prec.calibrate_count = (int)v;
    return NULL;
  }
  if (!strcmp(name, "loop-limit")) {
    KILN_RETURN_IF_ERROR(parse_int(name, value, 0, INT64_MAX, &v));
    c->loop_limit = v;
    return NULL;
  }
  if (!strcmp(name, "seed")) {
    KILN_RETURN_IF_ERROR(parse_int(name, value, 0, INT64_MAX, &v));
    c->prec.seed = (uint64_t)v;
    return NULL;
  }
  if (!strcmp(name, "tolerance")) {
    char* end = NULL;
    double d = strtod(value, &end);
    if (!*value || *end || !(d > 0 && d < 1e30))
      return kiln_make_status(KILN_INVALID_ARGUMENT, "option tolerance='%s': expected a positive number", value);
    c->prec.tolerance = d;
    return NULL;
  }
  if (!strcmp(name, "device")) return set_str(c, OPT_DEVICE, value);
  if (!strcmp(name, "precision-policy")) return set_str(c, OPT_POLICY, value);
  if (!strcmp(name, "calibrate")) return set_str(c, OPT_CALIBRATE, value);
  if (!strcmp(name, "model-name")) return set_str(c, OPT_MODEL_NAME, value);
  if (!strcmp(name, "dump")) return set_str(c, OPT_DUMP, value);
  if (!strcmp(name, "cpu-target")) return set_str(c, OPT_CPU_TARGET, value);
  if (!strcmp(name, "tuning-cache")) return set_str(c, OPT_TUNING_CACHE, value);
  if (!strcmp(name, "sparse")) {
    if (!strcmp(value, "auto")) c->sparse = KILN_SPARSE_AUTO;
    else if (!strcmp(value, "off")) c->sparse = KILN_SPARSE_OFF;
    else if (!strcmp(value, "on")) c->sparse = KILN_SPARSE_ON;
    else return kiln_make_status(KILN_INVALID_ARGUMENT, "option sparse='%s': expected auto, on or off", value);
    return NULL;
  }
  if (!strcmp(name, "layout")) {
    int m = kiln_compile_layout_parse(value);
    if (m < 0) return kiln_make_status(KILN_INVALID_ARGUMENT, "option layout='%s': expected nchw or auto", value);
    c->layout = m;
    return NULL;
  }
  return kiln_make_status(KILN_INVALID_ARGUMENT, "kiln_compiler_set_option: unknown option '%s' (value '%s')", name,
                          value);
}

kiln_status_t kiln_compiler_compile(kiln_compiler_t* c) {
  if (!c) return kiln_make_status(KILN_INVALID_ARGUMENT, "kiln_compiler_compile: NULL compiler");
  if (!c->model_path)
    return kiln_make_status(KILN_INVALID_ARGUMENT, "kiln_compiler_compile: no model loaded (kiln_compiler_load_model)");
  drop_results(c);
  const char* target = c->strs[OPT_TARGET] ? c->strs[OPT_TARGET] : "cpu";
  kiln_driver_request_t r = {0};
  r.model_path = c->model_path;
  r.dims = (const char* const*)c->dims;
  r.n_dims = c->n_dims;
  r.target = kiln_target_find(target);
  if (!r.target) return kiln_make_status(KILN_INTERNAL, "target '%s' vanished from the registry", target);
  r.device = c->strs[OPT_DEVICE];
  r.opt = c->opt;
  r.threads = c->threads;
  r.fp16_arith = c->fp16_arith;
  r.loop_limit = c->loop_limit;
  r.precision = c->prec;
  r.precision.policy_path = c->strs[OPT_POLICY];
  r.precision.calibrate_dir = c->strs[OPT_CALIBRATE];
  r.dump_dir = c->strs[OPT_DUMP];
  r.model_name = c->strs[OPT_MODEL_NAME];
  r.cpu_targets = c->strs[OPT_CPU_TARGET];
  r.tuning_path = c->strs[OPT_TUNING_CACHE];
  r.sparse = c->sparse;
  r.layout = c->layout;
  /* the graph parsed by load_model serves the first compile; later ones parse again */
  kiln_graph_t* g = c->parsed;
  c->parsed = NULL;
  kiln_program_t* prog = NULL;
  kiln_api_staged_t* m = NULL;
  kiln_status_t s = kiln_api_staged_new(&m);
  if (s) {
    kiln_graph_destroy(g);
    return s;
  }
  s = kiln_driver_compile_or_stage(&r, g, &c->log, &prog, &m->dg);
  if (!s && prog) {
    s = kiln_module_serialize(prog, kiln_allocator_system(), &c->module, &c->module_len);
  } else if (!s) { /* data-dependent shapes or control flow: kept for runners */
    m->target = r.target;
    m->opt = r.opt;
    m->threads = r.threads;
    m->strict = c->prec.strict;
    if (r.device && !(m->device = strdup(r.device)))
      s = kiln_make_status(KILN_OUT_OF_MEMORY, "%s: out of memory", c->model_path);
    if (!s) s = kiln_api_staged_check(m, &c->log);
    /* the module `kiln compile` writes, where every stage has fixed sizes */
    if (!s) s = kiln_api_staged_module(m, &r, &c->log, &c->module, &c->module_len);
    if (!s) {
      c->staged = m;
      m = NULL;
    }
  }
  kiln_api_staged_release(m);
  kiln_program_destroy(prog);
  if (s) drop_results(c);
  return s;
}

kiln_status_t kiln_compiler_module(const kiln_compiler_t* c, const void** out_data, size_t* out_size) {
  if (!c || !out_data || !out_size) return kiln_make_status(KILN_INVALID_ARGUMENT, "kiln_compiler_module: NULL argument");
  if (c->staged && !c->module) {
    char first[300];
    kiln_api_staged_first(c->staged, first, sizeof first);
    const kiln_status_t why = c->staged->module_err;
    return kiln_make_status(why ? kiln_status_code(why) : KILN_UNSUPPORTED,
                            "%s: %s runs on the host between compiled stages (data-dependent shapes or control "
                            "flow), and this model has no staged module: %s; run it with kiln_compiler_runner_create",
                            c->model_path, first, why ? kiln_status_message(why) : "none was built");
  }
  if (!c->module)
    return kiln_make_status(KILN_INVALID_ARGUMENT, "kiln_compiler_module: nothing compiled (kiln_compiler_compile)");
  *out_data = c->module;
  *out_size = c->module_len;
  return NULL;
}

kiln_status_t kiln_compiler_write_module(const kiln_compiler_t* c, const char* path) {
  if (!path || !*path) return kiln_make_status(KILN_INVALID_ARGUMENT, "kiln_compiler_write_module: empty path");
  const void* data = NULL;
  size_t n = 0;
  KILN_RETURN_IF_ERROR(kiln_compiler_module(c, &data, &n));
  return kiln_module_write_bytes(data, n, path);
}

int32_t kiln_compiler_report_count(const kiln_compiler_t* c) { return c ? c->log.n : 0; }

const kiln_compile_report_entry_t* kiln_compiler_report_at(const kiln_compiler_t* c, int32_t i) {
  return c && i >= 0 && i < c->log.n ? &c->log.entries[i] : NULL;
}
