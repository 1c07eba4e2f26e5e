/* `--precision int8`: a QDQ plan applied to a graph in memory (see
 * quantize_graph.h). */
#include "compiler/quantize_graph.h"

#include <dirent.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "compiler/calibrate.h"
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

kiln_status_t kiln_quantize_graph_in_place(const char* model_path, kiln_graph_t* g, const char* calibrate_dir,
                                           const kiln_quantize_options_t* o, kiln_compile_log_t* log) {
  if (!calibrate_dir)
    return kiln_make_status(KILN_INVALID_ARGUMENT,
                            "--precision int8 needs --calibrate DIR (calibration inputs: DIR/NAME.npy, or "
                            "DIR/*/NAME.npy per sample)");
  struct stat st;
  if (stat(calibrate_dir, &st) != 0 || !S_ISDIR(st.st_mode))
    return kiln_make_status(KILN_NOT_FOUND, "%s: the calibration folder does not exist", calibrate_dir);
  if (g->opset < 13) return kiln_qdq_plan_apply(g, &(kiln_qdq_plan_t){0}); /* its error, before calibrating */
  kiln_quantize_options_t qo;
  if (o) qo = *o;
  else kiln_quantize_options_default(&qo);
  kiln_graph_t* cg = NULL;
  KILN_RETURN_IF_ERROR(kiln_onnx_parse_model(model_path, NULL, kiln_allocator_system(), &cg));
  kiln_quantize_bind_dims(cg, calibrate_dir);
  kiln_status_t s = kiln_graph_prepare(cg);
  kiln_array_t* inputs = NULL;
  int32_t n = 0;
  kiln_calibrate_options_t co;
  kiln_calibrate_options_default(&co);
  co.input_dir = calibrate_dir;
  if (!s) s = kiln_calibrate_inputs(cg, &co, &inputs, &n);
  kiln_quant_result_t r;
  memset(&r, 0, sizeof r);
  if (!s) s = kiln_quantize(cg, inputs, n, &qo, &r);
  char* text = NULL;
  size_t len = 0;
  FILE* f = s ? NULL : open_memstream(&text, &len);
  if (!s && !f) s = kiln_make_status(KILN_OUT_OF_MEMORY, "int8: cannot open a memory stream for the report");
  if (f) {
    kiln_quant_report_print(cg, &r, f);
    if (fclose(f) != 0) s = kiln_make_status(KILN_OUT_OF_MEMORY, "int8: the report's memory stream failed");
  }
  if (!s) s = kiln_compile_log_text(log, "quantize", text);
  free(text);
  if (!s) s = kiln_compile_log_value(log, "quantize", "layers", r.n_layers);
  if (!s) s = kiln_compile_log_value(log, "quantize", "layers_float", r.n_skipped);
  if (!s) s = kiln_qdq_plan_apply(g, &r.plan);
  kiln_quant_result_free(&r);
  if (inputs) kiln_calibrate_inputs_free(cg, inputs, n);
  kiln_graph_destroy(cg);
  return s;
}
