/* Block-sparse weights: the block shape the CPU's block-sparse GEMM skips
 * (lowering/lower_nn_sparse.c), shared with `kiln prune --sparsity`
 * (compiler/prune_sparse.h) so that the blocks the pruner zeroes are the
 * blocks the kernel skips, and the compile modes.
 *
 * A block is KILN_SPARSE_BLOCK_ROWS output channels (rows of the GEMM's
 * weight operand, aligned from the first channel of each conv group) x a
 * run of kiln_sparse_block_channels(taps) input channels with all their
 * kernel taps: for a 3x3 conv 4 x 9 weights, for a 1x1 conv or a Gemm
 * 4 x 4. Why this shape: the sparse micro-kernel is a 4-row register tile
 * (4 x 24 on AVX2, 4 x 48 on AVX-512: 12 accumulators, as many as the
 * dense 6 x 16 / 14 x 32 tiles keep busy), and its k loop runs over input
 * channels with the taps inside (the implicit GEMM's order), so a block is
 * one trip of that loop for one tile; four rows keep the pruning fine-
 * grained (a 16-row block would zero far more live weights at the same
 * sparsity) while one block still feeds 4 x taps x 24 multiply-adds per
 * index read. Rows are fixed, not the dense tile's balanced mr, so a
 * model pruned on one machine keeps its blocks on another.
 */
#ifndef KILN_LOWERING_SPARSE_BLOCK_H_
#define KILN_LOWERING_SPARSE_BLOCK_H_

#include <stdint.h>

#define KILN_SPARSE_BLOCK_ROWS 4

/* Input channels per block: one for kernels of 4 taps or more, else enough
 * for at least 4 k steps (1x1: 4 channels). */
static inline int64_t kiln_sparse_block_channels(int64_t taps) {
  return taps >= 4 ? 1 : (4 + taps - 1) / (taps > 0 ? taps : 1);
}

/* Where the CPU target runs convolutions with constant weights on the
 * block-sparse kernel (kiln_compile_config_t.sparse, the compiler option
 * "sparse"): AUTO by the measured rule below, OFF never, ON wherever the
 * kernel applies (tests and benchmarks). */
typedef enum kiln_sparse_mode_e {
  KILN_SPARSE_AUTO = 0,
  KILN_SPARSE_OFF = 1,
  KILN_SPARSE_ON = 2,
} kiln_sparse_mode_t;

/* AUTO's rule: sparse when at least this fraction of a layer's blocks are
 * zero. Measured (bench/sparse.py --sweep: single 3x3 convs of ResNet-18's
 * shapes, 1 thread, an AVX2 machine): with no zero blocks the sparse
 * kernel runs at 0.77-1.10x of the dense one (its 4-row tile reuses each
 * input vector 4 times where the dense 6 x 16 tile does 6, and it gives
 * up K blocking), it breaks even at 20-35% zero blocks, and at 50% it was
 * 1.43-2.01x faster in every shape -- a margin for the machines not
 * measured. A rule rather than timing each layer at
 * compile time: compiles stay deterministic and need no idle CPU. */
#define KILN_SPARSE_AUTO_MIN_ZERO 0.5

#endif /* KILN_LOWERING_SPARSE_BLOCK_H_ */
