/* QLinearAdd on the CPU (lowering/lower_nn_quant.c) against the reference
 * executor, bit for bit, over every pair of input bytes: a [1,1,256,256]
 * with a[i][j] = i (the graph's input), b the constant with b[i][j] = j,
 * for seeded scales and zero points, u8 and i8. The CPU runs its vector
 * loop (the C printer's f32 vectors): each dequantized operand is a
 * product that must be rounded to f32 before the add (the C printer's
 * vmulr), as the reference's DequantizeLinear does; a product fused into
 * the add (an FMA) changes some of these 65536 results. The output is
 * dequantized to f32 for the comparison. KILN_TEST_NO_CPU=1 skips the
 * native runs. */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "compiler/ref_exec.h"
#include "lowering/plan.h"
#include "q8_graph_util.h"
#include "testing.h"

/* Initializer |name|: one f32 or byte scalar. */
static void scalar(q8g_t* t, const char* name, kiln_dtype_t dt, double v) {
  if (!t->ok) return;
  kiln_array_t a;
  kiln_shape_t s = kiln_shape_make(0, NULL);
  KILN_ASSERT(!kiln_array_alloc(A(), dt, &s, &a));
  kiln_store_f64(dt, a.data, 0, v);
  t->ok = CHECK_OK(kiln_graph_add_initializer(t->g, name, &a, NULL));
}

/* Seeded parameters in |dt| (u8 or i8): scales as a ResNet's residual adds
 * have them (0.005 .. 0.1, y's 0.01 .. 0.2), or with |ties| a's and b's
 * scale s and y's 2s, so that every odd (a - a_zp) + (b - b_zp) is a tie
 * of the rounding, which the products' roundings decide (where an FMA
 * skips one, thousands of the results change). */
static void build(q8g_t* t, kiln_dtype_t dt, bool ties) {
  memset(t, 0, sizeof *t);
  t->ok = CHECK_OK(kiln_graph_create(A(), &t->g)) && CHECK_OK(kiln_graph_set_opset(t->g, "", 17));
  if (!t->ok) return;
  const double off = dt == KILN_DTYPE_I8 ? -128.0 : 0.0;
  kiln_shape_t s = kiln_shape_make(4, DIMS(1, 1, 256, 256));
  kiln_array_t b;
  KILN_ASSERT(!kiln_array_alloc(A(), dt, &s, &t->x));
  KILN_ASSERT(!kiln_array_alloc(A(), dt, &s, &b));
  for (int64_t i = 0; i < 256; ++i)
    for (int64_t j = 0; j < 256; ++j) {
      kiln_store_f64(dt, t->x.data, (size_t)(i * 256 + j), (double)i + off);
      kiln_store_f64(dt, b.data, (size_t)(i * 256 + j), (double)j + off);
    }
  t->ok = CHECK_OK(kiln_graph_add_input(t->g, "a", dt, &s, NULL)) &&
          CHECK_OK(kiln_graph_add_initializer(t->g, "b", &b, NULL));
  if (!t->ok) kiln_array_free(A(), &b);
  const float sc = (float)(0.0525 + 0.0475 * rnd());
  scalar(t, "a_s", KILN_DTYPE_F32, sc);
  scalar(t, "a_z", dt, (double)(int64_t)(128 + 100 * rnd()) + off);
  scalar(t, "b_s", KILN_DTYPE_F32, ties ? sc : 0.0525 + 0.0475 * rnd());
  scalar(t, "b_z", dt, (double)(int64_t)(128 + 100 * rnd()) + off);
  scalar(t, "y_s", KILN_DTYPE_F32, ties ? 2.0 * sc : 0.105 + 0.095 * rnd());
  scalar(t, "y_z", dt, (double)(int64_t)(128 + 100 * rnd()) + off);
  node(t, "QLinearAdd", "add", 8, NAMES("a", "a_s", "a_z", "b", "b_s", "b_z", "y_s", "y_z"), "yq", 0, NULL);
  node(t, "DequantizeLinear", "dq", 3, NAMES("yq", "y_s", "y_z"), "y", 0, NULL);
  if (t->ok) t->ok = CHECK_OK(kiln_graph_add_output(t->g, "y"));
}

static void check_case(kiln_dtype_t dt, bool ties, int k) {
  q8g_t t;
  build(&t, dt, ties);
  kiln_array_t want;
  memset(&want, 0, sizeof want);
  kiln_ref_options_t ro;
  kiln_ref_options_default(&ro);
  kiln_plan_options_t po = {.target = KILN_TARGET_CLASS_CPU, .threads = 2};
  kiln_plan_t* p = NULL;
  if (t.ok && CHECK_OK(kiln_graph_prepare(t.g)) && CHECK_OK(kiln_ref_run(t.g, &t.x, &ro, &want)) &&
      CHECK_OK(kiln_plan_build(t.g, &po, A(), &p))) {
    char what[48];
    snprintf(what, sizeof what, "%s%s case %d", dt == KILN_DTYPE_U8 ? "u8" : "i8", ties ? " ties" : "", k);
    q8_check_cpu_exact(p, &t.x, &want, what);
  }
  kiln_array_free(A(), &want);
  kiln_plan_destroy(p);
  kiln_array_free(A(), &t.x);
  kiln_graph_destroy(t.g);
}

static void test_all_pairs_u8(void) {
  for (int k = 0; k < 4; ++k) check_case(KILN_DTYPE_U8, false, k);
  for (int k = 0; k < 2; ++k) check_case(KILN_DTYPE_U8, true, k);
}

static void test_all_pairs_i8(void) {
  check_case(KILN_DTYPE_I8, false, 0);
  check_case(KILN_DTYPE_I8, true, 1);
}

int main(void) {
  RUN(test_all_pairs_u8);
  RUN(test_all_pairs_i8);
  return kiln_test_finish();
}
