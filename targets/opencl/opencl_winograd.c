/* Winograd F(2x2, 3x3) and F(4x4, 3x3) instances of the conv template for the OpenCL
 * target (kernels/opencl/winograd.cl): its tiles and launch and the
 * printed instance (which convs it covers, where it wins and the weight
 * transform are lowering's: lowering/template.h, template_weights.c). */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "targets/opencl/opencl_internal.h"

int64_t kiln_opencl_wino_ntiles(const kiln_template_conv_t* c, int32_t f) {
  if (f != 4) return kiln_template_winograd_tiles(c);
  return ((c->oh + 3) / 4) * (((c->ow + 3) / 4 + 3) / 4 * 4);
}

/* F(4x4)'s private partial sums are 36 x TM x TN floats, F(2x2)'s 16:
 * both within 16 x 512 (winograd.cl's budget, opencl_tune.c's bound). */
#define WINO_PRIVATE_MAX (16 * 512)

const char* kiln_opencl_wino_tiles_check(const kiln_opencl_wino_tiles_t* t) {
  if (t->tm < 1 || t->wx < 1 || t->wy < 1 || t->cb < 1) return "tiles below 1";
  if (!(t->tn == 1 || t->tn == 2 || t->tn == 4 || t->tn == 8 || t->tn == 16) || t->tn * t->wx % 4)
    return "tn must be 1, 2, 4, 8 or 16 and tn x wx a multiple of 4";
  if (t->f != 2 && t->f != 4) return "f must be 2 (F(2x2, 3x3)) or 4 (F(4x4, 3x3))";
  if ((int64_t)t->tm * t->tn * (t->f == 4 ? 36 : 16) > WINO_PRIVATE_MAX)
    return "tm x tn accumulators past the private budget";
  return NULL;
}

kiln_opencl_wino_tiles_t kiln_opencl_wino_tiles_for(const kiln_template_conv_t* c, int32_t f) {
  /* PoCL (AVX-512): F(2x2) 16 channels x 16 tiles (one float16) per item,
   * 4 items a group, 32 channels a slice were the best of the tiles tried
   * on ResNet-18's 3x3 shapes; large private tiles suit a CPU, not a
   * GPU's register file (tune with the variable below). F(4x4) keeps 36
   * partial sums per channel and tile: 16 channels x 8 tiles, 16 channels
   * a slice (ResNet-18 on PoCL, kernel ms a run of layer1 / layer2 /
   * layer3 / layer4.1.conv1: 1.44 / 1.30 / 2.31 / 5.07 against 1.39 /
   * 1.71 / 2.39 / 7.17 for 8 x 16 and 1.60 / 1.92 / 2.60 / 9.96 for 8 x
   * 16 with 32 channels a slice) */
  kiln_opencl_wino_tiles_t t = {.tm = 16, .tn = 16, .wx = 1, .wy = 4, .cb = 32, .f = 2};
  if (f == 4) t = (kiln_opencl_wino_tiles_t){.tm = 16, .tn = 8, .wx = 1, .wy = 4, .cb = 16, .f = 4};
  const int64_t tiles = kiln_opencl_wino_ntiles(c, t.f);
  while (t.tn > 4 && t.tn / 2 >= tiles) t.tn /= 2;
  while (t.wy > 1 && (int64_t)t.tm * t.wy / 2 >= c->M) t.wy /= 2;
  if (c->C < t.cb) t.cb = (int32_t)((c->C + 7) / 8 * 8);
  return t;
}

/* F(4x4) where it measured faster than F(2x2) on PoCL: f32 planes of 28 x
 * 28 and more (ResNet-18, kernel ms a run, F(2x2) -> F(4x4): 56x56 1.75 ->
 * 1.44, 28x28 1.72 -> 1.30; but 14x14 2.14 -> 2.31 and 7x7 3.66 -> 5.07,
 * where a row of 4 tiles pads to whole groups of four: 7x7 computes 2 x 4
 * tiles for 2 x 2). f16 buffers keep F(2x2): F(4x4) reads and writes them
 * element by element (not measured faster; it would add its kernels to the
 * fp16 cold start, 19.9 s of the 20 s goal). */
static bool f4_wins(const kiln_template_conv_t* c) {
  for (int32_t j = 0; j < c->n_params && j < KILN_TEMPLATE_CONV_MAX_PARAMS; ++j)
    if (c->f16[j]) return false;
  return c->oh >= 28 && c->ow >= 28;
}

kiln_opencl_wino_tiles_t kiln_opencl_wino_default_tiles(const kiln_template_conv_t* c, bool gpu,
                                                        const kiln_template_limits_t* lim) {
  const char* mode = getenv("KILN_OPENCL_WINOGRAD");
  /* a GPU keeps F(2x2) unless asked: F(4x4)'s 36 sums a channel and tile
   * crowd its registers (not measured) */
  const bool f4 = mode && !strcmp(mode, "f4") ? true : mode && !strcmp(mode, "f2") ? false : !gpu && f4_wins(c);
  kiln_opencl_wino_tiles_t t = gpu ? kiln_opencl_wino_gpu_tiles(c, f4 ? 4 : 2, lim) : kiln_opencl_wino_tiles_for(c, f4 ? 4 : 2);
  const char* env = getenv("KILN_OPENCL_WINO_TILES");
  if (env && env[0]) {
    kiln_opencl_wino_tiles_t o = {.f = t.f};
    const int n = sscanf(env, "%d,%d,%d,%d,%d,%d", &o.tm, &o.tn, &o.wx, &o.wy, &o.cb, &o.f);
    if ((n == 5 || n == 6) && !kiln_opencl_wino_tiles_check(&o)) t = o;
  }
  return t;
}

void kiln_opencl_wino_launch(const kiln_template_conv_t* c, const kiln_opencl_wino_tiles_t* t, int64_t groups[3],
                             int64_t local[3]) {
  const int64_t tiles = kiln_opencl_wino_ntiles(c, t->f);
  const int64_t bt = (int64_t)t->tn * t->wx, bm = (int64_t)t->tm * t->wy;
  groups[0] = (tiles + bt - 1) / bt;
  groups[1] = (c->M + bm - 1) / bm;
  groups[2] = c->batch > 0 ? c->batch : 1;
  local[0] = t->wx;
  local[1] = t->wy;
  local[2] = 1;
}

static const char* const macro_names[] = {"KILN_WINO_NAME", "KILN_WINO_SIGNATURE", "KW_EPI", "KW_EPI_PRE", "CM", "CC",
                                          "CPLANE", "CQ2", "CHO", "CWO", "CBATCH", "CHAS_BIAS", "CW_F16",
                                          "CX_F16", "CC_F16", "CY_F16", "TM", "TN", "WX", "WY", "CB", "CRT", "CF4", "CU0"};

kiln_status_t kiln_opencl_wino_print(const kiln_template_conv_t* c, const kiln_opencl_wino_tiles_t* t,
                                     const char* name, kiln_cf_out_t* out) {
  return kiln_opencl_wino_print_ks(c, t, name, NULL, out);
}

/* winograd.cl's run-time shapes (its KW_RT_DECL order, the epilogue's
 * strides from slot 6): false when a value does not fit an int. */
static bool wino_ks(const kiln_template_conv_t* c, kiln_opencl_ks_t* ks) {
  const int64_t v[6] = {c->M, c->C, c->plane, c->q2, c->oh, c->ow};
  bool fits = true;
  int32_t n = 0;
  for (int i = 0; i < 6; ++i) {
    fits &= v[i] >= 0 && v[i] <= INT32_MAX;
    ks->v[n++] = (int32_t)v[i];
  }
  for (int32_t i = 0; i < c->epi.n_operands; ++i) {
    fits &= c->epi.operands[i].sn <= INT32_MAX && c->epi.operands[i].sm <= INT32_MAX;
    ks->v[n++] = (int32_t)c->epi.operands[i].sn;
    ks->v[n++] = (int32_t)c->epi.operands[i].sm;
  }
  ks->n = fits ? n : 0;
  return fits;
}

kiln_status_t kiln_opencl_wino_print_ks(const kiln_template_conv_t* c, const kiln_opencl_wino_tiles_t* t,
                                        const char* name, kiln_opencl_ks_t* ks, kiln_cf_out_t* out) {
  const char* bad = kiln_opencl_wino_tiles_check(t);
  if (bad)
    return kiln_make_status(KILN_INVALID_ARGUMENT, "opencl winograd '%s': bad tiles tm %d tn %d f %d: %s", name,
                            t->tm, t->tn, t->f, bad);
  if (!kiln_template_winograd_covers(c))
    return kiln_make_status(KILN_INVALID_ARGUMENT, "opencl winograd '%s': not a 3x3 stride-1 conv", name);
  const bool rt = ks && wino_ks(c, ks);
  const int f = t->f == 4 ? 4 : 2;
  if (rt)
    kiln_cf_out_printf(out, "/* kiln winograd F(%dx%d,3x3) template, run-time shapes */\n", f, f);
  else
    kiln_cf_out_printf(out, "/* kiln winograd F(%dx%d,3x3) template: %lld -> %lld channels, %lld x %lld */\n", f,
                       f, (long long)c->C, (long long)c->M, (long long)c->oh, (long long)c->ow);
  kiln_cf_out_printf(out, "#define KILN_WINO_NAME %s\n#define KILN_WINO_SIGNATURE ", name);
  kiln_opencl_conv_print_params(c, rt, out);
  kiln_opencl_conv_epi_print(c, "KW_EPI", rt ? 6 : -1, out);
  kiln_opencl_conv_print_f16_flags(c, out);
  if (!rt)
    kiln_cf_out_printf(out, "#define CM %lld\n#define CC %lld\n#define CPLANE %lld\n#define CQ2 %lld\n"
                       "#define CHO %lld\n#define CWO %lld\n#define CBATCH %lld\n",
                       (long long)c->M, (long long)c->C, (long long)c->plane, (long long)c->q2, (long long)c->oh,
                       (long long)c->ow, (long long)c->batch);
  kiln_cf_out_printf(out,
                     "#define CRT %d\n#define CHAS_BIAS %d\n#define TM %d\n#define TN %d\n#define WX %d\n"
                     "#define WY %d\n#define CB %d\n#define CF4 %d\n#define CU0 %d\n",
                     rt ? 1 : 0, c->has_bias ? 1 : 0, t->tm, t->tn, t->wx, t->wy, t->cb, f == 4 ? 1 : 0,
                     f == 4 ? KILN_TEMPLATE_WINO4_SIZES : 0);
  kiln_cf_out_puts(out, kiln_cl_winograd);
  for (size_t i = 0; i < sizeof macro_names / sizeof macro_names[0]; ++i)
    kiln_cf_out_printf(out, "#undef %s\n", macro_names[i]);
  kiln_cf_out_puts(out, "\n");
  return NULL;
}
