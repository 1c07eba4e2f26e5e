/* Kernels that differ only in shape constants share one compiled body.
 *
 * Why: the C compiler's CPU time is most of a cold CPU compile, and a CNN
 * prints many kernels of one kind whose text differs only in numbers (the
 * 1x1 convs of a DenseNet block differ in their input channels: the trip
 * count of one loop and a few strides). Exact duplicates already print once
 * (cpu_codegen.c); here kernels whose canonical text is equal up to integer
 * literals print one body, `static void kiln_shared_G(void* const* args,
 * const int* kc)`, in which the literals that differ between the members
 * read kc[] (copied into locals at entry), and each member becomes a small
 * wrapper passing its numbers. Literals equal in all members stay literals.
 *
 * The rewrite is textual on the printer's output, and exact: a member's
 * numbers put back into the body give its own text again, so every choice
 * the printer made from its constants (plain / or floor division, shifts
 * for powers of two) is the member's own. An unsuffixed decimal literal
 * that fits an int has type int in C, and so has the parameter, so the
 * arithmetic is the same; larger or suffixed literals are never
 * parameters. What must stay a compile-time constant, or should for speed,
 * is kept out of the parameters (and then must be equal to share):
 *   - lines starting with '#' (pragmas: unroll counts, collapse depths);
 *   - declarations: array sizes (lines with an alignment attribute or
 *     _Thread_local, and any statement line without '=' but a prefetch);
 *   - a loop's step (`+= N`: the vector width) and the header of the loop
 *     under a `#pragma GCC unroll` (the register tile's trip count), so a
 *     micro-kernel's register tile keeps its sizes and is fully unrolled;
 *   - the header of an innermost loop: the compiler vectorizes and unrolls
 *     by its trip count (a DenseNet NCHWc -> NCHW reorder with its rows as
 *     a parameter ran 1.3x slower);
 *   - divisors (`/ N`, `% N`): by a constant, a division is a multiply and
 *     a shift; by a run-time value, a hardware divide (ResNet-50's strided
 *     3x3 convs ran 1.36x slower with their output width as a parameter).
 * The body is noipa (noinline for clang): inlined or cloned per caller,
 * the compiler would specialise it again for each member's constants.
 */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "targets/cpu/cpu_internal.h"
#include "ir/fnv.h"

static bool is_ident(char c) {
  return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') || c == '_';
}
static bool is_digit(char c) { return c >= '0' && c <= '9'; }

static bool starts_with(const char* s, const char* e, const char* p) {
  size_t n = strlen(p);
  return (size_t)(e - s) >= n && memcmp(s, p, n) == 0;
}

static bool line_has(const char* s, const char* e, const char* p) {
  size_t n = strlen(p);
  for (const char* c = s; c + n <= e; ++c)
    if (memcmp(c, p, n) == 0) return true;
  return false;
}

/* Whether the loop whose header line ends at |le| (with its body's '{')
 * has no loop inside it. */
static bool innermost(const char* le, const char* end) {
  if (le == end || le[-1] != '{') return true; /* a one-statement body */
  int depth = 1;
  for (const char* c = le; c < end && depth > 0; ++c) {
    if (*c == '{') depth++;
    else if (*c == '}') depth--;
    else if (*c == 'f' && c[-1] == ' ' && end - c > 5 && memcmp(c, "for (", 5) == 0) return false;
  }
  return true;
}

/* One literal the scan found: where it is and its value. */
typedef struct lit_s {
  size_t off, len;
  int32_t value;
} lit_t;

/* Calls |fn| on each integer literal of |text| that may become a parameter
 * (see the header comment), in order. Returns false when |fn| does. */
typedef bool (*lit_fn)(void* user, const lit_t* lit);

static bool scan_literals(const char* text, size_t len, lit_fn fn, void* user) {
  const char* end = text + len;
  bool after_unroll = false;
  for (const char* ls = text; ls < end;) {
    const char* le = memchr(ls, '\n', (size_t)(end - ls));
    if (!le) le = end;
    const char* t = ls;
    while (t < le && (*t == ' ' || *t == '\t')) ++t;
    const char* tail = le;
    while (tail > t && (tail[-1] == ' ' || tail[-1] == '\r')) --tail;
    bool pragma = t < le && *t == '#';
    /* a prefetch is a statement without '=', not a declaration: its
     * address may take parameters (DenseNet-121's 1x1 convs of blocks 3
     * and 4, prefetching their weights, differ only in its strides) */
    bool decl = line_has(t, le, "aligned(") || line_has(t, le, "_Thread_local") ||
                (tail > t && tail[-1] == ';' && !line_has(t, le, "=") && !starts_with(t, le, "__builtin_prefetch("));
    bool loop = starts_with(t, le, "for (");
    bool keep = pragma || decl || (loop && (after_unroll || innermost(le, end)));
    after_unroll = starts_with(t, le, "#pragma GCC unroll");
    for (const char* c = t; c < le && !keep;) {
      if (*c == '"' || *c == '\'') { /* a string or character: skipped whole */
        char q = *c++;
        while (c < le && *c != q) c += *c == '\\' ? 2 : 1;
        ++c;
        continue;
      }
      if (is_ident(*c) && !is_digit(*c)) {
        while (c < le && is_ident(*c)) ++c;
        continue;
      }
      if (!is_digit(*c) && !(*c == '.' && c + 1 < le && is_digit(c[1]))) {
        ++c;
        continue;
      }
      /* a number: digits, letters (suffixes, hex), '.', and an exponent's sign */
      const char* n0 = c;
      bool hex = c + 1 < le && c[0] == '0' && (c[1] == 'x' || c[1] == 'X');
      bool plain = true;
      while (c < le) {
        if (is_digit(*c)) {
          ++c;
          continue;
        }
        if (is_ident(*c) || *c == '.') {
          plain = false;
          bool exp = hex ? (*c == 'p' || *c == 'P') : (*c == 'e' || *c == 'E');
          ++c;
          if (exp && c < le && (*c == '+' || *c == '-')) ++c;
          continue;
        }
        break;
      }
      size_t n = (size_t)(c - n0);
      /* plain decimal, no leading zero (octal), fits an int */
      if (!plain || (n > 1 && *n0 == '0') || n > 10) continue;
      long long v = 0;
      for (const char* d = n0; d < c; ++d) v = v * 10 + (*d - '0');
      if (v > INT32_MAX) continue;
      const char* before = n0;
      while (before > t && before[-1] == ' ') --before;
      if (before - t >= 2 && before[-2] == '+' && before[-1] == '=') continue; /* a loop step */
      if (before > t && (before[-1] == '/' || before[-1] == '%')) continue;   /* a divisor */
      lit_t lit = {(size_t)(n0 - text), n, (int32_t)v};
      if (!fn(user, &lit)) return false;
    }
    ls = le < end ? le + 1 : end;
  }
  return true;
}

/* ---- shapes ----------------------------------------------------------- */

typedef struct shape_build_s {
  kiln_cpu_shape_t* s;
  const char* text;
  size_t done; /* text copied into the skeleton so far */
  int32_t cap;
  bool oom;
} shape_build_t;

static bool skel_put(kiln_cpu_shape_t* s, const char* p, size_t n) {
  char* grown = realloc(s->skel, s->skel_len + n + 1);
  if (!grown) return false;
  s->skel = grown;
  memcpy(s->skel + s->skel_len, p, n);
  s->skel_len += n;
  s->skel[s->skel_len] = 0;
  return true;
}

static bool shape_lit(void* user, const lit_t* lit) {
  shape_build_t* b = user;
  kiln_cpu_shape_t* s = b->s;
  if (s->n_lits == b->cap) {
    int32_t cap = b->cap ? 2 * b->cap : 64;
    int32_t* grown = realloc(s->lits, (size_t)cap * sizeof(int32_t));
    if (!grown) return !(b->oom = true);
    s->lits = grown;
    b->cap = cap;
  }
  s->lits[s->n_lits++] = lit->value;
  /* the text before the literal, then a byte no printed C holds */
  if (!skel_put(s, b->text + b->done, lit->off - b->done) || !skel_put(s, "\x01", 1))
    return !(b->oom = true);
  b->done = lit->off + lit->len;
  return true;
}

kiln_status_t kiln_cpu_shape_of(const char* text, size_t len, kiln_cpu_shape_t* out) {
  memset(out, 0, sizeof *out);
  shape_build_t b = {out, text, 0, 0, false};
  scan_literals(text, len, shape_lit, &b);
  if (!b.oom && !skel_put(out, text + b.done, len - b.done)) b.oom = true;
  if (b.oom) {
    kiln_cpu_shape_free(out);
    return kiln_make_status(KILN_OUT_OF_MEMORY, "cpu: out of memory comparing kernels");
  }
  out->hash = kiln_fnv1a(out->skel, out->skel_len);
  return NULL;
}

bool kiln_cpu_shape_same(const kiln_cpu_shape_t* a, const kiln_cpu_shape_t* b) {
  return a->hash == b->hash && a->skel_len == b->skel_len && a->n_lits == b->n_lits &&
         memcmp(a->skel, b->skel, a->skel_len) == 0;
}

void kiln_cpu_shape_free(kiln_cpu_shape_t* s) {
  if (!s) return;
  free(s->skel);
  free(s->lits);
  memset(s, 0, sizeof *s);
}

/* ---- printing --------------------------------------------------------- */

const char kiln_cpu_shared_macro[] =
    "#if defined(__clang__)\n"
    "#define KILN_SHARED static __attribute__((noinline))\n"
    "#else\n"
    "#define KILN_SHARED static __attribute__((noipa))\n"
    "#endif\n";

typedef struct body_print_s {
  kiln_cf_out_t* o;
  const char* text;
  size_t done;
  const int32_t* param_of;
  int32_t slot; /* literals seen */
  int32_t n_lits;
} body_print_t;

static void put_span(kiln_cf_out_t* o, const char* p, size_t n) {
  while (n > 0) { /* printf's precision is an int */
    int chunk = n > (1u << 30) ? 1 << 30 : (int)n;
    kiln_cf_out_printf(o, "%.*s", chunk, p);
    p += chunk;
    n -= (size_t)chunk;
  }
}

static bool body_lit(void* user, const lit_t* lit) {
  body_print_t* b = user;
  if (b->slot >= b->n_lits) return false;
  if (b->param_of[b->slot] >= 0) {
    put_span(b->o, b->text + b->done, lit->off - b->done);
    kiln_cf_out_printf(b->o, "kc%d", (int)b->param_of[b->slot]);
    b->done = lit->off + lit->len;
  }
  b->slot++;
  return true;
}

typedef struct first_lit_s {
  size_t off;
  bool found;
} first_lit_t;

static bool first_lit(void* user, const lit_t* lit) {
  first_lit_t* f = user;
  f->off = lit->off;
  f->found = true;
  return false;
}

typedef struct check_lit_s {
  const int32_t* want;
  int32_t n, seen;
} check_lit_t;

static bool check_lit(void* user, const lit_t* lit) {
  check_lit_t* c = user;
  if (c->seen >= c->n || c->want[c->seen] != lit->value) return false;
  c->seen++;
  return true;
}

bool kiln_cpu_print_shared_body(kiln_cf_out_t* o, int32_t group, const char* text, size_t len,
                                const int32_t* lits, const int32_t* param_of, int32_t n_lits,
                                int32_t n_params) {
  /* the member's own print (names, not the canonical ones) has the
   * canonical print's literals in the same order; checked, not assumed */
  check_lit_t chk = {lits, n_lits, 0};
  bool same = scan_literals(text, len, check_lit, &chk) && chk.seen == n_lits;
  const char* nl = memchr(text, '\n', len);
  static const char sig[] = "(void* const* args) {";
  size_t sl = sizeof sig - 1;
  if (!same || !nl || (size_t)(nl - text) < sl || memcmp(nl - sl, sig, sl) != 0)
    return false;
  /* and no parameter on the signature line (only identifiers hold digits there) */
  size_t start = (size_t)(nl + 1 - text);
  first_lit_t first = {0, false};
  scan_literals(text, len, first_lit, &first);
  if (first.found && first.off < start) return false;
  kiln_cf_out_printf(o, "KILN_SHARED void kiln_shared_%d(void* const* args, const int* kc) {\n",
                     (int)group);
  for (int32_t j = 0; j < n_params; ++j)
    kiln_cf_out_printf(o, "%s kc%d = kc[%d]%s", j ? "," : "  const int", (int)j, (int)j,
                       j + 1 == n_params ? ";\n" : "");
  body_print_t b = {o, text, start, param_of, 0, n_lits};
  bool ok = scan_literals(text, len, body_lit, &b);
  put_span(o, text + b.done, len - b.done);
  return ok; /* by the checks above, always */
}

void kiln_cpu_print_shared_call(kiln_cf_out_t* o, const char* name, int32_t group,
                                const int32_t* lits, const int32_t* param_of, int32_t n_lits) {
  kiln_cf_out_printf(o, "void %s(void* const* args) {\n  static const int kc[] = {", name);
  int32_t next = 0; /* parameters are numbered in the order of their first literal */
  for (int32_t i = 0; i < n_lits; ++i)
    if (param_of[i] == next) {
      kiln_cf_out_printf(o, "%s%d", next ? ", " : "", (int)lits[i]);
      next++;
    }
  kiln_cf_out_printf(o, "};\n  kiln_shared_%d(args, kc);\n}\n", (int)group);
}
