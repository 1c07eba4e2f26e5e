/* Devices: the shared head, opening by name (with CPU fallback), and the
 * fault-injection wrapper tests use to fail any driver call. */
#include "runtime/device.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "kiln/runtime.h"
#include "runtime/device_registry.h"

void kiln_device_init_base(kiln_device_t* d, const kiln_device_vtable_t* vt,
                           kiln_allocator_t allocator) {
  d->vt = vt;
  d->allocator = allocator;
  atomic_init(&d->refs, 1);
}

void kiln_device_retain(kiln_device_t* d) {
  if (d) atomic_fetch_add(&d->refs, 1);
}

void kiln_device_release(kiln_device_t* d) {
  if (d && atomic_fetch_sub(&d->refs, 1) == 1) d->vt->destroy(d);
}

const char* kiln_device_api(const kiln_device_t* d) { return d ? d->info.api : ""; }
const char* kiln_device_name(const kiln_device_t* d) { return d ? d->info.name : ""; }

static const char* const call_names[KILN_DEVICE_CALL_COUNT_] = {
    "any",      "buffer_create", "view_create",  "buffer_write",     "buffer_read",
    "executable_create", "cmd_create", "cmd_dispatch", "cmd_barrier", "cmd_timestamp",
    "cmd_end",  "submit",        "wait",         "timestamps_read", "buffer_wrap",
};

const char* kiln_device_call_name(kiln_device_call_t c) {
  return (unsigned)c < KILN_DEVICE_CALL_COUNT_ ? call_names[c] : "?";
}

/* ---- opening by name ------------------------------------------------- */

/* "opencl:1" -> api "opencl", index 1. */
static kiln_status_t parse_name(const char* name, char* api, size_t n, int32_t* index) {
  const char* colon = strchr(name, ':');
  size_t len = colon ? (size_t)(colon - name) : strlen(name);
  if (len == 0 || len >= n) {
    char names[256];
    return kiln_make_status(KILN_INVALID_ARGUMENT, "device '%s': expected %s", name,
                            kiln_device_api_names("[:N]", names, sizeof names));
  }
  memcpy(api, name, len);
  api[len] = 0;
  *index = 0;
  if (colon) {
    char* end = NULL;
    long v = strtol(colon + 1, &end, 10);
    if (!colon[1] || *end || v < 0 || v > 1024)
      return kiln_make_status(KILN_INVALID_ARGUMENT, "device '%s': '%s' is not a device index", name,
                              colon + 1);
    *index = (int32_t)v;
  }
  return NULL;
}

/* A device that cannot be opened falls back to the first registered API --
 * the CPU, which every build registers first -- unless the caller is strict
 * or the name itself is wrong. */
kiln_status_t kiln_device_open(const char* name, const kiln_device_open_options_t* options,
                               kiln_allocator_t allocator, kiln_device_t** out_device) {
  if (!name || !out_device) return kiln_make_status(KILN_INVALID_ARGUMENT, "kiln_device_open: NULL argument");
  char api_name[32];
  int32_t index = 0;
  KILN_RETURN_IF_ERROR(parse_name(name, api_name, sizeof api_name, &index));
  const kiln_device_api_t* api = kiln_device_api_find(api_name);
  if (!api) {
    char names[256];
    return kiln_make_status(KILN_INVALID_ARGUMENT, "unknown device api '%s' (this kiln has %s)", api_name,
                            kiln_device_api_names("", names, sizeof names));
  }
  const kiln_device_api_t* fallback = kiln_device_api_at(0);
  if (api == fallback) return api->open(index, options, allocator, out_device);
  kiln_status_t s = api->open(index, options, allocator, out_device);
  if (!s) return NULL;
  if (kiln_status_code(s) == KILN_INVALID_ARGUMENT || (options && options->strict))
    return kiln_status_annotate(s, "device '%s'", name);
  FILE* log = options && options->log ? options->log : stderr;
  fprintf(log, "kiln: warning: device '%s' unavailable (%s); falling back to the CPU\n", name,
          kiln_status_message(s));
  kiln_status_free(s);
  return fallback->open(0, options, allocator, out_device);
}

/* ---- fault injection -------------------------------------------------- */

typedef struct fault_dev_s {
  kiln_device_t base;
  kiln_device_t* inner;
  kiln_fault_spec_t spec;
  int32_t counts[KILN_DEVICE_CALL_COUNT_];
  int32_t seen; /* calls matching spec.call */
  bool lost;
} fault_dev_t;

static fault_dev_t* fd_of(kiln_device_t* d) { return (fault_dev_t*)d; }

/* Counts the call and decides whether it fails; |bytes| names the size in
 * injected allocation failures. */
static kiln_status_t trip(kiln_device_t* d, kiln_device_call_t call, uint64_t bytes) {
  fault_dev_t* f = fd_of(d);
  f->counts[call]++;
  f->counts[KILN_DEVICE_CALL_ANY]++;
  const char* dev = f->inner->info.name;
  if (f->lost) return kiln_make_status(KILN_DEVICE_ERROR, "%s: device lost (in %s)", dev, kiln_device_call_name(call));
  if (f->spec.call != KILN_DEVICE_CALL_ANY && f->spec.call != call) return NULL;
  if (++f->seen != f->spec.nth) return NULL;
  switch (f->spec.mode) {
    case KILN_FAULT_OUT_OF_MEMORY:
      return kiln_make_status(KILN_OUT_OF_MEMORY, "%s: cannot allocate %llu bytes of device memory (injected in %s)",
                              dev, (unsigned long long)bytes, kiln_device_call_name(call));
    case KILN_FAULT_DEVICE_LOST:
      f->lost = true;
      return kiln_make_status(KILN_DEVICE_ERROR, "%s: device lost (injected in %s)", dev, kiln_device_call_name(call));
    case KILN_FAULT_BUILD_FAILURE:
      return kiln_make_status(KILN_INVALID_ARGUMENT,
                              "%s: kernel build failed (injected in %s); build log:\n<injected build failure>",
                              dev, kiln_device_call_name(call));
    case KILN_FAULT_FAIL:
    default:
      return kiln_make_status(KILN_DEVICE_ERROR, "%s: driver call failed (injected fault in %s)", dev,
                              kiln_device_call_name(call));
  }
}

static void fd_destroy(kiln_device_t* d) {
  kiln_device_release(fd_of(d)->inner);
  kiln_allocator_free(d->allocator, d);
}
static kiln_status_t fd_buffer_create(kiln_device_t* d, uint64_t bytes, const char* what, kiln_device_buffer_t** out) {
  KILN_RETURN_IF_ERROR(trip(d, KILN_DEVICE_CALL_BUFFER_CREATE, bytes));
  kiln_device_t* in = fd_of(d)->inner;
  return in->vt->buffer_create(in, bytes, what, out);
}
static kiln_status_t fd_view_create(kiln_device_t* d, kiln_device_buffer_t* parent, uint64_t offset, uint64_t bytes,
                                    kiln_device_buffer_t** out) {
  KILN_RETURN_IF_ERROR(trip(d, KILN_DEVICE_CALL_VIEW_CREATE, bytes));
  kiln_device_t* in = fd_of(d)->inner;
  return in->vt->view_create(in, parent, offset, bytes, out);
}
static void fd_buffer_destroy(kiln_device_t* d, kiln_device_buffer_t* b) {
  kiln_device_t* in = fd_of(d)->inner;
  in->vt->buffer_destroy(in, b);
}
static kiln_status_t fd_buffer_write(kiln_device_t* d, kiln_device_buffer_t* b, uint64_t off, const void* src,
                                     uint64_t n) {
  KILN_RETURN_IF_ERROR(trip(d, KILN_DEVICE_CALL_BUFFER_WRITE, n));
  kiln_device_t* in = fd_of(d)->inner;
  return in->vt->buffer_write(in, b, off, src, n);
}
static kiln_status_t fd_buffer_read(kiln_device_t* d, kiln_device_buffer_t* b, uint64_t off, void* dst, uint64_t n) {
  KILN_RETURN_IF_ERROR(trip(d, KILN_DEVICE_CALL_BUFFER_READ, n));
  kiln_device_t* in = fd_of(d)->inner;
  return in->vt->buffer_read(in, b, off, dst, n);
}
static kiln_status_t fd_executable_create(kiln_device_t* d, const kiln_program_t* p, const kiln_device_build_options_t* o,
                                   kiln_device_executable_t** out) {
  KILN_RETURN_IF_ERROR(trip(d, KILN_DEVICE_CALL_EXECUTABLE_CREATE, 0));
  kiln_device_t* in = fd_of(d)->inner;
  return in->vt->executable_create(in, p, o, out);
}
static void fd_executable_destroy(kiln_device_t* d, kiln_device_executable_t* e) {
  kiln_device_t* in = fd_of(d)->inner;
  in->vt->executable_destroy(in, e);
}
static kiln_status_t fd_cmd_create(kiln_device_t* d, kiln_device_executable_t* e, int32_t nts, kiln_device_cmd_t** out) {
  KILN_RETURN_IF_ERROR(trip(d, KILN_DEVICE_CALL_CMD_CREATE, 0));
  kiln_device_t* in = fd_of(d)->inner;
  return in->vt->cmd_create(in, e, nts, out);
}
static void fd_cmd_destroy(kiln_device_t* d, kiln_device_cmd_t* c) {
  kiln_device_t* in = fd_of(d)->inner;
  in->vt->cmd_destroy(in, c);
}
static kiln_status_t fd_cmd_dispatch(kiln_device_t* d, kiln_device_cmd_t* c, int32_t k, kiln_device_buffer_t* const* a,
                                     int32_t n) {
  KILN_RETURN_IF_ERROR(trip(d, KILN_DEVICE_CALL_CMD_DISPATCH, 0));
  kiln_device_t* in = fd_of(d)->inner;
  return in->vt->cmd_dispatch(in, c, k, a, n);
}
static kiln_status_t fd_cmd_barrier(kiln_device_t* d, kiln_device_cmd_t* c) {
  KILN_RETURN_IF_ERROR(trip(d, KILN_DEVICE_CALL_CMD_BARRIER, 0));
  kiln_device_t* in = fd_of(d)->inner;
  return in->vt->cmd_barrier(in, c);
}
static kiln_status_t fd_cmd_timestamp(kiln_device_t* d, kiln_device_cmd_t* c, int32_t slot) {
  KILN_RETURN_IF_ERROR(trip(d, KILN_DEVICE_CALL_CMD_TIMESTAMP, 0));
  kiln_device_t* in = fd_of(d)->inner;
  return in->vt->cmd_timestamp(in, c, slot);
}
static kiln_status_t fd_cmd_end(kiln_device_t* d, kiln_device_cmd_t* c) {
  KILN_RETURN_IF_ERROR(trip(d, KILN_DEVICE_CALL_CMD_END, 0));
  kiln_device_t* in = fd_of(d)->inner;
  return in->vt->cmd_end(in, c);
}
static kiln_status_t fd_submit(kiln_device_t* d, kiln_device_cmd_t* c) {
  KILN_RETURN_IF_ERROR(trip(d, KILN_DEVICE_CALL_SUBMIT, 0));
  kiln_device_t* in = fd_of(d)->inner;
  return in->vt->submit(in, c);
}
static kiln_status_t fd_wait(kiln_device_t* d, kiln_device_cmd_t* c) {
  /* The inner work finishes either way, so nothing is left running on
   * memory the caller is about to free; then the fault is reported. */
  kiln_device_t* in = fd_of(d)->inner;
  kiln_status_t s = in->vt->wait(in, c);
  kiln_status_t f = trip(d, KILN_DEVICE_CALL_WAIT, 0);
  if (f) {
    kiln_status_free(s);
    return f;
  }
  return s;
}
static kiln_status_t fd_timestamps_read(kiln_device_t* d, kiln_device_cmd_t* c, uint64_t* ns, int32_t n) {
  KILN_RETURN_IF_ERROR(trip(d, KILN_DEVICE_CALL_TIMESTAMPS_READ, 0));
  kiln_device_t* in = fd_of(d)->inner;
  return in->vt->timestamps_read(in, c, ns, n);
}

/* Counted (and failed) only where the device behind has the slot: a caller
 * told UNSUPPORTED copies instead, as it would without the wrapper. */
static kiln_status_t fd_buffer_wrap(kiln_device_t* d, const void* host, uint64_t bytes, const char* what,
                                    kiln_device_buffer_t** out) {
  kiln_device_t* in = fd_of(d)->inner;
  if (!in->vt->buffer_wrap)
    return kiln_make_status(KILN_UNSUPPORTED, "%s: cannot use host memory in place", in->info.name);
  KILN_RETURN_IF_ERROR(trip(d, KILN_DEVICE_CALL_BUFFER_WRAP, bytes));
  return in->vt->buffer_wrap(in, host, bytes, what, out);
}

/* A dynamic dim's value: forwarded where the device takes one; for one
 * that does not (the CPU: its kernels read the dims buffer) nothing to do,
 * which is what NULL means. */
static kiln_status_t fd_cmd_dim(kiln_device_t* d, kiln_device_cmd_t* c, int64_t n) {
  kiln_device_t* in = fd_of(d)->inner;
  return in->vt->cmd_dim ? in->vt->cmd_dim(in, c, n) : NULL;
}

static const kiln_device_vtable_t fault_vtable = {KILN_DEVICE_VTABLE_REQUIRED(fd) .buffer_wrap = fd_buffer_wrap,
                                                  .cmd_dim = fd_cmd_dim};

kiln_status_t kiln_device_fault_wrap(kiln_device_t* inner, const kiln_fault_spec_t* spec,
                                     kiln_device_t** out) {
  if (!inner || !spec || !out) return kiln_make_status(KILN_INVALID_ARGUMENT, "fault wrap: NULL argument");
  void* m = NULL;
  KILN_RETURN_IF_ERROR(kiln_allocator_malloc(inner->allocator, sizeof(fault_dev_t), "fault device", &m));
  fault_dev_t* f = m;
  memset(f, 0, sizeof(*f));
  kiln_device_init_base(&f->base, &fault_vtable, inner->allocator);
  f->base.info = inner->info;
  f->inner = inner;
  f->spec = *spec;
  kiln_device_retain(inner);
  *out = &f->base;
  return NULL;
}

int32_t kiln_device_fault_count(const kiln_device_t* wrapper, kiln_device_call_t call) {
  if (!wrapper || wrapper->vt != &fault_vtable || (unsigned)call >= KILN_DEVICE_CALL_COUNT_) return 0;
  return ((const fault_dev_t*)wrapper)->counts[call];
}
