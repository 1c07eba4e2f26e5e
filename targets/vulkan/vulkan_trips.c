/* Loop iterations per shader invocation: Mesa's lavapipe ends an
 * invocation after 65535 of them (kiln_device_info_t.loop_limit). Lowering
 * splits the work for such a device (kiln_plan_options_t.loop_limit: one
 * GEMM tile per invocation); the emitter records an upper estimate per
 * kernel and the device still refuses one above its limit instead of
 * returning partial results. */
#include "targets/vulkan/vulkan_internal.h"

#define TRIPS_CAP ((int64_t)1 << 40)

static int64_t trips_mul(int64_t a, int64_t b) { return a && b > TRIPS_CAP / a ? TRIPS_CAP : a * b; }
static int64_t trips_add(int64_t a, int64_t b) { return a + b > TRIPS_CAP ? TRIPS_CAP : a + b; }

/* Loop iterations one invocation of a printed kernel runs: every loop that
 * is not bound to an id runs in the invocation (its extent times one more
 * than its body's), a branch counts its longer side. An estimate: what the
 * driver's compiler unrolls does not count. */
static bool has_loop(const tir_stmt_t* st) {
  if (!st) return false;
  switch (st->kind) {
    case TIR_FOR: return true;
    case TIR_SEQ:
      for (int32_t i = 0; i < st->u.seq.n; ++i)
        if (has_loop(st->u.seq.items[i])) return true;
      return false;
    case TIR_IF: return has_loop(st->u.cond.then_s) || has_loop(st->u.cond.else_s);
    case TIR_ALLOC: return has_loop(st->u.alloc.body);
    default: return false;
  }
}

int64_t kiln_vulkan_trips_of(const tir_stmt_t* st) {
  if (!st) return 0;
  switch (st->kind) {
    case TIR_FOR: {
      const int64_t body = kiln_vulkan_trips_of(st->u.loop.body), e = st->u.loop.extent > 0 ? st->u.loop.extent : 0;
      if (st->u.loop.kind == TIR_LOOP_BOUND) return body;
      /* printed with [[unroll]] (kiln_cf_dialect_glsl.unroll_full_max):
       * the body runs e times, the loop itself is gone */
      if (st->u.loop.kind == TIR_LOOP_UNROLLED && e <= 32) return trips_mul(e, body);
      /* a short innermost loop of constant extent is unrolled by the
       * driver's compiler (NIR unrolls up to 32 trips): no back-edges; a
       * loop around it is not */
      if (e <= 32 && !has_loop(st->u.loop.body)) return 0;
      return trips_mul(e, trips_add(1, body));
    }
    case TIR_SEQ: {
      int64_t t = 0;
      for (int32_t i = 0; i < st->u.seq.n; ++i) t = trips_add(t, kiln_vulkan_trips_of(st->u.seq.items[i]));
      return t;
    }
    case TIR_IF: {
      const int64_t a = kiln_vulkan_trips_of(st->u.cond.then_s), b = kiln_vulkan_trips_of(st->u.cond.else_s);
      return a > b ? a : b;
    }
    case TIR_ALLOC: return kiln_vulkan_trips_of(st->u.alloc.body);
    default: return 0;
  }
}

/* The shared-memory tiled shaders (gemm.comp, conv.comp): K/TK slices,
 * each with the loads of both tiles (shared-memory mode) and TK steps
 * (gemm.comp unrolls them); the subgroup mode's tail of K % TK single
 * steps is within the rounding up. */
int64_t kiln_vulkan_trips_tiled(int64_t K, const kiln_spirv_gemm_tiles_t* t, bool k_unrolled) {
  const int64_t nt = (int64_t)(t->tn / t->rn) * (t->tm / t->rm);
  const int64_t loads = t->shared == 1 && nt > 0 ? ((int64_t)t->tm * t->tk + (int64_t)t->tk * t->tn + nt - 1) / nt : 0;
  return trips_mul((K + t->tk - 1) / t->tk, 1 + loads + (k_unrolled ? 0 : t->tk));
}
