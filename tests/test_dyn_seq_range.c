/* A range on a dim inside the kernels' shapes (kiln compile --dim
 * seq=4..24, lowering/plan_seq.h): an attention block with a residual and a
 * LayerNormalization, written here as ONNX, compiled ONCE through the
 * compiler API and loaded back from its bytes (section DYNA round trip),
 * run at lengths of the range (both ends, and lengths no compile saw)
 * against the reference executor at each; a length outside the range names
 * the input, its axis, the dim, the value and the range; a node whose loops
 * do not follow the length (a mean over it: 1/seq is a float constant) is
 * refused naming the node and the dim and pointing at the set form; a
 * damaged DYNA section fails the load naming the input or output. Memory:
 * the arena a run at a length plans is within 1.05x of the lower bound of
 * the module compiled statically for that length, a slot's arena grows to
 * the longest run and stays (or to a length declared at creation), a
 * damaged DYNM section (the sizes per length)
 * fails the load naming it, and a module without it runs at the top of the
 * range's sizes. */
#include "bad_model_util.h" /* first: it defines _GNU_SOURCE */

#include <math.h>
#include <string.h>

#include "api/model_dims.h"
#include "compiler/ref_exec.h"
#include "frontend/onnx.h"
#include "kiln/batcher.h"
#include "kiln/compiler.h"
#include "kiln/runtime.h"
#include "program_util.h"
#include "runtime/module_file.h"
#include "runtime/session_impl.h"
#include "testing.h"
#include "compile_util.h"
#include "seq_attn_model.h" /* after testing.h: it checks */

/* The model's width: rows of 32 floats keep the 64-byte alignment of
 * every buffer in the arena a small part of it. */
#define W 32

static char g_dir[512];
static char g_attn[700];
static char g_mean[700];

static kiln_allocator_t al(void) { return kiln_allocator_system(); }

/* X [1,seq,W] -> LayerNorm(X + softmax(0.1 * X Wq (X Wk)^T) X Wv), and
 * X [1,seq,W] -> ReduceMean over seq. */
static void write_models(void) {
  snprintf(g_attn, sizeof g_attn, "%s/attn.onnx", g_dir);
  CHECK(seq_attn_model_write(g_attn, W));

  bm_model_t b;
  bm_init(&b, 13);
  const char* params[3] = {NULL, "seq", NULL};
  int64_t xd[3] = {1, 0, W};
  b.g.input[b.g.n_input++] = bm_value(&b, "X", BM_F32, 3, xd, params);
  Onnx__NodeProto* rm = bm_node(&b, "ReduceMean", "pool", "X", "M");
  bm_attr_ints(&b, rm, "axes", 1, (const int64_t[]){1});
  bm_output(&b, "M");
  snprintf(g_mean, sizeof g_mean, "%s/mean.onnx", g_dir);
  CHECK(bm_write(&b, g_mean));
  bm_free(&b);
}

/* Compiles |model| for the CPU with |dim|; the status, and the module
 * bytes in |out| (malloc'd) when |out| is given and it compiled. */
static kiln_status_t compile(const char* model, const char* dim, uint8_t** out, size_t* out_len) {
  const char* const opts[] = {"threads", "2", "target", "cpu", "dim", dim, NULL};
  return tc_compile(model, opts, out, out_len);
}

static kiln_array_t filled(int64_t seq, uint32_t seed) { return seq_attn_input(seq, W, seed); }

/* The session at |seq| against the reference executor on the model bound
 * to it. */
static void check_run(kiln_session_t* s, int64_t seq) {
  seq_attn_check_run(s, g_attn, seq, W, 11u * (uint32_t)seq, false);
}

static void test_range(void) {
  uint8_t* bytes = NULL;
  size_t len = 0;
  if (!CHECK_OK(compile(g_attn, "seq=4..24", &bytes, &len)) || !bytes) return;
  kiln_module_t* m = NULL;
  kiln_device_t* d = NULL;
  kiln_session_t* s = NULL;
  kiln_device_open_options_t o = {0, true, NULL};
  if (CHECK_OK(kiln_module_load_memory(bytes, len, "attn.kiln", al(), &m)) &&
      CHECK_OK(kiln_device_open("cpu", &o, al(), &d)) && CHECK_OK(kiln_session_create(m, d, NULL, &s))) {
    const char* name = NULL;
    int64_t lo = 0, hi = 0;
    CHECK(kiln_module_dim_count(m) == 1 && kiln_module_bucket_count(m) == 0);
    CHECK(CHECK_OK(kiln_module_dim(m, 0, &name, &lo, &hi)) && !strcmp(name, "seq") && lo == 4 && hi == 24);
    CHECK(kiln_module_dim_axis(m, false, 0) == 1 && kiln_module_dim_axis(m, true, 0) == 1);
    /* the ends, lengths the compile lowered at (5, 14, 23) and ones it did not */
    const int64_t seqs[] = {4, 24, 7, 13, 5, 19, 14, 23};
    for (size_t i = 0; i < sizeof seqs / sizeof seqs[0]; ++i) check_run(s, seqs[i]);
    int64_t v = 0;
    CHECK(CHECK_OK(kiln_module_dim_parse(m, "seq=9", &v)) && v == 9);
    kiln_array_t x = filled(25, 1), y[1];
    CHECK_ERR_ALL(kiln_session_run(s, &x, y), KILN_INVALID_ARGUMENT, "input 'X' dim 1 ('seq') is 25",
                  "range 4..24");
    kiln_array_free(al(), &x);
    x = filled(3, 1);
    CHECK_ERR_ALL(kiln_session_run(s, &x, y), KILN_INVALID_ARGUMENT, "('seq') is 3", "range 4..24");
    kiln_array_free(al(), &x);
    /* the length is no batch to gather requests along */
    kiln_batcher_t* bt = NULL;
    CHECK_ERR_ALL(kiln_batcher_create(m, d, NULL, NULL, &bt), KILN_INVALID_ARGUMENT, "dim 'seq'", "not a batch range");
    CHECK(bt == NULL);
  }
  kiln_session_destroy(s);
  kiln_device_release(d);
  kiln_module_release(m);
  free(bytes);
}

static uint64_t rd64(const uint8_t* p) {
  uint64_t v = 0;
  for (int i = 7; i >= 0; --i) v = v << 8 | p[i];
  return v;
}

static void wr32(uint8_t* p, uint32_t v) {
  for (int i = 0; i < 4; ++i) p[i] = (uint8_t)(v >> (8 * i));
}

/* Section |tag|'s payload in a module image (NULL: absent). */
static uint8_t* payload(uint8_t* b, size_t len, uint32_t tag) {
  const size_t at = pu_find_section(b, len, tag, NULL);
  return at ? b + at : NULL;
}

/* Each edit of section DYNA (checksums made right again) fails the load
 * naming what is wrong. */
static void test_bad_section(void) {
  uint8_t* bytes = NULL;
  size_t len = 0;
  if (!CHECK_OK(compile(g_attn, "seq=4..24", &bytes, &len)) || !bytes) return;
  uint8_t* pl = payload(bytes, len, KILN_MODULE_TAG_DYNA);
  CHECK(pl && rd64(pl) == 2);
  const struct {
    size_t at; /* 0: the count (u64), else the byte offset of an i32 axis */
    int64_t value;
    const char* needle;
  } edits[] = {
      {0, 3, "claims 3 dynamic dim axes"},
      {0, 1, "1 axes for 2 inputs and outputs"},
      {8, 5, "'X': its axis 5 is not the dynamic dim"},
      {8, 0, "'X': its axis 0 is not the dynamic dim"},
      {12, -2, "'Y': its axis -2 is not the dynamic dim"},
  };
  for (size_t i = 0; pl && i < sizeof edits / sizeof edits[0]; ++i) {
    uint8_t old[8];
    memcpy(old, pl + edits[i].at, 8);
    if (edits[i].at == 0)
      for (int k = 0; k < 8; ++k) pl[k] = (uint8_t)((uint64_t)edits[i].value >> (8 * k));
    else
      wr32(pl + edits[i].at, (uint32_t)(int32_t)edits[i].value);
    kiln_module_reseal(bytes, len);
    kiln_module_t* m = NULL;
    CHECK_ERR_ALL(kiln_module_load_memory(bytes, len, "attn.kiln", al(), &m), KILN_PARSE_ERROR, edits[i].needle);
    kiln_module_release(m);
    memcpy(pl + edits[i].at, old, 8);
  }
  kiln_module_reseal(bytes, len);
  kiln_module_t* m = NULL;
  CHECK_OK(kiln_module_load_memory(bytes, len, "attn.kiln", al(), &m));
  kiln_module_release(m);
  free(bytes);
}

/* A session of module image |bytes| on the CPU (NULL on failure, checked). */
static kiln_session_t* session_at(const uint8_t* bytes, size_t len, kiln_device_t* d, int64_t reserve,
                                  kiln_module_t** m) {
  kiln_session_t* s = NULL;
  kiln_session_options_t o;
  kiln_session_options_default(&o);
  o.dim_reserve = reserve;
  *m = NULL;
  if (!CHECK_OK(kiln_module_load_memory(bytes, len, "attn.kiln", al(), m))) return NULL;
  if (!CHECK_OK(kiln_session_create(*m, d, &o, &s))) return NULL;
  return s;
}

static kiln_session_t* session_of(const uint8_t* bytes, size_t len, kiln_device_t* d, kiln_module_t** m) {
  return session_at(bytes, len, d, 0, m);
}

/* The largest arena of the session's slots (what it holds). */
static uint64_t held(const kiln_session_t* s) {
  uint64_t b = 0;
  for (int32_t i = 0; i < s->n_slots; ++i)
    if (s->slots[i].arena_bytes > b) b = s->slots[i].arena_bytes;
  return b;
}

/* The arena a run at each length plans against the lower bound of the
 * module compiled for that length alone, and the slots' arenas growing to
 * the longest run and staying there. */
static void test_memory(void) {
  uint8_t* bytes = NULL;
  size_t len = 0;
  kiln_device_t* d = NULL;
  kiln_device_open_options_t o = {0, true, NULL};
  if (!CHECK_OK(compile(g_attn, "seq=4..24", &bytes, &len)) || !bytes || !CHECK_OK(kiln_device_open("cpu", &o, al(), &d)))
    return;
  kiln_module_t* m = NULL;
  kiln_session_t* s = session_of(bytes, len, d, &m);
  /* not compiled at 6, 11, 17 or 21 (4, 5, 14, 23, 24 were) */
  const int64_t seqs[] = {4, 6, 11, 14, 17, 21, 24};
  uint64_t at[sizeof seqs / sizeof seqs[0]] = {0};
  for (size_t i = 0; s && i < sizeof seqs / sizeof seqs[0]; ++i) {
    check_run(s, seqs[i]);
    kiln_session_memory_t got, want;
    kiln_session_memory(s, &got);
    at[i] = got.arena_bytes;
    CHECK_MSG(got.arena_bytes <= got.lower_bound_bytes * 105 / 100, "seq %lld: arena %llu, its bound %llu",
              (long long)seqs[i], (unsigned long long)got.arena_bytes, (unsigned long long)got.lower_bound_bytes);
    kiln_session_memory_t q;
    CHECK(CHECK_OK(kiln_session_memory_at(s, seqs[i], &q)) && q.arena_bytes == got.arena_bytes);
    char dim[32];
    snprintf(dim, sizeof dim, "seq=%lld", (long long)seqs[i]);
    uint8_t* sb = NULL;
    size_t sl = 0;
    kiln_module_t* sm = NULL;
    kiln_session_t* ss = NULL;
    if (CHECK_OK(compile(g_attn, dim, &sb, &sl)) && sb && (ss = session_of(sb, sl, d, &sm))) {
      kiln_session_memory(ss, &want);
      CHECK_MSG(got.arena_bytes <= want.lower_bound_bytes * 105 / 100,
                "seq %lld: arena %llu against the static module's bound %llu (arena %llu)", (long long)seqs[i],
                (unsigned long long)got.arena_bytes, (unsigned long long)want.lower_bound_bytes, (unsigned long long)want.arena_bytes);
    }
    kiln_session_destroy(ss);
    kiln_module_release(sm);
    free(sb);
  }
  CHECK_MSG(at[0] * 4 < at[6], "the arena at 4 (%llu) is not far below the one at 24 (%llu)", (unsigned long long)at[0],
            (unsigned long long)at[6]);
  /* every length, each packed at its own sizes: a buffer too small for
   * what a kernel writes there would spoil a neighbour */
  for (int64_t n = 4; s && n <= 24; ++n) check_run(s, n);
  kiln_session_destroy(s);
  kiln_module_release(m);
  /* a fresh session: each slot's arena grows with a longer run and keeps
   * its size when a shorter one follows */
  s = session_of(bytes, len, d, &m);
  if (s) {
    CHECK(held(s) == at[0]);
    check_run(s, 11);
    CHECK(held(s) == at[2]);
    check_run(s, 24);
    CHECK(held(s) == at[6]);
    check_run(s, 6);
    kiln_session_memory_t got;
    kiln_session_memory(s, &got);
    CHECK(held(s) == at[6] && got.arena_bytes == at[1]);
  }
  kiln_session_destroy(s);
  kiln_module_release(m);
  /* the arena reserved at creation for a declared length: no run up to it
   * allocates */
  s = session_at(bytes, len, d, 21, &m);
  if (s) {
    CHECK(held(s) == at[5]);
    check_run(s, 4);
    check_run(s, 21);
    CHECK(held(s) == at[5]);
  }
  kiln_session_destroy(s);
  kiln_module_release(m);
  kiln_session_options_t so;
  kiln_session_options_default(&so);
  so.dim_reserve = 25;
  s = NULL;
  if (CHECK_OK(kiln_module_load_memory(bytes, len, "attn.kiln", al(), &m)))
    CHECK_ERR_ALL(kiln_session_create(m, d, &so, &s), KILN_INVALID_ARGUMENT,
                  "dim_reserve 25 is outside the range 4..24 of dim 'seq'");
  CHECK(s == NULL);
  kiln_module_release(m);
  kiln_device_release(d);
  free(bytes);
}

/* Edits of section DYNM fail the load naming it; a module without it (the
 * tag renamed into an optional section this kiln does not know, as an
 * older kiln would skip DYNM) runs every length at the top of the range's
 * sizes, with the same outputs. */
static void test_bad_sizes(void) {
  uint8_t* bytes = NULL;
  size_t len = 0;
  if (!CHECK_OK(compile(g_attn, "seq=4..24", &bytes, &len)) || !bytes) return;
  uint8_t* pl = payload(bytes, len, KILN_MODULE_TAG_DYNM);
  CHECK(pl != NULL);
  if (!pl) {
    free(bytes);
    return;
  }
  const uint64_t nb = rd64(pl);
  /* the first buffer whose size changes with the length */
  size_t at = 0;
  for (uint64_t i = 0; i < nb && !at; ++i)
    if (rd64(pl + 8 + 24 * i + 8) || rd64(pl + 8 + 24 * i + 16)) at = 8 + 24 * (size_t)i;
  CHECK(at > 0);
  const struct {
    size_t at; /* byte offset of a u64 in the payload */
    uint64_t value;
    const char* needle;
  } edits[] = {
      {0, nb + 1, "'DYNM'"},
      {0, nb - 1, "sizes for"},
      {at, rd64(pl + at) + 1, "'DYNM': buffer"},          /* not its size at the top */
      {at + 16, (uint64_t)1 << 30, "'DYNM': buffer"},       /* beyond the coefficients' bounds */
      {at + 8, rd64(pl + at + 8) + 8, "'DYNM': buffer"},    /* not its size at the top */
  };
  for (size_t i = 0; i < sizeof edits / sizeof edits[0]; ++i) {
    uint8_t old[8];
    memcpy(old, pl + edits[i].at, 8);
    for (int k = 0; k < 8; ++k) pl[edits[i].at + k] = (uint8_t)(edits[i].value >> (8 * k));
    kiln_module_reseal(bytes, len);
    kiln_module_t* m = NULL;
    CHECK_ERR_ALL(kiln_module_load_memory(bytes, len, "attn.kiln", al(), &m), KILN_PARSE_ERROR, edits[i].needle);
    kiln_module_release(m);
    memcpy(pl + edits[i].at, old, 8);
  }
  memcpy(pl - 16, "DYNX", 4);
  kiln_module_reseal(bytes, len);
  kiln_device_t* d = NULL;
  kiln_device_open_options_t o = {0, true, NULL};
  kiln_module_t* m = NULL;
  kiln_session_t* s = NULL;
  if (CHECK_OK(kiln_device_open("cpu", &o, al(), &d)) && (s = session_of(bytes, len, d, &m))) {
    kiln_session_memory_t lo, hi;
    check_run(s, 4);
    kiln_session_memory(s, &lo);
    check_run(s, 24);
    kiln_session_memory(s, &hi);
    CHECK(lo.arena_bytes == hi.arena_bytes);
  }
  kiln_session_destroy(s);
  kiln_module_release(m);
  kiln_device_release(d);
  free(bytes);
}

static void test_refusals(void) {
  /* 1/seq in the mean: refused by node and dim, pointing at the set form */
  CHECK_ERR_ALL(compile(g_mean, "seq=4..24", NULL, NULL), KILN_UNSUPPORTED, "node 'pool' (ReduceMean)",
                "dim 'seq' cannot be a range (4..24)", "--dim seq=16,64,128");
  CHECK_ERR_ALL(compile(g_attn, "seq=4..7", NULL, NULL), KILN_INVALID_ARGUMENT, "at least 5 values");
  CHECK_ERR_ALL(compile(g_attn, "seq=0..7", NULL, NULL), KILN_INVALID_ARGUMENT, "seq=0..7");
}

int main(void) {
  if (!bm_tmpdir("dyn_seq_range", g_dir, sizeof g_dir)) return 1;
  write_models();
  RUN(test_range);
  RUN(test_bad_section);
  RUN(test_refusals);
  RUN(test_memory);
  RUN(test_bad_sizes);
  bm_rmtree(g_dir);
  return kiln_test_finish();
}
