/* int8 product instances for the OpenCL target (QLinearConv /
 * QLinearMatMul): tiles, launch and the printed instance of
 * kernels/opencl/q8.cl from lowering's kiln_template_q8_t. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "ir/ops/nn_quant.h"
#include "targets/opencl/opencl_internal.h"

static bool tiles_ok(const kiln_template_q8_t* q, const kiln_opencl_q8_tiles_t* t) {
  if (t->rowvec != 0 && (t->rowvec != 1 || q->matmul)) return false;
  return (t->tm == 1 || t->tm == 2 || t->tm == 4 || t->tm == 8) && (t->tp == 1 || t->tp == 2 || t->tp == 4 || t->tp == 8) &&
         t->wg >= 1 && t->wg <= 256;
}

/* Convs on a device without the dot product: the row-vector kernel, 8
 * channels x 8 outputs of a row per work-item (fewer channels where a
 * group has fewer: depthwise one); otherwise (matmul, or the dot product
 * there) 4 channels x 2 positions per work-item (PoCL, 128 -> 128
 * channels 28x28: 4x2 1.1-1.6x faster than 4x4, 8x2, 8x1, 2x2). 64
 * work-items a group. KILN_OPENCL_Q8_TILES="tm,tp,wg,rowvec" overrides
 * them when valid. */
kiln_opencl_q8_tiles_t kiln_opencl_q8_default_tiles(const kiln_template_q8_t* q, uint32_t gpu_lacks) {
  kiln_opencl_q8_tiles_t t = {.tm = 4, .tp = 2, .wg = 64, .rowvec = !q->matmul && (gpu_lacks & KILN_GPU_LACKS_IDOT)};
  if (t.rowvec) t.tm = 8;
  while (t.tm > 1 && t.tm > q->Mg) t.tm /= 2;
  const char* env = getenv("KILN_OPENCL_Q8_TILES");
  kiln_opencl_q8_tiles_t o;
  if (env && env[0] && sscanf(env, "%d,%d,%d,%d", &o.tm, &o.tp, &o.wg, &o.rowvec) == 4 && tiles_ok(q, &o)) t = o;
  return t;
}

void kiln_opencl_q8_launch(const kiln_template_q8_t* q, const kiln_opencl_q8_tiles_t* t, int64_t groups[3],
                           int64_t local[3]) {
  const int64_t pt = t->rowvec ? q->out[0] * q->out[1] * ((q->out[2] + 7) / 8) : (q->P + t->tp - 1) / t->tp;
  groups[0] = (pt + t->wg - 1) / t->wg;
  groups[1] = q->N * q->G * ((q->Mg + t->tm - 1) / t->tm);
  groups[2] = 1;
  local[0] = t->wg;
  local[1] = local[2] = 1;
}

static const char* const macro_names[] = {
    "KQ_NAME", "KQ_SIGNATURE", "KQ_TX", "KQ_TW", "KQ_TY", "KQ_XU8", "KQ_WU8", "KQ_YLO", "KQ_YHI", "KQ_MATMUL",
    "CN", "CG", "CM", "CMG", "CCG", "CK", "CP", "ID", "IH", "IW", "OD", "OH", "OW", "KD", "KH", "KW",
    "SD", "SH", "SW", "DD", "DH", "DW", "PD", "PH", "PW", "KQ_WPC", "KQ_BIAS", "KQ_TM", "KQ_TP", "KQ_WG", "KQ_ROWVEC", "KQ_YU8"};

kiln_status_t kiln_opencl_q8_print(const kiln_template_q8_t* q, const kiln_opencl_q8_tiles_t* t, int32_t n_params,
                                   const char* name, kiln_cf_out_t* out) {
  if (!tiles_ok(q, t))
    return kiln_make_status(KILN_INVALID_ARGUMENT, "opencl int8 '%s': bad tiles %d x %d, work-group %d", name, t->tm,
                            t->tp, t->wg);
  static const char* const role_names[KILN_Q8_ROLES] = {"X", "XS", "XZ", "W", "WS", "WZ", "YS", "YZ", "BIAS", "Y"};
  const char* x8 = q->x_u8 ? "uchar" : "char";
  const char* w8 = q->w_u8 ? "uchar" : "char";
  const char* y8 = q->y_u8 ? "uchar" : "char";
  const char* role_types[KILN_Q8_ROLES] = {x8, "float", x8, w8, "float", w8, "float", y8, "int", y8};
  kiln_cf_out_printf(out, "/* kiln int8 %s template: %lld outputs x %lld positions, K %lld, %lld group(s) */\n",
                     q->matmul ? "matmul" : "conv", (long long)q->M, (long long)q->P, (long long)q->K,
                     (long long)q->G);
  kiln_cf_out_printf(out, "#define KQ_NAME %s\n#define KQ_SIGNATURE ", name);
  for (int32_t j = 0; j < n_params; ++j) {
    int32_t role = -1;
    for (int32_t r = 0; r < KILN_Q8_ROLES && role < 0; ++r)
      if (q->bind[r] == j) role = r;
    if (role < 0) return kiln_make_status(KILN_INTERNAL, "opencl int8 '%s': parameter %d has no role", name, (int)j);
    kiln_cf_out_printf(out, "%s__global %s%s* restrict %s", j ? ", " : "", role == KILN_Q8_Y ? "" : "const ",
                       role_types[role], role_names[role]);
  }
  kiln_cf_out_puts(out, "\n");
  int64_t lo = 0, hi = 0;
  kiln_nn_quant_range(q->y_u8 ? KILN_DTYPE_U8 : KILN_DTYPE_I8, &lo, &hi);
  kiln_cf_out_printf(out,
                     "#define KQ_TX %s\n#define KQ_TW %s\n#define KQ_TY %s\n#define KQ_XU8 %d\n#define KQ_WU8 %d\n"
                     "#define KQ_YLO %lld.0f\n#define KQ_YHI %lld.0f\n#define KQ_MATMUL %d\n",
                     x8, w8, y8, q->x_u8, q->w_u8, (long long)lo, (long long)hi, q->matmul);
  kiln_cf_out_printf(out, "#define CN %lld\n#define CG %lld\n#define CM %lld\n#define CMG %lld\n#define CCG %lld\n"
                          "#define CK %lld\n#define CP %lld\n",
                     (long long)q->N, (long long)q->G, (long long)q->M, (long long)q->Mg, (long long)q->Cg,
                     (long long)q->K, (long long)q->P);
  static const char* const axes = "DHW";
  for (int i = 0; i < 3; ++i)
    kiln_cf_out_printf(out, "#define I%c %lld\n#define O%c %lld\n#define K%c %lld\n#define S%c %lld\n"
                            "#define D%c %lld\n#define P%c %lld\n",
                       axes[i], (long long)q->in[i], axes[i], (long long)q->out[i], axes[i], (long long)q->k[i],
                       axes[i], (long long)q->s[i], axes[i], (long long)q->d[i], axes[i], (long long)q->p[i]);
  kiln_cf_out_printf(out, "#define KQ_WPC %d\n#define KQ_BIAS %d\n#define KQ_TM %d\n#define KQ_TP %d\n#define KQ_WG %d\n"
                          "#define KQ_ROWVEC %d\n#define KQ_YU8 %d\n",
                     q->w_per_chan, q->bind[KILN_Q8_BIAS] >= 0, t->tm, t->tp, t->wg, t->rowvec, q->y_u8);
  kiln_cf_out_puts(out, kiln_cl_q8);
  for (size_t i = 0; i < sizeof macro_names / sizeof macro_names[0]; ++i)
    kiln_cf_out_printf(out, "#undef %s\n", macro_names[i]);
  kiln_cf_out_puts(out, "\n");
  return NULL;
}
