/* Lowering of the quantized ops (ir/ops/nn_quant.c) to plain tensor-IR
 * loop nests, so every target prints them: one work-item (CPU: one
 * iteration of the PARALLEL loop) per output element, reading every operand
 * through a flat view with its index computed from the element's.
 *
 * The arithmetic is the reference's, in the same order and types:
 *   quantize    min(max(round_even(x / scale) + zp, lo), hi) in f32, then
 *               converted (exact: the value is an integer in range);
 *   dequantize  (f32(x) - f32(zp)) * scale in f32;
 *   products    an i32 PRIVATE accumulator of (a - a_zp) * (b - b_zp), the
 *               zero points subtracted in i32 before the multiply;
 *   requantize  round_even(f32(acc) * ((s_a * s_b) / s_y)) + y_zp, clamped.
 * Convolution taps outside the input are skipped (ONNX pads x - x_zp with
 * zeros); their indices are clamped as well, so the verifier can prove
 * every access in bounds. These are the correct, general kernels for every
 * target. On the CPU, QLinearConv with constant weights (what the "fold-qdq"
 * pass makes of QDQ models) instead goes through Conv's tiled GEMM lowering
 * as an int8 GEMM (kiln_lower_nn_qlinear_conv below; nn_conv_quantized):
 * i16 channel pairs, i32 sums by the dot2_i16 intrinsic (vpmaddwd, vpdpwssd
 * with VNNI), this requantization as its epilogue; QLinearMatMul with a
 * constant 2-D B and per-tensor A parameters likewise (qmm_* below). */
#include <math.h>
#include <stdlib.h>

#include "ir/ops/nn_quant.h"
#include "lowering/lower_nn_impl.h"

/* A flat view [numel] of buffer |b| (a rank-0 scalar becomes [1]). */
static kiln_status_t flat(kiln_lower_ctx_t* ctx, const tir_buffer_t* b, const char* name,
                          const tir_buffer_t** out) {
  *out = NULL;
  if (!b) return NULL;
  const int64_t n = tir_buffer_numel(b);
  return nn_view(ctx, b, name, 1, &n, out);
}

static const tir_expr_t* ld(nn_kb_t* kb, const tir_buffer_t* b, const tir_expr_t* i) {
  return tir_load(kb->t, b, NN_IDX(i));
}

/* f32(b[i]) or |def| when b is absent. */
static const tir_expr_t* ldf_or(nn_kb_t* kb, const tir_buffer_t* b, const tir_expr_t* i,
                                double def) {
  return b ? nn_ldf(kb, b, NN_IDX(i)) : nn_f(kb, def);
}

/* i32(b[i]) or 0 when b is absent. */
static const tir_expr_t* ldi_or0(nn_kb_t* kb, const tir_buffer_t* b, const tir_expr_t* i) {
  if (!b) return tir_const(kb->t, KILN_DTYPE_I32, 0);
  return tir_cast(kb->t, KILN_DTYPE_I32, ld(kb, b, i));
}

/* Index of a per-tensor (one element) or per-channel parameter. */
static const tir_expr_t* chan(nn_kb_t* kb, const tir_buffer_t* p, const tir_expr_t* c) {
  return p && tir_buffer_numel(p) > 1 ? c : nn_i(kb, 0);
}

/* min(max(v, lo), hi) in f32, then converted to |t|; NaN gives lo, as in
 * the reference (the dialects' min/max propagate NaN, and converting NaN
 * to an integer is undefined). The select also lets the printer prove the
 * value's range, so the conversion is a plain (int32_t) cast that vectorizes
 * (without it: kiln_f2i, and the GEMM epilogues ran scalar). */
static const tir_expr_t* saturate(nn_kb_t* kb, kiln_dtype_t t, const tir_expr_t* v) {
  int64_t lo = 0, hi = 0;
  kiln_nn_quant_range(t, &lo, &hi); /* i4 / u4: their ranges, stored as i8 / u8 */
  v = tir_select(kb->t, tir_bin(kb->t, TIR_EQ, v, v), v, nn_f(kb, (double)lo));
  v = tir_bin(kb->t, TIR_MIN, tir_bin(kb->t, TIR_MAX, v, nn_f(kb, (double)lo)),
              nn_f(kb, (double)hi));
  return tir_cast(kb->t, kiln_dtype_storage(t), v);
}

/* f32 of element |idx| of |b|, whose graph tensor has dtype |t|: float8
 * codes decoded (TIR_F8_DECODE), anything else converted (nn_ldf). */
static const tir_expr_t* ldq(nn_kb_t* kb, kiln_dtype_t t, const tir_buffer_t* b,
                             const tir_expr_t* const* idx) {
  if (!kiln_dtype_is_f8(t)) return nn_ldf(kb, b, idx);
  const tir_expr_t* code = tir_cast(kb->t, KILN_DTYPE_I32, tir_load(kb->t, b, idx));
  return tir_call(kb->t, TIR_F8_DECODE, 2, code,
                  tir_const(kb->t, KILN_DTYPE_I32, (double)(t - KILN_DTYPE_F8E4M3FN)), NULL);
}

/* |v| (f32) rounded to float8 dtype |t| as a u8 code (TIR_F8_ENCODE). */
static const tir_expr_t* f8_code(nn_kb_t* kb, kiln_dtype_t t, bool sat, const tir_expr_t* v) {
  const double mode = 2.0 * (double)(t - KILN_DTYPE_F8E4M3FN) + (sat ? 1.0 : 0.0);
  return tir_cast(kb->t, KILN_DTYPE_U8,
                  tir_call(kb->t, TIR_F8_ENCODE, 2, v, tir_const(kb->t, KILN_DTYPE_I32, mode), NULL));
}

static const tir_expr_t* round_even(nn_kb_t* kb, const tir_expr_t* v) {
  return tir_call(kb->t, TIR_ROUND_EVEN, 1, v, NULL, NULL);
}

/* One PARALLEL loop over |n| elements around |body(e)|. */
static kiln_status_t emit_each(nn_kb_t* kb, tir_var_t* ve, int64_t n, const tir_stmt_t* body) {
  if (n > 1) nn_parallel(kb, ve);
  return nn_emit(kb, nn_for(kb, ve, n, body));
}

/* ---- QuantizeLinear / DequantizeLinear ------------------------------------ */

/* The parameter element of element |e| (kiln_nn_qp_at as TIR). */
static const tir_expr_t* qp_idx(nn_kb_t* kb, const kiln_nn_qp_t* q, const tir_expr_t* e) {
  if (q->kind == KILN_NN_QP_TENSOR) return nn_i(kb, 0);
  const tir_expr_t* a = nn_modc(kb, nn_divc(kb, e, q->inner), q->dim);
  if (q->kind == KILN_NN_QP_AXIS) return a;
  const tir_expr_t* outer = nn_mulc(kb, nn_divc(kb, e, q->inner * q->dim), q->nb * q->inner);
  return nn_add(kb, nn_add(kb, outer, nn_mulc(kb, nn_divc(kb, a, q->block), q->inner)),
                nn_modc(kb, e, q->inner));
}

typedef struct qlin_s {
  const tir_buffer_t *x, *s, *z, *y;
  kiln_nn_qp_t q;
  int64_t n;
} qlin_t;

static kiln_status_t qlin_setup(nn_kb_t* kb, qlin_t* l) {
  kiln_lower_ctx_t* ctx = kb->ctx;
  const kiln_node_t* node = ctx->node;
  int64_t axis, block;
  KILN_RETURN_IF_ERROR(kiln_attr_int(node, "axis", 1, &axis));
  KILN_RETURN_IF_ERROR(kiln_attr_int(node, "block_size", 0, &block));
  memset(l, 0, sizeof *l);
  KILN_RETURN_IF_ERROR(kiln_nn_qp_setup(node->op_type, &ctx->in_tensor[0]->shape,
                                        ctx->in_tensor[0]->name, &ctx->in_tensor[1]->shape,
                                        ctx->in_tensor[1]->name, axis, block, &l->q));
  l->n = tir_buffer_numel(ctx->in[0]);
  KILN_RETURN_IF_ERROR(flat(ctx, ctx->in[0], "xf", &l->x));
  KILN_RETURN_IF_ERROR(flat(ctx, ctx->in[1], "sf", &l->s));
  KILN_RETURN_IF_ERROR(flat(ctx, ctx->n_in > 2 ? ctx->in[2] : NULL, "zf", &l->z));
  return flat(ctx, ctx->out[0], "yf", &l->y);
}

kiln_status_t kiln_lower_nn_quantize_linear(kiln_lower_ctx_t* ctx) {
  if (tir_buffer_numel(ctx->out[0]) == 0) return NULL;
  nn_kb_t kb;
  nn_kb_init(&kb, ctx);
  qlin_t l;
  KILN_RETURN_IF_ERROR(qlin_setup(&kb, &l));
  tir_var_t* ve = nn_var(&kb, "e");
  const tir_expr_t *e = nn_v(&kb, ve), *p = qp_idx(&kb, &l.q, e);
  const kiln_dtype_t yt = ctx->out_tensor[0]->dtype;
  /* a true division: x * (1 / scale) moves values off their ties */
  const tir_expr_t* v =
      tir_bin(kb.t, TIR_DIV, nn_ldf(&kb, l.x, NN_IDX(e)), nn_ldf(&kb, l.s, NN_IDX(p)));
  if (kiln_dtype_is_f8(yt)) {
    int64_t sat;
    KILN_RETURN_IF_ERROR(kiln_attr_int(ctx->node, "saturate", 1, &sat));
    if (l.z) v = tir_add(kb.t, v, ldq(&kb, yt, l.z, NN_IDX(p)));
    return emit_each(&kb, ve, l.n, tir_store(kb.t, l.y, NN_IDX(e), f8_code(&kb, yt, sat != 0, v)));
  }
  v = round_even(&kb, v);
  if (l.z) v = tir_add(kb.t, v, nn_ldf(&kb, l.z, NN_IDX(p)));
  return emit_each(&kb, ve, l.n, tir_store(kb.t, l.y, NN_IDX(e), saturate(&kb, yt, v)));
}

kiln_status_t kiln_lower_nn_dequantize_linear(kiln_lower_ctx_t* ctx) {
  if (tir_buffer_numel(ctx->out[0]) == 0) return NULL;
  nn_kb_t kb;
  nn_kb_init(&kb, ctx);
  qlin_t l;
  KILN_RETURN_IF_ERROR(qlin_setup(&kb, &l));
  tir_var_t* ve = nn_var(&kb, "e");
  const tir_expr_t *e = nn_v(&kb, ve), *p = qp_idx(&kb, &l.q, e);
  const kiln_dtype_t xt = ctx->in_tensor[0]->dtype;
  const tir_expr_t* d = ldq(&kb, xt, l.x, NN_IDX(e));
  if (l.z) d = tir_sub(kb.t, d, ldq(&kb, xt, l.z, NN_IDX(p)));
  const tir_expr_t* v = tir_mul(kb.t, d, nn_ldf(&kb, l.s, NN_IDX(p)));
  return emit_each(&kb, ve, l.n, nn_stf(&kb, l.y, NN_IDX(e), v));
}

/* ---- DynamicQuantizeLinear ------------------------------------------------ */

/* mx[0] = max(0, max src_hi[base + i]) and mn[0] = min(0, min
 * src_lo[base + i]) over i in [0, len), with base + i < n when |guard|. */
static const tir_stmt_t* minmax(nn_kb_t* kb, const tir_buffer_t* mx, const tir_buffer_t* mn,
                                const tir_buffer_t* src_hi, const tir_buffer_t* src_lo,
                                const tir_expr_t* base, int64_t len, int64_t n, bool guard) {
  tir_ctx_t* t = kb->t;
  const tir_expr_t* z = nn_i(kb, 0);
  tir_var_t* vi = nn_var(kb, "i");
  const tir_expr_t* i = nn_add(kb, base, nn_v(kb, vi));
  const tir_stmt_t* upd[2] = {
      tir_store(t, mx, NN_IDX(z), tir_bin(t, TIR_MAX, tir_load(t, mx, NN_IDX(z)), nn_ldf(kb, src_hi, NN_IDX(i)))),
      tir_store(t, mn, NN_IDX(z), tir_bin(t, TIR_MIN, tir_load(t, mn, NN_IDX(z)), nn_ldf(kb, src_lo, NN_IDX(i))))};
  const tir_stmt_t* body = tir_seq(t, 2, upd);
  if (guard) body = tir_if(t, tir_bin(t, TIR_LT, i, nn_i(kb, n)), body, NULL);
  const tir_stmt_t* s[3] = {tir_store(t, mx, NN_IDX(z), nn_f(kb, 0.0)), tir_store(t, mn, NN_IDX(z), nn_f(kb, 0.0)),
                            nn_for(kb, vi, len, body)};
  return tir_seq(t, 3, s);
}

/* Three kernels: DQ_CHUNKS work-items each find the min and max of a chunk
 * (so no work-item loops over the whole tensor: GPU drivers limit loop
 * trips), one combines them into the scale and zero point, then one
 * work-item per element quantizes. Min and max are exact in any order, so
 * this equals the reference's single pass. */
#define DQ_CHUNKS 1024
kiln_status_t kiln_lower_nn_dynamic_quantize_linear(kiln_lower_ctx_t* ctx) {
  nn_kb_t kb;
  nn_kb_init(&kb, ctx);
  tir_ctx_t* t = kb.t;
  const int64_t n = tir_buffer_numel(ctx->in[0]), one = 1;
  const int64_t nch = n < DQ_CHUNKS ? (n > 0 ? n : 1) : DQ_CHUNKS, len = (n + nch - 1) / nch;
  const tir_buffer_t *x, *y, *ys, *yz, *pmx, *pmn;
  KILN_RETURN_IF_ERROR(flat(ctx, ctx->in[0], "xf", &x));
  KILN_RETURN_IF_ERROR(flat(ctx, ctx->out[0], "yf", &y));
  /* the scale and zero point are needed even when those outputs are not */
  if (ctx->out[1]) KILN_RETURN_IF_ERROR(flat(ctx, ctx->out[1], "sf", &ys));
  else KILN_RETURN_IF_ERROR(kiln_lower_temp(ctx, "scale", KILN_DTYPE_F32, 1, &one, &ys));
  if (ctx->out[2]) KILN_RETURN_IF_ERROR(flat(ctx, ctx->out[2], "zf", &yz));
  else KILN_RETURN_IF_ERROR(kiln_lower_temp(ctx, "zp", KILN_DTYPE_U8, 1, &one, &yz));
  KILN_RETURN_IF_ERROR(kiln_lower_temp(ctx, "pmax", KILN_DTYPE_F32, 1, &nch, &pmx));
  KILN_RETURN_IF_ERROR(kiln_lower_temp(ctx, "pmin", KILN_DTYPE_F32, 1, &nch, &pmn));
  const tir_buffer_t* mx = tir_buffer(t, "mx", KILN_DTYPE_F32, 1, &one, TIR_SCOPE_PRIVATE);
  const tir_buffer_t* mn = tir_buffer(t, "mn", KILN_DTYPE_F32, 1, &one, TIR_SCOPE_PRIVATE);
  const tir_expr_t* z = nn_i(&kb, 0);
  const tir_expr_t *hi = tir_load(t, mx, NN_IDX(z)), *lo = tir_load(t, mn, NN_IDX(z));
  {
    tir_var_t* vc = nn_var(&kb, "c");
    const tir_expr_t* c = nn_v(&kb, vc);
    const tir_stmt_t* s[3] = {minmax(&kb, mx, mn, x, x, nn_mulc(&kb, c, len), len, n, nch * len != n),
                              tir_store(t, pmx, NN_IDX(c), hi), tir_store(t, pmn, NN_IDX(c), lo)};
    KILN_RETURN_IF_ERROR(emit_each(&kb, vc, nch, tir_alloc(t, mx, tir_alloc(t, mn, tir_seq(t, 3, s)))));
  }
  const tir_expr_t* range = tir_select(t, tir_bin(t, TIR_EQ, hi, lo), nn_f(&kb, 1.0), tir_sub(t, hi, lo));
  const tir_expr_t* scale = tir_bin(t, TIR_DIV, range, nn_f(&kb, 255.0));
  const tir_expr_t* zp = tir_sub(t, nn_f(&kb, 0.0), tir_bin(t, TIR_DIV, lo, tir_load(t, ys, NN_IDX(z))));
  /* rounding and clamping to integer bounds commute; a NaN range gives 0 */
  zp = saturate(&kb, KILN_DTYPE_U8, round_even(&kb, zp));
  const tir_stmt_t* s2[3] = {minmax(&kb, mx, mn, pmx, pmn, z, nch, nch, false), tir_store(t, ys, NN_IDX(z), scale),
                             tir_store(t, yz, NN_IDX(z), zp)};
  KILN_RETURN_IF_ERROR(nn_emit(&kb, tir_alloc(t, mx, tir_alloc(t, mn, tir_seq(t, 3, s2)))));
  if (n == 0) return NULL;
  tir_var_t* ve = nn_var(&kb, "e");
  const tir_expr_t* e = nn_v(&kb, ve);
  const tir_expr_t* v = round_even(
      &kb, tir_bin(t, TIR_DIV, nn_ldf(&kb, x, NN_IDX(e)), nn_ldf(&kb, ys, NN_IDX(z))));
  v = tir_add(t, v, nn_ldf(&kb, yz, NN_IDX(z)));
  return emit_each(&kb, ve, n, tir_store(t, y, NN_IDX(e), saturate(&kb, KILN_DTYPE_U8, v)));
}

/* ---- integer products ----------------------------------------------------- */

/* Operands of one integer product kernel: flat views and the i32 zero
 * points (per tensor, or per channel |ch|). */
typedef struct iprod_s {
  const tir_buffer_t *a, *b, *az, *bz, *y;
  const tir_expr_t* row; /* the row of a (per-row a parameters), or NULL */
} iprod_t;

/* Requantization inputs of the QLinear ops (flat views; bias may be NULL).
 * With constant scales and zero point the GEMM paths set |mult| (a [n]
 * constant of (s_a * s_b[c]) / s_y, computed in f32 as the kernel would)
 * and the zero point as an immediate: no division and no loads that may
 * alias the int8 stores in the epilogue. */
typedef struct requant_s {
  const tir_buffer_t *as, *bs, *ys, *yz, *bias;
  const tir_buffer_t* mult;
  bool yz_is_imm;
  double yz_imm;
} requant_t;

static kiln_status_t flats(kiln_lower_ctx_t* ctx, const int32_t* idx, int32_t n,
                           const tir_buffer_t** out) {
  static const char* names[] = {"q0", "q1", "q2", "q3", "q4", "q5", "q6", "q7", "q8"};
  for (int32_t k = 0; k < n; ++k) {
    const tir_buffer_t* b = idx[k] >= 0 && idx[k] < ctx->n_in ? ctx->in[idx[k]] : NULL;
    KILN_RETURN_IF_ERROR(flat(ctx, b, names[k], &out[k]));
  }
  return NULL;
}

/* The value stored for sum |acc| of output channel |c|: acc itself (i32
 * outputs), or requantized. */
static const tir_expr_t* finish(nn_kb_t* kb, const iprod_t* p, const requant_t* r,
                                const tir_expr_t* acc, const tir_expr_t* c) {
  tir_ctx_t* t = kb->t;
  if (!r) return acc;
  const tir_expr_t* z = nn_i(kb, 0);
  if (r->bias) acc = tir_add(t, acc, ldi_or0(kb, r->bias, chan(kb, r->bias, c)));
  const tir_expr_t* mult;
  if (r->mult) {
    mult = nn_ldf(kb, r->mult, NN_IDX(chan(kb, r->mult, c)));
  } else {
    const tir_expr_t* as = nn_ldf(kb, r->as, NN_IDX(chan(kb, r->as, p->row ? p->row : z)));
    mult = tir_bin(t, TIR_DIV, tir_mul(t, as, nn_ldf(kb, r->bs, NN_IDX(chan(kb, r->bs, c)))),
                   nn_ldf(kb, r->ys, NN_IDX(z)));
  }
  const tir_expr_t* v = round_even(kb, tir_mul(t, tir_cast(t, KILN_DTYPE_F32, acc), mult));
  v = tir_add(t, v, r->yz_is_imm ? nn_f(kb, r->yz_imm) : ldf_or(kb, r->yz, z, 0.0));
  return saturate(kb, p->y->dtype, v);
}

/* acc += (a[ai...] - a_zp[row]) * (b[bi] - b_zp[c]) in i32. */
static const tir_stmt_t* mac(nn_kb_t* kb, const iprod_t* p, const tir_buffer_t* acc,
                             const tir_buffer_t* a, const tir_expr_t* const* ai,
                             const tir_expr_t* bi, const tir_expr_t* c) {
  tir_ctx_t* t = kb->t;
  const tir_expr_t* z = nn_i(kb, 0);
  const tir_expr_t* av = tir_sub(t, tir_cast(t, KILN_DTYPE_I32, tir_load(t, a, ai)),
                                 ldi_or0(kb, p->az, chan(kb, p->az, p->row ? p->row : z)));
  const tir_expr_t* bv = tir_sub(t, ldi_or0(kb, p->b, bi), ldi_or0(kb, p->bz, chan(kb, p->bz, c)));
  return tir_store(t, acc, NN_IDX(z), tir_add(t, tir_load(t, acc, NN_IDX(z)), tir_mul(t, av, bv)));
}

/* Wraps the reduction |loops| (built around |acc|) and the store of
 * finish(acc) to y[e] into one work-item's body. */
static const tir_stmt_t* reduce_store(nn_kb_t* kb, const iprod_t* p, const requant_t* r,
                                      const tir_buffer_t* acc, const tir_stmt_t* loops,
                                      const tir_expr_t* e, const tir_expr_t* c) {
  tir_ctx_t* t = kb->t;
  const tir_expr_t* z = nn_i(kb, 0);
  const tir_stmt_t* s[3] = {tir_store(t, acc, NN_IDX(z), tir_const(t, KILN_DTYPE_I32, 0)), loops,
                            tir_store(t, p->y, NN_IDX(e), finish(kb, p, r, tir_load(t, acc, NN_IDX(z)), c))};
  return tir_alloc(t, acc, tir_seq(t, 3, s));
}

/* Offset (in matrices) of operand |s|'s matrix for output batch |b| over
 * the output batch dims ob[0..nob), broadcasting dims of size 1. */
static const tir_expr_t* batch_off(nn_kb_t* kb, const tir_buffer_t* s, const int64_t* ob,
                                   int32_t nob, const tir_expr_t* b) {
  const int32_t sb = s->rank - 2;
  const tir_expr_t* off = nn_i(kb, 0);
  int64_t mul = 1, div = 1;
  for (int32_t i = nob - 1; i >= 0; --i) {
    const int32_t j = i - (nob - sb);
    if (j >= 0 && s->shape[j] != 1)
      off = nn_add(kb, off, nn_mulc(kb, nn_modc(kb, nn_divc(kb, b, div), ob[i]), mul));
    if (j >= 0) mul *= s->shape[j];
    div *= ob[i];
  }
  return off;
}

/* Flat views of a product's operands (inputs ops[0..4): a, b and their
 * zero points) and output, and with |rq| (inputs: a, b and y scales, y
 * zero point) and bias input |bias_i| (-1: none) its requantization,
 * pointed to by *rp. */
static kiln_status_t operands(kiln_lower_ctx_t* ctx, const int32_t* ops, const int32_t* rq,
                              int32_t bias_i, iprod_t* p, requant_t* r, requant_t** rp) {
  const tir_buffer_t* f[4];
  KILN_RETURN_IF_ERROR(flats(ctx, ops, 4, f));
  *p = (iprod_t){f[0], f[1], f[2], f[3], NULL, NULL};
  KILN_RETURN_IF_ERROR(flat(ctx, ctx->out[0], "yf", &p->y));
  if (!rq) return NULL;
  KILN_RETURN_IF_ERROR(flats(ctx, rq, 4, f));
  *r = (requant_t){f[0], f[1], f[2], f[3], NULL, NULL, false, 0.0};
  const tir_buffer_t* bias = bias_i >= 0 && bias_i < ctx->n_in ? ctx->in[bias_i] : NULL;
  KILN_RETURN_IF_ERROR(flat(ctx, bias, "bias", &r->bias));
  *rp = r;
  return NULL;
}

static kiln_status_t lower_mm(kiln_lower_ctx_t* ctx, const int32_t* ops, const int32_t* rq) {
  const tir_buffer_t *A = ctx->in[ops[0]], *B = ctx->in[ops[1]], *Y = ctx->out[0];
  const int64_t n_all = tir_buffer_numel(Y);
  if (n_all == 0) return NULL;
  nn_kb_t kb;
  nn_kb_init(&kb, ctx);
  tir_ctx_t* t = kb.t;
  iprod_t p;
  requant_t r, *rp = NULL;
  KILN_RETURN_IF_ERROR(operands(ctx, ops, rq, -1, &p, &r, &rp));
  const int32_t nob = Y->rank - 2;
  const int64_t M = Y->shape[nob], N = Y->shape[nob + 1], K = A->shape[A->rank - 1], one = 1;
  tir_var_t *ve = nn_var(&kb, "e"), *vk = nn_var(&kb, "k");
  const tir_expr_t *e = nn_v(&kb, ve), *k = nn_v(&kb, vk);
  const tir_expr_t *n = nn_modc(&kb, e, N), *m = nn_modc(&kb, nn_divc(&kb, e, N), M);
  const tir_expr_t* b = nn_divc(&kb, e, M * N);
  const tir_expr_t* ao = nn_mulc(&kb, batch_off(&kb, A, Y->shape, nob, b), M * K);
  const tir_expr_t* bo = nn_mulc(&kb, batch_off(&kb, B, Y->shape, nob, b), K * N);
  const tir_expr_t* ai = nn_add(&kb, ao, nn_add(&kb, nn_mulc(&kb, m, K), k));
  const tir_expr_t* bi = nn_add(&kb, bo, nn_add(&kb, nn_mulc(&kb, k, N), n));
  p.row = m;
  const tir_buffer_t* acc = tir_buffer(t, "acc", KILN_DTYPE_I32, 1, &one, TIR_SCOPE_PRIVATE);
  const tir_stmt_t* loops = nn_for(&kb, vk, K, mac(&kb, &p, acc, p.a, NN_IDX(ai), bi, n));
  return emit_each(&kb, ve, n_all, reduce_store(&kb, &p, rp, acc, loops, e, n));
}

/* With the scales (inputs rq[0..3): a, b, y scales, y zero point) all
 * constant and a's per tensor: r->mult = (s_a * s_b[c]) / s_y for the |n|
 * channels as a constant (f32 arithmetic, as finish() would compute it)
 * and y's zero point as an immediate (r's buffers are then not needed).
 * Otherwise r stays as it is. */
static kiln_status_t const_requant(kiln_lower_ctx_t* ctx, const int32_t* rq, int64_t n,
                                   requant_t* r) {
  for (int32_t k = 0; k < 4; ++k)
    if (rq[k] >= ctx->n_in || !nn_is_const(ctx, rq[k])) return NULL;
  const kiln_array_t *as = &ctx->in_tensor[rq[0]]->value, *bs = &ctx->in_tensor[rq[1]]->value;
  const kiln_array_t *ys = &ctx->in_tensor[rq[2]]->value, *yz = &ctx->in_tensor[rq[3]]->value;
  const int64_t nb = kiln_array_numel(bs);
  if (kiln_array_numel(as) != 1 || kiln_array_numel(ys) != 1 || kiln_array_numel(yz) != 1 ||
      (nb != 1 && nb != n))
    return NULL;
  float* m = malloc(sizeof(float) * (size_t)(nb > 0 ? nb : 1));
  if (!m) return kiln_make_status(KILN_OUT_OF_MEMORY, "%s: requantization", ctx->node->name);
  const float a = (float)kiln_load_f64(as->dtype, as->data, 0), y = (float)kiln_load_f64(ys->dtype, ys->data, 0);
  for (int64_t c = 0; c < nb; ++c) {
    const float b = (float)kiln_load_f64(bs->dtype, bs->data, (size_t)c);
    m[c] = a * b / y; /* f32 operations in the kernel's order */
  }
  KILN_RETURN_IF_ERROR(nn_const_f32(ctx, "mult", 1, &nb, m, &r->mult));
  r->yz_is_imm = true;
  r->yz_imm = (double)kiln_load_i64(yz->dtype, yz->data, 0);
  return NULL;
}

/* QLinearMatMul as the CPU's int8 GEMM (nn_gemm_t.idot): A [..., M, K]
 * (per-tensor scale and zero point) read as rows of i16 pairs of a - a_zp
 * into the GEMM's L panels, the constant B [K, N] packed as pairs of
 * b - b_zp[n] (one byte each when they fit int8), i32 sums, this
 * requantization as the epilogue. */
typedef struct qmm_s {
  iprod_t p;
  requant_t r;
  const float* bval; /* b - b_zp, [K][N] (packing only) */
  int64_t K, N;
  bool w8;
  bool requant; /* QLinearMatMul; MatMulInteger stores the sums */
} qmm_t;

static const tir_expr_t* qmm_load_a(nn_kb_t* kb, const nn_gemm_t* g, const tir_expr_t* b,
                                    const tir_expr_t* m, const tir_expr_t* kp) {
  const qmm_t* q = g->user;
  tir_ctx_t* t = kb->t;
  (void)b;
  const tir_expr_t* zp = ldi_or0(kb, q->p.az, nn_i(kb, 0));
  const tir_expr_t* i0 = nn_add(kb, nn_mulc(kb, m, q->K), nn_mulc(kb, kp, 2));
  const tir_expr_t* lo = tir_sub(t, tir_cast(t, KILN_DTYPE_I32, ld(kb, q->p.a, i0)), zp);
  const tir_expr_t* hi;
  if (q->K % 2 == 0) {
    hi = tir_sub(t, tir_cast(t, KILN_DTYPE_I32, ld(kb, q->p.a, nn_addc(kb, i0, 1))), zp);
  } else { /* the last pair of a row has no second column */
    const tir_expr_t* ok = tir_bin(t, TIR_LT, kp, nn_i(kb, q->K / 2));
    const tir_expr_t* i1 = nn_clamp(kb, nn_addc(kb, i0, 1), 0, tir_buffer_numel(q->p.a) - 1);
    hi = tir_select(t, ok, tir_sub(t, tir_cast(t, KILN_DTYPE_I32, ld(kb, q->p.a, i1)), zp),
                    tir_const(t, KILN_DTYPE_I32, 0));
  }
  return tir_add(t, tir_bin(t, TIR_BAND, lo, tir_const(t, KILN_DTYPE_I32, 0xffff)),
                 tir_mul(t, hi, tir_const(t, KILN_DTYPE_I32, 65536)));
}

/* R element (n, kp): the pair b[2kp][n], b[2kp + 1][n] (0 past K). */
static double qmm_get_b(const void* user, int64_t b, int64_t n, int64_t kp) {
  const qmm_t* q = user;
  (void)b;
  const int32_t lo = (int32_t)q->bval[2 * kp * q->N + n];
  const int32_t hi = 2 * kp + 1 < q->K ? (int32_t)q->bval[(2 * kp + 1) * q->N + n] : 0;
  if (q->w8) return (double)(int16_t)(uint16_t)(((uint32_t)lo & 0xffu) | (((uint32_t)hi & 0xffu) << 8));
  return (double)(int32_t)(((uint32_t)lo & 0xffffu) | ((uint32_t)hi << 16));
}

static const tir_expr_t* qmm_epi(nn_kb_t* kb, const nn_gemm_t* g, const tir_expr_t* b,
                                 const tir_expr_t* m, const tir_expr_t* n, const tir_expr_t* acc) {
  const qmm_t* q = g->user;
  (void)b;
  (void)m;
  return finish(kb, &q->p, q->requant ? &q->r : NULL, acc, n);
}

static const tir_stmt_t* qmm_store(nn_kb_t* kb, const nn_gemm_t* g, const tir_expr_t* b,
                                   const tir_expr_t* m, const tir_expr_t* n, const tir_expr_t* v) {
  const qmm_t* q = g->user;
  (void)b;
  return tir_store(kb->t, q->p.y, NN_IDX(nn_add(kb, nn_mulc(kb, m, q->N), n)), tir_cast(kb->t, q->p.y->dtype, v));
}

/* Input |i| when present, else NULL. */
static const tir_buffer_t* opt_buf(const kiln_lower_ctx_t* ctx, int32_t i) {
  return i < ctx->n_in ? ctx->in[i] : NULL;
}

/* b - b_zp[n] of a constant 2-D B (input |bi|) with constant (or absent)
 * zero points |bzi| as f32 (*out NULL when the GEMM does not apply: A's
 * zero point |azi| per row, B batched or not constant). */
static kiln_status_t qmm_const_b(kiln_lower_ctx_t* ctx, int32_t bi, int32_t bzi, int32_t azi,
                                 float** out) {
  *out = NULL;
  const tir_buffer_t *bz = opt_buf(ctx, bzi), *az = opt_buf(ctx, azi);
  if (ctx->target != KILN_TARGET_CLASS_CPU || !nn_is_const(ctx, bi) || (bz && !nn_is_const(ctx, bzi)) ||
      ctx->in[bi]->rank != 2 || (az && tir_buffer_numel(az) != 1))
    return NULL;
  const kiln_array_t* w = &ctx->in_tensor[bi]->value;
  const kiln_array_t* z = bz ? &ctx->in_tensor[bzi]->value : NULL;
  const int64_t n = kiln_array_numel(w), nz = z ? kiln_array_numel(z) : 1, N = ctx->in[bi]->shape[1];
  if (nz != 1 && nz != N) return NULL;
  float* f;
  KILN_RETURN_IF_ERROR(nn_alloc_f32(n, ctx->node->op_type, &f));
  for (int64_t i = 0; i < n; ++i)
    f[i] = (float)(kiln_load_f64(w->dtype, w->data, (size_t)i) -
                   (z ? kiln_load_f64(z->dtype, z->data, (size_t)(nz == 1 ? 0 : i % N)) : 0.0));
  *out = f;
  return NULL;
}

/* The int8 GEMM of A (input 0, its zero point |azi|) by the packed |bval|
 * (B is input |bi|), requantized by inputs |rq| (QLinearMatMul) or stored
 * as the i32 sums (MatMulInteger, |rq| NULL). Frees |bval|. */
static kiln_status_t qmm_gemm(kiln_lower_ctx_t* ctx, float* bval, int32_t bi, int32_t azi,
                              const int32_t* rq) {
  const tir_buffer_t* Y = ctx->out[0];
  qmm_t q;
  memset(&q, 0, sizeof q);
  q.bval = bval;
  q.K = ctx->in[bi]->shape[0], q.N = ctx->in[bi]->shape[1];
  q.w8 = true;
  q.requant = rq != NULL;
  for (int64_t i = 0; i < q.K * q.N && q.w8; ++i) q.w8 = bval[i] >= -128.0f && bval[i] <= 127.0f;
  nn_kb_t kb;
  nn_kb_init(&kb, ctx);
  nn_gemm_t g;
  memset(&g, 0, sizeof g);
  /* views of what the kernel reads only (B and its zero points are packed) */
  const tir_buffer_t* f[4];
  kiln_status_t s = NULL;
  if (tir_buffer_numel(Y) > 0) {
    s = flat(ctx, ctx->in[0], "af", &q.p.a);
    if (!s) s = flat(ctx, opt_buf(ctx, azi), "az", &q.p.az);
    if (!s) s = flat(ctx, Y, "yf", &q.p.y);
    if (!s && rq) s = const_requant(ctx, rq, q.N, &q.r);
    if (!s && rq && !q.r.mult) s = flats(ctx, rq, 4, f);
    if (!s && rq && !q.r.mult) q.r = (requant_t){f[0], f[1], f[2], f[3], NULL, NULL, false, 0.0};
  }
  if (!s && tir_buffer_numel(Y) > 0) {
    g.batch = 1, g.M = tir_buffer_numel(Y) / q.N, g.N = q.N, g.K = (q.K + 1) / 2;
    g.idot = true, g.w8 = q.w8;
    g.user = &q;
    g.L.load = qmm_load_a;
    g.epi = qmm_epi;
    g.store = qmm_store;
    nn_gemm_tiles(ctx, &g);
    s = nn_pack_const(ctx, &g, "bpack", 1, q.N, g.K, g.nr, qmm_get_b, &q, &g.R.packed);
    if (!s) s = nn_gemm_emit(&kb, &g);
  }
  free(bval);
  return s;
}

kiln_status_t kiln_lower_nn_qlinear_matmul(kiln_lower_ctx_t* ctx) {
  static const int32_t ops[4] = {0, 3, 2, 5}, rq[4] = {1, 4, 6, 7};
  float* bval = NULL;
  if (tir_buffer_numel(ctx->in[1]) == 1) KILN_RETURN_IF_ERROR(qmm_const_b(ctx, 3, 5, 2, &bval));
  if (!bval) return lower_mm(ctx, ops, rq);
  return qmm_gemm(ctx, bval, 3, 2, rq);
}

/* MatMulInteger with a constant 2-D B: the same int8 GEMM, its i32 sums
 * stored as they are (exact: i32 accumulators). */
kiln_status_t kiln_lower_nn_matmul_integer(kiln_lower_ctx_t* ctx) {
  static const int32_t ops[4] = {0, 1, 2, 3};
  float* bval = NULL;
  KILN_RETURN_IF_ERROR(qmm_const_b(ctx, 1, 3, 2, &bval));
  if (!bval) return lower_mm(ctx, ops, NULL);
  return qmm_gemm(ctx, bval, 1, 2, NULL);
}

/* ---- integer convolutions ------------------------------------------------- */

static kiln_status_t lower_conv(kiln_lower_ctx_t* ctx, const int32_t* ops, const int32_t* rq,
                                int32_t bias_i) {
  const tir_buffer_t *X = ctx->in[ops[0]], *W = ctx->in[ops[1]], *Y = ctx->out[0];
  const int64_t n_all = tir_buffer_numel(Y);
  if (n_all == 0) return NULL;
  kiln_nn_window_t win;
  int64_t group;
  kiln_shape_t out;
  KILN_RETURN_IF_ERROR(kiln_nn_conv_shape(
      ctx->node, ctx->node->op_type, &ctx->in_tensor[ops[0]]->shape, ctx->in_tensor[ops[0]]->name,
      &ctx->in_tensor[ops[1]]->shape, ctx->in_tensor[ops[1]]->name, NULL, &win, &group, &out));
  kiln_nn_win3_t w3;
  kiln_nn_win3(&win, X->shape + 2, Y->shape + 2, &w3);
  nn_kb_t kb;
  nn_kb_init(&kb, ctx);
  tir_ctx_t* t = kb.t;
  iprod_t p;
  requant_t r, *rp = NULL;
  KILN_RETURN_IF_ERROR(operands(ctx, ops, rq, bias_i, &p, &r, &rp));
  const int64_t C = X->shape[1], M = W->shape[0], Cg = C / group, Mg = M / group, one = 1;
  const int64_t P = w3.out[0] * w3.out[1] * w3.out[2];
  tir_var_t* ve = nn_var(&kb, "e");
  const tir_expr_t* e = nn_v(&kb, ve);
  const tir_expr_t* o[3] = {nn_modc(&kb, nn_divc(&kb, e, w3.out[1] * w3.out[2]), w3.out[0]),
                            nn_modc(&kb, nn_divc(&kb, e, w3.out[2]), w3.out[1]),
                            nn_modc(&kb, e, w3.out[2])};
  const tir_expr_t* m = nn_modc(&kb, nn_divc(&kb, e, P), M);
  const tir_expr_t* n = nn_divc(&kb, e, P * M);
  const tir_expr_t* g = nn_divc(&kb, m, Mg);
  tir_var_t* vc = nn_var(&kb, "c");
  tir_var_t* vt[3] = {nn_var(&kb, "kd"), nn_var(&kb, "kh"), nn_var(&kb, "kw")};
  /* x is read through a [N * C][D][H][W] view at (n * C + g * Cg + c, id,
   * ih, iw), taps inside the input only (the guard bounds each index) */
  const tir_buffer_t* x4;
  const int64_t x4s[4] = {tir_buffer_numel(X) / (w3.in[0] * w3.in[1] * w3.in[2]), w3.in[0],
                          w3.in[1], w3.in[2]};
  KILN_RETURN_IF_ERROR(nn_view(ctx, X, "x4", 4, x4s, &x4));
  const tir_expr_t* xi[4] = {
      nn_add(&kb, nn_mulc(&kb, n, C), nn_add(&kb, nn_mulc(&kb, g, Cg), nn_v(&kb, vc)))};
  const tir_expr_t* wi = nn_add(&kb, nn_mulc(&kb, m, Cg), nn_v(&kb, vc));
  const tir_expr_t* inside = NULL;
  for (int32_t d = 0; d < 3; ++d) {
    const tir_expr_t* id = nn_addc(&kb, nn_add(&kb, nn_mulc(&kb, o[d], w3.s[d]), nn_mulc(&kb, nn_v(&kb, vt[d]), w3.d[d])), -w3.p[d]);
    const tir_expr_t* ok = tir_bin(t, TIR_AND, tir_bin(t, TIR_GE, id, nn_i(&kb, 0)),
                                   tir_bin(t, TIR_LT, id, nn_i(&kb, w3.in[d])));
    inside = inside ? tir_bin(t, TIR_AND, inside, ok) : ok;
    xi[1 + d] = id;
    wi = nn_add(&kb, nn_mulc(&kb, wi, w3.k[d]), nn_v(&kb, vt[d]));
  }
  const tir_buffer_t* acc = tir_buffer(t, "acc", KILN_DTYPE_I32, 1, &one, TIR_SCOPE_PRIVATE);
  const tir_stmt_t* s = tir_if(t, inside, mac(&kb, &p, acc, x4, xi, wi, m), NULL);
  for (int32_t d = 2; d >= 0; --d) s = nn_for(&kb, vt[d], w3.k[d], s);
  s = nn_for(&kb, vc, Cg, s);
  return emit_each(&kb, ve, n_all, reduce_store(&kb, &p, rp, acc, s, e, m));
}


/* x's zero point (input |i|) as an immediate of |c| when it is constant. */
static void xzp_imm(kiln_lower_ctx_t* ctx, int32_t i, nn_qconv_t* c) {
  if (i >= ctx->n_in || !nn_is_const(ctx, i)) return;
  const kiln_array_t* v = &ctx->in_tensor[i]->value;
  c->xzp_is_imm = true;
  c->xzp_imm = (int32_t)kiln_load_i64(v->dtype, v->data, 0);
}

/* QLinearConv with constant weights and zero points goes, on the CPU,
 * through Conv's GEMM (nn_conv_quantized: register tiles, packed weights, the i32 bias as
 * the initial sum) with this requantization as its epilogue. */
typedef struct qconv_rq_s {
  iprod_t p;
  requant_t r;
} qconv_rq_t;

static const tir_expr_t* qconv_requant(nn_kb_t* kb, const void* user, const tir_expr_t* ch,
                                       const tir_expr_t* acc) {
  const qconv_rq_t* q = user;
  return finish(kb, &q->p, &q->r, acc, ch);
}

/* w - w_zp[channel] of the constant weights (input |wi|, zero points |zi|,
 * absent: 0) as f32 (*out NULL when either is not constant). */
static kiln_status_t const_weights(kiln_lower_ctx_t* ctx, int32_t wi, int32_t zi, float** out) {
  *out = NULL;
  const bool has_z = opt_buf(ctx, zi) != NULL;
  if (!nn_is_const(ctx, wi) || (has_z && !nn_is_const(ctx, zi))) return NULL;
  const kiln_array_t* w = &ctx->in_tensor[wi]->value;
  const kiln_array_t* z = has_z ? &ctx->in_tensor[zi]->value : NULL;
  const int64_t n = kiln_array_numel(w), nz = z ? kiln_array_numel(z) : 1;
  if (nz < 1 || n % nz) return NULL;
  float* f;
  KILN_RETURN_IF_ERROR(nn_alloc_f32(n, ctx->node->op_type, &f));
  for (int64_t i = 0; i < n; ++i)
    f[i] = (float)(kiln_load_f64(w->dtype, w->data, (size_t)i) -
                   (z ? kiln_load_f64(z->dtype, z->data, (size_t)(i / (n / nz))) : 0.0));
  *out = f;
  return NULL;
}

kiln_status_t kiln_lower_nn_qlinear_conv(kiln_lower_ctx_t* ctx) {
  static const int32_t ops[4] = {0, 3, 2, 5}, rq[4] = {1, 4, 6, 7};
  float* wq = NULL;
  /* CPU only: the GPU targets print Conv's GEMM lowering as a fallback of
   * their templates, and on lavapipe it made model_qdq_pc_vulkan take 306 s
   * (compile and run) against 1.5 s with these loops. */
  if (ctx->target == KILN_TARGET_CLASS_CPU) KILN_RETURN_IF_ERROR(const_weights(ctx, 3, 5, &wq));
  if (!wq) return lower_conv(ctx, ops, rq, 8);
  qconv_rq_t q;
  memset(&q, 0, sizeof q);
  q.p.y = ctx->out[0];
  const tir_buffer_t* f[4];
  nn_qconv_t c = {0, 3, ctx->n_in > 8 ? 8 : -1, NULL, wq, qconv_requant, &q, false, 0};
  /* the logical channel count (a blocked output's buffer has blocks there) */
  kiln_status_t s = const_requant(ctx, rq, ctx->out_tensor[0]->shape.dims[1], &q.r);
  if (!s && !q.r.mult) s = flats(ctx, rq, 4, f);
  if (!s && !q.r.mult) q.r = (requant_t){f[0], f[1], f[2], f[3], NULL, NULL, false, 0.0};
  xzp_imm(ctx, 2, &c);
  if (!s && !c.xzp_is_imm) s = flat(ctx, ctx->in[2], "xz", &c.xzp);
  /* on NCHWc where the layout pass chose it (lowering/layout_q8.c) */
  if (!s) s = ctx->out_block && ctx->out_block[0] > 0 ? nn_qconv_blocked(ctx, &c) : nn_conv_quantized(ctx, &c);
  free(wq);
  return s;
}

/* ---- QLinearAdd / QLinearGlobalAveragePool -------------------------------- */

/* Flat index into operand |b| (numpy-broadcast to |y|) of output element |e|. */
static const tir_expr_t* bcast_index(nn_kb_t* kb, const tir_buffer_t* b, const tir_buffer_t* y,
                                     const tir_expr_t* e) {
  const kiln_shape_t bs = kiln_shape_make(b->rank, b->shape);
  const kiln_shape_t ys = kiln_shape_make(y->rank, y->shape);
  if (kiln_shape_equal(&bs, &ys)) return e;
  int64_t st[KILN_MAX_RANK];
  kiln_broadcast_strides(&bs, &ys, st);
  const tir_expr_t* idx = nn_i(kb, 0);
  int64_t inner = 1;
  for (int32_t d = y->rank - 1; d >= 0; --d) {
    if (st[d]) idx = nn_add(kb, idx, nn_mulc(kb, nn_modc(kb, nn_divc(kb, e, inner), y->shape[d]), st[d]));
    inner *= y->shape[d];
  }
  return idx;
}

/* (f32(q[i]) - f32(zp)) * scale rounded once to f32. On the CPU the product
 * is formed in f64, where it is exact (8 by 24 bits), and then rounded: the
 * C compiler contracts a f32 product followed by an add into one FMA
 * (-ffp-contract=fast, GCC's default), which would skip the rounding the
 * reference's DequantizeLinear makes. */
static const tir_expr_t* dq_value(nn_kb_t* kb, const tir_buffer_t* q, const tir_expr_t* i,
                                  const tir_buffer_t* s, const tir_buffer_t* zp) {
  tir_ctx_t* t = kb->t;
  const tir_expr_t* z = nn_i(kb, 0);
  const tir_expr_t* d = tir_sub(t, nn_ldf(kb, q, NN_IDX(i)), ldf_or(kb, zp, z, 0.0));
  const tir_expr_t* sc = nn_ldf(kb, s, NN_IDX(z));
  if (kb->ctx->target != KILN_TARGET_CLASS_CPU) return tir_mul(t, d, sc);
  const tir_expr_t* p = tir_mul(t, tir_cast(t, KILN_DTYPE_F64, d), tir_cast(t, KILN_DTYPE_F64, sc));
  return tir_cast(t, KILN_DTYPE_F32, p);
}

/* QLinearAdd's parameters as immediates where all six are constants (the
 * folded models'): the kernel then loads only the two operands. With |mul|
 * y's scale divides as a product by inv = f32(1 / s_y), where that gives
 * the reference's byte for every pair of input bytes (checked here over all
 * 65536: the divisions are the loop's most expensive operation, and a
 * product differs from the quotient by at most an ulp, which changes the
 * rounded result only near a .5 tie). */
typedef struct qadd_imm_s {
  bool on, mul;
  float as, az, bs, bz, ys, yz, inv;
} qadd_imm_t;

static float qadd_param(const kiln_lower_ctx_t* ctx, int32_t i) {
  const kiln_array_t* v = &ctx->in_tensor[i]->value;
  return (float)kiln_load_f64(v->dtype, v->data, 0);
}

/* The reference's result (ir/ops/nn_quant.c) for dequantized operands'
 * sum |s| and quotient q = s / s_y or s * inv. */
static int64_t qadd_byte(float q, float yz, int64_t lo, int64_t hi) {
  const float v = nearbyintf(q) + yz;
  return !(v > (float)lo) ? lo : v >= (float)hi ? hi : (int64_t)v;
}

static void qadd_setup(const kiln_lower_ctx_t* ctx, qadd_imm_t* m) {
  memset(m, 0, sizeof *m);
  for (int32_t i = 1; i < 8; ++i)
    if (i != 3 && (i >= ctx->n_in || !ctx->in[i] || !nn_is_const(ctx, i) || tir_buffer_numel(ctx->in[i]) != 1))
      return;
  m->on = true;
  m->as = qadd_param(ctx, 1), m->az = qadd_param(ctx, 2), m->bs = qadd_param(ctx, 4);
  m->bz = qadd_param(ctx, 5), m->ys = qadd_param(ctx, 6), m->yz = qadd_param(ctx, 7);
  m->inv = 1.0f / m->ys;
  if (!isfinite(m->inv) || !isfinite(m->ys) || m->ys == 0.0f) return;
  int64_t lo, hi;
  kiln_nn_quant_range(ctx->in[0]->dtype, &lo, &hi);
  m->mul = true;
  for (int64_t qa = lo; qa <= hi && m->mul; ++qa)
    for (int64_t qb = lo; qb <= hi && m->mul; ++qb) {
      /* each product rounded once to f32 (exact in double), as the kernel */
      const float a = (float)((double)((float)qa - m->az) * (double)m->as);
      const float b = (float)((double)((float)qb - m->bz) * (double)m->bs);
      const float sum = a + b;
      m->mul = qadd_byte(sum / m->ys, m->yz, lo, hi) == qadd_byte(sum * m->inv, m->yz, lo, hi);
    }
}

/* The QLinearAdd store of output element |e|: a + b dequantized, divided
 * by y's scale, rounded, y's zero point added, saturated. */
static const tir_stmt_t* qadd_store(nn_kb_t* kb, const tir_buffer_t* const* f, const tir_buffer_t* y,
                                    const qadd_imm_t* m, const tir_expr_t* e) {
  kiln_lower_ctx_t* ctx = kb->ctx;
  tir_ctx_t* t = kb->t;
  const tir_expr_t* z = nn_i(kb, 0);
  const tir_expr_t *a, *b, *v;
  if (m->on) {
    /* dq_value with immediates: the products exact in f64, rounded once */
    const tir_expr_t* da = tir_sub(t, nn_ldf(kb, f[0], NN_IDX(e)), nn_f(kb, m->az));
    const tir_expr_t* db = tir_sub(t, nn_ldf(kb, f[3], NN_IDX(e)), nn_f(kb, m->bz));
    a = tir_cast(t, KILN_DTYPE_F32, tir_mul(t, tir_cast(t, KILN_DTYPE_F64, da), tir_cast(t, KILN_DTYPE_F64, nn_f(kb, m->as))));
    b = tir_cast(t, KILN_DTYPE_F32, tir_mul(t, tir_cast(t, KILN_DTYPE_F64, db), tir_cast(t, KILN_DTYPE_F64, nn_f(kb, m->bs))));
    v = m->mul ? tir_mul(t, tir_add(t, a, b), nn_f(kb, m->inv)) : tir_bin(t, TIR_DIV, tir_add(t, a, b), nn_f(kb, m->ys));
    v = tir_add(t, round_even(kb, v), nn_f(kb, m->yz));
  } else {
    a = dq_value(kb, f[0], bcast_index(kb, ctx->in[0], ctx->out[0], e), f[1], f[2]);
    b = dq_value(kb, f[3], bcast_index(kb, ctx->in[3], ctx->out[0], e), f[4], f[5]);
    v = round_even(kb, tir_bin(t, TIR_DIV, tir_add(t, a, b), nn_ldf(kb, f[6], NN_IDX(z))));
    v = tir_add(t, v, ldf_or(kb, f[7], z, 0.0));
  }
  return tir_store(t, y, NN_IDX(e), saturate(kb, y->dtype, v));
}

/* Elements per iteration of the CPU's parallel loop: a VECTORIZED loop
 * (the C printer's f32 vectors, the products rounded on their own) */
#define QADD_CHUNK 256

kiln_status_t kiln_lower_nn_qlinear_add(kiln_lower_ctx_t* ctx) {
  static const int32_t idx[8] = {0, 1, 2, 3, 4, 5, 6, 7};
  if (tir_buffer_numel(ctx->out[0]) == 0) return NULL;
  nn_kb_t kb;
  nn_kb_init(&kb, ctx);
  const tir_buffer_t *f[8], *y;
  KILN_RETURN_IF_ERROR(flats(ctx, idx, 8, f));
  KILN_RETURN_IF_ERROR(flat(ctx, ctx->out[0], "yf", &y));
  const int64_t n = tir_buffer_numel(y);
  const kiln_shape_t ys = kiln_shape_make(ctx->out[0]->rank, ctx->out[0]->shape);
  const kiln_shape_t as = kiln_shape_make(ctx->in[0]->rank, ctx->in[0]->shape);
  const kiln_shape_t bs = kiln_shape_make(ctx->in[3]->rank, ctx->in[3]->shape);
  qadd_imm_t m;
  memset(&m, 0, sizeof m);
  if (ctx->target != KILN_TARGET_CLASS_CPU || n < QADD_CHUNK || !kiln_shape_equal(&as, &ys) ||
      !kiln_shape_equal(&bs, &ys)) {
    tir_var_t* ve = nn_var(&kb, "e");
    return emit_each(&kb, ve, n, qadd_store(&kb, f, y, &m, nn_v(&kb, ve)));
  }
  qadd_setup(ctx, &m);
  /* chunks of QADD_CHUNK lanes, then the rest one by one */
  const int64_t nch = n / QADD_CHUNK, rest = n % QADD_CHUNK;
  tir_var_t *vc = nn_var(&kb, "c"), *vl = nn_var(&kb, "l");
  const tir_expr_t* e = nn_add(&kb, nn_mulc(&kb, nn_v(&kb, vc), QADD_CHUNK), nn_v(&kb, vl));
  const tir_stmt_t* lanes = nn_for(&kb, vl, QADD_CHUNK, qadd_store(&kb, f, y, &m, e));
  nn_vectorize(&kb, vl);
  if (nch > 1) nn_parallel(&kb, vc);
  KILN_RETURN_IF_ERROR(nn_emit(&kb, nn_for(&kb, vc, nch, lanes)));
  if (!rest) return NULL;
  tir_var_t* vr = nn_var(&kb, "r");
  return nn_emit(&kb, nn_for(&kb, vr, rest, qadd_store(&kb, f, y, &m, nn_addc(&kb, nn_v(&kb, vr), nch * QADD_CHUNK))));
}

/* One work-item per (n, c) plane: the exact i32 sum of x - x_zp, then
 * ((f32(sum) * x_scale) / plane) / y_scale rounded, as the reference. */
kiln_status_t kiln_lower_nn_qlinear_global_avgpool(kiln_lower_ctx_t* ctx) {
  static const int32_t idx[5] = {0, 1, 2, 3, 4};
  const tir_buffer_t* X = ctx->in[0];
  const int64_t planes = X->shape[0] * X->shape[1];
  if (planes == 0) return NULL;
  const int64_t plane = tir_buffer_numel(X) / planes, one = 1;
  nn_kb_t kb;
  nn_kb_init(&kb, ctx);
  tir_ctx_t* t = kb.t;
  const tir_buffer_t *f[5], *y, *x2;
  KILN_RETURN_IF_ERROR(flats(ctx, idx, 5, f));
  KILN_RETURN_IF_ERROR(flat(ctx, ctx->out[0], "yf", &y));
  const int64_t x2s[2] = {planes, plane};
  KILN_RETURN_IF_ERROR(nn_view(ctx, X, "x2", 2, x2s, &x2));
  tir_var_t *vp = nn_var(&kb, "p"), *vi = nn_var(&kb, "i");
  const tir_expr_t *p = nn_v(&kb, vp), *z = nn_i(&kb, 0);
  const tir_buffer_t* acc = tir_buffer(t, "acc", KILN_DTYPE_I32, 1, &one, TIR_SCOPE_PRIVATE);
  const tir_expr_t* xv = tir_sub(t, tir_cast(t, KILN_DTYPE_I32, tir_load(t, x2, NN_IDX(p, nn_v(&kb, vi)))),
                                 ldi_or0(&kb, f[2], z));
  const tir_stmt_t* sum = nn_for(&kb, vi, plane,
                                 tir_store(t, acc, NN_IDX(z), tir_add(t, tir_load(t, acc, NN_IDX(z)), xv)));
  const tir_expr_t* mean = tir_bin(
      t, TIR_DIV, tir_mul(t, tir_cast(t, KILN_DTYPE_F32, tir_load(t, acc, NN_IDX(z))), nn_ldf(&kb, f[1], NN_IDX(z))),
      nn_f(&kb, (double)plane));
  const tir_expr_t* v = round_even(&kb, tir_bin(t, TIR_DIV, mean, nn_ldf(&kb, f[3], NN_IDX(z))));
  v = tir_add(t, v, ldf_or(&kb, f[4], z, 0.0));
  const tir_stmt_t* s[3] = {tir_store(t, acc, NN_IDX(z), tir_const(t, KILN_DTYPE_I32, 0)), sum,
                            tir_store(t, y, NN_IDX(p), saturate(&kb, y->dtype, v))};
  return emit_each(&kb, vp, planes, tir_alloc(t, acc, tir_seq(t, 3, s)));
}

/* ConvInteger's output is the sum itself, so the GEMM takes it only where
 * the sums are exact i32: the int8 GEMM of nn_conv_quantized (at most
 * NN_MAX_GROUPS stride classes), or its im2col path's f32 sums when no sum
 * can reach 2^24 (sum over taps of 255 * |w - w_zp| below it). */
static bool conv_integer_exact(kiln_lower_ctx_t* ctx, const float* wq) {
  kiln_nn_window_t win;
  int64_t group;
  kiln_shape_t out;
  kiln_status_t st = kiln_nn_conv_shape(ctx->node, "ConvInteger", &ctx->in_tensor[0]->shape,
                                        ctx->in_tensor[0]->name, &ctx->in_tensor[1]->shape,
                                        ctx->in_tensor[1]->name, NULL, &win, &group, &out);
  if (st) {
    kiln_status_free(st);
    return false;
  }
  kiln_nn_win3_t w3;
  kiln_nn_win3(&win, ctx->in[0]->shape + 2, ctx->out[0]->shape + 2, &w3);
  if (nn_stride_classes(w3.k, w3.s) <= NN_MAX_GROUPS) return true;
  const tir_buffer_t* W = ctx->in[1];
  const int64_t per = tir_buffer_numel(W) / W->shape[0];
  for (int64_t m = 0; m < W->shape[0]; ++m) {
    double bound = 0;
    for (int64_t i = 0; i < per; ++i) bound += 255.0 * fabs((double)wq[m * per + i]);
    if (bound >= 16777216.0) return false;
  }
  return true;
}

static const tir_expr_t* sums_as_is(nn_kb_t* kb, const void* user, const tir_expr_t* ch,
                                    const tir_expr_t* acc) {
  (void)kb, (void)user, (void)ch;
  return acc;
}

/* ConvInteger with constant weights (and zero points) and a per-tensor
 * x zero point: on the CPU through nn_conv_quantized, the i32 sums stored
 * as they are; else the plain loops. */
kiln_status_t kiln_lower_nn_conv_integer(kiln_lower_ctx_t* ctx) {
  static const int32_t ops[4] = {0, 1, 2, 3};
  float* wq = NULL;
  const tir_buffer_t* xz = opt_buf(ctx, 2);
  if (ctx->target == KILN_TARGET_CLASS_CPU && (!xz || tir_buffer_numel(xz) == 1))
    KILN_RETURN_IF_ERROR(const_weights(ctx, 1, 3, &wq));
  if (wq && !conv_integer_exact(ctx, wq)) {
    free(wq);
    wq = NULL;
  }
  if (!wq) return lower_conv(ctx, ops, NULL, -1);
  nn_qconv_t c = {0, 1, -1, NULL, wq, sums_as_is, NULL, !xz, 0};
  kiln_status_t s = NULL;
  if (xz) { /* else the immediate 0 */
    xzp_imm(ctx, 2, &c);
    if (!c.xzp_is_imm) s = flat(ctx, xz, "xz", &c.xzp);
  }
  if (!s) s = nn_conv_quantized(ctx, &c);
  free(wq);
  return s;
}
