/* kiln block sparsity (see prune_sparse.h). */
#include "compiler/prune_sparse.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "ir/op.h"
#include "lowering/sparse_block.h"

/* A layer's weights as blocks: nb groups of R rows x KO channels x T taps,
 * element (g, r, c, tap) at g*gs + r*rs + c*cs + tap. */
typedef struct geo_s {
  int64_t nb, R, KO, T, gs, rs, cs, kr;
} geo_t;

static int64_t elem(const geo_t* q, int64_t g, int64_t r, int64_t c, int64_t tap) {
  return g * q->gs + r * q->rs + c * q->cs + tap;
}

/* The layer's geometry, or a reason to skip it (NULL geometry). */
static const char* layer_geo(const kiln_graph_t* g, const kiln_node_t* n, geo_t* q, int32_t* w) {
  memset(q, 0, sizeof *q);
  const bool conv = !strcmp(n->op_type, "Conv"), gemm = !strcmp(n->op_type, "Gemm"), mm = !strcmp(n->op_type, "MatMul");
  if (!conv && !gemm && !mm) return "";
  if (n->n_inputs < 2 || n->inputs[1] < 0) return "";
  *w = n->inputs[1];
  const kiln_tensor_t* t = &g->tensors[*w];
  if (!(t->flags & KILN_TENSOR_INITIALIZER) || !t->value.data) return "its weights are not an initializer";
  if (!kiln_dtype_is_float(t->value.dtype)) return "its weights are not floating point";
  const kiln_shape_t* s = &t->value.shape;
  if (conv) {
    if (s->rank < 3) return "weights of rank below 3";
    int64_t G = 1;
    const kiln_attr_t* a = kiln_node_attr(n, "group");
    if (a) G = a->i;
    int64_t T = 1;
    for (int32_t i = 2; i < s->rank; ++i) T *= s->dims[i];
    if (G < 1 || s->dims[0] % G) return "a group count that does not divide its output channels";
    /* lower_nn_conv.c runs these on its direct kernel, never the sparse one */
    if (s->dims[1] == 1 && T <= 49) return "one input channel per group: the direct (depthwise) kernel runs it";
    *q = (geo_t){G, s->dims[0] / G, s->dims[1], T, s->dims[0] / G * s->dims[1] * T, s->dims[1] * T, T, 0};
  } else {
    if (s->rank != 2) return "weights not a matrix";
    bool tb = false;
    if (gemm) {
      const kiln_attr_t* a = kiln_node_attr(n, "transB");
      tb = a && a->i;
    }
    const int64_t K = tb ? s->dims[1] : s->dims[0], N = tb ? s->dims[0] : s->dims[1];
    /* rows are the output features */
    *q = (geo_t){1, N, K, 1, 0, tb ? K : 1, tb ? 1 : N, 0};
  }
  if (q->R <= 0 || q->KO <= 0) return "empty weights";
  q->kr = kiln_sparse_block_channels(q->T);
  if (q->KO % q->kr) q->kr = 1; /* as the kernel blocks it */
  return NULL;
}

typedef struct scored_s {
  double score;
  int64_t index;
} scored_t;

static int cmp_scored(const void* a, const void* b) {
  const scored_t *x = a, *y = b;
  if (x->score != y->score) return x->score < y->score ? -1 : 1;
  return (x->index > y->index) - (x->index < y->index);
}

static int64_t count_zeros(const kiln_array_t* a, const uint8_t* mask) {
  int64_t n = kiln_shape_count(&a->shape), z = 0;
  for (int64_t i = 0; i < n; ++i) z += (mask && mask[i]) || kiln_load_f64(a->dtype, a->data, (size_t)i) == 0.0;
  return z;
}

/* Scores the blocks of layer |L| and marks the lowest round(s x blocks). */
static kiln_status_t choose(const kiln_graph_t* g, const geo_t* q, double s, kiln_sparse_layer_t* L) {
  const kiln_array_t* a = &g->tensors[g->nodes[L->node].inputs[1]].value;
  const int64_t tiles = (q->R + KILN_SPARSE_BLOCK_ROWS - 1) / KILN_SPARSE_BLOCK_ROWS, kb = q->KO / q->kr;
  L->blocks = q->nb * tiles * kb;
  L->count = kiln_shape_count(&a->shape);
  L->rows = KILN_SPARSE_BLOCK_ROWS;
  L->cols = q->kr * q->T;
  scored_t* sc = malloc(sizeof *sc * (size_t)(L->blocks + 1));
  L->mask = calloc((size_t)L->count + 1, 1);
  if (!sc || !L->mask) {
    free(sc);
    return kiln_make_status(KILN_OUT_OF_MEMORY, "layer '%s': out of memory", g->nodes[L->node].name);
  }
  int64_t b = 0;
  for (int64_t gi = 0; gi < q->nb; ++gi)
    for (int64_t t = 0; t < tiles; ++t)
      for (int64_t k = 0; k < kb; ++k, ++b) {
        double acc = 0;
        int64_t n = 0;
        for (int64_t r = t * KILN_SPARSE_BLOCK_ROWS; r < q->R && r < (t + 1) * KILN_SPARSE_BLOCK_ROWS; ++r)
          for (int64_t c = k * q->kr; c < (k + 1) * q->kr; ++c)
            for (int64_t tap = 0; tap < q->T; ++tap, ++n)
              acc += fabs(kiln_load_f64(a->dtype, a->data, (size_t)elem(q, gi, r, c, tap)));
        sc[b] = (scored_t){n ? acc / (double)n : 0, b};
      }
  qsort(sc, (size_t)L->blocks, sizeof *sc, cmp_scored);
  L->zeroed = (int64_t)floor(s * (double)L->blocks + 0.5);
  for (int64_t i = 0; i < L->zeroed; ++i) {
    const int64_t id = sc[i].index, k = id % kb, t = id / kb % tiles, gi = id / kb / tiles;
    for (int64_t r = t * KILN_SPARSE_BLOCK_ROWS; r < q->R && r < (t + 1) * KILN_SPARSE_BLOCK_ROWS; ++r)
      for (int64_t c = k * q->kr; c < (k + 1) * q->kr; ++c)
        for (int64_t tap = 0; tap < q->T; ++tap) L->mask[elem(q, gi, r, c, tap)] = 1;
  }
  free(sc);
  L->before = (double)count_zeros(a, NULL) / (double)L->count;
  L->after = (double)count_zeros(a, L->mask) / (double)L->count;
  return NULL;
}

kiln_status_t kiln_sparsify(const kiln_graph_t* g, double s, const char* const* keep, int32_t n_keep,
                            kiln_sparsifier_t* out) {
  memset(out, 0, sizeof *out);
  if (!(s >= 0 && s < 1)) return kiln_make_status(KILN_INVALID_ARGUMENT, "--sparsity %g: expected a number in [0, 1)", s);
  for (int32_t i = 0; i < n_keep; ++i) {
    bool found = false;
    for (int32_t j = 0; j < g->n_nodes && !found; ++j) found = !strcmp(g->nodes[j].name, keep[i]);
    if (!found) return kiln_make_status(KILN_NOT_FOUND, "--keep: no layer (node) named '%s'", keep[i]);
  }
  out->layers = calloc((size_t)g->n_nodes + 1, sizeof *out->layers);
  if (!out->layers) return kiln_make_status(KILN_OUT_OF_MEMORY, "out of memory (sparsity)");
  kiln_status_t st = NULL;
  for (int32_t j = 0; j < g->n_nodes && !st; ++j) {
    const kiln_node_t* n = &g->nodes[j];
    geo_t q;
    int32_t w = -1;
    const char* why = layer_geo(g, n, &q, &w);
    if (why && !why[0]) continue; /* not a conv/GEMM layer */
    kiln_sparse_layer_t* L = &out->layers[out->n_layers++];
    L->node = j;
    L->weight = g->tensors[w].name;
    for (int32_t i = 0; i < n_keep && !why; ++i)
      if (!strcmp(keep[i], n->name)) why = "--keep";
    for (int32_t i = 0; i + 1 < out->n_layers && !why; ++i)
      if (out->layers[i].weight == L->weight) why = "its weights are another layer's too (sparsified there)";
    if (why) {
      L->skipped = why;
      continue;
    }
    st = choose(g, &q, s, L);
    if (!st) {
      out->weights += L->count;
      out->zeros_before += (int64_t)floor(L->before * (double)L->count + 0.5);
      out->zeros_after += (int64_t)floor(L->after * (double)L->count + 0.5);
    }
  }
  if (st) kiln_sparsify_free(out);
  return st;
}

void kiln_sparsify_free(kiln_sparsifier_t* sp) {
  if (!sp) return;
  for (int32_t i = 0; i < sp->n_layers; ++i) free(sp->layers[i].mask);
  free(sp->layers);
  memset(sp, 0, sizeof *sp);
}

void kiln_sparsify_report_print(const kiln_graph_t* g, const kiln_sparsifier_t* sp, FILE* out) {
  fprintf(out, "%-28s %-20s %6s %15s %9s  %s\n", "layer", "weights", "block", "blocks zeroed", "zero", "note");
  for (int32_t i = 0; i < sp->n_layers; ++i) {
    const kiln_sparse_layer_t* L = &sp->layers[i];
    const kiln_node_t* n = &g->nodes[L->node];
    if (L->skipped) {
      fprintf(out, "%-28s %-20s %6s %15s %9s  left as it was: %s\n", n->name, L->weight, "-", "-", "-", L->skipped);
      continue;
    }
    char blk[32], cnt[48], zero[32];
    snprintf(blk, sizeof blk, "%lldx%lld", (long long)L->rows, (long long)L->cols);
    snprintf(cnt, sizeof cnt, "%lld/%lld", (long long)L->zeroed, (long long)L->blocks);
    snprintf(zero, sizeof zero, "%.1f%%", 100 * L->after);
    fprintf(out, "%-28s %-20s %6s %15s %9s  %s%s\n", n->name, L->weight, blk, cnt, zero,
            strcmp(n->op_type, "Conv") ? "runs dense (the block-sparse kernel is Conv's)" : "",
            L->before > 0 ? " (had zeros before)" : "");
  }
  fprintf(out, "weights of the sparsified layers: %lld, zero %.1f%% -> %.1f%%\n", (long long)sp->weights,
          sp->weights ? 100.0 * (double)sp->zeros_before / (double)sp->weights : 0.0,
          sp->weights ? 100.0 * (double)sp->zeros_after / (double)sp->weights : 0.0);
}
