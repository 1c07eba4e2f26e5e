/* Private to the C-family printer (targets/cfamily/printer*.c): the printer
 * state and the helpers its files share. Not for use outside this folder.
 *
 * The printer is one recursive walk over a kernel's tensor IR that appends
 * text to a kiln_cf_out_t, split by concern:
 *   printer.c       output buffer, names, buffer scoping, error, templates
 *   printer_expr.c  scalar expressions (C precedence, wrapping, f16 rounding)
 *   printer_vec.c   vectorisation: which VECTORIZED loops print as vector
 *                   code, and their vector expressions
 *   printer_stmt.c  statements and loops (pragmas, bound ids, allocations)
 *   printer_unit.c  kernel signatures per dialect, prelude and epilogue,
 *                   and the public kernel / unit entry points
 * The first error is kept in pr_t.err and the walk keeps going (cheaply),
 * so the entry points check one status at the end. */
#ifndef KILN_TARGETS_CFAMILY_PRINTER_IMPL_H_
#define KILN_TARGETS_CFAMILY_PRINTER_IMPL_H_

#include <string.h>

#include "targets/cfamily/printer.h"

enum { /* C operator precedence, higher binds tighter */
  P_ANY = 0, P_COND = 3, P_LOR = 4, P_LAND = 5, P_BOR = 6, P_BXOR = 7, P_BAND = 8,
  P_EQ = 9, P_REL = 10, P_SHIFT = 11, P_ADD = 12, P_MUL = 13, P_UNARY = 14, P_PRIMARY = 16,
};

#define MAX_DEPTH 64
#define MAX_SEEN 2048
#define MAX_BIND 64
#define MAX_TPRIV 16

typedef struct pr_s {
  const kiln_cf_dialect_t* d;
  const tir_func_t* f;
  kiln_cf_out_t* o;
  kiln_status_t err;
  int32_t ind;
  bool in_par;  /* inside a loop printed with the parallel pragma */
  bool in_simd; /* inside a loop printed with the simd pragma */
  /* loop variable ranges, innermost last (bounds analysis) */
  const tir_var_t* vars[MAX_DEPTH];
  int64_t lo[MAX_DEPTH], hi[MAX_DEPTH];
  int32_t nv;
  /* scoped buffers in scope (params are checked separately) */
  const tir_buffer_t* scoped[MAX_DEPTH];
  int32_t ns;
  /* vector mode: the lane variable and lane count */
  const tir_var_t* lane;
  int32_t w;
  /* launch dims (GPU dialects) for guarding bound loops */
  int64_t groups[3], local[3];
  /* canonical naming: objects numbered in order of first appearance */
  bool canon;
  const void* seen[MAX_SEEN];
  int32_t nseen;
  /* C vector selects whose operands recur in their condition (MaxPool's
   * running maximum): operands bound to locals kiln_s<id> of a statement
   * expression, printed once each instead of once per use (printer_vec.c) */
  const tir_expr_t* bind_e[MAX_BIND];
  int32_t bind_id[MAX_BIND];
  int32_t nbind, nbound;
  /* vec_texels dialects: bit i set when parameter i is a texel view
   * (stexel: a written one); during the scan, tex_cand holds the
   * parameters still allowed to be one (printer_vec.c) */
  uint64_t texel, stexel, tex_cand;
  uint64_t wtexel; /* of those, written f32 ones never loaded (set by the scan): tex_sdecl / tex_sstore */
  bool tex_scan;
  /* and the PRIVATE f32 rows the vector loops use, declared as vec4 rows */
  const tir_buffer_t* tpriv[MAX_TPRIV];
  int32_t n_tpriv;
  bool tpriv_over;
  uint64_t tex_max; /* kiln_cf_kernel_info_t.texels */
  bool tex_half;    /* kiln_cf_kernel_info_t.texels_f16 */
} pr_t;

/* ---- text ------------------------------------------------------------- */

static inline void put(pr_t* p, const char* s) { kiln_cf_out_puts(p->o, s); }
#define putf(p, ...) kiln_cf_out_printf((p)->o, __VA_ARGS__)

/* Indentation of a new line. */
static inline void line(pr_t* p) {
  for (int32_t i = 0; i < p->ind; ++i) put(p, "  ");
}

/* "(" when an operator binding at |own| sits where |need| is required. */
static inline bool open_p(pr_t* p, int own, int need) {
  if (own < need) put(p, "(");
  return own < need;
}
static inline void close_p(pr_t* p, bool opened) {
  if (opened) put(p, ")");
}

/* Keeps the first error (code and message, naming the dialect and kernel). */
void kiln_cf_fail(pr_t* p, kiln_status_code_t code, const char* fmt, ...) KILN_PRINTF(3, 4);

/* <name>_<id> / <name>_b<id>, or v<n> / p<n> in canonical form. */
void kiln_cf_put_var(pr_t* p, const tir_var_t* v);
void kiln_cf_put_buf(pr_t* p, const tir_buffer_t* b);

/* Fails unless |b| is a parameter (GLOBAL) or an allocation in scope. */
void kiln_cf_check_buf(pr_t* p, const tir_buffer_t* b);

/* ---- types ------------------------------------------------------------ */

/* Value type / storage type name of a dtype in the dialect. */
static inline const char* vtype(const pr_t* p, kiln_dtype_t t) {
  const char* s = (t > 0 && t < KILN_DTYPE_COUNT_) ? p->d->value_types[t] : NULL;
  return s ? s : "int";
}
static inline const char* stype(const pr_t* p, kiln_dtype_t t) {
  const char* s = (t > 0 && t < KILN_DTYPE_COUNT_) ? p->d->types[t] : NULL;
  return s ? s : "int";
}
static inline bool is_narrow(kiln_dtype_t t) {
  return t == KILN_DTYPE_I8 || t == KILN_DTYPE_U8 || t == KILN_DTYPE_BOOL ||
         t == KILN_DTYPE_I16 || t == KILN_DTYPE_U16;
}
static inline bool is_float(kiln_dtype_t t) {
  return t == KILN_DTYPE_F32 || t == KILN_DTYPE_F16 || t == KILN_DTYPE_F64;
}
/* F64 helper |d64| where the value is F64, else the float one. */
static inline const char* fsel(kiln_dtype_t t, const char* f32, const char* d64) {
  return t == KILN_DTYPE_F64 ? d64 : f32;
}

/* F16 values are the language's half type (kiln_cf_dialect_native_half),
 * not floats on the half grid. */
static inline bool half_native(const pr_t* p) {
  return strcmp(vtype(p, KILN_DTYPE_F16), vtype(p, KILN_DTYPE_F32)) != 0;
}

/* ---- templates (see the placeholders in printer.h) -------------------- */

typedef enum { A_NONE, A_EXPR, A_VEXPR, A_TEXT } arg_kind_t;
typedef struct targ_s {
  arg_kind_t kind;
  const tir_expr_t* e;
  const char* text;
} targ_t;

typedef struct tctx_s {
  targ_t a[3];
  const tir_buffer_t* buf;        /* $B */
  const tir_expr_t* const* idx;   /* $I */
  targ_t v;                       /* $V */
  const char* t;                  /* $T */
  const char* u;                  /* $U */
  int64_t n;                      /* $W / $N */
} tctx_t;

static inline targ_t aex(const tir_expr_t* e) { return (targ_t){A_EXPR, e, NULL}; }
static inline targ_t avex(const tir_expr_t* e) { return (targ_t){A_VEXPR, e, NULL}; }
static inline targ_t atext(const char* s) { return (targ_t){A_TEXT, NULL, s}; }

/* Expands |fmt|; a NULL template (the dialect lacks the construct) fails. */
void kiln_cf_tpl(pr_t* p, const char* fmt, const tctx_t* c);

/* ---- expressions (printer_expr.c) ------------------------------------- */

/* |e| with C precedence, parenthesised when it binds looser than |need|. */
void kiln_cf_expr(pr_t* p, const tir_expr_t* e, int need);
/* The flattened element index of b[idx] (per dimension for kiln_cf_md_array). */
void kiln_cf_put_index(pr_t* p, const tir_buffer_t* b, const tir_expr_t* const* idx);
/* GLSL private/shared arrays declared with their shape (float acc[8][32]). */
bool kiln_cf_md_array(const pr_t* p, const tir_buffer_t* b);
/* a OP b; operands are vector expressions when |vector|, as below. */
void kiln_cf_infix(pr_t* p, const tir_expr_t* a, const char* op, const tir_expr_t* b, int own,
                   bool assoc, int need, bool vector);
/* cond ? t : f (a scalar condition) and FMA as a * b + c. */
void kiln_cf_select(pr_t* p, const tir_expr_t* e, int need, bool vector);
void kiln_cf_fma(pr_t* p, const tir_expr_t* e, int need, bool vector);
const char* kiln_cf_binop_text(tir_binop_t op);
int kiln_cf_binop_prec(tir_binop_t op);

/* ---- vectorisation (printer_vec.c) ------------------------------------ */

/* Lane count for printing VECTORIZED loop |s| as explicit vectors, or 0
 * when the dialect has no vectors or the body does not qualify. */
int32_t kiln_cf_vec_width(pr_t* p, const tir_stmt_t* s);
/* |e| as a W-lane f32 vector or lane mask (inside a vector loop). */
void kiln_cf_vexpr(pr_t* p, const tir_expr_t* e, int need);
/* vec_texels dialects: which parameters are texel views (p->texel,
 * p->stexel), from the VECTORIZED loops that can print as vectors. */
void kiln_cf_texel_scan(pr_t* p);
/* The parameter index of |b| when it is a texel view, else -1. */
int32_t kiln_cf_texel_param(const pr_t* p, const tir_buffer_t* b);
/* Whether |b| is a PRIVATE row printed as vec4s (vec_texels). */
bool kiln_cf_texel_private(const pr_t* p, const tir_buffer_t* b);
/* The dialect's narrowing vector store into a u8 / i8 buffer of |t|, or NULL. */
const char* kiln_cf_vstore_byte(const pr_t* p, kiln_dtype_t t);
/* Whether |e| is f32(f64(a) * f64(b)) of f32 a and b (either may be an f64
 * constant that f32 holds exactly): the f32 product rounded once, which
 * the dialect's mulr / vmulr print unfused. Sets *a and *b (f32
 * expressions, or those constants). */
bool kiln_cf_f32_product(const tir_expr_t* e, const tir_expr_t** a, const tir_expr_t** b);

/* ---- statements (printer_stmt.c) -------------------------------------- */

void kiln_cf_stmt(pr_t* p, const tir_stmt_t* s);
/* Declaration of a PRIVATE/LOCAL array (|big|: thread-local static, C). */
void kiln_cf_put_array_decl(pr_t* p, const char* qual, const tir_buffer_t* b, bool big);

#endif /* KILN_TARGETS_CFAMILY_PRINTER_IMPL_H_ */
