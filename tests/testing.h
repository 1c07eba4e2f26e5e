/* Minimal test harness for kiln's C tests.
 *
 *   static void test_relu(void) { ... CHECK(x == 1); CHECK_OK(f()); }
 *   int main(void) { RUN(test_relu); return kiln_test_finish(); }
 *
 * CHECK_* record a failure (file:line + message) and continue; a test binary
 * exits non-zero when any check failed. Assertions are always compiled in.
 */
#ifndef KILN_TESTS_TESTING_H_
#define KILN_TESTS_TESTING_H_

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "kiln/status.h"

extern int kiln_test_failures;
extern int kiln_test_checks;
extern const char* kiln_test_current;

void kiln_test_fail(const char* file, int line, const char* fmt, ...);
int kiln_test_finish(void);
/* Consumes |s|: checks it is OK (prints its message otherwise). */
int kiln_test_check_ok(kiln_status_t s, const char* expr, const char* file,
                       int line);
/* Consumes |s|: checks it failed with |code| (or any code when code < 0)
 * and that its message contains |needle| (when non-NULL). */
int kiln_test_check_err(kiln_status_t s, int code, const char* needle,
                        const char* expr, const char* file, int line);
/* The whole file at |path|, NUL-terminated (free it); NULL when it cannot
 * be read. */
char* kiln_test_read_text(const char* path);
/* How many times |needle| occurs in |s| (overlapping occurrences too). */
int kiln_test_count(const char* s, const char* needle);
/* Sets environment variable |name| to |value|, or unsets it where |value|
 * is NULL (a switch a test turns on for one case and off again). */
void kiln_test_setenv(const char* name, const char* value);

#define CHECK(c)                                              \
  do {                                                        \
    ++kiln_test_checks;                                       \
    if (!(c)) kiln_test_fail(__FILE__, __LINE__, "CHECK(%s)", #c); \
  } while (0)
#define CHECK_MSG(c, ...)                                     \
  do {                                                        \
    ++kiln_test_checks;                                       \
    if (!(c)) kiln_test_fail(__FILE__, __LINE__, __VA_ARGS__); \
  } while (0)
#define CHECK_OK(expr) kiln_test_check_ok((expr), #expr, __FILE__, __LINE__)
#define CHECK_ERR(expr, code, needle) \
  kiln_test_check_err((expr), (code), (needle), #expr, __FILE__, __LINE__)
#define CHECK_NEAR(a, b, tol)                                             \
  do {                                                                    \
    double a_ = (double)(a), b_ = (double)(b);                            \
    ++kiln_test_checks;                                                   \
    if (!(fabs(a_ - b_) <= (tol)))                                        \
      kiln_test_fail(__FILE__, __LINE__, "%s = %g, expected %s = %g", #a, \
                     a_, #b, b_);                                         \
  } while (0)
#define RUN(fn)                                  \
  do {                                           \
    kiln_test_current = #fn;                     \
    int before_ = kiln_test_failures;            \
    fn();                                        \
    printf("%s %s\n", kiln_test_failures == before_ ? "ok  " : "FAIL", #fn); \
  } while (0)

#endif
