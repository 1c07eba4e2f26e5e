/* The fp16 pass on a plan (see precision.h): which buffers turn f16, the
 * buffer-substitution rewrite of the kernels, and the report. The policy
 * file format lives in precision_policy.c. */
#include "lowering/precision.h"

#include <stdlib.h>
#include <string.h>

#include "ir/tir_visit.h"
#include "lowering/fuse.h"

bool kiln_precision_parse_mode(const char* s, kiln_precision_mode_t* out) {
  static const char* const names[] = {"fp32", "fp16", "auto", "int8"};
  for (int i = 0; i < 4; ++i)
    if (s && !strcmp(s, names[i])) {
      *out = (kiln_precision_mode_t)i;
      return true;
    }
  return false;
}

const char* kiln_precision_mode_name(kiln_precision_mode_t m) {
  switch (m) {
    case KILN_PRECISION_FP32: return "fp32";
    case KILN_PRECISION_FP16: return "fp16";
    case KILN_PRECISION_AUTO: return "auto";
    case KILN_PRECISION_INT8: return "int8";
  }
  return "?";
}

/* ---- buffer-substitution rewrite ---------------------------------------
 * Replaces buffers from[i] by to[i] (same shape, f16 instead of f32) in a
 * kernel. Loads of a replaced buffer are widened back to the original dtype
 * and stores narrowed, so values keep their types and the rest of the tree
 * is untouched. With |half| every f32-typed value is retyped to f16 instead
 * (loads of f32 buffers are narrowed, stores to f32 buffers widened): the
 * kernel then computes in half. Unchanged subtrees are shared. */
typedef struct {
  int32_t n;
  const tir_buffer_t* const* from;
  const tir_buffer_t* const* to;
  bool half;
} rw_t;

static const tir_buffer_t* rw_map(const rw_t* r, const tir_buffer_t* b) {
  for (int32_t i = 0; i < r->n; ++i)
    if (r->from[i] == b) return r->to[i];
  return NULL;
}

/* Called on each expression rebuilt over its rewritten children; only
 * immediates, loads and casts change here (arithmetic takes its dtype from
 * the rewritten operands). */
static const tir_expr_t* rx(tir_mutator_t* m, const tir_expr_t* e) {
  const rw_t* r = m->user;
  tir_ctx_t* c = m->ctx;
  bool half = r->half && e->dtype == KILN_DTYPE_F32;
  switch (e->kind) {
    case TIR_FLOAT:
      return half ? tir_const(c, KILN_DTYPE_F16, e->u.f) : e;
    case TIR_LOAD: {
      const tir_buffer_t* nb = rw_map(r, e->u.load.buf);
      if (nb) {
        const tir_expr_t* ld = tir_load(c, nb, e->u.load.idx);
        return half ? ld : tir_cast(c, e->dtype, ld);
      }
      return half ? tir_cast(c, KILN_DTYPE_F16, e) : e;
    }
    case TIR_CAST:
      /* A no-op when the value is f16 already. */
      return half ? tir_cast(c, KILN_DTYPE_F16, e->u.cast.value) : e;
    case TIR_CALL:
      /* the f8 conversions keep their f32 side (an f16 operand widened, an
       * f32 result narrowed for f16 arithmetic): fp16-arith plans (Vulkan)
       * gave f8_encode an f16 value */
      if (e->u.call.fn == TIR_F8_ENCODE && e->u.call.args[0]->dtype != KILN_DTYPE_F32)
        return tir_call(c, TIR_F8_ENCODE, 2, tir_cast(c, KILN_DTYPE_F32, e->u.call.args[0]), e->u.call.args[1], NULL);
      if (e->u.call.fn == TIR_F8_DECODE && half) return tir_cast(c, KILN_DTYPE_F16, e);
      return e;
    default:
      return e;
  }
}

/* |v| converted for a store into a buffer of dtype |t|. A widened f16 load
 * stored into f16 is the load itself (the round trip is exact), so copies
 * keep their bits. */
static const tir_expr_t* narrow_to(tir_ctx_t* c, const tir_expr_t* v, kiln_dtype_t t) {
  if (!v || v->dtype == t) return v;
  if (v->kind == TIR_CAST && v->u.cast.value->dtype == t && t == KILN_DTYPE_F16) return v->u.cast.value;
  return tir_cast(c, t, v);
}

/* Stores, allocs and prefetches of a replaced buffer move to its f16 twin. */
static const tir_stmt_t* rs(tir_mutator_t* m, const tir_stmt_t* st) {
  const rw_t* r = m->user;
  tir_ctx_t* c = m->ctx;
  if (st->kind == TIR_STORE) {
    const tir_buffer_t* nb = rw_map(r, st->u.store.buf);
    const tir_buffer_t* b = nb ? nb : st->u.store.buf;
    const tir_expr_t* v = narrow_to(c, st->u.store.value, b->dtype);
    if (!v) return NULL;
    if (!nb && v == st->u.store.value) return st;
    return tir_store(c, b, st->u.store.idx, v);
  }
  if (st->kind == TIR_ALLOC) {
    const tir_buffer_t* nb = rw_map(r, st->u.alloc.buf);
    return nb ? tir_alloc(c, nb, st->u.alloc.body) : st;
  }
  if (st->kind == TIR_PREFETCH) { /* a hint at the same element of the twin */
    const tir_buffer_t* nb = rw_map(r, st->u.store.buf);
    return nb ? tir_prefetch(c, nb, st->u.store.idx) : st;
  }
  return st;
}

static const tir_stmt_t* rewrite(tir_ctx_t* c, rw_t* r, const tir_stmt_t* body) {
  tir_mutator_t m = {.ctx = c, .user = r, .stmt_post = rs, .expr_post = rx};
  return tir_mutate_stmt(&m, body);
}

/* Scoped (PRIVATE/LOCAL) f32 buffers allocated in |st|, appended to |out|
 * (up to |cap|). */
typedef struct scoped_s {
  const tir_buffer_t** out;
  int32_t* n;
  int32_t cap;
} scoped_t;

static bool scoped_pre(tir_visitor_t* v, const tir_stmt_t* st) {
  scoped_t* k = v->user;
  if (st->kind == TIR_ALLOC && st->u.alloc.buf->dtype == KILN_DTYPE_F32 && *k->n < k->cap)
    k->out[(*k->n)++] = st->u.alloc.buf;
  return true;
}

static void scoped_f32(const tir_stmt_t* st, const tir_buffer_t** out, int32_t* n, int32_t cap) {
  scoped_t k = {out, n, cap};
  tir_visitor_t v = {.user = &k, .stmt_pre = scoped_pre};
  tir_visit_stmt(&v, st);
}

/* ---- the pass ------------------------------------------------------------ */

static int64_t buffer_bytes(const tir_buffer_t* b) {
  int64_t span = 1;
  for (int32_t k = 0; k < b->rank; ++k) {
    if (b->shape[k] <= 0) return 0;
    int64_t st = b->strides[k] < 0 ? -b->strides[k] : b->strides[k];
    span += (b->shape[k] - 1) * st;
  }
  return span * (int64_t)kiln_dtype_size(b->dtype);
}

static bool pointwise_kernel(const kiln_plan_t* p, int32_t k) {
  int32_t nodes[256];
  int32_t n = kiln_plan_kernel_nodes(p, k, nodes, 256);
  if (n > 256) return false;
  for (int32_t i = 0; i < n; ++i) {
    if (nodes[i] < 0 || nodes[i] >= p->graph->n_nodes) return false;
    kiln_op_pattern_t pat = kiln_op_pattern(p->graph->nodes[nodes[i]].op_type);
    if (pat != KILN_PATTERN_ELEMWISE && pat != KILN_PATTERN_BROADCAST) return false;
  }
  return true;
}

/* The quantized ops stay fp32 whatever the policy: their integer results
 * are defined by f32 scales (a scale or a min/max rounded to f16 moves
 * values by one step), and their integer tensors never narrow anyway. */
static bool quantized_op(const kiln_node_t* n) {
  static const char* const ops[] = {"QuantizeLinear", "DequantizeLinear", "DynamicQuantizeLinear",
                                    "QLinearMatMul", "QLinearConv"};
  for (size_t i = 0; n->op_type && i < sizeof ops / sizeof ops[0]; ++i)
    if (!strcmp(n->op_type, ops[i])) return true;
  return false;
}

static bool kernel_fp16(const kiln_plan_t* p, int32_t k, const kiln_precision_policy_t* pol) {
  int32_t nodes[256];
  int32_t n = kiln_plan_kernel_nodes(p, k, nodes, 256);
  if (n > 256) n = 256;
  for (int32_t i = 0; i < n; ++i) {
    if (nodes[i] < 0 || nodes[i] >= p->graph->n_nodes) return false;
    if (quantized_op(&p->graph->nodes[nodes[i]])) return false;
    if (!kiln_precision_node_fp16(pol, p->graph, nodes[i], true)) return false;
  }
  return n > 0;
}

/* What the kernels do with one memory root (the root and its aliases). */
typedef struct {
  bool used, io, written, writers_fp16, readers_fp16, rmw, all_f32;
  bool read_by_reduction; /* loaded by a kernel that sums into scoped f32 accumulators */
  bool plugin;            /* touched by a plugin kernel, whose source has its dtypes built in */
} root_use_t;

static void report_bytes(const kiln_plan_t* p, const root_use_t* u, int64_t* weights, int64_t* inter) {
  *weights = *inter = 0;
  for (int32_t i = 0; i < p->n_buffers; ++i) {
    if (kiln_plan_root(p, i) != i || !u[i].used) continue;
    const kiln_plan_buffer_t* b = &p->buffers[i];
    if (b->kind == KILN_PLAN_CONST) *weights += buffer_bytes(b->buf);
    else if (b->kind == KILN_PLAN_INTERMEDIATE || b->kind == KILN_PLAN_TEMP) *inter += buffer_bytes(b->buf);
  }
}

static kiln_status_t convert_const(kiln_plan_buffer_t* b, const tir_buffer_t* nb) {
  const kiln_array_t* v = &b->value;
  int64_t n = tir_buffer_numel(b->buf);
  if (v->dtype != KILN_DTYPE_F32 || (int64_t)v->nbytes != buffer_bytes(b->buf) || (n && !v->data))
    return kiln_make_status(KILN_INTERNAL, "constant '%s': %zu bytes of %s for a %lld-byte f32 buffer",
                            b->buf->name, v->nbytes, kiln_dtype_name(v->dtype),
                            (long long)buffer_bytes(b->buf));
  kiln_array_t h;
  KILN_RETURN_IF_ERROR(kiln_array_alloc(kiln_allocator_system(), KILN_DTYPE_F16, &v->shape, &h),
                       "converting constant '%s' to f16", b->buf->name);
  /* The value's element count may differ from the shape's when the buffer
   * is strided; the bytes follow the buffer's span either way. */
  int64_t span = buffer_bytes(nb) / 2;
  if ((int64_t)h.nbytes != span * 2) {
    kiln_array_free(kiln_allocator_system(), &h);
    return kiln_make_status(KILN_INTERNAL, "constant '%s': f16 array of %zu bytes, buffer spans %lld",
                            b->buf->name, h.nbytes, (long long)span * 2);
  }
  const float* src = v->data;
  uint16_t* dst = h.data;
  for (int64_t i = 0; i < span; ++i) dst[i] = kiln_f32_to_f16(src[i]);
  if (b->owned) kiln_array_free(kiln_allocator_system(), &b->value);
  b->value = h;
  b->owned = true;
  return NULL;
}

static kiln_status_t fill_report(const kiln_plan_t* p, const uint8_t* kp, kiln_precision_report_t* r) {
  memset(r, 0, sizeof(*r));
  r->n_kernels = p->n_kernels;
  KILN_RETURN_IF_ERROR(kiln_allocator_malloc(kiln_allocator_system(), (size_t)p->n_kernels + 1,
                                             "precision report", (void**)&r->kernel_precision));
  memset(r->kernel_precision, 0, (size_t)p->n_kernels + 1);
  for (int32_t k = 0; k < p->n_kernels; ++k) {
    r->kernel_precision[k] = kp ? kp[k] : KILN_KERNEL_FP32;
    r->kernels_fp16 += r->kernel_precision[k] != KILN_KERNEL_FP32;
    r->kernels_fp16_arith += r->kernel_precision[k] == KILN_KERNEL_FP16_ARITH;
  }
  return NULL;
}

static kiln_status_t set_precision(kiln_plan_t* p, const kiln_precision_options_t* o,
                                   root_use_t* u, uint8_t* kp, const tir_buffer_t** from,
                                   const tir_buffer_t** to, kiln_precision_report_t* r) {
  tir_ctx_t* c = &p->tir;
  int32_t nb = p->n_buffers;
  for (int32_t i = 0; i < nb; ++i) u[i] = (root_use_t){false, false, false, true, true, false, true, false, false};
  for (int32_t i = 0; i < nb; ++i) {
    int32_t root = kiln_plan_root(p, i);
    const kiln_plan_buffer_t* b = &p->buffers[i];
    if (b->kind == KILN_PLAN_INPUT || b->kind == KILN_PLAN_OUTPUT) u[root].io = true;
    if (b->buf->dtype != KILN_DTYPE_F32 || b->buf->scope != TIR_SCOPE_GLOBAL) u[root].all_f32 = false;
  }
  for (int32_t i = 0; i < p->graph->n_outputs; ++i) u[kiln_plan_root(p, p->outputs[i])].io = true;
  for (int32_t i = 0; i < p->graph->n_inputs; ++i) u[kiln_plan_root(p, p->inputs[i])].io = true;

  /* Kernel precisions, then who reads and writes each root. */
  for (int32_t k = 0; k < p->n_kernels; ++k) {
    /* a plugin kernel computes in the dtypes its plugin declared: it and
     * every buffer it touches stay as they are */
    const bool plugin = p->kernels[k].custom != NULL;
    bool f16 = !plugin && o->mode == KILN_PRECISION_FP16 && kernel_fp16(p, k, o->policy);
    kp[k] = f16 ? KILN_KERNEL_FP16_STORAGE : KILN_KERNEL_FP32;
    const tir_func_t* f = p->kernels[k].func;
    const tir_buffer_t* sc[1];
    int32_t ns = 0;
    scoped_f32(f->body, sc, &ns, 1);
    if (f16 && o->fp16_arith && (o->fp16_accumulate || (pointwise_kernel(p, k) && ns == 0)))
      kp[k] = KILN_KERNEL_FP16_ARITH;
    for (int32_t j = 0; j < f->n_params; ++j) {
      int32_t root = kiln_plan_root(p, p->kernels[k].args[j]);
      int acc = tir_func_buffer_access(f, f->params[j]);
      root_use_t* ru = &u[root];
      ru->used = true;
      ru->plugin |= plugin;
      if (acc & TIR_ACCESS_STORE) {
        ru->written = true;
        if (!f16) ru->writers_fp16 = false;
        if (acc & TIR_ACCESS_LOAD) ru->rmw = true;
      }
      if (!f16) ru->readers_fp16 = false;
      if ((acc & TIR_ACCESS_LOAD) && ns > 0) ru->read_by_reduction = true;
    }
  }
  report_bytes(p, u, &r->weight_bytes_before, &r->intermediate_bytes_before);
  if (o->mode == KILN_PRECISION_FP32) return NULL;

  /* Which roots turn f16; their aliases follow. */
  int32_t nmap = 0;
  for (int32_t i = 0; i < nb; ++i) {
    if (kiln_plan_root(p, i) != i) continue;
    const root_use_t* ru = &u[i];
    kiln_plan_buffer_t* b = &p->buffers[i];
    if (!ru->used || ru->io || !ru->all_f32 || ru->plugin) continue;
    bool conv = false;
    if (b->kind == KILN_PLAN_CONST) {
      conv = ru->readers_fp16 && b->value.dtype == KILN_DTYPE_F32;
    } else if (!o->weights_only &&
               (b->kind == KILN_PLAN_INTERMEDIATE ||
                (b->kind == KILN_PLAN_TEMP && !(o->f32_workspaces && ru->read_by_reduction)))) {
      conv = ru->written && ru->writers_fp16;
      if (conv && ru->rmw && !o->fp16_accumulate) {
        conv = false;
        r->accumulators_kept++;
      }
    }
    if (!conv) continue;
    for (int32_t m = 0; m < nb; ++m) {
      if (kiln_plan_root(p, m) != i) continue;
      const tir_buffer_t* old = p->buffers[m].buf;
      tir_buffer_t* h = tir_buffer(c, old->name, KILN_DTYPE_F16, old->rank, old->shape, old->scope);
      if (!h) return tir_ctx_status(c);
      memcpy(h->strides, old->strides, sizeof(h->strides));
      if (p->buffers[m].kind == KILN_PLAN_CONST) KILN_RETURN_IF_ERROR(convert_const(&p->buffers[m], h));
      from[nmap] = old;
      to[nmap] = h;
      ++nmap;
      p->buffers[m].buf = h;
      r->buffers_converted++;
    }
  }

  /* Rewrite the kernels that touch a converted buffer or change precision. */
  for (int32_t k = 0; k < p->n_kernels; ++k) {
    kiln_plan_kernel_t* pk = &p->kernels[k];
    const tir_func_t* f = pk->func;
    int32_t n = nmap;
    const tir_buffer_t* sc[64];
    int32_t ns = 0;
    if (kp[k] != KILN_KERNEL_FP32 && o->fp16_accumulate) scoped_f32(f->body, sc, &ns, 64);
    for (int32_t s = 0; s < ns; ++s) {
      tir_buffer_t* h = tir_buffer(c, sc[s]->name, KILN_DTYPE_F16, sc[s]->rank, sc[s]->shape, sc[s]->scope);
      if (!h) return tir_ctx_status(c);
      memcpy(h->strides, sc[s]->strides, sizeof(h->strides));
      from[n] = sc[s];
      to[n] = h;
      ++n;
    }
    bool touches = ns > 0 || kp[k] == KILN_KERNEL_FP16_ARITH;
    for (int32_t j = 0; j < f->n_params && !touches; ++j)
      for (int32_t m = 0; m < nmap && !touches; ++m) touches = f->params[j] == from[m];
    if (!touches) continue;
    rw_t rw = {n, from, to, kp[k] == KILN_KERNEL_FP16_ARITH};
    const tir_stmt_t* body = rewrite(c, &rw, f->body);
    const tir_buffer_t** params = kiln_arena_alloc(&c->arena, sizeof(*params) * (size_t)(f->n_params + 1));
    if (!body || !params) return kiln_make_status(KILN_OUT_OF_MEMORY, "kernel %s: out of memory", f->name);
    for (int32_t j = 0; j < f->n_params; ++j) {
      const tir_buffer_t* m = rw_map(&rw, f->params[j]);
      params[j] = m ? m : f->params[j];
    }
    tir_func_t* nf = tir_func(c, f->name, f->n_params, params, body);
    if (!nf) return tir_ctx_status(c);
    KILN_RETURN_IF_ERROR(tir_verify(nf), "kernel %s after the fp16 rewrite", f->name);
    pk->func = nf;
    /* The naive form follows the same buffers (f32 arithmetic), so a tuner
     * rescheduling from it sees the plan's buffers. */
    if (pk->naive) {
      rw_t rn = {nmap, from, to, false};
      const tir_func_t* nv = pk->naive;
      const tir_stmt_t* nbody = rewrite(c, &rn, nv->body);
      const tir_buffer_t** np = kiln_arena_alloc(&c->arena, sizeof(*np) * (size_t)(nv->n_params + 1));
      if (nbody && np) {
        for (int32_t j = 0; j < nv->n_params; ++j) {
          const tir_buffer_t* m = rw_map(&rn, nv->params[j]);
          np[j] = m ? m : nv->params[j];
        }
        tir_func_t* nn = tir_func(c, nv->name, nv->n_params, np, nbody);
        if (nn) pk->naive = nn;
      }
    }
  }
  KILN_RETURN_IF_ERROR(tir_ctx_status(c));
  return NULL;
}

kiln_status_t kiln_plan_set_precision(kiln_plan_t* p, const kiln_precision_options_t* o,
                                      kiln_precision_report_t* out_report) {
  if (!p || !o) return kiln_make_status(KILN_INVALID_ARGUMENT, "precision: NULL plan or options");
  if (o->mode == KILN_PRECISION_INT8)
    return kiln_make_status(KILN_INVALID_ARGUMENT,
                            "precision int8: quantize the graph before its passes (kiln_quantize_graph_in_place); "
                            "the plan's float tensors stay fp32");
  if (o->mode == KILN_PRECISION_AUTO)
    return kiln_make_status(KILN_INVALID_ARGUMENT,
                            "precision auto: calibrate first (kiln_calibrate_precision) and pass the "
                            "resulting policy with mode fp16");
  kiln_allocator_t a = kiln_allocator_system();
  size_t nb = (size_t)p->n_buffers + 1, nk = (size_t)p->n_kernels + 1;
  root_use_t* u = NULL;
  uint8_t* kp = NULL;
  const tir_buffer_t** from = NULL;
  const tir_buffer_t** to = NULL;
  kiln_precision_report_t r;
  memset(&r, 0, sizeof r);
  kiln_status_t s = NULL;
  if ((s = kiln_allocator_malloc(a, sizeof(*u) * nb, "precision", (void**)&u)) ||
      (s = kiln_allocator_malloc(a, nk, "precision", (void**)&kp)) ||
      (s = kiln_allocator_malloc(a, sizeof(*from) * (nb + 64), "precision", (void**)&from)) ||
      (s = kiln_allocator_malloc(a, sizeof(*to) * (nb + 64), "precision", (void**)&to)))
    goto done;
  s = set_precision(p, o, u, kp, from, to, &r);
  if (!s) {
    /* Sizes after: recount with the new buffer dtypes. */
    report_bytes(p, u, &r.weight_bytes_after, &r.intermediate_bytes_after);
    kiln_precision_report_t full;
    if (out_report && !(s = fill_report(p, kp, &full))) {
      full.buffers_converted = r.buffers_converted;
      full.accumulators_kept = r.accumulators_kept;
      full.weight_bytes_before = r.weight_bytes_before;
      full.weight_bytes_after = r.weight_bytes_after;
      full.intermediate_bytes_before = r.intermediate_bytes_before;
      full.intermediate_bytes_after = r.intermediate_bytes_after;
      *out_report = full;
    }
  }
done:
  kiln_allocator_free(a, u);
  kiln_allocator_free(a, kp);
  kiln_allocator_free(a, from);
  kiln_allocator_free(a, to);
  return s;
}

void kiln_precision_report_free(kiln_precision_report_t* r) {
  if (!r) return;
  kiln_allocator_free(kiln_allocator_system(), r->kernel_precision);
  memset(r, 0, sizeof(*r));
}

void kiln_precision_report_print(const kiln_plan_t* p, const kiln_precision_report_t* r,
                                 bool per_kernel, FILE* out) {
  fprintf(out,
          "precision: %d of %d kernels fp16 (%d with fp16 arithmetic), %d buffers f16, "
          "weights %.2f -> %.2f MB, intermediates %.2f -> %.2f MB",
          r->kernels_fp16, r->n_kernels, r->kernels_fp16_arith, r->buffers_converted,
          (double)r->weight_bytes_before / 1e6, (double)r->weight_bytes_after / 1e6,
          (double)r->intermediate_bytes_before / 1e6, (double)r->intermediate_bytes_after / 1e6);
  if (r->accumulators_kept) fprintf(out, ", %d in-memory accumulators kept f32", r->accumulators_kept);
  fputc('\n', out);
  if (!per_kernel || !p) return;
  static const char* const names[] = {"fp32", "fp16 storage", "fp16 arith"};
  for (int32_t k = 0; k < r->n_kernels && k < p->n_kernels; ++k) {
    const kiln_plan_kernel_t* pk = &p->kernels[k];
    const kiln_node_t* n = &p->graph->nodes[pk->node];
    fprintf(out, "  kernel %-3d %-32s %-12s node '%s' (%s)", k, pk->func->name,
            names[r->kernel_precision[k] < 3 ? r->kernel_precision[k] : 0], n->name, n->op_type);
    if (pk->n_fused_nodes) fprintf(out, " + %d fused", pk->n_fused_nodes);
    fputc('\n', out);
  }
}
