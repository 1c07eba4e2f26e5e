/* OpenCL sgemm: kiln's GEMM template (kernels/opencl/gemm.cl, the instance
 * the OpenCL emitter prints for MatMul/Gemm) vs CLBlast, on one OpenCL
 * device, same process, same buffers and queue.
 *
 *   kiln_bench_opencl_sgemm [--device N] [--reps R] [--sweep] [MxNxK ...]
 *
 * Per shape: warm-up, then the median of R timed runs (wall time from an
 * idle queue to clFinish) of C = A x B (row-major f32), each result checked against
 * a double-precision CPU dot product on sampled elements. Prints
 *   opencl sgemm 1024x1024x1024: kiln 48.1 GFLOP/s, clblast 15.2 GFLOP/s (3.16x)
 * The tiles are the rule set's a compile for the device takes: the GPU
 * rules sized to its limits (kiln_opencl_gemm_gpu_tiles, partial sums
 * private) on a GPU, PoCL's measured ones on a CPU device;
 * KILN_OPENCL_RULES=gpu|cpu forces either (a "rules:" line says which).
 * --sweep tries the tile configurations below at every shape and prints each
 * (that is how kiln_opencl_gemm_default_tiles was chosen);
 * KILN_OPENCL_GEMM_TILES=tm,tn,vw,wx,wy,bk,mm,mn overrides the tiles, as it
 * does for the emitter's GEMM instances.
 * --record FILE appends the per-shape provider choice, one line per shape:
 *   "<device>\t<M>x<N>x<K>\tkiln <GFLOP/s>\tclblast <GFLOP/s>\tchoice kiln|clblast"
 */
#define CL_TARGET_OPENCL_VERSION 120
#define CL_USE_DEPRECATED_OPENCL_1_2_APIS
#include <CL/cl.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "compiler/pipeline.h"
#include "runtime/opencl/opencl_util.h"
#include "targets/opencl/opencl_internal.h"

#ifdef KILN_HAVE_CLBLAST
#include <clblast_c.h>
#endif

#define CK(x)                                                                        \
  do {                                                                               \
    cl_int e_ = (x);                                                                 \
    if (e_ != CL_SUCCESS) {                                                          \
      fprintf(stderr, "%s:%d: %s: %s\n", __FILE__, __LINE__, #x, kiln_cl_error_name(e_)); \
      exit(1);                                                                       \
    }                                                                                \
  } while (0)

static cl_context ctx;
static cl_command_queue q;
static cl_device_id dev;
/* the GPU rules (the device's class or KILN_OPENCL_RULES) and its limits */
static bool g_gpu;
static kiln_template_limits_t g_lim;

static int cmp_d(const void* a, const void* b) {
  double x = *(const double*)a, y = *(const double*)b;
  return x < y ? -1 : x > y;
}

#include <time.h>
/* Wall time: CLBlast may run several kernels (padding, transposes) per
 * call and its event covers only the last, so both providers are timed
 * from an idle queue to clFinish. */
static double now_s(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

static uint64_t rng = 0x9e3779b97f4a7c15ull;
static float frand(void) {
  rng ^= rng << 13;
  rng ^= rng >> 7;
  rng ^= rng << 17;
  return (float)((double)(rng >> 11) / (double)(1ull << 53) * 2.0 - 1.0);
}

/* Max relative error of sampled elements of C against double dot products. */
static double check(const float* A, const float* B, const float* C, int M, int N, int K) {
  double worst = 0;
  for (int s = 0; s < 256; ++s) {
    int i = (int)((unsigned)(s * 2654435761u) % (unsigned)M);
    int j = (int)((unsigned)(s * 40503u + 17) % (unsigned)N);
    if (s == 0) i = M - 1, j = N - 1;
    double ref = 0, mag = 0;
    for (int k = 0; k < K; ++k) {
      ref += (double)A[(size_t)i * K + k] * B[(size_t)k * N + j];
      mag += fabs((double)A[(size_t)i * K + k] * B[(size_t)k * N + j]);
    }
    double e = fabs(C[(size_t)i * N + j] - ref) / (mag > 1e-30 ? mag : 1.0);
    if (e > worst) worst = e;
  }
  return worst;
}

typedef struct shape_s {
  int M, N, K;
  const char* what;
} shape_t;

/* Builds the template instance for M x N x K with |t|. */
static cl_kernel build_kiln(int M, int N, int K, kiln_opencl_gemm_tiles_t t, cl_program* out_prog) {
  kiln_template_gemm_t g;
  memset(&g, 0, sizeof g);
  g.M = M, g.N = N, g.K = K, g.batch = 1;
  g.lda = K, g.ldb = N, g.ldy = N;
  g.alpha = 1.0f, g.beta = 0.0f;
  g.n_params = 3;
  memcpy(g.roles, "ABY", 4);
  kiln_cf_out_t out;
  kiln_cf_out_init(&out);
  kiln_status_t s = kiln_opencl_gemm_print_psum(&g, &t, g_gpu, "kiln_sgemm", &out);
  if (s) {
    fprintf(stderr, "%s\n", kiln_status_message(s));
    exit(1);
  }
  cl_int err;
  const char* src = out.data;
  size_t len = out.len;
  cl_program p = clCreateProgramWithSource(ctx, 1, &src, &len, &err);
  CK(err);
  err = clBuildProgram(p, 1, &dev, "-cl-std=CL1.2 -cl-mad-enable", NULL, NULL);
  if (err != CL_SUCCESS) {
    char log[16384] = "";
    clGetProgramBuildInfo(p, dev, CL_PROGRAM_BUILD_LOG, sizeof log - 1, log, NULL);
    fprintf(stderr, "build failed: %s\n%s\n", kiln_cl_error_name(err), log);
    exit(1);
  }
  if (getenv("KILN_BENCH_LOG")) {
    char log[16384] = "";
    clGetProgramBuildInfo(p, dev, CL_PROGRAM_BUILD_LOG, sizeof log - 1, log, NULL);
    fprintf(stderr, "%s\n", log);
  }
  kiln_cf_out_free(&out);
  cl_kernel k = clCreateKernel(p, "kiln_sgemm", &err);
  CK(err);
  *out_prog = p;
  return k;
}

static double run_kiln(int M, int N, int K, kiln_opencl_gemm_tiles_t t, cl_mem a, cl_mem b, cl_mem c,
                       int reps, float* host_c) {
  cl_program p;
  cl_kernel k = build_kiln(M, N, K, t, &p);
  CK(clSetKernelArg(k, 0, sizeof a, &a));
  CK(clSetKernelArg(k, 1, sizeof b, &b));
  CK(clSetKernelArg(k, 2, sizeof c, &c));
  kiln_template_gemm_t g = {.M = M, .N = N, .K = K, .batch = 1};
  int64_t groups[3], local[3];
  kiln_opencl_gemm_launch(&g, &t, groups, local);
  size_t gl[3], lo[3];
  for (int i = 0; i < 3; ++i) gl[i] = (size_t)(groups[i] * local[i]), lo[i] = (size_t)local[i];
  double* ts = malloc(sizeof(double) * (size_t)reps);
  for (int r = -1; r < reps; ++r) {
    CK(clFinish(q));
    double t0 = now_s();
    CK(clEnqueueNDRangeKernel(q, k, 3, NULL, gl, lo, 0, NULL, NULL));
    CK(clFinish(q));
    if (r >= 0) ts[r] = now_s() - t0;
  }
  qsort(ts, (size_t)reps, sizeof *ts, cmp_d);
  double med = ts[reps / 2];
  free(ts);
  CK(clEnqueueReadBuffer(q, c, CL_TRUE, 0, sizeof(float) * (size_t)M * N, host_c, 0, NULL, NULL));
  clReleaseKernel(k);
  clReleaseProgram(p);
  return med;
}

#ifdef KILN_HAVE_CLBLAST
static double run_clblast(int M, int N, int K, cl_mem a, cl_mem b, cl_mem c, int reps, float* host_c) {
  double* ts = malloc(sizeof(double) * (size_t)reps);
  for (int r = -1; r < reps; ++r) {
    CK(clFinish(q));
    double t0 = now_s();
    CLBlastStatusCode st = CLBlastSgemm(CLBlastLayoutRowMajor, CLBlastTransposeNo, CLBlastTransposeNo,
                                        (size_t)M, (size_t)N, (size_t)K, 1.0f, a, 0, (size_t)K, b, 0,
                                        (size_t)N, 0.0f, c, 0, (size_t)N, &q, NULL);
    if (st != CLBlastSuccess) {
      fprintf(stderr, "CLBlastSgemm: status %d\n", (int)st);
      free(ts);
      return -1;
    }
    CK(clFinish(q));
    if (r >= 0) ts[r] = now_s() - t0;
  }
  qsort(ts, (size_t)reps, sizeof *ts, cmp_d);
  double med = ts[reps / 2];
  free(ts);
  CK(clEnqueueReadBuffer(q, c, CL_TRUE, 0, sizeof(float) * (size_t)M * N, host_c, 0, NULL, NULL));
  return med;
}
#endif

static const kiln_opencl_gemm_tiles_t sweep_tiles[] = {
    /* tm tn vw wx wy bk mm mn */
    {8, 32, 16, 2, 4, 64, 1, 1},   {8, 32, 16, 1, 1, 256, 8, 4},  {8, 32, 16, 1, 1, 256, 4, 4},
    {8, 32, 16, 1, 1, 128, 8, 4},  {6, 32, 16, 1, 1, 256, 8, 4},  {8, 32, 16, 1, 1, 256, 16, 2},
    {8, 32, 16, 1, 1, 512, 8, 4},  {8, 32, 16, 2, 2, 256, 4, 2},  {12, 32, 16, 1, 1, 256, 4, 4},
    {8, 48, 16, 1, 1, 256, 8, 2},  {4, 64, 16, 1, 1, 256, 8, 2},  {8, 32, 16, 1, 1, 256, 8, 8},
};

int main(int argc, char** argv) {
  int devi = 0, reps = 7;
  bool sweep = false;
  const char* record = NULL;
  shape_t shapes[32];
  int ns = 0;
  for (int i = 1; i < argc; ++i) {
    if (!strcmp(argv[i], "--device") && i + 1 < argc) devi = atoi(argv[++i]);
    else if (!strcmp(argv[i], "--reps") && i + 1 < argc) reps = atoi(argv[++i]);
    else if (!strcmp(argv[i], "--sweep")) sweep = true;
    else if (!strcmp(argv[i], "--record") && i + 1 < argc) record = argv[++i];
    else if (ns < 32 && sscanf(argv[i], "%dx%dx%d", &shapes[ns].M, &shapes[ns].N, &shapes[ns].K) == 3)
      shapes[ns++].what = "";
    else {
      fprintf(stderr, "usage: %s [--device N] [--reps R] [--sweep] [--record FILE] [MxNxK ...]\n", argv[0]);
      return 2;
    }
  }
  if (reps < 1) reps = 1;
  if (ns == 0) {
    const shape_t def[] = {{256, 256, 256, ""},
                           {512, 512, 512, ""},
                           {1024, 1024, 1024, ""},
                           {3136, 64, 576, " (resnet18 conv2.x as implicit GEMM)"},
                           {784, 128, 1152, " (resnet18 conv3.x)"},
                           {196, 256, 2304, " (resnet18 conv4.x)"},
                           {1, 1000, 512, " (resnet18 fc)"}};
    ns = (int)(sizeof def / sizeof def[0]);
    memcpy(shapes, def, sizeof def);
  }
  cl_platform_id plats[8];
  cl_uint np = 0;
  if (clGetPlatformIDs(8, plats, &np) != CL_SUCCESS || np == 0) {
    fprintf(stderr, "no OpenCL platform\n");
    return 1;
  }
  int seen = 0;
  bool found = false;
  for (cl_uint p = 0; p < np && !found; ++p) {
    cl_device_id ds[16];
    cl_uint nd = 0;
    if (clGetDeviceIDs(plats[p], CL_DEVICE_TYPE_ALL, 16, ds, &nd) != CL_SUCCESS) continue;
    for (cl_uint d = 0; d < nd && !found; ++d, ++seen)
      if (seen == devi) dev = ds[d], found = true;
  }
  if (!found) {
    fprintf(stderr, "OpenCL device %d not found\n", devi);
    return 1;
  }
  char name[256] = "";
  clGetDeviceInfo(dev, CL_DEVICE_NAME, sizeof name, name, NULL);
  printf("device: %s\n", name);
  /* what a compile for this device sees of it (runtime/opencl/opencl_build.c) */
  kiln_device_info_t info;
  memset(&info, 0, sizeof info);
  snprintf(info.api, sizeof info.api, "opencl");
  cl_device_type dtype = 0;
  size_t wg = 0;
  cl_ulong lmem = 0;
  cl_uint cus = 0, warp = 0;
  clGetDeviceInfo(dev, CL_DEVICE_TYPE, sizeof dtype, &dtype, NULL);
  clGetDeviceInfo(dev, CL_DEVICE_MAX_WORK_GROUP_SIZE, sizeof wg, &wg, NULL);
  clGetDeviceInfo(dev, CL_DEVICE_LOCAL_MEM_SIZE, sizeof lmem, &lmem, NULL);
  clGetDeviceInfo(dev, CL_DEVICE_MAX_COMPUTE_UNITS, sizeof cus, &cus, NULL);
  if (clGetDeviceInfo(dev, 0x4003 /* CL_DEVICE_WARP_SIZE_NV */, sizeof warp, &warp, NULL) != CL_SUCCESS) warp = 0;
  if (!warp && clGetDeviceInfo(dev, 0x4043 /* CL_DEVICE_WAVEFRONT_WIDTH_AMD */, sizeof warp, &warp, NULL) != CL_SUCCESS)
    warp = 0;
  info.cpu_backed = (dtype & CL_DEVICE_TYPE_CPU) != 0;
  info.max_workgroup_size = (int64_t)wg;
  info.local_mem_bytes = lmem;
  info.compute_units = (int32_t)cus;
  info.subgroup_size = (int32_t)warp;
  kiln_compile_device_limits(&info, &g_lim);
  g_gpu = kiln_opencl_rules_gpu(g_lim.gpu_lacks);
  printf("rules: %s (max work-group %lld, local memory %llu bytes, warp %d, %d compute units)\n", g_gpu ? "gpu" : "cpu",
         (long long)g_lim.max_workgroup_size, (unsigned long long)g_lim.local_mem_bytes, (int)g_lim.warp,
         (int)g_lim.compute_units);
  cl_int err;
  ctx = clCreateContext(NULL, 1, &dev, NULL, NULL, &err);
  CK(err);
  q = clCreateCommandQueue(ctx, dev, CL_QUEUE_PROFILING_ENABLE, &err);
  CK(err);
  const char* env = getenv("KILN_OPENCL_GEMM_TILES");
  int fails = 0;
  for (int s = 0; s < ns; ++s) {
    const int M = shapes[s].M, N = shapes[s].N, K = shapes[s].K;
    const size_t na = (size_t)M * K, nb = (size_t)K * N, nc = (size_t)M * N;
    float* A = malloc(na * 4);
    float* B = malloc(nb * 4);
    float* C = malloc(nc * 4);
    for (size_t i = 0; i < na; ++i) A[i] = frand();
    for (size_t i = 0; i < nb; ++i) B[i] = frand();
    cl_mem a = clCreateBuffer(ctx, CL_MEM_READ_ONLY | CL_MEM_COPY_HOST_PTR, na * 4, A, &err);
    CK(err);
    cl_mem b = clCreateBuffer(ctx, CL_MEM_READ_ONLY | CL_MEM_COPY_HOST_PTR, nb * 4, B, &err);
    CK(err);
    cl_mem c = clCreateBuffer(ctx, CL_MEM_READ_WRITE, nc * 4, NULL, &err);
    CK(err);
    const double flop = 2.0 * M * N * K;
    kiln_opencl_gemm_tiles_t t =
        g_gpu ? kiln_opencl_gemm_gpu_tiles(M, N, K, &g_lim) : kiln_opencl_gemm_default_tiles(M, N, K);
    if (env && env[0] && !kiln_opencl_tiles_from_env("KILN_OPENCL_GEMM_TILES", &t)) {
      fprintf(stderr, "KILN_OPENCL_GEMM_TILES '%s': expected tm,tn,vw,wx,wy,bk,mm,mn (positive, tn a multiple of vw)\n",
              env);
      return 2;
    }
    if (sweep) {
      for (size_t i = 0; i < sizeof sweep_tiles / sizeof sweep_tiles[0]; ++i) {
        kiln_opencl_gemm_tiles_t st = sweep_tiles[i];
        double sec = run_kiln(M, N, K, st, a, b, c, reps, C);
        double e = check(A, B, C, M, N, K);
        printf("  %dx%dx%d tiles tm %d tn %d vw %d wx %d wy %d bk %d mm %d mn %d: %.1f GFLOP/s (err %.1e)\n",
               M, N, K, st.tm, st.tn, st.vw, st.wx, st.wy, st.bk, st.mm, st.mn, flop / sec * 1e-9, e);
        fflush(stdout);
      }
    }
    double tk = run_kiln(M, N, K, t, a, b, c, reps, C);
    double ek = check(A, B, C, M, N, K);
    if (ek > 1e-5) {
      fprintf(stderr, "kiln sgemm %dx%dx%d: wrong result (rel err %.3g)\n", M, N, K, ek);
      ++fails;
    }
    double gk = flop / tk * 1e-9;
#ifdef KILN_HAVE_CLBLAST
    double tb = run_clblast(M, N, K, a, b, c, reps, C);
    double eb = tb > 0 ? check(A, B, C, M, N, K) : 1;
    if (tb > 0 && eb <= 1e-5) {
      double gb = flop / tb * 1e-9;
      printf("opencl sgemm %dx%dx%d: kiln %.1f GFLOP/s, clblast %.1f GFLOP/s (%.2fx)%s\n", M, N, K, gk,
             gb, gk / gb, shapes[s].what);
      if (record) {
        FILE* rf = fopen(record, "a");
        if (rf) {
          fprintf(rf, "%s\t%dx%dx%d\tkiln %.1f\tclblast %.1f\tchoice %s\n", name, M, N, K, gk, gb,
                  gk >= gb ? "kiln" : "clblast");
          fclose(rf);
        } else {
          fprintf(stderr, "cannot append to %s\n", record);
        }
      }
    } else {
      printf("opencl sgemm %dx%dx%d: kiln %.1f GFLOP/s, clblast failed (err %.3g)%s\n", M, N, K, gk, eb,
             shapes[s].what);
    }
#else
    printf("opencl sgemm %dx%dx%d: kiln %.1f GFLOP/s, clblast not built%s\n", M, N, K, gk,
           shapes[s].what);
#endif
    fflush(stdout);
    clReleaseMemObject(a);
    clReleaseMemObject(b);
    clReleaseMemObject(c);
    free(A);
    free(B);
    free(C);
  }
  clReleaseCommandQueue(q);
  clReleaseContext(ctx);
  return fails ? 1 : 0;
}
