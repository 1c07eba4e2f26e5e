/* Sessions of a staged module (runtime/program_staged.h): one ordinary
 * session per compiled stage, made with this one (a stage whose code does
 * not build fails at creation), and the host nodes run here on
 * runtime/staged_ops.c. A run walks the segments in order over a table of
 * the values: the caller's inputs and the constants are viewed, what the
 * stages and host nodes make is owned until the run ends. Each value is
 * checked against the table as it is made -- a fixed axis at its size, a
 * data-dependent one within its bound -- so a stage never gets an input of
 * a shape it was not compiled for. The run happens at enqueue (the host
 * nodes need the stages' results before the next stage can start); wait
 * hands its outputs over, as heterogeneous sessions do. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "runtime/module_impl.h"
#include "runtime/program_staged.h"
#include "runtime/session_impl.h"
#include "runtime/staged_ops.h"

struct kiln_staged_session_s {
  kiln_session_t** ses;  /* per segment; NULL for host nodes */
  kiln_done_runs_t done; /* runs finished at enqueue, until their wait */
};

static const char* mname(const kiln_session_t* s) {
  return s->p->model_name && s->p->model_name[0] ? s->p->model_name : "module";
}

kiln_status_t kiln_staged_session_create(kiln_session_t* s) {
  const kiln_program_staged_t* t = s->p->staged;
  struct kiln_staged_session_s* g = calloc(1, sizeof *g);
  if (g) g->ses = calloc((size_t)t->n_segments, sizeof(kiln_session_t*));
  if (!g || !g->ses) {
    free(g);
    return kiln_make_status(KILN_OUT_OF_MEMORY, "%s: out of memory creating a session", mname(s));
  }
  s->stg = g;
  KILN_RETURN_IF_ERROR(kiln_done_runs_init(s, &g->done, s->opts.slots));
  kiln_session_options_t so = s->opts;
  so.slots = 1; /* a stage runs once per run, which waits for it */
  for (int32_t i = 0; i < t->n_segments; ++i) {
    const kiln_staged_segment_t* sg = &t->segments[i];
    if (sg->op != KILN_STAGED_STAGE) continue;
    kiln_module_t* m = NULL;
    KILN_RETURN_IF_ERROR(kiln_module_child(s->module, sg->prog, &m), "%s: staged segment %d ('%s')", mname(s), (int)i,
                         sg->name);
    kiln_status_t st = kiln_session_create_bucket(m, s->dev, &so, false, NULL, &g->ses[i]);
    kiln_module_release(m); /* the session holds its own reference */
    if (st) return kiln_status_annotate(st, "%s: staged segment %d ('%s')", mname(s), (int)i, sg->name);
  }
  return NULL;
}

void kiln_staged_session_destroy(kiln_session_t* s) {
  struct kiln_staged_session_s* g = s->stg;
  if (!g) return;
  for (int32_t i = 0; g->ses && i < s->p->staged->n_segments; ++i) kiln_session_destroy(g->ses[i]);
  kiln_done_runs_free(s, &g->done);
  free(g->ses);
  free(g);
  s->stg = NULL;
}

/* Whether |a| fits value |v|: its dtype and rank, each fixed axis at its
 * size, each data-dependent one within its bound, and bytes for its shape. */
static bool fits(const kiln_array_t* a, const kiln_staged_value_t* v) {
  if (a->dtype != v->dtype || a->shape.rank != v->rank) return false;
  for (int32_t d = 0; d < v->rank; ++d) {
    const int64_t n = a->shape.dims[d];
    if (n < 0 || ((v->datadep >> d) & 1 ? n > v->dims[d] : n != v->dims[d])) return false;
  }
  const int64_t n = kiln_array_numel(a);
  return a->nbytes >= (size_t)n * kiln_dtype_size(a->dtype) && (!n || a->data);
}

static kiln_status_t made(const kiln_session_t* s, int32_t seg, int32_t k, const kiln_array_t* a) {
  const kiln_program_staged_t* t = s->p->staged;
  const kiln_staged_segment_t* sg = &t->segments[seg];
  if (fits(a, &t->values[sg->out[k]])) return NULL;
  return kiln_make_status(KILN_INVALID_ARGUMENT,
                          "%s: staged segment %d ('%s'): output %d (%s, rank %d) does not fit value %d of the module's "
                          "table (its size or bound)",
                          mname(s), (int)seg, sg->name, (int)k, kiln_dtype_name(a->dtype), (int)a->shape.rank,
                          (int)sg->out[k]);
}

static kiln_status_t run_segment(kiln_session_t* s, int32_t i, kiln_array_t* vals, bool* owned) {
  const kiln_program_staged_t* t = s->p->staged;
  const kiln_staged_segment_t* sg = &t->segments[i];
  char where[200];
  snprintf(where, sizeof where, "%s: staged segment %d ('%s')", mname(s), (int)i, sg->name);
  if (sg->op != KILN_STAGED_STAGE) {
    const kiln_array_t* in[KILN_STAGED_MAX_IO];
    for (int32_t k = 0; k < sg->n_in; ++k) in[k] = sg->in[k] >= 0 ? &vals[sg->in[k]] : NULL;
    kiln_array_t o[KILN_STAGED_MAX_IO];
    memset(o, 0, sizeof o);
    KILN_RETURN_IF_ERROR(kiln_staged_op_run(sg, in, o, where));
    kiln_status_t st = NULL;
    for (int32_t k = 0; k < sg->n_out; ++k) {
      if (sg->out[k] < 0) { /* an output nothing reads */
        kiln_array_free(kiln_allocator_system(), &o[k]);
        continue;
      }
      vals[sg->out[k]] = o[k];
      owned[sg->out[k]] = true;
      if (!st) st = made(s, i, k, &o[k]);
    }
    return st;
  }
  kiln_array_t in[KILN_STAGED_MAX_IO], out[KILN_STAGED_MAX_IO];
  for (int32_t k = 0; k < sg->n_in; ++k) in[k] = vals[sg->in[k]];
  memset(out, 0, sizeof out);
  KILN_RETURN_IF_ERROR(kiln_session_run(s->stg->ses[i], in, out), "%s", where);
  for (int32_t k = 0; k < sg->n_out; ++k) {
    vals[sg->out[k]] = out[k];
    owned[sg->out[k]] = true;
  }
  for (int32_t k = 0; k < sg->n_out; ++k) KILN_RETURN_IF_ERROR(made(s, i, k, &out[k]));
  return NULL;
}

static kiln_status_t run_all(kiln_session_t* s, const kiln_array_t* inputs, kiln_array_t* outputs) {
  const kiln_program_t* p = s->p;
  const kiln_program_staged_t* t = p->staged;
  kiln_array_t* vals = calloc((size_t)t->n_values, sizeof(kiln_array_t));
  bool* owned = calloc((size_t)t->n_values, sizeof(bool));
  kiln_status_t st = NULL;
  if (!vals || !owned) st = kiln_make_status(KILN_OUT_OF_MEMORY, "%s: out of memory running stages", mname(s));
  for (int32_t v = 0; !st && v < t->n_values; ++v) {
    const kiln_staged_value_t* x = &t->values[v];
    if (!x->data) continue;
    vals[v] = (kiln_array_t){.dtype = x->dtype, .shape = {.rank = x->rank}, .data = x->data, .nbytes = x->nbytes};
    memcpy(vals[v].shape.dims, x->dims, sizeof x->dims);
  }
  for (int32_t i = 0; !st && i < p->n_inputs; ++i) {
    if (!fits(&inputs[i], &t->values[t->model_in[i]]))
      st = kiln_make_status(KILN_INVALID_ARGUMENT, "%s: input '%s' is not %s of the module's shape (or too few bytes)",
                            mname(s), p->input_names[i], kiln_dtype_name(t->values[t->model_in[i]].dtype));
    else vals[t->model_in[i]] = inputs[i];
  }
  for (int32_t i = 0; !st && i < t->n_segments; ++i) st = run_segment(s, i, vals, owned);
  for (int32_t i = 0; !st && i < p->n_outputs; ++i)
    st = kiln_array_clone(kiln_allocator_system(), &vals[t->model_out[i]], &outputs[i]);
  if (st)
    for (int32_t i = 0; i < p->n_outputs; ++i) kiln_array_free(kiln_allocator_system(), &outputs[i]);
  for (int32_t v = 0; owned && v < t->n_values; ++v)
    if (owned[v]) kiln_array_free(kiln_allocator_system(), &vals[v]);
  free(vals);
  free(owned);
  return st;
}

kiln_status_t kiln_staged_enqueue(kiln_session_t* s, const kiln_array_t* inputs, uint64_t* out_run) {
  kiln_done_run_t* r = NULL;
  KILN_RETURN_IF_ERROR(kiln_done_runs_slot(s, &s->stg->done, &r));
  KILN_RETURN_IF_ERROR(run_all(s, inputs, r->outputs));
  kiln_done_runs_keep(s, r, out_run);
  return NULL;
}

kiln_status_t kiln_staged_wait(kiln_session_t* s, uint64_t run, kiln_array_t* outputs) {
  return kiln_done_runs_take(s, &s->stg->done, run, outputs);
}

void kiln_staged_memory(const kiln_session_t* s, kiln_session_memory_t* out) {
  const struct kiln_staged_session_s* g = s->stg;
  for (int32_t i = 0; i < s->p->staged->n_segments; ++i)
    if (g->ses[i]) kiln_session_memory_add(out, g->ses[i]);
  out->slots = g->done.n;
}
