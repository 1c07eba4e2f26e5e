/* CPU schedule knobs (compiler/tune_cpu.h): the space of a GEMM holds its
 * heuristic point and only ascending values, the constraints take the
 * default and refuse tiles past the registers, out-of-range knobs and
 * splits with nothing to split; fingerprints see the problem and the
 * machine, never the knobs; a plan built with the hook records the GEMMs
 * of examples/tinycnn.onnx and applies a point; a cache at compile time
 * tunes the GEMM it has a record for, refuses a hostile record with a
 * warning and marks the program's kernels. (End to end with `kiln tune -t
 * cpu` and outputs checked: the cpu_tune_cli test.) */
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "compiler/tune.h"
#include "compiler/tune_cpu.h"
#include "compiler/tune_micro.h"
#include "frontend/onnx.h"
#include "ir/passes.h"
#include "lowering/fuse.h"
#include "runtime/device.h"
#include "targets/program_build.h"
#include "targets/registry.h"
#include "testing.h"
#include "tune_graph_util.h"

static kiln_gemm_problem_t conv_problem(void) {
  return (kiln_gemm_problem_t){"Conv", 1, 64, 3136, 4608, 9, true, false, false, true, false, 16, 8, 16, 2, 0, 0, {0}, 0};
}

static const char* check(const kiln_gemm_problem_t* p, int32_t mr, int32_t nr, int32_t kc, int32_t split) {
  const kiln_template_tiles_t x = {4, {mr, nr, kc, split}};
  return kiln_tune_cpu_check(p, &x);
}

static kiln_template_tiles_t pt(int32_t mr, int32_t nr, int32_t kc, int32_t split) {
  return (kiln_template_tiles_t){4, {mr, nr, kc, split}};
}

static void test_space_and_checks(void) {
  const kiln_gemm_problem_t p = conv_problem();
  const kiln_gemm_knobs_t d = {6, 16, 320, KILN_GEMM_PAR_AUTO, 0, 0, 0, 0};
  kiln_template_space_t sp;
  kiln_tune_cpu_space(&p, &d, &sp);
  CHECK(!strcmp(sp.version, KILN_TUNE_CPU_SPACE) && sp.n_knobs == 4);
  kiln_template_tiles_t dt;
  kiln_tune_cpu_tiles_of(&d, &dt);
  int32_t idx[KILN_TEMPLATE_TILES_MAX];
  CHECK(kiln_template_space_index(&sp, &dt, idx)); /* the default is in the space */
  for (int32_t i = 0; i < sp.n_knobs; ++i) {
    CHECK(sp.knobs[i].n >= 2); /* something to search in every knob here */
    for (int32_t j = 1; j < sp.knobs[i].n; ++j) CHECK(sp.knobs[i].v[j - 1] < sp.knobs[i].v[j]);
  }
  CHECK(kiln_tune_cpu_check(&p, &dt) == NULL);
  kiln_gemm_knobs_t back;
  kiln_tune_cpu_knobs_of(&dt, &back);
  CHECK(back.mr == 6 && back.nr == 16 && back.kc == 320 && back.par == KILN_GEMM_PAR_AUTO);
  /* refused: registers, ranges, splits */
  CHECK(check(&p, 14, 16, 64, 1) != NULL); /* 28 + 3 accumulators > 16 registers */
  CHECK(check(&p, 0, 16, 64, 1) != NULL);
  CHECK(check(&p, 65, 8, 64, 1) != NULL);  /* mr > M */
  CHECK(check(&p, 4, 32, 64, 1) != NULL);  /* past the conv grid's tile */
  CHECK(check(&p, 4, 8, 513, 1) != NULL);  /* kc > K / taps */
  CHECK(check(&p, 4, 8, 64, 9) != NULL);   /* no such split */
  CHECK(check(&p, 4, 8, 64, 1 + KILN_GEMM_PAR_BATCH) != NULL); /* one batch */
  CHECK(check(&p, 4, 8, 64, 1 + KILN_GEMM_PAR_M) == NULL);
  const kiln_template_tiles_t three = {3, {4, 8, 64}};
  CHECK(kiln_tune_cpu_check(&p, &three) != NULL);
  kiln_gemm_problem_t one = p;
  one.threads = 1;
  CHECK(check(&one, 4, 8, 64, 1 + KILN_GEMM_PAR_NONE) != NULL);
  kiln_gemm_problem_t whole = p;
  whole.k_blocks = false; /* kc is the whole K then */
  CHECK(check(&whole, 4, 8, 32, 1) != NULL);
  CHECK(check(&whole, 4, 8, 512, 1) == NULL);
  /* fingerprints: the problem and the machine, not the knobs */
  const uint64_t f = kiln_tune_cpu_fingerprint(&p);
  const kiln_gemm_problem_t same = conv_problem();
  CHECK(f == kiln_tune_cpu_fingerprint(&same));
  kiln_gemm_problem_t q = p;
  q.M = 128;
  CHECK(kiln_tune_cpu_fingerprint(&q) != f);
  q = p;
  q.op = "MatMul";
  CHECK(kiln_tune_cpu_fingerprint(&q) != f);
  q = p;
  q.threads = 4;
  CHECK(kiln_tune_cpu_fingerprint(&q) != f);
  q = p;
  q.lanes = 16, q.regs = 32;
  CHECK(kiln_tune_cpu_fingerprint(&q) != f);
}

/* The knobs the hook hands back, per call. */
typedef struct {
  kiln_tune_cpu_table_t* table;
  kiln_gemm_knobs_t last[8];
  int n;
} spy_t;

static void spy_hook(void* user, int32_t node, const kiln_gemm_problem_t* p, kiln_gemm_knobs_t* k) {
  spy_t* s = user;
  kiln_tune_cpu_hook(s->table, node, p, k);
  if (s->n < 8) s->last[s->n++] = *k;
}

static void test_hook_on_a_model(void) {
  kiln_graph_t* g = tinycnn();
  if (!g) return;
  kiln_plan_options_t po = {KILN_TARGET_CLASS_CPU, 2, 0, 0, 0, 0};
  kiln_tune_cpu_table_t table = {0};
  spy_t spy = {&table, {{0}}, 0};
  kiln_plan_t* p = NULL;
  if (CHECK_OK(kiln_plan_build_hooked(g, &po, spy_hook, &spy, kiln_allocator_system(), &p))) {
    CHECK(table.n >= 1 && !table.oom);
    for (int32_t i = 0; i < table.n; ++i) {
      kiln_template_tiles_t d;
      kiln_tune_cpu_tiles_of(&table.e[i].dflt, &d);
      CHECK(kiln_tune_cpu_check(&table.e[i].problem, &d) == NULL);
      CHECK(table.e[i].n_nodes >= 1);
    }
  }
  kiln_plan_destroy(p);
  p = NULL;
  /* a point on the first GEMM: the plan is lowered with it */
  if (table.n >= 1) {
    table.e[0].has_point = true;
    table.e[0].point = pt(1, (int32_t)table.e[0].dflt.nr, (int32_t)table.e[0].dflt.kc, 1 + KILN_GEMM_PAR_NONE);
    CHECK(kiln_tune_cpu_check(&table.e[0].problem, &table.e[0].point) == NULL);
    spy.n = 0;
    if (CHECK_OK(kiln_plan_build_hooked(g, &po, spy_hook, &spy, kiln_allocator_system(), &p))) {
      bool seen = false;
      for (int i = 0; i < spy.n; ++i) seen |= spy.last[i].mr == 1 && spy.last[i].par == KILN_GEMM_PAR_NONE;
      CHECK(seen);
    }
    kiln_plan_destroy(p);
  }
  kiln_tune_cpu_table_free(&table);
  kiln_graph_destroy(g);
}

/* The cache at compile time: a record for the first GEMM on this CPU is
 * used, a hostile one for the second refused, the kernels marked. */
static void test_cache_at_compile_time(void) {
  kiln_graph_t* g = tinycnn();
  if (!g) return;
  kiln_plan_options_t po = {KILN_TARGET_CLASS_CPU, 2, 0, 0, 0, 0};
  kiln_tune_cpu_table_t found = {0};
  kiln_plan_t* p = NULL;
  kiln_device_t* dev = NULL;
  kiln_device_open_options_t oo = {2, true, NULL};
  if (!CHECK_OK(kiln_plan_build_hooked(g, &po, kiln_tune_cpu_hook, &found, kiln_allocator_system(), &p)) ||
      !CHECK_OK(kiln_device_open("cpu", &oo, kiln_allocator_system(), &dev))) {
    kiln_plan_destroy(p);
    kiln_graph_destroy(g);
    return;
  }
  kiln_plan_destroy(p);
  p = NULL;
  kiln_tune_device_t where;
  kiln_tune_device_of(dev, &where);
  char path[] = "/tmp/kiln_cpu_tune_XXXXXX";
  const int fd = mkstemp(path);
  CHECK(fd >= 0);
  FILE* f = fd >= 0 ? fdopen(fd, "w") : NULL;
  for (int32_t i = 0; f && i < found.n && i < 2; ++i) {
    const kiln_tune_cpu_gemm_t* e = &found.e[i];
    /* the first: one-row tiles on one thread; the second: 99 rows (refused) */
    fprintf(f, "%016llx\tcpu\t%s\t%s\t%s\t%s\t%d,%d,%d,%d\t100\t50\n", (unsigned long long)e->fingerprint,
            KILN_TUNE_CPU_SPACE, where.device, where.driver, KILN_VERSION, i == 0 ? 1 : 99, (int)e->dflt.nr,
            (int)e->dflt.kc, i == 0 ? 1 + KILN_GEMM_PAR_NONE : 1);
  }
  if (f) fclose(f);
  char* buf = NULL;
  size_t len = 0;
  FILE* notes = open_memstream(&buf, &len);
  kiln_tune_cpu_table_t table = {0};
  kiln_tune_use_report_t rep;
  if (CHECK_OK(kiln_tune_cpu_plan_build(g, &po, path, dev, notes, false, &table, &rep, &p))) {
    CHECK(rep.tuned == 1 && rep.refused == (found.n >= 2 ? 1 : 0));
    fflush(notes);
    CHECK(strstr(buf, "tuning: 1 of ") != NULL);
    CHECK(found.n < 2 || strstr(buf, "is refused: mr outside 1..M") != NULL);
    CHECK(table.n >= 1 && table.e[0].has_point);
    kiln_fusion_report_t fr;
    kiln_program_t* prog = NULL;
    kiln_program_build_options_t bo = {.model_name = "cpu_tune", .no_code = true};
    if (CHECK_OK(kiln_plan_fuse(p, &fr, NULL)) &&
        CHECK_OK(kiln_program_build(p, kiln_target_find("cpu"), &bo, kiln_allocator_system(), &prog)) &&
        CHECK_OK(kiln_tune_cpu_mark_program(g, &table, prog))) {
      int32_t marked = 0;
      for (int32_t k = 0; k < prog->n_kernels; ++k)
        if (prog->kernels[k].tuned) marked += strstr(prog->kernels[k].tuned, "cpu gemm 1,") != NULL;
      CHECK(marked >= 1);
    }
    kiln_program_destroy(prog);
  }
  if (notes) fclose(notes);
  free(buf);
  unlink(path);
  kiln_plan_destroy(p);
  kiln_tune_cpu_table_free(&table);
  kiln_tune_cpu_table_free(&found);
  kiln_device_release(dev);
  kiln_graph_destroy(g);
}

/* The NCHWc conv's space (cpu.conv_nchwc.1): a 3x3 conv of 64 channels
 * at 56x56 on 8-lane blocks; then tinycnn planned in NCHWc, as `kiln
 * tune` and a compile at -O1 plan it, reports its blocked convs to the
 * hook and lowers them with a point. */
static const char* check5(const kiln_gemm_problem_t* p, int32_t mr, int32_t nr, int32_t kc, int32_t split, int32_t kb) {
  const kiln_template_tiles_t x = {5, {mr, nr, kc, split, kb}};
  return kiln_tune_cpu_check(p, &x);
}

static void test_nchwc_space(void) {
  const kiln_gemm_problem_t p = {"Conv", 1, 3136, 64, 576, 9, true, false, false, true, true, 16, 8, 16, 2, 8, 8, {0}, 0};
  const kiln_gemm_knobs_t d = {6, 16, 64, KILN_GEMM_PAR_AUTO, 256, 0, 0, 0};
  kiln_template_space_t sp;
  kiln_tune_cpu_space(&p, &d, &sp);
  CHECK(!strcmp(sp.version, KILN_TUNE_CPU_SPACE_NCHWC) && sp.n_knobs == 5);
  CHECK(!strcmp(kiln_tune_cpu_space_name(&p), KILN_TUNE_CPU_SPACE_NCHWC));
  kiln_template_tiles_t dt;
  kiln_tune_cpu_tiles_of(&d, &dt);
  CHECK(dt.n == 5 && dt.v[4] == 256);
  int32_t idx[KILN_TEMPLATE_TILES_MAX];
  CHECK(kiln_template_space_index(&sp, &dt, idx));
  for (int32_t i = 0; i < sp.n_knobs; ++i) {
    CHECK(sp.knobs[i].n >= 2);
    for (int32_t j = 1; j < sp.knobs[i].n; ++j) CHECK(sp.knobs[i].v[j - 1] < sp.knobs[i].v[j]);
  }
  /* K blocks: 8, 16, 32 and all 64 channels */
  CHECK(sp.knobs[2].n == 4 && sp.knobs[2].v[0] == 8 && sp.knobs[2].v[3] == 64);
  CHECK(kiln_tune_cpu_check(&p, &dt) == NULL);
  kiln_gemm_knobs_t back;
  kiln_tune_cpu_knobs_of(&dt, &back);
  CHECK(back.mr == 6 && back.nr == 16 && back.kc == 64 && back.nblock_kb == 256);
  /* every point of the space the constraints take is one the kernel takes */
  CHECK(check5(&p, 14, 8, 16, 1 + KILN_GEMM_PAR_N, 64) == NULL);
  CHECK(check5(&p, 7, 16, 64, 1, 256) != NULL);  /* 14 + 3 registers > 16 */
  CHECK(check5(&p, 4, 24, 64, 1, 256) != NULL);  /* three blocks */
  CHECK(check5(&p, 4, 4, 64, 1, 256) != NULL);   /* half a block */
  CHECK(check5(&p, 4, 8, 24, 1, 256) != NULL);   /* does not divide 64 */
  CHECK(check5(&p, 4, 8, 4, 1, 256) != NULL);    /* less than the input's block */
  CHECK(check5(&p, 4, 8, 128, 1, 256) != NULL);  /* more than C */
  CHECK(check5(&p, 4, 8, 64, 1, 0) != NULL);     /* no N block */
  CHECK(check5(&p, 4, 8, 64, 1, 1 << 16) != NULL);
  CHECK(check5(&p, 4, 8, 64, 1 + KILN_GEMM_PAR_BATCH, 256) != NULL);
  CHECK(check(&p, 4, 8, 64, 1) != NULL); /* a GEMM point (4 knobs) is not one of these */
  kiln_gemm_problem_t odd = p;
  odd.N = 72; /* nine blocks: two per tile does not divide them */
  CHECK(check5(&odd, 4, 16, 64, 1, 256) != NULL && check5(&odd, 4, 8, 64, 1, 256) == NULL);
  kiln_gemm_problem_t plain = p;
  plain.in_block = 0; /* a plain input (the stem): all channels in one block */
  CHECK(check5(&plain, 4, 8, 8, 1, 256) != NULL && check5(&plain, 4, 8, 64, 1, 256) == NULL);
  kiln_gemm_problem_t gemm = p;
  gemm.block = gemm.in_block = 0;
  CHECK(kiln_tune_cpu_fingerprint(&gemm) != kiln_tune_cpu_fingerprint(&p));
  CHECK(!strcmp(kiln_tune_cpu_space_name(&gemm), KILN_TUNE_CPU_SPACE));

  kiln_graph_t* g = tinycnn();
  if (!g) return;
  kiln_plan_options_t po = {KILN_TARGET_CLASS_CPU, 2, 0, 0, kiln_cpu_simd().lanes, 0};
  kiln_tune_cpu_table_t table = {0};
  spy_t spy = {&table, {{0}}, 0};
  kiln_plan_t* pl = NULL;
  int32_t blocked = -1;
  if (CHECK_OK(kiln_plan_build_hooked(g, &po, spy_hook, &spy, kiln_allocator_system(), &pl))) {
    CHECK(pl->layout != NULL);
    for (int32_t i = 0; i < table.n; ++i) {
      kiln_template_tiles_t dd;
      kiln_tune_cpu_tiles_of(&table.e[i].dflt, &dd);
      CHECK(kiln_tune_cpu_check(&table.e[i].problem, &dd) == NULL);
      if (table.e[i].problem.block > 0 && blocked < 0) blocked = i;
    }
  }
  CHECK(blocked >= 0); /* tinycnn's convs run on NCHWc */
  kiln_plan_destroy(pl);
  pl = NULL;
  if (blocked >= 0) {
    kiln_tune_cpu_gemm_t* e = &table.e[blocked];
    CHECK(e->dflt.nblock_kb == 256);
    e->has_point = true;
    e->point = (kiln_template_tiles_t){5, {1, (int32_t)e->problem.block, (int32_t)e->dflt.kc, 1 + KILN_GEMM_PAR_NONE, 32}};
    CHECK(kiln_tune_cpu_check(&e->problem, &e->point) == NULL);
    spy.n = 0;
    if (CHECK_OK(kiln_plan_build_hooked(g, &po, spy_hook, &spy, kiln_allocator_system(), &pl))) {
      bool seen = false;
      for (int i = 0; i < spy.n; ++i)
        seen |= spy.last[i].mr == 1 && spy.last[i].par == KILN_GEMM_PAR_NONE && spy.last[i].nblock_kb == 32;
      CHECK(seen);
    }
    kiln_plan_destroy(pl);
  }
  kiln_tune_cpu_table_free(&table);
  kiln_graph_destroy(g);
}

/* The budget holds (issue 24): a tune of tinycnn on the CPU with a
 * budget of a few seconds, counted from before the model is read, ends
 * within it (+50% for a loaded machine: a 2x overrun fails) after trying
 * points (a tuner that stops at once fails), its breakdown accounts for
 * the time, and with one thread
 * the whole model is compared by process CPU time. */
static void test_budget_kept(void) {
  const double budget = 8;
  const double t0 = kiln_tune_clock_s();
  kiln_graph_t* g = tinycnn();
  if (!g) return;
  kiln_device_t* dev = NULL;
  kiln_device_open_options_t oo = {1, true, NULL};
  kiln_tune_cache_t cache = {0};
  if (!CHECK_OK(kiln_device_open("cpu", &oo, kiln_allocator_system(), &dev))) {
    kiln_graph_destroy(g);
    return;
  }
  kiln_tune_options_t o;
  kiln_tune_options_default(&o);
  o.budget_s = budget;
  o.repeats = 2;
  o.threads = 1;
  o.start_s = t0;
  o.log = stdout;
  kiln_tune_summary_t sum;
  if (CHECK_OK(kiln_tune_model(g, kiln_target_find("cpu"), dev, &o, &cache, &sum))) {
    const double took = kiln_tune_clock_s() - t0;
    printf("\nbudget %.0f s: took %.1f s (the tune's count %.1f s), %d points\n", budget, took, sum.elapsed_s,
           (int)sum.trials);
    CHECK_MSG(took <= 1.5 * budget, "a %.0f s budget took %.1f s", budget, took);
    CHECK_MSG(sum.elapsed_s >= 0.3 * budget && sum.trials >= 1, "a %.0f s budget: %d points in %.1f s", budget,
              (int)sum.trials, sum.elapsed_s);
    CHECK(sum.elapsed_s <= took + 1e-3);
    const double parts = sum.prepare_s + sum.default_build_s + sum.default_runs_s + sum.program_again_s + sum.setup_s + sum.points_s +
                         sum.closing_build_s + sum.closing_runs_s;
    CHECK_MSG(parts >= 0.8 * sum.elapsed_s && parts <= sum.elapsed_s + 1e-3, "breakdown %.2f s of %.2f s", parts,
              sum.elapsed_s);
    CHECK(sum.prepare_s > 0 && sum.default_build_s > 0 && sum.kernels_set_up >= 1);
    CHECK(sum.default_cpu_ms > 0 && sum.tuned_cpu_ms > 0);
    /* kept points: the tuned model not slower by CPU time */
    CHECK(sum.cpu_reverted || sum.improved == 0 || sum.tuned_cpu_ms <= sum.default_cpu_ms);
    CHECK(cache.n == sum.kernels);
  }
  kiln_tune_cache_free(&cache);
  kiln_device_release(dev);
  kiln_graph_destroy(g);
}

/* The closing measurement's rule: 3% faster by the medians and faster in
 * 3 of 4 pairs; either alone is not enough. */
static void test_paired_keep(void) {
  CHECK(kiln_tune_paired_keep(0.90, 1.0, 8, 10));
  CHECK(kiln_tune_paired_keep(0.96, 1.0, 10, 10));
  CHECK(kiln_tune_paired_keep(0.50, 1.0, 15, 20));
  CHECK(!kiln_tune_paired_keep(0.90, 1.0, 7, 10));  /* a median win in 7 of 10 pairs: noise */
  CHECK(!kiln_tune_paired_keep(0.90, 1.0, 14, 20));
  CHECK(!kiln_tune_paired_keep(0.98, 1.0, 10, 10)); /* steady but within the 3% margin */
  CHECK(!kiln_tune_paired_keep(1.10, 1.0, 10, 10));
  CHECK(!kiln_tune_paired_keep(0.90, 1.0, 0, 0));   /* never measured in pairs */
  CHECK(!kiln_tune_paired_keep(0.0 / 0.0, 1.0, 10, 10));
}

int main(void) {
  RUN(test_paired_keep);
  RUN(test_space_and_checks);
  RUN(test_hook_on_a_model);
  RUN(test_cache_at_compile_time);
  RUN(test_nchwc_space);
  RUN(test_budget_kept);
  return kiln_test_finish();
}
