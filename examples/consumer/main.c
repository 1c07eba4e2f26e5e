/* kiln_example: compile an ONNX model and run it, with the installed kiln.
 *
 *   kiln_example MODEL.onnx [OUT.kiln]
 *
 * Uses the public headers only: the compiler (kiln/compiler.h, libkiln)
 * turns the model into module bytes in memory and prints the compile's
 * figures; the runtime (kiln/runtime.h, libkiln_rt) runs them (run.c).
 * kiln_run_module.c is the same run for a module file with the runtime
 * alone. Built both with CMake (find_package(kiln)) and with pkg-config
 * (kiln.pc, kiln-runtime.pc): see CMakeLists.txt and the README's
 * "Building against an installed kiln".
 */
#include <stdio.h>
#include <string.h>

#include "kiln/compiler.h"
#include "run.h"

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
  if (!st) st = example_run(bytes, n, argv[1]);
  kiln_compiler_destroy(c);
  if (st) {
    fprintf(stderr, "kiln_example: %s\n", kiln_status_message(st));
    kiln_status_free(st);
    return 1;
  }
  return 0;
}
