/* Implicit-GEMM convolution instances for the OpenCL target: tiles, launch
 * and the printed instance of kernels/opencl/conv.cl (the match and the
 * program rewrite are shared with SPIR-V: targets/gpu_conv.c). */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "targets/opencl/opencl_internal.h"

kiln_opencl_conv_tiles_t kiln_opencl_conv_default_tiles(int64_t M, int64_t Q, int64_t K) {
  kiln_opencl_conv_tiles_t t = kiln_opencl_gemm_default_tiles(M, Q, K);
  const char* env = getenv("KILN_OPENCL_CONV_TILES");
  if (env && env[0]) {
    kiln_opencl_conv_tiles_t o;
    if (sscanf(env, "%d,%d,%d,%d,%d,%d,%d,%d", &o.tm, &o.tn, &o.vw, &o.wx, &o.wy, &o.bk, &o.mm,
               &o.mn) == 8 &&
        o.tm > 0 && o.tn > 0 && o.vw > 0 && o.tn % o.vw == 0 && o.wx > 0 && o.wy > 0 && o.bk > 0 &&
        o.mm > 0 && o.mn > 0)
      t = o;
  }
  return t;
}

void kiln_opencl_conv_launch(const kiln_gpu_conv_t* c, const kiln_opencl_conv_tiles_t* t, int64_t groups[3],
                             int64_t local[3]) {
  const int64_t bm = (int64_t)t->tm * t->wy * t->mm, bn = (int64_t)t->tn * t->wx * t->mn;
  groups[0] = (c->Q + bn - 1) / bn;
  groups[1] = (c->M + bm - 1) / bm;
  groups[2] = c->batch > 0 ? c->batch : 1;
  local[0] = t->wx;
  local[1] = t->wy;
  local[2] = 1;
}

static const char* const macro_names[] = {
    "KILN_CONV_NAME", "KILN_CONV_SIGNATURE", "KC_TOFF", "KC_EPI", "CM", "CQ", "CK", "CT", "CC",
    "CPLANE", "CBATCH", "CPT", "CKBS", "CTILES", "CCROP", "CQ1", "CQ2", "CDO", "CHO", "CWO",
    "CHAS_BIAS", "TM", "TN", "VW", "WX", "WY", "BK", "MM", "MN"};

kiln_status_t kiln_opencl_conv_print(const kiln_gpu_conv_t* c, const kiln_opencl_conv_tiles_t* t,
                                     const char* name, kiln_cf_out_t* out) {
  if (t->tn % t->vw || t->tm < 1 || t->wx < 1 || t->wy < 1 || t->bk < 1 || t->mm < 1 || t->mn < 1 ||
      (t->vw != 1 && t->vw != 2 && t->vw != 4 && t->vw != 8 && t->vw != 16))
    return kiln_make_status(KILN_INVALID_ARGUMENT, "opencl conv '%s': bad tiles tm %d tn %d vw %d", name,
                            t->tm, t->tn, t->vw);
  if (c->T < 1 || c->T > KILN_GPU_CONV_MAX_TAPS)
    return kiln_make_status(KILN_INVALID_ARGUMENT, "opencl conv '%s': %lld taps", name, (long long)c->T);
  kiln_cf_out_printf(out, "/* kiln conv template: %lld channels x %lld grid x K %lld (%lld taps)%s */\n",
                     (long long)c->M, (long long)c->Q, (long long)c->K, (long long)c->T,
                     c->crop ? ", cropped" : "");
  kiln_cf_out_printf(out, "__constant int %s_toff[%lld] = {", name, (long long)c->T);
  for (int64_t i = 0; i < c->T; ++i) kiln_cf_out_printf(out, "%s%d", i ? ", " : "", (int)c->toff[i]);
  kiln_cf_out_puts(out, "};\n");
  kiln_cf_out_printf(out, "#define KILN_CONV_NAME %s\n#define KC_TOFF %s_toff\n#define KILN_CONV_SIGNATURE ",
                     name, name);
  for (int32_t j = 0; j < c->n_params; ++j) {
    const char r = c->roles[j];
    if (j) kiln_cf_out_puts(out, ", ");
    switch (r) {
      case 'W': kiln_cf_out_puts(out, "__global const float* restrict W"); break;
      case 'X': kiln_cf_out_puts(out, "__global const float* restrict XP"); break;
      case 'F': kiln_cf_out_puts(out, "__global float* restrict YF"); break;
      case 'C': kiln_cf_out_puts(out, "__global const float* restrict BIAS"); break;
      case 'Y': kiln_cf_out_puts(out, "__global float* restrict Y"); break;
      default: kiln_cf_out_printf(out, "__global const float* restrict E%c", r); break;
    }
  }
  kiln_cf_out_puts(out, "\n");
  kiln_opencl_epi_print(&c->epi, "KC_EPI", "E", out);
  kiln_cf_out_printf(out,
                     "#define CM %lld\n#define CQ %lld\n#define CK %lld\n#define CT %lld\n#define CC %lld\n"
                     "#define CPLANE %lld\n#define CBATCH %lld\n#define CPT %lld\n#define CKBS %lld\n"
                     "#define CTILES %lld\n#define CCROP %d\n#define CQ1 %lld\n#define CQ2 %lld\n"
                     "#define CDO %lld\n#define CHO %lld\n#define CWO %lld\n#define CHAS_BIAS %d\n"
                     "#define TM %d\n#define TN %d\n#define VW %d\n#define WX %d\n#define WY %d\n"
                     "#define BK %d\n#define MM %d\n#define MN %d\n",
                     (long long)c->M, (long long)c->Q, (long long)c->K, (long long)c->T, (long long)c->C,
                     (long long)c->plane, (long long)c->batch, (long long)c->pt, (long long)c->kbs,
                     (long long)c->tiles, c->crop ? 1 : 0, (long long)c->q1, (long long)c->q2,
                     (long long)c->od, (long long)c->oh, (long long)c->ow, c->has_bias ? 1 : 0, t->tm,
                     t->tn, t->vw, t->wx, t->wy, t->bk, t->mm, t->mn);
  kiln_cf_out_puts(out, kiln_cl_conv);
  for (size_t i = 0; i < sizeof macro_names / sizeof macro_names[0]; ++i)
    kiln_cf_out_printf(out, "#undef %s\n", macro_names[i]);
  kiln_cf_out_puts(out, "\n");
  return NULL;
}
