/* GEMM providers of the OpenCL device: a kernel that carries a GEMM
 * descriptor (kiln_program_gemm_t: the emitter's GEMM template instances
 * with plain operands and no bias) runs either as its own template code or
 * as a CLBlast call, chosen per shape from measurement.
 *
 * The choice: KILN_OPENCL_GEMM_PROVIDER=kiln|clblast forces one; unset or
 * "auto", the device looks the shape up in the record file
 * (<cache dir>/gemm-providers.tsv) for this device and driver, and when it
 * is not there times both on scratch buffers of the shape (a warm-up, then
 * the best of 5), keeps the faster and appends a line
 *   <device>\t<driver>\t<shape>\tkiln <GFLOP/s>\tclblast <GFLOP/s>\tchoice kiln|clblast
 * (the same columns bench/opencl_sgemm.c --record writes). Without the
 * cache (no cache dir) the measurement is redone per session. A CLBlast
 * that fails (status != success) loses, with its status in the record.
 * Built without CLBlast (libclblast-dev), every GEMM is kiln's. */
#ifndef KILN_RUNTIME_OPENCL_OPENCL_GEMM_PROVIDER_H_
#define KILN_RUNTIME_OPENCL_OPENCL_GEMM_PROVIDER_H_

#ifndef CL_TARGET_OPENCL_VERSION
#define CL_TARGET_OPENCL_VERSION 120
#endif
#include <CL/cl.h>
#include <stdbool.h>
#include <stddef.h>

#include "kiln/status.h"
#include "runtime/program.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef struct kiln_ocl_gemm_choice_s {
  bool clblast;            /* run as a CLBlast call */
  bool measured;           /* timed in this session (not from the record) */
  double kiln_gflops, clblast_gflops; /* as measured or recorded (0: not known) */
} kiln_ocl_gemm_choice_t;

/* True when this kiln was built with CLBlast. */
bool kiln_ocl_have_clblast(void);

/* The record's key for |g|: "MxNxK" plus what else distinguishes it. */
void kiln_ocl_gemm_shape_key(const kiln_program_gemm_t* g, char* out, size_t n);

/* Chooses the provider of kernel |k| (|n_args| parameters, launch
 * |global| / |local|) computing |g|, as described above; |record| is the
 * record file ("" or NULL: none). Errors: OUT_OF_MEMORY / DEVICE_ERROR
 * when scratch buffers or the timing runs fail; a failing CLBlast is not
 * an error. */
kiln_status_t kiln_ocl_gemm_choose(cl_context ctx, cl_command_queue q, const char* device, const char* driver,
                                   cl_kernel k, int32_t n_args, const size_t global[3], const size_t local[3],
                                   const kiln_program_gemm_t* g, const char* record, kiln_ocl_gemm_choice_t* out);

/* Enqueues |g| as a CLBlast call on |q| over buffers a, b, y (offset 0).
 * Returns CL_SUCCESS, or CL_INVALID_OPERATION with *out_status set to
 * CLBlast's status code. */
cl_int kiln_ocl_gemm_clblast_enqueue(cl_command_queue q, const kiln_program_gemm_t* g, cl_mem a, cl_mem b,
                                     cl_mem y, int* out_status);

#ifdef __cplusplus
}
#endif
#endif /* KILN_RUNTIME_OPENCL_OPENCL_GEMM_PROVIDER_H_ */
