/* Fast loop nests for the kernels of a range program (lowering/plan_seq.h).
 *
 * kiln_plan_seq_unify leaves every kernel in the plain form it lowered at
 * five lengths: a GEMM as one row of N sums per output row, a reduction
 * one element at a time, and loops whose trip count is the run's length
 * serial. This pass rewrites those nests of the unified kernels, where the
 * length is a run-time value, into the forms the static CPU lowering gets
 * from the tiled GEMM generator (lowering/lower_nn_gemm.c) and the lane
 * reductions (lower_nn_norm.c), with full tiles counted at run time and
 * remainders:
 *
 *  - GEMM (the plain row nest `for m: row[:] = 0; for k: for n: row[n] +=
 *    P(m, k, n); for n: EPI(m, n, row[n])`): register tiles of mr x nr
 *    (14 x 32 on AVX-512, 6 x 16 on AVX2: nn_gemm_tiles' rule), the
 *    accumulators in a PRIVATE mr*nr array (i unrolled, j vectorized), the
 *    epilogue applied per tile. M, N and K may each be static or the run's
 *    length: a run-time extent E runs E / t full tiles, then the rest
 *    E % t in pieces of t/2, t/4, ..., 1 rows (or columns), each under a
 *    guard `its last row < E` that is true exactly when the piece runs.
 *    A constant B that only that GEMM reads, dense [K][N] with N a multiple
 *    of nr, is laid out in the tiles' panels ([N/nr][K][nr], as the static
 *    GEMM packs its weights): the plan buffer gets the packed value and
 *    buffer (the same bytes in another order).
 *  - Reductions into one PRIVATE element (`d = ident; for r: d = op(d,
 *    f(r))`, op +, max or min): 16 lanes in a PRIVATE vector, folded, and
 *    the rest of a run-time extent one element at a time.
 *  - Innermost serial loops that store contiguously in their variable and
 *    read contiguously or invariantly (a map; a buffer they write only at
 *    the element they store): vectorized; one with a run-time extent split
 *    into full 16-lane tiles and a scalar rest.
 *
 * The rewrites reorder only independent iterations (each checked as
 * above) and keep every sum's order except the lane reductions' (which
 * the static lowering reorders the same way). Each rewritten kernel is
 * simplified and checked with tir_verify_dims for every value of the
 * range; a kernel that fails the check keeps its plain form (reported).
 *
 * Thread-compatible: one plan per call. */
#ifndef KILN_LOWERING_PLAN_SEQ_KERN_H_
#define KILN_LOWERING_PLAN_SEQ_KERN_H_

#include "lowering/plan.h"

typedef struct kiln_plan_seq_kern_report_s {
  int32_t gemms;      /* plain GEMM nests turned into register tiles */
  int32_t reductions; /* reductions turned into 16-lane ones */
  int32_t maps;       /* loops vectorized (split where the extent is run-time) */
  int32_t packed;     /* constant Bs laid out in the tiles' panels */
  int32_t kept;       /* kernels that kept their plain form: the check failed */
  /* the first kernel kept and why (static text or the plan's arena) */
  const char* kept_kernel;
  const char* kept_why;
  int32_t split;      /* GPU GEMMs in smaller blocks to stay under the loop limit */
  int32_t over_limit; /* GPU GEMMs above it even in blocks of one row and column */
  int32_t nests;      /* GPU: plain loop nests (Transposes) made parallel */
} kiln_plan_seq_kern_report_t;

/* Rewrites the kernels of |plan| (made dynamic by kiln_plan_seq_unify:
 * n_dims 1, every kernel's last parameter the dims buffer) for a CPU with
 * |lanes| f32 lanes per vector and |regs| vector registers
 * (kiln_cpu_simd()). Fills |out|. OUT_OF_MEMORY naming the kernel; a plan
 * that is not a range program is INVALID_ARGUMENT. */
KILN_MUST_USE kiln_status_t kiln_plan_seq_kernels_fast(kiln_plan_t* plan, int32_t lanes, int32_t regs,
                                                       kiln_plan_seq_kern_report_t* out);

/* kiln_plan_seq_kernels_fast for a GPU target: the GEMM row nests in
 * blocks of up to 4 rows per parallel iteration, a row of sums each (PoCL
 * runs a row of sums per work-item faster than a register tile of private
 * accumulators), a serial batch loop around the rows (attention's heads)
 * moved inside the block where the batches write disjoint elements, so
 * that the block loop is the kernel's parallel loop a GPU binds to its
 * grid; reductions in |lanes| lanes and vector loops as there. With
 * |loop_limit| > 0 (a device that ends an invocation after that many loop
 * iterations: kiln_device_info_t.loop_limit) a GEMM block that would loop
 * more often at the top of the range (every loop counted, as the device
 * may count them) takes fewer rows and a slice of the columns, the
 * parallel loop then over row blocks x column blocks. */
KILN_MUST_USE kiln_status_t kiln_plan_seq_kernels_lanes(kiln_plan_t* plan, int32_t lanes, int64_t loop_limit,
                                                        kiln_plan_seq_kern_report_t* out);

#endif
