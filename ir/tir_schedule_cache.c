/* cache_read / cache_write: stage the region of a buffer that a loop
 * touches in a LOCAL/PRIVATE buffer. See ir/tir_schedule.h. */
#include "ir/tir_schedule_impl.h"

/* ==== cache_read / cache_write ========================================== */

typedef struct {
  const tir_sch_region_t* R;
  const tir_sch_list_t* inner;
  const tir_buffer_t* local;
} cache_ud_t;

static const tir_expr_t* const* cache_idx(tir_sch_mapper_t* m, const tir_expr_t* const* idx) {
  cache_ud_t* u = m->ud;
  const tir_expr_t** li =
      kiln_arena_alloc(&m->c->arena, sizeof(*li) * (size_t)(m->buf->rank ? m->buf->rank : 1));
  if (!li) {
    m->c->oom = true;
    return NULL;
  }
  for (int32_t d = 0; d < m->buf->rank; ++d)
    li[d] = tir_sch_region_local_index(m->c, &u->R->d[d], idx[d], u->inner);
  return li;
}

static const tir_expr_t* cache_load(tir_sch_mapper_t* m, const tir_expr_t* const* idx) {
  const tir_expr_t* const* li = cache_idx(m, idx);
  return li ? tir_load(m->c, ((cache_ud_t*)m->ud)->local, li) : NULL;
}

static const tir_stmt_t* cache_store(tir_sch_mapper_t* m, const tir_expr_t* const* idx,
                                     const tir_expr_t* value) {
  const tir_expr_t* const* li = cache_idx(m, idx);
  return li ? tir_store(m->c, ((cache_ud_t*)m->ud)->local, li, value) : NULL;
}

/* Copy loops "<prefix><tag><d>" over the region: local <- src when |in|,
 * else src <- local; positions outside |src| are skipped. |loops| gains the
 * copy variables (for the guard's bounds). */
static const tir_stmt_t* copy_nest(tir_ctx_t* c, const tir_sch_region_t* R, const tir_buffer_t* src,
                                   const tir_buffer_t* local, const char* prefix, const char* tag,
                                   bool in, tir_sch_list_t* loops) {
  int32_t r = src->rank;
  const tir_var_t* cv[KILN_MAX_RANK];
  const tir_expr_t* li[KILN_MAX_RANK];
  const tir_expr_t* si[KILN_MAX_RANK];
  for (int32_t d = 0; d < r; ++d) {
    char nm[32];
    snprintf(nm, sizeof(nm), "%s%d", tag, (int)d);
    cv[d] = tir_var(c, tir_sch_join(c, prefix, "", nm));
    li[d] = tir_ref(c, cv[d]);
    tir_sch_list_push(loops, cv[d], R->ext[d]);
    si[d] = tir_sch_region_source_index(c, &R->d[d], li[d]);
  }
  const tir_expr_t* cond = NULL;
  for (int32_t d = 0; d < r; ++d)
    if (!R->d[d].full && si[d]) tir_sch_range_guard(c, loops, si[d], src->shape[d], &cond);
  const tir_stmt_t* body = in ? tir_store(c, local, li, tir_load(c, src, si))
                              : tir_store(c, src, si, tir_load(c, local, li));
  if (cond) body = tir_if(c, cond, body, NULL);
  for (int32_t d = r - 1; d >= 0; --d) body = tir_for(c, cv[d], R->ext[d], TIR_LOOP_SERIAL, body);
  return body;
}

/* cache_write can skip loading the region first when the loop body writes
 * every element of it before reading it: every load repeats a store made
 * earlier in an enclosing sequence, and every store covers the whole region
 * (no guard above it, each dim a distinct inner loop + constant spanning the
 * region, or a constant). Otherwise the write-back would store elements the
 * body never wrote, so the region is copied in first. */
static bool write_needs_init(const tir_sch_accesses_t* A, const tir_sch_region_t* R,
                             const tir_buffer_t* b, const tir_sch_list_t* inner) {
  for (int32_t i = 0; i < A->n; ++i) {
    const tir_sch_access_t* x = &A->a[i];
    if (!x->store) {
      if (!x->covered) return true;
      continue;
    }
    if (x->under_if) return true;
    const void* used[KILN_MAX_RANK];
    int32_t nu = 0;
    for (int32_t d = 0; d < b->rank; ++d) {
      if (R->d[d].full) return true;
      tir_lin_t a, out, in;
      tir_sch_lin_of(&a, x->idx[d]);
      tir_sch_lin_split(&a, inner, &out, &in);
      int64_t lo = in.c, hi = in.c;
      if (in.n == 1) {
        const tir_expr_t* at = in.t[0];
        if (in.k[0] != 1 || at->kind != TIR_VARREF) return true;
        int32_t j = tir_sch_list_find(inner, at->u.var);
        if (j < 0) return true;
        for (int32_t u = 0; u < nu; ++u)
          if (used[u] == at->u.var) return true;
        used[nu++] = at->u.var;
        hi = lo + inner->ext[j] - 1;
      } else if (in.n > 1) {
        return true;
      }
      if (lo != R->d[d].lo || hi != R->d[d].hi) return true;
    }
  }
  return false;
}

static const char* scope_suffix(tir_scope_t s) {
  return s == TIR_SCOPE_LOCAL ? ".local" : ".private";
}

/* "<buf>.local" (or ".private"), numbered when taken. */
static kiln_status_t local_name(const tir_sch_state_t* S, const tir_buffer_t* buf,
                                tir_scope_t scope, const char** out) {
  for (int i = 0; i < 100; ++i) {
    char nm[32];
    if (i)
      snprintf(nm, sizeof(nm), "%s%d", scope_suffix(scope), i);
    else
      snprintf(nm, sizeof(nm), "%s", scope_suffix(scope));
    const char* name = tir_sch_join(S->c, buf->name, "", nm);
    if (!name) return NULL;
    tir_sch_find_buf_t f;
    KILN_RETURN_IF_ERROR(tir_sch_count_buffers(S, name, &f));
    if (f.found.n == 0) {
      *out = name;
      return NULL;
    }
  }
  return kiln_make_status(KILN_LIMIT_EXCEEDED, "too many cached copies of buffer '%s'",
                          buf->name);
}

/* Copy loops are "<buf>.c<d>" (cache_write's copy-in, when it needs one:
 * "<buf>.in<d>"); when taken (the buffer was cached before) they are named
 * after the new buffer instead. */
static kiln_status_t copy_prefix(const tir_sch_state_t* S, const tir_buffer_t* buf,
                                 const tir_buffer_t* local, const char** out) {
  const char* cand[2] = {buf->name, local->name};
  for (int i = 0; i < 2; ++i) {
    bool free_ = true;
    for (int32_t d = 0; d < buf->rank && free_; ++d) {
      for (int t = 0; t < 2 && free_; ++t) {
        char nm[32];
        snprintf(nm, sizeof(nm), "%s%d", t ? ".in" : ".c", (int)d);
        const char* name = tir_sch_join(S->c, cand[i], "", nm);
        if (!name) return NULL;
        free_ = tir_sch_count_loops(S, name) == 0;
      }
    }
    if (free_) {
      *out = cand[i];
      return NULL;
    }
  }
  return kiln_make_status(KILN_INVALID_ARGUMENT, "loop names '%s.c0'... already exist",
                          local->name);
}

kiln_status_t tir_sch_apply_cache(tir_sch_state_t* S, const tir_sched_step_t* st, bool write) {
  tir_ctx_t* c = S->c;
  const tir_buffer_t* buf;
  const tir_stmt_t* L;
  KILN_RETURN_IF_ERROR(tir_sch_find_buffer(S, st->buffer, &buf));
  if (st->scope != TIR_SCOPE_LOCAL && st->scope != TIR_SCOPE_PRIVATE)
    return kiln_make_status(KILN_INVALID_ARGUMENT, "scope must be local or private, not %s",
                            tir_sch_scope_name(st->scope));
  KILN_RETURN_IF_ERROR(tir_sch_find_loop(S, st->loop, &L, NULL));
  tir_sch_accesses_t A;
  KILN_RETURN_IF_ERROR(tir_sch_collect_accesses(c, L->u.loop.body, buf, &A));
  if (A.allocated_inside)
    return kiln_make_status(KILN_INVALID_ARGUMENT, "buffer '%s' is allocated inside loop '%s'",
                            buf->name, st->loop);
  int32_t loads = 0, stores = 0;
  for (int32_t i = 0; i < A.n; ++i) *(A.a[i].store ? &stores : &loads) += 1;
  if (!write && stores)
    return kiln_make_status(KILN_INVALID_ARGUMENT,
                            "buffer '%s' is written inside loop '%s' (use cache_write)",
                            buf->name, st->loop);
  if (!write && !loads)
    return kiln_make_status(KILN_INVALID_ARGUMENT, "buffer '%s' is not read inside loop '%s'",
                            buf->name, st->loop);
  if (write && !stores)
    return kiln_make_status(KILN_INVALID_ARGUMENT, "buffer '%s' is not written inside loop '%s'",
                            buf->name, st->loop);
  tir_sch_list_t inner, loops;
  tir_sch_region_t R;
  KILN_RETURN_IF_ERROR(tir_sch_loop_region(S, L, &A, &inner, &loops, &R));
  bool copy_in = !write || write_needs_init(&A, &R, buf, &inner);

  const char* lname = NULL;
  const char* prefix = NULL;
  KILN_RETURN_IF_ERROR(local_name(S, buf, st->scope, &lname));
  if (!lname) return NULL;
  const tir_buffer_t* local = tir_buffer(c, lname, buf->dtype, buf->rank, R.ext, st->scope);
  if (!local) return NULL;
  KILN_RETURN_IF_ERROR(copy_prefix(S, buf, local, &prefix));
  if (!prefix) return NULL;

  cache_ud_t u = {&R, &inner, local};
  tir_sch_mapper_t m = {c, buf, cache_load, write ? cache_store : NULL, false, &u};
  const tir_stmt_t* body = tir_sch_map_stmt(&m, L->u.loop.body);
  bool shared = st->scope == TIR_SCOPE_LOCAL;
  const tir_stmt_t* items[7];
  int32_t n = 0;
  if (copy_in) {
    items[n++] = copy_nest(c, &R, buf, local, prefix, write ? ".in" : ".c", true, &loops);
    if (shared) items[n++] = tir_barrier(c);
  }
  items[n++] = body;
  if (shared) items[n++] = tir_barrier(c);
  if (write) {
    items[n++] = copy_nest(c, &R, buf, local, prefix, ".c", false, &loops);
    if (shared) items[n++] = tir_barrier(c);
  }
  for (int32_t i = 0; i < n; ++i)
    if (!items[i]) return NULL;
  const tir_stmt_t* out = tir_sch_for_like(c, L, tir_alloc(c, local, tir_seq(c, n, items)));
  if (out) S->body = tir_sch_replace(c, S->body, L, out);
  return NULL;
}
