/* Helpers shared by the nn op family: spatial window attributes (Conv,
 * ConvTranspose, pools), f32 staging of other dtypes and a blocked GEMM.
 */
#include <stdio.h>
#include <string.h>

#include "ir/ops/nn_internal.h"

char* kiln_nn_fmt_ints(const int64_t* v, int64_t n, char* buf, size_t size) {
  size_t used = 0;
  if (size == 0) return buf;
  buf[0] = '\0';
  used += (size_t)snprintf(buf, size, "[");
  for (int64_t i = 0; i < n && used < size; ++i) {
    used += (size_t)snprintf(buf + used, size - used, "%s%lld", i ? "," : "",
                             (long long)v[i]);
  }
  if (used < size) snprintf(buf + used, size - used, "]");
  return buf;
}

const char* kiln_nn_in_name(const kiln_infer_t* ctx, int32_t i) {
  if (i < 0 || i >= ctx->n_in || !ctx->in[i] || !ctx->in[i]->name) return "?";
  return ctx->in[i]->name;
}

/* ---- spatial windows ---------------------------------------------------- */

/* Attribute values beyond this are rejected so that output-size arithmetic
 * on int64 can never overflow, whatever the model says. */
#define NN_ATTR_MAX ((int64_t)1 << 31)

static kiln_status_t read_ints(const kiln_node_t* n, const char* op,
                               const char* name, int64_t want, int64_t minv,
                               int64_t def, int64_t* out, bool* present) {
  const int64_t* v = NULL;
  int64_t count = -1;
  KILN_RETURN_IF_ERROR(kiln_attr_ints(n, name, &v, &count));
  if (present) *present = count >= 0;
  if (count < 0) {
    for (int64_t i = 0; i < want; ++i) out[i] = def;
    return NULL;
  }
  if (count != want) {
    return kiln_make_status(KILN_INVALID_ARGUMENT,
                            "%s: %s has %lld values, expected %lld", op, name,
                            (long long)count, (long long)want);
  }
  for (int64_t i = 0; i < count; ++i) {
    if (v[i] < minv) {
      return kiln_make_status(KILN_INVALID_ARGUMENT,
                              "%s: %s[%lld] is %lld, must be >= %lld", op, name,
                              (long long)i, (long long)v[i], (long long)minv);
    }
    if (v[i] >= NN_ATTR_MAX) {
      return kiln_make_status(KILN_INVALID_ARGUMENT,
                              "%s: %s[%lld] is %lld, too large", op, name,
                              (long long)i, (long long)v[i]);
    }
    out[i] = v[i];
  }
  return NULL;
}

kiln_status_t kiln_nn_window_parse(const kiln_node_t* n, const char* op,
                                   int32_t nsp, bool kernel_required,
                                   kiln_nn_window_t* w) {
  memset(w, 0, sizeof(*w));
  if (nsp < 1 || nsp > KILN_MAX_RANK - 2) {
    return kiln_make_status(KILN_INVALID_ARGUMENT,
                            "%s: %d spatial dims, expected 1 to %d", op,
                            (int)nsp, KILN_MAX_RANK - 2);
  }
  w->nsp = nsp;
  KILN_RETURN_IF_ERROR(read_ints(n, op, "kernel_shape", nsp, 1, 0, w->kernel,
                                 &w->has_kernel));
  if (kernel_required && !w->has_kernel) {
    return kiln_make_status(KILN_INVALID_ARGUMENT,
                            "%s: required attribute kernel_shape is missing",
                            op);
  }
  KILN_RETURN_IF_ERROR(
      read_ints(n, op, "strides", nsp, 1, 1, w->stride, NULL));
  KILN_RETURN_IF_ERROR(
      read_ints(n, op, "dilations", nsp, 1, 1, w->dilation, NULL));
  int64_t pads[2 * KILN_MAX_RANK];
  KILN_RETURN_IF_ERROR(
      read_ints(n, op, "pads", 2 * nsp, 0, 0, pads, &w->has_pads));
  for (int32_t i = 0; i < nsp; ++i) {
    w->pad_begin[i] = pads[i];
    w->pad_end[i] = pads[nsp + i];
  }
  const char* ap = NULL;
  KILN_RETURN_IF_ERROR(kiln_attr_string(n, "auto_pad", "NOTSET", &ap));
  if (!strcmp(ap, "NOTSET") || !strcmp(ap, "")) {
    w->auto_pad = KILN_NN_PAD_NOTSET;
  } else if (!strcmp(ap, "SAME_UPPER")) {
    w->auto_pad = KILN_NN_PAD_SAME_UPPER;
  } else if (!strcmp(ap, "SAME_LOWER")) {
    w->auto_pad = KILN_NN_PAD_SAME_LOWER;
  } else if (!strcmp(ap, "VALID")) {
    w->auto_pad = KILN_NN_PAD_VALID;
  } else {
    return kiln_make_status(KILN_INVALID_ARGUMENT,
                            "%s: auto_pad '%s' is not one of NOTSET, "
                            "SAME_UPPER, SAME_LOWER, VALID",
                            op, ap);
  }
  return NULL;
}

static int64_t ceil_div(int64_t a, int64_t b) {  /* a >= 0, b > 0 */
  return (a + b - 1) / b;
}

kiln_status_t kiln_nn_window_out(kiln_nn_window_t* w, const char* op,
                                 int32_t i, int64_t in, bool ceil_mode,
                                 int64_t* out) {
  int64_t k = w->kernel[i], s = w->stride[i], d = w->dilation[i];
  /* Attributes are below 2^31 (NN_ATTR_MAX), so the window spans below
   * 2^62; an input dim below 2^61 keeps every sum and product here inside
   * int64. Larger dims come only from hostile declarations. */
  if (in < 0 || in > ((int64_t)1 << 61))
    return kiln_make_status(KILN_LIMIT_EXCEEDED, "%s: input spatial dim %d is %lld, too large", op, (int)i,
                            (long long)in);
  int64_t eff = (k - 1) * d + 1;
  int64_t o = 0;
  switch (w->auto_pad) {
    case KILN_NN_PAD_SAME_UPPER:
    case KILN_NN_PAD_SAME_LOWER: {
      o = ceil_div(in, s);
      int64_t total = (o - 1) * s + eff - in;
      if (total < 0) total = 0;
      if (w->auto_pad == KILN_NN_PAD_SAME_UPPER) {
        w->pad_begin[i] = total / 2;
        w->pad_end[i] = total - total / 2;
      } else {
        w->pad_begin[i] = total - total / 2;
        w->pad_end[i] = total / 2;
      }
      break;
    }
    case KILN_NN_PAD_VALID:
      w->pad_begin[i] = w->pad_end[i] = 0;
      o = in >= eff ? (in - eff) / s + 1 : 0;
      break;
    case KILN_NN_PAD_NOTSET: {
      int64_t span = in + w->pad_begin[i] + w->pad_end[i] - eff;
      if (span < 0) {
        /* The window overhangs the padded input: floor gives no output;
         * ceil one partial window when the overhang is under a stride
         * (as in the ONNX reference and PyTorch). */
        o = ceil_mode && -span < s ? 1 : 0;
      } else if (ceil_mode) {
        o = ceil_div(span, s) + 1;
        /* The last window must start inside the input or its left padding
         * (ONNX, PyTorch and onnxruntime agree on this). */
        if ((o - 1) * s >= in + w->pad_begin[i]) --o;
      } else {
        o = span / s + 1;
      }
      break;
    }
  }
  if (o <= 0) {
    return kiln_make_status(
        KILN_INVALID_ARGUMENT,
        "%s: output spatial dim %d would be %lld (input %lld, kernel %lld, "
        "dilation %lld, stride %lld, pads %lld+%lld)",
        op, (int)i, (long long)o, (long long)in, (long long)k, (long long)d,
        (long long)s, (long long)w->pad_begin[i], (long long)w->pad_end[i]);
  }
  *out = o;
  return NULL;
}

void kiln_nn_win3(const kiln_nn_window_t* w, const int64_t* in,
                  const int64_t* out, kiln_nn_win3_t* w3) {
  int32_t off = KILN_NN_MAX_SPATIAL - w->nsp;
  KILN_ASSERT(off >= 0);
  for (int32_t j = 0; j < KILN_NN_MAX_SPATIAL; ++j) {
    if (j < off) {
      w3->in[j] = w3->out[j] = w3->k[j] = w3->s[j] = w3->d[j] = 1;
      w3->p[j] = 0;
    } else {
      int32_t i = j - off;
      w3->in[j] = in[i];
      w3->out[j] = out[i];
      w3->k[j] = w->kernel[i];
      w3->s[j] = w->stride[i];
      w3->d[j] = w->dilation[i];
      w3->p[j] = w->pad_begin[i];
    }
  }
}

void kiln_nn_valid_range(int64_t offset, int64_t stride, int64_t n_in,
                         int64_t n_out, int64_t* lo, int64_t* hi) {
  /* o*stride + offset >= 0  <=>  o >= ceil(-offset / stride) */
  int64_t l = offset >= 0 ? 0 : ceil_div(-offset, stride);
  /* o*stride + offset <= n_in - 1  <=>  o <= floor((n_in-1-offset)/stride) */
  int64_t top = n_in - 1 - offset;
  int64_t h = top < 0 ? 0 : top / stride + 1;
  if (l > n_out) l = n_out;
  if (h > n_out) h = n_out;
  if (h < l) h = l;
  *lo = l;
  *hi = h;
}

/* ---- f32 staging -------------------------------------------------------- */

void kiln_nn_scratch_free(const kiln_ref_ctx_t* ctx, void* p) {
  if (p) kiln_allocator_free(ctx->allocator, p);
}

kiln_status_t kiln_nn_scratch(const kiln_ref_ctx_t* ctx, int64_t count,
                              size_t elem, const char* what, void** out) {
  *out = NULL;
  if (count < 0 || (count > 0 && (uint64_t)count > SIZE_MAX / elem)) {
    return kiln_make_status(KILN_LIMIT_EXCEEDED, "%s: %lld elements is too many",
                            what, (long long)count);
  }
  return kiln_allocator_malloc(ctx->allocator, (size_t)count * elem, what, out);
}

kiln_status_t kiln_nn_f32_load(const kiln_ref_ctx_t* ctx, const kiln_array_t* a,
                               const float** out, float** scratch) {
  *scratch = NULL;
  if (a->dtype == KILN_DTYPE_F32) {
    *out = (const float*)a->data;
    return NULL;
  }
  /* f64 is never computed in f32 behind the caller's back. */
  if (a->dtype == KILN_DTYPE_F64)
    return kiln_make_status(KILN_UNSUPPORTED,
                            "%s: an input has dtype f64; its reference kernel computes in f32, so f64 "
                            "is not supported",
                            ctx->node && ctx->node->op_type ? ctx->node->op_type : "op");
  int64_t n = kiln_array_numel(a);
  float* buf = NULL;
  KILN_RETURN_IF_ERROR(kiln_nn_scratch(ctx, n, sizeof(float),
                                       "f32 copy of an input", (void**)&buf));
  if (a->dtype == KILN_DTYPE_F16) {
    const uint16_t* h = (const uint16_t*)a->data;
    for (int64_t i = 0; i < n; ++i) buf[i] = kiln_f16_to_f32(h[i]);
  } else {
    for (int64_t i = 0; i < n; ++i)
      buf[i] = (float)kiln_load_f64(a->dtype, a->data, (size_t)i);
  }
  *out = buf;
  *scratch = buf;
  return NULL;
}

kiln_status_t kiln_nn_f32_dest(const kiln_ref_ctx_t* ctx, kiln_array_t* a,
                               float** out, float** scratch) {
  *scratch = NULL;
  if (a->dtype == KILN_DTYPE_F32) {
    *out = (float*)a->data;
    return NULL;
  }
  float* buf = NULL;
  KILN_RETURN_IF_ERROR(kiln_nn_scratch(ctx, kiln_array_numel(a), sizeof(float),
                                       "f32 staging of an output",
                                       (void**)&buf));
  *out = buf;
  *scratch = buf;
  return NULL;
}

void kiln_nn_f32_store(const kiln_ref_ctx_t* ctx, kiln_array_t* a,
                       float* scratch) {
  if (!scratch) return;
  int64_t n = kiln_array_numel(a);
  if (a->dtype == KILN_DTYPE_F16) {
    uint16_t* h = (uint16_t*)a->data;
    for (int64_t i = 0; i < n; ++i) h[i] = kiln_f32_to_f16(scratch[i]);
  } else {
    for (int64_t i = 0; i < n; ++i)
      kiln_store_f64(a->dtype, a->data, (size_t)i, (double)scratch[i]);
  }
  kiln_allocator_free(ctx->allocator, scratch);
}

/* ---- GEMM --------------------------------------------------------------- */

/* Column and depth block sizes: a KB x NB tile of B (128 KiB) stays in L2
 * while every row of A sweeps over it, and one NB-wide row of C (1 KiB)
 * stays in L1 across the k loop. */
#define NN_GEMM_NB 256
#define NN_GEMM_KB 128

/* c[0:n] += a * b[0:n]. Fixed 8-wide steps because -O2's cheap vectoriser
 * only takes loops whose trip count is a known multiple of the vector
 * width; restrict parameters spare it the aliasing checks. */
static inline void axpy(float* restrict c, const float* restrict b, float a,
                        int64_t n) {
  int64_t j = 0;
  for (; j + 8 <= n; j += 8)
    for (int u = 0; u < 8; ++u) c[j + u] += a * b[j + u];
  for (; j < n; ++j) c[j] += a * b[j];
}

void kiln_nn_sgemm(int64_t M, int64_t N, int64_t K, const float* a,
                   int64_t a_rs, int64_t a_cs, const float* b, int64_t ldb,
                   float* c, int64_t ldc) {
  for (int64_t j0 = 0; j0 < N; j0 += NN_GEMM_NB) {
    int64_t jn = N - j0 < NN_GEMM_NB ? N - j0 : NN_GEMM_NB;
    for (int64_t k0 = 0; k0 < K; k0 += NN_GEMM_KB) {
      int64_t kn = K - k0 < NN_GEMM_KB ? K - k0 : NN_GEMM_KB;
      for (int64_t i = 0; i < M; ++i) {
        float* crow = c + i * ldc + j0;
        const float* arow = a + i * a_rs + k0 * a_cs;
        for (int64_t k = 0; k < kn; ++k) {
          const float av = arow[k * a_cs];
          axpy(crow, b + (k0 + k) * ldb + j0, av, jn);
        }
      }
    }
  }
}

/* ---- misc --------------------------------------------------------------- */

int64_t kiln_nn_mul_sat(int64_t a, int64_t b) {
  int64_t r;
  if (a < 0 || b < 0) return 0;
  return __builtin_mul_overflow(a, b, &r) ? INT64_MAX : r;
}

int64_t kiln_nn_prod(const kiln_shape_t* s, int32_t from, int32_t to) {
  int64_t p = 1;
  for (int32_t i = from; i < to; ++i) p *= s->dims[i];
  return p;
}

kiln_status_t kiln_nn_require_float(const kiln_infer_t* ctx, const char* op,
                                    int32_t i) {
  if (i >= ctx->n_in || !ctx->in[i]) return NULL;
  kiln_dtype_t t = ctx->in[i]->dtype;
  if (t == KILN_DTYPE_UNDEFINED || t == KILN_DTYPE_F32 || t == KILN_DTYPE_F16) return NULL;
  /* f64 too: these ops compute in f32, which must not pass for f64 */
  return kiln_make_status(KILN_UNSUPPORTED,
                          "%s: input '%s' has dtype %s; %s supports f32 and f16",
                          op, kiln_nn_in_name(ctx, i), kiln_dtype_name(t), op);
}
