/* `kiln info MODEL.onnx`: the graph's inputs, outputs, op histogram, a
 * line per node with its costs, totals, the stages of a model that runs in
 * stages, and (--fused) the fusion report (tools/graph_info.h). */
#include "tools/graph_info.h"

#include <math.h>
#include <stdio.h>
#include <string.h>

#include "compiler/staged.h"
#include "ir/op.h"
#include "ir/passes.h"
#include "lowering/fuse.h"
#include "lowering/plan.h"

static void human(double v, char* buf, size_t n) {
  const char* u[] = {"", "K", "M", "G", "T"};
  int k = 0;
  while (fabs(v) >= 1000 && k < 4) {
    v /= 1000;
    ++k;
  }
  snprintf(buf, n, k ? "%.2f%s" : "%.0f%s", v, u[k]);
}

/* The costs kiln info prints saturate at INT64_MAX: declared shapes may be
 * as large as int64 allows, and their sums are only for display. */
static int64_t sat_add(int64_t a, int64_t b) {
  int64_t r;
  return __builtin_add_overflow(a, b, &r) ? INT64_MAX : r;
}

static int64_t tensor_bytes(const kiln_tensor_t* t) {
  if (!kiln_shape_is_static(&t->shape)) return -1;
  int64_t r;
  return __builtin_mul_overflow(kiln_shape_count(&t->shape), (int64_t)kiln_dtype_size(t->dtype), &r) ? INT64_MAX
                                                                                                      : r;
}

/* kiln info --fused: runs the passes, lowers and fuses, and prints which
 * graph nodes each kernel computes and the memory traffic fusion saved. */
static kiln_status_t print_fusion(kiln_graph_t* g) {
  int32_t before = g->n_nodes;
  KILN_RETURN_IF_ERROR(kiln_graph_optimize(g, 1, NULL));
  kiln_plan_options_t po = {KILN_TARGET_CLASS_CPU, 0, 0, 0, 0, 0};
  kiln_plan_t* p = NULL;
  KILN_RETURN_IF_ERROR(kiln_plan_build(g, &po, kiln_allocator_system(), &p));
  kiln_fusion_report_t rep;
  memset(&rep, 0, sizeof rep);
  kiln_status_t s = kiln_plan_fuse(p, &rep, NULL);
  if (s) {
    kiln_plan_destroy(p);
    return s;
  }
  printf("fusion (graph passes: %d -> %d nodes):\n", before, g->n_nodes);
  printf("  kernels: %d before fusion, %d after (%d epilogues fused, %d producers inlined)\n",
         rep.kernels_before, rep.kernels_after, rep.epilogues_fused, rep.producers_inlined);
  printf("  intermediate traffic: %.2f MB without fusion, %.2f MB no longer written/read "
         "(%.1f%% less)\n",
         (double)rep.bytes_before / 1e6, (double)rep.bytes_saved / 1e6,
         rep.bytes_before ? 100.0 * (double)rep.bytes_saved / (double)rep.bytes_before : 0.0);
  printf("  %-4s %-36s %s\n", "#", "kernel", "ops (anchor first)");
  for (int32_t k = 0; k < p->n_kernels; ++k) {
    const kiln_plan_kernel_t* kk = &p->kernels[k];
    printf("  %-4d %-36.36s %s", k, kk->func->name, g->nodes[kk->node].op_type);
    int32_t nodes[64];
    int32_t n = kiln_plan_kernel_nodes(p, k, nodes, 64);
    for (int32_t j = 0; j < n && j < 64; ++j)
      if (nodes[j] != kk->node) printf(" + %s", g->nodes[nodes[j]].op_type);
    printf("\n");
  }
  kiln_plan_destroy(p);
  return NULL;
}

/* A model with data-dependent shapes or control flow: how the staged
 * executor splits it (compiler/staged.h), with each host node and why it
 * runs on the host. */
static kiln_status_t print_stages(const kiln_graph_t* g) {
  if (!kiln_graph_needs_staging(g)) return NULL;
  const kiln_target_t* cpu = kiln_target_find("cpu");
  if (!cpu) return NULL;
  kiln_staged_options_t o = {cpu, NULL, 1, 0, 0, false, 0, NULL};
  kiln_staged_t* st = NULL;
  KILN_RETURN_IF_ERROR(kiln_staged_create(g, &o, &st));
  kiln_staged_stats_t ss;
  kiln_staged_stats(st, &ss);
  kiln_staged_destroy(st);
  kiln_compile_log_t log = {0};
  kiln_status_t s = kiln_staged_log(g, cpu, &log);
  if (!s) {
    printf("staged: %d segments, %d of them host nodes; the others compile per input shape met (kiln run, the "
           "compiler API's runner; `kiln compile` writes a staged module when every stage's inputs have fixed "
           "sizes and the host nodes are NonZero, NonMaxSuppression, Compress or a run-time TopK)\n",
           (int)ss.stages, (int)ss.host_nodes);
    for (int32_t i = 0; i < log.n; ++i)
      if (!strcmp(log.entries[i].key, "line")) printf("  %s\n", log.entries[i].text + strlen("staged: "));
  }
  kiln_compile_log_free(&log);
  return s;
}

kiln_status_t kiln_cli_print_graph_info(kiln_graph_t* g, const char* model, bool fused) {
  char b[256], b2[64], b3[64], b4[64];
  printf("model: %s  (graph '%s', ai.onnx opset %lld, %d nodes)\n", model, g->name,
         (long long)g->opset, g->n_nodes);
  printf("inputs:\n");
  for (int32_t i = 0; i < g->n_inputs; ++i) {
    const kiln_tensor_t* t = &g->tensors[g->inputs[i]];
    printf("  %-24s %-5s %s\n", t->name, kiln_dtype_name(t->dtype),
           kiln_graph_format_shape(g, &t->shape, b, sizeof b));
  }
  printf("outputs:\n");
  for (int32_t i = 0; i < g->n_outputs; ++i) {
    const kiln_tensor_t* t = &g->tensors[g->outputs[i]];
    printf("  %-24s %-5s %s\n", t->name, kiln_dtype_name(t->dtype),
           kiln_graph_format_shape(g, &t->shape, b, sizeof b));
  }
  /* Op histogram in first-seen order. */
  printf("ops:\n");
  for (int32_t i = 0; i < g->n_nodes; ++i) {
    bool seen = false;
    for (int32_t j = 0; j < i && !seen; ++j) seen = !strcmp(g->nodes[j].op_type, g->nodes[i].op_type);
    if (seen) continue;
    int count = 0;
    for (int32_t j = i; j < g->n_nodes; ++j) count += !strcmp(g->nodes[j].op_type, g->nodes[i].op_type);
    printf("  %-24s %d\n", g->nodes[i].op_type, count);
  }
  printf("layers:\n  %-4s %-32s %-18s %-20s %10s %10s %10s\n", "#", "node", "op", "output shape",
         "params", "FLOPs", "bytes");
  int64_t tot_params = 0, tot_flops = 0, tot_bytes = 0;
  bool flops_unknown = false, bytes_unknown = false;
  for (int32_t i = 0; i < g->n_nodes; ++i) {
    const kiln_node_t* n = &g->nodes[i];
    int64_t params = 0, bytes = 0;
    bool bknown = true, static_out = true;
    kiln_tensor_t* in[KILN_MAX_NODE_INPUTS];
    kiln_tensor_t* out[KILN_MAX_NODE_OUTPUTS];
    for (int32_t j = 0; j < n->n_inputs; ++j) {
      int32_t t = n->inputs[j];
      in[j] = t >= 0 ? &g->tensors[t] : NULL;
      if (t < 0) continue;
      if (g->tensors[t].flags & KILN_TENSOR_INITIALIZER)
        params = sat_add(params, kiln_shape_count(&g->tensors[t].shape));
      int64_t tb = tensor_bytes(&g->tensors[t]);
      if (tb < 0) bknown = false;
      else bytes = sat_add(bytes, tb);
    }
    for (int32_t j = 0; j < n->n_outputs; ++j) {
      int32_t t = n->outputs[j];
      out[j] = t >= 0 ? &g->tensors[t] : NULL;
      if (t < 0) continue;
      int64_t tb = tensor_bytes(&g->tensors[t]);
      if (tb < 0) bknown = false, static_out = false;
      else bytes = sat_add(bytes, tb);
    }
    int64_t flops = -1;
    bool all_static = static_out;
    for (int32_t j = 0; j < n->n_inputs; ++j)
      if (in[j] && !kiln_shape_is_static(&in[j]->shape)) all_static = false;
    if (all_static) {
      kiln_infer_t ic = {g, n, g->opset, n->n_inputs, in, n->n_outputs, out, g->allocator, false};
      if (n->schema->flops) flops = n->schema->flops(&ic);
      else flops = n->n_outputs && out[0] ? kiln_shape_count(&out[0]->shape) : 0;
    }
    const kiln_tensor_t* o0 = n->n_outputs && n->outputs[0] >= 0 ? &g->tensors[n->outputs[0]] : NULL;
    human((double)params, b2, sizeof b2);
    if (flops >= 0) human((double)flops, b3, sizeof b3);
    else snprintf(b3, sizeof b3, "?");
    if (bknown) human((double)bytes, b4, sizeof b4);
    else snprintf(b4, sizeof b4, "?");
    printf("  %-4d %-32.32s %-18.18s %-20s %10s %10s %10s\n", i, n->name, n->op_type,
           o0 ? kiln_graph_format_shape(g, &o0->shape, b, sizeof b) : "-", b2, b3, b4);
    tot_params = sat_add(tot_params, params);
    if (flops >= 0) tot_flops = sat_add(tot_flops, flops);
    else flops_unknown = true;
    if (bknown) tot_bytes = sat_add(tot_bytes, bytes);
    else bytes_unknown = true;
  }
  int64_t weight_bytes = 0;
  int64_t all_params = 0;
  for (int32_t t = 0; t < g->n_tensors; ++t)
    if (g->tensors[t].flags & KILN_TENSOR_INITIALIZER) {
      all_params = sat_add(all_params, kiln_shape_count(&g->tensors[t].shape));
      weight_bytes = sat_add(weight_bytes, tensor_bytes(&g->tensors[t]));
    }
  human((double)all_params, b2, sizeof b2);
  human((double)tot_flops, b3, sizeof b3);
  human((double)tot_bytes, b4, sizeof b4);
  printf("total: %s parameters (%lld, %.2f MB of weights), %s%s FLOPs, %s%s bytes moved\n", b2,
         (long long)all_params, (double)weight_bytes / 1e6, b3, flops_unknown ? "+?" : "", b4,
         bytes_unknown ? "+?" : "");
  KILN_RETURN_IF_ERROR(print_stages(g));
  return fused ? print_fusion(g) : NULL;
}
