/* The compile driver (see driver.h). */
#include "api/driver.h"

#include <stdio.h>
#include <string.h>

#include "api/model_dims.h"
#include "compiler/quantize_graph.h"
#include "frontend/onnx.h"
#include "kiln/runtime.h"
#include "runtime/device.h"

/* fp16/auto: whether the device computes in half, from the request or the
 * device itself (opened without fallback: a module for a GPU must not take
 * the CPU's answer). A device that cannot be opened counts as without. */
static kiln_status_t resolve_fp16_arith(const kiln_driver_request_t* r, kiln_compile_precision_t* prec,
                                        char* devname, size_t n, kiln_compile_log_t* log) {
  const char* dev = r->device ? r->device : r->target->name;
  prec->device = devname;
  if (r->fp16_arith >= 0) {
    /* a module for another device: the request says what it computes in */
    prec->fp16_arith = r->fp16_arith == 1;
    snprintf(devname, n, "the %s device (--fp16-arith %s)", dev, r->fp16_arith ? "yes" : "no");
    return NULL;
  }
  kiln_device_open_options_t oo = {r->threads, true, NULL};
  kiln_device_t* d = NULL;
  kiln_status_t ds = kiln_device_open(dev, &oo, kiln_allocator_system(), &d);
  kiln_status_t s = NULL;
  if (ds) {
    s = kiln_compile_log_line(log, "note", "%s device not available (%s); assuming no fp16 arithmetic", dev,
                              kiln_status_message(ds));
    kiln_status_free(ds);
    prec->fp16_arith = false;
  } else {
    prec->fp16_arith = d->info.fp16_arith;
  }
  snprintf(devname, n, "%s", d ? kiln_device_name(d) : dev);
  kiln_device_release(d);
  return s;
}

kiln_status_t kiln_driver_compile(const kiln_driver_request_t* r, kiln_graph_t* parsed, kiln_compile_log_t* log,
                                  kiln_program_t** out) {
  kiln_graph_t* g = parsed;
  if (!g) KILN_RETURN_IF_ERROR(kiln_onnx_parse_model(r->model_path, NULL, kiln_allocator_system(), &g));
  kiln_status_t s = NULL;
  for (int32_t i = 0; i < r->n_dims && !s; ++i) s = kiln_model_bind_dim(g, r->dims[i]);
  char bound[1024];
  if (!s && kiln_model_bind_rest_to_one(g, bound, sizeof bound))
    s = kiln_compile_log_line(log, "model", "note: symbolic dims bound to 1 for costs (set with --dim):%s", bound);
  if (!s) s = kiln_graph_prepare(g);
  /* int8 (and auto's int8 layers) before the passes, which see the Q/DQ nodes */
  kiln_compile_precision_t prec = r->precision;
  kiln_precision_policy_t int8_rules = {0};
  prec.int8_rules = &int8_rules;
  if (!s) s = kiln_quantize_for_precision(r->model_path, g, &prec, log);
  if (!s && r->graph_hook) s = r->graph_hook(r->hook_user, g, false);
  if (!s) s = kiln_compile_graph_passes(g, r->opt, log);
  if (!s && r->graph_hook) s = r->graph_hook(r->hook_user, g, true);
  char devname[300];
  if (!s && (prec.mode == KILN_PRECISION_FP16 || prec.mode == KILN_PRECISION_AUTO)) s = resolve_fp16_arith(r, &prec, devname, sizeof devname, log);
  kiln_compile_config_t cc = {r->target, r->opt, r->threads, r->dump_dir,
                              r->model_name ? r->model_name : r->model_path, &prec, r->cpu_targets,
                              r->tuning_path, NULL};
  if (!s) s = kiln_compile_program(g, &cc, log, out);
  kiln_graph_destroy(g);
  kiln_precision_policy_free(&int8_rules);
  return s;
}
