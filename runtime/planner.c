/* kiln memory planner (see planner.h).
 *
 * The problem is dynamic storage allocation: every root buffer is a
 * rectangle (lifetime in kernel steps x bytes) and we look for offsets so
 * that rectangles overlapping in time are disjoint in bytes, with the
 * smallest arena. That is NP-hard; greedy best-fit by decreasing size (the
 * TFLite GPU "greedy by size" strategy) is often at the max-live-bytes
 * lower bound, but not always: on ResNet-50 it gives 1.103x the bound
 * (a long-lived buffer placed late lands above a tall stack), while the
 * same best-fit in order of size x lifetime reaches 1.000x. Placement is
 * cheap next to compilation, so we run it under four orderings and keep the
 * smallest arena; the documented order (size, then first use) is tried
 * first and wins ties.
 *
 * Model inputs live from the first step to their last use, like any other
 * buffer: kiln_session_enqueue writes every input into the slot's arena
 * before each run, so nothing needs the input's bytes after its last reader,
 * and a later buffer (or an in-place output) may take them. Keeping inputs
 * for the whole run (TFLite's preserve_inputs) cost ResNet-18 0.6 MB at its
 * peak, 8% of the fp32 arena and 16% of the fp16 one. */
#include "runtime/planner.h"

#include <stdlib.h>
#include <string.h>

/* What the planner knows about one root buffer (indexed by buffer; only
 * roots' entries are meaningful). */
typedef struct {
  int32_t start, end;   /* live steps, inclusive; start < 0: no memory */
  bool in, out;         /* model input / output */
  bool planned;
  int32_t prev;         /* in place: root whose memory this one takes, or -1 */
  int32_t head;         /* first root of its in-place chain */
} life_t;

typedef struct {
  int32_t* root; /* per buffer */
  life_t* life;  /* per buffer */
} lives_t;

/* One interval to place: an in-place chain, or a lone root. */
typedef struct {
  int32_t head;
  int32_t start, end;
  uint64_t bytes;
  uint64_t offset;
} item_t;

typedef struct {
  uint64_t k1, k2; /* k1 descending, then k2 ascending, then index */
  int32_t idx;
} order_key_t;

typedef struct {
  uint64_t lo, hi;
} seg_t;

static bool is_pow2(uint64_t a) { return a && !(a & (a - 1)); }
static uint64_t align_up(uint64_t v, uint64_t a) { return (v + a - 1) & ~(a - 1); }
static const char* bname(const kiln_program_t* p, int32_t i) {
  return p->buffers[i].name ? p->buffers[i].name : "?";
}

static void lives_free(kiln_allocator_t a, lives_t* L) {
  kiln_allocator_free(a, L->root);
  kiln_allocator_free(a, L->life);
}

/* Lifetimes per root and the in-place chains. Planner and verifier share
 * this, so verify judges a plan by exactly the rules it was made with. An
 * in-place pair is taken only when it is safe whatever else happens: the
 * input's root dies at this kernel and is no model input/output, the
 * output's root is born here and is no model input, and the output fits. */
static kiln_status_t lives_build(const kiln_program_t* p, kiln_allocator_t a, lives_t* L) {
  memset(L, 0, sizeof(*L));
  int32_t n = p->n_buffers;
  kiln_status_t s = kiln_allocator_malloc(a, sizeof(int32_t) * (size_t)n, "planner roots",
                                          (void**)&L->root);
  if (!s) s = kiln_allocator_malloc(a, sizeof(life_t) * (size_t)n, "planner lifetimes",
                                    (void**)&L->life);
  if (s) {
    lives_free(a, L);
    return s;
  }
  int32_t last = p->n_kernels > 0 ? p->n_kernels - 1 : 0;
  for (int32_t i = 0; i < n; ++i) {
    L->root[i] = kiln_program_root(p, i);
    L->life[i] = (life_t){-1, -1, false, false, false, -1, i};
  }
  for (int32_t i = 0; i < n; ++i) {
    const kiln_program_buffer_t* b = &p->buffers[i];
    life_t* r = &L->life[L->root[i]];
    if (b->kind == KILN_PB_INPUT) r->in = true;
    if (b->kind == KILN_PB_OUTPUT) r->out = true;
    /* A status word is zeroed before the first kernel and read after the
     * last: it lives through the run, like an input that is also an output. */
    if (b->kind == KILN_PB_STATUS) r->in = r->out = true;
    if (b->first_use < 0) continue;
    if (r->start < 0 || b->first_use < r->start) r->start = b->first_use;
    if (b->last_use > r->end) r->end = b->last_use;
  }
  for (int32_t i = 0; i < p->n_inputs; ++i) L->life[L->root[p->inputs[i]]].in = true;
  for (int32_t i = 0; i < p->n_outputs; ++i) L->life[L->root[p->outputs[i]]].out = true;
  for (int32_t i = 0; i < n; ++i) {
    life_t* r = &L->life[i];
    if (L->root[i] != i || p->buffers[i].kind == KILN_PB_CONST) continue;
    if (r->in) {
      r->start = 0; /* written by the upload before the first kernel */
      if (r->end < 0) r->end = 0;
    }
    if (r->out) {
      if (r->start < 0) r->start = 0;
      r->end = last;
    }
    r->planned = r->start >= 0;
  }
  /* Kernels in order: a chain's head is final before its tail is met. */
  for (int32_t k = 0; k < p->n_kernels; ++k) {
    const kiln_program_kernel_t* kk = &p->kernels[k];
    if (kk->inplace_in < 0 || kk->inplace_out < 0) continue;
    int32_t x = L->root[kk->args[kk->inplace_in]], y = L->root[kk->args[kk->inplace_out]];
    life_t *lx = &L->life[x], *ly = &L->life[y];
    if (x == y || !lx->planned || !ly->planned || lx->out || ly->in) continue;
    if (lx->end != k || ly->start != k || ly->prev >= 0) continue;
    if (p->buffers[x].bytes < p->buffers[y].bytes) continue;
    /* Per-sample programs (dynamic dims): the kernel reads sample i of the
     * input and writes sample i of the output at their roots' strides,
     * which must then be the same for one memory to serve both. */
    if (p->n_dims > 0 && p->buffers[x].bytes != p->buffers[y].bytes) continue;
    ly->prev = x;
    ly->head = lx->head;
  }
  return NULL;
}

static int cmp_key(const void* a, const void* b) {
  const order_key_t *x = a, *y = b;
  if (x->k1 != y->k1) return x->k1 > y->k1 ? -1 : 1;
  if (x->k2 != y->k2) return x->k2 < y->k2 ? -1 : 1;
  return (x->idx > y->idx) - (x->idx < y->idx);
}

static int cmp_seg(const void* a, const void* b) {
  const seg_t *x = a, *y = b;
  return (x->lo > y->lo) - (x->lo < y->lo);
}

/* Best-fit placement of |items| in |order|: each goes into the smallest
 * gap (between the placed items it overlaps in time) that holds it, else
 * above them all. Returns the arena end. Cannot overflow: by induction an
 * item's end never exceeds the sum of the aligned sizes placed so far,
 * which the caller has checked fits in 64 bits. */
static uint64_t place(item_t* items, int32_t n, const order_key_t* order, uint64_t align,
                      int32_t* placed, seg_t* segs) {
  uint64_t arena = 0;
  for (int32_t i = 0; i < n; ++i) {
    item_t* it = &items[order[i].idx];
    int32_t ns = 0;
    for (int32_t j = 0; j < i; ++j) {
      const item_t* o = &items[placed[j]];
      if (o->start <= it->end && it->start <= o->end && o->bytes)
        segs[ns++] = (seg_t){o->offset, o->offset + o->bytes};
    }
    qsort(segs, (size_t)ns, sizeof(seg_t), cmp_seg);
    uint64_t cur = 0, best = UINT64_MAX, best_gap = UINT64_MAX;
    for (int32_t j = 0; j < ns; ++j) {
      if (segs[j].lo > cur && segs[j].lo - cur >= it->bytes && segs[j].lo - cur < best_gap) {
        best = cur;
        best_gap = segs[j].lo - cur;
      }
      if (segs[j].hi > cur) cur = align_up(segs[j].hi, align);
    }
    it->offset = best != UINT64_MAX ? best : cur;
    if (it->offset + it->bytes > arena) arena = it->offset + it->bytes;
    placed[i] = order[i].idx;
  }
  return align_up(arena, align);
}

/* Sort keys for ordering |o| (0: the documented size order). */
enum { ORDERINGS = 4 };
static void make_keys(int o, const item_t* items, int32_t n, const uint64_t* breadth,
                      order_key_t* keys) {
  for (int32_t i = 0; i < n; ++i) {
    const item_t* it = &items[i];
    uint64_t len = (uint64_t)(it->end - it->start + 1), k1 = 0, k2 = 0;
    switch (o) {
      case 0: /* greedy by size */
        k1 = it->bytes, k2 = (uint64_t)it->start;
        break;
      case 1: /* greedy by breadth: buffers of the fullest step first */
        k1 = breadth[i], k2 = UINT64_MAX - it->bytes;
        break;
      case 2: /* by area (size x lifetime) */
        k1 = it->bytes > UINT64_MAX / len ? UINT64_MAX : it->bytes * len;
        k2 = (uint64_t)it->start;
        break;
      default: /* longest-lived first: they form the floor */
        k1 = len, k2 = UINT64_MAX - it->bytes;
        break;
    }
    keys[i] = (order_key_t){k1, k2, i};
  }
  qsort(keys, (size_t)n, sizeof(order_key_t), cmp_key);
}

/* Live bytes per step (in-place pairs counted once) into |live| (steps
 * entries); returns the maximum. Sums cannot overflow: they are bounded
 * by the naive size, checked by the caller. */
static uint64_t live_profile(const kiln_program_t* p, const lives_t* L, int32_t steps,
                             uint64_t* live) {
  memset(live, 0, sizeof(uint64_t) * ((size_t)steps + 1));
  for (int32_t i = 0; i < p->n_buffers; ++i) {
    const life_t* r = &L->life[i];
    if (L->root[i] != i || !r->planned) continue;
    live[r->start] += p->buffers[i].bytes; /* difference array, wraps harmlessly */
    live[r->end + 1] -= p->buffers[i].bytes;
    if (r->prev >= 0) { /* the pair shares memory at step r->start */
      live[r->start] -= p->buffers[i].bytes;
      live[r->start + 1] += p->buffers[i].bytes;
    }
  }
  uint64_t run = 0, peak = 0;
  for (int32_t s = 0; s < steps; ++s) {
    run += live[s];
    live[s] = run;
    if (run > peak) peak = run;
  }
  return peak;
}

kiln_status_t kiln_memory_plan(const kiln_program_t* p, uint64_t alignment,
                               kiln_allocator_t allocator, kiln_memory_plan_t* out) {
  if (!p || !out) return kiln_make_status(KILN_INVALID_ARGUMENT, "memory plan: NULL argument");
  if (!is_pow2(alignment))
    return kiln_make_status(KILN_INVALID_ARGUMENT,
                            "memory plan: alignment %llu is not a power of two",
                            (unsigned long long)alignment);
  kiln_allocator_t a = allocator;
  lives_t L;
  KILN_RETURN_IF_ERROR(lives_build(p, a, &L), "memory plan");
  int32_t n = p->n_buffers, steps = p->n_kernels > 0 ? p->n_kernels : 1;
  item_t* items = NULL;
  order_key_t* keys = NULL;
  int32_t* placed = NULL;
  int32_t* slot = NULL; /* per chain head: its item */
  seg_t* segs = NULL;
  uint64_t *live = NULL, *breadth = NULL, *best = NULL, *offsets = NULL;
  size_t nn = (size_t)n + 1;
  kiln_status_t s = NULL;
  if (!s) s = kiln_allocator_malloc(a, sizeof(item_t) * nn, "memory plan", (void**)&items);
  if (!s) s = kiln_allocator_malloc(a, sizeof(order_key_t) * nn, "memory plan", (void**)&keys);
  if (!s) s = kiln_allocator_malloc(a, sizeof(int32_t) * nn, "memory plan", (void**)&placed);
  if (!s) s = kiln_allocator_malloc(a, sizeof(int32_t) * nn, "memory plan", (void**)&slot);
  if (!s) s = kiln_allocator_malloc(a, sizeof(seg_t) * nn, "memory plan", (void**)&segs);
  if (!s) s = kiln_allocator_malloc(a, sizeof(uint64_t) * ((size_t)steps + 1), "memory plan",
                                    (void**)&live);
  if (!s) s = kiln_allocator_malloc(a, sizeof(uint64_t) * nn, "memory plan", (void**)&breadth);
  if (!s) s = kiln_allocator_malloc(a, sizeof(uint64_t) * nn, "memory plan", (void**)&best);
  if (!s) s = kiln_allocator_malloc(a, sizeof(uint64_t) * nn, "memory plan", (void**)&offsets);
  if (s) goto done;

  /* Naive size first: it bounds every sum below, so checking it here is
   * the only overflow check needed. */
  uint64_t naive = 0;
  int32_t n_planned = 0, n_inplace = 0, n_items = 0;
  for (int32_t i = 0; i < n; ++i) {
    const life_t* r = &L.life[i];
    slot[i] = -1;
    if (L.root[i] != i || !r->planned) continue;
    uint64_t bytes = p->buffers[i].bytes;
    if (bytes > UINT64_MAX - alignment || align_up(bytes, alignment) > UINT64_MAX - naive) {
      s = kiln_make_status(KILN_LIMIT_EXCEEDED,
                           "memory plan: the arena overflows 64 bits at buffer '%s' (%llu bytes)",
                           bname(p, i), (unsigned long long)bytes);
      goto done;
    }
    naive += align_up(bytes, alignment);
    ++n_planned;
    n_inplace += r->prev >= 0;
  }
  /* One item per chain: heads first (a chain's members may be numbered
   * before its head), then the members widen their head's item. */
  for (int32_t i = 0; i < n; ++i) {
    const life_t* r = &L.life[i];
    if (L.root[i] != i || !r->planned || r->head != i) continue;
    slot[i] = n_items;
    items[n_items++] = (item_t){i, r->start, r->end, p->buffers[i].bytes, 0};
  }
  for (int32_t i = 0; i < n; ++i) {
    const life_t* r = &L.life[i];
    if (L.root[i] != i || !r->planned || r->head == i) continue;
    item_t* it = &items[slot[r->head]];
    if (r->end > it->end) it->end = r->end;
    if (p->buffers[i].bytes > it->bytes) it->bytes = p->buffers[i].bytes;
  }
  uint64_t bound = live_profile(p, &L, steps, live);
  for (int32_t i = 0; i < n_items; ++i) {
    breadth[i] = 0;
    for (int32_t t = items[i].start; t <= items[i].end; ++t)
      if (live[t] > breadth[i]) breadth[i] = live[t];
  }

  uint64_t arena = UINT64_MAX;
  for (int o = 0; o < ORDERINGS; ++o) {
    make_keys(o, items, n_items, breadth, keys);
    uint64_t end = place(items, n_items, keys, alignment, placed, segs);
    if (end < arena) {
      arena = end;
      for (int32_t i = 0; i < n_items; ++i) best[i] = items[i].offset;
    }
  }
  if (n_items == 0) arena = 0;
  for (int32_t i = 0; i < n; ++i) {
    int32_t r = L.root[i];
    offsets[i] = L.life[r].planned ? best[slot[L.life[r].head]] : UINT64_MAX;
  }
  memset(out, 0, sizeof(*out));
  out->n_buffers = n;
  out->offsets = offsets;
  offsets = NULL;
  out->arena_bytes = arena;
  out->naive_bytes = naive;
  out->lower_bound_bytes = bound;
  out->n_planned = n_planned;
  out->n_inplace = n_inplace;
done:
  kiln_allocator_free(a, items);
  kiln_allocator_free(a, keys);
  kiln_allocator_free(a, placed);
  kiln_allocator_free(a, slot);
  kiln_allocator_free(a, segs);
  kiln_allocator_free(a, live);
  kiln_allocator_free(a, breadth);
  kiln_allocator_free(a, best);
  kiln_allocator_free(a, offsets);
  lives_free(a, &L);
  return s;
}

void kiln_memory_plan_free(kiln_allocator_t allocator, kiln_memory_plan_t* mp) {
  if (!mp) return;
  kiln_allocator_free(allocator, mp->offsets);
  memset(mp, 0, sizeof(*mp));
}

static kiln_status_t bad_plan(const char* fmt, ...) KILN_PRINTF(1, 2);
static kiln_status_t bad_plan(const char* fmt, ...) {
  va_list ap;
  va_start(ap, fmt);
  kiln_status_t s = kiln_make_status_v(KILN_INVALID_ARGUMENT, fmt, ap);
  va_end(ap);
  return kiln_status_annotate(s, "memory plan");
}

/* Checks one buffer's offset against its root and the arena. */
static kiln_status_t check_offset(const kiln_program_t* p, const kiln_memory_plan_t* mp,
                                  const lives_t* L, int32_t i, uint64_t align) {
  int32_t r = L->root[i];
  uint64_t o = mp->offsets[i], bytes = p->buffers[r].bytes;
  if (!L->life[r].planned) {
    if (o != UINT64_MAX)
      return bad_plan("buffer '%s' gets no memory but has offset %llu", bname(p, i),
                      (unsigned long long)o);
    return NULL;
  }
  if (o != mp->offsets[r])
    return bad_plan("buffer '%s' is at %llu, its root '%s' at %llu", bname(p, i),
                    (unsigned long long)o, bname(p, r), (unsigned long long)mp->offsets[r]);
  if (o % align)
    return bad_plan("buffer '%s' at %llu is not %llu-byte aligned", bname(p, i),
                    (unsigned long long)o, (unsigned long long)align);
  if (o > mp->arena_bytes || bytes > mp->arena_bytes - o)
    return bad_plan("buffer '%s' at %llu (%llu bytes) is past the arena's end %llu", bname(p, i),
                    (unsigned long long)o, (unsigned long long)bytes,
                    (unsigned long long)mp->arena_bytes);
  return NULL;
}

/* Pairwise: O(n^2) over planned roots, fine for the few thousand buffers
 * of real models and simple enough to trust as the planner's referee. */
static kiln_status_t check_pairs(const kiln_program_t* p, const kiln_memory_plan_t* mp,
                                 const lives_t* L) {
  for (int32_t x = 0; x < p->n_buffers; ++x) {
    const life_t* lx = &L->life[x];
    if (L->root[x] != x || !lx->planned || !p->buffers[x].bytes) continue;
    uint64_t ox = mp->offsets[x], ex = ox + p->buffers[x].bytes;
    for (int32_t y = x + 1; y < p->n_buffers; ++y) {
      const life_t* ly = &L->life[y];
      if (L->root[y] != y || !ly->planned || !p->buffers[y].bytes) continue;
      if (ly->start > lx->end || lx->start > ly->end) continue;
      uint64_t oy = mp->offsets[y], ey = oy + p->buffers[y].bytes;
      if (oy >= ex || ox >= ey) continue;
      if ((lx->prev == y || ly->prev == x) && ox == oy) continue; /* in place */
      return bad_plan("buffers '%s' (bytes [%llu, %llu), steps [%d, %d]) and '%s' (bytes [%llu, "
                      "%llu), steps [%d, %d]) are live together and overlap",
                      bname(p, x), (unsigned long long)ox, (unsigned long long)ex, lx->start,
                      lx->end, bname(p, y), (unsigned long long)oy, (unsigned long long)ey,
                      ly->start, ly->end);
    }
  }
  return NULL;
}

kiln_status_t kiln_memory_plan_verify(const kiln_program_t* p, const kiln_memory_plan_t* mp,
                                      uint64_t alignment) {
  if (!p || !mp) return kiln_make_status(KILN_INVALID_ARGUMENT, "memory plan: NULL argument");
  if (!is_pow2(alignment))
    return bad_plan("alignment %llu is not a power of two", (unsigned long long)alignment);
  if (mp->n_buffers != p->n_buffers || (p->n_buffers > 0 && !mp->offsets))
    return bad_plan("plan has %d buffers, the program %d", mp->n_buffers, p->n_buffers);
  kiln_allocator_t a = kiln_allocator_system();
  lives_t L;
  KILN_RETURN_IF_ERROR(lives_build(p, a, &L), "memory plan");
  kiln_status_t s = NULL;
  for (int32_t i = 0; i < p->n_buffers && !s; ++i) s = check_offset(p, mp, &L, i, alignment);
  if (!s) s = check_pairs(p, mp, &L);
  lives_free(a, &L);
  return s;
}
