/* What a tuner reads from the template descriptors (see template.h,
 * "search spaces and fingerprints"): the fingerprint that keys a tuning
 * cache record, and the small helpers over a target's knob space.
 *
 * The fingerprint hashes field by field, by value, never the struct's
 * bytes: padding, plan buffer indices and names differ between models
 * that print the same kernel, and a cache made on one model must serve
 * another with the same layer. */
#include <string.h>

#include "lowering/template.h"

typedef struct {
  uint64_t h;
} fnv_t;

static void put(fnv_t* f, const void* p, size_t n) {
  const unsigned char* b = p;
  for (size_t i = 0; i < n; ++i) {
    f->h ^= b[i];
    f->h *= 1099511628211ull;
  }
}

static void put_i(fnv_t* f, int64_t v) { put(f, &v, sizeof v); }

/* floats by their bits: alpha 1.0 and 1.0000001 print differently */
static void put_f(fnv_t* f, float v) {
  uint32_t u;
  memcpy(&u, &v, sizeof u);
  put_i(f, u);
}

static void put_epi(fnv_t* f, const kiln_template_epi_t* e) {
  put_i(f, e->n_ops);
  for (int32_t i = 0; i < e->n_ops && i < KILN_TEMPLATE_EPI_MAX; ++i) {
    const kiln_template_epi_op_t* o = &e->ops[i];
    put_i(f, o->op);
    put_i(f, o->swap);
    put_i(f, o->a);
    put_i(f, o->b);
    put_f(f, o->alpha);
    put_f(f, o->lo);
    put_f(f, o->hi);
    put_i(f, o->has_lo);
    put_i(f, o->has_hi);
  }
  put_i(f, e->n_operands);
  for (int32_t i = 0; i < e->n_operands && i < KILN_TEMPLATE_EPI_MAX; ++i) {
    put_i(f, e->operands[i].sn);
    put_i(f, e->operands[i].sm);
    put_i(f, e->operands[i].sp);
  }
  put_i(f, e->f16_ok);
}

static void put_gemm(fnv_t* f, const kiln_template_gemm_t* g) {
  const int64_t v[] = {g->M,      g->N,        g->K,          g->batch,      g->sa,          g->sb,
                       g->sy,     g->lda,      g->ldb,        g->ldy,        g->trans_a,     g->trans_b,
                       g->pack_t, g->pack_kbs, g->pack_nkb,   g->pack_tiles, g->has_bias,    g->bias_sm,
                       g->bias_sn, g->n_params};
  for (size_t i = 0; i < sizeof v / sizeof v[0]; ++i) put_i(f, v[i]);
  put_f(f, g->alpha);
  put_f(f, g->beta);
  /* a fused epilogue (keys of GEMMs without one as before) */
  if (g->has_res || g->act) {
    put_i(f, g->has_res);
    put_i(f, g->act);
    put_f(f, g->act_lo);
    put_f(f, g->act_hi);
  }
  for (int32_t j = 0; j < g->n_params && j < 8; ++j) {
    put_i(f, g->roles[j]);
    put_i(f, g->f16[j]);
  }
}

static void put_conv(fnv_t* f, const kiln_template_conv_t* c) {
  const int64_t v[] = {c->M,  c->Q,  c->K,  c->T,  c->C,  c->plane, c->batch,    c->pt,      c->kbs,
                       c->tiles, c->crop, c->q1, c->q2, c->od, c->oh, c->ow, c->has_bias, c->n_params};
  for (size_t i = 0; i < sizeof v / sizeof v[0]; ++i) put_i(f, v[i]);
  for (int64_t i = 0; i < c->T && i < KILN_TEMPLATE_CONV_MAX_TAPS; ++i) put_i(f, c->toff[i]);
  put_epi(f, &c->epi);
  for (int32_t j = 0; j < c->n_params && j < KILN_TEMPLATE_CONV_MAX_PARAMS; ++j) {
    put_i(f, c->roles[j]);
    put_i(f, c->f16[j]);
  }
}

static void put_dw(fnv_t* f, const kiln_template_dw_t* d) {
  const int64_t v[] = {d->N,  d->M,  d->C,  d->Mg, d->ih, d->iw, d->oh, d->ow, d->kh, d->kw, d->sh, d->sw,
                       d->dh, d->dw, d->ph, d->pw, d->bind_x, d->bind_w, d->bind_c, d->bind_y,
                       d->f16_x, d->f16_w, d->f16_c, d->f16_y};
  for (size_t i = 0; i < sizeof v / sizeof v[0]; ++i) put_i(f, v[i]);
  put_epi(f, &d->epi);
  for (int32_t i = 0; i < d->epi.n_operands && i < KILN_TEMPLATE_EPI_MAX; ++i) {
    put_i(f, d->bind_e[i]);
    put_i(f, d->f16_e[i]);
  }
}

static void put_q8(fnv_t* f, const kiln_template_q8_t* q) {
  const int64_t v[] = {q->matmul, q->x_u8, q->w_u8, q->y_u8, q->w_per_chan, q->N, q->G, q->M, q->Mg, q->Cg, q->K, q->P};
  for (size_t i = 0; i < sizeof v / sizeof v[0]; ++i) put_i(f, v[i]);
  for (int i = 0; i < 3; ++i) {
    const int64_t w[] = {q->in[i], q->out[i], q->k[i], q->s[i], q->d[i], q->p[i]};
    for (size_t j = 0; j < sizeof w / sizeof w[0]; ++j) put_i(f, w[j]);
  }
  for (int r = 0; r < KILN_Q8_ROLES; ++r) put_i(f, q->bind[r]);
}

uint64_t kiln_template_fingerprint(const kiln_template_t* t) {
  if (!t || t->kind == KILN_TEMPLATE_NONE || t->kind == KILN_TEMPLATE_MERGED) return 0;
  fnv_t f = {14695981039346656037ull};
  put_i(&f, t->kind);
  /* F(2x2) or F(4x4) is a knob of a Winograd instance (its tiles), not
   * part of the kernel: a point may re-lay its weights either way */
  put_i(&f, t->weights.layout == KILN_TEMPLATE_W_WINOGRAD4 ? KILN_TEMPLATE_W_WINOGRAD : t->weights.layout);
  put_i(&f, t->psum_private);
  /* (only where set: every other instance keeps its fingerprint) f16 sums
   * allowed, whose record has the knob h */
  if (t->f16_sums) put_i(&f, 0x516);
  if (t->kind == KILN_TEMPLATE_GEMM) put_gemm(&f, &t->gemm);
  else if (t->kind == KILN_TEMPLATE_DEPTHWISE) put_dw(&f, &t->dw);
  else if (t->kind == KILN_TEMPLATE_Q8) put_q8(&f, &t->q8);
  else if (t->kind == KILN_TEMPLATE_POOL) {
    const kiln_template_pool_t* q = &t->pool;
    const int64_t v[13] = {q->max + 2 * q->hx + 4 * q->hy, q->count_pad, q->planes, q->ih, q->iw, q->oh, q->ow,
                           q->kh, q->kw, q->sh, q->sw, q->ph, q->pw};
    for (int32_t i = 0; i < 13; ++i) put_i(&f, v[i]);
  }
  else if (t->kind == KILN_TEMPLATE_ROWS) {
    const kiln_template_rows_t* q = &t->rows;
    put_i(&f, q->log + 2 * q->hx + 4 * q->hy + 8 * q->ln + 16 * (q->ln && q->bind_b >= 0) + 32 * q->red);
    put_i(&f, q->rows);
    put_i(&f, q->n);
    if (q->ln) {
      uint32_t e;
      memcpy(&e, &q->eps, sizeof e);
      put_i(&f, e);
    }
  }
  else put_conv(&f, &t->conv);
  return f.h ? f.h : 1;
}

const char* kiln_template_kind_name(kiln_template_kind_t kind) {
  switch (kind) {
    case KILN_TEMPLATE_GEMM: return "gemm";
    case KILN_TEMPLATE_CONV: return "conv";
    case KILN_TEMPLATE_WINOGRAD: return "winograd";
    case KILN_TEMPLATE_DEPTHWISE: return "depthwise";
    case KILN_TEMPLATE_MERGED: return "merged";
    case KILN_TEMPLATE_Q8: return "q8";
    case KILN_TEMPLATE_POOL: return "pool";
    case KILN_TEMPLATE_ROWS: return "rows";
    case KILN_TEMPLATE_NONE: break;
  }
  return "none";
}

void kiln_template_knob_add(kiln_template_knob_t* knob, int32_t value) {
  int32_t at = 0;
  while (at < knob->n && knob->v[at] < value) ++at;
  if ((at < knob->n && knob->v[at] == value) || knob->n >= KILN_TEMPLATE_KNOB_VALUES) return;
  memmove(&knob->v[at + 1], &knob->v[at], sizeof(int32_t) * (size_t)(knob->n - at));
  knob->v[at] = value;
  knob->n++;
}

void kiln_template_space_knob(kiln_template_space_t* sp, const char* name, const int32_t* v, int32_t n,
                              int32_t dflt) {
  if (sp->n_knobs >= KILN_TEMPLATE_TILES_MAX) return;
  kiln_template_knob_t* k = &sp->knobs[sp->n_knobs++];
  memset(k, 0, sizeof *k);
  k->name = name;
  for (int32_t i = 0; i < n; ++i) kiln_template_knob_add(k, v[i]);
  kiln_template_knob_add(k, dflt);
}

bool kiln_template_space_index(const kiln_template_space_t* sp, const kiln_template_tiles_t* tiles, int32_t* idx) {
  if (sp->n_knobs != tiles->n) return false;
  for (int32_t i = 0; i < sp->n_knobs; ++i) {
    idx[i] = -1;
    for (int32_t j = 0; j < sp->knobs[i].n; ++j)
      if (sp->knobs[i].v[j] == tiles->v[i]) idx[i] = j;
    if (idx[i] < 0) return false;
  }
  return true;
}
