/* kiln tune's skip of dear points (compiler/tune_dear.h, issue 24): the
 * prediction from the measured points' costs, the rule that skips a draw
 * out of proportion, and the draw that asks it of the hints and the steps
 * around the best point only where they leave the best point's class, and
 * never of the cache's seed. */
#include <math.h>
#include <string.h>

#include "compiler/tune_dear.h"
#include "testing.h"

#define CONV 1 /* any kind: the book keys on the number */

static void add(kiln_tune_costs_t* b, int32_t group, int32_t cls, double size, double cost, double q) {
  kiln_tune_cost_t c = {.group = group, .kind = CONV, .cls = cls, .size = size, .cost_s = cost, .q = q,
                        .tiles = {.n = 2, .v = {cls, (int32_t)size}}};
  CHECK_OK(kiln_tune_costs_add(b, &c));
}

/* Lavapipe's shape of it: the texel mode (class 4) about a second a point
 * whatever the tiles, the 32-bit subgroup mode (class 3) 8 s at 256
 * multiply-adds unrolled. */
static void lavapipe_book(kiln_tune_costs_t* b, double class3_cost) {
  add(b, 0, 4, 64, 1.0, 0.9);
  add(b, 0, 4, 128, 1.2, 0.95);
  add(b, 0, 4, 256, 1.5, 1.1);
  add(b, 0, 3, 256, class3_cost, 1.8);
}

/* A large subgroup-mode draw is skipped as dear, and says why. */
static void test_dear_skipped(void) {
  kiln_tune_costs_t b = {0};
  lavapipe_book(&b, 8.0);
  double pred = 0;
  int32_t by = 0;
  const char* why = kiln_tune_dear_why(&b, 0, CONV, 3, 2048, 20, &pred, &by);
  CHECK(why && strstr(why, "dear"));
  CHECK_NEAR(pred, 64.0, 1e-9); /* one size of its class: in proportion to it */
  CHECK(by == -1);
  /* with the search time for it, the same draw is measured ... */
  CHECK(!kiln_tune_dear_why(&b, 0, CONV, 3, 2048, 1000, &pred, &by) || by >= 0);
  /* ... unless its region was measured slower and dear already */
  why = kiln_tune_dear_why(&b, 0, CONV, 3, 512, 1000, &pred, &by);
  CHECK(why && strstr(why, "dominated"));
  CHECK(by == 3);
  /* smaller than the slow point: not dominated by it, and in proportion */
  CHECK(!kiln_tune_dear_why(&b, 0, CONV, 3, 128, 1000, &pred, &by));
  CHECK_NEAR(pred, 4.0, 1e-9);
  /* a class never measured: no prediction, never skipped */
  CHECK(!kiln_tune_dear_why(&b, 0, CONV, 2, 4096, 0.1, &pred, &by));
  CHECK(pred < 0);
  kiln_tune_costs_free(&b);
}

/* The prediction follows what the points cost: the same knobs with a
 * cheap or a dear measured neighbour predict in proportion, and only the
 * dear one is skipped. A rule from the knobs alone would answer both the
 * same. */
static void test_uses_measured_costs(void) {
  kiln_tune_costs_t cheap = {0}, dearb = {0};
  lavapipe_book(&cheap, 0.4);
  lavapipe_book(&dearb, 8.0);
  const double pc = kiln_tune_predict_cost(&cheap, 0, CONV, 3, 2048);
  const double pd = kiln_tune_predict_cost(&dearb, 0, CONV, 3, 2048);
  CHECK_NEAR(pc, 3.2, 1e-9);
  CHECK_NEAR(pd / pc, 20.0, 1e-9);
  double pred = 0;
  int32_t by = 0;
  CHECK(!kiln_tune_dear_why(&cheap, 0, CONV, 3, 2048, 20, &pred, &by));
  CHECK(kiln_tune_dear_why(&dearb, 0, CONV, 3, 2048, 20, &pred, &by));
  /* two sizes of a class: the exponent fitted to them (cost ~ size^2 here) */
  kiln_tune_costs_t fit = {0};
  add(&fit, 0, 2, 100, 1.0, 1);
  add(&fit, 0, 2, 200, 4.0, 1);
  CHECK_NEAR(kiln_tune_predict_cost(&fit, 0, CONV, 2, 400), 16.0, 1e-9);
  /* another kernel's points of the kind serve where its own have none */
  CHECK_NEAR(kiln_tune_predict_cost(&fit, 5, CONV, 2, 400), 16.0, 1e-9);
  CHECK(kiln_tune_predict_cost(&fit, 5, CONV + 1, 2, 400) < 0);
  kiln_tune_costs_free(&cheap);
  kiln_tune_costs_free(&dearb);
  kiln_tune_costs_free(&fit);
}

/* A two-knob space: mode (3 or 4) and size (16 ... 2048). */
static void space(kiln_template_space_t* sp) {
  memset(sp, 0, sizeof *sp);
  sp->version = "test.dear.1";
  KILN_TEMPLATE_KNOB(sp, "mode", 4, 3, 4);
  KILN_TEMPLATE_KNOB(sp, "size", 64, 16, 32, 64, 128, 256, 512, 1024, 2048);
}

typedef struct {
  kiln_tune_costs_t* book;
  double left_s;
  bool always_dear;
  int32_t asked, skipped;
  int32_t asked_step, asked_hint, skipped_step, skipped_hint;
  kiln_template_tiles_t tried[64];
  int32_t n_tried;
} draws_t;

static bool usable(void* c, const kiln_template_tiles_t* x) {
  const draws_t* d = c;
  for (int32_t i = 0; i < d->n_tried; ++i)
    if (!memcmp(d->tried[i].v, x->v, sizeof x->v)) return false;
  return true;
}

static bool dear(void* c, const kiln_template_tiles_t* x, const char* from) {
  draws_t* d = c;
  d->asked++;
  double pred = 0;
  int32_t by = 0;
  const bool skip = d->always_dear || kiln_tune_dear_why(d->book, 0, CONV, x->v[0], x->v[1], d->left_s, &pred, &by);
  d->skipped += skip;
  if (!strcmp(from, "step")) {
    d->asked_step++;
    d->skipped_step += skip;
  } else if (!strcmp(from, "hint")) {
    d->asked_hint++;
    d->skipped_hint += skip;
  } else {
    CHECK(!strcmp(from, "random"));
  }
  return skip;
}

/* The class of a point of the test space: its mode. */
static bool mode_cls(void* c, const kiln_template_tiles_t* x, int32_t* cls) {
  (void)c;
  *cls = x->v[0];
  return true;
}

/* Every point of |sp| tried but |keep|. */
static void all_tried_but(draws_t* d, const kiln_template_space_t* sp, const kiln_template_tiles_t* keep) {
  d->n_tried = 0;
  for (int32_t m = 0; m < sp->knobs[0].n; ++m)
    for (int32_t s = 0; s < sp->knobs[1].n; ++s) {
      const kiln_template_tiles_t x = {.n = 2, .v = {sp->knobs[0].v[m], sp->knobs[1].v[s]}};
      if (!keep || x.v[0] != keep->v[0] || x.v[1] != keep->v[1]) d->tried[d->n_tried++] = x;
    }
}

/* Without classes (a target with no tiles_features) hints come out in
 * order even when every draw would be dear; so do the steps around the
 * best point; only random draws are asked. */
static void test_hints_and_steps_never_skipped(void) {
  kiln_template_space_t sp;
  space(&sp);
  const kiln_template_tiles_t hints[2] = {{.n = 2, .v = {3, 2048}}, {.n = 2, .v = {3, 1024}}};
  const kiln_template_tiles_t best = {.n = 2, .v = {4, 64}};
  int32_t next = 0;
  uint64_t rng = 88172645463325252ull;
  draws_t d = {.always_dear = true};
  const char* from = NULL;
  kiln_tune_draw_t dr = {.space = &sp, .hints = hints, .n_hints = 2, .next_hint = &next, .best = &best,
                         .local = false, .rng = &rng, .ctx = &d, .usable = usable, .dear = dear, .from = &from};
  kiln_template_tiles_t x;
  for (int32_t h = 0; h < 2; ++h) {
    CHECK(kiln_tune_draw(&dr, &x) == KILN_TUNE_DRAWN);
    CHECK(x.v[0] == hints[h].v[0] && x.v[1] == hints[h].v[1]);
    CHECK(from && !strcmp(from, "hint"));
    d.tried[d.n_tried++] = x;
  }
  CHECK(d.asked == 0);
  /* random draws only, all dear: none, and the caller told it waits */
  CHECK(kiln_tune_draw(&dr, &x) == KILN_TUNE_ONLY_DEAR);
  CHECK(d.asked > 0 && d.skipped == d.asked);
  /* around the best point: a step of one knob, never asked */
  dr.local = true;
  const int32_t asked = d.asked;
  CHECK(kiln_tune_draw(&dr, &x) == KILN_TUNE_DRAWN);
  CHECK(d.asked == asked);
  CHECK(from && !strcmp(from, "step"));
  CHECK((x.v[0] != best.v[0]) + (x.v[1] != best.v[1]) == 1);
  /* nothing usable at all: none left, not waiting */
  int32_t all = 0;
  for (int32_t m = 0; m < sp.knobs[0].n; ++m)
    for (int32_t s = 0; s < sp.knobs[1].n; ++s) d.tried[all++] = (kiln_template_tiles_t){.n = 2, .v = {sp.knobs[0].v[m], sp.knobs[1].v[s]}};
  d.n_tried = all;
  CHECK(kiln_tune_draw(&dr, &x) == KILN_TUNE_NONE_LEFT);
}

/* Where every measured point cost about the same (OpenCL on PoCL, a
 * compiler whose time does not follow the tiles), no draw is dear even
 * with little time left: the whole space is drawn, nothing skipped. */
static void test_nothing_dear_nothing_skipped(void) {
  kiln_tune_costs_t b = {0};
  add(&b, 0, 4, 64, 1.0, 0.9);
  add(&b, 0, 4, 256, 1.3, 1.1);
  add(&b, 0, 4, 1024, 1.1, 1.0);
  add(&b, 0, 3, 128, 1.2, 1.2);
  add(&b, 0, 3, 512, 1.4, 1.5);
  kiln_template_space_t sp;
  space(&sp);
  const kiln_template_tiles_t best = {.n = 2, .v = {4, 64}};
  int32_t next = 0;
  uint64_t rng = 12345;
  draws_t d = {.book = &b, .left_s = 0.5};
  kiln_tune_draw_t dr = {.space = &sp, .next_hint = &next, .best = &best, .rng = &rng, .ctx = &d,
                         .usable = usable, .dear = dear};
  kiln_template_tiles_t x;
  while (d.n_tried < 16 && kiln_tune_draw(&dr, &x) == KILN_TUNE_DRAWN) d.tried[d.n_tried++] = x;
  CHECK(d.n_tried == 16);
  CHECK(!dr.from); /* not asked */
  CHECK(d.asked >= 16 && d.skipped == 0);
  kiln_tune_costs_free(&b);
}

/* A step from the best point (texel mode, 512) into the subgroup mode at
 * the same size, predicted 16 s with 20 s left for the kernel (tune24d's
 * 41-43 s step on ResNet-18): skipped as a step, and the kernel told it
 * waits. The same step with time to spare is measured. */
static void test_dear_step_other_class_skipped(void) {
  kiln_tune_costs_t b = {0};
  lavapipe_book(&b, 8.0);
  kiln_template_space_t sp;
  space(&sp);
  const kiln_template_tiles_t best = {.n = 2, .v = {4, 512}}, step = {.n = 2, .v = {3, 512}};
  int32_t next = 0;
  uint64_t rng = 88172645463325252ull;
  draws_t d = {.book = &b, .left_s = 20};
  all_tried_but(&d, &sp, &step);
  const char* from = NULL;
  kiln_tune_draw_t dr = {.space = &sp, .next_hint = &next, .best = &best, .local = true, .rng = &rng, .ctx = &d,
                         .usable = usable, .dear = dear, .cls = mode_cls, .from = &from};
  kiln_template_tiles_t x;
  CHECK(kiln_tune_draw(&dr, &x) == KILN_TUNE_ONLY_DEAR);
  CHECK(d.asked_step > 0 && d.skipped_step == d.asked_step);
  CHECK(from == NULL);
  /* with time to spare, and its class's point measured faster than the
   * default (not dominated), the step is measured */
  b.e[3].q = 0.9;
  d.left_s = 1000;
  CHECK(kiln_tune_draw(&dr, &x) == KILN_TUNE_DRAWN);
  CHECK(x.v[0] == 3 && x.v[1] == 512 && from && !strcmp(from, "step"));
  kiln_tune_costs_free(&b);
}

/* The same dear step from a best point already in the subgroup mode (its
 * class): never asked, measured -- the local search's own ground. */
static void test_dear_step_same_class_kept(void) {
  kiln_tune_costs_t b = {0};
  lavapipe_book(&b, 8.0);
  kiln_template_space_t sp;
  space(&sp);
  const kiln_template_tiles_t best = {.n = 2, .v = {3, 256}}, step = {.n = 2, .v = {3, 512}};
  double pred = 0;
  int32_t by = 0;
  CHECK(kiln_tune_dear_why(&b, 0, CONV, 3, 512, 1, &pred, &by)); /* dear for the rule */
  int32_t next = 0;
  uint64_t rng = 12345;
  draws_t d = {.book = &b, .left_s = 1};
  all_tried_but(&d, &sp, &step);
  const char* from = NULL;
  kiln_tune_draw_t dr = {.space = &sp, .next_hint = &next, .best = &best, .local = true, .rng = &rng, .ctx = &d,
                         .usable = usable, .dear = dear, .cls = mode_cls, .from = &from};
  kiln_template_tiles_t x;
  CHECK(kiln_tune_draw(&dr, &x) == KILN_TUNE_DRAWN);
  CHECK(x.v[0] == 3 && x.v[1] == 512 && from && !strcmp(from, "step"));
  CHECK(d.asked == 0);
  kiln_tune_costs_free(&b);
}

/* Hints into another class are asked: a dear one (the subgroup mode at
 * 2048, predicted 64 s) is passed over for good, a cheap one (64: 2 s,
 * within 3x the kernel's median point) is measured, and a hint in the best
 * point's class is never asked. */
static void test_hints_asked_out_of_class(void) {
  kiln_tune_costs_t b = {0};
  lavapipe_book(&b, 8.0);
  kiln_template_space_t sp;
  space(&sp);
  const kiln_template_tiles_t hints[3] = {
      {.n = 2, .v = {3, 2048}}, {.n = 2, .v = {3, 64}}, {.n = 2, .v = {4, 2048}}};
  const kiln_template_tiles_t best = {.n = 2, .v = {4, 64}};
  int32_t next = 0;
  uint64_t rng = 7;
  draws_t d = {.book = &b, .left_s = 20};
  const char* from = NULL;
  kiln_tune_draw_t dr = {.space = &sp, .hints = hints, .n_hints = 3, .next_hint = &next, .best = &best,
                         .rng = &rng, .ctx = &d, .usable = usable, .dear = dear, .cls = mode_cls, .from = &from};
  kiln_template_tiles_t x;
  CHECK(kiln_tune_draw(&dr, &x) == KILN_TUNE_DRAWN);
  CHECK(x.v[0] == 3 && x.v[1] == 64 && !strcmp(from, "hint"));
  CHECK(d.asked_hint == 2 && d.skipped_hint == 1);
  d.tried[d.n_tried++] = x;
  CHECK(kiln_tune_draw(&dr, &x) == KILN_TUNE_DRAWN);
  CHECK(x.v[0] == 4 && x.v[1] == 2048 && !strcmp(from, "hint"));
  CHECK(d.asked_hint == 2); /* in the best's class: not asked */
  CHECK(next == 3);
  kiln_tune_costs_free(&b);
}

/* The cache's seed comes first and is never asked, however dear and
 * whatever its class; then the draw goes on to the hints. */
static void test_seed_never_skipped(void) {
  kiln_template_space_t sp;
  space(&sp);
  const kiln_template_tiles_t seed = {.n = 2, .v = {3, 2048}}, hint = {.n = 2, .v = {4, 128}};
  const kiln_template_tiles_t best = {.n = 2, .v = {4, 64}};
  bool has_seed = true;
  int32_t next = 0;
  uint64_t rng = 99;
  draws_t d = {.always_dear = true};
  const char* from = NULL;
  kiln_tune_draw_t dr = {.space = &sp, .seed = &seed, .has_seed = &has_seed, .hints = &hint, .n_hints = 1,
                         .next_hint = &next, .best = &best, .rng = &rng, .ctx = &d, .usable = usable, .dear = dear,
                         .cls = mode_cls, .from = &from};
  kiln_template_tiles_t x;
  CHECK(kiln_tune_draw(&dr, &x) == KILN_TUNE_DRAWN);
  CHECK(x.v[0] == 3 && x.v[1] == 2048 && from && !strcmp(from, "seed"));
  CHECK(!has_seed && d.asked == 0);
  d.tried[d.n_tried++] = x;
  CHECK(kiln_tune_draw(&dr, &x) == KILN_TUNE_DRAWN);
  CHECK(x.v[0] == 4 && x.v[1] == 128 && !strcmp(from, "hint"));
  /* a seed no longer usable (tried) gives way to the next point */
  has_seed = true;
  d.tried[d.n_tried++] = x;
  CHECK(kiln_tune_draw(&dr, &x) == KILN_TUNE_ONLY_DEAR);
  CHECK(!has_seed);
}

/* One slow build among cheap points of a class (PoCL's shape of it: 0.1 s
 * points, one of 2.5 s that lost) does not make the class's larger draws
 * dominated: the law fitted to the class predicts them cheap. A region
 * measured dear throughout still is. */
static void test_outlier_not_dominating(void) {
  kiln_tune_costs_t b = {0};
  const double cheap[8] = {0.01, 0.02, 0.04, 0.08, 0.012, 0.018, 0.045, 0.07}; /* about in proportion */
  for (int i = 0; i < 8; ++i) add(&b, 0, 0, 64 << (i % 4), cheap[i], 0.9);
  add(&b, 0, 0, 256, 2.5, 1.2);
  double pred = 0;
  int32_t by = 0;
  const char* why = kiln_tune_dear_why(&b, 0, CONV, 0, 1024, 1000, &pred, &by);
  CHECK_MSG(!why, "a cheap draw skipped: %s (predicted %.3f s, by %d)", why ? why : "", pred, (int)by);
  /* out of proportion to the median (0.04 s), far below the slow point */
  CHECK_MSG(pred > 3 * 0.04 && pred < 2.5 / 3, "predicted %.3f s", pred);
  kiln_tune_costs_free(&b);
  /* the region dear throughout: dominated as before */
  kiln_tune_costs_t r = {0};
  for (int i = 0; i < 4; ++i) add(&r, 0, 0, 64, 0.01, 0.9);
  add(&r, 0, 1, 256, 2.0, 1.2);
  add(&r, 0, 1, 512, 4.0, 1.3);
  why = kiln_tune_dear_why(&r, 0, CONV, 1, 1024, 1000, &pred, &by);
  CHECK(why && strstr(why, "dominated"));
  kiln_tune_costs_free(&r);
}

int main(void) {
  RUN(test_dear_skipped);
  RUN(test_outlier_not_dominating);
  RUN(test_uses_measured_costs);
  RUN(test_hints_and_steps_never_skipped);
  RUN(test_nothing_dear_nothing_skipped);
  RUN(test_dear_step_other_class_skipped);
  RUN(test_dear_step_same_class_kept);
  RUN(test_hints_asked_out_of_class);
  RUN(test_seed_never_skipped);
  return kiln_test_finish();
}
