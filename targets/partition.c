/* Heterogeneous partition of a GPU plan (targets/partition.h). */
#include "targets/partition.h"

#include <stdlib.h>
#include <string.h>

#include "targets/custom_kernel.h"

void kiln_partition_report_free(kiln_partition_report_t* r) {
  if (!r) return;
  for (int32_t i = 0; r->reasons && i < r->n; ++i) free(r->reasons[i]);
  free(r->reasons);
  free(r->nodes);
  memset(r, 0, sizeof *r);
}

/* Bytes of plan buffer |pb| and of the buffer whose memory it shares. */
static uint64_t buffer_bytes(const kiln_plan_t* plan, int32_t pb) {
  uint64_t most = 0;
  const int32_t ids[2] = {pb, kiln_plan_root(plan, pb)};
  for (int i = 0; i < 2; ++i) {
    if (ids[i] < 0 || ids[i] >= plan->n_buffers || !plan->buffers[ids[i]].buf) continue;
    const tir_buffer_t* b = plan->buffers[ids[i]].buf;
    const uint64_t n = (uint64_t)tir_buffer_numel(b) * (uint64_t)kiln_dtype_size(b->dtype);
    if (n > most) most = n;
  }
  return most;
}

kiln_status_t kiln_partition_gpu_check(const kiln_plan_t* plan, int32_t k, const char* target,
                                       const kiln_cf_dialect_t* dialect) {
  const kiln_plan_kernel_t* pk = &plan->kernels[k];
  /* every argument is bound whole: one larger than the device binds (a big
   * FC layer's weights on lavapipe) cannot run there */
  for (int32_t a = 0; plan->max_binding && pk->func && pk->args && a < pk->func->n_params; ++a) {
    const uint64_t bytes = buffer_bytes(plan, pk->args[a]);
    if (bytes > plan->max_binding)
      return kiln_make_status(KILN_UNSUPPORTED, "buffer '%s' spans %llu bytes, the %s device binds at most %llu",
                              pk->func->params[a]->name, (unsigned long long)bytes, target,
                              (unsigned long long)plan->max_binding);
  }
  if (pk->tmpl) return NULL;
  if (pk->custom) {
    const kiln_custom_kernel_t* kern = NULL;
    return kiln_custom_kernel_of(pk->custom, target, &kern);
  }
  return kiln_cf_check_types(dialect, pk->func);
}

static const char* node_name(const kiln_graph_t* g, int32_t n) {
  return n >= 0 && n < g->n_nodes ? g->nodes[n].name : "?";
}

static const char* node_op(const kiln_graph_t* g, int32_t n) {
  return n >= 0 && n < g->n_nodes ? g->nodes[n].op_type : "?";
}

/* Asks the target about every device kernel of |plan|; marks the nodes of
 * the refused ones in |host| with the reason. *out_new: nodes marked now. */
static kiln_status_t ask_target(const kiln_plan_t* plan, const kiln_target_t* target, bool strict, uint8_t* host,
                                char** reasons, int32_t* out_new) {
  *out_new = 0;
  const kiln_graph_t* g = plan->graph;
  for (int32_t k = 0; k < plan->n_kernels; ++k) {
    const kiln_plan_kernel_t* pk = &plan->kernels[k];
    if (pk->host || pk->node < 0 || pk->node >= g->n_nodes) continue;
    kiln_status_t s = target->kernel_check(plan, k);
    if (!s) continue;
    if (kiln_status_code(s) != KILN_UNSUPPORTED) return s;
    if (strict) {
      kiln_status_t e = kiln_make_status(KILN_UNSUPPORTED,
                                         "node '%s' (%s): the %s target cannot run it: %s (--strict: no CPU "
                                         "fallback)", node_name(g, pk->node), node_op(g, pk->node), target->name,
                                         kiln_status_message(s));
      kiln_status_free(s);
      return e;
    }
    if (!host[pk->node]) {
      host[pk->node] = 1;
      ++*out_new;
      if (!reasons[pk->node]) reasons[pk->node] = strdup(kiln_status_message(s));
    }
    kiln_status_free(s);
  }
  return NULL;
}

static kiln_status_t fill_report(const kiln_graph_t* g, const uint8_t* host, char** reasons,
                                 kiln_partition_report_t* r) {
  int32_t n = 0;
  for (int32_t i = 0; i < g->n_nodes; ++i) n += host[i] != 0;
  if (!n) return NULL;
  r->nodes = calloc((size_t)n, sizeof(int32_t));
  r->reasons = calloc((size_t)n, sizeof(char*));
  if (!r->nodes || !r->reasons) return kiln_make_status(KILN_OUT_OF_MEMORY, "out of memory listing CPU fallbacks");
  for (int32_t i = 0; i < g->n_nodes; ++i) {
    if (!host[i]) continue;
    r->nodes[r->n] = i;
    r->reasons[r->n++] = reasons[i]; /* ownership moves */
    reasons[i] = NULL;
  }
  return NULL;
}

kiln_status_t kiln_partition_plan_build(const kiln_graph_t* g, const kiln_plan_options_t* options,
                                        const kiln_target_t* target, bool strict, uint32_t gpu_lacks,
                                        uint64_t max_binding, kiln_allocator_t allocator,
                                        kiln_partition_report_t* report, kiln_plan_t** out_plan) {
  if (report) memset(report, 0, sizeof *report);
  if (!g || !options || !target || !out_plan)
    return kiln_make_status(KILN_INVALID_ARGUMENT, "partition: NULL graph, options or target");
  if (options->target != KILN_TARGET_CLASS_GPU) return kiln_plan_build(g, options, allocator, out_plan);
  const size_t nn = (size_t)(g->n_nodes > 0 ? g->n_nodes : 1);
  uint8_t* host = calloc(nn, 1);
  char** reasons = calloc(nn, sizeof(char*));
  if (!host || !reasons) {
    free(host);
    free(reasons);
    return kiln_make_status(KILN_OUT_OF_MEMORY, "out of memory partitioning the graph");
  }
  kiln_plan_host_t h = {host, !strict, reasons};
  kiln_plan_t* plan = NULL;
  kiln_status_t s = NULL;
  /* A node lowered for the CPU changes no other node's kernels, so one
   * more build settles it; the bound is a guard. */
  for (int round = 0; round < 4; ++round) {
    s = kiln_plan_build_host(g, options, &h, allocator, &plan);
    if (!s) { /* what the target's kernel_check reads */
      plan->gpu_lacks = gpu_lacks;
      plan->max_binding = max_binding;
    }
    if (s && strict && kiln_status_code(s) == KILN_UNSUPPORTED)
      s = kiln_status_annotate(s, "the %s target refuses it (--strict: no CPU fallback)", target->name);
    int32_t fresh = 0;
    if (!s && target->kernel_check) s = ask_target(plan, target, strict, host, reasons, &fresh);
    if (s || !fresh) break;
    kiln_plan_destroy(plan);
    plan = NULL;
  }
  if (!s && !plan) s = kiln_make_status(KILN_INTERNAL, "partition: the %s target kept refusing new nodes", target->name);
  if (!s && report) s = fill_report(g, host, reasons, report);
  for (size_t i = 0; i < nn; ++i) free(reasons[i]);
  free(reasons);
  free(host);
  if (s) {
    kiln_plan_destroy(plan);
    return s;
  }
  *out_plan = plan;
  return NULL;
}
