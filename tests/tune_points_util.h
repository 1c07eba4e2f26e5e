/* Points one knob away from a template kernel's tiles, measured alone as
 * kiln tune measures them: shared by the OpenCL and Vulkan tune tests'
 * closing-build checks (test_opencl_tune.c, test_vulkan_tune.c). Include
 * after testing.h, compiler/tune_micro.h and targets/registry.h. */
#ifndef KILN_TESTS_TUNE_POINTS_UTIL_H_
#define KILN_TESTS_TUNE_POINTS_UTIL_H_

#include <stdio.h>
#include <string.h>

/* The |n|th point (0-based) of |t|'s space one knob away from its tiles,
 * tied as the tuner ties it, that the target accepts on |where|. */
static bool tp_nth_point(const kiln_template_set_t* set, const kiln_template_t* t, const kiln_tune_device_t* where,
                         int32_t n, kiln_template_tiles_t* out) {
  kiln_template_space_t sp;
  if (!set->space(t, &sp)) return false;
  for (int32_t i = 0; i < sp.n_knobs; ++i)
    for (int32_t j = 0; j < sp.knobs[i].n; ++j) {
      kiln_template_tiles_t x = t->tiles;
      x.v[i] = sp.knobs[i].v[j];
      if (set->tiles_tie) set->tiles_tie(t, &x);
      if (memcmp(x.v, t->tiles.v, sizeof x.v) && !set->tiles_check(t, &x, &where->limits) && n-- == 0) {
        *out = x;
        return true;
      }
    }
  return false;
}

/* Each tunable kernel of |pd| below |n_pts| with a space (a conv's GEMM
 * kernel, MERGED into it, has none), while m[] has room (|max_m|), at its
 * |pass|th point measured alone on |dev2| through m[*n_m] (which must
 * match the default's output and share code unless KILN_TUNE_REUSE=off);
 * pts[k] the point, or the kernel's own tiles. Returns the kernels moved. */
static int32_t tp_points_alone(kiln_plan_t* pd, const kiln_target_t* target, const kiln_template_set_t* set,
                               const kiln_tune_device_t* where, kiln_device_t* dev2, int32_t pass,
                               kiln_tune_micro_t* m, int32_t* n_m, int32_t max_m, kiln_template_tiles_t* pts,
                               int32_t n_pts) {
  int32_t changed = 0;
  for (int32_t k = 0; k < pd->n_kernels && k < n_pts; ++k) {
    const kiln_template_t* t = kiln_template_tunable_of(pd, k);
    kiln_template_space_t sp;
    pts[k] = t ? t->tiles : (kiln_template_tiles_t){0};
    if (!t || !set->space(t, &sp) || *n_m == max_m) continue;
    kiln_tune_micro_t* mk = &m[(*n_m)++];
    kiln_template_tiles_t x;
    double tc = 0, td = 0;
    bool match = false;
    if (!CHECK_OK(kiln_tune_micro_init(mk, pd, k, target, set, dev2, 0, 7))) continue;
    CHECK(mk->reuse_code == !pass);
    const bool have = tp_nth_point(set, t, where, pass, &x);
    CHECK_MSG(have, "kernel %d: no point %d", (int)k, (int)pass);
    if (!have || !CHECK_OK(kiln_tune_micro_measure(mk, &x, 1, &tc, &td, &match, stderr))) continue;
    CHECK(match);
    pts[k] = x;
    ++changed;
  }
  return changed;
}

#endif /* KILN_TESTS_TUNE_POINTS_UTIL_H_ */
