/* The tuning cache file (see tune_cache.h). Everything read is checked
 * field by field before it becomes a record: the file may come from
 * another machine, be truncated, hand-edited or hostile, and a bad line
 * costs a warning, never the compile. */
#define _GNU_SOURCE
#include "compiler/tune_cache.h"

#include <ctype.h>
#include <errno.h>
#include <fcntl.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "runtime/code_cache.h"

static bool key_eq(const kiln_tune_key_t* a, const kiln_tune_key_t* b) {
  return a->fingerprint == b->fingerprint && !strcmp(a->target, b->target) && !strcmp(a->space, b->space) &&
         !strcmp(a->device, b->device) && !strcmp(a->driver, b->driver) && !strcmp(a->kiln, b->kiln);
}

static int key_cmp(const kiln_tune_key_t* a, const kiln_tune_key_t* b) {
  if (a->fingerprint != b->fingerprint) return a->fingerprint < b->fingerprint ? -1 : 1;
  int c;
  if ((c = strcmp(a->target, b->target)) || (c = strcmp(a->space, b->space)) || (c = strcmp(a->device, b->device)) ||
      (c = strcmp(a->driver, b->driver)))
    return c;
  return strcmp(a->kiln, b->kiln);
}

/* A field of [1, cap) bytes whose every byte |ok| accepts, copied to dst. */
static bool field(const char* s, size_t n, size_t cap, bool (*ok)(int), char* dst) {
  if (n == 0 || n >= cap) return false;
  for (size_t i = 0; i < n; ++i)
    if (!ok((unsigned char)s[i])) return false;
  memcpy(dst, s, n);
  dst[n] = 0;
  return true;
}

static bool ok_name(int c) { return islower(c) || isdigit(c) || c == '_' || c == '.' || c == '-'; }
static bool ok_text(int c) { return c >= 0x20 && c < 0x7f; }
static bool ok_word(int c) { return c > 0x20 && c < 0x7f; }

/* A time in microseconds, at least the file's resolution (the writer's
 * 0.001: a smaller one would be written back as "0.000", which no reader
 * takes, so a merge would drop the record) and below 10^12. */
static bool parse_time(const char* s, size_t n, double* out) {
  char buf[64];
  if (n == 0 || n >= sizeof buf) return false;
  memcpy(buf, s, n);
  buf[n] = 0;
  char* end = NULL;
  errno = 0;
  double v = strtod(buf, &end);
  if (errno || end != buf + n || !isfinite(v) || v < KILN_TUNE_TIME_MIN_US || v > 1e12) return false;
  *out = v;
  return true;
}

static bool parse_tiles(const char* s, size_t n, kiln_template_tiles_t* out) {
  memset(out, 0, sizeof *out);
  size_t i = 0;
  while (i < n) {
    if (out->n >= KILN_TEMPLATE_TILES_MAX) return false;
    int64_t v = 0;
    size_t d = 0;
    for (; i < n && isdigit((unsigned char)s[i]); ++i, ++d) {
      v = v * 10 + (s[i] - '0');
      if (v > 65536) return false;
    }
    if (d == 0) return false; /* 0 is a value: Vulkan's direct-read mode, a Winograd switch off */
    out->v[out->n++] = (int32_t)v;
    if (i < n && s[i++] != ',') return false;
    if (i == n && s[n - 1] == ',') return false;
  }
  return out->n > 0;
}

const char* kiln_tune_record_parse(const char* line, kiln_tune_record_t* out) {
  const char* f[10];
  size_t len[10];
  int nf = 0;
  const char* p = line;
  for (;;) {
    const char* tab = strchr(p, '\t');
    if (nf == 10) return "more than 9 tab-separated fields";
    f[nf] = p;
    len[nf] = tab ? (size_t)(tab - p) : strlen(p);
    ++nf;
    if (!tab) break;
    p = tab + 1;
  }
  if (nf != 9) return "not 9 tab-separated fields (truncated?)";
  memset(out, 0, sizeof *out);
  if (len[0] != 16) return "fingerprint is not 16 hex digits";
  for (int i = 0; i < 16; ++i) {
    const int c = (unsigned char)f[0][i];
    if (!isxdigit(c)) return "fingerprint is not 16 hex digits";
    out->key.fingerprint = out->key.fingerprint * 16 + (uint64_t)(isdigit(c) ? c - '0' : tolower(c) - 'a' + 10);
  }
  if (!field(f[1], len[1], sizeof out->key.target, ok_name, out->key.target)) return "bad target name";
  if (!field(f[2], len[2], sizeof out->key.space, ok_name, out->key.space)) return "bad knob-space name";
  if (!field(f[3], len[3], sizeof out->key.device, ok_text, out->key.device)) return "bad device name";
  if (!field(f[4], len[4], sizeof out->key.driver, ok_text, out->key.driver)) return "bad driver version";
  if (!field(f[5], len[5], sizeof out->key.kiln, ok_word, out->key.kiln)) return "bad kiln version";
  if (!parse_tiles(f[6], len[6], &out->tiles)) return "bad tiles (1 to 8 integers in 0..65536, comma-separated)";
  if (!parse_time(f[7], len[7], &out->default_us) || !parse_time(f[8], len[8], &out->tuned_us))
    return "bad time (microseconds, 0.001 to 10^12)";
  return NULL;
}

void kiln_tune_tiles_format(const kiln_template_tiles_t* t, char* buf, size_t n) {
  size_t o = 0;
  buf[0] = 0;
  for (int32_t i = 0; i < t->n && o < n; ++i) {
    int w = snprintf(buf + o, n - o, "%s%d", i ? "," : "", (int)t->v[i]);
    if (w < 0) break;
    o += (size_t)w;
  }
}

const kiln_tune_record_t* kiln_tune_cache_find(const kiln_tune_cache_t* c, const kiln_tune_key_t* key) {
  for (int32_t i = 0; i < c->n; ++i)
    if (key_eq(&c->r[i].key, key)) return &c->r[i];
  return NULL;
}

const kiln_tune_record_t* kiln_tune_cache_find_near(const kiln_tune_cache_t* c, const kiln_tune_key_t* key) {
  const kiln_tune_record_t* best = NULL;
  for (int32_t i = 0; i < c->n; ++i) {
    const kiln_tune_key_t* k = &c->r[i].key;
    if (k->fingerprint == key->fingerprint && !strcmp(k->target, key->target) && !strcmp(k->space, key->space) &&
        (!best || c->r[i].tuned_us / c->r[i].default_us < best->tuned_us / best->default_us))
      best = &c->r[i];
  }
  return best;
}

kiln_status_t kiln_tune_cache_put(kiln_tune_cache_t* c, const kiln_tune_record_t* r, bool replace) {
  for (int32_t i = 0; i < c->n; ++i)
    if (key_eq(&c->r[i].key, &r->key)) {
      if (replace || r->tuned_us < c->r[i].tuned_us) c->r[i] = *r;
      return NULL;
    }
  if (c->n >= KILN_TUNE_MAX_RECORDS)
    return kiln_make_status(KILN_LIMIT_EXCEEDED, "tuning cache: more than %d records", KILN_TUNE_MAX_RECORDS);
  if (c->n == c->cap) {
    int32_t cap = c->cap ? c->cap * 2 : 64;
    kiln_tune_record_t* nr = realloc(c->r, sizeof *nr * (size_t)cap);
    if (!nr) return kiln_make_status(KILN_OUT_OF_MEMORY, "tuning cache: %d records", (int)cap);
    c->r = nr;
    c->cap = cap;
  }
  c->r[c->n++] = *r;
  return NULL;
}

void kiln_tune_cache_free(kiln_tune_cache_t* c) {
  if (!c) return;
  free(c->r);
  memset(c, 0, sizeof *c);
}

/* Opens |path| for reading only when it is a regular file (a FIFO would
 * block, a device never end, a symlink lead anywhere); NULL with errno or
 * *why set otherwise. */
static FILE* open_regular(const char* path, const char** why) {
  *why = NULL;
  int fd = open(path, O_RDONLY | O_NONBLOCK | O_NOFOLLOW | O_CLOEXEC);
  if (fd < 0) {
    *why = errno == ELOOP ? "a symbolic link" : strerror(errno);
    return NULL;
  }
  struct stat st;
  if (fstat(fd, &st) != 0 || !S_ISREG(st.st_mode)) {
    close(fd);
    *why = "not a regular file";
    return NULL;
  }
  FILE* f = fdopen(fd, "r");
  if (!f) {
    *why = strerror(errno);
    close(fd);
  }
  return f;
}

kiln_status_t kiln_tune_cache_read(kiln_tune_cache_t* c, const char* path, FILE* warn) {
  const char* why = NULL;
  FILE* f = open_regular(path, &why);
  if (!f) {
    if (warn) fprintf(warn, "warning: tuning cache %s: %s; using the default tiles\n", path, why);
    return NULL;
  }
  char* line = malloc(KILN_TUNE_LINE_MAX + 1);
  if (!line) {
    fclose(f);
    return kiln_make_status(KILN_OUT_OF_MEMORY, "tuning cache %s", path);
  }
  kiln_status_t s = NULL;
  int64_t lineno = 0;
  int ch = 0;
  while (!s && ch != EOF) {
    size_t n = 0;
    bool long_line = false, nul = false;
    while ((ch = getc(f)) != EOF && ch != '\n') {
      if (ch == 0) nul = true;
      if (n < KILN_TUNE_LINE_MAX) line[n++] = (char)ch;
      else long_line = true;
    }
    if (ch == EOF && n == 0) break;
    ++lineno;
    line[n] = 0;
    if (n && line[n - 1] == '\r') line[--n] = 0;
    if (n == 0 || line[0] == '#') continue;
    kiln_tune_record_t r;
    const char* bad = long_line ? "line longer than 4096 bytes"
                      : nul     ? "a NUL byte in the line"
                                : kiln_tune_record_parse(line, &r);
    if (!bad && ch == EOF) bad = "last line has no newline (truncated?)";
    if (bad) {
      c->skipped++;
      if (warn) fprintf(warn, "warning: %s:%lld: %s; ignored\n", path, (long long)lineno, bad);
      continue;
    }
    s = kiln_tune_cache_put(c, &r, false);
  }
  if (!s && ferror(f) && warn) fprintf(warn, "warning: %s: read error; the rest ignored\n", path);
  free(line);
  fclose(f);
  return s;
}

static int rec_cmp(const void* a, const void* b) {
  return key_cmp(&((const kiln_tune_record_t*)a)->key, &((const kiln_tune_record_t*)b)->key);
}

kiln_status_t kiln_tune_cache_write(const kiln_tune_cache_t* c, const char* path) {
  kiln_tune_record_t* sorted = malloc(sizeof *sorted * (size_t)(c->n + 1));
  if (!sorted) return kiln_make_status(KILN_OUT_OF_MEMORY, "tuning cache %s", path);
  if (c->n) memcpy(sorted, c->r, sizeof *sorted * (size_t)c->n);
  qsort(sorted, (size_t)c->n, sizeof *sorted, rec_cmp);
  char tmp[4200];
  snprintf(tmp, sizeof tmp, "%s.tmp.%ld", path, (long)getpid());
  /* Not a regular file (/dev/null, a FIFO): written in place, since a rename
   * would replace the node itself (as root, /dev/null for everyone). */
  struct stat sb;
  bool in_place = stat(path, &sb) == 0 && !S_ISREG(sb.st_mode);
  if (in_place) snprintf(tmp, sizeof tmp, "%s", path);
  FILE* f = fopen(tmp, "w");
  if (!f) {
    free(sorted);
    return kiln_make_status(KILN_IO_ERROR, "tuning cache %s: cannot write %s: %s", path, tmp, strerror(errno));
  }
  fprintf(f, "# kiln tuning cache (docs/TUNING.md); tab-separated:\n"
             "# fingerprint\ttarget\tspace\tdevice\tdriver\tkiln\ttiles\tdefault_us\ttuned_us\n");
  for (int32_t i = 0; i < c->n; ++i) {
    const kiln_tune_record_t* r = &sorted[i];
    char tiles[128];
    kiln_tune_tiles_format(&r->tiles, tiles, sizeof tiles);
    /* %.3f: KILN_TUNE_TIME_MIN_US apart, what the reader takes */
    fprintf(f, "%016llx\t%s\t%s\t%s\t%s\t%s\t%s\t%.3f\t%.3f\n", (unsigned long long)r->key.fingerprint,
            r->key.target, r->key.space, r->key.device, r->key.driver, r->key.kiln, tiles, r->default_us,
            r->tuned_us);
  }
  free(sorted);
  bool bad = ferror(f) != 0;
  if (fclose(f) != 0) bad = true;
  if (bad || (!in_place && rename(tmp, path) != 0)) {
    int e = errno;
    if (!in_place) unlink(tmp);
    return kiln_make_status(KILN_IO_ERROR, "tuning cache %s: write failed: %s", path, strerror(e));
  }
  return NULL;
}

void kiln_tune_cache_default_path(char* out, size_t n) {
  char root[1024];
  kiln_code_cache_root(root, sizeof root);
  snprintf(out, n, "%s/tuning.tsv", root);
}
