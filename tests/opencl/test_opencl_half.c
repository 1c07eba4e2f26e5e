/* fp16 arithmetic on the OpenCL target: kernels the precision pass retypes
 * for half arithmetic (element-wise chains, with fp16_arith as on a device
 * with cl_khr_fp16) print as OpenCL `half` code that enables cl_khr_fp16.
 *
 * CI's device (PoCL) has no cl_khr_fp16, so the native program is checked
 * three ways: its text (the pragma, half values, f32 math over halves
 * converted explicitly); clang's OpenCL C front end for SPIR (which knows
 * cl_khr_fp16) compiles it to LLVM IR with the extension, and refuses it
 * without, so the code really computes in half; and the OpenCL device
 * refuses to build it on a device without the extension, naming it. The
 * same plan printed with F16 values as floats rounded to half after every
 * operation (no_native_half) runs on the device and matches the reference
 * within fp16 tolerance (rtol 1e-2, atol 1e-3), as does a plan with fp16
 * storage only, whose program needs no extension. */
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <unistd.h>

#include "ir/graph.h"
#include "kiln/runtime.h"
#include "lowering/fuse.h"
#include "lowering/plan.h"
#include "lowering/precision.h"
#include "compiler/compare.h"
#include "runtime/opencl/opencl_device.h"
#include "compiler/ref_exec.h"
#include "targets/opencl/opencl_target.h"
#include "targets/program_build.h"
#include "testing.h"
#include "graph_harness.h"

static kiln_allocator_t A(void) { return kiln_allocator_system(); }
static kiln_device_t* dev;

/* X, Y [2,3,17,19] -> an element-wise chain over every float operation the
 * printer spells (arithmetic, min/max, math calls (sin among the built-ins
 * that came with the trigonometric ops), select via Where, casts) -> Z; and Z -> a 3x3 Conv -> W, a kernel that only stores f16. */
static void build_graph(gb_t* b) {
  const int64_t xd[4] = {2, 3, 17, 19}, cd[4] = {1, 3, 1, 1}, wd[4] = {4, 3, 3, 3};
  gb_init(b);
  gb_input(b, "X", 4, xd);
  gb_input(b, "Y", 4, xd);
  gb_const(b, "C", 4, cd);
  gb_const(b, "Wc", 4, wd);
  const kiln_attr_t alpha = kiln_attr_make_float("alpha", 0.125f);
  gb_node(b, "Mul", "mul", 2, (const char*[]){"X", "Y"}, "t1", 0, NULL);
  gb_node(b, "Add", "add", 2, (const char*[]){"t1", "C"}, "t2", 0, NULL);
  gb_node(b, "Sigmoid", "sig", 1, (const char*[]){"t2"}, "t3", 0, NULL);
  gb_node(b, "Tanh", "tanh", 1, (const char*[]){"X"}, "t4", 0, NULL);
  gb_node(b, "Sub", "sub", 2, (const char*[]){"t3", "t4"}, "t5", 0, NULL);
  gb_node(b, "Exp", "exp", 1, (const char*[]){"t5"}, "t6", 0, NULL);
  gb_node(b, "Erf", "erf", 1, (const char*[]){"Y"}, "t7", 0, NULL);
  gb_node(b, "Max", "max", 2, (const char*[]){"t6", "t7"}, "t8", 0, NULL);
  gb_node(b, "Abs", "abs", 1, (const char*[]){"t4"}, "t9", 0, NULL);
  gb_node(b, "Sqrt", "sqrt", 1, (const char*[]){"t9"}, "t10", 0, NULL);
  gb_node(b, "Div", "div", 2, (const char*[]){"t10", "t6"}, "t11", 0, NULL);
  gb_node(b, "LeakyRelu", "leaky", 1, (const char*[]){"t2"}, "t12", 1, &alpha);
  gb_node(b, "Neg", "neg", 1, (const char*[]){"t12"}, "t13", 0, NULL);
  gb_node(b, "Less", "less", 2, (const char*[]){"X", "Y"}, "t14", 0, NULL);
  gb_node(b, "Where", "where", 3, (const char*[]){"t14", "t11", "t13"}, "t15", 0, NULL);
  gb_node(b, "Sin", "sin", 1, (const char*[]){"t15"}, "t16", 0, NULL);
  gb_node(b, "Softplus", "softplus", 1, (const char*[]){"t8"}, "t17", 0, NULL);
  gb_node(b, "Add", "add2", 2, (const char*[]){"t16", "t17"}, "Z", 0, NULL);
  const int64_t pads[4] = {1, 1, 1, 1};
  const kiln_attr_t conv_attrs[1] = {kiln_attr_make_ints("pads", 4, pads)};
  gb_node(b, "Conv", "conv", 2, (const char*[]){"Z", "Wc"}, "W", 1, conv_attrs);
  if (!b->st) b->st = kiln_graph_add_output(b->g, "Z");
  if (!b->st) b->st = kiln_graph_add_output(b->g, "W");
}

/* The graph's plan, fused, with the precision pass applied (fp16_arith:
 * as for a device with half arithmetic). */
static kiln_plan_t* plan_fp16(const kiln_graph_t* g, bool fp16_arith) {
  kiln_plan_t* plan = NULL;
  kiln_plan_options_t po = {KILN_TARGET_CLASS_GPU, 0, 0, 0, 0, 0};
  if (!CHECK_OK(kiln_plan_build(g, &po, A(), &plan))) return NULL;
  kiln_fusion_report_t rep;
  kiln_precision_options_t pr = {.mode = KILN_PRECISION_FP16, .fp16_arith = fp16_arith};
  kiln_precision_report_t prep;
  memset(&prep, 0, sizeof prep);
  if (!CHECK_OK(kiln_plan_fuse(plan, &rep, NULL)) || !CHECK_OK(kiln_plan_set_precision(plan, &pr, &prep)) ||
      !CHECK_OK(choose_opencl_templates(plan, NULL))) {
    kiln_plan_destroy(plan);
    return NULL;
  }
  CHECK_MSG(fp16_arith ? prep.kernels_fp16_arith > 0 : prep.kernels_fp16_arith == 0,
            "%d kernels compute in f16 (fp16_arith %d)", (int)prep.kernels_fp16_arith, (int)fp16_arith);
  kiln_precision_report_free(&prep);
  return plan;
}

static kiln_program_t* emit(const kiln_plan_t* plan, bool no_native_half, bool* native) {
  kiln_program_t* prog = NULL;
  kiln_program_build_options_t bo = {.model_name = "halfchain", .no_code = true};
  if (!CHECK_OK(kiln_program_build(plan, kiln_target_find("opencl"), &bo, A(), &prog))) return NULL;
  kiln_opencl_emit_options_t eo = {.no_native_half = no_native_half, .native_half = native};
  if (!CHECK_OK(kiln_opencl_emit_ex(plan, prog, &eo)) || !CHECK_OK(kiln_program_validate(prog))) {
    kiln_program_destroy(prog);
    return NULL;
  }
  return prog;
}

/* Runs |prog| on the device and compares both outputs with |want|: rtol
 * 1e-2, atol 1e-3 x max(1, max |want|) (the conv's sums of f16-rounded
 * terms err in proportion to the terms, which the largest output tracks). */
static void run_and_compare(const kiln_program_t* prog, const gb_t* b, const kiln_array_t* want,
                            const char* what) {
  kiln_array_t got[2];
  memset(got, 0, sizeof got);
  if (CHECK_OK(run_on(dev, prog, b->feeds, got))) {
    for (int o = 0; o < 2; ++o) {
      double scale = 1;
      const float* w = want[o].data;
      for (int64_t i = 0; i < kiln_array_numel(&want[o]); ++i)
        if (fabs((double)w[i]) > scale) scale = fabs((double)w[i]);
      kiln_compare_result_t r;
      kiln_compare(&got[o], &want[o], 1e-2, 1e-3 * scale, &r);
      CHECK_MSG(r.ok, "%s, output %d: %s", what, o, r.message);
    }
  }
  for (int o = 0; o < 2; ++o) kiln_array_free(A(), &got[o]);
}

/* clang's OpenCL C front end on |src| for SPIR with cl_khr_fp16 on (|fp16|)
 * or off; its exit status (0: compiled). */
static int clang_compile(const char* src, bool fp16) {
#ifdef KILN_TEST_CLANG
  char path[] = "/tmp/kiln-half-XXXXXX.cl";
  int fd = mkstemps(path, 3);
  if (fd < 0) return -1;
  FILE* f = fdopen(fd, "w");
  if (!f) return -1;
  fputs(src, f);
  fclose(f);
  char cmd[1024];
  snprintf(cmd, sizeof cmd,
           "'%s' -x cl -cl-std=CL1.2 -target spir64-unknown-unknown -Xclang -finclude-default-header "
           "-Xclang -cl-ext=%ccl_khr_fp16 -Werror=implicit-function-declaration -c -emit-llvm -o /dev/null "
           "'%s' 2>%s",
           KILN_TEST_CLANG, fp16 ? '+' : '-', path, fp16 ? "&1" : "/dev/null");
  int rc = system(cmd);
  unlink(path);
  return rc;
#else
  (void)src;
  (void)fp16;
  CHECK_MSG(false, "no clang to check the OpenCL C with cl_khr_fp16: install clang-15 (tools/setup.sh does) and "
                   "re-run cmake");
  return -1;
#endif
}

static void test_half_chain(void) {
  gb_t b;
  build_graph(&b);
  kiln_array_t want[2];
  memset(want, 0, sizeof want);
  kiln_plan_t* plan = NULL;
  kiln_program_t* prog = NULL;
  if (!CHECK_OK(b.st) || !CHECK_OK(kiln_graph_prepare(b.g))) goto done;
  kiln_ref_options_t ro;
  kiln_ref_options_default(&ro);
  if (!CHECK_OK(kiln_ref_run(b.g, b.feeds, &ro, want))) goto done;

  /* fp16 arithmetic: native half text */
  if (!(plan = plan_fp16(b.g, true))) goto done;
  bool native = false;
  if (!(prog = emit(plan, false, &native))) goto done;
  const char* src = prog->code.text;
  CHECK(native);
  const char* pragma = strstr(src, "#pragma OPENCL EXTENSION cl_khr_fp16 : enable\n");
  const char* first_kernel = strstr(src, "__kernel");
  CHECK_MSG(pragma && first_kernel && pragma < first_kernel, "the program enables cl_khr_fp16 before its kernels");
  CHECK_MSG(strstr(src, "((half)") && strstr(src, "convert_half_rte(") && strstr(src, "(float)"),
            "half literals, conversions to half and explicit f32 conversions of halves");
  const char* hround = strstr(src, "kiln_hround(");
  CHECK_MSG(hround && !strstr(hround + 1, "kiln_hround("),
            "no float emulation of half rounding in native code (only the prelude's definition)");
  /* the OpenCL C is valid with cl_khr_fp16, and only with it */
  CHECK_MSG(clang_compile(src, true) == 0, "clang compiles the native-half program with cl_khr_fp16");
  CHECK_MSG(clang_compile(src, false) != 0, "clang refuses the native-half program without cl_khr_fp16");
  /* a device without the extension refuses the program by name */
  if (!dev->info.fp16_arith) {
    kiln_array_t got[2];
    memset(got, 0, sizeof got);
    kiln_status_t s = run_on(dev, prog, b.feeds, got);
    CHECK_MSG(s && kiln_status_code(s) == KILN_UNSUPPORTED && strstr(kiln_status_message(s), "cl_khr_fp16") &&
                  strstr(kiln_status_message(s), dev->info.name),
              "device without cl_khr_fp16: %s", s ? kiln_status_message(s) : "no error");
    kiln_status_free(s);
    for (int o = 0; o < 2; ++o) kiln_array_free(A(), &got[o]);
  } else {
    run_and_compare(prog, &b, want, "native half");
  }
  kiln_program_destroy(prog);

  /* the same kernels with F16 values as floats on the half grid: runs anywhere */
  if (!(prog = emit(plan, true, &native))) goto done;
  CHECK(!native && !strstr(prog->code.text, "#pragma OPENCL EXTENSION cl_khr_fp16") && strstr(prog->code.text, "kiln_hround("));
  run_and_compare(prog, &b, want, "half arithmetic emulated");
  kiln_program_destroy(prog);
  kiln_plan_destroy(plan);

  /* fp16 storage only (a device without half arithmetic): no extension */
  if (!(plan = plan_fp16(b.g, false))) goto done;
  if (!(prog = emit(plan, false, &native))) goto done;
  CHECK(!native && !strstr(prog->code.text, "#pragma OPENCL EXTENSION cl_khr_fp16"));
  CHECK_MSG(clang_compile(prog->code.text, false) == 0, "fp16 storage compiles without cl_khr_fp16");
  run_and_compare(prog, &b, want, "fp16 storage");
done:
  kiln_program_destroy(prog);
  kiln_plan_destroy(plan);
  for (int o = 0; o < 2; ++o) kiln_array_free(A(), &want[o]);
  for (int i = 0; i < b.n_feeds; ++i) kiln_array_free(A(), &b.feeds[i]);
  kiln_graph_destroy(b.g);
  kiln_status_free(b.st);
}

int main(void) {
  if (!(dev = open_opencl_device_0())) return 1;
  RUN(test_half_chain);
  kiln_device_release(dev);
  return kiln_test_finish();
}
