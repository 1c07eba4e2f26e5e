/* Symbolic dimension binding (see model_dims.h). */
#include "api/model_dims.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

kiln_status_t kiln_model_bind_dim(kiln_graph_t* g, const char* spec) {
  const char* eq = strchr(spec, '=');
  char* end = NULL;
  errno = 0;
  long long v = eq ? strtoll(eq + 1, &end, 10) : -1;
  if (!eq || !end || end == eq + 1 || *end || v < 0 || errno == ERANGE)
    return kiln_make_status(KILN_INVALID_ARGUMENT, "--dim '%s': expected SYMBOL=SIZE with SIZE in 0..%lld", spec,
                            (long long)INT64_MAX);
  int32_t sym = 0;
  for (int32_t k = 1; k <= g->n_symbols; ++k)
    if (strlen(g->symbols[k]) == (size_t)(eq - spec) && strncmp(g->symbols[k], spec, (size_t)(eq - spec)) == 0)
      sym = k;
  if (!sym)
    return kiln_make_status(KILN_NOT_FOUND, "--dim '%s': the model has no dimension named '%.*s'", spec,
                            (int)(eq - spec), spec);
  for (int32_t k = 0; k < g->n_inputs; ++k) {
    kiln_tensor_t* t = &g->tensors[g->inputs[k]];
    for (int32_t d = 0; d < t->shape.rank; ++d)
      if (kiln_dim_symbol(t->shape.dims[d]) == sym) t->shape.dims[d] = v;
  }
  return NULL;
}

int32_t kiln_model_bind_rest_to_one(kiln_graph_t* g, char* names, size_t n) {
  int32_t bound = 0;
  size_t at = 0;
  if (n) names[0] = '\0';
  for (int32_t k = 0; k < g->n_inputs; ++k) {
    kiln_tensor_t* t = &g->tensors[g->inputs[k]];
    for (int32_t d = 0; d < t->shape.rank; ++d) {
      int32_t sym = kiln_dim_symbol(t->shape.dims[d]);
      if (!sym) continue;
      if (at < n) at += (size_t)snprintf(names + at, n - at, " %s", g->symbols[sym]);
      t->shape.dims[d] = 1;
      ++bound;
    }
  }
  return bound;
}

kiln_status_t kiln_model_dim_range(const char* spec, char* name, size_t n, int64_t* out_lo, int64_t* out_hi,
                                   bool* out_is_range) {
  *out_is_range = false;
  const char* eq = strchr(spec, '=');
  const char* dots = eq ? strstr(eq + 1, "..") : NULL;
  if (!dots) return NULL;
  *out_is_range = true;
  char* end = NULL;
  errno = 0;
  long long lo = strtoll(eq + 1, &end, 10);
  bool ok = end == dots && end != eq + 1 && errno != ERANGE;
  long long hi = ok ? strtoll(dots + 2, &end, 10) : 0;
  ok = ok && end != dots + 2 && !*end && errno != ERANGE && eq != spec;
  if (!ok || lo < 1 || hi < lo || hi > (1ll << 20))
    return kiln_make_status(KILN_INVALID_ARGUMENT,
                            "--dim '%s': expected NAME=LO..HI with 1 <= LO <= HI <= %lld (a dynamic dim)", spec,
                            1ll << 20);
  snprintf(name, n, "%.*s", (int)(eq - spec), spec);
  *out_lo = lo;
  *out_hi = hi;
  return NULL;
}

kiln_status_t kiln_model_dim_set(const char* spec, char* name, size_t n, int64_t* values, int32_t max,
                                 int32_t* out_n) {
  *out_n = 0;
  const char* eq = strchr(spec, '=');
  if (!eq || !strchr(eq + 1, ',')) return NULL;
  int32_t cnt = 0;
  const char* at = eq + 1;
  bool ok = eq != spec;
  while (ok) {
    char* end = NULL;
    errno = 0;
    long long v = strtoll(at, &end, 10);
    ok = end != at && errno != ERANGE && v >= 1 && v <= (1ll << 20) && cnt < max && (*end == ',' || !*end);
    if (!ok) break;
    int32_t i = cnt++; /* insertion sort: a handful of sizes */
    while (i > 0 && values[i - 1] > v) values[i] = values[i - 1], --i;
    ok = !(i > 0 && values[i - 1] == v);
    values[i] = v;
    if (!*end) break;
    at = end + 1;
  }
  if (!ok || cnt < 2)
    return kiln_make_status(KILN_INVALID_ARGUMENT,
                            "--dim '%s': expected NAME=SIZE,SIZE,... with 2 to %d different sizes in 1..%lld (shape "
                            "buckets)", spec, (int)max, 1ll << 20);
  snprintf(name, n, "%.*s", (int)(eq - spec), spec);
  *out_n = cnt;
  return NULL;
}

kiln_status_t kiln_model_batch_alias(const kiln_graph_t* g, char* name, size_t n) {
  if (strcmp(name, "batch") != 0) return NULL;
  for (int32_t k = 1; k <= g->n_symbols; ++k)
    if (!strcmp(g->symbols[k], "batch")) return NULL;
  const kiln_tensor_t* t = g->n_inputs > 0 ? &g->tensors[g->inputs[0]] : NULL;
  int32_t sym = t && t->shape.rank >= 1 ? kiln_dim_symbol(t->shape.dims[0]) : 0;
  if (!sym)
    return kiln_make_status(KILN_UNSUPPORTED,
                            "--dim batch=..: the model has no dim named 'batch' and its first input%s%s%s has a "
                            "fixed dim 0 (export it with a dynamic batch, e.g. torch dynamic_axes)",
                            t ? " '" : "", t ? t->name : "", t ? "'" : "");
  snprintf(name, n, "%s", g->symbols[sym]);
  return NULL;
}
