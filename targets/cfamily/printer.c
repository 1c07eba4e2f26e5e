/* The C-family printer: one expression/statement printer for C, OpenCL C
 * and GLSL, configured by the dialect tables (printer_dialects.c). This file
 * holds what every part of the walk shares (see printer_impl.h for the
 * split): the output buffer, the error, names and buffer scoping, and the
 * template expander. */
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>

#include "targets/cfamily/printer_impl.h"

/* ---- output buffer ---------------------------------------------------- */

void kiln_cf_out_init(kiln_cf_out_t* o) { memset(o, 0, sizeof(*o)); }

void kiln_cf_out_free(kiln_cf_out_t* o) {
  free(o->data);
  memset(o, 0, sizeof(*o));
}

static bool out_reserve(kiln_cf_out_t* o, size_t extra) {
  if (o->oom) return false;
  if (o->len + extra + 1 <= o->cap) return true;
  size_t nc = o->cap ? o->cap : 4096;
  while (nc < o->len + extra + 1) nc *= 2;
  char* q = realloc(o->data, nc);
  if (!q) {
    o->oom = true;
    return false;
  }
  o->data = q;
  o->cap = nc;
  return true;
}

static void out_write(kiln_cf_out_t* o, const char* s, size_t n) {
  if (!out_reserve(o, n)) return;
  memcpy(o->data + o->len, s, n);
  o->len += n;
  o->data[o->len] = 0;
}

void kiln_cf_out_puts(kiln_cf_out_t* o, const char* s) { out_write(o, s, strlen(s)); }

void kiln_cf_out_printf(kiln_cf_out_t* o, const char* fmt, ...) {
  char small[256];
  va_list ap;
  va_start(ap, fmt);
  int n = vsnprintf(small, sizeof small, fmt, ap);
  va_end(ap);
  if (n < 0) return;
  if ((size_t)n < sizeof small) {
    out_write(o, small, (size_t)n);
    return;
  }
  if (!out_reserve(o, (size_t)n)) return;
  va_start(ap, fmt);
  vsnprintf(o->data + o->len, (size_t)n + 1, fmt, ap);
  va_end(ap);
  o->len += (size_t)n;
}

/* ---- printer state ---------------------------------------------------- */

void kiln_cf_fail(pr_t* p, kiln_status_code_t code, const char* fmt, ...) {
  if (p->err) return;
  char msg[512];
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(msg, sizeof msg, fmt, ap);
  va_end(ap);
  p->err = kiln_make_status(code, "%s kernel '%s': %s", p->d->name, p->f ? p->f->name : "?", msg);
}

/* Identifier text: [A-Za-z0-9_] kept, others '_', a leading digit gets 'v'. */
static void put_ident(pr_t* p, const char* name) {
  char buf[56];
  size_t n = 0;
  if (!name || !*name) name = "t";
  if (name[0] >= '0' && name[0] <= '9') buf[n++] = 'v';
  for (const char* c = name; *c && n < 48; ++c) {
    char ch = *c;
    bool ok = (ch >= 'a' && ch <= 'z') || (ch >= 'A' && ch <= 'Z') || (ch >= '0' && ch <= '9');
    buf[n++] = ok ? ch : '_';
  }
  buf[n] = 0;
  put(p, buf);
}

/* Canonical number of a var/buffer; -1 when the table is full (the kernel
 * then prints its real names and simply never matches another). */
static int32_t seen_index(pr_t* p, const void* obj) {
  for (int32_t i = 0; i < p->nseen; ++i)
    if (p->seen[i] == obj) return i;
  if (p->nseen >= MAX_SEEN) return -1;
  p->seen[p->nseen] = obj;
  return p->nseen++;
}

void kiln_cf_put_var(pr_t* p, const tir_var_t* v) {
  int32_t k = p->canon ? seen_index(p, v) : -1;
  if (k >= 0) {
    putf(p, "v%d", (int)k);
    return;
  }
  put_ident(p, v->name);
  putf(p, "_%d", (int)v->id);
}

void kiln_cf_put_buf(pr_t* p, const tir_buffer_t* b) {
  int32_t k = p->canon ? seen_index(p, b) : -1;
  if (k >= 0) {
    putf(p, "p%d", (int)k);
    return;
  }
  put_ident(p, b->name);
  putf(p, "_b%d", (int)b->id);
}

static bool is_param(const pr_t* p, const tir_buffer_t* b) {
  for (int32_t i = 0; i < p->f->n_params; ++i)
    if (p->f->params[i] == b) return true;
  return false;
}

static bool in_scope(const pr_t* p, const tir_buffer_t* b) {
  if (b->scope == TIR_SCOPE_GLOBAL) return is_param(p, b);
  for (int32_t i = 0; i < p->ns; ++i)
    if (p->scoped[i] == b) return true;
  return false;
}

void kiln_cf_check_buf(pr_t* p, const tir_buffer_t* b) {
  if (in_scope(p, b)) return;
  if (b->scope == TIR_SCOPE_GLOBAL)
    kiln_cf_fail(p, KILN_INVALID_ARGUMENT, "buffer '%s' is used but is not a kernel parameter",
                 b->name);
  else
    kiln_cf_fail(p, KILN_INVALID_ARGUMENT, "buffer '%s' is used outside its allocation", b->name);
}

/* ---- templates -------------------------------------------------------- */

static void put_arg(pr_t* p, const targ_t* a) {
  switch (a->kind) {
    case A_EXPR: kiln_cf_expr(p, a->e, P_COND); break;
    case A_VEXPR: kiln_cf_vexpr(p, a->e, P_COND); break;
    case A_TEXT: put(p, a->text); break;
    default: break;
  }
}

void kiln_cf_tpl(pr_t* p, const char* fmt, const tctx_t* c) {
  if (!fmt) {
    kiln_cf_fail(p, KILN_INTERNAL, "dialect has no template for this construct");
    return;
  }
  const char* s = fmt;
  while (*s) {
    const char* dollar = strchr(s, '$');
    if (!dollar) {
      put(p, s);
      return;
    }
    kiln_cf_out_printf(p->o, "%.*s", (int)(dollar - s), s);
    char k = dollar[1];
    switch (k) {
      case '1': case '2': case '3': put_arg(p, &c->a[k - '1']); break;
      case 'B': kiln_cf_put_buf(p, c->buf); break;
      case 'I': kiln_cf_put_index(p, c->buf, c->idx); break;
      case 'V': put_arg(p, &c->v); break;
      case 'T': put(p, c->t ? c->t : ""); break;
      case 'U': put(p, c->u ? c->u : ""); break;
      case 'W': case 'N': putf(p, "%lld", (long long)c->n); break;
      default: putf(p, "$%c", k); break;
    }
    s = dollar + (k ? 2 : 1);
  }
}
