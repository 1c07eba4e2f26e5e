/* The OpenCL templates' search spaces, as data beside their tile rules
 * (kiln_template_set_t.space / .tiles_check, lowering/template.h): which
 * values each entry of an instance's tiles record may take and which
 * points the templates print on a device. The defaults (opencl_tiles.c,
 * measured on PoCL) are always in the space, so a tuner starts from them
 * and a tuned point can only replace them after it measured faster.
 *
 * Record orders (opencl_tiles.c): GEMM / conv tm,tn,vw,wx,wy,bk,mm,mn;
 * Winograd tm,tn,wx,wy,cb,f (and the switch, 1 on / 0 off, where it has an
 * implicit-GEMM alternative); depthwise vw,rh,wg (and the switch, 1 the
 * template / 0 the printed kernel, with kiln_template_set_t.
 * depthwise_switch); a GEMM of at most 4 static rows vw,nc,wk,on (gemv.cl,
 * its switch 1 on / 0 gemm.cl at its default tiles). */
#include <string.h>

#include "targets/opencl/opencl_internal.h"

/* Private accumulators per work-item (floats): past this a CPU driver
 * spills them and a GPU runs out of registers. The defaults use 256. */
#define PRIVATE_TILE_MAX 512

#define KNOB KILN_TEMPLATE_KNOB

/* A Winograd record: tm,tn,wx,wy,cb,f (2 F(2x2, 3x3), 4 F(4x4, 3x3))
 * and, where the instance has an implicit-GEMM alternative
 * (kiln_template_set_t.winograd_switch), the switch (1 on, 0 off). */
static bool wino_record(const kiln_template_t* t) {
  return t->tiles.n == 6 || (t->tiles.n == 7 && t->alt != NULL);
}

bool kiln_opencl_tune_space(const kiln_template_t* t, kiln_template_space_t* out) {
  memset(out, 0, sizeof *out);
  const int32_t* d = t->tiles.v;
  switch (t->kind) {
    case KILN_TEMPLATE_GEMM:
    case KILN_TEMPLATE_CONV:
      if (t->kind == KILN_TEMPLATE_GEMM && t->tiles.n == 4 && kiln_opencl_gemv_covers(&t->gemm)) {
        out->version = "opencl.gemv.1";
        KNOB(out, "vw", d[0], 4, 8, 16);
        KNOB(out, "nc", d[1], 1, 2, 4, 8, 16, 32, 64, 128);
        /* wk 128 and 256: the GPU rules' groups (opencl_tiles.c) */
        KNOB(out, "wk", d[2], 1, 2, 4, 8, 16, 32, 64, 128, 256);
        KNOB(out, "gemv", d[3], 0, 1);
        return true;
      }
      if (t->tiles.n != 8) return false;
      out->version = t->kind == KILN_TEMPLATE_GEMM ? "opencl.gemm.1" : "opencl.conv.1";
      KNOB(out, "tm", d[0], 1, 2, 4, 8, 16);
      /* tn 4 and wx / wy 8, 16: the GPU rules' points (opencl_tiles.c) */
      KNOB(out, "tn", d[1], 4, 8, 16, 32, 64);
      KNOB(out, "vw", d[2], 4, 8, 16);
      KNOB(out, "wx", d[3], 1, 2, 4, 8, 16);
      KNOB(out, "wy", d[4], 1, 2, 4, 8, 16);
      /* bk 7, 15, 31, 63: the GPU rules' odd slices (opencl_tiles.c) */
      KNOB(out, "bk", d[5], 7, 15, 16, 31, 32, 63, 64, 128, 256);
      KNOB(out, "mm", d[6], 1, 2, 4, 8);
      KNOB(out, "mn", d[7], 1, 2, 4, 8);
      return true;
    case KILN_TEMPLATE_WINOGRAD:
      if (!wino_record(t)) return false;
      /* .3: f added (.1 and .2, without it, are no longer read) */
      out->version = t->tiles.n == 7 ? "opencl.winograd.3" : "opencl.winograd.3-noswitch";
      /* tm 2, tn 2, wx 8 / 16 and cb 1-4: the GPU rules' points (cb under 4
       * where a device's __local memory is small) */
      KNOB(out, "tm", d[0], 2, 4, 8, 16, 32);
      KNOB(out, "tn", d[1], 2, 4, 8, 16);
      KNOB(out, "wx", d[2], 1, 2, 4, 8, 16);
      KNOB(out, "wy", d[3], 1, 2, 4, 8);
      KNOB(out, "cb", d[4], 1, 2, 4, 8, 16, 32, 64);
      /* the output tile: F(2x2) or F(4x4) (weights W_WINOGRAD4) */
      KNOB(out, "f", d[5], 2, 4);
      /* 1 Winograd, 0 the implicit-GEMM conv (t->alt) with its default
       * tiles and weights (bench/opencl_winograd.py: Winograd about even
       * or slower with few tiles and channels) */
      if (t->tiles.n == 7) KNOB(out, "wino", d[6], 0, 1);
      return true;
    case KILN_TEMPLATE_DEPTHWISE:
      if (t->tiles.n != 3 && t->tiles.n != 4) return false;
      out->version = t->tiles.n == 4 ? "opencl.depthwise.2" : "opencl.depthwise.1";
      KNOB(out, "vw", d[0], 4, 8, 16);
      KNOB(out, "rh", d[1], 1, 2, 4);
      KNOB(out, "wg", d[2], 16, 32, 64, 128, 256);
      /* 1 the template, 0 the printed kernel (a channel per work-item,
       * which PoCL vectorizes across work-items: the default at stride 1) */
      if (t->tiles.n == 4) KNOB(out, "tmpl", d[3], 0, 1);
      return true;
    case KILN_TEMPLATE_Q8: /* not tuned */
    case KILN_TEMPLATE_POOL:
    case KILN_TEMPLATE_ROWS:
    case KILN_TEMPLATE_NONE:
    case KILN_TEMPLATE_MERGED: break;
  }
  return false;
}

static bool pow2_upto16(int32_t v) { return v == 1 || v == 2 || v == 4 || v == 8 || v == 16; }

static const char* fits(const kiln_template_limits_t* lim, int64_t group, uint64_t local_floats) {
  if (lim && lim->max_workgroup_size > 0 && group > lim->max_workgroup_size)
    return "work-group larger than the device allows";
  if (lim && lim->local_mem_bytes > 0 && local_floats * 4 > lim->local_mem_bytes)
    return "__local tiles larger than the device's local memory";
  return NULL;
}

/* What gemm.cl / conv.cl / winograd.cl / depthwise.cl take (the checks
 * their print functions make, plus the device's limits and the private
 * tile bound), so no point is refused only once it is built. */
const char* kiln_opencl_tune_check(const kiln_template_t* t, const kiln_template_tiles_t* x,
                                   const kiln_template_limits_t* lim) {
  const int32_t* v = x->v;
  /* (a Winograd record's switch is 0 or 1, checked below) */
  const bool gemv = t->kind == KILN_TEMPLATE_GEMM && x->n == 4;
  const int32_t n_tiles = (t->kind == KILN_TEMPLATE_WINOGRAD && x->n == 7) ||
                                  (t->kind == KILN_TEMPLATE_DEPTHWISE && x->n == 4) || gemv
                              ? x->n - 1
                              : x->n;
  for (int32_t i = 0; i < n_tiles; ++i)
    if (v[i] < 1 || v[i] > 4096) return "a tile outside 1..4096";
  switch (t->kind) {
    case KILN_TEMPLATE_GEMM:
    case KILN_TEMPLATE_CONV: {
      if (gemv) {
        if (t->tiles.n != 4) return "a GEMM record has 8 tiles (4 where it has at most 4 static rows)";
        const kiln_opencl_gemv_tiles_t g = {v[0], v[1], v[2], v[3]};
        const char* bad = kiln_opencl_gemv_tiles_check(&t->gemm, &g);
        if (bad || !g.on) return bad;
        return fits(lim, g.wk, g.wk > 1 ? (uint64_t)g.wk * (uint64_t)t->gemm.M * (uint64_t)g.nc : 0);
      }
      if (x->n != 8) return "a GEMM/conv record has 8 tiles";
      const int64_t tm = v[0], tn = v[1], vw = v[2], wx = v[3], wy = v[4], bk = v[5], mm = v[6], mn = v[7];
      if (!pow2_upto16(v[2]) || tn % vw) return "vw must be 1, 2, 4, 8 or 16 and divide tn";
      if (tm * tn > PRIVATE_TILE_MAX) return "tm x tn accumulators past the private budget";
      return fits(lim, wx * wy, (uint64_t)(bk * (tm * wy * mm + tn * wx * mn)));
    }
    case KILN_TEMPLATE_WINOGRAD: {
      if (x->n != t->tiles.n || !wino_record(t))
        return "a Winograd record has 6 tiles, and the switch where the instance has an implicit-GEMM alternative";
      if (x->n == 7 && v[6] != 0 && v[6] != 1) return "winograd: the switch is 0 (implicit GEMM) or 1 (Winograd)";
      const kiln_opencl_wino_tiles_t w = {v[0], v[1], v[2], v[3], v[4], v[5]};
      const char* bad = kiln_opencl_wino_tiles_check(&w);
      if (bad) return bad;
      return fits(lim, (int64_t)w.wx * w.wy, (uint64_t)((w.f == 4 ? 36 : 16) * (int64_t)w.cb * w.tn * w.wx));
    }
    case KILN_TEMPLATE_DEPTHWISE: {
      if (x->n != t->tiles.n || (x->n != 3 && x->n != 4))
        return "a depthwise record has 3 tiles, and the switch where the printed kernel is the other choice";
      if (x->n == 4 && v[3] != 0 && v[3] != 1) return "depthwise: the switch is 0 (printed) or 1 (template)";
      const kiln_template_dw_t* d = &t->dw;
      if (!(v[0] == 4 || v[0] == 8 || (v[0] == 16 && d->sw == 1))) return "vw must be 4, 8 (or 16 at stride 1)";
      if (v[2] > 256) return "work-group past 256";
      if (d->N * d->M * ((d->oh + v[1] - 1) / v[1]) + v[2] > INT32_MAX) return "work-items past int32";
      return fits(lim, v[2], 0);
    }
    case KILN_TEMPLATE_Q8: /* not tuned */
    case KILN_TEMPLATE_POOL:
    case KILN_TEMPLATE_ROWS:
    case KILN_TEMPLATE_NONE:
    case KILN_TEMPLATE_MERGED: break;
  }
  return "not a tunable template";
}

void kiln_opencl_tune_tie(const kiln_template_t* t, kiln_template_tiles_t* x) {
  /* the defaults below are those of the rule set that chose t's tiles
   * (the device in t->device) */
  const bool gpu = kiln_opencl_rules_gpu(t->device.gpu_lacks);
  /* GEMV off (gemm.cl at its default tiles): its tiles do not matter */
  if (t->kind == KILN_TEMPLATE_GEMM && x->n == 4 && x->v[3] == 0) {
    const kiln_opencl_gemv_tiles_t g =
        gpu ? kiln_opencl_gemv_gpu_tiles(&t->gemm, &t->device) : kiln_opencl_gemv_default_tiles(&t->gemm);
    x->v[0] = g.vw, x->v[1] = g.nc, x->v[2] = g.wk;
    return;
  }
  /* the printed depthwise kernel: the tiles do not matter */
  if (t->kind == KILN_TEMPLATE_DEPTHWISE && x->n == 4 && x->v[3] == 0) {
    const kiln_opencl_dw_tiles_t d = kiln_opencl_dw_default_tiles(&t->dw, gpu, &t->device);
    x->v[0] = d.vw, x->v[1] = d.rh, x->v[2] = d.wg;
    return;
  }
  /* Winograd off: its tiles do not matter, its defaults stand for all */
  if (t->kind != KILN_TEMPLATE_WINOGRAD || x->n != 7 || x->v[6] != 0) return;
  const kiln_opencl_wino_tiles_t w = kiln_opencl_wino_default_tiles(&t->conv, gpu, &t->device);
  const int32_t d[6] = {w.tm, w.tn, w.wx, w.wy, w.cb, w.f};
  for (int32_t i = 0; i < 6; ++i) x->v[i] = d[i];
}

/* What a point's driver compile grows with, for the tuner's skip of dear
 * draws (compiler/tune_dear.h). On PoCL a point's cost is mostly the first
 * launch, where LLVM compiles the work-group function, which holds every
 * work-item's unrolled tile: in two MobileNetV2 4-minute tunes (load 8-12,
 * 798 points) a GEMM / conv point cost 0.26-0.85 s on average up to 512
 * accumulators a work-group (tm x tn x wx x wy) and 5.4 s at 1024 (up to
 * 10.8 s; none of those 13 was faster), where tm x tn alone separated them
 * less (1.18 s at 512, 0.53 s at 256). So: GEMM / conv tm x tn x wx x wy,
 * class 1 past 512 (else 0). Winograd and depthwise points cost about the
 * same whatever their tiles (ResNet-18's 128 Winograd points 0.75-1.23 s
 * on average from 16 to 4096 accumulators a work-group, none over 2 s;
 * MobileNetV2's depthwise points at most 0.4 s): one size, so a
 * prediction is their class's measured cost and never a power law's
 * extrapolation (one measured size read as cost ~ size predicted 25 s for
 * a 1 s Winograd point); the class: Winograd on (0) or off (2: the
 * implicit-GEMM conv at its default tiles), the depthwise template (0) or
 * the printed kernel (1). */
static double group_tile(const int32_t* v) {
  double x = 1;
  for (int32_t i = 0; i < 4; ++i) x *= v[i] > 0 ? v[i] : 1;
  return x;
}

void kiln_opencl_tune_features(const kiln_template_t* t, const kiln_template_tiles_t* x, double* size, int32_t* cls) {
  const int32_t* v = x->v;
  *size = 1;
  *cls = 0;
  if (t->kind == KILN_TEMPLATE_GEMM && x->n == 4) {
    *cls = x->v[3] == 0 ? 2 : 0; /* GEMV on (0) or gemm.cl (2) */
  } else if ((t->kind == KILN_TEMPLATE_GEMM || t->kind == KILN_TEMPLATE_CONV) && x->n == 8) {
    const int32_t g[4] = {v[0], v[1], v[3], v[4]}; /* tm, tn, wx, wy */
    *size = group_tile(g);
    *cls = *size > 512;
  } else if (t->kind == KILN_TEMPLATE_WINOGRAD && (x->n == 5 || x->n == 6)) {
    *cls = x->n == 6 && v[5] == 0 ? 2 : 0;
  } else if (t->kind == KILN_TEMPLATE_DEPTHWISE && (x->n == 3 || x->n == 4)) {
    *cls = x->n == 4 && v[3] == 0;
  }
}

int32_t kiln_opencl_tune_hints(const kiln_template_t* t, kiln_template_tiles_t* out, int32_t cap) {
  /* GEMM and conv: the default's neighbours, one knob one step, the local
   * size (wx, wy) first, then the work-item's tile (tm, tn) and the K
   * block. Random points of this space ran MobileNetV2's 1x1 convs 20-100x
   * slower than the default on PoCL (0.01x-0.05x, 12-24 s a point at load
   * 10: 7 such points were a 4-minute tune's search) */
  if ((t->kind == KILN_TEMPLATE_GEMM || t->kind == KILN_TEMPLATE_CONV) && t->tiles.n == 8) {
    kiln_template_space_t sp;
    int32_t idx[KILN_TEMPLATE_TILES_MAX];
    if (!kiln_opencl_tune_space(t, &sp) || !kiln_template_space_index(&sp, &t->tiles, idx)) return 0;
    static const int32_t order[] = {3, 4, 0, 1, 5};
    int32_t n = 0;
    for (size_t o = 0; o < sizeof order / sizeof order[0]; ++o)
      for (int32_t step = 1; step >= -1 && n < cap; step -= 2) {
        const int32_t i = order[o], j = idx[i] + step;
        if (j < 0 || j >= sp.knobs[i].n) continue;
        out[n] = t->tiles;
        out[n++].v[i] = sp.knobs[i].v[j];
      }
    return n;
  }
  /* GEMV: gemm.cl first (does the GEMV pay for this shape), then the
   * default's neighbours along nc and wk */
  if (t->kind == KILN_TEMPLATE_GEMM && t->tiles.n == 4 && cap >= 1) {
    int32_t n = 0;
    out[n] = t->tiles;
    out[n].v[3] = !t->tiles.v[3];
    kiln_opencl_tune_tie(t, &out[n++]);
    kiln_template_space_t sp;
    int32_t idx[KILN_TEMPLATE_TILES_MAX];
    if (!t->tiles.v[3] || !kiln_opencl_tune_space(t, &sp) || !kiln_template_space_index(&sp, &t->tiles, idx)) return n;
    for (int32_t i = 1; i <= 2; ++i)
      for (int32_t step = 1; step >= -1 && n < cap; step -= 2) {
        const int32_t j = idx[i] + step;
        if (j < 0 || j >= sp.knobs[i].n) continue;
        out[n] = t->tiles;
        out[n++].v[i] = sp.knobs[i].v[j];
      }
    return n;
  }
  /* depthwise: the other of template and printed kernel first; from the
   * printed kernel also the template with a wider vector at stride 1 */
  if (t->kind == KILN_TEMPLATE_DEPTHWISE && t->tiles.n == 4 && cap >= 2) {
    int32_t n = 0;
    out[n] = t->tiles;
    out[n].v[3] = !t->tiles.v[3];
    kiln_opencl_tune_tie(t, &out[n++]);
    if (!t->tiles.v[3] && t->dw.sw == 1 && out[0].v[0] != 16) {
      out[n] = out[0];
      out[n++].v[0] = 16;
    }
    return n;
  }
  /* Winograd off first: one point that says whether the transform pays
   * for this shape (PoCL: 0.9-1.0x with few tiles and channels), then the
   * other output tile, F(4x4) or F(2x2), at its default tiles (the GPU
   * rules' for the device under them) */
  if (t->kind != KILN_TEMPLATE_WINOGRAD || t->tiles.n != 7 || !t->alt || cap < 1) return 0;
  out[0] = t->tiles;
  out[0].v[6] = 0;
  kiln_opencl_tune_tie(t, &out[0]);
  if (cap < 2) return 1;
  const int32_t f = t->tiles.v[5] == 4 ? 2 : 4;
  const kiln_opencl_wino_tiles_t o = kiln_opencl_rules_gpu(t->device.gpu_lacks)
                                         ? kiln_opencl_wino_gpu_tiles(&t->conv, f, &t->device)
                                         : kiln_opencl_wino_tiles_for(&t->conv, f);
  out[1] = (kiln_template_tiles_t){.n = 7, .v = {o.tm, o.tn, o.wx, o.wy, o.cb, o.f, 1}};
  return 2;
}
