/* Heterogeneous sessions: a program whose kernels run on two devices (the
 * target's and, for the nodes the target refused, the CPU; see
 * targets/partition.h) driven by one session.
 *
 * The kernels split into segments, maximal runs of consecutive kernels on
 * one device. Each segment becomes a program of its own -- the whole
 * program's buffers under the same indices, its kernels, its device's
 * code -- run by a plain session on that device, so the memory planner,
 * barriers, run-time checks and profiles of one device apply unchanged
 * inside a segment. At a segment's edges are the transfers: a root buffer
 * it reads that an earlier segment wrote (or a model input) is one of its
 * inputs, uploaded into its arena; a root it writes that a later segment
 * or the model's outputs read is one of its outputs, read back to the
 * host. Buffers crossing devices so live in both arenas (and in host
 * memory between them), and the wait for one segment before the next
 * starts is the barrier between devices.
 *
 * A run executes its segments in order inside kiln_session_enqueue; wait
 * hands back the outputs. Up to |slots| finished runs may wait to be
 * collected. */
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "runtime/device_registry.h"
#include "runtime/module_impl.h"
#include "runtime/session_impl.h"

typedef struct seg_s {
  uint8_t device;          /* KILN_KERNEL_ON_* */
  int32_t first, last;     /* parent kernels */
  kiln_session_t* ses;     /* on the segment's device */
  int32_t n_in, n_out;
  int32_t* in_root;        /* parent root per segment input */
  int32_t* out_root;       /* parent root per segment output */
  kiln_array_t* in_arr;    /* per run: shallow views of host copies */
  kiln_array_t* out_arr;
  uint64_t xfer_bytes;     /* bytes crossing devices at its edges per run */
  double xfer_s;           /* transfer and sync time, summed over runs */
  double xfer_first_s;     /* ... of the first run, which pays for lazy driver work */
  double start_s;          /* start in the last run, from the run's start */
} seg_t;

struct kiln_hetero_s {
  kiln_device_t* host; /* the CPU device */
  int32_t n_segs;
  seg_t* segs;
  kiln_array_t* copy;  /* per parent buffer (roots): the host copy of its bytes */
  bool* owned;         /* copy[i] was allocated here (else a caller's input) */
  kiln_done_runs_t done; /* runs finished at enqueue, until their wait */
  int32_t runs;
};

static const char* mname(const kiln_session_t* s) {
  return s->p->model_name && s->p->model_name[0] ? s->p->model_name : "module";
}

static kiln_status_t oom(const kiln_session_t* s) {
  return kiln_make_status(KILN_OUT_OF_MEMORY, "%s: out of memory in a heterogeneous session", mname(s));
}

static double now_s(void) {
  struct timespec t;
  clock_gettime(CLOCK_MONOTONIC, &t);
  return (double)t.tv_sec + (double)t.tv_nsec * 1e-9;
}

/* ---- segment programs -------------------------------------------------- */

enum { TOUCH = 1, WRITE = 2 };

/* Per parent root: how kernels [lo, hi] use it (TOUCH, WRITE bits). */
static void uses(const kiln_program_t* p, int32_t lo, int32_t hi, uint8_t* out) {
  memset(out, 0, (size_t)p->n_buffers);
  for (int32_t k = lo; k <= hi; ++k) {
    const kiln_program_kernel_t* kk = &p->kernels[k];
    for (int32_t j = 0; j < kk->n_args; ++j) {
      int32_t r = kiln_program_root(p, kk->args[j]);
      out[r] |= TOUCH | ((kk->access[j] & KILN_ARG_WRITE) ? WRITE : 0);
    }
  }
}

static kiln_status_t copy_code(kiln_program_t* q, const kiln_program_code_t* src, int32_t blob_first,
                               int32_t n_blobs) {
  kiln_allocator_t a = q->allocator;
  kiln_program_code_t* c = &q->code;
  if (src->text_len) {
    KILN_RETURN_IF_ERROR(kiln_allocator_malloc(a, (size_t)src->text_len + 1, "segment code", (void**)&c->text));
    memcpy(c->text, src->text, (size_t)src->text_len);
    c->text[src->text_len] = 0;
    c->text_len = src->text_len;
  }
  if (src->n_parts) {
    KILN_RETURN_IF_ERROR(kiln_allocator_malloc(a, sizeof(uint64_t) * 2 * (size_t)src->n_parts, "segment code",
                                               (void**)&c->parts));
    memcpy(c->parts, src->parts, sizeof(uint64_t) * 2 * (size_t)src->n_parts);
    c->n_parts = src->n_parts;
  }
  if (src->n_blobs && n_blobs) {
    KILN_RETURN_IF_ERROR(kiln_allocator_malloc(a, sizeof(uint8_t*) * (size_t)n_blobs, "segment code",
                                               (void**)&c->blobs));
    memset(c->blobs, 0, sizeof(uint8_t*) * (size_t)n_blobs);
    KILN_RETURN_IF_ERROR(kiln_allocator_malloc(a, sizeof(uint64_t) * (size_t)n_blobs, "segment code",
                                               (void**)&c->blob_lens));
    c->n_blobs = n_blobs;
    for (int32_t i = 0; i < n_blobs; ++i) {
      const uint64_t len = src->blob_lens[blob_first + i];
      c->blob_lens[i] = 0;
      if (!len) continue;
      KILN_RETURN_IF_ERROR(kiln_allocator_malloc(a, (size_t)len, "segment code", (void**)&c->blobs[i]));
      memcpy(c->blobs[i], src->blobs[blob_first + i], (size_t)len);
      c->blob_lens[i] = len;
    }
  }
  return NULL;
}

static kiln_status_t copy_kernel(kiln_program_t* q, const kiln_program_kernel_t* src, kiln_program_kernel_t* k) {
  *k = *src;
  k->name = k->node_name = k->op_type = NULL;
  k->args = NULL;
  k->access = NULL;
  k->device = KILN_KERNEL_ON_TARGET;
  KILN_RETURN_IF_ERROR(kiln_program_strdup(q, src->name, &k->name));
  KILN_RETURN_IF_ERROR(kiln_program_strdup(q, src->node_name, &k->node_name));
  KILN_RETURN_IF_ERROR(kiln_program_strdup(q, src->op_type, &k->op_type));
  const size_t n = (size_t)(src->n_args > 0 ? src->n_args : 1);
  KILN_RETURN_IF_ERROR(kiln_allocator_malloc(q->allocator, sizeof(int32_t) * n, "segment kernel", (void**)&k->args));
  KILN_RETURN_IF_ERROR(kiln_allocator_malloc(q->allocator, n, "segment kernel", (void**)&k->access));
  memcpy(k->args, src->args, sizeof(int32_t) * (size_t)src->n_args);
  memcpy(k->access, src->access, (size_t)src->n_args);
  return NULL;
}

/* Which roots segment [lo, hi] takes in (|is_in|: it touches them and a
 * kernel before it or the caller wrote them) and hands on (|is_out|: it
 * writes them and a later kernel or the model's outputs read them). */
static kiln_status_t seg_edges(const kiln_program_t* p, int32_t lo, int32_t hi, bool* is_in, bool* is_out) {
  const size_t n = (size_t)p->n_buffers + 1;
  uint8_t* here = calloc(n, 1);
  uint8_t* before = calloc(n, 1);
  uint8_t* after = calloc(n, 1);
  if (!here || !before || !after) {
    free(here);
    free(before);
    free(after);
    return kiln_make_status(KILN_OUT_OF_MEMORY, "out of memory splitting a heterogeneous program");
  }
  uses(p, lo, hi, here);
  if (lo > 0) uses(p, 0, lo - 1, before);
  if (hi + 1 < p->n_kernels) uses(p, hi + 1, p->n_kernels - 1, after);
  memset(is_in, 0, n - 1);
  memset(is_out, 0, n - 1);
  for (int32_t i = 0; i < p->n_inputs; ++i) before[kiln_program_root(p, p->inputs[i])] |= WRITE;
  for (int32_t i = 0; i < p->n_outputs; ++i) after[kiln_program_root(p, p->outputs[i])] |= TOUCH;
  for (int32_t r = 0; r < p->n_buffers; ++r) {
    if (kiln_program_root(p, r) != r || p->buffers[r].kind == KILN_PB_CONST) continue;
    is_in[r] = (here[r] & TOUCH) && (before[r] & WRITE);
    is_out[r] = (here[r] & WRITE) && (after[r] & TOUCH);
  }
  free(here);
  free(before);
  free(after);
  return NULL;
}

/* The buffers of a segment: all of the parent's, same indices; roots taken
 * in become INPUT, roots handed on OUTPUT (both: INPUT, listed as an
 * output too), the rest keep their role or go unused. */
static kiln_status_t seg_buffers(const kiln_program_t* p, kiln_program_t* q, const bool* is_in, const bool* is_out) {
  KILN_RETURN_IF_ERROR(kiln_allocator_malloc(q->allocator, sizeof(kiln_program_buffer_t) * (size_t)(p->n_buffers + 1),
                                             "segment buffers", (void**)&q->buffers));
  memset(q->buffers, 0, sizeof(kiln_program_buffer_t) * (size_t)(p->n_buffers + 1));
  q->n_buffers = p->n_buffers;
  for (int32_t i = 0; i < p->n_buffers; ++i) {
    const kiln_program_buffer_t* pb = &p->buffers[i];
    kiln_program_buffer_t* b = &q->buffers[i];
    *b = *pb;
    b->name = NULL;
    KILN_RETURN_IF_ERROR(kiln_program_strdup(q, pb->name, &b->name));
    b->first_use = b->last_use = -1;
    const int32_t r = kiln_program_root(p, i);
    if (p->buffers[r].kind == KILN_PB_CONST) continue;
    if (i != r) b->kind = KILN_PB_INTERMEDIATE; /* a view: its root carries the role */
    else if (is_in[r]) b->kind = KILN_PB_INPUT;
    else if (is_out[r]) b->kind = KILN_PB_OUTPUT;
    else if (pb->kind == KILN_PB_INPUT || pb->kind == KILN_PB_OUTPUT) b->kind = KILN_PB_INTERMEDIATE;
  }
  return NULL;
}

static void seg_lifetimes(kiln_program_t* q) {
  kiln_program_lifetimes(q);
  /* constants no kernel of the segment reads carry no bytes here */
  for (int32_t i = 0; i < q->n_buffers; ++i)
    if (q->buffers[i].kind == KILN_PB_CONST && q->buffers[i].first_use < 0) {
      q->buffers[i].bytes = 0;
      q->buffers[i].const_offset = 0;
    }
}

static kiln_status_t seg_io(kiln_program_t* q, seg_t* g, const bool* is_in, const bool* is_out) {
  kiln_allocator_t a = q->allocator;
  g->n_in = g->n_out = 0;
  for (int32_t r = 0; r < q->n_buffers; ++r) {
    g->n_in += is_in[r];
    g->n_out += is_out[r];
  }
  const size_t ni = (size_t)g->n_in + 1, no = (size_t)g->n_out + 1;
  g->in_root = calloc(ni, sizeof(int32_t));
  g->out_root = calloc(no, sizeof(int32_t));
  g->in_arr = calloc(ni, sizeof(kiln_array_t));
  g->out_arr = calloc(no, sizeof(kiln_array_t));
  if (!g->in_root || !g->out_root || !g->in_arr || !g->out_arr)
    return kiln_make_status(KILN_OUT_OF_MEMORY, "out of memory building a segment");
  KILN_RETURN_IF_ERROR(kiln_allocator_malloc(a, sizeof(int32_t) * ni, "segment io", (void**)&q->inputs));
  KILN_RETURN_IF_ERROR(kiln_allocator_malloc(a, sizeof(int32_t) * no, "segment io", (void**)&q->outputs));
  KILN_RETURN_IF_ERROR(kiln_allocator_malloc(a, sizeof(char*) * ni, "segment io", (void**)&q->input_names));
  KILN_RETURN_IF_ERROR(kiln_allocator_malloc(a, sizeof(char*) * no, "segment io", (void**)&q->output_names));
  memset(q->input_names, 0, sizeof(char*) * ni);
  memset(q->output_names, 0, sizeof(char*) * no);
  for (int32_t r = 0; r < q->n_buffers; ++r) {
    char name[32];
    snprintf(name, sizeof name, "t%d", (int)r); /* buffer names need not be unique; indices are */
    if (is_in[r]) {
      g->in_root[q->n_inputs] = r;
      q->inputs[q->n_inputs] = r;
      KILN_RETURN_IF_ERROR(kiln_program_strdup(q, name, &q->input_names[q->n_inputs++]));
    }
    if (is_out[r]) {
      g->out_root[q->n_outputs] = r;
      q->outputs[q->n_outputs] = r;
      KILN_RETURN_IF_ERROR(kiln_program_strdup(q, name, &q->output_names[q->n_outputs++]));
    }
  }
  return NULL;
}

/* The constants the segment's kernels read (seg_lifetimes left the others
 * without bytes), packed into a weights blob of its own at the 64-byte
 * offsets the module format uses: a segment holds no copy of the weights
 * only another device reads. */
static kiln_status_t seg_weights(const kiln_program_t* p, kiln_program_t* q) {
  uint64_t total = 0;
  for (int32_t i = 0; i < q->n_buffers; ++i) {
    kiln_program_buffer_t* b = &q->buffers[i];
    if (b->kind != KILN_PB_CONST || b->alias_of >= 0 || !b->bytes) continue;
    b->const_offset = total;
    total += (b->bytes + 63) & ~(uint64_t)63;
  }
  if (!total) return NULL;
  KILN_RETURN_IF_ERROR(kiln_allocator_malloc(q->allocator, (size_t)total, "segment weights", (void**)&q->weights));
  memset(q->weights, 0, (size_t)total);
  q->weights_len = total;
  for (int32_t i = 0; i < q->n_buffers; ++i) {
    const kiln_program_buffer_t* b = &q->buffers[i];
    if (b->kind != KILN_PB_CONST || b->alias_of >= 0 || !b->bytes) continue;
    memcpy(q->weights + b->const_offset, p->weights + p->buffers[i].const_offset, (size_t)b->bytes);
  }
  return NULL;
}

/* The program of segment |g|: kernels [g->first, g->last] of |p|, built
 * for the device that runs them. */
static kiln_status_t seg_program(const kiln_program_t* p, seg_t* g, kiln_program_t** out) {
  const size_t n = (size_t)p->n_buffers + 1;
  bool* is_in = calloc(n, sizeof(bool));
  bool* is_out = calloc(n, sizeof(bool));
  kiln_program_t* q = NULL;
  kiln_status_t s = !is_in || !is_out ? kiln_make_status(KILN_OUT_OF_MEMORY, "out of memory building a segment")
                                      : kiln_program_create(p->allocator, &q);
  if (!s) s = seg_edges(p, g->first, g->last, is_in, is_out);
  if (!s) {
    const bool host = g->device == KILN_KERNEL_ON_HOST;
    q->target = host ? kiln_device_api_find(KILN_HOST_TARGET)->name : p->target;
    char nm[512];
    snprintf(nm, sizeof nm, "%s [kernels %d-%d on %s]", p->model_name ? p->model_name : "module", (int)g->first,
             (int)g->last, q->target);
    s = kiln_program_strdup(q, nm, &q->model_name);
    if (!s) s = kiln_program_strdup(q, p->precision, &q->precision);
    if (!s) s = kiln_program_strdup(q, p->options, &q->options);
    if (!s) s = seg_buffers(p, q, is_in, is_out);
    const int32_t nk = g->last - g->first + 1;
    if (!s) s = kiln_allocator_malloc(q->allocator, sizeof(kiln_program_kernel_t) * (size_t)nk, "segment kernels",
                                      (void**)&q->kernels);
    if (!s) memset(q->kernels, 0, sizeof(kiln_program_kernel_t) * (size_t)nk);
    for (int32_t k = 0; k < nk && !s; ++k) {
      q->n_kernels = k + 1;
      s = copy_kernel(q, &p->kernels[g->first + k], &q->kernels[k]);
    }
    if (!s) seg_lifetimes(q);
    if (!s) s = seg_io(q, g, is_in, is_out);
    if (!s) s = seg_weights(p, q);
    /* a segment's kernels are consecutive among its device's: the blob of
     * its first is after those of the device's kernels before it */
    int32_t blob_first = 0;
    for (int32_t k = 0; k < g->first; ++k) blob_first += p->kernels[k].device == g->device;
    if (!s) s = copy_code(q, host ? &p->host_code : &p->code, blob_first, nk);
  }
  free(is_in);
  free(is_out);
  if (s) {
    kiln_program_destroy(q);
    return s;
  }
  *out = q;
  return NULL;
}

/* ---- creation ------------------------------------------------------------ */

static void seg_free(seg_t* g) {
  kiln_session_destroy(g->ses);
  for (int32_t j = 0; g->out_arr && j < g->n_out; ++j) kiln_array_free(kiln_allocator_system(), &g->out_arr[j]);
  free(g->in_root);
  free(g->out_root);
  free(g->in_arr);
  free(g->out_arr);
}

static void drop_copies(kiln_session_t* s) {
  kiln_hetero_t* h = s->het;
  for (int32_t i = 0; h->copy && i < s->p->n_buffers; ++i) {
    if (h->owned[i]) kiln_array_free(kiln_allocator_system(), &h->copy[i]);
    memset(&h->copy[i], 0, sizeof(kiln_array_t));
    h->owned[i] = false;
  }
}

void kiln_hetero_destroy(kiln_session_t* s) {
  kiln_hetero_t* h = s ? s->het : NULL;
  if (!h) return;
  for (int32_t i = 0; h->segs && i < h->n_segs; ++i) seg_free(&h->segs[i]);
  free(h->segs);
  drop_copies(s);
  free(h->copy);
  free(h->owned);
  kiln_done_runs_free(s, &h->done);
  kiln_device_release(h->host);
  free(h);
  s->het = NULL;
}

static kiln_status_t init_profile(kiln_session_t* s) {
  const kiln_program_t* p = s->p;
  s->prof = calloc((size_t)p->n_kernels + 1, sizeof(kiln_profile_entry_t));
  if (!s->prof) return oom(s);
  for (int32_t k = 0; k < p->n_kernels; ++k) {
    const kiln_program_kernel_t* kk = &p->kernels[k];
    s->prof[k] = (kiln_profile_entry_t){kk->name, kk->node_name, kk->op_type, 0, 0, 0, kk->flops, kk->bytes,
                                        kk->device == KILN_KERNEL_ON_HOST ? s->het->host->info.api : s->dev->info.api};
  }
  return NULL;
}

kiln_status_t kiln_hetero_session_create(kiln_session_t* s) {
  const kiln_program_t* p = s->p;
  kiln_hetero_t* h = calloc(1, sizeof *h);
  if (!h) return oom(s);
  s->het = h;
  kiln_device_open_options_t oo = {.threads = s->opts.threads, .strict = true};
  KILN_RETURN_IF_ERROR(kiln_device_open(KILN_HOST_TARGET, &oo, s->dev->allocator, &h->host),
                       "%s: opening the CPU device for the kernels %s cannot run", mname(s), p->target);
  for (int32_t k = 0; k < p->n_kernels; ++k) h->n_segs += k == 0 || p->kernels[k].device != p->kernels[k - 1].device;
  h->segs = calloc((size_t)h->n_segs + 1, sizeof(seg_t));
  h->copy = calloc((size_t)p->n_buffers + 1, sizeof(kiln_array_t));
  h->owned = calloc((size_t)p->n_buffers + 1, sizeof(bool));
  if (!h->segs || !h->copy || !h->owned) return oom(s);
  KILN_RETURN_IF_ERROR(kiln_done_runs_init(s, &h->done, s->opts.slots));
  kiln_session_options_t so = s->opts;
  so.slots = 1; /* the segments run one after another, inside enqueue */
  for (int32_t i = 0, k = 0; i < h->n_segs; ++i) {
    seg_t* g = &h->segs[i];
    g->device = p->kernels[k].device;
    g->first = k;
    while (k + 1 < p->n_kernels && p->kernels[k + 1].device == g->device) ++k;
    g->last = k++;
    kiln_program_t* q = NULL;
    kiln_module_t* m = NULL;
    KILN_RETURN_IF_ERROR(seg_program(p, g, &q), "%s: segment %d (kernels %d-%d)", mname(s), (int)i, (int)g->first,
                         (int)g->last);
    KILN_RETURN_IF_ERROR(kiln_module_wrap(q, &m), "%s: segment %d", mname(s), (int)i);
    kiln_status_t st =
        kiln_session_create(m, g->device == KILN_KERNEL_ON_HOST ? h->host : s->dev, &so, &g->ses);
    kiln_module_release(m);
    KILN_RETURN_IF_ERROR(st);
    for (int32_t j = 0; j < g->n_in; ++j) g->xfer_bytes += p->buffers[g->in_root[j]].bytes;
    for (int32_t j = 0; j < g->n_out; ++j) g->xfer_bytes += p->buffers[g->out_root[j]].bytes;
  }
  if (s->opts.profile) KILN_RETURN_IF_ERROR(init_profile(s));
  return NULL;
}

/* ---- runs ---------------------------------------------------------------- */

/* The host copy of root |r| before segment |g| needs it. */
static kiln_status_t seg_input(kiln_session_t* s, const seg_t* g, int32_t j, kiln_array_t* out) {
  const int32_t r = g->in_root[j];
  const kiln_array_t* c = &s->het->copy[r];
  const kiln_program_buffer_t* b = &s->p->buffers[r];
  if (!c->data && kiln_program_buffer_dense_bytes(b))
    return kiln_make_status(KILN_INTERNAL, "%s: buffer '%s' has no value before kernel '%s'", mname(s), b->name,
                            s->p->kernels[g->first].name);
  *out = *c;
  out->dtype = b->dtype;
  out->shape = kiln_shape_make(b->rank, b->shape);
  return NULL;
}

/* Model output |i| from the host copies (or the weights). */
static kiln_status_t model_output(kiln_session_t* s, int32_t i, kiln_array_t* out) {
  const kiln_program_t* p = s->p;
  const int32_t b = p->outputs[i], r = kiln_program_root(p, b);
  const kiln_program_buffer_t* pb = &p->buffers[b];
  kiln_shape_t sh = kiln_shape_make(pb->rank, pb->shape);
  KILN_RETURN_IF_ERROR(kiln_array_alloc(kiln_allocator_system(), pb->dtype, &sh, out));
  const uint8_t* src = p->buffers[r].kind == KILN_PB_CONST ? p->weights + p->buffers[r].const_offset
                                                           : (const uint8_t*)s->het->copy[r].data;
  const size_t have = p->buffers[r].kind == KILN_PB_CONST ? (size_t)p->buffers[r].bytes : s->het->copy[r].nbytes;
  if (out->nbytes && (!src || have < out->nbytes)) {
    kiln_array_free(kiln_allocator_system(), out);
    return kiln_make_status(KILN_INTERNAL, "%s: output '%s' was not computed", mname(s), p->output_names[i]);
  }
  if (out->nbytes) memcpy(out->data, src, out->nbytes);
  return NULL;
}

static void record_profile(kiln_session_t* s, const seg_t* g, double seg_start) {
  int32_t n = 0, runs = 0;
  const kiln_profile_entry_t* e = kiln_session_profile(g->ses, &n, &runs);
  for (int32_t j = 0; e && j < n && g->first + j <= g->last; ++j) {
    kiln_profile_entry_t* d = &s->prof[g->first + j];
    d->total_s = e[j].total_s;
    d->last_s = e[j].last_s;
    d->start_s = seg_start + e[j].start_s;
  }
  if (g->first == 0) s->prof_runs = runs; /* every segment runs as often */
}

static kiln_status_t run_all(kiln_session_t* s, const kiln_array_t* inputs, kiln_array_t* outputs) {
  const kiln_program_t* p = s->p;
  kiln_hetero_t* h = s->het;
  drop_copies(s);
  for (int32_t i = 0; i < p->n_inputs; ++i) {
    const int32_t r = kiln_program_root(p, p->inputs[i]);
    h->copy[r] = inputs[i]; /* borrowed for the run */
  }
  const double t0 = now_s();
  for (int32_t i = 0; i < h->n_segs; ++i) {
    seg_t* g = &h->segs[i];
    for (int32_t j = 0; j < g->n_in; ++j) KILN_RETURN_IF_ERROR(seg_input(s, g, j, &g->in_arr[j]));
    const double a = now_s();
    g->start_s = a - t0;
    KILN_RETURN_IF_ERROR(kiln_session_run(g->ses, g->in_arr, g->out_arr), "%s: kernels %d-%d on %s", mname(s),
                         (int)g->first, (int)g->last, g->device == KILN_KERNEL_ON_HOST ? h->host->info.api : s->dev->info.api);
    const double wall = now_s() - a;
    double kernels = 0;
    if (s->opts.profile) {
      int32_t n = 0;
      const kiln_profile_entry_t* e = kiln_session_profile(g->ses, &n, NULL);
      for (int32_t j = 0; e && j < n; ++j) kernels += e[j].last_s;
      record_profile(s, g, g->start_s);
    }
    if (s->opts.profile) {
      g->xfer_s += wall > kernels ? wall - kernels : 0;
      if (!h->runs) g->xfer_first_s = g->xfer_s;
    }
    for (int32_t j = 0; j < g->n_out; ++j) {
      const int32_t r = g->out_root[j];
      if (h->owned[r]) kiln_array_free(kiln_allocator_system(), &h->copy[r]);
      h->copy[r] = g->out_arr[j]; /* ownership moves */
      h->owned[r] = true;
      memset(&g->out_arr[j], 0, sizeof(kiln_array_t));
    }
  }
  h->runs++;
  s->last_run_s = now_s() - t0;
  for (int32_t i = 0; i < p->n_outputs; ++i) {
    kiln_status_t st = model_output(s, i, &outputs[i]);
    if (st) {
      for (int32_t o = 0; o < i; ++o) kiln_array_free(kiln_allocator_system(), &outputs[o]);
      return st;
    }
  }
  drop_copies(s); /* the caller's inputs are not ours to keep */
  return NULL;
}

kiln_status_t kiln_hetero_enqueue(kiln_session_t* s, const kiln_array_t* inputs, uint64_t* out_run) {
  kiln_hetero_t* h = s->het;
  kiln_done_run_t* pd = NULL;
  KILN_RETURN_IF_ERROR(kiln_done_runs_slot(s, &h->done, &pd));
  kiln_status_t st = run_all(s, inputs, pd->outputs);
  if (st) {
    drop_copies(s);
    return kiln_status_annotate(st, "%s: heterogeneous run", mname(s));
  }
  kiln_done_runs_keep(s, pd, out_run);
  return NULL;
}

kiln_status_t kiln_hetero_wait(kiln_session_t* s, uint64_t run, kiln_array_t* outputs) {
  return kiln_done_runs_take(s, &s->het->done, run, outputs);
}

void kiln_hetero_memory(const kiln_session_t* s, kiln_session_memory_t* out) {
  const kiln_hetero_t* h = s->het;
  for (int32_t i = 0; i < h->n_segs; ++i) kiln_session_memory_add(out, h->segs[i].ses);
  out->slots = h->done.n;
  out->dispatches = s->p->n_kernels;
}

void kiln_hetero_print(const kiln_session_t* s, FILE* out) {
  const kiln_hetero_t* h = s->het;
  if (!h) return;
  /* as the kernel times: the first run leaves the average once a second came */
  const int32_t runs = h->runs > 1 ? h->runs - 1 : 1;
  fprintf(out, "heterogeneous: %d segments, %d of %d kernels on %s (%s), the rest on %s\n", (int)h->n_segs,
          (int)kiln_program_kernels_on(s->p, KILN_KERNEL_ON_HOST), (int)s->p->n_kernels, h->host->info.api,
          h->host->info.name, s->dev->info.api);
  for (int32_t i = 0; i < h->n_segs; ++i) {
    const seg_t* g = &h->segs[i];
    fprintf(out, "  segment %d on %-7s kernels %d-%d (first node '%s'): %d buffers in, %d out, %.3f MB moved "
            "per run", (int)i, g->device == KILN_KERNEL_ON_HOST ? h->host->info.api : s->dev->info.api,
            (int)g->first, (int)g->last, s->p->kernels[g->first].node_name, (int)g->n_in, (int)g->n_out,
            (double)g->xfer_bytes / 1e6);
    /* segment time outside its kernels: uploads, read-backs, the wait */
    if (s->opts.profile && h->runs)
      fprintf(out, ", %.3f ms/run in transfers and sync", (h->runs > 1 ? g->xfer_s - g->xfer_first_s : g->xfer_s) / runs * 1e3);
    fputc('\n', out);
  }
}
