/* OpenCL device helpers without device calls (see opencl_util.h). */
#define CL_TARGET_OPENCL_VERSION 120
#include "runtime/opencl/opencl_util.h"
#include "runtime/code_cache.h"

#include <CL/cl.h>
#include <ctype.h>
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

const char* kiln_cl_error_name(int32_t err) {
  switch (err) {
#define E(x) \
  case x:    \
    return #x;
    E(CL_SUCCESS) E(CL_DEVICE_NOT_FOUND) E(CL_DEVICE_NOT_AVAILABLE) E(CL_COMPILER_NOT_AVAILABLE)
    E(CL_MEM_OBJECT_ALLOCATION_FAILURE) E(CL_OUT_OF_RESOURCES) E(CL_OUT_OF_HOST_MEMORY)
    E(CL_PROFILING_INFO_NOT_AVAILABLE) E(CL_MEM_COPY_OVERLAP) E(CL_IMAGE_FORMAT_MISMATCH)
    E(CL_IMAGE_FORMAT_NOT_SUPPORTED) E(CL_BUILD_PROGRAM_FAILURE) E(CL_MAP_FAILURE)
    E(CL_MISALIGNED_SUB_BUFFER_OFFSET) E(CL_EXEC_STATUS_ERROR_FOR_EVENTS_IN_WAIT_LIST)
    E(CL_COMPILE_PROGRAM_FAILURE) E(CL_LINKER_NOT_AVAILABLE) E(CL_LINK_PROGRAM_FAILURE)
    E(CL_DEVICE_PARTITION_FAILED) E(CL_KERNEL_ARG_INFO_NOT_AVAILABLE) E(CL_INVALID_VALUE)
    E(CL_INVALID_DEVICE_TYPE) E(CL_INVALID_PLATFORM) E(CL_INVALID_DEVICE) E(CL_INVALID_CONTEXT)
    E(CL_INVALID_QUEUE_PROPERTIES) E(CL_INVALID_COMMAND_QUEUE) E(CL_INVALID_HOST_PTR)
    E(CL_INVALID_MEM_OBJECT) E(CL_INVALID_IMAGE_FORMAT_DESCRIPTOR) E(CL_INVALID_IMAGE_SIZE)
    E(CL_INVALID_SAMPLER) E(CL_INVALID_BINARY) E(CL_INVALID_BUILD_OPTIONS) E(CL_INVALID_PROGRAM)
    E(CL_INVALID_PROGRAM_EXECUTABLE) E(CL_INVALID_KERNEL_NAME) E(CL_INVALID_KERNEL_DEFINITION)
    E(CL_INVALID_KERNEL) E(CL_INVALID_ARG_INDEX) E(CL_INVALID_ARG_VALUE) E(CL_INVALID_ARG_SIZE)
    E(CL_INVALID_KERNEL_ARGS) E(CL_INVALID_WORK_DIMENSION) E(CL_INVALID_WORK_GROUP_SIZE)
    E(CL_INVALID_WORK_ITEM_SIZE) E(CL_INVALID_GLOBAL_OFFSET) E(CL_INVALID_EVENT_WAIT_LIST)
    E(CL_INVALID_EVENT) E(CL_INVALID_OPERATION) E(CL_INVALID_GL_OBJECT) E(CL_INVALID_BUFFER_SIZE)
    E(CL_INVALID_MIP_LEVEL) E(CL_INVALID_GLOBAL_WORK_SIZE) E(CL_INVALID_PROPERTY)
    E(CL_INVALID_IMAGE_DESCRIPTOR) E(CL_INVALID_COMPILER_OPTIONS) E(CL_INVALID_LINKER_OPTIONS)
    E(CL_INVALID_DEVICE_PARTITION_COUNT)
#undef E
    case CL_PLATFORM_NOT_FOUND_KHR_:
      return "CL_PLATFORM_NOT_FOUND_KHR";
    default: {
      static _Thread_local char buf[32];
      snprintf(buf, sizeof buf, "CL error %d", (int)err);
      return buf;
    }
  }
}

void kiln_opencl_cache_key(const char* source, size_t len, const char* device, const char* driver,
                           const char* version, const char* options, char out[33]) {
  kiln_code_cache_key_t h;
  kiln_code_cache_key_init(&h);
  kiln_code_cache_key_str(&h, "kiln-opencl-binary-2"); /* 2: code-cache entries (trailer) */
  kiln_code_cache_key_feed(&h, source, len);
  kiln_code_cache_key_str(&h, device);
  kiln_code_cache_key_str(&h, driver);
  kiln_code_cache_key_str(&h, version);
  kiln_code_cache_key_str(&h, options);
  kiln_code_cache_key_hex(&h, out);
}

kiln_status_t kiln_opencl_dump_source(const char* dir, const char* model, const char* source,
                                      size_t len) {
  KILN_RETURN_IF_ERROR(kiln_code_cache_make_dirs(dir), "opencl dump");
  /* The model's file name without folders or extension, [A-Za-z0-9_-] only. */
  const char* m = model && *model ? model : "program";
  const char* slash = strrchr(m, '/');
  if (slash && slash[1]) m = slash + 1;
  char stem[128];
  size_t k = 0;
  for (; m[k] && m[k] != '.' && k + 1 < sizeof stem; ++k)
    stem[k] = (isalnum((unsigned char)m[k]) || m[k] == '-') ? m[k] : '_';
  stem[k] = 0;
  if (!k) snprintf(stem, sizeof stem, "program");
  char path[1300];
  snprintf(path, sizeof path, "%s/%s.cl", dir, stem);
  FILE* f = fopen(path, "wb");
  if (!f) return kiln_make_status(KILN_IO_ERROR, "opencl dump: cannot write '%s': %s", path, strerror(errno));
  bool ok = fwrite(source, 1, len, f) == len;
  ok = (fclose(f) == 0) && ok;
  if (!ok) return kiln_make_status(KILN_IO_ERROR, "opencl dump: cannot write '%s'", path);
  return NULL;
}

/* Name of the kernel declared on a "__kernel" line (the identifier before '('). */
static bool kernel_name_of(const char* line, const char* end, char* out, size_t n) {
  const char* paren = memchr(line, '(', (size_t)(end - line));
  if (!paren || !strstr(line, "__kernel")) return false;
  /* skip attribute parentheses: the name is right before the last '(' on the line
   * that follows "void " */
  const char* v = strstr(line, " void ");
  if (!v || v > end) return false;
  v += 6;
  const char* p = v;
  while (p < end && (isalnum((unsigned char)*p) || *p == '_')) ++p;
  size_t l = (size_t)(p - v);
  if (!l || l + 1 > n) return false;
  memcpy(out, v, l);
  out[l] = 0;
  return true;
}

/* Skips blanks (spaces and tabs) from |p| up to |end|. */
static const char* skip_blanks(const char* p, const char* end) {
  while (p < end && (*p == ' ' || *p == '\t')) ++p;
  return p;
}

/* |p| at |word| (up to |end|) followed by a blank: the position after it. */
static const char* eat_word(const char* p, const char* end, const char* word) {
  const size_t l = strlen(word);
  if ((size_t)(end - p) <= l || strncmp(p, word, l) || (p[l] != ' ' && p[l] != '\t')) return NULL;
  return skip_blanks(p + l, end);
}

bool kiln_opencl_next_enabled_extension(const char* source, size_t len, size_t* pos, char* out, size_t n) {
  const char* const end = source + len;
  for (const char* ln = source + *pos; ln < end;) {
    const char* nl = memchr(ln, '\n', (size_t)(end - ln));
    const char* le = nl ? nl : end;
    const char* next = nl ? nl + 1 : end;
    const char* q = skip_blanks(ln, le);
    if (q < le && *q == '#') q = skip_blanks(q + 1, le);
    else q = NULL;
    if (q) q = eat_word(q, le, "pragma");
    if (q) q = eat_word(q, le, "OPENCL");
    if (q) q = eat_word(q, le, "EXTENSION");
    if (q) {
      const char* name = q;
      while (q < le && (isalnum((unsigned char)*q) || *q == '_')) ++q;
      const size_t nlen = (size_t)(q - name);
      q = skip_blanks(q, le);
      if (nlen && q < le && *q == ':') {
        q = skip_blanks(q + 1, le);
        if ((size_t)(le - q) >= 6 && !strncmp(q, "enable", 6) && nlen < n) {
          memcpy(out, name, nlen);
          out[nlen] = 0;
          *pos = (size_t)(next - source);
          return true;
        }
      }
    }
    ln = next;
  }
  *pos = len;
  return false;
}

void kiln_opencl_kernel_at_error(const char* source, const char* log, char* out, size_t n) {
  /* The first log line with "error" and a ":LINE:COL:" position in it
   * (clang-style "file:4:10: error: ..." or PoCL's "error: file:4:10: ..."). */
  long err_line = -1;
  for (const char* ln = log; *ln && err_line < 0;) {
    const char* end = strchr(ln, '\n');
    if (!end) end = ln + strlen(ln);
    const char* er = strstr(ln, "error");
    if (er && er < end) {
      for (const char* q = ln; q < end && err_line < 0; ++q) {
        if (*q != ':' || !isdigit((unsigned char)q[1])) continue;
        char* e1 = NULL;
        long l = strtol(q + 1, &e1, 10);
        if (e1 < end && *e1 == ':' && isdigit((unsigned char)e1[1])) {
          char* e2 = NULL;
          strtol(e1 + 1, &e2, 10);
          if (e2 < end && *e2 == ':') err_line = l;
        }
      }
    }
    ln = *end ? end + 1 : end;
  }
  char last[200] = "";
  long line = 1;
  char names[400] = "";
  size_t nl = 0;
  int count = 0;
  for (const char* s = source; *s;) {
    const char* e = strchr(s, '\n');
    if (!e) e = s + strlen(s);
    char name[200];
    if (kernel_name_of(s, e, name, sizeof name)) {
      if (err_line < 0 || line <= err_line) snprintf(last, sizeof last, "%s", name);
      if (nl + strlen(name) + 5 < sizeof names)
        nl += (size_t)snprintf(names + nl, sizeof names - nl, "%s'%s'", count ? ", " : "", name);
      ++count;
    }
    ++line;
    s = *e ? e + 1 : e;
  }
  if (err_line >= 0 && last[0]) snprintf(out, n, "'%s'", last);
  else if (count == 1) snprintf(out, n, "%s", names);
  else if (count) snprintf(out, n, "one of %s", names);
  else snprintf(out, n, "(none found)");
}
