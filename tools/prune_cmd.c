/* `kiln prune`: structured channel pruning of an ONNX model into a smaller
 * ONNX model (compiler/prune.h chooses, api/prune_graph.h measures on the
 * device, frontend/onnx_prune.h writes). */
#include "tools/prune_cmd.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "api/model_dims.h"
#include "api/prune_graph.h"
#include "api/quantize_graph.h"
#include "compiler/calibrate.h"
#include "compiler/prune_sparse.h"
#include "frontend/onnx.h"
#include "frontend/onnx_prune.h"
#include "tools/runner.h"

static const char* help =
    "usage: kiln prune MODEL.onnx -o PRUNED.onnx [--ratio R | --flops F | --latency-ms L |\n"
    "                  --calibrate DIR --tolerance T] [options]\n"
    "       kiln prune MODEL.onnx --analyze [--calibrate DIR] [--csv FILE]\n"
    "       kiln prune MODEL.onnx --sparsity S -o SPARSE.onnx [--keep A,B]\n"
    "\n"
    "Structured pruning: removes whole output channels of Conv, Gemm and MatMul layers,\n"
    "the least important first, with everything that reads them (the next layer's input\n"
    "channels, BatchNormalization, depthwise convolutions, channels tied through residual\n"
    "Add/Mul, Concat offsets, Flatten into a Gemm), and writes a plain ONNX model. Channel\n"
    "groups it cannot follow (a Reshape that mixes channels, a graph output, an op it does\n"
    "not know) are left unpruned and named in the report. Channel counts are then rounded\n"
    "to what the target's kernels run fastest, measured on the device, so that no cut\n"
    "makes a layer slower.\n"
    "\n"
    "options:\n"
    "  -o FILE              the pruned model to write\n"
    "  --method M           channel importance: l1 (mean |w| of each filter, default), l2,\n"
    "                       bn (|scale| of the BatchNormalization after it; l1 without one)\n"
    "  --ratio R            remove the fraction R in [0, 1) of every prunable group\n"
    "  --flops F            at most F FLOPs: F <= 1 is a fraction of the model's, else a\n"
    "                       count (suffix K, M or G)\n"
    "  --latency-ms L       at most L ms per run on the target, measured\n"
    "  --calibrate DIR      calibration inputs (NAME.npy per input, or one subfolder per\n"
    "                       sample) for --tolerance, --analyze and the error report\n"
    "  --tolerance T        per-group ratios by measured sensitivity, keeping the largest\n"
    "                       output error within T of the largest output magnitude\n"
    "  --keep A,B           leave the channel groups of these layers (node names) unpruned\n"
    "  -t, --target T       where latency is measured: cpu (default), opencl, vulkan\n"
    "  --device D           the device to open (default: the target's first)\n"
    "  --threads N          CPU threads (default 0: all cores)\n"
    "  --reps N             timed runs per measurement (default 20)\n"
    "  --no-round           skip the latency-aware rounding (no compile, no device)\n"
    "  --dim SYM=N          bind a symbolic input dim (others: the calibration sample's, or 1)\n"
    "  --sparsity S         block sparsity instead of channel pruning: in every Conv (not\n"
    "                       depthwise), Gemm and MatMul with constant weights, zero the\n"
    "                       fraction S in [0, 1) of the weight blocks with the smallest mean\n"
    "                       |w| -- blocks of 4 output channels x 1 input channel with all\n"
    "                       its taps (4x4 for 1x1 convs and GEMMs), the blocks kiln's CPU\n"
    "                       block-sparse kernel skips -- keeping the shapes; kiln compile\n"
    "                       then stores and runs those convs block-sparse where that is\n"
    "                       faster (report section 'sparse'); --keep leaves those layers dense\n"
    "  --analyze            per prunable group: parameters, FLOPs, measured latency and\n"
    "                       output error at ratios 0.25, 0.5, 0.75 (seeded random inputs\n"
    "                       without --calibrate); bench/plot_prune.py plots the CSV\n"
    "  --csv FILE           with --analyze: the table as CSV\n";

static int usage(const char* fmt, const char* arg) {
  fprintf(stderr, "kiln prune: ");
  fprintf(stderr, fmt, arg);
  fprintf(stderr, "\nTry 'kiln prune --help'.\n");
  return 2;
}

static bool parse_num(const char* v, double* out) {
  char* end = NULL;
  double x = strtod(v, &end);
  if (!v[0] || end == v) return false;
  if (*end == 'K' || *end == 'k') x *= 1e3, ++end;
  else if (*end == 'M') x *= 1e6, ++end;
  else if (*end == 'G') x *= 1e9, ++end;
  *out = x;
  return !*end && x == x;
}

typedef struct opts_s {
  const char *model, *out, *dir, *csv, *target, *device;
  kiln_prune_method_t method;
  double ratio, flops, latency_ms, tolerance, sparsity;
  const char* keep[64];
  int32_t n_keep;
  const char* dims[16];
  int32_t n_dims;
  int threads, reps;
  bool analyze, no_round;
} opts_t;

static int parse(int argc, char** argv, opts_t* o, char* keepbuf) {
  for (int i = 0; i < argc; ++i) {
    const char* a = argv[i];
    const char* v = i + 1 < argc ? argv[i + 1] : NULL;
    if (!strcmp(a, "--help") || !strcmp(a, "-h")) {
      fputs(help, stdout);
      return -1;
    } else if (!strcmp(a, "-o") && v) {
      o->out = v, ++i;
    } else if (!strcmp(a, "--method") && v) {
      ++i;
      if (!strcmp(v, "l1")) o->method = KILN_PRUNE_L1;
      else if (!strcmp(v, "l2")) o->method = KILN_PRUNE_L2;
      else if (!strcmp(v, "bn")) o->method = KILN_PRUNE_BN;
      else return usage("--method '%s': expected l1, l2 or bn", v);
    } else if (!strcmp(a, "--ratio") && v) {
      ++i;
      if (!parse_num(v, &o->ratio) || !(o->ratio >= 0 && o->ratio < 1))
        return usage("--ratio '%s': expected a number in [0, 1)", v);
    } else if (!strcmp(a, "--flops") && v) {
      ++i;
      if (!parse_num(v, &o->flops) || !(o->flops > 0)) return usage("--flops '%s': expected a positive number", v);
    } else if (!strcmp(a, "--latency-ms") && v) {
      ++i;
      if (!parse_num(v, &o->latency_ms) || !(o->latency_ms > 0))
        return usage("--latency-ms '%s': expected a positive number", v);
    } else if (!strcmp(a, "--tolerance") && v) {
      ++i;
      if (!parse_num(v, &o->tolerance) || !(o->tolerance > 0))
        return usage("--tolerance '%s': expected a positive number", v);
    } else if (!strcmp(a, "--sparsity") && v) {
      ++i;
      if (!parse_num(v, &o->sparsity) || !(o->sparsity >= 0 && o->sparsity < 1))
        return usage("--sparsity '%s': expected a number in [0, 1)", v);
    } else if (!strcmp(a, "--calibrate") && v) {
      o->dir = v, ++i;
    } else if (!strcmp(a, "--keep") && v) {
      ++i;
      if (strlen(v) >= 4096) return usage("--keep: %s", "the list is too long");
      strcpy(keepbuf, v);
      for (char* t = strtok(keepbuf, ","); t; t = strtok(NULL, ","))
        if (o->n_keep < 64) o->keep[o->n_keep++] = t;
        else return usage("--keep: %s", "at most 64 layers");
    } else if ((!strcmp(a, "-t") || !strcmp(a, "--target")) && v) {
      o->target = v, ++i;
    } else if (!strcmp(a, "--device") && v) {
      o->device = v, ++i;
    } else if (!strcmp(a, "--threads") && v) {
      o->threads = atoi(v), ++i;
    } else if (!strcmp(a, "--reps") && v) {
      o->reps = atoi(v), ++i;
      if (o->reps < 1) return usage("--reps '%s': expected a positive count", v);
    } else if (!strcmp(a, "--dim") && v) {
      if (o->n_dims == 16) return usage("--dim: %s", "at most 16");
      o->dims[o->n_dims++] = v, ++i;
    } else if (!strcmp(a, "--csv") && v) {
      o->csv = v, ++i;
    } else if (!strcmp(a, "--analyze")) {
      o->analyze = true;
    } else if (!strcmp(a, "--no-round")) {
      o->no_round = true;
    } else if (a[0] == '-') {
      return usage("unknown option or missing value: '%s'", a);
    } else if (o->model) {
      return usage("unexpected argument '%s'", a);
    } else {
      o->model = a;
    }
  }
  if (!o->model) return usage("%sno model given", "");
  int budgets = (o->ratio >= 0) + (o->flops > 0) + (o->latency_ms > 0) + (o->tolerance > 0);
  if (o->sparsity >= 0) {
    if (budgets || o->analyze)
      return usage("%s--sparsity zeroes weight blocks; it does not combine with channel pruning (--ratio, --flops, "
                   "--latency-ms, --tolerance, --analyze)", "");
    if (!o->out) return usage("%s-o FILE is required (the sparse model to write)", "");
    return 0;
  }
  if (budgets > 1) return usage("%sgive one of --ratio, --flops, --latency-ms and --tolerance", "");
  if (!o->analyze && !budgets)
    return usage("%sgive --ratio, --flops, --latency-ms or --tolerance (or --sparsity, or --analyze)", "");
  if (!o->analyze && !o->out) return usage("%s-o FILE is required (the pruned model to write)", "");
  if (o->tolerance > 0 && !o->dir) return usage("%s--tolerance needs --calibrate DIR", "");
  if (o->csv && !o->analyze) return usage("%s--csv needs --analyze", "");
  if (o->latency_ms > 0 && o->no_round) return usage("%s--latency-ms measures on the device; drop --no-round", "");
  return 0;
}

static kiln_status_t load(const opts_t* o, kiln_graph_t** out) {
  kiln_graph_t* g = NULL;
  KILN_RETURN_IF_ERROR(kiln_onnx_parse_model(o->model, NULL, kiln_allocator_system(), &g));
  kiln_status_t s = NULL;
  if (o->dir) kiln_quantize_bind_dims(g, o->dir);
  for (int32_t i = 0; i < o->n_dims && !s; ++i) s = kiln_model_bind_dim(g, o->dims[i]);
  char bound[256];
  if (!s) kiln_model_bind_rest_to_one(g, bound, sizeof bound);
  if (!s) s = kiln_graph_prepare(g);
  if (s) kiln_graph_destroy(g);
  else *out = g;
  return s;
}

static void totals(const kiln_pruner_t* p, int64_t params, int64_t flops) {
  printf("parameters %lld -> %lld (%.1f%%), FLOPs %lld -> %lld (%.1f%%)\n", (long long)p->params, (long long)params,
         100.0 * (double)params / (double)(p->params ? p->params : 1), (long long)p->flops, (long long)flops,
         100.0 * (double)flops / (double)(p->flops ? p->flops : 1));
}

static kiln_status_t choose(const opts_t* o, const kiln_pruner_t* p, const kiln_prune_bench_t* b, int64_t* counts) {
  const double max_flops = o->flops <= 0 ? 0 : o->flops <= 1 ? o->flops * (double)p->flops : o->flops;
  if (o->ratio >= 0) kiln_pruner_counts_for_ratio(p, o->ratio, counts);
  else if (o->flops > 0) KILN_RETURN_IF_ERROR(kiln_pruner_fit_flops(p, max_flops, counts));
  else if (o->tolerance > 0) KILN_RETURN_IF_ERROR(kiln_pruner_fit_tolerance(p, o->tolerance, counts, stderr));
  else if (o->latency_ms > 0) return kiln_prune_fit_latency(p, b, o->latency_ms, counts, stderr);
  if (o->no_round) return NULL;
  return kiln_prune_round_latency(p, b, max_flops, counts, stderr);
}

/* --sparsity: zero the weakest weight blocks (compiler/prune_sparse.h). */
static int sparsify(const opts_t* o) {
  kiln_graph_t* g = NULL;
  kiln_sparsifier_t sp;
  memset(&sp, 0, sizeof sp);
  kiln_status_t s = load(o, &g);
  if (!s) s = kiln_sparsify(g, o->sparsity, o->keep, o->n_keep, &sp);
  const char** names = NULL;
  const uint8_t** masks = NULL;
  int64_t* counts = NULL;
  if (!s) {
    kiln_sparsify_report_print(g, &sp, stdout);
    names = calloc((size_t)sp.n_layers + 1, sizeof *names);
    masks = calloc((size_t)sp.n_layers + 1, sizeof *masks);
    counts = calloc((size_t)sp.n_layers + 1, sizeof *counts);
    if (!names || !masks || !counts) s = kiln_make_status(KILN_OUT_OF_MEMORY, "out of memory");
  }
  for (int32_t i = 0; !s && i < sp.n_layers; ++i)
    names[i] = sp.layers[i].weight, masks[i] = sp.layers[i].mask, counts[i] = sp.layers[i].count;
  if (!s) s = kiln_onnx_write_zeroed(o->model, sp.n_layers, names, masks, counts, o->out);
  if (!s) printf("wrote %s\n", o->out);
  free(names), free(masks), free(counts);
  kiln_sparsify_free(&sp);
  kiln_graph_destroy(g);
  return s ? kiln_cli_fail(s) : 0;
}

int kiln_cmd_prune(int argc, char** argv) {
  opts_t o;
  memset(&o, 0, sizeof o);
  o.ratio = -1;
  o.sparsity = -1;
  o.target = "cpu";
  char* keepbuf = malloc(4096);
  if (!keepbuf) return kiln_cli_fail(kiln_make_status(KILN_OUT_OF_MEMORY, "out of memory"));
  int rc = parse(argc, argv, &o, keepbuf);
  if (rc) {
    free(keepbuf);
    return rc < 0 ? 0 : rc;
  }
  const kiln_target_t* target = kiln_target_find(o.target);
  if (!target) {
    free(keepbuf);
    return usage("--target '%s': not a target this build has", o.target);
  }
  struct stat st;
  if (o.dir && (stat(o.dir, &st) != 0 || !S_ISDIR(st.st_mode))) {
    free(keepbuf);
    return kiln_cli_fail(kiln_make_status(KILN_NOT_FOUND, "%s: the calibration folder does not exist", o.dir));
  }
  if (o.sparsity >= 0) {
    int rc2 = sparsify(&o);
    free(keepbuf);
    return rc2;
  }
  kiln_graph_t* g = NULL;
  kiln_pruner_t p;
  memset(&p, 0, sizeof p);
  kiln_array_t* inputs = NULL;
  int32_t n = 0;
  int64_t* counts = NULL;
  kiln_status_t s = load(&o, &g);
  if (!s) s = kiln_pruner_init(&p, g, o.method, o.keep, o.n_keep);
  if (!s) {
    kiln_calibrate_options_t co;
    kiln_calibrate_options_default(&co);
    co.input_dir = o.dir;
    co.count = 8;
    s = kiln_calibrate_inputs(g, &co, &inputs, &n);
  }
  /* The error report and --tolerance measure on the calibration data;
   * --analyze on it or on the seeded random samples. */
  if (!s && (o.dir || o.analyze)) s = kiln_pruner_set_samples(&p, inputs, n);
  kiln_prune_bench_t b = {target, o.device, o.threads, o.reps, inputs};
  if (!s && o.analyze) {
    static const double ratios[] = {0.25, 0.5, 0.75};
    FILE* csv = NULL;
    if (o.csv && !(csv = fopen(o.csv, "w"))) s = kiln_make_status(KILN_IO_ERROR, "%s: cannot create", o.csv);
    if (!s) s = kiln_prune_analyze(&p, &b, ratios, 3, stdout, csv);
    if (csv && fclose(csv) != 0 && !s) s = kiln_make_status(KILN_IO_ERROR, "%s: write failed", o.csv);
    if (!s && o.csv) printf("wrote %s\n", o.csv);
  }
  bool prune = o.ratio >= 0 || o.flops > 0 || o.latency_ms > 0 || o.tolerance > 0;
  if (!s && prune) {
    counts = malloc(sizeof(int64_t) * (size_t)(p.deps.n_groups + 1));
    if (!counts) s = kiln_make_status(KILN_OUT_OF_MEMORY, "out of memory");
    if (!s) s = choose(&o, &p, &b, counts);
    int64_t params = 0, flops = 0;
    if (!s) s = kiln_pruner_cost(&p, counts, &params, &flops);
    if (!s) {
      kiln_pruner_report_print(&p, counts, stdout);
      totals(&p, params, flops);
    }
    if (!s && o.dir) {
      double err, agree;
      s = kiln_pruner_error(&p, counts, &err, &agree);
      if (!s) printf("output error on %d calibration samples: %.4g of the largest output; top-1 agreement %.1f%%\n", n, err, 100 * agree);
    }
    kiln_prune_plan_t plan;
    memset(&plan, 0, sizeof plan);
    if (!s && o.out) s = kiln_pruner_plan(&p, counts, &plan);
    if (!s && o.out) s = kiln_onnx_write_pruned(o.model, &plan, o.out);
    if (!s && o.out) printf("wrote %s\n", o.out);
    kiln_prune_plan_free(&plan);
  }
  free(counts);
  if (inputs) kiln_calibrate_inputs_free(g, inputs, n);
  kiln_pruner_free(&p);
  kiln_graph_destroy(g);
  free(keepbuf);
  return s ? kiln_cli_fail(s) : 0;
}
