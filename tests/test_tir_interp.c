/* Tests for the tensor-IR interpreter (ir/tir_interp.c): every expression
 * and statement kind on small kernels with known results, the dtype rules
 * (rounding to f16, integer wrap, saturating float -> int casts, floor
 * division), the select modes, scoped buffers that start poisoned, and the
 * errors: out-of-bounds loads and stores name the buffer, the dimension and
 * the index; unbound variables, rebound loops, division by zero, missing
 * memory and dtype mismatches are statuses, not crashes. */
#include <math.h>
#include <stdint.h>
#include <string.h>

#include "ir/tir.h"
#include "ir/tir_interp.h"
#include "testing.h"

static tir_ctx_t C;

#define I(v) tir_int(&C, (v))
#define F(t, v) tir_const(&C, (t), (v))
#define R(v) tir_ref(&C, (v))
#define BIN(op, a, b) tir_bin(&C, (op), (a), (b))
#define IDX(...) ((const tir_expr_t* const[]){__VA_ARGS__})
#define SHP(...) ((const int64_t[]){__VA_ARGS__})
#define LD(b, ...) tir_load(&C, (b), IDX(__VA_ARGS__))
#define ST(b, v, ...) tir_store(&C, (b), IDX(__VA_ARGS__), (v))
#define FOR(v, n, body) tir_for(&C, (v), (n), TIR_LOOP_SERIAL, (body))
#define SEQ(...)                                                                   \
  tir_seq(&C, (int32_t)(sizeof((const tir_stmt_t*[]){__VA_ARGS__}) / sizeof(void*)), \
          (const tir_stmt_t* const[]){__VA_ARGS__})

static tir_buffer_t* gbuf(const char* name, kiln_dtype_t t, int32_t rank, const int64_t* shape) {
  return tir_buffer(&C, name, t, rank, shape, TIR_SCOPE_GLOBAL);
}

static tir_func_t* func(const char* name, int32_t n, const tir_buffer_t* const* params,
                        const tir_stmt_t* body) {
  return tir_func(&C, name, n, params, body);
}

static kiln_status_t run(const tir_func_t* f, void** args) {
  return tir_interp_run(f, args, NULL, kiln_allocator_system());
}

/* Value of a scalar expression without variables. */
static tir_value_t val(const tir_expr_t* e) {
  tir_value_t v = {0, 0};
  CHECK_OK(tir_interp_eval_expr(e, 0, NULL, NULL, &v));
  return v;
}

/* ---- expressions --------------------------------------------------------- */

static void test_immediates_and_arithmetic(void) {
  CHECK(val(I(7)).i == 7);
  /* Immediates are values of their dtype: 0.1 as f32 / f16. */
  CHECK(val(F(KILN_DTYPE_F32, 0.1)).f == (double)0.1f);
  CHECK(val(F(KILN_DTYPE_F16, 0.1)).f == (double)kiln_f16_to_f32(kiln_f32_to_f16(0.1f)));
  CHECK(val(BIN(TIR_ADD, I(3), I(4))).i == 7);
  CHECK(val(BIN(TIR_SUB, I(3), I(4))).i == -1);
  CHECK(val(BIN(TIR_MUL, I(-3), I(4))).i == -12);
  CHECK(val(BIN(TIR_DIV, I(-7), I(2))).i == -3);        /* truncating */
  CHECK(val(BIN(TIR_FLOORDIV, I(-7), I(2))).i == -4);   /* flooring */
  CHECK(val(BIN(TIR_FLOORMOD, I(-7), I(2))).i == 1);
  CHECK(val(BIN(TIR_FLOORMOD, I(7), I(-2))).i == -1);
  CHECK(val(BIN(TIR_FLOORDIV, I(INT64_MIN), I(-1))).i == INT64_MIN); /* wraps, no trap */
  CHECK(val(BIN(TIR_MIN, I(2), I(-5))).i == -5);
  CHECK(val(BIN(TIR_MAX, I(2), I(-5))).i == 2);
  const tir_expr_t* f3 = F(KILN_DTYPE_F32, 3);
  const tir_expr_t* f2 = F(KILN_DTYPE_F32, 2);
  CHECK(val(BIN(TIR_DIV, f3, f2)).f == 1.5);
  CHECK(isnan(val(BIN(TIR_MIN, f3, F(KILN_DTYPE_F32, NAN))).f)); /* NaN propagates */
  CHECK(isnan(val(BIN(TIR_MAX, F(KILN_DTYPE_F32, NAN), f3)).f));
  /* f32 arithmetic rounds to float, f16 to half. */
  CHECK(val(BIN(TIR_ADD, F(KILN_DTYPE_F32, 1), F(KILN_DTYPE_F32, 1e-8))).f == 1.0);
  CHECK(val(BIN(TIR_ADD, F(KILN_DTYPE_F16, 1), F(KILN_DTYPE_F16, 1e-4))).f == 1.0);
  /* Integer results wrap to their dtype. */
  const tir_expr_t* big = tir_const(&C, KILN_DTYPE_I32, 2147483647.0);
  CHECK(val(BIN(TIR_ADD, big, tir_const(&C, KILN_DTYPE_I32, 1))).i == INT32_MIN);
  const tir_expr_t* i8 = tir_const(&C, KILN_DTYPE_I8, 100);
  CHECK(val(BIN(TIR_ADD, i8, i8)).i == -56);
  /* Bitwise ops work on the bits: negative values and u64 patterns too. */
  CHECK(val(BIN(TIR_BAND, I(12), I(10))).i == 8);
  CHECK(val(BIN(TIR_BOR, I(12), I(10))).i == 14);
  CHECK(val(BIN(TIR_BXOR, I(12), I(10))).i == 6);
  CHECK(val(BIN(TIR_BAND, I(-1), I(INT64_MIN))).i == INT64_MIN);
  CHECK(val(BIN(TIR_BXOR, tir_const(&C, KILN_DTYPE_I8, -100), tir_const(&C, KILN_DTYPE_I8, -1))).i == 99);
  CHECK(val(BIN(TIR_BXOR, tir_const(&C, KILN_DTYPE_U8, 5), tir_const(&C, KILN_DTYPE_U8, 255))).i == 250);
  const tir_expr_t* u64 = tir_const(&C, KILN_DTYPE_U64, -1.0); /* all ones */
  CHECK(val(BIN(TIR_BXOR, u64, tir_const(&C, KILN_DTYPE_U64, 1))).i == -2);
  CHECK(BIN(TIR_BOR, i8, i8)->dtype == KILN_DTYPE_I8);
}

static void test_comparisons_logic_select(void) {
  static const tir_binop_t ops[6] = {TIR_EQ, TIR_NE, TIR_LT, TIR_LE, TIR_GT, TIR_GE};
  static const int64_t want_int[6] = {0, 1, 1, 1, 0, 0}; /* 2 op 3 */
  for (int k = 0; k < 6; ++k) {
    CHECK(val(BIN(ops[k], I(2), I(3))).i == want_int[k]);
    CHECK(val(BIN(ops[k], F(KILN_DTYPE_F32, 2), F(KILN_DTYPE_F32, 3))).i == want_int[k]);
    CHECK(BIN(ops[k], I(2), I(3))->dtype == KILN_DTYPE_BOOL);
  }
  const tir_expr_t* t = BIN(TIR_LT, I(1), I(2));
  const tir_expr_t* f = BIN(TIR_GT, I(1), I(2));
  CHECK(val(BIN(TIR_AND, t, f)).i == 0);
  CHECK(val(BIN(TIR_OR, t, f)).i == 1);
  CHECK(val(tir_call(&C, TIR_NOT, 1, f, NULL, NULL)).i == 1);
  CHECK(val(tir_select(&C, t, I(10), I(20))).i == 10);
  CHECK(val(tir_select(&C, f, I(10), I(20))).i == 20);
  /* Only the chosen arm runs by default: a division by zero in the other
   * one is not reached. */
  CHECK(val(tir_select(&C, t, I(1), BIN(TIR_DIV, I(1), I(0)))).i == 1);
}

static void test_casts_and_intrinsics(void) {
  const tir_expr_t* x = F(KILN_DTYPE_F32, 2.75);
  CHECK(val(tir_cast(&C, KILN_DTYPE_I32, x)).i == 2);
  CHECK(val(tir_cast(&C, KILN_DTYPE_I32, F(KILN_DTYPE_F32, -2.75))).i == -2);
  CHECK(val(tir_cast(&C, KILN_DTYPE_I64, F(KILN_DTYPE_F32, 1e30))).i == INT64_MAX);
  CHECK(val(tir_cast(&C, KILN_DTYPE_I64, F(KILN_DTYPE_F32, NAN))).i == 0);
  CHECK(val(tir_cast(&C, KILN_DTYPE_U8, I(300))).i == 44);
  CHECK(val(tir_cast(&C, KILN_DTYPE_I8, I(200))).i == -56);
  CHECK(val(tir_cast(&C, KILN_DTYPE_BOOL, F(KILN_DTYPE_F32, 0.5))).i == 1);
  CHECK(val(tir_cast(&C, KILN_DTYPE_F32, I(3))).f == 3.0);
  CHECK(val(tir_cast(&C, KILN_DTYPE_F16, F(KILN_DTYPE_F32, 0.1))).f ==
        (double)kiln_f16_to_f32(kiln_f32_to_f16(0.1f)));
  /* volatile: the expected values come from libm at run time, as the
   * interpreter's do (GCC would fold them correctly rounded, and libm's
   * asinhf is not always). */
  volatile float a_rt = 0.5f;
  const float a = a_rt;
  const tir_expr_t* e = F(KILN_DTYPE_F32, a);
#define CALL1(fn) val(tir_call(&C, (fn), 1, e, NULL, NULL)).f
  CHECK(CALL1(TIR_EXP) == (double)expf(a));
  CHECK(CALL1(TIR_LOG) == (double)logf(a));
  CHECK(CALL1(TIR_SQRT) == (double)sqrtf(a));
  CHECK(CALL1(TIR_RSQRT) == (double)(1.0f / sqrtf(a)));
  CHECK(CALL1(TIR_TANH) == (double)tanhf(a));
  CHECK(CALL1(TIR_ERF) == (double)erff(a));
  CHECK(CALL1(TIR_SIGMOID) == (double)(1.0f / (1.0f + expf(-a))));
  CHECK(CALL1(TIR_NEG) == -0.5);
  CHECK(CALL1(TIR_SIN) == (double)sinf(a));
  CHECK(CALL1(TIR_COS) == (double)cosf(a));
  CHECK(CALL1(TIR_TAN) == (double)tanf(a));
  CHECK(CALL1(TIR_ASIN) == (double)asinf(a));
  CHECK(CALL1(TIR_ACOS) == (double)acosf(a));
  CHECK(CALL1(TIR_ATAN) == (double)atanf(a));
  CHECK(CALL1(TIR_SINH) == (double)sinhf(a));
  CHECK(CALL1(TIR_COSH) == (double)coshf(a));
  CHECK(CALL1(TIR_ASINH) == (double)asinhf(a));
  CHECK(CALL1(TIR_ATANH) == (double)atanhf(a));
#undef CALL1
  CHECK(val(tir_call(&C, TIR_ACOSH, 1, F(KILN_DTYPE_F32, 2.5), NULL, NULL)).f == (double)acoshf(a * 5.0f));
  /* fmod keeps the dividend's sign; f16 results round to f16. */
  CHECK(val(tir_call(&C, TIR_FMOD, 2, F(KILN_DTYPE_F32, -7.5), F(KILN_DTYPE_F32, 2), NULL)).f == -1.5);
  CHECK(val(tir_call(&C, TIR_FMOD, 2, F(KILN_DTYPE_F32, 7.5), F(KILN_DTYPE_F32, -2), NULL)).f == 1.5);
  CHECK(val(tir_call(&C, TIR_SIN, 1, F(KILN_DTYPE_F16, 1), NULL, NULL)).f ==
        (double)kiln_f16_to_f32(kiln_f32_to_f16(sinf(a * 2.0f))));
  CHECK(val(tir_call(&C, TIR_FABS, 1, F(KILN_DTYPE_F32, -1.25), NULL, NULL)).f == 1.25);
  CHECK(val(tir_call(&C, TIR_FABS, 1, I(-4), NULL, NULL)).i == 4);
  /* the int8 GEMM's intrinsics: acc + lo*lo + hi*hi of signed i16 halves
   * (the sum wraps like i32), and two signed bytes widened to i16 halves */
#define I32(v) F(KILN_DTYPE_I32, (double)(int32_t)(v))
  CHECK(val(tir_call(&C, TIR_DOT2_I16, 3, I32(5), I32(0x0002fffd), I32(0x00070003))).i == 5 - 9 + 14);
  CHECK(val(tir_call(&C, TIR_DOT2_I16, 3, I32(0), I32(0x80008000u), I32(0x80008000u))).i == INT32_MIN);
  CHECK(val(tir_call(&C, TIR_DOT2_I16, 3, I32(INT32_MAX), I32(0x00000001), I32(0x00000001))).i == INT32_MIN);
  /* dot4_u8i8: bytes of a as u8, of b as s8 (255 * -128 four times, no saturation) */
  CHECK(val(tir_call(&C, TIR_DOT4_U8I8, 3, I32(7), I32(0x04030201), I32(0xff02fd01u))).i == 7 + 1 - 6 + 6 - 4);
  CHECK(val(tir_call(&C, TIR_DOT4_U8I8, 3, I32(0), I32(0xffffffffu), I32(0x80808080u))).i == -4 * 255 * 128);
  CHECK(val(tir_call(&C, TIR_WIDEN_I8X2, 1, F(KILN_DTYPE_I16, (int16_t)0x80ff), NULL, NULL)).i ==
        (int32_t)0xff80ffffu);
  CHECK(val(tir_call(&C, TIR_WIDEN_I8X2, 1, F(KILN_DTYPE_I16, 0x7f01), NULL, NULL)).i == 0x007f0001);
  CHECK(tir_call(&C, TIR_WIDEN_I8X2, 1, F(KILN_DTYPE_I16, 0), NULL, NULL)->dtype == KILN_DTYPE_I32);
#undef I32
  CHECK(val(tir_call(&C, TIR_NEG, 1, I(4), NULL, NULL)).i == -4);
  CHECK(val(tir_call(&C, TIR_FLOOR, 1, F(KILN_DTYPE_F32, -1.5), NULL, NULL)).f == -2.0);
  CHECK(val(tir_call(&C, TIR_CEIL, 1, F(KILN_DTYPE_F32, -1.5), NULL, NULL)).f == -1.0);
  CHECK(val(tir_call(&C, TIR_ROUND_EVEN, 1, F(KILN_DTYPE_F32, 2.5), NULL, NULL)).f == 2.0);
  CHECK(val(tir_call(&C, TIR_POW, 2, F(KILN_DTYPE_F32, 2), F(KILN_DTYPE_F32, 10), NULL)).f ==
        1024.0);
  CHECK(val(tir_call(&C, TIR_FMA, 3, F(KILN_DTYPE_F32, 2), F(KILN_DTYPE_F32, 3),
                     F(KILN_DTYPE_F32, 4)))
            .f == 10.0);
}

static void test_variables(void) {
  tir_var_t* x = tir_var(&C, "x");
  tir_var_t* y = tir_var(&C, "y");
  const tir_var_t* vars[2] = {x, y};
  const int64_t values[2] = {6, -2};
  tir_value_t v = {0, 0};
  CHECK_OK(tir_interp_eval_expr(BIN(TIR_MUL, R(x), R(y)), 2, vars, values, &v));
  CHECK(v.i == -12);
  CHECK_ERR(tir_interp_eval_expr(R(y), 1, vars, values, &v), KILN_INVALID_ARGUMENT,
            "variable 'y'");
  /* No buffers in a bare expression. */
  tir_buffer_t* A = gbuf("A", KILN_DTYPE_F32, 1, SHP(4));
  CHECK_ERR(tir_interp_eval_expr(LD(A, I(0)), 0, NULL, NULL, &v), KILN_INVALID_ARGUMENT,
            "buffer 'A'");
  CHECK_ERR(tir_interp_eval_expr(BIN(TIR_FLOORMOD, I(1), I(0)), 0, NULL, NULL, &v),
            KILN_INVALID_ARGUMENT, "by zero");
}

/* ---- statements ---------------------------------------------------------- */

/* Y[i, j] = X[j, i] * 2 + i for a 2x3 Y: loops, loads, stores. */
static void test_loops_loads_stores(void) {
  tir_buffer_t* X = gbuf("X", KILN_DTYPE_F32, 2, SHP(3, 2));
  tir_buffer_t* Y = gbuf("Y", KILN_DTYPE_F32, 2, SHP(2, 3));
  tir_var_t* i = tir_var(&C, "i");
  tir_var_t* j = tir_var(&C, "j");
  const tir_expr_t* v =
      BIN(TIR_ADD, BIN(TIR_MUL, LD(X, R(j), R(i)), F(KILN_DTYPE_F32, 2)),
          tir_cast(&C, KILN_DTYPE_F32, R(i)));
  const tir_stmt_t* body =
      FOR(i, 2, tir_for(&C, j, 3, TIR_LOOP_VECTORIZED, ST(Y, v, R(i), R(j))));
  tir_func_t* f = func("transpose", 2, (const tir_buffer_t* const[]){X, Y}, body);
  float x[6] = {0, 1, 2, 3, 4, 5}, y[6] = {0};
  CHECK_OK(run(f, (void*[]){x, y}));
  for (int a = 0; a < 2; ++a)
    for (int b = 0; b < 3; ++b)
      CHECK_MSG(y[a * 3 + b] == x[b * 2 + a] * 2 + (float)a, "Y[%d,%d] = %g", a, b,
                (double)y[a * 3 + b]);
}

/* if / else, sequences, barriers, bound loops and a scoped accumulator:
 * S[g] = sum of X[g, t] over t where X > 0, computed per work-group. */
static void test_if_seq_alloc_barrier_bound(void) {
  tir_buffer_t* X = gbuf("X", KILN_DTYPE_I32, 2, SHP(2, 4));
  tir_buffer_t* S = gbuf("S", KILN_DTYPE_I32, 1, SHP(2));
  tir_buffer_t* N = gbuf("N", KILN_DTYPE_I32, 1, SHP(2));
  tir_buffer_t* acc = tir_buffer(&C, "acc", KILN_DTYPE_I32, 1, SHP(1), TIR_SCOPE_PRIVATE);
  tir_var_t* g = tir_var(&C, "g");
  tir_var_t* t = tir_var(&C, "t");
  const tir_expr_t* x = LD(X, R(g), R(t));
  const tir_expr_t* zero = tir_const(&C, KILN_DTYPE_I32, 0);
  const tir_stmt_t* add = ST(acc, BIN(TIR_ADD, LD(acc, I(0)), x), I(0));
  const tir_stmt_t* count = ST(N, BIN(TIR_ADD, LD(N, R(g)), tir_const(&C, KILN_DTYPE_I32, 1)),
                               R(g));
  const tir_stmt_t* inner = FOR(t, 4, tir_if(&C, BIN(TIR_GT, x, zero), add, count));
  const tir_stmt_t* group =
      tir_alloc(&C, acc,
                SEQ(ST(acc, zero, I(0)), ST(N, zero, R(g)), inner, tir_barrier(&C),
                    ST(S, LD(acc, I(0)), R(g))));
  tir_func_t* f = func("sums", 3, (const tir_buffer_t* const[]){X, S, N},
                       tir_for_bound(&C, g, 2, TIR_BLOCK_X, group));
  int32_t xs[8] = {1, -2, 3, 4, 0, 5, -6, 7}, s[2] = {0}, n[2] = {0};
  CHECK_OK(run(f, (void*[]){xs, s, n}));
  CHECK(s[0] == 8 && s[1] == 12);
  CHECK(n[0] == 1 && n[1] == 2); /* the else branch counted the rest */
}

/* f16 and u8 / bool buffers: stores round and wrap to the buffer dtype. */
static void test_buffer_dtypes(void) {
  tir_buffer_t* H = gbuf("H", KILN_DTYPE_F16, 1, SHP(1));
  tir_buffer_t* U = gbuf("U", KILN_DTYPE_U8, 1, SHP(1));
  tir_buffer_t* B = gbuf("B", KILN_DTYPE_BOOL, 1, SHP(1));
  tir_buffer_t* L = gbuf("L", KILN_DTYPE_I64, 1, SHP(1));
  const tir_stmt_t* body =
      SEQ(ST(H, F(KILN_DTYPE_F16, 0.1), I(0)), ST(U, tir_const(&C, KILN_DTYPE_U8, 250), I(0)),
          ST(U, BIN(TIR_ADD, LD(U, I(0)), tir_const(&C, KILN_DTYPE_U8, 10)), I(0)),
          ST(B, BIN(TIR_LT, LD(L, I(0)), I(0)), I(0)));
  tir_func_t* f = func("dtypes", 4, (const tir_buffer_t* const[]){H, U, B, L}, body);
  uint16_t h = 0;
  uint8_t u = 0, b = 7;
  int64_t l = -5;
  CHECK_OK(run(f, (void*[]){&h, &u, &b, &l}));
  CHECK(h == kiln_f32_to_f16(0.1f));
  CHECK(u == 4);
  CHECK(b == 1);
}

/* f64 values stay double (0.1 + 1e-12 is not rounded to f32, exp is
 * libm's double exp); u64 values above INT64_MAX order, divide and convert
 * unsigned; u32 and i16 wrap to their width. */
static void test_wide_dtypes(void) {
  CHECK(val(F(KILN_DTYPE_F64, 0.1 + 1e-12)).f == 0.1 + 1e-12);
  CHECK(val(tir_call(&C, TIR_EXP, 1, F(KILN_DTYPE_F64, 1.0), NULL, NULL)).f == exp(1.0));
  CHECK(val(tir_cast(&C, KILN_DTYPE_F32, F(KILN_DTYPE_F64, 0.1))).f == (double)0.1f);
  tir_buffer_t* U = gbuf("U", KILN_DTYPE_U64, 1, SHP(3));
  tir_buffer_t* D = gbuf("D", KILN_DTYPE_F64, 1, SHP(2));
  tir_buffer_t* W = gbuf("W", KILN_DTYPE_U32, 1, SHP(1));
  tir_buffer_t* S = gbuf("S", KILN_DTYPE_I16, 1, SHP(1));
  tir_buffer_t* B = gbuf("B", KILN_DTYPE_BOOL, 1, SHP(1));
  const tir_expr_t* big = LD(U, I(0));
  const tir_stmt_t* body = SEQ(
      ST(B, BIN(TIR_GT, big, LD(U, I(1))), I(0)),             /* 2^64-1 > 3 unsigned */
      ST(U, BIN(TIR_DIV, big, LD(U, I(1))), I(2)),             /* (2^64-1) / 3 */
      ST(D, tir_cast(&C, KILN_DTYPE_F64, big), I(0)),          /* 1.8446744073709552e19 */
      ST(D, BIN(TIR_ADD, LD(D, I(1)), F(KILN_DTYPE_F64, 1e-12)), I(1)),
      ST(W, BIN(TIR_ADD, LD(W, I(0)), tir_const(&C, KILN_DTYPE_U32, 2)), I(0)),
      ST(S, BIN(TIR_ADD, LD(S, I(0)), tir_const(&C, KILN_DTYPE_I16, 1)), I(0)));
  tir_func_t* f = func("wide", 5, (const tir_buffer_t* const[]){U, D, W, S, B}, body);
  uint64_t u[3] = {UINT64_MAX, 3, 0};
  double d[2] = {0, 1.0};
  uint32_t w = UINT32_MAX;
  int16_t sh = INT16_MAX;
  uint8_t b = 0;
  CHECK_OK(run(f, (void*[]){u, d, &w, &sh, &b}));
  CHECK(b == 1 && u[2] == UINT64_MAX / 3);
  CHECK(d[0] == 18446744073709551615.0 && d[1] == 1.0 + 1e-12);
  CHECK(w == 1 && sh == INT16_MIN);
}

/* A scoped buffer starts as NaN: reading it before writing shows. */
static void test_scoped_poison(void) {
  tir_buffer_t* Y = gbuf("Y", KILN_DTYPE_F32, 1, SHP(1));
  tir_buffer_t* T = tir_buffer(&C, "T", KILN_DTYPE_F32, 1, SHP(2), TIR_SCOPE_LOCAL);
  const tir_stmt_t* body = tir_alloc(&C, T, SEQ(ST(T, F(KILN_DTYPE_F32, 1), I(0)),
                                                ST(Y, LD(T, I(1)), I(0))));
  tir_func_t* f = func("poison", 1, (const tir_buffer_t* const[]){Y}, body);
  float y = 0;
  CHECK_OK(run(f, (void*[]){&y}));
  CHECK(isnan(y));
}

/* ---- errors ---------------------------------------------------------------- */

static void test_out_of_bounds(void) {
  tir_buffer_t* X = gbuf("X", KILN_DTYPE_F32, 2, SHP(2, 3));
  tir_buffer_t* Y = gbuf("Y", KILN_DTYPE_F32, 1, SHP(3));
  tir_var_t* i = tir_var(&C, "i");
  float x[6] = {1, 2, 3, 4, 5, 6}, y[3] = {0};
  /* Load X[1, i + 1]: i = 2 reads column 3 of 3. */
  const tir_stmt_t* rd =
      FOR(i, 3, ST(Y, LD(X, I(1), BIN(TIR_ADD, R(i), I(1))), R(i)));
  tir_func_t* f = func("shift", 2, (const tir_buffer_t* const[]){X, Y}, rd);
  kiln_status_t st = run(f, (void*[]){x, y});
  CHECK(st && kiln_status_code(st) == KILN_OUT_OF_RANGE);
  if (st) {
    const char* m = kiln_status_message(st);
    CHECK_MSG(strstr(m, "kernel shift") && strstr(m, "load X[1, i + 1]") &&
                  strstr(m, "index 1 is 3") && strstr(m, "[0, 3) of buffer 'X'"),
              "message: %s", m);
    kiln_status_free(st);
  }
  /* The stores before the fault were done. */
  CHECK(y[0] == 5 && y[1] == 6 && y[2] == 0);
  /* Store Y[i - 1]: i = 0 writes index -1. */
  const tir_stmt_t* wr = FOR(i, 3, ST(Y, F(KILN_DTYPE_F32, 1), BIN(TIR_SUB, R(i), I(1))));
  CHECK_ERR(run(func("back", 1, (const tir_buffer_t* const[]){Y}, wr), (void*[]){y}),
            KILN_OUT_OF_RANGE, "store Y[i - 1]: index 0 is -1");
  /* With both select arms evaluated, an unchosen out-of-bounds arm faults. */
  const tir_expr_t* in = BIN(TIR_LT, BIN(TIR_ADD, R(i), I(1)), I(3));
  const tir_expr_t* sel = tir_select(&C, in, LD(X, I(0), BIN(TIR_ADD, R(i), I(1))),
                                     F(KILN_DTYPE_F32, 0));
  tir_func_t* g = func("pad", 2, (const tir_buffer_t* const[]){X, Y}, FOR(i, 3, ST(Y, sel, R(i))));
  CHECK_OK(run(g, (void*[]){x, y}));
  tir_interp_options_t both = {.eval_both_select_arms = true};
  CHECK_ERR(tir_interp_run(g, (void*[]){x, y}, &both, kiln_allocator_system()),
            KILN_OUT_OF_RANGE, "of buffer 'X'");
}

static void test_malformed_kernels(void) {
  tir_buffer_t* Y = gbuf("Y", KILN_DTYPE_I64, 1, SHP(4));
  tir_var_t* i = tir_var(&C, "i");
  tir_var_t* k = tir_var(&C, "k");
  int64_t y[4] = {0};
  /* A variable outside its loop. */
  tir_func_t* f = func("unbound", 1, (const tir_buffer_t* const[]){Y}, ST(Y, R(k), I(0)));
  CHECK_ERR(run(f, (void*[]){y}), KILN_INVALID_ARGUMENT, "variable 'k'");
  /* A loop rebinding its own variable. */
  f = func("rebind", 1, (const tir_buffer_t* const[]){Y}, FOR(i, 2, FOR(i, 2, ST(Y, R(i), R(i)))));
  CHECK_ERR(run(f, (void*[]){y}), KILN_INVALID_ARGUMENT, "rebinds variable 'i'");
  /* Division by zero. */
  f = func("div0", 1, (const tir_buffer_t* const[]){Y},
           FOR(i, 2, ST(Y, BIN(TIR_DIV, I(1), R(i)), R(i))));
  CHECK_ERR(run(f, (void*[]){y}), KILN_INVALID_ARGUMENT, "division by zero");
  /* A parameter without memory. */
  f = func("nomem", 1, (const tir_buffer_t* const[]){Y}, ST(Y, I(1), I(0)));
  CHECK_ERR(run(f, (void*[]){NULL}), KILN_INVALID_ARGUMENT, "buffer 'Y'");
  /* A store whose value dtype is not the buffer's (built by hand: the
   * builder takes any value). */
  f = func("dtype", 1, (const tir_buffer_t* const[]){Y}, ST(Y, F(KILN_DTYPE_F32, 1), I(0)));
  CHECK_ERR(run(f, (void*[]){y}), KILN_INVALID_ARGUMENT, "f32 value into i64 buffer 'Y'");
}

int main(void) {
  tir_ctx_init(&C, kiln_allocator_system());
  RUN(test_immediates_and_arithmetic);
  RUN(test_comparisons_logic_select);
  RUN(test_casts_and_intrinsics);
  RUN(test_variables);
  RUN(test_loops_loads_stores);
  RUN(test_if_seq_alloc_barrier_bound);
  RUN(test_buffer_dtypes);
  RUN(test_wide_dtypes);
  RUN(test_scoped_poison);
  RUN(test_out_of_bounds);
  RUN(test_malformed_kernels);
  CHECK_OK(tir_ctx_status(&C));
  tir_ctx_deinit(&C);
  return kiln_test_finish();
}
