/* Tensor-IR node builders. Every node lives in the ctx arena; a failed
 * allocation marks the ctx and makes builders return NULL, so lowering code
 * can build whole trees and check tir_ctx_status() once. */
#include "ir/tir.h"
#include "ir/tir_visit.h"

#include <string.h>

void tir_ctx_init(tir_ctx_t* c, kiln_allocator_t allocator) {
  memset(c, 0, sizeof(*c));
  kiln_arena_init(&c->arena, allocator);
}

void tir_ctx_deinit(tir_ctx_t* c) { kiln_arena_deinit(&c->arena); }

kiln_status_t tir_ctx_status(const tir_ctx_t* c) {
  if (c->too_large)
    return kiln_make_status(KILN_LIMIT_EXCEEDED, "tensor IR buffer '%s': its byte size overflows int64",
                            c->too_large);
  return c->oom ? kiln_make_status(KILN_OUT_OF_MEMORY, "out of memory building tensor IR")
                : NULL;
}

static void* alloc(tir_ctx_t* c, size_t n) {
  void* p = kiln_arena_alloc(&c->arena, n);
  if (!p) c->oom = true;
  return p;
}

tir_buffer_t* tir_buffer(tir_ctx_t* c, const char* name, kiln_dtype_t dtype, int32_t rank,
                         const int64_t* shape, tir_scope_t scope) {
  KILN_ASSERT(rank >= 0 && rank <= KILN_MAX_RANK);
  tir_buffer_t* b = alloc(c, sizeof(*b));
  char* nm = kiln_arena_strndup(&c->arena, name ? name : "buf", name ? strlen(name) : 3);
  if (!b || !nm) {
    c->oom = true;
    return NULL;
  }
  b->id = c->next_buffer_id++;
  b->name = nm;
  b->dtype = dtype;
  b->rank = rank;
  b->scope = scope;
  int64_t st = 1;
  for (int32_t i = rank - 1; i >= 0; --i) {
    b->shape[i] = shape[i];
    b->strides[i] = st;
    if (__builtin_mul_overflow(st, shape[i] > 0 ? shape[i] : 1, &st)) st = INT64_MAX;
  }
  /* Every index expression and byte offset over the buffer is int64
   * arithmetic: a buffer whose bytes do not fit would overflow them. */
  int64_t bytes;
  if (st == INT64_MAX || __builtin_mul_overflow(st, (int64_t)kiln_dtype_size(dtype), &bytes)) {
    if (!c->too_large) c->too_large = nm;
    c->oom = true;
    return NULL;
  }
  return b;
}

uint64_t tir_buffer_span_bytes(const tir_buffer_t* b) {
  int64_t span = 1;
  for (int32_t k = 0; k < b->rank; ++k) {
    if (b->shape[k] <= 0) return 0;
    int64_t st = b->strides[k] < 0 ? -b->strides[k] : b->strides[k];
    span += (b->shape[k] - 1) * st;
  }
  return (uint64_t)span * kiln_dtype_size(b->dtype);
}

int64_t tir_buffer_numel(const tir_buffer_t* b) {
  int64_t n = 1;
  for (int32_t i = 0; i < b->rank; ++i) n *= b->shape[i];
  return n;
}

tir_var_t* tir_var(tir_ctx_t* c, const char* name) {
  tir_var_t* v = alloc(c, sizeof(*v));
  char* nm = kiln_arena_strndup(&c->arena, name ? name : "v", name ? strlen(name) : 1);
  if (!v || !nm) {
    c->oom = true;
    return NULL;
  }
  v->id = c->next_var_id++;
  v->name = nm;
  return v;
}

static tir_expr_t* new_expr(tir_ctx_t* c, tir_expr_kind_t k, kiln_dtype_t t) {
  tir_expr_t* e = alloc(c, sizeof(*e));
  if (!e) return NULL;
  e->kind = k;
  e->dtype = t;
  return e;
}

const tir_expr_t* tir_int(tir_ctx_t* c, int64_t v) {
  tir_expr_t* e = new_expr(c, TIR_INT, KILN_DTYPE_I64);
  if (e) e->u.i = v;
  return e;
}

const tir_expr_t* tir_const(tir_ctx_t* c, kiln_dtype_t t, double v) {
  tir_expr_t* e;
  if (kiln_dtype_is_float(t)) {
    e = new_expr(c, TIR_FLOAT, t);
    if (e) e->u.f = v;
  } else {
    e = new_expr(c, TIR_INT, t);
    if (e) e->u.i = t == KILN_DTYPE_BOOL ? (v != 0.0) : (int64_t)v;
  }
  return e;
}

const tir_expr_t* tir_ref(tir_ctx_t* c, const tir_var_t* v) {
  if (!v) return NULL;
  tir_expr_t* e = new_expr(c, TIR_VARREF, KILN_DTYPE_I64);
  if (e) e->u.var = v;
  return e;
}

const tir_expr_t* tir_bin(tir_ctx_t* c, tir_binop_t op, const tir_expr_t* a, const tir_expr_t* b) {
  if (!a || !b) return NULL;
  kiln_dtype_t t = a->dtype;
  if (op >= TIR_EQ && op <= TIR_OR) t = KILN_DTYPE_BOOL;
  tir_expr_t* e = new_expr(c, TIR_BINARY, t);
  if (!e) return NULL;
  e->u.bin.op = op;
  e->u.bin.a = a;
  e->u.bin.b = b;
  return e;
}

const tir_expr_t* tir_add(tir_ctx_t* c, const tir_expr_t* a, const tir_expr_t* b) {
  return tir_bin(c, TIR_ADD, a, b);
}
const tir_expr_t* tir_sub(tir_ctx_t* c, const tir_expr_t* a, const tir_expr_t* b) {
  return tir_bin(c, TIR_SUB, a, b);
}
const tir_expr_t* tir_mul(tir_ctx_t* c, const tir_expr_t* a, const tir_expr_t* b) {
  return tir_bin(c, TIR_MUL, a, b);
}

const tir_expr_t* tir_select(tir_ctx_t* c, const tir_expr_t* cond, const tir_expr_t* t,
                             const tir_expr_t* f) {
  if (!cond || !t || !f) return NULL;
  tir_expr_t* e = new_expr(c, TIR_SELECT, t->dtype);
  if (!e) return NULL;
  e->u.sel.cond = cond;
  e->u.sel.t = t;
  e->u.sel.f = f;
  return e;
}

static const tir_expr_t* const* copy_idx(tir_ctx_t* c, int32_t n, const tir_expr_t* const* idx) {
  const tir_expr_t** v = alloc(c, sizeof(*v) * (size_t)(n ? n : 1));
  if (!v) return NULL;
  for (int32_t i = 0; i < n; ++i) {
    if (!idx[i]) return NULL;
    v[i] = idx[i];
  }
  return v;
}

const tir_expr_t* tir_load(tir_ctx_t* c, const tir_buffer_t* buf, const tir_expr_t* const* idx) {
  if (!buf) return NULL;
  const tir_expr_t* const* v = copy_idx(c, buf->rank, idx);
  if (!v) return NULL;
  tir_expr_t* e = new_expr(c, TIR_LOAD, buf->dtype);
  if (!e) return NULL;
  e->u.load.buf = buf;
  e->u.load.idx = v;
  return e;
}

const tir_expr_t* tir_cast(tir_ctx_t* c, kiln_dtype_t t, const tir_expr_t* v) {
  if (!v) return NULL;
  if (v->dtype == t) return v;
  tir_expr_t* e = new_expr(c, TIR_CAST, t);
  if (e) e->u.cast.value = v;
  return e;
}

const tir_expr_t* tir_call(tir_ctx_t* c, tir_intrin_t fn, int32_t n, const tir_expr_t* a0,
                           const tir_expr_t* a1, const tir_expr_t* a2) {
  KILN_ASSERT(n >= 1 && n <= 3);
  if (!a0 || (n > 1 && !a1) || (n > 2 && !a2)) return NULL;
  tir_expr_t* e = new_expr(c, TIR_CALL, fn == TIR_NOT        ? KILN_DTYPE_BOOL
                                         : fn == TIR_WIDEN_I8X2 ? KILN_DTYPE_I32
                                         : fn == TIR_F8_DECODE  ? KILN_DTYPE_F32
                                         : fn == TIR_F8_ENCODE  ? KILN_DTYPE_I32
                                                                : a0->dtype);
  if (!e) return NULL;
  e->u.call.fn = fn;
  e->u.call.n = n;
  e->u.call.args[0] = a0;
  e->u.call.args[1] = n > 1 ? a1 : NULL;
  e->u.call.args[2] = n > 2 ? a2 : NULL;
  return e;
}

static tir_stmt_t* new_stmt(tir_ctx_t* c, tir_stmt_kind_t k) {
  tir_stmt_t* s = alloc(c, sizeof(*s));
  if (s) s->kind = k;
  return s;
}

const tir_stmt_t* tir_for(tir_ctx_t* c, const tir_var_t* v, int64_t extent, tir_loop_kind_t k,
                          const tir_stmt_t* body) {
  if (!v || !body) return NULL;
  tir_stmt_t* s = new_stmt(c, TIR_FOR);
  if (!s) return NULL;
  s->u.loop.var = v;
  s->u.loop.extent = extent;
  s->u.loop.kind = k;
  s->u.loop.tag = TIR_TAG_NONE;
  s->u.loop.dyn_extent = NULL;
  s->u.loop.body = body;
  return s;
}

const tir_stmt_t* tir_for_dyn(tir_ctx_t* c, const tir_var_t* v, int64_t max_extent,
                              const tir_expr_t* dyn_extent, tir_loop_kind_t k, const tir_stmt_t* body) {
  if (!dyn_extent) return NULL;
  tir_stmt_t* s = (tir_stmt_t*)tir_for(c, v, max_extent, k, body);
  if (s) s->u.loop.dyn_extent = dyn_extent;
  return s;
}

const tir_stmt_t* tir_for_bound(tir_ctx_t* c, const tir_var_t* v, int64_t extent,
                                tir_thread_tag_t tag, const tir_stmt_t* body) {
  tir_stmt_t* s = (tir_stmt_t*)tir_for(c, v, extent, TIR_LOOP_BOUND, body);
  if (s) s->u.loop.tag = tag;
  return s;
}

/* A TIR_STORE of |value| (or a TIR_PREFETCH, no value) at buf[idx]. */
static const tir_stmt_t* indexed(tir_ctx_t* c, tir_stmt_kind_t kind, const tir_buffer_t* buf,
                                 const tir_expr_t* const* idx, const tir_expr_t* value) {
  const tir_expr_t* const* v = copy_idx(c, buf->rank, idx);
  if (!v) return NULL;
  tir_stmt_t* s = new_stmt(c, kind);
  if (!s) return NULL;
  s->u.store.buf = buf;
  s->u.store.idx = v;
  s->u.store.value = value;
  return s;
}

const tir_stmt_t* tir_store(tir_ctx_t* c, const tir_buffer_t* buf, const tir_expr_t* const* idx,
                            const tir_expr_t* value) {
  if (!buf || !value) return NULL;
  return indexed(c, TIR_STORE, buf, idx, value);
}

const tir_stmt_t* tir_seq(tir_ctx_t* c, int32_t n, const tir_stmt_t* const* items) {
  int32_t k = 0;
  for (int32_t i = 0; i < n; ++i) k += items[i] != NULL;
  if (k == 1)
    for (int32_t i = 0; i < n; ++i)
      if (items[i]) return items[i];
  const tir_stmt_t** v = alloc(c, sizeof(*v) * (size_t)(k ? k : 1));
  tir_stmt_t* s = new_stmt(c, TIR_SEQ);
  if (!v || !s) return NULL;
  k = 0;
  for (int32_t i = 0; i < n; ++i)
    if (items[i]) v[k++] = items[i];
  s->u.seq.n = k;
  s->u.seq.items = v;
  return s;
}

const tir_stmt_t* tir_seq2(tir_ctx_t* c, const tir_stmt_t* a, const tir_stmt_t* b) {
  const tir_stmt_t* items[2] = {a, b};
  return tir_seq(c, 2, items);
}

const tir_stmt_t* tir_if(tir_ctx_t* c, const tir_expr_t* cond, const tir_stmt_t* then_s,
                         const tir_stmt_t* else_s) {
  if (!cond || !then_s) return NULL;
  tir_stmt_t* s = new_stmt(c, TIR_IF);
  if (!s) return NULL;
  s->u.cond.cond = cond;
  s->u.cond.then_s = then_s;
  s->u.cond.else_s = else_s;
  return s;
}

const tir_stmt_t* tir_alloc(tir_ctx_t* c, const tir_buffer_t* buf, const tir_stmt_t* body) {
  if (!buf || !body) return NULL;
  tir_stmt_t* s = new_stmt(c, TIR_ALLOC);
  if (!s) return NULL;
  s->u.alloc.buf = buf;
  s->u.alloc.body = body;
  return s;
}

const tir_stmt_t* tir_barrier(tir_ctx_t* c) { return new_stmt(c, TIR_BARRIER); }

const tir_stmt_t* tir_prefetch(tir_ctx_t* c, const tir_buffer_t* buf, const tir_expr_t* const* idx) {
  return buf ? indexed(c, TIR_PREFETCH, buf, idx, NULL) : NULL;
}

tir_func_t* tir_func(tir_ctx_t* c, const char* name, int32_t n_params,
                     const tir_buffer_t* const* params, const tir_stmt_t* body) {
  if (!body) return NULL;
  tir_func_t* f = alloc(c, sizeof(*f));
  const tir_buffer_t** p = alloc(c, sizeof(*p) * (size_t)(n_params ? n_params : 1));
  char* nm = kiln_arena_strndup(&c->arena, name, strlen(name));
  if (!f || !p || !nm) {
    c->oom = true;
    return NULL;
  }
  for (int32_t i = 0; i < n_params; ++i) p[i] = params[i];
  f->name = nm;
  f->n_params = n_params;
  f->params = p;
  f->body = body;
  return f;
}

/* ---- buffer access scan ------------------------------------------------ */

typedef struct access_s {
  const tir_buffer_t* buf;
  int flags;
} access_t;

static bool access_stmt(tir_visitor_t* v, const tir_stmt_t* s) {
  access_t* a = v->user;
  if (s->kind == TIR_STORE && s->u.store.buf == a->buf) a->flags |= TIR_ACCESS_STORE;
  return true;
}

static bool access_expr(tir_visitor_t* v, const tir_expr_t* e) {
  access_t* a = v->user;
  if (e->kind == TIR_LOAD && e->u.load.buf == a->buf) a->flags |= TIR_ACCESS_LOAD;
  return true;
}

int tir_func_buffer_access(const tir_func_t* f, const tir_buffer_t* b) {
  if (!f) return 0;
  access_t a = {b, 0};
  tir_visitor_t v = {.user = &a, .stmt_pre = access_stmt, .expr_pre = access_expr};
  tir_visit_stmt(&v, f->body);
  return a.flags;
}
