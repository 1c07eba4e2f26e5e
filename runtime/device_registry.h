/* Device APIs by name: the runtime half of kiln's target registry.
 *
 * A device API runs one target's programs ("cpu", "opencl", "vulkan"): it
 * opens a device by index, lists its devices for `kiln devices`, and says
 * in which form the programs it runs carry their code. Each API lives in
 * its own folder (runtime/<name>/) and defines one
 *
 *   const kiln_device_api_t kiln_device_api_<name>;
 *
 * The build writes the names of the targets it compiles in (CMake's
 * KILN_TARGETS list, filtered by what each target's targets/<name>/
 * target.cmake finds) into kiln_targets.inc, and device_registry.c
 * collects their entries from it. Nothing else in the runtime names a
 * target: kiln_device_open, the module loader and program validation look
 * the API up here. The compiler's half is targets/registry.h.
 *
 * Entries are static constants: thread-safe, never freed.
 */
#ifndef KILN_RUNTIME_DEVICE_REGISTRY_H_
#define KILN_RUNTIME_DEVICE_REGISTRY_H_

#include <stdio.h>

#include "kiln/runtime.h"
#include "runtime/device.h"

#ifdef __cplusplus
extern "C" {
#endif

/* How a program for this API carries its code (kiln_program_code_t). */
typedef enum kiln_code_form_e {
  /* One source text split into parts (prelude, units, epilogue) that the
   * loader may compile separately: the CPU's C. */
  KILN_CODE_SOURCE_PARTS = 0,
  /* One source text: OpenCL C. */
  KILN_CODE_SOURCE,
  /* One binary per kernel, in kernel order (the text is optional, for
   * dumps): SPIR-V. */
  KILN_CODE_BLOB_PER_KERNEL,
} kiln_code_form_t;

typedef struct kiln_device_api_s {
  /* "cpu", "opencl", "vulkan": device names are NAME or NAME:INDEX, and a
   * program built for the target of the same name runs here. At most
   * KILN_TARGET_NAME_MAX - 1 characters of [a-z0-9_]. */
  const char* name;
  kiln_code_form_t code_form;
  /* The devices of this API that one process opens on the same hardware
   * share what reuse_code builds compiled (OpenCL: one context and its
   * units per device; Vulkan: one VkDevice and its pipelines), so code
   * built on one serves a build on another. */
  bool shared_code;
  /* Opens device |index| (0 for an API with one device). |options| may be
   * NULL (defaults). On success *out_device holds one reference. Errors
   * say why the device cannot be had (no driver: NOT_FOUND or
   * UNSUPPORTED; driver failures: DEVICE_ERROR). Required. */
  kiln_status_t (*open)(int32_t index, const kiln_device_open_options_t* options,
                        kiln_allocator_t allocator, kiln_device_t** out_device);
  /* Prints one indented line per device ("  [i] ..."), for `kiln devices`;
   * an error (no driver, no device) says why there are none. Required. */
  kiln_status_t (*list)(FILE* out);
  /* Optional (NULL: nothing to say): lines about how |exe| was built,
   * printed by `kiln run` after a session is made (e.g. OpenCL's GEMM
   * provider choices). Prints nothing when there is nothing to report. */
  void (*executable_report)(const kiln_device_executable_t* exe, FILE* out);
  /* Optional (NULL: not counted): the units of code |exe|'s build had
   * (OpenCL: the program text's kernels, each printed once; Vulkan: its
   * distinct pipelines) and how many
   * of them it took from earlier builds (kiln_device_build_options_t.
   * reuse_code) instead of compiling them; 0, 0 for a build without
   * reuse_code. kiln tune reports its closing build's. */
  void (*executable_units)(const kiln_device_executable_t* exe, int32_t* units, int32_t* reused);
  /* Optional (NULL: the target's programs carry no device code): builds
   * |program|'s code for |device| (one of this API's) and adds the
   * device's own form of it to the program (OpenCL: the program binary,
   * module section 'DBIN'), which a later load on the same device and
   * driver uses instead of building. `kiln compile -o` calls it. A
   * progress line goes to |progress| (NULL: quiet). */
  kiln_status_t (*embed_binaries)(kiln_device_t* device, kiln_program_t* program, FILE* progress);
} kiln_device_api_t;

/* The API named |name| (exact match), NULL when this build has none. */
const kiln_device_api_t* kiln_device_api_find(const char* name);

/* Its position in the registry, -1 when this build has none. The
 * compiler's target table (targets/registry.c) is built from the same list
 * in the same order, so a target and its device share the index. */
int32_t kiln_device_api_index(const char* name);

/* Registered APIs in registration order (the CPU first). */
int32_t kiln_device_api_count(void);
const kiln_device_api_t* kiln_device_api_at(int32_t i);

/* The registered names joined for messages, each followed by |suffix|:
 * ("", ...) -> "cpu, opencl or vulkan"; ("[:N]") -> "cpu[:N], opencl[:N] or
 * vulkan[:N]". Writes at most |n| bytes (NUL included) and returns |buf|. */
const char* kiln_device_api_names(const char* suffix, char* buf, size_t n);

#ifdef __cplusplus
}
#endif
#endif /* KILN_RUNTIME_DEVICE_REGISTRY_H_ */
