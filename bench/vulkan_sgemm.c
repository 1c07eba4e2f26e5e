/* sgemm on the Vulkan device: kiln's tiled GEMM shader (kernels/vulkan/gemm.comp).
 *
 *   kiln_bench_vulkan_sgemm [--sizes 256,512,1024] [--repeat R] [--device N]
 *                           [--tiles TM,TN,TK,RM,RN,SHARED] [--sweep] [--no-plan]
 *
 * For each size N (C = A * B, all N x N, f32):
 *   shader    the GEMM shader alone: GLSL -> shaderc -> spvValidate, then the
 *             pipeline created cold (empty cache directory) and again with the
 *             pipeline cache that the first creation saved; then R timed runs
 *             (median; after 2 warm-up runs) of one recorded command buffer,
 *             GFLOP/s from the device timestamps and from wall time (submit +
 *             wait), checked against a CPU result (rtol 1e-3 / atol 1e-4 on
 *             sums of N products);
 *   plan      the same product as kiln compiles it: a one-node MatMul graph
 *             (B a run-time input) lowered for the GPU, emitted by
 *             kiln_spirv_emit (B pack kernel + the tiled GEMM), every kernel
 *             recorded in one command buffer; median wall time of R runs.
 * --sweep also times a list of tile shapes (shared-memory and direct) and
 * names the fastest (set it for kiln's GEMM with $KILN_SPIRV_GEMM_TILES).
 * Figures are for whatever device --device picks (Mesa lavapipe here: a CPU
 * rasteriser, so the numbers are CPU numbers). */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "ir/op.h"
#include "lowering/plan.h"
#include "compiler/compare.h"
#include "compiler/pipeline.h"
#include "runtime/vulkan/vulkan_device.h"
#include "targets/vulkan/vulkan_target.h"

static double now_s(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

static int cmp_d(const void* a, const void* b) {
  double x = *(const double*)a, y = *(const double*)b;
  return x < y ? -1 : x > y;
}

static double median(double* v, int n) {
  qsort(v, (size_t)n, sizeof *v, cmp_d);
  return n % 2 ? v[n / 2] : 0.5 * (v[n / 2 - 1] + v[n / 2]);
}

static void fill(float* p, int64_t n, uint32_t seed) {
  for (int64_t i = 0; i < n; ++i) {
    seed = seed * 1664525u + 1013904223u;
    p[i] = (float)((seed >> 8) & 0xffff) / 65536.0f - 0.5f;
  }
}

/* C = A * B on the CPU (i-k-j order, float accumulation like the shader). */
static void cpu_gemm(const float* a, const float* b, float* c, int64_t n) {
  memset(c, 0, sizeof(float) * (size_t)(n * n));
  for (int64_t i = 0; i < n; ++i)
    for (int64_t k = 0; k < n; ++k) {
      float av = a[i * n + k];
      const float* br = b + k * n;
      float* cr = c + i * n;
      for (int64_t j = 0; j < n; ++j) cr[j] += av * br[j];
    }
}

static void rm_tree(const char* dir) {
  char cmd[600];
  snprintf(cmd, sizeof cmd, "rm -rf '%s'", dir);
  if (system(cmd) != 0) fprintf(stderr, "warning: could not remove %s\n", dir);
}

static int fail(kiln_status_t s) {
  fprintf(stderr, "kiln_bench_vulkan_sgemm: %s\n", kiln_status_message(s));
  kiln_status_free(s);
  return 1;
}

/* A one-kernel program holding |blob| (the program takes it). */
static kiln_status_t one_kernel_program(uint8_t* blob, uint64_t len, const int64_t groups[3],
                                        const int64_t local[3], kiln_program_t** out) {
  kiln_program_t* p = NULL;
  KILN_RETURN_IF_ERROR(kiln_program_create(kiln_allocator_system(), &p));
  kiln_allocator_t al = p->allocator;
  p->target = "vulkan";
  kiln_status_t s = kiln_allocator_malloc(al, sizeof(kiln_program_kernel_t), "k", (void**)&p->kernels);
  if (!s) s = kiln_allocator_malloc(al, sizeof(uint8_t*), "b", (void**)&p->code.blobs);
  if (!s) s = kiln_allocator_malloc(al, sizeof(uint64_t), "l", (void**)&p->code.blob_lens);
  if (!s) {
    p->n_kernels = 1;
    p->code.n_blobs = 1;
    p->code.blobs[0] = blob;
    p->code.blob_lens[0] = len;
    blob = NULL;
    kiln_program_kernel_t* k = &p->kernels[0];
    s = kiln_program_strdup(p, "sgemm", &k->name);
    if (!s) s = kiln_program_strdup(p, "sgemm", &k->node_name);
    if (!s) s = kiln_program_strdup(p, "MatMul", &k->op_type);
    if (!s) s = kiln_allocator_malloc(al, 3 * sizeof(int32_t), "a", (void**)&k->args);
    if (!s) s = kiln_allocator_malloc(al, 3, "a", (void**)&k->access);
    if (!s) {
      k->n_args = 3;
      for (int j = 0; j < 3; ++j) {
        k->args[j] = j;
        k->access[j] = j == 2 ? KILN_ARG_WRITE : KILN_ARG_READ;
        k->groups[j] = groups[j];
        k->local[j] = local[j];
      }
      k->inplace_in = k->inplace_out = -1;
    }
  }
  kiln_allocator_free(kiln_allocator_system(), blob);
  if (s) {
    kiln_program_destroy(p);
    return s;
  }
  *out = p;
  return NULL;
}

typedef struct opts_s {
  int repeat;
  bool sweep;
  int device;
  bool plan;
  kiln_spirv_gemm_tiles_t tiles;
  char cache_root[256];
} opts_t;

static kiln_status_t bench_shader(kiln_device_t* d, int64_t n, const opts_t* o, const float* a,
                                  const float* b, const float* want, bool compile_line,
                                  double* out_gflops) {
  const kiln_device_vtable_t* vt = d->vt;
  /* the tiles a compile takes on this device: on a GPU (or under
   * KILN_VULKAN_RULES=gpu) the GPU rules' shared-memory tiles, else
   * lavapipe's defaults (kiln_spirv_gemm_source) */
  kiln_template_limits_t lim;
  kiln_compile_device_limits(&d->info, &lim);
  const kiln_spirv_gemm_tiles_t dt =
      o->tiles.tm ? o->tiles : (lim.gpu_lacks & KILN_GPU_CLASS_GPU) ? kiln_spirv_gemm_gpu_tiles(n, n, &lim) : o->tiles;
  kiln_spirv_gemm_t g = {.M = n, .N = n, .K = n, .b_mode = 0, .bind_a = 0, .bind_b = 1, .bind_c = 2,
                         .tiles = dt};
  char* glsl = NULL;
  int64_t groups[3], local[3];
  KILN_RETURN_IF_ERROR(kiln_spirv_gemm_source(&g, &glsl, groups, local));
  uint8_t* blob = NULL;
  uint64_t len = 0;
  double t0 = now_s();
  kiln_status_t s = kiln_spirv_compile_glsl("sgemm", glsl, kiln_allocator_system(), &blob, &len);
  double t_compile = now_s() - t0;
  free(glsl);
  if (s) return s;
  kiln_program_t* p = NULL;
  KILN_RETURN_IF_ERROR(one_kernel_program(blob, len, groups, local, &p));

  char dir[400];
  snprintf(dir, sizeof dir, "%s/n%lld", o->cache_root, (long long)n);
  kiln_device_build_options_t bo = {.cache_dir = dir};
  kiln_device_executable_t* e = NULL;
  kiln_vulkan_cache_stats_t cold, warm;
  s = vt->executable_create(d, p, &bo, &e);
  if (!s) {
    kiln_vulkan_last_cache_stats(d, &cold);
    vt->executable_destroy(d, e);
    e = NULL;
    s = vt->executable_create(d, p, &bo, &e);
  }
  if (!s) kiln_vulkan_last_cache_stats(d, &warm);

  uint64_t bytes = (uint64_t)(n * n) * sizeof(float);
  kiln_device_buffer_t *da = NULL, *db = NULL, *dc = NULL;
  kiln_device_cmd_t* c = NULL;
  float* got = malloc(bytes);
  double* wall = calloc((size_t)o->repeat, sizeof(double));
  double* dev_t = calloc((size_t)o->repeat, sizeof(double));
  int32_t nts = d->info.timestamps ? 2 : 0;
  if (!got || !wall || !dev_t) s = kiln_make_status(KILN_OUT_OF_MEMORY, "bench buffers");
  if (!s) s = vt->buffer_create(d, bytes, "A", &da);
  if (!s) s = vt->buffer_create(d, bytes, "B", &db);
  if (!s) s = vt->buffer_create(d, bytes, "C", &dc);
  if (!s) s = vt->buffer_write(d, da, 0, a, bytes);
  if (!s) s = vt->buffer_write(d, db, 0, b, bytes);
  if (!s) s = vt->cmd_create(d, e, nts, &c);
  if (!s && nts) s = vt->cmd_timestamp(d, c, 0);
  if (!s) s = vt->cmd_dispatch(d, c, 0, (kiln_device_buffer_t* const[]){da, db, dc}, 3);
  if (!s && nts) s = vt->cmd_timestamp(d, c, 1);
  if (!s) s = vt->cmd_end(d, c);
  for (int r = 0; !s && r < 2; ++r) { /* warm-up */
    s = vt->submit(d, c);
    if (!s) s = vt->wait(d, c);
  }
  for (int r = 0; !s && r < o->repeat; ++r) {
    double w0 = now_s();
    s = vt->submit(d, c);
    if (!s) s = vt->wait(d, c);
    wall[r] = now_s() - w0;
    uint64_t ns[2] = {0, 0};
    if (!s && nts) s = vt->timestamps_read(d, c, ns, 2);
    dev_t[r] = nts ? (double)(ns[1] - ns[0]) * 1e-9 : wall[r];
  }
  if (!s) s = vt->buffer_read(d, dc, 0, got, bytes);
  if (!s) {
    kiln_array_t ga = {KILN_DTYPE_F32, kiln_shape_make(2, (int64_t[]){n, n}), got, bytes};
    kiln_array_t wa = {KILN_DTYPE_F32, kiln_shape_make(2, (int64_t[]){n, n}), (void*)want, bytes};
    kiln_compare_result_t cr;
    kiln_compare(&ga, &wa, 1e-3, 1e-4, &cr);
    double flop = 2.0 * (double)n * (double)n * (double)n;
    double tw = median(wall, o->repeat), td = median(dev_t, o->repeat);
    kiln_spirv_gemm_tiles_t t = dt.tm ? dt : kiln_spirv_gemm_default_tiles(n, n);
    printf("shader %5lld^3  tiles %dx%dx%d/%dx%d %s  %8.2f GFLOP/s (device %.3f ms)  %8.2f GFLOP/s (wall %.3f ms)  "
           "check %s (max abs err %.2e)\n",
           (long long)n, t.tm, t.tn, t.tk, t.rm, t.rn, t.shared == 4 ? "texel" : t.shared >= 2 ? "subgroup" : t.shared ? "shared" : "direct", flop / td * 1e-9, td * 1e3, flop / tw * 1e-9, tw * 1e3,
           cr.ok ? "ok" : "FAILED", cr.max_abs_err);
    if (out_gflops) *out_gflops = flop / td * 1e-9;
    if (compile_line)
      printf("shader %5lld^3  compile (shaderc + spirv-val) %.2f ms; pipeline cold %.2f ms (cache saved %llu B), "
           "with cache %.2f ms (cache loaded %llu B, driver hits %d/%d)\n",
           (long long)n, t_compile * 1e3, cold.seconds * 1e3, (unsigned long long)cold.saved_bytes,
           warm.seconds * 1e3, (unsigned long long)warm.loaded_bytes, (int)warm.cache_hits,
           (int)warm.pipelines);
    if (!cr.ok) s = kiln_make_status(KILN_INTERNAL, "sgemm %lld: %s", (long long)n, cr.message);
  }
  vt->cmd_destroy(d, c);
  vt->buffer_destroy(d, da);
  vt->buffer_destroy(d, db);
  vt->buffer_destroy(d, dc);
  vt->executable_destroy(d, e);
  kiln_program_destroy(p);
  free(got);
  free(wall);
  free(dev_t);
  return s;
}

/* The MatMul graph through the planner and kiln_spirv_emit. */
static kiln_status_t bench_plan(kiln_device_t* d, int64_t n, const opts_t* o, const float* a,
                                const float* b, const float* want) {
  const kiln_device_vtable_t* vt = d->vt;
  kiln_allocator_t al = kiln_allocator_system();
  kiln_graph_t* g = NULL;
  KILN_RETURN_IF_ERROR(kiln_graph_create(al, &g));
  kiln_shape_t sh = kiln_shape_make(2, (int64_t[]){n, n});
  kiln_status_t s = kiln_graph_set_opset(g, "", 13);
  if (!s) s = kiln_graph_add_input(g, "A", KILN_DTYPE_F32, &sh, NULL);
  if (!s) s = kiln_graph_add_input(g, "B", KILN_DTYPE_F32, &sh, NULL);
  if (!s) s = kiln_graph_add_node(g, "MatMul", "mm", 2, (const char*[]){"A", "B"}, 1, (const char*[]){"Y"}, 0, NULL, NULL);
  if (!s) s = kiln_graph_add_output(g, "Y");
  if (!s) s = kiln_graph_prepare(g);
  kiln_plan_t* p = NULL;
  kiln_program_t* prog = NULL;
  kiln_plan_options_t po = {KILN_TARGET_CLASS_GPU, 0, 0, 0, 0, 0};
  kiln_template_set_t templates;
  kiln_spirv_templates(&templates);
  if (!s) s = kiln_plan_build(g, &po, al, &p);
  /* the device's flags and class, as a compile for it (KILN_VULKAN_RULES=gpu:
   * the GPU rules' tiles) */
  if (!s) templates.gpu_lacks = p->gpu_lacks = kiln_compile_gpu_lacks(&d->info);
  if (!s) s = kiln_template_choose(p, &templates);
  if (!s) s = kiln_program_create(al, &prog);
  if (!s) s = kiln_allocator_malloc(al, sizeof(kiln_program_kernel_t) * (size_t)p->n_kernels, "k", (void**)&prog->kernels);
  if (!s) {
    prog->n_kernels = p->n_kernels;
    prog->target = "vulkan";
  }
  for (int32_t k = 0; !s && k < p->n_kernels; ++k) {
    kiln_program_kernel_t* kk = &prog->kernels[k];
    const tir_func_t* f = p->kernels[k].func;
    kk->inplace_in = kk->inplace_out = -1;
    s = kiln_program_strdup(prog, f->name, &kk->name);
    if (!s) s = kiln_program_strdup(prog, "mm", &kk->node_name);
    if (!s) s = kiln_program_strdup(prog, "MatMul", &kk->op_type);
    if (!s) s = kiln_allocator_malloc(al, sizeof(int32_t) * (size_t)f->n_params, "a", (void**)&kk->args);
    if (!s) s = kiln_allocator_malloc(al, (size_t)f->n_params, "a", (void**)&kk->access);
    if (!s) {
      kk->n_args = f->n_params;
      for (int32_t j = 0; j < f->n_params; ++j) kk->args[j] = p->kernels[k].args[j], kk->access[j] = KILN_ARG_READ;
    }
  }
  double t0 = now_s();
  if (!s) s = kiln_spirv_emit(p, prog);
  double t_emit = now_s() - t0;
  bool tiled = !s && strstr(prog->code.text, "kiln tiled SGEMM") != NULL;
  kiln_device_executable_t* e = NULL;
  char dir[400];
  snprintf(dir, sizeof dir, "%s/plan%lld", o->cache_root, (long long)n);
  kiln_device_build_options_t bo = {.cache_dir = dir};
  if (!s) s = vt->executable_create(d, prog, &bo, &e);
  kiln_device_buffer_t** bufs = p ? calloc((size_t)p->n_buffers + 1, sizeof *bufs) : NULL;
  kiln_device_cmd_t* c = NULL;
  double* wall = calloc((size_t)o->repeat, sizeof(double));
  uint64_t bytes = (uint64_t)(n * n) * sizeof(float);
  float* got = malloc(bytes);
  for (int32_t i = 0; !s && i < p->n_buffers; ++i) {
    const tir_buffer_t* tb = p->buffers[i].buf;
    if (p->buffers[i].alias_of >= 0) {
      s = kiln_make_status(KILN_UNSUPPORTED, "bench: aliased buffer %s", tb->name);
      break;
    }
    s = vt->buffer_create(d, (uint64_t)tir_buffer_numel(tb) * kiln_dtype_size(tb->dtype), tb->name, &bufs[i]);
  }
  if (!s) s = vt->buffer_write(d, bufs[p->inputs[0]], 0, a, bytes);
  if (!s) s = vt->buffer_write(d, bufs[p->inputs[1]], 0, b, bytes);
  if (!s) s = vt->cmd_create(d, e, 0, &c);
  for (int32_t k = 0; !s && k < p->n_kernels; ++k) {
    kiln_device_buffer_t* args[16];
    int32_t na = p->kernels[k].func->n_params;
    if (na > 16) {
      s = kiln_make_status(KILN_UNSUPPORTED, "bench: kernel with %d parameters", (int)na);
      break;
    }
    for (int32_t j = 0; j < na; ++j) args[j] = bufs[p->kernels[k].args[j]];
    s = vt->cmd_dispatch(d, c, k, args, na);
    if (!s && k + 1 < p->n_kernels) s = vt->cmd_barrier(d, c);
  }
  if (!s) s = vt->cmd_end(d, c);
  for (int r = 0; !s && r < 2; ++r) {
    s = vt->submit(d, c);
    if (!s) s = vt->wait(d, c);
  }
  for (int r = 0; !s && r < o->repeat; ++r) {
    double w0 = now_s();
    s = vt->submit(d, c);
    if (!s) s = vt->wait(d, c);
    wall[r] = now_s() - w0;
  }
  if (!s) s = vt->buffer_read(d, bufs[p->outputs[0]], 0, got, bytes);
  if (!s) {
    kiln_array_t ga = {KILN_DTYPE_F32, sh, got, bytes}, wa = {KILN_DTYPE_F32, sh, (void*)want, bytes};
    kiln_compare_result_t cr;
    kiln_compare(&ga, &wa, 1e-3, 1e-4, &cr);
    double tw = median(wall, o->repeat);
    printf("plan   %5lld^3  %d kernels (%s)  %8.2f GFLOP/s (wall %.3f ms)  emit %.1f ms  check %s\n",
           (long long)n, (int)p->n_kernels, tiled ? "B pack + tiled GEMM" : "printed loop nests",
           2.0 * (double)n * n * n / tw * 1e-9, tw * 1e3, t_emit * 1e3, cr.ok ? "ok" : "FAILED");
    if (!cr.ok) s = kiln_make_status(KILN_INTERNAL, "plan sgemm %lld: %s", (long long)n, cr.message);
  }
  vt->cmd_destroy(d, c);
  for (int32_t i = 0; bufs && i < p->n_buffers; ++i) vt->buffer_destroy(d, bufs[i]);
  free(bufs);
  free(wall);
  free(got);
  vt->executable_destroy(d, e);
  kiln_program_destroy(prog);
  kiln_plan_destroy(p);
  kiln_graph_destroy(g);
  return s;
}

int main(int argc, char** argv) {
  int64_t sizes[16] = {256, 512, 1024};
  int n_sizes = 3;
  opts_t o = {.repeat = 10, .device = 0, .plan = true};
  for (int i = 1; i < argc; ++i) {
    if (!strcmp(argv[i], "--sizes") && i + 1 < argc) {
      n_sizes = 0;
      for (char* t = strtok(argv[++i], ","); t && n_sizes < 16; t = strtok(NULL, ",")) sizes[n_sizes++] = atoll(t);
    } else if (!strcmp(argv[i], "--repeat") && i + 1 < argc) {
      o.repeat = atoi(argv[++i]);
    } else if (!strcmp(argv[i], "--device") && i + 1 < argc) {
      o.device = atoi(argv[++i]);
    } else if (!strcmp(argv[i], "--tiles") && i + 1 < argc) {
      if (sscanf(argv[++i], "%d,%d,%d,%d,%d,%d", &o.tiles.tm, &o.tiles.tn, &o.tiles.tk, &o.tiles.rm,
                 &o.tiles.rn, &o.tiles.shared) != 6) {
        fprintf(stderr, "--tiles wants TM,TN,TK,RM,RN,SHARED\n");
        return 2;
      }
    } else if (!strcmp(argv[i], "--sweep")) {
      o.sweep = true;
    } else if (!strcmp(argv[i], "--no-plan")) {
      o.plan = false;
    } else {
      fprintf(stderr,
              "usage: kiln_bench_vulkan_sgemm [--sizes 256,512,1024] [--repeat R] [--device N] "
              "[--tiles TM,TN,TK,RM,RN,SHARED] [--sweep] [--no-plan]\n");
      return 2;
    }
  }
  if (o.repeat < 1) o.repeat = 1;
  for (int i = 0; i < n_sizes; ++i)
    if (sizes[i] < 1 || sizes[i] > 8192) {
      fprintf(stderr, "size %lld out of range [1, 8192]\n", (long long)sizes[i]);
      return 2;
    }
  snprintf(o.cache_root, sizeof o.cache_root, "/tmp/kiln_bench_vk_%ld", (long)getpid());
  kiln_device_t* d = NULL;
  kiln_status_t s = kiln_vulkan_device_create(o.device, false, kiln_allocator_system(), &d);
  if (s) return fail(s);
  printf("device: %s (%s), median of %d runs after 2 warm-up runs\n", d->info.name, d->info.driver, o.repeat);
  int rc = 0;
  for (int i = 0; i < n_sizes && !rc; ++i) {
    int64_t n = sizes[i];
    size_t bytes = sizeof(float) * (size_t)(n * n);
    float *a = malloc(bytes), *b = malloc(bytes), *want = malloc(bytes);
    if (!a || !b || !want) {
      rc = fail(kiln_make_status(KILN_OUT_OF_MEMORY, "%zu bytes", bytes));
    } else {
      fill(a, n * n, 1u + (uint32_t)n);
      fill(b, n * n, 7u + (uint32_t)n);
      double t0 = now_s();
      cpu_gemm(a, b, want, n);
      double tc = now_s() - t0;
      printf("cpu    %5lld^3  naive i-k-j reference %.2f GFLOP/s (%.1f ms, for checking only)\n", (long long)n,
             2.0 * (double)n * n * n / tc * 1e-9, tc * 1e3);
      fflush(stdout);
      if ((s = bench_shader(d, n, &o, a, b, want, true, NULL))) rc = fail(s);
      fflush(stdout);
      static const kiln_spirv_gemm_tiles_t cand[] = {
          {64, 64, 16, 4, 4, 1, 0},  {64, 64, 16, 8, 8, 1, 0},  {128, 128, 16, 8, 8, 1, 0}, {32, 32, 16, 2, 2, 1, 0},
          {64, 64, 16, 8, 8, 0, 0},  {32, 64, 8, 8, 8, 0, 0},   {16, 128, 16, 8, 16, 0, 0}, {8, 128, 8, 8, 16, 0, 0},
          {128, 128, 16, 16, 16, 0, 0}, {16, 32, 2, 16, 4, 2, 0}, {32, 32, 2, 32, 4, 2, 0},  {32, 64, 4, 32, 8, 2, 0},
          {64, 64, 2, 64, 8, 2, 0}};
      double best = 0;
      int best_i = -1;
      for (int c = 0; !rc && o.sweep && c < (int)(sizeof cand / sizeof cand[0]); ++c) {
        opts_t oc = o;
        oc.tiles = cand[c];
        double gf = 0;
        if ((s = bench_shader(d, n, &oc, a, b, want, false, &gf))) rc = fail(s);
        if (gf > best) best = gf, best_i = c;
        fflush(stdout);
      }
      if (best_i >= 0)
        printf("sweep  %5lld^3  best KILN_SPIRV_GEMM_TILES=%d,%d,%d,%d,%d,%d  %.2f GFLOP/s\n", (long long)n,
               cand[best_i].tm, cand[best_i].tn, cand[best_i].tk, cand[best_i].rm, cand[best_i].rn,
               cand[best_i].shared, best);
      if (!rc && o.plan && (s = bench_plan(d, n, &o, a, b, want))) rc = fail(s);
      fflush(stdout);
    }
    free(a);
    free(b);
    free(want);
  }
  d->vt->destroy(d);
  rm_tree(o.cache_root);
  return rc;
}
