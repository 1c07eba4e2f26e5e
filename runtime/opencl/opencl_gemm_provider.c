/* GEMM providers of the OpenCL device (see opencl_gemm_provider.h). */
#include "runtime/opencl/opencl_gemm_provider.h"

#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#ifdef KILN_HAVE_CLBLAST
#include <clblast_c.h>
#endif

bool kiln_ocl_have_clblast(void) {
#ifdef KILN_HAVE_CLBLAST
  return true;
#else
  return false;
#endif
}

void kiln_ocl_gemm_shape_key(const kiln_program_gemm_t* g, char* out, size_t n) {
  snprintf(out, n, "%lldx%lldx%lld%s%s batch %lld ld %lld,%lld,%lld", (long long)g->M, (long long)g->N,
           (long long)g->K, g->trans_a ? " tA" : "", g->trans_b ? " tB" : "", (long long)g->batch,
           (long long)g->lda, (long long)g->ldb, (long long)g->ldy);
}

cl_int kiln_ocl_gemm_clblast_enqueue(cl_command_queue q, const kiln_program_gemm_t* g, cl_mem a, cl_mem b,
                                     cl_mem y, int* out_status) {
  *out_status = 0;
#ifdef KILN_HAVE_CLBLAST
  const CLBlastTranspose ta = g->trans_a ? CLBlastTransposeYes : CLBlastTransposeNo;
  const CLBlastTranspose tb = g->trans_b ? CLBlastTransposeYes : CLBlastTransposeNo;
  CLBlastStatusCode st;
  if (g->batch == 1)
    st = CLBlastSgemm(CLBlastLayoutRowMajor, ta, tb, (size_t)g->M, (size_t)g->N, (size_t)g->K, g->alpha, a, 0,
                      (size_t)g->lda, b, 0, (size_t)g->ldb, 0.0f, y, 0, (size_t)g->ldy, &q, NULL);
  else
    st = CLBlastSgemmStridedBatched(CLBlastLayoutRowMajor, ta, tb, (size_t)g->M, (size_t)g->N, (size_t)g->K,
                                    g->alpha, a, 0, (size_t)g->lda, (size_t)g->sa, b, 0, (size_t)g->ldb,
                                    (size_t)g->sb, 0.0f, y, 0, (size_t)g->ldy, (size_t)g->sy,
                                    (size_t)g->batch, &q, NULL);
  if (st == CLBlastSuccess) return CL_SUCCESS;
  *out_status = (int)st;
  return CL_INVALID_OPERATION;
#else
  (void)q, (void)g, (void)a, (void)b, (void)y;
  *out_status = -1;
  return CL_INVALID_OPERATION;
#endif
}

/* ---- the record file ------------------------------------------------------ */

/* The last line for (device, driver, shape): 1 found, 0 not. */
static int record_lookup(const char* path, const char* device, const char* driver, const char* shape,
                         kiln_ocl_gemm_choice_t* out) {
  FILE* f = path && *path ? fopen(path, "r") : NULL;
  if (!f) return 0;
  char line[2048];
  int found = 0;
  while (fgets(line, sizeof line, f)) {
    if (line[0] == '#') continue;
    line[strcspn(line, "\r\n")] = 0;
    char* col[6] = {0};
    int n = 0;
    for (char* p = line; n < 6; ++n) {
      col[n] = p;
      char* t = strchr(p, '\t');
      if (!t) {
        ++n;
        break;
      }
      *t = 0;
      p = t + 1;
    }
    if (n < 6 || strcmp(col[0], device) || strcmp(col[1], driver) || strcmp(col[2], shape)) continue;
    double gk = 0, gb = 0;
    char choice[16] = "";
    if (sscanf(col[3], "kiln %lf", &gk) != 1 || sscanf(col[5], "choice %15s", choice) != 1) continue;
    if (sscanf(col[4], "clblast %lf", &gb) != 1) gb = 0; /* "clblast failed (...)" */
    if (strcmp(choice, "kiln") && strcmp(choice, "clblast")) continue;
    out->clblast = !strcmp(choice, "clblast");
    out->kiln_gflops = gk;
    out->clblast_gflops = gb;
    found = 1;
  }
  fclose(f);
  return found;
}

static void record_append(const char* path, const char* device, const char* driver, const char* shape,
                          const kiln_ocl_gemm_choice_t* c, int clblast_status) {
  if (!path || !*path) return;
  FILE* probe = fopen(path, "r");
  bool fresh = probe == NULL;
  if (probe) fclose(probe);
  FILE* f = fopen(path, "a");
  if (!f) {
    fprintf(stderr, "kiln: warning: opencl: cannot append to the GEMM provider record '%s'\n", path);
    return;
  }
  if (fresh)
    fputs("# kiln OpenCL GEMM providers: device, driver, shape, measured GFLOP/s, choice (later lines win;\n"
          "# delete a line to measure that shape again)\n",
          f);
  if (clblast_status)
    fprintf(f, "%s\t%s\t%s\tkiln %.2f\tclblast failed (status %d)\tchoice kiln\n", device, driver, shape,
            c->kiln_gflops, clblast_status);
  else
    fprintf(f, "%s\t%s\t%s\tkiln %.2f\tclblast %.2f\tchoice %s\n", device, driver, shape, c->kiln_gflops,
            c->clblast_gflops, c->clblast ? "clblast" : "kiln");
  fclose(f);
}

/* ---- timing ----------------------------------------------------------------- */

static double now_s(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

typedef struct {
  cl_command_queue q;
  cl_kernel k;
  const size_t *global, *local;
  const kiln_program_gemm_t* g;
  cl_mem a, b, y;
  int clblast_status;
} bench_t;

static cl_int run_once(bench_t* t, bool clblast) {
  cl_int err;
  if (clblast) err = kiln_ocl_gemm_clblast_enqueue(t->q, t->g, t->a, t->b, t->y, &t->clblast_status);
  else err = clEnqueueNDRangeKernel(t->q, t->k, 3, NULL, t->global, t->local, 0, NULL, NULL);
  if (err == CL_SUCCESS) err = clFinish(t->q);
  return err;
}

/* Best of 5 after a warm-up (which pays for lazy compilation), in s; <0 on
 * failure. */
static double best_time(bench_t* t, bool clblast, cl_int* err) {
  *err = run_once(t, clblast);
  double best = -1;
  for (int r = 0; r < 5 && *err == CL_SUCCESS; ++r) {
    double t0 = now_s();
    *err = run_once(t, clblast);
    double dt = now_s() - t0;
    if (*err == CL_SUCCESS && (best < 0 || dt < best)) best = dt;
  }
  return *err == CL_SUCCESS ? best : -1;
}

kiln_status_t kiln_ocl_gemm_choose(cl_context ctx, cl_command_queue q, const char* device, const char* driver,
                                   cl_kernel k, int32_t n_args, const size_t global[3], const size_t local[3],
                                   const kiln_program_gemm_t* g, const char* record, kiln_ocl_gemm_choice_t* out) {
  memset(out, 0, sizeof *out);
  if (!g->valid || !kiln_ocl_have_clblast()) return NULL;
  const char* force = getenv("KILN_OPENCL_GEMM_PROVIDER");
  if (force && !strcmp(force, "kiln")) return NULL;
  if (force && !strcmp(force, "clblast")) {
    out->clblast = true;
    return NULL;
  }
  if (force && *force && strcmp(force, "auto"))
    return kiln_make_status(KILN_INVALID_ARGUMENT, "KILN_OPENCL_GEMM_PROVIDER='%s': expected kiln, clblast or auto",
                            force);
  char shape[160];
  kiln_ocl_gemm_shape_key(g, shape, sizeof shape);
  if (record_lookup(record, device, driver, shape, out)) return NULL;

  /* Scratch operands of the shape; the kernel's other parameters (an unused
   * packing workspace) get a small buffer. */
  cl_int err = CL_SUCCESS;
  cl_mem m[4] = {NULL, NULL, NULL, NULL};
  const uint64_t bytes[4] = {kiln_program_gemm_operand_bytes(g, 0), kiln_program_gemm_operand_bytes(g, 1),
                             kiln_program_gemm_operand_bytes(g, 2), 64};
  for (int i = 0; i < 4 && err == CL_SUCCESS; ++i) {
    m[i] = clCreateBuffer(ctx, CL_MEM_READ_WRITE, (size_t)bytes[i], NULL, &err);
    if (err == CL_SUCCESS && i < 2) {
      const float v = i ? 0.25f : 0.5f;
      err = clEnqueueFillBuffer(q, m[i], &v, sizeof v, 0, (size_t)bytes[i], 0, NULL, NULL);
    }
  }
  for (int32_t j = 0; j < n_args && err == CL_SUCCESS; ++j) {
    cl_mem b = j == g->a ? m[0] : j == g->b ? m[1] : j == g->y ? m[2] : m[3];
    err = clSetKernelArg(k, (cl_uint)j, sizeof(cl_mem), &b);
  }
  kiln_status_t s = NULL;
  if (err == CL_SUCCESS) {
    bench_t t = {q, k, global, local, g, m[0], m[1], m[2], 0};
    const double flop = 2.0 * (double)g->M * (double)g->N * (double)g->K * (double)g->batch;
    double tk = best_time(&t, false, &err);
    if (err == CL_SUCCESS) {
      cl_int berr;
      double tb = best_time(&t, true, &berr);
      out->measured = true;
      out->kiln_gflops = flop / tk * 1e-9;
      out->clblast_gflops = tb > 0 ? flop / tb * 1e-9 : 0;
      out->clblast = tb > 0 && tb < tk;
      record_append(record, device, driver, shape, out, tb > 0 ? 0 : (t.clblast_status ? t.clblast_status : (int)berr));
    }
  }
  if (err != CL_SUCCESS && !s)
    s = kiln_make_status(err == CL_OUT_OF_RESOURCES || err == CL_MEM_OBJECT_ALLOCATION_FAILURE ? KILN_OUT_OF_MEMORY
                                                                                                : KILN_DEVICE_ERROR,
                         "opencl: timing GEMM %s for the provider choice: CL error %d", shape, (int)err);
  for (int i = 0; i < 4; ++i)
    if (m[i]) clReleaseMemObject(m[i]);
  return s;
}
