/* kiln_status_t implementation: heap records with a code and a message.
 * Out-of-memory while building a status degrades to a static record so that
 * reporting an error can never itself fail. */
#include "kiln/status.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

struct kiln_status_impl_s {
  kiln_status_code_t code;
  char* message;
};

static struct kiln_status_impl_s oom_status = {
    KILN_OUT_OF_MEMORY, (char*)"out of memory while reporting an error"};

static kiln_status_t make_owned(kiln_status_code_t code, char* msg) {
  if (!msg) return &oom_status;
  kiln_status_t s = malloc(sizeof(*s));
  if (!s) {
    free(msg);
    return &oom_status;
  }
  s->code = code;
  s->message = msg;
  return s;
}

static char* vformat(const char* fmt, va_list ap) {
  va_list ap2;
  va_copy(ap2, ap);
  int n = vsnprintf(NULL, 0, fmt, ap2);
  va_end(ap2);
  if (n < 0) return NULL;
  char* buf = malloc((size_t)n + 1);
  if (!buf) return NULL;
  vsnprintf(buf, (size_t)n + 1, fmt, ap);
  return buf;
}

kiln_status_t kiln_make_status_v(kiln_status_code_t code, const char* fmt,
                                 va_list ap) {
  if (code == KILN_OK) code = KILN_INTERNAL;
  return make_owned(code, vformat(fmt, ap));
}

kiln_status_t kiln_make_status(kiln_status_code_t code, const char* fmt, ...) {
  va_list ap;
  va_start(ap, fmt);
  kiln_status_t s = kiln_make_status_v(code, fmt, ap);
  va_end(ap);
  return s;
}

kiln_status_t kiln_status_annotate(kiln_status_t status, const char* fmt, ...) {
  if (!status || !fmt || !fmt[0] || status == &oom_status) return status;
  va_list ap;
  va_start(ap, fmt);
  char* ctx = vformat(fmt, ap);
  va_end(ap);
  if (!ctx) return status; /* keep the original message rather than lose it */
  if (!ctx[0]) {
    free(ctx);
    return status;
  }
  size_t a = strlen(ctx), b = strlen(status->message);
  char* joined = malloc(a + 2 + b + 1);
  if (joined) {
    memcpy(joined, ctx, a);
    memcpy(joined + a, ": ", 2);
    memcpy(joined + a + 2, status->message, b + 1);
    free(status->message);
    status->message = joined;
  }
  free(ctx);
  return status;
}

kiln_status_code_t kiln_status_code(kiln_status_t s) {
  return s ? s->code : KILN_OK;
}

const char* kiln_status_message(kiln_status_t s) {
  return s ? s->message : "OK";
}

const char* kiln_status_code_name(kiln_status_code_t code) {
  switch (code) {
    case KILN_OK: return "OK";
    case KILN_INVALID_ARGUMENT: return "INVALID_ARGUMENT";
    case KILN_NOT_FOUND: return "NOT_FOUND";
    case KILN_UNSUPPORTED: return "UNSUPPORTED";
    case KILN_PARSE_ERROR: return "PARSE_ERROR";
    case KILN_OUT_OF_MEMORY: return "OUT_OF_MEMORY";
    case KILN_LIMIT_EXCEEDED: return "LIMIT_EXCEEDED";
    case KILN_OUT_OF_RANGE: return "OUT_OF_RANGE";
    case KILN_IO_ERROR: return "IO_ERROR";
    case KILN_PERMISSION_DENIED: return "PERMISSION_DENIED";
    case KILN_DEVICE_ERROR: return "DEVICE_ERROR";
    case KILN_INTERNAL: return "INTERNAL";
    case KILN_CANCELLED: return "CANCELLED";
  }
  return "UNKNOWN";
}

void kiln_status_free(kiln_status_t s) {
  if (!s || s == &oom_status) return;
  free(s->message);
  free(s);
}

void kiln_assert_fail(const char* expr, const char* file, int line) {
  fprintf(stderr, "kiln: internal invariant broken: %s (%s:%d)\n", expr, file,
          line);
  abort();
}
