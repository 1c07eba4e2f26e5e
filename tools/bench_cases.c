/* `kiln bench` cases: what is measured, and the one-node graphs for it.
 *
 * The convolution table lists every distinct Conv (distinct = same input
 * channels/size, output channels, kernel, stride, pad, group) of
 * torchvision's resnet18 and mobilenet_v2 at batch 1, 224x224, named after
 * the first module that has the shape (the "xN" note says how many convs of
 * the model share it). Depthwise convs (group == channels) are in suite
 * "dwconv"; the conv suite includes them. */
#include "tools/bench_cases.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "ir/op.h"

const char* const bench_suite_names = "gemm,conv,dwconv,elementwise,reduce,softmax,layernorm,pool";

uint32_t bench_suite_bit(const char* name) {
  static const struct { const char* n; uint32_t bit; } t[] = {
      {"gemm", BENCH_SUITE_GEMM},       {"conv", BENCH_SUITE_CONV},
      {"dwconv", BENCH_SUITE_DWCONV},   {"elementwise", BENCH_SUITE_ELEMENTWISE},
      {"reduce", BENCH_SUITE_REDUCE},   {"softmax", BENCH_SUITE_SOFTMAX},
      {"layernorm", BENCH_SUITE_LAYERNORM}, {"pool", BENCH_SUITE_POOL},
      {"all", BENCH_SUITE_ALL},
  };
  for (size_t i = 0; i < sizeof t / sizeof t[0]; ++i)
    if (!strcmp(name, t[i].n)) return t[i].bit;
  return 0;
}

/* ---- tables -------------------------------------------------------------- */

typedef struct conv_spec_s {
  const char* name;
  int32_t count; /* convs of the model with this shape */
  int64_t c, hw, oc, k, stride, pad, group;
} conv_spec_t;

/* torchvision resnet18: conv1, then BasicBlocks (3x3 convs; the first block
 * of layers 2-4 strides 2 and has a 1x1 stride-2 downsample). */
static const conv_spec_t kConvs[] = {
    {"resnet18.conv1", 1, 3, 224, 64, 7, 2, 3, 1},
    {"resnet18.layer1.0.conv1", 4, 64, 56, 64, 3, 1, 1, 1},
    {"resnet18.layer2.0.conv1", 1, 64, 56, 128, 3, 2, 1, 1},
    {"resnet18.layer2.0.conv2", 3, 128, 28, 128, 3, 1, 1, 1},
    {"resnet18.layer2.0.downsample.0", 1, 64, 56, 128, 1, 2, 0, 1},
    {"resnet18.layer3.0.conv1", 1, 128, 28, 256, 3, 2, 1, 1},
    {"resnet18.layer3.0.conv2", 3, 256, 14, 256, 3, 1, 1, 1},
    {"resnet18.layer3.0.downsample.0", 1, 128, 28, 256, 1, 2, 0, 1},
    {"resnet18.layer4.0.conv1", 1, 256, 14, 512, 3, 2, 1, 1},
    {"resnet18.layer4.0.conv2", 3, 512, 7, 512, 3, 1, 1, 1},
    {"resnet18.layer4.0.downsample.0", 1, 256, 14, 512, 1, 2, 0, 1},
    /* torchvision mobilenet_v2: features.0 is a 3x3/2 conv; InvertedResidual
     * blocks (t, c, n, s) = (1,16,1,1) (6,24,2,2) (6,32,3,2) (6,64,4,2)
     * (6,96,3,1) (6,160,3,2) (6,320,1,1): conv.0.0 1x1 expand (t != 1),
     * then the 3x3 depthwise, then the 1x1 projection; features.18 is the
     * 1x1 320->1280 head. */
    {"mobilenetv2.features.0.0", 1, 3, 224, 32, 3, 2, 1, 1},
    {"mobilenetv2.features.1.conv.0.0", 1, 32, 112, 32, 3, 1, 1, 32},
    {"mobilenetv2.features.1.conv.1", 1, 32, 112, 16, 1, 1, 0, 1},
    {"mobilenetv2.features.2.conv.0.0", 1, 16, 112, 96, 1, 1, 0, 1},
    {"mobilenetv2.features.2.conv.1.0", 1, 96, 112, 96, 3, 2, 1, 96},
    {"mobilenetv2.features.2.conv.2", 1, 96, 56, 24, 1, 1, 0, 1},
    {"mobilenetv2.features.3.conv.0.0", 2, 24, 56, 144, 1, 1, 0, 1},
    {"mobilenetv2.features.3.conv.1.0", 1, 144, 56, 144, 3, 1, 1, 144},
    {"mobilenetv2.features.3.conv.2", 1, 144, 56, 24, 1, 1, 0, 1},
    {"mobilenetv2.features.4.conv.1.0", 1, 144, 56, 144, 3, 2, 1, 144},
    {"mobilenetv2.features.4.conv.2", 1, 144, 28, 32, 1, 1, 0, 1},
    {"mobilenetv2.features.5.conv.0.0", 3, 32, 28, 192, 1, 1, 0, 1},
    {"mobilenetv2.features.5.conv.1.0", 2, 192, 28, 192, 3, 1, 1, 192},
    {"mobilenetv2.features.5.conv.2", 2, 192, 28, 32, 1, 1, 0, 1},
    {"mobilenetv2.features.7.conv.1.0", 1, 192, 28, 192, 3, 2, 1, 192},
    {"mobilenetv2.features.7.conv.2", 1, 192, 14, 64, 1, 1, 0, 1},
    {"mobilenetv2.features.8.conv.0.0", 4, 64, 14, 384, 1, 1, 0, 1},
    {"mobilenetv2.features.8.conv.1.0", 4, 384, 14, 384, 3, 1, 1, 384},
    {"mobilenetv2.features.8.conv.2", 3, 384, 14, 64, 1, 1, 0, 1},
    {"mobilenetv2.features.11.conv.2", 1, 384, 14, 96, 1, 1, 0, 1},
    {"mobilenetv2.features.12.conv.0.0", 3, 96, 14, 576, 1, 1, 0, 1},
    {"mobilenetv2.features.12.conv.1.0", 2, 576, 14, 576, 3, 1, 1, 576},
    {"mobilenetv2.features.12.conv.2", 2, 576, 14, 96, 1, 1, 0, 1},
    {"mobilenetv2.features.14.conv.1.0", 1, 576, 14, 576, 3, 2, 1, 576},
    {"mobilenetv2.features.14.conv.2", 1, 576, 7, 160, 1, 1, 0, 1},
    {"mobilenetv2.features.15.conv.0.0", 3, 160, 7, 960, 1, 1, 0, 1},
    {"mobilenetv2.features.15.conv.1.0", 3, 960, 7, 960, 3, 1, 1, 960},
    {"mobilenetv2.features.15.conv.2", 2, 960, 7, 160, 1, 1, 0, 1},
    {"mobilenetv2.features.17.conv.2", 1, 960, 7, 320, 1, 1, 0, 1},
    {"mobilenetv2.features.18.0", 1, 320, 7, 1280, 1, 1, 0, 1},
};

/* Non-square GEMMs (M x K x N): a transformer layer (128 tokens),
 * ResNet-50's fc at batch 1, and products with few rows (GEMVs: bound by
 * reading B once): MobileNetV2's classifier as the model has it (Gemm,
 * B stored N x K, a bias), a decoder's projections for 1, 2 or 4 tokens,
 * with B stored either way and one with a bias and a Relu. tb 1: a Gemm
 * node with transB (B stored N x K); epi 1: a Gemm with a bias C[N], and
 * a Relu after it. The peers (OpenBLAS, CLBlast) run only the plain
 * MatMuls. */
static const struct { const char* name; int64_t m, k, n, tb, epi; } kGemms[] = {
    {"transformer.128x256x768", 128, 256, 768, 0, 0},
    {"transformer.128x256x1024", 128, 256, 1024, 0, 0},
    {"transformer.128x1024x256", 128, 1024, 256, 0, 0},
    {"resnet50.fc", 1, 2048, 1000, 0, 0},
    {"mobilenetv2.classifier", 1, 1280, 1000, 1, 0},
    {"gemv.1x768x768", 1, 768, 768, 0, 0},
    {"gemv.2x768x768", 2, 768, 768, 0, 0},
    {"gemv.4x768x768", 4, 768, 768, 0, 0},
    {"gemv.1x768x3072", 1, 768, 3072, 0, 0},
    {"gemv.1x4096x4096", 1, 4096, 4096, 0, 0},
    {"gemv.1x768x768.tb", 1, 768, 768, 1, 0},
    {"gemv.4x768x3072.tb", 4, 768, 3072, 1, 0},
    {"gemv.1x4096x4096.tb", 1, 4096, 4096, 1, 0},
    {"gemv.1x768x3072.tb.bias_relu", 1, 768, 3072, 1, 1},
};

/* ---- building the list -------------------------------------------------- */

typedef struct list_s {
  bench_case_t* v;
  int32_t n, cap;
  bool oom;
} list_t;

static bench_case_t* push(list_t* l, const char* suite, bench_kind_t kind) {
  if (l->oom) return NULL;
  if (l->n == l->cap) {
    int32_t cap = l->cap ? l->cap * 2 : 64;
    bench_case_t* v = realloc(l->v, sizeof(*v) * (size_t)cap);
    if (!v) {
      l->oom = true;
      return NULL;
    }
    l->v = v;
    l->cap = cap;
  }
  bench_case_t* c = &l->v[l->n++];
  memset(c, 0, sizeof(*c));
  c->suite = suite;
  c->kind = kind;
  return c;
}

static void add_gemm(list_t* l, const char* name, int64_t m, int64_t k, int64_t n, int64_t tb, int64_t epi) {
  bench_case_t* c = push(l, "gemm", BENCH_GEMM);
  if (!c) return;
  snprintf(c->name, sizeof c->name, "%s", name);
  snprintf(c->shape, sizeof c->shape, "%lldx%lldx%lld%s%s", (long long)m, (long long)k, (long long)n,
           tb ? " transB" : "", epi ? " +bias Relu" : "");
  c->p[0] = m, c->p[1] = k, c->p[2] = n, c->p[3] = tb, c->p[4] = epi;
  c->est_flops = 2.0 * (double)m * (double)k * (double)n;
  c->est_bytes = 4.0 * (double)(m * k + k * n + m * n + (epi ? n : 0));
}

static void add_conv(list_t* l, const conv_spec_t* s) {
  bool dw = s->group > 1 && s->group == s->c;
  bench_case_t* c = push(l, dw ? "dwconv" : "conv", BENCH_CONV);
  if (!c) return;
  snprintf(c->name, sizeof c->name, "%s", s->name);
  int64_t oh = (s->hw + 2 * s->pad - s->k) / s->stride + 1;
  snprintf(c->shape, sizeof c->shape, "1x%lldx%lldx%lld * %lldx%lldx%lldx%lld s%lld p%lld%s",
           (long long)s->c, (long long)s->hw, (long long)s->hw, (long long)s->oc,
           (long long)(s->c / s->group), (long long)s->k, (long long)s->k, (long long)s->stride,
           (long long)s->pad, dw ? " dw" : "");
  if (s->count > 1) {
    size_t len = strlen(c->shape);
    snprintf(c->shape + len, sizeof c->shape - len, " (x%d)", (int)s->count);
  }
  int64_t v[8] = {s->c, s->hw, s->hw, s->oc, s->k, s->stride, s->pad, s->group};
  memcpy(c->p, v, sizeof v);
  c->est_flops = 2.0 * (double)s->oc * (double)(oh * oh) * (double)(s->c / s->group * s->k * s->k);
  c->est_bytes = 4.0 * ((double)(s->c * s->hw * s->hw) + (double)(s->oc * oh * oh) +
                        (double)(s->oc * (s->c / s->group) * s->k * s->k));
}

static void add_2d(list_t* l, const char* suite, bench_kind_t kind, const char* op, int64_t rows,
                   int64_t cols, double flops_per, double bytes_per) {
  bench_case_t* c = push(l, suite, kind);
  if (!c) return;
  int64_t n = rows * cols;
  if (kind == BENCH_ADD || kind == BENCH_RELU || kind == BENCH_MUL_BCAST)
    snprintf(c->name, sizeof c->name, "%s.%lldM", op, (long long)(n >> 20));
  else
    snprintf(c->name, sizeof c->name, "%s.%lldx%lld", op, (long long)rows, (long long)cols);
  if (kind == BENCH_MUL_BCAST)
    snprintf(c->shape, sizeof c->shape, "%lldx%lld * %lld", (long long)rows, (long long)cols,
             (long long)cols);
  else
    snprintf(c->shape, sizeof c->shape, "%lldx%lld", (long long)rows, (long long)cols);
  c->p[0] = rows, c->p[1] = cols;
  c->est_flops = flops_per * (double)n;
  c->est_bytes = bytes_per * (double)n;
}

/* A transcendental activation over 16M elements (64 MB in, 64 MB out: far
 * past the caches), to hold against the bandwidth roof. */
static void add_unary(list_t* l, const char* op, const char* name, double flops_per) {
  bench_case_t* c = push(l, "elementwise", BENCH_UNARY);
  if (!c) return;
  const int64_t rows = 16384, cols = 1024;
  snprintf(c->name, sizeof c->name, "%s.%lldM", name, (long long)((rows * cols) >> 20));
  snprintf(c->shape, sizeof c->shape, "%lldx%lld", (long long)rows, (long long)cols);
  c->p[0] = rows, c->p[1] = cols;
  c->op = op;
  c->est_flops = flops_per * (double)(rows * cols);
  c->est_bytes = 8.0 * (double)(rows * cols);
}

static void add_reduce(list_t* l, bench_kind_t kind, const char* op, int64_t d0, int64_t d1,
                       int64_t d2, int64_t axis) {
  bench_case_t* c = push(l, "reduce", kind);
  if (!c) return;
  snprintf(c->name, sizeof c->name, "%s.axis%lld", op, (long long)axis);
  snprintf(c->shape, sizeof c->shape, "%lldx%lldx%lld axis %lld", (long long)d0, (long long)d1,
           (long long)d2, (long long)axis);
  c->p[0] = d0, c->p[1] = d1, c->p[2] = d2, c->p[3] = axis;
  c->est_flops = (double)(d0 * d1 * d2);
  c->est_bytes = 4.0 * (double)(d0 * d1 * d2);
}

/* Pools of the models (batch 1): one-node graphs, so NCHW (the layout pass
 * keeps a lone node on NCHW; in a model they run on NCHWc). */
static const struct {
  const char *name, *op;
  int64_t c, hw, k, stride, pad;
} kPools[] = {
    {"resnet.maxpool", "MaxPool", 64, 112, 3, 2, 1},            /* ResNet's stem pool */
    {"densenet.transition.avgpool", "AveragePool", 256, 56, 2, 2, 0},
    {"inception.branch.avgpool", "AveragePool", 192, 35, 3, 1, 1},
    {"resnet50.avgpool", "GlobalAveragePool", 2048, 7, 7, 1, 0},
    {"mobilenetv2.avgpool", "GlobalAveragePool", 1280, 7, 7, 1, 0},
    {"large.maxpool", "MaxPool", 256, 224, 2, 2, 0},             /* 51 MB in: past the caches */
};

static void add_pool(list_t* l, size_t i) {
  bench_case_t* c = push(l, "pool", BENCH_POOL);
  if (!c) return;
  const int64_t C = kPools[i].c, hw = kPools[i].hw, k = kPools[i].k, s = kPools[i].stride, pd = kPools[i].pad;
  const int64_t o = (hw + 2 * pd - k) / s + 1;
  snprintf(c->name, sizeof c->name, "%s", kPools[i].name);
  snprintf(c->shape, sizeof c->shape, "%s 1x%lldx%lldx%lld k%lld s%lld p%lld", kPools[i].op, (long long)C,
           (long long)hw, (long long)hw, (long long)k, (long long)s, (long long)pd);
  c->op = kPools[i].op;
  int64_t v[6] = {C, hw, hw, k, s, pd};
  memcpy(c->p, v, sizeof v);
  c->est_flops = (double)(C * o * o * k * k);
  c->est_bytes = 4.0 * (double)(C * hw * hw + C * o * o);
}

bench_case_t* bench_cases(uint32_t suites, bool quick, int32_t* out_n) {
  list_t l = {0};
  if (suites & BENCH_SUITE_GEMM) {
    for (int64_t n = 64; n <= (quick ? 1024 : 4096); n *= 2) {
      char name[32];
      snprintf(name, sizeof name, "square.%lld", (long long)n);
      add_gemm(&l, name, n, n, n, 0, 0);
    }
    for (size_t i = 0; i < sizeof kGemms / sizeof kGemms[0]; ++i)
      if (!quick || kGemms[i].k * kGemms[i].n <= 1024 * 1024 * 4) /* --quick: B up to 16 MB */
        add_gemm(&l, kGemms[i].name, kGemms[i].m, kGemms[i].k, kGemms[i].n, kGemms[i].tb, kGemms[i].epi);
  }
  for (size_t i = 0; i < sizeof kConvs / sizeof kConvs[0]; ++i) {
    bool dw = kConvs[i].group > 1;
    if ((suites & BENCH_SUITE_CONV) || (dw && (suites & BENCH_SUITE_DWCONV)))
      add_conv(&l, &kConvs[i]);
  }
  if (suites & BENCH_SUITE_ELEMENTWISE) {
    for (int64_t rows = 1024; rows <= 16384; rows *= 16) {
      add_2d(&l, "elementwise", BENCH_ADD, "add", rows, 1024, 1, 12);
      add_2d(&l, "elementwise", BENCH_RELU, "relu", rows, 1024, 1, 8);
      add_2d(&l, "elementwise", BENCH_MUL_BCAST, "mul_bcast", rows, 1024, 1, 8);
    }
    /* FLOPs per element as the reference counts them (one per output
     * element; SiLU is two nodes) */
    static const struct { const char *op, *name; double flops; } kUnary[] = {
        {"Sigmoid", "sigmoid", 1}, {"Tanh", "tanh", 1},       {"Exp", "exp", 1},
        {"Erf", "erf", 1},         {"Gelu", "gelu", 1},       {"SiLU", "silu", 2},
        {"HardSwish", "hardswish", 1}, {"Softplus", "softplus", 1}};
    for (size_t i = 0; i < sizeof kUnary / sizeof kUnary[0]; ++i)
      add_unary(&l, kUnary[i].op, kUnary[i].name, kUnary[i].flops);
  }
  if (suites & BENCH_SUITE_REDUCE) {
    add_reduce(&l, BENCH_REDUCE_SUM, "reduce_sum", 8, 512, 1024, 2);
    add_reduce(&l, BENCH_REDUCE_SUM, "reduce_sum", 8, 512, 1024, 1);
    add_reduce(&l, BENCH_REDUCE_MEAN, "reduce_mean", 8, 512, 1024, 2);
    add_reduce(&l, BENCH_REDUCE_MEAN, "reduce_mean", 8, 512, 1024, 1);
  }
  if (suites & BENCH_SUITE_SOFTMAX) {
    add_2d(&l, "softmax", BENCH_SOFTMAX, "softmax", 8192, 1000, 5, 8);
    add_2d(&l, "softmax", BENCH_SOFTMAX, "softmax", 65536, 128, 5, 8);
  }
  if (suites & BENCH_SUITE_LAYERNORM) {
    add_2d(&l, "layernorm", BENCH_LAYERNORM, "layernorm", 128, 768, 8, 8);
    add_2d(&l, "layernorm", BENCH_LAYERNORM, "layernorm", 128, 1024, 8, 8);
  }
  if (suites & BENCH_SUITE_POOL)
    for (size_t i = 0; i < sizeof kPools / sizeof kPools[0]; ++i) add_pool(&l, i);
  if (l.oom) {
    free(l.v);
    *out_n = 0;
    return NULL;
  }
  if (!l.v) l.v = malloc(sizeof(bench_case_t)); /* empty but non-NULL */
  *out_n = l.n;
  return l.v;
}

/* ---- graphs -------------------------------------------------------------- */

void bench_fill(float* p, int64_t n, uint32_t seed) {
  for (int64_t i = 0; i < n; ++i) {
    seed = seed * 1664525u + 1013904223u;
    p[i] = (float)((seed >> 8) & 0xffff) / 65536.0f - 0.5f;
  }
}

static kiln_status_t input(kiln_graph_t* g, const char* name, int32_t rank, const int64_t* dims) {
  kiln_shape_t sh = kiln_shape_make(rank, dims);
  return kiln_graph_add_input(g, name, KILN_DTYPE_F32, &sh, NULL);
}

static kiln_status_t weight(kiln_graph_t* g, const char* name, int32_t rank, const int64_t* dims,
                            uint32_t seed) {
  kiln_shape_t sh = kiln_shape_make(rank, dims);
  kiln_array_t a;
  KILN_RETURN_IF_ERROR(kiln_array_alloc(kiln_allocator_system(), KILN_DTYPE_F32, &sh, &a));
  bench_fill(a.data, kiln_array_numel(&a), seed);
  kiln_status_t s = kiln_graph_add_initializer(g, name, &a, NULL);
  kiln_array_free(kiln_allocator_system(), &a); /* no-op when the graph took it */
  return s;
}

static kiln_status_t axes_const(kiln_graph_t* g, const char* name, int64_t axis) {
  int64_t one = 1;
  kiln_shape_t sh = kiln_shape_make(1, &one);
  kiln_array_t a;
  KILN_RETURN_IF_ERROR(kiln_array_alloc(kiln_allocator_system(), KILN_DTYPE_I64, &sh, &a));
  ((int64_t*)a.data)[0] = axis;
  kiln_status_t s = kiln_graph_add_initializer(g, name, &a, NULL);
  kiln_array_free(kiln_allocator_system(), &a);
  return s;
}

static kiln_status_t build(const bench_case_t* c, kiln_graph_t* g) {
  /* Gelu is an ONNX op from opset 20 */
  KILN_RETURN_IF_ERROR(kiln_graph_set_opset(g, "", c->kind == BENCH_UNARY ? 20 : 17));
  const int64_t* p = c->p;
  const char* y[1] = {"Y"};
  switch (c->kind) {
    case BENCH_GEMM: {
      int64_t a[2] = {p[0], p[1]}, b[2] = {p[3] ? p[2] : p[1], p[3] ? p[1] : p[2]}, cb[1] = {p[2]};
      KILN_RETURN_IF_ERROR(input(g, "A", 2, a));
      KILN_RETURN_IF_ERROR(weight(g, "B", 2, b, 2));
      const char* in[3] = {"A", "B", "C"};
      if (!p[3] && !p[4]) {
        KILN_RETURN_IF_ERROR(kiln_graph_add_node(g, "MatMul", "matmul", 2, in, 1, y, 0, NULL, NULL));
        break;
      }
      if (p[4]) KILN_RETURN_IF_ERROR(weight(g, "C", 1, cb, 4));
      kiln_attr_t at[1] = {kiln_attr_make_int("transB", p[3])};
      const char* h[1] = {"H"};
      KILN_RETURN_IF_ERROR(kiln_graph_add_node(g, "Gemm", "gemm", p[4] ? 3 : 2, in, 1, p[4] ? h : y, 1, at, NULL));
      if (p[4]) KILN_RETURN_IF_ERROR(kiln_graph_add_node(g, "Relu", "relu", 1, h, 1, y, 0, NULL, NULL));
      break;
    }
    case BENCH_CONV: {
      int64_t x[4] = {1, p[0], p[1], p[2]}, w[4] = {p[3], p[0] / p[7], p[4], p[4]};
      KILN_RETURN_IF_ERROR(input(g, "X", 4, x));
      KILN_RETURN_IF_ERROR(weight(g, "W", 4, w, 3));
      int64_t ks[2] = {p[4], p[4]}, st[2] = {p[5], p[5]}, pads[4] = {p[6], p[6], p[6], p[6]};
      kiln_attr_t at[4] = {kiln_attr_make_ints("kernel_shape", 2, ks), kiln_attr_make_ints("strides", 2, st),
                           kiln_attr_make_ints("pads", 4, pads), kiln_attr_make_int("group", p[7])};
      const char* in[2] = {"X", "W"};
      KILN_RETURN_IF_ERROR(kiln_graph_add_node(g, "Conv", "conv", 2, in, 1, y, 4, at, NULL));
      break;
    }
    case BENCH_ADD:
    case BENCH_RELU:
    case BENCH_MUL_BCAST: {
      int64_t a[2] = {p[0], p[1]}, b[1] = {p[1]};
      KILN_RETURN_IF_ERROR(input(g, "A", 2, a));
      const char* in[2] = {"A", "B"};
      if (c->kind == BENCH_ADD) KILN_RETURN_IF_ERROR(input(g, "B", 2, a));
      if (c->kind == BENCH_MUL_BCAST) KILN_RETURN_IF_ERROR(input(g, "B", 1, b));
      const char* op = c->kind == BENCH_ADD ? "Add" : c->kind == BENCH_RELU ? "Relu" : "Mul";
      KILN_RETURN_IF_ERROR(kiln_graph_add_node(g, op, "ew", c->kind == BENCH_RELU ? 1 : 2, in, 1,
                                               y, 0, NULL, NULL));
      break;
    }
    case BENCH_UNARY: {
      int64_t a[2] = {p[0], p[1]};
      KILN_RETURN_IF_ERROR(input(g, "A", 2, a));
      const char* in[2] = {"A", "S"};
      if (strcmp(c->op, "SiLU") == 0) {
        const char* s[1] = {"S"};
        KILN_RETURN_IF_ERROR(kiln_graph_add_node(g, "Sigmoid", "sigmoid", 1, in, 1, s, 0, NULL, NULL));
        KILN_RETURN_IF_ERROR(kiln_graph_add_node(g, "Mul", "mul", 2, in, 1, y, 0, NULL, NULL));
      } else {
        KILN_RETURN_IF_ERROR(kiln_graph_add_node(g, c->op, "act", 1, in, 1, y, 0, NULL, NULL));
      }
      break;
    }
    case BENCH_REDUCE_SUM:
    case BENCH_REDUCE_MEAN: {
      int64_t x[3] = {p[0], p[1], p[2]};
      KILN_RETURN_IF_ERROR(input(g, "X", 3, x));
      if (c->kind == BENCH_REDUCE_SUM) {
        /* opset 13+: axes is an input */
        KILN_RETURN_IF_ERROR(axes_const(g, "axes", p[3]));
        const char* in[2] = {"X", "axes"};
        KILN_RETURN_IF_ERROR(
            kiln_graph_add_node(g, "ReduceSum", "reduce", 2, in, 1, y, 0, NULL, NULL));
      } else {
        /* opset < 18: axes is an attribute */
        kiln_attr_t at[1] = {kiln_attr_make_ints("axes", 1, &p[3])};
        const char* in[1] = {"X"};
        KILN_RETURN_IF_ERROR(
            kiln_graph_add_node(g, "ReduceMean", "reduce", 1, in, 1, y, 1, at, NULL));
      }
      break;
    }
    case BENCH_SOFTMAX: {
      int64_t x[2] = {p[0], p[1]};
      KILN_RETURN_IF_ERROR(input(g, "X", 2, x));
      const char* in[1] = {"X"};
      KILN_RETURN_IF_ERROR(kiln_graph_add_node(g, "Softmax", "softmax", 1, in, 1, y, 0, NULL, NULL));
      break;
    }
    case BENCH_LAYERNORM: {
      int64_t x[2] = {p[0], p[1]}, w[1] = {p[1]};
      KILN_RETURN_IF_ERROR(input(g, "X", 2, x));
      KILN_RETURN_IF_ERROR(weight(g, "scale", 1, w, 4));
      KILN_RETURN_IF_ERROR(weight(g, "bias", 1, w, 5));
      const char* in[3] = {"X", "scale", "bias"};
      kiln_attr_t at[1] = {kiln_attr_make_int("axis", -1)};
      KILN_RETURN_IF_ERROR(
          kiln_graph_add_node(g, "LayerNormalization", "layernorm", 3, in, 1, y, 1, at, NULL));
      break;
    }
    case BENCH_POOL: {
      int64_t x[4] = {1, p[0], p[1], p[2]};
      KILN_RETURN_IF_ERROR(input(g, "X", 4, x));
      const char* in[1] = {"X"};
      int64_t ks[2] = {p[3], p[3]}, st[2] = {p[4], p[4]}, pads[4] = {p[5], p[5], p[5], p[5]};
      kiln_attr_t at[4] = {kiln_attr_make_ints("kernel_shape", 2, ks), kiln_attr_make_ints("strides", 2, st),
                           kiln_attr_make_ints("pads", 4, pads), kiln_attr_make_int("count_include_pad", 1)};
      const bool global = !strcmp(c->op, "GlobalAveragePool");
      const int32_t n_at = global ? 0 : !strcmp(c->op, "AveragePool") ? 4 : 3;
      KILN_RETURN_IF_ERROR(kiln_graph_add_node(g, c->op, "pool", 1, in, 1, y, n_at, n_at ? at : NULL, NULL));
      break;
    }
  }
  KILN_RETURN_IF_ERROR(kiln_graph_add_output(g, "Y"));
  return kiln_graph_prepare(g);
}

kiln_status_t bench_build_graph(const bench_case_t* c, kiln_graph_t** out) {
  kiln_graph_t* g = NULL;
  KILN_RETURN_IF_ERROR(kiln_graph_create(kiln_allocator_system(), &g));
  kiln_status_t s = build(c, g);
  if (s) {
    kiln_graph_destroy(g);
    return s;
  }
  *out = g;
  return NULL;
}

double bench_graph_bytes(const kiln_graph_t* g) {
  double bytes = 0;
  for (int32_t ti = 0; ti < g->n_tensors; ++ti) {
    const kiln_tensor_t* t = &g->tensors[ti];
    bool used = false, out = false;
    for (int32_t ni = 0; ni < g->n_nodes && !used; ++ni)
      for (int32_t j = 0; j < g->nodes[ni].n_inputs; ++j) used |= g->nodes[ni].inputs[j] == ti;
    for (int32_t j = 0; j < g->n_outputs; ++j) out |= g->outputs[j] == ti;
    if (!((used && t->producer < 0) || out)) continue;
    if (kiln_shape_is_static(&t->shape))
      bytes += (double)kiln_shape_count(&t->shape) * (double)kiln_dtype_size(t->dtype);
  }
  return bytes;
}
