/* GEMM template instances for the OpenCL target (see opencl_internal.h and
 * kernels/opencl/gemm.cl): tiles, launch and the printed instance of a
 * GEMM descriptor that lowering chose (lowering/template.h). */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "targets/opencl/opencl_internal.h"

bool kiln_opencl_tiles_from_env(const char* var, kiln_opencl_gemm_tiles_t* t) {
  const char* env = getenv(var);
  kiln_opencl_gemm_tiles_t o;
  if (!env || !env[0] ||
      sscanf(env, "%d,%d,%d,%d,%d,%d,%d,%d", &o.tm, &o.tn, &o.vw, &o.wx, &o.wy, &o.bk, &o.mm, &o.mn) != 8)
    return false;
  if (o.tm < 1 || o.tn < 1 || o.vw < 1 || o.tn % o.vw || o.wx < 1 || o.wy < 1 || o.bk < 1 || o.mm < 1 || o.mn < 1)
    return false;
  *t = o;
  return true;
}

kiln_opencl_gemm_tiles_t kiln_opencl_gemm_default_tiles(int64_t M, int64_t N, int64_t K) {
  /* Measured with kiln_bench_opencl_sgemm --sweep on PoCL (2 cores,
   * AVX-512): one work-item per group running an 8 x 32 register tile
   * (16 zmm accumulators) over 8 x 4 micro-tiles of a 64 x 128 block, K in
   * slices of 128, was best at 1024^3 (~150 GFLOP/s; work-groups of 4-8
   * items were 2-3x slower: PoCL runs a group's items one after another and
   * pays for every barrier region). Small products shrink the block so
   * there are a few groups per core. */
  kiln_opencl_gemm_tiles_t t = {.tm = 8, .tn = 32, .vw = 16, .wx = 1, .wy = 1, .bk = 128, .mm = 8, .mn = 4};
  if (N < 32) t.tn = 16;
  if (M < 8) t.tm = M < 1 ? 1 : (int32_t)M;
  int64_t mt = (M + t.tm - 1) / t.tm, nt = (N + t.tn - 1) / t.tn;
  if (t.mm > mt) t.mm = (int32_t)(mt > 0 ? mt : 1);
  if (t.mn > nt) t.mn = (int32_t)(nt > 0 ? nt : 1);
  for (;;) {
    int64_t groups = ((mt + t.mm - 1) / t.mm) * ((nt + t.mn - 1) / t.mn);
    if (groups >= 8 || (t.mm == 1 && t.mn == 1)) break;
    if (t.mm >= t.mn && t.mm > 1) t.mm = (t.mm + 1) / 2;
    else t.mn = (t.mn + 1) / 2;
  }
  /* K slices: a multiple of the vector width that divides K (no edge
   * slice, no guards), as close to 128 as there is in [64, 256]. */
  if (K < t.bk) {
    t.bk = (int32_t)((K + t.vw - 1) / t.vw * t.vw);
  } else if (K % t.bk) {
    int32_t best = 0;
    for (int32_t b = 64; b <= 256; b += t.vw)
      if (K % b == 0 && (!best || labs(b - 128) < labs(best - 128))) best = b;
    if (best) t.bk = best;
  }
  return t;
}

kiln_opencl_gemm_tiles_t kiln_opencl_gemm_tiles(const kiln_template_gemm_t* g) {
  kiln_opencl_gemm_tiles_t t = kiln_opencl_gemm_default_tiles(g->M, g->N, g->K);
  kiln_opencl_tiles_from_env("KILN_OPENCL_GEMM_TILES", &t);
  return t;
}

void kiln_opencl_tiled_launch(const kiln_opencl_gemm_tiles_t* t, int64_t rows, int64_t cols, int64_t batch,
                              int64_t groups[3], int64_t local[3]) {
  const int64_t bm = (int64_t)t->tm * t->wy * t->mm, bn = (int64_t)t->tn * t->wx * t->mn;
  groups[0] = (cols + bn - 1) / bn;
  groups[1] = (rows + bm - 1) / bm;
  groups[2] = batch > 0 ? batch : 1;
  local[0] = t->wx;
  local[1] = t->wy;
  local[2] = 1;
}

void kiln_opencl_gemm_launch(const kiln_template_gemm_t* g, const kiln_opencl_gemm_tiles_t* t, int64_t groups[3],
                             int64_t local[3]) {
  kiln_opencl_tiled_launch(t, g->M, g->N, g->batch, groups, local);
  /* a run-time M: the row blocks on dim 2, launched n times (gemm.cl GRT_M) */
  if (g->m_dim_a) groups[1] = groups[2] = 1;
}

static const char* const macro_names[] = {
    "KILN_GEMM_NAME", "KILN_GEMM_SIGNATURE", "GM", "GN", "GK", "GBATCH", "GSA", "GSB", "GSY",
    "GLDA", "GLDB", "GLDY", "GTRANS_A", "GTRANS_B", "GPACK_T", "GPACK_KBS", "GPACK_TILES",
    "GHAS_BIAS", "GBIAS_SM", "GBIAS_SN", "GALPHA", "GBETA", "TM", "TN", "VW", "WX", "WY", "BK",
    "MM", "MN", "GA_F16", "GB_F16", "GC_F16", "GY_F16", "GPSUM", "GRT_M", "GM_A", "GM_B", "GHAS_RES", "GACT",
    "GR_F16", "GACT_LO", "GACT_HI"};

static int role_f16(const kiln_template_gemm_t* g, char r) {
  for (int32_t j = 0; j < g->n_params; ++j)
    if (g->roles[j] == r) return g->f16[j] ? 1 : 0;
  return 0;
}

/* The macros gemm.cl and gemv.cl share: the instance's name, signature,
 * operands, shape, bias, residual and activation (not the tiles); |psum|:
 * the f32 partial sums in a private array (GPSUM) even where Y is f32. */
static kiln_status_t print_shape(const kiln_template_gemm_t* g, bool psum, const char* name, kiln_cf_out_t* out) {
  kiln_cf_out_printf(out, "#define KILN_GEMM_NAME %s\n#define KILN_GEMM_SIGNATURE ", name);
  for (int32_t j = 0; j < g->n_params; ++j) {
    const char r = g->roles[j];
    const char* t = g->f16[j] ? "half" : "float";
    if (j) kiln_cf_out_puts(out, ", ");
    if (r == 'Y') kiln_cf_out_printf(out, "__global %s* restrict Y", t);
    else if (r == 'A' || r == 'B') kiln_cf_out_printf(out, "__global const %s* restrict %c", t, r);
    else if (r == 'C') kiln_cf_out_printf(out, "__global const %s* restrict BIAS", t);
    else if (r == 'D') kiln_cf_out_puts(out, "__global const long* restrict DIMS");
    else if (r == 'R') kiln_cf_out_printf(out, "__global const %s* restrict RES", t);
    else kiln_cf_out_printf(out, "__global %s* unused%d", t, (int)j);
  }
  /* an f16 Y never holds partial sums (GPSUM: a private f32 array) */
  kiln_cf_out_printf(out, "\n#define GA_F16 %d\n#define GB_F16 %d\n#define GC_F16 %d\n#define GY_F16 %d\n#define GPSUM %d",
                     role_f16(g, 'A'), role_f16(g, 'B'), role_f16(g, 'C'), role_f16(g, 'Y'), role_f16(g, 'Y') || psum);
  /* a run-time M (a range program): GM is gemm.cl's kg_m, read from DIMS */
  int32_t dims = -1;
  for (int32_t j = 0; j < g->n_params; ++j)
    if (g->roles[j] == 'D') dims = j;
  if (g->m_dim_a && (dims < 0 || g->batch != 1))
    return kiln_make_status(KILN_INVALID_ARGUMENT, "opencl gemm '%s': a run-time M needs the dims buffer and one batch",
                            name);
  if (g->act < KILN_TEMPLATE_ACT_NONE || g->act > KILN_TEMPLATE_ACT_CLIP)
    return kiln_make_status(KILN_INVALID_ARGUMENT, "opencl gemm '%s': activation %d unknown", name, (int)g->act);
  kiln_cf_out_printf(out, "\n#define GHAS_RES %d\n#define GR_F16 %d\n#define GACT %d", g->has_res ? 1 : 0,
                     role_f16(g, 'R'), (int)g->act);
  /* Clip's bounds (an infinite one clips nothing) */
  if (g->act == KILN_TEMPLATE_ACT_CLIP) {
    kiln_cf_out_puts(out, "\n#define GACT_LO ");
    if (isinf(g->act_lo)) kiln_cf_out_puts(out, g->act_lo < 0 ? "(-INFINITY)" : "INFINITY");
    else kiln_cf_out_printf(out, "%.9ef", (double)g->act_lo);
    kiln_cf_out_puts(out, "\n#define GACT_HI ");
    if (isinf(g->act_hi)) kiln_cf_out_puts(out, g->act_hi < 0 ? "(-INFINITY)" : "INFINITY");
    else kiln_cf_out_printf(out, "%.9ef", (double)g->act_hi);
  }
  if (g->m_dim_a)
    kiln_cf_out_printf(out, "\n#define GRT_M 1\n#define GM_A %lld\n#define GM_B %lld\n#define GM kg_m",
                       (long long)g->m_dim_a, (long long)g->m_dim_b);
  else
    kiln_cf_out_printf(out, "\n#define GRT_M 0\n#define GM %lld", (long long)g->M);
  kiln_cf_out_printf(out,
                     "\n#define GN %lld\n#define GK %lld\n#define GBATCH %lld\n"
                     "#define GSA %lld\n#define GSB %lld\n#define GSY %lld\n"
                     "#define GLDA %lld\n#define GLDB %lld\n#define GLDY %lld\n"
                     "#define GTRANS_A %d\n#define GTRANS_B %d\n"
                     "#define GPACK_T %lld\n#define GPACK_KBS %lld\n#define GPACK_TILES %lld\n"
                     "#define GHAS_BIAS %d\n#define GBIAS_SM %lld\n#define GBIAS_SN %lld\n"
                     "#define GALPHA %.9ef\n#define GBETA %.9ef\n",
                     (long long)g->N, (long long)g->K, (long long)g->batch,
                     (long long)g->sa, (long long)g->sb, (long long)g->sy, (long long)g->lda,
                     (long long)(g->ldb ? g->ldb : 1), (long long)g->ldy, g->trans_a ? 1 : 0,
                     g->trans_b ? 1 : 0, (long long)g->pack_t, (long long)(g->pack_kbs ? g->pack_kbs : 1),
                     (long long)g->pack_tiles, g->has_bias ? 1 : 0, (long long)g->bias_sm,
                     (long long)g->bias_sn, (double)g->alpha, (double)g->beta);
  return NULL;
}

static void print_end(const char* text, kiln_cf_out_t* out) {
  kiln_cf_out_puts(out, text);
  for (size_t i = 0; i < sizeof macro_names / sizeof macro_names[0]; ++i)
    kiln_cf_out_printf(out, "#undef %s\n", macro_names[i]);
  kiln_cf_out_puts(out, "\n");
}

kiln_status_t kiln_opencl_gemm_print(const kiln_template_gemm_t* g, const kiln_opencl_gemm_tiles_t* t,
                                     const char* name, kiln_cf_out_t* out) {
  return kiln_opencl_gemm_print_psum(g, t, false, name, out);
}

kiln_status_t kiln_opencl_gemm_print_psum(const kiln_template_gemm_t* g, const kiln_opencl_gemm_tiles_t* t,
                                          bool psum, const char* name, kiln_cf_out_t* out) {
  if (t->tn % t->vw || t->tm < 1 || t->wx < 1 || t->wy < 1 || t->bk < 1 || t->mm < 1 || t->mn < 1)
    return kiln_make_status(KILN_INVALID_ARGUMENT, "opencl gemm '%s': bad tiles tm %d tn %d vw %d",
                            name, t->tm, t->tn, t->vw);
  kiln_cf_out_printf(out, "/* kiln GEMM template: %lld x %lld x %lld */\n", (long long)g->M,
                     (long long)g->N, (long long)g->K);
  KILN_RETURN_IF_ERROR(print_shape(g, psum, name, out));
  kiln_cf_out_printf(out,
                     "#define TM %d\n#define TN %d\n#define VW %d\n#define WX %d\n#define WY %d\n"
                     "#define BK %d\n#define MM %d\n#define MN %d\n",
                     t->tm, t->tn, t->vw, t->wx, t->wy, t->bk, t->mm, t->mn);
  print_end(kiln_cl_gemm, out);
  return NULL;
}

/* ---- GEMV: few rows (kernels/opencl/gemv.cl) ------------------------------ */

bool kiln_opencl_gemv_covers(const kiln_template_gemm_t* g) {
  /* gemv.cl reads B along n: stored K x N or packed (the lowering packs
   * every constant and every transposed run-time B) */
  return g->m_dim_a == 0 && g->M >= 1 && g->M <= KILN_OPENCL_GEMV_MAX_M && g->N >= 1 && g->K >= 1 &&
         (!g->trans_b || g->pack_t);
}

kiln_opencl_gemv_tiles_t kiln_opencl_gemv_default_tiles(const kiln_template_gemm_t* g) {
  /* PoCL (2 cores, AVX-512) runs a work-group as a loop over its items,
   * so one item a group (no barrier) streaming 16-float vectors: 64
   * columns an item at M <= 2, 32 above (M x 4 or M x 2 zmm accumulators),
   * then fewer columns (down to one vector) while there are under 8
   * groups, 4 per core. */
  kiln_opencl_gemv_tiles_t t = {.vw = 16, .nc = g->M > 2 ? 32 : 64, .wk = 1, .on = 1};
  while (t.nc > t.vw && (g->N + t.nc - 1) / t.nc < 8) t.nc /= 2;
  if (t.nc < t.vw) t.nc = t.vw;
  return t;
}

bool kiln_opencl_gemv_tiles_from_env(kiln_opencl_gemv_tiles_t* t) {
  const char* env = getenv("KILN_OPENCL_GEMV_TILES");
  kiln_opencl_gemv_tiles_t o;
  if (!env || !env[0] || sscanf(env, "%d,%d,%d,%d", &o.vw, &o.nc, &o.wk, &o.on) != 4) return false;
  if (o.on != 0 && o.on != 1) return false;
  *t = o;
  return true;
}

kiln_opencl_gemv_tiles_t kiln_opencl_gemv_tiles(const kiln_template_gemm_t* g) {
  kiln_opencl_gemv_tiles_t t = kiln_opencl_gemv_default_tiles(g);
  kiln_opencl_gemv_tiles_from_env(&t);
  return t;
}

const char* kiln_opencl_gemv_tiles_check(const kiln_template_gemm_t* g, const kiln_opencl_gemv_tiles_t* t) {
  if (t->on != 0 && t->on != 1) return "gemv: the switch is 0 (the GEMM template) or 1 (GEMV)";
  if (!t->on) return NULL;
  if (!kiln_opencl_gemv_covers(g)) return "gemv: M must be static and at most 4, B not transposed in place";
  if (t->vw != 4 && t->vw != 8 && t->vw != 16) return "gemv: vw must be 4, 8 or 16";
  if (t->nc < 1 || t->nc > 256) return "gemv: nc outside 1..256";
  if (t->nc % t->vw) return "gemv: vw must divide nc";
  if (t->wk < 1 || t->wk > 256 || (t->wk & (t->wk - 1))) return "gemv: wk must be a power of two up to 256";
  if ((int64_t)t->wk * g->M * t->nc > 8192) return "gemv: wk x M x nc partial sums past 32 KB of local memory";
  if ((int64_t)g->M * t->nc > 512) return "gemv: M x nc accumulators past the private budget";
  return NULL;
}

void kiln_opencl_gemv_launch(const kiln_template_gemm_t* g, const kiln_opencl_gemv_tiles_t* t, int64_t groups[3],
                             int64_t local[3]) {
  groups[0] = (g->N + t->nc - 1) / t->nc;
  groups[1] = 1;
  groups[2] = g->batch > 0 ? g->batch : 1;
  local[0] = t->wk;
  local[1] = local[2] = 1;
}

kiln_status_t kiln_opencl_gemv_print(const kiln_template_gemm_t* g, const kiln_opencl_gemv_tiles_t* t,
                                     const char* name, kiln_cf_out_t* out) {
  const char* bad = kiln_opencl_gemv_tiles_check(g, t);
  if (bad || !t->on)
    return kiln_make_status(KILN_INVALID_ARGUMENT, "opencl gemv '%s': %s", name,
                            bad ? bad : "the switch is off (the GEMM template prints it)");
  kiln_cf_out_printf(out, "/* kiln GEMV template: %lld x %lld x %lld */\n", (long long)g->M, (long long)g->N,
                     (long long)g->K);
  KILN_RETURN_IF_ERROR(print_shape(g, false, name, out));
  kiln_cf_out_printf(out, "#define VW %d\n#define NC %d\n#define WK %d\n", t->vw, t->nc, t->wk);
  print_end(kiln_cl_gemv, out);
  kiln_cf_out_puts(out, "#undef NC\n#undef WK\n");
  return NULL;
}

void kiln_opencl_gemm_describe(const kiln_template_gemm_t* g, kiln_program_gemm_t* out) {
  memset(out, 0, sizeof *out);
  int32_t a = -1, b = -1, y = -1;
  for (int32_t j = 0; j < g->n_params; ++j) {
    if (g->roles[j] == 'A') a = j;
    if (g->roles[j] == 'B') b = j;
    if (g->roles[j] == 'Y') y = j;
  }
  /* a library reads plain row-major f32 operands and overwrites Y: no
   * bias, residual or activation (those GEMMs run the template) */
  if (a < 0 || b < 0 || y < 0 || g->pack_t != 0 || g->has_bias || g->has_res || g->act || g->f16[a] || g->f16[b] ||
      g->f16[y])
    return;
  *out = (kiln_program_gemm_t){.valid = true,
                               .trans_a = g->trans_a,
                               .trans_b = g->trans_b,
                               .M = g->M,
                               .N = g->N,
                               .K = g->K,
                               .batch = g->batch,
                               .lda = g->lda,
                               .ldb = g->ldb,
                               .ldy = g->ldy,
                               .sa = g->sa,
                               .sb = g->sb,
                               .sy = g->sy,
                               .alpha = g->alpha,
                               .a = a,
                               .b = b,
                               .y = y};
}
