/* One visitor and one mutator for the tensor IR (ir/tir.h).
 *
 * Passes that look at every node (collect buffers, count loads, test a
 * property) fill a tir_visitor_t with the callbacks they need and call
 * tir_visit_stmt / tir_visit_expr; passes that rewrite nodes fill a
 * tir_mutator_t and call tir_mutate_stmt / tir_mutate_expr. Both are plain
 * structs of optional function pointers plus a user pointer, so a pass keeps
 * its state in its own struct and reaches it through ->user.
 *
 * Children are visited in one fixed order, which passes that collect into
 * lists rely on:
 *   FOR: body              STORE: idx[0..rank), then value
 *   SEQ: items in order    IF: cond, then_s, else_s (when present)
 *   ALLOC: body            BARRIER: nothing
 *   BINARY: a, b           SELECT: cond, t, f
 *   LOAD: idx[0..rank)     CAST: value       CALL: args[0..n)
 * Statements reach their expressions only when an expression callback is
 * set, so a statement-only walk never descends into expressions.
 *
 * State scoped to a subtree (a loop's range, a guard's facts) is pushed in a
 * pre callback and popped in the post callback; or the pre callback walks
 * the child itself with the same visitor / mutator, around the change, and
 * returns false (visitor) or true with the rebuilt node (mutator).
 *
 * Example (count the loads of |b|):
 *   static bool on_expr(tir_visitor_t* v, const tir_expr_t* e) {
 *     if (e->kind == TIR_LOAD && e->u.load.buf == b) ++*(int*)v->user;
 *     return true;
 *   }
 *   int n = 0;
 *   tir_visitor_t v = {.user = &n, .expr_pre = on_expr};
 *   tir_visit_stmt(&v, body);
 *
 * Thread-compatible: a visitor or mutator is used by one thread at a time;
 * the trees it walks are immutable and may be shared.
 */
#ifndef KILN_IR_TIR_VISIT_H_
#define KILN_IR_TIR_VISIT_H_

#include "ir/tir.h"

#ifdef __cplusplus
extern "C" {
#endif

/* ---- visitor ------------------------------------------------------------ */

typedef struct tir_visitor_s tir_visitor_t;
struct tir_visitor_s {
  void* user;
  /* Called before a node's children. Return false to skip its children and
   * its post callback. NULL: always descend. */
  bool (*stmt_pre)(tir_visitor_t* v, const tir_stmt_t* s);
  /* Called after a node's children (not when pre skipped them). Loop-scoped
   * state pushed in stmt_pre(FOR) is popped here. NULL: nothing. */
  void (*stmt_post)(tir_visitor_t* v, const tir_stmt_t* s);
  bool (*expr_pre)(tir_visitor_t* v, const tir_expr_t* e);
  void (*expr_post)(tir_visitor_t* v, const tir_expr_t* e);
  /* A callback sets it to end the whole walk early (no further callbacks,
   * not even pending posts). The walk never clears it. */
  bool stop;
};

/* Walks |s| (or |e|) in the order above. NULL trees are skipped. */
void tir_visit_stmt(tir_visitor_t* v, const tir_stmt_t* s);
void tir_visit_expr(tir_visitor_t* v, const tir_expr_t* e);

/* ---- mutator ------------------------------------------------------------ */

typedef struct tir_mutator_s tir_mutator_t;
struct tir_mutator_s {
  tir_ctx_t* ctx; /* new nodes are allocated here */
  void* user;
  /* Called before a node's children. Return true when the callback handled
   * the node: *out is its result (NULL = failure), its children are not
   * visited and its post callback is not called. Return false to let the
   * mutator descend. NULL: always descend. */
  bool (*stmt_pre)(tir_mutator_t* m, const tir_stmt_t* s, const tir_stmt_t** out);
  bool (*expr_pre)(tir_mutator_t* m, const tir_expr_t* e, const tir_expr_t** out);
  /* Called with the node rebuilt over its mutated children (the original
   * node itself when no child changed); returns its replacement, |s| / |e|
   * to keep it, NULL on failure. NULL callback: keep it. */
  const tir_stmt_t* (*stmt_post)(tir_mutator_t* m, const tir_stmt_t* s);
  const tir_expr_t* (*expr_post)(tir_mutator_t* m, const tir_expr_t* e);
};

/* Rebuilds |s| (or |e|) bottom-up through the callbacks. Only the spine
 * above a change is rebuilt: unchanged subtrees are shared with the input,
 * and an unchanged tree comes back as the same pointer. Returns NULL when
 * the input is NULL, a callback failed, or the ctx ran out of memory (then
 * ctx->oom is set). */
const tir_stmt_t* tir_mutate_stmt(tir_mutator_t* m, const tir_stmt_t* s);
const tir_expr_t* tir_mutate_expr(tir_mutator_t* m, const tir_expr_t* e);

/* |loop| (a TIR_FOR) with |body| instead of its own, keeping its variable,
 * extent, kind and thread tag; |loop| itself when |body| is its body. NULL
 * when |body| is NULL or on OOM. */
const tir_stmt_t* tir_for_with_body(tir_ctx_t* c, const tir_stmt_t* loop, const tir_stmt_t* body);

#ifdef __cplusplus
}
#endif
#endif /* KILN_IR_TIR_VISIT_H_ */
