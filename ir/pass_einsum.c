/* Pass "einsum-to-matmul": a two-operand Einsum that is a batched matrix
 * product (every label is a batch label of both operands and the output, a
 * row label of the first operand and the output, a column label of the
 * second and the output, or a contracted label of both operands only)
 * becomes Transpose -> Reshape on each operand, one MatMul over
 * [batch, rows, k] x [batch, k, columns], and Reshape -> Transpose to the
 * output's label order. The MatMul then gets kiln's GEMM templates instead
 * of Einsum's generic loop nest (lowering/lower_tensor_einsum.c); identity
 * transposes and reshapes are removed by the passes that follow.
 *
 * Left as they are: diagonals (a label twice in one operand), labels summed
 * within one operand, broadcast dims (a size-1 dim against a larger one),
 * other operand counts and shapes that are not static. */
#include <stdio.h>
#include <string.h>

#include "ir/ops/einsum.h"
#include "ir/pass_util.h"

/* A fresh intermediate tensor named after |base|. */
static kiln_status_t new_tensor(pu_ctx_t* c, const char* base, int32_t* out) {
  char buf[256];
  KILN_RETURN_IF_ERROR(kiln_graph_get_or_add_tensor(c->g, pu_name(c, base, "einsum", buf, sizeof buf), out));
  return pu_sync(c);
}

/* Adds |op|(in[, const shape]) writing |out| (a fresh tensor when -1). */
static kiln_status_t add_step(pu_ctx_t* c, const char* base, const char* op, int32_t in, const int64_t* ints,
                              int32_t n, int32_t* out) {
  if (*out < 0) KILN_RETURN_IF_ERROR(new_tensor(c, base, out));
  char name[256];
  pu_name(c, base, op, name, sizeof name);
  if (strcmp(op, "Transpose") == 0) {
    kiln_attr_t perm = {.name = "perm", .type = KILN_ATTR_INTS, .count = n, .ints = ints};
    return pu_add_node(c, op, name, 1, &in, *out, 1, &perm, NULL);
  }
  int32_t shape_t;
  KILN_RETURN_IF_ERROR(pu_add_i64(c, base, ints, n, &shape_t));
  return pu_add_node(c, op, name, 2, (int32_t[]){in, shape_t}, *out, 0, NULL, NULL);
}

/* Where label |l| sits in operand |i| (-1: absent). */
static int32_t pos_in(const kiln_einsum_t* e, int32_t i, int32_t l) {
  for (int32_t d = 0; d < e->in_rank[i]; ++d)
    if (e->in_label[i][d] == l) return d;
  return -1;
}

static int32_t pos_out(const kiln_einsum_t* e, int32_t l) {
  for (int32_t d = 0; d < e->out_rank; ++d)
    if (e->out_label[d] == l) return d;
  return -1;
}

static kiln_status_t rewrite(pu_ctx_t* c, int32_t ni, bool* done) {
  kiln_graph_t* g = c->g;
  *done = false;
  const kiln_node_t* n = &g->nodes[ni];
  if (n->n_inputs != 2 || n->n_outputs != 1 || n->inputs[0] < 0 || n->inputs[1] < 0 || n->outputs[0] < 0)
    return NULL;
  const kiln_attr_t* eq = kiln_node_attr(n, "equation");
  const kiln_tensor_t* ta = &g->tensors[n->inputs[0]];
  const kiln_tensor_t* tb = &g->tensors[n->inputs[1]];
  if (!eq || eq->type != KILN_ATTR_STRING || !kiln_shape_is_static(&ta->shape) || !kiln_shape_is_static(&tb->shape) ||
      !kiln_dtype_is_float(ta->dtype))
    return NULL;
  const kiln_shape_t* shapes[2] = {&ta->shape, &tb->shape};
  kiln_einsum_t e;
  kiln_status_t s = kiln_einsum_parse(eq->s, 2, shapes, &e);
  if (s) {
    kiln_status_free(s); /* inference reports a bad equation */
    return NULL;
  }
  /* Labels by role, each in the order of its first operand. */
  int32_t bat[KILN_MAX_RANK], row[KILN_MAX_RANK], col[KILN_MAX_RANK], con[KILN_MAX_RANK];
  int32_t nb = 0, nr = 0, nc = 0, nk = 0;
  int64_t B = 1, M = 1, N = 1, K = 1;
  for (int32_t i = 0; i < 2; ++i) {
    for (int32_t d = 0; d < e.in_rank[i]; ++d) {
      int32_t l = e.in_label[i][d];
      if (pos_in(&e, i, l) != d || shapes[i]->dims[d] != e.size[l]) return NULL; /* diagonal or broadcast */
      bool other = pos_in(&e, 1 - i, l) >= 0, out = pos_out(&e, l) >= 0;
      if (i == 1 && other) continue; /* listed from operand 0 */
      if (!other && !out) return NULL; /* summed within one operand */
      int64_t sz = e.size[l];
      if (other && out) bat[nb++] = l, B *= sz;
      else if (other) con[nk++] = l, K *= sz;
      else if (i == 0) row[nr++] = l, M *= sz;
      else col[nc++] = l, N *= sz;
    }
  }
  /* Operand permutations: A -> [bat, row, con], B -> [bat, con, col]. */
  int64_t pa[KILN_MAX_RANK], pb[KILN_MAX_RANK], mid[KILN_MAX_RANK], po[KILN_MAX_RANK];
  int32_t k = 0;
  for (int32_t j = 0; j < nb; ++j) pa[k++] = pos_in(&e, 0, bat[j]);
  for (int32_t j = 0; j < nr; ++j) pa[k++] = pos_in(&e, 0, row[j]);
  for (int32_t j = 0; j < nk; ++j) pa[k++] = pos_in(&e, 0, con[j]);
  k = 0;
  for (int32_t j = 0; j < nb; ++j) pb[k++] = pos_in(&e, 1, bat[j]);
  for (int32_t j = 0; j < nk; ++j) pb[k++] = pos_in(&e, 1, con[j]);
  for (int32_t j = 0; j < nc; ++j) pb[k++] = pos_in(&e, 1, col[j]);
  /* The product's labels [bat, row, col] and the output's order of them. */
  int32_t mids[KILN_MAX_RANK * 3], nm = 0;
  for (int32_t j = 0; j < nb; ++j) mids[nm++] = bat[j];
  for (int32_t j = 0; j < nr; ++j) mids[nm++] = row[j];
  for (int32_t j = 0; j < nc; ++j) mids[nm++] = col[j];
  if (nm != e.out_rank || e.out_rank == 0 || e.in_rank[0] == 0 || e.in_rank[1] == 0 || B * M * N * K == 0)
    return NULL;
  for (int32_t j = 0; j < nm; ++j) mid[j] = e.size[mids[j]];
  for (int32_t d = 0; d < e.out_rank; ++d)
    for (int32_t j = 0; j < nm; ++j)
      if (mids[j] == e.out_label[d]) po[d] = j;
  const char* base = n->name;
  const int32_t a = n->inputs[0], b = n->inputs[1], y = n->outputs[0];
  const int64_t sa[3] = {B, M, K}, sb[3] = {B, K, N};
  int32_t a1 = -1, a2 = -1, b1 = -1, b2 = -1, p = -1, p1 = -1;
  c->dead[ni] = true;
  pu_detach(c, y);
  KILN_RETURN_IF_ERROR(add_step(c, base, "Transpose", a, pa, e.in_rank[0], &a1));
  KILN_RETURN_IF_ERROR(add_step(c, base, "Reshape", a1, sa, 3, &a2));
  KILN_RETURN_IF_ERROR(add_step(c, base, "Transpose", b, pb, e.in_rank[1], &b1));
  KILN_RETURN_IF_ERROR(add_step(c, base, "Reshape", b1, sb, 3, &b2));
  KILN_RETURN_IF_ERROR(new_tensor(c, base, &p));
  char name[256];
  KILN_RETURN_IF_ERROR(pu_add_node(c, "MatMul", pu_name(c, base, "MatMul", name, sizeof name), 2,
                                   (int32_t[]){a2, b2}, p, 0, NULL, NULL));
  KILN_RETURN_IF_ERROR(add_step(c, base, "Reshape", p, mid, nm, &p1));
  int32_t yy = y;
  KILN_RETURN_IF_ERROR(add_step(c, base, "Transpose", p1, po, e.out_rank, &yy));
  *done = true;
  return NULL;
}

kiln_status_t kiln_pass_einsum(kiln_graph_t* g, kiln_pass_stats_t* st) {
  pu_ctx_t c;
  KILN_RETURN_IF_ERROR(pu_begin(&c, g));
  kiln_status_t s = NULL;
  const int32_t n0 = g->n_nodes;
  for (int32_t i = 0; i < n0 && !s; ++i) {
    if (c.dead[i] || !pu_op(&g->nodes[i], "Einsum")) continue;
    bool done = false;
    s = rewrite(&c, i, &done);
    if (done) ++st->rewrites;
  }
  return pu_end(&c, s);
}
