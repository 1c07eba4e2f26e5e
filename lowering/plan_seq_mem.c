/* Buffer sizes per value of a dim inside the shapes (see plan_seq_mem.h). */
#include "lowering/plan_seq_mem.h"

#include <stdlib.h>
#include <string.h>

enum { NS = KILN_PLAN_SEQ_SIZES, BASE = KILN_PLAN_SEQ_SIZES - 1 };

static __int128 eval(const int64_t* c, int64_t n) {
  return (__int128)c[0] + (__int128)c[1] * n + (__int128)c[2] * n * n;
}

bool kiln_plan_seq_fit(const int64_t* x, const int64_t* y, int64_t c[3]) {
  const __int128 x0 = x[0], x1 = x[2], x2 = x[4], y0 = y[0], y1 = y[2], y2 = y[4];
  if ((y1 - y0) % (x1 - x0) || (y2 - y1) % (x2 - x1)) return false;
  const __int128 d01 = (y1 - y0) / (x1 - x0), d12 = (y2 - y1) / (x2 - x1);
  if ((d12 - d01) % (x2 - x0)) return false;
  const __int128 a2 = (d12 - d01) / (x2 - x0);
  const __int128 a1 = d01 - a2 * (x0 + x1);
  const __int128 a0 = y0 - a2 * x0 * x0 - a1 * x0;
  if (a2 > INT32_MAX || a2 < INT32_MIN || a1 > INT64_MAX / 4 || a1 < INT64_MIN / 4 || a0 > INT64_MAX / 4 ||
      a0 < INT64_MIN / 4)
    return false;
  c[0] = (int64_t)a0;
  c[1] = (int64_t)a1;
  c[2] = (int64_t)a2;
  for (int i = 0; i < NS; ++i)
    if (eval(c, x[i]) != y[i]) return false;
  return true;
}

typedef struct mem_s {
  const kiln_plan_t* B;
  int64_t lo, hi;
  int64_t* c; /* 3 per buffer */
} mem_t;

static bool fixed(const int64_t* c) { return !c[1] && !c[2]; }

/* Buffer |i|'s root and every view of it keep the top of the range. */
static void keep_top(mem_t* M, int32_t i) {
  const int32_t r = kiln_plan_root(M->B, i);
  for (int32_t j = 0; j < M->B->n_buffers; ++j)
    if (kiln_plan_root(M->B, j) == r) {
      int64_t* c = M->c + 3 * (size_t)j;
      c[0] = (int64_t)tir_buffer_span_bytes(M->B->buffers[j].buf);
      c[1] = c[2] = 0;
    }
}

/* Within 0..top at every value, a view within its root, and coefficients
 * the runtime evaluates in 64 bits (runtime/program_dims.c). */
static bool in_range(const mem_t* M, int32_t i) {
  const int64_t* c = M->c + 3 * (size_t)i;
  const int64_t* r = M->c + 3 * (size_t)kiln_plan_root(M->B, i);
  const __int128 top = (__int128)tir_buffer_span_bytes(M->B->buffers[i].buf);
  if (eval(c, M->hi) != top || c[0] < -(1ll << 48) || c[0] > (1ll << 48) || c[1] < -(1ll << 40) ||
      c[1] > (1ll << 40) || c[2] < -(1ll << 20) || c[2] > (1ll << 20))
    return false;
  for (int64_t n = M->lo; n <= M->hi; ++n) {
    const __int128 v = eval(c, n);
    if (v < 0 || v > top || v > eval(r, n)) return false;
  }
  return true;
}

/* Kernel |k| at every value with its flat buffers cut to their size there;
 * *out_ok false when some access leaves them (or a buffer that changes is
 * not flat). The buffers' shapes are restored. */
static kiln_status_t verify_kernel(mem_t* M, int32_t k, const tir_buffer_t* dims, bool* out_ok) {
  const kiln_plan_kernel_t* kk = &M->B->kernels[k];
  const tir_func_t* f = kk->func;
  *out_ok = true;
  tir_buffer_t* cut[64];
  int32_t arg[64], n_cut = 0;
  for (int32_t j = 0; j < f->n_params; ++j) {
    const int64_t* c = M->c + 3 * (size_t)kk->args[j];
    if (fixed(c)) continue;
    const tir_buffer_t* b = f->params[j];
    if (b->rank != 1 || b->strides[0] != 1 || n_cut == 64 || !kiln_dtype_size(b->dtype) ||
        (uint64_t)b->shape[0] * kiln_dtype_size(b->dtype) != (uint64_t)eval(c, M->hi)) {
      *out_ok = false;
      return NULL;
    }
    cut[n_cut] = (tir_buffer_t*)b; /* arena memory of the plan: restored below */
    arg[n_cut++] = kk->args[j];
  }
  if (!n_cut) return NULL;
  int64_t top[64];
  for (int32_t i = 0; i < n_cut; ++i) top[i] = cut[i]->shape[0];
  kiln_status_t st = NULL;
  for (int64_t n = M->lo; n <= M->hi && *out_ok && !st; ++n) {
    for (int32_t i = 0; i < n_cut; ++i)
      cut[i]->shape[0] = (int64_t)(eval(M->c + 3 * (size_t)arg[i], n) / (__int128)kiln_dtype_size(cut[i]->dtype));
    st = tir_verify_dims(f, dims, 1, &n, &n);
    if (st && kiln_status_code(st) != KILN_OUT_OF_MEMORY) {
      kiln_status_free(st);
      st = NULL;
      *out_ok = false;
    }
  }
  for (int32_t i = 0; i < n_cut; ++i) cut[i]->shape[0] = top[i];
  return st;
}

kiln_status_t kiln_plan_seq_bytes(kiln_plan_t* const* plans, int64_t lo, int64_t hi, kiln_allocator_t a,
                                  int64_t** out, int32_t* out_kept, bool* out_unverified) {
  *out = NULL;
  *out_kept = 0;
  *out_unverified = false;
  const kiln_plan_t* B = plans[BASE];
  const int32_t nb = B->n_buffers;
  void* m = NULL;
  KILN_RETURN_IF_ERROR(kiln_allocator_malloc(a, sizeof(int64_t) * 3 * (size_t)(nb ? nb : 1), "buffer sizes", &m));
  mem_t M = {B, lo, hi, m};
  int64_t x[NS];
  kiln_plan_seq_sizes(lo, hi, x);
  const tir_buffer_t* dims = NULL;
  for (int32_t i = 0; i < nb; ++i) {
    int64_t* c = M.c + 3 * (size_t)i;
    const kiln_plan_buffer_t* pb = &B->buffers[i];
    c[0] = (int64_t)tir_buffer_span_bytes(pb->buf);
    c[1] = c[2] = 0;
    if (pb->kind == KILN_PLAN_DIMS) dims = pb->buf;
    if (pb->kind == KILN_PLAN_CONST || pb->kind == KILN_PLAN_STATUS || pb->kind == KILN_PLAN_DIMS) continue;
    int64_t y[NS];
    bool all = true;
    for (int s = 0; s < NS; ++s) {
      all &= i < plans[s]->n_buffers;
      y[s] = all ? (int64_t)tir_buffer_span_bytes(plans[s]->buffers[i].buf) : 0;
    }
    if (!all || !kiln_plan_seq_fit(x, y, c)) keep_top(&M, i);
  }
  for (int32_t i = 0; i < nb; ++i)
    if (!fixed(M.c + 3 * (size_t)i) && !in_range(&M, i)) keep_top(&M, i);
  /* a buffer kept at the top after its views were checked: check again */
  for (int32_t i = 0; i < nb; ++i)
    if (!fixed(M.c + 3 * (size_t)i) && !in_range(&M, i)) keep_top(&M, i);
  /* every length of every kernel a size reaches: about 10 us each */
  int64_t checks = 0;
  for (int32_t k = 0; k < B->n_kernels; ++k) {
    bool any = false;
    for (int32_t j = 0; j < B->kernels[k].func->n_params; ++j) any |= !fixed(M.c + 3 * (size_t)B->kernels[k].args[j]);
    checks += any ? hi - lo + 1 : 0;
  }
  *out_unverified = checks > KILN_PLAN_SEQ_MEM_CHECKS;
  if (*out_unverified) dims = NULL;
  kiln_status_t st = NULL;
  for (int32_t k = 0; k < B->n_kernels && dims && !st; ++k) {
    bool ok = true;
    st = verify_kernel(&M, k, dims, &ok);
    const kiln_plan_kernel_t* kk = &B->kernels[k];
    for (int32_t j = 0; !ok && j < kk->func->n_params; ++j)
      if (!fixed(M.c + 3 * (size_t)kk->args[j])) keep_top(&M, kk->args[j]);
  }
  if (!dims)
    for (int32_t i = 0; i < nb; ++i) keep_top(&M, i);
  if (st) {
    kiln_allocator_free(a, m);
    return st;
  }
  /* roots whose size changes with the dim but stays the top's */
  for (int32_t i = 0; i < nb; ++i) {
    bool changes = false;
    for (int s = 0; s < NS && i < plans[s]->n_buffers; ++s)
      changes |= tir_buffer_span_bytes(plans[s]->buffers[i].buf) != tir_buffer_span_bytes(B->buffers[i].buf);
    *out_kept += changes && fixed(M.c + 3 * (size_t)i) && B->buffers[i].alias_of < 0;
  }
  *out = M.c;
  return NULL;
}
