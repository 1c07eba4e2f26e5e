/* The compile pipeline (see pipeline.h). What it did goes into a log of
 * figures and lines; the printers it reuses (pass log, precision and
 * calibration reports) write to a memory stream whose lines join the log. */
#define _GNU_SOURCE /* vasprintf */
#include "compiler/pipeline.h"

#include "lowering/layout.h"
#include "lowering/sparse_block.h"

#include "targets/partition.h"

#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <errno.h>
#include <string.h>
#include <time.h>

#include "compiler/calibrate.h"
#include "compiler/tune.h"
#include "compiler/tune_cpu.h"
#include "ir/passes.h"
#include "lowering/fuse.h"
#include "lowering/plan_dyn.h"
#include "lowering/plan.h"
#include "targets/program_build.h"

static double now_s(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

void kiln_compile_log_free(kiln_compile_log_t* log) {
  if (!log) return;
  for (int32_t i = 0; i < log->n; ++i) free((char*)log->entries[i].text);
  free(log->entries);
  memset(log, 0, sizeof *log);
}

/* Takes ownership of |text| (malloc'd), also on error. */
static kiln_status_t add(kiln_compile_log_t* log, const char* section, const char* key, double value, char* text) {
  if (!text) return kiln_make_status(KILN_OUT_OF_MEMORY, "compile report: out of memory");
  if (log->n == log->cap) {
    int32_t cap = log->cap ? 2 * log->cap : 32;
    void* e = realloc(log->entries, (size_t)cap * sizeof *log->entries);
    if (!e) {
      free(text);
      return kiln_make_status(KILN_OUT_OF_MEMORY, "compile report: out of memory (%d entries)", (int)cap);
    }
    log->entries = e;
    log->cap = cap;
  }
  log->entries[log->n++] = (kiln_compile_report_entry_t){section, key, value, text};
  return NULL;
}

kiln_status_t kiln_compile_log_value(kiln_compile_log_t* log, const char* section, const char* key, double value) {
  return add(log, section, key, value, strdup(""));
}

kiln_status_t kiln_compile_log_line(kiln_compile_log_t* log, const char* section, const char* fmt, ...) {
  va_list ap;
  va_start(ap, fmt);
  char* text = NULL;
  int n = vasprintf(&text, fmt, ap);
  va_end(ap);
  if (n < 0) return kiln_make_status(KILN_OUT_OF_MEMORY, "compile report: out of memory");
  if (n > 0 && text[n - 1] == '\n') text[n - 1] = '\0';
  return add(log, section, "line", 0, text);
}

kiln_status_t kiln_compile_log_text(kiln_compile_log_t* log, const char* section, const char* text) {
  kiln_status_t s = NULL;
  for (const char* p = text; !s && p && *p;) {
    const char* nl = strchr(p, '\n');
    size_t n = nl ? (size_t)(nl - p) : strlen(p);
    s = kiln_compile_log_line(log, section, "%.*s", (int)n, p);
    p += n + (nl ? 1 : 0);
  }
  return s;
}

/* A memory stream for a printer, then its lines into the log. */
typedef struct {
  FILE* f;
  char* buf;
  size_t len;
} mem_t;

static kiln_status_t mem_open(mem_t* m) {
  memset(m, 0, sizeof *m);
  m->f = open_memstream(&m->buf, &m->len);
  return m->f ? NULL : kiln_make_status(KILN_OUT_OF_MEMORY, "compile report: cannot open a memory stream");
}

static kiln_status_t mem_close(mem_t* m, kiln_compile_log_t* log, const char* section) {
  kiln_status_t s = NULL;
  if (fclose(m->f) != 0) s = kiln_make_status(KILN_OUT_OF_MEMORY, "compile report: memory stream failed");
  if (!s) s = kiln_compile_log_text(log, section, m->buf);
  free(m->buf);
  memset(m, 0, sizeof *m);
  return s;
}

void kiln_compile_precision_default(kiln_compile_precision_t* p) {
  memset(p, 0, sizeof(*p));
  p->mode = KILN_PRECISION_FP32;
  p->calibrate_count = 4;
  p->tolerance = 1e-2;
}

kiln_status_t kiln_compile_graph_passes(kiln_graph_t* g, int opt, const kiln_target_t* target,
                                       kiln_compile_log_t* log) {
  return kiln_compile_graph_passes_except(g, opt, target, NULL, log);
}

kiln_status_t kiln_compile_graph_passes_except(kiln_graph_t* g, int opt, const kiln_target_t* target,
                                              const char* extra_skip, kiln_compile_log_t* log) {
  int32_t before = g->n_nodes;
  double t0 = now_s();
  /* the target's skipped passes and |extra_skip| */
  const char* skip[17] = {0};
  int32_t ns = 0;
  for (const char* const* p = target ? target->skip_graph_passes : NULL; p && *p && ns < 15; ++p) skip[ns++] = *p;
  if (extra_skip) skip[ns++] = extra_skip;
  mem_t m;
  KILN_RETURN_IF_ERROR(mem_open(&m));
  kiln_status_t s = kiln_graph_optimize_except(g, opt, ns ? skip : NULL, m.f);
  kiln_status_t ms = mem_close(&m, log, "passes");
  if (s) {
    kiln_status_free(ms);
    return s;
  }
  KILN_RETURN_IF_ERROR(ms);
  double ms_taken = (now_s() - t0) * 1e3;
  KILN_RETURN_IF_ERROR(kiln_compile_log_value(log, "passes", "nodes_before", before));
  KILN_RETURN_IF_ERROR(kiln_compile_log_value(log, "passes", "nodes_after", g->n_nodes));
  KILN_RETURN_IF_ERROR(kiln_compile_log_value(log, "passes", "ms", ms_taken));
  return kiln_compile_log_line(log, "passes", "graph passes (-O%d): %d -> %d nodes in %.1f ms", opt, before,
                               g->n_nodes, ms_taken);
}

/* The effective per-node precision of |plan| as policy rules (one per node
 * that has a kernel), for write_policy in fp16 mode. */
static kiln_status_t effective_policy(const kiln_plan_t* plan, const kiln_precision_policy_t* pol,
                                      kiln_precision_policy_t* out) {
  const kiln_graph_t* g = plan->graph;
  for (int32_t n = 0; n < g->n_nodes; ++n) {
    bool has_kernel = false;
    for (int32_t k = 0; k < plan->n_kernels && !has_kernel; ++k) {
      int32_t nodes[256];
      int32_t m = kiln_plan_kernel_nodes(plan, k, nodes, 256);
      for (int32_t i = 0; i < m && i < 256; ++i) has_kernel |= nodes[i] == n;
    }
    if (has_kernel)
      KILN_RETURN_IF_ERROR(kiln_precision_policy_add(out, KILN_MATCH_NODE, g->nodes[n].name,
                                                     kiln_precision_node_fp16(pol, g, n, true)));
  }
  return NULL;
}

/* Calibrates |plan| for auto into |chosen| and logs what it chose. */
static kiln_status_t calibrate(kiln_plan_t* plan, const kiln_compile_precision_t* pr,
                               const kiln_precision_policy_t* user, kiln_precision_policy_t* chosen,
                               kiln_calibrate_report_t* cal, kiln_compile_log_t* log) {
  kiln_calibrate_options_t co;
  kiln_calibrate_options_default(&co);
  co.input_dir = pr->calibrate_dir;
  co.count = pr->calibrate_count;
  co.seed = pr->seed;
  co.rtol = pr->tolerance;
  co.base = user;
  double t0 = now_s();
  KILN_RETURN_IF_ERROR(kiln_calibrate_precision(plan, &co, chosen, cal));
  int32_t n16 = 0;
  for (int32_t i = 0; i < cal->n_groups; ++i) n16 += cal->groups[i].fp16;
  KILN_RETURN_IF_ERROR(kiln_compile_log_value(log, "precision", "calibration_groups", cal->n_groups));
  KILN_RETURN_IF_ERROR(kiln_compile_log_value(log, "precision", "calibration_groups_fp16", n16));
  KILN_RETURN_IF_ERROR(kiln_compile_log_value(log, "precision", "calibration_error_ratio", cal->err_ratio));
  KILN_RETURN_IF_ERROR(kiln_compile_log_line(
      log, "precision",
      "calibrated on %d %s inputs in %.1f s: %d of %d fused groups fp16, error %.3g of the tolerance "
      "(rtol %g, atol %g)",
      cal->samples, pr->calibrate_dir ? "given" : "seeded random", now_s() - t0, n16, cal->n_groups,
      cal->err_ratio, cal->rtol, cal->atol));
  const kiln_graph_t* g = plan->graph;
  for (int32_t i = 0; i < cal->n_groups; ++i)
    if (!cal->groups[i].fp16 && strcmp(cal->groups[i].reason, "policy") != 0)
      KILN_RETURN_IF_ERROR(kiln_compile_log_line(
          log, "precision", "  kept fp32: group %d '%s' (%s): %s, range [%.4g, %.4g]", i,
          g->nodes[cal->groups[i].nodes[0]].name, g->nodes[cal->groups[i].nodes[0]].op_type,
          cal->groups[i].reason, cal->groups[i].min, cal->groups[i].max));
  return NULL;
}

/* Writes the precision report file (calibration first, when there was one). */
static kiln_status_t write_report(const kiln_plan_t* plan, const char* path, const kiln_calibrate_report_t* cal,
                                  const kiln_precision_report_t* rep, kiln_compile_log_t* log) {
  FILE* f = fopen(path, "w");
  if (!f) return kiln_make_status(KILN_IO_ERROR, "%s: cannot write the precision report", path);
  if (cal) {
    kiln_calibrate_report_print(plan, cal, f);
    fputc('\n', f);
  }
  kiln_precision_report_print(plan, rep, true, f);
  if (fclose(f) != 0) return kiln_make_status(KILN_IO_ERROR, "%s: write error", path);
  return kiln_compile_log_line(log, "output", "wrote %s", path);
}

/* fp16|auto on a fused plan: warn (or fail) without fp16 arithmetic,
 * calibrate for auto, rewrite, report, write the policy. */
static kiln_status_t apply_precision(kiln_plan_t* plan, const kiln_compile_precision_t* pr, bool f32_workspaces,
                                     kiln_compile_log_t* log) {
  const char* dev = pr->device ? pr->device : "the device";
  if (!pr->fp16_arith) {
    if (pr->strict)
      return kiln_make_status(KILN_UNSUPPORTED,
                              "--precision %s: %s has no fp16 arithmetic (--strict; without it kiln uses "
                              "fp16 storage with fp32 arithmetic)",
                              kiln_precision_mode_name(pr->mode), dev);
    KILN_RETURN_IF_ERROR(kiln_compile_log_line(log, "warning",
                                               "--precision %s: %s has no fp16 arithmetic; using fp16 storage "
                                               "with fp32 arithmetic",
                                               kiln_precision_mode_name(pr->mode), dev));
  }
  kiln_precision_policy_t user = {0}, chosen = {0};
  kiln_calibrate_report_t cal;
  memset(&cal, 0, sizeof cal);
  bool have_cal = false;
  kiln_precision_report_t rep;
  memset(&rep, 0, sizeof rep);
  kiln_status_t s = NULL;
  if (pr->policy_path) s = kiln_precision_policy_read(pr->policy_path, &user);
  const kiln_precision_policy_t* use = &user;
  if (!s && pr->mode == KILN_PRECISION_AUTO) {
    s = calibrate(plan, pr, &user, &chosen, &cal, log);
    have_cal = !s;
    use = &chosen;
  }
  if (!s && pr->write_policy) {
    if (pr->mode == KILN_PRECISION_AUTO) {
      for (int32_t i = 0; !s && pr->int8_rules && i < pr->int8_rules->n; ++i) {
        const kiln_precision_rule_t* r = &pr->int8_rules->rules[i];
        s = kiln_precision_policy_add(&chosen, r->match, r->name, false);
        if (!s) chosen.rules[chosen.n - 1].int8 = r->int8;
      }
      char hdr[256];
      snprintf(hdr, sizeof hdr, "kiln --precision auto: %d samples, rtol %g, atol %g; later rules win",
               cal.samples, cal.rtol, cal.atol);
      s = kiln_precision_policy_write(&chosen, hdr, pr->write_policy);
    } else {
      kiln_precision_policy_t eff = {0};
      s = effective_policy(plan, &user, &eff);
      if (!s) s = kiln_precision_policy_write(&eff, "kiln --precision fp16: the precision of every node", pr->write_policy);
      kiln_precision_policy_free(&eff);
    }
    if (!s) s = kiln_compile_log_line(log, "output", "wrote %s", pr->write_policy);
  }
  kiln_precision_options_t po = {KILN_PRECISION_FP16, pr->fp16_arith, pr->fp16_accumulate, use,
                                 f32_workspaces && !pr->fp16_workspaces, pr->weights_only};
  if (!s) s = kiln_plan_set_precision(plan, &po, &rep);
  if (!s) s = kiln_compile_log_value(log, "precision", "kernels_fp16", rep.kernels_fp16);
  if (!s) s = kiln_compile_log_value(log, "precision", "kernels_fp16_arith", rep.kernels_fp16_arith);
  if (!s) s = kiln_compile_log_value(log, "precision", "weight_bytes_before", (double)rep.weight_bytes_before);
  if (!s) s = kiln_compile_log_value(log, "precision", "weight_bytes_after", (double)rep.weight_bytes_after);
  mem_t m;
  if (!s && !(s = mem_open(&m))) {
    kiln_precision_report_print(plan, &rep, false, m.f);
    s = mem_close(&m, log, "precision");
  }
  if (!s && pr->report_path) s = write_report(plan, pr->report_path, have_cal ? &cal : NULL, &rep, log);
  kiln_precision_report_free(&rep);
  kiln_calibrate_report_free(&cal);
  kiln_precision_policy_free(&user);
  kiln_precision_policy_free(&chosen);
  return s;
}

/* plan.txt and the generated source, in the target's language. */
static kiln_status_t dump(const kiln_plan_t* plan, const kiln_program_t* p, const kiln_compile_config_t* c,
                          kiln_compile_log_t* log) {
  char path[4096];
  snprintf(path, sizeof path, "%s/plan.txt", c->dump_dir);
  FILE* f = fopen(path, "w");
  if (!f) return kiln_make_status(KILN_IO_ERROR, "dump: %s: cannot create: %s", path, strerror(errno));
  kiln_plan_dump(plan, f, true);
  fclose(f);
  KILN_RETURN_IF_ERROR(kiln_compile_log_line(log, "output", "wrote %s", path));
  if (!p->code.text) return NULL;
  snprintf(path, sizeof path, "%s/kernels.%s", c->dump_dir, c->target->source_ext);
  if (!(f = fopen(path, "w"))) return kiln_make_status(KILN_IO_ERROR, "dump: %s: cannot create: %s", path, strerror(errno));
  fwrite(p->code.text, 1, p->code.text_len, f);
  fclose(f);
  return kiln_compile_log_line(log, "output", "wrote %s", path);
}

/* A heterogeneous program's device switches and the bytes crossing them
 * per run: a root read on one device after the other wrote it (or a model
 * input first read on the CPU) moves once per switch. */
static kiln_status_t log_hetero(const kiln_program_t* p, kiln_compile_log_t* log) {
  const int32_t nh = kiln_program_kernels_on(p, KILN_KERNEL_ON_HOST);
  if (!nh) return NULL;
  uint8_t* where = calloc((size_t)p->n_buffers + 1, 1); /* device + 1 of the last write; 0: none */
  if (!where) return kiln_make_status(KILN_OUT_OF_MEMORY, "out of memory");
  for (int32_t i = 0; i < p->n_inputs; ++i) where[kiln_program_root(p, p->inputs[i])] = KILN_KERNEL_ON_TARGET + 1;
  uint64_t bytes = 0;
  int32_t switches = 0;
  for (int32_t k = 0; k < p->n_kernels; ++k) {
    const kiln_program_kernel_t* kk = &p->kernels[k];
    switches += k > 0 && kk->device != p->kernels[k - 1].device;
    for (int32_t j = 0; j < kk->n_args; ++j) {
      const int32_t r = kiln_program_root(p, kk->args[j]);
      if (p->buffers[r].kind == KILN_PB_CONST) continue;
      if (where[r] && where[r] != kk->device + 1) {
        bytes += p->buffers[r].bytes;
        where[r] = (uint8_t)(kk->device + 1); /* now on both; counted once */
      }
      if (kk->access[j] & KILN_ARG_WRITE) where[r] = (uint8_t)(kk->device + 1);
    }
  }
  for (int32_t i = 0; i < p->n_outputs; ++i) {
    const int32_t r = kiln_program_root(p, p->outputs[i]);
    if (where[r] == KILN_KERNEL_ON_HOST + 1) bytes += p->buffers[r].bytes; /* read back from the CPU's arena */
  }
  free(where);
  kiln_status_t s = kiln_compile_log_value(log, "fallback", "kernels_on_cpu", nh);
  if (!s) s = kiln_compile_log_value(log, "fallback", "device_switches", switches);
  if (!s) s = kiln_compile_log_value(log, "fallback", "transfer_bytes", (double)bytes);
  if (!s)
    s = kiln_compile_log_line(log, "fallback",
                              "heterogeneous: %d of %d kernels on the cpu, %d device switches, %.3f MB moved between "
                              "devices per run", (int)nh, (int)p->n_kernels, (int)switches, (double)bytes / 1e6);
  return s;
}

static kiln_status_t log_results(const kiln_plan_t* plan, const kiln_program_t* p, const kiln_compile_config_t* c,
                                 const kiln_fusion_report_t* fu, double lower_ms, double codegen_ms,
                                 kiln_compile_log_t* log) {
  if (c->opt >= 1) {
    KILN_RETURN_IF_ERROR(kiln_compile_log_value(log, "fusion", "kernels_before", fu->kernels_before));
    KILN_RETURN_IF_ERROR(kiln_compile_log_value(log, "fusion", "kernels_after", fu->kernels_after));
    KILN_RETURN_IF_ERROR(kiln_compile_log_value(log, "fusion", "epilogues", fu->epilogues_fused));
    KILN_RETURN_IF_ERROR(kiln_compile_log_value(log, "fusion", "producers_inlined", fu->producers_inlined));
    KILN_RETURN_IF_ERROR(kiln_compile_log_value(log, "fusion", "bytes_saved", (double)fu->bytes_saved));
    KILN_RETURN_IF_ERROR(kiln_compile_log_line(
        log, "fusion", "fused %d kernels into %d (%d epilogues, %d producers inlined), %.1f MB less "
        "intermediate traffic",
        fu->kernels_before, fu->kernels_after, fu->epilogues_fused, fu->producers_inlined,
        (double)fu->bytes_saved / 1e6));
  }
  KILN_RETURN_IF_ERROR(kiln_compile_log_value(log, "plan", "kernels", plan->n_kernels));
  KILN_RETURN_IF_ERROR(kiln_compile_log_value(log, "plan", "code_bytes", (double)p->code.text_len));
  KILN_RETURN_IF_ERROR(kiln_compile_log_value(log, "plan", "weights_bytes", (double)p->weights_len));
  KILN_RETURN_IF_ERROR(kiln_compile_log_value(log, "timing", "lowering_ms", lower_ms));
  KILN_RETURN_IF_ERROR(kiln_compile_log_value(log, "timing", "codegen_ms", codegen_ms));
  return kiln_compile_log_line(log, "plan",
                               "compiled %d kernels for %s: lowering %.1f ms, codegen %.1f ms, %.1f KB of code, "
                               "%.1f MB of weights",
                               plan->n_kernels, c->target->name, lower_ms, codegen_ms,
                               (double)p->code.text_len / 1e3, (double)p->weights_len / 1e6);
}

/* Block-sparse weights: a line per convolution whose weights have zero
 * blocks (or that runs sparse), and the totals. */
static kiln_status_t log_sparse(const kiln_plan_t* plan, kiln_compile_log_t* log) {
  int32_t n_sparse = 0;
  int64_t dense = 0, sparse = 0;
  for (int32_t i = 0; i < plan->n_sparse_notes; ++i) {
    const kiln_plan_sparse_note_t* n = &plan->sparse_notes[i];
    const char* name = n->node >= 0 && n->node < plan->graph->n_nodes ? plan->graph->nodes[n->node].name : "?";
    n_sparse += n->sparse;
    dense += n->dense_bytes;
    sparse += n->sparse ? n->sparse_bytes : n->dense_bytes;
    if (n->sparse)
      KILN_RETURN_IF_ERROR(kiln_compile_log_line(
          log, "sparse", "sparse: %s: %.1f%% of its %lldx%lld weight blocks zero: block-sparse kernel, weights %.1f -> %.1f KB",
          name, 100 * n->zero_blocks, (long long)n->rows, (long long)n->cols, (double)n->dense_bytes / 1e3,
          (double)n->sparse_bytes / 1e3));
    else
      KILN_RETURN_IF_ERROR(kiln_compile_log_line(
          log, "sparse", "sparse: %s: %.1f%% of its %lldx%lld weight blocks zero: dense kernel (below the %.0f%% rule)",
          name, 100 * n->zero_blocks, (long long)n->rows, (long long)n->cols, 100 * KILN_SPARSE_AUTO_MIN_ZERO));
  }
  if (!plan->n_sparse_notes) return NULL;
  KILN_RETURN_IF_ERROR(kiln_compile_log_value(log, "sparse", "layers", n_sparse));
  KILN_RETURN_IF_ERROR(kiln_compile_log_value(log, "sparse", "weights_bytes_dense", (double)dense));
  return kiln_compile_log_value(log, "sparse", "weights_bytes", (double)sparse);
}

/* A tuning cache's lines into the log, "warning: " and "note: " ones in
 * those sections (a note per untuned kernel only when the cache was asked
 * for); frees |buf|. */
static kiln_status_t tuning_lines(char* buf, kiln_status_t s, const kiln_compile_config_t* c,
                                  kiln_compile_log_t* log) {
  for (char* line = buf; !s && line && *line;) {
    char* nl = strchr(line, '\n');
    if (nl) *nl = 0;
    if (c->tuning_default && !strncmp(line, "note: tuning: ", 14) && strstr(line, ") untuned")) {
      line = nl ? nl + 1 : NULL;
      continue;
    }
    if (!strncmp(line, "warning: ", 9)) s = kiln_compile_log_line(log, "warning", "%s", line + 9);
    else if (!strncmp(line, "note: ", 6)) s = kiln_compile_log_line(log, "note", "%s", line + 6);
    else s = kiln_compile_log_line(log, "tuning", "%s", line);
    line = nl ? nl + 1 : NULL;
  }
  free(buf);
  return s;
}

/* A QLinearConv / QLinearMatMul kernel of a GPU plan that no int8
 * template took runs as the lowering's plain integer loops (correct, one
 * work-item per output, slow): a note names it. */
static kiln_status_t log_q8_untemplated(const kiln_plan_t* plan, const kiln_target_t* t,
                                        const kiln_template_set_t* set, kiln_compile_log_t* log) {
  if (t->lowering != KILN_TARGET_CLASS_GPU || !set->q8 || !plan->graph) return NULL;
  for (int32_t k = 0; k < plan->n_kernels; ++k) {
    const kiln_plan_kernel_t* pk = &plan->kernels[k];
    if (pk->tmpl || pk->host || pk->node < 0 || pk->node >= plan->graph->n_nodes) continue;
    const kiln_node_t* n = &plan->graph->nodes[pk->node];
    if (strcmp(n->op_type, "QLinearConv") && strcmp(n->op_type, "QLinearMatMul")) continue;
    KILN_RETURN_IF_ERROR(kiln_compile_log_line(
        log, "note",
        "%s '%s' runs as plain integer loops on %s: no int8 template takes it (they need u8/i8 operands, f32 "
        "scales, one x scale and zero point, QLinearMatMul's B 2-D, nothing fused in%s)",
        n->op_type, n->name, t->name, set->q8_max_trips ? ", and the device's loop limit" : ""));
  }
  return NULL;
}

static kiln_status_t log_fallbacks(const kiln_graph_t* g, const kiln_target_t* t, const kiln_partition_report_t* r,
                                   kiln_compile_log_t* log) {
  if (!r->n) return NULL;
  KILN_RETURN_IF_ERROR(kiln_compile_log_value(log, "fallback", "nodes", r->n));
  for (int32_t i = 0; i < r->n; ++i)
    KILN_RETURN_IF_ERROR(kiln_compile_log_line(log, "fallback", "fallback: node '%s' (%s) runs on the cpu: %s says: %s",
                                               g->nodes[r->nodes[i]].name, g->nodes[r->nodes[i]].op_type, t->name,
                                               r->reasons[i] ? r->reasons[i] : "refuses it"));
  return NULL;
}

/* One "plan" line per GEMM over the device's binding limit: how it was
 * split (ir/pass_split.c), or why it stays whole (then the partition's
 * fallback line follows). */
static kiln_status_t log_split(void* user, const kiln_gemm_split_note_t* n) {
  kiln_compile_log_t* log = user;
  if (n->pieces > 1)
    return kiln_compile_log_line(log, "plan",
                                 "split: %s '%s' binds %llu bytes, the device at most %llu: %d GEMMs of %lld columns "
                                 "and a Concat",
                                 n->op, n->node, (unsigned long long)n->bytes, (unsigned long long)n->limit,
                                 (int)n->pieces, (long long)n->cols);
  return kiln_compile_log_line(log, "plan", "split: %s '%s' binds %llu bytes, the device at most %llu: not split, %s",
                               n->op, n->node, (unsigned long long)n->bytes, (unsigned long long)n->limit,
                               n->why ? n->why : "");
}

/* The template choice with a tuning cache (compiler/tune.h). */
static kiln_status_t tuned_choose(kiln_plan_t* plan, const kiln_template_set_t* set, const kiln_compile_config_t* c,
                                  kiln_compile_log_t* log) {
  char* buf = NULL;
  size_t len = 0;
  FILE* notes = open_memstream(&buf, &len);
  kiln_tune_use_report_t r;
  kiln_status_t s = kiln_tune_choose_file(plan, set, c->tuning_path, c->tuning_device, c->target->name, c->threads,
                                          notes, &r);
  if (notes) fclose(notes);
  s = tuning_lines(buf, s, c, log);
  if (!s) s = kiln_compile_log_value(log, "tuning", "tuned", r.tuned);
  if (!s) s = kiln_compile_log_value(log, "tuning", "untuned", r.untuned);
  return s;
}

int kiln_compile_layout_parse(const char* s) {
  if (!s) return -1;
  if (!strcmp(s, "nchw")) return KILN_LAYOUT_MODE_NCHW;
  if (!strcmp(s, "auto")) return KILN_LAYOUT_MODE_AUTO;
  return -1;
}

int32_t kiln_compile_layout_block(const kiln_compile_config_t* c) {
  int mode = c->layout;
  if (mode == KILN_LAYOUT_MODE_DEFAULT) {
    int e = kiln_compile_layout_parse(getenv("KILN_LAYOUT"));
    mode = e > 0 ? e : KILN_LAYOUT_MODE_AUTO;
  }
  /* -O0 keeps NCHW; so does auto precision, whose calibration compares
   * intermediates in the graph's layout */
  if (mode != KILN_LAYOUT_MODE_AUTO || c->opt < 1 || c->target->lowering != KILN_TARGET_CLASS_CPU) return 0;
  if (c->precision && c->precision->mode == KILN_PRECISION_AUTO) return 0;
  if (c->dyn_dim) return 0;
  /* block-sparse convs forced on: that kernel is an NCHW one */
  if (c->sparse == KILN_SPARSE_ON) return 0;
  return kiln_cpu_simd().lanes;
}

kiln_status_t kiln_compile_program(kiln_graph_t* g, const kiln_compile_config_t* c, kiln_compile_log_t* log,
                                   kiln_program_t** out) {
  kiln_plan_options_t po = {c->target->lowering, c->threads, c->loop_limit, c->sparse, kiln_compile_layout_block(c),
                            c->target->ew_lanes};
  kiln_plan_t* plan = NULL;
  kiln_fusion_report_t fusion;
  memset(&fusion, 0, sizeof fusion);
  double t0 = now_s();
  /* the CPU's tuned knobs are the GEMMs' lowering (compiler/tune_cpu.h) */
  const bool cpu_tuned = c->tuning_path && c->target->lowering == KILN_TARGET_CLASS_CPU;
  kiln_tune_cpu_table_t cpu_gemms;
  memset(&cpu_gemms, 0, sizeof cpu_gemms);
  kiln_status_t s = NULL;
  if (cpu_tuned) {
    char* buf = NULL;
    size_t len = 0;
    FILE* notes = open_memstream(&buf, &len);
    kiln_tune_use_report_t r;
    s = kiln_tune_cpu_plan_build(g, &po, c->tuning_path, c->tuning_device, notes, c->tuning_default, &cpu_gemms, &r,
                                 &plan);
    if (notes) fclose(notes);
    s = tuning_lines(buf, s, c, log);
    if (!s) s = kiln_compile_log_value(log, "tuning", "tuned", r.tuned);
    if (!s) s = kiln_compile_log_value(log, "tuning", "untuned", r.untuned);
  } else {
    /* GPU targets: the nodes the target refuses run on the CPU of the same
     * session (targets/partition.h), one line each; --strict refuses. */
    kiln_partition_report_t fallbacks;
    /* a buffer the device cannot bind in one piece sends its node there too */
    const uint64_t max_binding = c->tuning_device ? c->tuning_device->info.max_binding_bytes : 0;
    /* unless the node is a GEMM over a constant weight: its column slices fit */
    if (c->target->lowering == KILN_TARGET_CLASS_GPU && max_binding)
      s = kiln_graph_split_wide_gemms(g, max_binding, log_split, log);
    if (!s) s = kiln_partition_plan_build(g, &po, c->target, c->precision && c->precision->strict, c->gpu_lacks,
                                  max_binding, kiln_allocator_system(),
                                  &fallbacks, &plan);
    if (!s) s = log_fallbacks(g, c->target, &fallbacks, log);
    kiln_partition_report_free(&fallbacks);
  }
  const char* env_layout = getenv("KILN_LAYOUT");
  if (!s && c->layout == KILN_LAYOUT_MODE_DEFAULT && env_layout && kiln_compile_layout_parse(env_layout) < 0)
    s = kiln_compile_log_line(log, "warning", "KILN_LAYOUT='%s' is neither nchw nor auto: ignored", env_layout);
  if (!s && plan->layout) {
    char ln[24];
    const kiln_layout_t* L = plan->layout;
    s = kiln_compile_log_line(log, "plan", "layout: %s, %d of %d nodes blocked, %d tensors, %d reorders (%d before the pairs cancelled)",
                              kiln_layout_name(L->block, ln, sizeof ln), L->n_blocked_nodes, g->n_nodes,
                              L->n_blocked_tensors, L->n_reorders, L->n_reorders_naive);
  }
  /* the device's texel buffer size (the Vulkan texel reads keep to it) */
  if (!s && c->target->lowering == KILN_TARGET_CLASS_GPU && c->tuning_device)
    plan->max_texels = c->tuning_device->info.max_texels;
  /* and its work-group counts (the Vulkan grids fold to fit them) */
  if (!s && c->target->lowering == KILN_TARGET_CLASS_GPU && c->tuning_device)
    for (int j = 0; j < 3; ++j) plan->max_groups[j] = c->tuning_device->info.max_groups[j];
  if (!s && c->opt >= 1) s = kiln_plan_fuse(plan, &fusion, NULL);
  const kiln_compile_precision_t* pr = c->precision;
  /* int8 quantized the graph before its passes; its float tensors are fp32 */
  bool low = pr && (pr->mode == KILN_PRECISION_FP16 || pr->mode == KILN_PRECISION_AUTO);
  if (!s && low) s = apply_precision(plan, pr, c->target->fp16_keeps_f32_workspaces, log);
  /* the fast paths (template kernels) the target has, chosen last: fusion
   * and precision change what matches */
  kiln_template_set_t templates;
  kiln_program_templates(c->target, &templates);
  templates.gpu_lacks = c->gpu_lacks;
  if (c->tuning_device) kiln_compile_device_limits(&c->tuning_device->info, &templates.limits);
  if (!s) s = c->tuning_path && !cpu_tuned ? tuned_choose(plan, &templates, c, log) : kiln_template_choose(plan, &templates);
  if (!s) s = log_q8_untemplated(plan, c->target, &templates, log);
  if (!s && c->dyn_dim) {
    s = kiln_plan_make_dynamic_set(plan, c->dyn_dim, c->dyn_lo, c->dyn_hi, &templates);
    if (!s)
      s = kiln_compile_log_line(log, "plan", "dynamic dim '%s' = %lld..%lld: %d kernels loop over it at run time",
                                c->dyn_dim, (long long)c->dyn_lo, (long long)c->dyn_hi, plan->n_kernels);
  }
  double t1 = now_s();
  char opts[128];
  snprintf(opts, sizeof opts, "-O%d%s%s", c->opt, low && pr->fp16_arith ? " fp16-arith" : "",
           low && pr->fp16_accumulate ? " fp16-accumulate" : "");
  kiln_program_build_options_t bo = {.model_name = c->model_name,
                                     .precision = pr ? kiln_precision_mode_name(pr->mode) : "fp32",
                                     .options = opts,
                                     .cpu_targets = c->cpu_targets};
  kiln_program_t* p = NULL;
  if (!s) s = kiln_program_build(plan, c->target, &bo, kiln_allocator_system(), &p);
  if (!s && c->tuning_path) s = cpu_tuned ? kiln_tune_cpu_mark_program(g, &cpu_gemms, p) : kiln_tune_mark_program(plan, p);
  kiln_tune_cpu_table_free(&cpu_gemms);
  double t2 = now_s();
  if (!s) s = log_results(plan, p, c, &fusion, (t1 - t0) * 1e3, (t2 - t1) * 1e3, log);
  if (!s) s = log_hetero(p, log);
  if (!s) s = log_sparse(plan, log);
  if (!s && c->dump_dir) s = dump(plan, p, c, log);
  kiln_plan_destroy(plan);
  if (s) {
    kiln_program_destroy(p);
    return s;
  }
  *out = p;
  return NULL;
}

uint32_t kiln_compile_gpu_lacks(const kiln_device_info_t* info) {
  /* the device class (KILN_GPU_CLASS_GPU): a GPU unless it runs on the
   * host's CPU or is unknown; the variable of the device's own target
   * (kiln_target_t.rules_env) forces either, so one target's override
   * never reaches another's devices; without a device, any target's */
  const char* rules = NULL;
  for (int32_t i = 0; i < kiln_target_count(); ++i) {
    const kiln_target_t* t = kiln_target_at(i);
    if (t->rules_env && (!info || !strcmp(t->name, info->api)) && (rules = getenv(t->rules_env))) break;
  }
  const bool gpu = rules && !strcmp(rules, "gpu") ? true : rules && !strcmp(rules, "cpu") ? false : info && !info->cpu_backed;
  const uint32_t cls = gpu ? (uint32_t)KILN_GPU_CLASS_GPU : 0u;
  if (!info)
    return KILN_GPU_LACKS_INT64 | KILN_GPU_LACKS_SUBGROUP | KILN_GPU_LACKS_FP64 | KILN_GPU_LACKS_IDOT |
           KILN_GPU_LACKS_SUBGROUP_ARITH | KILN_GPU_LACKS_TEXEL_F16 | cls;
  return (info->shader_int64 ? 0u : (uint32_t)KILN_GPU_LACKS_INT64) |
         (info->subgroup_ballot ? 0u : (uint32_t)KILN_GPU_LACKS_SUBGROUP) |
         (info->fp64 ? 0u : (uint32_t)KILN_GPU_LACKS_FP64) |
         (info->int_dot ? 0u : (uint32_t)KILN_GPU_LACKS_IDOT) |
         (info->subgroup_arith ? 0u : (uint32_t)KILN_GPU_LACKS_SUBGROUP_ARITH) |
         (info->texel_f16 ? 0u : (uint32_t)KILN_GPU_LACKS_TEXEL_F16) | cls;
}

void kiln_compile_device_limits(const kiln_device_info_t* info, kiln_template_limits_t* out) {
  memset(out, 0, sizeof *out);
  out->max_workgroup_size = info->max_workgroup_size;
  out->local_mem_bytes = info->local_mem_bytes;
  out->loop_limit = info->loop_limit;
  out->gpu_lacks = kiln_compile_gpu_lacks(info);
  out->warp = info->subgroup_size > 0 ? info->subgroup_size : 0;
  out->compute_units = info->compute_units > 0 ? info->compute_units : 0;
}
