/* Block-sparse weights (issue 27 item 4): the CPU's block-sparse conv
 * kernel (lowering/lower_nn_sparse.c) against the reference interpreter on
 * random weights whose blocks are zeroed at random -- 0%, some, most and
 * 100% of them; output channels and input channels that the blocks do not
 * divide; groups, strides, dilation, 1x1 and 1-D convs, batch 2, fused
 * epilogues -- forced on (sparse=ON), and the AUTO rule, OFF, the compile
 * notes, the weight bytes, and a module round trip. Then `kiln prune
 * --sparsity`'s library side (compiler/prune_sparse.h): which blocks it
 * zeroes, --keep, the layers it leaves, the option errors, and the ONNX
 * writer (frontend/onnx_prune.h kiln_onnx_write_zeroed). The CLI and
 * onnxruntime side is tests/models/test_digits_sparse.py. */
#include "bad_model_util.h" /* first: it defines _GNU_SOURCE */

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "compiler/compare.h"
#include "compiler/prune_sparse.h"
#include "frontend/onnx.h"
#include "frontend/onnx_prune.h"
#include "lowering/sparse_block.h"
#include "runtime/cpu/cpu_device.h"
#include "runtime/module_file.h"
#include "runtime_util.h"

static char g_dir[256];

typedef struct conv_case_s {
  const char* what;
  int64_t N, C, M, H, k, stride, pad, dil, G;
  int rank;        /* 3: Conv1D, 4: Conv2D */
  double zero;     /* fraction of blocks zeroed */
  bool bias, relu;
} conv_case_t;

/* Zeroes blocks of |w| ([M][Cg][taps]) in the lowering's block shape, each
 * with probability |zero| (1: all). */
static void zero_blocks(float* w, const conv_case_t* c, int64_t taps) {
  const int64_t Mg = c->M / c->G, Cg = c->C / c->G;
  int64_t kr = kiln_sparse_block_channels(taps);
  if (Cg % kr) kr = 1;
  for (int64_t g = 0; g < c->G; ++g)
    for (int64_t r0 = 0; r0 < Mg; r0 += KILN_SPARSE_BLOCK_ROWS)
      for (int64_t c0 = 0; c0 < Cg; c0 += kr) {
        if (!(c->zero >= 1 || (rt_rnd() + 1) / 2 < c->zero)) continue;
        for (int64_t r = r0; r < r0 + KILN_SPARSE_BLOCK_ROWS && r < Mg; ++r)
          for (int64_t ci = c0; ci < c0 + kr; ++ci)
            memset(w + ((g * Mg + r) * Cg + ci) * taps, 0, sizeof(float) * (size_t)taps);
      }
}

static kiln_graph_t* conv_model(const conv_case_t* c) {
  kiln_graph_t* g = NULL;
  if (!CHECK_OK(kiln_graph_create(kiln_allocator_system(), &g))) return NULL;
  const int nsp = c->rank - 2;
  int64_t xd[4] = {c->N, c->C, c->H, c->H}, wd[4] = {c->M, c->C / c->G, c->k, c->k};
  int64_t taps = nsp == 1 ? c->k : c->k * c->k;
  kiln_shape_t xs = kiln_shape_make(c->rank, xd);
  bool ok = CHECK_OK(kiln_graph_set_opset(g, "", 17)) && CHECK_OK(kiln_graph_add_input(g, "x", KILN_DTYPE_F32, &xs, NULL));
  kiln_array_t w = rt_random(c->rank, wd);
  zero_blocks(w.data, c, taps);
  ok = ok && CHECK_OK(kiln_graph_add_initializer(g, "w", &w, NULL));
  if (c->bias) {
    kiln_array_t b = rt_random(1, (int64_t[]){c->M});
    ok = ok && CHECK_OK(kiln_graph_add_initializer(g, "b", &b, NULL));
  }
  int64_t pads[4] = {c->pad, c->pad, c->pad, c->pad}, st[2] = {c->stride, c->stride}, dl[2] = {c->dil, c->dil};
  kiln_attr_t attrs[3] = {kiln_attr_make_ints("pads", 2 * nsp, pads), kiln_attr_make_ints("strides", nsp, st),
                          kiln_attr_make_ints("dilations", nsp, dl)};
  kiln_attr_t all[4] = {attrs[0], attrs[1], attrs[2], kiln_attr_make_int("group", c->G)};
  ok = ok && CHECK_OK(kiln_graph_add_node(g, "Conv", "conv", c->bias ? 3 : 2, (const char*[]){"x", "w", "b"}, 1,
                                          (const char*[]){c->relu ? "c" : "y"}, 4, all, NULL));
  if (c->relu)
    ok = ok && CHECK_OK(kiln_graph_add_node(g, "Relu", "relu", 1, (const char*[]){"c"}, 1, (const char*[]){"y"}, 0,
                                            NULL, NULL));
  ok = ok && CHECK_OK(kiln_graph_add_output(g, "y")) && CHECK_OK(kiln_graph_prepare(g)) &&
       CHECK_OK(kiln_graph_optimize(g, 1, NULL));
  if (!ok) {
    kiln_graph_destroy(g);
    return NULL;
  }
  return g;
}

/* The conv's note in |plan| (NULL: none). */
static const kiln_plan_sparse_note_t* note_of(const kiln_plan_t* plan) {
  for (int32_t i = 0; i < plan->n_sparse_notes; ++i)
    if (!strcmp(plan->graph->nodes[plan->sparse_notes[i].node].name, "conv")) return &plan->sparse_notes[i];
  return NULL;
}

/* Compiles |g| in |mode|, runs it on |x| and compares with |want|; the
 * note (copied to *out_note, zeroed when none) and the weight bytes. */
static void run_mode(const kiln_graph_t* g, int32_t mode, const kiln_array_t* x, const kiln_array_t* want,
                     const char* what, kiln_plan_sparse_note_t* out_note, uint64_t* out_weights) {
  kiln_plan_options_t po = {KILN_TARGET_CLASS_CPU, 2, 0, mode, 0, 0};
  kiln_plan_t* plan = NULL;
  kiln_program_t* prog = NULL;
  memset(out_note, 0, sizeof *out_note);
  out_note->node = -1;
  if (!CHECK_OK(kiln_plan_build(g, &po, kiln_allocator_system(), &plan)) || !CHECK_OK(kiln_plan_fuse(plan, NULL, NULL)) ||
      !CHECK_OK(kiln_program_build(plan, kiln_target_find("cpu"), NULL, kiln_allocator_system(), &prog))) {
    kiln_plan_destroy(plan);
    return;
  }
  const kiln_plan_sparse_note_t* n = note_of(plan);
  if (n) *out_note = *n;
  *out_weights = prog->weights_len;
  /* the block-sparse GEMM says so in its name (profiles, --dump) */
  int32_t named = 0;
  for (int32_t k = 0; k < prog->n_kernels; ++k) named += strstr(prog->kernels[k].name, "_sparse") != NULL;
  CHECK_MSG(named == (n && n->sparse ? 1 : 0), "%s: %d kernels named _sparse", what, (int)named);
  kiln_plan_destroy(plan);
  kiln_module_t* m = NULL;
  kiln_device_t* d = NULL;
  kiln_session_t* s = NULL;
  kiln_array_t got = {0};
  if (CHECK_OK(kiln_module_wrap(prog, &m)) && CHECK_OK(kiln_cpu_device_create(2, kiln_allocator_system(), &d)) &&
      CHECK_OK(kiln_session_create(m, d, NULL, &s)) && CHECK_OK(kiln_session_run(s, x, &got))) {
    kiln_compare_result_t cr;
    kiln_compare(&got, want, 1e-4, 1e-4, &cr);
    CHECK_MSG(cr.ok, "%s (mode %d) vs reference: %s", what, (int)mode, cr.message);
  }
  kiln_array_free(kiln_allocator_system(), &got);
  kiln_session_destroy(s);
  kiln_device_release(d);
  kiln_module_release(m);
}

static const conv_case_t cases[] = {
    {"3x3 16->32 80%, bias+relu", 1, 16, 32, 10, 3, 1, 1, 1, 1, 4, 0.8, true, true},
    {"3x3 stride 2, 17->30 (remainder rows)", 1, 17, 30, 9, 3, 2, 1, 1, 1, 4, 0.5, true, false},
    {"1x1 16->20 (4-channel blocks)", 1, 16, 20, 8, 1, 1, 0, 1, 1, 4, 0.7, false, true},
    {"1x1 6->12 (channels the run does not divide)", 1, 6, 12, 7, 1, 1, 0, 1, 1, 4, 0.6, true, false},
    {"3x3 groups 2, 100% zero blocks", 1, 16, 32, 10, 3, 1, 1, 1, 2, 4, 1.0, true, true},
    {"3x3 groups 4, 50%", 1, 16, 16, 9, 3, 1, 1, 1, 4, 4, 0.5, true, false},
    {"3x3 0% zero blocks", 1, 8, 8, 6, 3, 1, 1, 1, 1, 4, 0.0, true, false},
    {"5x5 dilation 2, 60%", 1, 8, 12, 12, 5, 1, 4, 2, 1, 4, 0.6, false, false},
    {"Conv1D k3 stride 3", 1, 8, 8, 20, 3, 3, 1, 1, 1, 3, 0.5, true, false},
    {"batch 2, 3x3 stride 2", 2, 12, 24, 11, 3, 2, 1, 1, 1, 4, 0.7, true, true},
};

static void test_kernel_matches_reference(void) {
  for (size_t i = 0; i < sizeof cases / sizeof cases[0]; ++i) {
    const conv_case_t* c = &cases[i];
    kiln_graph_t* g = conv_model(c);
    if (!g) continue;
    int64_t xd[4] = {c->N, c->C, c->H, c->H};
    kiln_array_t x = rt_random(c->rank, xd), want = {0};
    if (CHECK_OK(kiln_ref_run(g, &x, NULL, &want))) {
      kiln_plan_sparse_note_t note;
      uint64_t bytes = 0;
      run_mode(g, KILN_SPARSE_ON, &x, &want, c->what, &note, &bytes);
      CHECK_MSG(note.sparse, "%s: the conv did not run block-sparse", c->what);
      if (c->zero >= 1) CHECK_MSG(note.zero_blocks == 1.0, "%s: %.3f zero blocks", c->what, note.zero_blocks);
      if (c->zero == 0) CHECK_MSG(note.zero_blocks == 0.0, "%s: %.3f zero blocks", c->what, note.zero_blocks);
    }
    kiln_array_free(kiln_allocator_system(), &want);
    kiln_array_free(kiln_allocator_system(), &x);
    kiln_graph_destroy(g);
  }
}

/* AUTO: sparse at 80% zero blocks, dense (noted) at 25%; OFF: no note.
 * The module's weights shrink with the blocks. 16x16 outputs: at 8x8 the
 * padded grid wastes enough of AVX-512's 32-column tiles that the conv
 * takes its weights as the GEMM's R (the transposed form), which has no
 * block-sparse kernel, and no note is made. */
static void test_modes_and_weight_bytes(void) {
  conv_case_t c = {"auto", 1, 64, 64, 16, 3, 1, 1, 1, 1, 4, 0.8, true, true};
  for (int pass = 0; pass < 2; ++pass) {
    c.zero = pass ? 0.25 : 0.8;
    kiln_graph_t* g = conv_model(&c);
    if (!g) continue;
    kiln_array_t x = rt_random(4, (int64_t[]){1, 64, 16, 16}), want = {0};
    if (CHECK_OK(kiln_ref_run(g, &x, NULL, &want))) {
      kiln_plan_sparse_note_t na, no;
      uint64_t wa = 0, wo = 0;
      run_mode(g, KILN_SPARSE_AUTO, &x, &want, "auto", &na, &wa);
      run_mode(g, KILN_SPARSE_OFF, &x, &want, "off", &no, &wo);
      CHECK(na.node >= 0 && no.node < 0);
      CHECK_MSG(na.sparse == (pass == 0), "zero %.2f: AUTO chose %s", c.zero, na.sparse ? "sparse" : "dense");
      CHECK(na.rows == 4 && na.cols == 9);
      CHECK(fabs(na.zero_blocks - c.zero) < 0.12);
      if (pass == 0) {
        /* 64x64x3x3 f32 = 147 KB dense; at ~80% zero blocks the sparse
         * form is about a fifth of it plus the indices */
        CHECK_MSG(wa + 100000 < wo, "weights %llu (sparse) vs %llu (dense) bytes", (unsigned long long)wa,
                  (unsigned long long)wo);
        CHECK(na.sparse_bytes < na.dense_bytes / 3);
      } else {
        CHECK(wa == wo);
      }
    }
    kiln_array_free(kiln_allocator_system(), &want);
    kiln_array_free(kiln_allocator_system(), &x);
    kiln_graph_destroy(g);
  }
}

/* A block-sparse module survives the file format bit for bit. */
static void test_module_round_trip(void) {
  conv_case_t c = {"round trip", 1, 16, 24, 7, 3, 1, 1, 1, 1, 4, 0.7, true, true};
  kiln_graph_t* g = conv_model(&c);
  if (!g) return;
  kiln_plan_options_t po = {KILN_TARGET_CLASS_CPU, 2, 0, KILN_SPARSE_ON, 0, 0};
  kiln_plan_t* plan = NULL;
  kiln_program_t* prog = NULL;
  kiln_module_t *m = NULL, *m2 = NULL;
  kiln_device_t* d = NULL;
  kiln_session_t *s = NULL, *s2 = NULL;
  uint8_t* bytes = NULL;
  size_t len = 0;
  kiln_array_t x = rt_random(4, (int64_t[]){1, 16, 7, 7}), y1 = {0}, y2 = {0};
  if (CHECK_OK(kiln_plan_build(g, &po, kiln_allocator_system(), &plan)) &&
      CHECK_OK(kiln_program_build(plan, kiln_target_find("cpu"), NULL, kiln_allocator_system(), &prog)) &&
      CHECK_OK(kiln_module_wrap(prog, &m)) && CHECK_OK(kiln_module_serialize(kiln_module_program(m), kiln_allocator_system(), &bytes, &len)) &&
      CHECK_OK(kiln_module_load_memory(bytes, len, "sparse.kiln", kiln_allocator_system(), &m2)) &&
      CHECK_OK(kiln_cpu_device_create(2, kiln_allocator_system(), &d)) && CHECK_OK(kiln_session_create(m, d, NULL, &s)) &&
      CHECK_OK(kiln_session_create(m2, d, NULL, &s2)) && CHECK_OK(kiln_session_run(s, &x, &y1)) &&
      CHECK_OK(kiln_session_run(s2, &x, &y2)))
    CHECK(rt_same_bytes(&y1, &y2));
  kiln_allocator_free(kiln_allocator_system(), bytes);
  kiln_array_free(kiln_allocator_system(), &y1);
  kiln_array_free(kiln_allocator_system(), &y2);
  kiln_array_free(kiln_allocator_system(), &x);
  kiln_session_destroy(s);
  kiln_session_destroy(s2);
  kiln_device_release(d);
  kiln_module_release(m);
  kiln_module_release(m2);
  kiln_plan_destroy(plan);
  kiln_graph_destroy(g);
}

/* ---- kiln prune --sparsity's library side --------------------------------- */

/* x[1,8,6,6] -> conv (3x3, 12 out, weights whose block (t, c) has |w| =
 * (t*8 + c + 1) / 100, signs alternating) -> dw (depthwise 3x3) -> Flatten
 * -> gemm (transB, 10 x 432). */
static void write_model(const char* path) {
  bm_model_t b;
  bm_init(&b, 13);
  int64_t xd[] = {1, 8, 6, 6}, wd[] = {12, 8, 3, 3}, dd[] = {12, 1, 3, 3}, gd[] = {10, 432};
  bm_input(&b, "x", BM_F32, 4, xd);
  float* W = bm_alloc(&b, sizeof(float) * 864);
  for (int m = 0; m < 12; ++m)
    for (int c = 0; c < 8; ++c)
      for (int t = 0; t < 9; ++t) W[(m * 8 + c) * 9 + t] = (float)((m / 4) * 8 + c + 1) / 100.0f * (t % 2 ? -1 : 1);
  float* D = bm_alloc(&b, sizeof(float) * 108);
  float* G = bm_alloc(&b, sizeof(float) * 4320);
  for (int i = 0; i < 108; ++i) D[i] = 0.5f;
  for (int i = 0; i < 4320; ++i) G[i] = (float)((i * 37) % 101 + 1) / 101.0f;
  bm_initializer(&b, "W", BM_F32, 4, wd, W, 864 * 4);
  bm_initializer(&b, "D", BM_F32, 4, dd, D, 108 * 4);
  bm_initializer(&b, "G", BM_F32, 2, gd, G, 4320 * 4);
  int64_t pads[] = {1, 1, 1, 1};
  Onnx__NodeProto* n = bm_node(&b, "Conv", "conv", "x,W", "a");
  bm_attr_ints(&b, n, "pads", 4, pads);
  n = bm_node(&b, "Conv", "dw", "a,D", "d");
  bm_attr_ints(&b, n, "pads", 4, pads);
  bm_attr_int(&b, n, "group", 12);
  bm_node(&b, "Flatten", "flat", "d", "f");
  n = bm_node(&b, "Gemm", "gemm", "f,G", "y");
  bm_attr_int(&b, n, "transB", 1);
  bm_output(&b, "y");
  CHECK(bm_write(&b, path));
  bm_free(&b);
}

static const kiln_sparse_layer_t* layer(const kiln_graph_t* g, const kiln_sparsifier_t* sp, const char* name) {
  for (int32_t i = 0; i < sp->n_layers; ++i)
    if (!strcmp(g->nodes[sp->layers[i].node].name, name)) return &sp->layers[i];
  return NULL;
}

static kiln_graph_t* load_prepared(const char* path) {
  kiln_graph_t* g = NULL;
  if (CHECK_OK(kiln_onnx_parse_model(path, NULL, kiln_allocator_system(), &g)) && CHECK_OK(kiln_graph_prepare(g)))
    return g;
  kiln_graph_destroy(g);
  return NULL;
}

static void test_sparsify_blocks_and_writer(void) {
  char path[300], out[300];
  snprintf(path, sizeof path, "%s/m.onnx", g_dir);
  snprintf(out, sizeof out, "%s/m.sparse.onnx", g_dir);
  write_model(path);
  kiln_graph_t* g = load_prepared(path);
  if (!g) return;
  kiln_sparsifier_t sp;
  if (!CHECK_OK(kiln_sparsify(g, 0.5, NULL, 0, &sp))) {
    kiln_graph_destroy(g);
    return;
  }
  const kiln_sparse_layer_t *conv = layer(g, &sp, "conv"), *dw = layer(g, &sp, "dw"), *gemm = layer(g, &sp, "gemm");
  CHECK(conv && dw && gemm);
  if (conv && dw && gemm) {
    /* 3 row blocks x 8 channels; the 12 weakest are (t, c) with t*8+c < 12 */
    CHECK(conv->rows == 4 && conv->cols == 9 && conv->blocks == 24 && conv->zeroed == 12);
    for (int m = 0; m < 12; ++m)
      for (int c = 0; c < 8; ++c)
        CHECK_MSG(conv->mask[(m * 8 + c) * 9 + 4] == ((m / 4) * 8 + c < 12), "conv block (%d, %d)", m / 4, c);
    CHECK(fabs(conv->after - 0.5) < 1e-9 && conv->before == 0);
    CHECK(dw->skipped && strstr(dw->skipped, "depthwise") && !dw->mask);
    /* Gemm: 10 output rows (3 row blocks, the last of 2) x 108 runs of 4 */
    CHECK(gemm->rows == 4 && gemm->cols == 4 && gemm->blocks == 3 * 108 && gemm->zeroed == 162);
    const char* names[3];
    const uint8_t* masks[3];
    int64_t counts[3];
    for (int32_t i = 0; i < sp.n_layers && i < 3; ++i)
      names[i] = sp.layers[i].weight, masks[i] = sp.layers[i].mask, counts[i] = sp.layers[i].count;
    if (CHECK_OK(kiln_onnx_write_zeroed(path, sp.n_layers, names, masks, counts, out))) {
      kiln_graph_t* g2 = load_prepared(out);
      if (g2) {
        const kiln_tensor_t *w1 = NULL, *w2 = NULL;
        for (int32_t t = 0; t < g->n_tensors; ++t)
          if (!strcmp(g->tensors[t].name, "W")) w1 = &g->tensors[t];
        for (int32_t t = 0; t < g2->n_tensors; ++t)
          if (!strcmp(g2->tensors[t].name, "W")) w2 = &g2->tensors[t];
        CHECK(w1 && w2 && kiln_shape_equal(&w1->value.shape, &w2->value.shape));
        for (int64_t i = 0; w1 && w2 && i < 864; ++i) {
          float a = ((const float*)w1->value.data)[i], z = ((const float*)w2->value.data)[i];
          CHECK_MSG(conv->mask[i] ? z == 0 : z == a, "W[%lld]: %g -> %g", (long long)i, a, z);
        }
        kiln_graph_destroy(g2);
      }
    }
    /* an initializer the model does not have */
    const char* bad[1] = {"nope"};
    CHECK_ERR(kiln_onnx_write_zeroed(path, 1, bad, masks, counts, out), KILN_NOT_FOUND, "'nope'");
  }
  kiln_sparsify_free(&sp);
  /* --keep: the layer stays; a name that is no layer is an error */
  const char* keep[1] = {"conv"};
  if (CHECK_OK(kiln_sparsify(g, 0.9, keep, 1, &sp))) {
    const kiln_sparse_layer_t* c = layer(g, &sp, "conv");
    CHECK(c && c->skipped && !strcmp(c->skipped, "--keep") && !c->mask);
    kiln_sparsify_free(&sp);
  }
  const char* unknown[1] = {"conv9"};
  CHECK_ERR(kiln_sparsify(g, 0.5, unknown, 1, &sp), KILN_NOT_FOUND, "'conv9'");
  CHECK_ERR(kiln_sparsify(g, 1.0, NULL, 0, &sp), KILN_INVALID_ARGUMENT, "--sparsity");
  CHECK_ERR(kiln_sparsify(g, -0.1, NULL, 0, &sp), KILN_INVALID_ARGUMENT, "--sparsity");
  CHECK_ERR(kiln_sparsify(g, NAN, NULL, 0, &sp), KILN_INVALID_ARGUMENT, "--sparsity");
  /* 0: nothing zeroed */
  if (CHECK_OK(kiln_sparsify(g, 0, NULL, 0, &sp))) {
    const kiln_sparse_layer_t* c = layer(g, &sp, "conv");
    CHECK(c && c->zeroed == 0 && c->after == 0);
    kiln_sparsify_free(&sp);
  }
  kiln_graph_destroy(g);
}

int main(void) {
  if (!bm_tmpdir("sparse", g_dir, sizeof g_dir)) return 1;
  RUN(test_kernel_matches_reference);
  RUN(test_modes_and_weight_bytes);
  RUN(test_module_round_trip);
  RUN(test_sparsify_blocks_and_writer);
  bm_rmtree(g_dir);
  return kiln_test_finish();
}
