/* Shared harness of the OpenCL end-to-end tests (see graph_harness.h). */
#include "graph_harness.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "runtime/opencl/opencl_device.h"
#include "testing.h"

static kiln_allocator_t A(void) { return kiln_allocator_system(); }

static uint64_t rng_state = 88172645463325252ull;
float rnd(void) {
  rng_state ^= rng_state << 13;
  rng_state ^= rng_state >> 7;
  rng_state ^= rng_state << 17;
  return (float)((double)(rng_state >> 11) / (double)(1ull << 52) - 1.0);
}

kiln_array_t rand_f32(int rank, const int64_t* dims) {
  kiln_array_t a;
  kiln_shape_t s = kiln_shape_make(rank, dims);
  KILN_ASSERT(!kiln_array_alloc(A(), KILN_DTYPE_F32, &s, &a));
  float* p = a.data;
  for (int64_t i = 0; i < kiln_array_numel(&a); ++i) p[i] = rnd();
  return a;
}

void round_f16_floats(float* v, size_t n) {
  for (size_t i = 0; i < n; ++i) v[i] = kiln_f16_to_f32(kiln_f32_to_f16(v[i]));
}

void round_f16(kiln_array_t* a) { round_f16_floats(a->data, (size_t)kiln_array_numel(a)); }

/* ---- graph building ------------------------------------------------------ */

void gb_init(gb_t* b) {
  memset(b, 0, sizeof *b);
  b->st = kiln_graph_create(A(), &b->g);
  if (!b->st) b->st = kiln_graph_set_opset(b->g, "", 17);
}

void gb_input(gb_t* b, const char* name, int rank, const int64_t* dims) {
  if (b->st) return;
  b->feeds[b->n_feeds] = rand_f32(rank, dims);
  if (b->f16_exact) round_f16(&b->feeds[b->n_feeds]);
  b->st = kiln_graph_add_input(b->g, name, KILN_DTYPE_F32, &b->feeds[b->n_feeds].shape, NULL);
  ++b->n_feeds;
}

void gb_const(gb_t* b, const char* name, int rank, const int64_t* dims) {
  if (b->st) return;
  kiln_array_t a = rand_f32(rank, dims);
  if (b->f16_exact) round_f16(&a);
  b->st = kiln_graph_add_initializer(b->g, name, &a, NULL);
}

void gb_const_values(gb_t* b, const char* name, int rank, const int64_t* dims, const float* values) {
  if (b->st) return;
  kiln_array_t a;
  kiln_shape_t s = kiln_shape_make(rank, dims);
  KILN_ASSERT(!kiln_array_alloc(A(), KILN_DTYPE_F32, &s, &a));
  memcpy(a.data, values, a.nbytes);
  if (b->f16_exact) round_f16(&a);
  b->st = kiln_graph_add_initializer(b->g, name, &a, NULL);
}

void gb_node(gb_t* b, const char* op, const char* name, int n_in, const char* const* in,
             const char* out, int n_attrs, const kiln_attr_t* attrs) {
  if (b->st) return;
  b->st = kiln_graph_add_node(b->g, op, name, n_in, in, 1, (const char* const[]){out}, n_attrs,
                              attrs, NULL);
}

/* ---- running a program on the device ------------------------------------- */

kiln_device_t* open_opencl_device_0(void) {
  kiln_device_t* d = NULL;
  kiln_status_t s = kiln_opencl_device_create(0, A(), &d);
  if (s) {
    fprintf(stderr, "no OpenCL device: %s\n", kiln_status_message(s));
    kiln_status_free(s);
    return NULL;
  }
  return d;
}

kiln_status_t run_on(kiln_device_t* dev, const kiln_program_t* p, const kiln_array_t* feeds,
                            kiln_array_t* outs) {
  const kiln_device_vtable_t* vt = dev->vt;
  kiln_status_t s = NULL;
  kiln_device_buffer_t** bufs = calloc((size_t)p->n_buffers + 1, sizeof *bufs);
  uint64_t* span = calloc((size_t)p->n_buffers + 1, sizeof *span);
  for (int32_t i = 0; i < p->n_buffers; ++i) {
    int32_t r = kiln_program_root(p, i);
    if (p->buffers[i].bytes > span[r]) span[r] = p->buffers[i].bytes;
  }
  for (int32_t i = 0; i < p->n_buffers && !s; ++i) {
    if (kiln_program_root(p, i) != i || p->buffers[i].first_use < 0) continue;
    s = vt->buffer_create(dev, span[i], p->buffers[i].name, &bufs[i]);
    if (!s && p->buffers[i].kind == KILN_PB_CONST && p->buffers[i].bytes)
      s = vt->buffer_write(dev, bufs[i], 0, p->weights + p->buffers[i].const_offset,
                           p->buffers[i].bytes);
  }
  for (int32_t i = 0; i < p->n_inputs && !s; ++i) {
    int32_t r = kiln_program_root(p, p->inputs[i]);
    if (bufs[r]) s = vt->buffer_write(dev, bufs[r], 0, feeds[i].data, feeds[i].nbytes);
  }
  kiln_device_executable_t* e = NULL;
  kiln_device_cmd_t* c = NULL;
  const char* dump = getenv("KILN_TEST_DUMP");
  kiln_device_build_options_t bo = {.cache_dir = NULL, .dump_dir = dump};
  if (!s) s = vt->executable_create(dev, p, &bo, &e);
  if (!s) s = vt->cmd_create(dev, e, 0, &c);
  for (int32_t k = 0; k < p->n_kernels && !s; ++k) {
    const kiln_program_kernel_t* pk = &p->kernels[k];
    kiln_device_buffer_t* args[64];
    for (int32_t a = 0; a < pk->n_args; ++a) args[a] = bufs[kiln_program_root(p, pk->args[a])];
    s = vt->cmd_dispatch(dev, c, k, args, pk->n_args);
    if (!s) s = vt->cmd_barrier(dev, c);
  }
  if (!s) s = vt->cmd_end(dev, c);
  if (!s) s = vt->submit(dev, c);
  if (!s) s = vt->wait(dev, c);
  for (int32_t o = 0; o < p->n_outputs && !s; ++o) {
    const kiln_program_buffer_t* b = &p->buffers[p->outputs[o]];
    kiln_shape_t sh = kiln_shape_make(b->rank, b->shape);
    s = kiln_array_alloc(A(), b->dtype, &sh, &outs[o]);
    if (!s) s = vt->buffer_read(dev, bufs[kiln_program_root(p, p->outputs[o])], 0, outs[o].data,
                                outs[o].nbytes);
  }
  vt->cmd_destroy(dev, c);
  vt->executable_destroy(dev, e);
  for (int32_t i = 0; i < p->n_buffers; ++i) vt->buffer_destroy(dev, bufs[i]);
  free(bufs);
  free(span);
  return s;
}

/* |got - want| <= 1e-5 s + 1e-4 |want| everywhere, s = max(1, max |want|):
 * f32 sums in another order (tiles, Winograd's transforms) err in
 * proportion to the size of their terms, which the largest output tracks,
 * not a small output; reports the worst index. */
bool close_enough(const kiln_array_t* got, const kiln_array_t* want, const char* what) {
  return close_enough_tol(got, want, 1e-4, 1e-5, what, NULL);
}

bool close_enough_tol(const kiln_array_t* got, const kiln_array_t* want, double rtol, double atol,
                      const char* what, double* out_ratio) {
  if (out_ratio) *out_ratio = INFINITY;
  if (!kiln_shape_equal(&got->shape, &want->shape) || got->dtype != want->dtype) {
    CHECK_MSG(false, "%s: output shape/dtype differs", what);
    return false;
  }
  const float* g = got->data;
  const float* w = want->data;
  int64_t n = kiln_array_numel(want), worst = -1;
  double worst_ex = 0, scale = 1, ratio = 0;
  for (int64_t i = 0; i < n; ++i)
    if (fabs((double)w[i]) > scale) scale = fabs((double)w[i]);
  for (int64_t i = 0; i < n; ++i) {
    if (isnan(g[i]) && isnan(w[i])) continue;
    const double lim = atol * scale + rtol * fabs((double)w[i]);
    double ex = fabs((double)g[i] - w[i]) - lim;
    if (isnan(g[i]) != isnan(w[i])) ex = INFINITY;
    const double r = isinf(ex) ? INFINITY : fabs((double)g[i] - w[i]) / lim;
    if (!(r <= ratio)) ratio = r;
    if (ex > 0 && (worst < 0 || ex > worst_ex)) worst_ex = ex, worst = i;
  }
  if (out_ratio) *out_ratio = ratio;
  CHECK_MSG(worst < 0, "%s: element %lld = %g, reference %g (rtol %g, atol %g x %g)", what, (long long)worst,
            worst >= 0 ? g[worst] : 0.0, worst >= 0 ? w[worst] : 0.0, rtol, atol, scale);
  return worst < 0;
}


kiln_status_t choose_opencl_templates(kiln_plan_t* plan, const kiln_opencl_template_options_t* to) {
  kiln_template_set_t set;
  kiln_opencl_templates(to, &set);
  return kiln_template_choose(plan, &set);
}

bool run_and_check(kiln_device_t* dev, const kiln_program_t* p, const kiln_array_t* feeds,
                   const kiln_array_t* want, int n_outputs, const char* label) {
  kiln_array_t got[4];
  memset(got, 0, sizeof got);
  bool ok = false;
  if (CHECK_OK(run_on(dev, p, feeds, got))) {
    ok = true;
    for (int o = 0; o < n_outputs; ++o) ok = close_enough(&got[o], &want[o], label) && ok;
    printf("  %s %s\n", ok ? "ok  " : "FAIL", label);
  }
  for (int o = 0; o < n_outputs; ++o) kiln_array_free(A(), &got[o]);
  return ok;
}
