/* Helpers for the bad-input suites (test_bad_*.c): BAD_INPUTS.md rows 1-14
 * and 21.
 *
 * - bm_model_t builds hostile ONNX models in C through the protobuf-c structs
 *   (every allocation is recorded and freed by bm_free), bm_write packs one.
 * - bm_counter_t is a counting/failing allocator: peak bytes prove "error
 *   before allocating" and bounded memory; live bytes prove nothing leaked
 *   through kiln's allocator; fail_at injects out-of-memory.
 * - CHECK_ERR_ALL checks a status's code and that its message holds every
 *   given substring (the file, the node/tensor and the reason).
 * - bm_isolated runs a check in a child process with a timeout, so a crash,
 *   sanitizer abort or hang in kiln fails that check, not the whole suite.
 * - bm_tmpdir / bm_rmtree: a fresh folder under /tmp per suite.
 *
 * Header-only (static functions): tests/CMakeLists.txt compiles only
 * test_*.c files. Not thread-safe.
 */
#ifndef KILN_TESTS_BAD_MODEL_UTIL_H_
#define KILN_TESTS_BAD_MODEL_UTIL_H_

#ifndef _GNU_SOURCE
#define _GNU_SOURCE 1
#endif
#include <errno.h>
#include <fcntl.h>
#include <ftw.h>
#include <signal.h>
#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/types.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "frontend/onnx.h"
#include "onnx/onnx.pb-c.h"
#include "compiler/ref_exec.h"
#include "testing.h"

/* Not every suite uses every helper. */
#define BM_API static __attribute__((unused))

/* ONNX TensorProto.DataType numbers used by the suites. */
enum {
  BM_UNDEFINED = 0,
  BM_F32 = 1,
  BM_U8 = 2,
  BM_I8 = 3,
  BM_I32 = 6,
  BM_I64 = 7,
  BM_STRING = 8,
  BM_BOOL = 9,
  BM_F16 = 10,
  BM_DOUBLE = 11,
  BM_BFLOAT16 = 16, /* a type kiln does not have */
};

/* ---- error checks ------------------------------------------------------- */

/* Consumes |s|: it must have failed with |code| (any when code < 0) and its
 * message must contain every needle of the NULL-terminated list. */
BM_API int bm_check_err_all(kiln_status_t s, int code, const char* expr, const char* file,
                            int line, ...) {
  ++kiln_test_checks;
  if (!s) {
    kiln_test_fail(file, line, "%s succeeded, expected %s", expr,
                   code >= 0 ? kiln_status_code_name((kiln_status_code_t)code) : "an error");
    return 0;
  }
  int ok = 1;
  const char* msg = kiln_status_message(s);
  if (code >= 0 && (int)kiln_status_code(s) != code) {
    kiln_test_fail(file, line, "%s: code %s, expected %s (message: %s)", expr,
                   kiln_status_code_name(kiln_status_code(s)),
                   kiln_status_code_name((kiln_status_code_t)code), msg);
    ok = 0;
  }
  va_list ap;
  va_start(ap, line);
  for (const char* n = va_arg(ap, const char*); n; n = va_arg(ap, const char*)) {
    if (!strstr(msg, n)) {
      kiln_test_fail(file, line, "%s: message '%s' lacks '%s'", expr, msg, n);
      ok = 0;
    }
  }
  va_end(ap);
  kiln_status_free(s);
  return ok;
}

#define CHECK_ERR_ALL(expr, code, ...) \
  bm_check_err_all((expr), (code), #expr, __FILE__, __LINE__, __VA_ARGS__, (const char*)NULL)

/* ---- counting / failing allocator --------------------------------------- */

typedef struct bm_counter_s {
  size_t live, peak;     /* bytes */
  int64_t n_allocs;      /* successful alloc + realloc calls */
  int64_t n_calls;       /* all alloc + realloc calls */
  int64_t fail_at;       /* the call with this index (0-based) fails; -1 never */
  bool fail_after;       /* with fail_at: every later call fails too */
  size_t cap;            /* a request that would take |live| past cap fails; 0 none */
  int64_t n_failed;
} bm_counter_t;

#define BM_HDR 16 /* keeps 16-byte alignment */

BM_API bool bm_should_fail(bm_counter_t* c, size_t grow) {
  int64_t k = c->n_calls++;
  if (c->fail_at >= 0 && (k == c->fail_at || (c->fail_after && k > c->fail_at))) return true;
  if (c->cap && grow > c->cap - (c->live < c->cap ? c->live : c->cap)) return true;
  return false;
}

BM_API void* bm_c_alloc(void* self, size_t size) {
  bm_counter_t* c = self;
  if (bm_should_fail(c, size) || size > SIZE_MAX - BM_HDR) {
    c->n_failed++;
    return NULL;
  }
  unsigned char* p = malloc(size + BM_HDR);
  if (!p) return NULL;
  memcpy(p, &size, sizeof size);
  c->live += size;
  if (c->live > c->peak) c->peak = c->live;
  c->n_allocs++;
  return p + BM_HDR;
}

BM_API void bm_c_free(void* self, void* ptr) {
  if (!ptr) return;
  bm_counter_t* c = self;
  unsigned char* p = (unsigned char*)ptr - BM_HDR;
  size_t size;
  memcpy(&size, p, sizeof size);
  c->live -= size;
  free(p);
}

BM_API void* bm_c_realloc(void* self, void* ptr, size_t size) {
  bm_counter_t* c = self;
  if (!ptr) return bm_c_alloc(self, size);
  unsigned char* p = (unsigned char*)ptr - BM_HDR;
  size_t old;
  memcpy(&old, p, sizeof old);
  if (bm_should_fail(c, size > old ? size - old : 0) || size > SIZE_MAX - BM_HDR) {
    c->n_failed++;
    return NULL;
  }
  unsigned char* q = realloc(p, size + BM_HDR);
  if (!q) return NULL;
  memcpy(q, &size, sizeof size);
  c->live = c->live - old + size;
  if (c->live > c->peak) c->peak = c->live;
  c->n_allocs++;
  return q + BM_HDR;
}

BM_API kiln_allocator_t bm_counting(bm_counter_t* c) {
  memset(c, 0, sizeof(*c));
  c->fail_at = -1;
  kiln_allocator_t a = {c, bm_c_alloc, bm_c_realloc, bm_c_free};
  return a;
}

/* ---- temp folders and raw files ------------------------------------------ */

BM_API int bm_rm_one(const char* p, const struct stat* st, int flag, struct FTW* ftw) {
  (void)st;
  (void)ftw;
  if (flag == FTW_DP) {
    chmod(p, 0700); /* in case a test made it unreadable */
    rmdir(p);
    return 0;
  }
  unlink(p);
  return 0;
}

/* Removes |dir| and everything in it (symlinks are removed, not followed). */
BM_API void bm_rmtree(const char* dir) {
  if (dir && dir[0]) nftw(dir, bm_rm_one, 16, FTW_DEPTH | FTW_PHYS);
}

/* Creates a fresh folder /tmp/kiln_<tag>_XXXXXX into |out| (>= 256 bytes). */
BM_API bool bm_tmpdir(const char* tag, char* out, size_t n) {
  snprintf(out, n, "/tmp/kiln_%s_XXXXXX", tag);
  return mkdtemp(out) != NULL;
}

/* |dir|/|name| into a rotating static buffer (8 live at once). */
BM_API const char* bm_path(const char* dir, const char* name) {
  static char bufs[8][1024];
  static int k = 0;
  char* b = bufs[k++ & 7];
  snprintf(b, sizeof bufs[0], "%s/%s", dir, name);
  return b;
}

BM_API bool bm_write_bytes(const char* path, const void* data, size_t n) {
  FILE* f = fopen(path, "wb");
  if (!f) return false;
  bool ok = (n == 0 || fwrite(data, 1, n, f) == n);
  return fclose(f) == 0 && ok;
}

/* Reads a whole file (malloc'd) or returns NULL. */
BM_API unsigned char* bm_read_bytes(const char* path, size_t* out_n) {
  FILE* f = fopen(path, "rb");
  if (!f) return NULL;
  fseek(f, 0, SEEK_END);
  long n = ftell(f);
  fseek(f, 0, SEEK_SET);
  unsigned char* b = malloc(n > 0 ? (size_t)n : 1);
  if (b && n > 0 && fread(b, 1, (size_t)n, f) != (size_t)n) {
    free(b);
    b = NULL;
  }
  fclose(f);
  if (b) *out_n = (size_t)(n > 0 ? n : 0);
  return b;
}

/* ---- protobuf wire helpers (for raw hostile bytes) ----------------------- */

/* Appends a varint to |p| (at least 10 bytes free); returns bytes written. */
BM_API size_t bm_varint(uint8_t* p, uint64_t v) {
  size_t n = 0;
  do {
    uint8_t b = v & 0x7f;
    v >>= 7;
    p[n++] = b | (v ? 0x80 : 0);
  } while (v);
  return n;
}

BM_API size_t bm_varint_len(uint64_t v) {
  size_t n = 1;
  while (v >= 0x80) {
    v >>= 7;
    ++n;
  }
  return n;
}

/* ---- model builder -------------------------------------------------------- */

#define BM_CAP 1024 /* nodes, inputs, outputs, initializers per graph */

typedef struct bm_model_s {
  Onnx__ModelProto m;
  Onnx__GraphProto g;
  void** owned;
  size_t n_owned, cap_owned;
} bm_model_t;

BM_API void* bm_own(bm_model_t* b, void* p) {
  if (!p) {
    fprintf(stderr, "bad_model_util: out of memory\n");
    abort(); /* test infrastructure, not kiln */
  }
  if (b->n_owned == b->cap_owned) {
    b->cap_owned = b->cap_owned ? b->cap_owned * 2 : 64;
    b->owned = realloc(b->owned, sizeof(void*) * b->cap_owned);
    if (!b->owned) abort();
  }
  b->owned[b->n_owned++] = p;
  return p;
}

BM_API void* bm_alloc(bm_model_t* b, size_t n) { return bm_own(b, calloc(1, n ? n : 1)); }
BM_API char* bm_str(bm_model_t* b, const char* s) { return bm_own(b, strdup(s ? s : "")); }

BM_API void bm_free(bm_model_t* b) {
  for (size_t i = 0; i < b->n_owned; ++i) free(b->owned[i]);
  free(b->owned);
  memset(b, 0, sizeof(*b));
}

/* Adds an opset import; domain "" is ai.onnx. */
BM_API void bm_opset(bm_model_t* b, const char* domain, int64_t version) {
  Onnx__OperatorSetIdProto* o = bm_alloc(b, sizeof(*o));
  onnx__operator_set_id_proto__init(o);
  o->domain = bm_str(b, domain);
  o->has_version = 1;
  o->version = version;
  b->m.opset_import[b->m.n_opset_import++] = o;
}

/* A model with IR version 8 and ai.onnx |opset| (0: no opset import). */
BM_API void bm_init(bm_model_t* b, int64_t opset) {
  memset(b, 0, sizeof(*b));
  onnx__model_proto__init(&b->m);
  onnx__graph_proto__init(&b->g);
  b->m.has_ir_version = 1;
  b->m.ir_version = 8;
  b->m.producer_name = bm_str(b, "kiln-bad-input-tests");
  b->m.graph = &b->g;
  b->g.name = bm_str(b, "bad");
  b->m.opset_import = bm_alloc(b, sizeof(void*) * BM_CAP);
  b->g.node = bm_alloc(b, sizeof(void*) * BM_CAP);
  b->g.input = bm_alloc(b, sizeof(void*) * BM_CAP);
  b->g.output = bm_alloc(b, sizeof(void*) * BM_CAP);
  b->g.initializer = bm_alloc(b, sizeof(void*) * BM_CAP);
  if (opset > 0) bm_opset(b, "", opset);
}

/* A ValueInfoProto. elem_type < 0: no type at all. rank < 0: no shape.
 * params[i] (optional) non-NULL makes dim i a dim_param. */
BM_API Onnx__ValueInfoProto* bm_value(bm_model_t* b, const char* name, int elem_type,
                                      int rank, const int64_t* dims,
                                      const char* const* params) {
  Onnx__ValueInfoProto* v = bm_alloc(b, sizeof(*v));
  onnx__value_info_proto__init(v);
  v->name = bm_str(b, name);
  if (elem_type < 0) return v;
  Onnx__TypeProto* tp = bm_alloc(b, sizeof(*tp));
  onnx__type_proto__init(tp);
  Onnx__TypeProto__Tensor* tt = bm_alloc(b, sizeof(*tt));
  onnx__type_proto__tensor__init(tt);
  tt->has_elem_type = 1;
  tt->elem_type = elem_type;
  tp->value_case = ONNX__TYPE_PROTO__VALUE_TENSOR_TYPE;
  tp->tensor_type = tt;
  v->type = tp;
  if (rank < 0) return v;
  Onnx__TensorShapeProto* sh = bm_alloc(b, sizeof(*sh));
  onnx__tensor_shape_proto__init(sh);
  sh->n_dim = (size_t)rank;
  sh->dim = bm_alloc(b, sizeof(void*) * (size_t)(rank + 1));
  for (int i = 0; i < rank; ++i) {
    Onnx__TensorShapeProto__Dimension* d = bm_alloc(b, sizeof(*d));
    onnx__tensor_shape_proto__dimension__init(d);
    if (params && params[i]) {
      d->value_case = ONNX__TENSOR_SHAPE_PROTO__DIMENSION__VALUE_DIM_PARAM;
      d->dim_param = bm_str(b, params[i]);
    } else {
      d->value_case = ONNX__TENSOR_SHAPE_PROTO__DIMENSION__VALUE_DIM_VALUE;
      d->dim_value = dims[i];
    }
    sh->dim[i] = d;
  }
  tt->shape = sh;
  return v;
}

BM_API Onnx__ValueInfoProto* bm_input(bm_model_t* b, const char* name, int elem_type, int rank,
                                      const int64_t* dims) {
  Onnx__ValueInfoProto* v = bm_value(b, name, elem_type, rank, dims, NULL);
  b->g.input[b->g.n_input++] = v;
  return v;
}

/* A graph output with no declared type (inference fills it). */
BM_API Onnx__ValueInfoProto* bm_output(bm_model_t* b, const char* name) {
  Onnx__ValueInfoProto* v = bm_value(b, name, -1, -1, NULL, NULL);
  b->g.output[b->g.n_output++] = v;
  return v;
}

/* A TensorProto with raw_data (|data| may be NULL with nbytes 0: no data
 * field at all). */
BM_API Onnx__TensorProto* bm_tensor(bm_model_t* b, const char* name, int data_type, int rank,
                                    const int64_t* dims, const void* data, size_t nbytes) {
  Onnx__TensorProto* t = bm_alloc(b, sizeof(*t));
  onnx__tensor_proto__init(t);
  if (name) t->name = bm_str(b, name);
  t->has_data_type = 1;
  t->data_type = data_type;
  t->n_dims = (size_t)rank;
  t->dims = bm_alloc(b, sizeof(int64_t) * (size_t)(rank + 1));
  for (int i = 0; i < rank; ++i) t->dims[i] = dims[i];
  if (data) {
    t->has_raw_data = 1;
    t->raw_data.len = nbytes;
    t->raw_data.data = bm_alloc(b, nbytes);
    memcpy(t->raw_data.data, data, nbytes);
  }
  return t;
}

BM_API Onnx__TensorProto* bm_initializer(bm_model_t* b, const char* name, int data_type,
                                         int rank, const int64_t* dims, const void* data,
                                         size_t nbytes) {
  Onnx__TensorProto* t = bm_tensor(b, name, data_type, rank, dims, data, nbytes);
  b->g.initializer[b->g.n_initializer++] = t;
  return t;
}

/* f32 initializer with values 0.5, 1.0, 1.5, ... */
BM_API Onnx__TensorProto* bm_init_f32(bm_model_t* b, const char* name, int rank,
                                      const int64_t* dims) {
  int64_t n = 1;
  for (int i = 0; i < rank; ++i) n *= dims[i];
  float* v = bm_alloc(b, sizeof(float) * (size_t)(n ? n : 1));
  for (int64_t i = 0; i < n; ++i) v[i] = 0.5f * (float)(i % 7 + 1);
  return bm_initializer(b, name, BM_F32, rank, dims, v, sizeof(float) * (size_t)n);
}

BM_API Onnx__TensorProto* bm_init_i64(bm_model_t* b, const char* name, int rank,
                                      const int64_t* dims, const int64_t* values) {
  int64_t n = 1;
  for (int i = 0; i < rank; ++i) n *= dims[i];
  return bm_initializer(b, name, BM_I64, rank, dims, values, sizeof(int64_t) * (size_t)n);
}

/* Adds external_data key/value to |t| (and marks it EXTERNAL). */
BM_API void bm_external(bm_model_t* b, Onnx__TensorProto* t, const char* key,
                        const char* value) {
  if (!t->external_data) t->external_data = bm_alloc(b, sizeof(void*) * 16);
  Onnx__StringStringEntryProto* e = bm_alloc(b, sizeof(*e));
  onnx__string_string_entry_proto__init(e);
  e->key = bm_str(b, key);
  e->value = bm_str(b, value);
  t->external_data[t->n_external_data++] = e;
  t->has_data_location = 1;
  t->data_location = ONNX__TENSOR_PROTO__DATA_LOCATION__EXTERNAL;
}

/* Splits "a,b,,c" into names ("" = omitted optional); "" gives none. */
BM_API char** bm_names(bm_model_t* b, const char* list, size_t* out_n) {
  *out_n = 0;
  if (!list || !list[0]) return bm_alloc(b, sizeof(char*));
  size_t n = 1;
  for (const char* c = list; *c; ++c) n += (*c == ',');
  char** v = bm_alloc(b, sizeof(char*) * (n + 1));
  const char* s = list;
  for (size_t i = 0; i < n; ++i) {
    const char* e = strchr(s, ',');
    size_t len = e ? (size_t)(e - s) : strlen(s);
    v[i] = bm_alloc(b, len + 1);
    memcpy(v[i], s, len);
    s = e ? e + 1 : s + len;
  }
  *out_n = n;
  return v;
}

/* Adds a node: bm_node(b, "Conv", "conv0", "x,w", "y"). */
BM_API Onnx__NodeProto* bm_node(bm_model_t* b, const char* op, const char* name,
                                const char* inputs, const char* outputs) {
  Onnx__NodeProto* n = bm_alloc(b, sizeof(*n));
  onnx__node_proto__init(n);
  n->op_type = bm_str(b, op);
  if (name) n->name = bm_str(b, name);
  n->input = bm_names(b, inputs, &n->n_input);
  n->output = bm_names(b, outputs, &n->n_output);
  n->attribute = bm_alloc(b, sizeof(void*) * 32);
  b->g.node[b->g.n_node++] = n;
  return n;
}

BM_API Onnx__AttributeProto* bm_attr(bm_model_t* b, Onnx__NodeProto* n, const char* name,
                                     Onnx__AttributeProto__AttributeType type) {
  Onnx__AttributeProto* a = bm_alloc(b, sizeof(*a));
  onnx__attribute_proto__init(a);
  a->name = bm_str(b, name);
  a->has_type = 1;
  a->type = type;
  n->attribute[n->n_attribute++] = a;
  return a;
}

BM_API void bm_attr_int(bm_model_t* b, Onnx__NodeProto* n, const char* name, int64_t v) {
  Onnx__AttributeProto* a = bm_attr(b, n, name, ONNX__ATTRIBUTE_PROTO__ATTRIBUTE_TYPE__INT);
  a->has_i = 1;
  a->i = v;
}

BM_API void bm_attr_ints(bm_model_t* b, Onnx__NodeProto* n, const char* name, size_t count,
                         const int64_t* v) {
  Onnx__AttributeProto* a = bm_attr(b, n, name, ONNX__ATTRIBUTE_PROTO__ATTRIBUTE_TYPE__INTS);
  a->n_ints = count;
  a->ints = bm_alloc(b, sizeof(int64_t) * (count + 1));
  memcpy(a->ints, v, sizeof(int64_t) * count);
}

BM_API void bm_attr_tensor(bm_model_t* b, Onnx__NodeProto* n, const char* name,
                           Onnx__TensorProto* t) {
  Onnx__AttributeProto* a = bm_attr(b, n, name, ONNX__ATTRIBUTE_PROTO__ATTRIBUTE_TYPE__TENSOR);
  a->t = t;
}

/* Serializes the model to |path|. */
BM_API bool bm_write(bm_model_t* b, const char* path) {
  size_t n = onnx__model_proto__get_packed_size(&b->m);
  uint8_t* buf = malloc(n ? n : 1);
  if (!buf) return false;
  onnx__model_proto__pack(&b->m, buf);
  bool ok = bm_write_bytes(path, buf, n);
  free(buf);
  return ok;
}

/* ---- loading -------------------------------------------------------------- */

/* Loads |path| (parse + prepare) with |o| (NULL: defaults) and the system
 * allocator; the graph of an unexpected success is destroyed. */
BM_API kiln_status_t bm_load(const char* path, const kiln_onnx_options_t* o) {
  kiln_graph_t* g = NULL;
  kiln_status_t s = kiln_onnx_load_model(path, o, kiln_allocator_system(), &g);
  kiln_graph_destroy(g);
  return s;
}

/* Parse only (no inference). */
BM_API kiln_status_t bm_parse(const char* path, const kiln_onnx_options_t* o) {
  kiln_graph_t* g = NULL;
  kiln_status_t s = kiln_onnx_parse_model(path, o, kiln_allocator_system(), &g);
  kiln_graph_destroy(g);
  return s;
}

/* Writes |b| to |path| and loads it. */
BM_API kiln_status_t bm_write_load(bm_model_t* b, const char* path,
                                   const kiln_onnx_options_t* o) {
  if (!bm_write(b, path)) return kiln_make_status(KILN_IO_ERROR, "test: cannot write %s", path);
  return bm_load(path, o);
}

/* ---- isolation ------------------------------------------------------------ */

/* Runs fn(arg) in a child process. The child exits 0 when fn recorded no
 * check failures. Returns true when the child exited 0 within |timeout_s|;
 * otherwise records a failure describing the crash, abort or hang. */
BM_API bool bm_isolated_(void (*fn)(void*), void* arg, int timeout_s, const char* what,
                         const char* file, int line) {
  fflush(stdout);
  fflush(stderr);
  ++kiln_test_checks;
  pid_t pid = fork();
  if (pid < 0) {
    kiln_test_fail(file, line, "%s: fork failed", what);
    return false;
  }
  if (pid == 0) {
    int before = kiln_test_failures;
    fn(arg);
    fflush(stdout);
    fflush(stderr);
    exit(kiln_test_failures != before ? 1 : 0);
  }
  int st = 0;
  struct timespec t0, t1;
  clock_gettime(CLOCK_MONOTONIC, &t0);
  for (;;) {
    pid_t r = waitpid(pid, &st, WNOHANG);
    if (r == pid) break;
    clock_gettime(CLOCK_MONOTONIC, &t1);
    if (t1.tv_sec - t0.tv_sec >= timeout_s) {
      kill(pid, SIGKILL);
      waitpid(pid, &st, 0);
      kiln_test_fail(file, line, "%s: did not finish within %d s (hang)", what, timeout_s);
      return false;
    }
    struct timespec d = {0, 20 * 1000 * 1000};
    nanosleep(&d, NULL);
  }
  if (WIFSIGNALED(st)) {
    kiln_test_fail(file, line, "%s: crashed with signal %d", what, WTERMSIG(st));
    return false;
  }
  if (WEXITSTATUS(st) != 0) {
    kiln_test_fail(file, line,
                   "%s: child exited with status %d (failed checks above, or a "
                   "sanitizer report)",
                   what, WEXITSTATUS(st));
    return false;
  }
  return true;
}

#define BM_ISOLATED(fn, arg, timeout_s) \
  bm_isolated_((fn), (arg), (timeout_s), #fn, __FILE__, __LINE__)

#endif /* KILN_TESTS_BAD_MODEL_UTIL_H_ */
