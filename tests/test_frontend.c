/* Unit tests of the ONNX frontend (frontend/onnx.h) on models written from C
 * with the protobuf-c generated API: initializers in every storage form,
 * attributes of every type, Constant nodes, opset imports, symbolic input
 * dims, IR<4 initializers listed as inputs, TensorProto files, and a model
 * parsed and run end to end with exact expected values. */
#define _GNU_SOURCE
#include <ftw.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "frontend/onnx.h"
#include "ir/op.h"
#include "onnx/onnx.pb-c.h"
#include "compiler/ref_exec.h"
#include "testing.h"

static kiln_allocator_t sys(void) { return kiln_allocator_system(); }

/* ---- a pool for everything the proto builders allocate ------------------- */

static void** pool;
static size_t n_pool, cap_pool;

static void* keep(void* p) {
  if (!p) {
    fprintf(stderr, "out of memory building a test model\n");
    abort();
  }
  if (n_pool == cap_pool) {
    cap_pool = cap_pool ? cap_pool * 2 : 256;
    pool = realloc(pool, cap_pool * sizeof(void*));
    if (!pool) abort();
  }
  pool[n_pool++] = p;
  return p;
}

static void* zalloc(size_t n) { return keep(calloc(1, n ? n : 1)); }
static char* sdup(const char* s) { return keep(strdup(s)); }
static void* mdup(const void* p, size_t n) {
  void* q = zalloc(n);
  if (n) memcpy(q, p, n);
  return q;
}

static void pool_free(void) {
  for (size_t i = 0; i < n_pool; ++i) free(pool[i]);
  free(pool);
  pool = NULL;
  n_pool = cap_pool = 0;
}

#define NEW(T, INIT)                 \
  ({                                 \
    T* p_ = zalloc(sizeof(T));       \
    T init_ = INIT;                  \
    *p_ = init_;                     \
    p_;                              \
  })

/* ---- temp folder ----------------------------------------------------------- */

static char tmpdir[64];

static const char* tmp_path(const char* name) {
  static char buf[8][512];
  static int k = 0;
  k = (k + 1) % 8;
  snprintf(buf[k], sizeof buf[k], "%s/%s", tmpdir, name);
  return buf[k];
}

static void write_file(const char* path, const void* data, size_t n) {
  FILE* f = fopen(path, "wb");
  CHECK_MSG(f != NULL, "cannot create %s", path);
  if (!f) return;
  CHECK(fwrite(data, 1, n, f) == n);
  fclose(f);
}

static int rm_one(const char* p, const struct stat* sb, int flag, struct FTW* ftw) {
  return remove(p);
}

/* ---- proto builders -------------------------------------------------------- */

enum { T_FLOAT = 1, T_UINT8 = 2, T_INT8 = 3, T_INT32 = 6, T_INT64 = 7, T_BOOL = 9, T_FLOAT16 = 10 };

static Onnx__TensorProto* tproto(const char* name, int32_t type, int n_dims, const int64_t* dims) {
  Onnx__TensorProto* t = NEW(Onnx__TensorProto, ONNX__TENSOR_PROTO__INIT);
  if (name) t->name = sdup(name);
  t->has_data_type = 1;
  t->data_type = type;
  t->n_dims = (size_t)n_dims;
  t->dims = mdup(dims, sizeof(int64_t) * (size_t)n_dims);
  return t;
}

static Onnx__TensorProto* with_raw(Onnx__TensorProto* t, const void* data, size_t n) {
  t->has_raw_data = 1;
  t->raw_data.len = n;
  t->raw_data.data = mdup(data, n);
  return t;
}

static Onnx__TensorProto* with_floats(Onnx__TensorProto* t, size_t n, const float* v) {
  t->n_float_data = n;
  t->float_data = mdup(v, n * sizeof(float));
  return t;
}

static Onnx__TensorProto* with_int32s(Onnx__TensorProto* t, size_t n, const int32_t* v) {
  t->n_int32_data = n;
  t->int32_data = mdup(v, n * sizeof(int32_t));
  return t;
}

static Onnx__TensorProto* with_int64s(Onnx__TensorProto* t, size_t n, const int64_t* v) {
  t->n_int64_data = n;
  t->int64_data = mdup(v, n * sizeof(int64_t));
  return t;
}

static Onnx__StringStringEntryProto* entry(const char* k, const char* v) {
  Onnx__StringStringEntryProto* e =
      NEW(Onnx__StringStringEntryProto, ONNX__STRING_STRING_ENTRY_PROTO__INIT);
  e->key = sdup(k);
  e->value = sdup(v);
  return e;
}

/* offset/length < 0: key left out. */
static Onnx__TensorProto* with_external(Onnx__TensorProto* t, const char* loc, long offset,
                                        long length) {
  t->has_data_location = 1;
  t->data_location = ONNX__TENSOR_PROTO__DATA_LOCATION__EXTERNAL;
  t->external_data = zalloc(sizeof(void*) * 4);
  char buf[32];
  t->external_data[t->n_external_data++] = entry("location", loc);
  if (offset >= 0) {
    snprintf(buf, sizeof buf, "%ld", offset);
    t->external_data[t->n_external_data++] = entry("offset", buf);
  }
  if (length >= 0) {
    snprintf(buf, sizeof buf, "%ld", length);
    t->external_data[t->n_external_data++] = entry("length", buf);
  }
  return t;
}

/* A dim: |param| non-NULL for a dim_param, |value| < 0 for neither. */
typedef struct {
  int64_t value;
  const char* param;
} dim_t;

#define D(v) ((dim_t){(v), NULL})
#define P(name) ((dim_t){0, (name)})

/* rank < 0: no shape at all. */
static Onnx__ValueInfoProto* vinfo(const char* name, int32_t type, int rank, const dim_t* dims) {
  Onnx__ValueInfoProto* v = NEW(Onnx__ValueInfoProto, ONNX__VALUE_INFO_PROTO__INIT);
  v->name = sdup(name);
  Onnx__TypeProto* tp = NEW(Onnx__TypeProto, ONNX__TYPE_PROTO__INIT);
  Onnx__TypeProto__Tensor* tt = NEW(Onnx__TypeProto__Tensor, ONNX__TYPE_PROTO__TENSOR__INIT);
  tt->has_elem_type = 1;
  tt->elem_type = type;
  if (rank >= 0) {
    Onnx__TensorShapeProto* sh = NEW(Onnx__TensorShapeProto, ONNX__TENSOR_SHAPE_PROTO__INIT);
    sh->n_dim = (size_t)rank;
    sh->dim = zalloc(sizeof(void*) * (size_t)(rank + 1));
    for (int i = 0; i < rank; ++i) {
      Onnx__TensorShapeProto__Dimension* d =
          NEW(Onnx__TensorShapeProto__Dimension, ONNX__TENSOR_SHAPE_PROTO__DIMENSION__INIT);
      if (dims[i].param) {
        d->value_case = ONNX__TENSOR_SHAPE_PROTO__DIMENSION__VALUE_DIM_PARAM;
        d->dim_param = sdup(dims[i].param);
      } else if (dims[i].value >= 0) {
        d->value_case = ONNX__TENSOR_SHAPE_PROTO__DIMENSION__VALUE_DIM_VALUE;
        d->dim_value = dims[i].value;
      }
      sh->dim[i] = d;
    }
    tt->shape = sh;
  }
  tp->value_case = ONNX__TYPE_PROTO__VALUE_TENSOR_TYPE;
  tp->tensor_type = tt;
  v->type = tp;
  return v;
}

#define DIMS(...) (int)(sizeof((dim_t[]){__VA_ARGS__}) / sizeof(dim_t)), (dim_t[]){__VA_ARGS__}

static Onnx__NodeProto* nproto(const char* op, const char* name, int n_in, const char* const* in,
                               int n_out, const char* const* out) {
  Onnx__NodeProto* n = NEW(Onnx__NodeProto, ONNX__NODE_PROTO__INIT);
  n->op_type = sdup(op);
  if (name) n->name = sdup(name);
  n->n_input = (size_t)n_in;
  n->input = zalloc(sizeof(char*) * (size_t)(n_in + 1));
  for (int i = 0; i < n_in; ++i) n->input[i] = sdup(in[i]);
  n->n_output = (size_t)n_out;
  n->output = zalloc(sizeof(char*) * (size_t)(n_out + 1));
  for (int i = 0; i < n_out; ++i) n->output[i] = sdup(out[i]);
  n->attribute = zalloc(sizeof(void*) * 16);
  return n;
}

#define N_OF(T, ...) ((int)(sizeof((T[]){__VA_ARGS__}) / sizeof(T)))
#define NAMES(...) N_OF(const char*, __VA_ARGS__), (const char*[]){__VA_ARGS__}

static Onnx__AttributeProto* aproto(const char* name, Onnx__AttributeProto__AttributeType type) {
  Onnx__AttributeProto* a = NEW(Onnx__AttributeProto, ONNX__ATTRIBUTE_PROTO__INIT);
  a->name = sdup(name);
  a->has_type = 1;
  a->type = type;
  return a;
}

static Onnx__AttributeProto* attr_f(const char* name, float f) {
  Onnx__AttributeProto* a = aproto(name, ONNX__ATTRIBUTE_PROTO__ATTRIBUTE_TYPE__FLOAT);
  a->has_f = 1;
  a->f = f;
  return a;
}

static Onnx__AttributeProto* attr_i(const char* name, int64_t i) {
  Onnx__AttributeProto* a = aproto(name, ONNX__ATTRIBUTE_PROTO__ATTRIBUTE_TYPE__INT);
  a->has_i = 1;
  a->i = i;
  return a;
}

static Onnx__AttributeProto* attr_s(const char* name, const char* s) {
  Onnx__AttributeProto* a = aproto(name, ONNX__ATTRIBUTE_PROTO__ATTRIBUTE_TYPE__STRING);
  a->has_s = 1;
  a->s.len = strlen(s);
  a->s.data = mdup(s, strlen(s));
  return a;
}

static Onnx__AttributeProto* attr_t(const char* name, Onnx__TensorProto* t) {
  Onnx__AttributeProto* a = aproto(name, ONNX__ATTRIBUTE_PROTO__ATTRIBUTE_TYPE__TENSOR);
  a->t = t;
  return a;
}

static Onnx__AttributeProto* attr_fs(const char* name, int n, const float* v) {
  Onnx__AttributeProto* a = aproto(name, ONNX__ATTRIBUTE_PROTO__ATTRIBUTE_TYPE__FLOATS);
  a->n_floats = (size_t)n;
  a->floats = mdup(v, sizeof(float) * (size_t)n);
  return a;
}

static Onnx__AttributeProto* attr_is(const char* name, int n, const int64_t* v) {
  Onnx__AttributeProto* a = aproto(name, ONNX__ATTRIBUTE_PROTO__ATTRIBUTE_TYPE__INTS);
  a->n_ints = (size_t)n;
  a->ints = mdup(v, sizeof(int64_t) * (size_t)n);
  return a;
}

static Onnx__AttributeProto* attr_ss(const char* name, int n, const char* const* v) {
  Onnx__AttributeProto* a = aproto(name, ONNX__ATTRIBUTE_PROTO__ATTRIBUTE_TYPE__STRINGS);
  a->n_strings = (size_t)n;
  a->strings = zalloc(sizeof(ProtobufCBinaryData) * (size_t)(n + 1));
  for (int i = 0; i < n; ++i) {
    a->strings[i].len = strlen(v[i]);
    a->strings[i].data = mdup(v[i], strlen(v[i]));
  }
  return a;
}

static Onnx__NodeProto* with_attr(Onnx__NodeProto* n, Onnx__AttributeProto* a) {
  if (n->n_attribute >= 16) abort(); /* nproto makes room for 16 */
  n->attribute[n->n_attribute++] = a;
  return n;
}

/* Appends to a fixed-capacity array of the model (a test-writing error
 * aborts rather than corrupting memory). */
#define APPEND(arr, count, v)                                   \
  do {                                                          \
    if ((count) >= sizeof(arr) / sizeof((arr)[0])) abort();     \
    (arr)[(count)++] = (v);                                     \
  } while (0)

typedef struct {
  Onnx__ModelProto m;
  Onnx__GraphProto g;
  Onnx__OperatorSetIdProto* opsets[8];
  Onnx__NodeProto* nodes[64];
  Onnx__TensorProto* inits[64];
  Onnx__ValueInfoProto* inputs[64];
  Onnx__ValueInfoProto* outputs[64];
} model_t;

static void add_opset(model_t* mo, const char* domain, int64_t version) {
  Onnx__OperatorSetIdProto* o = NEW(Onnx__OperatorSetIdProto, ONNX__OPERATOR_SET_ID_PROTO__INIT);
  o->domain = sdup(domain);
  o->has_version = 1;
  o->version = version;
  APPEND(mo->opsets, mo->m.n_opset_import, o);
}

/* opset <= 0: no ai.onnx import (add them with add_opset). */
static model_t* new_model(int64_t ir_version, int64_t opset, const char* name) {
  model_t* mo = zalloc(sizeof(model_t));
  Onnx__ModelProto m = ONNX__MODEL_PROTO__INIT;
  Onnx__GraphProto g = ONNX__GRAPH_PROTO__INIT;
  mo->m = m;
  mo->g = g;
  mo->m.has_ir_version = 1;
  mo->m.ir_version = ir_version;
  mo->m.producer_name = sdup("kiln-test");
  mo->g.name = sdup(name);
  if (opset > 0) add_opset(mo, "", opset);
  return mo;
}

static void add_node(model_t* mo, Onnx__NodeProto* n) { APPEND(mo->nodes, mo->g.n_node, n); }
static void add_init(model_t* mo, Onnx__TensorProto* t) {
  APPEND(mo->inits, mo->g.n_initializer, t);
}
static void add_input(model_t* mo, Onnx__ValueInfoProto* v) { APPEND(mo->inputs, mo->g.n_input, v); }
static void add_output(model_t* mo, Onnx__ValueInfoProto* v) {
  APPEND(mo->outputs, mo->g.n_output, v);
}
static void add_output_name(model_t* mo, const char* name) {
  Onnx__ValueInfoProto* v = NEW(Onnx__ValueInfoProto, ONNX__VALUE_INFO_PROTO__INIT);
  v->name = sdup(name);
  add_output(mo, v);
}

/* Serialises the model to tmpdir/|file| and returns the path. */
static const char* write_model(model_t* mo, const char* file) {
  mo->m.opset_import = mo->opsets;
  mo->g.node = mo->nodes;
  mo->g.initializer = mo->inits;
  mo->g.input = mo->inputs;
  mo->g.output = mo->outputs;
  mo->m.graph = &mo->g;
  size_t n = onnx__model_proto__get_packed_size(&mo->m);
  uint8_t* buf = zalloc(n);
  CHECK(onnx__model_proto__pack(&mo->m, buf) == n);
  const char* path = tmp_path(file);
  write_file(path, buf, n);
  return path;
}

static const char* write_tensor_file(const Onnx__TensorProto* t, const char* file) {
  size_t n = onnx__tensor_proto__get_packed_size(t);
  uint8_t* buf = zalloc(n);
  CHECK(onnx__tensor_proto__pack(t, buf) == n);
  const char* path = tmp_path(file);
  write_file(path, buf, n);
  return path;
}

/* ---- graph inspection --------------------------------------------------------- */

static const kiln_tensor_t* tensor(const kiln_graph_t* g, const char* name) {
  int32_t i = kiln_graph_find_tensor(g, name);
  CHECK_MSG(i >= 0, "no tensor '%s'", name);
  return i >= 0 ? &g->tensors[i] : NULL;
}

static const char* shape_str(const kiln_graph_t* g, const kiln_shape_t* s) {
  static char buf[4][128];
  static int k = 0;
  k = (k + 1) % 4;
  return kiln_graph_format_shape(g, s, buf[k], sizeof buf[k]);
}

/* Checks tensor |name| is a constant of |dt| and |shape| holding |data|. */
static void check_value(const kiln_graph_t* g, const char* name, kiln_dtype_t dt,
                        const char* shape, const void* data, size_t nbytes) {
  const kiln_tensor_t* t = tensor(g, name);
  if (!t) return;
  CHECK_MSG(t->flags & KILN_TENSOR_CONST, "'%s' is not constant", name);
  CHECK_MSG(t->value.dtype == dt && t->dtype == dt, "'%s' is %s, expected %s", name,
            kiln_dtype_name(t->value.dtype), kiln_dtype_name(dt));
  CHECK_MSG(strcmp(shape_str(g, &t->value.shape), shape) == 0, "'%s' has shape %s, expected %s",
            name, shape_str(g, &t->value.shape), shape);
  CHECK_MSG(t->value.nbytes == nbytes, "'%s' has %zu bytes, expected %zu", name, t->value.nbytes,
            nbytes);
  if (t->value.nbytes == nbytes && nbytes)
    CHECK_MSG(t->value.data && memcmp(t->value.data, data, nbytes) == 0,
              "'%s' holds the wrong values", name);
}

/* The last argument is an array (a variable or a compound literal). */
#define CHECK_VALUE(g, name, dt, shape, ...) \
  check_value((g), (name), (dt), (shape), (__VA_ARGS__), sizeof(__VA_ARGS__))

/* ---- initializers ---------------------------------------------------------------- */

static void test_initializer_storage_forms(void) {
  /* External data: two f32 tensors share weights.bin at offsets 0 and 4096;
   * sub/more.bin holds 3 int64 read whole (no offset/length) and, at
   * offset 8, a second 2-element view of the same file. */
  static unsigned char wb[4096 + 8];
  float ea[4] = {1, 2, 3, 4}, eb[2] = {5, 6};
  memset(wb, 0xEE, sizeof wb);
  memcpy(wb, ea, sizeof ea);
  memcpy(wb + 4096, eb, sizeof eb);
  write_file(tmp_path("weights.bin"), wb, sizeof wb);
  CHECK(mkdir(tmp_path("sub"), 0755) == 0);
  int64_t more[3] = {-9, 1ll << 40, 77};
  write_file(tmp_path("sub/more.bin"), more, sizeof more);

  model_t* mo = new_model(8, 13, "storage");
  float rf32[6] = {0.5f, -1, 2, 3.25f, -4, 1e-3f};
  uint16_t rf16[4] = {0x3C00, 0xC000, 0x7BFF, 0x0001};
  int64_t ri64[3] = {INT64_MIN, -1, INT64_MAX};
  uint8_t rbool[5] = {0, 1, 0, 2, 255};
  uint8_t ru8[3] = {0, 128, 255};
  int8_t ri8[3] = {-128, 0, 127};
  int32_t ri32[2] = {-7, 123456789};
  float rscalar = 42.0f;
  add_init(mo, with_raw(tproto("r_f32", T_FLOAT, 2, (int64_t[]){2, 3}), rf32, sizeof rf32));
  add_init(mo, with_raw(tproto("r_f16", T_FLOAT16, 1, (int64_t[]){4}), rf16, sizeof rf16));
  add_init(mo, with_raw(tproto("r_i64", T_INT64, 1, (int64_t[]){3}), ri64, sizeof ri64));
  add_init(mo, with_raw(tproto("r_bool", T_BOOL, 1, (int64_t[]){5}), rbool, sizeof rbool));
  add_init(mo, with_raw(tproto("r_u8", T_UINT8, 1, (int64_t[]){3}), ru8, sizeof ru8));
  add_init(mo, with_raw(tproto("r_i8", T_INT8, 1, (int64_t[]){3}), ri8, sizeof ri8));
  add_init(mo, with_raw(tproto("r_i32", T_INT32, 2, (int64_t[]){2, 1}), ri32, sizeof ri32));
  add_init(mo, with_raw(tproto("r_scalar", T_FLOAT, 0, NULL), &rscalar, 4));
  add_init(mo, with_floats(tproto("f_f32", T_FLOAT, 1, (int64_t[]){3}), 3,
                           (float[]){1.5f, -2.5f, 1e30f}));
  add_init(mo, with_int32s(tproto("i_i32", T_INT32, 1, (int64_t[]){3}), 3,
                           (int32_t[]){INT32_MIN, 0, INT32_MAX}));
  add_init(mo, with_int32s(tproto("i_i8", T_INT8, 1, (int64_t[]){2}), 2, (int32_t[]){-5, 7}));
  add_init(mo, with_int32s(tproto("i_u8", T_UINT8, 1, (int64_t[]){2}), 2, (int32_t[]){200, 3}));
  add_init(mo, with_int32s(tproto("i_bool", T_BOOL, 1, (int64_t[]){3}), 3, (int32_t[]){1, 0, 1}));
  add_init(mo, with_int32s(tproto("i_f16", T_FLOAT16, 2, (int64_t[]){1, 2}), 2,
                           (int32_t[]){0x3C00, 0xC000}));
  add_init(mo, with_int64s(tproto("l_i64", T_INT64, 1, (int64_t[]){2}), 2,
                           (int64_t[]){INT64_MIN, 42}));
  add_init(mo, with_external(tproto("e_a", T_FLOAT, 1, (int64_t[]){4}), "weights.bin", 0, 16));
  add_init(mo, with_external(tproto("e_b", T_FLOAT, 2, (int64_t[]){2, 1}), "weights.bin", 4096, 8));
  add_init(mo, with_external(tproto("e_sub", T_INT64, 1, (int64_t[]){3}), "sub/more.bin", -1, -1));
  add_init(mo, with_external(tproto("e_sub2", T_INT64, 1, (int64_t[]){2}), "sub/more.bin", 8, 16));
  add_init(mo, with_external(tproto("e_nolen", T_INT64, 1, (int64_t[]){1}), "sub/more.bin", 16, -1));
  add_init(mo, tproto("empty", T_FLOAT, 2, (int64_t[]){0, 3}));
  const char* names[] = {"r_f32", "r_f16", "r_i64", "r_bool", "r_u8",  "r_i8",  "r_i32",
                         "r_scalar", "f_f32", "i_i32", "i_i8",  "i_u8",  "i_bool", "i_f16",
                         "l_i64", "e_a",   "e_b",   "e_sub", "e_sub2", "e_nolen", "empty"};
  const int n_names = (int)(sizeof names / sizeof names[0]);
  for (int i = 0; i < n_names; ++i) add_output_name(mo, names[i]);
  const char* path = write_model(mo, "storage.onnx");

  kiln_graph_t* g = NULL;
  CHECK_OK(kiln_onnx_load_model(path, NULL, sys(), &g));
  if (!g) return;
  CHECK(strcmp(g->name, "storage") == 0);
  CHECK(strcmp(g->source, path) == 0);
  CHECK(g->n_inputs == 0 && g->n_outputs == n_names);
  CHECK_VALUE(g, "r_f32", KILN_DTYPE_F32, "[2,3]", rf32);
  CHECK_VALUE(g, "r_f16", KILN_DTYPE_F16, "[4]", rf16);
  CHECK_VALUE(g, "r_i64", KILN_DTYPE_I64, "[3]", ri64);
  CHECK_VALUE(g, "r_bool", KILN_DTYPE_BOOL, "[5]", ((uint8_t[]){0, 1, 0, 1, 1}));
  CHECK_VALUE(g, "r_u8", KILN_DTYPE_U8, "[3]", ru8);
  CHECK_VALUE(g, "r_i8", KILN_DTYPE_I8, "[3]", ri8);
  CHECK_VALUE(g, "r_i32", KILN_DTYPE_I32, "[2,1]", ri32);
  CHECK_VALUE(g, "r_scalar", KILN_DTYPE_F32, "[]", ((float[]){42.0f}));
  CHECK_VALUE(g, "f_f32", KILN_DTYPE_F32, "[3]", ((float[]){1.5f, -2.5f, 1e30f}));
  CHECK_VALUE(g, "i_i32", KILN_DTYPE_I32, "[3]", ((int32_t[]){INT32_MIN, 0, INT32_MAX}));
  CHECK_VALUE(g, "i_i8", KILN_DTYPE_I8, "[2]", ((int8_t[]){-5, 7}));
  CHECK_VALUE(g, "i_u8", KILN_DTYPE_U8, "[2]", ((uint8_t[]){200, 3}));
  CHECK_VALUE(g, "i_bool", KILN_DTYPE_BOOL, "[3]", ((uint8_t[]){1, 0, 1}));
  CHECK_VALUE(g, "i_f16", KILN_DTYPE_F16, "[1,2]", ((uint16_t[]){0x3C00, 0xC000}));
  CHECK_VALUE(g, "l_i64", KILN_DTYPE_I64, "[2]", ((int64_t[]){INT64_MIN, 42}));
  CHECK_VALUE(g, "e_a", KILN_DTYPE_F32, "[4]", ea);
  CHECK_VALUE(g, "e_b", KILN_DTYPE_F32, "[2,1]", eb);
  CHECK_VALUE(g, "e_sub", KILN_DTYPE_I64, "[3]", more);
  CHECK_VALUE(g, "e_sub2", KILN_DTYPE_I64, "[2]", ((int64_t[]){1ll << 40, 77}));
  CHECK_VALUE(g, "e_nolen", KILN_DTYPE_I64, "[1]", ((int64_t[]){77}));
  const kiln_tensor_t* e = tensor(g, "empty");
  if (e) CHECK(e->value.nbytes == 0 && strcmp(shape_str(g, &e->shape), "[0,3]") == 0);
  for (int i = 0; i < n_names; ++i) {
    const kiln_tensor_t* t = tensor(g, names[i]);
    if (t) CHECK_MSG(t->flags & KILN_TENSOR_INITIALIZER, "'%s' not an initializer", names[i]);
  }

  /* With no inputs the executor hands back copies of the initializers. */
  kiln_array_t outs[32];
  memset(outs, 0, sizeof outs);
  CHECK_OK(kiln_ref_run(g, NULL, NULL, outs));
  CHECK(outs[0].dtype == KILN_DTYPE_F32 && outs[0].nbytes == sizeof rf32 &&
        memcmp(outs[0].data, rf32, sizeof rf32) == 0);
  CHECK(outs[16].nbytes == sizeof eb && memcmp(outs[16].data, eb, sizeof eb) == 0);
  for (int i = 0; i < n_names; ++i) kiln_array_free(sys(), &outs[i]);
  kiln_graph_destroy(g);

  /* With external data disabled the same model is refused, naming the tensor. */
  kiln_onnx_options_t o;
  kiln_onnx_options_default(&o);
  CHECK(o.allow_external_data && o.max_nesting > 0 && o.max_nodes > 0);
  o.allow_external_data = false;
  g = NULL;
  CHECK_ERR(kiln_onnx_parse_model(path, &o, sys(), &g), KILN_PERMISSION_DENIED, "e_a");
  CHECK(g == NULL);
}

/* ---- attributes ---------------------------------------------------------------- */

static void test_attributes_every_type(void) {
  model_t* mo = new_model(8, 13, "attrs");
  add_input(mo, vinfo("x", T_FLOAT, DIMS(D(2))));
  Onnx__NodeProto* n = nproto("Relu", "relu_attrs", NAMES("x"), NAMES("y"));
  with_attr(n, attr_f("alpha", 0.25f));
  with_attr(n, attr_i("count", -3));
  with_attr(n, attr_s("mode", "nearest"));
  with_attr(n, attr_t("weights", with_raw(tproto(NULL, T_FLOAT, 1, (int64_t[]){2}),
                                         (float[]){1.5f, -2}, 8)));
  with_attr(n, attr_fs("scales", 3, (float[]){0.5f, 2, -1}));
  with_attr(n, attr_is("pads", 4, (int64_t[]){1, 2, -3, 1ll << 40}));
  with_attr(n, attr_ss("names", 3, (const char*[]){"a", "bc", ""}));
  with_attr(n, attr_is("empty_ints", 0, NULL));
  with_attr(n, attr_s("empty_string", ""));
  add_node(mo, n);
  /* A node without a name and one in another domain. */
  add_node(mo, nproto("Relu", NULL, NAMES("y"), NAMES("z")));
  Onnx__NodeProto* custom = nproto("Relu", "custom", NAMES("z"), NAMES("w"));
  custom->domain = sdup("com.example");
  add_node(mo, custom);
  add_output(mo, vinfo("w", T_FLOAT, DIMS(D(2))));
  const char* path = write_model(mo, "attrs.onnx");

  kiln_graph_t* g = NULL;
  CHECK_OK(kiln_onnx_parse_model(path, NULL, sys(), &g));
  if (!g) return;
  CHECK(g->n_nodes == 3);
  const kiln_node_t* nd = &g->nodes[0];
  CHECK(strcmp(nd->name, "relu_attrs") == 0 && nd->n_attrs == 9);
  const kiln_attr_t* a;
  a = kiln_node_attr(nd, "alpha");
  CHECK(a && a->type == KILN_ATTR_FLOAT && a->f == 0.25f);
  a = kiln_node_attr(nd, "count");
  CHECK(a && a->type == KILN_ATTR_INT && a->i == -3);
  a = kiln_node_attr(nd, "mode");
  CHECK(a && a->type == KILN_ATTR_STRING && a->s && strcmp(a->s, "nearest") == 0 && a->s_len == 7);
  a = kiln_node_attr(nd, "weights");
  CHECK(a && a->type == KILN_ATTR_TENSOR && a->tensor && a->tensor->dtype == KILN_DTYPE_F32 &&
        a->tensor->shape.rank == 1 && a->tensor->shape.dims[0] == 2 && a->tensor->nbytes == 8);
  if (a && a->tensor && a->tensor->data)
    CHECK(((float*)a->tensor->data)[0] == 1.5f && ((float*)a->tensor->data)[1] == -2);
  a = kiln_node_attr(nd, "scales");
  CHECK(a && a->type == KILN_ATTR_FLOATS && a->count == 3 && a->floats && a->floats[2] == -1);
  a = kiln_node_attr(nd, "pads");
  CHECK(a && a->type == KILN_ATTR_INTS && a->count == 4 && a->ints && a->ints[2] == -3 &&
        a->ints[3] == 1ll << 40);
  a = kiln_node_attr(nd, "names");
  CHECK(a && a->type == KILN_ATTR_STRINGS && a->count == 3 && a->strings &&
        strcmp(a->strings[0], "a") == 0 && strcmp(a->strings[1], "bc") == 0 &&
        strcmp(a->strings[2], "") == 0);
  a = kiln_node_attr(nd, "empty_ints");
  CHECK(a && a->type == KILN_ATTR_INTS && a->count == 0);
  a = kiln_node_attr(nd, "empty_string");
  CHECK(a && a->type == KILN_ATTR_STRING && a->s && a->s[0] == 0 && a->s_len == 0);
  /* Typed accessors on parsed attributes. */
  float f = 0;
  int64_t i = 0, cnt = 0;
  const int64_t* ints = NULL;
  const float* floats = NULL;
  const char* s = NULL;
  CHECK_OK(kiln_attr_float(nd, "alpha", 0, &f));
  CHECK(f == 0.25f);
  CHECK_OK(kiln_attr_int(nd, "count", 0, &i));
  CHECK(i == -3);
  CHECK_OK(kiln_attr_string(nd, "mode", "", &s));
  CHECK(s && strcmp(s, "nearest") == 0);
  CHECK_OK(kiln_attr_ints(nd, "pads", &ints, &cnt));
  CHECK(cnt == 4 && ints && ints[0] == 1);
  CHECK_OK(kiln_attr_floats(nd, "scales", &floats, &cnt));
  CHECK(cnt == 3 && floats && floats[0] == 0.5f);
  CHECK_ERR(kiln_attr_ints(nd, "scales", &ints, &cnt), KILN_INVALID_ARGUMENT, "scales");

  CHECK(strcmp(g->nodes[1].name, "Relu_1") == 0);
  CHECK(strcmp(g->nodes[2].domain, "com.example") == 0);
  CHECK(strcmp(g->nodes[0].domain, "") == 0);
  kiln_graph_destroy(g);

  /* Loading goes on to resolve ops: the custom-domain node is reported with
   * its domain and the file. */
  g = NULL;
  kiln_status_t st = kiln_onnx_load_model(path, NULL, sys(), &g);
  CHECK(kiln_status_code(st) == KILN_UNSUPPORTED && g == NULL);
  CHECK_MSG(st && strstr(kiln_status_message(st), "com.example") &&
                strstr(kiln_status_message(st), "attrs.onnx"),
            "message: %s", kiln_status_message(st));
  kiln_status_free(st);
}

/* ---- Constant nodes ------------------------------------------------------------ */

static void test_constant_nodes(void) {
  model_t* mo = new_model(8, 13, "constants");
  add_input(mo, vinfo("x", T_FLOAT, DIMS(D(4))));
  add_node(mo, with_attr(nproto("Constant", "c_tensor", 0, NULL, NAMES("ct")),
                         attr_t("value", with_raw(tproto("ct_value", T_FLOAT, 2, (int64_t[]){2, 2}),
                                                  (float[]){10, 20, 30, 40}, 16))));
  add_node(mo, with_attr(nproto("Constant", "c_float", 0, NULL, NAMES("cf")),
                         attr_f("value_float", 2.5f)));
  add_node(mo, with_attr(nproto("Constant", "c_ints", 0, NULL, NAMES("shape")),
                         attr_is("value_ints", 2, (int64_t[]){2, 2})));
  add_node(mo, with_attr(nproto("Constant", "c_int", 0, NULL, NAMES("ci")), attr_i("value_int", 7)));
  add_node(mo, with_attr(nproto("Constant", "c_floats", 0, NULL, NAMES("cfs")),
                         attr_fs("value_floats", 2, (float[]){0.5f, 0.25f})));
  add_node(mo, nproto("Reshape", "reshape", NAMES("x", "shape"), NAMES("y")));
  add_node(mo, nproto("Mul", "scale", NAMES("y", "cf"), NAMES("z")));
  add_node(mo, nproto("Add", "shift", NAMES("z", "ct"), NAMES("out")));
  /* Constant-only arithmetic folds at load time. */
  add_node(mo, nproto("Add", "fold", NAMES("cfs", "cf"), NAMES("folded")));
  add_output(mo, vinfo("out", T_FLOAT, DIMS(D(2), D(2))));
  add_output_name(mo, "folded");
  add_output_name(mo, "ci");
  const char* path = write_model(mo, "constants.onnx");

  kiln_graph_t* g = NULL;
  CHECK_OK(kiln_onnx_load_model(path, NULL, sys(), &g));
  if (!g) return;
  CHECK_VALUE(g, "ct", KILN_DTYPE_F32, "[2,2]", ((float[]){10, 20, 30, 40}));
  CHECK_VALUE(g, "cf", KILN_DTYPE_F32, "[]", ((float[]){2.5f}));
  CHECK_VALUE(g, "shape", KILN_DTYPE_I64, "[2]", ((int64_t[]){2, 2}));
  CHECK_VALUE(g, "ci", KILN_DTYPE_I64, "[]", ((int64_t[]){7}));
  CHECK_VALUE(g, "cfs", KILN_DTYPE_F32, "[2]", ((float[]){0.5f, 0.25f}));
  CHECK_VALUE(g, "folded", KILN_DTYPE_F32, "[2]", ((float[]){3.0f, 2.75f}));
  /* The Reshape target came from a Constant, so shapes downstream are static. */
  const kiln_tensor_t* y = tensor(g, "y");
  if (y) CHECK_MSG(strcmp(shape_str(g, &y->shape), "[2,2]") == 0, "y is %s",
                   shape_str(g, &y->shape));
  const kiln_tensor_t* out = tensor(g, "out");
  if (out) CHECK(strcmp(shape_str(g, &out->shape), "[2,2]") == 0 && out->dtype == KILN_DTYPE_F32);

  kiln_array_t in;
  kiln_shape_t s4 = kiln_shape_make(1, (int64_t[]){4});
  CHECK_OK(kiln_array_alloc(sys(), KILN_DTYPE_F32, &s4, &in));
  memcpy(in.data, (float[]){1, 2, 3, 4}, 16);
  kiln_array_t res[3];
  memset(res, 0, sizeof res);
  CHECK_OK(kiln_ref_run(g, &in, NULL, res));
  if (res[0].data) {
    const float* r = res[0].data;
    CHECK(res[0].shape.rank == 2 && res[0].shape.dims[0] == 2 && res[0].shape.dims[1] == 2);
    CHECK_MSG(r[0] == 12.5f && r[1] == 25 && r[2] == 37.5f && r[3] == 50,
              "got %g %g %g %g", r[0], r[1], r[2], r[3]);
  }
  if (res[1].data) CHECK(((float*)res[1].data)[1] == 2.75f);
  if (res[2].data) CHECK(res[2].dtype == KILN_DTYPE_I64 && ((int64_t*)res[2].data)[0] == 7);
  for (int i = 0; i < 3; ++i) kiln_array_free(sys(), &res[i]);
  kiln_array_free(sys(), &in);
  kiln_graph_destroy(g);
}

/* ---- opsets ------------------------------------------------------------------- */

static void test_opset_imports(void) {
  /* Unsqueeze takes axes as an attribute before opset 13, as an input from 13. */
  for (int v = 0; v < 2; ++v) {
    int64_t opset = v ? 13 : 11;
    model_t* mo = new_model(7, 0, "opsets");
    add_opset(mo, "com.microsoft", 1);
    add_opset(mo, "", opset);
    add_opset(mo, "ai.onnx.ml", 3);
    add_input(mo, vinfo("x", T_FLOAT, DIMS(D(3))));
    if (opset >= 13) {
      add_init(mo, with_int64s(tproto("axes", T_INT64, 1, (int64_t[]){1}), 1, (int64_t[]){0}));
      add_node(mo, nproto("Unsqueeze", "unsq", NAMES("x", "axes"), NAMES("y")));
    } else {
      add_node(mo, with_attr(nproto("Unsqueeze", "unsq", NAMES("x"), NAMES("y")),
                             attr_is("axes", 1, (int64_t[]){0})));
    }
    add_output_name(mo, "y");
    const char* path = write_model(mo, v ? "opset13.onnx" : "opset11.onnx");
    kiln_graph_t* g = NULL;
    CHECK_OK(kiln_onnx_load_model(path, NULL, sys(), &g));
    if (!g) continue;
    CHECK_MSG(g->opset == opset, "opset %lld, expected %lld", (long long)g->opset,
              (long long)opset);
    CHECK(g->n_opsets == 3);
    bool ms = false, ml = false;
    for (int32_t i = 0; i < g->n_opsets; ++i) {
      if (strcmp(g->opsets[i].domain, "com.microsoft") == 0) ms = g->opsets[i].version == 1;
      if (strcmp(g->opsets[i].domain, "ai.onnx.ml") == 0) ml = g->opsets[i].version == 3;
    }
    CHECK(ms && ml);
    const kiln_tensor_t* y = tensor(g, "y");
    if (y) CHECK_MSG(strcmp(shape_str(g, &y->shape), "[1,3]") == 0, "opset %lld: y is %s",
                     (long long)opset, shape_str(g, &y->shape));
    kiln_graph_destroy(g);
  }

  /* "ai.onnx" spelled out is the default domain. */
  model_t* mo = new_model(8, 0, "spelled");
  add_opset(mo, "ai.onnx", 14);
  add_input(mo, vinfo("x", T_FLOAT, DIMS(D(3))));
  add_node(mo, nproto("Relu", "r", NAMES("x"), NAMES("y")));
  add_output_name(mo, "y");
  kiln_graph_t* g = NULL;
  CHECK_OK(kiln_onnx_load_model(write_model(mo, "spelled.onnx"), NULL, sys(), &g));
  if (g) CHECK(g->opset == 14);
  kiln_graph_destroy(g);
}

/* ---- symbolic dims ----------------------------------------------------------- */

static void test_dim_params(void) {
  model_t* mo = new_model(8, 13, "symbolic");
  add_input(mo, vinfo("x", T_FLOAT, DIMS(P("batch"), D(3), P("H"))));
  add_input(mo, vinfo("y", T_FLOAT, DIMS(P("batch"), D(1), D(1))));
  add_input(mo, vinfo("u", T_FLOAT, DIMS(D(-1), D(3)))); /* a dim with neither value nor param */
  add_input(mo, vinfo("r", T_FLOAT, -1, NULL));           /* no shape at all */
  add_node(mo, nproto("Mul", "mul", NAMES("x", "y"), NAMES("xy")));
  add_node(mo, nproto("Relu", "relu", NAMES("u"), NAMES("ru")));
  add_node(mo, nproto("Neg", "neg", NAMES("r"), NAMES("rn")));
  add_output(mo, vinfo("xy", T_FLOAT, DIMS(P("batch"), D(3), P("H"))));
  add_output_name(mo, "ru");
  add_output_name(mo, "rn");
  const char* path = write_model(mo, "symbolic.onnx");

  kiln_graph_t* g = NULL;
  CHECK_OK(kiln_onnx_load_model(path, NULL, sys(), &g));
  if (!g) return;
  CHECK(g->n_inputs == 4);
  CHECK_MSG(g->n_symbols == 2, "%d symbols", g->n_symbols);
  const kiln_tensor_t* x = tensor(g, "x");
  const kiln_tensor_t* y = tensor(g, "y");
  const kiln_tensor_t* xy = tensor(g, "xy");
  if (!x || !y || !xy) return;
  CHECK_MSG(strcmp(shape_str(g, &x->shape), "[batch,3,H]") == 0, "x is %s",
            shape_str(g, &x->shape));
  CHECK(x->shape.dims[0] == y->shape.dims[0]); /* one symbol for both */
  CHECK(kiln_dim_symbol(x->shape.dims[0]) >= 1 && kiln_dim_symbol(x->shape.dims[2]) >= 1);
  CHECK_MSG(strcmp(shape_str(g, &xy->shape), "[batch,3,H]") == 0, "xy is %s",
            shape_str(g, &xy->shape));
  CHECK_MSG(strcmp(shape_str(g, &tensor(g, "u")->shape), "[?,3]") == 0, "u is %s",
            shape_str(g, &tensor(g, "u")->shape));
  CHECK(strcmp(shape_str(g, &tensor(g, "ru")->shape), "[?,3]") == 0);
  CHECK(tensor(g, "r")->shape.rank == -1);
  CHECK(strcmp(shape_str(g, &tensor(g, "rn")->shape), "[?]") == 0);

  /* Run with batch=2, H=2. */
  kiln_array_t in[4];
  kiln_shape_t sx = kiln_shape_make(3, (int64_t[]){2, 3, 2});
  kiln_shape_t sy = kiln_shape_make(3, (int64_t[]){2, 1, 1});
  kiln_shape_t su = kiln_shape_make(2, (int64_t[]){5, 3});
  kiln_shape_t sr = kiln_shape_make(2, (int64_t[]){1, 1});
  CHECK_OK(kiln_array_alloc(sys(), KILN_DTYPE_F32, &sx, &in[0]));
  CHECK_OK(kiln_array_alloc(sys(), KILN_DTYPE_F32, &sy, &in[1]));
  CHECK_OK(kiln_array_alloc(sys(), KILN_DTYPE_F32, &su, &in[2]));
  CHECK_OK(kiln_array_alloc(sys(), KILN_DTYPE_F32, &sr, &in[3]));
  for (int i = 0; i < 12; ++i) ((float*)in[0].data)[i] = (float)i;
  ((float*)in[1].data)[0] = 2;
  ((float*)in[1].data)[1] = -1;
  kiln_array_t out[3];
  memset(out, 0, sizeof out);
  CHECK_OK(kiln_ref_run(g, in, NULL, out));
  if (out[0].data) {
    CHECK(out[0].shape.rank == 3 && out[0].shape.dims[0] == 2 && out[0].shape.dims[2] == 2);
    const float* r = out[0].data;
    CHECK(r[0] == 0 && r[5] == 10 && r[6] == -6 && r[11] == -11);
    CHECK(out[1].shape.dims[0] == 5);
  }
  for (int i = 0; i < 3; ++i) kiln_array_free(sys(), &out[i]);
  /* batch must agree between x and y. */
  kiln_array_free(sys(), &in[1]);
  kiln_shape_t sy3 = kiln_shape_make(3, (int64_t[]){3, 1, 1});
  CHECK_OK(kiln_array_alloc(sys(), KILN_DTYPE_F32, &sy3, &in[1]));
  kiln_status_t st = kiln_ref_run(g, in, NULL, out);
  CHECK_MSG(st && strstr(kiln_status_message(st), "'y'") &&
                strstr(kiln_status_message(st), "[batch,1,1]") &&
                strstr(kiln_status_message(st), "[3,1,1]"),
            "message: %s", kiln_status_message(st));
  kiln_status_free(st);
  for (int i = 0; i < 4; ++i) kiln_array_free(sys(), &in[i]);
  kiln_graph_destroy(g);
}

/* ---- IR < 4: initializers also listed as graph inputs ------------------------ */

static void test_ir3_initializers_as_inputs(void) {
  model_t* mo = new_model(3, 8, "ir3");
  add_input(mo, vinfo("x", T_FLOAT, DIMS(D(1), D(2))));
  add_input(mo, vinfo("W", T_FLOAT, DIMS(D(2), D(2))));
  add_input(mo, vinfo("B", T_FLOAT, DIMS(D(2))));
  add_init(mo, with_floats(tproto("W", T_FLOAT, 2, (int64_t[]){2, 2}), 4, (float[]){1, 2, 3, 4}));
  add_init(mo, with_raw(tproto("B", T_FLOAT, 1, (int64_t[]){2}), (float[]){0.5f, -0.5f}, 8));
  add_node(mo, nproto("MatMul", "mm", NAMES("x", "W"), NAMES("h")));
  add_node(mo, nproto("Add", "bias", NAMES("h", "B"), NAMES("y")));
  add_output(mo, vinfo("y", T_FLOAT, DIMS(D(1), D(2))));
  const char* path = write_model(mo, "ir3.onnx");

  kiln_graph_t* g = NULL;
  CHECK_OK(kiln_onnx_load_model(path, NULL, sys(), &g));
  if (!g) return;
  CHECK_MSG(g->n_inputs == 1, "%d graph inputs; the initializers must not count", g->n_inputs);
  CHECK(strcmp(g->tensors[g->inputs[0]].name, "x") == 0);
  const kiln_tensor_t* w = tensor(g, "W");
  if (w) CHECK((w->flags & KILN_TENSOR_INITIALIZER) && !(w->flags & KILN_TENSOR_INPUT));
  kiln_array_t in, out;
  kiln_shape_t s = kiln_shape_make(2, (int64_t[]){1, 2});
  CHECK_OK(kiln_array_alloc(sys(), KILN_DTYPE_F32, &s, &in));
  memcpy(in.data, (float[]){1, 10}, 8);
  memset(&out, 0, sizeof out);
  CHECK_OK(kiln_ref_run(g, &in, NULL, &out));
  /* [1,10] x [[1,2],[3,4]] = [31, 42]; + [0.5,-0.5]. */
  if (out.data) CHECK(((float*)out.data)[0] == 31.5f && ((float*)out.data)[1] == 41.5f);
  kiln_array_free(sys(), &out);
  kiln_array_free(sys(), &in);
  kiln_graph_destroy(g);
}

/* ---- TensorProto files ------------------------------------------------------- */

static void test_load_tensor(void) {
  float fv[4] = {1, -2, 3.5f, 1e-7f};
  const char* p1 = write_tensor_file(
      with_raw(tproto("input_0", T_FLOAT, 2, (int64_t[]){2, 2}), fv, sizeof fv), "t_f32.pb");
  kiln_array_t a;
  char* name = NULL;
  CHECK_OK(kiln_onnx_load_tensor(p1, NULL, sys(), &a, &name));
  CHECK(a.dtype == KILN_DTYPE_F32 && a.shape.rank == 2 && a.shape.dims[1] == 2 && a.nbytes == 16);
  if (a.data) CHECK(memcmp(a.data, fv, 16) == 0);
  CHECK(name && strcmp(name, "input_0") == 0);
  free(name);
  kiln_array_free(sys(), &a);

  /* Unnamed, typed field, name not asked for. */
  const char* p2 = write_tensor_file(
      with_int64s(tproto(NULL, T_INT64, 1, (int64_t[]){3}), 3, (int64_t[]){5, -6, 1ll << 50}),
      "t_i64.pb");
  name = (char*)"sentinel";
  CHECK_OK(kiln_onnx_load_tensor(p2, NULL, sys(), &a, &name));
  CHECK(name == NULL);
  CHECK(a.dtype == KILN_DTYPE_I64 && a.data && ((int64_t*)a.data)[2] == 1ll << 50);
  kiln_array_free(sys(), &a);
  CHECK_OK(kiln_onnx_load_tensor(p2, NULL, sys(), &a, NULL));
  kiln_array_free(sys(), &a);

  /* f16 bits in int32_data, a 0-d bool and external data beside the file. */
  const char* p3 = write_tensor_file(
      with_int32s(tproto("h", T_FLOAT16, 1, (int64_t[]){2}), 2, (int32_t[]){0x3C00, 0x7C00}),
      "t_f16.pb");
  CHECK_OK(kiln_onnx_load_tensor(p3, NULL, sys(), &a, NULL));
  CHECK(a.dtype == KILN_DTYPE_F16 && a.data && ((uint16_t*)a.data)[1] == 0x7C00);
  kiln_array_free(sys(), &a);
  const char* p4 =
      write_tensor_file(with_raw(tproto("b", T_BOOL, 0, NULL), (uint8_t[]){1}, 1), "t_bool.pb");
  CHECK_OK(kiln_onnx_load_tensor(p4, NULL, sys(), &a, NULL));
  CHECK(a.dtype == KILN_DTYPE_BOOL && a.shape.rank == 0 && a.nbytes == 1 && a.data &&
        ((uint8_t*)a.data)[0] == 1);
  kiln_array_free(sys(), &a);
  int32_t ext[3] = {7, 8, 9};
  write_file(tmp_path("t_ext.bin"), ext, sizeof ext);
  const char* p5 = write_tensor_file(
      with_external(tproto("e", T_INT32, 1, (int64_t[]){3}), "t_ext.bin", 0, 12), "t_ext.pb");
  CHECK_OK(kiln_onnx_load_tensor(p5, NULL, sys(), &a, NULL));
  CHECK(a.dtype == KILN_DTYPE_I32 && a.data && ((int32_t*)a.data)[2] == 9);
  kiln_array_free(sys(), &a);

  /* A missing file names itself. */
  CHECK_ERR(kiln_onnx_load_tensor(tmp_path("nope.pb"), NULL, sys(), &a, NULL), KILN_NOT_FOUND,
            "nope.pb");
}

/* ---- a model run end to end ------------------------------------------------- */

static void test_model_run_exact(void) {
  /* A two-layer MLP: a = relu(x @ W1 + b1); y = Gemm(a, W2, b2, alpha=0.5,
   * transB=1). Weights are small integers and halves so every result is
   * exact in f32 whatever the summation order. W1 lives in an external file
   * in a sub-folder of the model's folder, W2 in float_data, b1/b2 in
   * raw_data. */
  float w1[4 * 3] = {1, 0, -1, 2, 1, 0, 0, -2, 1, 0.5f, 0.5f, 0.5f};
  float b1[3] = {0.5f, -1, 2};
  float w2[2 * 3] = {1, 2, 3, -1, 0, 1}; /* [2,3], used transposed */
  float b2[2] = {10, -10};
  CHECK(mkdir(tmp_path("mlp"), 0755) == 0);
  CHECK(mkdir(tmp_path("mlp/weights"), 0755) == 0);
  write_file(tmp_path("mlp/weights/w1.bin"), w1, sizeof w1);

  model_t* mo = new_model(8, 13, "mlp");
  add_input(mo, vinfo("x", T_FLOAT, DIMS(P("N"), D(4))));
  add_init(mo, with_external(tproto("W1", T_FLOAT, 2, (int64_t[]){4, 3}), "weights/w1.bin", 0,
                             (long)sizeof w1));
  add_init(mo, with_raw(tproto("b1", T_FLOAT, 1, (int64_t[]){3}), b1, sizeof b1));
  add_init(mo, with_floats(tproto("W2", T_FLOAT, 2, (int64_t[]){2, 3}), 6, w2));
  add_init(mo, with_raw(tproto("b2", T_FLOAT, 1, (int64_t[]){2}), b2, sizeof b2));
  add_node(mo, nproto("MatMul", "fc1", NAMES("x", "W1"), NAMES("h")));
  add_node(mo, nproto("Add", "fc1_bias", NAMES("h", "b1"), NAMES("hb")));
  add_node(mo, nproto("Relu", "act", NAMES("hb"), NAMES("a")));
  Onnx__NodeProto* gemm = nproto("Gemm", "fc2", NAMES("a", "W2", "b2"), NAMES("y"));
  with_attr(gemm, attr_i("transB", 1));
  with_attr(gemm, attr_f("alpha", 0.5f));
  add_node(mo, gemm);
  add_output(mo, vinfo("y", T_FLOAT, DIMS(P("N"), D(2))));
  const char* path = write_model(mo, "mlp/mlp.onnx");

  kiln_graph_t* g = NULL;
  CHECK_OK(kiln_onnx_load_model(path, NULL, sys(), &g));
  if (!g) return;
  CHECK_MSG(strcmp(shape_str(g, &tensor(g, "y")->shape), "[N,2]") == 0, "y is %s",
            shape_str(g, &tensor(g, "y")->shape));
  enum { N = 3 };
  float xv[N * 4] = {1, 2, 3, 4, -1, 0, 1, 0.5f, 0, 0, 0, 0};
  float want[N * 2];
  for (int n = 0; n < N; ++n) {
    double a[3];
    for (int j = 0; j < 3; ++j) {
      double s = b1[j];
      for (int k = 0; k < 4; ++k) s += (double)xv[n * 4 + k] * w1[k * 3 + j];
      a[j] = s > 0 ? s : 0;
    }
    for (int o = 0; o < 2; ++o) {
      double s = 0;
      for (int j = 0; j < 3; ++j) s += a[j] * w2[o * 3 + j];
      want[n * 2 + o] = (float)(0.5 * s + b2[o]);
    }
  }
  kiln_array_t in, out;
  kiln_shape_t s = kiln_shape_make(2, (int64_t[]){N, 4});
  CHECK_OK(kiln_array_alloc(sys(), KILN_DTYPE_F32, &s, &in));
  memcpy(in.data, xv, sizeof xv);
  memset(&out, 0, sizeof out);
  CHECK_OK(kiln_ref_run(g, &in, NULL, &out));
  CHECK(out.dtype == KILN_DTYPE_F32 && out.shape.rank == 2 && out.shape.dims[0] == N &&
        out.shape.dims[1] == 2);
  if (out.data)
    for (int i = 0; i < N * 2; ++i)
      CHECK_MSG(((float*)out.data)[i] == want[i], "y[%d] = %.9g, expected %.9g", i,
                ((float*)out.data)[i], want[i]);
  kiln_array_free(sys(), &out);
  kiln_array_free(sys(), &in);
  kiln_graph_destroy(g);
}

/* ---- load errors carry the file, node and op ------------------------------ */

static void test_errors_name_file_and_node(void) {
  /* Shape inference: [2] + [3] cannot broadcast. */
  model_t* mo = new_model(8, 13, "bad_broadcast");
  add_input(mo, vinfo("a", T_FLOAT, DIMS(D(2))));
  add_input(mo, vinfo("b", T_FLOAT, DIMS(D(3))));
  add_node(mo, nproto("Add", "the_add", NAMES("a", "b"), NAMES("y")));
  add_output_name(mo, "y");
  const char* path = write_model(mo, "bad_broadcast.onnx");
  kiln_graph_t* g = NULL;
  kiln_status_t st = kiln_onnx_load_model(path, NULL, sys(), &g);
  const char* m = kiln_status_message(st);
  CHECK(st && g == NULL);
  CHECK_MSG(st && strstr(m, "bad_broadcast.onnx") && strstr(m, "the_add") && strstr(m, "Add") &&
                strstr(m, "[2]") && strstr(m, "[3]"),
            "message: %s", m);
  kiln_status_free(st);

  /* A node input that nothing produces. */
  mo = new_model(8, 13, "dangling");
  add_input(mo, vinfo("a", T_FLOAT, DIMS(D(2))));
  add_node(mo, nproto("Add", "adder", NAMES("a", "ghost"), NAMES("y")));
  add_output_name(mo, "y");
  path = write_model(mo, "dangling.onnx");
  st = kiln_onnx_load_model(path, NULL, sys(), &g);
  m = kiln_status_message(st);
  CHECK_MSG(st && strstr(m, "dangling.onnx") && strstr(m, "adder") && strstr(m, "ghost"),
            "message: %s", m);
  kiln_status_free(st);

  /* A bad initializer names the file and the tensor. */
  mo = new_model(8, 13, "short_raw");
  add_init(mo, with_raw(tproto("w", T_FLOAT, 1, (int64_t[]){4}), (float[]){1, 2}, 8));
  add_output_name(mo, "w");
  path = write_model(mo, "short_raw.onnx");
  st = kiln_onnx_load_model(path, NULL, sys(), &g);
  m = kiln_status_message(st);
  CHECK_MSG(st && strstr(m, "short_raw.onnx") && strstr(m, "'w'"), "message: %s", m);
  kiln_status_free(st);
  CHECK(g == NULL);
}

int main(void) {
  snprintf(tmpdir, sizeof tmpdir, "/tmp/kiln-test-frontend-XXXXXX");
  if (!mkdtemp(tmpdir)) {
    perror("mkdtemp");
    return 1;
  }
  RUN(test_initializer_storage_forms);
  RUN(test_attributes_every_type);
  RUN(test_constant_nodes);
  RUN(test_opset_imports);
  RUN(test_dim_params);
  RUN(test_ir3_initializers_as_inputs);
  RUN(test_load_tensor);
  RUN(test_model_run_exact);
  RUN(test_errors_name_file_and_node);
  pool_free();
  nftw(tmpdir, rm_one, 16, FTW_DEPTH | FTW_PHYS);
  return kiln_test_finish();
}
