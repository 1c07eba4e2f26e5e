/* Tensor ops that re-label data or fill it: Reshape, Flatten, Squeeze,
 * Unsqueeze, Expand, Shape, Constant and ConstantOfShape.
 *
 * Their inference is the important part: exported models compute Reshape
 * targets through Shape -> Gather -> Unsqueeze -> Concat chains, so Shape and
 * Constant publish their values, and Reshape/Expand/Squeeze/Unsqueeze/
 * ConstantOfShape read integer inputs whenever their values are known. */
#include <stdio.h>
#include <string.h>

#include "ir/ops/tensor_impl.h"

/* Copies the whole input buffer into the output: the reference kernel of
 * every op whose output holds the input's elements in the same order. */
static kiln_status_t copy_same(const kiln_ref_ctx_t* ctx, const char* op) {
  const kiln_array_t* x = ctx->in[0];
  kiln_array_t* y = ctx->out[0];
  if (x->dtype != y->dtype || x->nbytes != y->nbytes) {
    char a[96], b[96];
    return kiln_make_status(KILN_INVALID_ARGUMENT,
                            "%s: input %s %s and output %s %s hold different "
                            "element counts",
                            op, kiln_dtype_name(x->dtype),
                            kiln_shape_format(&x->shape, a, sizeof a),
                            kiln_dtype_name(y->dtype),
                            kiln_shape_format(&y->shape, b, sizeof b));
  }
  if (x->nbytes) memcpy(y->data, x->data, x->nbytes);
  return NULL;
}

/* Prints a list of raw integers ("[5,-1]") for messages. */
static const char* fmt_ints(const int64_t* v, int64_t n, char* buf, size_t cap) {
  size_t len = 0;
  buf[0] = '\0';
  len += (size_t)snprintf(buf + len, cap - len, "[");
  for (int64_t k = 0; k < n && len < cap; ++k) {
    len += (size_t)snprintf(buf + len, cap - len, "%s%lld", k ? "," : "",
                            (long long)v[k]);
  }
  if (len < cap) snprintf(buf + len, cap - len, "]");
  return buf;
}

/* ---- symbolic element counts -------------------------------------------
 * A product of dims as (known factor) x (multiset of symbols), plus a flag
 * for anonymous unknown dims. Lets Reshape check counts and infer -1 when
 * the batch dim is symbolic ([N,3,4] -> [0,-1] gives [N,12]). */
typedef struct {
  int64_t known;
  int32_t syms[KILN_MAX_RANK];
  int32_t n_syms;
  bool unknown;
  bool overflow;
} monomial_t;

static void mono_init(monomial_t* m) {
  memset(m, 0, sizeof *m);
  m->known = 1;
}

static void mono_mul(monomial_t* m, int64_t d) {
  if (kiln_dim_known(d)) {
    if (__builtin_mul_overflow(m->known, d, &m->known)) m->overflow = true;
  } else if (kiln_dim_symbol(d)) {
    m->syms[m->n_syms++] = kiln_dim_symbol(d);
  } else {
    m->unknown = true;
  }
}

/* Removes the symbols common to |a| and |b| from both. */
static void mono_cancel(monomial_t* a, monomial_t* b) {
  for (int32_t i = 0; i < b->n_syms;) {
    int32_t j = 0;
    while (j < a->n_syms && a->syms[j] != b->syms[i]) ++j;
    if (j < a->n_syms) {
      a->syms[j] = a->syms[--a->n_syms];
      b->syms[i] = b->syms[--b->n_syms];
    } else {
      ++i;
    }
  }
}

/* The product of dims [from, to) of |s| as one dim: known when every dim is,
 * the symbol when it is the only non-1 factor, unknown otherwise. */
static int64_t fold_dims(const kiln_shape_t* s, int32_t from, int32_t to) {
  monomial_t m;
  mono_init(&m);
  for (int32_t k = from; k < to; ++k) mono_mul(&m, s->dims[k]);
  if (m.overflow || m.unknown) return (m.known == 0) ? 0 : KILN_DIM_UNKNOWN;
  if (m.n_syms == 0) return m.known;
  if (m.known == 0) return 0;
  if (m.n_syms == 1 && m.known == 1) return kiln_dim_from_symbol(m.syms[0]);
  return KILN_DIM_UNKNOWN;
}

/* ---- Reshape ---------------------------------------------------------- */

kiln_status_t kiln_tensor_reshape_infer(kiln_infer_t* ctx) {
  const kiln_tensor_t* x = ctx->in[0];
  int64_t allowzero = 0;
  KILN_TRY(kiln_attr_int(ctx->node, "allowzero", 0, &allowzero));
  int64_t target[KILN_MAX_RANK];
  int64_t n = 0;
  if (!kiln_tensor_in(ctx, 1)) {
    /* Reshape-1 carried the target as an attribute. */
    const int64_t* attr = NULL;
    KILN_TRY(kiln_attr_ints(ctx->node, "shape", &attr, &n));
    if (ctx->opset >= 5 || n < 0) {
      return kiln_make_status(KILN_INVALID_ARGUMENT,
                              "Reshape: missing required input 'shape'");
    }
    KILN_TRY(kiln_tensor_check_rank("Reshape", n));
    memcpy(target, attr, (size_t)n * sizeof(int64_t));
  } else {
    KILN_TRY(kiln_tensor_int_input(ctx, "Reshape", 1, "shape"));
    const kiln_array_t* v = kiln_tensor_value(ctx, 1);
    if (!v) {
      int64_t len = kiln_tensor_len_1d(ctx->in[1]);
      if (len > KILN_MAX_RANK) KILN_TRY(kiln_tensor_check_rank("Reshape", len));
      kiln_shape_t s = kiln_tensor_unknown_rank((int32_t)len);
      kiln_infer_set(ctx, 0, x->dtype, &s);
      return NULL;
    }
    KILN_TRY(kiln_tensor_read_ints("Reshape", "shape", v, target, KILN_MAX_RANK, &n));
  }

  kiln_shape_t out = kiln_tensor_unknown_rank((int32_t)n);
  int32_t neg = -1;
  bool has_zero = false;
  char tb[160];
  for (int32_t k = 0; k < n; ++k) {
    int64_t t = target[k];
    if (t == -1) {
      if (neg >= 0) {
        return kiln_make_status(KILN_INVALID_ARGUMENT,
                                "Reshape: shape %s has more than one -1",
                                fmt_ints(target, n, tb, sizeof tb));
      }
      neg = k;
    } else if (t < -1) {
      return kiln_make_status(KILN_INVALID_ARGUMENT,
                              "Reshape: shape[%d] is %lld, dims must be >= -1",
                              (int)k, (long long)t);
    } else if (t == 0 && !allowzero) {
      if (x->shape.rank >= 0 && k >= x->shape.rank) {
        return kiln_make_status(KILN_INVALID_ARGUMENT,
                                "Reshape: shape[%d] is 0 (copy the input dim) "
                                "but the input has rank %d",
                                (int)k, (int)x->shape.rank);
      }
      out.dims[k] = x->shape.rank >= 0 ? x->shape.dims[k] : KILN_DIM_UNKNOWN;
    } else {
      has_zero |= (t == 0);
      out.dims[k] = t;
    }
  }
  if (allowzero && has_zero && neg >= 0) {
    return kiln_make_status(KILN_INVALID_ARGUMENT,
                            "Reshape: shape %s has both 0 and -1 with allowzero=1",
                            fmt_ints(target, n, tb, sizeof tb));
  }
  if (x->shape.rank < 0) {
    kiln_infer_set(ctx, 0, x->dtype, &out);
    return NULL;
  }

  /* Compare element counts as far as the symbols allow. */
  monomial_t mi, mo;
  mono_init(&mi);
  mono_init(&mo);
  for (int32_t k = 0; k < x->shape.rank; ++k) mono_mul(&mi, x->shape.dims[k]);
  for (int32_t k = 0; k < n; ++k) if (k != neg) mono_mul(&mo, out.dims[k]);
  char xb[160];
  if (mo.overflow) {
    return kiln_make_status(KILN_LIMIT_EXCEEDED,
                            "Reshape: shape %s has more elements than int64 holds",
                            fmt_ints(target, n, tb, sizeof tb));
  }
  mono_cancel(&mi, &mo);
  bool comparable = !mi.unknown && !mo.unknown && !mi.overflow && mo.n_syms == 0;
  if (comparable && mi.n_syms == 0) {
    if (neg >= 0) {
      if (mo.known == 0 || mi.known % mo.known != 0) {
        return kiln_make_status(
            KILN_INVALID_ARGUMENT,
            "Reshape: cannot reshape input %s (%lld elements) into %s: the "
            "other dims multiply to %lld",
            kiln_tensor_fmt(ctx, &x->shape, xb, sizeof xb), (long long)mi.known,
            fmt_ints(target, n, tb, sizeof tb), (long long)mo.known);
      }
      out.dims[neg] = mi.known / mo.known;
    } else if (mi.known != mo.known) {
      return kiln_make_status(
          KILN_INVALID_ARGUMENT,
          "Reshape: cannot reshape input %s (%lld elements) into %s (%lld "
          "elements)",
          kiln_tensor_fmt(ctx, &x->shape, xb, sizeof xb), (long long)mi.known,
          fmt_ints(target, n, tb, sizeof tb), (long long)mo.known);
    }
  } else if (comparable && mi.n_syms == 1 && neg >= 0 && mi.known == mo.known &&
             mo.known != 0) {
    out.dims[neg] = kiln_dim_from_symbol(mi.syms[0]);
  }
  kiln_infer_set(ctx, 0, x->dtype, &out);
  return NULL;
}

kiln_status_t kiln_tensor_reshape_run(const kiln_ref_ctx_t* ctx) {
  return copy_same(ctx, "Reshape");
}

/* ---- Flatten ---------------------------------------------------------- */

kiln_status_t kiln_tensor_flatten_infer(kiln_infer_t* ctx) {
  const kiln_tensor_t* x = ctx->in[0];
  int64_t axis = 1;
  KILN_TRY(kiln_attr_int(ctx->node, "axis", 1, &axis));
  kiln_shape_t out = kiln_tensor_unknown_rank(2);
  int32_t r = x->shape.rank;
  if (r >= 0) {
    int64_t lo = (ctx->opset >= 11) ? -(int64_t)r : 0;
    if (axis < lo || axis > r) {
      return kiln_make_status(KILN_INVALID_ARGUMENT,
                              "Flatten: axis %lld is out of range [%lld, %d] for "
                              "rank %d",
                              (long long)axis, (long long)lo, (int)r, (int)r);
    }
    int32_t a = (int32_t)(axis < 0 ? axis + r : axis);
    out.dims[0] = fold_dims(&x->shape, 0, a);
    out.dims[1] = fold_dims(&x->shape, a, r);
  }
  kiln_infer_set(ctx, 0, x->dtype, &out);
  return NULL;
}

kiln_status_t kiln_tensor_flatten_run(const kiln_ref_ctx_t* ctx) {
  return copy_same(ctx, "Flatten");
}

/* ---- Squeeze / Unsqueeze ---------------------------------------------- */

/* Reads the axes of Squeeze/Unsqueeze: an attribute before opset 13, the
 * optional input 1 from 13 on. *out_known is false when the input's value is
 * not known yet; *out_n is -1 when no axes were given at all. */
static kiln_status_t read_axes(kiln_infer_t* ctx, const char* op,
                               int64_t* axes, int64_t* out_n, bool* out_known) {
  *out_known = true;
  *out_n = -1;
  if (kiln_tensor_in(ctx, 1)) {
    KILN_TRY(kiln_tensor_int_input(ctx, op, 1, "axes"));
    const kiln_array_t* v = kiln_tensor_value(ctx, 1);
    if (!v) {
      *out_known = false;
      *out_n = kiln_tensor_len_1d(ctx->in[1]);
      return NULL;
    }
    return kiln_tensor_read_ints(op, "axes", v, axes, KILN_MAX_RANK, out_n);
  }
  const int64_t* attr = NULL;
  int64_t n = -1;
  KILN_TRY(kiln_attr_ints(ctx->node, "axes", &attr, &n));
  if (n > KILN_MAX_RANK) {
    return kiln_make_status(KILN_UNSUPPORTED, "%s: %lld axes, kiln handles at most %d",
                            op, (long long)n, KILN_MAX_RANK);
  }
  if (n >= 0) memcpy(axes, attr, (size_t)n * sizeof(int64_t));
  *out_n = n;
  return NULL;
}

kiln_status_t kiln_tensor_squeeze_infer(kiln_infer_t* ctx) {
  const kiln_tensor_t* x = ctx->in[0];
  int64_t axes[KILN_MAX_RANK];
  int64_t n;
  bool known;
  KILN_TRY(read_axes(ctx, "Squeeze", axes, &n, &known));
  if (known && n == 0) n = -1; /* an empty axes list means "not given" */
  int32_t r = x->shape.rank;
  if (r < 0 || !known) {
    int32_t rank = (r >= 0 && n > 0 && n <= r) ? r - (int32_t)n : -1;
    kiln_shape_t s = kiln_tensor_unknown_rank(rank);
    kiln_infer_set(ctx, 0, x->dtype, &s);
    return NULL;
  }
  bool drop[KILN_MAX_RANK] = {false};
  if (n < 0) {
    /* No axes: every size-1 dim goes. With an unknown dim we cannot tell. */
    for (int32_t k = 0; k < r; ++k) {
      if (!kiln_dim_known(x->shape.dims[k])) {
        kiln_shape_t s = kiln_shape_unknown();
        kiln_infer_set(ctx, 0, x->dtype, &s);
        return NULL;
      }
      drop[k] = (x->shape.dims[k] == 1);
    }
  } else {
    int32_t norm[KILN_MAX_RANK];
    KILN_TRY(kiln_tensor_axes("Squeeze", axes, n, r, norm));
    for (int64_t k = 0; k < n; ++k) {
      int64_t d = x->shape.dims[norm[k]];
      if (kiln_dim_known(d) && d != 1) {
        return kiln_make_status(KILN_INVALID_ARGUMENT,
                                "Squeeze: axis %lld has size %lld, expected 1",
                                (long long)axes[k], (long long)d);
      }
      drop[norm[k]] = true;
    }
  }
  kiln_shape_t out = kiln_tensor_unknown_rank(0);
  for (int32_t k = 0; k < r; ++k) {
    if (!drop[k]) out.dims[out.rank++] = x->shape.dims[k];
  }
  kiln_infer_set(ctx, 0, x->dtype, &out);
  return NULL;
}

kiln_status_t kiln_tensor_squeeze_run(const kiln_ref_ctx_t* ctx) {
  return copy_same(ctx, "Squeeze");
}

kiln_status_t kiln_tensor_unsqueeze_infer(kiln_infer_t* ctx) {
  const kiln_tensor_t* x = ctx->in[0];
  int64_t axes[KILN_MAX_RANK];
  int64_t n;
  bool known;
  KILN_TRY(read_axes(ctx, "Unsqueeze", axes, &n, &known));
  if (known && n < 0) {
    return kiln_make_status(KILN_INVALID_ARGUMENT,
                            ctx->opset >= 13
                                ? "Unsqueeze: missing required input 'axes'"
                                : "Unsqueeze: missing required attribute 'axes'");
  }
  int32_t r = x->shape.rank;
  int64_t out_rank = (r >= 0 && n >= 0) ? r + n : -1;
  if (out_rank > KILN_MAX_RANK) KILN_TRY(kiln_tensor_check_rank("Unsqueeze", out_rank));
  if (r < 0 || !known) {
    kiln_shape_t s = kiln_tensor_unknown_rank((int32_t)out_rank);
    kiln_infer_set(ctx, 0, x->dtype, &s);
    return NULL;
  }
  int32_t norm[KILN_MAX_RANK];
  KILN_TRY(kiln_tensor_axes("Unsqueeze", axes, n, (int32_t)out_rank, norm));
  bool ins[KILN_MAX_RANK] = {false};
  for (int64_t k = 0; k < n; ++k) ins[norm[k]] = true;
  kiln_shape_t out = kiln_tensor_unknown_rank((int32_t)out_rank);
  for (int32_t k = 0, j = 0; k < out_rank; ++k) {
    out.dims[k] = ins[k] ? 1 : x->shape.dims[j++];
  }
  kiln_infer_set(ctx, 0, x->dtype, &out);
  return NULL;
}

kiln_status_t kiln_tensor_unsqueeze_run(const kiln_ref_ctx_t* ctx) {
  return copy_same(ctx, "Unsqueeze");
}

/* ---- Expand ----------------------------------------------------------- */

kiln_status_t kiln_tensor_expand_infer(kiln_infer_t* ctx) {
  const kiln_tensor_t* x = ctx->in[0];
  KILN_TRY(kiln_tensor_int_input(ctx, "Expand", 1, "shape"));
  const kiln_array_t* v = kiln_tensor_value(ctx, 1);
  if (!v || x->shape.rank < 0) {
    int64_t len = kiln_tensor_len_1d(ctx->in[1]);
    int64_t rank = (len >= 0 && x->shape.rank >= 0)
                       ? (len > x->shape.rank ? len : x->shape.rank)
                       : -1;
    KILN_TRY(kiln_tensor_check_rank("Expand", rank));
    kiln_shape_t s = kiln_tensor_unknown_rank((int32_t)rank);
    kiln_infer_set(ctx, 0, x->dtype, &s);
    return NULL;
  }
  int64_t target[KILN_MAX_RANK];
  int64_t n;
  KILN_TRY(kiln_tensor_read_ints("Expand", "shape", v, target, KILN_MAX_RANK, &n));
  for (int64_t k = 0; k < n; ++k) {
    if (target[k] < 0) {
      return kiln_make_status(KILN_INVALID_ARGUMENT,
                              "Expand: shape[%lld] is %lld, dims must be >= 0",
                              (long long)k, (long long)target[k]);
    }
  }
  kiln_shape_t t = kiln_shape_make((int32_t)n, target), out;
  kiln_status_t s = kiln_infer_broadcast(&x->shape, &t, &out);
  if (s) return kiln_status_annotate(s, "Expand");
  kiln_infer_set(ctx, 0, x->dtype, &out);
  return NULL;
}

kiln_status_t kiln_tensor_expand_run(const kiln_ref_ctx_t* ctx) {
  const kiln_array_t* x = ctx->in[0];
  kiln_array_t* y = ctx->out[0];
  int32_t R = y->shape.rank, r = x->shape.rank;
  if (r > R || x->dtype != y->dtype) {
    return kiln_make_status(KILN_INTERNAL, "Expand: output does not match input");
  }
  int64_t xs[KILN_MAX_RANK], ss[KILN_MAX_RANK];
  kiln_tensor_strides(&x->shape, xs);
  for (int32_t k = 0; k < R; ++k) {
    int32_t j = k - (R - r);
    if (j < 0) {
      ss[k] = 0;
      continue;
    }
    int64_t d = x->shape.dims[j];
    if (d != y->shape.dims[k] && d != 1) {
      char a[96], b[96];
      return kiln_make_status(KILN_INVALID_ARGUMENT,
                              "Expand: input %s does not broadcast to %s",
                              kiln_shape_format(&x->shape, a, sizeof a),
                              kiln_shape_format(&y->shape, b, sizeof b));
    }
    ss[k] = (d == 1) ? 0 : xs[j];
  }
  kiln_tensor_strided_copy(y->data, x->data, kiln_dtype_size(y->dtype), R,
                           y->shape.dims, ss, 0);
  return NULL;
}

/* ---- Shape ------------------------------------------------------------ */

/* [start, end) of Shape-15, clamped into [0, rank]. */
static kiln_status_t shape_range(const kiln_node_t* node, int32_t rank,
                                 int32_t* out_start, int32_t* out_end) {
  int64_t start = 0, end = rank;
  KILN_TRY(kiln_attr_int(node, "start", 0, &start));
  KILN_TRY(kiln_attr_int(node, "end", rank, &end));
  if (start < 0) start += rank;
  if (end < 0) end += rank;
  start = start < 0 ? 0 : (start > rank ? rank : start);
  end = end < 0 ? 0 : (end > rank ? rank : end);
  if (end < start) end = start;
  *out_start = (int32_t)start;
  *out_end = (int32_t)end;
  return NULL;
}

kiln_status_t kiln_tensor_shape_infer(kiln_infer_t* ctx) {
  const kiln_tensor_t* x = ctx->in[0];
  kiln_shape_t out = kiln_tensor_unknown_rank(1);
  if (x->shape.rank < 0) {
    kiln_infer_set(ctx, 0, KILN_DTYPE_I64, &out);
    return NULL;
  }
  int32_t start, end;
  KILN_TRY(shape_range(ctx->node, x->shape.rank, &start, &end));
  out.dims[0] = end - start;
  kiln_infer_set(ctx, 0, KILN_DTYPE_I64, &out);
  int64_t dims[KILN_MAX_RANK];
  for (int32_t k = start; k < end; ++k) {
    if (!kiln_dim_known(x->shape.dims[k])) return NULL;
    dims[k - start] = x->shape.dims[k];
  }
  if (ctx->runtime) return NULL; /* run() writes it */
  kiln_array_t v = {KILN_DTYPE_I64, out, dims, (size_t)(end - start) * sizeof(int64_t)};
  return kiln_infer_set_value(ctx, 0, &v);
}

kiln_status_t kiln_tensor_shape_run(const kiln_ref_ctx_t* ctx) {
  const kiln_array_t* x = ctx->in[0];
  kiln_array_t* y = ctx->out[0];
  int32_t start, end;
  KILN_TRY(shape_range(ctx->node, x->shape.rank, &start, &end));
  if (y->dtype != KILN_DTYPE_I64 || kiln_array_numel(y) != end - start) {
    return kiln_make_status(KILN_INTERNAL, "Shape: output does not match input");
  }
  int64_t* o = (int64_t*)y->data;
  for (int32_t k = start; k < end; ++k) o[k - start] = x->shape.dims[k];
  return NULL;
}

/* ---- Constant --------------------------------------------------------- */

/* A view (no copy) of the value a Constant node carries. */
static kiln_status_t constant_view(const kiln_node_t* node, kiln_array_t* v) {
  static const int64_t empty = 0;
  static const char* const unsupported[] = {"value_string", "value_strings",
                                            "sparse_value"};
  for (size_t k = 0; k < sizeof unsupported / sizeof unsupported[0]; ++k) {
    if (kiln_node_attr(node, unsupported[k])) {
      return kiln_make_status(KILN_UNSUPPORTED,
                              "Constant: attribute '%s' is not supported",
                              unsupported[k]);
    }
  }
  memset(v, 0, sizeof *v);
  const kiln_attr_t* a;
  if ((a = kiln_node_attr(node, "value"))) {
    if (a->type != KILN_ATTR_TENSOR || !a->tensor) {
      return kiln_make_status(KILN_INVALID_ARGUMENT,
                              "Constant: attribute 'value' is not a tensor");
    }
    if (a->tensor->dtype == KILN_DTYPE_UNDEFINED) {
      return kiln_make_status(KILN_UNSUPPORTED,
                              "Constant: attribute 'value' has a dtype kiln "
                              "does not support");
    }
    *v = *a->tensor;
  } else if ((a = kiln_node_attr(node, "value_float"))) {
    if (a->type != KILN_ATTR_FLOAT) {
      return kiln_make_status(KILN_INVALID_ARGUMENT,
                              "Constant: attribute 'value_float' is not a float");
    }
    v->dtype = KILN_DTYPE_F32;
    v->shape = kiln_tensor_unknown_rank(0);
    v->data = (void*)&a->f;
    v->nbytes = sizeof(float);
  } else if ((a = kiln_node_attr(node, "value_int"))) {
    if (a->type != KILN_ATTR_INT) {
      return kiln_make_status(KILN_INVALID_ARGUMENT,
                              "Constant: attribute 'value_int' is not an int");
    }
    v->dtype = KILN_DTYPE_I64;
    v->shape = kiln_tensor_unknown_rank(0);
    v->data = (void*)&a->i;
    v->nbytes = sizeof(int64_t);
  } else if ((a = kiln_node_attr(node, "value_floats")) ||
             (a = kiln_node_attr(node, "value_ints"))) {
    bool fl = (a->type == KILN_ATTR_FLOATS);
    if (!fl && a->type != KILN_ATTR_INTS) {
      return kiln_make_status(KILN_INVALID_ARGUMENT,
                              "Constant: attribute '%s' is not a list", a->name);
    }
    v->dtype = fl ? KILN_DTYPE_F32 : KILN_DTYPE_I64;
    v->shape = kiln_tensor_unknown_rank(1);
    v->shape.dims[0] = a->count;
    v->data = fl ? (void*)a->floats : (void*)a->ints;
    v->nbytes = (size_t)a->count * (fl ? sizeof(float) : sizeof(int64_t));
  } else {
    return kiln_make_status(KILN_INVALID_ARGUMENT,
                            "Constant: missing attribute 'value' (or value_float, "
                            "value_floats, value_int, value_ints)");
  }
  /* An empty list may come with a NULL pointer; values must never be NULL. */
  if (!v->data) v->data = (void*)&empty;
  return NULL;
}

kiln_status_t kiln_tensor_constant_infer(kiln_infer_t* ctx) {
  kiln_array_t v;
  KILN_TRY(constant_view(ctx->node, &v));
  kiln_infer_set(ctx, 0, v.dtype, &v.shape);
  if (ctx->runtime) return NULL;
  return kiln_infer_set_value(ctx, 0, &v);
}

kiln_status_t kiln_tensor_constant_run(const kiln_ref_ctx_t* ctx) {
  kiln_array_t v;
  KILN_TRY(constant_view(ctx->node, &v));
  kiln_array_t* y = ctx->out[0];
  if (y->dtype != v.dtype || y->nbytes != v.nbytes) {
    return kiln_make_status(KILN_INTERNAL, "Constant: output does not match value");
  }
  if (v.nbytes) memcpy(y->data, v.data, v.nbytes);
  return NULL;
}

/* ---- ConstantOfShape -------------------------------------------------- */

/* The fill element (8 bytes covers every kiln dtype) and its dtype. */
static kiln_status_t fill_value(const kiln_node_t* node, kiln_dtype_t* dt,
                                unsigned char elem[8]) {
  memset(elem, 0, 8);
  *dt = KILN_DTYPE_F32;
  const kiln_attr_t* a = kiln_node_attr(node, "value");
  if (!a) return NULL;
  if (a->type != KILN_ATTR_TENSOR || !a->tensor) {
    return kiln_make_status(KILN_INVALID_ARGUMENT,
                            "ConstantOfShape: attribute 'value' is not a tensor");
  }
  const kiln_array_t* t = a->tensor;
  if (t->dtype == KILN_DTYPE_UNDEFINED) {
    return kiln_make_status(KILN_UNSUPPORTED,
                            "ConstantOfShape: attribute 'value' has a dtype kiln "
                            "does not support");
  }
  if (kiln_array_numel(t) != 1 || t->nbytes != kiln_dtype_size(t->dtype)) {
    return kiln_make_status(KILN_INVALID_ARGUMENT,
                            "ConstantOfShape: attribute 'value' has %lld "
                            "elements, expected 1",
                            (long long)kiln_array_numel(t));
  }
  *dt = t->dtype;
  memcpy(elem, t->data, t->nbytes);
  return NULL;
}

kiln_status_t kiln_tensor_constant_of_shape_infer(kiln_infer_t* ctx) {
  kiln_dtype_t dt;
  unsigned char elem[8];
  KILN_TRY(fill_value(ctx->node, &dt, elem));
  KILN_TRY(kiln_tensor_int_input(ctx, "ConstantOfShape", 0, "input"));
  const kiln_array_t* v = kiln_tensor_value(ctx, 0);
  if (!v) {
    int64_t len = kiln_tensor_len_1d(ctx->in[0]);
    KILN_TRY(kiln_tensor_check_rank("ConstantOfShape", len));
    kiln_shape_t s = kiln_tensor_unknown_rank((int32_t)len);
    kiln_infer_set(ctx, 0, dt, &s);
    return NULL;
  }
  int64_t dims[KILN_MAX_RANK];
  int64_t n;
  KILN_TRY(kiln_tensor_read_ints("ConstantOfShape", "input", v, dims, KILN_MAX_RANK, &n));
  for (int64_t k = 0; k < n; ++k) {
    if (dims[k] < 0) {
      return kiln_make_status(KILN_INVALID_ARGUMENT,
                              "ConstantOfShape: input[%lld] is %lld, dims must "
                              "be >= 0",
                              (long long)k, (long long)dims[k]);
    }
  }
  kiln_shape_t s = kiln_shape_make((int32_t)n, dims);
  kiln_infer_set(ctx, 0, dt, &s);
  return NULL;
}

kiln_status_t kiln_tensor_constant_of_shape_run(const kiln_ref_ctx_t* ctx) {
  kiln_dtype_t dt;
  unsigned char elem[8];
  KILN_TRY(fill_value(ctx->node, &dt, elem));
  kiln_array_t* y = ctx->out[0];
  if (y->dtype != dt) {
    return kiln_make_status(KILN_INTERNAL, "ConstantOfShape: output dtype mismatch");
  }
  kiln_tensor_fill(y->data, elem, kiln_dtype_size(dt), kiln_array_numel(y));
  return NULL;
}
