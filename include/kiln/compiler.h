/* kiln compiler: ONNX model -> .kiln module, as a library.
 *
 * What `kiln compile` does, behind a versioned C API: load a model, set
 * options, compile to a module in memory or a file, and read what the
 * compile did (graph passes, fusion, precision, plan, timings) as data.
 * Link libkiln (CMake: kiln::compiler, pkg-config: kiln); run the module
 * with the runtime (kiln/runtime.h, libkiln_rt), which the compiler does
 * not need to be loaded beside.
 *
 *   kiln_compiler_t* c;
 *   KILN_RETURN_IF_ERROR(kiln_compiler_create(KILN_COMPILER_ABI_VERSION, &c));
 *   KILN_RETURN_IF_ERROR(kiln_compiler_load_model(c, "m.onnx"));
 *   KILN_RETURN_IF_ERROR(kiln_compiler_set_option(c, "target", "opencl"));
 *   KILN_RETURN_IF_ERROR(kiln_compiler_set_option(c, "precision", "fp16"));
 *   KILN_RETURN_IF_ERROR(kiln_compiler_compile(c));
 *   KILN_RETURN_IF_ERROR(kiln_compiler_write_module(c, "m.kiln"));
 *   kiln_compiler_destroy(c);
 *
 * Versions: kiln_version() is the release ("0.1.0"); the ABI version
 * counts incompatible changes of this header (struct layouts, signatures,
 * meanings). A program passes the KILN_COMPILER_ABI_VERSION it was built
 * with to kiln_compiler_create, which refuses (UNSUPPORTED, naming both)
 * a library of another ABI instead of misreading its structs.
 *
 * Options are name/value strings so that new ones do not change the ABI:
 *   target            a target of this build: "cpu" (default), "opencl", "vulkan"
 *   precision         fp32 (default) | fp16 | auto | int8 (needs calibrate: kiln
 *                     quantize's post-training quantization, minmax ranges, in
 *                     memory before the graph passes; its per-layer report in
 *                     section "quantize"); auto with calibrate also keeps in
 *                     int8 the layers that stay within half the tolerance
 *                     (policy rules may say int8; api/quantize_graph.h)
 *   opt-level         0 | 1 (default): the graph passes' level; 1 also fuses kernels
 *   threads           CPU threads the plan is tiled for (0 = all cores, default)
 *   dim               SYMBOL=SIZE: binds a symbolic input dimension (repeatable,
 *                     one per symbol: the last size set wins; symbols left
 *                     unbound become 1), or SYMBOL=LO..HI: one module that
 *                     runs every value of that outermost (batch) dim in the
 *                     range (cpu target; runtime.h, kiln_module_dim), or
 *                     SYMBOL=S1,S2,...: shape buckets, one static program per
 *                     size in one module (runtime.h, kiln_module_bucket)
 *   device            the device whose fp16 arithmetic fp16/auto use ("opencl:1";
 *                     default: the target's first device, opened without fallback)
 *   fp16-arith        yes | no: say it instead of asking a device
 *   fp16-accumulate, fp16-workspaces, fp16-weights-only, strict   yes | no
 *   precision-policy  FILE of per-node rules (docs: `kiln compile --help`)
 *   calibrate         DIR of .npy inputs for auto (default: seeded random) and int8
 *   calibrate-count   N (default 4)       tolerance  R (auto's rtol, default 0.01)
 *   seed              N (random calibration inputs)
 *   model-name        the name recorded in the module (default: the file path)
 *   dump              DIR: write plan.txt and the generated source there
 *   cpu-target        LEVELS: CPU machine code in the module for these ISA levels
 *                     (x86-64-v3, x86-64-v4, aarch64, host; comma-separated;
 *                     default none: C source only), so libkiln_rt runs it without
 *                     a C compiler; another target refuses it at compile
 *   loop-limit        N: loop iterations one shader invocation of the device the
 *                     module is for may run in all (0: none); default: the
 *                     target's device says (lavapipe: 65535). Kernels are split
 *                     over more invocations to stay under it
 *   tuning-cache      FILE written by `kiln tune` (docs/TUNING.md): its records for
 *                     this device, driver and kiln version choose the tuned
 *                     kernels' points; a bad line is skipped with a warning
 *   sparse            auto (default) | on | off: CPU convolutions with constant
 *                     weights run on the block-sparse kernel, their zero blocks
 *                     of 4 output x 1 input channel(s) with all taps neither
 *                     stored nor multiplied -- auto where at least half the
 *                     blocks are zero (the measured break-even), on wherever
 *                     it applies; report section "sparse", a line per layer
 *   layout            auto | nchw: CPU at opt-level 1, NCHWc tensors where the
 *                     layout pass chooses them, or NCHW everywhere (default:
 *                     $KILN_LAYOUT, else auto); report section "plan", line
 *                     "layout: ..."
 *
 * Threads: a compiler object is thread-compatible: calls on it must not
 * overlap. Concurrent compiles on separate objects are not tested.
 */
#ifndef KILN_COMPILER_H_
#define KILN_COMPILER_H_

#include <stddef.h>
#include <stdint.h>

#include "kiln/array.h"
#include "kiln/export.h"
#include "kiln/status.h"

#ifdef __cplusplus
extern "C" {
#endif

/* Bumped on every incompatible change of this header. */
#define KILN_COMPILER_ABI_VERSION 1

/* The release, "MAJOR.MINOR.PATCH". Static string. */
KILN_COMPILER_API const char* kiln_version(void);
/* The KILN_COMPILER_ABI_VERSION the library was built with. */
KILN_COMPILER_API int32_t kiln_compiler_abi_version(void);

typedef struct kiln_compiler_s kiln_compiler_t;

/* Creates a compiler. |abi_version| must be KILN_COMPILER_ABI_VERSION
 * (pass the macro); another is UNSUPPORTED with both numbers in the
 * message. Destroy with kiln_compiler_destroy. */
KILN_COMPILER_API KILN_MUST_USE kiln_status_t kiln_compiler_create(int32_t abi_version,
                                                                   kiln_compiler_t** out_compiler);
KILN_COMPILER_API void kiln_compiler_destroy(kiln_compiler_t* c); /* NULL: no-op */

/* Loads the custom-op plugin at |path| (include/kiln/custom_op.h) for
 * every compiler and every session of the process: the same as
 * kiln_plugin_load. The process has one plugin registry, libkiln_rt's
 * (libkiln, which carries a private copy of the runtime, forwards to it),
 * so one load of either serves compiling and running. Errors name the
 * plugin, the op and the reason; nothing is registered then. */
KILN_COMPILER_API KILN_MUST_USE kiln_status_t kiln_compiler_load_plugin(const char* path);

/* Parses the ONNX model at |path| (and its external data) now, so that a
 * bad file is reported here, naming the file and what is wrong. Replaces a
 * model loaded before and drops an earlier compile's module and report. */
KILN_COMPILER_API KILN_MUST_USE kiln_status_t kiln_compiler_load_model(kiln_compiler_t* c, const char* path);

/* Sets option |name| (see the list above) to |value| (copied). An unknown
 * name or a bad value is INVALID_ARGUMENT naming both; "target" names the
 * targets this build has. */
KILN_COMPILER_API KILN_MUST_USE kiln_status_t kiln_compiler_set_option(kiln_compiler_t* c, const char* name,
                                                                       const char* value);

/* Compiles the loaded model with the options set: binds dims, prepares,
 * runs the graph passes, lowers, fuses, applies the precision and builds
 * the module, keeping it (kiln_compiler_module) and the report. May be
 * called again (after changing options); each call starts from the parsed
 * model. Errors name the model, node or kernel; INVALID_ARGUMENT
 * without a model. */
KILN_COMPILER_API KILN_MUST_USE kiln_status_t kiln_compiler_compile(kiln_compiler_t* c);

/* The last compile's module file bytes (what kiln_module_load_memory
 * takes). Valid until the next load/compile or destroy;
 * INVALID_ARGUMENT before a successful compile. */
KILN_COMPILER_API KILN_MUST_USE kiln_status_t kiln_compiler_module(const kiln_compiler_t* c, const void** out_data,
                                                                   size_t* out_size);
/* Writes them to |path| (atomically: a temporary file renamed). */
KILN_COMPILER_API KILN_MUST_USE kiln_status_t kiln_compiler_write_module(const kiln_compiler_t* c, const char* path);

/* One fact the last compile reports. Either a figure (|key| names it,
 * |value| holds it, |text| is "") or a line for people (|key| is "line",
 * |text| is what `kiln compile` prints, |value| 0). Sections, in order:
 *   "model"      a line naming the symbolic dims bound to 1
 *   "quantize"   int8: layers, layers_float, and the per-layer report's lines
 *   "passes"     nodes_before, nodes_after, ms, and one line per pass
 *   "note"       lines (a device that could not be asked for its fp16 arithmetic)
 *   "warning"    lines (fp16 on a device without fp16 arithmetic)
 *   "precision"  calibration and fp16 rewrite: kernels_fp16, weight_bytes_before/_after, lines
 *   "fusion"     kernels_before, kernels_after, epilogues, producers_inlined, bytes_saved
 *   "plan"       kernels, code_bytes, weights_bytes
 *   "timing"     lowering_ms, codegen_ms
 *   "output"     lines naming files written (dump, policy, report)
 * Strings stay valid until the next load/compile or destroy. */
typedef struct kiln_compile_report_entry_s {
  const char* section;
  const char* key;
  double value;
  const char* text;
} kiln_compile_report_entry_t;

/* The number of entries of the last compile's report (0 before one). */
KILN_COMPILER_API int32_t kiln_compiler_report_count(const kiln_compiler_t* c);
/* Entry |i| (0 <= i < count), NULL out of range. */
KILN_COMPILER_API const kiln_compile_report_entry_t* kiln_compiler_report_at(const kiln_compiler_t* c, int32_t i);

/* ---- staged models ----------------------------------------------------
 *
 * A model with data-dependent shapes (NonZero, Compress, Unique,
 * NonMaxSuppression, a TopK whose K is computed at run time) or control
 * flow (If, Loop, Scan) is not one program of fixed buffers.
 * kiln_compiler_compile takes it as far as can be done before a run --
 * dims, graph passes, the split into stages, the checks of the precision
 * and of strict -- names its host nodes in the report (section "staged",
 * or "fallback" on a GPU target, whose host nodes are CPU fallbacks;
 * figure host_nodes) and keeps the prepared graph. Where `kiln compile`
 * would write a staged module (section STGS: every stage's inputs of
 * fixed sizes, host nodes the runtime implements; docs/DESIGN.md
 * "Data-dependent shapes") it also builds that module:
 * kiln_compiler_module returns its bytes, which libkiln_rt runs as any
 * module; otherwise kiln_compiler_module and kiln_compiler_write_module are
 * UNSUPPORTED naming the first host node and why no module was built (a
 * "staged" report line says which happened). Such a model also runs
 * through a runner, as
 * `kiln run` runs it: the host nodes on the host's reference kernels, the
 * runs of nodes between them (stages) compiled for the target when a run
 * first meets their input shapes, cached per shape, each planned for its
 * exact sizes. Precision fp32 or fp16 (int8 and auto calibrate the whole
 * graph: refused at compile).
 *
 *   if (kiln_compiler_host_nodes(c) > 0) {
 *     kiln_compiler_runner_t* r;
 *     KILN_RETURN_IF_ERROR(kiln_compiler_runner_create(c, NULL, &r));
 *     KILN_RETURN_IF_ERROR(kiln_compiler_runner_run(r, inputs, outputs));
 *     ...
 *     kiln_compiler_runner_destroy(r);
 *   } */

/* The host nodes of the last compile's model: > 0 when it is staged (run
 * it with a runner, or its staged module where kiln_compiler_module gives
 * one), 0 when the compile made a plain module or nothing is compiled. */
KILN_COMPILER_API int32_t kiln_compiler_host_nodes(const kiln_compiler_t* c);

/* The number of inputs (|output| 0) or outputs (|output| 1) of the last
 * compile's staged model; 0 when there is none (a module's are the
 * module's: kiln_module_input_name & co.). */
KILN_COMPILER_API int32_t kiln_compiler_staged_count(const kiln_compiler_t* c, int32_t output);
/* Input or output |i| of the staged model: its name (NULL out of range;
 * valid until the next load/compile or destroy), its dtype and its shape
 * (either out pointer may be NULL). An output dim that depends on data is
 * negative: its size is known after a run. */
KILN_COMPILER_API const char* kiln_compiler_staged_io(const kiln_compiler_t* c, int32_t output, int32_t i,
                                                      kiln_dtype_t* out_dtype, kiln_shape_t* out_shape);

typedef struct kiln_compiler_runner_s kiln_compiler_runner_t;

/* A runner of the last compile's staged model on |device| ("cpu",
 * "opencl:1", ...; NULL or "": the compile's "device" option, else the
 * target's first device),
 * opened without falling back to another device; its API must be the
 * compile's target (INVALID_ARGUMENT naming both). The runner shares the
 * compiled graph: it may outlive |c|, later compiles and
 * kiln_compiler_destroy. Errors: INVALID_ARGUMENT when the last compile
 * made a module or failed; the device's open error, naming it.
 * Thread-compatible: one run at a time per runner; separate runners are
 * independent. Destroy with kiln_compiler_runner_destroy. */
KILN_COMPILER_API KILN_MUST_USE kiln_status_t kiln_compiler_runner_create(const kiln_compiler_t* c,
                                                                          const char* device,
                                                                          kiln_compiler_runner_t** out_runner);
KILN_COMPILER_API void kiln_compiler_runner_destroy(kiln_compiler_runner_t* r); /* NULL: no-op */

/* Runs the model on |inputs| (kiln_compiler_staged_count(c, 0) arrays in
 * input order, of the declared dtypes and shapes: otherwise an error
 * naming the input and both shapes). |outputs| (one per output) receive
 * host arrays of their real shapes, allocated with the system allocator:
 * free each with kiln_array_free(kiln_allocator_system(), ...). On failure
 * nothing is returned and the error names the node or the stage. */
KILN_COMPILER_API KILN_MUST_USE kiln_status_t kiln_compiler_runner_run(kiln_compiler_runner_t* r,
                                                                       const kiln_array_t* inputs,
                                                                       kiln_array_t* outputs);

/* What a runner did so far. */
typedef struct kiln_compiler_runner_stats_s {
  int32_t stages;       /* of the top graph */
  int32_t host_nodes;   /* nodes of the top graph run on the host */
  int32_t compiles;     /* stage programs compiled (subgraphs' too) */
  int32_t reuses;       /* stage runs that found their program compiled */
  int32_t on_reference; /* stages run on the reference kernels (too many shape variants) */
  double host_s;        /* seconds in host nodes */
  double compile_s;     /* seconds compiling stages */
} kiln_compiler_runner_stats_t;

KILN_COMPILER_API void kiln_compiler_runner_stats(const kiln_compiler_runner_t* r,
                                                  kiln_compiler_runner_stats_t* out_stats);

#ifdef __cplusplus
}
#endif
#endif /* KILN_COMPILER_H_ */
