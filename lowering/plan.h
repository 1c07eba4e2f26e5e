/* kiln plan: a whole graph lowered to kernels over named buffers.
 *
 * Built from a prepared graph whose input shapes are static (bind symbolic
 * dims first). Buffers are graph inputs, outputs, intermediates, constants
 * (weights and compile-time transformed weights) and per-node workspaces;
 * aliases (Reshape & co.) point at the buffer whose memory they share.
 * Kernels are in execution order. Targets compile the kernels; runtimes
 * allocate the buffers (issue: memory planner) and dispatch the kernels.
 */
#ifndef KILN_LOWERING_PLAN_H_
#define KILN_LOWERING_PLAN_H_

#include "lowering/lower.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef enum kiln_plan_buffer_kind_e {
  KILN_PLAN_INPUT,
  KILN_PLAN_OUTPUT,
  KILN_PLAN_INTERMEDIATE,
  KILN_PLAN_CONST,
  KILN_PLAN_TEMP,
  /* A run-time check's status word (kiln_lower_status): i32[1], zero before
   * every run; a kernel stores a KILN_CHECK_* code into it when the check
   * fails, and the runtime turns a non-zero word into the run's error. */
  KILN_PLAN_STATUS,
  /* The dynamic dims' values (kiln_plan_make_dynamic): i64 per dim, which
   * the runtime writes before every run and the kernels read. */
  KILN_PLAN_DIMS,
} kiln_plan_buffer_kind_t;

/* A dim the plan runs for any value of in [lo, hi] (lowering/plan_dyn.h). */
typedef struct kiln_plan_dim_s {
  const char* name; /* in the plan's arena */
  int64_t lo, hi;
} kiln_plan_dim_t;

/* What a failed run-time check stores into its status word. The runtime
 * reads the same numbers (runtime/program.h, KILN_PB_CHECK_*; the program
 * builder asserts they agree). */
typedef enum kiln_check_code_e {
  KILN_CHECK_OK = 0,
  KILN_CHECK_DIV_ZERO = 1,    /* integer division by zero */
  KILN_CHECK_INDEX_RANGE = 2, /* an index outside [-n, n) of its axis */
  KILN_CHECK_LENGTH_RANGE = 3, /* a sequence length outside [0, T] (ReverseSequence) */
} kiln_check_code_t;

typedef struct kiln_plan_buffer_s {
  const tir_buffer_t* buf;
  kiln_plan_buffer_kind_t kind;
  int32_t tensor;      /* graph tensor index, -1 for temps/derived consts */
  int32_t alias_of;    /* plan buffer index whose memory this shares, or -1 */
  kiln_array_t value;  /* CONST: the data (owned by the plan when owned=1) */
  bool owned;
  int32_t first_use, last_use; /* kernel indices (lifetime), -1 if unused */
  /* CONST laid out for a template instance (lowering/template_weights.c):
   * the buffer and value it had before, which choosing templates again
   * puts back (buf NULL: none) */
  struct {
    const tir_buffer_t* buf;
    kiln_array_t value;
    bool owned;
  } before_layout;
} kiln_plan_buffer_t;

typedef struct kiln_plan_kernel_s {
  tir_func_t* func;          /* scheduled + simplified: what targets print */
  const tir_func_t* naive;   /* before scheduling */
  const tir_schedule_t* schedule;
  int32_t node;              /* graph node it came from */
  int32_t* args;             /* plan buffer index per func param */
  int64_t flops;             /* for profiles: the node's FLOPs split evenly */
  int32_t* fused_nodes;      /* other graph nodes fused into this kernel (fuse.h) */
  int32_t n_fused_nodes;
  /* the template kernel lowering chose for it (lowering/template.h), in
   * the plan's arena; NULL: the target prints |func| */
  struct kiln_template_s* tmpl;
  /* A plugin op's kernel (lowering/lower_custom.h), in the plan's arena:
   * |func| only names it and lists its parameters (its body is empty);
   * targets print the plugin's source instead. NULL: a kiln kernel. */
  const struct kiln_custom_instance_s* custom;
  /* Heterogeneous execution: the node was lowered for the CPU (the GPU
   * target refused it) and the kernel runs on the session's CPU device.
   * Fusion never joins a host kernel with a device one, and templates are
   * not chosen for it. false on CPU plans. */
  bool host;
  /* A template instance the set's rule left out, which a tuner may switch
   * in (kiln_template_switch; a depthwise conv the printed kernel runs by
   * default); NULL: none. */
  struct kiln_template_s* tmpl_off;
} kiln_plan_kernel_t;

/* A convolution's weights as the block-sparse lowering saw them: blocks
 * of |rows| x |cols| weights, the fraction of them that is zero, the bytes
 * of the packed dense and the block-sparse forms, and whether the layer
 * runs on the sparse kernel (the mode or AUTO's rule decided). */
typedef struct kiln_plan_sparse_note_s {
  int32_t node;
  int64_t rows, cols;
  double zero_blocks;
  int64_t dense_bytes, sparse_bytes;
  bool sparse;
} kiln_plan_sparse_note_t;

typedef struct kiln_plan_s {
  kiln_allocator_t allocator;
  tir_ctx_t tir;
  const kiln_graph_t* graph;
  kiln_target_class_t target;
  int64_t loop_limit; /* kiln_plan_options_t.loop_limit (GPU plans; else 0) */
  int32_t ew_lanes;   /* kiln_plan_options_t.ew_lanes (GPU plans; else 0) */
  /* GPU: what the device lacks (KILN_GPU_LACKS_*, lowering/template.h),
   * set by kiln_partition_plan_build for the target's kernel_check
   * (targets/registry.h): an OpenCL device without fp64 gets no f64
   * kernel. 0 elsewhere. */
  uint32_t gpu_lacks;
  kiln_gemm_hook_fn gemm_hook; /* kiln_plan_options_t's (CPU plans; else NULL) */
  void* gemm_hook_user;
  kiln_plan_buffer_t* buffers;
  int32_t n_buffers, cap_buffers;
  kiln_plan_kernel_t* kernels;
  int32_t n_kernels, cap_kernels;
  int32_t* inputs;  /* plan buffer per graph input */
  int32_t* outputs; /* plan buffer per graph output */
  int32_t* tensor_buffer; /* graph tensor -> plan buffer (or -1) */
  int32_t name_counter;
  /* tir buffer -> plan buffer, an open-addressing table (index + 1, 0 =
   * empty) that kiln_plan_add_buffer keeps so that looking a kernel's
   * parameters up stays O(1) on graphs with 100k tensors. Trusted only while
   * buffer_index_n == n_buffers: plans built by hand fall back to a scan. */
  int32_t* buffer_index;
  int32_t buffer_index_cap, buffer_index_n;
  /* Dynamic dims (kiln_plan_make_dynamic): 0, or 1 -- the outermost dim of
   * every input and output, the plan then being one sample's. */
  int32_t n_dims;
  kiln_plan_dim_t dims[1];
  /* Block-sparse weights (lowering/sparse_block.h): the options' mode, and
   * one note per convolution with constant weights the CPU lowering
   * looked at (malloc'd; the compile report lists them). */
  int32_t sparse_mode;
  kiln_plan_sparse_note_t* sparse_notes;
  int32_t n_sparse_notes, cap_sparse_notes;
  /* The memory layouts (kiln_plan_options_t.layout_block; lowering/layout.h),
   * NULL when every tensor is plain, and per graph tensor the plan buffer
   * holding it in the other layout (a reorder's output), or -1. */
  struct kiln_layout_s* layout;
  int32_t* reorder_buf;
  /* A range on a dim inside the shapes (lowering/plan_seq.h): per graph
   * input, then output, the axis that is the dynamic dim (-1: none), in the
   * plan's arena. NULL: the dynamic dim, if any, is the per-sample one. */
  int32_t* dim_axis;
  /* kiln_plan_build_plain: float MatMul/Gemm as one plain loop nest (no
   * tiles, no packing) and row reductions one element at a time (no lanes
   * and tails): loop nests whose form does not depend on the sizes. */
  bool plain_loops;
  /* GPU: the most vec4 texels one texel buffer may hold on the device the
   * plan is compiled for (kiln_device_info_t.max_texels; 0: not checked).
   * The Vulkan target prints a kernel whose buffers exceed it without
   * texel reads. */
  uint64_t max_texels;
  /* GPU: the most bytes one kernel argument may span on the device the
   * plan is for (kiln_device_info_t.max_binding_bytes; 0: not checked),
   * set by kiln_partition_plan_build: a GPU target's kernel_check refuses
   * a kernel binding a larger buffer, so its node runs on the CPU. */
  uint64_t max_binding;
  /* GPU: the work-groups one dispatch may launch per dimension on the
   * device the plan is compiled for (kiln_device_info_t.max_groups; 0:
   * not known, the Vulkan target then keeps to the spec's minimum, 65535).
   * The Vulkan target folds a grid past it into the other dimensions. */
  uint64_t max_groups[3];
} kiln_plan_t;

typedef struct kiln_plan_options_s {
  kiln_target_class_t target;
  int32_t threads; /* 0 = number of cores */
  /* GPU: loop iterations one invocation may run in all on the device the
   * plan is for (kiln_device_info_t.loop_limit; 0 = no limit). With a
   * limit, lowering splits work over more invocations (the GEMM generator
   * computes one tile per invocation) so that no kernel needs more. */
  int64_t loop_limit;
  /* CPU: where convolutions run block-sparse (kiln_sparse_mode_t,
   * lowering/sparse_block.h; 0 = AUTO). */
  int32_t sparse;
  /* CPU: block the channels of the tensors the layout pass chooses by this
   * many floats (NCHWc; lowering/layout.h); 0: every tensor NCHW. */
  int32_t layout_block;
  /* GPU: elements per invocation in the element-wise nests' default
   * schedule (kiln_target_t.ew_lanes; 0 or 1: one): where a nest's
   * innermost extent is a multiple of it, the invocation runs a VECTORIZED
   * loop of that many (lowering/lower_elementwise.c). */
  int32_t ew_lanes;
} kiln_plan_options_t;

/* Lowers every node of |g| (inputs must have static shapes). Unlowerable
 * ops are listed in one UNSUPPORTED error. */
kiln_status_t kiln_plan_build(const kiln_graph_t* g, const kiln_plan_options_t* options,
                              kiln_allocator_t allocator, kiln_plan_t** out_plan);
/* kiln_plan_build with |hook| (CPU plans; NULL: none) called for every
 * GEMM's schedule knobs, with |user| (a tuner's points). */
kiln_status_t kiln_plan_build_hooked(const kiln_graph_t* g, const kiln_plan_options_t* options, kiln_gemm_hook_fn hook,
                                     void* user, kiln_allocator_t allocator, kiln_plan_t** out_plan);

/* Heterogeneous execution (targets/partition.h), for GPU plans: |nodes|
 * per graph node, nonzero to lower it for the CPU class (its kernels get
 * |host|). With |fallback| a node whose GPU lowering refuses (UNSUPPORTED)
 * is lowered for the CPU instead: its entry is set to 1 and
 * |reasons|[node] gets the refusal (malloc'd; the caller frees). Both
 * arrays are caller-owned, g->n_nodes long (|reasons| may be NULL). */
typedef struct kiln_plan_host_s {
  uint8_t* nodes;
  bool fallback;
  char** reasons;
} kiln_plan_host_t;

/* kiln_plan_build with some nodes on the host CPU (|host| NULL: none). */
KILN_MUST_USE kiln_status_t kiln_plan_build_host(const kiln_graph_t* g, const kiln_plan_options_t* options,
                                   kiln_plan_host_t* host, kiln_allocator_t allocator, kiln_plan_t** out_plan);
/* kiln_plan_build (CPU or GPU class) with float MatMul and Gemm as one plain loop nest
 * each and row reductions (Softmax, LayerNormalization, ...) one element at
 * a time, whose form does not depend on the sizes: what a range inside the
 * shapes anti-unifies (lowering/plan_seq.h). Slower than the tiled GEMM. */
KILN_MUST_USE kiln_status_t kiln_plan_build_plain(const kiln_graph_t* g, const kiln_plan_options_t* options,
                                                  kiln_allocator_t allocator, kiln_plan_t** out_plan);
void kiln_plan_destroy(kiln_plan_t* p);
/* Follows aliases to the buffer that owns the memory. */
int32_t kiln_plan_root(const kiln_plan_t* p, int32_t buffer);
/* The graph node kernel |kk| was lowered from, for messages: its name (the
 * kernel's own name without one) and op type ("?" without one). */
const char* kiln_plan_kernel_node_name(const kiln_plan_t* p, const kiln_plan_kernel_t* kk);
const char* kiln_plan_kernel_node_op(const kiln_plan_t* p, const kiln_plan_kernel_t* kk);
/* In-place candidate of kernel |k|: parameter *out_out may share the memory
 * of parameter *out_in. True only for kernels whose every node is
 * element-wise or broadcast (each output element is computed from the same
 * element of a full-shape input: no transpose or reduction), with one
 * stored parameter and an input of the same shape and element size that it
 * only loads. Whether the input's memory is free at that point is the
 * memory planner's question; this only says the kernel tolerates it. */
bool kiln_plan_kernel_inplace(const kiln_plan_t* p, int32_t k, int32_t* out_in, int32_t* out_out);
/* Text: buffers and kernels (with their schedules and TIR when verbose). */
void kiln_plan_dump(const kiln_plan_t* p, FILE* out, bool verbose);

#ifdef __cplusplus
}
#endif
#endif
