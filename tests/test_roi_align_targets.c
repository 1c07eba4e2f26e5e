/* RoiAlign compiled for a target against the reference kernel, on one
 * target per process:
 *
 *   test_roi_align_targets [--target cpu|opencl|vulkan]   (default cpu)
 *
 * The lowering (lowering/lower_tensor_roi_align.c) has two kernels: up to
 * 4 x 4 samples a bin, one work-item per bin computing its samples' corners
 * and weights once for all channels; beyond, one per output element. Each
 * is checked in avg and max mode, half_pixel and output_half_pixel, with
 * two images and rois that reach outside the image (samples past [-1, size]
 * count 0, past the last pixel clamp), empty and inverted rois, and a
 * spatial scale; outputs within 1e-5 of the reference (the compiled C may
 * contract multiply-adds). */
#include <math.h>

#include "target_graph_util.h"

static float rnd(void) {
  static uint64_t s = 0x2545F4914F6CDD1Dull;
  s = s * 6364136223846793005ull + 1442695040888963407ull;
  return (float)((s >> 40) & 0xFFFFFF) / 16777216.0f; /* [0, 1) */
}

enum { N = 2, C = 5, H = 9, W = 11, R = 7 };

static void check(int64_t sampling, const char* mode, const char* coord, float scale) {
  kiln_graph_t* g = graph_new();
  int64_t xd[4] = {N, C, H, W}, rd[2] = {R, 4}, bd[1] = {R};
  kiln_attr_t attrs[6] = {kiln_attr_make_int("output_height", 3), kiln_attr_make_int("output_width", 4),
                          kiln_attr_make_int("sampling_ratio", sampling), kiln_attr_make_float("spatial_scale", scale),
                          kiln_attr_make_string("mode", mode),
                          kiln_attr_make_string("coordinate_transformation_mode", coord)};
  bool ok = g && input(g, "x", KILN_DTYPE_F32, 4, xd) && input(g, "rois", KILN_DTYPE_F32, 2, rd) &&
            input(g, "bi", KILN_DTYPE_I64, 1, bd) &&
            node1(g, "RoiAlign", "roi_align", 3, (const char*[]){"x", "rois", "bi"}, "y", 6, attrs) &&
            CHECK_OK(kiln_graph_add_output(g, "y")) && CHECK_OK(kiln_graph_prepare(g));
  kiln_array_t in[3] = {arr(KILN_DTYPE_F32, 4, xd), arr(KILN_DTYPE_F32, 2, rd), arr(KILN_DTYPE_I64, 1, bd)};
  if (ok && in[0].data && in[1].data && in[2].data) {
    for (int64_t i = 0; i < N * C * H * W; ++i) ((float*)in[0].data)[i] = 4.0f * rnd() - 2.0f;
    /* x1 y1 x2 y2 in image pixels / scale: inside, reaching past every
     * border, a point, inverted */
    const float box[R][4] = {{1, 1, 6, 5}, {-3, -2, 4, 3}, {5, 4, 14, 12}, {0, 0, 10.5f, 8.5f},
                             {3, 3, 3, 3}, {7, 6, 2, 1}, {-20, -20, -15, -15}};
    for (int r = 0; r < R; ++r) {
      for (int k = 0; k < 4; ++k) ((float*)in[1].data)[r * 4 + k] = box[r][k] / scale;
      ((int64_t*)in[2].data)[r] = r % N;
    }
    for (int fuse = 0; fuse < 2; ++fuse) {
      kiln_module_t* m = compile_fused(g, fuse == 1);
      kiln_session_t* s = session(m);
      kiln_array_t want = {0}, got = {0};
      bool same = s && CHECK_OK(kiln_ref_run(g, in, NULL, &want)) && CHECK_OK(kiln_session_run(s, in, &got)) &&
                  kiln_shape_equal(&want.shape, &got.shape);
      CHECK_MSG(!s || same, "%s: no output or another shape than the reference's", g_target_name);
      if (same) {
        double worst = 0;
        int64_t at = 0, n = kiln_array_numel(&want);
        for (int64_t i = 0; i < n; ++i) {
          double a = ((const float*)got.data)[i], b = ((const float*)want.data)[i];
          double e = fabs(a - b) / (1.0 + fabs(b));
          if (!(e <= worst)) worst = e, at = i;
        }
        CHECK_MSG(worst <= 1e-5, "%s sampling %lld %s %s scale %g -O%d: error %g at %lld", g_target_name,
                  (long long)sampling, mode, coord, scale, fuse, worst, (long long)at);
      }
      kiln_array_free(al(), &want);
      kiln_array_free(al(), &got);
      kiln_session_destroy(s);
      kiln_module_release(m);
    }
  }
  for (int k = 0; k < 3; ++k) kiln_array_free(al(), &in[k]);
  kiln_graph_destroy(g);
}

/* Per bin (the samples' corners computed once for all channels). */
static void test_per_bin(void) {
  check(2, "avg", "half_pixel", 1.0f);
  check(2, "max", "half_pixel", 0.5f);
  check(1, "avg", "output_half_pixel", 1.0f);
  check(4, "avg", "output_half_pixel", 0.25f);
  check(3, "max", "output_half_pixel", 2.0f);
}

/* Per output element (more than 4 x 4 samples a bin). */
static void test_per_element(void) {
  check(5, "avg", "half_pixel", 1.0f);
  check(6, "max", "output_half_pixel", 0.5f);
}

int main(int argc, char** argv) {
  int rc = target_open(argc, argv);
  if (rc) return rc;
  RUN(test_per_bin);
  RUN(test_per_element);
  kiln_device_release(g_device);
  return kiln_test_finish();
}
