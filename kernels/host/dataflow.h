/* The selection rules of TopK, Compress and Unique, shared by the reference
 * kernels (ir/ops/tensor_seq.c, ir/ops/tensor_dataflow.c) and libkiln_rt's
 * host kernels for staged modules (runtime/staged_ops.c), so both give the
 * same bits. Header-only (static inline: what a file does not call costs
 * nothing), on plain pointers; the callers allocate, check shapes and name
 * the node in errors.
 *
 * TopK orders by value with NaN above every number and ties broken by the
 * lower index. Unique orders slices lexicographically (stable, so the first
 * of a run of equal slices is its first occurrence). */
#ifndef KILN_KERNELS_HOST_DATAFLOW_H_
#define KILN_KERNELS_HOST_DATAFLOW_H_

#include <stdbool.h>
#include <stdint.h>
#include <string.h>

#include "kiln/array.h"

/* ---- TopK ---- */

/* True when element |j| (value a) comes before element |i| (value b). */
static inline bool kiln_topk_before(double a, int64_t j, double b, int64_t i, bool largest) {
  const bool na = a != a, nb = b != b;
  if (na || nb) return na && nb ? j < i : (largest ? na : nb);
  if (a == b) return j < i;
  return largest ? a > b : a < b;
}

/* Stable merge sort of |idx| (n entries) by kiln_topk_before on the values
 * |v|; |tmp| scratch of n. Bottom-up: no recursion. */
static inline void kiln_topk_sort(const double* v, bool largest, int64_t* idx, int64_t* tmp, int64_t n) {
  for (int64_t w = 1; w < n; w *= 2) {
    for (int64_t lo = 0; lo < n; lo += 2 * w) {
      const int64_t mid = lo + w < n ? lo + w : n, hi = lo + 2 * w < n ? lo + 2 * w : n;
      int64_t a = lo, b = mid, k = lo;
      while (a < mid || b < hi)
        tmp[k++] = a >= mid || (b < hi && kiln_topk_before(v[idx[b]], idx[b], v[idx[a]], idx[a], largest)) ? idx[b++]
                                                                                                           : idx[a++];
    }
    memcpy(idx, tmp, sizeof(int64_t) * (size_t)n);
  }
}

/* Restores the heap |h| (m entries) below |at|: the root comes last in
 * kiln_topk_before's order, so it is the one a better element replaces. */
static inline void kiln_topk_sift(const double* v, bool largest, int64_t* h, int64_t m, int64_t at) {
  for (;;) {
    int64_t c = 2 * at + 1;
    if (c >= m) return;
    if (c + 1 < m && kiln_topk_before(v[h[c]], h[c], v[h[c + 1]], h[c + 1], largest)) ++c;
    if (!kiln_topk_before(v[h[at]], h[at], v[h[c]], h[c], largest)) return;
    const int64_t t = h[at];
    h[at] = h[c];
    h[c] = t;
    at = c;
  }
}

/* The first |k| of the |n| values |v| in kiln_topk_before's order into
 * idx[0..k) (|idx| and |tmp| hold n). The order is total (ties by index),
 * so a heap of the k best seen -- O(n log k), where K is much smaller than
 * the axis, as in a detector's top scores -- then a sort of those k gives
 * what sorting all n would. */
static inline void kiln_topk_select(const double* v, bool largest, int64_t n, int64_t k, int64_t* idx, int64_t* tmp) {
  if (k * 8 >= n) {
    for (int64_t i = 0; i < n; ++i) idx[i] = i;
    kiln_topk_sort(v, largest, idx, tmp, n);
    return;
  }
  for (int64_t i = 0; i < k; ++i) idx[i] = i;
  for (int64_t i = k / 2 - 1; i >= 0; --i) kiln_topk_sift(v, largest, idx, k, i);
  for (int64_t i = k; i < n; ++i)
    if (kiln_topk_before(v[i], i, v[idx[0]], idx[0], largest)) {
      idx[0] = i;
      kiln_topk_sift(v, largest, idx, k, 0);
    }
  kiln_topk_sort(v, largest, idx, tmp, k);
}

/* TopK of |x| (outer x n x inner) along its middle axis into |yv| (values,
 * x's dtype; NULL: not wanted) and |yi| (i64 indices; NULL: not wanted),
 * both outer x k x inner. |scratch| holds 3 * n int64_t. */
static inline void kiln_topk_run(const kiln_array_t* x, int64_t outer, int64_t n, int64_t inner, int64_t k,
                                 bool largest, void* yv, int64_t* yi, int64_t* scratch) {
  double* v = (double*)(scratch + 2 * n);
  const size_t esz = kiln_dtype_size(x->dtype);
  const bool fl = kiln_dtype_is_float(x->dtype);
  for (int64_t o = 0; o < outer; ++o)
    for (int64_t e = 0; e < inner; ++e) {
      const int64_t base = o * n * inner + e;
      for (int64_t i = 0; i < n; ++i) {
        const size_t at = (size_t)(base + i * inner);
        v[i] = fl ? kiln_load_f64(x->dtype, x->data, at) : (double)kiln_load_i64(x->dtype, x->data, at);
      }
      kiln_topk_select(v, largest, n, k, scratch, scratch + n);
      for (int64_t r = 0; r < k; ++r) {
        const size_t at = (size_t)((o * k + r) * inner + e);
        if (yv) memcpy((char*)yv + at * esz, (const char*)x->data + (size_t)(base + scratch[r] * inner) * esz, esz);
        if (yi) yi[at] = scratch[r];
      }
    }
}

/* ---- Compress ---- */

/* The entries of |cond| (nc bytes) that are set. */
static inline int64_t kiln_compress_count(const uint8_t* cond, int64_t nc) {
  int64_t cnt = 0;
  for (int64_t i = 0; i < nc; ++i) cnt += cond[i] != 0;
  return cnt;
}

/* Copies the slices of |x| (outer x len x inner elements of |esz| bytes)
 * whose condition entry (of nc <= len) is set into |out|. */
static inline void kiln_compress_copy(const void* x, size_t esz, int64_t outer, int64_t len, int64_t inner,
                                      const uint8_t* cond, int64_t nc, void* out) {
  char* o = (char*)out;
  for (int64_t a = 0; a < outer; ++a)
    for (int64_t i = 0; i < nc; ++i) {
      if (!cond[i]) continue;
      memcpy(o, (const char*)x + (size_t)((a * len + i) * inner) * esz, (size_t)inner * esz);
      o += (size_t)inner * esz;
    }
}

/* ---- Unique ---- */

typedef struct {
  const kiln_array_t* x;
  int64_t outer, len, inner; /* slice i: elements (a, i, k) */
} kiln_uniq_t;

static inline int kiln_uniq_elem_cmp(kiln_dtype_t t, const void* d, size_t i, size_t j) {
  if (kiln_dtype_is_float(t)) {
    const double a = kiln_load_f64(t, d, i), b = kiln_load_f64(t, d, j);
    return a < b ? -1 : a > b ? 1 : 0;
  }
  if (kiln_dtype_is_unsigned(t)) {
    const uint64_t a = (uint64_t)kiln_load_i64(t, d, i), b = (uint64_t)kiln_load_i64(t, d, j);
    return a < b ? -1 : a > b ? 1 : 0;
  }
  const int64_t a = kiln_load_i64(t, d, i), b = kiln_load_i64(t, d, j);
  return a < b ? -1 : a > b ? 1 : 0;
}

/* Lexicographic order of slices |i| and |j|. */
static inline int kiln_uniq_slice_cmp(const kiln_uniq_t* u, int64_t i, int64_t j) {
  for (int64_t a = 0; a < u->outer; ++a)
    for (int64_t k = 0; k < u->inner; ++k) {
      const int c = kiln_uniq_elem_cmp(u->x->dtype, u->x->data, (size_t)((a * u->len + i) * u->inner + k),
                                       (size_t)((a * u->len + j) * u->inner + k));
      if (c) return c;
    }
  return 0;
}

/* Groups the slices of |u| into the unique ones: |buf| holds 4 * len
 * int64_t and gets, for m = len, first[g] = buf[2m + g] (the first slice of
 * group g), group[i] = buf[3m + i], order[k] = buf[m + k] (the group at
 * output position k: sorted, or by first occurrence) and pos[g] = buf[g]
 * (the output position of group g). Returns the number of groups. */
static inline int64_t kiln_uniq_group(const kiln_uniq_t* u, bool sorted, int64_t* buf) {
  const int64_t m = u->len;
  int64_t *idx = buf, *tmp = buf + m, *first = buf + 2 * m, *group = buf + 3 * m;
  for (int64_t i = 0; i < m; ++i) idx[i] = i;
  for (int64_t w = 1; w < m; w *= 2) { /* stable bottom-up merge sort */
    for (int64_t lo = 0; lo < m; lo += 2 * w) {
      const int64_t mid = lo + w < m ? lo + w : m, hi = lo + 2 * w < m ? lo + 2 * w : m;
      int64_t a = lo, b = mid, k = lo;
      while (a < mid || b < hi)
        tmp[k++] = a >= mid || (b < hi && kiln_uniq_slice_cmp(u, idx[b], idx[a]) < 0) ? idx[b++] : idx[a++];
    }
    memcpy(idx, tmp, sizeof(int64_t) * (size_t)m);
  }
  int64_t nu = 0;
  for (int64_t i = 0; i < m; ++i) {
    if (i == 0 || kiln_uniq_slice_cmp(u, idx[i - 1], idx[i]) != 0) first[nu++] = idx[i];
    group[idx[i]] = nu - 1;
  }
  int64_t* order = tmp;
  for (int64_t g = 0; g < nu; ++g) order[g] = g;
  if (!sorted) /* insertion by first index */
    for (int64_t a = 1; a < nu; ++a)
      for (int64_t b = a; b > 0 && first[order[b]] < first[order[b - 1]]; --b) {
        const int64_t t = order[b];
        order[b] = order[b - 1];
        order[b - 1] = t;
      }
  for (int64_t k = 0; k < nu; ++k) idx[order[k]] = k; /* pos */
  return nu;
}

/* Unique's outputs from kiln_uniq_group's |buf| and |nu| groups, each NULL
 * when not wanted: |y| the unique slices (outer x nu x inner), |ind| the
 * first index of each, |inv| each slice's output position (len), |cnt| how
 * many slices each has (nu; zeroed here). */
static inline void kiln_uniq_write(const kiln_uniq_t* u, const int64_t* buf, int64_t nu, void* y, int64_t* ind,
                                   int64_t* inv, int64_t* cnt) {
  const int64_t m = u->len;
  const int64_t *pos = buf, *order = buf + m, *first = buf + 2 * m, *group = buf + 3 * m;
  const size_t esz = kiln_dtype_size(u->x->dtype);
  for (int64_t a = 0; y && a < u->outer; ++a)
    for (int64_t k = 0; k < nu; ++k)
      memcpy((char*)y + (size_t)((a * nu + k) * u->inner) * esz,
             (const char*)u->x->data + (size_t)((a * m + first[order[k]]) * u->inner) * esz, (size_t)u->inner * esz);
  for (int64_t k = 0; ind && k < nu; ++k) ind[k] = first[order[k]];
  for (int64_t i = 0; inv && i < m; ++i) inv[i] = pos[group[i]];
  if (cnt) {
    memset(cnt, 0, sizeof(int64_t) * (size_t)nu);
    for (int64_t i = 0; i < m; ++i) cnt[pos[group[i]]]++;
  }
}

#endif /* KILN_KERNELS_HOST_DATAFLOW_H_ */
