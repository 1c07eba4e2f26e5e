/* ONNX frontend: ModelProto/TensorProto bytes -> kiln graph / arrays.
 *
 * Hostile files are the norm for a loader, so bytes pass three gates before
 * they become IR: a size cap on the file, a descriptor-driven walk of the
 * protobuf wire format that bounds nesting depth and checks every length,
 * and protobuf-c unpacking through an allocator with a byte budget. Then each
 * tensor's element count and byte size are checked against its data before
 * anything is copied. */
#include "frontend/onnx.h"

#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include "onnx/onnx.pb-c.h"

#define S(x) ((x) ? (x) : "")

void kiln_onnx_options_default(kiln_onnx_options_t* o) {
  memset(o, 0, sizeof(*o));
  o->max_file_bytes = 4ll << 30;
  o->max_tensor_bytes = 4ll << 30;
  o->max_total_bytes = 16ll << 30;
  o->max_nesting = 32;
  o->max_nodes = 1000000;
  o->allow_external_data = true;
}

/* ---- reading files --------------------------------------------------- */

/* The file's bytes: mapped read-only where the file system can map
 * (*out_mapped true: munmap them), else read into an |a| buffer. Mapping
 * skips a copy of the whole file into fresh memory (ResNet-50: 102 MB, the
 * most of it weights that protobuf-c copies out again); MAP_POPULATE fills
 * the page table from the page cache in one call. As with mapped modules
 * (runtime/module.c), a file truncated by another process while it is
 * mapped is the one case that reads past its end. */
static kiln_status_t read_file(const char* path, int64_t cap, kiln_allocator_t a,
                               uint8_t** out_data, size_t* out_size, bool* out_mapped) {
  *out_mapped = false;
  /* O_NONBLOCK: opening a FIFO must not block; regular files ignore it. */
  int fd = open(path, O_RDONLY | O_CLOEXEC | O_NONBLOCK);
  if (fd < 0)
    return kiln_make_status(errno == ENOENT ? KILN_NOT_FOUND : KILN_IO_ERROR,
                            "%s: cannot open: %s", path, strerror(errno));
  struct stat st;
  if (fstat(fd, &st) != 0 || !S_ISREG(st.st_mode)) {
    close(fd);
    return kiln_make_status(KILN_IO_ERROR, "%s: not a regular file", path);
  }
  fcntl(fd, F_SETFL, fcntl(fd, F_GETFL) & ~O_NONBLOCK);
  if (st.st_size == 0) {
    close(fd);
    return kiln_make_status(KILN_PARSE_ERROR, "%s: empty file (0 bytes), not an ONNX protobuf",
                            path);
  }
  if (st.st_size > cap) {
    close(fd);
    return kiln_make_status(KILN_LIMIT_EXCEEDED,
                            "%s: file is %lld bytes, over the %lld-byte limit", path,
                            (long long)st.st_size, (long long)cap);
  }
  void* map = mmap(NULL, (size_t)st.st_size, PROT_READ, MAP_PRIVATE | MAP_POPULATE, fd, 0);
  if (map != MAP_FAILED) {
    close(fd);
    *out_data = map;
    *out_size = (size_t)st.st_size;
    *out_mapped = true;
    return NULL;
  }
  uint8_t* buf = NULL;
  kiln_status_t s = kiln_allocator_malloc(a, (size_t)st.st_size, path, (void**)&buf);
  if (s) {
    close(fd);
    return s;
  }
  size_t got = 0;
  while (got < (size_t)st.st_size) {
    ssize_t r = read(fd, buf + got, (size_t)st.st_size - got);
    if (r < 0 && errno == EINTR) continue;
    if (r <= 0) {
      int e = errno;
      close(fd);
      kiln_allocator_free(a, buf);
      return kiln_make_status(KILN_IO_ERROR, "%s: read failed: %s", path,
                              r < 0 ? strerror(e) : "file shrank while reading");
    }
    got += (size_t)r;
  }
  close(fd);
  *out_data = buf;
  *out_size = got;
  return NULL;
}

/* ---- bounded wire-format walk ----------------------------------------- */

static bool read_varint(const uint8_t* p, size_t n, size_t* pos, uint64_t* out) {
  uint64_t v = 0;
  for (int shift = 0; shift < 70; shift += 7) {
    if (*pos >= n) return false;
    uint8_t b = p[(*pos)++];
    if (shift == 63 && (b & 0x7e)) return false;
    v |= (uint64_t)(b & 0x7f) << shift;
    if (!(b & 0x80)) {
      *out = v;
      return true;
    }
  }
  return false;
}

/* Checks that |p| parses as message |d| with sub-messages nested at most
 * |max_depth| deep. The walk recurses only into message-typed fields, so its
 * own recursion is bounded by |max_depth|. */
static kiln_status_t walk(const char* path, const uint8_t* p, size_t n,
                          const ProtobufCMessageDescriptor* d, int depth, int max_depth,
                          size_t base) {
  size_t pos = 0;
  while (pos < n) {
    size_t at = pos;
    uint64_t key;
    if (!read_varint(p, n, &pos, &key))
      return kiln_make_status(KILN_PARSE_ERROR,
                              "%s: not a valid ONNX protobuf (bad field key at byte %zu)", path,
                              base + at);
    uint32_t field = (uint32_t)(key >> 3);
    unsigned wt = (unsigned)(key & 7);
    if (field == 0)
      return kiln_make_status(KILN_PARSE_ERROR,
                              "%s: not a valid ONNX protobuf (field number 0 at byte %zu)", path,
                              base + at);
    uint64_t v = 0;
    switch (wt) {
      case 0:
        if (!read_varint(p, n, &pos, &v))
          return kiln_make_status(KILN_PARSE_ERROR, "%s: truncated protobuf (varint at byte %zu)",
                                  path, base + at);
        break;
      case 1:
        if (n - pos < 8)
          return kiln_make_status(KILN_PARSE_ERROR, "%s: truncated protobuf at byte %zu", path,
                                  base + at);
        pos += 8;
        break;
      case 5:
        if (n - pos < 4)
          return kiln_make_status(KILN_PARSE_ERROR, "%s: truncated protobuf at byte %zu", path,
                                  base + at);
        pos += 4;
        break;
      case 2: {
        if (!read_varint(p, n, &pos, &v) || v > n - pos)
          return kiln_make_status(KILN_PARSE_ERROR,
                                  "%s: truncated protobuf (field %u at byte %zu claims %llu bytes, "
                                  "%zu remain)",
                                  path, field, base + at, (unsigned long long)v,
                                  n - (pos < n ? pos : n));
        const ProtobufCFieldDescriptor* fd =
            d ? protobuf_c_message_descriptor_get_field(d, field) : NULL;
        /* protobuf-c hands strings over NUL-terminated: a NUL inside one
         * would silently cut it (an external-data location, a name). */
        if (fd && fd->type == PROTOBUF_C_TYPE_STRING && memchr(p + pos, 0, (size_t)v))
          return kiln_make_status(KILN_PARSE_ERROR,
                                  "%s: string field '%s' at byte %zu contains a NUL byte (at its byte "
                                  "%zu)",
                                  path, fd->name, base + at,
                                  (size_t)((const uint8_t*)memchr(p + pos, 0, (size_t)v) - (p + pos)));
        if (fd && fd->type == PROTOBUF_C_TYPE_MESSAGE) {
          if (depth + 1 > max_depth)
            return kiln_make_status(KILN_LIMIT_EXCEEDED,
                                    "%s: protobuf messages nested deeper than %d levels "
                                    "(field '%s' at byte %zu)",
                                    path, max_depth, fd->name, base + at);
          KILN_RETURN_IF_ERROR(walk(path, p + pos, (size_t)v, fd->descriptor, depth + 1,
                                    max_depth, base + pos));
        }
        pos += (size_t)v;
        break;
      }
      default:
        return kiln_make_status(KILN_PARSE_ERROR,
                                "%s: not a valid ONNX protobuf (wire type %u at byte %zu)", path, wt,
                                base + at);
    }
  }
  return NULL;
}

/* protobuf-c allocator with a byte budget: repeated fields of tiny messages
 * expand many times over on unpacking, so the budget bounds memory. The
 * budget counts every allocation of one unpack (frees do not give it
 * back), so a block carries no header: the bytes of a raw_data field are a
 * plain block of |a| that convert_tensor takes over as the array's data
 * instead of copying it. */
typedef struct {
  kiln_allocator_t a;
  size_t used, budget;
  bool over;     /* the budget refused an allocation */
  bool oom;      /* the allocator itself failed */
} pb_budget_t;

static void* pb_alloc(void* ud, size_t size) {
  pb_budget_t* b = ud;
  if (size > b->budget - b->used) {
    b->over = true;
    return NULL;
  }
  void* p = b->a.alloc(b->a.self, size ? size : 1);
  if (!p) {
    b->oom = true;
    return NULL;
  }
  b->used += size;
  return p;
}

static void pb_free(void* ud, void* ptr) {
  if (!ptr) return;
  pb_budget_t* b = ud;
  b->a.free(b->a.self, ptr);
}

static kiln_status_t unpack(const char* path, const kiln_onnx_options_t* o,
                            const ProtobufCMessageDescriptor* d, const uint8_t* data, size_t n,
                            pb_budget_t* budget, ProtobufCAllocator* pa,
                            ProtobufCMessage** out) {
  KILN_RETURN_IF_ERROR(walk(path, data, n, d, 0, o->max_nesting, 0));
  pa->alloc = pb_alloc;
  pa->free = pb_free;
  pa->allocator_data = budget;
  /* Budget: real models decode to about their wire size (weights dominate);
   * pathological ones (millions of empty sub-messages) expand ~50x, so the
   * budget stops those early. */
  budget->budget = (size_t)64 << 20;
  if (n < ((size_t)1 << 40) / 16) budget->budget += n * 16;
  ProtobufCMessage* m = protobuf_c_message_unpack(d, pa, n, data);
  if (!m) {
    if (budget->oom)
      return kiln_make_status(KILN_OUT_OF_MEMORY, "%s: out of memory while decoding the protobuf",
                              path);
    if (budget->over)
      return kiln_make_status(KILN_LIMIT_EXCEEDED,
                              "%s: decoding needs more than %zu bytes of memory", path,
                              budget->budget);
    return kiln_make_status(KILN_PARSE_ERROR, "%s: not a valid %s protobuf", path, d->name);
  }
  *out = m;
  return NULL;
}

/* ---- tensors --------------------------------------------------------- */

typedef struct {
  const char* path;       /* model or tensor file */
  const char* model_dir;  /* folder external data must stay inside */
  const kiln_onnx_options_t* o;
  kiln_allocator_t a;
  int64_t total_bytes;
  int depth; /* subgraphs being converted (If/Loop/Scan bodies) */
} loader_t;

/* Subgraphs nested in subgraphs: each level is a recursion of the
 * converter, so the depth is capped whatever max_nesting allows. */
#define KILN_ONNX_MAX_SUBGRAPH_DEPTH 16

static kiln_status_t check_external_path(const loader_t* L, const char* tname,
                                         const char* loc, char** out_full) {
  if (!loc || !loc[0])
    return kiln_make_status(KILN_INVALID_ARGUMENT,
                            "%s: tensor '%s': external data has no 'location'", L->path, tname);
  if (loc[0] == '/' || loc[0] == '\\')
    return kiln_make_status(KILN_PERMISSION_DENIED,
                            "%s: tensor '%s': external data location '%s' is an absolute path; "
                            "it must be relative to the model's folder",
                            L->path, tname, loc);
  /* Reject any ".." component, whatever it would resolve to. */
  for (const char* c = loc; *c;) {
    const char* e = c;
    while (*e && *e != '/' && *e != '\\') ++e;
    if (e - c == 2 && c[0] == '.' && c[1] == '.')
      return kiln_make_status(KILN_PERMISSION_DENIED,
                              "%s: tensor '%s': external data location '%s' contains '..'; it "
                              "must stay inside the model's folder",
                              L->path, tname, loc);
    c = *e ? e + 1 : e;
  }
  size_t need = strlen(L->model_dir) + 1 + strlen(loc) + 1;
  char* full = malloc(need);
  if (!full) return kiln_make_status(KILN_OUT_OF_MEMORY, "out of memory");
  snprintf(full, need, "%s/%s", L->model_dir, loc);
  /* Symlinks may still lead out: compare the resolved paths. */
  char* rdir = realpath(L->model_dir, NULL);
  char* rfile = realpath(full, NULL);
  kiln_status_t s = NULL;
  if (!rfile) {
    s = kiln_make_status(KILN_NOT_FOUND, "%s: tensor '%s': external data file '%s': %s", L->path,
                         tname, loc, strerror(errno));
  } else if (!rdir || strncmp(rfile, rdir, strlen(rdir)) != 0 ||
             (rfile[strlen(rdir)] != '/' && strcmp(rdir, "/") != 0)) {
    s = kiln_make_status(KILN_PERMISSION_DENIED,
                         "%s: tensor '%s': external data location '%s' resolves to '%s', outside "
                         "the model's folder (symlink?)",
                         L->path, tname, loc, rfile);
  }
  free(rdir);
  free(full);
  if (s) {
    free(rfile);
    return s;
  }
  /* Open the resolved path, not the one given, so a symlink swapped in after
   * the check cannot redirect the read. */
  *out_full = rfile;
  return NULL;
}

static kiln_status_t read_external(const loader_t* L, const Onnx__TensorProto* t,
                                   const char* tname, size_t want, void* dst) {
  if (!L->o->allow_external_data)
    return kiln_make_status(KILN_PERMISSION_DENIED,
                            "%s: tensor '%s' uses external data, which is disabled", L->path, tname);
  const char* loc = NULL;
  int64_t offset = 0, length = -1;
  for (size_t i = 0; i < t->n_external_data; ++i) {
    const char* k = S(t->external_data[i]->key);
    const char* v = S(t->external_data[i]->value);
    char* end = NULL;
    if (strcmp(k, "location") == 0) {
      loc = v;
    } else if (strcmp(k, "offset") == 0 || strcmp(k, "length") == 0) {
      errno = 0;
      long long x = strtoll(v, &end, 10);
      if (!v[0] || *end || errno || x < 0)
        return kiln_make_status(KILN_INVALID_ARGUMENT,
                                "%s: tensor '%s': external data %s '%s' is not a non-negative "
                                "integer",
                                L->path, tname, k, v);
      if (k[0] == 'o') offset = x;
      else length = x;
    }
  }
  char* full = NULL;
  KILN_RETURN_IF_ERROR(check_external_path(L, tname, loc, &full));
  int fd = open(full, O_RDONLY | O_CLOEXEC | O_NONBLOCK);
  kiln_status_t s = NULL;
  struct stat st;
  if (fd < 0) {
    s = kiln_make_status(KILN_IO_ERROR, "%s: tensor '%s': cannot open external data '%s': %s",
                         L->path, tname, loc, strerror(errno));
  } else if (fstat(fd, &st) != 0 || !S_ISREG(st.st_mode)) {
    s = kiln_make_status(KILN_IO_ERROR, "%s: tensor '%s': external data '%s' is not a regular file",
                         L->path, tname, loc);
  } else {
    int64_t size = st.st_size;
    if (length < 0) length = offset <= size ? size - offset : 0;
    if (offset > size || length > size - offset)
      s = kiln_make_status(KILN_OUT_OF_RANGE,
                           "%s: tensor '%s': external data offset %lld + length %lld is past the "
                           "end of '%s' (%lld bytes)",
                           L->path, tname, (long long)offset, (long long)length, loc,
                           (long long)size);
    else if ((uint64_t)length != want)
      s = kiln_make_status(KILN_INVALID_ARGUMENT,
                           "%s: tensor '%s': external data length %lld != %zu bytes (elements x "
                           "element size)",
                           L->path, tname, (long long)length, want);
    else {
      size_t got = 0;
      while (got < want && !s) {
        ssize_t r = pread(fd, (char*)dst + got, want - got, (off_t)(offset + (int64_t)got));
        if (r < 0 && errno == EINTR) continue;
        if (r <= 0)
          s = kiln_make_status(KILN_IO_ERROR, "%s: tensor '%s': reading '%s' failed", L->path,
                               tname, loc);
        else
          got += (size_t)r;
      }
    }
  }
  if (fd >= 0) close(fd);
  free(full);
  return s;
}

/* Converts |t| into a freshly allocated array. */
static kiln_status_t convert_tensor(loader_t* L, const Onnx__TensorProto* t, const char* what,
                                    kiln_array_t* out) {
  const char* tname = t->name && t->name[0] ? t->name : what;
  memset(out, 0, sizeof(*out));
  int32_t ot = t->has_data_type ? t->data_type : 0;
  if (ot == 0)
    return kiln_make_status(KILN_INVALID_ARGUMENT,
                            "%s: tensor '%s' has an undefined element type", L->path, tname);
  kiln_dtype_t dt = kiln_dtype_from_onnx(ot);
  if (dt == KILN_DTYPE_UNDEFINED)
    return kiln_make_status(KILN_UNSUPPORTED,
                            "%s: tensor '%s' has element type %s (%d), which kiln does not support",
                            L->path, tname, kiln_onnx_dtype_name(ot), ot);
  if (t->n_dims > KILN_MAX_RANK)
    return kiln_make_status(KILN_UNSUPPORTED, "%s: tensor '%s' has rank %zu, kiln supports <= %d",
                            L->path, tname, t->n_dims, KILN_MAX_RANK);
  if (t->segment)
    return kiln_make_status(KILN_UNSUPPORTED, "%s: tensor '%s' is segmented", L->path, tname);
  kiln_shape_t shape = kiln_shape_make((int32_t)t->n_dims, NULL);
  int64_t numel = 1;
  for (size_t i = 0; i < t->n_dims; ++i) {
    int64_t d = t->dims[i];
    if (d < 0)
      return kiln_make_status(KILN_INVALID_ARGUMENT, "%s: tensor '%s' has negative dim %lld (dim %zu)",
                              L->path, tname, (long long)d, i);
    if (d != 0 && numel > INT64_MAX / d)
      return kiln_make_status(KILN_LIMIT_EXCEEDED,
                              "%s: tensor '%s': the product of its dims overflows int64", L->path,
                              tname);
    numel *= d;
    shape.dims[i] = d;
  }
  size_t es = kiln_dtype_size(dt);
  if ((uint64_t)numel > (uint64_t)L->o->max_tensor_bytes / es)
    return kiln_make_status(KILN_LIMIT_EXCEEDED,
                            "%s: tensor '%s' has %lld elements (%s), over the %lld-byte tensor limit",
                            L->path, tname, (long long)numel, kiln_dtype_name(dt),
                            (long long)L->o->max_tensor_bytes);
  size_t want = (size_t)numel * es;
  /* int4 / uint4: two a byte in the file (low nibble first; int32_data
   * entries hold one such byte each), one a byte in kiln */
  const bool packed = kiln_dtype_is_int4(dt);
  const size_t file_bytes = packed ? (size_t)(numel + 1) / 2 : want;
  if (L->total_bytes + (int64_t)want > L->o->max_total_bytes)
    return kiln_make_status(KILN_LIMIT_EXCEEDED,
                            "%s: tensor '%s' takes the weights past the %lld-byte total limit",
                            L->path, tname, (long long)L->o->max_total_bytes);
  bool external = t->has_data_location &&
                  t->data_location == ONNX__TENSOR_PROTO__DATA_LOCATION__EXTERNAL;
  /* Validate the data's size before allocating for it. */
  size_t have = 0;
  const char* field = "no data";
  /* Two sources for the same values: which one a reader takes is
   * unspecified, so refuse rather than pick one. */
  const size_t typed = t->n_float_data + t->n_int32_data + t->n_int64_data + t->n_double_data +
                       t->n_uint64_data + t->n_string_data;
  if ((t->has_raw_data && typed) || (external && (t->has_raw_data || typed)))
    return kiln_make_status(KILN_INVALID_ARGUMENT,
                            "%s: tensor '%s' holds its data twice (%s%s%s); it must hold it once",
                            L->path, tname, external ? "external data and " : "",
                            t->has_raw_data ? "raw_data" : "", typed ? (t->has_raw_data ? " and typed data" : "typed data") : "");
  if (external) {
    field = "external";
  } else if (t->has_raw_data) {
    field = "raw_data";
    if (t->raw_data.len != file_bytes)
      return kiln_make_status(KILN_INVALID_ARGUMENT,
                              "%s: tensor '%s': raw_data has %zu bytes, expected %zu (%lld "
                              "elements x %s)",
                              L->path, tname, t->raw_data.len, file_bytes, (long long)numel,
                              packed ? "4 bits, two a byte" : es == 1 ? "1 byte" : es == 2 ? "2 bytes"
                              : es == 4 ? "4 bytes" : "8 bytes");
  } else {
    switch (dt) {
      case KILN_DTYPE_F32: have = t->n_float_data; field = "float_data"; break;
      case KILN_DTYPE_I64: have = t->n_int64_data; field = "int64_data"; break;
      case KILN_DTYPE_F64: have = t->n_double_data; field = "double_data"; break;
      /* onnx.proto keeps uint32 and uint64 values in uint64_data. */
      case KILN_DTYPE_U32:
      case KILN_DTYPE_U64: have = t->n_uint64_data; field = "uint64_data"; break;
      default: have = t->n_int32_data; field = "int32_data"; break;
    }
    if ((int64_t)have != (packed ? (int64_t)file_bytes : numel))
      return kiln_make_status(KILN_INVALID_ARGUMENT,
                              "%s: tensor '%s': %s has %zu elements, expected %lld%s", L->path,
                              tname, field, have, packed ? (long long)file_bytes : (long long)numel,
                              packed ? " (4-bit values, two an element)" : "");
  }
  /* raw_data of the array's own size and layout (not int4's nibbles, not
   * bool's bytes, which are normalised below): the array takes over
   * protobuf-c's block (pb_alloc: a plain block of L->a) instead of
   * copying it -- the weights are then copied once out of the file, not
   * twice. The field is left empty, so nothing frees or reads it again. */
  if (!external && t->has_raw_data && !packed && file_bytes == want && want && dt != KILN_DTYPE_BOOL) {
    Onnx__TensorProto* mt = (Onnx__TensorProto*)t; /* the loader's own unpacked message */
    out->dtype = dt;
    out->shape = shape;
    out->data = mt->raw_data.data;
    out->nbytes = want;
    mt->raw_data.data = NULL;
    mt->raw_data.len = 0;
    L->total_bytes += (int64_t)want;
    return NULL;
  }
  KILN_RETURN_IF_ERROR(kiln_array_alloc(L->a, dt, &shape, out), "%s: tensor '%s'", L->path, tname);
  kiln_status_t s = NULL;
  if (external) {
    s = read_external(L, t, tname, file_bytes, out->data);
  } else if (t->has_raw_data) {
    if (file_bytes) memcpy(out->data, t->raw_data.data, file_bytes);
    if (dt == KILN_DTYPE_BOOL)
      for (size_t i = 0; i < want; ++i) ((uint8_t*)out->data)[i] = ((uint8_t*)out->data)[i] != 0;
  } else if (dt == KILN_DTYPE_F32) {
    if (want) memcpy(out->data, t->float_data, want);
  } else if (dt == KILN_DTYPE_I64) {
    if (want) memcpy(out->data, t->int64_data, want);
  } else if (dt == KILN_DTYPE_F64) {
    if (want) memcpy(out->data, t->double_data, want);
  } else if (dt == KILN_DTYPE_U32 || dt == KILN_DTYPE_U64) {
    for (int64_t i = 0; i < numel; ++i)
      kiln_store_i64(dt, out->data, (size_t)i, (int64_t)t->uint64_data[i]);
  } else if (packed) {
    for (size_t i = 0; i < file_bytes; ++i) ((uint8_t*)out->data)[i] = (uint8_t)t->int32_data[i];
  } else {
    for (int64_t i = 0; i < numel; ++i) {
      int32_t v = t->int32_data[i];
      if (dt == KILN_DTYPE_F16 || kiln_dtype_is_f8(dt))
        kiln_store_i64(es == 2 ? KILN_DTYPE_U16 : KILN_DTYPE_U8, out->data, (size_t)i, v); /* bits */
      else kiln_store_i64(dt, out->data, (size_t)i, v);
    }
  }
  /* unpack in place from the end: element i reads byte i / 2 <= i, which
   * no later (lower) element's write has touched */
  if (!s && packed)
    for (int64_t i = numel - 1; i >= 0; --i) {
      const uint8_t b = ((uint8_t*)out->data)[i / 2];
      kiln_store_i64(dt, out->data, (size_t)i, (i & 1) ? b >> 4 : b & 0xF);
    }
  if (s) {
    kiln_array_free(L->a, out);
    return s;
  }
  L->total_bytes += (int64_t)want;
  return NULL;
}

/* ---- graphs ---------------------------------------------------------- */

static kiln_status_t convert_value_info(loader_t* L, kiln_graph_t* g, const Onnx__ValueInfoProto* v,
                                        const char* role, kiln_dtype_t* out_dtype,
                                        kiln_shape_t* out_shape) {
  const char* name = S(v->name);
  const Onnx__TypeProto* tp = v->type;
  *out_shape = kiln_shape_unknown();
  *out_dtype = KILN_DTYPE_UNDEFINED;
  if (!tp) return NULL; /* outputs may omit types; inference fills them */
  if (tp->value_case != ONNX__TYPE_PROTO__VALUE_TENSOR_TYPE || !tp->tensor_type)
    return kiln_make_status(KILN_UNSUPPORTED,
                            "%s: graph %s '%s' is not a dense tensor (sequence/map/optional/sparse "
                            "types are not supported)",
                            L->path, role, name);
  const Onnx__TypeProto__Tensor* tt = tp->tensor_type;
  int32_t et = tt->has_elem_type ? tt->elem_type : 0;
  if (et == 0)
    return kiln_make_status(KILN_INVALID_ARGUMENT, "%s: graph %s '%s' has an undefined element type",
                            L->path, role, name);
  *out_dtype = kiln_dtype_from_onnx(et);
  if (*out_dtype == KILN_DTYPE_UNDEFINED)
    return kiln_make_status(KILN_UNSUPPORTED,
                            "%s: graph %s '%s' has element type %s (%d), which kiln does not support",
                            L->path, role, name, kiln_onnx_dtype_name(et), et);
  if (!tt->shape) return NULL;
  if (tt->shape->n_dim > KILN_MAX_RANK)
    return kiln_make_status(KILN_UNSUPPORTED, "%s: graph %s '%s' has rank %zu, kiln supports <= %d",
                            L->path, role, name, tt->shape->n_dim, KILN_MAX_RANK);
  out_shape->rank = (int32_t)tt->shape->n_dim;
  for (size_t i = 0; i < tt->shape->n_dim; ++i) {
    const Onnx__TensorShapeProto__Dimension* d = tt->shape->dim[i];
    int64_t dim = KILN_DIM_UNKNOWN;
    if (d->value_case == ONNX__TENSOR_SHAPE_PROTO__DIMENSION__VALUE_DIM_VALUE) {
      if (d->dim_value < 0)
        return kiln_make_status(KILN_INVALID_ARGUMENT, "%s: graph %s '%s' has negative dim %lld",
                                L->path, role, name, (long long)d->dim_value);
      dim = d->dim_value;
    } else if (d->value_case == ONNX__TENSOR_SHAPE_PROTO__DIMENSION__VALUE_DIM_PARAM &&
               d->dim_param && d->dim_param[0]) {
      int32_t sym;
      KILN_RETURN_IF_ERROR(kiln_graph_symbol(g, d->dim_param, &sym), "%s: graph %s '%s'", L->path,
                           role, name);
      dim = kiln_dim_from_symbol(sym);
    }
    out_shape->dims[i] = dim;
  }
  return NULL;
}

static kiln_status_t convert_graph_body(loader_t* L, const Onnx__GraphProto* gp, kiln_graph_t* g, bool sub);

static kiln_status_t convert_attr(loader_t* L, kiln_graph_t* g, const char* node,
                                  const Onnx__AttributeProto* p, kiln_attr_t* a,
                                  kiln_array_t* scratch, int64_t* n_scratch) {
  memset(a, 0, sizeof(*a));
  a->name = S(p->name);
  if (p->ref_attr_name && p->ref_attr_name[0])
    return kiln_make_status(KILN_UNSUPPORTED,
                            "%s: node '%s': attribute '%s' refers to a function attribute", L->path,
                            node, a->name);
  int t = p->has_type ? (int)p->type : 0;
  switch (t) {
    case ONNX__ATTRIBUTE_PROTO__ATTRIBUTE_TYPE__FLOAT: a->type = KILN_ATTR_FLOAT; a->f = p->f; break;
    case ONNX__ATTRIBUTE_PROTO__ATTRIBUTE_TYPE__INT: a->type = KILN_ATTR_INT; a->i = p->i; break;
    case ONNX__ATTRIBUTE_PROTO__ATTRIBUTE_TYPE__STRING: {
      a->type = KILN_ATTR_STRING;
      char* s = kiln_arena_strndup(&g->arena, (const char*)p->s.data, p->s.len);
      if (!s) return kiln_make_status(KILN_OUT_OF_MEMORY, "out of memory");
      a->s = s;
      a->s_len = p->s.len;
      break;
    }
    case ONNX__ATTRIBUTE_PROTO__ATTRIBUTE_TYPE__FLOATS:
      a->type = KILN_ATTR_FLOATS;
      a->count = (int64_t)p->n_floats;
      a->floats = p->floats;
      break;
    case ONNX__ATTRIBUTE_PROTO__ATTRIBUTE_TYPE__INTS:
      a->type = KILN_ATTR_INTS;
      a->count = (int64_t)p->n_ints;
      a->ints = p->ints;
      break;
    case ONNX__ATTRIBUTE_PROTO__ATTRIBUTE_TYPE__STRINGS: {
      a->type = KILN_ATTR_STRINGS;
      a->count = (int64_t)p->n_strings;
      const char** v = kiln_arena_alloc(&g->arena, sizeof(char*) * (p->n_strings + 1));
      if (!v) return kiln_make_status(KILN_OUT_OF_MEMORY, "out of memory");
      for (size_t i = 0; i < p->n_strings; ++i) {
        v[i] = kiln_arena_strndup(&g->arena, (const char*)p->strings[i].data, p->strings[i].len);
        if (!v[i]) return kiln_make_status(KILN_OUT_OF_MEMORY, "out of memory");
      }
      a->strings = v;
      break;
    }
    case ONNX__ATTRIBUTE_PROTO__ATTRIBUTE_TYPE__TENSOR:
      a->type = KILN_ATTR_TENSOR;
      if (!p->t)
        return kiln_make_status(KILN_INVALID_ARGUMENT,
                                "%s: node '%s': tensor attribute '%s' has no tensor", L->path, node,
                                a->name);
      KILN_RETURN_IF_ERROR(convert_tensor(L, p->t, a->name, &scratch[*n_scratch]),
                           "node '%s' attribute '%s'", node, a->name);
      a->tensor = &scratch[(*n_scratch)++];
      break;
    case ONNX__ATTRIBUTE_PROTO__ATTRIBUTE_TYPE__GRAPH: {
      a->type = KILN_ATTR_GRAPH;
      if (!p->g)
        return kiln_make_status(KILN_INVALID_ARGUMENT, "%s: node '%s': graph attribute '%s' has no graph", L->path,
                                node, a->name);
      if (L->depth >= KILN_ONNX_MAX_SUBGRAPH_DEPTH)
        return kiln_make_status(KILN_LIMIT_EXCEEDED, "%s: node '%s': subgraphs nested deeper than %d levels", L->path,
                                node, KILN_ONNX_MAX_SUBGRAPH_DEPTH);
      kiln_graph_t* sub = NULL;
      KILN_RETURN_IF_ERROR(kiln_graph_create(L->a, &sub));
      /* the parent owns it from here on, whatever fails later */
      KILN_RETURN_IF_ERROR(kiln_graph_adopt_subgraph(g, sub));
      sub->source = g->source;
      for (int32_t i = 0; i < g->n_opsets; ++i)
        KILN_RETURN_IF_ERROR(kiln_graph_set_opset(sub, g->opsets[i].domain, g->opsets[i].version));
      L->depth++;
      kiln_status_t bs = convert_graph_body(L, p->g, sub, true);
      L->depth--;
      KILN_RETURN_IF_ERROR(bs, "node '%s' attribute '%s'", node, a->name);
      KILN_RETURN_IF_ERROR(kiln_graph_collect_outer(sub), "node '%s' attribute '%s'", node, a->name);
      a->graph = sub;
      break;
    }
    case ONNX__ATTRIBUTE_PROTO__ATTRIBUTE_TYPE__GRAPHS: a->type = KILN_ATTR_GRAPHS; break;
    case ONNX__ATTRIBUTE_PROTO__ATTRIBUTE_TYPE__TENSORS:
      return kiln_make_status(KILN_UNSUPPORTED, "%s: node '%s': attribute '%s' of type tensors",
                              L->path, node, a->name);
    case 0:
      return kiln_make_status(KILN_INVALID_ARGUMENT,
                              "%s: node '%s': attribute '%s' has an undefined type", L->path, node,
                              a->name);
    default:
      return kiln_make_status(KILN_UNSUPPORTED,
                              "%s: node '%s': attribute '%s' has type %d (sparse tensor or type "
                              "proto), which kiln does not support",
                              L->path, node, a->name, t);
  }
  return NULL;
}

static kiln_status_t convert_node(loader_t* L, kiln_graph_t* g, const Onnx__NodeProto* n,
                                  size_t index) {
  char fallback[64];
  snprintf(fallback, sizeof fallback, "#%zu", index);
  const char* nname = n->name && n->name[0] ? n->name : fallback;
  if (n->n_attribute > 4096 || n->n_input > 65536 || n->n_output > 65536)
    return kiln_make_status(KILN_LIMIT_EXCEEDED, "%s: node '%s' has too many inputs/attributes",
                            L->path, nname);
  kiln_attr_t* attrs = calloc(n->n_attribute + 1, sizeof(kiln_attr_t));
  kiln_array_t* scratch = calloc(n->n_attribute + 1, sizeof(kiln_array_t));
  const char** ins = calloc(n->n_input + 1, sizeof(char*));
  const char** outs = calloc(n->n_output + 1, sizeof(char*));
  int64_t n_scratch = 0;
  kiln_status_t s = NULL;
  if (!attrs || !scratch || !ins || !outs) {
    s = kiln_make_status(KILN_OUT_OF_MEMORY, "out of memory converting node '%s'", nname);
    goto done;
  }
  for (size_t i = 0; i < n->n_attribute && !s; ++i)
    s = convert_attr(L, g, nname, n->attribute[i], &attrs[i], scratch, &n_scratch);
  if (s) goto done;
  if (!n->op_type || !n->op_type[0]) {
    s = kiln_make_status(KILN_INVALID_ARGUMENT, "%s: node '%s' has no op_type", L->path, nname);
    goto done;
  }
  /* the names subgraphs read from this scope become inputs of the node
   * too, after its own, in attribute order (ir/graph.h) */
  size_t n_in = n->n_input;
  for (size_t i = 0; i < n->n_attribute; ++i)
    if (attrs[i].type == KILN_ATTR_GRAPH && attrs[i].graph) n_in += (size_t)attrs[i].graph->n_outer;
  if (n_in > n->n_input) {
    const char** more = realloc(ins, sizeof(char*) * (n_in + 1));
    if (!more) {
      s = kiln_make_status(KILN_OUT_OF_MEMORY, "out of memory converting node '%s'", nname);
      goto done;
    }
    ins = more;
  }
  for (size_t i = 0; i < n->n_input; ++i) ins[i] = S(n->input[i]);
  for (size_t i = 0, k = n->n_input; i < n->n_attribute; ++i) {
    const kiln_graph_t* sub = attrs[i].type == KILN_ATTR_GRAPH ? attrs[i].graph : NULL;
    for (int32_t j = 0; sub && j < sub->n_outer; ++j)
      ins[k++] = sub->tensors[sub->inputs[sub->n_inputs - sub->n_outer + j]].name;
  }
  for (size_t i = 0; i < n->n_output; ++i) outs[i] = S(n->output[i]);
  int32_t ni;
  s = kiln_graph_add_node(g, S(n->op_type), n->name && n->name[0] ? n->name : NULL,
                          (int32_t)n_in, ins, (int32_t)n->n_output, outs,
                          (int32_t)n->n_attribute, attrs, &ni);
  if (s) {
    s = kiln_status_annotate(s, "%s", L->path);
    goto done;
  }
  if (n->domain && n->domain[0]) g->nodes[ni].domain = kiln_graph_strdup(g, n->domain);
done:
  for (int64_t i = 0; i < n_scratch; ++i) kiln_array_free(L->a, &scratch[i]);
  free(attrs);
  free(scratch);
  free(ins);
  free(outs);
  return s;
}

static kiln_status_t convert_graph(loader_t* L, const Onnx__ModelProto* m, kiln_graph_t* g) {
  const Onnx__GraphProto* gp = m->graph;
  if (!gp) return kiln_make_status(KILN_INVALID_ARGUMENT, "%s: model has no graph", L->path);
  if (m->n_opset_import == 0)
    return kiln_make_status(KILN_INVALID_ARGUMENT, "%s: model imports no opset", L->path);
  for (size_t i = 0; i < m->n_opset_import; ++i) {
    const Onnx__OperatorSetIdProto* o = m->opset_import[i];
    KILN_RETURN_IF_ERROR(kiln_graph_set_opset(g, S(o->domain), o->has_version ? o->version : 0));
  }
  return convert_graph_body(L, gp, g, false);
}

/* The graph |gp| into |g| (opsets set): the model's, or with |sub| a
 * subgraph of a node, whose inputs may leave their types to the node's
 * inference and whose outputs may name outer tensors. */
static kiln_status_t convert_graph_body(loader_t* L, const Onnx__GraphProto* gp, kiln_graph_t* g, bool sub) {
  g->name = kiln_graph_strdup(g, S(gp->name));
  if ((int64_t)gp->n_node > L->o->max_nodes)
    return kiln_make_status(KILN_LIMIT_EXCEEDED, "%s: graph has %zu nodes, over the limit of %lld",
                            L->path, gp->n_node, (long long)L->o->max_nodes);
  if (gp->n_sparse_initializer)
    return kiln_make_status(KILN_UNSUPPORTED, "%s: sparse initializers are not supported", L->path);
  for (size_t i = 0; i < gp->n_initializer; ++i) {
    const Onnx__TensorProto* t = gp->initializer[i];
    if (!t->name || !t->name[0])
      return kiln_make_status(KILN_INVALID_ARGUMENT, "%s: initializer #%zu has no name", L->path, i);
    kiln_array_t arr;
    KILN_RETURN_IF_ERROR(convert_tensor(L, t, t->name, &arr));
    KILN_RETURN_IF_ERROR(kiln_graph_add_initializer(g, t->name, &arr, NULL), "%s", L->path);
  }
  for (size_t i = 0; i < gp->n_input; ++i) {
    const Onnx__ValueInfoProto* v = gp->input[i];
    if (kiln_graph_find_tensor(g, S(v->name)) >= 0) {
      /* IR < 4 lists initializers as inputs too; the initializer wins (a
       * later duplicate input of the same name is an error). */
      int32_t t = kiln_graph_find_tensor(g, S(v->name));
      if (g->tensors[t].flags & KILN_TENSOR_INITIALIZER) continue;
      return kiln_make_status(KILN_INVALID_ARGUMENT, "%s: duplicate graph input '%s'", L->path,
                              S(v->name));
    }
    kiln_dtype_t dt;
    kiln_shape_t sh;
    KILN_RETURN_IF_ERROR(convert_value_info(L, g, v, "input", &dt, &sh));
    if (!v->type && !sub)
      return kiln_make_status(KILN_INVALID_ARGUMENT, "%s: graph input '%s' has no type", L->path,
                              S(v->name));
    KILN_RETURN_IF_ERROR(kiln_graph_add_input(g, S(v->name), dt, &sh, NULL), "%s", L->path);
  }
  for (size_t i = 0; i < gp->n_node; ++i) KILN_RETURN_IF_ERROR(convert_node(L, g, gp->node[i], i));
  for (size_t i = 0; i < gp->n_output; ++i) {
    kiln_dtype_t dt;
    kiln_shape_t sh;
    KILN_RETURN_IF_ERROR(convert_value_info(L, g, gp->output[i], "output", &dt, &sh));
    KILN_RETURN_IF_ERROR(kiln_graph_add_output(g, S(gp->output[i]->name)), "%s", L->path);
  }
  if (gp->n_output == 0)
    return kiln_make_status(KILN_INVALID_ARGUMENT, "%s: graph has no outputs", L->path);
  return NULL;
}

static char* dir_of(const char* path) {
  const char* slash = strrchr(path, '/');
  if (!slash) return strdup(".");
  if (slash == path) return strdup("/");
  return strndup(path, (size_t)(slash - path));
}

/* Reads `path` (at most the options' max_file_bytes) and decodes it as a
 * message of type `d` whose memory `budget` and `pa` account for; the file's
 * bytes are freed before returning either way. */
static kiln_status_t unpack_file(const char* path, const kiln_onnx_options_t* o,
                                 kiln_allocator_t allocator, const ProtobufCMessageDescriptor* d,
                                 pb_budget_t* budget, ProtobufCAllocator* pa,
                                 ProtobufCMessage** out) {
  uint8_t* data = NULL;
  size_t size = 0;
  bool mapped = false;
  KILN_RETURN_IF_ERROR(read_file(path, o->max_file_bytes, allocator, &data, &size, &mapped));
  kiln_status_t s = unpack(path, o, d, data, size, budget, pa, out);
  if (mapped) munmap(data, size);
  else kiln_allocator_free(allocator, data);
  return s;
}

kiln_status_t kiln_onnx_parse_model(const char* path, const kiln_onnx_options_t* options,
                                    kiln_allocator_t allocator, kiln_graph_t** out_graph) {
  kiln_onnx_options_t defaults;
  if (!options) {
    kiln_onnx_options_default(&defaults);
    options = &defaults;
  }
  pb_budget_t budget = {allocator, 0, 0, false, false};
  ProtobufCAllocator pa;
  ProtobufCMessage* msg = NULL;
  kiln_status_t s =
      unpack_file(path, options, allocator, &onnx__model_proto__descriptor, &budget, &pa, &msg);
  if (s) return s;
  const Onnx__ModelProto* m = (const Onnx__ModelProto*)msg;
  kiln_graph_t* g = NULL;
  char* dir = dir_of(path);
  if (!dir) s = kiln_make_status(KILN_OUT_OF_MEMORY, "out of memory");
  if (!s) s = kiln_graph_create(allocator, &g);
  if (!s) {
    g->source = kiln_graph_strdup(g, path);
    loader_t L = {path, dir, options, allocator, 0, 0};
    if (!m->graph && !m->has_ir_version && m->n_opset_import == 0)
      s = kiln_make_status(KILN_PARSE_ERROR, "%s: not an ONNX model (no graph, IR version or opset)",
                           path);
    else
      s = convert_graph(&L, m, g);
  }
  free(dir);
  protobuf_c_message_free_unpacked(msg, &pa);
  if (s) {
    kiln_graph_destroy(g);
    return s;
  }
  *out_graph = g;
  return NULL;
}

kiln_status_t kiln_onnx_load_model(const char* path, const kiln_onnx_options_t* options,
                                   kiln_allocator_t allocator, kiln_graph_t** out_graph) {
  kiln_graph_t* g = NULL;
  KILN_RETURN_IF_ERROR(kiln_onnx_parse_model(path, options, allocator, &g));
  kiln_status_t s = kiln_graph_prepare(g);
  if (s) {
    kiln_graph_destroy(g);
    return s;
  }
  *out_graph = g;
  return NULL;
}

kiln_status_t kiln_onnx_load_tensor(const char* path, const kiln_onnx_options_t* options,
                                    kiln_allocator_t allocator, kiln_array_t* out,
                                    char** out_name) {
  kiln_onnx_options_t defaults;
  if (!options) {
    kiln_onnx_options_default(&defaults);
    options = &defaults;
  }
  if (out_name) *out_name = NULL;
  pb_budget_t budget = {allocator, 0, 0, false, false};
  ProtobufCAllocator pa;
  ProtobufCMessage* msg = NULL;
  kiln_status_t s =
      unpack_file(path, options, allocator, &onnx__tensor_proto__descriptor, &budget, &pa, &msg);
  if (s) return s;
  const Onnx__TensorProto* t = (const Onnx__TensorProto*)msg;
  char* dir = dir_of(path);
  loader_t L = {path, dir ? dir : ".", options, allocator, 0, 0};
  s = convert_tensor(&L, t, "tensor", out);
  if (!s && out_name && t->name && t->name[0]) {
    *out_name = strdup(t->name);
    if (!*out_name) {
      kiln_array_free(allocator, out);
      s = kiln_make_status(KILN_OUT_OF_MEMORY, "out of memory");
    }
  }
  free(dir);
  protobuf_c_message_free_unpacked(msg, &pa);
  return s;
}
