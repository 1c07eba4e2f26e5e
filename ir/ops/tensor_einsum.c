/* Einsum: the equation parser (ir/ops/einsum.h), inference and the
 * reference kernel, which sums in double (integers in int64, wrapping at
 * the element width on store). */
#include <string.h>

#include "ir/ops/einsum.h"
#include "ir/ops/tensor_impl.h"

static int32_t letter_id(char ch) {
  if (ch >= 'A' && ch <= 'Z') return ch - 'A';
  if (ch >= 'a' && ch <= 'z') return 26 + (ch - 'a');
  return -1;
}

/* One term ("ab...c"): its letters and where its ellipsis is (-1: none). */
typedef struct {
  int32_t n, ell_at, ids[KILN_MAX_RANK + 1];
} term_t;

static kiln_status_t parse_term(const char* s, size_t len, term_t* t) {
  t->n = 0;
  t->ell_at = -1;
  for (size_t i = 0; i < len; ++i) {
    if (s[i] == '.') {
      if (t->ell_at >= 0 || i + 2 >= len || s[i + 1] != '.' || s[i + 2] != '.')
        return kiln_make_status(KILN_INVALID_ARGUMENT, "Einsum: a term has a malformed or second ellipsis");
      t->ell_at = t->n;
      i += 2;
      continue;
    }
    int32_t id = letter_id(s[i]);
    if (id < 0) return kiln_make_status(KILN_INVALID_ARGUMENT, "Einsum: character '%c' is not a label", s[i]);
    if (t->n >= KILN_MAX_RANK) return kiln_make_status(KILN_INVALID_ARGUMENT, "Einsum: a term has too many labels");
    t->ids[t->n++] = id;
  }
  return NULL;
}

/* Folds dim |d| into label size |*sz|. */
static kiln_status_t merge_size(int64_t* sz, int64_t d, int32_t label) {
  if (*sz == -2 || *sz == 1 || (*sz == KILN_DIM_UNKNOWN && kiln_dim_known(d) && d != 1)) {
    *sz = kiln_dim_known(d) ? d : KILN_DIM_UNKNOWN;
    return NULL;
  }
  if (!kiln_dim_known(d) || d == 1 || !kiln_dim_known(*sz) || d == *sz) return NULL;
  char name = label < 26 ? (char)('A' + label) : label < 52 ? (char)('a' + label - 26) : '.';
  return kiln_make_status(KILN_INVALID_ARGUMENT, "Einsum: label '%c' has sizes %lld and %lld", name, (long long)*sz,
                          (long long)d);
}

kiln_status_t kiln_einsum_parse(const char* eq, int32_t n_in, const kiln_shape_t* const* shapes, kiln_einsum_t* e) {
  memset(e, 0, sizeof *e);
  if (n_in > KILN_EINSUM_MAX_INPUTS)
    return kiln_make_status(KILN_UNSUPPORTED, "Einsum: %d operands, kiln handles at most %d", (int)n_in,
                            KILN_EINSUM_MAX_INPUTS);
  char buf[256];
  size_t m = 0;
  for (const char* p = eq; *p; ++p)
    if (*p != ' ' && m + 1 < sizeof buf) buf[m++] = *p;
  buf[m] = '\0';
  const char* arrow = strstr(buf, "->");
  size_t lhs_len = arrow ? (size_t)(arrow - buf) : m;
  term_t terms[KILN_EINSUM_MAX_INPUTS];
  int32_t nt = 0, max_ell = 0;
  for (size_t a = 0;; ++nt) {
    size_t b = a;
    while (b < lhs_len && buf[b] != ',') ++b;
    if (nt >= n_in)
      return kiln_make_status(KILN_INVALID_ARGUMENT, "Einsum: equation '%s' has more terms than the %d inputs", eq, (int)n_in);
    KILN_TRY(parse_term(buf + a, b - a, &terms[nt]));
    int32_t r = shapes[nt]->rank, n = terms[nt].n;
    if (r < 0) return kiln_make_status(KILN_INVALID_ARGUMENT, "Einsum: input %d has unknown rank", (int)nt);
    if (terms[nt].ell_at < 0 ? r != n : r < n)
      return kiln_make_status(KILN_INVALID_ARGUMENT, "Einsum: term %d of '%s' has %d labels, input %d has rank %d",
                              (int)nt, eq, (int)n, (int)nt, (int)r);
    if (terms[nt].ell_at >= 0 && r - n > max_ell) max_ell = r - n;
    if (b >= lhs_len) break;
    a = b + 1;
  }
  if (++nt != n_in)
    return kiln_make_status(KILN_INVALID_ARGUMENT, "Einsum: equation '%s' has %d terms for %d inputs", eq, (int)nt, (int)n_in);
  e->n_in = n_in;
  for (int32_t l = 0; l < KILN_EINSUM_MAX_LABELS; ++l) e->size[l] = -2;
  int32_t count[KILN_EINSUM_MAX_LABELS] = {0};
  for (int32_t i = 0; i < n_in; ++i) {
    const term_t* t = &terms[i];
    const int32_t r = shapes[i]->rank, ell = t->ell_at >= 0 ? r - t->n : 0;
    e->in_rank[i] = r;
    for (int32_t d = 0, li = 0; d < r; ++d) {
      bool in_ell = t->ell_at >= 0 && d >= t->ell_at && d < t->ell_at + ell;
      int32_t id = in_ell ? 52 + (max_ell - ell) + (d - t->ell_at) : t->ids[li++];
      e->in_label[i][d] = id;
      ++count[id];
      KILN_TRY(merge_size(&e->size[id], shapes[i]->dims[d], id));
    }
  }
  bool in_out[KILN_EINSUM_MAX_LABELS] = {false};
  if (arrow) {
    term_t out;
    KILN_TRY(parse_term(arrow + 2, strlen(arrow + 2), &out));
    if (out.n + (out.ell_at >= 0 ? max_ell : 0) > KILN_MAX_RANK)
      return kiln_make_status(KILN_UNSUPPORTED, "Einsum: output rank exceeds kiln's maximum of %d", KILN_MAX_RANK);
    for (int32_t k = 0; k <= out.n; ++k) {
      if (k == out.ell_at)
        for (int32_t x = 0; x < max_ell; ++x) e->out_label[e->out_rank++] = 52 + x;
      if (k == out.n) break;
      int32_t id = out.ids[k];
      if (e->size[id] == -2 || in_out[id])
        return kiln_make_status(KILN_INVALID_ARGUMENT, "Einsum: output label '%c' is not an input label or repeats",
                                (char)(id < 26 ? 'A' + id : 'a' + id - 26));
      in_out[id] = true;
      e->out_label[e->out_rank++] = id;
    }
  } else {
    for (int32_t x = 0; x < max_ell; ++x) e->out_label[e->out_rank++] = 52 + x;
    for (int32_t id = 0; id < 52; ++id)
      if (count[id] == 1) {
        if (e->out_rank >= KILN_MAX_RANK)
          return kiln_make_status(KILN_UNSUPPORTED, "Einsum: output rank exceeds kiln's maximum of %d", KILN_MAX_RANK);
        e->out_label[e->out_rank++] = id;
      }
  }
  for (int32_t k = 0; k < e->out_rank; ++k) in_out[e->out_label[k]] = true;
  for (int32_t id = 0; id < KILN_EINSUM_MAX_LABELS; ++id)
    if (e->size[id] != -2 && !in_out[id]) e->sum_label[e->n_sum++] = id;
  return NULL;
}

static kiln_status_t einsum_equation(const kiln_node_t* node, const char** eq) {
  *eq = NULL;
  KILN_TRY(kiln_attr_string(node, "equation", NULL, eq));
  if (!*eq) return kiln_make_status(KILN_INVALID_ARGUMENT, "Einsum: missing required attribute 'equation'");
  return NULL;
}

kiln_status_t kiln_tensor_einsum_infer(kiln_infer_t* ctx) {
  const char* eq;
  KILN_TRY(einsum_equation(ctx->node, &eq));
  KILN_TRY(kiln_tensor_same_dtype(ctx, "Einsum", 0, ctx->n_in - 1));
  const kiln_dtype_t dt = ctx->in[0]->dtype;
  if (dt == KILN_DTYPE_BOOL) return kiln_make_status(KILN_INVALID_ARGUMENT, "Einsum: inputs are bool");
  const kiln_shape_t* shapes[KILN_EINSUM_MAX_INPUTS];
  for (int32_t i = 0; i < ctx->n_in && i < KILN_EINSUM_MAX_INPUTS; ++i) {
    if (!ctx->in[i]) return kiln_make_status(KILN_INVALID_ARGUMENT, "Einsum: input %d is omitted", (int)i);
    if (ctx->in[i]->shape.rank < 0) {
      kiln_shape_t s = kiln_shape_unknown();
      kiln_infer_set(ctx, 0, dt, &s);
      return NULL;
    }
    shapes[i] = &ctx->in[i]->shape;
  }
  kiln_einsum_t e;
  KILN_TRY(kiln_einsum_parse(eq, ctx->n_in, shapes, &e));
  kiln_shape_t out = kiln_tensor_unknown_rank(e.out_rank);
  for (int32_t k = 0; k < e.out_rank; ++k) out.dims[k] = e.size[e.out_label[k]];
  kiln_infer_set(ctx, 0, dt, &out);
  return NULL;
}

kiln_status_t kiln_tensor_einsum_run(const kiln_ref_ctx_t* ctx) {
  const char* eq;
  KILN_TRY(einsum_equation(ctx->node, &eq));
  const kiln_shape_t* shapes[KILN_EINSUM_MAX_INPUTS];
  for (int32_t i = 0; i < ctx->n_in && i < KILN_EINSUM_MAX_INPUTS; ++i) shapes[i] = &ctx->in[i]->shape;
  kiln_einsum_t e;
  KILN_TRY(kiln_einsum_parse(eq, ctx->n_in, shapes, &e));
  kiln_array_t* y = ctx->out[0];
  const kiln_dtype_t dt = ctx->in[0]->dtype;
  bool ok = y->dtype == dt && y->shape.rank == e.out_rank;
  for (int32_t k = 0; ok && k < e.out_rank; ++k) ok = y->shape.dims[k] == e.size[e.out_label[k]];
  for (int32_t i = 0; ok && i < ctx->n_in; ++i) ok = ctx->in[i]->dtype == dt;
  if (!ok) return kiln_make_status(KILN_INTERNAL, "Einsum: output does not match the equation");
  int64_t strides[KILN_EINSUM_MAX_INPUTS][KILN_MAX_RANK];
  for (int32_t i = 0; i < ctx->n_in; ++i) kiln_tensor_strides(shapes[i], strides[i]);
  int64_t n_sum = 1;
  for (int32_t s = 0; s < e.n_sum; ++s) n_sum *= e.size[e.sum_label[s]];
  const bool fl = kiln_dtype_is_float(dt);
  const int64_t n_out = kiln_array_numel(y);
  int64_t val[KILN_EINSUM_MAX_LABELS] = {0};
  for (int64_t o = 0; o < n_out; ++o) {
    int64_t rest = o;
    for (int32_t k = e.out_rank - 1; k >= 0; --k) {
      int64_t sz = e.size[e.out_label[k]];
      val[e.out_label[k]] = rest % sz;
      rest /= sz;
    }
    double acc = 0.0;
    uint64_t iacc = 0;
    for (int64_t q = 0; q < n_sum; ++q) {
      rest = q;
      for (int32_t s = e.n_sum - 1; s >= 0; --s) {
        int64_t sz = e.size[e.sum_label[s]];
        val[e.sum_label[s]] = rest % sz;
        rest /= sz;
      }
      double p = 1.0;
      uint64_t ip = 1;
      for (int32_t i = 0; i < ctx->n_in; ++i) {
        int64_t off = 0;
        for (int32_t d = 0; d < e.in_rank[i]; ++d)
          off += (shapes[i]->dims[d] == 1 ? 0 : val[e.in_label[i][d]]) * strides[i][d];
        if (fl) p *= kiln_load_f64(dt, ctx->in[i]->data, (size_t)off);
        else ip *= (uint64_t)kiln_load_i64(dt, ctx->in[i]->data, (size_t)off);
      }
      acc += p;
      iacc += ip;
    }
    if (fl) kiln_store_f64(dt, y->data, (size_t)o, acc);
    else kiln_store_i64(dt, y->data, (size_t)o, (int64_t)iacc);
  }
  return NULL;
}

/* A multiply and an add per operand product term: 2 x output elements x
 * summed combinations (operands - 1 multiplies each), as for MatMul. */
int64_t kiln_tensor_einsum_flops(const kiln_infer_t* ctx) {
  const char* eq = NULL;
  const kiln_shape_t* shapes[KILN_EINSUM_MAX_INPUTS];
  for (int32_t i = 0; i < ctx->n_in && i < KILN_EINSUM_MAX_INPUTS; ++i) {
    if (!ctx->in[i] || !kiln_shape_is_static(&ctx->in[i]->shape)) return 0;
    shapes[i] = &ctx->in[i]->shape;
  }
  kiln_einsum_t e;
  kiln_status_t s = einsum_equation(ctx->node, &eq);
  if (!s) s = kiln_einsum_parse(eq, ctx->n_in, shapes, &e);
  if (s) {
    kiln_status_free(s);
    return 0;
  }
  int64_t n = ctx->n_in > 1 ? ctx->n_in : 2;
  for (int32_t id = 0; id < KILN_EINSUM_MAX_LABELS; ++id)
    if (e.size[id] > 0) n *= e.size[id];
  return n;
}
