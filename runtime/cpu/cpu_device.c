/* The CPU device: host buffers, compiled C kernels, and one queue thread
 * that runs submitted command buffers in order (see cpu_device.h). */
#include "runtime/cpu/cpu_device.h"

#include <dirent.h>
#include <fcntl.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <time.h>
#include <unistd.h>

#include "runtime/cpu/cpu_loader.h"
#include "runtime/cpu/cpu_native.h"
#include "runtime/device_registry.h"

struct kiln_device_buffer_s {
  uint8_t* base;
  uint64_t bytes;
  bool owned;  /* false for views and wrapped host memory */
  size_t mmapped; /* owned and from mmap: its length (0: from posix_memalign) */
};

/* Buffers from this size on come from mmap: the OS hands out zero pages as
 * they are first touched, so a session's arenas cost nothing until a run
 * uses them (a second slot that never runs is never paid for) instead of a
 * memset of every byte at session creation. */
#define MMAP_FROM_BYTES (256u << 10)

struct kiln_device_executable_s {
  kiln_cpu_module_t module;
  int32_t n_kernels;
  int32_t threads;
  const char* isa; /* the module's machine code that runs, NULL: built from C */
  char note[600];  /* why the module's machine code was not used, "" if it was */
  kiln_cpu_compile_stats_t stats; /* built from C: the C compiler's share of the wait */
};

enum { OP_DISPATCH, OP_BARRIER, OP_TIMESTAMP };

typedef struct op_s {
  int32_t kind;
  int32_t index; /* kernel or timestamp slot */
  void** args;   /* DISPATCH: argument pointers */
} op_t;

struct kiln_device_cmd_s {
  kiln_device_executable_t* exe;
  op_t* ops;
  int32_t n_ops, cap_ops;
  bool ended;
  uint64_t* ts;
  int32_t n_ts;
  int32_t pending; /* submissions not finished (guarded by the device lock) */
};

#define QUEUE_CAP 256

typedef struct cpu_device_s {
  kiln_device_t base;
  int32_t threads;
  pthread_t thread;
  pthread_mutex_t mu;
  pthread_cond_t work, done;
  kiln_device_cmd_t* queue[QUEUE_CAP];
  int32_t q_head, q_len;
  bool stop;
  /* reuse_code's code-cache folder where the cache is off (kiln tune):
   * made at the first such build, so its parts' objects link into later
   * ones (the closing build compiles only the parts its kept points
   * changed), and emptied and removed with the device */
  char memo[256];
} cpu_device_t;

static cpu_device_t* dev_of(kiln_device_t* d) { return (cpu_device_t*)d; }

static uint64_t now_ns(void) {
  struct timespec t;
  clock_gettime(CLOCK_MONOTONIC, &t);
  return (uint64_t)t.tv_sec * 1000000000ull + (uint64_t)t.tv_nsec;
}

static void run_cmd(cpu_device_t* d, kiln_device_cmd_t* c) {
  kiln_device_executable_t* e = c->exe;
  /* omp_set_num_threads is per calling thread: set it on the queue thread. */
  if (e->module.set_threads) e->module.set_threads(e->threads);
  for (int32_t i = 0; i < c->n_ops; ++i) {
    const op_t* op = &c->ops[i];
    if (op->kind == OP_DISPATCH) e->module.fns[op->index]((void* const*)op->args);
    else if (op->kind == OP_TIMESTAMP) c->ts[op->index] = now_ns();
  }
}

static void* queue_main(void* arg) {
  cpu_device_t* d = arg;
  pthread_mutex_lock(&d->mu);
  for (;;) {
    while (!d->q_len && !d->stop) pthread_cond_wait(&d->work, &d->mu);
    if (!d->q_len) break; /* stopping, queue drained */
    kiln_device_cmd_t* c = d->queue[d->q_head];
    d->q_head = (d->q_head + 1) % QUEUE_CAP;
    d->q_len--;
    pthread_mutex_unlock(&d->mu);
    run_cmd(d, c);
    pthread_mutex_lock(&d->mu);
    c->pending--;
    pthread_cond_broadcast(&d->done);
  }
  pthread_mutex_unlock(&d->mu);
  return NULL;
}

static void cpu_destroy(kiln_device_t* base) {
  cpu_device_t* d = dev_of(base);
  pthread_mutex_lock(&d->mu);
  d->stop = true;
  pthread_cond_broadcast(&d->work);
  pthread_mutex_unlock(&d->mu);
  pthread_join(d->thread, NULL);
  DIR* dir = d->memo[0] ? opendir(d->memo) : NULL;
  for (struct dirent* ent; dir && (ent = readdir(dir));)
    if (ent->d_name[0] != '.') unlinkat(dirfd(dir), ent->d_name, 0);
  if (dir) closedir(dir);
  if (d->memo[0]) rmdir(d->memo);
  pthread_mutex_destroy(&d->mu);
  pthread_cond_destroy(&d->work);
  pthread_cond_destroy(&d->done);
  kiln_allocator_free(base->allocator, d);
}

/* ---- buffers ---------------------------------------------------------- */

static kiln_status_t cpu_buffer_create(kiln_device_t* base, uint64_t bytes, const char* what,
                                       kiln_device_buffer_t** out) {
  if (bytes > base->info.max_alloc_bytes)
    return kiln_make_status(KILN_OUT_OF_MEMORY,
                            "cpu: %s: %llu bytes is more than the device allows (%llu bytes)",
                            what ? what : "buffer", (unsigned long long)bytes,
                            (unsigned long long)base->info.max_alloc_bytes);
  kiln_device_buffer_t* b = calloc(1, sizeof(*b));
  size_t sz = (size_t)((bytes + 63) & ~(uint64_t)63);
  void* m = NULL;
  if (b && sz >= MMAP_FROM_BYTES) {
    m = mmap(NULL, sz, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    if (m == MAP_FAILED) m = NULL;
    else b->mmapped = sz;
  }
  if (!b || (!m && (posix_memalign(&m, 64, sz ? sz : 64) != 0 || !m))) {
    free(b);
    return kiln_make_status(KILN_OUT_OF_MEMORY, "cpu: cannot allocate %llu bytes for %s",
                            (unsigned long long)bytes, what ? what : "a buffer");
  }
  if (!b->mmapped) memset(m, 0, sz ? sz : 64);
  b->base = m;
  b->bytes = bytes;
  b->owned = true;
  *out = b;
  return NULL;
}

/* The weights of a mapped module, used where they lie (device.h). Not
 * owned, so buffer_destroy frees only the handle. */
static kiln_status_t cpu_buffer_wrap(kiln_device_t* base, const void* host, uint64_t bytes, const char* what,
                                     kiln_device_buffer_t** out) {
  if (!host || ((uintptr_t)host & 63))
    return kiln_make_status(KILN_INVALID_ARGUMENT, "cpu: %s: host memory at %p is not 64-byte aligned",
                            what ? what : "buffer", host);
  kiln_device_buffer_t* b = calloc(1, sizeof(*b));
  if (!b) return kiln_make_status(KILN_OUT_OF_MEMORY, "cpu: out of memory wrapping %s", what ? what : "a buffer");
  b->base = (uint8_t*)(uintptr_t)host;
  b->bytes = bytes;
  b->owned = false;
  *out = b;
  return NULL;
}

static kiln_status_t cpu_view_create(kiln_device_t* base, kiln_device_buffer_t* parent,
                                     uint64_t offset, uint64_t bytes, kiln_device_buffer_t** out) {
  if (!parent || offset > parent->bytes || bytes > parent->bytes - offset)
    return kiln_make_status(KILN_OUT_OF_RANGE, "cpu: view [%llu, +%llu) is outside its buffer (%llu bytes)",
                            (unsigned long long)offset, (unsigned long long)bytes,
                            (unsigned long long)(parent ? parent->bytes : 0));
  kiln_device_buffer_t* b = calloc(1, sizeof(*b));
  if (!b) return kiln_make_status(KILN_OUT_OF_MEMORY, "cpu: out of memory for a buffer view");
  b->base = parent->base + offset;
  b->bytes = bytes;
  *out = b;
  return NULL;
}

static void cpu_buffer_destroy(kiln_device_t* base, kiln_device_buffer_t* b) {
  if (!b) return;
  if (b->owned && b->mmapped) munmap(b->base, b->mmapped);
  else if (b->owned) free(b->base);
  free(b);
}

static kiln_status_t check_range(const kiln_device_buffer_t* b, uint64_t off, uint64_t n) {
  if (!b || off > b->bytes || n > b->bytes - off)
    return kiln_make_status(KILN_OUT_OF_RANGE, "cpu: copy of %llu bytes at %llu is outside the buffer (%llu bytes)",
                            (unsigned long long)n, (unsigned long long)off,
                            (unsigned long long)(b ? b->bytes : 0));
  return NULL;
}

static kiln_status_t cpu_buffer_write(kiln_device_t* base, kiln_device_buffer_t* b, uint64_t off,
                                      const void* src, uint64_t n) {
  KILN_RETURN_IF_ERROR(check_range(b, off, n));
  if (n) memcpy(b->base + off, src, (size_t)n);
  return NULL;
}

static kiln_status_t cpu_buffer_read(kiln_device_t* base, kiln_device_buffer_t* b, uint64_t off,
                                     void* dst, uint64_t n) {
  KILN_RETURN_IF_ERROR(check_range(b, off, n));
  if (n) memcpy(dst, b->base + off, (size_t)n);
  return NULL;
}

/* ---- executables ------------------------------------------------------ */

/* The module's machine code for this CPU, when it has some (no compiler
 * runs). NULL on success; otherwise the reason is kept in e->note (the C
 * source is the fallback) and a status is returned for the caller to try
 * the C source. */
static kiln_status_t load_native(const kiln_program_t* p, const char* const* names,
                                 kiln_device_executable_t* e) {
  if (p->code.n_native == 0) return kiln_make_status(KILN_NOT_FOUND, "no machine code");
  kiln_status_t s = kiln_cpu_native_load(&p->code, p->model_name, names, p->n_kernels, &e->module, &e->isa);
  if (s) {
    snprintf(e->note, sizeof e->note, "%s", kiln_status_message(s));
    e->isa = NULL;
  }
  return s;
}

static kiln_status_t cpu_executable_create(kiln_device_t* base, const kiln_program_t* p,
                                           const kiln_device_build_options_t* o,
                                           kiln_device_executable_t** out) {
  if (strcmp(p->target, kiln_device_api_cpu.name) != 0)
    return kiln_make_status(KILN_INVALID_ARGUMENT, "cpu: %s was compiled for %s, not cpu",
                            p->model_name, p->target);
  kiln_device_executable_t* e = calloc(1, sizeof(*e));
  if (!e) return kiln_make_status(KILN_OUT_OF_MEMORY, "cpu: out of memory");
  e->n_kernels = p->n_kernels;
  e->threads = o && o->threads > 0 ? o->threads : dev_of(base)->threads;
  if (p->n_kernels == 0) {
    *out = e;
    return NULL;
  }
  const char** names = calloc((size_t)p->n_kernels, sizeof(char*));
  if (!names) {
    free(e);
    return kiln_make_status(KILN_OUT_OF_MEMORY, "cpu: out of memory");
  }
  for (int32_t k = 0; k < p->n_kernels; ++k) names[k] = p->kernels[k].name;
  kiln_status_t s = load_native(p, names, e);
  if (s) {
    kiln_status_free(s);
    kiln_cpu_options_t co;
    kiln_cpu_options_default(&co);
    co.threads = e->threads;
    if (o && o->cache_dir) co.cache_dir = o->cache_dir;
    cpu_device_t* d = dev_of(base);
    if (o && o->reuse_code && co.cache_dir && !co.cache_dir[0]) {
      pthread_mutex_lock(&d->mu);
      const char* tmp = getenv("TMPDIR");
      if (!d->memo[0]) {
        snprintf(d->memo, sizeof d->memo, "%s/kiln-cpu-memo-XXXXXX", tmp && *tmp ? tmp : "/tmp");
        if (!mkdtemp(d->memo)) d->memo[0] = 0; /* no memo: this build compiles all */
      }
      if (d->memo[0]) co.cache_dir = d->memo;
      pthread_mutex_unlock(&d->mu);
    }
    if (o) co.dump_dir = o->dump_dir;
    if (o) co.progress = o->progress;
    memset(&e->stats, 0, sizeof e->stats);
    s = kiln_cpu_module_load(&p->code, &co, names, p->n_kernels, &e->module, &e->stats);
    if (s && e->note[0])
      s = kiln_status_annotate(s, "%s; compiling its C source instead failed", e->note);
  }
  free(names);
  if (s) {
    free(e);
    return s;
  }
  *out = e;
  return NULL;
}

static void cpu_executable_destroy(kiln_device_t* base, kiln_device_executable_t* e) {
  if (!e) return;
  kiln_cpu_module_unload(&e->module);
  free(e);
}

/* ---- command buffers -------------------------------------------------- */

static kiln_status_t cpu_cmd_create(kiln_device_t* base, kiln_device_executable_t* e,
                                    int32_t max_ts, kiln_device_cmd_t** out) {
  kiln_device_cmd_t* c = calloc(1, sizeof(*c));
  if (!c) return kiln_make_status(KILN_OUT_OF_MEMORY, "cpu: out of memory for a command buffer");
  c->exe = e;
  c->n_ts = max_ts > 0 ? max_ts : 0;
  if (c->n_ts && !(c->ts = calloc((size_t)c->n_ts, sizeof(uint64_t)))) {
    free(c);
    return kiln_make_status(KILN_OUT_OF_MEMORY, "cpu: out of memory for %d timestamps", (int)max_ts);
  }
  *out = c;
  return NULL;
}

static kiln_status_t cpu_wait(kiln_device_t* base, kiln_device_cmd_t* c) {
  cpu_device_t* d = dev_of(base);
  pthread_mutex_lock(&d->mu);
  while (c->pending > 0) pthread_cond_wait(&d->done, &d->mu);
  pthread_mutex_unlock(&d->mu);
  return NULL;
}

static void cpu_cmd_destroy(kiln_device_t* base, kiln_device_cmd_t* c) {
  if (!c) return;
  kiln_status_free(cpu_wait(base, c));
  for (int32_t i = 0; i < c->n_ops; ++i) free(c->ops[i].args);
  free(c->ops);
  free(c->ts);
  free(c);
}

static kiln_status_t push_op(kiln_device_cmd_t* c, op_t op) {
  if (c->ended) return kiln_make_status(KILN_INVALID_ARGUMENT, "cpu: recording into an ended command buffer");
  if (c->n_ops == c->cap_ops) {
    int32_t nc = c->cap_ops ? c->cap_ops * 2 : 64;
    op_t* q = realloc(c->ops, sizeof(op_t) * (size_t)nc);
    if (!q) return kiln_make_status(KILN_OUT_OF_MEMORY, "cpu: out of memory recording commands");
    c->ops = q;
    c->cap_ops = nc;
  }
  c->ops[c->n_ops++] = op;
  return NULL;
}

static kiln_status_t cpu_cmd_dispatch(kiln_device_t* base, kiln_device_cmd_t* c, int32_t kernel,
                                      kiln_device_buffer_t* const* args, int32_t n_args) {
  if (kernel < 0 || kernel >= c->exe->n_kernels)
    return kiln_make_status(KILN_OUT_OF_RANGE, "cpu: dispatch of kernel %d, the executable has %d",
                            (int)kernel, (int)c->exe->n_kernels);
  void** a = calloc((size_t)(n_args ? n_args : 1), sizeof(void*));
  if (!a) return kiln_make_status(KILN_OUT_OF_MEMORY, "cpu: out of memory recording a dispatch");
  for (int32_t j = 0; j < n_args; ++j) a[j] = args[j] ? args[j]->base : NULL;
  kiln_status_t s = push_op(c, (op_t){OP_DISPATCH, kernel, a});
  if (s) free(a);
  return s;
}

static kiln_status_t cpu_cmd_barrier(kiln_device_t* base, kiln_device_cmd_t* c) {
  return push_op(c, (op_t){OP_BARRIER, 0, NULL});
}

static kiln_status_t cpu_cmd_timestamp(kiln_device_t* base, kiln_device_cmd_t* c, int32_t slot) {
  if (slot < 0 || slot >= c->n_ts)
    return kiln_make_status(KILN_OUT_OF_RANGE, "cpu: timestamp slot %d of %d", (int)slot, (int)c->n_ts);
  return push_op(c, (op_t){OP_TIMESTAMP, slot, NULL});
}

static kiln_status_t cpu_cmd_end(kiln_device_t* base, kiln_device_cmd_t* c) {
  c->ended = true;
  return NULL;
}

static kiln_status_t cpu_submit(kiln_device_t* base, kiln_device_cmd_t* c) {
  cpu_device_t* d = dev_of(base);
  if (!c->ended) return kiln_make_status(KILN_INVALID_ARGUMENT, "cpu: submit of a command buffer still recording");
  pthread_mutex_lock(&d->mu);
  if (d->q_len == QUEUE_CAP) {
    pthread_mutex_unlock(&d->mu);
    return kiln_make_status(KILN_LIMIT_EXCEEDED, "cpu: %d submissions already queued", QUEUE_CAP);
  }
  d->queue[(d->q_head + d->q_len) % QUEUE_CAP] = c;
  d->q_len++;
  c->pending++;
  pthread_cond_signal(&d->work);
  pthread_mutex_unlock(&d->mu);
  return NULL;
}

static kiln_status_t cpu_timestamps_read(kiln_device_t* base, kiln_device_cmd_t* c,
                                         uint64_t* out_ns, int32_t n) {
  if (n < 0 || n > c->n_ts)
    return kiln_make_status(KILN_OUT_OF_RANGE, "cpu: %d timestamps asked, %d recorded", (int)n, (int)c->n_ts);
  if (n) memcpy(out_ns, c->ts, sizeof(uint64_t) * (size_t)n);
  return NULL;
}

static const kiln_device_vtable_t cpu_vtable = {KILN_DEVICE_VTABLE_REQUIRED(cpu) .buffer_wrap = cpu_buffer_wrap};

static void cpu_model_name(char* out, size_t n) {
  snprintf(out, n, "host cpu");
  FILE* f = fopen("/proc/cpuinfo", "r");
  if (!f) return;
  char line[512];
  while (fgets(line, sizeof line, f)) {
    const char* c = strchr(line, ':');
    if (strncmp(line, "model name", 10) == 0 && c) {
      while (*++c == ' ') {
      }
      snprintf(out, n, "%.*s", (int)strcspn(c, "\n"), c);
      break;
    }
  }
  fclose(f);
}

/* Kernel objects are built with -fopenmp; libgomp, loaded with the first
 * of them, reads its environment once. By default its idle threads spin
 * ~300000 times (~7 ms) after every parallel region, and a run is dozens
 * of regions: with more runnable threads than cores (several sessions, a
 * batcher's clients, the application's own threads, a loaded machine) the
 * spinners take the cores from the threads with work (ResNet-18 on 2 cores
 * under load: ~1000 vs 115 ms/run; a batcher's small batch 17-28 vs 0.07
 * ms). Sleeping at once (OMP_WAIT_POLICY=passive) costs a futex wake-up
 * per region instead, 10-20 us on a VM's idle core, which is most of a
 * small kernel: MobileNetV2 at 2 threads ran no faster than at 1. So,
 * unless the environment already says how OpenMP waits, idle threads spin
 * for about SPIN_NS (100 us) -- long enough to catch the next kernel's region,
 * since a run's kernels follow each other within microseconds -- then
 * sleep (GOMP_SPINCOUNT; libgomp's own cap for more threads than cores,
 * 100 spins, still applies). A spin is an atomic load and a pause (23 ns
 * on Zen 5, 3-40 ns elsewhere), so the count is calibrated here. libomp
 * (KILN_CC=clang) keeps sleeping at once (KMP_BLOCKTIME=0, as passive
 * did). Set once, before any kernel object is loaded (a runtime loaded
 * earlier by the application keeps its own setting). setenv races getenv
 * on other threads: open the first CPU device before starting threads
 * that read the environment (include/kiln/runtime.h). SPIN_NS: on an
 * idle 2-core Zen 5 VM, `bench/models_peers.py --threads 2` gave kiln /
 * onnxruntime geometric means of 1.14, 1.14 and 1.03 with 10 us and 0.94
 * and 0.97 with 100 us (interleaved runs; a halted vCPU wakes slowly, and
 * the small-kernel models alternated between fast and slow processes at
 * 10 us). Under load the spin is CPU taken from other work (MobileNetV2
 * 5.1 ms of CPU per run at 10 us, 9.3 at 46 us, at load 25), still far
 * below libgomp's own ~7 ms; OMP_WAIT_POLICY=passive sleeps at once. */
#define SPIN_NS 100000.0

static void spin_relax(void) {
#if defined(__x86_64__) || defined(__i386__)
  __builtin_ia32_pause(); /* libgomp's cpu_relax on x86 */
#else
  __asm__ volatile("" ::: "memory");
#endif
}

/* Spins in SPIN_NS, timed like libgomp's do_spin loop (fastest of 3). */
static long calibrated_spins(void) {
  static volatile int flag;
  double best = 0;
  for (int r = 0; r < 3; ++r) {
    struct timespec a, b;
    clock_gettime(CLOCK_MONOTONIC, &a);
    for (int i = 0; i < 1000; ++i) {
      if (__atomic_load_n(&flag, __ATOMIC_RELAXED)) break;
      spin_relax();
    }
    clock_gettime(CLOCK_MONOTONIC, &b);
    double ns = (double)(b.tv_sec - a.tv_sec) * 1e9 + (double)(b.tv_nsec - a.tv_nsec);
    if (r == 0 || ns < best) best = ns;
  }
  double per = best / 1000.0;
  long n = per > 0.1 ? (long)(SPIN_NS / per) : 100000;
  return n < 100 ? 100 : n > 100000 ? 100000 : n;
}

static pthread_once_t openmp_once = PTHREAD_ONCE_INIT;
static void openmp_wait_short(void) {
  if (getenv("OMP_WAIT_POLICY") || getenv("GOMP_SPINCOUNT")) return;
  char n[32];
  snprintf(n, sizeof n, "%ld", calibrated_spins());
  setenv("GOMP_SPINCOUNT", n, 0);
  if (!getenv("KMP_BLOCKTIME")) setenv("KMP_BLOCKTIME", "0", 0);
}

kiln_status_t kiln_cpu_device_create(int32_t threads, kiln_allocator_t allocator,
                                     kiln_device_t** out_device) {
  pthread_once(&openmp_once, openmp_wait_short);
  void* m = NULL;
  KILN_RETURN_IF_ERROR(kiln_allocator_malloc(allocator, sizeof(cpu_device_t), "cpu device", &m));
  cpu_device_t* d = m;
  memset(d, 0, sizeof(*d));
  kiln_device_init_base(&d->base, &cpu_vtable, allocator);
  long cores = sysconf(_SC_NPROCESSORS_ONLN);
  d->threads = threads > 0 ? threads : (cores > 0 ? (int32_t)cores : 1);
  kiln_device_info_t* info = &d->base.info;
  snprintf(info->api, sizeof info->api, "cpu");
  char model[200];
  cpu_model_name(model, sizeof model);
  snprintf(info->name, sizeof info->name, "%s (%d threads)", model, (int)d->threads);
  snprintf(info->driver, sizeof info->driver, "C via the system compiler");
  long pages = sysconf(_SC_PHYS_PAGES), psize = sysconf(_SC_PAGESIZE);
  info->total_bytes = pages > 0 && psize > 0 ? (uint64_t)pages * (uint64_t)psize : 0;
  info->max_alloc_bytes = info->total_bytes ? info->total_bytes : (1ull << 40);
  info->fp16_storage = true;
  info->fp64 = true;
  info->int8 = true;
  info->timestamps = true;
  info->buffer_alignment = 64;
  info->max_workgroup_size = 1;
  info->compute_units = d->threads;
  pthread_mutex_init(&d->mu, NULL);
  pthread_cond_init(&d->work, NULL);
  pthread_cond_init(&d->done, NULL);
  if (pthread_create(&d->thread, NULL, queue_main, d) != 0) {
    pthread_mutex_destroy(&d->mu);
    pthread_cond_destroy(&d->work);
    pthread_cond_destroy(&d->done);
    kiln_allocator_free(allocator, d);
    return kiln_make_status(KILN_DEVICE_ERROR, "cpu: cannot start the queue thread");
  }
  *out_device = &d->base;
  return NULL;
}

/* ---- registration (runtime/device_registry.h) -------------------------- */

static kiln_status_t cpu_api_open(int32_t index, const kiln_device_open_options_t* options,
                                  kiln_allocator_t allocator, kiln_device_t** out_device) {
  if (index != 0)
    return kiln_make_status(KILN_INVALID_ARGUMENT, "cpu:%d: the CPU is device 0", (int)index);
  return kiln_cpu_device_create(options ? options->threads : 0, allocator, out_device);
}

static kiln_status_t cpu_api_list(FILE* out) {
  kiln_device_t* d = NULL;
  KILN_RETURN_IF_ERROR(kiln_cpu_device_create(0, kiln_allocator_system(), &d));
  fprintf(out, "  [0] %s\n", d->info.name);
  kiln_device_release(d);
  return NULL;
}

/* Where the kernels came from: the module's machine code, or its C (and
 * why the machine code was not used). */
static void cpu_api_report(const kiln_device_executable_t* e, FILE* out) {
  if (e->isa) fprintf(out, "cpu: kernels from the module's %s machine code (no compiler)\n", e->isa);
  else if (e->note[0]) fprintf(out, "cpu: note: %s; kernels compiled from the C source\n", e->note);
  if (e->isa || e->n_kernels == 0) return;
  const kiln_cpu_compile_stats_t* st = &e->stats;
  if (st->cache_hit)
    fprintf(out, "cpu: C compiler: none (compile cache hit), loaded in %.1f ms\n", st->load_s * 1e3);
  else
    fprintf(out,
            "cpu: C compiler %s %.1f ms (%.1f s of CPU, %d part%s on %d job%s, %d reused), loaded in %.1f ms\n",
            st->compiler, st->compile_s * 1e3, st->compiler_cpu_s, (int)st->parts, st->parts == 1 ? "" : "s",
            (int)st->jobs, st->jobs == 1 ? "" : "s", (int)st->parts_reused, st->load_s * 1e3);
}

const kiln_device_api_t kiln_device_api_cpu = {
    .name = "cpu",
    .code_form = KILN_CODE_SOURCE_PARTS,
    .open = cpu_api_open,
    .list = cpu_api_list,
    .executable_report = cpu_api_report,
};
