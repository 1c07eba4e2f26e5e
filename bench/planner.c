/* Memory planner benchmark: arena size against the lower bound and the
 * naive size on real models.
 *
 *   kiln_bench_planner [--max-ratio R] MODEL.onnx ...
 *
 * Each model goes through the same steps as `kiln run --target cpu`
 * (parse, symbolic dims bound to 1, prepare, graph passes -O1, lowering for
 * the CPU target class, fusion), is built into a CPU program and planned
 * with 64-byte alignment; the plan is checked with kiln_memory_plan_verify.
 * Prints one line per model:
 *   planner resnet50: arena 12.3 MB, lower bound 12.1 MB (arena/bound 1.017),
 *   naive 98.7 MB (arena/naive 0.125), 143 buffers, 12 in place
 * (MB = 10^6 bytes). Exits 1 when a model fails, a plan does not verify, or
 * (with --max-ratio) arena/bound exceeds R. No timing: the figures are
 * deterministic, so the ctest entry can assert them. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "frontend/onnx.h"
#include "ir/passes.h"
#include "lowering/fuse.h"
#include "runtime/planner.h"
#include "targets/program_build.h"

#define ALIGNMENT 64

/* "dir/resnet50.onnx" -> "resnet50" */
static void model_label(const char* path, char* out, size_t n) {
  const char* base = strrchr(path, '/');
  base = base ? base + 1 : path;
  snprintf(out, n, "%s", base);
  size_t len = strlen(out);
  if (len > 5 && !strcmp(out + len - 5, ".onnx")) out[len - 5] = 0;
}

/* ONNX file -> fused CPU plan -> program; the graph and plan are freed
 * once the program (which owns copies of everything) exists. */
static kiln_status_t build_program(const char* path, kiln_program_t** out) {
  kiln_allocator_t a = kiln_allocator_system();
  kiln_graph_t* g = NULL;
  KILN_RETURN_IF_ERROR(kiln_onnx_parse_model(path, NULL, a, &g));
  for (int32_t k = 0; k < g->n_inputs; ++k) {
    kiln_tensor_t* t = &g->tensors[g->inputs[k]];
    for (int32_t d = 0; d < t->shape.rank; ++d)
      if (kiln_dim_symbol(t->shape.dims[d])) t->shape.dims[d] = 1;
  }
  kiln_plan_t* plan = NULL;
  kiln_plan_options_t po = {KILN_TARGET_CLASS_CPU, 0, 0, 0, 0, 0};
  kiln_fusion_report_t rep;
  memset(&rep, 0, sizeof rep);
  kiln_status_t s = kiln_graph_prepare(g);
  if (!s) s = kiln_graph_optimize(g, 1, NULL);
  if (!s) s = kiln_plan_build(g, &po, a, &plan);
  if (!s) s = kiln_plan_fuse(plan, &rep, NULL);
  if (!s) s = kiln_program_build(plan, kiln_target_find("cpu"), NULL, a, out);
  kiln_plan_destroy(plan);
  kiln_graph_destroy(g);
  return s;
}

static kiln_status_t bench_model(const char* path, double max_ratio, bool* over) {
  kiln_program_t* p = NULL;
  KILN_RETURN_IF_ERROR(build_program(path, &p), "%s", path);
  kiln_memory_plan_t mp;
  memset(&mp, 0, sizeof mp);
  kiln_status_t s = kiln_memory_plan(p, ALIGNMENT, kiln_allocator_system(), &mp);
  if (!s) s = kiln_memory_plan_verify(p, &mp, ALIGNMENT);
  if (!s) {
    char label[256];
    model_label(path, label, sizeof label);
    double bound = mp.lower_bound_bytes ? (double)mp.lower_bound_bytes : 1.0;
    double naive = mp.naive_bytes ? (double)mp.naive_bytes : 1.0;
    double ratio = (double)mp.arena_bytes / bound;
    printf("planner %s: arena %.1f MB, lower bound %.1f MB (arena/bound %.3f), naive %.1f MB "
           "(arena/naive %.3f), %d buffers, %d in place\n",
           label, (double)mp.arena_bytes / 1e6, (double)mp.lower_bound_bytes / 1e6, ratio,
           (double)mp.naive_bytes / 1e6, (double)mp.arena_bytes / naive, mp.n_planned,
           mp.n_inplace);
    if (max_ratio > 0 && ratio > max_ratio) {
      fprintf(stderr, "kiln_bench_planner: %s: arena/bound %.3f is above --max-ratio %.3f\n",
              label, ratio, max_ratio);
      *over = true;
    }
  }
  kiln_memory_plan_free(kiln_allocator_system(), &mp);
  kiln_program_destroy(p);
  return kiln_status_annotate(s, "%s", path);
}

int main(int argc, char** argv) {
  double max_ratio = 0;
  int n_models = 0, failed = 0;
  bool over = false;
  for (int i = 1; i < argc; ++i) {
    if (!strcmp(argv[i], "--max-ratio") && i + 1 < argc) {
      char* end = NULL;
      max_ratio = strtod(argv[++i], &end);
      if (!end || *end || max_ratio < 1) {
        fprintf(stderr, "kiln_bench_planner: --max-ratio wants a number >= 1, got '%s'\n", argv[i]);
        return 2;
      }
      continue;
    }
    if (argv[i][0] == '-') {
      fprintf(stderr, "usage: kiln_bench_planner [--max-ratio R] MODEL.onnx ...\n");
      return 2;
    }
    ++n_models;
    kiln_status_t s = bench_model(argv[i], max_ratio, &over);
    if (s) {
      fprintf(stderr, "kiln_bench_planner: %s\n", kiln_status_message(s));
      kiln_status_free(s);
      ++failed;
    }
  }
  if (!n_models) {
    fprintf(stderr, "usage: kiln_bench_planner [--max-ratio R] MODEL.onnx ...\n");
    return 2;
  }
  return failed || over ? 1 : 0;
}
