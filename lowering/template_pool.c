/* Pool template instances (see template.h): a 2-D MaxPool, AveragePool or
 * GlobalAveragePool whose plan kernel is the lowering's printed pool
 * (lowering/lower_nn_pool.c): it reads X (or a flat view of it) and writes
 * Y (or a flat view) and nothing else. The match rebuilds the window from
 * the node and checks it against the buffer shapes; anything else (an
 * Indices output, a fused consumer, dilations, blocked layouts) keeps the
 * printed kernel, which is always correct. X and Y may each be f16 (hx,
 * hy); the set decides whether it takes those. */
#include "lowering/template.h"

#include <string.h>

#include "ir/op.h"
#include "ir/ops/nn_internal.h"

bool kiln_template_pool_match(const kiln_plan_t* plan, int32_t k, kiln_template_pool_t* q) {
  memset(q, 0, sizeof *q);
  const tir_buffer_t *X = NULL, *Y = NULL;
  const kiln_node_t* n = kiln_template_lone_unary(plan, k, true, &X, &Y, &q->bind_x, &q->bind_y);
  if (!n) return false;
  q->hx = X->dtype == KILN_DTYPE_F16, q->hy = Y->dtype == KILN_DTYPE_F16;
  const bool global = !strcmp(n->op_type, "GlobalAveragePool");
  q->max = !strcmp(n->op_type, "MaxPool");
  if (!global && !q->max && strcmp(n->op_type, "AveragePool")) return false;
  if (X->rank != 4 || Y->rank != 4) return false;
  q->planes = X->shape[0] * X->shape[1];
  q->ih = X->shape[2], q->iw = X->shape[3], q->oh = Y->shape[2], q->ow = Y->shape[3];
  if (Y->shape[0] != X->shape[0] || Y->shape[1] != X->shape[1] || q->planes < 1 ||
      q->planes > KILN_TEMPLATE_POOL_MAX_PLANES || q->oh < 1 || q->ow < 1 ||
      q->planes * q->ih * q->iw > INT32_MAX || q->planes * q->oh * q->ow > INT32_MAX)
    return false;
  if (global) {
    q->kh = q->ih, q->kw = q->iw, q->sh = q->sw = 1;
    q->count_pad = true;
    if (q->oh != 1 || q->ow != 1) return false;
  } else {
    kiln_nn_window_t w;
    int64_t ceil_mode = 0, cip = 0, order = 0;
    kiln_status_t s = kiln_attr_int(n, "ceil_mode", 0, &ceil_mode);
    if (!s) s = kiln_attr_int(n, "count_include_pad", 0, &cip);
    if (!s) s = kiln_attr_int(n, "storage_order", 0, &order);
    if (!s) s = kiln_nn_window_parse(n, q->max ? "MaxPool" : "AveragePool", 2, true, &w);
    int64_t o[2] = {0, 0};
    for (int32_t i = 0; i < 2 && !s; ++i) s = kiln_nn_window_out(&w, "pool", i, X->shape[2 + i], ceil_mode != 0, &o[i]);
    if (s) {
      kiln_status_free(s);
      return false;
    }
    if (o[0] != q->oh || o[1] != q->ow || w.dilation[0] != 1 || w.dilation[1] != 1) return false;
    q->kh = w.kernel[0], q->kw = w.kernel[1], q->sh = w.stride[0], q->sw = w.stride[1];
    q->ph = w.pad_begin[0], q->pw = w.pad_begin[1];
    q->count_pad = cip != 0;
  }
  if (q->kh * q->kw > KILN_TEMPLATE_POOL_MAX_TAPS || q->kh < 1 || q->kw < 1 || q->sw > 8) return false;
  return true;
}
