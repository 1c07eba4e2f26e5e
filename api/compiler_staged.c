/* Staged models through the compiler API (include/kiln/compiler.h,
 * "staged models"): the graph the driver prepared, kept for runners, each
 * a staged executor (compiler/staged.h) on a device of its own. */
#include "api/compiler_staged.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "compiler/staged.h"
#include "ir/op.h"
#include "kiln/runtime.h"
#include "runtime/device.h"
#include "runtime/module_file.h"
#include "runtime/program.h"
#include "runtime/program_staged.h"

struct kiln_compiler_runner_s {
  kiln_api_staged_t* m; /* retained */
  kiln_device_t* dev;
  kiln_staged_t* st;
};

kiln_status_t kiln_api_staged_new(kiln_api_staged_t** out) {
  kiln_api_staged_t* m = calloc(1, sizeof *m);
  if (!m) return kiln_make_status(KILN_OUT_OF_MEMORY, "out of memory keeping a staged model");
  m->refs = 1;
  *out = m;
  return NULL;
}

void kiln_api_staged_release(kiln_api_staged_t* m) {
  if (!m || __atomic_sub_fetch(&m->refs, 1, __ATOMIC_ACQ_REL) > 0) return;
  kiln_driver_graph_free(&m->dg);
  kiln_status_free(m->module_err);
  free((char*)m->device);
  free(m);
}

void kiln_api_staged_first(const kiln_api_staged_t* m, char* buf, size_t n) {
  const kiln_graph_t* g = m->dg.g;
  snprintf(buf, n, "a host node");
  for (int32_t i = 0; g && i < g->n_nodes; ++i)
    if (kiln_op_is_host_only(g, &g->nodes[i])) {
      snprintf(buf, n, "node '%s' (%s)", g->nodes[i].name, g->nodes[i].op_type);
      return;
    }
}

/* The staged executor's options for |m| on |dev| (NULL: no device yet,
 * for the compile's check); |prec| receives the precision they point at. */
static kiln_staged_options_t options(kiln_api_staged_t* m, kiln_device_t* dev, kiln_compile_precision_t* prec) {
  *prec = m->dg.prec;
  if (dev) {
    prec->fp16_arith = dev->info.fp16_arith;
    prec->device = kiln_device_name(dev);
  }
  kiln_staged_options_t o = {m->target, dev, m->opt, m->threads, dev ? dev->info.loop_limit : 0, m->strict, 0, prec};
  return o;
}

kiln_status_t kiln_api_staged_check(kiln_api_staged_t* m, kiln_compile_log_t* log) {
  KILN_RETURN_IF_ERROR(kiln_staged_log(m->dg.g, m->target, log));
  for (int32_t i = 0; i < m->dg.g->n_nodes; ++i) m->host_nodes += kiln_op_is_host_only(m->dg.g, &m->dg.g->nodes[i]);
  kiln_compile_precision_t prec;
  kiln_staged_options_t o = options(m, NULL, &prec);
  kiln_staged_t* st = NULL;
  KILN_RETURN_IF_ERROR(kiln_staged_create(m->dg.g, &o, &st));
  kiln_staged_stats_t ss;
  kiln_staged_stats(st, &ss);
  kiln_staged_destroy(st);
  return kiln_compile_log_line(log, m->target->lowering == KILN_TARGET_CLASS_GPU ? "fallback" : "staged",
                               "staged: %d stages around %d host nodes, each stage compiled when a run first meets "
                               "its input shapes (a runner), or stored in a staged module where every stage's inputs have fixed sizes",
                               (int)ss.stages, (int)ss.host_nodes);
}

kiln_status_t kiln_api_staged_module(kiln_api_staged_t* m, const kiln_driver_request_t* r, kiln_compile_log_t* log,
                                     uint8_t** out, size_t* out_len) {
  *out = NULL;
  *out_len = 0;
  kiln_status_free(m->module_err);
  m->module_err = NULL;
  kiln_program_t* p = NULL;
  kiln_status_t s = kiln_driver_build_staged(r, &m->dg, log, &p);
  if (!s) s = kiln_module_serialize(p, kiln_allocator_system(), out, out_len);
  const int32_t segs = p && p->staged ? p->staged->n_segments : 0;
  kiln_program_destroy(p);
  if (s && kiln_status_code(s) == KILN_OUT_OF_MEMORY) return s;
  if (s) {
    m->module_err = s;
    return kiln_compile_log_line(log, "staged", "staged: no module: %s", kiln_status_message(s));
  }
  return kiln_compile_log_line(log, "staged", "staged: module of %d segments, %zu bytes (section STGS)", (int)segs,
                               *out_len);
}

int32_t kiln_compiler_host_nodes(const kiln_compiler_t* c) {
  const kiln_api_staged_t* m = kiln_api_compiler_staged(c);
  return m ? m->host_nodes : 0;
}

int32_t kiln_compiler_staged_count(const kiln_compiler_t* c, int32_t output) {
  const kiln_api_staged_t* m = kiln_api_compiler_staged(c);
  if (!m) return 0;
  return output ? m->dg.g->n_outputs : m->dg.g->n_inputs;
}

const char* kiln_compiler_staged_io(const kiln_compiler_t* c, int32_t output, int32_t i, kiln_dtype_t* out_dtype,
                                    kiln_shape_t* out_shape) {
  if (i < 0 || i >= kiln_compiler_staged_count(c, output)) return NULL;
  const kiln_graph_t* g = kiln_api_compiler_staged(c)->dg.g;
  const kiln_tensor_t* t = &g->tensors[output ? g->outputs[i] : g->inputs[i]];
  if (out_dtype) *out_dtype = t->dtype;
  if (out_shape) *out_shape = t->shape;
  return t->name;
}

kiln_status_t kiln_compiler_runner_create(const kiln_compiler_t* c, const char* device,
                                          kiln_compiler_runner_t** out_runner) {
  if (!c || !out_runner) return kiln_make_status(KILN_INVALID_ARGUMENT, "kiln_compiler_runner_create: NULL argument");
  kiln_api_staged_t* m = kiln_api_compiler_staged(c);
  if (!m)
    return kiln_make_status(KILN_INVALID_ARGUMENT, "kiln_compiler_runner_create: the last compile made no staged "
                            "model (a model without host nodes is a module: kiln_compiler_module)");
  const char* name = device && *device ? device : m->device ? m->device : m->target->name;
  kiln_compiler_runner_t* r = calloc(1, sizeof *r);
  if (!r) return kiln_make_status(KILN_OUT_OF_MEMORY, "out of memory creating a runner");
  __atomic_add_fetch(&m->refs, 1, __ATOMIC_ACQ_REL);
  r->m = m;
  kiln_device_open_options_t oo = {m->threads, true, NULL};
  kiln_status_t s = kiln_device_open(name, &oo, kiln_allocator_system(), &r->dev);
  if (!s && strcmp(kiln_device_api(r->dev), m->target->name) != 0)
    s = kiln_make_status(KILN_INVALID_ARGUMENT, "kiln_compiler_runner_create: device '%s' is a %s device; the model "
                         "was compiled for the %s target", name, kiln_device_api(r->dev), m->target->name);
  kiln_compile_precision_t prec;
  kiln_staged_options_t o = options(m, r->dev, &prec);
  if (!s) s = kiln_staged_create(m->dg.g, &o, &r->st); /* copies prec */
  if (s) {
    kiln_compiler_runner_destroy(r);
    return s;
  }
  *out_runner = r;
  return NULL;
}

void kiln_compiler_runner_destroy(kiln_compiler_runner_t* r) {
  if (!r) return;
  kiln_staged_destroy(r->st); /* before the device its sessions run on */
  kiln_device_release(r->dev);
  kiln_api_staged_release(r->m);
  free(r);
}

kiln_status_t kiln_compiler_runner_run(kiln_compiler_runner_t* r, const kiln_array_t* inputs, kiln_array_t* outputs) {
  if (!r || (!inputs && r->m->dg.g->n_inputs) || !outputs)
    return kiln_make_status(KILN_INVALID_ARGUMENT, "kiln_compiler_runner_run: NULL argument");
  return kiln_staged_run(r->st, inputs, outputs);
}

void kiln_compiler_runner_stats(const kiln_compiler_runner_t* r, kiln_compiler_runner_stats_t* out_stats) {
  if (!out_stats) return;
  memset(out_stats, 0, sizeof *out_stats);
  if (!r) return;
  kiln_staged_stats_t ss;
  kiln_staged_stats(r->st, &ss);
  *out_stats = (kiln_compiler_runner_stats_t){ss.stages, ss.host_nodes, ss.compiles, ss.reuses, ss.on_reference,
                                              ss.host_s, ss.compile_s};
}
