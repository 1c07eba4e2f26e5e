/* Sessions: a module bound to a device, with one arena per slot.
 *
 * Everything that can be decided once is decided at creation: the memory
 * plan, the barriers (from read/write hazards on arena byte ranges), the
 * buffer views and one command buffer per slot. A run is then: copy the
 * inputs into a free slot's arena, submit its command buffer; waiting reads
 * the outputs back. Nothing is allocated on the device per run.
 *
 * A module with a dynamic dim (runtime/program.h) is planned again for each
 * new value a run brings (sizes are linear in it: kiln_program_at), and a
 * slot re-records its views and command buffer when its value changes; its
 * arena grows to the largest value it has run (or the one the options
 * reserve) and is never shrunk, so going back to a smaller value allocates
 * nothing. A dim inside the shapes has sizes per value too (program.h,
 * |dim_bytes|): each value is planned at its own sizes. */
#include <stdlib.h>
#include <string.h>

#include "runtime/module_file.h"
#include "runtime/module_impl.h"
#include "runtime/session_impl.h"

void kiln_session_options_default(kiln_session_options_t* o) {
  memset(o, 0, sizeof(*o));
  o->slots = 2;
}

static const char* mname(const kiln_session_t* s) {
  return s->p->model_name && s->p->model_name[0] ? s->p->model_name : "module";
}

/* ---- hazards ---------------------------------------------------------- */

typedef struct range_s {
  uint64_t lo, hi;
} range_t;

static bool hits(const range_t* set, int32_t n, range_t r) {
  for (int32_t i = 0; i < n; ++i)
    if (set[i].lo < r.hi && r.lo < set[i].hi) return true;
  return false;
}

/* A barrier goes before kernel k when k reads bytes written, or writes
 * bytes read or written, since the last barrier (RAW, WAR, WAW). Ranges are
 * whole buffers in the arena; constants are never written and need none. */
static kiln_status_t plan_barriers(kiln_session_t* s) {
  const kiln_program_t* p = s->p;
  int32_t cap = 0;
  for (int32_t k = 0; k < p->n_kernels; ++k) cap += p->kernels[k].n_args;
  free(s->barrier_before);
  s->n_barriers = 0;
  s->barrier_before = calloc((size_t)p->n_kernels + 1, 1);
  range_t* rd = calloc((size_t)cap + 1, sizeof(range_t));
  range_t* wr = calloc((size_t)cap + 1, sizeof(range_t));
  if (!s->barrier_before || !rd || !wr) {
    free(rd);
    free(wr);
    return kiln_make_status(KILN_OUT_OF_MEMORY, "%s: out of memory planning barriers", mname(s));
  }
  int32_t nr = 0, nw = 0;
  for (int32_t k = 0; k < p->n_kernels; ++k) {
    const kiln_program_kernel_t* kk = &p->kernels[k];
    bool hazard = false;
    for (int32_t j = 0; j < kk->n_args && !hazard; ++j) {
      int32_t b = kk->args[j];
      uint64_t off = s->mp.offsets[b];
      if (off == UINT64_MAX) continue;
      range_t r = {off, off + kiln_program_bytes_at(p, b, s->mp_n)};
      if ((kk->access[j] & KILN_ARG_READ) && hits(wr, nw, r)) hazard = true;
      if ((kk->access[j] & KILN_ARG_WRITE) && (hits(wr, nw, r) || hits(rd, nr, r))) hazard = true;
    }
    if (hazard) {
      s->barrier_before[k] = 1;
      s->n_barriers++;
      nr = nw = 0;
    }
    for (int32_t j = 0; j < kk->n_args; ++j) {
      int32_t b = kk->args[j];
      uint64_t off = s->mp.offsets[b];
      if (off == UINT64_MAX) continue;
      range_t r = {off, off + kiln_program_bytes_at(p, b, s->mp_n)};
      if (kk->access[j] & KILN_ARG_READ) rd[nr++] = r;
      if (kk->access[j] & KILN_ARG_WRITE) wr[nw++] = r;
    }
  }
  free(rd);
  free(wr);
  return NULL;
}

/* ---- creation --------------------------------------------------------- */

/* The weights used where the module holds them, when the device runs on
 * host memory (buffer_wrap) and every constant starts at a view-aligned
 * address (a mapped module file: its weights are 64-byte aligned in the
 * file, the constants at 64-byte offsets). *out_done false: copy them. */
static kiln_status_t wrap_weights(kiln_session_t* s, bool* out_done) {
  const kiln_program_t* p = s->p;
  kiln_device_t* d = s->dev;
  *out_done = false;
  if (!d->vt->buffer_wrap || !p->weights || !p->weights_len || ((uintptr_t)p->weights & (s->alignment - 1)))
    return NULL;
  for (int32_t i = 0; i < p->n_buffers; ++i)
    if (p->buffers[i].kind == KILN_PB_CONST && p->buffers[i].bytes && (p->buffers[i].const_offset & (s->alignment - 1)))
      return NULL;
  s->weight_views = calloc((size_t)p->n_buffers + 1, sizeof(kiln_device_buffer_t*));
  if (!s->weight_views) return kiln_make_status(KILN_OUT_OF_MEMORY, "%s: out of memory", mname(s));
  kiln_status_t st = d->vt->buffer_wrap(d, p->weights, p->weights_len, "weights", &s->weights);
  if (st && kiln_status_code(st) == KILN_UNSUPPORTED) {
    kiln_status_free(st);
    free(s->weight_views);
    s->weight_views = NULL;
    return NULL;
  }
  for (int32_t i = 0; i < p->n_buffers && !st; ++i) {
    const kiln_program_buffer_t* b = &p->buffers[i];
    if (b->kind != KILN_PB_CONST || !b->bytes) continue;
    st = d->vt->view_create(d, s->weights, b->const_offset, b->bytes, &s->weight_views[i]);
    if (st) st = kiln_status_annotate(st, "constant '%s'", b->name);
  }
  s->weights_bytes = p->weights_len;
  *out_done = true;
  return st;
}

static kiln_status_t upload_weights(kiln_session_t* s) {
  const kiln_program_t* p = s->p;
  kiln_device_t* d = s->dev;
  bool wrapped = false;
  KILN_RETURN_IF_ERROR(wrap_weights(s, &wrapped));
  if (wrapped) return NULL;
  /* Re-laid out at the device's view alignment (the module's blob uses 64). */
  uint64_t* off = calloc((size_t)p->n_buffers + 1, sizeof(uint64_t));
  s->weight_views = calloc((size_t)p->n_buffers + 1, sizeof(kiln_device_buffer_t*));
  if (!off || !s->weight_views) {
    free(off);
    return kiln_make_status(KILN_OUT_OF_MEMORY, "%s: out of memory", mname(s));
  }
  uint64_t total = 0;
  /* Shape buckets (session_buckets.c): where the module's 64-byte layout
   * suits the device, the weights keep it, so that a bucket whose blob is
   * the first bucket's views that bucket's copy instead of making its own. */
  const kiln_session_t* from = s->weights_of;
  const bool blob = s->bucket_weights && s->alignment == KILN_MODULE_WEIGHTS_ALIGN;
  const bool borrow = blob && from && from->weights && from->p->weights_len == p->weights_len &&
                      !memcmp(from->p->weights, p->weights, (size_t)p->weights_len);
  for (int32_t i = 0; i < p->n_buffers; ++i) {
    const kiln_program_buffer_t* b = &p->buffers[i];
    if (b->kind != KILN_PB_CONST || !b->bytes) continue;
    off[i] = blob ? b->const_offset : total;
    total += (b->bytes + s->alignment - 1) & ~(s->alignment - 1);
  }
  if (blob) total = p->weights_len;
  s->weights_bytes = total;
  kiln_status_t st = NULL;
  if (borrow) s->weights = from->weights, s->weights_borrowed = true;
  else if (total) st = d->vt->buffer_create(d, total, "weights", &s->weights);
  for (int32_t i = 0; i < p->n_buffers && !st && total; ++i) {
    const kiln_program_buffer_t* b = &p->buffers[i];
    if (b->kind != KILN_PB_CONST || !b->bytes) continue;
    if (!borrow) st = d->vt->buffer_write(d, s->weights, off[i], p->weights + b->const_offset, b->bytes);
    if (!st) st = d->vt->view_create(d, s->weights, off[i], b->bytes, &s->weight_views[i]);
    if (st) st = kiln_status_annotate(st, "constant '%s'", b->name);
  }
  free(off);
  return st;
}

/* The memory plan and the barriers at dim value |n| (the session's current
 * ones when they are for |n| already). */
static kiln_status_t plan_at(kiln_session_t* s, int64_t n) {
  if (s->mp.offsets && s->mp_n == n) return NULL;
  kiln_memory_plan_free(kiln_allocator_system(), &s->mp);
  memset(&s->mp, 0, sizeof s->mp);
  kiln_program_t at;
  KILN_RETURN_IF_ERROR(kiln_program_at(s->p, n, kiln_allocator_system(), &at));
  kiln_status_t st = kiln_memory_plan(&at, s->alignment, kiln_allocator_system(), &s->mp);
  kiln_program_at_free(kiln_allocator_system(), &at);
  if (st) return st;
  s->mp_n = n;
  return plan_barriers(s);
}

/* Drops a slot's views and command buffer (not its arena). */
static void unrecord_slot(kiln_session_t* s, kiln_session_slot_t* sl) {
  kiln_device_t* d = s->dev;
  if (sl->cmd) d->vt->cmd_destroy(d, sl->cmd);
  sl->cmd = NULL;
  for (int32_t b = 0; sl->views && b < s->p->n_buffers; ++b) d->vt->buffer_destroy(d, sl->views[b]);
  free(sl->views);
  sl->views = NULL;
  sl->n = 0;
}

static kiln_status_t record_slot(kiln_session_t* s, kiln_session_slot_t* sl);

/* Makes slot |sl| ready for dim value |n| (planning at |n| when needed):
 * its arena grown to the plan, its views and command buffer recorded. */
static kiln_status_t slot_at(kiln_session_t* s, kiln_session_slot_t* sl, int32_t index, int64_t n) {
  if (sl->n == n && sl->cmd) return NULL;
  KILN_RETURN_IF_ERROR(plan_at(s, n), "%s: planning memory with '%s' = %lld", mname(s),
                       s->p->n_dims ? s->p->dims[0].name : "-", (long long)n);
  unrecord_slot(s, sl);
  kiln_device_t* d = s->dev;
  uint64_t need = s->mp.arena_bytes ? s->mp.arena_bytes : 64;
  if (!sl->arena || sl->arena_bytes < need) {
    d->vt->buffer_destroy(d, sl->arena);
    sl->arena = NULL;
    sl->arena_bytes = 0;
    char what[64];
    snprintf(what, sizeof what, "arena %d", (int)index);
    KILN_RETURN_IF_ERROR(d->vt->buffer_create(d, need, what, &sl->arena));
    sl->arena_bytes = need;
  }
  KILN_RETURN_IF_ERROR(record_slot(s, sl));
  sl->n = n;
  return NULL;
}

/* The device buffers of kernel |k|'s arguments in slot |sl| (|args|: one
 * per argument). */
void kiln_session_kernel_args(const kiln_session_t* s, const kiln_session_slot_t* sl, int32_t k,
                              kiln_device_buffer_t** args) {
  const kiln_program_t* p = s->p;
  const kiln_program_kernel_t* kk = &p->kernels[k];
  for (int32_t j = 0; j < kk->n_args; ++j) {
    int32_t b = kk->args[j];
    int32_t r = kiln_program_root(p, b);
    args[j] = p->buffers[r].kind == KILN_PB_CONST ? s->weight_views[r]
              : sl->views[b]                      ? sl->views[b]
                                                  : sl->arena; /* empty buffer */
    if (!args[j]) args[j] = sl->arena;
  }
  /* Arguments at one arena offset (an in-place pair, a view and its root)
   * get one view object, the widest (ties: the first): OpenCL leaves a
   * kernel that writes through one of two overlapping sub-buffers
   * undefined. */
  for (int32_t j = 0; j < kk->n_args; ++j) {
    uint64_t oj = s->mp.offsets[kk->args[j]];
    int32_t best = j;
    if (oj == UINT64_MAX || args[j] == sl->arena) continue;
    for (int32_t i = 0; i < kk->n_args; ++i) {
      uint64_t bi = kiln_program_bytes_at(p, kk->args[i], s->mp_n),
               bb = kiln_program_bytes_at(p, kk->args[best], s->mp_n);
      if (s->mp.offsets[kk->args[i]] == oj && sl->views[kk->args[i]] && (bi > bb || (bi == bb && i < best)))
        best = i;
    }
    args[j] = sl->views[kk->args[best]];
  }
}

static kiln_status_t record_slot(kiln_session_t* s, kiln_session_slot_t* sl) {
  const kiln_program_t* p = s->p;
  kiln_device_t* d = s->dev;
  sl->views = calloc((size_t)p->n_buffers + 1, sizeof(kiln_device_buffer_t*));
  if (!sl->views) return kiln_make_status(KILN_OUT_OF_MEMORY, "%s: out of memory", mname(s));
  for (int32_t i = 0; i < p->n_buffers; ++i) {
    const kiln_program_buffer_t* b = &p->buffers[i];
    uint64_t bytes = kiln_program_bytes_at(p, i, s->mp_n);
    if (s->mp.offsets[i] == UINT64_MAX || !bytes) continue;
    KILN_RETURN_IF_ERROR(d->vt->view_create(d, sl->arena, s->mp.offsets[i], bytes, &sl->views[i]),
                         "buffer '%s'", b->name);
  }
  int32_t nts = s->opts.profile ? 2 * p->n_kernels : 0;
  KILN_RETURN_IF_ERROR(d->vt->cmd_create(d, s->exe, nts, &sl->cmd));
  /* a GPU launches dim 2 once per sample (device.h) */
  if (p->n_dims && d->vt->cmd_dim) KILN_RETURN_IF_ERROR(d->vt->cmd_dim(d, sl->cmd, s->mp_n), "%s", mname(s));
  int32_t max_args = 1;
  for (int32_t k = 0; k < p->n_kernels; ++k)
    if (p->kernels[k].n_args > max_args) max_args = p->kernels[k].n_args;
  kiln_device_buffer_t** args = calloc((size_t)max_args, sizeof(*args));
  if (!args) return kiln_make_status(KILN_OUT_OF_MEMORY, "%s: out of memory", mname(s));
  kiln_status_t st = NULL;
  for (int32_t k = 0; k < p->n_kernels && !st; ++k) {
    const kiln_program_kernel_t* kk = &p->kernels[k];
    kiln_session_kernel_args(s, sl, k, args);
    if (s->barrier_before[k]) st = d->vt->cmd_barrier(d, sl->cmd);
    if (!st && nts) st = d->vt->cmd_timestamp(d, sl->cmd, 2 * k);
    if (!st) st = d->vt->cmd_dispatch(d, sl->cmd, k, args, kk->n_args);
    if (!st && nts) st = d->vt->cmd_timestamp(d, sl->cmd, 2 * k + 1);
    if (st) st = kiln_status_annotate(st, "recording kernel '%s'", kk->name);
  }
  free(args);
  if (!st) st = d->vt->cmd_end(d, sl->cmd);
  return st;
}

/* The status words and the kernels that write them, in kernel order, so a
 * run that fails several checks reports the first node that failed. */
static kiln_status_t init_checks(kiln_session_t* s) {
  const kiln_program_t* p = s->p;
  int32_t n = 0;
  for (int32_t b = 0; b < p->n_buffers; ++b) n += p->buffers[b].kind == KILN_PB_STATUS;
  if (!n) return NULL;
  s->check_buffer = calloc((size_t)n, sizeof(int32_t));
  s->check_kernel = calloc((size_t)n, sizeof(int32_t));
  if (!s->check_buffer || !s->check_kernel)
    return kiln_make_status(KILN_OUT_OF_MEMORY, "%s: out of memory", mname(s));
  for (int32_t k = 0; k < p->n_kernels; ++k) {
    const kiln_program_kernel_t* kk = &p->kernels[k];
    for (int32_t j = 0; j < kk->n_args; ++j) {
      int32_t b = kk->args[j];
      if (p->buffers[b].kind != KILN_PB_STATUS || !(kk->access[j] & KILN_ARG_WRITE)) continue;
      bool seen = false;
      for (int32_t i = 0; i < s->n_checks && !seen; ++i) seen = s->check_buffer[i] == b;
      if (seen || s->n_checks == n) continue;
      s->check_buffer[s->n_checks] = b;
      s->check_kernel[s->n_checks++] = k;
    }
  }
  return NULL;
}

static kiln_status_t init_profile(kiln_session_t* s) {
  const kiln_program_t* p = s->p;
  s->prof = calloc((size_t)p->n_kernels + 1, sizeof(kiln_profile_entry_t));
  s->ts = calloc(2 * (size_t)p->n_kernels + 1, sizeof(uint64_t));
  if (!s->prof || !s->ts) return kiln_make_status(KILN_OUT_OF_MEMORY, "%s: out of memory", mname(s));
  for (int32_t k = 0; k < p->n_kernels; ++k) {
    const kiln_program_kernel_t* kk = &p->kernels[k];
    s->prof[k] =
        (kiln_profile_entry_t){kk->name, kk->node_name, kk->op_type, 0, 0, 0, kk->flops, kk->bytes, s->dev->info.api};
  }
  return NULL;
}

kiln_status_t kiln_session_create(kiln_module_t* module, kiln_device_t* device,
                                  const kiln_session_options_t* options,
                                  kiln_session_t** out_session) {
  return kiln_session_create_bucket(module, device, options, false, NULL, out_session);
}

kiln_status_t kiln_session_create_bucket(kiln_module_t* module, kiln_device_t* device,
                                         const kiln_session_options_t* options, bool bucket,
                                         const kiln_session_t* weights_of, kiln_session_t** out_session) {
  if (!module || !device || !out_session)
    return kiln_make_status(KILN_INVALID_ARGUMENT, "kiln_session_create: NULL argument");
  const kiln_program_t* p = kiln_module_program(module);
  const char* target = p->target;
  if (strcmp(target, device->info.api) != 0)
    return kiln_make_status(KILN_INVALID_ARGUMENT,
                            "%s was compiled for target %s, but the device is %s (%s); recompile "
                            "with -t %s",
                            p->model_name, target, device->info.api, device->info.name, device->info.api);
  kiln_session_t* s = calloc(1, sizeof(*s));
  if (!s) return kiln_make_status(KILN_OUT_OF_MEMORY, "out of memory creating a session");
  s->module = module;
  s->p = p;
  s->dev = device;
  s->bucket_weights = bucket;
  s->weights_of = weights_of;
  kiln_module_retain(module);
  kiln_device_retain(device);
  if (options) s->opts = *options;
  else kiln_session_options_default(&s->opts);
  if (s->opts.slots <= 0) s->opts.slots = 2;
  if (s->opts.slots > 16) s->opts.slots = 16;
  s->alignment = device->info.buffer_alignment;
  if (s->alignment < 64) s->alignment = 64;
  if (s->alignment & (s->alignment - 1))
    s->alignment = 256; /* not a power of two: a safe common multiple */

  if (p->staged) { /* a shell: the stages' sessions run it */
    kiln_status_t st = kiln_staged_session_create(s);
    if (st) {
      kiln_session_destroy(s);
      return st;
    }
    *out_session = s;
    return NULL;
  }
  /* a bucket's own session (module->parent set) runs its program alone,
   * bucket 0's included, which is the program that carries the others */
  if (p->n_buckets && !module->parent) {
    kiln_status_t st = kiln_buckets_session_create(s);
    if (st) {
      kiln_session_destroy(s);
      return st;
    }
    *out_session = s;
    return NULL;
  }
  /* a per-sample GPU program needs the device to scale its grids (device.h) */
  const bool gpu_dims = p->n_dims && p->target && strcmp(p->target, "cpu") != 0;
  if (gpu_dims && (!device->vt->cmd_dim || kiln_program_kernels_on(p, KILN_KERNEL_ON_HOST))) {
    kiln_status_t st = kiln_make_status(KILN_UNSUPPORTED, "%s: a module with dynamic dim '%s' for the %s target %s",
                                        p->model_name, p->dims[0].name, p->target,
                                        device->vt->cmd_dim ? "runs some kernels on the CPU, which is not supported yet"
                                                            : "does not run on this device (it launches no grid per "
                                                              "sample)");
    kiln_session_destroy(s);
    return st;
  }
  if (kiln_program_kernels_on(p, KILN_KERNEL_ON_HOST)) {
    kiln_status_t st = kiln_hetero_session_create(s);
    if (st) {
      kiln_session_destroy(s);
      return kiln_status_annotate(st, "%s: creating a heterogeneous session on %s and the CPU", p->model_name,
                                  device->info.name);
    }
    *out_session = s;
    return NULL;
  }
  kiln_device_build_options_t bo = {s->opts.cache_dir, s->opts.dump_dir, s->opts.threads, s->opts.build_progress,
                                    s->opts.reuse_code};
  kiln_status_t st = device->vt->executable_create(device, p, &bo, &s->exe);
  s->dims_buffer = -1;
  for (int32_t i = 0; i < p->n_buffers; ++i)
    if (p->buffers[i].kind == KILN_PB_DIMS) s->dims_buffer = i;
  /* a module with dynamic dims starts at the bottom of its range */
  const int64_t n0 = p->n_dims ? p->dims[0].lo : 1;
  if (!st) st = plan_at(s, n0);
  if (!st) st = upload_weights(s);
  if (!st) st = init_checks(s);
  if (!st && s->opts.profile) st = init_profile(s);
  if (!st) {
    s->slots = calloc((size_t)s->opts.slots, sizeof(kiln_session_slot_t));
    if (!s->slots) st = kiln_make_status(KILN_OUT_OF_MEMORY, "out of memory");
  }
  const int64_t r = s->opts.dim_reserve;
  if (!st && r && p->n_dims && (r < n0 || r > p->dims[0].hi))
    st = kiln_make_status(KILN_INVALID_ARGUMENT, "dim_reserve %lld is outside the range %lld..%lld of dim '%s'",
                          (long long)r, (long long)n0, (long long)p->dims[0].hi, p->dims[0].name);
  for (int32_t i = 0; i < s->opts.slots && !st; ++i) {
    s->n_slots = i + 1;
    if (r && p->n_dims) st = slot_at(s, &s->slots[i], i, r);
    if (!st) st = slot_at(s, &s->slots[i], i, n0);
  }
  if (st) {
    kiln_session_destroy(s);
    return kiln_status_annotate(st, "%s: creating a session on %s", p->model_name, device->info.name);
  }
  *out_session = s;
  return NULL;
}

void kiln_session_destroy(kiln_session_t* s) {
  if (!s) return;
  kiln_buckets_destroy(s);
  kiln_hetero_destroy(s);
  kiln_staged_session_destroy(s);
  kiln_device_t* d = s->dev;
  const kiln_program_t* p = s->p;
  for (int32_t i = 0; s->slots && i < s->n_slots; ++i) {
    kiln_session_slot_t* sl = &s->slots[i];
    if (sl->cmd && sl->busy) kiln_status_free(d->vt->wait(d, sl->cmd));
    unrecord_slot(s, sl);
    d->vt->buffer_destroy(d, sl->arena);
  }
  free(s->slots);
  for (int32_t b = 0; s->weight_views && b < p->n_buffers; ++b) d->vt->buffer_destroy(d, s->weight_views[b]);
  free(s->weight_views);
  if (!s->weights_borrowed) d->vt->buffer_destroy(d, s->weights);
  d->vt->executable_destroy(d, s->exe);
  kiln_memory_plan_free(kiln_allocator_system(), &s->mp);
  free(s->barrier_before);
  free(s->check_buffer);
  free(s->check_kernel);
  free(s->prof);
  free(s->ts);
  kiln_device_release(d);
  kiln_module_release(s->module);
  free(s);
}

/* ---- runs ------------------------------------------------------------- */

/* The shape of model input or output buffer |b| at dim value |n|. */
static kiln_shape_t io_shape(const kiln_program_t* p, int32_t b, int64_t n) {
  const kiln_program_buffer_t* pb = &p->buffers[b];
  kiln_shape_t sh = kiln_shape_make(pb->rank, pb->shape);
  if (kiln_program_buffer_per_sample(p, b) && sh.rank >= 1) sh.dims[0] = n;
  const int32_t ax = kiln_program_io_dim_axis(p, b);
  if (ax >= 0) sh.dims[ax] = n;
  return sh;
}

/* Validated programs: the product stays inside the buffer limit. */
static uint64_t io_bytes(const kiln_program_t* p, int32_t b, int64_t n) {
  kiln_shape_t sh = io_shape(p, b, n);
  uint64_t bytes = kiln_dtype_size(p->buffers[b].dtype);
  for (int32_t d = 0; d < sh.rank; ++d) bytes *= (uint64_t)sh.dims[d];
  return bytes;
}

static kiln_status_t check_input(const kiln_session_t* s, int32_t i, const kiln_array_t* a, int64_t n) {
  const kiln_program_t* p = s->p;
  const kiln_program_buffer_t* b = &p->buffers[p->inputs[i]];
  kiln_shape_t want = io_shape(p, p->inputs[i], n);
  if (a->dtype != b->dtype)
    return kiln_make_status(KILN_INVALID_ARGUMENT, "%s: input '%s' has dtype %s, the module expects %s",
                            mname(s), p->input_names[i], kiln_dtype_name(a->dtype), kiln_dtype_name(b->dtype));
  if (!kiln_shape_equal(&a->shape, &want)) {
    char got[160], exp[160];
    kiln_shape_format(&a->shape, got, sizeof got);
    kiln_shape_format(&want, exp, sizeof exp);
    const int32_t ax = kiln_program_buffer_per_sample(p, p->inputs[i]) ? 0 : kiln_program_io_dim_axis(p, p->inputs[i]);
    if (p->n_dims && ax >= 0)
      return kiln_make_status(KILN_INVALID_ARGUMENT,
                              "%s: input '%s' has shape %s, but the module takes %s with dim %d ('%s') any of "
                              "%lld..%lld",
                              mname(s), p->input_names[i], got, exp, (int)ax, p->dims[0].name,
                              (long long)p->dims[0].lo, (long long)p->dims[0].hi);
    return kiln_make_status(KILN_INVALID_ARGUMENT,
                            "%s: input '%s' has shape %s, but the module was compiled for shape %s",
                            mname(s), p->input_names[i], got, exp);
  }
  uint64_t need = io_bytes(p, p->inputs[i], n);
  if (a->nbytes < need || (need && !a->data))
    return kiln_make_status(KILN_INVALID_ARGUMENT, "%s: input '%s' holds %zu bytes, needs %llu", mname(s),
                            p->input_names[i], a->nbytes, (unsigned long long)need);
  return NULL;
}

kiln_status_t kiln_session_enqueue(kiln_session_t* s, const kiln_array_t* inputs, uint64_t* out_run) {
  if (!s || !out_run || (s->p->n_inputs > 0 && !inputs))
    return kiln_make_status(KILN_INVALID_ARGUMENT, "kiln_session_enqueue: NULL argument");
  if (s->buckets) return kiln_buckets_enqueue(s, inputs, out_run);
  if (s->stg) return kiln_staged_enqueue(s, inputs, out_run);
  const kiln_program_t* p = s->p;
  int64_t n = 1;
  KILN_RETURN_IF_ERROR(kiln_program_dim_value(p, inputs, mname(s), &n));
  for (int32_t i = 0; i < p->n_inputs; ++i) KILN_RETURN_IF_ERROR(check_input(s, i, &inputs[i], n));
  if (s->het) return kiln_hetero_enqueue(s, inputs, out_run);
  kiln_session_slot_t* sl = NULL;
  int32_t index = 0;
  for (int32_t i = 0; i < s->n_slots && !sl; ++i)
    if (!s->slots[i].busy) sl = &s->slots[i], index = i;
  if (!sl)
    return kiln_make_status(KILN_LIMIT_EXCEEDED, "%s: all %d session slots have a run in flight; wait for one first",
                            mname(s), (int)s->n_slots);
  kiln_device_t* d = s->dev;
  if (p->n_dims) {
    KILN_RETURN_IF_ERROR(slot_at(s, sl, index, n));
    kiln_device_buffer_t* v = s->dims_buffer >= 0 ? sl->views[s->dims_buffer] : NULL;
    if (v) KILN_RETURN_IF_ERROR(d->vt->buffer_write(d, v, 0, &n, sizeof n), "%s: writing the dims", mname(s));
  }
  for (int32_t i = 0; i < p->n_inputs; ++i) {
    int32_t b = p->inputs[i];
    if (p->buffers[kiln_program_root(p, b)].kind == KILN_PB_CONST || !sl->views[b]) continue;
    KILN_RETURN_IF_ERROR(d->vt->buffer_write(d, sl->views[b], 0, inputs[i].data, io_bytes(p, b, n)),
                         "%s: uploading input '%s'", mname(s), p->input_names[i]);
  }
  /* Status words start every run at zero (a previous run may have failed). */
  static const int32_t zero = 0;
  for (int32_t i = 0; i < s->n_checks; ++i) {
    kiln_device_buffer_t* v = sl->views[s->check_buffer[i]];
    if (v)
      KILN_RETURN_IF_ERROR(d->vt->buffer_write(d, v, 0, &zero, sizeof zero), "%s: clearing status word '%s'",
                           mname(s), p->buffers[s->check_buffer[i]].name);
  }
  KILN_RETURN_IF_ERROR(d->vt->submit(d, sl->cmd), "%s: submitting a run", mname(s));
  sl->busy = true;
  sl->run = ++s->next_run;
  *out_run = sl->run;
  return NULL;
}

static void record_profile(kiln_session_t* s, kiln_session_slot_t* sl) {
  const kiln_program_t* p = s->p;
  kiln_device_t* d = s->dev;
  kiln_status_t st = d->vt->timestamps_read(d, sl->cmd, s->ts, 2 * p->n_kernels);
  if (st) {
    kiln_status_free(st); /* a profile gap is not a failed run */
    return;
  }
  uint64_t t0 = p->n_kernels ? s->ts[0] : 0;
  /* The first run pays for the driver's lazy work (PoCL compiles each
   * kernel's work-group function at its first enqueue: seconds per kernel
   * on a cold cache); once a second run comes, it leaves the totals. */
  bool drop_first = s->prof_runs == 1 && !s->prof_first_dropped;
  if (drop_first) {
    for (int32_t k = 0; k < p->n_kernels; ++k) s->prof[k].total_s = 0;
    s->prof_runs = 0;
    s->prof_first_dropped = true;
  }
  for (int32_t k = 0; k < p->n_kernels; ++k) {
    double dur = s->ts[2 * k + 1] >= s->ts[2 * k] ? (double)(s->ts[2 * k + 1] - s->ts[2 * k]) * 1e-9 : 0;
    s->prof[k].last_s = dur;
    s->prof[k].total_s += dur;
    s->prof[k].start_s = (double)(s->ts[2 * k] - t0) * 1e-9;
  }
  s->last_run_s = p->n_kernels ? (double)(s->ts[2 * p->n_kernels - 1] - t0) * 1e-9 : 0;
  s->prof_runs++;
}

/* The error of the first kernel (in run order) whose check failed, with
 * the same status code the reference executor gives for that data. */
static kiln_status_t read_checks(kiln_session_t* s, kiln_session_slot_t* sl) {
  const kiln_program_t* p = s->p;
  kiln_device_t* d = s->dev;
  for (int32_t i = 0; i < s->n_checks; ++i) {
    kiln_device_buffer_t* v = sl->views[s->check_buffer[i]];
    int32_t code = 0;
    if (!v) continue;
    KILN_RETURN_IF_ERROR(d->vt->buffer_read(d, v, 0, &code, sizeof code), "%s: reading status word '%s'",
                         mname(s), p->buffers[s->check_buffer[i]].name);
    if (!code) continue;
    const kiln_program_kernel_t* kk = &p->kernels[s->check_kernel[i]];
    return kiln_program_check_error(code, mname(s), kk->node_name, kk->op_type, kk->name);
  }
  return NULL;
}

static kiln_status_t read_outputs(kiln_session_t* s, kiln_session_slot_t* sl, kiln_array_t* outputs) {
  const kiln_program_t* p = s->p;
  kiln_device_t* d = s->dev;
  for (int32_t i = 0; i < p->n_outputs; ++i) memset(&outputs[i], 0, sizeof(outputs[i]));
  kiln_status_t st = NULL;
  for (int32_t i = 0; i < p->n_outputs && !st; ++i) {
    int32_t b = p->outputs[i];
    const kiln_program_buffer_t* pb = &p->buffers[b];
    kiln_shape_t sh = io_shape(p, b, sl->n ? sl->n : 1);
    st = kiln_array_alloc(kiln_allocator_system(), pb->dtype, &sh, &outputs[i]);
    int32_t r = kiln_program_root(p, b);
    kiln_device_buffer_t* v = p->buffers[r].kind == KILN_PB_CONST ? s->weight_views[r] : sl->views[b];
    if (!st && v && outputs[i].nbytes) st = d->vt->buffer_read(d, v, 0, outputs[i].data, outputs[i].nbytes);
    if (st) st = kiln_status_annotate(st, "%s: reading output '%s'", mname(s), p->output_names[i]);
  }
  if (st)
    for (int32_t i = 0; i < p->n_outputs; ++i) kiln_array_free(kiln_allocator_system(), &outputs[i]);
  return st;
}

kiln_status_t kiln_session_wait(kiln_session_t* s, uint64_t run, kiln_array_t* outputs) {
  if (!s || (s->p->n_outputs > 0 && !outputs))
    return kiln_make_status(KILN_INVALID_ARGUMENT, "kiln_session_wait: NULL argument");
  if (s->buckets) return kiln_buckets_wait(s, run, outputs);
  if (s->stg) return kiln_staged_wait(s, run, outputs);
  if (s->het) return kiln_hetero_wait(s, run, outputs);
  kiln_session_slot_t* sl = NULL;
  for (int32_t i = 0; i < s->n_slots && !sl; ++i)
    if (s->slots[i].busy && s->slots[i].run == run) sl = &s->slots[i];
  if (!sl)
    return kiln_make_status(KILN_INVALID_ARGUMENT, "%s: run %llu is not in flight", mname(s),
                            (unsigned long long)run);
  kiln_device_t* d = s->dev;
  kiln_status_t st = d->vt->wait(d, sl->cmd);
  if (!st && s->opts.profile) record_profile(s, sl);
  if (!st) st = read_checks(s, sl);
  if (st)
    for (int32_t i = 0; i < s->p->n_outputs; ++i) memset(&outputs[i], 0, sizeof(outputs[i]));
  if (!st) st = read_outputs(s, sl, outputs);
  sl->busy = false;
  if (st) return kiln_status_annotate(st, "%s: run %llu", mname(s), (unsigned long long)run);
  return NULL;
}

kiln_status_t kiln_session_run(kiln_session_t* s, const kiln_array_t* inputs, kiln_array_t* outputs) {
  uint64_t run = 0;
  KILN_RETURN_IF_ERROR(kiln_session_enqueue(s, inputs, &run));
  return kiln_session_wait(s, run, outputs);
}

kiln_status_t kiln_session_memory_at(const kiln_session_t* s, int64_t n, kiln_session_memory_t* out) {
  if (!s || !out) return kiln_make_status(KILN_INVALID_ARGUMENT, "kiln_session_memory_at: NULL argument");
  s = kiln_session_current(s);
  const kiln_program_t* p = s->p;
  if (!p->n_dims) {
    kiln_session_memory(s, out);
    return NULL;
  }
  if (n < p->dims[0].lo || n > p->dims[0].hi)
    return kiln_make_status(KILN_INVALID_ARGUMENT, "%s: dim '%s' = %lld is outside the module's range %lld..%lld",
                            mname(s), p->dims[0].name, (long long)n, (long long)p->dims[0].lo,
                            (long long)p->dims[0].hi);
  kiln_program_t at;
  kiln_memory_plan_t mp;
  memset(&mp, 0, sizeof mp);
  KILN_RETURN_IF_ERROR(kiln_program_at(p, n, kiln_allocator_system(), &at));
  kiln_status_t st = kiln_memory_plan(&at, s->alignment, kiln_allocator_system(), &mp);
  kiln_program_at_free(kiln_allocator_system(), &at);
  if (st) return st;
  kiln_session_memory(s, out);
  out->arena_bytes = mp.arena_bytes;
  out->naive_bytes = mp.naive_bytes;
  out->lower_bound_bytes = mp.lower_bound_bytes;
  kiln_memory_plan_free(kiln_allocator_system(), &mp);
  return NULL;
}

kiln_status_t kiln_done_runs_init(const kiln_session_t* s, kiln_done_runs_t* d, int32_t slots) {
  d->runs = calloc((size_t)slots + 1, sizeof(kiln_done_run_t));
  if (!d->runs) return kiln_make_status(KILN_OUT_OF_MEMORY, "%s: out of memory creating a session", mname(s));
  d->n = slots;
  for (int32_t i = 0; i < slots; ++i)
    if (!(d->runs[i].outputs = calloc((size_t)s->p->n_outputs + 1, sizeof(kiln_array_t))))
      return kiln_make_status(KILN_OUT_OF_MEMORY, "%s: out of memory creating a session", mname(s));
  return NULL;
}

void kiln_done_runs_free(const kiln_session_t* s, kiln_done_runs_t* d) {
  for (int32_t i = 0; d->runs && i < d->n; ++i) {
    for (int32_t o = 0; d->runs[i].outputs && o < s->p->n_outputs; ++o)
      kiln_array_free(kiln_allocator_system(), &d->runs[i].outputs[o]);
    free(d->runs[i].outputs);
  }
  free(d->runs);
  d->runs = NULL;
  d->n = 0;
}

kiln_status_t kiln_done_runs_slot(const kiln_session_t* s, kiln_done_runs_t* d, kiln_done_run_t** out) {
  for (int32_t i = 0; i < d->n; ++i)
    if (!d->runs[i].busy) {
      *out = &d->runs[i];
      return NULL;
    }
  return kiln_make_status(KILN_LIMIT_EXCEEDED, "%s: all %d session slots have a run in flight; wait for one first",
                          mname(s), (int)d->n);
}

void kiln_done_runs_keep(kiln_session_t* s, kiln_done_run_t* r, uint64_t* out_run) {
  r->busy = true;
  r->run = ++s->next_run;
  *out_run = r->run;
}

kiln_status_t kiln_done_runs_take(const kiln_session_t* s, kiln_done_runs_t* d, uint64_t run, kiln_array_t* outputs) {
  for (int32_t i = 0; i < d->n; ++i) {
    kiln_done_run_t* r = &d->runs[i];
    if (!r->busy || r->run != run) continue;
    for (int32_t o = 0; o < s->p->n_outputs; ++o) {
      outputs[o] = r->outputs[o]; /* ownership moves to the caller */
      memset(&r->outputs[o], 0, sizeof(kiln_array_t));
    }
    r->busy = false;
    return NULL;
  }
  return kiln_make_status(KILN_INVALID_ARGUMENT, "%s: run %llu is not in flight", mname(s), (unsigned long long)run);
}

void kiln_session_memory_add(kiln_session_memory_t* out, const kiln_session_t* part) {
  kiln_session_memory_t m;
  kiln_session_memory(part, &m);
  out->arena_bytes += m.arena_bytes;
  out->naive_bytes += m.naive_bytes;
  out->lower_bound_bytes += m.lower_bound_bytes;
  out->weights_bytes += m.weights_bytes;
  out->barriers += m.barriers;
  out->dispatches += m.dispatches;
}

void kiln_session_memory(const kiln_session_t* s, kiln_session_memory_t* out) {
  memset(out, 0, sizeof(*out));
  if (!s) return;
  s = kiln_session_current(s);
  if (s->het) {
    kiln_hetero_memory(s, out);
    return;
  }
  if (s->stg) {
    kiln_staged_memory(s, out);
    return;
  }
  out->arena_bytes = s->mp.arena_bytes;
  out->naive_bytes = s->mp.naive_bytes;
  out->lower_bound_bytes = s->mp.lower_bound_bytes;
  out->weights_bytes = s->weights_bytes;
  out->slots = s->n_slots;
  out->barriers = s->n_barriers;
  out->dispatches = s->p->n_kernels;
}
