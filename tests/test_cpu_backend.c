/* CPU backend: hand-built plans (tensor IR kernels over plan buffers)
 * printed through the C dialect, compiled, cached, loaded and run.
 *
 * Covers: PARALLEL + VECTORIZED elementwise, a register-tiled matmul with a
 * PRIVATE accumulator (vector path), f16 storage, floor div/mod of negative
 * values, value semantics (NaN min/max, saturating casts, int wrap, x/0),
 * aliases and constants, the cache (hit, corrupt entry), compiler failures,
 * shape/dtype mismatches, and printer errors. */
#include <dirent.h>
#include <fcntl.h>
#include <stdlib.h>
#include <sys/stat.h>
#include <string.h>
#include <unistd.h>

#include "targets/cfamily/printer.h"
#include "targets/cpu/cpu_backend.h"
#include "testing.h"

/* ---- a tiny plan builder ---------------------------------------------- */

#define MAXB 24
#define MAXK 16

typedef struct tp_s {
  kiln_plan_t p;
  kiln_graph_t* g;
  kiln_plan_buffer_t bufs[MAXB];
  kiln_plan_kernel_t ks[MAXK];
  int32_t ins[MAXB], outs[MAXB];
  int32_t args[MAXK][MAXB];
} tp_t;

static char cache_dir[256];

static void tp_init(tp_t* t) {
  memset(t, 0, sizeof(*t));
  t->p.allocator = kiln_allocator_system();
  tir_ctx_init(&t->p.tir, kiln_allocator_system());
  CHECK_OK(kiln_graph_create(kiln_allocator_system(), &t->g));
  t->p.graph = t->g;
  t->p.target = KILN_TARGET_CLASS_CPU;
  t->p.buffers = t->bufs;
  t->p.kernels = t->ks;
  t->p.inputs = t->ins;
  t->p.outputs = t->outs;
}

static void tp_free(tp_t* t) {
  tir_ctx_deinit(&t->p.tir);
  kiln_graph_destroy(t->g);
}

static const tir_buffer_t* tp_buf(tp_t* t, const char* name, kiln_dtype_t dt, int32_t rank,
                                  const int64_t* shape, kiln_plan_buffer_kind_t kind) {
  const tir_buffer_t* b = tir_buffer(&t->p.tir, name, dt, rank, shape, TIR_SCOPE_GLOBAL);
  KILN_ASSERT(t->p.n_buffers < MAXB);
  int32_t i = t->p.n_buffers++;
  t->bufs[i].buf = b;
  t->bufs[i].kind = kind;
  t->bufs[i].tensor = -1;
  t->bufs[i].alias_of = -1;
  kiln_shape_t s = kiln_shape_make(rank, shape);
  if (kind == KILN_PLAN_INPUT) {
    CHECK_OK(kiln_graph_add_input(t->g, name, dt, &s, NULL));
    t->ins[t->g->n_inputs - 1] = i;
  } else if (kind == KILN_PLAN_OUTPUT) {
    CHECK_OK(kiln_graph_add_output(t->g, name));
    t->outs[t->g->n_outputs - 1] = i;
  }
  return b;
}

static int32_t tp_index(tp_t* t, const tir_buffer_t* b) {
  for (int32_t i = 0; i < t->p.n_buffers; ++i)
    if (t->bufs[i].buf == b) return i;
  return -1;
}

static void tp_kernel(tp_t* t, tir_func_t* f) {
  KILN_ASSERT(f != NULL);
  KILN_ASSERT(t->p.n_kernels < MAXK);
  int32_t k = t->p.n_kernels++;
  t->ks[k].func = f;
  t->ks[k].naive = f;
  t->ks[k].node = 0;
  for (int32_t j = 0; j < f->n_params; ++j) t->args[k][j] = tp_index(t, f->params[j]);
  t->ks[k].args = t->args[k];
}

static tir_func_t* mkfunc(tp_t* t, const char* name, int32_t n, const tir_buffer_t* const* ps,
                          const tir_stmt_t* body) {
  return tir_func(&t->p.tir, name, n, ps, body);
}

#define IDX(...) ((const tir_expr_t* const[]){__VA_ARGS__})
#define BUFS(...) ((const tir_buffer_t* const[]){__VA_ARGS__})

static kiln_cpu_options_t opts(void) {
  kiln_cpu_options_t o;
  kiln_cpu_options_default(&o);
  o.cache_dir = cache_dir;
  o.dump_dir = getenv("KILN_TEST_DUMP"); /* write the generated C there */
  return o;
}

static kiln_array_t arr(kiln_dtype_t dt, int32_t rank, const int64_t* shape) {
  kiln_array_t a;
  kiln_shape_t s = kiln_shape_make(rank, shape);
  CHECK_OK(kiln_array_alloc(kiln_allocator_system(), dt, &s, &a));
  return a;
}

static void free_arrays(kiln_array_t* a, int n) {
  for (int i = 0; i < n; ++i) kiln_array_free(kiln_allocator_system(), &a[i]);
}

static char* source_of(tp_t* t) {
  char* src = NULL;
  CHECK_OK(kiln_cpu_generate_source(&t->p, &src, NULL));
  return src;
}

/* ---- elementwise add: PARALLEL outer, VECTORIZED inner ------------------ */

static void build_add(tp_t* t, int64_t rows, int64_t cols) {
  int64_t sh[2] = {rows, cols};
  const tir_buffer_t* A = tp_buf(t, "A", KILN_DTYPE_F32, 2, sh, KILN_PLAN_INPUT);
  const tir_buffer_t* B = tp_buf(t, "B", KILN_DTYPE_F32, 2, sh, KILN_PLAN_INPUT);
  const tir_buffer_t* C = tp_buf(t, "C", KILN_DTYPE_F32, 2, sh, KILN_PLAN_OUTPUT);
  tir_ctx_t* c = &t->p.tir;
  tir_var_t* i = tir_var(c, "i");
  tir_var_t* j = tir_var(c, "j");
  const tir_expr_t* ri = tir_ref(c, i);
  const tir_expr_t* rj = tir_ref(c, j);
  const tir_stmt_t* body =
      tir_store(c, C, IDX(ri, rj), tir_add(c, tir_load(c, A, IDX(ri, rj)), tir_load(c, B, IDX(ri, rj))));
  body = tir_for(c, j, cols, TIR_LOOP_VECTORIZED, body);
  body = tir_for(c, i, rows, TIR_LOOP_PARALLEL, body);
  tp_kernel(t, mkfunc(t, "add_0", 3, BUFS(A, B, C), body));
}

/* The widest vector the CPU target prints on this machine: 16 lanes with
 * AVX-512, 8 with AVX/AVX2, 4 otherwise (kiln_cpu_simd, read at run time). */
static int vec_lanes(void) {
  const int32_t l = kiln_cpu_simd().lanes;
  return l >= 16 ? 16 : l >= 8 ? 8 : 4;
}

/* |fmt| with %d replaced by this machine's vector width, in a static buffer. */
static const char* vfmt(const char* fmt) {
  static char buf[128];
  snprintf(buf, sizeof buf, fmt, vec_lanes());
  return buf;
}

static void test_add_parallel_vectorized(void) {
  tp_t t;
  tp_init(&t);
  int64_t sh[2] = {64, 48};
  build_add(&t, 64, 48);
  char* src = source_of(&t);
  CHECK(src && strstr(src, "#pragma omp parallel for"));
  CHECK(src && strstr(src, vfmt("kiln_v%df")));
  CHECK(src && strstr(src, vfmt("j_1 += %d")));
  /* nothing wider than the machine's registers (GCC would split it badly) */
  if (vec_lanes() < 16) CHECK(src && !strstr(src, "kiln_v16f*"));
  CHECK(src && strstr(src, "void add_0(void* const* args)"));
  CHECK(src && strstr(src, "const float* restrict A_b0 = (const float*)args[0];"));
  free(src);

  kiln_cpu_options_t o = opts();
  kiln_cpu_exec_t* e = NULL;
  kiln_cpu_compile_stats_t st;
  CHECK_OK(kiln_cpu_compile(&t.p, &o, &e, &st));
  kiln_array_t in[2] = {arr(KILN_DTYPE_F32, 2, sh), arr(KILN_DTYPE_F32, 2, sh)};
  float* a = in[0].data;
  float* b = in[1].data;
  for (int i = 0; i < 64 * 48; ++i) {
    a[i] = (float)i * 0.5f;
    b[i] = 3.0f - (float)i;
  }
  for (int threads = 1; threads <= 2 && e; ++threads) {
    kiln_array_t out[1];
    CHECK_OK(kiln_cpu_run(e, in, out, NULL, NULL));
    CHECK(out[0].shape.rank == 2 && out[0].shape.dims[1] == 48);
    int bad = 0;
    for (int i = 0; i < 64 * 48; ++i) bad += ((float*)out[0].data)[i] != a[i] + b[i];
    CHECK_MSG(bad == 0, "%d wrong sums", bad);
    free_arrays(out, 1);
  }
  kiln_cpu_exec_destroy(e);
  free_arrays(in, 2);
  tp_free(&t);
}

/* ---- matmul with a register tile in a PRIVATE accumulator --------------- */

static void build_matmul(tp_t* t, int64_t M, int64_t N, int64_t K, const char* name) {
  tir_ctx_t* c = &t->p.tir;
  const tir_buffer_t* A = tp_buf(t, "A", KILN_DTYPE_F32, 2, (int64_t[]){M, K}, KILN_PLAN_INPUT);
  const tir_buffer_t* B = tp_buf(t, "B", KILN_DTYPE_F32, 2, (int64_t[]){K, N}, KILN_PLAN_INPUT);
  const tir_buffer_t* C = tp_buf(t, "C", KILN_DTYPE_F32, 2, (int64_t[]){M, N}, KILN_PLAN_OUTPUT);
  const int64_t MR = 4, NR = 32;
  const tir_buffer_t* acc =
      tir_buffer(c, "acc", KILN_DTYPE_F32, 2, (int64_t[]){MR, NR}, TIR_SCOPE_PRIVATE);
  tir_var_t *io = tir_var(c, "io"), *jo = tir_var(c, "jo"), *k = tir_var(c, "k");
  tir_var_t *i0 = tir_var(c, "i"), *j0 = tir_var(c, "j"), *i1 = tir_var(c, "i"),
            *j1 = tir_var(c, "j"), *i2 = tir_var(c, "i"), *j2 = tir_var(c, "j");
#define R(v) tir_ref(c, v)
#define ROW(iv) tir_add(c, tir_mul(c, R(io), tir_int(c, MR)), R(iv))
#define COL(jv) tir_add(c, tir_mul(c, R(jo), tir_int(c, NR)), R(jv))
  const tir_stmt_t* init = tir_for(
      c, i0, MR, TIR_LOOP_UNROLLED,
      tir_for(c, j0, NR, TIR_LOOP_VECTORIZED,
              tir_store(c, acc, IDX(R(i0), R(j0)), tir_const(c, KILN_DTYPE_F32, 0.0))));
  const tir_expr_t* upd = tir_add(
      c, tir_load(c, acc, IDX(R(i1), R(j1))),
      tir_mul(c, tir_load(c, A, IDX(ROW(i1), R(k))), tir_load(c, B, IDX(R(k), COL(j1)))));
  const tir_stmt_t* red = tir_for(
      c, k, K, TIR_LOOP_SERIAL,
      tir_for(c, i1, MR, TIR_LOOP_UNROLLED,
              tir_for(c, j1, NR, TIR_LOOP_VECTORIZED, tir_store(c, acc, IDX(R(i1), R(j1)), upd))));
  const tir_stmt_t* wb = tir_for(
      c, i2, MR, TIR_LOOP_UNROLLED,
      tir_for(c, j2, NR, TIR_LOOP_VECTORIZED,
              tir_store(c, C, IDX(ROW(i2), COL(j2)), tir_load(c, acc, IDX(R(i2), R(j2))))));
  const tir_stmt_t* body = tir_alloc(c, acc, tir_seq(c, 3, (const tir_stmt_t*[]){init, red, wb}));
  body = tir_for(c, jo, N / NR, TIR_LOOP_SERIAL, body);
  body = tir_for(c, io, M / MR, TIR_LOOP_PARALLEL, body);
#undef R
#undef ROW
#undef COL
  tp_kernel(t, mkfunc(t, name, 3, BUFS(A, B, C), body));
}

static void test_matmul_private_tile(void) {
  tp_t t;
  tp_init(&t);
  const int64_t M = 8, N = 64, K = 37;
  build_matmul(&t, M, N, K, "matmul_0");
  char* src = source_of(&t);
  CHECK(src && strstr(src, "float acc_b3[128] __attribute__((aligned(64)));"));
  CHECK(src && strstr(src, vfmt("*(kiln_v%df*)&acc_b3[")));
  CHECK(src && strstr(src, "#pragma GCC unroll 4"));
  CHECK(src && !strstr(src, "omp simd")); /* every vectorized loop took the vector path */
  free(src);
  kiln_cpu_options_t o = opts();
  kiln_cpu_exec_t* e = NULL;
  CHECK_OK(kiln_cpu_compile(&t.p, &o, &e, NULL));
  kiln_array_t in[2] = {arr(KILN_DTYPE_F32, 2, (int64_t[]){M, K}),
                        arr(KILN_DTYPE_F32, 2, (int64_t[]){K, N})};
  float *a = in[0].data, *b = in[1].data;
  for (int i = 0; i < M * K; ++i) a[i] = (float)((i * 7) % 11) - 5.0f;
  for (int i = 0; i < K * N; ++i) b[i] = (float)((i * 5) % 13) * 0.25f;
  kiln_array_t out[1];
  if (e) {
    CHECK_OK(kiln_cpu_run(e, in, out, NULL, NULL));
    const float* cc = out[0].data;
    double worst = 0;
    for (int i = 0; i < M; ++i)
      for (int j = 0; j < N; ++j) {
        double r = 0;
        for (int k = 0; k < K; ++k) r += (double)a[i * K + k] * b[k * N + j];
        double d = fabs(r - cc[i * N + j]);
        if (d > worst) worst = d;
      }
    CHECK_MSG(worst < 1e-3, "matmul max error %g", worst);
    free_arrays(out, 1);
  }
  kiln_cpu_exec_destroy(e);
  free_arrays(in, 2);
  tp_free(&t);
}

/* ---- f16 storage ------------------------------------------------------- */

/* f16 storage with f32 arithmetic in a vectorized loop: widening vector
 * loads and narrowing vector stores (one vcvtph2ps / vcvtps2ph each),
 * rounded once like the scalar path. */
static void test_f16_vector_loop(void) {
  tp_t t;
  tp_init(&t);
  tir_ctx_t* c = &t.p.tir;
  const int64_t n = 48;
  const tir_buffer_t* X = tp_buf(&t, "X", KILN_DTYPE_F16, 1, &n, KILN_PLAN_INPUT);
  const tir_buffer_t* Y = tp_buf(&t, "Y", KILN_DTYPE_F16, 1, &n, KILN_PLAN_OUTPUT);
  const int64_t one = 1;
  const tir_buffer_t* S = tp_buf(&t, "S", KILN_DTYPE_F16, 1, &one, KILN_PLAN_INPUT);
  const tir_buffer_t* W = tp_buf(&t, "W", KILN_DTYPE_F32, 1, &n, KILN_PLAN_OUTPUT);
  tir_var_t* i = tir_var(c, "i");
  const tir_expr_t* ri = tir_ref(c, i);
  const tir_expr_t* xf = tir_cast(c, KILN_DTYPE_F32, tir_load(c, X, IDX(ri)));
  /* a lane-invariant f16 (a broadcast weight): widened once per vector */
  const tir_expr_t* sf = tir_cast(c, KILN_DTYPE_F32, tir_load(c, S, IDX(tir_int(c, 0))));
  const tir_expr_t* y = tir_cast(
      c, KILN_DTYPE_F16,
      tir_add(c, tir_mul(c, xf, tir_const(c, KILN_DTYPE_F32, 3.0)), tir_const(c, KILN_DTYPE_F32, 1.0)));
  const tir_stmt_t* items[2] = {tir_store(c, Y, IDX(ri), y), tir_store(c, W, IDX(ri), tir_mul(c, xf, sf))};
  const tir_stmt_t* body = tir_for(c, i, n, TIR_LOOP_VECTORIZED, tir_seq(c, 2, items));
  tp_kernel(&t, mkfunc(&t, "halfv_0", 4, BUFS(X, S, Y, W), body));
  char* src = source_of(&t);
  CHECK(src && strstr(src, vfmt("kiln_vh2f%d(&X_b0[")));
  CHECK(src && strstr(src, vfmt("kiln_vf2h%d(&Y_b1[")));
  CHECK(src && strstr(src, vfmt("kiln_vsplath%d(&S_b2[")));
  free(src);
  kiln_cpu_options_t o = opts();
  kiln_cpu_exec_t* e = NULL;
  CHECK_OK(kiln_cpu_compile(&t.p, &o, &e, NULL));
  kiln_array_t in[2] = {arr(KILN_DTYPE_F16, 1, &n), arr(KILN_DTYPE_F16, 1, &one)};
  uint16_t* xs = in[0].data;
  for (int k = 0; k < n; ++k) xs[k] = kiln_f32_to_f16((float)(k - 24) * 0.37f + 1e-3f * (float)k);
  ((uint16_t*)in[1].data)[0] = kiln_f32_to_f16(-1.7f);
  const float sv = kiln_f16_to_f32(((uint16_t*)in[1].data)[0]);
  xs[0] = 0x7c00; /* +inf */
  xs[1] = 0x0001; /* smallest subnormal */
  xs[2] = 0x7bff; /* max finite: *3 overflows to inf */
  kiln_array_t out[2];
  if (e && CHECK_OK(kiln_cpu_run(e, in, out, NULL, NULL))) {
    int bad = 0;
    for (int k = 0; k < n; ++k) {
      const float xv = kiln_f16_to_f32(xs[k]);
      bad += ((uint16_t*)out[0].data)[k] != kiln_f32_to_f16(xv * 3.0f + 1.0f);
      const float wv = ((float*)out[1].data)[k], want = xv * sv;
      bad += !(wv == want || (isnan(wv) && isnan(want)));
    }
    CHECK_MSG(bad == 0, "%d f16 vector lanes differ from the scalar conversion", bad);
    free_arrays(out, 2);
  }
  free_arrays(in, 2);
  kiln_cpu_exec_destroy(e);
  tp_free(&t);
}

static void test_f16_round_trip(void) {
  tp_t t;
  tp_init(&t);
  tir_ctx_t* c = &t.p.tir;
  const int64_t n = 37;
  const tir_buffer_t* X = tp_buf(&t, "X", KILN_DTYPE_F16, 1, &n, KILN_PLAN_INPUT);
  const tir_buffer_t* Y = tp_buf(&t, "Y", KILN_DTYPE_F16, 1, &n, KILN_PLAN_OUTPUT);
  const tir_buffer_t* Z = tp_buf(&t, "Z", KILN_DTYPE_F16, 1, &n, KILN_PLAN_OUTPUT);
  const tir_buffer_t* W = tp_buf(&t, "W", KILN_DTYPE_F32, 1, &n, KILN_PLAN_OUTPUT);
  const tir_buffer_t* H = tp_buf(&t, "H", KILN_DTYPE_F16, 1, &n, KILN_PLAN_OUTPUT);
  tir_var_t* i = tir_var(c, "i");
  const tir_expr_t* ri = tir_ref(c, i);
  const tir_expr_t* x = tir_load(c, X, IDX(ri));
  const tir_expr_t* xf = tir_cast(c, KILN_DTYPE_F32, x);
  /* Y = f16(f32(x) * 3 + 1): computed in f32, rounded once */
  const tir_expr_t* y = tir_cast(
      c, KILN_DTYPE_F16,
      tir_add(c, tir_mul(c, xf, tir_const(c, KILN_DTYPE_F32, 3.0)), tir_const(c, KILN_DTYPE_F32, 1.0)));
  /* H = x * x + x in f16 arithmetic: rounded after every op */
  const tir_expr_t* hh = tir_add(c, tir_mul(c, x, x), x);
  const tir_stmt_t* items[4] = {tir_store(c, Y, IDX(ri), y), tir_store(c, Z, IDX(ri), x),
                                tir_store(c, W, IDX(ri), xf), tir_store(c, H, IDX(ri), hh)};
  const tir_stmt_t* body = tir_for(c, i, n, TIR_LOOP_VECTORIZED, tir_seq(c, 4, items));
  tp_kernel(&t, mkfunc(&t, "half_0", 5, BUFS(X, Y, Z, W, H), body));
  char* src = source_of(&t);
  CHECK(src && strstr(src, "kiln_f2h("));
  CHECK(src && strstr(src, "kiln_hround("));
  free(src);

  kiln_cpu_options_t o = opts();
  kiln_cpu_exec_t* e = NULL;
  CHECK_OK(kiln_cpu_compile(&t.p, &o, &e, NULL));
  kiln_array_t in[1] = {arr(KILN_DTYPE_F16, 1, &n)};
  uint16_t* xs = in[0].data;
  for (int k = 0; k < n; ++k) xs[k] = kiln_f32_to_f16((float)(k - 18) * 0.37f + 1e-3f * (float)k);
  xs[0] = 0x7c00;  /* +inf */
  xs[1] = 0x0001;  /* smallest subnormal */
  xs[2] = 0x7bff;  /* max finite: *3 overflows to inf */
  kiln_array_t out[4];
  if (e) {
    CHECK_OK(kiln_cpu_run(e, in, out, NULL, NULL));
    int bad = 0;
    for (int k = 0; k < n; ++k) {
      float xv = kiln_f16_to_f32(xs[k]);
      uint16_t want_y = kiln_f32_to_f16(xv * 3.0f + 1.0f);
      float sq = kiln_f16_to_f32(kiln_f32_to_f16(xv * xv));
      uint16_t want_h = kiln_f32_to_f16(sq + xv);
      uint16_t gy = ((uint16_t*)out[0].data)[k], gz = ((uint16_t*)out[1].data)[k];
      uint16_t gh = ((uint16_t*)out[3].data)[k];
      float gw = ((float*)out[2].data)[k];
      /* f16-typed x*x+x may be contracted into one f16 FMA (no rounding of
       * x*x): allow the intermediate's rounding error */
      float fh = kiln_f16_to_f32(gh), fw = kiln_f16_to_f32(want_h);
      bool h_ok = gh == want_h || fabsf(fh - fw) <= 1e-3f * (fabsf(xv * xv) + fabsf(xv));
      int b = (gy != want_y) + (gz != xs[k]) + (gw != xv) + !h_ok;
      if (b && bad < 5)
        fprintf(stderr, "  x=%04x: y %04x/%04x z %04x w %g/%g h %04x/%04x\n", xs[k], gy, want_y,
                gz, gw, xv, gh, want_h);
      bad += b;
    }
    CHECK_MSG(bad == 0, "%d f16 mismatches", bad);
    free_arrays(out, 4);
  }
  kiln_cpu_exec_destroy(e);
  free_arrays(in, 1);
  tp_free(&t);
}

/* ---- floor division / modulo ------------------------------------------- */

static void test_floordiv_negative(void) {
  tp_t t;
  tp_init(&t);
  tir_ctx_t* c = &t.p.tir;
  const int64_t n = 11;
  const tir_buffer_t* I = tp_buf(&t, "I", KILN_DTYPE_I64, 1, &n, KILN_PLAN_INPUT);
  const tir_buffer_t* O = tp_buf(&t, "O", KILN_DTYPE_I64, 2, (int64_t[]){6, n}, KILN_PLAN_OUTPUT);
  tir_var_t* i = tir_var(c, "i");
  const tir_expr_t* ri = tir_ref(c, i);
  const tir_expr_t* v = tir_load(c, I, IDX(ri));
  const tir_expr_t* im5 = tir_sub(c, ri, tir_int(c, 5)); /* -5 .. 5 */
  const tir_expr_t* vals[6] = {
      tir_bin(c, TIR_FLOORDIV, v, tir_int(c, 3)),   tir_bin(c, TIR_FLOORMOD, v, tir_int(c, 3)),
      tir_bin(c, TIR_FLOORDIV, im5, tir_int(c, 4)), tir_bin(c, TIR_FLOORMOD, im5, tir_int(c, 4)),
      tir_bin(c, TIR_FLOORDIV, ri, tir_int(c, 3)),  tir_bin(c, TIR_FLOORDIV, v, tir_int(c, -3)),
  };
  const tir_stmt_t* st[6];
  for (int k = 0; k < 6; ++k) st[k] = tir_store(c, O, IDX(tir_int(c, k), ri), vals[k]);
  tp_kernel(&t, mkfunc(&t, "fdiv_0", 2, BUFS(I, O), tir_for(c, i, n, TIR_LOOP_SERIAL, tir_seq(c, 6, st))));
  char* src = source_of(&t);
  CHECK(src && strstr(src, "kiln_floordiv(I_b0[i_0], 3)"));
  CHECK(src && strstr(src, "i_0 - 5 >> 2"));    /* power of two, maybe negative */
  CHECK(src && strstr(src, "i_0 - 5 & 3"));
  CHECK(src && strstr(src, "= i_0 / 3;"));      /* proven non-negative */
  free(src);
  kiln_cpu_options_t o = opts();
  kiln_cpu_exec_t* e = NULL;
  CHECK_OK(kiln_cpu_compile(&t.p, &o, &e, NULL));
  kiln_array_t in[1] = {arr(KILN_DTYPE_I64, 1, &n)};
  int64_t* iv = in[0].data;
  for (int k = 0; k < n; ++k) iv[k] = (k - 5) * 7 + (k % 3);
  kiln_array_t out[1];
  if (e) {
    CHECK_OK(kiln_cpu_run(e, in, out, NULL, NULL));
    const int64_t* r = out[0].data;
    int bad = 0;
    for (int k = 0; k < n; ++k) {
      int64_t a = iv[k], m = k - 5;
      int64_t fd = (a - (((a % 3) + 3) % 3)) / 3;
      bad += r[0 * n + k] != fd;
      bad += r[1 * n + k] != ((a % 3) + 3) % 3;
      bad += r[2 * n + k] != (m - (((m % 4) + 4) % 4)) / 4;
      bad += r[3 * n + k] != ((m % 4) + 4) % 4;
      bad += r[4 * n + k] != k / 3;
      int64_t q = a / -3;
      if (q * -3 != a && ((a < 0) != (-3 < 0))) --q;
      bad += r[5 * n + k] != q;
    }
    CHECK_MSG(bad == 0, "%d floordiv/floormod mismatches", bad);
    free_arrays(out, 1);
  }
  kiln_cpu_exec_destroy(e);
  free_arrays(in, 1);
  tp_free(&t);
}

/* ---- value semantics matching the reference ---------------------------- */

static void test_value_semantics(void) {
  tp_t t;
  tp_init(&t);
  tir_ctx_t* c = &t.p.tir;
  const int64_t n = 8;
  const tir_buffer_t* F = tp_buf(&t, "F", KILN_DTYPE_F32, 1, &n, KILN_PLAN_INPUT);
  const tir_buffer_t* G = tp_buf(&t, "G", KILN_DTYPE_F32, 1, &n, KILN_PLAN_INPUT);
  const tir_buffer_t* Q = tp_buf(&t, "Q", KILN_DTYPE_I32, 1, &n, KILN_PLAN_INPUT);
  const tir_buffer_t* OMAX = tp_buf(&t, "omax", KILN_DTYPE_F32, 1, &n, KILN_PLAN_OUTPUT);
  const tir_buffer_t* OI32 = tp_buf(&t, "oi32", KILN_DTYPE_I32, 1, &n, KILN_PLAN_OUTPUT);
  const tir_buffer_t* OI8 = tp_buf(&t, "oi8", KILN_DTYPE_I8, 1, &n, KILN_PLAN_OUTPUT);
  const tir_buffer_t* OB = tp_buf(&t, "ob", KILN_DTYPE_BOOL, 1, &n, KILN_PLAN_OUTPUT);
  const tir_buffer_t* ODIV = tp_buf(&t, "odiv", KILN_DTYPE_I32, 1, &n, KILN_PLAN_OUTPUT);
  const tir_buffer_t* OMUL = tp_buf(&t, "omul", KILN_DTYPE_I32, 1, &n, KILN_PLAN_OUTPUT);
  const tir_buffer_t* OSIG = tp_buf(&t, "osig", KILN_DTYPE_F32, 1, &n, KILN_PLAN_OUTPUT);
  tir_var_t* i = tir_var(c, "i");
  const tir_expr_t* ri = tir_ref(c, i);
  const tir_expr_t* f = tir_load(c, F, IDX(ri));
  const tir_expr_t* g = tir_load(c, G, IDX(ri));
  const tir_expr_t* q = tir_load(c, Q, IDX(ri));
  const tir_stmt_t* st[7] = {
      tir_store(c, OMAX, IDX(ri), tir_bin(c, TIR_MAX, f, g)),
      tir_store(c, OI32, IDX(ri), tir_cast(c, KILN_DTYPE_I32, f)),
      tir_store(c, OI8, IDX(ri), tir_cast(c, KILN_DTYPE_I8, q)),
      tir_store(c, OB, IDX(ri), tir_cast(c, KILN_DTYPE_BOOL, f)),
      tir_store(c, ODIV, IDX(ri), tir_bin(c, TIR_DIV, q, tir_cast(c, KILN_DTYPE_I32, g))),
      tir_store(c, OMUL, IDX(ri), tir_mul(c, q, q)),
      tir_store(c, OSIG, IDX(ri), tir_call(c, TIR_SIGMOID, 1, f, NULL, NULL)),
  };
  tp_kernel(&t, mkfunc(&t, "sem_0", 10, BUFS(F, G, Q, OMAX, OI32, OI8, OB, ODIV, OMUL, OSIG),
                       tir_for(c, i, n, TIR_LOOP_VECTORIZED, tir_seq(c, 7, st))));
  kiln_cpu_options_t o = opts();
  kiln_cpu_exec_t* e = NULL;
  CHECK_OK(kiln_cpu_compile(&t.p, &o, &e, NULL));
  kiln_array_t in[3] = {arr(KILN_DTYPE_F32, 1, &n), arr(KILN_DTYPE_F32, 1, &n),
                        arr(KILN_DTYPE_I32, 1, &n)};
  float fv[8] = {NAN, 1.0f, -2.5f, 3e20f, -3e20f, 0.0f, 7.9f, -0.0f};
  float gv[8] = {1.0f, NAN, 0.0f, 2.0f, -1.0f, 5.0f, -1.0f, 0.0f};
  int32_t qv[8] = {300, -129, INT32_MIN, 65537, 7, -7, 100000, 0};
  memcpy(in[0].data, fv, sizeof fv);
  memcpy(in[1].data, gv, sizeof gv);
  memcpy(in[2].data, qv, sizeof qv);
  kiln_array_t out[7];
  if (e) {
    CHECK_OK(kiln_cpu_run(e, in, out, NULL, NULL));
    const float* omax = out[0].data;
    CHECK(isnan(omax[0]) && isnan(omax[1]) && omax[2] == 0.0f && omax[3] == 3e20f);
    const int32_t* oi32 = out[1].data;
    CHECK(oi32[0] == 0);            /* NaN -> 0 */
    CHECK(oi32[2] == -2);           /* truncation */
    CHECK(oi32[3] == (int32_t)(int64_t)INT64_MAX); /* saturate to int64 then wrap: -1 */
    CHECK(oi32[6] == 7);
    const int8_t* oi8 = out[2].data;
    CHECK(oi8[0] == 44 && oi8[1] == 127 && oi8[2] == 0 && oi8[3] == 1);
    const uint8_t* ob = out[3].data;
    CHECK(ob[0] == 1 && ob[1] == 1 && ob[5] == 0 && ob[7] == 0);
    const int32_t* od = out[4].data;
    CHECK(od[0] == 300 && od[2] == 0 && od[3] == 32768 && od[5] == -1 && od[6] == -100000);
    CHECK(od[1] == 0);              /* -129 / (int)NaN = -129 / 0 -> 0 */
    const int32_t* om = out[5].data;
    CHECK(om[3] == (int32_t)(uint32_t)(65537u * 65537u)); /* wraps */
    CHECK(om[6] == (int32_t)(uint32_t)(100000u * 100000u));
    const float* os = out[6].data;
    CHECK_NEAR(os[2], 1.0 / (1.0 + exp(2.5)), 1e-6);
    CHECK(os[4] == 0.0f && os[3] == 1.0f);
    free_arrays(out, 7);
  }
  kiln_cpu_exec_destroy(e);
  free_arrays(in, 3);
  tp_free(&t);
}

/* ---- aliases and constants --------------------------------------------- */

static void test_alias_and_const(void) {
  tp_t t;
  tp_init(&t);
  tir_ctx_t* c = &t.p.tir;
  /* X[2,6] --reshape--> Xr[12] ; Y[12] = Xr * W + 1 ; Out[3,4] = alias of Y */
  tp_buf(&t, "X", KILN_DTYPE_F32, 2, (int64_t[]){2, 6}, KILN_PLAN_INPUT);
  const tir_buffer_t* Xr =
      tp_buf(&t, "Xr", KILN_DTYPE_F32, 1, (int64_t[]){12}, KILN_PLAN_INTERMEDIATE);
  const tir_buffer_t* W = tp_buf(&t, "W", KILN_DTYPE_F32, 1, (int64_t[]){12}, KILN_PLAN_CONST);
  const tir_buffer_t* Y =
      tp_buf(&t, "Y", KILN_DTYPE_F32, 1, (int64_t[]){12}, KILN_PLAN_INTERMEDIATE);
  tp_buf(&t, "Out", KILN_DTYPE_F32, 2, (int64_t[]){3, 4}, KILN_PLAN_OUTPUT);
  t.bufs[1].alias_of = 0;
  t.bufs[4].alias_of = 3;
  kiln_shape_t ws = kiln_shape_make(1, (int64_t[]){12});
  CHECK_OK(kiln_array_alloc(kiln_allocator_system(), KILN_DTYPE_F32, &ws, &t.bufs[2].value));
  t.bufs[2].owned = true;
  for (int k = 0; k < 12; ++k) ((float*)t.bufs[2].value.data)[k] = (float)k;
  tir_var_t* i = tir_var(c, "i");
  const tir_expr_t* ri = tir_ref(c, i);
  const tir_stmt_t* body = tir_store(
      c, Y, IDX(ri),
      tir_add(c, tir_mul(c, tir_load(c, Xr, IDX(ri)), tir_load(c, W, IDX(ri))),
              tir_const(c, KILN_DTYPE_F32, 1.0)));
  tp_kernel(&t, mkfunc(&t, "scale_0", 3, BUFS(Xr, W, Y), tir_for(c, i, 12, TIR_LOOP_VECTORIZED, body)));
  kiln_cpu_options_t o = opts();
  kiln_cpu_exec_t* e = NULL;
  CHECK_OK(kiln_cpu_compile(&t.p, &o, &e, NULL));
  kiln_array_t in[1] = {arr(KILN_DTYPE_F32, 2, (int64_t[]){2, 6})};
  for (int k = 0; k < 12; ++k) ((float*)in[0].data)[k] = 0.5f * (float)k;
  kiln_array_t out[1];
  if (e) {
    CHECK_OK(kiln_cpu_run(e, in, out, NULL, NULL));
    CHECK(out[0].shape.rank == 2 && out[0].shape.dims[0] == 3 && out[0].shape.dims[1] == 4);
    int bad = 0;
    for (int k = 0; k < 12; ++k) bad += ((float*)out[0].data)[k] != 0.5f * (float)k * (float)k + 1.0f;
    CHECK_MSG(bad == 0, "%d alias/const mismatches", bad);
    free_arrays(out, 1);
  }
  kiln_cpu_exec_destroy(e);
  free_arrays(in, 1);
  kiln_array_free(kiln_allocator_system(), &t.bufs[2].value);

  /* An alias larger than its root is rejected before anything runs. */
  t.bufs[4].alias_of = 2;
  t.bufs[2].value = (kiln_array_t){0};
  t.bufs[2].kind = KILN_PLAN_INTERMEDIATE;
  ((tir_buffer_t*)t.bufs[4].buf)->shape[0] = 4; /* 16 floats over 12 */
  CHECK_ERR(kiln_cpu_compile(&t.p, &o, &e, NULL), KILN_INVALID_ARGUMENT, "aliases 'W'");
  tp_free(&t);
}

/* ---- cache ------------------------------------------------------------- */

static void test_cache_hit_and_corrupt(void) {
  tp_t t;
  tp_init(&t);
  build_add(&t, 4, 32);
  kiln_cpu_options_t o = opts();
  o.flags = "-O1 -fopenmp"; /* a key of its own */
  kiln_cpu_exec_t* e = NULL;
  kiln_cpu_compile_stats_t s1, s2, s3;
  CHECK_OK(kiln_cpu_compile(&t.p, &o, &e, &s1));
  kiln_cpu_exec_destroy(e);
  e = NULL;
  CHECK_OK(kiln_cpu_compile(&t.p, &o, &e, &s2));
  kiln_cpu_exec_destroy(e);
  e = NULL;
  CHECK(!s1.cache_hit);
  CHECK(s2.cache_hit);
  CHECK(strcmp(s1.so_path, s2.so_path) == 0);
  CHECK(s2.compile_s < s1.compile_s);
  /* a truncated object in the cache is rebuilt, not trusted */
  FILE* f = fopen(s1.so_path, "wb");
  CHECK(f != NULL);
  if (f) {
    fputs("not an ELF file", f);
    fclose(f);
  }
  CHECK_OK(kiln_cpu_compile(&t.p, &o, &e, &s3));
  CHECK(!s3.cache_hit);
  if (e) {
    int64_t sh[2] = {4, 32};
    kiln_array_t in[2] = {arr(KILN_DTYPE_F32, 2, sh), arr(KILN_DTYPE_F32, 2, sh)};
    ((float*)in[0].data)[5] = 2.0f;
    ((float*)in[1].data)[5] = 3.0f;
    kiln_array_t out[1];
    CHECK_OK(kiln_cpu_run(e, in, out, NULL, NULL));
    CHECK(((float*)out[0].data)[5] == 5.0f);
    free_arrays(out, 1);
    free_arrays(in, 2);
  }
  kiln_cpu_exec_destroy(e);
  /* different flags -> different key */
  o.flags = "-O2 -fopenmp";
  e = NULL;
  CHECK_OK(kiln_cpu_compile(&t.p, &o, &e, &s3));
  CHECK(!s3.cache_hit && strcmp(s3.so_path, s1.so_path) != 0);
  kiln_cpu_exec_destroy(e);
  /* cache disabled: compiles every time, leaves nothing behind */
  o.cache_dir = "";
  e = NULL;
  CHECK_OK(kiln_cpu_compile(&t.p, &o, &e, &s3));
  CHECK(!s3.cache_hit && access(s3.so_path, F_OK) != 0);
  kiln_cpu_exec_destroy(e);
  tp_free(&t);
}

static int count_files(const char* dir, const char* suffix) {
  DIR* d = opendir(dir);
  int n = 0;
  struct dirent* ent;
  while (d && (ent = readdir(d))) {
    size_t l = strlen(ent->d_name), s = strlen(suffix);
    n += l > s && strcmp(ent->d_name + l - s, suffix) == 0;
  }
  if (d) closedir(d);
  return n;
}

/* A cache over its entry bound drops its oldest objects, never the new one. */
static void test_cache_trim(void) {
  char dir[300];
  snprintf(dir, sizeof dir, "%s/trim", cache_dir);
  CHECK(mkdir(dir, 0700) == 0);
  char path[600];
  for (int i = 0; i < 2100; ++i) {
    snprintf(path, sizeof path, "%s/old%04d.so", dir, i);
    FILE* f = fopen(path, "wb");
    if (f) fclose(f);
    struct timespec ts[2] = {{1000000 + i, 0}, {1000000 + i, 0}};
    utimensat(AT_FDCWD, path, ts, 0);
  }
  tp_t t;
  tp_init(&t);
  build_add(&t, 2, 16);
  kiln_cpu_options_t o = opts();
  o.cache_dir = dir;
  kiln_cpu_exec_t* e = NULL;
  kiln_cpu_compile_stats_t st;
  CHECK_OK(kiln_cpu_compile(&t.p, &o, &e, &st));
  kiln_cpu_exec_destroy(e);
  int left = count_files(dir, ".so");
  CHECK_MSG(left <= 2048 * 3 / 4 + 1 && left > 1000, "%d objects left after trimming", left);
  CHECK(access(st.so_path, F_OK) == 0);
  snprintf(path, sizeof path, "%s/old0000.so", dir); /* the oldest went */
  CHECK(access(path, F_OK) != 0);
  tp_free(&t);
  /* remove the rest */
  DIR* d = opendir(dir);
  struct dirent* ent;
  while (d && (ent = readdir(d))) {
    if (ent->d_name[0] == '.') continue;
    snprintf(path, sizeof path, "%s/%s", dir, ent->d_name);
    unlink(path);
  }
  if (d) closedir(d);
  rmdir(dir);
}

/* ---- failures ---------------------------------------------------------- */

static void test_compile_failures(void) {
  tp_t t;
  tp_init(&t);
  build_add(&t, 2, 16);
  kiln_cpu_options_t o = opts();
  kiln_cpu_exec_t* e = NULL;
  o.flags = "-O2 --kiln-bogus-flag";
  CHECK_ERR(kiln_cpu_compile(&t.p, &o, &e, NULL), KILN_DEVICE_ERROR, "kiln-bogus-flag");
  CHECK(e == NULL);
  kiln_status_t s = kiln_cpu_compile(&t.p, &o, &e, NULL);
  CHECK(s && strstr(kiln_status_message(s), "source kept at"));
  kiln_status_free(s);
  o = opts();
  o.compiler = "/nonexistent/kiln-cc";
  CHECK_ERR(kiln_cpu_compile(&t.p, &o, &e, NULL), KILN_NOT_FOUND, "kiln-cc");
  /* a C error inside a kernel names the kernel: -D turns a name into junk */
  o = opts();
  o.flags = "-O1 -DA_b0=1+";
  CHECK_ERR(kiln_cpu_compile(&t.p, &o, &e, NULL), KILN_DEVICE_ERROR, "kernel 'add_0'");
  tp_free(&t);
}

static void test_shape_mismatch(void) {
  tp_t t;
  tp_init(&t);
  build_add(&t, 4, 16);
  kiln_cpu_options_t o = opts();
  kiln_cpu_exec_t* e = NULL;
  CHECK_OK(kiln_cpu_compile(&t.p, &o, &e, NULL));
  if (e) {
    kiln_array_t in[2] = {arr(KILN_DTYPE_F32, 2, (int64_t[]){4, 16}),
                          arr(KILN_DTYPE_F32, 2, (int64_t[]){4, 15})};
    kiln_array_t out[1] = {{0}};
    CHECK_ERR(kiln_cpu_run(e, in, out, NULL, NULL), KILN_INVALID_ARGUMENT,
              "input 'B' has shape [4,15], but the plan was compiled for shape [4,16]");
    free_arrays(in, 2);
    kiln_array_t in2[2] = {arr(KILN_DTYPE_F32, 2, (int64_t[]){4, 16}),
                           arr(KILN_DTYPE_I32, 2, (int64_t[]){4, 16})};
    CHECK_ERR(kiln_cpu_run(e, in2, out, NULL, NULL), KILN_INVALID_ARGUMENT,
              "input 'B' has dtype i32, the plan expects f32");
    free_arrays(in2, 2);
  }
  kiln_cpu_exec_destroy(e);
  tp_free(&t);
}

/* ---- printer errors and precedence ------------------------------------- */

static void test_printer(void) {
  tp_t t;
  tp_init(&t);
  tir_ctx_t* c = &t.p.tir;
  const int64_t n = 16;
  const tir_buffer_t* A = tp_buf(&t, "A", KILN_DTYPE_F32, 1, &n, KILN_PLAN_INPUT);
  const tir_buffer_t* O = tp_buf(&t, "O", KILN_DTYPE_F32, 1, &n, KILN_PLAN_OUTPUT);
  tir_var_t* i = tir_var(c, "i");
  const tir_expr_t* ri = tir_ref(c, i);
  const tir_expr_t* a = tir_load(c, A, IDX(ri));
  /* (a + a) * (a - (a - a)), a + (a + a) keeps float parens */
  const tir_expr_t* v = tir_mul(c, tir_add(c, a, a), tir_sub(c, a, tir_sub(c, a, a)));
  v = tir_add(c, v, tir_add(c, a, a));
  const tir_stmt_t* body = tir_for(c, i, n, TIR_LOOP_SERIAL, tir_store(c, O, IDX(ri), v));
  tir_func_t* f = mkfunc(&t, "prec_0", 2, BUFS(A, O), body);
  kiln_cf_out_t out;
  kiln_cf_out_init(&out);
  CHECK_OK(kiln_cf_print_kernel(&kiln_cf_dialect_c, f, NULL, &out));
  CHECK(out.data && strstr(out.data, "O_b1[i_0] = (A_b0[i_0] + A_b0[i_0]) * (A_b0[i_0] - "
                                     "(A_b0[i_0] - A_b0[i_0])) + (A_b0[i_0] + A_b0[i_0]);"));
  kiln_cf_out_free(&out);

  /* unary minus never meets another '-'; int * does not swallow a / */
  const tir_expr_t* neg = tir_call(c, TIR_NEG, 1, tir_call(c, TIR_NEG, 1, a, NULL, NULL), NULL, NULL);
  neg = tir_add(c, neg, tir_call(c, TIR_NEG, 1, tir_const(c, KILN_DTYPE_F32, -2.0), NULL, NULL));
  neg = tir_mul(c, neg, tir_const(c, KILN_DTYPE_F32, -0.0));
  const tir_expr_t* ix = tir_mul(c, ri, tir_bin(c, TIR_FLOORDIV, ri, tir_int(c, 3)));
  const tir_stmt_t* b2 = tir_for(c, i, n, TIR_LOOP_SERIAL,
                                 tir_store(c, O, IDX(tir_bin(c, TIR_FLOORMOD, ix, tir_int(c, 16))), neg));
  kiln_cf_out_init(&out);
  CHECK_OK(kiln_cf_print_kernel(&kiln_cf_dialect_c, mkfunc(&t, "neg_0", 2, BUFS(A, O), b2), NULL, &out));
  CHECK(out.data && strstr(out.data, "O_b1[i_0 * (i_0 / 3) % 16] = (-(-A_b0[i_0]) + -(-2.0f)) * (-0.0f);"));
  kiln_cf_out_free(&out);

  /* BOUND loops and barriers have no C spelling */
  tir_var_t* tx = tir_var(c, "tx");
  const tir_stmt_t* bound =
      tir_for_bound(c, tx, 16, TIR_THREAD_X, tir_store(c, O, IDX(tir_ref(c, tx)), a));
  kiln_cf_out_init(&out);
  CHECK_ERR(kiln_cf_print_kernel(&kiln_cf_dialect_c, mkfunc(&t, "bound_0", 2, BUFS(A, O), bound),
                                 NULL, &out),
            KILN_UNSUPPORTED, "bound to a GPU id");
  kiln_cf_out_free(&out);
  kiln_cf_out_init(&out);
  CHECK_ERR(kiln_cf_print_kernel(&kiln_cf_dialect_c, mkfunc(&t, "bar_0", 2, BUFS(A, O), tir_barrier(c)),
                                 NULL, &out),
            KILN_UNSUPPORTED, "barrier");
  kiln_cf_out_free(&out);
  /* a buffer that is not a parameter, a bad kernel name */
  kiln_cf_out_init(&out);
  CHECK_ERR(kiln_cf_print_kernel(&kiln_cf_dialect_c, mkfunc(&t, "np_0", 1, BUFS(A), body), NULL, &out),
            KILN_INVALID_ARGUMENT, "buffer 'O' is used but is not a kernel parameter");
  kiln_cf_out_free(&out);
  kiln_cf_out_init(&out);
  CHECK_ERR(kiln_cf_print_kernel(&kiln_cf_dialect_c, mkfunc(&t, "9lives", 2, BUFS(A, O), body), NULL, &out),
            KILN_INVALID_ARGUMENT, "not a C identifier");
  kiln_cf_out_free(&out);
  /* duplicate kernel names in a unit */
  const tir_func_t* two[2] = {f, f};
  kiln_cf_out_init(&out);
  CHECK_ERR(kiln_cf_print_unit(&kiln_cf_dialect_c, two, 2, NULL, &out), KILN_INVALID_ARGUMENT,
            "two kernels are named 'prec_0'");
  kiln_cf_out_free(&out);

  /* the GPU dialects print the same kernel, and the bound one */
  kiln_cf_out_init(&out);
  CHECK_OK(kiln_cf_print_unit(&kiln_cf_dialect_opencl, (const tir_func_t*[]){f}, 1, NULL, &out));
  CHECK(out.data && strstr(out.data, "__kernel void prec_0(__global const float* restrict A_b0"));
  kiln_cf_out_free(&out);
  kiln_cf_out_init(&out);
  CHECK_OK(kiln_cf_print_kernel(&kiln_cf_dialect_glsl, mkfunc(&t, "bound_1", 2, BUFS(A, O), bound),
                                NULL, &out));
  CHECK(out.data && strstr(out.data, "layout(local_size_x = 16, local_size_y = 1"));
  CHECK(out.data && strstr(out.data, "int(gl_LocalInvocationID.x)"));
  kiln_cf_out_free(&out);

  /* the preludes and the C epilogue are the embedded kernels/<target>/ files */
  CHECK(strstr(kiln_cf_dialect_c.prelude, "typedef _Float16 kiln_f16;") &&
        strstr(kiln_cf_dialect_c.prelude, "KILN_VHDEF(16, 32)\n"));
  CHECK(strstr(kiln_cf_dialect_c.epilogue, "void kiln_set_threads(int n) {"));
  CHECK(strstr(kiln_cf_dialect_opencl.prelude, "#define KILN_VMIN(a, b)"));
  CHECK(strstr(kiln_cf_dialect_glsl.prelude, "float kiln_erf(float x) {"));
  /* the native-half dialect adds its extension pragma before the same prelude */
  kiln_cf_dialect_t half;
  CHECK(kiln_cf_dialect_native_half(&kiln_cf_dialect_opencl, &half));
  kiln_cf_out_init(&out);
  CHECK_OK(kiln_cf_print_prelude(&half, &out));
  const char* head = "/* generated by kiln (opencl-half dialect) */\n"
                     "#pragma OPENCL EXTENSION cl_khr_fp16 : enable\n";
  CHECK(out.data && strncmp(out.data, head, strlen(head)) == 0 &&
        strcmp(out.data + strlen(head), kiln_cf_dialect_opencl.prelude) == 0);
  kiln_cf_out_free(&out);
  kiln_cf_out_init(&out);
  CHECK_OK(kiln_cf_print_prelude(&kiln_cf_dialect_opencl, &out));
  CHECK(out.data && !strstr(out.data, "cl_khr_fp16"));
  kiln_cf_out_free(&out);
  tp_free(&t);
}

/* ---- per-kernel timing callback ----------------------------------------- */

static void count_cb(void* user, int32_t k, double s) {
  int* n = user;
  if (k >= 0 && s >= 0) ++*n;
}

static void test_two_kernels_and_callback(void) {
  tp_t t;
  tp_init(&t);
  build_add(&t, 4, 16);
  /* second kernel: D = C * 2 (reads the first kernel's output) */
  tir_ctx_t* c = &t.p.tir;
  const tir_buffer_t* C = t.bufs[2].buf;
  t.bufs[2].kind = KILN_PLAN_INTERMEDIATE;
  t.g->n_outputs = 0;
  const tir_buffer_t* D = tp_buf(&t, "D", KILN_DTYPE_F32, 2, (int64_t[]){4, 16}, KILN_PLAN_OUTPUT);
  tir_var_t* i = tir_var(c, "i");
  tir_var_t* j = tir_var(c, "j");
  const tir_expr_t* ix[2] = {tir_ref(c, i), tir_ref(c, j)};
  const tir_stmt_t* body = tir_store(
      c, D, ix, tir_mul(c, tir_load(c, C, ix), tir_const(c, KILN_DTYPE_F32, 2.0)));
  body = tir_for(c, i, 4, TIR_LOOP_PARALLEL, tir_for(c, j, 16, TIR_LOOP_PARALLEL, body));
  tp_kernel(&t, mkfunc(&t, "double_0", 2, BUFS(C, D), body));
  char* src = source_of(&t);
  CHECK(src && strstr(src, "collapse(2)"));
  free(src);
  kiln_cpu_options_t o = opts();
  o.threads = 2;
  kiln_cpu_exec_t* e = NULL;
  CHECK_OK(kiln_cpu_compile(&t.p, &o, &e, NULL));
  if (e) {
    int64_t sh[2] = {4, 16};
    kiln_array_t in[2] = {arr(KILN_DTYPE_F32, 2, sh), arr(KILN_DTYPE_F32, 2, sh)};
    for (int k = 0; k < 64; ++k) ((float*)in[0].data)[k] = (float)k, ((float*)in[1].data)[k] = 1;
    kiln_array_t out[1];
    int calls = 0;
    CHECK_OK(kiln_cpu_run(e, in, out, count_cb, &calls));
    CHECK(calls == 2);
    CHECK(((float*)out[0].data)[10] == 22.0f);
    free_arrays(out, 1);
    free_arrays(in, 2);
  }
  kiln_cpu_exec_destroy(e);
  tp_free(&t);
}

/* ---- dedup and split compilation ---------------------------------------- */

/* out = in * k + 1 over n floats; kernels with the same k print the same
 * canonical text and become aliases. */
static void add_scale(tp_t* t, const char* kname, const tir_buffer_t* in, const tir_buffer_t* out,
                      double k) {
  tir_ctx_t* c = &t->p.tir;
  tir_var_t* i = tir_var(c, "i");
  const tir_expr_t* ri = tir_ref(c, i);
  const tir_stmt_t* body = tir_store(
      c, out, IDX(ri),
      tir_add(c, tir_mul(c, tir_load(c, in, IDX(ri)), tir_const(c, KILN_DTYPE_F32, k)),
              tir_const(c, KILN_DTYPE_F32, 1.0)));
  tp_kernel(t, mkfunc(t, kname, 2, BUFS(in, out), tir_for(c, i, in->shape[0], TIR_LOOP_VECTORIZED, body)));
}

static void test_dedup_and_parts(void) {
  tp_t t;
  tp_init(&t);
  const int64_t n = 32;
  const tir_buffer_t* X = tp_buf(&t, "X", KILN_DTYPE_F32, 1, &n, KILN_PLAN_INPUT);
  const tir_buffer_t* prev = X;
  /* a chain of 12 distinct kernels and 2 duplicates of the first */
  for (int k = 0; k < 14; ++k) {
    char bn[16], kn[16];
    snprintf(bn, sizeof bn, "Y%d", k);
    snprintf(kn, sizeof kn, "chain_%d", k);
    const tir_buffer_t* Y =
        tp_buf(&t, bn, KILN_DTYPE_F32, 1, &n, k == 13 ? KILN_PLAN_OUTPUT : KILN_PLAN_INTERMEDIATE);
    add_scale(&t, kn, prev, Y, k >= 12 ? 1.0 : 1.0 + k);
    prev = Y;
  }
  char* src = source_of(&t);
  CHECK(src && strstr(src, "void chain_12(void* const* args) __attribute__((alias(\"chain_0\")));"));
  CHECK(src && strstr(src, "void chain_13(void* const* args) __attribute__((alias(\"chain_0\")));"));
  free(src);
  /* the split path: 12 units / 4 = 3 parts, more than the 2 jobs, so the
   * third starts when one of the first two ends */
  setenv("KILN_CPU_JOBS", "2", 1);
  kiln_cpu_options_t o = opts();
  kiln_cpu_exec_t* e = NULL;
  kiln_cpu_compile_stats_t st;
  memset(&st, 0, sizeof st);
  CHECK_OK(kiln_cpu_compile(&t.p, &o, &e, &st));
  CHECK_MSG(st.cache_hit || (st.parts == 3 && st.jobs == 2 && st.compiler_cpu_s > 0.0),
            "parts %d, jobs %d, compiler CPU %g s", (int)st.parts, (int)st.jobs, st.compiler_cpu_s);
  if (e) {
    kiln_array_t in[1] = {arr(KILN_DTYPE_F32, 1, &n)};
    for (int i = 0; i < n; ++i) ((float*)in[0].data)[i] = (float)i * 0.125f;
    kiln_array_t out[1];
    CHECK_OK(kiln_cpu_run(e, in, out, NULL, NULL));
    int bad = 0;
    for (int i = 0; i < n; ++i) {
      float v = (float)i * 0.125f;
      for (int k = 0; k < 14; ++k) v = v * (k >= 12 ? 1.0f : 1.0f + (float)k) + 1.0f;
      bad += fabsf(((float*)out[0].data)[i] - v) > 1e-5f * fabsf(v);
    }
    CHECK_MSG(bad == 0, "%d chain mismatches", bad);
    free_arrays(out, 1);
    free_arrays(in, 1);
  }
  kiln_cpu_exec_destroy(e);
  o.flags = "-O1 --kiln-bogus-part-flag";
  kiln_status_t s = kiln_cpu_compile(&t.p, &o, &e, NULL);
  CHECK(kiln_status_code(s) == KILN_DEVICE_ERROR);
  CHECK(s && strstr(kiln_status_message(s), "kiln-bogus-part-flag"));
  CHECK(s && strstr(kiln_status_message(s), "failing part"));
  kiln_status_free(s);
  unsetenv("KILN_CPU_JOBS");
  tp_free(&t);
}

/* ---- setup ------------------------------------------------------------- */

static void rm_tree(const char* dir) {
  DIR* d = opendir(dir);
  if (!d) return;
  struct dirent* ent;
  char p[512];
  while ((ent = readdir(d))) {
    if (!strcmp(ent->d_name, ".") || !strcmp(ent->d_name, "..")) continue;
    snprintf(p, sizeof p, "%s/%s", dir, ent->d_name);
    unlink(p);
  }
  closedir(d);
  rmdir(dir);
}

/* ---- prefetch hints -------------------------------------------------------- */

/* TIR_PREFETCH: verified like a load (an index past the buffer is refused),
 * printed as __builtin_prefetch in C and not at all in OpenCL C, and the
 * kernel computes what it computes without it. */
static void test_prefetch(void) {
  tp_t t;
  tp_init(&t);
  tir_ctx_t* c = &t.p.tir;
  const int64_t n = 64;
  const tir_buffer_t* A = tp_buf(&t, "A", KILN_DTYPE_F32, 1, &n, KILN_PLAN_INPUT);
  const tir_buffer_t* O = tp_buf(&t, "O", KILN_DTYPE_F32, 1, &n, KILN_PLAN_OUTPUT);
  tir_var_t* i = tir_var(c, "i");
  const tir_expr_t* ri = tir_ref(c, i);
  const tir_expr_t* a = tir_load(c, A, IDX(ri));
  const tir_expr_t* ahead = tir_add(c, ri, tir_int(c, 16));
  const tir_stmt_t* st = tir_store(c, O, IDX(ri), tir_add(c, a, a));
  const tir_stmt_t* bad = tir_for(c, i, n, TIR_LOOP_SERIAL, tir_seq2(c, tir_prefetch(c, A, IDX(ahead)), st));
  CHECK_ERR(tir_verify(mkfunc(&t, "pf_bad", 2, BUFS(A, O), bad)), KILN_OUT_OF_RANGE, "A");
  const tir_expr_t* clamped = tir_bin(c, TIR_MIN, ahead, tir_int(c, n - 1));
  const tir_stmt_t* body = tir_for(c, i, n, TIR_LOOP_SERIAL, tir_seq2(c, tir_prefetch(c, A, IDX(clamped)), st));
  tir_func_t* f = mkfunc(&t, "pf_0", 2, BUFS(A, O), body);
  CHECK_OK(tir_verify(f));
  kiln_cf_out_t out;
  kiln_cf_out_init(&out);
  CHECK_OK(kiln_cf_print_kernel(&kiln_cf_dialect_c, f, NULL, &out));
  CHECK(out.data && strstr(out.data, "__builtin_prefetch(&A_b0["));
  kiln_cf_out_free(&out);
  kiln_cf_out_init(&out);
  CHECK_OK(kiln_cf_print_kernel(&kiln_cf_dialect_opencl, f, NULL, &out));
  CHECK(out.data && !strstr(out.data, "prefetch") && strstr(out.data, "O_b1[i_0] = A_b0[i_0] + A_b0[i_0];"));
  kiln_cf_out_free(&out);
  tp_kernel(&t, f);
  kiln_cpu_options_t o = opts();
  kiln_cpu_exec_t* e = NULL;
  kiln_cpu_compile_stats_t cs;
  CHECK_OK(kiln_cpu_compile(&t.p, &o, &e, &cs));
  kiln_array_t in[1] = {arr(KILN_DTYPE_F32, 1, &n)};
  for (int k = 0; k < n; ++k) ((float*)in[0].data)[k] = (float)k - 7.5f;
  kiln_array_t res[1];
  if (e) {
    CHECK_OK(kiln_cpu_run(e, in, res, NULL, NULL));
    int wrong = 0;
    for (int k = 0; k < n; ++k) wrong += ((float*)res[0].data)[k] != 2.0f * ((float)k - 7.5f);
    CHECK_MSG(wrong == 0, "%d wrong sums", wrong);
    free_arrays(res, 1);
  }
  kiln_cpu_exec_destroy(e);
  free_arrays(in, 1);
  tp_free(&t);
}

int main(void) {
  const char* tmp = getenv("TMPDIR");
  snprintf(cache_dir, sizeof cache_dir, "%s/kiln-test-cpu-XXXXXX", tmp && *tmp ? tmp : "/tmp");
  if (!mkdtemp(cache_dir)) {
    fprintf(stderr, "cannot create a temporary cache directory\n");
    return 1;
  }
  RUN(test_add_parallel_vectorized);
  RUN(test_matmul_private_tile);
  RUN(test_f16_round_trip);
  RUN(test_f16_vector_loop);
  RUN(test_floordiv_negative);
  RUN(test_value_semantics);
  RUN(test_alias_and_const);
  RUN(test_cache_hit_and_corrupt);
  RUN(test_cache_trim);
  RUN(test_compile_failures);
  RUN(test_shape_mismatch);
  RUN(test_printer);
  RUN(test_two_kernels_and_callback);
  RUN(test_dedup_and_parts);
  RUN(test_prefetch);
  rm_tree(cache_dir);
  return kiln_test_finish();
}
