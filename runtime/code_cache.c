/* The code cache (see code_cache.h): folder resolution, framed entries,
 * atomic writes and a size bound. */
#define _GNU_SOURCE
#include "runtime/code_cache.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <stdarg.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "kiln/status.h"

/* Trailer: magic (8) | payload length u64 | FNV-1a-64 of the payload u64. */
#define TRAILER_BYTES 24
static const char MAGIC[8] = {'K', 'I', 'L', 'N', 'C', 'C', 'E', '1'};
#define FNV_OFFSET 0xcbf29ce484222325ull
#define FNV_PRIME 0x100000001b3ull

static uint64_t fnv(uint64_t h, const void* data, size_t n) {
  const unsigned char* p = data;
  for (size_t i = 0; i < n; ++i) h = (h ^ p[i]) * FNV_PRIME;
  return h;
}

static void warn(const kiln_code_cache_t* c, const char* fmt, ...) KILN_PRINTF(2, 3);

static void warn(const kiln_code_cache_t* c, const char* fmt, ...) {
  char msg[1400];
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(msg, sizeof msg, fmt, ap);
  va_end(ap);
  fprintf(stderr, "kiln: warning: %s cache: %s\n", c->kind, msg);
}

/* ---- the folder ------------------------------------------------------- */

static void root_dir(char* out, size_t n) {
  const char* e = getenv("KILN_CACHE_DIR");
  if (e && *e) {
    snprintf(out, n, "%s", e);
    return;
  }
  e = getenv("XDG_CACHE_HOME");
  if (e && *e) {
    snprintf(out, n, "%s/kiln", e);
    return;
  }
  e = getenv("HOME");
  if (e && *e) {
    snprintf(out, n, "%s/.cache/kiln", e);
    return;
  }
  snprintf(out, n, "/tmp/kiln-cache-%ld", (long)getuid());
}

void kiln_code_cache_root(char* out, size_t n) { root_dir(out, n); }

kiln_status_t kiln_code_cache_make_dirs(const char* path) {
  char buf[sizeof(((kiln_code_cache_t*)0)->dir)];
  size_t len = strlen(path);
  if (len == 0 || len >= sizeof buf)
    return kiln_make_status(KILN_INVALID_ARGUMENT, "bad folder name '%s'", path);
  memcpy(buf, path, len + 1);
  for (size_t i = 1; i <= len; ++i) {
    if (buf[i] != '/' && buf[i] != 0) continue;
    char ch = buf[i];
    buf[i] = 0;
    if (mkdir(buf, 0700) != 0 && errno != EEXIST)
      return kiln_make_status(KILN_IO_ERROR, "cannot create '%s': %s", buf, strerror(errno));
    buf[i] = ch;
  }
  struct stat st;
  if (stat(path, &st) != 0 || !S_ISDIR(st.st_mode))
    return kiln_make_status(KILN_IO_ERROR, "'%s' is not a folder", path);
  return NULL;
}

static atomic_uint temp_counter;

void kiln_code_cache_temp_path(const char* dir, const char* tag, const char* ext, char* out,
                               size_t n) {
  snprintf(out, n, "%s/tmp-%s-%ld-%u%s", dir, tag, (long)getpid(),
           atomic_fetch_add(&temp_counter, 1u), ext);
}

void kiln_code_cache_key_init(kiln_code_cache_key_t* k) {
  k->a = FNV_OFFSET;
  k->b = 0x84222325cbf29ce4ull;
}

void kiln_code_cache_key_feed(kiln_code_cache_key_t* k, const void* data, size_t n) {
  const unsigned char* p = data;
  uint64_t a = k->a, b = k->b;
  for (size_t i = 0; i < n; ++i) {
    a = (a ^ p[i]) * FNV_PRIME;
    b = (b ^ (unsigned char)(p[i] ^ 0xa5)) * FNV_PRIME;
  }
  k->a = a;
  k->b = b;
}

void kiln_code_cache_key_str(kiln_code_cache_key_t* k, const char* s) {
  kiln_code_cache_key_feed(k, s ? s : "", (s ? strlen(s) : 0) + 1);
}

void kiln_code_cache_key_hex(const kiln_code_cache_key_t* k, char out[33]) {
  snprintf(out, 33, "%016llx%016llx", (unsigned long long)k->a, (unsigned long long)k->b);
}

bool kiln_code_cache_open(kiln_code_cache_t* c, const char* kind, const char* option) {
  memset(c, 0, sizeof(*c));
  snprintf(c->kind, sizeof c->kind, "%s", kind);
  if (option && !*option) return false;
  char dir[sizeof c->dir];
  if (option) {
    snprintf(dir, sizeof dir, "%s", option);
  } else {
    char root[sizeof c->dir];
    root_dir(root, sizeof root);
    int w = snprintf(dir, sizeof dir, "%s/%s", root, kind);
    if (w < 0 || (size_t)w >= sizeof dir) {
      warn(c, "folder name under '%s' too long; cache off", root);
      return false;
    }
  }
  kiln_status_t s = kiln_code_cache_make_dirs(dir);
  if (s) {
    warn(c, "%s; cache off", kiln_status_message(s));
    kiln_status_free(s);
    return false;
  }
  struct stat st;
  if (stat(dir, &st) != 0) {
    warn(c, "'%s': %s; cache off", dir, strerror(errno));
    return false;
  }
  /* An entry is code that gets loaded: a folder another user owns or can
   * write (a pre-created /tmp fallback, a shared group folder) is not used. */
  if (st.st_uid != geteuid() || (st.st_mode & (S_IWGRP | S_IWOTH))) {
    warn(c, "'%s' belongs to another user or is writable by others; cache off", dir);
    return false;
  }
  /* Writable? (Permission bits do not tell for root or read-only mounts.) */
  memcpy(c->dir, dir, sizeof dir);
  char probe[sizeof c->dir + 64];
  kiln_code_cache_temp_path(c->dir, "probe", "", probe, sizeof probe);
  int fd = open(probe, O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0600);
  if (fd < 0) {
    warn(c, "cannot write in '%s': %s; cache off", dir, strerror(errno));
    c->dir[0] = 0;
    return false;
  }
  close(fd);
  unlink(probe);
  return true;
}

bool kiln_code_cache_path(const kiln_code_cache_t* c, const char* name, char* out, size_t n) {
  if (n) out[0] = 0;
  if (!c->dir[0]) return false;
  int w = snprintf(out, n, "%s/%s", c->dir, name);
  if (w < 0 || (size_t)w >= n) {
    if (n) out[0] = 0; /* a cut path would name another file */
    return false;
  }
  return true;
}

/* ---- reading ---------------------------------------------------------- */

/* Opens entry |name| and validates its size and trailer; on HIT *out_fd is
 * open at offset 0 and *out_len / *out_sum are the trailer's. */
static kiln_code_cache_result_t open_entry(const kiln_code_cache_t* c, const char* name,
                                           int* out_fd, uint64_t* out_len, uint64_t* out_sum) {
  char path[sizeof c->dir + 256];
  if (!kiln_code_cache_path(c, name, path, sizeof path)) return KILN_CODE_CACHE_MISS;
  /* O_NONBLOCK: opening a FIFO must not wait for a writer. */
  int fd = open(path, O_RDONLY | O_NONBLOCK | O_NOFOLLOW | O_CLOEXEC);
  if (fd < 0) {
    if (errno == ENOENT) return KILN_CODE_CACHE_MISS;
    warn(c, "ignoring entry '%s': %s", path,
         errno == ELOOP ? "a symbolic link" : strerror(errno));
    return KILN_CODE_CACHE_REJECTED;
  }
  const char* why = NULL;
  struct stat st;
  unsigned char t[TRAILER_BYTES];
  uint64_t len = 0, sum = 0;
  if (fstat(fd, &st) != 0 || !S_ISREG(st.st_mode)) why = "not a regular file";
  else if (st.st_size < TRAILER_BYTES) why = "truncated";
  else if (pread(fd, t, sizeof t, st.st_size - TRAILER_BYTES) != TRAILER_BYTES) why = "unreadable";
  else if (memcmp(t, MAGIC, sizeof MAGIC) != 0) why = "no kiln trailer (truncated or foreign)";
  if (!why) {
    memcpy(&len, t + 8, 8);
    memcpy(&sum, t + 16, 8);
    if (len != (uint64_t)st.st_size - TRAILER_BYTES) why = "length mismatch (truncated or padded)";
  }
  if (why) {
    warn(c, "ignoring entry '%s': %s", path, why);
    close(fd);
    return KILN_CODE_CACHE_REJECTED;
  }
  *out_fd = fd;
  *out_len = len;
  *out_sum = sum;
  return KILN_CODE_CACHE_HIT;
}

/* Reads the |len| payload bytes of |fd| into |keep| (or a scratch buffer
 * when NULL) and compares their hash with |sum|. */
static bool payload_ok(int fd, uint64_t len, uint64_t sum, uint8_t* keep) {
  uint8_t scratch[1 << 16];
  uint64_t h = FNV_OFFSET, off = 0;
  while (off < len) {
    size_t want = keep ? (size_t)(len - off) : (size_t)(len - off < sizeof scratch ? len - off : sizeof scratch);
    uint8_t* dst = keep ? keep + off : scratch;
    ssize_t r = pread(fd, dst, want, (off_t)off);
    if (r < 0 && errno == EINTR) continue;
    if (r <= 0) return false;
    h = fnv(h, dst, (size_t)r);
    off += (uint64_t)r;
  }
  return h == sum;
}

static kiln_code_cache_result_t read_entry(const kiln_code_cache_t* c, const char* name,
                                           uint8_t** out, size_t* out_len) {
  int fd = -1;
  uint64_t len = 0, sum = 0;
  kiln_code_cache_result_t r = open_entry(c, name, &fd, &len, &sum);
  if (r != KILN_CODE_CACHE_HIT) return r;
  uint8_t* data = NULL;
  const char* why = NULL;
  if (out && (len > SIZE_MAX - 1 || !(data = malloc(len ? (size_t)len : 1)))) why = "out of memory";
  else if (!payload_ok(fd, len, sum, data)) why = "checksum mismatch";
  close(fd);
  if (why) {
    warn(c, "ignoring entry '%s/%s': %s", c->dir, name, why);
    free(data);
    return KILN_CODE_CACHE_REJECTED;
  }
  if (out) {
    *out = data;
    *out_len = (size_t)len;
  }
  return KILN_CODE_CACHE_HIT;
}

kiln_code_cache_result_t kiln_code_cache_read(const kiln_code_cache_t* c, const char* name,
                                              uint8_t** out, size_t* out_len) {
  *out = NULL;
  *out_len = 0;
  return read_entry(c, name, out, out_len);
}

kiln_code_cache_result_t kiln_code_cache_check(const kiln_code_cache_t* c, const char* name) {
  return read_entry(c, name, NULL, NULL);
}

/* ---- writing ---------------------------------------------------------- */

static bool write_all(int fd, const void* data, size_t n) {
  const uint8_t* p = data;
  while (n) {
    ssize_t w = write(fd, p, n);
    if (w < 0 && errno == EINTR) continue;
    if (w <= 0) return false;
    p += w;
    n -= (size_t)w;
  }
  return true;
}

static bool write_trailer(int fd, uint64_t len, uint64_t sum) {
  unsigned char t[TRAILER_BYTES];
  memcpy(t, MAGIC, sizeof MAGIC);
  memcpy(t + 8, &len, 8);
  memcpy(t + 16, &sum, 8);
  return write_all(fd, t, sizeof t);
}

static bool install(const kiln_code_cache_t* c, const char* tmp, const char* name) {
  char path[sizeof c->dir + 256];
  if (!kiln_code_cache_path(c, name, path, sizeof path)) {
    warn(c, "entry name '%s' too long", name);
    return false;
  }
  if (rename(tmp, path) != 0) {
    warn(c, "cannot move '%s' to '%s': %s", tmp, path, strerror(errno));
    return false;
  }
  return true;
}

bool kiln_code_cache_write(const kiln_code_cache_t* c, const char* name, const void* data,
                           size_t len) {
  if (!c->dir[0]) return false;
  char tmp[sizeof c->dir + 64];
  kiln_code_cache_temp_path(c->dir, "entry", "", tmp, sizeof tmp);
  int fd = open(tmp, O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0600);
  if (fd < 0) {
    warn(c, "cannot write '%s': %s", tmp, strerror(errno));
    return false;
  }
  bool ok = write_all(fd, data, len) && write_trailer(fd, len, fnv(FNV_OFFSET, data, len));
  int e = errno;
  ok = close(fd) == 0 && ok;
  if (!ok) warn(c, "cannot write '%s': %s", tmp, strerror(e));
  if (!ok || !install(c, tmp, name)) {
    unlink(tmp);
    return false;
  }
  return true;
}

bool kiln_code_cache_commit(const kiln_code_cache_t* c, const char* tmp, const char* name) {
  if (!c->dir[0]) return false;
  int fd = open(tmp, O_RDWR | O_NOFOLLOW | O_CLOEXEC);
  struct stat st;
  bool ok = fd >= 0 && fstat(fd, &st) == 0 && S_ISREG(st.st_mode);
  uint64_t len = ok ? (uint64_t)st.st_size : 0, h = FNV_OFFSET, off = 0;
  uint8_t buf[1 << 16];
  while (ok && off < len) {
    ssize_t r = pread(fd, buf, sizeof buf, (off_t)off);
    if (r < 0 && errno == EINTR) continue;
    ok = r > 0;
    if (ok) {
      h = fnv(h, buf, (size_t)r);
      off += (uint64_t)r;
    }
  }
  ok = ok && lseek(fd, 0, SEEK_END) >= 0 && write_trailer(fd, len, h);
  int e = errno;
  if (fd >= 0) ok = close(fd) == 0 && ok;
  if (!ok) {
    warn(c, "cannot seal '%s': %s", tmp, strerror(e));
    return false;
  }
  return install(c, tmp, name);
}

/* ---- the bound -------------------------------------------------------- */

typedef struct centry_s {
  time_t mtime;
  long long size;
  char name[96];
} centry_t;

static int centry_cmp(const void* a, const void* b) {
  const centry_t* x = a;
  const centry_t* y = b;
  return x->mtime < y->mtime ? -1 : x->mtime > y->mtime;
}

void kiln_code_cache_trim(const kiln_code_cache_t* c, size_t max_entries, long long max_bytes) {
  if (!c->dir[0]) return;
  DIR* d = opendir(c->dir);
  if (!d) return;
  size_t n = 0, cap = 0;
  centry_t* v = NULL;
  long long total = 0;
  time_t now = time(NULL);
  char path[sizeof c->dir + 300];
  struct dirent* ent;
  while ((ent = readdir(d))) {
    const char* nm = ent->d_name;
    size_t l = strlen(nm);
    if (l >= sizeof v->name || nm[0] == '.') continue;
    snprintf(path, sizeof path, "%s/%s", c->dir, nm);
    struct stat st;
    if (lstat(path, &st) != 0 || !S_ISREG(st.st_mode)) continue;
    if (strncmp(nm, "tmp-", 4) == 0) {
      if (now - st.st_mtime > 3600) unlink(path);
      continue;
    }
    if (n == cap) {
      size_t nc = cap ? cap * 2 : 256;
      centry_t* q = realloc(v, nc * sizeof(*v));
      if (!q) break;
      v = q;
      cap = nc;
    }
    v[n].mtime = st.st_mtime;
    v[n].size = (long long)st.st_size;
    memcpy(v[n].name, nm, l + 1);
    total += v[n].size;
    ++n;
  }
  closedir(d);
  if (n > max_entries || total > max_bytes) {
    qsort(v, n, sizeof(*v), centry_cmp);
    for (size_t i = 0; i < n && (n - i > max_entries * 3 / 4 || total > max_bytes * 3 / 4); ++i) {
      snprintf(path, sizeof path, "%s/%s", c->dir, v[i].name);
      if (unlink(path) == 0) total -= v[i].size;
    }
  }
  free(v);
}
