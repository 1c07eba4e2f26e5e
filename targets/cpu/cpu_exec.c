/* The CPU executable: generated kernels plus the memory of every plan buffer.
 *
 * Each plan buffer that is not an alias gets its own 64-byte-aligned block
 * (zeroed; constants copied in at compile time); aliases share the block of
 * the buffer they resolve to. A run copies the inputs into their blocks,
 * calls the kernels in plan order with prebuilt argument arrays, and copies
 * the outputs out. (Sharing blocks between buffers with disjoint lifetimes
 * is the memory planner's job, not done here.) */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "runtime/program.h"
#include "targets/cpu/cpu_internal.h"

struct kiln_cpu_exec_s {
  const kiln_plan_t* plan;
  kiln_cpu_module_t module;
  int32_t threads;
  void** mem;     /* per plan buffer: its memory (aliases resolved) */
  void** owned;   /* per plan buffer: the block it owns, or NULL */
  size_t* bytes;  /* per plan buffer: bytes it spans */
  void*** args;   /* per kernel: argument pointers */
};

static const char* bname(const kiln_plan_t* p, int32_t b) {
  return p->buffers[b].buf && p->buffers[b].buf->name ? p->buffers[b].buf->name : "?";
}

static kiln_status_t alloc_buffers(kiln_cpu_exec_t* e) {
  const kiln_plan_t* p = e->plan;
  int32_t n = p->n_buffers;
  e->mem = calloc((size_t)(n ? n : 1), sizeof(void*));
  e->owned = calloc((size_t)(n ? n : 1), sizeof(void*));
  e->bytes = calloc((size_t)(n ? n : 1), sizeof(size_t));
  if (!e->mem || !e->owned || !e->bytes)
    return kiln_make_status(KILN_OUT_OF_MEMORY, "cpu: out of memory for buffer tables");
  for (int32_t i = 0; i < n; ++i) {
    const kiln_plan_buffer_t* pb = &p->buffers[i];
    if (!pb->buf)
      return kiln_make_status(KILN_INVALID_ARGUMENT, "cpu: plan buffer %d has no tensor-IR buffer",
                              (int)i);
    if (pb->buf->dtype <= KILN_DTYPE_UNDEFINED || pb->buf->dtype >= KILN_DTYPE_COUNT_)
      return kiln_make_status(KILN_INVALID_ARGUMENT, "cpu: plan buffer '%s' has no dtype",
                              bname(p, i));
    e->bytes[i] = (size_t)tir_buffer_span_bytes(pb->buf);
    if (kiln_cpu_root(p, i) < 0)
      return kiln_make_status(KILN_INVALID_ARGUMENT,
                              "cpu: plan buffer '%s' has a broken alias chain", bname(p, i));
  }
  for (int32_t i = 0; i < n; ++i) {
    const kiln_plan_buffer_t* pb = &p->buffers[i];
    if (pb->alias_of >= 0) continue;
    /* Intermediates that fusion made dead (no kernel touches them, and no
     * graph input or output lives in them) get no memory. */
    if ((pb->kind == KILN_PLAN_INTERMEDIATE || pb->kind == KILN_PLAN_TEMP) && pb->first_use < 0) {
      bool needed = false;
      for (int32_t k = 0; k < p->graph->n_outputs && !needed; ++k)
        needed = kiln_cpu_root(p, p->outputs[k]) == i;
      for (int32_t k = 0; k < p->graph->n_inputs && !needed; ++k)
        needed = kiln_cpu_root(p, p->inputs[k]) == i;
      if (!needed) continue;
    }
    size_t sz = (e->bytes[i] + 63) & ~(size_t)63;
    if (sz == 0) sz = 64;
    void* m = NULL;
    if (posix_memalign(&m, 64, sz) != 0 || !m)
      return kiln_make_status(KILN_OUT_OF_MEMORY, "cpu: cannot allocate %zu bytes for buffer '%s'",
                              sz, bname(p, i));
    memset(m, 0, sz);
    e->owned[i] = e->mem[i] = m;
    if (pb->kind == KILN_PLAN_CONST) {
      if (pb->value.nbytes > 0 && !pb->value.data)
        return kiln_make_status(KILN_INVALID_ARGUMENT, "cpu: constant '%s' has no data",
                                bname(p, i));
      if (pb->value.dtype != pb->buf->dtype || pb->value.nbytes != e->bytes[i])
        return kiln_make_status(KILN_INVALID_ARGUMENT,
                                "cpu: constant '%s' holds %zu bytes of %s, the buffer needs %zu "
                                "bytes of %s",
                                bname(p, i), pb->value.nbytes, kiln_dtype_name(pb->value.dtype),
                                e->bytes[i], kiln_dtype_name(pb->buf->dtype));
      if (pb->value.nbytes) memcpy(m, pb->value.data, pb->value.nbytes);
    }
  }
  for (int32_t i = 0; i < n; ++i) {
    int32_t r = kiln_cpu_root(p, i);
    if (r == i) continue;
    if (e->bytes[i] > e->bytes[r])
      return kiln_make_status(KILN_INVALID_ARGUMENT,
                              "cpu: buffer '%s' (%zu bytes) aliases '%s', which has only %zu",
                              bname(p, i), e->bytes[i], bname(p, r), e->bytes[r]);
    e->mem[i] = e->mem[r];
  }
  return NULL;
}

static kiln_status_t build_args(kiln_cpu_exec_t* e) {
  const kiln_plan_t* p = e->plan;
  e->args = calloc((size_t)(p->n_kernels ? p->n_kernels : 1), sizeof(void**));
  if (!e->args) return kiln_make_status(KILN_OUT_OF_MEMORY, "cpu: out of memory");
  for (int32_t k = 0; k < p->n_kernels; ++k) {
    const tir_func_t* f = p->kernels[k].func;
    e->args[k] = calloc((size_t)(f->n_params ? f->n_params : 1), sizeof(void*));
    if (!e->args[k]) return kiln_make_status(KILN_OUT_OF_MEMORY, "cpu: out of memory");
    for (int32_t j = 0; j < f->n_params; ++j) {
      int32_t b = p->kernels[k].args[j];
      const tir_buffer_t* param = f->params[j];
      /* The kernel indexes with its parameter's shape/strides: it must fit. */
      if (param->dtype != p->buffers[b].buf->dtype || (size_t)tir_buffer_span_bytes(param) > e->bytes[b])
        return kiln_make_status(KILN_INVALID_ARGUMENT,
                                "cpu: kernel '%s': parameter '%s' (%s, %zu bytes) does not fit "
                                "plan buffer '%s' (%s, %zu bytes)",
                                f->name, param->name, kiln_dtype_name(param->dtype),
                                (size_t)tir_buffer_span_bytes(param), bname(p, b),
                                kiln_dtype_name(p->buffers[b].buf->dtype), e->bytes[b]);
      e->args[k][j] = e->mem[b];
    }
  }
  return NULL;
}

static int32_t default_threads(void) {
  long n = sysconf(_SC_NPROCESSORS_ONLN);
  return n > 0 ? (int32_t)n : 1;
}

kiln_status_t kiln_cpu_compile(const kiln_plan_t* plan, const kiln_cpu_options_t* options,
                               kiln_cpu_exec_t** out_exec, kiln_cpu_compile_stats_t* out_stats) {
  if (!plan || !out_exec) return kiln_make_status(KILN_INVALID_ARGUMENT, "cpu: NULL plan");
  /* Its kernels would read a dims buffer nobody writes: sessions run those. */
  if (plan->n_dims)
    return kiln_make_status(KILN_UNSUPPORTED, "cpu: the plan has dynamic dim '%s'; run its module in a session",
                            plan->dims[0].name);
  kiln_cpu_options_t defaults;
  kiln_cpu_options_default(&defaults);
  const kiln_cpu_options_t* o = options ? options : &defaults;
  kiln_cpu_compile_stats_t stats;
  memset(&stats, 0, sizeof stats);

  kiln_cpu_exec_t* e = calloc(1, sizeof(*e));
  if (!e) return kiln_make_status(KILN_OUT_OF_MEMORY, "cpu: out of memory");
  e->plan = plan;
  e->threads = o->threads > 0 ? o->threads : default_threads();

  kiln_status_t s = NULL;
  kiln_cpu_source_t src;
  memset(&src, 0, sizeof src);
  const char** names = NULL;
  double t0 = kiln_cpu_now();
  if ((s = kiln_cpu_codegen(plan, &src))) goto fail;
  stats.codegen_s = kiln_cpu_now() - t0;
  stats.source_bytes = src.text.len;
  if (plan->n_kernels > 0) {
    names = calloc((size_t)plan->n_kernels, sizeof(*names));
    if (!names) {
      s = kiln_make_status(KILN_OUT_OF_MEMORY, "cpu: out of memory");
      goto fail;
    }
    for (int32_t k = 0; k < plan->n_kernels; ++k) names[k] = plan->kernels[k].func->name;
    /* The unit as a module's code section would hold it (a view). */
    kiln_program_code_t code = {.text = src.text.data, .text_len = src.text.len,
                                .n_parts = src.n_parts, .parts = src.parts};
    if ((s = kiln_cpu_module_load(&code, o, names, plan->n_kernels, &e->module, &stats)))
      goto fail;
  }
  double ta = kiln_cpu_now();
  if ((s = alloc_buffers(e))) goto fail;
  if ((s = build_args(e))) goto fail;
  stats.load_s += kiln_cpu_now() - ta;
  free(names);
  kiln_cpu_source_free(&src);
  if (out_stats) *out_stats = stats;
  *out_exec = e;
  return NULL;
fail:
  free(names);
  kiln_cpu_source_free(&src);
  kiln_cpu_exec_destroy(e);
  return s;
}

void kiln_cpu_exec_destroy(kiln_cpu_exec_t* e) {
  if (!e) return;
  const kiln_plan_t* p = e->plan;
  if (e->args)
    for (int32_t k = 0; k < p->n_kernels; ++k) free(e->args[k]);
  free(e->args);
  if (e->owned)
    for (int32_t i = 0; i < p->n_buffers; ++i) free(e->owned[i]);
  free(e->owned);
  free(e->mem);
  free(e->bytes);
  kiln_cpu_module_unload(&e->module);
  free(e);
}

static const char* input_name(const kiln_plan_t* p, int32_t i) {
  const kiln_graph_t* g = p->graph;
  if (g && i < g->n_inputs && g->inputs[i] >= 0 && g->inputs[i] < g->n_tensors)
    return g->tensors[g->inputs[i]].name;
  return bname(p, p->inputs[i]);
}

static kiln_status_t check_input(const kiln_cpu_exec_t* e, int32_t i, const kiln_array_t* a) {
  const kiln_plan_t* p = e->plan;
  const tir_buffer_t* b = p->buffers[p->inputs[i]].buf;
  kiln_shape_t want = kiln_shape_make(b->rank, b->shape);
  if (a->dtype != b->dtype)
    return kiln_make_status(KILN_INVALID_ARGUMENT, "input '%s' has dtype %s, the plan expects %s",
                            input_name(p, i), kiln_dtype_name(a->dtype), kiln_dtype_name(b->dtype));
  if (!kiln_shape_equal(&a->shape, &want)) {
    char got[160], exp[160];
    kiln_shape_format(&a->shape, got, sizeof got);
    kiln_shape_format(&want, exp, sizeof exp);
    return kiln_make_status(KILN_INVALID_ARGUMENT,
                            "input '%s' has shape %s, but the plan was compiled for shape %s",
                            input_name(p, i), got, exp);
  }
  size_t need = (size_t)tir_buffer_numel(b) * kiln_dtype_size(b->dtype);
  if (a->nbytes < need || (need && !a->data))
    return kiln_make_status(KILN_INVALID_ARGUMENT, "input '%s' holds %zu bytes, needs %zu",
                            input_name(p, i), a->nbytes, need);
  return NULL;
}

/* A run-time check that failed (a status word left non-zero: see
 * KILN_PLAN_STATUS), reported as the session does, by the checking node. */
static kiln_status_t check_words(const kiln_cpu_exec_t* e) {
  const kiln_plan_t* p = e->plan;
  for (int32_t k = 0; k < p->n_kernels; ++k)
    for (int32_t j = 0; j < p->kernels[k].func->n_params; ++j) {
      int32_t b = p->kernels[k].args[j];
      if (p->buffers[b].kind != KILN_PLAN_STATUS || !e->mem[b]) continue;
      int32_t code = *(const int32_t*)e->mem[b];
      if (!code) continue;
      const kiln_node_t* n = &p->graph->nodes[p->kernels[k].node];
      return kiln_program_check_error(code, "cpu", n->name, n->op_type, p->kernels[k].func->name);
    }
  return NULL;
}

kiln_status_t kiln_cpu_run(kiln_cpu_exec_t* e, const kiln_array_t* inputs, kiln_array_t* outputs,
                           kiln_cpu_kernel_cb on_kernel, void* user) {
  if (!e) return kiln_make_status(KILN_INVALID_ARGUMENT, "cpu: NULL executable");
  const kiln_plan_t* p = e->plan;
  const kiln_graph_t* g = p->graph;
  int32_t n_in = g ? g->n_inputs : 0;
  int32_t n_out = g ? g->n_outputs : 0;
  if (n_in > 0 && !inputs)
    return kiln_make_status(KILN_INVALID_ARGUMENT, "cpu: %d inputs expected, got none", (int)n_in);
  if (n_out > 0 && !outputs)
    return kiln_make_status(KILN_INVALID_ARGUMENT, "cpu: no room for %d outputs", (int)n_out);
  for (int32_t i = 0; i < n_in; ++i) KILN_RETURN_IF_ERROR(check_input(e, i, &inputs[i]));
  /* Zero copy where possible: kernels read 64-byte-aligned inputs in place
   * and write straight into freshly allocated (aligned) output arrays; other
   * inputs are copied into the plan's buffers and other outputs copied out.
   * Every kernel argument is re-pointed each run from |over| (root buffer ->
   * memory for this run). */
  void** over = calloc((size_t)(p->n_buffers ? p->n_buffers : 1), sizeof(void*));
  bool* direct_out = calloc((size_t)(n_out ? n_out : 1), sizeof(bool));
  if (!over || !direct_out) {
    free(over);
    free(direct_out);
    return kiln_make_status(KILN_OUT_OF_MEMORY, "cpu: out of memory");
  }
  for (int32_t i = 0; i < n_in; ++i) {
    int32_t r = kiln_cpu_root(p, p->inputs[i]);
    size_t need = (size_t)tir_buffer_numel(p->buffers[r].buf) * kiln_dtype_size(inputs[i].dtype);
    if (p->buffers[r].kind == KILN_PLAN_CONST) continue; /* specialised input */
    if (((uintptr_t)inputs[i].data & 63) == 0 && inputs[i].data) {
      over[r] = inputs[i].data;
    } else {
      if (need) memcpy(e->mem[r], inputs[i].data, need);
      over[r] = e->mem[r];
    }
  }
  kiln_status_t s = NULL;
  for (int32_t i = 0; i < n_out; ++i) {
    int32_t b = p->outputs[i];
    int32_t r = kiln_cpu_root(p, b);
    const tir_buffer_t* tb = p->buffers[b].buf;
    bool exclusive = p->buffers[r].kind == KILN_PLAN_OUTPUT && !over[r];
    for (int32_t j = 0; j < n_out && exclusive; ++j)
      if (j != i && kiln_cpu_root(p, p->outputs[j]) == r) exclusive = false;
    memset(&outputs[i], 0, sizeof(outputs[i]));
    if (!exclusive) continue;
    size_t bytes = (size_t)tir_buffer_numel(tb) * kiln_dtype_size(tb->dtype);
    void* m = NULL;
    if (posix_memalign(&m, 64, bytes ? (bytes + 63) & ~(size_t)63 : 64) != 0 || !m) {
      s = kiln_make_status(KILN_OUT_OF_MEMORY, "cpu: cannot allocate %zu bytes for output %d",
                           bytes, (int)i);
      break;
    }
    memset(m, 0, bytes);
    outputs[i].dtype = tb->dtype;
    outputs[i].shape = kiln_shape_make(tb->rank, tb->shape);
    outputs[i].data = m;
    outputs[i].nbytes = bytes;
    over[r] = m;
    direct_out[i] = true;
  }
  if (!s) {
    for (int32_t k = 0; k < p->n_kernels; ++k)
      for (int32_t j = 0; j < p->kernels[k].func->n_params; ++j) {
        int32_t r = kiln_cpu_root(p, p->kernels[k].args[j]);
        e->args[k][j] = over[r] ? over[r] : e->mem[r];
      }
    if (e->module.set_threads) e->module.set_threads(e->threads);
    for (int32_t b = 0; b < p->n_buffers; ++b)
      if (p->buffers[b].kind == KILN_PLAN_STATUS && e->mem[b]) memset(e->mem[b], 0, sizeof(int32_t));
    for (int32_t k = 0; k < p->n_kernels; ++k) {
      double t = on_kernel ? kiln_cpu_now() : 0.0;
      e->module.fns[k]((void* const*)e->args[k]);
      if (on_kernel) on_kernel(user, k, kiln_cpu_now() - t);
    }
    s = check_words(e);
  }
  for (int32_t i = 0; i < n_out && !s; ++i) {
    if (direct_out[i]) continue;
    int32_t b = p->outputs[i];
    int32_t r = kiln_cpu_root(p, b);
    const tir_buffer_t* tb = p->buffers[b].buf;
    kiln_shape_t sh = kiln_shape_make(tb->rank, tb->shape);
    s = kiln_array_alloc(kiln_allocator_system(), tb->dtype, &sh, &outputs[i]);
    if (s) {
      s = kiln_status_annotate(s, "cpu: output %d", (int)i);
      break;
    }
    if (outputs[i].nbytes) memcpy(outputs[i].data, over[r] ? over[r] : e->mem[r], outputs[i].nbytes);
  }
  if (s)
    for (int32_t j = 0; j < n_out; ++j) kiln_array_free(kiln_allocator_system(), &outputs[j]);
  free(over);
  free(direct_out);
  return s;
}
