/* `kiln eval`: one table of the speed / size / accuracy trade-off of a
 * model's variants (precisions and pruning ratios), each compiled for the
 * target and measured there. */
#include "tools/eval_cmd.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "api/driver.h"
#include "api/prune_graph.h"
#include "api/model_dims.h"
#include "compiler/calibrate.h"
#include "compiler/prune.h"
#include "compiler/ref_exec.h"
#include "frontend/onnx.h"
#include "kiln/npy.h"
#include "kiln/runtime.h"
#include "targets/registry.h"
#include "tools/runner.h"

static const char* help =
    "usage: kiln eval MODEL.onnx --variants fp32,fp16,int8,auto,prune:0.3 [-t TARGET]\n"
    "                 [--data X.npy [--labels Y.npy]] [--calibrate DIR] [options]\n"
    "\n"
    "Compiles each variant of the model for the target and measures it there: median\n"
    "latency of a batch-1 run, weights and arena bytes of the session, and accuracy --\n"
    "top-1 against the labels, or without labels agreement with the fp32 reference\n"
    "(top-1 and the largest absolute error of output 0). Symbolic dims are bound to 1.\n"
    "\n"
    "variants:\n"
    "  fp32, fp16           --precision fp32 / fp16\n"
    "  int8                 --precision int8 (needs --calibrate)\n"
    "  auto                 --precision auto --tolerance T (int8 layers too with --calibrate)\n"
    "  prune:R              kiln prune --ratio R --no-round (l1), compiled in fp32\n"
    "\n"
    "options:\n"
    "  -t, --target T       cpu (default), opencl, vulkan\n"
    "  --data X.npy         samples along dim 0 (each run as a batch of 1); default 16\n"
    "                       seeded random samples\n"
    "  --labels Y.npy       integer labels, one per sample (top-1 accuracy)\n"
    "  --calibrate DIR      calibration inputs for int8 and auto\n"
    "  --tolerance T        auto's tolerance (default 1e-2)\n"
    "  --threads N          CPU threads (default 0: all cores)\n"
    "  --reps N             timed runs per variant (default 50)\n"
    "  --csv FILE, --json FILE  the table as CSV / JSON (bench/plot_eval.py draws the\n"
    "                       CSV as a PNG of latency against accuracy)\n";

#define MAX_VARIANTS 16

typedef struct variant_s {
  char name[32];
  kiln_precision_mode_t mode;
  double prune; /* < 0: none */
  double ms, acc, max_err;
  uint64_t weights, arena;
} variant_t;

typedef struct eval_s {
  const char *model, *data, *labels, *calib, *csv, *json, *target;
  double tolerance;
  int threads, reps;
  variant_t v[MAX_VARIANTS];
  int nv;
  /* samples: n arrays of the model's one input; truth: output 0 of the
   * reference executor per sample */
  kiln_array_t* x;
  kiln_array_t* truth;
  int64_t* label;
  int32_t n;
} eval_t;

static int usage(const char* fmt, const char* arg) {
  fprintf(stderr, "kiln eval: ");
  fprintf(stderr, fmt, arg);
  fprintf(stderr, "\nTry 'kiln eval --help'.\n");
  return 2;
}

static double now_s(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

static int parse_variants(eval_t* e, char* list) {
  for (char* t = strtok(list, ","); t; t = strtok(NULL, ",")) {
    if (e->nv == MAX_VARIANTS) return usage("--variants: %s", "at most 16");
    variant_t* v = &e->v[e->nv++];
    memset(v, 0, sizeof *v);
    v->prune = -1;
    snprintf(v->name, sizeof v->name, "%s", t);
    if (!strncmp(t, "prune:", 6)) {
      char* end = NULL;
      v->prune = strtod(t + 6, &end);
      if (!t[6] || *end || !(v->prune >= 0 && v->prune < 1))
        return usage("--variants: '%s': expected prune:R with R in [0, 1)", t);
    } else if (!kiln_precision_parse_mode(t, &v->mode)) {
      return usage("--variants: '%s': expected fp32, fp16, int8, auto or prune:R", t);
    }
    if (v->mode == KILN_PRECISION_INT8 && !e->calib) return usage("--variants %s needs --calibrate DIR", t);
  }
  return e->nv ? 0 : usage("%s--variants is empty", "");
}

static kiln_status_t parse_model(const eval_t* e, kiln_graph_t** out) {
  KILN_RETURN_IF_ERROR(kiln_onnx_parse_model(e->model, NULL, kiln_allocator_system(), out));
  char bound[256];
  kiln_model_bind_rest_to_one(*out, bound, sizeof bound);
  return NULL;
}

/* The samples (from --data or seeded random), their labels and the fp32
 * reference's output 0 for each. */
static kiln_status_t load_samples(eval_t* e, const kiln_graph_t* g) {
  if (g->n_inputs != 1 || g->n_outputs < 1)
    return kiln_make_status(KILN_UNSUPPORTED, "%s: kiln eval needs a model with one input (it has %d)", e->model,
                            g->n_inputs);
  const kiln_tensor_t* in = &g->tensors[g->inputs[0]];
  if (e->data) {
    kiln_array_t all;
    kiln_npy_read_options_t ro = {0, false, true};
    KILN_RETURN_IF_ERROR(kiln_npy_read_with(e->data, &ro, kiln_allocator_system(), &all, NULL));
    kiln_shape_t one = all.shape;
    if (one.rank > 0) one.dims[0] = 1;
    if (all.shape.rank == 0 || all.dtype != in->dtype || !kiln_shape_equal(&one, &in->shape)) {
      char a[128], b[128];
      kiln_shape_format(&all.shape, a, sizeof a);
      kiln_graph_format_shape(g, &in->shape, b, sizeof b);
      kiln_array_free(kiln_allocator_system(), &all);
      return kiln_make_status(KILN_INVALID_ARGUMENT,
                              "%s: %s%s holds no samples of input '%s' (%s%s, batch 1)", e->data,
                              kiln_dtype_name(all.dtype), a, in->name, kiln_dtype_name(in->dtype), b);
    }
    e->n = (int32_t)all.shape.dims[0];
    e->x = calloc((size_t)e->n + 1, sizeof(kiln_array_t));
    kiln_status_t s = e->x ? NULL : kiln_make_status(KILN_OUT_OF_MEMORY, "out of memory");
    size_t per = e->n ? all.nbytes / (size_t)e->n : 0;
    for (int32_t k = 0; !s && k < e->n; ++k) {
      s = kiln_array_alloc(kiln_allocator_system(), all.dtype, &one, &e->x[k]);
      if (!s) memcpy(e->x[k].data, (const uint8_t*)all.data + (size_t)k * per, per);
    }
    kiln_array_free(kiln_allocator_system(), &all);
    KILN_RETURN_IF_ERROR(s);
  } else {
    kiln_calibrate_options_t co;
    kiln_calibrate_options_default(&co);
    co.count = 16;
    KILN_RETURN_IF_ERROR(kiln_calibrate_inputs(g, &co, &e->x, &e->n));
  }
  if (e->labels) {
    kiln_array_t y;
    KILN_RETURN_IF_ERROR(kiln_npy_read(e->labels, kiln_allocator_system(), &y));
    kiln_status_t s = NULL;
    if (!kiln_dtype_is_int(y.dtype) || kiln_shape_count(&y.shape) != e->n)
      s = kiln_make_status(KILN_INVALID_ARGUMENT, "%s: expected %d integer labels (one per sample of %s)",
                           e->labels, e->n, e->data ? e->data : "the random samples");
    if (!s && !(e->label = malloc(sizeof(int64_t) * (size_t)(e->n + 1))))
      s = kiln_make_status(KILN_OUT_OF_MEMORY, "out of memory");
    for (int32_t k = 0; !s && k < e->n; ++k) e->label[k] = kiln_load_i64(y.dtype, y.data, (size_t)k);
    kiln_array_free(kiln_allocator_system(), &y);
    KILN_RETURN_IF_ERROR(s);
  }
  e->truth = calloc((size_t)e->n * (size_t)g->n_outputs + 1, sizeof(kiln_array_t));
  if (!e->truth) return kiln_make_status(KILN_OUT_OF_MEMORY, "out of memory");
  kiln_ref_options_t ro;
  kiln_ref_options_default(&ro);
  for (int32_t k = 0; k < e->n; ++k)
    KILN_RETURN_IF_ERROR(kiln_ref_run(g, &e->x[k], &ro, &e->truth[(size_t)k * g->n_outputs]), "sample %d", k);
  return NULL;
}

static int64_t argmax(const kiln_array_t* a) {
  int64_t n = kiln_shape_count(&a->shape), best = 0;
  for (int64_t i = 1; i < n; ++i)
    if (kiln_load_f64(a->dtype, a->data, (size_t)i) > kiln_load_f64(a->dtype, a->data, (size_t)best)) best = i;
  return best;
}

/* The graph of variant |v|: the model parsed (dims bound to 1), pruned for
 * prune:R. */
static kiln_status_t variant_graph(const eval_t* e, const variant_t* v, kiln_graph_t** out) {
  kiln_graph_t* g = NULL;
  KILN_RETURN_IF_ERROR(parse_model(e, &g));
  if (v->prune < 0) {
    *out = g;
    return NULL;
  }
  kiln_pruner_t p;
  memset(&p, 0, sizeof p);
  kiln_prune_plan_t plan;
  memset(&plan, 0, sizeof plan);
  int64_t* counts = NULL;
  kiln_status_t s = kiln_graph_prepare(g);
  if (!s) s = kiln_pruner_init(&p, g, KILN_PRUNE_L1, NULL, 0);
  if (!s && !(counts = malloc(sizeof(int64_t) * (size_t)(p.deps.n_groups + 1))))
    s = kiln_make_status(KILN_OUT_OF_MEMORY, "out of memory");
  if (!s) {
    kiln_pruner_counts_for_ratio(&p, v->prune, counts);
    s = kiln_pruner_plan(&p, counts, &plan);
  }
  if (!s) s = kiln_prune_apply(g, &plan, false, out);
  kiln_prune_plan_free(&plan);
  free(counts);
  kiln_pruner_free(&p);
  kiln_graph_destroy(g);
  return s;
}

static kiln_status_t measure(eval_t* e, const kiln_target_t* target, variant_t* v, int32_t n_outputs) {
  kiln_graph_t* g = NULL;
  KILN_RETURN_IF_ERROR(variant_graph(e, v, &g));
  kiln_driver_request_t rq;
  memset(&rq, 0, sizeof rq);
  rq.model_path = e->model;
  rq.target = target;
  rq.opt = 1;
  rq.threads = e->threads;
  rq.fp16_arith = -1;
  kiln_compile_precision_default(&rq.precision);
  rq.precision.mode = v->mode;
  rq.precision.calibrate_dir = e->calib;
  if (e->tolerance > 0) rq.precision.tolerance = e->tolerance;
  rq.loop_limit = target->lowering == KILN_TARGET_CLASS_GPU ? -1 : 0;
  kiln_graph_session_t gs;
  kiln_status_t s = kiln_graph_session_open(&rq, g, false, &gs);
  kiln_session_t* se = gs.session;
  kiln_array_t* outs = calloc((size_t)n_outputs + 1, sizeof(kiln_array_t));
  double* t = malloc(sizeof(double) * (size_t)(e->reps + 1));
  if (!s && (!outs || !t)) s = kiln_make_status(KILN_OUT_OF_MEMORY, "out of memory");
  int32_t hit = 0;
  v->max_err = 0;
  for (int32_t k = 0; !s && k < e->n; ++k) {
    s = kiln_session_run(se, &e->x[k], outs);
    if (s) break;
    const kiln_array_t* want = &e->truth[(size_t)k * n_outputs];
    int64_t a = argmax(&outs[0]);
    hit += e->label ? a == e->label[k] : a == argmax(want);
    int64_t cnt = kiln_shape_count(&want->shape);
    for (int64_t i = 0; i < cnt && kiln_shape_count(&outs[0].shape) == cnt; ++i)
      v->max_err = fmax(v->max_err, fabs(kiln_load_f64(outs[0].dtype, outs[0].data, (size_t)i) -
                                         kiln_load_f64(want->dtype, want->data, (size_t)i)));
    for (int32_t o = 0; o < n_outputs; ++o) kiln_array_free(kiln_allocator_system(), &outs[o]);
  }
  for (int32_t r = -2; !s && r < e->reps; ++r) {
    double t0 = now_s();
    s = kiln_session_run(se, &e->x[0], outs);
    if (!s && r >= 0) t[r] = now_s() - t0;
    for (int32_t o = 0; o < n_outputs; ++o) kiln_array_free(kiln_allocator_system(), &outs[o]);
  }
  if (!s) {
    for (int i = 1; i < e->reps; ++i) /* insertion sort: reps is small */
      for (int j = i; j > 0 && t[j] < t[j - 1]; --j) {
        double x = t[j];
        t[j] = t[j - 1], t[j - 1] = x;
      }
    v->ms = 1e3 * t[e->reps / 2];
    v->acc = e->n ? 100.0 * hit / e->n : 0;
    kiln_session_memory_t mem;
    kiln_session_memory(se, &mem);
    v->weights = mem.weights_bytes, v->arena = mem.arena_bytes;
  }
  free(outs), free(t);
  kiln_graph_session_close(&gs);
  return s ? kiln_status_annotate(s, "variant %s", v->name) : NULL;
}

static kiln_status_t write_tables(const eval_t* e) {
  const char* acc = e->label ? "top1" : "top1_agreement";
  if (e->csv) {
    FILE* f = fopen(e->csv, "w");
    if (!f) return kiln_make_status(KILN_IO_ERROR, "%s: cannot create", e->csv);
    fprintf(f, "variant,latency_ms,weights_bytes,arena_bytes,%s,max_abs_err\n", acc);
    for (int i = 0; i < e->nv; ++i)
      fprintf(f, "%s,%.6f,%llu,%llu,%.4f,%.6g\n", e->v[i].name, e->v[i].ms, (unsigned long long)e->v[i].weights,
              (unsigned long long)e->v[i].arena, e->v[i].acc, e->v[i].max_err);
    if (fclose(f) != 0) return kiln_make_status(KILN_IO_ERROR, "%s: write failed", e->csv);
  }
  if (e->json) {
    FILE* f = fopen(e->json, "w");
    if (!f) return kiln_make_status(KILN_IO_ERROR, "%s: cannot create", e->json);
    fprintf(f, "{\"model\": \"%s\", \"target\": \"%s\", \"samples\": %d, \"labels\": %s, \"variants\": [", e->model,
            e->target, e->n, e->label ? "true" : "false");
    for (int i = 0; i < e->nv; ++i)
      fprintf(f, "%s\n {\"variant\": \"%s\", \"latency_ms\": %.6f, \"weights_bytes\": %llu, \"arena_bytes\": %llu, "
              "\"%s\": %.4f, \"max_abs_err\": %.6g}", i ? "," : "", e->v[i].name, e->v[i].ms,
              (unsigned long long)e->v[i].weights, (unsigned long long)e->v[i].arena, acc, e->v[i].acc, e->v[i].max_err);
    fprintf(f, "\n]}\n");
    if (fclose(f) != 0) return kiln_make_status(KILN_IO_ERROR, "%s: write failed", e->json);
  }
  return NULL;
}

int kiln_cmd_eval(int argc, char** argv) {
  eval_t e;
  memset(&e, 0, sizeof e);
  e.target = "cpu";
  e.reps = 50;
  char list[1024] = "";
  for (int i = 0; i < argc; ++i) {
    const char* a = argv[i];
    const char* v = i + 1 < argc ? argv[i + 1] : NULL;
    if (!strcmp(a, "--help") || !strcmp(a, "-h")) {
      fputs(help, stdout);
      return 0;
    } else if (!strcmp(a, "--variants") && v) {
      snprintf(list, sizeof list, "%s", v), ++i;
    } else if ((!strcmp(a, "-t") || !strcmp(a, "--target")) && v) {
      e.target = v, ++i;
    } else if (!strcmp(a, "--data") && v) {
      e.data = v, ++i;
    } else if (!strcmp(a, "--labels") && v) {
      e.labels = v, ++i;
    } else if (!strcmp(a, "--calibrate") && v) {
      e.calib = v, ++i;
    } else if (!strcmp(a, "--tolerance") && v) {
      e.tolerance = atof(v), ++i;
      if (!(e.tolerance > 0)) return usage("--tolerance '%s': expected a positive number", v);
    } else if (!strcmp(a, "--threads") && v) {
      e.threads = atoi(v), ++i;
    } else if (!strcmp(a, "--reps") && v) {
      e.reps = atoi(v), ++i;
      if (e.reps < 1) return usage("--reps '%s': expected a positive count", v);
    } else if (!strcmp(a, "--csv") && v) {
      e.csv = v, ++i;
    } else if (!strcmp(a, "--json") && v) {
      e.json = v, ++i;
    } else if (a[0] == '-') {
      return usage("unknown option or missing value: '%s'", a);
    } else if (e.model) {
      return usage("unexpected argument '%s'", a);
    } else {
      e.model = a;
    }
  }
  if (!e.model) return usage("%sno model given", "");
  if (!list[0]) return usage("%s--variants is required (e.g. fp32,fp16,prune:0.3)", "");
  if (e.labels && !e.data) return usage("%s--labels needs --data", "");
  int rc = parse_variants(&e, list);
  if (rc) return rc;
  const kiln_target_t* target = kiln_target_find(e.target);
  if (!target) return usage("--target '%s': not a target this build has", e.target);
  kiln_graph_t* g = NULL;
  kiln_status_t s = parse_model(&e, &g);
  if (!s) s = kiln_graph_prepare(g);
  if (!s) s = load_samples(&e, g);
  if (!s) printf("%s on %s, %d samples%s\n", e.model, e.target, e.n, e.label ? " (labelled)" : " (agreement with fp32)");
  if (!s)
    printf("%-12s %10s %12s %12s %10s %12s\n", "variant", "ms", "weights", "arena",
           e.label ? "top-1 %" : "agree %", "max err");
  for (int i = 0; !s && i < e.nv; ++i) {
    s = measure(&e, target, &e.v[i], g->n_outputs);
    if (!s)
      printf("%-12s %10.4f %12llu %12llu %10.2f %12.4g\n", e.v[i].name, e.v[i].ms,
             (unsigned long long)e.v[i].weights, (unsigned long long)e.v[i].arena, e.v[i].acc, e.v[i].max_err);
    fflush(stdout);
  }
  if (!s) s = write_tables(&e);
  for (int32_t k = 0; e.x && k < e.n; ++k) kiln_array_free(kiln_allocator_system(), &e.x[k]);
  for (int64_t k = 0; e.truth && g && k < (int64_t)e.n * g->n_outputs; ++k)
    kiln_array_free(kiln_allocator_system(), &e.truth[k]);
  free(e.x), free(e.truth), free(e.label);
  kiln_graph_destroy(g);
  return s ? kiln_cli_fail(s) : 0;
}
