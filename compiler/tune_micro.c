/* Programs of one template instance (see tune_micro.h).
 *
 * The program is built from a view of the tuner's plan: the same buffers
 * (copied, so their kinds can say which are this program's inputs and
 * outputs, and the weight constant can hold the layout of the point under
 * test) and one or two kernels (the instance; for a cropped Conv first its
 * GEMM kernel, MERGED into the instance: it names the weights and input
 * planes the instance reads, so the program builder keeps them). The view
 * is never freed as a plan: it owns nothing but what this file allocates. */
#include "compiler/tune_micro.h"

#include <errno.h>
#include <math.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "compiler/compare.h"
#include "compiler/tune_cache.h"
#include "runtime/device_registry.h"
#include "runtime/module_impl.h"
#include "runtime/session_impl.h"
#include "targets/program_build.h"

static int cmp_d(const void* a, const void* b) {
  const double x = *(const double*)a, y = *(const double*)b;
  return x < y ? -1 : x > y;
}

bool kiln_tune_reuse_code(void) {
  const char* e = getenv("KILN_TUNE_REUSE");
  return !(e && !strcmp(e, "off"));
}

bool kiln_tune_code_shared(const kiln_device_t* dev) {
  const kiln_device_api_t* api = dev ? kiln_device_api_find(dev->info.api) : NULL;
  return api && api->shared_code && kiln_tune_reuse_code();
}

void kiln_tune_session_options(kiln_session_options_t* so, int32_t threads, bool reuse_code) {
  kiln_session_options_default(so);
  so->profile = true;
  so->threads = threads;
  so->cache_dir = "";
  so->reuse_code = reuse_code;
}

static const kiln_program_build_options_t tune_build_options = {
    .model_name = "tune", .precision = "fp32", .options = "-O1 tune"};

kiln_status_t kiln_tune_whole_program(const kiln_plan_t* plan, const kiln_target_t* target, kiln_program_t** out) {
  return kiln_program_build(plan, target, &tune_build_options, kiln_allocator_system(), out);
}

double kiln_tune_median(double* v, int32_t n) {
  qsort(v, (size_t)n, sizeof *v, cmp_d);
  return n ? v[n / 2] : 0;
}

static double median(double* v, int32_t n) { return kiln_tune_median(v, n); }

/* kiln_tune_micro_measure stops a point after this many pairs when its
 * median is past this ratio of the default's (the search keeps a point
 * only 3% faster than the default). */
#define MICRO_EARLY_PAIRS 5
#define MICRO_EARLY_RATIO 1.25

/* the largest finite magnitude of a float array (f32 or f16; 0 else) */
static double max_abs(const kiln_array_t* a) {
  int64_t n = 0;
  kiln_status_t s = kiln_shape_numel(&a->shape, &n);
  if (s) {
    kiln_status_free(s);
    return 0;
  }
  if (!a->data || (size_t)n * (a->dtype == KILN_DTYPE_F16 ? 2u : 4u) > a->nbytes) return 0;
  double m = 0;
  for (int64_t i = 0; i < n; ++i) {
    double v = a->dtype == KILN_DTYPE_F32 ? (double)((const float*)a->data)[i]
               : a->dtype == KILN_DTYPE_F16 ? (double)kiln_f16_to_f32(((const uint16_t*)a->data)[i])
                                            : 0.0;
    if (isfinite(v) && fabs(v) > m) m = fabs(v);
  }
  return m;
}

void kiln_tune_tolerance(bool f16_sums, const kiln_array_t* ref, double* rtol, double* atol) {
  *rtol = 1e-3;
  *atol = 1e-4;
  if (f16_sums && ref) {
    /* f16 sums of K products: each addition rounds to 11 bits (2^-11 of
     * the running sum), so two orders or two accumulator types differ by
     * up to a few 2^-11 of the sums' magnitude (at K = 4608, ResNet-18's
     * last convs, about 1e-2 of it measured) */
    *rtol = 2e-2;
    *atol = fmax(1e-4, 2e-2 * max_abs(ref));
  }
}

static bool has(const int32_t* v, int32_t n, int32_t x) {
  for (int32_t i = 0; i < n; ++i)
    if (v[i] == x) return true;
  return false;
}

/* Buffer |b| (a root) among the inputs or outputs, once; constants are
 * the program's own weights. */
static kiln_status_t add_io(kiln_tune_micro_t* m, int32_t b, bool out) {
  if (b < 0 || b >= m->plan->n_buffers) return NULL;
  b = kiln_plan_root(m->plan, b);
  const kiln_plan_buffer_kind_t kind = m->plan->buffers[b].kind;
  if (kind == KILN_PLAN_CONST || kind == KILN_PLAN_STATUS) return NULL;
  int32_t* v = out ? m->out : m->in;
  int32_t* n = out ? &m->n_out : &m->n_in;
  if (has(m->in, m->n_in, b) || has(m->out, m->n_out, b)) return NULL;
  if (*n == KILN_TUNE_MICRO_IO)
    return kiln_make_status(KILN_INVALID_ARGUMENT, "tune: kernel '%s' has more than %d buffers",
                            m->plan->kernels[m->k].func->name, KILN_TUNE_MICRO_IO);
  v[(*n)++] = b;
  return NULL;
}

/* The instance's outputs (its 'Y') first, then what it reads; scratch
 * (a conv's grid 'F', the GEMM's unused workspace '-') stays the program's. */
static kiln_status_t find_io(kiln_tune_micro_t* m) {
  const kiln_plan_kernel_t* pk = &m->plan->kernels[m->k];
  const kiln_template_t* t = kiln_template_tunable_of(m->plan, m->k);
  if (!t) return kiln_make_status(KILN_INVALID_ARGUMENT, "tune: kernel '%s' is not a template instance", pk->func->name);
  const char* roles = NULL;
  const int32_t* args = pk->args;
  int32_t n = 0;
  switch (t->kind) {
    case KILN_TEMPLATE_GEMM:
      roles = t->gemm.roles, n = t->gemm.n_params;
      break;
    case KILN_TEMPLATE_CONV:
    case KILN_TEMPLATE_WINOGRAD:
      roles = t->conv.roles, n = t->conv.n_params, args = t->conv.args;
      break;
    case KILN_TEMPLATE_DEPTHWISE:
      n = pk->func->n_params;
      KILN_RETURN_IF_ERROR(add_io(m, args[t->dw.bind_y], true));
      for (int32_t j = 0; j < n; ++j)
        if (j != t->dw.bind_y) KILN_RETURN_IF_ERROR(add_io(m, args[j], false));
      return NULL;
    default:
      return kiln_make_status(KILN_INVALID_ARGUMENT, "tune: kernel '%s' is not a template instance", pk->func->name);
  }
  for (int32_t j = 0; j < n; ++j)
    if (roles[j] == 'Y') KILN_RETURN_IF_ERROR(add_io(m, args[j], true));
  for (int32_t j = 0; j < n; ++j)
    if (roles[j] != 'Y' && roles[j] != 'F' && roles[j] != '-') KILN_RETURN_IF_ERROR(add_io(m, args[j], false));
  if (!m->n_out)
    return kiln_make_status(KILN_INVALID_ARGUMENT, "tune: kernel '%s' has no output buffer", pk->func->name);
  return NULL;
}

kiln_status_t kiln_tune_view_build(const kiln_plan_t* p, kiln_plan_kernel_t* ks, int32_t n, kiln_plan_buffer_t* bufs,
                                   const int32_t* in, int32_t n_in, const int32_t* out, int32_t n_out,
                                   const kiln_target_t* target, kiln_program_t** prog) {
  for (int32_t i = 0; i < p->n_buffers; ++i)
    if (bufs[i].kind == KILN_PLAN_INPUT || bufs[i].kind == KILN_PLAN_OUTPUT) bufs[i].kind = KILN_PLAN_INTERMEDIATE;
  for (int32_t i = 0; i < n_in; ++i) bufs[in[i]].kind = KILN_PLAN_INPUT;
  for (int32_t i = 0; i < n_out; ++i) bufs[out[i]].kind = KILN_PLAN_OUTPUT;
  kiln_plan_t v = *p;
  v.kernels = ks;
  v.n_kernels = v.cap_kernels = n;
  v.buffers = bufs;
  kiln_program_build_options_t bo = tune_build_options;
  bo.io_inputs = in;
  bo.io_outputs = out;
  bo.n_io_inputs = n_in;
  bo.n_io_outputs = n_out;
  return kiln_program_build(&v, target, &bo, kiln_allocator_system(), prog);
}

/* A Winograd point with its switch entry 0 (last) runs the implicit-GEMM
 * alternative in its place. */
static bool winograd_off(const kiln_template_t* t, const kiln_template_tiles_t* tiles) {
  return t->kind == KILN_TEMPLATE_WINOGRAD && t->alt && tiles->n == t->tiles.n && tiles->n > 0 &&
         tiles->v[tiles->n - 1] == 0;
}

bool kiln_tune_point_f16_sums(const kiln_template_t* t, const kiln_template_tiles_t* tiles) {
  if (!t) return false;
  return winograd_off(t, tiles) ? t->alt->f16_sums : t->f16_sums;
}

/* The program of the instance at |tiles|. */
static kiln_status_t build_tmpl(kiln_tune_micro_t* m, const kiln_template_tiles_t* tiles, kiln_program_t** out) {
  const kiln_plan_t* p = m->plan;
  const kiln_template_t* t = kiln_template_tunable_of(p, m->k);
  /* a Winograd point with the switch off: the implicit-GEMM conv at its
   * own tiles, after the phase split where the Winograd one read X */
  const bool off = winograd_off(t, tiles);
  const kiln_template_t* wino = t;
  if (off) {
    t = t->alt;
    tiles = &t->tiles;
  }
  kiln_plan_kernel_t ks[3];
  kiln_template_t* tt = calloc(3, sizeof *tt);
  kiln_plan_buffer_t* bufs = malloc(sizeof *bufs * (size_t)(p->n_buffers + 1));
  kiln_array_t laid = {0};
  kiln_status_t s = tt && bufs ? NULL : kiln_make_status(KILN_OUT_OF_MEMORY, "tune: kernel '%s'", p->kernels[m->k].func->name);
  int32_t n = 0;
  if (!s) {
    memcpy(bufs, p->buffers, sizeof *bufs * (size_t)p->n_buffers);
    const bool conv = t->kind == KILN_TEMPLATE_CONV || t->kind == KILN_TEMPLATE_WINOGRAD;
    int32_t phase = -1, gemm = 0;
    if (off && wino->phase_merged && wino->conv.phase_kernel >= 0) {
      ks[n] = p->kernels[wino->conv.phase_kernel];
      ks[n].tmpl = NULL;
      phase = n++;
    }
    gemm = n;
    if (conv && t->conv.gemm_kernel != m->k) {
      ks[n] = p->kernels[t->conv.gemm_kernel];
      tt[n] = (kiln_template_t){.kind = KILN_TEMPLATE_MERGED, .into = n + 1, .weights.buffer = -1};
      ks[n].tmpl = &tt[n];
      ++n;
    }
    ks[n] = p->kernels[m->k];
    tt[n] = *t;
    tt[n].tiles = *tiles;
    tt[n].weights.laid_out = false;
    if (conv) {
      tt[n].conv.gemm_kernel = gemm;
      tt[n].conv.slot = n;
      if (phase >= 0) tt[n].conv.phase_kernel = phase;
    }
    ks[n].tmpl = &tt[n];
    /* a depthwise point with its switch off: the printed kernel */
    if (t->kind == KILN_TEMPLATE_DEPTHWISE && p->kernels[m->k].tmpl_off && tiles->n > 0 && tiles->v[tiles->n - 1] == 0)
      ks[n].tmpl = NULL;
    ++n;
    kiln_template_t* x = &tt[n - 1];
    const int32_t wb = x->weights.buffer;
    if (conv && x->weights.layout != KILN_TEMPLATE_W_PACKED && wb >= 0 && wb < p->n_buffers) {
      if (m->set->weight_blocks) m->set->weight_blocks(x);
      s = kiln_template_weights_convert(x, &p->buffers[wb], &laid);
      if (!s) {
        const tir_buffer_t* old = p->buffers[wb].buf;
        bufs[wb].buf = tir_buffer(&m->tir, old->name, old->dtype, 1, &laid.shape.dims[0], old->scope);
        bufs[wb].value = laid;
        bufs[wb].owned = false;
        memset(&bufs[wb].before_layout, 0, sizeof bufs[wb].before_layout);
        x->weights.laid_out = true;
        if (!bufs[wb].buf) s = tir_ctx_status(&m->tir);
      }
    }
  }
  if (!s) s = kiln_tune_view_build(p, ks, n, bufs, m->in, m->n_in, m->out, m->n_out, m->target, out);
  kiln_array_free(kiln_allocator_system(), &laid);
  free(bufs);
  free(tt);
  return s;
}

static double now_s(void);

/* m->units_new: the code units |ses|'s build created (not reused); -1
 * where the device does not count them. */
static void units_new_of(kiln_tune_micro_t* m, const kiln_session_t* ses) {
  m->units_new = -1;
  const kiln_device_api_t* api = ses && ses->exe ? kiln_device_api_find(m->dev->info.api) : NULL;
  int32_t units = 0, reused = 0;
  if (!api || !api->executable_units) return;
  api->executable_units(ses->exe, &units, &reused);
  if (units > 0) m->units_new = units - reused; /* 0: not counted (Vulkan without reuse_code) */
}

static kiln_status_t session_of(kiln_tune_micro_t* m, const kiln_template_tiles_t* tiles, kiln_module_t** mod,
                                kiln_session_t** ses) {
  kiln_program_t* prog = NULL;
  const double t0 = now_s();
  m->units_new = 0; /* a build that fails keeps no code */
  KILN_RETURN_IF_ERROR(m->build(m, tiles, &prog));
  m->program_s = now_s() - t0;
  KILN_RETURN_IF_ERROR(kiln_module_wrap(prog, mod));
  kiln_session_options_t so;
  kiln_tune_session_options(&so, m->threads, m->reuse_code);
  KILN_RETURN_IF_ERROR(kiln_session_create(*mod, m->dev, &so, ses));
  units_new_of(m, *ses);
  return NULL;
}

/* One run: the instance's summed dispatch times into *t (NULL: a warm-up). */
static kiln_status_t run_once(kiln_tune_micro_t* m, kiln_session_t* ses, kiln_array_t* out, double* t) {
  for (int32_t i = 0; i < m->n_out; ++i) kiln_array_free(kiln_allocator_system(), &out[i]);
  struct timespec c0, c1;
  clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &c0);
  KILN_RETURN_IF_ERROR(kiln_session_run(ses, m->inputs, out));
  clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &c1);
  if (!t) return NULL;
  if (m->cpu_time) {
    *t = (double)(c1.tv_sec - c0.tv_sec) + 1e-9 * (double)(c1.tv_nsec - c0.tv_nsec);
    return NULL;
  }
  int32_t n = 0, runs = 0;
  const kiln_profile_entry_t* e = kiln_session_profile(ses, &n, &runs);
  *t = 0;
  for (int32_t i = 0; e && i < n; ++i) *t += e[i].last_s;
  return NULL;
}

static uint64_t mix(uint64_t* x) {
  uint64_t z = (*x += 0x9e3779b97f4a7c15ull);
  z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
  z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
  return z ^ (z >> 31);
}

kiln_status_t kiln_tune_micro_init(kiln_tune_micro_t* m, const kiln_plan_t* plan, int32_t k,
                                   const kiln_target_t* target, const kiln_template_set_t* set, kiln_device_t* dev,
                                   int32_t threads, uint64_t seed) {
  memset(m, 0, sizeof *m);
  m->plan = plan;
  m->k = k;
  m->target = target;
  m->set = set;
  m->dev = dev;
  m->threads = threads;
  tir_ctx_init(&m->tir, kiln_allocator_system());
  m->tir_ready = true;
  m->build = build_tmpl;
  KILN_RETURN_IF_ERROR(find_io(m));
  return kiln_tune_micro_start(m, &kiln_template_tunable_of(plan, k)->tiles, plan->kernels[k].func->name, seed);
}

kiln_status_t kiln_tune_micro_start(kiln_tune_micro_t* m, const kiln_template_tiles_t* dflt, const char* what,
                                    uint64_t seed) {
  const kiln_plan_t* plan = m->plan;
  m->what = what;
  m->reuse_code = kiln_tune_code_shared(m->dev);
  for (int32_t i = 0; i < m->n_in; ++i) {
    const tir_buffer_t* b = plan->buffers[m->in[i]].buf;
    kiln_shape_t sh = {.rank = b->rank};
    for (int32_t d = 0; d < b->rank; ++d) sh.dims[d] = b->shape[d];
    KILN_RETURN_IF_ERROR(kiln_array_alloc(kiln_allocator_system(), b->dtype, &sh, &m->inputs[i]));
    if (b->dtype != KILN_DTYPE_F32) continue; /* tuning builds are fp32: other buffers stay zero */
    float* f = m->inputs[i].data;
    const size_t ne = m->inputs[i].nbytes / sizeof(float);
    for (size_t e = 0; e < ne; ++e) f[e] = (float)((double)(mix(&seed) >> 11) / 4503599627370496.0 - 1.0);
  }
  const double t0 = now_s();
  kiln_status_t s = session_of(m, dflt, &m->def_mod, &m->def_ses);
  if (!s) s = run_once(m, m->def_ses, m->ref, NULL);
  m->driver_s = now_s() - t0 - m->program_s; /* the session and the first run */
  if (s) return kiln_status_annotate(s, "tune: kernel '%s' alone", what);
  return NULL;
}

static double now_s(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

/* A session built and warmed up on a worker thread (a point's, m->async;
 * a whole model's, kiln_tune_session_by). The caller waits until its
 * deadline; past it the job is abandoned: the worker skips the warm-up run
 * if it has not started it, and kiln_tune_micro_join or
 * kiln_tune_join_abandoned waits for it and frees what it made. */
typedef struct kiln_tune_build_job_s {
  pthread_t th;
  pthread_mutex_t mu;
  pthread_cond_t cv;
  bool done, abandoned;
  kiln_module_t* mod; /* the job's reference */
  kiln_session_t* ses;
  kiln_status_t s;
  kiln_device_t* dev; /* retained: the job may outlive the tuner */
  int32_t threads, n_in, n_out;
  bool reuse_code; /* a whole model's build: kiln_session_options_t.reuse_code */
  kiln_array_t* inputs; /* copies, for the same reason */
  kiln_array_t* out;
  double sleep_s;
  struct kiln_tune_build_job_s* next; /* in the abandoned list */
  /* destroyed once the job is done (kiln_tune_session_by's |after|) */
  kiln_session_t* after_ses;
  kiln_module_t* after_mod;
  /* the other kernels' default sessions on the same device
   * (kiln_tune_micro_defer), likewise */
  kiln_session_t** more_ses;
  kiln_module_t** more_mod;
  int32_t n_more;
} build_job_t;

/* Jobs abandoned at a deadline whose tuner has finished: joined by
 * kiln_tune_join_abandoned. */
static pthread_mutex_t g_abandoned_mu = PTHREAD_MUTEX_INITIALIZER;
static build_job_t* g_abandoned;

static void* build_worker(void* arg) {
  build_job_t* j = arg;
  /* the test hook: a build the caller cannot stop (nanosleep resumed
   * until the whole time has passed) */
  for (const double end = now_s() + j->sleep_s; j->sleep_s > 0;) {
    const double left = end - now_s();
    if (left <= 0) break;
    struct timespec ts = {(time_t)left, (long)((left - floor(left)) * 1e9)};
    nanosleep(&ts, NULL);
  }
  kiln_session_options_t so;
  kiln_tune_session_options(&so, j->threads, j->reuse_code);
  kiln_status_t s = kiln_session_create(j->mod, j->dev, &so, &j->ses);
  pthread_mutex_lock(&j->mu);
  const bool abandoned = j->abandoned;
  pthread_mutex_unlock(&j->mu);
  /* the warm-up run: what a driver builds at the first launch (PoCL's
   * work-group functions, lavapipe's shader variants) */
  if (!s && !abandoned) s = kiln_session_run(j->ses, j->inputs, j->out);
  pthread_mutex_lock(&j->mu);
  if (j->abandoned) { /* nobody will use it: the device is idle once done */
    kiln_session_destroy(j->ses);
    j->ses = NULL;
  }
  j->s = s;
  j->done = true;
  pthread_cond_broadcast(&j->cv);
  pthread_mutex_unlock(&j->mu);
  return NULL;
}

static void job_free(build_job_t* j) {
  kiln_session_destroy(j->ses);
  kiln_module_release(j->mod);
  kiln_session_destroy(j->after_ses);
  kiln_module_release(j->after_mod);
  for (int32_t i = 0; i < j->n_more; ++i) {
    kiln_session_destroy(j->more_ses[i]);
    kiln_module_release(j->more_mod[i]);
  }
  free(j->more_ses);
  free(j->more_mod);
  for (int32_t i = 0; j->out && i < j->n_out; ++i) kiln_array_free(kiln_allocator_system(), &j->out[i]);
  for (int32_t i = 0; j->inputs && i < j->n_in; ++i) kiln_array_free(kiln_allocator_system(), &j->inputs[i]);
  free(j->out);
  free(j->inputs);
  kiln_device_release(j->dev);
  kiln_status_free(j->s);
  pthread_cond_destroy(&j->cv);
  pthread_mutex_destroy(&j->mu);
  free(j);
}

bool kiln_tune_micro_join(kiln_tune_micro_t* m) {
  build_job_t* j = m->pending;
  if (!j) return false;
  pthread_join(j->th, NULL);
  job_free(j);
  m->pending = NULL;
  return true;
}

int32_t kiln_tune_join_abandoned(void) {
  pthread_mutex_lock(&g_abandoned_mu);
  build_job_t* j = g_abandoned;
  g_abandoned = NULL;
  pthread_mutex_unlock(&g_abandoned_mu);
  int32_t n = 0;
  while (j) {
    build_job_t* next = j->next;
    pthread_join(j->th, NULL);
    job_free(j);
    j = next;
    ++n;
  }
  return n;
}

/* Waits until |j| is done or |deadline|; whether it is done. */
static bool wait_done(build_job_t* j, double deadline) {
  pthread_mutex_lock(&j->mu);
  while (!j->done && now_s() < deadline) {
    struct timespec ts;
    const double d = fmin(deadline, now_s() + 3600);
    ts.tv_sec = (time_t)d;
    ts.tv_nsec = (long)((d - floor(d)) * 1e9);
    if (ts.tv_nsec >= 1000000000L) ts.tv_nsec = 999999999L;
    const int e = pthread_cond_timedwait(&j->cv, &j->mu, &ts);
    if (e != 0 && e != ETIMEDOUT && e != EINTR) break;
  }
  const bool done = j->done;
  pthread_mutex_unlock(&j->mu);
  return done;
}

int32_t kiln_tune_abandoned_wait(double deadline) {
  int32_t n = 0;
  pthread_mutex_lock(&g_abandoned_mu);
  for (build_job_t* j = g_abandoned; j; j = j->next) n += !wait_done(j, deadline);
  pthread_mutex_unlock(&g_abandoned_mu);
  return n;
}

bool kiln_tune_micro_defer(kiln_tune_micro_t* owner, kiln_tune_micro_t* m) {
  build_job_t* j = owner->pending;
  if (!j || (!m->def_ses && !m->def_mod)) return false;
  kiln_session_t** s = realloc(j->more_ses, sizeof *s * (size_t)(j->n_more + 1));
  if (s) j->more_ses = s;
  kiln_module_t** md = s ? realloc(j->more_mod, sizeof *md * (size_t)(j->n_more + 1)) : NULL;
  if (!md) return false; /* out of memory: destroyed at once, as before */
  j->more_mod = md;
  j->more_ses[j->n_more] = m->def_ses;
  j->more_mod[j->n_more++] = m->def_mod;
  m->def_ses = NULL;
  m->def_mod = NULL;
  return true;
}

/* |m|'s abandoned job (if any) to the process's list, not waited for. */
static void detach_pending(kiln_tune_micro_t* m) {
  build_job_t* j = m->pending;
  if (!j) return;
  pthread_mutex_lock(&g_abandoned_mu);
  j->next = g_abandoned;
  g_abandoned = j;
  pthread_mutex_unlock(&g_abandoned_mu);
  m->pending = NULL;
}

static bool wait_done(build_job_t* j, double deadline);

/* kiln_tune_session_by; a job not done by |deadline| is left in *pending. */
static kiln_status_t session_job(kiln_module_t* mod, kiln_device_t* dev, int32_t threads, bool reuse_code,
                                 const kiln_array_t* inputs, int32_t n_in, int32_t n_out, double sleep_s,
                                 double deadline, kiln_session_t** ses, build_job_t** pending) {
  *pending = NULL;
  build_job_t* j = calloc(1, sizeof *j);
  kiln_array_t* in = calloc((size_t)n_in + 1, sizeof *in);
  kiln_array_t* out = calloc((size_t)n_out + 1, sizeof *out);
  if (!j || !in || !out) {
    free(j);
    free(in);
    free(out);
    kiln_module_release(mod);
    return kiln_make_status(KILN_OUT_OF_MEMORY, "tune: a build's worker");
  }
  pthread_condattr_t ca;
  pthread_condattr_init(&ca);
  pthread_condattr_setclock(&ca, CLOCK_MONOTONIC);
  pthread_mutex_init(&j->mu, NULL);
  pthread_cond_init(&j->cv, &ca);
  pthread_condattr_destroy(&ca);
  j->mod = mod;
  j->dev = dev;
  kiln_device_retain(dev);
  j->threads = threads;
  j->reuse_code = reuse_code;
  j->sleep_s = sleep_s;
  j->inputs = in;
  j->out = out;
  j->n_out = n_out;
  kiln_status_t s = NULL;
  for (int32_t i = 0; i < n_in && !s; ++i) {
    const kiln_array_t* x = &inputs[i];
    s = kiln_array_alloc(kiln_allocator_system(), x->dtype, &x->shape, &j->inputs[i]);
    if (!s) {
      j->n_in = i + 1;
      memcpy(j->inputs[i].data, x->data, (size_t)x->nbytes);
    }
  }
  if (s) {
    job_free(j);
    return s;
  }
  if (pthread_create(&j->th, NULL, build_worker, j) != 0) {
    job_free(j);
    return kiln_make_status(KILN_INTERNAL, "tune: no thread for a build");
  }
  wait_done(j, deadline);
  pthread_mutex_lock(&j->mu);
  const bool done = j->done;
  if (!done) j->abandoned = true;
  pthread_mutex_unlock(&j->mu);
  if (!done) { /* the driver's build goes on; joined later, its result discarded */
    *pending = j;
    return NULL;
  }
  pthread_join(j->th, NULL);
  s = j->s;
  j->s = NULL;
  if (!s) {
    *ses = j->ses;
    j->ses = NULL;
    j->mod = NULL; /* the session holds the module */
    kiln_module_release(mod);
  }
  job_free(j);
  return s;
}

kiln_status_t kiln_tune_session_by(kiln_module_t* mod, kiln_device_t* dev, int32_t threads,
                                   const kiln_array_t* inputs, int32_t n_in, int32_t n_out, double deadline,
                                   kiln_session_t* after_ses, kiln_module_t* after_mod, double test_sleep_s,
                                   kiln_session_t** ses, bool* late) {
  build_job_t* j = NULL;
  *late = false;
  /* the default and closing builds share the code of their unchanged
   * kernels (PoCL compiles the model's program in one piece) */
  kiln_status_t s =
      session_job(mod, dev, threads, kiln_tune_reuse_code(), inputs, n_in, n_out, test_sleep_s, deadline, ses, &j);
  if (!s && j) {
    *late = true;
    j->after_ses = after_ses;
    j->after_mod = after_mod;
    pthread_mutex_lock(&g_abandoned_mu);
    j->next = g_abandoned;
    g_abandoned = j;
    pthread_mutex_unlock(&g_abandoned_mu);
  }
  return s;
}

/* The session of |tiles| built on a worker (m->async) until |deadline|:
 * *late (nothing in *mod, *ses) when it was not done by then. */
static kiln_status_t session_by(kiln_tune_micro_t* m, const kiln_template_tiles_t* tiles, double deadline,
                                kiln_module_t** mod, kiln_session_t** ses, bool* late) {
  *late = false;
  kiln_program_t* prog = NULL;
  const double t0 = now_s();
  m->units_new = 0; /* a build that fails keeps no code */
  KILN_RETURN_IF_ERROR(m->build(m, tiles, &prog));
  const double t1 = now_s();
  m->program_s = t1 - t0;
  kiln_module_t* md = NULL;
  KILN_RETURN_IF_ERROR(kiln_module_wrap(prog, &md));
  kiln_module_retain(md); /* the caller's reference, the job's own */
  build_job_t* j = NULL;
  const double sleep_s = m->test_sleep_s;
  m->test_sleep_s = 0;
  kiln_status_t s =
      session_job(md, m->dev, m->threads, m->reuse_code, m->inputs, m->n_in, m->n_out, sleep_s, deadline, ses, &j);
  m->driver_s = now_s() - t1;
  m->units_new = -1;
  if (!s && !j) units_new_of(m, *ses);
  if (s || j) kiln_module_release(md);
  else *mod = md;
  m->pending = j;
  *late = j != NULL;
  return s;
}

kiln_status_t kiln_tune_micro_measure(kiln_tune_micro_t* m, const kiln_template_tiles_t* tiles, int32_t repeats,
                                      double* t, double* t_def, bool* match, FILE* log) {
  bool late = false;
  KILN_RETURN_IF_ERROR(kiln_tune_micro_measure_by(m, tiles, repeats, INFINITY, t, t_def, match, &late, log));
  return NULL;
}

kiln_status_t kiln_tune_micro_measure_by(kiln_tune_micro_t* m, const kiln_template_tiles_t* tiles, int32_t repeats,
                                         double deadline, double* t, double* t_def, bool* match, bool* late,
                                         FILE* log) {
  const int32_t R = repeats > 0 ? repeats : 1;
  kiln_module_t* mod = NULL;
  kiln_session_t* ses = NULL;
  kiln_array_t out[KILN_TUNE_MICRO_IO], dout[KILN_TUNE_MICRO_IO];
  memset(out, 0, sizeof out);
  memset(dout, 0, sizeof dout);
  *late = false;
  kiln_tune_micro_join(m); /* an earlier abandoned build: it uses m->dev */
  double* v = calloc(2 * (size_t)R, sizeof(double));
  kiln_status_t s = v ? NULL : kiln_make_status(KILN_OUT_OF_MEMORY, "tune: measure");
  if (!s && m->async) s = session_by(m, tiles, deadline, &mod, &ses, late);
  else if (!s) {
    const double t0 = now_s();
    s = session_of(m, tiles, &mod, &ses);
    m->driver_s = now_s() - t0 - m->program_s;
  }
  int32_t used = R;
  for (int32_t r = -1; r < R && !s && !*late; ++r) {
    /* Which of the pair runs first alternates: the second run finds the
     * inputs (and the first's code paths) in the caches the first just
     * filled. Default first in every pair made a point look faster than
     * it was: the default against itself read 0.92x by the median over
     * 64 points of a MobileNetV2 depthwise conv, CPU time at one thread,
     * more than the 3% a point needs to win. */
    const bool cand_first = r >= 0 && (r & 1);
    if (cand_first) s = run_once(m, ses, out, &v[r]);
    if (!s) s = run_once(m, m->def_ses, dout, r < 0 ? NULL : &v[R + r]);
    if (!s && !cand_first) s = run_once(m, ses, out, r < 0 ? NULL : &v[r]);
    /* A point far slower than its default after a few pairs cannot win:
     * its other pairs would only spend the budget (on lavapipe at load 15
     * the runs were most of a 19 s point). The medians of the pairs so far
     * (sorting a prefix keeps its values). */
    if (!s && r + 1 >= MICRO_EARLY_PAIRS && r + 1 < R &&
        median(v, r + 1) > MICRO_EARLY_RATIO * median(v + R, r + 1)) {
      used = r + 1;
      break;
    }
    /* the deadline: the pairs so far count if there are enough of them */
    if (!s && r + 1 < R && now_s() >= deadline) {
      if (r + 1 >= MICRO_EARLY_PAIRS) used = r + 1;
      else *late = true;
      break;
    }
  }
  if (!s && !*late) {
    *t = median(v, used);
    *t_def = median(v + R, used);
    *match = true;
    const kiln_template_t* tt = m->plan && m->k >= 0 ? kiln_template_tunable_of(m->plan, m->k) : NULL;
    for (int32_t i = 0; i < m->n_out; ++i) {
      kiln_compare_result_t cr;
      double rtol, atol;
      kiln_tune_tolerance(kiln_tune_point_f16_sums(tt, tiles), &m->ref[i], &rtol, &atol);
      kiln_compare(&out[i], &m->ref[i], rtol, atol, &cr);
      if (!cr.ok) {
        *match = false;
        if (log) {
          char tl[128];
          kiln_tune_tiles_format(tiles, tl, sizeof tl);
          fprintf(log, "\ntune: kernel '%s': point %s: its output differs from the default's: %s\n", m->what, tl,
                  cr.message);
        }
      }
    }
  }
  for (int32_t i = 0; i < m->n_out; ++i) {
    kiln_array_free(kiln_allocator_system(), &out[i]);
    kiln_array_free(kiln_allocator_system(), &dout[i]);
  }
  free(v);
  kiln_session_destroy(ses);
  kiln_module_release(mod);
  return s;
}

void kiln_tune_micro_free(kiln_tune_micro_t* m) {
  detach_pending(m);
  for (int32_t i = 0; i < KILN_TUNE_MICRO_IO; ++i) {
    kiln_array_free(kiln_allocator_system(), &m->inputs[i]);
    kiln_array_free(kiln_allocator_system(), &m->ref[i]);
  }
  kiln_session_destroy(m->def_ses);
  kiln_module_release(m->def_mod);
  if (m->tir_ready) tir_ctx_deinit(&m->tir);
  for (int32_t i = 0; i < KILN_TUNE_MICRO_IO; ++i) {
    free(m->in_name[i]);
    free(m->out_name[i]);
  }
  memset(m, 0, sizeof *m);
}
