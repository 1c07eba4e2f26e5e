/* Group-1 QLinearConv on the blocked NCHWc layout read from a blocked
 * input, the GEMM whose steps are dot4_u8i8 (vpdpbusd) where the CPU has
 * VNNI and dot2_i16 elsewhere (lowering/lower_nn_qconv_blocked.c): taps
 * read in place, from a copy padded with x's zero point where they fall
 * outside x, i8 activations made u8 (x + 128, the zero point folded into
 * the bias). Run on the CPU backend with u8 activations and blocks of 16,
 * i8 and blocks of 8, against the reference executor, bit for bit:
 *
 *   x f32 [1,22,9,9] -> QuantizeLinear -> a 3x3 pad 1 (the stem, plain
 *   input: quads gathered from the channel planes) -> b 3x3 pad 1 (22 input channels: a last quad and block past
 *   the channels) -> c 3x3 stride 2 pads (1,0,0,1) -> d 1x1 (flat) -> e 1x1
 *   stride 2 -> DequantizeLinear -> y.
 * KILN_TEST_NO_CPU=1 skips the native runs. */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "compiler/ref_exec.h"
#include "ir/op.h"
#include "lowering/fuse.h"
#include "lowering/layout.h"
#include "lowering/plan.h"
#include "targets/cpu/cpu_backend.h"
#include "q8_graph_util.h"
#include "testing.h"

#define CH 22

static void build(q8g_t* t) {
  memset(t, 0, sizeof *t);
  t->ok = CHECK_OK(kiln_graph_create(A(), &t->g)) && CHECK_OK(kiln_graph_set_opset(t->g, "", 17));
  if (!t->ok) return;
  kiln_shape_t xs = kiln_shape_make(4, DIMS(1, CH, 9, 9));
  KILN_ASSERT(!kiln_array_alloc(A(), KILN_DTYPE_F32, &xs, &t->x));
  for (int64_t i = 0; i < kiln_array_numel(&t->x); ++i) kiln_store_f64(KILN_DTYPE_F32, t->x.data, (size_t)i, 3 * rnd());
  t->ok = CHECK_OK(kiln_graph_add_input(t->g, "x", KILN_DTYPE_F32, &xs, NULL));
  init(t, "x_s", KILN_DTYPE_F32, 0, NULL, 0.02, 0.03);
  if (q8_act_type == KILN_DTYPE_U8) init(t, "x_z", KILN_DTYPE_U8, 0, NULL, 120, 136);
  else init(t, "x_z", KILN_DTYPE_I8, 0, NULL, -20, 20);
  node(t, "QuantizeLinear", "q", 3, NAMES("x", "x_s", "x_z"), "xq", 0, NULL);
  const kiln_attr_t p1[1] = {ints("pads", 4, DIMS(1, 1, 1, 1))};
  const kiln_attr_t s2asym[2] = {ints("strides", 2, DIMS(2, 2)), ints("pads", 4, DIMS(1, 0, 0, 1))};
  const kiln_attr_t s2[1] = {ints("strides", 2, DIMS(2, 2))};
  qconv(t, "a", "xq", "x_s", "x_z", CH, CH, 3, 1, 3000, 1, p1);      /* [1,22,9,9] */
  qconv(t, "b", "a_o", "a_s", "a_z", CH, CH, 3, 1, 3000, 1, p1);     /* [1,22,9,9] */
  qconv(t, "c", "b_o", "b_s", "b_z", CH, 20, 3, 1, 0, 2, s2asym);    /* [1,20,4,4] */
  qconv(t, "d", "c_o", "c_s", "c_z", 20, 24, 1, 1, 2000, 0, NULL);   /* [1,24,4,4] */
  qconv(t, "e", "d_o", "d_s", "d_z", 24, 16, 1, 1, 2000, 1, s2);     /* [1,16,2,2] */
  node(t, "DequantizeLinear", "dq", 3, NAMES("e_o", "e_s", "e_z"), "y", 0, NULL);
  if (t->ok) t->ok = CHECK_OK(kiln_graph_add_output(t->g, "y"));
}

static void run(int32_t block, kiln_dtype_t act) {
  q8_act_type = act;
  q8g_t t;
  build(&t);
  kiln_array_t want;
  kiln_plan_t* p = NULL;
  if (q8_ref_and_plan(&t, block, &want, &p)) {
    char what[32];
    snprintf(what, sizeof what, "block %d %s", (int)block, act == KILN_DTYPE_U8 ? "u8" : "i8");
    static const char* const blocked[] = {"a", "b", "c", "d", "e"};
    q8_check_blocked(p, t.g, blocked, 5, what);
    q8_check_cpu_exact(p, &t.x, &want, what);
  }
  q8_case_free(&t, &want, p);
}

/* (two of the four pairs: each case compiles its C) */
static void test_u8_block16(void) { run(16, KILN_DTYPE_U8); }
static void test_i8_block8(void) { run(8, KILN_DTYPE_I8); }

int main(void) {
  RUN(test_u8_block16);
  RUN(test_i8_block8);
  return kiln_test_finish();
}
