/* kiln lowering: graph nodes -> tensor-IR kernels with default schedules.
 *
 * Each supported op has a lowering function. It receives the node, static
 * tir buffers for its inputs and outputs, and the graph tensors (for constant
 * values such as weights, axes or shapes), and emits one or more kernels.
 * A kernel is emitted as its naive loop nest plus the default schedule for
 * the target class; the plan keeps both so a tuner can try others.
 *
 * Ops whose output is the input's bytes reinterpreted (Reshape, Flatten,
 * Squeeze, Unsqueeze, Identity, Dropout) emit no kernel: they declare an
 * alias with kiln_lower_alias.
 *
 * Workspaces (im2col matrices, packed panels) are requested with
 * kiln_lower_temp; data computed at compile time from constants (pre-packed
 * or transposed weights, folded BatchNorm scales) with kiln_lower_const.
 *
 * Kernel naming: "<node name sanitized>_<k>", unique within a plan (the ctx
 * helpers make it so). Loop variable names must be unique within a kernel.
 */
#ifndef KILN_LOWERING_LOWER_H_
#define KILN_LOWERING_LOWER_H_

#include "ir/graph.h"
#include "ir/tir.h"
#include "ir/tir_schedule.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef enum kiln_target_class_e {
  KILN_TARGET_CLASS_CPU = 0,
  KILN_TARGET_CLASS_GPU = 1,
} kiln_target_class_t;

/* The f32 lanes of one vector register and the number of vector
 * registers of the CPU running this process (CPUID and the OS-enabled
 * state, at run time): 16 and 32 with AVX-512, 8 and 16 with AVX/AVX2,
 * 4 and 16 with SSE, 4 and 32 on AArch64. The CPU target compiles its C on
 * this machine, so its tiles and vector types follow this CPU. */
typedef struct kiln_cpu_simd_s {
  int32_t lanes, regs;
} kiln_cpu_simd_t;
kiln_cpu_simd_t kiln_cpu_simd(void);

/* ---- CPU GEMM schedule knobs (a tuner's points, compiler/tune_cpu.c) ------
 * The GEMM generator (lowering/lower_nn_gemm.c) picks a register tile
 * mr x nr, a K block kc and the loop its threads split by heuristics; a
 * plan built with a gemm hook (kiln_plan_options_t) lets the hook replace
 * them per GEMM of the CPU target. */
typedef enum kiln_gemm_par_e {
  KILN_GEMM_PAR_AUTO = 0, /* the heuristic's split */
  KILN_GEMM_PAR_NONE,     /* one thread */
  KILN_GEMM_PAR_BATCH,
  KILN_GEMM_PAR_M,
  KILN_GEMM_PAR_N,
} kiln_gemm_par_t;

typedef struct kiln_gemm_knobs_s {
  int64_t mr, nr, kc; /* kc in k-loop iterations (K / taps) */
  int32_t par;        /* kiln_gemm_par_t */
  /* The NCHWc conv (problem block > 0) only: the KB of one K block's
   * weights an N block holds while every position sweeps them (0 there:
   * its default, 256) */
  int64_t nblock_kb;
  /* The NCHWc depthwise conv (problem dw[0] > 0) only: output columns
   * (vectors) per register tile of the interior rows and row groups per
   * (image, channel block) plane; |par| NONE runs it on one thread, AUTO
   * splits the planes and row groups (0 elsewhere) */
  int64_t dw_cols, dw_rgroups;
  /* The NCHWc conv that can run Winograd (problem wino_tiles != 0) only:
   * 1 the direct conv, 2 / 4 Winograd F(2x2, 3x3) / F(4x4, 3x3)
   * (lowering/lower_nn_conv_wino.c; mr, nr, kc, par and nblock_kb that
   * differ from the direct conv's default then apply to its GEMMs); 0
   * elsewhere (no such knob) */
  int64_t wino;
} kiln_gemm_knobs_t;

/* What the GEMM computes, as far as its tiles care. */
typedef struct kiln_gemm_problem_s {
  const char* op; /* the node's op type */
  int64_t batch, M, N, K, taps;
  bool k_blocks;  /* K may be split into blocks (else kc is the whole K) */
  bool n_outer, l_load, l_lload, r_packed;
  int64_t nr_max; /* the widest nr the lowering laid its grid out for (0: N) */
  int32_t lanes, regs, threads;
  /* > 0: the NCHWc conv's GEMM (lowering/lower_nn_conv_blocked.c) on
   * channel blocks of this many lanes: kc counts input channels (a
   * multiple of in_block dividing K / taps), nr is one or two blocks, and
   * nblock_kb is a knob; 0: the generic GEMM (nn_gemm_tiles) */
  int32_t block, in_block;
  /* dw[0] > 0: the NCHWc depthwise conv's direct window kernel
   * (lowering/lower_nn_conv_blocked.c), not a GEMM: its kernel height and
   * width, strides, begin pads and dilations {kh, kw, sh, sw, ph, pw, dh,
   * dwd}; M counts output rows, N output columns, K channels, batch images,
   * block the channel block; the knobs are dw_cols, dw_rgroups and par */
  int64_t dw[8];
  /* The NCHWc conv (block > 0): a bit (1 << m) per Winograd tile m (2, 4)
   * it can run (a 3x3 stride-1 conv, lowering/lower_nn_conv_wino.c); 0:
   * none, no wino knob */
  int32_t wino_tiles;
} kiln_gemm_problem_t;

/* Called for every GEMM a CPU plan lowers, |k| holding the heuristic's
 * knobs; it may change them (the generator clamps them to the problem). */
typedef void (*kiln_gemm_hook_fn)(void* user, int32_t node, const kiln_gemm_problem_t* p, kiln_gemm_knobs_t* k);

struct kiln_plan_s;

typedef struct kiln_lower_ctx_s {
  tir_ctx_t* tir;
  const kiln_graph_t* graph;
  const kiln_node_t* node;
  int32_t node_index;
  int64_t opset;
  kiln_target_class_t target;
  int32_t threads;                      /* CPU: worker threads the kernels will get */
  int32_t n_in;
  const tir_buffer_t* const* in;        /* NULL for omitted optional inputs */
  const kiln_tensor_t* const* in_tensor;/* graph tensors; ->value set for constants */
  int32_t n_out;
  const tir_buffer_t* const* out;       /* NULL for omitted optional outputs */
  const kiln_tensor_t* const* out_tensor;
  struct kiln_plan_s* plan;             /* where emitted things go */
  /* GPU: loop iterations one invocation may run on the device the plan is
   * for (kiln_plan_options_t.loop_limit; 0 = no limit) */
  int64_t loop_limit;
  /* The memory layout of each input / output buffer (lowering/layout.h):
   * 0 plain, c for NCHWc (the buffer is then [N][ceil(C/c)][H][W][c] while
   * the tensor stays [N][C][H][W]). NULL: all plain. */
  const int32_t* in_block;
  const int32_t* out_block;
  /* GPU: elements per invocation of an element-wise nest whose innermost
   * extent is a multiple of it (kiln_plan_options_t.ew_lanes; 0: one) */
  int32_t ew_lanes;
} kiln_lower_ctx_t;

/* Emits a kernel: |naive| is the plain loop nest, |schedule| (may be NULL or
 * empty) the default schedule for ctx->target; the plan stores both and the
 * scheduled result. Its params must be node inputs/outputs or buffers from
 * kiln_lower_temp / kiln_lower_const. */
kiln_status_t kiln_lower_emit(kiln_lower_ctx_t* ctx, tir_func_t* naive,
                              const tir_schedule_t* schedule);
/* A fresh unique kernel name for this node: "<node>_<k>" sanitized. */
const char* kiln_lower_kernel_name(kiln_lower_ctx_t* ctx);
/* A workspace used only by this node's kernels (GLOBAL scope, planned like an
 * intermediate whose lifetime is this node). */
kiln_status_t kiln_lower_temp(kiln_lower_ctx_t* ctx, const char* name, kiln_dtype_t dtype,
                              int32_t rank, const int64_t* shape, const tir_buffer_t** out);
/* A run-time check's status word for this node (KILN_PLAN_STATUS, i32[1],
 * named "<node>_status<k>"): a kernel that finds bad data (a zero integer
 * divisor, an index out of range) stores a kiln_check_code_t into it; the
 * runtime zeroes it before each run and fails the run naming the node when
 * it is not zero afterwards. One per checking kernel. */
kiln_status_t kiln_lower_status(kiln_lower_ctx_t* ctx, const tir_buffer_t** out);
/* A constant computed at compile time; the plan takes ownership of
 * |value|->data (allocated with kiln_allocator_system()) and zeroes *value. */
kiln_status_t kiln_lower_const(kiln_lower_ctx_t* ctx, const char* name, kiln_array_t* value,
                               const tir_buffer_t** out);
/* Output |out_index| shares the memory of input |in_index| (same byte size). */
kiln_status_t kiln_lower_alias(kiln_lower_ctx_t* ctx, int32_t out_index, int32_t in_index);

/* A lowering function; families declare their entry points with it
 * (`kiln_lower_op_t kiln_lower_nn_conv, kiln_lower_nn_gemm;`). */
typedef kiln_status_t kiln_lower_op_t(kiln_lower_ctx_t* ctx);
typedef kiln_lower_op_t* kiln_lower_fn;

typedef struct kiln_lower_entry_s {
  const char* op_type;
  kiln_lower_fn fn;
} kiln_lower_entry_t;

/* Tables per family (lowering/lower_<family>.c), expanded from the family's
 * op list ir/ops/<family>.def, so every schema has its lowering. */
extern const kiln_lower_entry_t kiln_lower_elementwise[];
extern const size_t kiln_lower_elementwise_count;
extern const kiln_lower_entry_t kiln_lower_tensor[];
extern const size_t kiln_lower_tensor_count;
extern const kiln_lower_entry_t kiln_lower_nn[];
extern const size_t kiln_lower_nn_count;

/* NULL when the op has no lowering (the plan then reports it). */
kiln_lower_fn kiln_lower_lookup(const char* op_type);

#ifdef __cplusplus
}
#endif
#endif
