/* The OpenCL target's GPU rules (targets/opencl/opencl_tiles.c,
 * opencl_schedule.c) on device 0 (PoCL's CPU device in CI, where they are
 * correct but slow): which rule set a compile takes (the device class,
 * KILN_GPU_CLASS_GPU in the flags kiln_compile_gpu_lacks makes, with
 * KILN_OPENCL_RULES=gpu|cpu over it), that the GPU rules' descriptors and
 * launches are work-groups of 64-256 work-items (GEMM / implicit-GEMM conv
 * 8x8 or 16x16 with odd K slices, Winograd 16x4 at F(2x2) and F(4x4),
 * depthwise 128, GEMV 64-128 splitting K, printed kernels 64 whatever
 * their extent; GEMMs' partial sums private, GPSUM 1; a run-time-shape
 * conv's __local slice its own) where the CPU rules keep PoCL's one-item
 * groups, that every chosen point is one the tuner's space holds and its
 * check accepts, that the rules fit made-up devices' limits (NVIDIA, Mali,
 * AMD, small ones: items, warps, __local memory), and that MatMuls (GEMVs
 * too), convs (1x1, 3x3 strided, Winograd with fewer input channels than a
 * slice), depthwise convs and element-wise kernels of odd and even shapes
 * match the reference executor with them, on device 0's limits and on a
 * small made-up device's. */
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
    case KILN_TEMPLATE_CONV: items = t->tiles.n == 4 ? v[2] : (int64_t)v[3] * v[4]; break;
    case KILN_TEMPLATE_WINOGRAD: items = (int64_t)v[2] * v[3]; break;
    case KILN_TEMPLATE_DEPTHWISE: items = v[2]; break;
    default: return;
  }
  /* sized to the device the set named (t->device): at most its items,
   * whole warps, __local tiles within half its memory */
  const kiln_template_limits_t* d = &t->device;
  const int64_t cap = kiln_opencl_gpu_items(d);
  CHECK_MSG(items >= (cap < 64 ? cap : 64) && items <= cap,
            "%s: a template of kind %d has work-groups of %lld items (the device: at most %lld)", what,
            (int)t->kind, (long long)items, (long long)cap);
  if (d->warp > 1 && items >= d->warp)
    CHECK_MSG(items % d->warp == 0, "%s: groups of %lld items on a %d-wide warp", what, (long long)items, (int)d->warp);
  kiln_template_space_t sp;
  int32_t idx[KILN_TEMPLATE_TILES_MAX];
  /* a K under the rule's slice is one slice of K rounded up to the
   * vector width, outside the space's bk list (as on the CPU rules) */
  const int64_t kk = t->kind == KILN_TEMPLATE_GEMM ? t->gemm.K : t->kind == KILN_TEMPLATE_CONV ? t->conv.K : 0;
  const bool short_k = kk && kk < 64 && t->tiles.n == 8 && v[5] == (kk | 1);
  /* odd K slices (distinct __local banks for neighbouring items' panels) */
  if (t->tiles.n == 8) CHECK_MSG(v[5] % 2 == 1, "%s: an even K slice (%d) under the GPU rules", what, (int)v[5]);
  /* a GEMV (M <= 4): gemv.cl on, its items splitting K */
  if (t->kind == KILN_TEMPLATE_GEMM && kiln_opencl_gemv_covers(&t->gemm))
    CHECK_MSG(t->tiles.n == 4 && v[3] == 1 && v[0] == 4 && v[1] == 8,
              "%s: a GEMV under the GPU rules is not gemv.cl's 8 columns of float4s", what);
  if (!short_k)
    CHECK_MSG(kiln_opencl_tune_space(t, &sp) && kiln_template_space_index(&sp, &t->tiles, idx),
              "%s: the GPU point of kind %d is not in the tuner's space", what, (int)t->kind);
  const kiln_template_limits_t lim = {.max_workgroup_size = cap, .local_mem_bytes = kiln_opencl_gpu_local(d)};
  const char* bad = kiln_opencl_tune_check(t, &t->tiles, &lim);
  CHECK_MSG(!bad, "%s: the tuner refuses the GPU point (%s)", what, bad ? bad : "");
}

typedef struct {
  const char* rules;  /* KILN_OPENCL_RULES */
  bool cpu_backed;    /* the device's class (kiln_device_info_t.cpu_backed) */
  bool gpu;           /* the rule set expected */
  const char* label;
} mode_t_;

static const mode_t_ k_modes[] = {
    {"gpu", true, true, "KILN_OPENCL_RULES=gpu"},
    {NULL, false, true, "a GPU device"},
    {"cpu", false, false, "a GPU device, KILN_OPENCL_RULES=cpu"},
    {NULL, true, false, "a CPU device"},
};

/* The limits the set sizes the GPU rules to: device 0's own unless a test
 * makes one up (g_fake) */
static kiln_template_limits_t g_fake;
static bool g_use_fake;

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
    /* the flags a compile for such a device makes (the variable read there) */
    kiln_device_info_t info = dev->info;
    info.cpu_backed = md->cpu_backed;
    const uint32_t lacks = kiln_compile_gpu_lacks(&info);
    CHECK_MSG(kiln_opencl_rules_gpu(lacks) == md->gpu, "%s: the rule set is not the %s one", label,
              md->gpu ? "GPU" : "CPU");
    kiln_plan_t* plan = NULL;
    kiln_plan_options_t po = {KILN_TARGET_CLASS_GPU, 0, 0, 0, 0, 0};
    if (!CHECK_OK(kiln_plan_build(b->g, &po, A(), &plan))) break;
    plan->gpu_lacks = lacks;
    kiln_fusion_report_t rep;
    kiln_template_set_t set;
    kiln_opencl_templates(to, &set);
    set.gpu_lacks = lacks;
    kiln_compile_device_limits(&info, &set.limits);
    if (g_use_fake) set.limits = g_fake;
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
          CHECK_MSG(t->device.gpu_lacks == lacks, "%s: the instance's device has flags 0x%x, the set 0x%x", label,
                    (unsigned)t->device.gpu_lacks, (unsigned)lacks);
          /* a run-time-shape conv's __local slice: its own K slice on the
           * GPU rules (a GPU's local memory), 256 deep on PoCL's */
          if (t->kind == KILN_TEMPLATE_CONV && t->tiles.n == 8) {
            char want_bk[48];
            snprintf(want_bk, sizeof want_bk, "#define KC_BKX %d\n", md->gpu ? t->tiles.v[5] : t->tiles.v[5] > 256 ? t->tiles.v[5] : 256);
            CHECK_MSG(strstr(prog->code.text, want_bk) != NULL, "%s: no '%.*s' in the program", label,
                      (int)strlen(want_bk) - 1, want_bk);
          }
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
      if ((kinds & (1u << KILN_TEMPLATE_GEMM)) && strstr(prog->code.text, "kiln GEMM template")) {
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
  /* few rows: gemv.cl with 64 or 128 items splitting K (__local sums) */
  matmul(1, 1280, 1000); /* a classifier: 128 items */
  matmul(4, 300, 33);    /* 64 items, ragged N */
  matmul(3, 2048, 100);  /* 128 items, odd M */
  matmul(33, 70, 50);    /* odd: 8x8 groups, K slices of 63 and an edge */
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

/* The GPU rules on made-up devices (no program): every work-group within
 * the device's items and whole warps, __local tiles within half its
 * memory, each point one the tuner's check takes there, and the shapes
 * the rules promise for the common ones. */
typedef struct {
  const char* name;
  kiln_template_limits_t lim;
} fake_dev_t;

static const fake_dev_t k_fakes[] = {
    {"NVIDIA H100 (1024 items, 48 KiB, warp 32, 132 SMs)", {.max_workgroup_size = 1024, .local_mem_bytes = 49152, .warp = 32, .compute_units = 132}},
    {"Mali (256 items, 32 KiB, warp 16)", {.max_workgroup_size = 256, .local_mem_bytes = 32768, .warp = 16, .compute_units = 16}},
    {"Mali (512 items, 32 KiB, warp 16)", {.max_workgroup_size = 512, .local_mem_bytes = 32768, .warp = 16, .compute_units = 32}},
    {"AMD (256 items, 64 KiB, wavefront 64, 60 CUs)", {.max_workgroup_size = 256, .local_mem_bytes = 65536, .warp = 64, .compute_units = 60}},
    {"small (128 items, 16 KiB, wavefront 64)", {.max_workgroup_size = 128, .local_mem_bytes = 16384, .warp = 64, .compute_units = 8}},
    {"tiny (32 items, 8 KiB, warp 32)", {.max_workgroup_size = 32, .local_mem_bytes = 8192, .warp = 32, .compute_units = 2}},
    {"unknown (no limits)", {0}},
};

static void fits_device(const fake_dev_t* f, int64_t items, uint64_t local_bytes, const char* what) {
  const int64_t cap = kiln_opencl_gpu_items(&f->lim);
  CHECK_MSG(items >= 1 && items <= cap, "%s on %s: %lld items a group (at most %lld)", what, f->name,
            (long long)items, (long long)cap);
  if (f->lim.warp > 1 && items >= f->lim.warp)
    CHECK_MSG(items % f->lim.warp == 0, "%s on %s: %lld items, not whole warps", what, f->name, (long long)items);
  CHECK_MSG(local_bytes <= kiln_opencl_gpu_local(&f->lim), "%s on %s: %llu bytes of __local memory", what, f->name,
            (unsigned long long)local_bytes);
}

static void test_limits(void) {
  for (size_t i = 0; i < sizeof k_fakes / sizeof k_fakes[0]; ++i) {
    const fake_dev_t* f = &k_fakes[i];
    const kiln_template_limits_t chk = {.max_workgroup_size = kiln_opencl_gpu_items(&f->lim),
                                        .local_mem_bytes = kiln_opencl_gpu_local(&f->lim)};
    static const int64_t shapes[][3] = {{1024, 1024, 1024}, {512, 512, 512}, {64, 96, 128}, {3136, 64, 576}, {33, 50, 7}};
    for (size_t s = 0; s < sizeof shapes / sizeof shapes[0]; ++s) {
      const int64_t* d = shapes[s];
      const kiln_opencl_gemm_tiles_t g = kiln_opencl_gemm_gpu_tiles(d[0], d[1], d[2], &f->lim);
      char what[64];
      snprintf(what, sizeof what, "GEMM %lldx%lldx%lld", (long long)d[0], (long long)d[1], (long long)d[2]);
      fits_device(f, (int64_t)g.wx * g.wy, (uint64_t)g.bk * (uint64_t)(g.tm * g.wy + g.tn * g.wx) * 4, what);
      CHECK_MSG(g.bk % 2 == 1 && (g.bk >= 3 || d[2] < 3), "%s on %s: K slice %d", what, f->name, (int)g.bk);
      kiln_template_t t = {.kind = KILN_TEMPLATE_GEMM, .gemm = {.M = d[0], .N = d[1], .K = d[2]}};
      t.tiles = (kiln_template_tiles_t){.n = 8, .v = {g.tm, g.tn, g.vw, g.wx, g.wy, g.bk, g.mm, g.mn}};
      const char* bad = kiln_opencl_tune_check(&t, &t.tiles, &chk);
      CHECK_MSG(!bad, "%s on %s: the tuner refuses the rule's point (%s)", what, f->name, bad ? bad : "");
    }
    const int64_t cap = kiln_opencl_gpu_items(&f->lim);
    /* the full-size shapes where the device allows them */
    const kiln_opencl_gemm_tiles_t big = kiln_opencl_gemm_gpu_tiles(2048, 2048, 2048, &f->lim); /* 1024 blocks */
    if (cap >= 256) CHECK_MSG(big.wx == 16 && big.wy == 16 && big.bk == 31, "%s: 2048^3 not 16x16 items, slices of 31", f->name);
    if (cap == 128) CHECK_MSG(big.wx == 16 && big.wy == 8 && big.bk == 15, "%s: 2048^3 not 16x8 items, slices of 15", f->name);
    if (cap == 32) CHECK_MSG(big.wx == 8 && big.wy == 4, "%s: 2048^3 not 8x4 items", f->name);
    /* 512^3: 64 blocks of 64 x 64, under two a compute unit on 132 SMs
     * (not under 64): the small blocks there only */
    const kiln_opencl_gemm_tiles_t mid = kiln_opencl_gemm_gpu_tiles(512, 512, 512, &f->lim);
    if (cap >= 256)
      CHECK_MSG((mid.wx == 8) == (f->lim.compute_units * 2 > 64), "%s: 512^3 in %dx%d items", f->name, (int)mid.wx,
                (int)mid.wy);
    const kiln_opencl_gemm_tiles_t sq = kiln_opencl_gemm_gpu_tiles(768, 1024, 256, &f->lim); /* 192 blocks */
    if (cap >= 256)
      CHECK_MSG((sq.wx == 8) == (f->lim.compute_units * 2 > 192), "%s: 768x1024 blocks %dx%d items", f->name,
                (int)sq.wx, (int)sq.wy);
    /* Winograd, F(2x2) and F(4x4) */
    for (int32_t fo = 2; fo <= 4; fo += 2) {
      const kiln_template_conv_t c = {.C = 64, .M = 64, .oh = 28, .ow = 28};
      const kiln_opencl_wino_tiles_t w = kiln_opencl_wino_gpu_tiles(&c, fo, &f->lim);
      fits_device(f, (int64_t)w.wx * w.wy, (uint64_t)((fo == 4 ? 36 : 16) * (int64_t)w.cb * w.tn * w.wx) * 4,
                  fo == 4 ? "Winograd F(4x4)" : "Winograd F(2x2)");
      CHECK_MSG(!kiln_opencl_wino_tiles_check(&w) && w.f == fo, "%s: Winograd F(%d) tiles refused", f->name, (int)fo);
      if (cap >= 64 && kiln_opencl_gpu_local(&f->lim) >= 16384)
        CHECK_MSG(w.wx == 16 && w.wy == 4, "%s: Winograd not 16 x 4 items", f->name);
    }
    /* depthwise */
    const kiln_template_dw_t dd = {.sw = 1, .sh = 1};
    const kiln_opencl_dw_tiles_t dw = kiln_opencl_dw_gpu_tiles(&dd, &f->lim);
    fits_device(f, dw.wg, 0, "depthwise");
    CHECK_MSG(dw.wg == (cap >= 128 ? 128 : cap), "%s: depthwise groups of %d", f->name, (int)dw.wg);
    /* GEMV: 128 items at K >= 1024, 64 below, never more than K */
    static const int64_t gv[][3] = {{1, 1000, 1280}, {4, 768, 768}, {2, 33, 40}, {4, 4096, 4096}, {1, 7, 3}};
    for (size_t s = 0; s < sizeof gv / sizeof gv[0]; ++s) {
      kiln_template_t t = {.kind = KILN_TEMPLATE_GEMM, .gemm = {.M = gv[s][0], .N = gv[s][1], .K = gv[s][2]}};
      const kiln_opencl_gemv_tiles_t v = kiln_opencl_gemv_gpu_tiles(&t.gemm, &f->lim);
      char what[64];
      snprintf(what, sizeof what, "GEMV %lldx%lldx%lld", (long long)gv[s][0], (long long)gv[s][1], (long long)gv[s][2]);
      fits_device(f, v.wk, (uint64_t)v.wk * (uint64_t)gv[s][0] * (uint64_t)v.nc * 4, what);
      CHECK_MSG(v.wk <= gv[s][2], "%s on %s: %d items for K %lld", what, f->name, (int)v.wk, (long long)gv[s][2]);
      int64_t want = gv[s][2] >= 1024 ? 128 : 64;
      while (want > gv[s][2] || want > cap) want /= 2;
      if ((uint64_t)want * (uint64_t)gv[s][0] * 32 <= kiln_opencl_gpu_local(&f->lim))
        CHECK_MSG(v.wk == want, "%s on %s: %d items a group, expected %lld", what, f->name, (int)v.wk, (long long)want);
      t.tiles = (kiln_template_tiles_t){.n = 4, .v = {v.vw, v.nc, v.wk, v.on}};
      const char* bad = kiln_opencl_tune_check(&t, &t.tiles, &chk);
      CHECK_MSG(!bad, "%s on %s: the tuner refuses the rule's point (%s)", what, f->name, bad ? bad : "");
      kiln_template_space_t sp;
      int32_t idx[KILN_TEMPLATE_TILES_MAX];
      CHECK_MSG(kiln_opencl_tune_space(&t, &sp) && kiln_template_space_index(&sp, &t.tiles, idx),
                "%s on %s: the GEMV point is not in the tuner's space", what, f->name);
    }
  }
}

/* Graphs of every kind on a made-up device of 128 items and 16 KiB of
 * local memory (16 x 8 GEMM groups, slices of 16, Winograd slices of 4
 * channels), run on device 0 against the reference. */
static void test_small_device(void) {
  g_fake = k_fakes[4].lim;
  g_use_fake = true;
  matmul(1, 1280, 1000);
  matmul(200, 300, 260);
  conv("1x1 conv 24 -> 40 13x11 (small device)", 24, 40, 13, 11, 1, 1, K(CONV));
  conv("3x3 Winograd 16 -> 32 28x28 (small device)", 16, 32, 28, 28, 3, 1, K(WINOGRAD));
  dw("depthwise 3x3 s2 24 x 28x28 (small device)", 24, 28, 28, 2);
  g_use_fake = false;
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
  RUN(test_limits);
  RUN(test_printed);
  RUN(test_gemm);
  RUN(test_depthwise);
  RUN(test_conv);
  RUN(test_small_device);
  kiln_device_release(dev);
  return kiln_test_finish();
}
