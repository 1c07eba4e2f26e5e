/* kiln runtime: load a compiled module, pick a device, run it.
 *
 * This is all a deploying application needs; it links libkiln_rt, which has
 * no compiler, no ONNX parser and no protobuf in it.
 *
 *   kiln_module_t* m;   KILN_RETURN_IF_ERROR(kiln_module_load_file("m.kiln", al, &m));
 *   kiln_device_t* d;   KILN_RETURN_IF_ERROR(kiln_device_open("cpu", NULL, al, &d));
 *   kiln_session_t* s;  KILN_RETURN_IF_ERROR(kiln_session_create(m, d, NULL, &s));
 *   uint64_t run;       KILN_RETURN_IF_ERROR(kiln_session_enqueue(s, inputs, &run));
 *   ...other work, or a second enqueue (double-buffered)...
 *   KILN_RETURN_IF_ERROR(kiln_session_wait(s, run, outputs));
 *   kiln_session_destroy(s); kiln_device_release(d); kiln_module_release(m);
 *
 * Modules (.kiln files) are versioned and checksummed; a corrupt, truncated
 * or foreign file is a PARSE_ERROR naming the file and what is wrong.
 *
 * Memory: a session plans one arena per slot (runtime/planner.h): every
 * intermediate gets an offset from lifetimes, buffers alias where lifetimes
 * allow; weights are uploaded once and shared by the slots.
 *
 * Threads: modules are immutable and may be shared by any number of
 * sessions on any threads. A device may be shared by sessions used from one
 * thread at a time. A session is thread-compatible: calls on one session
 * must not overlap (use one session per thread), but up to |slots| runs may
 * be in flight: enqueue returns once the inputs are uploaded and the work
 * is queued; the host may prepare and enqueue the next run while the device
 * executes the first. A run is retired by kiln_session_wait.
 */
#ifndef KILN_RUNTIME_H_
#define KILN_RUNTIME_H_

#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>

#include "kiln/array.h"
#include "kiln/status.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef struct kiln_module_s kiln_module_t;
typedef struct kiln_device_s kiln_device_t;
typedef struct kiln_session_s kiln_session_t;

/* ---- modules ---------------------------------------------------------- */

/* Reads and validates a module file (mapped in place: see
 * kiln_module_load_options_t.no_map). Errors: NOT_FOUND/IO_ERROR (file),
 * PARSE_ERROR (bad magic, version, checksum, truncation, inconsistent
 * contents), LIMIT_EXCEEDED (absurd counts). */
KILN_API kiln_status_t kiln_module_load_file(const char* path, kiln_allocator_t allocator,
                                             kiln_module_t** out_module);
/* The same from bytes in memory (copied). |name| is used in messages. */
KILN_API kiln_status_t kiln_module_load_memory(const void* data, size_t size, const char* name,
                                               kiln_allocator_t allocator, kiln_module_t** out_module);

/* How a module is loaded. Zero-initialise; NULL options = all defaults. */
typedef struct kiln_module_load_options_s {
  /* A public key file ("kiln keygen", docs/TRUST.md). When set, the module
   * must carry an Ed25519 signature by that key over all its bytes; an
   * unsigned module, one signed by another key (the message names both key
   * ids) or one whose bytes changed after signing is refused with
   * PERMISSION_DENIED before anything in it is parsed or run. A key file
   * that cannot be read or is not a kiln public key is an error naming it
   * (NOT_FOUND, IO_ERROR, PARSE_ERROR). NULL: no check (a signature, if
   * any, is only reported by kiln_module_info). */
  const char* verify_key_file;
  /* kiln_module_load_file maps the file read-only and leaves the weights
   * in place (no read, no copy: sessions on the CPU use them where they
   * lie), so the file must not be truncated or rewritten while the module
   * lives -- the OS would fault the process on the next touch of a lost
   * page. true: read the file into memory and copy the weights instead
   * (a file on a share others may rewrite). Checksums and signatures are
   * checked over every byte either way. */
  bool no_map;
} kiln_module_load_options_t;

/* kiln_module_load_file / _load_memory with |options| (NULL: defaults). */
KILN_API KILN_MUST_USE kiln_status_t kiln_module_load_file_opts(const char* path, const kiln_module_load_options_t* options,
                                                  kiln_allocator_t allocator, kiln_module_t** out_module);
KILN_API KILN_MUST_USE kiln_status_t kiln_module_load_memory_opts(const void* data, size_t size, const char* name,
                                                    const kiln_module_load_options_t* options,
                                                    kiln_allocator_t allocator, kiln_module_t** out_module);
KILN_API void kiln_module_retain(kiln_module_t* m);
KILN_API void kiln_module_release(kiln_module_t* m); /* NULL: no-op */

/* What the module holds. Pointers stay valid while the module lives. */
typedef struct kiln_module_info_s {
  const char* model_name;
  const char* target;    /* "cpu", "opencl", "vulkan" */
  const char* precision; /* "fp32", ... */
  const char* options;   /* compile options as text */
  int32_t n_inputs, n_outputs, n_kernels, n_buffers;
  uint64_t weights_bytes, code_bytes;
  uint32_t format_version;
  /* The key id (16 hex digits) of the file's signature, "" when unsigned;
   * verified only when signature_verified (loaded with verify_key_file),
   * otherwise merely what the file claims. */
  const char* signer_key_id;
  bool signature_verified;
} kiln_module_info_t;
KILN_API void kiln_module_info(const kiln_module_t* m, kiln_module_info_t* out_info);

/* Name, dtype and shape of input/output |i| (i in range). A module with a
 * dynamic dim gives one sample's shape: dim 0 is 1 and runs may pass any
 * value of the dim's range there (kiln_module_dim). */
KILN_API const char* kiln_module_input_name(const kiln_module_t* m, int32_t i);
KILN_API const char* kiln_module_output_name(const kiln_module_t* m, int32_t i);
KILN_API kiln_shape_t kiln_module_input_shape(const kiln_module_t* m, int32_t i, kiln_dtype_t* out_dtype);
KILN_API kiln_shape_t kiln_module_output_shape(const kiln_module_t* m, int32_t i, kiln_dtype_t* out_dtype);

/* ---- devices ---------------------------------------------------------- */

typedef struct kiln_device_open_options_s {
  int32_t threads;  /* CPU: worker threads (0 = all cores) */
  bool strict;      /* no fallback: a GPU that cannot be opened is an error */
  FILE* log;        /* where fallback reasons go (NULL: stderr) */
} kiln_device_open_options_t;

/* Opens a device by name: "cpu", "opencl[:N]", "vulkan[:N]" (N = index in
 * `kiln devices`). Without the driver or device the call falls back to the
 * CPU and logs why, unless options->strict (then NOT_FOUND/DEVICE_ERROR with
 * the reason). Release with kiln_device_release.
 * The first CPU device opened sets GOMP_SPINCOUNT (and KMP_BLOCKTIME=0
 * unless set) in the process environment unless OMP_WAIT_POLICY or
 * GOMP_SPINCOUNT is set: the CPU kernels' OpenMP threads then spin about
 * 100 us after a parallel region (enough to catch the next kernel's) and
 * then sleep, instead of libgomp's default ~7 ms of spinning, which
 * starves other sessions and threads when the cores are shared (set
 * OMP_WAIT_POLICY=passive to sleep at once, =active to keep spinning).
 * Open it before starting threads that read the environment (setenv is
 * not safe against a concurrent getenv). */
KILN_API kiln_status_t kiln_device_open(const char* name, const kiln_device_open_options_t* options,
                                        kiln_allocator_t allocator, kiln_device_t** out_device);
KILN_API void kiln_device_retain(kiln_device_t* d);
KILN_API void kiln_device_release(kiln_device_t* d); /* NULL: no-op */
/* "cpu", "opencl", "vulkan" and the device's name. */
KILN_API const char* kiln_device_api(const kiln_device_t* d);
KILN_API const char* kiln_device_name(const kiln_device_t* d);

/* The device APIs this build has, in registry order (the CPU first), for
 * listing devices from a program (what `kiln devices` prints). */
KILN_API int32_t kiln_device_api_count(void);
/* "cpu", "opencl", ...; NULL when |i| is out of range. Static string. */
KILN_API const char* kiln_device_api_name_at(int32_t i);
/* The devices of API |i|, one line each ("  [N] description\n"; open one
 * as "<api>:N"), into *out_text (free with kiln_free). An API without a
 * driver or device returns the error saying why (NOT_FOUND, UNSUPPORTED,
 * DEVICE_ERROR); OUT_OF_RANGE for a bad |i|. */
KILN_API KILN_MUST_USE kiln_status_t kiln_device_api_list(int32_t i, char** out_text);
/* Frees memory the runtime returned for the caller to free. NULL: no-op. */
KILN_API void kiln_free(void* p);

/* ---- sessions --------------------------------------------------------- */

/* New fields go at the end; python/kiln/_lib.py's SessionOptions mirrors
 * this struct field for field (kiln_session_options_default writes all of
 * it into the caller's memory). */
typedef struct kiln_session_options_s {
  int32_t slots;          /* runs in flight, each with its own arena (default 2) */
  bool profile;           /* record per-dispatch timestamps */
  const char* cache_dir;  /* compiled-code cache (NULL: default) */
  const char* dump_dir;   /* write generated code here */
  int32_t threads;        /* CPU threads (0 = all cores) */
  /* A module with a dynamic dim: each slot's arena is allocated at creation
   * for this value of it (0: the bottom of the range), so that no run up to
   * it allocates; INVALID_ARGUMENT outside the range. */
  int64_t dim_reserve;
  /* While the session builds the module's code for the device (the CPU's
   * compiler runs, OpenCL's program, Vulkan's pipelines): a progress line
   * here ("building for DEV: ..., k/n steps, S s, ETA S s"; rewritten in
   * place when it is a terminal, else a line per tenth of the work). NULL
   * (the default): nothing. */
  FILE* build_progress;
  /* Share the driver's code of kernels between sessions on one device in
   * this process: a session made with it keeps its kernels' compiled code
   * for later such sessions on |device|, and takes the code of each kernel
   * whose source an earlier one compiled instead of compiling it again
   * (OpenCL: the units of the program text, the rest built as one smaller
   * program; Vulkan: pipelines of identical SPIR-V). For builds of nearly
   * the same program, as kiln tune's default and closing builds; false
   * (the default): each session compiles all its code. */
  bool reuse_code;
} kiln_session_options_t;

KILN_API void kiln_session_options_default(kiln_session_options_t* o);

/* Builds the module's code for |device| (the module's target must match the
 * device's api), plans and allocates the arenas, uploads the weights and
 * records one command buffer per slot. Retains both. */
KILN_API kiln_status_t kiln_session_create(kiln_module_t* module, kiln_device_t* device,
                                           const kiln_session_options_t* options,
                                           kiln_session_t** out_session);
KILN_API void kiln_session_destroy(kiln_session_t* s); /* waits for runs in flight; NULL: no-op */

/* Uploads |inputs| (one per module input, in order; shapes and dtypes must
 * match exactly -- an error names the input and both shapes) into a free
 * slot and queues the run. *out_run identifies it. LIMIT_EXCEEDED when every
 * slot is in flight (wait for one first). A module with a dynamic dim takes
 * any value of its range as dim 0 of every input (the same in all; outputs
 * come back with it): a value outside is INVALID_ARGUMENT naming the input,
 * the dim, the value and the range. A new value re-plans the slot's memory
 * (its arena grows to the largest value seen and is kept). */
KILN_API kiln_status_t kiln_session_enqueue(kiln_session_t* s, const kiln_array_t* inputs,
                                            uint64_t* out_run);
/* Waits for run |run|, reads its outputs into |outputs| (one per module
 * output, allocated with the system allocator; free with kiln_array_free)
 * and frees its slot. An error of the run (device lost, kernel fault) is
 * returned here; the slot is freed either way. */
KILN_API kiln_status_t kiln_session_wait(kiln_session_t* s, uint64_t run, kiln_array_t* outputs);
/* enqueue + wait. */
KILN_API kiln_status_t kiln_session_run(kiln_session_t* s, const kiln_array_t* inputs,
                                        kiln_array_t* outputs);

/* Memory figures of the session (per slot). With a dynamic dim: the plan
 * at the value the session planned last (its lowest before any run). */
typedef struct kiln_session_memory_s {
  uint64_t arena_bytes, naive_bytes, lower_bound_bytes, weights_bytes;
  int32_t slots, barriers, dispatches;
} kiln_session_memory_t;
KILN_API void kiln_session_memory(const kiln_session_t* s, kiln_session_memory_t* out);
/* The memory plan's figures with the module's dynamic dim at |n| (planned
 * for the asking; the session's own plan and arenas are left alone). A
 * module without dynamic dims: kiln_session_memory. INVALID_ARGUMENT for
 * |n| outside the range. */
KILN_API KILN_MUST_USE kiln_status_t kiln_session_memory_at(const kiln_session_t* s, int64_t n,
                                                            kiln_session_memory_t* out);

/* ---- dynamic dims ------------------------------------------------------ */

/* A module compiled for a range of a dim (kiln compile --dim NAME=LO..HI)
 * runs inputs whose dim 0 is any value in the range; outputs come back with
 * it as their dim 0. The count of such dims (0: static shapes), and dim
 * |i|'s name (owned by the module) and inclusive range. */
KILN_API int32_t kiln_module_dim_count(const kiln_module_t* m);
KILN_API KILN_MUST_USE kiln_status_t kiln_module_dim(const kiln_module_t* m, int32_t i, const char** out_name,
                                                     int64_t* out_lo, int64_t* out_hi);
/* The axis of model input (|output| false) or output |i| that is the
 * dynamic dim: 0 for a range on the outermost dim (the batch), the axis
 * inside the shape for a range there (kiln compile --dim seq=8..256; the
 * module's shape holds the top of the range there); -1 when it does not
 * have the dim or the module has none. */
KILN_API int32_t kiln_module_dim_axis(const kiln_module_t* m, bool output, int32_t i);
/* Parses "NAME=VALUE" (`kiln run m.kiln --dim batch=3`) against the
 * module's dynamic dims ("batch" also names its one dynamic dim, the
 * outermost, whatever the model called it): *out_value. INVALID_ARGUMENT naming the module,
 * the dim, the value and the range for a value outside it or a malformed
 * spec; NOT_FOUND listing the module's dims for another name. */
KILN_API KILN_MUST_USE kiln_status_t kiln_module_dim_parse(const kiln_module_t* m, const char* spec,
                                                           int64_t* out_value);

/* ---- shape buckets ----------------------------------------------------- */

/* A module compiled for a set of sizes of a dim inside its kernels' shapes
 * (kiln compile --dim seq=16,64,128): one static program per size, picked
 * per run by the inputs' shapes (a size outside the set is INVALID_ARGUMENT
 * naming the input, the axis, the dim, the value and the sizes). The count
 * of buckets (0: none), the dim's name (owned by the module) and bucket
 * |k|'s size; sizes ascend. A session's memory figures and profile are
 * those of the bucket that ran last (the first before any run); each bucket
 * gets its own plan and arenas at its first run. */
KILN_API int32_t kiln_module_bucket_count(const kiln_module_t* m);
KILN_API KILN_MUST_USE kiln_status_t kiln_module_bucket(const kiln_module_t* m, int32_t k, const char** out_name,
                                                        int64_t* out_value);
/* Input / output |i|'s shape in bucket |k| (kiln_module_input_shape and
 * kiln_module_output_shape give bucket 0's); a module without buckets has
 * bucket 0 only. */
KILN_API kiln_shape_t kiln_module_bucket_input_shape(const kiln_module_t* m, int32_t k, int32_t i,
                                                     kiln_dtype_t* out_dtype);
KILN_API kiln_shape_t kiln_module_bucket_output_shape(const kiln_module_t* m, int32_t k, int32_t i,
                                                      kiln_dtype_t* out_dtype);
/* Parses "NAME=SIZE" for the bucketed dim: *out_k. NOT_FOUND when NAME is
 * not that dim; INVALID_ARGUMENT listing the sizes for another size. */
KILN_API KILN_MUST_USE kiln_status_t kiln_module_bucket_parse(const kiln_module_t* m, const char* spec,
                                                              int32_t* out_k);

/* ---- profiles --------------------------------------------------------- */

/* Per-dispatch times accumulated over the profiled runs (options.profile):
 * every run when there is one, else every run but the first, which pays for
 * the driver's lazy work (PoCL compiles a kernel at its first enqueue). */
typedef struct kiln_profile_entry_s {
  const char* kernel, *node, *op;
  double total_s;    /* summed over runs */
  double start_s;    /* start of the last run's dispatch, from the run's start */
  double last_s;     /* duration in the last run */
  int64_t flops, bytes;
  const char* device; /* the device API that ran it (heterogeneous sessions: "cpu" for fallbacks) */
} kiln_profile_entry_t;

/* Entries in dispatch order (n = kernels); *out_runs = profiled runs. NULL
 * when profiling is off. Valid until the next enqueue or destroy. */
KILN_API const kiln_profile_entry_t* kiln_session_profile(const kiln_session_t* s, int32_t* out_n,
                                                          int32_t* out_runs);
/* Writes the per-kernel table: one row per dispatch naming its graph node,
 * op, time, share, GFLOP/s, GB/s and the kernel symbol it calls (slowest
 * first, at most |max_rows|, 0 = all). */
KILN_API void kiln_profile_print_table(const kiln_session_t* s, FILE* out, int32_t max_rows);
/* Writes a Chrome-trace JSON (opens in Perfetto / chrome://tracing): one
 * complete event per dispatch of the last profiled run. */
KILN_API kiln_status_t kiln_profile_write_trace(const kiln_session_t* s, const char* path);

#ifdef __cplusplus
}
#endif
#endif /* KILN_RUNTIME_H_ */
