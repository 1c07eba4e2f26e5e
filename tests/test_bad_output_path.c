/* Output paths that name something other than a regular file. kiln writes
 * modules, tuning caches and ONNX models through a temporary file renamed
 * over the destination, so that a crash never leaves half a file. Renamed
 * over a FIFO or a device node, that would replace the node itself: as root,
 * `kiln compile ... -o /dev/null` used to turn /dev/null into a regular
 * file for every process on the machine. Such paths are written in place.
 * A FIFO stands in for /dev/null here: a reader thread drains it, and the
 * path must still be a FIFO afterwards, holding exactly what was written. */
#include <fcntl.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "compiler/tune_cache.h"
#include "frontend/onnx_file.h"
#include "runtime/module_file.h"
#include "testing.h"

typedef struct {
  const char* path;
  char* data;
  size_t len;
} drain_t;

static void* drain(void* arg) {
  drain_t* d = arg;
  FILE* f = fopen(d->path, "rb");
  if (!f) return NULL;
  size_t cap = 1 << 16;
  d->data = malloc(cap);
  size_t k;
  while (d->data && (k = fread(d->data + d->len, 1, cap - d->len, f)) > 0) {
    d->len += k;
    if (d->len == cap) {
      char* bigger = realloc(d->data, cap * 2);
      if (!bigger) break;
      d->data = bigger;
      cap *= 2;
    }
  }
  fclose(f);
  return NULL;
}

static char fifo[512], fifo_link[520];

/* True when |path| is still the FIFO. When it is not (the bug), the reader
 * may still wait in open() on the FIFO's inode: opening the FIFO for writing
 * through a second link and closing it gives the reader its end of file, so
 * the test fails instead of hanging. */
static bool still_fifo(const char* path) {
  struct stat sb;
  bool ok = lstat(path, &sb) == 0 && S_ISFIFO(sb.st_mode);
  if (!ok) {
    int fd = open(fifo_link, O_WRONLY | O_NONBLOCK);
    if (fd >= 0) close(fd);
  }
  return ok;
}

static void test_module_bytes_into_fifo(void) {
  uint8_t bytes[3000];
  for (size_t i = 0; i < sizeof bytes; ++i) bytes[i] = (uint8_t)(i * 7 + 1);
  drain_t d = {fifo, NULL, 0};
  pthread_t th;
  CHECK(pthread_create(&th, NULL, drain, &d) == 0);
  kiln_status_t st = kiln_module_write_bytes(bytes, sizeof bytes, fifo);
  bool fifo_kept = still_fifo(fifo);
  pthread_join(th, NULL);
  CHECK_OK(st);
  CHECK(fifo_kept);
  CHECK(d.len == sizeof bytes && d.data && memcmp(d.data, bytes, sizeof bytes) == 0);
  free(d.data);
  char tmp[600];
  snprintf(tmp, sizeof tmp, "%s.tmp", fifo);
  CHECK(access(tmp, F_OK) != 0); /* no temporary left beside it */
}

static void test_tune_cache_into_fifo(void) {
  kiln_tune_cache_t c;
  memset(&c, 0, sizeof c);
  drain_t d = {fifo, NULL, 0};
  pthread_t th;
  CHECK(pthread_create(&th, NULL, drain, &d) == 0);
  kiln_status_t st = kiln_tune_cache_write(&c, fifo);
  bool fifo_kept = still_fifo(fifo);
  pthread_join(th, NULL);
  CHECK_OK(st);
  CHECK(fifo_kept);
  CHECK(d.len > 0 && d.data && strncmp(d.data, "# kiln tuning cache", 19) == 0);
  free(d.data);
}

/* The ONNX writer of kiln quantize and kiln prune. */
static void test_onnx_into_fifo(void) {
  const uint8_t bytes[] = "not really a model, only bytes";
  drain_t d = {fifo, NULL, 0};
  pthread_t th;
  CHECK(pthread_create(&th, NULL, drain, &d) == 0);
  kiln_status_t st = kiln_onnx_write_file(fifo, bytes, sizeof bytes);
  bool fifo_kept = still_fifo(fifo);
  pthread_join(th, NULL);
  CHECK_OK(st);
  CHECK(fifo_kept);
  CHECK(d.len == sizeof bytes && d.data && memcmp(d.data, bytes, sizeof bytes) == 0);
  free(d.data);
}

int main(void) {
  char dir[] = "/tmp/kiln_outpath_XXXXXX";
  CHECK(mkdtemp(dir) != NULL);
  snprintf(fifo, sizeof fifo, "%s/out.fifo", dir);
  snprintf(fifo_link, sizeof fifo_link, "%s/out.link", dir);
  CHECK(mkfifo(fifo, 0600) == 0);
  CHECK(link(fifo, fifo_link) == 0);
  RUN(test_module_bytes_into_fifo);
  RUN(test_tune_cache_into_fifo);
  RUN(test_onnx_into_fifo);
  unlink(fifo);
  unlink(fifo_link);
  rmdir(dir);
  return kiln_test_finish();
}
