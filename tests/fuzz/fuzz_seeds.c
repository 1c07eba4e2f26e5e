/* Writes the seed corpora of the libFuzzer harnesses (no checked-in blobs):
 *
 *   fuzz_seeds OUT_DIR [EXTRA.onnx ...]
 *
 * OUT_DIR/onnx:   small valid models built through the protobuf-c structs
 *                 (tests/bad_model_util.h): element-wise, conv/pool, MLP,
 *                 shape ops, a symbolic dim, typed float_data, external data
 *                 in "w.bin" (which fuzz_onnx provides), plus EXTRA models;
 * OUT_DIR/module: those models compiled (graph passes, fusion, templates)
 *                 and serialised as .kiln modules for every target built in,
 *                 and a staged module (section STGS: NonMaxSuppression,
 *                 NonZero, Compress and TopK after compiled stages) for the CPU;
 * OUT_DIR/npy:    one .npy file per dtype kiln reads, a float64 file, a
 *                 version 2.0 header and a 0-d array;
 * OUT_DIR/tune:   tuning caches written by kiln_tune_cache_write for the
 *                 model and devices of fuzz_tune_util.h: per GPU device
 *                 and for this machine's CPU, a cache per point: each
 *                 template kernel's default, then the 1st, 2nd, ... point
 *                 one knob away that the checks accept (faster than the
 *                 default, or as fast: kept), beside the same under
 *                 another driver; those caches merged, and two caches
 *                 joined at fuzz_tune's 0x1e marker (its two inputs).
 * Exit status 0 when every seed was written. */
#include "bad_model_util.h" /* first: it sets _GNU_SOURCE */

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "api/driver.h"
#include "ir/passes.h"
#include "kiln/npy.h"
#include "lowering/fuse.h"
#include "lowering/plan.h"
#include "lowering/template.h"
#include "runtime/module_file.h"
#include "targets/program_build.h"

#include "fuzz_tune_util.h"

static int g_failed = 0;
static char g_out[1024];

static const char* out_path(const char* sub, const char* name) {
  static char buf[2048];
  snprintf(buf, sizeof buf, "%s/%s/%s", g_out, sub, name);
  return buf;
}

static void fail(const char* what, kiln_status_t s) {
  fprintf(stderr, "fuzz_seeds: %s: %s\n", what, s ? kiln_status_message(s) : "failed");
  kiln_status_free(s);
  ++g_failed;
}

/* ---- models -------------------------------------------------------------- */

static void m_relu(bm_model_t* b) {
  const int64_t d[2] = {2, 3};
  bm_input(b, "X", BM_F32, 2, d);
  bm_node(b, "Relu", "relu", "X", "Y");
  bm_output(b, "Y");
}

static void m_cnn(bm_model_t* b) {
  const int64_t x[4] = {1, 3, 8, 8}, w[4] = {4, 3, 3, 3}, bias[1] = {4};
  bm_input(b, "X", BM_F32, 4, x);
  bm_init_f32(b, "W", 4, w);
  bm_init_f32(b, "B", 1, bias);
  Onnx__NodeProto* c = bm_node(b, "Conv", "conv", "X,W,B", "C");
  const int64_t pads[4] = {1, 1, 1, 1}, k3[2] = {3, 3}, k2[2] = {2, 2};
  bm_attr_ints(b, c, "pads", 4, pads);
  bm_attr_ints(b, c, "kernel_shape", 2, k3);
  bm_node(b, "Relu", "relu", "C", "R");
  Onnx__NodeProto* p = bm_node(b, "MaxPool", "pool", "R", "Y");
  bm_attr_ints(b, p, "kernel_shape", 2, k2);
  bm_attr_ints(b, p, "strides", 2, k2);
  bm_output(b, "Y");
}

static void m_mlp(bm_model_t* b) {
  const int64_t x[2] = {2, 8}, w[2] = {8, 4}, bias[1] = {4}, w2[2] = {4, 3}, b2[1] = {3};
  bm_input(b, "X", BM_F32, 2, x);
  bm_init_f32(b, "W", 2, w);
  bm_init_f32(b, "B", 1, bias);
  bm_init_f32(b, "W2", 2, w2);
  bm_init_f32(b, "B2", 1, b2);
  bm_node(b, "MatMul", "mm", "X,W", "M");
  bm_node(b, "Add", "add", "M,B", "A");
  bm_node(b, "Tanh", "tanh", "A", "T");
  Onnx__NodeProto* g = bm_node(b, "Gemm", "gemm", "T,W2,B2", "G");
  bm_attr_int(b, g, "transB", 0);
  Onnx__NodeProto* sm = bm_node(b, "Softmax", "softmax", "G", "Y");
  bm_attr_int(b, sm, "axis", 1);
  bm_output(b, "Y");
}

static void m_shape(bm_model_t* b) {
  const int64_t x[3] = {2, 3, 4}, sd[1] = {2}, sv[2] = {2, 12}, perm[3] = {0, 2, 1};
  bm_input(b, "X", BM_F32, 3, x);
  bm_init_i64(b, "S", 1, sd, sv);
  Onnx__NodeProto* t = bm_node(b, "Transpose", "transpose", "X", "T");
  bm_attr_ints(b, t, "perm", 3, perm);
  bm_node(b, "Reshape", "reshape", "T,S", "R");
  Onnx__NodeProto* c = bm_node(b, "Concat", "concat", "R,R", "C");
  bm_attr_int(b, c, "axis", 1);
  bm_node(b, "Neg", "neg", "C", "Y");
  bm_output(b, "Y");
}

static void m_sym(bm_model_t* b) {
  const int64_t d[2] = {0, 4};
  const char* params[2] = {"N", NULL};
  b->g.input[b->g.n_input++] = bm_value(b, "X", BM_F32, 2, d, params);
  bm_node(b, "Sigmoid", "sigmoid", "X", "S");
  bm_node(b, "Mul", "mul", "S,X", "Y");
  bm_output(b, "Y");
}

static void m_typed(bm_model_t* b) {
  const int64_t d[1] = {3};
  bm_input(b, "X", BM_F32, 1, d);
  Onnx__TensorProto* c = bm_tensor(b, "C", BM_F32, 1, d, NULL, 0);
  c->n_float_data = 3;
  c->float_data = bm_alloc(b, 3 * sizeof(float));
  c->float_data[0] = 1.5f, c->float_data[1] = -2, c->float_data[2] = 0.25f;
  b->g.initializer[b->g.n_initializer++] = c;
  bm_node(b, "Mul", "mul", "X,C", "Y");
  bm_output(b, "Y");
}

static void m_ext(bm_model_t* b) {
  const int64_t d[1] = {4};
  bm_input(b, "X", BM_F32, 1, d);
  Onnx__TensorProto* w = bm_tensor(b, "W", BM_F32, 1, d, NULL, 0);
  bm_external(b, w, "location", "w.bin");
  bm_external(b, w, "offset", "64");
  bm_external(b, w, "length", "16");
  b->g.initializer[b->g.n_initializer++] = w;
  bm_node(b, "Add", "add", "X,W", "Y");
  bm_output(b, "Y");
}

/* data-dependent sizes: a stage, then NonMaxSuppression, NonZero, Compress
 * and a run-time TopK on its outputs (written as a staged module, section
 * STGS, below) */
static void m_staged(bm_model_t* b) {
  int64_t bd[3] = {1, 4, 4}, sd[3] = {1, 1, 4}, one[1] = {1};
  const int64_t max_out = 2;
  const float two = 2.0f, iou = 0.5f;
  bm_input(b, "boxes", BM_F32, 3, bd);
  bm_input(b, "scores", BM_F32, 3, sd);
  bm_initializer(b, "two", BM_F32, 1, one, &two, sizeof two);
  bm_initializer(b, "max_out", BM_I64, 1, one, &max_out, sizeof max_out);
  bm_initializer(b, "iou", BM_F32, 1, one, &iou, sizeof iou);
  bm_node(b, "Mul", "scale", "scores,two", "s2");
  bm_node(b, "Relu", "relu", "s2", "r");
  bm_node(b, "NonMaxSuppression", "nms", "boxes,s2,max_out,iou", "sel");
  bm_node(b, "NonZero", "nz", "r", "nz");
  /* Compress and a TopK whose K a stage counts */
  const int64_t flat = 4, axes = 0;
  const float half = 0.5f;
  bm_initializer(b, "flat", BM_I64, 1, one, &flat, sizeof flat);
  bm_initializer(b, "axes", BM_I64, 1, one, &axes, sizeof axes);
  bm_initializer(b, "half", BM_F32, 1, one, &half, sizeof half);
  bm_node(b, "Reshape", "flatten", "scores,flat", "sf");
  bm_node(b, "Greater", "mask", "sf,half", "mk");
  bm_attr_int(b, bm_node(b, "Cast", "to_int", "mk", "mi"), "to", BM_I64);
  bm_attr_int(b, bm_node(b, "ReduceSum", "count", "mi,axes", "k"), "keepdims", 1);
  bm_node(b, "Compress", "keep", "sf,mk", "c");
  bm_node(b, "TopK", "top", "sf,k", "top,topi");
  bm_output(b, "sel");
  bm_output(b, "nz");
  bm_output(b, "c");
  bm_output(b, "topi");
}

typedef struct {
  const char* name;
  void (*build)(bm_model_t*);
  bool module; /* also compiled into modules */
} seed_model_t;

static const seed_model_t k_models[] = {
    {"relu", m_relu, true},   {"cnn", m_cnn, true},    {"mlp", m_mlp, true}, {"shape", m_shape, true},
    {"sym", m_sym, true},    {"typed", m_typed, true}, {"ext", m_ext, false},
    {"staged", m_staged, false},
};

/* ---- modules ------------------------------------------------------------- */

/* The staged model as `kiln compile` writes it (api/driver_staged.c): the
 * STGS section with its stage images, host nodes and inline constants. */
static void write_staged_module(const char* model) {
  kiln_driver_request_t rq;
  memset(&rq, 0, sizeof rq);
  rq.model_path = model;
  rq.target = kiln_target_find("cpu");
  rq.opt = 1;
  rq.threads = 1;
  kiln_compile_precision_default(&rq.precision);
  kiln_compile_log_t log = {0};
  kiln_program_t* prog = NULL;
  uint8_t* bytes = NULL;
  size_t len = 0;
  kiln_status_t s = kiln_driver_compile(&rq, NULL, &log, &prog);
  kiln_compile_log_free(&log);
  if (!s) s = kiln_module_serialize(prog, kiln_allocator_system(), &bytes, &len);
  kiln_program_destroy(prog);
  if (s) fail("staged module", s);
  else if (!bm_write_bytes(out_path("module", "staged-cpu-O1.kiln"), bytes, len)) fail("staged-cpu-O1.kiln", NULL);
  free(bytes);
}

static void write_modules(const char* model, const char* stem) {
  kiln_allocator_t al = kiln_allocator_system();
  for (int32_t ti = 0; kiln_target_at(ti); ++ti) {
    const kiln_target_t* t = kiln_target_at(ti);
    for (int opt = 0; opt <= 1; ++opt) {
      kiln_graph_t* g = NULL;
      kiln_plan_t* plan = NULL;
      kiln_program_t* prog = NULL;
      uint8_t* bytes = NULL;
      size_t len = 0;
      char what[512];
      snprintf(what, sizeof what, "%s for %s -O%d", model, t->name, opt);
      /* Symbolic input dims become 1, as `kiln compile` binds them. */
      kiln_status_t s = kiln_onnx_parse_model(model, NULL, al, &g);
      for (int32_t k = 0; !s && k < g->n_inputs; ++k) {
        kiln_tensor_t* in = &g->tensors[g->inputs[k]];
        for (int32_t d = 0; d < in->shape.rank; ++d)
          if (in->shape.dims[d] < 0) in->shape.dims[d] = 1;
      }
      if (!s) s = kiln_graph_prepare(g);
      if (!s && opt) s = kiln_graph_optimize(g, opt, NULL);
      kiln_plan_options_t po = {t->lowering, 0, 0, 0, 0, 0};
      if (!s) s = kiln_plan_build(g, &po, al, &plan);
      kiln_fusion_report_t fr;
      if (!s && opt) s = kiln_plan_fuse(plan, &fr, NULL);
      kiln_template_set_t templates;
      kiln_program_templates(t, &templates);
      if (!s) s = kiln_template_choose(plan, &templates);
      if (!s) s = kiln_program_build(plan, t, NULL, al, &prog);
      if (!s) s = kiln_module_serialize(prog, al, &bytes, &len);
      if (s) {
        fail(what, s);
      } else {
        char name[256];
        snprintf(name, sizeof name, "%s-%s-O%d.kiln", stem, t->name, opt);
        if (!bm_write_bytes(out_path("module", name), bytes, len)) fail(name, NULL);
      }
      kiln_allocator_free(al, bytes);
      kiln_program_destroy(prog);
      kiln_plan_destroy(plan);
      kiln_graph_destroy(g);
    }
  }
}

/* ---- npy ----------------------------------------------------------------- */

static void npy_raw(const char* name, int major, const char* dict, const void* data, size_t n) {
  size_t pre = major == 1 ? 10 : 12, dl = strlen(dict), total = pre + dl + 1, pad = (64 - total % 64) % 64;
  size_t hl = dl + pad + 1;
  uint8_t* buf = calloc(1, pre + hl + n + 1);
  memcpy(buf, "\x93NUMPY", 6);
  buf[6] = (uint8_t)major;
  buf[8] = (uint8_t)(hl & 0xff);
  buf[9] = (uint8_t)(hl >> 8);
  memcpy(buf + pre, dict, dl);
  memset(buf + pre + dl, ' ', pad);
  buf[pre + dl + pad] = '\n';
  if (n) memcpy(buf + pre + hl, data, n);
  if (!bm_write_bytes(out_path("npy", name), buf, pre + hl + n)) fail(name, NULL);
  free(buf);
}

static void write_npys(void) {
  const kiln_dtype_t dts[] = {KILN_DTYPE_F32, KILN_DTYPE_F16, KILN_DTYPE_I8, KILN_DTYPE_U8,
                              KILN_DTYPE_I32, KILN_DTYPE_I64, KILN_DTYPE_BOOL};
  kiln_allocator_t al = kiln_allocator_system();
  for (size_t i = 0; i < sizeof dts / sizeof dts[0]; ++i) {
    kiln_shape_t sh = {.rank = (int32_t)(i % 3) + 1, .dims = {2, 3, 2}};
    kiln_array_t a;
    kiln_status_t s = kiln_array_alloc(al, dts[i], &sh, &a);
    if (s) {
      fail("npy array", s);
      continue;
    }
    for (size_t k = 0; k < a.nbytes; ++k) ((uint8_t*)a.data)[k] = dts[i] == KILN_DTYPE_BOOL ? k & 1 : (uint8_t)(k * 29);
    char name[64];
    snprintf(name, sizeof name, "%s.npy", kiln_dtype_name(dts[i]));
    if ((s = kiln_npy_write(out_path("npy", name), &a))) fail(name, s);
    kiln_array_free(al, &a);
  }
  const double d[4] = {1, -2.5, 3e10, 0};
  npy_raw("f8.npy", 1, "{'descr': '<f8', 'fortran_order': False, 'shape': (2, 2), }", d, sizeof d);
  const float f[6] = {1, 2, 3, 4, 5, 6};
  npy_raw("v2.npy", 2, "{'descr': '<f4', 'fortran_order': False, 'shape': (3, 2), }", f, sizeof f);
  npy_raw("scalar.npy", 1, "{'descr': '<i4', 'fortran_order': False, 'shape': (), }", f, 4);
  npy_raw("empty.npy", 1, "{'descr': '|u1', 'fortran_order': False, 'shape': (0, 5), }", NULL, 0);
}

/* ---- tuning caches --------------------------------------------------------- */

/* Records for |fp| in |sp| on |d|: point |nth| (0: the default |def|,
 * else the nth point one knob away that |ok| accepts; faster than the
 * default, as fast for nth 2: kept), and the default under another driver
 * (stale: never used). False when there is no such point. */
static bool tune_records(kiln_tune_cache_t* c, uint64_t fp, const kiln_template_space_t* sp,
                         const kiln_template_tiles_t* def, const kiln_tune_device_t* d,
                         bool (*ok)(const void* ctx, kiln_template_tiles_t* x), const void* ctx, int32_t nth) {
  kiln_tune_record_t r = {.default_us = 120.5, .tuned_us = nth == 2 ? 120.5 : 100.25 - nth};
  r.key = fzt_key(fp, sp->version, d);
  r.tiles = *def;
  int32_t found = 0;
  for (int32_t i = 0; i < sp->n_knobs && found < nth; ++i)
    for (int32_t j = 0; j < sp->knobs[i].n && found < nth; ++j) {
      kiln_template_tiles_t x = *def;
      x.v[i] = sp->knobs[i].v[j];
      if (memcmp(x.v, def->v, sizeof x.v) && ok(ctx, &x) && ++found == nth) r.tiles = x;
    }
  if (found < nth) return false;
  kiln_tune_record_t other = r;
  snprintf(other.key.driver, sizeof other.key.driver, "another driver 9");
  kiln_status_t s = kiln_tune_cache_put(c, &r, false);
  if (!s) s = kiln_tune_cache_put(c, &other, false);
  if (s) fail("tuning records", s);
  return !s;
}

typedef struct {
  const kiln_template_set_t* set;
  const kiln_template_t* t;
  const kiln_tune_device_t* d;
} gpu_ctx_t;

static bool gpu_ok(const void* ctx, kiln_template_tiles_t* x) {
  const gpu_ctx_t* g = ctx;
  if (g->set->tiles_tie) g->set->tiles_tie(g->t, x);
  return !g->set->tiles_check(g->t, x, &g->d->limits);
}

static bool cpu_ok(const void* ctx, kiln_template_tiles_t* x) { return !kiln_tune_cpu_check(ctx, x); }

static void write_cache(kiln_tune_cache_t* c, const char* name) {
  kiln_status_t s = kiln_tune_cache_write(c, out_path("tune", name));
  if (s) fail(name, s);
  kiln_tune_cache_free(c);
}

static void write_tune_caches(void) {
  char model[2048];
  snprintf(model, sizeof model, "%s", out_path("tune", "model.onnx"));
  kiln_graph_t* g = NULL;
  kiln_status_t s = fzt_write_model(model) ? fzt_graph(model, &g) : kiln_make_status(KILN_IO_ERROR, "%s", model);
  remove(model);
  if (s) {
    fail("tuning model", s);
    kiln_graph_destroy(g);
    return;
  }
  static const char* names[FZT_N_GPU_DEVICES] = {"opencl.tsv", "opencl-small.tsv", "vulkan.tsv", "vulkan-small.tsv"};
  for (int32_t i = 0; i < FZT_N_GPU_DEVICES; ++i) {
    const kiln_tune_device_t d = fzt_gpu_device(i);
    const kiln_target_t* t = kiln_target_find(d.target);
    if (!t) continue;
    const kiln_template_set_t set = fzt_gpu_set(t, &d);
    kiln_plan_t* plan = NULL;
    s = fzt_gpu_plan(g, t, &d, &plan);
    if (!s) s = kiln_template_select(plan, &set);
    if (s) fail(names[i], s);
    for (int32_t nth = 0; !s && nth < 4; ++nth) {
      kiln_tune_cache_t c = {0};
      for (int32_t k = 0; k < plan->n_kernels; ++k) {
        const kiln_template_t* tt = kiln_template_tunable_of(plan, k);
        kiln_template_space_t sp;
        if (!tt || !set.space || !set.space(tt, &sp)) continue;
        const gpu_ctx_t ctx = {&set, tt, &d};
        tune_records(&c, kiln_template_fingerprint(tt), &sp, &tt->tiles, &d, gpu_ok, &ctx, nth);
      }
      if (c.n == 0 && nth == 0) fail(names[i], kiln_make_status(KILN_INTERNAL, "no tunable kernel"));
      char name[64];
      snprintf(name, sizeof name, nth ? "%.*s-%d.tsv" : "%.*s.tsv", (int)strlen(names[i]) - 4, names[i], (int)nth);
      write_cache(&c, name);
    }
    kiln_plan_destroy(plan);
  }
  /* the CPU: this machine's device and GEMMs, as compile finds them */
  kiln_device_t* dev = NULL;
  kiln_device_open_options_t oo = {1, true, NULL};
  kiln_plan_options_t po = fzt_cpu_options();
  kiln_tune_cpu_table_t table;
  kiln_tune_use_report_t rep;
  kiln_plan_t* plan = NULL;
  s = kiln_device_open("cpu", &oo, kiln_allocator_system(), &dev);
  if (!s) s = kiln_tune_cpu_plan_build(g, &po, out_path("tune", "none.tsv"), dev, NULL, true, &table, &rep, &plan);
  if (!s) {
    kiln_tune_device_t where;
    kiln_tune_device_of(dev, &where);
    where.target = "cpu";
    for (int32_t nth = 0; nth < 6; ++nth) {
      kiln_tune_cache_t c = {0};
      for (int32_t i = 0; i < table.n; ++i) {
        kiln_template_space_t sp;
        kiln_template_tiles_t def;
        kiln_tune_cpu_space(&table.e[i].problem, &table.e[i].dflt, &sp);
        kiln_tune_cpu_tiles_of(&table.e[i].dflt, &def);
        sp.version = kiln_tune_cpu_space_name(&table.e[i].problem);
        tune_records(&c, table.e[i].fingerprint, &sp, &def, &where, cpu_ok, &table.e[i].problem, nth);
      }
      if (c.n == 0 && nth == 0) fail("cpu.tsv", kiln_make_status(KILN_INTERNAL, "no CPU GEMM"));
      char name[64];
      snprintf(name, sizeof name, nth ? "cpu-%d.tsv" : "cpu.tsv", (int)nth);
      write_cache(&c, name);
    }
    kiln_tune_cpu_table_free(&table);
  } else {
    fail("cpu tuning records", s);
  }
  kiln_plan_destroy(plan);
  kiln_device_release(dev);
  kiln_graph_destroy(g);
  /* all of them merged, as `kiln tune --merge` does */
  kiln_tune_cache_t m = {0};
  const char* all[] = {"cpu.tsv", "opencl.tsv", "opencl-small.tsv", "vulkan.tsv", "vulkan-small.tsv"};
  for (size_t i = 0; i < sizeof all / sizeof all[0]; ++i) {
    s = kiln_tune_cache_read(&m, out_path("tune", all[i]), stderr);
    if (s) fail(all[i], s);
  }
  write_cache(&m, "merged.tsv");
  /* two caches for fuzz_tune's merge: cpu.tsv, 0x1e, opencl.tsv */
  size_t na = 0, nb = 0;
  unsigned char* a = bm_read_bytes(out_path("tune", "cpu.tsv"), &na);
  unsigned char* b = bm_read_bytes(out_path("tune", "opencl.tsv"), &nb);
  unsigned char* two = a && b ? malloc(na + nb + 1) : NULL;
  if (two) {
    memcpy(two, a, na);
    two[na] = 0x1e;
    memcpy(two + na + 1, b, nb);
    if (!bm_write_bytes(out_path("tune", "two.tsv"), two, na + nb + 1)) fail("two.tsv", NULL);
  } else {
    fail("two.tsv", NULL);
  }
  free(a);
  free(b);
  free(two);
}

int main(int argc, char** argv) {
  if (argc < 2) {
    fprintf(stderr, "usage: fuzz_seeds OUT_DIR [EXTRA.onnx ...]\n");
    return 2;
  }
  snprintf(g_out, sizeof g_out, "%s", argv[1]);
  const char* subs[] = {"", "/onnx", "/module", "/npy", "/tune"};
  for (int i = 0; i < 5; ++i) {
    char d[1100];
    snprintf(d, sizeof d, "%s%s", g_out, subs[i]);
    if (mkdir(d, 0777) != 0 && errno != EEXIST) {
      perror(d);
      return 1;
    }
  }
  for (size_t i = 0; i < sizeof k_models / sizeof k_models[0]; ++i) {
    bm_model_t b;
    bm_init(&b, 17);
    k_models[i].build(&b);
    char name[64];
    snprintf(name, sizeof name, "%s.onnx", k_models[i].name);
    char path[2048];
    snprintf(path, sizeof path, "%s", out_path("onnx", name));
    if (!bm_write(&b, path)) fail(path, NULL);
    bm_free(&b);
    /* The loader must accept every seed (the external one needs w.bin). */
    if (strcmp(k_models[i].name, "ext") != 0) {
      kiln_status_t s = bm_load(path, NULL);
      if (s) fail(path, s);
    }
    if (k_models[i].module) write_modules(path, k_models[i].name);
    if (!strcmp(k_models[i].name, "staged")) write_staged_module(path);
  }
  for (int i = 2; i < argc; ++i) {
    const char* base = strrchr(argv[i], '/');
    base = base ? base + 1 : argv[i];
    size_t n = 0;
    unsigned char* bytes = bm_read_bytes(argv[i], &n);
    if (!bytes || !bm_write_bytes(out_path("onnx", base), bytes, n)) fail(argv[i], NULL);
    free(bytes);
    char stem[256];
    snprintf(stem, sizeof stem, "%.*s", (int)strcspn(base, "."), base);
    write_modules(argv[i], stem);
  }
  write_npys();
  write_tune_caches();
  if (g_failed) fprintf(stderr, "fuzz_seeds: %d seeds failed\n", g_failed);
  return g_failed ? 1 : 0;
}
