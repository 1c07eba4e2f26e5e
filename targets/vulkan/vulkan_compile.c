/* GLSL -> SPIR-V: libshaderc compiles each shader, SPIRV-Tools validates
 * the blob (the one check between kiln's printer and a driver that may
 * crash on bad SPIR-V). */
#include "targets/vulkan/vulkan_internal.h"

#include <spirv-tools/libspirv.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* The validator's message, with the GLSL-free context SPIRV-Tools gives. */
static kiln_status_t validate(const char* name, const uint32_t* words, size_t n_words) {
  spv_context ctx = spvContextCreate(SPV_ENV_VULKAN_1_1);
  if (!ctx) return kiln_make_status(KILN_OUT_OF_MEMORY, "kernel '%s': SPIRV-Tools context", name);
  spv_const_binary_t bin = {words, n_words};
  spv_diagnostic diag = NULL;
  spv_validator_options vo = spvValidatorOptionsCreate();
  spv_result_t r = vo ? spvValidateWithOptions(ctx, vo, &bin, &diag) : spvValidate(ctx, &bin, &diag);
  kiln_status_t s = NULL;
  if (r != SPV_SUCCESS)
    s = kiln_make_status(KILN_INVALID_ARGUMENT, "kernel '%s': spirv-val rejected the shader: %s",
                         name, diag && diag->error ? diag->error : "(no message)");
  spvDiagnosticDestroy(diag);
  if (vo) spvValidatorOptionsDestroy(vo);
  spvContextDestroy(ctx);
  return s;
}

kiln_status_t kiln_vulkan_cc_init(kiln_vulkan_cc_t* c) {
  const char* opt = getenv("KILN_SPIRV_OPT");
  if (opt && *opt && strcmp(opt, "zero") && strcmp(opt, "performance") && strcmp(opt, "size"))
    return kiln_make_status(KILN_INVALID_ARGUMENT, "KILN_SPIRV_OPT=%s: expected zero, performance or size", opt);
  c->compiler = shaderc_compiler_initialize();
  c->opts = shaderc_compile_options_initialize();
  if (!c->compiler || !c->opts) {
    if (c->opts) shaderc_compile_options_release(c->opts);
    if (c->compiler) shaderc_compiler_release(c->compiler);
    return kiln_make_status(KILN_OUT_OF_MEMORY, "shaderc: cannot create a compiler");
  }
  shaderc_compile_options_set_source_language(c->opts, shaderc_source_language_glsl);
  shaderc_compile_options_set_target_env(c->opts, shaderc_target_env_vulkan, shaderc_env_version_vulkan_1_1);
  shaderc_compile_options_set_target_spirv(c->opts, shaderc_spirv_version_1_3);
  /* No spirv-opt passes unless $KILN_SPIRV_OPT asks (zero | performance | size):
   * the driver optimises the shader itself. On lavapipe spirv-opt's
   * performance passes took 97% of a cold ResNet-18 compile (11.6 of 11.9
   * s) and gave no faster shaders (ResNet-18, MobileNetV2 and the encoder
   * the same, SqueezeNet 1.45x slower), as in ncnn and the TFLite GPU
   * delegate, which hand glslang's output to the driver as it is. */
  shaderc_compile_options_set_optimization_level(
      c->opts, opt && strcmp(opt, "performance") == 0 ? shaderc_optimization_level_performance
               : opt && strcmp(opt, "size") == 0      ? shaderc_optimization_level_size
                                                      : shaderc_optimization_level_zero);
  return NULL;
}

void kiln_vulkan_cc_free(kiln_vulkan_cc_t* c) {
  shaderc_compile_options_release(c->opts);
  shaderc_compiler_release(c->compiler);
}

/* "\n  line N: <text>" for the first "<name>:N:" the log points at. */
static void quote_line(const char* name, const char* log, const char* glsl, char* out, size_t cap) {
  out[0] = 0;
  if (!log || !glsl) return;
  size_t nl = strlen(name);
  const char* p = strstr(log, name);
  if (!p || p[nl] != ':') return;
  long ln = strtol(p + nl + 1, NULL, 10);
  if (ln <= 0) return;
  const char* q = glsl;
  for (long i = 1; i < ln && q; ++i) {
    q = strchr(q, '\n');
    if (q) ++q;
  }
  if (!q) return;
  const char* e = strchr(q, '\n');
  int len = e ? (int)(e - q) : (int)strlen(q);
  snprintf(out, cap, "\n  line %ld: %.*s", ln, len > 150 ? 150 : len, q);
}

kiln_status_t kiln_vulkan_cc_compile(kiln_vulkan_cc_t* c, const char* name, const char* glsl, kiln_allocator_t al,
                                uint8_t** out, uint64_t* out_len) {
  shaderc_compilation_result_t res = shaderc_compile_into_spv(
      c->compiler, glsl, strlen(glsl), shaderc_compute_shader, name, "main", c->opts);
  if (!res) return kiln_make_status(KILN_OUT_OF_MEMORY, "kernel '%s': shaderc returned no result", name);
  kiln_status_t s = NULL;
  if (shaderc_result_get_compilation_status(res) != shaderc_compilation_status_success) {
    const char* log = shaderc_result_get_error_message(res);
    char line[200];
    quote_line(name, log, glsl, line, sizeof line);
    s = kiln_make_status(KILN_INVALID_ARGUMENT, "kernel '%s': shaderc failed to compile the GLSL:\n%s%s",
                         name, log ? log : "", line);
  } else {
    size_t n = shaderc_result_get_length(res);
    const char* bytes = shaderc_result_get_bytes(res);
    if (n == 0 || n % 4 != 0) {
      s = kiln_make_status(KILN_INTERNAL, "kernel '%s': shaderc produced %zu bytes", name, n);
    } else {
      s = validate(name, (const uint32_t*)(const void*)bytes, n / 4);
      void* m = NULL;
      if (!s) s = kiln_allocator_malloc(al, n, "SPIR-V blob", &m);
      if (!s) {
        memcpy(m, bytes, n);
        *out = m;
        *out_len = n;
      }
    }
  }
  shaderc_result_release(res);
  return s;
}

kiln_status_t kiln_spirv_compile_glsl(const char* name, const char* glsl, kiln_allocator_t al,
                                      uint8_t** out_spirv, uint64_t* out_len) {
  if (!name) name = "?";
  if (!glsl) return kiln_make_status(KILN_INVALID_ARGUMENT, "kernel '%s': no GLSL", name);
  kiln_vulkan_cc_t c;
  KILN_RETURN_IF_ERROR(kiln_vulkan_cc_init(&c));
  kiln_status_t s = kiln_vulkan_cc_compile(&c, name, glsl, al, out_spirv, out_len);
  kiln_vulkan_cc_free(&c);
  return s;
}
