/* Private to the nn lowerings (lowering/lower_nn*.c): a small kernel builder
 * over the tensor IR (unique loop names, schedule steps recorded next to the
 * loops they name, automatic parameter lists), f32 load/store helpers,
 * compile-time constants, the window segmentation shared by convolutions
 * and pools, and the packed, register-tiled GEMM generator used by MatMul,
 * Gemm and Conv.
 *
 * Everything here builds TIR only; nothing runs. Builders return NULL on
 * out-of-memory (the tir ctx remembers it) and nn_emit reports it.
 */
#ifndef KILN_LOWERING_LOWER_NN_IMPL_H_
#define KILN_LOWERING_LOWER_NN_IMPL_H_

#include "ir/op.h"
#include "ir/ops/nn_internal.h"
#include "lowering/lower.h"

/* ---- kernel builder ---------------------------------------------------- */

#define NN_MAX_NAMES 256

typedef struct nn_kb_s {
  kiln_lower_ctx_t* ctx;
  tir_ctx_t* t;
  tir_schedule_t* sched; /* steps for the kernel being built */
  int32_t n_names;
  const char* names[NN_MAX_NAMES]; /* loop names used in this kernel */
  int32_t counts[NN_MAX_NAMES];
  int32_t extra; /* numbering once the name table is full */
  /* appended to the next kernel's name (the block-sparse GEMM's "_sparse",
   * which profiles and --dump show); NULL: none */
  const char* name_suffix;
} nn_kb_t;

void nn_kb_init(nn_kb_t* kb, kiln_lower_ctx_t* ctx);
/* A loop variable whose name is unique within the current kernel
 * ("k", "k_1", ...). */
tir_var_t* nn_var(nn_kb_t* kb, const char* base);
/* Records a schedule step for loop |v| (its kind in the default schedule). */
void nn_vectorize(nn_kb_t* kb, const tir_var_t* v);
/* Builds the body of one output position given its index expression. */
typedef const tir_stmt_t* (*nn_seg_fn)(nn_kb_t* kb, void* u, const tir_expr_t* o);
/* Loops over [start, start + len) in pieces of 16k, 8 and 4 lanes
 * (VECTORIZED when |vec|) and a scalar rest, calling |fn| for the body. */
const tir_stmt_t* nn_vec_run(nn_kb_t* kb, int64_t start, int64_t len, bool vec, nn_seg_fn fn,
                             void* u);
void nn_unroll(nn_kb_t* kb, const tir_var_t* v);
void nn_parallel(nn_kb_t* kb, const tir_var_t* v);
/* Wraps |body| in a serial loop (the naive kernel has serial loops only; the
 * schedule sets their kinds). Extent 1 loops are kept (the simplifier
 * removes them). */
const tir_stmt_t* nn_for(nn_kb_t* kb, const tir_var_t* v, int64_t extent,
                         const tir_stmt_t* body);
/* Emits the kernel |body| with the recorded schedule, then starts a fresh
 * kernel. Parameters are collected from the GLOBAL buffers the body loads
 * and stores: node inputs (in input order), node outputs, then the rest in
 * first-use order. */
kiln_status_t nn_emit(nn_kb_t* kb, const tir_stmt_t* body);

/* ---- expressions ------------------------------------------------------- */

const tir_expr_t* nn_i(nn_kb_t* kb, int64_t v);
const tir_expr_t* nn_v(nn_kb_t* kb, const tir_var_t* v);
/* a + b, a * b, a + c, a * c with constant folding (I64). */
const tir_expr_t* nn_add(nn_kb_t* kb, const tir_expr_t* a, const tir_expr_t* b);
const tir_expr_t* nn_mul(nn_kb_t* kb, const tir_expr_t* a, const tir_expr_t* b);
const tir_expr_t* nn_addc(nn_kb_t* kb, const tir_expr_t* a, int64_t c);
const tir_expr_t* nn_mulc(nn_kb_t* kb, const tir_expr_t* a, int64_t c);
/* floordiv / floormod by a positive constant, folded for constants and 1. */
const tir_expr_t* nn_divc(nn_kb_t* kb, const tir_expr_t* a, int64_t c);
const tir_expr_t* nn_modc(nn_kb_t* kb, const tir_expr_t* a, int64_t c);
/* min(max(a, lo), hi) */
const tir_expr_t* nn_clamp(nn_kb_t* kb, const tir_expr_t* a, int64_t lo, int64_t hi);
/* f32 immediate. */
const tir_expr_t* nn_f(nn_kb_t* kb, double v);
/* Load converted to f32 (a no-op cast for f32 buffers). */
const tir_expr_t* nn_ldf(nn_kb_t* kb, const tir_buffer_t* b, const tir_expr_t* const* idx);
/* Store of an f32 value converted to the buffer dtype. */
const tir_stmt_t* nn_stf(nn_kb_t* kb, const tir_buffer_t* b, const tir_expr_t* const* idx,
                         const tir_expr_t* v);
/* Index list for a rank-r buffer from |n| expressions. */
#define NN_IDX(...) ((const tir_expr_t* const[]){__VA_ARGS__})

/* ---- constants --------------------------------------------------------- */

/* Value of input |i| as a new f32 array (malloc'd, caller frees), or NULL
 * with *out NULL when the input is not a compile-time constant. */
kiln_status_t nn_const_input_f32(kiln_lower_ctx_t* ctx, int32_t i, float** out);
/* Registers |data| (malloc'd with the system allocator; ownership passes to
 * the plan, also on error) as a compile-time f32 constant of |shape|. */
kiln_status_t nn_const_f32(kiln_lower_ctx_t* ctx, const char* name, int32_t rank,
                           const int64_t* shape, float* data, const tir_buffer_t** out);
/* The same for any dtype (|data| holds its elements). */
kiln_status_t nn_const_typed(kiln_lower_ctx_t* ctx, const char* name, kiln_dtype_t dtype, int32_t rank,
                             const int64_t* shape, void* data, const tir_buffer_t** out);
/* Allocates |n| floats (zeroed) or fails naming |what|. */
kiln_status_t nn_alloc_f32(int64_t n, const char* what, float** out);
/* True when input |i| is present and a compile-time constant. */
bool nn_is_const(const kiln_lower_ctx_t* ctx, int32_t i);
/* A buffer of another (row-major) shape over the memory of |base| (a node
 * input or output), so a kernel can index e.g. [N][C][H*W] linearly where
 * the graph tensor is [N][C][H][W]: a plan TEMP whose alias_of is |base|.
 * (lower.h has kiln_lower_alias for node outputs only; this is the same
 * mechanism for a kernel-private view.) */
kiln_status_t nn_view(kiln_lower_ctx_t* ctx, const tir_buffer_t* base, const char* name,
                      int32_t rank, const int64_t* shape, const tir_buffer_t** out);
/* The same with elements of |dtype| over |base|'s bytes (e.g. an i32 view
 * of u8 data, four bytes an element): the view's bytes must be base's. */
kiln_status_t nn_view_typed(kiln_lower_ctx_t* ctx, const tir_buffer_t* base, const char* name, kiln_dtype_t dtype,
                            int32_t rank, const int64_t* shape, const tir_buffer_t** out);

/* ---- windows (conv/pool) ------------------------------------------------ */

/* The window of a conv/pool along one spatial axis: output o reads input
 * o*s + k*d - p for taps k in [0, kn). */
typedef struct nn_axis_s {
  int64_t in, out, k, s, d, p;
} nn_axis_t;

/* Outputs [lo, hi) whose taps are all inside the input (lo == hi when
 * none are). */
void nn_axis_interior(const nn_axis_t* a, int64_t* lo, int64_t* hi);

/* Parses kernel/strides/dilations/pads/auto_pad of a conv or pool node with
 * static input spatial dims |in| and output dims |out| (nsp each), resolving
 * SAME pads; |kernel| overrides kernel_shape when non-NULL (conv weights). */
kiln_status_t nn_window(const kiln_node_t* node, const char* op, int32_t nsp,
                        const int64_t* in, const int64_t* out, const int64_t* kernel,
                        bool ceil_mode, nn_axis_t* axes);

/* ---- reductions ------------------------------------------------------- */

/* Splits the dims of |x| into runs of kept and reduced (|red|) dims, size-1
 * dims dropped, each run merged into one dim: gdim/gred get the runs in
 * order (at least one: [1] kept when nothing is left). Returns their count. */
/* (x - mean[0])^2 in f32: the variance pass of the normalisations, with
 * |mean| a PRIVATE [1] buffer holding the row's mean. */
const tir_expr_t* nn_sqdev(nn_kb_t* kb, const tir_expr_t* x, const tir_buffer_t* mean);

int32_t nn_dim_runs(const tir_buffer_t* x, const bool* red, int64_t* gdim, bool* gred);

typedef const tir_expr_t* (*nn_val_fn)(nn_kb_t* kb, const void* user, const tir_expr_t* i);

/* dst[0] = ident op f(0) op ... op f(n-1) for op TIR_ADD / TIR_MAX in dst's
 * dtype. f32 rows of 64 and more run 16 lanes at a time in a PRIVATE vector
 * (so the row loop vectorizes) and then across the lanes. */
const tir_stmt_t* nn_lane_reduce(nn_kb_t* kb, const tir_buffer_t* dst, tir_binop_t op,
                                 const tir_expr_t* ident, int64_t n, nn_val_fn f,
                                 const void* user);

/* Softmax or LogSoftmax of |x| into |y| along dim 1 of [outer, n, inner]:
 * both are [outer, n] views when inner is 1, else [outer, n, inner]
 * (Softmax, LogSoftmax, SoftmaxCrossEntropyLoss). Emits one kernel. */
kiln_status_t nn_softmax_emit(kiln_lower_ctx_t* ctx, const tir_buffer_t* x, const tir_buffer_t* y,
                              int64_t outer, int64_t n, int64_t inner, bool log_form);

/* ---- GEMM -------------------------------------------------------------- */

/* C[b][m][n] = epi(init(b,m,n) + sum_k L[b][m][k] * R[b][k][n]) for b in
 * [0, batch). Operands are read through callbacks or from packed buffers:
 * a packed L is [lbatch][ceil(M/mr)][K][mr] (rows of a tile contiguous per
 * k), a packed R is [rbatch][ceil(N/nr)][K][nr]; tail tiles are zero padded.
 * The generator tiles C into mr x nr register tiles accumulated in a
 * PRIVATE buffer (mr loop unrolled, nr loop vectorized), blocks K by kc and
 * N by nc (see lower_nn_gemm.c for the heuristics) and runs chunks of M or
 * N tiles (or batches) on the worker threads. */
typedef struct nn_gemm_s nn_gemm_t;

/* Element callbacks return f32 expressions; b, r, c are I64 expressions. */
typedef const tir_expr_t* (*nn_elem_fn)(nn_kb_t* kb, const nn_gemm_t* g, const tir_expr_t* b,
                                        const tir_expr_t* r, const tir_expr_t* c);
typedef const tir_expr_t* (*nn_epi_fn)(nn_kb_t* kb, const nn_gemm_t* g, const tir_expr_t* b,
                                       const tir_expr_t* m, const tir_expr_t* n,
                                       const tir_expr_t* acc);
typedef const tir_stmt_t* (*nn_store_fn)(nn_kb_t* kb, const nn_gemm_t* g, const tir_expr_t* b,
                                         const tir_expr_t* m, const tir_expr_t* n,
                                         const tir_expr_t* v);
/* Index into a packed operand's batch dim for GEMM batch b. */
typedef const tir_expr_t* (*nn_bmap_fn)(nn_kb_t* kb, const nn_gemm_t* g, const tir_expr_t* b);
/* Taps of an implicit-GEMM convolution come in groups (one per stride
 * residue class); within a group the tap index and the input offset are
 * affine in up to three loop variables kv[i] in [0, ext[i]):
 * tap = tbase + sum kv[i] * tstr[i]. */
typedef struct nn_tap_group_s {
  int64_t ext[3];
  int64_t tbase, tstr[3];
} nn_tap_group_t;

/* Direct R access: element (k, n) with k = kout * taps + tap, the tap being
 * the one of group |grp| at loop indices kv[0..2] (I64 expressions). */
typedef const tir_expr_t* (*nn_rload_fn)(nn_kb_t* kb, const nn_gemm_t* g, const tir_expr_t* b,
                                         const tir_expr_t* kout, int32_t grp,
                                         const tir_expr_t* const* kv, const tir_expr_t* n);

typedef struct nn_operand_s {
  const tir_buffer_t* packed; /* packed layout (see above) or NULL */
  nn_bmap_fn bmap;            /* packed batch index; NULL: b itself (or 0 if dim is 1) */
  nn_elem_fn load;            /* direct L access (b, m, k) */
  nn_rload_fn rload;          /* direct R access (b, kout, tap, n) */
  nn_rload_fn lload;          /* direct L access by tap (b, kout, tap, m): the
                               * implicit GEMM with the input as L */
} nn_operand_t;

struct nn_gemm_s {
  int64_t batch, M, N, K;
  /* K = (K / taps) * taps: the k loop runs over K / taps ("kout"), and
   * inside it the tap groups (implicit-GEMM convolution: each tap is a
   * shift of the input). taps 0 means 1 with no groups. */
  int64_t taps;
  int32_t n_groups;
  const nn_tap_group_t* groups;
  nn_operand_t L, R;
  nn_elem_fn init;    /* initial accumulator (b, m, n); NULL = 0 */
  nn_epi_fn epi;      /* applied once to the final sum; NULL = identity */
  nn_elem_fn reload;  /* f32 value of C as stored (K blocking); NULL = no K blocking */
  nn_store_fn store;
  const void* user;   /* the op's data for the callbacks */
  /* Tiling, filled by nn_gemm_tiles (the caller may override before packing). */
  int64_t mr, nr, kc, nc_tiles; /* kc counts k-loop iterations (K / taps units) */
  bool pack_l;        /* pack L micro-panels at run time (L not packed) */
  bool n_outer;       /* with pack_l: pack all M tiles of a K block, then
                       * loop N outside M (R streamed once: R = weights) */
  int32_t par;        /* kiln_gemm_par_t: the split a gemm hook forced (AUTO: heuristic) */
  int64_t nr_max;     /* for the hook: the widest nr the caller's layout allows (0: N) */
  /* The int8 GEMM: L and R elements are i32 holding two i16 values (K
   * counts pairs), the accumulator is i32 and each step is dot2_i16; init
   * and epi see i32, packed constants are i32 (get's value, exact in a
   * double). No K blocking (reload NULL): the i32 sums never round. */
  bool idot;
  /* with idot: packed constant operands hold int8 pairs, one i16 each (low
   * byte first), widened where they are read (widen_i8x2): int8 weights
   * stored one byte each. */
  bool w8;
  /* Block-sparse constant L (lower_nn_sparse.c; NULL: dense): the k loop
   * of each M tile runs over that tile's non-zero blocks only. */
  const struct nn_sparse_s* sparse;
  /* L is read in place (lload, no run-time micro-panels): the caller's L
   * rows are cheap, affine loads (a blocked conv over a padded input) */
  bool direct_l;
  /* > 0: the tile's j loop is cut into vectors of this many lanes (nr a
   * multiple of it), so each piece stays within one block of an NCHWc
   * output whose block is jblock wide */
  int64_t jblock;
  /* The tile's tap loops outside its k loop (direct L only: the order of
   * the sums changes, not their terms), and with ksplit > 1 the k loop cut
   * into pieces of ksplit (L's channel block) where the k range divides */
  bool taps_outer;
  int64_t ksplit;
  /* K blocks (kc < K) without reload: the partial sums of each group of M
   * tiles live in a per-chunk scratch (the output is stored once, at the
   * last K block, so epilogues fuse) */
  bool psum;
  /* with idot: each step is dot4_u8i8 (L: four u8, R: four int8 in an
   * i32; K counts quads; packed constants i32, w8 unused) */
  bool dot4;
  /* packed constant R, taps outside the k loop: each k step of a tile
   * prefetches the same k row of the next N tile's panel (its cache
   * lines), so a sweep whose weights come from memory finds the next
   * panel on its way while this one computes */
  bool prefetch_r;
  /* The partial M tile computed as a full one over the last mr rows (it
   * overlaps the tile before it, whose rows it stores again with the same
   * values): one tile shape, no short tile that spills. Honoured only where
   * that is safe and in one place: L read in place, one K block, no psum
   * or sparse L, M >= mr, and (split over M) the tile before it on the same
   * thread. MatMul / Gemm and the blocked conv's four-block stem tiles set it;
   * split over M, it makes every chunk's tiles one loop of one tile. */
  bool overlap_m;
};

/* ---- block-sparse constant weights (lower_nn_sparse.c) ------------------ */

/* A constant L operand stored as its non-zero blocks of mr rows (the
 * GEMM's M tile, lowering/sparse_block.h's rows) x kr k-loop units (input
 * channels, each with all its taps): for batch entry b (a conv group) and
 * M tile t, blocks ptr[b][t] .. ptr[b][t+1]-1 of vals, block j starting
 * at k-loop unit kidx[j]. The GEMM must use mr = KILN_SPARSE_BLOCK_ROWS,
 * kc = K / taps (no K blocking) and L.bmap for the batch entry. */
typedef struct nn_sparse_s {
  const tir_buffer_t* ptr;  /* I32 [nb][tiles + 1] */
  const tir_buffer_t* kidx; /* I32 [max(nnzb, 1)] */
  const tir_buffer_t* vals; /* F32 [max(nnzb, 1)][kr * taps][mr] */
  int64_t kr, nnzb, max_blocks, tiles;
} nn_sparse_t;


/* Chooses mr, nr, kc for the shape (after M, N, K, batch are set). */
void nn_gemm_tiles(const kiln_lower_ctx_t* ctx, nn_gemm_t* g);
/* f32 lanes per vector register and vector registers the tiles are for:
 * kiln_cpu_simd() for the CPU target, 16 and 32 (AVX-512) for GPU targets. */
void nn_simd(const kiln_lower_ctx_t* ctx, int64_t* lanes, int64_t* regs);
/* Builds and emits the GEMM kernel. */
kiln_status_t nn_gemm_emit(nn_kb_t* kb, nn_gemm_t* g);

/* Packs a compile-time matrix into the L/R layout: |get(user, b, row, col)|
 * is element (row, col) of batch b where rows are the tiled dim (M for L, N
 * for R) and cols run over K. Result is [nb][ceil(rows/t)][K][t]; or, when
 * |g| blocks K (kc * taps < K), K-block major [nb][nkb][ceil(rows/t)][kc *
 * taps][t], so the panels one K block reads lie one after another and the
 * weights stream from memory sequentially (the generator indexes either). */
typedef double (*nn_get_fn)(const void* user, int64_t b, int64_t row, int64_t col);
kiln_status_t nn_pack_const(kiln_lower_ctx_t* ctx, const nn_gemm_t* g, const char* name,
                            int64_t nb, int64_t rows, int64_t K, int64_t t, nn_get_fn get,
                            const void* user, const tir_buffer_t** out);
/* Emits a kernel packing a run-time operand into a new temp of the same
 * layout; |load(kb, g, b, row, col)| gives element (row, col) of batch b. */
kiln_status_t nn_pack_runtime(nn_kb_t* kb, const nn_gemm_t* g, const char* name, int64_t nb,
                              int64_t rows, int64_t K, int64_t t, nn_elem_fn load,
                              const tir_buffer_t** out);

/* After nn_gemm_tiles on a GEMM whose L is the constant |get| (|nb| batch
 * entries of M rows x K): counts its zero blocks, notes them in the plan
 * and, when the plan's mode and rule say so, packs the block-sparse form
 * into |sp| (which must outlive nn_gemm_emit) and sets g->sparse and the
 * sparse tile (mr, nr, kc). Leaves g dense otherwise. */
kiln_status_t nn_sparse_try(kiln_lower_ctx_t* ctx, nn_gemm_t* g, int64_t nb, nn_get_fn get, const void* user,
                            nn_sparse_t* sp);

/* ---- quantized convolution through the Conv GEMM (lower_nn_conv.c) ------ */

/* QLinearConv computed by Conv's lowering (depthwise with sums below 2^24:
 * the direct kernel in f32, exact; else the GEMM): the products of (x - x_zp)
 * and the constant (w - w_zp) summed exactly in i32 by the int8 GEMM (the
 * GEMM's idot: both as i16 channel pairs; w stored one byte each when every
 * w - w_zp fits int8), the i32 bias as the GEMM's initial value, and
 * |requant| (the caller's arithmetic, on the i32 sum, of y's dtype) applied
 * to each final sum. The im2col path (more stride classes than
 * NN_MAX_GROUPS) sums the products in f32 instead (exact below 2^24). */
typedef struct nn_qconv_s {
  int32_t x, w, bias;      /* node input indices (bias -1: none) */
  const tir_buffer_t* xzp; /* x's zero point, a [1] view */
  float* wq;               /* w - w_zp, W's layout, owned by the caller */
  /* The requantized value (any dtype) of sum |acc| (i32, or f32 on the
   * im2col path) of channel |ch|. */
  const tir_expr_t* (*requant)(nn_kb_t* kb, const void* user, const tir_expr_t* ch,
                               const tir_expr_t* acc);
  const void* user;
  /* x's zero point as an immediate (xzp_imm) when it is a constant: a load
   * of it beside u8 stores may alias them and keeps GCC from vectorizing */
  bool xzp_is_imm;
  int32_t xzp_imm;
} nn_qconv_t;
kiln_status_t nn_conv_quantized(kiln_lower_ctx_t* ctx, const nn_qconv_t* q);
/* The same on the blocked layout (ctx->out_block[0] > 0; group 1 from
 * either layout, depthwise from NCHWc): lower_nn_qconv_blocked.c. */
kiln_status_t nn_qconv_blocked(kiln_lower_ctx_t* ctx, const nn_qconv_t* q);
/* Stride residue classes of a window (kernel |k|, strides |s|, 3 axes): past
 * NN_MAX_GROUPS Conv's lowering gathers patches (im2col) instead. */
#define NN_MAX_GROUPS 64
static inline int64_t nn_stride_classes(const int64_t* k, const int64_t* s) {
  int64_t c = 1;
  for (int32_t d = 0; d < 3; ++d) c *= s[d] < k[d] ? s[d] : k[d];
  return c;
}
/* The blocked-layout kernels (lower_nn_conv_blocked.c, lowering/layout.h):
 * Conv writing NCHWc (group 1 from either layout, depthwise from NCHWc),
 * GlobalAveragePool from NCHWc (the reorders: kiln_layout_emit_reorder). */
kiln_status_t nn_conv_blocked(kiln_lower_ctx_t* ctx);
kiln_status_t nn_global_avgpool_blocked(kiln_lower_ctx_t* ctx);
kiln_status_t nn_pool_blocked(kiln_lower_ctx_t* ctx, bool is_max);
/* A stem (group 1, C <= 4 channels of plain NCHW input, NCHWc output with
 * block c) without the zero-padded input copy (lower_nn_conv_stem.c):
 * weights input 1 and bias input 2 of ctx's node, constants. */
typedef struct nn_stem_s {
  const tir_buffer_t *x, *y;
  int64_t N, C, M, c;
  nn_axis_t ah, aw;
} nn_stem_t;
bool nn_conv_stem_applies(const nn_stem_t* st);
kiln_status_t nn_conv_stem(nn_kb_t* kb, const nn_stem_t* st);

/* Winograd F(m x m, 3x3) on NCHWc (lower_nn_conv_wino.c): a group-1 conv
 * of N images, C -> M channels, input and output block c (xb: the input's),
 * its two spatial axes and the bias padded to the output's blocks (a
 * constant, or NULL); weights are input 1 of ctx's node, a constant. */
typedef struct nn_wino_geo_s {
  int64_t N, C, M, c, xb;
  nn_axis_t ah, aw;
  const tir_buffer_t* bias;
} nn_wino_geo_t;
/* A tuner's GEMM knobs for the Winograd GEMMs (0, par -1: the default). */
typedef struct nn_wino_knobs_s {
  int64_t mr, nr, kc;
  int32_t par;
  int64_t nblock_kb;
} nn_wino_knobs_t;
/* A bit (1 << m) per tile m (2, 4) the conv can run; 0: not Winograd's. */
int32_t nn_conv_wino_tiles(const kiln_lower_ctx_t* ctx, const nn_wino_geo_t* geo);
/* The tile m (2 or 4) the rule (or KILN_WINO=0|2|4) picks, 0: the dense
 * conv; for a conv nn_conv_wino_tiles takes. */
int64_t nn_conv_wino_choose(const kiln_lower_ctx_t* ctx, const nn_wino_geo_t* geo);
/* Emits the input transform, the GEMMs (|k|: a tuner's knobs, or NULL)
 * and the output transform. */
kiln_status_t nn_conv_wino(kiln_lower_ctx_t* ctx, const nn_wino_geo_t* geo, int64_t m, const nn_wino_knobs_t* k);

/* ---- op entry points (lower_nn_*.c) ------------------------------------ */

kiln_lower_op_t kiln_lower_nn_deform_conv;
kiln_lower_op_t kiln_lower_nn_conv, kiln_lower_nn_conv_transpose, kiln_lower_nn_matmul,
    kiln_lower_nn_gemm, kiln_lower_nn_batchnorm, kiln_lower_nn_layernorm, kiln_lower_nn_softmax,
    kiln_lower_nn_log_softmax, kiln_lower_nn_maxpool, kiln_lower_nn_avgpool,
    kiln_lower_nn_lppool, kiln_lower_nn_global_avgpool, kiln_lower_nn_global_maxpool,
    kiln_lower_nn_reduce_mean, kiln_lower_nn_reduce_sum, kiln_lower_nn_reduce_max,
    kiln_lower_nn_reduce_min, kiln_lower_nn_reduce_prod, kiln_lower_nn_reduce_l1,
    kiln_lower_nn_reduce_l2, kiln_lower_nn_reduce_sum_square, kiln_lower_nn_reduce_log_sum,
    kiln_lower_nn_reduce_log_sum_exp, kiln_lower_nn_argmax, kiln_lower_nn_argmin,
    kiln_lower_nn_hardmax, kiln_lower_nn_instancenorm, kiln_lower_nn_groupnorm,
    kiln_lower_nn_lrn, kiln_lower_nn_lpnorm, kiln_lower_nn_mvn, kiln_lower_nn_lstm,
    kiln_lower_nn_gru, kiln_lower_nn_rnn, kiln_lower_nn_nll_loss, kiln_lower_nn_sce_loss,
    kiln_lower_nn_det;
kiln_lower_op_t kiln_lower_nn_quantize_linear, kiln_lower_nn_dequantize_linear,
    kiln_lower_nn_dynamic_quantize_linear, kiln_lower_nn_matmul_integer,
    kiln_lower_nn_qlinear_matmul, kiln_lower_nn_conv_integer, kiln_lower_nn_qlinear_conv,
    kiln_lower_nn_qlinear_add, kiln_lower_nn_qlinear_global_avgpool;

#endif /* KILN_LOWERING_LOWER_NN_IMPL_H_ */
