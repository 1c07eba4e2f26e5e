/* The template choice (see template.h): for every plan kernel, the fast
 * path the target's template set allows, decided once here so that the
 * targets print descriptors instead of re-matching the plan.
 *
 * The rules are the targets' measurements, handed in as data
 * (kiln_template_set_t): where Winograd beats the implicit-GEMM conv,
 * where the depthwise template beats the printed kernel, whether partial
 * sums stay private. So are the tiles of each instance: the set's tile
 * rules (the target's measured defaults and its environment overrides)
 * pick them here, and the weight layout that follows from them is laid
 * out here too (template_weights.c), so the target only prints. A kernel
 * no template takes keeps its tensor IR, which is always correct. */
#include <string.h>

#include "ir/tir_visit.h"
#include "lowering/template.h"

/* The plan buffer the instance reads its weights from (-1: none). */
static int32_t weight_buffer(const kiln_template_conv_t* c) {
  for (int32_t j = 0; j < c->n_params; ++j)
    if (c->roles[j] == 'W') return c->args[j];
  return -1;
}

/* True when no kernel but the instance's GEMM (and no model output) reads
 * its weight constant, so the constant may be re-laid out for it. */
static bool weights_private(const kiln_plan_t* plan, const kiln_template_conv_t* c) {
  int32_t w = weight_buffer(c);
  if (w >= 0) w = kiln_plan_root(plan, w);
  if (w < 0 || plan->buffers[w].kind != KILN_PLAN_CONST ||
      (plan->buffers[w].buf->dtype != KILN_DTYPE_F32 && plan->buffers[w].buf->dtype != KILN_DTYPE_F16))
    return false;
  for (int32_t k = 0; k < plan->n_kernels; ++k) {
    if (k == c->gemm_kernel) continue;
    for (int32_t a = 0; a < plan->kernels[k].func->n_params; ++a)
      if (kiln_plan_root(plan, plan->kernels[k].args[a]) == w) return false;
  }
  for (int32_t i = 0; i < plan->graph->n_outputs; ++i)
    if (kiln_plan_root(plan, plan->outputs[i]) == w) return false;
  return true;
}

static bool winograd_wins(const kiln_template_set_t* set, const kiln_template_conv_t* c) {
  const bool f16_ok = !(set->winograd_f16_texels && (set->gpu_lacks & KILN_GPU_LACKS_TEXEL_F16));
  for (int32_t j = 0; !f16_ok && j < c->n_params; ++j)
    if ((c->roles[j] == 'W' || c->roles[j] == 'X') && c->f16[j]) return false;
  const int64_t tiles = kiln_template_winograd_tiles(c);
  return c->C >= set->winograd_min_channels && c->M >= set->winograd_min_channels &&
         (tiles >= set->winograd_min_tiles || c->C * c->M >= set->winograd_min_work);
}

static bool depthwise_wins(const kiln_template_set_t* set, const kiln_template_dw_t* d) {
  const int64_t stride = d->sh > d->sw ? d->sh : d->sw;
  return stride >= set->depthwise_min_stride || (set->depthwise_f16_any_stride && d->f16_x);
}

/* The implicit-GEMM conv of kernel |k| (*t matched with the grid when
 * the set keeps it, kind and weight layout set): where its partial sums
 * go. f16 buffers are storage only: the templates convert on load and
 * store and sum in f32. */
static kiln_status_t implicit_conv(const kiln_plan_t* plan, int32_t k, const kiln_template_set_t* set,
                                   kiln_template_t* t) {
  if (set->conv_grid && (set->conv_private_sums || kiln_template_conv_sums_f16(&t->conv))) {
    /* Partial sums between K slices stay f32 in a private array and the
     * grid leaves the program. Where the grid they would go through holds
     * f16 this is a must (rounding each slice's sum would add an error
     * growing with K); an f32 grid may keep the memory path. */
    kiln_template_conv_t nogrid;
    if (!kiln_template_conv_match(plan, k, false, true, &nogrid))
      return kiln_make_status(KILN_INTERNAL, "templates: conv '%s' matched with its grid, not without",
                              plan->kernels[k].func->name);
    t->psum_private = true;
    t->conv = nogrid;
  }
  /* the implicit GEMM zeroes the padding in its reads of X: the phase
   * split goes (kiln_template_select MERGES it into the instance). Where
   * it strides, has one tap or few input channels: a stride-1 conv with
   * more taps reads the copy's rows contiguously, X per position and tap
   * (ResNet-18 --precision fp16, whose f16 3x3 convs are implicit GEMMs,
   * was 1.4x slower reading X) */
  const kiln_template_conv_t* cc = &t->conv;
  if (t->kind == KILN_TEMPLATE_CONV && set->conv_reads_x && (cc->sh > 1 || cc->sw > 1 || cc->T == 1 || cc->C <= 4))
    kiln_template_conv_direct(plan, &t->conv);
  t->weights.buffer = weight_buffer(&t->conv);
  return NULL;
}

/* A conv with no epilogue or one Relu: X's buffer once more, as a
 * parameter in the place a residual operand would take (after Y), so the
 * instance binds what one with a residual Add + Relu binds
 * (kiln_template_set_t.winograd_epi_slot; the instance never reads it). */
static void epi_slot(kiln_template_conv_t* c) {
  const kiln_template_epi_t* e = &c->epi;
  if (e->n_operands != 0 || !(e->n_ops == 0 || (e->n_ops == 1 && e->ops[0].op == 'r')) ||
      c->n_params >= KILN_TEMPLATE_CONV_MAX_PARAMS || c->n_params < 1 || c->roles[c->n_params - 1] != 'Y')
    return;
  for (int32_t j = 0; j < c->n_params; ++j)
    if (c->roles[j] == 'X') {
      c->roles[c->n_params] = 'D', c->args[c->n_params] = c->args[j], c->f16[c->n_params] = c->f16[j];
      c->roles[++c->n_params] = 0;
      return;
    }
}

/* Kernel |k| of |plan| as the conv instance *t (matched with the grid
 * when the set keeps it): its weight layout, Winograd or not, and where
 * its partial sums go. A Winograd instance of a set with winograd_switch
 * gets its implicit-GEMM alternative in *alt (*has_alt). */
static kiln_status_t choose_conv(const kiln_plan_t* plan, int32_t k, const kiln_template_set_t* set,
                                 kiln_template_t* t, kiln_template_t* alt, bool* has_alt) {
  t->kind = KILN_TEMPLATE_CONV;
  *has_alt = false;
  const bool tiled = set->conv_tiled_weights && weights_private(plan, &t->conv);
  t->weights.layout = tiled ? KILN_TEMPLATE_W_TILED : KILN_TEMPLATE_W_PACKED;
  /* Winograd transforms the weights (so they must be the conv's own) and
   * keeps no partial sums in the grid, which leaves the program */
  kiln_template_conv_t nogrid;
  if (set->winograd && tiled && kiln_template_winograd_covers(&t->conv) && winograd_wins(set, &t->conv) &&
      kiln_template_conv_match(plan, k, false, true, &nogrid)) {
    if (set->winograd_switch) {
      *alt = *t;
      KILN_RETURN_IF_ERROR(implicit_conv(plan, k, set, alt));
      *has_alt = alt->conv.slot == nogrid.slot;
    }
    t->kind = KILN_TEMPLATE_WINOGRAD;
    t->weights.layout = set->winograd4 ? KILN_TEMPLATE_W_WINOGRAD4 : KILN_TEMPLATE_W_WINOGRAD;
    t->conv = nogrid;
    /* the padding in the template's reads: the phase split goes */
    if (set->winograd_reads_x) kiln_template_winograd_direct(plan, &t->conv);
    if (set->winograd_epi_slot) epi_slot(&t->conv);
    t->weights.buffer = weight_buffer(&t->conv);
    return NULL;
  }
  return implicit_conv(plan, k, set, t);
}

void kiln_template_set_tiles(const kiln_template_set_t* set, kiln_template_t* t) {
  t->device = set->limits;
  t->device.gpu_lacks = set->gpu_lacks;
  if (t->kind != KILN_TEMPLATE_MERGED && set->tiles) set->tiles(t);
}

/* A copy of |t| in the plan's arena with the tiles the set's rules pick
 * for it and, for weights it re-lays out, their geometry. */
static kiln_status_t make(kiln_plan_t* plan, int32_t k, const kiln_template_t* t, const kiln_template_set_t* set,
                          kiln_template_t** out) {
  kiln_template_t* d = kiln_arena_alloc(&plan->tir.arena, sizeof *d);
  if (!d) return kiln_make_status(KILN_OUT_OF_MEMORY, "templates: kernel '%s'", plan->kernels[k].func->name);
  *d = *t;
  kiln_template_set_tiles(set, d);
  if (d->weights.layout != KILN_TEMPLATE_W_PACKED && set->weight_blocks) set->weight_blocks(d);
  *out = d;
  return NULL;
}

/* Puts such a copy on kernel |k|. */
static kiln_status_t place(kiln_plan_t* plan, int32_t k, const kiln_template_t* t, const kiln_template_set_t* set) {
  kiln_template_t* d = NULL;
  KILN_RETURN_IF_ERROR(make(plan, k, t, set, &d));
  plan->kernels[k].tmpl = d;
  return NULL;
}

/* The Winograd instance on kernel |at| and its implicit-GEMM alternative
 * |alt|, linked; the switch entry (1: Winograd) after the target's tiles. */
static kiln_status_t link_alt(kiln_plan_t* plan, int32_t at, const kiln_template_t* alt,
                              const kiln_template_set_t* set) {
  kiln_template_t* w = plan->kernels[at].tmpl;
  if (!w || w->kind != KILN_TEMPLATE_WINOGRAD || w->tiles.n >= KILN_TEMPLATE_TILES_MAX) return NULL;
  kiln_template_t* a = NULL;
  KILN_RETURN_IF_ERROR(make(plan, at, alt, set, &a));
  w->alt = a;
  a->alt = w;
  w->tiles.v[w->tiles.n++] = 1;
  if (w->conv.x_direct && w->conv.phase_kernel >= 0) w->phase_merged = plan->kernels[w->conv.phase_kernel].tmpl;
  return NULL;
}

/* The Winograd instance on kernel |at| with its transformed weights
 * larger than the device binds in one piece (plan->max_binding: 36 / 9 =
 * 4x the conv's weights for F(4x4), FCN-ResNet50's 2048 -> 512 3x3 conv
 * 151 MB against lavapipe's 128 MiB) gives its place to its
 * implicit-GEMM alternative, as a tuning record with the switch off would. */
static void too_big_for_winograd(kiln_plan_t* plan, int32_t at) {
  kiln_template_t* w = plan->kernels[at].tmpl;
  if (!plan->max_binding || !w || w->kind != KILN_TEMPLATE_WINOGRAD || !w->alt || w->tiles.n < 1 ||
      kiln_template_weights_bytes(w) <= plan->max_binding)
    return;
  w->tiles.v[w->tiles.n - 1] = 0;
  kiln_template_switch(plan, at);
}

kiln_template_t* kiln_template_tunable_of(const kiln_plan_t* plan, int32_t k) {
  kiln_template_t* t = plan->kernels[k].tmpl;
  if (!t) return plan->kernels[k].tmpl_off;
  return t->kind == KILN_TEMPLATE_CONV && t->alt && t->alt->kind == KILN_TEMPLATE_WINOGRAD ? t->alt : t;
}

kiln_template_t* kiln_template_switch(kiln_plan_t* plan, int32_t k) {
  kiln_template_t* w = kiln_template_tunable_of(plan, k);
  if (w && w->kind == KILN_TEMPLATE_DEPTHWISE && (plan->kernels[k].tmpl_off == w || plan->kernels[k].tmpl == w) &&
      plan->kernels[k].tmpl_off) {
    const bool on = w->tiles.n > 0 && w->tiles.v[w->tiles.n - 1] != 0;
    plan->kernels[k].tmpl = on ? w : NULL;
    return plan->kernels[k].tmpl;
  }
  if (!w || w->kind != KILN_TEMPLATE_WINOGRAD || !w->alt || w->tiles.n < 1) return plan->kernels[k].tmpl;
  const bool on = w->tiles.v[w->tiles.n - 1] != 0;
  kiln_template_t* in = on ? w : w->alt;
  if (plan->kernels[k].tmpl != in) {
    in->weights.laid_out = false;
    plan->kernels[k].tmpl = in;
  }
  /* a tuned point's speed-up marks whichever runs */
  in->tuned_speedup = w->tuned_speedup;
  if (w->phase_merged) plan->kernels[w->conv.phase_kernel].tmpl = on ? w->phase_merged : NULL;
  return in;
}

/* A PRIVATE or LOCAL f16 buffer in |f|: an accumulator the precision pass
 * made f16 (--fp16-accumulate; without it every scoped buffer stays f32) */
static bool scoped_f16_pre(tir_visitor_t* v, const tir_stmt_t* s) {
  if (s->kind == TIR_ALLOC && s->u.alloc.buf->scope != TIR_SCOPE_GLOBAL && s->u.alloc.buf->dtype == KILN_DTYPE_F16) {
    *(bool*)v->user = true;
    v->stop = true;
  }
  return true;
}

static bool sums_f16(const kiln_plan_t* plan, int32_t k) {
  if (k < 0 || k >= plan->n_kernels || !plan->kernels[k].func) return false;
  bool found = false;
  tir_visitor_t v = {.user = &found, .stmt_pre = scoped_f16_pre};
  tir_visit_stmt(&v, plan->kernels[k].func->body);
  return found;
}

kiln_status_t kiln_template_select(kiln_plan_t* plan, const kiln_template_set_t* set) {
  if (!plan || !set) return kiln_make_status(KILN_INVALID_ARGUMENT, "templates: NULL plan or template set");
  /* the matchers read the lowering's packed weights: an earlier choice's
   * layouts go first */
  kiln_template_weights_restore(plan);
  for (int32_t k = 0; k < plan->n_kernels; ++k) plan->kernels[k].tmpl = plan->kernels[k].tmpl_off = NULL;
  if (!plan->graph) return NULL;
  kiln_template_t* t = NULL;
  kiln_status_t s = kiln_allocator_malloc(plan->allocator, 2 * sizeof *t, "templates", (void**)&t);
  kiln_template_t* alt = t ? t + 1 : NULL;
  for (int32_t k = 0; k < plan->n_kernels && !s; ++k) {
    if (plan->kernels[k].tmpl) continue; /* a conv instance's slot */
    if (plan->kernels[k].host) continue; /* printed by the CPU target from its tensor IR */
    memset(t, 0, sizeof *t);
    t->weights.buffer = -1;
    int32_t at = k;
    bool has_alt = false, dw_on = false;
    if (set->gemm && kiln_template_gemm_match(plan, k, &set->gemm_rules, &t->gemm)) {
      t->kind = KILN_TEMPLATE_GEMM;
    } else if (set->conv && kiln_template_conv_match(plan, k, set->conv_grid, true, &t->conv)) {
      s = choose_conv(plan, k, set, t, alt, &has_alt);
      /* the instance runs in the crop kernel's place; the GEMM goes */
      at = t->conv.slot;
      if (!s && at != k)
        s = place(plan, k, &(kiln_template_t){.kind = KILN_TEMPLATE_MERGED, .into = at, .weights.buffer = -1}, set);
      if (!s && (t->kind == KILN_TEMPLATE_WINOGRAD || t->kind == KILN_TEMPLATE_CONV) && t->conv.x_direct)
        s = place(plan, t->conv.phase_kernel,
                  &(kiln_template_t){.kind = KILN_TEMPLATE_MERGED, .into = at, .weights.buffer = -1}, set);
    } else if (set->depthwise && kiln_template_dw_match(plan, k, true, &t->dw) &&
               (depthwise_wins(set, &t->dw) || set->depthwise_switch)) {
      t->kind = KILN_TEMPLATE_DEPTHWISE;
      dw_on = depthwise_wins(set, &t->dw);
    } else if (set->q8 && kiln_template_q8_match(plan, k, set->q8_max_trips, &t->q8)) {
      t->kind = KILN_TEMPLATE_Q8;
    } else if (set->rows && !(set->gpu_lacks & KILN_GPU_LACKS_SUBGROUP_ARITH) &&
               kiln_template_rows_match(plan, k, &t->rows) &&
               ((set->rows_gpu_all && (set->gpu_lacks & KILN_GPU_CLASS_GPU) && !(t->rows.hx || t->rows.hy)) ||
                t->rows.rows * t->rows.n >= (t->rows.ln    ? set->rows_ln_min_elems
                                             : t->rows.red ? set->rows_red_min_elems
                                                           : set->rows_min_elems)) &&
               (set->rows_f16 || !(t->rows.hx || t->rows.hy))) {
      /* before the pools: a GlobalAveragePool the rule gives the rows */
      t->kind = KILN_TEMPLATE_ROWS;
    } else if (set->pool && kiln_template_pool_match(plan, k, &t->pool) &&
               (!(t->pool.hx || t->pool.hy) || (set->pool_f16 && !(set->gpu_lacks & KILN_GPU_LACKS_TEXEL_F16)))) {
      t->kind = KILN_TEMPLATE_POOL;
    }
    if (!s && set->f16_sums && (t->kind == KILN_TEMPLATE_GEMM || t->kind == KILN_TEMPLATE_CONV ||
                                t->kind == KILN_TEMPLATE_WINOGRAD)) {
      /* (a Winograd instance: its implicit-GEMM alternative's) */
      const bool f16s = sums_f16(plan, t->kind == KILN_TEMPLATE_GEMM ? k : t->conv.gemm_kernel);
      if (t->kind != KILN_TEMPLATE_WINOGRAD) t->f16_sums = f16s;
      if (has_alt) alt->f16_sums = f16s;
    }
    if (!s && t->kind != KILN_TEMPLATE_NONE) s = place(plan, at, t, set);
    if (!s && has_alt) s = link_alt(plan, at, alt, set);
    if (!s && has_alt) too_big_for_winograd(plan, at);
    if (!s && t->kind == KILN_TEMPLATE_DEPTHWISE && set->depthwise_switch) {
      /* the switch after the target's tiles; off: the printed kernel runs */
      kiln_template_t* d = plan->kernels[at].tmpl;
      if (d->tiles.n < KILN_TEMPLATE_TILES_MAX) d->tiles.v[d->tiles.n++] = dw_on ? 1 : 0;
      plan->kernels[at].tmpl_off = d;
      if (!dw_on) plan->kernels[at].tmpl = NULL;
    }
  }
  kiln_allocator_free(plan->allocator, t);
  if (s)
    for (int32_t k = 0; k < plan->n_kernels; ++k) plan->kernels[k].tmpl = plan->kernels[k].tmpl_off = NULL;
  return s;
}

kiln_status_t kiln_template_choose(kiln_plan_t* plan, const kiln_template_set_t* set) {
  KILN_RETURN_IF_ERROR(kiln_template_select(plan, set));
  kiln_status_t s = kiln_template_weights_lay_out(plan);
  if (s)
    for (int32_t k = 0; k < plan->n_kernels; ++k) plan->kernels[k].tmpl = NULL;
  return s;
}
