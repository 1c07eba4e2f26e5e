/* Programs of one node's kernels on the CPU (see tune_micro.h).
 *
 * A CPU GEMM's knobs are decided while lowering (the tile sizes the
 * weights are packed for, the grid a Conv computes on), so a point is a
 * plan of the whole graph built with them (lowering ResNet-18 takes a
 * fraction of a second; compiling its C would take many), of which only
 * the node's kernels (phase split, packing, GEMM, crop with its fused
 * epilogue) make the program. Their inputs and outputs are graph tensors
 * (temporaries stay the program's), found again by name in every point's
 * plan, so every point reads the same seeded inputs. */
#include <stdlib.h>
#include <string.h>

#include "compiler/tune_cpu.h"
#include "compiler/tune_micro.h"
#include "lowering/fuse.h"

#define NODE_KERNELS 8

/* The kernels lowered for |node| (fusion keeps the anchor's node). */
static kiln_status_t kernels_of(const kiln_plan_t* p, int32_t node, kiln_plan_kernel_t* ks, int32_t* n) {
  *n = 0;
  for (int32_t k = 0; k < p->n_kernels; ++k) {
    if (p->kernels[k].node != node) continue;
    if (*n == NODE_KERNELS)
      return kiln_make_status(KILN_INVALID_ARGUMENT, "tune: node %d has more than %d kernels", (int)node, NODE_KERNELS);
    ks[(*n)++] = p->kernels[k];
  }
  if (!*n) return kiln_make_status(KILN_INVALID_ARGUMENT, "tune: node %d has no kernel", (int)node);
  return NULL;
}

static bool has(const int32_t* v, int32_t n, int32_t x) {
  for (int32_t i = 0; i < n; ++i)
    if (v[i] == x) return true;
  return false;
}

/* Whether a kernel of a node other than |node| names buffer |b|. */
static bool other_node_uses(const kiln_plan_t* p, int32_t node, int32_t b) {
  for (int32_t k = 0; k < p->n_kernels; ++k) {
    if (p->kernels[k].node == node) continue;
    for (int32_t j = 0; j < p->kernels[k].func->n_params; ++j)
      if (kiln_plan_root(p, p->kernels[k].args[j]) == b) return true;
  }
  return false;
}

/* Inputs: what the kernels only read before one writes it (constants are
 * the program's); outputs: what they write that is not a temporary. */
static kiln_status_t io_of(const kiln_plan_t* p, const kiln_plan_kernel_t* ks, int32_t n, int32_t* in, int32_t* n_in,
                           int32_t* out, int32_t* n_out) {
  int32_t written[64], n_w = 0, viewed[64], n_v = 0; /* viewed: written temps of other nodes */
  *n_in = *n_out = 0;
  for (int32_t i = 0; i < n; ++i) {
    const tir_func_t* f = ks[i].func;
    for (int32_t j = 0; j < f->n_params; ++j) {
      const int32_t b = kiln_plan_root(p, ks[i].args[j]);
      const kiln_plan_buffer_kind_t kind = p->buffers[b].kind;
      if (kind == KILN_PLAN_CONST || kind == KILN_PLAN_STATUS) continue;
      const int acc = tir_func_buffer_access(f, f->params[j]);
      if ((acc & TIR_ACCESS_STORE) && kind == KILN_PLAN_TEMP && !has(viewed, n_v, b) && n_v < 64 &&
          other_node_uses(p, ks[0].node, b))
        viewed[n_v++] = b; /* another node's temp */
      /* a buffer a kernel loads and stores is its output (a GEMM reloads
       * the sums of its earlier K blocks from it) */
      if ((acc & TIR_ACCESS_LOAD) && !(acc & TIR_ACCESS_STORE) && !has(written, n_w, b) && !has(in, *n_in, b)) {
        if (*n_in == KILN_TUNE_MICRO_IO) return kiln_make_status(KILN_INVALID_ARGUMENT, "tune: too many inputs");
        in[(*n_in)++] = b;
      }
      if ((acc & TIR_ACCESS_STORE) && !has(written, n_w, b)) {
        if (n_w == 64) return kiln_make_status(KILN_INVALID_ARGUMENT, "tune: too many buffers");
        written[n_w++] = b;
        if (kind != KILN_PLAN_TEMP && !has(in, *n_in, b)) {
          if (*n_out == KILN_TUNE_MICRO_IO) return kiln_make_status(KILN_INVALID_ARGUMENT, "tune: too many outputs");
          out[(*n_out)++] = b;
        }
      }
    }
  }
  /* A conv whose output went into the next conv's zero-padded input
   * (slice folding, lowering/fuse_slice.c: its stores land in the padded
   * temp's interior) writes no tensor of its own: the temp is its output
   * then (ResNet-18's first conv of each stage and its downsample, 7 of 12
   * kernels, were not searched before). The border it never writes is
   * the same zeros for every point. Scratch temps (partial sums, packed
   * panels) are the node's own: no other node's kernel names them. */
  for (int32_t i = 0; !*n_out && i < n_v; ++i)
    if (!has(in, *n_in, viewed[i])) out[(*n_out)++] = viewed[i];
  if (!*n_out) return kiln_make_status(KILN_INVALID_ARGUMENT, "tune: the node's kernels write no tensor");
  return NULL;
}

static int32_t by_name(const kiln_plan_t* p, const char* name) {
  for (int32_t i = 0; i < p->n_buffers; ++i)
    if (!strcmp(p->buffers[i].buf->name, name)) return i;
  return -1;
}

/* The node's program at |tiles|: a plan with them, its node's kernels,
 * the inputs and outputs in the order of the default's. */
static kiln_status_t build_cpu(kiln_tune_micro_t* m, const kiln_template_tiles_t* tiles, kiln_program_t** out) {
  kiln_tune_cpu_gemm_t* e = &m->table->e[m->gemm];
  const bool had = e->has_point;
  const kiln_template_tiles_t was = e->point;
  e->has_point = true;
  e->point = *tiles;
  kiln_plan_t* p = NULL;
  kiln_status_t s = kiln_plan_build_hooked(m->graph, &m->po, kiln_tune_cpu_hook, m->table, kiln_allocator_system(), &p);
  e->has_point = had;
  e->point = was;
  kiln_fusion_report_t fr;
  if (!s && m->opt >= 1) s = kiln_plan_fuse(p, &fr, NULL);
  kiln_plan_kernel_t ks[NODE_KERNELS];
  int32_t n = 0, in[KILN_TUNE_MICRO_IO], o[KILN_TUNE_MICRO_IO], n_in = 0, n_out = 0;
  if (!s) s = kernels_of(p, m->node, ks, &n);
  if (!s) s = io_of(p, ks, n, in, &n_in, o, &n_out);
  if (!s && (n_in != m->n_in || n_out != m->n_out))
    s = kiln_make_status(KILN_INVALID_ARGUMENT, "tune: node '%s' at this point reads %d and writes %d tensors, not %d "
                         "and %d", m->what, (int)n_in, (int)n_out, (int)m->n_in, (int)m->n_out);
  for (int32_t i = 0; !s && i < m->n_in + m->n_out; ++i) {
    const bool isin = i < m->n_in;
    const int32_t b = by_name(p, isin ? m->in_name[i] : m->out_name[i - m->n_in]);
    if (b < 0 || !has(isin ? in : o, isin ? n_in : n_out, b))
      s = kiln_make_status(KILN_INVALID_ARGUMENT, "tune: node '%s' at this point does not use tensor '%s'", m->what,
                           isin ? m->in_name[i] : m->out_name[i - m->n_in]);
    else (isin ? in : o)[isin ? i : i - m->n_in] = b;
  }
  kiln_plan_buffer_t* bufs = s ? NULL : malloc(sizeof *bufs * (size_t)(p->n_buffers + 1));
  if (!s && !bufs) s = kiln_make_status(KILN_OUT_OF_MEMORY, "tune: node '%s'", m->what);
  if (!s) {
    memcpy(bufs, p->buffers, sizeof *bufs * (size_t)p->n_buffers);
    s = kiln_tune_view_build(p, ks, n, bufs, in, n_in, o, n_out, m->target, out);
  }
  free(bufs);
  kiln_plan_destroy(p); /* the program owns copies of all it needs */
  return s;
}

kiln_status_t kiln_tune_micro_init_cpu(kiln_tune_micro_t* m, const kiln_plan_t* plan, const kiln_graph_t* graph,
                                       const kiln_plan_options_t* po, int32_t opt, kiln_tune_cpu_table_t* table,
                                       int32_t gemm, int32_t node, const kiln_target_t* target, kiln_device_t* dev,
                                       int32_t threads, uint64_t seed) {
  memset(m, 0, sizeof *m);
  m->plan = plan;
  m->graph = graph;
  m->po = *po;
  m->opt = opt;
  m->table = table;
  m->gemm = gemm;
  m->node = node;
  m->k = -1;
  m->target = target;
  m->dev = dev;
  m->threads = threads;
  m->build = build_cpu;
  m->cpu_time = threads == 1;
  const char* what = node >= 0 && node < graph->n_nodes ? graph->nodes[node].name : "?";
  kiln_plan_kernel_t ks[NODE_KERNELS];
  int32_t n = 0;
  KILN_RETURN_IF_ERROR(kernels_of(plan, node, ks, &n), "node '%s'", what);
  KILN_RETURN_IF_ERROR(io_of(plan, ks, n, m->in, &m->n_in, m->out, &m->n_out), "node '%s'", what);
  for (int32_t i = 0; i < m->n_in + m->n_out; ++i) {
    const bool isin = i < m->n_in;
    char* c = strdup(plan->buffers[isin ? m->in[i] : m->out[i - m->n_in]].buf->name);
    if (!c) return kiln_make_status(KILN_OUT_OF_MEMORY, "tune: node '%s'", what);
    (isin ? m->in_name : m->out_name)[isin ? i : i - m->n_in] = c;
  }
  kiln_template_tiles_t dflt;
  kiln_tune_cpu_tiles_of(&table->e[gemm].dflt, &dflt);
  return kiln_tune_micro_start(m, &dflt, what, seed);
}
