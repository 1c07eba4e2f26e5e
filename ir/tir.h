/* kiln tensor IR (TIR): loop nests over buffers.
 *
 * The tensor IR is what every target prints. A kernel (tir_func_t) is a
 * statement tree: loops (serial, parallel, vectorized, unrolled, or bound to
 * GPU work-group / work-item ids), stores into n-d buffers, sequences,
 * conditionals, scoped allocations of local (work-group shared) or private
 * buffers, and barriers. Expressions are trees: immediates, loop variables,
 * arithmetic and comparisons, selects, n-d loads, casts and math intrinsics.
 * Shapes are static: kiln compiles for concrete input shapes (symbolic dims
 * are bound before lowering) and caches per shape. The one exception is a
 * loop with a run-time extent (tir_for_dyn): its |extent| is the static
 * upper bound every analysis uses, and |dyn_extent| the value it runs to,
 * read when the kernel runs (a dynamic dim, lowering/plan_dyn.h).
 *
 * All nodes live in a tir_ctx_t arena and are freed together; nodes are
 * immutable once built, so passes (simplify, schedule primitives) build new
 * trees and may share unchanged subtrees.
 *
 * Index arithmetic is int64 (KILN_DTYPE_I64); comparisons and logic produce
 * KILN_DTYPE_BOOL; values carry their element type. Integer division and
 * modulo in index expressions are floor division / floor modulo
 * (TIR_FLOORDIV / TIR_FLOORMOD); TIR_DIV is true division for floats and
 * C (truncating) division for integer values.
 *
 * Thread-compatible: one ctx per compile.
 */
#ifndef KILN_IR_TIR_H_
#define KILN_IR_TIR_H_

#include <stdio.h>

#include "ir/arena.h"
#include "kiln/array.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef struct tir_ctx_s {
  kiln_arena_t arena;
  int32_t next_var_id;
  int32_t next_buffer_id;
  bool oom; /* set when an allocation failed; builders then return NULL */
  /* Set (with oom) when tir_buffer was given a shape whose byte size
   * overflows int64: the buffer's name (arena-owned). */
  const char* too_large;
} tir_ctx_t;

void tir_ctx_init(tir_ctx_t* ctx, kiln_allocator_t allocator);
void tir_ctx_deinit(tir_ctx_t* ctx);
/* OUT_OF_MEMORY status if any builder ran out of memory since init;
 * LIMIT_EXCEEDED naming the buffer when a buffer's size overflowed. */
kiln_status_t tir_ctx_status(const tir_ctx_t* ctx);

/* ---- buffers and variables ------------------------------------------- */

typedef enum tir_scope_e {
  TIR_SCOPE_GLOBAL = 0, /* device/global memory: kernel parameters */
  TIR_SCOPE_LOCAL,      /* work-group shared memory (GPU) / stack (CPU) */
  TIR_SCOPE_PRIVATE,    /* per work-item registers / locals */
} tir_scope_t;

typedef struct tir_buffer_s {
  int32_t id;
  const char* name;
  kiln_dtype_t dtype;
  int32_t rank;
  int64_t shape[KILN_MAX_RANK];
  int64_t strides[KILN_MAX_RANK]; /* in elements; row-major by default */
  tir_scope_t scope;
} tir_buffer_t;

/* Row-major buffer. |name| is copied. */
tir_buffer_t* tir_buffer(tir_ctx_t* c, const char* name, kiln_dtype_t dtype, int32_t rank,
                         const int64_t* shape, tir_scope_t scope);
int64_t tir_buffer_numel(const tir_buffer_t* b);
/* Bytes a buffer (or a strided view) touches: its furthest element + 1,
 * times the element size; 0 when a dim is 0. */
uint64_t tir_buffer_span_bytes(const tir_buffer_t* b);

typedef struct tir_var_s {
  int32_t id;
  const char* name; /* unique within a kernel once printed (name + id) */
} tir_var_t;

tir_var_t* tir_var(tir_ctx_t* c, const char* name);

/* ---- expressions ----------------------------------------------------- */

typedef enum tir_expr_kind_e {
  TIR_INT,    /* integer immediate (dtype any int type or bool) */
  TIR_FLOAT,  /* float immediate (f32/f16/f64) */
  TIR_VARREF, /* loop/let variable, dtype I64 */
  TIR_BINARY,
  TIR_SELECT, /* cond ? a : b (both evaluated is allowed) */
  TIR_LOAD,
  TIR_CAST,
  TIR_CALL,   /* math intrinsic */
} tir_expr_kind_t;

typedef enum tir_binop_e {
  TIR_ADD, TIR_SUB, TIR_MUL,
  TIR_DIV,                     /* float division; C division for int values */
  TIR_FLOORDIV, TIR_FLOORMOD,  /* index arithmetic */
  TIR_MIN, TIR_MAX,
  TIR_EQ, TIR_NE, TIR_LT, TIR_LE, TIR_GT, TIR_GE, /* -> BOOL */
  TIR_AND, TIR_OR,             /* BOOL x BOOL -> BOOL */
  /* Bitwise on integer values (two's complement bits of the value; a narrow
   * dtype's result stays in its range as its operands do). Bitwise NOT is
   * BXOR with all ones (kiln_lew_imm_i of the dtype's mask). */
  TIR_BAND, TIR_BOR, TIR_BXOR,
  TIR_BINOP_COUNT_
} tir_binop_t;

typedef enum tir_intrin_e {
  TIR_EXP, TIR_LOG, TIR_SQRT, TIR_RSQRT, TIR_TANH, TIR_ERF, TIR_FABS, TIR_FLOOR, TIR_CEIL,
  TIR_ROUND_EVEN, /* nearbyint */
  TIR_POW,        /* 2 args */
  TIR_NEG, TIR_NOT, /* NOT: bool */
  TIR_SIGMOID,    /* 1 / (1 + exp(-x)) */
  TIR_FMA,        /* 3 args: a * b + c */
  /* trigonometric and hyperbolic (f32 libm / OpenCL / GLSL built-ins) */
  TIR_SIN, TIR_COS, TIR_TAN, TIR_ASIN, TIR_ACOS, TIR_ATAN,
  TIR_SINH, TIR_COSH, TIR_ASINH, TIR_ACOSH, TIR_ATANH,
  TIR_FMOD,       /* 2 args: C fmod (remainder with the sign of the dividend) */
  /* 3 i32 args (acc, a, b): acc + lo(a)*lo(b) + hi(a)*hi(b), where lo/hi are
   * the signed low and high 16 bits of the 32-bit value: the integer
   * dot-product step of the int8 GEMM (operands widened to i16 pairs; see
   * lower_nn_conv.c). The sum wraps like two's complement i32 (x86
   * vpmaddwd + vpaddd, or vpdpwssd with VNNI). */
  TIR_DOT2_I16,
  /* 1 i16 arg -> i32: its two bytes as signed 8-bit values, each widened to
   * a signed 16-bit half (low byte -> low half): int8 weights stored one
   * byte each and expanded to dot2_i16's operand where they are read. */
  TIR_WIDEN_I8X2,
  TIR_SILU,       /* x * sigmoid(x): a fused Mul(x, Sigmoid(x)) (lowering/fuse.c), x once */
  /* 3 i32 args (acc, a, b): acc + the sum over the four bytes k of
   * u8(byte k of a) * s8(byte k of b), wrapping like two's complement i32:
   * x86 vpdpbusd (AVX512-VNNI / AVX-VNNI), the int8 GEMM's step on four
   * channels of u8 activations and int8 weights (lower_nn_qconv_blocked.c).
   * No intermediate saturation: |sum of four products| <= 4 * 255 * 128. */
  TIR_DOT4_U8I8,
  /* float8 <-> f32 (kiln_f8_to_f32 / kiln_f32_to_f8 in kiln/array.h). The
   * second argument is an I32 immediate. F8_DECODE (i32 code in [0, 255],
   * variant v) -> f32, where v = dtype - KILN_DTYPE_F8E4M3FN; F8_ENCODE
   * (f32 x, 2 * v + saturate) -> i32 code in [0, 255]. Float8 tensors are
   * u8 buffers (kiln_dtype_storage); these are their only arithmetic. */
  TIR_F8_DECODE,
  TIR_F8_ENCODE,
  /* f32 softplus max(x, 0) + log1p(exp(-|x|)) as one call: the CPU
   * target's Softplus (kernels/cpu/prelude.h, one exp and one log per
   * element); GPU dialects do not print it, their lowering keeps the
   * composite form (lower_elementwise_math.c) */
  TIR_SOFTPLUS,
  TIR_INTRIN_COUNT_
} tir_intrin_t;

typedef struct tir_expr_s tir_expr_t;
struct tir_expr_s {
  tir_expr_kind_t kind;
  kiln_dtype_t dtype;
  union {
    int64_t i;                /* TIR_INT */
    double f;                 /* TIR_FLOAT */
    const tir_var_t* var;     /* TIR_VARREF */
    struct {
      tir_binop_t op;
      const tir_expr_t* a;
      const tir_expr_t* b;
    } bin;
    struct {
      const tir_expr_t* cond;
      const tir_expr_t* t;
      const tir_expr_t* f;
    } sel;
    struct {
      const tir_buffer_t* buf;
      const tir_expr_t* const* idx; /* buf->rank entries, I64 */
    } load;
    struct {
      const tir_expr_t* value; /* converted to ->dtype */
    } cast;
    struct {
      tir_intrin_t fn;
      int32_t n;
      const tir_expr_t* args[3];
    } call;
  } u;
};

/* Builders return NULL only when out of memory, or tir_buffer for a shape
 * whose byte size overflows (and set ctx->oom); passing
 * NULL operands propagates NULL. Result dtypes: arithmetic takes the dtype of
 * |a| (operands must agree: use tir_cast); comparisons give BOOL. */
const tir_expr_t* tir_int(tir_ctx_t* c, int64_t v);                 /* I64 */
const tir_expr_t* tir_const(tir_ctx_t* c, kiln_dtype_t t, double v); /* typed */
const tir_expr_t* tir_ref(tir_ctx_t* c, const tir_var_t* v);
const tir_expr_t* tir_bin(tir_ctx_t* c, tir_binop_t op, const tir_expr_t* a,
                          const tir_expr_t* b);
const tir_expr_t* tir_add(tir_ctx_t* c, const tir_expr_t* a, const tir_expr_t* b);
const tir_expr_t* tir_sub(tir_ctx_t* c, const tir_expr_t* a, const tir_expr_t* b);
const tir_expr_t* tir_mul(tir_ctx_t* c, const tir_expr_t* a, const tir_expr_t* b);
const tir_expr_t* tir_select(tir_ctx_t* c, const tir_expr_t* cond, const tir_expr_t* t,
                             const tir_expr_t* f);
/* |idx| has buf->rank entries (copied). */
const tir_expr_t* tir_load(tir_ctx_t* c, const tir_buffer_t* buf, const tir_expr_t* const* idx);
const tir_expr_t* tir_cast(tir_ctx_t* c, kiln_dtype_t t, const tir_expr_t* v);
const tir_expr_t* tir_call(tir_ctx_t* c, tir_intrin_t fn, int32_t n, const tir_expr_t* a0,
                           const tir_expr_t* a1, const tir_expr_t* a2);

/* ---- statements ------------------------------------------------------ */

typedef enum tir_stmt_kind_e {
  TIR_FOR,
  TIR_STORE,
  TIR_SEQ,
  TIR_IF,
  TIR_ALLOC,   /* scoped LOCAL/PRIVATE buffer */
  TIR_BARRIER, /* work-group barrier on local memory */
  /* A hint that buf[idx] will be read soon (u.store with value NULL): no
   * effect on values; the C dialect prints __builtin_prefetch, the others
   * nothing. idx stays in bounds like a load's. */
  TIR_PREFETCH,
} tir_stmt_kind_t;

typedef enum tir_loop_kind_e {
  TIR_LOOP_SERIAL = 0,
  TIR_LOOP_PARALLEL,   /* CPU threads */
  TIR_LOOP_VECTORIZED, /* SIMD lanes */
  TIR_LOOP_UNROLLED,
  TIR_LOOP_BOUND,      /* bound to a GPU id (see tir_thread_tag_t) */
} tir_loop_kind_t;

typedef enum tir_thread_tag_e {
  TIR_TAG_NONE = 0,
  TIR_BLOCK_X, TIR_BLOCK_Y, TIR_BLOCK_Z,    /* work-group id */
  TIR_THREAD_X, TIR_THREAD_Y, TIR_THREAD_Z, /* local work-item id */
} tir_thread_tag_t;

typedef struct tir_stmt_s tir_stmt_t;
struct tir_stmt_s {
  tir_stmt_kind_t kind;
  union {
    struct {
      const tir_var_t* var; /* runs 0 .. extent-1 */
      int64_t extent;
      /* NULL, or the run-time trip count (I64; loads of kernel parameters
       * only): the loop then runs 0 .. dyn_extent-1, and the code that
       * launches the kernel guarantees 0 <= dyn_extent <= extent, so bounds
       * and verification over [0, extent) stay sound. */
      const tir_expr_t* dyn_extent;
      tir_loop_kind_t kind;
      tir_thread_tag_t tag;
      const tir_stmt_t* body;
    } loop;
    struct {
      const tir_buffer_t* buf;
      const tir_expr_t* const* idx; /* buf->rank entries */
      const tir_expr_t* value;      /* dtype == buf->dtype */
    } store;
    struct {
      int32_t n;
      const tir_stmt_t* const* items;
    } seq;
    struct {
      const tir_expr_t* cond;
      const tir_stmt_t* then_s;
      const tir_stmt_t* else_s; /* may be NULL */
    } cond;
    struct {
      const tir_buffer_t* buf; /* scope LOCAL or PRIVATE */
      const tir_stmt_t* body;
    } alloc;
  } u;
};

const tir_stmt_t* tir_for(tir_ctx_t* c, const tir_var_t* v, int64_t extent, tir_loop_kind_t k,
                          const tir_stmt_t* body);
/* A loop that runs dyn_extent times, at most |max_extent| (see the loop
 * struct); schedule primitives are not applied to such loops. */
const tir_stmt_t* tir_for_dyn(tir_ctx_t* c, const tir_var_t* v, int64_t max_extent,
                              const tir_expr_t* dyn_extent, tir_loop_kind_t k, const tir_stmt_t* body);
const tir_stmt_t* tir_for_bound(tir_ctx_t* c, const tir_var_t* v, int64_t extent,
                                tir_thread_tag_t tag, const tir_stmt_t* body);
const tir_stmt_t* tir_store(tir_ctx_t* c, const tir_buffer_t* buf, const tir_expr_t* const* idx,
                            const tir_expr_t* value);
/* Copies |items|; NULL items are skipped. */
const tir_stmt_t* tir_seq(tir_ctx_t* c, int32_t n, const tir_stmt_t* const* items);
const tir_stmt_t* tir_seq2(tir_ctx_t* c, const tir_stmt_t* a, const tir_stmt_t* b);
const tir_stmt_t* tir_if(tir_ctx_t* c, const tir_expr_t* cond, const tir_stmt_t* then_s,
                         const tir_stmt_t* else_s);
const tir_stmt_t* tir_alloc(tir_ctx_t* c, const tir_buffer_t* buf, const tir_stmt_t* body);
const tir_stmt_t* tir_barrier(tir_ctx_t* c);
/* TIR_PREFETCH of buf[idx] (|idx| has buf->rank entries, copied). */
const tir_stmt_t* tir_prefetch(tir_ctx_t* c, const tir_buffer_t* buf, const tir_expr_t* const* idx);

/* ---- kernels --------------------------------------------------------- */

typedef struct tir_func_s {
  const char* name;         /* C identifier */
  int32_t n_params;
  const tir_buffer_t** params; /* GLOBAL buffers, in call order */
  const tir_stmt_t* body;
} tir_func_t;

tir_func_t* tir_func(tir_ctx_t* c, const char* name, int32_t n_params,
                     const tir_buffer_t* const* params, const tir_stmt_t* body);

/* ---- analysis and passes (ir/tir_*.c) --------------------------------- */

/* How |f| touches buffer |b|: TIR_ACCESS_LOAD and/or TIR_ACCESS_STORE bits
 * (0 when it does not). Used for argument access flags and hazards. */
enum { TIR_ACCESS_LOAD = 1, TIR_ACCESS_STORE = 2 };
int tir_func_buffer_access(const tir_func_t* f, const tir_buffer_t* b);

/* Prints the kernel as readable pseudo-code (one statement per line). */
void tir_print_func(const tir_func_t* f, FILE* out);
void tir_print_stmt(const tir_stmt_t* s, FILE* out, int indent);
void tir_print_expr(const tir_expr_t* e, FILE* out);

/* Checks: every variable used is bound by an enclosing loop; load/store ranks
 * match their buffers and dtypes agree; every access is in bounds for all loop
 * values (interval analysis; a store guarded by an enclosing tir_if counts
 * the guard); LOCAL/PRIVATE buffers are only used inside their tir_alloc;
 * GLOBAL buffers are parameters; barriers are not inside divergent control
 * flow; a LOCAL buffer written and then read by different work-items has a
 * barrier in between (race check). The status names the kernel, buffer and
 * the offending access. */
kiln_status_t tir_verify(const tir_func_t* f);
/* tir_verify knowing the run-time dims: every load dims[i] (i < n, a
 * constant index) lies in [lo[i], hi[i]] (a dynamic dim's value, which the
 * session checks against the module's range before a run). Indices that
 * compute with them -- a stride of seq * 64 in a kernel whose tensors are
 * dense at the run's size -- are then bounded like any other. */
#define TIR_VERIFY_MAX_DIMS 8
KILN_MUST_USE kiln_status_t tir_verify_dims(const tir_func_t* f, const tir_buffer_t* dims, int32_t n, const int64_t* lo,
                              const int64_t* hi);

/* Constant folding, algebraic identities on index arithmetic (x*1, x+0,
 * (a*k+b)/k with 0<=b<k, (a*k+b)%k, nested floordiv/mod), dead loops
 * (extent 0), extent-1 loops replaced by their body with the var set to 0,
 * if-statements with constant conditions. Returns a new tree (shares
 * unchanged subtrees); NULL only on OOM. */
const tir_stmt_t* tir_simplify_stmt(tir_ctx_t* c, const tir_stmt_t* s);
const tir_expr_t* tir_simplify_expr(tir_ctx_t* c, const tir_expr_t* e);
tir_func_t* tir_simplify_func(tir_ctx_t* c, const tir_func_t* f);

/* Substitutes variables (vars[i] -> values[i]) in an expression / stmt. */
const tir_expr_t* tir_substitute_expr(tir_ctx_t* c, const tir_expr_t* e, int32_t n,
                                      const tir_var_t* const* vars,
                                      const tir_expr_t* const* values);
const tir_stmt_t* tir_substitute_stmt(tir_ctx_t* c, const tir_stmt_t* s, int32_t n,
                                      const tir_var_t* const* vars,
                                      const tir_expr_t* const* values);

/* Interval [lo, hi] of an integer expression given var ranges
 * (vars[i] in [lo[i], hi[i]]). Returns false when it cannot bound it. */
bool tir_expr_bounds(const tir_expr_t* e, int32_t n, const tir_var_t* const* vars,
                     const int64_t* lo, const int64_t* hi, int64_t* out_lo, int64_t* out_hi);

#ifdef __cplusplus
}
#endif
#endif /* KILN_IR_TIR_H_ */
