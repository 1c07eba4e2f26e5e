/* OpenCL target end to end on device 0 (PoCL in CI): small graphs lowered
 * with the GPU schedules, fused, built into an OpenCL program
 * (kiln_program_build -> kiln_opencl_emit), run kernel by kernel on the
 * OpenCL device with one device buffer per program buffer, and compared
 * with the reference executor (rtol 1e-4, atol 1e-5 x the largest output). Each graph runs
 * twice: as emitted (GEMM template where it applies) and with every kernel
 * printed from its tensor IR. */
#include <math.h>
#include <stdint.h>

#include "ir/graph.h"
#include "kiln/runtime.h"
#include "lowering/fuse.h"
#include "lowering/plan.h"
#include "runtime/opencl/opencl_device.h"
#include "compiler/ref_exec.h"
#include "targets/opencl/opencl_target.h"
#include "targets/program_build.h"
#include "testing.h"
#include "graph_harness.h"

static kiln_allocator_t A(void) { return kiln_allocator_system(); }
static kiln_device_t* dev;

static kiln_status_t run_on_device(const kiln_program_t* p, const kiln_array_t* feeds,
                                   kiln_array_t* outs) {
  return run_on(dev, p, feeds, outs);
}

/* Plans, fuses, emits, runs and compares |b|'s graph; |min_templated|
 * kernels must have become GEMM template instances. */
static void check_graph(gb_t* b, const char* what, int min_templated) {
  if (!CHECK_OK(b->st)) goto done;
  if (!CHECK_OK(kiln_graph_prepare(b->g))) goto done;
  kiln_array_t want[4], got[4];
  memset(want, 0, sizeof want);
  kiln_ref_options_t ro;
  kiln_ref_options_default(&ro);
  if (!CHECK_OK(kiln_ref_run(b->g, b->feeds, &ro, want))) goto done;
  kiln_plan_t* plan = NULL;
  kiln_plan_options_t po = {KILN_TARGET_CLASS_GPU, 0, 0, 0, 0, 0};
  if (CHECK_OK(kiln_plan_build(b->g, &po, A(), &plan))) {
    kiln_fusion_report_t rep;
    CHECK_OK(kiln_plan_fuse(plan, &rep, NULL));
    for (int variant = 0; variant < 2; ++variant) {
      kiln_program_t* prog = NULL;
      kiln_program_build_options_t bo = {.model_name = what};
      /* without code: the plan's kernel list as it is (an OpenCL build has
       * already emitted, and conv instances shrink it); emit on it */
      bo.no_code = true;
      const kiln_opencl_template_options_t to = {.no_gemm_template = variant == 1, .no_conv_template = variant == 1};
      if (!CHECK_OK(choose_opencl_templates(plan, &to))) break;
      if (!CHECK_OK(kiln_program_build(plan, kiln_target_find("opencl"), &bo, A(), &prog))) break;
      int32_t n_templ = 0, n_rebound = 0;
      kiln_opencl_emit_options_t eo = {.n_templated = &n_templ, .n_rebound = &n_rebound};
      CHECK_OK(kiln_opencl_emit_ex(plan, prog, &eo));
      if (variant == 0)
        CHECK_MSG(n_templ >= min_templated, "%s: %d GEMM template kernels, expected >= %d", what,
                  (int)n_templ, min_templated);
      memset(got, 0, sizeof got);
      char label[200];
      snprintf(label, sizeof label, "%s (%s, %d kernels, %d templated, %d rebound)", what,
               variant ? "printed" : "emitted", (int)prog->n_kernels, (int)n_templ, (int)n_rebound);
      if (CHECK_OK(run_on_device(prog, b->feeds, got))) {
        bool ok = true;
        for (int o = 0; o < b->g->n_outputs; ++o) ok = close_enough(&got[o], &want[o], label) && ok;
        printf("  %s %s\n", ok ? "ok  " : "FAIL", label);
      } else {
        fprintf(stderr, "  case: %s\n", label);
      }
      for (int o = 0; o < b->g->n_outputs; ++o) kiln_array_free(A(), &got[o]);
      kiln_program_destroy(prog);
    }
    kiln_plan_destroy(plan);
  }
  for (int o = 0; o < 4; ++o) kiln_array_free(A(), &want[o]);
done:
  for (int i = 0; i < b->n_feeds; ++i) kiln_array_free(A(), &b->feeds[i]);
  kiln_graph_destroy(b->g);
}


static void test_elementwise(void) {
  gb_t b;
  gb_init(&b);
  input(&b, "x", DIMS(4, 300));
  input(&b, "y", DIMS(300));
  node(&b, "Add", IN("x", "y"), "s", 0, NULL);
  node(&b, "Relu", IN("s"), "r", 0, NULL);
  node(&b, "Sigmoid", IN("r"), "out", 0, NULL);
  kiln_graph_add_output(b.g, "out");
  check_graph(&b, "add_relu_sigmoid", 0);
}

static void test_matmul_plain(void) {
  gb_t b;
  gb_init(&b);
  input(&b, "a", DIMS(37, 50));
  input(&b, "b", DIMS(50, 70));
  node(&b, "MatMul", IN("a", "b"), "out", 0, NULL);
  kiln_graph_add_output(b.g, "out");
  check_graph(&b, "matmul_37x70x50", 1);
}

static void test_matmul_packed(void) {
  gb_t b;
  gb_init(&b);
  input(&b, "a", DIMS(100, 130));
  input(&b, "b", DIMS(130, 200));
  node(&b, "MatMul", IN("a", "b"), "out", 0, NULL);
  kiln_graph_add_output(b.g, "out");
  check_graph(&b, "matmul_100x200x130_runtime_packed_b", 1);
}

static void test_gemm_const(void) {
  gb_t b;
  gb_init(&b);
  input(&b, "a", DIMS(9, 600));
  konst(&b, "w", DIMS(90, 600));
  konst(&b, "c", DIMS(90));
  kiln_attr_t at[4] = {kiln_attr_make_int("transB", 1), kiln_attr_make_float("alpha", 0.5f),
                       kiln_attr_make_float("beta", 2.0f), kiln_attr_make_int("transA", 0)};
  node(&b, "Gemm", IN("a", "w", "c"), "out", 4, at);
  kiln_graph_add_output(b.g, "out");
  check_graph(&b, "gemm_const_transB_bias", 1);
}

static void test_matmul_batched(void) {
  gb_t b;
  gb_init(&b);
  input(&b, "a", DIMS(2, 3, 20, 30));
  konst(&b, "w", DIMS(30, 40));
  node(&b, "MatMul", IN("a", "w"), "out", 0, NULL);
  kiln_graph_add_output(b.g, "out");
  check_graph(&b, "matmul_rank4_x_const_2d", 1);
  gb_init(&b);
  input(&b, "a", DIMS(3, 20, 30));
  input(&b, "b", DIMS(3, 30, 25));
  node(&b, "MatMul", IN("a", "b"), "out", 0, NULL);
  kiln_graph_add_output(b.g, "out");
  check_graph(&b, "matmul_batched_3x20x25x30", 1);
  gb_init(&b);
  input(&b, "a", DIMS(4, 40, 64));
  input(&b, "b", DIMS(4, 64, 96));
  node(&b, "MatMul", IN("a", "b"), "out", 0, NULL);
  kiln_graph_add_output(b.g, "out");
  check_graph(&b, "matmul_batched_packed_4x40x96x64", 1);
  gb_init(&b);
  input(&b, "a", DIMS(2, 5, 8));
  input(&b, "b", DIMS(8, 6));
  node(&b, "MatMul", IN("a", "b"), "out", 0, NULL);
  kiln_graph_add_output(b.g, "out");
  check_graph(&b, "matmul_broadcast_b", 1);
}

static void test_gemm_relu(void) {
  gb_t b;
  gb_init(&b);
  input(&b, "a", DIMS(33, 64));
  konst(&b, "w", DIMS(64, 48));
  konst(&b, "c", DIMS(48));
  node(&b, "Gemm", IN("a", "w", "c"), "g", 0, NULL);
  node(&b, "Relu", IN("g"), "out", 0, NULL);
  kiln_graph_add_output(b.g, "out");
  check_graph(&b, "gemm_bias_relu_fused", 0);
}

static void test_conv_pool(void) {
  gb_t b;
  gb_init(&b);
  input(&b, "x", DIMS(1, 3, 12, 12));
  konst(&b, "w", DIMS(8, 3, 3, 3));
  konst(&b, "bias", DIMS(8));
  kiln_attr_t ca[2] = {kiln_attr_make_ints("pads", 4, (int64_t[]){1, 1, 1, 1}),
                       kiln_attr_make_ints("kernel_shape", 2, (int64_t[]){3, 3})};
  node(&b, "Conv", IN("x", "w", "bias"), "c", 2, ca);
  node(&b, "Relu", IN("c"), "r", 0, NULL);
  kiln_attr_t pa[2] = {kiln_attr_make_ints("kernel_shape", 2, (int64_t[]){2, 2}),
                       kiln_attr_make_ints("strides", 2, (int64_t[]){2, 2})};
  node(&b, "MaxPool", IN("r"), "out", 2, pa);
  kiln_graph_add_output(b.g, "out");
  check_graph(&b, "conv3x3_relu_maxpool", 0);
}

static void test_depthwise_avgpool(void) {
  gb_t b;
  gb_init(&b);
  input(&b, "x", DIMS(1, 8, 9, 9));
  konst(&b, "w", DIMS(8, 1, 3, 3));
  kiln_attr_t ca[2] = {kiln_attr_make_int("group", 8),
                       kiln_attr_make_ints("strides", 2, (int64_t[]){2, 2})};
  node(&b, "Conv", IN("x", "w"), "c", 2, ca);
  node(&b, "GlobalAveragePool", IN("c"), "out", 0, NULL);
  kiln_graph_add_output(b.g, "out");
  check_graph(&b, "depthwise_conv_global_avgpool", 0);
}

static void test_softmax_reduce(void) {
  gb_t b;
  gb_init(&b);
  input(&b, "x", DIMS(6, 77));
  kiln_attr_t sa[1] = {kiln_attr_make_int("axis", -1)};
  node(&b, "Softmax", IN("x"), "s", 1, sa);
  kiln_attr_t ra[2] = {kiln_attr_make_ints("axes", 1, (int64_t[]){0}), kiln_attr_make_int("keepdims", 0)};
  node(&b, "ReduceMean", IN("s"), "out", 2, ra);
  kiln_graph_add_output(b.g, "out");
  check_graph(&b, "softmax_reducemean", 0);
}

/* Every device slot failing in turn (kiln_device_fault_wrap) during a
 * whole run: an error naming the fault each time, nothing leaked (ASan
 * builds), and the real device still works afterwards. */
static void test_faults(void) {
  gb_t b;
  gb_init(&b);
  input(&b, "x", DIMS(1, 3, 8, 8));
  konst(&b, "w", DIMS(4, 3, 3, 3));
  node(&b, "Conv", IN("x", "w"), "c", 0, NULL);
  node(&b, "Relu", IN("c"), "out", 0, NULL);
  kiln_graph_add_output(b.g, "out");
  kiln_plan_t* plan = NULL;
  kiln_program_t* prog = NULL;
  kiln_plan_options_t po = {KILN_TARGET_CLASS_GPU, 0, 0, 0, 0, 0};
  if (!CHECK_OK(b.st) || !CHECK_OK(kiln_graph_prepare(b.g)) ||
      !CHECK_OK(kiln_plan_build(b.g, &po, A(), &plan)) || !CHECK_OK(choose_opencl_templates(plan, NULL)) ||
      !CHECK_OK(kiln_program_build(plan, kiln_target_find("opencl"), NULL, A(), &prog)))
    goto done;
  static const struct {
    kiln_device_call_t call;
    kiln_fault_mode_t mode;
    const char* needle;
  } cases[] = {
      {KILN_DEVICE_CALL_BUFFER_CREATE, KILN_FAULT_OUT_OF_MEMORY, ""},
      {KILN_DEVICE_CALL_BUFFER_CREATE, KILN_FAULT_FAIL, "injected"},
      {KILN_DEVICE_CALL_BUFFER_WRITE, KILN_FAULT_FAIL, "injected"},
      {KILN_DEVICE_CALL_EXECUTABLE_CREATE, KILN_FAULT_BUILD_FAILURE, ""},
      {KILN_DEVICE_CALL_CMD_CREATE, KILN_FAULT_FAIL, "injected"},
      {KILN_DEVICE_CALL_CMD_DISPATCH, KILN_FAULT_FAIL, "injected"},
      {KILN_DEVICE_CALL_CMD_BARRIER, KILN_FAULT_FAIL, "injected"},
      {KILN_DEVICE_CALL_CMD_END, KILN_FAULT_FAIL, "injected"},
      {KILN_DEVICE_CALL_SUBMIT, KILN_FAULT_DEVICE_LOST, "device lost"},
      {KILN_DEVICE_CALL_WAIT, KILN_FAULT_FAIL, "injected"},
      {KILN_DEVICE_CALL_BUFFER_READ, KILN_FAULT_DEVICE_LOST, "device lost"},
  };
  for (size_t i = 0; i < sizeof cases / sizeof cases[0]; ++i) {
    kiln_fault_spec_t spec = {cases[i].call, 1, cases[i].mode};
    kiln_device_t* fd = NULL;
    if (!CHECK_OK(kiln_device_fault_wrap(dev, &spec, &fd))) continue;
    kiln_array_t got[1];
    memset(got, 0, sizeof got);
    kiln_status_t s = run_on(fd, prog, b.feeds, got);
    CHECK_MSG(s != NULL, "fault in %s did not fail the run", kiln_device_call_name(cases[i].call));
    if (s) {
      CHECK_MSG(strstr(kiln_status_message(s), cases[i].needle) != NULL, "fault in %s: %s",
                kiln_device_call_name(cases[i].call), kiln_status_message(s));
      kiln_status_free(s);
    }
    kiln_array_free(A(), &got[0]);
    kiln_device_release(fd);
  }
  /* the real device is unharmed */
  kiln_array_t got[1];
  memset(got, 0, sizeof got);
  CHECK_OK(run_on(dev, prog, b.feeds, got));
  kiln_array_free(A(), &got[0]);
done:
  kiln_program_destroy(prog);
  kiln_plan_destroy(plan);
  for (int i = 0; i < b.n_feeds; ++i) kiln_array_free(A(), &b.feeds[i]);
  kiln_graph_destroy(b.g);
}

int main(void) {
  if (!(dev = open_opencl_device_0())) return 1;
  RUN(test_elementwise);
  RUN(test_matmul_plain);
  RUN(test_matmul_packed);
  RUN(test_gemm_const);
  RUN(test_matmul_batched);
  RUN(test_gemm_relu);
  RUN(test_conv_pool);
  RUN(test_depthwise_avgpool);
  RUN(test_softmax_reduce);
  RUN(test_faults);
  kiln_device_release(dev);
  return kiln_test_finish();
}
