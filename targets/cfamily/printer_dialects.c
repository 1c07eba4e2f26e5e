/* The dialect tables of the C-family printer (see printer.h): C, OpenCL C
 * and GLSL. Everything a language needs beyond the shared printer is here:
 * its prelude (helper functions the printed code calls; a file under
 * kernels/), type names, qualifiers, ids, math spellings, pragmas and vector
 * templates. Each table is the C-family defaults (CF_DEFAULTS) plus the
 * fields its language spells differently. */
#include "targets/cfamily/printer.h"

/* The preludes (helpers the printed code calls) and the C epilogue are
 * files under kernels/<target>/, embedded at build time (CMakeLists.txt,
 * cmake/embed.cmake) whatever targets are built: the printer always has all
 * three dialects. */
extern const char kiln_cf_c_prelude[];      /* kernels/cpu/prelude.h */
extern const char kiln_cf_c_epilogue[];     /* kernels/cpu/epilogue.c */
extern const char kiln_cf_opencl_prelude[]; /* kernels/opencl/prelude.cl */
extern const char kiln_cf_glsl_prelude[];   /* kernels/vulkan/prelude.glsl */

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
           [TIR_SIGMOID] = "kiln_sigmoidf($1)", [TIR_SIN] = "sin($1)", [TIR_COS] = "cos($1)",   \
           [TIR_TAN] = "tan($1)", [TIR_ASIN] = "asin($1)", [TIR_ACOS] = "acos($1)",             \
           [TIR_ATAN] = "atan($1)", [TIR_SINH] = "sinh($1)", [TIR_COSH] = "cosh($1)",           \
           [TIR_ASINH] = "asinh($1)", [TIR_ACOSH] = "acosh($1)", [TIR_ATANH] = "atanh($1)",     \
           [TIR_FMOD] = "fmod($1, $2)", [TIR_SILU] = "kiln_siluf($1)",                          \
           [TIR_SOFTPLUS] = "kiln_softplusf($1)",                                               \
           [TIR_F8_DECODE] = "kiln_f8_dec($1, $2)", [TIR_F8_ENCODE] = "kiln_f8_enc($1, $2)"},   \
  .fmin_f = "kiln_fminf($1, $2)", .fmax_f = "kiln_fmaxf($1, $2)",                               \
  .ffloordiv = "kiln_ffloordiv($1, $2)", .ffloormod = "kiln_ffloormod($1, $2)",                 \
  .imin = "kiln_imin($1, $2)", .imax = "kiln_imax($1, $2)",                                     \
  .floordiv = "kiln_floordiv($1, $2)", .floormod = "kiln_floormod($1, $2)",                     \
  .idiv32 = "kiln_idiv32($1, $2)", .idiv64 = "kiln_idiv64($1, $2)", .iabs = "kiln_iabs($1)",    \
  .f2i64 = "kiln_f2i($1)"

/* One row of dtype names (.types, .value_types), in a fixed order, so a
 * dialect states only its seven names. */
#define CF_TYPES(f32, f16, i8, u8, i32, i64, bool_)                                              \
  {[KILN_DTYPE_F32] = f32, [KILN_DTYPE_F16] = f16, [KILN_DTYPE_I8] = i8, [KILN_DTYPE_U8] = u8, \
   [KILN_DTYPE_I32] = i32, [KILN_DTYPE_I64] = i64, [KILN_DTYPE_BOOL] = bool_}
/* CF_TYPES plus f64 and the 16/32/64-bit integers kiln added later. */
#define CF_TYPES_WIDE(f32, f16, i8, u8, i32, i64, bool_, f64, i16, u16, u32, u64)                \
  {[KILN_DTYPE_F32] = f32, [KILN_DTYPE_F16] = f16, [KILN_DTYPE_I8] = i8, [KILN_DTYPE_U8] = u8, \
   [KILN_DTYPE_I32] = i32, [KILN_DTYPE_I64] = i64, [KILN_DTYPE_BOOL] = bool_,                  \
   [KILN_DTYPE_F64] = f64, [KILN_DTYPE_I16] = i16, [KILN_DTYPE_U16] = u16,                     \
   [KILN_DTYPE_U32] = u32, [KILN_DTYPE_U64] = u64}
/* Double math for C and OpenCL C (both spell libm's double functions
 * alike) and the prelude's double helpers. */
#define CF_F64                                                                                  \
  .math_f64 = {[TIR_EXP] = "exp($1)", [TIR_LOG] = "log($1)", [TIR_SQRT] = "sqrt($1)",           \
               [TIR_RSQRT] = "(1.0 / sqrt($1))", [TIR_TANH] = "tanh($1)", [TIR_ERF] = "erf($1)",\
               [TIR_FABS] = "fabs($1)", [TIR_FLOOR] = "floor($1)", [TIR_CEIL] = "ceil($1)",     \
               [TIR_ROUND_EVEN] = "rint($1)", [TIR_POW] = "pow($1, $2)",                        \
               [TIR_SIGMOID] = "kiln_sigmoidd($1)", [TIR_SIN] = "sin($1)", [TIR_COS] = "cos($1)",\
               [TIR_TAN] = "tan($1)", [TIR_ASIN] = "asin($1)", [TIR_ACOS] = "acos($1)",         \
               [TIR_ATAN] = "atan($1)", [TIR_SINH] = "sinh($1)", [TIR_COSH] = "cosh($1)",       \
               [TIR_ASINH] = "asinh($1)", [TIR_ACOSH] = "acosh($1)", [TIR_ATANH] = "atanh($1)", \
               [TIR_FMOD] = "fmod($1, $2)"},                                                    \
  .fmin_d = "kiln_fmind($1, $2)", .fmax_d = "kiln_fmaxd($1, $2)",                               \
  .dfloordiv = "kiln_dfloordiv($1, $2)", .dfloormod = "kiln_dfloormod($1, $2)",                 \
  .d2i64 = "kiln_d2i($1)"

/* The vector templates of a dialect with vector types, in a fixed order
 * ($W: the width): widths (bit mask), type, load, store, splat, select,
 * mask, min, max, abs. A dialect without them (GLSL) leaves them out. */
#define CF_VECTORS(widths, type, load, store, splat, sel, mask, min, max, abs)                   \
  .vector_widths = widths, .vec_type = type, .vload = load, .vstore = store, .vsplat = splat,   \
  .vsel = sel, .vmask = mask, .vmin = min, .vmax = max, .vabs = abs

#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Woverride-init"

const kiln_cf_dialect_t kiln_cf_dialect_c = {
    CF_DEFAULTS,
    .name = "c", .lang = KILN_CF_LANG_C,
    .prelude = kiln_cf_c_prelude,
    .epilogue = kiln_cf_c_epilogue,
    .params = KILN_CF_PARAMS_ARGV,
    .kernel_prefix = "void ",
    .align_attr = " __attribute__((aligned(64)))",
    .index_type = "int64_t",
    .types = CF_TYPES_WIDE("float", "kiln_f16", "int8_t", "uint8_t", "int32_t", "int64_t", "uint8_t",
                           "double", "int16_t", "uint16_t", "uint32_t", "uint64_t"),
    .value_types = CF_TYPES_WIDE("float", "float", "int8_t", "uint8_t", "int32_t", "int64_t", "int",
                                 "double", "int16_t", "uint16_t", "uint32_t", "uint64_t"),
    .unsigned_types = {[KILN_DTYPE_I32] = "uint32_t", [KILN_DTYPE_I64] = "uint64_t"},
    CF_F64,
    .int64_suffix = "LL",
    .half_load = "kiln_h2f($B[$I])",
    .half_store = "$B[$I] = kiln_f2h($V)",
    /* libm's float functions, but for the prelude's exp, log, tanh, erf and
     * sigmoid (the one-lane forms of its vector math, so a vector loop and
     * its scalar tail compute the same value) */
    .math = {[TIR_EXP] = "kiln_expf($1)", [TIR_LOG] = "kiln_logf($1)", [TIR_SQRT] = "sqrtf($1)",
             [TIR_RSQRT] = "(1.0f / sqrtf($1))", [TIR_TANH] = "kiln_tanhf($1)",
             [TIR_ERF] = "kiln_erff($1)", [TIR_FABS] = "fabsf($1)", [TIR_FLOOR] = "floorf($1)",
             [TIR_CEIL] = "ceilf($1)", [TIR_ROUND_EVEN] = "nearbyintf($1)",
             [TIR_POW] = "powf($1, $2)", [TIR_SIGMOID] = "kiln_sigmoidf($1)",
             [TIR_SIN] = "sinf($1)", [TIR_COS] = "cosf($1)", [TIR_TAN] = "tanf($1)",
             [TIR_ASIN] = "asinf($1)", [TIR_ACOS] = "acosf($1)", [TIR_ATAN] = "atanf($1)",
             [TIR_SINH] = "sinhf($1)", [TIR_COSH] = "coshf($1)", [TIR_ASINH] = "asinhf($1)",
             [TIR_ACOSH] = "acoshf($1)", [TIR_ATANH] = "atanhf($1)", [TIR_FMOD] = "fmodf($1, $2)",
             [TIR_SILU] = "kiln_siluf($1)", [TIR_SOFTPLUS] = "kiln_softplusf($1)"},
    /* OpenMP threads and SIMD; GCC's unroller */
    .parallel_pragma = "#pragma omp parallel for schedule(static)",
    .collapse_clause = "collapse($N)",
    .parallel_if = "if",
    .simd_pragma = "#pragma omp simd",
    .unroll_pragma = "#pragma GCC unroll $N",
    /* GCC vector extensions: the prelude's kiln_v<W>f types and helpers */
    CF_VECTORS(4 | 8 | 16, "kiln_v$Wf", "(*(const kiln_v$Wf*)&$B[$I])", "*(kiln_v$Wf*)&$B[$I] = $V",
               "kiln_vsplat$W($1)", "kiln_vsel$W($1, $2, $3)", "kiln_vmask$W($1)",
               "kiln_vmin$W($1, $2)", "kiln_vmax$W($1, $2)", "kiln_vabs$W($1)"),
    .vmath = {[TIR_EXP] = "kiln_vexp$W($1)", [TIR_LOG] = "kiln_vlog$W($1)",
              [TIR_TANH] = "kiln_vtanh$W($1)", [TIR_ERF] = "kiln_verf$W($1)",
              [TIR_SIGMOID] = "kiln_vsigmoid$W($1)", [TIR_SILU] = "kiln_vsilu$W($1)",
              [TIR_SOFTPLUS] = "kiln_vsoftplus$W($1)"},
    /* f16 buffers: the prelude converts a vector on load and store */
    .vload_half = "kiln_vh2f$W(&$B[$I])", .vstore_half = "kiln_vf2h$W(&$B[$I], $V)",
    .vsplat_half = "kiln_vsplath$W(&$B[$I])",
    .vload_i32 = "(*(const kiln_vi$W*)&$B[$I])", .vstore_i32 = "*(kiln_vi$W*)&$B[$I] = $V",
    .vsplat_i32 = "kiln_vspliti$W($1)", .vdot2_i16 = "kiln_vdot2_$W($1, $2, $3)",
    .math[TIR_DOT2_I16] = "kiln_dot2($1, $2, $3)", .math[TIR_WIDEN_I8X2] = "kiln_widen2($1)",
    .math[TIR_F8_DECODE] = "kiln_f8_dec($1, $2)", .math[TIR_F8_ENCODE] = "kiln_f8_enc($1, $2)",
    .math[TIR_DOT4_U8I8] = "kiln_dot4($1, $2, $3)", .vdot4_u8i8 = "kiln_vdot4_$W($1, $2, $3)",
    .vqsat = "kiln_vqsat$W($1, $2, $3)",
    .vwiden_i8x2 = "kiln_vwiden$W(&$B[$I])", .vsplat_i8x2 = "kiln_vsplatw$W(&$B[$I])",
    .vmath[TIR_ROUND_EVEN] = "kiln_vrint$W($1)",
    .vload_u8 = "kiln_vu8f$W(&$B[$I])", .vload_i8 = "kiln_vs8f$W(&$B[$I])",
    .vstore_u8 = "kiln_vf2uint8$W(&$B[$I], $V)", .vstore_i8 = "kiln_vf2int8$W(&$B[$I], $V)",
    .vload_i32f = "kiln_vi2f$W(&$B[$I])",
    .vmulr = "kiln_vmulr$W($1, $2)", .mulr = "kiln_mulrf($1, $2)",
    .fma_f = "kiln_fmaf($1, $2, $3)", .vfma = "kiln_vfma$W($1, $2, $3)",
};

const kiln_cf_dialect_t kiln_cf_dialect_opencl = {
    CF_DEFAULTS,
    .name = "opencl", .lang = KILN_CF_LANG_OPENCL,
    .prelude = kiln_cf_opencl_prelude,
    .params = KILN_CF_PARAMS_LIST,
    .kernel_prefix = "__kernel ",
    .buffer_qualifier = "__global ",
    .workgroup_size_attr = "__attribute__((reqd_work_group_size($1, $2, $3)))",
    .local_qualifier = "__local ",
    .local_decl = KILN_CF_LOCAL_KERNEL_TOP,
    .barrier = "barrier(CLK_LOCAL_MEM_FENCE);",
    .ids = {NULL, "(int)get_group_id(0)", "(int)get_group_id(1)", "(int)get_group_id(2)",
            "(int)get_local_id(0)", "(int)get_local_id(1)", "(int)get_local_id(2)"},
    .types = CF_TYPES_WIDE("float", "half", "char", "uchar", "int", "long", "uchar",
                           "double", "short", "ushort", "uint", "ulong"),
    .value_types = CF_TYPES_WIDE("float", "float", "char", "uchar", "int", "long", "int",
                                 "double", "short", "ushort", "uint", "ulong"),
    .unsigned_types = {[KILN_DTYPE_I32] = "uint", [KILN_DTYPE_I64] = "ulong"},
    /* f64 needs cl_khr_fp64: the target enables it for a program with F64
     * kernels (kiln_cf_dialect_fp64) and the device check refuses it where
     * the device lacks it */
    CF_F64,
    .d2i64 = "convert_long_sat_rtz($1)",
    /* the prelude's straight-line tanh and erf (PoCL's builtins ran at ~1%
     * of the element-wise bandwidth) */
    .math[TIR_TANH] = "kiln_tanhf($1)",
    .math[TIR_ERF] = "kiln_erff($1)",
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
    CF_VECTORS(4 | 8 | 16, "float$W", "vload$W(0, $B + $I)", "vstore$W($V, 0, $B + $I)",
               "(float$W)($1)", "select($3, $2, $1)", "(int$W)(-($1))", "KILN_VMIN($1, $2)",
               "KILN_VMAX($1, $2)", "fabs($1)"),
};

const kiln_cf_dialect_t kiln_cf_dialect_glsl = {
    CF_DEFAULTS,
    .name = "glsl", .lang = KILN_CF_LANG_GLSL,
    .prelude = kiln_cf_glsl_prelude,
    .params = KILN_CF_PARAMS_BINDINGS,
    .kernel_prefix = "void main",
    .readonly_qualifier = "readonly ",
    .local_qualifier = "shared ",
    .local_decl = KILN_CF_LOCAL_GLOBAL,
    .barrier = "memoryBarrierShared(); barrier();",
    /* GL_EXT_control_flow_attributes (kernel_glsl enables it): the SPIR-V
     * Unroll hint, which Mesa's NIR honours for a known trip count. An
     * UNROLLED loop is a register tile's row loop: unrolled, its indices
     * into the private accumulator array are constants and the array lives
     * in registers (lavapipe indexes a private array with a variable
     * through memory, lane by lane: ~100x slower), and it costs the
     * invocation no loop iterations (runtime/vulkan loop_limit). */
    .unroll_pragma = "[[unroll]]",
    .unroll_full_max = 32,
    .ids = {NULL, "int(gl_WorkGroupID.x)", "int(gl_WorkGroupID.y)", "int(gl_WorkGroupID.z)",
            "int(gl_LocalInvocationID.x)", "int(gl_LocalInvocationID.y)",
            "int(gl_LocalInvocationID.z)"},
    /* 16-bit integers live in 16-bit storage and compute as int, like the
     * 8-bit ones; f64 and the wide unsigned types stay unsupported */
    .types = CF_TYPES_WIDE("float", "float16_t", "int8_t", "uint8_t", "int", "int64_t", "uint8_t",
                           NULL, "int16_t", "uint16_t", NULL, NULL),
    .value_types = CF_TYPES_WIDE("float", "float", "int", "int", "int", "int64_t", "bool",
                                 NULL, "int", "int", NULL, NULL),
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
    .math[TIR_FMOD] = "kiln_fmodf($1, $2)",
    .math[TIR_POW] = "kiln_powf($1, $2)",
    .math[TIR_ASIN] = "kiln_asin($1)",
    .math[TIR_ACOS] = "kiln_acos($1)",
    .imin = "min($1, $2)",
    .imax = "max($1, $2)",
    /* vec4 texels of f32 parameters (printer.h vec_texels), lane masks as
     * bvec4. The prelude overloads its helpers for vec4 with the scalar
     * forms' steps. */
    CF_VECTORS(4, "vec4", "texelFetch($B, ($I) >> 2)", "imageStore($B, ($I) >> 2, $V)", "vec4($1)",
               "mix($3, $2, $1)", "bvec4($1)", "kiln_fminf($1, $2)", "kiln_fmaxf($1, $2)", "abs($1)"),
    .vcmp = {"equal($1, $2)", "notEqual($1, $2)", "lessThan($1, $2)", "lessThanEqual($1, $2)",
             "greaterThan($1, $2)", "greaterThanEqual($1, $2)"},
    .vand = "bvec4(uvec4($1) & uvec4($2))", .vor = "bvec4(uvec4($1) | uvec4($2))", .vnot = "not($1)",
    .vmath = {[TIR_EXP] = "exp($1)", [TIR_LOG] = "log($1)", [TIR_SQRT] = "sqrt($1)",
              [TIR_RSQRT] = "inversesqrt($1)", [TIR_TANH] = "tanh($1)", [TIR_ERF] = "kiln_erf($1)",
              [TIR_FLOOR] = "floor($1)", [TIR_CEIL] = "ceil($1)", [TIR_ROUND_EVEN] = "roundEven($1)",
              [TIR_SIGMOID] = "kiln_sigmoidf($1)", [TIR_SILU] = "kiln_siluf($1)",
              [TIR_SOFTPLUS] = "kiln_softplusf($1)"},
    .vec_texels = true,
    .tex_decl = "layout(set = 0, binding = $N) uniform samplerBuffer $B;",
    .tex_idecl = "layout(set = 0, binding = $N, rgba32f) uniform $TimageBuffer $B;",
    /* a written f32 one that the kernel never reads, as a storage buffer of
     * vec4s: lavapipe (Mesa 22.3) stores a vec4 there with one loop over
     * the lanes for all 4 floats, where an rgba32f imageStore was a loop
     * per component (relu over 16M floats, texelFetch in: 119-127 ms a run
     * with imageStore, 28-42 with vec4 buffer stores; conv.comp's Y_VEC4
     * found the same). One the kernel reads too stays an image: a buffer
     * load whose address differs between lanes is a loop per float there */
    .tex_sdecl = "layout(std430, set = 0, binding = $N) $Tbuffer kiln_p$N { vec4 $B[]; };",
    .tex_sstore = "$B[($I) >> 2] = $V",
    .tex_hdecl = "layout(set = 0, binding = $N, rgba16f) uniform $TimageBuffer $B;",
    /* f16 texel parameters only (vec_texels): 4 halves as f32, and 4 f32
     * rounded onto the half grid by the bits (kiln_hround), so the image's
     * own conversion is exact: lavapipe's f16vec4() of a varying vec4
     * truncates like its packHalf2x16 (a Cast to f16 then a plugin's
     * ScaledSwish ended 2 half ulps off the reference) */
    .vload_half = "imageLoad($B, ($I) >> 2)",
    .vstore_half = "imageStore($B, ($I) >> 2, kiln_hround($V))",
    .tex_load1 = "texelFetch($B, ($I) >> 2)[($I) & 3]",
    .tex_iload1 = "imageLoad($B, ($I) >> 2)[($I) & 3]",
    .tex_iload = "imageLoad($B, ($I) >> 2)",
    .tex_pdecl = "vec4 $B[$N];",
    .tex_pload = "$B[($I) >> 2]", .tex_pload1 = "$B[($I) >> 2][($I) & 3]",
    .tex_pstore = "$B[($I) >> 2] = $V", .tex_pstore1 = "$B[($I) >> 2][($I) & 3] = $V",
};
#pragma GCC diagnostic pop

bool kiln_cf_dialect_fp64(const kiln_cf_dialect_t* base, kiln_cf_dialect_t* out) {
  if (!base || !out || base->lang != KILN_CF_LANG_OPENCL) return false;
  *out = *base;
  /* after any cl_khr_fp16 line of a native-half base */
  out->extensions = base->extensions ? "#pragma OPENCL EXTENSION cl_khr_fp16 : enable\n"
                                       "#pragma OPENCL EXTENSION cl_khr_fp64 : enable\n#define KILN_FP64 1\n"
                                     : "#pragma OPENCL EXTENSION cl_khr_fp64 : enable\n#define KILN_FP64 1\n";
  return true;
}

bool kiln_cf_dialect_native_half(const kiln_cf_dialect_t* base, kiln_cf_dialect_t* out) {
  if (!base || !out || base->lang != KILN_CF_LANG_OPENCL) return false;
  *out = *base;
  out->name = "opencl-half";
  out->extensions = "#pragma OPENCL EXTENSION cl_khr_fp16 : enable\n";
  out->value_types[KILN_DTYPE_F16] = "half";
  out->half_load = "$B[$I]";
  /* convert_half_rte takes a float or a half value alike */
  out->half_store = "$B[$I] = convert_half_rte($V)";
  out->half_round = "convert_half_rte($1)";
  out->half_copy_direct = true;
  out->half_literal = "((half)$1)";
  return true;
}
