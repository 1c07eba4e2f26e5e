/* The OpenCL device's objects, shared by the steady-state half
 * (opencl_device.c: buffers, command buffers, submission) and the
 * build-time half (opencl_build.c: listing and creating devices, building
 * executables, embedding binaries; compiled for size, it runs while code
 * is built or loaded). Private to runtime/opencl/.
 */
#ifndef KILN_RUNTIME_OPENCL_OPENCL_DEVICE_INTERNAL_H_
#define KILN_RUNTIME_OPENCL_OPENCL_DEVICE_INTERNAL_H_

#ifndef CL_TARGET_OPENCL_VERSION
#define CL_TARGET_OPENCL_VERSION 120
#endif
#ifndef CL_USE_DEPRECATED_OPENCL_1_2_APIS
#define CL_USE_DEPRECATED_OPENCL_1_2_APIS
#endif
#include <CL/cl.h>
#include <pthread.h>
#include <stdbool.h>
#include <stdint.h>

#include "runtime/opencl/opencl_device.h"

/* ---- objects ------------------------------------------------------------ */

typedef struct ocl_device_s {
  kiln_device_t base; /* first */
  cl_platform_id platform;
  cl_device_id dev;
  cl_context ctx;
  cl_command_queue q;
  int32_t index;
  char version[128];  /* CL_DEVICE_VERSION */
  char vendor[128];   /* CL_DEVICE_VENDOR: with the name, driver and kiln */
  char drv[256];      /* CL_DRIVER_VERSION   version, a module binary's key */
  bool own_cache;     /* the driver caches built programs itself (PoCL) */
  bool lost;
  struct ocl_home_s* home; /* |ctx| and the units built in it, shared */
  /* launch limits: work-items a work-group dimension
   * (CL_DEVICE_MAX_WORK_ITEM_SIZES; 0: not known) and the largest global
   * size, 2^CL_DEVICE_ADDRESS_BITS - 1 (global sizes are the device's
   * size_t) */
  size_t max_items[3];
  uint64_t max_global;
} ocl_device_t;

/* At most this many units are kept; past it the memo starts afresh. */
#define OCL_MEMO_MAX 4096

typedef struct ocl_unit_s {
  uint64_t prelude_hash; /* FNV-1a of the prelude (and epilogue) it was built with */
  char* text;            /* the unit's text, compared whole */
  size_t len;
  char* sym;             /* the kernel symbol it defines (NULL: none) */
  cl_program prog;       /* retained */
} ocl_unit_t;

/* The context of an OpenCL device, shared by every kiln device of this
 * process that opens it (refs), and the units of program text built in it
 * by executables made with reuse_code (kiln_device_build_options_t), each
 * with the program holding it (retained): a later such build on any of
 * those devices takes a unit whose text and prelude are the same instead
 * of compiling it again (reuse_units). kiln tune builds the kernels alone
 * on a second device of the same name: the closing build on the first
 * takes the kept points' code from there. */
typedef struct ocl_home_s {
  cl_device_id dev;
  cl_context ctx;
  int32_t refs;
  pthread_mutex_t memo_mu;
  ocl_unit_t* memo;
  int32_t n_memo, cap_memo;
  struct ocl_home_s* next;
} ocl_home_t;


struct kiln_device_buffer_s {
  cl_mem mem;          /* NULL for an empty view */
  uint64_t bytes;
  uint64_t root_offset; /* offset in the root buffer (views) */
  struct kiln_device_buffer_s* root; /* NULL for a root buffer */
};

typedef struct ocl_kernel_s {
  cl_kernel k;
  cl_program prog; /* the program it was created from (not retained: the executable's) */
  char* name;
  int32_t n_args;
  size_t global[3], local[3];
  bool clblast;             /* runs as a CLBlast call (opencl_gemm_provider.h) */
  kiln_program_gemm_t gemm; /* when clblast */
} ocl_kernel_t;

struct kiln_device_executable_s {
  cl_program prog;
  cl_program* more; /* built with reuse_code: the programs its kernels come from (retained) */
  int32_t n_more;
  int32_t n_kernels;
  ocl_kernel_t* kernels;
  kiln_opencl_build_stats_t stats;
};

typedef enum op_kind_e { OP_DISPATCH, OP_BARRIER, OP_TIMESTAMP } op_kind_t;

typedef struct op_s {
  op_kind_t kind;
  int32_t kernel, slot; /* DISPATCH: kernel; TIMESTAMP: slot */
  int32_t first_arg, n_args; /* into cmd->args */
  int64_t samples;           /* DISPATCH: grid dim 2 times this (a dynamic dim's value) */
} op_t;

struct kiln_device_cmd_s {
  kiln_device_executable_t* exe;
  op_t* ops;
  int32_t n_ops, cap_ops;
  cl_mem* args;
  int32_t n_args, cap_args;
  int32_t max_ts;
  cl_event* ts;  /* per slot: marker of the last submission (or NULL) */
  cl_event last; /* end marker of the last submission */
  bool ended;
  int64_t dim; /* the dynamic dim's value for dispatches recorded from now (0: none) */
};

extern const kiln_device_vtable_t kiln_ocl_vtable;

static inline ocl_device_t* D(kiln_device_t* d) { return (ocl_device_t*)d; }

/* "device lost" naming the device. */
kiln_status_t kiln_ocl_lost_status(const ocl_device_t* d);

/* A failed CL call. CL_DEVICE_NOT_AVAILABLE (and a context that went away)
 * means the device is gone: it is remembered, so every later call says so. */
kiln_status_t kiln_ocl_cl_fail(ocl_device_t* d, cl_int err, const char* call, const char* what);

#define CHECK_LOST(d) \
  do {                \
    if ((d)->lost) return kiln_ocl_lost_status(d); \
  } while (0)

/* The vtable's destroy slot (opencl_build.c: the last device of a context
 * frees it and its units). */
void kiln_ocl_destroy(kiln_device_t* base);

/* The vtable's executable slots (opencl_build.c). */
kiln_status_t kiln_ocl_executable_create(kiln_device_t* base, const kiln_program_t* p,
                                         const kiln_device_build_options_t* o, kiln_device_executable_t** out);
void kiln_ocl_executable_destroy(kiln_device_t* base, kiln_device_executable_t* e);

#endif
