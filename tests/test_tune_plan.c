/* kiln tune's plan of its closing whole-model build (compiler/tune_search.c,
 * issue 24): what a kept point adds to it. Where the kernels alone share
 * their code with the whole-model builds (Vulkan's pipelines, OpenCL's
 * program units: kiln_tune_code_shared) the closing build takes a kept
 * point's code from its build alone, so it costs nothing while the
 * device's memo still holds it; elsewhere the driver compiles it again. */
#include "compiler/tune_micro.h"
#include "testing.h"

/* A shared point is free below the memo's size, its build alone's driver
 * part once the tune's builds made enough units to start the memo afresh
 * or where their count is not known. */
static void test_kept_shared(void) {
  CHECK_NEAR(kiln_tune_kept_cost_s(true, 0, 0.4, 6.9, 1.0, 0.5), 0.0, 0);
  CHECK_NEAR(kiln_tune_kept_cost_s(true, 140, 0.4, 6.9, 1.0, 0.5), 0.0, 0);
  CHECK_NEAR(kiln_tune_kept_cost_s(true, KILN_TUNE_MEMO_UNITS - 1, -1, 6.9, 1.0, 0.5), 0.0, 0);
  CHECK_NEAR(kiln_tune_kept_cost_s(true, KILN_TUNE_MEMO_UNITS, 0.4, 6.9, 1.0, 0.5), 6.9, 1e-12);
  CHECK_NEAR(kiln_tune_kept_cost_s(true, -1, 0.4, 6.9, 1.0, 0.5), 6.9, 1e-12);
}

/* Not shared: with the default build's code reused the kernel is compiled
 * afresh (the dearer of its point's driver part and its set-up); without,
 * its point's driver part beyond its set-up's; never below 0. */
static void test_kept_not_shared(void) {
  CHECK_NEAR(kiln_tune_kept_cost_s(false, 10, 0.4, 6.9, 1.0, 0.5), 6.9, 1e-12);
  CHECK_NEAR(kiln_tune_kept_cost_s(false, 10, 0.4, 0.3, 1.0, 0.5), 1.0, 1e-12);
  CHECK_NEAR(kiln_tune_kept_cost_s(false, 10, -1, 6.9, 1.0, 0.5), 6.4, 1e-12);
  CHECK_NEAR(kiln_tune_kept_cost_s(false, 10, -1, 0.3, 1.0, 0.5), 0.0, 0);
}

int main(void) {
  RUN(test_kept_shared);
  RUN(test_kept_not_shared);
  return kiln_test_finish();
}
