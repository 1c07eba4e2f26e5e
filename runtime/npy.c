/* NumPy .npy reader/writer. The header is a Python dict literal; we parse
 * just the three keys the format defines and reject anything else. */
#include "kiln/npy.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

static const char* descr_of(kiln_dtype_t t) {
  switch (t) {
    case KILN_DTYPE_F32: return "<f4";
    case KILN_DTYPE_F16: return "<f2";
    case KILN_DTYPE_I8: return "|i1";
    case KILN_DTYPE_U8: return "|u1";
    case KILN_DTYPE_I32: return "<i4";
    case KILN_DTYPE_I64: return "<i8";
    case KILN_DTYPE_BOOL: return "|b1";
    case KILN_DTYPE_F64: return "<f8";
    case KILN_DTYPE_I16: return "<i2";
    case KILN_DTYPE_U16: return "<u2";
    case KILN_DTYPE_U32: return "<u4";
    case KILN_DTYPE_U64: return "<u8";
    default: return NULL;
  }
}

static kiln_status_t bad(const char* path, const char* why) {
  return kiln_make_status(KILN_PARSE_ERROR, "%s: not a valid .npy file: %s", path, why);
}

kiln_status_t kiln_npy_read(const char* path, kiln_allocator_t allocator, kiln_array_t* out) {
  return kiln_npy_read_with(path, NULL, allocator, out, NULL);
}

kiln_status_t kiln_npy_read_with(const char* path, const kiln_npy_read_options_t* options,
                                 kiln_allocator_t allocator, kiln_array_t* out,
                                 bool* out_converted_f64) {
  memset(out, 0, sizeof(*out));
  if (out_converted_f64) *out_converted_f64 = false;
  const uint64_t cap = options && options->max_bytes ? options->max_bytes : KILN_NPY_DEFAULT_MAX_BYTES;
  FILE* f = fopen(path, "rb");
  if (!f)
    return kiln_make_status(errno == ENOENT ? KILN_NOT_FOUND : KILN_IO_ERROR, "%s: cannot open: %s",
                            path, strerror(errno));
  unsigned char pre[10];
  kiln_status_t s = NULL;
  char* hdr = NULL;
  bool f64 = false;
  if (fread(pre, 1, 10, f) != 10 || memcmp(pre, "\x93NUMPY", 6) != 0) {
    s = bad(path, "missing magic");
    goto done;
  }
  size_t hlen;
  if (pre[6] == 1) {
    hlen = pre[8] | ((size_t)pre[9] << 8);
  } else if (pre[6] == 2 || pre[6] == 3) {
    unsigned char more[2];
    if (fread(more, 1, 2, f) != 2) {
      s = bad(path, "truncated header");
      goto done;
    }
    hlen = pre[8] | ((size_t)pre[9] << 8) | ((size_t)more[0] << 16) | ((size_t)more[1] << 24);
  } else {
    s = bad(path, "unknown format version");
    goto done;
  }
  if (hlen > (1 << 20)) {
    s = bad(path, "header too long");
    goto done;
  }
  hdr = calloc(1, hlen + 1);
  if (!hdr || fread(hdr, 1, hlen, f) != hlen) {
    s = bad(path, "truncated header");
    goto done;
  }
  const char* d = strstr(hdr, "'descr'");
  const char* fo = strstr(hdr, "'fortran_order'");
  const char* sh = strstr(hdr, "'shape'");
  if (!d || !fo || !sh) {
    s = bad(path, "header lacks descr/fortran_order/shape");
    goto done;
  }
  const char* fo_colon = strchr(fo, ':');
  if (!fo_colon) {
    s = bad(path, "fortran_order has no value");
    goto done;
  }
  if (strncmp(fo_colon + 1 + strspn(fo_colon + 1, " "), "False", 5) != 0) {
    s = kiln_make_status(KILN_UNSUPPORTED, "%s: Fortran-order arrays are not supported", path);
    goto done;
  }
  const char* q = strchr(d + 7, ':') ? strchr(strchr(d + 7, ':'), '\'') : NULL;
  if (!q) {
    s = bad(path, "bad descr");
    goto done;
  }
  char descr[16] = {0};
  const char* qe = strchr(q + 1, '\'');
  if (!qe || qe - q - 1 >= (long)sizeof descr) {
    s = bad(path, "bad descr");
    goto done;
  }
  memcpy(descr, q + 1, (size_t)(qe - q - 1));
  if (descr[0] == '>' && strcmp(descr + 1, "i1") != 0 && strcmp(descr + 1, "u1") != 0 &&
      strcmp(descr + 1, "b1") != 0) {
    s = kiln_make_status(KILN_UNSUPPORTED, "%s: big-endian dtype '%s' is not supported", path,
                         descr);
    goto done;
  }
  /* '<' little, '|' not applicable, '=' native (little on every kiln host). */
  if (descr[0] != '<' && descr[0] != '|' && descr[0] != '=' && descr[0] != '>') {
    s = kiln_make_status(KILN_UNSUPPORTED, "%s: dtype '%s' is not supported", path, descr);
    goto done;
  }
  kiln_dtype_t dt = KILN_DTYPE_UNDEFINED;
  for (int t = 1; t < KILN_DTYPE_COUNT_; ++t)
    if (descr_of((kiln_dtype_t)t) && strcmp(descr + 1, descr_of((kiln_dtype_t)t) + 1) == 0)
      dt = (kiln_dtype_t)t;
  if (dt == KILN_DTYPE_F64 && options && (options->refuse_f64 || options->f64_to_f32)) {
    if (options->refuse_f64) {
      s = kiln_make_status(KILN_UNSUPPORTED,
                           "%s: dtype '<f8' (float64) would be converted to float32, which is refused here",
                           path);
      goto done;
    }
    dt = KILN_DTYPE_F32;
    f64 = true;
  }
  if (dt == KILN_DTYPE_UNDEFINED) {
    s = kiln_make_status(KILN_UNSUPPORTED, "%s: dtype '%s' is not supported", path, descr);
    goto done;
  }
  const char* p = strchr(sh, '(');
  if (!p) {
    s = bad(path, "bad shape");
    goto done;
  }
  kiln_shape_t shape = kiln_shape_make(0, NULL);
  ++p;
  for (;;) {
    while (*p == ' ' || *p == ',') ++p;
    if (*p == ')') break;
    char* end;
    long long v = strtoll(p, &end, 10);
    if (end == p || v < 0) {
      s = bad(path, "bad shape");
      goto done;
    }
    if (shape.rank >= KILN_MAX_RANK) {
      s = kiln_make_status(KILN_UNSUPPORTED, "%s: rank above %d", path, KILN_MAX_RANK);
      goto done;
    }
    shape.dims[shape.rank++] = v;
    p = end;
    while (*p == 'L') ++p;
  }
  /* Size everything before allocating: a 128-byte file may claim gigabytes. */
  int64_t numel = 0;
  if ((s = kiln_shape_numel(&shape, &numel))) {
    s = kiln_status_annotate(s, "%s", path);
    goto done;
  }
  const uint64_t file_es = f64 ? 8 : kiln_dtype_size(dt);
  const uint64_t mem_es = kiln_dtype_size(dt);
  if ((uint64_t)numel > UINT64_MAX / file_es || (uint64_t)numel > cap / mem_es) {
    s = kiln_make_status(KILN_LIMIT_EXCEEDED,
                         "%s: the header's shape holds %lld elements of '%s', over the %llu-byte cap", path,
                         (long long)numel, descr, (unsigned long long)cap);
    goto done;
  }
  const uint64_t need = (uint64_t)numel * file_es;
  struct stat st;
  long here = ftell(f);
  if (here >= 0 && fstat(fileno(f), &st) == 0 && S_ISREG(st.st_mode) &&
      (st.st_size < here || need > (uint64_t)(st.st_size - here))) {
    s = kiln_make_status(KILN_PARSE_ERROR,
                         "%s: not a valid .npy file: truncated data (the header claims %llu bytes, the "
                         "file holds %lld after its header)",
                         path, (unsigned long long)need, (long long)(st.st_size - here));
    goto done;
  }
  if ((s = kiln_array_alloc(allocator, dt, &shape, out))) {
    s = kiln_status_annotate(s, "%s", path);
    goto done;
  }
  size_t n = (size_t)numel;
  if (f64) {
    /* Converted in chunks: no second array the size of the data. */
    double tmp[4096];
    for (size_t i = 0; i < n && !s;) {
      size_t c = n - i < 4096 ? n - i : 4096;
      if (fread(tmp, 8, c, f) != c) s = bad(path, "truncated data");
      for (size_t j = 0; j < c && !s; ++j) ((float*)out->data)[i + j] = (float)tmp[j];
      i += c;
    }
    if (!s && out_converted_f64) *out_converted_f64 = true;
  } else if (out->nbytes && fread(out->data, 1, out->nbytes, f) != out->nbytes) {
    s = bad(path, "truncated data");
  }
  if (s) kiln_array_free(allocator, out);
done:
  free(hdr);
  fclose(f);
  return s;
}

kiln_status_t kiln_npy_write(const char* path, const kiln_array_t* arr) {
  const char* descr = descr_of(arr->dtype);
  if (!descr) return kiln_make_status(KILN_INVALID_ARGUMENT, "%s: cannot write dtype", path);
  /* KILN_MAX_RANK dims of at most 20 digits fit both buffers; the checks
   * keep a miscount from writing or reading past them. */
  char shape[256];
  size_t o = 0;
  if (arr->shape.rank < 0 || arr->shape.rank > KILN_MAX_RANK)
    return kiln_make_status(KILN_INVALID_ARGUMENT, "%s: cannot write rank %d", path, (int)arr->shape.rank);
  o += (size_t)snprintf(shape + o, sizeof shape - o, "(");
  for (int32_t i = 0; i < arr->shape.rank && o < sizeof shape; ++i)
    o += (size_t)snprintf(shape + o, sizeof shape - o, "%lld,%s", (long long)arr->shape.dims[i],
                          i + 1 < arr->shape.rank ? " " : "");
  if (o >= sizeof shape - 2) return kiln_make_status(KILN_INTERNAL, "%s: shape text too long", path);
  if (arr->shape.rank > 1) --o; /* numpy writes (2, 3) but (4,) */
  snprintf(shape + o, sizeof shape - o, ")");
  char hdr[512];
  int n = snprintf(hdr, sizeof hdr, "{'descr': '%s', 'fortran_order': False, 'shape': %s, }", descr,
                   shape);
  if (n < 0 || (size_t)n >= sizeof hdr) return kiln_make_status(KILN_INTERNAL, "%s: header too long", path);
  size_t total = 10 + (size_t)n + 1;
  size_t pad = (64 - total % 64) % 64;
  FILE* f = fopen(path, "wb");
  if (!f)
    return kiln_make_status(KILN_IO_ERROR, "%s: cannot create: %s", path, strerror(errno));
  size_t hl = (size_t)n + pad + 1;
  unsigned char pre[10] = {0x93, 'N', 'U', 'M', 'P', 'Y', 1, 0, (unsigned char)(hl & 0xff),
                           (unsigned char)(hl >> 8)};
  bool ok = fwrite(pre, 1, 10, f) == 10 && fwrite(hdr, 1, (size_t)n, f) == (size_t)n;
  for (size_t i = 0; i < pad && ok; ++i) ok = fputc(' ', f) != EOF;
  ok = ok && fputc('\n', f) != EOF;
  size_t bytes = (size_t)kiln_shape_count(&arr->shape) * kiln_dtype_size(arr->dtype);
  ok = ok && (bytes == 0 || fwrite(arr->data, 1, bytes, f) == bytes);
  if (fclose(f) != 0) ok = false;
  if (!ok) return kiln_make_status(KILN_IO_ERROR, "%s: write failed", path);
  return NULL;
}
