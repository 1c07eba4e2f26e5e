/* OpenCL runtime device on device 0 (PoCL in CI): listing, creation,
 * buffers and views, dispatch of hand-made programs, timestamps, the
 * program-binary cache, units reused across builds (reuse_code), build and
 * allocation failures. */
#include <inttypes.h>
#include <stdint.h>
#include <sys/stat.h>
#include <unistd.h>

#include "kiln/runtime.h"
#include "runtime/opencl/opencl_device.h"
#include "runtime/opencl/opencl_util.h"
#include "testing.h"
#include "graph_harness.h"

static kiln_allocator_t A(void) { return kiln_allocator_system(); }

static char* dupstr(kiln_program_t* p, const char* s) {
  char* o = NULL;
  kiln_status_t st = kiln_program_strdup(p, s, &o);
  KILN_ASSERT(!st);
  return o;
}

/* A program of |nk| kernels over |nbuf| f32 buffers of |len| elements;
 * kernel k takes buffers args[k][0..nargs[k]-1], launched groups x local. */
typedef struct kspec_s {
  const char* name;
  int32_t n_args;
  int32_t args[4];
  int64_t groups, local;
} kspec_t;

static kiln_program_t* mkprog(const char* src, int32_t nbuf, int64_t len, int32_t nk,
                              const kspec_t* ks) {
  kiln_program_t* p = NULL;
  KILN_ASSERT(!kiln_program_create(A(), &p));
  p->model_name = dupstr(p, "handmade.onnx");
  p->target = "opencl";
  KILN_ASSERT(!kiln_allocator_malloc(A(), sizeof(kiln_program_buffer_t) * (size_t)nbuf, "t",
                                     (void**)&p->buffers));
  p->n_buffers = nbuf;
  for (int32_t i = 0; i < nbuf; ++i) {
    kiln_program_buffer_t* b = &p->buffers[i];
    b->name = dupstr(p, "buf");
    b->dtype = KILN_DTYPE_F32;
    b->kind = KILN_PB_INTERMEDIATE;
    b->rank = 1;
    b->shape[0] = len;
    b->bytes = (uint64_t)len * 4;
    b->alias_of = -1;
  }
  KILN_ASSERT(!kiln_allocator_malloc(A(), sizeof(kiln_program_kernel_t) * (size_t)nk, "t",
                                     (void**)&p->kernels));
  p->n_kernels = nk;
  for (int32_t k = 0; k < nk; ++k) {
    kiln_program_kernel_t* pk = &p->kernels[k];
    pk->name = dupstr(p, ks[k].name);
    pk->node_name = dupstr(p, ks[k].name);
    pk->op_type = dupstr(p, "Test");
    pk->n_args = ks[k].n_args;
    KILN_ASSERT(!kiln_allocator_malloc(A(), sizeof(int32_t) * 4, "t", (void**)&pk->args));
    KILN_ASSERT(!kiln_allocator_malloc(A(), 4, "t", (void**)&pk->access));
    for (int32_t a = 0; a < ks[k].n_args; ++a) {
      pk->args[a] = ks[k].args[a];
      pk->access[a] = KILN_ARG_READ | KILN_ARG_WRITE;
    }
    pk->groups[0] = ks[k].groups;
    pk->local[0] = ks[k].local;
    pk->groups[1] = pk->groups[2] = pk->local[1] = pk->local[2] = 1;
    pk->inplace_in = pk->inplace_out = -1;
  }
  size_t n = strlen(src);
  KILN_ASSERT(!kiln_allocator_malloc(A(), n + 1, "t", (void**)&p->code.text));
  memcpy(p->code.text, src, n + 1);
  p->code.text_len = n;
  return p;
}


static char tmp_root[256];

static void test_list_and_create(void) {
  char* text = NULL;
  size_t len = 0;
  FILE* f = open_memstream(&text, &len);
  CHECK_OK(kiln_opencl_list_devices(f));
  fclose(f);
  CHECK(text && strstr(text, "opencl:0") && strstr(text, "fp16 ") && strstr(text, "compute units") &&
        strstr(text, "alignment"));
  if (text) printf("  %s", text);
  free(text);
  CHECK(kiln_opencl_device_count() >= 1);
  kiln_device_t* d = NULL;
  CHECK_ERR(kiln_opencl_device_create(999, A(), &d), KILN_NOT_FOUND, "device 999 not found");
  d = open_opencl_device_0();
  CHECK(d != NULL);
  if (!d) return;
  CHECK(kiln_opencl_is_device(d));
  CHECK(!strcmp(d->info.api, "opencl"));
  CHECK(d->info.max_alloc_bytes > 0 && d->info.buffer_alignment >= 4 &&
        (d->info.buffer_alignment & (d->info.buffer_alignment - 1)) == 0);
  CHECK(d->info.compute_units >= 1 && d->info.max_workgroup_size >= 1);
  kiln_device_release(d);
  /* and again in the same process (recreating after a loss) */
  d = open_opencl_device_0();
  CHECK(d != NULL);
  kiln_device_release(d);
}

static void test_buffers_and_views(void) {
  kiln_device_t* d = open_opencl_device_0();
  if (!d) return;
  const kiln_device_vtable_t* vt = d->vt;
  const uint64_t al = d->info.buffer_alignment;
  const uint64_t n = 4 * al;
  kiln_device_buffer_t *b = NULL, *v = NULL, *vv = NULL, *e = NULL;
  CHECK_OK(vt->buffer_create(d, n, "test buffer", &b));
  uint8_t* host = malloc(n);
  uint8_t* back = malloc(n);
  memset(back, 0xff, n);
  CHECK_OK(vt->buffer_read(d, b, 0, back, n));
  bool zero = true;
  for (uint64_t i = 0; i < n; ++i) zero = zero && back[i] == 0;
  CHECK_MSG(zero, "new buffers are zeroed");
  for (uint64_t i = 0; i < n; ++i) host[i] = (uint8_t)(i * 7 + 3);
  CHECK_OK(vt->buffer_write(d, b, 0, host, n));
  CHECK_OK(vt->buffer_read(d, b, 0, back, n));
  CHECK(memcmp(host, back, n) == 0);
  /* a view at the alignment, writes through it land in the parent */
  CHECK_OK(vt->view_create(d, b, al, 2 * al, &v));
  uint8_t pat[16];
  memset(pat, 0xab, sizeof pat);
  CHECK_OK(vt->buffer_write(d, v, 4, pat, sizeof pat));
  CHECK_OK(vt->buffer_read(d, b, 0, back, n));
  CHECK(back[al + 4] == 0xab && back[al + 19] == 0xab && back[al + 3] == host[al + 3] &&
        back[al + 20] == host[al + 20]);
  /* a view of a view is re-based on the root */
  CHECK_OK(vt->view_create(d, v, al, al, &vv));
  uint8_t x[4] = {1, 2, 3, 4}, y[4] = {0};
  CHECK_OK(vt->buffer_write(d, vv, 0, x, 4));
  CHECK_OK(vt->buffer_read(d, b, 2 * al, y, 4));
  CHECK(memcmp(x, y, 4) == 0);
  /* empty views are fine */
  CHECK_OK(vt->view_create(d, b, 0, 0, &e));
  /* misaligned, out of range, reads past the end */
  kiln_device_buffer_t* bad = NULL;
  if (al > 1) CHECK_ERR(vt->view_create(d, b, al / 2, 16, &bad), KILN_INVALID_ARGUMENT, "alignment");
  CHECK_ERR(vt->view_create(d, b, al, n, &bad), KILN_OUT_OF_RANGE, "outside");
  CHECK_ERR(vt->buffer_read(d, v, al, back, 2 * al), KILN_OUT_OF_RANGE, "outside");
  CHECK(bad == NULL);
  vt->buffer_destroy(d, e);
  vt->buffer_destroy(d, vv);
  vt->buffer_destroy(d, v);
  vt->buffer_destroy(d, b);
  vt->buffer_destroy(d, NULL);
  free(host);
  free(back);
  kiln_device_release(d);
}

static const char add_src[] =
    "__kernel void add1(__global const float* a, __global float* b) {\n"
    "  int i = get_global_id(0); b[i] = a[i] + 1.0f;\n"
    "}\n"
    "__kernel __attribute__((reqd_work_group_size(64, 1, 1))) void scale2(__global float* b) {\n"
    "  int i = get_global_id(0); b[i] = b[i] * 2.0f;\n"
    "}\n";

static void test_dispatch_and_timestamps(void) {
  kiln_device_t* d = open_opencl_device_0();
  if (!d) return;
  const kiln_device_vtable_t* vt = d->vt;
  const int64_t n = 256;
  kspec_t ks[2] = {{"add1", 2, {0, 1}, 4, 64}, {"scale2", 1, {1}, 4, 64}};
  kiln_program_t* p = mkprog(add_src, 2, n, 2, ks);
  kiln_device_build_options_t bo = {.cache_dir = ""};
  kiln_device_executable_t* e = NULL;
  CHECK_OK(vt->executable_create(d, p, &bo, &e));
  kiln_device_buffer_t *a = NULL, *b = NULL;
  CHECK_OK(vt->buffer_create(d, (uint64_t)n * 4, "a", &a));
  CHECK_OK(vt->buffer_create(d, (uint64_t)n * 4, "b", &b));
  float in[256], out[256];
  for (int i = 0; i < n; ++i) in[i] = (float)i;
  CHECK_OK(vt->buffer_write(d, a, 0, in, sizeof in));
  kiln_device_cmd_t* c = NULL;
  if (e) {
    CHECK_OK(vt->cmd_create(d, e, 3, &c));
    kiln_device_buffer_t* args0[2] = {a, b};
    kiln_device_buffer_t* args1[1] = {b};
    CHECK_OK(vt->cmd_timestamp(d, c, 0));
    CHECK_OK(vt->cmd_dispatch(d, c, 0, args0, 2));
    CHECK_OK(vt->cmd_barrier(d, c));
    CHECK_OK(vt->cmd_timestamp(d, c, 1));
    CHECK_OK(vt->cmd_dispatch(d, c, 1, args1, 1));
    CHECK_OK(vt->cmd_timestamp(d, c, 2));
    CHECK_ERR(vt->cmd_timestamp(d, c, 3), KILN_OUT_OF_RANGE, "slot 3");
    CHECK_ERR(vt->cmd_dispatch(d, c, 1, args0, 2), KILN_INVALID_ARGUMENT, "takes 1");
    CHECK_ERR(vt->cmd_dispatch(d, c, 7, args0, 2), KILN_OUT_OF_RANGE, "kernel 7");
    CHECK_OK(vt->cmd_end(d, c));
    for (int rep = 0; rep < 3; ++rep) {
      CHECK_OK(vt->submit(d, c));
      CHECK_OK(vt->wait(d, c));
      uint64_t ts[3] = {0};
      CHECK_OK(vt->timestamps_read(d, c, ts, 3));
      CHECK_MSG(ts[0] > 0 && ts[1] >= ts[0] && ts[2] >= ts[1], "timestamps %" PRIu64 " %" PRIu64 " %" PRIu64,
                ts[0], ts[1], ts[2]);
    }
    CHECK_OK(vt->wait(d, c)); /* idle: fine */
    CHECK_OK(vt->buffer_read(d, b, 0, out, sizeof out));
    bool ok = true;
    for (int i = 0; i < n; ++i) ok = ok && out[i] == 2.0f * ((float)i + 1.0f);
    CHECK_MSG(ok, "add1 + scale2 results (out[5] = %g)", out[5]);
    /* arguments can be views */
    kiln_device_buffer_t* v = NULL;
    CHECK_OK(vt->view_create(d, b, 0, (uint64_t)n * 4, &v));
    kiln_device_cmd_t* c2 = NULL;
    CHECK_OK(vt->cmd_create(d, e, 0, &c2));
    kiln_device_buffer_t* args2[1] = {v};
    CHECK_OK(vt->cmd_dispatch(d, c2, 1, args2, 1));
    CHECK_ERR(vt->submit(d, c2), KILN_INVALID_ARGUMENT, "not ended");
    CHECK_OK(vt->cmd_end(d, c2));
    CHECK_OK(vt->submit(d, c2));
    CHECK_OK(vt->wait(d, c2));
    CHECK_OK(vt->buffer_read(d, b, 0, out, sizeof out));
    CHECK(out[3] == 16.0f);
    vt->cmd_destroy(d, c2);
    vt->buffer_destroy(d, v);
  }
  vt->cmd_destroy(d, c);
  vt->executable_destroy(d, e);
  vt->buffer_destroy(d, a);
  vt->buffer_destroy(d, b);
  kiln_program_destroy(p);
  kiln_device_release(d);
}

static int count_entries(const char* dir) {
  char cmd[512];
  snprintf(cmd, sizeof cmd, "ls %s/*.clbin 2>/dev/null | wc -l", dir);
  FILE* f = popen(cmd, "r");
  int n = 0;
  if (f) {
    if (fscanf(f, "%d", &n) != 1) n = 0;
    pclose(f);
  }
  return n;
}

static void test_binary_cache(void) {
  kiln_device_t* d = open_opencl_device_0();
  if (!d) return;
  const kiln_device_vtable_t* vt = d->vt;
  char dir[400];
  snprintf(dir, sizeof dir, "%s/cache", tmp_root);
  kspec_t ks[2] = {{"add1", 2, {0, 1}, 4, 64}, {"scale2", 1, {1}, 4, 64}};
  kiln_program_t* p = mkprog(add_src, 2, 256, 2, ks);
  kiln_device_build_options_t bo = {.cache_dir = dir};
  kiln_opencl_build_stats_t s1, s2, s3, s4;
  kiln_device_executable_t* e = NULL;
  CHECK_OK(vt->executable_create(d, p, &bo, &e));
  kiln_opencl_executable_stats(e, &s1);
  vt->executable_destroy(d, e);
  e = NULL;
  CHECK(!s1.cache_hit && s1.cache_path[0] && access(s1.cache_path, F_OK) == 0);
  CHECK(count_entries(dir) == 1);
  CHECK_OK(vt->executable_create(d, p, &bo, &e));
  kiln_opencl_executable_stats(e, &s2);
  vt->executable_destroy(d, e);
  e = NULL;
  CHECK(s2.cache_hit && !strcmp(s1.cache_path, s2.cache_path));
  printf("  build %.1f ms, cached %.1f ms\n", s1.build_s * 1e3, s2.build_s * 1e3);
  /* corrupt entries (garbage, then a flipped payload byte) are ignored */
  for (int round = 0; round < 2; ++round) {
    if (round == 0) {
      FILE* f = fopen(s1.cache_path, "wb");
      CHECK(f != NULL);
      if (f) {
        fputs("definitely not a program binary", f);
        fclose(f);
      }
    } else {
      FILE* f = fopen(s1.cache_path, "r+b");
      CHECK(f != NULL);
      if (f) {
        fseek(f, 40, SEEK_SET);
        int ch = fgetc(f);
        fseek(f, 40, SEEK_SET);
        fputc(ch ^ 0x5a, f);
        fclose(f);
      }
    }
    CHECK_OK(vt->executable_create(d, p, &bo, &e));
    kiln_opencl_executable_stats(e, &s3);
    CHECK(!s3.cache_hit && s3.cache_rejected);
    /* and it still runs */
    if (e) {
      kiln_device_buffer_t *a = NULL, *b = NULL;
      CHECK_OK(vt->buffer_create(d, 1024, "a", &a));
      CHECK_OK(vt->buffer_create(d, 1024, "b", &b));
      kiln_device_cmd_t* c = NULL;
      CHECK_OK(vt->cmd_create(d, e, 0, &c));
      kiln_device_buffer_t* args[2] = {a, b};
      CHECK_OK(vt->cmd_dispatch(d, c, 0, args, 2));
      CHECK_OK(vt->cmd_end(d, c));
      CHECK_OK(vt->submit(d, c));
      CHECK_OK(vt->wait(d, c));
      float out[4] = {0};
      CHECK_OK(vt->buffer_read(d, b, 0, out, sizeof out));
      CHECK(out[0] == 1.0f && out[3] == 1.0f);
      vt->cmd_destroy(d, c);
      vt->buffer_destroy(d, a);
      vt->buffer_destroy(d, b);
    }
    vt->executable_destroy(d, e);
    e = NULL;
  }
  /* the rebuilt entry is good again */
  CHECK_OK(vt->executable_create(d, p, &bo, &e));
  kiln_opencl_executable_stats(e, &s4);
  CHECK(s4.cache_hit);
  vt->executable_destroy(d, e);
  e = NULL;
  /* a different source is a different key; "" turns the cache off */
  kiln_program_t* p2 = mkprog(
      "__kernel void add1(__global const float* a, __global float* b) { b[get_global_id(0)] = a[0]; }\n"
      "__kernel void scale2(__global float* b) { }\n",
      2, 256, 2, ks);
  CHECK_OK(vt->executable_create(d, p2, &bo, &e));
  kiln_opencl_executable_stats(e, &s3);
  CHECK(!s3.cache_hit && strcmp(s3.cache_path, s1.cache_path) != 0);
  vt->executable_destroy(d, e);
  e = NULL;
  CHECK(count_entries(dir) == 2);
  bo.cache_dir = "";
  CHECK_OK(vt->executable_create(d, p2, &bo, &e));
  kiln_opencl_executable_stats(e, &s3);
  CHECK(!s3.cache_hit && s3.cache_path[0] == 0);
  vt->executable_destroy(d, e);
  kiln_program_destroy(p2);
  kiln_program_destroy(p);
  kiln_device_release(d);
}

/* |p|'s text as prelude, units and an empty epilogue (the OpenCL target's
 * parts): |cuts| the offsets where units start, in order. */
static void set_parts(kiln_program_t* p, int32_t n_units, const size_t* cuts) {
  KILN_ASSERT(!kiln_allocator_malloc(A(), sizeof(uint64_t) * 2 * (size_t)(n_units + 2), "t", (void**)&p->code.parts));
  p->code.n_parts = n_units + 2;
  p->code.parts[0] = 0;
  p->code.parts[1] = cuts[0];
  for (int32_t u = 0; u < n_units; ++u) {
    const size_t end = u + 1 < n_units ? cuts[u + 1] : (size_t)p->code.text_len;
    p->code.parts[2 * (u + 1)] = cuts[u];
    p->code.parts[2 * (u + 1) + 1] = end - cuts[u];
  }
  p->code.parts[2 * (n_units + 1)] = p->code.text_len;
  p->code.parts[2 * (n_units + 1) + 1] = 0;
}

/* Runs kernels 0 and 1 of |e| (a -> b, then b in place) on 4 floats of a =
 * 0 and returns b[0]. */
static float run_two(kiln_device_t* d, kiln_device_executable_t* e) {
  const kiln_device_vtable_t* vt = d->vt;
  kiln_device_buffer_t *a = NULL, *b = NULL;
  kiln_device_cmd_t* c = NULL;
  float zero[64] = {0}, out[4] = {-1, -1, -1, -1};
  CHECK_OK(vt->buffer_create(d, sizeof zero, "a", &a));
  CHECK_OK(vt->buffer_create(d, sizeof zero, "b", &b));
  if (a && b) {
    CHECK_OK(vt->buffer_write(d, a, 0, zero, sizeof zero));
    CHECK_OK(vt->cmd_create(d, e, 0, &c));
    kiln_device_buffer_t* args[2] = {a, b};
    CHECK_OK(vt->cmd_dispatch(d, c, 0, args, 2));
    CHECK_OK(vt->cmd_barrier(d, c));
    CHECK_OK(vt->cmd_dispatch(d, c, 1, &args[1], 1));
    CHECK_OK(vt->cmd_end(d, c));
    CHECK_OK(vt->submit(d, c));
    CHECK_OK(vt->wait(d, c));
    CHECK_OK(vt->buffer_read(d, b, 0, out, sizeof out));
  }
  vt->cmd_destroy(d, c);
  vt->buffer_destroy(d, a);
  vt->buffer_destroy(d, b);
  return out[0];
}

/* reuse_code (kiln tune's default and closing builds): a second build
 * whose text differs in one unit compiles that unit alone and takes the
 * other from the first build's program; the kernels run their own code. */
static void test_reuse_units(void) {
  kiln_device_t* d = open_opencl_device_0();
  if (!d) return;
  const kiln_device_vtable_t* vt = d->vt;
  static const char prelude[] = "#define KILN_ONE 1.0f\n";
  static const char add[] =
      "__kernel void add1(__global const float* a, __global float* b) { int i = get_global_id(0); b[i] = a[i] + "
      "KILN_ONE; }\n";
  static const char scale2[] = "__kernel void scale(__global float* b) { b[get_global_id(0)] *= 2.0f; }\n";
  static const char scale3[] = "__kernel void scale(__global float* b) { b[get_global_id(0)] *= 3.0f; }\n";
  kspec_t ks[2] = {{"add1", 2, {0, 1}, 1, 4}, {"scale", 1, {1}, 1, 4}};
  char src[1024];
  kiln_program_t* p[3];
  const char* second[3] = {scale2, scale3, scale3};
  for (int i = 0; i < 3; ++i) {
    snprintf(src, sizeof src, "%s%s%s", prelude, add, second[i]);
    p[i] = mkprog(src, 2, 16, 2, ks);
    const size_t cuts[2] = {strlen(prelude), strlen(prelude) + strlen(add)};
    if (i < 2) set_parts(p[i], 2, cuts);
    else set_parts(p[i], 1, cuts); /* one unit holds both kernels */
  }
  kiln_device_build_options_t bo = {.cache_dir = "", .reuse_code = true};
  kiln_device_executable_t *e0 = NULL, *e1 = NULL, *e2 = NULL;
  kiln_opencl_build_stats_t s0, s1, s2;
  CHECK_OK(vt->executable_create(d, p[0], &bo, &e0));
  kiln_opencl_executable_stats(e0, &s0);
  CHECK(s0.units == 2 && s0.units_reused == 0);
  if (e0) CHECK(run_two(d, e0) == 2.0f);
  vt->executable_destroy(d, e0); /* the memo keeps its program */
  CHECK_OK(vt->executable_create(d, p[1], &bo, &e1));
  kiln_opencl_executable_stats(e1, &s1);
  CHECK(s1.units == 2 && s1.units_reused == 1); /* add1 from the first build, scale compiled */
  if (e1) CHECK(run_two(d, e1) == 3.0f);
  /* the same text again: nothing compiled */
  CHECK_OK(vt->executable_create(d, p[1], &bo, &e2));
  kiln_opencl_executable_stats(e2, &s2);
  CHECK(s2.units == 2 && s2.units_reused == 2);
  if (e2) CHECK(run_two(d, e2) == 3.0f);
  vt->executable_destroy(d, e2);
  /* a unit that holds both kernels' names is a unit of its own (another
   * text): compiled, never matched by name */
  CHECK_OK(vt->executable_create(d, p[2], &bo, &e2));
  kiln_opencl_executable_stats(e2, &s2);
  CHECK(s2.units == 1 && s2.units_reused == 0);
  if (e2) CHECK(run_two(d, e2) == 3.0f);
  vt->executable_destroy(d, e2);
  /* a kernel named in two units: built whole, as without reuse_code */
  snprintf(src, sizeof src, "%s%s/* add1 */\n%s", prelude, add, scale2);
  kiln_program_t* q = mkprog(src, 2, 16, 2, ks);
  const size_t cuts[2] = {strlen(prelude), strlen(prelude) + strlen(add)};
  set_parts(q, 2, cuts);
  CHECK_OK(vt->executable_create(d, q, &bo, &e2));
  kiln_opencl_executable_stats(e2, &s2);
  CHECK(s2.units == 0 && s2.units_reused == 0);
  if (e2) CHECK(run_two(d, e2) == 2.0f);
  vt->executable_destroy(d, e2);
  /* without reuse_code nothing is shared */
  bo.reuse_code = false;
  CHECK_OK(vt->executable_create(d, p[1], &bo, &e2));
  kiln_opencl_executable_stats(e2, &s2);
  CHECK(s2.units == 0 && s2.units_reused == 0);
  if (e2) CHECK(run_two(d, e2) == 3.0f);
  vt->executable_destroy(d, e2);
  vt->executable_destroy(d, e1);
  /* a second device of the same name (kiln tune builds the kernels alone
   * on one) shares the first's context and units: a build there compiles
   * nothing the first built, runs on its own queue, and what it compiles
   * serves the first; the units outlive the first device */
  bo.reuse_code = true;
  kiln_device_t* d2 = open_opencl_device_0();
  CHECK(d2 != NULL && d2 != d);
  if (d2) {
    CHECK_OK(vt->executable_create(d2, p[1], &bo, &e2));
    kiln_opencl_executable_stats(e2, &s2);
    CHECK_MSG(s2.units == 2 && s2.units_reused == 2, "second device: %d of %d units reused", (int)s2.units_reused,
              (int)s2.units);
    if (e2) CHECK(run_two(d2, e2) == 3.0f);
    vt->executable_destroy(d2, e2);
    static const char scale5[] = "__kernel void scale(__global float* b) { b[get_global_id(0)] *= 5.0f; }\n";
    snprintf(src, sizeof src, "%s%s%s", prelude, add, scale5);
    kiln_program_t* r = mkprog(src, 2, 16, 2, ks);
    set_parts(r, 2, cuts);
    CHECK_OK(vt->executable_create(d2, r, &bo, &e2)); /* scale5 compiled on the second device */
    kiln_opencl_executable_stats(e2, &s2);
    CHECK(s2.units == 2 && s2.units_reused == 1);
    vt->executable_destroy(d2, e2);
    CHECK_OK(vt->executable_create(d, r, &bo, &e2)); /* ... and taken by the first */
    kiln_opencl_executable_stats(e2, &s2);
    CHECK(s2.units == 2 && s2.units_reused == 2);
    if (e2) CHECK(run_two(d, e2) == 5.0f);
    vt->executable_destroy(d, e2);
    kiln_device_release(d);
    d = NULL;
    CHECK_OK(vt->executable_create(d2, p[0], &bo, &e2));
    kiln_opencl_executable_stats(e2, &s2);
    CHECK(s2.units == 2 && s2.units_reused == 2);
    if (e2) CHECK(run_two(d2, e2) == 2.0f);
    vt->executable_destroy(d2, e2);
    /* a unit whose text is an earlier one's but for its kernel's name
     * (OpenCL programs print identical kernels once, under the first
     * one's name): reused, its kernel created under the earlier name */
    static const char add2[] =
        "__kernel void add2(__global const float* a, __global float* b) { int i = get_global_id(0); b[i] = a[i] + "
        "KILN_ONE; }\n";
    snprintf(src, sizeof src, "%s%s%s", prelude, add2, scale5);
    kspec_t ks2[2] = {{"add2", 2, {0, 1}, 1, 4}, {"scale", 1, {1}, 1, 4}};
    kiln_program_t* r2 = mkprog(src, 2, 16, 2, ks2);
    set_parts(r2, 2, cuts);
    CHECK_OK(vt->executable_create(d2, r2, &bo, &e2));
    kiln_opencl_build_stats_t s5;
    kiln_opencl_executable_stats(e2, &s5);
    CHECK_MSG(s5.units == 2 && s5.units_reused == 2, "renamed unit: %d of %d reused", (int)s5.units_reused,
              (int)s5.units);
    if (e2) CHECK(run_two(d2, e2) == 5.0f);
    vt->executable_destroy(d2, e2);
    /* under another name and with another body: not that unit */
    static const char add3[] =
        "__kernel void add3(__global const float* a, __global float* b) { int i = get_global_id(0); b[i] = a[i] + "
        "KILN_ONE + KILN_ONE; }\n";
    snprintf(src, sizeof src, "%s%s%s", prelude, add3, scale5);
    kspec_t ks3[2] = {{"add3", 2, {0, 1}, 1, 4}, {"scale", 1, {1}, 1, 4}};
    kiln_program_t* r3 = mkprog(src, 2, 16, 2, ks3);
    const size_t cuts3[2] = {strlen(prelude), strlen(prelude) + strlen(add3)};
    set_parts(r3, 2, cuts3);
    CHECK_OK(vt->executable_create(d2, r3, &bo, &e2));
    kiln_opencl_executable_stats(e2, &s5);
    CHECK(s5.units == 2 && s5.units_reused == 1);
    if (e2) CHECK(run_two(d2, e2) == 10.0f);
    vt->executable_destroy(d2, e2);
    kiln_program_destroy(r3);
    kiln_program_destroy(r2);
    kiln_program_destroy(r);
    kiln_device_release(d2);
  }
  for (int i = 0; i < 3; ++i) kiln_program_destroy(p[i]);
  kiln_program_destroy(q);
  kiln_device_release(d);
}

static void test_build_failure_and_dump(void) {
  kiln_device_t* d = open_opencl_device_0();
  if (!d) return;
  const kiln_device_vtable_t* vt = d->vt;
  char dump[400];
  snprintf(dump, sizeof dump, "%s/dump", tmp_root);
  const char* src =
      "__kernel void fine_k(__global float* a) { a[0] = 1.0f; }\n"
      "\n"
      "__kernel void broken_k(__global float* a) {\n"
      "  a[0] = undeclared_thing + 1.0f;\n"
      "}\n";
  kspec_t ks[2] = {{"fine_k", 1, {0}, 1, 1}, {"broken_k", 1, {0}, 1, 1}};
  kiln_program_t* p = mkprog(src, 1, 4, 2, ks);
  kiln_device_build_options_t bo = {.cache_dir = "", .dump_dir = dump};
  kiln_device_executable_t* e = NULL;
  kiln_status_t s = vt->executable_create(d, p, &bo, &e);
  CHECK(s != NULL && e == NULL);
  if (s) {
    const char* m = kiln_status_message(s);
    CHECK(kiln_status_code(s) == KILN_INVALID_ARGUMENT);
    CHECK_MSG(strstr(m, "broken_k") && !strstr(m, "fine_k'") && strstr(m, "undeclared_thing"),
              "build error names the kernel and carries the log: %s", m);
    kiln_status_free(s);
  }
  char path[500];
  snprintf(path, sizeof path, "%s/handmade.cl", dump);
  struct stat st;
  CHECK_MSG(stat(path, &st) == 0 && st.st_size == (off_t)strlen(src), "source dumped to %s", path);
  /* a kernel the source does not define */
  kspec_t ks2[1] = {{"missing_k", 1, {0}, 1, 1}};
  kiln_program_t* p2 = mkprog("__kernel void other(__global float* a) { }\n", 1, 4, 1, ks2);
  CHECK_ERR(vt->executable_create(d, p2, &bo, &e), KILN_INVALID_ARGUMENT, "missing_k");
  kiln_program_destroy(p2);
  kiln_program_destroy(p);
  kiln_device_release(d);
}

/* Extensions a program enables ("#pragma OPENCL EXTENSION x : enable") are
 * checked against the device's before a build: one it lacks is an
 * UNSUPPORTED error naming it and the device, not a compiler log. */
static void test_required_extensions(void) {
  /* the pragma parser: blanks anywhere, `disable` asks for nothing */
  const char* src =
      "  #  pragma\tOPENCL EXTENSION cl_a_one :  enable\n"
      "#pragma OPENCL EXTENSION cl_not_asked : disable\n"
      "// #pragma OPENCL EXTENSION cl_commented : enable\n"
      "#pragma OPENCL EXTENSION cl_two:enable";
  char ext[64];
  size_t pos = 0;
  CHECK(kiln_opencl_next_enabled_extension(src, strlen(src), &pos, ext, sizeof ext) && !strcmp(ext, "cl_a_one"));
  CHECK(kiln_opencl_next_enabled_extension(src, strlen(src), &pos, ext, sizeof ext) && !strcmp(ext, "cl_two"));
  CHECK(!kiln_opencl_next_enabled_extension(src, strlen(src), &pos, ext, sizeof ext));
  pos = 0;
  CHECK_MSG(!kiln_opencl_next_enabled_extension(src, strlen(src), &pos, ext, 4), "a name that does not fit is skipped");

  kiln_device_t* d = open_opencl_device_0();
  if (!d) return;
  const kiln_device_vtable_t* vt = d->vt;
  kiln_device_build_options_t bo = {.cache_dir = ""};
  kiln_device_executable_t* e = NULL;
  kspec_t ks[1] = {{"ext_k", 1, {0}, 1, 1}};
  kiln_program_t* p = mkprog("#pragma OPENCL EXTENSION cl_kiln_no_such_thing : enable\n"
                             "__kernel void ext_k(__global float* a) { a[0] = 1.0f; }\n",
                             1, 4, 1, ks);
  kiln_status_t s = vt->executable_create(d, p, &bo, &e);
  CHECK_MSG(s && kiln_status_code(s) == KILN_UNSUPPORTED && strstr(kiln_status_message(s), "cl_kiln_no_such_thing") &&
                strstr(kiln_status_message(s), d->info.name) && strstr(kiln_status_message(s), "handmade.onnx"),
            "missing extension: %s", s ? kiln_status_message(s) : "no error");
  CHECK(e == NULL);
  kiln_status_free(s);
  kiln_program_destroy(p);
  if (!d->info.fp16_arith) {
    p = mkprog("#pragma OPENCL EXTENSION cl_khr_fp16 : enable\n"
               "__kernel void ext_k(__global half* a) { a[0] = a[1] * (half)2.0f; }\n",
               1, 4, 1, ks);
    CHECK_ERR(vt->executable_create(d, p, &bo, &e), KILN_UNSUPPORTED, "compiled with fp16 arithmetic");
    kiln_program_destroy(p);
  }
  /* one the device has (every OpenCL 1.2 device has byte-addressable stores) builds */
  p = mkprog("#pragma OPENCL EXTENSION cl_khr_byte_addressable_store : enable\n"
             "__kernel void ext_k(__global float* a) { a[0] = 1.0f; }\n",
             1, 4, 1, ks);
  if (CHECK_OK(vt->executable_create(d, p, &bo, &e))) vt->executable_destroy(d, e);
  kiln_program_destroy(p);
  kiln_device_release(d);
}

static void test_allocation_failure(void) {
  kiln_device_t* d = open_opencl_device_0();
  if (!d) return;
  const kiln_device_vtable_t* vt = d->vt;
  kiln_device_buffer_t* b = NULL;
  const uint64_t too_big = d->info.max_alloc_bytes + 1;
  char num[32];
  snprintf(num, sizeof num, "%" PRIu64, too_big);
  CHECK_ERR(vt->buffer_create(d, too_big, "huge tensor", &b), KILN_OUT_OF_MEMORY, num);
  CHECK(b == NULL);
  CHECK_ERR(vt->buffer_create(d, UINT64_MAX / 2, "huge tensor", &b), KILN_OUT_OF_MEMORY,
            "huge tensor");
  CHECK(b == NULL);
  /* the device is still usable */
  CHECK_OK(vt->buffer_create(d, 64, "small", &b));
  vt->buffer_destroy(d, b);
  kiln_device_release(d);
}

int main(void) {
  snprintf(tmp_root, sizeof tmp_root, "/tmp/kiln_ocl_test_%d", (int)getpid());
  mkdir(tmp_root, 0700);
  /* kiln's binary cache is skipped on PoCL while PoCL caches programs
   * itself; with PoCL's cache off it is used, and tested here. */
  setenv("POCL_KERNEL_CACHE", "0", 1);
  RUN(test_list_and_create);
  RUN(test_buffers_and_views);
  RUN(test_dispatch_and_timestamps);
  RUN(test_binary_cache);
  RUN(test_reuse_units);
  RUN(test_build_failure_and_dump);
  RUN(test_required_extensions);
  RUN(test_allocation_failure);
  char cmd[400];
  snprintf(cmd, sizeof cmd, "rm -rf %s", tmp_root);
  if (system(cmd) != 0) fprintf(stderr, "could not remove %s\n", tmp_root);
  return kiln_test_finish();
}
