/* Recurrent layers: LSTM, GRU and RNN (ONNX opsets 7 to 14).
 *
 * One attribute parser (kiln_nn_rnn_parse, also used by the lowering in
 * lowering/lower_nn_rnn.c), one shape inference and one reference kernel for
 * the three ops; they differ only in the gate count and the cell update.
 *
 *   inputs   X [T,B,I] (layout 1: [B,T,I]), W [D,G*H,I], R [D,G*H,H],
 *            B [D,2*G*H] (Wb then Rb), sequence_lens [B] (i32),
 *            initial_h [D,B,H] (layout 1: [B,D,H]), LSTM: initial_c, P [D,3*H]
 *   outputs  Y [T,D,B,H] (layout 1: [B,T,D,H]), Y_h, LSTM: Y_c (as initial_h)
 *
 * With sequence_lens, batch b runs len[b] steps (a reverse direction from
 * len[b]-1 down to 0); Y is zero past len[b] and Y_h/Y_c hold the state after
 * the last step run. Clip bounds every gate's pre-activation.
 */
#include <ctype.h>
#include <math.h>
#include <string.h>

#include "ir/ops/nn_internal.h"

static const char* const kind_names[] = {"LSTM", "GRU", "RNN"};

/* ---- attributes ----------------------------------------------------------- */

typedef struct act_def_s {
  const char* name;
  kiln_nn_rnn_fn_t fn;
  int32_t n_params; /* alpha (1) or alpha and beta (2) */
  float alpha, beta;
} act_def_t;

/* Defaults as onnxruntime applies them when activation_alpha/beta run out. */
static const act_def_t act_defs[] = {
    {"relu", KILN_NN_ACT_RELU, 0, 0.f, 0.f},
    {"tanh", KILN_NN_ACT_TANH, 0, 0.f, 0.f},
    {"sigmoid", KILN_NN_ACT_SIGMOID, 0, 0.f, 0.f},
    {"affine", KILN_NN_ACT_AFFINE, 2, 1.f, 0.f},
    {"leakyrelu", KILN_NN_ACT_LEAKY_RELU, 1, 0.01f, 0.f},
    {"thresholdedrelu", KILN_NN_ACT_THRESHOLDED_RELU, 1, 1.f, 0.f},
    {"scaledtanh", KILN_NN_ACT_SCALED_TANH, 2, 1.f, 1.f},
    {"hardsigmoid", KILN_NN_ACT_HARD_SIGMOID, 2, 0.2f, 0.5f},
    {"elu", KILN_NN_ACT_ELU, 1, 1.f, 0.f},
    {"softsign", KILN_NN_ACT_SOFTSIGN, 0, 0.f, 0.f},
    {"softplus", KILN_NN_ACT_SOFTPLUS, 0, 0.f, 0.f},
};

static const act_def_t* find_act(const char* s) {
  char low[32];
  size_t n = strlen(s);
  if (n >= sizeof low) return NULL;
  for (size_t i = 0; i <= n; ++i) low[i] = (char)tolower((unsigned char)s[i]);
  for (size_t i = 0; i < sizeof act_defs / sizeof act_defs[0]; ++i)
    if (!strcmp(act_defs[i].name, low)) return &act_defs[i];
  return NULL;
}

bool kiln_nn_rnn_dir_reverse(const kiln_nn_rnn_t* r, int32_t d) {
  return r->dirs == 2 ? d == 1 : r->reverse;
}

kiln_status_t kiln_nn_rnn_parse(const kiln_node_t* n, kiln_nn_rnn_kind_t kind,
                                kiln_nn_rnn_t* out) {
  memset(out, 0, sizeof *out);
  const char* op = kind_names[kind];
  out->kind = kind;
  out->gates = kind == KILN_NN_RNN_LSTM ? 4 : kind == KILN_NN_RNN_GRU ? 3 : 1;
  out->n_act = kind == KILN_NN_RNN_LSTM ? 3 : kind == KILN_NN_RNN_GRU ? 2 : 1;
  const char* dir = "forward";
  KILN_RETURN_IF_ERROR(kiln_attr_string(n, "direction", "forward", &dir));
  if (!strcmp(dir, "forward") || !strcmp(dir, "reverse")) {
    out->dirs = 1;
    out->reverse = dir[0] == 'r';
  } else if (!strcmp(dir, "bidirectional")) {
    out->dirs = 2;
  } else {
    return kiln_make_status(KILN_INVALID_ARGUMENT,
                            "%s node '%s': direction '%s' is not forward, reverse or "
                            "bidirectional", op, n->name, dir);
  }
  KILN_RETURN_IF_ERROR(kiln_attr_int(n, "hidden_size", -1, &out->hidden));
  if (kiln_node_attr(n, "hidden_size") && (out->hidden < 1 || out->hidden > (1 << 24))) {
    return kiln_make_status(KILN_INVALID_ARGUMENT, "%s node '%s': hidden_size %lld is out of "
                            "range [1, 2^24]", op, n->name, (long long)out->hidden);
  }
  KILN_RETURN_IF_ERROR(kiln_attr_int(n, "layout", 0, &out->layout));
  if (out->layout != 0 && out->layout != 1) {
    return kiln_make_status(KILN_INVALID_ARGUMENT, "%s node '%s': layout %lld is not 0 or 1",
                            op, n->name, (long long)out->layout);
  }
  out->has_clip = kiln_node_attr(n, "clip") != NULL;
  KILN_RETURN_IF_ERROR(kiln_attr_float(n, "clip", 0.f, &out->clip));
  if (out->has_clip && !(out->clip > 0.f)) {
    return kiln_make_status(KILN_INVALID_ARGUMENT,
                            "%s node '%s': clip %g must be positive", op, n->name,
                            (double)out->clip);
  }
  int64_t v = 0;
  if (kind == KILN_NN_RNN_LSTM) {
    KILN_RETURN_IF_ERROR(kiln_attr_int(n, "input_forget", 0, &v));
    out->input_forget = v != 0;
  }
  if (kind == KILN_NN_RNN_GRU) {
    KILN_RETURN_IF_ERROR(kiln_attr_int(n, "linear_before_reset", 0, &v));
    out->lbr = v != 0;
  }
  /* Activations: none (the defaults), one set for every direction, or one
   * set per direction. */
  static const kiln_nn_rnn_fn_t defaults[3][3] = {
      {KILN_NN_ACT_SIGMOID, KILN_NN_ACT_TANH, KILN_NN_ACT_TANH},
      {KILN_NN_ACT_SIGMOID, KILN_NN_ACT_TANH, KILN_NN_ACT_TANH},
      {KILN_NN_ACT_TANH, KILN_NN_ACT_TANH, KILN_NN_ACT_TANH}};
  const kiln_attr_t* acts = kiln_node_attr(n, "activations");
  const float *alphas = NULL, *betas = NULL;
  int64_t na = -1, nb = -1;
  KILN_RETURN_IF_ERROR(kiln_attr_floats(n, "activation_alpha", &alphas, &na));
  KILN_RETURN_IF_ERROR(kiln_attr_floats(n, "activation_beta", &betas, &nb));
  if (acts && acts->type != KILN_ATTR_STRINGS) {
    return kiln_make_status(KILN_INVALID_ARGUMENT,
                            "%s node '%s': attribute 'activations' is not a list of strings",
                            op, n->name);
  }
  const int64_t cnt = acts ? acts->count : 0;
  if (acts && cnt != out->n_act && cnt != (int64_t)out->n_act * out->dirs) {
    return kiln_make_status(KILN_INVALID_ARGUMENT,
                            "%s node '%s': %lld activations, expected %d per direction "
                            "(%d directions)", op, n->name, (long long)cnt,
                            (int)out->n_act, (int)out->dirs);
  }
  int64_t ia = 0, ib = 0;
  for (int32_t d = 0; d < out->dirs; ++d) {
    for (int32_t k = 0; k < out->n_act; ++k) {
      kiln_nn_rnn_act_t* a = &out->act[d][k];
      if (!acts) {
        a->fn = defaults[kind][k];
        continue;
      }
      if (cnt == out->n_act && d == 1) {
        *a = out->act[0][k];
        continue;
      }
      const char* name = acts->strings[d * out->n_act + k];
      const act_def_t* def = name ? find_act(name) : NULL;
      if (!def) {
        return kiln_make_status(KILN_UNSUPPORTED,
                                "%s node '%s': activation '%s' is not supported (Relu, Tanh, "
                                "Sigmoid, Affine, LeakyRelu, ThresholdedRelu, ScaledTanh, "
                                "HardSigmoid, Elu, Softsign, Softplus)",
                                op, n->name, name ? name : "");
      }
      a->fn = def->fn;
      a->alpha = def->n_params >= 1 && alphas && ia < na ? alphas[ia++] : def->alpha;
      a->beta = def->n_params >= 2 && betas && ib < nb ? betas[ib++] : def->beta;
    }
  }
  return NULL;
}

/* ---- shape inference -------------------------------------------------------- */

static bool known(int64_t d) { return kiln_dim_known(d); }

/* Checks a dim of input |i| against |want| when both are known. */
static kiln_status_t check_dim(const kiln_infer_t* ctx, const char* op, int32_t i,
                               const char* what, int32_t axis, int64_t want) {
  const kiln_shape_t* s = &ctx->in[i]->shape;
  if (s->rank < 0 || !known(want) || !known(s->dims[axis]) || s->dims[axis] == want)
    return NULL;
  char b[96];
  kiln_shape_format(s, b, sizeof b);
  return kiln_make_status(KILN_INVALID_ARGUMENT,
                          "%s node '%s': %s '%s' has shape %s, expected %lld at axis %d", op,
                          ctx->node->name, what, kiln_nn_in_name(ctx, i), b, (long long)want,
                          (int)axis);
}

static kiln_status_t check_rank(const kiln_infer_t* ctx, const char* op, int32_t i,
                                const char* what, int32_t rank) {
  const kiln_shape_t* s = &ctx->in[i]->shape;
  if (s->rank < 0 || s->rank == rank) return NULL;
  return kiln_make_status(KILN_INVALID_ARGUMENT, "%s node '%s': %s '%s' has rank %d, expected %d",
                          op, ctx->node->name, what, kiln_nn_in_name(ctx, i), (int)s->rank,
                          (int)rank);
}

static bool present(const kiln_infer_t* ctx, int32_t i) { return i < ctx->n_in && ctx->in[i]; }

static kiln_status_t rnn_infer(kiln_infer_t* ctx, kiln_nn_rnn_kind_t kind) {
  const char* op = kind_names[kind];
  kiln_nn_rnn_t r;
  KILN_RETURN_IF_ERROR(kiln_nn_rnn_parse(ctx->node, kind, &r));
  if (!present(ctx, 1) || !present(ctx, 2)) {
    return kiln_make_status(KILN_INVALID_ARGUMENT, "%s node '%s': inputs W and R are required",
                            op, ctx->node->name);
  }
  const int32_t n_float = kind == KILN_NN_RNN_LSTM ? 8 : 6;
  for (int32_t i = 0; i < n_float && i < ctx->n_in; ++i)
    if (i != 4) KILN_RETURN_IF_ERROR(kiln_nn_require_float(ctx, op, i));
  if (present(ctx, 4) && ctx->in[4]->dtype != KILN_DTYPE_UNDEFINED &&
      ctx->in[4]->dtype != KILN_DTYPE_I32) {
    return kiln_make_status(KILN_INVALID_ARGUMENT,
                            "%s node '%s': sequence_lens '%s' has dtype %s, expected i32", op,
                            ctx->node->name, kiln_nn_in_name(ctx, 4),
                            kiln_dtype_name(ctx->in[4]->dtype));
  }
  KILN_RETURN_IF_ERROR(check_rank(ctx, op, 0, "X", 3));
  KILN_RETURN_IF_ERROR(check_rank(ctx, op, 1, "W", 3));
  KILN_RETURN_IF_ERROR(check_rank(ctx, op, 2, "R", 3));
  const kiln_shape_t* x = &ctx->in[0]->shape;
  int64_t H = r.hidden;
  if (H < 0) {
    const kiln_shape_t* rs = &ctx->in[2]->shape;
    H = rs->rank == 3 ? rs->dims[2] : KILN_DIM_UNKNOWN;
  }
  const int64_t T = x->rank == 3 ? x->dims[r.layout ? 1 : 0] : KILN_DIM_UNKNOWN;
  const int64_t Bn = x->rank == 3 ? x->dims[r.layout ? 0 : 1] : KILN_DIM_UNKNOWN;
  const int64_t I = x->rank == 3 ? x->dims[2] : KILN_DIM_UNKNOWN;
  const int64_t GH = known(H) ? r.gates * H : KILN_DIM_UNKNOWN;
  const int64_t D = r.dirs;
  KILN_RETURN_IF_ERROR(check_dim(ctx, op, 1, "W", 0, D));
  KILN_RETURN_IF_ERROR(check_dim(ctx, op, 1, "W", 1, GH));
  KILN_RETURN_IF_ERROR(check_dim(ctx, op, 1, "W", 2, I));
  KILN_RETURN_IF_ERROR(check_dim(ctx, op, 2, "R", 0, D));
  KILN_RETURN_IF_ERROR(check_dim(ctx, op, 2, "R", 1, GH));
  KILN_RETURN_IF_ERROR(check_dim(ctx, op, 2, "R", 2, H));
  if (present(ctx, 3)) {
    KILN_RETURN_IF_ERROR(check_rank(ctx, op, 3, "B", 2));
    KILN_RETURN_IF_ERROR(check_dim(ctx, op, 3, "B", 0, D));
    KILN_RETURN_IF_ERROR(check_dim(ctx, op, 3, "B", 1, known(GH) ? 2 * GH : GH));
  }
  if (present(ctx, 4)) {
    KILN_RETURN_IF_ERROR(check_rank(ctx, op, 4, "sequence_lens", 1));
    KILN_RETURN_IF_ERROR(check_dim(ctx, op, 4, "sequence_lens", 0, Bn));
  }
  for (int32_t i = 5; i <= (kind == KILN_NN_RNN_LSTM ? 6 : 5); ++i) {
    if (!present(ctx, i)) continue;
    const char* what = i == 5 ? "initial_h" : "initial_c";
    KILN_RETURN_IF_ERROR(check_rank(ctx, op, i, what, 3));
    KILN_RETURN_IF_ERROR(check_dim(ctx, op, i, what, r.layout ? 1 : 0, D));
    KILN_RETURN_IF_ERROR(check_dim(ctx, op, i, what, r.layout ? 0 : 1, Bn));
    KILN_RETURN_IF_ERROR(check_dim(ctx, op, i, what, 2, H));
  }
  if (kind == KILN_NN_RNN_LSTM && present(ctx, 7)) {
    KILN_RETURN_IF_ERROR(check_rank(ctx, op, 7, "P", 2));
    KILN_RETURN_IF_ERROR(check_dim(ctx, op, 7, "P", 0, D));
    KILN_RETURN_IF_ERROR(check_dim(ctx, op, 7, "P", 1, known(H) ? 3 * H : H));
  }
  const kiln_dtype_t dt = ctx->in[0]->dtype;
  const int64_t y0[4] = {T, D, Bn, H}, y1[4] = {Bn, T, D, H};
  const int64_t s0[3] = {D, Bn, H}, s1[3] = {Bn, D, H};
  kiln_shape_t ys = kiln_shape_make(4, r.layout ? y1 : y0);
  kiln_shape_t ss = kiln_shape_make(3, r.layout ? s1 : s0);
  if (x->rank < 0) ys = kiln_shape_unknown(), ss = kiln_shape_unknown();
  kiln_infer_set(ctx, 0, dt, &ys);
  for (int32_t i = 1; i < ctx->n_out; ++i) kiln_infer_set(ctx, i, dt, &ss);
  return NULL;
}

static int64_t rnn_flops(const kiln_infer_t* ctx, int64_t gates) {
  /* Y may be omitted: the sizes come from X [.,.,I], W [D,.,I], R [D,.,H]. */
  const kiln_shape_t *x = &ctx->in[0]->shape, *w = &ctx->in[1]->shape, *r = &ctx->in[2]->shape;
  if (!kiln_shape_is_static(x) || !kiln_shape_is_static(w) || !kiln_shape_is_static(r) ||
      x->rank != 3 || w->rank != 3 || r->rank != 3)
    return 0;
  /* Per step, direction and batch row: X*W^T and H*R^T (2 flops a term)
   * plus the gates. */
  const int64_t steps = kiln_nn_mul_sat(kiln_nn_mul_sat(x->dims[0], x->dims[1]), w->dims[0]);
  const int64_t H = r->dims[2], I = w->dims[2];
  return kiln_nn_mul_sat(steps, kiln_nn_mul_sat(2 * gates * H, I + H) + 8 * gates * H);
}

/* ---- reference kernel ------------------------------------------------------ */

static float act_apply(const kiln_nn_rnn_act_t* a, float x) {
  switch (a->fn) {
    case KILN_NN_ACT_RELU: return x > 0.f ? x : 0.f;
    case KILN_NN_ACT_TANH: return tanhf(x);
    case KILN_NN_ACT_SIGMOID: return 1.f / (1.f + expf(-x));
    case KILN_NN_ACT_AFFINE: return a->alpha * x + a->beta;
    case KILN_NN_ACT_LEAKY_RELU: return x >= 0.f ? x : a->alpha * x;
    case KILN_NN_ACT_THRESHOLDED_RELU: return x > a->alpha ? x : 0.f;
    case KILN_NN_ACT_SCALED_TANH: return a->alpha * tanhf(a->beta * x);
    case KILN_NN_ACT_HARD_SIGMOID: return fmaxf(0.f, fminf(1.f, a->alpha * x + a->beta));
    case KILN_NN_ACT_ELU: return x >= 0.f ? x : a->alpha * (expf(x) - 1.f);
    case KILN_NN_ACT_SOFTSIGN: return x / (1.f + fabsf(x));
    case KILN_NN_ACT_SOFTPLUS: return logf(1.f + expf(x));
  }
  return x;
}

/* The operands of one run, as f32. */
typedef struct rnn_io_s {
  kiln_nn_rnn_t r;
  int64_t T, B, I, H, G;
  const float *x, *w, *rw, *bias, *h0, *c0, *p;
  const int32_t* lens;
  float *y, *yh, *yc;
} rnn_io_t;

static float clipped(const rnn_io_t* io, float v) {
  if (!io->r.has_clip) return v;
  return v < -io->r.clip ? -io->r.clip : v > io->r.clip ? io->r.clip : v;
}

/* State index [d][b][j] in the layout of initial_h / Y_h. */
static int64_t st_idx(const rnn_io_t* io, int64_t d, int64_t b, int64_t j) {
  const int64_t D = io->r.dirs;
  return (io->r.layout ? b * D + d : d * io->B + b) * io->H + j;
}

/* One direction of one batch row: runs the steps, writes Y and the state. */
static void run_row(const rnn_io_t* io, int64_t d, int64_t b, float* h, float* c, float* a,
                    float* hn) {
  const int64_t H = io->H, G = io->G, I = io->I, T = io->T, D = io->r.dirs;
  const kiln_nn_rnn_act_t* act = io->r.act[d];
  const bool rev = kiln_nn_rnn_dir_reverse(&io->r, (int32_t)d);
  const bool lbr = io->r.kind == KILN_NN_RNN_GRU && io->r.lbr;
  int64_t len = io->lens ? io->lens[b] : T;
  const float* W = io->w + d * G * H * I;
  const float* R = io->rw + d * G * H * H;
  const float* Wb = io->bias ? io->bias + d * 2 * G * H : NULL;
  const float* Rb = Wb ? Wb + G * H : NULL;
  const float* P = io->p ? io->p + d * 3 * H : NULL;
  for (int64_t j = 0; j < H; ++j) {
    h[j] = io->h0 ? io->h0[st_idx(io, d, b, j)] : 0.f;
    c[j] = io->c0 ? io->c0[st_idx(io, d, b, j)] : 0.f;
  }
  for (int64_t s = 0; s < len; ++s) {
    const int64_t t = rev ? len - 1 - s : s;
    const float* x = io->x + (io->r.layout ? b * T + t : t * io->B + b) * I;
    /* a = X W^T + Wb (+ Rb) + H R^T; for the GRU the h gate's recurrent
     * term waits for r (see below). */
    for (int64_t n = 0; n < G * H; ++n) {
      float v = Wb ? Wb[n] : 0.f;
      for (int64_t i = 0; i < I; ++i) v += x[i] * W[n * I + i];
      const bool h_gate = io->r.kind == KILN_NN_RNN_GRU && n >= 2 * H;
      if (Rb && !(h_gate && lbr)) v += Rb[n];
      if (!h_gate) {
        for (int64_t k = 0; k < H; ++k) v += h[k] * R[n * H + k];
      }
      a[n] = v;
    }
    for (int64_t j = 0; j < H; ++j) {
      if (io->r.kind == KILN_NN_RNN_LSTM) {
        float pi = P ? P[j] : 0.f, po = P ? P[H + j] : 0.f, pf = P ? P[2 * H + j] : 0.f;
        float ig = act_apply(&act[0], clipped(io, a[j] + pi * c[j]));
        float fg = io->r.input_forget ? 1.f - ig
                                      : act_apply(&act[0], clipped(io, a[2 * H + j] + pf * c[j]));
        float cg = act_apply(&act[1], clipped(io, a[3 * H + j]));
        c[j] = fg * c[j] + ig * cg;
        float og = act_apply(&act[0], clipped(io, a[H + j] + po * c[j]));
        hn[j] = og * act_apply(&act[2], c[j]);
      } else if (io->r.kind == KILN_NN_RNN_RNN) {
        hn[j] = act_apply(&act[0], clipped(io, a[j]));
      } else {
        a[j] = act_apply(&act[0], clipped(io, a[j]));          /* z */
        a[H + j] = act_apply(&act[0], clipped(io, a[H + j]));  /* r */
      }
    }
    if (io->r.kind == KILN_NN_RNN_GRU) {
      for (int64_t j = 0; j < H; ++j) {
        const float* Rh = R + (2 * H + j) * H;
        float rec = 0.f;
        for (int64_t k = 0; k < H; ++k) rec += (lbr ? h[k] : a[H + k] * h[k]) * Rh[k];
        if (lbr) rec = a[H + j] * (rec + (Rb ? Rb[2 * H + j] : 0.f));
        float hg = act_apply(&act[1], clipped(io, a[2 * H + j] + rec));
        hn[j] = (1.f - a[j]) * hg + a[j] * h[j];
      }
    }
    memcpy(h, hn, sizeof(float) * (size_t)H);
    if (io->y) {
      for (int64_t j = 0; j < H; ++j)
        io->y[(io->r.layout ? (b * T + t) * D + d : (t * D + d) * io->B + b) * H + j] = h[j];
    }
  }
  for (int64_t j = 0; j < H; ++j) {
    if (io->yh) io->yh[st_idx(io, d, b, j)] = h[j];
    if (io->yc) io->yc[st_idx(io, d, b, j)] = c[j];
  }
}

static kiln_status_t rnn_run(const kiln_ref_ctx_t* ctx, kiln_nn_rnn_kind_t kind) {
  const char* op = kind_names[kind];
  rnn_io_t io;
  memset(&io, 0, sizeof io);
  KILN_RETURN_IF_ERROR(kiln_nn_rnn_parse(ctx->node, kind, &io.r));
  const kiln_array_t* X = ctx->in[0];
  io.T = X->shape.dims[io.r.layout ? 1 : 0];
  io.B = X->shape.dims[io.r.layout ? 0 : 1];
  io.I = X->shape.dims[2];
  io.H = ctx->in[2]->shape.dims[2];
  io.G = io.r.gates;
  const int32_t n_f = kind == KILN_NN_RNN_LSTM ? 8 : 6;
  const float* src[8] = {NULL};
  float* sc[8] = {NULL};
  float* osc[3] = {NULL};
  float* dst[3] = {NULL};
  kiln_status_t st = NULL;
  for (int32_t i = 0; i < n_f && i < ctx->n_in && !st; ++i)
    if (i != 4 && ctx->in[i]) st = kiln_nn_f32_load(ctx, ctx->in[i], &src[i], &sc[i]);
  if (!st && ctx->n_in > 4 && ctx->in[4]) {
    io.lens = (const int32_t*)ctx->in[4]->data;
    for (int64_t b = 0; b < io.B && !st; ++b) {
      if (io.lens[b] < 0 || io.lens[b] > io.T) {
        st = kiln_make_status(KILN_INVALID_ARGUMENT,
                              "%s node '%s': sequence_lens[%lld] = %d is outside [0, %lld]", op,
                              ctx->node->name, (long long)b, (int)io.lens[b], (long long)io.T);
      }
    }
  }
  for (int32_t i = 0; i < 3 && i < ctx->n_out && !st; ++i) {
    if (!ctx->out[i]) continue;
    st = kiln_nn_f32_dest(ctx, ctx->out[i], &dst[i], &osc[i]);
    if (!st) memset(dst[i], 0, sizeof(float) * (size_t)kiln_array_numel(ctx->out[i]));
  }
  float* work = NULL;
  if (!st) st = kiln_nn_scratch(ctx, io.H * (3 + io.G), sizeof(float), op, (void**)&work);
  if (!st) {
    io.x = src[0], io.w = src[1], io.rw = src[2], io.bias = src[3], io.h0 = src[5];
    io.c0 = src[6], io.p = src[7];
    io.y = dst[0], io.yh = dst[1], io.yc = dst[2];
    for (int64_t d = 0; d < io.r.dirs; ++d)
      for (int64_t b = 0; b < io.B; ++b)
        run_row(&io, d, b, work, work + io.H, work + 2 * io.H, work + (2 + io.G) * io.H);
    for (int32_t i = 0; i < 3 && i < ctx->n_out; ++i)
      if (ctx->out[i]) kiln_nn_f32_store(ctx, ctx->out[i], osc[i]), osc[i] = NULL;
  }
  kiln_nn_scratch_free(ctx, work);
  for (int32_t i = 0; i < 3; ++i) kiln_nn_scratch_free(ctx, osc[i]);
  for (int32_t i = 0; i < 8; ++i) kiln_nn_scratch_free(ctx, sc[i]);
  return st;
}

/* ---- entry points ----------------------------------------------------------- */

kiln_status_t kiln_nn_lstm_infer(kiln_infer_t* ctx) { return rnn_infer(ctx, KILN_NN_RNN_LSTM); }
kiln_status_t kiln_nn_gru_infer(kiln_infer_t* ctx) { return rnn_infer(ctx, KILN_NN_RNN_GRU); }
kiln_status_t kiln_nn_rnn_infer(kiln_infer_t* ctx) { return rnn_infer(ctx, KILN_NN_RNN_RNN); }
kiln_status_t kiln_nn_lstm_run(const kiln_ref_ctx_t* ctx) { return rnn_run(ctx, KILN_NN_RNN_LSTM); }
kiln_status_t kiln_nn_gru_run(const kiln_ref_ctx_t* ctx) { return rnn_run(ctx, KILN_NN_RNN_GRU); }
kiln_status_t kiln_nn_rnn_run(const kiln_ref_ctx_t* ctx) { return rnn_run(ctx, KILN_NN_RNN_RNN); }
int64_t kiln_nn_lstm_flops(const kiln_infer_t* ctx) { return rnn_flops(ctx, 4); }
int64_t kiln_nn_gru_flops(const kiln_infer_t* ctx) { return rnn_flops(ctx, 3); }
int64_t kiln_nn_rnn_flops(const kiln_infer_t* ctx) { return rnn_flops(ctx, 1); }
