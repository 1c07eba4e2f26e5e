/* Convolution template instances shared by the GPU targets (OpenCL and
 * SPIR-V): which plan kernels of a Conv node one template kernel replaces,
 * the layout it reads (the lowering's phase planes and tap shifts), the
 * fused element-wise epilogue it applies in its store, and the rewrite of
 * the program's kernel list that follows. Each target prints its own
 * template (kernels/opencl/conv.cl, kernels/vulkan/conv.comp).
 *
 * lowering/lower_nn_conv.c lowers a Conv ("plain GEMM" and "implicit GEMM"
 * cases) to up to three kernels: a phase split of the input into zero-
 * padded stride-phase planes (absent when the input is read as it is), a
 * GEMM over those planes into an output grid (Y itself, or a flat temp
 * with garbage columns), and a crop of the grid into Y, where fusion puts
 * the epilogue (Relu, residual Add, Clip...). A template computes the GEMM,
 * the crop and the epilogue in one kernel; the phase split stays as printed
 * (one cheap pass that gives the GEMM contiguous, guard-free rows). */
#ifndef KILN_TARGETS_GPU_CONV_H_
#define KILN_TARGETS_GPU_CONV_H_

#include "lowering/plan.h"
#include "runtime/program.h"

#ifdef __cplusplus
extern "C" {
#endif

/* ---- fused element-wise epilogues (gpu_epilogue.c) ------------------------
 * The chain of graph nodes that fusion folded into a kernel after its
 * anchor (Conv, Gemm, MatMul): Relu, Clip, LeakyRelu, Sigmoid and the
 * binary Add/Sub/Mul/Div with an operand that broadcasts along the output
 * as out[n][m][p] (n the batch/image, m the channel or row, p the position
 * or column): strides sn, sm and sp in {0, 1}. */
#define KILN_GPU_EPI_MAX 8

typedef struct kiln_gpu_epi_operand_s {
  int32_t buffer;      /* plan buffer */
  int64_t sn, sm, sp;  /* element strides along n, m, p (0: broadcast) */
} kiln_gpu_epi_operand_t;

typedef struct kiln_gpu_epi_op_s {
  char op;        /* 'r' Relu, 'c' Clip, 'l' LeakyRelu, 's' Sigmoid, '+', '-', '*', '/' */
  bool swap;      /* binary: the operand is on the left (o - v, o / v) */
  int32_t a, b;   /* operand indices (-1: none; Clip: min, max) */
  float alpha, lo, hi; /* LeakyRelu alpha; Clip bounds from attributes */
  bool has_lo, has_hi;
} kiln_gpu_epi_op_t;

typedef struct kiln_gpu_epi_s {
  int32_t n_ops, n_operands;
  kiln_gpu_epi_op_t ops[KILN_GPU_EPI_MAX];
  kiln_gpu_epi_operand_t operands[KILN_GPU_EPI_MAX];
  int32_t out_tensor; /* graph tensor the chain ends in */
  bool f16_ok;        /* operands may be f16 buffers */
} kiln_gpu_epi_t;

/* Parses the fused nodes of plan kernel |k| as a chain starting at graph
 * tensor |start| whose output is |shape| viewed as [N][M][P] (P the
 * product of the dims after the second; for a rank-2 output N = 1).
 * False when a node or an operand is outside what the templates print. */
bool kiln_gpu_epi_parse(const kiln_plan_t* plan, int32_t k, int32_t start, const int64_t* shape,
                        int32_t rank, bool f16_ok, kiln_gpu_epi_t* out);

/* ---- convolution instances (gpu_conv.c) ----------------------------------- */

/* f32, or f16 when |f16_ok|; row-major and dense. */
bool kiln_gpu_dense_float(const tir_buffer_t* b, bool f16_ok);

#define KILN_GPU_CONV_MAX_TAPS 512
#define KILN_GPU_CONV_MAX_PARAMS (5 + KILN_GPU_EPI_MAX)

/* One implicit-GEMM convolution instance,
 *   Y[b][m][p] = EPI(bias[m] + sum_{c, tap} W[m][c*T + tap] * XP[b][c][toff[tap] + q(p)]),
 * with W the lowering's packed constant (panels of |pt| output channels, K
 * in blocks of |kbs|: element (m, k) at
 * (((k / kbs) * tiles + m / pt) * kbs + k % kbs) * pt + m % pt) and q(p) the
 * grid position of output p (grid pitch q1 x q2 per depth slice; Q grid
 * positions in all). It replaces the plan's GEMM kernel of a Conv node and,
 * when the lowering crops the output grid, the crop kernel (with its fused
 * epilogue) too: it runs in the crop kernel's slot and the GEMM kernel
 * leaves the program. */
typedef struct kiln_gpu_conv_s {
  bool matched;
  int32_t gemm_kernel, slot; /* plan kernels: the GEMM, the one whose place it takes */
  int64_t M, Q, K, T, C, plane, batch;
  int64_t pt, kbs, tiles; /* packed weights */
  bool crop;
  int64_t q1, q2, od, oh, ow;
  bool has_bias;
  int32_t toff[KILN_GPU_CONV_MAX_TAPS];
  kiln_gpu_epi_t epi;
  int32_t n_params;
  /* role per parameter: 'W' weights, 'X' input planes, 'F' grid scratch,
   * 'C' bias, 'Y' output, '0'+j epilogue operand j */
  char roles[KILN_GPU_CONV_MAX_PARAMS + 1];
  int32_t args[KILN_GPU_CONV_MAX_PARAMS]; /* plan buffer per parameter */
  bool f16[KILN_GPU_CONV_MAX_PARAMS];     /* that buffer holds f16 (else f32) */
} kiln_gpu_conv_t;

/* True when plan kernel |k| is the GEMM kernel of a Conv node (f32,
 * group 1, constant packed weights, not the lowering's transposed mode)
 * whose every kernel parameter, and every parameter of its crop kernel,
 * has a known role; fills |out|. |grid_param|: the template keeps the
 * grid temp as a parameter ('F', scratch for partial sums) when there is
 * a crop; without it the grid buffer leaves the program. |f16_ok|: buffers
 * may hold f16 (storage; the template converts and accumulates in f32). */
bool kiln_gpu_conv_match(const kiln_plan_t* plan, int32_t k, bool grid_param, bool f16_ok,
                         kiln_gpu_conv_t* out);

/* Rewrites |prog|'s kernel list for the matched instances: |slot_of[k]| is
 * -1 for a kernel that stays as it is, -2 for one that goes (an instance's
 * GEMM kernel when it runs in the crop's place), and the index in |convs|
 * of the instance a slot runs. The slot gets the instance's parameters and
 * both kernels' flops; buffer lifetimes are recomputed from the new
 * argument lists. |keep|, when not NULL, receives for each kept kernel its
 * old index (the caller moves per-kernel data the same way). All
 * allocations happen before |prog| changes. */
kiln_status_t kiln_gpu_conv_rewrite(kiln_program_t* prog, const kiln_gpu_conv_t* convs,
                                    const int32_t* slot_of, int32_t* keep);

/* ---- depthwise convolution instances (gpu_conv.c) ------------------------- */

#define KILN_GPU_DW_MAX_TAPS 49

/* One depthwise 2-D convolution instance (one input channel per group,
 * channel multiplier MG = M / C), as the lowering computes it directly
 * from X to Y in one kernel (lowering/lower_nn_conv.c, conv_depthwise):
 *   Y[b][m][oh][ow] = EPI(bias[m] + sum_{kh, kw} W[m][0][kh][kw] * X[b][m / MG][ih][iw]),
 *   ih = oh*SH + kh*DH - PH, iw = ow*SW + kw*DW - PW,
 * taps outside X adding 0 (the template bounds-checks every tap: the plan
 * kernel reads X itself, there is no padded copy). The template replaces
 * just that plan kernel and keeps its parameter list: bind_* are parameter
 * indices of the plan kernel (bind_c -1 without a bias), f16_* whether the
 * buffer bound there holds f16 (only when the match allowed it). */
typedef struct kiln_gpu_dw_s {
  bool matched;
  int64_t N, M, C, Mg;          /* images, output channels, input channels, outputs per group */
  int64_t ih, iw, oh, ow;       /* input and output plane */
  int64_t kh, kw, sh, sw, dh, dw, ph, pw; /* window (pads: the leading ones) */
  int32_t bind_x, bind_w, bind_c, bind_y;
  bool f16_x, f16_w, f16_c, f16_y;
  kiln_gpu_epi_t epi;           /* fused chain (n_ops 0: none); operand i bound at bind_e[i] */
  int32_t bind_e[KILN_GPU_EPI_MAX];
  bool f16_e[KILN_GPU_EPI_MAX];
} kiln_gpu_dw_t;

/* True when plan kernel |k| is the direct depthwise kernel of a 2-D Conv
 * (the node's only kernel; dense rank-4 X, W, Y; group = input channels,
 * one input channel per group; at most KILN_GPU_DW_MAX_TAPS taps; an
 * optional bias of M floats; indices within int32) whose every parameter
 * has a known role and whose output does not share memory with X or an
 * epilogue operand; fills |out| (cleared, matched set, on success).
 * |f16_ok|: buffers may hold f16 (storage; the sums stay f32). Reads the
 * plan only; thread-compatible. */
bool kiln_gpu_dw_match(const kiln_plan_t* plan, int32_t k, bool f16_ok, kiln_gpu_dw_t* out);

#ifdef __cplusplus
}
#endif
#endif
