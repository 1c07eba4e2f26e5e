/* kiln OpenCL device (see opencl_device.h): buffers, command buffers and
 * submission, the part that runs every inference. Listing and creating
 * devices and building executables are in opencl_build.c. */
#include "runtime/opencl/opencl_device_internal.h"

#include <errno.h>
#include <inttypes.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "runtime/opencl/opencl_gemm_provider.h"
#include "runtime/opencl/opencl_util.h"

/* A per-sample program's dispatches launch the grid's dim 2 |n| times
 * (targets/gpu_bind_dyn.h; the conv, Winograd and GEMM templates step
 * between images by get_group_id(2) too). */
static kiln_status_t ocl_cmd_dim(kiln_device_t* base, kiln_device_cmd_t* c, int64_t n) {
  (void)base;
  if (n < 1) return kiln_make_status(KILN_INVALID_ARGUMENT, "opencl: dynamic dim value %lld", (long long)n);
  c->dim = n;
  return NULL;
}

/* ---- errors ------------------------------------------------------------- */

kiln_status_t kiln_ocl_lost_status(const ocl_device_t* d) {
  return kiln_make_status(KILN_DEVICE_ERROR, "opencl:%d %s: device lost", d->index,
                          d->base.info.name);
}

kiln_status_t kiln_ocl_cl_fail(ocl_device_t* d, cl_int err, const char* call, const char* what) {
  if (err == CL_DEVICE_NOT_AVAILABLE || err == CL_INVALID_CONTEXT || err == -9999 /* NV */) {
    d->lost = true;
    return kiln_make_status(KILN_DEVICE_ERROR, "opencl:%d %s: device lost (%s%s%s: %s)", d->index,
                            d->base.info.name, call, what ? " " : "", what ? what : "",
                            kiln_cl_error_name(err));
  }
  return kiln_make_status(KILN_DEVICE_ERROR, "opencl: %s%s%s: %s", call, what ? " " : "",
                          what ? what : "", kiln_cl_error_name(err));
}

bool kiln_opencl_is_device(const kiln_device_t* d) { return d && d->vt == &kiln_ocl_vtable; }

bool kiln_opencl_device_queue(kiln_device_t* base, cl_context* ctx, cl_command_queue* q) {
  if (!kiln_opencl_is_device(base) || D(base)->lost) return false;
  *ctx = D(base)->ctx;
  *q = D(base)->q;
  return true;
}

/* ---- buffers ------------------------------------------------------------ */

static kiln_status_t alloc_fail(ocl_device_t* d, cl_int err, uint64_t bytes, const char* what) {
  if (err == CL_MEM_OBJECT_ALLOCATION_FAILURE || err == CL_OUT_OF_RESOURCES ||
      err == CL_OUT_OF_HOST_MEMORY || err == CL_INVALID_BUFFER_SIZE)
    return kiln_make_status(KILN_OUT_OF_MEMORY,
                            "opencl:%d %s: cannot allocate %" PRIu64 " bytes for %s (%s)", d->index,
                            d->base.info.name, bytes, what ? what : "a buffer",
                            kiln_cl_error_name(err));
  return kiln_ocl_cl_fail(d, err, "clCreateBuffer", what);
}

static kiln_status_t ocl_buffer_create(kiln_device_t* base, uint64_t bytes, const char* what,
                                       kiln_device_buffer_t** out) {
  ocl_device_t* d = D(base);
  CHECK_LOST(d);
  if (bytes > d->base.info.max_alloc_bytes)
    return kiln_make_status(KILN_OUT_OF_MEMORY,
                            "opencl:%d %s: cannot allocate %" PRIu64 " bytes for %s: larger than "
                            "the device's largest buffer (CL_DEVICE_MAX_MEM_ALLOC_SIZE %" PRIu64
                            " bytes)",
                            d->index, d->base.info.name, bytes, what ? what : "a buffer",
                            d->base.info.max_alloc_bytes);
  kiln_device_buffer_t* b = NULL;
  KILN_RETURN_IF_ERROR(kiln_allocator_malloc(d->base.allocator, sizeof *b, "opencl", (void**)&b),
                       "opencl buffer %s", what ? what : "");
  memset(b, 0, sizeof *b);
  b->bytes = bytes;
  /* OpenCL has no empty buffers: a 0-byte buffer gets one byte. */
  const size_t n = bytes ? (size_t)bytes : 1;
  cl_int err = CL_SUCCESS;
  b->mem = clCreateBuffer(d->ctx, CL_MEM_READ_WRITE, n, NULL, &err);
  if (!b->mem || err != CL_SUCCESS) {
    kiln_allocator_free(d->base.allocator, b);
    return alloc_fail(d, err != CL_SUCCESS ? err : CL_MEM_OBJECT_ALLOCATION_FAILURE, bytes, what);
  }
  const cl_uchar zero = 0;
  err = clEnqueueFillBuffer(d->q, b->mem, &zero, 1, 0, n, 0, NULL, NULL);
  if (err == CL_SUCCESS) err = clFinish(d->q);
  if (err != CL_SUCCESS) {
    clReleaseMemObject(b->mem);
    kiln_allocator_free(d->base.allocator, b);
    /* PoCL and others allocate lazily: the first use is where memory runs out. */
    return alloc_fail(d, err, bytes, what);
  }
  *out = b;
  return NULL;
}

static kiln_status_t ocl_view_create(kiln_device_t* base, kiln_device_buffer_t* parent,
                                     uint64_t offset, uint64_t bytes, kiln_device_buffer_t** out) {
  ocl_device_t* d = D(base);
  CHECK_LOST(d);
  if (!parent || offset > parent->bytes || bytes > parent->bytes - offset)
    return kiln_make_status(KILN_OUT_OF_RANGE,
                            "opencl: view [%" PRIu64 ", +%" PRIu64 ") outside its %" PRIu64
                            "-byte buffer",
                            offset, bytes, parent ? parent->bytes : 0);
  kiln_device_buffer_t* root = parent->root ? parent->root : parent;
  const uint64_t at = parent->root_offset + offset;
  if (at % d->base.info.buffer_alignment)
    return kiln_make_status(KILN_INVALID_ARGUMENT,
                            "opencl: view offset %" PRIu64 " is not a multiple of the device's "
                            "base-address alignment (%" PRIu64 " bytes)",
                            at, d->base.info.buffer_alignment);
  kiln_device_buffer_t* v = NULL;
  KILN_RETURN_IF_ERROR(kiln_allocator_malloc(d->base.allocator, sizeof *v, "opencl", (void**)&v), "opencl view");
  memset(v, 0, sizeof *v);
  v->bytes = bytes;
  v->root = root;
  v->root_offset = at;
  if (bytes > 0) {
    cl_buffer_region r = {(size_t)at, (size_t)bytes};
    cl_int err = CL_SUCCESS;
    v->mem = clCreateSubBuffer(root->mem, CL_MEM_READ_WRITE, CL_BUFFER_CREATE_TYPE_REGION, &r, &err);
    if (!v->mem || err != CL_SUCCESS) {
      kiln_allocator_free(d->base.allocator, v);
      if (err == CL_MEM_OBJECT_ALLOCATION_FAILURE || err == CL_OUT_OF_RESOURCES ||
          err == CL_OUT_OF_HOST_MEMORY)
        return kiln_make_status(KILN_OUT_OF_MEMORY, "opencl: cannot create a %" PRIu64
                                "-byte view at offset %" PRIu64 ": %s",
                                bytes, at, kiln_cl_error_name(err));
      return kiln_ocl_cl_fail(d, err, "clCreateSubBuffer", NULL);
    }
  } else {
    /* An empty view is never read or written; kernels still need a cl_mem. */
    v->mem = root->mem;
    clRetainMemObject(v->mem);
  }
  *out = v;
  return NULL;
}

static void ocl_buffer_destroy(kiln_device_t* base, kiln_device_buffer_t* b) {
  if (!b) return;
  if (b->mem) clReleaseMemObject(b->mem);
  kiln_allocator_free(base->allocator, b);
}

static kiln_status_t check_range(const kiln_device_buffer_t* b, uint64_t offset, uint64_t bytes,
                                 const char* what) {
  if (!b || offset > b->bytes || bytes > b->bytes - offset)
    return kiln_make_status(KILN_OUT_OF_RANGE,
                            "opencl: %s of [%" PRIu64 ", +%" PRIu64 ") outside a %" PRIu64
                            "-byte buffer",
                            what, offset, bytes, b ? b->bytes : 0);
  return NULL;
}

static kiln_status_t ocl_buffer_write(kiln_device_t* base, kiln_device_buffer_t* b, uint64_t offset,
                                      const void* src, uint64_t bytes) {
  ocl_device_t* d = D(base);
  CHECK_LOST(d);
  KILN_RETURN_IF_ERROR(check_range(b, offset, bytes, "write"));
  if (bytes == 0) return NULL;
  cl_int err = clEnqueueWriteBuffer(d->q, b->mem, CL_TRUE, (size_t)offset, (size_t)bytes, src, 0,
                                    NULL, NULL);
  if (err != CL_SUCCESS) return kiln_ocl_cl_fail(d, err, "clEnqueueWriteBuffer", NULL);
  return NULL;
}

static kiln_status_t ocl_buffer_read(kiln_device_t* base, kiln_device_buffer_t* b, uint64_t offset,
                                     void* dst, uint64_t bytes) {
  ocl_device_t* d = D(base);
  CHECK_LOST(d);
  KILN_RETURN_IF_ERROR(check_range(b, offset, bytes, "read"));
  if (bytes == 0) return NULL;
  cl_int err = clEnqueueReadBuffer(d->q, b->mem, CL_TRUE, (size_t)offset, (size_t)bytes, dst, 0,
                                   NULL, NULL);
  if (err != CL_SUCCESS) return kiln_ocl_cl_fail(d, err, "clEnqueueReadBuffer", NULL);
  return NULL;
}

/* ---- command buffers ---------------------------------------------------- */

static kiln_status_t ocl_cmd_create(kiln_device_t* base, kiln_device_executable_t* e,
                                    int32_t max_timestamps, kiln_device_cmd_t** out) {
  ocl_device_t* d = D(base);
  CHECK_LOST(d);
  if (max_timestamps < 0) max_timestamps = 0;
  kiln_device_cmd_t* c = NULL;
  KILN_RETURN_IF_ERROR(kiln_allocator_malloc(d->base.allocator, sizeof *c, "opencl", (void**)&c), "opencl cmd");
  memset(c, 0, sizeof *c);
  c->exe = e;
  c->max_ts = max_timestamps;
  if (max_timestamps) {
    kiln_status_t s = kiln_allocator_malloc(d->base.allocator, sizeof(cl_event) * (size_t)max_timestamps,
                                            "opencl timestamps", (void**)&c->ts);
    if (s) {
      kiln_allocator_free(d->base.allocator, c);
      return s;
    }
    memset(c->ts, 0, sizeof(cl_event) * (size_t)max_timestamps);
  }
  *out = c;
  return NULL;
}

static void release_events(kiln_device_cmd_t* c) {
  for (int32_t i = 0; i < c->max_ts; ++i)
    if (c->ts[i]) {
      clReleaseEvent(c->ts[i]);
      c->ts[i] = NULL;
    }
  if (c->last) {
    clReleaseEvent(c->last);
    c->last = NULL;
  }
}

static void ocl_cmd_destroy(kiln_device_t* base, kiln_device_cmd_t* c) {
  if (!c) return;
  if (c->last) clWaitForEvents(1, &c->last);
  release_events(c);
  for (int32_t i = 0; i < c->n_args; ++i)
    if (c->args[i]) clReleaseMemObject(c->args[i]);
  kiln_allocator_free(base->allocator, c->args);
  kiln_allocator_free(base->allocator, c->ops);
  kiln_allocator_free(base->allocator, c->ts);
  kiln_allocator_free(base->allocator, c);
}

static kiln_status_t push_op(ocl_device_t* d, kiln_device_cmd_t* c, op_t op) {
  if (c->ended)
    return kiln_make_status(KILN_INVALID_ARGUMENT, "opencl: command buffer already ended");
  if (c->n_ops == c->cap_ops) {
    int32_t cap = c->cap_ops ? 2 * c->cap_ops : 16;
    void* p = c->ops;
    KILN_RETURN_IF_ERROR(kiln_allocator_realloc(d->base.allocator, sizeof(op_t) * (size_t)cap, "opencl cmd", &p),
                         "opencl cmd");
    c->ops = p;
    c->cap_ops = cap;
  }
  c->ops[c->n_ops++] = op;
  return NULL;
}

static kiln_status_t ocl_cmd_dispatch(kiln_device_t* base, kiln_device_cmd_t* c, int32_t kernel,
                                      kiln_device_buffer_t* const* args, int32_t n_args) {
  ocl_device_t* d = D(base);
  CHECK_LOST(d);
  if (!c->exe || kernel < 0 || kernel >= c->exe->n_kernels)
    return kiln_make_status(KILN_OUT_OF_RANGE, "opencl: dispatch of kernel %d (executable has %d)",
                            (int)kernel, c->exe ? (int)c->exe->n_kernels : 0);
  const ocl_kernel_t* k = &c->exe->kernels[kernel];
  if (n_args != k->n_args)
    return kiln_make_status(KILN_INVALID_ARGUMENT, "opencl: kernel '%s' takes %d buffers, got %d",
                            k->name, (int)k->n_args, (int)n_args);
  for (int32_t i = 0; i < n_args; ++i)
    if (!args[i] || !args[i]->mem)
      return kiln_make_status(KILN_INVALID_ARGUMENT, "opencl: kernel '%s': argument %d has no buffer",
                              k->name, (int)i);
  if (c->n_args + n_args > c->cap_args) {
    int32_t cap = c->cap_args ? 2 * c->cap_args : 64;
    while (cap < c->n_args + n_args) cap *= 2;
    void* p = c->args;
    KILN_RETURN_IF_ERROR(kiln_allocator_realloc(d->base.allocator, sizeof(cl_mem) * (size_t)cap, "opencl cmd", &p),
                         "opencl cmd");
    c->args = p;
    c->cap_args = cap;
  }
  op_t op = {OP_DISPATCH, kernel, 0, c->n_args, n_args, c->dim > 0 ? c->dim : 1};
  KILN_RETURN_IF_ERROR(push_op(d, c, op));
  for (int32_t i = 0; i < n_args; ++i) {
    c->args[c->n_args++] = args[i]->mem;
    clRetainMemObject(args[i]->mem);
  }
  return NULL;
}

static kiln_status_t ocl_cmd_barrier(kiln_device_t* base, kiln_device_cmd_t* c) {
  ocl_device_t* d = D(base);
  CHECK_LOST(d);
  op_t op = {OP_BARRIER, 0, 0, 0, 0, 0};
  return push_op(d, c, op);
}

static kiln_status_t ocl_cmd_timestamp(kiln_device_t* base, kiln_device_cmd_t* c, int32_t slot) {
  ocl_device_t* d = D(base);
  CHECK_LOST(d);
  if (slot < 0 || slot >= c->max_ts)
    return kiln_make_status(KILN_OUT_OF_RANGE, "opencl: timestamp slot %d (command buffer has %d)",
                            (int)slot, (int)c->max_ts);
  op_t op = {OP_TIMESTAMP, 0, slot, 0, 0, 0};
  return push_op(d, c, op);
}

static kiln_status_t ocl_cmd_end(kiln_device_t* base, kiln_device_cmd_t* c) {
  ocl_device_t* d = D(base);
  CHECK_LOST(d);
  c->ended = true;
  return NULL;
}

static kiln_status_t ocl_submit(kiln_device_t* base, kiln_device_cmd_t* c) {
  ocl_device_t* d = D(base);
  CHECK_LOST(d);
  if (!c->ended)
    return kiln_make_status(KILN_INVALID_ARGUMENT, "opencl: submit of a command buffer not ended");
  /* The previous submission's events are replaced; in-order queue. */
  if (c->last) clWaitForEvents(1, &c->last);
  release_events(c);
  cl_int err = CL_SUCCESS;
  for (int32_t i = 0; i < c->n_ops && err == CL_SUCCESS; ++i) {
    const op_t* op = &c->ops[i];
    switch (op->kind) {
      case OP_DISPATCH: {
        const ocl_kernel_t* k = &c->exe->kernels[op->kernel];
        if (k->clblast) {
          const cl_mem* av = &c->args[op->first_arg];
          int bst = 0;
          err = kiln_ocl_gemm_clblast_enqueue(d->q, &k->gemm, av[k->gemm.a], av[k->gemm.b], av[k->gemm.y], &bst);
          if (err != CL_SUCCESS)
            return kiln_make_status(KILN_DEVICE_ERROR, "opencl: kernel '%s' as CLBlast sgemm: CLBlast status %d",
                                    k->name, bst);
          break;
        }
        for (int32_t a = 0; a < op->n_args; ++a) {
          err = clSetKernelArg(k->k, (cl_uint)a, sizeof(cl_mem), &c->args[op->first_arg + a]);
          if (err != CL_SUCCESS) {
            char what[300];
            snprintf(what, sizeof what, "(kernel '%s', argument %d)", k->name, (int)a);
            return kiln_ocl_cl_fail(d, err, "clSetKernelArg", what);
          }
        }
        /* a per-sample program's grid: dim 2 once per sample of the run */
        const size_t global[3] = {k->global[0], k->global[1], k->global[2] * (size_t)op->samples};
        err = clEnqueueNDRangeKernel(d->q, k->k, 3, NULL, global, k->local, 0, NULL, NULL);
        if (err != CL_SUCCESS) {
          char what[400];
          snprintf(what, sizeof what, "(kernel '%s', global %zux%zux%zu, local %zux%zux%zu)", k->name,
                   global[0], global[1], global[2], k->local[0], k->local[1], k->local[2]);
          if (err == CL_OUT_OF_RESOURCES || err == CL_MEM_OBJECT_ALLOCATION_FAILURE)
            return kiln_make_status(KILN_OUT_OF_MEMORY, "opencl: clEnqueueNDRangeKernel %s: %s", what,
                                    kiln_cl_error_name(err));
          return kiln_ocl_cl_fail(d, err, "clEnqueueNDRangeKernel", what);
        }
        break;
      }
      case OP_BARRIER:
        err = clEnqueueBarrierWithWaitList(d->q, 0, NULL, NULL);
        if (err != CL_SUCCESS) return kiln_ocl_cl_fail(d, err, "clEnqueueBarrierWithWaitList", NULL);
        break;
      case OP_TIMESTAMP:
        err = clEnqueueMarkerWithWaitList(d->q, 0, NULL, &c->ts[op->slot]);
        if (err != CL_SUCCESS) return kiln_ocl_cl_fail(d, err, "clEnqueueMarkerWithWaitList", NULL);
        break;
    }
  }
  err = clEnqueueMarkerWithWaitList(d->q, 0, NULL, &c->last);
  if (err != CL_SUCCESS) return kiln_ocl_cl_fail(d, err, "clEnqueueMarkerWithWaitList", NULL);
  err = clFlush(d->q);
  if (err != CL_SUCCESS) return kiln_ocl_cl_fail(d, err, "clFlush", NULL);
  return NULL;
}

static kiln_status_t ocl_wait(kiln_device_t* base, kiln_device_cmd_t* c) {
  ocl_device_t* d = D(base);
  CHECK_LOST(d);
  if (!c->last) return NULL;
  cl_int err = clWaitForEvents(1, &c->last);
  cl_int st = CL_COMPLETE;
  if (clGetEventInfo(c->last, CL_EVENT_COMMAND_EXECUTION_STATUS, sizeof st, &st, NULL) != CL_SUCCESS)
    st = CL_COMPLETE;
  if (err == CL_SUCCESS && st >= 0) return NULL;
  if (st < 0) err = st;
  if (err == CL_EXEC_STATUS_ERROR_FOR_EVENTS_IN_WAIT_LIST) {
    /* A command before the marker failed: clFinish reports why. */
    cl_int fe = clFinish(d->q);
    if (fe != CL_SUCCESS) err = fe;
  }
  return kiln_ocl_cl_fail(d, err, "clWaitForEvents", "(command buffer)");
}

static kiln_status_t ocl_timestamps_read(kiln_device_t* base, kiln_device_cmd_t* c, uint64_t* out_ns,
                                         int32_t n) {
  ocl_device_t* d = D(base);
  CHECK_LOST(d);
  if (n < 0 || n > c->max_ts)
    return kiln_make_status(KILN_OUT_OF_RANGE, "opencl: %d timestamps asked, command buffer has %d",
                            (int)n, (int)c->max_ts);
  for (int32_t i = 0; i < n; ++i) {
    out_ns[i] = 0;
    if (!c->ts[i]) continue;
    cl_ulong t = 0;
    cl_int err = clGetEventProfilingInfo(c->ts[i], CL_PROFILING_COMMAND_END, sizeof t, &t, NULL);
    if (err == CL_PROFILING_INFO_NOT_AVAILABLE) {
      /* Not finished yet: the caller has to wait first. */
      return kiln_make_status(KILN_INVALID_ARGUMENT,
                              "opencl: timestamp %d not available (wait for the submission first)",
                              (int)i);
    }
    if (err != CL_SUCCESS) return kiln_ocl_cl_fail(d, err, "clGetEventProfilingInfo", NULL);
    out_ns[i] = (uint64_t)t;
  }
  return NULL;
}

const kiln_device_vtable_t kiln_ocl_vtable = {
    .destroy = kiln_ocl_destroy, .buffer_create = ocl_buffer_create, .view_create = ocl_view_create,
    .buffer_destroy = ocl_buffer_destroy, .buffer_write = ocl_buffer_write, .buffer_read = ocl_buffer_read,
    .executable_create = kiln_ocl_executable_create, .executable_destroy = kiln_ocl_executable_destroy,
    .cmd_create = ocl_cmd_create, .cmd_destroy = ocl_cmd_destroy, .cmd_dispatch = ocl_cmd_dispatch,
    .cmd_barrier = ocl_cmd_barrier, .cmd_timestamp = ocl_cmd_timestamp, .cmd_end = ocl_cmd_end,
    .submit = ocl_submit, .wait = ocl_wait, .timestamps_read = ocl_timestamps_read, .cmd_dim = ocl_cmd_dim};
