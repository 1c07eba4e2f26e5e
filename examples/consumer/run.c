/* See run.h. */
#include "run.h"

#include <math.h>
#include <stdio.h>
#include <string.h>

kiln_status_t example_run(const void* bytes, size_t n, const char* name) {
  kiln_allocator_t al = kiln_allocator_system();
  kiln_module_t* m = NULL;
  kiln_device_t* d = NULL;
  kiln_session_t* s = NULL;
  kiln_array_t in[8], out[8];
  memset(in, 0, sizeof in);
  memset(out, 0, sizeof out);
  kiln_module_info_t info;
  kiln_status_t st = kiln_module_load_memory(bytes, n, name, al, &m);
  if (!st) {
    kiln_module_info(m, &info);
    if (info.n_inputs > 8 || info.n_outputs > 8)
      st = kiln_make_status(KILN_UNSUPPORTED, "%s: this example takes at most 8 inputs and outputs", name);
  }
  if (!st) st = kiln_device_open("cpu", NULL, al, &d);
  if (!st) st = kiln_session_create(m, d, NULL, &s);
  for (int32_t i = 0; !st && i < info.n_inputs; ++i) {
    kiln_dtype_t dt;
    kiln_shape_t sh = kiln_module_input_shape(m, i, &dt);
    st = kiln_array_alloc(al, dt, &sh, &in[i]);
    for (int64_t k = 0; !st && k < kiln_array_numel(&in[i]); ++k)
      kiln_store_f64(dt, in[i].data, (size_t)k, sin(0.1 * (double)k));
  }
  if (!st) st = kiln_session_run(s, in, out);
  for (int32_t i = 0; !st && i < info.n_outputs; ++i) {
    double sum = 0;
    for (int64_t k = 0; k < kiln_array_numel(&out[i]); ++k) sum += kiln_load_f64(out[i].dtype, out[i].data, (size_t)k);
    char shape[128];
    printf("output '%s' %s: sum %.6f\n", kiln_module_output_name(m, i), kiln_shape_format(&out[i].shape, shape, sizeof shape),
           sum);
  }
  for (int i = 0; i < 8; ++i) {
    kiln_array_free(al, &in[i]);
    kiln_array_free(al, &out[i]);
  }
  kiln_session_destroy(s);
  kiln_device_release(d);
  kiln_module_release(m);
  return st;
}

