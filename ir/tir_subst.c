/* Variable substitution on the tensor IR (tir_substitute_expr/_stmt).
 *
 * Substitution is simultaneous (vars[i] -> values[i] all at once, values are
 * not substituted again) and rebuilds only the spine above a change, so
 * unchanged subtrees are shared with the input. Variables are matched by
 * identity (pointer), not by name. A loop that binds one of |vars| shadows it
 * inside its body: the mapping does not apply there. */
#include "ir/tir_visit.h"

typedef struct {
  int32_t n;
  const tir_var_t* const* vars;
  const tir_expr_t* const* values;
} subst_t;

static int32_t find(const subst_t* s, const tir_var_t* v) {
  for (int32_t i = 0; i < s->n; ++i)
    if (s->vars[i] == v) return i;
  return -1;
}

/* A reference to a mapped variable becomes its value, which is not visited
 * again (simultaneous substitution). */
static bool on_expr(tir_mutator_t* m, const tir_expr_t* e, const tir_expr_t** out) {
  if (e->kind != TIR_VARREF) return false;
  int32_t i = find(m->user, e->u.var);
  *out = i >= 0 ? ((const subst_t*)m->user)->values[i] : e;
  return true;
}

static const tir_stmt_t* substitute(tir_ctx_t* c, const subst_t* s, const tir_stmt_t* st);

/* A loop rebinding a mapped variable: its body is substituted with that
 * variable left out of the mapping. Rare, so the reduced mapping goes into
 * the arena rather than a shadow stack on every walk. */
static bool on_stmt(tir_mutator_t* m, const tir_stmt_t* st, const tir_stmt_t** out) {
  if (st->kind != TIR_FOR) return false;
  const subst_t* s = m->user;
  int32_t k = find(s, st->u.loop.var);
  if (k < 0) return false;
  tir_ctx_t* c = m->ctx;
  const tir_var_t** vars = kiln_arena_alloc(&c->arena, sizeof(*vars) * (size_t)s->n);
  const tir_expr_t** values = kiln_arena_alloc(&c->arena, sizeof(*values) * (size_t)s->n);
  if (!vars || !values) {
    c->oom = true;
    *out = NULL;
    return true;
  }
  subst_t inner = {0, vars, values};
  for (int32_t i = 0; i < s->n; ++i) {
    if (s->vars[i] == st->u.loop.var) continue;
    vars[inner.n] = s->vars[i];
    values[inner.n++] = s->values[i];
  }
  *out = tir_for_with_body(c, st, substitute(c, &inner, st->u.loop.body));
  return true;
}

static const tir_stmt_t* substitute(tir_ctx_t* c, const subst_t* s, const tir_stmt_t* st) {
  tir_mutator_t m = {.ctx = c, .user = (void*)s, .stmt_pre = on_stmt, .expr_pre = on_expr};
  return tir_mutate_stmt(&m, st);
}

const tir_expr_t* tir_substitute_expr(tir_ctx_t* c, const tir_expr_t* e, int32_t n,
                                      const tir_var_t* const* vars,
                                      const tir_expr_t* const* values) {
  subst_t s = {n, vars, values};
  tir_mutator_t m = {.ctx = c, .user = &s, .expr_pre = on_expr};
  return tir_mutate_expr(&m, e);
}

const tir_stmt_t* tir_substitute_stmt(tir_ctx_t* c, const tir_stmt_t* st, int32_t n,
                                      const tir_var_t* const* vars,
                                      const tir_expr_t* const* values) {
  subst_t s = {n, vars, values};
  return substitute(c, &s, st);
}
