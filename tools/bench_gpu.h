/* `kiln bench --target opencl|vulkan`: a bench case on a GPU target
 * (tools/bench_gpu.c). */
#ifndef KILN_TOOLS_BENCH_GPU_H_
#define KILN_TOOLS_BENCH_GPU_H_

#include "kiln/runtime.h"
#include "tools/bench_cases.h"

/* Opens |target| ("opencl[:N]" / "vulkan[:N]") without falling back to the
 * CPU: an error says why there is no such device. */
kiln_status_t bench_gpu_open(const char* target, kiln_device_t** out);

/* Compiles case |c| for the device's target as `kiln compile -O1` does
 * (with the device's loop limit), runs it |warmup| + |repeat| times with
 * per-dispatch timestamps and gives the mean kernel time of the timed runs
 * (*out_ms: the device's timestamps, uploads and downloads left out, as the
 * CPU rows leave out allocation), its FLOPs and the bytes of its inputs and
 * outputs. The result is checked against the reference interpreter: a
 * mismatch is an error naming the case. */
/* On OpenCL the device chooses each GEMM's provider, kiln's template or a
 * CLBlast call, by measurement (runtime/opencl/opencl_gemm_provider.h).
 * |gemm_provider| "kiln" or "clblast" asks for one while the case's session
 * is made (NULL: the device's own choice; other targets ignore it): the
 * bench's kiln rows ask for "kiln". */
kiln_status_t bench_gpu_run(kiln_device_t* d, const bench_case_t* c, const char* gemm_provider, int32_t warmup,
                            int32_t repeat, double* out_ms, double* out_flops, double* out_bytes);

/* Gemm case |c|'s peer row: the target's peer library (targets/registry.h
 * peer_sgemm: CLBlast on OpenCL) on the same operands as the kiln row, its
 * mean device time, checked against the reference interpreter like the
 * kiln row. UNSUPPORTED when the target or this build has no peer. */
kiln_status_t bench_gpu_peer(kiln_device_t* d, const bench_case_t* c, int32_t warmup, int32_t repeat, double* out_ms,
                             double* out_flops, double* out_bytes);

#endif /* KILN_TOOLS_BENCH_GPU_H_ */
