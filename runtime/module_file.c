/* kiln module file: writer and reader of the format in module_file.h.
 *
 * The writer runs twice over the program, once measuring and once storing,
 * so the bytes are allocated once at their exact size (weights can be
 * hundreds of MiB; doubling a buffer would copy them several times).
 *
 * The reader is written for hostile input: it never trusts a count or a
 * length before checking it against the bytes that remain in the current
 * section, so a file that claims 2^40 buffers fails before anything is
 * allocated, and a truncated or bit-flipped file fails with a message instead
 * of reading past its end. Structural checks (index ranges, alias cycles,
 * constants inside the weights) are kiln_program_validate's job; the reader
 * only makes sure the program it hands over is memory-safe to validate.
 */
#define _GNU_SOURCE /* sync_file_range */
#include "runtime/module_file.h"
#include "runtime/program_staged.h"

#include <errno.h>
#include <fcntl.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "runtime/device_registry.h"

static uint64_t load_le64(const uint8_t* p) {
#if defined(__BYTE_ORDER__) && __BYTE_ORDER__ == __ORDER_LITTLE_ENDIAN__
  uint64_t v;
  memcpy(&v, p, 8); /* one unaligned load */
  return v;
#else
  uint64_t v = 0;
  for (int i = 7; i >= 0; --i) v = (v << 8) | p[i];
  return v;
#endif
}
static uint32_t load_le32(const uint8_t* p) {
  return (uint32_t)p[0] | ((uint32_t)p[1] << 8) | ((uint32_t)p[2] << 16) | ((uint32_t)p[3] << 24);
}
static void store_le64(uint8_t* p, uint64_t v) {
  for (int i = 0; i < 8; ++i) p[i] = (uint8_t)(v >> (8 * i));
}
static void store_le32(uint8_t* p, uint32_t v) {
  for (int i = 0; i < 4; ++i) p[i] = (uint8_t)(v >> (8 * i));
}

void kiln_module_reseal(uint8_t* bytes, size_t len) {
  if (!bytes || len < KILN_MODULE_HEADER_LEN) return;
  store_le64(bytes + KILN_MODULE_OFF_BODY_SUM,
             kiln_module_crc64(0, bytes + KILN_MODULE_HEADER_LEN, len - KILN_MODULE_HEADER_LEN));
  store_le64(bytes + KILN_MODULE_OFF_HEADER_SUM, kiln_module_crc64(0, bytes, KILN_MODULE_OFF_HEADER_SUM));
}

/* ---- writer --------------------------------------------------------------- */

/* |buf| NULL: measuring pass (only |len| advances). Streaming
 * (kiln_module_write_file): the bytes go to a file as they are put, small
 * ones through |stage|, large ones (the weights, the native code) straight
 * from the program, so a module is never copied whole in memory; the
 * section lengths come from the measuring pass (|sec_len|), the body's
 * checksum is summed on the way and the header is written last. */
typedef struct wr_s {
  uint8_t* buf;
  size_t len;
  uint32_t sections;
  /* measuring pass with |record|: each section's payload length */
  bool record;
  uint64_t* sec_len;
  uint32_t sec_cap;
  bool rec_oom;
  /* streaming */
  bool stream;
  int fd;
  const char* tmp;  /* the file's name, for messages */
  uint8_t* stage;
  size_t stage_len; /* staged bytes: the last ones put, at [len - stage_len, len) */
  uint64_t crc;     /* of the bytes past the header written so far */
  uint8_t hdr[KILN_MODULE_HEADER_LEN];
  kiln_status_t err;
  /* kiln_module_write_file_then: called once before the native code */
  kiln_module_wait_fn wait;
  void* wait_ctx;
} wr_t;

#define WR_STAGE (256u << 10)

/* Writes |n| bytes that start at file offset |off|. */
static void stream_out(wr_t* w, const uint8_t* p, size_t n, size_t off) {
  if (w->err || !n) return;
  size_t skip = 0;
  if (off < KILN_MODULE_HEADER_LEN) { /* kept for the patch at the end */
    skip = KILN_MODULE_HEADER_LEN - off < n ? KILN_MODULE_HEADER_LEN - off : n;
    memcpy(w->hdr + off, p, skip);
  }
  w->crc = kiln_module_crc64(w->crc, p + skip, n - skip);
  w->err = kiln_module_fd_write_all(w->fd, p, n, w->tmp);
}

static void stream_flush(wr_t* w) {
  stream_out(w, w->stage, w->stage_len, w->len - w->stage_len);
  w->stage_len = 0;
}

static void stream_put(wr_t* w, const void* p, size_t n) {
  if (n >= WR_STAGE / 2) {
    stream_flush(w);
    stream_out(w, p, n, w->len);
    return;
  }
  if (w->stage_len + n > WR_STAGE) stream_flush(w);
  memcpy(w->stage + w->stage_len, p, n);
  w->stage_len += n;
}

static void put_bytes(wr_t* w, const void* p, size_t n) {
  if (w->stream && n) stream_put(w, p, n);
  else if (w->buf && n) memcpy(w->buf + w->len, p, n);
  w->len += n;
}
static void put_zeros(wr_t* w, size_t n) {
  static const uint8_t zeros[256];
  if (w->stream) {
    for (size_t k = 0; k < n; k += sizeof zeros) put_bytes(w, zeros, n - k < sizeof zeros ? n - k : sizeof zeros);
    return;
  }
  if (w->buf && n) memset(w->buf + w->len, 0, n);
  w->len += n;
}
static void put_u8(wr_t* w, uint8_t v) { put_bytes(w, &v, 1); }
static void put_u32(wr_t* w, uint32_t v) {
  uint8_t b[4];
  store_le32(b, v);
  put_bytes(w, b, 4);
}
static void put_u64(wr_t* w, uint64_t v) {
  uint8_t b[8];
  store_le64(b, v);
  put_bytes(w, b, 8);
}
static void put_i32(wr_t* w, int32_t v) { put_u32(w, (uint32_t)v); }
static void put_i64(wr_t* w, int64_t v) { put_u64(w, (uint64_t)v); }

static const char* prog_name(const kiln_program_t* p) {
  return p->model_name && p->model_name[0] ? p->model_name : "program";
}

/* Strings: the reader refuses NULs and lengths above the cap, so the
 * writer refuses them too rather than write a file nobody can load. */
static kiln_status_t check_str(const kiln_program_t* p, const char* s, size_t n, const char* what) {
  if (n > KILN_MODULE_MAX_STRING)
    return kiln_make_status(KILN_INVALID_ARGUMENT, "%s: %s is %zu bytes, above the %u-byte limit",
                            prog_name(p), what, n, KILN_MODULE_MAX_STRING);
  if (n && memchr(s, 0, n))
    return kiln_make_status(KILN_INVALID_ARGUMENT, "%s: %s contains a NUL byte", prog_name(p), what);
  return NULL;
}

static kiln_status_t put_str(wr_t* w, const kiln_program_t* p, const char* s, const char* what) {
  if (!s) s = "";
  size_t n = strlen(s);
  KILN_RETURN_IF_ERROR(check_str(p, s, n, what));
  put_u32(w, (uint32_t)n);
  put_bytes(w, s, n);
  return NULL;
}

static size_t section_begin_flags(wr_t* w, uint32_t tag, uint32_t flags) {
  size_t at = w->len;
  put_u32(w, tag);
  put_u32(w, flags);
  /* patched by section_end; a stream writes what the measuring pass found */
  put_u64(w, w->stream && w->sections < w->sec_cap ? w->sec_len[w->sections] : 0);
  return at;
}

static size_t section_begin(wr_t* w, uint32_t tag) {
  return section_begin_flags(w, tag, KILN_MODULE_SECTION_REQUIRED);
}

static void section_end(wr_t* w, size_t at) {
  uint64_t payload = (uint64_t)(w->len - at - 16);
  if (w->buf) store_le64(w->buf + at + 8, payload);
  if (w->record && !w->rec_oom) { /* sections are not nested: this is section w->sections */
    if (w->sections >= w->sec_cap) {
      uint32_t cap = w->sec_cap ? 2 * w->sec_cap : 16;
      uint64_t* m = realloc(w->sec_len, cap * sizeof *m);
      if (m) {
        w->sec_len = m;
        w->sec_cap = cap;
      }
    }
    if (w->sections < w->sec_cap) w->sec_len[w->sections] = payload;
    else w->rec_oom = true;
  }
  put_zeros(w, (8 - w->len % 8) % 8);
  w->sections++;
}

static kiln_status_t bad_arg(const kiln_program_t* p, const char* what, long long v) {
  return kiln_make_status(KILN_INVALID_ARGUMENT, "%s: cannot serialise: %s (%lld)", prog_name(p),
                          what, v);
}

/* Cheap structural checks so the writer never reads past an array; the
 * deeper invariants are kiln_program_validate's. */
static kiln_status_t check_shape(const kiln_program_t* p) {
  if (p->n_buffers < 0 || (p->n_buffers && !p->buffers)) return bad_arg(p, "buffer table", p->n_buffers);
  if (p->n_kernels < 0 || (p->n_kernels && !p->kernels)) return bad_arg(p, "kernel table", p->n_kernels);
  if (p->n_inputs < 0 || (p->n_inputs && (!p->inputs || !p->input_names)))
    return bad_arg(p, "input table", p->n_inputs);
  if (p->n_outputs < 0 || (p->n_outputs && (!p->outputs || !p->output_names)))
    return bad_arg(p, "output table", p->n_outputs);
  if (p->weights_len && !p->weights) return bad_arg(p, "weights missing", (long long)p->weights_len);
  for (int32_t i = 0; i < p->n_buffers; ++i)
    if (p->buffers[i].rank < 0 || p->buffers[i].rank > KILN_MAX_RANK)
      return bad_arg(p, "buffer rank", p->buffers[i].rank);
  for (int32_t k = 0; k < p->n_kernels; ++k) {
    const kiln_program_kernel_t* kk = &p->kernels[k];
    if (kk->n_args < 0 || (kk->n_args && (!kk->args || !kk->access)))
      return bad_arg(p, "kernel argument count", kk->n_args);
  }
  const kiln_program_code_t* c = &p->code;
  if (c->text_len && !c->text) return bad_arg(p, "code text missing", (long long)c->text_len);
  if (c->n_parts < 0 || (c->n_parts && !c->parts)) return bad_arg(p, "code part count", c->n_parts);
  if (c->n_blobs < 0 || (c->n_blobs && (!c->blobs || !c->blob_lens)))
    return bad_arg(p, "code blob count", c->n_blobs);
  for (int32_t i = 0; i < c->n_blobs; ++i)
    if (c->blob_lens[i] && !c->blobs[i]) return bad_arg(p, "code blob missing", i);
  if (c->n_native < 0 || (c->n_native && !c->native)) return bad_arg(p, "native code count", c->n_native);
  for (int32_t i = 0; i < c->n_native; ++i) {
    const char* isa = c->native[i].isa;
    if (!isa || !isa[0] || strlen(isa) > KILN_MODULE_MAX_ISA_NAME)
      return bad_arg(p, "native code ISA name length", isa ? (long long)strlen(isa) : -1);
    if (c->native[i].len && !c->native[i].bytes) return bad_arg(p, "native code missing", i);
  }
  if (c->n_devbin < 0 || (c->n_devbin && !c->devbin)) return bad_arg(p, "device binary count", c->n_devbin);
  for (int32_t i = 0; i < c->n_devbin; ++i)
    if (!c->devbin[i].len || !c->devbin[i].bytes) return bad_arg(p, "device binary missing", i);
  if (c->text_len && memchr(c->text, 0, (size_t)c->text_len))
    return kiln_make_status(KILN_INVALID_ARGUMENT, "%s: code text contains a NUL byte", prog_name(p));
  return NULL;
}

/* Text, parts and blobs of |c| (the CODE section's layout; HOST's too). */
static void put_code(wr_t* w, const kiln_program_code_t* c) {
  put_u64(w, c->text_len);
  put_bytes(w, c->text, (size_t)c->text_len);
  put_u64(w, (uint64_t)c->n_parts);
  for (int32_t i = 0; i < 2 * c->n_parts; ++i) put_u64(w, c->parts[i]);
  put_u64(w, (uint64_t)c->n_blobs);
  for (int32_t i = 0; i < c->n_blobs; ++i) {
    put_u64(w, c->blob_lens[i]);
    put_bytes(w, c->blobs[i], (size_t)c->blob_lens[i]);
  }
}

/* A module image inside a section (BUCK, STGS): its length as a u64, its
 * bytes, zeros to the next 8-byte boundary (rd_image reads it back). */
static kiln_status_t put_image(wr_t* w, const kiln_program_t* img) {
  uint8_t* bytes = NULL;
  size_t len = 0;
  KILN_RETURN_IF_ERROR(kiln_module_serialize(img, kiln_allocator_system(), &bytes, &len));
  put_u64(w, (uint64_t)len);
  put_bytes(w, bytes, len);
  put_zeros(w, (8 - len % 8) % 8);
  kiln_allocator_free(kiln_allocator_system(), bytes);
  return NULL;
}

/* Section BUCK: the dim's name, the sizes, then each bucket after the
 * first as a u64 length and its module image (serialised here in both
 * writer passes: the measuring pass needs its length). */
static kiln_status_t put_buckets(wr_t* w, const kiln_program_t* p) {
  size_t s = section_begin(w, KILN_MODULE_TAG_BUCK);
  KILN_RETURN_IF_ERROR(put_str(w, p, p->bucket_dim, "bucketed dim name"));
  put_u64(w, (uint64_t)p->n_buckets);
  for (int32_t k = 0; k < p->n_buckets; ++k) put_i64(w, p->bucket_values[k]);
  for (int32_t k = 1; k < p->n_buckets; ++k) {
    if (!p->buckets || !p->buckets[k - 1] || p->buckets[k - 1]->n_buckets) return bad_arg(p, "shape bucket", k);
    /* Weights the same as the first program's (the sizes change the
     * activations, rarely the packed weights) are stored once: the image
     * then has none and flag 1 says whose to take. */
    kiln_program_t b = *p->buckets[k - 1];
    const bool shared = b.weights_len && b.weights_len == p->weights_len && !memcmp(b.weights, p->weights, b.weights_len);
    if (shared) b.weights = NULL, b.weights_len = 0;
    put_u64(w, shared ? 1 : 0);
    KILN_RETURN_IF_ERROR(put_image(w, &b), "%s: shape bucket %s=%lld", prog_name(p), p->bucket_dim,
                         (long long)p->bucket_values[k]);
  }
  section_end(w, s);
  return NULL;
}

/* Section STGS (runtime/program_staged.h): the value table, the model's
 * inputs and outputs as value ids, then the segments, a stage with its
 * module image as BUCK stores one (serialised in both writer passes). */
static kiln_status_t put_staged(wr_t* w, const kiln_program_t* p) {
  const kiln_program_staged_t* t = p->staged;
  size_t s = section_begin(w, KILN_MODULE_TAG_STGS);
  put_u64(w, (uint64_t)t->n_values);
  for (int32_t i = 0; i < t->n_values; ++i) {
    const kiln_staged_value_t* v = &t->values[i];
    if (v->rank < 0 || v->rank > KILN_MAX_RANK) return bad_arg(p, "staged value rank", v->rank);
    put_u32(w, (uint32_t)v->dtype);
    put_i32(w, v->rank);
    put_u32(w, v->datadep);
    for (int32_t d = 0; d < v->rank; ++d) put_i64(w, v->dims[d]);
    put_u8(w, v->data ? 1 : 0);
    if (v->data) {
      put_u64(w, v->nbytes);
      put_bytes(w, v->data, (size_t)v->nbytes);
    }
  }
  put_u64(w, (uint64_t)p->n_inputs);
  for (int32_t i = 0; i < p->n_inputs; ++i) put_i32(w, t->model_in[i]);
  put_u64(w, (uint64_t)p->n_outputs);
  for (int32_t i = 0; i < p->n_outputs; ++i) put_i32(w, t->model_out[i]);
  put_u64(w, (uint64_t)t->n_segments);
  for (int32_t i = 0; i < t->n_segments; ++i) {
    const kiln_staged_segment_t* g = &t->segments[i];
    put_u32(w, (uint32_t)g->op);
    KILN_RETURN_IF_ERROR(put_str(w, p, g->name, "staged segment name"));
    put_u64(w, (uint64_t)g->n_in);
    for (int32_t k = 0; k < g->n_in; ++k) put_i32(w, g->in[k]);
    put_u64(w, (uint64_t)g->n_out);
    for (int32_t k = 0; k < g->n_out; ++k) put_i32(w, g->out[k]);
    put_u64(w, (uint64_t)g->n_attrs);
    for (int32_t k = 0; k < g->n_attrs; ++k) {
      KILN_RETURN_IF_ERROR(put_str(w, p, g->attrs[k].name, "staged attribute name"));
      put_i64(w, g->attrs[k].value);
    }
    if (g->op != KILN_STAGED_STAGE) continue;
    if (!g->prog || g->prog->staged) return bad_arg(p, "staged stage program", i);
    KILN_RETURN_IF_ERROR(put_image(w, g->prog), "%s: staged segment %d ('%s')", prog_name(p), (int)i, g->name);
  }
  section_end(w, s);
  return NULL;
}

/* Optional: a reader that does not know it compiles the C source. */
static kiln_status_t put_native(wr_t* w, const kiln_program_t* p) {
  const kiln_program_code_t* c = &p->code;
  if (c->n_native <= 0) return NULL;
  size_t s = section_begin_flags(w, KILN_MODULE_TAG_NATV, 0);
  put_u64(w, (uint64_t)c->n_native);
  for (int32_t i = 0; i < c->n_native; ++i) {
    const kiln_program_native_t* nv = &c->native[i];
    KILN_RETURN_IF_ERROR(put_str(w, p, nv->isa, "native code ISA name"));
    put_u64(w, nv->len);
    put_bytes(w, nv->bytes, (size_t)nv->len);
  }
  section_end(w, s);
  return NULL;
}

static kiln_status_t write_all(wr_t* w, const kiln_program_t* p) {
  /* Header; the length and checksums are filled in at the end. */
  put_bytes(w, KILN_MODULE_MAGIC, KILN_MODULE_MAGIC_LEN);
  put_u32(w, KILN_MODULE_FORMAT_VERSION);
  put_u32(w, 0);
  put_u64(w, 0);
  put_u32(w, 0);
  put_u32(w, KILN_MODULE_HEADER_LEN);
  put_u64(w, 0);
  put_u64(w, 0);

  size_t s = section_begin(w, KILN_MODULE_TAG_META);
  KILN_RETURN_IF_ERROR(put_str(w, p, p->target, "target"));
  KILN_RETURN_IF_ERROR(put_str(w, p, p->model_name, "model name"));
  KILN_RETURN_IF_ERROR(put_str(w, p, p->precision, "precision"));
  KILN_RETURN_IF_ERROR(put_str(w, p, p->options, "options"));
  section_end(w, s);

  s = section_begin(w, KILN_MODULE_TAG_BUFS);
  put_u64(w, (uint64_t)p->n_buffers);
  for (int32_t i = 0; i < p->n_buffers; ++i) {
    const kiln_program_buffer_t* b = &p->buffers[i];
    KILN_RETURN_IF_ERROR(put_str(w, p, b->name, "buffer name"));
    put_u32(w, (uint32_t)b->dtype);
    put_u32(w, (uint32_t)b->kind);
    put_i32(w, b->rank);
    for (int32_t k = 0; k < b->rank; ++k) put_i64(w, b->shape[k]);
    put_u64(w, b->bytes);
    put_i32(w, b->alias_of);
    put_i32(w, b->first_use);
    put_i32(w, b->last_use);
    put_u64(w, b->const_offset);
  }
  section_end(w, s);

  s = section_begin(w, KILN_MODULE_TAG_KERN);
  put_u64(w, (uint64_t)p->n_kernels);
  for (int32_t k = 0; k < p->n_kernels; ++k) {
    const kiln_program_kernel_t* kk = &p->kernels[k];
    KILN_RETURN_IF_ERROR(put_str(w, p, kk->name, "kernel name"));
    KILN_RETURN_IF_ERROR(put_str(w, p, kk->node_name, "kernel node name"));
    KILN_RETURN_IF_ERROR(put_str(w, p, kk->op_type, "kernel op type"));
    put_u64(w, (uint64_t)kk->n_args);
    for (int32_t j = 0; j < kk->n_args; ++j) {
      put_i32(w, kk->args[j]);
      put_u8(w, kk->access[j]);
    }
    for (int d = 0; d < 3; ++d) put_i64(w, kk->groups[d]);
    for (int d = 0; d < 3; ++d) put_i64(w, kk->local[d]);
    put_i64(w, kk->flops);
    put_i64(w, kk->bytes);
    put_i32(w, kk->inplace_in);
    put_i32(w, kk->inplace_out);
    put_i64(w, kk->loop_trips);
  }
  section_end(w, s);

  /* Optional: a reader that does not know it runs the kernels' own code. */
  int32_t n_gemm = 0;
  for (int32_t k = 0; k < p->n_kernels; ++k) n_gemm += p->kernels[k].gemm.valid;
  if (n_gemm) {
    s = section_begin_flags(w, KILN_MODULE_TAG_GEMM, 0);
    put_u64(w, (uint64_t)n_gemm);
    for (int32_t k = 0; k < p->n_kernels; ++k) {
      const kiln_program_gemm_t* g = &p->kernels[k].gemm;
      if (!g->valid) continue;
      put_i32(w, k);
      put_u32(w, (g->trans_a ? 1u : 0u) | (g->trans_b ? 2u : 0u));
      const int64_t v[10] = {g->M, g->N, g->K, g->batch, g->lda, g->ldb, g->ldy, g->sa, g->sb, g->sy};
      for (int i = 0; i < 10; ++i) put_i64(w, v[i]);
      uint32_t alpha;
      memcpy(&alpha, &g->alpha, 4);
      put_u32(w, alpha);
      put_i32(w, g->a);
      put_i32(w, g->b);
      put_i32(w, g->y);
    }
    section_end(w, s);
  }

  s = section_begin(w, KILN_MODULE_TAG_IO);
  put_u64(w, (uint64_t)p->n_inputs);
  for (int32_t i = 0; i < p->n_inputs; ++i) {
    put_i32(w, p->inputs[i]);
    KILN_RETURN_IF_ERROR(put_str(w, p, p->input_names[i], "input name"));
  }
  put_u64(w, (uint64_t)p->n_outputs);
  for (int32_t i = 0; i < p->n_outputs; ++i) {
    put_i32(w, p->outputs[i]);
    KILN_RETURN_IF_ERROR(put_str(w, p, p->output_names[i], "output name"));
  }
  section_end(w, s);

  s = section_begin(w, KILN_MODULE_TAG_WGHT);
  size_t data_at = w->len + 16;
  uint32_t pad = (uint32_t)((KILN_MODULE_WEIGHTS_ALIGN - data_at % KILN_MODULE_WEIGHTS_ALIGN) %
                            KILN_MODULE_WEIGHTS_ALIGN);
  put_u64(w, p->weights_len);
  put_u32(w, pad);
  put_u32(w, 0);
  put_zeros(w, pad);
  put_bytes(w, p->weights, (size_t)p->weights_len);
  section_end(w, s);

  /* Optional: the plugin ops the kernels compute (their code is in the
   * module); the loader refuses the module while their plugins are not
   * loaded (runtime/plugin.c). */
  if (p->n_plugin_ops) {
    s = section_begin_flags(w, KILN_MODULE_TAG_PLUG, 0);
    put_u64(w, (uint64_t)p->n_plugin_ops);
    for (int32_t i = 0; i < p->n_plugin_ops; ++i) {
      KILN_RETURN_IF_ERROR(put_str(w, p, p->plugin_ops[i].domain, "plugin op domain"));
      KILN_RETURN_IF_ERROR(put_str(w, p, p->plugin_ops[i].name, "plugin op name"));
      put_i32(w, p->plugin_ops[i].version);
    }
    section_end(w, s);
  }

  /* The dynamic dims, only in modules that have them (older modules and
   * static ones stay byte-identical). */
  if (p->n_dims) {
    s = section_begin(w, KILN_MODULE_TAG_DYNS);
    put_u64(w, (uint64_t)p->n_dims);
    for (int32_t i = 0; i < p->n_dims; ++i) {
      KILN_RETURN_IF_ERROR(put_str(w, p, p->dims[i].name, "dynamic dim name"));
      put_i64(w, p->dims[i].lo);
      put_i64(w, p->dims[i].hi);
    }
    section_end(w, s);
  }
  if (p->dim_axis) {
    s = section_begin(w, KILN_MODULE_TAG_DYNA);
    put_u64(w, (uint64_t)(p->n_inputs + p->n_outputs));
    for (int32_t i = 0; i < p->n_inputs + p->n_outputs; ++i) put_i32(w, p->dim_axis[i]);
    section_end(w, s);
  }
  /* Optional: a kiln without it runs every buffer at the top of the range. */
  if (p->dim_bytes) {
    s = section_begin_flags(w, KILN_MODULE_TAG_DYNM, 0);
    put_u64(w, (uint64_t)p->n_buffers);
    for (int32_t i = 0; i < 3 * p->n_buffers; ++i) put_i64(w, p->dim_bytes[i]);
    section_end(w, s);
  }

  /* Shape buckets: the other sizes' programs, each a whole module image.
   * Required: a kiln without it would run every size with the first's. */
  if (p->n_buckets) KILN_RETURN_IF_ERROR(put_buckets(w, p));
  if (p->staged) KILN_RETURN_IF_ERROR(put_staged(w, p));

  /* Optional: the tuning-cache points kernels were compiled with. */
  int64_t n_tuned = 0;
  for (int32_t k = 0; k < p->n_kernels; ++k) n_tuned += p->kernels[k].tuned != NULL;
  if (n_tuned) {
    s = section_begin_flags(w, KILN_MODULE_TAG_TUNE, 0);
    put_u64(w, (uint64_t)n_tuned);
    for (int32_t k = 0; k < p->n_kernels; ++k) {
      if (!p->kernels[k].tuned) continue;
      put_i32(w, k);
      KILN_RETURN_IF_ERROR(put_str(w, p, p->kernels[k].tuned, "tuned point"));
    }
    section_end(w, s);
  }

  const kiln_program_code_t* c = &p->code;
  s = section_begin(w, KILN_MODULE_TAG_CODE);
  put_code(w, c);
  section_end(w, s);

  /* Heterogeneous programs: where each kernel runs and the CPU code of the
   * host kernels. Required: a kiln that does not know it would run host
   * kernels as the target's. */
  if (kiln_program_kernels_on(p, KILN_KERNEL_ON_HOST)) {
    s = section_begin(w, KILN_MODULE_TAG_HOST);
    put_u64(w, (uint64_t)p->n_kernels);
    for (int32_t k = 0; k < p->n_kernels; ++k) put_u8(w, p->kernels[k].device);
    put_zeros(w, (8 - (size_t)p->n_kernels % 8) % 8);
    put_code(w, &p->host_code);
    section_end(w, s);
  }

  /* Native code another thread was building while the rest was written:
   * waited for here; its section's length is measured now (the measuring
   * pass ran without it). */
  if (w->wait) {
    kiln_module_wait_fn wait = w->wait;
    w->wait = NULL;
    if (w->stream) { /* the weights' writeback starts now, not at the fsync after the wait */
      stream_flush(w);
#if defined(__linux__) && defined(SYNC_FILE_RANGE_WRITE)
      if (!w->err) sync_file_range(w->fd, 0, 0, SYNC_FILE_RANGE_WRITE);
#endif
    }
    KILN_RETURN_IF_ERROR(wait(w->wait_ctx));
    if (c->n_native > 0 && w->stream) {
      wr_t m = {.record = true};
      KILN_RETURN_IF_ERROR(put_native(&m, p));
      if (m.rec_oom || w->sections != w->sec_cap) {
        free(m.sec_len);
        return kiln_make_status(KILN_INTERNAL, "%s: native code section out of place", prog_name(p));
      }
      uint64_t* grown = realloc(w->sec_len, (w->sec_cap + 1) * sizeof *grown);
      if (!grown) {
        free(m.sec_len);
        return kiln_make_status(KILN_OUT_OF_MEMORY, "%s: out of memory", prog_name(p));
      }
      grown[w->sec_cap++] = m.sec_len[0];
      w->sec_len = grown;
      free(m.sec_len);
    }
  }
  KILN_RETURN_IF_ERROR(put_native(w, p));

  /* Optional: a reader that does not know it builds the source. */
  if (c->n_devbin > 0) {
    s = section_begin_flags(w, KILN_MODULE_TAG_DBIN, 0);
    put_u64(w, (uint64_t)c->n_devbin);
    for (int32_t i = 0; i < c->n_devbin; ++i) {
      const kiln_program_devbin_t* b = &c->devbin[i];
      KILN_RETURN_IF_ERROR(put_str(w, p, b->device, "device binary's device name"));
      KILN_RETURN_IF_ERROR(put_str(w, p, b->vendor, "device binary's vendor"));
      KILN_RETURN_IF_ERROR(put_str(w, p, b->driver, "device binary's driver version"));
      KILN_RETURN_IF_ERROR(put_str(w, p, b->kiln, "device binary's kiln version"));
      put_u64(w, b->source_crc);
      put_u64(w, b->len);
      put_bytes(w, b->bytes, (size_t)b->len);
    }
    section_end(w, s);
  }
  return NULL;
}

kiln_status_t kiln_module_serialize(const kiln_program_t* p, kiln_allocator_t a, uint8_t** out_bytes,
                                    size_t* out_len) {
  if (!p || !out_bytes || !out_len)
    return kiln_make_status(KILN_INVALID_ARGUMENT, "kiln_module_serialize: NULL argument");
  KILN_RETURN_IF_ERROR(check_shape(p));
  wr_t w = {0};
  KILN_RETURN_IF_ERROR(write_all(&w, p));
  void* buf = NULL;
  KILN_RETURN_IF_ERROR(kiln_allocator_malloc(a, w.len, "module bytes", &buf),
                       "%s: serialising", prog_name(p));
  size_t len = w.len;
  wr_t w2 = {.buf = buf};
  kiln_status_t st = write_all(&w2, p);
  if (!st && w2.len != len)
    st = kiln_make_status(KILN_INTERNAL, "%s: module writer size changed between passes", prog_name(p));
  if (st) {
    kiln_allocator_free(a, buf);
    return st;
  }
  store_le64(w2.buf + KILN_MODULE_OFF_TOTAL_LEN, (uint64_t)len);
  store_le32(w2.buf + KILN_MODULE_OFF_SECTIONS, w2.sections);
  kiln_module_reseal(w2.buf, len);
  *out_bytes = buf;
  *out_len = len;
  return NULL;
}

kiln_status_t kiln_module_fd_write_all(int fd, const void* data, size_t n, const char* tmp) {
  const uint8_t* p = data;
  while (n > 0) {
    size_t chunk = n > (1u << 30) ? (1u << 30) : n;
    ssize_t k = write(fd, p, chunk);
    if (k < 0 && errno == EINTR) continue;
    if (k <= 0)
      return kiln_make_status(KILN_IO_ERROR, "%s: write failed: %s", tmp,
                              k < 0 ? strerror(errno) : "no progress");
    p += k;
    n -= (size_t)k;
  }
  return NULL;
}

/* What a write through a temporary puts into the file: |bytes| as they
 * are (kiln_module_write_bytes), or the program streamed. */
typedef struct write_src_s {
  const uint8_t* bytes;
  size_t len;
  const kiln_program_t* prog;
  kiln_module_wait_fn wait;
  void* wait_ctx;
} write_src_t;

/* Streams |p| to |fd| (a new regular file): the measuring pass, the bytes,
 * then the header with its length, section count and checksums. */
static kiln_status_t stream_program(const kiln_program_t* p, int fd, const char* tmp, kiln_module_wait_fn wait,
                                    void* wait_ctx) {
  wr_t m = {.record = true};
  kiln_status_t st = write_all(&m, p);
  if (!st && m.rec_oom) st = kiln_make_status(KILN_OUT_OF_MEMORY, "%s: out of memory", prog_name(p));
  wr_t w = {.stream = true, .fd = fd, .tmp = tmp, .sec_len = m.sec_len, .sec_cap = m.sections,
            .wait = wait, .wait_ctx = wait_ctx};
  m.sec_len = NULL; /* w's now (the wait may grow it) */
  if (!st) {
    w.stage = malloc(WR_STAGE);
    if (!w.stage) st = kiln_make_status(KILN_OUT_OF_MEMORY, "%s: out of memory", prog_name(p));
  }
  if (!st) st = write_all(&w, p);
  if (!st) stream_flush(&w);
  if (!st) st = w.err;
  w.err = NULL;
  if (!st && !wait && (w.len != m.len || w.sections != m.sections))
    st = kiln_make_status(KILN_INTERNAL, "%s: module writer size changed between passes", prog_name(p));
  if (!st) {
    store_le64(w.hdr + KILN_MODULE_OFF_TOTAL_LEN, (uint64_t)w.len);
    store_le32(w.hdr + KILN_MODULE_OFF_SECTIONS, w.sections);
    store_le64(w.hdr + KILN_MODULE_OFF_BODY_SUM, w.crc);
    store_le64(w.hdr + KILN_MODULE_OFF_HEADER_SUM, kiln_module_crc64(0, w.hdr, KILN_MODULE_OFF_HEADER_SUM));
    ssize_t k;
    while ((k = pwrite(fd, w.hdr, sizeof w.hdr, 0)) < 0 && errno == EINTR) {
    }
    if (k != (ssize_t)sizeof w.hdr)
      st = kiln_make_status(KILN_IO_ERROR, "%s: writing the header failed: %s", tmp, k < 0 ? strerror(errno) : "short write");
  }
  kiln_status_free(w.err);
  free(w.stage);
  free(w.sec_len);
  free(m.sec_len);
  return st;
}

static kiln_status_t write_via_tmp(const write_src_t* src, const char* path) {
  size_t pl = strlen(path);
  char* tmp = malloc(pl + 5);
  if (!tmp) return kiln_make_status(KILN_OUT_OF_MEMORY, "%s: out of memory", path);
  memcpy(tmp, path, pl);
  memcpy(tmp + pl, ".tmp", 5);

  kiln_status_t st = NULL;
  uint8_t* owned = NULL;
  /* A path that names something other than a regular file (/dev/null, a
   * FIFO) is written in place: renaming the temporary over it would replace
   * the device node itself, which as root destroys /dev/null. Nor can the
   * header be written last there: such a path takes the bytes serialised. */
  struct stat sb;
  bool in_place = stat(path, &sb) == 0 && !S_ISREG(sb.st_mode);
  if (in_place) memcpy(tmp, path, pl + 1);
  const uint8_t* bytes = src->bytes;
  size_t len = src->len;
  if (in_place && src->prog) {
    if (src->wait) st = src->wait(src->wait_ctx);
    if (!st) st = kiln_module_serialize(src->prog, kiln_allocator_system(), &owned, &len);
    if (st) goto done;
    bytes = owned;
  }
  int fd = open(tmp, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
  if (fd < 0) {
    st = kiln_make_status(errno == EACCES ? KILN_PERMISSION_DENIED : KILN_IO_ERROR,
                          "%s: cannot create %s: %s", path, tmp, strerror(errno));
    goto done;
  }
  st = bytes || !src->prog ? kiln_module_fd_write_all(fd, bytes, len, tmp) : stream_program(src->prog, fd, tmp, src->wait, src->wait_ctx);
  /* fsync before rename: otherwise a crash can leave |path| naming an
   * empty file on filesystems that reorder metadata before data. */
  if (!st && !in_place && fsync(fd) != 0 && errno != EINVAL && errno != EROFS)
    st = kiln_make_status(KILN_IO_ERROR, "%s: flushing %s failed: %s", path, tmp, strerror(errno));
  if (close(fd) != 0 && !st)
    st = kiln_make_status(KILN_IO_ERROR, "%s: closing %s failed: %s", path, tmp, strerror(errno));
  if (!st && !in_place && rename(tmp, path) != 0)
    st = kiln_make_status(KILN_IO_ERROR, "%s: cannot rename %s over it: %s", path, tmp, strerror(errno));
  if (st && !in_place) unlink(tmp);
done:
  if (owned) kiln_allocator_free(kiln_allocator_system(), owned);
  free(tmp);
  return st;
}

kiln_status_t kiln_module_write_bytes(const uint8_t* bytes, size_t len, const char* path) {
  write_src_t src = {bytes, len, NULL, NULL, NULL};
  return write_via_tmp(&src, path);
}

kiln_status_t kiln_module_write_file(const kiln_program_t* p, const char* path) {
  if (!p || !path || !path[0])
    return kiln_make_status(KILN_INVALID_ARGUMENT, "kiln_module_write_file: NULL program or empty path");
  KILN_RETURN_IF_ERROR(kiln_program_validate(p), "%s", path);
  KILN_RETURN_IF_ERROR(check_shape(p), "%s", path);
  write_src_t src = {NULL, 0, p, NULL, NULL};
  return write_via_tmp(&src, path);
}

/* The caller's wait, called once whatever path the write takes. */
typedef struct wait_once_s {
  kiln_module_wait_fn fn;
  void* ctx;
  bool called;
} wait_once_t;

static kiln_status_t wait_once(void* arg) {
  wait_once_t* w = arg;
  if (w->called) return NULL;
  w->called = true;
  return w->fn(w->ctx);
}

kiln_status_t kiln_module_write_file_then(const kiln_program_t* p, const char* path, kiln_module_wait_fn wait,
                                          void* wait_ctx) {
  if (!wait) return kiln_make_status(KILN_INVALID_ARGUMENT, "kiln_module_write_file_then: no wait function");
  wait_once_t wo = {wait, wait_ctx, false};
  kiln_status_t st = NULL;
  if (!p || !path || !path[0])
    st = kiln_make_status(KILN_INVALID_ARGUMENT, "kiln_module_write_file_then: NULL program or empty path");
  else if (p->code.n_native || p->code.n_devbin)
    st = kiln_make_status(KILN_INVALID_ARGUMENT, "%s: the native code to wait for is there already", path);
  if (!st && (st = kiln_program_validate(p))) st = kiln_status_annotate(st, "%s", path);
  if (!st && (st = check_shape(p))) st = kiln_status_annotate(st, "%s", path);
  if (!st) {
    write_src_t src = {NULL, 0, p, wait_once, &wo};
    st = write_via_tmp(&src, path);
  }
  kiln_status_t ws = wait_once(&wo); /* no-op when the write called it */
  if (!st) return ws;
  kiln_status_free(ws);
  return st;
}

/* ---- reader --------------------------------------------------------------- */

typedef struct rd_s {
  const char* name;    /* module name for messages */
  char section[8];     /* printable tag of the section being read */
  const char* item;    /* "buffer", "kernel", ... or NULL */
  int64_t index;       /* index of |item| */
  const uint8_t* p;
  size_t left;
  uint32_t version;    /* the file's format version */
  bool borrow;         /* weights point into the bytes instead of a copy */
} rd_t;

static void tag_text(uint32_t tag, char out[8]) {
  for (int i = 0; i < 4; ++i) {
    char c = (char)((tag >> (8 * i)) & 0xff);
    out[i] = (c >= 0x20 && c < 0x7f) ? c : '?';
  }
  out[4] = 0;
}

static kiln_status_t rd_err(const rd_t* r, kiln_status_code_t code, const char* fmt, ...)
    KILN_PRINTF(3, 4);
static kiln_status_t rd_err(const rd_t* r, kiln_status_code_t code, const char* fmt, ...) {
  char msg[256];
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(msg, sizeof msg, fmt, ap);
  va_end(ap);
  if (r->item)
    return kiln_make_status(code, "%s: section '%s': %s %lld: %s", r->name, r->section, r->item,
                            (long long)r->index, msg);
  return kiln_make_status(code, "%s: section '%s': %s", r->name, r->section, msg);
}

static kiln_status_t need(rd_t* r, size_t n, const char* what) {
  if (r->left < n)
    return rd_err(r, KILN_PARSE_ERROR, "truncated: %s needs %zu bytes, %zu left", what, n, r->left);
  return NULL;
}

static kiln_status_t rd_u8(rd_t* r, const char* what, uint8_t* out) {
  KILN_RETURN_IF_ERROR(need(r, 1, what));
  *out = r->p[0];
  r->p += 1;
  r->left -= 1;
  return NULL;
}
static kiln_status_t rd_u32(rd_t* r, const char* what, uint32_t* out) {
  KILN_RETURN_IF_ERROR(need(r, 4, what));
  *out = load_le32(r->p);
  r->p += 4;
  r->left -= 4;
  return NULL;
}
static kiln_status_t rd_u64(rd_t* r, const char* what, uint64_t* out) {
  KILN_RETURN_IF_ERROR(need(r, 8, what));
  *out = load_le64(r->p);
  r->p += 8;
  r->left -= 8;
  return NULL;
}
static kiln_status_t rd_i32(rd_t* r, const char* what, int32_t* out) {
  uint32_t v = 0;
  KILN_RETURN_IF_ERROR(rd_u32(r, what, &v));
  *out = (int32_t)v;
  return NULL;
}
static kiln_status_t rd_i64(rd_t* r, const char* what, int64_t* out) {
  uint64_t v = 0;
  KILN_RETURN_IF_ERROR(rd_u64(r, what, &v));
  *out = (int64_t)v;
  return NULL;
}

/* A u64 count of entries at least |min_entry| bytes each: capped by int32
 * (the program's counters) and by what the rest of the section can hold,
 * so a huge claim fails here, before any allocation. */
static kiln_status_t rd_count(rd_t* r, const char* what, size_t min_entry, int32_t* out) {
  uint64_t v;
  KILN_RETURN_IF_ERROR(rd_u64(r, what, &v));
  if (v > INT32_MAX)
    return rd_err(r, KILN_LIMIT_EXCEEDED, "%llu %s exceeds the limit of %d", (unsigned long long)v,
                  what, INT32_MAX);
  if (min_entry && v > r->left / min_entry)
    return rd_err(r, KILN_PARSE_ERROR, "claims %llu %s (at least %zu bytes each) but only %zu bytes remain",
                  (unsigned long long)v, what, min_entry, r->left);
  *out = (int32_t)v;
  return NULL;
}

/* Owned by |a|: a NUL-terminated copy of a length-prefixed string. */
static kiln_status_t rd_str(rd_t* r, kiln_allocator_t a, const char* what, char** out) {
  uint32_t n;
  KILN_RETURN_IF_ERROR(rd_u32(r, what, &n));
  if (n > KILN_MODULE_MAX_STRING)
    return rd_err(r, KILN_PARSE_ERROR, "%s is %u bytes, above the %u-byte limit", what, n,
                  KILN_MODULE_MAX_STRING);
  KILN_RETURN_IF_ERROR(need(r, n, what));
  if (n && memchr(r->p, 0, n)) return rd_err(r, KILN_PARSE_ERROR, "%s contains a NUL byte", what);
  void* m = NULL;
  KILN_RETURN_IF_ERROR(kiln_allocator_malloc(a, (size_t)n + 1, what, &m), "%s", r->name);
  memcpy(m, r->p, n);
  ((char*)m)[n] = 0;
  r->p += n;
  r->left -= n;
  *out = m;
  return NULL;
}

static kiln_status_t rd_alloc(rd_t* r, kiln_allocator_t a, size_t count, size_t elem,
                              const char* what, void** out) {
  /* count is bounded by the section size, so count * elem cannot overflow
   * on any host where the section fits in memory; check anyway. */
  if (elem && count > SIZE_MAX / elem)
    return rd_err(r, KILN_LIMIT_EXCEEDED, "%zu %s do not fit in memory", count, what);
  KILN_RETURN_IF_ERROR(kiln_allocator_malloc(a, count * elem, what, out), "%s", r->name);
  return NULL;
}

/* Formats 1 and 2 numbered the three targets kiln had then; the list is
 * frozen (newer files name their target). */
static const char* const v2_targets[] = {"cpu", "opencl", "vulkan"};

/* The program keeps the registry's copy of the name (static storage), so
 * a target this build lacks is refused here, by name. */
static kiln_status_t rd_meta(rd_t* r, kiln_program_t* p) {
  const char* name = NULL;
  char* read = NULL;
  if (r->version < 3) {
    uint32_t number;
    KILN_RETURN_IF_ERROR(rd_u32(r, "target", &number));
    if (number >= sizeof v2_targets / sizeof v2_targets[0])
      return rd_err(r, KILN_PARSE_ERROR, "unknown target number %u", number);
    name = v2_targets[number];
  } else {
    KILN_RETURN_IF_ERROR(rd_str(r, p->allocator, "target", &read));
    name = read;
  }
  const kiln_device_api_t* api = kiln_device_api_find(name);
  if (!api) {
    char names[256];
    kiln_status_t s = rd_err(r, KILN_UNSUPPORTED, "target '%.*s' is not built into this kiln (it has %s)",
                             KILN_TARGET_NAME_MAX, name, kiln_device_api_names("", names, sizeof names));
    kiln_allocator_free(p->allocator, read);
    return s;
  }
  kiln_allocator_free(p->allocator, read);
  p->target = api->name;
  KILN_RETURN_IF_ERROR(rd_str(r, p->allocator, "model name", &p->model_name));
  KILN_RETURN_IF_ERROR(rd_str(r, p->allocator, "precision", &p->precision));
  KILN_RETURN_IF_ERROR(rd_str(r, p->allocator, "options", &p->options));
  return NULL;
}

/* Smallest encodings, for the count checks. */
enum {
  MIN_BUFFER = 4 + 4 + 4 + 4 + 8 + 4 + 4 + 4 + 8,
  MIN_KERNEL = 3 * 4 + 8 + 8 * 8 + 4 + 4,
  MIN_ARG = 5,
  MIN_IO = 4 + 4,
  MIN_PART = 16,
  MIN_BLOB = 8,
};

static kiln_status_t rd_bufs(rd_t* r, kiln_program_t* p) {
  int32_t n;
  KILN_RETURN_IF_ERROR(rd_count(r, "buffers", MIN_BUFFER, &n));
  void* m = NULL;
  KILN_RETURN_IF_ERROR(rd_alloc(r, p->allocator, (size_t)n, sizeof(kiln_program_buffer_t), "buffers", &m));
  p->buffers = m;
  p->n_buffers = n;
  r->item = "buffer";
  for (int32_t i = 0; i < n; ++i) {
    kiln_program_buffer_t* b = &p->buffers[i];
    r->index = i;
    uint32_t dtype, kind;
    KILN_RETURN_IF_ERROR(rd_str(r, p->allocator, "name", &b->name));
    KILN_RETURN_IF_ERROR(rd_u32(r, "dtype", &dtype));
    KILN_RETURN_IF_ERROR(rd_u32(r, "kind", &kind));
    if (dtype >= KILN_DTYPE_COUNT_) return rd_err(r, KILN_PARSE_ERROR, "unknown dtype number %u", dtype);
    if (kind >= KILN_PB_KIND_COUNT_) return rd_err(r, KILN_PARSE_ERROR, "unknown kind number %u", kind);
    b->dtype = (kiln_dtype_t)dtype;
    b->kind = (kiln_program_buffer_kind_t)kind;
    KILN_RETURN_IF_ERROR(rd_i32(r, "rank", &b->rank));
    if (b->rank < 0 || b->rank > KILN_MAX_RANK)
      return rd_err(r, KILN_PARSE_ERROR, "rank %d is outside [0, %d]", b->rank, KILN_MAX_RANK);
    for (int32_t k = 0; k < b->rank; ++k) KILN_RETURN_IF_ERROR(rd_i64(r, "dim", &b->shape[k]));
    KILN_RETURN_IF_ERROR(rd_u64(r, "byte size", &b->bytes));
    KILN_RETURN_IF_ERROR(rd_i32(r, "alias", &b->alias_of));
    KILN_RETURN_IF_ERROR(rd_i32(r, "first use", &b->first_use));
    KILN_RETURN_IF_ERROR(rd_i32(r, "last use", &b->last_use));
    KILN_RETURN_IF_ERROR(rd_u64(r, "constant offset", &b->const_offset));
  }
  r->item = NULL;
  return NULL;
}

static kiln_status_t rd_kern(rd_t* r, kiln_program_t* p) {
  int32_t n;
  KILN_RETURN_IF_ERROR(rd_count(r, "kernels", MIN_KERNEL, &n));
  void* m = NULL;
  KILN_RETURN_IF_ERROR(rd_alloc(r, p->allocator, (size_t)n, sizeof(kiln_program_kernel_t), "kernels", &m));
  p->kernels = m;
  p->n_kernels = n;
  r->item = "kernel";
  for (int32_t k = 0; k < n; ++k) {
    kiln_program_kernel_t* kk = &p->kernels[k];
    r->index = k;
    KILN_RETURN_IF_ERROR(rd_str(r, p->allocator, "name", &kk->name));
    KILN_RETURN_IF_ERROR(rd_str(r, p->allocator, "node name", &kk->node_name));
    KILN_RETURN_IF_ERROR(rd_str(r, p->allocator, "op type", &kk->op_type));
    int32_t na;
    KILN_RETURN_IF_ERROR(rd_count(r, "arguments", MIN_ARG, &na));
    m = NULL;
    KILN_RETURN_IF_ERROR(rd_alloc(r, p->allocator, (size_t)na, sizeof(int32_t), "kernel arguments", &m));
    kk->args = m;
    m = NULL;
    KILN_RETURN_IF_ERROR(rd_alloc(r, p->allocator, (size_t)na, 1, "kernel argument access", &m));
    kk->access = m;
    kk->n_args = na;
    for (int32_t j = 0; j < na; ++j) {
      KILN_RETURN_IF_ERROR(rd_i32(r, "argument", &kk->args[j]));
      KILN_RETURN_IF_ERROR(rd_u8(r, "argument access", &kk->access[j]));
    }
    for (int d = 0; d < 3; ++d) KILN_RETURN_IF_ERROR(rd_i64(r, "groups", &kk->groups[d]));
    for (int d = 0; d < 3; ++d) KILN_RETURN_IF_ERROR(rd_i64(r, "local size", &kk->local[d]));
    KILN_RETURN_IF_ERROR(rd_i64(r, "flops", &kk->flops));
    KILN_RETURN_IF_ERROR(rd_i64(r, "bytes", &kk->bytes));
    KILN_RETURN_IF_ERROR(rd_i32(r, "in-place input", &kk->inplace_in));
    KILN_RETURN_IF_ERROR(rd_i32(r, "in-place output", &kk->inplace_out));
    kk->loop_trips = 0;
    if (r->version >= 2) KILN_RETURN_IF_ERROR(rd_i64(r, "loop trips", &kk->loop_trips));
  }
  r->item = NULL;
  return NULL;
}

enum { MIN_GEMM = 4 + 4 + 10 * 8 + 4 + 3 * 4 };

static kiln_status_t rd_gemm(rd_t* r, kiln_program_t* p) {
  int32_t n; /* kernels named must exist: a GEMM section before 'KERN' names none */
  KILN_RETURN_IF_ERROR(rd_count(r, "GEMM descriptors", MIN_GEMM, &n));
  r->item = "GEMM descriptor";
  for (int32_t i = 0; i < n; ++i) {
    r->index = i;
    int32_t k = -1;
    uint32_t flags = 0, alpha = 0;
    KILN_RETURN_IF_ERROR(rd_i32(r, "kernel", &k));
    if (k < 0 || k >= p->n_kernels || p->kernels[k].gemm.valid)
      return rd_err(r, KILN_PARSE_ERROR, "names kernel %d (%d kernels, or twice)", (int)k, (int)p->n_kernels);
    KILN_RETURN_IF_ERROR(rd_u32(r, "flags", &flags));
    if (flags & ~3u) return rd_err(r, KILN_PARSE_ERROR, "GEMM flags 0x%x unknown to this kiln", flags);
    kiln_program_gemm_t* g = &p->kernels[k].gemm;
    int64_t* v[10] = {&g->M, &g->N, &g->K, &g->batch, &g->lda, &g->ldb, &g->ldy, &g->sa, &g->sb, &g->sy};
    for (int j = 0; j < 10; ++j) KILN_RETURN_IF_ERROR(rd_i64(r, "GEMM size", v[j]));
    KILN_RETURN_IF_ERROR(rd_u32(r, "alpha", &alpha));
    memcpy(&g->alpha, &alpha, 4);
    KILN_RETURN_IF_ERROR(rd_i32(r, "A parameter", &g->a));
    KILN_RETURN_IF_ERROR(rd_i32(r, "B parameter", &g->b));
    KILN_RETURN_IF_ERROR(rd_i32(r, "Y parameter", &g->y));
    g->trans_a = flags & 1u;
    g->trans_b = (flags & 2u) != 0;
    g->valid = true; /* checked with the rest by kiln_program_validate */
  }
  r->item = NULL;
  return NULL;
}

/* A counted table of |elem|-byte entries (at least |min_entry| bytes each
 * in the file), zeroed, its entries then read as |item|. */
static kiln_status_t rd_table(rd_t* r, kiln_program_t* p, const char* what, const char* item, size_t min_entry,
                              size_t elem, void* out, int32_t* out_n) {
  KILN_RETURN_IF_ERROR(rd_count(r, what, min_entry, out_n));
  void* m = NULL;
  KILN_RETURN_IF_ERROR(rd_alloc(r, p->allocator, (size_t)*out_n, elem, what, &m));
  memset(m, 0, elem * (size_t)*out_n);
  *(void**)out = m;
  r->item = item;
  return NULL;
}

enum { MIN_PLUG = 4 + 4 + 4 };

static kiln_status_t rd_plug(rd_t* r, kiln_program_t* p) {
  int32_t n;
  KILN_RETURN_IF_ERROR(rd_table(r, p, "plugin ops", "plugin op", MIN_PLUG, sizeof(kiln_program_plugin_op_t),
                                &p->plugin_ops, &n));
  p->n_plugin_ops = n;
  for (int32_t i = 0; i < n; ++i) {
    r->index = i;
    kiln_program_plugin_op_t* po = &p->plugin_ops[i];
    KILN_RETURN_IF_ERROR(rd_str(r, p->allocator, "domain", &po->domain));
    KILN_RETURN_IF_ERROR(rd_str(r, p->allocator, "name", &po->name));
    KILN_RETURN_IF_ERROR(rd_i32(r, "version", &po->version));
    if (!po->domain[0] || !po->name[0] || po->version < 1)
      return rd_err(r, KILN_PARSE_ERROR, "'%s/%s' version %d is not a plugin op", po->domain, po->name,
                    (int)po->version);
  }
  r->item = NULL;
  return NULL;
}

static kiln_status_t rd_dyna(rd_t* r, kiln_program_t* p) {
  int32_t n;
  KILN_RETURN_IF_ERROR(rd_table(r, p, "dynamic dim axes", "axis", 4, sizeof(int32_t), &p->dim_axis, &n));
  if (n != p->n_inputs + p->n_outputs)
    return rd_err(r, KILN_PARSE_ERROR, "%d axes for %d inputs and outputs", (int)n, (int)(p->n_inputs + p->n_outputs));
  for (int32_t i = 0; i < n; ++i) {
    r->index = i;
    KILN_RETURN_IF_ERROR(rd_i32(r, "axis", &p->dim_axis[i])); /* checked by kiln_program_validate */
  }
  r->item = NULL;
  return NULL;
}

/* 'DYNM' comes after 'BUFS': one size polynomial per buffer. */
static kiln_status_t rd_dynm(rd_t* r, kiln_program_t* p) {
  int32_t n;
  KILN_RETURN_IF_ERROR(rd_table(r, p, "sizes", "buffer", 24, 3 * sizeof(int64_t), &p->dim_bytes, &n));
  if (n != p->n_buffers || !p->buffers)
    return rd_err(r, KILN_PARSE_ERROR, "%d sizes for %d buffers", (int)n, (int)p->n_buffers);
  for (int32_t i = 0; i < 3 * n; ++i) {
    r->index = i / 3;
    KILN_RETURN_IF_ERROR(rd_i64(r, "size", &p->dim_bytes[i])); /* kiln_program_validate */
  }
  r->item = NULL;
  return NULL;
}

enum { MIN_DYNS = 4 + 8 + 8 };

static kiln_status_t rd_dyns(rd_t* r, kiln_program_t* p) {
  int32_t n;
  KILN_RETURN_IF_ERROR(
      rd_table(r, p, "dynamic dims", "dynamic dim", MIN_DYNS, sizeof(kiln_program_dim_t), &p->dims, &n));
  p->n_dims = n;
  for (int32_t i = 0; i < n; ++i) {
    r->index = i;
    KILN_RETURN_IF_ERROR(rd_str(r, p->allocator, "name", &p->dims[i].name));
    KILN_RETURN_IF_ERROR(rd_i64(r, "lo", &p->dims[i].lo));
    KILN_RETURN_IF_ERROR(rd_i64(r, "hi", &p->dims[i].hi)); /* the range: kiln_program_validate */
  }
  r->item = NULL;
  return NULL;
}

enum { MIN_TUNE = 4 + 4 };

/* 'TUNE' comes after 'KERN' in every file kiln writes: the kernels it
 * names must exist. */
static kiln_status_t rd_tune(rd_t* r, kiln_program_t* p) {
  int32_t n;
  KILN_RETURN_IF_ERROR(rd_count(r, "tuned points", MIN_TUNE, &n));
  r->item = "tuned point";
  for (int32_t i = 0; i < n; ++i) {
    r->index = i;
    int32_t k = -1;
    KILN_RETURN_IF_ERROR(rd_i32(r, "kernel", &k));
    if (k < 0 || k >= p->n_kernels || !p->kernels)
      return rd_err(r, KILN_PARSE_ERROR, "kernel %d of %d (the section must follow 'KERN')", (int)k, (int)p->n_kernels);
    if (p->kernels[k].tuned) return rd_err(r, KILN_PARSE_ERROR, "kernel %d appears twice", (int)k);
    KILN_RETURN_IF_ERROR(rd_str(r, p->allocator, "point", &p->kernels[k].tuned));
  }
  r->item = NULL;
  return NULL;
}

static kiln_status_t rd_io_list(rd_t* r, kiln_program_t* p, const char* what, int32_t* out_n,
                                int32_t** out_idx, char*** out_names) {
  int32_t n;
  KILN_RETURN_IF_ERROR(rd_count(r, what, MIN_IO, &n));
  void* idx = NULL;
  void* names = NULL;
  KILN_RETURN_IF_ERROR(rd_alloc(r, p->allocator, (size_t)n, sizeof(int32_t), what, &idx));
  kiln_status_t st = rd_alloc(r, p->allocator, (size_t)n, sizeof(char*), what, &names);
  if (st) {
    kiln_allocator_free(p->allocator, idx);
    return st;
  }
  *out_idx = idx;
  *out_names = names;
  *out_n = n;
  r->item = what[0] == 'i' ? "input" : "output";
  for (int32_t i = 0; i < n; ++i) {
    r->index = i;
    KILN_RETURN_IF_ERROR(rd_i32(r, "buffer", &(*out_idx)[i]));
    KILN_RETURN_IF_ERROR(rd_str(r, p->allocator, "name", &(*out_names)[i]));
  }
  r->item = NULL;
  return NULL;
}

static kiln_status_t rd_io(rd_t* r, kiln_program_t* p) {
  KILN_RETURN_IF_ERROR(rd_io_list(r, p, "inputs", &p->n_inputs, &p->inputs, &p->input_names));
  KILN_RETURN_IF_ERROR(rd_io_list(r, p, "outputs", &p->n_outputs, &p->outputs, &p->output_names));
  return NULL;
}

static kiln_status_t rd_wght(rd_t* r, kiln_program_t* p) {
  uint64_t len;
  uint32_t pad, reserved;
  KILN_RETURN_IF_ERROR(rd_u64(r, "weights length", &len));
  KILN_RETURN_IF_ERROR(rd_u32(r, "weights padding", &pad));
  KILN_RETURN_IF_ERROR(rd_u32(r, "reserved word", &reserved));
  if (pad >= KILN_MODULE_WEIGHTS_ALIGN || reserved != 0)
    return rd_err(r, KILN_PARSE_ERROR, "bad weights padding %u / reserved word %u", pad, reserved);
  KILN_RETURN_IF_ERROR(need(r, pad, "weights padding"));
  r->p += pad;
  r->left -= pad;
  if (len != r->left)
    return rd_err(r, KILN_PARSE_ERROR, "weights claim %llu bytes, section holds %zu",
                  (unsigned long long)len, r->left);
  if (len && r->borrow) {
    /* In place: the caller keeps the bytes mapped, read-only, for the
     * program's life (kiln_module_parse_borrowing). */
    p->weights = (uint8_t*)(uintptr_t)r->p;
    p->weights_borrowed = true;
    p->weights_len = len;
  } else if (len) {
    void* m = NULL;
    KILN_RETURN_IF_ERROR(rd_alloc(r, p->allocator, (size_t)len, 1, "weights", &m));
    memcpy(m, r->p, (size_t)len);
    p->weights = m;
    p->weights_len = len;
  }
  r->p += len;
  r->left -= (size_t)len;
  return NULL;
}

static kiln_status_t rd_code_into(rd_t* r, kiln_program_t* p, kiln_program_code_t* c) {
  uint64_t tl;
  KILN_RETURN_IF_ERROR(rd_u64(r, "code text length", &tl));
  if (tl > r->left)
    return rd_err(r, KILN_PARSE_ERROR, "code text claims %llu bytes, %zu left", (unsigned long long)tl,
                  r->left);
  if (tl && memchr(r->p, 0, (size_t)tl)) return rd_err(r, KILN_PARSE_ERROR, "code text contains a NUL byte");
  if (tl) {
    void* m = NULL;
    KILN_RETURN_IF_ERROR(rd_alloc(r, p->allocator, (size_t)tl + 1, 1, "code text", &m));
    memcpy(m, r->p, (size_t)tl);
    ((char*)m)[tl] = 0;
    c->text = m;
    c->text_len = tl;
    r->p += tl;
    r->left -= (size_t)tl;
  }
  int32_t np;
  KILN_RETURN_IF_ERROR(rd_count(r, "code parts", MIN_PART, &np));
  void* m = NULL;
  KILN_RETURN_IF_ERROR(rd_alloc(r, p->allocator, 2 * (size_t)np, sizeof(uint64_t), "code parts", &m));
  c->parts = m;
  c->n_parts = np;
  for (int32_t i = 0; i < 2 * np; ++i) KILN_RETURN_IF_ERROR(rd_u64(r, "code part", &c->parts[i]));

  int32_t nb;
  KILN_RETURN_IF_ERROR(rd_count(r, "code blobs", MIN_BLOB, &nb));
  void* blobs = NULL;
  void* lens = NULL;
  KILN_RETURN_IF_ERROR(rd_alloc(r, p->allocator, (size_t)nb, sizeof(uint8_t*), "code blobs", &blobs));
  kiln_status_t st = rd_alloc(r, p->allocator, (size_t)nb, sizeof(uint64_t), "code blob lengths", &lens);
  if (st) {
    kiln_allocator_free(p->allocator, blobs);
    return st;
  }
  c->blobs = blobs;
  c->blob_lens = lens;
  c->n_blobs = nb;
  r->item = "code blob";
  for (int32_t i = 0; i < nb; ++i) {
    r->index = i;
    uint64_t bl;
    KILN_RETURN_IF_ERROR(rd_u64(r, "length", &bl));
    if (bl > r->left)
      return rd_err(r, KILN_PARSE_ERROR, "claims %llu bytes, %zu left", (unsigned long long)bl, r->left);
    if (bl) {
      m = NULL;
      KILN_RETURN_IF_ERROR(rd_alloc(r, p->allocator, (size_t)bl, 1, "code blob", &m));
      memcpy(m, r->p, (size_t)bl);
      c->blobs[i] = m;
      c->blob_lens[i] = bl;
      r->p += bl;
      r->left -= (size_t)bl;
    }
  }
  r->item = NULL;
  return NULL;
}

static kiln_status_t rd_code(rd_t* r, kiln_program_t* p) { return rd_code_into(r, p, &p->code); }

/* Read after KERN (sections come in the order the writer puts them). */
static kiln_status_t rd_host(rd_t* r, kiln_program_t* p) {
  uint64_t n;
  KILN_RETURN_IF_ERROR(rd_u64(r, "kernel count", &n));
  if (n != (uint64_t)p->n_kernels)
    return rd_err(r, KILN_PARSE_ERROR, "places %llu kernels, the module has %d", (unsigned long long)n,
                  (int)p->n_kernels);
  for (int32_t k = 0; k < p->n_kernels; ++k) KILN_RETURN_IF_ERROR(rd_u8(r, "kernel device", &p->kernels[k].device));
  size_t pad = (8 - (size_t)n % 8) % 8;
  KILN_RETURN_IF_ERROR(need(r, pad, "padding"));
  r->p += pad;
  r->left -= pad;
  return rd_code_into(r, p, &p->host_code);
}

enum { MIN_NATIVE = 4 + 1 + 8 };

/* A u64 length and that many bytes (at least one), copied; |what| and
 * |owner| name it in errors ("'x86-64-v3' object claims ..."). */
static kiln_status_t rd_blob(rd_t* r, kiln_program_t* p, const char* what, const char* owner, uint8_t** out,
                             uint64_t* out_len) {
  uint64_t len;
  KILN_RETURN_IF_ERROR(rd_u64(r, "length", &len));
  if (len == 0 || len > r->left)
    return rd_err(r, KILN_PARSE_ERROR, "'%s' %s claims %llu bytes, %zu left", owner, what, (unsigned long long)len,
                  r->left);
  void* m = NULL;
  KILN_RETURN_IF_ERROR(rd_alloc(r, p->allocator, (size_t)len, 1, what, &m));
  memcpy(m, r->p, (size_t)len);
  *out = m;
  *out_len = len;
  r->p += len;
  r->left -= (size_t)len;
  return NULL;
}

/* The objects are copied as they are: whether one is a loadable ELF for
 * this CPU is the CPU device's question (runtime/cpu/cpu_native.c), asked
 * before anything is mapped. */
static kiln_status_t rd_natv(rd_t* r, kiln_program_t* p) {
  kiln_program_code_t* c = &p->code;
  KILN_RETURN_IF_ERROR(rd_table(r, p, "native code objects", "native code object", MIN_NATIVE,
                                sizeof(kiln_program_native_t), &c->native, &c->n_native));
  for (int32_t i = 0; i < c->n_native; ++i) {
    kiln_program_native_t* nv = &c->native[i];
    r->index = i;
    KILN_RETURN_IF_ERROR(rd_str(r, p->allocator, "ISA name", &nv->isa));
    size_t il = strlen(nv->isa);
    if (il == 0 || il > KILN_MODULE_MAX_ISA_NAME)
      return rd_err(r, KILN_PARSE_ERROR, "ISA name of %zu bytes (1..%d)", il, KILN_MODULE_MAX_ISA_NAME);
    KILN_RETURN_IF_ERROR(rd_blob(r, p, "object", nv->isa, &nv->bytes, &nv->len));
  }
  r->item = NULL;
  return NULL;
}

enum { MIN_DEVBIN = 4 * 4 + 8 + 8 + 1 };

/* Copied as they are: whether the driver takes a binary is the device's
 * question at load (it falls back to the source when not). */
static kiln_status_t rd_dbin(rd_t* r, kiln_program_t* p) {
  kiln_program_code_t* c = &p->code;
  KILN_RETURN_IF_ERROR(rd_table(r, p, "device binaries", "device binary", MIN_DEVBIN, sizeof(kiln_program_devbin_t),
                                &c->devbin, &c->n_devbin));
  for (int32_t i = 0; i < c->n_devbin; ++i) {
    kiln_program_devbin_t* b = &c->devbin[i];
    r->index = i;
    KILN_RETURN_IF_ERROR(rd_str(r, p->allocator, "device name", &b->device));
    KILN_RETURN_IF_ERROR(rd_str(r, p->allocator, "vendor", &b->vendor));
    KILN_RETURN_IF_ERROR(rd_str(r, p->allocator, "driver version", &b->driver));
    KILN_RETURN_IF_ERROR(rd_str(r, p->allocator, "kiln version", &b->kiln));
    if (!b->device[0]) return rd_err(r, KILN_PARSE_ERROR, "empty device name");
    KILN_RETURN_IF_ERROR(rd_u64(r, "source checksum", &b->source_crc));
    KILN_RETURN_IF_ERROR(rd_blob(r, p, "binary", b->device, &b->bytes, &b->len));
  }
  r->item = NULL;
  return NULL;
}

enum { MIN_BUCKET = 16 + KILN_MODULE_HEADER_LEN };

static kiln_status_t parse_module(const void* data, size_t size, const char* name, bool borrow,
                                  const kiln_program_t* weights_of, kiln_allocator_t a, kiln_program_t** out_program);

/* A module image inside a section (put_image): its length, the image
 * parsed (and validated) as a module of its own named |name| (its weights
 * |weights_of|'s where it was stored without), with *depth counted up
 * while it is, then its padding. */
static kiln_status_t rd_image(rd_t* r, const char* name, const kiln_program_t* weights_of, kiln_allocator_t a,
                              int* depth, kiln_program_t** out) {
  uint64_t len;
  KILN_RETURN_IF_ERROR(rd_u64(r, "length", &len));
  if (len < MIN_BUCKET || len > r->left)
    return rd_err(r, KILN_PARSE_ERROR, "claims a %llu-byte module image, %zu bytes left", (unsigned long long)len,
                  r->left);
  ++*depth;
  kiln_status_t st = parse_module(r->p, (size_t)len, name, r->borrow, weights_of, a, out);
  --*depth;
  KILN_RETURN_IF_ERROR(st);
  size_t pad = (size_t)len + (8 - (size_t)len % 8) % 8;
  if (pad > r->left) return rd_err(r, KILN_PARSE_ERROR, "padding runs past the section");
  r->p += pad;
  r->left -= pad;
  return NULL;
}

/* Each bucket's image is parsed (and validated) as a module of its own;
 * kiln_program_validate then checks that the buckets fit together. */
static _Thread_local int bucket_depth; /* a bucket's image inside a bucket's image: refused, not recursed into */

static kiln_status_t rd_buck(rd_t* r, kiln_program_t* p) {
  if (bucket_depth) return rd_err(r, KILN_PARSE_ERROR, "a shape bucket's module has shape buckets of its own");
  KILN_RETURN_IF_ERROR(rd_str(r, p->allocator, "bucketed dim name", &p->bucket_dim));
  int32_t n;
  KILN_RETURN_IF_ERROR(rd_count(r, "shape buckets", 8, &n));
  if (n < 2 || n > KILN_PROGRAM_MAX_BUCKETS)
    return rd_err(r, KILN_PARSE_ERROR, "%d shape buckets (needs 2..%d)", (int)n, KILN_PROGRAM_MAX_BUCKETS);
  void* m = NULL;
  KILN_RETURN_IF_ERROR(rd_alloc(r, p->allocator, (size_t)n, sizeof(int64_t), "bucket sizes", &m));
  p->bucket_values = m;
  KILN_RETURN_IF_ERROR(rd_alloc(r, p->allocator, (size_t)n - 1, sizeof(kiln_program_t*), "bucket programs", &m));
  memset(m, 0, sizeof(kiln_program_t*) * ((size_t)n - 1));
  p->buckets = m;
  p->n_buckets = n; /* the programs are freed with it from here on */
  for (int32_t k = 0; k < n; ++k) KILN_RETURN_IF_ERROR(rd_i64(r, "bucket size", &p->bucket_values[k]));
  r->item = "bucket";
  for (int32_t k = 1; k < n; ++k) {
    r->index = k;
    uint64_t flags;
    KILN_RETURN_IF_ERROR(rd_u64(r, "flags", &flags));
    if (flags > 1) return rd_err(r, KILN_PARSE_ERROR, "flags 0x%llx unknown to this kiln", (unsigned long long)flags);
    char name[160];
    snprintf(name, sizeof name, "%s (bucket %s=%lld)", r->name, p->bucket_dim, (long long)p->bucket_values[k]);
    KILN_RETURN_IF_ERROR(rd_image(r, name, flags ? p : NULL, p->allocator, &bucket_depth, &p->buckets[k - 1]));
  }
  r->item = NULL;
  return NULL;
}

/* Section STGS: read as written (put_staged); the ids, counts and the
 * stages' fit are checked after by kiln_program_validate_staged. A stage's
 * image is parsed as a module of its own, named after the segment. */
static _Thread_local int staged_depth; /* a stage's image with stages of its own: refused, not recursed into */

static kiln_status_t rd_ids(rd_t* r, kiln_program_t* p, const char* what, int32_t want, int32_t* n_out,
                            int32_t** out) {
  int32_t n;
  KILN_RETURN_IF_ERROR(rd_count(r, what, 4, &n));
  if (want >= 0 && n != want) return rd_err(r, KILN_PARSE_ERROR, "%d %s for the model's %d", (int)n, what, (int)want);
  if (n > KILN_STAGED_MAX_IO && want < 0) return rd_err(r, KILN_PARSE_ERROR, "%d %s (at most %d)", (int)n, what, KILN_STAGED_MAX_IO);
  void* m = NULL;
  KILN_RETURN_IF_ERROR(rd_alloc(r, p->allocator, (size_t)n + 1, sizeof(int32_t), what, &m));
  *out = m;
  if (n_out) *n_out = n;
  for (int32_t k = 0; k < n; ++k) KILN_RETURN_IF_ERROR(rd_i32(r, "value id", &(*out)[k]));
  return NULL;
}

static kiln_status_t rd_value(rd_t* r, kiln_program_t* p, kiln_staged_value_t* v) {
  uint32_t dtype;
  uint8_t is_const;
  KILN_RETURN_IF_ERROR(rd_u32(r, "dtype", &dtype));
  v->dtype = (kiln_dtype_t)dtype;
  KILN_RETURN_IF_ERROR(rd_i32(r, "rank", &v->rank));
  if (v->rank < 0 || v->rank > KILN_MAX_RANK) return rd_err(r, KILN_PARSE_ERROR, "rank %d", (int)v->rank);
  KILN_RETURN_IF_ERROR(rd_u32(r, "data-dependent axes", &v->datadep));
  for (int32_t d = 0; d < v->rank; ++d) KILN_RETURN_IF_ERROR(rd_i64(r, "size", &v->dims[d]));
  KILN_RETURN_IF_ERROR(rd_u8(r, "constant flag", &is_const));
  if (is_const > 1) return rd_err(r, KILN_PARSE_ERROR, "constant flag %u", is_const);
  if (!is_const) return NULL;
  KILN_RETURN_IF_ERROR(rd_u64(r, "constant length", &v->nbytes));
  if (v->nbytes > r->left)
    return rd_err(r, KILN_PARSE_ERROR, "a %llu-byte constant, %zu bytes left", (unsigned long long)v->nbytes, r->left);
  void* m = NULL;
  KILN_RETURN_IF_ERROR(rd_alloc(r, p->allocator, (size_t)v->nbytes + 1, 1, "staged constant", &m));
  memcpy(m, r->p, (size_t)v->nbytes);
  v->data = m;
  r->p += v->nbytes;
  r->left -= (size_t)v->nbytes;
  return NULL;
}

static kiln_status_t rd_stage_image(rd_t* r, kiln_program_t* p, kiln_staged_segment_t* g, int32_t i) {
  char name[200];
  snprintf(name, sizeof name, "%s (section 'STGS': segment %d '%.60s')", r->name, (int)i, g->name);
  return rd_image(r, name, NULL, p->allocator, &staged_depth, &g->prog);
}

static kiln_status_t rd_stgs(rd_t* r, kiln_program_t* p) {
  if (staged_depth) return rd_err(r, KILN_PARSE_ERROR, "a stage's module has stages of its own");
  if (p->n_outputs < 1) return rd_err(r, KILN_PARSE_ERROR, "comes before section 'IO  '");
  void* m = NULL;
  KILN_RETURN_IF_ERROR(rd_alloc(r, p->allocator, 1, sizeof(kiln_program_staged_t), "staged table", &m));
  memset(m, 0, sizeof(kiln_program_staged_t));
  kiln_program_staged_t* t = p->staged = m;
  int32_t n;
  KILN_RETURN_IF_ERROR(rd_count(r, "staged values", 13, &n));
  if (n < 1 || n > KILN_STAGED_MAX_VALUES) return rd_err(r, KILN_PARSE_ERROR, "%d values (needs 1..%d)", (int)n, KILN_STAGED_MAX_VALUES);
  KILN_RETURN_IF_ERROR(rd_alloc(r, p->allocator, (size_t)n, sizeof(kiln_staged_value_t), "staged values", &m));
  memset(m, 0, sizeof(kiln_staged_value_t) * (size_t)n);
  t->values = m;
  t->n_values = n;
  r->item = "value";
  for (int32_t i = 0; i < n; ++i) {
    r->index = i;
    KILN_RETURN_IF_ERROR(rd_value(r, p, &t->values[i]));
  }
  r->item = NULL;
  KILN_RETURN_IF_ERROR(rd_ids(r, p, "model inputs", p->n_inputs, NULL, &t->model_in));
  KILN_RETURN_IF_ERROR(rd_ids(r, p, "model outputs", p->n_outputs, NULL, &t->model_out));
  KILN_RETURN_IF_ERROR(rd_count(r, "staged segments", 32, &n));
  if (n < 1 || n > KILN_STAGED_MAX_SEGMENTS)
    return rd_err(r, KILN_PARSE_ERROR, "%d segments (needs 1..%d)", (int)n, KILN_STAGED_MAX_SEGMENTS);
  KILN_RETURN_IF_ERROR(rd_alloc(r, p->allocator, (size_t)n, sizeof(kiln_staged_segment_t), "staged segments", &m));
  memset(m, 0, sizeof(kiln_staged_segment_t) * (size_t)n);
  t->segments = m;
  t->n_segments = n;
  r->item = "segment";
  for (int32_t i = 0; i < n; ++i) {
    kiln_staged_segment_t* g = &t->segments[i];
    r->index = i;
    uint32_t op;
    KILN_RETURN_IF_ERROR(rd_u32(r, "op", &op));
    if (op >= KILN_STAGED_OP_COUNT_) return rd_err(r, KILN_PARSE_ERROR, "host op number %u unknown to this kiln", op);
    g->op = (int32_t)op;
    KILN_RETURN_IF_ERROR(rd_str(r, p->allocator, "segment name", &g->name));
    KILN_RETURN_IF_ERROR(rd_ids(r, p, "segment inputs", -1, &g->n_in, &g->in));
    KILN_RETURN_IF_ERROR(rd_ids(r, p, "segment outputs", -1, &g->n_out, &g->out));
    int32_t na;
    KILN_RETURN_IF_ERROR(rd_count(r, "attributes", 12, &na));
    if (na > KILN_STAGED_MAX_ATTRS) return rd_err(r, KILN_PARSE_ERROR, "%d attributes (at most %d)", (int)na, KILN_STAGED_MAX_ATTRS);
    KILN_RETURN_IF_ERROR(rd_alloc(r, p->allocator, (size_t)na + 1, sizeof(kiln_staged_attr_t), "attributes", &m));
    memset(m, 0, sizeof(kiln_staged_attr_t) * ((size_t)na + 1));
    g->attrs = m;
    g->n_attrs = na;
    for (int32_t k = 0; k < na; ++k) {
      KILN_RETURN_IF_ERROR(rd_str(r, p->allocator, "attribute name", &g->attrs[k].name));
      KILN_RETURN_IF_ERROR(rd_i64(r, "attribute value", &g->attrs[k].value));
    }
    if (op == KILN_STAGED_STAGE) KILN_RETURN_IF_ERROR(rd_stage_image(r, p, g, i));
  }
  r->item = NULL;
  return NULL;
}

typedef kiln_status_t (*section_fn)(rd_t* r, kiln_program_t* p);

static const struct {
  uint32_t tag;
  section_fn fn;
} known_sections[] = {
    {KILN_MODULE_TAG_META, rd_meta}, {KILN_MODULE_TAG_BUFS, rd_bufs}, {KILN_MODULE_TAG_KERN, rd_kern},
    {KILN_MODULE_TAG_IO, rd_io},     {KILN_MODULE_TAG_WGHT, rd_wght}, {KILN_MODULE_TAG_CODE, rd_code},
    {KILN_MODULE_TAG_GEMM, rd_gemm}, {KILN_MODULE_TAG_PLUG, rd_plug}, {KILN_MODULE_TAG_NATV, rd_natv},
    {KILN_MODULE_TAG_DYNS, rd_dyns}, {KILN_MODULE_TAG_TUNE, rd_tune},
    {KILN_MODULE_TAG_HOST, rd_host}, {KILN_MODULE_TAG_DBIN, rd_dbin}, {KILN_MODULE_TAG_BUCK, rd_buck},
    {KILN_MODULE_TAG_STGS, rd_stgs}, {KILN_MODULE_TAG_DYNA, rd_dyna}, {KILN_MODULE_TAG_DYNM, rd_dynm},
};
enum { N_KNOWN = sizeof known_sections / sizeof known_sections[0] };

static kiln_status_t perr(const char* name, kiln_status_code_t code, const char* fmt, ...)
    KILN_PRINTF(3, 4);
static kiln_status_t perr(const char* name, kiln_status_code_t code, const char* fmt, ...) {
  char msg[256];
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(msg, sizeof msg, fmt, ap);
  va_end(ap);
  return kiln_make_status(code, "%s: %s", name, msg);
}

/* Everything about the header, before any section is looked at. */
static kiln_status_t check_header(const uint8_t* d, size_t size, const char* name, uint32_t* out_sections,
                                  uint32_t* out_version) {
  if (size == 0) return perr(name, KILN_PARSE_ERROR, "not a kiln module: the file is empty");
  if (size < KILN_MODULE_HEADER_LEN && memcmp(d, KILN_MODULE_MAGIC, size < 8 ? size : 8) != 0)
    return perr(name, KILN_PARSE_ERROR, "not a kiln module (bad magic)");
  if (size < KILN_MODULE_HEADER_LEN)
    return perr(name, KILN_PARSE_ERROR, "truncated: %zu bytes, shorter than the %d-byte module header",
                size, KILN_MODULE_HEADER_LEN);
  if (memcmp(d, KILN_MODULE_MAGIC, KILN_MODULE_MAGIC_LEN) != 0)
    return perr(name, KILN_PARSE_ERROR, "not a kiln module (bad magic)");
  /* The version comes before the header checksum: a newer kiln may lay its
   * header out differently, and "too new" is the useful message then. */
  uint32_t version = load_le32(d + KILN_MODULE_OFF_VERSION);
  if (version > KILN_MODULE_FORMAT_VERSION)
    return perr(name, KILN_PARSE_ERROR, "module format version %u, this kiln reads up to %d", version,
                KILN_MODULE_FORMAT_VERSION);
  if (version == 0) return perr(name, KILN_PARSE_ERROR, "module format version 0 is invalid");
  uint64_t hsum = load_le64(d + KILN_MODULE_OFF_HEADER_SUM);
  if (kiln_module_crc64(0, d, KILN_MODULE_OFF_HEADER_SUM) != hsum)
    return perr(name, KILN_PARSE_ERROR, "header checksum mismatch (file corrupt)");
  uint32_t flags = load_le32(d + KILN_MODULE_OFF_FLAGS);
  if (flags != 0) return perr(name, KILN_PARSE_ERROR, "unknown header flags 0x%x", flags);
  uint32_t hlen = load_le32(d + KILN_MODULE_OFF_HEADER_LEN);
  if (hlen != KILN_MODULE_HEADER_LEN)
    return perr(name, KILN_PARSE_ERROR, "header length %u, expected %d", hlen, KILN_MODULE_HEADER_LEN);
  uint64_t total = load_le64(d + KILN_MODULE_OFF_TOTAL_LEN);
  if (total != size)
    return perr(name, KILN_PARSE_ERROR, "%s: the file is %zu bytes but its header says %llu",
                total > size ? "truncated" : "trailing bytes", size, (unsigned long long)total);
  uint64_t bsum = load_le64(d + KILN_MODULE_OFF_BODY_SUM);
  if (kiln_module_crc64(0, d + KILN_MODULE_HEADER_LEN, size - KILN_MODULE_HEADER_LEN) != bsum)
    return perr(name, KILN_PARSE_ERROR, "checksum mismatch (file corrupt or truncated)");
  uint32_t sections = load_le32(d + KILN_MODULE_OFF_SECTIONS);
  if (sections > (size - KILN_MODULE_HEADER_LEN) / 16)
    return perr(name, KILN_PARSE_ERROR, "header claims %u sections, the file can hold at most %zu",
                sections, (size - KILN_MODULE_HEADER_LEN) / 16);
  *out_sections = sections;
  *out_version = version;
  return NULL;
}

static kiln_status_t parse_sections(const uint8_t* d, size_t size, const char* name, uint32_t n_sections,
                                    uint32_t version, bool borrow, kiln_program_t* p) {
  bool seen[N_KNOWN] = {false};
  size_t off = KILN_MODULE_HEADER_LEN;
  for (uint32_t s = 0; s < n_sections; ++s) {
    if (size - off < 16)
      return perr(name, KILN_PARSE_ERROR, "section %u of %u starts past the end of the file", s, n_sections);
    uint32_t tag = load_le32(d + off), flags = load_le32(d + off + 4);
    uint64_t len = load_le64(d + off + 8);
    rd_t r = {.name = name, .version = version, .borrow = borrow};
    tag_text(tag, r.section);
    if (len > size - off - 16)
      return rd_err(&r, KILN_PARSE_ERROR, "payload of %llu bytes runs past the end of the file",
                    (unsigned long long)len);
    size_t next = off + 16 + (size_t)len;
    size_t padded = next + (8 - next % 8) % 8;
    if (padded > size) return rd_err(&r, KILN_PARSE_ERROR, "padding runs past the end of the file");
    r.p = d + off + 16;
    r.left = (size_t)len;
    int known = -1;
    for (int k = 0; k < N_KNOWN; ++k)
      if (known_sections[k].tag == tag) known = k;
    if (known < 0) {
      if (flags & KILN_MODULE_SECTION_REQUIRED)
        return rd_err(&r, KILN_PARSE_ERROR,
                      "required section unknown to this kiln (written by a newer kiln?)");
    } else {
      if (flags & ~KILN_MODULE_SECTION_REQUIRED)
        return rd_err(&r, KILN_PARSE_ERROR, "section flags 0x%x unknown to this kiln", flags);
      if (seen[known]) return rd_err(&r, KILN_PARSE_ERROR, "appears twice");
      seen[known] = true;
      KILN_RETURN_IF_ERROR(known_sections[known].fn(&r, p));
      if (r.left) return rd_err(&r, KILN_PARSE_ERROR, "%zu unexpected bytes at its end", r.left);
    }
    off = padded;
  }
  if (off != size)
    return perr(name, KILN_PARSE_ERROR, "%zu bytes after the last of %u sections", size - off, n_sections);
  for (int k = 0; k < N_KNOWN; ++k)
    if (!seen[k] && known_sections[k].tag != KILN_MODULE_TAG_GEMM && known_sections[k].tag != KILN_MODULE_TAG_PLUG &&
        known_sections[k].tag != KILN_MODULE_TAG_NATV && known_sections[k].tag != KILN_MODULE_TAG_DYNS &&
        known_sections[k].tag != KILN_MODULE_TAG_TUNE &&
        known_sections[k].tag != KILN_MODULE_TAG_HOST && known_sections[k].tag != KILN_MODULE_TAG_DBIN &&
        known_sections[k].tag != KILN_MODULE_TAG_BUCK && known_sections[k].tag != KILN_MODULE_TAG_STGS &&
        known_sections[k].tag != KILN_MODULE_TAG_DYNA && known_sections[k].tag != KILN_MODULE_TAG_DYNM) {
      char t[8];
      tag_text(known_sections[k].tag, t);
      return perr(name, KILN_PARSE_ERROR, "section '%s' is missing", t);
    }
  return NULL;
}

/* |weights_of|: a bucket's image stored without weights (section BUCK,
 * flag 1) takes that program's, borrowed: the bucket program is owned and
 * destroyed by it. */
static kiln_status_t parse_module(const void* data, size_t size, const char* name, bool borrow,
                                  const kiln_program_t* weights_of, kiln_allocator_t a, kiln_program_t** out_program) {
  if (!name || !name[0]) name = "module";
  if (!out_program) return kiln_make_status(KILN_INVALID_ARGUMENT, "%s: NULL out_program", name);
  if (!data && size) return kiln_make_status(KILN_INVALID_ARGUMENT, "%s: NULL data", name);
  const uint8_t* d = data;
  uint32_t n_sections = 0;
  uint32_t version = 0;
  KILN_RETURN_IF_ERROR(check_header(d, size, name, &n_sections, &version));
  kiln_program_t* p = NULL;
  KILN_RETURN_IF_ERROR(kiln_program_create(a, &p), "%s", name);
  kiln_status_t st = parse_sections(d, size, name, n_sections, version, borrow, p);
  if (!st && weights_of && p->weights_len)
    st = kiln_make_status(KILN_PARSE_ERROR, "%s: has weights of its own but says it shares the first bucket's", name);
  if (!st && weights_of && weights_of->weights_len) {
    p->weights = weights_of->weights;
    p->weights_len = weights_of->weights_len;
    p->weights_borrowed = true;
  }
  if (!st) {
    st = kiln_program_validate(p);
    if (st) st = kiln_status_annotate(st, "%s", name);
  }
  if (st) {
    kiln_program_destroy(p);
    return st;
  }
  *out_program = p;
  return NULL;
}

kiln_status_t kiln_module_parse(const void* data, size_t size, const char* name, kiln_allocator_t a,
                                kiln_program_t** out_program) {
  return parse_module(data, size, name, false, NULL, a, out_program);
}

kiln_status_t kiln_module_parse_borrowing(const void* data, size_t size, const char* name, kiln_allocator_t a,
                                          kiln_program_t** out_program) {
  return parse_module(data, size, name, true, NULL, a, out_program);
}
