/* kiln custom ops: operators and their kernels brought by a plugin.
 *
 * A plugin is a shared library that exports one function,
 *
 *   KILN_PLUGIN_EXPORT int kiln_plugin_register(kiln_plugin_host_t* host);
 *
 * which describes its ops (and optional graph patterns) through |host|'s
 * function table and returns 0. kiln loads it with `kiln run|compile
 * --plugin lib.so` (or kiln_plugin_load), and so does libkiln_rt for modules
 * that use its ops (`kiln-rt-run --plugin lib.so`). A plugin needs only
 * this header: it calls kiln through |host|, never by symbol, so it links
 * against nothing of kiln's.
 *
 * An op (kiln_custom_op_t) is a domain and a name valid for an opset range
 * of that domain, with
 *   - a shape/type function: output dtypes and shapes from the inputs' and
 *     the attributes' (dims may be -1 at load time, when still unknown);
 *   - a reference kernel in C, run in-process by kiln's reference executor
 *     (`kiln run --target ref`, --check-ref) and used as the oracle;
 *   - optional kernels per target, as source text kiln compiles with the
 *     model's own kernels (the CPU kernel may instead be a C function in
 *     the plugin, cpu_fn, API version 2): the body of a C function for the CPU target, of
 *     an OpenCL C kernel, of a GLSL compute shader's main(). kiln writes the
 *     function header itself, so arguments can never disagree with the
 *     plan; the body reads inputs as in0, in1, ... and writes out0, ...
 *     (pointers/arrays of the tensor's element type) and sees the shapes,
 *     attributes and launch sizes as macros (below). GPU kernels give their
 *     launch geometry; the C body runs once per call (it may use
 *     `#pragma omp parallel for`).
 *
 * Macros every kernel body sees (i: declared input/output slot, d: dim):
 *   KILN_IN<i>_PRESENT (0 for an omitted optional input, which then has no
 *   variable), KILN_IN<i>_DTYPE (the kiln_dtype_t number: 1 f32, 2 f16,
 *   3 i8, ...), KILN_IN<i>_RANK, KILN_IN<i>_DIM<d>, KILN_IN<i>_SIZE
 *   (elements); KILN_OUT<i>_... likewise; KILN_ATTR_<name> for INT and
 *   FLOAT attributes, KILN_ATTR_<name>_COUNT and KILN_ATTR_<name>_<j> for
 *   INTS and FLOATS; GPU: KILN_GLOBAL_X/Y/Z (work-items asked for: the body
 *   must check its id against them, the grid is rounded up to whole
 *   work-groups) and KILN_LOCAL_X/Y/Z; KILN_EPILOGUE0(v) for ops that
 *   declare epilogue (below). Element types: f32 float, f16 the
 *   dialect's storage type (C kiln_f16 with kiln_h2f/kiln_f2h, OpenCL half
 *   with vload_half/vstore_half, GLSL float16_t), i8 int8_t/char, i32
 *   int32_t/int.
 *
 * On Mesa's lavapipe (Vulkan on the CPU) an invocation ends after 65535
 * loop iterations; kiln cannot count a plugin body's loops, so keep each
 * GLSL work-item's loops below that (spread the work over work-items), and
 * declare the count (glsl_loop_trips, API version 2) so that kiln refuses
 * the kernel, naming the op, where it would be cut short.
 *
 * A kernel a compiler rejects fails the compile or the module load with the
 * compiler's log, which names the plugin and the op: kiln marks every body
 * with a #line directive (C, OpenCL) or the error names them (GLSL).
 *
 * A plugin op without a kernel for a GPU target runs on the CPU of the same
 * session (heterogeneous execution), through its CPU kernel, source or
 * cpu_fn; under --strict, and on the CPU target without a CPU kernel, it is
 * an error naming the op and the target.
 *
 * Registration is all or nothing per plugin: a descriptor that fails its
 * checks (another API version, a duplicate or built-in name, a missing
 * function, bad attribute or dtype declarations), or an entry point that
 * returns non-zero, leaves nothing of the plugin registered, and the error
 * names the plugin, the op and the reason.
 *
 * Lifetime: descriptors and every string and table they point to must stay
 * valid while the plugin is loaded (static storage; kiln copies the
 * descriptor structs themselves); kiln keeps the
 * library loaded until kiln_plugin_unload_all. The registry is
 * process-wide, one per process even where libkiln and libkiln_rt are both
 * loaded (libkiln forwards to libkiln_rt's, so kiln_plugin_load and
 * kiln_compiler_load_plugin are the same); loading is serialized by a lock, the lookups read a
 * registry that only grows, so loading plugins while compiling in another
 * thread is not supported.
 */
#ifndef KILN_CUSTOM_OP_H_
#define KILN_CUSTOM_OP_H_

#include <stddef.h>
#include <stdint.h>

#include "kiln/array.h"
#include "kiln/export.h"
#include "kiln/status.h"

#ifdef __cplusplus
extern "C" {
#endif

/* The version of the structs below a plugin is built against. Version 2
 * appended the CPU kernel as a function (kiln_custom_op_t.cpu_fn,
 * .cpu_user_data) and changed nothing before it, so kiln accepts
 * descriptors of versions 1 and 2: a version-1 descriptor is read only up
 * to its end (the fields version 2 appended count as NULL/0). Any other
 * version is refused. */
#define KILN_CUSTOM_OP_API_VERSION 2
#define KILN_CUSTOM_OP_API_VERSION_MIN 1

#if defined(__GNUC__) || defined(__clang__)
#define KILN_PLUGIN_EXPORT __attribute__((visibility("default")))
#else
#define KILN_PLUGIN_EXPORT
#endif

/* Most inputs, outputs and attributes one custom op may declare. */
#define KILN_CUSTOM_MAX_IO 16
#define KILN_CUSTOM_MAX_ATTRS 16
/* Bit of a kiln_dtype_t in a kiln_custom_io_t's dtypes mask. */
#define KILN_CUSTOM_DTYPE(d) (1u << (d))

typedef enum kiln_custom_attr_type_e {
  KILN_CUSTOM_ATTR_INT = 1,
  KILN_CUSTOM_ATTR_FLOAT = 2,
  KILN_CUSTOM_ATTR_INTS = 3,
  KILN_CUSTOM_ATTR_FLOATS = 4,
} kiln_custom_attr_type_t;

/* A declared attribute. Names are C identifiers (they become macros). An
 * attribute the node lacks takes the default (INT, FLOAT) or is absent
 * (INTS, FLOATS: count -1); |required| makes it an error instead. A node
 * attribute the op does not declare is an error. */
typedef struct kiln_custom_attr_decl_s {
  const char* name;
  kiln_custom_attr_type_t type;
  int required;
  int64_t default_int;
  float default_float;
} kiln_custom_attr_decl_t;

/* A declared input or output: its name (for messages), the dtypes it takes
 * (KILN_CUSTOM_DTYPE bits, at least one) and, for inputs, whether it may
 * be omitted ("" in the ONNX node). */
typedef struct kiln_custom_io_s {
  const char* name;
  uint32_t dtypes;
  int optional;
} kiln_custom_io_t;

/* An attribute's value on one node, in the op's declaration order. */
typedef struct kiln_custom_attr_s {
  const char* name;
  kiln_custom_attr_type_t type;
  int64_t i;
  float f;
  int64_t count; /* INTS/FLOATS: elements, -1 when absent */
  const int64_t* ints;
  const float* floats;
} kiln_custom_attr_t;

/* A tensor as the op's functions see it. dtype UNDEFINED: an omitted
 * optional input. dims[d] < 0: unknown (load time only; a shape function
 * copies such a dim through as it is to keep it symbolic). data: NULL in the
 * shape function; the reference kernel's inputs and its allocated outputs
 * (dense, row-major). */
typedef struct kiln_custom_tensor_s {
  kiln_dtype_t dtype;
  int32_t rank;
  int64_t dims[KILN_MAX_RANK];
  void* data;
} kiln_custom_tensor_t;

/* What the shape function, the reference kernel and the launch function
 * get. The shape function fills out[i].dtype, .rank and .dims; the
 * reference kernel fills out[i].data. A function that fails returns
 * non-zero and may write a message into |error| (|error_cap| bytes). */
typedef struct kiln_custom_ctx_s {
  const char* node;   /* the graph node's name */
  const char* target; /* launch: "opencl" or "vulkan"; else NULL */
  int32_t n_in;
  const kiln_custom_tensor_t* in;
  int32_t n_out;
  kiln_custom_tensor_t* out;
  int32_t n_attrs;
  const kiln_custom_attr_t* attrs;
  char* error;
  size_t error_cap;
} kiln_custom_ctx_t;

typedef int (*kiln_custom_fn)(kiln_custom_ctx_t* ctx);
/* A CPU kernel given as a function (API version 2): the CPU device calls
 * it in-process, from the module's code, once per run of the node, with
 * |ctx| as the reference kernel gets it (in[i].data and out[i].data point
 * at the device's dense row-major buffers, outputs allocated; ctx->target
 * is "cpu") and the op's cpu_user_data. It may use threads of its own. It
 * returns 0, or non-zero to fail the run (an error naming the node and the
 * op; the message it writes into ctx->error is not carried, the run's error
 * says the function failed). */
typedef int (*kiln_custom_cpu_fn)(kiln_custom_ctx_t* ctx, void* user_data);
/* Work-items per dimension (global, > 0) and the work-group size (local,
 * > 0; the GLSL body's local_size is set from it). NULL launch: one
 * work-item per element of output 0 in groups of 64. */
typedef int (*kiln_custom_launch_fn)(kiln_custom_ctx_t* ctx, int64_t global[3], int64_t local[3]);

/* One target's kernel: the body's source (NULL: no kernel for the target)
 * and, for GPU targets, the launch geometry. */
typedef struct kiln_custom_kernel_s {
  const char* source;
  kiln_custom_launch_fn launch;
} kiln_custom_kernel_t;

typedef struct kiln_custom_op_s {
  int32_t api_version; /* KILN_CUSTOM_OP_API_VERSION */
  const char* domain;  /* not "" nor "ai.onnx": kiln's own ops live there */
  const char* name;    /* a C identifier */
  int64_t since_version, until_version; /* opset range of |domain| (until 0: open) */
  int32_t version;     /* the implementation's version (>= 1), recorded in modules */
  int32_t n_inputs, n_outputs;
  const kiln_custom_io_t* inputs;
  const kiln_custom_io_t* outputs;
  int32_t n_attrs;
  const kiln_custom_attr_decl_t* attrs;
  kiln_custom_fn shape;     /* required */
  kiln_custom_fn reference; /* required */
  kiln_custom_kernel_t cpu, opencl, glsl;
  /* Non-zero: the kernels store each value of output 0 through
   * KILN_EPILOGUE0(v) (an f32 expression), so the graph passes may fuse an
   * element-wise activation that follows the op (Relu, LeakyRelu, Sigmoid,
   * Tanh; its node then disappears) into it, and kiln's kernel fusion the
   * element-wise kernels after that whose value depends on the element
   * and one-element constants only (Clip, Elu, HardSwish, Gelu, Mul by a
   * scalar, ...: the reference runs those nodes as they are; the fused
   * activation it applies after the reference kernel). Without any
   * KILN_EPILOGUE0(v) is (v). Output 0 must be f32 or f16. A cpu_fn kernel
   * cannot store through a macro: kiln applies the fused activation to
   * output 0 after the function returns. */
  int epilogue;
  /* ---- API version 2 (a version-1 descriptor ends above) ---- */
  /* The CPU kernel as a function instead of source (cpu.source must then
   * be NULL): for kernels whose code is a binary library. A module whose
   * CPU code calls it records the op in its plugin list like any other;
   * loading that code where the loaded plugin registers the op without a
   * cpu_fn is an error naming the op and the plugin. */
  kiln_custom_cpu_fn cpu_fn;
  void* cpu_user_data; /* passed to cpu_fn as is */
  /* Optional: the most loop iterations one work-item of the GLSL kernel
   * runs, all its loops together, for the launch (global, local) the op
   * gets; < 0 when it fails (a message in ctx->error). Some Vulkan
   * devices end an invocation after a number of iterations (Mesa's
   * lavapipe: 65535; kiln_device_info_t.loop_limit) and would leave the
   * outputs partial: kiln refuses the kernel on such a device, naming the
   * op, when the count is above it -- at compile time when it compiles
   * for the device, else when the module is loaded (the count is recorded
   * with the kernel). kiln cannot count the loops of a body itself: an op
   * without this function is not checked. */
  int64_t (*glsl_loop_trips)(kiln_custom_ctx_t* ctx, const int64_t global[3], const int64_t local[3]);
} kiln_custom_op_t;

/* A chain (or, API version 2, a graph: |inputs|) of ai.onnx nodes the
 * graph passes replace by the op |domain| /
 * |name| (registered by the same plugin): ops[0] feeds ops[1] (as its
 * input 0) and so on, each intermediate read only by the next node and not
 * a graph output. The new node's inputs are, node by node, the inputs
 * other than the chained one, slots[k] of them (a missing optional input
 * stays omitted), and its attributes those of the chain's nodes the op
 * declares (the first node that has one wins). The last node's outputs
 * become the op's. Applied by the graph passes (-O1, the default), before
 * kiln's own folds. */
typedef struct kiln_custom_pattern_s {
  int32_t api_version; /* KILN_CUSTOM_OP_API_VERSION (1 accepted) */
  const char* domain;
  const char* name;
  int32_t n_nodes; /* 2..8 */
  const char* const* ops;
  const int32_t* slots;
  /* ---- API version 2 (a version-1 pattern ends above) ---- */
  /* Optional (NULL: the chain above, |slots| used): the pattern as a graph
   * of its n_nodes nodes in topological order, the last one's output 0
   * becoming the op's. inputs[k] says what each input of node k is
   * (n_node_inputs[k] entries; a node with an input present beyond them
   * does not match): KILN_PATTERN_SLOT(i), the op's input i; a slot bound
   * at several places matches only where they are one tensor (a fan-in:
   * Mul(x, x), a residual's skip that is the block's input);
   * KILN_PATTERN_NODE(m), output 0 of node m < k, an intermediate read by
   * the pattern's nodes only and not a graph output; KILN_PATTERN_NONE,
   * absent. Every slot 0..n_inputs-1 is bound, every node but the last is
   * read by a later one. |slots| is not read then. */
  const int32_t* const* inputs;
  const int32_t* n_node_inputs;
} kiln_custom_pattern_t;

#define KILN_PATTERN_SLOT(i) (i)
#define KILN_PATTERN_NODE(m) (-2 - (m))
#define KILN_PATTERN_NONE (-1)

/* What kiln_plugin_register receives. Each call returns 0, or non-zero
 * after recording the reason (the whole plugin is then refused). */
typedef struct kiln_plugin_host_s {
  int32_t api_version; /* the host's KILN_CUSTOM_OP_API_VERSION */
  void* impl;
  int (*register_op)(struct kiln_plugin_host_s* host, const kiln_custom_op_t* op);
  int (*register_pattern)(struct kiln_plugin_host_s* host, const kiln_custom_pattern_t* pattern);
} kiln_plugin_host_t;

typedef int (*kiln_plugin_register_fn)(kiln_plugin_host_t* host);

/* ---- host side (libkiln_rt) ------------------------------------------- */

/* Loads the plugin at |path| and registers its ops and patterns. Errors
 * (NOT_FOUND, INVALID_ARGUMENT) name the plugin, the op
 * and the reason; nothing is registered then. Loading the same file twice
 * is a no-op. */
KILN_API kiln_status_t kiln_plugin_load(const char* path);
/* Unregisters everything and unloads the libraries (tests). */
KILN_API void kiln_plugin_unload_all(void);

/* Registered ops, in registration order. */
KILN_API int32_t kiln_custom_op_count(void);
KILN_API const kiln_custom_op_t* kiln_custom_op_at(int32_t i);
/* The op registered as |domain| / |name|, or NULL. */
KILN_API const kiln_custom_op_t* kiln_custom_op_find(const char* domain, const char* name);
/* The path of the plugin that registered |op| ("" when unknown). */
KILN_API const char* kiln_custom_op_plugin(const kiln_custom_op_t* op);
/* Registered patterns, in registration order. */
KILN_API int32_t kiln_custom_pattern_count(void);
KILN_API const kiln_custom_pattern_t* kiln_custom_pattern_at(int32_t i);

#ifdef __cplusplus
}
#endif
#endif /* KILN_CUSTOM_OP_H_ */
