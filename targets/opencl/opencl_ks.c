/* The run-time shapes of the OpenCL conv and Winograd instances
 * (kernels/opencl/conv.cl, winograd.cl with CRT 1) as program constants:
 * each instance's int values become an i32 constant buffer in the weights,
 * bound to the kernel's last parameter KS. Identical values share one
 * buffer (repeated blocks of a model). */
#include <stdio.h>
#include <string.h>

#include "targets/opencl/opencl_internal.h"

/* Appends an i32 constant of |ks| to |prog|; its index in *out. */
static kiln_status_t add_const(kiln_program_t* prog, const kiln_opencl_ks_t* ks, int32_t* out) {
  kiln_allocator_t al = prog->allocator;
  const uint64_t bytes = (uint64_t)ks->n * sizeof(int32_t), padded = (bytes + 63) & ~(uint64_t)63;
  if (prog->weights_borrowed)
    return kiln_make_status(KILN_INTERNAL, "opencl emit: run-time shapes into borrowed weights");
  char name[48];
  snprintf(name, sizeof name, "kiln_shapes_%d", (int)prog->n_buffers);
  char* owned = NULL;
  KILN_RETURN_IF_ERROR(kiln_program_strdup(prog, name, &owned));
  void* w = prog->weights;
  void* b = prog->buffers;
  kiln_status_t s = kiln_allocator_realloc(al, (size_t)(prog->weights_len + padded), "opencl run-time shapes", &w);
  if (!s) prog->weights = w;
  if (!s)
    s = kiln_allocator_realloc(al, sizeof(kiln_program_buffer_t) * (size_t)(prog->n_buffers + 1),
                               "opencl run-time shapes", &b);
  if (!s) prog->buffers = b;
  if (s) {
    kiln_allocator_free(al, owned);
    return s;
  }
  memset(prog->weights + prog->weights_len, 0, (size_t)padded);
  memcpy(prog->weights + prog->weights_len, ks->v, (size_t)bytes);
  kiln_program_buffer_t* nb = &prog->buffers[prog->n_buffers];
  memset(nb, 0, sizeof *nb);
  nb->name = owned;
  nb->dtype = KILN_DTYPE_I32;
  nb->kind = KILN_PB_CONST;
  nb->rank = 1;
  nb->shape[0] = ks->n;
  nb->bytes = bytes;
  nb->alias_of = -1;
  nb->first_use = nb->last_use = -1;
  nb->const_offset = prog->weights_len;
  prog->weights_len += padded;
  *out = prog->n_buffers++;
  return NULL;
}

/* Appends buffer |b| as kernel |pk|'s last (read) argument. */
static kiln_status_t add_arg(kiln_program_t* prog, kiln_program_kernel_t* pk, int32_t b) {
  kiln_allocator_t al = prog->allocator;
  void* args = pk->args;
  void* acc = pk->access;
  KILN_RETURN_IF_ERROR(
      kiln_allocator_realloc(al, sizeof(int32_t) * (size_t)(pk->n_args + 1), "opencl run-time shapes", &args));
  pk->args = args;
  KILN_RETURN_IF_ERROR(kiln_allocator_realloc(al, (size_t)(pk->n_args + 1), "opencl run-time shapes", &acc));
  pk->access = acc;
  pk->args[pk->n_args] = b;
  pk->access[pk->n_args] = KILN_ARG_READ;
  pk->n_args++;
  pk->bytes += (int64_t)prog->buffers[b].bytes;
  return NULL;
}

kiln_status_t kiln_opencl_ks_attach(kiln_program_t* prog, const int32_t* keep, const kiln_opencl_ks_t* ks) {
  const int32_t first = prog->n_buffers;
  kiln_status_t s = NULL;
  for (int32_t k = 0; k < prog->n_kernels && !s; ++k) {
    const kiln_opencl_ks_t* v = &ks[keep ? keep[k] : k];
    if (v->n <= 0) continue;
    int32_t b = -1;
    for (int32_t i = first; i < prog->n_buffers && b < 0; ++i) {
      const kiln_program_buffer_t* pb = &prog->buffers[i];
      if (pb->shape[0] == v->n && !memcmp(prog->weights + pb->const_offset, v->v, sizeof(int32_t) * (size_t)v->n))
        b = i;
    }
    if (b < 0) s = add_const(prog, v, &b);
    if (!s) s = add_arg(prog, &prog->kernels[k], b);
  }
  if (!s) kiln_program_lifetimes(prog);
  return s;
}
