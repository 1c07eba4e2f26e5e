/* Schedule primitives on loops with a run-time trip count (tir_for_dyn: a
 * dynamic dim's extent read when the kernel runs, at most the loop's static
 * extent). See ir/tir_schedule.h.
 *
 * A static split guards the last tile (`if (o*f+i < E)`); with a run-time
 * count every tile could be the last one, and a guard inside the tile would
 * keep the tile's inner loop from vectorizing. So a dynamic loop is split
 * into the full tiles (outer loop "L.o" runs n/f times, inner "L.i" exactly
 * f: it vectorizes and unrolls as a static tile does) followed by the
 * remainder, a copy of the body in loop "L.r" that runs n%f times. The
 * copy's own loops get ".L.r" appended to their names ("j" becomes "j.i.r"
 * when "i" is split) so that names stay unique and the schedule's later
 * steps (which name the main tile's loops) leave the remainder scalar. */
#include "ir/tir_analysis.h"
#include "ir/tir_schedule_impl.h"
#include "ir/tir_visit.h"

/* The same loop as |l| (extent, run-time extent, kind, tag) over variable
 * |v| and |body|. */
static const tir_stmt_t* loop_as(tir_ctx_t* c, const tir_stmt_t* l, const tir_var_t* v, const tir_stmt_t* body) {
  if (l->u.loop.dyn_extent && l->u.loop.kind != TIR_LOOP_BOUND)
    return tir_for_dyn(c, v, l->u.loop.extent, l->u.loop.dyn_extent, l->u.loop.kind, body);
  return tir_sch_for(c, v, l->u.loop.extent, l->u.loop.kind, l->u.loop.tag, body);
}

typedef struct rename_s {
  const tir_sch_state_t* S;
  const char* suffix; /* ".<the split loop's name>.r" */
  kiln_status_t err;
} rename_t;

/* Bottom-up: a loop's body (its inner loops renamed already) gets the new
 * variable; the substitution also reaches the run-time extents of inner
 * loops that read the outer variable. */
static const tir_stmt_t* rename_post(tir_mutator_t* m, const tir_stmt_t* s) {
  rename_t* r = m->user;
  if (s->kind != TIR_FOR || r->err) return s;
  tir_ctx_t* c = m->ctx;
  const char* name = tir_sch_join(c, s->u.loop.var->name, "", r->suffix);
  if (!name) return NULL;
  r->err = tir_sch_check_new_loop(r->S, name);
  if (r->err) return s;
  const tir_var_t* v = tir_var(c, name);
  const tir_expr_t* ref = v ? tir_ref(c, v) : NULL;
  if (!ref) return NULL;
  const tir_stmt_t* body = tir_substitute_stmt(c, s->u.loop.body, 1, &s->u.loop.var, &ref);
  return body ? loop_as(c, s, v, body) : NULL;
}

kiln_status_t tir_sch_split_dyn(tir_sch_state_t* S, const tir_stmt_t* L, const char* no, const char* ni,
                                int64_t factor) {
  tir_ctx_t* c = S->c;
  const char* name = L->u.loop.var->name;
  if (L->u.loop.kind == TIR_LOOP_BOUND)
    return kiln_make_status(KILN_UNSUPPORTED, "loop '%s' is bound to a GPU id and has a run-time trip count", name);
  const char* nr = tir_sch_join(c, name, "", ".r");
  if (!nr) return NULL; /* OOM: reported by the caller */
  KILN_RETURN_IF_ERROR(tir_sch_check_new_loop(S, nr));
  const int64_t e = L->u.loop.extent;
  const int64_t f = (e > 0 && factor > e) ? e : factor;
  const tir_expr_t* n = L->u.loop.dyn_extent;
  const tir_expr_t* fe = tir_int(c, f);
  const tir_expr_t* full = tir_bin(c, TIR_FLOORDIV, n, fe);
  const tir_var_t* vo = tir_var(c, no);
  const tir_var_t* vi = tir_var(c, ni);
  if (!vo || !vi || !full) return NULL;
  const tir_expr_t* x = tir_add(c, tir_mul(c, tir_ref(c, vo), fe), tir_ref(c, vi));
  const tir_stmt_t* body = tir_substitute_stmt(c, L->u.loop.body, 1, &L->u.loop.var, &x);
  const tir_loop_kind_t k = L->u.loop.kind;
  const bool inner_keeps = k == TIR_LOOP_VECTORIZED || k == TIR_LOOP_UNROLLED;
  const tir_stmt_t* in = tir_sch_for(c, vi, f, inner_keeps ? k : TIR_LOOP_SERIAL, TIR_TAG_NONE, body);
  const tir_stmt_t* out =
      in ? tir_for_dyn(c, vo, f > 0 ? e / f : 0, full, k == TIR_LOOP_PARALLEL ? k : TIR_LOOP_SERIAL, in) : NULL;
  if (out && f > 1) {
    /* the last n % f iterations, after the full tiles */
    const tir_var_t* vr = tir_var(c, nr);
    if (!vr) return NULL;
    const tir_expr_t* xr = tir_add(c, tir_mul(c, full, fe), tir_ref(c, vr));
    rename_t rn = {S, tir_sch_join(c, ".", "", nr), NULL};
    if (!rn.suffix) return NULL;
    tir_mutator_t m = {.ctx = c, .user = &rn, .stmt_post = rename_post};
    const tir_stmt_t* rb = tir_mutate_stmt(&m, L->u.loop.body);
    if (rn.err) return kiln_status_annotate(rn.err, "the remainder of loop '%s'", name);
    rb = rb ? tir_substitute_stmt(c, rb, 1, &L->u.loop.var, &xr) : NULL;
    /* always true (xr < n), but it tells the verifier that the index,
     * which depends on the loaded count, was checked against it */
    rb = rb ? tir_if(c, tir_bin(c, TIR_LT, xr, n), rb, NULL) : NULL;
    const tir_stmt_t* rem = rb ? tir_for_dyn(c, vr, f - 1, tir_bin(c, TIR_FLOORMOD, n, fe), TIR_LOOP_SERIAL, rb) : NULL;
    const tir_stmt_t* both[2] = {out, rem};
    out = rem ? tir_seq(c, 2, both) : NULL;
  }
  if (out) S->body = tir_sch_replace(c, S->body, L, out);
  return NULL;
}

kiln_status_t tir_sch_dyn_kind(tir_sch_state_t* S, const tir_stmt_t* L, tir_loop_kind_t k) {
  const char* name = L->u.loop.var->name;
  if (k == TIR_LOOP_VECTORIZED)
    return kiln_make_status(KILN_UNSUPPORTED,
                            "loop '%s' has a run-time trip count: split it by the vector width first (its full "
                            "tiles vectorize, the remainder runs scalar)",
                            name);
  if (k == TIR_LOOP_BOUND)
    return kiln_make_status(KILN_UNSUPPORTED, "loop '%s' has a run-time trip count and cannot be bound to a GPU id",
                            name);
  const tir_stmt_t* out = tir_for_dyn(S->c, L->u.loop.var, L->u.loop.extent, L->u.loop.dyn_extent, k, L->u.loop.body);
  if (out) S->body = tir_sch_replace(S->c, S->body, L, out);
  return NULL;
}

kiln_status_t tir_sch_dyn_order(const tir_stmt_t* const* order, int32_t m) {
  for (int32_t t = 0; t < m; ++t) {
    const tir_expr_t* dyn = order[t]->u.loop.dyn_extent;
    for (int32_t u = t; dyn && u < m; ++u)
      if (tir_expr_uses_var(dyn, order[u]->u.loop.var))
        return kiln_make_status(KILN_INVALID_ARGUMENT,
                                "loop '%s' runs a trip count that loop '%s' sets: it cannot move outside it",
                                order[t]->u.loop.var->name, order[u]->u.loop.var->name);
  }
  return NULL;
}
