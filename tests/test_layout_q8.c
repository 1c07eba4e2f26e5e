/* The int8 ops on the blocked NCHWc layout (lowering/layout_q8.c,
 * lowering/lower_nn_qconv_blocked.c): an int8 graph shaped like a
 * MobileNetV2 block, built here, run on the CPU backend with blocks of 8
 * and 16 against the reference executor, bit for bit (every sum is exact
 * and the requantization is the reference's arithmetic).
 *
 *   x f32 [1,3,13,13] -> QuantizeLinear (u8) -> stem QLinearConv 3x3
 *   stride 2 pad 1 (3 input channels: an odd count, read from the plain
 *   quantized input; per-channel weights, bias) -> u8 MaxPool 3x3 pad 1
 *   -> depthwise 3x3 pad 1 ->
 *   1x1 QLinearConv (no bias) -> QLinearAdd with the depthwise output ->
 *   depthwise 3x3 stride 2 with asymmetric pads and a bias near 2^24 (the
 *   i32 sums, not the f32 ones) -> DequantizeLinear -> y.
 * 20 channels: the last block has lanes past the channels. Checked too:
 * which nodes run blocked (every conv, the pool and the add), and that only the
 * model's edges reorder. KILN_TEST_NO_CPU=1 skips the native runs. */
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

#define CH 20

static void build(q8g_t* t) {
  memset(t, 0, sizeof *t);
  t->ok = CHECK_OK(kiln_graph_create(A(), &t->g)) && CHECK_OK(kiln_graph_set_opset(t->g, "", 17));
  if (!t->ok) return;
  kiln_shape_t xs = kiln_shape_make(4, DIMS(1, 3, 13, 13));
  KILN_ASSERT(!kiln_array_alloc(A(), KILN_DTYPE_F32, &xs, &t->x));
  for (int64_t i = 0; i < kiln_array_numel(&t->x); ++i) kiln_store_f64(KILN_DTYPE_F32, t->x.data, (size_t)i, 3 * rnd());
  t->ok = CHECK_OK(kiln_graph_add_input(t->g, "x", KILN_DTYPE_F32, &xs, NULL));
  init(t, "x_s", KILN_DTYPE_F32, 0, NULL, 0.02, 0.03);
  init(t, "x_z", KILN_DTYPE_U8, 0, NULL, 120, 136);
  node(t, "QuantizeLinear", "q", 3, NAMES("x", "x_s", "x_z"), "xq", 0, NULL);
  const kiln_attr_t s2p1[2] = {ints("strides", 2, DIMS(2, 2)), ints("pads", 4, DIMS(1, 1, 1, 1))};
  const kiln_attr_t p1[1] = {ints("pads", 4, DIMS(1, 1, 1, 1))};
  const kiln_attr_t s2asym[2] = {ints("strides", 2, DIMS(2, 2)), ints("pads", 4, DIMS(0, 1, 1, 0))};
  qconv(t, "stem", "xq", "x_s", "x_z", 3, CH, 3, 1, 3000, 2, s2p1);           /* [1,20,7,7] */
  const kiln_attr_t pool[2] = {ints("kernel_shape", 2, DIMS(3, 3)), ints("pads", 4, DIMS(1, 1, 1, 1))};
  node(t, "MaxPool", "pool", 1, NAMES("stem_o"), "pool_o", 2, pool);
  qconv(t, "dw", "pool_o", "stem_s", "stem_z", CH, CH, 3, CH, 2000, 1, p1);   /* [1,20,7,7] */
  qconv(t, "pw", "dw_o", "dw_s", "dw_z", CH, CH, 1, 1, 0, 0, NULL);           /* [1,20,7,7] */
  init(t, "add_s", KILN_DTYPE_F32, 0, NULL, 0.03, 0.06);
  init(t, "add_z", KILN_DTYPE_U8, 0, NULL, 110, 140);
  node(t, "QLinearAdd", "add", 8, NAMES("pw_o", "pw_s", "pw_z", "dw_o", "dw_s", "dw_z", "add_s", "add_z"), "add_o",
       0, NULL);
  qconv(t, "dw2", "add_o", "add_s", "add_z", CH, CH, 3, CH, 20000000, 2, s2asym); /* [1,20,4,4] */
  node(t, "DequantizeLinear", "dq", 3, NAMES("dw2_o", "dw2_s", "dw2_z"), "y", 0, NULL);
  if (t->ok) t->ok = CHECK_OK(kiln_graph_add_output(t->g, "y"));
}

static void test_blocked(int32_t block) {
  q8g_t t;
  build(&t);
  kiln_array_t want;
  kiln_plan_t* p = NULL;
  if (q8_ref_and_plan(&t, block, &want, &p)) {
    const kiln_graph_t* g = t.g;
    char what[32];
    snprintf(what, sizeof what, "block %d", (int)block);
    static const char* const blocked[] = {"stem", "pool", "dw", "pw", "add", "dw2"};
    q8_check_blocked(p, g, blocked, 6, what);
    CHECK(!p->layout->node_blocked[node_index(g, "q")] && !p->layout->node_blocked[node_index(g, "dq")]);
    /* one reorder: dw2's blocked output back to NCHW for the DequantizeLinear */
    CHECK_MSG(p->layout->n_reorders == 1, "block %d: %d reorders", (int)block, (int)p->layout->n_reorders);
    q8_check_cpu_exact(p, &t.x, &want, what);
  }
  q8_case_free(&t, &want, p);
}

static void test_blocked_8(void) { test_blocked(8); }
static void test_blocked_16(void) { test_blocked(16); }

int main(void) {
  RUN(test_blocked_8);
  RUN(test_blocked_16);
  return kiln_test_finish();
}
