/* The Vulkan GEMM/conv shaders follow the device's features: a device
 * without shaderInt64 gets no 64-bit words (A64 = B64 = W64 = 0), one
 * without subgroup ballot the shared-memory tiles (SHARED 1); with ballot
 * the MatMul and both Convs read vec4 texels (TEXEL 1: tile mode 4, int64
 * or not; the 16-channel Conv too since mode 4 serves convs of up to 16
 * channels), and with the convs' tiles set to mode 2
 * (KILN_SPIRV_CONV_TILES) they read 64-bit words where int64 is there.
 * lavapipe has
 * both; KILN_VULKAN_FEATURES=no-int64,no-subgroup hides them where the
 * device info is filled (runtime/vulkan/vulkan_build.c), and the compile
 * (kiln_compiler_*, which asks the target's device: api/driver.c) must then
 * pick the conservative shaders. Per mode: the device info, the #defines of
 * the dumped GLSL, and the results of a MatMul and a Conv on the device
 * against loops here. KILN_VULKAN_FEATURES=texels=N lowers the device's
 * maxTexelBufferElements to N: a kernel whose texel-read buffers hold more
 * vec4 texels must be compiled without texel reads (and still run). With
 * --precision fp16 the convs read their f16 weights and input as rgba16f
 * texels, and as f16 storage buffers where the device has none
 * (no-texel-f16). */
#include "../bad_model_util.h" /* first: it defines _GNU_SOURCE */

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "kiln/compiler.h"
#include "kiln/runtime.h"
#include "runtime/device.h"
#include "runtime/vulkan/vulkan_texel.h"
#include "testing.h"

enum { GM = 16, GK = 64, GN = 48, CC = 8, CH = 12, CM = 16, CM2 = 40, CO = CH - 2 };

static char g_dir[512];
static char g_model[600];
static const char* g_precision; /* the compile's --precision (NULL: fp32) */
static double g_tol = 1e-4;     /* relative, as |got - want| <= g_tol (1 + |want|) */

/* Y = X * W (X [16,64], W [64,48]); Z = Conv(I [1,8,12,12], V [16,8,3,3]);
 * Z2 = Conv(I, V2 [40,8,3,3]) (channels past 32 in a zero-padded panel) */
static void write_model(void) {
  bm_model_t b;
  bm_init(&b, 13);
  int64_t xd[2] = {GM, GK}, id[4] = {1, CC, CH, CH};
  b.g.input[b.g.n_input++] = bm_value(&b, "X", BM_F32, 2, xd, NULL);
  b.g.input[b.g.n_input++] = bm_value(&b, "I", BM_F32, 4, id, NULL);
  int64_t wd[2] = {GK, GN}, vd[4] = {CM, CC, 3, 3}, v2d[4] = {CM2, CC, 3, 3};
  bm_init_f32(&b, "W", 2, wd);
  bm_init_f32(&b, "V", 4, vd);
  bm_init_f32(&b, "V2", 4, v2d);
  bm_node(&b, "MatMul", "mm", "X,W", "Y");
  bm_node(&b, "Conv", "conv", "I,V", "Z");
  bm_node(&b, "Conv", "conv2", "I,V2", "Z2");
  bm_output(&b, "Y");
  bm_output(&b, "Z");
  bm_output(&b, "Z2");
  snprintf(g_model, sizeof g_model, "%s/mm_conv.onnx", g_dir);
  CHECK(bm_write(&b, g_model));
  bm_free(&b);
}

static float init_at(int64_t i) { return 0.5f * (float)(i % 7 + 1); } /* bm_init_f32's values */
static float x_at(int64_t i) { return (float)(i % 11) * 0.125f - 0.5f; }

/* outputs of Conv(I, V) with |cm| channels that differ from loops here */
static int conv_bad(const float* z, int cm) {
  int bad = 0;
  for (int o = 0; o < cm; ++o)
    for (int p = 0; p < CO; ++p)
      for (int q = 0; q < CO; ++q) {
        double want = 0;
        for (int c = 0; c < CC; ++c)
          for (int i = 0; i < 3; ++i)
            for (int j = 0; j < 3; ++j)
              want += (double)x_at((c * CH + p + i) * CH + q + j + 3) * init_at(((o * CC + c) * 3 + i) * 3 + j);
        bad += fabs(z[(o * CO + p) * CO + q] - want) > g_tol * (1 + fabs(want));
      }
  return bad;
}

static void run_and_compare(const void* data, size_t n, const char* mode) {
  kiln_allocator_t al = kiln_allocator_system();
  kiln_module_t* m = NULL;
  kiln_device_t* d = NULL;
  kiln_session_t* s = NULL;
  kiln_array_t in[2] = {{0}}, out[3] = {{0}};
  int64_t xd[2] = {GM, GK}, id[4] = {1, CC, CH, CH};
  kiln_shape_t xs = kiln_shape_make(2, xd), is = kiln_shape_make(4, id);
  if (!CHECK_OK(kiln_module_load_memory(data, n, "mm_conv", al, &m))) return;
  if (CHECK_OK(kiln_array_alloc(al, KILN_DTYPE_F32, &xs, &in[0])) &&
      CHECK_OK(kiln_array_alloc(al, KILN_DTYPE_F32, &is, &in[1]))) {
    for (int64_t i = 0; i < GM * GK; ++i) ((float*)in[0].data)[i] = x_at(i);
    for (int64_t i = 0; i < CC * CH * CH; ++i) ((float*)in[1].data)[i] = x_at(i + 3);
    if (CHECK_OK(kiln_device_open("vulkan", NULL, al, &d))) CHECK_OK(kiln_session_create(m, d, NULL, &s));
  }
  if (s && CHECK_OK(kiln_session_run(s, in, out))) {
    const float* y = out[0].data;
    int bad = 0;
    for (int r = 0; r < GM; ++r)
      for (int c = 0; c < GN; ++c) {
        double want = 0;
        for (int k = 0; k < GK; ++k) want += (double)x_at(r * GK + k) * init_at(k * GN + c);
        bad += fabs(y[r * GN + c] - want) > g_tol * (1 + fabs(want));
      }
    CHECK_MSG(bad == 0, "%s: MatMul: %d of %d outputs differ from the reference", mode, bad, GM * GN);
    bad = conv_bad(out[1].data, CM);
    CHECK_MSG(bad == 0, "%s: Conv: %d of %d outputs differ from the reference", mode, bad, CM * CO * CO);
    bad = conv_bad(out[2].data, CM2);
    CHECK_MSG(bad == 0, "%s: Conv (40 channels): %d of %d outputs differ from the reference", mode, bad,
              CM2 * CO * CO);
  }
  for (int i = 0; i < 3; ++i) {
    if (i < 2) kiln_array_free(al, &in[i]);
    kiln_array_free(al, &out[i]);
  }
  kiln_session_destroy(s);
  kiln_device_release(d);
  kiln_module_release(m);
}

/* The test model compiled for vulkan with its shaders dumped into |dump|
 * (made here: kiln writes into an existing folder): the dumped GLSL
 * (malloc'd) and, in *out, the compiler, left NULL when the compile
 * failed (a failed check naming |mode|). */
static char* compile_dump(const char* dump, const char* mode, kiln_compiler_t** out) {
  *out = NULL;
  CHECK(mkdir(dump, 0755) == 0);
  kiln_compiler_t* c = NULL;
  if (!CHECK_OK(kiln_compiler_create(KILN_COMPILER_ABI_VERSION, &c))) return NULL;
  CHECK_OK(kiln_compiler_load_model(c, g_model));
  CHECK_OK(kiln_compiler_set_option(c, "target", "vulkan"));
  CHECK_OK(kiln_compiler_set_option(c, "dump", dump));
  if (g_precision) CHECK_OK(kiln_compiler_set_option(c, "precision", g_precision));
  if (!CHECK_OK(kiln_compiler_compile(c))) {
    kiln_compiler_destroy(c);
    return NULL;
  }
  *out = c;
  char path[700];
  snprintf(path, sizeof path, "%s/kernels.comp", dump);
  char* glsl = kiln_test_read_text(path);
  CHECK_MSG(glsl != NULL, "%s: no %s", mode, path);
  return glsl;
}

/* Compiler |c|'s module (none after a failed compile) run on the device
 * against the reference; |c| destroyed. */
static void run_module(kiln_compiler_t* c, const char* mode) {
  const void* data = NULL;
  size_t n = 0;
  if (c && CHECK_OK(kiln_compiler_module(c, &data, &n))) run_and_compare(data, n, mode);
  kiln_compiler_destroy(c);
}

/* |hide|: KILN_VULKAN_FEATURES (NULL: unset); the features the device must
 * then report and the shader modes the compile must pick. */
/* |conv_tiles|: KILN_SPIRV_CONV_TILES for the compile (NULL: the defaults,
 * whose convs read texels and no 64-bit words) */
static void check_mode_tiles(const char* hide, bool int64, bool ballot, int texels, uint64_t max_texels,
                             const char* conv_tiles) {
  const char* mode = hide ? hide : conv_tiles ? conv_tiles : "all features";
  kiln_test_setenv("KILN_VULKAN_FEATURES", hide);
  kiln_test_setenv("KILN_SPIRV_CONV_TILES", conv_tiles);
  kiln_device_t* d = NULL;
  if (!CHECK_OK(kiln_device_open("vulkan", NULL, kiln_allocator_system(), &d))) return;
  const bool has64 = d->info.shader_int64, hasb = d->info.subgroup_ballot;
  const uint64_t maxt = d->info.max_texels;
  kiln_device_release(d);
  CHECK_MSG(max_texels ? maxt == max_texels : maxt >= 65536, "%s: device reports %llu texels", mode,
            (unsigned long long)maxt);
  if (hide) {
    CHECK_MSG(has64 == int64 && hasb == ballot, "%s: device reports int64 %d ballot %d", mode, has64, hasb);
  } else if (!has64 || !hasb) {
    printf("  (this device lacks int64 %d / ballot %d: default mode checked as such)\n", !has64, !hasb);
    int64 = has64;
    ballot = hasb;
  }
  char dump[600];
  snprintf(dump, sizeof dump, "%s/dump-%s", g_dir, hide ? hide : conv_tiles ? "mode2" : "all");
  kiln_compiler_t* c = NULL;
  char* glsl = compile_dump(dump, mode, &c);
  if (glsl) {
    /* both templates matched: the GEMM's and the conv's #define blocks */
    CHECK_MSG(strstr(glsl, "#define B_MODE") && strstr(glsl, "#define CPLANE"), "%s: GEMM and conv shaders", mode);
    /* each instance's block names its mode (gemm.comp's own fallback
     * "#define SHARED 1" under #ifndef SHARED is counted too) */
    const int n1 = kiln_test_count(glsl, "#define SHARED 1\n"), n2 = kiln_test_count(glsl, "#define SHARED 2\n");
    CHECK_MSG(ballot ? n2 == 3 : n2 == 0 && n1 >= 3, "%s: SHARED 1 x %d, SHARED 2 x %d", mode, n1, n2);
    const int nt = kiln_test_count(glsl, "#define TEXEL 1\n");
    CHECK_MSG(nt == (ballot ? texels : 0), "%s: TEXEL 1 x %d", mode, nt);
    const bool words = strstr(glsl, "#define A64 1") || strstr(glsl, "#define B64 1") ||
                       strstr(glsl, "#define W64 1");
    CHECK_MSG(words == (int64 && ballot && conv_tiles != NULL), "%s: 64-bit words %d", mode, words);
    free(glsl);
  }
  run_module(c, mode);
}

static void check_mode_texels(const char* hide, bool int64, bool ballot, int texels, uint64_t max_texels) {
  check_mode_tiles(hide, int64, ballot, texels, max_texels, NULL);
}

static void check_mode(const char* hide, bool int64, bool ballot) { check_mode_texels(hide, int64, ballot, 3, 0); }

static void test_default(void) { check_mode(NULL, true, true); }
static void test_no_int64(void) { check_mode("no-int64", false, true); }
static void test_conservative(void) { check_mode("no-int64,no-subgroup", false, false); }
/* texels of the texel-read buffers: the MatMul's X 256 and packed W 1024,
 * the convs' planes 308, the 16-channel conv's weights 576 (one 32-channel
 * panel) and the 40-channel conv's 1152 (two) */
static void test_texel_limit(void) {
  check_mode_texels("texels=1100", true, true, 2, 1100); /* the 40-channel conv's weights exceed it */
  check_mode_texels("texels=512", true, true, 0, 512);   /* all exceed it */
}
/* the convs in mode 2 (16 channels x 4 positions): 64-bit weight words
 * where the device has int64, the MatMul still reading texels */
static void test_mode2_words(void) { check_mode_tiles(NULL, true, true, 1, 0, "16,32,2,16,4,2"); }

/* The 3x3 convs as Winograd instances (kernels/vulkan/winograd.comp, no
 * subgroup or 64-bit modes): vec4 texel reads by default, storage-buffer
 * reads where the device's texel buffers are too small for the 40-channel
 * conv's U (48 channels x 16 x 8 = 1536 texels); results checked both ways. */
static void check_winograd_cr(const char* hide, int texels, const char* kind, const char* cr, const char* also) {
  const char* mode = hide ? hide : "all features";
  kiln_test_setenv("KILN_VULKAN_FEATURES", hide);
  char dump[600];
  snprintf(dump, sizeof dump, "%s/dump-wino%c-%s-cr%c-y%c", g_dir, kind[2], hide ? hide : "all", cr[11],
           also ? also[15] : 'n');
  kiln_compiler_t* c = NULL;
  char* glsl = compile_dump(dump, mode, &c);
  if (glsl) {
    const int nw = kiln_test_count(glsl, "// kiln winograd '"), nt = kiln_test_count(glsl, "#define TEXEL 1\n");
    CHECK_MSG(nw == 2 && kiln_test_count(glsl, kind) == 2, "%s: %d Winograd instances, expected 2 of %s", mode, nw, kind);
    /* the MatMul's texels, and the Winograd instances' where they fit */
    CHECK_MSG(nt == 1 + texels, "%s: TEXEL 1 x %d, expected %d", mode, nt, 1 + texels);
    /* 8 input channels: 2 a loop trip (CR 2), 1 with KILN_SPIRV_CONV_KREUSE=off */
    CHECK_MSG(kiln_test_count(glsl, cr) == 2, "%s: %d Winograd instances with %s", mode, kiln_test_count(glsl, cr), cr);
    CHECK_MSG(!also || kiln_test_count(glsl, also) == 2, "%s: %d Winograd instances with %s", mode,
              also ? kiln_test_count(glsl, also) : 0, also ? also : "");
    free(glsl);
  }
  run_module(c, mode);
}

static void check_winograd(const char* hide, int texels, const char* kind) {
  /* 10 columns: f32 outputs stored as pairs (no texel stores: rows of
   * whole texels only) */
  check_winograd_cr(hide, texels, kind, "#define CR 2\n", "#define Y_VEC2 1\n");
}

static void test_winograd(void) {
  unsetenv("KILN_SPIRV_WINOGRAD");
  check_winograd(NULL, 2, "F(2x2,3x3)");
  check_winograd("texels=1100", 1, "F(2x2,3x3)"); /* the 16-channel conv's U, 512 texels, fits */
  /* F(4x4, 3x3): 10x10 outputs in 4x4 tiles (the patches' rows and
   * columns past the plane zeroed); U of 16 x 36 x 8 = 1152 texels for
   * the 16-channel conv, so both read storage buffers at texels=1100 */
  setenv("KILN_SPIRV_WINOGRAD", "f4", 1);
  check_winograd(NULL, 2, "F(4x4,3x3)");
  check_winograd("texels=1100", 0, "F(4x4,3x3)");
  /* one input channel a loop trip, both transforms */
  setenv("KILN_SPIRV_CONV_KREUSE", "off", 1);
  check_winograd_cr(NULL, 2, "F(4x4,3x3)", "#define CR 1\n", NULL);
  unsetenv("KILN_SPIRV_WINOGRAD");
  check_winograd_cr(NULL, 2, "F(2x2,3x3)", "#define CR 1\n", NULL);
  unsetenv("KILN_SPIRV_CONV_KREUSE");
  /* one float a store (KILN_SPIRV_YSTORE=scalar), F(2x2) and F(4x4) */
  setenv("KILN_SPIRV_YSTORE", "scalar", 1);
  check_winograd_cr(NULL, 2, "F(2x2,3x3)", "#define CR 2\n", "#define Y_VEC2 0\n#define CRT");
  setenv("KILN_SPIRV_WINOGRAD", "f4", 1);
  check_winograd_cr(NULL, 2, "F(4x4,3x3)", "#define CR 2\n", "#define Y_VEC2 0\n#define CRT");
  unsetenv("KILN_SPIRV_YSTORE");
  setenv("KILN_SPIRV_WINOGRAD", "off", 1);
}

/* --precision fp16 (the implicit-GEMM convs): f16 weights and input read
 * as rgba16f texels (conv.comp TEXEL_W16 / TEXEL_X16) in both convs, in
 * the 16-channel one only where the 40-channel one's weights (1152 texels
 * of 4 halves) exceed texels=1100, in neither without rgba16f storage
 * texel buffers; the MatMul's f16 operands are storage buffers throughout.
 * The values are exact in f16 and the sums f32: the outputs' f16 rounding
 * (2^-11 relative) is the error. */
static void check_fp16(const char* hide, int texels) {
  const char* mode = hide ? hide : "fp16, all features";
  kiln_test_setenv("KILN_VULKAN_FEATURES", hide);
  kiln_test_setenv("KILN_SPIRV_CONV_TILES", NULL); /* the default tiles: mode 4 */
  char dump[600];
  snprintf(dump, sizeof dump, "%s/dump-fp16-%s", g_dir, hide ? hide : "all");
  g_precision = "fp16";
  g_tol = 2e-3;
  kiln_compiler_t* c = NULL;
  char* glsl = compile_dump(dump, mode, &c);
  if (glsl) {
    const int nt = kiln_test_count(glsl, "#define TEXEL 1\n"), nw = kiln_test_count(glsl, "#define TEXEL_W16 1\n"),
              nx = kiln_test_count(glsl, "#define TEXEL_X16 1\n");
    CHECK_MSG(strstr(glsl, "#define TW float16_t\n") && strstr(glsl, "#define TX float16_t\n"), "%s: f16 convs", mode);
    CHECK_MSG(nt == texels && nw == texels && nx == texels, "%s: TEXEL 1 x %d, TEXEL_W16 1 x %d, TEXEL_X16 1 x %d, "
              "expected %d each", mode, nt, nw, nx, texels);
    free(glsl);
  }
  run_module(c, mode);
  g_precision = NULL;
  g_tol = 1e-4;
}

static void test_fp16_texels(void) {
  check_fp16(NULL, 2);
  check_fp16("texels=1100", 1);
  check_fp16("no-texel-f16", 0);
}

/* The texel bindings the device reads from a kernel's SPIR-V and the view
 * format it binds there (vulkan_texel.c): a storage buffer image of format
 * rgba32f (1) or rgba16f (2) at binding 3, a sampled one at binding 5 (no
 * format), and a storage one of rgba8 (4), which no kiln shader declares:
 * UNSUPPORTED naming the kernel. */
enum { TEXEL_WORDS = 5 + 45 }; /* the header and the 9 instructions below */
static void texel_words(uint32_t format, uint32_t* w) {
  const uint32_t head[5] = {0x07230203u, 0x00010300u, 0, 16, 0};
  const uint32_t body[] = {
      (4u << 16) | 71, 10, 33, 3,                  /* OpDecorate %10 Binding 3 */
      (4u << 16) | 71, 13, 33, 5,                  /* OpDecorate %13 Binding 5 */
      (9u << 16) | 25, 2, 1, 5, 0, 0, 0, 2, format, /* OpTypeImage %2 %1 Buffer .. storage, format */
      (4u << 16) | 32, 3, 0, 2,                    /* OpTypePointer %3 UniformConstant %2 */
      (4u << 16) | 59, 3, 10, 0,                   /* OpVariable %3 %10 */
      (9u << 16) | 25, 4, 1, 5, 0, 0, 0, 1, 0,     /* OpTypeImage %4 %1 Buffer .. sampled, Unknown */
      (3u << 16) | 27, 11, 4,                      /* OpTypeSampledImage %11 %4 */
      (4u << 16) | 32, 12, 0, 11,                  /* OpTypePointer %12 UniformConstant %11 */
      (4u << 16) | 59, 12, 13, 0,                  /* OpVariable %12 %13 */
  };
  _Static_assert(sizeof head + sizeof body == TEXEL_WORDS * sizeof(uint32_t), "TEXEL_WORDS");
  memcpy(w, head, sizeof head);
  memcpy(w + 5, body, sizeof body);
}

static void test_texel_formats(void) {
  uint32_t w[TEXEL_WORDS];
  uint64_t t = 0, st = 0, h = 0;
  texel_words(2, w);
  CHECK_OK(kiln_vk_texel_bindings(w, TEXEL_WORDS, "k", &t, &st, &h));
  CHECK_MSG(t == 1ull << 5 && st == 1ull << 3 && h == 1ull << 3, "rgba16f: texel %llx storage %llx half %llx",
            (unsigned long long)t, (unsigned long long)st, (unsigned long long)h);
  texel_words(1, w);
  CHECK_OK(kiln_vk_texel_bindings(w, TEXEL_WORDS, "k", &t, &st, &h));
  CHECK_MSG(t == 1ull << 5 && st == 1ull << 3 && h == 0, "rgba32f: texel %llx storage %llx half %llx",
            (unsigned long long)t, (unsigned long long)st, (unsigned long long)h);
  texel_words(4, w);
  CHECK_ERR(kiln_vk_texel_bindings(w, TEXEL_WORDS, "kern4", &t, &st, &h), KILN_UNSUPPORTED, "kern4");
}

int main(void) {
  if (!bm_tmpdir("vulkan_features", g_dir, sizeof g_dir)) {
    fprintf(stderr, "cannot create a temp folder\n");
    return 1;
  }
  write_model();
  /* the implicit-GEMM conv's modes first (3x3 convs would be Winograd
   * instances, which have none: test_winograd) */
  setenv("KILN_SPIRV_WINOGRAD", "off", 1);
  RUN(test_texel_formats);
  RUN(test_default);
  RUN(test_no_int64);
  RUN(test_conservative);
  RUN(test_texel_limit);
  RUN(test_mode2_words);
  RUN(test_fp16_texels);
  RUN(test_winograd);
  unsetenv("KILN_SPIRV_WINOGRAD");
  unsetenv("KILN_VULKAN_FEATURES");
  unsetenv("KILN_SPIRV_CONV_TILES");
  bm_rmtree(g_dir);
  return kiln_test_finish();
}
