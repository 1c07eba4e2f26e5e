/* ONNX QDQ writer (see onnx_qdq.h): unpack the original model with
 * protobuf-c's default allocator, so that every message and string added
 * here with malloc is freed by protobuf_c_message_free_unpacked with the
 * rest, splice in the Q/DQ nodes and quantized initializers, pack, write. */
#include "frontend/onnx_qdq.h"
#include "frontend/onnx_file.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "onnx/onnx.pb-c.h"

#define S(x) ((x) ? (x) : "")

static char* cat(const char* a, const char* b) {
  size_t n = strlen(a) + strlen(b) + 1;
  char* s = malloc(n);
  if (s) snprintf(s, n, "%s%s", a, b);
  return s;
}

/* An initializer |name||suffix| of |dt| with |rank| dims, raw little-endian
 * data (kiln's hosts are little-endian, as raw_data is). */
static Onnx__TensorProto* new_tensor(const char* name, const char* suffix, kiln_dtype_t dt,
                                     int32_t rank, const int64_t* dims, const void* data,
                                     size_t nbytes) {
  Onnx__TensorProto* t = malloc(sizeof *t);
  if (!t) return NULL;
  onnx__tensor_proto__init(t);
  t->name = cat(name, suffix);
  t->has_data_type = 1;
  t->data_type = kiln_dtype_to_onnx(dt);
  t->dims = malloc(sizeof(int64_t) * (size_t)(rank + 1));
  if (t->dims) {
    t->n_dims = (size_t)rank;
    if (rank) memcpy(t->dims, dims, sizeof(int64_t) * (size_t)rank);
  }
  t->raw_data.data = malloc(nbytes + 1);
  if (t->raw_data.data) {
    t->has_raw_data = 1;
    t->raw_data.len = nbytes;
    if (nbytes) memcpy(t->raw_data.data, data, nbytes);
  }
  if (!t->name || !t->dims || !t->raw_data.data) {
    onnx__tensor_proto__free_unpacked(t, NULL);
    return NULL;
  }
  return t;
}

/* A QuantizeLinear/DequantizeLinear node reading |x|, |base|_scale and
 * |base|_zero_point, writing |out|; |axis| >= 0 adds the attribute. */
static Onnx__NodeProto* new_qdq_node(const char* op, const char* x, const char* base,
                                     const char* out, int32_t axis) {
  Onnx__NodeProto* n = malloc(sizeof *n);
  if (!n) return NULL;
  onnx__node_proto__init(n);
  n->op_type = strdup(op);
  n->name = cat(out, op[0] == 'Q' ? "_QuantizeLinear" : "_DequantizeLinear");
  n->input = calloc(3, sizeof(char*));
  n->output = calloc(1, sizeof(char*));
  bool ok = n->op_type && n->name && n->input && n->output;
  if (n->input) {
    n->n_input = 3;
    n->input[0] = strdup(x);
    n->input[1] = cat(base, "_scale");
    n->input[2] = cat(base, "_zero_point");
    ok = ok && n->input[0] && n->input[1] && n->input[2];
  }
  if (n->output) {
    n->n_output = 1;
    n->output[0] = strdup(out);
    ok = ok && n->output[0];
  }
  if (ok && axis >= 0) {
    Onnx__AttributeProto* a = malloc(sizeof *a);
    n->attribute = calloc(1, sizeof(*n->attribute));
    if (a) onnx__attribute_proto__init(a);
    if (a && n->attribute) {
      n->attribute[0] = a;
      n->n_attribute = 1;
      a->name = strdup("axis");
      a->has_type = 1;
      a->type = ONNX__ATTRIBUTE_PROTO__ATTRIBUTE_TYPE__INT;
      a->has_i = 1;
      a->i = axis;
      ok = a->name != NULL;
    } else {
      free(a);
      ok = false;
    }
  }
  if (!ok) {
    onnx__node_proto__free_unpacked(n, NULL);
    return NULL;
  }
  return n;
}

kiln_status_t kiln_onnx_read_file(const char* path, uint8_t** out, size_t* out_n) {
  FILE* f = fopen(path, "rb");
  if (!f) return kiln_make_status(KILN_IO_ERROR, "%s: cannot open: %s", path, strerror(errno));
  kiln_status_t s = NULL;
  uint8_t* buf = NULL;
  long n = -1;
  if (fseek(f, 0, SEEK_END) == 0) n = ftell(f);
  if (n < 0 || fseek(f, 0, SEEK_SET) != 0) s = kiln_make_status(KILN_IO_ERROR, "%s: cannot size the file", path);
  if (!s && !(buf = malloc((size_t)n + 1))) s = kiln_make_status(KILN_OUT_OF_MEMORY, "%s: %ld bytes: out of memory", path, n);
  if (!s && fread(buf, 1, (size_t)n, f) != (size_t)n) s = kiln_make_status(KILN_IO_ERROR, "%s: short read", path);
  fclose(f);
  if (s) {
    free(buf);
    return s;
  }
  *out = buf;
  *out_n = (size_t)n;
  return NULL;
}

static int32_t find_act(const kiln_qdq_plan_t* p, const char* name) {
  for (int32_t i = 0; i < p->n_acts; ++i)
    if (!strcmp(p->acts[i].name, name)) return i;
  return -1;
}

/* Appends |t| to the graph's initializers (array grown by the caller);
 * |t| is evaluated once. */
#define PUSH_INIT(gp, t)                                   \
  do {                                                     \
    Onnx__TensorProto* t_ = (t);                           \
    if (!t_) goto oom;                                     \
    (gp)->initializer[(gp)->n_initializer++] = t_;         \
  } while (0)
#define PUSH_NODE(arr, n, node)       \
  do {                                \
    Onnx__NodeProto* n_ = (node);     \
    if (!n_) goto oom;                \
    (arr)[(n)++] = n_;                \
  } while (0)

/* Q -> DQ after activation |a|: new initializers and two nodes into |nodes|. */
static bool add_act(Onnx__GraphProto* gp, const kiln_qdq_act_t* a, Onnx__NodeProto** nodes,
                    size_t* nn) {
  uint8_t zp[1];
  if (a->dtype == KILN_DTYPE_U8) zp[0] = (uint8_t)a->zero_point;
  else zp[0] = (uint8_t)(int8_t)a->zero_point;
  char* qname = cat(a->name, "_quantized");
  char* dqname = cat(a->name, "_dequantized");
  bool ok = false;
  if (qname && dqname) {
    PUSH_INIT(gp, new_tensor(a->name, "_scale", KILN_DTYPE_F32, 0, NULL, &a->scale, sizeof(float)));
    PUSH_INIT(gp, new_tensor(a->name, "_zero_point", a->dtype, 0, NULL, zp, 1));
    PUSH_NODE(nodes, *nn, new_qdq_node("QuantizeLinear", a->name, a->name, qname, -1));
    PUSH_NODE(nodes, *nn, new_qdq_node("DequantizeLinear", qname, a->name, dqname, -1));
    ok = true;
  }
oom:
  free(qname);
  free(dqname);
  return ok;
}

/* Replaces initializer |idx| by plan constant |c|: quantized data, scales,
 * zero points and a DequantizeLinear producing the original name. */
static bool add_const(Onnx__GraphProto* gp, size_t idx, const kiln_qdq_const_t* c,
                      Onnx__NodeProto** nodes, size_t* nn) {
  char* name = strdup(c->name);
  char* qname = cat(c->name, "_quantized");
  void* zeros = calloc((size_t)c->n_scales + 1, kiln_dtype_size(c->q.dtype));
  bool ok = false;
  if (name && qname && zeros) {
    onnx__tensor_proto__free_unpacked(gp->initializer[idx], NULL);
    gp->initializer[idx] = gp->initializer[--gp->n_initializer];
    int64_t n = c->n_scales;
    int32_t r = c->axis >= 0 ? 1 : 0;
    PUSH_INIT(gp, new_tensor(name, "_quantized", c->q.dtype, c->q.shape.rank, c->q.shape.dims, c->q.data,
                             c->q.nbytes));
    PUSH_INIT(gp, new_tensor(name, "_scale", KILN_DTYPE_F32, r, &n, c->scales, sizeof(float) * (size_t)n));
    PUSH_INIT(gp, new_tensor(name, "_zero_point", c->q.dtype, r, &n, zeros,
                             kiln_dtype_size(c->q.dtype) * (size_t)n));
    PUSH_NODE(nodes, *nn, new_qdq_node("DequantizeLinear", qname, name, name, c->axis));
    ok = true;
  }
oom:
  free(name);
  free(qname);
  free(zeros);
  return ok;
}

static kiln_status_t check_model(const char* path, const Onnx__ModelProto* m) {
  if (!m->graph) return kiln_make_status(KILN_PARSE_ERROR, "%s: no graph", path);
  int64_t opset = -1;
  for (size_t i = 0; i < m->n_opset_import; ++i) {
    const char* d = S(m->opset_import[i]->domain);
    if (!d[0] || !strcmp(d, "ai.onnx")) opset = m->opset_import[i]->version;
  }
  if (opset < 13)
    return kiln_make_status(KILN_UNSUPPORTED,
                            "%s: opset %lld; a QDQ model with per-channel weights needs opset 13 or "
                            "newer (re-export the model at opset >= 13)",
                            path, (long long)opset);
  for (size_t i = 0; i < m->graph->n_initializer; ++i) {
    const Onnx__TensorProto* t = m->graph->initializer[i];
    if (t->has_data_location && t->data_location == ONNX__TENSOR_PROTO__DATA_LOCATION__EXTERNAL)
      return kiln_make_status(KILN_UNSUPPORTED,
                              "%s: initializer '%s' keeps its data in an external file; kiln "
                              "quantize writes self-contained models only",
                              path, S(t->name));
  }
  return NULL;
}

/* Applies |p| to |gp| in place. */
static kiln_status_t rewrite(const char* path, Onnx__GraphProto* gp, const kiln_qdq_plan_t* p) {
  size_t cap_nodes = gp->n_node + 2 * (size_t)p->n_acts + (size_t)p->n_consts + 1;
  Onnx__NodeProto** nodes = calloc(cap_nodes, sizeof(*nodes));
  Onnx__TensorProto** inits =
      realloc(gp->initializer, sizeof(*inits) * (gp->n_initializer + 2 * (size_t)p->n_acts + 3 * (size_t)p->n_consts + 1));
  if (!nodes || !inits) {
    free(nodes);
    if (inits) gp->initializer = inits;
    return kiln_make_status(KILN_OUT_OF_MEMORY, "%s: out of memory rewriting the graph", path);
  }
  gp->initializer = inits;
  size_t nn = 0;
  kiln_status_t s = NULL;
  /* Constants first: their DequantizeLinear nodes read only initializers. */
  for (int32_t i = 0; i < p->n_consts && !s; ++i) {
    const kiln_qdq_const_t* c = &p->consts[i];
    size_t idx = gp->n_initializer;
    for (size_t k = 0; k < gp->n_initializer; ++k)
      if (!strcmp(S(gp->initializer[k]->name), c->name)) idx = k;
    if (idx == gp->n_initializer)
      s = kiln_make_status(KILN_NOT_FOUND, "%s: no initializer named '%s' to quantize", path, c->name);
    else if (!add_const(gp, idx, c, nodes, &nn))
      s = kiln_make_status(KILN_OUT_OF_MEMORY, "%s: out of memory quantizing '%s'", path, c->name);
    /* Old exporters list initializers among the graph inputs too: W is now
     * a node's output, so it cannot stay an input. */
    for (size_t k = 0; !s && k < gp->n_input; ++k)
      if (!strcmp(S(gp->input[k]->name), c->name)) {
        onnx__value_info_proto__free_unpacked(gp->input[k], NULL);
        memmove(&gp->input[k], &gp->input[k + 1], sizeof(*gp->input) * (gp->n_input - k - 1));
        --gp->n_input;
        break;
      }
  }
  uint8_t* placed = calloc((size_t)p->n_acts + 1, 1);
  if (!s && !placed) s = kiln_make_status(KILN_OUT_OF_MEMORY, "%s: out of memory", path);
  for (size_t k = 0; !s && k < gp->n_input; ++k) {
    int32_t a = find_act(p, S(gp->input[k]->name));
    if (a >= 0 && !placed[a]) {
      placed[a] = 1;
      if (!add_act(gp, &p->acts[a], nodes, &nn))
        s = kiln_make_status(KILN_OUT_OF_MEMORY, "%s: out of memory quantizing '%s'", path, p->acts[a].name);
    }
  }
  for (size_t i = 0; !s && i < gp->n_node; ++i) {
    Onnx__NodeProto* n = gp->node[i];
    /* Readers of a quantized activation read its dequantized value. */
    for (size_t j = 0; !s && j < n->n_input; ++j) {
      int32_t a = find_act(p, S(n->input[j]));
      if (a < 0) continue;
      char* dq = cat(p->acts[a].name, "_dequantized");
      if (!dq) {
        s = kiln_make_status(KILN_OUT_OF_MEMORY, "%s: out of memory", path);
        break;
      }
      free(n->input[j]);
      n->input[j] = dq;
    }
    nodes[nn++] = n;
    gp->node[i] = NULL;
    for (size_t j = 0; !s && j < n->n_output; ++j) {
      int32_t a = find_act(p, S(n->output[j]));
      if (a < 0 || placed[a]) continue;
      placed[a] = 1;
      if (!add_act(gp, &p->acts[a], nodes, &nn))
        s = kiln_make_status(KILN_OUT_OF_MEMORY, "%s: out of memory quantizing '%s'", path, p->acts[a].name);
    }
  }
  for (int32_t a = 0; !s && a < p->n_acts; ++a)
    if (!placed[a])
      s = kiln_make_status(KILN_NOT_FOUND, "%s: tensor '%s' is neither a graph input nor a node output",
                           path, p->acts[a].name);
  free(placed);
  /* Whatever happened, the nodes moved into |nodes| go back into the graph
   * so that free_unpacked frees each exactly once. */
  for (size_t i = 0; i < gp->n_node; ++i)
    if (gp->node[i]) nodes[nn++] = gp->node[i];
  free(gp->node);
  gp->node = nodes;
  gp->n_node = nn;
  return s;
}

kiln_status_t kiln_onnx_write_qdq(const char* in_path, const kiln_qdq_plan_t* plan,
                                  const char* out_path) {
  uint8_t* data = NULL;
  size_t n = 0;
  KILN_RETURN_IF_ERROR(kiln_onnx_read_file(in_path, &data, &n));
  Onnx__ModelProto* m = onnx__model_proto__unpack(NULL, n, data);
  free(data);
  if (!m) return kiln_make_status(KILN_PARSE_ERROR, "%s: not a valid ONNX protobuf", in_path);
  kiln_status_t s = check_model(in_path, m);
  if (!s) s = rewrite(in_path, m->graph, plan);
  return kiln_onnx_pack_write(m, s, out_path);
}

kiln_status_t kiln_onnx_write_file(const char* out_path, const uint8_t* out, size_t size) {
  kiln_status_t s = NULL;
  /* Not a regular file (/dev/null, a FIFO): written in place, since a rename
   * would replace the node itself (as root, /dev/null for everyone). */
  struct stat sb;
  const bool in_place = stat(out_path, &sb) == 0 && !S_ISREG(sb.st_mode);
  char* tmp = cat(out_path, in_place ? "" : ".tmp");
  if (!tmp) s = kiln_make_status(KILN_OUT_OF_MEMORY, "out of memory");
  if (!s) {
    FILE* f = fopen(tmp, "wb");
    if (!f) {
      s = kiln_make_status(KILN_IO_ERROR, "%s: cannot create: %s", tmp, strerror(errno));
    } else {
      bool ok = fwrite(out, 1, size, f) == size;
      ok = (fclose(f) == 0) && ok;
      if (!ok) s = kiln_make_status(KILN_IO_ERROR, "%s: write failed: %s", tmp, strerror(errno));
      else if (!in_place && rename(tmp, out_path) != 0)
        s = kiln_make_status(KILN_IO_ERROR, "%s: cannot rename to %s: %s", tmp, out_path, strerror(errno));
      if (s && !in_place) unlink(tmp);
    }
  }
  free(tmp);
  return s;
}

kiln_status_t kiln_onnx_pack_write(Onnx__ModelProto* m, kiln_status_t s, const char* out_path) {
  uint8_t* out = NULL;
  size_t size = 0;
  if (!s) {
    size = onnx__model_proto__get_packed_size(m);
    out = malloc(size + 1);
    if (!out) s = kiln_make_status(KILN_OUT_OF_MEMORY, "%s: %zu bytes: out of memory", out_path, size);
    else onnx__model_proto__pack(m, out);
  }
  onnx__model_proto__free_unpacked(m, NULL);
  if (!s) s = kiln_onnx_write_file(out_path, out, size);
  free(out);
  return s;
}
