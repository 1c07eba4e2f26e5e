/* kiln SPIR-V target: tensor-IR kernels -> GLSL 450 compute shaders (the
 * shared C-family printer's GLSL dialect) -> SPIR-V, compiled in process by
 * libshaderc (Vulkan 1.1 / SPIR-V 1.3, performance optimisation) and
 * validated with the SPIRV-Tools C API (spvValidate).
 *
 *   ... the program builder fills prog->kernels from |plan| (one per plan
 *   kernel, same order, names and args set), then:
 *   KILN_RETURN_IF_ERROR(kiln_spirv_emit(plan, prog));
 *   ... prog->code.blobs[k] is kernel k's SPIR-V, prog->kernels[k].groups /
 *   local its launch geometry, prog->code.text all GLSL (for --dump).
 *
 * Kernels printed to the same canonical GLSL (same code up to names) are
 * compiled once; their blobs are copies. Shader parameters are std430
 * storage buffers at set 0, binding = parameter index (the Vulkan device
 * binds program kernel parameter j to binding j).
 *
 * Templates: a kernel with a descriptor (lowering/template.h, chosen by
 * kiln_template_choose with the set kiln_spirv_templates gives) is an
 * instance of a shader template:
 * GEMM: an f32 MatMul / Gemm kernel whose parameters are A, B (or its
 * panels packed at compile time or by an earlier kernel), Y and at most one
 * workspace private to the kernel (the CPU schedule's A panel slot, left
 * unused), with rank-2 row-major A [M,K] and Y [M,N], no bias, no alpha,
 * no transA and no fused epilogue, runs the shared-memory tiled shader of
 * kernels/vulkan/gemm.comp (same kernel name, same parameter order; B read
 * plain, transposed or from the lowering's packed panels; tiles chosen in
 * lowering from kiln_spirv_gemm_default_tiles, vulkan_tiles.c, and read
 * from the descriptor). Conv instances run kernels/vulkan/
 * conv.comp in the crop's place (the Conv's GEMM kernel leaves the
 * program, targets/gpu_conv.c), depthwise ones kernels/vulkan/
 * depthwise.comp. Everything else runs the printed loop nest.
 *
 * Errors: INVALID_ARGUMENT naming the kernel, with the shaderc log or the
 * validator message (and the GLSL line it points at); OUT_OF_MEMORY.
 * Thread-safe (no global state; each call makes its own compiler).
 */
#ifndef KILN_TARGETS_VULKAN_VULKAN_TARGET_H_
#define KILN_TARGETS_VULKAN_VULKAN_TARGET_H_

#include "lowering/template.h"
#include "runtime/program.h"

#ifdef __cplusplus
extern "C" {
#endif

/* The Vulkan target's templates as a set for kiln_template_choose: GEMM
 * (f32, rank 2, no bias, alpha or transA), implicit-GEMM conv without a
 * grid parameter, depthwise at every stride, Winograd F(2x2, 3x3) for f32
 * 3x3 stride-1 convs of 8 channels or more (kernels/vulkan/winograd.comp;
 * F(4x4, 3x3) with $KILN_SPIRV_WINOGRAD=f4, none with =off). Tuning:
 * $KILN_SPIRV_NO_GEMM=1 keeps the printed GEMM loop nests,
 * $KILN_SPIRV_NO_CONV=1 the printed conv and depthwise kernels.
 * Thread-safe. */
void kiln_spirv_templates(kiln_template_set_t* out);

/* Fills prog->code (n_blobs, blobs, blob_lens, text) and every kernel's
 * groups/local. prog->kernels must match plan->kernels (count, order). On
 * failure prog->code is left as it was. */
kiln_status_t kiln_spirv_emit(const kiln_plan_t* plan, kiln_program_t* prog);

/* Compiles one GLSL compute shader |glsl| for kernel |name|: shaderc, then
 * spvValidate. *out_spirv (allocated with |al|, *out_len bytes) on success.
 * |name| appears in every error. */
kiln_status_t kiln_spirv_compile_glsl(const char* name, const char* glsl, kiln_allocator_t al,
                                      uint8_t** out_spirv, uint64_t* out_len);

/* The tiled GEMM shader (kernels/vulkan/gemm.comp) for C[M,N] = A[M,K] * B,
 * f32 row-major. b_mode: 0 B [K,N], 1 B [N,K] (transB), 2 B in the packed
 * panel layout of lowering/lower_nn_gemm.c ([1][nkb][ptiles][pkbs][pt]).
 * Tiles: TM x TN outputs per work-group of (TN/RN) x (TM/RM) threads, each
 * computing RM x RN outputs, TK the K slice staged in shared memory; TM*TK
 * and TK*TN must be multiples of the thread count. Launch: groups =
 * (ceil(N/TN), ceil(M/TM), 1), local = (TN/RN, TM/RM, 1). */
typedef struct kiln_spirv_gemm_tiles_s {
  int32_t tm, tn, tk, rm, rn;
  /* 1: tiles staged in shared memory; 0: read from the buffers; 2: the
   * subgroup mode (needs subgroup ballot), aligned float pairs read as 64-bit
   * words (needs shaderInt64); 3: the subgroup mode with 32-bit reads only */
  int32_t shared;
  /* 1: products and sums in f16 (gemm.comp / conv.comp AF16; modes 0 and 1
   * only, where the instance has f16_sums: the record's seventh entry) */
  int32_t h;
} kiln_spirv_gemm_tiles_t;

typedef struct kiln_spirv_gemm_s {
  int64_t M, N, K;
  int32_t b_mode;
  int64_t pt, ptiles, pkbs;          /* b_mode 2 */
  int32_t bind_a, bind_b, bind_c;    /* bindings (= kernel parameter indices) */
  kiln_spirv_gemm_tiles_t tiles;     /* tm == 0: kiln_spirv_gemm_default_tiles */
  /* A or B holds more vec4 texels than the device's texel buffers
   * (kiln_plan_t.max_texels): mode 4 prints as mode 3 */
  bool no_texel;
  /* Gemm's C: Y = A * B + beta * C[m * bias_sm + n * bias_sn] (f32) at
   * binding bind_bias where has_bias */
  bool has_bias;
  int32_t bind_bias;
  int64_t bias_sm, bias_sn;
  float beta;
  /* a range program's GEMM (kiln_template_gemm_t.m_dim_a): M = m_a * n +
   * m_b at the run's value n, read from the dims buffer at binding bind_d;
   * M above is the top of the range's. The row tiles are the grid's dim 2
   * (the device launches it n times): groups[1] 1. m_a 0: M static */
  int64_t m_a, m_b;
  int32_t bind_d;
  /* a residual added after the bias: f32 of C's shape at binding bind_res */
  bool has_res;
  int32_t bind_res;
  /* an activation applied last (kiln_template_gemm_t.act: 1 GELU, 2 its
   * tanh form, 3 Relu, 4 Clip to [act_lo, act_hi]) */
  int32_t act;
  float act_lo, act_hi;
  /* f16 storage of A, B, C (the output), the bias, the residual (their
   * reads converted to f32, the sums f32) */
  bool f16_a, f16_b, f16_c, f16_bias, f16_res;
  /* batches (kiln_template_gemm_t.batch: one B per batch, grid dim 2) and
   * the elements between them of A, B and C (0: shared); strides with
   * batch 1 are a per-sample program's, whose device launches dim 2 once
   * per sample (gemm.comp BATCHED) */
  int64_t batch, sa, sb, sy;
} kiln_spirv_gemm_t;

/* Tiles for an M x N problem: $KILN_SPIRV_GEMM_TILES="TM,TN,TK,RM,RN,SHARED"
 * when set and valid (for tuning), else 64 x 64 x 16 with 8 x 8 per thread
 * in shared memory, smaller for narrow problems (work-groups of 8 x 8). */
kiln_spirv_gemm_tiles_t kiln_spirv_gemm_default_tiles(int64_t M, int64_t N);
/* The GPU rules' tiles for an M x N GEMM (a device of KILN_GPU_CLASS_GPU;
 * |dev| its limits and flags, kiln_compile_device_limits, zeros where
 * unknown): the shared-memory tiles the template set takes there
 * (vulkan_tiles.c), or $KILN_SPIRV_GEMM_TILES when set and valid. */
kiln_spirv_gemm_tiles_t kiln_spirv_gemm_gpu_tiles(int64_t M, int64_t N, const kiln_template_limits_t* dev);
/* The tiles of an M x N x K template instance: the above, 16 x 4 per
 * invocation for small products (a cheaper cold compile on lavapipe) */
kiln_spirv_gemm_tiles_t kiln_spirv_gemm_default_tiles_k(int64_t M, int64_t N, int64_t K);
/* GEMMs with few rows (a static M of 1-4: classifiers, one token's
 * projections) over N >= 128 columns: the subgroup texel mode's one row
 * of 8 invocations with 16 columns each (128 a work-group) and TK 4 in
 * *out, true; false (out untouched) for other shapes. */
bool kiln_spirv_gemv_tiles(int64_t M, int64_t N, kiln_spirv_gemm_tiles_t* out);

/* Tiles of the convolution shader (kernels/vulkan/conv.comp) for M output
 * channels over a grid of Q positions: $KILN_SPIRV_CONV_TILES (same
 * format) when set and valid, else the GEMM's. */
kiln_spirv_gemm_tiles_t kiln_spirv_conv_default_tiles(int64_t M, int64_t Q);

/* The GLSL text (caller frees with free()) and its launch geometry.
 * INVALID_ARGUMENT when the tiles do not divide as required. */
kiln_status_t kiln_spirv_gemm_source(const kiln_spirv_gemm_t* g, char** out_glsl,
                                     int64_t groups[3], int64_t local[3]);

#ifdef __cplusplus
}
#endif
#endif /* KILN_TARGETS_VULKAN_VULKAN_TARGET_H_ */
