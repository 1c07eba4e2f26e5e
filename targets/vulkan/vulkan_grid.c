/* Template grids past the device's work-group counts.
 *
 * A template instance (the shaders of kernels/vulkan/) computes its grid from its
 * shape: a 1x1 conv over 4096x1100 positions in tiles of 64 needs 70,400
 * work-groups in x, a GEMM with 2.1M rows in tiles of 32 as many in y,
 * where a Vulkan device may launch as few as 65,535 a dimension
 * (maxComputeWorkGroupCount; lavapipe's). Such a grid is launched as a
 * smaller physical one holding the same number of work-groups: the
 * logical grid G (x, y and, where the program leaves dimension 2 to the
 * compile, z) is numbered l = gx + Gx * (gy + Gy * gz), the physical grid
 * P runs l = px + Px * (py + Py * pz), and the shaders read their group id
 * through KILN_WG (KILN_GID for the global invocation id), which the
 * lines printed here define as l's logical coordinates; KILN_WG_GUARD
 * returns from the padded groups past G's count (a whole work-group at a
 * time, so barriers and subgroup operations after it stay uniform). The
 * shaders define the three as the built-in ids when nothing folded, so
 * an instance whose grid fits prints the same text as before. */
#include "targets/vulkan/vulkan_internal.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* P for |n| logical work-groups over the dimensions below |dims| (2 or 3)
 * with at most |max| each; false when they do not hold n. Prefers a row
 * count that divides n (no padded groups) near the fewest rows. */
static bool physical(int64_t n, int dims, const int64_t max[3], int64_t p[3]) {
  p[0] = n, p[1] = 1, p[2] = 1;
  if (n <= max[0]) return true;
  if (dims == 3 && (n + max[0] - 1) / max[0] > max[1]) {
    /* x and y full, the rest in z */
    const int64_t plane = max[0] * max[1];
    p[2] = (n + plane - 1) / plane;
    if (p[2] > max[2]) return false;
    n = (n + p[2] - 1) / p[2]; /* per z slice */
  }
  int64_t rows = (n + max[0] - 1) / max[0];
  if (rows > max[1]) return false;
  p[1] = rows;
  p[0] = (n + rows - 1) / rows;
  if (p[2] == 1)
    for (int64_t d = rows; d <= rows + 256 && d <= max[1]; ++d)
      if (n % d == 0 && n / d <= max[0]) {
        p[1] = d;
        p[0] = n / d;
        break;
      }
  return true;
}

kiln_status_t kiln_vulkan_grid_fold(char** glsl, int64_t groups[3], const uint64_t dev_max[3], bool z_free,
                                    const char* name) {
  int64_t max[3];
  for (int j = 0; j < 3; ++j)
    max[j] = dev_max[j] && dev_max[j] < (uint64_t)INT32_MAX ? (int64_t)dev_max[j] : dev_max[j] ? INT32_MAX : 65535;
  int64_t g[3];
  bool over = false;
  for (int j = 0; j < 3; ++j) {
    g[j] = groups[j] > 0 ? groups[j] : 1;
    over = over || g[j] > max[j];
  }
  if (!over) return NULL;
  const int dims = z_free ? 3 : 2;
  /* ids are 32-bit in the shader: l and the physical count stay below 2^32 */
  const int64_t lim = UINT32_MAX;
  const int64_t gz = z_free ? g[2] : 1;
  const bool small = g[0] <= lim && g[1] <= lim / g[0] && gz <= lim / (g[0] * g[1]);
  const int64_t n = small ? g[0] * g[1] * gz : 0;
  int64_t p[3];
  const bool fits = (z_free || g[2] <= max[2]) && small && physical(n, dims, max, p) && p[0] * p[1] * p[2] <= lim;
  if (!fits)
    return kiln_make_status(KILN_UNSUPPORTED,
                            "kernel '%s' launches %lld x %lld x %lld work-groups; the device allows %lld x %lld x %lld "
                            "and they do not fold into %s",
                            name, (long long)g[0], (long long)g[1], (long long)g[2], (long long)max[0],
                            (long long)max[1], (long long)max[2],
                            z_free ? "its three dimensions" : "x and y (a run-time dimension 2)");
  if (!z_free) p[2] = g[2];
  const char* nl = *glsl ? strchr(*glsl, '\n') : NULL;
  if (!nl || strncmp(*glsl, "#version", 8))
    return kiln_make_status(KILN_INTERNAL, "kernel '%s': the shader text has no #version line", name);
  kiln_vulkan_sb_t b = {0};
  kiln_vulkan_sb_printf(&b, "%.*s", (int)(nl + 1 - *glsl), *glsl);
  kiln_vulkan_sb_printf(&b, "// kiln grid %lld x %lld x %lld folded into %lld x %lld x %lld work-groups\n",
                        (long long)g[0], (long long)g[1], (long long)g[2], (long long)p[0], (long long)p[1],
                        (long long)p[2]);
  if (z_free)
    kiln_vulkan_sb_printf(&b,
                          "#define KILN_WGL (gl_WorkGroupID.x + %lluu * (gl_WorkGroupID.y + %lluu * gl_WorkGroupID.z))\n"
                          "#define KILN_WG uvec3(KILN_WGL %% %lluu, KILN_WGL / %lluu %% %lluu, KILN_WGL / %lluu)\n",
                          (unsigned long long)p[0], (unsigned long long)p[1], (unsigned long long)g[0],
                          (unsigned long long)g[0], (unsigned long long)g[1], (unsigned long long)(g[0] * g[1]));
  else
    kiln_vulkan_sb_printf(&b,
                          "#define KILN_WGL (gl_WorkGroupID.x + %lluu * gl_WorkGroupID.y)\n"
                          "#define KILN_WG uvec3(KILN_WGL %% %lluu, KILN_WGL / %lluu, gl_WorkGroupID.z)\n",
                          (unsigned long long)p[0], (unsigned long long)g[0], (unsigned long long)g[0]);
  kiln_vulkan_sb_printf(&b, "#define KILN_GID (KILN_WG * gl_WorkGroupSize + gl_LocalInvocationID)\n");
  if (p[0] * p[1] * (z_free ? p[2] : 1) != n)
    kiln_vulkan_sb_printf(&b, "#define KILN_WG_GUARD if (KILN_WGL >= %lluu) return\n", (unsigned long long)n);
  else
    kiln_vulkan_sb_printf(&b, "#define KILN_WG_GUARD\n");
  kiln_vulkan_sb_printf(&b, "%s", nl + 1);
  if (b.oom) {
    free(b.p);
    return kiln_make_status(KILN_OUT_OF_MEMORY, "kernel '%s': shader text", name);
  }
  free(*glsl);
  *glsl = b.p;
  for (int j = 0; j < 3; ++j) groups[j] = p[j];
  return NULL;
}
