/* Element-wise kernels on Vulkan read and write 4 floats an invocation as
 * vec4 texels (issue 23): lowering's GPU schedule splits the innermost dim
 * by kiln_target_t.ew_lanes and vectorizes the 4 lanes, the GLSL printer
 * prints such loops through samplerBuffer / imageBuffer views
 * (targets/cfamily printer_vec.c, vec_texels).
 *
 * Each model is compiled for Vulkan through the compiler API; its program
 * text is checked for the texel path where the shapes allow it (innermost
 * extent a multiple of 4: an imageStore, and no texel declaration where
 * they do not; an output the kernel never reads as a storage buffer of
 * vec4s) and the session's output is compared with the reference
 * interpreter: Relu, Sigmoid, Gelu, Relu after an Add of a per-channel bias
 * ([C, 1, 1], a broadcast scalar per texel), an Add of a row ([W], read as
 * texels), LeakyRelu with an odd innermost extent (printed scalar), an Add
 * broadcasting along the innermost dim ([.., 1]: texel output, scalar
 * reads), Where with a bool condition (not f32: printed scalar), and
 * Softmax over rows of 200 and 40 floats (texels) and of 13 (scalar), and
 * ReduceSum / ReduceMean / ReduceMax over strided axes (4 outputs an
 * invocation as texels; 6 columns or a 7000-long group: scalar), Softmax /
 * LogSoftmax over axis 1 (4 columns an invocation). fp16 plans (f16
 * activations) read and write their f16 parameters as rgba16f texel images
 * (4 halves a texel, f32 math; the device binds R16G16B16A16_SFLOAT views
 * where the SPIR-V declares rgba16f, runtime/vulkan/vulkan_texel.c): the
 * same shapes print the path or not, and with the device's f16 texels
 * hidden (KILN_VULKAN_FEATURES=no-texel-f16) they print scalar. Skipped
 * where the Vulkan target is not built. */
#include "bad_model_util.h" /* first: it defines _GNU_SOURCE */

#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "compiler/ref_exec.h"
#include "frontend/onnx.h"
#include "kiln/compiler.h"
#include "kiln/runtime.h"
#include "runtime/module_file.h"
#include "runtime/program.h"
#include "targets/registry.h"
#include "testing.h"
#include "compile_util.h"

static char g_dir[512];

static kiln_allocator_t al(void) { return kiln_allocator_system(); }

typedef struct ew_case_s {
  const char* name;
  int rank;
  int64_t x[4];
  /* the second operand's shape (rank 0: none) */
  int brank;
  int64_t b[4];
  bool vec4; /* the texel path is expected */
  /* Reduce*: the axes (keepdims 0) */
  int naxes;
  int64_t axes[4];
  bool fp16; /* --precision fp16: f16 activations (rgba16f texels) */
} ew_case_t;

static void seeded(float* v, int64_t n, uint32_t seed) {
  for (int64_t i = 0; i < n; ++i) {
    seed = seed * 1664525u + 1013904223u;
    v[i] = (float)((seed >> 8) & 0xffff) / 8192.0f - 4.0f;
  }
}

static int64_t numel(int rank, const int64_t* d) {
  int64_t n = 1;
  for (int i = 0; i < rank; ++i) n *= d[i];
  return n;
}

static bool model_write(const char* path, const ew_case_t* c) {
  bm_model_t b;
  bm_init(&b, 20);
  b.g.input[b.g.n_input++] = bm_value(&b, "X", BM_F32, c->rank, c->x, NULL);
  if (c->brank) {
    const int64_t n = numel(c->brank, c->b);
    float* v = bm_alloc(&b, sizeof(float) * (size_t)n);
    seeded(v, n, 77u);
    bm_initializer(&b, "B", BM_F32, c->brank, c->b, v, sizeof(float) * (size_t)n);
  }
  if (!strcmp(c->name, "relu")) {
    bm_node(&b, "Relu", "relu", "X", "Y");
  } else if (!strcmp(c->name, "sigmoid")) {
    bm_node(&b, "Sigmoid", "sig", "X", "Y");
  } else if (!strcmp(c->name, "gelu")) {
    bm_node(&b, "Gelu", "gelu", "X", "Y");
  } else if (!strcmp(c->name, "softmax")) {
    bm_node(&b, "Softmax", "softmax", "X", "Y");
  } else if (!strcmp(c->name, "softmax_ax1") || !strcmp(c->name, "logsoftmax_ax1")) {
    Onnx__NodeProto* n = bm_node(&b, c->name[0] == 'l' ? "LogSoftmax" : "Softmax", "softmax", "X", "Y");
    bm_attr_int(&b, n, "axis", 1);
  } else if (!strcmp(c->name, "cast16")) { /* Y an f16 output */
    Onnx__NodeProto* n = bm_node(&b, "Cast", "cast", "X", "Y");
    bm_attr_int(&b, n, "to", BM_F16);
  } else if (!strcmp(c->name, "leaky")) {
    bm_node(&b, "LeakyRelu", "leaky", "X", "Y");
  } else if (!strncmp(c->name, "reduce_", 7)) {
    const int64_t na = c->naxes;
    bm_init_i64(&b, "A", 1, &na, c->axes);
    const char* op = !strcmp(c->name, "reduce_sum") ? "ReduceSum" : !strcmp(c->name, "reduce_mean") ? "ReduceMean" : "ReduceMax";
    Onnx__NodeProto* n = bm_node(&b, op, "red", "X,A", "Y");
    bm_attr_int(&b, n, "keepdims", 0);
  } else if (!strcmp(c->name, "where")) {
    float zero = 0.0f;
    bm_initializer(&b, "Z", BM_F32, 0, NULL, &zero, sizeof zero);
    bm_node(&b, "Less", "less", "X,Z", "C");
    bm_node(&b, "Where", "where", "C,B,X", "Y");
  } else { /* add, add_relu */
    bm_node(&b, "Add", "add", "X,B", !strcmp(c->name, "add_relu") ? "H" : "Y");
    if (!strcmp(c->name, "add_relu")) bm_node(&b, "Relu", "relu", "H", "Y");
  }
  /* fp16: a Softmax after the op, so that Y is an f16 activation between
   * two kernels (a lone op reads and writes the model's f32 tensors) */
  if (c->fp16) bm_node(&b, "Softmax", "after", "Y", "Z");
  if (!strcmp(c->name, "cast16")) b.g.output[b.g.n_output++] = bm_value(&b, "Y", BM_F16, c->rank, c->x, NULL);
  else bm_output(&b, c->fp16 ? "Z" : "Y");
  const bool ok = bm_write(&b, path);
  bm_free(&b);
  return ok;
}

static void check_case(const ew_case_t* c) {
  char path[700];
  snprintf(path, sizeof path, "%s/ew_%s_%d_%d_%d%s.onnx", g_dir, c->name, (int)c->x[c->rank - 1], (int)c->x[1],
           (int)c->axes[0], c->fp16 ? "_h" : "");
  const bool written = model_write(path, c);
  CHECK_MSG(written, "%s: written", c->name);
  if (!written) return;
  uint8_t* bytes = NULL;
  size_t len = 0;
  const char* const opts[] = {"target", "vulkan", c->fp16 ? "precision" : NULL, "fp16", NULL};
  if (!CHECK_OK(tc_compile(path, opts, &bytes, &len)) || !bytes) return;
  kiln_program_t* p = NULL;
  if (CHECK_OK(kiln_module_parse(bytes, len, "ew.kiln", al(), &p))) {
    const char* t = p->code.text ? p->code.text : "";
    /* an f32 output the kernel never reads is a storage buffer of vec4s
     * (the printer's tex_sdecl: lavapipe stores those faster than texels),
     * one it reads too an rgba32f image */
    const bool vbuf = !c->fp16 && strstr(t, " { vec4 ") != NULL;
    const bool texel = vbuf || (strstr(t, "imageStore(") != NULL &&
                                strstr(t, c->fp16 ? "rgba16f) uniform" : "rgba32f) uniform") != NULL);
    if (c->vec4 && !c->fp16 && !c->naxes)
      CHECK_MSG(vbuf && !strstr(t, "rgba32f) uniform"), "%s %lld: a written-only output not a vec4 buffer", c->name,
                (long long)c->x[c->rank - 1]);
    /* fp16: the f16 texels (f32 parameters may still be texels) */
    const bool any = c->fp16 ? strstr(t, "rgba16f") != NULL
                             : strstr(t, "imageBuffer") != NULL || strstr(t, "samplerBuffer") != NULL || vbuf;
    if (c->vec4)
      CHECK_MSG(texel, "%s %lld: the vec4 texel path was not taken", c->name, (long long)c->x[c->rank - 1]);
    else
      CHECK_MSG(!any, "%s %lld: texel views where the shape does not allow them", c->name,
                (long long)c->x[c->rank - 1]);
    /* Softmax rows store y once (the sum of exp taken from x), never read it
     * back (lower_nn_norm.c nn_softmax_emit: exp_twice) */
    if (c->vec4 && !c->fp16 && !strcmp(c->name, "softmax"))
      CHECK_MSG(!strstr(t, "imageLoad("), "softmax %lld: y read back", (long long)c->x[c->rank - 1]);
  }
  kiln_program_destroy(p);
  kiln_module_t* m = NULL;
  kiln_device_t* d = NULL;
  kiln_session_t* s = NULL;
  kiln_graph_t* g = NULL;
  kiln_device_open_options_t o = {0, true, NULL};
  kiln_array_t x, want, got;
  memset(&x, 0, sizeof x);
  memset(&want, 0, sizeof want);
  memset(&got, 0, sizeof got);
  kiln_shape_t xs = kiln_shape_make(c->rank, c->x);
  if (CHECK_OK(kiln_array_alloc(al(), KILN_DTYPE_F32, &xs, &x))) seeded((float*)x.data, (int64_t)(x.nbytes / 4), 5u);
  if (x.data && CHECK_OK(kiln_module_load_memory(bytes, len, "ew.kiln", al(), &m)) &&
      CHECK_OK(kiln_device_open("vulkan", &o, al(), &d)) && CHECK_OK(kiln_session_create(m, d, NULL, &s)) &&
      CHECK_OK(kiln_onnx_parse_model(path, NULL, al(), &g)) && CHECK_OK(kiln_graph_prepare(g)) &&
      CHECK_OK(kiln_ref_run(g, &x, NULL, &want)) && CHECK_OK(kiln_session_run(s, &x, &got))) {
    double worst = 0;
    const bool same = got.nbytes == want.nbytes && (c->naxes || got.nbytes == x.nbytes) && want.nbytes > 0;
    for (size_t i = 0; same && i < want.nbytes / 4; ++i) {
      const double w = ((float*)want.data)[i], e = fabs(((float*)got.data)[i] - w) / (1.0 + fabs(w));
      if (!(e <= worst)) worst = e; /* NaN counts */
    }
    /* fp16: x and y rounded to halves (2^-11 relative each) */
    CHECK_MSG(same && worst <= (c->fp16 ? 4e-3 : 1e-5), "%s %lld%s: max error %g", c->name,
              (long long)c->x[c->rank - 1], c->fp16 ? " fp16" : "", worst);
  }
  kiln_graph_destroy(g);
  kiln_session_destroy(s);
  kiln_device_release(d);
  kiln_module_release(m);
  kiln_array_free(al(), &x);
  kiln_array_free(al(), &want);
  kiln_array_free(al(), &got);
  free(bytes);
}

static void test_unary(void) {
  static const ew_case_t cs[] = {
      {"relu", 4, {2, 3, 5, 12}, 0, {0}, true, 0, {0}, false},
      {"sigmoid", 2, {7, 20}, 0, {0}, true, 0, {0}, false},
      {"gelu", 3, {3, 5, 8}, 0, {0}, true, 0, {0}, false},
      {"relu", 1, {4100}, 0, {0}, true, 0, {0}, false},
      {"leaky", 3, {3, 5, 7}, 0, {0}, false, 0, {0}, false}, /* odd innermost extent */
  };
  for (size_t i = 0; i < sizeof cs / sizeof cs[0]; ++i) check_case(&cs[i]);
}

/* rows of 4k floats: the max and sum as vec4 lanes (16 a step, PRIVATE
 * vec4 rows), y = exp(x - max) / sum stored once as texels
 * (lowering/lower_nn_norm.c row_loop); 13 floats a row: scalar */
static void test_softmax(void) {
  static const ew_case_t cs[] = {
      {"softmax", 2, {6, 200}, 0, {0}, true, 0, {0}, false},
      {"softmax", 3, {2, 3, 40}, 0, {0}, true, 0, {0}, false},
      {"softmax", 2, {5, 13}, 0, {0}, false, 0, {0}, false},
  };
  for (size_t i = 0; i < sizeof cs / sizeof cs[0]; ++i) check_case(&cs[i]);
}

static void test_broadcast(void) {
  static const ew_case_t cs[] = {
      {"add_relu", 4, {2, 6, 5, 8}, 3, {6, 1, 1}, true, 0, {0}, false}, /* a per-channel bias */
      {"add", 3, {4, 9, 16}, 1, {16}, true, 0, {0}, false},              /* a row, read as texels */
      {"add", 3, {4, 9, 16}, 3, {4, 9, 1}, true, 0, {0}, false},         /* broadcast along the lanes */
      {"add", 3, {4, 9, 6}, 2, {9, 6}, false, 0, {0}, false},            /* 6 floats a row: scalar */
      {"where", 2, {6, 12}, 2, {6, 12}, false, 0, {0}, false},           /* a bool condition read per lane */
  };
  for (size_t i = 0; i < sizeof cs / sizeof cs[0]; ++i) check_case(&cs[i]);
}

/* Reductions over a strided axis ([kept][reduced][kept]): an invocation
 * takes 4 adjacent outputs and reads vec4 texels along the contiguous kept
 * axis while looping over the reduced one (lowering/lower_nn_reduce.c
 * reduce_per_cols); an inner extent not a multiple of 4, or a group so long
 * that the 4 lanes printed as scalars could pass lavapipe's loop limit,
 * keeps one output an invocation (scalar). */
static void test_reduce_strided(void) {
  static const ew_case_t cs[] = {
      {"reduce_sum", 3, {3, 7, 16}, 0, {0}, true, 1, {1}, false},
      {"reduce_mean", 4, {2, 5, 3, 8}, 0, {0}, true, 1, {1}, false},     /* [2][5][24] */
      {"reduce_max", 3, {4, 9, 12}, 0, {0}, true, 1, {1}, false},
      {"reduce_sum", 3, {2, 9, 256}, 0, {0}, true, 1, {1}, false},       /* 512 outputs: 8 an invocation */
      {"reduce_max", 3, {3, 5, 260}, 0, {0}, true, 1, {1}, false},       /* 260 = 65 x 4: 4 an invocation */
      {"reduce_sum", 2, {37, 20}, 0, {0}, true, 1, {0}, false},          /* no outer kept dim */
      {"reduce_sum", 4, {3, 4, 5, 8}, 0, {0}, true, 2, {0, 2}, false},   /* [3][4][5][8]: two reduced runs */
      {"reduce_max", 4, {3, 4, 5, 8}, 0, {0}, true, 2, {0, 2}, false},
      {"reduce_sum", 3, {4, 9, 6}, 0, {0}, false, 1, {1}, false},        /* 6 columns: scalar */
      {"reduce_mean", 3, {2, 7000, 8}, 0, {0}, false, 1, {1}, false},    /* 7000 x 5 steps past 32767 */
  };
  for (size_t i = 0; i < sizeof cs / sizeof cs[0]; ++i) check_case(&cs[i]);
}

/* Softmax / LogSoftmax over a strided axis: an invocation per 4 adjacent
 * columns of the inner extent as texels, or per column where 4 does not
 * divide it (lower_nn_norm.c sm_strided); main's build gave an invocation
 * the whole [axis][inner] slab and lavapipe's loop limit refused the first
 * case (about 74,000 iterations) */
static void test_softmax_strided(void) {
  static const ew_case_t cs[] = {
      {"softmax_ax1", 3, {2, 24, 1024}, 0, {0}, true, 0, {0}, false},
      {"softmax_ax1", 3, {1, 9, 20}, 0, {0}, true, 0, {0}, false},       /* outer 1 */
      {"logsoftmax_ax1", 4, {2, 6, 3, 8}, 0, {0}, true, 0, {0}, false},
      {"softmax_ax1", 4, {3, 7, 5, 6}, 0, {0}, false, 0, {0}, false},    /* 30 columns: one an invocation */
  };
  for (size_t i = 0; i < sizeof cs / sizeof cs[0]; ++i) check_case(&cs[i]);
}

/* fp16 plans: f16 activations as rgba16f texel images where the shapes
 * allow it (the f32 rules), scalar f16 storage where not; each op's output
 * goes through a Softmax over the last axis, whose kernel reads it as f16 */
static void test_fp16(void) {
  static const ew_case_t cs[] = {
      {"relu", 4, {2, 3, 5, 12}, 0, {0}, true, 0, {0}, true},
      {"gelu", 3, {3, 5, 8}, 0, {0}, true, 0, {0}, true},
      {"add_relu", 4, {2, 6, 5, 8}, 3, {6, 1, 1}, true, 0, {0}, true}, /* an f16 per-channel bias */
      {"add", 3, {4, 9, 16}, 1, {16}, true, 0, {0}, true},              /* an f16 row, read as texels */
      {"softmax", 2, {6, 200}, 0, {0}, true, 0, {0}, true},
      {"reduce_sum", 3, {3, 7, 16}, 0, {0}, true, 1, {1}, true},
      {"softmax_ax1", 3, {1, 9, 20}, 0, {0}, true, 0, {0}, true},
      {"leaky", 3, {3, 5, 7}, 0, {0}, false, 0, {0}, true},              /* odd innermost extent */
      {"softmax", 2, {5, 13}, 0, {0}, false, 0, {0}, true},
  };
  for (size_t i = 0; i < sizeof cs / sizeof cs[0]; ++i) check_case(&cs[i]);
  /* a device without R16G16B16A16_SFLOAT storage texel buffers: the compile
   * for it keeps f16 parameters scalar (f32 ones may stay texels) */
  const char* old = getenv("KILN_VULKAN_FEATURES");
  char* keep = old ? strdup(old) : NULL;
  setenv("KILN_VULKAN_FEATURES", "no-texel-f16", 1);
  static const ew_case_t hid[] = {
      {"relu", 4, {2, 3, 5, 12}, 0, {0}, false, 0, {0}, true},
      {"softmax", 2, {6, 200}, 0, {0}, false, 0, {0}, true},
  };
  for (size_t i = 0; i < sizeof hid / sizeof hid[0]; ++i) check_case(&hid[i]);
  kiln_test_setenv("KILN_VULKAN_FEATURES", keep);
  free(keep);
}

/* |c|'s model compiled with |opts| into |bytes|; its program text must
 * hold |want| (|what|: the case's name for messages). */
static bool compiled_with(const ew_case_t* c, const char* const* opts, const char* want, const char* what,
                          uint8_t** bytes, size_t* len) {
  char path[700];
  snprintf(path, sizeof path, "%s/%s.onnx", g_dir, what);
  const bool written = model_write(path, c);
  CHECK_MSG(written, "%s: written", what);
  if (!written || !CHECK_OK(tc_compile(path, opts, bytes, len)) || !*bytes) return false;
  kiln_program_t* p = NULL;
  if (CHECK_OK(kiln_module_parse(*bytes, *len, what, al(), &p)))
    CHECK_MSG(p->code.text && strstr(p->code.text, want), "%s: the program lacks '%s'", what, want);
  kiln_program_destroy(p);
  return true;
}

/* The module |bytes| run on the Vulkan device with input |x| into |got|. */
static bool run_module(const uint8_t* bytes, size_t len, const char* what, const kiln_array_t* x, kiln_array_t* got) {
  kiln_module_t* m = NULL;
  kiln_device_t* d = NULL;
  kiln_session_t* s = NULL;
  kiln_device_open_options_t o = {0, true, NULL};
  const bool ok = x->data && CHECK_OK(kiln_module_load_memory(bytes, len, what, al(), &m)) &&
                  CHECK_OK(kiln_device_open("vulkan", &o, al(), &d)) && CHECK_OK(kiln_session_create(m, d, NULL, &s)) &&
                  CHECK_OK(kiln_session_run(s, x, got));
  kiln_session_destroy(s);
  kiln_device_release(d);
  kiln_module_release(m);
  return ok;
}

/* values on and around the half grid's edges: ties, subnormals, the
 * largest half, overflow, NaN */
static const float k_edge[16] = {1.0f + 0x1p-11f, 1.0f + 0x3p-11f, 2049.0f, 2051.0f, 0x1p-25f, 0x3p-25f, 3e-6f,
                                 6.1e-5f, 65504.0f, 65519.0f, 65520.0f, 7e4f, 1e30f, 0.33333334f, 4.386324f,
                                 NAN};

/* 64 inputs: the edges, halved and negated, times 0.75, then seeded */
static void edge_inputs(float* v, uint32_t seed) {
  seeded(v, 64, seed);
  for (int i = 0; i < 16; ++i) v[i] = k_edge[i], v[16 + i] = -k_edge[i] * 0.5f, v[32 + i] = k_edge[i] * 0.75f;
}

/* A lone Relu in an fp16 plan computes on halves (F16-typed values) over
 * the model's f32 tensors: the vector path rounds each texel onto the half
 * grid (the prelude's vec4 kiln_hround) and must round as the scalar path
 * and the reference do, to nearest even: ties, subnormals, the largest
 * half, overflow to inf, NaN. */
static void test_fp16_round(void) {
  const ew_case_t c = {"relu", 2, {4, 16}, 0, {0}, true, 0, {0}, false};
  uint8_t* bytes = NULL;
  size_t len = 0;
  const char* const opts[] = {"target", "vulkan", "precision", "fp16", NULL};
  kiln_array_t x, got;
  memset(&x, 0, sizeof x);
  memset(&got, 0, sizeof got);
  kiln_shape_t xs = kiln_shape_make(c.rank, c.x);
  if (compiled_with(&c, opts, "kiln_hround(texelFetch(", "round", &bytes, &len) &&
      CHECK_OK(kiln_array_alloc(al(), KILN_DTYPE_F32, &xs, &x))) {
    edge_inputs((float*)x.data, 9u);
    if (run_module(bytes, len, "round", &x, &got)) {
      CHECK(got.nbytes == x.nbytes);
      int bad = got.nbytes == x.nbytes ? 0 : 64;
      for (int i = 0; i < 64 && got.nbytes == x.nbytes; ++i) {
        const float h = kiln_f16_to_f32(kiln_f32_to_f16(((float*)x.data)[i])), want = h < 0.0f ? 0.0f : h;
        const float y = ((float*)got.data)[i];
        if (!(y == want || (isnan(y) && isnan(want))) && bad++ < 4)
          CHECK_MSG(false, "round: x %.9g gave %.9g, the half %.9g", ((float*)x.data)[i], y, want);
      }
      CHECK_MSG(bad == 0, "round: %d of 64 off the half grid's nearest", bad);
    }
  }
  kiln_array_free(al(), &x);
  kiln_array_free(al(), &got);
  free(bytes);
}

/* A Cast to f16 in an fp32 plan stores f16 from f32 values through the
 * vector path's rgba16f image (dialect vstore_half): each value must land
 * on the nearest half (ties to even), as kiln_f32_to_f16 and the scalar
 * store give; lavapipe's own f16vec4() of a varying vec4 truncated. */
static void test_cast_f16_store(void) {
  const ew_case_t c = {"cast16", 2, {4, 16}, 0, {0}, true, 0, {0}, false};
  uint8_t* bytes = NULL;
  size_t len = 0;
  const char* const opts[] = {"target", "vulkan", NULL};
  kiln_array_t x, got;
  memset(&x, 0, sizeof x);
  memset(&got, 0, sizeof got);
  kiln_shape_t xs = kiln_shape_make(c.rank, c.x);
  if (compiled_with(&c, opts, "kiln_hround(texelFetch(", "cast16", &bytes, &len) &&
      CHECK_OK(kiln_array_alloc(al(), KILN_DTYPE_F32, &xs, &x))) {
    edge_inputs((float*)x.data, 11u);
    ((float*)x.data)[15] = -2.3808594f - 0x1p-12f; /* plugin_example's value, rounded up in magnitude */
    if (run_module(bytes, len, "cast16", &x, &got)) {
      const bool shaped = got.dtype == KILN_DTYPE_F16 && got.nbytes == 64 * sizeof(uint16_t);
      CHECK(shaped);
      int bad = shaped ? 0 : 64;
      for (int i = 0; i < 64 && shaped; ++i) {
        const uint16_t want = kiln_f32_to_f16(((float*)x.data)[i]), y = ((const uint16_t*)got.data)[i];
        if (y != want && bad++ < 4)
          CHECK_MSG(false, "cast16: x %.9g gave half 0x%04x, the nearest 0x%04x", ((float*)x.data)[i], y, want);
      }
      CHECK_MSG(bad == 0, "cast16: %d of 64 off the half grid's nearest", bad);
    }
  }
  kiln_array_free(al(), &x);
  kiln_array_free(al(), &got);
  free(bytes);
}

int main(void) {
  if (!kiln_target_find("vulkan")) {
    printf("SKIP: the vulkan target is not built\n");
    return 0;
  }
  if (!bm_tmpdir("gpu_ew_vec4", g_dir, sizeof g_dir)) return 1;
  RUN(test_unary);
  RUN(test_broadcast);
  RUN(test_softmax);
  RUN(test_reduce_strided);
  RUN(test_softmax_strided);
  RUN(test_fp16);
  RUN(test_fp16_round);
  RUN(test_cast_f16_store);
  bm_rmtree(g_dir);
  return kiln_test_finish();
}
