/* kiln_run_module: runs a .kiln module file with the runtime alone
 * (libkiln_rt; CMake kiln::runtime, pkg-config kiln-runtime): what an
 * application that ships compiled models links.
 *
 *   kiln_run_module MODULE.kiln
 */
#include <stdio.h>
#include <stdlib.h>

#include "run.h"

int main(int argc, char** argv) {
  if (argc != 2) {
    fprintf(stderr, "usage: kiln_run_module MODULE.kiln\n");
    return 2;
  }
  FILE* f = fopen(argv[1], "rb");
  if (!f) {
    perror(argv[1]);
    return 1;
  }
  /* read the whole file: kiln_module_load_file would do, this shows the
   * bytes-in-memory path an application with its own storage takes */
  size_t cap = 1 << 16, n = 0;
  unsigned char* buf = malloc(cap);
  for (size_t got; buf && (got = fread(buf + n, 1, cap - n, f)) > 0;) {
    n += got;
    if (n == cap) {
      unsigned char* more = realloc(buf, cap *= 2);
      if (!more) free(buf);
      buf = more;
    }
  }
  fclose(f);
  if (!buf) {
    fprintf(stderr, "kiln_run_module: out of memory\n");
    return 1;
  }
  kiln_status_t st = example_run(buf, n, argv[1]);
  free(buf);
  if (st) {
    fprintf(stderr, "kiln_run_module: %s\n", kiln_status_message(st));
    kiln_status_free(st);
    return 1;
  }
  return 0;
}
