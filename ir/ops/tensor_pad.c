/* Pad: constant, reflect, edge and wrap modes over any set of axes.
 *
 * Pads come from the 'paddings' (Pad-1) or 'pads' (Pad-2) attribute or from
 * input 1 (Pad-11+), with the fill value from the 'value' attribute or input
 * 2, and the axes from input 3 (Pad-18). A negative pad crops: the axis is
 * cropped first and the remaining part is padded, so reflect/edge/wrap read
 * only the kept elements (onnxruntime's behaviour).
 *
 * The kernel maps every output index along every axis to an input index (or
 * -1 for the fill value) once, then walks the output row by row. */
#include <string.h>

#include "ir/ops/tensor_impl.h"

enum { PAD_CONSTANT, PAD_REFLECT, PAD_EDGE, PAD_WRAP };

typedef struct {
  int mode;
  const char* mode_name;
  bool known;                 /* false: pads/axes not known at load time */
  int64_t begin[KILN_MAX_RANK], end[KILN_MAX_RANK]; /* per input axis */
  unsigned char fill[8];      /* the constant, in the data's dtype */
} pad_args_t;

static kiln_status_t pad_mode(const kiln_node_t* node, pad_args_t* p) {
  KILN_TRY(kiln_attr_string(node, "mode", "constant", &p->mode_name));
  static const char* const names[] = {"constant", "reflect", "edge", "wrap"};
  for (int k = 0; k < 4; ++k) {
    if (strcmp(p->mode_name, names[k]) == 0) {
      p->mode = k;
      return NULL;
    }
  }
  return kiln_make_status(KILN_INVALID_ARGUMENT,
                          "Pad: mode '%s' is not one of constant, reflect, "
                          "edge, wrap",
                          p->mode_name);
}

/* Spreads |n| pads over |rank| axes: pads[0..n/2) are the begins and
 * pads[n/2..n) the ends of |axes| (all axes when axes is NULL). */
static kiln_status_t pad_spread(const int64_t* pads, int64_t n,
                                const int64_t* axes, int64_t n_axes,
                                int32_t rank, pad_args_t* p) {
  int32_t norm[KILN_MAX_RANK];
  if (axes) {
    KILN_TRY(kiln_tensor_axes("Pad", axes, n_axes, rank, norm));
  } else {
    n_axes = rank;
    for (int32_t k = 0; k < rank; ++k) norm[k] = k;
  }
  if (n != 2 * n_axes) {
    return kiln_make_status(KILN_INVALID_ARGUMENT,
                            "Pad: pads has %lld entries, expected %lld (2 per "
                            "padded axis)",
                            (long long)n, (long long)(2 * n_axes));
  }
  for (int32_t k = 0; k < rank; ++k) p->begin[k] = p->end[k] = 0;
  for (int64_t k = 0; k < n_axes; ++k) {
    p->begin[norm[k]] = pads[k];
    p->end[norm[k]] = pads[n_axes + k];
  }
  return NULL;
}

/* Reads mode, pads, axes and fill value from attributes and the arrays
 * |in| (data, pads, constant_value, axes; any may be NULL). |pads_given| and
 * |axes_given| say whether those inputs exist even when their values are not
 * known (then p->known is false). */
static kiln_status_t pad_args(const kiln_node_t* node, int64_t opset,
                              kiln_dtype_t dt, int32_t rank,
                              const kiln_array_t* const* in, bool pads_given,
                              bool axes_given, pad_args_t* p) {
  memset(p, 0, sizeof *p);
  KILN_TRY(pad_mode(node, p));
  size_t esz = kiln_dtype_size(dt);
  if (opset < 11) {
    const int64_t* pads = NULL;
    int64_t n = -1;
    KILN_TRY(kiln_attr_ints(node, opset < 2 ? "paddings" : "pads", &pads, &n));
    if (n < 0) {
      return kiln_make_status(KILN_INVALID_ARGUMENT,
                              "Pad: missing required attribute '%s'",
                              opset < 2 ? "paddings" : "pads");
    }
    float value = 0.0f;
    KILN_TRY(kiln_attr_float(node, "value", 0.0f, &value));
    if (esz) kiln_store_f64(dt, p->fill, 0, value);
    p->known = true;
    return rank >= 0 ? pad_spread(pads, n, NULL, 0, rank, p) : NULL;
  }
  if (!pads_given) {
    return kiln_make_status(KILN_INVALID_ARGUMENT, "Pad: missing required input 'pads'");
  }
  const kiln_array_t* cv = in[2];
  if (cv) {
    if (cv->dtype != dt) {
      return kiln_make_status(KILN_INVALID_ARGUMENT,
                              "Pad: constant_value has dtype %s, data has %s",
                              kiln_dtype_name(cv->dtype), kiln_dtype_name(dt));
    }
    if (kiln_array_numel(cv) > 0 && cv->nbytes >= esz) memcpy(p->fill, cv->data, esz);
  }
  if (!in[1] || (axes_given && !in[3]) || rank < 0) return NULL; /* unknown */
  int64_t pads[2 * KILN_MAX_RANK], axes[KILN_MAX_RANK];
  int64_t n = 0, n_axes = 0;
  KILN_TRY(kiln_tensor_read_ints("Pad", "pads", in[1], pads, 2 * KILN_MAX_RANK, &n));
  if (in[3]) KILN_TRY(kiln_tensor_read_ints("Pad", "axes", in[3], axes, KILN_MAX_RANK, &n_axes));
  p->known = true;
  return pad_spread(pads, n, in[3] ? axes : NULL, n_axes, rank, p);
}

/* Output size of axis |k| of size |d|, with checks that need |d|. */
static kiln_status_t pad_dim(const pad_args_t* p, int32_t k, int64_t d,
                             int64_t* out) {
  int64_t b = p->begin[k], e = p->end[k];
  if (!kiln_dim_known(d)) {
    *out = (b == 0 && e == 0) ? d : KILN_DIM_UNKNOWN;
    return NULL;
  }
  int64_t o;
  if (__builtin_add_overflow(d, b, &o) || __builtin_add_overflow(o, e, &o) || o < 0) {
    return kiln_make_status(KILN_INVALID_ARGUMENT,
                            "Pad: axis %d of size %lld with pads %lld, %lld "
                            "gives an invalid size",
                            (int)k, (long long)d, (long long)b, (long long)e);
  }
  int64_t kept = d - (b < 0 ? -b : 0) - (e < 0 ? -e : 0);
  if (p->mode != PAD_CONSTANT && kept <= 0 && (b > 0 || e > 0)) {
    return kiln_make_status(KILN_INVALID_ARGUMENT,
                            "Pad: mode '%s' cannot pad axis %d, which has no "
                            "elements left",
                            p->mode_name, (int)k);
  }
  *out = o;
  return NULL;
}

kiln_status_t kiln_tensor_pad_infer(kiln_infer_t* ctx) {
  const kiln_tensor_t* x = ctx->in[0];
  int32_t r = x->shape.rank;
  const kiln_array_t* in[4] = {NULL, NULL, NULL, NULL};
  if (ctx->opset >= 11) {
    KILN_TRY(kiln_tensor_int_input(ctx, "Pad", 1, "pads"));
    KILN_TRY(kiln_tensor_int_input(ctx, "Pad", 3, "axes"));
    const kiln_tensor_t* cv = kiln_tensor_in(ctx, 2);
    if (cv && cv->dtype != KILN_DTYPE_UNDEFINED && cv->dtype != x->dtype) {
      return kiln_make_status(KILN_INVALID_ARGUMENT,
                              "Pad: constant_value has dtype %s, data has %s",
                              kiln_dtype_name(cv->dtype), kiln_dtype_name(x->dtype));
    }
    for (int32_t k = 1; k < 4; ++k) in[k] = kiln_tensor_value(ctx, k);
  }
  pad_args_t p;
  KILN_TRY(pad_args(ctx->node, ctx->opset, x->dtype, r, in,
                    kiln_tensor_in(ctx, 1) != NULL, kiln_tensor_in(ctx, 3) != NULL, &p));
  kiln_shape_t out = kiln_tensor_unknown_rank(r);
  if (p.known && r >= 0) {
    for (int32_t k = 0; k < r; ++k) KILN_TRY(pad_dim(&p, k, x->shape.dims[k], &out.dims[k]));
  }
  kiln_infer_set(ctx, 0, x->dtype, &out);
  return NULL;
}

/* Input index (into the whole axis of size |d|) that output index |o| of
 * axis |k| reads, or -1 for the fill value. */
static int64_t pad_source(const pad_args_t* p, int32_t k, int64_t d, int64_t o) {
  int64_t b = p->begin[k], e = p->end[k];
  int64_t lo = b < 0 ? -b : 0;
  int64_t m = d - lo - (e < 0 ? -e : 0); /* elements kept after cropping */
  int64_t j = o - (b > 0 ? b : 0);       /* position inside the kept part */
  if (j >= 0 && j < m) return lo + j;
  if (m <= 0) return -1;
  switch (p->mode) {
    case PAD_EDGE:
      return lo + (j < 0 ? 0 : m - 1);
    case PAD_REFLECT: {
      if (m == 1) return lo;
      int64_t period = 2 * (m - 1);
      j %= period;
      if (j < 0) j += period;
      return lo + (j >= m ? period - j : j);
    }
    case PAD_WRAP:
      j %= m;
      return lo + (j < 0 ? j + m : j);
    default:
      return -1;
  }
}

#define PAD_ROW(T)                                                       \
  do {                                                                   \
    T* d_ = (T*)dst;                                                     \
    const T* s_ = (const T*)src;                                         \
    T f_;                                                                \
    memcpy(&f_, p.fill, sizeof f_);                                      \
    for (int64_t o = 0; o < w; ++o) d_[o] = map[o] < 0 ? f_ : s_[map[o]]; \
  } while (0)

kiln_status_t kiln_tensor_pad_run(const kiln_ref_ctx_t* ctx) {
  const kiln_array_t* x = ctx->in[0];
  kiln_array_t* y = ctx->out[0];
  int32_t r = x->shape.rank;
  const kiln_array_t* in[4] = {x, NULL, NULL, NULL};
  if (ctx->opset >= 11) {
    for (int32_t k = 1; k < 4; ++k) in[k] = kiln_tensor_arr(ctx, k);
  }
  pad_args_t p;
  KILN_TRY(pad_args(ctx->node, ctx->opset, x->dtype, r, in, in[1] != NULL,
                    in[3] != NULL, &p));
  size_t esz = kiln_dtype_size(x->dtype);
  if (y->dtype != x->dtype || y->shape.rank != r) {
    return kiln_make_status(KILN_INTERNAL, "Pad: output does not match input");
  }
  if (r == 0) {
    memcpy(y->data, x->data, esz);
    return NULL;
  }
  /* One index map per axis, laid end to end. */
  int64_t total = 0, at[KILN_MAX_RANK];
  for (int32_t k = 0; k < r; ++k) {
    int64_t o = 0;
    KILN_TRY(pad_dim(&p, k, x->shape.dims[k], &o));
    if (o != y->shape.dims[k]) {
      return kiln_make_status(KILN_INTERNAL, "Pad: output shape mismatch");
    }
    at[k] = total;
    total += o;
  }
  if (kiln_array_numel(y) == 0) return NULL;
  int64_t* maps = NULL;
  KILN_TRY(kiln_allocator_malloc(ctx->allocator, (size_t)total * sizeof(int64_t),
                                 "Pad index map", (void**)&maps));
  int64_t xs[KILN_MAX_RANK];
  kiln_tensor_strides(&x->shape, xs);
  for (int32_t k = 0; k < r; ++k) {
    for (int64_t o = 0; o < y->shape.dims[k]; ++o) {
      int64_t s = pad_source(&p, k, x->shape.dims[k], o);
      /* The last axis keeps element offsets; others are resolved per row. */
      maps[at[k] + o] = s;
    }
  }
  const int64_t* map = maps + at[r - 1];
  int64_t w = y->shape.dims[r - 1];
  int64_t idx[KILN_MAX_RANK] = {0};
  char* dst = (char*)y->data;
  for (;;) {
    /* Source offset of this row, or a fill row when any outer axis maps to
     * the fill value. */
    int64_t base = 0;
    bool fill_row = false;
    for (int32_t k = 0; k < r - 1; ++k) {
      int64_t s = maps[at[k] + idx[k]];
      if (s < 0) fill_row = true;
      base += s * xs[k];
    }
    if (fill_row) {
      kiln_tensor_fill(dst, p.fill, esz, w);
    } else {
      const char* src = (const char*)x->data + base * (int64_t)esz;
      switch (esz) {
        case 1: PAD_ROW(uint8_t); break;
        case 2: PAD_ROW(uint16_t); break;
        case 4: PAD_ROW(uint32_t); break;
        default: PAD_ROW(uint64_t); break;
      }
    }
    dst += w * (int64_t)esz;
    int32_t k = r - 2;
    for (; k >= 0; --k) {
      if (++idx[k] < y->shape.dims[k]) break;
      idx[k] = 0;
    }
    if (k < 0) break;
  }
  kiln_allocator_free(ctx->allocator, maps);
  return NULL;
}
#undef PAD_ROW
