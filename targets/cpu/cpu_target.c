/* The CPU target's registration (targets/registry.h): the plan printed as
 * one C unit, kept in the compile units the CPU loader splits on. */
#include <string.h>

#include "targets/cpu/cpu_internal.h"
#include "targets/registry.h"

/* parts[]: (offset, length) pairs -- [0] the prelude, one per unit, and
 * last the epilogue -- so the loader can compile units in parallel. */
static kiln_status_t cpu_emit(const kiln_plan_t* plan, kiln_program_t* prog) {
  kiln_cpu_source_t src;
  KILN_RETURN_IF_ERROR(kiln_cpu_codegen(plan, &src));
  kiln_program_code_t* c = &prog->code;
  kiln_status_t s = kiln_allocator_malloc(prog->allocator, src.text.len + 1, "cpu source", (void**)&c->text);
  if (!s) {
    memcpy(c->text, src.text.data ? src.text.data : "", src.text.len);
    c->text[src.text.len] = 0;
    c->text_len = src.text.len;
    c->n_parts = src.n_parts;
    s = kiln_allocator_malloc(prog->allocator, sizeof(uint64_t) * 2 * (size_t)c->n_parts, "cpu source parts",
                              (void**)&c->parts);
  }
  if (!s) memcpy(c->parts, src.parts, (size_t)c->n_parts * 2 * sizeof(uint64_t));
  kiln_cpu_source_free(&src);
  return s;
}

static kiln_status_t cpu_native_code(kiln_program_t* prog, const char* levels, kiln_native_build_stats_t* stats) {
  kiln_cpu_compile_stats_t st;
  memset(&st, 0, sizeof st);
  kiln_status_t s = kiln_cpu_aot_build_code(prog, levels, &st);
  if (stats) {
    stats->wall_s = st.compile_s;
    stats->compiler_cpu_s = st.compiler_cpu_s;
    stats->parts = st.parts;
    stats->parts_reused = st.parts_reused;
    stats->jobs = st.jobs;
    snprintf(stats->compiler, sizeof stats->compiler, "%s", st.compiler);
  }
  return s;
}

const kiln_target_t kiln_target_cpu = {
    .name = "cpu",
    .lowering = KILN_TARGET_CLASS_CPU,
    .source_ext = "c",
    .fp16_keeps_f32_workspaces = true,
    .emit = cpu_emit,
    .emit_native = kiln_cpu_aot_build,
    .dyn_batch = true,
    .dyn_seq = true,
    .native_from_code_ok = kiln_cpu_aot_from_code_ok,
    .emit_native_code = cpu_native_code,
};
