/* An example kiln plugin (include/kiln/custom_op.h), domain com.kiln.example:
 *
 *   FusedConvBNReLU(X, W, B?, scale, bias, mean, var) = Relu(BatchNorm(Conv(X, W, B)))
 *     2-D NCHW convolution (strides, pads, dilations, group) followed by
 *     inference BatchNormalization (epsilon) and Relu, f32; registered with
 *     the pattern Conv -> BatchNormalization -> Relu, so models that hold
 *     the chain get the fused op without being edited.
 *   ScaledSwish(X) = X * sigmoid(beta * X), f32 or f16 (computed in f32).
 *
 *   FusedConvBNAddReLU(X, W, B?, scale, bias, mean, var, skip)
 *     = Relu(BatchNorm(Conv(X, W, B)) + skip), a residual block's tail, with
 *     a pattern that is a graph, not a chain (the Add reads two tensors).
 *   ScaledSwishFn: ScaledSwish with its CPU kernel as a C function (cpu_fn).
 *
 * All store through KILN_EPILOGUE0, so kiln fuses a Relu, LeakyRelu,
 * Sigmoid or Tanh that follows either of them into its kernel.
 *
 * Each op has its reference kernel (the oracle kiln's reference executor
 * runs) and a kernel for the CPU, OpenCL and Vulkan targets. The kernels
 * are one element computation (CBR_ELEMENT, SWISH_ELEMENT) written in the C
 * subset the three languages share, wrapped per target in its loop or its
 * work-item index.
 *
 * Build: cc -shared -fPIC -I<kiln>/include example_plugin.c -o libkiln_example.so -lm
 * Use:   kiln run model.onnx --plugin ./libkiln_example.so --target opencl
 */
#include <math.h>
#include <stdio.h>
#include <string.h>

#include "kiln/custom_op.h"

#define DOMAIN "com.kiln.example"

static int fail(kiln_custom_ctx_t* c, const char* msg) {
  if (c->error) snprintf(c->error, c->error_cap, "%s", msg);
  return 1;
}

static const kiln_custom_attr_t* attr(const kiln_custom_ctx_t* c, const char* name) {
  for (int32_t i = 0; i < c->n_attrs; ++i)
    if (!strcmp(c->attrs[i].name, name)) return &c->attrs[i];
  return NULL;
}

/* ---- FusedConvBNReLU -------------------------------------------------- */

typedef struct {
  int64_t sh, sw, pt, pl, pb, pr, dh, dw, group;
  float eps;
} conv_t;

static int conv_params(const kiln_custom_ctx_t* c, conv_t* p) {
  const kiln_custom_attr_t* s = attr(c, "strides");
  const kiln_custom_attr_t* pd = attr(c, "pads");
  const kiln_custom_attr_t* d = attr(c, "dilations");
  *p = (conv_t){1, 1, 0, 0, 0, 0, 1, 1, attr(c, "group")->i, attr(c, "epsilon")->f};
  if (s->count >= 0 && s->count != 2) return 0;
  if (pd->count >= 0 && pd->count != 4) return 0;
  if (d->count >= 0 && d->count != 2) return 0;
  if (s->count == 2) p->sh = s->ints[0], p->sw = s->ints[1];
  if (pd->count == 4) p->pt = pd->ints[0], p->pl = pd->ints[1], p->pb = pd->ints[2], p->pr = pd->ints[3];
  if (d->count == 2) p->dh = d->ints[0], p->dw = d->ints[1];
  return p->sh > 0 && p->sw > 0 && p->dh > 0 && p->dw > 0 && p->pt >= 0 && p->pl >= 0 && p->pb >= 0 &&
         p->pr >= 0 && p->group > 0;
}

static int cbr_shape(kiln_custom_ctx_t* c) {
  const kiln_custom_tensor_t *x = &c->in[0], *w = &c->in[1];
  if (x->rank != 4 || w->rank != 4) return fail(c, "X and W must be 4-D (NCHW, OIHW)");
  conv_t p;
  if (!conv_params(c, &p)) return fail(c, "strides/dilations need 2 positive values, pads 4, group > 0");
  for (int i = 3; i < 7; ++i)
    if (c->in[i].rank != 1 || (w->dims[0] >= 0 && c->in[i].dims[0] >= 0 && c->in[i].dims[0] != w->dims[0]))
      return fail(c, "scale, bias, mean and var must be 1-D of W's output channels");
  if (x->dims[1] >= 0 && w->dims[1] >= 0 && x->dims[1] != w->dims[1] * p.group)
    return fail(c, "X's channels are not W's input channels x group");
  if (w->dims[0] >= 0 && w->dims[0] % p.group) return fail(c, "W's output channels are not a multiple of group");
  kiln_custom_tensor_t* y = &c->out[0];
  y->dtype = KILN_DTYPE_F32;
  y->rank = 4;
  y->dims[0] = x->dims[0];
  y->dims[1] = w->dims[0];
  for (int a = 0; a < 2; ++a) {
    const int64_t in = x->dims[2 + a], k = w->dims[2 + a];
    const int64_t s = a ? p.sw : p.sh, d = a ? p.dw : p.dh, pad = a ? p.pl + p.pr : p.pt + p.pb;
    if (in < 0 || k < 0) {
      y->dims[2 + a] = -1;
      continue;
    }
    const int64_t span = (k - 1) * d + 1;
    if (in + pad < span) return fail(c, "the kernel is larger than the padded input");
    y->dims[2 + a] = (in + pad - span) / s + 1;
  }
  return 0;
}

/* Relu(BN(Conv)), and with |skip| Relu(BN(Conv) + skip). */
static int cbr_compute(kiln_custom_ctx_t* c, const float* skip) {
  conv_t p;
  if (!conv_params(c, &p)) return fail(c, "bad conv attributes");
  const kiln_custom_tensor_t *x = &c->in[0], *w = &c->in[1], *y = &c->out[0];
  const float *X = x->data, *W = w->data, *B = c->in[2].data;
  const float *scale = c->in[3].data, *bias = c->in[4].data, *mean = c->in[5].data, *var = c->in[6].data;
  float* Y = y->data;
  const int64_t N = x->dims[0], C = x->dims[1], H = x->dims[2], Wd = x->dims[3];
  const int64_t M = w->dims[0], KH = w->dims[2], KW = w->dims[3], OH = y->dims[2], OW = y->dims[3];
  const int64_t cpg = C / p.group, mpg = M / p.group;
  for (int64_t n = 0; n < N; ++n)
    for (int64_t m = 0; m < M; ++m)
      for (int64_t oh = 0; oh < OH; ++oh)
        for (int64_t ow = 0; ow < OW; ++ow) {
          double acc = B ? B[m] : 0.0;
          const int64_t g = m / mpg;
          for (int64_t ic = 0; ic < cpg; ++ic)
            for (int64_t kh = 0; kh < KH; ++kh) {
              const int64_t ih = oh * p.sh - p.pt + kh * p.dh;
              if (ih < 0 || ih >= H) continue;
              for (int64_t kw = 0; kw < KW; ++kw) {
                const int64_t iw = ow * p.sw - p.pl + kw * p.dw;
                if (iw < 0 || iw >= Wd) continue;
                acc += (double)X[((n * C + g * cpg + ic) * H + ih) * Wd + iw] *
                       W[((m * cpg + ic) * KH + kh) * KW + kw];
              }
            }
          const int64_t at = ((n * M + m) * OH + oh) * OW + ow;
          const double v = (acc - mean[m]) * (scale[m] / sqrt((double)var[m] + p.eps)) + bias[m] + (skip ? skip[at] : 0);
          Y[at] = (float)(v > 0 ? v : 0);
        }
  return 0;
}

static int cbr_reference(kiln_custom_ctx_t* c) { return cbr_compute(c, NULL); }

/* The conv geometry from the attribute macros kiln defines. */
#define CBR_PRELUDE                                   \
  "#if KILN_ATTR_strides_COUNT == 2\n"                \
  "#define CBR_SH KILN_ATTR_strides_0\n"              \
  "#define CBR_SW KILN_ATTR_strides_1\n"              \
  "#else\n#define CBR_SH 1\n#define CBR_SW 1\n#endif\n" \
  "#if KILN_ATTR_pads_COUNT == 4\n"                   \
  "#define CBR_PT KILN_ATTR_pads_0\n"                 \
  "#define CBR_PL KILN_ATTR_pads_1\n"                 \
  "#else\n#define CBR_PT 0\n#define CBR_PL 0\n#endif\n" \
  "#if KILN_ATTR_dilations_COUNT == 2\n"              \
  "#define CBR_DH KILN_ATTR_dilations_0\n"            \
  "#define CBR_DW KILN_ATTR_dilations_1\n"            \
  "#else\n#define CBR_DH 1\n#define CBR_DW 1\n#endif\n"
#define CBR_UNDEF \
  "#undef CBR_SH\n#undef CBR_SW\n#undef CBR_PT\n#undef CBR_PL\n#undef CBR_DH\n#undef CBR_DW\n"

/* One output element idx: valid C, OpenCL C and GLSL. */
#define CBR_ELEMENT                                                                            \
  "    int ow = idx % KILN_OUT0_DIM3;\n"                                                      \
  "    int t = idx / KILN_OUT0_DIM3;\n"                                                       \
  "    int oh = t % KILN_OUT0_DIM2;\n"                                                        \
  "    t = t / KILN_OUT0_DIM2;\n"                                                             \
  "    int oc = t % KILN_OUT0_DIM1;\n"                                                        \
  "    int nb = t / KILN_OUT0_DIM1;\n"                                                        \
  "    int cpg = KILN_IN0_DIM1 / KILN_ATTR_group;\n"                                          \
  "    int gi = oc / (KILN_OUT0_DIM1 / KILN_ATTR_group);\n"                                   \
  "    float acc = 0.0f;\n"                                                                   \
  "    for (int ic = 0; ic < cpg; ++ic) {\n"                                                  \
  "      for (int kh = 0; kh < KILN_IN1_DIM2; ++kh) {\n"                                      \
  "        int ih = oh * CBR_SH - CBR_PT + kh * CBR_DH;\n"                                    \
  "        if (ih < 0 || ih >= KILN_IN0_DIM2) continue;\n"                                    \
  "        for (int kw = 0; kw < KILN_IN1_DIM3; ++kw) {\n"                                    \
  "          int iw = ow * CBR_SW - CBR_PL + kw * CBR_DW;\n"                                  \
  "          if (iw < 0 || iw >= KILN_IN0_DIM3) continue;\n"                                  \
  "          acc += in0[((nb * KILN_IN0_DIM1 + gi * cpg + ic) * KILN_IN0_DIM2 + ih) * KILN_IN0_DIM3 + iw] *\n" \
  "                 in1[((oc * cpg + ic) * KILN_IN1_DIM2 + kh) * KILN_IN1_DIM3 + kw];\n"      \
  "        }\n"                                                                               \
  "      }\n"                                                                                 \
  "    }\n"                                                                                   \
  "#if KILN_IN2_PRESENT\n"                                                                    \
  "    acc += in2[oc];\n"                                                                     \
  "#endif\n"                                                                                  \
  "    float v = (acc - in5[oc]) * (in3[oc] / sqrt(in6[oc] + KILN_ATTR_epsilon)) + in4[oc];\n" \
  "#if KILN_IN7_PRESENT\n" /* FusedConvBNAddReLU's skip */                                      \
  "    v += in7[idx];\n"                                                                        \
  "#endif\n"                                                                                   \
  "    out0[idx] = KILN_EPILOGUE0(v > 0.0f ? v : 0.0f);\n"

static const char cbr_cpu[] = CBR_PRELUDE
    "#pragma omp parallel for\n"
    "for (int idx = 0; idx < KILN_OUT0_SIZE; ++idx) {\n" CBR_ELEMENT "}\n" CBR_UNDEF;
static const char cbr_opencl[] = CBR_PRELUDE
    "int idx = (int)get_global_id(0);\n"
    "if (idx < KILN_OUT0_SIZE) {\n" CBR_ELEMENT "}\n" CBR_UNDEF;
static const char cbr_glsl[] = CBR_PRELUDE
    "int idx = int(gl_GlobalInvocationID.x);\n"
    "if (idx < KILN_OUT0_SIZE) {\n" CBR_ELEMENT "}\n" CBR_UNDEF;

#define F32 KILN_CUSTOM_DTYPE(KILN_DTYPE_F32)
static const kiln_custom_io_t cbr_inputs[] = {
    {"X", F32, 0}, {"W", F32, 0}, {"B", F32, 1}, {"scale", F32, 0}, {"bias", F32, 0}, {"mean", F32, 0}, {"var", F32, 0},
};
static const kiln_custom_io_t cbr_outputs[] = {{"Y", F32, 0}};
/* kernel_shape and momentum are declared so the pattern may match nodes
 * that carry them: the kernel reads its size from W, and momentum only
 * matters in training. */
static const kiln_custom_attr_decl_t cbr_attrs[] = {
    {"strides", KILN_CUSTOM_ATTR_INTS, 0, 0, 0},    {"pads", KILN_CUSTOM_ATTR_INTS, 0, 0, 0},
    {"dilations", KILN_CUSTOM_ATTR_INTS, 0, 0, 0},  {"kernel_shape", KILN_CUSTOM_ATTR_INTS, 0, 0, 0},
    {"group", KILN_CUSTOM_ATTR_INT, 0, 1, 0},       {"epsilon", KILN_CUSTOM_ATTR_FLOAT, 0, 0, 1e-5f},
    {"momentum", KILN_CUSTOM_ATTR_FLOAT, 0, 0, 0.9f},
};

static const kiln_custom_op_t cbr_op = {
    .api_version = KILN_CUSTOM_OP_API_VERSION,
    .domain = DOMAIN,
    .name = "FusedConvBNReLU",
    .since_version = 1,
    .version = 1,
    .n_inputs = 7,
    .n_outputs = 1,
    .inputs = cbr_inputs,
    .outputs = cbr_outputs,
    .n_attrs = 7,
    .attrs = cbr_attrs,
    .shape = cbr_shape,
    .reference = cbr_reference,
    .cpu = {cbr_cpu, NULL},
    .opencl = {cbr_opencl, NULL},
    .glsl = {cbr_glsl, NULL},
    .epilogue = 1,
};

static const char* const cbr_chain[] = {"Conv", "BatchNormalization", "Relu"};
static const int32_t cbr_slots[] = {3, 4, 0}; /* X W B | scale bias mean var | - */
static const kiln_custom_pattern_t cbr_pattern = {.api_version = KILN_CUSTOM_OP_API_VERSION, .domain = DOMAIN,
                                                  .name = "FusedConvBNReLU", .n_nodes = 3, .ops = cbr_chain,
                                                  .slots = cbr_slots};

/* ---- FusedConvBNAddReLU: a residual block's tail ---------------------------
 *
 * Relu(BN(Conv(X, W, B)) + skip): the same kernels with the skip added
 * (KILN_IN7_PRESENT), and a pattern that is not a chain (API version 2):
 * the Add has two graph inputs, the BatchNormalization's output and the
 * skip, in either order (two patterns). */
static int cbra_shape(kiln_custom_ctx_t* c) {
  if (cbr_shape(c)) return 1;
  const kiln_custom_tensor_t *s = &c->in[7], *y = &c->out[0];
  if (s->dtype != KILN_DTYPE_F32 || s->rank != 4) return fail(c, "skip must be 4-D f32");
  for (int d = 0; d < 4; ++d)
    if (s->dims[d] >= 0 && y->dims[d] >= 0 && s->dims[d] != y->dims[d])
      return fail(c, "skip must have Y's shape (no broadcasting)");
  return 0;
}

static int cbra_reference(kiln_custom_ctx_t* c) { return cbr_compute(c, c->in[7].data); }

static const kiln_custom_io_t cbra_inputs[] = {
    {"X", F32, 0},    {"W", F32, 0},   {"B", F32, 1}, {"scale", F32, 0},
    {"bias", F32, 0}, {"mean", F32, 0}, {"var", F32, 0}, {"skip", F32, 0},
};

static const kiln_custom_op_t cbra_op = {
    .api_version = KILN_CUSTOM_OP_API_VERSION,
    .domain = DOMAIN,
    .name = "FusedConvBNAddReLU",
    .since_version = 1,
    .version = 1,
    .n_inputs = 8,
    .n_outputs = 1,
    .inputs = cbra_inputs,
    .outputs = cbr_outputs,
    .n_attrs = 7,
    .attrs = cbr_attrs,
    .shape = cbra_shape,
    .reference = cbra_reference,
    .cpu = {cbr_cpu, NULL},
    .opencl = {cbr_opencl, NULL},
    .glsl = {cbr_glsl, NULL},
    .epilogue = 1,
};

static const char* const cbra_ops[] = {"Conv", "BatchNormalization", "Add", "Relu"};
#define S KILN_PATTERN_SLOT
#define N KILN_PATTERN_NODE
static const int32_t cbra_conv[] = {S(0), S(1), S(2)};
static const int32_t cbra_bn[] = {N(0), S(3), S(4), S(5), S(6)};
static const int32_t cbra_add_bn_skip[] = {N(1), S(7)};
static const int32_t cbra_add_skip_bn[] = {S(7), N(1)};
static const int32_t cbra_relu[] = {N(2)};
#undef S
#undef N
static const int32_t cbra_counts[] = {3, 5, 2, 1};
static const int32_t* const cbra_inputs_a[] = {cbra_conv, cbra_bn, cbra_add_bn_skip, cbra_relu};
static const int32_t* const cbra_inputs_b[] = {cbra_conv, cbra_bn, cbra_add_skip_bn, cbra_relu};
static const kiln_custom_pattern_t cbra_patterns[2] = {
    {.api_version = KILN_CUSTOM_OP_API_VERSION, .domain = DOMAIN, .name = "FusedConvBNAddReLU", .n_nodes = 4,
     .ops = cbra_ops, .inputs = cbra_inputs_a, .n_node_inputs = cbra_counts},
    {.api_version = KILN_CUSTOM_OP_API_VERSION, .domain = DOMAIN, .name = "FusedConvBNAddReLU", .n_nodes = 4,
     .ops = cbra_ops, .inputs = cbra_inputs_b, .n_node_inputs = cbra_counts},
};

/* ---- ScaledSwish -------------------------------------------------------- */

static float h2f(uint16_t h) {
  const uint32_t s = (uint32_t)(h >> 15) << 31, e = (h >> 10) & 31, m = h & 1023;
  uint32_t b;
  if (e == 31) b = s | 0x7f800000u | (m << 13);
  else if (e) b = s | ((e + 112) << 23) | (m << 13);
  else if (!m) b = s;
  else {
    float f = ldexpf((float)m, -24);
    return s ? -f : f;
  }
  float f;
  memcpy(&f, &b, 4);
  return f;
}

static uint16_t f2h(float f) { /* round to nearest even, like the kernels' conversions */
  uint32_t b;
  memcpy(&b, &f, 4);
  const uint16_t s = (uint16_t)((b >> 16) & 0x8000u);
  const float a = fabsf(f);
  if (isnan(f)) return s | 0x7e00u;
  if (a >= 65520.0f) return s | 0x7c00u;
  if (a < 6.103515625e-05f) return s | (uint16_t)nearbyintf(a * 16777216.0f); /* subnormal */
  int e;
  const float m = frexpf(a, &e); /* a = m 2^e, m in [0.5, 1) */
  uint32_t mant = (uint32_t)nearbyintf(m * 2048.0f) - 1024u; /* 10 bits after the leading 1 */
  int ex = e + 14;
  if (mant == 1024u) mant = 0, ++ex;
  return s | (uint16_t)((uint32_t)ex << 10) | (uint16_t)mant;
}

static int swish_shape(kiln_custom_ctx_t* c) {
  c->out[0] = c->in[0];
  return 0;
}

static int swish_reference(kiln_custom_ctx_t* c) {
  const float beta = attr(c, "beta")->f;
  int64_t n = 1;
  for (int32_t d = 0; d < c->in[0].rank; ++d) n *= c->in[0].dims[d];
  const bool half = c->in[0].dtype == KILN_DTYPE_F16;
  for (int64_t i = 0; i < n; ++i) {
    const float x = half ? h2f(((const uint16_t*)c->in[0].data)[i]) : ((const float*)c->in[0].data)[i];
    const float y = x / (1.0f + expf(-beta * x));
    if (half) ((uint16_t*)c->out[0].data)[i] = f2h(y);
    else ((float*)c->out[0].data)[i] = y;
  }
  return 0;
}

/* LOAD/STORE per dialect and dtype, then one expression for all three. */
static const char swish_cpu[] =
    "#if KILN_IN0_DTYPE == 2\n#define LOAD(i) kiln_h2f(in0[i])\n#define STORE(i, v) out0[i] = kiln_f2h(v)\n"
    "#else\n#define LOAD(i) in0[i]\n#define STORE(i, v) out0[i] = (v)\n#endif\n"
    "#pragma omp parallel for\n"
    "for (long idx = 0; idx < KILN_OUT0_SIZE; ++idx) {\n"
    "  float x = LOAD(idx);\n"
    "  STORE(idx, KILN_EPILOGUE0(x / (1.0f + expf(-KILN_ATTR_beta * x))));\n"
    "}\n#undef LOAD\n#undef STORE\n";
static const char swish_opencl[] =
    "#if KILN_IN0_DTYPE == 2\n#define LOAD(i) vload_half(i, in0)\n#define STORE(i, v) vstore_half_rte(v, i, out0)\n"
    "#else\n#define LOAD(i) in0[i]\n#define STORE(i, v) out0[i] = (v)\n#endif\n"
    "int idx = (int)get_global_id(0);\n"
    "if (idx < KILN_OUT0_SIZE) {\n"
    "  float x = LOAD(idx);\n"
    "  STORE(idx, KILN_EPILOGUE0(x / (1.0f + exp(-KILN_ATTR_beta * x))));\n"
    "}\n#undef LOAD\n#undef STORE\n";
static const char swish_glsl[] =
    "#if KILN_IN0_DTYPE == 2\n#define LOAD(i) float(in0[i])\n#define STORE(i, v) out0[i] = float16_t(v)\n"
    "#else\n#define LOAD(i) in0[i]\n#define STORE(i, v) out0[i] = (v)\n#endif\n"
    "int idx = int(gl_GlobalInvocationID.x);\n"
    "if (idx < KILN_OUT0_SIZE) {\n"
    "  float x = LOAD(idx);\n"
    "  STORE(idx, KILN_EPILOGUE0(x / (1.0f + exp(-KILN_ATTR_beta * x))));\n"
    "}\n";

#define F32_F16 (KILN_CUSTOM_DTYPE(KILN_DTYPE_F32) | KILN_CUSTOM_DTYPE(KILN_DTYPE_F16))
static const kiln_custom_io_t swish_inputs[] = {{"X", F32_F16, 0}};
static const kiln_custom_io_t swish_outputs[] = {{"Y", F32_F16, 0}};
static const kiln_custom_attr_decl_t swish_attrs[] = {{"beta", KILN_CUSTOM_ATTR_FLOAT, 0, 0, 1.0f}};

static const kiln_custom_op_t swish_op = {
    .api_version = KILN_CUSTOM_OP_API_VERSION,
    .domain = DOMAIN,
    .name = "ScaledSwish",
    .since_version = 1,
    .version = 1,
    .n_inputs = 1,
    .n_outputs = 1,
    .inputs = swish_inputs,
    .outputs = swish_outputs,
    .n_attrs = 1,
    .attrs = swish_attrs,
    .shape = swish_shape,
    .reference = swish_reference,
    .cpu = {swish_cpu, NULL},
    .opencl = {swish_opencl, NULL},
    .glsl = {swish_glsl, NULL},
    .epilogue = 1,
};

/* ---- ScaledSwishFn: the CPU kernel as a function -------------------------
 *
 * The same op as ScaledSwish, with its CPU kernel given as a C function
 * (cpu_fn, API version 2) instead of source: what a plugin does when its
 * vendor's kernel is a binary library. kiln's CPU code calls it in-process
 * with the tensors and attributes as the reference kernel gets them; it has
 * no GPU kernel, so an OpenCL or Vulkan session runs it on the CPU
 * (heterogeneous execution). kiln applies a fused epilogue after it. */
__attribute__((unused)) /* in the _nofn build */
static int swish_fn(kiln_custom_ctx_t* c, void* user_data) {
  if (user_data != &swish_op) return fail(c, "wrong user_data"); /* registered below */
  const float beta = attr(c, "beta")->f;
  /* as a vendor library might refuse its input at run time */
  if (!isfinite(beta)) return fail(c, "beta must be finite");
  int64_t n = 1;
  for (int32_t d = 0; d < c->in[0].rank; ++d) n *= c->in[0].dims[d];
  if (c->in[0].dtype == KILN_DTYPE_F16) {
    const uint16_t* x = c->in[0].data;
    uint16_t* y = c->out[0].data;
#pragma omp parallel for
    for (int64_t i = 0; i < n; ++i) {
      const float v = h2f(x[i]);
      y[i] = f2h(v / (1.0f + expf(-beta * v)));
    }
    return 0;
  }
  const float* x = c->in[0].data;
  float* y = c->out[0].data;
#pragma omp parallel for
  for (int64_t i = 0; i < n; ++i) y[i] = x[i] / (1.0f + expf(-beta * x[i]));
  return 0;
}

static const kiln_custom_op_t swish_fn_op = {
    .api_version = KILN_CUSTOM_OP_API_VERSION,
    .domain = DOMAIN,
    .name = "ScaledSwishFn",
    .since_version = 1,
    .version = 1,
    .n_inputs = 1,
    .n_outputs = 1,
    .inputs = swish_inputs,
    .outputs = swish_outputs,
    .n_attrs = 1,
    .attrs = swish_attrs,
    .shape = swish_shape,
    .reference = swish_reference,
    .epilogue = 1,
#ifndef EXAMPLE_NO_CPU_FN
    .cpu_fn = swish_fn,
    .cpu_user_data = (void*)&swish_op,
#else
    /* tests: a build that registers the op with its CPU kernel as source,
     * so a module compiled against the cpu_fn build is refused */
    .cpu = {swish_cpu, NULL},
#endif
};

KILN_PLUGIN_EXPORT int kiln_plugin_register(kiln_plugin_host_t* host) {
  if (host->register_op(host, &cbr_op)) return 1;
  if (host->register_pattern(host, &cbr_pattern)) return 1;
  if (host->register_op(host, &cbra_op)) return 1;
  if (host->register_pattern(host, &cbra_patterns[0]) || host->register_pattern(host, &cbra_patterns[1])) return 1;
  if (host->register_op(host, &swish_op)) return 1;
  return host->register_op(host, &swish_fn_op);
}
