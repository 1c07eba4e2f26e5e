/* kiln-rt-run: runs a .kiln module with nothing but libkiln_rt -- what an
 * application that ships compiled models does, and the proof that the
 * runtime library stands alone (no compiler, no ONNX, no protobuf).
 *
 *   kiln-rt-run MODULE.kiln [--device cpu|opencl[:N]|vulkan[:N]]
 *               [--input NAME=FILE.npy ...] [--output DIR] [--runs N]
 *               [--verify-key KEY.pub]
 *
 * Inputs not given are zero. Outputs are written as DIR/<name>.npy. With
 * --runs N > 1 the runs are pipelined through the session's slots (enqueue
 * the next before waiting for the previous) and the throughput is printed.
 * With --verify-key the module must be signed by that key (docs/TRUST.md);
 * anything else is refused before its code is built. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>

#include "kiln/runtime.h"
#include "kiln/npy.h"

static double now_s(void) {
  struct timespec t;
  clock_gettime(CLOCK_MONOTONIC, &t);
  return (double)t.tv_sec + 1e-9 * (double)t.tv_nsec;
}

static int fail(kiln_status_t s) {
  fprintf(stderr, "kiln-rt-run: error: %s\n", kiln_status_message(s));
  kiln_status_free(s);
  return 1;
}

int main(int argc, char** argv) {
  const char* path = NULL;
  const char* device = NULL;
  const char* outdir = NULL;
  const char* inputs[64];
  const char* verify_key = NULL;
  int n_inputs = 0, runs = 1;
  for (int i = 1; i < argc; ++i) {
    if (!strcmp(argv[i], "--device") && i + 1 < argc) device = argv[++i];
    else if (!strcmp(argv[i], "--output") && i + 1 < argc) outdir = argv[++i];
    else if (!strcmp(argv[i], "--input") && i + 1 < argc && n_inputs < 64) inputs[n_inputs++] = argv[++i];
    else if (!strcmp(argv[i], "--runs") && i + 1 < argc) runs = atoi(argv[++i]);
    else if (!strcmp(argv[i], "--verify-key") && i + 1 < argc) verify_key = argv[++i];
    else if (argv[i][0] != '-' && !path) path = argv[i];
    else {
      fprintf(stderr, "usage: kiln-rt-run MODULE.kiln [--device D] [--input NAME=FILE.npy ...] "
                      "[--output DIR] [--runs N] [--verify-key KEY.pub]\n");
      return 2;
    }
  }
  if (!path || runs < 1) {
    fprintf(stderr, "usage: kiln-rt-run MODULE.kiln [--device D] [--input NAME=FILE.npy ...] [--output DIR] [--runs N] [--verify-key KEY.pub]\n");
    return 2;
  }
  kiln_allocator_t al = kiln_allocator_system();
  kiln_module_t* m = NULL;
  kiln_device_t* d = NULL;
  kiln_session_t* s = NULL;
  kiln_module_load_options_t lo = {.verify_key_file = verify_key};
  kiln_status_t st = kiln_module_load_file_opts(path, &lo, al, &m);
  if (st) return fail(st);
  kiln_module_info_t mi;
  kiln_module_info(m, &mi);
  int rc = 0;
  kiln_array_t* in = calloc((size_t)mi.n_inputs + 1, sizeof(kiln_array_t));
  kiln_array_t* out = calloc((size_t)mi.n_outputs + 1, sizeof(kiln_array_t));
  if (!in || !out) {
    st = kiln_make_status(KILN_OUT_OF_MEMORY, "out of memory");
    goto done;
  }
  for (int32_t k = 0; k < mi.n_inputs && !st; ++k) {
    const char* name = kiln_module_input_name(m, k);
    for (int i = 0; i < n_inputs; ++i)
      if (!strncmp(inputs[i], name, strlen(name)) && inputs[i][strlen(name)] == '=')
        st = kiln_npy_read(inputs[i] + strlen(name) + 1, al, &in[k]);
    if (!st && !in[k].data) {
      kiln_dtype_t dt;
      kiln_shape_t sh = kiln_module_input_shape(m, k, &dt);
      st = kiln_array_alloc(al, dt, &sh, &in[k]);
    }
  }
  if (!st) st = kiln_device_open(device ? device : mi.target, NULL, al, &d);
  if (!st) st = kiln_session_create(m, d, NULL, &s);
  if (st) goto done;
  double t0 = now_s();
  uint64_t prev = 0;
  bool have_prev = false;
  for (int r = 0; r < runs && !st; ++r) {
    uint64_t run;
    st = kiln_session_enqueue(s, in, &run);
    if (!st && have_prev) {
      for (int32_t k = 0; k < mi.n_outputs; ++k) kiln_array_free(al, &out[k]);
      st = kiln_session_wait(s, prev, out);
    }
    prev = run;
    have_prev = !st;
  }
  if (!st && have_prev) {
    for (int32_t k = 0; k < mi.n_outputs; ++k) kiln_array_free(al, &out[k]);
    st = kiln_session_wait(s, prev, out);
  }
  if (st) goto done;
  double dt = now_s() - t0;
  printf("%s on %s: %d runs in %.2f ms (%.3f ms/run, pipelined)\n", path, kiln_device_name(d), runs, dt * 1e3,
         dt * 1e3 / runs);
  for (int32_t k = 0; k < mi.n_outputs && outdir && !st; ++k) {
    char p[4096];
    mkdir(outdir, 0777);
    snprintf(p, sizeof p, "%s/%s.npy", outdir, kiln_module_output_name(m, k));
    st = kiln_npy_write(p, &out[k]);
    if (!st) printf("wrote %s\n", p);
  }
done:
  if (st) rc = fail(st);
  for (int32_t k = 0; in && k < mi.n_inputs; ++k) kiln_array_free(al, &in[k]);
  for (int32_t k = 0; out && k < mi.n_outputs; ++k) kiln_array_free(al, &out[k]);
  free(in);
  free(out);
  kiln_session_destroy(s);
  kiln_device_release(d);
  kiln_module_release(m);
  return rc;
}
