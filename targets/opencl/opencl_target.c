/* kiln OpenCL target (see opencl_target.h). */
#include "targets/opencl/opencl_target.h"

#include <pthread.h>
#include <stdlib.h>
#include <string.h>

#include "targets/cfamily/printer.h"
#include "targets/custom_kernel.h"
#include "targets/gpu_bind_dyn.h"
#include "targets/gpu_bind_seq.h"
#include "targets/gpu_conv.h"
#include "targets/opencl/opencl_internal.h"
#include "targets/partition.h"
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

/* Where the program text's parts lie (kiln_program_code_t.parts): the
 * prelude, then each kernel printed once (a printed kernel or a template
 * instance, self-contained), then an empty epilogue. A device may build
 * these units apart and reuse the ones an earlier build compiled
 * (runtime/opencl/opencl_device.c: kiln tune's closing build). */
typedef struct {
  uint64_t* v; /* offset, length pairs */
  int32_t n, cap;
  bool oom;
} parts_t;

static void part_add(parts_t* p, kiln_allocator_t al, size_t from, size_t to) {
  if (p->oom) return;
  if (p->n == p->cap) {
    int32_t cap = p->cap ? 2 * p->cap : 32;
    void* v = p->v;
    kiln_status_t s = kiln_allocator_realloc(al, sizeof(uint64_t) * 2 * (size_t)cap, "opencl emit", &v);
    if (s) {
      kiln_status_free(s);
      p->oom = true;
      return;
    }
    p->v = v;
    p->cap = cap;
  }
  p->v[2 * p->n] = (uint64_t)from;
  p->v[2 * p->n + 1] = (uint64_t)(to - from);
  p->n++;
}

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

/* Records |canon| (owned; freed here when an earlier kernel has the same
 * text) for kernel k: *fresh false when an earlier kernel printed the same
 * text, whose name kernel k then takes (*n_shared counts them). */
static kiln_status_t dedup(instances_t* t, kiln_program_t* prog, int32_t k, char* canon, int32_t* n_shared,
                           bool* fresh) {
  kiln_allocator_t al = prog->allocator;
  *fresh = false;
  for (int32_t i = 0; i < t->n; ++i) {
    if (strcmp(t->canon[i], canon)) continue;
    kiln_allocator_free(al, canon);
    char* shared = NULL;
    KILN_RETURN_IF_ERROR(kiln_program_strdup(prog, t->name[i], &shared));
    kiln_allocator_free(al, prog->kernels[k].name);
    prog->kernels[k].name = shared;
    (*n_shared)++;
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
  *fresh = true;
  return NULL;
}

static kiln_status_t add_instance(instances_t* t, kiln_program_t* prog, int32_t k, const kiln_cf_out_t* one,
                                  parts_t* parts, kiln_cf_out_t* out) {
  char* canon = NULL;
  bool fresh = false;
  KILN_RETURN_IF_ERROR(blank_name(prog->allocator, one->data ? one->data : "", prog->kernels[k].name, &canon));
  KILN_RETURN_IF_ERROR(dedup(t, prog, k, canon, &t->n_shared, &fresh));
  if (fresh) {
    const size_t from = out->len;
    kiln_cf_out_puts(out, one->data ? one->data : "");
    part_add(parts, prog->allocator, from, out->len);
  }
  return NULL;
}

/* The printed kernels (no template) after the prelude, each printed in the
 * printer's canonical form (named KILN_KERNEL, buffers and variables
 * numbered) as its dedup key: a kernel whose text an earlier one has
 * (DenseNet-121's Concat copies of one feature map into each later layer's
 * input, element-wise kernels of repeated blocks) calls that kernel, so
 * PoCL, which compiles every kernel at its first launch, compiles it once
 * (DenseNet-121's program: 849 kernels -> 147, ResNet-18's 29 -> 20; with
 * the conv templates' run-time shapes, 910 and 39 before). */
static kiln_status_t print_printed(const kiln_cf_dialect_t* d, const tir_func_t* const* funcs, const int32_t* plan_k,
                                   int32_t n, const kiln_cf_kernel_info_t* infos, instances_t* t,
                                   kiln_program_t* prog, int32_t* n_shared, parts_t* parts, kiln_cf_out_t* out) {
  KILN_RETURN_IF_ERROR(kiln_cf_print_prelude(d, out));
  kiln_cf_out_puts(out, "\n");
  part_add(parts, prog->allocator, 0, out->len);
  for (int32_t i = 0; i < n; ++i) {
    kiln_cf_kernel_info_t info = infos[i];
    info.canonical = true;
    kiln_cf_out_t one;
    kiln_cf_out_init(&one);
    kiln_status_t s = kiln_cf_print_kernel(d, funcs[i], &info, &one);
    if (!s && one.oom) s = kiln_make_status(KILN_OUT_OF_MEMORY, "opencl emit: program text");
    char* canon = NULL;
    bool fresh = false;
    const char* text = one.data ? one.data : "";
    if (!s) s = kiln_program_strdup(prog, text, &canon);
    if (!s) s = dedup(t, prog, plan_k[i], canon, n_shared, &fresh);
    const char* at = strstr(text, "KILN_KERNEL");
    const size_t from = out->len;
    if (!s && fresh && at) {
      kiln_cf_out_printf(out, "%.*s%s%s", (int)(at - text), text, funcs[i]->name, at + strlen("KILN_KERNEL"));
    } else if (!s && fresh) {
      kiln_cf_out_puts(out, text);
    }
    if (!s && fresh) part_add(parts, prog->allocator, from, out->len);
    kiln_cf_out_free(&one);
    KILN_RETURN_IF_ERROR(s);
  }
  /* units must stand alone: an epilogue (none for OpenCL C) ends the parts */
  if (d->epilogue && *d->epilogue) parts->oom = true;
  if (d->epilogue) kiln_cf_out_puts(out, d->epilogue);
  return NULL;
}

void kiln_opencl_templates(const kiln_opencl_template_options_t* o, kiln_template_set_t* out) {
  kiln_opencl_template_options_t defaults = {0};
  if (!o) o = &defaults;
  const char* wino = getenv("KILN_OPENCL_WINOGRAD");
  const char* dw = getenv("KILN_OPENCL_DW");
  const char* psum = getenv("KILN_OPENCL_CONV_PSUM");
  const bool wino_all = wino && !strcmp(wino, "all"), dw_all = o->all_dw_template || (dw && !strcmp(dw, "all"));
  *out = (kiln_template_set_t){
      /* gemm.cl takes f16 storage, batches, Gemm's bias, alpha, beta and transA */
      .gemm = !o->no_gemm_template,
      /* gelu: a range program's MatMul + Add + Gelu (gemm.cl GACT) */
      .gemm_rules = {.f16 = true, .batched = true, .bias = true, .scaled = true, .gelu = true, .epilogue = true},
      .conv = !o->no_conv_template,
      .conv_grid = true,
      /* Partial sums in a private f32 array (conv.cl CPSUM 1): measured on
       * PoCL as fast as or faster than the trip through the grid, and the
       * arena loses the grid (ResNet-18 7.15 -> 4.01 MB) */
      .conv_private_sums = !o->memory_conv_sums && !(psum && !strcmp(psum, "memory")),
      .conv_tiled_weights = !o->no_conv_relayout,
      /* bench/opencl_winograd.py on PoCL: 1.3-1.5x on ResNet-18's 3x3
       * shapes (64..512 channels, 7x7 included), 1.3-1.6x down to 8 -> 16
       * channels at 28x28 and 16 channels at 14x14; about even or slower
       * with few tiles and few channels (32 channels at 8x8: 16 tiles,
       * 0.9-1.0x) */
      .winograd = !o->no_winograd && !(wino && !strcmp(wino, "off")),
      .winograd_min_channels = wino_all ? 0 : 8,
      .winograd_min_tiles = wino_all ? 0 : 32,
      .winograd_min_work = wino_all ? 0 : 65536,
      /* The printed kernel runs a channel per work-item, which PoCL
       * vectorizes across work-items: the template wins at strides > 1.
       * With f16 input (--precision fp16) the printed kernel's vload_half
       * per element keeps it scalar, and the template wins at stride 1 too
       * (MobileNetV2 fp16 on PoCL: its stride-1 layers 0.10-0.35 ms against
       * 0.15-1.08 ms printed, 17.9 -> 13.2 ms of kernels in all) */
      .depthwise = !o->no_dw_template && !(dw && !strcmp(dw, "off")),
      .depthwise_min_stride = dw_all ? 1 : 2,
      .depthwise_f16_any_stride = true,
      /* tiles measured on PoCL, KILN_OPENCL_*_TILES over them (opencl_tiles.c) */
      .tiles = kiln_opencl_template_tiles,
      .weight_blocks = kiln_opencl_template_weight_blocks,
      /* what `kiln tune` searches and may choose (opencl_tune.c) */
      .space = kiln_opencl_tune_space,
      .tiles_check = kiln_opencl_tune_check,
      .tiles_tie = kiln_opencl_tune_tie,
      .tiles_hints = kiln_opencl_tune_hints,
      /* the skip of dear draws (compiler/tune_dear.h) */
      .tiles_features = kiln_opencl_tune_features,
      /* QLinearConv / QLinearMatMul: kernels/opencl/q8.cl (no loop limit) */
      .q8 = true,
      /* Winograd on or off per conv, a knob of `kiln tune` */
      .winograd_switch = true,
      /* the depthwise template or the printed kernel per conv, a knob too */
      .depthwise_switch = true,
  };
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
  const bool gpu_rules = kiln_opencl_rules_gpu(plan->gpu_lacks);
  ctx.next_var_id = plan->tir.next_var_id;
  ctx.next_buffer_id = plan->tir.next_buffer_id;

  kiln_status_t s = NULL;
  const tir_func_t** funcs = NULL;
  kiln_cf_kernel_info_t* infos = NULL;
  bool* noalias = NULL;
  kiln_opencl_gemm_tiles_t* gtiles = NULL; /* GEMM and conv instances (same tiles) */
  kiln_opencl_gemv_tiles_t* vtiles = NULL; /* GEMV instances */
  kiln_opencl_wino_tiles_t* wtiles = NULL;
  kiln_opencl_dw_tiles_t* dtiles = NULL;
  kiln_opencl_q8_tiles_t* qtiles = NULL;
  kiln_opencl_ks_t* ks = NULL; /* run-time shapes per plan kernel (n 0: none) */
  int32_t* keep = NULL;
  int32_t* plan_k = NULL; /* plan kernel of each printed kernel */
  /* KILN_OPENCL_SHAPES=static: every conv and Winograd instance with its
   * shapes as numbers (a kernel per shape, as before run-time shapes;
   * for measuring one against the other) */
  const char* shapes = getenv("KILN_OPENCL_SHAPES");
  const bool rt_shapes = !(shapes && !strcmp(shapes, "static"));
  int64_t total_args = 0;
  for (int32_t k = 0; k < n; ++k) total_args += prog->kernels[k].n_args;
  s = kiln_allocator_malloc(al, sizeof *funcs * (size_t)(n + 1), "opencl emit", (void**)&funcs);
  if (!s) s = kiln_allocator_malloc(al, sizeof *infos * (size_t)(n + 1), "opencl emit", (void**)&infos);
  if (!s) s = kiln_allocator_malloc(al, sizeof(bool) * (size_t)(total_args + 1), "opencl emit", (void**)&noalias);
  if (!s) s = kiln_allocator_malloc(al, sizeof *gtiles * (size_t)(n + 1), "opencl emit", (void**)&gtiles);
  if (!s) s = kiln_allocator_malloc(al, sizeof *vtiles * (size_t)(n + 1), "opencl emit", (void**)&vtiles);
  if (!s) s = kiln_allocator_malloc(al, sizeof *wtiles * (size_t)(n + 1), "opencl emit", (void**)&wtiles);
  if (!s) s = kiln_allocator_malloc(al, sizeof *dtiles * (size_t)(n + 1), "opencl emit", (void**)&dtiles);
  if (!s) s = kiln_allocator_malloc(al, sizeof *qtiles * (size_t)(n + 1), "opencl emit", (void**)&qtiles);
  if (!s) s = kiln_allocator_malloc(al, sizeof *ks * (size_t)(n + 1), "opencl emit", (void**)&ks);
  if (!s) s = kiln_allocator_malloc(al, sizeof *plan_k * (size_t)(n + 1), "opencl emit", (void**)&plan_k);
  if (!s) s = kiln_allocator_malloc(al, sizeof *keep * (size_t)(n + 1), "opencl emit", (void**)&keep);
  int32_t n_print = 0, n_templ = 0, n_rebound = 0, n_wino = 0;
  bool* na = noalias;
  for (int32_t k = 0; k < n && !s; ++k) {
    kiln_program_kernel_t* pk = &prog->kernels[k];
    const tir_func_t* f = plan->kernels[k].func;
    const kiln_template_t* t = plan->kernels[k].tmpl;
    if (plan->kernels[k].custom) continue; /* printed with the instances below */
    switch (t ? t->kind : KILN_TEMPLATE_NONE) {
      case KILN_TEMPLATE_MERGED: continue; /* leaves the program (kiln_gpu_conv_rewrite) */
      /* the tiles lowering chose (kiln_opencl_template_tiles) */
      case KILN_TEMPLATE_GEMM:
        ++n_templ;
        /* few rows: gemv.cl where the record's switch is on */
        if (t->tiles.n == 4 && t->tiles.v[3] == 1) {
          s = kiln_opencl_gemv_tiles_of(t, f->name, &vtiles[k]);
          if (s) break;
          kiln_opencl_gemv_launch(&t->gemm, &vtiles[k], pk->groups, pk->local);
          if (!plan->n_dims) kiln_opencl_gemm_describe(&t->gemm, &pk->gemm);
          continue;
        }
        s = kiln_opencl_gemm_tiles_of(t, f->name, &gtiles[k]);
        if (s) break;
        kiln_opencl_gemm_launch(&t->gemm, &gtiles[k], pk->groups, pk->local);
        /* a library GEMM (opencl_gemm_provider.h) takes a fixed batch */
        if (!plan->n_dims) kiln_opencl_gemm_describe(&t->gemm, &pk->gemm);
        continue;
      case KILN_TEMPLATE_CONV:
        ++n_templ;
        s = kiln_opencl_gemm_tiles_of(t, f->name, &gtiles[k]);
        if (s) break;
        kiln_opencl_conv_launch(&t->conv, &gtiles[k], pk->groups, pk->local);
        continue;
      case KILN_TEMPLATE_WINOGRAD:
        ++n_templ;
        ++n_wino;
        s = kiln_opencl_wino_tiles_of(t, f->name, &wtiles[k]);
        if (s) break;
        kiln_opencl_wino_launch(&t->conv, &wtiles[k], pk->groups, pk->local);
        continue;
      case KILN_TEMPLATE_DEPTHWISE:
        ++n_templ;
        s = kiln_opencl_dw_tiles_of(t, f->name, &dtiles[k]);
        if (s) break;
        kiln_opencl_dw_launch(&t->dw, &dtiles[k], pk->groups, pk->local);
        continue;
      case KILN_TEMPLATE_Q8:
        ++n_templ;
        s = kiln_opencl_q8_tiles_of(t, f->name, &qtiles[k]);
        if (s) break;
        kiln_opencl_q8_launch(&t->q8, &qtiles[k], pk->groups, pk->local);
        continue;
      case KILN_TEMPLATE_POOL: /* not in the OpenCL set */
      case KILN_TEMPLATE_ROWS:
      case KILN_TEMPLATE_NONE: break;
    }
    if (s) break;
    if (plan->n_dims && plan->dim_axis) {
      /* a range program's kernels: the run's length on the grid's dim 2
       * (gpu_bind_seq.h), the sizes of opencl_schedule.c */
      const kiln_gpu_bind_t how = kiln_opencl_bind_how(gpu_rules);
      const tir_func_t* g = NULL;
      s = kiln_gpu_bind_seq(&ctx, f, plan->dims[0].lo, plan->dims[0].hi, &how, &g);
      if (s) break;
      f = g;
      ++n_rebound;
    } else if (plan->n_dims) {
      /* per-sample kernels: the samples on the grid's dim 2 (gpu_bind_dyn.h) */
      const tir_func_t* g = NULL;
      s = kiln_gpu_bind_samples(&ctx, f,
                                o->no_bind_parallel ? NULL
                                : gpu_rules         ? kiln_opencl_bind_parallel_gpu
                                                    : kiln_opencl_bind_parallel,
                                &g);
      if (s) break;
      f = g;
      ++n_rebound;
    } else if (!o->no_bind_parallel) {
      const tir_func_t* g = NULL;
      s = gpu_rules ? kiln_opencl_bind_parallel_gpu(&ctx, f, &g) : kiln_opencl_bind_parallel(&ctx, f, &g);
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
    plan_k[n_print] = k;
    funcs[n_print++] = f;
    kiln_cf_launch_dims(f, pk->groups, pk->local);
    if (plan->n_dims) pk->groups[2] = 1; /* per sample: the device scales it */
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
  /* F64 kernels (never narrowed to f32) need cl_khr_fp64: enabled only for
   * such a program, so the device check names it where it is missing. */
  kiln_cf_dialect_t fp64_dialect;
  bool uses_f64 = false;
  for (int32_t i = 0; i < n_print && !uses_f64; ++i) uses_f64 = kiln_cf_func_uses_dtype(funcs[i], KILN_DTYPE_F64);
  if (uses_f64 && kiln_cf_dialect_fp64(dialect, &fp64_dialect)) dialect = &fp64_dialect;
  instances_t inst = {0};
  parts_t parts = {0};
  int32_t n_printed_shared = 0;
  if (!s) s = print_printed(dialect, funcs, plan_k, n_print, infos, &inst, prog, &n_printed_shared, &parts, &out);
  for (int32_t k = 0; k < n && !s; ++k) {
    const kiln_template_t* t = plan->kernels[k].tmpl;
    const bool custom = plan->kernels[k].custom != NULL;
    if (!custom && (!t || t->kind == KILN_TEMPLATE_MERGED)) continue;
    const char* name = prog->kernels[k].name;
    kiln_cf_out_t one;
    kiln_cf_out_init(&one);
    if (custom)
      s = kiln_custom_print(plan, k, "opencl", name, &one, prog->kernels[k].groups, prog->kernels[k].local);
    else if (t->kind == KILN_TEMPLATE_GEMM && t->tiles.n == 4 && t->tiles.v[3] == 1)
      s = kiln_opencl_gemv_print(&t->gemm, &vtiles[k], name, &one);
    else if (t->kind == KILN_TEMPLATE_GEMM) s = kiln_opencl_gemm_print_psum(&t->gemm, &gtiles[k], gpu_rules, name, &one);
    else if (t->kind == KILN_TEMPLATE_DEPTHWISE)
      s = kiln_opencl_dw_print(&t->dw, &dtiles[k], prog->kernels[k].n_args, name, &one);
    else if (t->kind == KILN_TEMPLATE_WINOGRAD)
      s = kiln_opencl_wino_print_ks(&t->conv, &wtiles[k], name, rt_shapes ? &ks[k] : NULL, &one);
    else if (t->kind == KILN_TEMPLATE_Q8)
      s = kiln_opencl_q8_print(&t->q8, &qtiles[k], prog->kernels[k].n_args, name, &one);
    else
      s = kiln_opencl_conv_print_ks(&t->conv, &gtiles[k], t->weights.layout == KILN_TEMPLATE_W_TILED,
                                    t->psum_private, name, rt_shapes ? &ks[k] : NULL, gpu_rules, &one);
    if (!s && one.oom) s = kiln_make_status(KILN_OUT_OF_MEMORY, "opencl emit: program text");
    if (!s) s = add_instance(&inst, prog, k, &one, &parts, &out);
    kiln_cf_out_free(&one);
  }
  instances_free(&inst, al);
  if (o->n_shared) *o->n_shared = inst.n_shared;
  if (o->n_shared_printed) *o->n_shared_printed = n_printed_shared;
  if (!s && out.oom) s = kiln_make_status(KILN_OUT_OF_MEMORY, "opencl emit: program text");
  if (!s) {
    char* text = NULL;
    s = kiln_allocator_malloc(al, out.len + 1, "opencl source", (void**)&text);
    /* the weights are the plan's, laid out for the instances by lowering */
    if (!s && kiln_gpu_conv_any(plan)) {
      s = kiln_gpu_conv_rewrite(prog, plan, keep);
      if (!s) s = kiln_opencl_ks_attach(prog, keep, ks);
      if (s) kiln_allocator_free(al, text);
    }
    if (!s) {
      memcpy(text, out.data ? out.data : "", out.len);
      text[out.len] = 0;
      kiln_allocator_free(al, prog->code.text);
      prog->code.text = text;
      prog->code.text_len = out.len;
      /* parts described the text this one replaces (a CPU unit); now
       * this text's prelude, units and (empty) epilogue */
      kiln_allocator_free(al, prog->code.parts);
      prog->code.parts = NULL;
      prog->code.n_parts = 0;
      part_add(&parts, al, out.len, out.len);
      if (!parts.oom && !out.oom) {
        prog->code.parts = parts.v;
        prog->code.n_parts = parts.n;
        parts.v = NULL;
      }
    }
  }
  kiln_allocator_free(al, parts.v);
  if (o->n_templated) *o->n_templated = n_templ;
  if (o->n_rebound) *o->n_rebound = n_rebound;
  if (o->n_winograd) *o->n_winograd = n_wino;
  kiln_cf_out_free(&out);
  kiln_allocator_free(al, funcs);
  kiln_allocator_free(al, infos);
  kiln_allocator_free(al, noalias);
  kiln_allocator_free(al, gtiles);
  kiln_allocator_free(al, vtiles);
  kiln_allocator_free(al, wtiles);
  kiln_allocator_free(al, dtiles);
  kiln_allocator_free(al, qtiles);
  kiln_allocator_free(al, ks);
  kiln_allocator_free(al, keep);
  kiln_allocator_free(al, plan_k);
  tir_ctx_deinit(&ctx);
  if (s) return kiln_status_annotate(s, "opencl target");
  return NULL;
}

kiln_status_t kiln_opencl_emit(const kiln_plan_t* plan, kiln_program_t* prog) {
  return kiln_opencl_emit_ex(plan, prog, NULL);
}

/* ---- registration (targets/registry.h) ---------------------------------- */

/* The default template set (no tests' switches). */
static void opencl_templates(kiln_template_set_t* out) { kiln_opencl_templates(NULL, out); }

/* The OpenCL dialect without f64, for devices without fp64 (many phone
 * GPUs): what kiln_cf_check_types refuses there runs on the CPU. */
static kiln_cf_dialect_t no_fp64_dialect;
static pthread_once_t no_fp64_once = PTHREAD_ONCE_INIT;
static void no_fp64_init(void) {
  no_fp64_dialect = kiln_cf_dialect_opencl;
  no_fp64_dialect.types[KILN_DTYPE_F64] = NULL;
  no_fp64_dialect.value_types[KILN_DTYPE_F64] = NULL;
}

/* Heterogeneous execution asks before emitting (targets/partition.h): a
 * kernel that computes in f64 on a device without fp64 is refused (its
 * nodes run on the CPU, or --strict names them), never narrowed to f32. */
static kiln_status_t opencl_kernel_check(const kiln_plan_t* plan, int32_t k) {
  kiln_status_t s = kiln_partition_gpu_check(plan, k, "opencl", &kiln_cf_dialect_opencl);
  const kiln_plan_kernel_t* pk = &plan->kernels[k];
  if (s || !(plan->gpu_lacks & KILN_GPU_LACKS_FP64) || pk->tmpl || pk->custom) return s;
  pthread_once(&no_fp64_once, no_fp64_init);
  s = kiln_cf_check_types(&no_fp64_dialect, pk->func);
  if (!s) return NULL;
  kiln_status_free(s);
  return kiln_make_status(KILN_UNSUPPORTED,
                          "kernel '%s' computes in f64 and the OpenCL device has no fp64 (cl_khr_fp64); f64 is "
                          "never narrowed to f32",
                          pk->func->name);
}

const kiln_target_t kiln_target_opencl = {
    .name = "opencl",
    .lowering = KILN_TARGET_CLASS_GPU,
    .source_ext = "cl",
    .rules_env = "KILN_OPENCL_RULES",
    .emit = kiln_opencl_emit,
    .templates = opencl_templates,
    .kernel_check = opencl_kernel_check,
    .dyn_batch = true,
    .dyn_seq = true,
    .dyn_seq_gemm = true,
    .peer_sgemm = kiln_opencl_peer_sgemm,
    .peer_name = "clblast",
};
