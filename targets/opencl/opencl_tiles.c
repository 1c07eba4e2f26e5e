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
  /* KILN_OPENCL_RULES=gpu|cpu is read once, where the flags are made
   * (kiln_compile_gpu_lacks, the target's rules_env) */
  return (gpu_lacks & KILN_GPU_CLASS_GPU) != 0;
}

/* The GPU rules. NOT measured on a GPU yet (no session had one): they
 * follow what GPU BLAS and inference libraries default to -- a work-group
 * of 64-256 work-items (whole warps / wavefronts of 32 or 64) that shares
 * its operand slices through __local memory, a small register tile per
 * item (16-32 accumulators, so many groups stay resident), float4 loads.
 * On PoCL's CPU device they are correct but slow (a group's items run one
 * after another): the CPU rules stay the default there. A session with a
 * GPU measures and tunes them (KILN_OPENCL_RULES=gpu|cpu compares).
 *
 * Sized to the device (kiln_template_limits_t, zeros where unknown): at
 * most CL_DEVICE_MAX_WORK_GROUP_SIZE items and 256, whole multiples of its
 * warp / wavefront width where that still fits, and __local tiles within
 * half of CL_DEVICE_LOCAL_MEM_SIZE (two groups resident on a compute unit:
 * 24 of NVIDIA's 48 KiB, 16 of a Mali's 32 KiB); an unknown device gets
 * 256 items and 16 KiB. */
#define GPU_ITEMS_MAX 256
#define GPU_LOCAL_DEFAULT 16384

int64_t kiln_opencl_gpu_items(const kiln_template_limits_t* lim) {
  int64_t cap = GPU_ITEMS_MAX;
  if (lim && lim->max_workgroup_size > 0 && lim->max_workgroup_size < cap) cap = lim->max_workgroup_size;
  return cap < 1 ? 1 : cap;
}

uint64_t kiln_opencl_gpu_local(const kiln_template_limits_t* lim) {
  if (!lim || lim->local_mem_bytes == 0) return GPU_LOCAL_DEFAULT;
  return lim->local_mem_bytes / 2;
}

/* |items| made a multiple of the warp width where the cap allows (a
 * group of 48 on a 32-wide warp runs as 64 lanes with 16 idle); below
 * one warp, the cap itself. */
static int64_t whole_warps(int64_t items, int64_t cap, const kiln_template_limits_t* lim) {
  const int64_t w = lim && lim->warp > 1 ? lim->warp : 1;
  if (items > cap) items = cap;
  if (w > 1 && items >= w) items = items / w * w;
  return items < 1 ? 1 : items;
}

kiln_opencl_gemm_tiles_t kiln_opencl_gemm_gpu_tiles(int64_t M, int64_t N, int64_t K, const kiln_template_limits_t* lim) {
  /* 16 x 16 items of 4 x 4: 64 x 64 blocks, K slices of 31 (15.5 KiB of
   * __local floats); 8 x 8 items (32 x 32 blocks, slices of 63, 15.75 KiB)
   * where the large blocks leave fewer groups than two a compute unit (64
   * where the count is unknown: a GPU has up to ~130). A device with fewer
   * items a group halves wy, then wx (16 x 8, 8 x 8, 8 x 4, ...), and the
   * slice shrinks until both __local slices fit its budget.
   *
   * The slice is odd on purpose: gemm.cl / conv.cl stage B panel-major,
   * work-item tx's TN = 4 columns BK x 4 floats after tx - 1's, and each k
   * of the micro-kernel reads one float4 per item. With an even BK (32)
   * the 8 items of a quarter-warp read float4s 128 floats apart, all in
   * the same 4 of the 32 banks of __local memory: an 8-way conflict on
   * every B read (and 2-way on A's, ty's rows BK x 4 apart). An odd BK puts
   * neighbouring items' panels in distinct banks, so the kernels' text
   * (shared with PoCL's defaults) stays as it is. The A copy then takes
   * gemm.cl's element-wise path (still coalesced: consecutive items read
   * consecutive k) and K's edge slice is guarded. */
  kiln_opencl_gemm_tiles_t t = {.tm = 4, .tn = 4, .vw = 4, .wx = 16, .wy = 16, .bk = 31, .mm = 1, .mn = 1};
  const int64_t cus = lim && lim->compute_units > 0 ? lim->compute_units : 0;
  const int64_t want_groups = cus * 2 > 64 ? cus * 2 : 64;
  if (((M + 63) / 64) * ((N + 63) / 64) < want_groups) t.wx = t.wy = 8, t.bk = 63;
  const int64_t cap = kiln_opencl_gpu_items(lim);
  while ((int64_t)t.wx * t.wy > cap && (t.wx > 1 || t.wy > 1)) {
    if (t.wy >= t.wx && t.wy > 1) t.wy /= 2;
    else t.wx /= 2;
  }
  const uint64_t budget = kiln_opencl_gpu_local(lim);
  while (t.bk > 3 && (uint64_t)t.bk * (uint64_t)(t.tm * t.wy * t.mm + t.tn * t.wx * t.mn) * 4 > budget)
    t.bk = t.bk / 2 | 1; /* 31, 15, 7, 3: odd */
  /* a short K: one slice, odd */
  if (K < t.bk) t.bk = (int32_t)(K < 1 ? 1 : K | 1);
  return t;
}

kiln_opencl_wino_tiles_t kiln_opencl_wino_gpu_tiles(const kiln_template_conv_t* c, int32_t f,
                                                    const kiln_template_limits_t* lim) {
  /* 64 items: 16 along the tiles x 4 along the channels. F(2x2): 4
   * channels x 2 tiles an item (128 private sums), 8 channels a slice
   * (16 x 8 x 32 __local floats, 16 KiB); F(4x4): 2 x 2 (144 sums), 4 a
   * slice (18 KiB). A smaller device halves wy, then wx (tn x wx stays a
   * multiple of 4), then the slice (then wx) to fit its __local budget. */
  kiln_opencl_wino_tiles_t t = {.tm = 4, .tn = 2, .wx = 16, .wy = 4, .cb = 8, .f = 2};
  if (f == 4) t = (kiln_opencl_wino_tiles_t){.tm = 2, .tn = 2, .wx = 16, .wy = 4, .cb = 4, .f = 4};
  const int64_t cap = kiln_opencl_gpu_items(lim);
  while ((int64_t)t.wx * t.wy > cap && (t.wy > 1 || (t.wx > 1 && t.tn * (t.wx / 2) % 4 == 0))) {
    if (t.wy > 1) t.wy /= 2;
    else t.wx /= 2;
  }
  const uint64_t budget = kiln_opencl_gpu_local(lim);
  while ((uint64_t)(t.f == 4 ? 36 : 16) * t.cb * t.tn * t.wx * 4 > budget) {
    if (t.cb > 1) t.cb /= 2;
    else if (t.wx > 1 && t.tn * (t.wx / 2) % 4 == 0) t.wx /= 2;
    else break;
  }
  if (c->C < t.cb) t.cb = (int32_t)(c->C < 1 ? 1 : c->C);
  return t;
}

kiln_opencl_dw_tiles_t kiln_opencl_dw_gpu_tiles(const kiln_template_dw_t* d, const kiln_template_limits_t* lim) {
  /* runs of 4 (valid at every stride), one output row an item, 128 items
   * a group (whole warps, at most the device's); a channel's rows are
   * neighbours in a group */
  (void)d;
  return (kiln_opencl_dw_tiles_t){.vw = 4, .rh = 1, .wg = (int32_t)whole_warps(128, kiln_opencl_gpu_items(lim), lim)};
}

kiln_opencl_gemv_tiles_t kiln_opencl_gemv_gpu_tiles(const kiln_template_gemm_t* g, const kiln_template_limits_t* lim) {
  /* A group of WK items splits K, each streaming 8 columns of B a row in
   * two float4 loads (one 32-byte sector of an f32 row: no half-used
   * sectors), then sums the items' partials in __local memory (WK x M x 8
   * floats, 16 KiB at most). WK 128 where K >= 1024, else 64 (the serial
   * __local sum at the end grows with WK), never more items than rows of
   * K, whole warps, within the device's items and __local budget. Shaped
   * after GPU GEMV kernels (CLBlast's xgemv: 64-256 items a group, a
   * __local reduction); NOT measured on a GPU. */
  kiln_opencl_gemv_tiles_t t = {.vw = 4, .nc = 8, .wk = g->K >= 1024 ? 128 : 64, .on = 1};
  const int64_t cap = kiln_opencl_gpu_items(lim);
  while (t.wk > 1 && (t.wk > cap || t.wk > g->K)) t.wk /= 2;
  const int64_t w = lim && lim->warp > 1 ? lim->warp : 1;
  while (t.wk > w && t.wk % w) t.wk /= 2;
  const uint64_t budget = kiln_opencl_gpu_local(lim);
  while (t.wk > 1 && (uint64_t)t.wk * (uint64_t)g->M * (uint64_t)t.nc * 4 > budget) t.wk /= 2;
  return t;
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

/* GEMM instance |t|'s gemm.cl tiles by the rule set |gpu| picks: the GPU
 * rules sized to t->device (KILN_OPENCL_GEMM_TILES overriding) or
 * PoCL's. */
static kiln_opencl_gemm_tiles_t gemm_rule_tiles(const kiln_template_t* t, bool gpu) {
  if (!gpu) return kiln_opencl_gemm_tiles(&t->gemm);
  kiln_opencl_gemm_tiles_t g = kiln_opencl_gemm_gpu_tiles(t->gemm.M, t->gemm.N, t->gemm.K, &t->device);
  kiln_opencl_tiles_from_env("KILN_OPENCL_GEMM_TILES", &g);
  return g;
}

void kiln_opencl_template_tiles(kiln_template_t* t) {
  const uint32_t gpu_lacks = t->device.gpu_lacks;
  /* the OpenCL kernels use no 64-bit words or subgroups; the int8 ones
   * follow the dot product. The rule set: the device's class (or
   * KILN_OPENCL_RULES, in the flags); the GPU rules size work-groups to
   * the device in t->device; the tile variables override either. */
  const bool gpu = kiln_opencl_rules_gpu(gpu_lacks);
  switch (t->kind) {
    case KILN_TEMPLATE_GEMM: {
      /* few rows: gemv.cl's record (vw,nc,wk,on), on either rule set */
      if (kiln_opencl_gemv_covers(&t->gemm)) {
        kiln_opencl_gemv_tiles_t v;
        if (gpu) {
          v = kiln_opencl_gemv_gpu_tiles(&t->gemm, &t->device);
          kiln_opencl_gemv_tiles_from_env(&v);
        } else {
          v = kiln_opencl_gemv_tiles(&t->gemm);
        }
        t->tiles = record((const int32_t[]){v.vw, v.nc, v.wk, v.on}, 4);
        break;
      }
      const kiln_opencl_gemm_tiles_t g = gemm_rule_tiles(t, gpu);
      t->tiles = gemm_record(&g);
      break;
    }
    case KILN_TEMPLATE_CONV: {
      kiln_opencl_conv_tiles_t c;
      if (gpu) {
        c = kiln_opencl_gemm_gpu_tiles(t->conv.M, t->conv.Q, t->conv.K, &t->device);
        kiln_opencl_tiles_from_env("KILN_OPENCL_CONV_TILES", &c);
      } else {
        c = kiln_opencl_conv_default_tiles(t->conv.M, t->conv.Q, t->conv.K);
      }
      t->tiles = gemm_record(&c);
      break;
    }
    case KILN_TEMPLATE_WINOGRAD: {
      const kiln_opencl_wino_tiles_t w = kiln_opencl_wino_default_tiles(&t->conv, gpu, &t->device);
      t->tiles = record((const int32_t[]){w.tm, w.tn, w.wx, w.wy, w.cb, w.f}, 6);
      break;
    }
    case KILN_TEMPLATE_DEPTHWISE: {
      const kiln_opencl_dw_tiles_t d = kiln_opencl_dw_default_tiles(&t->dw, gpu, &t->device);
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
  /* a GEMV record with its switch off: gemm.cl at its own tiles (those
   * of the rule set that chose the record) */
  if (t->kind == KILN_TEMPLATE_GEMM && t->tiles.n == 4 && t->tiles.v[3] == 0 && kiln_opencl_gemv_covers(&t->gemm)) {
    *out = gemm_rule_tiles(t, kiln_opencl_rules_gpu(t->device.gpu_lacks));
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
