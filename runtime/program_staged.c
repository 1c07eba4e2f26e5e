/* Staged programs (runtime/program_staged.h): the closed table of host
 * nodes, and the checks a staged program must pass before a session may
 * run it -- the parser hands anything it read here, so a corrupt table is
 * refused naming the segment instead of being indexed out of range. */
#include "runtime/program_staged.h"

#include <stdarg.h>
#include <stdio.h>
#include <string.h>

#include "runtime/program.h"

static const struct {
  const char* name;
  int8_t min_in, max_in; /* inputs from index min_in on are optional (-1) */
  int8_t max_out;        /* outputs after the first are optional (-1) */
  int8_t out_like_in;    /* output 0 has input 0's dtype (else every output is i64) */
  const char* attrs[KILN_STAGED_MAX_ATTRS];
} k_ops[KILN_STAGED_OP_COUNT_] = {
    [KILN_STAGED_NONZERO] = {"NonZero", 1, 1, 1, 0, {NULL}},
    [KILN_STAGED_NMS] = {"NonMaxSuppression", 2, 5, 1, 0, {"center_point_box", NULL}},
    [KILN_STAGED_TOPK] = {"TopK", 2, 2, 2, 1, {"axis", "largest", NULL}},
    [KILN_STAGED_COMPRESS] = {"Compress", 2, 2, 1, 1, {"axis", NULL}},
};

const char* kiln_staged_op_name(int32_t op) {
  return op > KILN_STAGED_STAGE && op < KILN_STAGED_OP_COUNT_ ? k_ops[op].name : NULL;
}

int32_t kiln_staged_op_of(const char* name) {
  for (int32_t op = 1; name && op < KILN_STAGED_OP_COUNT_; ++op)
    if (!strcmp(k_ops[op].name, name)) return op;
  return KILN_STAGED_STAGE;
}

bool kiln_staged_attr_known(int32_t op, const char* name) {
  if (!kiln_staged_op_name(op) || !name) return false;
  for (int32_t i = 0; i < KILN_STAGED_MAX_ATTRS && k_ops[op].attrs[i]; ++i)
    if (!strcmp(k_ops[op].attrs[i], name)) return true;
  return false;
}

uint64_t kiln_staged_value_bytes(const kiln_staged_value_t* v) {
  uint64_t n = kiln_dtype_size(v->dtype);
  for (int32_t d = 0; d < v->rank && d < KILN_MAX_RANK; ++d) {
    if (v->dims[d] < 0 || (v->dims[d] && n > UINT64_MAX / (uint64_t)v->dims[d])) return UINT64_MAX;
    n *= (uint64_t)v->dims[d];
  }
  return n;
}

void kiln_program_staged_free(kiln_program_t* p) {
  kiln_program_staged_t* t = p->staged;
  if (!t) return;
  kiln_allocator_t a = p->allocator;
  for (int32_t i = 0; t->values && i < t->n_values; ++i) kiln_allocator_free(a, t->values[i].data);
  for (int32_t i = 0; t->segments && i < t->n_segments; ++i) {
    kiln_staged_segment_t* s = &t->segments[i];
    kiln_allocator_free(a, s->name);
    kiln_allocator_free(a, s->in);
    kiln_allocator_free(a, s->out);
    for (int32_t k = 0; s->attrs && k < s->n_attrs; ++k) kiln_allocator_free(a, s->attrs[k].name);
    kiln_allocator_free(a, s->attrs);
    kiln_program_destroy(s->prog);
  }
  kiln_allocator_free(a, t->values);
  kiln_allocator_free(a, t->segments);
  kiln_allocator_free(a, t->model_in);
  kiln_allocator_free(a, t->model_out);
  kiln_allocator_free(a, t);
  p->staged = NULL;
}

static const char* pname(const kiln_program_t* p) {
  return p->model_name && p->model_name[0] ? p->model_name : "module";
}

#define BAD(...) bad(p, seg, __VA_ARGS__)
static kiln_status_t bad(const kiln_program_t* p, int32_t seg, const char* fmt, ...) KILN_PRINTF(3, 4);
static kiln_status_t bad(const kiln_program_t* p, int32_t seg, const char* fmt, ...) {
  char m[300];
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(m, sizeof m, fmt, ap);
  va_end(ap);
  if (seg < 0) return kiln_make_status(KILN_PARSE_ERROR, "%s: invalid program: section 'STGS': %s", pname(p), m);
  const kiln_staged_segment_t* s = &p->staged->segments[seg];
  return kiln_make_status(KILN_PARSE_ERROR, "%s: invalid program: section 'STGS': segment %d ('%s'): %s", pname(p), (int)seg,
                          s->name ? s->name : "", m);
}

static kiln_status_t check_values(const kiln_program_t* p) {
  const kiln_program_staged_t* t = p->staged;
  const int32_t seg = -1;
  if (t->n_values < 1 || t->n_values > KILN_STAGED_MAX_VALUES || !t->values)
    return BAD("%d values (needs 1..%d)", (int)t->n_values, KILN_STAGED_MAX_VALUES);
  for (int32_t i = 0; i < t->n_values; ++i) {
    const kiln_staged_value_t* v = &t->values[i];
    if (!kiln_dtype_size(v->dtype)) return BAD("value %d has dtype number %d", (int)i, (int)v->dtype);
    if (v->rank < 0 || v->rank > KILN_MAX_RANK) return BAD("value %d has rank %d", (int)i, (int)v->rank);
    if (v->datadep >> v->rank) return BAD("value %d marks axes past its rank %d", (int)i, (int)v->rank);
    for (int32_t d = 0; d < v->rank; ++d)
      if (v->dims[d] < 0 || v->dims[d] > (1ll << 40))
        return BAD("value %d axis %d has size %lld", (int)i, (int)d, (long long)v->dims[d]);
    if (kiln_staged_value_bytes(v) > (1ull << 40)) return BAD("value %d is too large", (int)i);
    if (v->data && (v->datadep || v->nbytes != kiln_staged_value_bytes(v)))
      return BAD("constant value %d holds %llu bytes for its shape's %llu", (int)i, (unsigned long long)v->nbytes,
                 (unsigned long long)kiln_staged_value_bytes(v));
  }
  return NULL;
}

/* Whether program buffer |b| has value |v|'s dtype and shape (a
 * data-dependent axis: its bound). */
static bool same_shape(const kiln_program_buffer_t* b, const kiln_staged_value_t* v) {
  if (b->dtype != v->dtype || b->rank != v->rank) return false;
  for (int32_t d = 0; d < v->rank; ++d)
    if (b->shape[d] != v->dims[d]) return false;
  return true;
}

static kiln_status_t check_segment(const kiln_program_t* p, int32_t seg, uint8_t* made) {
  const kiln_program_staged_t* t = p->staged;
  const kiln_staged_segment_t* s = &t->segments[seg];
  if (s->op < 0 || s->op >= KILN_STAGED_OP_COUNT_) return BAD("op number %d is not in the table", (int)s->op);
  if (s->n_in < 0 || s->n_in > KILN_STAGED_MAX_IO || s->n_out < 1 || s->n_out > KILN_STAGED_MAX_IO ||
      (s->n_in && !s->in) || !s->out)
    return BAD("%d inputs and %d outputs", (int)s->n_in, (int)s->n_out);
  if (s->n_attrs < 0 || s->n_attrs > KILN_STAGED_MAX_ATTRS || (s->n_attrs && !s->attrs))
    return BAD("%d attributes", (int)s->n_attrs);
  const bool host = s->op != KILN_STAGED_STAGE;
  for (int32_t k = 0; k < s->n_in; ++k) {
    const int32_t v = s->in[k];
    if (v == -1 && host && k >= k_ops[s->op].min_in) continue;
    if (v < 0 || v >= t->n_values) return BAD("input %d is value %d of %d", (int)k, (int)v, (int)t->n_values);
    if (!made[v]) return BAD("input %d reads value %d before anything makes it", (int)k, (int)v);
  }
  for (int32_t k = 0; k < s->n_out; ++k) {
    const int32_t v = s->out[k];
    if (v == -1 && host && k > 0) continue;
    if (v < 0 || v >= t->n_values) return BAD("output %d is value %d of %d", (int)k, (int)v, (int)t->n_values);
    if (made[v]) return BAD("output %d makes value %d, which is made before", (int)k, (int)v);
    made[v] = 1;
  }
  if (host) {
    if (s->prog) return BAD("a host node with a program");
    if (s->n_in < k_ops[s->op].min_in || s->n_in > k_ops[s->op].max_in || s->n_out > k_ops[s->op].max_out)
      return BAD("%s takes %d..%d inputs and 1..%d outputs, not %d and %d", k_ops[s->op].name,
                 (int)k_ops[s->op].min_in, (int)k_ops[s->op].max_in, (int)k_ops[s->op].max_out, (int)s->n_in,
                 (int)s->n_out);
    for (int32_t k = 0; k < s->n_attrs; ++k)
      if (!s->attrs[k].name || !kiln_staged_attr_known(s->op, s->attrs[k].name))
        return BAD("%s has no attribute '%s'", k_ops[s->op].name, s->attrs[k].name ? s->attrs[k].name : "");
    /* the dtypes the kernel makes (their shapes are checked as they are made) */
    for (int32_t k = 0; k < s->n_out; ++k) {
      const bool like = k == 0 && k_ops[s->op].out_like_in;
      if (s->out[k] >= 0 && t->values[s->out[k]].dtype != (like ? t->values[s->in[0]].dtype : KILN_DTYPE_I64))
        return BAD("output %d is not %s", (int)k, like ? "of input 0's dtype" : "i64");
    }
    return NULL;
  }
  if (!s->prog) return BAD("a stage without a program");
  if (s->n_attrs) return BAD("a stage with attributes");
  const kiln_program_t* q = s->prog;
  if (q->staged || q->n_buckets) return BAD("a stage's program is staged or has shape buckets of its own");
  KILN_RETURN_IF_ERROR(kiln_program_validate(q), "%s: section 'STGS': segment %d ('%s')", pname(p), (int)seg, s->name);
  if (strcmp(q->target, p->target) != 0) return BAD("compiled for %s in a %s module", q->target, p->target);
  if (q->n_inputs != s->n_in || q->n_outputs != s->n_out)
    return BAD("its program has %d inputs and %d outputs, the segment %d and %d", (int)q->n_inputs, (int)q->n_outputs,
               (int)s->n_in, (int)s->n_out);
  for (int32_t k = 0; k < s->n_in; ++k) {
    const kiln_staged_value_t* v = &t->values[s->in[k]];
    if (v->datadep) return BAD("input %d has a data-dependent size (this kiln stores fixed-shape stages only)", (int)k);
    if (!same_shape(&q->buffers[q->inputs[k]], v)) return BAD("input %d's dtype or shape differs from value %d's", (int)k, (int)s->in[k]);
  }
  for (int32_t k = 0; k < s->n_out; ++k)
    if (t->values[s->out[k]].datadep || !same_shape(&q->buffers[q->outputs[k]], &t->values[s->out[k]]))
      return BAD("output %d's dtype or shape differs from value %d's", (int)k, (int)s->out[k]);
  return NULL;
}

static kiln_status_t check_io(const kiln_program_t* p, uint8_t* made, bool out) {
  const kiln_program_staged_t* t = p->staged;
  const int32_t seg = -1;
  const int32_t n = out ? p->n_outputs : p->n_inputs;
  const int32_t* ids = out ? t->model_out : t->model_in;
  if (n && !ids) return BAD("the model %ss' values are missing", out ? "output" : "input");
  for (int32_t i = 0; i < n; ++i) {
    const int32_t v = ids[i];
    if (v < 0 || v >= t->n_values) return BAD("model %s %d is value %d of %d", out ? "output" : "input", (int)i, (int)v, (int)t->n_values);
    const kiln_staged_value_t* x = &t->values[v];
    if (!same_shape(&p->buffers[out ? p->outputs[i] : p->inputs[i]], x))
      return BAD("model %s %d's dtype or shape differs from value %d's", out ? "output" : "input", (int)i, (int)v);
    if (out && !made[v]) return BAD("model output %d is value %d, which nothing makes", (int)i, (int)v);
    if (!out && (made[v] || x->data || x->datadep))
      return BAD("model input %d is value %d, a constant, a data-dependent value or another input", (int)i, (int)v);
    if (!out) made[v] = 1;
  }
  return NULL;
}

kiln_status_t kiln_program_validate_staged(const kiln_program_t* p) {
  const kiln_program_staged_t* t = p->staged;
  if (!t) return NULL;
  const int32_t seg = -1;
  if (p->n_kernels || p->n_buckets || p->n_dims)
    return BAD("the program that carries the stages has kernels, shape buckets or dynamic dims of its own");
  KILN_RETURN_IF_ERROR(check_values(p));
  if (t->n_segments < 1 || t->n_segments > KILN_STAGED_MAX_SEGMENTS || !t->segments)
    return BAD("%d segments (needs 1..%d)", (int)t->n_segments, KILN_STAGED_MAX_SEGMENTS);
  uint8_t* made = NULL;
  KILN_RETURN_IF_ERROR(kiln_allocator_malloc(kiln_allocator_system(), (size_t)t->n_values, "staged value table",
                                             (void**)&made));
  for (int32_t i = 0; i < t->n_values; ++i) made[i] = t->values[i].data != NULL;
  kiln_status_t st = check_io(p, made, false);
  for (int32_t s = 0; s < t->n_segments && !st; ++s) st = check_segment(p, s, made);
  if (!st) st = check_io(p, made, true);
  kiln_allocator_free(kiln_allocator_system(), made);
  return st;
}
