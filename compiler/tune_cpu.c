/* CPU GEMM knobs: space, constraints, fingerprints, the plan hook and the
 * cache at compile time (see tune_cpu.h). */
#include "compiler/tune_cpu.h"

#include <stdlib.h>
#include <string.h>

#include "compiler/tune.h"
#include "runtime/device.h"

typedef struct {
  uint64_t h;
} fnv_t;

static void put(fnv_t* f, int64_t v) {
  for (int i = 0; i < 8; ++i) {
    f->h ^= (uint64_t)(v >> (8 * i)) & 0xffu;
    f->h *= 1099511628211ull;
  }
}

uint64_t kiln_tune_cpu_fingerprint(const kiln_gemm_problem_t* p) {
  fnv_t f = {14695981039346656037ull};
  for (const char* c = p->op ? p->op : ""; *c; ++c) put(&f, *c);
  put(&f, 0);
  const int64_t v[] = {p->batch, p->M, p->N, p->K, p->taps, p->k_blocks, p->n_outer, p->l_load, p->l_lload,
                       p->r_packed, p->nr_max, p->lanes, p->regs, p->threads};
  for (size_t i = 0; i < sizeof v / sizeof v[0]; ++i) put(&f, v[i]);
  if (p->dw[0] > 0) { /* the NCHWc depthwise window kernel */
    put(&f, 'D');
    for (int i = 0; i < 8; ++i) put(&f, p->dw[i]);
  }
  if (p->block > 0) { /* the NCHWc conv (the generic GEMMs' fingerprints as before) */
    put(&f, p->block);
    put(&f, p->in_block);
    if (p->wino_tiles) { /* and Winograd's tiles (the others' as before) */
      put(&f, 'W');
      put(&f, p->wino_tiles);
    }
  }
  return f.h ? f.h : 1;
}

const char* kiln_tune_cpu_space_name(const kiln_gemm_problem_t* p) {
  if (p->block > 0 && p->wino_tiles) return KILN_TUNE_CPU_SPACE_WINO;
  return p->dw[0] > 0 ? KILN_TUNE_CPU_SPACE_DW : p->block > 0 ? KILN_TUNE_CPU_SPACE_NCHWC : KILN_TUNE_CPU_SPACE;
}

/* The NCHWc conv's points have a fifth knob, the N block's KB of weights;
 * tiles_of writes it when knobs->nblock_kb is set (the hook gives it
 * there), knobs_of reads it from a 5-knob point. */
void kiln_tune_cpu_tiles_of(const kiln_gemm_knobs_t* k, kiln_template_tiles_t* out) {
  if (k->dw_cols > 0) { /* the depthwise kernel: {cols, rgroups, split} */
    *out = (kiln_template_tiles_t){3, {(int32_t)k->dw_cols, (int32_t)k->dw_rgroups, k->par + 1}};
    return;
  }
  *out = (kiln_template_tiles_t){4, {(int32_t)k->mr, (int32_t)k->nr, (int32_t)k->kc, k->par + 1}};
  if (k->nblock_kb > 0) out->v[out->n++] = (int32_t)k->nblock_kb;
  if (k->nblock_kb > 0 && k->wino > 0) out->v[out->n++] = (int32_t)k->wino;
}

void kiln_tune_cpu_knobs_of(const kiln_template_tiles_t* x, kiln_gemm_knobs_t* out) {
  if (x->n == 3) {
    *out = (kiln_gemm_knobs_t){0};
    out->dw_cols = x->v[0], out->dw_rgroups = x->v[1], out->par = x->v[2] - 1;
    return;
  }
  *out = (kiln_gemm_knobs_t){x->v[0], x->v[1], x->v[2], x->v[3] - 1, x->n >= 5 ? x->v[4] : 0, 0, 0, x->n >= 6 ? x->v[5] : 0};
}

static int64_t cdiv(int64_t a, int64_t b) { return b > 0 ? (a + b - 1) / b : 0; }

/* The NCHWc conv: rows 1-14, one or two channel blocks of columns, K
 * blocks of in_block x 2^i channels dividing C (or all C), the splits and
 * 32 KB - 2 MB of weights per N block. */
static void space_nchwc(const kiln_gemm_problem_t* p, kiln_template_space_t* out) {
  static const int32_t mrs[] = {1, 2, 3, 4, 5, 6, 7, 8, 10, 12, 14};
  for (size_t i = 0; i < sizeof mrs / sizeof mrs[0]; ++i)
    if (mrs[i] <= p->M) kiln_template_knob_add(&out->knobs[0], mrs[i]);
  kiln_template_knob_add(&out->knobs[1], p->block);
  if (p->N % (2 * p->block) == 0) kiln_template_knob_add(&out->knobs[1], 2 * p->block);
  if (p->N % (3 * p->block) == 0) kiln_template_knob_add(&out->knobs[1], 3 * p->block);
  const int64_t C = p->K / (p->taps > 0 ? p->taps : 1);
  if (C > 0 && C <= 65536) kiln_template_knob_add(&out->knobs[2], (int32_t)C);
  for (int64_t kc = p->in_block; p->in_block > 0 && kc < C; kc *= 2)
    if (C % kc == 0) kiln_template_knob_add(&out->knobs[2], (int32_t)kc);
  static const int32_t kbs[] = {32, 64, 128, 256, 512, 1024, 2048};
  for (size_t i = 0; i < sizeof kbs / sizeof kbs[0]; ++i) kiln_template_knob_add(&out->knobs[4], kbs[i]);
  if (p->wino_tiles) { /* the direct conv and the Winograd tiles it can run */
    kiln_template_knob_add(&out->knobs[5], 1);
    for (int32_t m = 2; m <= 4; m += 2)
      if ((p->wino_tiles >> m) & 1) kiln_template_knob_add(&out->knobs[5], m);
  }
}

/* The depthwise window kernel: 1-16 output vectors per register tile (at
 * most the output columns), 1-8 row groups per plane (at most the output
 * rows), the threads' split or one thread. */
static void space_dw(const kiln_gemm_problem_t* p, const kiln_gemm_knobs_t* d, kiln_template_space_t* out) {
  out->n_knobs = 3;
  static const char* names[3] = {"cols", "rgroups", "split"};
  const int32_t dv[3] = {(int32_t)d->dw_cols, (int32_t)d->dw_rgroups, d->par + 1};
  for (int i = 0; i < 3; ++i) {
    out->knobs[i].name = names[i];
    kiln_template_knob_add(&out->knobs[i], dv[i]);
  }
  static const int32_t cols[] = {1, 2, 3, 4, 5, 6, 7, 8, 10, 12, 14, 16};
  for (size_t i = 0; i < sizeof cols / sizeof cols[0]; ++i)
    if (cols[i] <= p->N) kiln_template_knob_add(&out->knobs[0], cols[i]);
  static const int32_t rgs[] = {1, 2, 3, 4, 6, 8};
  for (size_t i = 0; i < sizeof rgs / sizeof rgs[0]; ++i)
    if (rgs[i] <= p->M) kiln_template_knob_add(&out->knobs[1], rgs[i]);
  kiln_template_knob_add(&out->knobs[2], KILN_GEMM_PAR_AUTO + 1);
  if (p->threads > 1) kiln_template_knob_add(&out->knobs[2], KILN_GEMM_PAR_NONE + 1);
}

static const char* check_dw(const kiln_gemm_problem_t* p, const kiln_template_tiles_t* x) {
  if (x->n != 3) return "a CPU depthwise point has 3 knobs";
  const int64_t L = p->lanes > 0 ? p->lanes : 8, regs = p->regs > 0 ? p->regs : 16;
  const int64_t cols = x->v[0], rg = x->v[1], split = x->v[2] - 1;
  if (cols < 1 || cols > 16 || cols > (p->N > 0 ? p->N : 1)) return "cols outside 1..16 and the output columns";
  /* the tile's accumulators, a weight vector and an input vector */
  const int64_t vecs = cdiv(p->block > 0 ? p->block : L, L);
  if (cols * vecs + 2 * vecs > regs) return "the accumulators do not fit the vector registers";
  if (rg < 1 || rg > 8 || rg > (p->M > 0 ? p->M : 1)) return "rgroups outside 1..8 and the output rows";
  if (split != KILN_GEMM_PAR_AUTO && split != KILN_GEMM_PAR_NONE) return "split neither the threads' (1) nor one thread (2)";
  if (split == KILN_GEMM_PAR_NONE && p->threads <= 1) return "one thread forced with one thread";
  return NULL;
}

void kiln_tune_cpu_space(const kiln_gemm_problem_t* p, const kiln_gemm_knobs_t* d, kiln_template_space_t* out) {
  memset(out, 0, sizeof *out);
  if (p->dw[0] > 0) {
    out->version = KILN_TUNE_CPU_SPACE_DW;
    space_dw(p, d, out);
    return;
  }
  out->version = kiln_tune_cpu_space_name(p);
  out->n_knobs = p->block > 0 ? (p->wino_tiles ? 6 : 5) : 4;
  kiln_template_tiles_t dt;
  kiln_gemm_knobs_t dk = *d;
  dk.nblock_kb = p->block > 0 ? (d->nblock_kb > 0 ? d->nblock_kb : 256) : 0;
  dk.wino = p->block > 0 && p->wino_tiles ? (d->wino > 0 ? d->wino : 1) : 0;
  kiln_tune_cpu_tiles_of(&dk, &dt);
  static const char* names[6] = {"mr", "nr", "kc", "split", "nblock_kb", "wino"};
  for (int i = 0; i < out->n_knobs; ++i) {
    out->knobs[i].name = names[i];
    kiln_template_knob_add(&out->knobs[i], dt.v[i]); /* the default first: a full list keeps it */
  }
  for (int32_t s = KILN_GEMM_PAR_AUTO; p->threads > 1 && s <= KILN_GEMM_PAR_N; ++s)
    kiln_template_knob_add(&out->knobs[3], s + 1);
  if (p->block > 0) {
    space_nchwc(p, out);
    return;
  }
  static const int32_t mrs[] = {1, 2, 3, 4, 6, 8, 10, 12, 14};
  for (size_t i = 0; i < sizeof mrs / sizeof mrs[0]; ++i)
    if (mrs[i] <= p->M) kiln_template_knob_add(&out->knobs[0], mrs[i]);
  const int64_t L = p->lanes > 0 ? p->lanes : 8, nmax = p->nr_max > 0 && p->nr_max < p->N ? p->nr_max : p->N;
  const int64_t nrs[] = {L / 2 >= 4 ? L / 2 : L, L, 2 * L, 3 * L, 4 * L};
  for (size_t i = 0; i < sizeof nrs / sizeof nrs[0]; ++i)
    if (nrs[i] <= nmax) kiln_template_knob_add(&out->knobs[1], (int32_t)nrs[i]);
  const int64_t KO = p->K / (p->taps > 0 ? p->taps : 1);
  static const int32_t kcs[] = {64, 128, 192, 256, 320, 384, 512};
  for (size_t i = 0; p->k_blocks && i < sizeof kcs / sizeof kcs[0]; ++i)
    if (kcs[i] < KO) kiln_template_knob_add(&out->knobs[2], kcs[i]);
  if (p->k_blocks && KO > 0 && KO <= 65536) kiln_template_knob_add(&out->knobs[2], (int32_t)KO);
}

const char* kiln_tune_cpu_check(const kiln_gemm_problem_t* p, const kiln_template_tiles_t* x) {
  if (p->dw[0] > 0) return check_dw(p, x);
  if (p->block > 0 && p->wino_tiles && x->n != 6) return "a CPU NCHWc conv point that can run Winograd has 6 knobs";
  if (p->block > 0 && !p->wino_tiles && x->n != 5) return "a CPU NCHWc conv point has 5 knobs";
  if (p->block <= 0 && x->n != 4) return "a CPU GEMM point has 4 knobs";
  kiln_gemm_knobs_t k;
  kiln_tune_cpu_knobs_of(x, &k);
  const int64_t L = p->lanes > 0 ? p->lanes : 8, regs = p->regs > 0 ? p->regs : 16;
  const int64_t KO = p->K / (p->taps > 0 ? p->taps : 1);
  const int64_t nmax = p->nr_max > 0 && p->nr_max < p->N ? p->nr_max : p->N;
  if (k.mr < 1 || k.mr > (p->M > 0 ? p->M : 1)) return "mr outside 1..M";
  if (p->block > 0) { /* what lower_nn_conv_blocked.c's kernel takes */
    if (k.nr != p->block && ((k.nr != 2 * p->block && k.nr != 3 * p->block) || p->N % k.nr))
      return "nr neither one channel block nor two or three that divide the output channels";
    if (k.kc < 1 || k.kc > KO || KO % k.kc || (k.kc != KO && (p->in_block <= 0 || k.kc % p->in_block)))
      return "kc neither all input channels nor a multiple of the input's block dividing them";
    if (k.nblock_kb < 16 || k.nblock_kb > 16384) return "nblock_kb outside 16..16384";
    if (p->wino_tiles && k.wino != 1 && ((k.wino != 2 && k.wino != 4) || !((p->wino_tiles >> k.wino) & 1)))
      return "wino neither 1 (the direct conv) nor a Winograd tile the conv can run (2, 4)";
  } else if (k.nr < 1 || k.nr > (nmax > 0 ? nmax : 1)) {
    return "nr outside 1..N (or the conv grid's tile)";
  }
  if (p->block <= 0 && (k.kc < 1 || (k.kc > KO && KO > 0) || (!p->k_blocks && k.kc != (KO > 0 ? KO : 1))))
    return "kc outside 1..K (or a K block where the GEMM cannot block K)";
  const int64_t vecs = cdiv(k.nr, L);
  if (k.mr * vecs + vecs + 1 > regs) return "the accumulators do not fit the vector registers";
  if (k.par < KILN_GEMM_PAR_AUTO || k.par > KILN_GEMM_PAR_N) return "unknown split";
  if (k.par != KILN_GEMM_PAR_AUTO && p->threads <= 1) return "a forced split with one thread";
  if (k.par == KILN_GEMM_PAR_BATCH && p->batch < 2) return "a split by batches of one batch";
  if (k.par == KILN_GEMM_PAR_M && cdiv(p->M, k.mr) < 2) return "a split by M tiles of one tile";
  if (k.par == KILN_GEMM_PAR_N && cdiv(p->N, k.nr) < 2) return "a split by N tiles of one tile";
  return NULL;
}

kiln_tune_cpu_gemm_t* kiln_tune_cpu_table_find(kiln_tune_cpu_table_t* t, uint64_t fingerprint) {
  for (int32_t i = 0; i < t->n; ++i)
    if (t->e[i].fingerprint == fingerprint) return &t->e[i];
  return NULL;
}

static bool add_node(kiln_tune_cpu_gemm_t* e, int32_t node) {
  for (int32_t i = 0; i < e->n_nodes; ++i)
    if (e->nodes[i] == node) return true;
  int32_t* n = realloc(e->nodes, sizeof(int32_t) * (size_t)(e->n_nodes + 1));
  if (!n) return false;
  e->nodes = n;
  e->nodes[e->n_nodes++] = node;
  return true;
}

void kiln_tune_cpu_hook(void* user, int32_t node, const kiln_gemm_problem_t* p, kiln_gemm_knobs_t* k) {
  kiln_tune_cpu_table_t* t = user;
  const uint64_t fp = kiln_tune_cpu_fingerprint(p);
  kiln_tune_cpu_gemm_t* e = kiln_tune_cpu_table_find(t, fp);
  if (!e) {
    if (t->n == t->cap) {
      const int32_t cap = t->cap ? 2 * t->cap : 16;
      kiln_tune_cpu_gemm_t* ne = realloc(t->e, sizeof *ne * (size_t)cap);
      if (!ne) {
        t->oom = true;
        return;
      }
      t->e = ne;
      t->cap = cap;
    }
    e = &t->e[t->n++];
    memset(e, 0, sizeof *e);
    e->fingerprint = fp;
    e->problem = *p;
    e->dflt = *k;
  }
  if (!add_node(e, node)) t->oom = true;
  if (e->has_point) kiln_tune_cpu_knobs_of(&e->point, k);
}

void kiln_tune_cpu_table_free(kiln_tune_cpu_table_t* t) {
  for (int32_t i = 0; i < t->n; ++i) free(t->e[i].nodes);
  free(t->e);
  memset(t, 0, sizeof *t);
}

/* Sets the points of |cache|'s exact records on |table|'s GEMMs. */
static void use_records(kiln_tune_cpu_table_t* table, const kiln_tune_cache_t* cache, const kiln_tune_device_t* where,
                        const kiln_graph_t* g, FILE* notes, bool quiet, kiln_tune_use_report_t* r) {
  for (int32_t i = 0; i < table->n; ++i) {
    kiln_tune_cpu_gemm_t* e = &table->e[i];
    kiln_tune_key_t key;
    memset(&key, 0, sizeof key);
    key.fingerprint = e->fingerprint;
    snprintf(key.target, sizeof key.target, "cpu");
    snprintf(key.space, sizeof key.space, "%s", kiln_tune_cpu_space_name(&e->problem));
    snprintf(key.device, sizeof key.device, "%s", where->device);
    snprintf(key.driver, sizeof key.driver, "%s", where->driver);
    snprintf(key.kiln, sizeof key.kiln, "%s", KILN_VERSION);
    const char* node = e->n_nodes && e->nodes[0] >= 0 && e->nodes[0] < g->n_nodes ? g->nodes[e->nodes[0]].name : "?";
    r->instances += e->n_nodes;
    const kiln_tune_record_t* rec = kiln_tune_cache_find(cache, &key);
    if (!rec) {
      r->untuned += e->n_nodes;
      const bool stale = kiln_tune_cache_find_near(cache, &key) != NULL;
      r->stale += stale ? e->n_nodes : 0;
      if (notes && !quiet)
        fprintf(notes, "note: tuning: GEMM of node '%s' (%s %016llx) untuned%s\n", node, e->problem.op,
                (unsigned long long)e->fingerprint,
                stale ? ": the cache's record is for another CPU, compiler or kiln version (not trusted)" : "");
      continue;
    }
    const char* why = kiln_tune_cpu_check(&e->problem, &rec->tiles);
    if (why) {
      r->refused += e->n_nodes;
      if (notes)
        fprintf(notes, "warning: tuning: the record for the GEMM of node '%s' (%016llx) is refused: %s; default "
                       "schedule\n", node, (unsigned long long)e->fingerprint, why);
      continue;
    }
    if (rec->tuned_us >= rec->default_us) {
      r->kept += e->n_nodes;
      continue;
    }
    e->has_point = true;
    e->point = rec->tiles;
    r->tuned += e->n_nodes;
  }
}

kiln_status_t kiln_tune_cpu_plan_build(const kiln_graph_t* g, const kiln_plan_options_t* po, const char* path,
                                       kiln_device_t* dev, FILE* notes, bool quiet, kiln_tune_cpu_table_t* table,
                                       kiln_tune_use_report_t* report, kiln_plan_t** out) {
  memset(table, 0, sizeof *table);
  memset(report, 0, sizeof *report);
  KILN_RETURN_IF_ERROR(kiln_plan_build_hooked(g, po, kiln_tune_cpu_hook, table, kiln_allocator_system(), out));
  if (table->oom) return NULL;
  if (dev) {
    kiln_device_retain(dev);
  } else {
    kiln_device_open_options_t oo = {po->threads, true, NULL};
    kiln_status_t ds = kiln_device_open("cpu", &oo, kiln_allocator_system(), &dev);
    if (ds) {
      if (notes) fprintf(notes, "warning: tuning cache %s not used: %s\n", path, kiln_status_message(ds));
      kiln_status_free(ds);
      return NULL;
    }
  }
  kiln_tune_device_t where;
  kiln_tune_device_of(dev, &where);
  kiln_device_release(dev);
  kiln_tune_cache_t cache = {0};
  kiln_status_t s = kiln_tune_cache_read(&cache, path, notes);
  kiln_tune_use_report_t r;
  memset(&r, 0, sizeof r);
  if (!s) use_records(table, &cache, &where, g, notes, quiet, &r);
  *report = r;
  if (!s && notes)
    fprintf(notes, "tuning: %d of %d CPU GEMMs tuned from %s (%d kept their defaults, %d untuned, %d refused, "
                   "%d cache lines ignored)\n",
            (int)r.tuned, (int)r.instances, path, (int)r.kept, (int)r.untuned, (int)r.refused, (int)cache.skipped);
  kiln_tune_cache_free(&cache);
  if (s || !r.tuned) return s;
  /* again, with the points: the hook applies them */
  kiln_plan_t* tuned = NULL;
  s = kiln_plan_build_hooked(g, po, kiln_tune_cpu_hook, table, kiln_allocator_system(), &tuned);
  if (s) return s;
  kiln_plan_destroy(*out);
  *out = tuned;
  return NULL;
}

kiln_status_t kiln_tune_cpu_mark_program(const kiln_graph_t* g, const kiln_tune_cpu_table_t* table,
                                         kiln_program_t* prog) {
  for (int32_t i = 0; i < table->n; ++i) {
    const kiln_tune_cpu_gemm_t* e = &table->e[i];
    if (!e->has_point) continue;
    char tiles[128], text[256];
    kiln_tune_tiles_format(&e->point, tiles, sizeof tiles);
    if (e->problem.dw[0] > 0)
      snprintf(text, sizeof text, "cpu nchwc depthwise %s (cols,rgroups,split), %016llx", tiles,
               (unsigned long long)e->fingerprint);
    else
      snprintf(text, sizeof text, "cpu %s %s (mr,nr,kc,split%s), %016llx", e->problem.block > 0 ? "nchwc conv" : "gemm",
               tiles, e->problem.block > 0 ? (e->problem.wino_tiles ? ",nblock_kb,wino" : ",nblock_kb") : "",
               (unsigned long long)e->fingerprint);
    for (int32_t n = 0; n < e->n_nodes; ++n) {
      const int32_t node = e->nodes[n];
      if (node < 0 || node >= g->n_nodes) continue;
      for (int32_t k = 0; k < prog->n_kernels; ++k) {
        kiln_program_kernel_t* pk = &prog->kernels[k];
        if (pk->tuned || strcmp(pk->node_name, g->nodes[node].name)) continue;
        KILN_RETURN_IF_ERROR(kiln_program_strdup(prog, text, &pk->tuned));
      }
    }
  }
  return NULL;
}
