/* The compile driver (see driver.h). */
#include "api/driver.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "api/model_dims.h"
#include "api/quantize_graph.h"
#include "compiler/staged.h"
#include "frontend/onnx.h"
#include "ir/op.h"
#include "kiln/runtime.h"
#include "runtime/device.h"
#include "runtime/program.h"

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
  if (r->run_device) { /* the device it will run on, asked already */
    kiln_device_t* d = r->run_device;
    if (r->target->lowering == KILN_TARGET_CLASS_GPU) *gpu_lacks = kiln_compile_gpu_lacks(&d->info);
    *loop_limit = r->loop_limit >= 0 ? r->loop_limit : d->info.loop_limit;
    if (need_fp16) {
      prec->fp16_arith = r->fp16_arith < 0 ? d->info.fp16_arith : r->fp16_arith == 1;
      prec->device = devname;
      snprintf(devname, n, "%s", kiln_device_name(d));
    }
    kiln_device_retain(d);
    *out_dev = d;
    return NULL;
  }
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
                                  "and no subgroup operations, and f64 nodes run on the CPU", dev);
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

/* Shape buckets (--dim NAME=V1,V2,...): the whole compile once per size,
 * with NAME bound to it, into one program that carries the others
 * (runtime/program_buckets.c). */
static kiln_status_t compile_buckets(const kiln_driver_request_t* r, int32_t at, const char* name,
                                     const int64_t* values, int32_t nv, kiln_compile_log_t* log, kiln_program_t** out) {
  for (int32_t i = 0; i < r->n_dims; ++i) {
    char other[256];
    int64_t v[KILN_PROGRAM_MAX_BUCKETS];
    int32_t n = 0;
    if (i != at && !kiln_model_dim_set(r->dims[i], other, sizeof other, v, KILN_PROGRAM_MAX_BUCKETS, &n) && n)
      return kiln_make_status(KILN_UNSUPPORTED, "--dim '%s': dim '%s' has shape buckets already (one such dim per "
                              "module so far)", r->dims[i], name);
  }
  const char** dims = calloc((size_t)r->n_dims, sizeof(char*));
  kiln_program_t** progs = calloc((size_t)nv, sizeof(kiln_program_t*));
  char spec[300];
  kiln_status_t s = dims && progs ? NULL : kiln_make_status(KILN_OUT_OF_MEMORY, "out of memory compiling buckets");
  for (int32_t i = 0; i < r->n_dims && !s; ++i) dims[i] = i == at ? spec : r->dims[i];
  for (int32_t k = 0; k < nv && !s; ++k) {
    snprintf(spec, sizeof spec, "%s=%lld", name, (long long)values[k]);
    kiln_driver_request_t rk = *r;
    rk.dims = dims;
    s = kiln_compile_log_line(log, "model", "shape bucket %d of %d: %s", (int)k + 1, (int)nv, spec);
    if (!s) s = kiln_driver_compile(&rk, NULL, log, &progs[k]);
    if (s) s = kiln_status_annotate(s, "shape bucket %s", spec);
  }
  kiln_program_t* p = s ? NULL : progs[0];
  if (!s) s = kiln_program_strdup(p, name, &p->bucket_dim);
  if (!s) {
    void* m = NULL;
    s = kiln_allocator_malloc(p->allocator, sizeof(int64_t) * (size_t)nv, "bucket sizes", &m);
    if (!s) memcpy(p->bucket_values = m, values, sizeof(int64_t) * (size_t)nv);
    if (!s) s = kiln_allocator_malloc(p->allocator, sizeof(kiln_program_t*) * (size_t)(nv - 1), "buckets", &m);
    if (!s) {
      memcpy(p->buckets = m, progs + 1, sizeof(kiln_program_t*) * (size_t)(nv - 1));
      p->n_buckets = nv; /* p owns them from here on */
      for (int32_t k = 1; k < nv; ++k) progs[k] = NULL;
    }
  }
  int32_t key_in = -1, key_axis = -1;
  if (!s) kiln_program_bucket_key(p, &key_in, &key_axis);
  if (!s && key_in < 0)
    s = kiln_make_status(KILN_UNSUPPORTED, "--dim %s=..: no input's shape changes with dim '%s' (nothing to pick a "
                         "bucket by)", name, name);
  if (!s) s = kiln_program_validate_buckets(p);
  if (!s)
    s = kiln_compile_log_line(log, "model", "shape buckets: dim '%s' at %d sizes, one static program each, picked "
                              "by input '%s' dim %d at run time", name, (int)nv, p->input_names[key_in],
                              (int)key_axis);
  if (s)
    for (int32_t k = 0; progs && k < nv; ++k) kiln_program_destroy(progs[k]);
  else
    *out = p;
  free(dims);
  free(progs);
  return s;
}

void kiln_driver_graph_free(kiln_driver_graph_t* dg) {
  if (!dg) return;
  kiln_graph_destroy(dg->g);
  kiln_precision_policy_free(&dg->int8_rules);
  kiln_device_release(dg->dev);
  memset(dg, 0, sizeof *dg);
}

/* Whether a GPU compile folds a QDQ model's Q/DQ pairs into int8 ops (the
 * int8 templates, lowering/template_q8.c) or keeps them around the float
 * templates: on a device that runs on the host's CPU (PoCL, lavapipe) the
 * float templates measured faster (ResNet-18 QDQ folded: 2.4x slower on
 * PoCL, 4.7x on lavapipe), so fold-qdq is left out there, with a note; a
 * real GPU, or no device to ask, folds. KILN_GPU_INT8_FOLD=on|off decides
 * instead. *out_skip: the pass to leave out (NULL: none). */
kiln_status_t kiln_driver_int8_fold_policy(const kiln_target_t* target, int opt, const kiln_graph_t* g,
                                           const kiln_device_t* d, kiln_compile_log_t* log, const char** out_skip) {
  *out_skip = NULL;
  if (!target || target->lowering != KILN_TARGET_CLASS_GPU || opt < 1 || !kiln_driver_graph_has_qdq(g)) return NULL;
  const char* env = getenv("KILN_GPU_INT8_FOLD");
  if (env && (!strcmp(env, "on") || !strcmp(env, "off"))) {
    if (!strcmp(env, "off")) *out_skip = "fold-qdq";
    return kiln_compile_log_line(log, "note", "int8: Q/DQ pairs %s (KILN_GPU_INT8_FOLD=%s)",
                                 *out_skip ? "kept around the float templates" : "folded into int8 ops", env);
  }
  if (!d || !d->info.cpu_backed) return NULL; /* no device to ask: a real GPU is assumed */
  *out_skip = "fold-qdq";
  return kiln_compile_log_line(log, "note",
                               "int8: Q/DQ pairs kept around the float templates on %s, which runs on the host CPU "
                               "(its int8 templates measured slower there; KILN_GPU_INT8_FOLD=on folds them)",
                               kiln_device_name(d));
}

bool kiln_driver_graph_has_qdq(const kiln_graph_t* g) {
  for (int32_t i = 0; i < g->n_nodes; ++i)
    if (!strcmp(g->nodes[i].op_type, "DequantizeLinear")) return true;
  return false;
}

/* The device the fold policy asks: the run's, or the compile's own,
 * opened here and kept in |dg| for the build half's questions (fp16,
 * loop limit, features), so a QDQ compile opens it once. */
static kiln_status_t graph_fold_policy(const kiln_driver_request_t* r, kiln_driver_graph_t* dg,
                                       kiln_compile_log_t* log, const char** out_skip) {
  *out_skip = NULL;
  const kiln_device_t* d = r->run_device;
  const bool ask = r->target && r->target->lowering == KILN_TARGET_CLASS_GPU && r->opt >= 1 && !d &&
                   !getenv("KILN_GPU_INT8_FOLD") && kiln_driver_graph_has_qdq(dg->g);
  if (ask) {
    kiln_device_open_options_t oo = {r->threads, true, NULL};
    kiln_status_t ds = kiln_device_open(r->device ? r->device : r->target->name, &oo, kiln_allocator_system(),
                                        &dg->dev);
    kiln_status_free(ds); /* no device to ask: a real GPU is assumed, and the build half says so */
    d = dg->dev;
  }
  return kiln_driver_int8_fold_policy(r->target, r->opt, dg->g, d, log, out_skip);
}

kiln_status_t kiln_driver_graph(const kiln_driver_request_t* r, kiln_graph_t* parsed, kiln_compile_log_t* log,
                                kiln_driver_graph_t* out) {
  memset(out, 0, sizeof *out);
  out->prec = r->precision;
  out->prec.int8_rules = &out->int8_rules;
  if (!parsed) KILN_RETURN_IF_ERROR(kiln_onnx_parse_model(r->model_path, NULL, kiln_allocator_system(), &parsed));
  kiln_graph_t* g = out->g = parsed;
  kiln_status_t s = NULL;
  /* A dynamic dim (NAME=LO..HI): checked on the model with the dim
   * symbolic (parsed again: this one is prepared with the dim at 1, one
   * sample), then made per-sample after lowering (lowering/plan_dyn.h). */
  char* dyn = out->dyn;
  const size_t dyn_n = sizeof out->dyn;
  for (int32_t i = 0; i < r->n_dims && !s; ++i) {
    char name[256];
    int64_t lo, hi;
    bool range = false;
    s = kiln_model_dim_range(r->dims[i], name, sizeof name, &lo, &hi, &range);
    if (s || !range) continue;
    if (dyn[0])
      s = kiln_make_status(KILN_UNSUPPORTED, "--dim '%s': dim '%s' is dynamic already (one dim per module takes a "
                           "range so far; a dim inside the kernels' shapes can be compiled for a set of sizes, one "
                           "static program each: --dim %s=16,64,128)", r->dims[i], dyn, name);
    else if (!r->target || !r->target->dyn_batch)
      s = kiln_make_status(KILN_UNSUPPORTED, "--dim '%s': dynamic dims are compiled for the cpu, opencl and vulkan "
                           "targets only so far (the %s target's kernels take no run-time batch); compile with -t cpu, "
                           "opencl or vulkan, or a fixed size", r->dims[i], r->target ? r->target->name : "reference");
    if (!s) s = kiln_model_batch_alias(g, name, sizeof name);
    snprintf(dyn, dyn_n, "%s", name);
    out->dyn_lo = lo;
    out->dyn_hi = hi;
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
  if (!s) s = kiln_quantize_for_precision(r->model_path, g, &out->prec, log);
  if (!s && r->graph_hook) s = r->graph_hook(r->hook_user, g, false);
  const char* skip = NULL;
  if (!s) s = graph_fold_policy(r, out, log, &skip);
  if (!s) s = kiln_compile_graph_passes_except(g, r->opt, r->target, skip, log);
  if (!s && r->graph_hook) s = r->graph_hook(r->hook_user, g, true);
  return s;
}

kiln_status_t kiln_driver_build(const kiln_driver_request_t* r, kiln_driver_graph_t* dg, kiln_compile_log_t* log,
                                kiln_program_t** out) {
  kiln_compile_precision_t prec = dg->prec;
  kiln_status_t s = NULL;
  char devname[300];
  int64_t loop_limit = 0;
  uint32_t gpu_lacks = 0;
  const bool need_fp16 = prec.mode == KILN_PRECISION_FP16 || prec.mode == KILN_PRECISION_AUTO;
  kiln_device_t* dev = NULL;
  kiln_driver_request_t rd = *r; /* the graph half's device, where it opened one */
  if (!rd.run_device) rd.run_device = dg->dev;
  r = &rd;
  if (!s) s = resolve_device(r, need_fp16, &prec, &loop_limit, &gpu_lacks, devname, sizeof devname, log, &dev);
  kiln_compile_config_t cc = {r->target, r->opt, r->threads, r->dump_dir,
                              r->model_name ? r->model_name : r->model_path, &prec, r->cpu_targets,
                              r->tuning_path, dev, loop_limit, dg->dyn[0] ? dg->dyn : NULL, dg->dyn_lo, dg->dyn_hi,
                              r->tuning_default, gpu_lacks, r->sparse, r->layout};
  if (!s) s = kiln_compile_program(dg->g, &cc, log, out);
  kiln_device_release(dev);
  return s;
}

kiln_status_t kiln_driver_compile(const kiln_driver_request_t* r, kiln_graph_t* parsed, kiln_compile_log_t* log,
                                  kiln_program_t** out) {
  return kiln_driver_compile_or_stage(r, parsed, log, out, NULL);
}

kiln_status_t kiln_driver_compile_or_stage(const kiln_driver_request_t* r, kiln_graph_t* parsed,
                                           kiln_compile_log_t* log, kiln_program_t** out,
                                           kiln_driver_graph_t* staged) {
  *out = NULL;
  if (staged) memset(staged, 0, sizeof *staged);
  bool taken = false;
  kiln_status_t ss = kiln_driver_compile_seq_range(r, log, &taken, out);
  if (ss || taken) {
    kiln_graph_destroy(parsed);
    return ss;
  }
  for (int32_t i = 0; i < r->n_dims; ++i) {
    char name[256];
    int64_t values[KILN_PROGRAM_MAX_BUCKETS];
    int32_t nv = 0;
    kiln_status_t bs = kiln_model_dim_set(r->dims[i], name, sizeof name, values, KILN_PROGRAM_MAX_BUCKETS, &nv);
    if (bs || nv) {
      kiln_graph_destroy(parsed);
      return bs ? bs : compile_buckets(r, i, name, values, nv, log, out);
    }
  }
  kiln_driver_graph_t own;
  kiln_driver_graph_t* dg = staged ? staged : &own;
  kiln_status_t s = kiln_driver_graph(r, parsed, log, dg);
  if (!s && kiln_graph_needs_staging(dg->g)) {
    if (staged) return NULL; /* the caller runs it in stages */
    /* the staged module: its stages compiled here, its host nodes stored
     * for the runtime's kernels (docs/DESIGN.md, "Data-dependent shapes") */
    s = kiln_driver_build_staged(r, dg, log, out);
    kiln_driver_graph_free(dg);
    return s;
  }
  if (!s) s = kiln_driver_build(r, dg, log, out);
  kiln_driver_graph_free(dg);
  return s;
}
