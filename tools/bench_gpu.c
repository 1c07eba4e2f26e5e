/* `kiln bench --target opencl|vulkan` (bench_gpu.h): a case's one-node
 * graph compiled as `kiln compile -O1 -t TARGET` compiles it (the device's
 * loop limit, the target's templates), wrapped in an in-memory module and
 * run in a session with per-dispatch timestamps, so the time is the
 * device's kernel time, as the CPU rows time kernels only. */
#include "tools/bench_gpu.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "compiler/compare.h"
#include "compiler/pipeline.h"
#include "compiler/ref_exec.h"
#include "runtime/device.h"
#include "runtime/module_impl.h"
#include "targets/registry.h"

kiln_status_t bench_gpu_open(const char* target, kiln_device_t** out) {
  kiln_device_open_options_t oo = {.strict = true};
  return kiln_device_open(target, &oo, kiln_allocator_system(), out);
}

/* The reference interpreter is naive: products beyond this many FLOPs are
 * not checked (the gemm suite's largest; `kiln bench --quick` stays below). */
#define CHECK_MAX_FLOPS 2.2e9

#define PROVIDER_ENV "KILN_OPENCL_GEMM_PROVIDER"

/* kiln_session_create with KILN_OPENCL_GEMM_PROVIDER set to |provider|
 * (NULL: as the caller's environment has it), which the OpenCL device reads
 * while it builds the session's executable; the variable is put back. */
static kiln_status_t session_with_provider(kiln_module_t* m, kiln_device_t* d, const kiln_session_options_t* so,
                                           const char* provider, kiln_session_t** out) {
  if (!provider || strcmp(kiln_device_api(d), "opencl")) return kiln_session_create(m, d, so, out);
  const char* was = getenv(PROVIDER_ENV);
  char* keep = was ? strdup(was) : NULL;
  if (was && !keep) return kiln_make_status(KILN_OUT_OF_MEMORY, "bench: out of memory");
  setenv(PROVIDER_ENV, provider, 1);
  kiln_status_t st = kiln_session_create(m, d, so, out);
  if (keep) setenv(PROVIDER_ENV, keep, 1);
  else unsetenv(PROVIDER_ENV);
  free(keep);
  return st;
}

kiln_status_t bench_gpu_run(kiln_device_t* d, const bench_case_t* c, const char* gemm_provider, int32_t warmup,
                            int32_t repeat, double* out_ms, double* out_flops, double* out_bytes) {
  const kiln_target_t* target = kiln_target_find(kiln_device_api(d));
  if (!target) return kiln_make_status(KILN_UNSUPPORTED, "bench: no compiler target '%s'", kiln_device_api(d));
  kiln_graph_t* g = NULL;
  kiln_program_t* prog = NULL;
  kiln_module_t* m = NULL;
  kiln_session_t* s = NULL;
  kiln_array_t in[4], out[2], want[2];
  memset(in, 0, sizeof in);
  memset(out, 0, sizeof out);
  memset(want, 0, sizeof want);
  kiln_compile_log_t log = {0};
  kiln_status_t st = bench_build_graph(c, &g);
  if (!st && (g->n_inputs > 4 || g->n_outputs != 1))
    st = kiln_make_status(KILN_INTERNAL, "bench: case '%s' has %d inputs, %d outputs", c->name, (int)g->n_inputs,
                          (int)g->n_outputs);
  /* the device too, as `kiln run` compiles (its limits size the GPU rules'
   * work-groups; no tuning cache is read without a path) */
  kiln_compile_config_t cc = {.target = target, .opt = 1, .model_name = c->name, .loop_limit = d->info.loop_limit,
                              .gpu_lacks = kiln_compile_gpu_lacks(&d->info), .tuning_device = d};
  if (!st) st = kiln_compile_program(g, &cc, &log, &prog);
  double flops = 0, bytes = 0;
  for (int32_t k = 0; !st && k < prog->n_kernels; ++k) flops += (double)prog->kernels[k].flops;
  if (!st) st = kiln_module_wrap(prog, &m); /* takes prog */
  prog = NULL;
  kiln_session_options_t so;
  kiln_session_options_default(&so);
  so.profile = true;
  so.slots = 1;
  if (!st) st = session_with_provider(m, d, &so, gemm_provider, &s);
  for (int32_t i = 0; !st && i < g->n_inputs; ++i) {
    const kiln_tensor_t* t = &g->tensors[g->inputs[i]];
    const int64_t n = kiln_shape_count(&t->shape);
    float* p = malloc((size_t)(n > 0 ? n : 1) * sizeof(float));
    if (!p) {
      st = kiln_make_status(KILN_OUT_OF_MEMORY, "bench: input '%s'", t->name);
      break;
    }
    bench_fill(p, n, 7u + (uint32_t)i);
    in[i] = (kiln_array_t){t->dtype, t->shape, p, (uint64_t)n * sizeof(float)};
    bytes += (double)in[i].nbytes;
  }
  /* the first run pays for lazy driver work and is left out of the profile */
  for (int32_t r = 0; !st && r < warmup + repeat; ++r) {
    kiln_array_free(kiln_allocator_system(), &out[0]);
    st = kiln_session_run(s, in, out);
  }
  int32_t n_prof = 0, runs = 0;
  const kiln_profile_entry_t* prof = st ? NULL : kiln_session_profile(s, &n_prof, &runs);
  double total = 0;
  for (int32_t k = 0; prof && k < n_prof; ++k) total += prof[k].total_s;
  if (!st && (!prof || runs <= 0))
    st = kiln_make_status(KILN_INTERNAL, "bench: case '%s': the session recorded no profile", c->name);
  /* the weights too (a GEMV streams mostly B): what bench_graph_bytes
   * counts on the CPU, inputs, constants read and outputs once */
  if (!st) bytes = bench_graph_bytes(g);
  if (!st && flops <= CHECK_MAX_FLOPS) {
    kiln_ref_options_t ro;
    kiln_ref_options_default(&ro);
    st = kiln_ref_run(g, in, &ro, want);
    if (!st) {
      kiln_compare_result_t cr;
      kiln_compare(&out[0], &want[0], 1e-3, 1e-4, &cr);
      if (!cr.ok)
        st = kiln_make_status(KILN_INTERNAL, "bench: case '%s' on %s does not match the reference: %s", c->name,
                              kiln_device_api(d), cr.message);
      kiln_array_free(ro.allocator, &want[0]);
    }
  }
  if (!st) {
    *out_ms = total / runs * 1e3;
    *out_flops = flops;
    *out_bytes = bytes;
  }
  kiln_array_free(kiln_allocator_system(), &out[0]);
  for (int32_t i = 0; i < 4; ++i) free(in[i].data);
  kiln_session_destroy(s);
  kiln_module_release(m);
  kiln_program_destroy(prog);
  kiln_compile_log_free(&log);
  kiln_graph_destroy(g);
  return st;
}

kiln_status_t bench_gpu_peer(kiln_device_t* d, const bench_case_t* c, int32_t warmup, int32_t repeat, double* out_ms,
                             double* out_flops, double* out_bytes) {
  const kiln_target_t* target = kiln_target_find(kiln_device_api(d));
  if (!target || !target->peer_sgemm)
    return kiln_make_status(KILN_UNSUPPORTED, "bench: target '%s' has no peer library", kiln_device_api(d));
  if (c->kind != BENCH_GEMM)
    return kiln_make_status(KILN_INVALID_ARGUMENT, "bench: case '%s' is not a gemm: no peer row", c->name);
  const int64_t M = c->p[0], K = c->p[1], N = c->p[2];
  kiln_graph_t* g = NULL;
  kiln_array_t in = {0}, want = {0};
  float* y = malloc((size_t)(M * N) * sizeof(float));
  kiln_status_t st = y ? bench_build_graph(c, &g) : kiln_make_status(KILN_OUT_OF_MEMORY, "bench: out of memory");
  /* the kiln row's operands: A filled as bench_gpu_run fills input 0, B the
   * graph's seeded weight */
  const int32_t tb = st ? -1 : kiln_graph_find_tensor(g, "B");
  if (!st && (g->n_inputs != 1 || tb < 0 || !g->tensors[tb].value.data))
    st = kiln_make_status(KILN_INTERNAL, "bench: case '%s': no A input and B weight", c->name);
  if (!st) {
    const kiln_tensor_t* t = &g->tensors[g->inputs[0]];
    float* a = malloc((size_t)(M * K) * sizeof(float));
    if (!a) st = kiln_make_status(KILN_OUT_OF_MEMORY, "bench: out of memory");
    else bench_fill(a, M * K, 7u);
    in = (kiln_array_t){t->dtype, t->shape, a, (uint64_t)(M * K) * sizeof(float)};
  }
  if (!st) st = target->peer_sgemm(d, M, N, K, in.data, g->tensors[tb].value.data, y, warmup, repeat, out_ms);
  const double flops = 2.0 * (double)M * (double)N * (double)K;
  if (!st && flops <= CHECK_MAX_FLOPS) {
    kiln_ref_options_t ro;
    kiln_ref_options_default(&ro);
    st = kiln_ref_run(g, &in, &ro, &want);
    if (!st) {
      kiln_array_t got = {want.dtype, want.shape, y, (uint64_t)(M * N) * sizeof(float)};
      kiln_compare_result_t cr;
      kiln_compare(&got, &want, 1e-3, 1e-4, &cr);
      if (!cr.ok)
        st = kiln_make_status(KILN_INTERNAL, "bench: the peer of case '%s' does not match the reference: %s",
                              c->name, cr.message);
      kiln_array_free(ro.allocator, &want);
    }
  }
  if (!st) {
    *out_flops = flops;
    *out_bytes = 4.0 * (double)(M * K + K * N + M * N);
  }
  free(in.data);
  free(y);
  kiln_graph_destroy(g);
  return st;
}
