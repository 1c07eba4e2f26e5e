/* What `kiln run`, `kiln compile` and `kiln devices` share around the
 * compile driver (api/driver.h, which owns the order of the compile's
 * steps): printing its log, embedding device binaries, opening a device,
 * and a module -> device -> session with its memory plan printed. */
#ifndef KILN_TOOLS_RUNNER_H_
#define KILN_TOOLS_RUNNER_H_

#include <stdio.h>

#include "compiler/pipeline.h"
#include "ir/graph.h"
#include "kiln/runtime.h"
#include "lowering/precision.h"
#include "runtime/program.h"
#include "targets/registry.h"

/* --precision and its companions (kiln compile / kiln run): the
 * pipeline's options (compiler/pipeline.h). */
typedef kiln_compile_precision_t kiln_cli_precision_t;

static inline void kiln_cli_precision_default(kiln_cli_precision_t* p) { kiln_compile_precision_default(p); }

/* Prints the lines of |log| from entry |from| on: warnings and notes on
 * stderr ("kiln: warning: ..."), the rest on stdout. */
/* Prints "kiln: error: MESSAGE" for |s| (consumed) to stderr; returns 1,
 * the exit status of a command that failed. */
int kiln_cli_fail(kiln_status_t s);

void kiln_cli_print_log(const kiln_compile_log_t* log, int32_t from);
/* The same without section |skip|'s lines (`kiln run` leaves the graph
 * passes' lines to `kiln compile`); returns the entries seen, where the
 * next call starts. */
int32_t kiln_cli_print_log_but(const kiln_compile_log_t* log, int32_t from, const char* skip);

/* `kiln compile -o` for a target whose device has its own code form
 * (OpenCL program binaries; kiln_device_api_t.embed_binaries): builds
 * |prog|'s code on |target|:|device| and adds it to |prog|, printing what
 * it embedded. |device| -1: device 0, and a device that cannot be had or
 * cannot build the code (a module for another machine) is a note and no
 * binary; KILN_CLI_NO_DEVICE: nothing. An explicit device that fails is an
 * error. Targets without device code: nothing. The build's progress line
 * goes to |progress| (NULL: quiet). */
#define KILN_CLI_NO_DEVICE (-2)
/* Drivers that compile each kernel at its first launch (lavapipe builds a
 * shader's machine code at its first dispatch, PoCL a kernel's work-group
 * function at its first launch) do most of a cold start's work in the
 * first run, where no line can count it: with a |progress| file and such
 * a device (one backed by the host's CPU), this launches every kernel of
 * |s| once, one at a time on slot 0's buffers, and counts them on the
 * progress line; the first run then finds them compiled. The launches
 * compute on a zeroed arena (a run overwrites it). NULL
 * |progress|, the CPU device or a split session: nothing. */
kiln_status_t kiln_cli_first_launches(kiln_session_t* s, FILE* progress);

/* Where a device build's progress line goes: nowhere with |quiet|, else
 * stderr when |forced| (--progress) or when stderr is a terminal. */
FILE* kiln_cli_progress_file(bool forced, bool quiet);

kiln_status_t kiln_cli_embed_binaries(kiln_program_t* prog, const char* target, int32_t device, int threads,
                                      FILE* progress);

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
