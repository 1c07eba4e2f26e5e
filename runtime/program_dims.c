/* Dynamic dims of a program (see kiln_program_dim_t in program.h): sizes as
 * linear functions of the dim, the value a run's inputs carry, and the
 * program evaluated at one value for the memory planner.
 *
 * A per-sample program keeps one sample's sizes; everything the runtime
 * needs at a value n follows from them: a root buffer spans n times its
 * bytes (sample i at i times its bytes), a view of it the view's bytes plus
 * n - 1 root strides. The kernels were compiled with the same strides
 * (lowering/plan_dyn.c), so sizes and code cannot disagree. */
#include <stdio.h>
#include <string.h>

#include "runtime/program.h"

static const char* pname(const kiln_program_t* p) {
  return p->model_name && p->model_name[0] ? p->model_name : "module";
}

bool kiln_program_buffer_per_sample(const kiln_program_t* p, int32_t b) {
  if (p->n_dims <= 0 || p->dim_axis) return false;
  switch (p->buffers[kiln_program_root(p, b)].kind) {
    case KILN_PB_INPUT:
    case KILN_PB_OUTPUT:
    case KILN_PB_INTERMEDIATE:
    case KILN_PB_TEMP:
      return true;
    default:
      return false;
  }
}

/* c[0] + c[1] n + c[2] n^2: no overflow for n <= 2^20 with the coefficients
 * validate_dim_bytes allows */
static int64_t q_at(const int64_t* c, int64_t n) { return c[0] + c[1] * n + c[2] * n * n; }

uint64_t kiln_program_bytes_at(const kiln_program_t* p, int32_t b, int64_t n) {
  const uint64_t own = p->buffers[b].bytes;
  if (p->dim_bytes && p->dim_axis && n >= p->dims[0].lo && n <= p->dims[0].hi) {
    return (uint64_t)q_at(p->dim_bytes + 3 * (size_t)b, n); /* validated: inside [0, own] */
  }
  if (n <= 1 || !kiln_program_buffer_per_sample(p, b)) return own;
  return own + (uint64_t)(n - 1) * p->buffers[kiln_program_root(p, b)].bytes;
}

static kiln_status_t bad(const kiln_program_t* p, const char* fmt, const char* a, long long x) {
  char msg[400];
  snprintf(msg, sizeof msg, fmt, a, x); /* a format without %lld ignores x */
  return kiln_make_status(KILN_PARSE_ERROR, "%s: invalid program: %s", pname(p), msg);
}

/* The sizes per value of a dim inside the shapes (section 'DYNM'): the
 * buffer's own bytes at hi, inside 0..them over the range (checked at the
 * ends and next to the vertex), constants, status words and the dims fixed.
 * A view longer than its root or an input longer than its buffer at some
 * value fails that run where the device checks its views and copies. */
static kiln_status_t validate_dim_bytes(const kiln_program_t* p) {
  const kiln_program_dim_t* d = &p->dims[0];
  for (int32_t i = 0; i < p->n_buffers; ++i) {
    const kiln_program_buffer_t* b = &p->buffers[i];
    const int64_t* c = p->dim_bytes + 3 * (size_t)i;
    const int64_t own = (int64_t)b->bytes;
    bool ok = c[0] >= -(1ll << 48) && c[0] <= (1ll << 48) && c[1] >= -(1ll << 40) && c[1] <= (1ll << 40) &&
              c[2] >= -(1ll << 20) && c[2] <= (1ll << 20) && q_at(c, d->hi) == own &&
              ((b->kind != KILN_PB_CONST && b->kind != KILN_PB_STATUS && b->kind != KILN_PB_DIMS) || (!c[1] && !c[2]));
    const int64_t t = c[2] ? -c[1] / (2 * c[2]) : d->lo, at[5] = {d->lo, d->hi, t - 1, t, t + 1};
    for (int k = 0; k < 5 && ok; ++k) {
      const int64_t v = at[k] >= d->lo && at[k] <= d->hi ? q_at(c, at[k]) : 0;
      ok = v >= 0 && v <= own;
    }
    if (!ok)
      return kiln_make_status(KILN_PARSE_ERROR, "%s: invalid program: 'DYNM': buffer '%s' takes %lld%+lld*n%+lld*n^2 "
                              "bytes, not 0..%llu for n in %lld..%lld", pname(p), b->name, (long long)c[0],
                              (long long)c[1], (long long)c[2], (unsigned long long)b->bytes, (long long)d->lo,
                              (long long)d->hi);
  }
  return NULL;
}

kiln_status_t kiln_program_validate_dims(const kiln_program_t* p) {
  /* One outer dim is what the kernels and the session implement so far. */
  if (p->n_dims < 0 || p->n_dims > 1 || (p->n_dims && !p->dims))
    return bad(p, "%s: %lld dynamic dims (this kiln runs one, the outermost)", "dims", (long long)p->n_dims);
  if (p->dim_axis && p->n_dims != 1) return bad(p, "%s without %lld dynamic dim", "dynamic dim axes", 1);
  if (p->dim_bytes && !p->dim_axis) return bad(p, "'%s' without 'DYNA'", "DYNM", 0);
  int32_t n_dims_buffers = 0;
  for (int32_t i = 0; i < p->n_buffers; ++i) {
    const kiln_program_buffer_t* b = &p->buffers[i];
    if (b->kind != KILN_PB_DIMS) continue;
    n_dims_buffers++;
    if (!p->n_dims) return bad(p, "dims buffer '%s' in a program without dynamic dims", b->name, 0);
    if (b->dtype != KILN_DTYPE_I64 || b->alias_of >= 0 || b->bytes != 8 * (uint64_t)p->n_dims)
      return bad(p, "dims buffer '%s' is not an i64[%lld] buffer of its own", b->name, (long long)p->n_dims);
  }
  if (p->n_dims == 0) return NULL;
  const kiln_program_dim_t* d = &p->dims[0];
  if (!d->name || !d->name[0]) return bad(p, "%s %lld has no name", "dynamic dim", 0);
  if (d->lo < 1 || d->hi < d->lo || d->hi > KILN_PROGRAM_MAX_DIM_VALUE)
    return kiln_make_status(KILN_PARSE_ERROR, "%s: invalid program: dynamic dim '%s' has the range %lld..%lld (needs "
                            "1 <= lo <= hi <= %lld)", pname(p), d->name, (long long)d->lo, (long long)d->hi,
                            KILN_PROGRAM_MAX_DIM_VALUE);
  if (n_dims_buffers != 1) return bad(p, "%s: %lld dims buffers (needs one)", "dynamic dims", n_dims_buffers);
  if (p->dim_axis) {
    /* the dim inside the shapes: every buffer at the top of the range */
    for (int32_t i = 0; i < p->n_inputs + p->n_outputs; ++i) {
      const bool in = i < p->n_inputs;
      const int32_t io = in ? p->inputs[i] : p->outputs[i - p->n_inputs];
      const char* nm = in ? p->input_names[i] : p->output_names[i - p->n_inputs];
      const int32_t ax = p->dim_axis[i];
      const kiln_program_buffer_t* b = &p->buffers[io];
      if (ax < -1 || ax >= b->rank || (ax >= 0 && b->shape[ax] != d->hi))
        return bad(p, "'%s': its axis %lld is not the dynamic dim at the top of its range", nm, (long long)ax);
    }
    return p->dim_bytes ? validate_dim_bytes(p) : NULL;
  }
  for (int32_t t = 0; t < 2; ++t) {
    const int32_t n = t ? p->n_outputs : p->n_inputs;
    const int32_t* io = t ? p->outputs : p->inputs;
    char* const* names = t ? p->output_names : p->input_names;
    for (int32_t i = 0; i < n; ++i) {
      const kiln_program_buffer_t* b = &p->buffers[io[i]];
      if (b->kind == KILN_PB_DIMS) return bad(p, "'%s' is the dims buffer %lld", names[i], 0);
      if (!kiln_program_buffer_per_sample(p, io[i])) continue;
      if (b->rank < 1 || b->shape[0] != 1)
        return bad(p, "'%s' is per sample but its dim 0 is not 1 (rank %lld)", names[i], (long long)b->rank);
    }
  }
  for (int32_t i = 0; i < p->n_buffers; ++i) {
    uint64_t root = p->buffers[kiln_program_root(p, i)].bytes;
    if (kiln_program_buffer_per_sample(p, i) && root &&
        (root > KILN_PROGRAM_MAX_BUFFER_BYTES / (uint64_t)d->hi ||
         kiln_program_bytes_at(p, i, d->hi) > KILN_PROGRAM_MAX_BUFFER_BYTES))
      return bad(p, "buffer '%s' at the top of its range (%lld) spans more than the buffer limit",
                 p->buffers[i].name, (long long)d->hi);
  }
  return NULL;
}

kiln_status_t kiln_program_dim_value(const kiln_program_t* p, const kiln_array_t* inputs, const char* where,
                                     int64_t* out_n) {
  *out_n = 1;
  if (p->n_dims <= 0) return NULL;
  const kiln_program_dim_t* d = &p->dims[0];
  int32_t first = -1;
  for (int32_t i = 0; p->dim_axis && i < p->n_inputs; ++i) {
    const int32_t ax = p->dim_axis[i];
    const kiln_array_t* a = &inputs[i];
    if (ax < 0) continue;
    if (a->shape.rank != p->buffers[p->inputs[i]].rank)
      return kiln_make_status(KILN_INVALID_ARGUMENT, "%s: input '%s' has rank %d, the module takes rank %d", where,
                              p->input_names[i], (int)a->shape.rank, (int)p->buffers[p->inputs[i]].rank);
    const int64_t v = a->shape.dims[ax];
    if (v < d->lo || v > d->hi)
      return kiln_make_status(KILN_INVALID_ARGUMENT,
                              "%s: input '%s' dim %d ('%s') is %lld, outside the module's range %lld..%lld", where,
                              p->input_names[i], (int)ax, d->name, (long long)v, (long long)d->lo, (long long)d->hi);
    if (first >= 0 && v != *out_n)
      return kiln_make_status(KILN_INVALID_ARGUMENT,
                              "%s: inputs '%s' and '%s' disagree on dynamic dim '%s' (%lld and %lld)", where,
                              p->input_names[first], p->input_names[i], d->name, (long long)*out_n, (long long)v);
    if (first < 0) first = i;
    *out_n = v;
  }
  if (p->dim_axis) return NULL;
  for (int32_t i = 0; i < p->n_inputs; ++i) {
    if (!kiln_program_buffer_per_sample(p, p->inputs[i])) continue;
    const kiln_array_t* a = &inputs[i];
    if (a->shape.rank < 1)
      return kiln_make_status(KILN_INVALID_ARGUMENT, "%s: input '%s' is a scalar; its dim 0 is dynamic dim '%s' (%lld..%lld)",
                              where, p->input_names[i], d->name, (long long)d->lo, (long long)d->hi);
    int64_t v = a->shape.dims[0];
    if (v < d->lo || v > d->hi)
      return kiln_make_status(KILN_INVALID_ARGUMENT,
                              "%s: input '%s' dim 0 ('%s') is %lld, outside the module's range %lld..%lld", where,
                              p->input_names[i], d->name, (long long)v, (long long)d->lo, (long long)d->hi);
    if (first >= 0 && v != *out_n)
      return kiln_make_status(KILN_INVALID_ARGUMENT,
                              "%s: inputs '%s' and '%s' disagree on dynamic dim '%s' (%lld and %lld)", where,
                              p->input_names[first], p->input_names[i], d->name, (long long)*out_n, (long long)v);
    if (first < 0) first = i;
    *out_n = v;
  }
  return NULL;
}

kiln_status_t kiln_program_at(const kiln_program_t* p, int64_t n, kiln_allocator_t allocator, kiln_program_t* out) {
  *out = *p;
  out->buffers = NULL;
  void* m = NULL;
  KILN_RETURN_IF_ERROR(kiln_allocator_malloc(allocator, (size_t)(p->n_buffers ? p->n_buffers : 1) * sizeof(kiln_program_buffer_t),
                                             "program buffers at a dim value", &m));
  kiln_program_buffer_t* bufs = m;
  if (p->n_buffers) memcpy(bufs, p->buffers, (size_t)p->n_buffers * sizeof(*bufs));
  for (int32_t i = 0; i < p->n_buffers; ++i) bufs[i].bytes = kiln_program_bytes_at(p, i, n);
  for (int32_t t = 0; t < 2; ++t) {
    const int32_t cnt = t ? p->n_outputs : p->n_inputs;
    const int32_t* io = t ? p->outputs : p->inputs;
    for (int32_t i = 0; i < cnt; ++i) {
      if (kiln_program_buffer_per_sample(p, io[i]) && bufs[io[i]].rank >= 1) bufs[io[i]].shape[0] = n;
      const int32_t ax = p->dim_axis ? p->dim_axis[(t ? p->n_inputs : 0) + i] : -1;
      if (ax >= 0) bufs[io[i]].shape[ax] = n;
    }
  }
  out->buffers = bufs;
  return NULL;
}

void kiln_program_at_free(kiln_allocator_t allocator, kiln_program_t* at) {
  if (at) kiln_allocator_free(allocator, at->buffers);
}

int32_t kiln_program_io_dim_axis(const kiln_program_t* p, int32_t b) {
  for (int32_t i = 0; p->dim_axis && i < p->n_inputs + p->n_outputs; ++i)
    if ((i < p->n_inputs ? p->inputs[i] : p->outputs[i - p->n_inputs]) == b) return p->dim_axis[i];
  return -1;
}
