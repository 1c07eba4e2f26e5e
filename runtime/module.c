/* kiln modules: the public "modules" API of include/kiln/runtime.h.
 *
 * A module owns one validated program (runtime/program.h) read from a .kiln
 * file (runtime/module_file.h) or handed over by the compiler
 * (kiln_module_wrap). A file is mapped read-only and checked whole before
 * anything in it is used (the checksum, and the signature when asked for,
 * cover every byte); the weights then stay where they lie in the mapping,
 * so loading a model costs one pass over its bytes (the checksum) instead
 * of a read, a copy into the program and another into the session.
 */
#include <errno.h>
#include <fcntl.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include "runtime/module_file.h"
#include "runtime/module_impl.h"
#include "runtime/plugin.h"
#include "runtime/module_sign.h"

/* Files above this are refused before reading (the format's lengths are
 * 64-bit, but no kiln model needs more and a bad path should not make us
 * try to read a disk image into memory). */
#define MAX_MODULE_FILE_BYTES (4ull << 30)

static kiln_status_t make_module(kiln_program_t* p, kiln_allocator_t a, uint32_t version,
                                 size_t file_bytes, kiln_module_t** out) {
  void* m = NULL;
  kiln_status_t st = kiln_allocator_malloc(a, sizeof(kiln_module_t), "module", &m);
  if (st) {
    kiln_program_destroy(p);
    return st;
  }
  kiln_module_t* mod = m;
  atomic_init(&mod->refs, 1);
  mod->allocator = a;
  mod->program = p;
  mod->format_version = version;
  mod->file_bytes = file_bytes;
  mod->signer_key_id[0] = 0;
  mod->signature_verified = false;
  mod->parent = NULL;
  mod->map = NULL;
  mod->map_len = 0;
  *out = mod;
  return NULL;
}

const kiln_program_t* kiln_module_program(const kiln_module_t* m) { return m ? m->program : NULL; }

kiln_status_t kiln_module_wrap(kiln_program_t* p, kiln_module_t** out_module) {
  if (!p || !out_module) {
    kiln_program_destroy(p);
    return kiln_make_status(KILN_INVALID_ARGUMENT, "kiln_module_wrap: NULL program or out_module");
  }
  kiln_status_t st = kiln_program_validate(p);
  if (st) {
    kiln_program_destroy(p);
    return st;
  }
  return make_module(p, p->allocator, 0, 0, out_module);
}

/* ---- signature hook (runtime/module_sign.h) ----------------------------
 * With a verify key the signature is checked before kiln_module_parse sees
 * a byte: a module is code, and nothing of an untrusted one is interpreted. */
static kiln_status_t check_signature(const void* data, size_t size, const char* name,
                                     const kiln_module_load_options_t* o, bool* out_verified) {
  *out_verified = false;
  if (!o || !o->verify_key_file) return NULL;
  kiln_sign_public_key_t key;
  KILN_RETURN_IF_ERROR(kiln_sign_public_key_read(o->verify_key_file, &key), "%s: verify key", name);
  KILN_RETURN_IF_ERROR(kiln_module_verify(data, size, name, &key));
  *out_verified = true;
  return NULL;
}

static void note_signature(kiln_module_t* m, const void* data, size_t size, bool verified) {
  kiln_module_signature_t sig;
  kiln_module_signature_find(data, size, &sig);
  if (sig.present) kiln_sign_key_id_text(sig.key_id, m->signer_key_id);
  m->signature_verified = verified;
}
/* ---- end of signature hook ---------------------------------------------- */

/* Parses |data| (borrowed) into a module; the version is read back from the
 * header, which the parser has checked. */
static kiln_status_t from_bytes(const void* data, size_t size, const char* name, bool borrow,
                                const kiln_module_load_options_t* o, kiln_allocator_t a, kiln_module_t** out) {
  bool verified;
  KILN_RETURN_IF_ERROR(check_signature(data, size, name, o, &verified));
  kiln_program_t* p = NULL;
  KILN_RETURN_IF_ERROR(borrow ? kiln_module_parse_borrowing(data, size, name, a, &p)
                              : kiln_module_parse(data, size, name, a, &p));
  kiln_status_t ps = kiln_plugin_check_program(p, name);
  if (ps) {
    kiln_program_destroy(p);
    return ps;
  }
  const uint8_t* v = (const uint8_t*)data + KILN_MODULE_OFF_VERSION;
  uint32_t version = (uint32_t)v[0] | ((uint32_t)v[1] << 8) | ((uint32_t)v[2] << 16) | ((uint32_t)v[3] << 24);
  KILN_RETURN_IF_ERROR(make_module(p, a, version, size, out), "%s", name);
  note_signature(*out, data, size, verified);
  return NULL;
}

kiln_status_t kiln_module_load_memory_opts(const void* data, size_t size, const char* name,
                                           const kiln_module_load_options_t* options, kiln_allocator_t allocator,
                                           kiln_module_t** out_module) {
  if (!name || !name[0]) name = "module";
  if (!out_module) return kiln_make_status(KILN_INVALID_ARGUMENT, "%s: NULL out_module", name);
  return from_bytes(data, size, name, false, options, allocator, out_module);
}

kiln_status_t kiln_module_load_memory(const void* data, size_t size, const char* name,
                                      kiln_allocator_t allocator, kiln_module_t** out_module) {
  return kiln_module_load_memory_opts(data, size, name, NULL, allocator, out_module);
}

kiln_status_t kiln_module_load_file(const char* path, kiln_allocator_t allocator,
                                    kiln_module_t** out_module) {
  return kiln_module_load_file_opts(path, NULL, allocator, out_module);
}

kiln_status_t kiln_module_load_file_opts(const char* path, const kiln_module_load_options_t* options,
                                         kiln_allocator_t allocator, kiln_module_t** out_module) {
  if (!path || !path[0]) return kiln_make_status(KILN_INVALID_ARGUMENT, "module path is empty");
  if (!out_module) return kiln_make_status(KILN_INVALID_ARGUMENT, "%s: NULL out_module", path);
  int fd;
  do fd = open(path, O_RDONLY | O_CLOEXEC);
  while (fd < 0 && errno == EINTR);
  if (fd < 0)
    return kiln_make_status(errno == ENOENT || errno == ENOTDIR ? KILN_NOT_FOUND : KILN_IO_ERROR,
                            "%s: cannot open module: %s", path, strerror(errno));
  kiln_status_t st = NULL;
  void* buf = NULL;
  struct stat sb;
  if (fstat(fd, &sb) != 0) {
    st = kiln_make_status(KILN_IO_ERROR, "%s: cannot stat module: %s", path, strerror(errno));
    goto done;
  }
  if (S_ISDIR(sb.st_mode)) {
    st = kiln_make_status(KILN_IO_ERROR, "%s: is a directory, not a module file", path);
    goto done;
  }
  if (!S_ISREG(sb.st_mode)) {
    st = kiln_make_status(KILN_IO_ERROR, "%s: not a regular file", path);
    goto done;
  }
  if ((uint64_t)sb.st_size > MAX_MODULE_FILE_BYTES) {
    st = kiln_make_status(KILN_LIMIT_EXCEEDED, "%s: module file is %lld bytes, above the %llu-byte limit",
                          path, (long long)sb.st_size, (unsigned long long)MAX_MODULE_FILE_BYTES);
    goto done;
  }
  size_t size = (size_t)sb.st_size, got = 0;
  if (size && !(options && options->no_map)) {
    /* MAP_POPULATE: one call fills the page table from the page cache
     * instead of one fault per 4 KiB page during the checksum. A file
     * system that cannot map falls through to reading. */
    void* map = mmap(NULL, size, PROT_READ, MAP_PRIVATE | MAP_POPULATE, fd, 0);
    if (map != MAP_FAILED) {
      close(fd);
      st = from_bytes(map, size, path, true, options, allocator, out_module);
      if (st) munmap(map, size);
      else {
        (*out_module)->map = map;
        (*out_module)->map_len = size;
      }
      return st;
    }
  }
  if (size) {
    st = kiln_allocator_malloc(allocator, size, "module file", &buf);
    if (st) {
      st = kiln_status_annotate(st, "%s", path);
      goto done;
    }
  }
  while (got < size) {
    size_t chunk = size - got > (1u << 30) ? (1u << 30) : size - got;
    ssize_t k = read(fd, (uint8_t*)buf + got, chunk);
    if (k < 0 && errno == EINTR) continue;
    if (k < 0) {
      st = kiln_make_status(KILN_IO_ERROR, "%s: read failed: %s", path, strerror(errno));
      goto done;
    }
    if (k == 0) break; /* shrank while reading: parse what is there (it will say truncated) */
    got += (size_t)k;
  }
  st = from_bytes(buf, got, path, false, options, allocator, out_module);
done:
  kiln_allocator_free(allocator, buf);
  close(fd);
  return st;
}

void kiln_module_retain(kiln_module_t* m) {
  if (m) atomic_fetch_add_explicit(&m->refs, 1, memory_order_relaxed);
}

void kiln_module_release(kiln_module_t* m) {
  if (!m) return;
  if (atomic_fetch_sub_explicit(&m->refs, 1, memory_order_acq_rel) != 1) return;
  if (m->parent) {
    kiln_module_release(m->parent); /* a bucket's view: the parent owns the program */
  } else {
    kiln_program_destroy(m->program);
    if (m->map) munmap(m->map, m->map_len);
  }
  kiln_allocator_free(m->allocator, m);
}

static const char* str_or_empty(const char* s) { return s ? s : ""; }

void kiln_module_info(const kiln_module_t* m, kiln_module_info_t* out_info) {
  if (!out_info) return;
  memset(out_info, 0, sizeof(*out_info));
  out_info->model_name = out_info->target = out_info->precision = out_info->options = "";
  out_info->signer_key_id = "";
  if (!m || !m->program) return;
  const kiln_program_t* p = m->program;
  out_info->model_name = str_or_empty(p->model_name);
  out_info->target = str_or_empty(p->target);
  out_info->precision = str_or_empty(p->precision);
  out_info->options = str_or_empty(p->options);
  out_info->n_inputs = p->n_inputs;
  out_info->n_outputs = p->n_outputs;
  out_info->n_kernels = p->n_kernels;
  out_info->n_buffers = p->n_buffers;
  out_info->weights_bytes = p->weights_len;
  uint64_t code = p->code.text_len;
  for (int32_t i = 0; i < p->code.n_blobs; ++i) code += p->code.blob_lens[i];
  out_info->code_bytes = code;
  out_info->format_version = m->format_version;
  out_info->signer_key_id = m->signer_key_id;
  out_info->signature_verified = m->signature_verified;
}

const char* kiln_module_input_name(const kiln_module_t* m, int32_t i) {
  if (!m || !m->program || i < 0 || i >= m->program->n_inputs) return NULL;
  return m->program->input_names[i];
}

const char* kiln_module_output_name(const kiln_module_t* m, int32_t i) {
  if (!m || !m->program || i < 0 || i >= m->program->n_outputs) return NULL;
  return m->program->output_names[i];
}

/* Out of range: rank -1 (no shape) and UNDEFINED, so a caller's mistake is
 * visible rather than looking like a scalar. */
static kiln_shape_t shape_of(const kiln_module_t* m, int32_t i, bool input, kiln_dtype_t* out_dtype) {
  if (out_dtype) *out_dtype = KILN_DTYPE_UNDEFINED;
  if (!m || !m->program) return kiln_shape_unknown();
  const kiln_program_t* p = m->program;
  int32_t n = input ? p->n_inputs : p->n_outputs;
  if (i < 0 || i >= n) return kiln_shape_unknown();
  const kiln_program_buffer_t* b = &p->buffers[input ? p->inputs[i] : p->outputs[i]];
  if (out_dtype) *out_dtype = b->dtype;
  return kiln_shape_make(b->rank, b->shape);
}

kiln_shape_t kiln_module_input_shape(const kiln_module_t* m, int32_t i, kiln_dtype_t* out_dtype) {
  return shape_of(m, i, true, out_dtype);
}

kiln_shape_t kiln_module_output_shape(const kiln_module_t* m, int32_t i, kiln_dtype_t* out_dtype) {
  return shape_of(m, i, false, out_dtype);
}

int32_t kiln_module_dim_count(const kiln_module_t* m) { return m && m->program ? m->program->n_dims : 0; }

kiln_status_t kiln_module_dim(const kiln_module_t* m, int32_t i, const char** out_name, int64_t* out_lo,
                              int64_t* out_hi) {
  if (!m || !m->program || !out_name || !out_lo || !out_hi)
    return kiln_make_status(KILN_INVALID_ARGUMENT, "kiln_module_dim: NULL argument");
  const kiln_program_t* p = m->program;
  if (i < 0 || i >= p->n_dims)
    return kiln_make_status(KILN_OUT_OF_RANGE, "%s: dynamic dim %d of %d", p->model_name, (int)i, (int)p->n_dims);
  *out_name = p->dims[i].name;
  *out_lo = p->dims[i].lo;
  *out_hi = p->dims[i].hi;
  return NULL;
}

int32_t kiln_module_dim_axis(const kiln_module_t* m, bool output, int32_t i) {
  const kiln_program_t* p = m ? m->program : NULL;
  if (!p || !p->n_dims || i < 0 || i >= (output ? p->n_outputs : p->n_inputs)) return -1;
  const int32_t b = output ? p->outputs[i] : p->inputs[i];
  return kiln_program_buffer_per_sample(p, b) ? 0 : kiln_program_io_dim_axis(p, b);
}

kiln_status_t kiln_module_dim_parse(const kiln_module_t* m, const char* spec, int64_t* out_value) {
  if (!m || !m->program || !spec || !out_value)
    return kiln_make_status(KILN_INVALID_ARGUMENT, "kiln_module_dim_parse: NULL argument");
  const kiln_program_t* p = m->program;
  const char* eq = strchr(spec, '=');
  if (!eq || eq == spec)
    return kiln_make_status(KILN_INVALID_ARGUMENT, "%s: --dim '%s': expected NAME=VALUE", p->model_name, spec);
  for (int32_t i = 0; i < p->n_dims; ++i) {
    const kiln_program_dim_t* d = &p->dims[i];
    /* "batch" also names the one dynamic dim when it is the outermost */
    const bool batch = eq - spec == 5 && !strncmp(spec, "batch", 5) && p->n_dims == 1 && !p->dim_axis;
    if (!batch && (strlen(d->name) != (size_t)(eq - spec) || strncmp(d->name, spec, (size_t)(eq - spec)) != 0)) continue;
    char* end = NULL;
    errno = 0;
    long long v = strtoll(eq + 1, &end, 10);
    if (end == eq + 1 || *end || errno == ERANGE || v < d->lo || v > d->hi)
      return kiln_make_status(KILN_INVALID_ARGUMENT, "%s: --dim '%s': dim '%s' takes a value in %lld..%lld",
                              p->model_name, spec, d->name, (long long)d->lo, (long long)d->hi);
    *out_value = v;
    return NULL;
  }
  if (p->n_buckets && !p->n_dims)
    return kiln_make_status(KILN_NOT_FOUND, "%s: --dim '%s': the module's only dim with several sizes is '%s' "
                            "(shape buckets)", p->model_name, spec, p->bucket_dim);
  if (!p->n_dims)
    return kiln_make_status(KILN_NOT_FOUND, "%s: --dim '%s': the module has static shapes (no dynamic dim)",
                            p->model_name, spec);
  return kiln_make_status(KILN_NOT_FOUND, "%s: --dim '%s': the module's dynamic dim is '%s' (%lld..%lld)",
                          p->model_name, spec, p->dims[0].name, (long long)p->dims[0].lo, (long long)p->dims[0].hi);
}

/* ---- shape buckets ---- */

int32_t kiln_module_bucket_count(const kiln_module_t* m) { return m && m->program ? m->program->n_buckets : 0; }

kiln_status_t kiln_module_bucket(const kiln_module_t* m, int32_t k, const char** out_name, int64_t* out_value) {
  if (!m || !m->program || !out_name || !out_value)
    return kiln_make_status(KILN_INVALID_ARGUMENT, "kiln_module_bucket: NULL argument");
  const kiln_program_t* p = m->program;
  if (k < 0 || k >= p->n_buckets)
    return kiln_make_status(KILN_OUT_OF_RANGE, "%s: shape bucket %d of %d", p->model_name, (int)k, (int)p->n_buckets);
  *out_name = p->bucket_dim;
  *out_value = p->bucket_values[k];
  return NULL;
}

static kiln_shape_t bucket_shape(const kiln_module_t* m, int32_t k, int32_t i, bool input, kiln_dtype_t* out_dtype) {
  if (out_dtype) *out_dtype = KILN_DTYPE_UNDEFINED;
  const kiln_program_t* p = m ? kiln_program_bucket(m->program, k) : NULL;
  if (!p || i < 0 || i >= (input ? p->n_inputs : p->n_outputs)) return kiln_shape_unknown();
  const kiln_program_buffer_t* b = &p->buffers[input ? p->inputs[i] : p->outputs[i]];
  if (out_dtype) *out_dtype = b->dtype;
  return kiln_shape_make(b->rank, b->shape);
}

kiln_shape_t kiln_module_bucket_input_shape(const kiln_module_t* m, int32_t k, int32_t i, kiln_dtype_t* out_dtype) {
  return bucket_shape(m, k, i, true, out_dtype);
}

kiln_shape_t kiln_module_bucket_output_shape(const kiln_module_t* m, int32_t k, int32_t i, kiln_dtype_t* out_dtype) {
  return bucket_shape(m, k, i, false, out_dtype);
}

kiln_status_t kiln_module_bucket_parse(const kiln_module_t* m, const char* spec, int32_t* out_k) {
  if (!m || !m->program || !spec || !out_k)
    return kiln_make_status(KILN_INVALID_ARGUMENT, "kiln_module_bucket_parse: NULL argument");
  const kiln_program_t* p = m->program;
  const char* eq = strchr(spec, '=');
  if (!p->n_buckets || !eq || strlen(p->bucket_dim) != (size_t)(eq - spec) ||
      strncmp(p->bucket_dim, spec, (size_t)(eq - spec)) != 0)
    return kiln_make_status(KILN_NOT_FOUND, "%s: --dim '%s': not the module's bucketed dim", p->model_name, spec);
  char* end = NULL;
  errno = 0;
  long long v = strtoll(eq + 1, &end, 10);
  for (int32_t k = 0; end != eq + 1 && !*end && errno != ERANGE && k < p->n_buckets; ++k)
    if (p->bucket_values[k] == v) {
      *out_k = k;
      return NULL;
    }
  char sizes[KILN_PROGRAM_MAX_BUCKETS * 24] = "";
  size_t n = 0;
  for (int32_t k = 0; k < p->n_buckets && n < sizeof sizes; ++k)
    n += (size_t)snprintf(sizes + n, sizeof sizes - n, "%s%lld", k ? ", " : "", (long long)p->bucket_values[k]);
  return kiln_make_status(KILN_INVALID_ARGUMENT, "%s: --dim '%s': dim '%s' takes one of the sizes %s (shape buckets)",
                          p->model_name, spec, p->bucket_dim, sizes);
}

kiln_status_t kiln_module_child(kiln_module_t* m, const kiln_program_t* b, kiln_module_t** out) {
  if (!m || !b || !out) return kiln_make_status(KILN_INVALID_ARGUMENT, "kiln_module_child: NULL argument");
  void* mem = NULL;
  KILN_RETURN_IF_ERROR(kiln_allocator_malloc(m->allocator, sizeof(kiln_module_t), "bucket module", &mem));
  kiln_module_t* bm = mem;
  *bm = (kiln_module_t){.allocator = m->allocator, .program = (kiln_program_t*)b, .format_version = m->format_version,
                        .file_bytes = m->file_bytes, .signature_verified = m->signature_verified, .parent = m};
  atomic_init(&bm->refs, 1);
  memcpy(bm->signer_key_id, m->signer_key_id, sizeof bm->signer_key_id);
  kiln_module_retain(m);
  *out = bm;
  return NULL;
}

kiln_status_t kiln_module_bucket_module(kiln_module_t* m, int32_t k, kiln_module_t** out) {
  const kiln_program_t* b = m ? kiln_program_bucket(m->program, k) : NULL;
  if (!b || !out) return kiln_make_status(KILN_INVALID_ARGUMENT, "kiln_module_bucket_module: no bucket %d", (int)k);
  return kiln_module_child(m, b, out);
}
