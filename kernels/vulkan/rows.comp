#version 450
#extension GL_KHR_shader_subgroup_basic : enable
#extension GL_KHR_shader_subgroup_arithmetic : enable
// KILN_WG: this work-group's id in the instance's grid; KILN_WG_GUARD;
// starts main(). The built-in ids and nothing unless the host folded a
// grid past the device's work-group counts (targets/vulkan/vulkan_grid.c
// defines them after the #version line).
#ifndef KILN_WG
#define KILN_WG gl_WorkGroupID
#define KILN_GID gl_GlobalInvocationID
#define KILN_WG_GUARD
#endif
// kiln Softmax / LogSoftmax / LayerNorm / reduction rows, f32 or f16 storage (lowering/template.h,
// kiln_template_rows_t): a subgroup per row of N values, the lanes
// striding the row (lane l takes elements l, l + S, ...: neighbouring
// lanes read neighbouring words; S the subgroup's lanes), two passes over
// X:
//
//   each lane's running max m_l and sum s_l of exp(x - m_l) (s_l rescaled
//   by exp(m_l - m_l') when its max grows to m_l'), then the row's
//   m = subgroupMax(m_l), s = subgroupAdd(s_l * exp(m_l - m));
//   y = exp(x - m) * (1 / s)          (LOG: y = (x - m) - log(s))
//
// No shared memory, no barrier; the sums stay f32. A work-group of WG
// invocations takes RB neighbouring rows, its subgroups a row at a time
// (lavapipe's 8-lane subgroups: 4 rows at once; a 32-lane GPU subgroup:
// the 4 in turn). With VEC4 (N a multiple of 4) each lane takes a vec4 a
// step (one rescale a vec4). HX / HY: X / Y hold f16 (fp16 plans), read
// into f32 and rounded once by the store; the sums stay f32.
//
// LN: a LayerNormalization row instead, two passes over X: each lane's
// count, mean and sum of squared deviations (Welford's update, a vec4 at
// a time), merged across the subgroup (mean = subgroupAdd(c_l mu_l) / N,
// var = subgroupAdd(m2_l + c_l (mu_l - mean)^2) / N: no sum of squares,
// which loses a row of mean 1e3 and spread 1), then
//   y = (x - mean) * (1 / sqrt(var + EPS)) * S[i] (+ B[i] with BIAS).
// RED: a reduction of each row to one value y[row], one pass over X: each
// lane's vec4 (or float) of partial results, its components merged, then
// the lanes' through subgroupAdd / subgroupMax / subgroupMin, written by
// lane 0. RED 1 sum, 2 mean (the sum / N), 3 max, 4 min, 5 sum of
// squares, 6 L2 (sqrt of 5), 7 L1 (sum of |x|), 8 log of the sum, 9
// LogSumExp's second kernel: the sum of exp(x - M), M the row's max that
// a RED 3 instance wrote (BIND_S; 0 where infinite, as the lowering:
// no inf - inf), y = log(s) + M. Sums f32 (with VEC4 4 S partial sums a
// row, S the subgroup's lanes). Max / Min propagate NaN as the reference
// does (a NaN anywhere in the row: NaN); subgroupMax / subgroupMin only
// ever see the lanes' non-NaN values.
// TEXEL (RED with VEC4): X read as rgba32f texels (a sampled texel buffer).
// The host puts after the #extension lines: BIND_X BIND_Y (kernel
// parameter order), ROWS, N (row length), WG, RB, VEC4, LOG, HX, HY, LN,
// RED, TEXEL and with LN: BIND_S, BIAS, BIND_B, EPS; with RED 9: BIND_S.
// Dispatch: (ceil(ROWS / RB), 1, 1) work-groups of WG.

#if HX || HY
#extension GL_EXT_shader_16bit_storage : require
#endif

layout(local_size_x = WG, local_size_y = 1, local_size_z = 1) in;

#if VEC4
#define NE (N / 4)
#define T vec4
#define TH f16vec4
#else
#define NE N
#define T float
#define TH float16_t
#endif
#if TEXEL
layout(set = 0, binding = BIND_X) uniform samplerBuffer tx;
#elif HX
layout(std430, set = 0, binding = BIND_X) restrict readonly buffer BufX { TH x[]; };
#else
layout(std430, set = 0, binding = BIND_X) restrict readonly buffer BufX { T x[]; };
#endif
#if RED
layout(std430, set = 0, binding = BIND_Y) restrict writeonly buffer BufY { float y[]; };
#if RED == 9
layout(std430, set = 0, binding = BIND_S) restrict readonly buffer BufS { float rmax[]; };
#endif
#elif HY
layout(std430, set = 0, binding = BIND_Y) restrict writeonly buffer BufY { TH y[]; };
#define Y(v) TH(v)
#else
layout(std430, set = 0, binding = BIND_Y) restrict writeonly buffer BufY { T y[]; };
#define Y(v) (v)
#endif
#if TEXEL
#define X(i) texelFetch(tx, i)
#else
#define X(i) T(x[i])
#endif
#if LN
layout(std430, set = 0, binding = BIND_S) restrict readonly buffer BufS { T sc[]; };
#if BIAS
layout(std430, set = 0, binding = BIND_B) restrict readonly buffer BufB { T bi[]; };
#endif
#endif
#if VEC4
#define HSUM(v) (((v).x + (v).y) + ((v).z + (v).w))
#else
#define HSUM(v) (v)
#endif
#if RED == 3 || RED == 4
// a fold that keeps a NaN of either side (the reference's)
#if RED == 3
#define CMP(a, v) greaterThan(v, a)
#define INIT (-1.0 / 0.0)
#define MERGE(v) subgroupMax(v)
float fold(float a, float v) { return (v > a || isnan(v)) ? v : a; }
#else
#define CMP(a, v) lessThan(v, a)
#define INIT (1.0 / 0.0)
#define MERGE(v) subgroupMin(v)
float fold(float a, float v) { return (v < a || isnan(v)) ? v : a; }
#endif
vec4 fold(vec4 a, vec4 v) { return mix(a, v, bvec4(uvec4(CMP(a, v)) | uvec4(isnan(v)))); }
#elif RED == 5 || RED == 6
#define MAP(v) ((v) * (v))
#elif RED == 7
#define MAP(v) abs(v)
#elif RED == 9
#define MAP(v) exp((v) - sh)
#else
#define MAP(v) (v)
#endif

void main() {
  KILN_WG_GUARD;
  // a subgroup wider than the work-group holds WG lanes
  const int S = int(min(gl_SubgroupSize, uint(WG))), l = int(gl_SubgroupInvocationID);
  for (int q = int(gl_SubgroupID); q < RB; q += int(gl_NumSubgroups)) {
    const int row = int(KILN_WG.x) * RB + q;
    if (row >= ROWS) break; // uniform in the subgroup
    const int base = row * NE;
#if RED == 3 || RED == 4
    T a = T(INIT);
    for (int i = l; i < NE; i += S) a = fold(a, X(base + i));
#if VEC4
    const float m = fold(fold(a.x, a.y), fold(a.z, a.w));
#else
    const float m = a;
#endif
    const bool nan = subgroupMax(isnan(m) ? 1u : 0u) != 0u;
    const float v = MERGE(isnan(m) ? INIT : m);
    if (l == 0) y[row] = nan ? uintBitsToFloat(0x7fc00000u) : v;
#elif RED
#if RED == 9
    const float sh = isinf(rmax[row]) ? 0.0 : rmax[row];
#endif
    T a = T(0.0);
    for (int i = l; i < NE; i += S) a += MAP(X(base + i));
    const float s = subgroupAdd(HSUM(a));
#if RED == 2
    if (l == 0) y[row] = s / float(N);
#elif RED == 6
    if (l == 0) y[row] = sqrt(s);
#elif RED == 8
    if (l == 0) y[row] = log(s);
#elif RED == 9
    if (l == 0) y[row] = log(s) + sh;
#else
    if (l == 0) y[row] = s;
#endif
#elif LN
    // each lane's count, mean and sum of squared deviations (Welford, a
    // vec4 a step: its own mean and deviations merged in), then the lanes'
    // merged (Chan et al.): var = sum(m2_l + c_l (mu_l - mean)^2) / N
    float c = 0.0, mu = 0.0, m2 = 0.0;
    for (int i = l; i < NE; i += S) {
      const T v = X(base + i);
#if VEC4
      const float bm = HSUM(v) * 0.25;
      const vec4 dv = v - bm;
      const float nb = 4.0, bm2 = HSUM(dv * dv);
#else
      const float bm = v, nb = 1.0, bm2 = 0.0;
#endif
      const float nc = c + nb, dl = bm - mu;
      mu += dl * (nb / nc);
      m2 += bm2 + dl * dl * (c * nb / nc);
      c = nc;
    }
    const float mean = subgroupAdd(c * mu) / float(N), dmu = mu - mean;
    const float r = 1.0 / sqrt(subgroupAdd(m2 + c * dmu * dmu) / float(N) + EPS);
#if BIAS
    for (int i = l; i < NE; i += S) y[base + i] = Y((X(base + i) - mean) * r * sc[i] + bi[i]);
#else
    for (int i = l; i < NE; i += S) y[base + i] = Y((X(base + i) - mean) * r * sc[i]);
#endif
#else
    float m = -1.0 / 0.0, s = 0.0;
    for (int i = l; i < NE; i += S) {
      const T v = X(base + i);
#if VEC4
      const float mn = max(m, max(max(v.x, v.y), max(v.z, v.w)));
      const vec4 e = exp(v - mn);
      s = s * exp(m - mn) + ((e.x + e.y) + (e.z + e.w));
#else
      const float mn = max(m, v);
      s = s * exp(m - mn) + exp(v - mn);
#endif
      m = mn;
    }
    const float rm = subgroupMax(m);
    // a lane with no element (a row shorter than the subgroup) adds 0
    s = subgroupAdd(s > 0.0 ? s * exp(m - rm) : 0.0);
    m = rm;
#if LOG
    const float ls = log(s); // (x - m) first: m + log(s) would round away x's digits
    for (int i = l; i < NE; i += S) y[base + i] = Y((X(base + i) - m) - ls);
#else
    const float r = 1.0 / s;
    for (int i = l; i < NE; i += S) y[base + i] = Y(exp(X(base + i) - m) * r);
#endif
#endif
  }
}
