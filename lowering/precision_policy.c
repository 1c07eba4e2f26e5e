/* Precision policy files (format in precision.h): parse, write, and the
 * rule lookup the fp16 pass and the calibrator share. */
#include <ctype.h>
#include <stdlib.h>
#include <string.h>

#include "lowering/precision.h"

kiln_status_t kiln_precision_policy_add(kiln_precision_policy_t* p, kiln_precision_match_t match,
                                        const char* name, bool fp16) {
  if (!p || !name) return kiln_make_status(KILN_INVALID_ARGUMENT, "precision policy: NULL rule");
  kiln_allocator_t a = kiln_allocator_system();
  if (p->n == p->cap) {
    int32_t nc = p->cap ? p->cap * 2 : 16;
    void* q = p->rules;
    if (!q) KILN_RETURN_IF_ERROR(kiln_allocator_malloc(a, sizeof(*p->rules) * (size_t)nc, "policy", &q));
    else KILN_RETURN_IF_ERROR(kiln_allocator_realloc(a, sizeof(*p->rules) * (size_t)nc, "policy", &q));
    p->rules = q;
    p->cap = nc;
  }
  size_t len = strlen(name);
  char* nm = NULL;
  KILN_RETURN_IF_ERROR(kiln_allocator_malloc(a, len + 1, "policy rule", (void**)&nm));
  memcpy(nm, name, len + 1);
  p->rules[p->n++] = (kiln_precision_rule_t){match, nm, fp16, 0, false};
  return NULL;
}

void kiln_precision_policy_free(kiln_precision_policy_t* p) {
  if (!p) return;
  for (int32_t i = 0; i < p->n; ++i) kiln_allocator_free(kiln_allocator_system(), p->rules[i].name);
  kiln_allocator_free(kiln_allocator_system(), p->rules);
  memset(p, 0, sizeof(*p));
}

/* Next whitespace-separated word of [*s, end); false at the end. */
static bool word(const char** s, const char* end, const char** w, size_t* n) {
  const char* q = *s;
  while (q < end && isspace((unsigned char)*q)) ++q;
  if (q == end) return false;
  const char* b = q;
  while (q < end && !isspace((unsigned char)*q)) ++q;
  *w = b;
  *n = (size_t)(q - b);
  *s = q;
  return true;
}

static kiln_status_t parse_line(const char* b, const char* end, const char* file, int32_t line,
                                kiln_precision_policy_t* p) {
  const char* hash = memchr(b, '#', (size_t)(end - b));
  if (hash) end = hash;
  const char *w1, *w2, *w3;
  size_t n1, n2, n3;
  const char* s = b;
  if (!word(&s, end, &w1, &n1)) return NULL; /* blank or comment */
  if (!word(&s, end, &w2, &n2))
    return kiln_make_status(KILN_INVALID_ARGUMENT, "%s:%d: '%.*s': expected 'NAME fp16|fp32'", file,
                            (int)line, (int)n1, w1);
  if (word(&s, end, &w3, &n3))
    return kiln_make_status(KILN_INVALID_ARGUMENT, "%s:%d: unexpected '%.*s' after the precision", file,
                            (int)line, (int)n3, w3);
  bool fp16 = false, int8 = false;
  if (n2 == 4 && !memcmp(w2, "fp16", 4)) fp16 = true;
  else if (n2 == 4 && !memcmp(w2, "int8", 4)) int8 = true;
  else if (!(n2 == 4 && !memcmp(w2, "fp32", 4)))
    return kiln_make_status(KILN_INVALID_ARGUMENT, "%s:%d: '%.*s': expected fp16, fp32 or int8", file, (int)line,
                            (int)n2, w2);
  kiln_precision_match_t m = KILN_MATCH_NAME;
  if (n1 >= 3 && !memcmp(w1, "op:", 3)) {
    m = KILN_MATCH_OP;
    w1 += 3;
    n1 -= 3;
  } else if (n1 >= 5 && !memcmp(w1, "node:", 5)) {
    m = KILN_MATCH_NODE;
    w1 += 5;
    n1 -= 5;
  }
  if (n1 == 0)
    return kiln_make_status(KILN_INVALID_ARGUMENT, "%s:%d: empty %s name", file, (int)line,
                            m == KILN_MATCH_OP ? "op" : "node");
  if (n1 > 4096) return kiln_make_status(KILN_INVALID_ARGUMENT, "%s:%d: name longer than 4096 bytes", file, (int)line);
  char name[4097];
  memcpy(name, w1, n1);
  name[n1] = 0;
  KILN_RETURN_IF_ERROR(kiln_precision_policy_add(p, m, name, fp16), "%s:%d", file, (int)line);
  p->rules[p->n - 1].line = line;
  p->rules[p->n - 1].int8 = int8;
  return NULL;
}

kiln_status_t kiln_precision_policy_parse(const char* text, size_t len, const char* file,
                                          kiln_precision_policy_t* p) {
  if (!p || (!text && len)) return kiln_make_status(KILN_INVALID_ARGUMENT, "precision policy: NULL text");
  if (!file) file = "policy";
  const char* end = text + len;
  int32_t line = 1;
  for (const char* b = text; b && b < end; ++line) {
    const char* nl = memchr(b, '\n', (size_t)(end - b));
    const char* le = nl ? nl : end;
    if (memchr(b, '\0', (size_t)(le - b)))
      return kiln_make_status(KILN_INVALID_ARGUMENT, "%s:%d: NUL byte in a policy file", file, (int)line);
    KILN_RETURN_IF_ERROR(parse_line(b, le, file, line, p));
    b = nl ? nl + 1 : end;
  }
  return NULL;
}

kiln_status_t kiln_precision_policy_read(const char* path, kiln_precision_policy_t* p) {
  FILE* f = fopen(path, "rb");
  if (!f) return kiln_make_status(KILN_NOT_FOUND, "%s: cannot open the precision policy", path);
  char* buf = NULL;
  size_t len = 0, cap = 0;
  kiln_status_t s = NULL;
  for (;;) {
    if (len == cap) {
      if (cap >= ((size_t)16 << 20)) {
        s = kiln_make_status(KILN_LIMIT_EXCEEDED, "%s: precision policy larger than 16 MiB", path);
        break;
      }
      cap = cap ? cap * 2 : 4096;
      char* q = realloc(buf, cap);
      if (!q) {
        s = kiln_make_status(KILN_OUT_OF_MEMORY, "%s: out of memory reading the policy", path);
        break;
      }
      buf = q;
    }
    size_t got = fread(buf + len, 1, cap - len, f);
    len += got;
    if (got == 0) break;
  }
  if (!s && ferror(f)) s = kiln_make_status(KILN_IO_ERROR, "%s: read error", path);
  fclose(f);
  if (!s) s = kiln_precision_policy_parse(buf, len, path, p);
  free(buf);
  return s;
}

kiln_status_t kiln_precision_policy_write(const kiln_precision_policy_t* p, const char* header,
                                          const char* path) {
  /* A name the parser would split or cut at '#' cannot round-trip. */
  for (int32_t i = 0; p && i < p->n; ++i) {
    const char* nm = p->rules[i].name;
    bool bad = !nm[0] || strchr(nm, '#');
    for (const char* c = nm; *c && !bad; ++c) bad = isspace((unsigned char)*c) != 0;
    if (bad)
      return kiln_make_status(KILN_INVALID_ARGUMENT,
                              "%s: rule %d: name '%s' is empty or holds whitespace or '#', which the "
                              "policy format cannot write; use op: rules for that node",
                              path, (int)i + 1, nm);
  }
  FILE* f = fopen(path, "w");
  if (!f) return kiln_make_status(KILN_IO_ERROR, "%s: cannot write the precision policy", path);
  for (const char* h = header; h && *h;) {
    size_t n = strcspn(h, "\n");
    fprintf(f, "# %.*s\n", (int)n, h);
    h += n;
    if (*h) ++h;
  }
  static const char* const prefix[] = {"", "op:", "node:"};
  for (int32_t i = 0; p && i < p->n; ++i)
    fprintf(f, "%s%s %s\n", prefix[p->rules[i].match], p->rules[i].name, p->rules[i].int8 ? "int8" : p->rules[i].fp16 ? "fp16" : "fp32");
  bool bad = ferror(f) != 0;
  if (fclose(f) != 0) bad = true;
  return bad ? kiln_make_status(KILN_IO_ERROR, "%s: write error", path) : NULL;
}

static bool graph_has_node(const kiln_graph_t* g, const char* name) {
  for (int32_t i = 0; i < g->n_nodes; ++i)
    if (g->nodes[i].name && !strcmp(g->nodes[i].name, name)) return true;
  return false;
}

static bool rule_hits(const kiln_precision_rule_t* r, const kiln_graph_t* g, const kiln_node_t* n) {
  switch (r->match) {
    case KILN_MATCH_OP: return n->op_type && !strcmp(n->op_type, r->name);
    case KILN_MATCH_NODE: return n->name && !strcmp(n->name, r->name);
    case KILN_MATCH_NAME:
      return graph_has_node(g, r->name) ? n->name && !strcmp(n->name, r->name)
                                        : n->op_type && !strcmp(n->op_type, r->name);
  }
  return false;
}

bool kiln_precision_node_fp16(const kiln_precision_policy_t* p, const kiln_graph_t* g, int32_t node,
                              bool default_fp16) {
  bool v = default_fp16;
  if (!p || !g || node < 0 || node >= g->n_nodes) return v;
  for (int32_t i = 0; i < p->n; ++i)
    if (!p->rules[i].int8 && rule_hits(&p->rules[i], g, &g->nodes[node])) v = p->rules[i].fp16;
  return v;
}

int kiln_precision_node_int8(const kiln_precision_policy_t* p, const kiln_graph_t* g, int32_t node) {
  int v = -1;
  if (!p || !g || node < 0 || node >= g->n_nodes) return v;
  for (int32_t i = 0; i < p->n; ++i)
    if (rule_hits(&p->rules[i], g, &g->nodes[node])) v = p->rules[i].int8 ? 1 : 0;
  return v;
}
