/* Staged modules (module section STGS, runtime/program_staged.h): a model
 * with data-dependent output sizes -- a compiled stage, then
 * NonMaxSuppression and NonZero on its outputs -- written here, compiled by
 * kiln_driver_compile (what `kiln compile` runs) to a module, serialised,
 * loaded through the public runtime API and run by a session on the CPU:
 * the outputs (of their real sizes) equal the reference interpreter's for
 * several inputs, and the writer is deterministic. Refused at compile: a
 * stage that reads a data-dependent value (named with the node that reads
 * it). A second model runs the other host kernels, TopK with a run-time K
 * and Compress, against the reference. Bad STGS contents (BAD_INPUTS.md row 15): every truncation of the
 * section, value ids out of range or read before they are made, an unknown
 * op, an unknown attribute, a constant of the wrong size, a stage's corrupt
 * image, the section unknown to an older reader -- each a clear error
 * naming the module, the section or the segment, never a crash. */
#include "bad_model_util.h" /* first: it defines _GNU_SOURCE */

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "api/driver.h"
#include "compiler/ref_exec.h"
#include "frontend/onnx.h"
#include "kiln/runtime.h"
#include "runtime/module_file.h"
#include "runtime/program.h"
#include "runtime/program_staged.h"
#include "targets/registry.h"
#include "testing.h"

static char g_dir[512];
static char g_model[600];
static char g_bad_model[600];

#define NB 6

/* boxes [1,NB,4], scores [1,1,NB] ->
 *   s2 = scores * 2; r = Relu(s2 - 0.6); b2 = boxes + 0        (stage)
 *   sel = NonMaxSuppression(b2, s2, 3, 0.5, 0.2)               [k,3]
 *   nz = NonZero(r)                                             [3,m]
 * outputs sel, nz, r */
static void write_model(void) {
  bm_model_t b;
  bm_init(&b, 13);
  int64_t bd[3] = {1, NB, 4}, sd[3] = {1, 1, NB}, one[1] = {1};
  bm_input(&b, "boxes", BM_F32, 3, bd);
  bm_input(&b, "scores", BM_F32, 3, sd);
  const int64_t max_out = 3;
  const float two = 2.0f, cut = 0.6f, zero = 0.0f, iou = 0.5f, thr = 0.2f;
  bm_initializer(&b, "two", BM_F32, 1, one, &two, sizeof two);
  bm_initializer(&b, "cut", BM_F32, 1, one, &cut, sizeof cut);
  bm_initializer(&b, "zero", BM_F32, 1, one, &zero, sizeof zero);
  bm_initializer(&b, "max_out", BM_I64, 1, one, &max_out, sizeof max_out);
  bm_initializer(&b, "iou", BM_F32, 1, one, &iou, sizeof iou);
  bm_initializer(&b, "thr", BM_F32, 1, one, &thr, sizeof thr);
  bm_node(&b, "Mul", "scale", "scores,two", "s2");
  bm_node(&b, "Sub", "minus", "s2,cut", "d");
  bm_node(&b, "Relu", "relu", "d", "r");
  bm_node(&b, "Add", "shift", "boxes,zero", "b2");
  bm_attr_int(&b, bm_node(&b, "NonMaxSuppression", "nms", "b2,s2,max_out,iou,thr", "sel"), "center_point_box", 0);
  bm_node(&b, "NonZero", "nz", "r", "nz");
  bm_output(&b, "sel");
  bm_output(&b, "nz");
  bm_output(&b, "r");
  snprintf(g_model, sizeof g_model, "%s/det.onnx", g_dir);
  CHECK(bm_write(&b, g_model));
  bm_free(&b);
  /* a stage after the NMS: Gather of the kept rows, which this version does not store */
  bm_init(&b, 13);
  bm_input(&b, "boxes", BM_F32, 3, bd);
  bm_input(&b, "scores", BM_F32, 3, sd);
  bm_initializer(&b, "max_out", BM_I64, 1, one, &max_out, sizeof max_out);
  bm_initializer(&b, "iou", BM_F32, 1, one, &iou, sizeof iou);
  bm_node(&b, "NonMaxSuppression", "nms", "boxes,scores,max_out,iou", "sel");
  bm_node(&b, "Neg", "negate", "sel", "y");
  bm_output(&b, "y");
  snprintf(g_bad_model, sizeof g_bad_model, "%s/after.onnx", g_dir);
  CHECK(bm_write(&b, g_bad_model));
  bm_free(&b);
}

/* The other host kernels of the table: x [2,NB], s [NB] ->
 *   m = s > 0.5; k = ReduceSum(Cast(m, i64), keepdims)          (stage)
 *   c = Compress(x, m, axis 1)                                  [2,cnt]
 *   cf = Compress(s, m)                                         [cnt]
 *   top, topi = TopK(s, k)                                      [k]
 *   low = TopK(s, k, largest 0), indices not read               [k]
 * outputs c, cf, top, topi, low */
static char g_model2[600];

static void write_model2(void) {
  bm_model_t b;
  bm_init(&b, 13);
  int64_t xd[2] = {2, NB}, sd[1] = {NB}, one[1] = {1};
  bm_input(&b, "x", BM_F32, 2, xd);
  bm_input(&b, "s", BM_F32, 1, sd);
  const float half = 0.5f;
  const int64_t axes = 0;
  bm_initializer(&b, "half", BM_F32, 0, NULL, &half, sizeof half);
  bm_initializer(&b, "axes", BM_I64, 1, one, &axes, sizeof axes);
  bm_node(&b, "Greater", "mask", "s,half", "m");
  bm_attr_int(&b, bm_node(&b, "Cast", "to_int", "m", "mi"), "to", BM_I64);
  bm_attr_int(&b, bm_node(&b, "ReduceSum", "count", "mi,axes", "k"), "keepdims", 1);
  bm_attr_int(&b, bm_node(&b, "Compress", "keep_cols", "x,m", "c"), "axis", 1);
  bm_node(&b, "Compress", "keep_flat", "s,m", "cf");
  bm_node(&b, "TopK", "top", "s,k", "top,topi");
  bm_attr_int(&b, bm_node(&b, "TopK", "low", "s,k", "low,"), "largest", 0);
  bm_output(&b, "c");
  bm_output(&b, "cf");
  bm_output(&b, "top");
  bm_output(&b, "topi");
  bm_output(&b, "low");
  snprintf(g_model2, sizeof g_model2, "%s/ops.onnx", g_dir);
  CHECK(bm_write(&b, g_model2));
  bm_free(&b);
}

static kiln_status_t compile(const char* path, kiln_program_t** out) {
  kiln_driver_request_t rq;
  memset(&rq, 0, sizeof rq);
  rq.model_path = path;
  rq.target = kiln_target_find("cpu");
  rq.opt = 1;
  rq.threads = 1;
  rq.fp16_arith = 0;
  kiln_compile_precision_default(&rq.precision);
  kiln_compile_log_t log = {0};
  kiln_status_t s = kiln_driver_compile(&rq, NULL, &log, out);
  kiln_compile_log_free(&log);
  return s;
}

static uint8_t* g_bytes;
static size_t g_len;

static void test_compile(void) {
  kiln_program_t* p = NULL;
  if (!CHECK_OK(compile(g_model, &p))) return;
  CHECK(p->staged != NULL && p->n_kernels == 0 && p->n_inputs == 2 && p->n_outputs == 3);
  int32_t stages = 0, host = 0;
  for (int32_t i = 0; p->staged && i < p->staged->n_segments; ++i) {
    stages += p->staged->segments[i].op == KILN_STAGED_STAGE;
    host += p->staged->segments[i].op != KILN_STAGED_STAGE;
  }
  CHECK_MSG(stages >= 1 && host == 2, "%d stages, %d host nodes", (int)stages, (int)host);
  CHECK_OK(kiln_module_serialize(p, kiln_allocator_system(), &g_bytes, &g_len));
  kiln_program_destroy(p);
  /* parse, then write again: the same bytes */
  kiln_program_t* q = NULL;
  if (g_bytes && CHECK_OK(kiln_module_parse(g_bytes, g_len, "det.kiln", kiln_allocator_system(), &q))) {
    uint8_t* again = NULL;
    size_t n = 0;
    CHECK_OK(kiln_module_serialize(q, kiln_allocator_system(), &again, &n));
    CHECK(n == g_len && again && !memcmp(again, g_bytes, n));
    free(again);
    kiln_program_destroy(q);
  }
}

/* One run of the module and of the reference interpreter on the same
 * inputs: every output of the same dtype, shape and bytes. */
static void run_compare(kiln_session_t* s, const kiln_graph_t* g, const float* boxes, const float* scores) {
  kiln_allocator_t al = kiln_allocator_system();
  int64_t bd[3] = {1, NB, 4}, sd[3] = {1, 1, NB};
  kiln_shape_t bs = kiln_shape_make(3, bd), ss = kiln_shape_make(3, sd);
  kiln_array_t in[2] = {{0}, {0}}, got[3], want[3];
  memset(got, 0, sizeof got);
  memset(want, 0, sizeof want);
  if (!CHECK_OK(kiln_array_alloc(al, KILN_DTYPE_F32, &bs, &in[0])) ||
      !CHECK_OK(kiln_array_alloc(al, KILN_DTYPE_F32, &ss, &in[1])))
    goto done;
  memcpy(in[0].data, boxes, sizeof(float) * NB * 4);
  memcpy(in[1].data, scores, sizeof(float) * NB);
  kiln_ref_options_t ro;
  kiln_ref_options_default(&ro);
  if (!CHECK_OK(kiln_session_run(s, in, got)) || !CHECK_OK(kiln_ref_run(g, in, &ro, want))) goto done;
  for (int i = 0; i < 3; ++i) {
    bool same = got[i].dtype == want[i].dtype && got[i].shape.rank == want[i].shape.rank &&
                !memcmp(got[i].shape.dims, want[i].shape.dims, sizeof(int64_t) * (size_t)want[i].shape.rank) &&
                got[i].nbytes == want[i].nbytes && (!want[i].nbytes || !memcmp(got[i].data, want[i].data, want[i].nbytes));
    CHECK_MSG(same, "output %d: rank %d [%lld,%lld] vs the reference's [%lld,%lld]", i, got[i].shape.rank,
              (long long)got[i].shape.dims[0], (long long)got[i].shape.dims[1], (long long)want[i].shape.dims[0],
              (long long)want[i].shape.dims[1]);
  }
done:
  for (int i = 0; i < 3; ++i) {
    kiln_array_free(al, &got[i]);
    kiln_array_free(ro.allocator.alloc ? ro.allocator : al, &want[i]);
  }
  kiln_array_free(al, &in[0]);
  kiln_array_free(al, &in[1]);
}

static void test_run(void) {
  if (!g_bytes) return;
  kiln_allocator_t al = kiln_allocator_system();
  kiln_module_t* m = NULL;
  kiln_device_t* d = NULL;
  kiln_session_t* s = NULL;
  kiln_graph_t* g = NULL;
  if (!CHECK_OK(kiln_module_load_memory(g_bytes, g_len, "det.kiln", al, &m)) ||
      !CHECK_OK(kiln_device_open("cpu", NULL, al, &d)) || !CHECK_OK(kiln_session_create(m, d, NULL, &s)) ||
      !CHECK_OK(kiln_onnx_load_model(g_model, NULL, al, &g)))
    goto done;
  /* y1 x1 y2 x2: 1 overlaps 0 (IoU 0.82), 4 overlaps 2 */
  const float boxes[NB * 4] = {0, 0, 1, 1, 0, 0.1f, 1, 1.1f, 0, 2, 1, 3, 0, 4, 1, 5, 0, 2.1f, 1, 3.1f, 0, 6, 1, 7};
  const float sets[4][NB] = {{0.9f, 0.8f, 0.7f, 0.05f, 0.6f, 0.4f},
                             {0.01f, 0.02f, 0.03f, 0.04f, 0.05f, 0.06f}, /* nothing kept, no nonzero */
                             {0.5f, 0.5f, 0.5f, 0.5f, 0.5f, 0.5f},        /* ties: by index */
                             {0.2f, 0.95f, 0.31f, 0.33f, 0.9f, 0.12f}};
  for (int k = 0; k < 4; ++k) run_compare(s, g, boxes, sets[k]);
  /* a wrong input shape is refused naming the input */
  kiln_array_t in[2] = {{0}, {0}}, out[3];
  memset(out, 0, sizeof out);
  int64_t bd[3] = {1, NB + 1, 4}, sd[3] = {1, 1, NB};
  kiln_shape_t bs = kiln_shape_make(3, bd), ss = kiln_shape_make(3, sd);
  if (CHECK_OK(kiln_array_alloc(al, KILN_DTYPE_F32, &bs, &in[0])) && CHECK_OK(kiln_array_alloc(al, KILN_DTYPE_F32, &ss, &in[1])))
    CHECK_ERR_ALL(kiln_session_run(s, in, out), KILN_INVALID_ARGUMENT, "det.onnx", "input 'boxes'");
  kiln_array_free(al, &in[0]);
  kiln_array_free(al, &in[1]);
done:
  kiln_graph_destroy(g);
  kiln_session_destroy(s);
  kiln_device_release(d);
  kiln_module_release(m);
}

static void test_refused(void) {
  kiln_program_t* p = NULL;
  CHECK_ERR_ALL(compile(g_bad_model, &p), KILN_UNSUPPORTED, "after.onnx", "node 'negate' (Neg) reads 'sel'",
                "made by node 'nms'", "kiln run");
  CHECK(p == NULL);
}

static uint8_t* g_bytes2;
static size_t g_len2;

/* TopK with a run-time K (both outputs, and the values alone) and Compress
 * (along an axis and flattened) run by libkiln_rt equal the reference's. */
static void test_ops(void) {
  kiln_program_t* p = NULL;
  if (!CHECK_OK(compile(g_model2, &p))) return;
  int32_t ops[KILN_STAGED_OP_COUNT_] = {0};
  for (int32_t i = 0; i < p->staged->n_segments; ++i) ops[p->staged->segments[i].op]++;
  CHECK_MSG(ops[KILN_STAGED_STAGE] >= 1 && ops[KILN_STAGED_TOPK] == 2 && ops[KILN_STAGED_COMPRESS] == 2,
            "%d stages, %d TopK, %d Compress", (int)ops[0], (int)ops[KILN_STAGED_TOPK], (int)ops[KILN_STAGED_COMPRESS]);
  for (int32_t i = 0; i < p->staged->n_segments; ++i) /* the indices of 'low' are made and dropped */
    if (!strcmp(p->staged->segments[i].name, "low")) CHECK(p->staged->segments[i].n_out == 2 && p->staged->segments[i].out[1] == -1);
  CHECK_OK(kiln_module_serialize(p, kiln_allocator_system(), &g_bytes2, &g_len2));
  kiln_program_destroy(p);
  if (!g_bytes2) return;
  kiln_allocator_t al = kiln_allocator_system();
  kiln_module_t* m = NULL;
  kiln_device_t* d = NULL;
  kiln_session_t* ses = NULL;
  kiln_graph_t* g = NULL;
  kiln_array_t in[2] = {{0}, {0}}, got[5], want[5];
  memset(got, 0, sizeof got);
  memset(want, 0, sizeof want);
  int64_t xd[2] = {2, NB}, sd[1] = {NB};
  kiln_shape_t xs = kiln_shape_make(2, xd), ss = kiln_shape_make(1, sd);
  kiln_ref_options_t ro;
  kiln_ref_options_default(&ro);
  if (!CHECK_OK(kiln_module_load_memory(g_bytes2, g_len2, "ops.kiln", al, &m)) ||
      !CHECK_OK(kiln_device_open("cpu", NULL, al, &d)) || !CHECK_OK(kiln_session_create(m, d, NULL, &ses)) ||
      !CHECK_OK(kiln_onnx_load_model(g_model2, NULL, al, &g)) || !CHECK_OK(kiln_array_alloc(al, KILN_DTYPE_F32, &xs, &in[0])) ||
      !CHECK_OK(kiln_array_alloc(al, KILN_DTYPE_F32, &ss, &in[1])))
    goto done;
  for (int i = 0; i < 2 * NB; ++i) ((float*)in[0].data)[i] = (float)(i * 3 % 7) - 2.5f;
  const float sets[4][NB] = {{0.9f, 0.1f, 0.7f, 0.2f, 0.6f, 0.4f},
                             {0.1f, 0.2f, 0.3f, 0.4f, 0.45f, 0.0f}, /* K 0, nothing kept */
                             {0.8f, 0.8f, 0.6f, 0.8f, 0.6f, 0.9f},  /* ties: by index; all kept */
                             {0.55f, -1.0f, 0.51f, 0.3f, 2.0f, 0.52f}};
  for (int k = 0; k < 4; ++k) {
    memcpy(in[1].data, sets[k], sizeof sets[k]);
    if (!CHECK_OK(kiln_session_run(ses, in, got)) || !CHECK_OK(kiln_ref_run(g, in, &ro, want))) break;
    for (int i = 0; i < 5; ++i) {
      bool same = got[i].dtype == want[i].dtype && kiln_shape_equal(&got[i].shape, &want[i].shape) &&
                  got[i].nbytes == want[i].nbytes && (!want[i].nbytes || !memcmp(got[i].data, want[i].data, want[i].nbytes));
      CHECK_MSG(same, "set %d output %d: rank %d [%lld] vs the reference's [%lld]", k, i, got[i].shape.rank,
                (long long)got[i].shape.dims[got[i].shape.rank - 1], (long long)want[i].shape.dims[want[i].shape.rank - 1]);
      kiln_array_free(al, &got[i]);
      kiln_array_free(ro.allocator.alloc ? ro.allocator : al, &want[i]);
    }
  }
  /* the first set: columns 0, 2, 4 kept; the top three 0.9 0.7 0.6 */
  memcpy(in[1].data, sets[0], sizeof sets[0]);
  if (CHECK_OK(kiln_session_run(ses, in, got))) {
    CHECK(got[0].shape.rank == 2 && got[0].shape.dims[0] == 2 && got[0].shape.dims[1] == 3);
    CHECK(got[2].shape.dims[0] == 3 && ((float*)got[2].data)[1] == 0.7f && ((int64_t*)got[3].data)[2] == 4);
    CHECK(got[4].shape.dims[0] == 3 && ((float*)got[4].data)[0] == 0.1f);
  }
done:
  for (int i = 0; i < 5; ++i) {
    kiln_array_free(al, &got[i]);
    kiln_array_free(ro.allocator.alloc ? ro.allocator : al, &want[i]);
  }
  kiln_array_free(al, &in[0]);
  kiln_array_free(al, &in[1]);
  kiln_graph_destroy(g);
  kiln_session_destroy(ses);
  kiln_device_release(d);
  kiln_module_release(m);
}

/* ---- bad STGS contents ------------------------------------------------------ */

/* |p| re-serialised and parsed: the error must have every string. */
static void expect_bad(kiln_program_t* p, const char* a, const char* b) {
  uint8_t* bytes = NULL;
  size_t n = 0;
  if (CHECK_OK(kiln_module_serialize(p, kiln_allocator_system(), &bytes, &n))) {
    kiln_program_t* q = NULL;
    CHECK_ERR_ALL(kiln_module_parse(bytes, n, "bad.kiln", kiln_allocator_system(), &q), KILN_PARSE_ERROR, "bad.kiln", a, b);
    kiln_program_destroy(q);
  }
  free(bytes);
}

static kiln_program_t* fresh(void) {
  kiln_program_t* p = NULL;
  if (!CHECK_OK(kiln_module_parse(g_bytes, g_len, "det.kiln", kiln_allocator_system(), &p))) return NULL;
  return p;
}

static int32_t find_op(const kiln_program_t* p, int32_t op) {
  for (int32_t i = 0; i < p->staged->n_segments; ++i)
    if (p->staged->segments[i].op == op) return i;
  return 0;
}

static void test_bad_contents(void) {
  if (!g_bytes) return;
  kiln_program_t* p;
  if ((p = fresh())) { /* a value id past the table */
    kiln_staged_segment_t* s = &p->staged->segments[find_op(p, KILN_STAGED_NMS)];
    s->in[0] = p->staged->n_values + 7;
    expect_bad(p, "section 'STGS'", "segment");
    expect_bad(p, "('nms')", "input 0 is value");
    kiln_program_destroy(p);
  }
  if ((p = fresh())) { /* read before it is made: a stage's output read by a segment before it */
    const int32_t h = find_op(p, KILN_STAGED_NONZERO);
    p->staged->segments[0].in[0] = p->staged->segments[h].out[0];
    expect_bad(p, "segment 0", "before anything makes it");
    kiln_program_destroy(p);
  }
  if ((p = fresh())) { /* an attribute NMS does not have */
    kiln_staged_segment_t* s = &p->staged->segments[find_op(p, KILN_STAGED_NMS)];
    CHECK(s->n_attrs == 1);
    if (s->n_attrs == 1) {
      s->attrs[0].name[0] = 'X';
      expect_bad(p, "('nms')", "has no attribute 'Xenter_point_box'");
    }
    kiln_program_destroy(p);
  }
  if ((p = fresh())) { /* a constant whose bytes are not its shape's */
    for (int32_t i = 0; i < p->staged->n_values; ++i)
      if (p->staged->values[i].data) {
        p->staged->values[i].nbytes -= 1;
        break;
      }
    expect_bad(p, "constant value", "bytes for its shape's");
    kiln_program_destroy(p);
  }
  if ((p = fresh())) { /* a model output nothing makes */
    p->staged->model_out[0] = p->staged->model_in[0];
    expect_bad(p, "model output 0", "differs");
    kiln_program_destroy(p);
  }
  kiln_program_t* q = NULL;
  if (g_bytes2 && CHECK_OK(kiln_module_parse(g_bytes2, g_len2, "ops.kiln", kiln_allocator_system(), &q))) {
    kiln_staged_segment_t* t = &q->staged->segments[find_op(q, KILN_STAGED_TOPK)];
    const int32_t v = t->out[1];
    t->out[1] = t->out[0]; /* TopK's indices as a value of the input's dtype */
    t->out[0] = v;
    expect_bad(q, "('top')", "output 0 is not of input 0's dtype");
    t->out[0] = t->out[1];
    t->out[1] = -1;
    expect_bad(q, "model output 3", "nothing makes");
    t->out[1] = v;
    t->out[0] = -1; /* only outputs after the first may be dropped */
    expect_bad(q, "('top')", "output 0 is value -1");
    kiln_program_destroy(q);
  }
  if (g_bytes2 && CHECK_OK(kiln_module_parse(g_bytes2, g_len2, "ops.kiln", kiln_allocator_system(), &q))) {
    kiln_staged_segment_t* c = &q->staged->segments[find_op(q, KILN_STAGED_COMPRESS)];
    CHECK(c->n_attrs == 1 && !strcmp(c->attrs[0].name, "axis"));
    if (c->n_attrs == 1) {
      c->attrs[0].name[0] = 'b';
      expect_bad(q, "('keep_cols')", "Compress has no attribute 'bxis'");
    }
    if (c->n_attrs == 1) c->attrs[0].name[0] = 'a'; /* TopK has an axis too */
    c->op = KILN_STAGED_TOPK;
    c->out[0] = q->staged->segments[find_op(q, KILN_STAGED_TOPK)].out[1];
    expect_bad(q, "('keep_cols')", "made before");
    kiln_program_destroy(q);
  }
  if ((p = fresh())) { /* a NonZero with two outputs */
    kiln_staged_segment_t* s = &p->staged->segments[find_op(p, KILN_STAGED_NONZERO)];
    s->op = KILN_STAGED_NMS;
    expect_bad(p, "NonMaxSuppression takes 2..5 inputs", "segment");
    kiln_program_destroy(p);
  }
}

/* The STGS section's offset and payload length in the file. */
static bool find_stgs(const uint8_t* d, size_t n, size_t* off, uint64_t* len) {
  size_t o = KILN_MODULE_HEADER_LEN;
  while (o + 16 <= n) {
    uint32_t tag;
    uint64_t l;
    memcpy(&tag, d + o, 4);
    memcpy(&l, d + o + 8, 8);
    if (tag == KILN_MODULE_TAG_STGS) {
      *off = o;
      *len = l;
      return true;
    }
    o += 16 + (size_t)l;
    o += (8 - o % 8) % 8;
  }
  return false;
}

/* |d| (n bytes, STGS at |off|) with its payload cut to |cut| bytes and the
 * file resealed: parsed from an exact-size copy so ASan sees overreads. */
static void parse_edited(const uint8_t* d, size_t n, const char* a, const char* b) {
  uint8_t* c = malloc(n);
  memcpy(c, d, n);
  kiln_module_reseal(c, n);
  kiln_program_t* q = NULL;
  kiln_status_t s = kiln_module_parse(c, n, "bad.kiln", kiln_allocator_system(), &q);
  CHECK_MSG(s && strstr(kiln_status_message(s), "bad.kiln") && strstr(kiln_status_message(s), a) &&
                strstr(kiln_status_message(s), b),
            "%s", s ? kiln_status_message(s) : "parsed");
  kiln_status_free(s);
  kiln_program_destroy(q);
  free(c);
}

/* A module whose table bounds NMS's output below what a run makes: the run
 * is refused naming the segment, not written past the bound. */
static void test_bound_too_small(void) {
  if (!g_bytes) return;
  kiln_program_t* p = fresh();
  if (!p) return;
  const int32_t v = p->staged->segments[find_op(p, KILN_STAGED_NMS)].out[0];
  p->staged->values[v].dims[0] = 1;
  for (int32_t i = 0; i < p->n_outputs; ++i)
    if (p->staged->model_out[i] == v) {
      p->buffers[p->outputs[i]].shape[0] = 1;
      p->buffers[p->outputs[i]].bytes = 3 * sizeof(int64_t);
    }
  uint8_t* bytes = NULL;
  size_t n = 0;
  kiln_allocator_t al = kiln_allocator_system();
  kiln_module_t* m = NULL;
  kiln_device_t* d = NULL;
  kiln_session_t* s = NULL;
  kiln_array_t in[2] = {{0}, {0}}, out[3];
  memset(out, 0, sizeof out);
  int64_t bd[3] = {1, NB, 4}, sd[3] = {1, 1, NB};
  kiln_shape_t bs = kiln_shape_make(3, bd), ss = kiln_shape_make(3, sd);
  if (CHECK_OK(kiln_module_serialize(p, al, &bytes, &n)) && CHECK_OK(kiln_module_load_memory(bytes, n, "b.kiln", al, &m)) &&
      CHECK_OK(kiln_device_open("cpu", NULL, al, &d)) && CHECK_OK(kiln_session_create(m, d, NULL, &s)) &&
      CHECK_OK(kiln_array_alloc(al, KILN_DTYPE_F32, &bs, &in[0])) && CHECK_OK(kiln_array_alloc(al, KILN_DTYPE_F32, &ss, &in[1]))) {
    const float boxes[NB * 4] = {0, 0, 1, 1, 0, 2, 1, 3, 0, 4, 1, 5, 0, 6, 1, 7, 0, 8, 1, 9, 0, 10, 1, 11};
    const float scores[NB] = {0.9f, 0.8f, 0.7f, 0.6f, 0.5f, 0.4f}; /* apart: three kept */
    memcpy(in[0].data, boxes, sizeof boxes);
    memcpy(in[1].data, scores, sizeof scores);
    CHECK_ERR_ALL(kiln_session_run(s, in, out), KILN_INVALID_ARGUMENT, "segment", "('nms')", "does not fit value");
  }
  kiln_array_free(al, &in[0]);
  kiln_array_free(al, &in[1]);
  kiln_session_destroy(s);
  kiln_device_release(d);
  kiln_module_release(m);
  free(bytes);
  kiln_program_destroy(p);
}

/* Every truncation of module |bytes|' STGS payload (the section's length
 * shrunk with it, the rest of the file dropped): a parse error naming it. */
static void truncations(const uint8_t* bytes, size_t blen) {
  size_t off = 0;
  uint64_t len = 0;
  const bool found = bytes && find_stgs(bytes, blen, &off, &len);
  CHECK(found);
  if (!found) return;
  for (uint64_t cut = 0; cut < len; cut += (cut < 256 ? 1 : 97)) {
    size_t n = off + 16 + (size_t)cut;
    n += (8 - n % 8) % 8;
    uint8_t* c = calloc(1, n);
    memcpy(c, bytes, off + 16 + (size_t)cut);
    memcpy(c + off + 8, &cut, 8);
    /* STGS is the last section the writer puts before optional ones; keep
     * only the sections up to it */
    uint32_t count = 0;
    for (size_t o = KILN_MODULE_HEADER_LEN; o <= off; ++count) {
      uint64_t l;
      memcpy(&l, bytes + o + 8, 8);
      o += 16 + (size_t)l;
      o += (8 - o % 8) % 8;
    }
    memcpy(c + KILN_MODULE_OFF_SECTIONS, &count, 4);
    uint64_t total = n;
    memcpy(c + KILN_MODULE_OFF_TOTAL_LEN, &total, 8);
    parse_edited(c, n, "section 'STGS'", "");
    free(c);
  }
}

static void test_bad_bytes(void) {
  truncations(g_bytes2, g_len2);
  truncations(g_bytes, g_len);
  size_t off = 0;
  uint64_t len = 0;
  const bool found = g_bytes && find_stgs(g_bytes, g_len, &off, &len);
  if (!found) return;
  /* an op number past the table */
  uint8_t* c = malloc(g_len);
  memcpy(c, g_bytes, g_len);
  /* the first segment's op follows the values and the model ids: find it
   * by parsing, then poke its u32 (the first stage's 0 becomes 9) */
  kiln_program_t* p = fresh();
  if (p) {
    size_t at = off + 16 + 8;
    for (int32_t i = 0; i < p->staged->n_values; ++i) {
      const kiln_staged_value_t* v = &p->staged->values[i];
      at += 12 + 8 * (size_t)v->rank + 1 + (v->data ? 8 + (size_t)v->nbytes : 0);
    }
    at += 8 + 4 * (size_t)p->n_inputs + 8 + 4 * (size_t)p->n_outputs + 8;
    uint32_t op;
    memcpy(&op, c + at, 4);
    CHECK(op == (uint32_t)p->staged->segments[0].op);
    op = 9;
    memcpy(c + at, &op, 4);
    parse_edited(c, g_len, "segment 0", "host op number 9 unknown");
    /* a byte inside the first stage's image: its own parse names the segment */
    memcpy(c, g_bytes, g_len);
    const size_t name_len = strlen(p->staged->segments[0].name);
    size_t img = at + 4 + 4 + name_len + 8 + 4 * (size_t)p->staged->segments[0].n_in + 8 +
                 4 * (size_t)p->staged->segments[0].n_out + 8 + 8;
    CHECK(!memcmp(c + img, KILN_MODULE_MAGIC, KILN_MODULE_MAGIC_LEN));
    c[img + 60] ^= 0x5a;
    parse_edited(c, g_len, "segment 0", "checksum");
    kiln_program_destroy(p);
  }
  /* the section not required-and-known: an older reader's view (the tag
   * changed) refuses the module by the section */
  memcpy(c, g_bytes, g_len);
  c[off + 3] = 'X';
  parse_edited(c, g_len, "STGX", "required section unknown");
  free(c);
}

int main(void) {
  if (!bm_tmpdir("staged_module", g_dir, sizeof g_dir)) {
    fprintf(stderr, "cannot create a temp folder\n");
    return 1;
  }
  write_model();
  write_model2();
  RUN(test_compile);
  RUN(test_run);
  RUN(test_refused);
  RUN(test_ops);
  RUN(test_bad_contents);
  RUN(test_bound_too_small);
  RUN(test_bad_bytes);
  free(g_bytes);
  free(g_bytes2);
  bm_rmtree(g_dir);
  return kiln_test_finish();
}
