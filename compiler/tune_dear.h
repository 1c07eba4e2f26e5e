/* kiln tune: which random draws are too dear to measure (issue 24).
 *
 * On lavapipe a point's cost is mostly the driver's compile, which grows
 * with the unrolled body and depends on the read mode: a subgroup-mode
 * point with 512 accumulators an invocation took 25-33 s where its texel
 * mode twin took 1.1 s, and such points never won. The tuner records what
 * every measured point cost with the size and class of its knobs (the
 * template set's tiles_features: unrolled multiply-adds and the read mode
 * for a Vulkan GEMM or conv) and predicts an unmeasured point's cost from
 * the points of its kernel in the same class (else those of the same
 * template kind in other kernels): a power law in the size, fitted by
 * least squares on the logarithms (exponent 0-2; 1 with a single size).
 * A random draw is skipped when its prediction is out of proportion: over
 * a share of the search time left for each kernel and several times the
 * kernel's median point, or when a point of the same class no larger was
 * measured no faster than the default and that dear. Nothing is hard-coded
 * to a driver: a device whose compiles are cheap makes no prediction dear.
 * The hints and the steps around the best point are asked too where they
 * move into a class other than the best point's (a step within it always
 * runs: that is where the local search earns its keep); the default and
 * the cache's seed are never asked (compiler/tune_search.c).
 *
 * Not thread-safe; the tuner owns one book. */
#ifndef KILN_COMPILER_TUNE_DEAR_H
#define KILN_COMPILER_TUNE_DEAR_H

#include <stdint.h>

#include "kiln/status.h"
#include "lowering/template.h"

/* A draw is dear past this share of the search time left for each kernel
 * still searching ... */
#define KILN_TUNE_DEAR_SHARE 0.5
/* ... and past this many times its kernel's median measured point. */
#define KILN_TUNE_DEAR_RATIO 3.0

/* One measured point. */
typedef struct {
  int32_t group; /* the tuner's kernel */
  int32_t kind;  /* its template kind (kiln_template_kind_t) */
  int32_t cls;   /* tiles_features' class (the read mode) */
  double size;   /* tiles_features' size (> 0) */
  double cost_s; /* what measuring it cost: program, driver, runs */
  double q;      /* its time over the default's beside it (>= 1: no faster; INFINITY: refused or wrong) */
  kiln_template_tiles_t tiles;
} kiln_tune_cost_t;

typedef struct {
  kiln_tune_cost_t* e;
  int32_t n, cap;
} kiln_tune_costs_t;

/* Appends a copy of |c|. KILN_OUT_OF_MEMORY leaves the book as it was. */
kiln_status_t kiln_tune_costs_add(kiln_tune_costs_t* b, const kiln_tune_cost_t* c);
void kiln_tune_costs_free(kiln_tune_costs_t* b);

/* The predicted cost in seconds of a point of kernel |group| (template
 * kind |kind|, class |cls|, size |size|) from the book's measured points;
 * < 0 where none of its class was measured (no prediction). */
double kiln_tune_predict_cost(const kiln_tune_costs_t* b, int32_t group, int32_t kind, int32_t cls, double size);

/* Why a random draw (group, kind, cls, size) is not worth measuring, as
 * static text, or NULL to measure it. |left_s|: the search time left for
 * each kernel still searching. *pred the prediction (< 0: none), *by the
 * measured point that dominates it (index in the book; -1 for none). */
const char* kiln_tune_dear_why(const kiln_tune_costs_t* b, int32_t group, int32_t kind, int32_t cls, double size,
                               double left_s, double* pred, int32_t* by);

/* One draw of the search's next point of a kernel (compiler/tune_search.c):
 * first the cache's |seed| where *has_seed (cleared), never asked; then the
 * target's hints, in order, each |tie|d; then, where |local|, steps of one
 * knob of |best| one value up or down (100 tries), then random points of
 * |space| (to 200 tries in all). A point must be |usable| (untried and
 * valid). A random draw asks |dear| (NULL: never dear) and is drawn again
 * when dear; a hint or a step asks it only where it moves into a class
 * (|cls|) other than |best|'s, and is passed over when dear (a hint for
 * good, a step drawn again): a step or a hint within the best point's
 * class always runs, and with no |cls| none is asked. */
typedef struct {
  const kiln_template_space_t* space;
  const kiln_template_tiles_t* seed; /* the cache's point, where *has_seed */
  bool* has_seed;                    /* NULL: no seed */
  const kiln_template_tiles_t* hints;
  int32_t n_hints;
  int32_t* next_hint; /* the first hint not yet drawn; advanced */
  const kiln_template_tiles_t* best;
  bool local;    /* steps around |best| first */
  uint64_t* rng; /* xorshift state, advanced */
  void* ctx;
  bool (*usable)(void* ctx, const kiln_template_tiles_t* x);
  void (*tie)(void* ctx, kiln_template_tiles_t* x); /* NULL: none */
  /* whether |x|, drawn as |from| ("hint", "step" or "random"), is too dear
   * to measure (NULL: never) */
  bool (*dear)(void* ctx, const kiln_template_tiles_t* x, const char* from);
  /* the cost class of |x| (tiles_features'); false where it has none */
  bool (*cls)(void* ctx, const kiln_template_tiles_t* x, int32_t* cls); /* NULL: none */
  const char** from; /* set to "seed", "hint", "step" or "random" with a point drawn (NULL: not asked) */
} kiln_tune_draw_t;

/* KILN_TUNE_DRAWN: a point in *out; KILN_TUNE_NONE_LEFT: no usable point
 * found; KILN_TUNE_ONLY_DEAR: none found and some were dear (the kernel
 * may wait for more time rather than end its search). */
typedef enum { KILN_TUNE_NONE_LEFT = 0, KILN_TUNE_DRAWN = 1, KILN_TUNE_ONLY_DEAR = 2 } kiln_tune_drawn_t;

kiln_tune_drawn_t kiln_tune_draw(const kiln_tune_draw_t* d, kiln_template_tiles_t* out);

#endif
