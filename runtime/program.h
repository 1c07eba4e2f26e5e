/* kiln program: the deployable form of a compiled model.
 *
 * A program is what a module file (.kiln) holds and what the runtime runs:
 * no tensor IR, no graph, nothing that needs the compiler. It lists
 *   - buffers: every tensor the kernels touch, with dtype, shape, kind
 *     (input, output, intermediate, constant, workspace), the buffer whose
 *     memory it aliases (Reshape-style views) and its lifetime in kernel
 *     steps; constants point into one weights blob;
 *   - kernels in execution order: symbol name, the buffer bound to each
 *     parameter, which parameters it writes, launch geometry for GPU targets,
 *     FLOPs and bytes for profiles, the graph node it came from, and at most
 *     one in-place pair (an output that may reuse a dying input's memory);
 *   - target code: one blob per target (CPU C source split into units,
 *     OpenCL C source, SPIR-V per kernel), see kiln_program_code_t;
 *   - metadata: model name, target, precision, compile options.
 *
 * Built by the compiler (targets/program_build.c, from a kiln_plan_t),
 * written and read by runtime/module_file.c, executed by runtime/session.c.
 * All strings and arrays are owned by the program (one allocator) and freed
 * by kiln_program_destroy. Immutable after building: thread-safe to share
 * between sessions.
 */
#ifndef KILN_RUNTIME_PROGRAM_H_
#define KILN_RUNTIME_PROGRAM_H_

#include <stdbool.h>
#include <stdint.h>

#include "kiln/array.h"
#include "kiln/status.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef enum kiln_program_buffer_kind_e {
  KILN_PB_INPUT = 0,
  KILN_PB_OUTPUT = 1,
  KILN_PB_INTERMEDIATE = 2,
  KILN_PB_CONST = 3,
  KILN_PB_TEMP = 4, /* per-kernel workspace */
  /* A run-time check's status word: i32[1], written (never read) by the
   * kernels that check data the reference would reject. The session zeroes
   * it before every run and fails a run that leaves a KILN_PB_CHECK_* code
   * in it, naming the node of the kernel that wrote it. */
  KILN_PB_STATUS = 5,
  /* The values of the program's dynamic dims (kiln_program_dim_t): i64 per
   * dim, written by the session before every run and read by the kernels
   * as their loops' run-time extents. */
  KILN_PB_DIMS = 6,
  KILN_PB_KIND_COUNT_
} kiln_program_buffer_kind_t;

/* Codes a failed check stores into its status word. */
enum {
  KILN_PB_CHECK_DIV_ZERO = 1,    /* integer division by zero */
  KILN_PB_CHECK_INDEX_RANGE = 2, /* an index outside [-n, n) of its axis */
  KILN_PB_CHECK_LENGTH_RANGE = 3, /* a sequence length outside [0, T] */
  KILN_PB_CHECK_PLUGIN_FN = 4,    /* a plugin op's CPU function returned non-zero */
};

/* The most bytes one buffer may span (256 TiB): far above any device, and
 * low enough that sums and products of a few sizes stay inside 64 bits. */
#define KILN_PROGRAM_MAX_BUFFER_BYTES (1ull << 48)

typedef struct kiln_program_buffer_s {
  char* name;
  kiln_dtype_t dtype;
  kiln_program_buffer_kind_t kind;
  int32_t rank;
  int64_t shape[KILN_MAX_RANK];
  uint64_t bytes;        /* bytes the buffer spans (views: furthest element + 1) */
  int32_t alias_of;      /* buffer whose memory this one shares (offset 0), or -1 */
  int32_t first_use;     /* first kernel touching it (aliases folded in), -1: unused */
  int32_t last_use;      /* last kernel touching it */
  uint64_t const_offset; /* CONST: offset of its bytes in the weights blob */
} kiln_program_buffer_t;

/* Argument access flags. */
enum {
  KILN_ARG_READ = 1,
  KILN_ARG_WRITE = 2,
};

/* A kernel that computes a plain f32 GEMM a device library may run in its
 * place (CLBlast on OpenCL):
 *   Y[b] = alpha * op(A[b]) x op(B[b])   for b < batch,
 * A, B, Y row-major at kernel parameters a, b, y (dense views), op(A)
 * M x K (A is K x M with trans_a), op(B) K x N (N x K with trans_b), leading
 * dimensions lda, ldb, ldy, batch strides sa, sb, sy in elements (0: the
 * same matrix for every b). No bias, no epilogue: Y is overwritten. */
typedef struct kiln_program_gemm_s {
  bool valid;
  bool trans_a, trans_b;
  int64_t M, N, K, batch;
  int64_t lda, ldb, ldy;
  int64_t sa, sb, sy;
  float alpha;
  int32_t a, b, y; /* kernel parameter indices */
} kiln_program_gemm_t;

/* Operand |which| (0 A, 1 B, 2 Y) of |g| as stored: rows x cols, leading
 * dimension and batch stride (elements). */
void kiln_program_gemm_operand(const kiln_program_gemm_t* g, int which, int64_t* rows, int64_t* cols,
                               int64_t* ld, int64_t* stride);
/* Bytes operand |which| spans over the whole batch (f32). */
uint64_t kiln_program_gemm_operand_bytes(const kiln_program_gemm_t* g, int which);

typedef struct kiln_program_kernel_s {
  char* name;         /* symbol in the target code */
  char* node_name;    /* graph node (for profiles); never NULL */
  char* op_type;      /* its op type */
  int32_t n_args;
  int32_t* args;      /* buffer index per kernel parameter */
  uint8_t* access;    /* KILN_ARG_* per parameter */
  int64_t groups[3];  /* GPU launch: work-groups per dimension (1 when unbound) */
  int64_t local[3];   /* GPU launch: work-group size */
  int64_t flops;      /* for profiles */
  int64_t bytes;      /* bytes read + written (parameters' spans) */
  /* In-place candidate: parameter |inplace_out| may share the memory of
   * parameter |inplace_in| when that input's buffer dies at this kernel
   * (element-wise: every element is read before the same element is
   * written). -1 when none. */
  int32_t inplace_in, inplace_out;
  /* Vulkan: loop iterations one invocation runs, all loops together (an
   * upper estimate from the kernel's loop nest; 0 when not known). Mesa's
   * lavapipe ends an invocation after 65535 of them, so the device refuses
   * a kernel above that instead of returning partial results. */
  int64_t loop_trips;
  /* The GEMM this kernel computes, for a library provider (valid false:
   * only the kernel's own code). */
  kiln_program_gemm_t gemm;
  /* The tuning-cache point this template kernel was compiled with, as text
   * ("gemm 1,16,16,1,2,112,1,1, 1.29x when measured, 8b39e41e5ce9db24";
   * compiler/tune.c), shown by `kiln info` and marked in profiles; NULL:
   * its default tiles (module section 'TUNE'). */
  char* tuned;
  /* Heterogeneous execution: the device that runs it, KILN_KERNEL_ON_TARGET
   * (the program's target; its code is in |code|) or KILN_KERNEL_ON_HOST
   * (the CPU device of the same session; its code is in |host_code|). */
  uint8_t device;
} kiln_program_kernel_t;

enum {
  KILN_KERNEL_ON_TARGET = 0,
  KILN_KERNEL_ON_HOST = 1,
};

/* The target the host kernels of a heterogeneous program are built for. */
#define KILN_HOST_TARGET "cpu"

/* Longest target name, NUL included ("cpu", "opencl", "vulkan"). */
#define KILN_TARGET_NAME_MAX 16

/* Target code. CPU: |text| is one C translation unit and |parts| splits it
 * (offset, length pairs: [0] prelude, [1..n-2] units, [n-1] epilogue) so
 * the loader can compile parts in parallel. OpenCL: |text| is one program
 * source; parts unused. Vulkan: |blobs| holds one SPIR-V binary per kernel
 * (in kernel order), |text| optionally the GLSL for --dump. */
/* CPU machine code compiled ahead of time (`kiln compile --cpu-target`):
 * one shared object per ISA level, named as --cpu-target names it
 * ("x86-64-v3", "x86-64-v4", "aarch64"). The CPU device loads the best one
 * the running CPU can execute without any compiler and falls back to the C
 * source (|text|) when none fits. */
typedef struct kiln_program_native_s {
  char* isa;      /* NUL-terminated, owned by the program */
  uint8_t* bytes; /* the ELF shared object */
  uint64_t len;
} kiln_program_native_t;

/* A device's build of the program's source (`kiln compile -t opencl -o
 * --device N`: the OpenCL driver's program binary), keyed by everything
 * that decides whether another process may use it: the device's name and
 * vendor, the driver's version and the kiln version that built it (which
 * fixes the build options), and the checksum of the source it was built
 * from (a binary moved into another module's section is not that code). The device uses one whose key matches it
 * exactly and builds the source when none does or when the driver refuses
 * it; the source stays the truth. Module section 'DBIN'. */
typedef struct kiln_program_devbin_s {
  char* device; /* NUL-terminated strings owned by the program */
  char* vendor;
  char* driver;
  char* kiln;
  uint64_t source_crc; /* CRC-64/XZ of the code text it was built from */
  uint8_t* bytes;
  uint64_t len;
} kiln_program_devbin_t;

typedef struct kiln_program_code_s {
  char* text;
  uint64_t text_len;
  int32_t n_parts;
  uint64_t* parts; /* 2 * n_parts: offset, length */
  int32_t n_blobs;
  uint8_t** blobs;
  uint64_t* blob_lens;
  int32_t n_native; /* CPU only; 0 = C source only */
  kiln_program_native_t* native;
  int32_t n_devbin; /* OpenCL only; 0 = source only */
  kiln_program_devbin_t* devbin;
} kiln_program_code_t;

/* A plugin op the program's kernels compute (include/kiln/custom_op.h):
 * loading the module without a plugin that registers it, at this version,
 * is an error naming it. */
typedef struct kiln_program_plugin_op_s {
  char* domain;
  char* name;
  int32_t version;
} kiln_program_plugin_op_t;

/* A dynamic dim (module section 'DYNS'): the program runs for any value of
 * it in [lo, hi]. Format so far: one dim, outermost in every model input
 * and output (the batch). Such a program is compiled per sample: every
 * INPUT, OUTPUT, INTERMEDIATE and TEMP buffer's shape and bytes are those
 * of one sample (dim 0 of an input or output is 1), and at run time with
 * the dim at n the buffer holds n copies, its root's bytes apart (sizes are
 * linear in n: kiln_program_bytes_at); kernels loop over the copies up to
 * the value in the KILN_PB_DIMS buffer. CONST, STATUS and DIMS buffers
 * have one copy. */
typedef struct kiln_program_dim_s {
  char* name;     /* the model's symbol ("batch", "N") */
  int64_t lo, hi; /* inclusive */
} kiln_program_dim_t;

/* The largest value a dynamic dim may declare. */
#define KILN_PROGRAM_MAX_DIM_VALUE (1ll << 20)

typedef struct kiln_program_s kiln_program_t;
struct kiln_program_s {
  kiln_allocator_t allocator;
  char* model_name;   /* where it came from (file name), for messages */
  /* The target it was built for, by name: the device API of the same name
   * runs it (runtime/device_registry.h). Static storage (a registry name or
   * a literal), never freed; kiln_program_create sets the CPU's. */
  const char* target;
  char* precision;    /* "fp32", "fp16", ... */
  char* options;      /* compile options, as text (e.g. "-O1 threads=0") */
  int32_t n_buffers;
  kiln_program_buffer_t* buffers;
  int32_t n_kernels;
  kiln_program_kernel_t* kernels;
  int32_t n_inputs, n_outputs;
  int32_t* inputs;    /* buffer index per model input */
  int32_t* outputs;   /* buffer index per model output */
  char** input_names; /* model tensor names (buffer names are sanitised) */
  char** output_names;
  uint8_t* weights;   /* constants' bytes (64-byte aligned offsets) */
  uint64_t weights_len;
  kiln_program_code_t code;
  /* Heterogeneous programs (some kernels KILN_KERNEL_ON_HOST): the CPU
   * target's code of the host kernels, in their order (module section
   * 'HOST'); |code| then holds the target's code of the other kernels
   * only. Empty (all zero) when every kernel runs on the target. */
  kiln_program_code_t host_code;
  int32_t n_plugin_ops; /* distinct plugin ops used (module section 'PLUG') */
  kiln_program_plugin_op_t* plugin_ops;
  int32_t n_dims;       /* dynamic dims (section 'DYNS'); 0: static shapes */
  kiln_program_dim_t* dims;
  /* |weights| point into memory the program does not own -- the module
   * file mapped read-only by kiln_module_load_file, which the module keeps
   * mapped while the program lives -- so kiln_program_destroy leaves them
   * alone, and nothing may write them (no kernel writes a constant:
   * kiln_program_validate). */
  bool weights_borrowed;
  /* Shape buckets (module section 'BUCK'; runtime/program_buckets.c): a
   * dim compiled at a set of sizes (kiln compile --dim seq=16,64,128), one
   * program per size, each with static shapes in that dim. This program is
   * the smallest size's; the others follow, owned, in |buckets| (none of
   * them with buckets of its own). n_buckets 0: no buckets; else >= 2,
   * counting this program. A run takes the program whose input shapes its
   * inputs have (kiln_program_bucket_select). */
  char* bucket_dim;
  int32_t n_buckets;
  int64_t* bucket_values;    /* n_buckets, ascending */
  kiln_program_t** buckets;  /* n_buckets - 1: the sizes after the first */
  /* A staged model (module section 'STGS'; runtime/program_staged.h): this
   * program is then a shell of the model's inputs and outputs, and a
   * session runs the segments. NULL for every other program. */
  struct kiln_program_staged_s* staged;
  /* A dynamic dim inside the shapes (module section 'DYNA'; lowering/
   * plan_seq.h): n_inputs + n_outputs entries, the axis of each model input
   * and then output that is the dim (-1: none), whose shape holds the top
   * of the range there. Every buffer keeps the top of the range's size
   * (unless |dim_bytes| gives it one per value) and the kernels index them
   * dense at the run's value (the DIMS buffer).
   * NULL: the dynamic dim, if any, is the per-sample one. */
  int32_t* dim_axis;
  /* With |dim_axis|: each buffer's bytes at the dim's value n as
   * c0 + c1*n + c2*n^2, three i64 per buffer (module section 'DYNM',
   * optional; lowering/plan_seq_mem.h), which kiln_program_bytes_at
   * evaluates, so the planner places every buffer at the run's size. NULL:
   * every buffer keeps the top of the range's size (older modules). */
  int64_t* dim_bytes;
};

/* An empty program owned by |allocator| (fill it with the helpers below). */
kiln_status_t kiln_program_create(kiln_allocator_t allocator, kiln_program_t** out_program);
/* Frees everything; NULL is a no-op. */
void kiln_program_destroy(kiln_program_t* p);

/* A copy of |s| owned by the program (NULL -> ""). */
kiln_status_t kiln_program_strdup(kiln_program_t* p, const char* s, char** out);

/* Appends a device binary: |key|'s strings and |len| bytes are copied.
 * Errors: INVALID_ARGUMENT (no bytes or no device name), OUT_OF_MEMORY. */
kiln_status_t kiln_program_devbin_add(kiln_program_t* p, const kiln_program_devbin_t* key, const void* bytes,
                                      uint64_t len);
/* Frees every device binary of |p| (n_devbin becomes 0). */
void kiln_program_devbins_free(kiln_program_t* p);

/* Checks every invariant the runtime relies on: indices in range, alias
 * chains acyclic and fitting, kinds and dtypes valid, every buffer's byte
 * size at least its shape x dtype (overflow-checked, at most
 * KILN_PROGRAM_MAX_BUFFER_BYTES) -- kernels, uploads and output reads
 * touch that much of it --, constants exactly their shape x dtype and
 * inside the weights, lifetimes ordered and covering every kernel that
 * uses the buffer, argument counts and access flags, launch sizes, GEMM
 * operands inside their buffers, in-place pairs a read and a written
 * parameter, I/O bound to real buffers under distinct non-empty names,
 * code present for the target. Errors are PARSE_ERROR naming the buffer or
 * kernel and the numbers. The module reader calls this on every file it
 * loads, kiln_module_wrap on every program it wraps. What it cannot see is
 * the target code itself (the shapes and argument counts compiled into
 * it): a module is code, trusted as a whole or not at all. */
kiln_status_t kiln_program_validate(const kiln_program_t* p);

/* The error for a status word left at |code| (KILN_PB_CHECK_*) by kernel
 * |kernel| of node |node| (op |op|): the status code the reference executor
 * gives for the same data (INVALID_ARGUMENT for a zero divisor, OUT_OF_RANGE
 * for an index), the message starting with |where|. Shared by the session
 * and the compiler's CPU executor so both say the same. */
kiln_status_t kiln_program_check_error(int32_t code, const char* where, const char* node, const char* op,
                                       const char* kernel);

/* Kernels of |p| on |device| (KILN_KERNEL_ON_*). */
int32_t kiln_program_kernels_on(const kiln_program_t* p, uint8_t device);

/* Sets every buffer's first_use / last_use from the kernels' arguments
 * (a view's uses extend its root's lifetime; unused: -1). */
void kiln_program_lifetimes(kiln_program_t* p);

/* Frees the code's arrays with |a| and zeroes it. */
void kiln_program_code_free(kiln_allocator_t a, kiln_program_code_t* c);

/* Follows alias_of to the buffer owning the memory (validated programs). */
int32_t kiln_program_root(const kiln_program_t* p, int32_t buffer);

/* Bytes of one element of |b| times its element count (dense size). */
uint64_t kiln_program_buffer_dense_bytes(const kiln_program_buffer_t* b);

/* ---- dynamic dims (runtime/program_dims.c) ---- */

/* Whether buffer |b| holds one copy per value of the dynamic dim. */
bool kiln_program_buffer_per_sample(const kiln_program_t* p, int32_t b);
/* Bytes buffer |b| spans with the dynamic dim at |n| (validated programs,
 * 1 <= n <= hi): a root's bytes times n, a view's bytes plus (n - 1) times
 * its root's; with a dim inside the shapes, its polynomial at n (|dim_bytes|,
 * lo <= n <= hi); |b|'s own bytes when it has one copy or |p| no dynamic dim. */
uint64_t kiln_program_bytes_at(const kiln_program_t* p, int32_t b, int64_t n);
/* The value of the dynamic dim |inputs| carry (dim 0 of every per-sample
 * model input, which must agree), checked against the range and the other
 * dims: INVALID_ARGUMENT naming the input, the dim, its value and the range
 * (or the two inputs that disagree). 1 for a program without dynamic dims
 * (shapes are checked by the session as before). */
kiln_status_t kiln_program_dim_value(const kiln_program_t* p, const kiln_array_t* inputs, const char* where,
                                     int64_t* out_n);
/* |p| evaluated at |n|: a shallow copy whose buffers (a new array from
 * |allocator|) carry kiln_program_bytes_at sizes and, for model inputs and
 * outputs, n as dim 0 -- what the memory planner plans. Free with
 * kiln_program_at_free; |p| must outlive it. */
/* The dynamic-dim part of kiln_program_validate: the dims, the DIMS
 * buffer, per-sample model inputs and outputs with 1 as dim 0, and every
 * buffer's size at the top of the range inside the buffer limit. */
kiln_status_t kiln_program_validate_dims(const kiln_program_t* p);
kiln_status_t kiln_program_at(const kiln_program_t* p, int64_t n, kiln_allocator_t allocator, kiln_program_t* out);
/* The axis of model input or output buffer |b| that is the dynamic dim
 * inside the shapes (kiln_program_t.dim_axis), -1 when none. */
int32_t kiln_program_io_dim_axis(const kiln_program_t* p, int32_t b);
void kiln_program_at_free(kiln_allocator_t allocator, kiln_program_t* at);

/* ---- shape buckets (runtime/program_buckets.c) ---- */

/* Most sizes one bucketed dim may list. */
#define KILN_PROGRAM_MAX_BUCKETS 16

/* Bucket |k|'s program (0: |p| itself), NULL outside 0..n_buckets-1 (a
 * program without buckets is its own bucket 0). */
const kiln_program_t* kiln_program_bucket(const kiln_program_t* p, int32_t k);
/* The model input and axis that tell the buckets apart (the first whose
 * size differs between them), for messages and for picking one. */
void kiln_program_bucket_key(const kiln_program_t* p, int32_t* out_input, int32_t* out_axis);
/* The bucket whose input shapes |inputs| have (dim 0 of per-sample inputs
 * left to the dynamic dim): INVALID_ARGUMENT naming the input, its axis,
 * the bucketed dim, the value and the sizes the module has when none does.
 * 0 for a program without buckets. */
kiln_status_t kiln_program_bucket_select(const kiln_program_t* p, const kiln_array_t* inputs, const char* where,
                                         int32_t* out_k);
/* The bucket part of kiln_program_validate: the sizes, every bucket's own
 * validity, and that all of them have the same target, dims, inputs and
 * outputs (names, dtypes, ranks) apart from their shapes. */
kiln_status_t kiln_program_validate_buckets(const kiln_program_t* p);
/* Frees the buckets (kiln_program_destroy calls it). */
void kiln_program_buckets_free(kiln_program_t* p);

#ifdef __cplusplus
}
#endif
#endif /* KILN_RUNTIME_PROGRAM_H_ */
