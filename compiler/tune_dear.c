/* kiln tune's dear-draw rule (see tune_dear.h). */
#include "compiler/tune_dear.h"

#include <math.h>
#include <stdlib.h>

#include "compiler/tune_micro.h" /* kiln_tune_median */

kiln_status_t kiln_tune_costs_add(kiln_tune_costs_t* b, const kiln_tune_cost_t* c) {
  if (b->n == b->cap) {
    const int32_t cap = b->cap ? 2 * b->cap : 64;
    kiln_tune_cost_t* e = realloc(b->e, sizeof *e * (size_t)cap);
    if (!e) return kiln_make_status(KILN_OUT_OF_MEMORY, "tune: the points' costs");
    b->e = e;
    b->cap = cap;
  }
  b->e[b->n++] = *c;
  return NULL;
}

void kiln_tune_costs_free(kiln_tune_costs_t* b) {
  free(b->e);
  b->e = NULL;
  b->n = b->cap = 0;
}

/* Whether entry |c| is among the points a prediction for (group, kind,
 * cls) reads: |own| the kernel's, else the same kind's in other kernels
 * (lavapipe's compile time follows the tiles more than the shapes). */
static bool same(const kiln_tune_cost_t* c, bool own, int32_t group, int32_t kind, int32_t cls) {
  if (c->cls != cls || c->size <= 0 || !(c->cost_s > 0)) return false;
  return own ? c->group == group : c->group != group && c->kind == kind;
}

double kiln_tune_predict_cost(const kiln_tune_costs_t* b, int32_t group, int32_t kind, int32_t cls, double size) {
  if (!(size > 0)) return -1;
  for (int pass = 0; pass < 2; ++pass) {
    const bool own = pass == 0;
    /* log cost = a + e log size, least squares */
    double n = 0, sx = 0, sy = 0, sxx = 0, sxy = 0;
    for (int32_t i = 0; i < b->n; ++i) {
      const kiln_tune_cost_t* c = &b->e[i];
      if (!same(c, own, group, kind, cls)) continue;
      const double x = log(c->size), y = log(c->cost_s);
      n += 1;
      sx += x;
      sy += y;
      sxx += x * x;
      sxy += x * y;
    }
    if (n == 0) continue;
    const double var = sxx - sx * sx / n;
    /* one size measured: cost in proportion to the unrolled body (the
     * driver's compile); a fit outside 0-2 is noise of a few points */
    const double e = var > 1e-9 ? fmin(2, fmax(0, (sxy - sx * sy / n) / var)) : 1;
    const double a = (sy - e * sx) / n;
    return exp(a + e * log(size));
  }
  return -1;
}

/* The median cost of the kernel's measured points (else of its kind's in
 * other kernels); < 0 with none. */
static double median_cost(const kiln_tune_costs_t* b, int32_t group, int32_t kind) {
  double* v = malloc(sizeof(double) * (size_t)(b->n + 1));
  if (!v) return -1;
  double m = -1;
  for (int pass = 0; pass < 2 && m < 0; ++pass) {
    int32_t n = 0;
    for (int32_t i = 0; i < b->n; ++i) {
      const kiln_tune_cost_t* c = &b->e[i];
      if (pass == 0 ? c->group == group : c->kind == kind) v[n++] = c->cost_s;
    }
    if (n > 0) m = kiln_tune_median(v, n);
  }
  free(v);
  return m;
}

const char* kiln_tune_dear_why(const kiln_tune_costs_t* b, int32_t group, int32_t kind, int32_t cls, double size,
                               double left_s, double* pred, int32_t* by) {
  *by = -1;
  *pred = kiln_tune_predict_cost(b, group, kind, cls, size);
  if (*pred < 0) return NULL;
  const double med = median_cost(b, group, kind);
  if (med < 0 || *pred <= KILN_TUNE_DEAR_RATIO * med) return NULL; /* in proportion to the kernel's points */
  if (*pred > KILN_TUNE_DEAR_SHARE * left_s) return "dear: over half the search time left for each kernel";
  /* the same region of the kernel's space measured no faster than the
   * default and out of proportion already: a larger point of it will not
   * be cheaper, and its speed was not there. The law fitted to the class
   * must agree that the region is that dear: one slow build among cheap
   * points of a class (PoCL: a 2.5 s point among 0.1 s ones skipped 30
   * cheap draws of a kernel) is noise, not a region. */
  for (int32_t i = 0; i < b->n; ++i) {
    const kiln_tune_cost_t* c = &b->e[i];
    if (c->group == group && c->cls == cls && c->size <= size && c->q >= 1 &&
        c->cost_s > KILN_TUNE_DEAR_RATIO * med && c->cost_s <= KILN_TUNE_DEAR_RATIO * *pred) {
      *by = i;
      return "dominated: a point of its class no larger was slower and as dear";
    }
  }
  return NULL;
}

static uint64_t xorshift(uint64_t* r) {
  *r ^= *r << 13;
  *r ^= *r >> 7;
  *r ^= *r << 17;
  return *r;
}

/* Whether hint or step |x| is to be passed over as dear: only one that
 * moves into a class other than the best point's is asked. */
static bool near_dear(const kiln_tune_draw_t* d, const kiln_template_tiles_t* x, const char* from) {
  if (!d->dear || !d->cls) return false;
  int32_t cx = 0, cb = 0;
  if (!d->cls(d->ctx, x, &cx) || !d->cls(d->ctx, d->best, &cb) || cx == cb) return false;
  return d->dear(d->ctx, x, from);
}

kiln_tune_drawn_t kiln_tune_draw(const kiln_tune_draw_t* d, kiln_template_tiles_t* out) {
  const kiln_template_space_t* sp = d->space;
  if (d->has_seed && *d->has_seed) {
    *d->has_seed = false;
    if (d->usable(d->ctx, d->seed)) {
      *out = *d->seed;
      if (d->from) *d->from = "seed";
      return KILN_TUNE_DRAWN;
    }
  }
  bool skipped = false;
  while (*d->next_hint < d->n_hints) {
    kiln_template_tiles_t x = d->hints[(*d->next_hint)++];
    if (d->tie) d->tie(d->ctx, &x);
    if (!d->usable(d->ctx, &x)) continue;
    if (near_dear(d, &x, "hint")) {
      skipped = true;
      continue;
    }
    *out = x;
    if (d->from) *d->from = "hint";
    return KILN_TUNE_DRAWN;
  }
  int32_t idx[KILN_TEMPLATE_TILES_MAX];
  const bool local = d->local && kiln_template_space_index(sp, d->best, idx);
  for (int attempt = 0; attempt < 200; ++attempt) {
    kiln_template_tiles_t x = {.n = sp->n_knobs};
    const bool step = local && attempt < 100;
    if (step) {
      for (int32_t i = 0; i < sp->n_knobs; ++i) x.v[i] = d->best->v[i];
      const int32_t i = (int32_t)(xorshift(d->rng) % (uint64_t)sp->n_knobs);
      const int32_t j = idx[i] + ((xorshift(d->rng) & 1) ? 1 : -1);
      if (j < 0 || j >= sp->knobs[i].n) continue;
      x.v[i] = sp->knobs[i].v[j];
    } else {
      for (int32_t i = 0; i < sp->n_knobs; ++i) x.v[i] = sp->knobs[i].v[xorshift(d->rng) % (uint64_t)sp->knobs[i].n];
    }
    if (d->tie) d->tie(d->ctx, &x);
    if (!d->usable(d->ctx, &x)) continue;
    /* predicted out of proportion: another instead (a step only where it
     * leaves the best point's class) */
    if (step ? near_dear(d, &x, "step") : d->dear && d->dear(d->ctx, &x, "random")) {
      skipped = true;
      continue;
    }
    *out = x;
    if (d->from) *d->from = step ? "step" : "random";
    return KILN_TUNE_DRAWN;
  }
  return skipped ? KILN_TUNE_ONLY_DEAR : KILN_TUNE_NONE_LEFT;
}
