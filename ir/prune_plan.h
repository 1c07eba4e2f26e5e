/* A structured-pruning plan: what `kiln prune` decided for a graph, in the
 * terms an ONNX file spells it, so that the same plan rewrites a graph in
 * memory (compiler/prune.h) and the model file (frontend/onnx_prune.h).
 *
 *  - every slice entry keeps, of initializer |name|'s axis |axis| (length
 *    |len|), the positions whose |keep| byte is 1, in order;
 *  - every attribute entry sets node |node|'s INT attribute |attr| (a
 *    depthwise Conv's `group`) to |value|.
 *
 * Names are borrowed from the graph the plan was made for; the plan owns its
 * arrays (kiln_prune_plan_free in compiler/prune.h).
 */
#ifndef KILN_IR_PRUNE_PLAN_H_
#define KILN_IR_PRUNE_PLAN_H_

#include <stdbool.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

typedef struct kiln_prune_slice_s {
  const char* name;  /* initializer */
  int32_t axis;
  int64_t len;       /* the axis' length before pruning */
  uint8_t* keep;     /* |len| entries, 1 = kept */
} kiln_prune_slice_t;

typedef struct kiln_prune_attr_s {
  const char* node;
  const char* attr;
  int64_t value;
} kiln_prune_attr_t;

typedef struct kiln_prune_plan_s {
  int32_t n_slices;
  kiln_prune_slice_t* slices;
  int32_t n_attrs;
  kiln_prune_attr_t* attrs;
} kiln_prune_plan_t;

#ifdef __cplusplus
}
#endif
#endif /* KILN_IR_PRUNE_PLAN_H_ */
