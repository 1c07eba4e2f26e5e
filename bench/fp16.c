/* fp16 benchmark: size, speed and accuracy of --precision fp16 against
 * fp32 on real models, one line per model and target.
 *
 *   kiln_bench_fp16 [--target cpu|opencl|vulkan] [--inputs N] [--repeat R] MODEL.onnx ...
 *
 * Each model goes through the steps of `kiln run` (symbolic dims bound to
 * 1, prepare, graph passes -O1, lowering for the target class, fusion),
 * once as is and once through kiln_plan_set_precision (fp16 storage; fp16
 * arithmetic for element-wise kernels where the device has it; on the CPU
 * the GEMM workspaces stay f32, see precision.h), then
 *  - weights: the program's weights blob; arena: kiln_memory_plan at
 *    64-byte alignment (the session's planner); on the CPU also the arena
 *    with f16 workspaces;
 *  - latency: median of R runs through a session after one warm-up;
 *  - accuracy over N seeded N(0,1) inputs: the largest |fp16 - fp32| of the
 *    logits relative to the largest |fp32 logit| of the same input, and
 *    how often the top-1 class agrees;
 *  - the same for fp16 weights only (activations f32; a second line).
 * Prints (MB = 10^6 bytes):
 *   fp16 resnet18 cpu: weights 46.76 -> 23.38 MB (0.500x), arena ... ,
 *   latency 14.1 -> 15.0 ms (1.06x), logits max rel err 2.1e-03, top-1 100/100
 * Exits 1 when a model fails to compile or run. No assertion on figures. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "frontend/onnx.h"
#include "ir/passes.h"
#include "kiln/runtime.h"
#include "lowering/fuse.h"
#include "lowering/precision.h"
#include "runtime/device.h"
#include "runtime/module_impl.h"
#include "runtime/planner.h"
#include "targets/program_build.h"

static double now_s(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

static void model_label(const char* path, char* out, size_t n) {
  const char* base = strrchr(path, '/');
  base = base ? base + 1 : path;
  snprintf(out, n, "%s", base);
  size_t len = strlen(out);
  if (len > 5 && !strcmp(out + len - 5, ".onnx")) out[len - 5] = 0;
}

typedef struct {
  kiln_program_t* prog;
  uint64_t arena;
} built_t;

/* Plan -> (fp16) -> program; |mode16| 0 fp32, 1 fp16, 2 fp16 with f16
 * workspaces, 3 fp16 weights only. */
static kiln_status_t build(const kiln_graph_t* g, const kiln_target_t* target, int mode16, bool fp16_arith,
                           built_t* out) {
  kiln_allocator_t a = kiln_allocator_system();
  kiln_plan_t* plan = NULL;
  kiln_plan_options_t po = {target->lowering, 0, 0, 0, 0, 0};
  kiln_status_t s = kiln_plan_build(g, &po, a, &plan);
  if (!s) s = kiln_plan_fuse(plan, NULL, NULL);
  if (!s && mode16) {
    kiln_precision_options_t o = {KILN_PRECISION_FP16, fp16_arith, false, NULL,
                                  mode16 == 1 && target->fp16_keeps_f32_workspaces, mode16 == 3};
    s = kiln_plan_set_precision(plan, &o, NULL);
  }
  kiln_template_set_t templates;
  kiln_program_templates(target, &templates);
  if (!s) s = kiln_template_choose(plan, &templates);
  kiln_program_build_options_t bo = {.precision = mode16 ? "fp16" : "fp32", .options = "-O1"};
  if (!s) s = kiln_program_build(plan, target, &bo, a, &out->prog);
  kiln_plan_destroy(plan);
  if (s) return s;
  kiln_memory_plan_t mp;
  s = kiln_memory_plan(out->prog, 64, a, &mp);
  if (!s) {
    out->arena = mp.arena_bytes;
    kiln_memory_plan_free(a, &mp);
  }
  return s;
}

static uint64_t rng_next(uint64_t* s) {
  *s ^= *s << 13;
  *s ^= *s >> 7;
  *s ^= *s << 17;
  return *s;
}

static void fill_normal(kiln_array_t* x, uint64_t seed) {
  uint64_t s = seed * 0x9E3779B97F4A7C15ull + 0x51ED;
  if (!s) s = 1;
  float* f = x->data;
  for (int64_t i = 0, n = kiln_array_numel(x); i < n; ++i) {
    double u1 = ((double)(rng_next(&s) >> 11) + 1.0) / 9007199254740993.0;
    double u2 = (double)(rng_next(&s) >> 11) / 9007199254740992.0;
    f[i] = (float)(sqrt(-2 * log(u1)) * cos(6.283185307179586 * u2));
  }
}

static int cmp_d(const void* a, const void* b) {
  double x = *(const double*)a, y = *(const double*)b;
  return x < y ? -1 : x > y;
}

static kiln_status_t median_ms(kiln_session_t* ses, const kiln_array_t* in, int repeat, double* out) {
  kiln_array_t o = {0};
  KILN_RETURN_IF_ERROR(kiln_session_run(ses, in, &o)); /* warm-up */
  kiln_array_free(kiln_allocator_system(), &o);
  double* t = calloc((size_t)repeat + 1, sizeof(double));
  if (!t) return kiln_make_status(KILN_OUT_OF_MEMORY, "timings");
  kiln_status_t s = NULL;
  for (int r = 0; r < repeat && !s; ++r) {
    double t0 = now_s();
    s = kiln_session_run(ses, in, &o);
    t[r] = now_s() - t0;
    kiln_array_free(kiln_allocator_system(), &o);
  }
  qsort(t, (size_t)repeat, sizeof(double), cmp_d);
  *out = t[repeat / 2] * 1e3;
  free(t);
  return s;
}

static int64_t argmax(const kiln_array_t* a) {
  const float* f = a->data;
  int64_t best = 0;
  for (int64_t i = 1, n = kiln_array_numel(a); i < n; ++i)
    if (f[i] > f[best]) best = i;
  return best;
}

/* Largest |got - want| relative to the largest |want| (NaN: infinite). */
static double rel_err(const kiln_array_t* want, const kiln_array_t* got) {
  const float* p = want->data;
  const float* q = got->data;
  double mx = 0, md = 0;
  for (int64_t e = 0, n = kiln_array_numel(want); e < n; ++e) {
    if (fabs(p[e]) > mx) mx = fabs(p[e]);
    double d = fabs((double)p[e] - q[e]);
    if (!(d <= md)) md = isnan(d) ? INFINITY : d;
  }
  return mx > 0 ? md / mx : md;
}

static kiln_status_t bench_model(const char* path, const char* target_name, int n_inputs, int repeat) {
  kiln_allocator_t a = kiln_allocator_system();
  char label[256];
  model_label(path, label, sizeof label);
  kiln_graph_t* g = NULL;
  KILN_RETURN_IF_ERROR(kiln_onnx_parse_model(path, NULL, a, &g));
  for (int32_t k = 0; k < g->n_inputs; ++k) {
    kiln_tensor_t* t = &g->tensors[g->inputs[k]];
    for (int32_t d = 0; d < t->shape.rank; ++d)
      if (kiln_dim_symbol(t->shape.dims[d])) t->shape.dims[d] = 1;
  }
  kiln_device_t* dev = NULL;
  kiln_device_open_options_t oo = {0, true, stderr};
  built_t b32 = {0}, b16 = {0}, b16w = {0}, b16o = {0};
  kiln_module_t *m32 = NULL, *m16 = NULL, *m16o = NULL;
  kiln_session_t *s32 = NULL, *s16 = NULL, *s16o = NULL;
  kiln_array_t x = {0}, y32 = {0}, y16 = {0};
  kiln_status_t s = kiln_graph_prepare(g);
  if (!s) s = kiln_graph_optimize(g, 1, NULL);
  if (!s) s = kiln_device_open(target_name, &oo, a, &dev);
  /* The device may have fallen back to the CPU: build for what opened. */
  const kiln_target_t* target = NULL;
  bool cpu = true;
  if (!s) {
    cpu = !strcmp(kiln_device_api(dev), "cpu");
    target = kiln_target_find(kiln_device_api(dev));
    if (!target) s = kiln_make_status(KILN_INTERNAL, "device api '%s' has no target", kiln_device_api(dev));
  }
  bool arith = dev && dev->info.fp16_arith;
  if (!s) s = build(g, target, 0, false, &b32);
  if (!s) s = build(g, target, 1, arith, &b16);
  if (!s && cpu) s = build(g, target, 2, arith, &b16w);
  if (!s) s = build(g, target, 3, arith, &b16o);
  uint64_t w16o = b16o.prog ? b16o.prog->weights_len : 0;
  uint64_t w32 = b32.prog ? b32.prog->weights_len : 0, w16 = b16.prog ? b16.prog->weights_len : 0;
  if (!s) s = kiln_module_wrap(b32.prog, &m32);
  if (!s) b32.prog = NULL;
  if (!s) s = kiln_module_wrap(b16.prog, &m16);
  if (!s) b16.prog = NULL;
  if (!s) s = kiln_module_wrap(b16o.prog, &m16o);
  if (!s) b16o.prog = NULL;
  kiln_session_options_t so;
  kiln_session_options_default(&so);
  so.slots = 1;
  if (!s) s = kiln_session_create(m32, dev, &so, &s32);
  if (!s) s = kiln_session_create(m16, dev, &so, &s16);
  if (!s) s = kiln_session_create(m16o, dev, &so, &s16o);
  const kiln_tensor_t* it = &g->tensors[g->inputs[0]];
  if (!s) s = kiln_array_alloc(a, KILN_DTYPE_F32, &it->shape, &x);
  double ms32 = 0, ms16 = 0, ms16o = 0, max_rel = 0, max_rel_o = 0;
  int agree = 0, agree_o = 0, done = 0;
  if (!s) {
    fill_normal(&x, 12345);
    s = median_ms(s32, &x, repeat, &ms32);
    if (!s) s = median_ms(s16, &x, repeat, &ms16);
    if (!s) s = median_ms(s16o, &x, repeat, &ms16o);
  }
  kiln_array_t y16o = {0};
  for (int i = 0; i < n_inputs && !s; ++i) {
    fill_normal(&x, (uint64_t)i + 1);
    s = kiln_session_run(s32, &x, &y32);
    if (!s) s = kiln_session_run(s16, &x, &y16);
    if (!s) s = kiln_session_run(s16o, &x, &y16o);
    if (!s) {
      double r = rel_err(&y32, &y16), ro = rel_err(&y32, &y16o);
      if (!(r <= max_rel)) max_rel = r; /* NaN counts as the worst */
      if (!(ro <= max_rel_o)) max_rel_o = ro;
      agree += argmax(&y32) == argmax(&y16);
      agree_o += argmax(&y32) == argmax(&y16o);
      ++done;
    }
    kiln_array_free(a, &y32);
    kiln_array_free(a, &y16);
    kiln_array_free(a, &y16o);
  }
  if (!s) {
    char ws[128] = "";
    if (cpu)
      snprintf(ws, sizeof ws, "; f16 workspaces %.2f MB %.3fx", (double)b16w.arena / 1e6,
               b32.arena ? (double)b16w.arena / (double)b32.arena : 0.0);
    printf("fp16 %s %s%s: weights %.2f -> %.2f MB (%.3fx), arena %.2f -> %.2f MB (%.3fx%s), latency %.2f -> %.2f ms "
           "(%.2fx, median of %d), logits max rel err %.2e, top-1 %d/%d\n",
           label, kiln_device_api(dev), arith ? " (fp16 arith)" : "", (double)w32 / 1e6, (double)w16 / 1e6,
           w32 ? (double)w16 / (double)w32 : 0.0, (double)b32.arena / 1e6, (double)b16.arena / 1e6,
           b32.arena ? (double)b16.arena / (double)b32.arena : 0.0, ws, ms32, ms16, ms32 > 0 ? ms16 / ms32 : 0.0,
           repeat, max_rel, agree, done);
    printf("fp16 %s %s weights-only: weights %.2f MB (%.3fx), arena %.2f MB (%.3fx), latency %.2f -> %.2f ms (%.2fx), "
           "logits max rel err %.2e, top-1 %d/%d\n",
           label, kiln_device_api(dev), (double)w16o / 1e6, w32 ? (double)w16o / (double)w32 : 0.0,
           (double)b16o.arena / 1e6, b32.arena ? (double)b16o.arena / (double)b32.arena : 0.0, ms32, ms16o,
           ms32 > 0 ? ms16o / ms32 : 0.0, max_rel_o, agree_o, done);
    fflush(stdout);
  }
  kiln_array_free(a, &x);
  kiln_session_destroy(s32);
  kiln_session_destroy(s16);
  kiln_session_destroy(s16o);
  kiln_module_release(m32);
  kiln_module_release(m16);
  kiln_module_release(m16o);
  kiln_program_destroy(b32.prog);
  kiln_program_destroy(b16.prog);
  kiln_program_destroy(b16w.prog);
  kiln_program_destroy(b16o.prog);
  kiln_device_release(dev);
  kiln_graph_destroy(g);
  return s ? kiln_status_annotate(s, "%s on %s", label, target_name) : NULL;
}

int main(int argc, char** argv) {
  const char* target = "cpu";
  int n_inputs = 100, repeat = 10, rc = 0, n_models = 0;
  for (int i = 1; i < argc; ++i) {
    if (!strcmp(argv[i], "--target") && i + 1 < argc) {
      target = argv[++i];
    } else if (!strcmp(argv[i], "--inputs") && i + 1 < argc) {
      n_inputs = atoi(argv[++i]);
    } else if (!strcmp(argv[i], "--repeat") && i + 1 < argc) {
      repeat = atoi(argv[++i]);
      if (repeat < 1) repeat = 1;
    } else if (argv[i][0] == '-') {
      fprintf(stderr, "usage: kiln_bench_fp16 [--target cpu|opencl|vulkan] [--inputs N] [--repeat R] MODEL.onnx ...\n");
      return 2;
    } else {
      ++n_models;
      kiln_status_t s = bench_model(argv[i], target, n_inputs, repeat);
      if (s) {
        fprintf(stderr, "kiln_bench_fp16: error: %s\n", kiln_status_message(s));
        kiln_status_free(s);
        rc = 1;
      }
    }
  }
  if (!n_models) {
    fprintf(stderr, "usage: kiln_bench_fp16 [--target cpu|opencl|vulkan] [--inputs N] [--repeat R] MODEL.onnx ...\n");
    return 2;
  }
  return rc;
}
