/* Plugin kernels printed into a target's code (targets/custom_kernel.h).
 *
 * kiln writes the function header, the typed tensor variables and the
 * macros; the plugin only gives the body, so a plugin cannot declare
 * arguments that disagree with the plan. The body is preceded by a #line
 * directive naming the plugin and the op, so a compiler that rejects it
 * (gcc, the OpenCL driver, shaderc) says whose code it was. */
#include "targets/custom_kernel.h"

#include <math.h>
#include <stdio.h>
#include <string.h>

#include "ir/ops/custom.h"

static const char* kernel_key(const char* target) {
  return !strcmp(target, "cpu") ? "cpu" : !strcmp(target, "opencl") ? "opencl" : "glsl";
}

kiln_status_t kiln_custom_kernel_of(const kiln_custom_instance_t* ci, const char* target,
                                    const kiln_custom_kernel_t** out) {
  const kiln_custom_op_t* op = ci->op;
  const kiln_custom_kernel_t* k = !strcmp(target, "cpu")      ? &op->cpu
                                  : !strcmp(target, "opencl") ? &op->opencl
                                  : !strcmp(target, "vulkan") ? &op->glsl
                                                              : NULL;
  const bool has = k && (k->source || (k == &op->cpu && op->cpu_fn));
  if (!has)
    return kiln_make_status(KILN_UNSUPPORTED,
                            "plugin op %s/%s (plugin '%s') at node '%s' has no kernel for target %s (%s source): "
                            "give the plugin one, or compile for a target it has one for (a GPU target runs it on "
                            "the CPU when the plugin has a CPU kernel, unless --strict)",
                            op->domain, op->name, kiln_custom_op_plugin(op), ci->node, target,
                            k ? kernel_key(target) : "no");
  *out = k;
  return NULL;
}

/* A float literal every dialect reads back exactly. */
static void put_float(kiln_cf_out_t* o, float v, bool glsl) {
  if (isnan(v) || isinf(v)) {
    static const char* const lit[2][3] = {{"(0.0f/0.0f)", "(1.0f/0.0f)", "(-1.0f/0.0f)"},
                                          {"uintBitsToFloat(0x7fc00000u)", "uintBitsToFloat(0x7f800000u)",
                                           "uintBitsToFloat(0xff800000u)"}};
    kiln_cf_out_puts(o, lit[glsl][isnan(v) ? 0 : v > 0 ? 1 : 2]);
    return;
  }
  char b[48];
  snprintf(b, sizeof b, "%.9g", (double)v);
  kiln_cf_out_printf(o, "(%s%s%s)", b, strpbrk(b, ".e") ? "" : ".0", glsl ? "" : "f");
}

/* #define NAME VALUE, remembering NAME for the #undef after the kernel. */
typedef struct defs_s {
  kiln_cf_out_t* o;
  kiln_cf_out_t undef;
} defs_t;

static void def_int(defs_t* d, const char* name, int64_t v, bool glsl) {
  /* parenthesised: -KILN_ATTR_x must not read as a decrement */
  kiln_cf_out_printf(d->o, "#define %s (%lld%s)\n", name, (long long)v,
                     glsl || (v >= -2147483647 && v <= 2147483647) ? "" : "LL");
  kiln_cf_out_printf(&d->undef, "#undef %s\n", name);
}

static void def_tensor(defs_t* d, const char* io, int32_t i, const kiln_custom_tensor_t* t, bool glsl) {
  char nm[64];
  snprintf(nm, sizeof nm, "KILN_%s%d_PRESENT", io, (int)i);
  def_int(d, nm, t->dtype != KILN_DTYPE_UNDEFINED, glsl);
  if (t->dtype == KILN_DTYPE_UNDEFINED) return;
  snprintf(nm, sizeof nm, "KILN_%s%d_DTYPE", io, (int)i);
  def_int(d, nm, t->dtype, glsl);
  snprintf(nm, sizeof nm, "KILN_%s%d_RANK", io, (int)i);
  def_int(d, nm, t->rank, glsl);
  int64_t n = 1;
  for (int32_t k = 0; k < t->rank; ++k) {
    snprintf(nm, sizeof nm, "KILN_%s%d_DIM%d", io, (int)i, (int)k);
    def_int(d, nm, t->dims[k], glsl);
    n *= t->dims[k];
  }
  snprintf(nm, sizeof nm, "KILN_%s%d_SIZE", io, (int)i);
  def_int(d, nm, n, glsl);
}

static void def_attrs(defs_t* d, const kiln_custom_instance_t* ci, bool glsl) {
  for (int32_t i = 0; i < ci->op->n_attrs; ++i) {
    const kiln_custom_attr_t* a = &ci->attrs[i];
    char nm[200];
    snprintf(nm, sizeof nm, "KILN_ATTR_%s", a->name);
    if (a->type == KILN_CUSTOM_ATTR_INT) {
      def_int(d, nm, a->i, glsl);
    } else if (a->type == KILN_CUSTOM_ATTR_FLOAT) {
      kiln_cf_out_printf(d->o, "#define %s ", nm);
      put_float(d->o, a->f, glsl);
      kiln_cf_out_puts(d->o, "\n");
      kiln_cf_out_printf(&d->undef, "#undef %s\n", nm);
    } else {
      snprintf(nm, sizeof nm, "KILN_ATTR_%s_COUNT", a->name);
      def_int(d, nm, a->count, glsl);
      for (int64_t j = 0; j < a->count; ++j) {
        snprintf(nm, sizeof nm, "KILN_ATTR_%s_%lld", a->name, (long long)j);
        if (a->type == KILN_CUSTOM_ATTR_INTS) {
          def_int(d, nm, a->ints[j], glsl);
        } else {
          kiln_cf_out_printf(d->o, "#define %s ", nm);
          put_float(d->o, a->floats[j], glsl);
          kiln_cf_out_puts(d->o, "\n");
          kiln_cf_out_printf(&d->undef, "#undef %s\n", nm);
        }
      }
    }
  }
}

/* KILN_EPILOGUE0(v): the activation fused into output 0, in the dialect
 * (f32 arithmetic, as kiln_custom_epilogue_apply), then what kiln's fusion
 * added (ci->epi_expr), printed as the function |epi_fn| by the C-family
 * printer from the fused kernels' tensor IR. */
static kiln_status_t def_epilogue(defs_t* d, const kiln_custom_instance_t* ci, const kiln_cf_dialect_t* dl,
                                  const char* epi_fn) {
  if (!ci->op->epilogue) return NULL;
  const bool glsl = dl->lang == KILN_CF_LANG_GLSL, c_lang = dl->lang == KILN_CF_LANG_C;
  for (int32_t j = 0; j < ci->n_epi; ++j) {
    char fn[340];
    snprintf(fn, sizeof fn, "%s_%d", epi_fn, (int)j);
    KILN_RETURN_IF_ERROR(kiln_cf_print_value_fn(dl, fn, ci->epi_var[j], ci->epi_expr[j], d->o));
  }
  const char* k = ci->epilogue ? ci->epilogue : "";
  const char* zero = glsl ? "0.0" : "0.0f";
  kiln_cf_out_puts(d->o, "#define KILN_EPILOGUE0(v) ");
  for (int32_t j = ci->n_epi - 1; j >= 0; --j) kiln_cf_out_printf(d->o, "%s_%d(", epi_fn, (int)j);
  if (!strcmp(k, "Relu")) {
    kiln_cf_out_printf(d->o, "((v) > %s ? (v) : %s)", zero, zero);
  } else if (!strcmp(k, "LeakyRelu")) {
    kiln_cf_out_printf(d->o, "((v) >= %s ? (v) : (v) * ", zero);
    put_float(d->o, ci->epilogue_alpha, glsl);
    kiln_cf_out_puts(d->o, ")");
  } else if (!strcmp(k, "Sigmoid")) {
    kiln_cf_out_printf(d->o, "(1.0%s / (1.0%s + %s(-(v))))", glsl ? "" : "f", glsl ? "" : "f", c_lang ? "expf" : "exp");
  } else if (!strcmp(k, "Tanh")) {
    kiln_cf_out_printf(d->o, "%s(v)", c_lang ? "tanhf" : "tanh");
  } else {
    kiln_cf_out_puts(d->o, "(v)");
  }
  for (int32_t j = 0; j < ci->n_epi; ++j) kiln_cf_out_puts(d->o, ")");
  kiln_cf_out_puts(d->o, "\n");
  kiln_cf_out_puts(&d->undef, "#undef KILN_EPILOGUE0\n");
  return NULL;
}

/* The plugin's launch geometry (or the default), checked. */
static kiln_status_t launch_of(const kiln_custom_instance_t* ci, const kiln_custom_kernel_t* k, const char* target,
                               int64_t global[3], int64_t local[3]) {
  const kiln_custom_op_t* op = ci->op;
  int64_t n0 = 1;
  for (int32_t d = 0; d < ci->out[0].rank; ++d) n0 *= ci->out[0].dims[d];
  global[0] = n0 > 0 ? n0 : 1;
  global[1] = global[2] = 1;
  local[0] = 64;
  local[1] = local[2] = 1;
  if (k->launch) {
    char err[300] = "";
    kiln_custom_ctx_t c = {.node = ci->node, .target = target, .n_in = op->n_inputs, .in = ci->in,
                           .n_out = op->n_outputs, .out = (kiln_custom_tensor_t*)ci->out, .n_attrs = op->n_attrs,
                           .attrs = ci->attrs, .error = err, .error_cap = sizeof err};
    if (k->launch(&c, global, local))
      return kiln_make_status(KILN_INVALID_ARGUMENT, "plugin op %s/%s (plugin '%s') at node '%s': the %s launch "
                              "function failed: %s", op->domain, op->name, kiln_custom_op_plugin(op), ci->node,
                              target, err[0] ? err : "(no message)");
  }
  int64_t lanes = 1;
  for (int d = 0; d < 3; ++d) {
    if (global[d] < 1 || local[d] < 1 || global[d] > (1ll << 40) || local[d] > 1024)
      return kiln_make_status(KILN_INVALID_ARGUMENT,
                              "plugin op %s/%s (plugin '%s') at node '%s': %s launch geometry global "
                              "[%lld,%lld,%lld] local [%lld,%lld,%lld] is out of range",
                              op->domain, op->name, kiln_custom_op_plugin(op), ci->node, target,
                              (long long)global[0], (long long)global[1], (long long)global[2], (long long)local[0],
                              (long long)local[1], (long long)local[2]);
    lanes *= local[d];
  }
  if (lanes > 1024)
    return kiln_make_status(KILN_INVALID_ARGUMENT, "plugin op %s/%s at node '%s': %s work-group of %lld work-items "
                            "(at most 1024)", op->domain, op->name, ci->node, target, (long long)lanes);
  return NULL;
}

/* ---- a CPU kernel given as a function (kiln_custom_op_t.cpu_fn) -------- */

/* The layout of include/kiln/custom_op.h's kiln_custom_tensor_t,
 * kiln_custom_attr_t and kiln_custom_ctx_t (enums are int-sized; the unit
 * is compiled without kiln's headers), the function types, and the
 * resolver the runtime passes to kiln_plugin_bind (runtime/cpu/cpu_loader.c
 * defines the other side). Guarded: every part of a unit that needs it
 * prints it. */
_Static_assert(KILN_MAX_RANK == 8 && sizeof(kiln_dtype_t) == sizeof(int32_t),
               "call_types spells kiln_custom_tensor_t as {int32_t, int32_t, int64_t[8], void*}");
static const char call_types[] =
    "#ifndef KILN_PLUGIN_CALL_TYPES\n#define KILN_PLUGIN_CALL_TYPES\n"
    "typedef struct { int32_t dtype; int32_t rank; int64_t dims[8]; void* data; } kiln_pc_tensor;\n"
    "typedef struct { const char* name; int32_t type; int64_t i; float f; int64_t count; const int64_t* ints;\n"
    "                 const float* floats; } kiln_pc_attr;\n"
    "typedef struct { const char* node; const char* target; int32_t n_in; const kiln_pc_tensor* in; int32_t n_out;\n"
    "                 kiln_pc_tensor* out; int32_t n_attrs; const kiln_pc_attr* attrs; char* error;\n"
    "                 size_t error_cap; } kiln_pc_ctx;\n"
    "typedef int (*kiln_pc_fn)(kiln_pc_ctx* ctx, void* user_data);\n"
    "typedef int (*kiln_pc_resolve)(void* host, const char* domain, const char* name, int32_t version,\n"
    "                               const char* node, kiln_pc_fn* fn, void** user_data);\n"
    "#endif\n";

/* |s| as a C string literal. */
static void put_cstr(kiln_cf_out_t* o, const char* s) {
  kiln_cf_out_puts(o, "\"");
  for (const unsigned char* p = (const unsigned char*)s; *p; ++p) {
    if (*p == '"' || *p == '\\') kiln_cf_out_printf(o, "\\%c", *p);
    else if (*p < 32 || *p > 126) kiln_cf_out_printf(o, "\\%03o", *p);
    else kiln_cf_out_printf(o, "%c", *p);
  }
  kiln_cf_out_puts(o, "\"");
}

static void put_tensor(kiln_cf_out_t* o, const kiln_custom_tensor_t* t, const char* var) {
  kiln_cf_out_printf(o, "{%d, %d, {", (int)t->dtype, (int)t->rank);
  for (int32_t d = 0; d < t->rank; ++d) kiln_cf_out_printf(o, "%s%lldLL", d ? ", " : "", (long long)t->dims[d]);
  kiln_cf_out_printf(o, "%s}, (void*)%s}", t->rank ? "" : "0", var);
}

/* The kernel: kiln's header, the tensors and attributes as the plugin's
 * structs, the call through the pointer kiln_plugin_bind set at load, the
 * status word on failure, then a fused activation over output 0. */
static void print_cpu_call(const kiln_custom_instance_t* ci, const tir_func_t* f, const char* name,
                           kiln_cf_out_t* o) {
  const kiln_custom_op_t* op = ci->op;
  kiln_cf_out_puts(o, call_types);
  kiln_cf_out_printf(o, "static kiln_pc_fn %s_fn;\nstatic void* %s_user;\n", name, name);
  kiln_cf_out_printf(o, "int kiln_pbind_%s(kiln_pc_resolve r, void* host) {\n  return r(host, ", name);
  put_cstr(o, op->domain);
  kiln_cf_out_puts(o, ", ");
  put_cstr(o, op->name);
  kiln_cf_out_printf(o, ", %d, ", (int)op->version);
  put_cstr(o, ci->node);
  kiln_cf_out_printf(o, ", &%s_fn, &%s_user);\n}\n", name, name);
  kiln_cf_out_printf(o, "void %s(void* const* args) {\n", name);
  for (int32_t s = 0; s < 2; ++s)
    for (int32_t i = 0; i < (s ? op->n_outputs : op->n_inputs); ++i) {
      const int32_t a = s ? ci->out_arg[i] : ci->in_arg[i];
      if (a < 0) continue;
      const char* ty = kiln_cf_dialect_c.types[f->params[a]->dtype];
      kiln_cf_out_printf(o, "  %s%s* %s%d = (%s%s*)args[%d];\n", s ? "" : "const ", ty, s ? "out" : "in", (int)i,
                         s ? "" : "const ", ty, (int)a);
    }
  kiln_cf_out_printf(o, "  kiln_pc_tensor in[%d] = {", (int)op->n_inputs);
  for (int32_t i = 0; i < op->n_inputs; ++i) {
    char var[16];
    snprintf(var, sizeof var, "in%d", (int)i);
    kiln_cf_out_puts(o, i ? ", " : "");
    if (ci->in_arg[i] < 0) kiln_cf_out_puts(o, "{0, 0, {0}, (void*)0}");
    else put_tensor(o, &ci->in[i], var);
  }
  kiln_cf_out_printf(o, "};\n  kiln_pc_tensor out[%d] = {", (int)op->n_outputs);
  for (int32_t i = 0; i < op->n_outputs; ++i) {
    char var[16];
    snprintf(var, sizeof var, "out%d", (int)i);
    kiln_cf_out_puts(o, i ? ", " : "");
    put_tensor(o, &ci->out[i], var);
  }
  kiln_cf_out_puts(o, "};\n");
  for (int32_t i = 0; i < op->n_attrs; ++i) {
    const kiln_custom_attr_t* a = &ci->attrs[i];
    if (a->type == KILN_CUSTOM_ATTR_INTS && a->count > 0) {
      kiln_cf_out_printf(o, "  static const int64_t a%d[] = {", (int)i);
      for (int64_t j = 0; j < a->count; ++j) kiln_cf_out_printf(o, "%s%lldLL", j ? ", " : "", (long long)a->ints[j]);
      kiln_cf_out_puts(o, "};\n");
    } else if (a->type == KILN_CUSTOM_ATTR_FLOATS && a->count > 0) {
      kiln_cf_out_printf(o, "  static const float a%d[] = {", (int)i);
      for (int64_t j = 0; j < a->count; ++j) {
        kiln_cf_out_puts(o, j ? ", " : "");
        put_float(o, a->floats[j], false);
      }
      kiln_cf_out_puts(o, "};\n");
    }
  }
  kiln_cf_out_printf(o, "  static const kiln_pc_attr attrs[%d] = {", op->n_attrs ? (int)op->n_attrs : 1);
  for (int32_t i = 0; i < op->n_attrs; ++i) {
    const kiln_custom_attr_t* a = &ci->attrs[i];
    const bool arr = (a->type == KILN_CUSTOM_ATTR_INTS || a->type == KILN_CUSTOM_ATTR_FLOATS) && a->count > 0;
    kiln_cf_out_puts(o, i ? ",\n      {" : "{");
    put_cstr(o, a->name);
    kiln_cf_out_printf(o, ", %d, %lldLL, ", (int)a->type, (long long)a->i);
    put_float(o, a->f, false);
    kiln_cf_out_printf(o, ", %lldLL, ", (long long)a->count);
    if (arr && a->type == KILN_CUSTOM_ATTR_INTS) kiln_cf_out_printf(o, "a%d, 0}", (int)i);
    else if (arr) kiln_cf_out_printf(o, "0, a%d}", (int)i);
    else kiln_cf_out_puts(o, "0, 0}");
  }
  if (!op->n_attrs) kiln_cf_out_puts(o, "{0}");
  kiln_cf_out_puts(o, "};\n  char err[256] = \"\";\n  kiln_pc_ctx ctx = {");
  put_cstr(o, ci->node);
  kiln_cf_out_printf(o, ", \"cpu\", %d, in, %d, out, %d, attrs, err, sizeof err};\n", (int)op->n_inputs,
                     (int)op->n_outputs, (int)op->n_attrs);
  kiln_cf_out_printf(o, "  if (%s_fn(&ctx, %s_user)) {\n    *(int32_t*)args[%d] = %d;\n    return;\n  }\n", name, name,
                     (int)ci->status_arg, 4 /* KILN_PB_CHECK_PLUGIN_FN (runtime/program.h) */);
  if (ci->epilogue && ci->out_arg[0] >= 0) {
    const bool half = ci->out[0].dtype == KILN_DTYPE_F16;
    int64_t n = 1;
    for (int32_t d = 0; d < ci->out[0].rank; ++d) n *= ci->out[0].dims[d];
    kiln_cf_out_printf(o, "  #pragma omp parallel for\n  for (int64_t i = 0; i < %lldLL; ++i) {\n    float v = %s;\n"
                       "    out0[i] = %s;\n  }\n", (long long)n, half ? "kiln_h2f(out0[i])" : "out0[i]",
                       half ? "kiln_f2h(KILN_EPILOGUE0(v))" : "KILN_EPILOGUE0(v)");
  }
  kiln_cf_out_puts(o, "}\n");
}

kiln_status_t kiln_custom_glsl_trips(const kiln_plan_t* plan, int32_t k, int64_t* out_trips) {
  const kiln_custom_instance_t* ci = plan->kernels[k].custom;
  const kiln_custom_op_t* op = ci->op;
  *out_trips = 0;
  if (!op->glsl_loop_trips) return NULL;
  int64_t global[3], local[3];
  KILN_RETURN_IF_ERROR(launch_of(ci, &op->glsl, "vulkan", global, local));
  char err[300] = "";
  kiln_custom_ctx_t c = {.node = ci->node, .target = "vulkan", .n_in = op->n_inputs, .in = ci->in,
                         .n_out = op->n_outputs, .out = (kiln_custom_tensor_t*)ci->out, .n_attrs = op->n_attrs,
                         .attrs = ci->attrs, .error = err, .error_cap = sizeof err};
  const int64_t trips = op->glsl_loop_trips(&c, global, local);
  if (trips < 0)
    return kiln_make_status(KILN_INVALID_ARGUMENT, "plugin op %s/%s (plugin '%s') at node '%s': its glsl_loop_trips "
                            "function failed: %s", op->domain, op->name, kiln_custom_op_plugin(op), ci->node,
                            err[0] ? err : "(no message)");
  if (plan->loop_limit > 0 && trips > plan->loop_limit)
    return kiln_make_status(KILN_UNSUPPORTED,
                            "plugin op %s/%s (plugin '%s') at node '%s': one vulkan work-item runs %lld loop "
                            "iterations (its glsl_loop_trips), the device ends an invocation after %lld, which would "
                            "leave the outputs partial: give the op a launch that spreads the work over more "
                            "work-items, or run it on another target",
                            op->domain, op->name, kiln_custom_op_plugin(op), ci->node, (long long)trips,
                            (long long)plan->loop_limit);
  *out_trips = trips;
  return NULL;
}

bool kiln_custom_calls_cpu_fn(const kiln_plan_kernel_t* pk) {
  return pk->custom && pk->custom->status_arg >= 0 && pk->custom->op->cpu_fn;
}

void kiln_custom_print_bind(const kiln_plan_t* plan, kiln_cf_out_t* o) {
  bool any = false;
  for (int32_t k = 0; k < plan->n_kernels && !any; ++k) any = kiln_custom_calls_cpu_fn(&plan->kernels[k]);
  if (!any) return;
  kiln_cf_out_puts(o, call_types);
  for (int32_t k = 0; k < plan->n_kernels; ++k)
    if (kiln_custom_calls_cpu_fn(&plan->kernels[k]))
      kiln_cf_out_printf(o, "int kiln_pbind_%s(kiln_pc_resolve r, void* host);\n", plan->kernels[k].func->name);
  kiln_cf_out_puts(o, "/* Exported: the loader sets every plugin CPU function pointer of the unit. */\n"
                      "int kiln_plugin_bind(kiln_pc_resolve r, void* host) {\n");
  for (int32_t k = 0; k < plan->n_kernels; ++k)
    if (kiln_custom_calls_cpu_fn(&plan->kernels[k]))
      kiln_cf_out_printf(o, "  if (kiln_pbind_%s(r, host)) return 1;\n", plan->kernels[k].func->name);
  kiln_cf_out_puts(o, "  return 0;\n}\n");
}

/* The first input slot before |i| on the same kernel parameter, or -1. */
static int32_t shared_slot(const kiln_custom_instance_t* ci, int32_t i) {
  for (int32_t j = 0; j < i; ++j)
    if (ci->in_arg[j] >= 0 && ci->in_arg[j] == ci->in_arg[i]) return j;
  return -1;
}

kiln_status_t kiln_custom_print(const kiln_plan_t* plan, int32_t k, const char* target, const char* name,
                                kiln_cf_out_t* o, int64_t groups[3], int64_t local[3]) {
  const kiln_plan_kernel_t* pk = &plan->kernels[k];
  const kiln_custom_instance_t* ci = pk->custom;
  const kiln_custom_op_t* op = ci->op;
  const kiln_custom_kernel_t* kern;
  KILN_RETURN_IF_ERROR(kiln_custom_kernel_of(ci, target, &kern));
  const bool glsl = !strcmp(target, "vulkan"), ocl = !strcmp(target, "opencl");
  const kiln_cf_dialect_t* dl = glsl ? &kiln_cf_dialect_glsl : ocl ? &kiln_cf_dialect_opencl : &kiln_cf_dialect_c;
  /* The precision pass may have retyped a buffer; the plugin's kernel was
   * declared for the dtypes the shape function saw. */
  const tir_func_t* f = pk->func;
  for (int32_t s = 0; s < 2; ++s)
    for (int32_t i = 0; i < (s ? op->n_outputs : op->n_inputs); ++i) {
      const int32_t a = s ? ci->out_arg[i] : ci->in_arg[i];
      const kiln_dtype_t want = s ? ci->out[i].dtype : ci->in[i].dtype;
      if (a >= 0 && (a >= f->n_params || f->params[a]->dtype != want))
        return kiln_make_status(KILN_UNSUPPORTED,
                                "plugin op %s/%s at node '%s': %s '%s' is %s in the compiled program, the plugin's "
                                "kernel was declared for %s (a --precision other than fp32 does not apply to "
                                "plugin ops)", op->domain, op->name, ci->node, s ? "output" : "input",
                                s ? op->outputs[i].name : op->inputs[i].name,
                                a < f->n_params ? kiln_dtype_name(f->params[a]->dtype) : "?", kiln_dtype_name(want));
    }
  int64_t global[3] = {1, 1, 1}, lsz[3] = {1, 1, 1};
  if (glsl || ocl) KILN_RETURN_IF_ERROR(launch_of(ci, kern, target, global, lsz));
  for (int d = 0; d < 3; ++d) {
    groups[d] = (global[d] + lsz[d] - 1) / lsz[d];
    local[d] = lsz[d];
  }
  if (glsl)
    for (int d = 0; d < 3; ++d)
      if (groups[d] > 65535)
        return kiln_make_status(KILN_LIMIT_EXCEEDED,
                                "plugin op %s/%s at node '%s': %lld vulkan work-groups in dimension %d (Vulkan "
                                "guarantees 65535): give the op a launch function that spreads the work over y and z",
                                op->domain, op->name, ci->node, (long long)groups[d], d);
  defs_t d = {.o = o};
  kiln_cf_out_init(&d.undef);
  if (!glsl && !ocl && !kern->source) { /* op->cpu_fn (kiln_custom_kernel_of) */
    if (ci->status_arg < 0)
      return kiln_make_status(KILN_INTERNAL, "plugin op %s/%s at node '%s': a cpu_fn kernel lowered without its "
                              "status word", op->domain, op->name, ci->node);
    kiln_cf_out_printf(o, "\n/* plugin op %s/%s (plugin '%s'), node '%s': calls the plugin's cpu_fn */\n",
                       op->domain, op->name, kiln_custom_op_plugin(op), ci->node);
    char epi_fn[300];
    snprintf(epi_fn, sizeof epi_fn, "kiln_epi_%s", name);
    kiln_status_t es = def_epilogue(&d, ci, dl, epi_fn);
    if (es) {
      kiln_cf_out_free(&d.undef);
      return es;
    }
    print_cpu_call(ci, f, name, o);
    kiln_cf_out_puts(o, d.undef.data ? d.undef.data : "");
    const bool oom = d.undef.oom;
    kiln_cf_out_free(&d.undef);
    if (oom || o->oom) return kiln_make_status(KILN_OUT_OF_MEMORY, "plugin kernel '%s'", name);
    return NULL;
  }
  if (glsl) {
    bool i8 = false, f16 = false;
    for (int32_t a = 0; a < f->n_params; ++a) {
      i8 |= f->params[a]->dtype == KILN_DTYPE_I8 || f->params[a]->dtype == KILN_DTYPE_U8;
      f16 |= f->params[a]->dtype == KILN_DTYPE_F16;
    }
    kiln_cf_out_puts(o, "#version 450\n#extension GL_EXT_shader_explicit_arithmetic_types_int64 : require\n"
                        "#extension GL_GOOGLE_cpp_style_line_directive : enable\n");
    if (i8)
      kiln_cf_out_puts(o, "#extension GL_EXT_shader_8bit_storage : require\n"
                          "#extension GL_EXT_shader_explicit_arithmetic_types_int8 : require\n");
    if (f16)
      kiln_cf_out_puts(o, "#extension GL_EXT_shader_16bit_storage : require\n"
                          "#extension GL_EXT_shader_explicit_arithmetic_types_float16 : require\n");
    kiln_cf_out_puts(o, dl->prelude);
  }
  kiln_cf_out_printf(o, "\n/* plugin op %s/%s (plugin '%s'), node '%s' */\n", op->domain, op->name,
                     kiln_custom_op_plugin(op), ci->node);
  for (int32_t i = 0; i < op->n_inputs; ++i) def_tensor(&d, "IN", i, &ci->in[i], glsl);
  for (int32_t i = 0; i < op->n_outputs; ++i) def_tensor(&d, "OUT", i, &ci->out[i], glsl);
  def_attrs(&d, ci, glsl);
  char epi_fn[300];
  snprintf(epi_fn, sizeof epi_fn, "kiln_epi_%s", glsl ? "main_value" : name);
  kiln_status_t es = def_epilogue(&d, ci, dl, epi_fn);
  if (es) {
    kiln_cf_out_free(&d.undef);
    return es;
  }
  if (glsl || ocl) {
    static const char* const xyz[3] = {"X", "Y", "Z"};
    char nm[32];
    for (int a = 0; a < 3; ++a) {
      snprintf(nm, sizeof nm, "KILN_GLOBAL_%s", xyz[a]);
      def_int(&d, nm, global[a], glsl);
      snprintf(nm, sizeof nm, "KILN_LOCAL_%s", xyz[a]);
      def_int(&d, nm, lsz[a], glsl);
    }
  }
  /* the header and the typed tensors */
  if (glsl) {
    kiln_cf_out_printf(o, "layout(local_size_x = %lld, local_size_y = %lld, local_size_z = %lld) in;\n",
                       (long long)lsz[0], (long long)lsz[1], (long long)lsz[2]);
    for (int32_t s = 0; s < 2; ++s)
      for (int32_t i = 0; i < (s ? op->n_outputs : op->n_inputs); ++i) {
        const int32_t a = s ? ci->out_arg[i] : ci->in_arg[i];
        if (a < 0) continue;
        const int32_t sh = s ? -1 : shared_slot(ci, i);
        if (sh >= 0) {
          kiln_cf_out_printf(o, "#define in%d in%d\n", (int)i, (int)sh);
          continue;
        }
        kiln_cf_out_printf(o, "layout(std430, set = 0, binding = %d) %sbuffer kiln_b_%s%d { %s %s%d[]; };\n", (int)a,
                           s ? "" : "readonly ", s ? "out" : "in", (int)i, dl->types[f->params[a]->dtype],
                           s ? "out" : "in", (int)i);
      }
    kiln_cf_out_puts(o, "void main() {\n");
  } else {
    if (ocl) kiln_cf_out_printf(o, "__kernel void %s(", name);
    else kiln_cf_out_printf(o, "void %s(void* const* args) {\n", name);
    bool first = true;
    for (int32_t s = 0; s < 2; ++s)
      for (int32_t i = 0; i < (s ? op->n_outputs : op->n_inputs); ++i) {
        const int32_t a = s ? ci->out_arg[i] : ci->in_arg[i];
        if (a < 0) continue;
        const char* ty = dl->types[f->params[a]->dtype];
        const char* cq = s ? "" : "const ";
        const char* io = s ? "out" : "in";
        if (ocl && !s && shared_slot(ci, i) >= 0) continue; /* aliased after the signature */
        if (ocl)
          kiln_cf_out_printf(o, "%s__global %s%s* restrict %s%d", first ? "" : ", ", cq, ty, io, (int)i);
        else
          kiln_cf_out_printf(o, "  %s%s* restrict %s%d = (%s%s*)args[%d];\n", cq, ty, io, (int)i, cq, ty, (int)a);
        first = false;
      }
    if (ocl) kiln_cf_out_puts(o, ") {\n");
    for (int32_t i = 0; i < op->n_inputs && ocl; ++i) {
      const int32_t sh = shared_slot(ci, i);
      if (sh >= 0)
        kiln_cf_out_printf(o, "  __global const %s* in%d = in%d;\n", dl->types[f->params[ci->in_arg[i]]->dtype],
                           (int)i, (int)sh);
    }
  }
  kiln_cf_out_printf(o, "#line 1 \"%s:%s/%s:%s\"\n", kiln_custom_op_plugin(op), op->domain, op->name,
                     kernel_key(target));
  kiln_cf_out_puts(o, kern->source);
  kiln_cf_out_puts(o, "\n}\n");
  if (!glsl) kiln_cf_out_puts(o, d.undef.data ? d.undef.data : "");
  const bool oom = d.undef.oom;
  kiln_cf_out_free(&d.undef);
  if (oom || o->oom) return kiln_make_status(KILN_OUT_OF_MEMORY, "plugin kernel '%s'", name);
  return NULL;
}
