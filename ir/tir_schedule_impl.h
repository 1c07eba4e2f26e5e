/* Private to the schedule primitives (ir/tir_schedule*.c): the state they
 * share, the tree utilities, the ancestor-path visitor, loop and buffer
 * lookups, the one-buffer mapper, access collection and region analysis.
 * NOT part of the schedule's contract (ir/tir_schedule.h).
 *
 * Layout: tir_schedule.c holds the step list, its printing and the apply
 * driver; tir_schedule_region.c the shared analysis below; the primitives
 * live by family in tir_schedule_loops.c (split, reorder, tile, fuse, loop
 * kinds and binding), tir_schedule_cache.c (cache_read, cache_write) and
 * tir_schedule_compute.c (compute_inline, compute_at). Each primitive
 * (tir_sch_apply_*) rewrites S->body and returns a status naming its
 * reason; the driver prefixes the step.
 *
 * Nodes come from the schedule's tir ctx; functions that build trees return
 * NULL on OOM with ctx->oom set. Thread-compatible, like the IR.
 */
#ifndef KILN_IR_TIR_SCHEDULE_IMPL_H_
#define KILN_IR_TIR_SCHEDULE_IMPL_H_

#include <stdio.h>
#include <string.h>

#include "ir/tir_analysis.h"
#include "ir/tir_schedule.h"
#include "ir/tir_visit.h"

#define TIR_SCH_MAX_DEPTH 256

/* ---- visitor with the path of ancestors ---- */

typedef struct {
  int32_t n;
  const tir_stmt_t* s[TIR_SCH_MAX_DEPTH];
  int32_t child[TIR_SCH_MAX_DEPTH]; /* index of s[i] among the children of s[i-1] */
} tir_sch_path_t;

typedef struct tir_sch_visitor_s tir_sch_visitor_t;
struct tir_sch_visitor_s {
  tir_sch_path_t p;
  /* Pre-order; the node is p.s[p.n-1]. Return false to skip its children. */
  bool (*on_stmt)(tir_sch_visitor_t* v, const tir_stmt_t* s);
  /* Every load, nested ones included; p.s[p.n-1] is the statement holding it. */
  void (*on_load)(tir_sch_visitor_t* v, const tir_expr_t* e);
  void* ud;
  bool too_deep;
};

/* ---- small sets and tables ---- */

typedef struct {
  tir_ctx_t* c;
  int32_t n, cap;
  const void** v;
  int64_t* ext; /* loop tables: extent of v[i] */
} tir_sch_list_t;

/* ---- scheduling state ---- */

typedef struct {
  tir_ctx_t* c;
  const tir_func_t* f;
  const tir_stmt_t* body;
} tir_sch_state_t;

typedef struct {
  const char* name;
  tir_sch_list_t found; /* distinct buffers with that name */
} tir_sch_find_buf_t;

/* ---- mapper for one buffer (on the tensor-IR mutator) ---- */

typedef struct tir_sch_mapper_s tir_sch_mapper_t;
struct tir_sch_mapper_s {
  tir_ctx_t* c;
  const tir_buffer_t* buf;
  /* Replacement of a load of |buf| given its (already mapped) indices. */
  const tir_expr_t* (*on_load)(tir_sch_mapper_t* m, const tir_expr_t* const* idx);
  /* Replacement of a store to |buf|; NULL callback keeps the store. */
  const tir_stmt_t* (*on_store)(tir_sch_mapper_t* m, const tir_expr_t* const* idx,
                                const tir_expr_t* value);
  bool unwrap_alloc; /* drop the tir_alloc of |buf| (keep its body) */
  void* ud;
};

/* ---- access collection for one buffer inside a subtree ---- */

typedef struct {
  const tir_expr_t* const* idx;
  bool store;
  bool under_if; /* store: an if (or a loop that may not run) lies between
                     * the subtree root and it */
  bool covered;  /* load: an earlier statement of an enclosing seq stores
                     * the same element (same index expressions) */
} tir_sch_access_t;

typedef struct {
  tir_ctx_t* c;
  const tir_buffer_t* buf;
  int32_t n, cap;
  tir_sch_access_t* a;
  bool allocated_inside; /* the tir_alloc of |buf| is inside the subtree */
} tir_sch_accesses_t;

/* ---- regions ---- */

typedef struct {
  bool full;      /* whole buffer dim: local index = original index */
  tir_lin_t base; /* terms fixed for one iteration of the loop */
  int64_t lo, hi; /* range of the rest */
} tir_sch_dimreg_t;

typedef struct {
  int32_t n_acc;
  tir_sch_dimreg_t d[KILN_MAX_RANK];
  int64_t ext[KILN_MAX_RANK];
} tir_sch_region_t;

/* ---- tir_schedule.c ---- */

/* |str| copied into the ctx arena (NULL stays NULL). */
const char* tir_sch_strdup(tir_ctx_t* c, const char* str);
/* "global", "local", "private". */
const char* tir_sch_scope_name(tir_scope_t s);

/* ---- tir_schedule_region.c: trees, lookups, mapper, accesses, regions ---- */

/* A loop of kind |k| (bound to |tag| when k is TIR_LOOP_BOUND). */
const tir_stmt_t* tir_sch_for(tir_ctx_t* c, const tir_var_t* v, int64_t extent, tir_loop_kind_t k,
                              tir_thread_tag_t tag, const tir_stmt_t* body);
/* Same loop (var, extent, kind, tag) around a new body. */
const tir_stmt_t* tir_sch_for_like(tir_ctx_t* c, const tir_stmt_t* l, const tir_stmt_t* body);
/* An empty sequence: a statement that does nothing. */
const tir_stmt_t* tir_sch_empty(tir_ctx_t* c);
/* Rebuilds |s| with the nodes tg[i] (by identity) replaced by rp[i]. A NULL
 * replacement deletes the node; loops, allocs and ifs left without a body
 * disappear with it. Returns NULL when everything is deleted (or on OOM:
 * callers check ctx->oom). */
const tir_stmt_t* tir_sch_rewrite(tir_ctx_t* c, const tir_stmt_t* s, int32_t n,
                                  const tir_stmt_t* const* tg, const tir_stmt_t* const* rp);
/* tir_sch_rewrite of one node. */
const tir_stmt_t* tir_sch_replace(tir_ctx_t* c, const tir_stmt_t* root, const tir_stmt_t* tg,
                                  const tir_stmt_t* rp);
/* Walks |root| pre-order with the path of ancestors in v->p (the tir_visit.h
 * visitor has no path: compute_at and the access collection need the
 * enclosing statements and child positions). LIMIT_EXCEEDED when the nest
 * is deeper than TIR_SCH_MAX_DEPTH. */
kiln_status_t tir_sch_visit(tir_sch_visitor_t* v, const tir_stmt_t* root);
/* Appends |p| (with extent |ext| for loop tables); marks the ctx on OOM. */
void tir_sch_list_push(tir_sch_list_t* l, const void* p, int64_t ext);
/* Index of |p| in |l|, -1 when absent. */
int32_t tir_sch_list_find(const tir_sch_list_t* l, const void* p);
/* Every loop variable bound in |root| with its extent. */
kiln_status_t tir_sch_collect_loops(tir_ctx_t* c, const tir_stmt_t* root, tir_sch_list_t* out);
/* Calls |fn| on every variable reference and load in |e| (a load before its
 * indices); stops and returns true as soon as |fn| does. */
bool tir_sch_expr_any(const tir_expr_t* e, bool (*fn)(const tir_expr_t* e, const void* ud),
                      const void* ud);
/* tir_sch_expr_any predicates: a reference to |var|; a load of |buf| (any
 * load when |buf| is NULL). */
bool tir_sch_is_var(const tir_expr_t* e, const void* var);
bool tir_sch_is_load(const tir_expr_t* e, const void* buf);
/* [lo, hi] of integer expression |e| with every loop var v of |t| in
 * [0, extent-1]. False when it cannot tell (unknown vars, unbounded...). */
bool tir_sch_bounds(const tir_sch_list_t* t, const tir_expr_t* e, int64_t* lo, int64_t* hi);
/* The affine form of |e| (tir_lin_collect); !a->ok when it did not fit. */
void tir_sch_lin_of(tir_lin_t* a, const tir_expr_t* e);
/* Splits |a| into the terms that use a loop of |inner| (or a load: those
 * values may change inside the loop) and the rest; the constant goes to
 * |in|. Zero terms are dropped. */
void tir_sch_lin_split(const tir_lin_t* a, const tir_sch_list_t* inner, tir_lin_t* out,
                       tir_lin_t* in);
/* Number of loops named |name|. */
int32_t tir_sch_count_loops(const tir_sch_state_t* S, const char* name);
/* The unique loop named |name|; |path| (optional) gets its ancestors, the
 * loop itself last. */
kiln_status_t tir_sch_find_loop(const tir_sch_state_t* S, const char* name, const tir_stmt_t** out,
                                tir_sch_path_t* path);
/* A new loop name must not collide with an existing one. */
kiln_status_t tir_sch_check_new_loop(const tir_sch_state_t* S, const char* name);
/* "<a><sep><b>" in the ctx arena (truncated at 511 bytes). */
const char* tir_sch_join(tir_ctx_t* c, const char* a, const char* sep, const char* b);
/* The distinct buffers named |name| (params, stores, loads, allocs). */
kiln_status_t tir_sch_count_buffers(const tir_sch_state_t* S, const char* name,
                                    tir_sch_find_buf_t* f);
/* The unique buffer named |name|. */
kiln_status_t tir_sch_find_buffer(const tir_sch_state_t* S, const char* name,
                                  const tir_buffer_t** out);
/* Rebuilds |s| through |m|'s callbacks. NULL only on OOM (the ctx is
 * marked). */
const tir_stmt_t* tir_sch_map_stmt(tir_sch_mapper_t* m, const tir_stmt_t* s);
/* The loads and stores of |buf| inside |root|, in walk order. */
kiln_status_t tir_sch_collect_accesses(tir_ctx_t* c, const tir_stmt_t* root,
                                       const tir_buffer_t* buf, tir_sch_accesses_t* out);
/* Adds one access (indices |idx|) to the region of |b| that one iteration
 * of the loop around |inner| touches; |loops| bounds the rest. */
void tir_sch_region_add(tir_sch_region_t* r, const tir_buffer_t* b, const tir_expr_t* const* idx,
                        const tir_sch_list_t* inner, const tir_sch_list_t* loops);
/* Sets the extents; dims as wide as the buffer become full. */
void tir_sch_region_finish(tir_sch_region_t* r, const tir_buffer_t* b);
/* The region of A->buf that one iteration of |loop| (a loop of S's body)
 * touches through the accesses |A| collected in it: |inner| gets the loops
 * inside |loop|, |loops| every loop of the body (both are used again to
 * index the staged region). */
kiln_status_t tir_sch_loop_region(const tir_sch_state_t* S, const tir_stmt_t* loop,
                                  const tir_sch_accesses_t* A, tir_sch_list_t* inner,
                                  tir_sch_list_t* loops, tir_sch_region_t* r);
/* Index into the staged region of an access with original index |e|. */
const tir_expr_t* tir_sch_region_local_index(tir_ctx_t* c, const tir_sch_dimreg_t* dr,
                                             const tir_expr_t* e, const tir_sch_list_t* inner);
/* Original index of region position |pos| (an expression). */
const tir_expr_t* tir_sch_region_source_index(tir_ctx_t* c, const tir_sch_dimreg_t* dr,
                                              const tir_expr_t* pos);
/* Conjunction of "0 <= e" / "e < limit" checks that |loops| cannot prove;
 * *cond stays as is when both hold. */
void tir_sch_range_guard(tir_ctx_t* c, const tir_sch_list_t* loops, const tir_expr_t* e,
                         int64_t limit, const tir_expr_t** cond);

/* ---- the primitives: tir_schedule_loops.c, _cache.c, _compute.c ---- */

/* Loop kinds after a split: threads and GPU ids stay on the outer loop, SIMD
 * lanes and unrolling on the inner one. */
kiln_status_t tir_sch_apply_split(tir_sch_state_t* S, const char* name, int64_t factor);
/* Listed loops take each other's places in their perfect nest (the first
 * listed goes to the outermost of their positions); unlisted loops between
 * them stay. Guards (ifs without else, left by split/fuse) inside the nest
 * are moved to just inside the innermost loop whose variable they use, which
 * keeps the same iterations executing. */
kiln_status_t tir_sch_apply_reorder(tir_sch_state_t* S, int32_t n, const char* const* names);
/* split both, then reorder to a.o, b.o, a.i, b.i. */
kiln_status_t tir_sch_apply_tile(tir_sch_state_t* S, const char* a, const char* b, int64_t fa,
                                 int64_t fb);
/* |b| must be |a|'s entire body; makes loop "a.b". */
kiln_status_t tir_sch_apply_fuse(tir_sch_state_t* S, const char* a, const char* b);
/* Sets the loop kind (vectorize, unroll, parallel) or binds it to |tag|. */
kiln_status_t tir_sch_apply_kind(tir_sch_state_t* S, const char* name, tir_loop_kind_t k,
                                 tir_thread_tag_t tag);

/* The staged region lives in a tir_alloc just inside |loop|: copy-in at the
 * top of the body (cache_read, and cache_write when needed), write-back at
 * the end (cache_write). LOCAL (work-group shared) copies get barriers so
 * that work-items see each other's copies and the next iteration does not
 * overwrite what others still read. */
kiln_status_t tir_sch_apply_cache(tir_sch_state_t* S, const tir_sched_step_t* st, bool write);

/* compute_inline and compute_at (ir/tir_schedule.h). */
kiln_status_t tir_sch_apply_inline(tir_sch_state_t* S, const char* bname);
kiln_status_t tir_sch_apply_compute_at(tir_sch_state_t* S, const char* bname, const char* lname);

/* ---- loops with a run-time trip count: tir_schedule_dyn.c ---- */

/* split of |L| (a tir_for_dyn loop) into full tiles ("L.o" dynamic, |ni|
 * static) and the remainder loop "L.r" (a copy of the body, its loops
 * renamed "<name>.L.r"). */
KILN_MUST_USE kiln_status_t tir_sch_split_dyn(tir_sch_state_t* S, const tir_stmt_t* L, const char* no, const char* ni,
                                int64_t factor);
/* Loop kind |k| for dynamic loop |L|, keeping its run-time count; refuses
 * vectorizing (split it first) and GPU ids. */
KILN_MUST_USE kiln_status_t tir_sch_dyn_kind(tir_sch_state_t* S, const tir_stmt_t* L, tir_loop_kind_t k);
/* Refuses a loop order (outermost first) that puts a dynamic loop outside
 * a loop whose variable its trip count reads. */
KILN_MUST_USE kiln_status_t tir_sch_dyn_order(const tir_stmt_t* const* order, int32_t m);

#endif /* KILN_IR_TIR_SCHEDULE_IMPL_H_ */
