/* Tests for the nn lowerings (lowering/lower_nn*.c): single-node graphs
 * are lowered into a plan (every kernel passes tir_verify there), run on the
 * tensor-IR interpreter (ir/tir_interp.h, every access bounds-checked), and then
 * compiled and run natively by the CPU backend (KILN_TEST_NO_CPU=1 skips
 * that); both are compared with the reference executor. Shapes cover odd
 * sizes that are not multiples of the register tiles, groups, dilations,
 * strides, padding, auto_pad, batch > 1, f16, every conv algorithm of the
 * heuristic and the attribute variants of every op. */
#include <math.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "ir/op.h"
#include "ir/tir_interp.h"
#include "lowering/plan.h"
#include "compiler/ref_exec.h"
#include "targets/cpu/cpu_backend.h"
#include "testing.h"

/* The case tables below list fields positionally and leave trailing ones
 * at their zero defaults. */
#pragma GCC diagnostic ignored "-Wmissing-field-initializers"

/* ---- graphs ---------------------------------------------------------------- */

#define F32 KILN_DTYPE_F32
#define F16 KILN_DTYPE_F16
#define I32 KILN_DTYPE_I32
#define I64 KILN_DTYPE_I64
#define I8 KILN_DTYPE_I8
#define U8 KILN_DTYPE_U8
#define NONE KILN_DTYPE_UNDEFINED
#define NELEM(a) ((int)(sizeof(a) / sizeof((a)[0])))

static kiln_allocator_t A(void) { return kiln_allocator_system(); }

#define INTS(name, ...) kiln_attr_make_ints(name, NELEM(((int64_t[]){__VA_ARGS__})), (int64_t[]){__VA_ARGS__})

/* Deterministic pseudo-random values in [-1, 1). */
static uint64_t rng_state = 88172645463325252ull;
static double rnd(void) {
  rng_state ^= rng_state << 13;
  rng_state ^= rng_state >> 7;
  rng_state ^= rng_state << 17;
  return (double)(rng_state >> 11) / (double)(1ull << 52) - 1.0;
}

/* A random array (owned: free with kiln_array_free). Integer dtypes get
 * small values. */
static kiln_array_t rand_array(kiln_dtype_t t, int rank, const int64_t* dims) {
  kiln_array_t a;
  kiln_shape_t s = kiln_shape_make(rank, dims);
  kiln_status_t st = kiln_array_alloc(A(), t, &s, &a);
  KILN_ASSERT(!st);
  int64_t n = kiln_array_numel(&a);
  for (int64_t i = 0; i < n; ++i) {
    double v = rnd();
    if (kiln_dtype_is_float(t)) kiln_store_f64(t, a.data, (size_t)i, v);
    else kiln_store_i64(t, a.data, (size_t)i, (int64_t)floor(v * 8));
  }
  return a;
}

#define MAX_IO 6
typedef struct spec_s {
  const char* op;
  int64_t opset;
  int n_in;
  kiln_array_t in[MAX_IO];    /* dtype NONE: omitted optional input */
  uint32_t const_mask;        /* bit i: input i is an initializer */
  int n_attrs;
  kiln_attr_t attrs[12];
  int n_out;
  bool skip_out[MAX_IO];      /* optional outputs left out */
  double tol;                 /* relative to max |ref|; 0 = default */
} spec_t;

static const char* const in_names[] = {"x0", "x1", "x2", "x3", "x4", "x5"};
static const char* const out_names[] = {"y0", "y1", "y2", "y3", "y4", "y5"};

static kiln_status_t build(const spec_t* sp, kiln_graph_t** out_g) {
  kiln_graph_t* g = NULL;
  KILN_RETURN_IF_ERROR(kiln_graph_create(A(), &g));
  kiln_status_t s = kiln_graph_set_opset(g, "", sp->opset ? sp->opset : 17);
  const char* names[MAX_IO];
  const char* onames[MAX_IO];
  for (int i = 0; i < sp->n_in && !s; ++i) {
    names[i] = sp->in[i].dtype == NONE ? "" : in_names[i];
    if (sp->in[i].dtype == NONE) continue;
    if (sp->const_mask & (1u << i)) {
      kiln_array_t c;
      s = kiln_array_clone(A(), &sp->in[i], &c);
      if (!s) s = kiln_graph_add_initializer(g, in_names[i], &c, NULL);
    } else {
      s = kiln_graph_add_input(g, in_names[i], sp->in[i].dtype, &sp->in[i].shape, NULL);
    }
  }
  for (int o = 0; o < sp->n_out; ++o) onames[o] = sp->skip_out[o] ? "" : out_names[o];
  if (!s)
    s = kiln_graph_add_node(g, sp->op, "n0", sp->n_in, names, sp->n_out, onames, sp->n_attrs,
                            sp->attrs, NULL);
  for (int o = 0; o < sp->n_out && !s; ++o)
    if (!sp->skip_out[o]) s = kiln_graph_add_output(g, out_names[o]);
  if (!s) s = kiln_graph_prepare(g);
  if (s) {
    kiln_graph_destroy(g);
    return s;
  }
  *out_g = g;
  return NULL;
}

/* Runs every kernel of |p| on the interpreter; |outs| receive copies of the
 * plan outputs (f32/other dtypes as planned). */
static kiln_status_t interp_plan(const kiln_plan_t* p, const kiln_array_t* feeds,
                                 kiln_array_t* outs) {
  void** mem = calloc((size_t)p->n_buffers + 1, sizeof(void*));
  kiln_status_t st = NULL;
  for (int32_t i = 0; i < p->n_buffers; ++i) {
    const kiln_plan_buffer_t* b = &p->buffers[i];
    if (kiln_plan_root(p, i) != i) continue;
    if (b->kind == KILN_PLAN_CONST) {
      mem[i] = b->value.data;
      continue;
    }
    size_t n = (size_t)tir_buffer_numel(b->buf) * kiln_dtype_size(b->buf->dtype);
    mem[i] = malloc(n ? n : 1);
    /* Garbage, so kernels that read before writing show up. */
    memset(mem[i], 0x7f, n);
  }
  for (int32_t i = 0; i < p->n_buffers; ++i) mem[i] = mem[kiln_plan_root(p, i)];
  for (int32_t i = 0; i < p->graph->n_inputs; ++i) {
    int32_t b = p->inputs[i];
    memcpy(mem[b], feeds[i].data, feeds[i].nbytes);
  }
  for (int32_t k = 0; k < p->n_kernels && !st; ++k) {
    const kiln_plan_kernel_t* kk = &p->kernels[k];
    void* args[64];
    for (int32_t a = 0; a < kk->func->n_params; ++a) args[a] = mem[kk->args[a]];
    st = tir_interp_run(kk->func, args, NULL, A());
  }
  for (int32_t o = 0; o < p->graph->n_outputs && !st; ++o) {
    const tir_buffer_t* b = p->buffers[p->outputs[o]].buf;
    kiln_shape_t s = kiln_shape_make(b->rank, b->shape);
    st = kiln_array_alloc(A(), b->dtype, &s, &outs[o]);
    if (!st) memcpy(outs[o].data, mem[p->outputs[o]], outs[o].nbytes);
  }
  for (int32_t i = 0; i < p->n_buffers; ++i)
    if (kiln_plan_root(p, i) == i && p->buffers[i].kind != KILN_PLAN_CONST) free(mem[i]);
  free(mem);
  return st;
}

/* Max |got - want| / max(1, max |want|) over the array; NaNs must match. */
static double rel_err(const kiln_array_t* got, const kiln_array_t* want) {
  if (got->dtype != want->dtype || !kiln_shape_equal(&got->shape, &want->shape)) return INFINITY;
  int64_t n = kiln_array_numel(want);
  double scale = 1.0, err = 0.0;
  for (int64_t i = 0; i < n; ++i) {
    double w = kiln_load_f64(want->dtype, want->data, (size_t)i);
    if (isfinite(w) && fabs(w) > scale) scale = fabs(w);
  }
  for (int64_t i = 0; i < n; ++i) {
    double g = kiln_load_f64(got->dtype, got->data, (size_t)i);
    double w = kiln_load_f64(want->dtype, want->data, (size_t)i);
    if (isnan(w) || isnan(g)) {
      if (isnan(w) != isnan(g)) return INFINITY;
      continue;
    }
    if (isinf(w) || isinf(g)) {
      if (g != w) return INFINITY;
      continue;
    }
    double e = fabs(g - w) / scale;
    if (e > err) err = e;
  }
  return err;
}

static int n_cases = 0;
static bool use_cpu = true;   /* KILN_TEST_NO_CPU=1 skips the native runs */

/* Compiles |p| with the CPU backend and runs it on |feeds|. */
static kiln_status_t cpu_plan(const kiln_plan_t* p, const kiln_array_t* feeds, kiln_array_t* outs) {
  kiln_cpu_options_t o;
  kiln_cpu_options_default(&o);
  o.threads = 2;
  kiln_cpu_exec_t* e = NULL;
  KILN_RETURN_IF_ERROR(kiln_cpu_compile(p, &o, &e, NULL));
  kiln_status_t st = kiln_cpu_run(e, feeds, outs, NULL, NULL);
  kiln_cpu_exec_destroy(e);
  return st;
}

/* Lowers, interprets and compares one case with the reference; frees the
 * spec's arrays. */
/* The most f32 vectors of |lanes| any PRIVATE f32 array under |s| holds
 * (rows x ceil(last dim / lanes)). */
static int64_t private_vectors(const tir_stmt_t* s, int32_t lanes) {
  if (!s) return 0;
  int64_t m = 0, r;
  switch (s->kind) {
    case TIR_FOR: return private_vectors(s->u.loop.body, lanes);
    case TIR_SEQ:
      for (int32_t i = 0; i < s->u.seq.n; ++i)
        if ((r = private_vectors(s->u.seq.items[i], lanes)) > m) m = r;
      return m;
    case TIR_IF:
      m = private_vectors(s->u.cond.then_s, lanes);
      r = private_vectors(s->u.cond.else_s, lanes);
      return r > m ? r : m;
    case TIR_ALLOC: {
      const tir_buffer_t* b = s->u.alloc.buf;
      /* the small-plane depthwise kernel's padded plane and its sums are
       * scratch in memory by design, not a register tile */
      const bool scratch = b->name && (!strcmp(b->name, "dwpad") || !strcmp(b->name, "dwsum"));
      if (b->scope == TIR_SCOPE_PRIVATE && b->dtype == KILN_DTYPE_F32 && b->rank > 0 && !scratch) {
        const int64_t cols = b->shape[b->rank - 1];
        m = tir_buffer_numel(b) / (cols > 0 ? cols : 1) * ((cols + lanes - 1) / lanes);
      }
      r = private_vectors(s->u.alloc.body, lanes);
      return r > m ? r : m;
    }
    default: return 0;
  }
}

static void check_case(spec_t* sp, const char* what) {
  ++n_cases;
  kiln_graph_t* g = NULL;
  kiln_status_t st = build(sp, &g);
  if (!CHECK_OK(st)) {
    fprintf(stderr, "  case: %s\n", what);
    goto done;
  }
  kiln_array_t feeds[MAX_IO];
  int nf = 0;
  for (int i = 0; i < sp->n_in; ++i)
    if (sp->in[i].dtype != NONE && !(sp->const_mask & (1u << i))) feeds[nf++] = sp->in[i];
  kiln_array_t want[MAX_IO], got[MAX_IO];
  memset(want, 0, sizeof want);
  memset(got, 0, sizeof got);
  kiln_ref_options_t ro;
  kiln_ref_options_default(&ro);
  st = kiln_ref_run(g, feeds, &ro, want);
  if (!CHECK_OK(st)) {
    fprintf(stderr, "  case: %s (reference)\n", what);
    kiln_graph_destroy(g);
    goto done;
  }
  kiln_plan_options_t po = {KILN_TARGET_CLASS_CPU, 2, 0, 0, 0, 0};
  kiln_plan_t* p = NULL;
  st = kiln_plan_build(g, &po, A(), &p);
  if (!CHECK_OK(st)) fprintf(stderr, "  case: %s (plan)\n", what);
  if (p && !strcmp(sp->op, "Conv") && p->n_kernels > 1) {
    /* profiles: the node's FLOPs sit on the kernel that sums (the GEMM or
     * the direct loop), not on the phase split or the crop */
    int with = 0;
    int64_t sum = 0;
    for (int32_t k = 0; k < p->n_kernels; ++k) {
      with += p->kernels[k].flops > 0;
      sum += p->kernels[k].flops;
    }
    CHECK_MSG(with == 1 && sum > 0, "%s: %d of %d kernels carry FLOPs", what, with, (int)p->n_kernels);
  }
  if (p && (!strcmp(sp->op, "Conv") || !strcmp(sp->op, "MatMul") || !strcmp(sp->op, "Gemm"))) {
    /* the GEMM register tile fits this CPU's vector registers (read at run
     * time): 14 x 32 on AVX-512, 6 x 16 on AVX2; a bigger one spills */
    const kiln_cpu_simd_t v = kiln_cpu_simd();
    for (int32_t k = 0; k < p->n_kernels; ++k) {
      int64_t vecs = private_vectors(p->kernels[k].func->body, v.lanes);
      CHECK_MSG(vecs <= v.regs - 4, "%s: kernel %s keeps %lld vectors of %d lanes, %d registers", what,
                p->kernels[k].func->name, (long long)vecs, (int)v.lanes, (int)v.regs);
    }
  }
  for (int pass = 0; p && pass < (use_cpu ? 2 : 1); ++pass) {
    for (int o = 0; o < g->n_outputs; ++o) kiln_array_free(A(), &got[o]);
    memset(got, 0, sizeof got);
    st = pass == 0 ? interp_plan(p, feeds, got) : cpu_plan(p, feeds, got);
    if (CHECK_OK(st)) {
      /* Native code contracts a*b+c into FMAs: allow reassociation error. */
      double tol = sp->tol > 0 ? sp->tol : 1e-5;
      if (pass == 1 && tol < 1e-5) tol = 1e-5;
      for (int o = 0; o < g->n_outputs; ++o) {
        double e = rel_err(&got[o], &want[o]);
        if (getenv("NN_VERBOSE")) fprintf(stderr, "%-70s out %d err %.3g\n", what, o, e);
        if (e > tol && getenv("NN_DEBUG")) {
          for (int64_t q = 0; q < kiln_array_numel(&want[o]) && q < 40; ++q)
            fprintf(stderr, "  [%lld] got %g want %g\n", (long long)q,
                    kiln_load_f64(got[o].dtype, got[o].data, (size_t)q),
                    kiln_load_f64(want[o].dtype, want[o].data, (size_t)q));
        }
        CHECK_MSG(e <= tol, "%s (%s): output %d differs from the reference: rel err %g > %g", what,
                  pass ? "cpu" : "interpreter", o, e, tol);
      }
    } else {
      fprintf(stderr, "  case: %s (%s)\n", what, pass ? "cpu" : "interpreter");
    }
  }
  kiln_plan_destroy(p);
  for (int o = 0; o < g->n_outputs; ++o) {
    kiln_array_free(A(), &want[o]);
    kiln_array_free(A(), &got[o]);
  }
  kiln_graph_destroy(g);
done:
  for (int i = 0; i < sp->n_in; ++i)
    if (sp->in[i].dtype != NONE) kiln_array_free(A(), &sp->in[i]);
}

#define DIMS(...) (int64_t[]){__VA_ARGS__}
#define RAND(t, ...) rand_array((t), NELEM(DIMS(__VA_ARGS__)), DIMS(__VA_ARGS__))

/* ---- MatMul / Gemm ---------------------------------------------------------- */

static void matmul_case(kiln_dtype_t t, int ra, const int64_t* da, int rb, const int64_t* db,
                        bool b_const) {
  spec_t sp = {.op = "MatMul", .n_in = 2, .n_out = 1, .tol = t == F16 ? 2e-3 : 1e-5};
  sp.in[0] = rand_array(t, ra, da);
  sp.in[1] = rand_array(t, rb, db);
  sp.const_mask = b_const ? 2u : 0u;
  char what[160];
  kiln_shape_t sa = kiln_shape_make(ra, da), sb = kiln_shape_make(rb, db);
  char a1[64], b1[64];
  snprintf(what, sizeof what, "MatMul %s %s x %s%s", kiln_dtype_name(t),
           kiln_shape_format(&sa, a1, sizeof a1), kiln_shape_format(&sb, b1, sizeof b1),
           b_const ? " (B const)" : "");
  check_case(&sp, what);
}

static void test_matmul(void) {
  static const int64_t sizes[][3] = {{1, 1, 1},   {5, 7, 3},    {12, 32, 16}, {13, 33, 17},
                                     {29, 70, 45}, {64, 64, 64}, {1, 100, 37}, {40, 5, 600},
                                     {27, 48, 520}};
  for (int i = 0; i < NELEM(sizes); ++i) {
    int64_t M = sizes[i][0], N = sizes[i][1], K = sizes[i][2];
    for (int c = 0; c < 2; ++c)
      matmul_case(F32, 2, DIMS(M, K), 2, DIMS(K, N), c);
  }
  /* batched with broadcast, 1-D operands */
  matmul_case(F32, 3, DIMS(3, 7, 9), 2, DIMS(9, 18), true);
  matmul_case(F32, 3, DIMS(3, 7, 9), 3, DIMS(3, 9, 18), false);
  matmul_case(F32, 3, DIMS(3, 7, 9), 3, DIMS(3, 9, 18), true);
  matmul_case(F32, 4, DIMS(2, 1, 5, 6), 3, DIMS(3, 6, 33), true);
  matmul_case(F32, 4, DIMS(2, 1, 5, 6), 3, DIMS(3, 6, 33), false);
  matmul_case(F32, 1, DIMS(6), 2, DIMS(6, 40), true);
  matmul_case(F32, 2, DIMS(17, 6), 1, DIMS(6), false);
  matmul_case(F32, 1, DIMS(6), 3, DIMS(2, 6, 3), false);
  matmul_case(F16, 2, DIMS(13, 21), 2, DIMS(21, 35), true);
  matmul_case(F16, 2, DIMS(13, 21), 2, DIMS(21, 35), false);
  matmul_case(I32, 2, DIMS(4, 5), 2, DIMS(5, 3), false);
  matmul_case(I64, 3, DIMS(2, 4, 5), 2, DIMS(5, 3), true);
}

static void gemm_case(int64_t M, int64_t N, int64_t K, int ta, int tb, float alpha, float beta,
                      int crank, const int64_t* cdims, uint32_t const_mask) {
  spec_t sp = {.op = "Gemm", .n_in = crank >= 0 ? 3 : 2, .n_out = 1, .const_mask = const_mask};
  sp.in[0] = ta ? RAND(F32, K, M) : RAND(F32, M, K);
  sp.in[1] = tb ? RAND(F32, N, K) : RAND(F32, K, N);
  if (crank >= 0) sp.in[2] = rand_array(F32, crank, cdims);
  sp.attrs[sp.n_attrs++] = kiln_attr_make_int("transA", ta);
  sp.attrs[sp.n_attrs++] = kiln_attr_make_int("transB", tb);
  sp.attrs[sp.n_attrs++] = kiln_attr_make_float("alpha", alpha);
  sp.attrs[sp.n_attrs++] = kiln_attr_make_float("beta", beta);
  char what[160];
  snprintf(what, sizeof what, "Gemm M=%lld N=%lld K=%lld tA=%d tB=%d alpha=%g beta=%g C rank %d mask %u",
           (long long)M, (long long)N, (long long)K, ta, tb, alpha, beta, crank, const_mask);
  check_case(&sp, what);
}

static void test_gemm(void) {
  for (int ta = 0; ta < 2; ++ta)
    for (int tb = 0; tb < 2; ++tb)
      for (uint32_t mask = 0; mask < 4; mask += 2) {
        gemm_case(7, 19, 11, ta, tb, 1.0f, 1.0f, 2, DIMS(7, 19), mask | 4u);
        gemm_case(30, 45, 700, ta, tb, 0.5f, 2.0f, 1, DIMS(45), mask);
      }
  gemm_case(3, 40, 8, 0, 0, 1.0f, 1.0f, -1, NULL, 2u);
  gemm_case(3, 40, 8, 0, 1, 1.5f, 0.0f, 0, NULL, 2u);
  gemm_case(3, 40, 8, 0, 1, 1.0f, -1.0f, 2, DIMS(3, 1), 2u);
  gemm_case(3, 40, 8, 1, 1, 1.0f, 0.5f, 2, DIMS(1, 40), 0u);
  gemm_case(1, 1000, 512, 0, 1, 1.0f, 1.0f, 1, DIMS(1000), 6u);
}

/* ---- Conv / ConvTranspose -------------------------------------------------------- */

typedef struct cvc_s {
  int nsp;
  int64_t n, c, m, group;
  int64_t in[3], k[3], s[3], d[3], pb[3], pe[3];
  const char* auto_pad;
  bool bias, w_const, f16;
} cvc_t;

static void conv_case(const char* op, const cvc_t* c) {
  int r = c->nsp + 2;
  int64_t xd[5] = {c->n, c->c}, wd[5];
  bool tr = !strcmp(op, "ConvTranspose");
  if (tr) wd[0] = c->c, wd[1] = c->m / c->group;
  else wd[0] = c->m, wd[1] = c->c / c->group;
  for (int i = 0; i < c->nsp; ++i) xd[2 + i] = c->in[i], wd[2 + i] = c->k[i];
  kiln_dtype_t t = c->f16 ? F16 : F32;
  spec_t sp = {.op = op, .n_in = c->bias ? 3 : 2, .n_out = 1, .tol = c->f16 ? 3e-3 : 1e-5};
  sp.in[0] = rand_array(t, r, xd);
  sp.in[1] = rand_array(t, r, wd);
  if (c->bias) sp.in[2] = rand_array(t, 1, DIMS(c->m));
  sp.const_mask = c->w_const ? 6u : 0u;
  static int64_t st[3][3], dl[3][3], pd[3][6];
  int slot = n_cases % 3;
  for (int i = 0; i < c->nsp; ++i) {
    st[slot][i] = c->s[i] ? c->s[i] : 1;
    dl[slot][i] = c->d[i] ? c->d[i] : 1;
    pd[slot][i] = c->pb[i];
    pd[slot][c->nsp + i] = c->pe[i];
  }
  sp.attrs[sp.n_attrs++] = kiln_attr_make_int("group", c->group);
  sp.attrs[sp.n_attrs++] = kiln_attr_make_ints("strides", c->nsp, st[slot]);
  sp.attrs[sp.n_attrs++] = kiln_attr_make_ints("dilations", c->nsp, dl[slot]);
  if (c->auto_pad) sp.attrs[sp.n_attrs++] = kiln_attr_make_string("auto_pad", c->auto_pad);
  else sp.attrs[sp.n_attrs++] = kiln_attr_make_ints("pads", 2 * c->nsp, pd[slot]);
  char what[256];
  snprintf(what, sizeof what,
           "%s nsp=%d n=%lld c=%lld m=%lld g=%lld in=%lldx%lldx%lld k=%lldx%lldx%lld s=%lld,%lld "
           "d=%lld,%lld p=%lld,%lld/%lld,%lld %s%s%s%s",
           op, c->nsp, (long long)c->n, (long long)c->c, (long long)c->m, (long long)c->group,
           (long long)c->in[0], (long long)c->in[1], (long long)c->in[2], (long long)c->k[0],
           (long long)c->k[1], (long long)c->k[2], (long long)c->s[0], (long long)c->s[1],
           (long long)c->d[0], (long long)c->d[1], (long long)c->pb[0], (long long)c->pb[1],
           (long long)c->pe[0], (long long)c->pe[1], c->auto_pad ? c->auto_pad : "",
           c->bias ? " bias" : "", c->w_const ? " wconst" : "", c->f16 ? " f16" : "");
  check_case(&sp, what);
}

static void test_conv_const_input(void) {
  /* Every operand a constant: the flat views alias constant buffers. */
  spec_t sp = {.op = "Conv", .n_in = 2, .n_out = 1, .const_mask = 3u};
  sp.in[0] = RAND(F32, 1, 8, 6, 6);
  sp.in[1] = RAND(F32, 16, 8, 1, 1);
  check_case(&sp, "Conv 1x1 of constants");
}

static void test_conv(void) {
  static const cvc_t cases[] = {
      /* 1x1 plain GEMM */
      {2, 1, 16, 24, 1, {7, 9}, {1, 1}, {1, 1}, {1, 1}, {0}, {0}, NULL, true, true},
      {2, 2, 5, 33, 1, {6, 5}, {1, 1}, {1, 1}, {1, 1}, {0}, {0}, NULL, false, true},
      {2, 1, 8, 8, 1, {5, 5}, {1, 1}, {1, 1}, {1, 1}, {0}, {0}, NULL, true, false},
      /* 3x3 padded stride 1 */
      {2, 1, 8, 16, 1, {9, 11}, {3, 3}, {1, 1}, {1, 1}, {1, 1}, {1, 1}, NULL, true, true},
      {2, 2, 3, 13, 1, {10, 7}, {3, 3}, {1, 1}, {1, 1}, {1, 1}, {1, 1}, NULL, true, true},
      {2, 1, 64, 64, 1, {8, 8}, {3, 3}, {1, 1}, {1, 1}, {1, 1}, {1, 1}, NULL, true, true},
      /* strides, dilations, asymmetric pads */
      {2, 1, 3, 16, 1, {23, 21}, {7, 7}, {2, 2}, {1, 1}, {3, 3}, {3, 3}, NULL, true, true},
      {2, 1, 6, 20, 1, {12, 14}, {3, 3}, {2, 2}, {1, 1}, {1, 1}, {1, 1}, NULL, false, true},
      {2, 1, 6, 20, 1, {12, 14}, {1, 1}, {2, 2}, {1, 1}, {0, 0}, {0, 0}, NULL, true, true},
      {2, 2, 5, 7, 1, {13, 12}, {3, 2}, {3, 2}, {2, 3}, {2, 0}, {1, 3}, NULL, true, true},
      {2, 1, 4, 9, 1, {10, 10}, {3, 3}, {1, 1}, {2, 2}, {2, 2}, {2, 2}, NULL, true, false},
      {2, 1, 4, 9, 1, {11, 8}, {3, 3}, {2, 1}, {1, 1}, {0}, {0}, "SAME_UPPER", true, true},
      {2, 1, 4, 9, 1, {11, 8}, {4, 2}, {3, 2}, {1, 1}, {0}, {0}, "SAME_LOWER", false, true},
      {2, 1, 4, 9, 1, {11, 8}, {3, 3}, {2, 2}, {1, 1}, {0}, {0}, "VALID", true, true},
      {2, 1, 4, 9, 1, {11, 8}, {3, 3}, {1, 1}, {1, 1}, {0}, {0}, "VALID", true, true},
      {2, 1, 4, 9, 1, {6, 6}, {1, 1}, {1, 1}, {1, 1}, {0, 0}, {1, 2}, NULL, true, true},
      /* groups, depthwise (multiplier 1 and 2) */
      {2, 1, 8, 12, 4, {9, 9}, {3, 3}, {1, 1}, {1, 1}, {1, 1}, {1, 1}, NULL, true, true},
      {2, 2, 6, 6, 6, {10, 9}, {3, 3}, {1, 1}, {1, 1}, {1, 1}, {1, 1}, NULL, true, true},
      {2, 1, 7, 7, 7, {12, 13}, {3, 3}, {2, 2}, {1, 1}, {1, 1}, {1, 1}, NULL, true, true},
      {2, 1, 5, 10, 5, {8, 8}, {5, 5}, {1, 1}, {1, 1}, {2, 2}, {2, 2}, NULL, false, true},
      {2, 1, 6, 6, 6, {9, 9}, {3, 3}, {1, 1}, {1, 1}, {1, 1}, {1, 1}, NULL, true, false},
      /* 1-D and 3-D */
      {1, 2, 5, 11, 1, {17}, {3}, {2}, {1}, {1}, {2}, NULL, true, true},
      {1, 1, 4, 40, 2, {30}, {5}, {1}, {3}, {0}, {0}, NULL, false, true},
      {3, 1, 3, 5, 1, {5, 6, 7}, {3, 3, 3}, {1, 2, 1}, {1, 1, 1}, {1, 1, 1}, {1, 0, 1}, NULL, true, true},
      {3, 1, 4, 4, 4, {4, 5, 6}, {2, 3, 3}, {1, 1, 1}, {1, 1, 1}, {0, 1, 1}, {1, 1, 1}, NULL, true, true},
      /* small outputs: spatial positions as the GEMM's rows */
      {2, 1, 16, 64, 1, {7, 7}, {3, 3}, {1, 1}, {1, 1}, {1, 1}, {1, 1}, NULL, true, true},
      {2, 2, 12, 40, 1, {14, 13}, {3, 3}, {2, 2}, {1, 1}, {1, 1}, {1, 1}, NULL, true, true},
      {2, 1, 70, 96, 2, {5, 6}, {3, 3}, {1, 1}, {1, 1}, {1, 1}, {1, 1}, NULL, true, false},
      {2, 1, 24, 48, 1, {7, 7}, {1, 1}, {1, 1}, {1, 1}, {0}, {0}, NULL, false, true},
      {2, 1, 24, 48, 1, {14, 14}, {1, 1}, {2, 2}, {1, 1}, {0}, {0}, NULL, true, true},
      {2, 1, 600, 33, 1, {4, 4}, {3, 3}, {1, 1}, {1, 1}, {1, 1}, {1, 1}, NULL, true, true},
      {2, 2, 20, 40, 1, {1, 1}, {1, 1}, {1, 1}, {1, 1}, {0}, {0}, NULL, true, true},
      {2, 1, 64, 72, 1, {3, 2}, {3, 3}, {1, 1}, {1, 1}, {1, 1}, {1, 1}, NULL, false, true},
      /* f16, large K (K blocking), N tail tiles */
      {2, 1, 8, 10, 1, {7, 7}, {3, 3}, {1, 1}, {1, 1}, {1, 1}, {1, 1}, NULL, true, true, true},
      {2, 1, 80, 6, 1, {5, 6}, {3, 3}, {1, 1}, {1, 1}, {1, 1}, {1, 1}, NULL, true, true},
  };
  for (int i = 0; i < NELEM(cases); ++i) conv_case("Conv", &cases[i]);
}

static void test_conv_transpose(void) {
  static const cvc_t cases[] = {
      {2, 1, 3, 5, 1, {4, 5}, {3, 3}, {1, 1}, {1, 1}, {0}, {0}, NULL, true, true},
      {2, 2, 4, 6, 2, {5, 4}, {3, 2}, {2, 3}, {1, 1}, {1, 0}, {0, 1}, NULL, true, true},
      {2, 1, 2, 3, 1, {3, 3}, {3, 3}, {2, 2}, {2, 1}, {0}, {0}, "SAME_UPPER", false, true},
      {1, 1, 3, 4, 1, {7}, {4}, {3}, {1}, {1}, {1}, NULL, true, false},
      {3, 1, 2, 2, 1, {3, 3, 2}, {2, 2, 2}, {2, 1, 2}, {1, 1, 1}, {0}, {0}, NULL, true, true},
  };
  for (int i = 0; i < NELEM(cases); ++i) conv_case("ConvTranspose", &cases[i]);
}

/* ---- pools ------------------------------------------------------------------ */

typedef struct plc_s {
  const char* op;
  int nsp;
  int64_t n, c, in[3], k[3], s[3], d[3], pb[3], pe[3];
  const char* auto_pad;
  int ceil_mode, cip, storage_order, indices; /* cip: LpPool's p */
  bool f16;
} plc_t;

static void pool_case(const plc_t* c) {
  int r = c->nsp + 2;
  int64_t xd[5] = {c->n, c->c};
  for (int i = 0; i < c->nsp; ++i) xd[2 + i] = c->in[i];
  spec_t sp = {.op = c->op, .n_in = 1, .n_out = c->indices ? 2 : 1, .tol = c->f16 ? 2e-3 : 1e-5};
  sp.in[0] = rand_array(c->f16 ? F16 : F32, r, xd);
  static int64_t ks[8][3], st[8][3], dl[8][3], pd[8][6];
  int slot = n_cases % 8;
  for (int i = 0; i < c->nsp; ++i) {
    ks[slot][i] = c->k[i];
    st[slot][i] = c->s[i] ? c->s[i] : 1;
    dl[slot][i] = c->d[i] ? c->d[i] : 1;
    pd[slot][i] = c->pb[i];
    pd[slot][c->nsp + i] = c->pe[i];
  }
  sp.attrs[sp.n_attrs++] = kiln_attr_make_ints("kernel_shape", c->nsp, ks[slot]);
  sp.attrs[sp.n_attrs++] = kiln_attr_make_ints("strides", c->nsp, st[slot]);
  if (c->d[0]) sp.attrs[sp.n_attrs++] = kiln_attr_make_ints("dilations", c->nsp, dl[slot]);
  if (c->auto_pad) sp.attrs[sp.n_attrs++] = kiln_attr_make_string("auto_pad", c->auto_pad);
  else sp.attrs[sp.n_attrs++] = kiln_attr_make_ints("pads", 2 * c->nsp, pd[slot]);
  sp.attrs[sp.n_attrs++] = kiln_attr_make_int("ceil_mode", c->ceil_mode);
  if (!strcmp(c->op, "AveragePool")) sp.attrs[sp.n_attrs++] = kiln_attr_make_int("count_include_pad", c->cip);
  if (!strcmp(c->op, "LpPool")) sp.attrs[sp.n_attrs++] = kiln_attr_make_int("p", c->cip);
  if (c->storage_order) sp.attrs[sp.n_attrs++] = kiln_attr_make_int("storage_order", c->storage_order);
  char what[256];
  snprintf(what, sizeof what, "%s nsp=%d c=%lld in=%lldx%lld k=%lldx%lld s=%lld d=%lld p=%lld/%lld %s ceil=%d cip=%d so=%d ind=%d%s",
           c->op, c->nsp, (long long)c->c, (long long)c->in[0], (long long)c->in[1],
           (long long)c->k[0], (long long)c->k[1], (long long)c->s[0], (long long)c->d[0],
           (long long)c->pb[0], (long long)c->pe[0], c->auto_pad ? c->auto_pad : "", c->ceil_mode,
           c->cip, c->storage_order, c->indices, c->f16 ? " f16" : "");
  check_case(&sp, what);
}

static void test_pools(void) {
  static const plc_t cases[] = {
      {"MaxPool", 2, 1, 4, {16, 16}, {3, 3}, {2, 2}, {0}, {1, 1}, {1, 1}},
      {"MaxPool", 2, 2, 3, {9, 11}, {2, 3}, {1, 2}, {0}, {0, 1}, {1, 0}},
      {"MaxPool", 2, 1, 3, {9, 11}, {3, 3}, {2, 2}, {0}, {0}, {0}, NULL, 1},
      {"MaxPool", 2, 1, 3, {10, 7}, {3, 2}, {2, 1}, {2, 2}, {1, 0}, {1, 1}, NULL, 0, 0, 0, 1},
      {"MaxPool", 2, 1, 2, {7, 8}, {3, 3}, {2, 2}, {0}, {1, 1}, {1, 1}, NULL, 1, 0, 1, 1},
      {"MaxPool", 1, 2, 3, {13}, {4}, {3}, {0}, {2}, {1}, NULL, 0, 0, 0, 1},
      {"MaxPool", 3, 1, 2, {5, 6, 7}, {2, 3, 2}, {1, 2, 2}, {0}, {1, 1, 0}, {0, 1, 1}, NULL, 0, 0, 0, 1},
      {"MaxPool", 2, 1, 2, {8, 9}, {3, 3}, {1, 1}, {0}, {0}, {0}, "SAME_UPPER"},
      {"MaxPool", 2, 1, 2, {8, 9}, {2, 2}, {2, 2}, {0}, {0}, {0}, "SAME_LOWER", 0, 0, 0, 0, true},
      {"AveragePool", 2, 1, 4, {16, 15}, {3, 3}, {2, 2}, {0}, {1, 1}, {1, 1}},
      {"AveragePool", 2, 1, 4, {16, 15}, {3, 3}, {2, 2}, {0}, {1, 1}, {1, 1}, NULL, 0, 1},
      {"AveragePool", 2, 2, 3, {7, 9}, {3, 2}, {2, 2}, {0}, {1, 0}, {1, 1}, NULL, 1, 1},
      {"AveragePool", 2, 2, 3, {7, 9}, {3, 2}, {2, 2}, {0}, {1, 0}, {1, 1}, NULL, 1, 0},
      {"AveragePool", 1, 1, 3, {12}, {5}, {1}, {0}, {2}, {2}, NULL, 0, 0},
      {"AveragePool", 3, 1, 2, {4, 5, 6}, {2, 2, 3}, {2, 1, 2}, {0}, {0, 1, 1}, {1, 0, 1}, NULL, 1, 0},
      {"AveragePool", 2, 1, 2, {6, 6}, {3, 3}, {1, 1}, {0}, {0}, {0}, "SAME_UPPER", 0, 0},
      {"AveragePool", 2, 1, 2, {6, 6}, {2, 2}, {2, 2}, {2, 2}, {1, 1}, {1, 1}, NULL, 0, 0},
      {"LpPool", 2, 1, 4, {16, 15}, {3, 3}, {2, 2}, {0}, {1, 1}, {1, 1}, NULL, 0, 2},
      {"LpPool", 2, 2, 3, {7, 9}, {3, 2}, {2, 2}, {0}, {1, 0}, {1, 1}, NULL, 1, 1},
      {"LpPool", 1, 1, 3, {12}, {5}, {1}, {0}, {2}, {2}, NULL, 0, 3},
      {"LpPool", 3, 1, 2, {4, 5, 6}, {2, 2, 3}, {2, 1, 2}, {0}, {0, 1, 1}, {1, 0, 1}, NULL, 0, 4},
      {"LpPool", 2, 1, 2, {6, 6}, {3, 3}, {1, 1}, {0}, {0}, {0}, "SAME_UPPER", 0, 2, 0, 0, true},
      {"LpPool", 2, 1, 2, {6, 6}, {2, 2}, {2, 2}, {2, 2}, {1, 1}, {1, 1}, NULL, 0, 2},
  };
  for (int i = 0; i < NELEM(cases); ++i) pool_case(&cases[i]);
  for (int f = 0; f < 2; ++f) {
    spec_t sp = {.op = "GlobalAveragePool", .n_in = 1, .n_out = 1, .tol = f ? 2e-3 : 1e-5};
    sp.in[0] = f ? RAND(F16, 2, 3, 9, 10) : RAND(F32, 2, 5, 7, 7);
    check_case(&sp, f ? "GlobalAveragePool f16 [2,3,9,10]" : "GlobalAveragePool [2,5,7,7]");
  }
  spec_t sp = {.op = "GlobalAveragePool", .n_in = 1, .n_out = 1};
  sp.in[0] = RAND(F32, 1, 3, 5);
  check_case(&sp, "GlobalAveragePool [1,3,5]");
  spec_t spc = {.op = "GlobalAveragePool", .n_in = 1, .n_out = 1, .const_mask = 1u};
  spc.in[0] = RAND(F32, 1, 4, 9, 9);
  check_case(&spc, "GlobalAveragePool of a constant (views of a constant buffer)");
  spec_t sp3 = {.op = "GlobalAveragePool", .n_in = 1, .n_out = 1};
  sp3.in[0] = RAND(F32, 1, 2, 3, 4, 5);
  check_case(&sp3, "GlobalAveragePool [1,2,3,4,5]");
  /* GlobalMaxPool: short planes, 16-lane planes, f16, one blocked plane */
  static const int64_t gm[4][4] = {{2, 3, 1, 5}, {2, 5, 7, 7}, {1, 3, 9, 10}, {1, 2, 300, 300}};
  for (int i = 0; i < 4; ++i) {
    spec_t g = {.op = "GlobalMaxPool", .n_in = 1, .n_out = 1};
    g.in[0] = rand_array(i == 2 ? F16 : F32, 4, gm[i]);
    char what[64];
    snprintf(what, sizeof what, "GlobalMaxPool case %d", i);
    check_case(&g, what);
  }
}

/* ---- norms, softmax, reductions ------------------------------------------------ */

static void test_batchnorm(void) {
  for (int c = 0; c < 3; ++c) {
    spec_t sp = {.op = "BatchNormalization", .n_in = 5, .n_out = 1, .tol = c == 2 ? 2e-3 : 1e-5};
    kiln_dtype_t t = c == 2 ? F16 : F32;
    sp.in[0] = c == 1 ? RAND(t, 2, 3, 5) : RAND(t, 2, 4, 5, 7);
    int64_t C = c == 1 ? 3 : 4;
    for (int i = 1; i < 5; ++i) sp.in[i] = rand_array(t, 1, DIMS(C));
    /* variances must be positive */
    for (int64_t k = 0; k < C; ++k)
      kiln_store_f64(t, sp.in[4].data, (size_t)k, fabs(kiln_load_f64(t, sp.in[4].data, (size_t)k)) + 0.1);
    sp.const_mask = c == 1 ? 0u : 30u;
    sp.attrs[sp.n_attrs++] = kiln_attr_make_float("epsilon", 1e-3f);
    check_case(&sp, c == 0 ? "BatchNormalization const" : c == 1 ? "BatchNormalization runtime" : "BatchNormalization f16");
  }
}

static void test_layernorm(void) {
  static const struct {
    int rank;
    int64_t d[4];
    int axis, srank, brank, nout;
    uint32_t mask;
  } cases[] = {
      {2, {5, 40}, -1, 1, 1, 1, 6u},   {3, {2, 3, 70}, -1, 1, 1, 3, 0u},
      {3, {2, 3, 8}, 1, 2, 1, 3, 6u},  {3, {2, 3, 8}, 1, 2, 2, 1, 0u},
      {4, {2, 2, 3, 4}, 2, 1, 0, 2, 0u}, {2, {3, 100}, 0, 2, 2, 3, 2u},
  };
  for (int i = 0; i < NELEM(cases); ++i) {
    spec_t sp = {.op = "LayerNormalization", .opset = 17, .n_in = cases[i].brank ? 3 : 2,
                 .n_out = cases[i].nout, .tol = 2e-5};
    sp.in[0] = rand_array(F32, cases[i].rank, cases[i].d);
    int ax = cases[i].axis < 0 ? cases[i].axis + cases[i].rank : cases[i].axis;
    int64_t sd[4];
    int sr = cases[i].srank;
    for (int k = 0; k < sr; ++k) sd[k] = cases[i].d[cases[i].rank - sr + k];
    if (sr > 1 && i == 3) sd[0] = 1; /* broadcast along the first normalised dim */
    sp.in[1] = rand_array(F32, sr, sd);
    if (cases[i].brank) {
      int64_t bd[4];
      for (int k = 0; k < cases[i].brank; ++k) bd[k] = cases[i].d[cases[i].rank - cases[i].brank + k];
      sp.in[2] = rand_array(F32, cases[i].brank, bd);
    }
    sp.const_mask = cases[i].mask;
    sp.attrs[sp.n_attrs++] = kiln_attr_make_int("axis", cases[i].axis);
    sp.attrs[sp.n_attrs++] = kiln_attr_make_float("epsilon", 1e-4f);
    char what[96];
    snprintf(what, sizeof what, "LayerNormalization case %d (axis %d)", i, ax);
    check_case(&sp, what);
  }
}

static void test_softmax(void) {
  static const struct {
    const char* op;
    int64_t opset;
    int rank;
    int64_t d[4];
    int axis; /* 99: default */
  } cases[] = {
      {"Softmax", 13, 2, {3, 1000}, 99},   {"Softmax", 13, 3, {2, 7, 5}, 1},
      {"Softmax", 13, 3, {2, 7, 5}, 0},    {"Softmax", 11, 3, {2, 7, 5}, 99},
      {"Softmax", 11, 3, {2, 7, 5}, 2},    {"Softmax", 11, 3, {2, 7, 5}, 0},
      {"LogSoftmax", 13, 2, {4, 70}, 99},  {"LogSoftmax", 13, 4, {2, 3, 4, 5}, 1},
      {"LogSoftmax", 11, 3, {2, 7, 5}, 1}, {"Softmax", 13, 1, {17}, 0},
  };
  for (int i = 0; i < NELEM(cases); ++i) {
    spec_t sp = {.op = cases[i].op, .opset = cases[i].opset, .n_in = 1, .n_out = 1, .tol = 2e-6};
    sp.in[0] = rand_array(F32, cases[i].rank, cases[i].d);
    if (cases[i].axis != 99) sp.attrs[sp.n_attrs++] = kiln_attr_make_int("axis", cases[i].axis);
    char what[96];
    snprintf(what, sizeof what, "%s opset %lld case %d", cases[i].op, (long long)cases[i].opset, i);
    check_case(&sp, what);
  }
}

static void reduce_case(const char* op, int64_t opset, kiln_dtype_t t, int rank, const int64_t* d,
                        int naxes, const int64_t* axes, int keep, int noop, bool axes_input) {
  spec_t sp = {.op = op, .opset = opset, .n_in = axes_input ? 2 : 1, .n_out = 1, .tol = 1e-5};
  sp.in[0] = rand_array(t, rank, d);
  if (axes_input) {
    kiln_shape_t s = kiln_shape_make(1, DIMS(naxes));
    kiln_status_t st = kiln_array_alloc(A(), I64, &s, &sp.in[1]);
    KILN_ASSERT(!st);
    for (int i = 0; i < naxes; ++i) ((int64_t*)sp.in[1].data)[i] = axes[i];
    sp.const_mask = 2u;
  } else if (naxes > 0) {
    sp.attrs[sp.n_attrs++] = kiln_attr_make_ints("axes", naxes, axes);
  }
  sp.attrs[sp.n_attrs++] = kiln_attr_make_int("keepdims", keep);
  if (noop) sp.attrs[sp.n_attrs++] = kiln_attr_make_int("noop_with_empty_axes", 1);
  char what[128];
  snprintf(what, sizeof what, "%s opset %lld %s rank %d naxes %d keep %d noop %d", op,
           (long long)opset, kiln_dtype_name(t), rank, naxes, keep, noop);
  check_case(&sp, what);
}

static void test_reduce(void) {
  /* ints: the kinds with exact integer results (L2, LogSum, LogSumExp are
   * float only) */
  static const struct {
    const char* op;
    bool ints;
  } ops[] = {{"ReduceMean", true},       {"ReduceSum", true},     {"ReduceMax", true},
             {"ReduceMin", true},        {"ReduceProd", true},    {"ReduceL1", true},
             {"ReduceL2", false},        {"ReduceSumSquare", true}, {"ReduceLogSum", false},
             {"ReduceLogSumExp", false}};
  for (int o = 0; o < NELEM(ops); ++o) {
    int64_t newset = !strcmp(ops[o].op, "ReduceSum") ? 13 : 18;
    for (int in = 0; in < 2; ++in) {
      int64_t opset = in ? newset : 11;
      reduce_case(ops[o].op, opset, F32, 4, DIMS(2, 3, 4, 5), 2, DIMS(2, 3), 1, 0, in);
      reduce_case(ops[o].op, opset, F32, 4, DIMS(2, 3, 4, 5), 1, DIMS(1), 0, 0, in);
      reduce_case(ops[o].op, opset, F32, 4, DIMS(2, 3, 4, 5), 2, DIMS(0, -2), 1, 0, in);
      reduce_case(ops[o].op, opset, F32, 3, DIMS(3, 1, 100), 1, DIMS(-1), 0, 0, in);
      reduce_case(ops[o].op, opset, F32, 3, DIMS(3, 50, 4), 0, NULL, 0, 0, in);
      if (ops[o].ints) {
        reduce_case(ops[o].op, opset, I32, 3, DIMS(3, 5, 4), 1, DIMS(1), 1, 0, in);
        reduce_case(ops[o].op, opset, I64, 3, DIMS(3, 5, 4), 1, DIMS(2), 0, 0, in);
      }
      reduce_case(ops[o].op, opset, F16, 3, DIMS(3, 5, 4), 2, DIMS(0, 2), 1, 0, in);
    }
    reduce_case(ops[o].op, newset, F32, 3, DIMS(3, 5, 4), 0, NULL, 1, 1, true);
    reduce_case(ops[o].op, 11, F32, 2, DIMS(3, 0), 1, DIMS(1), 1, 0, false);
  }
  /* LogSumExp of values near 200 (exp overflows f32 past 88): the lowering
   * subtracts the max first; every layout (rows, kept last dim, blocked). */
  static const struct {
    int rank;
    int64_t d[3];
    int64_t axis;
  } lse[] = {{2, {3, 50}, 1}, {3, {4, 30, 6}, 1}, {2, {2, 70001}, 1}, {2, {5, 7}, 0}};
  for (int i = 0; i < NELEM(lse); ++i) {
    spec_t sp = {.op = "ReduceLogSumExp", .opset = 13, .n_in = 1, .n_out = 1, .tol = 1e-5};
    sp.in[0] = rand_array(F32, lse[i].rank, lse[i].d);
    float* v = sp.in[0].data;
    for (int64_t j = 0; j < kiln_array_numel(&sp.in[0]); ++j) v[j] = 200.0f + 10.0f * v[j];
    if (i == 3) /* column 0 all -inf: the shift falls back to 0 */
      for (int j = 0; j < 35; j += 7) v[j] = -INFINITY;
    sp.attrs[sp.n_attrs++] = kiln_attr_make_ints("axes", 1, &lse[i].axis);
    char what[64];
    snprintf(what, sizeof what, "ReduceLogSumExp near 200, case %d", i);
    check_case(&sp, what);
  }
  reduce_case("ReduceMin", 18, U8, 2, DIMS(4, 9), 1, DIMS(1), 0, 0, true);
  reduce_case("ReduceMin", 18, I8, 2, DIMS(4, 9), 1, DIMS(0), 1, 0, true);
}

/* ArgMax / ArgMin / Hardmax: axes first, middle, last; integer inputs with
 * ties (rand_array's ints repeat) for select_last_index; NaNs, which count
 * as the extreme. */
static void scan_case(const char* op, int64_t opset, kiln_dtype_t t, int rank, const int64_t* d,
                      int64_t axis, int keep, int last, bool nans) {
  spec_t sp = {.op = op, .opset = opset, .n_in = 1, .n_out = 1};
  sp.in[0] = rand_array(t, rank, d);
  if (nans) {
    for (int64_t i = 0; i < kiln_array_numel(&sp.in[0]); i += 7) kiln_store_f64(t, sp.in[0].data, (size_t)i, NAN);
  }
  if (axis != 99) sp.attrs[sp.n_attrs++] = kiln_attr_make_int("axis", axis);
  if (strcmp(op, "Hardmax")) {
    sp.attrs[sp.n_attrs++] = kiln_attr_make_int("keepdims", keep);
    sp.attrs[sp.n_attrs++] = kiln_attr_make_int("select_last_index", last);
  }
  char what[128];
  snprintf(what, sizeof what, "%s opset %lld %s rank %d axis %lld keep %d last %d nans %d", op,
           (long long)opset, kiln_dtype_name(t), rank, (long long)axis, keep, last, nans);
  check_case(&sp, what);
}

static void test_argmax(void) {
  const char* ops[2] = {"ArgMax", "ArgMin"};
  for (int o = 0; o < 2; ++o) {
    for (int last = 0; last < 2; ++last) {
      scan_case(ops[o], 13, F32, 3, DIMS(4, 5, 6), 0, 1, last, false);
      scan_case(ops[o], 13, F32, 3, DIMS(4, 5, 6), -2, 0, last, false);
      scan_case(ops[o], 13, I32, 3, DIMS(4, 5, 6), 2, 1, last, false);
      scan_case(ops[o], 13, I64, 2, DIMS(3, 40), 1, 0, last, false);
      scan_case(ops[o], 13, U8, 2, DIMS(30, 3), 0, 1, last, false);
      scan_case(ops[o], 13, F16, 3, DIMS(2, 9, 3), 1, 1, last, false);
      scan_case(ops[o], 13, F32, 2, DIMS(5, 30), 1, 1, last, true);
    }
    scan_case(ops[o], 11, F32, 2, DIMS(64, 300), 1, 0, 0, false);
    scan_case(ops[o], 13, F32, 1, DIMS(1), 0, 1, 0, false);
  }
  scan_case("Hardmax", 13, F32, 3, DIMS(4, 5, 6), 99, 0, 0, false);
  scan_case("Hardmax", 13, F32, 3, DIMS(4, 5, 6), 1, 0, 0, true);
  scan_case("Hardmax", 13, F16, 2, DIMS(3, 70), 0, 0, 0, false);
  scan_case("Hardmax", 11, F32, 3, DIMS(4, 5, 6), 99, 0, 0, false);
  scan_case("Hardmax", 11, F32, 3, DIMS(4, 5, 6), 0, 0, 0, false);
}

/* InstanceNormalization / GroupNormalization: per-group parameters (GroupNorm
 * before 21) and per-channel ones, f16, constant parameters, rows past 32k
 * (statistics in blocks, three kernels), 1-D and 3-D spatial. */
static void groupnorm_case(const char* op, int64_t opset, kiln_dtype_t t, int rank, const int64_t* d,
                           int64_t groups, uint32_t const_mask) {
  const int64_t plen = groups && opset < 21 ? groups : d[1];
  spec_t sp = {.op = op, .opset = opset, .n_in = 3, .n_out = 1, .const_mask = const_mask,
               .tol = t == F16 ? 3e-3 : 2e-5};
  sp.in[0] = rand_array(t, rank, d);
  sp.in[1] = rand_array(t, 1, DIMS(plen));
  sp.in[2] = rand_array(t, 1, DIMS(plen));
  if (groups) sp.attrs[sp.n_attrs++] = kiln_attr_make_int("num_groups", groups);
  sp.attrs[sp.n_attrs++] = kiln_attr_make_float("epsilon", 1e-3f);
  char what[128];
  snprintf(what, sizeof what, "%s opset %lld %s rank %d groups %lld const %u", op, (long long)opset,
           kiln_dtype_name(t), rank, (long long)groups, const_mask);
  check_case(&sp, what);
}

static void test_groupnorm(void) {
  groupnorm_case("InstanceNormalization", 6, F32, 4, DIMS(2, 3, 5, 7), 0, 0);
  groupnorm_case("InstanceNormalization", 6, F32, 3, DIMS(2, 4, 100), 0, 6u);
  groupnorm_case("InstanceNormalization", 6, F16, 4, DIMS(1, 3, 9, 9), 0, 0);
  groupnorm_case("InstanceNormalization", 6, F32, 4, DIMS(1, 2, 300, 300), 0, 0);
  groupnorm_case("InstanceNormalization", 6, F32, 5, DIMS(1, 2, 3, 4, 5), 0, 0);
  for (int v = 0; v < 2; ++v) {
    const int64_t opset = v ? 21 : 18;
    groupnorm_case("GroupNormalization", opset, F32, 4, DIMS(2, 6, 5, 7), 3, 0);
    groupnorm_case("GroupNormalization", opset, F32, 4, DIMS(2, 6, 5, 7), 1, 6u);
    groupnorm_case("GroupNormalization", opset, F32, 3, DIMS(3, 8, 33), 8, 0);
    groupnorm_case("GroupNormalization", opset, F16, 4, DIMS(1, 4, 6, 6), 2, 0);
    groupnorm_case("GroupNormalization", opset, F32, 4, DIMS(1, 4, 200, 200), 2, 0);
  }
  /* long rows in blocks (a UNet block's shape, scaled down), f16 and
   * constant parameters on that path, and a prime row that cannot split */
  groupnorm_case("GroupNormalization", 21, F32, 4, DIMS(2, 32, 64, 64), 4, 0);
  groupnorm_case("GroupNormalization", 18, F16, 4, DIMS(1, 8, 64, 64), 2, 6u);
  groupnorm_case("InstanceNormalization", 6, F32, 3, DIMS(1, 2, 32771), 0, 0);
}

/* LpNormalization (p 1 and 2, first / middle / last axis, a row past 64k),
 * MeanVarianceNormalization (default and other axes), LRN (odd and even
 * windows, a window wider than C, 1-D and 2-D spatial). */
static void one_in_case(const char* op, int64_t opset, kiln_dtype_t t, int rank, const int64_t* d,
                        int n_attrs, const kiln_attr_t* attrs, const char* what) {
  spec_t sp = {.op = op, .opset = opset, .n_in = 1, .n_out = 1, .tol = t == F16 ? 3e-3 : 2e-5};
  sp.in[0] = rand_array(t, rank, d);
  for (int i = 0; i < n_attrs; ++i) sp.attrs[sp.n_attrs++] = attrs[i];
  check_case(&sp, what);
}

static void test_more_norms(void) {
  for (int p = 1; p <= 2; ++p) {
    for (int64_t axis = -1; axis <= 1; ++axis) {
      kiln_attr_t at[2] = {kiln_attr_make_int("p", p), kiln_attr_make_int("axis", axis)};
      char what[64];
      snprintf(what, sizeof what, "LpNormalization p %d axis %lld", p, (long long)axis);
      one_in_case("LpNormalization", 1, F32, 3, DIMS(4, 6, 70), 2, at, what);
    }
    kiln_attr_t at[1] = {kiln_attr_make_int("p", p)};
    one_in_case("LpNormalization", 1, F32, 2, DIMS(2, 100003), 1, at, "LpNormalization long rows");
    one_in_case("LpNormalization", 1, F16, 2, DIMS(3, 40), 1, at, "LpNormalization f16");
  }
  one_in_case("MeanVarianceNormalization", 13, F32, 4, DIMS(3, 4, 5, 6), 0, NULL, "MVN default axes");
  one_in_case("MeanVarianceNormalization", 13, F16, 4, DIMS(2, 3, 4, 5), 0, NULL, "MVN f16");
  {
    kiln_attr_t at[1] = {kiln_attr_make_ints("axes", 2, DIMS(1, -1))};
    one_in_case("MeanVarianceNormalization", 13, F32, 3, DIMS(3, 20, 30), 1, at, "MVN axes [1,-1]");
  }
  {
    kiln_attr_t at[1] = {kiln_attr_make_ints("axes", 1, DIMS(0))};
    one_in_case("MeanVarianceNormalization", 13, F32, 3, DIMS(50, 2, 3), 1, at, "MVN axes [0]");
  }
  static const int64_t sizes[4] = {1, 3, 4, 9};
  for (int i = 0; i < 4; ++i) {
    kiln_attr_t at[4] = {kiln_attr_make_int("size", sizes[i]), kiln_attr_make_float("alpha", 0.5f),
                         kiln_attr_make_float("beta", 0.7f), kiln_attr_make_float("bias", 1.5f)};
    char what[64];
    snprintf(what, sizeof what, "LRN size %lld", (long long)sizes[i]);
    one_in_case("LRN", 13, F32, 4, DIMS(2, 7, 5, 6), 4, at, what);
    one_in_case("LRN", 13, F32, 3, DIMS(1, 5, 33), 4, at, what);
  }
  kiln_attr_t lrn_f16[1] = {kiln_attr_make_int("size", 5)};
  one_in_case("LRN", 13, F16, 4, DIMS(1, 8, 4, 4), 1, lrn_f16, "LRN f16 defaults");
}

/* ---- variants the CPU lowering does not do: clear UNSUPPORTED errors ------------- */

static kiln_status_t plan_only(spec_t* sp) {
  kiln_graph_t* g = NULL;
  kiln_status_t st = build(sp, &g);
  if (!st) {
    kiln_plan_options_t po = {KILN_TARGET_CLASS_CPU, 2, 0, 0, 0, 0};
    kiln_plan_t* p = NULL;
    st = kiln_plan_build(g, &po, A(), &p);
    kiln_plan_destroy(p);
    kiln_graph_destroy(g);
  }
  for (int i = 0; i < sp->n_in; ++i)
    if (sp->in[i].dtype != NONE) kiln_array_free(A(), &sp->in[i]);
  return st;
}

/* (last: its random inputs do not shift the other cases') MatMul reading A
 * in place (K <= 512) with the partial M tile computed as a full one over
 * the last rows, overlapping the tile before it, split over M and over N,
 * and per head (batched); Softmax over rows of whole 16-lane vectors. */
static void test_matmul_overlap_softmax_rows(void) {
  matmul_case(F32, 2, DIMS(115, 256), 2, DIMS(256, 40), true);
  matmul_case(F32, 2, DIMS(128, 64), 2, DIMS(64, 512), true);
  matmul_case(F32, 3, DIMS(4, 77, 64), 3, DIMS(4, 64, 77), false);
  static const int64_t rows[][3] = {{37, 128, 0}, {2, 3, 64}};
  for (int i = 0; i < NELEM(rows); ++i) {
    spec_t sp = {.op = "Softmax", .opset = 13, .n_in = 1, .n_out = 1, .tol = 2e-6};
    sp.in[0] = rows[i][2] ? rand_array(F32, 3, rows[i]) : rand_array(F32, 2, rows[i]);
    char what[64];
    snprintf(what, sizeof what, "Softmax rows case %d", i);
    check_case(&sp, what);
  }
}

/* (after the cases above: its random inputs do not shift theirs) Softmax
 * over contiguous rows (lowering/lower_nn_norm.c, smr_row): rows that are
 * not a multiple of the 32 lanes or of any vector width, a row of one
 * vector, axis 0 of a 2-D input (the strided form), and rows of large,
 * very negative, -inf, +inf and NaN values. */
static void test_softmax_rows(void) {
  static const int64_t ns[] = {16, 17, 31, 33, 45, 100, 127, 130, 1000, 1003};
  for (int i = 0; i < NELEM(ns); ++i) {
    spec_t sp = {.op = "Softmax", .opset = 13, .n_in = 1, .n_out = 1, .tol = 2e-6};
    sp.in[0] = RAND(F32, 3, ns[i]);
    char what[64];
    snprintf(what, sizeof what, "Softmax rows of %lld", (long long)ns[i]);
    check_case(&sp, what);
  }
  {
    spec_t sp = {.op = "Softmax", .opset = 13, .n_in = 1, .n_out = 1, .tol = 2e-6};
    sp.in[0] = RAND(F32, 40, 33);
    sp.attrs[sp.n_attrs++] = kiln_attr_make_int("axis", 0);
    check_case(&sp, "Softmax [40,33] axis 0");
  }
  /* row 0: large values (most exps underflow); row 1: -inf in places;
   * row 2: all -inf (NaN, as the reference); row 3: +inf (NaN); row 4: a
   * NaN; row 5: values near the f32 limits */
  spec_t sp = {.op = "Softmax", .opset = 13, .n_in = 1, .n_out = 1, .tol = 2e-6};
  sp.in[0] = RAND(F32, 6, 37);
  float* x = sp.in[0].data;
  for (int j = 0; j < 37; ++j) {
    x[j] *= 1e4f;
    if (j % 5 == 0) x[37 + j] = -INFINITY;
    x[2 * 37 + j] = -INFINITY;
    x[5 * 37 + j] = j % 2 ? 3e38f : -3e38f;
  }
  x[3 * 37 + 20] = INFINITY;
  x[4 * 37 + 36] = NAN;
  check_case(&sp, "Softmax rows of large, -inf, +inf and NaN values");
}

/* (after the cases above) Depthwise convs on small planes (the padded-plane
 * kernel of lower_nn_conv.c, conv_depthwise_small): a 7x7 plane, odd sizes,
 * asymmetric pads and windows, no padding (input rows past the window),
 * pads wider than the window, a 1x1 output, multiplier 2, f16, rows of 64
 * (the largest it takes) and 65 (the row kernel), planes taken four and two
 * at a time. */
static void test_dw_small_planes(void) {
  static const cvc_t cases[] = {
      {2, 1, 16, 16, 16, {7, 7}, {3, 3}, {1, 1}, {1, 1}, {1, 1}, {1, 1}, NULL, true, true},
      {2, 2, 5, 5, 5, {9, 11}, {3, 2}, {1, 1}, {1, 1}, {2, 0}, {0, 1}, NULL, true, true},
      {2, 1, 4, 4, 4, {5, 11}, {3, 3}, {1, 1}, {1, 1}, {0, 0}, {0, 0}, NULL, false, true},
      {2, 1, 3, 3, 3, {4, 4}, {3, 3}, {1, 1}, {1, 1}, {3, 3}, {3, 3}, NULL, true, false},
      {2, 1, 6, 6, 6, {3, 3}, {3, 3}, {1, 1}, {1, 1}, {0, 0}, {0, 0}, NULL, true, true},
      {2, 1, 3, 6, 3, {13, 10}, {5, 5}, {1, 1}, {1, 1}, {2, 2}, {2, 2}, NULL, true, true},
      {2, 1, 4, 4, 4, {14, 14}, {3, 3}, {1, 1}, {1, 1}, {1, 1}, {1, 1}, NULL, true, true, true},
      {2, 1, 2, 2, 2, {5, 64}, {3, 3}, {1, 1}, {1, 1}, {1, 1}, {1, 1}, NULL, true, true},
      {2, 1, 2, 2, 2, {5, 65}, {3, 3}, {1, 1}, {1, 1}, {1, 1}, {1, 1}, NULL, true, true},
      /* planes of at most 64 outputs four and two at a time (multiplier
       * 2; a batch of 2 whose pairs cross images) */
      {2, 1, 4, 8, 4, {6, 5}, {3, 3}, {1, 1}, {1, 1}, {1, 1}, {1, 1}, NULL, true, true},
      {2, 2, 3, 3, 3, {5, 5}, {3, 3}, {1, 1}, {1, 1}, {1, 1}, {1, 1}, NULL, false, true},
  };
  for (int i = 0; i < NELEM(cases); ++i) conv_case("Conv", &cases[i]);
}

static void test_errors(void) {
  {
    spec_t sp = {.op = "Gemm", .n_in = 2, .n_out = 1};
    sp.in[0] = RAND(I32, 3, 4);
    sp.in[1] = RAND(I32, 4, 5);
    sp.attrs[sp.n_attrs++] = kiln_attr_make_float("alpha", 2.0f);
    CHECK_ERR(plan_only(&sp), KILN_UNSUPPORTED, "alpha");
  }
  {
    spec_t sp = {.op = "Conv", .n_in = 2, .n_out = 1, .const_mask = 2u};
    sp.in[0] = RAND(F32, 1, 1, 70, 70);
    sp.in[1] = RAND(F32, 1, 1, 70, 70);
    CHECK_ERR(plan_only(&sp), KILN_UNSUPPORTED, "taps");
  }
  {
    spec_t sp = {.op = "ReduceSum", .opset = 13, .n_in = 2, .n_out = 1};
    sp.in[0] = RAND(F32, 2, 3);
    sp.in[1] = RAND(I64, 1);
    sp.attrs[sp.n_attrs++] = kiln_attr_make_int("keepdims", 1);
    /* run-time axes: no static output shape, refused before lowering */
    CHECK_ERR(plan_only(&sp), -1, "static");
  }
  {
    spec_t sp = {.op = "LRN", .opset = 13, .n_in = 1, .n_out = 1};
    sp.in[0] = RAND(F32, 1, 40, 2, 2);
    sp.attrs[sp.n_attrs++] = kiln_attr_make_int("size", 33);
    CHECK_ERR(plan_only(&sp), KILN_UNSUPPORTED, "LRN: size 33");
  }
}

int main(void) {
  const char* nc = getenv("KILN_TEST_NO_CPU");
  use_cpu = !(nc && *nc && strcmp(nc, "0"));
  RUN(test_matmul);
  RUN(test_gemm);
  RUN(test_conv);
  RUN(test_conv_transpose);
  RUN(test_conv_const_input);
  RUN(test_pools);
  RUN(test_batchnorm);
  RUN(test_layernorm);
  RUN(test_softmax);
  RUN(test_reduce);
  RUN(test_argmax);
  RUN(test_groupnorm);
  RUN(test_more_norms);
  RUN(test_errors);
  RUN(test_matmul_overlap_softmax_rows);
  RUN(test_softmax_rows);
  RUN(test_dw_small_planes);
  printf("%d cases\n", n_cases);
  return kiln_test_finish();
}
