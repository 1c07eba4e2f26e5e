/* The OpenCL target's tile rules as lowering's template set reads them
 * (kiln_template_set_t.tiles / .weight_blocks, lowering/template.h): the
 * tiles of every instance are chosen during kiln_template_choose, from the
 * measured defaults and the KILN_OPENCL_{GEMM,CONV,WINO,DW}_TILES
 * overrides, and recorded in the descriptor, where the weight layout that
 * follows from them is decided too. The emitter reads them back here. */
#include <stdlib.h>
#include <string.h>

#include "targets/opencl/opencl_internal.h"

bool kiln_opencl_rules_gpu(uint32_t gpu_lacks) {
  const char* r = getenv("KILN_OPENCL_RULES");
  if (r && !strcmp(r, "gpu")) return true;
  if (r && !strcmp(r, "cpu")) return false;
  return (gpu_lacks & KILN_GPU_CLASS_GPU) != 0;
}

/* The GPU rules. NOT measured on a GPU yet (no session had one): they
 * follow what GPU BLAS and inference libraries default to -- a work-group
 * of 64-256 work-items (whole warps / wavefronts of 32 or 64) that shares
 * its operand slices through __local memory, a small register tile per
 * item (16-32 accumulators, so many groups stay resident), float4 loads.
 * On PoCL's CPU device they are correct but slow (a group's items run one
 * after another): the CPU rules stay the default there. A session with a
 * GPU measures and tunes them (KILN_OPENCL_RULES=gpu|cpu compares). */
kiln_opencl_gemm_tiles_t kiln_opencl_gemm_gpu_tiles(int64_t M, int64_t N, int64_t K) {
  /* 16 x 16 items of 4 x 4: 64 x 64 blocks, K slices of 32 (16 KiB of
   * __local floats); 8 x 8 items (32 x 32 blocks, slices of 64, 16 KiB)
   * where the large blocks leave fewer than 64 groups to spread over the
   * compute units. gemm.cl / conv.cl write a slice's partial sums back to
   * Y (f32), so the longer slice halves that traffic on the small blocks. */
  kiln_opencl_gemm_tiles_t t = {.tm = 4, .tn = 4, .vw = 4, .wx = 16, .wy = 16, .bk = 32, .mm = 1, .mn = 1};
  if (((M + 63) / 64) * ((N + 63) / 64) < 64) t.wx = t.wy = 8, t.bk = 64;
  /* a short K: one slice, a multiple of the vector width */
  if (K < t.bk) t.bk = (int32_t)(K < 1 ? t.vw : (K + t.vw - 1) / t.vw * t.vw);
  return t;
}

kiln_opencl_wino_tiles_t kiln_opencl_wino_gpu_tiles(const kiln_template_conv_t* c, int32_t f) {
  /* 64 items: 16 along the tiles x 4 along the channels. F(2x2): 4
   * channels x 2 tiles an item (128 private sums), 8 channels a slice
   * (16 x 8 x 32 __local floats, 16 KiB); F(4x4): 2 x 2 (144 sums), 4 a
   * slice (18 KiB). */
  kiln_opencl_wino_tiles_t t = {.tm = 4, .tn = 2, .wx = 16, .wy = 4, .cb = 8, .f = 2};
  if (f == 4) t = (kiln_opencl_wino_tiles_t){.tm = 2, .tn = 2, .wx = 16, .wy = 4, .cb = 4, .f = 4};
  if (c->C < t.cb) t.cb = (int32_t)(c->C < 1 ? 1 : c->C);
  return t;
}

kiln_opencl_dw_tiles_t kiln_opencl_dw_gpu_tiles(const kiln_template_dw_t* d) {
  /* runs of 4 (valid at every stride), one output row an item, 128 items
   * a group; a channel's rows are neighbours in a group */
  (void)d;
  return (kiln_opencl_dw_tiles_t){.vw = 4, .rh = 1, .wg = 128};
}

/* Record orders: GEMM / conv tm,tn,vw,wx,wy,bk,mm,mn; Winograd
 * tm,tn,wx,wy,cb,f; depthwise vw,rh,wg; int8 tm,tp,wg,rowvec (the typedefs' field order). */
static kiln_template_tiles_t record(const int32_t* v, int32_t n) {
  kiln_template_tiles_t r = {.n = n};
  for (int32_t i = 0; i < n; ++i) r.v[i] = v[i];
  return r;
}

static kiln_template_tiles_t gemm_record(const kiln_opencl_gemm_tiles_t* t) {
  return record((const int32_t[]){t->tm, t->tn, t->vw, t->wx, t->wy, t->bk, t->mm, t->mn}, 8);
}

void kiln_opencl_template_tiles(kiln_template_t* t, uint32_t gpu_lacks) {
  /* the OpenCL kernels use no 64-bit words or subgroups; the int8 ones
   * follow the dot product. The rule set: the device's class or
   * KILN_OPENCL_RULES; the tile variables override either. */
  const bool gpu = kiln_opencl_rules_gpu(gpu_lacks);
  switch (t->kind) {
    case KILN_TEMPLATE_GEMM: {
      /* few rows: gemv.cl's record (vw,nc,wk,on), on either rule set (its
       * defaults are PoCL's: no GPU rule for it yet) */
      if (kiln_opencl_gemv_covers(&t->gemm)) {
        const kiln_opencl_gemv_tiles_t v = kiln_opencl_gemv_tiles(&t->gemm);
        t->tiles = record((const int32_t[]){v.vw, v.nc, v.wk, v.on}, 4);
        break;
      }
      kiln_opencl_gemm_tiles_t g;
      if (gpu) {
        g = kiln_opencl_gemm_gpu_tiles(t->gemm.M, t->gemm.N, t->gemm.K);
        kiln_opencl_tiles_from_env("KILN_OPENCL_GEMM_TILES", &g);
      } else {
        g = kiln_opencl_gemm_tiles(&t->gemm);
      }
      t->tiles = gemm_record(&g);
      break;
    }
    case KILN_TEMPLATE_CONV: {
      kiln_opencl_conv_tiles_t c;
      if (gpu) {
        c = kiln_opencl_gemm_gpu_tiles(t->conv.M, t->conv.Q, t->conv.K);
        kiln_opencl_tiles_from_env("KILN_OPENCL_CONV_TILES", &c);
      } else {
        c = kiln_opencl_conv_default_tiles(t->conv.M, t->conv.Q, t->conv.K);
      }
      t->tiles = gemm_record(&c);
      break;
    }
    case KILN_TEMPLATE_WINOGRAD: {
      const kiln_opencl_wino_tiles_t w = kiln_opencl_wino_default_tiles(&t->conv, gpu);
      t->tiles = record((const int32_t[]){w.tm, w.tn, w.wx, w.wy, w.cb, w.f}, 6);
      break;
    }
    case KILN_TEMPLATE_DEPTHWISE: {
      const kiln_opencl_dw_tiles_t d = kiln_opencl_dw_default_tiles(&t->dw, gpu);
      t->tiles = record((const int32_t[]){d.vw, d.rh, d.wg}, 3);
      break;
    }
    case KILN_TEMPLATE_Q8: {
      const kiln_opencl_q8_tiles_t q = kiln_opencl_q8_default_tiles(&t->q8, gpu_lacks);
      t->tiles = record((const int32_t[]){q.tm, q.tp, q.wg, q.rowvec}, 4);
      break;
    }
    case KILN_TEMPLATE_NONE:
    case KILN_TEMPLATE_POOL: /* not in the OpenCL set */
    case KILN_TEMPLATE_ROWS:
    case KILN_TEMPLATE_MERGED: t->tiles = (kiln_template_tiles_t){0}; break;
  }
}

/* conv.cl reads W in blocks of BM = TM*WY*MM channels, K slices of BK and
 * micro-panels of TM; winograd.cl U in groups of TM*WY channels, panels of
 * TM, input-channel slices of CB, F(2x2) or F(4x4) as the tiles say (a
 * tuned point may change it). */
void kiln_opencl_template_weight_blocks(kiln_template_t* t) {
  const int32_t* v = t->tiles.v;
  kiln_template_weights_t* w = &t->weights;
  w->block = w->slice = w->panel = 0;
  if (w->layout == KILN_TEMPLATE_W_TILED && t->kind == KILN_TEMPLATE_CONV && t->tiles.n == 8) {
    w->block = (int64_t)v[0] * v[4] * v[6];
    w->slice = v[5];
    w->panel = v[0];
  } else if ((w->layout == KILN_TEMPLATE_W_WINOGRAD || w->layout == KILN_TEMPLATE_W_WINOGRAD4) &&
             t->kind == KILN_TEMPLATE_WINOGRAD && (t->tiles.n == 6 || (t->tiles.n == 7 && t->alt))) {
    w->block = (int64_t)v[0] * v[3];
    w->slice = v[4];
    w->panel = v[0];
    w->layout = v[5] == 4 ? KILN_TEMPLATE_W_WINOGRAD4 : KILN_TEMPLATE_W_WINOGRAD;
  }
}

static kiln_status_t want(const kiln_template_t* t, int32_t n, const char* kind, const char* name) {
  if (t->tiles.n != n)
    return kiln_make_status(KILN_INVALID_ARGUMENT,
                            "opencl: kernel '%s': its %s template has %d tile parameters, the OpenCL one reads %d "
                            "(choose the templates with the OpenCL set, kiln_opencl_templates)",
                            name, kind, (int)t->tiles.n, (int)n);
  return NULL;
}

/* The weight constant must hold the layout the instance's tiles read (a
 * tuner that changes the tiles lays the weights out again). */
static kiln_status_t laid_out(const kiln_template_t* t, const char* kind, const char* name) {
  kiln_template_t g = *t;
  kiln_opencl_template_weight_blocks(&g);
  if (!t->weights.laid_out || g.weights.block != t->weights.block || g.weights.slice != t->weights.slice ||
      g.weights.panel != t->weights.panel || g.weights.layout != t->weights.layout)
    return kiln_make_status(KILN_INVALID_ARGUMENT,
                            "opencl: kernel '%s': its %s weights are not laid out for its tiles "
                            "(kiln_template_weights_lay_out after choosing them)",
                            name, kind);
  return NULL;
}

kiln_status_t kiln_opencl_gemm_tiles_of(const kiln_template_t* t, const char* name, kiln_opencl_gemm_tiles_t* out) {
  /* a GEMV record with its switch off: gemm.cl at its own tiles */
  if (t->kind == KILN_TEMPLATE_GEMM && t->tiles.n == 4 && t->tiles.v[3] == 0 && kiln_opencl_gemv_covers(&t->gemm)) {
    *out = kiln_opencl_gemm_tiles(&t->gemm);
    return NULL;
  }
  KILN_RETURN_IF_ERROR(want(t, 8, t->kind == KILN_TEMPLATE_GEMM ? "gemm" : "conv", name));
  const int32_t* v = t->tiles.v;
  *out = (kiln_opencl_gemm_tiles_t){v[0], v[1], v[2], v[3], v[4], v[5], v[6], v[7]};
  if (t->kind != KILN_TEMPLATE_CONV || t->weights.layout == KILN_TEMPLATE_W_PACKED) return NULL;
  return laid_out(t, "conv", name);
}

kiln_status_t kiln_opencl_gemv_tiles_of(const kiln_template_t* t, const char* name, kiln_opencl_gemv_tiles_t* out) {
  KILN_RETURN_IF_ERROR(want(t, 4, "gemv", name));
  const int32_t* v = t->tiles.v;
  *out = (kiln_opencl_gemv_tiles_t){v[0], v[1], v[2], v[3]};
  const char* bad = kiln_opencl_gemv_tiles_check(&t->gemm, out);
  if (bad) return kiln_make_status(KILN_INVALID_ARGUMENT, "opencl: kernel '%s': %s", name, bad);
  return NULL;
}

kiln_status_t kiln_opencl_wino_tiles_of(const kiln_template_t* t, const char* name, kiln_opencl_wino_tiles_t* out) {
  /* the switch entry after the six (kiln_template_set_t.winograd_switch):
   * 1 is this instance, 0 its implicit-GEMM alternative in its place */
  if (!(t->tiles.n == 7 && t->alt && t->tiles.v[6] == 1)) KILN_RETURN_IF_ERROR(want(t, 6, "winograd", name));
  const int32_t* v = t->tiles.v;
  *out = (kiln_opencl_wino_tiles_t){v[0], v[1], v[2], v[3], v[4], v[5]};
  return laid_out(t, "Winograd", name);
}

kiln_status_t kiln_opencl_dw_tiles_of(const kiln_template_t* t, const char* name, kiln_opencl_dw_tiles_t* out) {
  /* the switch after the three (kiln_template_set_t.depthwise_switch): 1
   * is this instance, 0 the printed kernel (never handed here) */
  if (!(t->tiles.n == 4 && t->tiles.v[3] == 1)) KILN_RETURN_IF_ERROR(want(t, 3, "depthwise", name));
  *out = (kiln_opencl_dw_tiles_t){t->tiles.v[0], t->tiles.v[1], t->tiles.v[2]};
  return NULL;
}

kiln_status_t kiln_opencl_q8_tiles_of(const kiln_template_t* t, const char* name, kiln_opencl_q8_tiles_t* out) {
  KILN_RETURN_IF_ERROR(want(t, 4, "int8", name));
  *out = (kiln_opencl_q8_tiles_t){t->tiles.v[0], t->tiles.v[1], t->tiles.v[2], t->tiles.v[3]};
  return NULL;
}
