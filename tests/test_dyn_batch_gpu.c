/* Dynamic batch on a GPU target (kiln compile -t opencl|vulkan --dim
 * NAME=LO..HI): a small per-sample CNN whose convs take the conv and (on
 * OpenCL) Winograd templates (one with a per-sample residual in its
 * epilogue), a strided depthwise conv (its template hands the kernel back
 * to the printed one), pooling and a Gemm (the GEMM template stepping by
 * the samples' strides: gemm.cl GBATCH, gemm.comp BATCHED), compiled ONCE
 * for batch 1..4.
 *
 * Without arguments: the compiled program (no device): every kernel's grid
 * is one sample's (groups[2] 1), the templates are in its source, the
 * printed kernels read the sample from dim 2, the dims round-trip through
 * the module file.
 * --target opencl|vulkan: the module run on the target's device 0 at batches 1, 4,
 * 2, 4, 3 (up, down, up: one arena, re-recorded grids) against the
 * reference at each, two slots in flight at different batches, and a batch
 * outside the range refused naming the input, dim, value and range. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "compiler/pipeline.h"
#include "compiler/ref_exec.h"
#include "ir/graph.h"
#include "kiln/runtime.h"
#include "runtime/module_file.h"
#include "runtime/module_impl.h"
#include "runtime/program.h"
#include "targets/registry.h"
#include "testing.h"

static const char* g_target = NULL; /* --target T: the device part on T */

static kiln_allocator_t al(void) { return kiln_allocator_system(); }

/* Deterministic values in [-0.5, 0.5). */
static kiln_array_t filled(int rank, const int64_t* dims, uint32_t seed) {
  kiln_array_t a;
  memset(&a, 0, sizeof a);
  kiln_shape_t s = kiln_shape_make(rank, dims);
  if (!CHECK_OK(kiln_array_alloc(al(), KILN_DTYPE_F32, &s, &a))) return a;
  float* f = a.data;
  for (size_t i = 0; i < a.nbytes / 4; ++i) {
    seed = seed * 1664525u + 1013904223u;
    f[i] = (float)((seed >> 8) & 0xffff) / 65536.0f - 0.5f;
  }
  return a;
}

static bool init(kiln_graph_t* g, const char* name, int rank, const int64_t* dims, uint32_t seed) {
  kiln_array_t a = filled(rank, dims, seed);
  return a.data && CHECK_OK(kiln_graph_add_initializer(g, name, &a, NULL));
}

static bool node(kiln_graph_t* g, const char* op, const char* name, int n_in, const char* const* in, const char* out,
                 int n_attrs, const kiln_attr_t* attrs) {
  return CHECK_OK(kiln_graph_add_node(g, op, name, n_in, in, 1, (const char*[]){out}, n_attrs, attrs, NULL));
}

/* x [batch,16,32,32] -> 3x3 conv + Relu (Winograd) -> 3x3 stride-2 conv +
 * Relu (implicit GEMM) -> 3x3 conv + residual Add + Relu -> depthwise 3x3
 * stride 2 -> MaxPool -> GlobalAveragePool -> Flatten -> Gemm -> y [batch,5].
*/
static kiln_graph_t* cnn(int64_t batch) {
  kiln_graph_t* g = NULL;
  if (!CHECK_OK(kiln_graph_create(al(), &g))) return NULL;
  bool ok = CHECK_OK(kiln_graph_set_opset(g, "", 17));
  const int64_t x[4] = {batch, 16, 32, 32};
  kiln_shape_t xs = kiln_shape_make(4, x);
  ok = ok && CHECK_OK(kiln_graph_add_input(g, "x", KILN_DTYPE_F32, &xs, NULL));
  ok = ok && init(g, "w1", 4, (const int64_t[]){16, 16, 3, 3}, 1) && init(g, "b1", 1, (const int64_t[]){16}, 2) &&
       init(g, "w2", 4, (const int64_t[]){32, 16, 3, 3}, 3) && init(g, "b2", 1, (const int64_t[]){32}, 4) &&
       init(g, "w3", 4, (const int64_t[]){32, 32, 3, 3}, 5) && init(g, "wd", 4, (const int64_t[]){32, 1, 3, 3}, 6) &&
       init(g, "bd", 1, (const int64_t[]){32}, 7) && init(g, "wf", 2, (const int64_t[]){32, 5}, 8) &&
       init(g, "bf", 1, (const int64_t[]){5}, 9);
  const int64_t pads[4] = {1, 1, 1, 1};
  const kiln_attr_t pa = kiln_attr_make_ints("pads", 4, pads);
  const kiln_attr_t s2[2] = {pa, kiln_attr_make_ints("strides", 2, (const int64_t[]){2, 2})};
  const kiln_attr_t dw[3] = {pa, kiln_attr_make_ints("strides", 2, (const int64_t[]){2, 2}),
                             kiln_attr_make_int("group", 32)};
  const kiln_attr_t pool[2] = {kiln_attr_make_ints("kernel_shape", 2, (const int64_t[]){2, 2}),
                               kiln_attr_make_ints("strides", 2, (const int64_t[]){2, 2})};
  ok = ok && node(g, "Conv", "conv1", 3, (const char*[]){"x", "w1", "b1"}, "c1", 1, &pa) &&
       node(g, "Relu", "relu1", 1, (const char*[]){"c1"}, "r1", 0, NULL) &&
       node(g, "Conv", "conv2", 3, (const char*[]){"r1", "w2", "b2"}, "c2", 2, s2) &&
       node(g, "Relu", "relu2", 1, (const char*[]){"c2"}, "r2", 0, NULL) &&
       node(g, "Conv", "conv3", 2, (const char*[]){"r2", "w3"}, "c3", 1, &pa) &&
       node(g, "Add", "add", 2, (const char*[]){"c3", "r2"}, "a", 0, NULL) &&
       node(g, "Relu", "relu3", 1, (const char*[]){"a"}, "r3", 0, NULL) &&
       node(g, "Conv", "dwconv", 3, (const char*[]){"r3", "wd", "bd"}, "d", 3, dw) &&
       node(g, "MaxPool", "pool", 1, (const char*[]){"d"}, "p", 2, pool) &&
       node(g, "GlobalAveragePool", "gap", 1, (const char*[]){"p"}, "gp", 0, NULL) &&
       node(g, "Flatten", "flat", 1, (const char*[]){"gp"}, "f", 0, NULL) &&
       node(g, "Gemm", "fc", 3, (const char*[]){"f", "wf", "bf"}, "y", 0, NULL);
  ok = ok && CHECK_OK(kiln_graph_add_output(g, "y"));
  if (!ok) {
    kiln_graph_destroy(g);
    return NULL;
  }
  return g;
}

/* The program of cnn(1) for |target| with dim "batch" in 1..4. */
static kiln_program_t* dyn_program(const char* target) {
  kiln_graph_t* g = cnn(1);
  kiln_program_t* prog = NULL;
  kiln_compile_log_t log = {0};
  kiln_compile_config_t cc = {.target = kiln_target_find(target), .opt = 1, .threads = 2, .model_name = "cnn",
                              .dyn_dim = "batch", .dyn_lo = 1, .dyn_hi = 4};
  CHECK_MSG(cc.target != NULL, "target %s not built", target);
  if (!cc.target) {
    kiln_graph_destroy(g);
    return NULL;
  }
  if (g && CHECK_OK(kiln_graph_prepare(g)) && CHECK_OK(kiln_compile_graph_passes(g, 1, cc.target, &log)))
    CHECK_OK(kiln_compile_program(g, &cc, &log, &prog));
  kiln_compile_log_free(&log);
  kiln_graph_destroy(g);
  return prog;
}

static void test_program(void) {
  kiln_program_t* p = dyn_program("opencl");
  if (!p) return;
  CHECK(p->n_dims == 1 && !strcmp(p->dims[0].name, "batch") && p->dims[0].lo == 1 && p->dims[0].hi == 4);
  for (int32_t k = 0; k < p->n_kernels; ++k)
    CHECK_MSG(p->kernels[k].groups[2] == 1, "kernel '%s': %lld groups in dim 2 (one sample's grid is 1)",
              p->kernels[k].name, (long long)p->kernels[k].groups[2]);
  const char* src = p->code.text ? p->code.text : "";
  CHECK_MSG(strstr(src, "kiln winograd F(2x2,3x3) template") != NULL, "no Winograd instance in the program");
  CHECK_MSG(strstr(src, "kiln conv template") != NULL, "no implicit-GEMM conv instance in the program");
  /* the classifier, one row a sample: the GEMV template (gemv.cl) */
  CHECK_MSG(strstr(src, "kiln GEMV template") != NULL, "no GEMV instance in the program");
  /* the printed kernels read the sample from the grid, not from a loop */
  CHECK_MSG(strstr(src, "get_group_id(2)") != NULL, "no kernel reads the sample from dim 2");
  /* through the module file: the dims and grids round trip */
  uint8_t* bytes = NULL;
  size_t len = 0;
  kiln_module_t* m = NULL;
  if (CHECK_OK(kiln_module_serialize(p, al(), &bytes, &len)) &&
      CHECK_OK(kiln_module_load_memory(bytes, len, "cnn.kiln", al(), &m))) {
    const kiln_program_t* q = kiln_module_program(m);
    CHECK(q->n_dims == 1 && q->dims[0].hi == 4 && q->n_kernels == p->n_kernels);
  }
  kiln_module_release(m);
  free(bytes);
  kiln_program_destroy(p);
}

static bool scalar(kiln_graph_t* g, const char* name, kiln_dtype_t t, float v) {
  kiln_array_t a;
  memset(&a, 0, sizeof a);
  kiln_shape_t sh = kiln_shape_make(0, NULL);
  if (!CHECK_OK(kiln_array_alloc(al(), t, &sh, &a))) return false;
  if (t == KILN_DTYPE_F32) *(float*)a.data = v;
  else if (t == KILN_DTYPE_U8) *(uint8_t*)a.data = (uint8_t)v;
  else *(int8_t*)a.data = (int8_t)v;
  return CHECK_OK(kiln_graph_add_initializer(g, name, &a, NULL));
}

/* A QLinearConv (the int8 template, which folds the images into its grid):
 * refused for a range, naming the node and the template. */
static void test_q8_refused(void) {
  kiln_graph_t* g = NULL;
  if (!CHECK_OK(kiln_graph_create(al(), &g))) return;
  bool ok = CHECK_OK(kiln_graph_set_opset(g, "", 17));
  kiln_shape_t xs = kiln_shape_make(4, (const int64_t[]){1, 8, 10, 10});
  ok = ok && CHECK_OK(kiln_graph_add_input(g, "x", KILN_DTYPE_U8, &xs, NULL));
  kiln_array_t w;
  memset(&w, 0, sizeof w);
  kiln_shape_t ws = kiln_shape_make(4, (const int64_t[]){16, 8, 3, 3});
  ok = ok && CHECK_OK(kiln_array_alloc(al(), KILN_DTYPE_I8, &ws, &w));
  for (size_t i = 0; ok && i < w.nbytes; ++i) ((int8_t*)w.data)[i] = (int8_t)((int)(i * 7 % 15) - 7);
  ok = ok && CHECK_OK(kiln_graph_add_initializer(g, "w", &w, NULL));
  ok = ok && scalar(g, "xs", KILN_DTYPE_F32, 0.02f) && scalar(g, "xz", KILN_DTYPE_U8, 128) &&
       scalar(g, "ws", KILN_DTYPE_F32, 0.01f) && scalar(g, "wz", KILN_DTYPE_I8, 0) &&
       scalar(g, "ys", KILN_DTYPE_F32, 0.5f) && scalar(g, "yz", KILN_DTYPE_U8, 10);
  const int64_t pads[4] = {1, 1, 1, 1};
  const kiln_attr_t pa = kiln_attr_make_ints("pads", 4, pads);
  ok = ok && node(g, "QLinearConv", "qconv", 8, (const char*[]){"x", "xs", "xz", "w", "ws", "wz", "ys", "yz"}, "y",
                  1, &pa);
  ok = ok && CHECK_OK(kiln_graph_add_output(g, "y"));
  kiln_program_t* prog = NULL;
  kiln_compile_log_t log = {0};
  kiln_compile_config_t cc = {.target = kiln_target_find("opencl"), .opt = 1, .threads = 2, .model_name = "q8",
                              .dyn_dim = "batch", .dyn_lo = 1, .dyn_hi = 4};
  if (ok && CHECK_OK(kiln_graph_prepare(g)) && CHECK_OK(kiln_compile_graph_passes(g, 1, cc.target, &log)))
    CHECK_ERR(kiln_compile_program(g, &cc, &log, &prog), KILN_UNSUPPORTED, "dim 'batch' cannot be dynamic: its int8 (q8) template");
  kiln_program_destroy(prog);
  kiln_compile_log_free(&log);
  kiln_graph_destroy(g);
}

/* A node that falls back to the host CPU (f64 on Vulkan: GLSL has none):
 * refused for a range at compile time, naming it. */
static void test_host_refused(void) {
  if (!kiln_target_find("vulkan")) return;
  kiln_graph_t* g = NULL;
  if (!CHECK_OK(kiln_graph_create(al(), &g))) return;
  bool ok = CHECK_OK(kiln_graph_set_opset(g, "", 17));
  kiln_shape_t xs = kiln_shape_make(2, (const int64_t[]){1, 16});
  ok = ok && CHECK_OK(kiln_graph_add_input(g, "x", KILN_DTYPE_F32, &xs, NULL));
  const kiln_attr_t to64 = kiln_attr_make_int("to", 11), to32 = kiln_attr_make_int("to", 1); /* ONNX DOUBLE, FLOAT */
  ok = ok && node(g, "Cast", "wide", 1, (const char*[]){"x"}, "x64", 1, &to64) &&
       node(g, "Mul", "square64", 2, (const char*[]){"x64", "x64"}, "s64", 0, NULL) &&
       node(g, "Cast", "narrow", 1, (const char*[]){"s64"}, "y", 1, &to32);
  ok = ok && CHECK_OK(kiln_graph_add_output(g, "y"));
  kiln_program_t* prog = NULL;
  kiln_compile_log_t log = {0};
  kiln_compile_config_t cc = {.target = kiln_target_find("vulkan"), .opt = 1, .threads = 2, .model_name = "f64",
                              .dyn_dim = "batch", .dyn_lo = 1, .dyn_hi = 4};
  if (ok && CHECK_OK(kiln_graph_prepare(g)) && CHECK_OK(kiln_compile_graph_passes(g, 1, cc.target, &log)))
    CHECK_ERR(kiln_compile_program(g, &cc, &log, &prog), KILN_UNSUPPORTED, "runs on the host CPU beside the GPU");
  kiln_program_destroy(prog);
  kiln_compile_log_free(&log);
  kiln_graph_destroy(g);
}

/* Session output at batch |n| against the reference run of the graph
 * built at |n|. */
static void check_batch(kiln_session_t* s, int64_t n) {
  kiln_graph_t* g = cnn(n);
  if (!g || !CHECK_OK(kiln_graph_prepare(g))) {
    kiln_graph_destroy(g);
    return;
  }
  kiln_array_t x = filled(4, (const int64_t[]){n, 16, 32, 32}, 100 + (uint32_t)n);
  kiln_array_t want, got;
  memset(&want, 0, sizeof want);
  memset(&got, 0, sizeof got);
  if (CHECK_OK(kiln_ref_run(g, &x, NULL, &want)) && CHECK_OK(kiln_session_run(s, &x, &got))) {
    CHECK(got.shape.rank == 2 && got.shape.dims[0] == n && got.shape.dims[1] == 5);
    double worst = 0, scale = 0;
    for (size_t i = 0; i < want.nbytes / 4 && got.nbytes == want.nbytes; ++i) {
      worst = fmax(worst, fabs(((float*)got.data)[i] - ((float*)want.data)[i]));
      scale = fmax(scale, fabs(((float*)want.data)[i]));
    }
    /* Winograd's transforms round differently from the direct sum */
    CHECK_MSG(got.nbytes == want.nbytes && worst <= 1e-4 * (1 + scale), "batch %lld: max abs error %g (scale %g)",
              (long long)n, worst, scale);
  }
  kiln_array_free(al(), &x);
  kiln_array_free(al(), &want);
  kiln_array_free(al(), &got);
  kiln_graph_destroy(g);
}

static void test_device(const char* target) {
  kiln_program_t* p = dyn_program(target);
  uint8_t* bytes = NULL;
  size_t len = 0;
  kiln_module_t* m = NULL;
  kiln_device_t* d = NULL;
  kiln_session_t* s = NULL;
  kiln_session_options_t so;
  kiln_session_options_default(&so);
  so.slots = 2;
  if (p && CHECK_OK(kiln_module_serialize(p, al(), &bytes, &len)) &&
      CHECK_OK(kiln_module_load_memory(bytes, len, "cnn.kiln", al(), &m)) &&
      CHECK_OK(kiln_device_open(target, NULL, al(), &d)) && CHECK_OK(kiln_session_create(m, d, &so, &s))) {
    const int64_t order[] = {1, 4, 2, 4, 3};
    for (size_t i = 0; i < sizeof order / sizeof order[0]; ++i) check_batch(s, order[i]);
    /* two slots in flight at different batches, each its own grids */
    kiln_array_t x2 = filled(4, (const int64_t[]){2, 16, 32, 32}, 7), x4 = filled(4, (const int64_t[]){4, 16, 32, 32}, 9);
    kiln_array_t y2, y4, r2, r4;
    memset(&y2, 0, sizeof y2);
    memset(&y4, 0, sizeof y4);
    memset(&r2, 0, sizeof r2);
    memset(&r4, 0, sizeof r4);
    uint64_t a = 0, b = 0;
    if (CHECK_OK(kiln_session_enqueue(s, &x2, &a)) && CHECK_OK(kiln_session_enqueue(s, &x4, &b)) &&
        CHECK_OK(kiln_session_wait(s, b, &y4)) && CHECK_OK(kiln_session_wait(s, a, &y2)) &&
        CHECK_OK(kiln_session_run(s, &x2, &r2)) && CHECK_OK(kiln_session_run(s, &x4, &r4))) {
      CHECK(y2.shape.dims[0] == 2 && y4.shape.dims[0] == 4);
      CHECK(y2.nbytes == r2.nbytes && !memcmp(y2.data, r2.data, r2.nbytes));
      CHECK(y4.nbytes == r4.nbytes && !memcmp(y4.data, r4.data, r4.nbytes));
    }
    /* outside the range: the input, the dim, the value and the range */
    kiln_array_t x5 = filled(4, (const int64_t[]){5, 16, 32, 32}, 5), out;
    memset(&out, 0, sizeof out);
    CHECK_ERR(kiln_session_run(s, &x5, &out), KILN_INVALID_ARGUMENT,
              "input 'x' dim 0 ('batch') is 5, outside the module's range 1..4");
    CHECK(out.data == NULL);
    kiln_array_t* all[] = {&x2, &x4, &y2, &y4, &r2, &r4, &x5};
    for (size_t i = 0; i < sizeof all / sizeof all[0]; ++i) kiln_array_free(al(), all[i]);
  }
  kiln_session_destroy(s);
  kiln_device_release(d);
  kiln_module_release(m);
  free(bytes);
  kiln_program_destroy(p);
}

static void test_device_target(void) { test_device(g_target); }

int main(int argc, char** argv) {
  if (argc == 3 && !strcmp(argv[1], "--target")) g_target = argv[2];
  if (!kiln_target_find("opencl")) {
    printf("SKIP: the opencl target is not built\n");
    return 0;
  }
  if (g_target) RUN(test_device_target);
  else {
    RUN(test_program);
    RUN(test_q8_refused);
    RUN(test_host_refused);
  }
  return kiln_test_finish();
}
