/* Plugins that are wrong in one way each (include/kiln/custom_op.h), built
 * several times with one BAD_* macro by tests/plugin_tests.cmake:
 *   BAD_NO_ENTRY   no kiln_plugin_register
 *   BAD_VERSION    an op of another API version
 *   BAD_DUP        an op the example plugin registers too
 *   BAD_HALF       a good op, then one without a reference kernel
 *   BAD_OPS        ops that load but fail later: FailShape (the shape
 *                  function fails), Nonsense (returns rank 99), BadKernel
 *                  (kernels no compiler accepts), CpuOnly (no GPU kernels) */
#include <string.h>

#include "kiln/custom_op.h"

#define F32 KILN_CUSTOM_DTYPE(KILN_DTYPE_F32)
/* each variant uses some of what follows */
#define MAYBE_UNUSED __attribute__((unused))
MAYBE_UNUSED static const kiln_custom_io_t io[] = {{"X", F32, 0}};

MAYBE_UNUSED static int copy_shape(kiln_custom_ctx_t* c) {
  c->out[0] = c->in[0];
  return 0;
}

MAYBE_UNUSED static int identity(kiln_custom_ctx_t* c) {
  int64_t n = 1;
  for (int32_t d = 0; d < c->in[0].rank; ++d) n *= c->in[0].dims[d];
  memcpy(c->out[0].data, c->in[0].data, (size_t)n * sizeof(float));
  return 0;
}

MAYBE_UNUSED static int fail_shape(kiln_custom_ctx_t* c) {
  strncpy(c->error, "this shape function always fails", c->error_cap - 1);
  return 1;
}

MAYBE_UNUSED static int nonsense_shape(kiln_custom_ctx_t* c) {
  c->out[0].dtype = KILN_DTYPE_F32;
  c->out[0].rank = 99;
  return 0;
}

#define OP(dom, nm, shp, ref, ...)                                                                  \
  {.api_version = KILN_CUSTOM_OP_API_VERSION, .domain = dom, .name = nm, .since_version = 1,        \
   .version = 1, .n_inputs = 1, .n_outputs = 1, .inputs = io, .outputs = io, .shape = shp,          \
   .reference = ref, __VA_ARGS__}

MAYBE_UNUSED static const char copy_cpu[] = "for (long i = 0; i < KILN_OUT0_SIZE; ++i) out0[i] = in0[i];\n";
MAYBE_UNUSED static const char copy_cl[] = "int i = (int)get_global_id(0);\nif (i < KILN_OUT0_SIZE) out0[i] = in0[i];\n";

#if defined(BAD_VERSION)
static const kiln_custom_op_t op = {.api_version = 99, .domain = "com.kiln.bad", .name = "Future", .since_version = 1,
                                    .version = 1, .n_inputs = 1, .n_outputs = 1, .inputs = io, .outputs = io,
                                    .shape = copy_shape, .reference = identity};
#elif defined(BAD_DUP)
static const kiln_custom_op_t op = OP("com.kiln.example", "ScaledSwish", copy_shape, identity);
#elif defined(BAD_HALF)
static const kiln_custom_op_t good = OP("com.kiln.bad", "GoodOne", copy_shape, identity);
static const kiln_custom_op_t op = OP("com.kiln.bad", "GoodTwo", copy_shape, NULL);
#elif defined(BAD_OPS)
static const kiln_custom_op_t ops[] = {
    OP("com.kiln.bad", "FailShape", fail_shape, identity),
    OP("com.kiln.bad", "Nonsense", nonsense_shape, identity),
    OP("com.kiln.bad", "BadKernel", copy_shape, identity, .cpu = {"this is not C;\n", NULL},
       .opencl = {"this is not OpenCL C;\n", NULL}, .glsl = {"this is not GLSL;\n", NULL}),
    OP("com.kiln.bad", "CpuOnly", copy_shape, identity, .cpu = {copy_cpu, NULL}),
    OP("com.kiln.bad", "ClOnly", copy_shape, identity, .opencl = {copy_cl, NULL}),
};
#endif

#ifndef BAD_NO_ENTRY
KILN_PLUGIN_EXPORT int kiln_plugin_register(kiln_plugin_host_t* host) {
#if defined(BAD_OPS)
  for (size_t i = 0; i < sizeof ops / sizeof ops[0]; ++i)
    if (host->register_op(host, &ops[i])) return 1;
  return 0;
#else
#if defined(BAD_HALF)
  if (host->register_op(host, &good)) return 1;
#endif
  return host->register_op(host, &op);
#endif
}
#else
KILN_PLUGIN_EXPORT int kiln_plugin_registr(kiln_plugin_host_t* host) { return host ? 0 : 1; }
#endif
