/* Issue 19, defect 7: names from the model file reach every text buffer of
 * the emitters (kernel names, buffer names, GLSL / OpenCL C / C headers,
 * error messages). A model whose node and tensor names are 10,000 characters
 * long -- two of them equal but for their last character, and two identical
 * kernels so the Vulkan emitter deduplicates one and prints both names in its
 * header -- must compile for every built target at -O0 and -O1 without a
 * buffer overflow (this suite runs under ASan in tools/test.sh), and on the
 * CPU it must give the reference interpreter's answer. */
#include "bad_model_util.h" /* first: it sets _GNU_SOURCE */

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "ir/passes.h"
#include "kiln/runtime.h"
#include "lowering/fuse.h"
#include "lowering/plan.h"
#include "lowering/template.h"
#include "runtime/device.h"
#include "runtime/module_impl.h"
#include "targets/program_build.h"

#define LONG 10000

static char g_dir[512];

/* A name of LONG characters: |stem| repeated, then |tail|. */
static char* long_name(bm_model_t* b, const char* stem, const char* tail) {
  char* s = bm_alloc(b, LONG + 1);
  size_t sl = strlen(stem), tl = strlen(tail);
  for (size_t i = 0; i < LONG - tl; ++i) s[i] = stem[i % sl];
  memcpy(s + LONG - tl, tail, tl + 1);
  return s;
}

/* x1, x2 [2,16] -> Relu, 8 times on each (identical kernels) -> Sum -> Sigmoid
 * -> y. Node names share their first 9,999 characters; so do tensor names.
 * Kernel names keep about 60 characters of the node's, so each Vulkan
 * duplicate's header ("// ---- kernel NAME = FIRST ----") outgrows the 64
 * bytes it was once given: dozens of duplicates against a few others overran the GLSL
 * buffer. */
#define BRANCHES 8
static void write_model(const char* path) {
  bm_model_t b;
  bm_init(&b, 17);
  const int64_t dims[2] = {2, 16};
  char* x1 = long_name(&b, "input.x/", "1");
  char* x2 = long_name(&b, "input.x/", "2");
  char* sum = long_name(&b, "sum_", "s");
  char* y = long_name(&b, "output.y/", "y");
  bm_input(&b, x1, BM_F32, 2, dims);
  bm_input(&b, x2, BM_F32, 2, dims);
  size_t cap = 2 * (LONG + 1);
  char* io = bm_alloc(&b, cap);
  const char* acc = NULL;
  for (int i = 0; i < 2 * BRANCHES; ++i) {
    char tail[16];
    snprintf(tail, sizeof tail, "%c%d", 'a' + i % 26, i);
    char* r = long_name(&b, "relu-out:", tail);
    snprintf(io, cap, "%s", i < BRANCHES ? x1 : x2);
    bm_node(&b, "Relu", long_name(&b, "/model/block.0/Relu", tail), io, r);
    if (acc) { /* a chain of Adds: identical kernels too */
      char* a = i == 2 * BRANCHES - 1 ? sum : long_name(&b, "acc:", tail);
      snprintf(io, cap, "%s,%s", acc, r);
      bm_node(&b, "Add", long_name(&b, "/model/Add", tail), io, a);
      acc = a;
    } else {
      acc = r;
    }
  }
  snprintf(io, cap, "%s", sum);
  bm_node(&b, "Sigmoid", long_name(&b, "/model/Sigmoid", "d"), io, y);
  bm_output(&b, y);
  CHECK(bm_write(&b, path));
  bm_free(&b);
}

static void fill(kiln_array_t* a, float scale) {
  float* p = a->data;
  for (int64_t i = 0; i < kiln_shape_count(&a->shape); ++i) p[i] = scale * (float)((i * 7) % 11 - 5);
}

/* Compiles the model for |target| at |opt|; on the CPU also runs it and
 * compares with the reference interpreter. */
static void compile_for(const char* path, const char* target, int opt) {
  const kiln_target_t* t = kiln_target_find(target);
  if (!t) {
    printf("  %s: not built in, skipped\n", target);
    return;
  }
  kiln_allocator_t al = kiln_allocator_system();
  kiln_graph_t* g = NULL;
  kiln_plan_t* plan = NULL;
  kiln_program_t* prog = NULL;
  kiln_module_t* mod = NULL;
  kiln_device_t* dev = NULL;
  kiln_session_t* ses = NULL;
  kiln_array_t in[2] = {0}, out[1] = {0}, ref[1] = {0};
  if (!CHECK_OK(kiln_onnx_load_model(path, NULL, al, &g))) goto done;
  CHECK(strlen(g->tensors[g->inputs[0]].name) == LONG);
  if (opt && !CHECK_OK(kiln_graph_optimize(g, opt, NULL))) goto done;
  kiln_plan_options_t po = {t->lowering, 0, 0, 0, 0, 0};
  if (!CHECK_OK(kiln_plan_build(g, &po, al, &plan))) goto done;
  kiln_fusion_report_t fr;
  if (opt && !CHECK_OK(kiln_plan_fuse(plan, &fr, NULL))) goto done;
  kiln_template_set_t templates;
  kiln_program_templates(t, &templates);
  if (!CHECK_OK(kiln_template_choose(plan, &templates))) goto done;
  if (!CHECK_OK(kiln_program_build(plan, t, NULL, al, &prog))) goto done;
  CHECK(prog->code.text != NULL || prog->code.n_blobs > 0);
  /* The Vulkan dump names a deduplicated kernel after the first one. */
  if (opt == 0 && strcmp(target, "vulkan") == 0 && prog->code.text)
    CHECK(strstr(prog->code.text, " = k_") != NULL);
  printf("  %s -O%d: %d kernels, %zu bytes of text\n", target, opt, (int)prog->n_kernels,
         prog->code.text ? strlen(prog->code.text) : (size_t)0);
  if (strcmp(target, "cpu") != 0) goto done;
  if (!CHECK_OK(kiln_module_wrap(prog, &mod))) goto done;
  prog = NULL; /* the module owns it */
  kiln_device_open_options_t oo = {0, true, stderr};
  if (!CHECK_OK(kiln_device_open("cpu", &oo, al, &dev))) goto done;
  kiln_session_options_t so;
  kiln_session_options_default(&so);
  if (!CHECK_OK(kiln_session_create(mod, dev, &so, &ses))) goto done;
  kiln_shape_t shape = {.rank = 2, .dims = {2, 16}};
  for (int i = 0; i < 2; ++i) {
    if (!CHECK_OK(kiln_array_alloc(al, KILN_DTYPE_F32, &shape, &in[i]))) goto done;
    fill(&in[i], i ? 0.25f : -0.5f);
  }
  kiln_graph_t* gr = NULL;
  if (!CHECK_OK(kiln_onnx_load_model(path, NULL, al, &gr))) goto done;
  kiln_status_t rs = kiln_ref_run(gr, in, NULL, ref);
  kiln_graph_destroy(gr);
  if (!CHECK_OK(rs) || !CHECK_OK(kiln_session_run(ses, in, out))) goto done;
  const float* a = out[0].data;
  const float* e = ref[0].data;
  int bad = 0;
  for (int64_t i = 0; i < 32; ++i) bad += !(a[i] - e[i] < 1e-5f && e[i] - a[i] < 1e-5f);
  CHECK(bad == 0);
done:
  for (int i = 0; i < 2; ++i) kiln_array_free(al, &in[i]);
  kiln_array_free(al, &out[0]);
  kiln_array_free(al, &ref[0]);
  kiln_session_destroy(ses);
  kiln_device_release(dev);
  kiln_module_release(mod);
  kiln_program_destroy(prog);
  kiln_plan_destroy(plan);
  kiln_graph_destroy(g);
}

int main(void) {
  if (!bm_tmpdir("long-names", g_dir, sizeof g_dir)) return 1;
  char path[600];
  snprintf(path, sizeof path, "%s/long.onnx", g_dir);
  write_model(path);
  const char* targets[] = {"cpu", "opencl", "vulkan"};
  for (int t = 0; t < 3; ++t)
    for (int opt = 0; opt <= 1; ++opt) compile_for(path, targets[t], opt);
  bm_rmtree(g_dir);
  return kiln_test_finish();
}
