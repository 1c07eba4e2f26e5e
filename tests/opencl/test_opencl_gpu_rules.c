/* The OpenCL target's GPU rules (targets/opencl/opencl_tiles.c,
 * opencl_schedule.c) on device 0 (PoCL's CPU device in CI, where they are
 * correct but slow): which rule set a compile takes (the device class,
 * KILN_GPU_CLASS_GPU in the template set's gpu_lacks, or
 * KILN_OPENCL_RULES=gpu|cpu over it), that the GPU rules' descriptors and
 * launches are work-groups of 64-256 work-items (GEMM / implicit-GEMM conv
 * 8x8 or 16x16, Winograd 16x4 at F(2x2) and F(4x4), depthwise 128, printed
 * kernels 64 whatever their extent; GEMMs' partial sums private, GPSUM 1)
 * where the CPU rules keep PoCL's one-item groups, that every chosen point is one the tuner's space holds and its
 * check accepts, and that MatMuls, convs (1x1, 3x3 strided, Winograd with
 * fewer input channels than a slice), depthwise convs and element-wise
 * kernels of odd and even shapes match the reference executor with them. */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "compiler/pipeline.h"
#include "compiler/ref_exec.h"
#include "graph_harness.h"
#include "ir/graph.h"
#include "lowering/fuse.h"
#include "lowering/plan.h"
#include "lowering/template.h"
#include "targets/opencl/opencl_internal.h"
#include "targets/opencl/opencl_target.h"
#include "targets/program_build.h"
#include "targets/registry.h"
#include "testing.h"

static kiln_allocator_t A(void) { return kiln_allocator_system(); }
static kiln_device_t* dev;
/* the graph checked has a printed kernel of a small extent (one item a
 * group on the CPU rules) */
static bool g_small_printed;
/* Winograd wherever it covers (the set's thresholds at 0, as
 * KILN_OPENCL_WINOGRAD=all, which would not leave f4 to ask for) */
static bool g_wino_all;

/* KILN_OPENCL_RULES (NULL: unset) and the device class the compile says */
static void set_rules(const char* v) {
  if (v) setenv("KILN_OPENCL_RULES", v, 1);
  else unsetenv("KILN_OPENCL_RULES");
}

/* The work-items of one group of kernel |pk|. */
static int64_t group_items(const kiln_program_kernel_t* pk) { return pk->local[0] * pk->local[1] * pk->local[2]; }

/* Descriptor |t|'s tiles are a GPU rules' point: work-groups of 64-256
 * items, a point the tuner's space holds and its check takes. */
static void gpu_point(const kiln_template_t* t, const char* what) {
  const int32_t* v = t->tiles.v;
  int64_t items = 0;
  switch (t->kind) {
    case KILN_TEMPLATE_GEMM:
    case KILN_TEMPLATE_CONV: items = (int64_t)v[3] * v[4]; break;
    case KILN_TEMPLATE_WINOGRAD: items = (int64_t)v[2] * v[3]; break;
    case KILN_TEMPLATE_DEPTHWISE: items = v[2]; break;
    default: return;
  }
  CHECK_MSG(items >= 64 && items <= 256, "%s: a template of kind %d has work-groups of %lld items", what,
            (int)t->kind, (long long)items);
  kiln_template_space_t sp;
  int32_t idx[KILN_TEMPLATE_TILES_MAX];
  /* a K under the rule's slice is one slice of K rounded up to the
   * vector width, outside the space's bk list (as on the CPU rules) */
  const int64_t kk = t->kind == KILN_TEMPLATE_GEMM ? t->gemm.K : t->kind == KILN_TEMPLATE_CONV ? t->conv.K : 0;
  const bool short_k = kk && kk < 64 && v[5] == (kk + v[2] - 1) / v[2] * v[2];
  if (!short_k)
    CHECK_MSG(kiln_opencl_tune_space(t, &sp) && kiln_template_space_index(&sp, &t->tiles, idx),
              "%s: the GPU point of kind %d is not in the tuner's space", what, (int)t->kind);
  const kiln_template_limits_t lim = {.max_workgroup_size = 256, .local_mem_bytes = 32768};
  const char* bad = kiln_opencl_tune_check(t, &t->tiles, &lim);
  CHECK_MSG(!bad, "%s: the tuner refuses the GPU point (%s)", what, bad ? bad : "");
}

typedef struct {
  const char* rules;  /* KILN_OPENCL_RULES */
  uint32_t lacks;     /* the template set's / plan's gpu_lacks (the device class) */
  bool gpu;           /* the rule set expected */
  const char* label;
} mode_t_;

static const mode_t_ k_modes[] = {
    {"gpu", 0, true, "KILN_OPENCL_RULES=gpu"},
    {NULL, KILN_GPU_CLASS_GPU, true, "a GPU device"},
    {"cpu", KILN_GPU_CLASS_GPU, false, "a GPU device, KILN_OPENCL_RULES=cpu"},
    {NULL, 0, false, "a CPU device"},
};

/* Plans, chooses (|to|), emits and runs |b|'s graph in each mode; |kinds|:
 * the template kinds expected (a bit each), |run|: the modes run on the
 * device (bit i: k_modes[i]; the others are checked without running). */
static void check_graph(gb_t* b, const char* what, const kiln_opencl_template_options_t* to, uint32_t kinds,
                        uint32_t run) {
  kiln_array_t want[4];
  memset(want, 0, sizeof want);
  if (!CHECK_OK(b->st) || !CHECK_OK(kiln_graph_prepare(b->g))) goto done;
  kiln_ref_options_t ro;
  kiln_ref_options_default(&ro);
  if (!CHECK_OK(kiln_ref_run(b->g, b->feeds, &ro, want))) goto done;
  for (size_t m = 0; m < sizeof k_modes / sizeof k_modes[0]; ++m) {
    const mode_t_* md = &k_modes[m];
    char label[240];
    snprintf(label, sizeof label, "%s (%s)", what, md->label);
    set_rules(md->rules);
    CHECK_MSG(kiln_opencl_rules_gpu(md->lacks) == md->gpu, "%s: the rule set is not the %s one", label,
              md->gpu ? "GPU" : "CPU");
    kiln_plan_t* plan = NULL;
    kiln_plan_options_t po = {KILN_TARGET_CLASS_GPU, 0, 0, 0, 0, 0};
    if (!CHECK_OK(kiln_plan_build(b->g, &po, A(), &plan))) break;
    plan->gpu_lacks = md->lacks;
    kiln_fusion_report_t rep;
    kiln_template_set_t set;
    kiln_opencl_templates(to, &set);
    set.gpu_lacks = md->lacks;
    if (g_wino_all) set.winograd_min_channels = 0, set.winograd_min_tiles = 0, set.winograd_min_work = 0;
    kiln_program_t* prog = NULL;
    kiln_program_build_options_t bo = {.model_name = what, .no_code = true};
    if (CHECK_OK(kiln_plan_fuse(plan, &rep, NULL)) && CHECK_OK(kiln_template_choose(plan, &set)) &&
        CHECK_OK(kiln_program_build(plan, kiln_target_find("opencl"), &bo, A(), &prog)) &&
        CHECK_OK(kiln_opencl_emit_ex(plan, prog, &(kiln_opencl_emit_options_t){0})) &&
        CHECK_OK(kiln_program_validate(prog))) {
      uint32_t seen = 0;
      int32_t one_item = 0, multi = 0;
      for (int32_t k = 0; k < plan->n_kernels; ++k) {
        const kiln_template_t* t = plan->kernels[k].tmpl;
        if (t && t->kind != KILN_TEMPLATE_NONE) {
          seen |= 1u << t->kind;
          if (md->gpu) gpu_point(t, label);
        }
      }
      for (int32_t k = 0; k < prog->n_kernels; ++k) {
        const kiln_program_kernel_t* pk = &prog->kernels[k];
        const int64_t groups = pk->groups[0] * pk->groups[1] * pk->groups[2];
        if (groups > 1) ++multi;
        if (groups > 1 && group_items(pk) == 1) ++one_item;
        if (md->gpu && groups > 1)
          CHECK_MSG(group_items(pk) >= 64 && group_items(pk) <= 256,
                    "%s: kernel '%s' launches groups of %lld work-items under the GPU rules", label, pk->name,
                    (long long)group_items(pk));
      }
      /* the CPU rules keep PoCL's one-item groups (the GEMM / conv tiles)
       * wherever there is more than one group */
      if (!md->gpu && multi && (g_small_printed || (kinds & ((1u << KILN_TEMPLATE_GEMM) | (1u << KILN_TEMPLATE_CONV)))))
        CHECK_MSG(one_item > 0, "%s: the CPU rules launched no one-item groups", label);
      /* GEMMs keep an f32 Y's partial sums private on the GPU rules only */
      if (kinds & (1u << KILN_TEMPLATE_GEMM)) {
        const char* want_ps = md->gpu ? "#define GPSUM 1" : "#define GPSUM 0";
        CHECK_MSG(strstr(prog->code.text, want_ps) != NULL, "%s: no '%s' in the program", label, want_ps);
      }
      CHECK_MSG((seen & kinds) == kinds, "%s: template kinds 0x%x chosen, expected 0x%x among them", label,
                (unsigned)seen, (unsigned)kinds);
      if (run & (1u << m)) run_and_check(dev, prog, b->feeds, want, b->g->n_outputs, label);
    }
    kiln_program_destroy(prog);
    kiln_plan_destroy(plan);
  }
  set_rules(NULL);
done:
  for (int o = 0; o < 4; ++o) kiln_array_free(A(), &want[o]);
  for (int i = 0; i < b->n_feeds; ++i) kiln_array_free(A(), &b->feeds[i]);
  kiln_graph_destroy(b->g);
}

/* the GPU rules run with the override and with the device class (modes 0,
 * 1); the CPU rules' results are the other tests' */
#define RUN_GPU 3u
#define K(kind) (1u << KILN_TEMPLATE_##kind)

static void matmul(int64_t m, int64_t k, int64_t n) {
  char what[80];
  snprintf(what, sizeof what, "MatMul %lldx%lld x %lldx%lld + Relu", (long long)m, (long long)k, (long long)k,
           (long long)n);
  gb_t b;
  gb_init(&b);
  input(&b, "a", DIMS(m, k));
  konst(&b, "w", DIMS(k, n));
  node(&b, "MatMul", IN("a", "w"), "y", 0, NULL);
  node(&b, "Relu", IN("y"), "out", 0, NULL);
  kiln_graph_add_output(b.g, "out");
  check_graph(&b, what, NULL, K(GEMM), RUN_GPU);
}

static void test_gemm(void) {
  matmul(33, 70, 50);    /* odd: 8x8 groups, K slices of 64 and an edge */
  matmul(64, 96, 128);   /* even, few blocks: 8x8 */
  matmul(256, 40, 1024); /* 64 blocks of 64 x 64: 16x16 groups */
  matmul(5, 3, 7);       /* a K shorter than the vector width */
}

static void conv(const char* what, int64_t c, int64_t m, int64_t h, int64_t w, int64_t k, int64_t s, uint32_t kinds) {
  gb_t b;
  gb_init(&b);
  input(&b, "x", DIMS(1, c, h, w));
  konst(&b, "w", DIMS(m, c, k, k));
  konst(&b, "bias", DIMS(m));
  const int64_t p = k / 2;
  kiln_attr_t at[2] = {kiln_attr_make_ints("pads", 4, (int64_t[]){p, p, p, p}),
                       kiln_attr_make_ints("strides", 2, (int64_t[]){s, s})};
  node(&b, "Conv", IN("x", "w", "bias"), "y", 2, at);
  node(&b, "Relu", IN("y"), "out", 0, NULL);
  kiln_graph_add_output(b.g, "out");
  check_graph(&b, what, NULL, kinds, RUN_GPU);
}

static void test_conv(void) {
  conv("1x1 conv 16 -> 32 14x14", 16, 32, 14, 14, 1, 1, K(CONV));
  conv("1x1 conv 24 -> 40 13x11", 24, 40, 13, 11, 1, 1, K(CONV));
  conv("3x3 s2 conv 8 -> 24 15x17", 8, 24, 15, 17, 3, 2, K(CONV));
  conv("3x3 Winograd 16 -> 32 28x28", 16, 32, 28, 28, 3, 1, K(WINOGRAD));
  g_wino_all = true;
  conv("3x3 Winograd 5 -> 12 9x13 (C under the slice)", 5, 12, 9, 13, 3, 1, K(WINOGRAD));
  conv("3x3 Winograd 12 -> 20 10x11 (an edge slice)", 12, 20, 10, 11, 3, 1, K(WINOGRAD));
  g_wino_all = false;
  setenv("KILN_OPENCL_WINOGRAD", "f4", 1);
  conv("3x3 Winograd F(4x4) 16 -> 24 20x18", 16, 24, 20, 18, 3, 1, K(WINOGRAD));
  g_wino_all = true;
  conv("3x3 Winograd F(4x4) 3 -> 8 11x9", 3, 8, 11, 9, 3, 1, K(WINOGRAD));
  conv("3x3 Winograd F(4x4) 6 -> 8 12x13 (an edge slice)", 6, 8, 12, 13, 3, 1, K(WINOGRAD));
  g_wino_all = false;
  unsetenv("KILN_OPENCL_WINOGRAD");
}

static void dw(const char* what, int64_t c, int64_t h, int64_t w, int64_t s) {
  gb_t b;
  gb_init(&b);
  input(&b, "x", DIMS(1, c, h, w));
  konst(&b, "w", DIMS(c, 1, 3, 3));
  konst(&b, "bias", DIMS(c));
  kiln_attr_t at[3] = {kiln_attr_make_ints("pads", 4, (int64_t[]){1, 1, 1, 1}),
                       kiln_attr_make_ints("strides", 2, (int64_t[]){s, s}), kiln_attr_make_int("group", c)};
  node(&b, "Conv", IN("x", "w", "bias"), "y", 3, at);
  node(&b, "Relu", IN("y"), "out", 0, NULL);
  kiln_graph_add_output(b.g, "out");
  const kiln_opencl_template_options_t to = {.all_dw_template = true};
  check_graph(&b, what, &to, K(DEPTHWISE), RUN_GPU);
}

static void test_depthwise(void) {
  dw("depthwise 3x3 s1 16 x 19x23", 16, 19, 23, 1);
  dw("depthwise 3x3 s2 24 x 28x28", 24, 28, 28, 2);
  dw("depthwise 3x3 s2 8 x 7x7", 8, 7, 7, 2);
}

/* printed element-wise kernels: extents under 256 (one item a group on
 * the CPU rules, 64 on the GPU rules) and a larger one */
static void test_printed(void) {
  static const int64_t sizes[][4] = {{1, 3, 7, 5}, {2, 8, 30, 31}};
  for (int i = 0; i < 2; ++i) {
    const int64_t* d = sizes[i];
    char what[80];
    snprintf(what, sizeof what, "Add + Sigmoid %lldx%lldx%lldx%lld", (long long)d[0], (long long)d[1],
             (long long)d[2], (long long)d[3]);
    gb_t b;
    gb_init(&b);
    input(&b, "x", DIMS(d[0], d[1], d[2], d[3]));
    input(&b, "z", DIMS(d[0], d[1], d[2], d[3]));
    node(&b, "Add", IN("x", "z"), "y", 0, NULL);
    node(&b, "Sigmoid", IN("y"), "out", 0, NULL);
    kiln_graph_add_output(b.g, "out");
    g_small_printed = d[0] * d[1] * d[2] * d[3] <= 256;
    check_graph(&b, what, NULL, 0, RUN_GPU);
    g_small_printed = false;
  }
}

/* The class a compile for this device gets (kiln_compile_gpu_lacks): PoCL
 * is CPU-backed, so none without an override; KILN_OPENCL_RULES forces
 * either way, and the Vulkan target's variable does not reach an OpenCL
 * device's compiles (nor this one's a Vulkan device's: test_vulkan_device). */
static void test_class(void) {
  unsetenv("KILN_VULKAN_RULES");
  set_rules(NULL);
  CHECK(((kiln_compile_gpu_lacks(&dev->info) & KILN_GPU_CLASS_GPU) != 0) == !dev->info.cpu_backed);
  set_rules("gpu");
  CHECK(kiln_compile_gpu_lacks(&dev->info) & KILN_GPU_CLASS_GPU);
  set_rules("cpu");
  CHECK(!(kiln_compile_gpu_lacks(&dev->info) & KILN_GPU_CLASS_GPU));
  set_rules(NULL);
  setenv("KILN_VULKAN_RULES", "gpu", 1);
  CHECK_MSG(((kiln_compile_gpu_lacks(&dev->info) & KILN_GPU_CLASS_GPU) != 0) == !dev->info.cpu_backed,
            "KILN_VULKAN_RULES=gpu changed an OpenCL device's class");
  unsetenv("KILN_VULKAN_RULES");
}

int main(void) {
  if (!(dev = open_opencl_device_0())) return 1;
  RUN(test_class);
  RUN(test_printed);
  RUN(test_gemm);
  RUN(test_depthwise);
  RUN(test_conv);
  kiln_device_release(dev);
  return kiln_test_finish();
}
