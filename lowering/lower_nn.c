/* kiln lowering: the nn op family (Conv, ConvTranspose, MatMul, Gemm,
 * BatchNormalization, pools, Softmax/LogSoftmax/Hardmax, the normalisations
 * and the Reduce* / ArgMax / ArgMin reductions). This file holds the table
 * and the helpers the split files share (kernel builder, expressions,
 * constants, windows); the lowerings live in
 * lower_nn_{gemm,conv,pool,norm,reduce,argmax,groupnorm,axes_norm}.c.
 */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "ir/tir_visit.h"
#include "lowering/lower_nn_impl.h"
#include "lowering/plan.h"

/* The lowering table: op type and lowering function of each line of the
 * family's op list (ir/ops/nn.def, which also holds the schema). */
#define KILN_OP(type, stem, min_in, max_in, min_out, max_out, flops, pattern, tmpl, lower) \
  {type, lower},
const kiln_lower_entry_t kiln_lower_nn[] = {
#include "ir/ops/nn.def"
};
#undef KILN_OP
const size_t kiln_lower_nn_count = sizeof(kiln_lower_nn) / sizeof(kiln_lower_nn[0]);

/* ---- kernel builder ------------------------------------------------------ */

void nn_kb_init(nn_kb_t* kb, kiln_lower_ctx_t* ctx) {
  memset(kb, 0, sizeof(*kb));
  kb->ctx = ctx;
  kb->t = ctx->tir;
  kb->sched = tir_schedule_new(kb->t);
}

tir_var_t* nn_var(nn_kb_t* kb, const char* base) {
  int32_t i = 0;
  for (; i < kb->n_names; ++i)
    if (!strcmp(kb->names[i], base)) break;
  if (i == kb->n_names) {
    if (kb->n_names < NN_MAX_NAMES) {
      kb->names[kb->n_names] = base;
      kb->counts[kb->n_names++] = 1;
      return tir_var(kb->t, base);
    }
    i = -1;
  }
  /* Seen before (or the table is full): a numbered name; names of the
   * form base_N are never used as bases, so these cannot collide. */
  int32_t n = i >= 0 ? kb->counts[i]++ : 1000000 + kb->extra++;
  char buf[96];
  snprintf(buf, sizeof buf, "%s_%d", base, (int)n);
  return tir_var(kb->t, buf);
}

void nn_vectorize(nn_kb_t* kb, const tir_var_t* v) {
  if (kb->sched && v) tir_sched_vectorize(kb->t, kb->sched, v->name);
}
void nn_unroll(nn_kb_t* kb, const tir_var_t* v) {
  if (kb->sched && v) tir_sched_unroll(kb->t, kb->sched, v->name);
}
void nn_parallel(nn_kb_t* kb, const tir_var_t* v) {
  if (kb->sched && v) tir_sched_parallel(kb->t, kb->sched, v->name);
}

const tir_stmt_t* nn_for(nn_kb_t* kb, const tir_var_t* v, int64_t extent,
                         const tir_stmt_t* body) {
  return tir_for(kb->t, v, extent, TIR_LOOP_SERIAL, body);
}

/* Parameter collection: every GLOBAL buffer the kernel touches. */
typedef struct params_s {
  const tir_buffer_t* v[64];
  int32_t n;
  bool overflow;
} params_t;

static void add_param(params_t* p, const tir_buffer_t* b) {
  if (!b || b->scope != TIR_SCOPE_GLOBAL) return;
  for (int32_t i = 0; i < p->n; ++i)
    if (p->v[i] == b) return;
  if (p->n == 64) {
    p->overflow = true;
    return;
  }
  p->v[p->n++] = b;
}

static bool param_expr(tir_visitor_t* v, const tir_expr_t* e) {
  if (e->kind == TIR_LOAD) add_param(v->user, e->u.load.buf);
  return true;
}

static bool param_stmt(tir_visitor_t* v, const tir_stmt_t* s) {
  if (s->kind == TIR_STORE) add_param(v->user, s->u.store.buf);
  return true;
}

kiln_status_t nn_emit(nn_kb_t* kb, const tir_stmt_t* body) {
  kiln_lower_ctx_t* ctx = kb->ctx;
  KILN_RETURN_IF_ERROR(tir_ctx_status(kb->t));
  if (!body) return kiln_make_status(KILN_INTERNAL, "%s: empty kernel", ctx->node->op_type);
  params_t seen = {.n = 0};
  tir_visitor_t v = {.user = &seen, .stmt_pre = param_stmt, .expr_pre = param_expr};
  tir_visit_stmt(&v, body);
  if (seen.overflow) {
    return kiln_make_status(KILN_INTERNAL, "%s: kernel touches too many buffers",
                            ctx->node->op_type);
  }
  const tir_buffer_t* order[64];
  int32_t n = 0;
  bool used[64] = {false};
  /* Inputs in input order, then outputs, then temps/consts. */
  for (int32_t pass = 0; pass < 2; ++pass) {
    int32_t cnt = pass == 0 ? ctx->n_in : ctx->n_out;
    const tir_buffer_t* const* list = pass == 0 ? ctx->in : ctx->out;
    for (int32_t i = 0; i < cnt; ++i) {
      for (int32_t j = 0; j < seen.n; ++j) {
        if (!used[j] && list[i] && seen.v[j] == list[i]) {
          used[j] = true;
          order[n++] = seen.v[j];
        }
      }
    }
  }
  for (int32_t j = 0; j < seen.n; ++j)
    if (!used[j]) order[n++] = seen.v[j];
  const char* name = kiln_lower_kernel_name(ctx);
  if (name && kb->name_suffix) {
    char buf[128];
    snprintf(buf, sizeof buf, "%s%s", name, kb->name_suffix);
    name = kiln_arena_strndup(&kb->t->arena, buf, strlen(buf));
    kb->name_suffix = NULL;
  }
  if (!name) return kiln_make_status(KILN_OUT_OF_MEMORY, "kernel name");
  tir_func_t* f = tir_func(kb->t, name, n, order, body);
  KILN_RETURN_IF_ERROR(tir_ctx_status(kb->t));
  kiln_status_t st = kiln_lower_emit(ctx, f, kb->sched);
  /* Fresh state for the next kernel of this node. */
  kb->n_names = 0;
  kb->sched = tir_schedule_new(kb->t);
  return st;
}

/* ---- expressions --------------------------------------------------------- */

const tir_expr_t* nn_i(nn_kb_t* kb, int64_t v) { return tir_int(kb->t, v); }
const tir_expr_t* nn_v(nn_kb_t* kb, const tir_var_t* v) { return tir_ref(kb->t, v); }

static bool is_int(const tir_expr_t* e, int64_t* v) {
  if (e && e->kind == TIR_INT && e->dtype == KILN_DTYPE_I64) {
    *v = e->u.i;
    return true;
  }
  return false;
}

const tir_expr_t* nn_add(nn_kb_t* kb, const tir_expr_t* a, const tir_expr_t* b) {
  int64_t x, y;
  bool ca = is_int(a, &x), cb = is_int(b, &y);
  if (ca && cb) return nn_i(kb, x + y);
  if (ca && x == 0) return b;
  if (cb && y == 0) return a;
  return tir_add(kb->t, a, b);
}

const tir_expr_t* nn_mul(nn_kb_t* kb, const tir_expr_t* a, const tir_expr_t* b) {
  int64_t x, y;
  bool ca = is_int(a, &x), cb = is_int(b, &y);
  if (ca && cb) return nn_i(kb, x * y);
  if ((ca && x == 0) || (cb && y == 0)) return nn_i(kb, 0);
  if (ca && x == 1) return b;
  if (cb && y == 1) return a;
  return tir_mul(kb->t, a, b);
}

const tir_expr_t* nn_addc(nn_kb_t* kb, const tir_expr_t* a, int64_t c) {
  return nn_add(kb, a, nn_i(kb, c));
}
const tir_expr_t* nn_mulc(nn_kb_t* kb, const tir_expr_t* a, int64_t c) {
  return nn_mul(kb, a, nn_i(kb, c));
}

const tir_expr_t* nn_divc(nn_kb_t* kb, const tir_expr_t* a, int64_t c) {
  int64_t x;
  if (c == 1) return a;
  if (is_int(a, &x)) return nn_i(kb, x >= 0 ? x / c : -((-x + c - 1) / c));
  return tir_bin(kb->t, TIR_FLOORDIV, a, nn_i(kb, c));
}

const tir_expr_t* nn_modc(nn_kb_t* kb, const tir_expr_t* a, int64_t c) {
  int64_t x;
  if (c == 1) return nn_i(kb, 0);
  if (is_int(a, &x)) return nn_i(kb, ((x % c) + c) % c);
  return tir_bin(kb->t, TIR_FLOORMOD, a, nn_i(kb, c));
}

const tir_expr_t* nn_clamp(nn_kb_t* kb, const tir_expr_t* a, int64_t lo, int64_t hi) {
  int64_t x;
  if (is_int(a, &x)) return nn_i(kb, x < lo ? lo : x > hi ? hi : x);
  return tir_bin(kb->t, TIR_MIN, tir_bin(kb->t, TIR_MAX, a, nn_i(kb, lo)), nn_i(kb, hi));
}

const tir_expr_t* nn_sqdev(nn_kb_t* kb, const tir_expr_t* x, const tir_buffer_t* mean) {
  const tir_expr_t* d = tir_sub(kb->t, x, tir_load(kb->t, mean, NN_IDX(nn_i(kb, 0))));
  return tir_mul(kb->t, d, d);
}

int32_t nn_dim_runs(const tir_buffer_t* x, const bool* red, int64_t* gdim, bool* gred) {
  int32_t ng = 0;
  for (int32_t d = 0; d < x->rank; ++d) {
    if (x->shape[d] == 1) continue;
    if (ng > 0 && gred[ng - 1] == red[d]) {
      gdim[ng - 1] *= x->shape[d];
    } else {
      gdim[ng] = x->shape[d];
      gred[ng++] = red[d];
    }
  }
  if (ng == 0) gdim[ng] = 1, gred[ng++] = false;
  return ng;
}

const tir_expr_t* nn_f(nn_kb_t* kb, double v) { return tir_const(kb->t, KILN_DTYPE_F32, v); }

const tir_expr_t* nn_ldf(nn_kb_t* kb, const tir_buffer_t* b, const tir_expr_t* const* idx) {
  return tir_cast(kb->t, KILN_DTYPE_F32, tir_load(kb->t, b, idx));
}

const tir_stmt_t* nn_stf(nn_kb_t* kb, const tir_buffer_t* b, const tir_expr_t* const* idx,
                         const tir_expr_t* v) {
  return tir_store(kb->t, b, idx, tir_cast(kb->t, b->dtype, v));
}

/* ---- constants ----------------------------------------------------------- */

bool nn_is_const(const kiln_lower_ctx_t* ctx, int32_t i) {
  if (i >= ctx->n_in || !ctx->in_tensor[i]) return false;
  const kiln_tensor_t* t = ctx->in_tensor[i];
  return (t->flags & KILN_TENSOR_CONST) && t->value.data;
}

kiln_status_t nn_view(kiln_lower_ctx_t* ctx, const tir_buffer_t* base, const char* name,
                      int32_t rank, const int64_t* shape, const tir_buffer_t** out) {
  return nn_view_typed(ctx, base, name, base->dtype, rank, shape, out);
}

kiln_status_t nn_view_typed(kiln_lower_ctx_t* ctx, const tir_buffer_t* base, const char* name, kiln_dtype_t dtype,
                            int32_t rank, const int64_t* shape, const tir_buffer_t** out) {
  kiln_plan_t* p = ctx->plan;
  int32_t bi = -1;
  for (int32_t i = p->n_buffers - 1; i >= 0 && bi < 0; --i)
    if (p->buffers[i].buf == base) bi = i;
  int64_t n = 1;
  for (int32_t i = 0; i < rank; ++i) n *= shape[i];
  const uint64_t bytes = (uint64_t)tir_buffer_numel(base) * kiln_dtype_size(base->dtype);
  if (bi < 0 || (uint64_t)n * kiln_dtype_size(dtype) != bytes) {
    return kiln_make_status(KILN_INTERNAL, "%s: view '%s' of buffer '%s' does not fit",
                            ctx->node->op_type, name, base->name);
  }
  KILN_RETURN_IF_ERROR(kiln_lower_temp(ctx, name, dtype, rank, shape, out));
  for (int32_t i = p->n_buffers - 1; i >= 0; --i) {
    if (p->buffers[i].buf == *out) {
      p->buffers[i].alias_of = bi;
      return NULL;
    }
  }
  return kiln_make_status(KILN_INTERNAL, "%s: view '%s' not in the plan", ctx->node->op_type,
                          name);
}

kiln_status_t nn_alloc_f32(int64_t n, const char* what, float** out) {
  *out = NULL;
  if (n < 0 || (uint64_t)n > SIZE_MAX / sizeof(float) / 2) {
    return kiln_make_status(KILN_LIMIT_EXCEEDED, "%s: %lld elements is too many", what,
                            (long long)n);
  }
  return kiln_allocator_malloc(kiln_allocator_system(), (size_t)(n ? n : 1) * sizeof(float),
                               what, (void**)out);
}

kiln_status_t nn_const_input_f32(kiln_lower_ctx_t* ctx, int32_t i, float** out) {
  *out = NULL;
  if (!nn_is_const(ctx, i)) return NULL;
  const kiln_array_t* a = &ctx->in_tensor[i]->value;
  int64_t n = kiln_array_numel(a);
  float* f;
  KILN_RETURN_IF_ERROR(nn_alloc_f32(n, "constant input copy", &f));
  if (a->dtype == KILN_DTYPE_F32) {
    memcpy(f, a->data, sizeof(float) * (size_t)n);
  } else if (a->dtype == KILN_DTYPE_F16) {
    const uint16_t* h = (const uint16_t*)a->data;
    for (int64_t k = 0; k < n; ++k) f[k] = kiln_f16_to_f32(h[k]);
  } else {
    for (int64_t k = 0; k < n; ++k) f[k] = (float)kiln_load_f64(a->dtype, a->data, (size_t)k);
  }
  *out = f;
  return NULL;
}

kiln_status_t nn_const_f32(kiln_lower_ctx_t* ctx, const char* name, int32_t rank,
                           const int64_t* shape, float* data, const tir_buffer_t** out) {
  return nn_const_typed(ctx, name, KILN_DTYPE_F32, rank, shape, data, out);
}

kiln_status_t nn_const_typed(kiln_lower_ctx_t* ctx, const char* name, kiln_dtype_t dtype, int32_t rank,
                             const int64_t* shape, void* data, const tir_buffer_t** out) {
  kiln_array_t a;
  memset(&a, 0, sizeof a);
  a.dtype = dtype;
  a.shape = kiln_shape_make(rank, shape);
  a.data = data;
  a.nbytes = kiln_dtype_size(dtype) * (size_t)kiln_shape_count(&a.shape);
  kiln_status_t st = kiln_lower_const(ctx, name, &a, out);
  /* The plan owns the data once it accepted it (it zeroes a.data). */
  if (st && a.data) kiln_allocator_free(kiln_allocator_system(), a.data);
  return st;
}

/* ---- windows ------------------------------------------------------------- */

void nn_axis_interior(const nn_axis_t* a, int64_t* lo, int64_t* hi) {
  /* o*s - p >= 0 and o*s + (k-1)*d - p <= in - 1. */
  int64_t l = a->p <= 0 ? 0 : (a->p + a->s - 1) / a->s;
  int64_t top = a->in - 1 - (a->k - 1) * a->d + a->p;
  int64_t h = top < 0 ? 0 : top / a->s + 1;
  if (h > a->out) h = a->out;
  if (l > h) l = h;
  *lo = l;
  *hi = h;
}

kiln_status_t nn_window(const kiln_node_t* node, const char* op, int32_t nsp,
                        const int64_t* in, const int64_t* out, const int64_t* kernel,
                        bool ceil_mode, nn_axis_t* axes) {
  kiln_nn_window_t w;
  KILN_RETURN_IF_ERROR(kiln_nn_window_parse(node, op, nsp, kernel == NULL, &w));
  for (int32_t i = 0; i < nsp; ++i) {
    if (kernel) w.kernel[i] = kernel[i];
    int64_t o;
    KILN_RETURN_IF_ERROR(kiln_nn_window_out(&w, op, i, in[i], ceil_mode, &o));
    if (o != out[i]) {
      return kiln_make_status(KILN_INTERNAL,
                              "%s: spatial dim %d: window gives %lld outputs, graph has %lld", op,
                              (int)i, (long long)o, (long long)out[i]);
    }
    axes[i].in = in[i];
    axes[i].out = out[i];
    axes[i].k = w.kernel[i];
    axes[i].s = w.stride[i];
    axes[i].d = w.dilation[i];
    axes[i].p = w.pad_begin[i];
  }
  return NULL;
}

/* Loops over [start, start + len) cut into pieces of 16k, 8 and 4 lanes
 * (VECTORIZED: the printer takes the widest vector dividing the extent)
 * and a scalar rest; |fn| builds the body for position expression o. */
const tir_stmt_t* nn_vec_run(nn_kb_t* kb, int64_t start, int64_t len, bool vec, nn_seg_fn fn,
                              void* u) {
  const tir_stmt_t* out = NULL;
  int64_t o0 = start, left = len;
  for (int p = 0; p < 4 && left > 0; ++p) {
    int64_t w = !vec ? (p == 3 ? left : 0)
                : p == 0 ? left / 16 * 16 : p == 1 ? left / 8 * 8 : p == 2 ? left / 4 * 4 : left;
    if (w <= 0) continue;
    tir_var_t* v = nn_var(kb, "ow");
    out = tir_seq2(kb->t, out, nn_for(kb, v, w, fn(kb, u, nn_addc(kb, nn_v(kb, v), o0))));
    if (p < 3) nn_vectorize(kb, v);
    o0 += w, left -= w;
  }
  return out;
}
