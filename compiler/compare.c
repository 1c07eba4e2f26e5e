/* Tolerance comparison reporting the worst element, the way the conformance
 * runner and `kiln run --compare` present mismatches. */
#include "compiler/compare.h"


#include <math.h>
#include <stdio.h>
#include <string.h>

void kiln_compare(const kiln_array_t* got, const kiln_array_t* want, double rtol, double atol,
                  kiln_compare_result_t* r) {
  memset(r, 0, sizeof(*r));
  r->worst_index = -1;
  char gs[160], ws[160];
  if (!kiln_shape_equal(&got->shape, &want->shape)) {
    snprintf(r->message, sizeof r->message, "shape mismatch: got %s, expected %s",
             kiln_shape_format(&got->shape, gs, sizeof gs),
             kiln_shape_format(&want->shape, ws, sizeof ws));
    return;
  }
  /* float8 compares as the values it holds (exact in double) */
  bool fg = kiln_dtype_is_float(got->dtype) || kiln_dtype_is_f8(got->dtype),
       fw = kiln_dtype_is_float(want->dtype) || kiln_dtype_is_f8(want->dtype);
  if (fg != fw || (!fg && got->dtype != want->dtype && !(kiln_dtype_is_int(got->dtype) &&
                                                         kiln_dtype_is_int(want->dtype)))) {
    snprintf(r->message, sizeof r->message, "dtype mismatch: got %s, expected %s",
             kiln_dtype_name(got->dtype), kiln_dtype_name(want->dtype));
    return;
  }
  int64_t n = kiln_shape_count(&got->shape);
  double worst_excess = -1.0;
  for (int64_t i = 0; i < n; ++i) {
    double g = kiln_load_f64(got->dtype, got->data, (size_t)i);
    double w = kiln_load_f64(want->dtype, want->data, (size_t)i);
    bool bad;
    double err, excess;
    if (!fg) {
      int64_t gi = kiln_load_i64(got->dtype, got->data, (size_t)i);
      int64_t wi = kiln_load_i64(want->dtype, want->data, (size_t)i);
      bad = gi != wi;
      err = bad ? fabs((double)gi - (double)wi) : 0.0;
      excess = err;
    } else if (isnan(w) || isnan(g)) {
      bad = isnan(w) != isnan(g);
      err = bad ? INFINITY : 0.0;
      excess = bad ? INFINITY : -1.0;
    } else if (isinf(w) || isinf(g)) {
      bad = g != w;
      err = bad ? INFINITY : 0.0;
      excess = bad ? INFINITY : -1.0;
    } else {
      err = fabs(g - w);
      double tol = atol + rtol * fabs(w);
      bad = err > tol;
      excess = err - tol;
      double rel = fabs(w) > 0 ? err / fabs(w) : (err > 0 ? INFINITY : 0.0);
      if (rel > r->max_rel_err) r->max_rel_err = rel;
    }
    if (err > r->max_abs_err) r->max_abs_err = err;
    if (bad) r->mismatches++;
    if (excess > worst_excess) {
      worst_excess = excess;
      r->worst_index = i;
      r->worst_got = g;
      r->worst_want = w;
    }
  }
  r->ok = r->mismatches == 0;
  /* Spell the worst index as coordinates too. */
  char coord[160] = "";
  if (r->worst_index >= 0 && got->shape.rank > 0) {
    int64_t rem = r->worst_index, idx[KILN_MAX_RANK];
    for (int32_t d = got->shape.rank - 1; d >= 0; --d) {
      int64_t dim = got->shape.dims[d] ? got->shape.dims[d] : 1;
      idx[d] = rem % dim;
      rem /= dim;
    }
    size_t o = 0;
    o += (size_t)snprintf(coord + o, sizeof coord - o, " [");
    for (int32_t d = 0; d < got->shape.rank && o < sizeof coord; ++d)
      o += (size_t)snprintf(coord + o, sizeof coord - o, "%s%lld", d ? "," : "", (long long)idx[d]);
    if (o < sizeof coord) snprintf(coord + o, sizeof coord - o, "]");
  }
  snprintf(r->message, sizeof r->message,
           "%s: %lld of %lld elements outside rtol %g atol %g; max abs err %.3g, max rel err %.3g; "
           "worst at index %lld%s: got %.9g, expected %.9g",
           r->ok ? "match" : "MISMATCH", (long long)r->mismatches, (long long)n, rtol, atol,
           r->max_abs_err, r->max_rel_err, (long long)r->worst_index, coord, r->worst_got,
           r->worst_want);
}
