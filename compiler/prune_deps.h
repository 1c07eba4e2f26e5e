/* Channel dependency analysis for structured pruning (`kiln prune`).
 *
 * Walks a prepared graph (static shapes) and finds the channel groups: sets
 * of output channels that must be removed together for the graph to stay
 * valid. A group starts at the output channels of a Conv (group 1), Gemm or
 * MatMul with a single-use weight initializer (its "sources") and follows
 * the channels through
 *   - element-wise ops, pools, Dropout/Identity (passthrough);
 *   - BatchNormalization (its scale, bias, mean and var are sliced);
 *   - depthwise Conv (weights, bias sliced, `group` set to the kept count);
 *   - Add/Mul/Sub/Div/Max/Min of two activations: their groups become one
 *     (a residual connection: one mask for the whole group); a constant
 *     operand with a channel dim is sliced;
 *   - Concat on the channel axis: each input's channels keep their offset;
 *   - Flatten (axis 1), or a Reshape to [N, -1], into a Gemm/MatMul: each
 *     channel becomes a block of H*W columns of the consumer's weight;
 * to the input channels of the next Conv/Gemm/MatMul, whose weights are
 * sliced along their input axis. Channels that reach anything else -- a
 * graph output, a Reshape that mixes channels, a grouped Conv, a Transpose,
 * a graph input joined by a residual Add, an op this walk does not know --
 * leave their group unpruned, with the reason naming the node.
 *
 * Thread-compatible; the graph is only read.
 */
#ifndef KILN_COMPILER_PRUNE_DEPS_H_
#define KILN_COMPILER_PRUNE_DEPS_H_

#include "ir/graph.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef enum kiln_prune_use_kind_e {
  KILN_PRUNE_USE_OUT_WEIGHT = 0, /* a source's weight, output axis (importance) */
  KILN_PRUNE_USE_OUT_BIAS,
  KILN_PRUNE_USE_IN_WEIGHT,      /* a consumer's weight, input axis */
  KILN_PRUNE_USE_BN_SCALE,       /* BatchNormalization scale (importance for --method bn) */
  KILN_PRUNE_USE_PARAM,          /* other per-channel constants (BN stats, depthwise, operands) */
} kiln_prune_use_kind_t;

/* Channel c of the use's group is positions offset + c*inner .. + inner-1
 * of initializer |tensor|'s axis |axis|. */
typedef struct kiln_prune_use_s {
  kiln_prune_use_kind_t kind;
  int32_t group;
  int32_t tensor;
  int32_t node;      /* the node reading |tensor| */
  int32_t axis;
  int64_t offset, inner;
} kiln_prune_use_t;

typedef struct kiln_prune_group_s {
  int64_t channels;
  int32_t n_sources;
  int32_t* sources;     /* Conv/Gemm/MatMul nodes whose outputs are the group's channels */
  const char* blocked;  /* NULL: prunable; else why not (owned, names the node) */
} kiln_prune_group_t;

/* A depthwise Conv whose `group` becomes the kept count of |group| segments:
 * sum over its input's segments (listed as groups; -1 = channels that stay). */
typedef struct kiln_prune_dw_s {
  int32_t node;
  int32_t n_segs;
  int32_t* seg_group;   /* -1: a fixed segment */
  int64_t* seg_count;
} kiln_prune_dw_t;

typedef struct kiln_prune_deps_s {
  int32_t n_groups;
  kiln_prune_group_t* groups;
  int32_t n_uses;
  kiln_prune_use_t* uses;
  int32_t n_dw;
  kiln_prune_dw_t* dw;
} kiln_prune_deps_t;

/* Analyses prepared |g|. Every node named in |keep| (|n_keep| names) has
 * its output channels' group left unpruned ("kept (--keep)"); a name that
 * is no node is a NOT_FOUND error naming it, and a node whose outputs are
 * no group's channels an INVALID_ARGUMENT error naming it. A graph with
 * unknown shapes is an error naming the tensor. Free |out| with
 * kiln_prune_deps_free. */
KILN_MUST_USE kiln_status_t kiln_prune_deps_analyze(const kiln_graph_t* g, const char* const* keep,
                                                    int32_t n_keep, kiln_prune_deps_t* out);
void kiln_prune_deps_free(kiln_prune_deps_t* d);

#ifdef __cplusplus
}
#endif
#endif /* KILN_COMPILER_PRUNE_DEPS_H_ */
