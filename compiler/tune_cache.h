/* The tuning cache: what `kiln tune` measured, as a readable, mergeable,
 * line-oriented text file, read back by `kiln compile|run --tuning-cache`.
 *
 * Format (docs/TUNING.md): '#' lines are comments; every other line is one
 * record of nine tab-separated fields
 *   fingerprint  target  space  device  driver  kiln  tiles  default_us  tuned_us
 * fingerprint: 16 hex digits (kiln_template_fingerprint); target: "opencl";
 * space: the knob space ("opencl.conv.1"); device and driver: the names
 * the device reports; kiln: the kiln version that measured it; tiles: the
 * chosen point, comma-separated; default_us and tuned_us: the median
 * times of the default and the chosen point, in microseconds, written to
 * three decimals (KILN_TUNE_TIME_MIN_US up to 10^12 are read).
 *
 * Never trusted blindly: a line that does not parse (a field missing or
 * out of range, a hostile number, a line past KILN_TUNE_LINE_MAX bytes)
 * is skipped with a warning naming the file and line; a missing or
 * unreadable file is a warning and an empty cache. Records keyed by
 * (fingerprint, target, space, device, driver, kiln): a later record for
 * the same key replaces an earlier one only when it is faster.
 *
 * Thread-compatible; owns its records. */
#ifndef KILN_COMPILER_TUNE_CACHE_H_
#define KILN_COMPILER_TUNE_CACHE_H_

#include <stdio.h>

#include "lowering/template.h"

#ifdef __cplusplus
extern "C" {
#endif

#define KILN_TUNE_LINE_MAX 4096
#define KILN_TUNE_MAX_RECORDS 1000000
#define KILN_TUNE_NAME_MAX 256
/* The smallest time a record may hold: the file's resolution (0.001 us). */
#define KILN_TUNE_TIME_MIN_US 0.001

#ifndef KILN_VERSION
#define KILN_VERSION "dev"
#endif

typedef struct kiln_tune_key_s {
  uint64_t fingerprint;
  char target[16];
  char space[64];
  char device[KILN_TUNE_NAME_MAX];
  char driver[KILN_TUNE_NAME_MAX];
  char kiln[64];
} kiln_tune_key_t;

typedef struct kiln_tune_record_s {
  kiln_tune_key_t key;
  kiln_template_tiles_t tiles;
  double default_us, tuned_us;
} kiln_tune_record_t;

typedef struct kiln_tune_cache_s {
  kiln_tune_record_t* r;
  int32_t n, cap;
  int32_t skipped; /* lines read and ignored */
} kiln_tune_cache_t;

/* Reads |path| into |c| (records added to what it holds, faster wins).
 * Warnings (unreadable file, each bad line) go to |warn| (NULL: none) as
 * "warning: FILE:LINE: why; ignored". Only OUT_OF_MEMORY fails. */
KILN_MUST_USE kiln_status_t kiln_tune_cache_read(kiln_tune_cache_t* c, const char* path, FILE* warn);

/* Writes |c| to |path| (a temporary file renamed over it), sorted by key.
 * IO_ERROR naming the path. */
KILN_MUST_USE kiln_status_t kiln_tune_cache_write(const kiln_tune_cache_t* c, const char* path);

/* Adds |r|: replaces the record of the same key when |r| is faster (or
 * when |replace|). OUT_OF_MEMORY, LIMIT_EXCEEDED past KILN_TUNE_MAX_RECORDS. */
KILN_MUST_USE kiln_status_t kiln_tune_cache_put(kiln_tune_cache_t* c, const kiln_tune_record_t* r, bool replace);

/* The record of exactly |key|, or NULL. */
const kiln_tune_record_t* kiln_tune_cache_find(const kiln_tune_cache_t* c, const kiln_tune_key_t* key);

/* The fastest record for the same fingerprint, target and space on any
 * device, driver or kiln version (a starting point, never trusted), or NULL. */
const kiln_tune_record_t* kiln_tune_cache_find_near(const kiln_tune_cache_t* c, const kiln_tune_key_t* key);

void kiln_tune_cache_free(kiln_tune_cache_t* c);

/* The tuning cache `kiln tune` writes and `kiln compile|run` read unless
 * told otherwise: tuning.tsv in the cache folder ($KILN_CACHE_DIR, else
 * $XDG_CACHE_HOME/kiln, else $HOME/.cache/kiln; runtime/code_cache.h). */
void kiln_tune_cache_default_path(char* out, size_t n);

/* Parses one record line (no newline). NULL, or why it is refused. */
const char* kiln_tune_record_parse(const char* line, kiln_tune_record_t* out);

/* "8,32,16,1,1,128,8,4" */
void kiln_tune_tiles_format(const kiln_template_tiles_t* t, char* buf, size_t n);

#ifdef __cplusplus
}
#endif
#endif
