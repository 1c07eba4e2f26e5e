/* Template kernels of a per-sample plan (see kiln_plan_dyn_template in
 * plan_dyn.h): the GPU templates take the batch as their grid's dim 2
 * (get_group_id(2)) and step from one image to the next by strides, so a
 * one-sample instance serves any batch once its strides are the samples'
 * distance in the per-sample layout (root bytes apart) and the device
 * launches dim 2 once per sample. */
#include "lowering/plan_dyn.h"

#include "lowering/template.h"

/* Elements between samples of plan buffer |b| (its root's span), or -1
 * when the root is not a whole number of |b|'s elements. */
static int64_t sample_elems(const kiln_plan_t* p, int32_t b) {
  const uint64_t root = tir_buffer_span_bytes(p->buffers[kiln_plan_root(p, b)].buf);
  const uint64_t es = kiln_dtype_size(p->buffers[b].buf->dtype);
  return es && root % es == 0 ? (int64_t)(root / es) : -1;
}

static kiln_status_t refuse(const kiln_plan_t* p, const kiln_plan_kernel_t* kk, const char* dim, const char* tmpl,
                            const char* why, const char* buf) {
  return kiln_make_status(KILN_UNSUPPORTED,
                          "node '%s' (kernel '%s'): dim '%s' cannot be dynamic: its %s template %s%s%s",
                          kiln_plan_kernel_node_name(p, kk), kk->func->name, dim, tmpl, why, buf ? " " : "",
                          buf ? buf : "");
}

/* One conv or Winograd instance: its strides are its own shapes, which
 * must be the samples' distance; epilogue operands take theirs. */
static kiln_status_t conv_samples(const kiln_plan_t* p, const kiln_plan_kernel_t* kk, kiln_template_conv_t* c,
                                  const char* dim, const char* tmpl) {
  if (c->batch != 1) return refuse(p, kk, dim, tmpl, "was lowered for more than one image", NULL);
  for (int32_t j = 0; j < c->n_params; ++j) {
    const int32_t b = c->args[j];
    const char r = c->roles[j];
    const char* name = p->buffers[b].buf->name;
    const bool ps = kiln_plan_dyn_per_sample(p, b);
    const int64_t n = ps ? sample_elems(p, b) : 0;
    int64_t want = -1;
    switch (r) {
      case 'W':
      case 'C':
        if (ps) return refuse(p, kk, dim, tmpl, "takes per-sample weights or bias:", name);
        continue;
      case 'X': want = c->C * (c->x_direct ? c->ih * c->iw : c->plane); break;
      case 'Y': want = c->M * c->od * c->oh * c->ow; break;
      case 'F': want = c->M * c->Q; break;
      case 'D': continue; /* never read (winograd_epi_slot) */
      default: {
        const int32_t e = r - '0';
        if (e < 0 || e >= c->epi.n_operands) return refuse(p, kk, dim, tmpl, "has a parameter of unknown role:", name);
        if (!ps) continue;
        if (n <= 0) return refuse(p, kk, dim, tmpl, "cannot step between samples of", name);
        c->epi.operands[e].sn = n;
        continue;
      }
    }
    if (!ps) return refuse(p, kk, dim, tmpl, "reads a constant as its image:", name);
    /* without a crop conv.cl may keep partial sums in Y at the grid's stride */
    if (r == 'Y' && !c->crop && c->M * c->Q != want) want = -1;
    if (n != want) return refuse(p, kk, dim, tmpl, "steps between images by its own shape, not by the samples of", name);
  }
  return NULL;
}

static kiln_status_t gemm_samples(const kiln_plan_t* p, const kiln_plan_kernel_t* kk, kiln_template_gemm_t* g,
                                  const char* dim) {
  if (g->batch != 1) return refuse(p, kk, dim, "GEMM", "was lowered for more than one batch", NULL);
  for (int32_t j = 0; j < g->n_params && j < kk->func->n_params; ++j) {
    const int32_t b = kk->args[j];
    const char* name = p->buffers[b].buf->name;
    if (!kiln_plan_dyn_per_sample(p, b)) continue;
    const int64_t n = sample_elems(p, b);
    if (n <= 0) return refuse(p, kk, dim, "GEMM", "cannot step between samples of", name);
    switch (g->roles[j]) {
      case 'A': g->sa = n; break;
      case 'B': g->sb = n; break;
      case 'Y': g->sy = n; break;
      case '-': break;
      default: return refuse(p, kk, dim, "GEMM", "takes a per-sample bias:", name);
    }
  }
  return NULL;
}

/* The template of kernel |kk| leaves it: its own tensor IR runs. */
static kiln_status_t drop(const kiln_plan_t* p, kiln_plan_kernel_t* kk, const char* dim, const char* tmpl,
                          bool* out_printed) {
  if (kk->tmpl->weights.laid_out) return refuse(p, kk, dim, tmpl, "has its weights laid out for it", NULL);
  kk->tmpl = NULL;
  *out_printed = true;
  return NULL;
}

kiln_status_t kiln_plan_dyn_template(kiln_plan_t* p, int32_t k, const char* dim, const kiln_template_set_t* set,
                                     bool* out_printed) {
  kiln_plan_kernel_t* kk = &p->kernels[k];
  kiln_template_t* t = kk->tmpl;
  *out_printed = false;
  switch (t->kind) {
    case KILN_TEMPLATE_MERGED: return NULL; /* leaves the program */
    case KILN_TEMPLATE_GEMM:
      /* without batch strides (a target whose rules lack them) the rows of
       * all samples would be one run-time M; a GEMM batched already
       * (attention's heads) would need a second batch dim */
      if ((set && !set->gemm_rules.batched) || t->gemm.batch != 1) return drop(p, kk, dim, "GEMM", out_printed);
      /* a fused residual has no batch stride in the templates */
      if (t->gemm.has_res) return drop(p, kk, dim, "GEMM", out_printed);
      return gemm_samples(p, kk, &t->gemm, dim);
    case KILN_TEMPLATE_CONV: return conv_samples(p, kk, &t->conv, dim, "conv");
    case KILN_TEMPLATE_WINOGRAD: return conv_samples(p, kk, &t->conv, dim, "Winograd");
    case KILN_TEMPLATE_DEPTHWISE:
      /* its grid folds the images into dim 0: the kernel's own tensor IR
       * (the printed kernel the template replaced) runs instead */
      return drop(p, kk, dim, "depthwise", out_printed);
    case KILN_TEMPLATE_POOL: return drop(p, kk, dim, "pool", out_printed); /* its grid folds the images too */
    case KILN_TEMPLATE_ROWS: return drop(p, kk, dim, "rows", out_printed); /* its grid holds every row */
    case KILN_TEMPLATE_Q8: return refuse(p, kk, dim, "int8 (q8)", "folds the images into its grid", NULL);
    case KILN_TEMPLATE_NONE: *out_printed = true; return NULL;
  }
  return refuse(p, kk, dim, "?", "is of an unknown kind", NULL);
}
