/* Implementation of the test harness in testing.h. */
#include "testing.h"

#include <stdarg.h>
#include <stdlib.h>

int kiln_test_failures = 0;
int kiln_test_checks = 0;
const char* kiln_test_current = "";

void kiln_test_fail(const char* file, int line, const char* fmt, ...) {
  ++kiln_test_failures;
  fprintf(stderr, "%s:%d: in %s: ", file, line, kiln_test_current);
  va_list ap;
  va_start(ap, fmt);
  vfprintf(stderr, fmt, ap);
  va_end(ap);
  fputc('\n', stderr);
}

int kiln_test_finish(void) {
  printf("%d checks, %d failed\n", kiln_test_checks, kiln_test_failures);
  return kiln_test_failures ? 1 : 0;
}

int kiln_test_check_ok(kiln_status_t s, const char* expr, const char* file,
                       int line) {
  ++kiln_test_checks;
  if (!s) return 1;
  kiln_test_fail(file, line, "%s failed: %s", expr, kiln_status_message(s));
  kiln_status_free(s);
  return 0;
}

int kiln_test_check_err(kiln_status_t s, int code, const char* needle,
                        const char* expr, const char* file, int line) {
  ++kiln_test_checks;
  if (!s) {
    kiln_test_fail(file, line, "%s succeeded, expected an error containing '%s'",
                   expr, needle ? needle : "");
    return 0;
  }
  int ok = 1;
  if (code >= 0 && (int)kiln_status_code(s) != code) {
    kiln_test_fail(file, line, "%s: code %s, expected %s (message: %s)", expr,
                   kiln_status_code_name(kiln_status_code(s)),
                   kiln_status_code_name((kiln_status_code_t)code),
                   kiln_status_message(s));
    ok = 0;
  }
  if (needle && !strstr(kiln_status_message(s), needle)) {
    kiln_test_fail(file, line, "%s: message '%s' lacks '%s'", expr,
                   kiln_status_message(s), needle);
    ok = 0;
  }
  kiln_status_free(s);
  return ok;
}

char* kiln_test_read_text(const char* path) {
  FILE* f = fopen(path, "rb");
  if (!f) return NULL;
  fseek(f, 0, SEEK_END);
  long n = ftell(f);
  fseek(f, 0, SEEK_SET);
  char* s = n >= 0 ? malloc((size_t)n + 1) : NULL;
  if (s && fread(s, 1, (size_t)n, f) != (size_t)n) {
    free(s);
    s = NULL;
  }
  if (s) s[n] = 0;
  fclose(f);
  return s;
}

int kiln_test_count(const char* s, const char* needle) {
  int n = 0;
  for (const char* p = strstr(s, needle); p; p = strstr(p + 1, needle)) ++n;
  return n;
}

void kiln_test_setenv(const char* name, const char* value) {
  if (value)
    setenv(name, value, 1);
  else
    unsetenv(name);
}
