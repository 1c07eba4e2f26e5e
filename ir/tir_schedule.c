/* Schedule primitives on the tensor IR (see ir/tir_schedule.h): the step
 * list, its printing and the apply driver; the primitives themselves are in
 * ir/tir_schedule_{loops,cache,compute}.c (see ir/tir_schedule_impl.h).
 *
 * Every primitive is a pure tree rewrite: it locates its loop(s) or buffer
 * in the current kernel body, builds the replacement subtree and rebuilds
 * the spine above it (nodes are immutable, unchanged subtrees are shared).
 * Steps run in order; the first failing step stops the schedule and its
 * status reads "schedule step <i> <step>: <reason>" with <i> counted from 0
 * (the index into tir_schedule_t.steps).
 *
 * Region analysis (cache_read/cache_write/compute_at) works per buffer dim:
 * each index expression is flattened into an affine form  c + sum(k * atom);
 * atoms that use no loop inside the chosen loop form the "base" (the part
 * fixed for one iteration of the loop), the rest is bounded with interval
 * arithmetic over the loop ranges (ir/tir_bounds.c, the analysis the
 * verifier and simplifier use). All accesses must agree on the base,
 * otherwise (or when a part cannot be bounded) the dim falls back to the
 * whole buffer extent, which is always correct, just not smaller.
 */
#include <stdarg.h>

#include "ir/tir_schedule_impl.h"

/* tir_simplify_func is H-tir's (ir/tir_simplify.c). Set to 0 to build the
 * schedule code without it. */
#ifndef KILN_SCHED_SIMPLIFY
#define KILN_SCHED_SIMPLIFY 1
#endif

/* ==== schedule builders =============================================== */

tir_schedule_t* tir_schedule_new(tir_ctx_t* c) {
  tir_schedule_t* s = kiln_arena_alloc(&c->arena, sizeof(*s));
  if (!s) c->oom = true;
  return s;
}

const char* tir_sch_strdup(tir_ctx_t* c, const char* str) {
  if (!str) return NULL;
  char* d = kiln_arena_strndup(&c->arena, str, strlen(str));
  if (!d) c->oom = true;
  return d;
}

/* Appends a zeroed step; NULL (and ctx->oom) when memory runs out. */
static tir_sched_step_t* push(tir_ctx_t* c, tir_schedule_t* s, tir_sched_kind_t kind) {
  if (!s) return NULL;
  if (s->n == s->cap) {
    int32_t cap = s->cap ? s->cap * 2 : 8;
    tir_sched_step_t* v = kiln_arena_alloc(&c->arena, sizeof(*v) * (size_t)cap);
    if (!v) {
      c->oom = true;
      return NULL;
    }
    if (s->n) memcpy(v, s->steps, sizeof(*v) * (size_t)s->n);
    s->steps = v;
    s->cap = cap;
  }
  tir_sched_step_t* st = &s->steps[s->n++];
  memset(st, 0, sizeof(*st));
  st->kind = kind;
  return st;
}

void tir_sched_split(tir_ctx_t* c, tir_schedule_t* s, const char* loop, int64_t factor) {
  tir_sched_step_t* st = push(c, s, TIR_SCHED_SPLIT);
  if (!st) return;
  st->loop = tir_sch_strdup(c, loop);
  st->factor = factor;
}

void tir_sched_reorder(tir_ctx_t* c, tir_schedule_t* s, int32_t n, const char* const* loops) {
  tir_sched_step_t* st = push(c, s, TIR_SCHED_REORDER);
  if (!st) return;
  /* More than TIR_SCHED_MAX_LOOPS names: keep the count so apply reports it. */
  st->n_loops = n;
  for (int32_t i = 0; i < n && i < TIR_SCHED_MAX_LOOPS; ++i)
    st->loops[i] = tir_sch_strdup(c, loops[i]);
}

void tir_sched_tile(tir_ctx_t* c, tir_schedule_t* s, const char* a, const char* b, int64_t fa,
                    int64_t fb) {
  tir_sched_step_t* st = push(c, s, TIR_SCHED_TILE);
  if (!st) return;
  st->loop = tir_sch_strdup(c, a);
  st->loop2 = tir_sch_strdup(c, b);
  st->factor = fa;
  st->factor2 = fb;
}

void tir_sched_fuse(tir_ctx_t* c, tir_schedule_t* s, const char* a, const char* b) {
  tir_sched_step_t* st = push(c, s, TIR_SCHED_FUSE);
  if (!st) return;
  st->loop = tir_sch_strdup(c, a);
  st->loop2 = tir_sch_strdup(c, b);
}

static void one_loop(tir_ctx_t* c, tir_schedule_t* s, tir_sched_kind_t k, const char* loop) {
  tir_sched_step_t* st = push(c, s, k);
  if (st) st->loop = tir_sch_strdup(c, loop);
}

void tir_sched_vectorize(tir_ctx_t* c, tir_schedule_t* s, const char* loop) {
  one_loop(c, s, TIR_SCHED_VECTORIZE, loop);
}
void tir_sched_unroll(tir_ctx_t* c, tir_schedule_t* s, const char* loop) {
  one_loop(c, s, TIR_SCHED_UNROLL, loop);
}
void tir_sched_parallel(tir_ctx_t* c, tir_schedule_t* s, const char* loop) {
  one_loop(c, s, TIR_SCHED_PARALLEL, loop);
}

void tir_sched_bind(tir_ctx_t* c, tir_schedule_t* s, const char* loop, tir_thread_tag_t tag) {
  tir_sched_step_t* st = push(c, s, TIR_SCHED_BIND);
  if (!st) return;
  st->loop = tir_sch_strdup(c, loop);
  st->tag = tag;
}

static void cache(tir_ctx_t* c, tir_schedule_t* s, tir_sched_kind_t k, const char* buffer,
                  const char* loop, tir_scope_t scope) {
  tir_sched_step_t* st = push(c, s, k);
  if (!st) return;
  st->buffer = tir_sch_strdup(c, buffer);
  st->loop = tir_sch_strdup(c, loop);
  st->scope = scope;
}

void tir_sched_cache_read(tir_ctx_t* c, tir_schedule_t* s, const char* buffer, const char* loop,
                          tir_scope_t scope) {
  cache(c, s, TIR_SCHED_CACHE_READ, buffer, loop, scope);
}
void tir_sched_cache_write(tir_ctx_t* c, tir_schedule_t* s, const char* buffer, const char* loop,
                           tir_scope_t scope) {
  cache(c, s, TIR_SCHED_CACHE_WRITE, buffer, loop, scope);
}

void tir_sched_compute_inline(tir_ctx_t* c, tir_schedule_t* s, const char* buffer) {
  tir_sched_step_t* st = push(c, s, TIR_SCHED_COMPUTE_INLINE);
  if (st) st->buffer = tir_sch_strdup(c, buffer);
}

void tir_sched_compute_at(tir_ctx_t* c, tir_schedule_t* s, const char* buffer, const char* loop) {
  tir_sched_step_t* st = push(c, s, TIR_SCHED_COMPUTE_AT);
  if (!st) return;
  st->buffer = tir_sch_strdup(c, buffer);
  st->loop = tir_sch_strdup(c, loop);
}

/* ==== printing ========================================================= */

static const char* tag_name(tir_thread_tag_t t) {
  static const char* const names[] = {"none",     "block.x",  "block.y", "block.z",
                                      "thread.x", "thread.y", "thread.z"};
  return (t >= 0 && t <= TIR_THREAD_Z) ? names[t] : "?";
}

const char* tir_sch_scope_name(tir_scope_t s) {
  switch (s) {
    case TIR_SCOPE_GLOBAL: return "global";
    case TIR_SCOPE_LOCAL: return "local";
    case TIR_SCOPE_PRIVATE: return "private";
  }
  return "?";
}

/* snprintf that appends at *pos and never overflows |n|. */
static void app(char* out, size_t n, size_t* pos, const char* fmt, ...) KILN_PRINTF(4, 5);
static void app(char* out, size_t n, size_t* pos, const char* fmt, ...) {
  if (*pos >= n) return;
  va_list ap;
  va_start(ap, fmt);
  int k = vsnprintf(out + *pos, n - *pos, fmt, ap);
  va_end(ap);
  if (k > 0) *pos += (size_t)k;
  if (*pos >= n) *pos = n - 1;
}

#define NM(x) ((x) ? (x) : "?")

static void step_str(const tir_sched_step_t* st, char* out, size_t n) {
  size_t p = 0;
  out[0] = '\0';
  switch (st->kind) {
    case TIR_SCHED_SPLIT:
      app(out, n, &p, "split(%s, %lld)", NM(st->loop), (long long)st->factor);
      break;
    case TIR_SCHED_REORDER:
      app(out, n, &p, "reorder(");
      for (int32_t i = 0; i < st->n_loops && i < TIR_SCHED_MAX_LOOPS; ++i)
        app(out, n, &p, "%s%s", i ? ", " : "", NM(st->loops[i]));
      if (st->n_loops > TIR_SCHED_MAX_LOOPS) app(out, n, &p, ", ...");
      app(out, n, &p, ")");
      break;
    case TIR_SCHED_TILE:
      app(out, n, &p, "tile(%s, %s, %lld, %lld)", NM(st->loop), NM(st->loop2),
          (long long)st->factor, (long long)st->factor2);
      break;
    case TIR_SCHED_FUSE: app(out, n, &p, "fuse(%s, %s)", NM(st->loop), NM(st->loop2)); break;
    case TIR_SCHED_VECTORIZE: app(out, n, &p, "vectorize(%s)", NM(st->loop)); break;
    case TIR_SCHED_UNROLL: app(out, n, &p, "unroll(%s)", NM(st->loop)); break;
    case TIR_SCHED_PARALLEL: app(out, n, &p, "parallel(%s)", NM(st->loop)); break;
    case TIR_SCHED_BIND:
      app(out, n, &p, "bind(%s, %s)", NM(st->loop), tag_name(st->tag));
      break;
    case TIR_SCHED_CACHE_READ:
    case TIR_SCHED_CACHE_WRITE:
      app(out, n, &p, "%s(%s, %s, %s)",
          st->kind == TIR_SCHED_CACHE_READ ? "cache_read" : "cache_write", NM(st->buffer),
          NM(st->loop), tir_sch_scope_name(st->scope));
      break;
    case TIR_SCHED_COMPUTE_INLINE: app(out, n, &p, "compute_inline(%s)", NM(st->buffer)); break;
    case TIR_SCHED_COMPUTE_AT:
      app(out, n, &p, "compute_at(%s, %s)", NM(st->buffer), NM(st->loop));
      break;
    default: app(out, n, &p, "step kind %d", (int)st->kind); break;
  }
}

void tir_schedule_print(const tir_schedule_t* s, FILE* out) {
  if (!s) return;
  char buf[1024];
  for (int32_t i = 0; i < s->n; ++i) {
    step_str(&s->steps[i], buf, sizeof(buf));
    fprintf(out, "%s;\n", buf);
  }
}

/* ==== apply ============================================================== */

static kiln_status_t apply_step(tir_sch_state_t* S, const tir_sched_step_t* st) {
  switch (st->kind) {
    case TIR_SCHED_SPLIT: return tir_sch_apply_split(S, st->loop, st->factor);
    case TIR_SCHED_REORDER: return tir_sch_apply_reorder(S, st->n_loops, st->loops);
    case TIR_SCHED_TILE: return tir_sch_apply_tile(S, st->loop, st->loop2, st->factor, st->factor2);
    case TIR_SCHED_FUSE: return tir_sch_apply_fuse(S, st->loop, st->loop2);
    case TIR_SCHED_VECTORIZE:
      return tir_sch_apply_kind(S, st->loop, TIR_LOOP_VECTORIZED, TIR_TAG_NONE);
    case TIR_SCHED_UNROLL: return tir_sch_apply_kind(S, st->loop, TIR_LOOP_UNROLLED, TIR_TAG_NONE);
    case TIR_SCHED_PARALLEL:
      return tir_sch_apply_kind(S, st->loop, TIR_LOOP_PARALLEL, TIR_TAG_NONE);
    case TIR_SCHED_BIND:
      if (st->tag < TIR_BLOCK_X || st->tag > TIR_THREAD_Z)
        return kiln_make_status(KILN_INVALID_ARGUMENT,
                                "tag must be a block or thread id (block.x .. thread.z)");
      return tir_sch_apply_kind(S, st->loop, TIR_LOOP_BOUND, st->tag);
    case TIR_SCHED_CACHE_READ: return tir_sch_apply_cache(S, st, false);
    case TIR_SCHED_CACHE_WRITE: return tir_sch_apply_cache(S, st, true);
    case TIR_SCHED_COMPUTE_INLINE: return tir_sch_apply_inline(S, st->buffer);
    case TIR_SCHED_COMPUTE_AT: return tir_sch_apply_compute_at(S, st->buffer, st->loop);
  }
  return kiln_make_status(KILN_INVALID_ARGUMENT, "unknown step kind %d", (int)st->kind);
}

kiln_status_t tir_schedule_apply(tir_ctx_t* c, const tir_func_t* f, const tir_schedule_t* s,
                                 tir_func_t** out) {
  KILN_ASSERT(c && f && out);
  KILN_RETURN_IF_ERROR(tir_ctx_status(c), "scheduling kernel '%s'", f->name);
  tir_sch_state_t S = {c, f, f->body};
  char desc[1024];
  for (int32_t i = 0; s && i < s->n; ++i) {
    const tir_sched_step_t* st = &s->steps[i];
    kiln_status_t e = apply_step(&S, st);
    if (!e && !S.body && !c->oom) S.body = tir_sch_empty(c);
    if (!e) e = tir_ctx_status(c);
    if (e) {
      step_str(st, desc, sizeof(desc));
      return kiln_status_annotate(e, "schedule step %d %s", (int)i, desc);
    }
  }
  tir_func_t* nf = tir_func(c, f->name, f->n_params, f->params, S.body);
#if KILN_SCHED_SIMPLIFY
  if (nf) nf = tir_simplify_func(c, nf);
#endif
  KILN_RETURN_IF_ERROR(tir_ctx_status(c), "scheduling kernel '%s'", f->name);
  if (!nf) return kiln_make_status(KILN_INTERNAL, "scheduling kernel '%s' produced no kernel",
                                   f->name);
  *out = nf;
  return NULL;
}
