/* Shared by the tuning-cache harness (fuzz_tune.c) and its seeds
 * (fuzz_seeds.c): the small model whose template kernels the cache's
 * records are applied to, its plans per target, and the devices the
 * records name. The seeds hold records for exactly these keys, so the
 * fuzzer starts from records that reach the knob checks.
 *
 * The model: X [32,96] x W [96,64] -> Y (a GEMM); I [1,16,20,20] -> Conv
 * 3x3 pad 1 (32) -> Relu -> depthwise 3x3 (32 groups) -> Z. On the CPU
 * (-O1, NCHWc) its GEMMs are in the spaces cpu.gemm.1, cpu.conv_wino.1
 * and cpu.dw_nchwc.1; on OpenCL and Vulkan it has GEMM, conv and
 * depthwise templates.
 *
 * The GPU devices are not opened: a record's checks need only the key
 * fields and the limits (kiln_tune_device_t), so each GPU target has two
 * made-up devices, a roomy one with every feature and a small one that
 * lacks 64-bit integers and subgroups. Include after bad_model_util.h. */
#ifndef KILN_TESTS_FUZZ_TUNE_UTIL_H_
#define KILN_TESTS_FUZZ_TUNE_UTIL_H_

#include <stdio.h>
#include <string.h>

#include "compiler/tune.h"
#include "compiler/tune_cpu.h"
#include "ir/passes.h"
#include "lowering/fuse.h"
#include "lowering/lower.h"
#include "lowering/plan.h"
#include "lowering/template.h"
#include "targets/program_build.h"
#include "targets/registry.h"
#include "../tune_model_util.h"

#define FZT_API static __attribute__((unused))
#define FZT_N_GPU_DEVICES 4

/* The GPU devices records are checked against: two per GPU target. */
FZT_API kiln_tune_device_t fzt_gpu_device(int32_t i) {
  kiln_tune_device_t d;
  memset(&d, 0, sizeof d);
  d.target = i < 2 ? "opencl" : "vulkan";
  const bool small = i % 2 == 1;
  snprintf(d.device, sizeof d.device, "%s", small ? "fuzz small gpu" : "fuzz gpu");
  snprintf(d.driver, sizeof d.driver, "%s", small ? "fuzz driver 0.1" : "fuzz driver 1.0");
  d.limits.max_workgroup_size = small ? 64 : 1024;
  d.limits.local_mem_bytes = small ? 4096 : 65536;
  d.limits.loop_limit = small ? 4096 : 65535;
  d.limits.gpu_lacks = small ? KILN_GPU_LACKS_INT64 | KILN_GPU_LACKS_SUBGROUP | KILN_GPU_LACKS_SUBGROUP_ARITH : 0;
  return d;
}

/* Writes the model to |path| (tune_model_util.h, the depthwise conv padded). */
FZT_API bool fzt_write_model(const char* path) { return tune_write_model(path, true); }

/* The model at |path| as `kiln compile -O1` takes it. */
FZT_API kiln_status_t fzt_graph(const char* path, kiln_graph_t** g) {
  KILN_RETURN_IF_ERROR(kiln_onnx_parse_model(path, NULL, kiln_allocator_system(), g));
  KILN_RETURN_IF_ERROR(kiln_graph_prepare(*g));
  return kiln_graph_optimize(*g, 1, NULL);
}

/* The CPU plan's options (one thread: the fingerprints hash the count). */
FZT_API kiln_plan_options_t fzt_cpu_options(void) {
  kiln_plan_options_t po = {KILN_TARGET_CLASS_CPU, 1, 0, 0, kiln_cpu_simd().lanes, 0};
  return po;
}

/* A GPU target's plan of |g|, fused, before the template choice. */
FZT_API kiln_status_t fzt_gpu_plan(const kiln_graph_t* g, const kiln_target_t* t, const kiln_tune_device_t* d,
                                  kiln_plan_t** out) {
  kiln_plan_options_t po = {KILN_TARGET_CLASS_GPU, 0, d->limits.loop_limit, 0, 0, t->ew_lanes};
  KILN_RETURN_IF_ERROR(kiln_plan_build(g, &po, kiln_allocator_system(), out));
  kiln_fusion_report_t fr;
  return kiln_plan_fuse(*out, &fr, NULL);
}

/* The template set of GPU target |t| for device |d|. */
FZT_API kiln_template_set_t fzt_gpu_set(const kiln_target_t* t, const kiln_tune_device_t* d) {
  kiln_template_set_t set;
  kiln_program_templates(t, &set);
  set.gpu_lacks = d->limits.gpu_lacks;
  return set;
}

/* The key of a record for |fingerprint| in |space| on |d|. */
FZT_API kiln_tune_key_t fzt_key(uint64_t fingerprint, const char* space, const kiln_tune_device_t* d) {
  kiln_tune_key_t k;
  memset(&k, 0, sizeof k);
  k.fingerprint = fingerprint;
  snprintf(k.target, sizeof k.target, "%s", d->target);
  snprintf(k.space, sizeof k.space, "%s", space);
  snprintf(k.device, sizeof k.device, "%s", d->device);
  snprintf(k.driver, sizeof k.driver, "%s", d->driver);
  snprintf(k.kiln, sizeof k.kiln, "%s", KILN_VERSION);
  return k;
}

#endif /* KILN_TESTS_FUZZ_TUNE_UTIL_H_ */
