/* Tests for the memory planner (runtime/planner.c) on hand-built programs:
 * sharing of disjoint lifetimes, aliases, model inputs/outputs, in-place
 * pairs, alignment, size bounds, overflow, allocation failures, and
 * kiln_memory_plan_verify catching corrupted plans. 200 seeded random
 * programs are checked both by verify and by an independent referee in
 * this file that looks only at the raw buffer lifetimes. */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "runtime/planner.h"
#include "testing.h"

static kiln_allocator_t A(void) { return kiln_allocator_system(); }

/* ---- hand-built programs ------------------------------------------------- */

/* A program with |nb| F32 intermediates (unused, 0 bytes) and |nk| kernels
 * without arguments; tests then set the fields they care about. It carries
 * a one-byte CPU code text so that kiln_program_validate accepts it. */
static kiln_program_t* prog_new(int32_t nb, int32_t nk) {
  kiln_program_t* p = NULL;
  kiln_status_t s = kiln_program_create(A(), &p);
  KILN_ASSERT(!s);
  void* m = NULL;
  s = kiln_allocator_malloc(A(), sizeof(kiln_program_buffer_t) * (size_t)(nb + 1), "t", &m);
  KILN_ASSERT(!s);
  p->buffers = m;
  p->n_buffers = nb;
  for (int32_t i = 0; i < nb; ++i) {
    char name[32];
    snprintf(name, sizeof name, "b%d", i);
    s = kiln_program_strdup(p, name, &p->buffers[i].name);
    KILN_ASSERT(!s);
    p->buffers[i].dtype = KILN_DTYPE_F32;
    p->buffers[i].kind = KILN_PB_INTERMEDIATE;
    p->buffers[i].alias_of = -1;
    p->buffers[i].first_use = p->buffers[i].last_use = -1;
  }
  s = kiln_allocator_malloc(A(), sizeof(kiln_program_kernel_t) * (size_t)(nk + 1), "t", &m);
  KILN_ASSERT(!s);
  p->kernels = m;
  p->n_kernels = nk;
  for (int32_t k = 0; k < nk; ++k) {
    kiln_program_kernel_t* kk = &p->kernels[k];
    char name[32];
    snprintf(name, sizeof name, "k%d", k);
    s = kiln_program_strdup(p, name, &kk->name);
    if (!s) s = kiln_program_strdup(p, name, &kk->node_name);
    if (!s) s = kiln_program_strdup(p, "Relu", &kk->op_type);
    KILN_ASSERT(!s);
    for (int d = 0; d < 3; ++d) kk->groups[d] = kk->local[d] = 1;
    kk->inplace_in = kk->inplace_out = -1;
  }
  s = kiln_program_strdup(p, "x", &p->code.text);
  if (!s) s = kiln_allocator_malloc(A(), 4 * sizeof(uint64_t), "t", (void**)&p->code.parts);
  KILN_ASSERT(!s);
  p->code.text_len = 1;
  p->code.n_parts = 2;
  p->code.parts[3] = 1;
  return p;
}

static void buf(kiln_program_t* p, int32_t i, kiln_program_buffer_kind_t kind, uint64_t bytes,
                int32_t first, int32_t last) {
  kiln_program_buffer_t* b = &p->buffers[i];
  b->kind = kind;
  b->bytes = bytes;
  b->dtype = KILN_DTYPE_U8; /* any byte count is a dense shape */
  b->rank = 1;
  b->shape[0] = (int64_t)bytes;
  b->first_use = first;
  b->last_use = last;
}

/* Appends |b| to the model inputs or outputs. */
static void io(kiln_program_t* p, bool input, int32_t b) {
  int32_t* n = input ? &p->n_inputs : &p->n_outputs;
  int32_t** idx = input ? &p->inputs : &p->outputs;
  char*** names = input ? &p->input_names : &p->output_names;
  kiln_status_t s = kiln_allocator_realloc(A(), sizeof(int32_t) * (size_t)(*n + 1), "t",
                                           (void**)idx);
  if (!s) s = kiln_allocator_realloc(A(), sizeof(char*) * (size_t)(*n + 1), "t", (void**)names);
  if (!s) s = kiln_program_strdup(p, p->buffers[b].name, &(*names)[*n]);
  KILN_ASSERT(!s);
  (*idx)[(*n)++] = b;
}

/* Kernel |k| reads |in| and writes |out| and may run in place. */
static void inplace(kiln_program_t* p, int32_t k, int32_t in, int32_t out) {
  kiln_program_kernel_t* kk = &p->kernels[k];
  kiln_status_t s = kiln_allocator_malloc(A(), 2 * sizeof(int32_t), "t", (void**)&kk->args);
  if (!s) s = kiln_allocator_malloc(A(), 2, "t", (void**)&kk->access);
  KILN_ASSERT(!s);
  kk->n_args = 2;
  kk->args[0] = in;
  kk->args[1] = out;
  kk->access[0] = KILN_ARG_READ;
  kk->access[1] = KILN_ARG_WRITE;
  kk->inplace_in = 0;
  kk->inplace_out = 1;
}

static bool overlap(const kiln_memory_plan_t* mp, const kiln_program_t* p, int32_t a, int32_t b) {
  uint64_t oa = mp->offsets[a], ob = mp->offsets[b];
  return oa < ob + p->buffers[b].bytes && ob < oa + p->buffers[a].bytes;
}

/* Plans with |align|, checks verify and the size bounds. */
static bool plan(const kiln_program_t* p, uint64_t align, kiln_memory_plan_t* mp) {
  memset(mp, 0, sizeof(*mp));
  if (!CHECK_OK(kiln_program_validate(p))) return false;
  if (!CHECK_OK(kiln_memory_plan(p, align, A(), mp))) return false;
  CHECK_OK(kiln_memory_plan_verify(p, mp, align));
  CHECK_MSG(mp->lower_bound_bytes <= mp->arena_bytes && mp->arena_bytes <= mp->naive_bytes,
            "bound %llu, arena %llu, naive %llu", (unsigned long long)mp->lower_bound_bytes,
            (unsigned long long)mp->arena_bytes, (unsigned long long)mp->naive_bytes);
  return true;
}

/* ---- tests ------------------------------------------------------------------ */

static void test_disjoint_lifetimes_share(void) {
  kiln_program_t* p = prog_new(4, 3);
  for (int32_t i = 0; i < 3; ++i) buf(p, i, KILN_PB_INTERMEDIATE, 1000, i, i);
  buf(p, 3, KILN_PB_INTERMEDIATE, 400, 0, 2); /* lives alongside all three */
  kiln_memory_plan_t mp;
  if (plan(p, 64, &mp)) {
    CHECK(mp.offsets[0] == mp.offsets[1] && mp.offsets[1] == mp.offsets[2]);
    CHECK(!overlap(&mp, p, 0, 3));
    CHECK(mp.arena_bytes == 1024 + 448);
    CHECK(mp.naive_bytes == 3 * 1024 + 448);
    CHECK(mp.lower_bound_bytes == 1400);
    CHECK(mp.n_planned == 4 && mp.n_inplace == 0);
  }
  kiln_memory_plan_free(A(), &mp);
  kiln_program_destroy(p);
}

static void test_unplanned_buffers(void) {
  kiln_program_t* p = prog_new(3, 2);
  buf(p, 0, KILN_PB_INTERMEDIATE, 256, 0, 1);
  buf(p, 1, KILN_PB_INTERMEDIATE, 256, -1, -1); /* never used */
  buf(p, 2, KILN_PB_CONST, 64, 0, 1);
  p->weights_len = 64;
  CHECK_OK(kiln_allocator_malloc(A(), 64, "t", (void**)&p->weights));
  kiln_memory_plan_t mp;
  if (plan(p, 64, &mp)) {
    CHECK(mp.offsets[0] == 0);
    CHECK(mp.offsets[1] == UINT64_MAX && mp.offsets[2] == UINT64_MAX);
    CHECK(mp.n_planned == 1 && mp.arena_bytes == 256);
  }
  kiln_memory_plan_free(A(), &mp);
  kiln_program_destroy(p);
}

/* A view keeps its root alive: the root's lifetime is the union. */
static void test_aliases_take_root_offset(void) {
  kiln_program_t* p = prog_new(4, 5);
  buf(p, 0, KILN_PB_INTERMEDIATE, 4096, 0, 2);
  buf(p, 1, KILN_PB_INTERMEDIATE, 4096, 3, 4); /* a Reshape of b0, used later */
  p->buffers[1].alias_of = 0;
  buf(p, 2, KILN_PB_INTERMEDIATE, 4096, 3, 3); /* would fit at b0's place if b1 were ignored */
  buf(p, 3, KILN_PB_INTERMEDIATE, 2048, 4, 4);
  p->buffers[3].alias_of = 1;                  /* a view of a view */
  kiln_memory_plan_t mp;
  if (plan(p, 64, &mp)) {
    CHECK(mp.offsets[1] == mp.offsets[0] && mp.offsets[3] == mp.offsets[0]);
    CHECK(!overlap(&mp, p, 0, 2));
    CHECK(mp.n_planned == 2);
    CHECK(mp.naive_bytes == 8192);
  }
  kiln_memory_plan_free(A(), &mp);
  kiln_program_destroy(p);
}

/* Inputs keep their memory from the start to their last use (the session
 * rewrites them before every run); outputs from their first write to the
 * end. */
static void test_io_lifetimes(void) {
  kiln_program_t* p = prog_new(6, 5);
  buf(p, 0, KILN_PB_INPUT, 1024, 0, 0);
  io(p, true, 0);
  buf(p, 1, KILN_PB_OUTPUT, 1024, 2, 2);
  io(p, false, 1);
  buf(p, 2, KILN_PB_INTERMEDIATE, 1024, 0, 1);
  buf(p, 3, KILN_PB_INTERMEDIATE, 1024, 1, 2);
  buf(p, 4, KILN_PB_INTERMEDIATE, 1024, 2, 3);
  buf(p, 5, KILN_PB_INTERMEDIATE, 1024, 3, 4);
  kiln_memory_plan_t mp;
  if (plan(p, 64, &mp)) {
    /* The input lives to its last use (step 0), the output from its first
     * to the end: 3 x 1024 at steps 2 and 3. */
    CHECK_MSG(!overlap(&mp, p, 0, 2), "b2 overlaps the input it lives with");
    for (int32_t i = 3; i < 6; ++i) CHECK_MSG(!overlap(&mp, p, 1, i), "b%d reuses the output", i);
    CHECK(mp.arena_bytes == 3072);
    CHECK(mp.lower_bound_bytes == 3072);
  }
  kiln_memory_plan_free(A(), &mp);
  kiln_program_destroy(p);
}

/* A model input dies at its last reader: the session writes it before
 * every run, so a later buffer may take its memory. */
static void test_input_memory_reused(void) {
  kiln_program_t* p = prog_new(3, 3);
  buf(p, 0, KILN_PB_INPUT, 4096, 0, 0);
  io(p, true, 0);
  buf(p, 1, KILN_PB_INTERMEDIATE, 4096, 0, 1);
  buf(p, 2, KILN_PB_OUTPUT, 4096, 1, 2);
  io(p, false, 2);
  kiln_memory_plan_t mp;
  if (plan(p, 64, &mp)) {
    CHECK_MSG(mp.offsets[2] == mp.offsets[0], "input at %llu, output at %llu",
              (unsigned long long)mp.offsets[0], (unsigned long long)mp.offsets[2]);
    CHECK(!overlap(&mp, p, 0, 1) && !overlap(&mp, p, 1, 2));
    CHECK(mp.arena_bytes == 2 * 4096 && mp.lower_bound_bytes == 2 * 4096);
  }
  kiln_memory_plan_free(A(), &mp);
  kiln_program_destroy(p);
}

/* b0 -> b1 at kernel 1 in place; |mutate| breaks one precondition. */
static void inplace_case(int mutate, bool expect_shared) {
  kiln_program_t* p = prog_new(3, 3);
  buf(p, 0, KILN_PB_INTERMEDIATE, 4096, 0, 1);
  buf(p, 1, KILN_PB_INTERMEDIATE, 4096, 1, 2);
  buf(p, 2, KILN_PB_INTERMEDIATE, 64, 0, 2);
  inplace(p, 1, 0, 1);
  if (mutate == 1) p->buffers[0].last_use = 2; /* the input lives on */
  if (mutate == 2) {                            /* the input is a model input */
    p->buffers[0].kind = KILN_PB_INPUT;
    io(p, true, 0);
  }
  if (mutate == 3) buf(p, 1, KILN_PB_INTERMEDIATE, 8192, 1, 2); /* output bigger */
  if (mutate == 4) {                                            /* input is a model output */
    p->buffers[0].kind = KILN_PB_OUTPUT;
    io(p, false, 0);
  }
  kiln_memory_plan_t mp;
  if (plan(p, 64, &mp)) {
    CHECK_MSG((mp.offsets[0] == mp.offsets[1]) == expect_shared, "case %d: offsets %llu %llu",
              mutate, (unsigned long long)mp.offsets[0], (unsigned long long)mp.offsets[1]);
    CHECK_MSG(mp.n_inplace == (expect_shared ? 1 : 0), "case %d: %d in place", mutate,
              mp.n_inplace);
    if (!expect_shared) CHECK(!overlap(&mp, p, 0, 1));
    if (expect_shared) CHECK(mp.lower_bound_bytes == 4096 + 64 && mp.arena_bytes == 4096 + 64);
  }
  kiln_memory_plan_free(A(), &mp);
  kiln_program_destroy(p);
}

static void test_inplace(void) {
  inplace_case(0, true);
  inplace_case(1, false);
  inplace_case(2, true); /* a model input is rewritten before every run */
  for (int m = 3; m <= 4; ++m) inplace_case(m, false);
  /* A smaller output may take a bigger dying input; chains share one slot. */
  kiln_program_t* p = prog_new(4, 4);
  buf(p, 0, KILN_PB_INTERMEDIATE, 4096, 0, 1);
  buf(p, 1, KILN_PB_INTERMEDIATE, 2048, 1, 2);
  buf(p, 2, KILN_PB_INTERMEDIATE, 2048, 2, 3);
  buf(p, 3, KILN_PB_INTERMEDIATE, 1000, 0, 3);
  inplace(p, 1, 0, 1);
  inplace(p, 2, 1, 2);
  kiln_memory_plan_t mp;
  if (plan(p, 64, &mp)) {
    CHECK(mp.offsets[0] == mp.offsets[1] && mp.offsets[1] == mp.offsets[2]);
    CHECK(mp.n_inplace == 2);
    CHECK(!overlap(&mp, p, 0, 3) && !overlap(&mp, p, 2, 3));
    CHECK(mp.arena_bytes == 4096 + 1024);
  }
  kiln_memory_plan_free(A(), &mp);
  kiln_program_destroy(p);
}

static void test_alignment(void) {
  const uint64_t aligns[] = {1, 8, 64, 4096};
  for (size_t t = 0; t < sizeof aligns / sizeof aligns[0]; ++t) {
    kiln_program_t* p = prog_new(5, 2);
    const uint64_t sizes[] = {13, 100, 7, 4097, 1};
    for (int32_t i = 0; i < 5; ++i) buf(p, i, KILN_PB_INTERMEDIATE, sizes[i], 0, 1);
    kiln_memory_plan_t mp;
    if (plan(p, aligns[t], &mp)) {
      for (int32_t i = 0; i < 5; ++i)
        CHECK_MSG(mp.offsets[i] % aligns[t] == 0, "b%d at %llu, alignment %llu", i,
                  (unsigned long long)mp.offsets[i], (unsigned long long)aligns[t]);
      CHECK(mp.arena_bytes % aligns[t] == 0);
      if (aligns[t] == 1) CHECK(mp.arena_bytes == 13 + 100 + 7 + 4097 + 1);
    }
    kiln_memory_plan_free(A(), &mp);
    if (t == 0) {
      CHECK_ERR(kiln_memory_plan(p, 0, A(), &mp), KILN_INVALID_ARGUMENT, "alignment");
      CHECK_ERR(kiln_memory_plan(p, 48, A(), &mp), KILN_INVALID_ARGUMENT, "alignment 48");
    }
    kiln_program_destroy(p);
  }
}

static void test_overflow(void) {
  kiln_program_t* p = prog_new(2, 1);
  buf(p, 0, KILN_PB_INTERMEDIATE, 1ull << 63, 0, 0);
  buf(p, 1, KILN_PB_INTERMEDIATE, 1ull << 63, 0, 0);
  kiln_memory_plan_t mp;
  CHECK_ERR(kiln_memory_plan(p, 64, A(), &mp), KILN_LIMIT_EXCEEDED, "'b1'");
  buf(p, 1, KILN_PB_INTERMEDIATE, 0, -1, -1);
  buf(p, 0, KILN_PB_INTERMEDIATE, UINT64_MAX - 10, 0, 0); /* aligning it overflows */
  CHECK_ERR(kiln_memory_plan(p, 64, A(), &mp), KILN_LIMIT_EXCEEDED, "'b0'");
  kiln_program_destroy(p);
}

static void test_verify_catches_corruption(void) {
  kiln_program_t* p = prog_new(4, 3);
  buf(p, 0, KILN_PB_INTERMEDIATE, 1024, 0, 1);
  buf(p, 1, KILN_PB_INTERMEDIATE, 1024, 1, 2);
  buf(p, 2, KILN_PB_INTERMEDIATE, 1024, 2, 2);
  buf(p, 3, KILN_PB_INTERMEDIATE, 512, 2, 2);
  p->buffers[3].alias_of = 2;
  kiln_memory_plan_t mp;
  if (plan(p, 64, &mp)) {
    uint64_t o1 = mp.offsets[1];
    mp.offsets[1] = mp.offsets[0] + 64; /* b0 and b1 are both live at step 1 */
    kiln_status_t s = kiln_memory_plan_verify(p, &mp, 64);
    CHECK(s && kiln_status_code(s) == KILN_INVALID_ARGUMENT);
    CHECK_MSG(s && strstr(kiln_status_message(s), "'b0'") && strstr(kiln_status_message(s), "'b1'"),
              "message: %s", kiln_status_message(s));
    kiln_status_free(s);
    mp.offsets[1] = o1;
    mp.offsets[3] = mp.offsets[2] + 64; /* an alias off its root */
    CHECK_ERR(kiln_memory_plan_verify(p, &mp, 64), KILN_INVALID_ARGUMENT, "'b3'");
    mp.offsets[3] = mp.offsets[2];
    mp.offsets[0] += 8; /* misaligned */
    CHECK_ERR(kiln_memory_plan_verify(p, &mp, 64), KILN_INVALID_ARGUMENT, "aligned");
    mp.offsets[0] -= 8;
    mp.arena_bytes = 1000; /* someone is past the end */
    CHECK_ERR(kiln_memory_plan_verify(p, &mp, 64), KILN_INVALID_ARGUMENT, "arena");
  }
  kiln_memory_plan_free(A(), &mp);
  /* An in-place overlap is fine only where the pair is allowed. */
  kiln_program_t* q = prog_new(2, 2);
  buf(q, 0, KILN_PB_INTERMEDIATE, 1024, 0, 1);
  buf(q, 1, KILN_PB_INTERMEDIATE, 1024, 1, 1);
  if (plan(q, 64, &mp)) {
    CHECK(mp.offsets[0] != mp.offsets[1]);
    mp.offsets[1] = mp.offsets[0];
    CHECK_ERR(kiln_memory_plan_verify(q, &mp, 64), KILN_INVALID_ARGUMENT, "'b1'");
    inplace(q, 1, 0, 1);
    CHECK_OK(kiln_memory_plan_verify(q, &mp, 64));
  }
  kiln_memory_plan_free(A(), &mp);
  kiln_program_destroy(q);
  kiln_program_destroy(p);
}

/* ---- random programs ----------------------------------------------------------- */

static uint64_t rng;
static uint32_t rnd(uint32_t n) {
  rng ^= rng << 13;
  rng ^= rng >> 7;
  rng ^= rng << 17;
  return (uint32_t)((rng >> 11) % n);
}

static kiln_program_t* random_program(void) {
  int32_t nb = 30 + (int32_t)rnd(271), nk = 5 + (int32_t)rnd(100);
  kiln_program_t* p = prog_new(nb, nk);
  uint64_t wlen = 0;
  for (int32_t i = 0; i < nb; ++i) {
    int32_t a = (int32_t)rnd((uint32_t)nk), b = (int32_t)rnd((uint32_t)nk);
    if (b < a) {
      int32_t t = a;
      a = b;
      b = t;
    }
    if (rnd(4) == 0) { /* short-lived */
      b = a + (int32_t)rnd(3);
      if (b >= nk) b = a;
    }
    uint32_t r = rnd(100);
    /* Sizes spread over four decades, like a network's activations. */
    uint64_t mant = 1 + rnd(1000), bytes = r < 3 ? 0 : mant << (2 * rnd(8));
    kiln_program_buffer_kind_t kind = KILN_PB_INTERMEDIATE;
    if (r >= 3 && r < 8) kind = KILN_PB_TEMP, b = a;
    if (r >= 8 && r < 12) kind = KILN_PB_CONST;
    buf(p, i, kind, bytes, r >= 12 && r < 14 ? -1 : a, r >= 12 && r < 14 ? -1 : b);
    if (kind == KILN_PB_CONST) {
      p->buffers[i].const_offset = wlen;
      wlen += bytes;
    } else if (r >= 14 && r < 20 && i > 0) { /* a view of an earlier buffer */
      int32_t root = kiln_program_root(p, (int32_t)rnd((uint32_t)i));
      if (p->buffers[root].kind != KILN_PB_CONST && p->buffers[root].bytes) {
        p->buffers[i].alias_of = root;
        p->buffers[i].bytes = 1 + rnd((uint32_t)(p->buffers[root].bytes < 1u << 30
                                                     ? p->buffers[root].bytes : 1u << 30));
        p->buffers[i].shape[0] = (int64_t)p->buffers[i].bytes;
      }
    } else if (r >= 20 && r < 23) {
      p->buffers[i].kind = KILN_PB_INPUT;
      io(p, true, i);
    } else if (r >= 23 && r < 26) {
      p->buffers[i].kind = KILN_PB_OUTPUT;
      io(p, false, i);
    }
  }
  p->weights_len = wlen;
  kiln_status_t s = kiln_allocator_malloc(A(), wlen + 1, "t", (void**)&p->weights);
  KILN_ASSERT(!s);
  /* In-place pairs where the lifetimes line up (and some that do not). */
  for (int32_t k = 0; k < nk; ++k) {
    int32_t x = (int32_t)rnd((uint32_t)nb), y = -1;
    for (int32_t t = 0; t < 20 && y < 0; ++t) {
      int32_t c = (int32_t)rnd((uint32_t)nb);
      if (p->buffers[c].first_use == k && c != x) y = c;
    }
    if (y < 0 || p->buffers[x].first_use < 0 || p->buffers[x].first_use > k ||
        p->buffers[x].last_use < k || p->buffers[x].kind == KILN_PB_CONST ||
        p->buffers[y].kind == KILN_PB_CONST || rnd(2))
      continue;
    inplace(p, k, x, y);
  }
  return p;
}

/* An independent referee: two buffers with different roots, live at a
 * common step by their own raw lifetimes (model inputs: from the start;
 * outputs: to the end), must not overlap in bytes unless they meet only at
 * the step of a kernel whose in-place pair names their roots. */
static void raw_life(const kiln_program_t* p, int32_t i, int32_t* s, int32_t* e) {
  kiln_program_buffer_kind_t k = p->buffers[kiln_program_root(p, i)].kind;
  *s = p->buffers[i].first_use;
  *e = p->buffers[i].last_use;
  if (k == KILN_PB_INPUT) {
    *s = 0;
    if (*e < 0) *e = 0;
  }
  if (k == KILN_PB_OUTPUT && *s >= 0) *e = p->n_kernels - 1;
}

static void referee(const kiln_program_t* p, const kiln_memory_plan_t* mp, int32_t seed) {
  for (int32_t i = 0; i < p->n_buffers; ++i) {
    const kiln_program_buffer_t* bi = &p->buffers[i];
    int32_t ri = kiln_program_root(p, i), si, ei;
    kiln_program_buffer_kind_t ki = p->buffers[ri].kind;
    if (mp->offsets[i] == UINT64_MAX) {
      CHECK(ki == KILN_PB_CONST || (p->buffers[ri].first_use < 0 && ki != KILN_PB_INPUT &&
                                    ki != KILN_PB_OUTPUT));
      continue;
    }
    CHECK(mp->offsets[i] == mp->offsets[ri]);
    raw_life(p, i, &si, &ei);
    for (int32_t j = i + 1; j < p->n_buffers; ++j) {
      const kiln_program_buffer_t* bj = &p->buffers[j];
      int32_t rj = kiln_program_root(p, j), sj, ej;
      if (rj == ri || mp->offsets[j] == UINT64_MAX || !bi->bytes || !bj->bytes) continue;
      raw_life(p, j, &sj, &ej);
      if (si < 0 || sj < 0 || sj > ei || si > ej || !overlap(mp, p, i, j)) continue;
      bool ok = false;
      if (si == ej || sj == ei) {
        const kiln_program_kernel_t* kk = &p->kernels[si == ej ? si : sj];
        if (kk->inplace_in >= 0) {
          int32_t a = kiln_program_root(p, kk->args[kk->inplace_in]);
          int32_t b = kiln_program_root(p, kk->args[kk->inplace_out]);
          ok = (a == ri && b == rj) || (a == rj && b == ri);
        }
      }
      CHECK_MSG(ok, "seed %d: %s and %s overlap while live", seed, bi->name, bj->name);
      if (!ok) return;
    }
  }
}

static void test_random_programs(void) {
  double worst = 0, sum = 0;
  int n = 0;
  for (int32_t seed = 1; seed <= 200; ++seed) {
    rng = 0x9E3779B97F4A7C15ull * (uint64_t)seed;
    kiln_program_t* p = random_program();
    uint64_t align = 1ull << (2 * rnd(5)); /* 1 .. 256 */
    kiln_memory_plan_t mp;
    if (plan(p, align, &mp)) {
      referee(p, &mp, seed);
      if (mp.lower_bound_bytes) {
        double r = (double)mp.arena_bytes / (double)mp.lower_bound_bytes;
        sum += r;
        worst = r > worst ? r : worst;
        ++n;
      }
    }
    kiln_memory_plan_free(A(), &mp);
    kiln_program_destroy(p);
  }
  printf("random programs: arena/bound mean %.3f, worst %.3f over %d\n", n ? sum / n : 0, worst, n);
  /* A quality guard, not a proof: 1.015 when written (1.024 with size order alone). */
  CHECK_MSG(n > 0 && sum / n < 1.03, "arena/bound mean %.3f", n ? sum / n : 0);
}

/* ---- allocation failures --------------------------------------------------------- */

typedef struct {
  int64_t fail_after, live;
} counter_t;
static void* c_alloc(void* self, size_t size) {
  counter_t* c = self;
  if (c->fail_after == 0) return NULL;
  if (c->fail_after > 0) --c->fail_after;
  ++c->live;
  return malloc(size);
}
static void* c_realloc(void* self, void* ptr, size_t size) {
  if (!ptr) return c_alloc(self, size);
  return ((counter_t*)self)->fail_after == 0 ? NULL : realloc(ptr, size);
}
static void c_free(void* self, void* ptr) {
  if (ptr) --((counter_t*)self)->live;
  free(ptr);
}

static void test_allocation_failures(void) {
  kiln_program_t* p = prog_new(6, 4);
  for (int32_t i = 0; i < 6; ++i) buf(p, i, KILN_PB_INTERMEDIATE, 100 * (i + 1), i % 4, 3);
  bool done = false;
  for (int64_t k = 0; k < 64 && !done; ++k) {
    counter_t c = {k, 0};
    kiln_allocator_t a = {&c, c_alloc, c_realloc, c_free};
    kiln_memory_plan_t mp;
    kiln_status_t s = kiln_memory_plan(p, 64, a, &mp);
    if (s) {
      CHECK_MSG(kiln_status_code(s) == KILN_OUT_OF_MEMORY, "allocation #%lld: %s", (long long)k,
                kiln_status_message(s));
      kiln_status_free(s);
    } else {
      done = true;
      kiln_memory_plan_free(a, &mp);
    }
    CHECK_MSG(c.live == 0, "allocation #%lld failing leaks %lld blocks", (long long)k,
              (long long)c.live);
  }
  CHECK(done);
  kiln_program_destroy(p);
}

int main(void) {
  RUN(test_disjoint_lifetimes_share);
  RUN(test_unplanned_buffers);
  RUN(test_aliases_take_root_offset);
  RUN(test_io_lifetimes);
  RUN(test_inplace);
  RUN(test_input_memory_reused);
  RUN(test_alignment);
  RUN(test_overflow);
  RUN(test_verify_catches_corruption);
  RUN(test_random_programs);
  RUN(test_allocation_failures);
  return kiln_test_finish();
}
