/* Implicit-GEMM convolution instances for the OpenCL target: tiles, launch
 * and the printed instance of kernels/opencl/conv.cl (the descriptor, its
 * tiles and the weights laid out for them come from lowering,
 * lowering/template.h; the program rewrite is shared with SPIR-V:
 * targets/gpu_conv.c). */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "targets/opencl/opencl_internal.h"

kiln_opencl_conv_tiles_t kiln_opencl_conv_default_tiles(int64_t M, int64_t Q, int64_t K) {
  kiln_opencl_conv_tiles_t t = kiln_opencl_gemm_default_tiles(M, Q, K);
  kiln_opencl_tiles_from_env("KILN_OPENCL_CONV_TILES", &t);
  return t;
}

void kiln_opencl_conv_launch(const kiln_template_conv_t* c, const kiln_opencl_conv_tiles_t* t, int64_t groups[3],
                             int64_t local[3]) {
  kiln_opencl_tiled_launch(t, c->M, c->Q, c->batch, groups, local);
}

static const char* const macro_names[] = {
    "KILN_CONV_NAME", "KILN_CONV_SIGNATURE", "KC_TOFF", "KC_EPI", "KC_EPI_PRE", "CM", "CQ", "CK", "CT", "CC",
    "CPLANE", "CBATCH", "CPT", "CKBS", "CTILES", "CCROP", "CQ1", "CQ2", "CDO", "CHO", "CWO",
    "CHAS_BIAS", "CWTILED", "CW_F16", "CX_F16", "CC_F16", "CY_F16", "CPSUM", "TM", "TN", "VW", "WX", "WY",
    "BK", "MM", "MN", "CRT", "KC_KS_TOFF", "KC_BKX", "KC_MMX", "KC_MNX"};

/* Whether the parameter of role |r| holds f16 (false when there is none). */
static bool role_f16(const kiln_template_conv_t* c, char r) {
  for (int32_t j = 0; j < c->n_params; ++j)
    if (c->roles[j] == r) return c->f16[j];
  return false;
}

static bool has_role(const kiln_template_conv_t* c, char r) {
  for (int32_t j = 0; j < c->n_params; ++j)
    if (c->roles[j] == r) return true;
  return false;
}

void kiln_opencl_conv_print_params(const kiln_template_conv_t* c, bool ks, kiln_cf_out_t* out) {
  for (int32_t j = 0; j < c->n_params; ++j) {
    const char r = c->roles[j];
    const char* t = c->f16[j] ? "half" : "float";
    if (j) kiln_cf_out_puts(out, ", ");
    switch (r) {
      case 'W': kiln_cf_out_printf(out, "__global const %s* restrict W", t); break;
      case 'X': kiln_cf_out_printf(out, "__global const %s* restrict XP", t); break;
      case 'F': kiln_cf_out_printf(out, "__global %s* restrict YF", t); break;
      case 'C': kiln_cf_out_printf(out, "__global const %s* restrict BIAS", t); break;
      case 'Y': kiln_cf_out_printf(out, "__global %s* restrict Y", t); break;
      default: kiln_cf_out_printf(out, "__global const %s* restrict E%c", t, r); break;
    }
  }
  if (ks) kiln_cf_out_puts(out, ", __global const int* restrict KS");
  kiln_cf_out_puts(out, "\n");
}

void kiln_opencl_conv_print_f16_flags(const kiln_template_conv_t* c, kiln_cf_out_t* out) {
  kiln_cf_out_printf(out, "#define CW_F16 %d\n#define CX_F16 %d\n#define CC_F16 %d\n#define CY_F16 %d\n",
                     role_f16(c, 'W'), role_f16(c, 'X'), role_f16(c, 'C'), role_f16(c, 'Y'));
}

void kiln_opencl_conv_epi_print(const kiln_template_conv_t* c, const char* macro, int32_t ks, kiln_cf_out_t* out) {
  bool f16[KILN_TEMPLATE_EPI_MAX] = {false};
  for (int32_t j = 0; j < c->n_params; ++j) {
    const int e = c->roles[j] - '0';
    if (e >= 0 && e < KILN_TEMPLATE_EPI_MAX) f16[e] = c->f16[j];
  }
  kiln_opencl_epi_print_ks(&c->epi, f16, macro, "E", ks, out);
}

/* The run-time shapes of |c| with tiles |t| into |ks| (conv.cl's KC_RT_DECL
 * order, the epilogue's strides from slot 17, the tap shifts after them):
 * false when a value does not fit an int. */
static bool conv_ks(const kiln_template_conv_t* c, const kiln_opencl_conv_tiles_t* t, kiln_opencl_ks_t* ks) {
  const int64_t v[17] = {c->M,  c->Q,  c->K,  c->T,  c->C,  c->plane, c->pt, c->kbs, c->tiles,
                         c->q1, c->q2, c->od, c->oh, c->ow, t->bk,    t->mm, t->mn};
  int32_t n = 0;
  for (int i = 0; i < 17; ++i) ks->v[n++] = (int32_t)v[i];
  for (int32_t i = 0; i < c->epi.n_operands; ++i) {
    ks->v[n++] = (int32_t)c->epi.operands[i].sn;
    ks->v[n++] = (int32_t)c->epi.operands[i].sm;
  }
  for (int64_t i = 0; i < c->T; ++i) ks->v[n++] = c->toff[i];
  ks->n = n;
  for (int i = 0; i < 17; ++i)
    if (v[i] < 0 || v[i] > INT32_MAX) return false;
  for (int32_t i = 0; i < c->epi.n_operands; ++i)
    if (c->epi.operands[i].sn > INT32_MAX || c->epi.operands[i].sm > INT32_MAX) return false;
  return true;
}

/* The largest of |v| and |floor| (the local and private arrays of a
 * run-time-shape instance are sized for the largest K slice and micro-tile
 * counts the default tile rules choose, 256, 8 and 4, so one kernel serves
 * them all; a tuned instance beyond them gets its own). */
static int32_t at_least(int32_t v, int32_t floor) { return v > floor ? v : floor; }

kiln_status_t kiln_opencl_conv_print(const kiln_template_conv_t* c, const kiln_opencl_conv_tiles_t* t,
                                     bool wtiled, bool psum_private, const char* name, kiln_cf_out_t* out) {
  return kiln_opencl_conv_print_ks(c, t, wtiled, psum_private, name, NULL, false, out);
}

kiln_status_t kiln_opencl_conv_print_ks(const kiln_template_conv_t* c, const kiln_opencl_conv_tiles_t* t,
                                        bool wtiled, bool psum_private, const char* name, kiln_opencl_ks_t* ks,
                                        bool exact_local, kiln_cf_out_t* out) {
  if (t->tn % t->vw || t->tm < 1 || t->wx < 1 || t->wy < 1 || t->bk < 1 || t->mm < 1 || t->mn < 1 ||
      (t->vw != 1 && t->vw != 2 && t->vw != 4 && t->vw != 8 && t->vw != 16))
    return kiln_make_status(KILN_INVALID_ARGUMENT, "opencl conv '%s': bad tiles tm %d tn %d vw %d", name,
                            t->tm, t->tn, t->vw);
  if (c->T < 1 || c->T > KILN_TEMPLATE_CONV_MAX_TAPS)
    return kiln_make_status(KILN_INVALID_ARGUMENT, "opencl conv '%s': %lld taps", name, (long long)c->T);
  /* partial sums through PS only when there is one and it is f32: an f16
   * one would round them once per K slice (the private array keeps them f32) */
  if (!psum_private && kiln_template_conv_sums_f16(c))
    return kiln_make_status(KILN_INVALID_ARGUMENT,
                            "opencl conv '%s': partial sums in an f16 buffer (match without the grid, private sums)",
                            name);
  if (!psum_private && c->crop && !has_role(c, 'F'))
    return kiln_make_status(KILN_INVALID_ARGUMENT, "opencl conv '%s': no grid for the partial sums", name);
  const bool rt = ks && conv_ks(c, t, ks);
  if (ks && !rt) ks->n = 0;
  /* run-time shapes: the comment names no shape (the instance's text is
   * the same for every conv of its kind, and is printed once) */
  if (rt)
    kiln_cf_out_printf(out, "/* kiln conv template, run-time shapes%s%s */\n", c->crop ? ", cropped" : "",
                       psum_private ? ", private partial sums" : "");
  else
    kiln_cf_out_printf(out, "/* kiln conv template: %lld channels x %lld grid x K %lld (%lld taps)%s%s */\n",
                       (long long)c->M, (long long)c->Q, (long long)c->K, (long long)c->T, c->crop ? ", cropped" : "",
                       psum_private ? ", private partial sums" : "");
  if (rt) {
    kiln_cf_out_printf(out, "#define KILN_CONV_NAME %s\n#define KC_KS_TOFF %d\n#define KILN_CONV_SIGNATURE ", name,
                       (int)(17 + 2 * c->epi.n_operands));
  } else {
    kiln_cf_out_printf(out, "__constant int %s_toff[%lld] = {", name, (long long)c->T);
    for (int64_t i = 0; i < c->T; ++i) kiln_cf_out_printf(out, "%s%d", i ? ", " : "", (int)c->toff[i]);
    kiln_cf_out_puts(out, "};\n");
    kiln_cf_out_printf(out, "#define KILN_CONV_NAME %s\n#define KC_TOFF %s_toff\n#define KILN_CONV_SIGNATURE ",
                       name, name);
  }
  kiln_opencl_conv_print_params(c, rt, out);
  kiln_opencl_conv_epi_print(c, "KC_EPI", rt ? 17 : -1, out);
  kiln_opencl_conv_print_f16_flags(c, out);
  kiln_cf_out_printf(out, "#define CPSUM %d\n#define CRT %d\n", psum_private ? 1 : 0, rt ? 1 : 0);
  if (rt)
    kiln_cf_out_printf(out,
                       "#define CCROP %d\n#define CHAS_BIAS %d\n#define CWTILED %d\n#define TM %d\n#define TN %d\n"
                       "#define VW %d\n#define WX %d\n#define WY %d\n#define KC_BKX %d\n#define KC_MMX %d\n"
                       "#define KC_MNX %d\n",
                       c->crop ? 1 : 0, c->has_bias ? 1 : 0, wtiled ? 1 : 0, t->tm, t->tn, t->vw, t->wx, t->wy,
                       exact_local ? t->bk : at_least(t->bk, 256), exact_local ? t->mm : at_least(t->mm, 8),
                       exact_local ? t->mn : at_least(t->mn, 4));
  else
    kiln_cf_out_printf(out,
                       "#define CM %lld\n#define CQ %lld\n#define CK %lld\n#define CT %lld\n#define CC %lld\n"
                       "#define CPLANE %lld\n#define CBATCH %lld\n#define CPT %lld\n#define CKBS %lld\n"
                       "#define CTILES %lld\n#define CCROP %d\n#define CQ1 %lld\n#define CQ2 %lld\n"
                       "#define CDO %lld\n#define CHO %lld\n#define CWO %lld\n#define CHAS_BIAS %d\n#define CWTILED %d\n"
                       "#define TM %d\n#define TN %d\n#define VW %d\n#define WX %d\n#define WY %d\n"
                       "#define BK %d\n#define MM %d\n#define MN %d\n",
                       (long long)c->M, (long long)c->Q, (long long)c->K, (long long)c->T, (long long)c->C,
                       (long long)c->plane, (long long)c->batch, (long long)c->pt, (long long)c->kbs,
                       (long long)c->tiles, c->crop ? 1 : 0, (long long)c->q1, (long long)c->q2, (long long)c->od,
                       (long long)c->oh, (long long)c->ow, c->has_bias ? 1 : 0, wtiled ? 1 : 0, t->tm, t->tn, t->vw,
                       t->wx, t->wy, t->bk, t->mm, t->mn);
  kiln_cf_out_puts(out, kiln_cl_conv);
  for (size_t i = 0; i < sizeof macro_names / sizeof macro_names[0]; ++i)
    kiln_cf_out_printf(out, "#undef %s\n", macro_names[i]);
  kiln_cf_out_puts(out, "\n");
  return NULL;
}
