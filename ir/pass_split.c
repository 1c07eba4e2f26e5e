/* Splitting GEMMs whose weights a GPU cannot bind in one piece
 * (kiln_graph_split_wide_gemms, ir/passes.h).
 *
 * A GPU device binds each storage buffer whole, up to a limit (Vulkan's
 * maxStorageBufferRange: 128 MiB on lavapipe and many phones). AlexNet's
 * and VGG's first classifier Gemm holds 151 MB and 411 MB of f32 weights,
 * so the partition (targets/partition.c) would send it to the CPU. Output
 * columns are independent, so the node becomes P GEMMs over column slices
 * of N, each with its slice of the constant weight (and bias), and a
 * Concat on the last axis: every kernel argument then fits, and the
 * original weight, no longer read, is dropped from the graph. A weight
 * written by a ConstantOfShape too large to fold (the ONNX light suite's
 * models carry their weights so) is sliced as smaller ConstantOfShapes.
 *
 * Bytes are counted at the graph's element type -- what the partition's
 * check counts, since it runs before the precision pass. Under fp16 the
 * device will often hold the weight as f16 (half the bytes), so a weight
 * between one and two limits is split although its f16 copy would fit:
 * the precision pass may keep a node's group in f32 (policy files, auto),
 * and only the f32 count is right whatever it decides. The cost is one
 * Concat of the node's output, small beside the weight read.
 *
 * The weight is counted as the lowering may pack it (lowering/
 * lower_nn_gemm.c, nn_pack_const: N padded to its 32-column GPU tiles, K
 * to whole blocks of at most 320, under 1/320 more), since the packed
 * copy is what the device binds. Slices are multiples of 32 columns (16
 * or 4 when fewer fit), so the packing pads none of them and the GPU GEMM
 * templates keep their vector paths, and as even as that allows. */
#include <stdio.h>
#include <string.h>

#include "ir/pass_util.h"

/* Bytes of tensor |t| when its shape is static, else 0 (unknown: a
 * dynamic dim is bound at run time and checked there). */
static uint64_t tensor_bytes(const kiln_graph_t* g, int32_t t) {
  if (t < 0 || !kiln_shape_is_static(&g->tensors[t].shape)) return 0;
  return (uint64_t)kiln_shape_count(&g->tensors[t].shape) * kiln_dtype_size(g->tensors[t].dtype);
}

/* A name "<base>/<tag><i>" no tensor or node has yet, in |buf|. */
static const char* fresh_name(const kiln_graph_t* g, const char* base, const char* tag, int32_t i, char* buf,
                              size_t n) {
  snprintf(buf, n, "%.200s/%s%d", base, tag, (int)i);
  for (int k = 1; kiln_graph_find_tensor(g, buf) >= 0; ++k) snprintf(buf, n, "%.200s/%s%d_%d", base, tag, (int)i, k);
  return buf;
}

/* The ConstantOfShape node with a constant shape that writes |t|, or -1:
 * a weight too large to fold (the ONNX light models' weights are fills) is
 * sliced as a smaller fill. */
static int32_t fill_of(const pu_ctx_t* c, int32_t t) {
  const int32_t p = pu_producer(c, t);
  if (p < 0) return -1;
  const kiln_node_t* n = &c->g->nodes[p];
  return pu_op(n, "ConstantOfShape") && n->n_inputs >= 1 && pu_is_const(c->g, n->inputs[0]) ? p : -1;
}

static bool sliceable(const pu_ctx_t* c, int32_t t) {
  return pu_is_const(c->g, t) || (fill_of(c, t) >= 0 && kiln_shape_is_static(&c->g->tensors[t].shape));
}

/* The fill |fill| writing |src| with |w| along |axis|: a new
 * ConstantOfShape (same value) writing a new tensor, *out_t. */
static kiln_status_t add_fill(pu_ctx_t* c, int32_t fill, int32_t src, int32_t axis, int64_t w, int32_t piece,
                              int32_t* out_t) {
  kiln_graph_t* g = c->g;
  const char* fname = g->nodes[fill].name; /* arena: stays put */
  const int32_t n_attrs = g->nodes[fill].n_attrs;
  const kiln_attr_t* attrs = g->nodes[fill].attrs;
  kiln_shape_t s = g->tensors[src].shape;
  s.dims[axis] = w;
  char name[256];
  int32_t shape_t = -1;
  KILN_RETURN_IF_ERROR(pu_add_i64(c, g->tensors[src].name, s.dims, s.rank, &shape_t));
  KILN_RETURN_IF_ERROR(kiln_graph_get_or_add_tensor(g, fresh_name(g, g->tensors[src].name, "split", piece, name,
                                                                  sizeof name), out_t));
  KILN_RETURN_IF_ERROR(pu_sync(c));
  snprintf(name, sizeof name, "%.200s/split%d", fname, (int)piece);
  return pu_add_node_named(c, "ConstantOfShape", name, 1, &shape_t, *out_t, n_attrs, attrs, NULL);
}

/* Columns [c0, c0 + w) of the matrix |src| whose axis |axis| runs over
 * the columns, as a new initializer of |c|'s graph (or a new fill);
 * *out_t: its index. */
static kiln_status_t add_slice(pu_ctx_t* c, int32_t src, int32_t axis, int64_t c0, int64_t w, int32_t piece,
                               int32_t* out_t) {
  kiln_graph_t* g = c->g;
  const int32_t fill = fill_of(c, src);
  if (fill >= 0) return add_fill(c, fill, src, axis, w, piece, out_t);
  const kiln_array_t* a = &g->tensors[src].value;
  kiln_shape_t s = a->shape;
  const int64_t len = s.dims[axis];
  s.dims[axis] = w;
  kiln_array_t part;
  KILN_RETURN_IF_ERROR(kiln_array_alloc(g->allocator, a->dtype, &s, &part), "slice of '%s'", g->tensors[src].name);
  int64_t outer = 1, inner = 1;
  for (int32_t d = 0; d < axis; ++d) outer *= s.dims[d];
  for (int32_t d = axis + 1; d < s.rank; ++d) inner *= s.dims[d];
  const size_t es = kiln_dtype_size(a->dtype), run = (size_t)(w * inner) * es;
  for (int64_t o = 0; o < outer; ++o)
    memcpy((char*)part.data + (size_t)o * run, (const char*)a->data + ((size_t)(o * len + c0) * (size_t)inner) * es,
           run);
  char name[256];
  KILN_RETURN_IF_ERROR(kiln_graph_add_initializer(g, fresh_name(g, g->tensors[src].name, "split", piece, name,
                                                                sizeof name),
                                                  &part, out_t));
  return pu_sync(c);
}

/* What one GEMM looks like to the split. */
typedef struct gemm_s {
  int32_t node, a, b, bias, out;
  int32_t b_axis;    /* the axis of b that runs over the N output columns */
  int64_t n, k;      /* output columns; b's elements per column */
  bool bias_sliced;  /* the bias has the N columns (else it broadcasts) */
} gemm_t;

/* Fills |m| for node |ni| when it is a Gemm or a MatMul with a constant
 * 2-D B; false for any other node. */
static bool as_gemm(const kiln_graph_t* g, int32_t ni, gemm_t* m) {
  const kiln_node_t* n = &g->nodes[ni];
  const bool gemm = pu_op(n, "Gemm");
  if ((!gemm && !pu_op(n, "MatMul")) || n->n_inputs < 2 || n->n_outputs != 1 || n->outputs[0] < 0 ||
      n->inputs[0] < 0 || n->inputs[1] < 0)
    return false;
  const kiln_attr_t* tb = gemm ? kiln_node_attr(n, "transB") : NULL;
  *m = (gemm_t){ni, n->inputs[0], n->inputs[1], gemm && n->n_inputs > 2 ? n->inputs[2] : -1, n->outputs[0],
                tb && tb->i ? 0 : 1, 0, 0, false};
  const kiln_shape_t* bs = &g->tensors[m->b].shape;
  if (bs->rank != 2 || !kiln_shape_is_static(bs)) return false;
  m->n = bs->dims[m->b_axis];
  m->k = bs->dims[1 - m->b_axis];
  const kiln_shape_t* cs = m->bias >= 0 ? &g->tensors[m->bias].shape : NULL;
  m->bias_sliced = cs && cs->rank >= 1 && cs->dims[cs->rank - 1] == m->n && m->n > 1;
  return true;
}

/* Bytes of one column of |m|'s weight as the lowering may pack it: K
 * with a 1/64 margin for the padding of its K blocks. */
static uint64_t column_bytes(const kiln_graph_t* g, const gemm_t* m) {
  return (uint64_t)(m->k + m->k / 64 + 1) * kiln_dtype_size(g->tensors[m->b].dtype);
}

/* The N tile the packing pads to (nn_gemm_tiles: two AVX-512 vectors of
 * f32 on GPU targets, one below 32 columns, N itself below 16). */
static int64_t pack_tile(int64_t n) { return n >= 32 ? 32 : n >= 16 ? 16 : 1; }

/* The most columns one slice may take under |limit| (0: not even one),
 * or why the split cannot help, in |why|. */
static int64_t slice_columns(const pu_ctx_t* c, const gemm_t* m, uint64_t limit, char* why, size_t nwhy) {
  const kiln_graph_t* g = c->g;
  why[0] = 0;
  const kiln_tensor_t* b = &g->tensors[m->b];
  const uint64_t in_bytes = tensor_bytes(g, m->a), out_bytes = tensor_bytes(g, m->out);
  if (!sliceable(c, m->b))
    snprintf(why, nwhy, "its weight '%s' is computed at run time, not a constant to slice", b->name);
  else if (in_bytes > limit)
    snprintf(why, nwhy, "its input '%s' alone spans %llu bytes", g->tensors[m->a].name, (unsigned long long)in_bytes);
  else if (out_bytes > limit)
    snprintf(why, nwhy, "its output '%s' spans %llu bytes (the Concat of the slices binds it whole)",
             g->tensors[m->out].name, (unsigned long long)out_bytes);
  else if (m->bias_sliced && !sliceable(c, m->bias))
    snprintf(why, nwhy, "its bias '%s' is computed at run time, not a constant to slice", g->tensors[m->bias].name);
  if (why[0]) return 0;
  const uint64_t col = column_bytes(g, m);
  int64_t cols = col ? (int64_t)(limit / col) : m->n;
  if (m->bias_sliced) {
    const uint64_t bcol = tensor_bytes(g, m->bias) / (uint64_t)m->n;
    if (bcol && (int64_t)(limit / bcol) < cols) cols = (int64_t)(limit / bcol);
  }
  if (cols < 1)
    snprintf(why, nwhy, "one column of its weight '%s' spans %llu bytes", b->name, (unsigned long long)col);
  return cols;
}

/* Rewrites GEMM |m| into |pieces| slices of |w| columns (the last one the
 * rest) and a Concat writing the original output. */
static kiln_status_t split(pu_ctx_t* c, const gemm_t* m, int32_t pieces, int64_t w) {
  kiln_graph_t* g = c->g;
  /* arena strings and arrays: they stay put while nodes are added */
  const kiln_node_t* orig = &g->nodes[m->node];
  const char* name = orig->name;
  const char* op = orig->op_type;
  const int32_t n_attrs = orig->n_attrs;
  const kiln_attr_t* attrs = orig->attrs;
  const int32_t rank = g->tensors[m->out].shape.rank;
  const int32_t bias_axis = m->bias_sliced ? g->tensors[m->bias].shape.rank - 1 : 0;
  int32_t parts[64];
  char nm[256];
  for (int32_t p = 0; p < pieces; ++p) {
    const int64_t c0 = (int64_t)p * w, cw = p + 1 < pieces ? w : m->n - c0;
    int32_t in[3] = {m->a, -1, m->bias};
    KILN_RETURN_IF_ERROR(add_slice(c, m->b, m->b_axis, c0, cw, p, &in[1]));
    if (m->bias_sliced) KILN_RETURN_IF_ERROR(add_slice(c, m->bias, bias_axis, c0, cw, p, &in[2]));
    KILN_RETURN_IF_ERROR(kiln_graph_get_or_add_tensor(
        g, fresh_name(g, g->tensors[m->out].name, "split", p, nm, sizeof nm), &parts[p]));
    KILN_RETURN_IF_ERROR(pu_sync(c));
    snprintf(nm, sizeof nm, "%.200s/split%d", name, (int)p);
    KILN_RETURN_IF_ERROR(pu_add_node_named(c, op, nm, m->bias >= 0 ? 3 : 2, in, parts[p], n_attrs, attrs, NULL));
  }
  c->dead[m->node] = true;
  pu_detach(c, m->out);
  const kiln_attr_t axis = kiln_attr_make_int("axis", rank - 1);
  snprintf(nm, sizeof nm, "%.200s/concat", name);
  return pu_add_node_named(c, "Concat", nm, pieces, parts, m->out, 1, &axis, NULL);
}

/* Drops the value of weight |t| (or the fill writing it) once nothing
 * reads it: the slices hold its data now, and a 400 MB weight should not
 * stay resident twice. */
static void drop_unread(pu_ctx_t* c, int32_t t) {
  kiln_tensor_t* tt = &c->g->tensors[t];
  if (c->uses[t] || (tt->flags & (KILN_TENSOR_INPUT | KILN_TENSOR_OUTPUT))) return;
  const int32_t fill = fill_of(c, t);
  if (fill >= 0) {
    c->dead[fill] = true;
    return;
  }
  if (tt->flags & PU_OWNED_VALUE) kiln_allocator_free(c->g->allocator, tt->value.data);
  memset(&tt->value, 0, sizeof tt->value);
  tt->flags &= ~(KILN_TENSOR_CONST | KILN_TENSOR_INITIALIZER | PU_OWNED_VALUE);
}

kiln_status_t kiln_graph_split_wide_gemms(kiln_graph_t* g, uint64_t max_binding, kiln_gemm_split_fn note, void* user) {
  if (!g || !max_binding) return NULL;
  pu_ctx_t c;
  KILN_RETURN_IF_ERROR(pu_begin(&c, g));
  kiln_status_t s = NULL;
  const int32_t n_nodes = g->n_nodes;
  for (int32_t i = 0; i < n_nodes && !s; ++i) {
    gemm_t m;
    if (c.dead[i] || !as_gemm(g, i, &m)) continue;
    const int64_t tile = pack_tile(m.n);
    const uint64_t packed = column_bytes(g, &m) * (uint64_t)((m.n + tile - 1) / tile * tile);
    const uint64_t bias_bytes = tensor_bytes(g, m.bias), b_bytes = tensor_bytes(g, m.b);
    const uint64_t most = packed > bias_bytes ? packed : bias_bytes;
    if (most <= max_binding) continue;
    char why[320];
    int64_t cols = slice_columns(&c, &m, max_binding, why, sizeof why);
    /* at most 64 pieces: past that a device this small is better served
     * by the CPU (and the Concat's inputs stay countable) */
    int32_t pieces = 0;
    int64_t w = 0;
    if (cols > 0) {
      const int64_t align = cols >= 16 ? pack_tile(cols) : cols >= 4 ? 4 : 1;
      cols = cols / align * align;
      const int64_t p = (m.n + cols - 1) / cols;
      w = ((m.n + p - 1) / p + align - 1) / align * align;
      if (p > 64) snprintf(why, sizeof why, "it would take %lld slices (at most 64)", (long long)p);
      else pieces = (int32_t)p;
      /* the rounding up may leave the last slice empty: fewer pieces */
      while (pieces > 1 && (int64_t)(pieces - 1) * w >= m.n) --pieces;
      if (pieces == 1) continue; /* it fits after all */
    }
    const uint64_t raw = b_bytes > bias_bytes ? b_bytes : bias_bytes;
    kiln_gemm_split_note_t nt = {g->nodes[i].name, g->nodes[i].op_type, raw, max_binding, pieces, pieces ? w : 0,
                                 pieces ? NULL : why};
    if (pieces > 1) {
      s = split(&c, &m, pieces, w);
      if (!s) pu_count_uses(&c);
      if (!s) drop_unread(&c, m.b);
      if (!s && m.bias_sliced) drop_unread(&c, m.bias);
    }
    if (!s && note) s = note(user, &nt);
  }
  return pu_end(&c, s);
}
