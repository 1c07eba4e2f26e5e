/* Schemas for plugin ops (include/kiln/custom_op.h): the graph IR sees a
 * custom op as one more kiln_op_schema_t whose infer and run call the
 * plugin's shape function and reference kernel through the public structs,
 * and check what comes back (a plugin is not trusted to return sane
 * shapes: a rank above KILN_MAX_RANK or a negative dim where every input
 * was known is an error naming the plugin, the op and the node).
 *
 * Schemas are made on first lookup, one per registered op, and kept for
 * the process (the registry only grows while compiling). */
#include <math.h>
#include <pthread.h>
#include <stdio.h>
#include <string.h>

#include "ir/ops/custom.h"

#define MAX_SCHEMAS 256

static struct {
  const kiln_custom_op_t* op[MAX_SCHEMAS];
  kiln_op_schema_t schema[MAX_SCHEMAS];
  int32_t n;
} table;
static pthread_mutex_t table_lock = PTHREAD_MUTEX_INITIALIZER;

static kiln_status_t custom_infer(kiln_infer_t* ctx);
static kiln_status_t custom_run(const kiln_ref_ctx_t* ctx);

bool kiln_op_schema_is_custom(const kiln_op_schema_t* s) { return s && s->infer == custom_infer; }

const kiln_custom_op_t* kiln_custom_op_of(const kiln_node_t* n) {
  if (!n || !n->domain || !n->domain[0] || !strcmp(n->domain, "ai.onnx")) return NULL;
  return kiln_custom_op_find(n->domain, n->op_type);
}

const kiln_op_schema_t* kiln_custom_schema_lookup(const char* domain, const char* op_type, int64_t opset) {
  const kiln_custom_op_t* op = kiln_custom_op_find(domain, op_type);
  if (!op || opset < op->since_version || (op->until_version && opset > op->until_version)) return NULL;
  pthread_mutex_lock(&table_lock);
  int32_t at = -1;
  for (int32_t i = 0; i < table.n && at < 0; ++i)
    if (table.op[i] == op) at = i;
  if (at < 0 && table.n < MAX_SCHEMAS) at = table.n++;
  const kiln_op_schema_t* s = NULL;
  if (at >= 0) {
    /* the leading required inputs; one after an optional input is checked
     * by custom_infer (kiln's arity check wants optional inputs last).
     * Filled on every lookup: after kiln_plugin_unload_all another plugin's
     * op may live at a cached address. */
    int16_t min_in = 0;
    while (min_in < op->n_inputs && !op->inputs[min_in].optional) ++min_in;
    table.op[at] = op;
    table.schema[at] = (kiln_op_schema_t){
        .op_type = op->name,
        .min_inputs = min_in,
        .max_inputs = (int16_t)op->n_inputs,
        .min_outputs = (int16_t)op->n_outputs,
        .max_outputs = (int16_t)op->n_outputs,
        .infer = custom_infer,
        .run = custom_run,
        /* never fused: its kernel is the plugin's source, not tensor IR */
        .pattern = KILN_PATTERN_OPAQUE,
    };
    s = &table.schema[at];
  }
  pthread_mutex_unlock(&table_lock);
  return s;
}

void kiln_custom_where(const kiln_custom_op_t* op, const kiln_node_t* n, char* buf, size_t cap) {
  snprintf(buf, cap, "plugin op %s/%s (plugin '%s') at node '%s'", op->domain, op->name, kiln_custom_op_plugin(op),
           n ? n->name : "?");
}

static kiln_status_t op_error(const kiln_custom_op_t* op, const kiln_node_t* n, kiln_status_code_t code,
                              const char* fmt, const char* a, const char* b) {
  char where[512], msg[512];
  kiln_custom_where(op, n, where, sizeof where);
  snprintf(msg, sizeof msg, fmt, a, b);
  return kiln_make_status(code, "%s: %s", where, msg);
}

const char* kiln_custom_node_epilogue(const kiln_node_t* n, float* out_alpha) {
  const char* kind = NULL;
  *out_alpha = 0.01f;
  for (int32_t j = 0; j < n->n_attrs; ++j) {
    const kiln_attr_t* a = &n->attrs[j];
    if (!strcmp(a->name, KILN_CUSTOM_EPILOGUE_ATTR) && a->type == KILN_ATTR_STRING) kind = a->s;
    if (!strcmp(a->name, KILN_CUSTOM_EPILOGUE_ALPHA_ATTR) && a->type == KILN_ATTR_FLOAT) *out_alpha = a->f;
  }
  return kind;
}

float kiln_custom_epilogue_apply(const char* kind, float alpha, float v) {
  if (!strcmp(kind, "Relu")) return v > 0.0f ? v : 0.0f;
  if (!strcmp(kind, "LeakyRelu")) return v >= 0.0f ? v : v * alpha;
  if (!strcmp(kind, "Sigmoid")) return 1.0f / (1.0f + expf(-v));
  if (!strcmp(kind, "Tanh")) return tanhf(v);
  return v;
}

static bool is_epilogue_attr(const char* name) {
  return !strcmp(name, KILN_CUSTOM_EPILOGUE_ATTR) || !strcmp(name, KILN_CUSTOM_EPILOGUE_ALPHA_ATTR);
}

kiln_status_t kiln_custom_node_attrs(const kiln_custom_op_t* op, const kiln_node_t* n,
                                     kiln_custom_attr_t out[KILN_CUSTOM_MAX_ATTRS]) {
  for (int32_t j = 0; j < n->n_attrs; ++j) {
    if (op->epilogue && is_epilogue_attr(n->attrs[j].name)) continue; /* kiln's own (pass_plugin.c) */
    bool declared = false;
    for (int32_t i = 0; i < op->n_attrs && !declared; ++i) declared = !strcmp(op->attrs[i].name, n->attrs[j].name);
    if (!declared)
      return op_error(op, n, KILN_INVALID_ARGUMENT, "attribute '%s' is not declared by the op%s", n->attrs[j].name, "");
  }
  static const kiln_attr_type_t want[] = {
      [KILN_CUSTOM_ATTR_INT] = KILN_ATTR_INT,
      [KILN_CUSTOM_ATTR_FLOAT] = KILN_ATTR_FLOAT,
      [KILN_CUSTOM_ATTR_INTS] = KILN_ATTR_INTS,
      [KILN_CUSTOM_ATTR_FLOATS] = KILN_ATTR_FLOATS,
  };
  for (int32_t i = 0; i < op->n_attrs; ++i) {
    const kiln_custom_attr_decl_t* d = &op->attrs[i];
    kiln_custom_attr_t* a = &out[i];
    *a = (kiln_custom_attr_t){.name = d->name, .type = d->type, .i = d->default_int, .f = d->default_float,
                              .count = -1};
    const kiln_attr_t* na = NULL;
    for (int32_t j = 0; j < n->n_attrs && !na; ++j)
      if (!strcmp(n->attrs[j].name, d->name)) na = &n->attrs[j];
    if (!na) {
      if (d->required) return op_error(op, n, KILN_INVALID_ARGUMENT, "required attribute '%s' is missing%s", d->name, "");
      continue;
    }
    if (na->type != want[d->type])
      return op_error(op, n, KILN_INVALID_ARGUMENT, "attribute '%s' has the wrong type (the op declares %s)", d->name,
                      d->type == KILN_CUSTOM_ATTR_INT     ? "INT"
                      : d->type == KILN_CUSTOM_ATTR_FLOAT ? "FLOAT"
                      : d->type == KILN_CUSTOM_ATTR_INTS  ? "INTS"
                                                          : "FLOATS");
    a->i = na->i;
    a->f = na->f;
    if (d->type == KILN_CUSTOM_ATTR_INTS || d->type == KILN_CUSTOM_ATTR_FLOATS) {
      a->count = na->count;
      a->ints = na->ints;
      a->floats = na->floats;
    }
  }
  return NULL;
}

/* The inputs as the plugin sees them, each checked against its declared
 * dtypes. |data| NULL: no values (shape function). */
static kiln_status_t view_inputs(const kiln_custom_op_t* op, const kiln_node_t* n, int32_t n_in,
                                 const kiln_dtype_t* dt, const kiln_shape_t* const* shape, void* const* data,
                                 kiln_custom_tensor_t* out, bool* all_known) {
  if (n_in > op->n_inputs)
    return op_error(op, n, KILN_INVALID_ARGUMENT, "the node has more inputs than the op declares%s%s", "", "");
  *all_known = true;
  for (int32_t i = 0; i < op->n_inputs; ++i) {
    kiln_custom_tensor_t* t = &out[i];
    memset(t, 0, sizeof *t);
    if (i >= n_in || dt[i] == KILN_DTYPE_UNDEFINED) {
      if (!op->inputs[i].optional)
        return op_error(op, n, KILN_INVALID_ARGUMENT, "required input '%s' is missing%s", op->inputs[i].name, "");
      continue;
    }
    if (!(op->inputs[i].dtypes & KILN_CUSTOM_DTYPE(dt[i])))
      return op_error(op, n, KILN_INVALID_ARGUMENT, "input '%s' is %s, a dtype the op does not declare",
                      op->inputs[i].name, kiln_dtype_name(dt[i]));
    t->dtype = dt[i];
    t->rank = shape[i]->rank;
    for (int32_t d = 0; d < KILN_MAX_RANK; ++d) t->dims[d] = d < t->rank ? shape[i]->dims[d] : 0;
    if (!kiln_shape_is_static(shape[i])) *all_known = false;
    t->data = data ? data[i] : NULL;
  }
  return NULL;
}

static kiln_status_t call(const kiln_custom_op_t* op, const kiln_node_t* n, kiln_custom_fn fn, const char* what,
                          kiln_custom_ctx_t* c) {
  char err[400] = "";
  c->error = err;
  c->error_cap = sizeof err;
  int rc = fn(c);
  err[sizeof err - 1] = 0;
  c->error = NULL;
  c->error_cap = 0;
  if (rc) return op_error(op, n, KILN_INVALID_ARGUMENT, "%s failed: %s", what, err[0] ? err : "(no message)");
  return NULL;
}

static bool input_dim(const kiln_custom_tensor_t* in, int32_t n_in, int64_t d) {
  for (int32_t i = 0; i < n_in; ++i)
    for (int32_t k = 0; k < in[i].rank; ++k)
      if (in[i].dims[k] == d) return true;
  return false;
}

static kiln_status_t custom_infer(kiln_infer_t* ctx) {
  const kiln_custom_op_t* op = kiln_custom_op_of(ctx->node);
  if (!op) return kiln_make_status(KILN_INTERNAL, "node '%s': plugin op not registered", ctx->node->name);
  const kiln_node_t* n = ctx->node;
  kiln_custom_attr_t attrs[KILN_CUSTOM_MAX_ATTRS];
  KILN_RETURN_IF_ERROR(kiln_custom_node_attrs(op, n, attrs));
  kiln_dtype_t dt[KILN_CUSTOM_MAX_IO] = {0};
  const kiln_shape_t* sh[KILN_CUSTOM_MAX_IO] = {0};
  for (int32_t i = 0; i < ctx->n_in && i < KILN_CUSTOM_MAX_IO; ++i)
    if (ctx->in[i]) {
      dt[i] = ctx->in[i]->dtype;
      sh[i] = &ctx->in[i]->shape;
    }
  kiln_custom_tensor_t in[KILN_CUSTOM_MAX_IO], out[KILN_CUSTOM_MAX_IO];
  bool known;
  KILN_RETURN_IF_ERROR(view_inputs(op, n, ctx->n_in, dt, sh, NULL, in, &known));
  for (int32_t i = 0; i < op->n_inputs; ++i)
    if (in[i].dtype && in[i].rank < 0) {
      /* nothing to ask the plugin yet: outputs unknown, typed like input 0 */
      for (int32_t j = 0; j < ctx->n_out; ++j) {
        kiln_shape_t u = kiln_shape_unknown();
        kiln_infer_set(ctx, j, in[0].dtype ? in[0].dtype : KILN_DTYPE_F32, &u);
      }
      return NULL;
    }
  memset(out, 0, sizeof out);
  for (int32_t j = 0; j < op->n_outputs; ++j) out[j].rank = -1;
  kiln_custom_ctx_t c = {.node = n->name, .n_in = op->n_inputs, .in = in, .n_out = op->n_outputs, .out = out,
                         .n_attrs = op->n_attrs, .attrs = attrs};
  KILN_RETURN_IF_ERROR(call(op, n, op->shape, "the shape function", &c));
  for (int32_t j = 0; j < op->n_outputs; ++j) {
    const kiln_custom_tensor_t* o = &out[j];
    const char* on = op->outputs[j].name;
    if (!(op->outputs[j].dtypes & KILN_CUSTOM_DTYPE(o->dtype)) || o->dtype <= 0 || o->dtype >= KILN_DTYPE_COUNT_)
      return op_error(op, n, KILN_INVALID_ARGUMENT,
                      "the shape function returned nonsense: output '%s' has dtype %s, not one the op declares", on,
                      o->dtype > 0 && o->dtype < KILN_DTYPE_COUNT_ ? kiln_dtype_name(o->dtype) : "(invalid)");
    if (o->rank < 0 || o->rank > KILN_MAX_RANK)
      return op_error(op, n, KILN_INVALID_ARGUMENT, "the shape function returned nonsense: output '%s' has rank %s",
                      on, o->rank < 0 ? "< 0 (not set)" : "> KILN_MAX_RANK");
    int64_t numel = 1;
    for (int32_t d = 0; d < o->rank; ++d)
      if (o->dims[d] > 0 && __builtin_mul_overflow(numel, o->dims[d], &numel))
        return op_error(op, n, KILN_LIMIT_EXCEEDED, "the shape function returned nonsense: output '%s' has more "
                        "elements than int64 holds%s", on, "");
    kiln_shape_t s = {.rank = o->rank};
    for (int32_t d = 0; d < KILN_MAX_RANK; ++d) s.dims[d] = KILN_DIM_UNKNOWN;
    for (int32_t d = 0; d < o->rank; ++d) {
      int64_t v = o->dims[d];
      if (v < 0 && known)
        return op_error(op, n, KILN_INVALID_ARGUMENT,
                        "the shape function returned nonsense: output '%s' has a negative dim though every input "
                        "shape is known%s", on, "");
      /* a negative dim copied from an input keeps its symbol */
      s.dims[d] = v >= 0 ? v : input_dim(in, op->n_inputs, v) ? v : KILN_DIM_UNKNOWN;
    }
    if (j < ctx->n_out) kiln_infer_set(ctx, j, o->dtype, &s);
  }
  return NULL;
}

static kiln_status_t custom_run(const kiln_ref_ctx_t* ctx) {
  const kiln_custom_op_t* op = kiln_custom_op_of(ctx->node);
  if (!op) return kiln_make_status(KILN_INTERNAL, "node '%s': plugin op not registered", ctx->node->name);
  const kiln_node_t* n = ctx->node;
  kiln_custom_attr_t attrs[KILN_CUSTOM_MAX_ATTRS];
  KILN_RETURN_IF_ERROR(kiln_custom_node_attrs(op, n, attrs));
  kiln_dtype_t dt[KILN_CUSTOM_MAX_IO] = {0};
  const kiln_shape_t* sh[KILN_CUSTOM_MAX_IO] = {0};
  void* data[KILN_CUSTOM_MAX_IO] = {0};
  for (int32_t i = 0; i < ctx->n_in && i < KILN_CUSTOM_MAX_IO; ++i)
    if (ctx->in[i]) {
      dt[i] = ctx->in[i]->dtype;
      sh[i] = &ctx->in[i]->shape;
      data[i] = ctx->in[i]->data;
    }
  kiln_custom_tensor_t in[KILN_CUSTOM_MAX_IO], out[KILN_CUSTOM_MAX_IO];
  bool known;
  KILN_RETURN_IF_ERROR(view_inputs(op, n, ctx->n_in, dt, sh, data, in, &known));
  memset(out, 0, sizeof out);
  for (int32_t j = 0; j < op->n_outputs && j < ctx->n_out; ++j) {
    const kiln_array_t* a = ctx->out[j];
    if (!a) return op_error(op, n, KILN_INTERNAL, "output '%s' was not allocated%s", op->outputs[j].name, "");
    out[j].dtype = a->dtype;
    out[j].rank = a->shape.rank;
    for (int32_t d = 0; d < a->shape.rank; ++d) out[j].dims[d] = a->shape.dims[d];
    out[j].data = a->data;
  }
  kiln_custom_ctx_t c = {.node = n->name, .n_in = op->n_inputs, .in = in, .n_out = op->n_outputs, .out = out,
                         .n_attrs = op->n_attrs, .attrs = attrs};
  KILN_RETURN_IF_ERROR(call(op, n, op->reference, "the reference kernel", &c));
  float alpha;
  const char* epi = op->epilogue ? kiln_custom_node_epilogue(n, &alpha) : NULL;
  const kiln_array_t* y = ctx->n_out > 0 ? ctx->out[0] : NULL;
  if (epi && y && (y->dtype == KILN_DTYPE_F32 || y->dtype == KILN_DTYPE_F16)) {
    const int64_t m = kiln_array_numel(y);
    for (int64_t i = 0; i < m; ++i)
      kiln_store_f64(y->dtype, y->data, (size_t)i,
                     kiln_custom_epilogue_apply(epi, alpha, (float)kiln_load_f64(y->dtype, y->data, (size_t)i)));
  }
  return NULL;
}
