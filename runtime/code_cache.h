/* kiln code cache: the one on-disk cache of compiled code that every device
 * uses -- the CPU device's shared objects, OpenCL program binaries and
 * Vulkan pipeline caches.
 *
 * Where: one folder per kind ("cpu", "opencl", "vulkan") under one root,
 * $KILN_CACHE_DIR, else $XDG_CACHE_HOME/kiln, else $HOME/.cache/kiln, else
 * /tmp/kiln-cache-<uid>. A device build option
 * (kiln_device_build_options_t.cache_dir) names the kind's folder itself,
 * and "" turns the cache off.
 *
 * Entries: <folder>/<name>, each file = payload | trailer, the trailer
 * being a magic, the payload's length and its 64-bit FNV-1a. The trailer
 * goes last so that a shared object stays loadable from its entry (the
 * dynamic loader ignores bytes after the sections). Writes go to a
 * temporary file in the folder that is renamed over the entry, so a reader
 * sees the old entry or the new one, never a part of one; when two writers
 * race on a key the last rename wins and both files are whole. Reads open
 * with O_NOFOLLOW | O_NONBLOCK and accept only regular files, so a symlink,
 * FIFO or device is never followed and never blocks. A missing entry is a
 * miss; one that is not a regular file, or whose trailer or checksum is
 * wrong, is rejected with a warning (the caller rebuilds and overwrites it).
 *
 * Never fatal: a folder that cannot be created or written, that is not a
 * directory, belongs to another user or is writable by group or others
 * (an entry is code: never trust a folder someone else can write) turns
 * the cache off with a warning on stderr; a failed write is a warning.
 *
 * Thread-safe: the functions share no state; threads and processes may use
 * one folder at once.
 */
#ifndef KILN_RUNTIME_CODE_CACHE_H_
#define KILN_RUNTIME_CODE_CACHE_H_

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "kiln/status.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef struct kiln_code_cache_s {
  char kind[16];  /* "cpu", "opencl", "vulkan": the folder under the root, and in warnings */
  char dir[900];  /* the kind's folder; "" when the cache is off */
} kiln_code_cache_t;

typedef enum kiln_code_cache_result_e {
  KILN_CODE_CACHE_MISS = 0,  /* no entry (or the cache is off) */
  KILN_CODE_CACHE_HIT = 1,
  KILN_CODE_CACHE_REJECTED = 2, /* an entry was there but unusable (warning printed) */
} kiln_code_cache_result_t;

/* Resolves and creates (mode 0700) the folder of |kind| (see above; |option|
 * NULL = the default, "" = off). Returns true when the cache is on; false
 * when it is off, with a warning unless |option| asked for that. */
bool kiln_code_cache_open(kiln_code_cache_t* c, const char* kind, const char* option);

/* An entry's key: two 64-bit FNV-1a streams (the second over the bytes
 * xor 0xa5) over everything the compiled code depends on -- source,
 * compiler and flags, device, driver -- printed as 32 hex digits. */
typedef struct kiln_code_cache_key_s {
  uint64_t a, b;
} kiln_code_cache_key_t;

void kiln_code_cache_key_init(kiln_code_cache_key_t* k);
void kiln_code_cache_key_feed(kiln_code_cache_key_t* k, const void* data, size_t n);
/* |s| with its NUL, so ("ab", "c") and ("a", "bc") differ; NULL as "". */
void kiln_code_cache_key_str(kiln_code_cache_key_t* k, const char* s);
/* 32 hex digits and a NUL. */
void kiln_code_cache_key_hex(const kiln_code_cache_key_t* k, char out[33]);

/* The root folder of the caches (see above) into |out|: the code cache's
 * kinds and the tuning cache (compiler/tune_cache.h) live under it. */
void kiln_code_cache_root(char* out, size_t n);

/* mkdir -p |path| (new folders mode 0700): for the cache folders and for
 * the devices' dump folders. Errors: INVALID_ARGUMENT (empty or longer than
 * a cache folder name), IO_ERROR naming the folder that cannot be created
 * or the path that is not a folder. */
kiln_status_t kiln_code_cache_make_dirs(const char* path);

/* <folder>/<name> into |out|. False (and "") when the cache is off or the
 * path does not fit |n|. */
bool kiln_code_cache_path(const kiln_code_cache_t* c, const char* name, char* out, size_t n);

/* A fresh temporary path in |dir| (a cache folder, or a private work
 * folder when the cache is off), <dir>/tmp-<tag>-<pid>-<n><ext>: unique
 * within the process and among processes. kiln_code_cache_trim removes such
 * files once they are an hour old (a crashed writer's). */
void kiln_code_cache_temp_path(const char* dir, const char* tag, const char* ext, char* out,
                               size_t n);

/* Reads entry |name|: HIT with the payload in *out (malloc'd: free it) and
 * its length in *out_len; MISS or REJECTED with *out = NULL. */
kiln_code_cache_result_t kiln_code_cache_read(const kiln_code_cache_t* c, const char* name,
                                              uint8_t** out, size_t* out_len);

/* Checks entry |name| without keeping its payload: HIT when it is a whole,
 * valid entry (for a shared object the caller then loads from its path). */
kiln_code_cache_result_t kiln_code_cache_check(const kiln_code_cache_t* c, const char* name);

/* Writes |data| as entry |name| (temporary file + rename). False with a
 * warning when it cannot; the cache is left as it was. */
bool kiln_code_cache_write(const kiln_code_cache_t* c, const char* name, const void* data,
                           size_t len);

/* Makes the file the caller wrote at |tmp| (a kiln_code_cache_temp_path)
 * entry |name|: appends the trailer and renames it over the entry. False
 * with a warning when it cannot; |tmp| is then left for the caller (whole,
 * possibly with the trailer appended) to use and remove. */
bool kiln_code_cache_commit(const kiln_code_cache_t* c, const char* tmp, const char* name);

/* Keeps the folder bounded: when it holds more than |max_entries| files or
 * |max_bytes|, the least recently used (oldest mtime: a caller touches an
 * entry it used) go until it is under 3/4 of both; temporary files older
 * than an hour go too. Best effort, errors ignored. */
void kiln_code_cache_trim(const kiln_code_cache_t* c, size_t max_entries, long long max_bytes);

#ifdef __cplusplus
}
#endif
#endif /* KILN_RUNTIME_CODE_CACHE_H_ */
