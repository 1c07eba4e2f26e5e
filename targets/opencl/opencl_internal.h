/* Private pieces of the OpenCL target: the GEMM template instances and the
 * GPU re-binding of CPU-style PARALLEL loops. Not for use outside
 * targets/opencl/ (and its tests / the sgemm bench). */
#ifndef KILN_TARGETS_OPENCL_OPENCL_INTERNAL_H_
#define KILN_TARGETS_OPENCL_OPENCL_INTERNAL_H_

#include "lowering/plan.h"
#include "targets/cfamily/printer.h"
#include "targets/gpu_conv.h"

#ifdef __cplusplus
extern "C" {
#endif

/* Embedded kernels/opencl/gemm.cl (cmake/embed.cmake). */
extern const char kiln_cl_gemm[];
extern const size_t kiln_cl_gemm_len;

/* Tile parameters of the GEMM template (see kernels/opencl/gemm.cl). */
typedef struct kiln_opencl_gemm_tiles_s {
  int32_t tm, tn, vw, wx, wy, bk, mm, mn;
} kiln_opencl_gemm_tiles_t;

/* One GEMM template instance. B is either plain (row-major K x N, or N x K
 * when trans_b) or packed in panels of |pack_t| columns the way
 * lowering/lower_nn_gemm.c lays them out: element (k, n) at
 * (((b * nkb + k / kbs) * tiles + n / t) * kbs + k % kbs) * t + n % t. */
typedef struct kiln_opencl_gemm_s {
  bool matched;
  int64_t M, N, K, batch;
  int64_t sa, sb, sy;          /* batch strides in elements (0: broadcast) */
  int64_t lda, ldb, ldy;
  bool trans_a, trans_b;
  int64_t pack_t, pack_kbs, pack_nkb, pack_tiles; /* pack_t 0: plain B */
  bool has_bias;
  int64_t bias_sm, bias_sn;
  float alpha, beta;
  int32_t n_params;
  /* role per parameter: 'A', 'B', 'C' (bias), 'Y', or '-' (unused, e.g.
   * the GEMM's own packing workspace) */
  char roles[8];
  kiln_opencl_gemm_tiles_t tiles;
} kiln_opencl_gemm_t;

/* Tiles the emitter uses for an M x N x K product (measured on PoCL). */
kiln_opencl_gemm_tiles_t kiln_opencl_gemm_default_tiles(int64_t M, int64_t N, int64_t K);

/* True when plan kernel |k| is a MatMul/Gemm (no fused epilogue, f32;
 * MatMul batches that do not broadcast) that the template computes
 * exactly; fills |out|. */
bool kiln_opencl_gemm_match(const kiln_plan_t* plan, int32_t k, kiln_opencl_gemm_t* out);

/* Work-groups and work-group size of an instance. */
void kiln_opencl_gemm_launch(const kiln_opencl_gemm_t* g, int64_t groups[3], int64_t local[3]);

/* What a GEMM library needs to run the instance in the kernel's place
 * (out->valid false when it reads a packed B or adds a bias). */
void kiln_opencl_gemm_describe(const kiln_opencl_gemm_t* g, kiln_program_gemm_t* out);

/* Appends the instance (macros + template + #undefs) named |name|. */
kiln_status_t kiln_opencl_gemm_print(const kiln_opencl_gemm_t* g, const char* name,
                                     kiln_cf_out_t* out);

/* ---- fused epilogues and conv instances (targets/gpu_conv.h) -------------- */

/* Prints "#define <macro>(v, b, m, p, LD) ..." applying |e| to v, operand j
 * being the kernel parameter named <prefix>j (opencl_epilogue.c). */
void kiln_opencl_epi_print(const kiln_gpu_epi_t* e, const char* macro, const char* prefix,
                           kiln_cf_out_t* out);

/* Embedded kernels/opencl/conv.cl. */
extern const char kiln_cl_conv[];
extern const size_t kiln_cl_conv_len;

typedef kiln_opencl_gemm_tiles_t kiln_opencl_conv_tiles_t;

/* Tiles for a conv with M output channels, a grid of Q positions, K. The
 * environment variable KILN_OPENCL_CONV_TILES="tm,tn,vw,wx,wy,bk,mm,mn"
 * overrides them (tuning). */
kiln_opencl_conv_tiles_t kiln_opencl_conv_default_tiles(int64_t M, int64_t Q, int64_t K);

void kiln_opencl_conv_launch(const kiln_gpu_conv_t* c, const kiln_opencl_conv_tiles_t* t, int64_t groups[3],
                             int64_t local[3]);

/* Appends the instance named |name| (it keeps the grid as the 'F'
 * parameter: partial sums between K slices). |wtiled|: W holds the
 * weights in the micro-kernel's order (kiln_opencl_conv_pack_weights),
 * else the lowering's packed layout. */
kiln_status_t kiln_opencl_conv_print(const kiln_gpu_conv_t* c, const kiln_opencl_conv_tiles_t* t,
                                     bool wtiled, const char* name, kiln_cf_out_t* out);

/* True when no kernel but the instance's GEMM (and no model output) reads
 * its weight constant, so the constant may be re-laid out for it. */
bool kiln_opencl_conv_weights_private(const kiln_plan_t* plan, const kiln_gpu_conv_t* c);

/* The instance's weight constant in |prog| re-laid out from the lowering's
 * packed layout into the order conv.cl's micro-kernel reads it with tiles
 * |t|: block of BM = TM*WY*MM channels, K slice of BK, micro-panel of TM
 * channels, k, channel; zero-padded to whole blocks and slices (so it may
 * grow by up to a block and a slice). *out_data (prog's allocator, the
 * caller frees it) holds *out_bytes for constant *out_buffer, to pass to
 * kiln_program_const_replace. */
kiln_status_t kiln_opencl_conv_pack_weights(const kiln_program_t* prog, const kiln_gpu_conv_t* c,
                                            const kiln_opencl_conv_tiles_t* t, int32_t* out_buffer,
                                            float** out_data, uint64_t* out_bytes);

/* A copy of |f| whose outermost PARALLEL loop is bound to work-groups and
 * work-items (*out NULL when |f| has no such loop, or already binds ids or
 * uses barriers). New nodes come from |ctx|. */
kiln_status_t kiln_opencl_bind_parallel(tir_ctx_t* ctx, const tir_func_t* f, const tir_func_t** out);

#ifdef __cplusplus
}
#endif
#endif
