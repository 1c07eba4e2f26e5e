/* The tuning budget against a point's build that cannot be stopped (issue
 * 24): a point's driver build runs on a worker the tuner stops waiting
 * for at its deadline (compiler/tune_micro.c), on a second device, so the
 * closing build goes on beside it; the abandoned build is joined later. */
#include <stdlib.h>
#include <string.h>

#include "compiler/tune.h"
#include "compiler/tune_micro.h"
#include "frontend/onnx.h"
#include "ir/passes.h"
#include "runtime/device.h"
#include "targets/registry.h"
#include "testing.h"
#include "tune_graph_util.h"

/* Tunes tinycnn on the CPU with the kernels on a second device
 * (options.device) within |budget| s, while the test hook makes point
 * |point|'s build sleep |sleep_s| s on its worker (point 0: the default
 * whole-model build). *took: the call's wall time; *running: the builds
 * still going when it returned. The device is released before the caller
 * joins the builds (an abandoned build holds its own reference). False
 * when the tune failed (checked). */
static bool slow_tune(double budget, double sleep_s, int32_t point, kiln_tune_cache_t* cache,
                      kiln_tune_summary_t* sum, double* took, int32_t* running) {
  const double t0 = kiln_tune_clock_s();
  kiln_graph_t* g = tinycnn();
  if (!g) return false;
  kiln_device_t* dev = NULL;
  kiln_device_open_options_t oo = {1, true, NULL};
  bool ok = CHECK_OK(kiln_device_open("cpu", &oo, kiln_allocator_system(), &dev));
  if (ok) {
    kiln_tune_options_t o;
    kiln_tune_options_default(&o);
    o.budget_s = budget;
    o.repeats = 2;
    o.threads = 1;
    o.start_s = t0;
    o.log = stdout;
    o.device = "cpu";
    o.test_sleep_s = sleep_s;
    o.test_sleep_point = point;
    ok = CHECK_OK(kiln_tune_model(g, kiln_target_find("cpu"), dev, &o, cache, sum));
    *took = kiln_tune_clock_s() - t0;
    *running = kiln_tune_abandoned_wait(0);
  }
  kiln_device_release(dev);
  kiln_graph_destroy(g);
  return ok;
}

/* A point's build that cannot be stopped does not hold the tune past its
 * budget (issue 24): the first point's build sleeps 9 s; the tune stops
 * waiting at its deadline, discards the point and returns while that build
 * still sleeps (the hook's sleep ends at least 9 s after the point began,
 * the tune within its budget's margin), and the build is joined afterwards
 * (no leak under ASan). Without the deadline the tune would take the
 * point's 9 s and more. */
static void test_budget_slow_build(void) {
  const double budget = 8, sleep_s = 9;
  kiln_tune_cache_t cache = {0};
  kiln_tune_summary_t sum;
  double took = 0;
  int32_t running = 0;
  if (slow_tune(budget, sleep_s, 1, &cache, &sum, &took, &running)) {
    printf("\nbudget %.0f s, a point's build sleeping %.0f s: took %.1f s (the tune's count %.1f s), %d points, %d "
           "stopped at the deadline, %d build(s) still running\n",
           budget, sleep_s, took, sum.elapsed_s, (int)sum.trials, (int)sum.abandoned, (int)running);
    CHECK_MSG(sum.trials >= 1 && sum.abandoned == 1, "%d points, %d stopped", (int)sum.trials, (int)sum.abandoned);
    CHECK_MSG(running == 1, "the sleeping build: %d running", (int)running);
    CHECK_MSG(took <= 1.5 * budget, "a %.0f s budget took %.1f s", budget, took);
    CHECK(cache.n == sum.kernels);
  }
  CHECK(kiln_tune_join_abandoned() <= 1);
  CHECK(kiln_tune_abandoned_wait(0) == 0);
  kiln_tune_cache_free(&cache);
}

/* The default whole-model build alike (the hook's point 0): a 2 s tune
 * whose default build sleeps 4 s returns at the budget's 5% margin with
 * nothing tuned and no record (there is no reference to tune against),
 * the build still running, joined afterwards. */
static void test_budget_slow_default_build(void) {
  const double budget = 2, sleep_s = 4;
  kiln_tune_cache_t cache = {0};
  kiln_tune_summary_t sum;
  double took = 0;
  int32_t running = 0;
  if (slow_tune(budget, sleep_s, 0, &cache, &sum, &took, &running)) {
    printf("\nbudget %.0f s, the default build sleeping %.0f s: took %.1f s, %d build(s) still running\n", budget,
           sleep_s, took, (int)running);
    CHECK(sum.default_abandoned && sum.trials == 0 && cache.n == 0);
    CHECK_MSG(running == 1, "the sleeping build: %d running", (int)running);
    CHECK_MSG(took < sleep_s, "a %.0f s budget took %.1f s", budget, took);
  }
  CHECK(kiln_tune_join_abandoned() <= 1);
  kiln_tune_cache_free(&cache);
}

int main(void) {
  RUN(test_budget_slow_build);
  RUN(test_budget_slow_default_build);
  return kiln_test_finish();
}
