/* Col2Im (opset 18): the inverse of im2col. Input [N, C * prod(block), L]
 * holds one column per block position (L = prod of the positions per
 * spatial dim, from image_shape, pads, dilations and strides); output
 * [N, C, image...] sums, per pixel, every column entry that lands on it.
 * image_shape and block_shape must be known at load time (they are the
 * output shape and the kernel's loop bounds). */
#include <string.h>

#include "ir/ops/col2im.h"
#include "ir/ops/tensor_impl.h"

/* Reads an optional per-dim attribute (|n| values, default |dflt|). */
static kiln_status_t per_dim(const kiln_node_t* node, const char* name, int32_t n, int64_t want,
                             int64_t dflt, int64_t* out) {
  const int64_t* v = NULL;
  int64_t cnt = 0;
  KILN_TRY(kiln_attr_ints(node, name, &v, &cnt));
  if (cnt <= 0) {
    for (int64_t k = 0; k < want; ++k) out[k] = dflt;
    return NULL;
  }
  if (cnt != want) {
    return kiln_make_status(KILN_INVALID_ARGUMENT,
                            "Col2Im: attribute '%s' has %lld values, expected %lld", name,
                            (long long)cnt, (long long)want);
  }
  (void)n;
  memcpy(out, v, (size_t)cnt * sizeof(int64_t));
  return NULL;
}

kiln_status_t kiln_col2im_geometry(const kiln_node_t* node, const kiln_array_t* image,
                                   const kiln_array_t* block, int64_t c_in, int64_t l_in,
                                   col2im_t* g) {
  memset(g, 0, sizeof *g);
  int64_t ni = 0, nb = 0;
  KILN_TRY(kiln_tensor_read_ints("Col2Im", "image_shape", image, g->image, KILN_COL2IM_MAX_DIMS, &ni));
  KILN_TRY(kiln_tensor_read_ints("Col2Im", "block_shape", block, g->block, KILN_COL2IM_MAX_DIMS, &nb));
  if (ni != nb || ni < 1) {
    return kiln_make_status(KILN_INVALID_ARGUMENT,
                            "Col2Im: image_shape has %lld values and block_shape %lld; they "
                            "must match and be >= 1",
                            (long long)ni, (long long)nb);
  }
  g->n = (int32_t)ni;
  int64_t pads[2 * KILN_COL2IM_MAX_DIMS];
  KILN_TRY(per_dim(node, "dilations", g->n, ni, 1, g->dil));
  KILN_TRY(per_dim(node, "strides", g->n, ni, 1, g->stride));
  KILN_TRY(per_dim(node, "pads", g->n, 2 * ni, 0, pads));
  g->block_size = g->n_blocks = 1;
  for (int32_t k = 0; k < g->n; ++k) {
    g->pad[k] = pads[k];
    if (g->image[k] < 1 || g->block[k] < 1 || g->dil[k] < 1 || g->stride[k] < 1 || pads[k] < 0 ||
        pads[ni + k] < 0 || g->image[k] > ((int64_t)1 << 31) || g->block[k] > ((int64_t)1 << 20) ||
        g->dil[k] > ((int64_t)1 << 20) || pads[k] > ((int64_t)1 << 31) ||
        pads[ni + k] > ((int64_t)1 << 31)) {
      return kiln_make_status(KILN_INVALID_ARGUMENT,
                              "Col2Im: dim %d: image %lld, block %lld, dilation %lld, stride "
                              "%lld, pads %lld/%lld are out of range",
                              (int)k, (long long)g->image[k], (long long)g->block[k],
                              (long long)g->dil[k], (long long)g->stride[k], (long long)pads[k],
                              (long long)pads[ni + k]);
    }
    int64_t span = g->dil[k] * (g->block[k] - 1) + 1;
    int64_t room = g->image[k] + pads[k] + pads[ni + k] - span;
    if (room < 0) {
      return kiln_make_status(KILN_INVALID_ARGUMENT,
                              "Col2Im: dim %d: the block spans %lld, more than the padded "
                              "image (%lld)",
                              (int)k, (long long)span, (long long)(room + span));
    }
    g->blocks[k] = room / g->stride[k] + 1;
    g->block_size *= g->block[k];
    g->n_blocks *= g->blocks[k];
  }
  if (c_in >= 0 && c_in % g->block_size != 0) {
    return kiln_make_status(KILN_INVALID_ARGUMENT,
                            "Col2Im: input dim 1 (%lld) is not a multiple of the block size %lld",
                            (long long)c_in, (long long)g->block_size);
  }
  if (l_in >= 0 && l_in != g->n_blocks) {
    return kiln_make_status(KILN_INVALID_ARGUMENT,
                            "Col2Im: input dim 2 is %lld, but image_shape, block_shape, pads, "
                            "dilations and strides give %lld block positions",
                            (long long)l_in, (long long)g->n_blocks);
  }
  return NULL;
}

kiln_status_t kiln_tensor_col2im_infer(kiln_infer_t* ctx) {
  const kiln_tensor_t* x = ctx->in[0];
  if (x->dtype != KILN_DTYPE_UNDEFINED && !kiln_dtype_is_float(x->dtype)) {
    return kiln_make_status(KILN_UNSUPPORTED, "Col2Im: input of %s is not supported",
                            kiln_dtype_name(x->dtype));
  }
  if (x->shape.rank >= 0 && x->shape.rank != 3) {
    return kiln_make_status(KILN_INVALID_ARGUMENT, "Col2Im: input has rank %d, expected 3",
                            (int)x->shape.rank);
  }
  KILN_TRY(kiln_tensor_int_input(ctx, "Col2Im", 1, "image_shape"));
  KILN_TRY(kiln_tensor_int_input(ctx, "Col2Im", 2, "block_shape"));
  const kiln_array_t* iv = kiln_tensor_value(ctx, 1);
  const kiln_array_t* bv = kiln_tensor_value(ctx, 2);
  if (!iv || !bv) {
    int64_t len = kiln_tensor_len_1d(ctx->in[1]);
    kiln_shape_t out = kiln_tensor_unknown_rank(len >= 1 && len <= KILN_COL2IM_MAX_DIMS ? (int32_t)(len + 2) : -1);
    kiln_infer_set(ctx, 0, x->dtype, &out);
    return NULL;
  }
  int64_t c_in = x->shape.rank == 3 && kiln_dim_known(x->shape.dims[1]) ? x->shape.dims[1] : -1;
  int64_t l_in = x->shape.rank == 3 && kiln_dim_known(x->shape.dims[2]) ? x->shape.dims[2] : -1;
  col2im_t g;
  KILN_TRY(kiln_col2im_geometry(ctx->node, iv, bv, c_in, l_in, &g));
  kiln_shape_t out = kiln_tensor_unknown_rank(g.n + 2);
  if (x->shape.rank == 3) {
    out.dims[0] = x->shape.dims[0];
    if (c_in >= 0) out.dims[1] = c_in / g.block_size;
  }
  for (int32_t k = 0; k < g.n; ++k) out.dims[2 + k] = g.image[k];
  kiln_infer_set(ctx, 0, x->dtype, &out);
  return NULL;
}

kiln_status_t kiln_tensor_col2im_run(const kiln_ref_ctx_t* ctx) {
  const kiln_array_t* x = ctx->in[0];
  kiln_array_t* y = ctx->out[0];
  if (x->shape.rank != 3) return kiln_make_status(KILN_INVALID_ARGUMENT, "Col2Im: input is not 3-D");
  col2im_t g;
  KILN_TRY(kiln_col2im_geometry(ctx->node, ctx->in[1], ctx->in[2], x->shape.dims[1], x->shape.dims[2], &g));
  const int64_t N = x->shape.dims[0], C = x->shape.dims[1] / g.block_size;
  if (y->shape.rank != g.n + 2 || y->dtype != x->dtype || y->shape.dims[0] != N || y->shape.dims[1] != C) {
    return kiln_make_status(KILN_INVALID_ARGUMENT, "Col2Im: output shape mismatch");
  }
  int64_t pix = 1;
  for (int32_t k = 0; k < g.n; ++k) {
    if (y->shape.dims[2 + k] != g.image[k]) {
      return kiln_make_status(KILN_INVALID_ARGUMENT, "Col2Im: output shape mismatch");
    }
    pix *= g.image[k];
  }
  int64_t numel = kiln_array_numel(y);
  for (int64_t e = 0; e < numel; ++e) kiln_store_f64(y->dtype, y->data, (size_t)e, 0.0);
  /* Scatter every input entry onto its pixel (sums in the output dtype, in
   * input order, as the ONNX reference does). */
  for (int64_t n = 0; n < N; ++n) {
    for (int64_t c = 0; c < C; ++c) {
      for (int64_t b = 0; b < g.block_size; ++b) {
        for (int64_t l = 0; l < g.n_blocks; ++l) {
          int64_t rb = b, rl = l, off = 0;
          bool inside = true;
          for (int32_t k = g.n - 1; k >= 0; --k) {
            int64_t kb = rb % g.block[k], kl = rl % g.blocks[k];
            rb /= g.block[k];
            rl /= g.blocks[k];
            int64_t p = kl * g.stride[k] + kb * g.dil[k] - g.pad[k];
            if (p < 0 || p >= g.image[k]) inside = false;
            int64_t st = 1;
            for (int32_t q = k + 1; q < g.n; ++q) st *= g.image[q];
            off += p * st;
          }
          if (!inside) continue;
          int64_t src = ((n * x->shape.dims[1]) + c * g.block_size + b) * g.n_blocks + l;
          int64_t dst = (n * C + c) * pix + off;
          double v = kiln_load_f64(y->dtype, y->data, (size_t)dst) +
                     kiln_load_f64(x->dtype, x->data, (size_t)src);
          kiln_store_f64(y->dtype, y->data, (size_t)dst, v);
        }
      }
    }
  }
  return NULL;
}
