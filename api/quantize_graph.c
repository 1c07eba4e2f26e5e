/* `--precision int8`: a QDQ plan applied to a graph in memory (see
 * quantize_graph.h). */
#include "api/quantize_graph.h"

#include <dirent.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "compiler/calibrate.h"
#include "compiler/ref_exec.h"
#include "frontend/onnx.h"
#include "kiln/npy.h"

/* The folder holding the first calibration sample: |dir| itself when it has
 * |first_input|.npy, else its first subfolder by name (NULL when none). */
static char* first_sample_dir(const char* dir, const char* first_input) {
  char path[4096];
  struct stat st;
  snprintf(path, sizeof path, "%s/%s.npy", dir, first_input);
  if (stat(path, &st) == 0 && S_ISREG(st.st_mode)) return strdup(dir);
  DIR* d = opendir(dir);
  if (!d) return NULL;
  char* best = NULL;
  struct dirent* e;
  while ((e = readdir(d))) {
    if (e->d_name[0] == '.') continue;
    snprintf(path, sizeof path, "%s/%s", dir, e->d_name);
    if (stat(path, &st) != 0 || !S_ISDIR(st.st_mode)) continue;
    if (!best || strcmp(path, best) < 0) {
      free(best);
      best = strdup(path);
    }
  }
  closedir(d);
  return best;
}

void kiln_quantize_bind_dims(kiln_graph_t* g, const char* dir) {
  if (!g->n_inputs) return;
  char* first = first_sample_dir(dir, g->tensors[g->inputs[0]].name);
  if (!first) return;
  for (int32_t i = 0; i < g->n_inputs; ++i) {
    kiln_tensor_t* t = &g->tensors[g->inputs[i]];
    bool sym = false;
    for (int32_t d = 0; d < t->shape.rank; ++d) sym = sym || kiln_dim_symbol(t->shape.dims[d]);
    if (!sym || strchr(t->name, '/')) continue;
    char path[4096];
    snprintf(path, sizeof path, "%s/%s.npy", first, t->name);
    kiln_array_t a;
    kiln_status_t s = kiln_npy_read(path, kiln_allocator_system(), &a);
    if (s) {
      kiln_status_free(s);
      continue;
    }
    if (a.shape.rank == t->shape.rank)
      for (int32_t d = 0; d < t->shape.rank; ++d) {
        int32_t k = kiln_dim_symbol(t->shape.dims[d]);
        if (!k) continue;
        for (int32_t j = 0; j < g->n_inputs; ++j) {
          kiln_tensor_t* u = &g->tensors[g->inputs[j]];
          for (int32_t e = 0; e < u->shape.rank; ++e)
            if (kiln_dim_symbol(u->shape.dims[e]) == k) u->shape.dims[e] = a.shape.dims[d];
        }
      }
    kiln_array_free(kiln_allocator_system(), &a);
  }
  free(first);
}

/* |base| + |suffix|, made unique in |g| by a counter (a model may already
 * hold "x_scale"). Written into |buf|. */
static const char* fresh_name(const kiln_graph_t* g, const char* base, const char* suffix, char* buf, size_t n) {
  snprintf(buf, n, "%s%s", base, suffix);
  for (int k = 1; kiln_graph_find_tensor(g, buf) >= 0; ++k) snprintf(buf, n, "%s%s_%d", base, suffix, k);
  return buf;
}

/* A new initializer |base||suffix| of |dtype| and |shape| (rank 0 or 1),
 * filled by |fill| (|count| values of the dtype's size) or zeroed. */
static kiln_status_t add_const(kiln_graph_t* g, const char* base, const char* suffix, kiln_dtype_t dtype, int32_t rank,
                               int64_t count, const void* fill, char* name, size_t name_len) {
  kiln_shape_t sh = kiln_shape_make(rank, &count);
  kiln_array_t a;
  KILN_RETURN_IF_ERROR(kiln_array_alloc(g->allocator, dtype, &sh, &a));
  if (fill) memcpy(a.data, fill, (size_t)count * kiln_dtype_size(dtype));
  fresh_name(g, base, suffix, name, name_len);
  kiln_status_t s = kiln_graph_add_initializer(g, name, &a, NULL);
  if (s) kiln_array_free(g->allocator, &a);
  return s;
}

/* Every node but |except| that reads tensor |from| reads |to| instead. */
static void move_readers(kiln_graph_t* g, int32_t from, int32_t to, int32_t except) {
  for (int32_t n = 0; n < g->n_nodes; ++n) {
    if (n == except) continue;
    kiln_node_t* nd = &g->nodes[n];
    for (int32_t i = 0; i < nd->n_inputs; ++i)
      if (nd->inputs[i] == from) nd->inputs[i] = to;
  }
}

static kiln_status_t apply_act(kiln_graph_t* g, const kiln_qdq_act_t* a) {
  int32_t t = kiln_graph_find_tensor(g, a->name);
  if (t < 0)
    return kiln_make_status(KILN_INVALID_ARGUMENT, "int8: tensor '%s' of the quantization plan is not in the graph",
                            a->name);
  char scale[512], zp[512], q[512], dq[512], node[512];
  uint8_t zbytes[4] = {0};
  if (a->dtype == KILN_DTYPE_U8) zbytes[0] = (uint8_t)a->zero_point;
  else {
    int8_t z = (int8_t)a->zero_point;
    memcpy(zbytes, &z, 1);
  }
  KILN_RETURN_IF_ERROR(add_const(g, a->name, "_scale", KILN_DTYPE_F32, 0, 1, &a->scale, scale, sizeof scale));
  KILN_RETURN_IF_ERROR(add_const(g, a->name, "_zero_point", a->dtype, 0, 1, zbytes, zp, sizeof zp));
  fresh_name(g, a->name, "_quantized", q, sizeof q);
  const char* qin[3] = {a->name, scale, zp};
  const char* qout[1] = {q};
  int32_t qnode = -1;
  snprintf(node, sizeof node, "%s_QuantizeLinear", a->name);
  KILN_RETURN_IF_ERROR(kiln_graph_add_node(g, "QuantizeLinear", node, 3, qin, 1, qout, 0, NULL, &qnode));
  fresh_name(g, a->name, "_dequantized", dq, sizeof dq);
  const char* din[3] = {q, scale, zp};
  const char* dout[1] = {dq};
  int32_t dnode = -1;
  snprintf(node, sizeof node, "%s_DequantizeLinear", a->name);
  KILN_RETURN_IF_ERROR(kiln_graph_add_node(g, "DequantizeLinear", node, 3, din, 1, dout, 0, NULL, &dnode));
  move_readers(g, t, g->nodes[dnode].outputs[0], qnode);
  return NULL;
}

static kiln_status_t apply_const(kiln_graph_t* g, const kiln_qdq_const_t* c) {
  int32_t t = kiln_graph_find_tensor(g, c->name);
  if (t < 0 || !(g->tensors[t].flags & KILN_TENSOR_CONST))
    return kiln_make_status(KILN_INVALID_ARGUMENT,
                            "int8: weight '%s' of the quantization plan is not a constant of the graph", c->name);
  char qname[512], scale[512], zp[512], dq[512], node[512];
  kiln_array_t q;
  KILN_RETURN_IF_ERROR(kiln_array_clone(g->allocator, &c->q, &q));
  fresh_name(g, c->name, "_quantized", qname, sizeof qname);
  kiln_status_t s = kiln_graph_add_initializer(g, qname, &q, NULL);
  if (s) {
    kiln_array_free(g->allocator, &q);
    return s;
  }
  int32_t rank = c->axis >= 0 ? 1 : 0;
  KILN_RETURN_IF_ERROR(add_const(g, c->name, "_scale", KILN_DTYPE_F32, rank, c->n_scales, c->scales, scale,
                                 sizeof scale));
  KILN_RETURN_IF_ERROR(add_const(g, c->name, "_zero_point", c->q.dtype, rank, c->n_scales, NULL, zp, sizeof zp));
  fresh_name(g, c->name, "_dequantized", dq, sizeof dq);
  const char* din[3] = {qname, scale, zp};
  const char* dout[1] = {dq};
  kiln_attr_t axis = kiln_attr_make_int("axis", c->axis);
  int32_t dnode = -1;
  snprintf(node, sizeof node, "%s_DequantizeLinear", c->name);
  KILN_RETURN_IF_ERROR(
      kiln_graph_add_node(g, "DequantizeLinear", node, 3, din, 1, dout, c->axis >= 0 ? 1 : 0, &axis, &dnode));
  /* The float weight is no longer read; the planner places only what
   * kernels read. */
  move_readers(g, t, g->nodes[dnode].outputs[0], dnode);
  return NULL;
}

kiln_status_t kiln_qdq_plan_apply(kiln_graph_t* g, const kiln_qdq_plan_t* plan) {
  if (g->opset < 13)
    return kiln_make_status(KILN_UNSUPPORTED,
                            "%s: opset %lld; int8 needs opset 13 or newer (per-channel DequantizeLinear; "
                            "re-export the model at opset >= 13)",
                            g->source && *g->source ? g->source : "model", (long long)g->opset);
  for (int32_t i = 0; i < plan->n_consts; ++i) KILN_RETURN_IF_ERROR(apply_const(g, &plan->consts[i]));
  for (int32_t i = 0; i < plan->n_acts; ++i) KILN_RETURN_IF_ERROR(apply_act(g, &plan->acts[i]));
  return kiln_graph_prepare(g);
}

/* The model parsed again with its symbolic dims bound to the first
 * calibration sample's sizes, prepared (int8 needs opset 13: checked first). */
static kiln_status_t calibration_graph(const char* model_path, const kiln_graph_t* g, const char* calibrate_dir,
                                       kiln_graph_t** out) {
  if (!calibrate_dir)
    return kiln_make_status(KILN_INVALID_ARGUMENT,
                            "--precision int8 needs --calibrate DIR (calibration inputs: DIR/NAME.npy, or "
                            "DIR/*/NAME.npy per sample)");
  struct stat st;
  if (stat(calibrate_dir, &st) != 0 || !S_ISDIR(st.st_mode))
    return kiln_make_status(KILN_NOT_FOUND, "%s: cannot open the calibration folder (no such folder)", calibrate_dir);
  if (g->opset < 13) return kiln_qdq_plan_apply((kiln_graph_t*)g, &(kiln_qdq_plan_t){0}); /* its error */
  kiln_graph_t* cg = NULL;
  KILN_RETURN_IF_ERROR(kiln_onnx_parse_model(model_path, NULL, kiln_allocator_system(), &cg));
  kiln_quantize_bind_dims(cg, calibrate_dir);
  kiln_status_t s = kiln_graph_prepare(cg);
  if (s) {
    kiln_graph_destroy(cg);
    return s;
  }
  *out = cg;
  return NULL;
}

kiln_status_t kiln_quantize_calibrate(const char* model_path, const kiln_graph_t* g, const char* calibrate_dir,
                                      const kiln_quantize_options_t* o, kiln_compile_log_t* log,
                                      kiln_quant_calibration_t* out) {
  memset(out, 0, sizeof *out);
  KILN_RETURN_IF_ERROR(calibration_graph(model_path, g, calibrate_dir, &out->g));
  kiln_quantize_options_t qo;
  if (o) qo = *o;
  else kiln_quantize_options_default(&qo);
  kiln_calibrate_options_t co;
  kiln_calibrate_options_default(&co);
  co.input_dir = calibrate_dir;
  kiln_status_t s = kiln_calibrate_inputs(out->g, &co, &out->inputs, &out->n);
  if (!s) s = kiln_quantize(out->g, out->inputs, out->n, &qo, &out->r);
  char* text = NULL;
  size_t len = 0;
  FILE* f = s ? NULL : open_memstream(&text, &len);
  if (!s && !f) s = kiln_make_status(KILN_OUT_OF_MEMORY, "int8: cannot open a memory stream for the report");
  if (f) {
    kiln_quant_report_print(out->g, &out->r, f);
    if (fclose(f) != 0) s = kiln_make_status(KILN_OUT_OF_MEMORY, "int8: the report's memory stream failed");
  }
  if (!s) s = kiln_compile_log_text(log, "quantize", text);
  free(text);
  if (s) kiln_quant_calibration_free(out);
  return s;
}

void kiln_quant_calibration_free(kiln_quant_calibration_t* c) {
  kiln_quant_result_free(&c->r);
  if (c->inputs) kiln_calibrate_inputs_free(c->g, c->inputs, c->n);
  kiln_graph_destroy(c->g);
  memset(c, 0, sizeof *c);
}

kiln_status_t kiln_quantize_graph_in_place(const char* model_path, kiln_graph_t* g, const char* calibrate_dir,
                                           const kiln_quantize_options_t* o, kiln_compile_log_t* log) {
  kiln_quant_calibration_t c;
  KILN_RETURN_IF_ERROR(kiln_quantize_calibrate(model_path, g, calibrate_dir, o, log, &c));
  kiln_status_t s = kiln_compile_log_value(log, "quantize", "layers", c.r.n_layers);
  if (!s) s = kiln_compile_log_value(log, "quantize", "layers_float", c.r.n_skipped);
  if (!s) s = kiln_qdq_plan_apply(g, &c.r.plan);
  kiln_quant_calibration_free(&c);
  return s;
}

/* ---- int8 in --precision auto ----------------------------------------- */

/* The plan's entries that the layers with |keep| set use (borrowed). */
static kiln_status_t sub_plan(const kiln_quant_result_t* r, const bool* keep, kiln_qdq_plan_t* p) {
  memset(p, 0, sizeof *p);
  bool* act = calloc((size_t)r->plan.n_acts + 1, 1);
  bool* cst = calloc((size_t)r->plan.n_consts + 1, 1);
  p->acts = calloc((size_t)r->plan.n_acts + 1, sizeof *p->acts);
  p->consts = calloc((size_t)r->plan.n_consts + 1, sizeof *p->consts);
  kiln_status_t s = NULL;
  if (!act || !cst || !p->acts || !p->consts) {
    s = kiln_make_status(KILN_OUT_OF_MEMORY, "int8: out of memory");
  } else {
    for (int32_t l = 0; l < r->n_layers; ++l) {
      if (!keep[l]) continue;
      const kiln_quant_layer_t* L = &r->layers[l];
      int32_t a[3] = {L->act_in, L->act_out, L->act_b}, c[2] = {L->weight, L->bias};
      for (int i = 0; i < 3; ++i)
        if (a[i] >= 0) act[a[i]] = true;
      for (int i = 0; i < 2; ++i)
        if (c[i] >= 0) cst[c[i]] = true;
    }
    for (int32_t i = 0; i < r->plan.n_acts; ++i)
      if (act[i]) p->acts[p->n_acts++] = r->plan.acts[i];
    for (int32_t i = 0; i < r->plan.n_consts; ++i)
      if (cst[i]) p->consts[p->n_consts++] = r->plan.consts[i];
  }
  free(act);
  free(cst);
  if (s) {
    free(p->acts);
    free(p->consts);
    memset(p, 0, sizeof *p);
  }
  return s;
}

typedef struct {
  double rtol, atol;
  double ratio, abs_err; /* worst |got-want| / (atol + rtol |want|), worst |got-want| */
} q_err_t;

static void compare_into(const kiln_array_t* got, const kiln_array_t* want, q_err_t* e) {
  if (got->dtype != KILN_DTYPE_F32 || want->dtype != KILN_DTYPE_F32 || got->nbytes != want->nbytes) {
    if (got->nbytes != want->nbytes || memcmp(got->data, want->data, got->nbytes)) e->ratio = INFINITY;
    return;
  }
  const float* x = got->data;
  const float* y = want->data;
  int64_t n = kiln_array_numel(want);
  /* Relative to the output's largest magnitude, not each element's: an int8
   * step is a fraction of a tensor's range, so logits near 0 carry the same
   * absolute error as the large ones (fp16's error is per element). */
  double big = 0;
  for (int64_t i = 0; i < n; ++i)
    if (isfinite(y[i]) && fabs(y[i]) > big) big = fabs(y[i]);
  for (int64_t i = 0; i < n; ++i) {
    double d = fabs((double)x[i] - y[i]);
    if (isnan(d)) d = isnan(x[i]) && isnan(y[i]) ? 0 : INFINITY;
    double r = d / (e->atol + e->rtol * big);
    if (r > e->ratio) e->ratio = r;
    if (d > e->abs_err) e->abs_err = d;
  }
}

/* Runs graph |g| on every calibration sample; with |want| NULL stores the
 * outputs in |keep_out| (n * n_outputs arrays), else compares with |want|. */
static kiln_status_t run_samples(const kiln_graph_t* g, const kiln_quant_calibration_t* c, const kiln_array_t* want,
                                 kiln_array_t* keep_out, q_err_t* e) {
  kiln_ref_options_t ro;
  kiln_ref_options_default(&ro);
  int32_t no = g->n_outputs;
  kiln_array_t* out = calloc((size_t)no + 1, sizeof *out);
  if (!out) return kiln_make_status(KILN_OUT_OF_MEMORY, "int8: out of memory");
  kiln_status_t s = NULL;
  for (int32_t k = 0; k < c->n && !s; ++k) {
    s = kiln_ref_run(g, c->inputs + (size_t)k * (size_t)c->g->n_inputs, &ro, out);
    for (int32_t o = 0; !s && o < no; ++o) {
      if (keep_out) {
        keep_out[(size_t)k * (size_t)no + (size_t)o] = out[o];
        memset(&out[o], 0, sizeof out[o]);
      } else {
        compare_into(&out[o], &want[(size_t)k * (size_t)no + (size_t)o], e);
      }
    }
    for (int32_t o = 0; !s && o < no; ++o) kiln_array_free(ro.allocator, &out[o]);
  }
  free(out);
  return s;
}

/* The model with the layers |keep| in int8, run on the samples against the
 * fp32 outputs |want|. */
static kiln_status_t trial(const char* model_path, const kiln_graph_t* g, const char* dir,
                           const kiln_quant_calibration_t* c, const bool* keep, const kiln_array_t* want, q_err_t* e) {
  kiln_qdq_plan_t p;
  KILN_RETURN_IF_ERROR(sub_plan(&c->r, keep, &p));
  kiln_graph_t* tg = NULL;
  kiln_status_t s = calibration_graph(model_path, g, dir, &tg);
  if (!s) s = kiln_qdq_plan_apply(tg, &p);
  e->ratio = e->abs_err = 0;
  if (!s) s = run_samples(tg, c, want, NULL, e);
  kiln_graph_destroy(tg);
  free(p.acts);
  free(p.consts);
  return s;
}

/* Whether |g| has a layer kiln quantize would take (ai.onnx Conv, Gemm or
 * MatMul): auto tries int8 only then, and quietly skips it otherwise. */
static bool has_layers(const kiln_graph_t* g) {
  for (int32_t n = 0; n < g->n_nodes; ++n) {
    const kiln_node_t* nd = &g->nodes[n];
    if (!nd->domain[0] && (!strcmp(nd->op_type, "Conv") || !strcmp(nd->op_type, "Gemm") ||
                           !strcmp(nd->op_type, "MatMul")))
      return true;
  }
  return false;
}

/* The compiled code sums in another order than the reference executor and
 * can round a value to the other side of a quantization step: a layer is
 * kept only with 10% of the tolerance to spare, as auto's fp16 groups. */
#define INT8_MARGIN 0.9

kiln_status_t kiln_quantize_graph_auto(const char* model_path, kiln_graph_t* g, const char* calibrate_dir,
                                       const kiln_precision_policy_t* policy, double rtol, double atol,
                                       kiln_compile_log_t* log, kiln_precision_policy_t* int8_rules,
                                       int32_t* out_kept) {
  *out_kept = 0;
  if (!calibrate_dir || g->opset < 13 || !has_layers(g))
    return kiln_compile_log_line(log, "quantize", "int8 not tried: %s",
                                 !calibrate_dir ? "it needs --calibrate DIR (real inputs set its ranges)"
                                 : g->opset < 13 ? "the model's opset is below 13"
                                                 : "no Conv, Gemm or MatMul");
  kiln_quant_calibration_t c;
  KILN_RETURN_IF_ERROR(kiln_quantize_calibrate(model_path, g, calibrate_dir, NULL, log, &c));
  int32_t nl = c.r.n_layers, no = c.g->n_outputs;
  bool* keep = calloc((size_t)nl + 1, sizeof *keep);
  int* rule = calloc((size_t)nl + 1, sizeof *rule); /* the policy's word per layer: 1 int8, 0 float, -1 none */
  q_err_t* errs = calloc((size_t)nl + 1, sizeof *errs);
  kiln_array_t* want = calloc((size_t)c.n * (size_t)no + 1, sizeof *want);
  kiln_status_t s = keep && rule && errs && want ? NULL : kiln_make_status(KILN_OUT_OF_MEMORY, "int8: out of memory");
  if (!s) s = run_samples(c.g, &c, NULL, want, NULL);
  /* All layers at once first; when that misses the tolerance, one by one
   * in graph order on top of the layers kept so far. */
  int32_t trials = 0, kept = 0;
  q_err_t all = {rtol, atol, 0, 0};
  for (int32_t l = 0; !s && l < nl; ++l) {
    rule[l] = kiln_precision_node_int8(policy, c.g, c.r.layers[l].node);
    keep[l] = rule[l] != 0;
  }
  if (!s) s = trial(model_path, g, calibrate_dir, &c, keep, want, &all), ++trials;
  bool all_ok = !s && all.ratio <= INT8_MARGIN;
  for (int32_t l = 0; !s && l < nl; ++l) keep[l] = rule[l] == 1 || (all_ok && rule[l] != 0);
  for (int32_t l = 0; l < nl && !s; ++l) {
    if (all_ok || rule[l] != -1) { /* the policy decided it */
      errs[l] = all;
      continue;
    }
    keep[l] = true;
    errs[l] = (q_err_t){rtol, atol, 0, 0};
    s = trial(model_path, g, calibrate_dir, &c, keep, want, &errs[l]);
    ++trials;
    keep[l] = !s && errs[l].ratio <= INT8_MARGIN;
  }
  for (int32_t l = 0; !s && l < nl; ++l) kept += keep[l];
  if (!s)
    s = kiln_compile_log_line(log, "quantize",
                              "int8 under rtol %g atol %g (%d samples, %d trials): %d of %d layers int8", rtol, atol,
                              c.n, trials, kept, nl);
  for (int32_t l = 0; l < nl && !s; ++l) {
    const char* name = c.g->nodes[c.r.layers[l].node].name;
    if (rule[l] != -1)
      s = kiln_compile_log_line(log, "quantize", "  %-28s %s (policy)", name, keep[l] ? "int8" : "stays float");
    else if (keep[l])
      s = kiln_compile_log_line(log, "quantize", "  %-28s int8 (outputs at %.2f of the tolerance)", name,
                                errs[l].ratio);
    else
      s = kiln_compile_log_line(log, "quantize",
                                "  %-28s stays float: int8 puts the outputs at %.2f of the tolerance, over %.1f "
                                "(max abs err %.3g)",
                                name, errs[l].ratio, INT8_MARGIN, errs[l].abs_err);
  }
  if (!s) s = kiln_compile_log_value(log, "quantize", "layers", kept);
  if (!s) s = kiln_compile_log_value(log, "quantize", "layers_float", c.r.n_skipped + nl - kept);
  kiln_qdq_plan_t p = {0};
  if (!s && kept) s = sub_plan(&c.r, keep, &p);
  if (!s && kept) s = kiln_qdq_plan_apply(g, &p);
  for (int32_t l = 0; !s && int8_rules && l < nl; ++l)
    if (keep[l]) {
      s = kiln_precision_policy_add(int8_rules, KILN_MATCH_NODE, c.g->nodes[c.r.layers[l].node].name, false);
      if (!s) int8_rules->rules[int8_rules->n - 1].int8 = true;
    }
  if (!s) *out_kept = kept;
  free(p.acts);
  free(p.consts);
  for (int64_t i = 0; want && i < (int64_t)c.n * no; ++i) kiln_array_free(kiln_allocator_system(), &want[i]);
  free(want);
  free(errs);
  free(keep);
  free(rule);
  kiln_quant_calibration_free(&c);
  return s;
}

kiln_status_t kiln_quantize_for_precision(const char* model_path, kiln_graph_t* g, kiln_compile_precision_t* prec,
                                          kiln_compile_log_t* log) {
  if (prec->mode == KILN_PRECISION_INT8)
    return kiln_quantize_graph_in_place(model_path, g, prec->calibrate_dir, NULL, log);
  if (prec->mode != KILN_PRECISION_AUTO) return NULL;
  kiln_precision_policy_t pol = {0};
  kiln_status_t s = prec->policy_path ? kiln_precision_policy_read(prec->policy_path, &pol) : NULL;
  int32_t kept = 0;
  if (!s) s = kiln_quantize_graph_auto(model_path, g, prec->calibrate_dir, &pol, prec->tolerance / 2, 1e-3, log,
                                          prec->int8_rules, &kept);
  if (!s && kept) prec->tolerance /= 2; /* the other half for fp16 */
  kiln_precision_policy_free(&pol);
  return s;
}
