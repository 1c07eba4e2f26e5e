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
kiln_status_t bench_gpu_run(kiln_device_t* d, const bench_case_t* c, int32_t warmup, int32_t repeat,
                            double* out_ms, double* out_flops, double* out_bytes);

#endif /* KILN_TOOLS_BENCH_GPU_H_ */
