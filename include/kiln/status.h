/* kiln status: the error type every fallible kiln function returns.
 *
 * A kiln_status_t is a pointer that is NULL when the call succeeded and
 * otherwise owns a heap record with a code and a message. Messages name the
 * file, node, tensor or kernel involved and the reason, e.g.
 *   "model.onnx: node 'conv1' (Conv): input 'w' has rank 3, expected 4".
 *
 * Usage:
 *   KILN_RETURN_IF_ERROR(kiln_thing_create(...), "loading %s", path);
 *   kiln_status_t s = f();
 *   if (s) { fprintf(stderr, "%s\n", kiln_status_message(s)); kiln_status_free(s); }
 *
 * The caller that receives a non-NULL status owns it and must either return
 * it, annotate-and-return it, or free it. Creating a status never fails: when
 * memory is exhausted a static out-of-memory status is returned (freeing it
 * is a no-op). Thread-safe: statuses are independent values.
 */
#ifndef KILN_STATUS_H_
#define KILN_STATUS_H_

#include <stdarg.h>

#include "kiln/export.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef enum kiln_status_code_e {
  KILN_OK = 0,
  KILN_INVALID_ARGUMENT = 1, /* bad input: malformed model, wrong shape, bad attribute */
  KILN_NOT_FOUND = 2,        /* file, tensor, device or op not present */
  KILN_UNSUPPORTED = 3,      /* valid input that kiln does not implement */
  KILN_PARSE_ERROR = 4,      /* bytes that do not decode (protobuf, npy, module) */
  KILN_OUT_OF_MEMORY = 5,    /* an allocation failed */
  KILN_LIMIT_EXCEEDED = 6,   /* a configured size/depth/count cap was hit */
  KILN_OUT_OF_RANGE = 7,     /* index or offset outside its valid range */
  KILN_IO_ERROR = 8,         /* the OS refused a read/write/open */
  KILN_PERMISSION_DENIED = 9,/* a path rule rejected a file (e.g. outside the model dir), or a
                                verify key a module (unsigned, wrong key, changed) */
  KILN_DEVICE_ERROR = 10,    /* a driver call failed */
  KILN_INTERNAL = 11,        /* a kiln bug */
  KILN_CANCELLED = 12,       /* the work was dropped before it ran (a batcher shut down) */
} kiln_status_code_t;

typedef struct kiln_status_impl_s* kiln_status_t;

#if defined(__GNUC__)
#define KILN_PRINTF(f, a) __attribute__((format(printf, f, a)))
#define KILN_MUST_USE __attribute__((warn_unused_result))
#else
#define KILN_PRINTF(f, a)
#define KILN_MUST_USE
#endif

/* Returns a new status with |code| and a printf-formatted message.
 * |code| must not be KILN_OK. Never returns NULL. */
KILN_API kiln_status_t kiln_make_status(kiln_status_code_t code, const char* fmt, ...)
    KILN_PRINTF(2, 3);
KILN_API kiln_status_t kiln_make_status_v(kiln_status_code_t code, const char* fmt,
                                          va_list ap);

/* Prefixes the message of |status| with "<context>: " and returns it.
 * NULL in, NULL out. An empty context leaves the message unchanged. */
KILN_API kiln_status_t kiln_status_annotate(kiln_status_t status, const char* fmt, ...)
    KILN_PRINTF(2, 3);

KILN_API kiln_status_code_t kiln_status_code(kiln_status_t status);
/* The message; "OK" for NULL. Valid until the status is freed. */
KILN_API const char* kiln_status_message(kiln_status_t status);
/* "INVALID_ARGUMENT", ... */
KILN_API const char* kiln_status_code_name(kiln_status_code_t code);
/* Frees |status|; NULL is a no-op. */
KILN_API void kiln_status_free(kiln_status_t status);

/* Returns from the enclosing function when |expr| fails, optionally adding
 * context: KILN_RETURN_IF_ERROR(f(), "node '%s'", name). */
#define KILN_RETURN_IF_ERROR(expr, ...)                        \
  do {                                                         \
    kiln_status_t kiln_s_ = (expr);                            \
    if (kiln_s_) return kiln_status_annotate(kiln_s_, "" __VA_ARGS__); \
  } while (0)

/* Programmer-error check (never for user input). Always on. */
KILN_API void kiln_assert_fail(const char* expr, const char* file, int line);
#define KILN_ASSERT(e) \
  ((e) ? (void)0 : kiln_assert_fail(#e, __FILE__, __LINE__))

#ifdef __cplusplus
}
#endif
#endif /* KILN_STATUS_H_ */
