/* The dialect tables of the C-family printer (see printer.h): C, OpenCL C
 * and GLSL. Everything a language needs beyond the shared printer is here:
 * its prelude (helper functions the printed code calls), type names,
 * qualifiers, ids, math spellings, pragmas and vector templates. Each table
 * is the C-family defaults (CF_DEFAULTS) plus the fields its language
 * spells differently. */
#include "targets/cfamily/printer.h"

static const char c_prelude[] =
    "#include <stdint.h>\n"
    "#include <string.h>\n"
    "#include <math.h>\n"
    "#ifdef _OPENMP\n"
    "#include <omp.h>\n"
    "#endif\n"
    "#pragma GCC diagnostic ignored \"-Wpsabi\"\n"
    "#define KILN_INLINE static inline __attribute__((always_inline, unused))\n"
    "\n"
    "/* f16 storage: _Float16 where the compiler has it (plain conversions, so\n"
    "   loops vectorize to vcvtph2ps/vcvtps2ph), else uint16_t bits with the\n"
    "   bit-exact software conversion kiln uses. Same 2-byte IEEE layout. */\n"
    "#if defined(__FLT16_MANT_DIG__) && !defined(KILN_SOFT_F16)\n"
    "typedef _Float16 kiln_f16;\n"
    "KILN_INLINE float kiln_h2f(kiln_f16 h) { return (float)h; }\n"
    "KILN_INLINE kiln_f16 kiln_f2h(float x) { return (kiln_f16)x; }\n"
    "#else\n"
    "typedef uint16_t kiln_f16;\n"
    "KILN_INLINE float kiln_h2f(uint16_t h) {\n"
    "  uint32_t sign = (uint32_t)(h & 0x8000u) << 16, e = (h >> 10) & 0x1fu, m = h & 0x3ffu, b;\n"
    "  if (e == 0) {\n"
    "    if (m == 0) b = sign;\n"
    "    else { int k = -1; do { ++k; m <<= 1; } while (!(m & 0x400u));\n"
    "           b = sign | ((uint32_t)(127 - 15 - k) << 23) | ((m & 0x3ffu) << 13); }\n"
    "  } else if (e == 31) b = sign | 0x7f800000u | (m << 13);\n"
    "  else b = sign | ((e + 127 - 15) << 23) | (m << 13);\n"
    "  float f; memcpy(&f, &b, 4); return f;\n"
    "}\n"
    "KILN_INLINE uint16_t kiln_f2h(float f) {\n"
    "  uint32_t x; memcpy(&x, &f, 4);\n"
    "  uint32_t sign = (x >> 16) & 0x8000u, e8 = (x >> 23) & 0xffu, m = x & 0x7fffffu;\n"
    "  if (e8 == 0xff) return (uint16_t)(sign | 0x7c00u | (m ? 0x200u | (m >> 13) : 0));\n"
    "  int32_t e = (int32_t)e8 - 127 + 15;\n"
    "  if (e >= 31) return (uint16_t)(sign | 0x7c00u);\n"
    "  if (e <= 0) {\n"
    "    if (e < -10) return (uint16_t)sign;\n"
    "    m |= 0x800000u;\n"
    "    uint32_t sh = (uint32_t)(14 - e), hv = m >> sh, rem = m & ((1u << sh) - 1), mid = 1u << (sh - 1);\n"
    "    if (rem > mid || (rem == mid && (hv & 1))) ++hv;\n"
    "    return (uint16_t)(sign | hv);\n"
    "  }\n"
    "  uint32_t hv = ((uint32_t)e << 10) | (m >> 13), rem = m & 0x1fffu;\n"
    "  if (rem > 0x1000u || (rem == 0x1000u && (hv & 1))) ++hv;\n"
    "  return (uint16_t)(sign | hv);\n"
    "}\n"
    "#endif\n"
    "KILN_INLINE float kiln_hround(float x) { return kiln_h2f(kiln_f2h(x)); }\n"
    "\n"
    "/* NaN-propagating min/max (numpy semantics, like the reference). */\n"
    "KILN_INLINE float kiln_fminf(float a, float b) { return (a < b || a != a) ? a : b; }\n"
    "KILN_INLINE float kiln_fmaxf(float a, float b) { return (a > b || a != a) ? a : b; }\n"
    "KILN_INLINE int64_t kiln_imin(int64_t a, int64_t b) { return a < b ? a : b; }\n"
    "KILN_INLINE int64_t kiln_imax(int64_t a, int64_t b) { return a > b ? a : b; }\n"
    "/* floor division / modulo for any signs; a zero divisor gives 0. */\n"
    "KILN_INLINE int64_t kiln_floordiv(int64_t a, int64_t b) {\n"
    "  if (b == 0) return 0;\n"
    "  if (b == -1) return (int64_t)(0 - (uint64_t)a);\n"
    "  int64_t q = a / b;\n"
    "  return (q * b != a && ((a < 0) != (b < 0))) ? q - 1 : q;\n"
    "}\n"
    "KILN_INLINE int64_t kiln_floormod(int64_t a, int64_t b) {\n"
    "  if (b == 0 || b == -1) return 0;\n"
    "  int64_t r = a % b;\n"
    "  return (r != 0 && ((r < 0) != (b < 0))) ? r + b : r;\n"
    "}\n"
    "KILN_INLINE float kiln_ffloordiv(float a, float b) { return floorf(a / b); }\n"
    "KILN_INLINE float kiln_ffloormod(float a, float b) {\n"
    "  float r = fmodf(a, b);\n"
    "  return (r != 0.0f && ((r < 0.0f) != (b < 0.0f))) ? r + b : r;\n"
    "}\n"
    "/* C division; x / 0 = 0 and x / -1 wraps, like the reference. */\n"
    "KILN_INLINE int32_t kiln_idiv32(int32_t a, int32_t b) {\n"
    "  return b == 0 ? 0 : b == -1 ? (int32_t)(0u - (uint32_t)a) : a / b;\n"
    "}\n"
    "KILN_INLINE int64_t kiln_idiv64(int64_t a, int64_t b) {\n"
    "  return b == 0 ? 0 : b == -1 ? (int64_t)(0 - (uint64_t)a) : a / b;\n"
    "}\n"
    "KILN_INLINE int64_t kiln_iabs(int64_t a) { return a < 0 ? (int64_t)(0 - (uint64_t)a) : a; }\n"
    "/* float -> int64: truncate toward zero, saturate, NaN -> 0. */\n"
    "KILN_INLINE int64_t kiln_f2i(float x) {\n"
    "  return x != x ? 0 : x >= 9223372036854775808.0f ? INT64_MAX\n"
    "       : x <= -9223372036854775808.0f ? INT64_MIN : (int64_t)x;\n"
    "}\n"
    "KILN_INLINE float kiln_sigmoidf(float v) {\n"
    "  if (v >= 0.0f) return 1.0f / (1.0f + expf(-v));\n"
    "  float e = expf(v);\n"
    "  return e / (1.0f + e);\n"
    "}\n"
    "\n"
    "/* GCC vector extensions for VECTORIZED loops; unaligned loads/stores. */\n"
    "#define KILN_VDEF(W, BYTES)                                                      \\\n"
    "  typedef float kiln_v##W##f __attribute__((vector_size(BYTES), aligned(4)));  \\\n"
    "  typedef int32_t kiln_v##W##i __attribute__((vector_size(BYTES)));            \\\n"
    "  KILN_INLINE kiln_v##W##i kiln_vmask##W(int c) { return (kiln_v##W##i){0} - (c != 0); } \\\n"
    "  KILN_INLINE kiln_v##W##f kiln_vsel##W(kiln_v##W##i m, kiln_v##W##f a, kiln_v##W##f b) { \\\n"
    "    return (kiln_v##W##f)((m & (kiln_v##W##i)a) | (~m & (kiln_v##W##i)b));     \\\n"
    "  }                                                                             \\\n"
    "  KILN_INLINE kiln_v##W##f kiln_vmax##W(kiln_v##W##f a, kiln_v##W##f b) {      \\\n"
    "    return kiln_vsel##W((a > b) | (a != a), a, b);                              \\\n"
    "  }                                                                             \\\n"
    "  KILN_INLINE kiln_v##W##f kiln_vmin##W(kiln_v##W##f a, kiln_v##W##f b) {      \\\n"
    "    return kiln_vsel##W((a < b) | (a != a), a, b);                              \\\n"
    "  }                                                                             \\\n"
    "  KILN_INLINE kiln_v##W##f kiln_vabs##W(kiln_v##W##f a) {                      \\\n"
    "    return (kiln_v##W##f)((kiln_v##W##i)a & 0x7fffffff);                        \\\n"
    "  }\n"
    "KILN_VDEF(4, 16)\n"
    "KILN_VDEF(8, 32)\n"
    "KILN_VDEF(16, 64)\n"
    "/* f16 <-> f32 vectors: one vcvtph2ps / vcvtps2ph with F16C (_Float16),\n"
    "   lane by lane with the software conversion otherwise. */\n"
    "#if defined(__FLT16_MANT_DIG__) && !defined(KILN_SOFT_F16)\n"
    "#define KILN_VHDEF(W, BYTES)                                                      \\\n"
    "  typedef kiln_f16 kiln_v##W##h __attribute__((vector_size(BYTES), aligned(2))); \\\n"
    "  KILN_INLINE kiln_v##W##f kiln_vh2f##W(const kiln_f16* p) {                    \\\n"
    "    return __builtin_convertvector(*(const kiln_v##W##h*)p, kiln_v##W##f);      \\\n"
    "  }                                                                             \\\n"
    "  KILN_INLINE void kiln_vf2h##W(kiln_f16* p, kiln_v##W##f v) {                 \\\n"
    "    *(kiln_v##W##h*)p = __builtin_convertvector(v, kiln_v##W##h);              \\\n"
    "  }                                                                             \\\n"
    "  KILN_INLINE kiln_v##W##f kiln_vsplath##W(const kiln_f16* p) {                 \\\n"
    "    kiln_v##W##h h; /* a broadcast (vpbroadcastw), no f16 arithmetic */        \\\n"
    "    for (int l = 0; l < W; ++l) h[l] = *p;                                      \\\n"
    "    return __builtin_convertvector(h, kiln_v##W##f);                            \\\n"
    "  }\n"
    "#else\n"
    "#define KILN_VHDEF(W, BYTES)                                                      \\\n"
    "  KILN_INLINE kiln_v##W##f kiln_vh2f##W(const kiln_f16* p) {                    \\\n"
    "    kiln_v##W##f r;                                                             \\\n"
    "    for (int l = 0; l < W; ++l) r[l] = kiln_h2f(p[l]);                          \\\n"
    "    return r;                                                                   \\\n"
    "  }                                                                             \\\n"
    "  KILN_INLINE void kiln_vf2h##W(kiln_f16* p, kiln_v##W##f v) {                 \\\n"
    "    for (int l = 0; l < W; ++l) p[l] = kiln_f2h(v[l]);                          \\\n"
    "  }                                                                             \\\n"
    "  KILN_INLINE kiln_v##W##f kiln_vsplath##W(const kiln_f16* p) {                 \\\n"
    "    return kiln_vsplat##W(kiln_h2f(*p));                                        \\\n"
    "  }\n"
    "#endif\n"
    "/* Broadcasts spelled lane by lane: (v){0} + x would cost an add and turn\n"
    "   -0.0 into +0.0. */\n"
    "KILN_INLINE kiln_v4f kiln_vsplat4(float x) { return (kiln_v4f){x, x, x, x}; }\n"
    "KILN_INLINE kiln_v8f kiln_vsplat8(float x) { return (kiln_v8f){x, x, x, x, x, x, x, x}; }\n"
    "KILN_INLINE kiln_v16f kiln_vsplat16(float x) {\n"
    "  return (kiln_v16f){x, x, x, x, x, x, x, x, x, x, x, x, x, x, x, x};\n"
    "}\n"
    "KILN_VHDEF(4, 8)\n"
    "KILN_VHDEF(8, 16)\n"
    "KILN_VHDEF(16, 32)\n";

static const char c_epilogue[] =
    "/* Exported: the host sets the OpenMP thread count before each run. */\n"
    "void kiln_set_threads(int n) {\n"
    "#ifdef _OPENMP\n"
    "  if (n > 0) omp_set_num_threads(n);\n"
    "#else\n"
    "  (void)n;\n"
    "#endif\n"
    "}\n"
    "int kiln_abi_version(void) { return 1; }\n";

#define OPENCL_PRELUDE \
    "#define KILN_INLINE static inline\n" \
    "KILN_INLINE float kiln_fminf(float a, float b) { return (a < b || isnan(a)) ? a : b; }\n" \
    "KILN_INLINE float kiln_fmaxf(float a, float b) { return (a > b || isnan(a)) ? a : b; }\n" \
    "KILN_INLINE float kiln_hround(float x) {\n" \
    "  ushort h; vstore_half_rte(x, 0, (__private half*)&h); return vload_half(0, (__private half*)&h);\n" \
    "}\n" \
    "KILN_INLINE int kiln_floordiv(int a, int b) {\n" \
    "  if (b == 0) return 0;\n" \
    "  int q = a / b;\n" \
    "  return (q * b != a && ((a < 0) != (b < 0))) ? q - 1 : q;\n" \
    "}\n" \
    "KILN_INLINE int kiln_floormod(int a, int b) {\n" \
    "  if (b == 0) return 0;\n" \
    "  int r = a % b;\n" \
    "  return (r != 0 && ((r < 0) != (b < 0))) ? r + b : r;\n" \
    "}\n" \
    "KILN_INLINE float kiln_ffloordiv(float a, float b) { return floor(a / b); }\n" \
    "KILN_INLINE float kiln_ffloormod(float a, float b) {\n" \
    "  float r = fmod(a, b);\n" \
    "  return (r != 0.0f && ((r < 0.0f) != (b < 0.0f))) ? r + b : r;\n" \
    "}\n" \
    "KILN_INLINE int kiln_idiv32(int a, int b) {\n" \
    "  return b == 0 ? 0 : b == -1 ? (int)(0u - (uint)a) : a / b;\n" \
    "}\n" \
    "KILN_INLINE long kiln_idiv64(long a, long b) {\n" \
    "  return b == 0 ? 0 : b == -1 ? (long)(0ul - (ulong)a) : a / b;\n" \
    "}\n" \
    "KILN_INLINE long kiln_iabs(long a) { return a < 0 ? (long)(0ul - (ulong)a) : a; }\n" \
    "/* Integer min/max over operands of any int width: the builtin min/max\n" \
    "   are ambiguous for (int, long). */\n" \
    "KILN_INLINE long kiln_imin(long a, long b) { return a < b ? a : b; }\n" \
    "KILN_INLINE long kiln_imax(long a, long b) { return a > b ? a : b; }\n" \
    "KILN_INLINE float kiln_sigmoidf(float v) {\n" \
    "  if (v >= 0.0f) return 1.0f / (1.0f + exp(-v));\n" \
    "  float e = exp(v);\n" \
    "  return e / (1.0f + e);\n" \
    "}\n" \
    "#define KILN_VMAX(a, b) select((b), (a), ((a) > (b)) | isnan(a))\n" \
    "#define KILN_VMIN(a, b) select((b), (a), ((a) < (b)) | isnan(a))\n"

static const char opencl_prelude[] = OPENCL_PRELUDE;
static const char opencl_half_prelude[] = "#pragma OPENCL EXTENSION cl_khr_fp16 : enable\n" OPENCL_PRELUDE;

static const char glsl_prelude[] =
    "float kiln_fminf(float a, float b) { return (a < b || isnan(a)) ? a : b; }\n"
    "float kiln_fmaxf(float a, float b) { return (a > b || isnan(a)) ? a : b; }\n"
    "float kiln_hround(float x) { return unpackHalf2x16(packHalf2x16(vec2(x, 0.0))).x; }\n"
    "int kiln_floordiv(int a, int b) {\n"
    "  if (b == 0) return 0;\n"
    "  int q = a / b;\n"
    "  return (q * b != a && ((a < 0) != (b < 0))) ? q - 1 : q;\n"
    "}\n"
    "int kiln_floormod(int a, int b) {\n"
    "  if (b == 0) return 0;\n"
    "  int r = a - (a / b) * b;\n"
    "  return (r != 0 && ((r < 0) != (b < 0))) ? r + b : r;\n"
    "}\n"
    "float kiln_ffloordiv(float a, float b) { return floor(a / b); }\n"
    "float kiln_ffloormod(float a, float b) { return a - floor(a / b) * b; }\n"
    "int kiln_idiv32(int a, int b) { return b == 0 ? 0 : b == -1 ? -a : a / b; }\n"
    "int64_t kiln_idiv64(int64_t a, int64_t b) { return b == 0 ? 0l : b == -1 ? -a : a / b; }\n"
    "int64_t kiln_iabs(int64_t a) { return a < 0 ? -a : a; }\n"
    "int64_t kiln_f2i(float x) {\n"
    "  return isnan(x) ? 0l : x >= 9223372036854775808.0 ? 9223372036854775807l\n"
    "       : x <= -9223372036854775808.0 ? (-9223372036854775807l - 1l) : int64_t(x);\n"
    "}\n"
    "float kiln_sigmoidf(float v) {\n"
    "  if (v >= 0.0) return 1.0 / (1.0 + exp(-v));\n"
    "  float e = exp(v);\n"
    "  return e / (1.0 + e);\n"
    "}\n"
    "/* erf: Abramowitz-Stegun 7.1.26 (|error| < 1.5e-7) */\n"
    "float kiln_erf(float x) {\n"
    "  float t = 1.0 / (1.0 + 0.3275911 * abs(x));\n"
    "  float y = 1.0 - (((((1.061405429 * t - 1.453152027) * t) + 1.421413741) * t - "
    "0.284496736) * t + 0.254829592) * t * exp(-x * x);\n"
    "  return x < 0.0 ? -y : y;\n"
    "}\n";

/* The C-family defaults every table starts from, so a dialect lists only
 * what it spells differently: qualifiers, the kiln_ helper calls (each
 * prelude defines them under the same names), and the overloaded math
 * builtins OpenCL C and GLSL share. A later designated initializer
 * overrides an earlier one for the same member (C11 6.7.9p19); -Wextra's
 * -Woverride-init warns about exactly that, which is intended here. */
#define CF_DEFAULTS                                                                             \
  .buffer_qualifier = "", .readonly_qualifier = "const ", .restrict_qualifier = "restrict ",    \
  .local_qualifier = "", .local_decl = KILN_CF_LOCAL_INLINE, .private_qualifier = "",           \
  .index_type = "int", .float_suffix = "f", .inf_literal = "INFINITY", .nan_literal = "NAN",    \
  .half_round = "kiln_hround($1)", .half_copy_direct = true,                                    \
  .math = {[TIR_EXP] = "exp($1)", [TIR_LOG] = "log($1)", [TIR_SQRT] = "sqrt($1)",               \
           [TIR_RSQRT] = "rsqrt($1)", [TIR_TANH] = "tanh($1)", [TIR_ERF] = "erf($1)",           \
           [TIR_FABS] = "fabs($1)", [TIR_FLOOR] = "floor($1)", [TIR_CEIL] = "ceil($1)",         \
           [TIR_ROUND_EVEN] = "rint($1)", [TIR_POW] = "pow($1, $2)",                            \
           [TIR_SIGMOID] = "kiln_sigmoidf($1)"},                                                \
  .fmin_f = "kiln_fminf($1, $2)", .fmax_f = "kiln_fmaxf($1, $2)",                               \
  .ffloordiv = "kiln_ffloordiv($1, $2)", .ffloormod = "kiln_ffloormod($1, $2)",                 \
  .imin = "kiln_imin($1, $2)", .imax = "kiln_imax($1, $2)",                                     \
  .floordiv = "kiln_floordiv($1, $2)", .floormod = "kiln_floormod($1, $2)",                     \
  .idiv32 = "kiln_idiv32($1, $2)", .idiv64 = "kiln_idiv64($1, $2)", .iabs = "kiln_iabs($1)",    \
  .f2i64 = "kiln_f2i($1)"

#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Woverride-init"

const kiln_cf_dialect_t kiln_cf_dialect_c = {
    CF_DEFAULTS,
    .name = "c", .lang = KILN_CF_LANG_C,
    .prelude = c_prelude,
    .epilogue = c_epilogue,
    .params = KILN_CF_PARAMS_ARGV,
    .kernel_prefix = "void ",
    .align_attr = " __attribute__((aligned(64)))",
    .index_type = "int64_t",
    .types = {[KILN_DTYPE_F32] = "float", [KILN_DTYPE_F16] = "kiln_f16",
              [KILN_DTYPE_I8] = "int8_t", [KILN_DTYPE_U8] = "uint8_t",
              [KILN_DTYPE_I32] = "int32_t", [KILN_DTYPE_I64] = "int64_t",
              [KILN_DTYPE_BOOL] = "uint8_t"},
    .value_types = {[KILN_DTYPE_F32] = "float", [KILN_DTYPE_F16] = "float",
                    [KILN_DTYPE_I8] = "int8_t", [KILN_DTYPE_U8] = "uint8_t",
                    [KILN_DTYPE_I32] = "int32_t", [KILN_DTYPE_I64] = "int64_t",
                    [KILN_DTYPE_BOOL] = "int"},
    .unsigned_types = {[KILN_DTYPE_I32] = "uint32_t", [KILN_DTYPE_I64] = "uint64_t"},
    .int64_suffix = "LL",
    .half_load = "kiln_h2f($B[$I])",
    .half_store = "$B[$I] = kiln_f2h($V)",
    /* libm's float functions */
    .math = {[TIR_EXP] = "expf($1)", [TIR_LOG] = "logf($1)", [TIR_SQRT] = "sqrtf($1)",
             [TIR_RSQRT] = "(1.0f / sqrtf($1))", [TIR_TANH] = "tanhf($1)",
             [TIR_ERF] = "erff($1)", [TIR_FABS] = "fabsf($1)", [TIR_FLOOR] = "floorf($1)",
             [TIR_CEIL] = "ceilf($1)", [TIR_ROUND_EVEN] = "nearbyintf($1)",
             [TIR_POW] = "powf($1, $2)", [TIR_SIGMOID] = "kiln_sigmoidf($1)"},
    /* OpenMP threads and SIMD; GCC's unroller */
    .parallel_pragma = "#pragma omp parallel for schedule(static)",
    .collapse_clause = "collapse($N)",
    .simd_pragma = "#pragma omp simd",
    .unroll_pragma = "#pragma GCC unroll $N",
    /* GCC vector extensions: the prelude's kiln_v<W>f types and helpers */
    .vector_widths = 4 | 8 | 16,
    .vec_type = "kiln_v$Wf",
    .vload = "(*(const kiln_v$Wf*)&$B[$I])", .vstore = "*(kiln_v$Wf*)&$B[$I] = $V",
    .vload_half = "kiln_vh2f$W(&$B[$I])", .vstore_half = "kiln_vf2h$W(&$B[$I], $V)",
    .vsplat_half = "kiln_vsplath$W(&$B[$I])",
    .vsplat = "kiln_vsplat$W($1)",
    .vsel = "kiln_vsel$W($1, $2, $3)",
    .vmask = "kiln_vmask$W($1)",
    .vmin = "kiln_vmin$W($1, $2)", .vmax = "kiln_vmax$W($1, $2)",
    .vabs = "kiln_vabs$W($1)",
};

const kiln_cf_dialect_t kiln_cf_dialect_opencl = {
    CF_DEFAULTS,
    .name = "opencl", .lang = KILN_CF_LANG_OPENCL,
    .prelude = opencl_prelude,
    .params = KILN_CF_PARAMS_LIST,
    .kernel_prefix = "__kernel ",
    .buffer_qualifier = "__global ",
    .workgroup_size_attr = "__attribute__((reqd_work_group_size($1, $2, $3)))",
    .local_qualifier = "__local ",
    .local_decl = KILN_CF_LOCAL_KERNEL_TOP,
    .barrier = "barrier(CLK_LOCAL_MEM_FENCE);",
    .ids = {NULL, "(int)get_group_id(0)", "(int)get_group_id(1)", "(int)get_group_id(2)",
            "(int)get_local_id(0)", "(int)get_local_id(1)", "(int)get_local_id(2)"},
    .types = {[KILN_DTYPE_F32] = "float", [KILN_DTYPE_F16] = "half",
              [KILN_DTYPE_I8] = "char", [KILN_DTYPE_U8] = "uchar",
              [KILN_DTYPE_I32] = "int", [KILN_DTYPE_I64] = "long",
              [KILN_DTYPE_BOOL] = "uchar"},
    .value_types = {[KILN_DTYPE_F32] = "float", [KILN_DTYPE_F16] = "float",
                    [KILN_DTYPE_I8] = "char", [KILN_DTYPE_U8] = "uchar",
                    [KILN_DTYPE_I32] = "int", [KILN_DTYPE_I64] = "long",
                    [KILN_DTYPE_BOOL] = "int"},
    .unsigned_types = {[KILN_DTYPE_I32] = "uint", [KILN_DTYPE_I64] = "ulong"},
    .int64_suffix = "L",
    .half_load = "vload_half($I, $B)",
    .half_store = "vstore_half_rte($V, $I, $B)",
    /* without cl_khr_fp16 a half may not be dereferenced, only converted by
     * vload_half / vstore_half_rte */
    .half_copy_direct = false,
    .f2i64 = "convert_long_sat_rtz($1)",
    .unroll_pragma = "#pragma unroll $N",
    /* floatN with the built-ins; select() takes the mask last, and a true
     * lane mask is -1 (the most significant bit set) */
    .vector_widths = 4 | 8 | 16,
    .vec_type = "float$W",
    .vload = "vload$W(0, $B + $I)", .vstore = "vstore$W($V, 0, $B + $I)",
    .vsplat = "(float$W)($1)",
    .vsel = "select($3, $2, $1)",
    .vmask = "(int$W)(-($1))",
    .vmin = "KILN_VMIN($1, $2)", .vmax = "KILN_VMAX($1, $2)",
    .vabs = "fabs($1)",
};

const kiln_cf_dialect_t kiln_cf_dialect_glsl = {
    CF_DEFAULTS,
    .name = "glsl", .lang = KILN_CF_LANG_GLSL,
    .prelude = glsl_prelude,
    .params = KILN_CF_PARAMS_BINDINGS,
    .kernel_prefix = "void main",
    .readonly_qualifier = "readonly ",
    .local_qualifier = "shared ",
    .local_decl = KILN_CF_LOCAL_GLOBAL,
    .barrier = "memoryBarrierShared(); barrier();",
    .ids = {NULL, "int(gl_WorkGroupID.x)", "int(gl_WorkGroupID.y)", "int(gl_WorkGroupID.z)",
            "int(gl_LocalInvocationID.x)", "int(gl_LocalInvocationID.y)",
            "int(gl_LocalInvocationID.z)"},
    .types = {[KILN_DTYPE_F32] = "float", [KILN_DTYPE_F16] = "float16_t",
              [KILN_DTYPE_I8] = "int8_t", [KILN_DTYPE_U8] = "uint8_t",
              [KILN_DTYPE_I32] = "int", [KILN_DTYPE_I64] = "int64_t",
              [KILN_DTYPE_BOOL] = "uint8_t"},
    .value_types = {[KILN_DTYPE_F32] = "float", [KILN_DTYPE_F16] = "float",
                    [KILN_DTYPE_I8] = "int", [KILN_DTYPE_U8] = "int",
                    [KILN_DTYPE_I32] = "int", [KILN_DTYPE_I64] = "int64_t",
                    [KILN_DTYPE_BOOL] = "bool"},
    .bool_is_native = true,
    .constructor_casts = true,
    .int64_suffix = "l",
    .float_suffix = "",
    .inf_literal = "uintBitsToFloat(0x7f800000u)",
    .nan_literal = "uintBitsToFloat(0x7fc00000u)",
    .half_load = "float($B[$I])",
    .half_store = "$B[$I] = float16_t($V)",
    .math[TIR_RSQRT] = "inversesqrt($1)",
    .math[TIR_ERF] = "kiln_erf($1)",
    .math[TIR_FABS] = "abs($1)",
    .math[TIR_ROUND_EVEN] = "roundEven($1)",
    .imin = "min($1, $2)",
    .imax = "max($1, $2)",
};
#pragma GCC diagnostic pop

bool kiln_cf_dialect_native_half(const kiln_cf_dialect_t* base, kiln_cf_dialect_t* out) {
  if (!base || !out || base->lang != KILN_CF_LANG_OPENCL) return false;
  *out = *base;
  out->name = "opencl-half";
  out->prelude = opencl_half_prelude;
  out->value_types[KILN_DTYPE_F16] = "half";
  out->half_load = "$B[$I]";
  /* convert_half_rte takes a float or a half value alike */
  out->half_store = "$B[$I] = convert_half_rte($V)";
  out->half_round = "convert_half_rte($1)";
  out->half_copy_direct = true;
  out->half_literal = "((half)$1)";
  return true;
}
