/* Compile-and-run plumbing for the kiln command line (see runner.h). */
#include "tools/runner.h"

#include <string.h>
#include <time.h>

#include "lowering/fuse.h"
#include "lowering/plan.h"
#include "lowering/precision.h"
#include "compiler/calibrate.h"
#include "runtime/module_impl.h"
#include "runtime/session_impl.h"
#include "runtime/device_registry.h"
#include "targets/program_build.h"

static double now_s(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}


void kiln_cli_precision_default(kiln_cli_precision_t* p) {
  memset(p, 0, sizeof(*p));
  p->mode = KILN_PRECISION_FP32;
  p->calibrate_count = 4;
  p->tolerance = 1e-2;
}

/* The effective per-node precision of |plan| as policy rules (one per node
 * that has a kernel), for --write-policy in fp16 mode. */
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

/* --precision fp16|auto on a fused plan: warn (or fail) without fp16
 * arithmetic, calibrate for auto, rewrite, report, write the policy. */
static kiln_status_t apply_precision(kiln_plan_t* plan, const kiln_cli_precision_t* pr, bool f32_workspaces) {
  const char* dev = pr->device ? pr->device : "the device";
  if (!pr->fp16_arith) {
    if (pr->strict)
      return kiln_make_status(KILN_UNSUPPORTED,
                              "--precision %s: %s has no fp16 arithmetic (--strict; without it kiln uses "
                              "fp16 storage with fp32 arithmetic)",
                              kiln_precision_mode_name(pr->mode), dev);
    fprintf(stderr, "kiln: warning: --precision %s: %s has no fp16 arithmetic; using fp16 storage with fp32 "
            "arithmetic\n", kiln_precision_mode_name(pr->mode), dev);
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
    kiln_calibrate_options_t co;
    kiln_calibrate_options_default(&co);
    co.input_dir = pr->calibrate_dir;
    co.count = pr->calibrate_count;
    co.seed = pr->seed;
    co.rtol = pr->tolerance;
    co.base = &user;
    double t0 = now_s();
    s = kiln_calibrate_precision(plan, &co, &chosen, &cal);
    if (!s) {
      have_cal = true;
      int32_t n16 = 0;
      for (int32_t i = 0; i < cal.n_groups; ++i) n16 += cal.groups[i].fp16;
      printf("calibrated on %d %s inputs in %.1f s: %d of %d fused groups fp16, error %.3g of the tolerance "
             "(rtol %g, atol %g)\n",
             cal.samples, pr->calibrate_dir ? "given" : "seeded random", now_s() - t0, n16, cal.n_groups,
             cal.err_ratio, cal.rtol, cal.atol);
      for (int32_t i = 0; i < cal.n_groups; ++i)
        if (!cal.groups[i].fp16 && strcmp(cal.groups[i].reason, "policy") != 0)
          printf("  kept fp32: group %d '%s' (%s): %s, range [%.4g, %.4g]\n", i,
                 plan->graph->nodes[cal.groups[i].nodes[0]].name, plan->graph->nodes[cal.groups[i].nodes[0]].op_type,
                 cal.groups[i].reason, cal.groups[i].min, cal.groups[i].max);
    }
    use = &chosen;
  }
  if (!s && pr->write_policy) {
    if (pr->mode == KILN_PRECISION_AUTO) {
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
    if (!s) printf("wrote %s\n", pr->write_policy);
  }
  kiln_precision_options_t po = {KILN_PRECISION_FP16, pr->fp16_arith, pr->fp16_accumulate, use,
                                 f32_workspaces && !pr->fp16_workspaces, pr->weights_only};
  if (!s) s = kiln_plan_set_precision(plan, &po, &rep);
  if (!s) kiln_precision_report_print(plan, &rep, false, stdout);
  if (!s && pr->report_path) {
    FILE* f = fopen(pr->report_path, "w");
    if (!f) {
      s = kiln_make_status(KILN_IO_ERROR, "%s: cannot write the precision report", pr->report_path);
    } else {
      if (have_cal) {
        kiln_calibrate_report_print(plan, &cal, f);
        fputc('\n', f);
      }
      kiln_precision_report_print(plan, &rep, true, f);
      if (fclose(f) != 0) s = kiln_make_status(KILN_IO_ERROR, "%s: write error", pr->report_path);
      else printf("wrote %s\n", pr->report_path);
    }
  }
  kiln_precision_report_free(&rep);
  kiln_calibrate_report_free(&cal);
  kiln_precision_policy_free(&user);
  kiln_precision_policy_free(&chosen);
  return s;
}

kiln_status_t kiln_cli_compile(kiln_graph_t* g, const kiln_cli_compile_t* c, kiln_program_t** out) {
  kiln_plan_options_t po = {c->target->lowering, c->threads, c->loop_limit};
  kiln_plan_t* plan = NULL;
  kiln_fusion_report_t fusion;
  memset(&fusion, 0, sizeof fusion);
  double t0 = now_s();
  kiln_status_t s = kiln_plan_build(g, &po, kiln_allocator_system(), &plan);
  if (!s && c->opt >= 1) s = kiln_plan_fuse(plan, &fusion, NULL);
  const kiln_cli_precision_t* pr = c->precision;
  bool low = pr && pr->mode != KILN_PRECISION_FP32;
  if (!s && low) s = apply_precision(plan, pr, c->target->fp16_keeps_f32_workspaces);
  /* the fast paths (template kernels) the target has, chosen last: fusion
   * and precision change what matches */
  kiln_template_set_t templates;
  kiln_program_templates(c->target, &templates);
  if (!s) s = kiln_template_choose(plan, &templates);
  double t1 = now_s();
  char opts[128];
  snprintf(opts, sizeof opts, "-O%d%s%s", c->opt, low && pr->fp16_arith ? " fp16-arith" : "",
           low && pr->fp16_accumulate ? " fp16-accumulate" : "");
  kiln_program_build_options_t bo = {c->model_name, low ? kiln_precision_mode_name(pr->mode) : "fp32", opts, false};
  if (!s) s = kiln_program_build(plan, c->target, &bo, kiln_allocator_system(), out);
  double t2 = now_s();
  if (!s && c->opt >= 1)
    printf("fused %d kernels into %d (%d epilogues, %d producers inlined), %.1f MB less "
           "intermediate traffic\n",
           fusion.kernels_before, fusion.kernels_after, fusion.epilogues_fused, fusion.producers_inlined,
           (double)fusion.bytes_saved / 1e6);
  if (!s)
    printf("compiled %d kernels for %s: lowering %.1f ms, codegen %.1f ms, %.1f KB of code, %.1f MB of weights\n",
           plan->n_kernels, c->target->name, (t1 - t0) * 1e3, (t2 - t1) * 1e3,
           (double)(*out)->code.text_len / 1e3, (double)(*out)->weights_len / 1e6);
  if (!s && c->dump_dir) {
    char path[4096];
    snprintf(path, sizeof path, "%s/plan.txt", c->dump_dir);
    FILE* f = fopen(path, "w");
    if (f) {
      kiln_plan_dump(plan, f, true);
      fclose(f);
      printf("wrote %s\n", path);
    }
    /* The generated source, in the target's language. */
    const kiln_program_t* p = *out;
    snprintf(path, sizeof path, "%s/kernels.%s", c->dump_dir, c->target->source_ext);
    if (p->code.text && (f = fopen(path, "w"))) {
      fwrite(p->code.text, 1, p->code.text_len, f);
      fclose(f);
      printf("wrote %s\n", path);
    }
  }
  kiln_plan_destroy(plan);
  return s;
}

static void human(double v, char* buf, size_t n) {
  if (v >= 1e9) snprintf(buf, n, "%.2f GB", v / 1e9);
  else if (v >= 1e6) snprintf(buf, n, "%.2f MB", v / 1e6);
  else if (v >= 1e3) snprintf(buf, n, "%.1f KB", v / 1e3);
  else snprintf(buf, n, "%.0f B", v);
}

kiln_status_t kiln_cli_open_device(const char* name, bool strict, int threads, kiln_device_t** out) {
  kiln_device_open_options_t oo = {threads, strict, stderr};
  return kiln_device_open(name, &oo, kiln_allocator_system(), out);
}

kiln_status_t kiln_cli_session(kiln_module_t* m, kiln_device_t* dev, const kiln_session_options_t* so,
                               kiln_session_t** out_session) {
  double t0 = now_s();
  kiln_session_t* s = NULL;
  KILN_RETURN_IF_ERROR(kiln_session_create(m, dev, so, &s));
  kiln_session_memory_t mem;
  kiln_session_memory(s, &mem);
  char a[32], lb[32], nv[32], w[32];
  human((double)mem.arena_bytes, a, sizeof a);
  human((double)mem.lower_bound_bytes, lb, sizeof lb);
  human((double)mem.naive_bytes, nv, sizeof nv);
  human((double)mem.weights_bytes, w, sizeof w);
  printf("session on %s (%s): built in %.1f ms; arena %s x %d slots (lower bound %s, naive %s), weights %s, "
         "%d dispatches, %d barriers\n",
         kiln_device_name(dev), kiln_device_api(dev), (now_s() - t0) * 1e3, a, (int)mem.slots, lb, nv, w,
         (int)mem.dispatches, (int)mem.barriers);
  const kiln_device_api_t* api = kiln_device_api_find(kiln_device_api(dev));
  if (api && api->executable_report) api->executable_report(s->exe, stdout);
  *out_session = s;
  return NULL;
}

int kiln_cmd_devices(int argc, char** argv) {
  char names[256];
  if (argc > 0 && (!strcmp(argv[0], "--help") || !strcmp(argv[0], "-h"))) {
    printf("usage: kiln devices\n\nLists the devices kiln can run on, per device API, with their features\n"
           "(use them as --target %s).\n", kiln_device_api_names("[:N]", names, sizeof names));
    return 0;
  }
  if (argc > 0) {
    fprintf(stderr, "kiln devices: unexpected argument '%s'\n", argv[0]);
    return 2;
  }
  /* Every API this kiln has, in registry order; one without a driver or
   * device says why and the rest are still listed. */
  int rc = 0;
  for (int32_t i = 0; i < kiln_device_api_count(); ++i) {
    const kiln_device_api_t* api = kiln_device_api_at(i);
    printf("%s:\n", api->name);
    fflush(stdout);
    kiln_status_t s = api->list(stdout);
    if (s) {
      printf("  none: %s\n", kiln_status_message(s));
      if (i == 0) rc = 1; /* no CPU device: something is badly wrong */
      kiln_status_free(s);
    }
  }
  return rc;
}
