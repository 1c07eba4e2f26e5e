/* Vulkan device and SPIR-V target on the first Vulkan device (Mesa lavapipe
 * in CI), with the Khronos validation layer on: any validation message
 * fails the test (counted here, and ctest's FAIL_REGULAR_EXPRESSION catches
 * late ones).
 *
 * Covers: device listing and creation (bad index), buffers, views and
 * staging round trips (chunked copies larger than the staging buffer),
 * dispatches of hand-written shaders from a hand-made kiln_program_t with
 * barriers, re-submission and timestamps, the pipeline cache (saved, used
 * by the second create, a corrupt file ignored), compile failures (shaderc
 * log + kernel name; a blob that is not SPIR-V), an allocation larger than
 * the device allows (OUT_OF_MEMORY naming the size), no host leaks; then
 * plan-level runs: small graphs lowered for the GPU, emitted as SPIR-V,
 * every kernel run in order on the device and compared with the reference
 * executor (rtol 1e-4 / atol 1e-5 for f32), with and without the tiled
 * GEMM substitution and with kernel fusion. Mode gpu_rules runs those
 * plans again with the GPU rules (KILN_VULKAN_RULES=gpu: the device class
 * a real GPU has; vulkan_tiles.c) and checks their work-groups. */
#include <dirent.h>
#include <stdatomic.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "ir/op.h"
#include "lowering/fuse.h"
#include "lowering/plan.h"
#include "lowering/precision.h"
#include "compiler/compare.h"
#include "compiler/pipeline.h"
#include "compiler/ref_exec.h"
#include "runtime/device_registry.h"
#include "runtime/vulkan/vulkan_device.h"
#include "targets/program_build.h"
#include "targets/vulkan/vulkan_target.h"
#include "testing.h"

#define F32 KILN_DTYPE_F32
#define F16 KILN_DTYPE_F16
#define DIMS(...) (int64_t[]){__VA_ARGS__}
#define NAMES(...) (const char*[]){__VA_ARGS__}

/* ---- a counting allocator (leak checks) ------------------------------- */

static atomic_long live_allocs;
static void* c_alloc(void* self, size_t n) {
  (void)self;
  void* p = malloc(n);
  if (p) atomic_fetch_add(&live_allocs, 1);
  return p;
}
static void* c_realloc(void* self, void* p, size_t n) {
  (void)self;
  if (!p) return c_alloc(self, n);
  return realloc(p, n);
}
static void c_free(void* self, void* p) {
  (void)self;
  if (p) atomic_fetch_sub(&live_allocs, 1);
  free(p);
}
static kiln_allocator_t CA(void) { return (kiln_allocator_t){NULL, c_alloc, c_realloc, c_free}; }
static kiln_allocator_t A(void) { return kiln_allocator_system(); }

static kiln_device_t* dev; /* shared by the tests; validation on */
static char tmp_dir[256];

static kiln_device_t* open_dev(kiln_allocator_t al) {
  kiln_device_t* d = NULL;
  if (!CHECK_OK(kiln_vulkan_device_create(0, true, al, &d))) return NULL;
  return d;
}

/* ---- hand-made programs ------------------------------------------------- */

typedef struct hk_s {
  const char* name;
  const char* glsl;
  int32_t n_args;
  int64_t groups, local;
} hk_t;

/* A program of |n| hand-written shaders (compiled with the target's
 * compiler), each taking n_args buffers (program buffers 0..n_args-1). */
static kiln_program_t* hand_program(const hk_t* ks, int32_t n) {
  kiln_program_t* p = NULL;
  if (!CHECK_OK(kiln_program_create(CA(), &p))) return NULL;
  p->target = "vulkan";
  kiln_status_t s = kiln_allocator_malloc(CA(), sizeof(kiln_program_kernel_t) * (size_t)n, "k",
                                          (void**)&p->kernels);
  if (!s) s = kiln_allocator_malloc(CA(), sizeof(uint8_t*) * (size_t)n, "b", (void**)&p->code.blobs);
  if (!s) s = kiln_allocator_malloc(CA(), sizeof(uint64_t) * (size_t)n, "l", (void**)&p->code.blob_lens);
  if (!CHECK_OK(s)) {
    kiln_program_destroy(p);
    return NULL;
  }
  p->n_kernels = n;
  p->code.n_blobs = n;
  for (int32_t k = 0; k < n; ++k) {
    kiln_program_kernel_t* kk = &p->kernels[k];
    CHECK_OK(kiln_program_strdup(p, ks[k].name, &kk->name));
    CHECK_OK(kiln_program_strdup(p, ks[k].name, &kk->node_name));
    CHECK_OK(kiln_program_strdup(p, "Hand", &kk->op_type));
    kk->n_args = ks[k].n_args;
    CHECK_OK(kiln_allocator_malloc(CA(), sizeof(int32_t) * (size_t)kk->n_args, "a", (void**)&kk->args));
    CHECK_OK(kiln_allocator_malloc(CA(), (size_t)kk->n_args, "a", (void**)&kk->access));
    for (int32_t j = 0; j < kk->n_args; ++j) kk->args[j] = j, kk->access[j] = KILN_ARG_READ;
    kk->groups[0] = ks[k].groups, kk->groups[1] = kk->groups[2] = 1;
    kk->local[0] = ks[k].local, kk->local[1] = kk->local[2] = 1;
    kk->inplace_in = kk->inplace_out = -1;
    kk->loop_trips = 0;
    kk->flops = kk->bytes = 0;
    if (ks[k].glsl)
      CHECK_OK(kiln_spirv_compile_glsl(ks[k].name, ks[k].glsl, CA(), &p->code.blobs[k], &p->code.blob_lens[k]));
  }
  return p;
}

static const char* scale_glsl =
    "#version 450\n"
    "layout(local_size_x = 64) in;\n"
    "layout(std430, binding = 0) readonly buffer X { float x[]; };\n"
    "layout(std430, binding = 1) writeonly buffer Y { float y[]; };\n"
    "void main() { uint i = gl_GlobalInvocationID.x; if (i < 256u) y[i] = 2.0 * x[i] + 1.0; }\n";
static const char* add_glsl =
    "#version 450\n"
    "layout(local_size_x = 64) in;\n"
    "layout(std430, binding = 0) readonly buffer X { float x[]; };\n"
    "layout(std430, binding = 1) readonly buffer Y { float y[]; };\n"
    "layout(std430, binding = 2) buffer Z { float z[]; };\n"
    "void main() { uint i = gl_GlobalInvocationID.x; if (i < 256u) z[i] = z[i] + x[i] * y[i]; }\n";

/* ---- device-level tests -------------------------------------------------- */

static void test_list_and_create(void) {
  FILE* f = tmpfile();
  CHECK(f != NULL);
  if (!f) return;
  CHECK_OK(kiln_vulkan_list_devices(f));
  char buf[4096] = "";
  rewind(f);
  size_t n = fread(buf, 1, sizeof buf - 1, f);
  buf[n] = 0;
  fclose(f);
  printf("  %s", buf);
  CHECK(strstr(buf, "vulkan:0") != NULL);
  CHECK(strstr(buf, "fp16=") && strstr(buf, "16bit-storage=") && strstr(buf, "subgroup="));
  kiln_device_t* d = NULL;
  CHECK_ERR(kiln_vulkan_device_create(99, true, CA(), &d), KILN_NOT_FOUND, "no device 99");
  CHECK(d == NULL);
  CHECK(dev != NULL);
  if (!dev) return;
  const kiln_device_info_t* i = &dev->info;
  printf("  %s | %s | fp16 storage %d arith %d int8 %d ts %d align %llu max alloc %llu subgroup %d\n",
         i->name, i->driver, i->fp16_storage, i->fp16_arith, i->int8, i->timestamps,
         (unsigned long long)i->buffer_alignment, (unsigned long long)i->max_alloc_bytes,
         (int)i->subgroup_size);
  CHECK(strcmp(i->api, "vulkan") == 0);
  CHECK(i->name[0] != 0 && i->driver[0] != 0);
  CHECK(i->buffer_alignment >= 1 && (i->buffer_alignment & (i->buffer_alignment - 1)) == 0);
  CHECK(i->max_workgroup_size >= 128);
  CHECK(i->max_alloc_bytes > 0);
  CHECK(atomic_load(&dev->refs) == 1);
}

static void test_buffers_and_views(void) {
  if (!dev) return;
  const kiln_device_vtable_t* vt = dev->vt;
  uint64_t al = dev->info.buffer_alignment;
  kiln_device_buffer_t *b = NULL, *v = NULL, *bad = NULL;
  uint64_t size = 4 * al + 1000;
  if (!CHECK_OK(vt->buffer_create(dev, size, "arena", &b))) return;
  uint8_t* host = malloc(size);
  CHECK_OK(vt->buffer_read(dev, b, 0, host, size));
  bool zero = true;
  for (uint64_t i = 0; i < size; ++i) zero &= host[i] == 0;
  CHECK_MSG(zero, "new buffers are zeroed");
  for (uint64_t i = 0; i < size; ++i) host[i] = (uint8_t)(i * 7 + 3);
  CHECK_OK(vt->buffer_write(dev, b, 0, host, size));
  /* A view at 2 * alignment: reads see the parent's bytes, writes land in it. */
  CHECK_OK(vt->view_create(dev, b, 2 * al, 600, &v));
  uint8_t got[600];
  CHECK_OK(vt->buffer_read(dev, v, 0, got, 600));
  CHECK(memcmp(got, host + 2 * al, 600) == 0);
  uint8_t pat[13];
  for (int i = 0; i < 13; ++i) pat[i] = (uint8_t)(200 + i);
  CHECK_OK(vt->buffer_write(dev, v, 5, pat, 13)); /* odd offset and size */
  CHECK_OK(vt->buffer_read(dev, b, 2 * al + 5, got, 13));
  CHECK(memcmp(got, pat, 13) == 0);
  CHECK_OK(vt->buffer_read(dev, b, 2 * al + 4, got, 1));
  CHECK(got[0] == host[2 * al + 4]);
  /* Misaligned or out-of-range views and copies are errors. */
  if (al > 1) CHECK_ERR(vt->view_create(dev, b, al / 2, 16, &bad), KILN_INVALID_ARGUMENT, "alignment");
  CHECK_ERR(vt->view_create(dev, b, 4 * al, 1001, &bad), KILN_OUT_OF_RANGE, "outside");
  CHECK_ERR(vt->buffer_read(dev, v, 590, got, 11), KILN_OUT_OF_RANGE, "outside");
  CHECK_ERR(vt->buffer_write(dev, b, size, pat, 1), KILN_OUT_OF_RANGE, "outside");
  CHECK(bad == NULL);
  vt->buffer_destroy(dev, v);
  vt->buffer_destroy(dev, b);
  vt->buffer_destroy(dev, NULL);
  free(host);

  /* Copies larger than the staging buffer go in chunks. */
  uint64_t big = (64ull << 20) + 4096 + 12;
  uint32_t* src = malloc(big);
  uint32_t* dst = malloc(big);
  for (uint64_t i = 0; i < big / 4; ++i) src[i] = (uint32_t)(i * 2654435761u);
  if (CHECK_OK(vt->buffer_create(dev, big, "big", &b))) {
    CHECK_OK(vt->buffer_write(dev, b, 0, src, big));
    memset(dst, 0, big);
    CHECK_OK(vt->buffer_read(dev, b, 0, dst, big));
    CHECK(memcmp(src, dst, big) == 0);
    vt->buffer_destroy(dev, b);
  }
  free(src);
  free(dst);
}

static void test_too_large(void) {
  long before = atomic_load(&live_allocs);
  kiln_device_t* d = open_dev(CA());
  if (!d) return;
  kiln_device_buffer_t* b = NULL;
  uint64_t huge = 1ull << 50;
  CHECK_ERR(d->vt->buffer_create(d, huge, "weights", &b), KILN_OUT_OF_MEMORY, "1125899906842624");
  CHECK(b == NULL);
  /* Just over the device's single-allocation limit. */
  uint64_t over = d->info.max_alloc_bytes + 1;
  char want[32];
  snprintf(want, sizeof want, "%llu", (unsigned long long)over);
  CHECK_ERR(d->vt->buffer_create(d, over, "arena", &b), KILN_OUT_OF_MEMORY, want);
  CHECK(b == NULL);
  CHECK(kiln_vulkan_validation_messages(d) == 0);
  d->vt->destroy(d);
  CHECK_MSG(atomic_load(&live_allocs) == before, "host allocations leaked: %ld",
            atomic_load(&live_allocs) - before);
}

static void test_dispatch_barrier_timestamps(void) {
  long before = atomic_load(&live_allocs);
  kiln_device_t* d = open_dev(CA());
  if (!d) return;
  const kiln_device_vtable_t* vt = d->vt;
  hk_t ks[2] = {{"scale", scale_glsl, 2, 4, 64}, {"fma_acc", add_glsl, 3, 4, 64}};
  kiln_program_t* p = hand_program(ks, 2);
  kiln_device_executable_t* e = NULL;
  kiln_device_cmd_t* c = NULL;
  kiln_device_buffer_t *arena = NULL, *x = NULL, *y = NULL, *z = NULL;
  kiln_device_build_options_t bo = {.cache_dir = tmp_dir};
  uint64_t al = d->info.buffer_alignment < 1024 ? 1024 : d->info.buffer_alignment;
  if (!p || !CHECK_OK(vt->executable_create(d, p, &bo, &e))) goto out;
  /* One arena, three aliased ranges (descriptor offsets). */
  if (!CHECK_OK(vt->buffer_create(d, 3 * al, "arena", &arena))) goto out;
  CHECK_OK(vt->view_create(d, arena, 0, 1024, &x));
  CHECK_OK(vt->view_create(d, arena, al, 1024, &y));
  CHECK_OK(vt->view_create(d, arena, 2 * al, 1024, &z));
  float hx[256], hz[256], got[256];
  for (int i = 0; i < 256; ++i) hx[i] = (float)i * 0.5f - 7.0f, hz[i] = 1.0f;
  CHECK_OK(vt->buffer_write(d, x, 0, hx, sizeof hx));
  CHECK_OK(vt->buffer_write(d, z, 0, hz, sizeof hz));
  int32_t nts = d->info.timestamps ? 3 : 0;
  if (!CHECK_OK(vt->cmd_create(d, e, nts, &c))) goto out;
  if (nts) CHECK_OK(vt->cmd_timestamp(d, c, 0));
  CHECK_OK(vt->cmd_dispatch(d, c, 0, (kiln_device_buffer_t* const[]){x, y}, 2));
  CHECK_OK(vt->cmd_barrier(d, c));
  if (nts) CHECK_OK(vt->cmd_timestamp(d, c, 1));
  CHECK_OK(vt->cmd_dispatch(d, c, 1, (kiln_device_buffer_t* const[]){x, y, z}, 3));
  if (nts) CHECK_OK(vt->cmd_timestamp(d, c, 2));
  /* Wrong argument counts and kernel indices are errors at record time. */
  CHECK_ERR(vt->cmd_dispatch(d, c, 1, (kiln_device_buffer_t* const[]){x, y}, 2), KILN_INVALID_ARGUMENT, "fma_acc");
  CHECK_ERR(vt->cmd_dispatch(d, c, 2, (kiln_device_buffer_t* const[]){x, y}, 2), KILN_OUT_OF_RANGE, NULL);
  if (nts) CHECK_ERR(vt->cmd_timestamp(d, c, 3), KILN_OUT_OF_RANGE, NULL);
  CHECK_OK(vt->cmd_end(d, c));
  CHECK_ERR(vt->cmd_barrier(d, c), KILN_INVALID_ARGUMENT, "ended");
  CHECK_OK(vt->wait(d, c)); /* idle: fine */
  /* Recorded once, submitted three times: z accumulates. */
  for (int rep = 0; rep < 3; ++rep) {
    CHECK_OK(vt->submit(d, c));
    CHECK_OK(vt->wait(d, c));
  }
  CHECK_OK(vt->buffer_read(d, z, 0, got, sizeof got));
  int bad = 0;
  for (int i = 0; i < 256; ++i) {
    float yv = 2.0f * hx[i] + 1.0f, want = 1.0f + 3.0f * hx[i] * yv;
    if (fabsf(got[i] - want) > 1e-4f * fabsf(want) + 1e-5f) ++bad;
  }
  CHECK_MSG(bad == 0, "%d of 256 results differ", bad);
  if (nts) {
    uint64_t ns[3];
    CHECK_OK(vt->timestamps_read(d, c, ns, 3));
    CHECK(ns[0] <= ns[1] && ns[1] <= ns[2]);
    printf("  timestamps: scale %.1f us, fma_acc %.1f us\n", (ns[1] - ns[0]) / 1e3, (ns[2] - ns[1]) / 1e3);
    CHECK_ERR(vt->timestamps_read(d, c, ns, 4), KILN_OUT_OF_RANGE, NULL);
  }
out:
  vt->cmd_destroy(d, c);
  vt->buffer_destroy(d, x);
  vt->buffer_destroy(d, y);
  vt->buffer_destroy(d, z);
  vt->buffer_destroy(d, arena);
  vt->executable_destroy(d, e);
  kiln_program_destroy(p);
  CHECK(kiln_vulkan_validation_messages(d) == 0);
  d->vt->destroy(d);
  CHECK_MSG(atomic_load(&live_allocs) == before, "host allocations leaked: %ld",
            atomic_load(&live_allocs) - before);
}

static void test_pipeline_cache(void) {
  if (!dev) return;
  char dir[320];
  snprintf(dir, sizeof dir, "%s/pc", tmp_dir);
  kiln_device_build_options_t bo = {.cache_dir = dir};
  hk_t ks[3] = {{"scale", scale_glsl, 2, 4, 64}, {"fma_acc", add_glsl, 3, 4, 64}, {"scale_again", scale_glsl, 2, 4, 64}};
  kiln_program_t* p = hand_program(ks, 3);
  if (!p) return;
  kiln_vulkan_cache_stats_t st;
  kiln_device_executable_t* e = NULL;
  /* Cold: nothing loaded, something saved; identical blobs share a pipeline. */
  if (CHECK_OK(dev->vt->executable_create(dev, p, &bo, &e))) {
    kiln_vulkan_last_cache_stats(dev, &st);
    CHECK(st.loaded_bytes == 0 && !st.ignored_corrupt);
    CHECK(st.saved_bytes > 0);
    CHECK(st.pipelines == 2);
    CHECK(access(st.path, R_OK) == 0);
    printf("  cold: %.2f ms, saved %llu bytes to %s\n", st.seconds * 1e3,
           (unsigned long long)st.saved_bytes, st.path);
    dev->vt->executable_destroy(dev, e);
    e = NULL;
  }
  /* Warm: the saved cache is read and given to the driver. */
  if (CHECK_OK(dev->vt->executable_create(dev, p, &bo, &e))) {
    kiln_vulkan_last_cache_stats(dev, &st);
    CHECK(st.loaded_bytes > 0 && !st.ignored_corrupt);
    printf("  warm: %.2f ms, loaded %llu bytes, driver cache hits %d of %d\n", st.seconds * 1e3,
           (unsigned long long)st.loaded_bytes, (int)st.cache_hits, (int)st.pipelines);
    dev->vt->executable_destroy(dev, e);
    e = NULL;
  }
  /* Corrupt file (garbage, then a flipped payload byte): warning, ignored. */
  for (int variant = 0; variant < 2; ++variant) {
    if (variant == 0) {
      FILE* f = fopen(st.path, "wb");
      CHECK(f != NULL);
      if (f) {
        fputs("this is not a pipeline cache", f);
        fclose(f);
      }
    } else {
      FILE* f = fopen(st.path, "r+b");
      CHECK(f != NULL);
      if (f) {
        fseek(f, 40, SEEK_SET);
        int ch = fgetc(f);
        fseek(f, 40, SEEK_SET);
        fputc(ch ^ 0x5a, f);
        fclose(f);
      }
    }
    if (CHECK_OK(dev->vt->executable_create(dev, p, &bo, &e))) {
      kiln_vulkan_last_cache_stats(dev, &st);
      CHECK(st.ignored_corrupt && st.loaded_bytes == 0);
      CHECK(st.saved_bytes > 0); /* rewritten */
      dev->vt->executable_destroy(dev, e);
      e = NULL;
    }
  }
  kiln_program_destroy(p);
}

/* reuse_code (kiln tune's default and closing builds): a later build takes
 * the pipelines of identical SPIR-V an earlier one made on the device and
 * creates only the others; they outlive the executable that made them. */
static void test_pipeline_reuse(void) {
  if (!dev) return;
  static const char* scale3_glsl =
      "#version 450\n"
      "layout(local_size_x = 64) in;\n"
      "layout(std430, binding = 0) readonly buffer X { float x[]; };\n"
      "layout(std430, binding = 1) writeonly buffer Y { float y[]; };\n"
      "void main() { uint i = gl_GlobalInvocationID.x; if (i < 256u) y[i] = 3.0 * x[i]; }\n";
  const int32_t msgs = kiln_vulkan_validation_messages(dev);
  kiln_device_build_options_t bo = {.cache_dir = "", .reuse_code = true};
  hk_t k1[3] = {{"scale", scale_glsl, 2, 4, 64}, {"fma_acc", add_glsl, 3, 4, 64}, {"scale_again", scale_glsl, 2, 4, 64}};
  hk_t k2[2] = {{"fma_acc", add_glsl, 3, 4, 64}, {"scale3", scale3_glsl, 2, 4, 64}};
  kiln_program_t* p1 = hand_program(k1, 3);
  kiln_program_t* p2 = hand_program(k2, 2);
  kiln_vulkan_cache_stats_t st;
  kiln_device_executable_t *e1 = NULL, *e2 = NULL, *e3 = NULL;
  if (p1 && CHECK_OK(dev->vt->executable_create(dev, p1, &bo, &e1))) {
    kiln_vulkan_last_cache_stats(dev, &st);
    CHECK(st.pipelines == 2 && st.reused == 0);
  }
  if (p2 && CHECK_OK(dev->vt->executable_create(dev, p2, &bo, &e2))) {
    kiln_vulkan_last_cache_stats(dev, &st);
    CHECK(st.pipelines == 1 && st.reused == 1); /* fma_acc from the first build, scale3 created */
  }
  dev->vt->executable_destroy(dev, e1); /* the memo and e2 keep theirs */
  if (p1 && CHECK_OK(dev->vt->executable_create(dev, p1, &bo, &e3))) {
    kiln_vulkan_last_cache_stats(dev, &st);
    CHECK(st.pipelines == 0 && st.reused == 2);
  }
  dev->vt->executable_destroy(dev, e3);
  /* without reuse_code every pipeline is created */
  bo.reuse_code = false;
  if (p2 && CHECK_OK(dev->vt->executable_create(dev, p2, &bo, &e3))) {
    kiln_vulkan_last_cache_stats(dev, &st);
    CHECK(st.pipelines == 2 && st.reused == 0);
  }
  dev->vt->executable_destroy(dev, e3);
  dev->vt->executable_destroy(dev, e2);
  kiln_program_destroy(p1);
  kiln_program_destroy(p2);
  CHECK(kiln_vulkan_validation_messages(dev) == msgs);
}

/* The kiln devices of one process on the same physical device share its
 * VkDevice and the pipelines of reuse_code builds (kiln tune builds its
 * points on a second device and the closing build on the first takes
 * them): what the second device built serves the first (0 created, 1
 * reused) and runs there after the second is gone; a different binary is
 * created; a build without reuse_code creates its own; the validation
 * layer silent. */
static void test_shared_device(void) {
  if (!dev) return;
  static const char* scale5_glsl =
      "#version 450\n"
      "layout(local_size_x = 64) in;\n"
      "layout(std430, binding = 0) readonly buffer X { float x[]; };\n"
      "layout(std430, binding = 1) writeonly buffer Y { float y[]; };\n"
      "void main() { uint i = gl_GlobalInvocationID.x; if (i < 256u) y[i] = 5.0 * x[i]; }\n";
  static const char* scale7_glsl =
      "#version 450\n"
      "layout(local_size_x = 64) in;\n"
      "layout(std430, binding = 0) readonly buffer X { float x[]; };\n"
      "layout(std430, binding = 1) writeonly buffer Y { float y[]; };\n"
      "void main() { uint i = gl_GlobalInvocationID.x; if (i < 256u) y[i] = 7.0 * x[i]; }\n";
  const int32_t msgs = kiln_vulkan_validation_messages(dev);
  const kiln_device_api_t* api = kiln_device_api_find("vulkan");
  const bool units_api = api && api->executable_units;
  CHECK(api && api->shared_code && units_api);
  kiln_device_t* d2 = open_dev(CA());
  if (!d2) return;
  kiln_device_build_options_t bo = {.cache_dir = "", .reuse_code = true};
  hk_t k5[1] = {{"scale5", scale5_glsl, 2, 4, 64}}, k7[1] = {{"scale7", scale7_glsl, 2, 4, 64}};
  kiln_program_t* p5 = hand_program(k5, 1);
  kiln_program_t* p7 = hand_program(k7, 1);
  kiln_vulkan_cache_stats_t st;
  kiln_device_executable_t *e2 = NULL, *e1 = NULL, *e7 = NULL, *en = NULL;
  kiln_device_cmd_t* c = NULL;
  kiln_device_buffer_t *x = NULL, *y = NULL;
  int32_t units = -1, reused = -1;
  if (p5 && CHECK_OK(d2->vt->executable_create(d2, p5, &bo, &e2))) {
    kiln_vulkan_last_cache_stats(d2, &st);
    CHECK(st.pipelines == 1 && st.reused == 0);
  }
  if (p5 && CHECK_OK(dev->vt->executable_create(dev, p5, &bo, &e1))) {
    kiln_vulkan_last_cache_stats(dev, &st);
    CHECK_MSG(st.pipelines == 0 && st.reused == 1, "the second device's pipeline: %d created, %d reused",
              (int)st.pipelines, (int)st.reused);
    if (units_api) api->executable_units(e1, &units, &reused);
    CHECK(units == 1 && reused == 1);
  }
  if (p7 && CHECK_OK(dev->vt->executable_create(dev, p7, &bo, &e7))) { /* another binary */
    kiln_vulkan_last_cache_stats(dev, &st);
    CHECK(st.pipelines == 1 && st.reused == 0);
  }
  bo.reuse_code = false;
  if (p5 && CHECK_OK(dev->vt->executable_create(dev, p5, &bo, &en))) {
    kiln_vulkan_last_cache_stats(dev, &st);
    CHECK(st.pipelines == 1 && st.reused == 0);
    if (units_api) api->executable_units(en, &units, &reused);
    CHECK(units == 0 && reused == 0);
  }
  d2->vt->executable_destroy(d2, e2);
  d2->vt->destroy(d2); /* its pipeline lives on in e1 and the memo */
  const kiln_device_vtable_t* vt = dev->vt;
  float hx[256], got[256];
  for (int i = 0; i < 256; ++i) hx[i] = (float)i * 0.25f - 9.0f;
  if (e1 && CHECK_OK(vt->buffer_create(dev, sizeof hx, "x", &x)) && CHECK_OK(vt->buffer_create(dev, sizeof got, "y", &y)) &&
      CHECK_OK(vt->buffer_write(dev, x, 0, hx, sizeof hx)) && CHECK_OK(vt->cmd_create(dev, e1, 0, &c)) &&
      CHECK_OK(vt->cmd_dispatch(dev, c, 0, (kiln_device_buffer_t* const[]){x, y}, 2)) && CHECK_OK(vt->cmd_end(dev, c)) &&
      CHECK_OK(vt->submit(dev, c)) && CHECK_OK(vt->wait(dev, c)) && CHECK_OK(vt->buffer_read(dev, y, 0, got, sizeof got))) {
    int bad = 0;
    for (int i = 0; i < 256; ++i) bad += got[i] != 5.0f * hx[i];
    CHECK_MSG(bad == 0, "%d of 256 results differ", bad);
  }
  vt->cmd_destroy(dev, c);
  vt->buffer_destroy(dev, x);
  vt->buffer_destroy(dev, y);
  vt->executable_destroy(dev, e1);
  vt->executable_destroy(dev, e7);
  vt->executable_destroy(dev, en);
  kiln_program_destroy(p5);
  kiln_program_destroy(p7);
  CHECK(kiln_vulkan_validation_messages(dev) == msgs);
}

static void test_build_failures(void) {
  uint8_t* blob = NULL;
  uint64_t len = 0;
  const char* bad = "#version 450\nlayout(local_size_x = 1) in;\nvoid main() { undefined_thing(1); }\n";
  CHECK_ERR(kiln_spirv_compile_glsl("bad_kernel_7", bad, A(), &blob, &len), KILN_INVALID_ARGUMENT, "bad_kernel_7");
  CHECK_ERR(kiln_spirv_compile_glsl("bad_kernel_7", bad, A(), &blob, &len), KILN_INVALID_ARGUMENT, "undefined_thing");
  CHECK_ERR(kiln_spirv_compile_glsl("bad_kernel_7", bad, A(), &blob, &len), KILN_INVALID_ARGUMENT,
            "line 3: void main() { undefined_thing(1); }");
  CHECK(blob == NULL);
  if (!dev) return;
  /* A blob that is not SPIR-V is rejected by the device, naming the kernel. */
  hk_t ks[1] = {{"not_spirv", NULL, 1, 1, 1}};
  kiln_program_t* p = hand_program(ks, 1);
  if (!p) return;
  CHECK_OK(kiln_allocator_malloc(CA(), 64, "blob", (void**)&p->code.blobs[0]));
  memset(p->code.blobs[0], 0xab, 64);
  p->code.blob_lens[0] = 64;
  kiln_device_executable_t* e = NULL;
  kiln_device_build_options_t bo = {.cache_dir = tmp_dir};
  CHECK_ERR(dev->vt->executable_create(dev, p, &bo, &e), KILN_INVALID_ARGUMENT, "not_spirv");
  CHECK(e == NULL);
  kiln_program_destroy(p);
  /* lavapipe ends an invocation after 65535 loop iterations: a kernel the
   * emitter estimates above that is refused, naming it, not run partially */
  hk_t ls[2] = {{"scale", scale_glsl, 2, 4, 64}, {"long_loops", scale_glsl, 2, 4, 64}};
  p = hand_program(ls, 2);
  if (!p) return;
  p->kernels[1].loop_trips = 70000;
  kiln_status_t s = dev->vt->executable_create(dev, p, &bo, &e);
  if (strstr(dev->info.name, "llvmpipe")) {
    CHECK_ERR(s, KILN_UNSUPPORTED, "kernel 'long_loops'");
    CHECK(e == NULL);
  } else {
    CHECK_OK(s);
  }
  if (e) dev->vt->executable_destroy(dev, e);
  e = NULL;
  p->kernels[1].loop_trips = 65535; /* at the limit: fine */
  if (CHECK_OK(dev->vt->executable_create(dev, p, &bo, &e))) dev->vt->executable_destroy(dev, e);
  kiln_program_destroy(p);
}

/* ---- plan-level runs ------------------------------------------------------ */

static uint64_t rng_state = 88172645463325252ull;
static double rnd(void) {
  rng_state ^= rng_state << 13;
  rng_state ^= rng_state >> 7;
  rng_state ^= rng_state << 17;
  return (double)(rng_state >> 11) / (double)(1ull << 52) - 1.0;
}

static kiln_array_t rand_array(kiln_dtype_t t, int rank, const int64_t* dims) {
  kiln_array_t a;
  kiln_shape_t s = kiln_shape_make(rank, dims);
  kiln_status_t st = kiln_array_alloc(A(), t, &s, &a);
  KILN_ASSERT(!st);
  int64_t n = kiln_array_numel(&a);
  for (int64_t i = 0; i < n; ++i) kiln_store_f64(t, a.data, (size_t)i, rnd());
  return a;
}

#define MAX_FEEDS 4
typedef struct tg_s {
  kiln_graph_t* g;
  kiln_array_t feeds[MAX_FEEDS];
  int n_feeds;
  bool ok;
} tg_t;

static void tg_init(tg_t* t) {
  memset(t, 0, sizeof(*t));
  t->ok = CHECK_OK(kiln_graph_create(A(), &t->g));
  if (t->ok) t->ok = CHECK_OK(kiln_graph_set_opset(t->g, "", 17));
}
static void tg_input(tg_t* t, const char* name, kiln_dtype_t dt, int rank, const int64_t* d) {
  if (!t->ok) return;
  KILN_ASSERT(t->n_feeds < MAX_FEEDS);
  t->feeds[t->n_feeds] = rand_array(dt, rank, d);
  t->ok = CHECK_OK(kiln_graph_add_input(t->g, name, dt, &t->feeds[t->n_feeds].shape, NULL));
  t->n_feeds++;
}
static void tg_const(tg_t* t, const char* name, kiln_dtype_t dt, int rank, const int64_t* d) {
  if (!t->ok) return;
  kiln_array_t a = rand_array(dt, rank, d);
  t->ok = CHECK_OK(kiln_graph_add_initializer(t->g, name, &a, NULL));
}
static void tg_node(tg_t* t, const char* op, const char* name, int n_in, const char* const* in,
                    const char* out, int n_attrs, const kiln_attr_t* attrs) {
  if (!t->ok) return;
  t->ok = CHECK_OK(kiln_graph_add_node(t->g, op, name, n_in, in, 1, (const char*[]){out}, n_attrs, attrs, NULL));
}
static void tg_output(tg_t* t, const char* name) {
  if (t->ok) t->ok = CHECK_OK(kiln_graph_add_output(t->g, name));
}
static void tg_free(tg_t* t) {
  for (int i = 0; i < t->n_feeds; ++i) kiln_array_free(A(), &t->feeds[i]);
  kiln_graph_destroy(t->g);
}

static uint64_t buf_bytes(const tir_buffer_t* b) {
  uint64_t n = 1;
  for (int32_t i = 0; i < b->rank; ++i) n *= (uint64_t)b->shape[i];
  return n * kiln_dtype_size(b->dtype);
}

/* The Vulkan program of |p| (kernels, buffers, SPIR-V) with the Vulkan
 * templates chosen. Its kernel list may be shorter than the plan's (a conv
 * template replaces GEMM + crop); its buffers are the plan's, one for one. */
/* Mode gpu_rules: the template set gets the device's flags with the GPU
 * class (kiln_compile_gpu_lacks under KILN_VULKAN_RULES=gpu); |g_rules_kinds|
 * collects the template kinds its plans took. 0: the set's default (no
 * flags, lavapipe's rules). */
static uint32_t g_rules;
static uint32_t g_rules_kinds;
/* with |g_rules|: the device's limits the template set gets
 * (kiln_compile_device_limits, as a compile hands them) */
static kiln_template_limits_t g_limits;
/* where set, every program run_plan runs holds it in its GLSL */
static const char* g_want_text;

/* Under the GPU rules: every template instance of |p| has GPU-sized
 * tiles (GEMM / conv: shared-memory tiles of 64-256 invocations, depthwise
 * 64) that its tune space holds and its check accepts; every launch of
 * |prog| is one invocation (a printed kernel of a tiny extent) or at least
 * 32 (rows.comp's row groups; everything else 64 or more), none of
 * lavapipe's 8. */
static void check_gpu_rules(const kiln_plan_t* p, const kiln_program_t* prog, const kiln_template_set_t* set) {
  for (int32_t k = 0; k < p->n_kernels; ++k) {
    const kiln_template_t* t = p->kernels[k].tmpl;
    if (!t || t->kind == KILN_TEMPLATE_MERGED) continue;
    g_rules_kinds |= 1u << t->kind;
    const int32_t* v = t->tiles.v;
    if (t->kind == KILN_TEMPLATE_GEMM || t->kind == KILN_TEMPLATE_CONV) {
      const int32_t nt = (v[1] / v[4]) * (v[0] / v[3]);
      CHECK_MSG(t->tiles.n == 6 && v[5] == 1 && nt >= 64 && nt <= 256, "kernel %d: tiles %d,%d,%d,%d,%d,%d", (int)k,
                v[0], v[1], v[2], v[3], v[4], v[5]);
    } else if (t->kind == KILN_TEMPLATE_DEPTHWISE) {
      CHECK_MSG(v[0] == 64, "kernel %d: depthwise work-group %d", (int)k, v[0]);
    }
    kiln_template_space_t sp;
    int32_t idx[KILN_TEMPLATE_TILES_MAX];
    if (set->space(t, &sp)) {
      CHECK_MSG(kiln_template_space_index(&sp, &t->tiles, idx), "kernel %d: the default is not in its space", (int)k);
      const char* why = set->tiles_check(t, &t->tiles, NULL);
      CHECK_MSG(why == NULL, "kernel %d: the default refused: %s", (int)k, why ? why : "");
      kiln_template_tiles_t h[8];
      const int32_t nh = set->tiles_hints(t, h, 8);
      for (int32_t i = 0; i < nh && (t->kind == KILN_TEMPLATE_GEMM || t->kind == KILN_TEMPLATE_CONV); ++i)
        CHECK_MSG(h[i].v[5] == 1, "kernel %d: hint %d not a shared-memory point", (int)k, (int)i);
    }
  }
  for (int32_t k = 0; k < prog->n_kernels; ++k) {
    const int64_t n = prog->kernels[k].local[0] * prog->kernels[k].local[1] * prog->kernels[k].local[2];
    CHECK_MSG(n == 1 || (n >= 32 && n <= 256), "kernel %s: a work-group of %lld", prog->kernels[k].name, (long long)n);
  }
}

static kiln_status_t plan_program(kiln_plan_t* p, kiln_program_t** out) {
  kiln_template_set_t set;
  kiln_spirv_templates(&set);
  if (g_rules) set.gpu_lacks = p->gpu_lacks = g_rules; /* the plan's too: the emitter reads it */
  if (g_rules) set.limits = g_limits;
  KILN_RETURN_IF_ERROR(kiln_template_choose(p, &set));
  if (g_rules) {
    kiln_program_build_options_t bo = {.model_name = "test"};
    KILN_RETURN_IF_ERROR(kiln_program_build(p, kiln_target_find("vulkan"), &bo, CA(), out));
    check_gpu_rules(p, *out, &set);
    return NULL;
  }
  kiln_program_build_options_t bo = {.model_name = "test"};
  return kiln_program_build(p, kiln_target_find("vulkan"), &bo, CA(), out);
}

/* Runs every kernel of |p| in order on |d| (one device buffer per plan
 * memory root, aliases as views at offset 0, a barrier between kernels)
 * and reads the graph outputs into |outs| (allocated with A()). */
static kiln_status_t run_plan(kiln_device_t* d, kiln_plan_t* p, const kiln_array_t* feeds,
                              kiln_array_t* outs, int32_t* out_kernels) {
  const kiln_device_vtable_t* vt = d->vt;
  kiln_program_t* prog = NULL;
  KILN_RETURN_IF_ERROR(plan_program(p, &prog));
  if (getenv("KILN_TEST_DUMP")) fputs(prog->code.text, stderr);
  if (g_want_text) CHECK_MSG(strstr(prog->code.text, g_want_text), "no \"%s\" in the program", g_want_text);
  *out_kernels = prog->n_kernels;
  kiln_device_executable_t* e = NULL;
  kiln_device_cmd_t* c = NULL;
  kiln_device_buffer_t** bufs = calloc((size_t)p->n_buffers + 1, sizeof *bufs);
  kiln_device_buffer_t** args = NULL;
  kiln_device_build_options_t bo = {.cache_dir = tmp_dir};
  kiln_status_t s = vt->executable_create(d, prog, &bo, &e);
  for (int32_t i = 0; !s && i < p->n_buffers; ++i)
    if (p->buffers[i].alias_of < 0)
      s = vt->buffer_create(d, buf_bytes(p->buffers[i].buf), p->buffers[i].buf->name, &bufs[i]);
  for (int32_t i = 0; !s && i < p->n_buffers; ++i)
    if (p->buffers[i].alias_of >= 0)
      s = vt->view_create(d, bufs[kiln_plan_root(p, i)], 0, buf_bytes(p->buffers[i].buf), &bufs[i]);
  for (int32_t i = 0; !s && i < p->n_buffers; ++i)
    if (p->buffers[i].kind == KILN_PLAN_CONST && p->buffers[i].value.data)
      s = vt->buffer_write(d, bufs[i], 0, p->buffers[i].value.data, p->buffers[i].value.nbytes);
  for (int32_t i = 0; !s && i < p->graph->n_inputs; ++i)
    s = vt->buffer_write(d, bufs[p->inputs[i]], 0, feeds[i].data, feeds[i].nbytes);
  if (!s) s = vt->cmd_create(d, e, 0, &c);
  for (int32_t k = 0; !s && k < prog->n_kernels; ++k) {
    int32_t n = prog->kernels[k].n_args;
    free(args);
    args = calloc((size_t)n + 1, sizeof *args);
    for (int32_t j = 0; j < n; ++j) args[j] = bufs[prog->kernels[k].args[j]];
    s = vt->cmd_dispatch(d, c, k, args, n);
    if (!s && k + 1 < prog->n_kernels) s = vt->cmd_barrier(d, c);
  }
  if (!s) s = vt->cmd_end(d, c);
  if (!s) s = vt->submit(d, c);
  if (!s) s = vt->wait(d, c);
  for (int32_t o = 0; !s && o < p->graph->n_outputs; ++o) {
    const tir_buffer_t* b = p->buffers[p->outputs[o]].buf;
    kiln_shape_t sh = kiln_shape_make(b->rank, b->shape);
    s = kiln_array_alloc(A(), b->dtype, &sh, &outs[o]);
    if (!s) s = vt->buffer_read(d, bufs[p->outputs[o]], 0, outs[o].data, outs[o].nbytes);
  }
  free(args);
  vt->cmd_destroy(d, c);
  for (int32_t i = 0; i < p->n_buffers; ++i)
    if (p->buffers[i].alias_of >= 0) vt->buffer_destroy(d, bufs[i]);
  for (int32_t i = 0; i < p->n_buffers; ++i)
    if (p->buffers[i].alias_of < 0) vt->buffer_destroy(d, bufs[i]);
  free(bufs);
  vt->executable_destroy(d, e);
  kiln_program_destroy(prog);
  return s;
}

/* Lowers |t| for the GPU (fused when |fuse|), runs it on the device and
 * compares every output with the reference executor. */
/* |fp16|: the plan goes through the precision pass (fp16 storage and
 * element-wise arithmetic, f32 accumulators) after fusion. */
static void run_case(tg_t* t, const char* what, bool fuse, bool fp16, double rtol, double atol) {
  if (!dev || !t->ok || !CHECK_OK(kiln_graph_prepare(t->g))) return;
  kiln_graph_t* g = t->g;
  kiln_array_t want[4], got[4];
  memset(want, 0, sizeof want);
  memset(got, 0, sizeof got);
  kiln_ref_options_t ro;
  kiln_ref_options_default(&ro);
  if (!CHECK_OK(kiln_ref_run(g, t->feeds, &ro, want))) return;
  /* lowering splits the work to the device's loop limit, as kiln run does */
  kiln_plan_options_t po = {KILN_TARGET_CLASS_GPU, 0, dev->info.loop_limit, 0, 0, 0};
  kiln_plan_t* p = NULL;
  int32_t nk = 0;
  if (CHECK_OK(kiln_plan_build(g, &po, A(), &p))) {
    kiln_fusion_report_t rep;
    kiln_precision_options_t po16 = {KILN_PRECISION_FP16, true, false, NULL, false, false};
    if ((!fuse || CHECK_OK(kiln_plan_fuse(p, &rep, NULL))) && (!fp16 || CHECK_OK(kiln_plan_set_precision(p, &po16, NULL)))) {
      long before = atomic_load(&live_allocs);
      int32_t msgs = kiln_vulkan_validation_messages(dev);
      if (CHECK_OK(run_plan(dev, p, t->feeds, got, &nk))) {
        for (int o = 0; o < g->n_outputs; ++o) {
          kiln_compare_result_t r;
          kiln_compare(&got[o], &want[o], rtol, atol, &r);
          CHECK_MSG(r.ok, "%s%s: output %d: %s", what, fuse ? " (fused)" : "", o, r.message);
        }
      } else {
        fprintf(stderr, "  case %s\n", what);
      }
      CHECK_MSG(kiln_vulkan_validation_messages(dev) == msgs, "%s: validation messages", what);
      CHECK_MSG(atomic_load(&live_allocs) == before, "%s: host allocations leaked", what);
    }
  }
  printf("  %-28s %s %d kernels\n", what, fp16 ? "fp16   " : fuse ? "fused  " : "unfused", (int)nk);
  for (int o = 0; o < g->n_outputs; ++o) {
    kiln_array_free(A(), &want[o]);
    kiln_array_free(A(), &got[o]);
  }
  kiln_plan_destroy(p);
}

typedef void (*build_fn)(tg_t* t);

/* Each graph unfused and fused, with the tiled GEMM and without it. */
static void check_graph(build_fn build, const char* what, double rtol, double atol) {
  for (int v = 0; v < 3; ++v) {
    if (v == 2) setenv("KILN_SPIRV_NO_GEMM", "1", 1);
    tg_t t;
    tg_init(&t);
    build(&t);
    char name[96];
    snprintf(name, sizeof name, "%s%s", what, v == 2 ? " [no gemm]" : "");
    run_case(&t, name, v >= 1, false, rtol, atol);
    tg_free(&t);
    if (v == 2) unsetenv("KILN_SPIRV_NO_GEMM");
  }
}

static void g_add_relu(tg_t* t) {
  tg_input(t, "x", F32, 4, DIMS(2, 3, 17, 5));
  tg_input(t, "y", F32, 3, DIMS(3, 1, 5));
  tg_node(t, "Add", "add", 2, NAMES("x", "y"), "s", 0, NULL);
  tg_node(t, "Relu", "relu", 1, NAMES("s"), "r", 0, NULL);
  tg_node(t, "Sigmoid", "sig", 1, NAMES("r"), "z", 0, NULL);
  tg_output(t, "z");
}

static void g_matmul_small(tg_t* t) { /* B read in place */
  tg_input(t, "a", F32, 2, DIMS(13, 47));
  tg_input(t, "b", F32, 2, DIMS(47, 29));
  tg_node(t, "MatMul", "mm", 2, NAMES("a", "b"), "y", 0, NULL);
  tg_output(t, "y");
}

static void g_matmul_packed(tg_t* t) { /* run-time B packed by a kernel */
  tg_input(t, "a", F32, 2, DIMS(70, 128));
  tg_input(t, "b", F32, 2, DIMS(128, 150));
  tg_node(t, "MatMul", "mm", 2, NAMES("a", "b"), "y", 0, NULL);
  tg_node(t, "Relu", "relu", 1, NAMES("y"), "r", 0, NULL);
  tg_output(t, "r");
}

static void g_matmul_const(tg_t* t) { /* constant B packed at compile time, K blocked */
  tg_input(t, "a", F32, 2, DIMS(20, 700));
  tg_const(t, "w", F32, 2, DIMS(700, 40));
  tg_node(t, "MatMul", "mm", 2, NAMES("a", "w"), "y", 0, NULL);
  tg_output(t, "y");
}

static void g_gemm_bias(tg_t* t) { /* transB + bias: the tiled GEMM with its bias */
  tg_input(t, "a", F32, 2, DIMS(9, 33));
  tg_const(t, "w", F32, 2, DIMS(21, 33));
  tg_const(t, "c", F32, 1, DIMS(21));
  kiln_attr_t tb = kiln_attr_make_int("transB", 1);
  tg_node(t, "Gemm", "fc", 3, NAMES("a", "w", "c"), "y", 1, &tb);
  tg_output(t, "y");
}

static void g_gemm_trans(tg_t* t) { /* transB, no bias: B read transposed in place */
  tg_input(t, "a", F32, 2, DIMS(9, 33));
  tg_input(t, "w", F32, 2, DIMS(21, 33));
  kiln_attr_t tb = kiln_attr_make_int("transB", 1);
  tg_node(t, "Gemm", "fc", 2, NAMES("a", "w"), "y", 1, &tb);
  tg_output(t, "y");
}

static void g_conv(tg_t* t) {
  tg_input(t, "x", F32, 4, DIMS(1, 3, 10, 9));
  tg_const(t, "w", F32, 4, DIMS(8, 3, 3, 3));
  tg_const(t, "b", F32, 1, DIMS(8));
  kiln_attr_t pads = kiln_attr_make_ints("pads", 4, DIMS(1, 1, 1, 1));
  tg_node(t, "Conv", "conv", 3, NAMES("x", "w", "b"), "c", 1, &pads);
  tg_node(t, "Relu", "relu", 1, NAMES("c"), "r", 0, NULL);
  kiln_attr_t mp[2] = {kiln_attr_make_ints("kernel_shape", 2, DIMS(2, 2)),
                       kiln_attr_make_ints("strides", 2, DIMS(2, 2))};
  tg_node(t, "MaxPool", "pool", 1, NAMES("r"), "y", 2, mp);
  tg_output(t, "y");
}

/* Conv shapes for kernels/vulkan/conv.comp: stride 2 whose last block
 * runs past the grid (ResNet-18 layer2.0 conv1 at 16 channels), and a
 * residual Add + Relu epilogue with a LeakyRelu before it. */
static void g_conv_s2(tg_t* t) {
  tg_input(t, "x", F32, 4, DIMS(1, 16, 56, 56));
  tg_const(t, "w", F32, 4, DIMS(32, 16, 3, 3));
  tg_const(t, "b", F32, 1, DIMS(32));
  kiln_attr_t ca[2] = {kiln_attr_make_ints("pads", 4, DIMS(1, 1, 1, 1)),
                       kiln_attr_make_ints("strides", 2, DIMS(2, 2))};
  tg_node(t, "Conv", "conv", 3, NAMES("x", "w", "b"), "c", 2, ca);
  tg_node(t, "Relu", "relu", 1, NAMES("c"), "y", 0, NULL);
  tg_output(t, "y");
}

/* y = Relu(res + LeakyRelu(conv3x3(x, w), 0.1)), pads 1, |m| channels out */
static void conv_residual_nodes(tg_t* t, const char* res, int64_t m) {
  tg_const(t, "w", F32, 4, DIMS(m, 12, 3, 3));
  kiln_attr_t pads = kiln_attr_make_ints("pads", 4, DIMS(1, 1, 1, 1));
  tg_node(t, "Conv", "conv", 2, NAMES("x", "w"), "c", 1, &pads);
  kiln_attr_t al = kiln_attr_make_float("alpha", 0.1f);
  tg_node(t, "LeakyRelu", "lrelu", 1, NAMES("c"), "l", 1, &al);
  tg_node(t, "Add", "add", 2, NAMES(res, "l"), "s", 0, NULL);
  tg_node(t, "Relu", "relu", 1, NAMES("s"), "y", 0, NULL);
  tg_output(t, "y");
}

static void g_conv_residual(tg_t* t) {
  tg_input(t, "x", F32, 4, DIMS(2, 12, 11, 13));
  tg_input(t, "res", F32, 4, DIMS(2, 20, 11, 13));
  conv_residual_nodes(t, "res", 20);
}

/* A conv whose input and residual are one Relu's output, so in an fp16
 * plan both are an f16 activation (the graph's input stays f32) */
static void g_conv_residual_f16(tg_t* t) {
  tg_input(t, "x0", F32, 4, DIMS(2, 12, 11, 13));
  tg_node(t, "Relu", "rx", 1, NAMES("x0"), "x", 0, NULL);
  conv_residual_nodes(t, "x", 12);
}

/* Window pools for kernels/vulkan/pool.comp: unaligned rows (18 columns),
 * pads, a partial last block of 8 outputs, ceil_mode, both AveragePool
 * counts and texel stores (16 -> 8 columns); GlobalAveragePool of 7x7
 * planes (49 taps) */
/* MaxPools of |x| and |x2| (3x3, stride 2, pads 1) into m and m2, an
 * AveragePool of |x| (ceil_mode, uneven pads) into a */
static void pool_nodes(tg_t* t, const char* x, const char* x2) {
  kiln_attr_t mp[3] = {kiln_attr_make_ints("kernel_shape", 2, DIMS(3, 3)),
                       kiln_attr_make_ints("strides", 2, DIMS(2, 2)),
                       kiln_attr_make_ints("pads", 4, DIMS(1, 1, 1, 1))};
  tg_node(t, "MaxPool", "maxpool", 1, NAMES(x), "m", 3, mp);
  tg_node(t, "MaxPool", "maxpool2", 1, NAMES(x2), "m2", 3, mp);
  kiln_attr_t ap[4] = {kiln_attr_make_ints("kernel_shape", 2, DIMS(3, 3)),
                       kiln_attr_make_ints("strides", 2, DIMS(2, 2)),
                       kiln_attr_make_ints("pads", 4, DIMS(1, 0, 1, 2)), kiln_attr_make_int("ceil_mode", 1)};
  tg_node(t, "AveragePool", "avgpool", 1, NAMES(x), "a", 4, ap);
}

static void g_pools(tg_t* t) {
  tg_input(t, "x", F32, 4, DIMS(2, 3, 11, 18));
  tg_input(t, "x2", F32, 4, DIMS(1, 4, 16, 16));
  pool_nodes(t, "x", "x2");
  kiln_attr_t ap2[3] = {kiln_attr_make_ints("kernel_shape", 2, DIMS(2, 3)),
                        kiln_attr_make_ints("pads", 4, DIMS(0, 1, 1, 1)),
                        kiln_attr_make_int("count_include_pad", 1)};
  tg_node(t, "AveragePool", "avgpool2", 1, NAMES("x"), "a2", 3, ap2);
  tg_output(t, "m");
  tg_output(t, "m2");
  tg_output(t, "a");
  tg_output(t, "a2");
}

/* f16 pools in an fp16 plan: each pool's input a Relu's output and its
 * output a 1x1 conv's input, so both are f16 activations (a pool's fused
 * consumer would keep the printed kernel): a MaxPool with pads (18 columns:
 * unaligned rows), an AveragePool with ceil_mode and uneven pads, and a
 * MaxPool to 8 columns (f16 texel stores, 4 halves a store) */
static void g_pools_f16(tg_t* t) {
  tg_input(t, "x0", F32, 4, DIMS(2, 8, 11, 18));
  tg_input(t, "z0", F32, 4, DIMS(1, 8, 16, 16));
  tg_node(t, "Relu", "rx", 1, NAMES("x0"), "x", 0, NULL);
  tg_node(t, "Relu", "rz", 1, NAMES("z0"), "z", 0, NULL);
  pool_nodes(t, "x", "z");
  tg_const(t, "w", F32, 4, DIMS(4, 8, 1, 1));
  tg_node(t, "Conv", "c1", 2, NAMES("m", "w"), "y1", 0, NULL);
  tg_node(t, "Conv", "c2", 2, NAMES("m2", "w"), "y2", 0, NULL);
  tg_node(t, "Conv", "c3", 2, NAMES("a", "w"), "y3", 0, NULL);
  tg_output(t, "y1");
  tg_output(t, "y2");
  tg_output(t, "y3");
}

static void g_gap(tg_t* t) {
  tg_input(t, "x", F32, 4, DIMS(2, 3, 7, 7));
  tg_node(t, "GlobalAveragePool", "gap", 1, NAMES("x"), "g", 0, NULL);
  tg_output(t, "g");
}

/* Winograd reading X itself (kernels/vulkan/winograd.comp CDIRECT):
 * uneven pads (2 rows above, none below; 1 column left, 3 right), rows of
 * whole texels (16 columns: one shift for all rows), a bias */
static void g_conv_wino_pads(tg_t* t) {
  tg_input(t, "x", F32, 4, DIMS(1, 8, 10, 16));
  tg_const(t, "w", F32, 4, DIMS(12, 8, 3, 3));
  tg_const(t, "b", F32, 1, DIMS(12));
  kiln_attr_t pads = kiln_attr_make_ints("pads", 4, DIMS(2, 1, 0, 3));
  tg_node(t, "Conv", "conv", 3, NAMES("x", "w", "b"), "y", 1, &pads);
  tg_output(t, "y");
}

/* no crop: the grid is Y; |dt| the input's, weights' and bias' type */
static void conv_1x1_of(tg_t* t, kiln_dtype_t dt) {
  tg_input(t, "x", dt, 4, DIMS(1, 24, 16, 16));
  tg_const(t, "w", dt, 4, DIMS(40, 24, 1, 1));
  tg_const(t, "b", dt, 1, DIMS(40));
  tg_node(t, "Conv", "conv", 3, NAMES("x", "w", "b"), "y", 0, NULL);
  tg_output(t, "y");
}
static void g_conv_1x1(tg_t* t) { conv_1x1_of(t, F32); }
/* in f16 throughout: input and weights read as rgba16f texels, Y stored 4
 * halves at a time (conv.comp Y16) */
static void g_conv_1x1_f16(tg_t* t) { conv_1x1_of(t, F16); }

static void g_conv_f16(tg_t* t) { /* f16 storage, f32 sums in the shader */
  tg_input(t, "x", F16, 4, DIMS(1, 8, 15, 17));
  tg_const(t, "w", F16, 4, DIMS(24, 8, 3, 3));
  tg_const(t, "b", F16, 1, DIMS(24));
  kiln_attr_t ca[2] = {kiln_attr_make_ints("pads", 4, DIMS(1, 1, 1, 1)),
                       kiln_attr_make_ints("strides", 2, DIMS(2, 2))};
  tg_node(t, "Conv", "conv", 3, NAMES("x", "w", "b"), "c", 2, ca);
  tg_node(t, "Relu", "relu", 1, NAMES("c"), "y", 0, NULL);
  tg_output(t, "y");
}

/* y = Relu(conv3x3(x, w) + b) with |m| of |c| channels, pads |p|
 * (top, left, bottom, right), stride 2 */
static void conv_s2_relu_nodes(tg_t* t, int64_t m, int64_t c, const int64_t p[4]) {
  tg_const(t, "w", F32, 4, DIMS(m, c, 3, 3));
  tg_const(t, "b", F32, 1, DIMS(m));
  kiln_attr_t ca[2] = {kiln_attr_make_ints("pads", 4, DIMS(p[0], p[1], p[2], p[3])),
                       kiln_attr_make_ints("strides", 2, DIMS(2, 2))};
  tg_node(t, "Conv", "conv", 3, NAMES("x", "w", "b"), "c", 2, ca);
  tg_node(t, "Relu", "relu", 1, NAMES("c"), "y", 0, NULL);
  tg_output(t, "y");
}

/* A stride-2 3x3 conv with a bias and a Relu over a Relu's output (an f16
 * activation in an fp16 plan), 32 -> 16 channels of 20 x 24 */
static void g_conv_s2_f16(tg_t* t) {
  tg_input(t, "x0", F32, 4, DIMS(2, 32, 20, 24));
  tg_node(t, "Relu", "rx", 1, NAMES("x0"), "x", 0, NULL);
  conv_s2_relu_nodes(t, 16, 32, (const int64_t[]){1, 1, 1, 1});
}

/* Depthwise (kernels/vulkan/depthwise.comp): channel multiplier 2, stride
 * 2, dilation, asymmetric size, Clip epilogue fused into the kernel. */
static void g_depthwise(tg_t* t) {
  tg_input(t, "x", F32, 4, DIMS(2, 6, 13, 16));
  tg_const(t, "w", F32, 4, DIMS(12, 1, 3, 3));
  tg_const(t, "b", F32, 1, DIMS(12));
  kiln_attr_t ca[4] = {kiln_attr_make_ints("pads", 4, DIMS(2, 1, 2, 1)),
                       kiln_attr_make_ints("strides", 2, DIMS(2, 1)),
                       kiln_attr_make_ints("dilations", 2, DIMS(2, 1)), kiln_attr_make_int("group", 6)};
  tg_node(t, "Conv", "dw", 3, NAMES("x", "w", "b"), "c", 4, ca);
  tg_node(t, "Relu", "relu", 1, NAMES("c"), "y", 0, NULL);
  tg_output(t, "y");
}

static kiln_program_t* graph_program(build_fn build, bool fuse, bool fp16);
static void check_text(build_fn build, bool fp16, const char* want, const char* what);

/* Depthwise row-form planes whose work-group and rows come from the plane
 * cost (vulkan_tiles.c, kiln_vulkan_dw_plane_cost): 28x28 (4 rows of 8 an
 * invocation, 28 invocations a plane: one group of 32, where the
 * 64-invocation rule took 1 row in 2 groups of 64), 56x56 (4 rows of 16,
 * 56 invocations: one group of 56; the last 16 of a row half past it),
 * batch 2, bias and Clip(0, 6) fused. */
static void tg_scalar(tg_t* t, const char* name, double v);
static void g_dw_rows(tg_t* t, int64_t hw) {
  tg_input(t, "x", F32, 4, DIMS(2, 5, hw, hw));
  tg_const(t, "w", F32, 4, DIMS(5, 1, 3, 3));
  tg_const(t, "b", F32, 1, DIMS(5));
  tg_scalar(t, "lo", 0.0);
  tg_scalar(t, "hi", 6.0);
  kiln_attr_t ca[2] = {kiln_attr_make_ints("pads", 4, DIMS(1, 1, 1, 1)), kiln_attr_make_int("group", 5)};
  tg_node(t, "Conv", "dw", 3, NAMES("x", "w", "b"), "c", 2, ca);
  tg_node(t, "Clip", "clip", 3, NAMES("c", "lo", "hi"), "y", 0, NULL);
  tg_output(t, "y");
}
static void g_dw_rows28(tg_t* t) { g_dw_rows(t, 28); }
static void g_dw_rows56(tg_t* t) { g_dw_rows(t, 56); }

/* Depthwise planes whose rows are not whole texels (depthwise.comp's
 * FLAT: 8 or 16 outputs of Y seen flat, spanning rows and two planes, or
 * whole rows of one plane):
 * 7x7 with a bias, a Relu and a residual Add fused (the operand indexed by
 * each output's own channel and position), batch 2 (1176 outputs: 8 an
 * invocation); 14x14 with dilation 2, no bias (16 an invocation). */
static void g_depthwise_flat7(tg_t* t) {
  tg_input(t, "x", F32, 4, DIMS(2, 12, 7, 7));
  tg_input(t, "res", F32, 4, DIMS(2, 12, 7, 7));
  tg_const(t, "w", F32, 4, DIMS(12, 1, 3, 3));
  tg_const(t, "b", F32, 1, DIMS(12));
  kiln_attr_t ca[2] = {kiln_attr_make_ints("pads", 4, DIMS(1, 1, 1, 1)), kiln_attr_make_int("group", 12)};
  tg_node(t, "Conv", "dw", 3, NAMES("x", "w", "b"), "c", 2, ca);
  tg_node(t, "Relu", "relu", 1, NAMES("c"), "r", 0, NULL);
  tg_node(t, "Add", "add", 2, NAMES("r", "res"), "y", 0, NULL);
  tg_output(t, "y");
}

/* 7x7, 16 channels, no epilogue operand: 784 outputs, 16 an invocation
 * spanning rows and planes (14x14 takes whole rows: 28) */
static void g_depthwise_flat7b(tg_t* t) {
  tg_input(t, "x", F32, 4, DIMS(1, 16, 7, 7));
  tg_const(t, "w", F32, 4, DIMS(16, 1, 3, 3));
  tg_const(t, "b", F32, 1, DIMS(16));
  kiln_attr_t ca[2] = {kiln_attr_make_ints("pads", 4, DIMS(1, 1, 1, 1)), kiln_attr_make_int("group", 16)};
  tg_node(t, "Conv", "dw", 3, NAMES("x", "w", "b"), "c", 2, ca);
  tg_node(t, "Relu", "relu", 1, NAMES("c"), "y", 0, NULL);
  tg_output(t, "y");
}

static void g_depthwise_flat14(tg_t* t) {
  tg_input(t, "x", F32, 4, DIMS(1, 16, 14, 14));
  tg_const(t, "w", F32, 4, DIMS(16, 1, 3, 3));
  kiln_attr_t ca[3] = {kiln_attr_make_ints("pads", 4, DIMS(2, 2, 2, 2)),
                       kiln_attr_make_ints("dilations", 2, DIMS(2, 2)), kiln_attr_make_int("group", 16)};
  tg_node(t, "Conv", "dw", 2, NAMES("x", "w"), "c", 3, ca);
  tg_node(t, "Relu", "relu", 1, NAMES("c"), "y", 0, NULL);
  tg_output(t, "y");
}

/* GEMMs the templates leave to the printed loop nest (a Gemm's bias; a
 * stride-2 conv with the SiLU epilogue x * sigmoid(x)) large enough that
 * the chunked form (as many invocations as CPU threads, each with whole
 * rows of tiles) runs past lavapipe's 65535 loop iterations per invocation
 * on one thread. */
/* alpha != 1 keeps the printed loop nest (the tiled GEMM takes a bias, no
 * alpha): a printed kernel past the loop limit unsplit */
static void g_gemm_bias_big(tg_t* t) {
  tg_input(t, "a", F32, 2, DIMS(64, 1024));
  tg_const(t, "w", F32, 2, DIMS(256, 1024));
  tg_const(t, "c", F32, 1, DIMS(256));
  kiln_attr_t ga[2] = {kiln_attr_make_int("transB", 1), kiln_attr_make_float("alpha", 0.5f)};
  tg_node(t, "Gemm", "fc", 3, NAMES("a", "w", "c"), "y", 2, ga);
  tg_output(t, "y");
}

/* a 3x3 s2 conv with a SiLU as exported (Sigmoid, Mul): the implicit-GEMM
 * template with the SiLU in its epilogue ('w') */
static void g_conv_silu_dense(tg_t* t) {
  tg_input(t, "x", F32, 4, DIMS(1, 64, 48, 48));
  tg_const(t, "w", F32, 4, DIMS(64, 64, 3, 3));
  tg_const(t, "b", F32, 1, DIMS(64));
  kiln_attr_t ca[2] = {kiln_attr_make_ints("pads", 4, DIMS(1, 1, 1, 1)),
                       kiln_attr_make_ints("strides", 2, DIMS(2, 2))};
  tg_node(t, "Conv", "conv", 3, NAMES("x", "w", "b"), "c", 2, ca);
  tg_node(t, "Sigmoid", "sig", 1, NAMES("c"), "s", 0, NULL);
  tg_node(t, "Mul", "silu", 2, NAMES("s", "c"), "y", 0, NULL);
  tg_output(t, "y");
}

/* grouped (2 groups: no template takes it, so the printed conv with its
 * SiLU, whose loops the device limit splits) */
static void g_conv_silu(tg_t* t) {
  tg_input(t, "x", F32, 4, DIMS(1, 64, 96, 96));
  tg_const(t, "w", F32, 4, DIMS(64, 32, 3, 3));
  tg_const(t, "b", F32, 1, DIMS(64));
  kiln_attr_t ca[3] = {kiln_attr_make_ints("pads", 4, DIMS(1, 1, 1, 1)),
                       kiln_attr_make_ints("strides", 2, DIMS(2, 2)), kiln_attr_make_int("group", 2)};
  tg_node(t, "Conv", "conv", 3, NAMES("x", "w", "b"), "c", 3, ca);
  tg_node(t, "Sigmoid", "sig", 1, NAMES("c"), "s", 0, NULL);
  tg_node(t, "Mul", "silu", 2, NAMES("c", "s"), "y", 0, NULL);
  tg_output(t, "y");
}

static void tg_scalar(tg_t* t, const char* name, double v) {
  if (!t->ok) return;
  kiln_array_t a;
  kiln_shape_t s = kiln_shape_make(0, NULL);
  t->ok = CHECK_OK(kiln_array_alloc(A(), KILN_DTYPE_F32, &s, &a));
  if (!t->ok) return;
  kiln_store_f64(KILN_DTYPE_F32, a.data, 0, v);
  t->ok = CHECK_OK(kiln_graph_add_initializer(t->g, name, &a, NULL));
}

/* 1x1 convs on small grids, which take conv.comp's split work-group (4
 * position groups x 2 channel groups of 16, vulkan_tiles.c): 7x7 planes
 * (49 positions, not whole texels) with 37 channels from 19 (a second
 * channel tile mostly past M), batch 2 and a fused Clip(0, 6); 14x14 (RN
 * 20) with 40 channels and a residual Add; 13x11 (143 positions, a grid
 * of 160, RN 20) with 9 -> 33 channels, no bias, Relu */
static void g_conv_1x1_7(tg_t* t) {
  tg_input(t, "x", F32, 4, DIMS(2, 19, 7, 7));
  tg_const(t, "w", F32, 4, DIMS(37, 19, 1, 1));
  tg_const(t, "b", F32, 1, DIMS(37));
  tg_scalar(t, "lo", 0.0);
  tg_scalar(t, "hi", 6.0);
  tg_node(t, "Conv", "conv", 3, NAMES("x", "w", "b"), "c", 0, NULL);
  tg_node(t, "Clip", "clip", 3, NAMES("c", "lo", "hi"), "y", 0, NULL);
  tg_output(t, "y");
}

static void g_conv_1x1_14(tg_t* t) {
  tg_input(t, "x", F32, 4, DIMS(1, 24, 14, 14));
  tg_input(t, "res", F32, 4, DIMS(1, 40, 14, 14));
  tg_const(t, "w", F32, 4, DIMS(40, 24, 1, 1));
  tg_const(t, "b", F32, 1, DIMS(40));
  tg_node(t, "Conv", "conv", 3, NAMES("x", "w", "b"), "c", 0, NULL);
  tg_node(t, "Add", "add", 2, NAMES("c", "res"), "y", 0, NULL);
  tg_output(t, "y");
}

static void g_conv_1x1_odd(tg_t* t) {
  tg_input(t, "x", F32, 4, DIMS(1, 9, 13, 11));
  tg_const(t, "w", F32, 4, DIMS(33, 9, 1, 1));
  tg_node(t, "Conv", "conv", 2, NAMES("x", "w"), "c", 0, NULL);
  tg_node(t, "Relu", "relu", 1, NAMES("c"), "y", 0, NULL);
  tg_output(t, "y");
}

/* A 1x1 conv whose residual Add fuses into its texel stores (Relu -> Conv
 * -> Add of the Relu's output -> Conv, batch 2, 12x12 planes: whole
 * texels): the Add's operand read as texels of its own (conv.comp
 * KC_EPI4, samplerBuffer te0; KILN_SPIRV_EPI_TEXELS=off keeps the buffer
 * reads) */
static void conv_res(tg_t* t, int64_t n, int64_t c, int64_t hw) {
  tg_input(t, "x", F32, 4, DIMS(n, c, hw, hw));
  tg_const(t, "w", F32, 4, DIMS(c, c, 1, 1));
  tg_const(t, "b", F32, 1, DIMS(c));
  tg_const(t, "w2", F32, 4, DIMS(8, c, 1, 1));
  tg_node(t, "Relu", "relu", 1, NAMES("x"), "r", 0, NULL);
  tg_node(t, "Conv", "conv", 3, NAMES("r", "w", "b"), "c", 0, NULL);
  tg_node(t, "Add", "add", 2, NAMES("c", "r"), "s", 0, NULL);
  tg_node(t, "Conv", "conv2", 2, NAMES("s", "w2"), "y", 0, NULL);
  tg_output(t, "y");
}
static void g_conv_1x1_res(tg_t* t) { conv_res(t, 2, 24, 12); }

/* 7x7 planes (49 floats: not whole texels) with K 20 (whole TK steps),
 * batch 2: conv.comp's X shift a constant a K step (XSHIFT_K) */
static void g_conv_1x1_7k(tg_t* t) {
  tg_input(t, "x", F32, 4, DIMS(2, 20, 7, 7));
  tg_const(t, "w", F32, 4, DIMS(12, 20, 1, 1));
  tg_const(t, "b", F32, 1, DIMS(12));
  tg_node(t, "Conv", "conv", 3, NAMES("x", "w", "b"), "y", 0, NULL);
  tg_output(t, "y");
}

/* The same with K 520 on 4x4 planes: past the CPU lowering's K blocks
 * (512), which Vulkan plans do not take, so the Add still fuses */
static void g_conv_1x1_kwhole(tg_t* t) { conv_res(t, 1, 520, 4); }

/* 24 channels on a 24x24 grid (576 positions): one tile of 32 channels,
 * each invocation the 24 below M x 16 positions (the split of 2 x 16
 * channels with KILN_SPIRV_CONV_SPLIT=all, 2 tiles of 16 x 16 with =off) */
static void g_conv_1x1_m24(tg_t* t) {
  tg_input(t, "x", F32, 4, DIMS(1, 20, 24, 24));
  tg_const(t, "w", F32, 4, DIMS(24, 20, 1, 1));
  tg_const(t, "b", F32, 1, DIMS(24));
  tg_node(t, "Conv", "conv", 3, NAMES("x", "w", "b"), "y", 0, NULL);
  tg_output(t, "y");
}

static void g_softmax(tg_t* t) {
  tg_input(t, "x", F32, 2, DIMS(6, 37));
  kiln_attr_t ax = kiln_attr_make_int("axis", -1);
  tg_node(t, "Softmax", "sm", 1, NAMES("x"), "y", 1, &ax);
  tg_output(t, "y");
}

static void g_f16(tg_t* t) {
  tg_input(t, "x", F16, 2, DIMS(5, 33));
  tg_input(t, "y", F16, 2, DIMS(5, 33));
  tg_node(t, "Mul", "mul", 2, NAMES("x", "y"), "m", 0, NULL);
  tg_node(t, "Add", "add", 2, NAMES("m", "x"), "z", 0, NULL);
  tg_output(t, "z");
}

static void test_plans(void) {
  check_graph(g_add_relu, "add+relu+sigmoid", 1e-4, 1e-5);
  check_graph(g_matmul_small, "matmul 13x29x47", 1e-4, 1e-5);
  check_graph(g_matmul_packed, "matmul 70x150x128 packed", 1e-4, 1e-5);
  check_graph(g_matmul_const, "matmul const 20x40x700", 1e-4, 1e-5);
  check_graph(g_gemm_bias, "gemm transB+bias", 1e-4, 1e-5);
  check_graph(g_gemm_trans, "gemm transB", 1e-4, 1e-5);
  check_graph(g_conv, "conv+relu+maxpool", 1e-4, 1e-5);
  check_graph(g_conv_s2, "conv s2 grid tail", 1e-4, 1e-5);
  /* (the rule's F(4x4, 3x3) on the 13- and 18-column planes: its
   * transforms' points +-2 scale the rounding up, 1.5e-5 to 4.4e-5 abs
   * on outputs of a few units seen here; a wrong tile or mask is off by
   * the outputs' scale; the F(2x2) runs below keep 1e-5) */
  check_graph(g_conv_residual, "conv leaky+residual", 1e-4, 1e-4);
  check_graph(g_conv_1x1, "conv 1x1", 1e-4, 1e-5);
  check_graph(g_conv_wino_pads, "winograd uneven pads", 1e-4, 1e-4);
  setenv("KILN_SPIRV_WINOGRAD", "f2", 1); /* F(2x2, 3x3) where the rule takes F(4x4) */
  check_graph(g_conv_residual, "conv leaky+residual, F(2x2)", 1e-4, 1e-5);
  check_graph(g_conv_wino_pads, "winograd uneven pads, F(2x2)", 1e-4, 1e-5);
  unsetenv("KILN_SPIRV_WINOGRAD");
  check_graph(g_pools, "pools", 1e-5, 1e-6);
  check_graph(g_gap, "global average pool", 1e-5, 1e-6);
  setenv("KILN_SPIRV_POOL", "planes", 1); /* the planes on dispatch dim y, not folded into x */
  check_graph(g_pools, "pools, a row of groups a plane", 1e-5, 1e-6);
  check_graph(g_gap, "global average pool, a row a plane", 1e-5, 1e-6);
  unsetenv("KILN_SPIRV_POOL");
  setenv("KILN_SPIRV_WINO_PAD", "copy", 1); /* the phase split's padded copy instead */
  check_graph(g_conv_residual, "conv leaky+residual, padded copy", 1e-4, 1e-4);
  check_graph(g_conv_wino_pads, "winograd uneven pads, padded copy", 1e-4, 1e-4);
  unsetenv("KILN_SPIRV_WINO_PAD");
  check_graph(g_depthwise, "depthwise", 1e-4, 1e-5);
  /* two and four rows of outputs per invocation (depthwise.comp's RH; the
   * default rule takes them on wider planes only): row stride 2, row
   * dilation 2, 7 output rows (a partial last block of rows) */
  setenv("KILN_SPIRV_DW_RH", "2", 1);
  check_graph(g_depthwise, "depthwise 2 rows", 1e-4, 1e-5);
  setenv("KILN_SPIRV_DW_RH", "4", 1);
  check_graph(g_depthwise, "depthwise 4 rows", 1e-4, 1e-5);
  unsetenv("KILN_SPIRV_DW_RH");
  check_graph(g_softmax, "softmax", 1e-4, 1e-5);
  check_graph(g_conv_1x1_7, "conv 1x1 7x7 split", 1e-4, 1e-5);
  check_graph(g_conv_1x1_14, "conv 1x1 14x14 split", 1e-4, 1e-5);
  check_graph(g_conv_1x1_odd, "conv 1x1 13x11 split", 1e-4, 1e-5);
  check_graph(g_conv_1x1_m24, "conv 1x1 24ch 24x24 one tile", 1e-4, 1e-5);
  check_graph(g_conv_1x1_7k, "conv 1x1 7x7 K 20 batch 2", 1e-4, 1e-5);
  check_graph(g_conv_1x1_res, "conv 1x1 residual as texels", 1e-4, 1e-5);
  check_graph(g_conv_1x1_kwhole, "conv 1x1 K 520 residual", 1e-4, 1e-4);
  setenv("KILN_SPIRV_EPI_TEXELS", "off", 1);
  check_graph(g_conv_1x1_res, "conv 1x1 residual as buffer reads", 1e-4, 1e-5);
  unsetenv("KILN_SPIRV_EPI_TEXELS");
  setenv("KILN_SPIRV_CONV_SPLIT", "off", 1); /* the 8 x 1 work-group of 32 x 8 / 16 x 16 */
  check_graph(g_conv_1x1_7, "conv 1x1 7x7 unsplit", 1e-4, 1e-5);
  check_graph(g_conv_1x1_14, "conv 1x1 14x14 unsplit", 1e-4, 1e-5);
  check_graph(g_conv_1x1_m24, "conv 1x1 24ch 24x24 16 x 16", 1e-4, 1e-5);
  setenv("KILN_SPIRV_CONV_SPLIT", "all", 1);
  check_graph(g_conv_1x1_m24, "conv 1x1 24ch 24x24 split", 1e-4, 1e-5);
  unsetenv("KILN_SPIRV_CONV_SPLIT");
  setenv("KILN_SPIRV_CONV_KREUSE", "off", 1); /* one K step at a time (conv.comp KREUSE 0) */
  check_graph(g_conv_1x1_7, "conv 1x1 7x7 split, one K step at a time", 1e-4, 1e-5);
  check_graph(g_conv_1x1_odd, "conv 1x1 13x11 split, one K step at a time", 1e-4, 1e-5);
  check_graph(g_conv_s2, "conv s2 grid tail, one K step at a time", 1e-4, 1e-5);
  unsetenv("KILN_SPIRV_CONV_KREUSE");
  if (dev && dev->info.fp16_storage) check_graph(g_f16, "f16 mul+add", 1e-2, 1e-3);
  if (dev && dev->info.fp16_storage) check_graph(g_conv_f16, "f16 conv", 1e-2, 1e-2);
  if (dev && dev->info.fp16_storage && dev->info.fp16_arith) {
    tg_t t;
    tg_init(&t);
    g_conv_residual(&t);
    run_case(&t, "conv leaky+residual", true, true, 2e-2, 2e-2);
    tg_free(&t);
  }
  check_graph(g_dw_rows28, "depthwise 28x28 4 rows, groups of 32", 1e-4, 1e-5);
  check_graph(g_dw_rows56, "depthwise 56x56 4 rows, groups of 56", 1e-4, 1e-5);
  {
    const build_fn rows[2] = {g_dw_rows28, g_dw_rows56};
    const int64_t wg[2] = {32, 56};
    const char* rw[2] = {"#define RW 8\n", "#define RW 16\n"}; /* 16 on stride-1 rows of 48+ */
    for (int i = 0; i < 2 && dev; ++i) {
      kiln_program_t* prog = graph_program(rows[i], true, false);
      CHECK_MSG(prog && prog->n_kernels == 1 && strstr(prog->code.text, "kiln depthwise '") &&
                    strstr(prog->code.text, "#define RH 4\n#define FLAT 0\n") && strstr(prog->code.text, rw[i]) &&
                    prog->kernels[0].local[0] == wg[i],
                "depthwise rows case %d: not 4 rows in work-groups of %d (got %d)", i, (int)wg[i],
                prog && prog->n_kernels ? (int)prog->kernels[0].local[0] : -1);
      kiln_program_destroy(prog);
    }
  }
  check_graph(g_depthwise_flat7, "depthwise flat 7x7 + residual", 1e-4, 1e-5);
  check_graph(g_depthwise_flat14, "depthwise flat 14x14 dilated, whole rows", 1e-4, 1e-5);
  check_graph(g_depthwise_flat7b, "depthwise flat 7x7 16 outputs", 1e-4, 1e-5);
  /* 8 outputs (1176 of them: not a multiple of 16), 2 whole rows of 14
   * (28: a multiple of 4 dividing the plane), 16 (7x7 rows: 28 outputs do
   * not divide a plane of 49) */
  const build_fn flat[3] = {g_depthwise_flat7, g_depthwise_flat14, g_depthwise_flat7b};
  const char* flat_rw[3] = {"#define RW 8\n", "#define RW 28\n", "#define RW 16\n"};
  for (int i = 0; i < 3 && dev; ++i) {
    kiln_program_t* prog = graph_program(flat[i], true, false);
    CHECK_MSG(prog && prog->n_kernels == 1 && strstr(prog->code.text, "kiln depthwise '") &&
                  strstr(prog->code.text, "#define FLAT 1\n") && strstr(prog->code.text, flat_rw[i]),
              "depthwise case %d: not one FLAT depthwise shader with %s", i, flat_rw[i]);
    kiln_program_destroy(prog);
  }
}

/* The Vulkan program of |build|'s graph (fused when |fuse|), NULL after a
 * failed check. */
/* graph_program's plans' element-wise lanes (kiln_plan_options_t.ew_lanes;
 * the Vulkan target's 4 where a test sets it) */
static int32_t g_plan_lanes;

static kiln_program_t* graph_program(build_fn build, bool fuse, bool fp16) {
  tg_t t;
  tg_init(&t);
  build(&t);
  kiln_program_t* prog = NULL;
  kiln_plan_t* p = NULL;
  kiln_plan_options_t po = {KILN_TARGET_CLASS_GPU, 0, 0, 0, 0, g_plan_lanes};
  kiln_fusion_report_t rep;
  kiln_precision_options_t po16 = {KILN_PRECISION_FP16, true, false, NULL, false, false};
  if (t.ok && CHECK_OK(kiln_graph_prepare(t.g)) && CHECK_OK(kiln_plan_build(t.g, &po, A(), &p)) &&
      (!fuse || CHECK_OK(kiln_plan_fuse(p, &rep, NULL))) && (!fp16 || CHECK_OK(kiln_plan_set_precision(p, &po16, NULL))))
    CHECK_OK(plan_program(p, &prog));
  kiln_plan_destroy(p);
  tg_free(&t);
  return prog;
}

/* Where the tiled GEMM replaces the printed loop nest: the program text
 * says which B layout it reads (or the fused epilogue it applies); alpha
 * keeps the printed kernel. */
static void check_gemm(build_fn build, bool fuse, const char* want_mode) {
  kiln_program_t* prog = graph_program(build, fuse, false);
  if (!prog) return;
  bool tiled = strstr(prog->code.text, "kiln tiled SGEMM") != NULL;
  CHECK_MSG(tiled == (want_mode != NULL), "tiled GEMM %s", tiled ? "used" : "not used");
  if (want_mode) CHECK_MSG(strstr(prog->code.text, want_mode) != NULL, "expected %s", want_mode);
  int n_sg = 0; /* the default tiles: the subgroup mode's 8 x 1 work-group */
  for (int32_t k = 0; k < prog->n_kernels; ++k)
    n_sg += prog->kernels[k].local[0] == 8 && prog->kernels[k].local[1] == 1;
  if (want_mode) CHECK(n_sg >= 1);
  kiln_program_destroy(prog);
}

/* The conv shader replaces GEMM + crop (+ epilogue) of a fused Conv: one
 * kernel after the phase split, each under lavapipe's loop limit. */
static void check_conv_shader(build_fn build, bool fp16, int want_kernels, const char* shader) {
  kiln_program_t* prog = graph_program(build, true, fp16);
  if (!prog) return;
  CHECK_MSG(strstr(prog->code.text, shader) != NULL, "%s shader not used", shader);
  CHECK_MSG(prog->n_kernels == want_kernels, "%d kernels, expected %d", (int)prog->n_kernels, want_kernels);
  CHECK(prog->code.n_blobs == prog->n_kernels);
  for (int32_t k = 0; k < prog->n_kernels; ++k)
    CHECK_MSG(prog->kernels[k].loop_trips < 65535, "kernel %s: %lld loop trips", prog->kernels[k].name,
              (long long)prog->kernels[k].loop_trips);
  kiln_program_destroy(prog);
}

static void check_conv(build_fn build, bool fp16, int want_kernels) {
  check_conv_shader(build, fp16, want_kernels, "kiln conv '");
}

static void test_gemm_substitution(void) {
  check_gemm(g_matmul_small, false, "#define B_MODE 0");
  check_gemm(g_matmul_packed, false, "#define B_MODE 2"); /* pack kernel + tiled */
  check_gemm(g_matmul_packed, true, "#define ACT 3");     /* relu fused into the GEMM: the template's */
  check_gemm(g_matmul_const, false, "#define B_MODE 2");  /* K-blocked constant panels */
  check_gemm(g_gemm_bias, false, "#define HAS_BIAS 1");
  check_conv(g_conv_s2, false, 1); /* conv reading X (no phase split) */
  setenv("KILN_SPIRV_CONV_PAD", "copy", 1);
  check_conv(g_conv_s2, false, 2); /* phase split + conv */
  unsetenv("KILN_SPIRV_CONV_PAD");
  /* 3x3 stride 1 with 12 -> 20 channels: Winograd (kernels/vulkan/winograd.comp),
   * reading X with its padding zeroed (no phase split), or the padded copy */
  check_conv_shader(g_conv_residual, false, 1, "#define CDIRECT 1\n");
  check_conv_shader(g_conv_wino_pads, false, 1, "#define CDIRECT 1\n");
  /* F(4x4, 3x3) where a row of its 4x4 tiles fills an invocation's 4
   * (18 columns: 5 tiles; 13: 4), F(2x2, 3x3) everywhere with
   * KILN_SPIRV_WINOGRAD=f2 (narrower planes: test_vulkan_features) */
  check_conv_shader(g_conv_wino_pads, false, 1, "F(4x4,3x3)");
  check_conv_shader(g_conv_residual, false, 1, "F(4x4,3x3)");
  setenv("KILN_SPIRV_WINOGRAD", "f2", 1);
  check_conv_shader(g_conv_wino_pads, false, 1, "F(2x2,3x3)");
  unsetenv("KILN_SPIRV_WINOGRAD");
  setenv("KILN_SPIRV_WINO_PAD", "copy", 1);
  check_conv_shader(g_conv_residual, false, 2, "#define CDIRECT 0\n");
  unsetenv("KILN_SPIRV_WINO_PAD");
  check_conv(g_conv_1x1, false, 1);
  {
    /* every pool as kernels/vulkan/pool.comp, the 16 -> 8 column one with texel stores */
    kiln_program_t* prog = graph_program(g_pools, true, false);
    int n = 0;
    for (const char* q = prog ? strstr(prog->code.text, "// kiln pool '") : NULL; q; q = strstr(q + 1, "// kiln pool '")) ++n;
    CHECK_MSG(prog && n == 4 && prog->n_kernels == 4, "%d pool shaders", n);
    CHECK(prog && strstr(prog->code.text, "#define TEXEL_Y 1\n") && strstr(prog->code.text, "#define FLAT 1\n"));
    kiln_program_destroy(prog);
    /* in fp16: f16 X read as rgba16f texels, f16 Y stored 4 halves a
     * store where the rows are whole texels */
    prog = graph_program(g_pools_f16, true, true);
    n = 0;
    for (const char* q = prog ? strstr(prog->code.text, "// kiln pool '") : NULL; q; q = strstr(q + 1, "// kiln pool '")) ++n;
    CHECK_MSG(prog && n == 3, "fp16: %d pool shaders", n);
    CHECK_MSG(prog && strstr(prog->code.text, "#define HX 1\n#define HY 1\n"), "fp16 pools: not f16 X and Y");
    const char* ys = getenv("KILN_SPIRV_YSTORE"); /* =image: no f16 texel stores (halves) */
    CHECK_MSG(prog && strstr(prog->code.text, ys && !strcmp(ys, "image")
                                                  ? "#define TEXEL 1\n#define TEXEL_Y 0\n#define FLAT 1\n#define Y_VEC4 0\n"
                                                  : "#define TEXEL 1\n#define TEXEL_Y 1\n#define FLAT 1\n#define Y_VEC4 1\n"),
              "fp16 pools: no f16 texel reads and stores");
    kiln_program_destroy(prog);
    {
      tg_t t;
      tg_init(&t);
      g_pools_f16(&t);
      run_case(&t, "f16 pools", true, true, 1e-2, 1e-2);
      tg_free(&t);
    }
    prog = graph_program(g_gap, true, false);
    CHECK_MSG(prog && strstr(prog->code.text, "// kiln pool '") && prog->n_kernels == 1, "GlobalAveragePool: no pool shader");
    kiln_program_destroy(prog);
  }
  /* f16 buffers after the precision pass: Winograd F(2x2) (F(4x4)'s U
   * loses too much in f16) reading f16 U and X (in place: no phase split)
   * as rgba16f texels; with Winograd off the implicit GEMM */
  check_conv_shader(g_conv_residual, true, 1, "F(2x2,3x3)");
  check_conv_shader(g_conv_residual_f16, true, 2, "F(2x2,3x3)"); /* the Relu, the conv */
  check_text(g_conv_residual_f16, true, "#define TEXEL_X16 1\n", "f16 Winograd X as rgba16f texels");
  check_text(g_conv_residual_f16, true, "#define TEXEL_W16 1\n", "f16 Winograd U as rgba16f texels");
  check_text(g_conv_residual_f16, true, "#define CDIRECT 1\n", "f16 Winograd X read in place");
  check_text(g_conv_residual_f16, true, "rgba16f) uniform restrict readonly imageBuffer te0;",
             "f16 Winograd residual as rgba16f texels");
  for (int v = 0; v < 2; ++v) {
    if (v) setenv("KILN_SPIRV_EPI_TEXELS", "off", 1); /* the residual from a storage buffer */
    if (v) check_text(g_conv_residual_f16, true, "buffer BufE0 { float16_t e0[]; }", "f16 residual buffer");
    const build_fn b[2] = {g_conv_residual, g_conv_residual_f16};
    const char* what[2] = {"f16 winograd, f32 X", "f16 winograd texels"};
    for (int i = 0; i < 2; ++i) {
      tg_t t;
      tg_init(&t);
      b[i](&t);
      run_case(&t, what[i], true, true, 1e-2, 1e-2);
      tg_free(&t);
    }
    unsetenv("KILN_SPIRV_EPI_TEXELS");
  }
  setenv("KILN_SPIRV_WINOGRAD", "off", 1);
  check_conv(g_conv_residual, true, 2);
  {
    /* and its f16 weights and input (the phase split's copy) read as
     * rgba16f texels (conv.comp TEXEL_W16 / TEXEL_X16), as the depthwise
     * conv's f16 weights (depthwise.comp; its X is the graph's f32 input,
     * read as f32 texels), and an f16 1x1 conv's Y stored as f16vec4s
     * (Y16), each matching the reference */
    const build_fn b16[3] = {g_conv_residual, g_depthwise, g_conv_1x1_f16};
    const char* what16[3] = {"f16 conv texels", "f16 depthwise texels", "f16 1x1 conv texels"};
    const char* x16[3] = {"#define TEXEL_X16 1\n", "#define TEXEL 1\n", "#define Y16 1\n#define"};
    for (int i = 0; i < 3; ++i) {
      kiln_program_t* prog = graph_program(b16[i], true, true);
      CHECK_MSG(prog && strstr(prog->code.text, x16[i]), "%s: X not read as texels (%s)", what16[i], x16[i]);
      CHECK_MSG(prog && strstr(prog->code.text, "#define TEXEL_W16 1\n"), "%s: W not read as rgba16f texels", what16[i]);
      kiln_program_destroy(prog);
      tg_t t;
      tg_init(&t);
      b16[i](&t);
      run_case(&t, what16[i], true, true, 2e-2, 2e-2);
      tg_free(&t);
    }
  }
  unsetenv("KILN_SPIRV_WINOGRAD");
  /* in fp16, a stride-2 conv of an f16 activation reads X itself as
   * rgba16f texels (no phase split), as it reads f32 X */
  check_conv_shader(g_conv_s2_f16, true, 2, "#define CDIRECT 1\n"); /* the Relu, the conv */
  check_text(g_conv_s2_f16, true, "#define TEXEL_X16 1\n", "f16 stride-2 conv X as rgba16f texels");
  {
    tg_t t;
    tg_init(&t);
    g_conv_s2_f16(&t);
    run_case(&t, "f16 stride-2 conv in place", true, true, 1e-2, 1e-2);
    tg_free(&t);
  }
  {
    kiln_program_t* prog = graph_program(g_depthwise, true, false);
    CHECK_MSG(prog && strstr(prog->code.text, "kiln depthwise '"), "depthwise shader not used");
    CHECK(prog && prog->n_kernels == 1 && prog->kernels[0].loop_trips < 65535);
    kiln_program_destroy(prog);
  }
  {
    /* the small-grid 1x1 convs: conv.comp with the split work-group, 8
     * invocations in a row (the 7x7 and 13x11 planes read in place by the
     * direct read, the 14x14 one's residual Add a kernel of its own), RN
     * covering the grid: 49 -> 56 (2 position groups x 4 channel groups of
     * 8 x 28, where 4 x 2 of 16 x 16 would compute 64), 196 -> 240, 13x11
     * (143 positions) -> 144; unsplit with KILN_SPIRV_CONV_SPLIT=off. 24 channels of 24x24
     * (576 positions): one tile of 32 channels x 16 positions an
     * invocation by default, the split (-> 576) with =all */
    const build_fn g[4] = {g_conv_1x1_7, g_conv_1x1_14, g_conv_1x1_odd, g_conv_1x1_m24};
    const char* rn[4] = {"#define RN 28\n", "#define RN 20\n", "#define RN 12\n", "#define RN 16\n"};
    const char* rm[4] = {"#define RM 8\n", "#define RM 16\n", "#define RM 16\n", "#define RM 16\n"};
    for (int split = 2; split >= 0; --split) {
      if (split == 2) setenv("KILN_SPIRV_CONV_SPLIT", "all", 1);
      if (!split) setenv("KILN_SPIRV_CONV_SPLIT", "off", 1);
      for (int i = 0; i < 4; ++i) {
        check_conv(g[i], false, i == 1 ? 2 : 1);
        kiln_program_t* prog = graph_program(g[i], true, false);
        const bool has = prog && strstr(prog->code.text, "#define TM 32\n#define TN") &&
                         strstr(prog->code.text, rm[i]) && strstr(prog->code.text, rn[i]);
        const bool want = i == 3 ? split == 2 : split >= 1;
        CHECK_MSG(has == want, "1x1 conv %d: split tiles %s", i, has ? "used" : "not used");
        if (i == 3 && split == 1) /* the one 32-channel tile: 8 invocations x 16 positions */
          CHECK_MSG(prog && strstr(prog->code.text, "#define TM 32\n#define TN 128\n") &&
                        strstr(prog->code.text, "#define RM 32\n#define RN 16\n"),
                    "1x1 conv 24 channels: not one tile of 32 x 16");
        int rows = 0; /* kernels with a work-group of 8 in a row: the conv */
        for (int32_t k = 0; prog && k < prog->n_kernels; ++k)
          rows += prog->kernels[k].local[0] == 8 && prog->kernels[k].local[1] == 1;
        CHECK_MSG(rows == 1, "1x1 conv %d: %d kernels with 8 x 1 work-groups", i, rows);
        kiln_program_destroy(prog);
      }
      unsetenv("KILN_SPIRV_CONV_SPLIT");
    }
  }
  {
    /* the residual Add fused into the 1x1 conv (the Relu and the second
     * conv kernels of their own), its operand read as texels by default,
     * through the storage buffer with KILN_SPIRV_EPI_TEXELS=off; with K
     * 520 the Add fuses as well on plans with lanes (Vulkan plans take K
     * whole) */
    for (int off = 0; off <= 1; ++off) {
      if (off) setenv("KILN_SPIRV_EPI_TEXELS", "off", 1);
      check_conv(g_conv_1x1_res, false, 3);
      kiln_program_t* prog = graph_program(g_conv_1x1_res, true, false);
      const bool tex = prog && strstr(prog->code.text, "uniform samplerBuffer te0;\n") &&
                       strstr(prog->code.text, "#define KC_EPI4(v, b, m, q, e) { v = v + texelFetch(te0, ((b) * 3456 + "
                                               "(m) * 144 + (q)) >> 2)[e]; }");
      CHECK_MSG(tex == !off, "residual operand %s texels", tex ? "read as" : "not read as");
      kiln_program_destroy(prog);
      unsetenv("KILN_SPIRV_EPI_TEXELS");
    }
    /* K blocks (plans without lanes: the Add a kernel of its own) and K
     * whole (the Vulkan target's lanes: fused) */
    check_conv(g_conv_1x1_kwhole, false, 4);
    g_plan_lanes = 4;
    check_conv(g_conv_1x1_kwhole, false, 3);
    g_plan_lanes = 0;
  }
  {
    /* 1x1 convs: 4 K steps a loop trip, each sum taking their products in
     * a row (conv.comp KREUSE; K 19 and 9 end in a partial step, its
     * products zeroed); KILN_SPIRV_CONV_KREUSE=off: one K step at a time */
    const build_fn g[2] = {g_conv_1x1_7, g_conv_1x1_odd};
    for (int off = 0; off <= 1; ++off) {
      if (off) setenv("KILN_SPIRV_CONV_KREUSE", "off", 1);
      for (int i = 0; i < 2; ++i) {
        kiln_program_t* prog = graph_program(g[i], true, false);
        CHECK_MSG(prog && strstr(prog->code.text, "kiln conv '") && strstr(prog->code.text, "#define TK 4\n") &&
                      strstr(prog->code.text, off ? "#define KREUSE 0\n" : "#define KREUSE 1\n"),
                  "1x1 conv %d: not TK 4 with KREUSE %d", i, !off);
        kiln_program_destroy(prog);
      }
      unsetenv("KILN_SPIRV_CONV_KREUSE");
    }
  }
  check_gemm(g_gemm_trans, false, "#define B_MODE 2"); /* run-time transB is packed first */
  check_gemm(g_gemm_bias_big, false, NULL);             /* alpha: the printed loop nest */
}

/* conv.comp reading X itself (CDIRECT; kiln_template_conv_direct): the
 * padding zeroed and the strides taken in its reads, no phase split */
/* a 3-channel stem: stride 2, uneven pads, odd sizes, 2 images, a bias,
 * Relu fused */
static void g_cd_stem(tg_t* t) {
  tg_input(t, "x", F32, 4, DIMS(2, 3, 17, 19));
  conv_s2_relu_nodes(t, 32, 3, (const int64_t[]){1, 0, 2, 1});
}

/* ResNet's 7x7 stride-2 stem shape, smaller: 49 taps of 3 channels,
 * stride 2 down and 1 across, no bias, LeakyRelu */
static void g_cd_7x7(tg_t* t) {
  tg_input(t, "x", F32, 4, DIMS(1, 3, 23, 21));
  tg_const(t, "w", F32, 4, DIMS(16, 3, 7, 7));
  kiln_attr_t ca[2] = {kiln_attr_make_ints("pads", 4, DIMS(3, 3, 3, 2)),
                       kiln_attr_make_ints("strides", 2, DIMS(2, 1))};
  tg_node(t, "Conv", "conv", 2, NAMES("x", "w"), "c", 2, ca);
  kiln_attr_t al = kiln_attr_make_float("alpha", 0.1f);
  tg_node(t, "LeakyRelu", "lrelu", 1, NAMES("c"), "y", 1, &al);
  tg_output(t, "y");
}

/* a 1x1 stride-2 downsample (13x13 -> 7x7) with a residual Add, 2 images */
static void g_cd_1x1s2(tg_t* t) {
  tg_input(t, "x", F32, 4, DIMS(2, 16, 13, 13));
  tg_input(t, "res", F32, 4, DIMS(2, 24, 7, 7));
  tg_const(t, "w", F32, 4, DIMS(24, 16, 1, 1));
  tg_const(t, "b", F32, 1, DIMS(24));
  kiln_attr_t st = kiln_attr_make_ints("strides", 2, DIMS(2, 2));
  tg_node(t, "Conv", "conv", 3, NAMES("x", "w", "b"), "c", 1, &st);
  tg_node(t, "Add", "add", 2, NAMES("c", "res"), "y", 0, NULL);
  tg_output(t, "y");
}

/* a 1x1 stride-1 conv on a 7x7 plane (the copy gave the grid its slack),
 * read flat; and a dilated 3x3 (no Winograd) with uneven pads, stride 2
 * across */
static void g_cd_slack(tg_t* t) {
  tg_input(t, "x", F32, 4, DIMS(1, 40, 7, 7));
  tg_const(t, "w", F32, 4, DIMS(48, 40, 1, 1));
  tg_const(t, "b", F32, 1, DIMS(48));
  tg_node(t, "Conv", "conv", 3, NAMES("x", "w", "b"), "y", 0, NULL);
  tg_output(t, "y");
}

static void g_cd_dil(tg_t* t) {
  tg_input(t, "x", F32, 4, DIMS(1, 8, 12, 11));
  tg_const(t, "w", F32, 4, DIMS(12, 8, 3, 3));
  kiln_attr_t ca[3] = {kiln_attr_make_ints("pads", 4, DIMS(2, 1, 2, 3)),
                       kiln_attr_make_ints("dilations", 2, DIMS(2, 2)), kiln_attr_make_ints("strides", 2, DIMS(1, 2))};
  tg_node(t, "Conv", "conv", 2, NAMES("x", "w"), "y", 3, ca);
  tg_output(t, "y");
}

static void g_cd_wide(tg_t* t) {
  tg_input(t, "x", F32, 4, DIMS(1, 128, 9, 10));
  tg_const(t, "w", F32, 4, DIMS(16, 128, 3, 3));
  tg_const(t, "b", F32, 1, DIMS(16));
  kiln_attr_t ca[2] = {kiln_attr_make_ints("pads", 4, DIMS(1, 1, 1, 1)),
                       kiln_attr_make_ints("strides", 2, DIMS(2, 2))};
  tg_node(t, "Conv", "conv", 3, NAMES("x", "w", "b"), "c", 2, ca);
  tg_node(t, "Relu", "relu", 1, NAMES("c"), "y", 0, NULL);
  tg_output(t, "y");
}

/* |build| unfused and fused against the reference (no tiled-GEMM
 * variant: the conv shader is not a GEMM) */
static void check_conv_graph(build_fn build, const char* what) {
  for (int v = 0; v < 2; ++v) {
    tg_t t;
    tg_init(&t);
    build(&t);
    run_case(&t, what, v == 1, false, 1e-4, 1e-5);
    tg_free(&t);
  }
}

static void test_conv_direct(void) {
  static const struct {
    build_fn build;
    const char* what;
    const char* direct; /* the CDIRECT the instance prints */
  } cases[] = {{g_cd_stem, "direct stem 3x3 s2", "#define CDIRECT 1\n"},
               {g_cd_7x7, "direct 7x7 s2x1", "#define CDIRECT 1\n"},
               {g_cd_1x1s2, "direct 1x1 s2 + residual", "#define CDIRECT 1\n"},
               {g_cd_slack, "direct 1x1 7x7 flat", "#define CDIRECT 0\n"},
               {g_cd_dil, "direct 3x3 dilated s1x2", "#define CDIRECT 1\n"}};
  for (size_t i = 0; i < sizeof cases / sizeof cases[0]; ++i) {
    /* one kernel: no phase split (the conv shader's own CDIRECT) */
    check_conv_shader(cases[i].build, false, 1, cases[i].direct);
    check_conv_graph(cases[i].build, cases[i].what);
    setenv("KILN_SPIRV_CONV_PAD", "copy", 1); /* the phase split's copy */
    check_conv_shader(cases[i].build, false, 2, "kiln conv '");
    char what[96];
    snprintf(what, sizeof what, "%s, copy", cases[i].what);
    tg_t t;
    tg_init(&t);
    cases[i].build(&t);
    run_case(&t, what, true, false, 1e-4, 1e-5);
    tg_free(&t);
    unsetenv("KILN_SPIRV_CONV_PAD");
  }
  /* the other tile modes' reads (the default is mode 4, vec4 texels):
   * subgroup broadcasts (2), shared memory (1), plain loads (0) */
  static const char* modes[] = {"16,32,2,16,4,2", "16,16,4,4,4,1", "8,8,1,2,2,0"};
  for (int m = 0; m < 3; ++m) {
    setenv("KILN_SPIRV_CONV_TILES", modes[m], 1);
    for (size_t i = 0; i < 3; ++i) {
      char what[96];
      snprintf(what, sizeof what, "%s, mode %d", cases[i].what, 2 - m);
      tg_t t;
      tg_init(&t);
      cases[i].build(&t);
      run_case(&t, what, true, false, 1e-4, 1e-5);
      tg_free(&t);
    }
    unsetenv("KILN_SPIRV_CONV_TILES");
  }
  /* a channel's 9 taps a K step (TK == CT: constant shifts), the default
   * from 128 channels, and in mode 2 (the stem, by the override) */
  check_conv_shader(g_cd_wide, false, 1, "#define TK 9\n");
  check_conv_graph(g_cd_wide, "direct 3x3 s2 128 channels");
  setenv("KILN_SPIRV_CONV_TILES", "16,32,9,16,4,2", 1);
  check_conv_shader(g_cd_stem, false, 1, "#define TK 9\n");
  check_conv_graph(g_cd_stem, "direct stem, 9 taps a step");
  unsetenv("KILN_SPIRV_CONV_TILES");
}

static void rm_tree(const char* dir) {
  DIR* d = opendir(dir);
  if (!d) return;
  struct dirent* e;
  char path[600];
  while ((e = readdir(d))) {
    if (!strcmp(e->d_name, ".") || !strcmp(e->d_name, "..")) continue;
    snprintf(path, sizeof path, "%s/%s", dir, e->d_name);
    struct stat st;
    if (lstat(path, &st) == 0 && S_ISDIR(st.st_mode)) rm_tree(path);
    else unlink(path);
  }
  closedir(d);
  rmdir(dir);
}

/* The most loop iterations one invocation of |build|'s fused Vulkan
 * program runs, lowered for a device with |limit| (0: none) for one thread
 * (without a limit: one invocation does it all). */
static int64_t max_trips(build_fn build, int64_t limit) {
  tg_t t;
  tg_init(&t);
  build(&t);
  kiln_program_t* prog = NULL;
  kiln_plan_t* p = NULL;
  kiln_plan_options_t po = {KILN_TARGET_CLASS_GPU, 1, limit, 0, 0, 0};
  int64_t most = -1;
  if (t.ok && CHECK_OK(kiln_graph_prepare(t.g)) && CHECK_OK(kiln_plan_build(t.g, &po, A(), &p)) &&
      CHECK_OK(kiln_plan_fuse(p, NULL, NULL)) && CHECK_OK(plan_program(p, &prog)))
    for (int32_t k = 0; k < prog->n_kernels; ++k)
      if (prog->kernels[k].loop_trips > most) most = prog->kernels[k].loop_trips;
  kiln_program_destroy(prog);
  kiln_plan_destroy(p);
  tg_free(&t);
  return most;
}

/* A device loop limit splits the work instead of refusing the kernel: the
 * same graph lowered without a limit needs more iterations per invocation
 * than lavapipe allows (the refusal test_build_failures checks), with
 * lavapipe's limit every kernel fits and the results match the reference
 * (run_case compiles for this device's limit). */
static void test_loop_limit(void) {
  const build_fn big[2] = {g_gemm_bias_big, g_conv_silu};
  const char* what[2] = {"gemm alpha+bias 64x256x1024", "conv s2 3x3 64ch g2 96x96 + silu"};
  for (int i = 0; i < 2; ++i) {
    const int64_t chunked = max_trips(big[i], 0), split = max_trips(big[i], 65535);
    printf("  %-28s loop iterations per invocation: %lld chunked, %lld split\n", what[i], (long long)chunked,
           (long long)split);
    CHECK_MSG(chunked > 65535, "%s: %lld loop iterations unsplit: no longer a case that needs the split",
              what[i], (long long)chunked);
    CHECK_MSG(split >= 0 && split <= 65535, "%s: %lld loop iterations with the limit", what[i], (long long)split);
    tg_t t;
    tg_init(&t);
    big[i](&t);
    run_case(&t, what[i], true, false, 1e-4, 1e-4);
    tg_free(&t);
  }
}

/* The two convs of the F(4x4) sharing graphs below: 20x20, 8 -> 12
 * channels into c1 (vec4 stores: 20 columns are not whole pairs) and
 * 32x32, 16 -> 8 into c2 (pairs), with biases, 3x3 pads 1, rows of whole
 * texels; with |res1| / |res2| the residual inputs r1 / r2 of c1's / c2's
 * shape */
static void wino_convs(tg_t* t, bool res1, bool res2) {
  tg_input(t, "x1", F32, 4, DIMS(1, 8, 20, 20));
  if (res1) tg_input(t, "r1", F32, 4, DIMS(1, 12, 20, 20));
  tg_input(t, "x2", F32, 4, DIMS(1, 16, 32, 32));
  if (res2) tg_input(t, "r2", F32, 4, DIMS(1, 8, 32, 32));
  tg_const(t, "w1", F32, 4, DIMS(12, 8, 3, 3));
  tg_const(t, "b1", F32, 1, DIMS(12));
  tg_const(t, "w2", F32, 4, DIMS(8, 16, 3, 3));
  tg_const(t, "b2", F32, 1, DIMS(8));
  kiln_attr_t pads = kiln_attr_make_ints("pads", 4, DIMS(1, 1, 1, 1));
  tg_node(t, "Conv", "conv1", 3, NAMES("x1", "w1", "b1"), "c1", 1, &pads);
  pads = kiln_attr_make_ints("pads", 4, DIMS(1, 1, 1, 1));
  tg_node(t, "Conv", "conv2", 3, NAMES("x2", "w2", "b2"), "c2", 1, &pads);
}

/* F(4x4) Winograd instances read their sizes at run time (winograd.comp
 * CRT, from the weights' first words): the two convs of one kind (bias, a
 * residual Add + Relu) */
static void g_wino_two(tg_t* t) {
  wino_convs(t, true, true);
  tg_node(t, "Add", "add1", 2, NAMES("c1", "r1"), "s1", 0, NULL);
  tg_node(t, "Add", "add2", 2, NAMES("c2", "r2"), "s2", 0, NULL);
  tg_node(t, "Relu", "relu1", 1, NAMES("s1"), "y1", 0, NULL);
  tg_node(t, "Relu", "relu2", 1, NAMES("s2"), "y2", 0, NULL);
  tg_output(t, "y1");
  tg_output(t, "y2");
}

/* Two F(4x4) convs of g_wino_two's sizes, one with a fused Relu, one with
 * no epilogue: the Relu is chosen at run time (winograd.comp EPI_RT, the
 * weights' word 8), so they are one kind too */
static void g_wino_relu_none(tg_t* t) {
  wino_convs(t, false, false);
  tg_node(t, "Relu", "relu1", 1, NAMES("c1"), "y1", 0, NULL);
  tg_output(t, "y1");
  tg_output(t, "c2");
}

/* Two F(4x4) convs of g_wino_two's sizes, one with a residual Add + Relu,
 * one with a Relu alone: the Add is chosen at run time (winograd.comp
 * EPI_RT 2, the weights' word 9) and the Relu conv binds a placeholder
 * where the residual would be (lowering's winograd_epi_slot), so they
 * are one kind too */
static void g_wino_relu_residual(tg_t* t) {
  wino_convs(t, true, false);
  tg_node(t, "Add", "add1", 2, NAMES("c1", "r1"), "s1", 0, NULL);
  tg_node(t, "Relu", "relu1", 1, NAMES("s1"), "y1", 0, NULL);
  tg_node(t, "Relu", "relu2", 1, NAMES("c2"), "y2", 0, NULL);
  tg_output(t, "y1");
  tg_output(t, "y2");
}

/* The SPIR-V of |build|'s two convs (fused when |fuse|): whether the two
 * are one binary, and the pipelines the device builds for the program
 * against its distinct binaries (identical ones share a pipeline); the
 * program's text holds |has| and not |lacks| (NULL: no check). */
static void check_wino_shared_of(build_fn build, bool fuse, bool shared, const char* has, const char* lacks) {
  tg_t t;
  tg_init(&t);
  build(&t);
  kiln_plan_t* p = NULL;
  kiln_program_t* prog = NULL;
  kiln_device_executable_t* e = NULL;
  kiln_plan_options_t po = {KILN_TARGET_CLASS_GPU, 0, dev->info.loop_limit, 0, 0, 0};
  kiln_fusion_report_t rep;
  if (t.ok && CHECK_OK(kiln_graph_prepare(t.g)) && CHECK_OK(kiln_plan_build(t.g, &po, A(), &p)) &&
      (!fuse || CHECK_OK(kiln_plan_fuse(p, &rep, NULL))) && CHECK_OK(plan_program(p, &prog))) {
    int conv[2] = {-1, -1}, nc = 0, distinct = 0;
    for (int32_t k = 0; k < prog->n_kernels; ++k) {
      if (!strcmp(prog->kernels[k].op_type, "Conv") && nc < 2) conv[nc++] = k;
      bool seen = false;
      for (int32_t j = 0; j < k && !seen; ++j)
        seen = prog->code.blob_lens[j] == prog->code.blob_lens[k] && prog->kernels[j].n_args == prog->kernels[k].n_args &&
               !memcmp(prog->code.blobs[j], prog->code.blobs[k], (size_t)prog->code.blob_lens[k]);
      distinct += !seen;
    }
    CHECK_MSG(nc == 2, "%d conv kernels, expected 2", nc);
    CHECK_MSG(prog->code.text && strstr(prog->code.text, "F(4x4,3x3)"), "the convs are not F(4x4) Winograd");
    CHECK_MSG(!has || (prog->code.text && strstr(prog->code.text, has)), "the shaders lack '%s'", has);
    CHECK_MSG(!lacks || !prog->code.text || !strstr(prog->code.text, lacks), "the shaders hold '%s'", lacks);
    if (nc == 2) {
      const bool same = prog->code.blob_lens[conv[0]] == prog->code.blob_lens[conv[1]] &&
                        !memcmp(prog->code.blobs[conv[0]], prog->code.blobs[conv[1]], (size_t)prog->code.blob_lens[conv[0]]);
      CHECK_MSG(same == shared, "%s: the two F(4x4) convs' SPIR-V is %s", fuse ? "fused" : "unfused",
                same ? "one binary" : "two binaries");
    }
    kiln_device_build_options_t bo = {.cache_dir = ""};
    if (CHECK_OK(dev->vt->executable_create(dev, prog, &bo, &e))) {
      kiln_vulkan_cache_stats_t st;
      kiln_vulkan_last_cache_stats(dev, &st);
      CHECK_MSG(st.pipelines == distinct && distinct == prog->n_kernels - (shared ? 1 : 0),
                "%d pipelines for %d kernels, %d distinct binaries", (int)st.pipelines, (int)prog->n_kernels,
                distinct);
      printf("  winograd two sizes %-8s %d kernels, %d pipelines\n", fuse ? "fused" : "unfused", (int)prog->n_kernels,
             (int)st.pipelines);
    }
  }
  dev->vt->executable_destroy(dev, e);
  kiln_program_destroy(prog);
  kiln_plan_destroy(p);
  tg_free(&t);
}

static void check_wino_shared(bool fuse, bool shared) {
  check_wino_shared_of(g_wino_two, fuse, shared, NULL, NULL);
}

static void test_wino_shared(void) {
  if (!dev) return;
  check_wino_shared(false, true);
  /* fused: the residual read as vec4 texels (lavapipe compiles a
   * storage-buffer load per stored value slowly) */
  check_wino_shared_of(g_wino_two, true, true, "uniform samplerBuffer te0", "BufE0");
  check_graph(g_wino_two, "winograd F(4x4) two sizes", 1e-4, 1e-4);
  setenv("KILN_SPIRV_EPI_TEXELS", "off", 1); /* the residual from a storage buffer */
  check_wino_shared_of(g_wino_two, true, true, "BufE0", "samplerBuffer te0");
  check_graph(g_wino_two, "winograd F(4x4) two sizes, residual buffer", 1e-4, 1e-4);
  unsetenv("KILN_SPIRV_EPI_TEXELS");
  /* run-time sizes store vec4s; KILN_SPIRV_YSTORE=pairs: pairs where the
   * run-time width allows (the 32-wide conv), vec4s elsewhere (Y_VEC4 3) */
  check_wino_shared_of(g_wino_two, true, true, "#define Y_VEC4 1\n", "#define Y_VEC4 3\n");
  setenv("KILN_SPIRV_YSTORE", "pairs", 1);
  check_wino_shared_of(g_wino_two, true, true, "#define Y_VEC4 3\n", NULL);
  check_graph(g_wino_two, "winograd F(4x4) two sizes, pairs", 1e-4, 1e-4);
  unsetenv("KILN_SPIRV_YSTORE");
  /* a Relu and no epilogue: one binary with the Relu chosen at run time,
   * two with KILN_SPIRV_WINO_EPI=const */
  check_wino_shared_of(g_wino_relu_none, true, true, "CRELU ? max(v, 0.0) : v", NULL);
  check_graph(g_wino_relu_none, "winograd F(4x4) Relu and none", 1e-4, 1e-4);
  setenv("KILN_SPIRV_WINO_EPI", "const", 1);
  check_wino_shared_of(g_wino_relu_none, true, false, NULL, "#define EPI_RT 1");
  check_graph(g_wino_relu_none, "winograd F(4x4) Relu and none, const", 1e-4, 1e-4);
  unsetenv("KILN_SPIRV_WINO_EPI");
  /* a residual Add + Relu and a Relu: one binary with the Add chosen at
   * run time, two with KILN_SPIRV_WINO_EPI=relu (no placeholder) */
  check_wino_shared_of(g_wino_relu_residual, true, true, "#define EPI_RT 2\n", "#define EPI_RT 1\n");
  check_graph(g_wino_relu_residual, "winograd F(4x4) residual and Relu", 1e-4, 1e-4);
  setenv("KILN_SPIRV_WINO_EPI", "relu", 1);
  check_wino_shared_of(g_wino_relu_residual, true, false, "#define EPI_RT 1\n", "#define EPI_RT 2\n");
  check_graph(g_wino_relu_residual, "winograd F(4x4) residual and Relu, relu only", 1e-4, 1e-4);
  unsetenv("KILN_SPIRV_WINO_EPI");
  setenv("KILN_SPIRV_WINO_SIZES", "const", 1); /* the sizes as constants: a binary per conv */
  check_wino_shared(true, false);
  check_graph(g_wino_two, "winograd F(4x4) two sizes, const", 1e-4, 1e-4);
  unsetenv("KILN_SPIRV_WINO_SIZES");
}

/* Winograd on small planes (issue 23): 2 images, a conv of 8 -> 8
 * channels with a Relu, then one of 8 -> 12 with a bias, a residual Add
 * and a Relu, 3x3 pads 1, hw x hw planes. F(4x4)'s 2x2 tiles of a 5x5..8x8
 * plane take an invocation's 4 tiles as 2 tile rows of 2 (winograd.comp
 * NTY 2, kiln_vulkan_wino_tile_rows), where one row of 4 left half of
 * them past the plane. */
static void g_wino_small(tg_t* t, int64_t hw) {
  tg_input(t, "x", F32, 4, DIMS(2, 8, hw, hw));
  tg_input(t, "res", F32, 4, DIMS(2, 12, hw, hw));
  tg_const(t, "w1", F32, 4, DIMS(8, 8, 3, 3));
  tg_const(t, "w2", F32, 4, DIMS(12, 8, 3, 3));
  tg_const(t, "b2", F32, 1, DIMS(12));
  kiln_attr_t pads = kiln_attr_make_ints("pads", 4, DIMS(1, 1, 1, 1));
  tg_node(t, "Conv", "conv1", 2, NAMES("x", "w1"), "c1", 1, &pads);
  tg_node(t, "Relu", "relu1", 1, NAMES("c1"), "r1", 0, NULL);
  pads = kiln_attr_make_ints("pads", 4, DIMS(1, 1, 1, 1));
  tg_node(t, "Conv", "conv2", 3, NAMES("r1", "w2", "b2"), "c2", 1, &pads);
  tg_node(t, "Add", "add", 2, NAMES("c2", "res"), "s", 0, NULL);
  tg_node(t, "Relu", "relu2", 1, NAMES("s"), "y", 0, NULL);
  tg_output(t, "y");
}
static void g_wino_small5(tg_t* t) { g_wino_small(t, 5); }
static void g_wino_small7(tg_t* t) { g_wino_small(t, 7); }
static void g_wino_small9(tg_t* t) { g_wino_small(t, 9); }
static void g_wino_small13(tg_t* t) { g_wino_small(t, 13); }

/* |build|'s two convs print as Winograd instances of |kind| with |nty2|
 * of them taking 2 tile rows an invocation, and match the reference
 * fused (with |all|: unfused and without the tiled GEMM too; atol 1e-4 as
 * for F(4x4) above: lavapipe's compile of each F(4x4) shader takes
 * seconds) */
static void check_wino_rows(build_fn build, const char* what, const char* kind, int nty2, bool all) {
  kiln_program_t* prog = graph_program(build, true, false);
  if (prog) {
    const char* s = prog->code.text ? prog->code.text : "";
    const int nw = kiln_test_count(s, "// kiln winograd '"), nk = kiln_test_count(s, kind);
    const int nr = kiln_test_count(s, "#define NTY 2\n");
    CHECK_MSG(nw == 2 && nk == 2, "%s: %d Winograd instances, %d of %s, expected 2", what, nw, nk, kind);
    CHECK_MSG(nr == nty2, "%s: %d instances of 2 tile rows, expected %d", what, nr, nty2);
    printf("  %-28s %s, %d of 2 tile rows\n", what, kind, nr);
  }
  kiln_program_destroy(prog);
  if (all) {
    check_graph(build, what, 1e-4, 1e-4);
  } else {
    tg_t t;
    tg_init(&t);
    build(&t);
    run_case(&t, what, true, false, 1e-4, 1e-4);
    tg_free(&t);
  }
}

static void test_wino_rows(void) {
  if (!dev) return;
  unsetenv("KILN_SPIRV_WINOGRAD");
  unsetenv("KILN_SPIRV_WINO_ROWS");
  /* the default: F(4x4) only where a row of its tiles fills an
   * invocation (13x13: the row form, as before); 7x7, 5x5 and 9x9 keep
   * F(2x2) (its 4x4 / 3x3 / 5x5 tiles in the row form: F(4x4)'s weights
   * cost 2.25x for ~1.1x on lavapipe) */
  check_wino_rows(g_wino_small7, "winograd 7x7", "F(2x2,3x3)", 0, false);
  check_wino_rows(g_wino_small5, "winograd 5x5", "F(2x2,3x3)", 0, false);
  check_wino_rows(g_wino_small13, "winograd 13x13", "F(4x4,3x3)", 0, false);
  check_wino_rows(g_wino_small9, "winograd 9x9", "F(2x2,3x3)", 0, false);
  /* F(4x4) where asked (a tuning record, or here the variable): 2 tile
   * rows of 2 on 7x7 and 5x5 (2x2 tiles) */
  setenv("KILN_SPIRV_WINOGRAD", "f4", 1);
  check_wino_rows(g_wino_small7, "winograd 7x7, F(4x4)", "F(4x4,3x3)", 2, true);
  check_wino_rows(g_wino_small5, "winograd 5x5, F(4x4)", "F(4x4,3x3)", 2, false);
  /* 2 tile rows wherever asked: F(4x4) past the plane's last row and
   * column of tiles (9x9: 3x3 tiles in 2x2 groups), a whole 4x4 (13x13),
   * and F(2x2) (9x9: 5x5 tiles) */
  setenv("KILN_SPIRV_WINO_ROWS", "2", 1);
  setenv("KILN_SPIRV_WINOGRAD", "f4", 1);
  check_wino_rows(g_wino_small9, "winograd 9x9, F(4x4) 2 rows", "F(4x4,3x3)", 2, false);
  check_wino_rows(g_wino_small13, "winograd 13x13, 2 rows", "F(4x4,3x3)", 2, false);
  setenv("KILN_SPIRV_WINOGRAD", "f2", 1);
  check_wino_rows(g_wino_small9, "winograd 9x9, F(2x2) 2 rows", "F(2x2,3x3)", 2, true);
  /* 4 channels x 8 tiles an invocation as 2 rows of 4 (13x13's 4 tiles a
   * row) */
  setenv("KILN_SPIRV_WINOGRAD", "f4", 1);
  unsetenv("KILN_SPIRV_WINO_ROWS");
  setenv("KILN_SPIRV_WINO_TILES", "4,8", 1);
  check_wino_rows(g_wino_small13, "winograd 13x13, 8 tiles", "F(4x4,3x3)", 2, false);
  unsetenv("KILN_SPIRV_WINO_TILES");
  /* the row form on 7x7 where asked (KILN_SPIRV_WINO_ROWS=1: F(4x4)'s 2
   * tiles a row, as before) */
  setenv("KILN_SPIRV_WINO_ROWS", "1", 1);
  check_wino_rows(g_wino_small7, "winograd 7x7, one row", "F(4x4,3x3)", 0, false);
  unsetenv("KILN_SPIRV_WINO_ROWS");
  unsetenv("KILN_SPIRV_WINOGRAD");
}

/* "conv_direct": only the conv.comp direct-read cases (their own ctest);
 * "wino_shared": only test_wino_shared; "wino_rows":
 * only test_wino_rows */
/* A GEMM with 128 x 128 tiles under the GPU rules (144 work-groups of
 * them), its edges partial: 2000 x 40 by 40 x 1030 */
static void g_matmul_big(tg_t* t) {
  tg_input(t, "a", F32, 2, DIMS(2000, 40));
  tg_input(t, "b", F32, 2, DIMS(40, 1030));
  tg_node(t, "MatMul", "mm", 2, NAMES("a", "b"), "y", 0, NULL);
  tg_output(t, "y");
}

/* The shared-memory mode's vec4 reads and double buffer (gemm.comp /
 * conv.comp SHARED 1 A4 B4 W4 X4 DB): edges in M and N, K not a multiple
 * of TK (100 over 16), B transposed (vec4 along K) with a bias, a fused
 * residual and Relu. */
static void g_sh_ktail(tg_t* t) {
  tg_input(t, "a", F32, 2, DIMS(80, 100));
  tg_input(t, "b", F32, 2, DIMS(100, 132));
  tg_node(t, "MatMul", "mm", 2, NAMES("a", "b"), "y", 0, NULL);
  tg_node(t, "Relu", "relu", 1, NAMES("y"), "r", 0, NULL);
  tg_output(t, "r");
}

static void g_sh_transb(tg_t* t) {
  tg_input(t, "a", F32, 2, DIMS(50, 68));
  tg_input(t, "w", F32, 2, DIMS(92, 68));
  tg_const(t, "c", F32, 1, DIMS(92));
  kiln_attr_t tb = kiln_attr_make_int("transB", 1);
  tg_node(t, "Gemm", "fc", 3, NAMES("a", "w", "c"), "y", 1, &tb);
  tg_output(t, "y");
}

static void g_sh_residual(tg_t* t) {
  tg_input(t, "a", F32, 2, DIMS(96, 44));
  tg_const(t, "b", F32, 2, DIMS(44, 72));
  tg_input(t, "r", F32, 2, DIMS(96, 72));
  tg_node(t, "MatMul", "mm", 2, NAMES("a", "b"), "y", 0, NULL);
  tg_node(t, "Add", "add", 2, NAMES("y", "r"), "s", 0, NULL);
  tg_node(t, "Relu", "relu", 1, NAMES("s"), "z", 0, NULL);
  tg_output(t, "z");
}

/* |build|'s program (fused) holds |want| in its GLSL */
static void check_text(build_fn build, bool fp16, const char* want, const char* what) {
  kiln_program_t* prog = graph_program(build, true, fp16);
  CHECK_MSG(prog && strstr(prog->code.text, want), "%s: no \"%s\" in the program", what, want);
  kiln_program_destroy(prog);
}

static void test_gpu_rules_shared(void) {
  check_graph(g_sh_ktail, "shared 80x132x100 K tail", 1e-4, 1e-5);
  check_graph(g_sh_transb, "shared transB 50x92x68 bias", 1e-4, 1e-5);
  check_graph(g_sh_residual, "shared residual 96x72x44", 1e-4, 1e-5);
  check_text(g_sh_ktail, false, "#define A4 1\n#define B4 1\n#define DB 1\n#define C4 1\n", "K tail");
  check_text(g_sh_residual, false, "#define C4 1\n", "residual");
  check_text(g_sh_transb, false, "#define A4 1\n#define B4 1\n#define DB 1\n", "transB");
  check_text(g_conv_1x1, false, "#define W4 1\n#define X4 1\n#define DB 1\n", "conv 1x1");
  check_text(g_conv, false, "#define SHARED 1\n", "conv 3x3");
  if (dev->info.fp16_storage) { /* f16 storage: f16vec4 reads, f32 sums */
    /* (the precision pass keeps graph inputs f32: the constants are f16) */
    const build_fn b16[4] = {g_sh_ktail, g_sh_transb, g_sh_residual, g_conv_1x1};
    const char* what[4] = {"shared K tail f16", "shared transB f16", "shared residual f16", "conv 1x1 f16"};
    const char* want[4] = {"#define A4 1\n#define B4 1\n", NULL, NULL,
                           "#define W4 1\n#define X4 1\n#define DB 1\n#define TW4 f16vec4\n"};
    for (int i = 0; i < 4; ++i) {
      tg_t t;
      tg_init(&t);
      b16[i](&t);
      g_want_text = want[i];
      run_case(&t, what[i], true, true, 2e-2, 2e-2);
      g_want_text = NULL;
      tg_free(&t);
    }

  }
  /* one shared buffer where two would pass 16 KiB (128 x 128 x 16: 32 KiB),
   * and scalar reads where the shapes are not whole vec4s */
  setenv("KILN_SPIRV_GEMM_TILES", "128,128,16,8,8,1", 1);
  check_graph(g_matmul_big, "matmul 2000x1030x40 TK 16", 1e-4, 1e-5);
  check_text(g_matmul_big, false, "#define A4 1\n#define B4 0\n#define DB 0\n", "TK 16");
  unsetenv("KILN_SPIRV_GEMM_TILES");
  check_text(g_matmul_small, false, "#define A4 0\n#define B4 0\n#define DB 1\n#define C4 0\n", "13x29x47");
}

/* The GPU rules on this device: KILN_VULKAN_RULES sets the class either
 * way (lavapipe is CPU-backed: none without it); then GEMMs of odd and
 * even sizes (one with 128 x 128 tiles), direct, strided, 1x1, residual
 * and stem convs, Winograd on small and larger planes, depthwise (row and
 * flat forms), pools and a Softmax with it, each against the reference,
 * and every template kind met (check_gpu_rules checks each plan). */
static void test_gpu_rules(void) {
  if (!dev) return;
  const char* old = getenv("KILN_VULKAN_RULES");
  char keep[16] = "";
  if (old) snprintf(keep, sizeof keep, "%s", old);
  unsetenv("KILN_VULKAN_RULES");
  CHECK(((kiln_compile_gpu_lacks(&dev->info) & KILN_GPU_CLASS_GPU) != 0) == !dev->info.cpu_backed);
  CHECK(!(kiln_compile_gpu_lacks(NULL) & KILN_GPU_CLASS_GPU));
  setenv("KILN_VULKAN_RULES", "cpu", 1);
  CHECK(!(kiln_compile_gpu_lacks(&dev->info) & KILN_GPU_CLASS_GPU));
  setenv("KILN_VULKAN_RULES", "gpu", 1);
  g_rules = kiln_compile_gpu_lacks(&dev->info);
  kiln_compile_device_limits(&dev->info, &g_limits);
  CHECK(g_rules & KILN_GPU_CLASS_GPU);
  CHECK(kiln_compile_gpu_lacks(NULL) & KILN_GPU_CLASS_GPU);
  check_graph(g_add_relu, "add+relu+sigmoid", 1e-4, 1e-5);
  check_graph(g_matmul_small, "matmul 13x29x47", 1e-4, 1e-5);
  check_graph(g_matmul_packed, "matmul 70x150x128 packed", 1e-4, 1e-5);
  check_graph(g_matmul_const, "matmul const 20x40x700", 1e-4, 1e-5);
  check_graph(g_gemm_bias, "gemm transB+bias", 1e-4, 1e-5);
  check_graph(g_gemm_trans, "gemm transB", 1e-4, 1e-5);
  check_graph(g_gemm_bias_big, "gemm 64x256x1024 bias", 1e-4, 1e-5);
  check_graph(g_matmul_big, "matmul 2000x1030x40", 1e-4, 1e-5);
  check_graph(g_conv, "conv+relu+maxpool", 1e-4, 1e-5);
  check_graph(g_conv_s2, "conv s2 grid tail", 1e-4, 1e-5);
  check_graph(g_conv_residual, "conv leaky+residual", 1e-4, 1e-4);
  check_graph(g_conv_1x1, "conv 1x1", 1e-4, 1e-5);
  check_graph(g_conv_1x1_7k, "conv 1x1 7x7 K 20 batch 2", 1e-4, 1e-5);
  check_graph(g_conv_1x1_odd, "conv 1x1 13x11", 1e-4, 1e-5);
  check_graph(g_conv_1x1_kwhole, "conv 1x1 K 520 residual", 1e-4, 1e-4);
  check_graph(g_conv_silu, "conv silu", 1e-4, 1e-5);
  check_graph(g_conv_silu_dense, "conv silu (template)", 1e-4, 1e-5);
  check_graph(g_cd_stem, "direct stem 3x3 s2", 1e-4, 1e-5);
  check_graph(g_cd_7x7, "direct 7x7 s2x1", 1e-4, 1e-5);
  check_graph(g_cd_1x1s2, "direct 1x1 s2 + residual", 1e-4, 1e-5);
  check_graph(g_conv_wino_pads, "winograd uneven pads", 1e-4, 1e-4);
  check_graph(g_wino_small5, "winograd 5x5", 1e-4, 1e-4);
  check_graph(g_wino_small13, "winograd 13x13", 1e-4, 1e-4);
  setenv("KILN_SPIRV_WINOGRAD", "f4", 1); /* F(4x4) weights: the GPU rule keeps wf 4, 4 x 4 tiles */
  check_graph(g_wino_small13, "winograd 13x13 F(4x4)", 1e-4, 1e-4);
  unsetenv("KILN_SPIRV_WINOGRAD");
  check_graph(g_pools, "pools", 1e-5, 1e-6);
  check_graph(g_gap, "global average pool", 1e-5, 1e-6);
  check_graph(g_depthwise, "depthwise", 1e-4, 1e-5);
  check_graph(g_dw_rows28, "depthwise 28x28", 1e-4, 1e-5);
  check_graph(g_dw_rows56, "depthwise 56x56", 1e-4, 1e-5);
  check_graph(g_depthwise_flat7, "depthwise flat 7x7 + residual", 1e-4, 1e-5);
  check_graph(g_depthwise_flat14, "depthwise flat 14x14 dilated", 1e-4, 1e-5);
  check_graph(g_softmax, "softmax", 1e-4, 1e-5);
  if (dev->info.fp16_storage) check_graph(g_conv_f16, "f16 conv", 1e-2, 1e-2);
  test_gpu_rules_shared();
  /* the 128 x 128 tiles and the work-group of 64 as printed */
  kiln_program_t* prog = graph_program(g_matmul_big, false, false);
  CHECK_MSG(prog && strstr(prog->code.text, "#define TM 128\n#define TN 128\n#define TK 8\n") &&
                strstr(prog->code.text, "#define SHARED 1\n"),
            "matmul 2000x1030x40: not the 128 x 128 shared-memory tiles");
  kiln_program_destroy(prog);
  /* a device of fewer than 256 invocations a work-group (Vulkan's minimum
   * is 128): the 64 x 64 tiles of 64 invocations instead */
  CHECK(g_limits.max_workgroup_size == dev->info.max_workgroup_size && g_limits.max_workgroup_size >= 256);
  g_limits.max_workgroup_size = 128;
  check_graph(g_matmul_big, "matmul 2000x1030x40 wg < 256", 1e-4, 1e-5);
  prog = graph_program(g_matmul_big, false, false);
  CHECK_MSG(prog && strstr(prog->code.text, "#define TM 64\n#define TN 64\n#define TK 16\n"),
            "matmul 2000x1030x40, 128 invocations at most: not the 64 x 64 tiles");
  kiln_program_destroy(prog);
  g_limits.max_workgroup_size = dev->info.max_workgroup_size;
  prog = graph_program(g_pools, false, false);
  CHECK_MSG(prog && strstr(prog->code.text, "kiln pool '") && strstr(prog->code.text, "#define WG 64\n"),
            "pools: not 64 invocations a work-group");
  kiln_program_destroy(prog);
  const uint32_t want = (1u << KILN_TEMPLATE_GEMM) | (1u << KILN_TEMPLATE_CONV) | (1u << KILN_TEMPLATE_WINOGRAD) |
                        (1u << KILN_TEMPLATE_DEPTHWISE) | (1u << KILN_TEMPLATE_POOL) | (1u << KILN_TEMPLATE_ROWS);
  CHECK_MSG((g_rules_kinds & want) == want, "template kinds met %#x, want %#x", (unsigned)g_rules_kinds, (unsigned)want);
  g_rules = 0;
  kiln_test_setenv("KILN_VULKAN_RULES", old ? keep : NULL);
}

int main(int argc, char** argv) {
  snprintf(tmp_dir, sizeof tmp_dir, "/tmp/kiln_vk_test_%ld", (long)getpid());
  mkdir(tmp_dir, 0755);
  long before = atomic_load(&live_allocs);
  dev = open_dev(CA());
  if (argc > 1 && !strcmp(argv[1], "conv_direct")) {
    RUN(test_conv_direct);
  } else if (argc > 1 && !strcmp(argv[1], "wino_shared")) {
    RUN(test_wino_shared);
  } else if (argc > 1 && !strcmp(argv[1], "wino_rows")) {
    RUN(test_wino_rows);
  } else if (argc > 1 && !strcmp(argv[1], "gpu_rules")) {
    RUN(test_gpu_rules);
  } else {
    RUN(test_list_and_create);
    RUN(test_buffers_and_views);
    RUN(test_too_large);
    RUN(test_dispatch_barrier_timestamps);
    RUN(test_pipeline_cache);
    RUN(test_pipeline_reuse);
    RUN(test_shared_device);
    RUN(test_build_failures);
    RUN(test_gemm_substitution);
    RUN(test_plans);
    RUN(test_loop_limit);
  }
  if (dev) {
    CHECK(kiln_vulkan_validation_messages(dev) == 0);
    dev->vt->destroy(dev);
  }
  /* Everything, including messages while devices were destroyed. */
  CHECK_MSG(kiln_vulkan_validation_messages(NULL) == 0, "%d validation messages",
            (int)kiln_vulkan_validation_messages(NULL));
  CHECK_MSG(atomic_load(&live_allocs) == before, "host allocations leaked: %ld",
            atomic_load(&live_allocs) - before);
  rm_tree(tmp_dir);
  return kiln_test_finish();
}
