/* The memory-layout pass: per tensor, plain NCHW or blocked NCHWc (c
 * channels innermost, c = the target's vector width in floats), chosen on
 * the optimised graph before lowering (docs/DESIGN.md, "Memory layouts").
 *
 * The graph stays logical (every tensor keeps its NCHW shape, the reference
 * executor never sees a layout); the plan gives a blocked tensor a buffer
 * of shape [N][ceil(C/c)][H][W][c] (the last block's lanes past C hold
 * values nobody reads: convolutions sum real channels only, reorders and
 * GlobalAveragePool read real channels only). Each node runs blocked or
 * plain; a node's lowering sees which through kiln_lower_ctx_t.in_block /
 * .out_block. Where a port's layout differs from its tensor's, the plan
 * inserts one reorder kernel per (tensor, layout), shared by every consumer
 * that needs it: at model inputs and outputs and around ops that need NCHW.
 *
 * How layouts are chosen (target-neutral: only the block size comes from
 * the target): start from the naive form, in which every node that can run
 * blocked reads its data inputs through a plain->blocked reorder and writes
 * through a blocked->plain one, so every tensor is plain. Then cancel each
 * blocked->plain->blocked pair on a tensor: the tensor becomes blocked, and
 * keeps a blocked->plain reorder only for its plain consumers and when it
 * is a model output. Done in topological order it reduces to: a conv runs
 * blocked when its input is blocked or a consumer can run blocked (it reads
 * either layout itself, so a 3-channel stem reads the model input as is);
 * an element-wise node runs blocked when one of its full-shape inputs is
 * blocked; GlobalAveragePool reads blocked and writes plain.
 *
 * Blocked nodes: Conv (2-D, f32, constant weights, group 1 or depthwise
 * with one output channel per group, constant or no bias), the element-wise
 * ops of kiln_layout_ew_ok (every input of the output's shape, one element,
 * or a run-time [1 or N, C, 1, 1] channel vector such as squeeze-excite's
 * scale, read blocked and broadcast lane by lane), MaxPool (without Indices) and AveragePool (2-D), which run
 * blocked when their input is, GlobalAveragePool, and Concat on axis 1
 * whose inputs but the last have whole blocks of channels (the blocks then
 * concatenate as they are), which runs blocked when one input is. */
#ifndef KILN_LOWERING_LAYOUT_H_
#define KILN_LOWERING_LAYOUT_H_

#include <stdio.h>

#include "ir/graph.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef enum kiln_layout_role_e {
  KILN_LAYOUT_PLAIN_ONLY = 0, /* needs NCHW */
  KILN_LAYOUT_CONV,           /* Conv, group 1 */
  KILN_LAYOUT_DEPTHWISE,      /* Conv, one channel per group */
  KILN_LAYOUT_EW,             /* element-wise over same-shape inputs and scalars */
  KILN_LAYOUT_GAP,            /* GlobalAveragePool: blocked in, plain out */
  KILN_LAYOUT_POOL,           /* MaxPool (no Indices), AveragePool */
  KILN_LAYOUT_CONCAT,         /* Concat on channels at offsets that are whole blocks */
} kiln_layout_role_t;

typedef struct kiln_layout_s {
  int32_t block;        /* c; 0: every tensor plain */
  int32_t n_tensors, n_nodes;
  int32_t* tensor_block; /* [n_tensors] 0 or block */
  uint8_t* node_blocked; /* [n_nodes] the node runs on blocked ports */
  uint8_t* role;         /* [n_nodes] kiln_layout_role_t */
  /* reorders (distinct tensor x layout) the plan inserts, and how many the
   * naive form had before the pairs cancelled */
  int32_t n_reorders, n_reorders_naive;
  int32_t n_blocked_tensors, n_blocked_nodes;
} kiln_layout_t;

/* Chooses the layouts of prepared graph |g| for blocks of |block| floats
 * (0: all plain). Free with kiln_layout_free. */
kiln_status_t kiln_layout_choose(const kiln_graph_t* g, int32_t block, kiln_layout_t* out);
void kiln_layout_free(kiln_layout_t* l);
/* The layout node |ni| reads input |j| / writes output |j| in (0 or block). */
int32_t kiln_layout_in_port(const kiln_layout_t* l, const kiln_graph_t* g, int32_t ni, int32_t j);
int32_t kiln_layout_out_port(const kiln_layout_t* l, const kiln_graph_t* g, int32_t ni, int32_t j);
/* The op types that run blocked element-wise. */
bool kiln_layout_ew_ok(const char* op_type);
/* The role of int8 node |n| (QLinearConv, QLinearAdd: layout_q8.c), or -1
 * for any other op; and whether its input |j| is a full-shape data input
 * of a blocked element-wise QLinearAdd. */
int32_t kiln_layout_q8_role(const kiln_graph_t* g, const kiln_node_t* n);
bool kiln_layout_q8_full(const kiln_graph_t* g, const kiln_node_t* n, int32_t j);
/* "nchw" or "nchw8c" etc. into |buf|. */
const char* kiln_layout_name(int32_t block, char* buf, size_t n);
/* Emits the kernel copying [N][C][H][W] tensor (|dims|) from |src| in
 * block |sb| to |dst| in block |db| (0: plain), for node ctx->node
 * (lowering/lower_nn_conv_blocked.c). */
struct kiln_lower_ctx_s;
struct tir_buffer_s;
kiln_status_t kiln_layout_emit_reorder(struct kiln_lower_ctx_s* ctx, const struct tir_buffer_s* src, int32_t sb,
                                       const struct tir_buffer_s* dst, int32_t db, const int64_t* dims);
/* One line per blocked node / reorder (for --dump's plan). */
void kiln_layout_dump(const kiln_layout_t* l, const kiln_graph_t* g, FILE* out);

#ifdef __cplusplus
}
#endif
#endif
