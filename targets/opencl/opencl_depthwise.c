/* Depthwise convolution instances for the OpenCL target: run width, launch
 * and the printed instance of kernels/opencl/depthwise.cl (the descriptor
 * comes from lowering: kiln_template_dw_match, lowering/template.h). */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "targets/opencl/opencl_internal.h"

static bool tiles_ok(const kiln_template_dw_t* d, const kiln_opencl_dw_tiles_t* t) {
  return (t->vw == 4 || t->vw == 8 || (t->vw == 16 && d->sw == 1)) && t->rh >= 1 && t->wg >= 1 && t->wg <= 256;
}

/* The interior columns of a row that vector runs of |vw| cover: a run at
 * s reads input columns s*SW - PW .. s*SW - PW + segl - 1 (segl: the taps'
 * span plus vw*SW, what the stride-2 load of 2*vw reads; one more than a
 * stride-1 run needs, SW - 1 more than a strided gather does). *lo is the
 * first column whose taps all lie inside the row (at most OW), *vend the
 * end of the last run that fits (*lo when none does). */
static void interior(const kiln_template_dw_t* d, int64_t vw, int64_t* lo, int64_t* vend) {
  const int64_t segl = (d->kw - 1) * d->dw + vw * d->sw;
  *lo = (d->pw + d->sw - 1) / d->sw;
  if (*lo > d->ow) *lo = d->ow;
  const int64_t num = d->iw + d->pw - segl;
  int64_t smax = num < 0 ? -1 : num / d->sw;
  if (smax > d->ow - vw) smax = d->ow - vw;
  *vend = smax >= *lo ? smax + vw : *lo;
}

/* Runs as wide as the interior takes (fewer, longer vector runs per row),
 * at most 8 lanes for strided rows (the stride-2 load reads twice the
 * run); one row per work-item, 64 per work-group. Not tuned: on
 * MobileNetV2's shapes the rh/wg variants tried on PoCL (rows 1/2/4,
 * groups 16/64) differed by less than the run-to-run noise. */
kiln_opencl_dw_tiles_t kiln_opencl_dw_default_tiles(const kiln_template_dw_t* d, bool gpu,
                                                    const kiln_template_limits_t* lim) {
  kiln_opencl_dw_tiles_t t = {.vw = 4, .rh = 1, .wg = 64};
  if (gpu) t = kiln_opencl_dw_gpu_tiles(d, lim);
  for (int32_t vw = d->sw == 1 ? 16 : 8; !gpu && vw > 4; vw /= 2) {
    int64_t lo, vend;
    interior(d, vw, &lo, &vend);
    if (vend > lo) {
      t.vw = vw;
      break;
    }
  }
  const char* env = getenv("KILN_OPENCL_DW_TILES");
  if (env && env[0]) {
    kiln_opencl_dw_tiles_t o;
    if (sscanf(env, "%d,%d,%d", &o.vw, &o.rh, &o.wg) == 3 && tiles_ok(d, &o)) t = o;
  }
  return t;
}

static int64_t items(const kiln_template_dw_t* d, const kiln_opencl_dw_tiles_t* t) {
  return d->N * d->M * ((d->oh + t->rh - 1) / t->rh);
}

void kiln_opencl_dw_launch(const kiln_template_dw_t* d, const kiln_opencl_dw_tiles_t* t, int64_t groups[3],
                           int64_t local[3]) {
  groups[0] = (items(d, t) + t->wg - 1) / t->wg;
  groups[1] = groups[2] = 1;
  local[0] = t->wg;
  local[1] = local[2] = 1;
}

static const char* const macro_names[] = {"KILN_DW_NAME", "KILN_DW_SIGNATURE", "KD_EPI", "KD_EPI_PRE", "CN", "CM", "CC",
                                          "MG", "IH", "IW", "OH", "OW", "KH", "KW", "SH", "SW", "DH", "DW",
                                          "PH", "PW", "CHAS_BIAS", "KD_VW", "KD_VW2", "KD_RH", "KD_WG", "KD_LO", "KD_VEND",
                                          "CX_F16", "CW_F16", "CC_F16", "CY_F16"};

kiln_status_t kiln_opencl_dw_print(const kiln_template_dw_t* d, const kiln_opencl_dw_tiles_t* t, int32_t n_params,
                                   const char* name, kiln_cf_out_t* out) {
  if (!tiles_ok(d, t))
    return kiln_make_status(KILN_INVALID_ARGUMENT, "opencl depthwise '%s': bad run width %d / work-group %d",
                            name, t->vw, t->wg);
  /* items are counted in int on the device */
  if (items(d, t) + t->wg > INT32_MAX)
    return kiln_make_status(KILN_INVALID_ARGUMENT, "opencl depthwise '%s': %lld work-items", name,
                            (long long)items(d, t));
  int64_t lo, vend;
  interior(d, t->vw, &lo, &vend);
  kiln_cf_out_printf(out,
                     "/* kiln depthwise template: %lld channels, %lldx%lld taps, stride %lldx%lld, %d-wide runs "
                     "over columns %lld..%lld, %d rows per work-item */\n",
                     (long long)d->M, (long long)d->kh, (long long)d->kw, (long long)d->sh, (long long)d->sw,
                     t->vw, (long long)lo, (long long)vend - 1, t->rh);
  kiln_cf_out_printf(out, "#define KILN_DW_NAME %s\n#define KILN_DW_SIGNATURE ", name);
#define DW_T(f) ((f) ? "half" : "float")
  for (int32_t j = 0; j < n_params; ++j) {
    if (j) kiln_cf_out_puts(out, ", ");
    if (j == d->bind_x) kiln_cf_out_printf(out, "__global const %s* restrict X", DW_T(d->f16_x));
    else if (j == d->bind_w) kiln_cf_out_printf(out, "__global const %s* restrict W", DW_T(d->f16_w));
    else if (j == d->bind_c) kiln_cf_out_printf(out, "__global const %s* restrict BIAS", DW_T(d->f16_c));
    else if (j == d->bind_y) kiln_cf_out_printf(out, "__global %s* restrict Y", DW_T(d->f16_y));
    else {
      /* an epilogue operand; two operands may read one parameter */
      int32_t e = -1;
      for (int32_t i = 0; i < d->epi.n_operands && e < 0; ++i)
        if (d->bind_e[i] == j) e = i;
      if (e < 0) return kiln_make_status(KILN_INTERNAL, "opencl depthwise '%s': parameter %d has no role", name, (int)j);
      kiln_cf_out_printf(out, "__global const %s* restrict P%d", DW_T(d->f16_e[e]), (int)j);
    }
  }
#undef DW_T
  kiln_cf_out_puts(out, "\n");
  /* operand i is the parameter it is bound to */
  for (int32_t i = 0; i < d->epi.n_operands; ++i) kiln_cf_out_printf(out, "#define E%d P%d\n", (int)i, (int)d->bind_e[i]);
  kiln_opencl_epi_print(&d->epi, d->f16_e, "KD_EPI", "E", out);
  kiln_cf_out_printf(out, "#define CX_F16 %d\n#define CW_F16 %d\n#define CC_F16 %d\n#define CY_F16 %d\n",
                     d->f16_x ? 1 : 0, d->f16_w ? 1 : 0, d->f16_c ? 1 : 0, d->f16_y ? 1 : 0);
  kiln_cf_out_printf(out,
                     "#define CN %lld\n#define CM %lld\n#define CC %lld\n#define MG %lld\n"
                     "#define IH %lld\n#define IW %lld\n#define OH %lld\n#define OW %lld\n"
                     "#define KH %lld\n#define KW %lld\n#define SH %lld\n#define SW %lld\n"
                     "#define DH %lld\n#define DW %lld\n#define PH %lld\n#define PW %lld\n"
                     "#define CHAS_BIAS %d\n#define KD_VW %d\n#define KD_VW2 %d\n#define KD_RH %d\n#define KD_WG %d\n#define KD_LO %lld\n#define KD_VEND %lld\n",
                     (long long)d->N, (long long)d->M, (long long)d->C, (long long)d->Mg, (long long)d->ih,
                     (long long)d->iw, (long long)d->oh, (long long)d->ow, (long long)d->kh, (long long)d->kw,
                     (long long)d->sh, (long long)d->sw, (long long)d->dh, (long long)d->dw, (long long)d->ph,
                     (long long)d->pw, d->bind_c >= 0 ? 1 : 0, t->vw, 2 * t->vw, t->rh, t->wg, (long long)lo, (long long)vend);
  kiln_cf_out_puts(out, kiln_cl_depthwise);
  for (size_t i = 0; i < sizeof macro_names / sizeof macro_names[0]; ++i)
    kiln_cf_out_printf(out, "#undef %s\n", macro_names[i]);
  for (int32_t i = 0; i < d->epi.n_operands; ++i) kiln_cf_out_printf(out, "#undef E%d\n", (int)i);
  kiln_cf_out_puts(out, "\n");
  return NULL;
}
