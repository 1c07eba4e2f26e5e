/* kiln OpenCL target: a plan's kernels as one OpenCL C 1.2 program.
 *
 * kiln_opencl_emit prints every plan kernel through the shared C-family
 * printer with the OpenCL dialect (targets/cfamily/printer.h) and sets the
 * launch geometry of each program kernel from its BOUND loops:
 *   - a kernel that arrives with a CPU-style schedule (its outermost loop
 *     PARALLEL, nothing bound: GEMM, convolution, pooling, reductions) has
 *     that loop bound to work-groups x work-items, so it runs in parallel
 *     instead of on one work-item (targets/opencl/opencl_schedule.c);
 *   - a kernel with a template descriptor (lowering/template.h, chosen by
 *     kiln_template_choose with the set kiln_opencl_templates gives) is an
 *     instance of that template: MatMul/Gemm kernels of the hand-tuned GEMM
 *     (kernels/opencl/gemm.cl) with the same kernel name and parameter
 *     order; Conv instances of the implicit-GEMM template
 *     (kernels/opencl/conv.cl) or of Winograd F(2x2, 3x3)
 *     (kernels/opencl/winograd.cl; weights transformed by lowering) in
 *     the crop's place, with their own parameter list, the Conv's GEMM
 *     kernel leaving the program; the lowering's direct depthwise kernels
 *     as instances of kernels/opencl/depthwise.cl with the same name and
 *     parameters. So prog->n_kernels may shrink and kernels' args and
 *     buffers' lifetimes are rewritten (targets/gpu_conv.c).
 *   Every instance's tiles are the descriptor's (chosen in lowering by the
 *   set's tile rules, targets/opencl/opencl_tiles.c) and the conv weights
 *   the plan's constants, laid out for them in lowering.
 * Every template takes f16 buffers too (--precision fp16: fp16 storage, f32
 * sums; each parameter f32 or f16 on its own) and never keeps partial sums
 * in an f16 buffer.
 * Kernels the precision pass retyped for fp16 arithmetic (it does so for a
 * device with cl_khr_fp16) print with F16 values as OpenCL `half`
 * (kiln_cf_dialect_native_half) and the program enables cl_khr_fp16, so it
 * builds only on a device that has it (the OpenCL device checks first).
 *
 * Usage: the program builder (targets/program_build.c) fills prog->kernels
 * (one per plan kernel, same order, names and args set), then calls
 *   kiln_opencl_emit(plan, prog);
 * which sets prog->code.text / text_len (allocated with prog->allocator)
 * and prog->kernels[k].groups / local.
 *
 * Errors: INVALID_ARGUMENT when prog's kernels do not match the plan's,
 * printer errors (naming the kernel), OUT_OF_MEMORY. On error prog->code is
 * left untouched. Thread-safe (no global state; the plan is only read).
 */
#ifndef KILN_TARGETS_OPENCL_OPENCL_TARGET_H_
#define KILN_TARGETS_OPENCL_OPENCL_TARGET_H_

#include "lowering/template.h"
#include "runtime/device.h"
#include "runtime/program.h"

#ifdef __cplusplus
extern "C" {
#endif

kiln_status_t kiln_opencl_emit(const kiln_plan_t* plan, kiln_program_t* prog);

/* Which templates the OpenCL target offers (tests, tuning). */
typedef struct kiln_opencl_template_options_s {
  bool no_gemm_template;  /* print every MatMul/Gemm kernel from its tensor IR */
  bool no_conv_template;  /* keep Conv kernels as printed (phase split, GEMM, crop) */
  bool no_conv_relayout;  /* conv templates read the lowering's packed weights (gathered
                             per K slice) instead of a copy laid out for them */
  bool no_winograd;       /* 3x3 stride-1 convs use the implicit-GEMM template even where
                             Winograd F(2x2, 3x3) (kernels/opencl/winograd.cl) wins */
  bool no_dw_template;    /* keep depthwise Conv kernels as printed */
  bool all_dw_template;   /* the depthwise template wherever it matches, also at the
                             strides where the printed kernel measured faster */
  bool memory_conv_sums;  /* implicit-GEMM conv instances whose grid is f32 keep their
                             partial sums between K slices in it (conv.cl CPSUM 0) instead
                             of a private f32 array (the default; on PoCL as fast or
                             faster, and the grid leaves the arena: ResNet-18 7.15 -> 4.01
                             MB); KILN_OPENCL_CONV_PSUM=memory does the same (tuning) */
} kiln_opencl_template_options_t;

/* The OpenCL target's templates and the rules measured for them (on PoCL)
 * as a set for kiln_template_choose: |o| (NULL: all of them) and the
 * environment (tuning): KILN_OPENCL_WINOGRAD=off never uses Winograd, =all
 * wherever it covers; KILN_OPENCL_DW=off never uses the depthwise
 * template, =all wherever it matches; KILN_OPENCL_CONV_PSUM=memory as
 * memory_conv_sums. Thread-safe. */
void kiln_opencl_templates(const kiln_opencl_template_options_t* o, kiln_template_set_t* out);

/* Options of kiln_opencl_emit_ex (tests, tuning). */
typedef struct kiln_opencl_emit_options_s {
  bool no_bind_parallel;  /* keep CPU-style PARALLEL loops serial */
  bool no_native_half;    /* F16 arithmetic (fp16-arith kernels) as floats rounded to
                             half after every operation, not OpenCL `half` under
                             cl_khr_fp16: same results, runs on devices without it */
  bool* native_half;      /* out (may be NULL): the program computes in `half` and
                             enables cl_khr_fp16 */
  int32_t* n_templated;   /* out (may be NULL): kernels replaced by a template */
  int32_t* n_rebound;     /* out (may be NULL): kernels whose PARALLEL loop got bound */
  int32_t* n_shared;      /* out (may be NULL): template instances that call an identical
                             earlier instance's kernel (printed once) */
  int32_t* n_winograd;    /* out (may be NULL): conv instances that are Winograd ones */
  int32_t* n_shared_printed; /* out (may be NULL): printed kernels that call an earlier printed
                                kernel of the same text (canonical form: printed once) */
} kiln_opencl_emit_options_t;

kiln_status_t kiln_opencl_emit_ex(const kiln_plan_t* plan, kiln_program_t* prog,
                                  const kiln_opencl_emit_options_t* options);

/* The target's peer_sgemm (targets/registry.h): CLBlast's sgemm on the
 * OpenCL device (targets/opencl/opencl_peer.c). */
kiln_status_t kiln_opencl_peer_sgemm(kiln_device_t* device, int64_t M, int64_t N, int64_t K, const float* a,
                                     const float* b, float* y, int32_t warmup, int32_t repeat, double* out_ms);

#ifdef __cplusplus
}
#endif
#endif
