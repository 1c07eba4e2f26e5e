/* Plan -> C source. The kernels are printed in plan order through the shared
 * C-family printer; the only plan knowledge the printer needs is which
 * parameters may be declared restrict: two parameters whose plan buffers
 * share memory (an alias such as Reshape, or the same buffer passed twice)
 * must not both be restrict, or the compiler may reorder their accesses. */
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "targets/cpu/cpu_internal.h"
#include "targets/custom_kernel.h"
#include "ir/fnv.h"

int32_t kiln_cpu_root(const kiln_plan_t* p, int32_t b) {
  for (int32_t guard = 0; guard <= p->n_buffers; ++guard) {
    if (b < 0 || b >= p->n_buffers) return -1;
    if (p->buffers[b].alias_of < 0) return b;
    b = p->buffers[b].alias_of;
  }
  return -1; /* alias cycle */
}

/* Structural checks the printer cannot do (it only sees one kernel). */
static kiln_status_t check_kernel(const kiln_plan_t* plan, int32_t k) {
  const kiln_plan_kernel_t* kk = &plan->kernels[k];
  if (!kk->func)
    return kiln_make_status(KILN_INVALID_ARGUMENT, "cpu: plan kernel %d has no function", (int)k);
  if (kk->func->n_params > 0 && !kk->args)
    return kiln_make_status(KILN_INVALID_ARGUMENT, "cpu: kernel '%s' has no argument list",
                            kk->func->name);
  for (int32_t j = 0; j < kk->func->n_params; ++j) {
    int32_t b = kk->args[j];
    if (b < 0 || b >= plan->n_buffers)
      return kiln_make_status(KILN_INVALID_ARGUMENT,
                              "cpu: kernel '%s': parameter %d refers to plan buffer %d of %d",
                              kk->func->name, (int)j, (int)b, (int)plan->n_buffers);
    if (kiln_cpu_root(plan, b) < 0)
      return kiln_make_status(KILN_INVALID_ARGUMENT,
                              "cpu: kernel '%s': buffer '%s' has a broken alias chain",
                              kk->func->name, plan->buffers[b].buf->name);
  }
  return NULL;
}

/* Per-kernel restrict flags: a parameter is restrict when no other
 * parameter of the kernel resolves to the same memory, and it is not half
 * of an in-place pair (the memory planner may give both one range). */
static bool* noalias_flags(const kiln_plan_t* plan, int32_t k) {
  const kiln_plan_kernel_t* kk = &plan->kernels[k];
  int32_t np = kk->func->n_params;
  bool* na = calloc((size_t)(np ? np : 1), sizeof(bool));
  if (!na) return NULL;
  for (int32_t i = 0; i < np; ++i) {
    int32_t ri = kiln_cpu_root(plan, kk->args[i]);
    na[i] = true;
    for (int32_t j = 0; j < np; ++j)
      if (j != i && kiln_cpu_root(plan, kk->args[j]) == ri) na[i] = false;
  }
  int32_t in, out;
  if (kiln_plan_kernel_inplace(plan, k, &in, &out)) na[in] = na[out] = false;
  return na;
}

void kiln_cpu_source_free(kiln_cpu_source_t* s) {
  if (!s) return;
  kiln_cf_out_free(&s->text);
  free(s->parts);
  memset(s, 0, sizeof(*s));
}

typedef struct canon_s {
  char* text;   /* canonical print (malloc'd) */
  size_t len;
  uint64_t hash;
  int32_t kernel; /* the kernel printed for it */
  int32_t last;   /* the last kernel aliasing it (chained through next[]) */
} canon_t;

/* Kernel |k|: printed from its tensor IR, or a plugin's C body under its
 * own name (never equal to another kernel's canonical text, so plugin
 * kernels are not shared: their text holds their name). */
static kiln_status_t print_one(const kiln_plan_t* plan, int32_t k, const kiln_cf_dialect_t* dialect,
                               const kiln_cf_kernel_info_t* info, kiln_cf_out_t* o) {
  if (!plan->kernels[k].custom) return kiln_cf_print_kernel(dialect, plan->kernels[k].func, info, o);
  int64_t groups[3], local[3];
  return kiln_custom_print(plan, k, "cpu", plan->kernels[k].func->name, o, groups, local);
}

/* Declarations of the kernels that print identically to |k| as aliases of
 * the symbol |k| is printed under. */
static void print_aliases(const kiln_plan_t* plan, int32_t k, const int32_t* target,
                          const int32_t* next, kiln_cf_out_t* o, kiln_cpu_source_t* out) {
  for (int32_t j = next[k]; j >= 0; j = next[j])
    if (target[j] == k) {
      kiln_cf_out_printf(o, "void %s(void* const* args) __attribute__((alias(\"%s\")));\n",
                         plan->kernels[j].func->name, plan->kernels[k].func->name);
      out->n_aliases++;
    }
}

/* $KILN_CPU_SHARE=0: every distinct kernel prints its own body. */
static bool share_enabled(void) {
  const char* e = getenv("KILN_CPU_SHARE");
  return !(e && strcmp(e, "0") == 0);
}

/* Distinct kernels (canon entries) grouped by shape: a chain per group from
 * its first member, the leader. */
typedef struct groups_s {
  int32_t* lead;  /* canon entry -> its group's leader */
  int32_t* next;  /* canon entry -> next member, -1 = last */
  int32_t* size;  /* leader -> members */
  int32_t n_shared; /* groups of more than one member */
} groups_t;

static void groups_free(groups_t* g) {
  free(g->lead);
  free(g->next);
  free(g->size);
  memset(g, 0, sizeof *g);
}

static kiln_status_t group_shapes(const kiln_plan_t* plan, const canon_t* canon, int32_t n,
                                  kiln_cpu_shape_t* shapes, groups_t* g) {
  size_t cap = 1;
  while (cap < 2u * (size_t)(n ? n : 1)) cap <<= 1;
  int32_t* slots = calloc(cap, sizeof(int32_t)); /* leader + 1, 0 = empty */
  int32_t* last = calloc((size_t)(n ? n : 1), sizeof(int32_t));
  g->lead = calloc((size_t)(n ? n : 1), sizeof(int32_t));
  g->next = calloc((size_t)(n ? n : 1), sizeof(int32_t));
  g->size = calloc((size_t)(n ? n : 1), sizeof(int32_t));
  kiln_status_t s = NULL;
  if (!slots || !last || !g->lead || !g->next || !g->size)
    s = kiln_make_status(KILN_OUT_OF_MEMORY, "cpu: out of memory generating code");
  for (int32_t c = 0; c < n && !s; ++c) {
    g->lead[c] = c;
    g->next[c] = -1;
    g->size[c] = 1;
    last[c] = c;
    /* a plugin's C is its author's: never rewritten */
    if (plan->kernels[canon[c].kernel].custom) continue;
    s = kiln_cpu_shape_of(canon[c].text, canon[c].len, &shapes[c]);
    if (s) break;
    size_t h = (size_t)shapes[c].hash & (cap - 1);
    for (; slots[h]; h = (h + 1) & (cap - 1)) {
      int32_t l = slots[h] - 1;
      if (!kiln_cpu_shape_same(&shapes[l], &shapes[c])) continue;
      g->lead[c] = l;
      g->next[last[l]] = c;
      last[l] = c;
      if (g->size[l]++ == 1) g->n_shared++;
      break;
    }
    if (!slots[h]) slots[h] = c + 1;
  }
  free(slots);
  free(last);
  return s;
}

/* Kernel |k| with the declarations of the kernels aliasing it. */
static kiln_status_t print_distinct(const kiln_plan_t* plan, const kiln_cf_dialect_t* dialect,
                                    int32_t k, const int32_t* target, const int32_t* next,
                                    kiln_cf_out_t* o, kiln_cpu_source_t* out) {
  bool* na = noalias_flags(plan, k);
  if (!na) return kiln_make_status(KILN_OUT_OF_MEMORY, "cpu: out of memory generating code");
  kiln_cf_kernel_info_t info = {na, false, 0, false};
  kiln_status_t s = print_one(plan, k, dialect, &info, o);
  free(na);
  KILN_RETURN_IF_ERROR(s);
  print_aliases(plan, k, target, next, o, out);
  return NULL;
}

/* The group led by canon entry |c|: one body, a call per member (with its
 * aliases). *out_shared false (nothing printed) when the body cannot be
 * made from the leader's own print; the caller then prints each member. */
static kiln_status_t print_group(const kiln_plan_t* plan, const kiln_cf_dialect_t* dialect,
                                 const canon_t* canon, const kiln_cpu_shape_t* shapes,
                                 const groups_t* g, int32_t c, const int32_t* target,
                                 const int32_t* next, kiln_cf_out_t* o, bool* out_shared,
                                 kiln_cpu_source_t* out) {
  *out_shared = false;
  const kiln_cpu_shape_t* lead = &shapes[c];
  int32_t nl = lead->n_lits;
  int32_t* param_of = malloc((size_t)(nl ? nl : 1) * sizeof(int32_t));
  bool* na = noalias_flags(plan, canon[c].kernel);
  kiln_cf_out_t own;
  kiln_cf_out_init(&own);
  kiln_status_t s = NULL;
  if (!param_of || !na) s = kiln_make_status(KILN_OUT_OF_MEMORY, "cpu: out of memory generating code");
  /* a literal that differs between members is a parameter, one per
   * distinct column of values (a stride printed twice is one) */
  int32_t n_params = 0;
  for (int32_t i = 0; i < nl && !s; ++i) {
    param_of[i] = -1;
    bool differs = false;
    for (int32_t m = g->next[c]; m >= 0 && !differs; m = g->next[m])
      differs = shapes[m].lits[i] != lead->lits[i];
    if (!differs) continue;
    for (int32_t j = 0; j < i && param_of[i] < 0; ++j) {
      if (param_of[j] < 0 || lead->lits[j] != lead->lits[i]) continue;
      bool same = true;
      for (int32_t m = g->next[c]; m >= 0 && same; m = g->next[m])
        same = shapes[m].lits[j] == shapes[m].lits[i];
      if (same) param_of[i] = param_of[j];
    }
    if (param_of[i] < 0) param_of[i] = n_params++;
  }
  if (!s && n_params) {
    kiln_cf_kernel_info_t info = {na, false, 0, false};
    s = print_one(plan, canon[c].kernel, dialect, &info, &own);
  }
  if (!s && own.oom) s = kiln_make_status(KILN_OUT_OF_MEMORY, "cpu: out of memory generating code");
  int32_t group = out->n_bodies;
  if (!s && n_params &&
      kiln_cpu_print_shared_body(o, group, own.data, own.len, lead->lits, param_of, nl, n_params)) {
    *out_shared = true;
    out->n_bodies++;
    for (int32_t m = c; m >= 0; m = g->next[m]) {
      int32_t k = canon[m].kernel;
      kiln_cpu_print_shared_call(o, plan->kernels[k].func->name, group, shapes[m].lits, param_of, nl);
      print_aliases(plan, k, target, next, o, out);
      out->n_shared++;
    }
  }
  kiln_cf_out_free(&own);
  free(param_of);
  free(na);
  return s;
}

kiln_status_t kiln_cpu_codegen(const kiln_plan_t* plan, kiln_cpu_source_t* out) {
  /* Vector types no wider than this CPU's registers (read at run time; the
   * C is compiled here with -march=native): without AVX-512 GCC splits a
   * 16-lane type into pieces it moves through general registers and the
   * stack, which made every GEMM/conv several times slower on AVX2. */
  return kiln_cpu_codegen_lanes(plan, kiln_cpu_simd().lanes, out);
}

kiln_status_t kiln_cpu_codegen_lanes(const kiln_plan_t* plan, int32_t lanes, kiln_cpu_source_t* out) {
  memset(out, 0, sizeof(*out));
  kiln_cf_dialect_t dialect = kiln_cf_dialect_c;
  dialect.vector_widths &= lanes >= 16 ? 4 | 8 | 16 : lanes >= 8 ? 4 | 8 : 4;
  int32_t n = plan->n_kernels;
  kiln_status_t s = NULL;
  canon_t* canon = calloc((size_t)(n ? n : 1), sizeof(*canon));
  int32_t* slots = NULL; /* hash table: index + 1, 0 = empty */
  int32_t* next = NULL;  /* kernel -> next kernel with the same code, -1 = none */
  int32_t* target = calloc((size_t)(n ? n : 1), sizeof(int32_t)); /* kernel -> unique kernel */
  kiln_cpu_shape_t* shapes = NULL; /* per canon entry */
  groups_t groups = {0};
  int32_t n_canon = 0;
  /* prelude, at most one unit per kernel, epilogue: (offset, length) each */
  out->parts = calloc(2 * ((size_t)n + 2), sizeof(uint64_t));
  if (!canon || !target || !out->parts) {
    s = kiln_make_status(KILN_OUT_OF_MEMORY, "cpu: out of memory generating code");
    goto done;
  }
  /* Names must be unique: they become symbols. One hash table serves the
   * name check and the canonical-text lookup, so both stay linear in the
   * number of kernels (a 100k-node graph has 100k kernels at -O0). */
  uint32_t mask = 1;
  while (mask < 2u * (uint32_t)(n ? n : 1)) mask <<= 1;
  slots = calloc(mask, sizeof(int32_t));
  next = calloc((size_t)(n ? n : 1), sizeof(int32_t));
  if (!slots || !next) {
    s = kiln_make_status(KILN_OUT_OF_MEMORY, "cpu: out of memory generating code");
    goto done;
  }
  mask -= 1;
  for (int32_t k = 0; k < n && !s; ++k) {
    s = check_kernel(plan, k);
    if (s) break;
    const char* nm = plan->kernels[k].func->name;
    uint32_t h = (uint32_t)kiln_fnv1a(nm, strlen(nm)) & mask;
    for (; slots[h]; h = (h + 1) & mask)
      if (strcmp(nm, plan->kernels[slots[h] - 1].func->name) == 0) {
        s = kiln_make_status(KILN_INVALID_ARGUMENT, "cpu: two kernels are named '%s'", nm);
        break;
      }
    slots[h] = k + 1;
  }
  if (s) goto done;
  memset(slots, 0, sizeof(int32_t) * ((size_t)mask + 1));
  /* Canonical texts find the kernels that compile to the same code. */
  for (int32_t k = 0; k < n && !s; ++k) {
    bool* na = noalias_flags(plan, k);
    if (!na) {
      s = kiln_make_status(KILN_OUT_OF_MEMORY, "cpu: out of memory generating code");
      break;
    }
    kiln_cf_kernel_info_t info = {na, true, 0, false};
    kiln_cf_out_t ct;
    kiln_cf_out_init(&ct);
    s = print_one(plan, k, &dialect, &info, &ct);
    free(na);
    if (s) {
      kiln_cf_out_free(&ct);
      break;
    }
    uint64_t h = kiln_fnv1a(ct.data ? ct.data : "", ct.len);
    target[k] = k;
    next[k] = -1;
    uint32_t slot = (uint32_t)h & mask;
    for (; slots[slot]; slot = (slot + 1) & mask) {
      const canon_t* c = &canon[slots[slot] - 1];
      if (c->hash == h && c->len == ct.len && memcmp(c->text, ct.data, ct.len) == 0) {
        target[k] = c->kernel;
        break;
      }
    }
    if (target[k] == k) {
      canon[n_canon++] = (canon_t){ct.data, ct.len, h, k, k};
      slots[slot] = n_canon;
    } else {
      /* appended to the chain of kernels that alias the first one */
      canon_t* c = &canon[slots[slot] - 1];
      next[c->last] = k;
      c->last = k;
      kiln_cf_out_free(&ct);
    }
  }
  if (s) goto done;
  /* Kernels equal up to their shape constants share one body. */
  if (share_enabled()) {
    shapes = calloc((size_t)(n_canon ? n_canon : 1), sizeof(*shapes));
    if (!shapes) {
      s = kiln_make_status(KILN_OUT_OF_MEMORY, "cpu: out of memory generating code");
      goto done;
    }
    s = group_shapes(plan, canon, n_canon, shapes, &groups);
    if (s) goto done;
  }
  /* The unit: prelude, each distinct kernel with its aliases (or each group
   * of kernels sharing a body), epilogue. */
  kiln_cf_out_t* o = &out->text;
  kiln_cf_out_puts(o, "/* generated by kiln: CPU target (C dialect) */\n");
  kiln_cf_out_puts(o, kiln_cf_dialect_c.prelude);
  kiln_cf_out_puts(o, "\n");
  if (groups.n_shared) kiln_cf_out_puts(o, kiln_cpu_shared_macro);
  out->parts[0] = 0;
  out->parts[1] = o->len;
  out->n_parts = 1;
  for (int32_t c = 0; c < n_canon && !s; ++c) {
    int32_t lead = groups.lead ? groups.lead[c] : c;
    if (lead != c) continue; /* printed with its group */
    size_t off = o->len;
    bool shared = false;
    if (groups.lead && groups.size[c] > 1) {
      s = print_group(plan, &dialect, canon, shapes, &groups, c, target, next, o, &shared, out);
      if (s) break;
    }
    if (!shared) {
      for (int32_t m = c; m >= 0 && !s; m = groups.lead ? groups.next[m] : -1)
        s = print_distinct(plan, &dialect, canon[m].kernel, target, next, o, out);
    }
    if (o->len > off && o->data[o->len - 1] != '\n') kiln_cf_out_puts(o, "\n");
    out->parts[2 * out->n_parts] = off;
    out->parts[2 * out->n_parts + 1] = o->len - off;
    out->n_parts++;
  }
  size_t epilogue_off = o->len;
  kiln_cf_out_puts(o, "\n");
  kiln_cf_out_puts(o, kiln_cf_dialect_c.epilogue);
  kiln_custom_print_bind(plan, o);
  out->parts[2 * out->n_parts] = epilogue_off;
  out->parts[2 * out->n_parts + 1] = o->len - epilogue_off;
  out->n_parts++;
  if (!s && o->oom) s = kiln_make_status(KILN_OUT_OF_MEMORY, "cpu: out of memory generating code");
done:
  if (shapes)
    for (int32_t j = 0; j < n_canon; ++j) kiln_cpu_shape_free(&shapes[j]);
  free(shapes);
  groups_free(&groups);
  if (canon)
    for (int32_t j = 0; j < n; ++j) free(canon[j].text);
  free(canon);
  free(target);
  free(slots);
  free(next);
  if (s) kiln_cpu_source_free(out);
  return s;
}

kiln_status_t kiln_cpu_generate_source(const kiln_plan_t* plan, char** out_source,
                                       size_t* out_len) {
  if (!plan || !out_source)
    return kiln_make_status(KILN_INVALID_ARGUMENT, "cpu: NULL plan or output");
  kiln_cpu_source_t src;
  KILN_RETURN_IF_ERROR(kiln_cpu_codegen(plan, &src));
  *out_source = src.text.data;
  if (out_len) *out_len = src.text.len;
  src.text.data = NULL;
  kiln_cpu_source_free(&src);
  return NULL;
}
