/* Unit tests of the tensor IR analyses (ir/tir.h "analysis and passes"):
 * builders + printer, interval bounds, the verifier's error classes, and the
 * simplifier's rewrites (plus its speed on a 7-deep nest). */
#define _GNU_SOURCE
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "ir/tir.h"
#include "ir/tir_interp.h"
#include "testing.h"

static tir_ctx_t C;

static void ctx_reset(void) {
  tir_ctx_deinit(&C);
  tir_ctx_init(&C, kiln_allocator_system());
}

/* ---- helpers --------------------------------------------------------------- */

#define I(v) tir_int(&C, (v))
#define R(v) tir_ref(&C, (v))
#define ADD(a, b) tir_add(&C, (a), (b))
#define SUB(a, b) tir_sub(&C, (a), (b))
#define MUL(a, b) tir_mul(&C, (a), (b))
#define BIN(op, a, b) tir_bin(&C, (op), (a), (b))
#define IDX(...) ((const tir_expr_t* const[]){__VA_ARGS__})
#define SHP(...) ((const int64_t[]){__VA_ARGS__})
#define NARGS(...) ((int32_t)(sizeof((const tir_expr_t*[]){__VA_ARGS__}) / sizeof(tir_expr_t*)))
#define LD(b, ...) tir_load(&C, (b), IDX(__VA_ARGS__))
#define ST(b, v, ...) tir_store(&C, (b), IDX(__VA_ARGS__), (v))
#define FOR(v, n, body) tir_for(&C, (v), (n), TIR_LOOP_SERIAL, (body))

static tir_buffer_t* gbuf(const char* name, kiln_dtype_t t, int32_t rank, const int64_t* shape) {
  return tir_buffer(&C, name, t, rank, shape, TIR_SCOPE_GLOBAL);
}

static char g_text[1 << 16];

static const char* func_str(const tir_func_t* f) {
  FILE* m = fmemopen(g_text, sizeof g_text, "w");
  tir_print_func(f, m);
  fclose(m);
  return g_text;
}

static const char* stmt_str(const tir_stmt_t* s) {
  FILE* m = fmemopen(g_text, sizeof g_text, "w");
  tir_print_stmt(s, m, 0);
  fclose(m);
  return g_text;
}

static char g_etext[4096];
static const char* expr_str(const tir_expr_t* e) {
  FILE* m = fmemopen(g_etext, sizeof g_etext, "w");
  tir_print_expr(e, m);
  fclose(m);
  return g_etext;
}

#define CHECK_HAS(text, needle) \
  CHECK_MSG(strstr((text), (needle)) != NULL, "'%s' not found in:\n%s", (needle), (text))
#define CHECK_STR(text, want) \
  CHECK_MSG(strcmp((text), (want)) == 0, "got '%s', want '%s'", (text), (want))
#define CHECK_SIMP(e, want) CHECK_STR(expr_str(tir_simplify_expr(&C, (e))), (want))

static tir_func_t* func1(const char* name, const tir_buffer_t* a, const tir_buffer_t* b,
                         const tir_stmt_t* body) {
  const tir_buffer_t* p[2] = {a, b};
  return tir_func(&C, name, b ? 2 : 1, p, body);
}

/* A direct 3x3 convolution, stride 1, pad 1, guarded input loads:
 * Y[n,oc,h,w] = sum_{ic,kh,kw} X[n,ic,h+kh-1,w+kw-1] * W[oc,ic,kh,kw]. */
static tir_func_t* conv_kernel(bool guard) {
  tir_buffer_t* X = gbuf("X", KILN_DTYPE_F32, 4, SHP(1, 3, 8, 8));
  tir_buffer_t* W = gbuf("W", KILN_DTYPE_F32, 4, SHP(4, 3, 3, 3));
  tir_buffer_t* Y = gbuf("Y", KILN_DTYPE_F32, 4, SHP(1, 4, 8, 8));
  tir_var_t *n = tir_var(&C, "n"), *oc = tir_var(&C, "oc"), *h = tir_var(&C, "h"),
            *w = tir_var(&C, "w"), *ic = tir_var(&C, "ic"), *kh = tir_var(&C, "kh"),
            *kw = tir_var(&C, "kw");
  const tir_expr_t* ih = SUB(ADD(R(h), R(kh)), I(1));
  const tir_expr_t* iw = SUB(ADD(R(w), R(kw)), I(1));
  const tir_expr_t* y = LD(Y, R(n), R(oc), R(h), R(w));
  const tir_expr_t* prod = MUL(LD(X, R(n), R(ic), ih, iw), LD(W, R(oc), R(ic), R(kh), R(kw)));
  const tir_stmt_t* acc = ST(Y, ADD(y, prod), R(n), R(oc), R(h), R(w));
  if (guard) {
    const tir_expr_t* ok = BIN(TIR_AND, BIN(TIR_AND, BIN(TIR_GE, ih, I(0)), BIN(TIR_LT, ih, I(8))),
                               BIN(TIR_AND, BIN(TIR_GE, iw, I(0)), BIN(TIR_LT, iw, I(8))));
    acc = tir_if(&C, ok, acc, NULL);
  }
  const tir_stmt_t* red = FOR(ic, 3, FOR(kh, 3, FOR(kw, 3, acc)));
  const tir_stmt_t* init = ST(Y, tir_const(&C, KILN_DTYPE_F32, 0), R(n), R(oc), R(h), R(w));
  const tir_stmt_t* body = tir_seq2(&C, init, red);
  body = FOR(n, 1,
             tir_for(&C, oc, 4, TIR_LOOP_PARALLEL,
                     FOR(h, 8, tir_for(&C, w, 8, TIR_LOOP_VECTORIZED, body))));
  const tir_buffer_t* p[3] = {X, W, Y};
  return tir_func(&C, "conv_0", 3, p, body);
}

/* ---- printer ---------------------------------------------------------------- */

static void test_print_kernel(void) {
  ctx_reset();
  tir_func_t* f = conv_kernel(true);
  const char* t = func_str(f);
  CHECK_HAS(t,
            "kernel conv_0(X: f32[1,3,8,8] global, W: f32[4,3,3,3] global, "
            "Y: f32[1,4,8,8] global) {\n");
  CHECK_HAS(t, "\n  for (n: 0..1) {\n    parallel for (oc: 0..4) {\n");
  CHECK_HAS(t, "vectorized for (w: 0..8) {\n");
  CHECK_HAS(t, "Y[n, oc, h, w] = 0.0f\n");
  CHECK_HAS(t,
            "if (((((h + kh) - 1) >= 0) && (((h + kh) - 1) < 8)) && ((((w + kw) - 1) >= 0) && "
            "(((w + kw) - 1) < 8))) {\n");
  CHECK_HAS(t,
            "Y[n, oc, h, w] = (Y[n, oc, h, w] + (X[n, ic, (h + kh) - 1, (w + kw) - 1] * "
            "W[oc, ic, kh, kw]))\n");
  CHECK(t[strlen(t) - 2] == '}');
}

static void test_print_gpu_and_misc(void) {
  ctx_reset();
  tir_buffer_t* A = gbuf("A", KILN_DTYPE_F16, 1, SHP(64));
  tir_buffer_t* S = tir_buffer(&C, "A.local", KILN_DTYPE_F16, 2, SHP(16, 16), TIR_SCOPE_LOCAL);
  tir_var_t* bx = tir_var(&C, "bx");
  tir_var_t* tx = tir_var(&C, "tx");
  tir_var_t* tx2 = tir_var(&C, "tx"); /* same name, different var */
  const tir_stmt_t* copy = ST(S, LD(A, ADD(MUL(R(bx), I(16)), R(tx))), I(0), R(tx));
  const tir_stmt_t* use = ST(A, LD(S, I(0), BIN(TIR_FLOORMOD, ADD(R(tx2), I(1)), I(16))),
                             ADD(MUL(R(bx), I(16)), R(tx2)));
  const tir_stmt_t* body =
      tir_seq(&C, 3,
              (const tir_stmt_t*[]){tir_for_bound(&C, tx, 16, TIR_THREAD_X, copy), tir_barrier(&C),
                                    tir_for_bound(&C, tx2, 16, TIR_THREAD_X, use)});
  body = tir_for_bound(&C, bx, 4, TIR_BLOCK_X, tir_alloc(&C, S, body));
  tir_func_t* f = func1("k", A, NULL, body);
  const char* t = func_str(f);
  CHECK_HAS(t, "bound(blockIdx.x) for (bx: 0..4) {\n");
  CHECK_HAS(t, "alloc local A.local: f16[16,16] {\n");
  CHECK_HAS(t, "bound(threadIdx.x) for (tx_");
  CHECK_HAS(t, "      barrier\n");
  CHECK_HAS(t, "% 16]");

  /* Immediates and intrinsics. */
  CHECK_STR(expr_str(tir_const(&C, KILN_DTYPE_F32, 1.5)), "1.5f");
  CHECK_STR(expr_str(tir_const(&C, KILN_DTYPE_F16, 2)), "f16(2.0)");
  CHECK_STR(expr_str(tir_const(&C, KILN_DTYPE_I32, -3)), "i32(-3)");
  CHECK_STR(expr_str(tir_const(&C, KILN_DTYPE_BOOL, 1)), "true");
  CHECK_STR(expr_str(I(-7)), "-7");
  const tir_expr_t* x = LD(A, I(3));
  CHECK_STR(expr_str(tir_call(&C, TIR_EXP, 1, tir_cast(&C, KILN_DTYPE_F32, x), NULL, NULL)),
            "exp(f32(A[3]))");
  CHECK_STR(expr_str(tir_select(&C, BIN(TIR_LT, I(1), I(2)), x, x)), "select(1 < 2, A[3], A[3])");
  CHECK_STR(expr_str(BIN(TIR_MAX, I(1), BIN(TIR_FLOORDIV, I(7), I(2)))), "max(1, 7 // 2)");
  CHECK_STR(expr_str(tir_call(&C, TIR_NEG, 1, x, NULL, NULL)), "-A[3]");

  /* Statements print standalone too, with an if/else. */
  const tir_stmt_t* s = tir_if(&C, BIN(TIR_EQ, I(1), I(1)), ST(A, x, I(0)), ST(A, x, I(1)));
  CHECK_STR(stmt_str(s), "if (1 == 1) {\n  A[0] = A[3]\n} else {\n  A[1] = A[3]\n}\n");
}

/* ---- bounds ---------------------------------------------------------------- */

static bool bnd(const tir_expr_t* e, int32_t n, const tir_var_t* const* v, const int64_t* lo,
                const int64_t* hi, int64_t* olo, int64_t* ohi) {
  return tir_expr_bounds(e, n, v, lo, hi, olo, ohi);
}

static void test_bounds(void) {
  ctx_reset();
  tir_var_t* x = tir_var(&C, "x");
  tir_var_t* y = tir_var(&C, "y");
  const tir_var_t* vs[2] = {x, y};
  int64_t lo[2] = {0, -3}, hi[2] = {15, 4};
  int64_t a, b;
  CHECK(bnd(ADD(MUL(R(x), I(4)), R(y)), 2, vs, lo, hi, &a, &b) && a == -3 && b == 64);
  CHECK(bnd(SUB(R(x), R(y)), 2, vs, lo, hi, &a, &b) && a == -4 && b == 18);
  CHECK(bnd(MUL(R(y), R(y)), 2, vs, lo, hi, &a, &b) && a == -12 && b == 16);
  CHECK(bnd(BIN(TIR_FLOORDIV, R(y), I(2)), 2, vs, lo, hi, &a, &b) && a == -2 && b == 2);
  CHECK(bnd(BIN(TIR_FLOORDIV, R(x), I(-4)), 2, vs, lo, hi, &a, &b) && a == -4 && b == 0);
  CHECK(bnd(BIN(TIR_FLOORMOD, R(y), I(8)), 2, vs, lo, hi, &a, &b) && a == 0 && b == 7);
  CHECK(bnd(BIN(TIR_FLOORMOD, R(x), I(16)), 2, vs, lo, hi, &a, &b) && a == 0 && b == 15);
  CHECK(bnd(BIN(TIR_FLOORMOD, ADD(R(x), I(32)), I(16)), 2, vs, lo, hi, &a, &b) && a == 0 &&
        b == 15);
  CHECK(bnd(BIN(TIR_FLOORMOD, R(x), I(5)), 2, vs, lo, hi, &a, &b) && a == 0 && b == 4);
  /* Division by an expression with known positive bounds. */
  CHECK(bnd(BIN(TIR_FLOORDIV, R(x), ADD(R(y), I(5))), 2, vs, lo, hi, &a, &b) && a == 0 && b == 7);
  CHECK(bnd(BIN(TIR_FLOORMOD, R(x), ADD(R(y), I(5))), 2, vs, lo, hi, &a, &b) && a == 0 && b == 8);
  CHECK(!bnd(BIN(TIR_FLOORDIV, R(x), R(y)), 2, vs, lo, hi, &a, &b)); /* y can be 0 */
  CHECK(bnd(BIN(TIR_DIV, R(y), I(2)), 2, vs, lo, hi, &a, &b) && a == -1 && b == 2);
  CHECK(bnd(BIN(TIR_MIN, R(x), R(y)), 2, vs, lo, hi, &a, &b) && a == -3 && b == 4);
  CHECK(bnd(BIN(TIR_MAX, R(x), I(10)), 2, vs, lo, hi, &a, &b) && a == 10 && b == 15);
  /* Bitwise: non-negative operands bound the result; a negative one does not. */
  CHECK(bnd(BIN(TIR_BAND, R(x), I(6)), 2, vs, lo, hi, &a, &b) && a == 0 && b == 6);
  CHECK(bnd(BIN(TIR_BOR, R(x), I(16)), 2, vs, lo, hi, &a, &b) && a == 0 && b == 31);
  CHECK(bnd(BIN(TIR_BXOR, R(x), I(3)), 2, vs, lo, hi, &a, &b) && a == 0 && b == 15);
  CHECK(!bnd(BIN(TIR_BAND, R(x), R(y)), 2, vs, lo, hi, &a, &b));
  /* select: each branch is bounded under its condition. */
  const tir_expr_t* sel = tir_select(&C, BIN(TIR_LT, R(y), I(0)), ADD(R(y), I(8)), R(y));
  CHECK(bnd(sel, 2, vs, lo, hi, &a, &b) && a == 0 && b == 7);
  CHECK(bnd(BIN(TIR_LT, R(x), I(16)), 2, vs, lo, hi, &a, &b) && a == 1 && b == 1);
  CHECK(bnd(BIN(TIR_LT, R(x), I(8)), 2, vs, lo, hi, &a, &b) && a == 0 && b == 1);
  CHECK(bnd(tir_cast(&C, KILN_DTYPE_I32, R(x)), 2, vs, lo, hi, &a, &b) && a == 0 && b == 15);
  CHECK(bnd(tir_cast(&C, KILN_DTYPE_U8, R(y)), 2, vs, lo, hi, &a, &b) && a == 0 && b == 255);
  CHECK(bnd(tir_call(&C, TIR_NEG, 1, R(x), NULL, NULL), 2, vs, lo, hi, &a, &b) && a == -15 &&
        b == 0);
  /* Loads, unbound vars and float values cannot be bounded. */
  tir_buffer_t* B = gbuf("B", KILN_DTYPE_I64, 1, SHP(4));
  CHECK(!bnd(LD(B, R(x)), 2, vs, lo, hi, &a, &b));
  CHECK(!bnd(ADD(R(x), LD(B, I(0))), 2, vs, lo, hi, &a, &b));
  CHECK(!bnd(R(tir_var(&C, "z")), 2, vs, lo, hi, &a, &b));
  CHECK(!bnd(tir_cast(&C, KILN_DTYPE_I64, tir_const(&C, KILN_DTYPE_F32, 1.5)), 2, vs, lo, hi, &a,
             &b));
  /* Overflow widens to unbounded instead of wrapping. */
  CHECK(!bnd(MUL(R(x), I(INT64_MAX / 2)), 2, vs, lo, hi, &a, &b));
  CHECK(bnd(I(42), 0, NULL, NULL, NULL, &a, &b) && a == 42 && b == 42);
}

/* ---- verifier ---------------------------------------------------------------- */

static void test_verify_clean(void) {
  ctx_reset();
  CHECK_OK(tir_verify(conv_kernel(true)));
}

static void test_verify_bounds(void) {
  ctx_reset();
  /* The unguarded padded conv reads X[.., h + kh - 1, ..] at -1 and 8. */
  CHECK_ERR(tir_verify(conv_kernel(false)), KILN_OUT_OF_RANGE,
            "kernel conv_0: load X[n, ic, (h + kh) - 1, (w + kw) - 1] in store Y[n, oc, h, w]: "
            "index 2 ((h + kh) - 1) ranges over [-1, 8], outside [0, 8) of buffer 'X' (loops: "
            "n: 0..1, oc: 0..4, h: 0..8, w: 0..8, ic: 0..3, kh: 0..3, kw: 0..3)");

  ctx_reset();
  tir_buffer_t* A = gbuf("A", KILN_DTYPE_F32, 1, SHP(50));
  tir_buffer_t* B = gbuf("B", KILN_DTYPE_F32, 1, SHP(50));
  tir_var_t* o = tir_var(&C, "w.o");
  tir_var_t* i = tir_var(&C, "w.i");
  const tir_expr_t* w = ADD(MUL(R(o), I(16)), R(i));
  const tir_stmt_t* st = ST(B, LD(A, w), w);
  /* A split by 16 of extent 50 overruns without its guard ... */
  CHECK_ERR(tir_verify(func1("split", A, B, FOR(o, 4, FOR(i, 16, st)))), KILN_OUT_OF_RANGE,
            "store B[(w.o * 16) + w.i]: index 0 ((w.o * 16) + w.i) ranges over [0, 63], "
            "outside [0, 50)");
  /* ... and is fine with it (guard on the whole index expression). */
  const tir_stmt_t* g = tir_if(&C, BIN(TIR_LT, w, I(50)), st, NULL);
  CHECK_OK(tir_verify(func1("split", A, B, FOR(o, 4, FOR(i, 16, g)))));
  /* A guard on a single variable narrows it: if (w.o < 3) then w.o*16+w.i <= 47. */
  g = tir_if(&C, BIN(TIR_LT, R(o), I(3)), st, NULL);
  CHECK_OK(tir_verify(func1("split", A, B, FOR(o, 4, FOR(i, 16, g)))));
  /* The else branch gets the negated guard. */
  g = tir_if(&C, BIN(TIR_GE, w, I(50)), ST(B, tir_const(&C, KILN_DTYPE_F32, 0), I(0)), st);
  CHECK_OK(tir_verify(func1("split", A, B, FOR(o, 4, FOR(i, 16, g)))));
  /* A guard that is too weak still fails. */
  g = tir_if(&C, BIN(TIR_LE, w, I(50)), st, NULL);
  CHECK_ERR(tir_verify(func1("split", A, B, FOR(o, 4, FOR(i, 16, g)))), KILN_OUT_OF_RANGE,
            "ranges over [0, 50]");
  /* A select does not guard a load in its branch (both may be evaluated). */
  const tir_expr_t* sel =
      tir_select(&C, BIN(TIR_LT, w, I(50)), LD(A, w), tir_const(&C, KILN_DTYPE_F32, 0));
  CHECK_ERR(
      tir_verify(func1("sel", A, B, FOR(o, 4, FOR(i, 16, ST(B, sel, BIN(TIR_MIN, w, I(49))))))),
      KILN_OUT_OF_RANGE, "a select does not guard the loads");
  /* ... but a select computing the index is analysed per branch. */
  tir_var_t* j = tir_var(&C, "j");
  const tir_expr_t* wrapped = tir_select(&C, BIN(TIR_LT, SUB(R(j), I(10)), I(0)),
                                         ADD(SUB(R(j), I(10)), I(50)), SUB(R(j), I(10)));
  CHECK_OK(tir_verify(func1("wrap", A, B, FOR(j, 60, ST(B, LD(A, wrapped), I(0))))));
  /* Loops of extent 0 never run and are not bounds-checked. */
  CHECK_OK(tir_verify(func1("dead", A, B, FOR(j, 0, ST(B, LD(A, I(99)), I(0))))));
  /* A constant index out of range. */
  CHECK_ERR(tir_verify(func1("c", A, B, ST(B, LD(A, I(50)), I(0)))), KILN_OUT_OF_RANGE,
            "kernel c: load A[50] in store B[0]: index 0 (50) ranges over [50, 50]");
}

/* Relations between loop variables from guards, guards through floordiv,
 * and branches that can never run. */
static void test_verify_relations(void) {
  ctx_reset();
  tir_buffer_t* A = gbuf("A", KILN_DTYPE_F32, 1, SHP(16));
  tir_buffer_t* T = gbuf("T", KILN_DTYPE_F32, 2, SHP(16, 16));
  tir_var_t* i = tir_var(&C, "i");
  tir_var_t* j = tir_var(&C, "j");
  const tir_expr_t* one = tir_const(&C, KILN_DTYPE_F32, 1);
  /* A[j - i - 1] is in range exactly when i < j. */
  const tir_stmt_t* st = ST(A, one, SUB(SUB(R(j), R(i)), I(1)));
  CHECK_ERR(tir_verify(func1("rel", A, NULL, FOR(i, 16, FOR(j, 16, st)))), KILN_OUT_OF_RANGE,
            "index 0 ((j - i) - 1) ranges over [-16, 14]");
  CHECK_OK(tir_verify(func1(
      "rel", A, NULL, FOR(i, 16, FOR(j, 16, tir_if(&C, BIN(TIR_LT, R(i), R(j)), st, NULL))))));
  /* Upper triangle of a 16x16 matrix through a flat index: i*16 + j - i*17 + ... */
  st = ST(T, one, R(i), SUB(R(j), R(i)));
  CHECK_OK(tir_verify(func1(
      "triu", T, NULL, FOR(i, 16, FOR(j, 16, tir_if(&C, BIN(TIR_GE, R(j), R(i)), st, NULL))))));
  /* A guard through floordiv: x // 4 < 2 means x < 8. */
  tir_buffer_t* B = gbuf("B", KILN_DTYPE_F32, 1, SHP(8));
  tir_var_t* x = tir_var(&C, "x");
  st = tir_if(&C, BIN(TIR_LT, BIN(TIR_FLOORDIV, R(x), I(4)), I(2)), ST(B, one, R(x)), NULL);
  CHECK_OK(tir_verify(func1("fdiv", B, NULL, FOR(x, 16, st))));
  /* A branch that never runs is not bounds-checked (like extent-0 loops). */
  st = tir_if(&C, BIN(TIR_GT, R(x), I(100)), ST(B, one, R(x)), NULL);
  CHECK_OK(tir_verify(func1("dead", B, NULL, FOR(x, 16, st))));
  st = tir_if(&C, BIN(TIR_EQ, ADD(MUL(R(x), I(8)), MUL(R(i), I(2))), I(1)), ST(B, one, R(x)), NULL);
  CHECK_OK(tir_verify(func1("dead", B, NULL, FOR(i, 4, FOR(x, 16, st)))));
  /* A guard on a sum bounds a multiple of it: 4x + i <= 7 gives 12x + 3i <= 21. */
  tir_buffer_t* Y = gbuf("Y", KILN_DTYPE_F32, 1, SHP(22));
  st = tir_if(&C, BIN(TIR_LE, ADD(MUL(R(x), I(4)), R(i)), I(7)),
              ST(Y, one, ADD(MUL(R(x), I(12)), MUL(R(i), I(3)))), NULL);
  CHECK_OK(tir_verify(func1("affine", Y, NULL, FOR(x, 16, FOR(i, 4, st)))));
}

static void test_verify_data_indices(void) {
  ctx_reset();
  tir_buffer_t* X = gbuf("X", KILN_DTYPE_F32, 1, SHP(10));
  tir_buffer_t* Ind = gbuf("Ind", KILN_DTYPE_I64, 1, SHP(4));
  tir_buffer_t* Y = gbuf("Y", KILN_DTYPE_F32, 1, SHP(4));
  tir_var_t* i = tir_var(&C, "i");
  const tir_buffer_t* p[3] = {X, Ind, Y};
  const tir_expr_t* idx = LD(Ind, R(i));
  /* Gather without any check: cannot be bounded, no guard mentions it. */
  tir_func_t* f = tir_func(&C, "gather", 3, p, FOR(i, 4, ST(Y, LD(X, idx), R(i))));
  CHECK_ERR(tir_verify(f), KILN_OUT_OF_RANGE,
            "load X[Ind[i]] in store Y[i]: index 0 (Ind[i]) depends on loaded data and cannot "
            "be bounded, and no enclosing if tests it");
  /* Clamped with min/max: bounded, fine. */
  const tir_expr_t* cl = BIN(TIR_MIN, BIN(TIR_MAX, idx, I(0)), I(9));
  f = tir_func(&C, "gather", 3, p, FOR(i, 4, ST(Y, LD(X, cl), R(i))));
  CHECK_OK(tir_verify(f));
  /* Guarded by an if on the loaded index (negative indices wrap). */
  const tir_expr_t* wrapped = tir_select(&C, BIN(TIR_LT, idx, I(0)), ADD(idx, I(10)), idx);
  const tir_expr_t* ok = BIN(TIR_AND, BIN(TIR_GE, idx, I(-10)), BIN(TIR_LT, idx, I(10)));
  f = tir_func(&C, "gather", 3, p, FOR(i, 4, tir_if(&C, ok, ST(Y, LD(X, wrapped), R(i)), NULL)));
  CHECK_OK(tir_verify(f));
  /* A one-sided guard still counts as checking the data (documented rule). */
  f = tir_func(&C, "gather", 3, p,
               FOR(i, 4, tir_if(&C, BIN(TIR_LT, idx, I(10)), ST(Y, LD(X, idx), R(i)), NULL)));
  CHECK_OK(tir_verify(f));
  /* A guard that proves the index out of range is an error even so. */
  f = tir_func(&C, "gather", 3, p,
               FOR(i, 4, tir_if(&C, BIN(TIR_EQ, idx, I(12)), ST(Y, LD(X, idx), R(i)), NULL)));
  CHECK_ERR(tir_verify(f), KILN_OUT_OF_RANGE, "index 0 (Ind[i]) ranges over [12, 12]");
}

static void test_verify_structure(void) {
  ctx_reset();
  tir_buffer_t* A = gbuf("A", KILN_DTYPE_F32, 2, SHP(4, 4));
  tir_buffer_t* B = gbuf("B", KILN_DTYPE_I32, 1, SHP(4));
  tir_var_t* i = tir_var(&C, "i");
  tir_var_t* j = tir_var(&C, "j");
  const tir_expr_t* one = tir_const(&C, KILN_DTYPE_F32, 1);
  /* Unbound variable. */
  CHECK_ERR(tir_verify(func1("k", A, NULL, FOR(i, 4, ST(A, one, R(i), R(j))))),
            KILN_INVALID_ARGUMENT,
            "kernel k: store A[i, j]: variable 'j' (id 1) is not bound by an enclosing loop "
            "(loops: i: 0..4)");
  /* Store dtype mismatch. */
  CHECK_ERR(tir_verify(func1("k", A, B, FOR(i, 4, ST(B, one, R(i))))), KILN_INVALID_ARGUMENT,
            "store B[i]: value has dtype f32 but buffer 'B' is i32");
  /* Operand dtype mismatch. */
  CHECK_ERR(
      tir_verify(func1("k", A, B,
                       FOR(i, 4, ST(A, ADD(one, tir_cast(&C, KILN_DTYPE_F16, one)), R(i), I(0))))),
      KILN_INVALID_ARGUMENT, "operands of '+' have different dtypes f32 and f16");
  /* Index of the wrong dtype. */
  CHECK_ERR(
      tir_verify(func1("k", A, B, FOR(i, 4, ST(A, one, tir_cast(&C, KILN_DTYPE_I32, R(i)), I(0))))),
      KILN_INVALID_ARGUMENT, "index 0 (i32(i)) has dtype i32, expected i64");
  /* Bool arithmetic / float intrinsic on ints / if on a non-bool. */
  CHECK_ERR(
      tir_verify(func1("k", A, B,
                       FOR(i, 4, ST(B, tir_call(&C, TIR_EXP, 1, LD(B, R(i)), NULL, NULL), R(i))))),
      KILN_INVALID_ARGUMENT, "ill-typed expression exp(B[i])");
  CHECK_ERR(tir_verify(func1("k", A, B, tir_if(&C, I(1), ST(B, LD(B, I(0)), I(1)), NULL))),
            KILN_INVALID_ARGUMENT, "if (1): condition has dtype i64, expected bool");
  /* Possible division by zero in index arithmetic. */
  CHECK_ERR(
      tir_verify(func1("k", A, B, FOR(i, 4, ST(A, one, BIN(TIR_FLOORDIV, I(3), R(i)), I(0))))),
      KILN_INVALID_ARGUMENT, "store A[3 // i, 0]: divisor of 3 // i can be zero");
  /* Negative extent; rebinding a variable. */
  CHECK_ERR(tir_verify(func1("k", A, B, FOR(i, -1, ST(B, LD(B, I(0)), I(1))))),
            KILN_INVALID_ARGUMENT, "loop 'i' has negative extent -1");
  CHECK_ERR(tir_verify(func1("k", A, B, FOR(i, 2, FOR(i, 2, ST(B, LD(B, I(0)), R(i)))))),
            KILN_INVALID_ARGUMENT, "loop variable 'i' is bound by two nested loops");
  /* A global buffer that is not a parameter. */
  tir_buffer_t* T = gbuf("T", KILN_DTYPE_I32, 1, SHP(4));
  CHECK_ERR(tir_verify(func1("k", A, B, FOR(i, 4, ST(B, LD(T, R(i)), R(i))))),
            KILN_INVALID_ARGUMENT, "global buffer 'T' is not a parameter of the kernel");
  /* A parameter that is not global. */
  tir_buffer_t* L = tir_buffer(&C, "L", KILN_DTYPE_I32, 1, SHP(4), TIR_SCOPE_LOCAL);
  CHECK_ERR(tir_verify(func1("k", L, NULL, ST(L, LD(L, I(0)), I(1)))), KILN_INVALID_ARGUMENT,
            "parameter 'L' has local scope, expected global");
}

static void test_verify_scopes(void) {
  ctx_reset();
  tir_buffer_t* A = gbuf("A", KILN_DTYPE_F32, 1, SHP(64));
  tir_buffer_t* S = tir_buffer(&C, "S", KILN_DTYPE_F32, 1, SHP(16), TIR_SCOPE_LOCAL);
  tir_buffer_t* P = tir_buffer(&C, "P", KILN_DTYPE_F32, 1, SHP(4), TIR_SCOPE_PRIVATE);
  tir_var_t* i = tir_var(&C, "i");
  tir_var_t* tx = tir_var(&C, "tx");
  tir_var_t* bx = tir_var(&C, "bx");
  const tir_expr_t* zero = tir_const(&C, KILN_DTYPE_F32, 0);
  /* Local buffer used without its alloc. */
  CHECK_ERR(tir_verify(func1("k", A, NULL, FOR(i, 16, ST(S, zero, R(i))))), KILN_INVALID_ARGUMENT,
            "store S[i]: local buffer 'S' is used outside its alloc");
  /* ... and after its alloc ended. */
  const tir_stmt_t* body =
      tir_seq2(&C, tir_alloc(&C, S, FOR(i, 16, ST(S, zero, R(i)))), ST(A, LD(S, I(0)), I(0)));
  CHECK_ERR(tir_verify(func1("k", A, NULL, body)), KILN_INVALID_ARGUMENT,
            "load S[0] in store A[0]: local buffer 'S' is used outside its alloc");
  /* Private buffer shared across work-items. */
  body = tir_alloc(&C, P, tir_for_bound(&C, tx, 4, TIR_THREAD_X, ST(P, zero, R(tx))));
  CHECK_ERR(tir_verify(func1("k", A, NULL, body)), KILN_INVALID_ARGUMENT,
            "private buffer 'P' is allocated outside loop 'tx' (threadIdx.x) but used inside it");
  /* ... or across CPU threads. */
  body = tir_alloc(&C, P, tir_for(&C, i, 4, TIR_LOOP_PARALLEL, ST(P, zero, R(i))));
  CHECK_ERR(tir_verify(func1("k", A, NULL, body)), KILN_INVALID_ARGUMENT,
            "private buffer 'P' is allocated outside loop 'i' (parallel)");
  /* Private inside the thread loop is fine. */
  body = tir_for_bound(&C, tx, 4, TIR_THREAD_X, tir_alloc(&C, P, ST(P, zero, R(tx))));
  CHECK_OK(tir_verify(func1("k", A, NULL, body)));
  /* Local allocated inside the work-item loop (one per work-group): fine. */
  body = tir_for_bound(&C, tx, 16, TIR_THREAD_X, tir_alloc(&C, S, ST(S, zero, R(tx))));
  CHECK_OK(tir_verify(func1("k", A, NULL, body)));
  /* ... but every work-item writing its own value into one slot races. */
  body = tir_for_bound(&C, tx, 16, TIR_THREAD_X, tir_alloc(&C, S, ST(S, LD(A, R(tx)), I(0))));
  CHECK_ERR(tir_verify(func1("k", A, NULL, body)), KILN_INVALID_ARGUMENT,
            "kernel k: race on local buffer 'S': store S[0] (loops: tx: 0..16) is done by "
            "work-items that differ in 'tx' and write different values to the same element");
  /* Unless a guard picks one writer. */
  body = tir_for_bound(
      &C, tx, 16, TIR_THREAD_X,
      tir_alloc(&C, S, tir_if(&C, BIN(TIR_EQ, R(tx), I(0)), ST(S, LD(A, R(tx)), I(0)), NULL)));
  CHECK_OK(tir_verify(func1("k", A, NULL, body)));
  /* Local allocated outside the work-group loop. */
  body = tir_alloc(&C, S,
                   tir_for_bound(&C, bx, 4, TIR_BLOCK_X,
                                 tir_for_bound(&C, tx, 16, TIR_THREAD_X, ST(S, zero, R(tx)))));
  CHECK_ERR(tir_verify(func1("k", A, NULL, body)), KILN_INVALID_ARGUMENT,
            "local buffer 'S' is allocated outside loop 'bx' (blockIdx.x)");
  /* Global alloc; nested same tag; block loop inside thread loop. */
  CHECK_ERR(tir_verify(func1("k", A, NULL, tir_alloc(&C, A, ST(A, zero, I(0))))),
            KILN_INVALID_ARGUMENT, "alloc of buffer 'A' with global scope");
  body = tir_for_bound(&C, tx, 4, TIR_THREAD_X,
                       tir_for_bound(&C, i, 4, TIR_THREAD_X, ST(A, zero, R(i))));
  CHECK_ERR(tir_verify(func1("k", A, NULL, body)), KILN_INVALID_ARGUMENT,
            "loops 'tx' and 'i' are nested but both bound to threadIdx.x");
  body = tir_for_bound(&C, tx, 4, TIR_THREAD_X,
                       tir_for_bound(&C, bx, 4, TIR_BLOCK_X, ST(A, zero, R(bx))));
  CHECK_ERR(tir_verify(func1("k", A, NULL, body)), KILN_INVALID_ARGUMENT,
            "work-group loops must enclose work-item loops");
}

/* The classic tiled pattern: each work-item copies one element into local
 * memory, then reads a neighbour's. */
static const tir_stmt_t* shared_kernel(tir_buffer_t* A, tir_buffer_t* S, tir_var_t* bx,
                                       tir_var_t* tx, const tir_stmt_t* mid,
                                       const tir_expr_t* read_idx) {
  const tir_expr_t* gi = ADD(MUL(R(bx), I(16)), R(tx));
  const tir_stmt_t* copy = ST(S, LD(A, gi), R(tx));
  const tir_stmt_t* use = ST(A, LD(S, read_idx), gi);
  const tir_stmt_t* items[3] = {copy, mid, use};
  return tir_for_bound(
      &C, bx, 4, TIR_BLOCK_X,
      tir_alloc(&C, S, tir_for_bound(&C, tx, 16, TIR_THREAD_X, tir_seq(&C, 3, items))));
}

static void test_verify_barriers_and_races(void) {
  ctx_reset();
  tir_buffer_t* A = gbuf("A", KILN_DTYPE_F32, 1, SHP(64));
  tir_buffer_t* S = tir_buffer(&C, "S", KILN_DTYPE_F32, 1, SHP(16), TIR_SCOPE_LOCAL);
  tir_var_t* bx = tir_var(&C, "bx");
  tir_var_t* tx = tir_var(&C, "tx");
  const tir_expr_t* nb = BIN(TIR_FLOORMOD, ADD(R(tx), I(1)), I(16));
  /* Neighbour read with a barrier in between: fine. */
  CHECK_OK(tir_verify(func1("k", A, NULL, shared_kernel(A, S, bx, tx, tir_barrier(&C), nb))));
  /* Reading back one's own slot needs no barrier. */
  CHECK_OK(tir_verify(func1("k", A, NULL, shared_kernel(A, S, bx, tx, NULL, R(tx)))));
  /* Neighbour read without a barrier: race. */
  CHECK_ERR(tir_verify(func1("k", A, NULL, shared_kernel(A, S, bx, tx, NULL, nb))),
            KILN_INVALID_ARGUMENT,
            "kernel k: race on local buffer 'S': store S[tx] (loops: bx: 0..4, tx: 0..16) and "
            "load S[(tx + 1) % 16] (loops: bx: 0..4, tx: 0..16) are done by different "
            "work-items with no barrier in between");
  /* Reading a slot independent of the thread (broadcast) without barrier. */
  CHECK_ERR(tir_verify(func1("k", A, NULL, shared_kernel(A, S, bx, tx, NULL, I(0)))),
            KILN_INVALID_ARGUMENT, "race on local buffer 'S'");
  /* A barrier under a thread-dependent branch. */
  const tir_stmt_t* divergent = tir_if(&C, BIN(TIR_LT, R(tx), I(8)), tir_barrier(&C), NULL);
  CHECK_ERR(tir_verify(func1("k", A, NULL, shared_kernel(A, S, bx, tx, divergent, nb))),
            KILN_INVALID_ARGUMENT,
            "barrier inside 'if (tx < 8)' whose condition depends on work-item id 'tx' "
            "(threadIdx.x)");
  /* A barrier under a uniform branch is fine (and counts only on one path:
   * the race is still reported). */
  const tir_stmt_t* uniform = tir_if(&C, BIN(TIR_LT, R(bx), I(2)), tir_barrier(&C), NULL);
  CHECK_ERR(tir_verify(func1("k", A, NULL, shared_kernel(A, S, bx, tx, uniform, nb))),
            KILN_INVALID_ARGUMENT, "race on local buffer 'S'");
  const tir_stmt_t* both = tir_if(&C, BIN(TIR_LT, R(bx), I(2)), tir_barrier(&C), tir_barrier(&C));
  CHECK_OK(tir_verify(func1("k", A, NULL, shared_kernel(A, S, bx, tx, both, nb))));

  /* Loop-carried write-after-read: the next iteration's copy overwrites S
   * while other work-items may still read it (missing trailing barrier). */
  ctx_reset();
  A = gbuf("A", KILN_DTYPE_F32, 1, SHP(256));
  S = tir_buffer(&C, "S", KILN_DTYPE_F32, 1, SHP(16), TIR_SCOPE_LOCAL);
  tir_buffer_t* O = gbuf("O", KILN_DTYPE_F32, 1, SHP(16));
  tx = tir_var(&C, "tx");
  tir_var_t* k = tir_var(&C, "k.o");
  tir_var_t* r = tir_var(&C, "r");
  const tir_stmt_t* copy = ST(S, LD(A, ADD(MUL(R(k), I(16)), R(tx))), R(tx));
  const tir_stmt_t* acc = FOR(r, 16, ST(O, ADD(LD(O, R(tx)), LD(S, R(r))), R(tx)));
  const tir_stmt_t* it3[3] = {copy, tir_barrier(&C), acc};
  const tir_stmt_t* body =
      tir_alloc(&C, S, tir_for_bound(&C, tx, 16, TIR_THREAD_X, FOR(k, 16, tir_seq(&C, 3, it3))));
  CHECK_ERR(tir_verify(func1("k", A, O, body)), KILN_INVALID_ARGUMENT,
            "across iterations of the enclosing serial loop");
  const tir_stmt_t* it4[4] = {copy, tir_barrier(&C), acc, tir_barrier(&C)};
  body = tir_alloc(&C, S, tir_for_bound(&C, tx, 16, TIR_THREAD_X, FOR(k, 16, tir_seq(&C, 4, it4))));
  CHECK_OK(tir_verify(func1("k", A, O, body)));
}

/* ---- simplifier ---------------------------------------------------------------- */

static void test_simplify_constants(void) {
  ctx_reset();
  CHECK_SIMP(ADD(I(2), MUL(I(3), I(4))), "14");
  CHECK_SIMP(BIN(TIR_FLOORDIV, I(-7), I(2)), "-4");
  CHECK_SIMP(BIN(TIR_FLOORMOD, I(-7), I(2)), "1");
  CHECK_SIMP(BIN(TIR_DIV, I(-7), I(2)), "-3");
  CHECK_SIMP(BIN(TIR_BAND, I(12), I(-6)), "8");
  CHECK_SIMP(BIN(TIR_BOR, I(12), I(3)), "15");
  CHECK_SIMP(BIN(TIR_BXOR, tir_const(&C, KILN_DTYPE_U8, 5), tir_const(&C, KILN_DTYPE_U8, 255)), "u8(250)");
  CHECK_SIMP(BIN(TIR_BXOR, tir_const(&C, KILN_DTYPE_U64, -1), tir_const(&C, KILN_DTYPE_U64, 1)), "u64(-2)");
  CHECK_SIMP(BIN(TIR_FLOORDIV, I(7), I(0)), "(7 // 0)"); /* left for the verifier */
  CHECK_SIMP(ADD(I(INT64_MAX), I(1)), "(9223372036854775807 + 1)");
  /* Narrow ints wrap in their dtype. */
  const tir_expr_t* i8 = tir_const(&C, KILN_DTYPE_I8, 100);
  CHECK_SIMP(ADD(i8, i8), "i8(-56)");
  CHECK_SIMP(MUL(tir_const(&C, KILN_DTYPE_U8, 16), tir_const(&C, KILN_DTYPE_U8, 17)), "u8(16)");
  CHECK_SIMP(tir_cast(&C, KILN_DTYPE_U8, I(300)), "u8(44)");
  CHECK_SIMP(tir_cast(&C, KILN_DTYPE_I32, tir_const(&C, KILN_DTYPE_F32, -2.7)), "i32(-2)");
  CHECK_SIMP(tir_cast(&C, KILN_DTYPE_I8, tir_const(&C, KILN_DTYPE_F32, 1000)), "i8(1000.0f)");
  /* Floats fold in their precision. */
  const tir_expr_t* third =
      BIN(TIR_DIV, tir_const(&C, KILN_DTYPE_F32, 1), tir_const(&C, KILN_DTYPE_F32, 3));
  const tir_expr_t* r = tir_simplify_expr(&C, third);
  CHECK(r->kind == TIR_FLOAT && r->u.f == (double)(1.0f / 3.0f));
  r = tir_simplify_expr(
      &C, ADD(tir_const(&C, KILN_DTYPE_F16, 1), tir_const(&C, KILN_DTYPE_F16, 0.0001)));
  CHECK(r->kind == TIR_FLOAT && r->u.f == 1.0); /* 1.0001 rounds to 1 in f16 */
  CHECK_SIMP(tir_call(&C, TIR_SQRT, 1, tir_const(&C, KILN_DTYPE_F32, 16), NULL, NULL), "4.0f");
  CHECK_SIMP(tir_call(&C, TIR_NEG, 1, I(5), NULL, NULL), "-5");
  CHECK_SIMP(tir_call(&C, TIR_FMOD, 2, tir_const(&C, KILN_DTYPE_F32, -7.5),
                      tir_const(&C, KILN_DTYPE_F32, 2), NULL),
             "-1.5f");
  volatile float one = 1.0f; /* libm at run time, as the fold uses */
  r = tir_simplify_expr(&C, tir_call(&C, TIR_ATAN, 1, tir_const(&C, KILN_DTYPE_F32, 1), NULL, NULL));
  CHECK(r->kind == TIR_FLOAT && r->u.f == (double)atanf(one));
  CHECK_SIMP(tir_cast(&C, KILN_DTYPE_F32, I(3)), "3.0f");
  /* Bools. */
  CHECK_SIMP(BIN(TIR_LT, I(1), I(2)), "true");
  CHECK_SIMP(BIN(TIR_AND, BIN(TIR_LT, I(1), I(2)), BIN(TIR_GE, I(1), I(2))), "false");
  CHECK_SIMP(tir_call(&C, TIR_NOT, 1, BIN(TIR_LT, I(1), I(2)), NULL, NULL), "false");
  CHECK_SIMP(BIN(TIR_LT, tir_const(&C, KILN_DTYPE_F32, 1), tir_const(&C, KILN_DTYPE_F32, 0.5)),
             "false");
  /* IsNaN / IsInf are comparisons: NaN != NaN folds to true, +inf == +inf
   * to true, and x != x on a float value is never folded to false. */
  CHECK_SIMP(BIN(TIR_NE, tir_const(&C, KILN_DTYPE_F32, NAN), tir_const(&C, KILN_DTYPE_F32, NAN)), "true");
  CHECK_SIMP(BIN(TIR_EQ, tir_const(&C, KILN_DTYPE_F32, INFINITY), tir_const(&C, KILN_DTYPE_F32, INFINITY)),
             "true");
  const tir_expr_t* fv = tir_cast(&C, KILN_DTYPE_F32, R(tir_var(&C, "fx")));
  r = tir_simplify_expr(&C, BIN(TIR_NE, fv, fv));
  CHECK(r->kind == TIR_BINARY && r->u.bin.op == TIR_NE);
}

static void test_simplify_identities(void) {
  ctx_reset();
  tir_var_t* x = tir_var(&C, "x");
  tir_var_t* y = tir_var(&C, "y");
  tir_buffer_t* F = gbuf("F", KILN_DTYPE_F32, 1, SHP(4));
  tir_buffer_t* N = gbuf("N", KILN_DTYPE_I32, 1, SHP(4));
  const tir_expr_t* f = LD(F, I(0));
  const tir_expr_t* n = LD(N, I(0));
  CHECK_SIMP(ADD(R(x), I(0)), "x");
  CHECK_SIMP(MUL(I(1), R(x)), "x");
  CHECK_SIMP(MUL(R(x), I(0)), "0");
  CHECK_SIMP(SUB(R(x), R(x)), "0");
  CHECK_SIMP(ADD(MUL(ADD(R(x), I(1)), I(4)), SUB(R(y), I(4))), "((x * 4) + y)");
  CHECK_SIMP(SUB(I(5), R(x)), "(5 - x)");
  CHECK_SIMP(ADD(MUL(MUL(R(x), I(2)), I(3)), R(x)), "(x * 7)");
  CHECK_SIMP(MUL(tir_const(&C, KILN_DTYPE_I32, 0), n), "i32(0)");
  CHECK_SIMP(ADD(n, tir_const(&C, KILN_DTYPE_I32, 0)), "N[0]");
  /* Floats: only the exact identities. */
  CHECK_SIMP(MUL(f, tir_const(&C, KILN_DTYPE_F32, 1)), "F[0]");
  CHECK_SIMP(BIN(TIR_DIV, f, tir_const(&C, KILN_DTYPE_F32, 1)), "F[0]");
  CHECK_SIMP(MUL(f, tir_const(&C, KILN_DTYPE_F32, 0)), "(F[0] * 0.0f)");
  CHECK_SIMP(ADD(f, tir_const(&C, KILN_DTYPE_F32, 0)), "(F[0] + 0.0f)");
  /* Selects and logic. */
  CHECK_SIMP(tir_select(&C, BIN(TIR_LT, I(3), I(2)), f, tir_const(&C, KILN_DTYPE_F32, 2)), "2.0f");
  CHECK_SIMP(tir_select(&C, BIN(TIR_LT, n, tir_const(&C, KILN_DTYPE_I32, 2)), f, f), "F[0]");
  const tir_expr_t* c = BIN(TIR_LT, f, tir_const(&C, KILN_DTYPE_F32, 2));
  CHECK_SIMP(BIN(TIR_AND, c, tir_const(&C, KILN_DTYPE_BOOL, 1)), "(F[0] < 2.0f)");
  CHECK_SIMP(BIN(TIR_OR, c, tir_const(&C, KILN_DTYPE_BOOL, 1)), "true");
  CHECK_SIMP(tir_call(&C, TIR_NOT, 1, tir_call(&C, TIR_NOT, 1, c, NULL, NULL), NULL, NULL),
             "(F[0] < 2.0f)");
  CHECK_SIMP(BIN(TIR_AND, c, c), "(F[0] < 2.0f)");
  CHECK_SIMP(tir_call(&C, TIR_NOT, 1, BIN(TIR_LT, n, tir_const(&C, KILN_DTYPE_I32, 2)), NULL, NULL),
             "(N[0] >= i32(2))");
  CHECK_SIMP(tir_select(&C, tir_call(&C, TIR_NOT, 1, c, NULL, NULL), I(1), I(2)),
             "select(F[0] < 2.0f, 2, 1)");
  /* Comparisons decided on the difference. */
  CHECK_SIMP(BIN(TIR_GT, ADD(R(x), I(1)), R(x)), "true");
  CHECK_SIMP(BIN(TIR_EQ, MUL(R(x), I(2)), ADD(R(x), R(x))), "true");
}

/* Simplifies |e| inside loops x: 0..ex, y: 0..ey (through a store). */
static const char* simp_in_loops(const tir_expr_t* e, tir_var_t* x, int64_t ex, tir_var_t* y,
                                 int64_t ey) {
  tir_buffer_t* O = gbuf("O", KILN_DTYPE_I64, 1, SHP(1));
  const tir_stmt_t* s = FOR(x, ex, FOR(y, ey, ST(O, e, I(0))));
  s = tir_simplify_stmt(&C, s);
  while (s->kind == TIR_FOR) s = s->u.loop.body;
  if (s->kind != TIR_STORE) return "<not a store>";
  return expr_str(s->u.store.value);
}

static void test_simplify_index_arith(void) {
  ctx_reset();
  tir_var_t* o = tir_var(&C, "o");
  tir_var_t* i = tir_var(&C, "i");
  const tir_expr_t* w = ADD(MUL(R(o), I(16)), R(i));
  /* (a*k + b) // k and % k with 0 <= b < k. */
  CHECK_STR(simp_in_loops(BIN(TIR_FLOORDIV, w, I(16)), o, 4, i, 16), "o");
  CHECK_STR(simp_in_loops(BIN(TIR_FLOORMOD, w, I(16)), o, 4, i, 16), "i");
  CHECK_STR(simp_in_loops(BIN(TIR_FLOORDIV, ADD(w, I(32)), I(16)), o, 4, i, 16), "(o + 2)");
  CHECK_STR(simp_in_loops(BIN(TIR_FLOORMOD, ADD(w, I(35)), I(16)), o, 4, i, 13), "(i + 3)");
  /* The remainder is not within one period: the dividend stays whole (guards
   * of split loops bound it), the multiples of k vanish under %. */
  CHECK_STR(simp_in_loops(BIN(TIR_FLOORDIV, ADD(MUL(R(o), I(2)), R(i)), I(2)), o, 4, i, 3),
            "(((o * 2) + i) // 2)");
  CHECK_STR(simp_in_loops(BIN(TIR_FLOORMOD, ADD(MUL(R(o), I(2)), R(i)), I(2)), o, 4, i, 3),
            "(i % 2)");
  /* (g*x + r) // (g*k') == x // k' and % == g * (x % k') + r for 0 <= r < g
   * (a register tile's rows against an image width the tile height
   * divides: the rows share one base); a remainder past g stays whole. */
  CHECK_STR(simp_in_loops(BIN(TIR_FLOORDIV, w, I(64)), o, 8, i, 16), "(o // 4)");
  CHECK_STR(simp_in_loops(BIN(TIR_FLOORMOD, w, I(64)), o, 8, i, 16), "(i + ((o % 4) * 16))");
  CHECK_STR(simp_in_loops(BIN(TIR_FLOORDIV, ADD(MUL(R(o), I(14)), R(i)), I(112)), o, 896, i, 14), "(o // 8)");
  CHECK_STR(simp_in_loops(BIN(TIR_FLOORDIV, ADD(MUL(R(o), I(16)), R(i)), I(64)), o, 8, i, 17),
            "(((o * 16) + i) // 64)");
  /* Common factors cancel. */
  CHECK_STR(simp_in_loops(BIN(TIR_FLOORDIV, MUL(R(o), I(16)), I(64)), o, 8, i, 16), "(o // 4)");
  CHECK_STR(simp_in_loops(BIN(TIR_FLOORMOD, MUL(R(o), I(16)), I(64)), o, 8, i, 16),
            "((o % 4) * 16)");
  /* Nested floordiv / floormod. */
  CHECK_STR(simp_in_loops(BIN(TIR_FLOORDIV, BIN(TIR_FLOORDIV, R(o), I(4)), I(2)), o, 100, i, 1),
            "(o // 8)");
  CHECK_STR(simp_in_loops(BIN(TIR_FLOORMOD, BIN(TIR_FLOORMOD, R(o), I(8)), I(4)), o, 100, i, 2),
            "(o % 4)");
  CHECK_STR(simp_in_loops(BIN(TIR_FLOORMOD, R(o), I(16)), o, 16, i, 2), "o");
  CHECK_STR(simp_in_loops(BIN(TIR_FLOORDIV, R(o), I(16)), o, 16, i, 2), "0");
  /* (x // a) * a + x % a == x: splitting then re-fusing. */
  const tir_expr_t* rf =
      ADD(MUL(BIN(TIR_FLOORDIV, R(o), I(8)), I(8)), BIN(TIR_FLOORMOD, R(o), I(8)));
  CHECK_STR(simp_in_loops(rf, o, 100, i, 2), "o");
  /* min / max decided by bounds (the extent-1 loop i is inlined as 0). */
  CHECK_STR(simp_in_loops(BIN(TIR_MIN, R(o), I(20)), o, 16, i, 2), "o");
  CHECK_STR(simp_in_loops(BIN(TIR_MAX, R(o), I(20)), o, 16, i, 2), "20");
  CHECK_STR(simp_in_loops(BIN(TIR_MIN, ADD(R(o), I(1)), R(o)), o, 16, i, 2), "o");
  CHECK_STR(simp_in_loops(BIN(TIR_MIN, R(o), R(i)), o, 16, i, 2), "min(o, i)");
  CHECK_STR(simp_in_loops(ADD(R(o), R(i)), o, 16, i, 1), "o");
  /* Division by a bounded positive expression. */
  CHECK_STR(simp_in_loops(BIN(TIR_FLOORDIV, R(i), ADD(R(o), I(8))), o, 16, i, 8), "0");
  /* select decided by bounds. */
  CHECK_STR(simp_in_loops(tir_select(&C, BIN(TIR_LT, R(o), I(16)), R(o), I(0)), o, 16, i, 2), "o");
}

/* A fused 4-d loop split by a non-dividing factor: after simplification the
 * guard still bounds every index (regression: rewriting f // 64 // 3 into
 * (o*4 + i // 64) // 3 hid the guard from the verifier). */
static void test_simplify_split_fused_guard(void) {
  ctx_reset();
  tir_buffer_t* Y = gbuf("Y", KILN_DTYPE_F32, 4, SHP(2, 3, 8, 8));
  tir_var_t* o = tir_var(&C, "f.o");
  tir_var_t* i = tir_var(&C, "f.i");
  const tir_expr_t* f = ADD(MUL(R(o), I(256)), R(i));
  const tir_stmt_t* st =
      ST(Y, tir_const(&C, KILN_DTYPE_F32, 1), BIN(TIR_FLOORDIV, BIN(TIR_FLOORDIV, f, I(64)), I(3)),
         BIN(TIR_FLOORMOD, BIN(TIR_FLOORDIV, f, I(64)), I(3)),
         BIN(TIR_FLOORMOD, BIN(TIR_FLOORDIV, f, I(8)), I(8)), BIN(TIR_FLOORMOD, f, I(8)));
  st = tir_if(&C, BIN(TIR_LT, f, I(384)), st, NULL);
  tir_func_t* fn = func1("fused", Y, NULL, FOR(o, 2, FOR(i, 256, st)));
  CHECK_OK(tir_verify(fn));
  tir_func_t* g = tir_simplify_func(&C, fn);
  CHECK_OK(tir_verify(g));
  CHECK_HAS(func_str(g),
            "Y[((f.o * 256) + f.i) // 192, (((f.o * 256) + f.i) // 64) % 3, "
            "(f.i // 8) % 8, f.i % 8] = 1.0f");
}

static void test_simplify_guards(void) {
  ctx_reset();
  tir_buffer_t* A = gbuf("A", KILN_DTYPE_F32, 1, SHP(64));
  tir_buffer_t* O = gbuf("O", KILN_DTYPE_I64, 1, SHP(1));
  tir_var_t* x = tir_var(&C, "x");
  tir_var_t* y = tir_var(&C, "y");
  const tir_expr_t* one = tir_const(&C, KILN_DTYPE_F32, 1);
  /* A nested branch contradicting its guard disappears ... */
  const tir_stmt_t* in = tir_if(&C, BIN(TIR_GE, R(x), I(4)), ST(A, one, R(x)), ST(A, one, I(0)));
  const tir_stmt_t* s =
      tir_simplify_stmt(&C, FOR(x, 16, tir_if(&C, BIN(TIR_LT, R(x), I(4)), in, NULL)));
  CHECK_STR(stmt_str(s), "for (x: 0..16) {\n  if (x < 4) {\n    A[0] = 1.0f\n  }\n}\n");
  /* ... relations too: i < j then j > i is true. */
  s = tir_simplify_stmt(
      &C, FOR(x, 16,
              FOR(y, 16,
                  tir_if(&C, BIN(TIR_LT, R(x), R(y)),
                         tir_if(&C, BIN(TIR_GT, R(y), R(x)), ST(A, one, R(x)), NULL), NULL))));
  CHECK_HAS(stmt_str(s), "    if (x < y) {\n      A[x] = 1.0f\n    }\n");
  /* A guard that pins a sum folds it: 4x + y == 4 makes 17 * (4x + y) 68. */
  const tir_expr_t* xy = ADD(MUL(R(x), I(4)), R(y));
  s = tir_simplify_stmt(
      &C,
      FOR(x, 4, FOR(y, 4, tir_if(&C, BIN(TIR_EQ, xy, I(4)), ST(O, MUL(xy, I(17)), I(0)), NULL))));
  CHECK_HAS(stmt_str(s), "O[0] = 68\n");
  /* Coefficients reduce modulo the divisor. */
  CHECK_STR(simp_in_loops(BIN(TIR_FLOORMOD, MUL(R(y), I(17)), I(4)), x, 2, y, 8), "(y % 4)");
}

static void test_simplify_stmts(void) {
  ctx_reset();
  tir_buffer_t* A = gbuf("A", KILN_DTYPE_F32, 1, SHP(64));
  tir_buffer_t* B = gbuf("B", KILN_DTYPE_F32, 1, SHP(64));
  tir_var_t* o = tir_var(&C, "w.o");
  tir_var_t* i = tir_var(&C, "w.i");
  tir_var_t* z = tir_var(&C, "z");
  tir_var_t* u = tir_var(&C, "u");
  const tir_expr_t* w = ADD(MUL(R(o), I(16)), ADD(R(i), R(z)));
  /* Provable guard (64 = 4*16) removed; extent-1 loop z inlined; dead loop
   * u dropped; nested seqs flattened. */
  const tir_stmt_t* st = tir_if(&C, BIN(TIR_LT, w, I(64)), ST(B, LD(A, w), w), NULL);
  const tir_stmt_t* dead = FOR(u, 0, ST(B, LD(A, R(u)), R(u)));
  const tir_stmt_t* inner = tir_seq2(&C, tir_seq2(&C, FOR(z, 1, st), dead),
                                     ST(A, tir_const(&C, KILN_DTYPE_F32, 0), R(o)));
  const tir_stmt_t* s = FOR(o, 4, FOR(i, 16, inner));
  tir_func_t* f = tir_simplify_func(&C, func1("s", A, B, s));
  CHECK_STR(func_str(f),
            "kernel s(A: f32[64] global, B: f32[64] global) {\n"
            "  for (w.o: 0..4) {\n"
            "    for (w.i: 0..16) {\n"
            "      B[(w.o * 16) + w.i] = A[(w.o * 16) + w.i]\n"
            "      A[w.o] = 0.0f\n"
            "    }\n"
            "  }\n"
            "}\n");
  CHECK_OK(tir_verify(f));
  /* A non-provable guard stays; a nested identical guard folds. */
  ctx_reset();
  A = gbuf("A", KILN_DTYPE_F32, 1, SHP(50));
  o = tir_var(&C, "w.o");
  i = tir_var(&C, "w.i");
  w = ADD(MUL(R(o), I(16)), R(i));
  const tir_expr_t* g = BIN(TIR_LT, w, I(50));
  st = tir_if(&C, g,
              tir_if(&C, BIN(TIR_LT, w, I(50)), ST(A, tir_const(&C, KILN_DTYPE_F32, 1), w), NULL),
              NULL);
  s = tir_simplify_stmt(&C, FOR(o, 4, FOR(i, 16, st)));
  CHECK_STR(stmt_str(s),
            "for (w.o: 0..4) {\n"
            "  for (w.i: 0..16) {\n"
            "    if (((w.o * 16) + w.i) < 50) {\n"
            "      A[(w.o * 16) + w.i] = 1.0f\n"
            "    }\n"
            "  }\n"
            "}\n");
  /* An if whose branch is empty goes away; else-only becomes a negated if. */
  st = tir_if(&C, g, FOR(u, 0, ST(A, tir_const(&C, KILN_DTYPE_F32, 1), I(0))),
              ST(A, tir_const(&C, KILN_DTYPE_F32, 2), I(0)));
  s = tir_simplify_stmt(&C, FOR(o, 4, FOR(i, 16, st)));
  CHECK_HAS(stmt_str(s), "if (((w.o * 16) + w.i) >= 50) {\n      A[0] = 2.0f\n");
  /* Everything dead: an empty sequence, never NULL. */
  s = tir_simplify_stmt(&C, FOR(u, 0, ST(A, tir_const(&C, KILN_DTYPE_F32, 1), I(0))));
  CHECK(s && s->kind == TIR_SEQ && s->u.seq.n == 0);
  /* Unchanged trees are shared. */
  const tir_stmt_t* clean = FOR(o, 4, ST(A, tir_const(&C, KILN_DTYPE_F32, 1), R(o)));
  CHECK(tir_simplify_stmt(&C, clean) == clean);
  /* Bound loops of extent 1 stay, their variable folds to 0. */
  tir_var_t* tx = tir_var(&C, "tx");
  s = tir_simplify_stmt(&C,
                        tir_for_bound(&C, tx, 1, TIR_THREAD_X,
                                      ST(A, tir_const(&C, KILN_DTYPE_F32, 1), ADD(R(tx), I(3)))));
  CHECK_STR(stmt_str(s), "bound(threadIdx.x) for (tx: 0..1) {\n  A[3] = 1.0f\n}\n");
}

/* A select may evaluate both branches: facts from its condition must not
 * unclamp a load index inside a branch. */
static void test_simplify_keeps_clamps_in_select(void) {
  ctx_reset();
  tir_buffer_t* A = gbuf("A", KILN_DTYPE_F32, 1, SHP(8));
  tir_var_t* x = tir_var(&C, "x");
  const tir_expr_t* sel = tir_select(&C, BIN(TIR_LT, R(x), I(8)), LD(A, BIN(TIR_MIN, R(x), I(7))),
                                     tir_const(&C, KILN_DTYPE_F32, 0));
  const tir_stmt_t* s = tir_simplify_stmt(&C, FOR(x, 12, ST(A, sel, I(0))));
  CHECK_HAS(stmt_str(s), "A[min(x, 7)]");
  /* The value itself can use the condition. */
  sel = tir_select(&C, BIN(TIR_LT, R(x), I(8)), BIN(TIR_MIN, R(x), I(7)), I(0));
  tir_buffer_t* O = gbuf("O", KILN_DTYPE_I64, 1, SHP(1));
  s = tir_simplify_stmt(&C, FOR(x, 12, ST(O, sel, I(0))));
  CHECK_HAS(stmt_str(s), "O[0] = select(x < 8, x, 0)");
}

static void test_simplify_conv_before_after(void) {
  ctx_reset();
  /* A conv whose outer loops have extent 1 and an always-true guard part. */
  tir_func_t* f = conv_kernel(true);
  tir_func_t* g = tir_simplify_func(&C, f);
  const char* t = func_str(g);
  CHECK(strstr(t, "for (n: 0..1)") == NULL);
  CHECK_HAS(t, "Y[0, oc, h, w] = 0.0f\n");
  CHECK_HAS(t, "X[0, ic, (h + kh) - 1, (w + kw) - 1]");
  CHECK_OK(tir_verify(g));
}

/* ---- randomized soundness: bounds contain every value; simplified
 * expressions evaluate like the originals (under loop ranges and a guard) ---- */

static uint64_t g_rng = 0x9E3779B97F4A7C15ull;
static uint32_t rnd(uint32_t n) {
  g_rng ^= g_rng << 13;
  g_rng ^= g_rng >> 7;
  g_rng ^= g_rng << 17;
  return (uint32_t)(g_rng % n);
}

#define FZ_VARS 3
static tir_var_t* g_fv[FZ_VARS];
static int64_t g_fext[FZ_VARS];

/* Evaluates an I64/bool expression on the tensor-IR interpreter; false on
 * division by zero. */
static bool eval(const tir_expr_t* e, const int64_t* val, int64_t* out) {
  tir_value_t v;
  kiln_status_t st = tir_interp_eval_expr(e, FZ_VARS, (const tir_var_t* const*)g_fv, val, &v);
  if (st) {
    kiln_status_free(st);
    return false;
  }
  *out = v.i;
  return true;
}

static const tir_expr_t* gen_bool(int depth);

static const tir_expr_t* gen_int(int depth) {
  uint32_t r = depth <= 0 ? rnd(2) : rnd(12);
  switch (r) {
    case 0: return I((int64_t)rnd(21) - 6);
    case 1: return R(g_fv[rnd(FZ_VARS)]);
    case 2: return ADD(gen_int(depth - 1), gen_int(depth - 1));
    case 3: return SUB(gen_int(depth - 1), gen_int(depth - 1));
    case 4: return MUL(gen_int(depth - 1), I((int64_t)rnd(9) - 2));
    case 5: return BIN(TIR_FLOORDIV, gen_int(depth - 1), I((int64_t)rnd(8) + 1));
    case 6: return BIN(TIR_FLOORMOD, gen_int(depth - 1), I((int64_t)rnd(8) + 1));
    case 7: return BIN(rnd(2) ? TIR_MIN : TIR_MAX, gen_int(depth - 1), gen_int(depth - 1));
    case 8: return tir_select(&C, gen_bool(depth - 1), gen_int(depth - 1), gen_int(depth - 1));
    case 9: return MUL(ADD(MUL(R(g_fv[0]), I(4)), R(g_fv[1])), I((int64_t)rnd(3) + 1));
    case 10: /* split/fuse shapes */
      return BIN(rnd(2) ? TIR_FLOORDIV : TIR_FLOORMOD,
                 ADD(MUL(gen_int(depth - 1), I((int64_t)rnd(4) * 4 + 4)), gen_int(depth - 1)),
                 I((int64_t)rnd(3) * 4 + 4));
    default: return BIN(TIR_FLOORDIV, gen_int(depth - 1), ADD(R(g_fv[rnd(FZ_VARS)]), I(1)));
  }
}

static const tir_expr_t* gen_bool(int depth) {
  static const tir_binop_t cmps[6] = {TIR_EQ, TIR_NE, TIR_LT, TIR_LE, TIR_GT, TIR_GE};
  uint32_t r = depth <= 0 ? 0 : rnd(4);
  if (r == 1) return BIN(TIR_AND, gen_bool(depth - 1), gen_bool(depth - 1));
  if (r == 2) return BIN(TIR_OR, gen_bool(depth - 1), gen_bool(depth - 1));
  if (r == 3) return tir_call(&C, TIR_NOT, 1, gen_bool(depth - 1), NULL, NULL);
  return BIN(cmps[rnd(6)], gen_int(depth - 1), gen_int(depth - 1));
}

static void test_fuzz_bounds_and_simplify(void) {
  ctx_reset();
  tir_buffer_t* O = gbuf("O", KILN_DTYPE_I64, 1, SHP(1));
  int failures = 0;
  for (int iter = 0; iter < 3000 && failures < 5; ++iter) {
    if (iter % 500 == 0) ctx_reset(), O = gbuf("O", KILN_DTYPE_I64, 1, SHP(1));
    for (int k = 0; k < FZ_VARS; ++k) {
      g_fv[k] = tir_var(&C, k == 0 ? "x" : (k == 1 ? "y" : "z"));
      g_fext[k] = (int64_t)rnd(k == 2 ? 3 : 20) + 1;
    }
    const tir_expr_t* e = gen_int(4);
    const tir_expr_t* guard = rnd(2) ? gen_bool(2) : NULL;
    /* Bounds: every value lies inside. */
    int64_t lo[FZ_VARS], hi[FZ_VARS], blo = 0, bhi = -1;
    for (int k = 0; k < FZ_VARS; ++k) lo[k] = 0, hi[k] = g_fext[k] - 1;
    bool bounded = tir_expr_bounds(e, FZ_VARS, (const tir_var_t* const*)g_fv, lo, hi, &blo, &bhi);
    /* Simplify under loops (and the guard). */
    const tir_stmt_t* s = ST(O, e, I(0));
    if (guard) s = tir_if(&C, guard, s, NULL);
    for (int k = FZ_VARS - 1; k >= 0; --k) s = FOR(g_fv[k], g_fext[k], s);
    const tir_stmt_t* ss = tir_simplify_stmt(&C, s);
    const tir_expr_t* se = NULL;
    const tir_stmt_t* walk = ss;
    while (walk && (walk->kind == TIR_FOR || walk->kind == TIR_IF))
      walk = walk->kind == TIR_FOR ? walk->u.loop.body : walk->u.cond.then_s;
    if (walk && walk->kind == TIR_STORE) se = walk->u.store.value;
    for (int64_t x = 0; x < g_fext[0]; ++x)
      for (int64_t y = 0; y < g_fext[1]; ++y)
        for (int64_t z = 0; z < g_fext[2]; ++z) {
          int64_t val[FZ_VARS] = {x, y, z}, v = 0, g = 1, sv = 0;
          if (!eval(e, val, &v)) continue;
          if (bounded && (v < blo || v > bhi)) {
            ++failures;
            CHECK_MSG(false, "value %lld outside bounds [%lld, %lld] of %s at (%lld,%lld,%lld)",
                      (long long)v, (long long)blo, (long long)bhi, expr_str(e), (long long)x,
                      (long long)y, (long long)z);
            goto next;
          }
          if (guard && (!eval(guard, val, &g) || !g)) continue;
          if (!se) {
            ++failures;
            CHECK_MSG(false, "guarded store vanished for %s", expr_str(e));
            goto next;
          }
          if (!eval(se, val, &sv) || sv != v) {
            ++failures;
            char orig[sizeof g_etext];
            snprintf(orig, sizeof orig, "%s", expr_str(e));
            CHECK_MSG(false, "simplified %s -> %s: %lld != %lld at (%lld,%lld,%lld)", orig,
                      expr_str(se), (long long)sv, (long long)v, (long long)x, (long long)y,
                      (long long)z);
            goto next;
          }
        }
    /* Verifiability is preserved: a store Y[e] into a buffer sized to the
     * exact value range that the verifier accepts is still accepted after
     * simplification. */
    {
      int64_t vmin = INT64_MAX, vmax = INT64_MIN;
      for (int64_t x = 0; x < g_fext[0]; ++x)
        for (int64_t y = 0; y < g_fext[1]; ++y)
          for (int64_t z = 0; z < g_fext[2]; ++z) {
            int64_t val[FZ_VARS] = {x, y, z}, v, g = 1;
            if (guard && (!eval(guard, val, &g) || !g)) continue;
            if (!eval(e, val, &v)) goto next;
            if (v < vmin) vmin = v;
            if (v > vmax) vmax = v;
          }
      if (vmin < 0 || vmax < vmin || vmax > 100000) goto next;
      tir_buffer_t* Y = gbuf("Y", KILN_DTYPE_F32, 1, SHP(vmax + 1));
      const tir_stmt_t* ys = ST(Y, tir_const(&C, KILN_DTYPE_F32, 1), e);
      if (guard) ys = tir_if(&C, guard, ys, NULL);
      for (int k = FZ_VARS - 1; k >= 0; --k) ys = FOR(g_fv[k], g_fext[k], ys);
      tir_func_t* yf = func1("fz", Y, NULL, ys);
      kiln_status_t st = tir_verify(yf);
      if (st) {
        kiln_status_free(st); /* the analysis was not tight enough: fine */
        goto next;
      }
      tir_func_t* yg = tir_simplify_func(&C, yf);
      st = tir_verify(yg);
      if (st) {
        ++failures;
        static char orig[sizeof g_text];
        snprintf(orig, sizeof orig, "%s", func_str(yf));
        CHECK_MSG(false, "simplify broke verification: %s\nbefore:\n%s", kiln_status_message(st),
                  orig);
        kiln_status_free(st);
      }
    }
  next:;
  }
  CHECK(failures == 0);
}

/* tir_simplify on a 7-deep nest of ~50 nodes should take microseconds. */
static void test_simplify_speed(void) {
  ctx_reset();
  tir_buffer_t* X = gbuf("X", KILN_DTYPE_F32, 4, SHP(1, 64, 56, 56));
  tir_buffer_t* W = gbuf("W", KILN_DTYPE_F32, 4, SHP(64, 64, 3, 3));
  tir_buffer_t* Y = gbuf("Y", KILN_DTYPE_F32, 4, SHP(1, 64, 54, 54));
  const char* names[7] = {"n", "oc", "oh", "ow", "ic", "kh", "kw"};
  int64_t ext[7] = {1, 64, 54, 54, 64, 3, 3};
  tir_var_t* v[7];
  for (int k = 0; k < 7; ++k) v[k] = tir_var(&C, names[k]);
  const tir_expr_t* y = LD(Y, R(v[0]), R(v[1]), R(v[2]), R(v[3]));
  const tir_expr_t* x = LD(X, R(v[0]), R(v[4]), ADD(R(v[2]), R(v[5])), ADD(R(v[3]), R(v[6])));
  const tir_expr_t* wt = LD(W, R(v[1]), R(v[4]), R(v[5]), R(v[6]));
  const tir_stmt_t* s = ST(Y, ADD(y, MUL(x, wt)), R(v[0]), R(v[1]), R(v[2]), R(v[3]));
  for (int k = 6; k >= 0; --k) s = FOR(v[k], ext[k], s);
  const tir_buffer_t* p[3] = {X, W, Y};
  tir_func_t* f = tir_func(&C, "speed", 3, p, s);
  const int iters = 2000;
  struct timespec t0, t1;
  clock_gettime(CLOCK_MONOTONIC, &t0);
  for (int k = 0; k < iters; ++k) {
    CHECK(tir_simplify_func(&C, f) != NULL);
  }
  clock_gettime(CLOCK_MONOTONIC, &t1);
  double us =
      ((double)(t1.tv_sec - t0.tv_sec) * 1e9 + (double)(t1.tv_nsec - t0.tv_nsec)) / 1e3 / iters;
  printf("  tir_simplify_func on a 7-deep conv nest: %.2f us/call\n", us);
  CHECK_MSG(us < 200.0, "simplify took %.1f us", us);
  clock_gettime(CLOCK_MONOTONIC, &t0);
  for (int k = 0; k < iters; ++k) CHECK_OK(tir_verify(f));
  clock_gettime(CLOCK_MONOTONIC, &t1);
  us = ((double)(t1.tv_sec - t0.tv_sec) * 1e9 + (double)(t1.tv_nsec - t0.tv_nsec)) / 1e3 / iters;
  printf("  tir_verify on the same nest: %.2f us/call\n", us);
}

int main(void) {
  tir_ctx_init(&C, kiln_allocator_system());
  RUN(test_print_kernel);
  RUN(test_print_gpu_and_misc);
  RUN(test_bounds);
  RUN(test_verify_clean);
  RUN(test_verify_bounds);
  RUN(test_verify_relations);
  RUN(test_verify_data_indices);
  RUN(test_verify_structure);
  RUN(test_verify_scopes);
  RUN(test_verify_barriers_and_races);
  RUN(test_simplify_constants);
  RUN(test_simplify_identities);
  RUN(test_simplify_index_arith);
  RUN(test_simplify_split_fused_guard);
  RUN(test_simplify_guards);
  RUN(test_simplify_stmts);
  RUN(test_simplify_keeps_clamps_in_select);
  RUN(test_simplify_conv_before_after);
  RUN(test_fuzz_bounds_and_simplify);
  RUN(test_simplify_speed);
  tir_ctx_deinit(&C);
  return kiln_test_finish();
}
