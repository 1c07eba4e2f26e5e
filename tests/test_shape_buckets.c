/* Shape buckets (kiln compile --dim seq=4,7,16): a sequence dim inside
 * MatMul, Softmax, Reshape and Transpose shapes compiled at a set of sizes
 * into one module, with a dynamic batch on top. An attention block written
 * here as ONNX is compiled once through the compiler API; the module's
 * bytes are loaded back (section BUCK round trip) and run at several
 * (batch, seq) pairs against the reference executor at each; sizes outside
 * the set and batches outside the range fail naming the input, the dim, the
 * value and what the module has; bad specs, a range on the inner dim, and a
 * damaged bucket image are refused by name. */
#include "bad_model_util.h" /* first: it defines _GNU_SOURCE */

#include <math.h>
#include <string.h>

#include "api/model_dims.h"
#include "compiler/ref_exec.h"
#include "frontend/onnx.h"
#include "kiln/compiler.h"
#include "kiln/runtime.h"
#include "program_util.h"
#include "runtime/module_file.h"
#include "runtime/module_impl.h"
#include "runtime/session_impl.h"
#include "testing.h"
#include "compile_util.h"

static char g_dir[512];
static char g_model[700];

static kiln_allocator_t al(void) { return kiln_allocator_system(); }

/* X [batch,seq,8] -> softmax(0.05 * X Wq (X Wk)^T) X, as [batch,2,seq,4]
 * (a Reshape with 0 and -1, then a Transpose). */
static void write_model(void) {
  bm_model_t b;
  bm_init(&b, 13);
  const char* params[4] = {"batch", "seq", NULL, NULL};
  int64_t xd[3] = {0, 0, 8};
  b.g.input[b.g.n_input++] = bm_value(&b, "X", BM_F32, 3, xd, params);
  int64_t wd[2] = {8, 8};
  bm_init_f32(&b, "Wq", 2, wd);
  bm_init_f32(&b, "Wk", 2, wd);
  float* sc = bm_alloc(&b, sizeof(float));
  *sc = 0.05f;
  int64_t one = 1;
  bm_initializer(&b, "scale", BM_F32, 1, &one, sc, sizeof(float));
  int64_t shp[4] = {0, -1, 2, 4}, four = 4;
  bm_init_i64(&b, "shape", 1, &four, shp);
  bm_node(&b, "MatMul", "q", "X,Wq", "Q");
  bm_node(&b, "MatMul", "k", "X,Wk", "K");
  Onnx__NodeProto* kt = bm_node(&b, "Transpose", "kt", "K", "Kt");
  bm_attr_ints(&b, kt, "perm", 3, (const int64_t[]){0, 2, 1});
  bm_node(&b, "MatMul", "scores", "Q,Kt", "S");
  bm_node(&b, "Mul", "scaled", "S,scale", "S2");
  Onnx__NodeProto* sm = bm_node(&b, "Softmax", "softmax", "S2", "P");
  bm_attr_int(&b, sm, "axis", -1);
  bm_node(&b, "MatMul", "mix", "P,X", "H");
  bm_node(&b, "Reshape", "heads", "H,shape", "R");
  Onnx__NodeProto* tr = bm_node(&b, "Transpose", "split", "R", "Y");
  bm_attr_ints(&b, tr, "perm", 4, (const int64_t[]){0, 2, 1, 3});
  bm_output(&b, "Y");
  snprintf(g_model, sizeof g_model, "%s/attn.onnx", g_dir);
  CHECK(bm_write(&b, g_model));
  bm_free(&b);
}

static const char* g_target = "cpu"; /* --target T: the GPU part on T */

/* Compiles g_model with |dims| (NULL-terminated) for g_target; the status,
 * and the module bytes in |out| (malloc'd) when |out| is given and it
 * compiled. */
static kiln_status_t compile(const char* const* dims, uint8_t** out, size_t* out_len) {
  const char* opts[5 + 2 * 8] = {"threads", "2", "target", g_target};
  int n = 4;
  for (int i = 0; dims[i]; ++i) {
    if (n + 2 >= (int)(sizeof opts / sizeof opts[0])) return kiln_make_status(KILN_INVALID_ARGUMENT, "too many dims");
    opts[n++] = "dim";
    opts[n++] = dims[i];
  }
  opts[n] = NULL;
  return tc_compile(g_model, opts, out, out_len);
}

static kiln_array_t filled(int64_t batch, int64_t seq, uint32_t seed) {
  kiln_array_t a;
  memset(&a, 0, sizeof a);
  kiln_shape_t s = kiln_shape_make(3, (const int64_t[]){batch, seq, 8});
  if (!CHECK_OK(kiln_array_alloc(al(), KILN_DTYPE_F32, &s, &a))) return a;
  float* f = a.data;
  for (size_t i = 0; i < a.nbytes / 4; ++i) {
    seed = seed * 1664525u + 1013904223u;
    f[i] = (float)((seed >> 8) & 0xffff) / 32768.0f - 1.0f;
  }
  return a;
}

/* The session at (batch, seq) against the reference executor on the model
 * bound to the same sizes. */
static void check_run(kiln_session_t* s, int64_t batch, int64_t seq) {
  const double tol = strcmp(g_target, "cpu") ? 1e-3 : 1e-4; /* GPU: other summation orders */
  kiln_graph_t* g = NULL;
  char b[64], q[64];
  snprintf(b, sizeof b, "batch=%lld", (long long)batch);
  snprintf(q, sizeof q, "seq=%lld", (long long)seq);
  kiln_array_t x = filled(batch, seq, 7u * (uint32_t)seq + (uint32_t)batch), want, got;
  memset(&want, 0, sizeof want);
  memset(&got, 0, sizeof got);
  if (CHECK_OK(kiln_onnx_parse_model(g_model, NULL, al(), &g)) && CHECK_OK(kiln_model_bind_dim(g, b)) &&
      CHECK_OK(kiln_model_bind_dim(g, q)) && CHECK_OK(kiln_graph_prepare(g)) &&
      CHECK_OK(kiln_ref_run(g, &x, NULL, &want)) && CHECK_OK(kiln_session_run(s, &x, &got))) {
    const int64_t ws[4] = {batch, 2, seq, 4};
    kiln_shape_t wsh = kiln_shape_make(4, ws);
    CHECK_MSG(kiln_shape_equal(&got.shape, &wsh), "batch %lld seq %lld: output rank %d", (long long)batch,
              (long long)seq, (int)got.shape.rank);
    double worst = 0;
    for (size_t i = 0; i < want.nbytes / 4 && got.nbytes == want.nbytes; ++i)
      worst = fmax(worst, fabs(((float*)got.data)[i] - ((float*)want.data)[i]));
    CHECK_MSG(got.nbytes == want.nbytes && worst < tol, "batch %lld seq %lld: max abs error %g", (long long)batch,
              (long long)seq, worst);
    /* the plan of the bucket that ran, at this batch, against its bound */
    kiln_session_memory_t m;
    if (CHECK_OK(kiln_session_memory_at(s, batch, &m)))
      /* tiny buffers: 64-byte alignment slack on top of the 1.05 */
      CHECK_MSG(m.lower_bound_bytes && (double)m.arena_bytes <= 1.05 * (double)m.lower_bound_bytes + 1024,
                "seq %lld batch %lld: arena %llu, lower bound %llu", (long long)seq, (long long)batch,
                (unsigned long long)m.arena_bytes, (unsigned long long)m.lower_bound_bytes);
  }
  kiln_graph_destroy(g);
  kiln_array_free(al(), &x);
  kiln_array_free(al(), &want);
  kiln_array_free(al(), &got);
}

static void test_buckets(void) {
  uint8_t* bytes = NULL;
  size_t len = 0;
  if (!CHECK_OK(compile((const char*[]){"batch=1..3", "seq=16,4,7", NULL}, &bytes, &len)) || !bytes) return;
  kiln_module_t* m = NULL;
  if (!CHECK_OK(kiln_module_load_memory(bytes, len, "attn.kiln", al(), &m))) {
    free(bytes);
    return;
  }
  /* sizes sorted; the batch stays the dynamic dim */
  const char* name = NULL;
  int64_t v = 0, lo = 0, hi = 0;
  CHECK(kiln_module_bucket_count(m) == 3);
  CHECK(CHECK_OK(kiln_module_bucket(m, 0, &name, &v)) && !strcmp(name, "seq") && v == 4);
  CHECK(CHECK_OK(kiln_module_bucket(m, 2, &name, &v)) && v == 16);
  CHECK_ERR_ALL(kiln_module_bucket(m, 3, &name, &v), KILN_OUT_OF_RANGE, "3 of 3");
  CHECK(kiln_module_dim_count(m) == 1 && CHECK_OK(kiln_module_dim(m, 0, &name, &lo, &hi)) && lo == 1 && hi == 3);
  kiln_shape_t s7 = kiln_module_bucket_input_shape(m, 1, 0, NULL);
  CHECK(s7.rank == 3 && s7.dims[0] == 1 && s7.dims[1] == 7 && s7.dims[2] == 8);
  kiln_shape_t o16 = kiln_module_bucket_output_shape(m, 2, 0, NULL);
  CHECK(o16.rank == 4 && o16.dims[2] == 16);
  int32_t k = -1;
  CHECK(CHECK_OK(kiln_module_bucket_parse(m, "seq=7", &k)) && k == 1);
  CHECK_ERR_ALL(kiln_module_bucket_parse(m, "seq=5", &k), KILN_INVALID_ARGUMENT, "seq=5", "4, 7, 16");
  CHECK_ERR_ALL(kiln_module_bucket_parse(m, "batch=2", &k), KILN_NOT_FOUND, "batch=2");
  CHECK_ERR_ALL(kiln_module_dim_parse(m, "batch=4", &v), KILN_INVALID_ARGUMENT, "1..3");

  kiln_device_t* d = NULL;
  kiln_session_t* s = NULL;
  if (CHECK_OK(kiln_device_open("cpu", NULL, al(), &d)) && CHECK_OK(kiln_session_create(m, d, NULL, &s))) {
    check_run(s, 1, 4);
    check_run(s, 3, 7);
    check_run(s, 2, 16);
    check_run(s, 1, 7); /* back to a bucket that has run, at another batch */
    /* the buckets' equal weights: one copy in memory, the first bucket's
     * (which a CPU session wraps in place; a device that copies them
     * copies them once: session.c, upload_weights) */
    const kiln_program_t* p0 = kiln_module_program(m);
    CHECK(p0->n_buckets == 3 && p0->buckets[1]->weights == p0->weights && p0->buckets[1]->weights_borrowed);
    kiln_array_t x = filled(1, 5, 1), y[1];
    CHECK_ERR_ALL(kiln_session_run(s, &x, y), KILN_INVALID_ARGUMENT, "input 'X'", "dim 1", "'seq'", "is 5",
                  "4, 7, 16");
    kiln_array_free(al(), &x);
    x = filled(4, 7, 1);
    CHECK_ERR_ALL(kiln_session_run(s, &x, y), KILN_INVALID_ARGUMENT, "input 'X'", "'batch'", "is 4", "1..3");
    kiln_array_free(al(), &x);
    /* enqueue two sizes, wait out of order: run ids carry their bucket */
    kiln_array_t a = filled(1, 4, 2), c = filled(2, 16, 3), ya[1], yc[1];
    uint64_t ra = 0, rc = 0;
    if (CHECK_OK(kiln_session_enqueue(s, &a, &ra)) && CHECK_OK(kiln_session_enqueue(s, &c, &rc))) {
      if (CHECK_OK(kiln_session_wait(s, rc, yc))) {
        CHECK(yc[0].shape.dims[0] == 2 && yc[0].shape.dims[2] == 16);
        kiln_array_free(al(), &yc[0]);
      }
      if (CHECK_OK(kiln_session_wait(s, ra, ya))) {
        CHECK(ya[0].shape.dims[0] == 1 && ya[0].shape.dims[2] == 4);
        kiln_array_free(al(), &ya[0]);
      }
    }
    CHECK_ERR_ALL(kiln_session_wait(s, ra, ya), KILN_INVALID_ARGUMENT, "not in flight");
    kiln_array_free(al(), &a);
    kiln_array_free(al(), &c);
  }
  kiln_session_destroy(s);
  kiln_device_release(d);
  kiln_module_release(m);

  /* A damaged byte inside the second bucket's image (the outer checksums
   * made right again) names that bucket. */
  const char* bad = NULL;
  for (size_t i = len / 2; i + 4 < len && !bad; ++i)
    if (!memcmp(bytes + i, KILN_MODULE_MAGIC, 4) && i > KILN_MODULE_HEADER_LEN) bad = (const char*)bytes + i;
  CHECK(bad != NULL);
  if (bad) {
    uint8_t* b2 = (uint8_t*)bad;
    b2[KILN_MODULE_HEADER_LEN + 20] ^= 0x5a; /* inside its first section */
    kiln_module_reseal(bytes, len);
    kiln_module_t* m2 = NULL;
    CHECK_ERR_ALL(kiln_module_load_memory(bytes, len, "attn.kiln", al(), &m2), KILN_PARSE_ERROR, "attn.kiln",
                  "bucket seq=");
    kiln_module_release(m2);
  }
  free(bytes);
}

static uint64_t le64(const uint8_t* p) {
  uint64_t v = 0;
  for (int i = 7; i >= 0; --i) v = v << 8 | p[i];
  return v;
}

static void put64(uint8_t* p, uint64_t v) {
  for (int i = 0; i < 8; ++i) p[i] = (uint8_t)(v >> (8 * i));
}

/* The payload of section BUCK in module |b| (NULL when absent). */
static uint8_t* buck_payload(uint8_t* b, size_t len) {
  const size_t at = pu_find_section(b, len, KILN_MODULE_TAG_BUCK, NULL);
  return at ? b + at : NULL;
}

/* Each edit of one field of section BUCK (the checksums made right again)
 * fails the load with a message that names it. */
static void test_bad_section(void) {
  uint8_t* bytes = NULL;
  size_t len = 0;
  if (!CHECK_OK(compile((const char*[]){"seq=4,7", NULL}, &bytes, &len)) || !bytes) return;
  uint8_t* pl = buck_payload(bytes, len);
  CHECK(pl != NULL);
  if (!pl) {
    free(bytes);
    return;
  }
  /* name (u32 + "seq"), count, 2 sizes, then flags and length of bucket 1 */
  uint8_t* count = pl + 4 + 3;
  uint8_t* sizes = count + 8;
  uint8_t* flags = sizes + 16;
  uint8_t* blen = flags + 8;
  CHECK(le64(count) == 2 && le64(sizes) == 4 && le64(sizes + 8) == 7 && le64(flags) == 1);
  const struct {
    uint8_t* at;
    uint64_t value;
    int code;
    const char* needle;
  } edits[] = {
      {count, 1, KILN_PARSE_ERROR, "1 shape buckets (needs 2..16)"},
      {count, 1ull << 30, KILN_PARSE_ERROR, "claims 1073741824 shape buckets"},
      {sizes, 9, KILN_PARSE_ERROR, "not above the one before it"},
      {flags, 2, KILN_PARSE_ERROR, "flags 0x2 unknown"},
      {flags, 0, KILN_PARSE_ERROR, "bucket seq=7"}, /* its image has no weights of its own */
      {blen, 1ull << 40, KILN_PARSE_ERROR, "claims a 1099511627776-byte module image"},
      {blen, 8, KILN_PARSE_ERROR, "claims a 8-byte module image"},
  };
  for (size_t i = 0; i < sizeof edits / sizeof edits[0]; ++i) {
    const uint64_t old = le64(edits[i].at);
    put64(edits[i].at, edits[i].value);
    kiln_module_reseal(bytes, len);
    kiln_module_t* m = NULL;
    CHECK_ERR_ALL(kiln_module_load_memory(bytes, len, "attn.kiln", al(), &m), edits[i].code, "attn.kiln",
                  edits[i].needle);
    kiln_module_release(m);
    put64(edits[i].at, old);
  }
  kiln_module_reseal(bytes, len);
  kiln_module_t* m = NULL;
  CHECK_OK(kiln_module_load_memory(bytes, len, "attn.kiln", al(), &m)); /* every edit undone */
  kiln_module_release(m);
  free(bytes);
}

/* The GPU part (--target T): buckets without and with a batch range,
 * compiled for T and run on its device 0 at each size against the
 * reference. */
static void test_gpu(void) {
  uint8_t* bytes = NULL;
  size_t len = 0;
  if (!CHECK_OK(compile((const char*[]){"seq=7,4", NULL}, &bytes, &len)) || !bytes) return;
  kiln_module_t* m = NULL;
  kiln_device_t* d = NULL;
  kiln_session_t* s = NULL;
  kiln_device_open_options_t o = {0, true, NULL};
  if (CHECK_OK(kiln_module_load_memory(bytes, len, "attn.kiln", al(), &m)) &&
      CHECK_OK(kiln_device_open(g_target, &o, al(), &d)) && CHECK_OK(kiln_session_create(m, d, NULL, &s))) {
    CHECK(kiln_module_bucket_count(m) == 2 && kiln_module_dim_count(m) == 0);
    check_run(s, 1, 7);
    check_run(s, 1, 4);
    /* a device that copies the weights copies the buckets' equal ones once
     * (where the module's 64-byte layout is its view alignment) */
    if (s->buckets && s->buckets[0] && s->buckets[0]->alignment == KILN_MODULE_WEIGHTS_ALIGN)
      CHECK(s->buckets[1] && s->buckets[1]->weights_borrowed && s->buckets[1]->weights == s->buckets[0]->weights);
    kiln_array_t x = filled(1, 5, 1), y[1];
    CHECK_ERR_ALL(kiln_session_run(s, &x, y), KILN_INVALID_ARGUMENT, "input 'X'", "('seq') is 5", "4, 7");
    kiln_array_free(al(), &x);
  }
  kiln_session_destroy(s);
  kiln_device_release(d);
  kiln_module_release(m);
  free(bytes);
  /* a batch range on T too: each bucket per-sample in the batch */
  bytes = NULL;
  m = NULL;
  d = NULL;
  s = NULL;
  if (CHECK_OK(compile((const char*[]){"batch=1..2", "seq=4,7", NULL}, &bytes, &len)) && bytes &&
      CHECK_OK(kiln_module_load_memory(bytes, len, "attn.kiln", al(), &m)) &&
      CHECK_OK(kiln_device_open(g_target, &o, al(), &d)) && CHECK_OK(kiln_session_create(m, d, NULL, &s))) {
    CHECK(kiln_module_bucket_count(m) == 2 && kiln_module_dim_count(m) == 1);
    check_run(s, 2, 7);
    check_run(s, 1, 4);
  }
  kiln_session_destroy(s);
  kiln_device_release(d);
  kiln_module_release(m);
  free(bytes);
}

static void test_refusals(void) {
  CHECK_ERR_ALL(compile((const char*[]){"seq=4,4", NULL}, NULL, NULL), KILN_INVALID_ARGUMENT, "seq=4,4",
                "different sizes");
  CHECK_ERR_ALL(compile((const char*[]){"seq=0,4", NULL}, NULL, NULL), KILN_INVALID_ARGUMENT, "seq=0,4");
  CHECK_ERR_ALL(compile((const char*[]){"seq=4,x", NULL}, NULL, NULL), KILN_INVALID_ARGUMENT, "seq=4,x");
  CHECK_ERR_ALL(compile((const char*[]){"seq=1,2,3,4,5,6,7,8,9,10,11,12,13,14,15,16,17", NULL}, NULL, NULL),
                KILN_INVALID_ARGUMENT, "2 to 16");
  CHECK_ERR_ALL(compile((const char*[]){"batch=1,2", "seq=4,8", NULL}, NULL, NULL), KILN_UNSUPPORTED, "seq=4,8",
                "one such dim");
  CHECK_ERR_ALL(compile((const char*[]){"nope=4,8", NULL}, NULL, NULL), KILN_NOT_FOUND, "nope");
  /* a range on the inner dim (tests/test_dyn_seq_range.c) too short to
   * fit its sizes on: refused, pointing at the set form */
  CHECK_ERR_ALL(compile((const char*[]){"seq=4..6", NULL}, NULL, NULL), KILN_INVALID_ARGUMENT, "seq=4..6",
                "at least 5 values", "--dim seq=4,6");
}

int main(int argc, char** argv) {
  if (argc == 3 && !strcmp(argv[1], "--target")) g_target = argv[2];
  if (!bm_tmpdir("shape_buckets", g_dir, sizeof g_dir)) return 1;
  write_model();
  if (strcmp(g_target, "cpu") != 0) {
    RUN(test_gpu);
    bm_rmtree(g_dir);
    return kiln_test_finish();
  }
  RUN(test_buckets);
  RUN(test_bad_section);
  RUN(test_refusals);
  bm_rmtree(g_dir);
  return kiln_test_finish();
}
