/* light/ suite staging for kiln_conformance: see conformance_light.h. */
#define _GNU_SOURCE
#include "conformance_light.h"

#include <dirent.h>
#include <errno.h>
#include <stdarg.h>
#include <limits.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "frontend/onnx.h"
#include "ir/graph.h"

static const char PREFIX[] = "light_";
static const char SUFFIX[] = ".onnx";

static size_t put_varint(uint8_t* p, uint64_t v) {
  size_t n = 0;
  do {
    p[n++] = (uint8_t)((v & 0x7f) | (v > 0x7f ? 0x80 : 0));
    v >>= 7;
  } while (v);
  return n;
}

/* The runner's dummy input: arange(n).reshape(shape) / n, computed in
 * float64 then cast to float32 as numpy does, written as a TensorProto
 * (dims = field 1, data_type = field 2, raw_data = field 9, little-endian). */
static kiln_status_t write_input(const char* path, const kiln_shape_t* shape) {
  int64_t n = 1;
  for (int32_t d = 0; d < shape->rank; ++d) n *= shape->dims[d];
  size_t raw = (size_t)n * 4;
  uint8_t* buf = malloc(raw + 16 + 11 * (size_t)shape->rank + 8);
  if (!buf) return kiln_make_status(KILN_OUT_OF_MEMORY, "%s: out of memory", path);
  size_t o = 0;
  for (int32_t d = 0; d < shape->rank; ++d) {
    buf[o++] = 0x08;
    o += put_varint(buf + o, (uint64_t)shape->dims[d]);
  }
  buf[o++] = 0x10;
  buf[o++] = 1; /* FLOAT */
  buf[o++] = 0x4a;
  o += put_varint(buf + o, raw);
  for (int64_t i = 0; i < n; ++i) {
    float f = (float)((double)i / (double)n);
    uint32_t u;
    memcpy(&u, &f, 4);
    for (int b = 0; b < 4; ++b) buf[o++] = (uint8_t)(u >> (8 * b));
  }
  FILE* fp = fopen(path, "wb");
  bool ok = fp && fwrite(buf, 1, o, fp) == o;
  if (fp && fclose(fp) != 0) ok = false;
  free(buf);
  if (!ok) return kiln_make_status(KILN_IO_ERROR, "%s: cannot write: %s", path, strerror(errno));
  return NULL;
}

/* snprintf into a PATH_MAX buffer; a path that does not fit is an error. */
static kiln_status_t fmt_path(char* out, const char* fmt, ...) {
  va_list ap;
  va_start(ap, fmt);
  int n = vsnprintf(out, PATH_MAX, fmt, ap);
  va_end(ap);
  if (n < 0 || n >= PATH_MAX)
    return kiln_make_status(KILN_LIMIT_EXCEEDED, "light: a staged path is longer than %d bytes",
                            PATH_MAX);
  return NULL;
}

static kiln_status_t make_dir(const char* path) {
  if (mkdir(path, 0700) != 0)
    return kiln_make_status(KILN_IO_ERROR, "%s: cannot create: %s", path, strerror(errno));
  return NULL;
}

static kiln_status_t make_link(const char* target, const char* path) {
  if (symlink(target, path) != 0)
    return kiln_make_status(KILN_IO_ERROR, "%s: cannot link to %s: %s", path, target,
                            strerror(errno));
  return NULL;
}

/* One model: the case folder, its model link, inputs and expected outputs. */
static kiln_status_t stage_model(const char* src_dir, const char* name, const char* out_dir) {
  char path[PATH_MAX], src[PATH_MAX], sub[PATH_MAX];
  size_t base = strlen(name) - (sizeof SUFFIX - 1); /* "light_<name>" */
  KILN_RETURN_IF_ERROR(fmt_path(sub, "%s/test_%.*s", out_dir, (int)base, name));
  KILN_RETURN_IF_ERROR(make_dir(sub));
  KILN_RETURN_IF_ERROR(fmt_path(src, "%s/%s", src_dir, name));
  KILN_RETURN_IF_ERROR(fmt_path(path, "%s/model.onnx", sub));
  KILN_RETURN_IF_ERROR(make_link(src, path));
  KILN_RETURN_IF_ERROR(fmt_path(path, "%s/test_data_set_0", sub));
  KILN_RETURN_IF_ERROR(make_dir(path));
  kiln_graph_t* g = NULL;
  KILN_RETURN_IF_ERROR(kiln_onnx_parse_model(src, NULL, kiln_allocator_system(), &g));
  kiln_status_t s = NULL;
  for (int32_t i = 0; i < g->n_inputs && !s; ++i) {
    const kiln_tensor_t* t = &g->tensors[g->inputs[i]];
    kiln_shape_t shape = t->shape;
    if (t->dtype != KILN_DTYPE_F32 || shape.rank < 0) {
      /* The onnx runner makes float inputs of known rank only. */
      s = kiln_make_status(KILN_UNSUPPORTED, "%s: input '%s': no dummy data for a %s input%s",
                           src, t->name, kiln_dtype_name(t->dtype),
                           shape.rank < 0 ? " of unknown rank" : "");
      break;
    }
    for (int32_t d = 0; d < shape.rank; ++d)
      if (shape.dims[d] < 0) shape.dims[d] = 1;
    s = fmt_path(path, "%s/test_data_set_0/input_%d.pb", sub, i);
    if (!s) s = write_input(path, &shape);
  }
  for (int32_t k = 0; k < g->n_outputs && !s; ++k) {
    s = fmt_path(src, "%s/%.*s_output_%d.pb", src_dir, (int)base, name, k);
    if (!s) s = fmt_path(path, "%s/test_data_set_0/output_%d.pb", sub, k);
    if (s) break;
    if (access(src, R_OK) != 0)
      s = kiln_make_status(KILN_NOT_FOUND, "%s: expected output %d not found", src, k);
    else
      s = make_link(src, path);
  }
  kiln_graph_destroy(g);
  return s;
}

kiln_status_t light_stage(const char* light_dir, char* out_dir, size_t n) {
  char src_dir[PATH_MAX];
  if (!realpath(light_dir, src_dir))
    return kiln_make_status(KILN_NOT_FOUND, "%s: %s", light_dir, strerror(errno));
  const char* tmp = getenv("TMPDIR");
  snprintf(out_dir, n, "%s/kiln_light_XXXXXX", tmp && *tmp ? tmp : "/tmp");
  if (!mkdtemp(out_dir))
    return kiln_make_status(KILN_IO_ERROR, "%s: cannot create: %s", out_dir, strerror(errno));
  DIR* d = opendir(src_dir);
  if (!d) {
    light_unstage(out_dir);
    return kiln_make_status(KILN_NOT_FOUND, "%s: cannot open: %s", src_dir, strerror(errno));
  }
  kiln_status_t s = NULL;
  int models = 0;
  struct dirent* e;
  while (!s && (e = readdir(d))) {
    size_t len = strlen(e->d_name);
    if (len <= sizeof PREFIX - 1 + sizeof SUFFIX - 1 || strncmp(e->d_name, PREFIX, sizeof PREFIX - 1) ||
        strcmp(e->d_name + len - (sizeof SUFFIX - 1), SUFFIX))
      continue;
    s = stage_model(src_dir, e->d_name, out_dir);
    ++models;
  }
  closedir(d);
  if (!s && models == 0)
    s = kiln_make_status(KILN_NOT_FOUND, "%s: no light_*.onnx models", src_dir);
  if (s) light_unstage(out_dir);
  return s;
}

/* The staged tree is two levels of folders holding links and small files. */
static void remove_tree(const char* path, int depth) {
  DIR* d = depth < 4 ? opendir(path) : NULL;
  struct dirent* e;
  while (d && (e = readdir(d))) {
    if (!strcmp(e->d_name, ".") || !strcmp(e->d_name, "..")) continue;
    char sub[PATH_MAX];
    struct stat st;
    kiln_status_t s = fmt_path(sub, "%s/%s", path, e->d_name);
    if (s) { /* longer than any path light_stage makes: not ours */
      kiln_status_free(s);
      continue;
    }
    if (lstat(sub, &st) == 0 && S_ISDIR(st.st_mode))
      remove_tree(sub, depth + 1);
    else
      unlink(sub);
  }
  if (d) closedir(d);
  rmdir(path);
}

void light_unstage(const char* staged_dir) {
  if (staged_dir && *staged_dir) remove_tree(staged_dir, 0);
}

void light_tolerance(const char* case_name, double* rtol, double* atol) {
  *rtol = strstr(case_name, "densenet121") ? 2e-3 : 1e-3;
  *atol = 1e-7;
}
