/* Winograd F(2x2, 3x3) and F(4x4, 3x3) instances of the conv template for the Vulkan
 * target (kernels/vulkan/winograd.comp): tiles, weight geometry and the
 * printed instance. Which convs it covers and the weight transform are
 * lowering's (lowering/template.h, template_weights.c); where it wins is
 * the set's rule (kiln_spirv_templates). */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "targets/vulkan/vulkan_internal.h"

static int32_t rows_by_shape(const kiln_template_conv_t* c, const kiln_vulkan_wino_tiles_t* t) {
  if (t->wf <= 0 || t->nt < 2) return 1;
  const int64_t tw = (c->ow + t->wf - 1) / t->wf, th = (c->oh + t->wf - 1) / t->wf;
  if (tw >= t->nt) return 1; /* a row fills an invocation: the row form (56x56's 14 tiles a row too) */
  const int64_t one = th * ((tw + t->nt - 1) / t->nt), two = (th + 1) / 2 * ((tw + t->nt / 2 - 1) / (t->nt / 2));
  return two < one ? 2 : 1;
}

int32_t kiln_vulkan_wino_tile_rows(const kiln_template_conv_t* c, const kiln_vulkan_wino_tiles_t* t) {
  /* two tile rows of NT / 2 where a row of tiles is shorter than NT and
   * they leave fewer invocations than one row of NT: F(4x4)'s 2x2 tiles of a 7x7 plane (ResNet-18's layer4) fill
   * one invocation where the row form took two, each half idle; where
   * both take as many (13x13, 9x9, F(2x2) on 7x7) the row form, which
   * keeps its texel stores. KILN_SPIRV_WINO_ROWS=1|2 takes that form. */
  const char* env = getenv("KILN_SPIRV_WINO_ROWS");
  if (env && (!strcmp(env, "1") || !strcmp(env, "2"))) return env[0] - '0';
  return rows_by_shape(c, t);
}

kiln_vulkan_wino_tiles_t kiln_vulkan_wino_default_tiles(const kiln_template_t* w) {
  /* lavapipe, ResNet-18's 3x3 convs (64..512 channels, 56x56..7x7), one
   * run per tile choice under chrt at load 11-20 (README, Vulkan row):
   * 8 channels x 4 tiles 3.0-3.6 ms a layer, 4 x 8 3.1-4.8, 16 x 4
   * 3.0-4.6, 8 x 8 2.8-3.8 (and twice the driver's compile), 16 x 8 much
   * slower (its 2048 sums spill out of L1); the implicit GEMM 5.8-6.9 */
  kiln_vulkan_wino_tiles_t t = {.tm = 8, .nt = 4, .wf = 2};
  const char* env = getenv("KILN_SPIRV_WINO_TILES");
  int tm = 0, nt = 0;
  if (env && sscanf(env, "%d,%d", &tm, &nt) == 2 && (tm == 4 || tm == 8 || tm == 16 || tm == 32) &&
      (nt == 4 || nt == 8))
    t.tm = tm, t.nt = nt;
  /* F(4x4, 3x3) where a row of its 4x4 tiles fills an invocation's NT
   * tiles: ResNet-18's 56x56..14x14 layers 1.2-1.4x faster than F(2x2)
   * (8 x 4, per layer in alternated runs; the tune chose it for 9 of 11
   * instances), the 7x7 ones (2 tiles a row: half of each invocation
   * idle) the same or slower (F(4x4) 8 x 4 3.7-3.9 ms, F(2x2) 2.8-3.6).
   * Where two tile rows of NT / 2 fill an invocation instead
   * (kiln_vulkan_wino_tile_rows: 5x5..8x8 planes, 2x2 tiles) F(4x4) ran
   * ResNet-18's three 512-channel 7x7 convs 1.04-1.16x faster (medians
   * 1.10x; U reads bound them) for 63 MB more weights (97 -> 160 MB) and
   * 1-3 s more cold start, so F(2x2) stays the default there; a tuning
   * record or KILN_SPIRV_WINOGRAD=f4 takes the two-row form.
   * KILN_SPIRV_WINOGRAD=f4 (the set's winograd4: W_WINOGRAD4 weights)
   * takes it everywhere, =f2 nowhere.
   * Not with f16 weights: F(4x4)'s U rounded to f16 loses what its output
   * transform's cancellation needs (ResNet-18 --precision fp16 against
   * onnxruntime: max abs error 0.0054 with F(4x4), 0.0025 with F(2x2),
   * 0.0024 for the f16 format itself; test_vulkan_device's small convs
   * up to 0.08 off at outputs of 0.1-1.7), so F(2x2) there unless forced
   * (a tuner's point must match the default's outputs within 1e-3). */
  bool w16 = false;
  for (int32_t j = 0; j < w->conv.n_params; ++j) w16 = w16 || (w->conv.roles[j] == 'W' && w->conv.f16[j]);
  const char* wino = getenv("KILN_SPIRV_WINOGRAD");
  if (w->weights.layout == KILN_TEMPLATE_W_WINOGRAD4)
    t.wf = 4;
  else if (!(wino && !strcmp(wino, "f2")) && !w16 && (w->conv.ow + 3) / 4 >= t.nt)
    t.wf = 4;
  return t;
}

bool kiln_vulkan_wino_runtime_sizes(const kiln_template_conv_t* c, const kiln_vulkan_wino_tiles_t* t,
                                    const char* w_type) {
  /* only X read in place with rows of whole texels (CALIGN) and output
   * rows of whole texels: ResNet-18's 14x14 F(4x4) convs (unaligned rows,
   * one conv a size and epilogue, so nothing to share) ran 1.6-2x slower
   * on lavapipe with their sizes read at run time (--profile, load 11) */
  float sz[KILN_TEMPLATE_WINO4_SIZES];
  const char* env = getenv("KILN_SPIRV_WINO_SIZES");
  return t->wf == 4 && kiln_vulkan_wino_tile_rows(c, t) == 1 && !strcmp(w_type, "float") && kiln_template_wino4_sizes(c, sz) && c->x_direct &&
         c->iw % 4 == 0 && c->ih * c->iw % 4 == 0 && c->ow % 4 == 0 && !(env && !strcmp(env, "const"));
}

kiln_status_t kiln_vulkan_wino_source(const kiln_template_conv_t* c, const kiln_vulkan_wino_tiles_t* t,
                                      bool texels_fit, bool y_texels_fit, const char* name, char** out_glsl,
                                      int64_t groups[3], int64_t local[3], int64_t* out_trips) {
  return kiln_vulkan_wino_source_int64(c, t, texels_fit, y_texels_fit, texels_fit, false, 8, name, out_glsl, groups,
                                       local, out_trips);
}

kiln_status_t kiln_vulkan_wino_source_int64(const kiln_template_conv_t* c, const kiln_vulkan_wino_tiles_t* t,
                                            bool texels_fit, bool y_texels_fit, bool e_texels_fit, bool int64,
                                            int32_t wg, const char* name,
                                            char** out_glsl, int64_t groups[3], int64_t local[3],
                                            int64_t* out_trips) {
  if (wg < 1 || wg > 1024)
    return kiln_make_status(KILN_INVALID_ARGUMENT, "winograd '%s': a work-group of %d invocations", name, (int)wg);
  if ((t->tm != 4 && t->tm != 8 && t->tm != 16 && t->tm != 32) || (t->nt != 4 && t->nt != 8) ||
      (t->wf != 2 && t->wf != 4))
    return kiln_make_status(KILN_INVALID_ARGUMENT,
                            "winograd '%s': tiles %d channels x %d tiles of %d (4..32, 4 or 8, 2 or 4)", name, t->tm,
                            t->nt, t->wf);
  if (!kiln_template_winograd_covers(c))
    return kiln_make_status(KILN_INVALID_ARGUMENT, "winograd '%s': not a 3x3 stride-1 conv", name);
  const int64_t cp = c->oh * c->ow, mp = (c->M + t->tm - 1) / t->tm * t->tm;
  if (c->batch * c->C * c->plane > INT32_MAX || c->batch * c->M * cp > INT32_MAX ||
      mp * (t->wf + 2) * (t->wf + 2) * c->C > INT32_MAX)
    return kiln_make_status(KILN_INVALID_ARGUMENT, "winograd '%s': %lld x %lld x %lld does not fit 32-bit indices",
                            name, (long long)c->M, (long long)c->C, (long long)cp);
  int bind[4] = {-1, -1, -1, -1}; /* W X C Y */
  const char* type[4] = {"float", "float", "float", "float"};
  bool f16 = false;
  for (int32_t j = 0; j < c->n_params; ++j) f16 = f16 || c->f16[j];
  kiln_vulkan_sb_t b = {0};
  const char* rest = NULL;
  kiln_status_t hs = kiln_vulkan_shader_head(&b, kiln_vk_winograd, "kernels/vulkan/winograd.comp", f16, &rest);
  if (hs) return hs;
  kiln_vulkan_sb_printf(&b, "// kiln winograd '%s': F(%dx%d,3x3), %lld -> %lld channels, %lld x %lld\n", name, t->wf,
                        t->wf, (long long)c->C, (long long)c->M, (long long)c->oh, (long long)c->ow);
  /* vec4 texel reads of U and X where the device's texel buffers hold
   * them (f16 ones where it binds rgba16f texels: |texels_fit| says);
   * texel stores of f32 Y where its rows are whole texels */
  const int texel = texels_fit;
  /* the f32 epilogue operands (a residual) as texels too where U and X
   * are: lavapipe's LLVM took 12-15 s to compile an F(4x4) instance with a
   * residual read from a storage buffer (a loop over the lanes for each of
   * its 512 loads an invocation), 5-6 s the same instance without one
   * (KILN_SPIRV_EPI_TEXELS=off keeps the storage buffers) */
  const char* et = getenv("KILN_SPIRV_EPI_TEXELS");
  const uint32_t texel_epi = texel && e_texels_fit && !(et && !strcmp(et, "off")) ? ~0u : 0u; /* f16 too */
  kiln_status_t ps = kiln_vulkan_conv_params_texel(&b, c, "winograd", name, bind, type, texel_epi);
  if (ps) {
    free(b.p);
    return ps;
  }
  const uint32_t texel_ops = kiln_vulkan_epi_texels(c, texel_epi);
  /* two tile rows an invocation where a row has too few tiles (NTY 2:
   * scalar or pair stores, a vec4 of tiles spans both rows) */
  const int32_t nty = kiln_vulkan_wino_tile_rows(c, t);
  const int texel_y = texel && y_texels_fit && c->ow % 4 == 0 && !strcmp(type[3], "float") && nty == 1;
  /* F(4x4) with f32 U: the sizes are run-time values read from U's first
   * words (lowering's KILN_TEMPLATE_WINO4_SIZES), so the convs of a kind
   * print one text and share one pipeline: lavapipe's LLVM took 6-7 s to
   * compile each F(4x4) instance cold (ResNet-18: 6 instances, 3 sizes x 2
   * epilogues); the unrolled transforms and products stay constant */
  const int crt = kiln_vulkan_wino_runtime_sizes(c, t, type[0]);
  /* F(4x4) with f32 U and no epilogue or one Relu: the Relu chosen at run
   * time (EPI_RT, U's word 8), so the convs with and without it print one
   * text: lavapipe's LLVM took 5-6 s for each F(4x4) instance cold
   * (ResNet-18's layer2.0.conv2 and layer3.0.conv2 have no epilogue, their
   * neighbours a Relu); KILN_SPIRV_WINO_EPI=const prints the epilogue */
  const char* ee = getenv("KILN_SPIRV_WINO_EPI");
  float sz[KILN_TEMPLATE_WINO4_SIZES];
  int epi_rt = t->wf == 4 && !strcmp(type[0], "float") && kiln_template_wino4_sizes(c, sz) &&
               (c->epi.n_ops == 0 || (c->epi.n_ops == 1 && c->epi.ops[0].op == 'r')) &&
               !(ee && !strcmp(ee, "const"));
  /* and a residual Add before the Relu chosen at run time too (EPI_RT 2,
   * U's word 9) where the instance binds a texel operand 0: a residual
   * or the placeholder of a conv without one (role 'D', lowering's
   * winograd_epi_slot), so ResNet-18's F(4x4) convs with a Relu and with a
   * residual Add + Relu print one text a shape: lavapipe's LLVM took
   * 3.8-4.6 s for each (KILN_SPIRV_WINO_EPI=relu: EPI_RT 1 only) */
  bool slot = false;
  for (int32_t j = 0; j < c->n_params; ++j) slot = slot || c->roles[j] == 'D';
  const bool add = kiln_template_epi_residual_relu(c);
  if (t->wf == 4 && !strcmp(type[0], "float") && kiln_template_wino4_sizes(c, sz) && (texel_ops & 1u) &&
      ((slot && epi_rt) || add) && !(ee && (!strcmp(ee, "const") || !strcmp(ee, "relu"))))
    epi_rt = 2;
  /* those through a storage buffer, in pairs where the rows are whole pairs
   * (a group's first column is a multiple of 8; kiln_vulkan_y_store); with
   * run-time sizes vec4s: both forms as the run-time width allows (Y_VEC4
   * 3, KILN_SPIRV_YSTORE=pairs) cost lavapipe's LLVM ~1 s more a shader
   * cold (4.9 -> 3.9 s for a 64-channel 56x56 conv) and ran the same
   * (4.72-4.92 ms both, 4 alternated runs at load 10) */
  const char* ys = getenv("KILN_SPIRV_YSTORE");
  const bool rt_pairs = ys && !strcmp(ys, "pairs");
  int y_vec4 = kiln_vulkan_y_store(&b, texel_y, int64 && (!crt || rt_pairs), crt || c->ow % 8 == 0);
  if (crt && y_vec4 == 2) y_vec4 = 3;
  /* f32 Y without texel stores (rows not whole texels: ResNet-18's 14x14
   * layers) in pairs of columns where the rows are even: half the
   * storage-buffer stores, each a loop over the lanes on lavapipe
   * (KILN_SPIRV_YSTORE=scalar keeps one float a store) */
  const int y_vec2 = !texel_y && !strcmp(type[3], "float") && c->ow % 2 == 0 && !(ys && !strcmp(ys, "scalar"));
  kiln_vulkan_sb_printf(&b, "#define TW %s\n#define TX %s\n#define TC %s\n#define TY %s\n", type[0], type[1],
                        type[2], type[3]);
  /* (f16 U / X: rgba16f images, TEXEL_W16 / TEXEL_X16) */
  kiln_vulkan_sb_printf(&b, "#define TEXEL_W16 %d\n#define TEXEL_X16 %d\n", texel && !strcmp(type[0], "float16_t"),
                        texel && !strcmp(type[1], "float16_t"));
  kiln_vulkan_sb_printf(&b,
                        "#define BIND_W %d\n#define BIND_X %d\n#define BIND_C %d\n#define BIND_Y %d\n"
                        "#define CBATCH %lld\n#define CHAS_BIAS %d\n"
                        "#define WF %d\n#define TM %d\n#define NT %d\n#define TEXEL %d\n#define TEXEL_Y %d\n"
                        "#define Y_VEC4 %d\n#define Y_VEC2 %d\n#define CRT %d\n#define EPI_RT %d\n",
                        bind[0], bind[1], bind[2] < 0 ? 0 : bind[2], bind[3],
                        (long long)(c->batch > 0 ? c->batch : 1), c->has_bias ? 1 : 0, t->wf, t->tm, t->nt, texel, texel_y,
                        y_vec4, y_vec2, crt, epi_rt);
  if (!crt)
    kiln_vulkan_sb_printf(&b,
                          "#define CM %lld\n#define CC %lld\n#define CPLANE %lld\n#define CQ2 %lld\n"
                          "#define CHO %lld\n#define CWO %lld\n#define CIH %lld\n#define CIW %lld\n",
                          (long long)c->M, (long long)c->C, (long long)c->plane, (long long)c->q2, (long long)c->oh,
                          (long long)c->ow, (long long)c->ih, (long long)c->iw);
  /* X itself with its padding zeroed in the reads (no phase split); rows
   * of whole texels keep one shift (a property of the kind) */
  kiln_vulkan_sb_printf(&b, "#define CDIRECT %d\n#define CALIGN %s\n#define CPH %lld\n#define CPW %lld\n",
                        c->x_direct ? 1 : 0, c->x_direct && c->iw % 4 == 0 && c->ih * c->iw % 4 == 0 ? "true" : "false",
                        (long long)c->pad_h, (long long)c->pad_w);
  /* 2 input channels a loop trip where C is even, each sum taking both
   * products in a row (as conv.comp's KREUSE; KILN_SPIRV_CONV_KREUSE=off:
   * one channel a trip) */
  const char* kr = getenv("KILN_SPIRV_CONV_KREUSE");
  kiln_vulkan_sb_printf(&b, "#define CR %d\n", c->C % 2 == 0 && !(kr && !strcmp(kr, "off")) ? 2 : 1);
  if (nty > 1) kiln_vulkan_sb_printf(&b, "#define NTY %d\n", (int)nty); /* (the row form's text unchanged) */
  if (wg != 8) kiln_vulkan_sb_printf(&b, "#define WG %d\n", (int)wg);   /* (lavapipe's 8: the text unchanged) */
  if (epi_rt == 2)
    kiln_vulkan_sb_printf(&b, "#define KC_EPI(v, b, m, p) { const int ei = (b) * (CM * CP) + (m) * CP + (p); "
                              "if (CADD) v = v + %s(te0, ei >> 2)[ei & 3]; v = CRELU ? max(v, 0.0) : v; }\n",
                          (texel_ops & KILN_VULKAN_EPI_HALF(0)) ? "imageLoad" : "texelFetch");
  else if (epi_rt) kiln_vulkan_sb_printf(&b, "#define KC_EPI(v, b, m, p) { v = CRELU ? max(v, 0.0) : v; }\n");
  else if (crt) kiln_vulkan_epi_print_texel(&b, &c->epi, c->M, c->oh * c->ow, texel_ops);
  else kiln_vulkan_epi_print_texel(&b, &c->epi, 0, 0, texel_ops);
  kiln_vulkan_sb_printf(&b, "%s", rest);
  if (b.oom) {
    free(b.p);
    return kiln_make_status(KILN_OUT_OF_MEMORY, "winograd '%s': shader text", name);
  }
  *out_glsl = b.p;
  *out_trips = c->C; /* one loop over the input channels; the rest is unrolled */
  const int64_t tiles_w = (c->ow + t->wf - 1) / t->wf, tiles_h = (c->oh + t->wf - 1) / t->wf;
  const int64_t ngroups = (tiles_h + nty - 1) / nty * ((tiles_w + t->nt / nty - 1) / (t->nt / nty));
  groups[0] = (ngroups * (mp / t->tm) + wg - 1) / wg;
  groups[1] = 1;
  groups[2] = c->batch > 0 ? c->batch : 1;
  local[0] = wg;
  local[1] = 1;
  local[2] = 1;
  return NULL;
}
