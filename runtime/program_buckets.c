/* Shape buckets of a program (see kiln_program_t.buckets in program.h): a
 * dim that sits inside the kernels' shapes (a sequence length that MatMul,
 * Softmax and the attention reshapes see) compiled at a set of sizes, one
 * static program per size, in one module. Each bucket is a whole program
 * (its own kernels, plan, code and weights) with the speed and the memory
 * plan of a module compiled for that size alone; a run goes to the bucket
 * whose input shapes its inputs have. */
#include <stdio.h>
#include <string.h>

#include "runtime/program.h"

static const char* pname(const kiln_program_t* p) {
  return p->model_name && p->model_name[0] ? p->model_name : "module";
}

static kiln_status_t bad(const kiln_program_t* p, const char* msg, long long a, long long b) {
  char m[300];
  snprintf(m, sizeof m, msg, a, b); /* a format without %lld ignores them */
  return kiln_make_status(KILN_PARSE_ERROR, "%s: invalid program: shape buckets: %s", pname(p), m);
}

const kiln_program_t* kiln_program_bucket(const kiln_program_t* p, int32_t k) {
  if (!p || k < 0) return NULL;
  if (k == 0) return p;
  return k < p->n_buckets ? p->buckets[k - 1] : NULL;
}

void kiln_program_buckets_free(kiln_program_t* p) {
  kiln_allocator_t a = p->allocator;
  for (int32_t k = 0; p->buckets && k < p->n_buckets - 1; ++k) kiln_program_destroy(p->buckets[k]);
  kiln_allocator_free(a, p->buckets);
  kiln_allocator_free(a, p->bucket_values);
  kiln_allocator_free(a, p->bucket_dim);
  p->buckets = NULL;
  p->bucket_values = NULL;
  p->bucket_dim = NULL;
  p->n_buckets = 0;
}

/* Whether |b|'s model input |i| and |p|'s agree on everything but shape. */
static bool same_io(const kiln_program_t* p, const kiln_program_t* b, int t, int32_t i) {
  const int32_t* pio = t ? p->outputs : p->inputs;
  const int32_t* bio = t ? b->outputs : b->inputs;
  char* const* pn = t ? p->output_names : p->input_names;
  char* const* bn = t ? b->output_names : b->input_names;
  const kiln_program_buffer_t* x = &p->buffers[pio[i]];
  const kiln_program_buffer_t* y = &b->buffers[bio[i]];
  return !strcmp(pn[i], bn[i]) && x->dtype == y->dtype && x->rank == y->rank;
}

kiln_status_t kiln_program_validate_buckets(const kiln_program_t* p) {
  if (p->n_buckets == 0) {
    if (p->buckets || p->bucket_values || p->bucket_dim) return bad(p, "bucket arrays without buckets", 0, 0);
    return NULL;
  }
  if (p->n_buckets < 2 || p->n_buckets > KILN_PROGRAM_MAX_BUCKETS)
    return bad(p, "%lld buckets (needs 2..%lld)", p->n_buckets, KILN_PROGRAM_MAX_BUCKETS);
  if (!p->buckets || !p->bucket_values || !p->bucket_dim || !p->bucket_dim[0])
    return bad(p, "the dim's name, sizes or programs are missing", 0, 0);
  for (int32_t k = 0; k < p->n_buckets; ++k) {
    const int64_t v = p->bucket_values[k];
    if (v < 1 || v > KILN_PROGRAM_MAX_DIM_VALUE || (k && v <= p->bucket_values[k - 1]))
      return bad(p, "size %lld (bucket %lld) is not above the one before it and within 1..2^20", (long long)v, k);
  }
  for (int32_t k = 1; k < p->n_buckets; ++k) {
    const kiln_program_t* b = p->buckets[k - 1];
    if (!b) return bad(p, "bucket %lld has no program", k, 0);
    if (b->n_buckets) return bad(p, "bucket %lld has buckets of its own", k, 0);
    KILN_RETURN_IF_ERROR(kiln_program_validate(b), "%s: shape bucket %s=%lld", pname(p), p->bucket_dim,
                         (long long)p->bucket_values[k]);
    if (strcmp(b->target, p->target) != 0 || b->n_inputs != p->n_inputs || b->n_outputs != p->n_outputs)
      return bad(p, "bucket %lld differs in its target or its number of inputs or outputs", k, 0);
    for (int32_t t = 0; t < 2; ++t)
      for (int32_t i = 0; i < (t ? p->n_outputs : p->n_inputs); ++i)
        if (!same_io(p, b, t, i)) return bad(p, "bucket %lld differs in model %s %lld's name, dtype or rank", k, i);
    if (b->n_dims != p->n_dims) return bad(p, "bucket %lld has %lld dynamic dims", k, b->n_dims);
    for (int32_t d = 0; d < p->n_dims; ++d)
      if (strcmp(b->dims[d].name, p->dims[d].name) || b->dims[d].lo != p->dims[d].lo || b->dims[d].hi != p->dims[d].hi)
        return bad(p, "bucket %lld's dynamic dim %lld differs from the first bucket's", k, d);
  }
  int32_t in, ax;
  kiln_program_bucket_key(p, &in, &ax);
  if (in < 0) return bad(p, "no input shape tells the buckets apart", 0, 0);
  return NULL;
}

/* Whether axis |d| of per-sample input |i| is the dynamic dim (any value). */
static bool dyn_axis(const kiln_program_t* p, int32_t i, int32_t d) {
  return d == 0 && p->n_dims && kiln_program_buffer_per_sample(p, p->inputs[i]);
}

void kiln_program_bucket_key(const kiln_program_t* p, int32_t* out_input, int32_t* out_axis) {
  *out_input = *out_axis = -1;
  if (p->n_buckets < 2) return;
  for (int32_t i = 0; i < p->n_inputs; ++i) {
    const kiln_program_buffer_t* x = &p->buffers[p->inputs[i]];
    for (int32_t d = 0; d < x->rank; ++d) {
      if (dyn_axis(p, i, d)) continue;
      for (int32_t k = 1; k < p->n_buckets; ++k) {
        const kiln_program_t* b = p->buckets[k - 1];
        if (b->buffers[b->inputs[i]].rank == x->rank && b->buffers[b->inputs[i]].shape[d] != x->shape[d]) {
          *out_input = i;
          *out_axis = d;
          return;
        }
      }
    }
  }
}

kiln_status_t kiln_program_bucket_select(const kiln_program_t* p, const kiln_array_t* inputs, const char* where,
                                         int32_t* out_k) {
  *out_k = 0;
  if (p->n_buckets < 2) return NULL;
  int32_t in, ax;
  kiln_program_bucket_key(p, &in, &ax);
  if (in < 0) return kiln_make_status(KILN_INTERNAL, "%s: no input tells the shape buckets apart", where);
  const kiln_array_t* a = &inputs[in];
  if (a->shape.rank <= ax)
    return kiln_make_status(KILN_INVALID_ARGUMENT, "%s: input '%s' has rank %d; its dim %d is '%s' (shape buckets)",
                            where, p->input_names[in], (int)a->shape.rank, (int)ax, p->bucket_dim);
  const int64_t v = a->shape.dims[ax];
  for (int32_t k = 0; k < p->n_buckets; ++k) {
    const kiln_program_t* b = kiln_program_bucket(p, k);
    if (b->buffers[b->inputs[in]].shape[ax] == v) {
      *out_k = k;
      return NULL;
    }
  }
  char sizes[KILN_PROGRAM_MAX_BUCKETS * 24] = "";
  size_t n = 0;
  for (int32_t k = 0; k < p->n_buckets && n < sizeof sizes; ++k) {
    const kiln_program_t* b = kiln_program_bucket(p, k);
    n += (size_t)snprintf(sizes + n, sizeof sizes - n, "%s%lld", k ? ", " : "",
                          (long long)b->buffers[b->inputs[in]].shape[ax]);
  }
  return kiln_make_status(KILN_INVALID_ARGUMENT,
                          "%s: input '%s' dim %d ('%s') is %lld; the module was compiled for the sizes %s there "
                          "(shape buckets)",
                          where, p->input_names[in], (int)ax, p->bucket_dim, (long long)v, sizes);
}
