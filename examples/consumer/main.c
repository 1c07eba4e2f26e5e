/* kiln_example: compile an ONNX model and run it, with the installed kiln.
 *
 *   kiln_example MODEL.onnx [OUT.kiln]
 *
 * Uses the public headers only: the compiler (kiln/compiler.h, libkiln)
 * turns the model into module bytes in memory, the runtime
 * (kiln/runtime.h, libkiln_rt) loads them and runs them once on the CPU on
 * a deterministic input; it prints the compile's figures and, per output,
 * its shape and the sum of its values. Built both with CMake
 * (find_package(kiln)) and with pkg-config (kiln.pc): see CMakeLists.txt
 * and the README's "Building against an installed kiln".
 */
#include <math.h>
#include <stdio.h>
#include <string.h>

#include "kiln/compiler.h"
#include "kiln/runtime.h"

static kiln_status_t compile(const char* model, const char* out_path, kiln_compiler_t** out) {
  kiln_compiler_t* c = NULL;
  KILN_RETURN_IF_ERROR(kiln_compiler_create(KILN_COMPILER_ABI_VERSION, &c));
  *out = c;
  KILN_RETURN_IF_ERROR(kiln_compiler_load_model(c, model));
  KILN_RETURN_IF_ERROR(kiln_compiler_set_option(c, "target", "cpu"));
  KILN_RETURN_IF_ERROR(kiln_compiler_compile(c));
  for (int32_t i = 0; i < kiln_compiler_report_count(c); ++i) {
    const kiln_compile_report_entry_t* e = kiln_compiler_report_at(c, i);
    if (strcmp(e->key, "line") != 0) printf("  %s.%s = %g\n", e->section, e->key, e->value);
  }
  if (out_path) KILN_RETURN_IF_ERROR(kiln_compiler_write_module(c, out_path));
  return NULL;
}

static kiln_status_t run(const void* bytes, size_t n, const char* name) {
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

int main(int argc, char** argv) {
  if (argc < 2 || argc > 3) {
    fprintf(stderr, "usage: kiln_example MODEL.onnx [OUT.kiln]\n");
    return 2;
  }
  printf("kiln %s (compiler ABI %d)\n", kiln_version(), (int)kiln_compiler_abi_version());
  kiln_compiler_t* c = NULL;
  kiln_status_t st = compile(argv[1], argc > 2 ? argv[2] : NULL, &c);
  const void* bytes = NULL;
  size_t n = 0;
  if (!st) st = kiln_compiler_module(c, &bytes, &n);
  if (!st) st = run(bytes, n, argv[1]);
  kiln_compiler_destroy(c);
  if (st) {
    fprintf(stderr, "kiln_example: %s\n", kiln_status_message(st));
    kiln_status_free(st);
    return 1;
  }
  return 0;
}
