/* The compile driver (see driver.h). */
#include "api/driver.h"

#include <stdio.h>
#include <string.h>

#include "api/model_dims.h"
#include "api/quantize_graph.h"
#include "frontend/onnx.h"
#include "kiln/runtime.h"
#include "runtime/device.h"

/* What the compile needs to know of the target device: whether it computes
 * in half (fp16/auto) and its loop limit (GPU targets), from the request
 * where it says, else from the device itself (opened without fallback: a
 * module for a GPU must not take the CPU's answer), and the device whose
 * tuning records apply. A device that cannot be opened counts as without
 * fp16 arithmetic and without a limit. The opened device is returned in
 * |*out_dev| (NULL when none was opened) for the tuning cache, so the
 * records chosen are those of the device asked (`device`), opened once. */
static kiln_status_t resolve_device(const kiln_driver_request_t* r, bool need_fp16, kiln_compile_precision_t* prec,
                                    int64_t* loop_limit, uint32_t* gpu_lacks, char* devname, size_t n,
                                    kiln_compile_log_t* log, kiln_device_t** out_dev) {
  *out_dev = NULL;
  *gpu_lacks = 0;
  const char* dev = r->device ? r->device : r->target->name;
  *loop_limit = r->loop_limit > 0 ? r->loop_limit : 0;
  const bool ask_fp16 = need_fp16 && r->fp16_arith < 0;
  const bool ask_loops = r->loop_limit < 0 && r->target->lowering == KILN_TARGET_CLASS_GPU;
  if (need_fp16) {
    prec->device = devname;
    prec->fp16_arith = r->fp16_arith == 1;
    /* a module for another device: the request says what it computes in */
    snprintf(devname, n, "the %s device (--fp16-arith %s)", dev, r->fp16_arith == 1 ? "yes" : "no");
  }
  /* a GPU target's shaders use only the features its device has; with no
   * device to ask, none of the optional ones (kiln_compile_gpu_lacks) */
  const bool ask_feats = r->target->lowering == KILN_TARGET_CLASS_GPU;
  if (!ask_fp16 && !ask_loops && !ask_feats && !r->tuning_path) return NULL;
  kiln_device_open_options_t oo = {r->threads, true, NULL};
  kiln_device_t* d = NULL;
  kiln_status_t ds = kiln_device_open(dev, &oo, kiln_allocator_system(), &d);
  kiln_status_t s = NULL;
  if (ds) {
    if (ask_fp16 || ask_loops)
      s = kiln_compile_log_line(log, "note", "%s device not available (%s); assuming %s", dev,
                                kiln_status_message(ds),
                                ask_fp16 && ask_loops ? "no fp16 arithmetic and no loop limit"
                                : ask_fp16            ? "no fp16 arithmetic"
                                                      : "no loop limit");
    kiln_status_free(ds);
    if (ask_feats) {
      *gpu_lacks = kiln_compile_gpu_lacks(NULL);
      if (!s)
        s = kiln_compile_log_line(log, "note", "%s device not available; its shaders use no 64-bit integers "
                                  "and no subgroup operations", dev);
    }
  } else {
    if (ask_feats) *gpu_lacks = kiln_compile_gpu_lacks(&d->info);
    if (ask_fp16) prec->fp16_arith = d->info.fp16_arith;
    if (ask_loops) *loop_limit = d->info.loop_limit;
  }
  if (ask_fp16) snprintf(devname, n, "%s", d ? kiln_device_name(d) : dev);
  *out_dev = d;
  return s;
}

kiln_status_t kiln_driver_compile(const kiln_driver_request_t* r, kiln_graph_t* parsed, kiln_compile_log_t* log,
                                  kiln_program_t** out) {
  kiln_graph_t* g = parsed;
  if (!g) KILN_RETURN_IF_ERROR(kiln_onnx_parse_model(r->model_path, NULL, kiln_allocator_system(), &g));
  kiln_status_t s = NULL;
  /* A dynamic dim (NAME=LO..HI): checked on the model with the dim
   * symbolic (parsed again: this one is prepared with the dim at 1, one
   * sample), then made per-sample after lowering (lowering/plan_dyn.h). */
  char dyn[256] = "";
  int64_t dyn_lo = 0, dyn_hi = 0;
  for (int32_t i = 0; i < r->n_dims && !s; ++i) {
    char name[256];
    int64_t lo, hi;
    bool range = false;
    s = kiln_model_dim_range(r->dims[i], name, sizeof name, &lo, &hi, &range);
    if (s || !range) continue;
    if (dyn[0])
      s = kiln_make_status(KILN_UNSUPPORTED, "--dim '%s': dim '%s' is dynamic already (one dynamic dim per module so far)",
                           r->dims[i], dyn);
    else if (strcmp(r->target->name, "cpu") != 0)
      s = kiln_make_status(KILN_UNSUPPORTED, "--dim '%s': dynamic dims are compiled for the cpu target only so far (the "
                           "%s target's kernels launch a fixed grid); compile with -t cpu or a fixed size", r->dims[i],
                           r->target->name);
    if (!s) s = kiln_model_batch_alias(g, name, sizeof name);
    snprintf(dyn, sizeof dyn, "%s", name);
    dyn_lo = lo;
    dyn_hi = hi;
    kiln_graph_t* sym = NULL;
    kiln_graph_t* at2 = NULL;
    kiln_graph_t* at3 = NULL;
    if (!s) s = kiln_onnx_parse_model(r->model_path, NULL, kiln_allocator_system(), &sym);
    if (!s) s = kiln_onnx_parse_model(r->model_path, NULL, kiln_allocator_system(), &at2);
    if (!s) s = kiln_onnx_parse_model(r->model_path, NULL, kiln_allocator_system(), &at3);
    /* the other dims at the sizes the compile gives them */
    for (int32_t j = 0; j < r->n_dims && !s; ++j)
      if (!strstr(r->dims[j], "..")) {
        s = kiln_model_bind_dim(at2, r->dims[j]);
        if (!s) s = kiln_model_bind_dim(at3, r->dims[j]);
      }
    if (!s) s = kiln_model_check_per_sample(name, sym, at2, at3);
    kiln_graph_destroy(sym);
    kiln_graph_destroy(at2);
    kiln_graph_destroy(at3);
    char one[300];
    snprintf(one, sizeof one, "%s=1", name);
    if (!s) s = kiln_model_bind_dim(g, one);
    if (!s) s = kiln_compile_log_line(log, "model", "dynamic dim '%s' = %lld..%lld: compiled per sample", name,
                                      (long long)lo, (long long)hi);
  }
  for (int32_t i = 0; i < r->n_dims && !s; ++i) {
    if (strstr(r->dims[i], "..")) continue;
    s = kiln_model_bind_dim(g, r->dims[i]);
  }
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
  if (!s) s = kiln_compile_graph_passes(g, r->opt, r->target, log);
  if (!s && r->graph_hook) s = r->graph_hook(r->hook_user, g, true);
  char devname[300];
  int64_t loop_limit = 0;
  uint32_t gpu_lacks = 0;
  const bool need_fp16 = prec.mode == KILN_PRECISION_FP16 || prec.mode == KILN_PRECISION_AUTO;
  kiln_device_t* dev = NULL;
  if (!s) s = resolve_device(r, need_fp16, &prec, &loop_limit, &gpu_lacks, devname, sizeof devname, log, &dev);
  kiln_compile_config_t cc = {r->target, r->opt, r->threads, r->dump_dir,
                              r->model_name ? r->model_name : r->model_path, &prec, r->cpu_targets,
                              r->tuning_path, dev, loop_limit, dyn[0] ? dyn : NULL, dyn_lo, dyn_hi,
                              r->tuning_default, gpu_lacks, r->layout};
  if (!s) s = kiln_compile_program(g, &cc, log, out);
  kiln_device_release(dev);
  kiln_graph_destroy(g);
  kiln_precision_policy_free(&int8_rules);
  return s;
}
