/* The compile-and-run path shared by `kiln run`, `kiln compile` and
 * `kiln devices`: a prepared graph -> plan -> fused plan -> program ->
 * module, and a module -> device -> session. */
#ifndef KILN_TOOLS_RUNNER_H_
#define KILN_TOOLS_RUNNER_H_

#include <stdio.h>

#include "ir/graph.h"
#include "kiln/runtime.h"
#include "runtime/program.h"

typedef struct kiln_cli_compile_s {
  kiln_program_target_t target;
  int opt;              /* -O level: >= 1 fuses kernels */
  int threads;
  const char* dump_dir; /* plan and generated source */
  const char* model_name;
} kiln_cli_compile_t;

/* Lowers, fuses and builds the program of a prepared graph, printing what
 * each step did ("fused ...", "compiled N kernels ..."). */
kiln_status_t kiln_cli_compile(kiln_graph_t* g, const kiln_cli_compile_t* c, kiln_program_t** out);

/* Parses a target name ("cpu", "opencl", "vulkan"). */
bool kiln_cli_parse_target(const char* name, kiln_program_target_t* out);

/* Opens a device by name ("cpu", "opencl:1", ...); without its driver it
 * falls back to the CPU with the reason on stderr, unless |strict|. */
kiln_status_t kiln_cli_open_device(const char* name, bool strict, int threads, kiln_device_t** out);

/* Creates a session of |m| on |dev|; prints the memory plan and the build
 * time of the device code. */
kiln_status_t kiln_cli_session(kiln_module_t* m, kiln_device_t* dev, const kiln_session_options_t* so,
                               kiln_session_t** out_session);

/* `kiln devices`. */
int kiln_cmd_devices(int argc, char** argv);

#endif
