/* Private pieces of the OpenCL target: the GEMM template instances and the
 * GPU re-binding of CPU-style PARALLEL loops. Not for use outside
 * targets/opencl/ (and its tests / the sgemm bench). */
#ifndef KILN_TARGETS_OPENCL_OPENCL_INTERNAL_H_
#define KILN_TARGETS_OPENCL_OPENCL_INTERNAL_H_

#include "lowering/plan.h"
#include "targets/cfamily/printer.h"

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

/* Appends the instance (macros + template + #undefs) named |name|. */
kiln_status_t kiln_opencl_gemm_print(const kiln_opencl_gemm_t* g, const char* name,
                                     kiln_cf_out_t* out);

/* ---- fused element-wise epilogues (opencl_epilogue.c) ----------------------
 * The chain of graph nodes that fusion folded into a kernel after its
 * anchor (Conv, Gemm, MatMul): Relu, Clip, LeakyRelu, Sigmoid and the
 * binary Add/Sub/Mul/Div with an operand that broadcasts along the output
 * as out[n][m][p] (n the batch/image, m the channel or row, p the position
 * or column): strides sn, sm and sp in {0, 1}. */
#define KILN_OPENCL_EPI_MAX 8

typedef struct kiln_opencl_epi_operand_s {
  int32_t buffer;      /* plan buffer */
  int64_t sn, sm, sp;  /* element strides along n, m, p (0: broadcast) */
} kiln_opencl_epi_operand_t;

typedef struct kiln_opencl_epi_op_s {
  char op;        /* 'r' Relu, 'c' Clip, 'l' LeakyRelu, 's' Sigmoid, '+', '-', '*', '/' */
  bool swap;      /* binary: the operand is on the left (o - v, o / v) */
  int32_t a, b;   /* operand indices (-1: none; Clip: min, max) */
  float alpha, lo, hi; /* LeakyRelu alpha; Clip bounds from attributes */
  bool has_lo, has_hi;
} kiln_opencl_epi_op_t;

typedef struct kiln_opencl_epi_s {
  int32_t n_ops, n_operands;
  kiln_opencl_epi_op_t ops[KILN_OPENCL_EPI_MAX];
  kiln_opencl_epi_operand_t operands[KILN_OPENCL_EPI_MAX];
  int32_t out_tensor; /* graph tensor the chain ends in */
} kiln_opencl_epi_t;

/* Parses the fused nodes of plan kernel |k| as a chain starting at graph
 * tensor |start| whose output is |onshape| viewed as [N][M][P] (P the
 * product of the dims after the second; for a rank-2 output N = 1).
 * False when a node or an operand is outside what the templates print. */
bool kiln_opencl_epi_parse(const kiln_plan_t* plan, int32_t k, int32_t start, const int64_t* shape,
                           int32_t rank, kiln_opencl_epi_t* out);

/* Prints "#define <macro>(v, b, m, p, LD) ..." applying |e| to v, operand j
 * being the kernel parameter named <prefix>j. */
void kiln_opencl_epi_print(const kiln_opencl_epi_t* e, const char* macro, const char* prefix,
                           kiln_cf_out_t* out);

/* ---- convolution template instances (opencl_conv.c, kernels/opencl/conv.cl) */
extern const char kiln_cl_conv[];
extern const size_t kiln_cl_conv_len;

typedef kiln_opencl_gemm_tiles_t kiln_opencl_conv_tiles_t;
#define KILN_OPENCL_CONV_MAX_TAPS 512
#define KILN_OPENCL_CONV_MAX_PARAMS (5 + KILN_OPENCL_EPI_MAX)

/* One implicit-GEMM convolution instance. It replaces the plan's GEMM
 * kernel of a Conv node and, when the lowering crops the output grid, the
 * crop kernel (with its fused epilogue) too: it runs in the crop kernel's
 * slot and the GEMM kernel leaves the program. The phase-split kernel (when
 * there is one) stays as printed. */
typedef struct kiln_opencl_conv_s {
  bool matched;
  int32_t gemm_kernel, slot; /* plan kernels: the GEMM, the one whose place it takes */
  int64_t M, Q, K, T, C, plane, batch;
  int64_t pt, kbs, tiles; /* packed weights */
  bool crop;
  int64_t q1, q2, od, oh, ow;
  bool has_bias;
  int32_t toff[KILN_OPENCL_CONV_MAX_TAPS];
  kiln_opencl_epi_t epi;
  int32_t n_params;
  /* role per parameter: 'W' weights, 'X' input planes, 'F' grid scratch,
   * 'C' bias, 'Y' output, '0'+j epilogue operand j */
  char roles[KILN_OPENCL_CONV_MAX_PARAMS + 1];
  int32_t args[KILN_OPENCL_CONV_MAX_PARAMS]; /* plan buffer per parameter */
  kiln_opencl_conv_tiles_t tiles_used;
} kiln_opencl_conv_t;

/* Tiles for a conv with M output channels, a grid of Q positions, K. The
 * environment variable KILN_OPENCL_CONV_TILES="tm,tn,vw,wx,wy,bk,mm,mn"
 * overrides them (tuning). */
kiln_opencl_conv_tiles_t kiln_opencl_conv_default_tiles(int64_t M, int64_t Q, int64_t K);

/* True when plan kernel |k| is the GEMM kernel of a Conv node (f32,
 * group 1, constant packed weights, not the lowering's transposed mode)
 * whose every kernel parameter, and every parameter of its crop kernel,
 * has a known role; fills |out|. */
bool kiln_opencl_conv_match(const kiln_plan_t* plan, int32_t k, kiln_opencl_conv_t* out);

void kiln_opencl_conv_launch(const kiln_opencl_conv_t* c, int64_t groups[3], int64_t local[3]);

/* Appends the instance named |name|. */
kiln_status_t kiln_opencl_conv_print(const kiln_opencl_conv_t* c, const char* name, kiln_cf_out_t* out);

/* A copy of |f| whose outermost PARALLEL loop is bound to work-groups and
 * work-items (*out NULL when |f| has no such loop, or already binds ids or
 * uses barriers). New nodes come from |ctx|. */
kiln_status_t kiln_opencl_bind_parallel(tir_ctx_t* ctx, const tir_func_t* f, const tir_func_t** out);

#ifdef __cplusplus
}
#endif
#endif
