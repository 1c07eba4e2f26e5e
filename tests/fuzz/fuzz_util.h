/* Shared by the libFuzzer harnesses (tests/fuzz/fuzz_*.c): a private scratch
 * folder (on /dev/shm when it exists, so the per-input file writes stay in
 * memory) and a helper that replaces one file in it with the input's bytes.
 * The loaders under test take paths, so each input goes through a real
 * regular file, as a user's would. */
#ifndef KILN_TESTS_FUZZ_UTIL_H_
#define KILN_TESTS_FUZZ_UTIL_H_

#include <dirent.h>
#include <fcntl.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

static char fz_dir_name[64];

/* At exit: the scratch folder's files (flat) and the folder. */
static void fz_cleanup(void) {
  DIR* d = opendir(fz_dir_name);
  if (!d) return;
  struct dirent* e;
  char p[512];
  while ((e = readdir(d)) != NULL)
    if (strcmp(e->d_name, ".") && strcmp(e->d_name, "..")) {
      snprintf(p, sizeof p, "%s/%s", fz_dir_name, e->d_name);
      unlink(p);
    }
  closedir(d);
  rmdir(fz_dir_name);
}

/* The scratch folder, made on first use (mkdtemp) and removed at exit;
 * aborts when it cannot be made (the harness cannot run at all then). */
static const char* fz_dir(void) {
  if (fz_dir_name[0]) return fz_dir_name;
  snprintf(fz_dir_name, sizeof fz_dir_name, "%s/kiln-fuzz-XXXXXX",
           access("/dev/shm", W_OK) == 0 ? "/dev/shm" : "/tmp");
  if (!mkdtemp(fz_dir_name)) {
    perror("kiln fuzz: mkdtemp");
    abort();
  }
  atexit(fz_cleanup);
  return fz_dir_name;
}

/* fz_dir()/name, in a static buffer per call site's |buf|. */
static const char* fz_path(char* buf, size_t n, const char* name) {
  snprintf(buf, n, "%s/%s", fz_dir(), name);
  return buf;
}

/* Replaces |path| with |size| bytes of |data|. */
static void fz_write(const char* path, const uint8_t* data, size_t size) {
  int fd = open(path, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0600);
  if (fd < 0) {
    perror("kiln fuzz: open");
    abort();
  }
  size_t done = 0;
  while (done < size) {
    ssize_t w = write(fd, data + done, size - done);
    if (w <= 0) {
      perror("kiln fuzz: write");
      abort();
    }
    done += (size_t)w;
  }
  close(fd);
}

#endif
