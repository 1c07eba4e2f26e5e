/* `kiln compile MODEL --dim seq=8..256`: a range on a dim inside the
 * kernels' shapes, compiled once (compiler/pipeline_seq.h). The graph half
 * of the compile runs at each size lowering/plan_seq.h takes, with the dim
 * bound to it; their plans are anti-unified into the one program. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "api/driver.h"
#include "api/model_dims.h"
#include "compiler/pipeline_seq.h"
#include "compiler/staged.h"
#include "frontend/onnx.h"
#include "kiln/runtime.h"
#include "runtime/device.h"

/* Whether dim |name| of the model at |path| lies inside some input's shape
 * (an axis other than 0), where a range takes the kernels' run-time
 * extents rather than the per-sample loop. */
static kiln_status_t dim_inside(const char* path, const char* name, bool* out) {
  *out = false;
  kiln_graph_t* g = NULL;
  KILN_RETURN_IF_ERROR(kiln_onnx_parse_model(path, NULL, kiln_allocator_system(), &g));
  int32_t sym = 0;
  for (int32_t k = 1; k <= g->n_symbols; ++k)
    if (!strcmp(g->symbols[k], name)) sym = k;
  for (int32_t i = 0; sym && i < g->n_inputs; ++i) {
    const kiln_tensor_t* t = &g->tensors[g->inputs[i]];
    for (int32_t d = 1; d < t->shape.rank; ++d) *out |= kiln_dim_symbol(t->shape.dims[d]) == sym;
  }
  kiln_graph_destroy(g);
  return NULL;
}

/* The loop iterations one invocation of the device the module is for may
 * run (kiln_device_info_t.loop_limit; 0: any): the request's, or the
 * device's where it asks (loop_limit -1 on a GPU target); a device that
 * cannot be opened counts as without a limit, with a note. */
static kiln_status_t loop_limit_of(const kiln_driver_request_t* r, kiln_compile_log_t* log, int64_t* out) {
  *out = r->loop_limit > 0 ? r->loop_limit : 0;
  if (r->target->lowering != KILN_TARGET_CLASS_GPU || r->loop_limit >= 0) return NULL;
  if (r->run_device) {
    *out = r->run_device->info.loop_limit;
    return NULL;
  }
  const char* dev = r->device ? r->device : r->target->name;
  kiln_device_open_options_t oo = {r->threads, true, NULL};
  kiln_device_t* d = NULL;
  kiln_status_t ds = kiln_device_open(dev, &oo, kiln_allocator_system(), &d);
  if (ds) {
    kiln_status_t s = kiln_compile_log_line(log, "note", "%s device not available (%s); assuming no loop limit", dev,
                                            kiln_status_message(ds));
    kiln_status_free(ds);
    return s;
  }
  *out = d->info.loop_limit;
  kiln_device_release(d);
  return NULL;
}

kiln_status_t kiln_driver_compile_seq_range(const kiln_driver_request_t* r, kiln_compile_log_t* log, bool* out_taken,
                                            kiln_program_t** out) {
  *out_taken = false;
  *out = NULL;
  int32_t at = -1;
  char name[256];
  int64_t lo = 0, hi = 0;
  for (int32_t i = 0; i < r->n_dims && at < 0; ++i) {
    bool range = false;
    char nm[256];
    int64_t l, h;
    kiln_status_t rs = kiln_model_dim_range(r->dims[i], nm, sizeof nm, &l, &h, &range);
    if (rs) { /* reported by the compile that takes it */
      kiln_status_free(rs);
      continue;
    }
    bool inside = false;
    if (range) KILN_RETURN_IF_ERROR(dim_inside(r->model_path, nm, &inside));
    if (range && inside) {
      at = i;
      snprintf(name, sizeof name, "%s", nm);
      lo = l;
      hi = h;
    }
  }
  if (at < 0) return NULL;
  *out_taken = true;
  for (int32_t i = 0; i < r->n_dims; ++i)
    if (i != at && (strstr(r->dims[i], "..") || strchr(r->dims[i], ',')))
      return kiln_make_status(KILN_UNSUPPORTED, "--dim '%s': dim '%s' is a range inside the shapes already (one "
                              "dynamic dim per module so far; fix the others, e.g. --dim batch=1)", r->dims[i], name);
  if (hi - lo < KILN_PLAN_SEQ_SIZES - 1)
    return kiln_make_status(KILN_INVALID_ARGUMENT, "--dim '%s': a range inside the shapes needs at least %d values; "
                            "compile a set of sizes instead (--dim %s=%lld,%lld)", r->dims[at], KILN_PLAN_SEQ_SIZES,
                            name, (long long)lo, (long long)hi);
  int64_t x[KILN_PLAN_SEQ_SIZES];
  kiln_plan_seq_sizes(lo, hi, x);
  const char** dims = calloc((size_t)r->n_dims, sizeof(char*));
  if (!dims) return kiln_make_status(KILN_OUT_OF_MEMORY, "out of memory compiling a dim range");
  char spec[300];
  for (int32_t i = 0; i < r->n_dims; ++i) dims[i] = i == at ? spec : r->dims[i];
  kiln_driver_graph_t dg[KILN_PLAN_SEQ_SIZES];
  memset(dg, 0, sizeof dg);
  kiln_graph_t* gs[KILN_PLAN_SEQ_SIZES] = {NULL};
  kiln_status_t s = NULL;
  for (int i = 0; i < KILN_PLAN_SEQ_SIZES && !s; ++i) {
    snprintf(spec, sizeof spec, "%s=%lld", name, (long long)x[i]);
    kiln_driver_request_t rk = *r;
    rk.dims = dims;
    /* one report: the top of the range's (the others repeat it) */
    kiln_compile_log_t quiet = {0};
    s = kiln_driver_graph(&rk, NULL, i == KILN_PLAN_SEQ_SIZES - 1 ? log : &quiet, &dg[i]);
    kiln_compile_log_free(&quiet);
    if (!s && kiln_graph_needs_staging(dg[i].g))
      s = kiln_make_status(KILN_UNSUPPORTED, "--dim '%s': the model has data-dependent shapes (a staged module), "
                           "which a range inside the shapes does not take yet", r->dims[at]);
    if (s) s = kiln_status_annotate(s, "preparing the model with %s", spec);
    else gs[i] = dg[i].g;
  }
  kiln_compile_config_t cc = {r->target, r->opt, r->threads, r->dump_dir, r->model_name ? r->model_name : r->model_path,
                              &dg[KILN_PLAN_SEQ_SIZES - 1].prec, r->cpu_targets, r->tuning_path, NULL, 0, NULL, 0, 0,
                              r->tuning_default, 0, r->sparse, r->layout};
  if (!s) s = loop_limit_of(r, log, &cc.loop_limit);
  if (!s) s = kiln_compile_program_seq(gs, name, lo, hi, &cc, log, out);
  for (int i = 0; i < KILN_PLAN_SEQ_SIZES; ++i) kiln_driver_graph_free(&dg[i]);
  free(dims);
  return s;
}
