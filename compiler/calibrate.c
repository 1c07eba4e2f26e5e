/* Precision calibration (see calibrate.h): ranges from fp32 runs, fp16
 * emulated by rounding in a small node-by-node executor, greedy choice. */
#include "compiler/calibrate.h"

#include <dirent.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "lowering/fuse.h"
#include "ir/op.h"
#include "kiln/npy.h"

#define HALF_MAX 65504.0
#define HALF_MIN_NORMAL 6.103515625e-05
/* Groups stay fp16 only within this share of the tolerance (summation order
 * of the compiled code differs from the reference kernels'). */
#define MARGIN 0.9

void kiln_calibrate_options_default(kiln_calibrate_options_t* o) {
  memset(o, 0, sizeof(*o));
  o->count = 4;
  o->rtol = 1e-2;
  o->atol = 1e-3;
}

/* ---- inputs ----------------------------------------------------------- */

static uint64_t rng_next(uint64_t* s) {
  *s ^= *s << 13;
  *s ^= *s >> 7;
  *s ^= *s << 17;
  return *s;
}

static kiln_status_t random_array(const kiln_tensor_t* t, uint64_t seed, kiln_array_t* out) {
  KILN_RETURN_IF_ERROR(kiln_array_alloc(kiln_allocator_system(), t->dtype, &t->shape, out));
  uint64_t s = seed * 0x9E3779B97F4A7C15ull + 0x1234567;
  for (const char* c = t->name; *c; ++c) s = (s ^ (unsigned char)*c) * 0x100000001B3ull;
  if (!s) s = 1;
  int64_t n = kiln_array_numel(out);
  for (int64_t i = 0; i < n; ++i) {
    if (kiln_dtype_is_float(t->dtype)) {
      double u1 = ((double)(rng_next(&s) >> 11) + 1.0) / 9007199254740993.0;
      double u2 = (double)(rng_next(&s) >> 11) / 9007199254740992.0;
      kiln_store_f64(t->dtype, out->data, (size_t)i, sqrt(-2 * log(u1)) * cos(6.283185307179586 * u2));
    } else {
      kiln_store_f64(t->dtype, out->data, (size_t)i, (double)(rng_next(&s) % 4));
    }
  }
  return NULL;
}

static bool is_file(const char* p) {
  struct stat st;
  return stat(p, &st) == 0 && S_ISREG(st.st_mode);
}

/* One sample from folder |dir|: NAME.npy per input, checked against the
 * declaration. */
static kiln_status_t read_sample(const kiln_graph_t* g, const char* dir, kiln_array_t* out) {
  for (int32_t i = 0; i < g->n_inputs; ++i) {
    const kiln_tensor_t* t = &g->tensors[g->inputs[i]];
    char path[4096];
    if (strchr(t->name, '/'))
      return kiln_make_status(KILN_INVALID_ARGUMENT, "%s: input '%s' has a '/' in its name; no file can hold it",
                              dir, t->name);
    snprintf(path, sizeof path, "%s/%s.npy", dir, t->name);
    KILN_RETURN_IF_ERROR(kiln_npy_read(path, kiln_allocator_system(), &out[i]));
    if (out[i].dtype != t->dtype || !kiln_shape_equal(&out[i].shape, &t->shape)) {
      char a[160], b[160];
      return kiln_make_status(KILN_INVALID_ARGUMENT, "%s: expected %s%s for input '%s', got %s%s", path,
                              kiln_dtype_name(t->dtype), kiln_shape_format(&t->shape, a, sizeof a), t->name,
                              kiln_dtype_name(out[i].dtype), kiln_shape_format(&out[i].shape, b, sizeof b));
    }
  }
  return NULL;
}

static int cmp_str(const void* a, const void* b) { return strcmp(*(char* const*)a, *(char* const*)b); }

void kiln_calibrate_inputs_free(const kiln_graph_t* g, kiln_array_t* in, int32_t n) {
  if (!in) return;
  for (int64_t i = 0; i < (int64_t)n * g->n_inputs; ++i) kiln_array_free(kiln_allocator_system(), &in[i]);
  free(in);
}

kiln_status_t kiln_calibrate_inputs(const kiln_graph_t* g, const kiln_calibrate_options_t* o,
                                    kiln_array_t** out_inputs, int32_t* out_n) {
  int32_t ni = g->n_inputs;
  kiln_status_t s = NULL;
  if (!o->input_dir) {
    int32_t n = o->count > 0 ? o->count : 4;
    kiln_array_t* in = calloc((size_t)n * (size_t)ni + 1, sizeof(*in));
    if (!in) return kiln_make_status(KILN_OUT_OF_MEMORY, "calibration inputs: out of memory");
    for (int32_t k = 0; k < n && !s; ++k)
      for (int32_t i = 0; i < ni && !s; ++i)
        s = random_array(&g->tensors[g->inputs[i]], o->seed + (uint64_t)k, &in[(size_t)k * ni + i]);
    if (s) {
      kiln_calibrate_inputs_free(g, in, n);
      return s;
    }
    *out_inputs = in;
    *out_n = n;
    return NULL;
  }
  /* One sample in the folder itself, or one per subfolder. */
  bool flat = ni > 0;
  for (int32_t i = 0; i < ni && flat; ++i) {
    char path[4096];
    snprintf(path, sizeof path, "%s/%s.npy", o->input_dir, g->tensors[g->inputs[i]].name);
    flat = is_file(path);
  }
  char** subs = NULL;
  int32_t nsub = 0, cap = 0;
  if (!flat) {
    DIR* d = opendir(o->input_dir);
    if (!d) return kiln_make_status(KILN_NOT_FOUND, "%s: cannot open the calibration folder", o->input_dir);
    struct dirent* e;
    while ((e = readdir(d)) && !s) {
      if (e->d_name[0] == '.') continue;
      char path[4096];
      snprintf(path, sizeof path, "%s/%s", o->input_dir, e->d_name);
      struct stat st;
      if (stat(path, &st) != 0 || !S_ISDIR(st.st_mode)) continue;
      if (nsub == cap) {
        cap = cap ? cap * 2 : 16;
        char** q = realloc(subs, sizeof(*subs) * (size_t)cap);
        if (!q) {
          s = kiln_make_status(KILN_OUT_OF_MEMORY, "calibration folders: out of memory");
          break;
        }
        subs = q;
      }
      subs[nsub] = strdup(path);
      if (!subs[nsub]) s = kiln_make_status(KILN_OUT_OF_MEMORY, "calibration folders: out of memory");
      else ++nsub;
    }
    closedir(d);
    if (!s && nsub == 0)
      s = kiln_make_status(KILN_NOT_FOUND,
                           "%s: no calibration inputs (expected %s.npy%s, or subfolders holding them)",
                           o->input_dir, ni ? g->tensors[g->inputs[0]].name : "NAME", ni > 1 ? " and the other inputs" : "");
    if (!s) qsort(subs, (size_t)nsub, sizeof(*subs), cmp_str);
  }
  int32_t n = flat ? 1 : nsub;
  kiln_array_t* in = s ? NULL : calloc((size_t)n * (size_t)ni + 1, sizeof(*in));
  if (!s && !in) s = kiln_make_status(KILN_OUT_OF_MEMORY, "calibration inputs: out of memory");
  for (int32_t k = 0; k < n && !s; ++k)
    s = read_sample(g, flat ? o->input_dir : subs[k], &in[(size_t)k * ni]);
  for (int32_t k = 0; k < nsub; ++k) free(subs[k]);
  free(subs);
  if (s) {
    kiln_calibrate_inputs_free(g, in, n);
    return s;
  }
  *out_inputs = in;
  *out_n = n;
  return NULL;
}

/* ---- executor ----------------------------------------------------------- */

typedef struct {
  double min, max, absmax, minnz;
} range_t;

typedef struct {
  const kiln_plan_t* plan;
  const kiln_graph_t* g;
  int32_t* group_of_node;  /* -1: node without a kernel */
  uint8_t* materialized;   /* per tensor: a plan buffer a kernel writes */
  kiln_array_t* rounded;   /* per tensor: f16-rounded copy of a float constant */
  range_t* range;          /* per tensor, over all fp32 runs */
  int32_t n_groups;
  const kiln_array_t* inputs;
  int32_t samples;
  kiln_array_t* want;      /* fp32 outputs per sample */
  double rtol, atol;
} cal_t;

static void round_f16(float* x, int64_t n) {
  for (int64_t i = 0; i < n; ++i) x[i] = kiln_f16_to_f32(kiln_f32_to_f16(x[i]));
}

static void update_range(range_t* r, const kiln_array_t* a) {
  if (a->dtype != KILN_DTYPE_F32) return;
  const float* x = a->data;
  for (int64_t i = 0, n = kiln_array_numel(a); i < n; ++i) {
    double v = x[i], m = fabs(v);
    if (v < r->min) r->min = v;
    if (v > r->max) r->max = v;
    if (m > r->absmax) r->absmax = m;
    if (m > 0 && m < r->minnz) r->minnz = m;
  }
}

/* Whether constant |t| is read only by nodes in fp16 groups. */
static bool const_fp16(const cal_t* c, int32_t t, const uint8_t* fp16) {
  bool any = false;
  for (int32_t n = 0; n < c->g->n_nodes; ++n)
    for (int32_t j = 0; j < c->g->nodes[n].n_inputs; ++j)
      if (c->g->nodes[n].inputs[j] == t) {
        int32_t gr = c->group_of_node[n];
        if (gr < 0 || !fp16[gr]) return false;
        any = true;
      }
  return any;
}

/* Runs sample |k| with fp16 groups |fp16| (NULL: fp32, recording ranges);
 * outputs into |out| (g->n_outputs arrays, caller frees). */
static kiln_status_t run_sample(cal_t* c, int32_t k, const uint8_t* fp16, kiln_array_t* out) {
  const kiln_graph_t* g = c->g;
  kiln_allocator_t a = kiln_allocator_system();
  int32_t nt = g->n_tensors;
  kiln_array_t* vals = calloc((size_t)nt + 1, sizeof(*vals));
  uint8_t* owned = calloc((size_t)nt + 1, 1);
  kiln_status_t s = NULL;
  if (!vals || !owned) {
    s = kiln_make_status(KILN_OUT_OF_MEMORY, "calibration run: out of memory");
    goto done;
  }
  for (int32_t t = 0; t < nt; ++t)
    if (g->tensors[t].flags & KILN_TENSOR_CONST) {
      vals[t] = g->tensors[t].value;
      if (fp16 && c->rounded[t].data && const_fp16(c, t, fp16)) vals[t] = c->rounded[t];
    }
  for (int32_t i = 0; i < g->n_inputs; ++i) {
    vals[g->inputs[i]] = c->inputs[(size_t)k * g->n_inputs + i];
    if (!fp16) update_range(&c->range[g->inputs[i]], &vals[g->inputs[i]]);
  }
  for (int32_t ni = 0; ni < g->n_nodes && !s; ++ni) {
    const kiln_node_t* n = &g->nodes[ni];
    bool all_const = n->n_outputs > 0;
    for (int32_t j = 0; j < n->n_outputs; ++j)
      if (n->outputs[j] >= 0 && !(g->tensors[n->outputs[j]].flags & KILN_TENSOR_CONST)) all_const = false;
    if (all_const) continue;
    const kiln_array_t* ain[KILN_MAX_NODE_INPUTS];
    kiln_array_t* aout[KILN_MAX_NODE_OUTPUTS];
    for (int32_t j = 0; j < n->n_inputs; ++j) ain[j] = n->inputs[j] >= 0 ? &vals[n->inputs[j]] : NULL;
    for (int32_t j = 0; j < n->n_outputs && !s; ++j) {
      int32_t t = n->outputs[j];
      aout[j] = NULL;
      if (t < 0) continue;
      s = kiln_array_alloc(a, g->tensors[t].dtype, &g->tensors[t].shape, &vals[t]);
      if (!s) {
        owned[t] = 1;
        aout[j] = &vals[t];
      }
    }
    if (s) break;
    kiln_ref_ctx_t rc = {n, g->opset, n->n_inputs, ain, n->n_outputs, aout, a, NULL, NULL};
    if ((s = n->schema->run(&rc))) {
      s = kiln_status_annotate(s, "calibration: node '%s' (%s)", n->name, n->op_type);
      break;
    }
    int32_t gr = c->group_of_node[ni];
    for (int32_t j = 0; j < n->n_outputs; ++j) {
      int32_t t = n->outputs[j];
      if (t < 0 || vals[t].dtype != KILN_DTYPE_F32) continue;
      if (!fp16) update_range(&c->range[t], &vals[t]);
      else if (gr >= 0 && fp16[gr] && c->materialized[t]) round_f16(vals[t].data, kiln_array_numel(&vals[t]));
    }
  }
  for (int32_t i = 0; i < g->n_outputs && !s; ++i) s = kiln_array_clone(a, &vals[g->outputs[i]], &out[i]);
done:
  for (int32_t t = 0; vals && owned && t < nt; ++t)
    if (owned[t]) kiln_array_free(a, &vals[t]);
  free(vals);
  free(owned);
  return s;
}

typedef struct {
  double ratio, abs_err, rel_err;
} err_t;

static void compare_into(const cal_t* c, const kiln_array_t* got, const kiln_array_t* want, err_t* e) {
  if (got->dtype != KILN_DTYPE_F32 || want->dtype != KILN_DTYPE_F32) {
    if (got->nbytes != want->nbytes || memcmp(got->data, want->data, got->nbytes)) e->ratio = INFINITY;
    return;
  }
  const float* x = got->data;
  const float* y = want->data;
  for (int64_t i = 0, n = kiln_array_numel(want); i < n; ++i) {
    double gv = x[i], wv = y[i];
    if (isnan(gv) && isnan(wv)) continue;
    double d = fabs(gv - wv);
    if (isnan(d)) d = INFINITY;
    if (isinf(wv) && gv == wv) d = 0;
    double r = d / (c->atol + c->rtol * fabs(wv));
    if (r > e->ratio) e->ratio = r;
    if (d > e->abs_err) e->abs_err = d;
    if (wv != 0 && d / fabs(wv) > e->rel_err) e->rel_err = d / fabs(wv);
  }
}

/* Worst error over every sample with fp16 groups |fp16|. */
static kiln_status_t evaluate(cal_t* c, const uint8_t* fp16, err_t* e) {
  *e = (err_t){0, 0, 0};
  int32_t no = c->g->n_outputs;
  kiln_array_t* out = calloc((size_t)no + 1, sizeof(*out));
  if (!out) return kiln_make_status(KILN_OUT_OF_MEMORY, "calibration: out of memory");
  kiln_status_t s = NULL;
  for (int32_t k = 0; k < c->samples && !s; ++k) {
    s = run_sample(c, k, fp16, out);
    for (int32_t i = 0; i < no && !s; ++i) compare_into(c, &out[i], &c->want[(size_t)k * no + i], e);
    for (int32_t i = 0; i < no; ++i) kiln_array_free(kiln_allocator_system(), &out[i]);
  }
  free(out);
  return s;
}

/* ---- groups and the greedy choice --------------------------------------- */

static int32_t uf_find(int32_t* p, int32_t x) {
  while (p[x] != x) x = p[x] = p[p[x]];
  return x;
}

/* qsort has no context argument in C11; calibration is thread-compatible
 * only, and the pointer is set just around the sort. */
static const kiln_calibrate_group_t* sort_groups;
static int cmp_bytes_desc(const void* a, const void* b) {
  const kiln_calibrate_group_t* gs = sort_groups;
  int32_t x = *(const int32_t*)a, y = *(const int32_t*)b;
  if (gs[x].bytes != gs[y].bytes) return gs[x].bytes > gs[y].bytes ? -1 : 1;
  return x < y ? -1 : x > y;
}

void kiln_calibrate_report_free(kiln_calibrate_report_t* r) {
  if (!r) return;
  for (int32_t i = 0; i < r->n_groups; ++i) free(r->groups[i].nodes);
  free(r->groups);
  memset(r, 0, sizeof(*r));
}

static kiln_status_t build_groups(cal_t* c, kiln_calibrate_report_t* r) {
  const kiln_plan_t* p = c->plan;
  const kiln_graph_t* g = c->g;
  int32_t nk = p->n_kernels;
  int32_t* parent = malloc(sizeof(int32_t) * (size_t)(nk + 1));
  int32_t* first_kernel = malloc(sizeof(int32_t) * (size_t)(g->n_nodes + 1));
  int32_t* gid = malloc(sizeof(int32_t) * (size_t)(nk + 1));
  int32_t nodes[512];
  kiln_status_t s = NULL;
  if (!parent || !first_kernel || !gid) {
    s = kiln_make_status(KILN_OUT_OF_MEMORY, "calibration groups: out of memory");
    goto done;
  }
  for (int32_t k = 0; k < nk; ++k) parent[k] = k;
  for (int32_t n = 0; n < g->n_nodes; ++n) first_kernel[n] = -1;
  for (int32_t k = 0; k < nk; ++k) {
    int32_t m = kiln_plan_kernel_nodes(p, k, nodes, 512);
    for (int32_t i = 0; i < m && i < 512; ++i) {
      int32_t n = nodes[i];
      if (n < 0 || n >= g->n_nodes) continue;
      if (first_kernel[n] < 0) first_kernel[n] = k;
      else parent[uf_find(parent, k)] = uf_find(parent, first_kernel[n]);
    }
  }
  int32_t ng = 0;
  for (int32_t k = 0; k < nk; ++k) gid[k] = uf_find(parent, k) == k ? ng++ : -1;
  for (int32_t k = 0; k < nk; ++k) gid[k] = gid[uf_find(parent, k)];
  r->groups = calloc((size_t)ng + 1, sizeof(*r->groups));
  if (!r->groups) {
    s = kiln_make_status(KILN_OUT_OF_MEMORY, "calibration groups: out of memory");
    goto done;
  }
  r->n_groups = ng;
  c->n_groups = ng;
  for (int32_t n = 0; n < g->n_nodes; ++n) c->group_of_node[n] = first_kernel[n] >= 0 ? gid[first_kernel[n]] : -1;
  for (int32_t k = 0; k < nk; ++k) r->groups[gid[k]].n_kernels++;
  for (int32_t n = 0; n < g->n_nodes; ++n) {
    int32_t gr = c->group_of_node[n];
    if (gr >= 0) r->groups[gr].n_nodes++;
  }
  for (int32_t i = 0; i < ng; ++i) {
    r->groups[i].nodes = malloc(sizeof(int32_t) * (size_t)(r->groups[i].n_nodes + 1));
    if (!r->groups[i].nodes) {
      s = kiln_make_status(KILN_OUT_OF_MEMORY, "calibration groups: out of memory");
      goto done;
    }
    r->groups[i].n_nodes = 0;
  }
  for (int32_t n = 0; n < g->n_nodes; ++n) {
    int32_t gr = c->group_of_node[n];
    if (gr >= 0) r->groups[gr].nodes[r->groups[gr].n_nodes++] = n;
  }
done:
  free(parent);
  free(first_kernel);
  free(gid);
  return s;
}

/* Tensors that are plan buffers some kernel writes (not fused away), whose
 * memory root is an intermediate or workspace: what fp16 storage rounds. */
static void find_materialized(cal_t* c) {
  const kiln_plan_t* p = c->plan;
  uint8_t* written = calloc((size_t)p->n_buffers + 1, 1);
  if (!written) return; /* then nothing is rounded: reported errors are optimistic but the run goes on */
  for (int32_t k = 0; k < p->n_kernels; ++k) {
    const tir_func_t* f = p->kernels[k].func;
    for (int32_t j = 0; j < f->n_params; ++j)
      if (tir_func_buffer_access(f, f->params[j]) & TIR_ACCESS_STORE) written[kiln_plan_root(p, p->kernels[k].args[j])] = 1;
  }
  for (int32_t t = 0; t < c->g->n_tensors; ++t) {
    int32_t b = p->tensor_buffer[t];
    if (b < 0 || c->g->tensors[t].dtype != KILN_DTYPE_F32) continue;
    int32_t root = kiln_plan_root(p, b);
    kiln_plan_buffer_kind_t kind = p->buffers[root].kind;
    c->materialized[t] = written[root] && (kind == KILN_PLAN_INTERMEDIATE || kind == KILN_PLAN_TEMP);
  }
  for (int32_t i = 0; i < c->g->n_outputs; ++i) c->materialized[c->g->outputs[i]] = 0;
  free(written);
}

static void log_trial(FILE* log, const char* what, const err_t* e, bool ok) {
  if (log)
    fprintf(log, "calibrate: %s: error %.3g of the tolerance (max abs %.3g, max rel %.3g) -> %s\n", what,
            e->ratio, e->abs_err, e->rel_err, ok ? "fp16" : "fp32");
}

static kiln_status_t calibrate(cal_t* c, const kiln_calibrate_options_t* o, kiln_calibrate_report_t* r,
                               uint8_t* fp16) {
  const kiln_graph_t* g = c->g;
  kiln_allocator_t a = kiln_allocator_system();
  int32_t no = g->n_outputs;
  /* fp32 runs: reference outputs and ranges. */
  for (int32_t t = 0; t < g->n_tensors; ++t) {
    c->range[t] = (range_t){INFINITY, -INFINITY, 0, INFINITY};
    if (g->tensors[t].flags & KILN_TENSOR_CONST) {
      update_range(&c->range[t], &g->tensors[t].value);
      if (g->tensors[t].value.dtype == KILN_DTYPE_F32) {
        KILN_RETURN_IF_ERROR(kiln_array_clone(a, &g->tensors[t].value, &c->rounded[t]));
        round_f16(c->rounded[t].data, kiln_array_numel(&c->rounded[t]));
      }
    }
  }
  for (int32_t k = 0; k < c->samples; ++k) KILN_RETURN_IF_ERROR(run_sample(c, k, NULL, &c->want[(size_t)k * no]));

  /* Per group: range, benefit, forced precisions. */
  for (int32_t gi = 0; gi < r->n_groups; ++gi) {
    kiln_calibrate_group_t* gr = &r->groups[gi];
    gr->min = INFINITY;
    gr->max = -INFINITY;
    gr->min_nonzero = INFINITY;
    gr->err_ratio = -1;
    gr->fp16 = true;
    gr->reason = "fp16";
    for (int32_t i = 0; i < gr->n_nodes; ++i) {
      const kiln_node_t* n = &g->nodes[gr->nodes[i]];
      if (!kiln_precision_node_fp16(o->base, g, gr->nodes[i], true)) {
        gr->fp16 = false;
        gr->reason = "policy";
      }
      for (int32_t j = 0; j < n->n_outputs; ++j) {
        int32_t t = n->outputs[j];
        if (t < 0 || g->tensors[t].dtype != KILN_DTYPE_F32) continue;
        const range_t* rg = &c->range[t];
        if (rg->min < gr->min) gr->min = rg->min;
        if (rg->max > gr->max) gr->max = rg->max;
        if (rg->absmax > gr->max_abs) gr->max_abs = rg->absmax;
        if (rg->minnz < gr->min_nonzero) gr->min_nonzero = rg->minnz;
        if (c->materialized[t]) gr->bytes += kiln_shape_count(&g->tensors[t].shape) * 4;
        if (gr->fp16 && c->materialized[t] && rg->absmax > HALF_MAX) {
          gr->fp16 = false;
          gr->reason = "overflow";
        }
        if (gr->fp16 && c->materialized[t] && rg->absmax > 0 && rg->absmax < HALF_MIN_NORMAL) {
          gr->fp16 = false;
          gr->reason = "underflow";
        }
      }
      for (int32_t j = 0; j < n->n_inputs; ++j) {
        int32_t t = n->inputs[j];
        if (t < 0 || !(g->tensors[t].flags & KILN_TENSOR_CONST) || g->tensors[t].dtype != KILN_DTYPE_F32) continue;
        const range_t* rg = &c->range[t];
        gr->bytes += (int64_t)g->tensors[t].value.nbytes;
        if (gr->fp16 && (rg->absmax > HALF_MAX || (rg->absmax > 0 && rg->absmax < HALF_MIN_NORMAL))) {
          gr->fp16 = false;
          gr->reason = "weight range";
        }
      }
    }
  }
  int32_t* order = malloc(sizeof(int32_t) * (size_t)(r->n_groups + 1));
  if (!order) return kiln_make_status(KILN_OUT_OF_MEMORY, "calibration: out of memory");
  int32_t nc = 0;
  for (int32_t gi = 0; gi < r->n_groups; ++gi) {
    fp16[gi] = 0;
    if (r->groups[gi].fp16) order[nc++] = gi;
  }
  sort_groups = r->groups;
  qsort(order, (size_t)nc, sizeof(int32_t), cmp_bytes_desc);
  sort_groups = NULL;

  kiln_status_t s = NULL;
  err_t e;
  for (int32_t i = 0; i < nc; ++i) fp16[order[i]] = 1;
  bool all_ok = false;
  if (nc > 0) {
    s = evaluate(c, fp16, &e);
    r->trials++;
    all_ok = !s && e.ratio <= MARGIN;
    if (!s) log_trial(o->log, "every candidate group at once", &e, all_ok);
  }
  if (!s && all_ok) {
    for (int32_t i = 0; i < nc; ++i) {
      kiln_calibrate_group_t* gr = &r->groups[order[i]];
      gr->err_ratio = e.ratio;
      gr->max_abs_err = e.abs_err;
      gr->max_rel_err = e.rel_err;
    }
  } else if (!s) {
    for (int32_t i = 0; i < nc; ++i) fp16[order[i]] = 0;
    for (int32_t i = 0; i < nc && !s; ++i) {
      kiln_calibrate_group_t* gr = &r->groups[order[i]];
      fp16[order[i]] = 1;
      s = evaluate(c, fp16, &e);
      r->trials++;
      if (s) break;
      bool ok = e.ratio <= MARGIN;
      char what[256];
      const kiln_node_t* n0 = &g->nodes[gr->nodes[0]];
      snprintf(what, sizeof what, "group %d ('%s' %s%s)", order[i], n0->name, n0->op_type,
               gr->n_nodes > 1 ? " + fused" : "");
      log_trial(o->log, what, &e, ok);
      gr->err_ratio = e.ratio;
      gr->max_abs_err = e.abs_err;
      gr->max_rel_err = e.rel_err;
      if (!ok) {
        fp16[order[i]] = 0;
        gr->fp16 = false;
        gr->reason = "error";
      }
    }
  }
  free(order);
  if (s) return s;
  /* The chosen policy, as the compiled model would see it. */
  s = evaluate(c, fp16, &e);
  r->trials++;
  if (!s) {
    r->err_ratio = e.ratio;
    r->max_abs_err = e.abs_err;
    r->max_rel_err = e.rel_err;
  }
  return s;
}

kiln_status_t kiln_calibrate_precision(const kiln_plan_t* plan, const kiln_calibrate_options_t* opt,
                                       kiln_precision_policy_t* out_policy,
                                       kiln_calibrate_report_t* out_report) {
  if (!plan || !plan->graph || !out_policy)
    return kiln_make_status(KILN_INVALID_ARGUMENT, "calibrate: NULL plan or policy");
  kiln_calibrate_options_t defaults;
  kiln_calibrate_options_default(&defaults);
  const kiln_calibrate_options_t* o = opt ? opt : &defaults;
  const kiln_graph_t* g = plan->graph;
  cal_t c;
  memset(&c, 0, sizeof c);
  c.plan = plan;
  c.g = g;
  c.rtol = o->rtol >= 0 ? o->rtol : 1e-2;
  c.atol = o->atol >= 0 ? o->atol : 1e-3;
  kiln_calibrate_report_t r;
  memset(&r, 0, sizeof r);
  r.rtol = c.rtol;
  r.atol = c.atol;
  uint8_t* fp16 = NULL;
  kiln_array_t* inputs = NULL;
  kiln_status_t s = kiln_calibrate_inputs(g, o, &inputs, &c.samples);
  if (s) return kiln_status_annotate(s, "calibration inputs");
  c.inputs = inputs;
  r.samples = c.samples;
  size_t nt = (size_t)g->n_tensors + 1;
  c.group_of_node = calloc((size_t)g->n_nodes + 1, sizeof(int32_t));
  c.materialized = calloc(nt, 1);
  c.rounded = calloc(nt, sizeof(kiln_array_t));
  c.range = calloc(nt, sizeof(range_t));
  c.want = calloc((size_t)c.samples * (size_t)g->n_outputs + 1, sizeof(kiln_array_t));
  if (!c.group_of_node || !c.materialized || !c.rounded || !c.range || !c.want)
    s = kiln_make_status(KILN_OUT_OF_MEMORY, "calibration: out of memory");
  if (!s) s = build_groups(&c, &r);
  if (!s && !(fp16 = calloc((size_t)r.n_groups + 1, 1)))
    s = kiln_make_status(KILN_OUT_OF_MEMORY, "calibration: out of memory");
  if (!s) {
    find_materialized(&c);
    s = calibrate(&c, o, &r, fp16);
  }
  /* The policy: the base rules, then one rule per node of every group. */
  for (int32_t i = 0; !s && o->base && i < o->base->n; ++i) {
    if (o->base->rules[i].int8) continue; /* int8 rules were applied to the graph (quantize_graph.h) */
    s = kiln_precision_policy_add(out_policy, o->base->rules[i].match, o->base->rules[i].name,
                                  o->base->rules[i].fp16);
  }
  for (int32_t gi = 0; !s && gi < r.n_groups; ++gi)
    for (int32_t i = 0; !s && i < r.groups[gi].n_nodes; ++i)
      s = kiln_precision_policy_add(out_policy, KILN_MATCH_NODE, g->nodes[r.groups[gi].nodes[i]].name,
                                    fp16[gi] != 0);
  kiln_allocator_t a = kiln_allocator_system();
  for (size_t t = 0; c.rounded && t + 1 < nt; ++t) kiln_array_free(a, &c.rounded[t]);
  for (int64_t i = 0; c.want && i < (int64_t)c.samples * g->n_outputs; ++i) kiln_array_free(a, &c.want[i]);
  free(c.group_of_node);
  free(c.materialized);
  free(c.rounded);
  free(c.range);
  free(c.want);
  free(fp16);
  kiln_calibrate_inputs_free(g, inputs, c.samples);
  if (!s && out_report) *out_report = r;
  else kiln_calibrate_report_free(&r);
  return s;
}

void kiln_calibrate_report_print(const kiln_plan_t* plan, const kiln_calibrate_report_t* r, FILE* out) {
  int32_t n16 = 0;
  int64_t b16 = 0, ball = 0;
  for (int32_t i = 0; i < r->n_groups; ++i) {
    n16 += r->groups[i].fp16;
    ball += r->groups[i].bytes;
    if (r->groups[i].fp16) b16 += r->groups[i].bytes;
  }
  fprintf(out,
          "calibration: %d samples, %d trials, tolerance rtol %g atol %g: %d of %d groups fp16 "
          "(%.2f of %.2f MB of f32 data); chosen policy: error %.3g of the tolerance, max abs %.3g, max rel %.3g\n",
          r->samples, r->trials, r->rtol, r->atol, n16, r->n_groups, (double)b16 / 1e6, (double)ball / 1e6,
          r->err_ratio, r->max_abs_err, r->max_rel_err);
  fprintf(out, "%-5s %-4s %-12s %-13s %-13s %-11s %-10s %-10s %s\n", "group", "prec", "reason", "min", "max",
          "min |x|>0", "MB", "err/tol", "nodes");
  for (int32_t i = 0; i < r->n_groups; ++i) {
    const kiln_calibrate_group_t* gr = &r->groups[i];
    fprintf(out, "%-5d %-4s %-12s %-13.6g %-13.6g %-11.3g %-10.4f ", i, gr->fp16 ? "fp16" : "fp32", gr->reason,
            gr->min, gr->max, gr->min_nonzero, (double)gr->bytes / 1e6);
    if (gr->err_ratio >= 0) fprintf(out, "%-10.3g ", gr->err_ratio);
    else fprintf(out, "%-10s ", "-");
    for (int32_t j = 0; j < gr->n_nodes; ++j)
      fprintf(out, "%s%s (%s)", j ? ", " : "", plan->graph->nodes[gr->nodes[j]].name,
              plan->graph->nodes[gr->nodes[j]].op_type);
    fputc('\n', out);
  }
}
