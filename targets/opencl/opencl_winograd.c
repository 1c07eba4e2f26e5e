/* Winograd F(2x2, 3x3) instances of the conv template for the OpenCL
 * target (kernels/opencl/winograd.cl): its tiles and launch and the
 * printed instance (which convs it covers, where it wins and the weight
 * transform are lowering's: lowering/template.h, template_weights.c). */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "targets/opencl/opencl_internal.h"

kiln_opencl_wino_tiles_t kiln_opencl_wino_default_tiles(const kiln_template_conv_t* c) {
  /* PoCL (AVX-512): 16 channels x 16 tiles (one float16) per item, 4 items
   * a group, 32 channels a slice were the best of the tiles tried on
   * ResNet-18's 3x3 shapes; large private tiles suit a CPU, not a GPU's
   * register file (tune with the variable below) */
  kiln_opencl_wino_tiles_t t = {.tm = 16, .tn = 16, .wx = 1, .wy = 4, .cb = 32};
  const int64_t tiles = kiln_template_winograd_tiles(c);
  while (t.tn > 4 && t.tn / 2 >= tiles) t.tn /= 2;
  while (t.wy > 1 && (int64_t)t.tm * t.wy / 2 >= c->M) t.wy /= 2;
  if (c->C < t.cb) t.cb = (int32_t)((c->C + 7) / 8 * 8);
  const char* env = getenv("KILN_OPENCL_WINO_TILES");
  if (env && env[0]) {
    kiln_opencl_wino_tiles_t o;
    if (sscanf(env, "%d,%d,%d,%d,%d", &o.tm, &o.tn, &o.wx, &o.wy, &o.cb) == 5 && o.tm > 0 && o.wx > 0 &&
        o.wy > 0 && o.cb > 0 && (o.tn == 1 || o.tn == 2 || o.tn == 4 || o.tn == 8 || o.tn == 16) &&
        o.tn * o.wx % 4 == 0)
      t = o;
  }
  return t;
}

void kiln_opencl_wino_launch(const kiln_template_conv_t* c, const kiln_opencl_wino_tiles_t* t, int64_t groups[3],
                             int64_t local[3]) {
  const int64_t tiles = kiln_template_winograd_tiles(c);
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
                                          "CX_F16", "CC_F16", "CY_F16", "TM", "TN", "WX", "WY", "CB", "CRT"};

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
  if (t->tm < 1 || t->wx < 1 || t->wy < 1 || t->cb < 1 || t->tn * t->wx % 4 ||
      (t->tn != 1 && t->tn != 2 && t->tn != 4 && t->tn != 8 && t->tn != 16))
    return kiln_make_status(KILN_INVALID_ARGUMENT, "opencl winograd '%s': bad tiles tm %d tn %d", name, t->tm,
                            t->tn);
  if (!kiln_template_winograd_covers(c))
    return kiln_make_status(KILN_INVALID_ARGUMENT, "opencl winograd '%s': not a 3x3 stride-1 conv", name);
  const bool rt = ks && wino_ks(c, ks);
  if (rt)
    kiln_cf_out_puts(out, "/* kiln winograd F(2x2,3x3) template, run-time shapes */\n");
  else
    kiln_cf_out_printf(out, "/* kiln winograd F(2x2,3x3) template: %lld -> %lld channels, %lld x %lld */\n",
                       (long long)c->C, (long long)c->M, (long long)c->oh, (long long)c->ow);
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
                     "#define WY %d\n#define CB %d\n",
                     rt ? 1 : 0, c->has_bias ? 1 : 0, t->tm, t->tn, t->wx, t->wy, t->cb);
  kiln_cf_out_puts(out, kiln_cl_winograd);
  for (size_t i = 0; i < sizeof macro_names / sizeof macro_names[0]; ++i)
    kiln_cf_out_printf(out, "#undef %s\n", macro_names[i]);
  kiln_cf_out_puts(out, "\n");
  return NULL;
}
