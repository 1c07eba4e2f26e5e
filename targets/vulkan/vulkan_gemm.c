/* The tiled GEMM shader (kernels/vulkan/gemm.comp): tiles, the GLSL of an
 * instance, and the shader's view of lowering's GEMM descriptor. */
#include "targets/vulkan/vulkan_internal.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* kernels/vulkan/prelude.glsl (the printed kernels' helpers): its kiln_erf
 * for a GELU epilogue, so the template's GELU is the printed one's (that
 * function only: the whole prelude tripled shaderc's time on the shader) */
extern const char kiln_cf_glsl_prelude[];

bool kiln_vulkan_tiles_from_env(const char* var, kiln_spirv_gemm_tiles_t* out) {
  kiln_spirv_gemm_tiles_t t = {0};
  const char* env = getenv(var);
  /* an optional seventh value, h (f16 sums: where the instance allows them) */
  const int n = env ? sscanf(env, "%d,%d,%d,%d,%d,%d,%d", &t.tm, &t.tn, &t.tk, &t.rm, &t.rn, &t.shared, &t.h) : 0;
  if (!((n == 6 || (n == 7 && (t.h == 0 || t.h == 1))) && t.tm > 0 && t.tn > 0 && t.tk > 0 && t.rm > 0 && t.rn > 0 &&
        t.tm % t.rm == 0 && t.tn % t.rn == 0))
    return false;
  *out = t;
  return true;
}

kiln_spirv_gemm_tiles_t kiln_spirv_gemm_default_tiles(int64_t M, int64_t N) {
  kiln_spirv_gemm_tiles_t t;
  if (kiln_vulkan_tiles_from_env("KILN_SPIRV_GEMM_TILES", &t)) return t;
  /* The subgroup mode (gemm.comp, SHARED 2): 8 invocations, each with
   * all TM rows of 8 columns; up to 32 rows (fewer for short M: the rows
   * past M cost loads). On lavapipe loads set the speed and this mode
   * needs the fewest (1024^3: ~10x the shared-memory 64x64 tiles). */
  /* mode 4: A and B read as vec4 texels, 4 K steps unrolled (TK 4) */
  t.shared = 4;
  t.tm = M >= 32 ? 32 : M > 8 ? 16 : 8;
  t.rm = t.tm;
  t.rn = N >= 64 ? 8 : 4;
  t.tn = 8 * t.rn;
  t.tk = 4; /* TK steps are unrolled: longer bodies only cost LLVM compile time */
  return t;
}

kiln_spirv_gemm_tiles_t kiln_spirv_gemm_default_tiles_k(int64_t M, int64_t N, int64_t K) {
  kiln_spirv_gemm_tiles_t t;
  if (kiln_vulkan_tiles_from_env("KILN_SPIRV_GEMM_TILES", &t)) return t;
  t = kiln_spirv_gemm_default_tiles(M, N);
  /* Small products (up to 2^25 multiply-adds: the GEMMs of bert, gpt2 and
   * the encoder block): 16 rows x 4 columns an invocation. lavapipe's LLVM
   * takes seconds a shader for 32 x 8 accumulators (bert fp32 cold: 9.5 s
   * of CPU against 1.7 s with 16 x 4) where their runs differ by a few
   * percent (bert 3.7 vs 3.7 ms, the encoder 6.2 vs 6.6 ms) */
  if (M * N * K <= ((int64_t)1 << 25)) {
    if (t.tm > 16) t.tm = t.rm = 16;
    t.rn = 4;
    t.tn = 8 * t.rn;
  }
  return t;
}

kiln_status_t kiln_spirv_gemm_source(const kiln_spirv_gemm_t* g, char** out_glsl, int64_t groups[3],
                                     int64_t local[3]) {
  kiln_spirv_gemm_tiles_t t = g->tiles;
  if (t.tm == 0) t = kiln_spirv_gemm_default_tiles_k(g->M, g->N, g->K);
  if (t.tm <= 0 || t.tn <= 0 || t.tk <= 0 || t.rm <= 0 || t.rn <= 0 || t.tm % t.rm || t.tn % t.rn)
    return kiln_make_status(KILN_INVALID_ARGUMENT, "gemm tiles %dx%dx%d / %dx%d do not divide",
                            t.tm, t.tn, t.tk, t.rm, t.rn);
  int64_t lx = t.tn / t.rn, ly = t.tm / t.rm, nt = lx * ly;
  if (nt > 1024 || (uint32_t)t.shared > 4 || (t.shared == 1 && ((int64_t)t.tm * t.tk % nt || (int64_t)t.tk * t.tn % nt)) ||
      (t.shared >= 2 && (lx != 8 || ly != 1 || t.tm % 8)))
    return kiln_make_status(KILN_INVALID_ARGUMENT,
                            "gemm tiles %dx%dx%d / %dx%d (mode %d): %lld threads do not split the tiles "
                            "(mode 2: 8 threads, RM == TM, TM %% 8, TK and RN even)",
                            t.tm, t.tn, t.tk, t.rm, t.rn, t.shared, (long long)nt);
  if (t.h && (t.h != 1 || t.shared > 1))
    return kiln_make_status(KILN_INVALID_ARGUMENT, "gemm tiles %dx%dx%d / %dx%d (mode %d): f16 sums (h %d) are for the "
                            "shared-memory and direct modes (0, 1) only", t.tm, t.tn, t.tk, t.rm, t.rn, t.shared, t.h);
  if (g->M <= 0 || g->N <= 0 || g->K <= 0 || g->M * g->K > INT32_MAX || g->K * g->N > INT32_MAX ||
      g->M * g->N > INT32_MAX || (uint32_t)g->b_mode > 2)
    return kiln_make_status(KILN_INVALID_ARGUMENT, "gemm %lldx%lldx%lld (mode %d) does not fit the shader",
                            (long long)g->M, (long long)g->N, (long long)g->K, (int)g->b_mode);
  /* batches or samples: KILN_WG.z steps A, B and C by their strides */
  const int64_t batch = g->batch > 1 ? g->batch : 1;
  const bool batched = batch > 1 || g->sa || g->sb || g->sy;
  if (batched && (g->m_a || g->has_res || g->sa < 0 || g->sb < 0 || g->sy < 0 ||
                  (batch - 1) * g->sa > INT32_MAX - g->M * g->K || (batch - 1) * g->sb > INT32_MAX - g->K * g->N ||
                  (batch - 1) * g->sy > INT32_MAX - g->M * g->N))
    return kiln_make_status(KILN_INVALID_ARGUMENT,
                            "gemm %lldx%lldx%lld in %lld batches (strides %lld, %lld, %lld) does not fit the shader "
                            "(no run-time M or residual with batches)",
                            (long long)g->M, (long long)g->N, (long long)g->K, (long long)batch, (long long)g->sa,
                            (long long)g->sb, (long long)g->sy);
  const char* nl = strchr(kiln_vk_gemm, '\n');
  if (!nl) return kiln_make_status(KILN_INTERNAL, "kernels/vulkan/gemm.comp has no #version line");
  /* mode 4: the subgroup mode reading A and B as vec4 texels where rows
   * start on a texel (gemm.comp, TEXEL); elsewhere mode 3 */
  const int texel = t.shared == 4 && !g->no_texel && !g->f16_a && !g->f16_b && t.tk % 4 == 0 && t.rn % 4 == 0 && g->K % 4 == 0 &&
                    g->sa % 4 == 0 && g->sb % 4 == 0 &&
                    (g->b_mode == 1 || (g->b_mode == 0 && g->N % 4 == 0) ||
                     (g->b_mode == 2 && (g->pt > 0 ? g->pt : 1) % 4 == 0));
  /* (subgroup mode) pairs of floats as one 64-bit word where they are aligned */
  const bool w64 = t.shared == 2; /* mode 3: no 64-bit integers in the shader */
  const int a64 = w64 && !g->f16_a && g->K % 2 == 0 && g->sa % 2 == 0;
  const int b64 =
      w64 && !g->f16_b && g->sb % 2 == 0 && (g->b_mode == 1 ? g->K % 2 == 0 : g->N % 2 == 0 && (g->b_mode != 2 || (g->pt > 0 ? g->pt : 1) % 2 == 0));
  /* (shared-memory mode) vec4 reads where rows start on a vec4 and every
   * invocation reads whole vec4s; two shared buffers where they fit 16 KiB */
  const bool sh = t.shared == 1;
  const int a4 = sh && g->K % 4 == 0 && g->sa % 4 == 0 && t.tk % 4 == 0 && (int64_t)t.tm * t.tk / 4 % nt == 0;
  const int b4 = sh && (int64_t)t.tk * t.tn / 4 % nt == 0 && g->sb % 4 == 0 &&
                 (g->b_mode == 1 ? g->K % 4 == 0 && t.tk % 4 == 0
                                 : g->N % 4 == 0 && t.tn % 4 == 0 && (g->b_mode != 2 || (g->pt > 0 ? g->pt : 1) % 4 == 0));
  const int db = sh && 2 * (int64_t)t.tk * (t.tm + t.tn) * 4 <= KILN_VULKAN_SHARED_BUDGET;
  /* (the 4 x 4-grouped register tiles) an f32 C stored as vec4 */
  const int c4 = sh && !g->f16_c && g->N % 4 == 0 && g->sy % 4 == 0 && t.tm % 4 == 0 && t.tn % 4 == 0 && t.rm % 4 == 0 && t.rn % 4 == 0;
  if (g->has_res && g->bind_res < 0)
    return kiln_make_status(KILN_INVALID_ARGUMENT, "gemm with a residual: no residual binding");
  if (g->m_a && (g->m_a < 1 || g->bind_d < 0 || g->m_a > INT32_MAX || g->m_b < -INT32_MAX || g->m_b > INT32_MAX))
    return kiln_make_status(KILN_INVALID_ARGUMENT, "gemm with a run-time M (%lld * n + %lld, dims at binding %d) does "
                            "not fit the shader", (long long)g->m_a, (long long)g->m_b, (int)g->bind_d);
  if (g->act < KILN_TEMPLATE_ACT_NONE || g->act > KILN_TEMPLATE_ACT_CLIP)
    return kiln_make_status(KILN_INVALID_ARGUMENT, "gemm activation %d unknown", (int)g->act);
  /* with a GELU the prelude's kiln_erf goes after the #extension lines */
  const bool gelu = g->act == KILN_TEMPLATE_ACT_GELU || g->act == KILN_TEMPLATE_ACT_GELU_TANH;
  const char* erf = gelu ? strstr(kiln_cf_glsl_prelude, "float kiln_erf(float x) {") : NULL;
  const char* erf_end = erf ? strstr(erf, "\n}\n") : NULL;
  if (gelu && !erf_end) return kiln_make_status(KILN_INTERNAL, "kernels/vulkan/prelude.glsl has no kiln_erf");
  const char* ext = nl + 1; /* the end of the last #extension line */
  for (const char* e = strstr(kiln_vk_gemm, "\n#extension"); gelu && e; e = strstr(e + 1, "\n#extension")) {
    const char* end = strchr(e + 1, '\n');
    ext = end ? end + 1 : kiln_vk_gemm + kiln_vk_gemm_len;
  }
  bool even = !g->m_a && g->M % t.tm == 0 && g->N % t.tn == 0 && g->K % t.tk == 0;
  /* the #version line, the instance's #defines, the #extension lines,
   * kiln_erf where there is an activation, the rest of gemm.comp */
  kiln_vulkan_sb_t b = {0};
  kiln_vulkan_sb_printf(&b, "%.*s", (int)(nl + 1 - kiln_vk_gemm), kiln_vk_gemm);
  kiln_vulkan_sb_printf(&b,
                        "#define N %lld\n#define K %lld\n#define B_MODE %d\n"
                        "#define PT %lld\n#define PTILES %lld\n#define PKBS %lld\n"
                        "#define BIND_A %d\n#define BIND_B %d\n#define BIND_C %d\n"
                        "#define TM %d\n#define TN %d\n#define TK %d\n#define RM %d\n#define RN %d\n"
                        "#define SHARED %d\n#define EVEN %d\n#define A64 %d\n#define B64 %d\n#define TEXEL %d\n",
                        (long long)g->N, (long long)g->K, (int)g->b_mode, (long long)(g->pt > 0 ? g->pt : 1),
                        (long long)(g->ptiles > 0 ? g->ptiles : 1), (long long)(g->pkbs > 0 ? g->pkbs : g->K),
                        (int)g->bind_a, (int)g->bind_b, (int)g->bind_c, t.tm, t.tn, t.tk, t.rm, t.rn,
                        t.shared >= 2 ? 2 : t.shared, even ? 1 : 0, a64, b64, texel);
  if (sh)
    kiln_vulkan_sb_printf(&b, "#define A4 %d\n#define B4 %d\n#define DB %d\n#define C4 %d\n", a4, b4, db, c4);
  if (g->has_bias)
    kiln_vulkan_sb_printf(&b,
                          "#define HAS_BIAS 1\n#define BIND_BIAS %d\n#define BIAS_SM %lld\n#define BIAS_SN %lld\n"
                          "#define BETA %.9e\n",
                          (int)g->bind_bias, (long long)g->bias_sm, (long long)g->bias_sn, (double)g->beta);
  if (g->has_res) kiln_vulkan_sb_printf(&b, "#define HAS_RES 1\n#define BIND_RES %d\n", (int)g->bind_res);
  if (batched)
    kiln_vulkan_sb_printf(&b, "#define BATCHED 1\n#define SA %lld\n#define SB %lld\n#define SY %lld\n", (long long)g->sa,
                          (long long)g->sb, (long long)g->sy);
  if (g->m_a) /* a run-time M: gemm.comp's kg_m, read from the dims buffer */
    kiln_vulkan_sb_printf(&b, "#define RT_M 1\n#define M_A %lld\n#define M_B %lld\n#define BIND_D %d\n#define M kg_m\n",
                          (long long)g->m_a, (long long)g->m_b, (int)g->bind_d);
  else
    kiln_vulkan_sb_printf(&b, "#define M %lld\n", (long long)g->M);
  if (g->act) kiln_vulkan_sb_printf(&b, "#define ACT %d\n", (int)g->act);
  /* f16 storage: the operand types and the 16-bit storage extensions */
  const bool f16 = g->f16_a || g->f16_b || g->f16_c || (g->has_bias && g->f16_bias) || (g->has_res && g->f16_res);
  if (f16)
    kiln_vulkan_sb_printf(&b,
                          "#define A_T %s\n#define B_T %s\n#define C_T %s\n#define BIAS_T %s\n#define RES_T %s\n"
                          "#extension GL_EXT_shader_16bit_storage : require\n"
                          "#extension GL_EXT_shader_explicit_arithmetic_types_float16 : require\n",
                          g->f16_a ? "float16_t" : "float", g->f16_b ? "float16_t" : "float",
                          g->f16_c ? "float16_t" : "float", g->f16_bias ? "float16_t" : "float",
                          g->f16_res ? "float16_t" : "float");
  if (f16 && sh)
    kiln_vulkan_sb_printf(&b, "#define A4_T %s\n#define B4_T %s\n", g->f16_a ? "f16vec4" : "vec4",
                          g->f16_b ? "f16vec4" : "vec4");
  /* f16 products and sums (gemm.comp AF16) */
  if (t.h)
    kiln_vulkan_sb_printf(&b, "%s#define AF16 1\n",
                          f16 ? "" : "#extension GL_EXT_shader_explicit_arithmetic_types_float16 : require\n");
  /* Clip's bounds as literals (an infinite one clips nothing) */
  if (g->act == KILN_TEMPLATE_ACT_CLIP) {
    if (!isinf(g->act_lo)) kiln_vulkan_sb_printf(&b, "#define ACT_LO %.9e\n", (double)g->act_lo);
    if (!isinf(g->act_hi)) kiln_vulkan_sb_printf(&b, "#define ACT_HI %.9e\n", (double)g->act_hi);
  }
  kiln_vulkan_sb_printf(&b, "%.*s", (int)(ext - (nl + 1)), nl + 1);
  if (erf) kiln_vulkan_sb_printf(&b, "%.*s", (int)(erf_end + 3 - erf), erf);
  kiln_vulkan_sb_printf(&b, "%s", ext);
  if (b.oom) {
    free(b.p);
    return kiln_make_status(KILN_OUT_OF_MEMORY, "gemm shader text");
  }
  *out_glsl = b.p;
  groups[0] = (g->N + t.tn - 1) / t.tn;
  groups[1] = g->m_a ? 1 : (g->M + t.tm - 1) / t.tm; /* a run-time M: the rows on dim 2 */
  groups[2] = batch;
  local[0] = lx;
  local[1] = ly;
  local[2] = 1;
  return NULL;
}

bool kiln_spirv_gemv_tiles(int64_t M, int64_t N, kiln_spirv_gemm_tiles_t* out) {
  /* A GEMV reads each B texel for 4 multiply-adds a row whatever the
   * tile, and the subgroup mode's 8 rows an invocation are M of them
   * here (it skips the rest when M fits one tile), so what is left to
   * choose is the columns an invocation: 16 (lavapipe, `kiln bench
   * --target vulkan --suite gemm`, 3 rounds alternated with the 8 x 32
   * default these shapes had, medians, load 6-7: the classifier
   * 1x1280x1000 transB 0.291 -> 0.249 ms, 1/2/4x768x768 1.43-1.49x,
   * 1x768x3072 1.29x, 1x4096x4096 1.26x / transB 1.39x; 12 or 20
   * columns and TK 8 no better in a sweep) */
  if (M < 1 || M > 4 || N < 128) return false;
  *out = (kiln_spirv_gemm_tiles_t){.tm = 8, .tn = 128, .tk = 4, .rm = 8, .rn = 16, .shared = 4};
  return true;
}

/* The shader's view of a GEMM descriptor (kiln_spirv_templates allows only
 * f32 operands, no alpha, no transA; Gemm's C as a bias; batches with one
 * B each): B plain,
 * transposed or in the lowering's packed panels; bindings are the kernel's
 * parameter indices. */
kiln_spirv_gemm_t kiln_vulkan_gemm_of(const kiln_template_gemm_t* t) {
  kiln_spirv_gemm_t g = {.M = t->M, .N = t->N, .K = t->K, .bind_d = -1, .bind_res = -1};
  g.b_mode = t->pack_t ? 2 : t->trans_b ? 1 : 0;
  if (t->pack_t) g.pt = t->pack_t, g.ptiles = t->pack_tiles, g.pkbs = t->pack_kbs;
  for (int32_t j = 0; j < t->n_params; ++j) {
    if (t->roles[j] == 'A') g.bind_a = j, g.f16_a = t->f16[j];
    if (t->roles[j] == 'B') g.bind_b = j, g.f16_b = t->f16[j];
    if (t->roles[j] == 'Y') g.bind_c = j, g.f16_c = t->f16[j];
    if (t->roles[j] == 'C') g.bind_bias = j, g.f16_bias = t->f16[j];
    if (t->roles[j] == 'D') g.bind_d = j;
    if (t->roles[j] == 'R') g.bind_res = j, g.f16_res = t->f16[j];
  }
  g.m_a = t->m_dim_a;
  g.m_b = t->m_dim_b;
  g.has_res = t->has_res;
  g.act = t->act;
  g.act_lo = t->act_lo;
  g.act_hi = t->act_hi;
  g.has_bias = t->has_bias;
  g.bias_sm = t->bias_sm;
  g.bias_sn = t->bias_sn;
  g.beta = t->beta;
  g.batch = t->batch;
  g.sa = t->sa;
  g.sb = t->sb;
  g.sy = t->sy;
  return g;
}
