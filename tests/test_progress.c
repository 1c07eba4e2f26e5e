/* The build progress line (runtime/progress.h): its text, and how often it
 * prints where the output is not a terminal (a file: a line per tenth of
 * the work, the last step always) or goes nowhere (NULL). The terminal
 * form is checked through `kiln run` under a pseudo-terminal
 * (tests/cli_tests.cmake, cli_run_progress_tty). */
#include <stdlib.h>
#include <string.h>

#include "runtime/progress.h"
#include "testing.h"

static void test_format(void) {
  char buf[256];
  kiln_progress_format(buf, sizeof buf, "llvmpipe", "pipelines built", 3, 12, 6.0);
  CHECK_MSG(!strcmp(buf, "building for llvmpipe: pipelines built, 3/12 steps, 6.0 s, ETA 18.0 s"), "got '%s'", buf);
  kiln_progress_format(buf, sizeof buf, "cpu (cc, 2 jobs)", "linked", 5, 5, 2.25);
  CHECK_MSG(!strcmp(buf, "building for cpu (cc, 2 jobs): linked, 5/5 steps, 2.2 s, ETA 0.0 s"), "got '%s'", buf);
  kiln_progress_format(buf, sizeof buf, "pocl", "building the program", 0, 9, 0.0);
  CHECK_MSG(!strcmp(buf, "building for pocl: building the program, 0/9 steps, 0.0 s, ETA -"), "got '%s'", buf);
  /* a short buffer is cut, never overrun */
  char small[16];
  memset(small, 'x', sizeof small);
  int n = kiln_progress_format(small, 12, "dev", "phase", 1, 2, 1.0);
  CHECK(n > 11);
  CHECK(strlen(small) == 11 && small[12] == 'x');
}

static int count_lines(const char* s, const char* needle) {
  int n = 0;
  for (const char* p = s; (p = strstr(p, needle)); p += strlen(needle)) ++n;
  return n;
}

static void test_file_lines(void) {
  FILE* f = tmpfile();
  CHECK(f != NULL);
  if (!f) return;
  kiln_progress_t p;
  kiln_progress_start(&p, f, "dev", 100, "building");
  CHECK(!p.tty);
  for (int i = 0; i < 100; ++i) kiln_progress_step(&p, "built");
  kiln_progress_end(&p); /* finished: adds nothing */
  long len = ftell(f);
  rewind(f);
  char* text = calloc((size_t)len + 1, 1);
  CHECK(text && fread(text, 1, (size_t)len, f) == (size_t)len);
  fclose(f);
  if (!text) return;
  /* the start (no ETA yet), then one line per tenth (10, 20, ..., 100
   * steps), no carriage returns */
  CHECK_MSG(count_lines(text, "\n") == 11, "%s", text);
  CHECK(strstr(text, "building for dev: building, 0/100 steps, ") == text && strstr(text, "ETA -\n"));
  CHECK(count_lines(text, "building for dev: built, ") == 10);
  CHECK(!strchr(text, '\r'));
  CHECK(strstr(text, "10/100 steps") && strstr(text, "100/100 steps") && strstr(text, "ETA 0.0 s\n"));
  CHECK(!strstr(text, " 1/100 steps") && !strstr(text, " 9/100 steps") && !strstr(text, "11/100 steps"));
  free(text);
}

static void test_quiet(void) {
  kiln_progress_t p;
  kiln_progress_start(&p, NULL, "dev", 3, "building");
  kiln_progress_step(&p, "built");
  kiln_progress_end(&p);
  CHECK(p.done == 0); /* NULL: nothing counted, nothing printed */
}

int main(void) {
  RUN(test_format);
  RUN(test_file_lines);
  RUN(test_quiet);
  return kiln_test_finish();
}
