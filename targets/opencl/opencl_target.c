/* kiln OpenCL target (see opencl_target.h). */
#include "targets/opencl/opencl_target.h"

#include <stdlib.h>
#include <string.h>

#include "targets/cfamily/printer.h"
#include "targets/opencl/opencl_internal.h"
#include "targets/registry.h"

/* Parameter i may be declared restrict unless another parameter of the
 * kernel lives in the same memory (one root buffer, or the in-place pair the
 * memory planner may overlap). */
static void noalias_flags(const kiln_program_t* prog, const kiln_program_kernel_t* pk, bool* out) {
  for (int32_t i = 0; i < pk->n_args; ++i) {
    out[i] = true;
    int32_t ri = kiln_program_root(prog, pk->args[i]);
    for (int32_t j = 0; j < pk->n_args; ++j)
      if (j != i && kiln_program_root(prog, pk->args[j]) == ri) out[i] = false;
    if (pk->inplace_in >= 0 && (i == pk->inplace_in || i == pk->inplace_out)) out[i] = false;
  }
}

/* Template instances printed so far, each with its text with its own name
 * blanked out: an instance whose text is the same (the same shapes, tiles
 * and epilogue, e.g. repeated ResNet blocks) calls the first one's kernel
 * instead of adding a copy, so the driver compiles it once. */
typedef struct {
  int32_t n, cap, n_shared;
  char** canon;
  const char** name;
} instances_t;

static void instances_free(instances_t* t, kiln_allocator_t al) {
  for (int32_t i = 0; i < t->n; ++i) kiln_allocator_free(al, t->canon[i]);
  kiln_allocator_free(al, t->canon);
  kiln_allocator_free(al, (void*)t->name);
}

/* |text| with every occurrence of |name| replaced by one \x01. */
static kiln_status_t blank_name(kiln_allocator_t al, const char* text, const char* name, char** out) {
  const size_t nl = strlen(name), tl = strlen(text);
  char* c = NULL;
  KILN_RETURN_IF_ERROR(kiln_allocator_malloc(al, tl + 1, "opencl emit", (void**)&c));
  size_t o = 0;
  for (const char* p = text; *p;) {
    if (nl && !strncmp(p, name, nl)) {
      c[o++] = '\x01';
      p += nl;
    } else {
      c[o++] = *p++;
    }
  }
  c[o] = 0;
  *out = c;
  return NULL;
}

static kiln_status_t add_instance(instances_t* t, kiln_program_t* prog, int32_t k, const kiln_cf_out_t* one,
                                  kiln_cf_out_t* out) {
  kiln_allocator_t al = prog->allocator;
  char* canon = NULL;
  KILN_RETURN_IF_ERROR(blank_name(al, one->data ? one->data : "", prog->kernels[k].name, &canon));
  for (int32_t i = 0; i < t->n; ++i) {
    if (strcmp(t->canon[i], canon)) continue;
    kiln_allocator_free(al, canon);
    char* shared = NULL;
    KILN_RETURN_IF_ERROR(kiln_program_strdup(prog, t->name[i], &shared));
    kiln_allocator_free(al, prog->kernels[k].name);
    prog->kernels[k].name = shared;
    t->n_shared++;
    return NULL;
  }
  if (t->n == t->cap) {
    int32_t cap = t->cap ? 2 * t->cap : 16;
    void* a = t->canon;
    void* b = (void*)t->name;
    kiln_status_t s = kiln_allocator_realloc(al, sizeof(char*) * (size_t)cap, "opencl emit", &a);
    if (!s) t->canon = a;
    if (!s) s = kiln_allocator_realloc(al, sizeof(char*) * (size_t)cap, "opencl emit", &b);
    if (!s) t->name = b;
    if (s) {
      kiln_allocator_free(al, canon);
      return s;
    }
    t->cap = cap;
  }
  t->canon[t->n] = canon;
  t->name[t->n] = prog->kernels[k].name;
  t->n++;
  kiln_cf_out_puts(out, one->data ? one->data : "");
  return NULL;
}

/* The weight constants of the conv instances marked in |wtiled|, re-laid
 * out for their template (Winograd ones transformed; one weights blob
 * rebuild for all). */
static kiln_status_t relayout_conv_weights(kiln_program_t* prog, const kiln_gpu_conv_t* convs,
                                           const kiln_opencl_conv_tiles_t* ctiles, const bool* wtiled,
                                           const bool* wino, const kiln_opencl_wino_tiles_t* wtiles,
                                           int32_t n) {
  kiln_allocator_t al = prog->allocator;
  int32_t m = 0;
  for (int32_t k = 0; k < n; ++k) m += convs[k].matched && wtiled[k];
  if (!m) return NULL;
  int32_t* bufs = NULL;
  void** data = NULL;
  uint64_t* bytes = NULL;
  kiln_status_t s = kiln_allocator_malloc(al, sizeof *bufs * (size_t)m, "opencl emit", (void**)&bufs);
  if (!s) s = kiln_allocator_malloc(al, sizeof *data * (size_t)m, "opencl emit", (void**)&data);
  if (!s) s = kiln_allocator_malloc(al, sizeof *bytes * (size_t)m, "opencl emit", (void**)&bytes);
  int32_t got = 0;
  for (int32_t k = 0; k < n && !s; ++k) {
    if (!convs[k].matched || !wtiled[k]) continue;
    s = wino[k] ? kiln_opencl_wino_pack_weights(prog, &convs[k], &wtiles[k], &bufs[got], &data[got], &bytes[got])
                : kiln_opencl_conv_pack_weights(prog, &convs[k], &ctiles[k], &bufs[got], &data[got], &bytes[got]);
    if (!s) ++got;
  }
  if (!s) s = kiln_program_const_replace(prog, got, bufs, (const void* const*)data, bytes);
  for (int32_t i = 0; i < got; ++i) kiln_allocator_free(al, data[i]);
  kiln_allocator_free(al, bufs);
  kiln_allocator_free(al, data);
  kiln_allocator_free(al, bytes);
  return s;
}

kiln_status_t kiln_opencl_emit_ex(const kiln_plan_t* plan, kiln_program_t* prog,
                                  const kiln_opencl_emit_options_t* o) {
  kiln_opencl_emit_options_t defaults = {0};
  if (!o) o = &defaults;
  if (!plan || !prog)
    return kiln_make_status(KILN_INVALID_ARGUMENT, "opencl emit: NULL plan or program");
  const int32_t n = plan->n_kernels;
  if (prog->n_kernels != n)
    return kiln_make_status(KILN_INVALID_ARGUMENT,
                            "opencl emit: the program has %d kernels, the plan %d",
                            (int)prog->n_kernels, (int)n);
  for (int32_t k = 0; k < n; ++k) {
    const tir_func_t* f = plan->kernels[k].func;
    if (strcmp(prog->kernels[k].name, f->name) != 0 || prog->kernels[k].n_args != f->n_params)
      return kiln_make_status(KILN_INVALID_ARGUMENT,
                              "opencl emit: program kernel %d ('%s', %d args) is not plan kernel "
                              "'%s' (%d params)",
                              (int)k, prog->kernels[k].name, (int)prog->kernels[k].n_args, f->name,
                              (int)f->n_params);
  }
  kiln_allocator_t al = prog->allocator;
  /* Rewritten kernels live in a context of our own; its ids continue the
   * plan's so printed names never collide with the plan's. */
  tir_ctx_t ctx;
  tir_ctx_init(&ctx, al);
  ctx.next_var_id = plan->tir.next_var_id;
  ctx.next_buffer_id = plan->tir.next_buffer_id;

  kiln_status_t s = NULL;
  const tir_func_t** funcs = NULL;
  kiln_cf_kernel_info_t* infos = NULL;
  bool* noalias = NULL;
  kiln_opencl_gemm_t* gemms = NULL;
  kiln_gpu_conv_t* convs = NULL;
  kiln_opencl_conv_tiles_t* ctiles = NULL;
  bool* wtiled = NULL;
  bool* wino = NULL;
  bool* cpriv = NULL;
  kiln_opencl_wino_tiles_t* wtiles = NULL;
  kiln_gpu_dw_t* dws = NULL;
  kiln_opencl_dw_tiles_t* dtiles = NULL;
  int32_t* slot_of = NULL;
  bool rewrite = false;
  int64_t total_args = 0;
  for (int32_t k = 0; k < n; ++k) total_args += prog->kernels[k].n_args;
  s = kiln_allocator_malloc(al, sizeof *funcs * (size_t)(n + 1), "opencl emit", (void**)&funcs);
  if (!s) s = kiln_allocator_malloc(al, sizeof *infos * (size_t)(n + 1), "opencl emit", (void**)&infos);
  if (!s) s = kiln_allocator_malloc(al, sizeof(bool) * (size_t)(total_args + 1), "opencl emit", (void**)&noalias);
  if (!s) s = kiln_allocator_malloc(al, sizeof *gemms * (size_t)(n + 1), "opencl emit", (void**)&gemms);
  if (!s) s = kiln_allocator_malloc(al, sizeof *convs * (size_t)(n + 1), "opencl emit", (void**)&convs);
  if (!s) s = kiln_allocator_malloc(al, sizeof *slot_of * (size_t)(n + 1), "opencl emit", (void**)&slot_of);
  if (!s) s = kiln_allocator_malloc(al, sizeof *ctiles * (size_t)(n + 1), "opencl emit", (void**)&ctiles);
  if (!s) s = kiln_allocator_malloc(al, sizeof *wtiled * (size_t)(n + 1), "opencl emit", (void**)&wtiled);
  if (!s) s = kiln_allocator_malloc(al, sizeof *wino * (size_t)(n + 1), "opencl emit", (void**)&wino);
  if (!s) s = kiln_allocator_malloc(al, sizeof *cpriv * (size_t)(n + 1), "opencl emit", (void**)&cpriv);
  if (!s) s = kiln_allocator_malloc(al, sizeof *wtiles * (size_t)(n + 1), "opencl emit", (void**)&wtiles);
  if (!s) s = kiln_allocator_malloc(al, sizeof *dws * (size_t)(n + 1), "opencl emit", (void**)&dws);
  if (!s) s = kiln_allocator_malloc(al, sizeof *dtiles * (size_t)(n + 1), "opencl emit", (void**)&dtiles);
  for (int32_t k = 0; k < n && !s; ++k)
    slot_of[k] = -1, convs[k].matched = false, wino[k] = false, cpriv[k] = false, dws[k].matched = false;
  const char* psum_env = getenv("KILN_OPENCL_CONV_PSUM");
  const bool all_private = !o->memory_conv_sums && !(psum_env && !strcmp(psum_env, "memory"));
  int32_t n_print = 0, n_templ = 0, n_rebound = 0, n_wino = 0;
  bool* na = noalias;
  for (int32_t k = 0; k < n && !s; ++k) {
    kiln_program_kernel_t* pk = &prog->kernels[k];
    const tir_func_t* f = plan->kernels[k].func;
    gemms[k].matched = false;
    if (slot_of[k] != -1) continue; /* a conv instance's slot, or gone */
    if (!o->no_gemm_template && kiln_opencl_gemm_match(plan, k, &gemms[k])) {
      ++n_templ;
      kiln_opencl_gemm_launch(&gemms[k], pk->groups, pk->local);
      kiln_opencl_gemm_describe(&gemms[k], &pk->gemm);
      continue;
    }
    gemms[k].matched = false;
    /* f16 buffers (--precision fp16) are storage only: the templates
     * convert on load and store and sum in f32 */
    if (!o->no_conv_template && kiln_gpu_conv_match(plan, k, true, true, &convs[k])) {
      const int32_t slot = convs[k].slot;
      ctiles[k] = kiln_opencl_conv_default_tiles(convs[k].M, convs[k].Q, convs[k].K);
      wtiled[k] = !o->no_conv_relayout && kiln_opencl_conv_weights_private(plan, &convs[k]);
      /* Winograd transforms the weights (so they must be the conv's own)
       * and keeps no partial sums in the grid, which leaves the program */
      if (!o->no_winograd && wtiled[k] && kiln_opencl_wino_covers(&convs[k]) && kiln_opencl_wino_wins(&convs[k]) &&
          kiln_gpu_conv_match(plan, k, false, true, &convs[k])) {
        wino[k] = true;
        ++n_wino;
        wtiles[k] = kiln_opencl_wino_default_tiles(&convs[k]);
      } else if (all_private || kiln_opencl_conv_psum_f16(&convs[k])) {
        /* Partial sums between K slices stay f32 in a private array
         * (conv.cl, CPSUM) and the grid leaves the program: measured on
         * PoCL as fast as or faster than the trip through the grid, and
         * the arena loses the grid. Where the grid they would go through
         * holds f16 this is a must (rounding each slice's sum would add an
         * error growing with K); an f32 grid may keep the memory path
         * (memory_conv_sums, KILN_OPENCL_CONV_PSUM=memory). */
        cpriv[k] = kiln_gpu_conv_match(plan, k, false, true, &convs[k]);
        if (!cpriv[k]) s = kiln_make_status(KILN_INTERNAL, "opencl emit: conv '%s' matched with its grid, not without",
                                            prog->kernels[k].name);
        if (s) break;
      }
      ++n_templ;
      rewrite = true;
      if (slot != k) slot_of[k] = -2;
      slot_of[slot] = k;
      if (wino[k])
        kiln_opencl_wino_launch(&convs[k], &wtiles[k], prog->kernels[slot].groups, prog->kernels[slot].local);
      else
        kiln_opencl_conv_launch(&convs[k], &ctiles[k], prog->kernels[slot].groups, prog->kernels[slot].local);
      continue;
    }
    convs[k].matched = false;
    if (!o->no_dw_template && kiln_gpu_dw_match(plan, k, true, &dws[k]) &&
        (o->all_dw_template || kiln_opencl_dw_wins(&dws[k]))) {
      dtiles[k] = kiln_opencl_dw_default_tiles(&dws[k]);
      ++n_templ;
      kiln_opencl_dw_launch(&dws[k], &dtiles[k], pk->groups, pk->local);
      continue;
    }
    dws[k].matched = false;
    if (!o->no_bind_parallel) {
      const tir_func_t* g = NULL;
      s = kiln_opencl_bind_parallel(&ctx, f, &g);
      if (s) break;
      if (g) {
        f = g;
        ++n_rebound;
      }
    }
    noalias_flags(prog, pk, na);
    infos[n_print].param_noalias = na;
    infos[n_print].canonical = false;
    na += pk->n_args;
    funcs[n_print++] = f;
    kiln_cf_launch_dims(f, pk->groups, pk->local);
  }
  kiln_cf_out_t out;
  kiln_cf_out_init(&out);
  /* Kernels the precision pass retyped for fp16 arithmetic (it does so only
   * for a device with half arithmetic: cl_khr_fp16) compute in `half`; the
   * prelude then enables the extension, which the device checks before it
   * builds the program (runtime/opencl/opencl_device.c). */
  kiln_cf_dialect_t half_dialect;
  const kiln_cf_dialect_t* dialect = &kiln_cf_dialect_opencl;
  bool computes_f16 = false;
  for (int32_t i = 0; i < n_print && !computes_f16; ++i) computes_f16 = kiln_cf_func_computes_f16(funcs[i]);
  if (computes_f16 && !o->no_native_half && kiln_cf_dialect_native_half(&kiln_cf_dialect_opencl, &half_dialect))
    dialect = &half_dialect;
  if (o->native_half) *o->native_half = dialect == &half_dialect;
  if (!s) s = kiln_cf_print_unit(dialect, funcs, n_print, infos, &out);
  instances_t inst = {0};
  for (int32_t k = 0; k < n && !s; ++k) {
    if (!gemms[k].matched && slot_of[k] < 0 && !dws[k].matched) continue;
    kiln_cf_out_t one;
    kiln_cf_out_init(&one);
    if (gemms[k].matched) s = kiln_opencl_gemm_print(&gemms[k], prog->kernels[k].name, &one);
    else if (dws[k].matched)
      s = kiln_opencl_dw_print(&dws[k], &dtiles[k], prog->kernels[k].n_args, prog->kernels[k].name, &one);
    else if (wino[slot_of[k]])
      s = kiln_opencl_wino_print(&convs[slot_of[k]], &wtiles[slot_of[k]], prog->kernels[k].name, &one);
    else s = kiln_opencl_conv_print(&convs[slot_of[k]], &ctiles[slot_of[k]], wtiled[slot_of[k]],
                                    cpriv[slot_of[k]], prog->kernels[k].name, &one);
    if (!s && one.oom) s = kiln_make_status(KILN_OUT_OF_MEMORY, "opencl emit: program text");
    if (!s) s = add_instance(&inst, prog, k, &one, &out);
    kiln_cf_out_free(&one);
  }
  instances_free(&inst, al);
  if (o->n_shared) *o->n_shared = inst.n_shared;
  if (!s && out.oom) s = kiln_make_status(KILN_OUT_OF_MEMORY, "opencl emit: program text");
  if (!s) {
    char* text = NULL;
    s = kiln_allocator_malloc(al, out.len + 1, "opencl source", (void**)&text);
    if (!s && rewrite) {
      /* Weights first, into one new blob: a failure leaves |prog| as it was. */
      s = relayout_conv_weights(prog, convs, ctiles, wtiled, wino, wtiles, n);
      if (!s) s = kiln_gpu_conv_rewrite(prog, convs, slot_of, NULL);
      if (s) kiln_allocator_free(al, text);
    }
    if (!s) {
      memcpy(text, out.data ? out.data : "", out.len);
      text[out.len] = 0;
      kiln_allocator_free(al, prog->code.text);
      prog->code.text = text;
      prog->code.text_len = out.len;
      /* parts described the text this one replaces (a CPU unit) */
      kiln_allocator_free(al, prog->code.parts);
      prog->code.parts = NULL;
      prog->code.n_parts = 0;
    }
  }
  if (o->n_templated) *o->n_templated = n_templ;
  if (o->n_rebound) *o->n_rebound = n_rebound;
  if (o->n_winograd) *o->n_winograd = n_wino;
  kiln_cf_out_free(&out);
  kiln_allocator_free(al, funcs);
  kiln_allocator_free(al, infos);
  kiln_allocator_free(al, noalias);
  kiln_allocator_free(al, gemms);
  kiln_allocator_free(al, convs);
  kiln_allocator_free(al, slot_of);
  kiln_allocator_free(al, ctiles);
  kiln_allocator_free(al, wtiled);
  kiln_allocator_free(al, wino);
  kiln_allocator_free(al, cpriv);
  kiln_allocator_free(al, wtiles);
  kiln_allocator_free(al, dws);
  kiln_allocator_free(al, dtiles);
  tir_ctx_deinit(&ctx);
  if (s) return kiln_status_annotate(s, "opencl target");
  return NULL;
}

kiln_status_t kiln_opencl_emit(const kiln_plan_t* plan, kiln_program_t* prog) {
  return kiln_opencl_emit_ex(plan, prog, NULL);
}

/* ---- registration (targets/registry.h) ---------------------------------- */

const kiln_target_t kiln_target_opencl = {
    .name = "opencl",
    .lowering = KILN_TARGET_CLASS_GPU,
    .source_ext = "cl",
    .emit = kiln_opencl_emit,
};
