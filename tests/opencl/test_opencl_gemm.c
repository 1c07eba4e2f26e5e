/* The OpenCL GEMM template (kernels/opencl/gemm.cl) on device 0 over edge
 * shapes, transposes, bias broadcasts, alpha/beta, packed B and several
 * tile configurations, each instance checked against a double-precision
 * CPU product. Also the emitter's tile heuristic and launch geometry.
 *
 * f16 operands (fp16 storage): any of A, B, bias and Y half buffers. The
 * reference takes the f16 values of the inputs, so an f32 Y must match as
 * tightly as ever, and an f16 Y may differ by its own rounding only (half
 * an ulp: 2^-11 |ref|, plus the f32 slack): partial sums rounded to f16
 * between K slices would not fit that. */
#define _GNU_SOURCE
#include <errno.h>
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "kiln/runtime.h"
#include "runtime/opencl/opencl_device.h"
#include "runtime/opencl/opencl_gemm_provider.h"
#include "targets/opencl/opencl_internal.h"
#include "testing.h"
#include "graph_harness.h"

static kiln_allocator_t A(void) { return kiln_allocator_system(); }
static kiln_device_t* dev;

static uint64_t rng = 0x2545f4914f6cdd1dull;
static float frand(void) {
  rng ^= rng << 13;
  rng ^= rng >> 7;
  rng ^= rng << 17;
  return (float)((double)(rng >> 11) / (double)(1ull << 53) * 2.0 - 1.0);
}

static char* dupstr(kiln_program_t* p, const char* s) {
  char* o = NULL;
  KILN_ASSERT(!kiln_program_strdup(p, s, &o));
  return o;
}

typedef struct gcase_s {
  int M, N, K;
  bool ta, tb;
  int bias; /* 0 none, 1 [N], 2 [M,1], 3 [M,N], 4 scalar */
  float alpha, beta;
  int pack_t, pack_kbs; /* packed B: panel width, K block (0: plain) */
  kiln_opencl_gemm_tiles_t tiles; /* tm 0: the emitter's default */
  int provider; /* 0: the template; 1: the descriptor, CLBlast forced; 2: auto with a record */
} gcase_t;

/* A case with f16 operands. */
typedef struct hcase_s {
  gcase_t c;
  int f16;     /* half operands: H_A | H_B | H_C (bias) | H_Y */
  bool cancel; /* A >= 0, B > 0 for the first half of K and < 0 for the second */
} hcase_t;

enum { H_A = 1, H_B = 2, H_C = 4, H_Y = 8 };

/* |n| floats as the device holds them (half: 2 bytes each). */
static kiln_status_t upload(kiln_device_buffer_t* b, const float* v, size_t n, bool half) {
  if (!half) return dev->vt->buffer_write(dev, b, 0, v, sizeof(float) * n);
  uint16_t* h = malloc(sizeof(uint16_t) * (n + 1));
  for (size_t i = 0; i < n; ++i) h[i] = kiln_f32_to_f16(v[i]);
  kiln_status_t s = dev->vt->buffer_write(dev, b, 0, h, sizeof(uint16_t) * n);
  free(h);
  return s;
}

static char record_dir[] = "/tmp/kiln-test-gemm-provider-XXXXXX";

static void run_case_f16(const gcase_t* c, int f16, bool cancel) {
  const kiln_device_vtable_t* vt = dev->vt;
  const int M = c->M, N = c->N, K = c->K;
  kiln_template_gemm_t g;
  memset(&g, 0, sizeof g);
  g.M = M, g.N = N, g.K = K, g.batch = 1;
  g.trans_a = c->ta;
  g.lda = c->ta ? M : K;
  g.ldy = N;
  g.alpha = c->alpha;
  g.beta = c->beta;
  const kiln_opencl_gemm_tiles_t tiles = c->tiles.tm ? c->tiles : kiln_opencl_gemm_default_tiles(M, N, K);
  /* operands */
  float* a = malloc(sizeof(float) * (size_t)M * K);
  float* b = malloc(sizeof(float) * (size_t)K * N);
  for (int i = 0; i < M * K; ++i) a[i] = cancel ? fabsf(frand()) : frand();
  for (int i = 0; i < K * N; ++i) /* logical B[k][n] = b[k*N+n] */
    b[i] = cancel ? (i / N < K / 2 ? 1.0f : -1.0f) * (0.75f + 0.25f * frand()) : frand();
  size_t nbias = c->bias == 1 ? (size_t)N : c->bias == 2 ? (size_t)M : c->bias == 3 ? (size_t)M * N : 1;
  float* bias = malloc(sizeof(float) * nbias);
  for (size_t i = 0; i < nbias; ++i) bias[i] = frand();
  const bool ha = f16 & H_A, hb = f16 & H_B, hc = f16 & H_C, hy = f16 & H_Y;
  if (ha) round_f16_floats(a, (size_t)M * K);
  if (hb) round_f16_floats(b, (size_t)K * N);
  if (hc) round_f16_floats(bias, nbias);
  g.has_bias = c->bias != 0;
  g.bias_sm = c->bias == 2 ? 1 : c->bias == 3 ? N : 0;
  g.bias_sn = c->bias == 1 || c->bias == 3 ? 1 : 0;
  /* B storage: plain, transposed, or packed panels */
  size_t bsz = (size_t)K * N;
  float* bst = NULL;
  if (c->pack_t) {
    g.pack_t = c->pack_t;
    g.pack_kbs = c->pack_kbs;
    g.pack_nkb = (K + c->pack_kbs - 1) / c->pack_kbs;
    g.pack_tiles = (N + c->pack_t - 1) / c->pack_t;
    bsz = (size_t)g.pack_nkb * g.pack_tiles * g.pack_kbs * g.pack_t;
    bst = calloc(bsz, sizeof(float));
    for (int k = 0; k < K; ++k)
      for (int n = 0; n < N; ++n)
        bst[(((size_t)(k / g.pack_kbs) * g.pack_tiles + n / g.pack_t) * g.pack_kbs + k % g.pack_kbs) *
                g.pack_t + n % g.pack_t] = b[(size_t)k * N + n];
  } else {
    g.trans_b = c->tb;
    g.ldb = c->tb ? K : N;
    bst = malloc(sizeof(float) * bsz);
    for (int k = 0; k < K; ++k)
      for (int n = 0; n < N; ++n) bst[c->tb ? (size_t)n * K + k : (size_t)k * N + n] = b[(size_t)k * N + n];
  }
  float* ast = malloc(sizeof(float) * (size_t)M * K);
  for (int m = 0; m < M; ++m)
    for (int k = 0; k < K; ++k) ast[c->ta ? (size_t)k * M + m : (size_t)m * K + k] = a[(size_t)m * K + k];
  /* parameters in a non-canonical order: Y first, then B, bias, A */
  const char* roles = g.has_bias ? "YBCA" : "YBA";
  g.n_params = (int32_t)strlen(roles);
  memcpy(g.roles, roles, (size_t)g.n_params + 1);
  for (int32_t j = 0; j < g.n_params; ++j)
    g.f16[j] = (roles[j] == 'A' && ha) || (roles[j] == 'B' && hb) || (roles[j] == 'C' && hc) || (roles[j] == 'Y' && hy);

  kiln_cf_out_t out;
  kiln_cf_out_init(&out);
  CHECK_OK(kiln_opencl_gemm_print(&g, &tiles, "gemm_under_test", &out));
  kiln_program_t* p = NULL;
  KILN_ASSERT(!kiln_program_create(A(), &p));
  p->model_name = dupstr(p, "gemm_test");
  KILN_ASSERT(!kiln_allocator_malloc(A(), sizeof(kiln_program_kernel_t), "t", (void**)&p->kernels));
  p->n_kernels = 1;
  kiln_program_kernel_t* pk = &p->kernels[0];
  pk->name = dupstr(p, "gemm_under_test");
  pk->n_args = g.n_params;
  kiln_opencl_gemm_launch(&g, &tiles, pk->groups, pk->local);
  if (c->provider) {
    kiln_opencl_gemm_describe(&g, &pk->gemm);
    /* a library computes f32 operands only */
    CHECK_MSG(pk->gemm.valid == (!c->pack_t && !c->bias && !ha && !hb && !hy), "gemm %dx%dx%d: descriptor valid %d",
              M, N, K, (int)pk->gemm.valid);
    setenv("KILN_OPENCL_GEMM_PROVIDER", c->provider == 1 ? "clblast" : "auto", 1);
  }
  KILN_ASSERT(!kiln_allocator_malloc(A(), out.len + 1, "t", (void**)&p->code.text));
  memcpy(p->code.text, out.data, out.len + 1);
  p->code.text_len = out.len;
  kiln_cf_out_free(&out);

  kiln_device_executable_t* e = NULL;
  kiln_device_build_options_t bo = {.cache_dir = c->provider == 2 ? record_dir : NULL};
  kiln_device_buffer_t *ba = NULL, *bb = NULL, *bc = NULL, *by = NULL;
  float* y = malloc(sizeof(float) * (size_t)M * N);
  bool ran = false;
  if (CHECK_OK(vt->executable_create(dev, p, &bo, &e))) {
    if (c->provider) {
      kiln_opencl_build_stats_t st;
      kiln_opencl_executable_stats(e, &st);
      const bool lib = kiln_ocl_have_clblast();
      CHECK(st.n_gemm_choices == (lib && pk->gemm.valid));
      if (c->provider == 1) CHECK(st.n_gemm_clblast == (lib && pk->gemm.valid));
      if (c->provider == 2 && lib && pk->gemm.valid) {
        /* measured once, then read from the record */
        CHECK(st.n_gemm_measured == 1 && strstr(st.gemm_record, record_dir) == st.gemm_record);
        kiln_device_executable_t* e2 = NULL;
        if (CHECK_OK(vt->executable_create(dev, p, &bo, &e2))) {
          kiln_opencl_build_stats_t st2;
          kiln_opencl_executable_stats(e2, &st2);
          CHECK(st2.n_gemm_choices == 1 && st2.n_gemm_measured == 0 && st2.n_gemm_clblast == st.n_gemm_clblast);
          vt->executable_destroy(dev, e2);
        }
        FILE* f = fopen(st.gemm_record, "r");
        char shape[160], line[2048];
        kiln_ocl_gemm_shape_key(&pk->gemm, shape, sizeof shape);
        int lines = 0;
        while (f && fgets(line, sizeof line, f)) lines += strstr(line, shape) && strstr(line, "\tchoice ");
        if (f) fclose(f);
        CHECK_MSG(lines == 1, "record '%s': %d lines for %s", st.gemm_record, lines, shape);
      }
    }
    CHECK_OK(vt->buffer_create(dev, sizeof(float) * (size_t)M * K, "A", &ba));
    CHECK_OK(vt->buffer_create(dev, sizeof(float) * bsz, "B", &bb));
    CHECK_OK(vt->buffer_create(dev, sizeof(float) * nbias, "C", &bc));
    CHECK_OK(vt->buffer_create(dev, sizeof(float) * (size_t)M * N, "Y", &by));
    if (ba && bb && bc && by) {
      CHECK_OK(upload(ba, ast, (size_t)M * K, ha));
      CHECK_OK(upload(bb, bst, bsz, hb));
      CHECK_OK(upload(bc, bias, nbias, hc));
      kiln_device_buffer_t* args[4] = {by, bb, bc, ba};
      if (!g.has_bias) args[2] = ba;
      kiln_device_cmd_t* cmd = NULL;
      if (CHECK_OK(vt->cmd_create(dev, e, 0, &cmd))) {
        CHECK_OK(vt->cmd_dispatch(dev, cmd, 0, args, g.n_params));
        CHECK_OK(vt->cmd_end(dev, cmd));
        CHECK_OK(vt->submit(dev, cmd));
        ran = CHECK_OK(vt->wait(dev, cmd));
        vt->cmd_destroy(dev, cmd);
      }
      if (ran && !hy) CHECK_OK(vt->buffer_read(dev, by, 0, y, sizeof(float) * (size_t)M * N));
      if (ran && hy) {
        uint16_t* yh = malloc(sizeof(uint16_t) * (size_t)M * N);
        CHECK_OK(vt->buffer_read(dev, by, 0, yh, sizeof(uint16_t) * (size_t)M * N));
        for (size_t i = 0; i < (size_t)M * N; ++i) y[i] = kiln_f16_to_f32(yh[i]);
        free(yh);
      }
    }
  }
  if (ran) {
    double worst = 0;
    int wi = 0, wj = 0;
    for (int i = 0; i < M; ++i)
      for (int j = 0; j < N; ++j) {
        double ref = 0, mag = 0;
        for (int k = 0; k < K; ++k) {
          double t = (double)a[(size_t)i * K + k] * b[(size_t)k * N + j];
          ref += t;
          mag += fabs(t);
        }
        ref *= c->alpha;
        mag *= fabs(c->alpha);
        if (c->bias) {
          double bv = bias[(size_t)i * g.bias_sm + (size_t)j * g.bias_sn];
          ref += c->beta * bv;
          mag += fabs(c->beta * bv);
        }
        /* error over its limit: 1e-5 of the terms' magnitude (f32 sums in
         * another order), plus half an f16 ulp for an f16 Y */
        const double lim = 1e-5 * (mag > 1e-20 ? mag : 1.0) + (hy ? ldexp(fabs(ref), -11) : 0.0);
        double err = fabs(y[(size_t)i * N + j] - ref) / lim;
        if (!(err <= worst)) worst = err, wi = i, wj = j;
      }
    CHECK_MSG(worst <= 1.0,
              "gemm %dx%dx%d ta %d tb %d bias %d pack %d/%d tiles %d,%d,%d,%d,%d,%d,%d,%d f16 %d%s: error %g of the "
              "limit at [%d,%d]",
              M, N, K, c->ta, c->tb, c->bias, c->pack_t, c->pack_kbs, tiles.tm, tiles.tn, tiles.vw,
              tiles.wx, tiles.wy, tiles.bk, tiles.mm, tiles.mn, f16, cancel ? " cancelling" : "",
              worst, wi, wj);
  }
  vt->buffer_destroy(dev, ba);
  vt->buffer_destroy(dev, bb);
  vt->buffer_destroy(dev, bc);
  vt->buffer_destroy(dev, by);
  vt->executable_destroy(dev, e);
  kiln_program_destroy(p);
  free(a), free(b), free(bias), free(bst), free(ast), free(y);
  if (c->provider) unsetenv("KILN_OPENCL_GEMM_PROVIDER");
}

static void run_case(const gcase_t* c) { run_case_f16(c, 0, false); }

static void test_shapes_default_tiles(void) {
  const gcase_t cases[] = {
      {1, 1, 1, 0, 0, 0, 1, 0, 0, 0, {0}, 0},      {1, 1000, 512, 0, 0, 1, 1, 1, 0, 0, {0}, 0},
      {7, 5, 3, 0, 0, 0, 1, 0, 0, 0, {0}, 0},      {64, 128, 128, 0, 0, 0, 1, 0, 0, 0, {0}, 0},
      {65, 129, 130, 0, 0, 0, 1, 0, 0, 0, {0}, 0}, {100, 70, 600, 0, 0, 3, 0.5f, 2.0f, 0, 0, {0}, 0},
      {33, 17, 45, 1, 0, 2, 1, 1, 0, 0, {0}, 0},   {33, 17, 45, 0, 1, 4, 1, -1, 0, 0, {0}, 0},
      {40, 90, 77, 1, 1, 1, 2, 0.5f, 0, 0, {0}, 0}, {196, 256, 288, 0, 0, 1, 1, 1, 0, 0, {0}, 0},
  };
  for (size_t i = 0; i < sizeof cases / sizeof cases[0]; ++i) run_case(&cases[i]);
}

static void test_packed_b(void) {
  const gcase_t cases[] = {
      {50, 70, 130, 0, 0, 0, 1, 0, 32, 130, {0}, 0},   /* one K block (rank-4 layout) */
      {9, 90, 600, 0, 0, 1, 0.5f, 2, 32, 300, {0}, 0}, /* K blocked (rank-5) */
      {20, 40, 97, 0, 0, 0, 1, 0, 16, 50, {0}, 0},     /* ragged last K block, 16-wide panels */
  };
  for (size_t i = 0; i < sizeof cases / sizeof cases[0]; ++i) run_case(&cases[i]);
}

static void test_tile_configs(void) {
  const kiln_opencl_gemm_tiles_t tl[] = {
      {8, 32, 16, 2, 4, 64, 1, 1}, {4, 16, 8, 4, 2, 32, 2, 2}, {3, 8, 4, 2, 2, 20, 1, 3},
      {1, 1, 1, 1, 1, 7, 1, 1},    {8, 32, 16, 1, 1, 256, 8, 4}, {5, 12, 4, 3, 1, 48, 2, 1},
  };
  for (size_t i = 0; i < sizeof tl / sizeof tl[0]; ++i) {
    gcase_t c = {71, 53, 150, 0, 0, 1, 1, 1, 0, 0, tl[i], 0};
    run_case(&c);
    gcase_t d = {37, 64, 64, 1, 1, 0, 1, 0, 0, 0, tl[i], 0};
    run_case(&d);
  }
}

/* The GEMM descriptor and its providers: CLBlast forced (results as the
 * template's), and auto (timed once, recorded, read back); packed B and
 * bias get no descriptor. */
static void test_providers(void) {
  if (!mkdtemp(record_dir)) {
    CHECK_MSG(false, "mkdtemp: %s", strerror(errno));
    return;
  }
  const gcase_t cases[] = {
      {64, 96, 80, 0, 0, 0, 1, 0, 0, 0, {0}, 1},  {33, 17, 45, 1, 0, 0, 1, 0, 0, 0, {0}, 1},
      {40, 90, 77, 1, 1, 0, 2, 0, 0, 0, {0}, 1},  {37, 64, 64, 0, 1, 0, 0.5f, 0, 0, 0, {0}, 1},
      {128, 64, 96, 0, 0, 0, 1, 0, 0, 0, {0}, 2}, {50, 70, 130, 0, 0, 0, 1, 0, 32, 130, {0}, 2},
      {71, 53, 150, 0, 0, 1, 1, 1, 0, 0, {0}, 2},
  };
  for (size_t i = 0; i < sizeof cases / sizeof cases[0]; ++i) run_case(&cases[i]);
  char cmd[128];
  snprintf(cmd, sizeof cmd, "rm -rf '%s'", record_dir);
  CHECK(system(cmd) == 0);
}

/* f16 operands, alone and together; an f16 Y over several K slices (the
 * private f32 partial sums), cancelling sums, packed B, transposes, vector
 * widths 4 and 1 (edge lanes one by one), the descriptor refused. */
static void test_f16_operands(void) {
  const kiln_opencl_gemm_tiles_t v4 = {3, 8, 4, 2, 2, 20, 1, 3}, v1 = {1, 1, 1, 1, 1, 7, 1, 1};
  const hcase_t cases[] = {
      {{64, 128, 128, 0, 0, 0, 1, 0, 0, 0, {0}, 0}, H_A | H_B | H_Y, false},
      {{65, 129, 130, 0, 0, 3, 1, 1, 0, 0, {0}, 0}, H_A | H_B | H_C | H_Y, false},
      {{100, 70, 600, 0, 0, 1, 0.5f, 2.0f, 0, 0, {0}, 0}, H_A | H_B | H_C | H_Y, true},
      {{100, 70, 600, 0, 0, 0, 1, 0, 0, 0, {0}, 0}, H_A, true},
      {{100, 70, 600, 0, 0, 0, 1, 0, 0, 0, {0}, 0}, H_B, true},
      {{1, 1000, 512, 0, 0, 1, 1, 1, 0, 0, {0}, 0}, H_A | H_B | H_C, false},
      {{33, 17, 45, 1, 0, 2, 1, 1, 0, 0, {0}, 0}, H_A | H_Y, false},
      {{40, 90, 77, 1, 1, 1, 2, 0.5f, 0, 0, {0}, 0}, H_A | H_B | H_C | H_Y, false},
      {{9, 90, 600, 0, 0, 1, 0.5f, 2, 32, 300, {0}, 0}, H_B | H_C | H_Y, true},
      {{20, 40, 97, 0, 0, 0, 1, 0, 16, 50, {0}, 0}, H_A | H_B | H_Y, false},
      {{71, 53, 150, 0, 0, 1, 1, 1, 0, 0, v4, 0}, H_A | H_B | H_C | H_Y, true},
      {{37, 64, 64, 1, 1, 0, 1, 0, 0, 0, v1, 0}, H_A | H_B | H_Y, false},
      {{64, 96, 80, 0, 0, 0, 1, 0, 0, 0, {0}, 1}, H_A | H_B, false},
  };
  for (size_t i = 0; i < sizeof cases / sizeof cases[0]; ++i) run_case_f16(&cases[i].c, cases[i].f16, cases[i].cancel);
}

static void test_heuristic(void) {
  kiln_opencl_gemm_tiles_t t = kiln_opencl_gemm_default_tiles(1024, 1024, 1024);
  CHECK(t.tn % t.vw == 0 && t.bk == 128 && t.tm == 8);
  t = kiln_opencl_gemm_default_tiles(3136, 64, 576);
  CHECK(576 % t.bk == 0 && t.bk % t.vw == 0);
  t = kiln_opencl_gemm_default_tiles(1, 10, 3);
  CHECK(t.tm == 1 && t.bk >= 3 && t.tn % t.vw == 0);
  /* launch covers the output with the work-group size of the tiles */
  kiln_template_gemm_t g = {.M = 100, .N = 70, .K = 5, .batch = 1};
  kiln_opencl_gemm_tiles_t gt = {8, 32, 16, 2, 1, 16, 2, 1};
  int64_t gr[3], lo[3];
  kiln_opencl_gemm_launch(&g, &gt, gr, lo);
  CHECK(lo[0] == 2 && lo[1] == 1 && lo[2] == 1);
  CHECK(gr[0] * 2 * 32 >= 70 && gr[1] * 16 >= 100 && gr[2] == 1);
  /* bad tiles are an error, not bad code */
  kiln_cf_out_t out;
  kiln_cf_out_init(&out);
  gt.tn = 20;
  g.n_params = 3;
  memcpy(g.roles, "ABY", 4);
  CHECK_ERR(kiln_opencl_gemm_print(&g, &gt, "bad", &out), KILN_INVALID_ARGUMENT, "bad tiles");
  kiln_cf_out_free(&out);
  /* tuning overrides: valid tiles replace, anything else leaves them */
  kiln_opencl_gemm_tiles_t o = {8, 32, 16, 1, 1, 128, 8, 4};
  setenv("KILN_OPENCL_GEMM_TILES", "4,16,8,2,2,32,1,2", 1);
  CHECK(kiln_opencl_tiles_from_env("KILN_OPENCL_GEMM_TILES", &o) && o.tm == 4 && o.tn == 16 && o.vw == 8 &&
        o.wx == 2 && o.wy == 2 && o.bk == 32 && o.mm == 1 && o.mn == 2);
  static const char* const bad[] = {"", "4,16,8", "4,16,5,2,2,32,1,2", "0,16,8,2,2,32,1,2", "a,b,c,d,e,f,g,h"};
  for (size_t i = 0; i < sizeof bad / sizeof bad[0]; ++i) {
    setenv("KILN_OPENCL_GEMM_TILES", bad[i], 1);
    kiln_opencl_gemm_tiles_t keep = o;
    CHECK_MSG(!kiln_opencl_tiles_from_env("KILN_OPENCL_GEMM_TILES", &o) && !memcmp(&keep, &o, sizeof o),
              "'%s' must leave the tiles", bad[i]);
  }
  unsetenv("KILN_OPENCL_GEMM_TILES");
}

int main(void) {
  if (!(dev = open_opencl_device_0())) return 1;
  RUN(test_heuristic);
  RUN(test_shapes_default_tiles);
  RUN(test_packed_b);
  RUN(test_tile_configs);
  RUN(test_providers);
  RUN(test_f16_operands);
  kiln_device_release(dev);
  return kiln_test_finish();
}
