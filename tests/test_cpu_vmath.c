/* The CPU target's f32 transcendentals (kernels/cpu/prelude.h: kiln_vexp<W>,
 * kiln_vlog<W>, kiln_vtanh<W>, kiln_verf<W>, kiln_vsigmoid<W>, kiln_vsilu<W>,
 * kiln_vsoftplus<W>
 * and their one-lane scalar forms), compiled the way the target compiles
 * them (the CPU loader, the default compiler and flags: -O3 -march=native)
 * and held to double-precision libm over a dense sweep of the f32 bit
 * patterns (every 1021st pattern, ~4.2M values: both signs, subnormals, infs
 * and NaNs included) and a list of edge values that must be exact. Every
 * vector width the printer may use (4, 8, 16) and the scalar form must give
 * the same value: a kernel's result must not depend on which loop (vector
 * body or scalar tail) computed an element. */
#include <float.h>
#include <stdint.h>
#include <string.h>

#include "runtime/cpu/cpu_loader.h"
#include "testing.h"

extern const char kiln_cf_c_prelude[];

/* One kernel per function and width: y[i] = f(x[i]) over n elements (n a
 * multiple of 16). */
static const char unit[] =
    "#define K(F, W) void k_##F##W(void* const* a) {                             \\\n"
    "  const float* x = a[0]; float* y = a[1]; int64_t n = *(const int64_t*)a[2]; \\\n"
    "  for (int64_t i = 0; i < n; i += W)                                        \\\n"
    "    *(kiln_v##W##f*)&y[i] = kiln_v##F##W(*(const kiln_v##W##f*)&x[i]);      \\\n"
    "}\n"
    "#define S(F) void k_##F##1(void* const* a) {                                 \\\n"
    "  const float* x = a[0]; float* y = a[1]; int64_t n = *(const int64_t*)a[2]; \\\n"
    "  for (int64_t i = 0; i < n; ++i) y[i] = kiln_##F##f(x[i]);                  \\\n"
    "}\n"
    "#define ALL(F) S(F) K(F, 4) K(F, 8) K(F, 16)\n"
    "ALL(exp) ALL(log) ALL(tanh) ALL(erf) ALL(sigmoid) ALL(silu) ALL(softplus)\n";

static const char kEpilogue[] =
    "int kiln_abi_version(void) { return 1; }\nvoid kiln_set_threads(int n) { (void)n; }\n";

enum { NF = 7, NW = 4 };
static const char* const kNames[NF] = {"exp", "log", "tanh", "erf", "sigmoid", "silu", "softplus"};
static const int kWidths[NW] = {1, 4, 8, 16};

static double ref(int f, double x) {
  switch (f) {
    case 0: return exp(x);
    case 1: return log(x);
    case 2: return tanh(x);
    case 3: return erf(x);
    case 4: return 1.0 / (1.0 + exp(-x));
    case 5: return x / (1.0 + exp(-x));
    default: return fmax(x, 0.0) + log1p(exp(-fabs(x)));
  }
}

/* Error of |got| in units in the last place of the f32 nearest |want|,
 * results below 2^-120 counted in the ulps of 2^-120 (exp(-x) and x
 * sigmoid(x) near -104 are subnormals of a few bits, where an ulp says
 * nothing); 0 when both are the same non-finite value, a huge number when
 * only one is. */
static double ulps(float got, double want) {
  if (isnan(want) || isnan(got)) return isnan(want) && isnan(got) ? 0.0 : 1e30;
  float wf = (float)want;
  if (isinf(wf) || isinf(got)) return wf == got ? 0.0 : 1e30;
  int e;
  frexp(fabs(want) > 0x1p-120 ? want : 0x1p-120, &e);
  return fabs((double)got - want) / ldexp(1.0, e - 24);
}

typedef struct sweep_s {
  float* x;
  int64_t n;
  float* y[NF][NW];
} sweep_t;

static bool load(kiln_cpu_module_t* m) {
  size_t lp = strlen(kiln_cf_c_prelude), lu = strlen(unit), le = strlen(kEpilogue);
  char* text = malloc(lp + lu + le + 1);
  if (!text) return false;
  memcpy(text, kiln_cf_c_prelude, lp);
  memcpy(text + lp, unit, lu);
  memcpy(text + lp + lu, kEpilogue, le + 1);
  uint64_t parts[6] = {0, lp, lp, lu, lp + lu, le};
  kiln_program_code_t code = {.text = text, .text_len = lp + lu + le, .n_parts = 3, .parts = parts};
  char names_buf[NF * NW][32];
  const char* names[NF * NW];
  for (int f = 0; f < NF; ++f)
    for (int w = 0; w < NW; ++w) {
      snprintf(names_buf[f * NW + w], sizeof names_buf[0], "k_%s%d", kNames[f], kWidths[w]);
      names[f * NW + w] = names_buf[f * NW + w];
    }
  kiln_cpu_options_t o;
  kiln_cpu_options_default(&o);
  o.cache_dir = ""; /* always the compiler, never a stale object */
  bool ok = CHECK_OK(kiln_cpu_module_load(&code, &o, names, NF * NW, m, NULL));
  free(text);
  return ok;
}

static void run_all(kiln_cpu_module_t* m, sweep_t* s) {
  for (int f = 0; f < NF; ++f)
    for (int w = 0; w < NW; ++w) {
      void* args[3] = {s->x, s->y[f][w], &s->n};
      m->fns[f * NW + w]((void* const*)args);
    }
}

static bool alloc_sweep(sweep_t* s, int64_t n) {
  memset(s, 0, sizeof *s);
  s->n = n;
  s->x = aligned_alloc(64, (size_t)n * sizeof(float));
  bool ok = s->x != NULL;
  for (int f = 0; f < NF; ++f)
    for (int w = 0; w < NW; ++w) ok = ok && (s->y[f][w] = aligned_alloc(64, (size_t)n * sizeof(float)));
  return ok;
}

static void free_sweep(sweep_t* s) {
  free(s->x);
  for (int f = 0; f < NF; ++f)
    for (int w = 0; w < NW; ++w) free(s->y[f][w]);
}

/* Max error per function (ulps; erf: absolute, since erf's zeros and its
 * approximation's are where relative error says nothing) and the widths'
 * agreement, over every 211th f32 bit pattern. */
static void test_sweep(void) {
  kiln_cpu_module_t m;
  if (!load(&m)) return;
  const uint64_t step = 1021, total = 0x100000000ull / step;
  const int64_t chunk = 1 << 18;
  sweep_t s;
  bool ok = alloc_sweep(&s, chunk);
  CHECK(ok);
  if (!ok) {
    free_sweep(&s);
    kiln_cpu_module_unload(&m);
    return;
  }
  /* erf: absolute error (5.5 f32 ulps of 1 near |x| = 3.9, where the
   * rational fit meets 1); the others in ulps */
  const double bound[NF] = {2.0, 2.0, 2.0, 4e-7, 2.5, 3.5, 2.0};
  double worst[NF] = {0};
  float worst_x[NF] = {0};
  int64_t differ[NF] = {0};
  for (uint64_t base = 0; base < total; base += (uint64_t)chunk) {
    for (int64_t i = 0; i < chunk; ++i) {
      uint32_t b = (uint32_t)((base + (uint64_t)i) * step);
      memcpy(&s.x[i], &b, 4);
    }
    run_all(&m, &s);
    for (int f = 0; f < NF; ++f)
      for (int64_t i = 0; i < chunk; ++i) {
        float x = s.x[i], y = s.y[f][0][i];
        double want = ref(f, (double)x);
        double err = f == 3 ? (isnan(want) != isnan(y) ? 1e30 : isnan(want) ? 0.0 : fabs(y - want))
                            : ulps(y, want);
        if (err > worst[f]) worst[f] = err, worst_x[f] = x;
        for (int w = 1; w < NW; ++w) {
          float v = s.y[f][w][i];
          if (memcmp(&v, &y, 4) != 0 && !(isnan(v) && isnan(y))) ++differ[f];
        }
      }
  }
  for (int f = 0; f < NF; ++f) {
    printf("  %-8s max error %.3g %s at x = %.9g; widths differ on %lld values\n", kNames[f],
           worst[f], f == 3 ? "abs" : "ulp", worst_x[f], (long long)differ[f]);
    CHECK_MSG(worst[f] <= bound[f], "%s: max error %g at x = %.9g (bound %g)", kNames[f],
              worst[f], worst_x[f], bound[f]);
    CHECK_MSG(differ[f] == 0, "%s: vector widths and the scalar form differ on %lld values",
              kNames[f], (long long)differ[f]);
  }
  free_sweep(&s);
  kiln_cpu_module_unload(&m);
}

/* Values that must come out exactly (or with the exact class). */
static void test_edges(void) {
  kiln_cpu_module_t m;
  if (!load(&m)) return;
  const float inf = INFINITY, nan = NAN;
  const float xs[16] = {0.0f, -0.0f, 1.0f, -1.0f, inf, -inf, nan, 89.0f, 88.5f, -103.0f,
                        -110.0f, FLT_MIN / 4, 1e-30f, 200.0f, -200.0f, 4.5f};
  sweep_t s;
  bool ok = alloc_sweep(&s, 16);
  CHECK(ok);
  if (!ok) {
    free_sweep(&s);
    kiln_cpu_module_unload(&m);
    return;
  }
  memcpy(s.x, xs, sizeof xs);
  run_all(&m, &s);
  for (int w = 0; w < NW; ++w) {
    float* e = s.y[0][w];
    CHECK(e[0] == 1.0f && e[1] == 1.0f && e[4] == inf && e[5] == 0.0f && isnan(e[6]));
    CHECK(e[7] == inf && isfinite(e[8]) && e[9] > 0.0f && e[9] < FLT_MIN && e[10] == 0.0f);
    CHECK(e[14] == 0.0f && e[13] == inf);
    float* l = s.y[1][w];
    CHECK(l[0] == -inf && l[1] == -inf && l[2] == 0.0f && isnan(l[3]) && l[4] == inf);
    CHECK(isnan(l[5]) && isnan(l[6]));
    CHECK_NEAR(l[11], log((double)FLT_MIN / 4), 1e-5);
    float* t = s.y[2][w];
    CHECK(t[0] == 0.0f && signbit(t[1]) && t[4] == 1.0f && t[5] == -1.0f && isnan(t[6]));
    CHECK(t[13] == 1.0f && t[14] == -1.0f && t[11] == FLT_MIN / 4);
    float* r = s.y[3][w];
    CHECK(r[0] == 0.0f && r[4] == 1.0f && r[5] == -1.0f && isnan(r[6]) && r[15] == 1.0f);
    float* g = s.y[4][w];
    CHECK(g[0] == 0.5f && g[4] == 1.0f && g[5] == 0.0f && isnan(g[6]) && g[13] == 1.0f);
    CHECK(g[14] == 0.0f && g[9] > 0.0f);
    float* u = s.y[5][w];
    /* x * sigmoid(x): -inf * 0 is NaN, as the unfused Mul(x, Sigmoid(x)) gives */
    CHECK(u[0] == 0.0f && u[4] == inf && isnan(u[5]) && isnan(u[6]) && u[13] == 200.0f);
    /* softplus: log 2 at 0, x past 16, exp(-|x|) past -16, 0 and inf at
     * the infinities, NaN kept */
    float* p = s.y[6][w];
    CHECK(p[0] == 0.6931472f && p[1] == 0.6931472f && p[4] == inf && p[5] == 0.0f && isnan(p[6]));
    CHECK(p[13] == 200.0f && p[14] == 0.0f && p[7] == 89.0f && p[11] == 0.6931472f);
    CHECK(p[9] == s.y[0][w][9] && p[10] == s.y[0][w][10] && p[12] == 0.6931472f);
  }
  free_sweep(&s);
  kiln_cpu_module_unload(&m);
}

int main(void) {
  RUN(test_sweep);
  RUN(test_edges);
  return kiln_test_finish();
}
