/* Helpers of the custom-op plugin tests (test_bad_plugins.c,
 * test_plugin_cpu_fn.c, test_plugin_patterns.c): the plugins' paths from
 * the environment (tests/plugin_tests.cmake sets them) and an error check
 * on every needle of a message. */
#ifndef KILN_TESTS_PLUGIN_TEST_UTIL_H_
#define KILN_TESTS_PLUGIN_TEST_UTIL_H_

#include <stdlib.h>
#include <string.h>

#include "testing.h"

/* The path in environment variable |var|; a failed check when unset. */
static inline const char* plugin(const char* var) {
  const char* p = getenv(var);
  CHECK_MSG(p && p[0], "%s is not set (run through ctest)", var);
  return p ? p : "";
}

/* |s| is an error whose message holds every needle; frees it. */
static inline void check_error(kiln_status_t s, const char* const* needles, int n) {
  CHECK_MSG(s != NULL, "expected an error containing '%s'", needles[0]);
  if (!s) return;
  const char* m = kiln_status_message(s);
  for (int i = 0; i < n; ++i) CHECK_MSG(strstr(m, needles[i]) != NULL, "'%s' not in: %s", needles[i], m);
  kiln_status_free(s);
}
#define CHECK_ERROR(expr, ...)                                        \
  do {                                                                \
    const char* const needles_[] = {__VA_ARGS__};                     \
    check_error((expr), needles_, sizeof needles_ / sizeof *needles_); \
  } while (0)

#endif /* KILN_TESTS_PLUGIN_TEST_UTIL_H_ */
