/* Template kernels: the fast paths lowering chooses for a plan.
 *
 * The GPU targets have hand-written template kernels (GEMM, implicit-GEMM
 * convolution, Winograd F(2x2, 3x3), depthwise convolution) that compute
 * what some plan kernels compute, faster. Which plan kernels a template
 * replaces, with which parameters, weight layout and fused epilogue, is
 * decided here, once, from the graph and the plan, with the instance's
 * tiles (the target's rules, handed in with its template set) and the
 * weight layout those tiles read, laid out in the plan's constants
 * (template_weights.c); the targets print an instance of the template
 * from the descriptor, never read the graph and rewrite no constant.
 *
 * Usage, after kiln_plan_fuse and the precision pass (both change what
 * matches: epilogues, f16 buffers) and before the target prints the plan:
 *   kiln_template_set_t set;
 *   kiln_opencl_templates(NULL, &set);            (the target says what it has)
 *   KILN_RETURN_IF_ERROR(kiln_template_choose(plan, &set));
 *   ... kiln_program_build(plan, ...) prints plan->kernels[k].tmpl ...
 * (a tuner: kiln_template_select, new tiles, set.weight_blocks,
 * kiln_template_weights_lay_out, instead of kiln_template_choose).
 * A plan without descriptors (no kiln_template_choose, or the CPU target)
 * prints every kernel from its tensor IR, which is always correct.
 *
 * A descriptor lives on the plan kernel whose place the instance takes:
 *   - GEMM: a MatMul/Gemm kernel (same name and parameter order);
 *   - CONV / WINOGRAD: the crop kernel of a Conv (or its GEMM kernel when
 *     the lowering writes Y directly); the Conv's GEMM kernel is then
 *     MERGED into it and leaves the program, the phase split stays;
 *   - DEPTHWISE: the lowering's direct depthwise kernel (same parameters).
 *
 * Thread-compatible: kiln_template_choose writes the plan; the matchers
 * only read it. */
#ifndef KILN_LOWERING_TEMPLATE_H_
#define KILN_LOWERING_TEMPLATE_H_

#include "lowering/plan.h"

#ifdef __cplusplus
extern "C" {
#endif

/* ---- fused element-wise epilogues (template_epilogue.c) --------------------
 * The chain of graph nodes that fusion folded into a kernel after its
 * anchor (Conv, Gemm, MatMul): Relu, Clip, LeakyRelu, Sigmoid and the
 * binary Add/Sub/Mul/Div with an operand that broadcasts along the output
 * as out[n][m][p] (n the batch/image, m the channel or row, p the position
 * or column): strides sn, sm and sp in {0, 1}. */
#define KILN_TEMPLATE_EPI_MAX 8

typedef struct kiln_template_epi_operand_s {
  int32_t buffer;      /* plan buffer */
  int64_t sn, sm, sp;  /* element strides along n, m, p (0: broadcast) */
} kiln_template_epi_operand_t;

typedef struct kiln_template_epi_op_s {
  char op;        /* 'r' Relu, 'c' Clip, 'l' LeakyRelu, 's' Sigmoid, 'w' SiLU (v * sigmoid(v):
                   * a Sigmoid and a Mul), '+', '-', '*', '/' */
  bool swap;      /* binary: the operand is on the left (o - v, o / v) */
  int32_t a, b;   /* operand indices (-1: none; Clip: min, max) */
  float alpha, lo, hi; /* LeakyRelu alpha; Clip bounds from attributes, or the
                        * value of a constant scalar bound operand (a, b) */
  bool has_lo, has_hi; /* lo / hi hold a bound (with a / b >= 0 too: a constant operand's) */
} kiln_template_epi_op_t;

typedef struct kiln_template_epi_s {
  int32_t n_ops, n_operands;
  kiln_template_epi_op_t ops[KILN_TEMPLATE_EPI_MAX];
  kiln_template_epi_operand_t operands[KILN_TEMPLATE_EPI_MAX];
  int32_t out_tensor; /* graph tensor the chain ends in */
  bool f16_ok;        /* operands may be f16 buffers */
} kiln_template_epi_t;

/* Parses the fused nodes of plan kernel |k| as a chain starting at graph
 * tensor |start| whose output is |shape| viewed as [N][M][P] (P the
 * product of the dims after the second; for a rank-2 output N = 1).
 * False when a node or an operand is outside what the templates print. */
bool kiln_template_epi_parse(const kiln_plan_t* plan, int32_t k, int32_t start, const int64_t* shape,
                             int32_t rank, bool f16_ok, kiln_template_epi_t* out);

/* Whether a GEMM or conv template could still print plan kernel |p|'s
 * epilogue with consumer kernel |c|'s nodes appended (fuse.c asks it on GPU
 * plans before it folds |c| into |p|). By op type only: a MatMul/Gemm takes
 * up to two Adds (bias, residual) then one of Relu, Clip, Gelu; a Conv
 * (group 1) up to KILN_TEMPLATE_EPI_MAX of Relu, Sigmoid, LeakyRelu, Clip,
 * Add, Sub, Mul, Div. A chain beyond that would keep the printed kernel, 5-10x
 * slower than a template on lavapipe and PoCL (llama's SwiGLU MatMuls,
 * wav2vec2's convs before a Gelu), so the consumer stays a kernel of its
 * own. True for any other producer, for a MatMul/Gemm that no GPU
 * target's GEMM template takes as it is (kiln_template_gemm_candidate),
 * and in a range program's plans (kiln_plan_t.plain_loops). */
bool kiln_template_epilogue_fits(const kiln_plan_t* plan, int32_t p, int32_t c);

/* f32, or f16 when |f16_ok|; row-major and dense. */
bool kiln_template_dense_float(const tir_buffer_t* b, bool f16_ok);

/* The node of plan kernel |k| when the kernel is that node alone (nothing
 * fused) and the node is a default-domain op with one input and one output
 * whose buffers are dense f32 (*X, *Y; |f16_ok|: or f16, each), and the
 * kernel's two parameters are X (or a flat view of it, read: *bind_x) and
 * Y (or a flat view, written: *bind_y), distinct roots; NULL otherwise.
 * The pool and rows matches start with it. */
const kiln_node_t* kiln_template_lone_unary(const kiln_plan_t* plan, int32_t k, bool f16_ok, const tir_buffer_t** X,
                                            const tir_buffer_t** Y, int32_t* bind_x, int32_t* bind_y);

/* ---- GEMM (template_gemm.c) ------------------------------------------------ */

/* One GEMM instance, Y = alpha * op(A) op(B) + beta * C. B is either plain
 * (row-major K x N, or N x K when trans_b) or packed in panels of |pack_t|
 * columns the way lowering/lower_nn_gemm.c lays them out: element (k, n) at
 * (((b * nkb + k / kbs) * tiles + n / t) * kbs + k % kbs) * t + n % t. */
typedef struct kiln_template_gemm_s {
  int64_t M, N, K, batch;
  int64_t sa, sb, sy;          /* batch strides in elements (0: broadcast) */
  int64_t lda, ldb, ldy;
  bool trans_a, trans_b;
  int64_t pack_t, pack_kbs, pack_nkb, pack_tiles; /* pack_t 0: plain B */
  bool has_bias;
  int64_t bias_sm, bias_sn;
  float alpha, beta;
  int32_t n_params;
  /* role per parameter: 'A', 'B', 'C' (bias), 'Y', 'D' (a range
   * program's dims buffer, m_dim_a below), 'R' (has_res), or '-' (unused, e.g.
   * the GEMM's own packing workspace) */
  char roles[8];
  bool f16[8]; /* that parameter's buffer holds f16 (storage; f32 sums) */
  /* a range program's GEMM (compiler/pipeline_seq.c): M = m_dim_a * n +
   * m_dim_b at the dim's run-time value n (read from the parameter of
   * role 'D', the dims buffer), M above the top of the range's; m_dim_a 0:
   * M is static */
  int64_t m_dim_a, m_dim_b;
  /* a residual added after the bias: the parameter of role 'R', of Y's
   * shape (a fused residual Add; one batch) */
  bool has_res;
  /* an activation applied last (a fused Gelu, Relu or Clip):
   * KILN_TEMPLATE_ACT_* */
  int32_t act;
  /* KILN_TEMPLATE_ACT_CLIP's bounds (constants; -/+INFINITY: none) */
  float act_lo, act_hi;
} kiln_template_gemm_t;

/* kiln_template_gemm_t.act */
enum {
  KILN_TEMPLATE_ACT_NONE = 0,
  KILN_TEMPLATE_ACT_GELU = 1,
  KILN_TEMPLATE_ACT_GELU_TANH = 2,
  KILN_TEMPLATE_ACT_RELU = 3,
  KILN_TEMPLATE_ACT_CLIP = 4
};

/* What a target's GEMM template computes beyond a plain f32 rank-2
 * A[M,K] x B product (see kiln_template_set_t). */
typedef struct kiln_template_gemm_rules_s {
  bool f16;     /* f16 operands (storage: converted on load, f32 sums) */
  bool batched; /* one B per batch (batch strides); a B shared by all batches
                 * needs no rule: A's and Y's batches stack into rows */
  bool bias;    /* Gemm's C input (beta, broadcast along rows or columns) */
  bool scaled;  /* Gemm's transA and alpha != 1 */
  bool gelu;    /* a GELU after the bias (kiln_template_gemm_t.act) */
  /* fused epilogues of any plan kernel: Adds of a per-column bias (C, when
   * the node has none) and of a residual of Y's shape (has_res, one batch),
   * then one of Relu, Clip with constant bounds, Gelu (where |gelu|) */
  bool epilogue;
  /* f16 operands (|f16|) only where batch * M * N * K is above this (0: any) */
  int64_t f16_min_work;
} kiln_template_gemm_rules_t;

/* True when plan kernel |k| is a MatMul/Gemm (MatMul batches that do not
 * broadcast; fused nodes only where rules->epilogue, as it says) whose
 * every parameter has a known role and that |rules| allow; fills |out|. */
bool kiln_template_gemm_match(const kiln_plan_t* plan, int32_t k, const kiln_template_gemm_rules_t* rules,
                              kiln_template_gemm_t* out);

/* A fused node's place in a GEMM template's epilogue chain, by its op
 * alone: 1 an Add (a bias or a residual), 2 an activation (Relu, Clip,
 * Gelu: the chain's last), 0 none the template prints. The GEMM matcher's
 * chain and kiln_template_epilogue_fits both read it. */
int kiln_template_gemm_chain_op(const kiln_node_t* n);

/* Whether plan kernel |k| as it is now is a MatMul/Gemm of 2^20
 * multiply-adds or more that some GPU target's GEMM template takes (the
 * union of OpenCL's and Vulkan's rules: per-batch B, f16, Gemm's bias,
 * alpha and transA, the epilogues). GPU plans' fusion
 * asks it before it inlines a producer (a Transpose of K in attention) into
 * the kernel: the template reads its operands as plan buffers, so an
 * inlined producer would leave the printed GEMM, 4-5x slower on PoCL.
 * False in a range program's plans (kiln_plan_t.plain_loops: lowered at
 * several sizes, which must fuse alike). */
bool kiln_template_gemm_candidate(const kiln_plan_t* plan, int32_t k);

/* ---- implicit-GEMM convolution (template_conv.c) --------------------------- */

#define KILN_TEMPLATE_CONV_MAX_TAPS 512
#define KILN_TEMPLATE_CONV_MAX_PARAMS (5 + KILN_TEMPLATE_EPI_MAX)

/* One implicit-GEMM convolution instance,
 *   Y[b][m][p] = EPI(bias[m] + sum_{c, tap} W[m][c*T + tap] * XP[b][c][toff[tap] + q(p)]),
 * with W the lowering's packed constant (panels of |pt| output channels, K
 * in blocks of |kbs|: element (m, k) at
 * (((k / kbs) * tiles + m / pt) * kbs + k % kbs) * pt + m % pt) and q(p) the
 * grid position of output p (grid pitch q1 x q2 per depth slice; Q grid
 * positions in all). It replaces the plan's GEMM kernel of a Conv node and,
 * when the lowering crops the output grid, the crop kernel (with its fused
 * epilogue) too: it runs in the crop kernel's slot and the GEMM kernel
 * leaves the program.
 *
 * lowering/lower_nn_conv.c lowers a Conv ("plain GEMM" and "implicit GEMM"
 * cases) to up to three kernels: a phase split of the input into zero-
 * padded stride-phase planes (absent when the input is read as it is), a
 * GEMM over those planes into an output grid (Y itself, or a flat temp
 * with garbage columns), and a crop of the grid into Y, where fusion puts
 * the epilogue. The phase split stays as printed (one cheap pass that
 * gives the GEMM contiguous, guard-free rows). */
typedef struct kiln_template_conv_s {
  int32_t gemm_kernel, slot; /* plan kernels: the GEMM, the one whose place it takes */
  int64_t M, Q, K, T, C, plane, batch;
  int64_t pt, kbs, tiles; /* packed weights */
  bool crop;
  int64_t q1, q2, od, oh, ow;
  bool has_bias;
  int32_t toff[KILN_TEMPLATE_CONV_MAX_TAPS];
  kiln_template_epi_t epi;
  int32_t n_params;
  /* role per parameter: 'W' weights, 'X' input planes, 'F' grid scratch,
   * 'C' bias, 'Y' output, '0'+j epilogue operand j, 'D' a placeholder in
   * operand 0's place that the instance never reads (X's buffer again;
   * kiln_template_set_t.winograd_epi_slot) */
  char roles[KILN_TEMPLATE_CONV_MAX_PARAMS + 1];
  int32_t args[KILN_TEMPLATE_CONV_MAX_PARAMS]; /* plan buffer per parameter */
  bool f16[KILN_TEMPLATE_CONV_MAX_PARAMS];     /* that buffer holds f16 (else f32) */
  /* The phase split before the GEMM (plan kernel, -1: the planes are X
   * itself), X's plan buffer, X's plane (ih x iw) and the leading pads:
   * the padded single plane is XP[y][x] = X[y - pad_h][x - pad_w] */
  int32_t phase_kernel, x_buffer;
  int64_t ih, iw, pad_h, pad_w;
  /* the 'X' parameter is X itself, not the phase split's planes: the
   * instance zeroes the padding in its reads and the phase kernel is
   * MERGED into it (Winograd with kiln_template_set_t.winograd_reads_x) */
  bool x_direct;
  /* the window along H and W (2-D; 1s for the leading axes of 1-D convs):
   * taps, strides, dilations */
  int64_t kh, kw, sh, sw, dh, dw;
} kiln_template_conv_t;

/* True when plan kernel |k| is the GEMM kernel of a Conv node (f32,
 * group 1, constant packed weights, not the lowering's transposed mode)
 * whose every kernel parameter, and every parameter of its crop kernel,
 * has a known role; fills |out|. |grid_param|: the template keeps the
 * grid temp as a parameter ('F', scratch for partial sums) when there is
 * a crop; without it the grid buffer leaves the program. |f16_ok|: buffers
 * may hold f16 (storage; the template converts and accumulates in f32). */
bool kiln_template_conv_match(const kiln_plan_t* plan, int32_t k, bool grid_param, bool f16_ok,
                              kiln_template_conv_t* out);

/* True when the buffer an instance would keep its partial sums in between
 * K slices (the grid 'F' when cropped, else Y) holds f16: such an
 * instance must keep them in a private f32 array instead (matched
 * without the grid when cropped). */
bool kiln_template_conv_sums_f16(const kiln_template_conv_t* c);

/* True when conv instance |c| is one the Winograd F(2x2, 3x3) template
 * computes: 3x3, stride 1, dilation 1, 2-D, a cropped grid whose planes
 * hold the rows and columns the 4x4 patches read. */
bool kiln_template_winograd_covers(const kiln_template_conv_t* c);

/* The Winograd instance's 2x2 output tiles per image, each row of tiles
 * padded to whole groups of four (the template's layout). */
int64_t kiln_template_winograd_tiles(const kiln_template_conv_t* c);

/* For a Winograd instance |c| of |plan| whose planes are the phase split's
 * zero-padded copy of an f32 or f16 2-D X: makes its 'X' parameter X itself
 * (c->x_direct; the template zeroes the padding in its reads) and returns
 * true; false (c unchanged) otherwise. */
bool kiln_template_winograd_direct(const kiln_plan_t* plan, kiln_template_conv_t* c);

/* For an implicit-GEMM instance |c| of |plan| whose planes are the phase
 * split's zero-padded (stride-phase) copy of an f32 or f16 2-D X: makes its 'X'
 * parameter X itself (c->x_direct; the template reads X at
 * (oy*sh + ky*dh - pad_h, ox*sw + kx*dw - pad_w), zero outside) on the
 * dense output grid (crop false, Q = oh*ow, q1 x q2 = oh x ow, plane =
 * ih*iw, toff the taps' offsets in X) and returns true; false (c
 * unchanged) otherwise: patches, 3-D, a grid scratch 'F'. */
bool kiln_template_conv_direct(const kiln_plan_t* plan, kiln_template_conv_t* c);

/* ---- depthwise convolution (template_conv.c) ------------------------------- */

#define KILN_TEMPLATE_DW_MAX_TAPS 49

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
typedef struct kiln_template_dw_s {
  int64_t N, M, C, Mg;          /* images, output channels, input channels, outputs per group */
  int64_t ih, iw, oh, ow;       /* input and output plane */
  int64_t kh, kw, sh, sw, dh, dw, ph, pw; /* window (pads: the leading ones) */
  int32_t bind_x, bind_w, bind_c, bind_y;
  bool f16_x, f16_w, f16_c, f16_y;
  kiln_template_epi_t epi;      /* fused chain (n_ops 0: none); operand i bound at bind_e[i] */
  int32_t bind_e[KILN_TEMPLATE_EPI_MAX];
  bool f16_e[KILN_TEMPLATE_EPI_MAX];
} kiln_template_dw_t;

/* True when plan kernel |k| is the direct depthwise kernel of a 2-D Conv
 * (the node's only kernel; dense rank-4 X, W, Y; group = input channels,
 * one input channel per group; at most KILN_TEMPLATE_DW_MAX_TAPS taps; an
 * optional bias of M floats; indices within int32) whose every parameter
 * has a known role and whose output does not share memory with X or an
 * epilogue operand; fills |out| (cleared on success too).
 * |f16_ok|: buffers may hold f16 (storage; the sums stay f32). */
bool kiln_template_dw_match(const kiln_plan_t* plan, int32_t k, bool f16_ok, kiln_template_dw_t* out);

/* ---- int8 products (template_q8.c) ------------------------------------------ */

/* One QLinearConv / QLinearMatMul instance, as the GPU lowering computes it
 * directly (lowering/lower_nn_quant.c: one plan kernel, one work-item per
 * output element, the node's inputs read through flat views), seen as a
 * grouped integer GEMM:
 *   Y[n][m][p] = requant_m(bias[m] + sum_{k < K} (X(n, p, k) - xz) * (W(m, k) - wz[m]))
 * with requant_m(a) = saturate(round_even(f32(a) * ((xs * ws[m]) / ys)) + yz),
 * the lowering's arithmetic, so an instance is bit-exact with the reference.
 *   conv:   m an output channel of group g = m / Mg, p an output position
 *           (od * oh * ow per image), k = (c, kd, kh, kw) over the group's
 *           Cg input channels; taps outside X read xz (they add 0);
 *   matmul: N = G = 1, m a column of the constant 2-D B [K, M], p a row of A
 *           (A's batches stacked: [P, K]); Y[p][m].
 * The template replaces that plan kernel and keeps its parameter list:
 * bind[role] is the parameter index reading each role (roles in the
 * node's input order: x, x_scale, x_zp, w, w_scale, w_zp, y_scale, y_zp,
 * bias, then y; -1: no bias). */
enum { KILN_Q8_X, KILN_Q8_XS, KILN_Q8_XZ, KILN_Q8_W, KILN_Q8_WS, KILN_Q8_WZ, KILN_Q8_YS, KILN_Q8_YZ,
       KILN_Q8_BIAS, KILN_Q8_Y, KILN_Q8_ROLES };

typedef struct kiln_template_q8_s {
  bool matmul;
  bool x_u8, w_u8, y_u8; /* else i8 */
  bool w_per_chan;       /* w_scale / w_zp per output channel (column) */
  int64_t N, G, M, Mg, Cg, K, P;
  /* conv window over 3 spatial dims (leading ones 1 for 1-D / 2-D) */
  int64_t in[3], out[3], k[3], s[3], d[3], p[3];
  int32_t bind[KILN_Q8_ROLES];
} kiln_template_q8_t;

/* True when plan kernel |k| is the GPU lowering's direct kernel of a
 * QLinearConv (1-3 spatial dims, any group) or a QLinearMatMul with a 2-D
 * B and one A scale and zero point, u8/i8 operands, f32 scales, an i32
 * bias, nothing fused in, every parameter bound to one role, indices
 * within int32 and kiln_template_q8_trips <= |max_trips| (0: any); fills
 * |out|. */
bool kiln_template_q8_match(const kiln_plan_t* plan, int32_t k, int64_t max_trips, kiln_template_q8_t* out);

/* Loop iterations per work-item of the templates' K loops: taps x
 * (ceil(Cg / 4) + 1) (4 input channels a step inside a loop over taps). */
int64_t kiln_template_q8_trips(const kiln_template_q8_t* q);

/* ---- pooling (template_pool.c) --------------------------------------------- */

/* One 2-D window pool as the lowering's printed kernel computes it
 * (lowering/lower_nn_pool.c), f32, reading X and writing Y in one kernel
 * with nothing fused:
 *   Y[p][oy][ox] = max / mean over the taps (ky, kx) with
 *   iy = oy*SH + ky - PH in [0, IH), ix = ox*SW + kx - PW in [0, IW)
 * of X[p][iy][ix] (p = n*C + c). MaxPool takes the first valid tap, then
 * any strictly greater one (the reference's rule, NaNs included);
 * AveragePool divides by KH*KW with count_include_pad, else by the valid
 * taps; GlobalAveragePool is the window of the whole plane. bind_x and
 * bind_y are the plan kernel's parameter indices. */
#define KILN_TEMPLATE_POOL_MAX_TAPS 64
#define KILN_TEMPLATE_POOL_MAX_PLANES 65535 /* N*C: a GPU dispatch dimension */

typedef struct kiln_template_pool_s {
  bool max;       /* MaxPool (else an average) */
  bool count_pad; /* AveragePool: count_include_pad */
  bool hx, hy;    /* X / Y are f16 (fp16 plans; an average sums in f32) */
  int64_t planes, ih, iw, oh, ow, kh, kw, sh, sw, ph, pw;
  int32_t bind_x, bind_y;
} kiln_template_pool_t;

/* True when plan kernel |k| is such a pool (dilations 1, taps and planes
 * within the maxima, indices within int32, no Indices output; X and Y f32
 * or f16, each: out->hx / hy, which a set takes only with |pool_f16|);
 * fills |out|. */
bool kiln_template_pool_match(const kiln_plan_t* plan, int32_t k, kiln_template_pool_t* out);

/* ---- row reductions (template_rows.c) -------------------------------------- */

/* A Softmax or LogSoftmax over contiguous rows as the lowering's printed
 * kernel computes it (lowering/lower_nn_norm.c), f32, reading X and
 * writing Y in one kernel with nothing fused:
 *   Y[r][i] = exp(X[r][i] - m) / s   (log: X[r][i] - m - log(s))
 * with m the row's max and s the sum of exp(X[r][j] - m), for rows r <
 * |rows| of |n| values (the last axis; opset < 13: the axes from |axis| on).
 * Or (|ln|) a LayerNormalization (stash_type 1, f32, no Mean / InvStdDev
 * output) over rows of the axes from |axis| on:
 *   Y[r][i] = (X[r][i] - mean) / sqrt(var + eps) * S[i] (+ B[i])
 * with mean and var (the mean of (x - mean)^2) over the row, S and B the
 * kernel's [n] scale and bias parameters (the lowering's expanded
 * constants, told apart by their values, or flat views of run-time ones).
 * Or (|red|) an f32 reduction of each row to one value Y[r], the row the
 * reduced axes when they are the last ones (Reduce* with those axes,
 * keepdims either way; GlobalAveragePool / GlobalMaxPool: a row an (n, c)
 * plane), rows shorter than the lowering's blocked split (2^16): Sum,
 * Mean, Max, Min (NaN propagating), SumSquare, L2, L1, LogSum; the
 * lowering's two LogSumExp kernels each: the first a MAX row into its
 * temp, the second KILN_ROWS_LSE, reading that max (bind_s) and writing
 *   Y[r] = log(sum exp(X[r][i] - M)) + M,  M the max (0 where infinite).
 * bind_x, bind_y, bind_s, bind_b (-1: no bias) are the plan kernel's
 * parameter indices. */
#define KILN_TEMPLATE_ROWS_MAX_N 65536 /* a row's passes within a GPU loop limit */

/* kiln_template_rows_t.red: the row reductions (0: none) */
typedef enum kiln_rows_red_e {
  KILN_ROWS_NONE = 0,
  KILN_ROWS_SUM,
  KILN_ROWS_MEAN,
  KILN_ROWS_MAX,
  KILN_ROWS_MIN,
  KILN_ROWS_SUMSQ,
  KILN_ROWS_L2,
  KILN_ROWS_L1,
  KILN_ROWS_LOGSUM,
  KILN_ROWS_LSE, /* the sum of exp(x - M) and its log + M; M read (bind_s) */
} kiln_rows_red_t;

typedef struct kiln_template_rows_s {
  bool log;
  bool ln;     /* LayerNormalization */
  bool hx, hy; /* X / Y are f16 (fp16 plans; the sums stay f32) */
  int32_t red; /* kiln_rows_red_t: a reduction (Y holds |rows| values) */
  int64_t rows, n;
  int32_t bind_x, bind_y, bind_s, bind_b; /* bind_s: LN's scale, LSE's row max */
  float eps;   /* ln */
} kiln_template_rows_t;

/* True when plan kernel |k| is such a Softmax / LogSoftmax,
 * LayerNormalization or reduction (rows of at most KILN_TEMPLATE_ROWS_MAX_N,
 * its elements within int32); fills |out|. */
bool kiln_template_rows_match(const kiln_plan_t* plan, int32_t k, kiln_template_rows_t* out);

/* ---- the descriptors on the plan (template_choose.c) ----------------------- */

typedef enum kiln_template_kind_e {
  KILN_TEMPLATE_NONE = 0,  /* printed from its tensor IR */
  KILN_TEMPLATE_GEMM,      /* gemm */
  KILN_TEMPLATE_CONV,      /* conv: implicit GEMM, in the slot kernel */
  KILN_TEMPLATE_WINOGRAD,  /* conv: Winograd F(2x2, 3x3), in the slot kernel */
  KILN_TEMPLATE_DEPTHWISE, /* dw */
  KILN_TEMPLATE_MERGED,    /* a Conv's GEMM kernel whose work kernel |into|'s instance does */
  KILN_TEMPLATE_Q8,        /* q8: QLinearConv / QLinearMatMul as an int8 implicit GEMM */
  KILN_TEMPLATE_POOL,      /* pool: 2-D MaxPool / AveragePool / GlobalAveragePool */
  KILN_TEMPLATE_ROWS,      /* rows: Softmax / LogSoftmax / LayerNorm / reduction rows, a subgroup a row */
} kiln_template_kind_t;
/* How many kinds there are (arrays indexed by kind); the last kind + 1. */
#define KILN_TEMPLATE_KINDS (KILN_TEMPLATE_ROWS + 1)

/* The tile parameters of one instance, in the order its target's template
 * reads them (targets/opencl/opencl_internal.h and targets/vulkan/
 * vulkan_target.h name them per kind). The target's rules choose them
 * (kiln_template_set_t.tiles) inside kiln_template_choose; they are the
 * record a tuner searches over and may overwrite (then call the set's
 * weight_blocks and kiln_template_weights_lay_out, see below). n 0: none
 * chosen (the target refuses to print the instance). */
#define KILN_TEMPLATE_TILES_MAX 8

typedef struct kiln_template_tiles_s {
  int32_t n;
  int32_t v[KILN_TEMPLATE_TILES_MAX];
} kiln_template_tiles_t;

/* The layout of a conv instance's weight constant. */
typedef enum kiln_template_wlayout_e {
  KILN_TEMPLATE_W_PACKED = 0, /* the lowering's panels (kiln_template_conv_t), as they are */
  /* in the order the implicit-GEMM micro-kernel reads them: blocks of
   * |block| channels, K slices of |slice|, micro-panels of |panel|
   * channels, k, channel; zero-padded to whole blocks and slices */
  KILN_TEMPLATE_W_TILED,
  /* Winograd F(2x2, 3x3): U = G g G^T per output and input channel, as
   * U[((m / panel * 16 + xi) * CP + c) * panel + m % panel], channels
   * padded with zeros to whole groups of |block| and input channels to
   * whole slices of |slice| (CP) */
  KILN_TEMPLATE_W_WINOGRAD,
  /* Winograd F(4x4, 3x3) (points 0, +-1, +-2): U = G g G^T with the 6x3
   * G, the 36 positions xi of the 6x6 tile laid out as WINOGRAD's 16,
   * after KILN_TEMPLATE_WINO4_SIZES words holding the conv's sizes
   * (kiln_template_wino4_sizes): the Vulkan instance reads them at run
   * time, so one shader serves every conv of its kind */
  KILN_TEMPLATE_W_WINOGRAD4,
} kiln_template_wlayout_t;

/* Elements before U in a W_WINOGRAD4 constant (3 vec4 texels): M C oh ow
 * ih iw plane q2 of the conv as exact f32 values, then 1 where its fused
 * epilogue ends in a Relu that is its only op or follows a residual Add
 * (kiln_template_epi_residual_relu), then 1 where it is that residual
 * Add + Relu (0 otherwise: the Vulkan instance of a conv with no
 * epilogue, a Relu or a residual Add + Relu reads them at run time, so
 * they share a shader), then zeros (f16 weights: zeros throughout; no
 * target reads them there). */
#define KILN_TEMPLATE_WINO4_SIZES 12
/* Those words of |c|, in that order; false when one is not exact in f32
 * (above 2^24). */
bool kiln_template_wino4_sizes(const kiln_template_conv_t* c, float out[KILN_TEMPLATE_WINO4_SIZES]);
/* True when |c|'s fused epilogue is Y + operand 0, then a Relu, with
 * operand 0 (parameter role '0') of Y's own shape: a residual (element
 * n * M * P + m * P + p; any n stride for one image). */
bool kiln_template_epi_residual_relu(const kiln_template_conv_t* c);

typedef struct kiln_template_weights_s {
  kiln_template_wlayout_t layout;
  int32_t buffer; /* plan buffer of the weight constant (-1: none) */
  /* TILED / WINOGRAD: the geometry the tiles read (the set's weight_blocks) */
  int64_t block, slice, panel;
  /* the constant holds |layout| (kiln_template_weights_lay_out ran); the
   * Conv's GEMM kernel, MERGED, still names it in its tensor IR but leaves
   * the program */
  bool laid_out;
} kiln_template_weights_t;

/* The device limits a point must fit (0: unknown, not checked). */
typedef struct kiln_template_limits_s {
  int64_t max_workgroup_size;
  uint64_t local_mem_bytes;
  /* loop iterations one invocation may run (kiln_device_info_t.loop_limit) */
  int64_t loop_limit;
  /* shader features the device lacks (KILN_GPU_LACKS_*) */
  uint32_t gpu_lacks;
  /* the width work-groups should be whole multiples of (an NVIDIA warp
   * 32, an AMD wavefront 64: kiln_device_info_t.subgroup_size) and the
   * compute units, for the GPU rules' work-group shapes (0: unknown) */
  int32_t warp;
  int32_t compute_units;
} kiln_template_limits_t;

/* What lowering chose for one plan kernel (kiln_plan_kernel_t.tmpl). */
typedef struct kiln_template_s {
  kiln_template_kind_t kind;
  int32_t into;           /* MERGED: the kernel running the instance */
  /* CONV: TILED when the weights are the conv's own and the set re-lays
   * them out; WINOGRAD: always WINOGRAD; else PACKED */
  kiln_template_weights_t weights;
  kiln_template_tiles_t tiles;
  /* CONV with a grid parameter: partial sums between K slices stay in a
   * private f32 array (the instance was matched without the grid) */
  bool psum_private;
  /* GEMM / CONV: the plan kernel the instance computes sums in f16 (a
   * PRIVATE or LOCAL f16 accumulator: the compile's --fp16-accumulate,
   * lowering/precision.h) and the set's |f16_sums| says its template can
   * too: the target's tiles may then choose f16 products and sums (the
   * Vulkan record's seventh entry, h). False for every other instance. */
  bool f16_sums;
  /* > 0: |tiles| came from a tuning cache record measured this much faster
   * than the default (compiler/tune.c); the program records the point */
  double tuned_speedup;
  kiln_template_gemm_t gemm;
  kiln_template_conv_t conv; /* CONV, WINOGRAD */
  kiln_template_dw_t dw;
  kiln_template_q8_t q8;
  kiln_template_pool_t pool; /* POOL */
  kiln_template_rows_t rows; /* ROWS */
  /* A Winograd instance chosen by a set with |winograd_switch| and the
   * implicit-GEMM CONV instance of the same conv (the set's default
   * tiles, TILED weights) point at each other; the WINOGRAD one's tiles
   * end in the switch (1 Winograd, 0 the CONV one), which
   * kiln_template_switch puts in the kernel's place. NULL: none. */
  struct kiln_template_s* alt;
  /* WINOGRAD with |alt| reading X itself: the MERGED descriptor of its
   * phase split (the CONV one reads the split's planes, which then runs) */
  struct kiln_template_s* phase_merged;
  /* The device the set's rules chose the tiles for (kiln_template_set_t.
   * limits, its gpu_lacks the set's): a target's tie and hints read its
   * rule set and limits here. Zeros: unknown (no device). */
  kiln_template_limits_t device;
} kiln_template_t;

/* ---- search spaces and fingerprints (template_tune.c) ----------------------
 * What a tuner may change in an instance is its tiles record; the target
 * says, beside its template, which values each entry may take (its knobs)
 * and which points it prints on a device (its constraints). The hand
 * default (the set's tiles rule) is always in the space. */
#define KILN_TEMPLATE_KNOB_VALUES 12

typedef struct kiln_template_knob_s {
  const char* name; /* "tm", "bk", ... (static) */
  int32_t n;
  int32_t v[KILN_TEMPLATE_KNOB_VALUES]; /* ascending, distinct: neighbours are adjacent entries */
} kiln_template_knob_t;

typedef struct kiln_template_space_s {
  /* the knob space by name and version ("opencl.conv.1"): a cache record
   * for another space is not used */
  const char* version;
  int32_t n_knobs; /* the instance's tiles.n, knob i being tiles.v[i] */
  kiln_template_knob_t knobs[KILN_TEMPLATE_TILES_MAX];
} kiln_template_space_t;


/* Adds |value| to |knob| (kept ascending; no-op when present or full). */
void kiln_template_knob_add(kiln_template_knob_t* knob, int32_t value);

/* Appends knob |name| with the |n| values |v| and |dflt| (the hand default
 * is always a candidate) to |sp| (at most KILN_TEMPLATE_TILES_MAX knobs).
 * KILN_TEMPLATE_KNOB(sp, "tm", dflt, 1, 2, 4) lists the values inline. */
void kiln_template_space_knob(kiln_template_space_t* sp, const char* name, const int32_t* v, int32_t n, int32_t dflt);
#define KILN_TEMPLATE_KNOB(sp, name, dflt, ...)                                                         \
  kiln_template_space_knob(sp, name, (const int32_t[]){__VA_ARGS__},                                   \
                           (int32_t)(sizeof((int32_t[]){__VA_ARGS__}) / sizeof(int32_t)), dflt)

/* The index of tiles->v[i] in knob i for every knob, into idx; false when
 * a value is not in the space or the counts differ. */
bool kiln_template_space_index(const kiln_template_space_t* sp, const kiln_template_tiles_t* tiles, int32_t* idx);

/* A 64-bit FNV-1a hash of what instance |t| computes: its kind and every
 * field of its descriptor that reaches the printed kernel (shapes, strides,
 * dtypes, transposes, packing, taps, the fused epilogue, the weight layout
 * and where partial sums go), never its tiles, plan buffer indices or
 * names. Two instances with one fingerprint print the same kernel for the
 * same tiles, in any model. 0 for NONE and MERGED. */
uint64_t kiln_template_fingerprint(const kiln_template_t* t);

/* "gemm", "conv", "winograd", "depthwise", "merged", "q8", "none". */
const char* kiln_template_kind_name(kiln_template_kind_t kind);

/* The templates a target has and the rules it measured for them; the
 * target fills it (kiln_opencl_templates, kiln_spirv_templates), lowering
 * never names a target. All false: no templates. */
/* Shader features a GPU device may lack (kiln_template_set_t.gpu_lacks,
 * kiln_plan_t.gpu_lacks): 64-bit integers (kiln_device_info_t.shader_int64),
 * subgroup ballot operations in compute shaders (.subgroup_ballot), f64
 * arithmetic (.fp64) and the 4x8-bit integer dot product (.int_dot: the
 * int8 templates' packed-dot path) and subgroup arithmetic in compute
 * shaders (.subgroup_arith: the row reductions' template) and rgba16f
 * storage texel buffers (.texel_f16: printed kernels' f16 parameters as
 * vec4 texels). */
enum {
  KILN_GPU_LACKS_INT64 = 1,
  KILN_GPU_LACKS_SUBGROUP = 2,
  KILN_GPU_LACKS_FP64 = 4,
  KILN_GPU_LACKS_IDOT = 8,
  KILN_GPU_LACKS_SUBGROUP_ARITH = 16,
  KILN_GPU_LACKS_TEXEL_F16 = 32,
  /* Not a lack: the device's class. Set where the device is a GPU
   * (integrated, discrete or virtual: kiln_device_info_t.cpu_backed false),
   * clear for CPU-backed drivers (lavapipe, SwiftShader, PoCL) and where no
   * device is known; the Vulkan tile rules then take their GPU defaults
   * (vulkan_tiles.c: work-groups of 64-256 invocations) instead of
   * lavapipe's. KILN_VULKAN_RULES=gpu sets it and =cpu clears it on any
   * device (kiln_compile_gpu_lacks). */
  KILN_GPU_CLASS_GPU = 64
};

typedef struct kiln_template_set_s {
  bool gemm;
  /* the GEMM and implicit-GEMM conv templates can sum in f16 where the
   * kernel they replace does (kiln_template_t.f16_sums) */
  bool f16_sums;
  kiln_template_gemm_rules_t gemm_rules;
  bool conv;
  /* a cropped instance keeps the grid as its 'F' parameter, where partial
   * sums between K slices may go (else it is matched without it) */
  bool conv_grid;
  /* with conv_grid: partial sums stay private anyway (they always do when
   * the grid holds f16) */
  bool conv_private_sums;
  /* the conv's own weights are re-laid out for the template */
  bool conv_tiled_weights;
  /* Winograd where it covers, the weights are tiled and, with |tiles| its
   * 2x2 tiles per image (kiln_template_winograd_tiles), C >= min_channels,
   * M >= min_channels and (tiles >= min_tiles or C * M >= min_work) */
  bool winograd;
  int64_t winograd_min_channels, winograd_min_tiles, winograd_min_work;
  /* depthwise where the larger stride is >= depthwise_min_stride, or the
   * input is f16 and depthwise_f16_any_stride */
  bool depthwise;
  int64_t depthwise_min_stride;
  bool depthwise_f16_any_stride;
  /* Optional (NULL: instances get no tiles and no weight layout beyond
   * the lowering's packed one happens): the target's tile rules. Writes
   * t->tiles for the instance |t| describes (kind and descriptor set),
   * including the target's environment overrides (KILN_OPENCL_*_TILES,
   * KILN_SPIRV_*_TILES), reading the device's features and limits from
   * t->device (kiln_template_set_tiles fills it first). */
  void (*tiles)(kiln_template_t* t);
  /* Device features the tiles must do without (KILN_GPU_LACKS_*, copied
   * into each instance's t->device.gpu_lacks; 0: all there):
   * kiln_compile_config_t.gpu_lacks. */
  uint32_t gpu_lacks;
  /* The target device's work-group limits (kiln_compile_device_limits;
   * zeros: unknown), copied with |gpu_lacks| into each instance's
   * t->device before |tiles| runs, so the rules can size work-groups and
   * __local tiles to the device. */
  kiln_template_limits_t limits;
  /* Optional: for a TILED or WINOGRAD weight layout, the geometry those
   * tiles read (t->weights.block, .slice, .panel) from t->tiles. */
  void (*weight_blocks)(kiln_template_t* t);
  /* Optional (NULL: the instances are not tunable): the knobs of instance
   * |t| (its kind and tiles set by |tiles|), its defaults among them. False
   * when the kind has none. */
  bool (*space)(const kiln_template_t* t, kiln_template_space_t* out);
  /* Optional, with |space|: NULL when the target prints |tiles| for |t| and
   * the point fits |lim| (work-group size, local memory, what the template
   * requires of its tiles), else why not (static text). A tuner or a cache
   * record asks before anything is built. */
  const char* (*tiles_check)(const kiln_template_t* t, const kiln_template_tiles_t* tiles,
                             const kiln_template_limits_t* lim);
  /* Optional, with |space|: makes a point a tuner drew consistent where
   * the template ties entries together (the Vulkan subgroup mode: RM is
   * TM and TN is 8 RN), so single-knob steps stay valid; run before
   * |tiles_check|. */
  void (*tiles_tie)(const kiln_template_t* t, kiln_template_tiles_t* tiles);
  /* Optional, with |space|: up to |cap| points worth measuring first, in
   * order, before the random draws (where a device's speed is known to
   * lie: larger register tiles on lavapipe); returns how many. A tuner
   * still checks each. */
  int32_t (*tiles_hints)(const kiln_template_t* t, kiln_template_tiles_t* out, int32_t cap);
  /* Optional, with |space|: what a point's cost grows with (*size > 0:
   * the unrolled body the driver compiles) and a class of points whose
   * costs follow one law (*cls: the read mode), for the tuner's skip of
   * dear random draws (compiler/tune_dear.h). NULL: no draw is skipped. */
  void (*tiles_features)(const kiln_template_t* t, const kiln_template_tiles_t* tiles, double* size, int32_t* cls);
  /* int8 products (kiln_template_q8_match) whose work-items loop at most
   * q8_max_trips times (kiln_template_q8_trips; 0: any; a per-invocation
   * loop limit bounds it) */
  bool q8;
  int64_t q8_max_trips;
  /* with |winograd|: f16 weights and input only where the device binds
   * rgba16f texel buffers (no KILN_GPU_LACKS_TEXEL_F16 in |gpu_lacks|: the
   * target reads them as such texels) */
  bool winograd_f16_texels;
  /* with |winograd|: F(4x4, 3x3) instances (weights W_WINOGRAD4) */
  bool winograd4;
  /* with |winograd|: an instance whose planes are the phase split's
   * zero-padded copy of f32 X reads X itself (x_direct) and the phase
   * kernel leaves the program (MERGED into the instance) */
  bool winograd_reads_x;
  /* with |winograd|: an instance with no epilogue or one Relu gets a
   * placeholder parameter (role 'D', X's buffer, never read) where a
   * residual operand would be, so its parameters are those of an
   * instance with a residual Add + Relu and one text can serve both (the
   * Add chosen at run time: KILN_TEMPLATE_WINO4_SIZES's word 9) */
  bool winograd_epi_slot;
  /* 2-D f32 pools (kiln_template_pool_match); |pool_f16|: f16 X or Y too
   * where the device binds rgba16f storage texel buffers (no
   * KILN_GPU_LACKS_TEXEL_F16 in |gpu_lacks|: the target reads f16 X as
   * such texels) */
  bool pool;
  bool pool_f16;
  /* f32 Softmax / LogSoftmax rows (kiln_template_rows_match) of at least
   * |rows_min_elems| elements in all, LayerNormalization rows of at least
   * |rows_ln_min_elems|, reductions and global pools of at least
   * |rows_red_min_elems| (a global pool taken here is not a pool
   * instance); |rows_f16|: f16 X or Y too */
  bool rows;
  int64_t rows_min_elems, rows_ln_min_elems, rows_red_min_elems;
  bool rows_f16;
  /* with |rows|, for a GPU (KILN_GPU_CLASS_GPU in |gpu_lacks|): every f32
   * row of the three kinds takes the template, whatever its size (a
   * subgroup a row is the GPUs' usual reduction; the thresholds above are
   * lavapipe's) */
  bool rows_gpu_all;
  /* with |winograd|: Winograd on or off per conv is a knob: every
   * Winograd instance carries its implicit-GEMM alternative (t->alt) and
   * one more tiles entry after the target's, 1 (Winograd) or 0 (the
   * implicit-GEMM conv with its default tiles) */
  bool winograd_switch;
  /* with |depthwise|: the template or the printed kernel per depthwise
   * conv is a knob: every match gets a DEPTHWISE instance whose tiles end
   * in the switch, 1 (the template) where the rule above takes it, else 0
   * (the printed kernel: the instance waits in the kernel's tmpl_off) */
  bool depthwise_switch;
  /* with |conv|: an implicit-GEMM instance whose planes are the phase
   * split's copy of f32 or f16 2-D X reads X itself (kiln_template_conv_direct)
   * and the phase kernel leaves the program (MERGED into the instance) */
  bool conv_reads_x;
} kiln_template_set_t;

/* Chooses a template for every kernel of |plan| that |set| has one for
 * and sets plan->kernels[k].tmpl (descriptors from the plan's arena;
 * kernels without one get NULL, earlier choices are replaced), with the
 * tiles the set's rules pick, then lays the weights out for them
 * (kiln_template_select, then kiln_template_weights_lay_out). Run after
 * fusion and the precision pass; neither may run after it. Once weights
 * are laid out the plan's constants hold them: the plan is then for that
 * target's instances only (choosing again first puts the packed weights
 * back). Errors: INTERNAL when a conv matched with its grid does not match
 * without it, those of kiln_template_weights_lay_out, OUT_OF_MEMORY. */
KILN_MUST_USE kiln_status_t kiln_template_choose(kiln_plan_t* plan, const kiln_template_set_t* set);

/* The first half of kiln_template_choose: the descriptors, their tiles and
 * weight geometry, with the constants in the lowering's packed layout
 * (an earlier choice's layouts put back). A tuner overwrites tiles here,
 * calls set->weight_blocks on the descriptors it changed, then
 * kiln_template_weights_lay_out. */
KILN_MUST_USE kiln_status_t kiln_template_select(kiln_plan_t* plan, const kiln_template_set_t* set);

/* Gives instance |t| the set's device (t->device: its limits with its
 * gpu_lacks) and the tiles its rules pick for it (set->tiles, when the
 * target has rules; a MERGED descriptor has none). */
void kiln_template_set_tiles(const kiln_template_set_t* set, kiln_template_t* t);

/* The instance whose tiles record a tuner or a cache sets for kernel |k|:
 * the WINOGRAD one where its CONV alternative stands in its place, the
 * switched-off one (tmpl_off) where the printed kernel runs, else the
 * kernel's descriptor (NULL: none). */
kiln_template_t* kiln_template_tunable_of(const kiln_plan_t* plan, int32_t k);

/* For kernel |k| with a switch in its record (kiln_template_set_t.
 * winograd_switch, .depthwise_switch): puts what the switch entry asks
 * for in the kernel's place and returns it: the Winograd instance or its
 * CONV alternative (with the phase split back in the program where the
 * Winograd one read X itself; the incoming one's weights not laid out, so
 * run it with the weights restored and lay them out after), the depthwise
 * instance or NULL (the printed kernel; the instance in tmpl_off). Other
 * kernels: their descriptor. */
kiln_template_t* kiln_template_switch(kiln_plan_t* plan, int32_t k);

/* ---- weight layouts (template_weights.c) ----------------------------------- */

/* Conv instance |t|'s weights, plan buffer |w| in the lowering's packed
 * layout (f32, or f16 when the W parameter is), in the layout
 * t->weights says (TILED or WINOGRAD, with its geometry), into *out
 * (kiln_allocator_system(), as the plan's owned constants; rank 1).
 * Winograd's transform is computed in f32 and an f16 constant's U rounded
 * to f16 once. Errors: INVALID_ARGUMENT naming the constant when its dtype
 * is not the W parameter's, it is too short for the packed layout, or the
 * layout or its geometry is missing; OUT_OF_MEMORY. */
KILN_MUST_USE kiln_status_t kiln_template_weights_convert(const kiln_template_t* t, const kiln_plan_buffer_t* w,
                                                          kiln_array_t* out);

/* Bytes of conv instance |t|'s weights once laid out (TILED or WINOGRAD,
 * with the geometry its weight_blocks gave); 0 for any other descriptor. */
uint64_t kiln_template_weights_bytes(const kiln_template_t* t);

/* Replaces the weight constant of every conv instance of |plan| whose
 * layout is TILED or WINOGRAD with geometry (and not laid out yet) by its
 * kiln_template_weights_convert (a rank-1 buffer of the same name and
 * dtype) and marks it laid out. All conversions happen before the plan
 * changes. Errors: as kiln_template_weights_convert, naming the kernel. */
KILN_MUST_USE kiln_status_t kiln_template_weights_lay_out(kiln_plan_t* plan);

/* Puts back the constants kiln_template_weights_lay_out replaced (their
 * packed layout) and marks every descriptor's weights not laid out. */
void kiln_template_weights_restore(kiln_plan_t* plan);

#ifdef __cplusplus
}
#endif
#endif
