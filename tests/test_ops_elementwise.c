/* Unit tests for the elementwise op family (ir/ops/elementwise*.c): shape
 * and dtype inference (including symbolic dims), the reference kernels on
 * hand-computed values, opset differences and the error messages. */
#include <float.h>
#include <math.h>
#include <stdint.h>
#include <string.h>

#include "ir/op.h"
#include "compiler/ref_exec.h"
#include "testing.h"

#define F32 KILN_DTYPE_F32
#define F16 KILN_DTYPE_F16
#define I8 KILN_DTYPE_I8
#define U8 KILN_DTYPE_U8
#define I32 KILN_DTYPE_I32
#define I64 KILN_DTYPE_I64
#define F64 KILN_DTYPE_F64
#define U64 KILN_DTYPE_U64
#define BOOL KILN_DTYPE_BOOL
#define NONE KILN_DTYPE_UNDEFINED /* an omitted optional input */

#define DIMS(...) (int64_t[]){__VA_ARGS__}
#define FV(...) (float[]){__VA_ARGS__}
#define ARR(t, rank, dims, data) mk((t), (rank), (dims), (data))

static kiln_allocator_t A(void) { return kiln_allocator_system(); }

/* A borrowed description of an array (data not owned). */
static kiln_array_t mk(kiln_dtype_t t, int rank, const int64_t* dims,
                       const void* data) {
  kiln_array_t a;
  memset(&a, 0, sizeof a);
  a.dtype = t;
  a.shape = kiln_shape_make(rank, dims);
  a.data = (void*)data;
  a.nbytes = t == NONE ? 0 : (size_t)kiln_shape_count(&a.shape) * kiln_dtype_size(t);
  return a;
}
static const kiln_array_t omitted = {.dtype = NONE};

/* Attribute builders. */
typedef struct spec_s {
  const char* op;
  int64_t opset;
  int n_in;
  const kiln_array_t* in;
  const bool* is_const; /* NULL: all graph inputs */
  int n_attrs;
  const kiln_attr_t* attrs;
  int n_out;
} spec_t;

static const char* const in_names[] = {"x0", "x1", "x2", "x3"};
static const char* const out_names[] = {"y0", "y1"};

/* Builds a one-node graph; inputs are graph inputs or initializers. */
static kiln_status_t build(const spec_t* sp, kiln_graph_t** out_g) {
  kiln_graph_t* g = NULL;
  KILN_RETURN_IF_ERROR(kiln_graph_create(A(), &g));
  kiln_status_t s = kiln_graph_set_opset(g, "", sp->opset);
  const char* names[4];
  for (int i = 0; i < sp->n_in && !s; ++i) {
    names[i] = sp->in[i].dtype == NONE ? "" : in_names[i];
    if (sp->in[i].dtype == NONE) continue;
    if (sp->is_const && sp->is_const[i]) {
      kiln_array_t c;
      s = kiln_array_clone(A(), &sp->in[i], &c);
      if (!s) s = kiln_graph_add_initializer(g, in_names[i], &c, NULL);
    } else {
      s = kiln_graph_add_input(g, in_names[i], sp->in[i].dtype, &sp->in[i].shape, NULL);
    }
  }
  if (!s)
    s = kiln_graph_add_node(g, sp->op, "n0", sp->n_in, names, sp->n_out, out_names,
                            sp->n_attrs, sp->attrs, NULL);
  for (int o = 0; o < sp->n_out && !s; ++o) s = kiln_graph_add_output(g, out_names[o]);
  if (!s) s = kiln_graph_prepare(g);
  if (s) {
    kiln_graph_destroy(g);
    return s;
  }
  *out_g = g;
  return NULL;
}

/* Builds, prepares and runs; |outs| receive arrays the caller frees. */
static kiln_status_t run_spec(const spec_t* sp, kiln_array_t* outs) {
  kiln_graph_t* g = NULL;
  KILN_RETURN_IF_ERROR(build(sp, &g));
  kiln_array_t feeds[4];
  int nf = 0;
  for (int i = 0; i < sp->n_in; ++i)
    if (sp->in[i].dtype != NONE && !(sp->is_const && sp->is_const[i])) feeds[nf++] = sp->in[i];
  kiln_ref_options_t o;
  kiln_ref_options_default(&o);
  kiln_status_t s = kiln_ref_run(g, feeds, &o, outs);
  kiln_graph_destroy(g);
  return s;
}

static kiln_status_t run_op(const char* op, int64_t opset, int n_in,
                            const kiln_array_t* in, int n_attrs,
                            const kiln_attr_t* attrs, kiln_array_t* out) {
  spec_t sp = {op, opset, n_in, in, NULL, n_attrs, attrs, 1};
  return run_spec(&sp, out);
}

static bool shape_is(const kiln_shape_t* s, int rank, const int64_t* dims) {
  if (s->rank != rank) return false;
  for (int i = 0; i < rank; ++i)
    if (s->dims[i] != dims[i]) return false;
  return true;
}

static void check_f32(const kiln_array_t* y, int64_t n, const float* want,
                      double tol) {
  CHECK(y->dtype == F32);
  CHECK(kiln_array_numel(y) == n);
  if (y->dtype != F32 || kiln_array_numel(y) != n) return;
  for (int64_t i = 0; i < n; ++i) {
    float got = ((const float*)y->data)[i];
    if (isnan(want[i]))
      CHECK_MSG(isnan(got), "element %lld: got %g, want NaN", (long long)i, got);
    else if (isinf(want[i]))
      CHECK_MSG(got == want[i], "element %lld: got %g, want %g", (long long)i, got, want[i]);
    else
      CHECK_MSG(fabs(got - want[i]) <= tol, "element %lld: got %.9g, want %.9g",
                (long long)i, got, want[i]);
  }
}

static void check_i64s(const kiln_array_t* y, kiln_dtype_t t, int64_t n,
                       const int64_t* want) {
  CHECK(y->dtype == t);
  CHECK(kiln_array_numel(y) == n);
  if (y->dtype != t || kiln_array_numel(y) != n) return;
  for (int64_t i = 0; i < n; ++i) {
    int64_t got = kiln_load_i64(t, y->data, (size_t)i);
    CHECK_MSG(got == want[i], "element %lld: got %lld, want %lld", (long long)i,
              (long long)got, (long long)want[i]);
  }
}

/* ---- broadcasting ----------------------------------------------------- */

static void test_add_broadcast_231_4(void) {
  float a[6] = {0, 1, 2, 3, 4, 5};
  float b[4] = {10, 20, 30, 40};
  kiln_array_t in[2] = {ARR(F32, 3, DIMS(2, 3, 1), a), ARR(F32, 1, DIMS(4), b)};
  kiln_array_t y = {0};
  if (!CHECK_OK(run_op("Add", 14, 2, in, 0, NULL, &y))) return;
  CHECK(shape_is(&y.shape, 3, DIMS(2, 3, 4)));
  float want[24];
  for (int i = 0; i < 6; ++i)
    for (int j = 0; j < 4; ++j) want[i * 4 + j] = a[i] + b[j];
  check_f32(&y, 24, want, 0);
  kiln_array_free(A(), &y);
}

static void test_broadcast_patterns(void) {
  /* [3,1,5] - [1,4,1] -> [3,4,5]: both inputs broadcast, in different dims. */
  float a[15], b[4];
  for (int i = 0; i < 15; ++i) a[i] = (float)i;
  for (int i = 0; i < 4; ++i) b[i] = (float)(100 * i);
  kiln_array_t in[2] = {ARR(F32, 3, DIMS(3, 1, 5), a), ARR(F32, 3, DIMS(1, 4, 1), b)};
  kiln_array_t y = {0};
  if (CHECK_OK(run_op("Sub", 14, 2, in, 0, NULL, &y))) {
    CHECK(shape_is(&y.shape, 3, DIMS(3, 4, 5)));
    float want[60];
    for (int i = 0; i < 3; ++i)
      for (int j = 0; j < 4; ++j)
        for (int k = 0; k < 5; ++k) want[(i * 4 + j) * 5 + k] = a[i * 5 + k] - b[j];
    check_f32(&y, 60, want, 0);
    kiln_array_free(A(), &y);
  }
  /* Scalar (rank 0) times a matrix, scalar first. */
  float s = 3.0f, m[6] = {1, 2, 3, 4, 5, 6};
  kiln_array_t in2[2] = {ARR(F32, 0, NULL, &s), ARR(F32, 2, DIMS(2, 3), m)};
  if (CHECK_OK(run_op("Mul", 14, 2, in2, 0, NULL, &y))) {
    CHECK(shape_is(&y.shape, 2, DIMS(2, 3)));
    check_f32(&y, 6, FV(3, 6, 9, 12, 15, 18), 0);
    kiln_array_free(A(), &y);
  }
  /* An empty dim broadcasts to an empty output. */
  float one = 1.0f;
  kiln_array_t in3[2] = {ARR(F32, 2, DIMS(0, 3), NULL), ARR(F32, 1, DIMS(1), &one)};
  if (CHECK_OK(run_op("Add", 14, 2, in3, 0, NULL, &y))) {
    CHECK(shape_is(&y.shape, 2, DIMS(0, 3)));
    kiln_array_free(A(), &y);
  }
}

static void test_broadcast_symbolic(void) {
  /* [N,3] + [1,3] -> [N,3] and [N,1] * [4] -> [N,4] at load time. */
  kiln_graph_t* g = NULL;
  if (!CHECK_OK(kiln_graph_create(A(), &g))) return;
  int32_t n_sym = 0;
  CHECK_OK(kiln_graph_set_opset(g, "", 14));
  CHECK_OK(kiln_graph_symbol(g, "N", &n_sym));
  int64_t N = kiln_dim_from_symbol(n_sym);
  kiln_shape_t s_n3 = kiln_shape_make(2, DIMS(N, 3));
  kiln_shape_t s_13 = kiln_shape_make(2, DIMS(1, 3));
  kiln_shape_t s_n1 = kiln_shape_make(2, DIMS(N, 1));
  kiln_shape_t s_4 = kiln_shape_make(1, DIMS(4));
  CHECK_OK(kiln_graph_add_input(g, "a", F32, &s_n3, NULL));
  CHECK_OK(kiln_graph_add_input(g, "b", F32, &s_13, NULL));
  CHECK_OK(kiln_graph_add_input(g, "c", F32, &s_n1, NULL));
  CHECK_OK(kiln_graph_add_input(g, "d", F32, &s_4, NULL));
  CHECK_OK(kiln_graph_add_node(g, "Add", "add", 2, (const char*[]){"a", "b"}, 1,
                               (const char*[]){"y"}, 0, NULL, NULL));
  CHECK_OK(kiln_graph_add_node(g, "Mul", "mul", 2, (const char*[]){"c", "d"}, 1,
                               (const char*[]){"z"}, 0, NULL, NULL));
  CHECK_OK(kiln_graph_add_node(g, "Less", "less", 2, (const char*[]){"y", "a"}, 1,
                               (const char*[]){"w"}, 0, NULL, NULL));
  CHECK_OK(kiln_graph_add_output(g, "y"));
  CHECK_OK(kiln_graph_add_output(g, "z"));
  CHECK_OK(kiln_graph_add_output(g, "w"));
  if (CHECK_OK(kiln_graph_prepare(g))) {
    const kiln_tensor_t* y = &g->tensors[kiln_graph_find_tensor(g, "y")];
    const kiln_tensor_t* z = &g->tensors[kiln_graph_find_tensor(g, "z")];
    const kiln_tensor_t* w = &g->tensors[kiln_graph_find_tensor(g, "w")];
    CHECK(y->dtype == F32 && shape_is(&y->shape, 2, DIMS(N, 3)));
    CHECK(z->dtype == F32 && z->shape.rank == 2 && z->shape.dims[0] == N &&
          z->shape.dims[1] == 4);
    CHECK(w->dtype == BOOL && shape_is(&w->shape, 2, DIMS(N, 3)));
  }
  kiln_graph_destroy(g);
}

static void test_broadcast_error_names_shapes(void) {
  float a[6] = {0}, b[4] = {0};
  kiln_array_t in[2] = {ARR(F32, 2, DIMS(2, 3), a), ARR(F32, 1, DIMS(4), b)};
  kiln_array_t y = {0};
  spec_t sp = {"Add", 14, 2, in, NULL, 0, NULL, 1};
  kiln_graph_t* g = NULL;
  kiln_status_t s = build(&sp, &g);
  CHECK(s != NULL);
  if (!s) {
    kiln_graph_destroy(g);
    return;
  }
  const char* msg = kiln_status_message(s);
  CHECK(kiln_status_code(s) == KILN_INVALID_ARGUMENT);
  CHECK_MSG(strstr(msg, "[2,3]") && strstr(msg, "[4]"), "message: %s", msg);
  kiln_status_free(s);
  (void)y;
  /* Where with three shapes, one of them incompatible. */
  uint8_t c[2] = {1, 0};
  kiln_array_t w[3] = {ARR(BOOL, 1, DIMS(2), c), ARR(F32, 2, DIMS(2, 3), a),
                       ARR(F32, 1, DIMS(3), b)};
  CHECK_ERR(run_op("Where", 16, 3, w, 0, NULL, &y), KILN_INVALID_ARGUMENT, "[2]");
  /* PRelu's slope must broadcast to X, not the other way round. */
  kiln_array_t p[2] = {ARR(F32, 1, DIMS(3), a), ARR(F32, 2, DIMS(2, 3), b)};
  CHECK_ERR(run_op("PRelu", 16, 2, p, 0, NULL, &y), KILN_INVALID_ARGUMENT,
            "does not broadcast to X");
}

static void test_dtype_mismatch(void) {
  float a[2] = {1, 2};
  int64_t b[2] = {1, 2};
  kiln_array_t in[2] = {ARR(F32, 1, DIMS(2), a), ARR(I64, 1, DIMS(2), b)};
  kiln_array_t y = {0};
  kiln_status_t s = run_op("Add", 14, 2, in, 0, NULL, &y);
  CHECK(s && kiln_status_code(s) == KILN_INVALID_ARGUMENT);
  if (s) {
    const char* msg = kiln_status_message(s);
    CHECK_MSG(strstr(msg, "f32") && strstr(msg, "i64"), "message: %s", msg);
    kiln_status_free(s);
  }
  CHECK_ERR(run_op("Equal", 19, 2, in, 0, NULL, &y), KILN_INVALID_ARGUMENT, "f32 and i64");
  CHECK_ERR(run_op("Max", 13, 2, in, 0, NULL, &y), KILN_INVALID_ARGUMENT, "f32 and i64");
  uint8_t c[2] = {1, 0};
  kiln_array_t w[3] = {ARR(BOOL, 1, DIMS(2), c), in[0], in[1]};
  CHECK_ERR(run_op("Where", 16, 3, w, 0, NULL, &y), KILN_INVALID_ARGUMENT, "f32 and i64");
  /* A float condition is not a bool. */
  kiln_array_t w2[3] = {in[0], in[0], in[0]};
  CHECK_ERR(run_op("Where", 16, 3, w2, 0, NULL, &y), KILN_UNSUPPORTED, "condition");
}

static void test_unsupported_dtypes(void) {
  int32_t a[2] = {1, 2};
  float f[2] = {1, 2};
  kiln_array_t ia = ARR(I32, 1, DIMS(2), a);
  kiln_array_t fa = ARR(F32, 1, DIMS(2), f);
  kiln_array_t y = {0};
  CHECK_ERR(run_op("Sigmoid", 13, 1, &ia, 0, NULL, &y), KILN_UNSUPPORTED, "i32");
  CHECK_ERR(run_op("Not", 1, 1, &fa, 0, NULL, &y), KILN_UNSUPPORTED, "f32");
  kiln_array_t two[2] = {fa, fa};
  CHECK_ERR(run_op("And", 7, 2, two, 0, NULL, &y), KILN_UNSUPPORTED, "f32");
  uint8_t b[2] = {1, 0};
  kiln_array_t bb[2] = {ARR(BOOL, 1, DIMS(2), b), ARR(BOOL, 1, DIMS(2), b)};
  CHECK_ERR(run_op("Add", 14, 2, bb, 0, NULL, &y), KILN_UNSUPPORTED, "bool");
  CHECK_ERR(run_op("Less", 13, 2, bb, 0, NULL, &y), KILN_UNSUPPORTED, "bool");
}

/* ---- integer arithmetic ----------------------------------------------- */

static void test_int_div(void) {
  int32_t a[6] = {7, -7, 7, -7, 0, 9};
  int32_t b[6] = {2, 2, -2, -2, 5, 3};
  kiln_array_t in[2] = {ARR(I32, 1, DIMS(6), a), ARR(I32, 1, DIMS(6), b)};
  kiln_array_t y = {0};
  if (CHECK_OK(run_op("Div", 14, 2, in, 0, NULL, &y))) {
    check_i64s(&y, I32, 6, DIMS(3, -3, -3, 3, 0, 3));
    kiln_array_free(A(), &y);
  }
  /* The most negative value divided by -1 wraps instead of trapping. */
  int64_t c[2] = {INT64_MIN, 9}, d[2] = {-1, -4};
  kiln_array_t in2[2] = {ARR(I64, 1, DIMS(2), c), ARR(I64, 1, DIMS(2), d)};
  if (CHECK_OK(run_op("Div", 14, 2, in2, 0, NULL, &y))) {
    check_i64s(&y, I64, 2, DIMS(INT64_MIN, -2));
    kiln_array_free(A(), &y);
  }
  /* Division by zero is an error, not a crash. */
  uint8_t e[3] = {1, 2, 3}, z[3] = {1, 0, 1};
  kiln_array_t in3[2] = {ARR(U8, 1, DIMS(3), e), ARR(U8, 1, DIMS(3), z)};
  CHECK_ERR(run_op("Div", 14, 2, in3, 0, NULL, &y), KILN_INVALID_ARGUMENT,
            "division by zero");
  /* Float division by zero follows IEEE. */
  float fa[2] = {1, -1}, fb[2] = {0, 0};
  kiln_array_t in4[2] = {ARR(F32, 1, DIMS(2), fa), ARR(F32, 1, DIMS(2), fb)};
  if (CHECK_OK(run_op("Div", 14, 2, in4, 0, NULL, &y))) {
    check_f32(&y, 2, FV(INFINITY, -INFINITY), 0);
    kiln_array_free(A(), &y);
  }
}

static void test_int_wraps(void) {
  int8_t a[3] = {127, -128, 100}, b[3] = {1, -1, 100};
  kiln_array_t in[2] = {ARR(I8, 1, DIMS(3), a), ARR(I8, 1, DIMS(3), b)};
  kiln_array_t y = {0};
  if (CHECK_OK(run_op("Add", 14, 2, in, 0, NULL, &y))) {
    check_i64s(&y, I8, 3, DIMS(-128, 127, -56));
    kiln_array_free(A(), &y);
  }
  if (CHECK_OK(run_op("Mul", 14, 2, in, 0, NULL, &y))) {
    check_i64s(&y, I8, 3, DIMS(127, -128, 16));
    kiln_array_free(A(), &y);
  }
  uint8_t c[2] = {3, 250}, d[2] = {5, 10};
  kiln_array_t in2[2] = {ARR(U8, 1, DIMS(2), c), ARR(U8, 1, DIMS(2), d)};
  if (CHECK_OK(run_op("Sub", 14, 2, in2, 0, NULL, &y))) {
    check_i64s(&y, U8, 2, DIMS(254, 240));
    kiln_array_free(A(), &y);
  }
  int64_t e[2] = {INT64_MAX, INT64_MIN}, f[2] = {1, 1};
  kiln_array_t in3[2] = {ARR(I64, 1, DIMS(2), e), ARR(I64, 1, DIMS(2), f)};
  if (CHECK_OK(run_op("Add", 14, 2, in3, 0, NULL, &y))) {
    check_i64s(&y, I64, 2, DIMS(INT64_MIN, INT64_MIN + 1));
    kiln_array_free(A(), &y);
  }
  /* Neg and Abs of the most negative value wrap too. */
  int32_t g[3] = {INT32_MIN, -5, 7};
  kiln_array_t ig = ARR(I32, 1, DIMS(3), g);
  if (CHECK_OK(run_op("Neg", 13, 1, &ig, 0, NULL, &y))) {
    check_i64s(&y, I32, 3, DIMS(INT32_MIN, 5, -7));
    kiln_array_free(A(), &y);
  }
  if (CHECK_OK(run_op("Abs", 13, 1, &ig, 0, NULL, &y))) {
    check_i64s(&y, I32, 3, DIMS(INT32_MIN, 5, 7));
    kiln_array_free(A(), &y);
  }
  if (CHECK_OK(run_op("Relu", 14, 1, &ig, 0, NULL, &y))) {
    check_i64s(&y, I32, 3, DIMS(0, 0, 7));
    kiln_array_free(A(), &y);
  }
}

static void test_pow(void) {
  kiln_array_t y = {0};
  /* f32 base, i64 exponent: output f32. */
  float a[3] = {2, -3, 0.5f};
  int64_t e[3] = {3, 2, -1};
  kiln_array_t in[2] = {ARR(F32, 1, DIMS(3), a), ARR(I64, 1, DIMS(3), e)};
  if (CHECK_OK(run_op("Pow", 15, 2, in, 0, NULL, &y))) {
    check_f32(&y, 3, FV(8, 9, 2), 0);
    kiln_array_free(A(), &y);
  }
  /* i32 base, f32 exponent: output i32. */
  int32_t b[3] = {1, 2, 3};
  float f[3] = {4, 5, 6};
  kiln_array_t in2[2] = {ARR(I32, 1, DIMS(3), b), ARR(F32, 1, DIMS(3), f)};
  if (CHECK_OK(run_op("Pow", 15, 2, in2, 0, NULL, &y))) {
    check_i64s(&y, I32, 3, DIMS(1, 32, 729));
    kiln_array_free(A(), &y);
  }
  /* i64 ^ i64 including negative exponents (truncated 1/b^e). */
  int64_t c[5] = {3, -2, 1, -1, 5}, d[5] = {4, 3, -3, -3, -1};
  kiln_array_t in3[2] = {ARR(I64, 1, DIMS(5), c), ARR(I64, 1, DIMS(5), d)};
  if (CHECK_OK(run_op("Pow", 15, 2, in3, 0, NULL, &y))) {
    check_i64s(&y, I64, 5, DIMS(81, -8, 1, -1, 0));
    kiln_array_free(A(), &y);
  }
  /* f32 ^ f32 with a broadcast scalar exponent. */
  float x[3] = {1, 2, 3}, two = 2;
  kiln_array_t in4[2] = {ARR(F32, 1, DIMS(3), x), ARR(F32, 0, NULL, &two)};
  if (CHECK_OK(run_op("Pow", 15, 2, in4, 0, NULL, &y))) {
    check_f32(&y, 3, FV(1, 4, 9), 0);
    kiln_array_free(A(), &y);
  }
}

/* ---- f16 -------------------------------------------------------------- */

static void test_f16_add(void) {
  uint16_t a[3], b[3];
  float fa[3] = {1.0f, 0.1f, 65504.0f}, fb[3] = {2.0f, 0.2f, 65504.0f};
  for (int i = 0; i < 3; ++i) {
    a[i] = kiln_f32_to_f16(fa[i]);
    b[i] = kiln_f32_to_f16(fb[i]);
  }
  kiln_array_t in[2] = {ARR(F16, 1, DIMS(3), a), ARR(F16, 1, DIMS(3), b)};
  kiln_array_t y = {0};
  if (!CHECK_OK(run_op("Add", 14, 2, in, 0, NULL, &y))) return;
  CHECK(y.dtype == F16);
  const uint16_t* h = y.data;
  CHECK(kiln_f16_to_f32(h[0]) == 3.0f);
  /* Computed in f32 from the f16 inputs and rounded once. */
  float want = kiln_f16_to_f32(kiln_f32_to_f16(kiln_f16_to_f32(a[1]) + kiln_f16_to_f32(b[1])));
  CHECK(kiln_f16_to_f32(h[1]) == want);
  CHECK(isinf(kiln_f16_to_f32(h[2])));
  kiln_array_free(A(), &y);
  /* f16 activations round once too. */
  uint16_t x[2] = {kiln_f32_to_f16(-1.5f), kiln_f32_to_f16(0.75f)};
  kiln_array_t hx = ARR(F16, 1, DIMS(2), x);
  if (CHECK_OK(run_op("Sigmoid", 13, 1, &hx, 0, NULL, &y))) {
    const uint16_t* o = y.data;
    CHECK(o[0] == kiln_f32_to_f16(1.0f / (1.0f + expf(1.5f))));
    CHECK(o[1] == kiln_f32_to_f16(1.0f / (1.0f + expf(-0.75f))));
    kiln_array_free(A(), &y);
  }
}

/* ---- Cast ------------------------------------------------------------- */

static void test_cast_f32_f16_f32(void) {
  /* Exactly representable, ties to even (down and up), overflow to inf,
   * underflow to a subnormal and to zero. */
  float x[8] = {1.0f,         1.0f + 1.0f / 1024, 1.0f + 1.0f / 2048,
                1.0f + 3.0f / 2048, 65504.0f,      65520.0f,
                5.9604645e-8f, 1e-8f};
  float want[8] = {1.0f,         1.0f + 1.0f / 1024, 1.0f,
                   1.0f + 2.0f / 1024, 65504.0f,      INFINITY,
                   5.9604645e-8f, 0.0f};
  kiln_graph_t* g = NULL;
  if (!CHECK_OK(kiln_graph_create(A(), &g))) return;
  kiln_shape_t s = kiln_shape_make(1, DIMS(8));
  kiln_attr_t to16 = kiln_attr_make_int("to", 10), to32 = kiln_attr_make_int("to", 1);
  CHECK_OK(kiln_graph_set_opset(g, "", 21));
  CHECK_OK(kiln_graph_add_input(g, "x", F32, &s, NULL));
  CHECK_OK(kiln_graph_add_node(g, "Cast", "c16", 1, (const char*[]){"x"}, 1,
                               (const char*[]){"h"}, 1, &to16, NULL));
  CHECK_OK(kiln_graph_add_node(g, "Cast", "c32", 1, (const char*[]){"h"}, 1,
                               (const char*[]){"y"}, 1, &to32, NULL));
  CHECK_OK(kiln_graph_add_output(g, "h"));
  CHECK_OK(kiln_graph_add_output(g, "y"));
  if (CHECK_OK(kiln_graph_prepare(g))) {
    CHECK(g->tensors[kiln_graph_find_tensor(g, "h")].dtype == F16);
    kiln_array_t in = ARR(F32, 1, DIMS(8), x);
    kiln_array_t outs[2] = {{0}, {0}};
    kiln_ref_options_t o;
    kiln_ref_options_default(&o);
    if (CHECK_OK(kiln_ref_run(g, &in, &o, outs))) {
      CHECK(outs[0].dtype == F16);
      check_f32(&outs[1], 8, want, 0);
      kiln_array_free(A(), &outs[0]);
      kiln_array_free(A(), &outs[1]);
    }
  }
  kiln_graph_destroy(g);
}

static void test_cast_ints_and_bool(void) {
  kiln_array_t y = {0};
  float f[5] = {2.7f, -2.7f, NAN, 0.0f, -0.0f};
  kiln_array_t fx = ARR(F32, 1, DIMS(5), f);
  kiln_attr_t to_i32 = kiln_attr_make_int("to", 6), to_bool = kiln_attr_make_int("to", 9), to_f32 = kiln_attr_make_int("to", 1),
              to_u8 = kiln_attr_make_int("to", 2), to_i64 = kiln_attr_make_int("to", 7);
  if (CHECK_OK(run_op("Cast", 21, 1, &fx, 1, &to_i32, &y))) {
    check_i64s(&y, I32, 5, DIMS(2, -2, 0, 0, 0));
    kiln_array_free(A(), &y);
  }
  if (CHECK_OK(run_op("Cast", 21, 1, &fx, 1, &to_bool, &y))) {
    check_i64s(&y, BOOL, 5, DIMS(1, 1, 1, 0, 0));
    kiln_array_free(A(), &y);
  }
  int64_t big[3] = {300, -1, (int64_t)1 << 40};
  kiln_array_t bx = ARR(I64, 1, DIMS(3), big);
  if (CHECK_OK(run_op("Cast", 13, 1, &bx, 1, &to_u8, &y))) {
    check_i64s(&y, U8, 3, DIMS(44, 255, 0));
    kiln_array_free(A(), &y);
  }
  if (CHECK_OK(run_op("Cast", 13, 1, &bx, 1, &to_f32, &y))) {
    check_f32(&y, 3, FV(300.0f, -1.0f, 1099511627776.0f), 0);
    kiln_array_free(A(), &y);
  }
  uint8_t b[2] = {1, 0};
  kiln_array_t bb = ARR(BOOL, 1, DIMS(2), b);
  if (CHECK_OK(run_op("Cast", 13, 1, &bb, 1, &to_i64, &y))) {
    check_i64s(&y, I64, 2, DIMS(1, 0));
    kiln_array_free(A(), &y);
  }
  /* Same dtype is a copy. */
  if (CHECK_OK(run_op("Cast", 13, 1, &fx, 1, &to_f32, &y))) {
    check_f32(&y, 5, f, 0);
    kiln_array_free(A(), &y);
  }
}

static void test_cast_errors(void) {
  float f[1] = {1};
  kiln_array_t fx = ARR(F32, 1, DIMS(1), f);
  kiln_array_t y = {0};
  kiln_attr_t to_bf16 = kiln_attr_make_int("to", 16), to_string = kiln_attr_make_int("to", 8),
              to_bad = kiln_attr_make_int("to", 999), to_float = kiln_attr_make_float("to", 1.0f);
  CHECK_ERR(run_op("Cast", 21, 1, &fx, 1, &to_bf16, &y), KILN_UNSUPPORTED,
            "Cast: to BFLOAT16 is not supported");
  CHECK_ERR(run_op("Cast", 21, 1, &fx, 1, &to_string, &y), KILN_UNSUPPORTED,
            "Cast: to STRING is not supported");
  CHECK_ERR(run_op("Cast", 21, 1, &fx, 1, &to_bad, &y), KILN_INVALID_ARGUMENT, "999");
  CHECK_ERR(run_op("Cast", 21, 1, &fx, 1, &to_float, &y), KILN_INVALID_ARGUMENT, "to");
  CHECK_ERR(run_op("Cast", 21, 1, &fx, 0, NULL, &y), KILN_INVALID_ARGUMENT, "to");
}

/* f64 computes in double: exp(1) is e to double precision (expf's value
 * differs in the 8th digit), Cast keeps 1e300 to f64 and gives inf to f32,
 * and u64 above INT64_MAX converts by its unsigned value. */
static void test_f64_and_wide_ints(void) {
  double d[2] = {1.0, 1e300};
  kiln_array_t dx = ARR(F64, 1, DIMS(2), d);
  kiln_array_t y = {0};
  if (CHECK_OK(run_op("Exp", 13, 1, &dx, 0, NULL, &y))) {
    CHECK(y.dtype == KILN_DTYPE_F64 && ((double*)y.data)[0] == exp(1.0));
    kiln_array_free(A(), &y);
  }
  kiln_attr_t to_f32 = kiln_attr_make_int("to", 1), to_f64 = kiln_attr_make_int("to", 11);
  if (CHECK_OK(run_op("Cast", 21, 1, &dx, 1, &to_f32, &y))) {
    CHECK(y.dtype == KILN_DTYPE_F32 && ((float*)y.data)[0] == 1.0f && isinf(((float*)y.data)[1]));
    kiln_array_free(A(), &y);
  }
  uint64_t u[2] = {UINT64_MAX, 3};
  kiln_array_t ux = ARR(U64, 1, DIMS(2), u);
  if (CHECK_OK(run_op("Cast", 21, 1, &ux, 1, &to_f64, &y))) {
    CHECK(y.dtype == KILN_DTYPE_F64 && ((double*)y.data)[0] == 18446744073709551615.0);
    kiln_array_free(A(), &y);
  }
  kiln_array_t uy[2] = {ux, ARR(U64, 1, DIMS(2), ((uint64_t[]){2, 2}))};
  if (CHECK_OK(run_op("Div", 14, 2, uy, 0, NULL, &y))) {
    CHECK(((uint64_t*)y.data)[0] == UINT64_MAX / 2 && ((uint64_t*)y.data)[1] == 1);
    kiln_array_free(A(), &y);
  }
  /* a conv's kernel computes in f32: f64 is refused, by name */
  kiln_array_t cw[2] = {ARR(F64, 4, DIMS(1, 1, 1, 2), d), ARR(F64, 4, DIMS(1, 1, 1, 1), d)};
  CHECK_ERR(run_op("Conv", 11, 2, cw, 0, NULL, &y), KILN_UNSUPPORTED, "f64");
}

/* ---- Clip ------------------------------------------------------------- */

static void test_clip_opsets(void) {
  float x[5] = {-3, -0.5f, 0, 0.5f, 3};
  kiln_array_t y = {0};
  /* Opset 6: bounds are attributes. */
  kiln_attr_t attrs[2] = {kiln_attr_make_float("min", -1.0f), kiln_attr_make_float("max", 1.0f)};
  kiln_array_t in = ARR(F32, 1, DIMS(5), x);
  if (CHECK_OK(run_op("Clip", 6, 1, &in, 2, attrs, &y))) {
    check_f32(&y, 5, FV(-1, -0.5f, 0, 0.5f, 1), 0);
    kiln_array_free(A(), &y);
  }
  /* Opset 6 without attributes: the float range (no clipping here). */
  if (CHECK_OK(run_op("Clip", 6, 1, &in, 0, NULL, &y))) {
    check_f32(&y, 5, x, 0);
    kiln_array_free(A(), &y);
  }
  /* Opset 13: bounds are optional scalar inputs. */
  float lo = -1, hi = 1;
  kiln_array_t in13[3] = {in, ARR(F32, 0, NULL, &lo), ARR(F32, 0, NULL, &hi)};
  if (CHECK_OK(run_op("Clip", 13, 3, in13, 0, NULL, &y))) {
    check_f32(&y, 5, FV(-1, -0.5f, 0, 0.5f, 1), 0);
    kiln_array_free(A(), &y);
  }
  /* Only max given (min omitted by an empty name). */
  kiln_array_t in_max[3] = {in, omitted, ARR(F32, 0, NULL, &hi)};
  if (CHECK_OK(run_op("Clip", 13, 3, in_max, 0, NULL, &y))) {
    check_f32(&y, 5, FV(-3, -0.5f, 0, 0.5f, 1), 0);
    kiln_array_free(A(), &y);
  }
  /* min > max: everything becomes max. */
  float lo2 = 2, hi2 = 1;
  kiln_array_t in_swap[3] = {in, ARR(F32, 0, NULL, &lo2), ARR(F32, 0, NULL, &hi2)};
  if (CHECK_OK(run_op("Clip", 13, 3, in_swap, 0, NULL, &y))) {
    check_f32(&y, 5, FV(1, 1, 1, 1, 1), 0);
    kiln_array_free(A(), &y);
  }
  /* At opset 13 the attributes are not inputs: nothing is clipped. */
  if (CHECK_OK(run_op("Clip", 13, 1, &in, 0, NULL, &y))) {
    check_f32(&y, 5, x, 0);
    kiln_array_free(A(), &y);
  }
  /* int8 with only min. */
  int8_t ix[4] = {-128, -5, 5, 127}, imin = -6;
  kiln_array_t in_i8[2] = {ARR(I8, 1, DIMS(4), ix), ARR(I8, 0, NULL, &imin)};
  if (CHECK_OK(run_op("Clip", 13, 2, in_i8, 0, NULL, &y))) {
    check_i64s(&y, I8, 4, DIMS(-6, -5, 5, 127));
    kiln_array_free(A(), &y);
  }
  /* Errors: int input before opset 11, bound dtype or shape mismatch. */
  CHECK_ERR(run_op("Clip", 6, 1, in_i8, 0, NULL, &y), KILN_UNSUPPORTED, "i8");
  kiln_array_t bad_dt[2] = {in, ARR(I8, 0, NULL, &imin)};
  CHECK_ERR(run_op("Clip", 13, 2, bad_dt, 0, NULL, &y), KILN_INVALID_ARGUMENT,
            "f32 and i8");
  float two[2] = {0, 1};
  kiln_array_t bad_shape[2] = {in, ARR(F32, 1, DIMS(2), two)};
  CHECK_ERR(run_op("Clip", 13, 2, bad_shape, 0, NULL, &y), KILN_INVALID_ARGUMENT,
            "scalar");
}

/* ---- Where / Max / Min / comparisons ------------------------------------ */

static void test_where_broadcast(void) {
  uint8_t c[2] = {1, 0};
  float x[3] = {1, 2, 3}, yv = -1;
  kiln_array_t in[3] = {ARR(BOOL, 2, DIMS(2, 1), c), ARR(F32, 2, DIMS(1, 3), x),
                        ARR(F32, 0, NULL, &yv)};
  kiln_array_t y = {0};
  if (CHECK_OK(run_op("Where", 16, 3, in, 0, NULL, &y))) {
    CHECK(shape_is(&y.shape, 2, DIMS(2, 3)));
    check_f32(&y, 6, FV(1, 2, 3, -1, -1, -1), 0);
    kiln_array_free(A(), &y);
  }
  int64_t xi[2] = {10, 20}, yi[2] = {-10, -20};
  uint8_t c2[4] = {1, 0, 0, 1};
  kiln_array_t in2[3] = {ARR(BOOL, 2, DIMS(2, 2), c2), ARR(I64, 1, DIMS(2), xi),
                         ARR(I64, 2, DIMS(2, 1), yi)};
  if (CHECK_OK(run_op("Where", 16, 3, in2, 0, NULL, &y))) {
    check_i64s(&y, I64, 4, DIMS(10, -10, -20, 20));
    kiln_array_free(A(), &y);
  }
}

static void test_max_min_variadic(void) {
  float a[3] = {1, 5, NAN}, b[1] = {3}, c[2][1] = {{0}, {4}};
  kiln_array_t in[3] = {ARR(F32, 1, DIMS(3), a), ARR(F32, 1, DIMS(1), b),
                        ARR(F32, 2, DIMS(2, 1), c)};
  kiln_array_t y = {0};
  if (CHECK_OK(run_op("Max", 13, 3, in, 0, NULL, &y))) {
    CHECK(shape_is(&y.shape, 2, DIMS(2, 3)));
    check_f32(&y, 6, FV(3, 5, NAN, 4, 5, NAN), 0);
    kiln_array_free(A(), &y);
  }
  if (CHECK_OK(run_op("Min", 13, 3, in, 0, NULL, &y))) {
    check_f32(&y, 6, FV(0, 0, NAN, 1, 3, NAN), 0);
    kiln_array_free(A(), &y);
  }
  /* One input: a copy. */
  if (CHECK_OK(run_op("Max", 13, 1, in, 0, NULL, &y))) {
    check_f32(&y, 3, a, 0);
    kiln_array_free(A(), &y);
  }
  uint8_t u[3] = {0, 200, 7}, v[3] = {255, 100, 7};
  kiln_array_t in2[2] = {ARR(U8, 1, DIMS(3), u), ARR(U8, 1, DIMS(3), v)};
  if (CHECK_OK(run_op("Min", 13, 2, in2, 0, NULL, &y))) {
    check_i64s(&y, U8, 3, DIMS(0, 100, 7));
    kiln_array_free(A(), &y);
  }
}

static void test_compare_and_logic(void) {
  float a[4] = {1, 2, 3, NAN}, b = 2;
  kiln_array_t in[2] = {ARR(F32, 1, DIMS(4), a), ARR(F32, 0, NULL, &b)};
  kiln_array_t y = {0};
  struct {
    const char* op;
    int64_t opset;
    int64_t want[4];
  } cases[] = {
      {"Equal", 19, {0, 1, 0, 0}},       {"Less", 13, {1, 0, 0, 0}},
      {"Greater", 13, {0, 0, 1, 0}},     {"LessOrEqual", 16, {1, 1, 0, 0}},
      {"GreaterOrEqual", 16, {0, 1, 1, 0}},
  };
  for (size_t i = 0; i < sizeof cases / sizeof cases[0]; ++i) {
    if (CHECK_OK(run_op(cases[i].op, cases[i].opset, 2, in, 0, NULL, &y))) {
      check_i64s(&y, BOOL, 4, cases[i].want);
      kiln_array_free(A(), &y);
    }
  }
  uint8_t p[4] = {0, 0, 1, 1}, q[4] = {0, 1, 0, 1};
  kiln_array_t bin[2] = {ARR(BOOL, 1, DIMS(4), p), ARR(BOOL, 1, DIMS(4), q)};
  if (CHECK_OK(run_op("And", 7, 2, bin, 0, NULL, &y))) {
    check_i64s(&y, BOOL, 4, DIMS(0, 0, 0, 1));
    kiln_array_free(A(), &y);
  }
  if (CHECK_OK(run_op("Or", 7, 2, bin, 0, NULL, &y))) {
    check_i64s(&y, BOOL, 4, DIMS(0, 1, 1, 1));
    kiln_array_free(A(), &y);
  }
  if (CHECK_OK(run_op("Equal", 19, 2, bin, 0, NULL, &y))) {
    check_i64s(&y, BOOL, 4, DIMS(1, 0, 0, 1));
    kiln_array_free(A(), &y);
  }
  if (CHECK_OK(run_op("Not", 1, 1, bin, 0, NULL, &y))) {
    check_i64s(&y, BOOL, 4, DIMS(1, 1, 0, 0));
    kiln_array_free(A(), &y);
  }
  int64_t i1[3] = {-1, 0, 1}, i2[3] = {0, 0, 0};
  kiln_array_t iin[2] = {ARR(I64, 1, DIMS(3), i1), ARR(I64, 1, DIMS(3), i2)};
  if (CHECK_OK(run_op("Less", 13, 2, iin, 0, NULL, &y))) {
    check_i64s(&y, BOOL, 3, DIMS(1, 0, 0));
    kiln_array_free(A(), &y);
  }
}

/* ---- activations ------------------------------------------------------ */

static double ref_sigmoid(double v) { return 1.0 / (1.0 + exp(-v)); }

static void test_activations(void) {
  float x[6] = {-100, -2, -0.5f, 0, 0.5f, 100};
  kiln_array_t in = ARR(F32, 1, DIMS(6), x);
  kiln_array_t y = {0};
  float want[6];

  if (CHECK_OK(run_op("Relu", 14, 1, &in, 0, NULL, &y))) {
    check_f32(&y, 6, FV(0, 0, 0, 0, 0.5f, 100), 0);
    kiln_array_free(A(), &y);
  }
  kiln_attr_t alpha = kiln_attr_make_float("alpha", 0.1f);
  if (CHECK_OK(run_op("LeakyRelu", 16, 1, &in, 1, &alpha, &y))) {
    check_f32(&y, 6, FV(-10, -0.2f, -0.05f, 0, 0.5f, 100), 1e-6);
    kiln_array_free(A(), &y);
  }
  if (CHECK_OK(run_op("LeakyRelu", 16, 1, &in, 0, NULL, &y))) {
    check_f32(&y, 6, FV(-1, -0.02f, -0.005f, 0, 0.5f, 100), 1e-6);
    kiln_array_free(A(), &y);
  }
  for (int i = 0; i < 6; ++i) want[i] = (float)ref_sigmoid(x[i]);
  if (CHECK_OK(run_op("Sigmoid", 13, 1, &in, 0, NULL, &y))) {
    check_f32(&y, 6, want, 1e-7);
    kiln_array_free(A(), &y);
  }
  for (int i = 0; i < 6; ++i) want[i] = (float)tanh(x[i]);
  if (CHECK_OK(run_op("Tanh", 13, 1, &in, 0, NULL, &y))) {
    check_f32(&y, 6, want, 1e-7);
    kiln_array_free(A(), &y);
  }
  for (int i = 0; i < 6; ++i) want[i] = (float)fmax(0, fmin(1, 0.2 * x[i] + 0.5));
  if (CHECK_OK(run_op("HardSigmoid", 22, 1, &in, 0, NULL, &y))) {
    check_f32(&y, 6, want, 1e-7);
    kiln_array_free(A(), &y);
  }
  for (int i = 0; i < 6; ++i) want[i] = (float)(x[i] * fmax(0, fmin(1, x[i] / 6.0 + 0.5)));
  if (CHECK_OK(run_op("HardSwish", 22, 1, &in, 0, NULL, &y))) {
    check_f32(&y, 6, want, 1e-6);
    kiln_array_free(A(), &y);
  }
  for (int i = 0; i < 6; ++i) want[i] = (float)(0.5 * x[i] * (1 + erf(x[i] / sqrt(2.0))));
  if (CHECK_OK(run_op("Gelu", 20, 1, &in, 0, NULL, &y))) {
    check_f32(&y, 6, want, 1e-6);
    kiln_array_free(A(), &y);
  }
  for (int i = 0; i < 6; ++i) {
    double v = x[i];
    want[i] = (float)(0.5 * v * (1 + tanh(sqrt(2 / M_PI) * (v + 0.044715 * v * v * v))));
  }
  kiln_attr_t approx = kiln_attr_make_string("approximate", "tanh");
  if (CHECK_OK(run_op("Gelu", 20, 1, &in, 1, &approx, &y))) {
    check_f32(&y, 6, want, 1e-5);
    kiln_array_free(A(), &y);
  }
  kiln_attr_t bad = kiln_attr_make_string("approximate", "fast");
  CHECK_ERR(run_op("Gelu", 20, 1, &in, 1, &bad, &y), KILN_INVALID_ARGUMENT, "fast");
  kiln_attr_t wrong_type = kiln_attr_make_string("alpha", "big");
  CHECK_ERR(run_op("LeakyRelu", 16, 1, &in, 1, &wrong_type, &y), -1, "alpha");
}

static void test_math(void) {
  float x[4] = {0.25f, 1, 4, 9};
  kiln_array_t in = ARR(F32, 1, DIMS(4), x);
  kiln_array_t y = {0};
  struct {
    const char* op;
    double (*f)(double);
  } cases[] = {{"Sqrt", sqrt}, {"Exp", exp}, {"Log", log}, {"Erf", erf}};
  for (size_t c = 0; c < sizeof cases / sizeof cases[0]; ++c) {
    float want[4];
    for (int i = 0; i < 4; ++i) want[i] = (float)cases[c].f(x[i]);
    if (CHECK_OK(run_op(cases[c].op, 13, 1, &in, 0, NULL, &y))) {
      for (int i = 0; i < 4; ++i)
        CHECK_MSG(fabs(((float*)y.data)[i] - want[i]) <= 1e-6 * fabs(want[i]) + 1e-7,
                  "%s(%g) = %g, want %g", cases[c].op, x[i], ((float*)y.data)[i], want[i]);
      kiln_array_free(A(), &y);
    }
  }
  if (CHECK_OK(run_op("Reciprocal", 13, 1, &in, 0, NULL, &y))) {
    check_f32(&y, 4, FV(4, 1, 0.25f, 1.0f / 9), 1e-7);
    kiln_array_free(A(), &y);
  }
  if (CHECK_OK(run_op("Neg", 13, 1, &in, 0, NULL, &y))) {
    check_f32(&y, 4, FV(-0.25f, -1, -4, -9), 0);
    kiln_array_free(A(), &y);
  }
  float n[2] = {-2, 3};
  kiln_array_t nin = ARR(F32, 1, DIMS(2), n);
  if (CHECK_OK(run_op("Abs", 13, 1, &nin, 0, NULL, &y))) {
    check_f32(&y, 2, FV(2, 3), 0);
    kiln_array_free(A(), &y);
  }
}

/* Integer variants the ONNX node tests leave out (they check floats only,
 * or only some widths), with the values ONNX / numpy give. */
static void test_int_math_ops(void) {
  kiln_array_t y = {0};
  int8_t s[5] = {-128, -3, 0, 5, 127};
  kiln_array_t sin_ = ARR(I8, 1, DIMS(5), s);
  if (CHECK_OK(run_op("Sign", 13, 1, &sin_, 0, NULL, &y))) {
    check_i64s(&y, I8, 5, DIMS(-1, -1, 0, 1, 1));
    kiln_array_free(A(), &y);
  }
  /* Mod: fmod 0 takes the divisor's sign (numpy %), fmod 1 the dividend's
   * (C %); the most negative value % -1 is 0, not a trap. */
  int64_t a[5] = {INT64_MIN, 7, -7, 7, -7}, b[5] = {-1, 3, 3, -3, -3};
  kiln_array_t mi[2] = {ARR(I64, 1, DIMS(5), a), ARR(I64, 1, DIMS(5), b)};
  kiln_attr_t fm0 = kiln_attr_make_int("fmod", 0), fm1 = kiln_attr_make_int("fmod", 1);
  if (CHECK_OK(run_op("Mod", 13, 2, mi, 1, &fm0, &y))) {
    check_i64s(&y, I64, 5, DIMS(0, 1, 2, -2, -1));
    kiln_array_free(A(), &y);
  }
  if (CHECK_OK(run_op("Mod", 13, 2, mi, 1, &fm1, &y))) {
    check_i64s(&y, I64, 5, DIMS(0, 1, -1, 1, -1));
    kiln_array_free(A(), &y);
  }
  b[2] = 0;
  CHECK_ERR(run_op("Mod", 13, 2, mi, 1, &fm0, &y), KILN_INVALID_ARGUMENT, "Mod: integer division by zero");
  float fa[2] = {-7.5f, 7.5f}, fb[2] = {2, -2};
  kiln_array_t fi[2] = {ARR(F32, 1, DIMS(2), fa), ARR(F32, 1, DIMS(2), fb)};
  if (CHECK_OK(run_op("Mod", 13, 2, fi, 1, &fm1, &y))) {
    check_f32(&y, 2, FV(-1.5f, 1.5f), 0);
    kiln_array_free(A(), &y);
  }
  CHECK_ERR(run_op("Mod", 13, 2, fi, 1, &fm0, &y), KILN_INVALID_ARGUMENT, "fmod = 1");
  /* BitShift: shifts of the width or more give 0. */
  uint8_t x[4] = {0x81, 0x81, 0x81, 0xff}, k[4] = {1, 7, 8, 200};
  kiln_array_t bi[2] = {ARR(U8, 1, DIMS(4), x), ARR(U8, 1, DIMS(4), k)};
  kiln_attr_t left = kiln_attr_make_string("direction", "LEFT");
  kiln_attr_t right = kiln_attr_make_string("direction", "RIGHT");
  if (CHECK_OK(run_op("BitShift", 11, 2, bi, 1, &left, &y))) {
    check_i64s(&y, U8, 4, DIMS(0x02, 0x80, 0, 0));
    kiln_array_free(A(), &y);
  }
  if (CHECK_OK(run_op("BitShift", 11, 2, bi, 1, &right, &y))) {
    check_i64s(&y, U8, 4, DIMS(0x40, 0x01, 0, 0));
    kiln_array_free(A(), &y);
  }
  /* IsInf's flags pick the signs; IsNaN is bool too. */
  float v[4] = {INFINITY, -INFINITY, NAN, 1};
  kiln_array_t vi = ARR(F32, 1, DIMS(4), v);
  kiln_attr_t neg_only[2] = {kiln_attr_make_int("detect_positive", 0),
                             kiln_attr_make_int("detect_negative", 1)};
  if (CHECK_OK(run_op("IsInf", 20, 1, &vi, 2, neg_only, &y))) {
    check_i64s(&y, BOOL, 4, DIMS(0, 1, 0, 0));
    kiln_array_free(A(), &y);
  }
  if (CHECK_OK(run_op("IsNaN", 20, 1, &vi, 0, NULL, &y))) {
    check_i64s(&y, BOOL, 4, DIMS(0, 0, 1, 0));
    kiln_array_free(A(), &y);
  }
  /* CastLike takes the dtype of its second input. */
  int32_t like[1] = {0};
  float c[2] = {-2.7f, 3.9f};
  kiln_array_t ci[2] = {ARR(F32, 1, DIMS(2), c), ARR(I32, 1, DIMS(1), like)};
  if (CHECK_OK(run_op("CastLike", 19, 2, ci, 0, NULL, &y))) {
    check_i64s(&y, I32, 2, DIMS(-2, 3));
    kiln_array_free(A(), &y);
  }
}

static void test_prelu(void) {
  float x[12], slope[3] = {0.1f, 0.2f, 0.3f};
  for (int i = 0; i < 12; ++i) x[i] = (float)(i - 6);
  kiln_array_t in[2] = {ARR(F32, 4, DIMS(1, 3, 2, 2), x), ARR(F32, 3, DIMS(3, 1, 1), slope)};
  kiln_array_t y = {0};
  if (CHECK_OK(run_op("PRelu", 16, 2, in, 0, NULL, &y))) {
    CHECK(shape_is(&y.shape, 4, DIMS(1, 3, 2, 2)));
    float want[12];
    for (int i = 0; i < 12; ++i) want[i] = x[i] < 0 ? x[i] * slope[i / 4] : x[i];
    check_f32(&y, 12, want, 1e-7);
    kiln_array_free(A(), &y);
  }
  /* Opset 6 is channel-wise: a [C] slope applies along dim 1. From opset 7
   * the same slope broadcasts numpy-style, against the last dim. */
  float x2[6] = {-1, -1, -1, -1, -1, -1}, s2[2] = {0.5f, 2.0f};
  kiln_array_t in2[2] = {ARR(F32, 3, DIMS(1, 2, 3), x2), ARR(F32, 1, DIMS(2), s2)};
  if (CHECK_OK(run_op("PRelu", 6, 2, in2, 0, NULL, &y))) {
    check_f32(&y, 6, FV(-0.5f, -0.5f, -0.5f, -2, -2, -2), 0);
    kiln_array_free(A(), &y);
  }
  CHECK_ERR(run_op("PRelu", 7, 2, in2, 0, NULL, &y), KILN_INVALID_ARGUMENT,
            "slope of shape [2] does not broadcast to X of shape [1,2,3]");
}

/* ---- Identity / Dropout ----------------------------------------------- */

static void test_identity_dropout(void) {
  int64_t v[3] = {1, -2, 3};
  kiln_array_t in = ARR(I64, 1, DIMS(3), v);
  kiln_array_t y = {0};
  if (CHECK_OK(run_op("Identity", 21, 1, &in, 0, NULL, &y))) {
    check_i64s(&y, I64, 3, v);
    kiln_array_free(A(), &y);
  }
  float x[3] = {1, 2, 3}, ratio = 0.5f;
  uint8_t yes = 1, no = 0;
  kiln_array_t xin = ARR(F32, 1, DIMS(3), x);
  /* Opset 13 with the mask output: Y = X, mask all true. */
  kiln_array_t outs[2] = {{0}, {0}};
  kiln_array_t din[2] = {xin, ARR(F32, 0, NULL, &ratio)};
  spec_t sp = {"Dropout", 13, 2, din, NULL, 0, NULL, 2};
  if (CHECK_OK(run_spec(&sp, outs))) {
    check_f32(&outs[0], 3, x, 0);
    check_i64s(&outs[1], BOOL, 3, DIMS(1, 1, 1));
    kiln_array_free(A(), &outs[0]);
    kiln_array_free(A(), &outs[1]);
  }
  /* Opset 7: ratio attribute, mask of the input's dtype. */
  kiln_attr_t r = kiln_attr_make_float("ratio", 0.2f);
  spec_t sp7 = {"Dropout", 7, 1, &xin, NULL, 1, &r, 2};
  if (CHECK_OK(run_spec(&sp7, outs))) {
    check_f32(&outs[0], 3, x, 0);
    check_f32(&outs[1], 3, FV(1, 1, 1), 0);
    kiln_array_free(A(), &outs[0]);
    kiln_array_free(A(), &outs[1]);
  }
  /* training_mode: a constant false is inference; constant true with ratio
   * 0.5 or a non-constant flag is not supported. */
  kiln_array_t tin[3] = {xin, ARR(F32, 0, NULL, &ratio), ARR(BOOL, 0, NULL, &no)};
  bool consts[3] = {false, true, true};
  spec_t spt = {"Dropout", 13, 3, tin, consts, 0, NULL, 1};
  if (CHECK_OK(run_spec(&spt, outs))) {
    check_f32(&outs[0], 3, x, 0);
    kiln_array_free(A(), &outs[0]);
  }
  tin[2] = ARR(BOOL, 0, NULL, &yes);
  CHECK_ERR(run_spec(&spt, outs), KILN_UNSUPPORTED, "training");
  bool consts2[3] = {false, true, false};
  spec_t spt2 = {"Dropout", 13, 3, tin, consts2, 0, NULL, 1};
  CHECK_ERR(run_spec(&spt2, outs), KILN_UNSUPPORTED, "training_mode");
  /* Training mode with ratio 0 is the identity. */
  float zero = 0.0f;
  tin[1] = ARR(F32, 0, NULL, &zero);
  if (CHECK_OK(run_spec(&spt, outs))) {
    check_f32(&outs[0], 3, x, 0);
    kiln_array_free(A(), &outs[0]);
  }
}

/* ---- load-time folding ------------------------------------------------ */

static void test_constant_folding(void) {
  int64_t a[2] = {4, 6}, b[1] = {2};
  kiln_array_t in[2] = {ARR(I64, 1, DIMS(2), a), ARR(I64, 1, DIMS(1), b)};
  bool consts[2] = {true, true};
  spec_t sp = {"Div", 14, 2, in, consts, 0, NULL, 1};
  kiln_graph_t* g = NULL;
  if (!CHECK_OK(build(&sp, &g))) return;
  const kiln_tensor_t* y = &g->tensors[kiln_graph_find_tensor(g, "y0")];
  CHECK(y->dtype == I64 && shape_is(&y->shape, 1, DIMS(2)));
  CHECK(y->flags & KILN_TENSOR_CONST);
  if ((y->flags & KILN_TENSOR_CONST) && y->value.data) check_i64s(&y->value, I64, 2, DIMS(2, 3));
  kiln_graph_destroy(g);
  /* A constant zero divisor is caught at load time. */
  int64_t z[1] = {0};
  in[1] = ARR(I64, 1, DIMS(1), z);
  CHECK_ERR(build(&sp, &g), KILN_INVALID_ARGUMENT, "division by zero");
}

int main(void) {
  RUN(test_add_broadcast_231_4);
  RUN(test_broadcast_patterns);
  RUN(test_broadcast_symbolic);
  RUN(test_broadcast_error_names_shapes);
  RUN(test_dtype_mismatch);
  RUN(test_unsupported_dtypes);
  RUN(test_int_div);
  RUN(test_int_wraps);
  RUN(test_pow);
  RUN(test_f16_add);
  RUN(test_cast_f32_f16_f32);
  RUN(test_cast_ints_and_bool);
  RUN(test_cast_errors);
  RUN(test_f64_and_wide_ints);
  RUN(test_clip_opsets);
  RUN(test_where_broadcast);
  RUN(test_max_min_variadic);
  RUN(test_compare_and_logic);
  RUN(test_activations);
  RUN(test_math);
  RUN(test_int_math_ops);
  RUN(test_prelu);
  RUN(test_identity_dropout);
  RUN(test_constant_folding);
  return kiln_test_finish();
}
