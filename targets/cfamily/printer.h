/* kiln C-family printer: tensor IR -> C, OpenCL C or GLSL source text.
 *
 * ONE printer drives every C-like target; what differs between languages is
 * data in a dialect table (kiln_cf_dialect_t), in the manner of tinygrad's
 * cstyle renderer: how a kernel and its buffer parameters are declared,
 * qualifiers, the barrier, the work-group / work-item id expressions, the
 * index type, element type names, how f16 is loaded and stored, math function
 * spellings, vector types, and how parallel / vectorized / unrolled loops are
 * rendered. A GPU target adds nothing but its table (and its host code).
 *
 * Usage (C target):
 *   kiln_cf_out_t out; kiln_cf_out_init(&out);
 *   kiln_status_t s = kiln_cf_print_unit(&kiln_cf_dialect_c, funcs, n, NULL, &out);
 *   ... use out.data (NUL-terminated, out.len bytes) ...; kiln_cf_out_free(&out);
 *
 * What the printer emits per dialect (the preludes and the C epilogue are
 * files under kernels/<target>/, embedded at build time)
 *   C       one translation unit: prelude (kernels/cpu/prelude.h: stdint,
 *           math, omp.h when _OPENMP, f16 helpers, floor div/mod and
 *           NaN-propagating min/max helpers, GCC vector-extension types),
 *           then per kernel
 *             void NAME(void* const* args) { T* restrict b = (T*)args[i]; ... }
 *           then the epilogue (kernels/cpu/epilogue.c): `void
 *           kiln_set_threads(int)` (omp_set_num_threads).
 *   OpenCL  one program: prelude (kernels/opencl/prelude.cl), then per kernel
 *             __kernel [reqd_work_group_size] void NAME(__global T* restrict b, ...)
 *           LOCAL buffers are declared at kernel scope (__local).
 *   GLSL    one compute shader per kernel (kiln_cf_print_unit takes n == 1):
 *           #version 450 + extensions, layout(local_size_*), one std430 buffer
 *           block per parameter (binding = parameter index, set 0), LOCAL
 *           buffers as `shared` globals, the prelude
 *           (kernels/vulkan/prelude.glsl), then void main().
 *
 * Types. Index arithmetic (loop variables, I64 index expressions) uses the
 * dialect's index type (C int64_t, OpenCL/GLSL int). Bool buffers are bytes
 * holding 0/1. f16 decision for C: f16 buffers are 2-byte IEEE halves of
 * type kiln_f16 (a prelude typedef: the compiler's _Float16 when it has one,
 * so conversions are hardware F16C / AVX512-FP16 instructions and loops
 * vectorize; else uint16_t bits). A load converts with kiln_h2f, a store
 * with kiln_f2h (prelude helpers; the software fallback is bit-identical to
 * kiln_f16_to_f32 / kiln_f32_to_f16: round to nearest even, NaN kept quiet). An F16-typed expression is computed in float and rounded to
 * half after every operation, so it matches f16 arithmetic (up to the compiler
 * contracting a*b+c into one FMA under -ffp-contract=fast, which GCC does
 * even for these round trips: 1 f16 ulp); lowering normally casts to F32
 * and computes there (the kiln convention).
 * OpenCL uses vload_half / vstore_half_rte (no cl_khr_fp16 needed); GLSL
 * uses float16_t storage (GL_EXT_shader_16bit_storage). A dialect made by
 * kiln_cf_dialect_native_half computes F16 expressions in OpenCL `half`.
 *
 * Semantics the printed code keeps (so targets match the reference executor):
 *   FLOORDIV/FLOORMOD are floor division/modulo: plain / and % only when the
 *   operands are proven non-negative (interval analysis over the enclosing
 *   loop ranges) and the divisor is a positive constant; a power-of-two
 *   divisor becomes >> and &; otherwise inline helpers. Integer DIV is C
 *   division with x/0 = 0 and x/-1 wrapping (like the reference). Integer
 *   add/sub/mul of value dtypes wrap (two's complement) instead of being UB.
 *   float MIN/MAX propagate NaN (numpy). float -> int casts truncate toward
 *   zero, saturate to int64 (NaN -> 0) and wrap to the target width;
 *   anything -> bool is x != 0.
 *
 * Loops (C dialect):
 *   PARALLEL    `#pragma omp parallel for schedule(static)` on the outermost
 *               parallel loop of a nest; directly nested PARALLEL loops are
 *               collapsed into it (collapse(n)); deeper ones print serial.
 *   VECTORIZED  when the loop body is a tree of stores, ifs and inner loops
 *               whose stores are contiguous in the loop variable (flattened
 *               index coefficient 1), whose loads are contiguous or invariant
 *               in it, and whose varying values are f32 arithmetic,
 *               comparisons, selects, min/max, abs, neg, fma and round
 *               half to even (f16 and u8/i8 loads widened to f32, stores
 *               narrowed; f32(f64(a) * f64(b)) of f32 a, b as the f32
 *               product kept unfused, the dialect's vmulr), and the
 *               extent is a multiple of 4: GCC vector-extension code (16, 8
 *               or 4 lanes) with unaligned vector loads/stores. Otherwise a
 *               scalar loop under `#pragma omp simd`.
 *   UNROLLED    `#pragma GCC unroll N` (N = extent up to 32, else 8).
 *   BOUND       an error for C (no work-item ids); GPU dialects read the id
 *               (and guard it when the launch size is larger than the extent).
 *   PRIVATE and LOCAL buffers are local arrays aligned to 64 bytes (over
 *   128 KiB: a _Thread_local static array, so thread stacks stay small).
 *   For register tiling write the accumulator as a PRIVATE f32 buffer whose
 *   every access sits in a VECTORIZED loop over its contiguous last dim,
 *   with UNROLLED loops around: it prints as vector code the compiler keeps
 *   in registers (FMA with -ffp-contract=fast, the GCC default).
 *
 * Names: a variable prints as <name>_<id>, a buffer as <name>_b<id>, with
 * characters outside [A-Za-z0-9_] replaced by '_', so they never collide with
 * each other, with C keywords or with the kiln_ helpers. Kernel names are
 * printed as given and must be C identifiers (not keywords, not kiln_*).
 *
 * Errors (INVALID_ARGUMENT / UNSUPPORTED) name the kernel and what is wrong:
 * a loop kind the dialect cannot print (BOUND in C, barrier in C), a buffer
 * used outside its allocation or not a parameter, an intrinsic on a dtype it
 * does not apply to, a kernel name that is not an identifier.
 *
 * Thread-safe: the printer has no global state; the dialect tables are const.
 */
#ifndef KILN_TARGETS_CFAMILY_PRINTER_H_
#define KILN_TARGETS_CFAMILY_PRINTER_H_

#include "ir/tir.h"

#ifdef __cplusplus
extern "C" {
#endif

/* ---- output buffer ---------------------------------------------------- */

/* Growable NUL-terminated text. An allocation failure sets |oom| and later
 * appends are dropped; the printer then returns OUT_OF_MEMORY. */
typedef struct kiln_cf_out_s {
  char* data;
  size_t len, cap;
  bool oom;
} kiln_cf_out_t;

void kiln_cf_out_init(kiln_cf_out_t* o);
void kiln_cf_out_free(kiln_cf_out_t* o);
void kiln_cf_out_puts(kiln_cf_out_t* o, const char* s);
void kiln_cf_out_printf(kiln_cf_out_t* o, const char* fmt, ...) KILN_PRINTF(2, 3);

/* ---- dialect table ---------------------------------------------------- */

typedef enum kiln_cf_lang_e {
  KILN_CF_LANG_C = 0,
  KILN_CF_LANG_OPENCL,
  KILN_CF_LANG_GLSL,
} kiln_cf_lang_t;

/* How kernel parameters (GLOBAL buffers) reach the kernel. */
typedef enum kiln_cf_params_e {
  KILN_CF_PARAMS_ARGV,     /* void NAME(void* const* args); typed locals from args[i] */
  KILN_CF_PARAMS_LIST,     /* one pointer parameter per buffer */
  KILN_CF_PARAMS_BINDINGS, /* one buffer block per buffer at global scope (binding = index) */
} kiln_cf_params_t;

/* Where LOCAL (work-group shared) buffers are declared. */
typedef enum kiln_cf_local_decl_e {
  KILN_CF_LOCAL_INLINE,     /* at the tir_alloc, like private arrays (C: stack) */
  KILN_CF_LOCAL_KERNEL_TOP, /* at the top of the kernel body (OpenCL __local) */
  KILN_CF_LOCAL_GLOBAL,     /* at global scope before the kernel (GLSL shared) */
} kiln_cf_local_decl_t;

/* Templates: text with placeholders the printer fills in.
 *   $1 $2 $3  operands (printed as full expressions; templates must be
 *             primary expressions: a call or fully parenthesised)
 *   $B $I $V  buffer name, flattened element index, value (loads/stores)
 *   $T $U     a type name, its unsigned twin (casts, wrapping arithmetic)
 *   $W        vector lane count
 *   $N        unroll count */
typedef struct kiln_cf_dialect_s {
  const char* name; /* "c", "opencl", "glsl" */
  kiln_cf_lang_t lang;
  const char* prelude;  /* after the header, before the first kernel */
  const char* epilogue; /* after the last kernel (C: the exported thread setter) */
  /* Between the header and the prelude of a unit, NULL: none. OpenCL's
   * `#pragma OPENCL EXTENSION` lines (kiln_cf_dialect_native_half), kept
   * apart so the dialects share one prelude. GLSL shaders print their own
   * #extension lines. */
  const char* extensions;

  /* kernels and parameters */
  kiln_cf_params_t params;
  const char* kernel_prefix;      /* "void " | "__kernel void " | (GLSL: "void main") */
  const char* buffer_qualifier;   /* before the element type: "" | "__global " */
  const char* readonly_qualifier; /* for params never stored to: "const " | "readonly " */
  const char* restrict_qualifier; /* "restrict " (applied to params that cannot alias) */
  const char* workgroup_size_attr;/* OpenCL: reqd_work_group_size template ($1 $2 $3) */

  /* scoped buffers */
  const char* local_qualifier;   /* LOCAL allocs: "" | "__local " | "shared " */
  kiln_cf_local_decl_t local_decl;
  const char* private_qualifier; /* PRIVATE allocs: "" */
  const char* align_attr;        /* after a local array declarator: C aligned(64) */

  /* GPU ids and sync; NULL = unavailable (printing one is an error) */
  const char* barrier;  /* statement text */
  const char* ids[7];   /* expression per tir_thread_tag_t (index type), [0] unused */

  /* types */
  const char* index_type;                     /* loop vars, I64 index math */
  const char* types[KILN_DTYPE_COUNT_];       /* storage element type per dtype */
  const char* value_types[KILN_DTYPE_COUNT_]; /* type of a value of that dtype */
  const char* unsigned_types[KILN_DTYPE_COUNT_]; /* for wrapping int math; NULL: wraps natively */
  bool bool_is_native;      /* comparisons yield a real bool type (GLSL) vs int 0/1 */
  bool constructor_casts;   /* T(x) (GLSL) instead of (T)x */
  const char* int64_suffix; /* literal suffix for I64 values outside int32 */
  const char* float_suffix; /* "f" | "" */
  const char* inf_literal;  /* +infinity */
  const char* nan_literal;  /* a quiet NaN */

  /* f16 storage: load ($B $I -> float), store ($B $I $V -> statement) */
  const char* half_load;
  const char* half_store;
  /* float <-> f16 rounding of an F16-typed value ($1) */
  const char* half_round;
  bool half_copy_direct; /* f16 -> f16 copies may assign storage elements */
  /* An F16 constant from its float literal ($1); NULL: the literal itself
   * (F16 values are floats). Dialects whose F16 value type is a real half
   * type (kiln_cf_dialect_native_half) set it. */
  const char* half_literal;

  /* helper calls (templates); all are defined by the prelude or builtins */
  const char* math[TIR_INTRIN_COUNT_]; /* f32 intrinsics; NEG/NOT/FMA printed inline */
  const char* fmin_f;       /* NaN-propagating float min ($1 $2) */
  const char* fmax_f;
  const char* ffloordiv;    /* float floor(a / b) ($1 $2) */
  const char* ffloormod;    /* float a - floor(a / b) * b, sign of b */
  const char* imin;         /* integer min/max in the index type or value type */
  const char* imax;
  const char* floordiv;     /* index type, any signs, divisor 0 -> 0 */
  const char* floormod;
  const char* idiv32;       /* C division on 32-bit ints, x/0 = 0, x/-1 wraps */
  const char* idiv64;
  const char* iabs;         /* integer abs */
  const char* f2i64;        /* float -> int64: truncate, saturate, NaN -> 0 */
  /* The same for F64 values, computed in double. A dialect without them
   * (no F64 entry in .types) refuses F64 kernels by name. */
  const char* math_f64[TIR_INTRIN_COUNT_];
  const char* fmin_d, *fmax_d, *dfloordiv, *dfloormod, *d2i64;

  /* loops */
  const char* parallel_pragma; /* NULL: PARALLEL prints serial */
  const char* collapse_clause; /* appended with the count ($N), NULL: no collapse */
  /* The clause keyword ("if") that keeps a parallel loop with a run-time
   * extent (tir_for_dyn) in one thread when it runs once; NULL: none. */
  const char* parallel_if;
  const char* simd_pragma;     /* for VECTORIZED loops printed scalar */
  const char* unroll_pragma;   /* $N */
  /* > 0: unroll_pragma only on UNROLLED loops of at most this extent, as a
   * full unroll (GLSL's [[unroll]] takes no count; a longer loop prints
   * plain rather than unrolled whole) */
  int64_t unroll_full_max;

  /* explicit vectors for VECTORIZED loops; vec_type NULL disables the path */
  int32_t vector_widths;       /* bit set of lane counts: 4 | 8 | 16 */
  const char* vec_type;        /* f32 vector of $W lanes */
  const char* vload;           /* $B $I $W -> vector expression */
  const char* vstore;          /* $B $I $V $W -> statement */
  /* f16 buffers in vector loops (NULL: such loops print scalar): $W halves
   * at $B[$I] widened to an f32 vector; an f32 vector $V narrowed into them */
  const char* vload_half;
  const char* vstore_half;
  const char* vsplat_half;     /* one f16 at $B[$I] widened into all $W lanes */
  const char* vsplat;          /* scalar $1 -> vector */
  const char* vsel;            /* mask $1 ? $2 : $3 per lane */
  const char* vmask;           /* scalar bool $1 -> all-lanes mask */
  const char* vmin;            /* NaN-propagating */
  const char* vmax;
  const char* vabs;
  /* i32 vectors (NULL: such loops print scalar), only for the int8 GEMM's
   * accumulators: a store of $W lanes of dot2_i16(acc, a, b) whose operands
   * are contiguous i32 loads or invariant (broadcast) values */
  const char* vload_i32;       /* $B $I $W -> i32 vector */
  const char* vstore_i32;      /* $B $I $V $W -> statement */
  const char* vsplat_i32;      /* scalar i32 $1 -> vector */
  const char* vdot2_i16;       /* $1 + pairwise i16 products of $2 and $3, per lane */
  /* widen_i8x2 of an i16 load: $W contiguous ones from $B[$I], or the one
   * at $B[$I] in every lane (NULL: such loops print scalar) */
  const char* vwiden_i8x2;
  const char* vsplat_i8x2;
  /* f32 math on a vector $1 of $W lanes (NULL: a loop using the intrinsic
   * prints scalar); the C prelude's polynomial forms, so the loop calls no
   * libm */
  const char* vmath[TIR_INTRIN_COUNT_];
  /* u8 / i8 buffers in vector loops (the quantized kernels; NULL: such
   * loops print scalar): $W bytes at $B[$I] widened to an f32 vector
   * (f32(load)); an f32 vector $V of integers in the byte's range narrowed
   * into them (a store of u8/i8(f32 value)) */
  const char* vload_u8;
  const char* vload_i8;
  const char* vstore_u8;
  const char* vstore_i8;
  /* $W i32 at $B[$I] converted to an f32 vector (f32(i32 load): the int8
   * GEMM's requantization reads its i32 accumulators so; NULL: scalar) */
  const char* vload_i32f;
  /* $1 + the sums of four u8 x s8 byte products of $2 and $3, per i32 lane
   * (dot4_u8i8, vpdpbusd; NULL: such loops print scalar) */
  const char* vdot4_u8i8;
  /* min(max($1, $2), $3) by the vector unit's own max and min (x86
   * maxps/minps: the second operand for a NaN or equal values): the
   * quantized ops' saturation (printer_vec.c's qsat_value; NULL: the
   * NaN-propagating vmin/vmax and the select as written) */
  const char* vqsat;
  /* $1 * $2 rounded to f32 on its own, never fused into a following add
   * (tensor IR's f32(f64(a) * f64(b)) of f32 a, b: exactly that product,
   * printer_vec.c's f32_product; NULL: such loops print scalar) */
  const char* vmulr;
  /* the same for one f32 value outside vector loops (NULL: printed as
   * written, f32(f64 product)) */
  const char* mulr;
  /* f32 a * b + c rounded once ($1 $2 $3; tensor-IR fma, the GEMMs' step),
   * scalar and on a vector of $W lanes. NULL: printed a * b + c, which the
   * compiler contracts or not as it likes (GCC's Zen tunings leave 128- and
   * 256-bit and scalar chains unfused while fusing 512-bit ones, so a
   * GEMM's edge tile summed with other roundings than its full tiles). */
  const char* fma_f;
  const char* vfma;
  /* Vectors are 4-float texels of f32 parameters (GLSL: lavapipe runs a
   * storage-buffer access whose address differs between lanes as a loop
   * over the lanes per float, a texel fetch or image store as one 16-byte
   * access per lane, a vec4 storage-buffer store as one loop over the
   * lanes for all 4). A VECTORIZED loop prints as vectors only where each
   * buffer it reads or writes contiguously is an f32 parameter that fits a
   * texel view (kiln_cf_kernel_info_t.texels), its lane-0 index is a
   * multiple of 4, and every store into the buffers it writes is such a
   * vector store; those parameters are declared as texel buffers (read-only:
   * tex_decl; else tex_idecl, or tex_sdecl where never loaded; $B the
   * name, $N the binding, $T the restrict
   * qualifier where the parameter cannot alias) and every access
   * to them goes through the templates below ($I the element index), vload
   * / vstore reading or writing the 4 floats at $I. */
  bool vec_texels;
  /* Lane masks by function where a language has no vector operators for
   * them (GLSL's lessThan; NULL: the infix operator): comparisons in the
   * order of tir_binop_t's TIR_EQ..TIR_GE ($1 $2), and / or of masks, not. */
  const char* vcmp[6];
  const char* vand, *vor, *vnot;
  const char* tex_decl;
  const char* tex_idecl;
  /* an f16 texel parameter (kiln_cf_kernel_info_t.texels_f16): always an
   * image of 4-half texels ($T also says readonly where nothing stores to
   * it), read through tex_iload / tex_iload1 as f32 and written through
   * vstore_half (rounded to f16 first, as a scalar f16 store rounds) */
  const char* tex_hdecl;
  const char* tex_load1;  /* one float of a read-only texel parameter */
  const char* tex_iload1; /* one float of a written one */
  const char* tex_iload;  /* 4 floats of a written one */
  /* a written f32 one the kernel never loads (NULL: tex_idecl): declared
   * and its 4 floats at $I stored through these instead of tex_idecl and
   * vstore */
  const char* tex_sdecl, *tex_sstore;
  /* PRIVATE f32 rows of 4k floats the vector loops use are vec4 rows:
   * declared ($B, $N vec4s), 4 floats and one float read and written */
  const char* tex_pdecl;
  const char* tex_pload, *tex_pload1, *tex_pstore, *tex_pstore1;
} kiln_cf_dialect_t;

extern const kiln_cf_dialect_t kiln_cf_dialect_c;
extern const kiln_cf_dialect_t kiln_cf_dialect_opencl;
extern const kiln_cf_dialect_t kiln_cf_dialect_glsl;

/* Fills |out| with |base| changed so that F16-typed values (the kernels the
 * precision pass retypes for fp16 arithmetic) are the language's own half
 * type and compute in it: OpenCL C `half` with cl_khr_fp16 enabled by the
 * prelude (the program then needs a device with that extension). F16 loads
 * read halves, F16 operations print as half arithmetic, F16 constants as
 * half literals, and an F16 -> F32 cast converts explicitly so an f32
 * expression over f16 loads never computes in half. Without it (the base
 * dialects) F16 values are floats rounded to the half grid after every
 * operation: the same results, without half-rate arithmetic. False (|out|
 * untouched) for a language without a native half type here (C, GLSL).
 * Thread-safe. */
bool kiln_cf_dialect_native_half(const kiln_cf_dialect_t* base, kiln_cf_dialect_t* out);
/* |base| (OpenCL, plain or native-half) with cl_khr_fp64 enabled and the
 * prelude's double helpers (KILN_FP64) compiled in, for a unit with F64
 * kernels. False for another language. */
bool kiln_cf_dialect_fp64(const kiln_cf_dialect_t* base, kiln_cf_dialect_t* out);

/* ---- printing --------------------------------------------------------- */

/* Per-kernel facts the caller knows and the IR does not. */
typedef struct kiln_cf_kernel_info_s {
  /* Per parameter: may be declared restrict (no other parameter of this
   * kernel shares its memory). NULL: every parameter is restrict. */
  const bool* param_noalias;
  /* Canonical form: the kernel is named KILN_KERNEL and buffers/variables
   * are numbered in order of appearance (p0.., v0..), so two kernels that
   * differ only in names print the same text. Targets use it as a dedup key
   * (same text = same machine code: compile once, alias the other names). */
  bool canonical;
  /* Dialects whose vectors are texels (kiln_cf_dialect_t.vec_texels, GLSL):
   * the most vec4 texels one texel view of a parameter may hold on the
   * device (kiln_device_info_t.max_texels; UINT64_MAX: any). 0: no texel
   * views, so VECTORIZED loops print scalar. */
  uint64_t texels;
  /* f16 parameters may be texel views too (tex_hdecl: 4 halves a texel,
   * read and written as f32 vectors; Vulkan's rgba16f storage texel
   * buffers, kiln_device_info_t.texel_f16). False: they stay scalar. */
  bool texels_f16;
} kiln_cf_kernel_info_t;

/* Prints the dialect prelude (C: includes and helpers). */
kiln_status_t kiln_cf_print_prelude(const kiln_cf_dialect_t* d, kiln_cf_out_t* out) KILN_MUST_USE;

/* Prints one kernel. For GLSL this is a whole shader (prelude included).
 * |info| may be NULL. */
kiln_status_t kiln_cf_print_kernel(const kiln_cf_dialect_t* d, const tir_func_t* f,
                                   const kiln_cf_kernel_info_t* info,
                                   kiln_cf_out_t* out) KILN_MUST_USE;

/* Prelude + every kernel + epilogue: one translation unit. |infos| may be
 * NULL (else one per kernel). Fails on duplicate kernel names; GLSL needs
 * n == 1. */
kiln_status_t kiln_cf_print_unit(const kiln_cf_dialect_t* d, const tir_func_t* const* funcs,
                                 int32_t n, const kiln_cf_kernel_info_t* infos,
                                 kiln_cf_out_t* out) KILN_MUST_USE;

/* Prints `float NAME(float V) { return E; }` (C: static inline): an f32
 * value |e| of variable |v| and constants, no loads (a plugin kernel's
 * fused epilogue, targets/custom_kernel.c; |v| stands for an f32 value
 * although tir variables are I64 elsewhere). */
kiln_status_t kiln_cf_print_value_fn(const kiln_cf_dialect_t* d, const char* name, const tir_var_t* v,
                                     const tir_expr_t* e, kiln_cf_out_t* out) KILN_MUST_USE;

/* GPU launch geometry of a kernel from its BOUND loops: local[d] is the
 * largest extent bound to THREAD_X+d, groups[d] the largest bound to
 * BLOCK_X+d (1 where nothing is bound). */
void kiln_cf_launch_dims(const tir_func_t* f, int64_t groups[3], int64_t local[3]);

/* True when |s| is a C identifier the printer accepts as a kernel name. */
bool kiln_cf_valid_kernel_name(const char* s);

/* True when |f| computes on F16 values (an F16-typed operation or math
 * call: the kernels the precision pass retyped for fp16 arithmetic), not
 * only loads and stores f16 storage. */
bool kiln_cf_func_computes_f16(const tir_func_t* f);
/* NULL when |d| can spell every dtype |f| stores, loads or computes in
 * (and its name and parameters are printable); else the error printing it
 * would give (UNSUPPORTED naming the kernel, the dtype and the dialect).
 * Prints nothing: heterogeneous execution asks it before emitting. */
KILN_MUST_USE kiln_status_t kiln_cf_check_types(const kiln_cf_dialect_t* d, const tir_func_t* f);
/* Whether |f| has a parameter, allocation or value of dtype |t|. */
bool kiln_cf_func_uses_dtype(const tir_func_t* f, kiln_dtype_t t);

#ifdef __cplusplus
}
#endif
#endif /* KILN_TARGETS_CFAMILY_PRINTER_H_ */
