/* Staged models through the public compiler API (include/kiln/compiler.h,
 * "staged models"), through libkiln.so: a detector-like model written here
 * -- NonMaxSuppression, then a Gather of the kept boxes and a Mul compiled
 * after it; NonZero of the scores above a threshold, whose count is the
 * run-time K of a TopK -- compiles to a staged model (no module: the error
 * names the host node and the stage that reads a data-dependent value), runs through a runner with outputs of the real
 * sizes (hand-computed), compiles a stage once per count and reuses it,
 * outlives its compiler, and refuses bad inputs, a device of another API
 * and the precisions that calibrate the whole graph. With KILN_CLI (set by
 * ctest): `kiln info` lists the stages and host nodes, `kiln compile`
 * refuses the model naming the stage after the NMS (staged modules store
 * fixed-shape stages only: test_staged_module) and what runs it. A second
 * model, of fixed-size stages around NMS and NonZero, gives its staged
 * module through kiln_compiler_module, which libkiln_rt runs as the runner
 * does. */
#include "bad_model_util.h" /* first: it defines _GNU_SOURCE */

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "kiln/compiler.h"
#include "kiln/runtime.h"
#include "testing.h"

static char g_dir[512];
static char g_model[600];

#define NB 6 /* boxes */

/* boxes [1,NB,4], scores [1,1,NB] ->
 *   sel = NonMaxSuppression(boxes, scores, 3, iou 0.5, score 0.1)  [k,3]
 *   kept = 2 * Gather(Reshape(boxes, [NB,4]), Gather(sel, 2, axis 1))  [k,4]
 *   nz = NonZero(Relu(scores - 0.3))                                   [3,m]
 *   top, topi = TopK(Reshape(scores, [NB]), Reshape(Gather(Shape(nz), 1), [1]))  [m] */
static void write_model(void) {
  bm_model_t b;
  bm_init(&b, 13);
  int64_t bd[3] = {1, NB, 4}, sd[3] = {1, 1, NB}, one[1] = {1}, two[1] = {2};
  bm_input(&b, "boxes", BM_F32, 3, bd);
  bm_input(&b, "scores", BM_F32, 3, sd);
  const int64_t max_out = 3, col = 2, bshape[2] = {NB, 4}, sshape[1] = {NB}, kshape[1] = {1}, at1 = 1;
  const float iou = 0.5f, thr = 0.1f, cut = 0.3f, twice = 2.0f;
  bm_initializer(&b, "max_out", BM_I64, 1, one, &max_out, sizeof max_out);
  bm_initializer(&b, "iou", BM_F32, 1, one, &iou, sizeof iou);
  bm_initializer(&b, "thr", BM_F32, 1, one, &thr, sizeof thr);
  bm_initializer(&b, "col", BM_I64, 0, NULL, &col, sizeof col);
  bm_initializer(&b, "at1", BM_I64, 0, NULL, &at1, sizeof at1);
  bm_initializer(&b, "bshape", BM_I64, 1, two, bshape, sizeof bshape);
  bm_initializer(&b, "sshape", BM_I64, 1, one, sshape, sizeof sshape);
  bm_initializer(&b, "kshape", BM_I64, 1, one, kshape, sizeof kshape);
  bm_initializer(&b, "cut", BM_F32, 1, one, &cut, sizeof cut);
  bm_initializer(&b, "twice", BM_F32, 1, one, &twice, sizeof twice);
  bm_node(&b, "NonMaxSuppression", "nms", "boxes,scores,max_out,iou,thr", "sel");
  bm_attr_int(&b, bm_node(&b, "Gather", "pick", "sel,col", "bi"), "axis", 1);
  bm_node(&b, "Reshape", "flat_boxes", "boxes,bshape", "b2");
  bm_attr_int(&b, bm_node(&b, "Gather", "gather_boxes", "b2,bi", "kb"), "axis", 0);
  bm_node(&b, "Mul", "scale", "kb,twice", "kept");
  bm_node(&b, "Sub", "minus", "scores,cut", "d");
  bm_node(&b, "Relu", "relu", "d", "r");
  bm_node(&b, "NonZero", "nz", "r", "nzi");
  bm_node(&b, "Shape", "shape", "nzi", "nzs");
  bm_attr_int(&b, bm_node(&b, "Gather", "count", "nzs,at1", "m"), "axis", 0);
  bm_node(&b, "Reshape", "k", "m,kshape", "kk");
  bm_node(&b, "Reshape", "flat_scores", "scores,sshape", "s1");
  bm_node(&b, "TopK", "topk", "s1,kk", "top,topi");
  bm_output(&b, "kept");
  bm_output(&b, "top");
  bm_output(&b, "sel");
  snprintf(g_model, sizeof g_model, "%s/detector.onnx", g_dir);
  CHECK(bm_write(&b, g_model));
  bm_free(&b);
}

/* y1 x1 y2 x2: 1 overlaps 0 (IoU 0.82), 4 overlaps 2; 3 scores under 0.1 */
static const float kBoxes[NB][4] = {{0, 0, 1, 1}, {0, 0.1f, 1, 1.1f}, {0, 2, 1, 3},
                                    {0, 4, 1, 5}, {0, 2.1f, 1, 3.1f}, {0, 6, 1, 7}};

static kiln_compiler_t* compile(const char* precision) {
  kiln_compiler_t* c = NULL;
  CHECK_OK(kiln_compiler_create(KILN_COMPILER_ABI_VERSION, &c));
  if (!c) return NULL;
  CHECK_OK(kiln_compiler_load_model(c, g_model));
  CHECK_OK(kiln_compiler_set_option(c, "target", "cpu"));
  CHECK_OK(kiln_compiler_set_option(c, "precision", precision));
  return c;
}

/* One run with box 5's score |s5| and box 2's |s2|: the kept boxes are
 * 0, 2 (when s2 > 0.1) and 5 (when s5 > 0.1), in score order; the TopK
 * takes as many scores as are above 0.3. */
static void run_once(kiln_compiler_runner_t* r, float s2, float s5) {
  kiln_allocator_t al = kiln_allocator_system();
  int64_t bd[3] = {1, NB, 4}, sd[3] = {1, 1, NB};
  kiln_shape_t bs = kiln_shape_make(3, bd), ss = kiln_shape_make(3, sd);
  kiln_array_t in[2] = {{0}, {0}}, out[3];
  memset(out, 0, sizeof out);
  if (!CHECK_OK(kiln_array_alloc(al, KILN_DTYPE_F32, &bs, &in[0])) ||
      !CHECK_OK(kiln_array_alloc(al, KILN_DTYPE_F32, &ss, &in[1])))
    goto done;
  memcpy(in[0].data, kBoxes, sizeof kBoxes);
  const float scores[NB] = {0.9f, 0.8f, s2, 0.05f, 0.6f, s5};
  memcpy(in[1].data, scores, sizeof scores);
  if (!CHECK_OK(kiln_compiler_runner_run(r, in, out))) goto done;
  int kept[3], k = 0, m = 0;
  kept[k++] = 0;
  /* box 4 (0.6) is suppressed by box 2 only when box 2 passes first */
  if (s2 > 0.1f && s2 > 0.6f) kept[k++] = 2;
  else kept[k++] = 4;
  if (s5 > 0.1f && k < 3) kept[k++] = 5;
  float sorted[NB];
  memcpy(sorted, scores, sizeof sorted);
  for (int i = 0; i < NB; ++i)
    for (int j = i + 1; j < NB; ++j)
      if (sorted[j] > sorted[i]) {
        float t = sorted[i];
        sorted[i] = sorted[j];
        sorted[j] = t;
      }
  for (int i = 0; i < NB; ++i) m += scores[i] > 0.3f;
  CHECK_MSG(out[0].shape.rank == 2 && out[0].shape.dims[0] == k && out[0].shape.dims[1] == 4,
            "kept: rank %d dims[0] %lld, want %d rows", out[0].shape.rank, (long long)out[0].shape.dims[0], k);
  CHECK_MSG(out[1].shape.rank == 1 && out[1].shape.dims[0] == m, "top: %lld values, want %d",
            (long long)out[1].shape.dims[0], m);
  CHECK(out[2].dtype == KILN_DTYPE_I64 && out[2].shape.rank == 2 && out[2].shape.dims[0] == k);
  if (out[0].shape.dims[0] == k)
    for (int i = 0; i < k; ++i) {
      CHECK(((const int64_t*)out[2].data)[i * 3 + 2] == kept[i]);
      for (int j = 0; j < 4; ++j) CHECK_NEAR(((const float*)out[0].data)[i * 4 + j], 2 * kBoxes[kept[i]][j], 1e-6);
    }
  if (out[1].shape.dims[0] == m)
    for (int i = 0; i < m; ++i) CHECK_NEAR(((const float*)out[1].data)[i], sorted[i], 0);
done:
  for (int i = 0; i < 3; ++i) kiln_array_free(al, &out[i]);
  kiln_array_free(al, &in[0]);
  kiln_array_free(al, &in[1]);
}

/* True for OK; frees an error. */
static bool kiln_status_ok_free(kiln_status_t s) {
  kiln_status_free(s);
  return s == NULL;
}

static bool has_line(const kiln_compiler_t* c, const char* section, const char* text) {
  for (int32_t i = 0; i < kiln_compiler_report_count(c); ++i) {
    const kiln_compile_report_entry_t* e = kiln_compiler_report_at(c, i);
    if (!strcmp(e->section, section) && strstr(e->text, text)) return true;
  }
  return false;
}

static void test_detector(void) {
  kiln_compiler_t* c = compile("fp32");
  if (!c) return;
  CHECK(kiln_compiler_host_nodes(c) == 0); /* nothing compiled yet */
  CHECK_OK(kiln_compiler_compile(c));
  CHECK(kiln_compiler_host_nodes(c) == 3); /* NMS, NonZero, TopK */
  CHECK(has_line(c, "staged", "node 'nms' (NonMaxSuppression) runs on the host"));
  CHECK(has_line(c, "staged", "node 'topk' (TopK) runs on the host"));
  /* no staged module (a stage reads the boxes NMS kept): the error names
   * the model, the first host node and the reason */
  const void* data = NULL;
  size_t n = 0;
  CHECK(has_line(c, "staged", "staged: no module: "));
  CHECK_ERR_ALL(kiln_compiler_module(c, &data, &n), KILN_UNSUPPORTED, "detector.onnx", "node 'nms'",
                "node 'pick' (Gather) reads 'sel'", "kiln_compiler_runner_create");
  char path[700];
  snprintf(path, sizeof path, "%s/detector.kiln", g_dir);
  CHECK_ERR_ALL(kiln_compiler_write_module(c, path), KILN_UNSUPPORTED, "node 'nms'");
  /* inputs and outputs as declared; data-dependent dims negative */
  CHECK(kiln_compiler_staged_count(c, 0) == 2 && kiln_compiler_staged_count(c, 1) == 3);
  kiln_dtype_t dt = KILN_DTYPE_UNDEFINED;
  kiln_shape_t sh;
  const char* name = kiln_compiler_staged_io(c, 0, 1, &dt, &sh);
  CHECK(name && !strcmp(name, "scores") && dt == KILN_DTYPE_F32 && sh.rank == 3 && sh.dims[2] == NB);
  name = kiln_compiler_staged_io(c, 1, 0, &dt, &sh);
  CHECK(name && !strcmp(name, "kept") && sh.rank == 2 && sh.dims[0] < 0 && sh.dims[1] == 4);
  CHECK(kiln_compiler_staged_io(c, 1, 3, NULL, NULL) == NULL && kiln_compiler_staged_io(c, 0, -1, NULL, NULL) == NULL);

  kiln_compiler_runner_t* r = NULL;
  CHECK_OK(kiln_compiler_runner_create(c, NULL, &r));
  kiln_compiler_destroy(c); /* the runner keeps the graph */
  if (!r) return;
  run_once(r, 0.7f, 0.4f);  /* kept 0 2 5, five scores > 0.3 */
  run_once(r, 0.7f, 0.05f); /* kept 0 2, four */
  run_once(r, 0.7f, 0.4f);  /* as the first: every stage reused */
  run_once(r, 0.2f, 0.4f);  /* box 2 under box 4: kept 0 4 5 */
  kiln_compiler_runner_stats_t st;
  kiln_compiler_runner_stats(r, &st);
  CHECK_MSG(st.host_nodes == 3 && st.stages > 3 && st.compiles > 0 && st.reuses > 0 && st.on_reference == 0 &&
                st.compile_s > 0 && st.host_s >= 0,
            "stages %d host %d compiles %d reuses %d", st.stages, st.host_nodes, st.compiles, st.reuses);
  const int32_t compiles = st.compiles;
  run_once(r, 0.7f, 0.05f);
  kiln_compiler_runner_stats(r, &st);
  CHECK_MSG(st.compiles == compiles, "a shape met before compiled again: %d -> %d", compiles, st.compiles);

  /* a bad input: the error names it and both shapes */
  int64_t wrong[3] = {1, NB + 1, 4}, sd[3] = {1, 1, NB};
  kiln_shape_t ws = kiln_shape_make(3, wrong), ss = kiln_shape_make(3, sd);
  kiln_array_t in[2] = {{0}, {0}}, out[3];
  memset(out, 0, sizeof out);
  if (CHECK_OK(kiln_array_alloc(kiln_allocator_system(), KILN_DTYPE_F32, &ws, &in[0])) &&
      CHECK_OK(kiln_array_alloc(kiln_allocator_system(), KILN_DTYPE_F32, &ss, &in[1])))
    CHECK_ERR_ALL(kiln_compiler_runner_run(r, in, out), KILN_INVALID_ARGUMENT, "boxes");
  kiln_array_free(kiln_allocator_system(), &in[0]);
  kiln_array_free(kiln_allocator_system(), &in[1]);
  CHECK_ERR_ALL(kiln_compiler_runner_run(r, NULL, out), KILN_INVALID_ARGUMENT, "NULL");
  kiln_compiler_runner_destroy(r);
  kiln_compiler_runner_destroy(NULL);
}

static void test_errors(void) {
  kiln_compiler_runner_t* r = NULL;
  CHECK_ERR_ALL(kiln_compiler_runner_create(NULL, NULL, &r), KILN_INVALID_ARGUMENT, "NULL");
  kiln_compiler_t* c = compile("fp32");
  if (!c) return;
  /* nothing compiled yet: no staged model */
  CHECK_ERR_ALL(kiln_compiler_runner_create(c, NULL, &r), KILN_INVALID_ARGUMENT, "no staged model");
  CHECK(kiln_compiler_staged_count(c, 0) == 0 && kiln_compiler_staged_io(c, 0, 0, NULL, NULL) == NULL);
  CHECK_OK(kiln_compiler_compile(c));
  /* a device of another API than the compile's target, or none such */
  CHECK_ERR_ALL(kiln_compiler_runner_create(c, "nosuchapi", &r), KILN_INVALID_ARGUMENT, "nosuchapi");
  CHECK(r == NULL);
  /* an OpenCL device (where there is one) for a model compiled for the cpu */
  kiln_status_t s = kiln_compiler_runner_create(c, "opencl", &r);
  CHECK_MSG(s && r == NULL, "a runner for the cpu target on an opencl device");
  if (s) {
    const char* msg = kiln_status_message(s);
    CHECK_MSG(strstr(msg, "compiled for the cpu target") || strstr(msg, "opencl"), "%s", msg);
    kiln_status_free(s);
  }
  /* precisions that calibrate the whole graph are refused at compile */
  CHECK_OK(kiln_compiler_set_option(c, "precision", "auto"));
  s = kiln_compiler_compile(c);
  CHECK_MSG(s != NULL, "precision auto on a staged model compiled");
  if (s) {
    CHECK_MSG(strstr(kiln_status_message(s), "fp32 or fp16") != NULL, "%s", kiln_status_message(s));
    kiln_status_free(s);
  }
  CHECK(kiln_compiler_host_nodes(c) == 0); /* the failed compile left nothing */
  CHECK_ERR_ALL(kiln_compiler_runner_create(c, NULL, &r), KILN_INVALID_ARGUMENT, "no staged model");
  /* fp16 stages run */
  CHECK_OK(kiln_compiler_set_option(c, "precision", "fp16"));
  CHECK_OK(kiln_compiler_set_option(c, "fp16-arith", "no"));
  CHECK_OK(kiln_compiler_compile(c));
  CHECK(kiln_compiler_host_nodes(c) == 3);
  /* a GPU target (where the build has one): the host nodes are CPU
   * fallbacks in the report, and strict refuses them at compile */
  if (!kiln_status_ok_free(kiln_compiler_set_option(c, "target", "opencl"))) {
    printf("  (no opencl target in this build: GPU fallback not checked)\n");
  } else {
    CHECK_OK(kiln_compiler_set_option(c, "precision", "fp32"));
    CHECK_OK(kiln_compiler_compile(c));
    CHECK(kiln_compiler_host_nodes(c) == 3);
    CHECK(has_line(c, "fallback", "fallback: node 'nms' (NonMaxSuppression) runs on the cpu"));
    CHECK_OK(kiln_compiler_set_option(c, "strict", "yes"));
    CHECK_ERR_ALL(kiln_compiler_compile(c), KILN_UNSUPPORTED, "node 'nms'", "cannot run on the opencl target");
    CHECK(kiln_compiler_host_nodes(c) == 0);
  }
  kiln_compiler_destroy(c);
  /* a model without host nodes is a module, not a staged model */
  bm_model_t b;
  bm_init(&b, 13);
  int64_t d[1] = {4};
  bm_input(&b, "x", BM_F32, 1, d);
  bm_node(&b, "Relu", "relu", "x", "y");
  bm_output(&b, "y");
  char plain[700];
  snprintf(plain, sizeof plain, "%s/plain.onnx", g_dir);
  CHECK(bm_write(&b, plain));
  bm_free(&b);
  CHECK_OK(kiln_compiler_create(KILN_COMPILER_ABI_VERSION, &c));
  CHECK_OK(kiln_compiler_load_model(c, plain));
  CHECK_OK(kiln_compiler_compile(c));
  CHECK(kiln_compiler_host_nodes(c) == 0 && kiln_compiler_staged_count(c, 1) == 0);
  CHECK_ERR_ALL(kiln_compiler_runner_create(c, "cpu", &r), KILN_INVALID_ARGUMENT, "kiln_compiler_module");
  kiln_compiler_destroy(c);
}

/* Runs |cmd| through the shell; its stdout and stderr into |out|. */
static int shell(const char* cmd, char* out, size_t n) {
  FILE* f = popen(cmd, "r");
  if (!f) return -1;
  size_t got = fread(out, 1, n - 1, f);
  out[got] = 0;
  return pclose(f);
}

static void test_cli(void) {
  const char* cli = getenv("KILN_CLI");
  if (!cli) {
    printf("  (KILN_CLI not set: kiln info/compile not checked)\n");
    return;
  }
  static char out[1 << 16];
  char cmd[2048];
  snprintf(cmd, sizeof cmd, "'%s' info '%s' 2>&1", cli, g_model);
  CHECK(shell(cmd, out, sizeof out) == 0);
  CHECK_MSG(strstr(out, "staged: ") && strstr(out, "3 of them host nodes"), "%s", out);
  CHECK(strstr(out, "  node 'nms' (NonMaxSuppression) runs on the host") != NULL);
  CHECK(strstr(out, "  node 'topk' (TopK) runs on the host: its K is known only at run time") != NULL);
  snprintf(cmd, sizeof cmd, "'%s' compile '%s' -o '%s/d.kiln' 2>&1", cli, g_model, g_dir);
  CHECK(shell(cmd, out, sizeof out) != 0);
  /* the Gather after the NMS is a stage reading a data-dependent value,
   * which staged modules do not store yet */
  CHECK_MSG(strstr(out, "node 'pick' (Gather) reads 'sel', whose size depends on data (made by node 'nms')") &&
                strstr(out, "kiln run") && strstr(out, "kiln_compiler_runner_create"),
            "%s", out);
}

/* A model `kiln compile` stores as a staged module: stages of fixed sizes
 * around NonMaxSuppression and NonZero --
 *   sel = NonMaxSuppression(boxes, 2 * scores, 3, iou 0.5, score 0.1)   [k,3]
 *   nz = NonZero(Relu(scores - 0.3))                                    [3,m]
 *   r = Relu(scores - 0.3)                                              [1,1,NB]
 * kiln_compiler_module gives the module's bytes (a "staged" report line
 * says so), libkiln_rt runs them with the runner's outputs, bit for bit. */
static void test_module(void) {
  char model[700];
  snprintf(model, sizeof model, "%s/nms_nz.onnx", g_dir);
  bm_model_t b;
  bm_init(&b, 13);
  int64_t bd[3] = {1, NB, 4}, sd[3] = {1, 1, NB}, one[1] = {1};
  bm_input(&b, "boxes", BM_F32, 3, bd);
  bm_input(&b, "scores", BM_F32, 3, sd);
  const int64_t max_out = 3;
  const float iou = 0.5f, thr = 0.1f, cut = 0.3f, twice = 2.0f;
  bm_initializer(&b, "max_out", BM_I64, 1, one, &max_out, sizeof max_out);
  bm_initializer(&b, "iou", BM_F32, 1, one, &iou, sizeof iou);
  bm_initializer(&b, "thr", BM_F32, 1, one, &thr, sizeof thr);
  bm_initializer(&b, "cut", BM_F32, 1, one, &cut, sizeof cut);
  bm_initializer(&b, "twice", BM_F32, 1, one, &twice, sizeof twice);
  bm_node(&b, "Mul", "scale", "scores,twice", "s2");
  bm_node(&b, "NonMaxSuppression", "nms", "boxes,s2,max_out,iou,thr", "sel");
  bm_node(&b, "Sub", "minus", "scores,cut", "d");
  bm_node(&b, "Relu", "relu", "d", "r");
  bm_node(&b, "NonZero", "nz", "r", "nzi");
  bm_output(&b, "sel");
  bm_output(&b, "nzi");
  bm_output(&b, "r");
  CHECK(bm_write(&b, model));
  bm_free(&b);

  kiln_compiler_t* c = NULL;
  CHECK_OK(kiln_compiler_create(KILN_COMPILER_ABI_VERSION, &c));
  if (!c) return;
  kiln_allocator_t al = kiln_allocator_system();
  kiln_compiler_runner_t* r = NULL;
  kiln_module_t* m = NULL;
  kiln_device_t* d = NULL;
  kiln_session_t* s = NULL;
  kiln_array_t in[2] = {{0}, {0}}, want[3], got[3];
  memset(want, 0, sizeof want);
  memset(got, 0, sizeof got);
  const void* data = NULL;
  size_t n = 0;
  if (!CHECK_OK(kiln_compiler_load_model(c, model)) || !CHECK_OK(kiln_compiler_compile(c))) goto done;
  CHECK(kiln_compiler_host_nodes(c) == 2);
  CHECK(has_line(c, "staged", "staged: module of 4 segments"));
  if (!CHECK_OK(kiln_compiler_module(c, &data, &n))) goto done;
  CHECK(n > 0 && data != NULL);
  char path[800];
  snprintf(path, sizeof path, "%s/nms_nz.kiln", g_dir);
  CHECK_OK(kiln_compiler_write_module(c, path));
  /* the module's inputs and outputs: a data-dependent axis at its bound */
  if (!CHECK_OK(kiln_module_load_memory(data, n, "nms_nz.kiln", al, &m)) ||
      !CHECK_OK(kiln_device_open("cpu", NULL, al, &d)) || !CHECK_OK(kiln_session_create(m, d, NULL, &s)) ||
      !CHECK_OK(kiln_compiler_runner_create(c, "cpu", &r)))
    goto done;
  kiln_shape_t bs = kiln_shape_make(3, bd), ss = kiln_shape_make(3, sd);
  if (!CHECK_OK(kiln_array_alloc(al, KILN_DTYPE_F32, &bs, &in[0])) ||
      !CHECK_OK(kiln_array_alloc(al, KILN_DTYPE_F32, &ss, &in[1])))
    goto done;
  memcpy(in[0].data, kBoxes, sizeof kBoxes);
  const float sets[2][NB] = {{0.9f, 0.8f, 0.7f, 0.05f, 0.6f, 0.4f}, {0.2f, 0.05f, 0.35f, 0.02f, 0.9f, 0.01f}};
  for (int run = 0; run < 2; ++run) {
    memcpy(in[1].data, sets[run], sizeof sets[run]);
    if (!CHECK_OK(kiln_compiler_runner_run(r, in, want)) || !CHECK_OK(kiln_session_run(s, in, got))) break;
    for (int k = 0; k < 3; ++k) {
      CHECK_MSG(got[k].dtype == want[k].dtype && kiln_shape_equal(&got[k].shape, &want[k].shape) &&
                    got[k].nbytes == want[k].nbytes && !memcmp(got[k].data, want[k].data, want[k].nbytes),
                "run %d output %d: the module's differs from the runner's", run, k);
      kiln_array_free(al, &got[k]);
      kiln_array_free(al, &want[k]);
    }
  }
  /* the first set keeps boxes 0, 2 and 5 (4 under 2; 1 under 0) */
  memcpy(in[1].data, sets[0], sizeof sets[0]);
  if (CHECK_OK(kiln_session_run(s, in, got))) {
    CHECK(got[0].shape.rank == 2 && got[0].shape.dims[0] == 3 && got[0].shape.dims[1] == 3);
    if (got[0].shape.dims[0] == 3)
      CHECK(((int64_t*)got[0].data)[2] == 0 && ((int64_t*)got[0].data)[5] == 2 && ((int64_t*)got[0].data)[8] == 5);
    CHECK(got[1].shape.rank == 2 && got[1].shape.dims[0] == 3 && got[1].shape.dims[1] == 5); /* 5 above 0.3 */
  }
done:
  for (int k = 0; k < 3; ++k) {
    kiln_array_free(al, &got[k]);
    kiln_array_free(al, &want[k]);
  }
  kiln_array_free(al, &in[0]);
  kiln_array_free(al, &in[1]);
  kiln_session_destroy(s);
  kiln_device_release(d);
  kiln_module_release(m);
  kiln_compiler_runner_destroy(r);
  kiln_compiler_destroy(c);
}

int main(void) {
  if (!bm_tmpdir("compiler_staged", g_dir, sizeof g_dir)) {
    fprintf(stderr, "cannot create a temp folder\n");
    return 1;
  }
  write_model();
  RUN(test_detector);
  RUN(test_errors);
  RUN(test_cli);
  RUN(test_module);
  bm_rmtree(g_dir);
  return kiln_test_finish();
}
