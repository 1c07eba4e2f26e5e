/* Plugin loader and custom-op registry (include/kiln/custom_op.h).
 *
 * Why a staging list: a plugin registers its ops one call at a time, and
 * any of them may fail its checks after others passed. Calls land in a
 * per-load staging area and are published to the process-wide registry
 * only when the entry point returned 0 and every call passed, so a bad
 * plugin never leaves half of itself registered.
 *
 * Why grow-only tables read without the lock: the compiler looks ops up
 * once per node on hot paths (resolve, infer, lowering); entries are
 * written before the count that publishes them (release store), and
 * nothing is removed except by kiln_plugin_unload_all, which tests call
 * between cases with no compile in flight.
 *
 * Why one registry per process, the runtime library's: libkiln.so links
 * its own private copy of the runtime (and tests link the static library
 * beside libkiln_rt), so this file may be in a process several times. A
 * copy that finds libkiln_rt loaded (by its soname; libkiln.so needs it,
 * so it always is there) forwards the public registry functions to it, and
 * every other function here goes through those: a plugin loaded through
 * kiln_compiler_load_plugin or kiln_plugin_load serves the compiler and
 * the runtime alike. libkiln_rt itself, and the static CLI without it,
 * keep the registry below. */
#define _GNU_SOURCE /* dladdr */
#include "runtime/plugin.h"

#include "runtime/cpu/cpu_loader.h"

#include <dlfcn.h>
#include <limits.h>
#include <pthread.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define MAX_PLUGINS 64
#define MAX_OPS 256
#define MAX_PATTERNS 64

typedef struct plugin_s {
  char* path;
  char* real; /* realpath, to load a file once */
  void* handle;
} plugin_t;

static struct {
  plugin_t plugins[MAX_PLUGINS];
  int32_t n_plugins;
  const kiln_custom_op_t* ops[MAX_OPS]; /* the registry's copies (descriptor_size), owned */
  int32_t op_plugin[MAX_OPS];
  int32_t n_ops;
  const kiln_custom_pattern_t* patterns[MAX_PATTERNS]; /* copies, owned */
  int32_t n_patterns;
} reg;
static pthread_mutex_t reg_lock = PTHREAD_MUTEX_INITIALIZER;

/* One load in progress: what the plugin registered so far and the first
 * reason it was refused. */
typedef struct staging_s {
  const char* path;
  const kiln_custom_op_t* ops[MAX_OPS];
  int32_t n_ops;
  const kiln_custom_pattern_t* patterns[MAX_PATTERNS];
  int32_t n_patterns;
  kiln_custom_op_t* copies[MAX_OPS]; /* every descriptor copied, registered or not */
  int32_t n_copies;
  kiln_custom_pattern_t* pattern_copies[MAX_PATTERNS];
  int32_t n_pattern_copies;
  char error[768];
  bool failed;
} staging_t;

static int refuse(staging_t* st, const char* fmt, ...) __attribute__((format(printf, 2, 3)));
static int refuse(staging_t* st, const char* fmt, ...) {
  if (st->failed) return 1; /* the first reason is the one reported */
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(st->error, sizeof st->error, fmt, ap);
  va_end(ap);
  st->failed = true;
  return 1;
}

static bool is_ident(const char* s) {
  if (!s || !s[0] || strlen(s) > 128) return false;
  if (!((s[0] >= 'A' && s[0] <= 'Z') || (s[0] >= 'a' && s[0] <= 'z') || s[0] == '_')) return false;
  for (const char* p = s; *p; ++p)
    if (!((*p >= 'A' && *p <= 'Z') || (*p >= 'a' && *p <= 'z') || (*p >= '0' && *p <= '9') || *p == '_'))
      return false;
  return true;
}

static bool is_domain(const char* s) {
  if (!s || !s[0] || strlen(s) > 128) return false;
  for (const char* p = s; *p; ++p)
    if (!((*p >= 'A' && *p <= 'Z') || (*p >= 'a' && *p <= 'z') || (*p >= '0' && *p <= '9') || *p == '_' ||
          *p == '.' || *p == '-'))
      return false;
  return true;
}

static const char* str_or(const char* s, const char* def) { return s && s[0] ? s : def; }

/* ---- forwarding to libkiln_rt's registry --------------------------------- */

typedef struct peer_s {
  kiln_status_t (*load)(const char*);
  void (*unload_all)(void);
  int32_t (*op_count)(void);
  const kiln_custom_op_t* (*op_at)(int32_t);
  const kiln_custom_op_t* (*op_find)(const char*, const char*);
  const char* (*op_plugin)(const kiln_custom_op_t*);
  int32_t (*pattern_count)(void);
  const kiln_custom_pattern_t* (*pattern_at)(int32_t);
} peer_t;

static peer_t peer_table;
static const peer_t* peer_ptr;
static pthread_once_t peer_once = PTHREAD_ONCE_INIT;

#define PEER_SYM(field, name)                       \
  do {                                              \
    void* sym_ = dlsym(h, name);                    \
    if (!sym_) return;                              \
    memcpy(&t.field, &sym_, sizeof sym_);           \
  } while (0)

static void find_peer(void) {
#ifdef KILN_RT_SONAME
  /* RTLD_NOLOAD: only a libkiln_rt already in the process; the reference
   * is kept (it is needed as long as the functions are called) */
  void* h = dlopen(KILN_RT_SONAME, RTLD_LAZY | RTLD_NOLOAD);
  if (!h) return;
  peer_t t;
  PEER_SYM(load, "kiln_plugin_load");
  /* Is this copy libkiln_rt's? Compared by the object that holds the code,
   * not by kiln_plugin_load's address: an executable that links the
   * static library exports its copy's symbols, which then interpose on
   * libkiln_rt's own references. find_peer is static: always this copy. */
  Dl_info mine, theirs;
  void* self = NULL;
  void (*here)(void) = find_peer;
  memcpy(&self, &here, sizeof self);
  void* load_sym = NULL;
  memcpy(&load_sym, &t.load, sizeof load_sym);
  if (!dladdr(self, &mine) || !dladdr(load_sym, &theirs) || mine.dli_fbase == theirs.dli_fbase) return;
  PEER_SYM(unload_all, "kiln_plugin_unload_all");
  PEER_SYM(op_count, "kiln_custom_op_count");
  PEER_SYM(op_at, "kiln_custom_op_at");
  PEER_SYM(op_find, "kiln_custom_op_find");
  PEER_SYM(op_plugin, "kiln_custom_op_plugin");
  PEER_SYM(pattern_count, "kiln_custom_pattern_count");
  PEER_SYM(pattern_at, "kiln_custom_pattern_at");
  peer_table = t;
  peer_ptr = &peer_table;
#endif
}

/* libkiln_rt's registry when this copy is not it, else NULL. */
static const peer_t* peer(void) {
  pthread_once(&peer_once, find_peer);
  return peer_ptr;
}

static int32_t find_op(const char* domain, const char* name) {
  int32_t n = __atomic_load_n(&reg.n_ops, __ATOMIC_ACQUIRE);
  for (int32_t i = 0; i < n; ++i)
    if (!strcmp(reg.ops[i]->domain, domain) && !strcmp(reg.ops[i]->name, name)) return i;
  return -1;
}

static const kiln_custom_op_t* staged_op(const staging_t* st, const char* domain, const char* name) {
  for (int32_t i = 0; i < st->n_ops; ++i)
    if (!strcmp(st->ops[i]->domain, domain) && !strcmp(st->ops[i]->name, name)) return st->ops[i];
  return NULL;
}

static int check_io(staging_t* st, const char* opn, const kiln_custom_io_t* io, int32_t n, const char* what) {
  if (n < 1 || n > KILN_CUSTOM_MAX_IO)
    return refuse(st, "op '%s': %d %ss (1..%d)", opn, (int)n, what, KILN_CUSTOM_MAX_IO);
  if (!io) return refuse(st, "op '%s': no %s table", opn, what);
  const uint32_t known = (1u << KILN_DTYPE_COUNT_) - 2u; /* UNDEFINED excluded */
  for (int32_t i = 0; i < n; ++i) {
    if (!io[i].name || !io[i].name[0]) return refuse(st, "op '%s': %s %d has no name", opn, what, (int)i);
    if (!io[i].dtypes || (io[i].dtypes & ~known))
      return refuse(st, "op '%s': %s '%s' declares dtype mask 0x%x (KILN_CUSTOM_DTYPE bits of kiln_dtype_t, at least one)",
                    opn, what, io[i].name, io[i].dtypes);
    if (io[i].optional && what[0] == 'o')
      return refuse(st, "op '%s': output '%s' is optional; custom ops compute every output", opn, io[i].name);
  }
  return 0;
}

static int check_attrs(staging_t* st, const char* opn, const kiln_custom_op_t* op) {
  if (op->n_attrs < 0 || op->n_attrs > KILN_CUSTOM_MAX_ATTRS || (op->n_attrs && !op->attrs))
    return refuse(st, "op '%s': %d attributes (0..%d, with a table)", opn, (int)op->n_attrs, KILN_CUSTOM_MAX_ATTRS);
  for (int32_t i = 0; i < op->n_attrs; ++i) {
    const kiln_custom_attr_decl_t* a = &op->attrs[i];
    if (!is_ident(a->name))
      return refuse(st, "op '%s': attribute %d name '%s' is not a C identifier", opn, (int)i, str_or(a->name, ""));
    if (a->type < KILN_CUSTOM_ATTR_INT || a->type > KILN_CUSTOM_ATTR_FLOATS)
      return refuse(st, "op '%s': attribute '%s' has unknown type %d", opn, a->name, (int)a->type);
    for (int32_t j = 0; j < i; ++j)
      if (!strcmp(op->attrs[j].name, a->name))
        return refuse(st, "op '%s': attribute '%s' declared twice", opn, a->name);
  }
  return 0;
}

static bool api_version_ok(int32_t v) { return v >= KILN_CUSTOM_OP_API_VERSION_MIN && v <= KILN_CUSTOM_OP_API_VERSION; }

/* The registry keeps its own copy of each descriptor, as large as this
 * kiln's struct: a descriptor of an older API version is shorter (the
 * fields a later version appended are not there to read), so only its own
 * version's prefix is copied and the rest stays zero. */
static size_t descriptor_size(int32_t version) {
  return version == 1 ? offsetof(kiln_custom_op_t, cpu_fn) : sizeof(kiln_custom_op_t);
}

static int host_register_op(kiln_plugin_host_t* host, const kiln_custom_op_t* plugin_op) {
  staging_t* st = host->impl;
  if (!plugin_op) return refuse(st, "register_op(NULL)");
  char opn[300];
  /* api_version, domain and name lead the descriptor in every version */
  snprintf(opn, sizeof opn, "%s/%s", str_or(plugin_op->domain, "?"), str_or(plugin_op->name, "?"));
  if (!api_version_ok(plugin_op->api_version))
    return refuse(st, "op '%s': built against custom-op API version %d, this kiln takes versions %d..%d", opn,
                  (int)plugin_op->api_version, KILN_CUSTOM_OP_API_VERSION_MIN, KILN_CUSTOM_OP_API_VERSION);
  if (st->n_ops == MAX_OPS) return refuse(st, "more than %d custom ops", MAX_OPS);
  kiln_custom_op_t* op = calloc(1, sizeof *op);
  if (!op) return refuse(st, "out of memory");
  memcpy(op, plugin_op, descriptor_size(plugin_op->api_version));
  st->copies[st->n_copies++] = op;
  if (!is_domain(op->domain) || !strcmp(op->domain, "ai.onnx"))
    return refuse(st, "op '%s': domain '%s' is not allowed (a non-empty custom domain such as com.example; "
                  "ai.onnx belongs to kiln's own ops)", opn, str_or(op->domain, ""));
  if (!is_ident(op->name)) return refuse(st, "op '%s': the name is not a C identifier", opn);
  if (staged_op(st, op->domain, op->name)) return refuse(st, "op '%s': registered twice by this plugin", opn);
  int32_t prev = find_op(op->domain, op->name);
  if (prev >= 0)
    return refuse(st, "op '%s': duplicate op name, already registered by plugin '%s'", opn,
                  reg.plugins[reg.op_plugin[prev]].path);
  if (op->since_version < 1 || (op->until_version && op->until_version < op->since_version))
    return refuse(st, "op '%s': opset range %lld..%lld is empty or below 1", opn, (long long)op->since_version,
                  (long long)op->until_version);
  if (op->version < 1) return refuse(st, "op '%s': version %d (must be >= 1)", opn, (int)op->version);
  if (!op->shape) return refuse(st, "op '%s': no shape function", opn);
  if (!op->reference) return refuse(st, "op '%s': no reference kernel", opn);
  if (check_io(st, opn, op->inputs, op->n_inputs, "input") || check_io(st, opn, op->outputs, op->n_outputs, "output") ||
      check_attrs(st, opn, op))
    return 1;
  if (op->epilogue && (op->outputs[0].dtypes & ~(KILN_CUSTOM_DTYPE(KILN_DTYPE_F32) | KILN_CUSTOM_DTYPE(KILN_DTYPE_F16))))
    return refuse(st, "op '%s': epilogue needs output 0 in f32 or f16", opn);
  const kiln_custom_kernel_t* ks[3] = {&op->cpu, &op->opencl, &op->glsl};
  const char* kn[3] = {"cpu", "opencl", "glsl"};
  for (int i = 0; i < 3; ++i) {
    if (ks[i]->launch && !ks[i]->source)
      return refuse(st, "op '%s': %s kernel has a launch function but no source", opn, kn[i]);
    if (i == 0 && ks[i]->launch) return refuse(st, "op '%s': the cpu kernel takes no launch function", opn);
  }
  if (op->glsl_loop_trips && !op->glsl.source)
    return refuse(st, "op '%s': glsl_loop_trips without a glsl kernel", opn);
  if (op->cpu_fn && op->cpu.source)
    return refuse(st, "op '%s': both a cpu kernel source and a cpu_fn (give one of them)", opn);
  if (st->n_ops == MAX_OPS || __atomic_load_n(&reg.n_ops, __ATOMIC_ACQUIRE) + st->n_ops >= MAX_OPS)
    return refuse(st, "op '%s': more than %d custom ops", opn, MAX_OPS);
  st->ops[st->n_ops++] = op;
  return 0;
}

/* A pattern given as a graph (API version 2): every binding in range,
 * every slot bound, every node but the last read by a later node. */
static int check_graph_pattern(staging_t* st, const char* opn, const kiln_custom_pattern_t* p,
                               const kiln_custom_op_t* op) {
  if (!p->n_node_inputs) return refuse(st, "pattern for op '%s': inputs without n_node_inputs", opn);
  bool bound[KILN_CUSTOM_MAX_IO] = {false}, read[8] = {false};
  for (int32_t k = 0; k < p->n_nodes; ++k) {
    const int32_t n = p->n_node_inputs[k];
    if (n < 0 || n > KILN_CUSTOM_MAX_IO || (n && !p->inputs[k]))
      return refuse(st, "pattern for op '%s': node %d (%s) has %d inputs (0..%d, with a table)", opn, (int)k,
                    p->ops[k], (int)n, KILN_CUSTOM_MAX_IO);
    for (int32_t j = 0; j < n; ++j) {
      const int32_t b = p->inputs[k][j];
      if (b >= 0 && b < op->n_inputs) bound[b] = true;
      else if (b <= KILN_PATTERN_NODE(0) && KILN_PATTERN_NODE(0) - b < k) read[KILN_PATTERN_NODE(0) - b] = true;
      else if (b != KILN_PATTERN_NONE)
        return refuse(st, "pattern for op '%s': node %d (%s) input %d is bound to %d (a slot below %d, a node "
                      "before it, or none)", opn, (int)k, p->ops[k], (int)j, (int)b, (int)op->n_inputs);
    }
  }
  for (int32_t i = 0; i < op->n_inputs; ++i)
    if (!bound[i]) return refuse(st, "pattern for op '%s': the op's input %d is bound to no node input", opn, (int)i);
  for (int32_t k = 0; k + 1 < p->n_nodes; ++k)
    if (!read[k]) return refuse(st, "pattern for op '%s': node %d (%s) is read by no later node", opn, (int)k, p->ops[k]);
  return 0;
}

static int host_register_pattern(kiln_plugin_host_t* host, const kiln_custom_pattern_t* plugin_p) {
  staging_t* st = host->impl;
  if (!plugin_p) return refuse(st, "register_pattern(NULL)");
  char opn[300];
  snprintf(opn, sizeof opn, "%s/%s", str_or(plugin_p->domain, "?"), str_or(plugin_p->name, "?"));
  if (!api_version_ok(plugin_p->api_version))
    return refuse(st, "pattern for op '%s': built against custom-op API version %d, this kiln takes versions %d..%d",
                  opn, (int)plugin_p->api_version, KILN_CUSTOM_OP_API_VERSION_MIN, KILN_CUSTOM_OP_API_VERSION);
  if (st->n_pattern_copies == MAX_PATTERNS) return refuse(st, "more than %d patterns", MAX_PATTERNS);
  /* copied as the ops are (descriptor_size) */
  kiln_custom_pattern_t* p = calloc(1, sizeof *p);
  if (!p) return refuse(st, "out of memory");
  memcpy(p, plugin_p, plugin_p->api_version == 1 ? offsetof(kiln_custom_pattern_t, inputs) : sizeof *p);
  st->pattern_copies[st->n_pattern_copies++] = p;
  const kiln_custom_op_t* op = p->domain && p->name ? staged_op(st, p->domain, p->name) : NULL;
  if (!op) return refuse(st, "pattern for op '%s': the plugin registers no such op (register it first)", opn);
  if (p->n_nodes < 2 || p->n_nodes > 8 || !p->ops || (!p->slots && !p->inputs))
    return refuse(st, "pattern for op '%s': %d nodes (2..8, with ops and slots or inputs tables)", opn,
                  (int)p->n_nodes);
  for (int32_t k = 0; k < p->n_nodes; ++k)
    if (!is_ident(p->ops[k])) return refuse(st, "pattern for op '%s': node %d op type is not a name", opn, (int)k);
  if (p->inputs && check_graph_pattern(st, opn, p, op)) return 1;
  int32_t total = 0;
  for (int32_t k = 0; k < p->n_nodes && !p->inputs; ++k) {
    if (p->slots[k] < 0 || p->slots[k] > KILN_CUSTOM_MAX_IO)
      return refuse(st, "pattern for op '%s': node %d (%s) has %d slots", opn, (int)k, p->ops[k], (int)p->slots[k]);
    total += p->slots[k];
  }
  if (!p->inputs && total != op->n_inputs)
    return refuse(st, "pattern for op '%s': its slots add up to %d inputs, the op declares %d", opn, (int)total,
                  (int)op->n_inputs);
  if (st->n_patterns == MAX_PATTERNS || reg.n_patterns + st->n_patterns >= MAX_PATTERNS)
    return refuse(st, "pattern for op '%s': more than %d patterns", opn, MAX_PATTERNS);
  st->patterns[st->n_patterns++] = p;
  return 0;
}

kiln_status_t kiln_plugin_load(const char* path) {
  if (peer()) return peer()->load(path);
  if (!path || !path[0]) return kiln_make_status(KILN_INVALID_ARGUMENT, "--plugin: empty path");
  char real[PATH_MAX];
  if (!realpath(path, real)) return kiln_make_status(KILN_NOT_FOUND, "plugin '%s': no such file", path);
  pthread_mutex_lock(&reg_lock);
  kiln_status_t s = NULL;
  for (int32_t i = 0; i < reg.n_plugins; ++i)
    if (!strcmp(reg.plugins[i].real, real)) goto out; /* loaded already */
  if (reg.n_plugins == MAX_PLUGINS) {
    s = kiln_make_status(KILN_LIMIT_EXCEEDED, "plugin '%s': more than %d plugins", path, MAX_PLUGINS);
    goto out;
  }
  /* A path without a slash would make dlopen search the library path;
   * the user named a file. */
  void* h = dlopen(real, RTLD_NOW | RTLD_LOCAL);
  if (!h) {
    const char* e = dlerror();
    s = kiln_make_status(KILN_INVALID_ARGUMENT, "plugin '%s': cannot load the library: %s", path, e ? e : "?");
    goto out;
  }
  /* a plugin's kernels may use OpenMP (the example's cpu_fn does): its
   * runtime must stay when the plugin is unloaded (cpu_loader.h) */
  kiln_cpu_pin_openmp();
  kiln_plugin_register_fn entry;
  void* sym = dlsym(h, "kiln_plugin_register");
  memcpy(&entry, &sym, sizeof entry);
  if (!sym) {
    dlclose(h);
    s = kiln_make_status(KILN_INVALID_ARGUMENT,
                         "plugin '%s': no entry point 'kiln_plugin_register' (not a kiln plugin?)", path);
    goto out;
  }
  staging_t* st = calloc(1, sizeof *st);
  if (!st) {
    dlclose(h);
    s = kiln_make_status(KILN_OUT_OF_MEMORY, "plugin '%s'", path);
    goto out;
  }
  st->path = path;
  kiln_plugin_host_t host = {KILN_CUSTOM_OP_API_VERSION, st, host_register_op, host_register_pattern};
  int rc = entry(&host);
  if (rc && !st->failed) refuse(st, "kiln_plugin_register returned %d", rc);
  char* p1 = st->failed ? NULL : strdup(path);
  char* p2 = st->failed ? NULL : strdup(real);
  if (!st->failed && (!p1 || !p2)) refuse(st, "out of memory");
  if (st->failed) {
    s = kiln_make_status(KILN_INVALID_ARGUMENT, "plugin '%s': %s; nothing of it was registered", path, st->error);
    free(p1);
    free(p2);
    for (int32_t i = 0; i < st->n_copies; ++i) free(st->copies[i]);
    for (int32_t i = 0; i < st->n_pattern_copies; ++i) free(st->pattern_copies[i]);
    free(st);
    dlclose(h);
    goto out;
  }
  int32_t pi = reg.n_plugins;
  reg.plugins[pi] = (plugin_t){p1, p2, h};
  reg.n_plugins = pi + 1;
  int32_t n = reg.n_ops;
  for (int32_t i = 0; i < st->n_ops; ++i) {
    reg.ops[n + i] = st->ops[i];
    reg.op_plugin[n + i] = pi;
  }
  __atomic_store_n(&reg.n_ops, n + st->n_ops, __ATOMIC_RELEASE);
  int32_t np = reg.n_patterns;
  for (int32_t i = 0; i < st->n_patterns; ++i) reg.patterns[np + i] = st->patterns[i];
  __atomic_store_n(&reg.n_patterns, np + st->n_patterns, __ATOMIC_RELEASE);
  free(st);
out:
  pthread_mutex_unlock(&reg_lock);
  return s;
}

void kiln_plugin_unload_all(void) {
  if (peer()) {
    peer()->unload_all();
    return;
  }
  pthread_mutex_lock(&reg_lock);
  const int32_t n_ops = reg.n_ops, n_patterns = reg.n_patterns;
  __atomic_store_n(&reg.n_ops, 0, __ATOMIC_RELEASE);
  __atomic_store_n(&reg.n_patterns, 0, __ATOMIC_RELEASE);
  for (int32_t i = 0; i < n_ops; ++i) free((void*)reg.ops[i]);
  for (int32_t i = 0; i < n_patterns; ++i) free((void*)reg.patterns[i]);
  for (int32_t i = 0; i < reg.n_plugins; ++i) {
    dlclose(reg.plugins[i].handle);
    free(reg.plugins[i].path);
    free(reg.plugins[i].real);
  }
  reg.n_plugins = 0;
  pthread_mutex_unlock(&reg_lock);
}

int32_t kiln_custom_op_count(void) {
  if (peer()) return peer()->op_count();
  return __atomic_load_n(&reg.n_ops, __ATOMIC_ACQUIRE);
}

const kiln_custom_op_t* kiln_custom_op_at(int32_t i) {
  if (peer()) return peer()->op_at(i);
  return i >= 0 && i < kiln_custom_op_count() ? reg.ops[i] : NULL;
}

const kiln_custom_op_t* kiln_custom_op_find(const char* domain, const char* name) {
  if (peer()) return peer()->op_find(domain, name);
  if (!domain || !name) return NULL;
  int32_t i = find_op(domain, name);
  return i >= 0 ? reg.ops[i] : NULL;
}

const char* kiln_custom_op_plugin(const kiln_custom_op_t* op) {
  if (peer()) return peer()->op_plugin(op);
  int32_t n = kiln_custom_op_count();
  for (int32_t i = 0; i < n; ++i)
    if (reg.ops[i] == op) return reg.plugins[reg.op_plugin[i]].path;
  return "";
}

int32_t kiln_custom_pattern_count(void) {
  if (peer()) return peer()->pattern_count();
  return __atomic_load_n(&reg.n_patterns, __ATOMIC_ACQUIRE);
}

const kiln_custom_pattern_t* kiln_custom_pattern_at(int32_t i) {
  if (peer()) return peer()->pattern_at(i);
  return i >= 0 && i < kiln_custom_pattern_count() ? reg.patterns[i] : NULL;
}

kiln_status_t kiln_plugin_check_program(const kiln_program_t* p, const char* name) {
  char missing[1024] = "";
  size_t len = 0;
  int n_missing = 0;
  for (int32_t i = 0; i < p->n_plugin_ops; ++i) {
    const kiln_program_plugin_op_t* po = &p->plugin_ops[i];
    const kiln_custom_op_t* op = kiln_custom_op_find(po->domain, po->name);
    if (op && op->version == po->version) continue;
    char have[64] = "";
    if (op) snprintf(have, sizeof have, " (the loaded plugin has version %d)", (int)op->version);
    int k = snprintf(missing + len, sizeof missing - len, "%s%s/%s version %d%s", n_missing ? ", " : "", po->domain,
                     po->name, (int)po->version, have);
    if (k > 0) len = len + (size_t)k < sizeof missing ? len + (size_t)k : sizeof missing - 1;
    ++n_missing;
  }
  if (!n_missing) return NULL;
  return kiln_make_status(KILN_NOT_FOUND,
                          "%s: the module needs plugin op%s that %s not loaded: %s (load the plugin with "
                          "--plugin lib.so, or kiln_plugin_load)",
                          name && name[0] ? name : "module", n_missing > 1 ? "s" : "", n_missing > 1 ? "are" : "is",
                          missing);
}

/* The resolver a unit's kiln_plugin_bind calls once per kernel that calls a
 * plugin's cpu_fn. */
typedef struct bind_host_s {
  char error[700];
} bind_host_t;

static int resolve_cpu_fn(void* host, const char* domain, const char* name, int32_t version, const char* node,
                          kiln_custom_cpu_fn* fn, void** user) {
  bind_host_t* bh = host;
  const kiln_custom_op_t* op = kiln_custom_op_find(domain, name);
  if (op && op->version == version && op->cpu_fn) {
    *fn = op->cpu_fn;
    *user = op->cpu_user_data;
    return 0;
  }
  if (!op)
    snprintf(bh->error, sizeof bh->error, "no loaded plugin provides op %s/%s", domain, name);
  else if (op->version != version)
    snprintf(bh->error, sizeof bh->error, "plugin '%s' provides op %s/%s at version %d", kiln_custom_op_plugin(op),
             domain, name, (int)op->version);
  else
    snprintf(bh->error, sizeof bh->error, "plugin '%s' registers op %s/%s without a CPU function (cpu_fn)",
             kiln_custom_op_plugin(op), domain, name);
  snprintf(bh->error + strlen(bh->error), sizeof bh->error - strlen(bh->error),
           ", but the CPU code of node '%s' calls the cpu_fn of %s/%s version %d", node, domain, name, (int)version);
  return 1;
}

typedef int (*bind_resolve_fn)(void*, const char*, const char*, int32_t, const char*, kiln_custom_cpu_fn*, void**);
typedef int (*bind_fn)(bind_resolve_fn, void*);

kiln_status_t kiln_plugin_bind_cpu_fns(void* bind) {
  bind_fn b;
  memcpy(&b, &bind, sizeof b);
  bind_host_t host = {""};
  if (b(resolve_cpu_fn, &host))
    return kiln_make_status(KILN_NOT_FOUND, "cpu: %s (load a plugin that provides it: --plugin lib.so, or kiln_plugin_load)",
                            host.error[0] ? host.error : "a plugin CPU function is missing");
  return NULL;
}
