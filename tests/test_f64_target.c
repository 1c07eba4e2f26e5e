/* f64 end to end on one target, where f32 arithmetic would show:
 *
 *   test_f64_target [--target cpu|opencl|vulkan]   (default cpu)
 *
 *   - a chain Add -> MatMul -> ReduceSum -> Exp over values 1 + k*1e-10
 *     (their differences vanish in f32) matches a hand computation in
 *     double within 1e-12 relative (f32 is off by ~1e-7), and the reference;
 *   - a cast chain f32 -> f64 -> (x / 3) -> f32 and f64 -> i64 -> f64,
 *     exactly as the reference;
 *   - the compiled module written to a .kiln file with its f64 weight and
 *     loaded back runs the same;
 *   - --precision fp16 leaves every f64 buffer f64 (it narrows f32 only);
 *   - on a target without f64 (Vulkan/GLSL here) compiling fails with
 *     UNSUPPORTED naming the kernel and f64: never a silent f32 result.
 */
#include <math.h>
#include <unistd.h>

#include "lowering/precision.h"
#include "runtime/module_file.h"
#include "target_graph_util.h"

/* The f64 pipeline is printed for a dialect with double (C, OpenCL C with
 * cl_khr_fp64); the GLSL dialect has none. */
static bool target_has_f64(void) { return strcmp(g_target_name, "vulkan") != 0; }

/* y = exp(sum_j ((x + c) @ w)[i, j] - 12) with c an f64 initializer. */
static kiln_graph_t* chain_graph(void) {
  kiln_graph_t* g = graph_new();
  if (!g) return NULL;
  int64_t xd[2] = {2, 3}, wd[2] = {3, 2}, one[1] = {1};
  kiln_array_t c = arr(KILN_DTYPE_F64, 1, one), ax = arr(KILN_DTYPE_I64, 1, one), off = arr(KILN_DTYPE_F64, 1, one);
  if (c.data) ((double*)c.data)[0] = 3e-10;
  if (ax.data) ((int64_t*)ax.data)[0] = 1;
  if (off.data) ((double*)off.data)[0] = 12.0;
  kiln_attr_t keep = kiln_attr_make_int("keepdims", 0);
  bool ok = c.data && ax.data && off.data && input(g, "x", KILN_DTYPE_F64, 2, xd) &&
            input(g, "w", KILN_DTYPE_F64, 2, wd) && CHECK_OK(kiln_graph_add_initializer(g, "c", &c, NULL)) &&
            CHECK_OK(kiln_graph_add_initializer(g, "ax", &ax, NULL)) &&
            CHECK_OK(kiln_graph_add_initializer(g, "off", &off, NULL)) &&
            node1(g, "Add", "add", 2, (const char*[]){"x", "c"}, "a", 0, NULL) &&
            node1(g, "MatMul", "mm", 2, (const char*[]){"a", "w"}, "m", 0, NULL) &&
            node1(g, "ReduceSum", "sum", 2, (const char*[]){"m", "ax"}, "s", 1, &keep) &&
            node1(g, "Sub", "sub", 2, (const char*[]){"s", "off"}, "d", 0, NULL) &&
            node1(g, "Exp", "exp", 1, (const char*[]){"d"}, "y", 0, NULL) && CHECK_OK(kiln_graph_add_output(g, "y")) &&
            CHECK_OK(kiln_graph_prepare(g)) && CHECK_OK(kiln_graph_optimize(g, 1, NULL));
  kiln_array_free(al(), &c);
  kiln_array_free(al(), &ax);
  kiln_array_free(al(), &off);
  if (!ok) {
    kiln_graph_destroy(g);
    return NULL;
  }
  return g;
}

static void chain_inputs(kiln_array_t in[2]) {
  int64_t xd[2] = {2, 3}, wd[2] = {3, 2};
  in[0] = arr(KILN_DTYPE_F64, 2, xd);
  in[1] = arr(KILN_DTYPE_F64, 2, wd);
  for (int k = 0; k < 6 && in[0].data && in[1].data; ++k) {
    ((double*)in[0].data)[k] = 1.0 + (double)k * 1e-10;
    ((double*)in[1].data)[k] = 1.0 - (double)k * 2e-10;
  }
}

/* The expected outputs, computed here in double. */
static void chain_expected(const kiln_array_t in[2], double y[2]) {
  const double* x = in[0].data;
  const double* w = in[1].data;
  for (int i = 0; i < 2; ++i) {
    double s = 0.0;
    for (int j = 0; j < 2; ++j)
      for (int k = 0; k < 3; ++k) s += (x[i * 3 + k] + 3e-10) * w[k * 2 + j];
    y[i] = exp(s - 12.0);
  }
}

static void check_chain_run(kiln_session_t* s, const kiln_graph_t* g, const char* what) {
  kiln_array_t in[2];
  chain_inputs(in);
  double want[2];
  chain_expected(in, want);
  kiln_array_t got[1] = {{0}}, ref[1] = {{0}};
  if (CHECK_OK(kiln_session_run(s, in, got))) {
    CHECK(got[0].dtype == KILN_DTYPE_F64 && kiln_array_numel(&got[0]) == 2);
    for (int i = 0; i < 2 && got[0].dtype == KILN_DTYPE_F64; ++i) {
      double v = ((double*)got[0].data)[i];
      CHECK_MSG(fabs(v - want[i]) <= 1e-12 * fabs(want[i]), "%s %s: y[%d] = %.17g, want %.17g (f32 arithmetic?)",
                g_target_name, what, i, v, want[i]);
    }
    if (g && CHECK_OK(kiln_ref_run(g, in, NULL, ref))) {
      for (int i = 0; i < 2; ++i)
        CHECK(fabs(((double*)ref[0].data)[i] - ((double*)got[0].data)[i]) <= 1e-12 * fabs(want[i]));
    }
  }
  free_arrays(got, 1);
  free_arrays(ref, 1);
  free_arrays(in, 2);
}

static void test_chain(void) {
  kiln_graph_t* g = chain_graph();
  if (!g) return;
  if (!target_has_f64()) {
    /* refused at compile time, by kernel and dtype */
    kiln_plan_options_t po = {g_target->lowering, 2, 0, 0, 0, g_target->ew_lanes};
    kiln_plan_t* plan = NULL;
    kiln_program_t* prog = NULL;
    kiln_template_set_t templates;
    kiln_program_templates(g_target, &templates);
    kiln_status_t st = kiln_plan_build(g, &po, al(), &plan);
    if (!st) st = kiln_plan_fuse(plan, NULL, NULL);
    if (!st) st = kiln_template_choose(plan, &templates);
    if (!st) st = kiln_program_build(plan, g_target, NULL, al(), &prog);
    CHECK_ERR(st, KILN_UNSUPPORTED, "f64");
    CHECK(prog == NULL);
    kiln_plan_destroy(plan);
    kiln_graph_destroy(g);
    return;
  }
  kiln_module_t* m = compile(g);
  kiln_session_t* s = session(m);
  CHECK_MSG(s != NULL, "%s: the f64 chain did not compile", g_target_name);
  if (s) check_chain_run(s, g, "chain");
  kiln_session_destroy(s);
  kiln_module_release(m);
  kiln_graph_destroy(g);
}

/* The module with an f64 initializer round trips through a .kiln file. */
static void test_module_file(void) {
  if (!target_has_f64()) return;
  kiln_graph_t* g = chain_graph();
  if (!g) return;
  kiln_plan_options_t po = {g_target->lowering, 2, 0, 0, 0, g_target->ew_lanes};
  kiln_plan_t* plan = NULL;
  kiln_program_t* prog = NULL;
  kiln_template_set_t templates;
  kiln_program_templates(g_target, &templates);
  if (CHECK_OK(kiln_plan_build(g, &po, al(), &plan)) && CHECK_OK(kiln_plan_fuse(plan, NULL, NULL)) &&
      CHECK_OK(kiln_template_choose(plan, &templates)))
    CHECK_OK(kiln_program_build(plan, g_target, NULL, al(), &prog));
  kiln_plan_destroy(plan);
  /* OpenCL: the program enables cl_khr_fp64, which the device check
   * (runtime/opencl) refuses by name on a device without it */
  if (prog && !strcmp(g_target_name, "opencl"))
    CHECK(prog->code.text && strstr(prog->code.text, "#pragma OPENCL EXTENSION cl_khr_fp64 : enable"));
  char path[64];
  snprintf(path, sizeof path, "f64_%s_%d.kiln", g_target_name, (int)getpid());
  kiln_module_t* m = NULL;
  if (prog && CHECK_OK(kiln_module_write_file(prog, path)) &&
      CHECK_OK(kiln_module_load_file(path, al(), &m))) {
    kiln_dtype_t dt = KILN_DTYPE_UNDEFINED;
    (void)kiln_module_input_shape(m, 0, &dt);
    CHECK(dt == KILN_DTYPE_F64);
    kiln_session_t* s = session(m);
    if (s) check_chain_run(s, g, "module file");
    kiln_session_destroy(s);
  }
  kiln_module_release(m);
  if (prog) kiln_program_destroy(prog);
  remove(path);
  kiln_graph_destroy(g);
}

/* f32 -> f64 -> /3 -> f32, and f64 -> i64 -> f64, against the reference
 * bit for bit. */
static void test_cast_chain(void) {
  if (!target_has_f64()) return;
  kiln_graph_t* g = graph_new();
  if (!g) return;
  int64_t d[1] = {5}, one[1] = {1};
  kiln_array_t three = arr(KILN_DTYPE_F64, 1, one);
  if (three.data) ((double*)three.data)[0] = 3.0;
  kiln_attr_t to64 = kiln_attr_make_int("to", 11), to32 = kiln_attr_make_int("to", 1),
              toi = kiln_attr_make_int("to", 7);
  bool ok = three.data && input(g, "x", KILN_DTYPE_F32, 1, d) &&
            CHECK_OK(kiln_graph_add_initializer(g, "three", &three, NULL)) &&
            node1(g, "Cast", "c64", 1, (const char*[]){"x"}, "xd", 1, &to64) &&
            node1(g, "Div", "div", 2, (const char*[]){"xd", "three"}, "q", 0, NULL) &&
            node1(g, "Cast", "c32", 1, (const char*[]){"q"}, "y", 1, &to32) &&
            node1(g, "Cast", "ci", 1, (const char*[]){"q"}, "qi", 1, &toi) &&
            node1(g, "Cast", "cb", 1, (const char*[]){"qi"}, "z", 1, &to64) && CHECK_OK(kiln_graph_add_output(g, "y")) &&
            CHECK_OK(kiln_graph_add_output(g, "q")) && CHECK_OK(kiln_graph_add_output(g, "z")) &&
            CHECK_OK(kiln_graph_prepare(g)) && CHECK_OK(kiln_graph_optimize(g, 1, NULL));
  kiln_array_free(al(), &three);
  kiln_module_t* m = ok ? compile(g) : NULL;
  kiln_session_t* s = session(m);
  CHECK_MSG(s != NULL, "%s: the cast chain did not compile", g_target_name);
  kiln_array_t in = arr(KILN_DTYPE_F32, 1, d);
  const float xs[5] = {1.0f, -7.5f, 1e30f, 123456792.0f, 0.1f};
  if (in.data) memcpy(in.data, xs, sizeof xs);
  if (in.data && s) {
    both_agree_n(g, s, &in, 3);
    kiln_array_t got[3] = {{0}};
    if (CHECK_OK(kiln_session_run(s, &in, got))) /* 0.1f / 3 in double, not in float */
      CHECK(got[1].dtype == KILN_DTYPE_F64 && ((double*)got[1].data)[4] == (double)0.1f / 3.0);
    free_arrays(got, 3);
  }
  kiln_array_free(al(), &in);
  kiln_session_destroy(s);
  kiln_module_release(m);
  kiln_graph_destroy(g);
}

/* The precision pass converts f32 buffers: the chain's f64 ones stay. */
static void test_precision_keeps_f64(void) {
  kiln_graph_t* g = chain_graph();
  if (!g) return;
  kiln_plan_options_t po = {g_target->lowering, 2, 0, 0, 0, g_target->ew_lanes};
  kiln_plan_t* plan = NULL;
  if (CHECK_OK(kiln_plan_build(g, &po, al(), &plan)) && CHECK_OK(kiln_plan_fuse(plan, NULL, NULL))) {
    int32_t f64_before = 0, f64_after = 0;
    for (int32_t i = 0; i < plan->n_buffers; ++i) f64_before += plan->buffers[i].buf->dtype == KILN_DTYPE_F64;
    kiln_precision_options_t o = {KILN_PRECISION_FP16, true, false, NULL, false, false};
    kiln_precision_report_t r;
    if (CHECK_OK(kiln_plan_set_precision(plan, &o, &r))) {
      for (int32_t i = 0; i < plan->n_buffers; ++i) {
        f64_after += plan->buffers[i].buf->dtype == KILN_DTYPE_F64;
        CHECK(plan->buffers[i].buf->dtype != KILN_DTYPE_F16);
      }
      CHECK(f64_before > 0 && f64_after == f64_before && r.buffers_converted == 0);
      kiln_precision_report_free(&r);
    }
  }
  kiln_plan_destroy(plan);
  kiln_graph_destroy(g);
}

int main(int argc, char** argv) {
  int rc = target_open(argc, argv);
  if (rc) return rc;
  RUN(test_chain);
  RUN(test_cast_chain);
  RUN(test_module_file);
  RUN(test_precision_keeps_f64);
  kiln_device_release(g_device);
  return kiln_test_finish();
}
