/* kiln SPIR-V target: print GLSL per kernel, compile with libshaderc,
 * validate with SPIRV-Tools, store one blob per kernel in the program.
 *
 * Why: the printer's canonical form (kernel named KILN_KERNEL, buffers and
 * variables renumbered) is the dedup key, so the many identical elementwise
 * kernels of a model compile once. Validation runs on every blob although
 * shaderc's output is normally valid: it is the one check between kiln's
 * printer and a driver that may crash on bad SPIR-V. */
#include "targets/vulkan/spirv_target.h"

#include <shaderc/shaderc.h>
#include <spirv-tools/libspirv.h>
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "targets/cfamily/printer.h"
#include "targets/gpu_bind.h"
#include "targets/gpu_conv.h"
#include "targets/registry.h"

extern const char kiln_vk_gemm[];
extern const size_t kiln_vk_gemm_len;
extern const char kiln_vk_conv[];
extern const size_t kiln_vk_conv_len;
extern const char kiln_vk_depthwise[];
extern const size_t kiln_vk_depthwise_len;

/* ---- compile + validate ------------------------------------------------ */

/* The validator's message, with the GLSL-free context SPIRV-Tools gives. */
static kiln_status_t validate(const char* name, const uint32_t* words, size_t n_words) {
  spv_context ctx = spvContextCreate(SPV_ENV_VULKAN_1_1);
  if (!ctx) return kiln_make_status(KILN_OUT_OF_MEMORY, "kernel '%s': SPIRV-Tools context", name);
  spv_const_binary_t bin = {words, n_words};
  spv_diagnostic diag = NULL;
  spv_validator_options vo = spvValidatorOptionsCreate();
  spv_result_t r = vo ? spvValidateWithOptions(ctx, vo, &bin, &diag) : spvValidate(ctx, &bin, &diag);
  kiln_status_t s = NULL;
  if (r != SPV_SUCCESS)
    s = kiln_make_status(KILN_INVALID_ARGUMENT, "kernel '%s': spirv-val rejected the shader: %s",
                         name, diag && diag->error ? diag->error : "(no message)");
  spvDiagnosticDestroy(diag);
  if (vo) spvValidatorOptionsDestroy(vo);
  spvContextDestroy(ctx);
  return s;
}

/* One compiler + options per emit (shaderc objects are not thread-safe to
 * share while compiling, and creation is cheap next to a compile). */
typedef struct cc_s {
  shaderc_compiler_t compiler;
  shaderc_compile_options_t opts;
} cc_t;

static kiln_status_t cc_init(cc_t* c) {
  c->compiler = shaderc_compiler_initialize();
  c->opts = shaderc_compile_options_initialize();
  if (!c->compiler || !c->opts) {
    if (c->opts) shaderc_compile_options_release(c->opts);
    if (c->compiler) shaderc_compiler_release(c->compiler);
    return kiln_make_status(KILN_OUT_OF_MEMORY, "shaderc: cannot create a compiler");
  }
  shaderc_compile_options_set_source_language(c->opts, shaderc_source_language_glsl);
  shaderc_compile_options_set_target_env(c->opts, shaderc_target_env_vulkan, shaderc_env_version_vulkan_1_1);
  shaderc_compile_options_set_target_spirv(c->opts, shaderc_spirv_version_1_3);
  shaderc_compile_options_set_optimization_level(c->opts, shaderc_optimization_level_performance);
  return NULL;
}

static void cc_free(cc_t* c) {
  shaderc_compile_options_release(c->opts);
  shaderc_compiler_release(c->compiler);
}

/* "\n  line N: <text>" for the first "<name>:N:" the log points at. */
static void quote_line(const char* name, const char* log, const char* glsl, char* out, size_t cap) {
  out[0] = 0;
  if (!log || !glsl) return;
  size_t nl = strlen(name);
  const char* p = strstr(log, name);
  if (!p || p[nl] != ':') return;
  long ln = strtol(p + nl + 1, NULL, 10);
  if (ln <= 0) return;
  const char* q = glsl;
  for (long i = 1; i < ln && q; ++i) {
    q = strchr(q, '\n');
    if (q) ++q;
  }
  if (!q) return;
  const char* e = strchr(q, '\n');
  int len = e ? (int)(e - q) : (int)strlen(q);
  snprintf(out, cap, "\n  line %ld: %.*s", ln, len > 150 ? 150 : len, q);
}

static kiln_status_t cc_compile(cc_t* c, const char* name, const char* glsl, kiln_allocator_t al,
                                uint8_t** out, uint64_t* out_len) {
  shaderc_compilation_result_t res = shaderc_compile_into_spv(
      c->compiler, glsl, strlen(glsl), shaderc_compute_shader, name, "main", c->opts);
  if (!res) return kiln_make_status(KILN_OUT_OF_MEMORY, "kernel '%s': shaderc returned no result", name);
  kiln_status_t s = NULL;
  if (shaderc_result_get_compilation_status(res) != shaderc_compilation_status_success) {
    const char* log = shaderc_result_get_error_message(res);
    char line[200];
    quote_line(name, log, glsl, line, sizeof line);
    s = kiln_make_status(KILN_INVALID_ARGUMENT, "kernel '%s': shaderc failed to compile the GLSL:\n%s%s",
                         name, log ? log : "", line);
  } else {
    size_t n = shaderc_result_get_length(res);
    const char* bytes = shaderc_result_get_bytes(res);
    if (n == 0 || n % 4 != 0) {
      s = kiln_make_status(KILN_INTERNAL, "kernel '%s': shaderc produced %zu bytes", name, n);
    } else {
      s = validate(name, (const uint32_t*)(const void*)bytes, n / 4);
      void* m = NULL;
      if (!s) s = kiln_allocator_malloc(al, n, "SPIR-V blob", &m);
      if (!s) {
        memcpy(m, bytes, n);
        *out = m;
        *out_len = n;
      }
    }
  }
  shaderc_result_release(res);
  return s;
}

kiln_status_t kiln_spirv_compile_glsl(const char* name, const char* glsl, kiln_allocator_t al,
                                      uint8_t** out_spirv, uint64_t* out_len) {
  if (!name) name = "?";
  if (!glsl) return kiln_make_status(KILN_INVALID_ARGUMENT, "kernel '%s': no GLSL", name);
  cc_t c;
  KILN_RETURN_IF_ERROR(cc_init(&c));
  kiln_status_t s = cc_compile(&c, name, glsl, al, out_spirv, out_len);
  cc_free(&c);
  return s;
}

/* ---- loop trips per invocation ---------------------------------------- */

#define TRIPS_CAP ((int64_t)1 << 40)

static int64_t trips_mul(int64_t a, int64_t b) { return a && b > TRIPS_CAP / a ? TRIPS_CAP : a * b; }
static int64_t trips_add(int64_t a, int64_t b) { return a + b > TRIPS_CAP ? TRIPS_CAP : a + b; }

/* Loop iterations one invocation of a printed kernel runs: every loop that
 * is not bound to an id runs in the invocation (its extent times one more
 * than its body's), a branch counts its longer side. An estimate: what the
 * driver's compiler unrolls does not count. */
static bool has_loop(const tir_stmt_t* st) {
  if (!st) return false;
  switch (st->kind) {
    case TIR_FOR: return true;
    case TIR_SEQ:
      for (int32_t i = 0; i < st->u.seq.n; ++i)
        if (has_loop(st->u.seq.items[i])) return true;
      return false;
    case TIR_IF: return has_loop(st->u.cond.then_s) || has_loop(st->u.cond.else_s);
    case TIR_ALLOC: return has_loop(st->u.alloc.body);
    default: return false;
  }
}

static int64_t trips_of(const tir_stmt_t* st) {
  if (!st) return 0;
  switch (st->kind) {
    case TIR_FOR: {
      const int64_t body = trips_of(st->u.loop.body), e = st->u.loop.extent > 0 ? st->u.loop.extent : 0;
      if (st->u.loop.kind == TIR_LOOP_BOUND) return body;
      /* a short innermost loop of constant extent is unrolled by the
       * driver's compiler (NIR unrolls up to 32 trips): no back-edges; a
       * loop around it is not */
      if (e <= 32 && !has_loop(st->u.loop.body)) return 0;
      return trips_mul(e, trips_add(1, body));
    }
    case TIR_SEQ: {
      int64_t t = 0;
      for (int32_t i = 0; i < st->u.seq.n; ++i) t = trips_add(t, trips_of(st->u.seq.items[i]));
      return t;
    }
    case TIR_IF: {
      const int64_t a = trips_of(st->u.cond.then_s), b = trips_of(st->u.cond.else_s);
      return a > b ? a : b;
    }
    case TIR_ALLOC: return trips_of(st->u.alloc.body);
    default: return 0;
  }
}

/* The shared-memory tiled shaders (gemm.comp, conv.comp): K/TK slices,
 * each with the loads of both tiles and TK steps (gemm.comp unrolls them). */
static int64_t trips_tiled(int64_t K, const kiln_spirv_gemm_tiles_t* t, bool k_unrolled) {
  const int64_t nt = (int64_t)(t->tn / t->rn) * (t->tm / t->rm);
  const int64_t loads = t->shared && nt > 0 ? ((int64_t)t->tm * t->tk + (int64_t)t->tk * t->tn + nt - 1) / nt : 0;
  return trips_mul((K + t->tk - 1) / t->tk, 1 + loads + (k_unrolled ? 0 : t->tk));
}

/* ---- the tiled GEMM ----------------------------------------------------- */

kiln_spirv_gemm_tiles_t kiln_spirv_gemm_default_tiles(int64_t M, int64_t N) {
  kiln_spirv_gemm_tiles_t t;
  const char* env = getenv("KILN_SPIRV_GEMM_TILES");
  if (env && sscanf(env, "%d,%d,%d,%d,%d,%d", &t.tm, &t.tn, &t.tk, &t.rm, &t.rn, &t.shared) == 6 &&
      t.tm > 0 && t.tn > 0 && t.tk > 0 && t.rm > 0 && t.rn > 0 && t.tm % t.rm == 0 && t.tn % t.rn == 0)
    return t;
  /* 8 x 8 threads, each with up to 8 x 8 outputs in registers: the
   * register tile does the reuse, so few threads wait at each barrier
   * (lavapipe runs a work-group's threads as coroutines). */
  t.shared = 1;
  t.tm = M >= 64 ? 64 : M >= 32 ? 32 : 16;
  t.tn = N >= 64 ? 64 : N >= 32 ? 32 : 16;
  t.tk = 16;
  t.rm = t.tm / 8;
  t.rn = t.tn / 8;
  return t;
}

kiln_status_t kiln_spirv_gemm_source(const kiln_spirv_gemm_t* g, char** out_glsl, int64_t groups[3],
                                     int64_t local[3]) {
  kiln_spirv_gemm_tiles_t t = g->tiles;
  if (t.tm == 0) t = kiln_spirv_gemm_default_tiles(g->M, g->N);
  if (t.tm <= 0 || t.tn <= 0 || t.tk <= 0 || t.rm <= 0 || t.rn <= 0 || t.tm % t.rm || t.tn % t.rn)
    return kiln_make_status(KILN_INVALID_ARGUMENT, "gemm tiles %dx%dx%d / %dx%d do not divide",
                            t.tm, t.tn, t.tk, t.rm, t.rn);
  int64_t lx = t.tn / t.rn, ly = t.tm / t.rm, nt = lx * ly;
  if (nt > 1024 || (t.shared && ((int64_t)t.tm * t.tk % nt || (int64_t)t.tk * t.tn % nt)))
    return kiln_make_status(KILN_INVALID_ARGUMENT,
                            "gemm tiles %dx%dx%d / %dx%d: %lld threads do not split the tiles", t.tm,
                            t.tn, t.tk, t.rm, t.rn, (long long)nt);
  if (g->M <= 0 || g->N <= 0 || g->K <= 0 || g->M * g->K > INT32_MAX || g->K * g->N > INT32_MAX ||
      g->M * g->N > INT32_MAX || (uint32_t)g->b_mode > 2)
    return kiln_make_status(KILN_INVALID_ARGUMENT, "gemm %lldx%lldx%lld (mode %d) does not fit the shader",
                            (long long)g->M, (long long)g->N, (long long)g->K, (int)g->b_mode);
  const char* nl = strchr(kiln_vk_gemm, '\n');
  if (!nl) return kiln_make_status(KILN_INTERNAL, "kernels/vulkan/gemm.comp has no #version line");
  bool even = g->M % t.tm == 0 && g->N % t.tn == 0 && g->K % t.tk == 0;
  char defs[700];
  int dl = snprintf(defs, sizeof defs,
                    "#define M %lld\n#define N %lld\n#define K %lld\n#define B_MODE %d\n"
                    "#define PT %lld\n#define PTILES %lld\n#define PKBS %lld\n"
                    "#define BIND_A %d\n#define BIND_B %d\n#define BIND_C %d\n"
                    "#define TM %d\n#define TN %d\n#define TK %d\n#define RM %d\n#define RN %d\n"
                    "#define SHARED %d\n#define EVEN %d\n",
                    (long long)g->M, (long long)g->N, (long long)g->K, (int)g->b_mode,
                    (long long)(g->pt > 0 ? g->pt : 1), (long long)(g->ptiles > 0 ? g->ptiles : 1),
                    (long long)(g->pkbs > 0 ? g->pkbs : g->K), (int)g->bind_a, (int)g->bind_b,
                    (int)g->bind_c, t.tm, t.tn, t.tk, t.rm, t.rn, t.shared ? 1 : 0, even ? 1 : 0);
  size_t head = (size_t)(nl - kiln_vk_gemm) + 1;
  size_t n = head + (size_t)dl + kiln_vk_gemm_len - head + 1;
  char* s = malloc(n);
  if (!s) return kiln_make_status(KILN_OUT_OF_MEMORY, "gemm shader text");
  memcpy(s, kiln_vk_gemm, head);
  memcpy(s + head, defs, (size_t)dl);
  memcpy(s + head + dl, kiln_vk_gemm + head, kiln_vk_gemm_len - head);
  s[n - 1] = 0;
  *out_glsl = s;
  groups[0] = (g->N + t.tn - 1) / t.tn;
  groups[1] = (g->M + t.tm - 1) / t.tm;
  groups[2] = 1;
  local[0] = lx;
  local[1] = ly;
  local[2] = 1;
  return NULL;
}

/* ---- the implicit-GEMM convolution ---------------------------------------- */

/* Growing text for a shader header (malloc; *oom on failure). */
typedef struct sb_s {
  char* p;
  size_t len, cap;
  bool oom;
} sb_t;

static void sb_printf(sb_t* b, const char* fmt, ...) __attribute__((format(printf, 2, 3)));
static void sb_printf(sb_t* b, const char* fmt, ...) {
  if (b->oom) return;
  for (;;) {
    va_list ap;
    va_start(ap, fmt);
    int n = vsnprintf(b->p ? b->p + b->len : NULL, b->p ? b->cap - b->len : 0, fmt, ap);
    va_end(ap);
    if (n < 0) {
      b->oom = true;
      return;
    }
    if (b->p && b->len + (size_t)n < b->cap) {
      b->len += (size_t)n;
      return;
    }
    size_t cap = (b->cap ? b->cap * 2 : 4096) + (size_t)n;
    char* q = realloc(b->p, cap);
    if (!q) {
      b->oom = true;
      return;
    }
    b->p = q;
    b->cap = cap;
  }
}

static void epi_operand(sb_t* b, const kiln_template_epi_t* e, int32_t i) {
  const kiln_template_epi_operand_t* o = &e->operands[i];
  sb_printf(b, "float(e%d[(b) * %lld + (m) * %lld%s])", (int)i, (long long)o->sn, (long long)o->sm,
            o->sp ? " + (p)" : "");
}

static void epi_bound(sb_t* b, const kiln_template_epi_t* e, int32_t operand, float value, bool lower) {
  sb_printf(b, " v = %s(v, ", lower ? "max" : "min");
  if (operand >= 0) epi_operand(b, e, operand);
  else sb_printf(b, "%.9e", (double)value);
  sb_printf(b, ");");
}

/* "#define KC_EPI(v, b, m, p) ..." in GLSL. */
static void epi_print(sb_t* b, const kiln_template_epi_t* e) {
  sb_printf(b, "#define KC_EPI(v, b, m, p) {");
  for (int32_t i = 0; i < e->n_ops; ++i) {
    const kiln_template_epi_op_t* op = &e->ops[i];
    switch (op->op) {
      case 'r': sb_printf(b, " v = max(v, 0.0);"); break;
      case 's': sb_printf(b, " v = 1.0 / (1.0 + exp(-v));"); break;
      case 'l': sb_printf(b, " v = max(v, 0.0) + %.9e * min(v, 0.0);", (double)op->alpha); break;
      case 'c':
        /* an infinite attribute bound clips nothing */
        if (op->a >= 0 || (op->has_lo && !isinf(op->lo))) epi_bound(b, e, op->a, op->lo, true);
        if (op->b >= 0 || (op->has_hi && !isinf(op->hi))) epi_bound(b, e, op->b, op->hi, false);
        break;
      default:
        if (op->swap) {
          sb_printf(b, " v = ");
          epi_operand(b, e, op->a);
          sb_printf(b, " %c v;", op->op);
        } else {
          sb_printf(b, " v = v %c ", op->op);
          epi_operand(b, e, op->a);
          sb_printf(b, ";");
        }
        break;
    }
  }
  sb_printf(b, " }\n");
}

kiln_spirv_gemm_tiles_t kiln_spirv_conv_default_tiles(int64_t M, int64_t Q) {
  kiln_spirv_gemm_tiles_t t;
  const char* env = getenv("KILN_SPIRV_CONV_TILES");
  if (env && sscanf(env, "%d,%d,%d,%d,%d,%d", &t.tm, &t.tn, &t.tk, &t.rm, &t.rn, &t.shared) == 6 &&
      t.tm > 0 && t.tn > 0 && t.tk > 0 && t.rm > 0 && t.rn > 0 && t.tm % t.rm == 0 && t.tn % t.rn == 0)
    return t;
  return kiln_spirv_gemm_default_tiles(M, Q);
}

static kiln_status_t conv_source(const kiln_template_conv_t* c, const char* name, char** out_glsl,
                                 int64_t groups[3], int64_t local[3], int64_t* out_trips) {
  kiln_spirv_gemm_tiles_t t = kiln_spirv_conv_default_tiles(c->M, c->Q);
  const int64_t lx = t.tn / t.rn, ly = t.tm / t.rm, nt = lx * ly;
  if (t.tm % t.rm || t.tn % t.rn || nt > 1024 ||
      (t.shared && ((int64_t)t.tm * t.tk % nt || (int64_t)t.tk * t.tn % nt)))
    return kiln_make_status(KILN_INVALID_ARGUMENT, "conv '%s': tiles %dx%dx%d / %dx%d do not divide", name,
                            t.tm, t.tn, t.tk, t.rm, t.rn);
  const int64_t cp = c->od * c->oh * c->ow;
  if (c->batch * c->C * c->plane > INT32_MAX || c->batch * c->M * (c->crop ? cp : c->Q) > INT32_MAX ||
      c->T < 1 || c->T > KILN_TEMPLATE_CONV_MAX_TAPS)
    return kiln_make_status(KILN_INVALID_ARGUMENT, "conv '%s': %lld x %lld x %lld does not fit 32-bit indices",
                            name, (long long)c->M, (long long)c->Q, (long long)c->K);
  /* the header goes after the #version and #extension lines (directives
   * that must come before any declaration) */
  const char* nl = strstr(kiln_vk_conv, "#extension");
  nl = nl ? strchr(nl, '\n') : NULL;
  if (!nl) return kiln_make_status(KILN_INTERNAL, "kernels/vulkan/conv.comp has no #extension line");
  int bind[4] = {-1, -1, -1, -1}; /* W X C Y */
  const char* type[4] = {"float", "float", "float", "float"};
  bool f16 = false;
  for (int32_t j = 0; j < c->n_params; ++j) f16 = f16 || c->f16[j];
  sb_t b = {0};
  sb_printf(&b, "%.*s", (int)(nl - kiln_vk_conv) + 1, kiln_vk_conv);
  if (f16)
    sb_printf(&b, "#extension GL_EXT_shader_16bit_storage : require\n"
                  "#extension GL_EXT_shader_explicit_arithmetic_types_float16 : require\n");
  sb_printf(&b, "// kiln conv '%s': %lld channels x %lld grid x K %lld (%lld taps)%s\n", name, (long long)c->M,
            (long long)c->Q, (long long)c->K, (long long)c->T, c->crop ? ", cropped" : "");
  for (int32_t j = 0; j < c->n_params; ++j) {
    const char r = c->roles[j];
    const char* at = strchr("WXCY", r);
    if (at) {
      bind[at - "WXCY"] = j;
      type[at - "WXCY"] = c->f16[j] ? "float16_t" : "float";
    } else if (r >= '0' && r < '0' + KILN_TEMPLATE_EPI_MAX) {
      sb_printf(&b, "layout(std430, set = 0, binding = %d) restrict readonly buffer BufE%c { %s e%c[]; };\n",
                (int)j, r, c->f16[j] ? "float16_t" : "float", r);
    } else {
      free(b.p);
      return kiln_make_status(KILN_INTERNAL, "conv '%s': parameter %d has role '%c'", name, (int)j, r);
    }
  }
  if (bind[0] < 0 || bind[1] < 0 || bind[3] < 0 || (c->has_bias && bind[2] < 0)) {
    free(b.p);
    return kiln_make_status(KILN_INTERNAL, "conv '%s': weights, input or output missing", name);
  }
  sb_printf(&b, "#define TW %s\n#define TX %s\n#define TC %s\n#define TY %s\n", type[0], type[1], type[2],
            type[3]);
  sb_printf(&b,
            "#define BIND_W %d\n#define BIND_X %d\n#define BIND_C %d\n#define BIND_Y %d\n"
            "#define CM %lld\n#define CQ %lld\n#define CK %lld\n#define CT %lld\n#define CC %lld\n"
            "#define CPLANE %lld\n#define CBATCH %lld\n#define CPT %lld\n#define CKBS %lld\n"
            "#define CTILES %lld\n#define CCROP %d\n#define CQ1 %lld\n#define CQ2 %lld\n"
            "#define CDO %lld\n#define CHO %lld\n#define CWO %lld\n#define CHAS_BIAS %d\n"
            "#define TM %d\n#define TN %d\n#define TK %d\n#define RM %d\n#define RN %d\n#define SHARED %d\n",
            bind[0], bind[1], bind[2] < 0 ? 0 : bind[2], bind[3], (long long)c->M, (long long)c->Q,
            (long long)c->K, (long long)c->T, (long long)c->C, (long long)c->plane, (long long)c->batch,
            (long long)c->pt, (long long)c->kbs, (long long)c->tiles, c->crop ? 1 : 0, (long long)c->q1,
            (long long)c->q2, (long long)c->od, (long long)c->oh, (long long)c->ow, c->has_bias ? 1 : 0, t.tm,
            t.tn, t.tk, t.rm, t.rn, t.shared ? 1 : 0);
  sb_printf(&b, "const int TOFF[%lld] = int[%lld](", (long long)c->T, (long long)c->T);
  for (int64_t i = 0; i < c->T; ++i) sb_printf(&b, "%s%d", i ? ", " : "", (int)c->toff[i]);
  sb_printf(&b, ");\n");
  epi_print(&b, &c->epi);
  sb_printf(&b, "%s", nl + 1);
  if (b.oom) {
    free(b.p);
    return kiln_make_status(KILN_OUT_OF_MEMORY, "conv '%s': shader text", name);
  }
  *out_glsl = b.p;
  *out_trips = trips_tiled(c->K, &t, false);
  groups[0] = (c->Q + t.tn - 1) / t.tn;
  groups[1] = (c->M + t.tm - 1) / t.tm;
  groups[2] = c->batch > 0 ? c->batch : 1;
  local[0] = lx;
  local[1] = ly;
  local[2] = 1;
  return NULL;
}

/* ---- the depthwise convolution ------------------------------------------- */

/* The lowering's direct depthwise kernel (kiln_template_dw_t, lowering/template.h):
 * the kernel keeps its parameters, the shader takes its place
 * (kernels/vulkan/depthwise.comp). */
static kiln_status_t dw_source(const kiln_template_dw_t* d, const char* name, char** out_glsl, int64_t groups[3],
                               int64_t local[3]) {
  const char* nl = strstr(kiln_vk_depthwise, "#extension");
  nl = nl ? strchr(nl, '\n') : NULL;
  if (!nl) return kiln_make_status(KILN_INTERNAL, "kernels/vulkan/depthwise.comp has no #extension line");
  bool f16 = d->f16_x || d->f16_w || d->f16_c || d->f16_y;
  for (int32_t i = 0; i < d->epi.n_operands; ++i) f16 = f16 || d->f16_e[i];
  const int wg = 64;
  sb_t b = {0};
  sb_printf(&b, "%.*s", (int)(nl - kiln_vk_depthwise) + 1, kiln_vk_depthwise);
  if (f16)
    sb_printf(&b, "#extension GL_EXT_shader_16bit_storage : require\n"
                  "#extension GL_EXT_shader_explicit_arithmetic_types_float16 : require\n");
  sb_printf(&b, "// kiln depthwise '%s': %lld channels, %lldx%lld taps\n", name, (long long)d->M,
            (long long)d->kh, (long long)d->kw);
#define DW_T(f) ((f) ? "float16_t" : "float")
  sb_printf(&b, "#define TX %s\n#define TW %s\n#define TC %s\n#define TY %s\n", DW_T(d->f16_x), DW_T(d->f16_w),
            DW_T(d->f16_c), DW_T(d->f16_y));
  for (int32_t i = 0; i < d->epi.n_operands; ++i)
    sb_printf(&b, "layout(std430, set = 0, binding = %d) restrict readonly buffer BufE%d { %s e%d[]; };\n",
              (int)d->bind_e[i], (int)i, DW_T(d->f16_e[i]), (int)i);
#undef DW_T
  sb_printf(&b,
            "#define BIND_X %d\n#define BIND_W %d\n#define BIND_C %d\n#define BIND_Y %d\n"
            "#define CN %lld\n#define CM %lld\n#define CC %lld\n#define MG %lld\n"
            "#define IH %lld\n#define IW %lld\n#define OH %lld\n#define OW %lld\n"
            "#define KH %lld\n#define KW %lld\n#define SH %lld\n#define SW %lld\n"
            "#define DH %lld\n#define DW %lld\n#define PH %lld\n#define PW %lld\n"
            "#define CHAS_BIAS %d\n#define WG %d\n",
            (int)d->bind_x, (int)d->bind_w, d->bind_c < 0 ? 0 : (int)d->bind_c, (int)d->bind_y, (long long)d->N,
            (long long)d->M, (long long)d->C, (long long)d->Mg, (long long)d->ih, (long long)d->iw,
            (long long)d->oh, (long long)d->ow, (long long)d->kh, (long long)d->kw, (long long)d->sh,
            (long long)d->sw, (long long)d->dh, (long long)d->dw, (long long)d->ph, (long long)d->pw,
            d->bind_c >= 0 ? 1 : 0, wg);
  epi_print(&b, &d->epi);
  sb_printf(&b, "%s", nl + 1);
  if (b.oom) {
    free(b.p);
    return kiln_make_status(KILN_OUT_OF_MEMORY, "depthwise '%s': shader text", name);
  }
  *out_glsl = b.p;
  groups[0] = (d->oh * d->ow + wg - 1) / wg;
  groups[1] = d->N * d->M;
  groups[2] = 1;
  local[0] = wg;
  local[1] = local[2] = 1;
  return NULL;
}

/* The shader's view of a GEMM descriptor (kiln_spirv_templates allows only
 * f32 rank-2 A [M,K] and Y, no bias, no alpha, no transA): B plain,
 * transposed or in the lowering's packed panels; bindings are the kernel's
 * parameter indices. */
static kiln_spirv_gemm_t gemm_of(const kiln_template_gemm_t* t) {
  kiln_spirv_gemm_t g = {.M = t->M, .N = t->N, .K = t->K};
  g.b_mode = t->pack_t ? 2 : t->trans_b ? 1 : 0;
  if (t->pack_t) g.pt = t->pack_t, g.ptiles = t->pack_tiles, g.pkbs = t->pack_kbs;
  for (int32_t j = 0; j < t->n_params; ++j) {
    if (t->roles[j] == 'A') g.bind_a = j;
    if (t->roles[j] == 'B') g.bind_b = j;
    if (t->roles[j] == 'Y') g.bind_c = j;
  }
  return g;
}

void kiln_spirv_templates(kiln_template_set_t* out) {
  const char* no_gemm = getenv("KILN_SPIRV_NO_GEMM");
  const char* no_conv = getenv("KILN_SPIRV_NO_CONV");
  const bool conv = !(no_conv && !strcmp(no_conv, "1"));
  /* gemm.comp reads plain f32 rank-2 operands; conv.comp keeps its partial
   * sums in registers (no grid) and reads the lowering's packed weights;
   * depthwise.comp takes every depthwise kernel it matches */
  *out = (kiln_template_set_t){.gemm = !(no_gemm && !strcmp(no_gemm, "1")),
                               .conv = conv,
                               .depthwise = conv,
                               .depthwise_min_stride = 1};
}

/* ---- emit --------------------------------------------------------------- */

typedef struct unit_s {
  char* text;     /* GLSL (malloc) */
  uint64_t hash;
  int32_t first;  /* first kernel with the same text, or itself */
} unit_t;

static uint64_t hash_str(const char* s) {
  uint64_t h = 1469598103934665603ull;
  for (; *s; ++s) h = (h ^ (uint8_t)*s) * 1099511628211ull;
  return h;
}

/* Per parameter: restrict unless another parameter of the kernel shares its
 * memory root or it is half of the kernel's in-place pair (the memory
 * planner may then give both one address). */
static void noalias_of(const kiln_plan_t* plan, const kiln_program_kernel_t* pk,
                       const kiln_plan_kernel_t* k, bool* out) {
  int32_t n = k->func->n_params;
  for (int32_t i = 0; i < n; ++i) {
    out[i] = true;
    int32_t ri = kiln_plan_root(plan, k->args[i]);
    for (int32_t j = 0; j < n; ++j)
      if (j != i && kiln_plan_root(plan, k->args[j]) == ri) out[i] = false;
    if (pk->inplace_in == i || pk->inplace_out == i) out[i] = false;
  }
}

kiln_status_t kiln_spirv_emit(const kiln_plan_t* plan, kiln_program_t* prog) {
  if (!plan || !prog) return kiln_make_status(KILN_INVALID_ARGUMENT, "spirv: NULL plan or program");
  if (prog->n_kernels != plan->n_kernels)
    return kiln_make_status(KILN_INVALID_ARGUMENT, "spirv: program has %d kernels, plan %d",
                            (int)prog->n_kernels, (int)plan->n_kernels);
  kiln_allocator_t al = prog->allocator;
  int32_t nk = plan->n_kernels;
  bool no_bind = getenv("KILN_SPIRV_NO_BIND") && strcmp(getenv("KILN_SPIRV_NO_BIND"), "1") == 0;
  /* Rebound kernels live in a context of our own; its ids continue the
   * plan's so printed names never collide with the plan's. */
  tir_ctx_t ctx;
  tir_ctx_init(&ctx, al);
  ctx.next_var_id = plan->tir.next_var_id;
  ctx.next_buffer_id = plan->tir.next_buffer_id;
  unit_t* units = calloc((size_t)nk + 1, sizeof *units);
  int64_t(*dims)[6] = calloc((size_t)nk + 1, sizeof *dims);
  int32_t* keep = calloc((size_t)nk + 1, sizeof *keep);
  int64_t* trips = calloc((size_t)nk + 1, sizeof *trips);
  uint8_t** blobs = NULL;
  uint64_t* lens = NULL;
  char* text = NULL;
  kiln_status_t s = NULL;
  cc_t cc;
  bool cc_ok = false;
  if (!units || !dims || !keep || !trips) {
    s = kiln_make_status(KILN_OUT_OF_MEMORY, "spirv: %d kernels", (int)nk);
    goto done;
  }
  if ((s = kiln_allocator_malloc(al, sizeof(uint8_t*) * (size_t)(nk + 1), "SPIR-V blobs", (void**)&blobs)) ||
      (s = kiln_allocator_malloc(al, sizeof(uint64_t) * (size_t)(nk + 1), "SPIR-V blobs", (void**)&lens)))
    goto done;
  memset(blobs, 0, sizeof(uint8_t*) * (size_t)(nk + 1));
  if ((s = cc_init(&cc))) goto done;
  cc_ok = true;

  /* Print every kernel (canonical text), find duplicates. */
  size_t total = 0;
  for (int32_t k = 0; !s && k < nk; ++k) {
    const kiln_plan_kernel_t* pk = &plan->kernels[k];
    const char* name = pk->func->name;
    const kiln_template_t* t = pk->tmpl;
    const kiln_template_kind_t kind = t ? t->kind : KILN_TEMPLATE_NONE;
    if (kind == KILN_TEMPLATE_MERGED) continue; /* leaves the program (kiln_gpu_conv_rewrite) */
    if (kind == KILN_TEMPLATE_WINOGRAD) {
      s = kiln_make_status(KILN_INVALID_ARGUMENT, "spirv: kernel '%s': no Winograd template (kiln_spirv_templates)",
                           name);
      break;
    }
    if (kind == KILN_TEMPLATE_CONV) {
      /* GEMM + crop + epilogue in the crop's slot; the GEMM kernel goes */
      s = conv_source(&t->conv, name, &units[k].text, dims[k], dims[k] + 3, &trips[k]);
      if (s) s = kiln_status_annotate(s, "spirv");
    } else if (kind == KILN_TEMPLATE_DEPTHWISE) {
      s = dw_source(&t->dw, name, &units[k].text, dims[k], dims[k] + 3);
      trips[k] = t->dw.kh; /* the unrolled taps; nothing else loops */
      if (s) s = kiln_status_annotate(s, "spirv");
    } else if (kind == KILN_TEMPLATE_GEMM) {
      const kiln_spirv_gemm_t g = gemm_of(&t->gemm);
      s = kiln_spirv_gemm_source(&g, &units[k].text, dims[k], dims[k] + 3);
      const kiln_spirv_gemm_tiles_t gt = g.tiles.tm ? g.tiles : kiln_spirv_gemm_default_tiles(g.M, g.N);
      trips[k] = trips_tiled(g.K, &gt, true);
      if (s) break;
    } else {
      bool noalias[256];
      bool* na = noalias;
      if (pk->func->n_params > 256 &&
          !(na = malloc(sizeof(bool) * (size_t)pk->func->n_params))) {
        s = kiln_make_status(KILN_OUT_OF_MEMORY, "spirv: kernel '%s'", name);
        break;
      }
      noalias_of(plan, &prog->kernels[k], pk, na);
      /* CPU-style PARALLEL loops onto work-groups x invocations: lavapipe
       * runs an invocation per SIMD lane and groups on its threads. */
      const tir_func_t* f = pk->func;
      const tir_func_t* bound = NULL;
      if (!no_bind) {
        kiln_gpu_bind_t how = {.small_extent = 8, .lanes = 64};
        s = kiln_gpu_bind_parallel(&ctx, f, &how, &bound);
        if (s) {
          if (na != noalias) free(na);
          s = kiln_status_annotate(s, "spirv: kernel '%s'", name);
          break;
        }
        if (bound) f = bound;
      }
      kiln_cf_kernel_info_t info = {.param_noalias = na, .canonical = true};
      kiln_cf_out_t out;
      kiln_cf_out_init(&out);
      s = kiln_cf_print_kernel(&kiln_cf_dialect_glsl, f, &info, &out);
      if (na != noalias) free(na);
      if (s) {
        kiln_cf_out_free(&out);
        s = kiln_status_annotate(s, "spirv");
        break;
      }
      units[k].text = out.data; /* ownership moves (malloc'd by the printer) */
      kiln_cf_launch_dims(f, dims[k], dims[k] + 3);
      trips[k] = trips_of(f->body);
    }
  }
  for (int32_t k = 0; !s && k < nk; ++k) {
    const char* name = plan->kernels[k].func->name;
    units[k].first = k;
    if (!units[k].text) continue; /* gone */
    units[k].hash = hash_str(units[k].text);
    units[k].first = k;
    for (int32_t j = 0; j < k; ++j)
      if (units[j].text && units[j].first == j && units[j].hash == units[k].hash &&
          strcmp(units[j].text, units[k].text) == 0) {
        units[k].first = j;
        break;
      }
    total += strlen(units[k].text) + strlen(name) + 64;
  }
  /* Compile the distinct shaders; duplicates get copies of the blob. */
  for (int32_t k = 0; !s && k < nk; ++k) {
    const char* name = plan->kernels[k].func->name;
    if (!units[k].text) continue;
    if (units[k].first == k) {
      s = cc_compile(&cc, name, units[k].text, al, &blobs[k], &lens[k]);
      if (s) {
        s = kiln_status_annotate(s, "spirv");
        break;
      }
    } else {
      int32_t j = units[k].first;
      void* m = NULL;
      if ((s = kiln_allocator_malloc(al, lens[j], "SPIR-V blob", &m))) break;
      memcpy(m, blobs[j], lens[j]);
      blobs[k] = m;
      lens[k] = lens[j];
    }
  }
  if (!s) s = kiln_allocator_malloc(al, total + 1, "GLSL text", (void**)&text);
  if (s) goto done;
  size_t len = 0;
  for (int32_t k = 0; k < nk; ++k) {
    if (!units[k].text) continue;
    int w = snprintf(text + len, total + 1 - len, "// ---- kernel %s%s%s ----\n", plan->kernels[k].func->name,
                     units[k].first != k ? " = " : "",
                     units[k].first != k ? plan->kernels[units[k].first].func->name : "");
    len += (size_t)w;
    size_t l = strlen(units[k].text);
    memcpy(text + len, units[k].text, l);
    len += l;
  }
  text[len] = 0;
  /* Conv instances change the kernel list: blobs and launch sizes follow. */
  int32_t nkept = nk;
  if (kiln_gpu_conv_any(plan)) {
    if ((s = kiln_gpu_conv_rewrite(prog, plan, keep))) goto done;
    nkept = prog->n_kernels;
    for (int32_t o = 0; o < nkept; ++o) {
      const int32_t k = keep[o];
      if (k == o) continue;
      blobs[o] = blobs[k];
      lens[o] = lens[k];
      blobs[k] = NULL;
      memcpy(dims[o], dims[k], sizeof dims[o]);
      trips[o] = trips[k];
    }
  }
  /* Commit. */
  for (int32_t i = 0; prog->code.blobs && i < prog->code.n_blobs; ++i) kiln_allocator_free(al, prog->code.blobs[i]);
  kiln_allocator_free(al, prog->code.blobs);
  kiln_allocator_free(al, prog->code.blob_lens);
  kiln_allocator_free(al, prog->code.text);
  prog->code.blobs = blobs;
  prog->code.blob_lens = lens;
  prog->code.n_blobs = nkept;
  prog->code.text = text;
  prog->code.text_len = len;
  for (int32_t k = 0; k < nkept; ++k) prog->kernels[k].loop_trips = trips[k];
  for (int32_t k = 0; k < nkept; ++k)
    for (int d = 0; d < 3; ++d) {
      prog->kernels[k].groups[d] = dims[k][d] > 0 ? dims[k][d] : 1;
      prog->kernels[k].local[d] = dims[k][3 + d] > 0 ? dims[k][3 + d] : 1;
    }
  blobs = NULL;
  lens = NULL;
  text = NULL;
done:
  tir_ctx_deinit(&ctx);
  if (cc_ok) cc_free(&cc);
  if (blobs)
    for (int32_t k = 0; k < nk; ++k) kiln_allocator_free(al, blobs[k]);
  kiln_allocator_free(al, blobs);
  kiln_allocator_free(al, lens);
  kiln_allocator_free(al, text);
  for (int32_t k = 0; units && k < nk; ++k) free(units[k].text);
  free(units);
  free(dims);
  free(keep);
  free(trips);
  return s;
}

/* ---- registration (targets/registry.h) ---------------------------------- */

/* The dump holds the GLSL of every shader, one after another. */
const kiln_target_t kiln_target_vulkan = {
    .name = "vulkan",
    .lowering = KILN_TARGET_CLASS_GPU,
    .source_ext = "comp",
    .emit = kiln_spirv_emit,
    .templates = kiln_spirv_templates,
};
