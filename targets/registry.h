/* Code-generation targets by name: the compiler half of kiln's target
 * registry (ggml's backend registry, in C).
 *
 * A target is one folder per layer -- targets/<name>/ prints a plan as its
 * code, runtime/<name>/ runs it (runtime/device_registry.h), kernels/<name>/
 * holds its hand-written templates -- plus one line that registers it: its
 * name in KILN_TARGETS in the top-level CMakeLists.txt. Its folder's
 * target.cmake says whether it can be built (drivers found) and adds its
 * sources; the build generates kiln_targets.inc, one KILN_TARGET(name) line
 * per target built in, and registry.c collects the entry each target
 * defines:
 *
 *   const kiln_target_t kiln_target_<name>;
 *
 * Nothing else in the compiler, the CLI or the tools switches on a target
 * name: they look targets up here (targets/README.md is the recipe).
 *
 * Entries are static constants: thread-safe, never freed.
 */
#ifndef KILN_TARGETS_REGISTRY_H_
#define KILN_TARGETS_REGISTRY_H_

#include "lowering/template.h"
#include "kiln/runtime.h"
#include "runtime/program.h"

#ifdef __cplusplus
extern "C" {
#endif

/* What building native code took (kiln_target_t.emit_native_code). */
typedef struct kiln_native_build_stats_s {
  double wall_s;       /* the build's wall seconds */
  double compiler_cpu_s; /* the compiler processes' CPU seconds */
  int32_t parts, jobs; /* translation units, compilers run at once */
  int32_t parts_reused; /* parts whose object the code cache held */
  char compiler[64];
} kiln_native_build_stats_t;

typedef struct kiln_target_s {
  /* "cpu", "opencl", "vulkan": --target, the module's target, and the
   * device API that runs the program (same name). */
  const char* name;
  /* The schedules lowering picks for this target's kernels. */
  kiln_target_class_t lowering;
  /* GPU: elements each invocation of an element-wise nest takes by default
   * (kiln_plan_options_t.ew_lanes; 0: one). Vulkan 4: its printer reads and
   * writes them as one vec4 texel (targets/cfamily printer_vec.c). */
  int32_t ew_lanes;
  /* File extension of the generated source `--dump` writes ("c", "cl"). */
  const char* source_ext;
  /* --precision fp16: keep the workspaces a GEMM reads in f32 (they cost
   * arena bytes only; the CPU's C GEMM converts on every load otherwise). */
  bool fp16_keeps_f32_workspaces;
  /* Prints |plan| as the target's code into prog->code (the buffers,
   * kernels and I/O are already in |prog|); may rewrite prog's kernel list
   * where a template replaces several plan kernels. Errors name the kernel.
   * Required. */
  kiln_status_t (*emit)(const kiln_plan_t* plan, kiln_program_t* prog);
  /* Optional (NULL: none, every kernel printed from its tensor IR): the
   * template kernels the target has and their rules (lowering/template.h),
   * which lowering's kiln_template_choose matches against the plan, with
   * its tile rules: lowering records the tiles and lays the weights out. */
  void (*templates)(kiln_template_set_t* out);
  /* Optional (NULL: the target has no such code): machine code compiled
   * ahead of time for the ISA levels in |levels| (comma-separated, as
   * `kiln compile --cpu-target` takes them), added to prog->code after
   * emit. */
  kiln_status_t (*emit_native)(const kiln_plan_t* plan, kiln_program_t* prog, const char* levels);
  /* Optional (NULL: every pass): graph passes (ir/passes.h names) left out
   * for this target, NULL-terminated, because its kernels run the rewritten
   * graph slower than the original. */
  const char* const* skip_graph_passes;
  /* Optional (NULL: it prints every kernel lowering gives it): whether the
   * target can print plan kernel |k| of a plan lowered for it, asked
   * before templates are chosen. NULL when it can; else UNSUPPORTED whose
   * message is the reason (a dtype its dialect lacks, a plugin op without a
   * kernel for it). Heterogeneous execution (targets/partition.h) runs the
   * refused nodes on the CPU device of the same session. */
  kiln_status_t (*kernel_check)(const kiln_plan_t* plan, int32_t k);
  /* Whether the target emits a per-sample plan (lowering/plan_dyn.h: a
   * dynamic batch read from the dims buffer at run time, or the samples on
   * the grid), so `--dim batch=LO..HI` may compile for it. */
  bool dyn_batch;
  /* Whether the target emits a range program (lowering/plan_seq.h: kernels
   * whose extents follow a dim inside the shapes, read at run time), so
   * `--dim seq=LO..HI` compiles one program for it. */
  bool dyn_seq;
  /* Optional, with emit_native: whether the native code of |levels| can be
   * built from the program's own code after the plan is gone ... */
  bool (*native_from_code_ok)(const char* levels);
  /* ... and that build, which a caller may run on another thread while it
   * writes the rest of the module (`kiln compile -o`: the C compiler and
   * the module's weights overlap). Its time goes into |stats| (or NULL). */
  kiln_status_t (*emit_native_code)(kiln_program_t* prog, const char* levels, kiln_native_build_stats_t* stats);
  /* Whether a range program's GEMMs whose M is a run-time value of the dim
   * (kiln_template_gemm_t.m_dim_a) run as its GEMM template: the template
   * reads M from the dims buffer (role 'D') and takes its row blocks from
   * the grid's dim 2, which the device launches the dim's value times. */
  bool dyn_seq_gemm;
  /* Optional (NULL: no peer): the device vendor library's sgemm, the peer
   * row of `kiln bench --target NAME`'s gemm suite (OpenCL: CLBlast, when
   * kiln was built with libclblast-dev): Y = A B for row-major f32 A [M,K]
   * and B [K,N] on |device| (one of this target's), |warmup| untimed and
   * |repeat| timed calls, *out_ms the mean device time of one call
   * (profiling markers around it, as the session's timestamps), Y read
   * back. UNSUPPORTED when this build lacks the library. */
  kiln_status_t (*peer_sgemm)(kiln_device_t* device, int64_t M, int64_t N, int64_t K, const float* a,
                              const float* b, float* y, int32_t warmup, int32_t repeat, double* out_ms);
  /* With peer_sgemm: the library's name, which the bench's peer rows
   * carry ("clblast": rows gemm/clblast, "peer": "clblast" in --json). */
  const char* peer_name;
  /* Optional (NULL: none): the environment variable whose value "gpu" or
   * "cpu" forces the device class a compile for this target's devices
   * gets (KILN_GPU_CLASS_GPU, kiln_compile_gpu_lacks): the GPU rules or
   * the CPU-device ones on any device. */
  const char* rules_env;
} kiln_target_t;

/* The target named |name| (exact match), NULL when this build has none. */
const kiln_target_t* kiln_target_find(const char* name);

/* Registered targets in registration order (the CPU first). */
int32_t kiln_target_count(void);
const kiln_target_t* kiln_target_at(int32_t i);

#ifdef __cplusplus
}
#endif
#endif /* KILN_TARGETS_REGISTRY_H_ */
