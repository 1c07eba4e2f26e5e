/* Loop-structure primitives: split, reorder, tile, fuse, and the loop kinds
 * (vectorize, unroll, parallel, bind to a GPU id). See ir/tir_schedule.h. */
#include "ir/tir_schedule_impl.h"

/* ==== split / reorder / tile / fuse / loop kinds ======================= */

kiln_status_t tir_sch_apply_split(tir_sch_state_t* S, const char* name, int64_t factor) {
  tir_ctx_t* c = S->c;
  if (factor < 1) return kiln_make_status(KILN_INVALID_ARGUMENT, "factor must be >= 1");
  const tir_stmt_t* L;
  KILN_RETURN_IF_ERROR(tir_sch_find_loop(S, name, &L, NULL));
  const char* no = tir_sch_join(c, name, "", ".o");
  const char* ni = tir_sch_join(c, name, "", ".i");
  if (!no || !ni) return NULL; /* OOM: reported by the caller */
  KILN_RETURN_IF_ERROR(tir_sch_check_new_loop(S, no));
  KILN_RETURN_IF_ERROR(tir_sch_check_new_loop(S, ni));
  if (L->u.loop.dyn_extent) return tir_sch_split_dyn(S, L, no, ni, factor);
  int64_t e = L->u.loop.extent;
  /* A factor above the extent only adds a guard: clamp it. */
  int64_t f = (e > 0 && factor > e) ? e : factor;
  int64_t outer = e > 0 ? (e + f - 1) / f : 0;
  const tir_var_t* vo = tir_var(c, no);
  const tir_var_t* vi = tir_var(c, ni);
  const tir_expr_t* x = tir_add(c, tir_mul(c, tir_ref(c, vo), tir_int(c, f)), tir_ref(c, vi));
  const tir_stmt_t* body = tir_substitute_stmt(c, L->u.loop.body, 1, &L->u.loop.var, &x);
  if (e % f) body = tir_if(c, tir_bin(c, TIR_LT, x, tir_int(c, e)), body, NULL);
  tir_loop_kind_t k = L->u.loop.kind;
  bool outer_keeps = k == TIR_LOOP_PARALLEL || k == TIR_LOOP_BOUND;
  bool inner_keeps = k == TIR_LOOP_VECTORIZED || k == TIR_LOOP_UNROLLED;
  const tir_stmt_t* in =
      tir_sch_for(c, vi, f, inner_keeps ? k : TIR_LOOP_SERIAL, TIR_TAG_NONE, body);
  const tir_stmt_t* out = tir_sch_for(c, vo, outer, outer_keeps ? k : TIR_LOOP_SERIAL,
                                      outer_keeps ? L->u.loop.tag : TIR_TAG_NONE, in);
  if (out) S->body = tir_sch_replace(c, S->body, L, out);
  return NULL;
}

/* Names the innermost loop at or above path index |k| (for messages). */
static const char* loop_above(const tir_sch_path_t* p, int32_t k) {
  for (; k >= 0; --k)
    if (p->s[k]->kind == TIR_FOR) return p->s[k]->u.loop.var->name;
  return "?";
}

kiln_status_t tir_sch_apply_reorder(tir_sch_state_t* S, int32_t n, const char* const* names) {
  tir_ctx_t* c = S->c;
  if (n < 1) return kiln_make_status(KILN_INVALID_ARGUMENT, "reorder needs at least one loop");
  if (n > TIR_SCHED_MAX_LOOPS)
    return kiln_make_status(KILN_LIMIT_EXCEEDED, "reorder of %d loops, at most %d", n,
                            TIR_SCHED_MAX_LOOPS);
  for (int32_t i = 0; i < n; ++i)
    for (int32_t j = 0; j < i; ++j)
      if (names[i] && names[j] && strcmp(names[i], names[j]) == 0)
        return kiln_make_status(KILN_INVALID_ARGUMENT, "loop '%s' is listed twice", names[i]);
  tir_sch_path_t* paths = kiln_arena_alloc(&c->arena, sizeof(tir_sch_path_t) * (size_t)n);
  if (!paths) {
    c->oom = true;
    return NULL;
  }
  const tir_stmt_t* loops[TIR_SCHED_MAX_LOOPS];
  int32_t deep = 0;
  for (int32_t i = 0; i < n; ++i) {
    KILN_RETURN_IF_ERROR(tir_sch_find_loop(S, names[i], &loops[i], &paths[i]));
    if (paths[i].n > paths[deep].n) deep = i;
  }
  const tir_sch_path_t* P = &paths[deep];
  int32_t top = P->n - 1, bot = P->n - 1;
  for (int32_t i = 0; i < n; ++i) {
    int32_t d = paths[i].n - 1;
    if (P->s[d] != loops[i])
      return kiln_make_status(KILN_INVALID_ARGUMENT, "loops '%s' and '%s' are not in one loop nest",
                              names[i < deep ? i : deep], names[i < deep ? deep : i]);
    if (d < top) top = d;
  }
  /* The chain top..bot must be loops and guards only. */
  const tir_stmt_t* chain[TIR_SCH_MAX_DEPTH];
  const tir_expr_t* guard[TIR_SCH_MAX_DEPTH];
  int32_t gpos[TIR_SCH_MAX_DEPTH];
  int32_t m = 0, ng = 0;
  for (int32_t k = top; k <= bot; ++k) {
    const tir_stmt_t* s = P->s[k];
    if (s->kind == TIR_FOR) {
      chain[m++] = s;
      continue;
    }
    if (s->kind == TIR_IF && !s->u.cond.else_s) {
      guard[ng] = s->u.cond.cond;
      gpos[ng++] = m - 1;
      continue;
    }
    if (s->kind == TIR_SEQ && s->u.seq.n == 1) continue;
    return kiln_make_status(KILN_INVALID_ARGUMENT,
                            "loops %s..%s are not a perfect nest: loop '%s' holds %s",
                            P->s[top]->u.loop.var->name, P->s[bot]->u.loop.var->name,
                            loop_above(P, k),
                            s->kind == TIR_ALLOC ? "an allocation" :
                            s->kind == TIR_IF    ? "an if/else" :
                                                   "several statements");
  }
  /* Listed loops fill their own positions, in the listed order. */
  int32_t pos[TIR_SCHED_MAX_LOOPS];
  for (int32_t i = 0; i < n; ++i) {
    pos[i] = 0;
    while (chain[pos[i]] != loops[i]) ++pos[i];
  }
  for (int32_t i = 1; i < n; ++i) /* sort positions (insertion) */
    for (int32_t j = i; j > 0 && pos[j - 1] > pos[j]; --j) {
      int32_t t = pos[j];
      pos[j] = pos[j - 1];
      pos[j - 1] = t;
    }
  const tir_stmt_t* order[TIR_SCH_MAX_DEPTH];
  for (int32_t t = 0; t < m; ++t) order[t] = chain[t];
  for (int32_t i = 0; i < n; ++i) order[pos[i]] = loops[i];
  KILN_RETURN_IF_ERROR(tir_sch_dyn_order(order, m));
  for (int32_t g = 0; g < ng; ++g) {
    gpos[g] = -1;
    for (int32_t t = 0; t < m; ++t)
      if (tir_expr_uses_var(guard[g], order[t]->u.loop.var)) gpos[g] = t;
  }
  const tir_stmt_t* body = P->s[bot]->u.loop.body;
  for (int32_t t = m - 1; t >= -1; --t) {
    for (int32_t g = ng - 1; g >= 0; --g)
      if (gpos[g] == t) body = tir_if(c, guard[g], body, NULL);
    if (t >= 0) body = tir_sch_for_like(c, order[t], body);
  }
  if (body) S->body = tir_sch_replace(c, S->body, P->s[top], body);
  return NULL;
}

kiln_status_t tir_sch_apply_tile(tir_sch_state_t* S, const char* a, const char* b, int64_t fa,
                                 int64_t fb) {
  if (a && b && strcmp(a, b) == 0)
    return kiln_make_status(KILN_INVALID_ARGUMENT, "tile needs two different loops");
  /* Resolve both names before changing anything, for clear messages. */
  const tir_stmt_t* la;
  const tir_stmt_t* lb;
  KILN_RETURN_IF_ERROR(tir_sch_find_loop(S, a, &la, NULL));
  KILN_RETURN_IF_ERROR(tir_sch_find_loop(S, b, &lb, NULL));
  if (fa < 1 || fb < 1) return kiln_make_status(KILN_INVALID_ARGUMENT, "factor must be >= 1");
  KILN_RETURN_IF_ERROR(tir_sch_apply_split(S, a, fa), "split(%s, %lld)", a, (long long)fa);
  KILN_RETURN_IF_ERROR(tir_sch_apply_split(S, b, fb), "split(%s, %lld)", b, (long long)fb);
  tir_ctx_t* c = S->c;
  const char* names[4] = {tir_sch_join(c, a, "", ".o"), tir_sch_join(c, b, "", ".o"),
                          tir_sch_join(c, a, "", ".i"), tir_sch_join(c, b, "", ".i")};
  if (c->oom) return NULL;
  return tir_sch_apply_reorder(S, 4, names);
}

kiln_status_t tir_sch_apply_fuse(tir_sch_state_t* S, const char* a, const char* b) {
  tir_ctx_t* c = S->c;
  const tir_stmt_t* la;
  const tir_stmt_t* lb;
  KILN_RETURN_IF_ERROR(tir_sch_find_loop(S, a, &la, NULL));
  KILN_RETURN_IF_ERROR(tir_sch_find_loop(S, b, &lb, NULL));
  if (lb->u.loop.dyn_extent)
    return kiln_make_status(KILN_UNSUPPORTED,
                            "loop '%s' has a run-time trip count: fused as the inner loop it would divide by it", b);
  /* Guards between the two loops can only use |a|'s variable (or outer
   * ones): they move inside the fused loop. */
  const tir_expr_t* guard[TIR_SCH_MAX_DEPTH];
  int32_t ng = 0;
  const tir_stmt_t* s = la->u.loop.body;
  while (s != lb && ng < TIR_SCH_MAX_DEPTH) {
    if (s->kind == TIR_IF && !s->u.cond.else_s) {
      guard[ng++] = s->u.cond.cond;
      s = s->u.cond.then_s;
    } else if (s->kind == TIR_SEQ && s->u.seq.n == 1) {
      s = s->u.seq.items[0];
    } else {
      break;
    }
  }
  if (s != lb)
    return kiln_make_status(KILN_INVALID_ARGUMENT, "loop '%s' is not the entire body of loop '%s'",
                            b, a);
  const char* name = tir_sch_join(c, a, ".", b);
  if (!name) return NULL;
  KILN_RETURN_IF_ERROR(tir_sch_check_new_loop(S, name));
  int64_t ea = la->u.loop.extent, eb = lb->u.loop.extent;
  if (ea > 0 && eb > INT64_MAX / ea)
    return kiln_make_status(KILN_LIMIT_EXCEEDED, "fused extent %lld x %lld overflows",
                            (long long)ea, (long long)eb);
  const tir_var_t* vf = tir_var(c, name);
  const tir_expr_t* div = tir_int(c, eb > 0 ? eb : 1);
  const tir_var_t* vars[2] = {la->u.loop.var, lb->u.loop.var};
  const tir_expr_t* vals[2] = {tir_bin(c, TIR_FLOORDIV, tir_ref(c, vf), div),
                               tir_bin(c, TIR_FLOORMOD, tir_ref(c, vf), div)};
  const tir_stmt_t* body = lb->u.loop.body;
  for (int32_t g = ng - 1; g >= 0; --g) body = tir_if(c, guard[g], body, NULL);
  body = tir_substitute_stmt(c, body, 2, vars, vals);
  bool same = la->u.loop.kind == lb->u.loop.kind && la->u.loop.tag == lb->u.loop.tag;
  const tir_loop_kind_t k = same ? la->u.loop.kind : TIR_LOOP_SERIAL;
  /* an outer loop with a run-time count n runs n * eb fused iterations */
  const tir_stmt_t* out =
      la->u.loop.dyn_extent && k != TIR_LOOP_BOUND
          ? tir_for_dyn(c, vf, ea * eb, tir_mul(c, la->u.loop.dyn_extent, div), k, body)
          : tir_sch_for(c, vf, ea * eb, k, same ? la->u.loop.tag : TIR_TAG_NONE, body);
  if (out) S->body = tir_sch_replace(c, S->body, la, out);
  return NULL;
}

kiln_status_t tir_sch_apply_kind(tir_sch_state_t* S, const char* name, tir_loop_kind_t k,
                                 tir_thread_tag_t tag) {
  const tir_stmt_t* L;
  KILN_RETURN_IF_ERROR(tir_sch_find_loop(S, name, &L, NULL));
  if (L->u.loop.dyn_extent) return tir_sch_dyn_kind(S, L, k);
  const tir_stmt_t* out =
      tir_sch_for(S->c, L->u.loop.var, L->u.loop.extent, k, tag, L->u.loop.body);
  if (out) S->body = tir_sch_replace(S->c, S->body, L, out);
  return NULL;
}
