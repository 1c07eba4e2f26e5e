/* Compile-and-run plumbing for the kiln command line (see runner.h). */
#include "tools/runner.h"

#include <string.h>
#include <time.h>

#include "lowering/fuse.h"
#include "lowering/plan.h"
#include "runtime/module_impl.h"
#include "targets/program_build.h"
#ifdef KILN_HAVE_OPENCL
#include "runtime/opencl/opencl_device.h"
#endif
#ifdef KILN_HAVE_VULKAN
#include "runtime/vulkan/vulkan_device.h"
#endif

static double now_s(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

bool kiln_cli_parse_target(const char* name, kiln_program_target_t* out) {
  for (int t = 0; t < KILN_PROGRAM_TARGET_COUNT_; ++t)
    if (!strcmp(name, kiln_program_target_name((kiln_program_target_t)t))) {
      *out = (kiln_program_target_t)t;
      return true;
    }
  return false;
}

kiln_status_t kiln_cli_compile(kiln_graph_t* g, const kiln_cli_compile_t* c, kiln_program_t** out) {
  kiln_target_class_t cls = c->target == KILN_PROGRAM_TARGET_CPU ? KILN_TARGET_CLASS_CPU : KILN_TARGET_CLASS_GPU;
  kiln_plan_options_t po = {cls, c->threads};
  kiln_plan_t* plan = NULL;
  kiln_fusion_report_t fusion;
  memset(&fusion, 0, sizeof fusion);
  double t0 = now_s();
  kiln_status_t s = kiln_plan_build(g, &po, kiln_allocator_system(), &plan);
  if (!s && c->opt >= 1) s = kiln_plan_fuse(plan, &fusion, NULL);
  double t1 = now_s();
  char opts[64];
  snprintf(opts, sizeof opts, "-O%d", c->opt);
  kiln_program_build_options_t bo = {c->model_name, "fp32", opts};
  if (!s) s = kiln_program_build(plan, c->target, &bo, kiln_allocator_system(), out);
  double t2 = now_s();
  if (!s && c->opt >= 1)
    printf("fused %d kernels into %d (%d epilogues, %d producers inlined), %.1f MB less "
           "intermediate traffic\n",
           fusion.kernels_before, fusion.kernels_after, fusion.epilogues_fused, fusion.producers_inlined,
           (double)fusion.bytes_saved / 1e6);
  if (!s)
    printf("compiled %d kernels for %s: lowering %.1f ms, codegen %.1f ms, %.1f KB of code, %.1f MB of weights\n",
           plan->n_kernels, kiln_program_target_name(c->target), (t1 - t0) * 1e3, (t2 - t1) * 1e3,
           (double)(*out)->code.text_len / 1e3, (double)(*out)->weights_len / 1e6);
  if (!s && c->dump_dir) {
    char path[4096];
    snprintf(path, sizeof path, "%s/plan.txt", c->dump_dir);
    FILE* f = fopen(path, "w");
    if (f) {
      kiln_plan_dump(plan, f, true);
      fclose(f);
      printf("wrote %s\n", path);
    }
  }
  kiln_plan_destroy(plan);
  return s;
}

static void human(double v, char* buf, size_t n) {
  if (v >= 1e9) snprintf(buf, n, "%.2f GB", v / 1e9);
  else if (v >= 1e6) snprintf(buf, n, "%.2f MB", v / 1e6);
  else if (v >= 1e3) snprintf(buf, n, "%.1f KB", v / 1e3);
  else snprintf(buf, n, "%.0f B", v);
}

kiln_status_t kiln_cli_open_device(const char* name, bool strict, int threads, kiln_device_t** out) {
  kiln_device_open_options_t oo = {threads, strict, stderr};
  return kiln_device_open(name, &oo, kiln_allocator_system(), out);
}

kiln_status_t kiln_cli_session(kiln_module_t* m, kiln_device_t* dev, const kiln_session_options_t* so,
                               kiln_session_t** out_session) {
  double t0 = now_s();
  kiln_session_t* s = NULL;
  KILN_RETURN_IF_ERROR(kiln_session_create(m, dev, so, &s));
  kiln_session_memory_t mem;
  kiln_session_memory(s, &mem);
  char a[32], lb[32], nv[32], w[32];
  human((double)mem.arena_bytes, a, sizeof a);
  human((double)mem.lower_bound_bytes, lb, sizeof lb);
  human((double)mem.naive_bytes, nv, sizeof nv);
  human((double)mem.weights_bytes, w, sizeof w);
  printf("session on %s (%s): built in %.1f ms; arena %s x %d slots (lower bound %s, naive %s), weights %s, "
         "%d dispatches, %d barriers\n",
         kiln_device_name(dev), kiln_device_api(dev), (now_s() - t0) * 1e3, a, (int)mem.slots, lb, nv, w,
         (int)mem.dispatches, (int)mem.barriers);
  *out_session = s;
  return NULL;
}

int kiln_cmd_devices(int argc, char** argv) {
  if (argc > 0 && (!strcmp(argv[0], "--help") || !strcmp(argv[0], "-h"))) {
    printf("usage: kiln devices\n\nLists the devices kiln can run on: the CPU, OpenCL devices and Vulkan\n"
           "devices with their features (use them as --target cpu|opencl[:N]|vulkan[:N]).\n");
    return 0;
  }
  if (argc > 0) {
    fprintf(stderr, "kiln devices: unexpected argument '%s'\n", argv[0]);
    return 2;
  }
  kiln_device_t* d = NULL;
  kiln_status_t s = kiln_device_open("cpu", NULL, kiln_allocator_system(), &d);
  if (s) {
    fprintf(stderr, "kiln: error: %s\n", kiln_status_message(s));
    kiln_status_free(s);
    return 1;
  }
  printf("cpu:\n  [0] %s\n", kiln_device_name(d));
  kiln_device_release(d);
#ifdef KILN_HAVE_OPENCL
  printf("opencl:\n");
  s = kiln_opencl_list_devices(stdout);
  if (s) {
    printf("  none: %s\n", kiln_status_message(s));
    kiln_status_free(s);
  }
#else
  printf("opencl: not built in\n");
#endif
#ifdef KILN_HAVE_VULKAN
  printf("vulkan:\n");
  s = kiln_vulkan_list_devices(stdout);
  if (s) {
    printf("  none: %s\n", kiln_status_message(s));
    kiln_status_free(s);
  }
#else
  printf("vulkan: not built in\n");
#endif
  return 0;
}
