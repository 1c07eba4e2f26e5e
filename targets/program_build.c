/* Plan -> program: the tables the runtime needs, the weights and the code.
 *
 * Lifetimes are recomputed here from the kernels' arguments rather than
 * taken from the plan, so a plan that fusion rewrote without refreshing them
 * cannot hand the memory planner a stale interval; an alias's uses extend
 * its root's lifetime (the root's memory is what the planner places). */
#include "targets/program_build.h"

#include <pthread.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "lowering/lower_custom.h"


static const kiln_program_buffer_kind_t kind_map[] = {
    [KILN_PLAN_INPUT] = KILN_PB_INPUT,         [KILN_PLAN_OUTPUT] = KILN_PB_OUTPUT,
    [KILN_PLAN_INTERMEDIATE] = KILN_PB_INTERMEDIATE, [KILN_PLAN_CONST] = KILN_PB_CONST,
    [KILN_PLAN_TEMP] = KILN_PB_TEMP,           [KILN_PLAN_STATUS] = KILN_PB_STATUS,
    [KILN_PLAN_DIMS] = KILN_PB_DIMS,
};

/* Kernels store lowering's check codes; the runtime decodes them as its own. */
_Static_assert((int)KILN_CHECK_DIV_ZERO == (int)KILN_PB_CHECK_DIV_ZERO, "check codes differ");
_Static_assert((int)KILN_CHECK_INDEX_RANGE == (int)KILN_PB_CHECK_INDEX_RANGE, "check codes differ");
_Static_assert((int)KILN_CHECK_LENGTH_RANGE == (int)KILN_PB_CHECK_LENGTH_RANGE, "check codes differ");

static kiln_status_t alloc_zero(kiln_program_t* prog, size_t n, size_t elem, const char* what,
                                void* out) {
  void* m = NULL;
  KILN_RETURN_IF_ERROR(kiln_allocator_malloc(prog->allocator, (n ? n : 1) * elem, what, &m));
  memset(m, 0, (n ? n : 1) * elem);
  *(void**)out = m;
  return NULL;
}

/* Copies the constants [i0, i1) into the weights blob and zeroes the
 * padding after each (the blob is not cleared first: one pass over it). */
typedef struct weights_job_s {
  const kiln_plan_t* plan;
  kiln_program_t* prog;
  int32_t i0, i1;
} weights_job_t;

static void* copy_weights(void* arg) {
  const weights_job_t* j = arg;
  for (int32_t i = j->i0; i < j->i1; ++i) {
    const kiln_program_buffer_t* b = &j->prog->buffers[i];
    if (b->kind != KILN_PB_CONST || !b->bytes) continue;
    uint8_t* at = j->prog->weights + b->const_offset;
    memcpy(at, j->plan->buffers[i].value.data, (size_t)b->bytes);
    memset(at + b->bytes, 0, (size_t)(((b->bytes + 63) & ~(uint64_t)63) - b->bytes));
  }
  return NULL;
}

/* Blobs at least this large are filled by two threads, split where half
 * the bytes are: the blob is fresh memory, so the copy is mostly the
 * kernel faulting its pages in (ResNet-50's 102 MB: ~45 ms on one core),
 * and before the C compiler starts the second core idles. */
#define WEIGHTS_THREAD_MIN ((uint64_t)16 << 20)

static void fill_weights(const kiln_plan_t* plan, kiln_program_t* prog, uint64_t total) {
  weights_job_t all = {plan, prog, 0, prog->n_buffers}, second = all;
  pthread_t th;
  bool two = false;
  if (total >= WEIGHTS_THREAD_MIN && sysconf(_SC_NPROCESSORS_ONLN) >= 2) {
    uint64_t sum = 0;
    int32_t cut = 0;
    while (cut < prog->n_buffers && sum < total / 2) {
      const kiln_program_buffer_t* b = &prog->buffers[cut++];
      if (b->kind == KILN_PB_CONST) sum += (b->bytes + 63) & ~(uint64_t)63;
    }
    all.i1 = second.i0 = cut;
    two = pthread_create(&th, NULL, copy_weights, &second) == 0;
    if (!two) all.i1 = prog->n_buffers;
  }
  copy_weights(&all);
  if (two) pthread_join(th, NULL);
}

static kiln_status_t build_buffers(const kiln_plan_t* plan, kiln_program_t* prog) {
  int32_t n = plan->n_buffers;
  KILN_RETURN_IF_ERROR(alloc_zero(prog, (size_t)n, sizeof(kiln_program_buffer_t), "program buffers",
                                  &prog->buffers));
  prog->n_buffers = n;
  for (int32_t i = 0; i < n; ++i) {
    const kiln_plan_buffer_t* pb = &plan->buffers[i];
    kiln_program_buffer_t* b = &prog->buffers[i];
    KILN_RETURN_IF_ERROR(kiln_program_strdup(prog, pb->buf->name, &b->name));
    b->dtype = pb->buf->dtype;
    /* a float8 / int4 tensor's byte buffer: the session and the weights see
     * the tensor's own dtype (one byte an element either way) */
    if (pb->tensor >= 0 && pb->tensor < plan->graph->n_tensors) {
      const kiln_dtype_t gt = plan->graph->tensors[pb->tensor].dtype;
      if (gt != b->dtype && kiln_dtype_storage(gt) == b->dtype) b->dtype = gt;
    }
    b->kind = kind_map[pb->kind];
    b->rank = pb->buf->rank;
    memcpy(b->shape, pb->buf->shape, sizeof(b->shape));
    b->bytes = tir_buffer_span_bytes(pb->buf);
    b->alias_of = pb->alias_of;
    b->first_use = b->last_use = -1;
  }
  /* Lifetimes: every kernel argument marks its buffer and the buffer's root. */
  for (int32_t k = 0; k < plan->n_kernels; ++k) {
    const kiln_plan_kernel_t* kk = &plan->kernels[k];
    for (int32_t j = 0; j < kk->func->n_params; ++j) {
      int32_t bs[2] = {kk->args[j], kiln_plan_root(plan, kk->args[j])};
      for (int t = 0; t < 2; ++t) {
        kiln_program_buffer_t* b = &prog->buffers[bs[t]];
        if (b->first_use < 0) b->first_use = k;
        b->last_use = k;
      }
    }
  }
  /* Constants the kernels read or the model returns (an output folded to a
   * constant) go into the weights blob; unused ones carry no bytes (fusion
   * or folding left them behind). */
  uint64_t total = 0;
  for (int32_t i = 0; i < n; ++i) {
    kiln_program_buffer_t* b = &prog->buffers[i];
    if (b->kind != KILN_PB_CONST) continue;
    bool returned = false;
    for (int32_t k = 0; k < plan->graph->n_outputs && !returned; ++k)
      returned = kiln_plan_root(plan, plan->outputs[k]) == i;
    if (b->first_use < 0 && !returned) {
      b->bytes = 0;
      continue;
    }
    const kiln_array_t* v = &plan->buffers[i].value;
    if (v->dtype != b->dtype || v->nbytes != b->bytes || (v->nbytes && !v->data))
      return kiln_make_status(KILN_INVALID_ARGUMENT,
                              "constant '%s' holds %zu bytes of %s, the buffer needs %llu bytes of %s",
                              b->name, v->nbytes, kiln_dtype_name(v->dtype),
                              (unsigned long long)b->bytes, kiln_dtype_name(b->dtype));
    b->const_offset = total;
    total += (b->bytes + 63) & ~(uint64_t)63;
  }
  /* views of a constant left without bytes, unused as it is, carry none
   * either (a program of a few kernels, as kiln tune builds, leaves most
   * constants and their views unused) */
  for (int32_t i = 0; i < n; ++i) {
    kiln_program_buffer_t* b = &prog->buffers[i];
    const kiln_program_buffer_t* r = &prog->buffers[kiln_plan_root(plan, i)];
    if (b->alias_of >= 0 && b->first_use < 0 && r->kind == KILN_PB_CONST && !r->bytes) b->bytes = 0;
  }
  prog->weights_len = total;
  if (total) {
    /* With the system allocator the blob starts page-aligned (free()
     * takes aligned_alloc's memory; a page, where a device buffer's mmap
     * would start, not just the 64 bytes the views need), so a CPU session
     * binds the weights where they lie (runtime/session.c wrap_weights)
     * instead of copying them into a buffer of its own: for ResNet-50
     * 102 MB less to fault in and copy after the C compiler. fill_weights
     * writes every byte, so the blob need not be zeroed first; other
     * allocators keep their zeroed, unaligned blocks (the session copies). */
    void* w = NULL;
    const kiln_allocator_t sys = kiln_allocator_system();
    if (prog->allocator.alloc == sys.alloc && prog->allocator.free == sys.free)
      w = aligned_alloc(4096, ((size_t)total + 4095) & ~(size_t)4095);
    if (!w) KILN_RETURN_IF_ERROR(kiln_allocator_malloc(prog->allocator, (size_t)total, "weights", &w));
    prog->weights = w;
    fill_weights(plan, prog, total);
  }
  return NULL;
}

/* The kernel parameters that are inputs: the first ones (two slots may
 * share one, lowering/lower_custom.c). */
static int32_t custom_inputs(const kiln_custom_instance_t* ci) {
  int32_t n = 0;
  for (int32_t i = 0; i < ci->op->n_inputs; ++i)
    if (ci->in_arg[i] + 1 > n) n = ci->in_arg[i] + 1;
  return n;
}

/* The distinct plugin ops the kernels compute, for the module's 'PLUG'
 * section: a module loads only where their plugins are loaded. */
static kiln_status_t build_plugin_ops(const kiln_plan_t* plan, kiln_program_t* prog) {
  int32_t n = 0;
  for (int32_t k = 0; k < plan->n_kernels; ++k) n += plan->kernels[k].custom != NULL;
  if (!n) return NULL;
  KILN_RETURN_IF_ERROR(alloc_zero(prog, (size_t)n, sizeof(kiln_program_plugin_op_t), "plugin ops", &prog->plugin_ops));
  for (int32_t k = 0; k < plan->n_kernels; ++k) {
    const kiln_custom_instance_t* ci = plan->kernels[k].custom;
    if (!ci) continue;
    bool seen = false;
    for (int32_t i = 0; i < prog->n_plugin_ops && !seen; ++i) seen = !strcmp(prog->plugin_ops[i].name, ci->op->name) &&
                                                                 !strcmp(prog->plugin_ops[i].domain, ci->op->domain);
    if (seen) continue;
    kiln_program_plugin_op_t* po = &prog->plugin_ops[prog->n_plugin_ops++];
    po->version = ci->op->version;
    KILN_RETURN_IF_ERROR(kiln_program_strdup(prog, ci->op->domain, &po->domain));
    KILN_RETURN_IF_ERROR(kiln_program_strdup(prog, ci->op->name, &po->name));
  }
  return NULL;
}

static kiln_status_t build_kernels(const kiln_plan_t* plan, kiln_program_t* prog) {
  const kiln_graph_t* g = plan->graph;
  KILN_RETURN_IF_ERROR(alloc_zero(prog, (size_t)plan->n_kernels, sizeof(kiln_program_kernel_t),
                                  "program kernels", &prog->kernels));
  prog->n_kernels = plan->n_kernels;
  for (int32_t k = 0; k < plan->n_kernels; ++k) {
    const kiln_plan_kernel_t* pk = &plan->kernels[k];
    kiln_program_kernel_t* kk = &prog->kernels[k];
    const tir_func_t* f = pk->func;
    bool has_node = g && pk->node >= 0 && pk->node < g->n_nodes;
    KILN_RETURN_IF_ERROR(kiln_program_strdup(prog, f->name, &kk->name));
    KILN_RETURN_IF_ERROR(kiln_program_strdup(prog, has_node ? g->nodes[pk->node].name : "", &kk->node_name));
    KILN_RETURN_IF_ERROR(kiln_program_strdup(prog, has_node ? g->nodes[pk->node].op_type : "", &kk->op_type));
    kk->n_args = f->n_params;
    KILN_RETURN_IF_ERROR(alloc_zero(prog, (size_t)f->n_params, sizeof(int32_t), "kernel args", &kk->args));
    KILN_RETURN_IF_ERROR(alloc_zero(prog, (size_t)f->n_params, 1, "kernel access", &kk->access));
    for (int32_t j = 0; j < f->n_params; ++j) {
      kk->args[j] = pk->args[j];
      /* a plugin kernel's body is not tensor IR: its inputs come first */
      int acc = pk->custom ? (j < custom_inputs(pk->custom) ? TIR_ACCESS_LOAD : TIR_ACCESS_STORE)
                           : tir_func_buffer_access(f, f->params[j]);
      kk->access[j] = (uint8_t)(((acc & TIR_ACCESS_LOAD) || !acc ? KILN_ARG_READ : 0) |
                                ((acc & TIR_ACCESS_STORE) ? KILN_ARG_WRITE : 0));
      /* Traffic estimate: saturates rather than overflows on huge buffers.
       * The plan buffer's span: a per-sample kernel's parameter spans the
       * top of its range (lowering/plan_dyn.h), the estimate one sample. */
      const uint64_t sb = tir_buffer_span_bytes(plan->n_dims ? plan->buffers[pk->args[j]].buf : f->params[j]);
      const int64_t ways = ((kk->access[j] & KILN_ARG_READ) ? 1 : 0) + ((kk->access[j] & KILN_ARG_WRITE) ? 1 : 0);
      int64_t t;
      if (sb > INT64_MAX || __builtin_mul_overflow((int64_t)sb, ways, &t) ||
          __builtin_add_overflow(kk->bytes, t, &kk->bytes))
        kk->bytes = INT64_MAX;
    }
    for (int d = 0; d < 3; ++d) kk->groups[d] = kk->local[d] = 1;
    kk->flops = pk->flops;
    kk->inplace_in = kk->inplace_out = -1;
    int32_t in, out;
    if (kiln_plan_kernel_inplace(plan, k, &in, &out)) {
      kk->inplace_in = in;
      kk->inplace_out = out;
    }
  }
  return NULL;
}

/* The plan's dynamic dims (module section 'DYNS'). */
static kiln_status_t build_dims(const kiln_plan_t* plan, kiln_program_t* prog) {
  if (!plan->n_dims) return NULL;
  KILN_RETURN_IF_ERROR(alloc_zero(prog, (size_t)plan->n_dims, sizeof(kiln_program_dim_t), "dynamic dims", &prog->dims));
  prog->n_dims = plan->n_dims;
  for (int32_t i = 0; i < plan->n_dims; ++i) {
    KILN_RETURN_IF_ERROR(kiln_program_strdup(prog, plan->dims[i].name, &prog->dims[i].name));
    prog->dims[i].lo = plan->dims[i].lo;
    prog->dims[i].hi = plan->dims[i].hi;
  }
  if (plan->dim_axis) {
    const int32_t n = plan->graph->n_inputs + plan->graph->n_outputs;
    KILN_RETURN_IF_ERROR(alloc_zero(prog, (size_t)n + 1, sizeof(int32_t), "dynamic dim axes", &prog->dim_axis));
    memcpy(prog->dim_axis, plan->dim_axis, sizeof(int32_t) * (size_t)n);
  }
  return NULL;
}

/* Explicit inputs and outputs (kiln_program_build_options_t.io_inputs):
 * plan buffers named after themselves. */
static kiln_status_t build_io_given(const kiln_plan_t* plan, const kiln_program_build_options_t* o,
                                    kiln_program_t* prog) {
  prog->n_inputs = o->n_io_inputs;
  prog->n_outputs = o->n_io_outputs;
  KILN_RETURN_IF_ERROR(alloc_zero(prog, (size_t)prog->n_inputs, sizeof(int32_t), "inputs", &prog->inputs));
  KILN_RETURN_IF_ERROR(alloc_zero(prog, (size_t)prog->n_outputs, sizeof(int32_t), "outputs", &prog->outputs));
  KILN_RETURN_IF_ERROR(alloc_zero(prog, (size_t)prog->n_inputs, sizeof(char*), "input names", &prog->input_names));
  KILN_RETURN_IF_ERROR(alloc_zero(prog, (size_t)prog->n_outputs, sizeof(char*), "output names", &prog->output_names));
  for (int t = 0; t < 2; ++t) {
    const int32_t n = t ? o->n_io_outputs : o->n_io_inputs;
    const int32_t* from = t ? o->io_outputs : o->io_inputs;
    for (int32_t i = 0; i < n; ++i) {
      if (from[i] < 0 || from[i] >= plan->n_buffers)
        return kiln_make_status(KILN_INVALID_ARGUMENT, "program build: %s %d is buffer %d of %d",
                                t ? "output" : "input", (int)i, (int)from[i], (int)plan->n_buffers);
      (t ? prog->outputs : prog->inputs)[i] = from[i];
      KILN_RETURN_IF_ERROR(
          kiln_program_strdup(prog, plan->buffers[from[i]].buf->name, &(t ? prog->output_names : prog->input_names)[i]));
    }
  }
  return NULL;
}

static kiln_status_t build_io(const kiln_plan_t* plan, kiln_program_t* prog) {
  const kiln_graph_t* g = plan->graph;
  prog->n_inputs = g->n_inputs;
  prog->n_outputs = g->n_outputs;
  KILN_RETURN_IF_ERROR(alloc_zero(prog, (size_t)g->n_inputs, sizeof(int32_t), "inputs", &prog->inputs));
  KILN_RETURN_IF_ERROR(alloc_zero(prog, (size_t)g->n_outputs, sizeof(int32_t), "outputs", &prog->outputs));
  KILN_RETURN_IF_ERROR(alloc_zero(prog, (size_t)g->n_inputs, sizeof(char*), "input names", &prog->input_names));
  KILN_RETURN_IF_ERROR(alloc_zero(prog, (size_t)g->n_outputs, sizeof(char*), "output names", &prog->output_names));
  for (int32_t i = 0; i < g->n_inputs; ++i) {
    prog->inputs[i] = plan->inputs[i];
    KILN_RETURN_IF_ERROR(kiln_program_strdup(prog, g->tensors[g->inputs[i]].name, &prog->input_names[i]));
  }
  for (int32_t i = 0; i < g->n_outputs; ++i) {
    prog->outputs[i] = plan->outputs[i];
    KILN_RETURN_IF_ERROR(kiln_program_strdup(prog, g->tensors[g->outputs[i]].name, &prog->output_names[i]));
  }
  return NULL;
}

void kiln_program_templates(const kiln_target_t* target, kiln_template_set_t* out) {
  *out = (kiln_template_set_t){0};
  if (target && target->templates) target->templates(out);
}

kiln_status_t kiln_program_build(const kiln_plan_t* plan, const kiln_target_t* target,
                                 const kiln_program_build_options_t* options,
                                 kiln_allocator_t allocator, kiln_program_t** out_program) {
  if (!plan || !plan->graph || !target || !out_program)
    return kiln_make_status(KILN_INVALID_ARGUMENT, "program build: NULL plan or target");
  const kiln_graph_t* g = plan->graph;
  kiln_program_t* prog = NULL;
  KILN_RETURN_IF_ERROR(kiln_program_create(allocator, &prog));
  prog->target = target->name;
  const char* model = options && options->model_name ? options->model_name
                      : g->source && g->source[0]  ? g->source
                                                   : "graph";
  kiln_status_t s = kiln_program_strdup(prog, model, &prog->model_name);
  if (!s) s = kiln_program_strdup(prog, options && options->precision ? options->precision : "fp32",
                                  &prog->precision);
  if (!s) s = kiln_program_strdup(prog, options ? options->options : "", &prog->options);
  if (!s) s = build_buffers(plan, prog);
  if (!s) s = build_kernels(plan, prog);
  if (!s) s = options && options->io_inputs ? build_io_given(plan, options, prog) : build_io(plan, prog);
  if (!s) s = build_plugin_ops(plan, prog);
  if (!s) s = build_dims(plan, prog);
  const bool code = !(options && options->no_code);
  bool hetero = false;
  for (int32_t k = 0; k < plan->n_kernels && !hetero; ++k) hetero = plan->kernels[k].host;
  if (!s && code) s = hetero ? kiln_program_emit_hetero(plan, target, prog) : target->emit(plan, prog);
  const char* levels = options ? options->cpu_targets : NULL;
  if (!s && code && levels && levels[0]) {
    if (!target->emit_native)
      s = kiln_make_status(KILN_INVALID_ARGUMENT, "--cpu-target: the %s target has no machine code to compile "
                           "ahead of time (the cpu target has)", target->name);
    else
      s = target->emit_native(plan, prog, levels);
  }
  if (!s && code) s = kiln_program_validate(prog);
  if (s) {
    kiln_program_destroy(prog);
    return kiln_status_annotate(s, "%s: building the %s program", model, target->name);
  }
  *out_program = prog;
  return NULL;
}
