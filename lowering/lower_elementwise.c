/* Lowering of the elementwise op family (ir/ops/elementwise*.c) to TIR, and
 * the nest/schedule helpers lower_tensor.c shares (lower_ew_impl.h).
 *
 * Every op becomes one loop nest over its output with one store per element
 * (Max/Min: one store per input, accumulating in the output). The value
 * expressions mirror the reference kernels operation by operation so the
 * compiled kernels give the same numbers:
 *   - floats compute in f32; f16 is widened on load and rounded once on
 *     store; NaN in either input of Max/Min gives NaN (comparisons, not
 *     fmaxf); Sigmoid is one TIR_SIGMOID, which every dialect computes
 *     from exp(-|x|) on both sides like the reference (one call rather than
 *     the expanded select, whose tree holds x four times: fused into a conv
 *     epilogue, each copy recomputed the convolution);
 *   - integer Add/Sub/Mul/Neg/Abs wrap at the element width (the reference
 *     computes in uint64; TIR integer arithmetic wraps, see the C printer);
 *   - integer Div truncates, x / -1 negates with wrap-around. A zero
 *     divisor fails the run as in the reference: the kernel stores a code
 *     into a status word the runtime reads (kiln_lower_status); the
 *     division itself never traps (the divisor is replaced by 1 first);
 *   - float -> integer (Cast, Pow with an integer base) truncates, saturates
 *     to the int64 range (NaN -> 0) and wraps to the width.
 * Known differences: f32 Pow uses powf where the reference rounds a double
 * pow (<= 1 ulp); Pow with mixed int/float operands computes in f32 where
 * the reference uses double (exact for small magnitudes).
 */
#include <float.h>
#include <math.h>
#include <stdio.h>
#include <string.h>

#include "ir/op.h"
#include "lowering/lower_ew_impl.h"

#define TRY(expr)                  \
  do {                             \
    kiln_status_t try_s_ = (expr); \
    if (try_s_) return try_s_;     \
  } while (0)

/* ======================================================================
 * Shared helpers (lower_ew_impl.h)
 * ====================================================================== */

void kiln_lew_nest(tir_ctx_t* c, kiln_lew_nest_t* n, int32_t rank, const int64_t* shape) {
  KILN_ASSERT(rank >= 0 && rank <= KILN_MAX_RANK);
  memset(n, 0, sizeof *n);
  n->rank = rank;
  for (int32_t k = 0; k < rank; ++k) {
    char name[8];
    snprintf(name, sizeof name, "d%d", (int)k);
    n->shape[k] = shape[k];
    n->var[k] = tir_var(c, name);
    n->idx[k] = tir_ref(c, n->var[k]);
  }
}

void kiln_lew_nest_buf(tir_ctx_t* c, kiln_lew_nest_t* n, const tir_buffer_t* b) {
  kiln_lew_nest(c, n, b->rank, b->shape);
}

const tir_expr_t* kiln_lew_bload(tir_ctx_t* c, const kiln_lew_nest_t* n, const tir_buffer_t* b) {
  const tir_expr_t* idx[KILN_MAX_RANK];
  KILN_ASSERT(b->rank <= n->rank);
  int32_t off = n->rank - b->rank;
  for (int32_t k = 0; k < b->rank; ++k)
    idx[k] = (b->shape[k] == 1 && n->shape[off + k] != 1) ? tir_int(c, 0) : n->idx[off + k];
  return tir_load(c, b, idx);
}

const tir_expr_t* kiln_lew_load0(tir_ctx_t* c, const tir_buffer_t* b) {
  const tir_expr_t* idx[KILN_MAX_RANK];
  for (int32_t k = 0; k < b->rank; ++k) idx[k] = tir_int(c, 0);
  return tir_load(c, b, idx);
}

const tir_stmt_t* kiln_lew_store(tir_ctx_t* c, const kiln_lew_nest_t* n, const tir_buffer_t* b,
                                 const tir_expr_t* v) {
  KILN_ASSERT(b->rank == n->rank);
  return tir_store(c, b, n->idx, v);
}

const tir_stmt_t* kiln_lew_loops(tir_ctx_t* c, const kiln_lew_nest_t* n, const tir_stmt_t* body) {
  for (int32_t k = n->rank - 1; k >= 0; --k)
    body = tir_for(c, n->var[k], n->shape[k], TIR_LOOP_SERIAL, body);
  return body;
}

const tir_expr_t* kiln_lew_f32(tir_ctx_t* c, const tir_expr_t* e) {
  if (!e) return NULL;
  /* f64 is never narrowed here: it computes in f64, and an f32 constant
   * next to it fails the verifier instead of rounding silently */
  if (e->dtype == KILN_DTYPE_F64) return e;
  return tir_cast(c, KILN_DTYPE_F32, e);
}

const tir_expr_t* kiln_lew_imm_i(tir_ctx_t* c, kiln_dtype_t t, int64_t v) {
  if (t == KILN_DTYPE_I64) return tir_int(c, v);
  return tir_const(c, t, (double)v); /* narrower types: exact through double */
}

const tir_expr_t* kiln_lew_imm(tir_ctx_t* c, kiln_dtype_t t, double v) {
  if (t == KILN_DTYPE_F16) return tir_cast(c, KILN_DTYPE_F16, tir_const(c, KILN_DTYPE_F32, v));
  return tir_const(c, t, v);
}

const tir_expr_t* kiln_lew_f2i(tir_ctx_t* c, kiln_dtype_t t, const tir_expr_t* v) {
  /* The clamp keeps the C conversion defined; the selects give the
   * saturated and NaN results (2^63 itself is out of range, so the largest
   * f32 below it is the upper clamp). */
  const double two63 = 9223372036854775808.0;
  const kiln_dtype_t ft = v->dtype == KILN_DTYPE_F64 ? KILN_DTYPE_F64 : KILN_DTYPE_F32;
  /* 2^63 - 2^39 in f32, 2^63 - 2^10 in f64 */
  const double below = ft == KILN_DTYPE_F64 ? 9223372036854774784.0 : 9223371487098961920.0;
  const tir_expr_t* cl = tir_bin(c, TIR_MIN, tir_bin(c, TIR_MAX, v, tir_const(c, ft, -two63)),
                                 tir_const(c, ft, below));
  const tir_expr_t* i = tir_cast(c, KILN_DTYPE_I64, cl);
  i = tir_select(c, tir_bin(c, TIR_GE, v, tir_const(c, ft, two63)),
                 tir_int(c, INT64_MAX), i);
  i = tir_select(c, tir_bin(c, TIR_NE, v, v), tir_int(c, 0), i);
  return t == KILN_DTYPE_I64 ? i : tir_cast(c, t, i);
}

const tir_expr_t* kiln_lew_clamp(tir_ctx_t* c, const tir_expr_t* e, int64_t lo, int64_t hi) {
  return tir_bin(c, TIR_MIN, tir_bin(c, TIR_MAX, e, tir_int(c, lo)), tir_int(c, hi));
}

static int64_t nest_numel(const kiln_lew_nest_t* n) {
  int64_t p = 1;
  for (int32_t k = 0; k < n->rank; ++k) p *= n->shape[k];
  return p;
}

/* dst = a + sep + b (loop names are short: "d0.d1.d2.o"). */
static void join(char* dst, size_t cap, const char* a, const char* sep, const char* b) {
  size_t la = strlen(a), ls = strlen(sep), lb = strlen(b);
  KILN_ASSERT(la + ls + lb < cap);
  memmove(dst, a, la);
  memcpy(dst + la, sep, ls);
  memcpy(dst + la + ls, b, lb + 1);
}

tir_schedule_t* kiln_lew_schedule(kiln_lower_ctx_t* ctx, const kiln_lew_nest_t* n,
                                  bool vectorize) {
  tir_ctx_t* c = ctx->tir;
  const int32_t r = n->rank;
  const int64_t numel = nest_numel(n);
  if (r == 0 || numel <= 1) return NULL;
  tir_schedule_t* s = tir_schedule_new(c);
  if (!s) return NULL;
  char fused[128] = "", tmp[128];
  if (ctx->target == KILN_TARGET_CLASS_GPU) {
    /* Lanes per invocation (kiln_plan_options_t.ew_lanes): the innermost
     * dim splits into whole groups of them, the group loop VECTORIZED, so
     * a printer with vectors reads and writes them as one vector (Vulkan:
     * one vec4 texel; lavapipe runs a storage-buffer access whose address
     * differs between lanes as a loop over the lanes per float). The
     * printer prints the loop scalar where an access does not allow it. */
    const int64_t lanes = ctx->ew_lanes;
    const bool vec = vectorize && lanes > 1 && n->shape[r - 1] % lanes == 0;
    char lane_loop[128] = "";
    if (vec) {
      tir_sched_split(c, s, n->var[r - 1]->name, lanes);
      join(lane_loop, sizeof lane_loop, n->var[r - 1]->name, ".", "i");
    }
    join(fused, sizeof fused, n->var[0]->name, "", "");
    for (int32_t k = 1; k < r; ++k) {
      const char* v = k == r - 1 && vec ? n->var[k]->name : NULL;
      if (v) join(tmp, sizeof tmp, v, ".", "o");
      tir_sched_fuse(c, s, fused, v ? tmp : n->var[k]->name);
      join(fused, sizeof fused, fused, ".", v ? tmp : n->var[k]->name);
    }
    if (vec && r == 1) join(fused, sizeof fused, n->var[0]->name, ".", "o");
    tir_sched_split(c, s, fused, 256);
    join(tmp, sizeof tmp, fused, ".", "o");
    tir_sched_bind(c, s, tmp, TIR_BLOCK_X);
    join(tmp, sizeof tmp, fused, ".", "i");
    tir_sched_bind(c, s, tmp, TIR_THREAD_X);
    if (vec) tir_sched_vectorize(c, s, lane_loop);
    return s;
  }

  const bool par = numel >= KILN_LEW_PARALLEL_MIN && ctx->threads > 1;
  const char* inner = n->var[r - 1]->name;
  const int64_t e = n->shape[r - 1];
  const int64_t outer_extent = numel / (e ? e : 1);
  /* Outer dims fused into one loop for the threads. */
  if (par && r >= 2) {
    join(fused, sizeof fused, n->var[0]->name, "", "");
    for (int32_t k = 1; k < r - 1; ++k) {
      tir_sched_fuse(c, s, fused, n->var[k]->name);
      join(fused, sizeof fused, fused, ".", n->var[k]->name);
    }
  }
  /* Innermost loop: split for SIMD lanes by 16, 8 or 4, whichever divides
   * it, so no guard is needed; an extent none divides stays whole and is
   * vectorized as it is (the C printer's omp simd loop handles the tail).
   * When the threads need the inner dim (one dim, or too few outer
   * iterations) it is cut into chunks of its smallest divisor >= 16; an
   * extent without one (a large prime) runs PARALLEL itself, unvectorized,
   * rather than with a guarded tail. */
  char inner_o[128] = "", inner_i[128] = "";
  const bool chunks = par && (r == 1 || outer_extent < 2 * (int64_t)ctx->threads) && e >= 32;
  bool par_inner = false;
  int64_t f = 0;
  if (vectorize && e >= 16) f = e % 16 == 0 ? 16 : e % 8 == 0 ? 8 : e % 4 == 0 ? 4 : 0;
  if (!f && chunks) {
    for (int64_t d = 16; d <= 4096 && d <= e / 2 && !f; ++d)
      if (e % d == 0) f = d;
    par_inner = f == 0;
  }
  if (f) {
    tir_sched_split(c, s, inner, f);
    join(inner_o, sizeof inner_o, inner, ".", "o");
    join(inner_i, sizeof inner_i, inner, ".", "i");
  }
  if (par) {
    const char* in_par = inner_o[0] ? inner_o : par_inner ? inner : NULL;
    if (r >= 2 && (outer_extent >= 2 * (int64_t)ctx->threads || !in_par)) {
      tir_sched_parallel(c, s, fused);
    } else if (r >= 2) {
      /* Too few outer iterations for the threads: share the inner chunks. */
      tir_sched_fuse(c, s, fused, in_par);
      join(tmp, sizeof tmp, fused, ".", in_par);
      tir_sched_parallel(c, s, tmp);
    } else {
      tir_sched_parallel(c, s, in_par);
    }
  }
  if (vectorize) {
    if (inner_i[0]) tir_sched_vectorize(c, s, inner_i);
    else if (e >= 2 && !par_inner) tir_sched_vectorize(c, s, inner);
  }
  return s->n > 0 ? s : NULL;
}

kiln_status_t kiln_lew_emit(kiln_lower_ctx_t* ctx, const kiln_lew_nest_t* n,
                            const tir_stmt_t* body, int32_t n_params,
                            const tir_buffer_t* const* params, bool vectorize) {
  /* A buffer passed twice (Add(x, x)) is one parameter. */
  const tir_buffer_t* uniq[KILN_MAX_NODE_INPUTS + 8];
  int32_t m = 0;
  KILN_ASSERT(n_params <= KILN_MAX_NODE_INPUTS + 8);
  for (int32_t i = 0; i < n_params; ++i) {
    if (!params[i]) continue;
    bool dup = false;
    for (int32_t j = 0; j < m && !dup; ++j) dup = uniq[j] == params[i];
    if (!dup) uniq[m++] = params[i];
  }
  tir_func_t* f = tir_func(ctx->tir, kiln_lower_kernel_name(ctx), m, uniq, body);
  tir_schedule_t* s = f ? kiln_lew_schedule(ctx, n, vectorize) : NULL;
  TRY(tir_ctx_status(ctx->tir));
  return kiln_lower_emit(ctx, f, s);
}

kiln_status_t kiln_lew_check(kiln_lower_ctx_t* ctx, const tir_buffer_t* b, kiln_lew_bad_fn bad,
                             const void* user, kiln_check_code_t code) {
  if (tir_buffer_numel(b) == 0) return NULL;
  tir_ctx_t* c = ctx->tir;
  const tir_buffer_t* word = NULL;
  TRY(kiln_lower_status(ctx, &word));
  kiln_lew_nest_t n;
  kiln_lew_nest_buf(c, &n, b);
  const tir_expr_t* zero[1] = {tir_int(c, 0)};
  /* Every work-item that finds bad data stores the same code: the race is
   * between equal values, so no atomics are needed on any target. */
  const tir_stmt_t* fail = tir_store(c, word, zero, tir_const(c, KILN_DTYPE_I32, (double)code));
  const tir_stmt_t* body =
      kiln_lew_loops(c, &n, tir_if(c, bad(c, tir_load(c, b, n.idx), user), fail, NULL));
  const tir_buffer_t* params[2] = {b, word};
  return kiln_lew_emit(ctx, &n, body, 2, params, false);
}

kiln_status_t kiln_lew_fill(kiln_lower_ctx_t* ctx, const tir_buffer_t* out, const tir_expr_t* v) {
  if (tir_buffer_numel(out) == 0) return NULL;
  kiln_lew_nest_t n;
  kiln_lew_nest_buf(ctx->tir, &n, out);
  const tir_stmt_t* body = kiln_lew_loops(ctx->tir, &n, kiln_lew_store(ctx->tir, &n, out, v));
  return kiln_lew_emit(ctx, &n, body, 1, &out, true);
}

const kiln_array_t* kiln_lew_const_in(const kiln_lower_ctx_t* ctx, int32_t i) {
  if (i < 0 || i >= ctx->n_in || !ctx->in_tensor[i]) return NULL;
  const kiln_tensor_t* t = ctx->in_tensor[i];
  if (!(t->flags & KILN_TENSOR_CONST) || (!t->value.data && kiln_array_numel(&t->value) > 0))
    return NULL;
  return &t->value;
}

kiln_status_t kiln_lew_read_ints(const kiln_lower_ctx_t* ctx, int32_t i, const char* op,
                                 const char* what, int64_t* out, int64_t cap, int64_t* out_n) {
  const kiln_array_t* a = kiln_lew_const_in(ctx, i);
  if (!a) {
    return kiln_make_status(KILN_UNSUPPORTED,
                            "%s: input '%s' is computed at run time; kiln compiles only a "
                            "constant '%s' (its values decide the kernel)",
                            op, what, what);
  }
  if (a->dtype != KILN_DTYPE_I64 && a->dtype != KILN_DTYPE_I32) {
    return kiln_make_status(KILN_INVALID_ARGUMENT, "%s: input '%s' has dtype %s, expected i64",
                            op, what, kiln_dtype_name(a->dtype));
  }
  int64_t n = kiln_array_numel(a);
  if (a->shape.rank > 1 || n > cap) {
    return kiln_make_status(KILN_INVALID_ARGUMENT, "%s: input '%s' has %lld values, at most %lld",
                            op, what, (long long)n, (long long)cap);
  }
  for (int64_t k = 0; k < n; ++k) out[k] = kiln_load_i64(a->dtype, a->data, (size_t)k);
  *out_n = n;
  return NULL;
}

/* ======================================================================
 * Elementwise ops
 * ====================================================================== */

#define BIT(t) (1u << (unsigned)(t))
/* M_FLOAT computes in f32. M_F64 is added only where the lowering is
 * dtype-generic (no f32 constants or casts), so f64 stays f64; M_U64 only
 * where signed and unsigned int64 arithmetic agree (+ - *, compares on
 * typed values, moves). */
#define M_FLOAT (BIT(KILN_DTYPE_F32) | BIT(KILN_DTYPE_F16))
#define M_F64 BIT(KILN_DTYPE_F64)
#define M_SINT (BIT(KILN_DTYPE_I8) | BIT(KILN_DTYPE_I16) | BIT(KILN_DTYPE_I32) | BIT(KILN_DTYPE_I64))
#define M_INT (M_SINT | BIT(KILN_DTYPE_U8) | BIT(KILN_DTYPE_U16) | BIT(KILN_DTYPE_U32))
#define M_U64 BIT(KILN_DTYPE_U64)
#define M_NUM (M_FLOAT | M_INT)
#define M_BOOL BIT(KILN_DTYPE_BOOL)
#define M_ALL (M_NUM | M_BOOL | M_F64 | M_U64)

static const char* opn(const kiln_lower_ctx_t* ctx) { return ctx->node->op_type; }

static kiln_status_t need(const kiln_lower_ctx_t* ctx, int32_t i, uint32_t mask) {
  const tir_buffer_t* b = kiln_lew_in(ctx, i);
  if (!b) {
    return kiln_make_status(KILN_INVALID_ARGUMENT, "%s: missing input %d", opn(ctx), (int)i);
  }
  if (!(mask & BIT(b->dtype))) {
    return kiln_make_status(KILN_UNSUPPORTED, "%s: input %d of dtype %s has no lowering",
                            opn(ctx), (int)i, kiln_dtype_name(b->dtype));
  }
  return NULL;
}

static kiln_status_t need_out(const kiln_lower_ctx_t* ctx) {
  if (!kiln_lew_out(ctx, 0))
    return kiln_make_status(KILN_INVALID_ARGUMENT, "%s: missing output 0", opn(ctx));
  return NULL;
}

/* Value |v| (f32 for float outputs) stored into a buffer of dtype |t|. */
static const tir_expr_t* narrow(tir_ctx_t* c, kiln_dtype_t t, const tir_expr_t* v) {
  return t == KILN_DTYPE_F16 ? tir_cast(c, KILN_DTYPE_F16, v) : v;
}

/* Load widened for computing: f16 -> f32, everything else as is. */
static const tir_expr_t* widen(tir_ctx_t* c, const tir_expr_t* v) {
  return (v && v->dtype == KILN_DTYPE_F16) ? tir_cast(c, KILN_DTYPE_F32, v) : v;
}

static const tir_expr_t* f32c(tir_ctx_t* c, double v) {
  return tir_const(c, KILN_DTYPE_F32, (double)(float)v);
}

/* ---- unary maps -------------------------------------------------------- */

typedef struct uparams_s {
  float alpha, beta;
  bool tanh_gelu;
} uparams_t;

/* Value of one output element from the (widened) input |v| of dtype |t|. */
typedef const tir_expr_t* (*umap_fn)(tir_ctx_t* c, kiln_dtype_t t, const tir_expr_t* v,
                                      const uparams_t* p);

static const tir_expr_t* zero_of(tir_ctx_t* c, const tir_expr_t* v) {
  return tir_const(c, v->dtype, 0.0);
}

static const tir_expr_t* clamp01(tir_ctx_t* c, const tir_expr_t* v) {
  /* v < 0 ? 0 : (v > 1 ? 1 : v), NaN passing through, like the reference. */
  return tir_select(c, tir_bin(c, TIR_LT, v, f32c(c, 0.0)), f32c(c, 0.0),
                    tir_select(c, tir_bin(c, TIR_GT, v, f32c(c, 1.0)), f32c(c, 1.0), v));
}

static const tir_expr_t* u_relu(tir_ctx_t* c, kiln_dtype_t t, const tir_expr_t* v,
                                const uparams_t* p) {
  (void)t, (void)p;
  return tir_select(c, tir_bin(c, TIR_LT, v, zero_of(c, v)), zero_of(c, v), v);
}
static const tir_expr_t* u_leaky(tir_ctx_t* c, kiln_dtype_t t, const tir_expr_t* v,
                                 const uparams_t* p) {
  (void)t;
  return tir_select(c, tir_bin(c, TIR_LT, v, f32c(c, 0.0)), tir_mul(c, v, f32c(c, p->alpha)), v);
}
static const tir_expr_t* u_sigmoid(tir_ctx_t* c, kiln_dtype_t t, const tir_expr_t* v,
                                   const uparams_t* p) {
  (void)t, (void)p;
  return tir_call(c, TIR_SIGMOID, 1, v, NULL, NULL);
}
static const tir_expr_t* u_call(tir_ctx_t* c, tir_intrin_t fn, const tir_expr_t* v) {
  return tir_call(c, fn, 1, v, NULL, NULL);
}
static const tir_expr_t* u_tanh(tir_ctx_t* c, kiln_dtype_t t, const tir_expr_t* v,
                                const uparams_t* p) {
  (void)t, (void)p;
  return u_call(c, TIR_TANH, v);
}
static const tir_expr_t* u_hardsigmoid(tir_ctx_t* c, kiln_dtype_t t, const tir_expr_t* v,
                                       const uparams_t* p) {
  (void)t;
  return clamp01(c, tir_add(c, tir_mul(c, f32c(c, p->alpha), v), f32c(c, p->beta)));
}
static const tir_expr_t* u_hardswish(tir_ctx_t* c, kiln_dtype_t t, const tir_expr_t* v,
                                     const uparams_t* p) {
  (void)t, (void)p;
  return tir_mul(c, v, clamp01(c, tir_add(c, tir_mul(c, v, f32c(c, 1.0f / 6.0f)), f32c(c, 0.5))));
}
static const tir_expr_t* u_erf(tir_ctx_t* c, kiln_dtype_t t, const tir_expr_t* v,
                               const uparams_t* p) {
  (void)t, (void)p;
  return u_call(c, TIR_ERF, v);
}
static const tir_expr_t* u_gelu(tir_ctx_t* c, kiln_dtype_t t, const tir_expr_t* v,
                                const uparams_t* p) {
  (void)t;
  const tir_expr_t* half_v = tir_mul(c, f32c(c, 0.5), v);
  const tir_expr_t* inner;
  if (p->tanh_gelu) {
    /* 0.5 v (1 + tanh(k (v + 0.044715 v^3))) */
    const tir_expr_t* v3 = tir_mul(c, tir_mul(c, tir_mul(c, f32c(c, 0.044715f), v), v), v);
    inner = u_call(c, TIR_TANH, tir_mul(c, f32c(c, 0.79788456080286536f), tir_add(c, v, v3)));
  } else {
    inner = u_call(c, TIR_ERF, tir_mul(c, v, f32c(c, 0.70710678118654752f)));
  }
  return tir_mul(c, half_v, tir_add(c, f32c(c, 1.0), inner));
}
static const tir_expr_t* u_sqrt(tir_ctx_t* c, kiln_dtype_t t, const tir_expr_t* v,
                                const uparams_t* p) {
  (void)t, (void)p;
  return u_call(c, TIR_SQRT, v);
}
static const tir_expr_t* u_recip(tir_ctx_t* c, kiln_dtype_t t, const tir_expr_t* v,
                                 const uparams_t* p) {
  (void)t, (void)p;
  return tir_bin(c, TIR_DIV, f32c(c, 1.0), v);
}
static const tir_expr_t* u_exp(tir_ctx_t* c, kiln_dtype_t t, const tir_expr_t* v,
                               const uparams_t* p) {
  (void)t, (void)p;
  return u_call(c, TIR_EXP, v);
}
static const tir_expr_t* u_log(tir_ctx_t* c, kiln_dtype_t t, const tir_expr_t* v,
                               const uparams_t* p) {
  (void)t, (void)p;
  return u_call(c, TIR_LOG, v);
}
static const tir_expr_t* u_neg(tir_ctx_t* c, kiln_dtype_t t, const tir_expr_t* v,
                               const uparams_t* p) {
  (void)p;
  /* Floats: a sign flip (-0 for 0). Ints: 0 - v, wrapping. */
  return kiln_dtype_is_float(t) ? u_call(c, TIR_NEG, v) : tir_sub(c, zero_of(c, v), v);
}
static const tir_expr_t* u_abs(tir_ctx_t* c, kiln_dtype_t t, const tir_expr_t* v,
                               const uparams_t* p) {
  (void)p;
  if (kiln_dtype_is_float(t)) return u_call(c, TIR_FABS, v);
  if (kiln_dtype_is_unsigned(t)) return v;
  return tir_select(c, tir_bin(c, TIR_LT, v, zero_of(c, v)), tir_sub(c, zero_of(c, v), v), v);
}
static const tir_expr_t* u_not(tir_ctx_t* c, kiln_dtype_t t, const tir_expr_t* v,
                               const uparams_t* p) {
  (void)t, (void)p;
  return tir_bin(c, TIR_EQ, v, tir_const(c, KILN_DTYPE_BOOL, 0));
}

kiln_status_t kiln_lew_map(kiln_lower_ctx_t* ctx, kiln_lew_umap_fn fn, const void* user,
                          uint32_t mask) {
  TRY(need(ctx, 0, mask));
  TRY(need_out(ctx));
  tir_ctx_t* c = ctx->tir;
  const tir_buffer_t* x = ctx->in[0];
  const tir_buffer_t* y = ctx->out[0];
  if (tir_buffer_numel(y) == 0) return NULL;
  kiln_lew_nest_t n;
  kiln_lew_nest_buf(c, &n, y);
  const tir_expr_t* v = widen(c, kiln_lew_bload(c, &n, x));
  v = narrow(c, y->dtype, fn(c, x->dtype, v, user));
  const tir_stmt_t* body = kiln_lew_loops(c, &n, kiln_lew_store(c, &n, y, v));
  const tir_buffer_t* params[2] = {x, y};
  return kiln_lew_emit(ctx, &n, body, 2, params, true);
}

/* The maps of this file take their attributes as uparams_t. */
typedef struct umap_s {
  umap_fn fn;
  const uparams_t* p;
} umap_t;

static const tir_expr_t* umap_call(tir_ctx_t* c, kiln_dtype_t t, const tir_expr_t* v,
                                   const void* user) {
  const umap_t* m = user;
  return m->fn(c, t, v, m->p);
}

static kiln_status_t lower_map(kiln_lower_ctx_t* ctx, umap_fn fn, const uparams_t* p,
                               uint32_t mask) {
  const umap_t m = {fn, p};
  return kiln_lew_map(ctx, umap_call, &m, mask);
}

#define SIMPLE(name, fn, mask)                         \
  static kiln_status_t name(kiln_lower_ctx_t* ctx) {   \
    uparams_t p = {0};                                 \
    return lower_map(ctx, fn, &p, mask);               \
  }

SIMPLE(lower_relu, u_relu, M_FLOAT | M_F64 | M_SINT)
SIMPLE(lower_sigmoid, u_sigmoid, M_FLOAT)
SIMPLE(lower_tanh, u_tanh, M_FLOAT | M_F64)
SIMPLE(lower_hardswish, u_hardswish, M_FLOAT)
SIMPLE(lower_erf, u_erf, M_FLOAT | M_F64)
SIMPLE(lower_sqrt, u_sqrt, M_FLOAT | M_F64)
SIMPLE(lower_reciprocal, u_recip, M_FLOAT)
SIMPLE(lower_exp, u_exp, M_FLOAT | M_F64)
SIMPLE(lower_log, u_log, M_FLOAT | M_F64)
SIMPLE(lower_neg, u_neg, M_FLOAT | M_F64 | M_SINT)
SIMPLE(lower_abs, u_abs, M_NUM | M_F64)
SIMPLE(lower_not, u_not, M_BOOL)

static kiln_status_t lower_leakyrelu(kiln_lower_ctx_t* ctx) {
  uparams_t p = {0};
  TRY(kiln_attr_float(ctx->node, "alpha", 0.01f, &p.alpha));
  return lower_map(ctx, u_leaky, &p, M_FLOAT);
}

static kiln_status_t lower_hardsigmoid(kiln_lower_ctx_t* ctx) {
  uparams_t p = {0};
  TRY(kiln_attr_float(ctx->node, "alpha", 0.2f, &p.alpha));
  TRY(kiln_attr_float(ctx->node, "beta", 0.5f, &p.beta));
  return lower_map(ctx, u_hardsigmoid, &p, M_FLOAT);
}

static kiln_status_t lower_gelu(kiln_lower_ctx_t* ctx) {
  uparams_t p = {0};
  const char* a = NULL;
  TRY(kiln_attr_string(ctx->node, "approximate", "none", &a));
  if (strcmp(a, "tanh") == 0) {
    p.tanh_gelu = true;
  } else if (strcmp(a, "none") != 0) {
    return kiln_make_status(KILN_INVALID_ARGUMENT,
                            "Gelu: attribute 'approximate' is '%s', must be 'none' or 'tanh'", a);
  }
  return lower_map(ctx, u_gelu, &p, M_FLOAT);
}

/* ---- Identity, Dropout --------------------------------------------------- */

static kiln_status_t lower_identity(kiln_lower_ctx_t* ctx) {
  TRY(need(ctx, 0, M_ALL));
  TRY(need_out(ctx));
  return kiln_lower_alias(ctx, 0, 0);
}

static kiln_status_t lower_dropout(kiln_lower_ctx_t* ctx) {
  TRY(need(ctx, 0, M_FLOAT));
  TRY(need_out(ctx));
  if (ctx->opset >= 12 && kiln_lew_in(ctx, 2)) {
    /* Inference only: a training_mode that is not a constant false (or
     * true with ratio 0) has no lowering; inference rejects it at load. */
    const kiln_array_t* tm = kiln_lew_const_in(ctx, 2);
    if (!tm) {
      return kiln_make_status(KILN_UNSUPPORTED,
                              "Dropout: input 'training_mode' that is not a constant is not "
                              "supported");
    }
    bool training = kiln_array_numel(tm) >= 1 && kiln_load_i64(tm->dtype, tm->data, 0) != 0;
    if (training) {
      const kiln_array_t* ratio = kiln_lew_const_in(ctx, 1);
      if (kiln_lew_in(ctx, 1) && !ratio) {
        return kiln_make_status(KILN_UNSUPPORTED,
                                "Dropout: training mode with a run-time ratio is not supported");
      }
      double r = 0.5;
      if (ratio && kiln_array_numel(ratio) == 1) r = kiln_load_f64(ratio->dtype, ratio->data, 0);
      if (r != 0.0) {
        return kiln_make_status(KILN_UNSUPPORTED,
                                "Dropout: training mode (ratio %g) is not supported", r);
      }
    }
  }
  TRY(kiln_lower_alias(ctx, 0, 0));
  const tir_buffer_t* mask = kiln_lew_out(ctx, 1);
  if (!mask) return NULL;
  return kiln_lew_fill(ctx, mask, kiln_lew_imm(ctx->tir, mask->dtype, 1.0));
}

/* ---- Clip ------------------------------------------------------------------ */

/* One bound of Clip (input |i|: 1 = min, 2 = max): an immediate when known
 * and finite, a load when computed at run time or infinite, NULL when
 * absent or unable to fire (NaN, -inf min, +inf max). */
static kiln_status_t clip_bound(kiln_lower_ctx_t* ctx, int32_t i, const char* name,
                                const tir_expr_t** out) {
  tir_ctx_t* c = ctx->tir;
  const tir_buffer_t* x = ctx->in[0];
  const tir_buffer_t* b = kiln_lew_in(ctx, i);
  *out = NULL;
  if (!b) return NULL;
  if (b->dtype != x->dtype) {
    return kiln_make_status(KILN_INVALID_ARGUMENT,
                            "Clip: inputs 'input' and '%s' must have the same dtype, got %s and %s",
                            name, kiln_dtype_name(x->dtype), kiln_dtype_name(b->dtype));
  }
  if (tir_buffer_numel(b) != 1) {
    return kiln_make_status(KILN_INVALID_ARGUMENT, "Clip: input '%s' must be a scalar", name);
  }
  const kiln_array_t* v = kiln_lew_const_in(ctx, i);
  if (v && kiln_dtype_is_float(x->dtype)) {
    float f = (float)kiln_load_f64(v->dtype, v->data, 0);
    if (isfinite(f)) *out = f32c(c, f);
    else if (f != f || (f > 0) == (i == 2)) return NULL; /* NaN, +inf max, -inf min: no-op */
    else *out = widen(c, kiln_lew_load0(c, b));
  } else if (v) {
    *out = kiln_lew_imm_i(c, x->dtype, kiln_load_i64(v->dtype, v->data, 0));
  } else {
    *out = widen(c, kiln_lew_load0(c, b));
  }
  return NULL;
}

static kiln_status_t lower_clip(kiln_lower_ctx_t* ctx) {
  tir_ctx_t* c = ctx->tir;
  const tir_expr_t *lo = NULL, *hi = NULL;
  TRY(need(ctx, 0, ctx->opset < 11 ? M_FLOAT : M_NUM));
  TRY(need_out(ctx));
  const tir_buffer_t* x = ctx->in[0];
  const tir_buffer_t* y = ctx->out[0];
  if (ctx->opset < 11) {
    float flo, fhi;
    TRY(kiln_attr_float(ctx->node, "min", -FLT_MAX, &flo));
    TRY(kiln_attr_float(ctx->node, "max", FLT_MAX, &fhi));
    /* A bound that can never fire (NaN, -inf min, +inf max) is dropped. */
    if (isfinite(flo) || (flo == flo && flo > 0)) lo = tir_const(c, KILN_DTYPE_F32, flo);
    if (isfinite(fhi) || (fhi == fhi && fhi < 0)) hi = tir_const(c, KILN_DTYPE_F32, fhi);
  } else {
    TRY(clip_bound(ctx, 1, "min", &lo));
    TRY(clip_bound(ctx, 2, "max", &hi));
  }
  if (tir_buffer_numel(y) == 0) return NULL;
  kiln_lew_nest_t n;
  kiln_lew_nest_buf(c, &n, y);
  const tir_expr_t* v = widen(c, kiln_lew_bload(c, &n, x));
  /* v < lo ? lo : v, then > hi ? hi : v: lo > hi gives hi, NaN passes. */
  if (lo) v = tir_select(c, tir_bin(c, TIR_LT, v, lo), lo, v);
  if (hi) v = tir_select(c, tir_bin(c, TIR_GT, v, hi), hi, v);
  const tir_stmt_t* body = kiln_lew_loops(c, &n, kiln_lew_store(c, &n, y, narrow(c, y->dtype, v)));
  const tir_buffer_t* params[4] = {x, kiln_lew_in(ctx, 1), kiln_lew_in(ctx, 2), y};
  if (ctx->opset < 11) params[1] = params[2] = NULL;
  return kiln_lew_emit(ctx, &n, body, 4, params, true);
}

/* ---- broadcasting binary ops ---------------------------------------------- */

/* One output element from widened operands |a| and |b| of input dtype |t|;
 * float results are f32 (narrowed by the caller). */
typedef kiln_lew_bin_fn bin_fn;

static const tir_expr_t* b_add(tir_ctx_t* c, kiln_dtype_t t, const tir_expr_t* a,
                               const tir_expr_t* b) {
  (void)t;
  return tir_add(c, a, b);
}
static const tir_expr_t* b_sub(tir_ctx_t* c, kiln_dtype_t t, const tir_expr_t* a,
                               const tir_expr_t* b) {
  (void)t;
  return tir_sub(c, a, b);
}
static const tir_expr_t* b_mul(tir_ctx_t* c, kiln_dtype_t t, const tir_expr_t* a,
                               const tir_expr_t* b) {
  (void)t;
  return tir_mul(c, a, b);
}
const tir_expr_t* kiln_lew_div(tir_ctx_t* c, kiln_dtype_t t, const tir_expr_t* a,
                               const tir_expr_t* b) {
  if (kiln_dtype_is_float(t)) return tir_bin(c, TIR_DIV, a, b);
  /* Truncating division that never traps: the divisor is 1 where the
   * reference would fail (0) or could overflow (-1); those lanes then take
   * 0 and the wrapped negation. A zero divisor still fails the run: the
   * status word lower_div adds to the kernel reports it. */
  const tir_expr_t* zero = tir_const(c, t, 0);
  const tir_expr_t* is0 = tir_bin(c, TIR_EQ, b, zero);
  if (kiln_dtype_is_unsigned(t)) { /* no -1 divisor */
    const tir_expr_t* q = tir_bin(c, TIR_DIV, a, tir_select(c, is0, tir_const(c, t, 1), b));
    return tir_select(c, is0, zero, q);
  }
  const tir_expr_t* ism1 = tir_bin(c, TIR_EQ, b, tir_const(c, t, -1));
  const tir_expr_t* d = tir_select(c, tir_bin(c, TIR_OR, is0, ism1), tir_const(c, t, 1), b);
  const tir_expr_t* q = tir_bin(c, TIR_DIV, a, d);
  return tir_select(c, ism1, tir_sub(c, zero, a), tir_select(c, is0, zero, q));
}
/* NaN in either input gives NaN (numpy maximum/minimum); nested selects
 * rather than || so the C printer can vectorize it. */
static const tir_expr_t* b_max(tir_ctx_t* c, kiln_dtype_t t, const tir_expr_t* a,
                               const tir_expr_t* b) {
  if (!kiln_dtype_is_float(t)) return tir_bin(c, TIR_MAX, a, b);
  return tir_select(c, tir_bin(c, TIR_NE, a, a), a, tir_select(c, tir_bin(c, TIR_GT, a, b), a, b));
}
static const tir_expr_t* b_min(tir_ctx_t* c, kiln_dtype_t t, const tir_expr_t* a,
                               const tir_expr_t* b) {
  if (!kiln_dtype_is_float(t)) return tir_bin(c, TIR_MIN, a, b);
  return tir_select(c, tir_bin(c, TIR_NE, a, a), a, tir_select(c, tir_bin(c, TIR_LT, a, b), a, b));
}
static const tir_expr_t* b_prelu(tir_ctx_t* c, kiln_dtype_t t, const tir_expr_t* a,
                                 const tir_expr_t* b) {
  (void)t;
  return tir_select(c, tir_bin(c, TIR_LT, a, tir_const(c, a->dtype, 0)), tir_mul(c, a, b), a);
}
static const tir_expr_t* bool01(tir_ctx_t* c, const tir_expr_t* v) {
  return tir_bin(c, TIR_NE, v, tir_const(c, v->dtype, 0));
}
static const tir_expr_t* b_eq(tir_ctx_t* c, kiln_dtype_t t, const tir_expr_t* a,
                              const tir_expr_t* b) {
  if (t == KILN_DTYPE_BOOL) return tir_bin(c, TIR_EQ, bool01(c, a), bool01(c, b));
  return tir_bin(c, TIR_EQ, a, b);
}
#define CMP(name, op)                                                               \
  static const tir_expr_t* name(tir_ctx_t* c, kiln_dtype_t t, const tir_expr_t* a, \
                                const tir_expr_t* b) {                             \
    (void)t;                                                                        \
    return tir_bin(c, op, a, b);                                                    \
  }
CMP(b_lt, TIR_LT)
CMP(b_gt, TIR_GT)
CMP(b_le, TIR_LE)
CMP(b_ge, TIR_GE)
static const tir_expr_t* b_and(tir_ctx_t* c, kiln_dtype_t t, const tir_expr_t* a,
                               const tir_expr_t* b) {
  (void)t;
  return tir_bin(c, TIR_AND, bool01(c, a), bool01(c, b));
}
static const tir_expr_t* b_or(tir_ctx_t* c, kiln_dtype_t t, const tir_expr_t* a,
                              const tir_expr_t* b) {
  (void)t;
  return tir_bin(c, TIR_OR, bool01(c, a), bool01(c, b));
}

/* |check_zero_b|: the kernel also stores KILN_CHECK_DIV_ZERO into a status
 * word where B is 0 (integer Div with a run-time divisor). */
kiln_status_t kiln_lew_binary(kiln_lower_ctx_t* ctx, kiln_lew_bin_fn fn, uint32_t mask,
                             bool check_zero_b) {
  TRY(need(ctx, 0, mask));
  TRY(need(ctx, 1, mask));
  TRY(need_out(ctx));
  tir_ctx_t* c = ctx->tir;
  const tir_buffer_t* a = ctx->in[0];
  const tir_buffer_t* b = ctx->in[1];
  const tir_buffer_t* y = ctx->out[0];
  if (a->dtype != b->dtype) {
    return kiln_make_status(KILN_INVALID_ARGUMENT, "%s: inputs have dtypes %s and %s", opn(ctx),
                            kiln_dtype_name(a->dtype), kiln_dtype_name(b->dtype));
  }
  if (a->rank > y->rank || b->rank > y->rank) {
    return kiln_make_status(KILN_INTERNAL, "%s: an input has a higher rank than the output",
                            opn(ctx));
  }
  if (tir_buffer_numel(y) == 0) return NULL;
  kiln_lew_nest_t n;
  kiln_lew_nest_buf(c, &n, y);
  const tir_expr_t* va = widen(c, kiln_lew_bload(c, &n, a));
  const tir_expr_t* vb = widen(c, kiln_lew_bload(c, &n, b));
  const tir_expr_t* v = narrow(c, y->dtype, fn(c, a->dtype, va, vb));
  const tir_stmt_t* st = kiln_lew_store(c, &n, y, v);
  const tir_buffer_t* params[4] = {a, b, y, NULL};
  if (check_zero_b) {
    /* In the division's own loop: B is loaded there already, so the check
     * costs a compare and no second pass over B. Every work-item that finds
     * a zero stores the same code: no atomics needed on any target. */
    const tir_expr_t* zero[1] = {tir_int(c, 0)};
    TRY(kiln_lower_status(ctx, &params[3]));
    const tir_stmt_t* fail = tir_store(c, params[3], zero, tir_const(c, KILN_DTYPE_I32, KILN_CHECK_DIV_ZERO));
    st = tir_seq2(c, tir_if(c, tir_bin(c, TIR_EQ, vb, tir_const(c, vb->dtype, 0)), fail, NULL), st);
  }
  const tir_stmt_t* body = kiln_lew_loops(c, &n, st);
  return kiln_lew_emit(ctx, &n, body, check_zero_b ? 4 : 3, params, true);
}

static kiln_status_t lower_binary(kiln_lower_ctx_t* ctx, bin_fn fn, uint32_t mask) {
  return kiln_lew_binary(ctx, fn, mask, false);
}

#define BINARY(name, fn, mask) \
  static kiln_status_t name(kiln_lower_ctx_t* ctx) { return lower_binary(ctx, fn, mask); }

BINARY(lower_add, b_add, M_NUM | M_F64 | M_U64)
BINARY(lower_sub, b_sub, M_NUM | M_F64 | M_U64)
BINARY(lower_mul, b_mul, M_NUM | M_F64 | M_U64)
/* Integer Div: a run-time divisor is checked for zeros in the division
 * kernel (a constant one was checked at load, see
 * ir/ops/elementwise_binary.c), so the run fails like the reference's. */
static kiln_status_t lower_div(kiln_lower_ctx_t* ctx) {
  const tir_buffer_t* b = kiln_lew_in(ctx, 1);
  return kiln_lew_binary(ctx, kiln_lew_div, M_NUM | M_F64, b && !kiln_dtype_is_float(b->dtype) && !kiln_lew_const_in(ctx, 1));
}
BINARY(lower_equal, b_eq, M_ALL)
BINARY(lower_less, b_lt, M_NUM | M_F64 | M_U64)
BINARY(lower_greater, b_gt, M_NUM | M_F64 | M_U64)
BINARY(lower_less_equal, b_le, M_NUM | M_F64 | M_U64)
BINARY(lower_greater_equal, b_ge, M_NUM | M_F64 | M_U64)
BINARY(lower_and, b_and, M_BOOL)
BINARY(lower_or, b_or, M_BOOL)

/* PRelu: slope broadcasts to X one way; before opset 7 a 1-D slope of C
 * values is channel-wise (dim 1). */
static kiln_status_t lower_prelu(kiln_lower_ctx_t* ctx) {
  TRY(need(ctx, 0, M_NUM));
  TRY(need(ctx, 1, M_NUM));
  TRY(need_out(ctx));
  tir_ctx_t* c = ctx->tir;
  const tir_buffer_t* x = ctx->in[0];
  const tir_buffer_t* s = ctx->in[1];
  const tir_buffer_t* y = ctx->out[0];
  if (x->dtype != s->dtype) {
    return kiln_make_status(KILN_INVALID_ARGUMENT, "PRelu: X is %s, slope is %s",
                            kiln_dtype_name(x->dtype), kiln_dtype_name(s->dtype));
  }
  if (tir_buffer_numel(y) == 0) return NULL;
  kiln_lew_nest_t n;
  kiln_lew_nest_buf(c, &n, y);
  const tir_expr_t* vs;
  if (ctx->opset < 7 && s->rank == 1 && x->rank >= 2 && s->shape[0] != 1) {
    if (s->shape[0] != x->shape[1]) {
      return kiln_make_status(KILN_INVALID_ARGUMENT,
                              "PRelu: slope of %lld values does not match %lld channels",
                              (long long)s->shape[0], (long long)x->shape[1]);
    }
    vs = tir_load(c, s, &n.idx[1]);
  } else {
    if (s->rank > y->rank) {
      return kiln_make_status(KILN_INVALID_ARGUMENT, "PRelu: slope has a higher rank than X");
    }
    vs = kiln_lew_bload(c, &n, s);
  }
  const tir_expr_t* v =
      narrow(c, y->dtype, b_prelu(c, x->dtype, widen(c, kiln_lew_bload(c, &n, x)), widen(c, vs)));
  const tir_stmt_t* body = kiln_lew_loops(c, &n, kiln_lew_store(c, &n, y, v));
  const tir_buffer_t* params[3] = {x, s, y};
  return kiln_lew_emit(ctx, &n, body, 3, params, true);
}

/* ---- Pow ------------------------------------------------------------------ */

/* Integer power by squaring with wrap-around, over 63 exponent bits in a
 * serial loop with private accumulators; a negative exponent gives
 * 1/b^-e truncated (1 for b = 1, +-1 for b = -1, else 0). */
static const tir_stmt_t* ipow_stmt(tir_ctx_t* c, const kiln_lew_nest_t* n, const tir_buffer_t* y,
                                   const tir_expr_t* b, const tir_expr_t* e) {
  const kiln_dtype_t I = KILN_DTYPE_I64;
  const int64_t one[1] = {1};
  tir_buffer_t* acc = tir_buffer(c, "pw_r", I, 1, one, TIR_SCOPE_PRIVATE);
  tir_buffer_t* base = tir_buffer(c, "pw_x", I, 1, one, TIR_SCOPE_PRIVATE);
  tir_buffer_t* ex = tir_buffer(c, "pw_e", I, 1, one, TIR_SCOPE_PRIVATE);
  const tir_expr_t* z[1] = {tir_int(c, 0)};
  tir_var_t* bit = tir_var(c, "bit");
  const tir_expr_t* r_ = tir_load(c, acc, z);
  const tir_expr_t* x_ = tir_load(c, base, z);
  const tir_expr_t* e_ = tir_load(c, ex, z);
  const tir_stmt_t* step[3] = {
      tir_if(c, tir_bin(c, TIR_EQ, tir_bin(c, TIR_FLOORMOD, e_, tir_int(c, 2)), tir_int(c, 1)),
             tir_store(c, acc, z, tir_mul(c, r_, x_)), NULL),
      tir_store(c, base, z, tir_mul(c, x_, x_)),
      tir_store(c, ex, z, tir_bin(c, TIR_FLOORDIV, e_, tir_int(c, 2))),
  };
  const tir_expr_t* neg =
      tir_select(c, tir_bin(c, TIR_EQ, b, tir_int(c, 1)), tir_int(c, 1),
                 tir_select(c, tir_bin(c, TIR_EQ, b, tir_int(c, -1)),
                            tir_select(c, tir_bin(c, TIR_EQ, tir_bin(c, TIR_FLOORMOD, e, tir_int(c, 2)),
                                                  tir_int(c, 1)),
                                       tir_int(c, -1), tir_int(c, 1)),
                            tir_int(c, 0)));
  const tir_expr_t* res = tir_select(c, tir_bin(c, TIR_LT, e, tir_int(c, 0)), neg, r_);
  if (y->dtype != I) res = tir_cast(c, y->dtype, res);
  const tir_stmt_t* seq[5] = {
      tir_store(c, acc, z, tir_int(c, 1)),
      tir_store(c, base, z, b),
      tir_store(c, ex, z, tir_bin(c, TIR_MAX, e, tir_int(c, 0))),
      tir_for(c, bit, 63, TIR_LOOP_SERIAL, tir_seq(c, 3, step)),
      kiln_lew_store(c, n, y, res),
  };
  return tir_alloc(c, acc, tir_alloc(c, base, tir_alloc(c, ex, tir_seq(c, 5, seq))));
}

static kiln_status_t lower_pow(kiln_lower_ctx_t* ctx) {
  TRY(need(ctx, 0, M_NUM));
  TRY(need(ctx, 1, M_NUM));
  TRY(need_out(ctx));
  tir_ctx_t* c = ctx->tir;
  const tir_buffer_t* a = ctx->in[0];
  const tir_buffer_t* b = ctx->in[1];
  const tir_buffer_t* y = ctx->out[0];
  if (tir_buffer_numel(y) == 0) return NULL;
  kiln_lew_nest_t n;
  kiln_lew_nest_buf(c, &n, y);
  const tir_expr_t* va = kiln_lew_bload(c, &n, a);
  const tir_expr_t* vb = kiln_lew_bload(c, &n, b);
  const tir_stmt_t* st;
  bool vec = true;
  if (!kiln_dtype_is_float(a->dtype) && !kiln_dtype_is_float(b->dtype)) {
    st = ipow_stmt(c, &n, y, tir_cast(c, KILN_DTYPE_I64, va), tir_cast(c, KILN_DTYPE_I64, vb));
    vec = false;
  } else {
    const tir_expr_t* p = tir_call(c, TIR_POW, 2, kiln_lew_f32(c, va), kiln_lew_f32(c, vb), NULL);
    p = kiln_dtype_is_float(y->dtype) ? narrow(c, y->dtype, p) : kiln_lew_f2i(c, y->dtype, p);
    st = kiln_lew_store(c, &n, y, p);
  }
  const tir_stmt_t* body = kiln_lew_loops(c, &n, st);
  const tir_buffer_t* params[3] = {a, b, y};
  return kiln_lew_emit(ctx, &n, body, 3, params, vec);
}

/* ---- Max / Min (variadic) ---------------------------------------------------- */

/* out = in0 broadcast, then out = op(out, in_i) per input, per element: one
 * store per input keeps the expression size linear in the input count
 * (Mean: one more store dividing the rounded sum by the count). */
kiln_status_t kiln_lew_variadic(kiln_lower_ctx_t* ctx, kiln_lew_bin_fn fn, uint32_t mask,
                                bool mean) {
  TRY(need_out(ctx));
  tir_ctx_t* c = ctx->tir;
  const tir_buffer_t* y = ctx->out[0];
  if (ctx->n_in < 1) return kiln_make_status(KILN_INVALID_ARGUMENT, "%s: no inputs", opn(ctx));
  for (int32_t i = 0; i < ctx->n_in; ++i) {
    TRY(need(ctx, i, mask));
    if (ctx->in[i]->dtype != y->dtype || ctx->in[i]->rank > y->rank) {
      return kiln_make_status(KILN_INVALID_ARGUMENT, "%s: input %d (%s) does not fit the output",
                              opn(ctx), (int)i, kiln_dtype_name(ctx->in[i]->dtype));
    }
  }
  if (tir_buffer_numel(y) == 0) return NULL;
  kiln_lew_nest_t n;
  kiln_lew_nest_buf(c, &n, y);
  const tir_stmt_t** st = kiln_arena_alloc(&c->arena, sizeof(*st) * (size_t)(ctx->n_in + 1));
  if (!st) return kiln_make_status(KILN_OUT_OF_MEMORY, "%s: out of memory", opn(ctx));
  st[0] = kiln_lew_store(c, &n, y, kiln_lew_bload(c, &n, ctx->in[0]));
  for (int32_t i = 1; i < ctx->n_in; ++i) {
    const tir_expr_t* acc = widen(c, tir_load(c, y, n.idx));
    const tir_expr_t* v = widen(c, kiln_lew_bload(c, &n, ctx->in[i]));
    st[i] = kiln_lew_store(c, &n, y, narrow(c, y->dtype, fn(c, y->dtype, acc, v)));
  }
  if (mean) {
    const tir_expr_t* sum = widen(c, tir_load(c, y, n.idx));
    const tir_expr_t* q = tir_bin(c, TIR_DIV, sum, f32c(c, (double)ctx->n_in));
    st[ctx->n_in] = kiln_lew_store(c, &n, y, narrow(c, y->dtype, q));
  }
  const tir_stmt_t* body = kiln_lew_loops(c, &n, tir_seq(c, ctx->n_in + (mean ? 1 : 0), st));
  const tir_buffer_t** params =
      kiln_arena_alloc(&c->arena, sizeof(*params) * (size_t)(ctx->n_in + 1));
  if (!params) return kiln_make_status(KILN_OUT_OF_MEMORY, "%s: out of memory", opn(ctx));
  for (int32_t i = 0; i < ctx->n_in; ++i) params[i] = ctx->in[i];
  params[ctx->n_in] = y;
  return kiln_lew_emit(ctx, &n, body, ctx->n_in + 1, params, true);
}

static kiln_status_t lower_max(kiln_lower_ctx_t* ctx) { return kiln_lew_variadic(ctx, b_max, M_NUM | M_F64, false); }
static kiln_status_t lower_min(kiln_lower_ctx_t* ctx) { return kiln_lew_variadic(ctx, b_min, M_NUM | M_F64, false); }

/* ---- Where ----------------------------------------------------------------- */

static kiln_status_t lower_where(kiln_lower_ctx_t* ctx) {
  TRY(need(ctx, 0, M_BOOL));
  TRY(need(ctx, 1, M_ALL));
  TRY(need(ctx, 2, M_ALL));
  TRY(need_out(ctx));
  tir_ctx_t* c = ctx->tir;
  const tir_buffer_t* cond = ctx->in[0];
  const tir_buffer_t* x = ctx->in[1];
  const tir_buffer_t* yv = ctx->in[2];
  const tir_buffer_t* out = ctx->out[0];
  if (x->dtype != yv->dtype || out->dtype != x->dtype) {
    return kiln_make_status(KILN_INVALID_ARGUMENT, "Where: X %s and Y %s differ",
                            kiln_dtype_name(x->dtype), kiln_dtype_name(yv->dtype));
  }
  if (tir_buffer_numel(out) == 0) return NULL;
  kiln_lew_nest_t n;
  kiln_lew_nest_buf(c, &n, out);
  const tir_expr_t* v = tir_select(c, bool01(c, kiln_lew_bload(c, &n, cond)),
                                   kiln_lew_bload(c, &n, x), kiln_lew_bload(c, &n, yv));
  const tir_stmt_t* body = kiln_lew_loops(c, &n, kiln_lew_store(c, &n, out, v));
  const tir_buffer_t* params[4] = {cond, x, yv, out};
  return kiln_lew_emit(ctx, &n, body, 4, params, true);
}

/* ---- Cast --------------------------------------------------------------------- */

/* |v| (dtype |from|) converted to |to| with the reference's rules. */
static const tir_expr_t* convert(tir_ctx_t* c, kiln_dtype_t from, kiln_dtype_t to,
                                 const tir_expr_t* v) {
  if (from == to) return v;
  if (to == KILN_DTYPE_BOOL) return tir_bin(c, TIR_NE, widen(c, v), tir_const(c, widen(c, v)->dtype, 0));
  if (kiln_dtype_is_float(from)) {
    if (kiln_dtype_is_float(to)) return tir_cast(c, to, v); /* f32 <-> f16 */
    return kiln_lew_f2i(c, to, widen(c, v));
  }
  /* Integers and bools: ints wrap to the width; to f16 through f32 like
   * the reference ((float)v, then rounded to half). */
  if (to == KILN_DTYPE_F16) return tir_cast(c, KILN_DTYPE_F16, kiln_lew_f32(c, v));
  if (to == KILN_DTYPE_F32) return kiln_lew_f32(c, v);
  if (from == KILN_DTYPE_BOOL) v = tir_select(c, bool01(c, v), tir_const(c, to, 1), tir_const(c, to, 0));
  return tir_cast(c, to, v);
}

/* Cast to or from float8 / int4 (ir/ops/elementwise_cast.c's rules): |v|
 * is the loaded storage value of a |from| tensor (u8 codes for float8, i8 /
 * u8 values for int4), the result the storage value of |to|. */
static const tir_expr_t* convert_low(tir_ctx_t* c, kiln_dtype_t from, kiln_dtype_t to, bool sat,
                                     const tir_expr_t* v) {
  const tir_expr_t* i32 = NULL;
  if (kiln_dtype_is_f8(from)) { /* decoded to f32, then as an f32 */
    i32 = tir_const(c, KILN_DTYPE_I32, (double)(from - KILN_DTYPE_F8E4M3FN));
    v = tir_call(c, TIR_F8_DECODE, 2, tir_cast(c, KILN_DTYPE_I32, v), i32, NULL);
    from = KILN_DTYPE_F32;
  } else if (kiln_dtype_is_int4(from)) { /* its value, as the storage integer */
    from = kiln_dtype_storage(from);
  }
  if (kiln_dtype_is_f8(to)) {
    if (from != KILN_DTYPE_F32)
      v = kiln_dtype_is_float(from) || from == KILN_DTYPE_BOOL ? convert(c, from, KILN_DTYPE_F32, v)
                                                              : kiln_lew_f32(c, v);
    const double mode = 2.0 * (double)(to - KILN_DTYPE_F8E4M3FN) + (sat ? 1.0 : 0.0);
    return tir_cast(c, KILN_DTYPE_U8,
                    tir_call(c, TIR_F8_ENCODE, 2, v, tir_const(c, KILN_DTYPE_I32, mode), NULL));
  }
  if (kiln_dtype_is_int4(to)) { /* clipped, then rounded to nearest even; NaN -> 0 */
    const double lo = to == KILN_DTYPE_I4 ? -8 : 0, hi = to == KILN_DTYPE_I4 ? 7 : 15;
    const kiln_dtype_t st = kiln_dtype_storage(to);
    if (!kiln_dtype_is_float(from)) {
      if (from == KILN_DTYPE_BOOL) return convert(c, from, st, v);
      const tir_expr_t* w = widen(c, v);
      w = tir_bin(c, TIR_MIN, tir_bin(c, TIR_MAX, w, tir_const(c, w->dtype, lo)), tir_const(c, w->dtype, hi));
      return tir_cast(c, st, w);
    }
    const kiln_dtype_t ft = from == KILN_DTYPE_F64 ? KILN_DTYPE_F64 : KILN_DTYPE_F32;
    if (from != ft) v = tir_cast(c, ft, v);
    v = tir_select(c, tir_bin(c, TIR_EQ, v, v), v, tir_const(c, ft, 0));
    v = tir_bin(c, TIR_MIN, tir_bin(c, TIR_MAX, v, tir_const(c, ft, lo)), tir_const(c, ft, hi));
    return tir_cast(c, st, tir_call(c, TIR_ROUND_EVEN, 1, v, NULL, NULL));
  }
  return convert(c, from, to, v);
}

static kiln_status_t lower_cast(kiln_lower_ctx_t* ctx) {
  TRY(need(ctx, 0, M_ALL));
  TRY(need_out(ctx));
  tir_ctx_t* c = ctx->tir;
  const tir_buffer_t* x = ctx->in[0];
  const tir_buffer_t* y = ctx->out[0];
  /* Same dtype: the output is the input, except for a constant input
   * (CastLike of a constant to a run-time tensor's dtype), which a program
   * may not alias: that is copied. */
  const kiln_dtype_t xt = ctx->in_tensor[0]->dtype, yt = ctx->out_tensor[0]->dtype;
  /* float8 / int4 (byte buffers, kiln_dtype_storage): the same bytes only
   * for the same dtype, or int4 / uint4 widened to the i8 / u8 it is held in */
  const bool low = kiln_dtype_storage(xt) != xt || kiln_dtype_storage(yt) != yt;
  const bool same = low ? xt == yt || (kiln_dtype_is_int4(xt) && kiln_dtype_storage(xt) == yt)
                        : x->dtype == y->dtype;
  if (same && !kiln_lew_const_in(ctx, 0)) return kiln_lower_alias(ctx, 0, 0);
  if (tir_buffer_numel(y) == 0) return NULL;
  int64_t sat = 1;
  TRY(kiln_attr_int(ctx->node, "saturate", 1, &sat));
  kiln_lew_nest_t n;
  kiln_lew_nest_buf(c, &n, y);
  const tir_expr_t* ld = kiln_lew_bload(c, &n, x);
  const tir_expr_t* v = !low ? convert(c, x->dtype, y->dtype, ld)
                        : same ? ld
                               : convert_low(c, xt, yt, sat != 0, ld);
  const tir_stmt_t* body = kiln_lew_loops(c, &n, kiln_lew_store(c, &n, y, v));
  const tir_buffer_t* params[2] = {x, y};
  return kiln_lew_emit(ctx, &n, body, 2, params, true);
}

/* ---- table ------------------------------------------------------------------- */

/* The lowering table: op type and lowering function of each line of the
 * family's op list (ir/ops/elementwise.def, which also holds the schema). */
#define KILN_OP(type, stem, min_in, max_in, min_out, max_out, flops, pattern, tmpl, lower) \
  {type, lower},
const kiln_lower_entry_t kiln_lower_elementwise[] = {
#include "ir/ops/elementwise.def"
};
#undef KILN_OP
const size_t kiln_lower_elementwise_count =
    sizeof kiln_lower_elementwise / sizeof kiln_lower_elementwise[0];
