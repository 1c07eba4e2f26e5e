/* The C-family printer's statements (see printer_impl.h and the loop rules
 * in printer.h): stores (f16 storage, vector stores), loops by kind
 * (parallel with collapse, vector, simd, unrolled, bound to GPU ids with a
 * guard when the launch is larger), ifs, barriers, and PRIVATE / LOCAL
 * allocations as local arrays. */
#include "targets/cfamily/printer_impl.h"

/* Enters a loop: its variable's range [0, extent) feeds the bounds analysis
 * of the expressions inside. */
static bool push_var(pr_t* p, const tir_var_t* v, int64_t extent) {
  if (p->nv >= MAX_DEPTH) {
    kiln_cf_fail(p, KILN_LIMIT_EXCEEDED, "loops nested deeper than %d", MAX_DEPTH);
    return false;
  }
  p->vars[p->nv] = v;
  p->lo[p->nv] = 0;
  p->hi[p->nv] = extent - 1;
  p->nv++;
  return true;
}

static void put_store(pr_t* p, const tir_stmt_t* s) {
  const tir_buffer_t* b = s->u.store.buf;
  const tir_expr_t* v = s->u.store.value;
  kiln_cf_check_buf(p, b);
  line(p);
  tctx_t c = {.buf = b, .idx = s->u.store.idx};
  if (p->lane) {
    const char* byte = kiln_cf_vstore_byte(p, b->dtype);
    const bool half = b->dtype == KILN_DTYPE_F16;
    /* vok_stmt: f16 / u8 / i8 <- f32(...), or an F16 value (vhalf) */
    const bool narrow = byte || (half && v->kind == TIR_CAST && v->u.cast.value->dtype == KILN_DTYPE_F32);
    c.v = avex(narrow ? v->u.cast.value : v);
    c.n = p->w;
    const char* pv = kiln_cf_texel_private(p, b) ? p->d->tex_pstore : NULL;
    const int32_t ti = kiln_cf_texel_param(p, b);
    if (!pv && ti >= 0 && (p->wtexel >> ti & 1)) pv = p->d->tex_sstore;
    kiln_cf_tpl(p, byte ? byte : half ? p->d->vstore_half : b->dtype == KILN_DTYPE_I32 ? p->d->vstore_i32 : pv ? pv : p->d->vstore, &c);
    put(p, ";\n");
    return;
  }
  if (b->dtype == KILN_DTYPE_F16) {
    if (v->kind == TIR_LOAD && v->dtype == KILN_DTYPE_F16 && p->d->half_copy_direct) {
      kiln_cf_tpl(p, "$B[$I] = ", &c); /* f16 copy: keep the bits */
      kiln_cf_check_buf(p, v->u.load.buf);
      tctx_t c2 = {.buf = v->u.load.buf, .idx = v->u.load.idx};
      kiln_cf_tpl(p, "$B[$I]", &c2);
      put(p, ";\n");
      return;
    }
    /* a cast f32 -> f16 is rounded once by the store */
    if (v->kind == TIR_CAST && is_float(v->u.cast.value->dtype)) v = v->u.cast.value;
    if (v->dtype == KILN_DTYPE_F16 && half_native(p)) { /* already a half */
      kiln_cf_tpl(p, "$B[$I] = ", &c);
      kiln_cf_expr(p, v, P_ANY);
      put(p, ";\n");
      return;
    }
    c.v = aex(v);
    kiln_cf_tpl(p, p->d->half_store, &c);
    put(p, ";\n");
    return;
  }
  if (kiln_cf_texel_private(p, b)) { /* a float of a vec4 row (vec_texels) */
    c.v = aex(v);
    kiln_cf_tpl(p, p->d->tex_pstore1, &c);
    put(p, ";\n");
    return;
  }
  kiln_cf_tpl(p, "$B[$I] = ", &c);
  bool conv = p->d->constructor_casts && strcmp(stype(p, b->dtype), vtype(p, b->dtype)) != 0;
  if (conv) {
    putf(p, "%s(", stype(p, b->dtype));
    kiln_cf_expr(p, v, P_ANY);
    put(p, ")");
  } else {
    kiln_cf_expr(p, v, P_ANY);
  }
  put(p, ";\n");
}

/* |dyn| (a run-time extent, tir_for_dyn) replaces |extent| as the bound the
 * loop tests; the bounds analysis still uses |extent|, its maximum. */
static void put_for_header(pr_t* p, const tir_var_t* v, int64_t extent, const tir_expr_t* dyn, int64_t step) {
  putf(p, "for (%s ", p->d->index_type);
  kiln_cf_put_var(p, v);
  put(p, " = 0; ");
  kiln_cf_put_var(p, v);
  if (dyn) {
    put(p, " < ");
    kiln_cf_expr(p, dyn, P_SHIFT); /* an operand of '<': `n & 7` needs its parentheses */
    put(p, "; ");
  } else {
    putf(p, " < %lld; ", (long long)extent);
  }
  kiln_cf_put_var(p, v);
  if (step == 1) put(p, "++) {\n");
  else putf(p, " += %lld) {\n", (long long)step);
}

static void put_pragma(pr_t* p, const char* text, int64_t n) {
  if (!text) return;
  /* pragmas start in column 0 is not required; keep them indented */
  line(p);
  tctx_t c = {.n = n};
  kiln_cf_tpl(p, text, &c);
  put(p, "\n");
}

static void close_block(pr_t* p) {
  p->ind--;
  line(p);
  put(p, "}\n");
}

static bool has_loop(const tir_stmt_t* s) {
  if (!s) return false;
  switch (s->kind) {
    case TIR_FOR: return true;
    case TIR_SEQ:
      for (int32_t i = 0; i < s->u.seq.n; ++i)
        if (has_loop(s->u.seq.items[i])) return true;
      return false;
    case TIR_IF: return has_loop(s->u.cond.then_s) || has_loop(s->u.cond.else_s);
    case TIR_ALLOC: return has_loop(s->u.alloc.body);
    default: return false;
  }
}


static void st_loop_plain(pr_t* p, const tir_stmt_t* s) {
  const tir_var_t* v = s->u.loop.var;
  line(p);
  put_for_header(p, v, s->u.loop.extent, s->u.loop.dyn_extent, 1);
  p->ind++;
  if (push_var(p, v, s->u.loop.extent)) {
    kiln_cf_stmt(p, s->u.loop.body);
    p->nv--;
  }
  close_block(p);
}

static void st_parallel(pr_t* p, const tir_stmt_t* s) {
  const tir_stmt_t* nest[3] = {s};
  int32_t n = 1;
  while (n < 3 && nest[n - 1]->u.loop.body->kind == TIR_FOR &&
         nest[n - 1]->u.loop.body->u.loop.kind == TIR_LOOP_PARALLEL &&
         nest[n - 1]->u.loop.body->u.loop.extent > 0 && !nest[n - 1]->u.loop.body->u.loop.dyn_extent &&
         p->d->collapse_clause)
    nest[n] = nest[n - 1]->u.loop.body, n++;
  line(p);
  tctx_t c = {.n = n};
  kiln_cf_tpl(p, p->d->parallel_pragma, &c);
  if (n > 1) {
    put(p, " ");
    kiln_cf_tpl(p, p->d->collapse_clause, &c);
  }
  /* A loop over the samples alone (its kernel has no parallel loop of its
   * own): one sample is what a static module runs without a parallel
   * region, so one sample runs in this thread. */
  if (n == 1 && s->u.loop.dyn_extent && p->d->parallel_if) {
    putf(p, " %s(", p->d->parallel_if);
    kiln_cf_expr(p, s->u.loop.dyn_extent, P_SHIFT);
    put(p, " > 1)");
  }
  put(p, "\n");
  int32_t pushed = 0;
  for (int32_t i = 0; i < n; ++i) {
    line(p);
    put_for_header(p, nest[i]->u.loop.var, nest[i]->u.loop.extent, nest[i]->u.loop.dyn_extent, 1);
    p->ind++;
    if (push_var(p, nest[i]->u.loop.var, nest[i]->u.loop.extent)) pushed++;
  }
  p->in_par = true;
  kiln_cf_stmt(p, nest[n - 1]->u.loop.body);
  p->in_par = false;
  p->nv -= pushed;
  for (int32_t i = 0; i < n; ++i) close_block(p);
}

static void st_vector(pr_t* p, const tir_stmt_t* s, int32_t w) {
  const tir_var_t* v = s->u.loop.var;
  int64_t e = s->u.loop.extent;
  if (e / w > 1 && p->d->unroll_pragma) put_pragma(p, p->d->unroll_pragma, e / w <= 16 ? e / w : 4);
  line(p);
  put_for_header(p, v, e, NULL, w);
  p->ind++;
  if (push_var(p, v, e)) {
    p->lane = v;
    p->w = w;
    kiln_cf_stmt(p, s->u.loop.body);
    p->lane = NULL;
    p->w = 0;
    p->nv--;
  }
  close_block(p);
}

static void st_for(pr_t* p, const tir_stmt_t* s) {
  const kiln_cf_dialect_t* d = p->d;
  int64_t e = s->u.loop.extent;
  if (e <= 0) return;
  /* A run-time extent: a parallel or a plain loop (vector, simd and unroll
   * paths need the trip count when printing). */
  if (s->u.loop.dyn_extent) {
    if (s->u.loop.kind == TIR_LOOP_PARALLEL && d->parallel_pragma && !p->in_par && !p->in_simd && !p->lane)
      st_parallel(p, s);
    else if (s->u.loop.kind == TIR_LOOP_BOUND)
      kiln_cf_fail(p, KILN_UNSUPPORTED, "loop '%s' bound to a GPU id has a run-time extent", s->u.loop.var->name);
    else
      st_loop_plain(p, s);
    return;
  }
  switch (s->u.loop.kind) {
    case TIR_LOOP_PARALLEL:
      if (d->parallel_pragma && !p->in_par && !p->in_simd && !p->lane) {
        st_parallel(p, s);
        return;
      }
      break;
    case TIR_LOOP_VECTORIZED: {
      if (p->in_simd || p->lane) break;
      int32_t w = kiln_cf_vec_width(p, s);
      if (w) {
        st_vector(p, s, w);
        return;
      }
      /* omp simd only on a leaf loop: an outer one rarely vectorizes, and it
       * would stop an inner VECTORIZED loop from taking the vector path. */
      if (d->simd_pragma && !has_loop(s->u.loop.body)) {
        put_pragma(p, d->simd_pragma, e);
        p->in_simd = true;
        st_loop_plain(p, s);
        p->in_simd = false;
        return;
      }
      break;
    }
    case TIR_LOOP_UNROLLED:
      if (d->unroll_pragma && (d->unroll_full_max <= 0 || e <= d->unroll_full_max))
        put_pragma(p, d->unroll_pragma, e <= 32 ? e : 8);
      break;
    case TIR_LOOP_BOUND: {
      int t = (int)s->u.loop.tag;
      if (t < TIR_BLOCK_X || t > TIR_THREAD_Z || !d->ids[t]) {
        kiln_cf_fail(p, KILN_UNSUPPORTED,
                     "loop '%s' is bound to a GPU id (tag %d); the %s dialect has none",
                     s->u.loop.var->name, t, d->name);
        return;
      }
      int64_t launch = t <= TIR_BLOCK_Z ? p->groups[t - TIR_BLOCK_X] : p->local[t - TIR_THREAD_X];
      line(p);
      put(p, "{\n");
      p->ind++;
      line(p);
      putf(p, "const %s ", d->index_type);
      kiln_cf_put_var(p, s->u.loop.var);
      putf(p, " = %s;\n", d->ids[t]);
      bool guard = launch > e;
      if (guard) {
        line(p);
        put(p, "if (");
        kiln_cf_put_var(p, s->u.loop.var);
        putf(p, " < %lld) {\n", (long long)e);
        p->ind++;
      }
      if (push_var(p, s->u.loop.var, e)) {
        kiln_cf_stmt(p, s->u.loop.body);
        p->nv--;
      }
      if (guard) close_block(p);
      close_block(p);
      return;
    }
    default:
      break;
  }
  st_loop_plain(p, s);
}

static int64_t buf_span(const tir_buffer_t* b) {
  int64_t span = 1;
  for (int32_t k = 0; k < b->rank; ++k) {
    if (b->shape[k] <= 0) return 1;
    span += (b->shape[k] - 1) * (b->strides[k] < 0 ? -b->strides[k] : b->strides[k]);
  }
  return span;
}

void kiln_cf_put_array_decl(pr_t* p, const char* qual, const tir_buffer_t* b, bool big) {
  line(p);
  if (kiln_cf_texel_private(p, b)) { /* vec4 rows (vec_texels) */
    tctx_t c = {.buf = b, .n = b->shape[0] / 4};
    kiln_cf_tpl(p, p->d->tex_pdecl, &c);
    put(p, "\n");
    return;
  }
  if (big) put(p, "static _Thread_local ");
  putf(p, "%s%s ", qual ? qual : "", stype(p, b->dtype));
  kiln_cf_put_buf(p, b);
  if (kiln_cf_md_array(p, b)) {
    for (int32_t k = 0; k < b->rank; ++k) putf(p, "[%lld]", (long long)b->shape[k]);
    put(p, ";\n");
    return;
  }
  putf(p, "[%lld]%s;\n", (long long)buf_span(b), p->d->align_attr ? p->d->align_attr : "");
}

static void st_alloc(pr_t* p, const tir_stmt_t* s) {
  const tir_buffer_t* b = s->u.alloc.buf;
  const kiln_cf_dialect_t* d = p->d;
  if (p->ns >= MAX_DEPTH) {
    kiln_cf_fail(p, KILN_LIMIT_EXCEEDED, "more than %d nested allocations", MAX_DEPTH);
    return;
  }
  if (b->scope == TIR_SCOPE_GLOBAL) {
    kiln_cf_fail(p, KILN_INVALID_ARGUMENT, "allocation of buffer '%s' with global scope", b->name);
    return;
  }
  bool local = b->scope == TIR_SCOPE_LOCAL;
  bool hoisted = local && d->local_decl != KILN_CF_LOCAL_INLINE;
  p->scoped[p->ns++] = b;
  if (hoisted) {
    kiln_cf_stmt(p, s->u.alloc.body);
  } else {
    int64_t bytes = buf_span(b) * (int64_t)kiln_dtype_size(b->dtype);
    bool big = d->lang == KILN_CF_LANG_C && bytes > 128 * 1024;
    line(p);
    put(p, "{\n");
    p->ind++;
    kiln_cf_put_array_decl(p, local ? d->local_qualifier : d->private_qualifier, b, big);
    kiln_cf_stmt(p, s->u.alloc.body);
    close_block(p);
  }
  p->ns--;
}

void kiln_cf_stmt(pr_t* p, const tir_stmt_t* s) {
  if (!s) {
    kiln_cf_fail(p, KILN_INVALID_ARGUMENT, "NULL statement");
    return;
  }
  if (p->err) return;
  switch (s->kind) {
    case TIR_FOR: st_for(p, s); return;
    case TIR_STORE: put_store(p, s); return;
    case TIR_SEQ:
      for (int32_t i = 0; i < s->u.seq.n; ++i) kiln_cf_stmt(p, s->u.seq.items[i]);
      return;
    case TIR_IF:
      line(p);
      put(p, "if (");
      kiln_cf_expr(p, s->u.cond.cond, P_ANY);
      put(p, ") {\n");
      p->ind++;
      kiln_cf_stmt(p, s->u.cond.then_s);
      if (s->u.cond.else_s) {
        p->ind--;
        line(p);
        put(p, "} else {\n");
        p->ind++;
        kiln_cf_stmt(p, s->u.cond.else_s);
      }
      close_block(p);
      return;
    case TIR_ALLOC: st_alloc(p, s); return;
    case TIR_BARRIER:
      if (!p->d->barrier) {
        kiln_cf_fail(p, KILN_UNSUPPORTED, "barrier: the %s dialect has no work-groups", p->d->name);
        return;
      }
      line(p);
      putf(p, "%s\n", p->d->barrier);
      return;
    case TIR_PREFETCH: {
      /* a hint: C only (GCC / clang builtin), one element, never in lanes */
      if (p->d->lang != KILN_CF_LANG_C || p->lane) return;
      kiln_cf_check_buf(p, s->u.store.buf);
      tctx_t c = {.buf = s->u.store.buf, .idx = s->u.store.idx};
      line(p);
      kiln_cf_tpl(p, "__builtin_prefetch(&$B[$I]);\n", &c);
      return;
    }
  }
  kiln_cf_fail(p, KILN_INVALID_ARGUMENT, "unknown statement kind %d", (int)s->kind);
}
