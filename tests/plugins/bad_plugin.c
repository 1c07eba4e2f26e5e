/* Plugins that are wrong in one way each (include/kiln/custom_op.h), built
 * several times with one BAD_* macro by tests/plugin_tests.cmake:
 *   BAD_NO_ENTRY   no kiln_plugin_register
 *   BAD_VERSION    an op of another API version
 *   BAD_DUP        an op the example plugin registers too
 *   BAD_HALF       a good op, then one without a reference kernel
 *   BAD_OPS        ops that load but fail later: FailShape (the shape
 *                  function fails), Nonsense (returns rank 99), BadKernel
 *                  (kernels no compiler accepts), CpuOnly (no GPU kernels),
 *                  ClOnly (an OpenCL kernel only), BadLaunch (its launch
 *                  function fails); LoopHeavy (each GLSL work-item
 *                  loops over the whole input, declared by its
 *                  glsl_loop_trips: refused on a device with a loop limit
 *                  once the input is larger than it); SquarePlus (A*A + B,
 *                  with the fan-in pattern Mul(x, x) -> Add(., b)); and MinMax, a working op with two
 *                  inputs, two outputs, f32 or i8 tensors and a 2-D launch
 *   BAD_BOTH       an op with a CPU kernel as source and as a function
 *   BAD_PATTERN    a graph pattern (API version 2) whose first node no
 *                  later node reads
 *   BAD_V1         not bad: an API-version-1 op (Old, CPU source kernel)
 *                  in a buffer exactly as long as a version-1 descriptor,
 *                  so reading a field version 2 appended is a
 *                  heap-buffer-overflow under ASan */
#include <stddef.h>
#include <stdlib.h>
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

#define I8 KILN_CUSTOM_DTYPE(KILN_DTYPE_I8)
MAYBE_UNUSED static const kiln_custom_io_t mm_in[] = {{"A", F32 | I8, 0}, {"B", F32 | I8, 0}};
MAYBE_UNUSED static const kiln_custom_io_t mm_out[] = {{"lo", F32 | I8, 0}, {"hi", F32 | I8, 0}};

MAYBE_UNUSED static int mm_shape(kiln_custom_ctx_t* c) {
  if (c->in[0].dtype != c->in[1].dtype || c->in[0].rank != c->in[1].rank) {
    strncpy(c->error, "A and B differ in dtype or rank", c->error_cap - 1);
    return 1;
  }
  for (int32_t d = 0; d < c->in[0].rank; ++d)
    if (c->in[0].dims[d] != c->in[1].dims[d]) {
      strncpy(c->error, "A and B differ in shape", c->error_cap - 1);
      return 1;
    }
  c->out[0] = c->out[1] = c->in[0];
  return 0;
}

MAYBE_UNUSED static int mm_reference(kiln_custom_ctx_t* c) {
  int64_t n = 1;
  for (int32_t d = 0; d < c->in[0].rank; ++d) n *= c->in[0].dims[d];
  for (int64_t i = 0; i < n; ++i) {
    if (c->in[0].dtype == KILN_DTYPE_I8) {
      const int8_t a = ((const int8_t*)c->in[0].data)[i], b = ((const int8_t*)c->in[1].data)[i];
      ((int8_t*)c->out[0].data)[i] = a < b ? a : b;
      ((int8_t*)c->out[1].data)[i] = a < b ? b : a;
    } else {
      const float a = ((const float*)c->in[0].data)[i], b = ((const float*)c->in[1].data)[i];
      ((float*)c->out[0].data)[i] = a < b ? a : b;
      ((float*)c->out[1].data)[i] = a < b ? b : a;
    }
  }
  return 0;
}

#define MM_ELEMENT "{ out0[i] = in0[i] < in1[i] ? in0[i] : in1[i]; out1[i] = in0[i] < in1[i] ? in1[i] : in0[i]; }\n"

/* GPU launch: a 2-D grid over the last dim (x) and the rest (y), groups of
 * 16 x 2, so the bodies check both ids against KILN_GLOBAL_X/Y. */
MAYBE_UNUSED static int mm_launch(kiln_custom_ctx_t* c, int64_t global[3], int64_t local[3]) {
  const kiln_custom_tensor_t* t = &c->out[0];
  int64_t rows = 1;
  for (int32_t d = 0; d + 1 < t->rank; ++d) rows *= t->dims[d];
  global[0] = t->rank ? t->dims[t->rank - 1] : 1;
  global[1] = rows;
  local[0] = 16;
  local[1] = 2;
  return 0;
}
MAYBE_UNUSED static int failing_launch(kiln_custom_ctx_t* c, int64_t global[3], int64_t local[3]) {
  (void)global;
  (void)local;
  strncpy(c->error, "this launch function always fails", c->error_cap - 1);
  return 1;
}
#define MM_2D(x, y) \
  "int cx = " x ", cy = " y ";\nint i = cy * KILN_GLOBAL_X + cx;\nif (cx < KILN_GLOBAL_X && cy < KILN_GLOBAL_Y) " MM_ELEMENT

MAYBE_UNUSED static int64_t whole_input_trips(kiln_custom_ctx_t* c, const int64_t global[3], const int64_t local[3]) {
  (void)global;
  (void)local;
  int64_t n = 1;
  for (int32_t d = 0; d < c->in[0].rank; ++d) n *= c->in[0].dims[d];
  return n;
}
MAYBE_UNUSED static const char loop_heavy_glsl[] =
    "int i = int(gl_GlobalInvocationID.x);\n"
    "if (i < KILN_OUT0_SIZE) {\n"
    "  float m = in0[i];\n"
    "  for (int j = 0; j < KILN_IN0_SIZE; ++j) m = max(m, in0[j] - 1e30);\n"
    "  out0[i] = m;\n"
    "}\n";

MAYBE_UNUSED static const kiln_custom_io_t sqp_in[] = {{"A", F32, 0}, {"B", F32, 0}};
MAYBE_UNUSED static int sqp_shape(kiln_custom_ctx_t* c) {
  for (int32_t d = 0; d < c->in[0].rank; ++d)
    if (c->in[0].rank != c->in[1].rank || c->in[0].dims[d] != c->in[1].dims[d]) {
      strncpy(c->error, "A and B differ in shape", c->error_cap - 1);
      return 1;
    }
  c->out[0] = c->in[0];
  return 0;
}
MAYBE_UNUSED static int sqp_reference(kiln_custom_ctx_t* c) {
  int64_t n = 1;
  for (int32_t d = 0; d < c->in[0].rank; ++d) n *= c->in[0].dims[d];
  const float *a = c->in[0].data, *b = c->in[1].data;
  for (int64_t i = 0; i < n; ++i) ((float*)c->out[0].data)[i] = a[i] * a[i] + b[i];
  return 0;
}
#define SQP_ELEMENT "out0[i] = in0[i] * in0[i] + in1[i];\n"
MAYBE_UNUSED static const char* const sqp_ops[] = {"Mul", "Add"};
MAYBE_UNUSED static const int32_t sqp_mul[] = {KILN_PATTERN_SLOT(0), KILN_PATTERN_SLOT(0)};
MAYBE_UNUSED static const int32_t sqp_add[] = {KILN_PATTERN_NODE(0), KILN_PATTERN_SLOT(1)};
MAYBE_UNUSED static const int32_t* const sqp_inputs[] = {sqp_mul, sqp_add};
MAYBE_UNUSED static const int32_t sqp_counts[] = {2, 2};
MAYBE_UNUSED static const kiln_custom_pattern_t sqp_pattern = {
    .api_version = KILN_CUSTOM_OP_API_VERSION, .domain = "com.kiln.bad", .name = "SquarePlus", .n_nodes = 2,
    .ops = sqp_ops, .inputs = sqp_inputs, .n_node_inputs = sqp_counts};

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
    {.api_version = KILN_CUSTOM_OP_API_VERSION, .domain = "com.kiln.bad", .name = "MinMax", .since_version = 1,
     .version = 1, .n_inputs = 2, .n_outputs = 2, .inputs = mm_in, .outputs = mm_out, .shape = mm_shape,
     .reference = mm_reference, .cpu = {"for (long i = 0; i < KILN_OUT0_SIZE; ++i) " MM_ELEMENT, NULL},
     .opencl = {MM_2D("(int)get_global_id(0)", "(int)get_global_id(1)"), mm_launch},
     .glsl = {MM_2D("int(gl_GlobalInvocationID.x)", "int(gl_GlobalInvocationID.y)"), mm_launch}},
    {.api_version = KILN_CUSTOM_OP_API_VERSION, .domain = "com.kiln.bad", .name = "SquarePlus", .since_version = 1,
     .version = 1, .n_inputs = 2, .n_outputs = 1, .inputs = sqp_in, .outputs = io, .shape = sqp_shape,
     .reference = sqp_reference, .cpu = {"for (long i = 0; i < KILN_OUT0_SIZE; ++i) " SQP_ELEMENT, NULL},
     .opencl = {"int i = (int)get_global_id(0);\nif (i < KILN_OUT0_SIZE) " SQP_ELEMENT, NULL},
     .glsl = {"int i = int(gl_GlobalInvocationID.x);\nif (i < KILN_OUT0_SIZE) " SQP_ELEMENT, NULL}},
    OP("com.kiln.bad", "LoopHeavy", copy_shape, identity, .cpu = {copy_cpu, NULL}, .opencl = {copy_cl, NULL},
       .glsl = {loop_heavy_glsl, NULL}, .glsl_loop_trips = whole_input_trips),
    OP("com.kiln.bad", "BadLaunch", copy_shape, identity, .cpu = {copy_cpu, NULL}, .opencl = {copy_cl, failing_launch},
       .glsl = {"int i = int(gl_GlobalInvocationID.x);\nif (i < KILN_OUT0_SIZE) out0[i] = in0[i];\n", failing_launch}),
};
#elif defined(BAD_BOTH)
static int some_fn(kiln_custom_ctx_t* c, void* user) {
  (void)user;
  return identity(c);
}
static const kiln_custom_op_t op = OP("com.kiln.bad", "Both", copy_shape, identity, .cpu = {copy_cpu, NULL},
                                      .cpu_fn = some_fn);
#elif defined(BAD_PATTERN)
static const kiln_custom_op_t op = OP("com.kiln.bad", "Lonely", copy_shape, identity, .cpu = {copy_cpu, NULL});
static const char* const lonely_ops[] = {"Relu", "Relu"};
static const int32_t lonely_first[] = {KILN_PATTERN_SLOT(0)};
static const int32_t lonely_second[] = {KILN_PATTERN_SLOT(0)}; /* not NODE(0) */
static const int32_t* const lonely_inputs[] = {lonely_first, lonely_second};
static const int32_t lonely_counts[] = {1, 1};
static const kiln_custom_pattern_t lonely = {.api_version = KILN_CUSTOM_OP_API_VERSION, .domain = "com.kiln.bad",
                                             .name = "Lonely", .n_nodes = 2, .ops = lonely_ops,
                                             .inputs = lonely_inputs, .n_node_inputs = lonely_counts};
#elif defined(BAD_V1)
static const kiln_custom_op_t v1 = {.api_version = 1, .domain = "com.kiln.bad", .name = "Old", .since_version = 1,
                                    .version = 1, .n_inputs = 1, .n_outputs = 1, .inputs = io, .outputs = io,
                                    .shape = copy_shape, .reference = identity, .cpu = {copy_cpu, NULL}};
static void* v1_copy; /* what kiln reads while the plugin is loaded */
__attribute__((destructor)) static void free_v1(void) { free(v1_copy); } /* on dlclose */
#endif

#ifndef BAD_NO_ENTRY
KILN_PLUGIN_EXPORT int kiln_plugin_register(kiln_plugin_host_t* host) {
#if defined(BAD_V1)
  /* what a plugin built against the version-1 header hands over: the
   * struct ended after .epilogue */
  const size_t v1_size = offsetof(kiln_custom_op_t, cpu_fn);
  if (!v1_copy && !(v1_copy = malloc(v1_size))) return 1;
  memcpy(v1_copy, &v1, v1_size);
  return host->register_op(host, (const kiln_custom_op_t*)v1_copy);
#elif defined(BAD_OPS)
  for (size_t i = 0; i < sizeof ops / sizeof ops[0]; ++i)
    if (host->register_op(host, &ops[i])) return 1;
  return host->register_pattern(host, &sqp_pattern);
#else
#if defined(BAD_HALF)
  if (host->register_op(host, &good)) return 1;
#endif
#if defined(BAD_PATTERN)
  if (host->register_op(host, &op)) return 1;
  return host->register_pattern(host, &lonely);
#endif
  return host->register_op(host, &op);
#endif
}
#else
KILN_PLUGIN_EXPORT int kiln_plugin_registr(kiln_plugin_host_t* host) { return host ? 0 : 1; }
#endif
