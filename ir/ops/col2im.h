/* Col2Im's geometry, shared by the reference kernel (ir/ops/tensor_col2im.c)
 * and the lowering (lowering/lower_tensor_col2im.c). Internal to kiln. */
#ifndef KILN_IR_OPS_COL2IM_H_
#define KILN_IR_OPS_COL2IM_H_

#include "ir/op.h"

#define KILN_COL2IM_MAX_DIMS (KILN_MAX_RANK - 2)

typedef struct {
  int32_t n;                          /* spatial dims */
  int64_t image[KILN_COL2IM_MAX_DIMS]; /* output spatial size */
  int64_t block[KILN_COL2IM_MAX_DIMS];
  int64_t dil[KILN_COL2IM_MAX_DIMS], stride[KILN_COL2IM_MAX_DIMS];
  int64_t pad[KILN_COL2IM_MAX_DIMS];   /* begin pads (the end pads only size L) */
  int64_t blocks[KILN_COL2IM_MAX_DIMS]; /* block positions per dim (L_i) */
  int64_t block_size, n_blocks;       /* prod(block), prod(L_i) */
} col2im_t;

/* Geometry from the image_shape / block_shape values and the attributes;
 * errors name the node's problem. |c_in| and |l_in| (input dims 1 and 2)
 * are checked when known (>= 0). */
kiln_status_t kiln_col2im_geometry(const kiln_node_t* node, const kiln_array_t* image,
                                   const kiln_array_t* block, int64_t c_in, int64_t l_in,
                                   col2im_t* g);

#endif
