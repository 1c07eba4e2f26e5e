/* The C-family printer's units (see printer_impl.h): kernel-level scans
 * (stores, LOCAL allocations, bound launch dims, f16 arithmetic), the kernel
 * signature per dialect (C argv, OpenCL parameter list, GLSL bindings and
 * layout), and the public entry points that print one kernel, the prelude,
 * or a whole unit (prelude, kernels, epilogue). */
#include <stdio.h>
#include <stdlib.h>

#include "targets/cfamily/printer_impl.h"
#include "ir/fnv.h"

/* ---- kernel-level scans ----------------------------------------------- */

static bool stores_to(const tir_stmt_t* s, const tir_buffer_t* b) {
  if (!s) return false;
  switch (s->kind) {
    case TIR_STORE: return s->u.store.buf == b;
    case TIR_FOR: return stores_to(s->u.loop.body, b);
    case TIR_SEQ:
      for (int32_t i = 0; i < s->u.seq.n; ++i)
        if (stores_to(s->u.seq.items[i], b)) return true;
      return false;
    case TIR_IF: return stores_to(s->u.cond.then_s, b) || stores_to(s->u.cond.else_s, b);
    case TIR_ALLOC: return stores_to(s->u.alloc.body, b);
    default: return false;
  }
}

typedef void (*alloc_fn)(pr_t* p, const tir_buffer_t* b);

static void each_local(pr_t* p, const tir_stmt_t* s, alloc_fn fn) {
  if (!s) return;
  switch (s->kind) {
    case TIR_FOR: each_local(p, s->u.loop.body, fn); return;
    case TIR_SEQ:
      for (int32_t i = 0; i < s->u.seq.n; ++i) each_local(p, s->u.seq.items[i], fn);
      return;
    case TIR_IF:
      each_local(p, s->u.cond.then_s, fn);
      each_local(p, s->u.cond.else_s, fn);
      return;
    case TIR_ALLOC:
      if (s->u.alloc.buf->scope == TIR_SCOPE_LOCAL) fn(p, s->u.alloc.buf);
      each_local(p, s->u.alloc.body, fn);
      return;
    default: return;
  }
}

static void decl_local(pr_t* p, const tir_buffer_t* b) {
  kiln_cf_put_array_decl(p, p->d->local_qualifier, b, false);
}

static void bound_dims(const tir_stmt_t* s, int64_t g[3], int64_t l[3]) {
  if (!s) return;
  switch (s->kind) {
    case TIR_FOR:
      if (s->u.loop.kind == TIR_LOOP_BOUND) {
        int t = (int)s->u.loop.tag;
        int64_t* slot = NULL;
        if (t >= TIR_BLOCK_X && t <= TIR_BLOCK_Z) slot = &g[t - TIR_BLOCK_X];
        if (t >= TIR_THREAD_X && t <= TIR_THREAD_Z) slot = &l[t - TIR_THREAD_X];
        if (slot && s->u.loop.extent > *slot) *slot = s->u.loop.extent;
      }
      bound_dims(s->u.loop.body, g, l);
      return;
    case TIR_SEQ:
      for (int32_t i = 0; i < s->u.seq.n; ++i) bound_dims(s->u.seq.items[i], g, l);
      return;
    case TIR_IF:
      bound_dims(s->u.cond.then_s, g, l);
      bound_dims(s->u.cond.else_s, g, l);
      return;
    case TIR_ALLOC: bound_dims(s->u.alloc.body, g, l); return;
    default: return;
  }
}

void kiln_cf_launch_dims(const tir_func_t* f, int64_t groups[3], int64_t local[3]) {
  for (int i = 0; i < 3; ++i) groups[i] = local[i] = 1;
  if (f) bound_dims(f->body, groups, local);
}

static bool uses_dtype(const tir_func_t* f, kiln_dtype_t t) {
  for (int32_t i = 0; i < f->n_params; ++i)
    if (f->params[i]->dtype == t) return true;
  return false;
}

static bool expr_f16_math(const tir_expr_t* e) {
  if (!e) return false;
  switch (e->kind) {
    case TIR_BINARY:
      return e->dtype == KILN_DTYPE_F16 || expr_f16_math(e->u.bin.a) || expr_f16_math(e->u.bin.b);
    case TIR_CALL:
      if (e->dtype == KILN_DTYPE_F16) return true;
      for (int32_t i = 0; i < e->u.call.n && i < 3; ++i)
        if (expr_f16_math(e->u.call.args[i])) return true;
      return false;
    case TIR_SELECT:
      return expr_f16_math(e->u.sel.cond) || expr_f16_math(e->u.sel.t) || expr_f16_math(e->u.sel.f);
    case TIR_CAST: return expr_f16_math(e->u.cast.value);
    case TIR_LOAD:
      for (int32_t i = 0; i < e->u.load.buf->rank; ++i)
        if (expr_f16_math(e->u.load.idx[i])) return true;
      return false;
    default: return false;
  }
}

static bool stmt_f16_math(const tir_stmt_t* s) {
  if (!s) return false;
  switch (s->kind) {
    case TIR_FOR: return stmt_f16_math(s->u.loop.body);
    case TIR_STORE:
      for (int32_t i = 0; i < s->u.store.buf->rank; ++i)
        if (expr_f16_math(s->u.store.idx[i])) return true;
      return expr_f16_math(s->u.store.value);
    case TIR_SEQ:
      for (int32_t i = 0; i < s->u.seq.n; ++i)
        if (stmt_f16_math(s->u.seq.items[i])) return true;
      return false;
    case TIR_IF:
      return expr_f16_math(s->u.cond.cond) || stmt_f16_math(s->u.cond.then_s) || stmt_f16_math(s->u.cond.else_s);
    case TIR_ALLOC: return stmt_f16_math(s->u.alloc.body);
    default: return false;
  }
}

bool kiln_cf_func_computes_f16(const tir_func_t* f) { return f && stmt_f16_math(f->body); }

/* ---- kernels ---------------------------------------------------------- */

bool kiln_cf_valid_kernel_name(const char* s) {
  static const char* const kw[] = {
      "auto", "break", "case", "char", "const", "continue", "default", "do", "double", "else",
      "enum", "extern", "float", "for", "goto", "if", "inline", "int", "long", "register",
      "restrict", "return", "short", "signed", "sizeof", "static", "struct", "switch",
      "typedef", "union", "unsigned", "void", "volatile", "while", "main", "kernel",
      "global", "local", "private", "constant", "half", "bool", "uint", "ulong", "uchar"};
  if (!s || !*s || strlen(s) > 200) return false;
  if (!((*s >= 'a' && *s <= 'z') || (*s >= 'A' && *s <= 'Z') || *s == '_')) return false;
  for (const char* c = s; *c; ++c)
    if (!((*c >= 'a' && *c <= 'z') || (*c >= 'A' && *c <= 'Z') || (*c >= '0' && *c <= '9') ||
          *c == '_'))
      return false;
  if (strncmp(s, "kiln_", 5) == 0 || strncmp(s, "__", 2) == 0) return false;
  for (size_t i = 0; i < sizeof kw / sizeof kw[0]; ++i)
    if (strcmp(s, kw[i]) == 0) return false;
  return true;
}

static void param_decl(pr_t* p, int32_t i, const kiln_cf_kernel_info_t* info, bool ptr) {
  const tir_buffer_t* b = p->f->params[i];
  const kiln_cf_dialect_t* d = p->d;
  bool ro = !stores_to(p->f->body, b);
  bool noalias = !info || !info->param_noalias || info->param_noalias[i];
  putf(p, "%s%s%s%s", d->buffer_qualifier, ro ? d->readonly_qualifier : "", stype(p, b->dtype),
       ptr ? "* " : " ");
  if (noalias && ptr) put(p, d->restrict_qualifier);
  kiln_cf_put_buf(p, b);
}

/* The first dtype in |e| / |s| the dialect has no type for (an F64 or
 * wide-int value in GLSL), or UNDEFINED: printing it as the "int" fallback
 * would be silently wrong. */
static kiln_dtype_t expr_missing_type(const pr_t* p, const tir_expr_t* e) {
  if (!e) return KILN_DTYPE_UNDEFINED;
  if (e->dtype > KILN_DTYPE_UNDEFINED && e->dtype < KILN_DTYPE_COUNT_ && !p->d->types[e->dtype])
    return e->dtype;
  kiln_dtype_t t = KILN_DTYPE_UNDEFINED;
  switch (e->kind) {
    case TIR_BINARY:
      t = expr_missing_type(p, e->u.bin.a);
      return t ? t : expr_missing_type(p, e->u.bin.b);
    case TIR_SELECT:
      t = expr_missing_type(p, e->u.sel.cond);
      if (!t) t = expr_missing_type(p, e->u.sel.t);
      return t ? t : expr_missing_type(p, e->u.sel.f);
    case TIR_CAST: return expr_missing_type(p, e->u.cast.value);
    case TIR_CALL:
      for (int32_t i = 0; i < e->u.call.n && i < 3 && !t; ++i) t = expr_missing_type(p, e->u.call.args[i]);
      return t;
    case TIR_LOAD:
      for (int32_t i = 0; i < e->u.load.buf->rank && !t; ++i) t = expr_missing_type(p, e->u.load.idx[i]);
      return t;
    default: return KILN_DTYPE_UNDEFINED;
  }
}

static kiln_dtype_t stmt_missing_type(const pr_t* p, const tir_stmt_t* s) {
  if (!s) return KILN_DTYPE_UNDEFINED;
  kiln_dtype_t t = KILN_DTYPE_UNDEFINED;
  switch (s->kind) {
    case TIR_FOR: return stmt_missing_type(p, s->u.loop.body);
    case TIR_STORE:
      for (int32_t i = 0; i < s->u.store.buf->rank && !t; ++i) t = expr_missing_type(p, s->u.store.idx[i]);
      return t ? t : expr_missing_type(p, s->u.store.value);
    case TIR_SEQ:
      for (int32_t i = 0; i < s->u.seq.n && !t; ++i) t = stmt_missing_type(p, s->u.seq.items[i]);
      return t;
    case TIR_IF:
      t = expr_missing_type(p, s->u.cond.cond);
      if (!t) t = stmt_missing_type(p, s->u.cond.then_s);
      return t ? t : stmt_missing_type(p, s->u.cond.else_s);
    case TIR_ALLOC: {
      kiln_dtype_t b = s->u.alloc.buf->dtype;
      if (b > KILN_DTYPE_UNDEFINED && b < KILN_DTYPE_COUNT_ && !p->d->types[b]) return b;
      return stmt_missing_type(p, s->u.alloc.body);
    }
    default: return KILN_DTYPE_UNDEFINED;
  }
}

/* |t| anywhere in |f| (a parameter, an allocation or a value): the
 * missing-type walk over a dialect lacking only |t| finds exactly those. */
bool kiln_cf_func_uses_dtype(const tir_func_t* f, kiln_dtype_t t) {
  if (!f) return false;
  for (int32_t i = 0; i < f->n_params; ++i)
    if (f->params[i]->dtype == t) return true;
  kiln_cf_dialect_t d = kiln_cf_dialect_c;
  for (int k = 1; k < KILN_DTYPE_COUNT_; ++k) d.types[k] = k == (int)t ? NULL : "x";
  pr_t p;
  memset(&p, 0, sizeof p);
  p.d = &d;
  return stmt_missing_type(&p, f->body) == t;
}

static kiln_status_t check_func(pr_t* p) {
  const tir_func_t* f = p->f;
  if (!f || !f->body) return kiln_make_status(KILN_INVALID_ARGUMENT, "NULL kernel");
  if (!kiln_cf_valid_kernel_name(f->name))
    return kiln_make_status(KILN_INVALID_ARGUMENT,
                            "kernel name '%s' is not a C identifier the printer accepts "
                            "(letters, digits, '_'; not a keyword; no kiln_/__ prefix)",
                            f->name ? f->name : "(null)");
  for (int32_t i = 0; i < f->n_params; ++i) {
    const tir_buffer_t* b = f->params[i];
    if (!b) return kiln_make_status(KILN_INVALID_ARGUMENT, "kernel '%s': parameter %d is NULL",
                                    f->name, (int)i);
    if (b->scope != TIR_SCOPE_GLOBAL)
      return kiln_make_status(KILN_INVALID_ARGUMENT,
                              "kernel '%s': parameter '%s' is not a GLOBAL buffer", f->name,
                              b->name);
    if (b->dtype <= KILN_DTYPE_UNDEFINED || b->dtype >= KILN_DTYPE_COUNT_)
      return kiln_make_status(KILN_INVALID_ARGUMENT, "kernel '%s': parameter '%s' has no dtype",
                              f->name, b->name);
    for (int32_t j = 0; j < i; ++j)
      if (f->params[j] == b)
        return kiln_make_status(KILN_INVALID_ARGUMENT,
                                "kernel '%s': buffer '%s' is passed twice", f->name, b->name);
    if (!p->d->types[b->dtype])
      return kiln_make_status(KILN_UNSUPPORTED, "kernel '%s': parameter '%s' has dtype %s, which the %s "
                              "dialect does not support", f->name, b->name, kiln_dtype_name(b->dtype), p->d->name);
  }
  kiln_dtype_t missing = stmt_missing_type(p, f->body);
  if (missing)
    return kiln_make_status(KILN_UNSUPPORTED, "kernel '%s' computes in %s, which the %s dialect does not support",
                            f->name, kiln_dtype_name(missing), p->d->name);
  return NULL;
}

static void kernel_c(pr_t* p, const kiln_cf_kernel_info_t* info) {
  const tir_func_t* f = p->f;
  putf(p, "%s%s(void* const* args) {\n", p->d->kernel_prefix, p->canon ? "KILN_KERNEL" : f->name);
  p->ind = 1;
  if (f->n_params == 0) put(p, "  (void)args;\n");
  for (int32_t i = 0; i < f->n_params; ++i) {
    const tir_buffer_t* b = f->params[i];
    bool ro = !stores_to(f->body, b);
    line(p);
    param_decl(p, i, info, true);
    putf(p, " = (%s%s*)args[%d];\n", ro ? p->d->readonly_qualifier : "", stype(p, b->dtype),
         (int)i);
  }
  kiln_cf_stmt(p, f->body);
  put(p, "}\n\n");
}

static void kernel_opencl(pr_t* p, const kiln_cf_kernel_info_t* info) {
  const tir_func_t* f = p->f;
  bool threads = p->local[0] > 1 || p->local[1] > 1 || p->local[2] > 1;
  put(p, p->d->kernel_prefix);
  if (threads && p->d->workgroup_size_attr) {
    char a[3][24];
    for (int i = 0; i < 3; ++i) snprintf(a[i], sizeof a[i], "%lld", (long long)p->local[i]);
    kiln_cf_tpl(p, p->d->workgroup_size_attr,
        &(tctx_t){.a = {atext(a[0]), atext(a[1]), atext(a[2])}});
    put(p, " ");
  }
  putf(p, "void %s(", p->canon ? "KILN_KERNEL" : f->name);
  for (int32_t i = 0; i < f->n_params; ++i) {
    if (i) put(p, ", ");
    param_decl(p, i, info, true);
  }
  put(p, ") {\n");
  p->ind = 1;
  each_local(p, f->body, decl_local);
  kiln_cf_stmt(p, f->body);
  put(p, "}\n\n");
}

static void kernel_glsl(pr_t* p, const kiln_cf_kernel_info_t* info) {
  const tir_func_t* f = p->f;
  const kiln_cf_dialect_t* d = p->d;
  bool i64 = uses_dtype(f, KILN_DTYPE_I64);
  bool i8 = uses_dtype(f, KILN_DTYPE_I8) || uses_dtype(f, KILN_DTYPE_U8) ||
            uses_dtype(f, KILN_DTYPE_BOOL);
  bool f16 = uses_dtype(f, KILN_DTYPE_F16);
  bool i16 = uses_dtype(f, KILN_DTYPE_I16) || uses_dtype(f, KILN_DTYPE_U16);
  putf(p, "#version 450\n// kiln kernel %s\n", p->canon ? "KILN_KERNEL" : f->name);
  /* int64 is always enabled: I64 casts and helpers may appear in any kernel */
  put(p, "#extension GL_EXT_shader_explicit_arithmetic_types_int64 : require\n");
  put(p, "#extension GL_EXT_control_flow_attributes : require\n");
  if (i8) put(p, "#extension GL_EXT_shader_8bit_storage : require\n"
                 "#extension GL_EXT_shader_explicit_arithmetic_types_int8 : require\n");
  if (f16 || i16) put(p, "#extension GL_EXT_shader_16bit_storage : require\n");
  if (f16) put(p, "#extension GL_EXT_shader_explicit_arithmetic_types_float16 : require\n");
  if (i16) put(p, "#extension GL_EXT_shader_explicit_arithmetic_types_int16 : require\n");
  (void)i64;
  putf(p, "layout(local_size_x = %lld, local_size_y = %lld, local_size_z = %lld) in;\n",
       (long long)p->local[0], (long long)p->local[1], (long long)p->local[2]);
  p->tex_max = info ? info->texels : 0;
  p->tex_half = info && info->texels_f16;
  kiln_cf_texel_scan(p);
  for (int32_t i = 0; i < f->n_params; ++i) {
    const tir_buffer_t* b = f->params[i];
    if (i < 64 && (p->texel >> i & 1)) { /* a texel view (vec_texels) */
      const bool noalias = !info || !info->param_noalias || info->param_noalias[i];
      const bool half = b->dtype == KILN_DTYPE_F16, ro = !(p->stexel >> i & 1);
      char q[64];
      snprintf(q, sizeof q, "%s%s", noalias ? d->restrict_qualifier : "", half && ro ? d->readonly_qualifier : "");
      tctx_t c = {.buf = b, .n = i, .t = q};
      kiln_cf_tpl(p, half ? d->tex_hdecl : ro ? d->tex_decl : (p->wtexel >> i & 1) ? d->tex_sdecl : d->tex_idecl, &c);
      put(p, "\n");
      continue;
    }
    bool ro = !stores_to(f->body, b);
    bool noalias = !info || !info->param_noalias || info->param_noalias[i];
    putf(p, "layout(std430, set = 0, binding = %d) %s%sbuffer kiln_p%d { %s ", (int)i,
         noalias ? d->restrict_qualifier : "", ro ? d->readonly_qualifier : "", (int)i,
         stype(p, b->dtype));
    kiln_cf_put_buf(p, b);
    put(p, "[]; };\n");
  }
  p->ind = 0;
  each_local(p, f->body, decl_local);
  put(p, d->prelude);
  put(p, "void main() {\n");
  p->ind = 1;
  kiln_cf_stmt(p, f->body);
  put(p, "}\n");
}

kiln_status_t kiln_cf_check_types(const kiln_cf_dialect_t* d, const tir_func_t* f) {
  pr_t p;
  memset(&p, 0, sizeof p);
  p.d = d;
  p.f = f;
  return check_func(&p);
}

kiln_status_t kiln_cf_print_kernel(const kiln_cf_dialect_t* d, const tir_func_t* f,
                                   const kiln_cf_kernel_info_t* info, kiln_cf_out_t* out) {
  pr_t p;
  memset(&p, 0, sizeof p);
  p.d = d;
  p.f = f;
  p.o = out;
  p.canon = info && info->canonical;
  kiln_status_t s = check_func(&p);
  if (s) return s;
  kiln_cf_launch_dims(f, p.groups, p.local);
  switch (d->params) {
    case KILN_CF_PARAMS_ARGV: kernel_c(&p, info); break;
    case KILN_CF_PARAMS_LIST: kernel_opencl(&p, info); break;
    case KILN_CF_PARAMS_BINDINGS: kernel_glsl(&p, info); break;
  }
  if (p.err) return p.err;
  if (out->oom)
    return kiln_make_status(KILN_OUT_OF_MEMORY, "out of memory printing kernel '%s'", f->name);
  return NULL;
}

kiln_status_t kiln_cf_print_prelude(const kiln_cf_dialect_t* d, kiln_cf_out_t* out) {
  if (d->params == KILN_CF_PARAMS_BINDINGS) return NULL; /* part of each shader */
  kiln_cf_out_printf(out, "/* generated by kiln (%s dialect) */\n", d->name);
  if (d->extensions) kiln_cf_out_puts(out, d->extensions);
  kiln_cf_out_puts(out, d->prelude);
  return out->oom ? kiln_make_status(KILN_OUT_OF_MEMORY, "out of memory printing prelude") : NULL;
}

/* Kernel names become symbols, so they must differ: checked through a hash
 * set (a pairwise scan is quadratic in a plan of 100k kernels). */
static kiln_status_t unique_names(const tir_func_t* const* funcs, int32_t n) {
  uint32_t cap = 16;
  while (cap < 2u * (uint32_t)n) cap <<= 1;
  int32_t* slot = calloc(cap, sizeof(int32_t)); /* index + 1, 0 = empty */
  if (!slot) return kiln_make_status(KILN_OUT_OF_MEMORY, "out of memory checking kernel names");
  kiln_status_t s = NULL;
  for (int32_t i = 0; i < n && !s; ++i) {
    const uint64_t h = kiln_fnv1a(funcs[i]->name, strlen(funcs[i]->name));
    uint32_t k = (uint32_t)h & (cap - 1);
    for (; slot[k]; k = (k + 1) & (cap - 1))
      if (strcmp(funcs[slot[k] - 1]->name, funcs[i]->name) == 0) {
        s = kiln_make_status(KILN_INVALID_ARGUMENT, "two kernels are named '%s'", funcs[i]->name);
        break;
      }
    slot[k] = i + 1;
  }
  free(slot);
  return s;
}

kiln_status_t kiln_cf_print_unit(const kiln_cf_dialect_t* d, const tir_func_t* const* funcs,
                                 int32_t n, const kiln_cf_kernel_info_t* infos,
                                 kiln_cf_out_t* out) {
  if (d->params == KILN_CF_PARAMS_BINDINGS && n != 1)
    return kiln_make_status(KILN_INVALID_ARGUMENT,
                            "%s: one kernel per shader, got %d", d->name, (int)n);
  for (int32_t i = 0; i < n; ++i)
    if (!funcs[i] || !funcs[i]->name)
      return kiln_make_status(KILN_INVALID_ARGUMENT, "kernel %d is NULL", (int)i);
  KILN_RETURN_IF_ERROR(unique_names(funcs, n));
  KILN_RETURN_IF_ERROR(kiln_cf_print_prelude(d, out));
  if (d->params != KILN_CF_PARAMS_BINDINGS) kiln_cf_out_puts(out, "\n");
  for (int32_t i = 0; i < n; ++i)
    KILN_RETURN_IF_ERROR(kiln_cf_print_kernel(d, funcs[i], infos ? &infos[i] : NULL, out));
  if (d->epilogue) kiln_cf_out_puts(out, d->epilogue);
  return out->oom ? kiln_make_status(KILN_OUT_OF_MEMORY, "out of memory printing source") : NULL;
}

kiln_status_t kiln_cf_print_value_fn(const kiln_cf_dialect_t* d, const char* name, const tir_var_t* v,
                                     const tir_expr_t* e, kiln_cf_out_t* out) {
  pr_t* p = calloc(1, sizeof *p); /* large (the canonical-name table) */
  if (!p) return kiln_make_status(KILN_OUT_OF_MEMORY, "%s: printing '%s'", d->name, name);
  p->d = d;
  p->o = out;
  const char* ft = vtype(p, KILN_DTYPE_F32);
  putf(p, "%s%s %s(%s ", d->lang == KILN_CF_LANG_C ? "static inline " : "", ft, name, ft);
  kiln_cf_put_var(p, v);
  if (d->constructor_casts) putf(p, ") {\n  return %s(", ft);
  else putf(p, ") {\n  return (%s)(", ft);
  kiln_cf_expr(p, e, P_ANY);
  put(p, ");\n}\n");
  kiln_status_t s = p->err;
  free(p);
  return s;
}
