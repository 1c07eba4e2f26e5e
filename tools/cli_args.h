/* Strict option-value parsing for the kiln command line: the whole string
 * must be a number in range, otherwise the caller reports a usage error. */
#ifndef KILN_TOOLS_CLI_ARGS_H_
#define KILN_TOOLS_CLI_ARGS_H_

#include <errno.h>
#include <stdbool.h>
#include <stdlib.h>

static inline bool parse_int(const char* s, long long lo, long long hi, long long* out) {
  char* end = NULL;
  errno = 0;
  long long v = strtoll(s, &end, 10);
  if (!s[0] || *end || errno || v < lo || v > hi) return false;
  *out = v;
  return true;
}

#endif
