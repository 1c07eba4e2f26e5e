/* kiln runtime device interface: what every device backend implements.
 *
 * One vtable (kiln_device_vtable_t) per backend -- runtime/cpu/ now,
 * runtime/opencl/ and runtime/vulkan/ beside it -- in the manner of IREE's HAL
 * and ggml's backend interface. The session (runtime/session.c) drives a
 * device only through this table, and every call a backend makes into its
 * driver (malloc, the C compiler and dlopen for the CPU; cl* and vk* calls
 * for the GPUs) happens inside one of these slots, so the fault wrapper
 * (kiln_device_fault_wrap) can fail any of them in tests.
 *
 * Objects: a device owns buffers (one arena per session slot plus the
 * weights; views are sub-ranges of a buffer), executables (a program's
 * kernels built for the device) and command buffers (dispatches, barriers
 * and timestamps recorded once, submitted many times, in order).
 *
 * Thread-compatible: one thread at a time calls a given device, except that
 * submitted command buffers run asynchronously (a device's queue executes
 * them in submission order) and |wait| may be called from the thread that
 * submitted. Buffers written or read by the host must not be in use by a
 * submitted, unwaited command buffer.
 *
 * Errors: every slot returns kiln_status_t naming the device, the kernel or
 * the size involved: DEVICE_ERROR for driver failures (a lost device says
 * "device lost" and every later call fails the same way), OUT_OF_MEMORY
 * naming the size for allocations, INVALID_ARGUMENT for a kernel build
 * failure (with the build log and kernel name).
 */
#ifndef KILN_RUNTIME_DEVICE_H_
#define KILN_RUNTIME_DEVICE_H_

#include <stdatomic.h>
#include <stdio.h>

#include "runtime/program.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef struct kiln_device_s kiln_device_t;
typedef struct kiln_device_buffer_s kiln_device_buffer_t;         /* backend-defined */
typedef struct kiln_device_executable_s kiln_device_executable_t; /* backend-defined */
typedef struct kiln_device_cmd_s kiln_device_cmd_t;               /* backend-defined */

typedef struct kiln_device_info_s {
  char api[16];        /* "cpu", "opencl", "vulkan" */
  char name[256];      /* e.g. "cpu (2 threads)", "pthread-...", "llvmpipe (LLVM 15...)" */
  char driver[256];    /* driver / runtime version */
  bool fp16_storage;   /* 16-bit buffers can be loaded/stored */
  bool fp16_arith;     /* half arithmetic (cl_khr_fp16, shaderFloat16, CPU _Float16) */
  bool int8;           /* 8-bit arithmetic */
  bool timestamps;     /* cmd_timestamp gives real device times */
  uint64_t max_alloc_bytes;   /* largest single buffer */
  uint64_t total_bytes;       /* device memory (0 = unknown) */
  uint64_t buffer_alignment;  /* views must start at multiples of this (power of two) */
  int64_t max_workgroup_size;
  uint64_t local_mem_bytes;   /* work-group (shared) memory; 0 = unknown (the tuner's limit) */
  int32_t subgroup_size;      /* 0 = unknown */
  int32_t compute_units;
  /* Loop iterations one shader invocation may run in all before the driver
   * ends it (0 = no known limit): Mesa's llvmpipe/lavapipe stops after
   * 65535. Compiles for the device pass it to lowering
   * (kiln_plan_options_t.loop_limit), which splits the work to fit; the
   * device refuses a kernel recorded above it (kiln_program_kernel_t.loop_trips). */
  int64_t loop_limit;
  /* Vulkan shader features the fast GEMM/conv shaders use (false on other
   * devices): 64-bit integers (shaderInt64: aligned float pairs read as one
   * word) and subgroup ballot operations in compute shaders (the subgroup
   * mode's broadcasts). Compiles for a device without them choose shaders
   * that need neither (kiln_compile_config_t.gpu_lacks). The environment
   * variable KILN_VULKAN_FEATURES=no-int64,no-subgroup hides them (tests of
   * the conservative path on a device that has both). Subgroup arithmetic
   * (subgroupAdd / subgroupMax in compute: the row reductions' template,
   * kernels/vulkan/rows.comp) is hidden by no-subgroup-arith. */
  bool shader_int64;
  bool subgroup_ballot;
  bool subgroup_arith;
  /* f64 arithmetic (OpenCL cl_khr_fp64 or a double FP config; the CPU has
   * it). A compile for a device without it runs the nodes that compute in
   * f64 on the CPU of the same session (KILN_GPU_LACKS_FP64), never in f32.
   * KILN_OPENCL_FEATURES=no-fp64 hides it (tests of that path on PoCL). */
  bool fp64;
  /* 4x8-bit integer dot products: Vulkan's shaderIntegerDotProduct
   * (VK_KHR_shader_integer_dot_product, core in 1.3; enabled when present),
   * OpenCL's cl_khr_integer_dot_product. The int8 templates accumulate with
   * them where present (Vulkan: the compile chooses, KILN_GPU_LACKS_IDOT;
   * OpenCL: q8.cl asks the device compiler's feature macros). Hidden by
   * KILN_VULKAN_FEATURES=no-idot. */
  bool int_dot;
  /* The device runs on the host's CPU (PoCL's CPU device, lavapipe): there
   * the int8 templates lose to the float ones (ResNet-18 QDQ folded: 2.4x
   * slower on PoCL, 4.7x on lavapipe), so a compile for it keeps QDQ
   * models' Q/DQ pairs unfolded (api/driver.c). Such drivers compile a
   * kernel's machine code at its first launch (tools/runner.c's first
   * launches). False for the CPU device itself, which compiles ahead. */
  bool cpu_backed;
  /* Vulkan: the most texels a texel buffer view may hold
   * (maxTexelBufferElements; 0 elsewhere). The shaders that read vec4
   * texels (tile mode 4) keep to it: the compile reads it from the device
   * and prints the plain mode for a kernel whose buffers exceed it.
   * KILN_VULKAN_FEATURES=texels=N lowers it to N (tests). */
  uint64_t max_texels;
  /* Vulkan: the device binds R16G16B16A16_SFLOAT storage texel buffers
   * (the printed kernels' f16 parameters as vec4 texels, vulkan_texel.c);
   * KILN_VULKAN_FEATURES=no-texel-f16 hides it (tests). */
  bool texel_f16;
  /* The most bytes one kernel argument may span (Vulkan:
   * maxStorageBufferRange, 128 MiB on lavapipe; 0: no limit beyond
   * max_alloc_bytes). A compile for the device splits a GEMM whose
   * constant weights exceed it (AlexNet's and VGG-19's first FC) into
   * column slices that fit (kiln_graph_split_wide_gemms), and runs any
   * other node whose kernel would bind a larger buffer on the CPU of the
   * same session (kiln_plan_options_t.max_binding).
   * KILN_VULKAN_FEATURES=binding=N lowers it to N bytes (tests).
   * OpenCL leaves it 0: a kernel argument there is a sub-buffer of the
   * session's one weights buffer or arena, so CL_DEVICE_MAX_MEM_ALLOC_SIZE
   * (max_alloc_bytes) caps those wholes first, not one argument. */
  uint64_t max_binding_bytes;
  /* Work-groups one dispatch may launch per dimension (Vulkan:
   * maxComputeWorkGroupCount, 65535 each on lavapipe, the spec's minimum;
   * 0: no limit, as on OpenCL, whose global sizes are size_t). A compile
   * for the device folds a grid past it into the other dimensions
   * (kiln_plan_t.max_groups). KILN_VULKAN_FEATURES=groups=N lowers every
   * dimension to N (tests). */
  uint64_t max_groups[3];
} kiln_device_info_t;

/* Options a session passes when building an executable. */
typedef struct kiln_device_build_options_s {
  const char* cache_dir;  /* the code cache folder (runtime/code_cache.h; NULL: the default, "": off) */
  const char* dump_dir;   /* write generated source here when set */
  int32_t threads;        /* CPU: worker threads, 0 = all cores */
  /* The build's progress line (runtime/progress.h) goes here; NULL: quiet. */
  FILE* progress;
  /* kiln_session_options_t.reuse_code: take the code of kernels an earlier
   * build with it compiled on this device, and keep this build's for later
   * ones (a device without such a memo ignores it). */
  bool reuse_code;
} kiln_device_build_options_t;

/* Which vtable slot a call is; used by the fault wrapper and its tests. */
typedef enum kiln_device_call_e {
  KILN_DEVICE_CALL_ANY = 0,
  KILN_DEVICE_CALL_BUFFER_CREATE,
  KILN_DEVICE_CALL_VIEW_CREATE,
  KILN_DEVICE_CALL_BUFFER_WRITE,
  KILN_DEVICE_CALL_BUFFER_READ,
  KILN_DEVICE_CALL_EXECUTABLE_CREATE,
  KILN_DEVICE_CALL_CMD_CREATE,
  KILN_DEVICE_CALL_CMD_DISPATCH,
  KILN_DEVICE_CALL_CMD_BARRIER,
  KILN_DEVICE_CALL_CMD_TIMESTAMP,
  KILN_DEVICE_CALL_CMD_END,
  KILN_DEVICE_CALL_SUBMIT,
  KILN_DEVICE_CALL_WAIT,
  KILN_DEVICE_CALL_TIMESTAMPS_READ,
  KILN_DEVICE_CALL_BUFFER_WRAP,
  KILN_DEVICE_CALL_COUNT_
} kiln_device_call_t;

const char* kiln_device_call_name(kiln_device_call_t c);

/* The backend interface. |destroy| first; every slot is required except
 * the optional ones at the end (NULL: the default their comment names). */
typedef struct kiln_device_vtable_s {
  void (*destroy)(kiln_device_t* d);

  /* A buffer of |bytes| device memory (zeroed). |what| names it in errors. */
  kiln_status_t (*buffer_create)(kiln_device_t* d, uint64_t bytes, const char* what,
                                 kiln_device_buffer_t** out);
  /* A view of [offset, offset + bytes) of |parent| (offset aligned to
   * info.buffer_alignment); destroyed with buffer_destroy before its parent. */
  kiln_status_t (*view_create)(kiln_device_t* d, kiln_device_buffer_t* parent, uint64_t offset,
                               uint64_t bytes, kiln_device_buffer_t** out);
  void (*buffer_destroy)(kiln_device_t* d, kiln_device_buffer_t* b); /* NULL: no-op */
  /* Host <-> device copies; synchronous. */
  kiln_status_t (*buffer_write)(kiln_device_t* d, kiln_device_buffer_t* b, uint64_t offset,
                                const void* src, uint64_t bytes);
  kiln_status_t (*buffer_read)(kiln_device_t* d, kiln_device_buffer_t* b, uint64_t offset,
                               void* dst, uint64_t bytes);

  /* Builds the program's code for this device (compile, cache, load). The
   * executable keeps no pointer into |p| after returning unless documented
   * by the backend; the session keeps |p| alive anyway. */
  kiln_status_t (*executable_create)(kiln_device_t* d, const kiln_program_t* p,
                                     const kiln_device_build_options_t* o,
                                     kiln_device_executable_t** out);
  void (*executable_destroy)(kiln_device_t* d, kiln_device_executable_t* e); /* NULL: no-op */

  /* Command buffers. |max_timestamps| slots for cmd_timestamp (0: none). */
  kiln_status_t (*cmd_create)(kiln_device_t* d, kiln_device_executable_t* e,
                              int32_t max_timestamps, kiln_device_cmd_t** out);
  void (*cmd_destroy)(kiln_device_t* d, kiln_device_cmd_t* c); /* waits first; NULL: no-op */
  /* Kernel |kernel| of the executable with one buffer (or view) per
   * parameter, in program parameter order. */
  kiln_status_t (*cmd_dispatch)(kiln_device_t* d, kiln_device_cmd_t* c, int32_t kernel,
                                kiln_device_buffer_t* const* args, int32_t n_args);
  /* Everything recorded before completes (and is visible) before anything
   * recorded after starts. */
  kiln_status_t (*cmd_barrier)(kiln_device_t* d, kiln_device_cmd_t* c);
  kiln_status_t (*cmd_timestamp)(kiln_device_t* d, kiln_device_cmd_t* c, int32_t slot);
  kiln_status_t (*cmd_end)(kiln_device_t* d, kiln_device_cmd_t* c); /* recording done */

  /* Queues an ended command buffer; returns at once. */
  kiln_status_t (*submit)(kiln_device_t* d, kiln_device_cmd_t* c);
  /* Blocks until the last submission of |c| finished; returns its error
   * (a kernel fault, device lost). Waiting on an idle command buffer is OK. */
  kiln_status_t (*wait)(kiln_device_t* d, kiln_device_cmd_t* c);
  /* Nanoseconds of the first |n| timestamp slots of the last finished
   * submission, on one device clock. */
  kiln_status_t (*timestamps_read)(kiln_device_t* d, kiln_device_cmd_t* c, uint64_t* out_ns,
                                   int32_t n);

  /* Optional. A buffer over |bytes| of host memory at |host| (aligned to
   * info.buffer_alignment), used in place: for devices that run kernels on
   * host memory (the CPU), so a session binds a module's weights where the
   * module holds them (mapped from its file) instead of copying them. The
   * memory is read-only to the buffer's users (no buffer_write, no kernel
   * writes it) and the caller keeps it alive until the buffer and its views
   * are destroyed. NULL: the device cannot; callers copy into buffer_create
   * memory instead. A slot that forwards (the fault wrapper) returns
   * UNSUPPORTED when the device behind it cannot. */
  kiln_status_t (*buffer_wrap)(kiln_device_t* d, const void* host, uint64_t bytes, const char* what,
                               kiln_device_buffer_t** out);
  /* Optional. The value |n| of a per-sample program's dynamic dim for the
   * dispatches recorded into |c| after it: a GPU device launches each
   * kernel's grid dim 2 |n| times (the program's groups[2] is one
   * sample's). NULL: the kernels loop over the samples themselves (the
   * CPU, from the dims buffer); a GPU device without it cannot run such a
   * program. */
  kiln_status_t (*cmd_dim)(kiln_device_t* d, kiln_device_cmd_t* c, int64_t n);
} kiln_device_vtable_t;

/* A backend's vtable from its functions PREFIX_destroy, PREFIX_buffer_create,
 * ... PREFIX_timestamps_read, one per slot, named after the slot:
 *   static const kiln_device_vtable_t ocl_vtable = KILN_DEVICE_VTABLE(ocl);
 * Every backend fills every required slot, so the names are the whole
 * contract. */
#define KILN_DEVICE_VTABLE(prefix) {KILN_DEVICE_VTABLE_REQUIRED(prefix)}
/* The required slots alone, for a backend that adds optional ones:
 *   {KILN_DEVICE_VTABLE_REQUIRED(cpu) .buffer_wrap = cpu_buffer_wrap} */
#define KILN_DEVICE_VTABLE_REQUIRED(prefix)                                               \
    .destroy = prefix##_destroy, .buffer_create = prefix##_buffer_create,                 \
    .view_create = prefix##_view_create, .buffer_destroy = prefix##_buffer_destroy,       \
    .buffer_write = prefix##_buffer_write, .buffer_read = prefix##_buffer_read,           \
    .executable_create = prefix##_executable_create,                                      \
    .executable_destroy = prefix##_executable_destroy, .cmd_create = prefix##_cmd_create, \
    .cmd_destroy = prefix##_cmd_destroy, .cmd_dispatch = prefix##_cmd_dispatch,           \
    .cmd_barrier = prefix##_cmd_barrier, .cmd_timestamp = prefix##_cmd_timestamp,         \
    .cmd_end = prefix##_cmd_end, .submit = prefix##_submit, .wait = prefix##_wait,        \
    .timestamps_read = prefix##_timestamps_read,

/* The common head of every backend's device struct (backends embed it
 * first). Reference counted: kiln_device_retain / kiln_device_release. */
struct kiln_device_s {
  const kiln_device_vtable_t* vt;
  kiln_allocator_t allocator;
  kiln_device_info_t info;
  atomic_int refs;
};

/* Sets the common head (refs = 1). */
void kiln_device_init_base(kiln_device_t* d, const kiln_device_vtable_t* vt,
                           kiln_allocator_t allocator);

/* ---- fault injection (tests) ----------------------------------------- */

typedef enum kiln_fault_mode_e {
  KILN_FAULT_FAIL = 0,        /* the call returns DEVICE_ERROR ("injected fault") */
  KILN_FAULT_OUT_OF_MEMORY,   /* buffer/view creation returns OUT_OF_MEMORY naming the size */
  KILN_FAULT_DEVICE_LOST,     /* the call and every later one returns "device lost" */
  KILN_FAULT_BUILD_FAILURE,   /* executable_create returns a build error with a log */
} kiln_fault_mode_t;

typedef struct kiln_fault_spec_s {
  kiln_device_call_t call; /* which slot (ANY: every slot counts) */
  int32_t nth;             /* fail the nth matching call (1-based) */
  kiln_fault_mode_t mode;
} kiln_fault_spec_t;

/* A device that forwards every slot to |inner| (retained) and fails the
 * call that |spec| picks. Failed creates leave nothing allocated. */
kiln_status_t kiln_device_fault_wrap(kiln_device_t* inner, const kiln_fault_spec_t* spec,
                                     kiln_device_t** out);
/* Calls of each kind the wrapper has seen (for tests). */
int32_t kiln_device_fault_count(const kiln_device_t* wrapper, kiln_device_call_t call);

#ifdef __cplusplus
}
#endif
#endif /* KILN_RUNTIME_DEVICE_H_ */
