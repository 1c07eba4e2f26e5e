/* `kiln bench --target opencl`'s gemm peer: CLBlast's sgemm on the device's
 * own context and queue (opencl_target.h). */
#include <stdlib.h>

#include "runtime/opencl/opencl_device.h"
#include "targets/opencl/opencl_target.h"

#ifdef KILN_HAVE_CLBLAST
#include <clblast_c.h>

#include "runtime/opencl/opencl_util.h"

/* Device time between two markers' ends, in ms. */
static double marker_ms(cl_event a, cl_event b, cl_int* err) {
  cl_ulong t0 = 0, t1 = 0;
  *err = clGetEventProfilingInfo(a, CL_PROFILING_COMMAND_END, sizeof t0, &t0, NULL);
  if (*err == CL_SUCCESS) *err = clGetEventProfilingInfo(b, CL_PROFILING_COMMAND_END, sizeof t1, &t1, NULL);
  return *err == CL_SUCCESS && t1 > t0 ? (double)(t1 - t0) * 1e-6 : 0;
}

kiln_status_t kiln_opencl_peer_sgemm(kiln_device_t* device, int64_t M, int64_t N, int64_t K, const float* a,
                                     const float* b, float* y, int32_t warmup, int32_t repeat, double* out_ms) {
  cl_context ctx;
  cl_command_queue q;
  if (!kiln_opencl_device_queue(device, &ctx, &q))
    return kiln_make_status(KILN_INVALID_ARGUMENT, "opencl peer: not an OpenCL device, or the device was lost");
  if (M < 1 || N < 1 || K < 1 || repeat < 1)
    return kiln_make_status(KILN_INVALID_ARGUMENT, "opencl peer: sgemm %lldx%lldx%lld, %d runs", (long long)M,
                            (long long)N, (long long)K, (int)repeat);
  const size_t bytes[3] = {(size_t)(M * K) * sizeof(float), (size_t)(K * N) * sizeof(float),
                           (size_t)(M * N) * sizeof(float)};
  cl_mem m[3] = {NULL, NULL, NULL};
  cl_int err = CL_SUCCESS;
  for (int i = 0; i < 3 && err == CL_SUCCESS; ++i) m[i] = clCreateBuffer(ctx, CL_MEM_READ_WRITE, bytes[i], NULL, &err);
  if (err == CL_SUCCESS) err = clEnqueueWriteBuffer(q, m[0], CL_TRUE, 0, bytes[0], a, 0, NULL, NULL);
  if (err == CL_SUCCESS) err = clEnqueueWriteBuffer(q, m[1], CL_TRUE, 0, bytes[1], b, 0, NULL, NULL);
  kiln_status_t s = err == CL_SUCCESS ? NULL : kiln_make_status(KILN_DEVICE_ERROR, "opencl peer: buffers: %s",
                                                                kiln_cl_error_name(err));
  double total = 0;
  for (int32_t r = 0; !s && r < warmup + repeat; ++r) {
    cl_event e0 = NULL, e1 = NULL;
    err = clEnqueueMarkerWithWaitList(q, 0, NULL, &e0);
    CLBlastStatusCode bs = CLBlastSuccess;
    if (err == CL_SUCCESS)
      bs = CLBlastSgemm(CLBlastLayoutRowMajor, CLBlastTransposeNo, CLBlastTransposeNo, (size_t)M, (size_t)N,
                        (size_t)K, 1.0f, m[0], 0, (size_t)K, m[1], 0, (size_t)N, 0.0f, m[2], 0, (size_t)N, &q, NULL);
    if (err == CL_SUCCESS && bs == CLBlastSuccess) err = clEnqueueMarkerWithWaitList(q, 0, NULL, &e1);
    if (err == CL_SUCCESS && bs == CLBlastSuccess) err = clFinish(q);
    if (err == CL_SUCCESS && bs == CLBlastSuccess && r >= warmup) total += marker_ms(e0, e1, &err);
    if (e0) clReleaseEvent(e0);
    if (e1) clReleaseEvent(e1);
    if (bs != CLBlastSuccess)
      s = kiln_make_status(KILN_DEVICE_ERROR, "opencl peer: CLBlastSgemm %lldx%lldx%lld: CLBlast status %d",
                           (long long)M, (long long)N, (long long)K, (int)bs);
    else if (err != CL_SUCCESS)
      s = kiln_make_status(KILN_DEVICE_ERROR, "opencl peer: sgemm %lldx%lldx%lld: %s", (long long)M, (long long)N,
                           (long long)K, kiln_cl_error_name(err));
  }
  if (!s && (err = clEnqueueReadBuffer(q, m[2], CL_TRUE, 0, bytes[2], y, 0, NULL, NULL)) != CL_SUCCESS)
    s = kiln_make_status(KILN_DEVICE_ERROR, "opencl peer: reading Y: %s", kiln_cl_error_name(err));
  for (int i = 0; i < 3; ++i)
    if (m[i]) clReleaseMemObject(m[i]);
  if (!s) *out_ms = total / repeat;
  return s;
}

#else

kiln_status_t kiln_opencl_peer_sgemm(kiln_device_t* device, int64_t M, int64_t N, int64_t K, const float* a,
                                     const float* b, float* y, int32_t warmup, int32_t repeat, double* out_ms) {
  (void)device, (void)M, (void)N, (void)K, (void)a, (void)b, (void)y, (void)warmup, (void)repeat, (void)out_ms;
  return kiln_make_status(KILN_UNSUPPORTED, "opencl peer: kiln was built without CLBlast (libclblast-dev)");
}

#endif
