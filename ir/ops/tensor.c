/* The tensor (shape-manipulation) op family: the schema table plus helpers
 * shared by tensor_shape.c, tensor_move.c, tensor_pad.c and tensor_resize.c.
 * See tensor_impl.h for the layout of the family. */
#include <string.h>

#include "ir/ops/tensor_impl.h"

/* ---- input access ---------------------------------------------------- */

const kiln_array_t* kiln_tensor_value(const kiln_infer_t* ctx, int32_t i) {
  if (!kiln_tensor_in(ctx, i) || !kiln_infer_has_value(ctx, i)) return NULL;
  return &ctx->in[i]->value;
}

kiln_status_t kiln_tensor_read_ints(const char* op, const char* what,
                                    const kiln_array_t* a, int64_t* out,
                                    int64_t cap, int64_t* out_count) {
  if (a->dtype != KILN_DTYPE_I64 && a->dtype != KILN_DTYPE_I32) {
    return kiln_make_status(KILN_INVALID_ARGUMENT,
                            "%s: input '%s' has dtype %s, expected i64 or i32",
                            op, what, kiln_dtype_name(a->dtype));
  }
  if (a->shape.rank > 1) {
    return kiln_make_status(KILN_INVALID_ARGUMENT,
                            "%s: input '%s' has rank %d, expected 1", op, what,
                            (int)a->shape.rank);
  }
  int64_t n = kiln_shape_count(&a->shape);
  if (n > cap) {
    return kiln_make_status(KILN_UNSUPPORTED,
                            "%s: input '%s' has %lld values, kiln handles at "
                            "most %lld",
                            op, what, (long long)n, (long long)cap);
  }
  for (int64_t k = 0; k < n; ++k) out[k] = kiln_load_i64(a->dtype, a->data, (size_t)k);
  *out_count = n;
  return NULL;
}

int64_t kiln_tensor_len_1d(const kiln_tensor_t* t) {
  if (!t || t->shape.rank != 1 || !kiln_dim_known(t->shape.dims[0])) return -1;
  return t->shape.dims[0];
}

/* ---- shapes ---------------------------------------------------------- */

kiln_shape_t kiln_tensor_unknown_rank(int32_t rank) {
  kiln_shape_t s = kiln_shape_unknown();
  s.rank = (rank >= 0 && rank <= KILN_MAX_RANK) ? rank : -1;
  return s;
}

void kiln_tensor_strides(const kiln_shape_t* s, int64_t* strides) {
  int64_t acc = 1;
  for (int32_t k = s->rank - 1; k >= 0; --k) {
    strides[k] = acc;
    acc *= s->dims[k];
  }
}

kiln_status_t kiln_tensor_check_rank(const char* op, int64_t rank) {
  if (rank > KILN_MAX_RANK) {
    return kiln_make_status(KILN_UNSUPPORTED,
                            "%s: output rank %lld exceeds kiln's maximum of %d",
                            op, (long long)rank, KILN_MAX_RANK);
  }
  return NULL;
}

kiln_status_t kiln_tensor_axis(const char* op, const char* what, int64_t axis,
                               int32_t rank, int32_t* out_axis) {
  if (axis < -(int64_t)rank || axis >= rank) {
    return kiln_make_status(KILN_INVALID_ARGUMENT,
                            "%s: %s %lld is out of range [%d, %d) for rank %d",
                            op, what, (long long)axis, -(int)rank, (int)rank,
                            (int)rank);
  }
  *out_axis = (int32_t)(axis < 0 ? axis + rank : axis);
  return NULL;
}

kiln_status_t kiln_tensor_axes(const char* op, const int64_t* axes, int64_t n,
                               int32_t rank, int32_t* out_axes) {
  bool seen[KILN_MAX_RANK] = {false};
  for (int64_t k = 0; k < n; ++k) {
    KILN_TRY(kiln_tensor_axis(op, "axis", axes[k], rank, &out_axes[k]));
    if (seen[out_axes[k]]) {
      return kiln_make_status(KILN_INVALID_ARGUMENT,
                              "%s: axis %lld appears more than once", op,
                              (long long)axes[k]);
    }
    seen[out_axes[k]] = true;
  }
  return NULL;
}

const char* kiln_tensor_fmt(const kiln_infer_t* ctx, const kiln_shape_t* s,
                            char* buf, size_t n) {
  if (ctx->graph) return kiln_graph_format_shape(ctx->graph, s, buf, n);
  return kiln_shape_format(s, buf, n);
}

/* ---- data movement ---------------------------------------------------- */

/* The innermost run of a strided copy, typed by element size so the
 * compiler emits plain loads/stores (and vectorises unit strides). */
#define KILN_INNER(T)                                                  \
  do {                                                                 \
    T* d_ = (T*)dst;                                                   \
    const T* s_ = (const T*)src;                                       \
    for (int64_t k = 0; k < n; ++k) d_[k] = s_[k * stride];           \
  } while (0)

static void copy_run(char* dst, const char* src, size_t esz, int64_t n,
                     int64_t stride) {
  if (stride == 1) {
    memcpy(dst, src, (size_t)n * esz);
    return;
  }
  switch (esz) {
    case 1: KILN_INNER(uint8_t); break;
    case 2: KILN_INNER(uint16_t); break;
    case 4: KILN_INNER(uint32_t); break;
    case 8: KILN_INNER(uint64_t); break;
    default:
      for (int64_t k = 0; k < n; ++k) {
        memcpy(dst + k * (int64_t)esz, src + k * stride * (int64_t)esz, esz);
      }
  }
}
#undef KILN_INNER

void kiln_tensor_strided_copy(void* dst, const void* src, size_t esz,
                              int32_t rank, const int64_t* dims,
                              const int64_t* sstrides, int64_t soff) {
  const char* s = (const char*)src;
  char* d = (char*)dst;
  if (rank == 0) {
    memcpy(d, s + soff * (int64_t)esz, esz);
    return;
  }
  for (int32_t k = 0; k < rank; ++k) if (dims[k] == 0) return;
  int64_t idx[KILN_MAX_RANK] = {0};
  int64_t inner = dims[rank - 1], istride = sstrides[rank - 1];
  int64_t off = soff;
  for (;;) {
    copy_run(d, s + off * (int64_t)esz, esz, inner, istride);
    d += inner * (int64_t)esz;
    /* Odometer over the outer dims, keeping |off| incrementally. */
    int32_t k = rank - 2;
    for (; k >= 0; --k) {
      off += sstrides[k];
      if (++idx[k] < dims[k]) break;
      off -= sstrides[k] * dims[k];
      idx[k] = 0;
    }
    if (k < 0) return;
  }
}

void kiln_tensor_fill(void* dst, const void* elem, size_t esz, int64_t n) {
  char* d = (char*)dst;
  for (int64_t k = 0; k < n; ++k) memcpy(d + k * (int64_t)esz, elem, esz);
}

kiln_status_t kiln_tensor_same_dtype(const kiln_infer_t* ctx, const char* op,
                                     int32_t first, int32_t last) {
  const kiln_tensor_t* a = kiln_tensor_in(ctx, first);
  if (!a) return NULL;
  for (int32_t i = first + 1; i <= last; ++i) {
    const kiln_tensor_t* b = kiln_tensor_in(ctx, i);
    if (!b || b->dtype == KILN_DTYPE_UNDEFINED || a->dtype == KILN_DTYPE_UNDEFINED) continue;
    if (b->dtype != a->dtype) {
      return kiln_make_status(KILN_INVALID_ARGUMENT,
                              "%s: input %d '%s' has dtype %s, input %d '%s' has %s",
                              op, (int)i, b->name, kiln_dtype_name(b->dtype),
                              (int)first, a->name, kiln_dtype_name(a->dtype));
    }
  }
  return NULL;
}

kiln_status_t kiln_tensor_int_input(const kiln_infer_t* ctx, const char* op,
                                    int32_t i, const char* what) {
  const kiln_tensor_t* t = kiln_tensor_in(ctx, i);
  if (!t || t->dtype == KILN_DTYPE_UNDEFINED) return NULL;
  if (t->dtype != KILN_DTYPE_I64 && t->dtype != KILN_DTYPE_I32) {
    return kiln_make_status(KILN_INVALID_ARGUMENT,
                            "%s: input '%s' (%s) has dtype %s, expected i64",
                            op, what, t->name, kiln_dtype_name(t->dtype));
  }
  if (t->shape.rank > 1) {
    return kiln_make_status(KILN_INVALID_ARGUMENT,
                            "%s: input '%s' (%s) has rank %d, expected 1", op,
                            what, t->name, (int)t->shape.rank);
  }
  return NULL;
}

int64_t kiln_tensor_no_flops(const kiln_infer_t* ctx) {
  (void)ctx;
  return 0;
}

/* ---- the family ------------------------------------------------------- */

#define KILN_OP(type, stem, min_in, max_in, min_out, max_out, flops, pattern, tmpl, lower) \
  {type, min_in, max_in, min_out, max_out, kiln_tensor_##stem##_infer,                     \
   kiln_tensor_##stem##_run, flops, KILN_PATTERN_##pattern, tmpl},

static const kiln_op_schema_t tensor_ops[] = {
#include "ir/ops/tensor.def"
};

#undef KILN_OP

const kiln_op_family_t kiln_ops_tensor = {
    "tensor", tensor_ops, sizeof(tensor_ops) / sizeof(tensor_ops[0])};
