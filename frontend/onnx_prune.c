/* ONNX prune writer (see onnx_prune.h). */
#include "frontend/onnx_prune.h"

#include <stdlib.h>
#include <string.h>

#include "frontend/onnx_file.h"
#include "kiln/array.h"
#include "onnx/onnx.pb-c.h"

#define S(x) ((x) ? (x) : "")

/* The tensor's elements as raw little-endian bytes (a new buffer), from
 * raw_data or the typed field the element type uses. */
static kiln_status_t raw_bytes(const char* path, const Onnx__TensorProto* t, size_t es, int64_t count,
                               uint8_t** out) {
  size_t nbytes = (size_t)count * es;
  uint8_t* b = malloc(nbytes + 1);
  if (!b) return kiln_make_status(KILN_OUT_OF_MEMORY, "%s: initializer '%s': out of memory", path, S(t->name));
  kiln_status_t s = NULL;
  if (t->has_raw_data) {
    if (t->raw_data.len != nbytes) s = kiln_make_status(KILN_PARSE_ERROR, "%s: initializer '%s': raw_data has %zu bytes, expected %zu", path, S(t->name), t->raw_data.len, nbytes);
    else memcpy(b, t->raw_data.data, nbytes);
  } else if (t->n_float_data == (size_t)count && es == 4) {
    memcpy(b, t->float_data, nbytes);
  } else if (t->n_double_data == (size_t)count && es == 8) {
    memcpy(b, t->double_data, nbytes);
  } else if (t->n_int64_data == (size_t)count && es == 8) {
    memcpy(b, t->int64_data, nbytes);
  } else if (t->n_int32_data == (size_t)count && es == 4) {
    memcpy(b, t->int32_data, nbytes);
  } else {
    s = kiln_make_status(KILN_UNSUPPORTED, "%s: initializer '%s': kiln prune cannot read its data field", path,
                         S(t->name));
  }
  if (s) free(b);
  else *out = b;
  return s;
}

/* The tensor's data as raw_data |dst| of |len| bytes (owned from now on):
 * every typed field cleared. */
static void set_raw(Onnx__TensorProto* t, uint8_t* dst, size_t len) {
  free(t->float_data), t->float_data = NULL, t->n_float_data = 0;
  free(t->double_data), t->double_data = NULL, t->n_double_data = 0;
  free(t->int64_data), t->int64_data = NULL, t->n_int64_data = 0;
  free(t->int32_data), t->int32_data = NULL, t->n_int32_data = 0;
  free(t->raw_data.data);
  t->raw_data.data = dst;
  t->raw_data.len = len;
  t->has_raw_data = 1;
}

static kiln_status_t slice_init(const char* path, Onnx__TensorProto* t, const kiln_prune_slice_t* sl) {
  if (t->has_data_location && t->data_location == ONNX__TENSOR_PROTO__DATA_LOCATION__EXTERNAL)
    return kiln_make_status(KILN_UNSUPPORTED, "%s: initializer '%s' keeps its data in an external file; kiln prune writes self-contained models only", path, S(t->name));
  kiln_dtype_t dt = kiln_dtype_from_onnx(t->data_type);
  size_t es = kiln_dtype_size(dt);
  if (!es || sl->axis >= (int32_t)t->n_dims || t->dims[sl->axis] != sl->len)
    return kiln_make_status(KILN_INVALID_ARGUMENT, "%s: initializer '%s' does not have the shape the plan was made for", path, S(t->name));
  int64_t outer = 1, inner = 1, count = 1, kept = 0;
  for (size_t i = 0; i < t->n_dims; ++i) {
    count *= t->dims[i];
    if ((int32_t)i < sl->axis) outer *= t->dims[i];
    if ((int32_t)i > sl->axis) inner *= t->dims[i];
  }
  for (int64_t i = 0; i < sl->len; ++i) kept += sl->keep[i];
  uint8_t* src = NULL;
  KILN_RETURN_IF_ERROR(raw_bytes(path, t, es, count, &src));
  uint8_t* dst = malloc((size_t)(outer * kept * inner) * es + 1);
  if (!dst) {
    free(src);
    return kiln_make_status(KILN_OUT_OF_MEMORY, "%s: initializer '%s': out of memory", path, S(t->name));
  }
  size_t row = (size_t)inner * es;
  uint8_t* d = dst;
  for (int64_t o = 0; o < outer; ++o)
    for (int64_t i = 0; i < sl->len; ++i)
      if (sl->keep[i]) memcpy(d, src + (size_t)(o * sl->len + i) * row, row), d += row;
  free(src);
  set_raw(t, dst, (size_t)(d - dst));
  t->dims[sl->axis] = kept;
  return NULL;
}

static void fix_input_dims(Onnx__GraphProto* gp, const kiln_prune_slice_t* sl, int64_t kept) {
  for (size_t k = 0; k < gp->n_input; ++k) {
    Onnx__ValueInfoProto* v = gp->input[k];
    if (strcmp(S(v->name), sl->name) || !v->type || !v->type->tensor_type || !v->type->tensor_type->shape) continue;
    Onnx__TensorShapeProto* sh = v->type->tensor_type->shape;
    if ((size_t)sl->axis < sh->n_dim && sh->dim[sl->axis]->value_case == ONNX__TENSOR_SHAPE_PROTO__DIMENSION__VALUE_DIM_VALUE)
      sh->dim[sl->axis]->dim_value = kept;
  }
}

static kiln_status_t rewrite(const char* path, Onnx__GraphProto* gp, const kiln_prune_plan_t* p) {
  for (int32_t i = 0; i < p->n_slices; ++i) {
    const kiln_prune_slice_t* sl = &p->slices[i];
    Onnx__TensorProto* t = NULL;
    for (size_t k = 0; k < gp->n_initializer && !t; ++k)
      if (!strcmp(S(gp->initializer[k]->name), sl->name)) t = gp->initializer[k];
    if (!t) return kiln_make_status(KILN_NOT_FOUND, "%s: no initializer named '%s' to prune", path, sl->name);
    KILN_RETURN_IF_ERROR(slice_init(path, t, sl));
    fix_input_dims(gp, sl, t->dims[sl->axis]);
  }
  for (int32_t i = 0; i < p->n_attrs; ++i) {
    const kiln_prune_attr_t* a = &p->attrs[i];
    bool done = false;
    for (size_t k = 0; k < gp->n_node && !done; ++k) {
      Onnx__NodeProto* n = gp->node[k];
      if (strcmp(S(n->name), a->node)) continue;
      for (size_t j = 0; j < n->n_attribute && !done; ++j)
        if (!strcmp(S(n->attribute[j]->name), a->attr)) n->attribute[j]->i = a->value, done = true;
    }
    if (!done)
      return kiln_make_status(KILN_NOT_FOUND, "%s: node '%s' has no attribute '%s' to set", path, a->node, a->attr);
  }
  for (size_t k = 0; k < gp->n_value_info; ++k) onnx__value_info_proto__free_unpacked(gp->value_info[k], NULL);
  free(gp->value_info);
  gp->value_info = NULL;
  gp->n_value_info = 0;
  return NULL;
}

/* Zeroes the elements of initializer |name| that |mask| (|count| entries)
 * marks; floating-point zero is all-zero bytes in every float dtype. */
static kiln_status_t zero_init(const char* path, Onnx__GraphProto* gp, const char* name, const uint8_t* mask,
                               int64_t count) {
  Onnx__TensorProto* t = NULL;
  for (size_t k = 0; k < gp->n_initializer && !t; ++k)
    if (!strcmp(S(gp->initializer[k]->name), name)) t = gp->initializer[k];
  if (!t) return kiln_make_status(KILN_NOT_FOUND, "%s: no initializer named '%s' to sparsify", path, name);
  if (t->has_data_location && t->data_location == ONNX__TENSOR_PROTO__DATA_LOCATION__EXTERNAL)
    return kiln_make_status(KILN_UNSUPPORTED, "%s: initializer '%s' keeps its data in an external file; kiln prune writes self-contained models only", path, name);
  kiln_dtype_t dt = kiln_dtype_from_onnx(t->data_type);
  size_t es = kiln_dtype_size(dt);
  int64_t n = 1;
  for (size_t i = 0; i < t->n_dims; ++i) n *= t->dims[i];
  if (!es || !kiln_dtype_is_float(dt) || n != count)
    return kiln_make_status(KILN_INVALID_ARGUMENT, "%s: initializer '%s' is not the float tensor of %lld elements the mask was made for", path, name, (long long)count);
  uint8_t* b = NULL;
  KILN_RETURN_IF_ERROR(raw_bytes(path, t, es, n, &b));
  for (int64_t i = 0; i < n; ++i)
    if (mask[i]) memset(b + (size_t)i * es, 0, es);
  set_raw(t, b, (size_t)n * es);
  return NULL;
}

kiln_status_t kiln_onnx_write_zeroed(const char* in_path, int32_t n, const char* const* names,
                                     const uint8_t* const* masks, const int64_t* counts, const char* out_path) {
  uint8_t* data = NULL;
  size_t len = 0;
  KILN_RETURN_IF_ERROR(kiln_onnx_read_file(in_path, &data, &len));
  Onnx__ModelProto* m = onnx__model_proto__unpack(NULL, len, data);
  free(data);
  if (!m) return kiln_make_status(KILN_PARSE_ERROR, "%s: not a valid ONNX protobuf", in_path);
  kiln_status_t s = m->graph ? NULL : kiln_make_status(KILN_PARSE_ERROR, "%s: no graph", in_path);
  for (int32_t i = 0; i < n && !s; ++i)
    if (masks[i]) s = zero_init(in_path, m->graph, names[i], masks[i], counts[i]);
  return kiln_onnx_pack_write(m, s, out_path);
}

kiln_status_t kiln_onnx_write_pruned(const char* in_path, const kiln_prune_plan_t* plan, const char* out_path) {
  uint8_t* data = NULL;
  size_t n = 0;
  KILN_RETURN_IF_ERROR(kiln_onnx_read_file(in_path, &data, &n));
  Onnx__ModelProto* m = onnx__model_proto__unpack(NULL, n, data);
  free(data);
  if (!m) return kiln_make_status(KILN_PARSE_ERROR, "%s: not a valid ONNX protobuf", in_path);
  kiln_status_t s = m->graph ? rewrite(in_path, m->graph, plan) : kiln_make_status(KILN_PARSE_ERROR, "%s: no graph", in_path);
  return kiln_onnx_pack_write(m, s, out_path);
}
