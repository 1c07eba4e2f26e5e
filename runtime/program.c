/* kiln program: ownership and the invariants the runtime relies on.
 *
 * Validation is the one gate between bytes (a module file, a hand-built
 * program) and the runtime: after it passes, the session and the planner
 * index buffers and kernels without re-checking. */
#include "runtime/program.h"
#include "runtime/program_staged.h"

#include <stdarg.h>
#include <stdio.h>
#include <string.h>

#include "runtime/device_registry.h"


kiln_status_t kiln_program_create(kiln_allocator_t allocator, kiln_program_t** out_program) {
  void* p = NULL;
  KILN_RETURN_IF_ERROR(kiln_allocator_malloc(allocator, sizeof(kiln_program_t), "program", &p));
  kiln_program_t* prog = p;
  memset(prog, 0, sizeof(*prog));
  prog->allocator = allocator;
  /* Until the builder or loader sets it: the first registered target, the
   * CPU (a program built by hand for the planner's tests runs there). */
  prog->target = kiln_device_api_at(0)->name;
  *out_program = prog;
  return NULL;
}

void kiln_program_destroy(kiln_program_t* p) {
  if (!p) return;
  kiln_allocator_t a = p->allocator;
  for (int32_t i = 0; p->buffers && i < p->n_buffers; ++i) kiln_allocator_free(a, p->buffers[i].name);
  kiln_allocator_free(a, p->buffers);
  for (int32_t k = 0; p->kernels && k < p->n_kernels; ++k) {
    kiln_program_kernel_t* kk = &p->kernels[k];
    kiln_allocator_free(a, kk->name);
    kiln_allocator_free(a, kk->node_name);
    kiln_allocator_free(a, kk->op_type);
    kiln_allocator_free(a, kk->tuned);
    kiln_allocator_free(a, kk->args);
    kiln_allocator_free(a, kk->access);
  }
  kiln_allocator_free(a, p->kernels);
  for (int32_t i = 0; p->input_names && i < p->n_inputs; ++i)
    kiln_allocator_free(a, p->input_names[i]);
  for (int32_t i = 0; p->output_names && i < p->n_outputs; ++i)
    kiln_allocator_free(a, p->output_names[i]);
  kiln_allocator_free(a, p->input_names);
  kiln_allocator_free(a, p->output_names);
  kiln_allocator_free(a, p->inputs);
  kiln_allocator_free(a, p->outputs);
  if (!p->weights_borrowed) kiln_allocator_free(a, p->weights);
  for (int32_t i = 0; p->plugin_ops && i < p->n_plugin_ops; ++i) {
    kiln_allocator_free(a, p->plugin_ops[i].domain);
    kiln_allocator_free(a, p->plugin_ops[i].name);
  }
  kiln_allocator_free(a, p->plugin_ops);
  for (int32_t i = 0; p->dims && i < p->n_dims; ++i) kiln_allocator_free(a, p->dims[i].name);
  kiln_allocator_free(a, p->dims);
  kiln_allocator_free(a, p->dim_axis);
  kiln_allocator_free(a, p->dim_bytes);
  kiln_program_buckets_free(p);
  kiln_program_staged_free(p);
  kiln_allocator_free(a, p->model_name);
  kiln_allocator_free(a, p->precision);
  kiln_allocator_free(a, p->options);
  kiln_program_code_free(a, &p->code);
  kiln_program_code_free(a, &p->host_code);
  kiln_allocator_free(a, p);
}

static void devbins_free(kiln_allocator_t a, kiln_program_code_t* c) {
  for (int32_t i = 0; c->devbin && i < c->n_devbin; ++i) {
    kiln_program_devbin_t* b = &c->devbin[i];
    kiln_allocator_free(a, b->device);
    kiln_allocator_free(a, b->vendor);
    kiln_allocator_free(a, b->driver);
    kiln_allocator_free(a, b->kiln);
    kiln_allocator_free(a, b->bytes);
  }
  kiln_allocator_free(a, c->devbin);
  c->devbin = NULL;
  c->n_devbin = 0;
}

void kiln_program_devbins_free(kiln_program_t* p) { devbins_free(p->allocator, &p->code); }

void kiln_program_code_free(kiln_allocator_t a, kiln_program_code_t* c) {
  kiln_allocator_free(a, c->text);
  kiln_allocator_free(a, c->parts);
  for (int32_t i = 0; c->blobs && i < c->n_blobs; ++i) kiln_allocator_free(a, c->blobs[i]);
  kiln_allocator_free(a, c->blobs);
  kiln_allocator_free(a, c->blob_lens);
  for (int32_t i = 0; c->native && i < c->n_native; ++i) {
    kiln_allocator_free(a, c->native[i].isa);
    kiln_allocator_free(a, c->native[i].bytes);
  }
  kiln_allocator_free(a, c->native);
  devbins_free(a, c);
  memset(c, 0, sizeof *c);
}

void kiln_program_lifetimes(kiln_program_t* p) {
  for (int32_t i = 0; i < p->n_buffers; ++i) p->buffers[i].first_use = p->buffers[i].last_use = -1;
  for (int32_t k = 0; k < p->n_kernels; ++k)
    for (int32_t j = 0; j < p->kernels[k].n_args; ++j) {
      const int32_t bs[2] = {p->kernels[k].args[j], kiln_program_root(p, p->kernels[k].args[j])};
      for (int t = 0; t < 2; ++t) {
        kiln_program_buffer_t* b = &p->buffers[bs[t]];
        if (b->first_use < 0) b->first_use = k;
        b->last_use = k;
      }
    }
}

int32_t kiln_program_kernels_on(const kiln_program_t* p, uint8_t device) {
  int32_t n = 0;
  for (int32_t k = 0; p && k < p->n_kernels; ++k) n += p->kernels[k].device == device;
  return n;
}

kiln_status_t kiln_program_devbin_add(kiln_program_t* p, const kiln_program_devbin_t* key, const void* bytes,
                                      uint64_t len) {
  if (!len || !bytes || !key->device || !key->device[0])
    return kiln_make_status(KILN_INVALID_ARGUMENT, "%s: device binary without bytes or device name",
                            p->model_name ? p->model_name : "program");
  kiln_program_devbin_t b = {0};
  kiln_status_t s = kiln_program_strdup(p, key->device, &b.device);
  if (!s) s = kiln_program_strdup(p, key->vendor, &b.vendor);
  if (!s) s = kiln_program_strdup(p, key->driver, &b.driver);
  if (!s) s = kiln_program_strdup(p, key->kiln, &b.kiln);
  void* m = NULL;
  if (!s) s = kiln_allocator_malloc(p->allocator, (size_t)len, "device binary", &m);
  void* arr = p->code.devbin;
  if (!s)
    s = kiln_allocator_realloc(p->allocator, sizeof(kiln_program_devbin_t) * (size_t)(p->code.n_devbin + 1),
                               "device binaries", &arr);
  if (s) {
    kiln_allocator_free(p->allocator, b.device);
    kiln_allocator_free(p->allocator, b.vendor);
    kiln_allocator_free(p->allocator, b.driver);
    kiln_allocator_free(p->allocator, b.kiln);
    kiln_allocator_free(p->allocator, m);
    return s;
  }
  memcpy(m, bytes, (size_t)len);
  b.bytes = m;
  b.len = len;
  b.source_crc = key->source_crc;
  p->code.devbin = arr;
  p->code.devbin[p->code.n_devbin++] = b;
  return NULL;
}

kiln_status_t kiln_program_strdup(kiln_program_t* p, const char* s, char** out) {
  if (!s) s = "";
  size_t n = strlen(s);
  void* m = NULL;
  KILN_RETURN_IF_ERROR(kiln_allocator_malloc(p->allocator, n + 1, "program string", &m));
  memcpy(m, s, n + 1);
  *out = m;
  return NULL;
}

int32_t kiln_program_root(const kiln_program_t* p, int32_t b) {
  for (int32_t guard = 0; b >= 0 && b < p->n_buffers && p->buffers[b].alias_of >= 0 &&
                          guard <= p->n_buffers;
       ++guard)
    b = p->buffers[b].alias_of;
  return b;
}

uint64_t kiln_program_buffer_dense_bytes(const kiln_program_buffer_t* b) {
  uint64_t n = 1;
  for (int32_t k = 0; k < b->rank; ++k) n *= (uint64_t)(b->shape[k] > 0 ? b->shape[k] : 0);
  return n * kiln_dtype_size(b->dtype);
}

static const char* pname(const kiln_program_t* p) {
  return p->model_name && p->model_name[0] ? p->model_name : "program";
}

static kiln_status_t bad(const kiln_program_t* p, const char* fmt, ...) KILN_PRINTF(2, 3);
static kiln_status_t bad(const kiln_program_t* p, const char* fmt, ...) {
  char msg[320];
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(msg, sizeof msg, fmt, ap);
  va_end(ap);
  return kiln_make_status(KILN_PARSE_ERROR, "%s: inconsistent program: %s", pname(p), msg);
}

static const char* bn(const kiln_program_t* p, int32_t i) {
  return p->buffers[i].name ? p->buffers[i].name : "?";
}

/* "f32 [2,3]" for messages. */
static const char* shape_text(const kiln_program_buffer_t* b, char* out, size_t n) {
  size_t at = (size_t)snprintf(out, n, "%s [", kiln_dtype_name(b->dtype));
  for (int32_t k = 0; k < b->rank && at < n; ++k)
    at += (size_t)snprintf(out + at, n - at, "%s%lld", k ? "," : "", (long long)b->shape[k]);
  if (at < n) snprintf(out + at, n - at, "]");
  return out;
}

/* Dense bytes of |b|'s shape and dtype, every step overflow-checked against
 * the per-buffer cap; false when a dim is negative or the product passes it.
 * Before this holds, nothing may multiply a buffer's dims. */
static bool checked_dense_bytes(const kiln_program_buffer_t* b, uint64_t* out) {
  for (int32_t k = 0; k < b->rank; ++k)
    if (b->shape[k] < 0) return false;
  for (int32_t k = 0; k < b->rank; ++k)
    if (b->shape[k] == 0) { /* empty, whatever the other dims */
      *out = 0;
      return true;
    }
  uint64_t n = kiln_dtype_size(b->dtype);
  for (int32_t k = 0; k < b->rank; ++k) {
    if (n > KILN_PROGRAM_MAX_BUFFER_BYTES / (uint64_t)b->shape[k]) return false;
    n *= (uint64_t)b->shape[k];
  }
  *out = n;
  return true;
}

/* Is buffer |i| the memory behind a model output (so a constant there must
 * carry its bytes: the session reads the output from them)? */
static bool backs_output(const kiln_program_t* p, int32_t i) {
  if (!p->outputs) return false; /* validate_io reports it */
  for (int32_t k = 0; k < p->n_outputs; ++k)
    if (p->outputs[k] >= 0 && p->outputs[k] < p->n_buffers && kiln_program_root(p, p->outputs[k]) == i) return true;
  return false;
}

/* Every buffer's bytes against its shape and dtype. Kernels, the input
 * upload and the output read all access a buffer's dense extent (the
 * compiler lays every tensor out densely; a view is a reshape of its root),
 * while the session allocates and maps |bytes|: a module whose |bytes| is
 * smaller than its shape (a forged file with a recomputed checksum) would
 * have every one of them write past the allocation. So: bytes >= dense for
 * every buffer, bytes == dense for a constant's range in the weights (a
 * constant that nothing reads or returns may carry none), and a view fits
 * inside its root (so the root's allocation covers the view's shape too). */
static kiln_status_t validate_buffers(const kiln_program_t* p) {
  if (p->n_buffers < 0 || (p->n_buffers > 0 && !p->buffers))
    return bad(p, "%s %lld", "buffer count", (long long)p->n_buffers);
  char sh[160];
  for (int32_t i = 0; i < p->n_buffers; ++i) {
    const kiln_program_buffer_t* b = &p->buffers[i];
    if (!b->name) return bad(p, "%s %lld has no name", "buffer", (long long)i);
    if (b->dtype <= KILN_DTYPE_UNDEFINED || b->dtype >= KILN_DTYPE_COUNT_ || !kiln_dtype_size(b->dtype))
      return bad(p, "buffer '%s' has dtype number %lld", b->name, (long long)b->dtype);
    if ((unsigned)b->kind >= KILN_PB_KIND_COUNT_)
      return bad(p, "buffer '%s' has kind number %lld", b->name, (long long)b->kind);
    if (b->rank < 0 || b->rank > KILN_MAX_RANK)
      return bad(p, "buffer '%s' has rank %lld", b->name, (long long)b->rank);
    for (int32_t k = 0; k < b->rank; ++k)
      if (b->shape[k] < 0)
        return bad(p, "buffer '%s' has dim %lld = %lld", b->name, (long long)k, (long long)b->shape[k]);
    uint64_t dense = 0;
    if (!checked_dense_bytes(b, &dense))
      return bad(p, "buffer '%s' (%s) needs more than the %llu-byte buffer limit", b->name,
                 shape_text(b, sh, sizeof sh), (unsigned long long)KILN_PROGRAM_MAX_BUFFER_BYTES);
    if (b->bytes > KILN_PROGRAM_MAX_BUFFER_BYTES)
      return bad(p, "buffer '%s' spans %llu bytes, above the %llu-byte buffer limit", b->name,
                 (unsigned long long)b->bytes, (unsigned long long)KILN_PROGRAM_MAX_BUFFER_BYTES);
    if (b->alias_of < -1 || b->alias_of >= p->n_buffers || b->alias_of == i)
      return bad(p, "buffer '%s' aliases buffer %lld", b->name, (long long)b->alias_of);
    if (b->first_use < -1 || b->first_use >= p->n_kernels || b->last_use < -1 || b->last_use >= p->n_kernels ||
        (b->first_use >= 0 && b->last_use < b->first_use) || (b->first_use < 0 && b->last_use >= 0))
      return bad(p, "buffer '%s' has lifetime [%lld, %lld]", b->name, (long long)b->first_use, (long long)b->last_use);
    /* The session zeroes and reads a status word as one i32 of its own. */
    if (b->kind == KILN_PB_STATUS &&
        (b->dtype != KILN_DTYPE_I32 || dense != 4 || b->bytes != 4 || b->alias_of >= 0))
      return bad(p, "status word '%s' is not an i32[1] buffer of its own", b->name);
    if (b->kind == KILN_PB_CONST) {
      if (b->alias_of >= 0)
        return bad(p, "constant '%s' aliases buffer %lld", b->name, (long long)b->alias_of);
      if (b->const_offset > p->weights_len || b->bytes > p->weights_len - b->const_offset)
        return bad(p, "constant '%s' (weights bytes [%llu, +%llu)) is past the weights' end %llu", b->name,
                   (unsigned long long)b->const_offset, (unsigned long long)b->bytes,
                   (unsigned long long)p->weights_len);
      const bool carried = b->bytes != 0 || b->first_use >= 0 || backs_output(p, i);
      if (carried && b->bytes != dense)
        return bad(p, "constant '%s' holds %llu bytes of weights, its shape %s needs %llu", b->name,
                   (unsigned long long)b->bytes, shape_text(b, sh, sizeof sh), (unsigned long long)dense);
    } else if (b->bytes < dense && !((b->kind == KILN_PB_INTERMEDIATE || b->kind == KILN_PB_TEMP) && !b->bytes &&
                                       b->first_use < 0)) {
      /* (an intermediate no kernel touches may carry nothing: a view of an
       * unused constant, targets/program_build.c) */
      return bad(p, "buffer '%s' spans %llu bytes, its shape %s needs %llu", b->name, (unsigned long long)b->bytes,
                 shape_text(b, sh, sizeof sh), (unsigned long long)dense);
    }
  }
  /* Alias chains: acyclic, and a view never spans more than its root. */
  for (int32_t i = 0; i < p->n_buffers; ++i) {
    int32_t r = i, steps = 0;
    while (p->buffers[r].alias_of >= 0 && steps <= p->n_buffers) {
      r = p->buffers[r].alias_of;
      ++steps;
    }
    if (steps > p->n_buffers) return bad(p, "buffer '%s' is on an alias cycle", bn(p, i));
    if (p->buffers[i].bytes > p->buffers[r].bytes)
      return bad(p, "buffer '%s' (%llu bytes) aliases a smaller root '%s' (%llu bytes)", bn(p, i),
                 (unsigned long long)p->buffers[i].bytes, bn(p, r), (unsigned long long)p->buffers[r].bytes);
    /* A view of a constant (Identity, Reshape of a weight at -O0) reads the
     * weights in place: the session binds the constant's weight view for it
     * and no kernel may write it (checked with the kernels). An input or a
     * status word is written by the session itself, so those may not. */
    if (p->buffers[r].kind == KILN_PB_CONST && r != i &&
        (p->buffers[i].kind == KILN_PB_INPUT || p->buffers[i].kind == KILN_PB_STATUS))
      return bad(p, "buffer '%s' aliases constant %lld", bn(p, i), (long long)r);
    if (p->buffers[r].kind == KILN_PB_STATUS && r != i)
      return bad(p, "buffer '%s' aliases status word %lld", bn(p, i), (long long)r);
  }
  return NULL;
}

void kiln_program_gemm_operand(const kiln_program_gemm_t* g, int which, int64_t* rows, int64_t* cols,
                               int64_t* ld, int64_t* stride) {
  const bool t = which == 0 ? g->trans_a : which == 1 ? g->trans_b : false;
  const int64_t r = which == 0 ? g->M : which == 1 ? g->K : g->M;
  const int64_t c = which == 0 ? g->K : which == 1 ? g->N : g->N;
  *rows = t ? c : r;
  *cols = t ? r : c;
  *ld = which == 0 ? g->lda : which == 1 ? g->ldb : g->ldy;
  *stride = which == 0 ? g->sa : which == 1 ? g->sb : g->sy;
}

uint64_t kiln_program_gemm_operand_bytes(const kiln_program_gemm_t* g, int which) {
  int64_t rows, cols, ld, st;
  kiln_program_gemm_operand(g, which, &rows, &cols, &ld, &st);
  /* Saturating: the descriptor comes from a file, and a forged one must
   * read as "too big for its buffer", not wrap to a small size. */
  if (g->batch < 1 || rows < 1 || cols < 1 || ld < 0 || st < 0) return UINT64_MAX;
  uint64_t a, b, sum;
  if (__builtin_mul_overflow((uint64_t)(g->batch - 1), (uint64_t)st, &a) ||
      __builtin_mul_overflow((uint64_t)(rows - 1), (uint64_t)ld, &b) || __builtin_add_overflow(a, b, &sum) ||
      __builtin_add_overflow(sum, (uint64_t)cols, &sum) || __builtin_mul_overflow(sum, 4ull, &sum))
    return UINT64_MAX;
  return sum;
}

/* A GEMM descriptor: parameters in range and distinct, f32, Y written,
 * every matrix inside its buffer. */
static kiln_status_t validate_gemm(const kiln_program_t* p, const kiln_program_kernel_t* kk) {
  const kiln_program_gemm_t* g = &kk->gemm;
  if (!g->valid) return NULL;
  const int32_t par[3] = {g->a, g->b, g->y};
  for (int i = 0; i < 3; ++i) {
    if (par[i] < 0 || par[i] >= kk->n_args || (i && par[i] == par[i - 1]) || (i == 2 && par[2] == par[0]))
      return bad(p, "kernel '%s' has GEMM parameters (%lld, %lld, %lld)", kk->name, (long long)g->a,
                 (long long)g->b, (long long)g->y);
    if (p->buffers[kk->args[par[i]]].dtype != KILN_DTYPE_F32)
      return bad(p, "kernel '%s' has a GEMM operand that is not f32", kk->name);
  }
  if (!(kk->access[g->y] & KILN_ARG_WRITE)) return bad(p, "kernel '%s' has a GEMM output it does not write", kk->name);
  const int64_t lim = 1ll << 40;
  if (g->M < 1 || g->N < 1 || g->K < 1 || g->batch < 1 || g->M > lim || g->N > lim || g->K > lim || g->batch > lim ||
      g->sa < 0 || g->sb < 0 || g->sy < 0 || g->sa > lim || g->sb > lim || g->sy > lim)
    return bad(p, "kernel '%s' has GEMM %lld x %lld x %lld (batch %lld)", kk->name, (long long)g->M,
               (long long)g->N, (long long)g->K, (long long)g->batch);
  for (int i = 0; i < 3; ++i) {
    int64_t rows, cols, ld, st;
    kiln_program_gemm_operand(g, i, &rows, &cols, &ld, &st);
    if (ld < cols || ld > lim)
      return bad(p, "kernel '%s' has GEMM leading dimension %lld < %lld", kk->name, (long long)ld, (long long)cols);
    const uint64_t need = kiln_program_gemm_operand_bytes(g, i);
    if (need > p->buffers[kk->args[par[i]]].bytes)
      return bad(p, "kernel '%s': GEMM operand %c spans %llu bytes, its buffer %llu", kk->name, "ABY"[i],
                 (unsigned long long)need, (unsigned long long)p->buffers[kk->args[par[i]]].bytes);
  }
  return NULL;
}

static kiln_status_t validate_kernels(const kiln_program_t* p) {
  if (p->n_kernels < 0 || (p->n_kernels > 0 && !p->kernels))
    return bad(p, "%s %lld", "kernel count", (long long)p->n_kernels);
  for (int32_t k = 0; k < p->n_kernels; ++k) {
    const kiln_program_kernel_t* kk = &p->kernels[k];
    if (!kk->name || !kk->name[0]) return bad(p, "%s %lld has no name", "kernel", (long long)k);
    if (!kk->node_name || !kk->op_type)
      return bad(p, "kernel '%s' has no node", kk->name);
    if (kk->device != KILN_KERNEL_ON_TARGET && kk->device != KILN_KERNEL_ON_HOST)
      return bad(p, "kernel '%s' runs on device %lld (0: the target, 1: the host CPU)", kk->name, (long long)kk->device);
    if (kk->n_args < 0 || kk->n_args > 4096 || (kk->n_args > 0 && (!kk->args || !kk->access)))
      return bad(p, "kernel '%s' has %lld arguments", kk->name, (long long)kk->n_args);
    for (int32_t j = 0; j < kk->n_args; ++j) {
      if (kk->args[j] < 0 || kk->args[j] >= p->n_buffers)
        return bad(p, "kernel '%s' argument %lld names buffer %lld", kk->name, (long long)j, (long long)kk->args[j]);
      if (!kk->access[j] || (kk->access[j] & ~(KILN_ARG_READ | KILN_ARG_WRITE)))
        return bad(p, "kernel '%s' argument %lld has access flags %lld", kk->name, (long long)j, (long long)kk->access[j]);
      const kiln_program_buffer_t* b = &p->buffers[kk->args[j]];
      if (b->first_use < 0 || b->first_use > k || b->last_use < k)
        return bad(p, "kernel '%s' uses a buffer outside its lifetime (argument %lld, kernel %lld)",
                   kk->name, (long long)j, (long long)k);
      if ((kk->access[j] & KILN_ARG_WRITE) && p->buffers[kiln_program_root(p, kk->args[j])].kind == KILN_PB_CONST)
        return bad(p, "kernel '%s' writes a constant (argument %lld)", kk->name, (long long)j);
      if (b->kind == KILN_PB_STATUS && kk->access[j] != KILN_ARG_WRITE)
        return bad(p, "kernel '%s' reads status word '%s' (argument %lld)", kk->name, b->name, (long long)j);
    }
    for (int d = 0; d < 3; ++d)
      if (kk->groups[d] < 1 || kk->local[d] < 1 || kk->groups[d] > (1ll << 31) || kk->local[d] > 4096)
        return bad(p, "kernel '%s' has launch size %lld x %lld", kk->name, (long long)kk->groups[d],
                   (long long)kk->local[d]);
    if (kk->loop_trips < 0 || kk->flops < 0 || kk->bytes < 0)
      return bad(p, "kernel '%s' records %lld loop trips, %lld flops, %lld bytes", kk->name,
                 (long long)kk->loop_trips, (long long)kk->flops, (long long)kk->bytes);
    /* The planner may put the output in the input's memory: the pair must
     * be a read parameter and a written one (it checks the sizes). */
    bool none = kk->inplace_in == -1 && kk->inplace_out == -1;
    bool pair = kk->inplace_in >= 0 && kk->inplace_in < kk->n_args && kk->inplace_out >= 0 &&
                kk->inplace_out < kk->n_args && kk->inplace_in != kk->inplace_out &&
                (kk->access[kk->inplace_in] & KILN_ARG_READ) && (kk->access[kk->inplace_out] & KILN_ARG_WRITE);
    if (!none && !pair)
      return bad(p, "kernel '%s' has in-place pair (%lld, %lld)", kk->name, (long long)kk->inplace_in,
                 (long long)kk->inplace_out);
    KILN_RETURN_IF_ERROR(validate_gemm(p, kk));
  }
  return NULL;
}

static kiln_status_t validate_io(const kiln_program_t* p) {
  if (p->n_inputs < 0 || p->n_outputs < 0 || (p->n_inputs && (!p->inputs || !p->input_names)) ||
      (p->n_outputs && (!p->outputs || !p->output_names)))
    return bad(p, "%s: %lld inputs, %lld outputs", "io tables", (long long)p->n_inputs, (long long)p->n_outputs);
  for (int32_t i = 0; i < p->n_inputs; ++i) {
    if (p->inputs[i] < 0 || p->inputs[i] >= p->n_buffers || !p->input_names[i])
      return bad(p, "%s %lld names buffer %lld", "input", (long long)i, (long long)p->inputs[i]);
    if (p->buffers[p->inputs[i]].kind != KILN_PB_INPUT && p->buffers[p->inputs[i]].kind != KILN_PB_CONST)
      return bad(p, "%s %lld is buffer %lld, which is not an input", "input", (long long)i, (long long)p->inputs[i]);
  }
  for (int32_t i = 0; i < p->n_outputs; ++i)
    if (p->outputs[i] < 0 || p->outputs[i] >= p->n_buffers || !p->output_names[i])
      return bad(p, "%s %lld names buffer %lld", "output", (long long)i, (long long)p->outputs[i]);
    else if (p->buffers[p->outputs[i]].kind == KILN_PB_STATUS)
      return bad(p, "output %lld is status word '%s'", (long long)i, bn(p, p->outputs[i]));
  /* Callers find inputs and outputs by name (kiln-rt-run --input NAME=...,
   * files named after outputs): a name must say which one. */
  for (int t = 0; t < 2; ++t) {
    const int32_t n = t ? p->n_outputs : p->n_inputs;
    char* const* names = t ? p->output_names : p->input_names;
    for (int32_t i = 0; i < n; ++i) {
      if (!names[i][0]) return bad(p, "%s %lld has an empty name", t ? "output" : "input", (long long)i);
      for (int32_t j = 0; j < i; ++j)
        if (!strcmp(names[i], names[j]))
          return bad(p, "%ss %lld and %lld are both named '%s'", t ? "output" : "input", (long long)j,
                     (long long)i, names[i]);
    }
  }
  return NULL;
}

/* Code |c| for |target|'s API, covering |nk| kernels. */
static kiln_status_t validate_code_of(const kiln_program_t* p, const kiln_program_code_t* c, const char* target,
                                      int32_t nk) {
  const kiln_device_api_t* api = kiln_device_api_find(target);
  if (!api) {
    char names[256];
    return bad(p, "target '%s' is not built into this kiln (it has %s)", target ? target : "(none)",
               kiln_device_api_names("", names, sizeof names));
  }
  if (c->text_len > 0 && !c->text) return bad(p, "%s of %lld bytes is missing", "code text", (long long)c->text_len);
  if (c->n_parts < 0 || (c->n_parts > 0 && !c->parts))
    return bad(p, "%s %lld", "code part count", (long long)c->n_parts);
  for (int32_t i = 0; i < c->n_parts; ++i)
    if (c->parts[2 * i] > c->text_len || c->parts[2 * i + 1] > c->text_len - c->parts[2 * i])
      return bad(p, "%s %lld is past the end of the code text (%lld bytes)", "code part", (long long)i,
                 (long long)c->text_len);
  if (c->n_blobs < 0 || (c->n_blobs > 0 && (!c->blobs || !c->blob_lens)))
    return bad(p, "%s %lld", "code blob count", (long long)c->n_blobs);
  for (int32_t i = 0; i < c->n_blobs; ++i)
    if (c->blob_lens[i] > 0 && !c->blobs[i]) return bad(p, "%s %lld is missing", "code blob", (long long)i);
  if (c->n_native < 0 || (c->n_native > 0 && !c->native))
    return bad(p, "%s %lld", "native code count", (long long)c->n_native);
  for (int32_t i = 0; i < c->n_native; ++i) {
    const kiln_program_native_t* nv = &c->native[i];
    if (!nv->isa || !nv->isa[0] || !nv->len || !nv->bytes)
      return bad(p, "%s %lld has no ISA name or no bytes", "native code object", (long long)i);
    for (int32_t j = 0; j < i; ++j)
      if (strcmp(c->native[j].isa, nv->isa) == 0)
        return bad(p, "%s for '%s' appears twice", "native code object", nv->isa);
  }
  if (c->n_devbin < 0 || (c->n_devbin > 0 && !c->devbin))
    return bad(p, "%s %lld", "device binary count", (long long)c->n_devbin);
  for (int32_t i = 0; i < c->n_devbin; ++i) {
    const kiln_program_devbin_t* b = &c->devbin[i];
    if (!b->device || !b->device[0] || !b->vendor || !b->driver || !b->kiln || !b->len || !b->bytes)
      return bad(p, "%s %lld has no device name or no bytes", "device binary", (long long)i);
  }
  if (c->n_devbin > 0 && api->code_form != KILN_CODE_SOURCE)
    return bad(p, "%s target carries device program binaries", p->target);
  if (c->n_native > 0 && api->code_form != KILN_CODE_SOURCE_PARTS)
    return bad(p, "%s target carries CPU machine code", target);
  if (nk > 0) {
    if (api->code_form != KILN_CODE_BLOB_PER_KERNEL && !c->text_len)
      return bad(p, "%s target has no kernel source", target);
    if (api->code_form == KILN_CODE_SOURCE_PARTS && c->n_parts < 2)
      return bad(p, "%s code has %lld parts, needs prelude and epilogue", target, (long long)c->n_parts);
    if (api->code_form == KILN_CODE_BLOB_PER_KERNEL && c->n_blobs != nk)
      return bad(p, "%s code: %lld binaries for %lld kernels", target, (long long)c->n_blobs, (long long)nk);
  }
  return NULL;
}

/* The target's code for its kernels; a heterogeneous program's host code
 * for the host kernels (and none without them). */
static kiln_status_t validate_code(const kiln_program_t* p) {
  const int32_t nh = kiln_program_kernels_on(p, KILN_KERNEL_ON_HOST);
  if (nh && p->target && !strcmp(p->target, KILN_HOST_TARGET))
    return bad(p, "%s program has kernels on the host (only GPU targets fall back to the CPU)", p->target);
  KILN_RETURN_IF_ERROR(validate_code_of(p, &p->code, p->target, p->n_kernels - nh));
  const kiln_program_code_t* h = &p->host_code;
  if (!nh) {
    if (h->text_len || h->n_parts || h->n_blobs || h->n_native)
      return bad(p, "%s", "host code without host kernels");
    return NULL;
  }
  return kiln_status_annotate(validate_code_of(p, h, KILN_HOST_TARGET, nh), "host code");
}

kiln_status_t kiln_program_validate(const kiln_program_t* p) {
  if (!p) return kiln_make_status(KILN_INVALID_ARGUMENT, "NULL program");
  if (p->weights_len > 0 && !p->weights) return bad(p, "%s of %lld bytes are missing", "weights", (long long)p->weights_len);
  KILN_RETURN_IF_ERROR(validate_buffers(p));
  KILN_RETURN_IF_ERROR(validate_kernels(p));
  KILN_RETURN_IF_ERROR(validate_io(p));
  KILN_RETURN_IF_ERROR(validate_code(p));
  KILN_RETURN_IF_ERROR(kiln_program_validate_dims(p));
  KILN_RETURN_IF_ERROR(kiln_program_validate_buckets(p));
  return kiln_program_validate_staged(p);
}

kiln_status_t kiln_program_check_error(int32_t code, const char* where, const char* node, const char* op,
                                       const char* kernel) {
  if (code == KILN_PB_CHECK_DIV_ZERO)
    return kiln_make_status(KILN_INVALID_ARGUMENT,
                            "%s: node '%s' (%s): %s: integer division by zero (a divisor is 0; kernel '%s')", where,
                            node, op, op, kernel);
  if (code == KILN_PB_CHECK_INDEX_RANGE)
    return kiln_make_status(KILN_OUT_OF_RANGE,
                            "%s: node '%s' (%s): %s: index out of range (an index is outside [-n, n) of its axis; "
                            "kernel '%s')",
                            where, node, op, op, kernel);
  if (code == KILN_PB_CHECK_LENGTH_RANGE)
    return kiln_make_status(KILN_OUT_OF_RANGE,
                            "%s: node '%s' (%s): %s: sequence length out of range (a length is outside [0, T] of "
                            "the time axis; kernel '%s')",
                            where, node, op, op, kernel);
  if (code == KILN_PB_CHECK_PLUGIN_FN)
    return kiln_make_status(KILN_DEVICE_ERROR,
                            "%s: node '%s' (%s): the plugin op's CPU function (cpu_fn) failed (returned non-zero; "
                            "kernel '%s')",
                            where, node, op, kernel);
  return kiln_make_status(KILN_INTERNAL, "%s: node '%s' (%s): kernel '%s' failed a check with code %d", where, node,
                          op, kernel, (int)code);
}
