/* kiln SPIR-V target: print GLSL per kernel, compile with libshaderc,
 * validate with SPIRV-Tools, store one blob per kernel in the program.
 *
 * Why: the printer's canonical form (kernel named KILN_KERNEL, buffers and
 * variables renumbered) is the dedup key, so the many identical elementwise
 * kernels of a model compile once. Validation runs on every blob although
 * shaderc's output is normally valid: it is the one check between kiln's
 * printer and a driver that may crash on bad SPIR-V. */
#include "targets/vulkan/vulkan_target.h"

#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "targets/cfamily/printer.h"
#include "targets/custom_kernel.h"
#include "targets/gpu_bind.h"
#include "targets/gpu_bind_dyn.h"
#include "targets/gpu_bind_seq.h"
#include "targets/gpu_conv.h"
#include "targets/partition.h"
#include "targets/registry.h"
#include "targets/vulkan/vulkan_internal.h"
#include "ir/fnv.h"


void kiln_spirv_templates(kiln_template_set_t* out) {
  const char* no_gemm = getenv("KILN_SPIRV_NO_GEMM");
  const char* no_conv = getenv("KILN_SPIRV_NO_CONV");
  const bool conv = !(no_conv && !strcmp(no_conv, "1"));
  /* KILN_SPIRV_WINOGRAD=off: 3x3 stride-1 convs stay implicit GEMMs;
   * =all: Winograd wherever it covers (tuning, tests); =f4: F(4x4, 3x3)
   * on every instance, =f2: F(2x2, 3x3) on every one (by default F(4x4)
   * where a row of its tiles fills an invocation: kiln_vulkan_wino_default_tiles) */
  const char* wino = getenv("KILN_SPIRV_WINOGRAD");
  const bool wino_all = wino && !strcmp(wino, "all");
  const char* wino_pad = getenv("KILN_SPIRV_WINO_PAD");
  const char* no_pool = getenv("KILN_SPIRV_POOL");
  const char* conv_pad = getenv("KILN_SPIRV_CONV_PAD");
  const char* rows = getenv("KILN_SPIRV_ROWS");
  const char* wino_epi = getenv("KILN_SPIRV_WINO_EPI");
  /* gemm.comp reads plain f32 or f16 operands (f32 sums), a bias, a residual and
   * an activation fused after it (lowering/template_gemm.c); conv.comp keeps its partial
   * sums in registers (no grid) and reads the lowering's packed weights;
   * depthwise.comp takes every depthwise kernel it matches */
  *out = (kiln_template_set_t){.gemm = !(no_gemm && !strcmp(no_gemm, "1")),
                               /* Gemm's C as a bias (the classifiers' M = 1 Gemm was a
                                * printed kernel: 1.2-1.5 ms in MobileNetV2) */
                               /* f16 storage above 2^25 multiply-adds: below, where
                                * kiln_spirv_gemm_default_tiles_k takes 16 x 4 tiles, the
                                * f16 template (scalar half reads, no texels) ran as fast as
                                * the printed kernel (gpt2 --precision fp16: 4.95 vs 4.92 ms)
                                * and its shaders cost lavapipe 1-2 s more of a cold start
                                * (gpt2: 3.4 vs 1.5 s of CPU) */
                               /* batched: one B per batch (attention's heads), gemm.comp BATCHED */
                               .gemm_rules = {.f16 = true, .batched = true, .bias = true, .gelu = true, .epilogue = true,
                                              .f16_min_work = (int64_t)1 << 25},
                               .conv = conv,
                               /* winograd.comp (vulkan_winograd.c) where it covers */
                               .winograd = conv && !(wino && !strcmp(wino, "off")),
                               .winograd_min_channels = wino_all ? 0 : 8,
                               .winograd_min_tiles = 0,
                               .winograd_min_work = 0,
                               /* f16 operands as rgba16f texels (winograd.comp
                                * TEXEL_W16): only where the device binds those; as
                                * storage buffers Winograd was slower than the implicit
                                * GEMM (ResNet-18 --precision fp16 306 ms a run with it,
                                * 272 without) */
                               .winograd_f16_texels = true,
                               /* gemm.comp / conv.comp AF16 (shared-memory and direct
                                * modes): f16 products and sums where the kernel's own
                                * accumulator is f16 (--fp16-accumulate); record entry h */
                               .f16_sums = true,
                               .winograd4 = wino && !strcmp(wino, "f4"),
                               /* winograd.comp zeroes the padding in its reads of X: no
                                * printed phase split before it (KILN_SPIRV_WINO_PAD=copy
                                * keeps the copy) */
                               .winograd_reads_x = !(wino_pad && !strcmp(wino_pad, "copy")),
                               /* an instance with no epilogue or a Relu binds a placeholder
                                * where a residual would be, so F(4x4) convs with a Relu and
                                * with a residual Add + Relu share one shader (the Add chosen
                                * at run time, vulkan_winograd.c; KILN_SPIRV_WINO_EPI=const or
                                * =relu: none) */
                               .winograd_epi_slot = !(wino_epi && (!strcmp(wino_epi, "const") ||
                                                                   !strcmp(wino_epi, "relu"))),
                               /* pool.comp for 2-D MaxPool / AveragePool / GlobalAveragePool
                                * (KILN_SPIRV_POOL=off: the printed kernels; =planes: a
                                * work-group row per plane, vulkan_pool.c) */
                               .pool = !(no_pool && !strcmp(no_pool, "off")),
                               /* f16 X read as rgba16f texels where the device binds those
                                * (ResNet-18 --precision fp16's MaxPool: the printed kernel
                                * 13.3 ms a run, the f32 template 1.1 ms) */
                               .pool_f16 = true,
                               /* rows.comp for last-axis f32 Softmax / LogSoftmax where the
                                * device has subgroup arithmetic (a subgroup a row) and the
                                * rows hold 2^20 elements or more: on lavapipe 0.7-0.9x the
                                * printed row kernel's time on 8192 x 1000 and 65536 x 128,
                                * ~1.1x on the encoder's 512 x 128 (only lavapipe measured).
                                * KILN_SPIRV_ROWS=subgroup takes every such Softmax,
                                * =printed none */
                               .rows = !(rows && !strcmp(rows, "printed")),
                               .rows_min_elems = rows && !strcmp(rows, "subgroup") ? 0 : (int64_t)1 << 20,
                               /* LayerNorm rows only where forced: on lavapipe the template
                                * took 1.0-1.25x the printed kernel's time on 1024 x 1024 and
                                * 8192 x 1024, 1.5-1.8x on 65536 x 128 (a GPU: not measured) */
                               .rows_ln_min_elems = rows && !strcmp(rows, "subgroup") ? 0 : INT64_MAX,
                               /* reductions over the last axes and global pools only
                                * where forced: on lavapipe (vec4 texel reads) the template
                                * took 1.05-1.5x the printed kernel's time on ReduceSum /
                                * ReduceMax of 8192 x 1000, 65536 x 128 and 1024 x 4096 and
                                * on 1x64x112x112 global pools, 3.7x on GlobalAveragePool
                                * 1x1280x7x7 (a GPU: not measured) */
                               .rows_red_min_elems = rows && !strcmp(rows, "subgroup") ? 0 : INT64_MAX,
                               /* f16 rows (fp16 plans) only where forced: on lavapipe the
                                * printed kernel reading rgba16f texels took 25-31 ms on
                                * 8192 x 1000 and 25 ms on 65536 x 128, the template 45-46
                                * and 53-59 ms (a GPU's 32-lane subgroups: not measured) */
                               .rows_f16 = rows && !strcmp(rows, "subgroup"),
                               /* the GPU rules (vulkan_tiles.c): every f32 row on a GPU with
                                * subgroup arithmetic (not measured on a GPU yet) */
                               .rows_gpu_all = !(rows && !strcmp(rows, "printed")),
                               .depthwise = conv,
                               .depthwise_min_stride = 1,
                               /* q8.comp's K loops within lavapipe's limit */
                               .q8 = conv,
                               .q8_max_trips = 65535,
                               /* tiles: defaults and KILN_SPIRV_*_TILES (vulkan_tiles.c) */
                               .tiles = kiln_vulkan_template_tiles,
                               /* a conv's own weights in 32-channel panels (vulkan_tiles.c) */
                               .conv_tiled_weights = true,
                               .weight_blocks = kiln_vulkan_template_weight_blocks,
                               /* what `kiln tune` searches and may choose (vulkan_tune.c) */
                               .space = kiln_vulkan_tune_space,
                               .tiles_check = kiln_vulkan_tune_check,
                               .tiles_tie = kiln_vulkan_tune_tie,
                               .tiles_hints = kiln_vulkan_tune_hints,
                               .tiles_features = kiln_vulkan_tune_features,
                               /* Winograd on or off per conv, a knob of `kiln tune` */
                               .winograd_switch = true,
                               /* conv.comp reads X itself, zero padding and strides in its
                                * reads (CDIRECT): no printed phase split or padded copy
                                * before it (KILN_SPIRV_CONV_PAD=copy keeps the copy) */
                               .conv_reads_x = !(conv_pad && !strcmp(conv_pad, "copy"))};
}

/* ---- emit --------------------------------------------------------------- */

/* work-groups a dimension every Vulkan device launches (the spec's minimum
 * of maxComputeWorkGroupCount): grids fold to fit it where the plan does
 * not say the device's (kiln_plan_t.max_groups) */
enum { VK_MAX_GROUPS = 65535 };

/* The fewest work-groups the plan's device launches in any dimension: a
 * printed kernel's x grid folds into y or z (kiln_gpu_fold_grid) within it. */
static int64_t max_groups_any(const kiln_plan_t* plan) {
  int64_t m = INT32_MAX;
  for (int j = 0; j < 3; ++j) {
    const int64_t d = plan->max_groups[j] ? (plan->max_groups[j] < INT32_MAX ? (int64_t)plan->max_groups[j] : INT32_MAX)
                                          : VK_MAX_GROUPS;
    if (d < m) m = d;
  }
  return m;
}

/* CPU-style PARALLEL loops onto work-groups x invocations (one sample's
 * body of a per-sample kernel: kiln_gpu_bind_samples). */
static kiln_status_t vk_bind(tir_ctx_t* c, const tir_func_t* f, const tir_func_t** out) {
  const kiln_gpu_bind_t how = {.small_extent = 8, .lanes = 64};
  return kiln_gpu_bind_parallel(c, f, &how, out);
}

typedef struct unit_s {
  char* text;     /* GLSL (malloc) */
  uint64_t hash;
  int32_t first;  /* first kernel with the same text, or itself */
} unit_t;

/* Per parameter: restrict unless another parameter of the kernel shares its
 * memory root or it is half of the kernel's in-place pair (the memory
 * planner may then give both one address). */
static void noalias_of(const kiln_plan_t* plan, const kiln_program_kernel_t* pk,
                       const kiln_plan_kernel_t* k, bool* out) {
  int32_t n = k->func->n_params;
  for (int32_t i = 0; i < n; ++i) {
    out[i] = true;
    int32_t ri = kiln_plan_root(plan, k->args[i]);
    for (int32_t j = 0; j < n; ++j)
      if (j != i && kiln_plan_root(plan, k->args[j]) == ri) out[i] = false;
    if (pk->inplace_in == i || pk->inplace_out == i) out[i] = false;
  }
}

/* Whether plan buffer |pb| fits one texel buffer of the device the plan is
 * for (kiln_plan_t.max_texels vec4 texels: 16 bytes of f32, 8 of f16; 0:
 * not checked). */
static bool texels_fit(const kiln_plan_t* plan, int32_t pb) {
  if (!plan->max_texels) return true;
  if (pb < 0 || pb >= plan->n_buffers || !plan->buffers[pb].buf) return false;
  const tir_buffer_t* b = plan->buffers[pb].buf;
  const uint64_t tb = 4 * (uint64_t)kiln_dtype_size(b->dtype);
  const uint64_t bytes = (uint64_t)tir_buffer_numel(b) * (uint64_t)kiln_dtype_size(b->dtype);
  return (bytes + tb - 1) / tb <= plan->max_texels;
}

/* texels_fit for a template's read operand, which an f16 buffer may be
 * only where the device binds rgba16f storage texel buffers (the shaders
 * read f16 texels through them: conv.comp TEXEL_W16) */
static bool read_texels_fit(const kiln_plan_t* plan, int32_t pb) {
  const bool f16 = pb >= 0 && pb < plan->n_buffers && plan->buffers[pb].buf &&
                   plan->buffers[pb].buf->dtype == KILN_DTYPE_F16;
  return texels_fit(plan, pb) && (!f16 || !(plan->gpu_lacks & KILN_GPU_LACKS_TEXEL_F16));
}

/* An F(4x4) instance's weights start with its conv's sizes (lowering's
 * kiln_template_wino4_sizes), which winograd.comp reads at run time: a
 * constant laid out for another conv would run it at the wrong sizes. */
static kiln_status_t wino4_sizes_check(const kiln_plan_t* plan, const kiln_template_t* t, const char* name) {
  const int32_t b = t->weights.buffer;
  float want[KILN_TEMPLATE_WINO4_SIZES];
  const bool exact = kiln_template_wino4_sizes(&t->conv, want);
  const kiln_array_t* v = b >= 0 && b < plan->n_buffers ? &plan->buffers[b].value : NULL;
  if (!v || v->dtype != KILN_DTYPE_F32) return NULL; /* f16 U: constant sizes (zeros there) */
  if (!exact || !v->data || v->nbytes < sizeof want || memcmp(v->data, want, sizeof want) != 0)
    return kiln_make_status(KILN_INTERNAL,
                            "spirv: kernel '%s': its F(4x4) weights do not start with its conv's sizes "
                            "(kiln_template_weights_lay_out after the conv changed?)",
                            name);
  return NULL;
}

kiln_status_t kiln_spirv_emit(const kiln_plan_t* plan, kiln_program_t* prog) {
  if (!plan || !prog) return kiln_make_status(KILN_INVALID_ARGUMENT, "spirv: NULL plan or program");
  if (prog->n_kernels != plan->n_kernels)
    return kiln_make_status(KILN_INVALID_ARGUMENT, "spirv: program has %d kernels, plan %d",
                            (int)prog->n_kernels, (int)plan->n_kernels);
  kiln_allocator_t al = prog->allocator;
  int32_t nk = plan->n_kernels;
  bool no_bind = getenv("KILN_SPIRV_NO_BIND") && strcmp(getenv("KILN_SPIRV_NO_BIND"), "1") == 0;
  /* Rebound kernels live in a context of our own; its ids continue the
   * plan's so printed names never collide with the plan's. */
  tir_ctx_t ctx;
  tir_ctx_init(&ctx, al);
  ctx.next_var_id = plan->tir.next_var_id;
  ctx.next_buffer_id = plan->tir.next_buffer_id;
  unit_t* units = calloc((size_t)nk + 1, sizeof *units);
  int64_t(*dims)[6] = calloc((size_t)nk + 1, sizeof *dims);
  int32_t* keep = calloc((size_t)nk + 1, sizeof *keep);
  int64_t* trips = calloc((size_t)nk + 1, sizeof *trips);
  uint8_t** blobs = NULL;
  uint64_t* lens = NULL;
  char* text = NULL;
  kiln_status_t s = NULL;
  kiln_vulkan_cc_t cc;
  bool cc_ok = false;
  if (!units || !dims || !keep || !trips) {
    s = kiln_make_status(KILN_OUT_OF_MEMORY, "spirv: %d kernels", (int)nk);
    goto done;
  }
  if ((s = kiln_allocator_malloc(al, sizeof(uint8_t*) * (size_t)(nk + 1), "SPIR-V blobs", (void**)&blobs)) ||
      (s = kiln_allocator_malloc(al, sizeof(uint64_t) * (size_t)(nk + 1), "SPIR-V blobs", (void**)&lens)))
    goto done;
  memset(blobs, 0, sizeof(uint8_t*) * (size_t)(nk + 1));
  if ((s = kiln_vulkan_cc_init(&cc))) goto done;
  cc_ok = true;

  /* Print every kernel (canonical text), find duplicates. */
  size_t total = 0;
  for (int32_t k = 0; !s && k < nk; ++k) {
    const kiln_plan_kernel_t* pk = &plan->kernels[k];
    const char* name = pk->func->name;
    const kiln_template_t* t = pk->tmpl;
    const kiln_template_kind_t kind = t ? t->kind : KILN_TEMPLATE_NONE;
    if (kind == KILN_TEMPLATE_MERGED) continue; /* leaves the program (kiln_gpu_conv_rewrite) */
    if (pk->custom) {
      kiln_cf_out_t out;
      kiln_cf_out_init(&out);
      s = kiln_custom_print(plan, k, "vulkan", name, &out, dims[k], dims[k] + 3);
      if (!s) s = kiln_custom_glsl_trips(plan, k, &trips[k]); /* 0: not declared */
      if (s) {
        kiln_cf_out_free(&out);
        break;
      }
      units[k].text = out.data; /* ownership moves */
    } else if (kind == KILN_TEMPLATE_CONV) {
      /* GEMM + crop + epilogue in the crop's slot; the GEMM kernel goes */
      /* the tiles lowering chose (kiln_vulkan_template_tiles) */
      kiln_spirv_gemm_tiles_t ct;
      kiln_template_conv_t cw;
      s = kiln_vulkan_tiles_of(t, name, &ct);
      if (!s) s = kiln_vulkan_conv_weights(t, name, &cw);
      bool fit = true, fit_y = false;
      for (int32_t j = 0; j < cw.n_params; ++j) {
        if (cw.roles[j] == 'W' || cw.roles[j] == 'X') fit = fit && read_texels_fit(plan, cw.args[j]);
        if (cw.roles[j] == 'Y') fit_y = texels_fit(plan, cw.args[j]);
      }
      if (!s)
        s = kiln_vulkan_conv_source_int64(&cw, &ct, fit, fit_y, !(plan->gpu_lacks & KILN_GPU_LACKS_INT64), name,
                                          &units[k].text, dims[k], dims[k] + 3, &trips[k]);
      if (s) s = kiln_status_annotate(s, "spirv");
    } else if (kind == KILN_TEMPLATE_WINOGRAD) {
      /* kernels/vulkan/winograd.comp in the crop's slot; the GEMM goes */
      kiln_vulkan_wino_tiles_t wt;
      s = kiln_vulkan_wino_tiles_of(t, name, &wt);
      if (!s && wt.wf == 4) s = wino4_sizes_check(plan, t, name);
      bool fit = true, fit_y = false, fit_e = true;
      for (int32_t j = 0; j < t->conv.n_params; ++j) {
        const char r = t->conv.roles[j];
        if (r == 'W' || r == 'X') fit = fit && read_texels_fit(plan, t->conv.args[j]);
        if (r == 'Y') fit_y = texels_fit(plan, t->conv.args[j]);
        if ((r >= '0' && r <= '9') || r == 'D') fit_e = fit_e && read_texels_fit(plan, t->conv.args[j]);
      }
      if (!s)
        s = kiln_vulkan_wino_source_int64(&t->conv, &wt, fit, fit_y, fit_e, !(plan->gpu_lacks & KILN_GPU_LACKS_INT64),
                                          kiln_vulkan_gpu_rules(plan->gpu_lacks) ? KILN_VULKAN_WG_GPU : 8, name,
                                          &units[k].text, dims[k], dims[k] + 3, &trips[k]);
      if (s) s = kiln_status_annotate(s, "spirv");
    } else if (kind == KILN_TEMPLATE_DEPTHWISE) {
      int32_t wg = 0, rw = 0;
      s = kiln_vulkan_dw_tiles_of(t, name, &wg, &rw);
      const int32_t np = pk->func->n_params;
      const bool fit = t->dw.bind_x >= 0 && t->dw.bind_x < np && read_texels_fit(plan, pk->args[t->dw.bind_x]);
      const bool fit_w = t->dw.bind_w >= 0 && t->dw.bind_w < np && read_texels_fit(plan, pk->args[t->dw.bind_w]);
      const bool fit_y = t->dw.bind_y >= 0 && t->dw.bind_y < np && texels_fit(plan, pk->args[t->dw.bind_y]);
      if (!s)
        s = kiln_vulkan_dw_source_int64(&t->dw, wg, rw, fit, fit_w, fit_y, !(plan->gpu_lacks & KILN_GPU_LACKS_INT64),
                                        name, &units[k].text, dims[k], dims[k] + 3);
      trips[k] = t->dw.kh; /* the unrolled taps; nothing else loops */
      if (s) s = kiln_status_annotate(s, "spirv");
    } else if (kind == KILN_TEMPLATE_POOL) {
      const int32_t np = pk->func->n_params;
      const bool fit = t->pool.bind_x >= 0 && t->pool.bind_x < np && read_texels_fit(plan, pk->args[t->pool.bind_x]);
      const bool fit_y = t->pool.bind_y >= 0 && t->pool.bind_y < np && texels_fit(plan, pk->args[t->pool.bind_y]);
      s = kiln_vulkan_pool_source_int64(&t->pool, fit, fit_y, !(plan->gpu_lacks & KILN_GPU_LACKS_INT64),
                                        kiln_vulkan_gpu_rules(plan->gpu_lacks) ? KILN_VULKAN_WG_GPU : 8, name,
                                        &units[k].text, dims[k], dims[k] + 3);
      trips[k] = 0; /* the taps are unrolled: no loop */
      if (s) s = kiln_status_annotate(s, "spirv");
    } else if (kind == KILN_TEMPLATE_ROWS) {
      const bool fit = t->rows.bind_x >= 0 && t->rows.bind_x < pk->func->n_params &&
                       texels_fit(plan, pk->args[t->rows.bind_x]);
      s = kiln_vulkan_rows_source(&t->rows, fit, name, &units[k].text, dims[k], dims[k] + 3, &trips[k]);
      if (s) s = kiln_status_annotate(s, "spirv");
    } else if (kind == KILN_TEMPLATE_Q8) {
      s = kiln_vulkan_q8_source(&t->q8, &t->tiles, name, &units[k].text, dims[k], dims[k] + 3, &trips[k]);
      if (s) s = kiln_status_annotate(s, "spirv");
    } else if (kind == KILN_TEMPLATE_GEMM) {
      kiln_spirv_gemm_t g = kiln_vulkan_gemm_of(&t->gemm);
      s = kiln_vulkan_tiles_of(t, name, &g.tiles);
      g.no_texel = !(g.bind_a >= 0 && g.bind_a < pk->func->n_params && texels_fit(plan, pk->args[g.bind_a]) &&
                     g.bind_b >= 0 && g.bind_b < pk->func->n_params && texels_fit(plan, pk->args[g.bind_b]));
      if (!s) s = kiln_spirv_gemm_source(&g, &units[k].text, dims[k], dims[k] + 3);
      if (s) break;
      trips[k] = kiln_vulkan_trips_tiled(g.K, &g.tiles, true);
      /* gemm.comp's rolled GELU loop over the invocation's outputs */
      if (g.act == KILN_TEMPLATE_ACT_GELU || g.act == KILN_TEMPLATE_ACT_GELU_TANH)
        trips[k] += (int64_t)g.tiles.rm * g.tiles.rn;
    } else {
      bool noalias[256];
      bool* na = noalias;
      if (pk->func->n_params > 256 &&
          !(na = malloc(sizeof(bool) * (size_t)pk->func->n_params))) {
        s = kiln_make_status(KILN_OUT_OF_MEMORY, "spirv: kernel '%s'", name);
        break;
      }
      noalias_of(plan, &prog->kernels[k], pk, na);
      /* CPU-style PARALLEL loops onto work-groups x invocations: lavapipe
       * runs an invocation per SIMD lane and groups on its threads. */
      const tir_func_t* f = pk->func;
      const tir_func_t* bound = NULL;
      if (plan->n_dims && plan->dim_axis) {
        /* a range program's kernels: the run's length on the grid's dim 2
         * (gpu_bind_seq.h); the loop trips below count the top of the range */
        const kiln_gpu_bind_t how = {.small_extent = 8, .lanes = 64};
        s = kiln_gpu_bind_seq(&ctx, f, plan->dims[0].lo, plan->dims[0].hi, &how, &bound);
        if (s) {
          if (na != noalias) free(na);
          s = kiln_status_annotate(s, "spirv: kernel '%s'", name);
          break;
        }
        f = bound;
      } else if (plan->n_dims) {
        /* per-sample kernels: the samples on the grid's dim 2 (gpu_bind_dyn.h) */
        s = kiln_gpu_bind_samples(&ctx, f, no_bind ? NULL : vk_bind, &bound);
        if (s) {
          if (na != noalias) free(na);
          s = kiln_status_annotate(s, "spirv: kernel '%s'", name);
          break;
        }
        f = bound;
      } else if (!no_bind) {
        kiln_gpu_bind_t how = {.small_extent = 8, .lanes = 64};
        s = kiln_gpu_bind_parallel(&ctx, f, &how, &bound);
        if (s) {
          if (na != noalias) free(na);
          s = kiln_status_annotate(s, "spirv: kernel '%s'", name);
          break;
        }
        if (bound) f = bound;
      }
      /* a grid past 65535 work-groups in x (16M elements at 256 a group)
       * folds into y (z: a per-sample or range program's samples / length) */
      if (!s) {
        const tir_func_t* folded = NULL;
        s = kiln_gpu_fold_grid(&ctx, f, max_groups_any(plan), !plan->n_dims, &folded);
        if (s) {
          if (na != noalias) free(na);
          s = kiln_status_annotate(s, "spirv");
          break;
        }
        f = folded;
      }
      /* element-wise lanes as vec4 texels where a view holds the buffer */
      kiln_cf_kernel_info_t info = {.param_noalias = na, .canonical = true,
                                    .texels = plan->max_texels ? plan->max_texels : UINT64_MAX,
                                    .texels_f16 = !(plan->gpu_lacks & KILN_GPU_LACKS_TEXEL_F16)};
      kiln_cf_out_t out;
      kiln_cf_out_init(&out);
      s = kiln_cf_print_kernel(&kiln_cf_dialect_glsl, f, &info, &out);
      if (na != noalias) free(na);
      if (s) {
        kiln_cf_out_free(&out);
        s = kiln_status_annotate(s, "spirv");
        break;
      }
      units[k].text = out.data; /* ownership moves (malloc'd by the printer) */
      kiln_cf_launch_dims(f, dims[k], dims[k] + 3);
      trips[k] = kiln_vulkan_trips_of(f->body);
    }
    /* a template instance's grid past the device's work-group counts
     * (a 1x1 conv over 4096x1100 positions: 70,400 tiles) folds into the
     * other dimensions; the printed kernels folded above */
    const bool tmpl = kind == KILN_TEMPLATE_CONV || kind == KILN_TEMPLATE_WINOGRAD || kind == KILN_TEMPLATE_DEPTHWISE ||
                      kind == KILN_TEMPLATE_POOL || kind == KILN_TEMPLATE_Q8 || kind == KILN_TEMPLATE_GEMM ||
                      kind == KILN_TEMPLATE_ROWS;
    if (!s && tmpl && !pk->custom && units[k].text &&
        (s = kiln_vulkan_grid_fold(&units[k].text, dims[k], plan->max_groups, !plan->n_dims, name)))
      s = kiln_status_annotate(s, "spirv: node '%s' (%s)", prog->kernels[k].node_name ? prog->kernels[k].node_name : "?",
                               prog->kernels[k].op_type ? prog->kernels[k].op_type : "?");
  }
  for (int32_t k = 0; !s && k < nk; ++k) {
    const char* name = plan->kernels[k].func->name;
    units[k].first = k;
    if (!units[k].text) continue; /* gone */
    units[k].hash = kiln_fnv1a(units[k].text, strlen(units[k].text));
    units[k].first = k;
    for (int32_t j = 0; j < k; ++j)
      if (units[j].text && units[j].first == j && units[j].hash == units[k].hash &&
          strcmp(units[j].text, units[k].text) == 0) {
        units[k].first = j;
        break;
      }
    /* The header printed below: "// ---- kernel NAME = FIRST ----\n". Names
     * come from the model file and may be any length, so every byte is
     * counted (a duplicate's header also holds the first kernel's name). */
    total += strlen(units[k].text) + strlen(name) + 64;
    if (units[k].first != k) total += strlen(plan->kernels[units[k].first].func->name);
  }
  /* Compile the distinct shaders; duplicates get copies of the blob. */
  for (int32_t k = 0; !s && k < nk; ++k) {
    const char* name = plan->kernels[k].func->name;
    if (!units[k].text) continue;
    if (units[k].first == k) {
      s = kiln_vulkan_cc_compile(&cc, name, units[k].text, al, &blobs[k], &lens[k]);
      const kiln_custom_instance_t* ci = plan->kernels[k].custom;
      if (s && ci)
        s = kiln_status_annotate(s, "spirv: plugin op %s/%s (plugin '%s') at node '%s': its GLSL kernel failed to build",
                                 ci->op->domain, ci->op->name, kiln_custom_op_plugin(ci->op), ci->node);
      else if (s)
        s = kiln_status_annotate(s, "spirv");
      if (s) break;
    } else {
      int32_t j = units[k].first;
      void* m = NULL;
      if ((s = kiln_allocator_malloc(al, lens[j], "SPIR-V blob", &m))) break;
      memcpy(m, blobs[j], lens[j]);
      blobs[k] = m;
      lens[k] = lens[j];
    }
  }
  if (!s) s = kiln_allocator_malloc(al, total + 1, "GLSL text", (void**)&text);
  if (s) goto done;
  size_t len = 0;
  for (int32_t k = 0; k < nk; ++k) {
    if (!units[k].text) continue;
    int w = snprintf(text + len, total + 1 - len, "// ---- kernel %s%s%s ----\n", plan->kernels[k].func->name,
                     units[k].first != k ? " = " : "",
                     units[k].first != k ? plan->kernels[units[k].first].func->name : "");
    size_t l = strlen(units[k].text);
    /* The sizing above is exact plus slack; a miscount must fail, not write
     * past the buffer. */
    if (w < 0 || (size_t)w > total - len || l > total - len - (size_t)w) {
      s = kiln_make_status(KILN_INTERNAL, "spirv: GLSL text of kernel '%s' exceeds its %zu-byte buffer",
                           plan->kernels[k].func->name, total);
      goto done;
    }
    len += (size_t)w;
    memcpy(text + len, units[k].text, l);
    len += l;
  }
  text[len] = 0;
  /* Conv instances change the kernel list: blobs and launch sizes follow. */
  int32_t nkept = nk;
  if (kiln_gpu_conv_any(plan)) {
    if ((s = kiln_gpu_conv_rewrite(prog, plan, keep))) goto done;
    nkept = prog->n_kernels;
    for (int32_t o = 0; o < nkept; ++o) {
      const int32_t k = keep[o];
      if (k == o) continue;
      blobs[o] = blobs[k];
      lens[o] = lens[k];
      blobs[k] = NULL;
      memcpy(dims[o], dims[k], sizeof dims[o]);
      trips[o] = trips[k];
    }
  }
  /* Commit. */
  for (int32_t i = 0; prog->code.blobs && i < prog->code.n_blobs; ++i) kiln_allocator_free(al, prog->code.blobs[i]);
  kiln_allocator_free(al, prog->code.blobs);
  kiln_allocator_free(al, prog->code.blob_lens);
  kiln_allocator_free(al, prog->code.text);
  prog->code.blobs = blobs;
  prog->code.blob_lens = lens;
  prog->code.n_blobs = nkept;
  prog->code.text = text;
  prog->code.text_len = len;
  for (int32_t k = 0; k < nkept; ++k) prog->kernels[k].loop_trips = trips[k];
  for (int32_t k = 0; k < nkept; ++k)
    for (int d = 0; d < 3; ++d) {
      prog->kernels[k].groups[d] = dims[k][d] > 0 ? dims[k][d] : 1;
      prog->kernels[k].local[d] = dims[k][3 + d] > 0 ? dims[k][3 + d] : 1;
    }
  /* a per-sample program's grids are one sample's: the device scales dim 2 */
  for (int32_t k = 0; plan->n_dims && k < nkept; ++k) prog->kernels[k].groups[2] = 1;
  blobs = NULL;
  lens = NULL;
  text = NULL;
done:
  tir_ctx_deinit(&ctx);
  if (cc_ok) kiln_vulkan_cc_free(&cc);
  if (blobs)
    for (int32_t k = 0; k < nk; ++k) kiln_allocator_free(al, blobs[k]);
  kiln_allocator_free(al, blobs);
  kiln_allocator_free(al, lens);
  kiln_allocator_free(al, text);
  for (int32_t k = 0; units && k < nk; ++k) free(units[k].text);
  free(units);
  free(dims);
  free(keep);
  free(trips);
  return s;
}

/* ---- registration (targets/registry.h) ---------------------------------- */

/* The dump holds the GLSL of every shader, one after another. */
/* Heterogeneous execution asks before emitting (targets/partition.h). */
static kiln_status_t vulkan_kernel_check(const kiln_plan_t* plan, int32_t k) {
  return kiln_partition_gpu_check(plan, k, "vulkan", &kiln_cf_dialect_glsl);
}

const kiln_target_t kiln_target_vulkan = {
    .name = "vulkan",
    .lowering = KILN_TARGET_CLASS_GPU,
    .ew_lanes = 4,
    .source_ext = "comp",
    .rules_env = "KILN_VULKAN_RULES",
    .emit = kiln_spirv_emit,
    .templates = kiln_spirv_templates,
    .kernel_check = vulkan_kernel_check,
    .dyn_batch = true,
    .dyn_seq = true,
    /* gemm.comp's RT_M: M read from the dims buffer, row tiles on dim 2 */
    .dyn_seq_gemm = true,
};
