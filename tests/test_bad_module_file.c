/* Bad .kiln module files (BAD_INPUTS.md row 15: a corrupt or truncated
 * module is a clear error, never a crash). Every case must return a status
 * whose message starts with the module's name: 0-byte, 8-byte and foreign
 * files; every truncation of a valid module; every single-byte change of it;
 * seeded random bytes; random edits with the checksums recomputed (so the
 * section parser itself sees garbage); files with valid checksums but
 * inconsistent contents (kiln_program_validate's errors); huge counts and
 * lengths (fast errors, no giant allocation); a newer format version;
 * duplicate, missing and unknown-required sections; bad paths. Parsing
 * always reads from an exact-size heap copy so ASan catches any overread. */
#define _GNU_SOURCE
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "kiln/runtime.h"
#include "runtime/module_file.h"
#include "runtime/program.h"
#include "program_util.h"
#include "testing.h"

static kiln_allocator_t sys(void) { return kiln_allocator_system(); }

/* ---- a small valid program ---------------------------------------------------- */

static void buffer(kiln_program_t* p, int32_t i, const char* name, kiln_program_buffer_kind_t kind,
                   int32_t alias, int32_t first, int32_t last) {
  pu_buffer(p, i, name, KILN_DTYPE_F32, kind, 1, (int64_t[]){4}, alias, first, last, 0);
}

static void kernel(kiln_program_t* p, int32_t k, const char* name, int32_t n, const int32_t* args,
                   const uint8_t* access) {
  pu_kernel(p, k, name, name, "Op", n, args, access, -1, -1);
}

/* x (input) + w (const) -> t; v = view of t; f(v) -> y (output). */
static kiln_program_t* make_program(void) {
  kiln_program_t* p = NULL;
  if (!CHECK_OK(kiln_program_create(sys(), &p))) abort();
  p->model_name = pu_str(p, "small.onnx");
  p->target = "cpu";
  p->precision = pu_str(p, "fp32");
  p->options = pu_str(p, "-O1");
  p->n_buffers = 5;
  p->buffers = pu_alloc(p, sizeof(kiln_program_buffer_t) * 5);
  buffer(p, 0, "x", KILN_PB_INPUT, -1, 0, 0);
  buffer(p, 1, "w", KILN_PB_CONST, -1, 0, 0);
  buffer(p, 2, "t", KILN_PB_INTERMEDIATE, -1, 0, 1);
  buffer(p, 3, "v", KILN_PB_INTERMEDIATE, 2, 1, 1);
  buffer(p, 4, "y", KILN_PB_OUTPUT, -1, 1, 1);
  p->n_kernels = 2;
  p->kernels = pu_alloc(p, sizeof(kiln_program_kernel_t) * 2);
  const int32_t a0[3] = {0, 1, 2}, a1[2] = {3, 4};
  const uint8_t c0[3] = {KILN_ARG_READ, KILN_ARG_READ, KILN_ARG_WRITE}, c1[2] = {KILN_ARG_READ, KILN_ARG_WRITE};
  kernel(p, 0, "k_add", 3, a0, c0);
  kernel(p, 1, "k_f", 2, a1, c1);
  p->n_inputs = p->n_outputs = 1;
  p->inputs = pu_alloc(p, sizeof(int32_t));
  p->outputs = pu_alloc(p, sizeof(int32_t));
  p->input_names = pu_alloc(p, sizeof(char*));
  p->output_names = pu_alloc(p, sizeof(char*));
  p->inputs[0] = 0;
  p->outputs[0] = 4;
  p->input_names[0] = pu_str(p, "x");
  p->output_names[0] = pu_str(p, "y");
  p->weights_len = 16;
  p->weights = pu_alloc(p, 16);
  for (int i = 0; i < 16; ++i) p->weights[i] = (uint8_t)(i + 1);
  const char* src = "/*p*/void k_add(void){}void k_f(void){}/*e*/";
  p->code.text = pu_str(p, src);
  p->code.text_len = strlen(src);
  p->code.n_parts = 2;
  p->code.parts = pu_alloc(p, sizeof(uint64_t) * 4);
  p->code.parts[0] = 0;
  p->code.parts[1] = 5;
  p->code.parts[2] = 5;
  p->code.parts[3] = p->code.text_len - 5;
  CHECK_OK(kiln_program_validate(p));
  return p;
}

static uint8_t* valid_bytes(size_t* out_len) {
  kiln_program_t* p = make_program();
  uint8_t* bytes = NULL;
  if (!CHECK_OK(kiln_module_serialize(p, sys(), &bytes, out_len))) abort();
  kiln_program_destroy(p);
  return bytes;
}

/* ---- helpers --------------------------------------------------------------------- */


static void put32(uint8_t* b, size_t at, uint32_t v) { memcpy(b + at, &v, 4); }
static void put64(uint8_t* b, size_t at, uint64_t v) { memcpy(b + at, &v, 8); }
static uint32_t get32(const uint8_t* b, size_t at) {
  uint32_t v;
  memcpy(&v, b + at, 4);
  return v;
}

static double now_s(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

/* Parses |len| bytes (from an exact-size copy) and returns the status; a
 * program that parsed is destroyed. The bytes are parsed twice, copying
 * the weights and leaving them in place (what a mapped file gets), and
 * both must come to the same verdict with the same message. */
static kiln_status_t parse_copy(const uint8_t* bytes, size_t len, const char* name) {
  uint8_t* copy = malloc(len ? len : 1);
  if (len) memcpy(copy, bytes, len);
  kiln_program_t* p = NULL;
  kiln_program_t* q = NULL;
  kiln_status_t s = kiln_module_parse(len ? copy : NULL, len, name, sys(), &p);
  kiln_status_t t = kiln_module_parse_borrowing(len ? copy : NULL, len, name, sys(), &q);
  CHECK_MSG(!s == !t && (!s || !strcmp(kiln_status_message(s), kiln_status_message(t))),
            "%s: copying parse says '%s', borrowing parse '%s'", name, s ? kiln_status_message(s) : "ok",
            t ? kiln_status_message(t) : "ok");
  if (!t) {
    CHECK(q->weights_borrowed == (q->weights_len > 0));
    CHECK(!q->weights_len || (q->weights >= copy && q->weights + q->weights_len <= copy + len));
    kiln_program_destroy(q);
  }
  kiln_status_free(t);
  free(copy);
  if (!s) kiln_program_destroy(p);
  return s;
}

/* Expects an error with |code| (any when < 0), a message that starts with
 * |name| and contains |needle|. Returns whether it held. */
static int expect_fail(const uint8_t* bytes, size_t len, const char* name, int code, const char* needle,
                       const char* what) {
  kiln_status_t s = parse_copy(bytes, len, name);
  ++kiln_test_checks;
  if (!s) {
    kiln_test_fail(__FILE__, __LINE__, "%s: parsed, expected an error", what);
    return 0;
  }
  const char* msg = kiln_status_message(s);
  int ok = 1;
  if (code >= 0 && (int)kiln_status_code(s) != code) {
    kiln_test_fail(__FILE__, __LINE__, "%s: code %s, expected %s: %s", what,
                   kiln_status_code_name(kiln_status_code(s)), kiln_status_code_name(code), msg);
    ok = 0;
  }
  if (strncmp(msg, name, strlen(name)) != 0) {
    kiln_test_fail(__FILE__, __LINE__, "%s: message does not start with '%s': %s", what, name, msg);
    ok = 0;
  }
  if (needle && !strstr(msg, needle)) {
    kiln_test_fail(__FILE__, __LINE__, "%s: message lacks '%s': %s", what, needle, msg);
    ok = 0;
  }
  kiln_status_free(s);
  return ok;
}

static uint64_t rng = 0x9E3779B97F4A7C15ull;
static uint64_t next_rand(void) {
  rng ^= rng << 13;
  rng ^= rng >> 7;
  rng ^= rng << 17;
  return rng;
}

static char tmpdir[64];
static const char* tmp_path(const char* name) {
  static char buf[8][512];
  static int k = 0;
  k = (k + 1) % 8;
  snprintf(buf[k], sizeof buf[k], "%s/%s", tmpdir, name);
  return buf[k];
}
static void write_file(const char* path, const void* data, size_t n) {
  FILE* f = fopen(path, "wb");
  CHECK_MSG(f != NULL, "cannot create %s", path);
  if (!f) return;
  if (n) CHECK(fwrite(data, 1, n, f) == n);
  fclose(f);
}

/* ---- tests ------------------------------------------------------------------------ */

static void test_tiny_files(void) {
  const char* empty = tmp_path("empty.kiln");
  write_file(empty, "", 0);
  kiln_module_t* m = NULL;
  CHECK_ERR(kiln_module_load_file(empty, sys(), &m), KILN_PARSE_ERROR, empty);
  CHECK_ERR(kiln_module_load_file(empty, sys(), &m), KILN_PARSE_ERROR, "empty");
  const char* eight = tmp_path("eight.kiln");
  write_file(eight, KILN_MODULE_MAGIC, 8);
  CHECK_ERR(kiln_module_load_file(eight, sys(), &m), KILN_PARSE_ERROR, "truncated");
  const char* elf = tmp_path("elf.kiln");
  write_file(elf, "\x7f" "ELF\2\1\1\0", 8);
  CHECK_ERR(kiln_module_load_file(elf, sys(), &m), KILN_PARSE_ERROR, "bad magic");
  const char* text = tmp_path("onnx.kiln");
  write_file(text, "this is not a module, it is a longer text file with no magic at all\n", 69);
  CHECK_ERR(kiln_module_load_file(text, sys(), &m), KILN_PARSE_ERROR, "bad magic");
  CHECK_ERR(kiln_module_load_memory(NULL, 0, "mem", sys(), &m), KILN_PARSE_ERROR, "mem: ");
  CHECK_ERR(kiln_module_load_memory("KILN", 4, "four", sys(), &m), KILN_PARSE_ERROR, "four: ");
  CHECK(m == NULL);
  unlink(empty);
  unlink(eight);
  unlink(elf);
  unlink(text);
}

static void test_every_truncation(void) {
  size_t len;
  uint8_t* b = valid_bytes(&len);
  int bad = 0;
  for (size_t n = 0; n < len; ++n) {
    char what[64];
    snprintf(what, sizeof what, "prefix of %zu bytes", n);
    if (!expect_fail(b, n, "cut.kiln", KILN_PARSE_ERROR, NULL, what)) ++bad;
  }
  CHECK_MSG(bad == 0, "%d of %zu truncations misreported", bad, len);
  /* The valid whole still parses. */
  CHECK_OK(parse_copy(b, len, "cut.kiln"));
  /* And a truncation says so. */
  expect_fail(b, len - 8, "cut.kiln", KILN_PARSE_ERROR, "truncated", "len - 8");
  kiln_allocator_free(sys(), b);
}

static void test_every_byte_flip(void) {
  size_t len;
  uint8_t* b = valid_bytes(&len);
  const uint8_t masks[3] = {0x01, 0x80, 0xff};
  int bad = 0;
  for (size_t i = 0; i < len; ++i)
    for (int k = 0; k < 3; ++k) {
      b[i] ^= masks[k];
      char what[64];
      snprintf(what, sizeof what, "byte %zu ^ 0x%02x", i, masks[k]);
      if (!expect_fail(b, len, "flip.kiln", KILN_PARSE_ERROR, NULL, what)) ++bad;
      b[i] ^= masks[k];
    }
  CHECK_MSG(bad == 0, "%d of %zu flips misreported", bad, 3 * len);
  /* A body flip is the checksum's to catch, with this message. */
  b[len / 2] ^= 0x10;
  expect_fail(b, len, "flip.kiln", KILN_PARSE_ERROR, "checksum mismatch (file corrupt or truncated)", "body");
  b[len / 2] ^= 0x10;
  b[KILN_MODULE_OFF_TOTAL_LEN + 2] ^= 0x10;
  expect_fail(b, len, "flip.kiln", KILN_PARSE_ERROR, "header checksum", "header");
  kiln_allocator_free(sys(), b);
}

static void test_random_bytes(void) {
  size_t vlen;
  uint8_t* valid = valid_bytes(&vlen);
  uint8_t* buf = malloc(4096);
  int bad = 0;
  for (int it = 0; it < 1000; ++it) {
    size_t n = (size_t)(next_rand() % 4096);
    for (size_t i = 0; i < n; ++i) buf[i] = (uint8_t)next_rand();
    int mode = it % 3;
    if (mode >= 1 && n >= KILN_MODULE_HEADER_LEN) {
      /* Past the magic and version: a header of the right shape. */
      memcpy(buf, valid, KILN_MODULE_HEADER_LEN);
      if (mode == 2) {
        /* ...with the right length and checksums: random sections. */
        put64(buf, KILN_MODULE_OFF_TOTAL_LEN, n);
        put32(buf, KILN_MODULE_OFF_SECTIONS, (uint32_t)(next_rand() % 12));
        kiln_module_reseal(buf, n);
      }
    }
    char what[64];
    snprintf(what, sizeof what, "random buffer %d (%zu bytes, mode %d)", it, n, mode);
    if (!expect_fail(buf, n, "random.kiln", -1, NULL, what)) ++bad;
  }
  CHECK_MSG(bad == 0, "%d of 1000 random buffers misreported", bad);
  free(buf);
  kiln_allocator_free(sys(), valid);
}

/* Random edits of a valid module with the checksums recomputed: the
 * section parser and the validator see every kind of garbage. Either
 * outcome is fine as long as nothing crashes (ASan) and errors are named. */
static void test_resealed_mutations(void) {
  size_t len;
  uint8_t* valid = valid_bytes(&len);
  uint8_t* b = malloc(len);
  int failed = 0, named = 0;
  for (int it = 0; it < 3000; ++it) {
    memcpy(b, valid, len);
    int edits = 1 + (int)(next_rand() % 4);
    for (int e = 0; e < edits; ++e) {
      size_t at = KILN_MODULE_HEADER_LEN + (size_t)(next_rand() % (len - KILN_MODULE_HEADER_LEN));
      uint64_t r = next_rand();
      switch (r % 4) {
        case 0: b[at] ^= (uint8_t)(1u << (r >> 8) % 8); break;
        case 1: b[at] = (uint8_t)(r >> 16); break;
        case 2: b[at] = 0xff; break;
        default: /* a small or huge 32-bit value */
          if (at + 4 <= len) put32(b, at, (r >> 20) & 1 ? 0xffffffffu : (uint32_t)((r >> 24) % 16));
          break;
      }
    }
    kiln_module_reseal(b, len);
    kiln_status_t s = parse_copy(b, len, "mut.kiln");
    if (s) {
      ++failed;
      if (strncmp(kiln_status_message(s), "mut.kiln", 8) == 0) ++named;
      else fprintf(stderr, "unnamed error: %s\n", kiln_status_message(s));
      kiln_status_free(s);
    }
  }
  CHECK(failed > 1000);
  CHECK_MSG(named == failed, "%d of %d errors do not start with the module name", failed - named, failed);
  free(b);
  kiln_allocator_free(sys(), valid);
}

/* Valid checksums, inconsistent contents: kiln_program_validate's errors,
 * prefixed with the module name. */
static void serialize_and_expect(kiln_program_t* p, const char* needle, const char* what) {
  uint8_t* bytes = NULL;
  size_t len = 0;
  if (CHECK_OK(kiln_module_serialize(p, sys(), &bytes, &len))) {
    expect_fail(bytes, len, "inconsistent.kiln", KILN_PARSE_ERROR, needle, what);
    kiln_allocator_free(sys(), bytes);
  }
  kiln_program_destroy(p);
}

static void test_inconsistent_contents(void) {
  kiln_program_t* p = make_program();
  p->kernels[1].args[0] = 99;
  serialize_and_expect(p, "argument 0 names buffer 99", "kernel arg out of range");

  p = make_program();
  p->buffers[2].alias_of = 3; /* t -> v -> t */
  serialize_and_expect(p, "alias cycle", "alias cycle");

  p = make_program();
  p->buffers[1].const_offset = 8; /* 16 bytes from offset 8 of 16 */
  serialize_and_expect(p, "past the weights", "constant past the weights");

  p = make_program();
  p->inputs[0] = 7;
  serialize_and_expect(p, "input 0", "input index out of range");

  p = make_program();
  p->outputs[0] = -2;
  serialize_and_expect(p, "output 0", "output index negative");

  p = make_program();
  p->kernels[0].inplace_in = 0;
  p->kernels[0].inplace_out = 0;
  serialize_and_expect(p, "in-place", "in-place pair onto itself");

  p = make_program();
  p->buffers[4].first_use = 1;
  p->buffers[4].last_use = 0;
  serialize_and_expect(p, "lifetime", "lifetime reversed");

  p = make_program();
  p->kernels[0].access[1] = KILN_ARG_WRITE;
  serialize_and_expect(p, "writes a constant", "write to a constant");

  p = make_program();
  p->code.parts[3] = 1000;
  serialize_and_expect(p, "code part 1", "code part past the text");

  p = make_program();
  p->kernels[0].local[2] = 0;
  serialize_and_expect(p, "launch size", "zero work-group size");

  /* A GEMM descriptor whose operand span overflows 64 bits (batch and
   * batch stride 2^40 each: 2^80 elements) reads as too big, not as the
   * wrapped small size (and no signed overflow: UBSan). */
  p = make_program();
  kiln_program_gemm_t* g = &p->kernels[0].gemm;
  *g = (kiln_program_gemm_t){.valid = true, .M = 2, .N = 2, .K = 2, .batch = 1, .lda = 2, .ldb = 2, .ldy = 2,
                             .alpha = 1.0f, .a = 0, .b = 1, .y = 2};
  CHECK_OK(kiln_program_validate(p)); /* 2x2 f32 operands: 16 bytes each, as the buffers */
  g->batch = 1ll << 40;
  g->sa = 1ll << 40;
  serialize_and_expect(p, "kernel 'k_add': GEMM operand A spans 18446744073709551615 bytes, its buffer 16",
                       "GEMM span overflowing 64 bits");
}

/* Huge counts and lengths, with valid checksums: fast errors, no giant
 * allocation (ASan would abort on a 2^40-element calloc). */
static void patch_and_expect(const uint8_t* valid, size_t len, size_t at, int width, uint64_t value, int code,
                             const char* needle, const char* what) {
  uint8_t* b = malloc(len);
  memcpy(b, valid, len);
  if (width == 8) put64(b, at, value);
  else if (width == 4) put32(b, at, (uint32_t)value);
  else b[at] = (uint8_t)value;
  kiln_module_reseal(b, len);
  double t0 = now_s();
  expect_fail(b, len, "huge.kiln", code, needle, what);
  CHECK_MSG(now_s() - t0 < 1.0, "%s took %.2f s", what, now_s() - t0);
  free(b);
}

static void test_huge_counts(void) {
  size_t len;
  uint8_t* v = valid_bytes(&len);
  uint64_t blen = 0, klen = 0, iolen = 0, wlen = 0, clen = 0;
  size_t bufs = pu_find_section(v, len, KILN_MODULE_TAG_BUFS, &blen);
  size_t kern = pu_find_section(v, len, KILN_MODULE_TAG_KERN, &klen);
  size_t io = pu_find_section(v, len, KILN_MODULE_TAG_IO, &iolen);
  size_t wght = pu_find_section(v, len, KILN_MODULE_TAG_WGHT, &wlen);
  size_t code = pu_find_section(v, len, KILN_MODULE_TAG_CODE, &clen);
  CHECK(bufs && kern && io && wght && code);
  if (!(bufs && kern && io && wght && code)) return;

  patch_and_expect(v, len, bufs, 8, 1ull << 40, KILN_LIMIT_EXCEEDED, "exceeds the limit", "2^40 buffers");
  patch_and_expect(v, len, bufs, 8, UINT64_MAX, KILN_LIMIT_EXCEEDED, "buffers", "2^64-1 buffers");
  patch_and_expect(v, len, bufs, 8, INT32_MAX, KILN_PARSE_ERROR, "claims 2147483647 buffers", "2^31-1 buffers");
  patch_and_expect(v, len, bufs, 8, 6, KILN_PARSE_ERROR, "buffer 5: truncated", "one buffer too many");
  patch_and_expect(v, len, kern, 8, 1ull << 40, KILN_LIMIT_EXCEEDED, "kernels", "2^40 kernels");
  patch_and_expect(v, len, kern, 8, 100000, KILN_PARSE_ERROR, "claims 100000 kernels", "1e5 kernels");
  patch_and_expect(v, len, io, 8, 1ull << 40, KILN_LIMIT_EXCEEDED, "inputs", "2^40 inputs");
  patch_and_expect(v, len, io, 8, 1u << 30, KILN_PARSE_ERROR, "inputs", "2^30 inputs");
  /* First kernel: count, then three strings, then its argument count. */
  size_t at = kern + 8;
  for (int s = 0; s < 3; ++s) at += 4 + get32(v, at);
  patch_and_expect(v, len, at, 8, 1ull << 40, KILN_LIMIT_EXCEEDED, "kernel 0", "2^40 kernel arguments");
  patch_and_expect(v, len, at, 8, 1u << 28, KILN_PARSE_ERROR, "kernel 0", "2^28 kernel arguments");
  /* Strings: the first buffer's name. */
  patch_and_expect(v, len, bufs + 8, 4, 0xffffffffu, KILN_PARSE_ERROR, "above the", "4 GiB name");
  patch_and_expect(v, len, bufs + 8, 4, 5000, KILN_PARSE_ERROR, "truncated", "name past the section");
  patch_and_expect(v, len, bufs + 12, 1, 0, KILN_PARSE_ERROR, "NUL", "NUL in a name");
  /* Fields read into fixed arrays or enums. */
  size_t name_len = get32(v, bufs + 8);
  patch_and_expect(v, len, bufs + 12 + name_len, 4, 99, KILN_PARSE_ERROR, "dtype", "dtype 99");
  patch_and_expect(v, len, bufs + 16 + name_len, 4, 0x80000000u, KILN_PARSE_ERROR, "kind", "kind 2^31");
  patch_and_expect(v, len, bufs + 20 + name_len, 4, 9, KILN_PARSE_ERROR, "rank 9", "rank 9");
  patch_and_expect(v, len, bufs + 20 + name_len, 4, 0xffffffffu, KILN_PARSE_ERROR, "rank -1", "rank -1");
  /* Weights, code text, parts, blobs. */
  patch_and_expect(v, len, wght, 8, 1ull << 62, KILN_PARSE_ERROR, "weights", "2^62 weight bytes");
  patch_and_expect(v, len, wght + 8, 4, 64, KILN_PARSE_ERROR, "padding", "weights padding 64");
  patch_and_expect(v, len, code, 8, 1ull << 62, KILN_PARSE_ERROR, "code text", "2^62 text bytes");
  uint64_t tl;
  memcpy(&tl, v + code, 8);
  size_t parts = code + 8 + (size_t)tl;
  patch_and_expect(v, len, parts, 8, 1ull << 40, KILN_LIMIT_EXCEEDED, "code parts", "2^40 parts");
  patch_and_expect(v, len, parts, 8, 1ull << 20, KILN_PARSE_ERROR, "code parts", "2^20 parts");
  size_t blobs = parts + 8 + 16 * 2;
  patch_and_expect(v, len, blobs, 8, 1ull << 40, KILN_LIMIT_EXCEEDED, "code blobs", "2^40 blobs");
  patch_and_expect(v, len, blobs, 8, 3, KILN_PARSE_ERROR, "code blobs", "3 blobs in 0 bytes");
  /* A section length, and the header's section count. */
  patch_and_expect(v, len, bufs - 8, 8, 1ull << 62, KILN_PARSE_ERROR, "past the end", "2^62 section bytes");
  patch_and_expect(v, len, KILN_MODULE_OFF_SECTIONS, 4, 0xffffffffu, KILN_PARSE_ERROR, "sections",
                   "2^32-1 sections");
  kiln_allocator_free(sys(), v);
}

static void test_versions_and_header(void) {
  size_t len;
  uint8_t* v = valid_bytes(&len);
  uint8_t* b = malloc(len);
  memcpy(b, v, len);
  put32(b, KILN_MODULE_OFF_VERSION, KILN_MODULE_FORMAT_VERSION + 1);
  char want[96];
  snprintf(want, sizeof want, "module format version %d, this kiln reads up to %d", KILN_MODULE_FORMAT_VERSION + 1,
           KILN_MODULE_FORMAT_VERSION);
  expect_fail(b, len, "future.kiln", KILN_PARSE_ERROR, want, "next version, not resealed");
  kiln_module_reseal(b, len);
  expect_fail(b, len, "future.kiln", KILN_PARSE_ERROR, want, "next version");
  put32(b, KILN_MODULE_OFF_VERSION, 0);
  kiln_module_reseal(b, len);
  expect_fail(b, len, "zero.kiln", KILN_PARSE_ERROR, "version 0", "version 0");
  memcpy(b, v, len);
  put32(b, KILN_MODULE_OFF_FLAGS, 1);
  kiln_module_reseal(b, len);
  expect_fail(b, len, "flags.kiln", KILN_PARSE_ERROR, "flags", "header flags");
  memcpy(b, v, len);
  put32(b, KILN_MODULE_OFF_HEADER_LEN, 64);
  kiln_module_reseal(b, len);
  expect_fail(b, len, "hlen.kiln", KILN_PARSE_ERROR, "header length", "header length 64");
  memcpy(b, v, len);
  put64(b, KILN_MODULE_OFF_TOTAL_LEN, len + 8);
  kiln_module_reseal(b, len);
  expect_fail(b, len, "total.kiln", KILN_PARSE_ERROR, "truncated", "total length too large");
  /* Trailing bytes after a valid module. */
  uint8_t* longer = calloc(1, len + 8);
  memcpy(longer, v, len);
  expect_fail(longer, len + 8, "long.kiln", KILN_PARSE_ERROR, "trailing", "8 trailing bytes");
  free(longer);
  memcpy(b, v, len);
  b[KILN_MODULE_OFF_BODY_SUM] ^= 1;
  kiln_module_reseal(b, KILN_MODULE_HEADER_LEN); /* header sum only: body sum stays wrong */
  expect_fail(b, len, "sum.kiln", KILN_PARSE_ERROR, "checksum mismatch (file corrupt or truncated)",
              "body checksum field");
  free(b);
  kiln_allocator_free(sys(), v);
}

/* Splices |v| into sections and writes them back in another arrangement. */
static uint8_t* rebuild(const uint8_t* v, size_t len, const int* order, int n, size_t* out_len) {
  size_t starts[16], ends[16];
  int count = 0;
  size_t off = KILN_MODULE_HEADER_LEN;
  while (off + 16 <= len && count < 16) {
    uint64_t plen;
    memcpy(&plen, v + off + 8, 8);
    starts[count] = off;
    off += 16 + (size_t)plen;
    off += (8 - off % 8) % 8;
    ends[count++] = off;
  }
  size_t total = KILN_MODULE_HEADER_LEN;
  for (int i = 0; i < n; ++i) total += ends[order[i]] - starts[order[i]];
  uint8_t* b = calloc(1, total);
  memcpy(b, v, KILN_MODULE_HEADER_LEN);
  size_t at = KILN_MODULE_HEADER_LEN;
  for (int i = 0; i < n; ++i) {
    memcpy(b + at, v + starts[order[i]], ends[order[i]] - starts[order[i]]);
    at += ends[order[i]] - starts[order[i]];
  }
  put64(b, KILN_MODULE_OFF_TOTAL_LEN, total);
  put32(b, KILN_MODULE_OFF_SECTIONS, (uint32_t)n);
  kiln_module_reseal(b, total);
  *out_len = total;
  return b;
}

static void test_section_structure(void) {
  size_t len, n;
  uint8_t* v = valid_bytes(&len);
  CHECK(get32(v, KILN_MODULE_OFF_SECTIONS) == 6);

  /* Reordered sections are fine (but the weights lose their alignment,
   * which the reader does not require). */
  const int reordered[6] = {5, 4, 3, 2, 1, 0};
  uint8_t* b = rebuild(v, len, reordered, 6, &n);
  CHECK_OK(parse_copy(b, n, "reordered.kiln"));
  free(b);

  const int dup[7] = {0, 1, 2, 3, 4, 5, 0};
  b = rebuild(v, len, dup, 7, &n);
  expect_fail(b, n, "dup.kiln", KILN_PARSE_ERROR, "appears twice", "duplicate META");
  free(b);

  const int missing[5] = {0, 1, 2, 3, 4};
  b = rebuild(v, len, missing, 5, &n);
  expect_fail(b, n, "missing.kiln", KILN_PARSE_ERROR, "'CODE' is missing", "no CODE");
  free(b);

  /* The header's section count disagreeing with the sections. */
  b = malloc(len);
  memcpy(b, v, len);
  put32(b, KILN_MODULE_OFF_SECTIONS, 5);
  kiln_module_reseal(b, len);
  expect_fail(b, len, "count.kiln", KILN_PARSE_ERROR, "after the last", "one section too few");
  put32(b, KILN_MODULE_OFF_SECTIONS, 7);
  kiln_module_reseal(b, len);
  expect_fail(b, len, "count.kiln", KILN_PARSE_ERROR, "past the end", "one section too many");

  /* An unknown required section; unknown flags on a known one. */
  memcpy(b, v, len);
  put32(b, KILN_MODULE_HEADER_LEN, KILN_MODULE_TAG('N', 'E', 'W', '!'));
  kiln_module_reseal(b, len);
  expect_fail(b, len, "new.kiln", KILN_PARSE_ERROR, "'NEW!': required section unknown", "unknown required");
  memcpy(b, v, len);
  put32(b, KILN_MODULE_HEADER_LEN + 4, 3);
  kiln_module_reseal(b, len);
  expect_fail(b, len, "sflags.kiln", KILN_PARSE_ERROR, "flags 0x3", "section flags");
  /* A non-printable tag is printed safely. */
  memcpy(b, v, len);
  put32(b, KILN_MODULE_HEADER_LEN, 0x0a000001u);
  kiln_module_reseal(b, len);
  expect_fail(b, len, "tag.kiln", KILN_PARSE_ERROR, "'?\?\?\?'", "binary tag");
  /* A payload shorter than its contents / longer than its contents. */
  memcpy(b, v, len);
  uint64_t mlen;
  memcpy(&mlen, v + KILN_MODULE_HEADER_LEN + 8, 8);
  put64(b, KILN_MODULE_HEADER_LEN + 8, mlen - 1);
  kiln_module_reseal(b, len);
  expect_fail(b, len, "short.kiln", -1, NULL, "META one byte short");
  free(b);
  kiln_allocator_free(sys(), v);
}

static void test_bad_paths(void) {
  kiln_module_t* m = NULL;
  const char* missing = tmp_path("no_such_module.kiln");
  CHECK_ERR(kiln_module_load_file(missing, sys(), &m), KILN_NOT_FOUND, missing);
  const char* dir = tmp_path("a_dir.kiln");
  CHECK(mkdir(dir, 0755) == 0);
  CHECK_ERR(kiln_module_load_file(dir, sys(), &m), KILN_IO_ERROR, dir);
  CHECK_ERR(kiln_module_load_file(dir, sys(), &m), -1, "directory");
  rmdir(dir);
  const char* file = tmp_path("plain");
  write_file(file, "x", 1);
  const char* under = tmp_path("plain/m.kiln");
  CHECK_ERR(kiln_module_load_file(under, sys(), &m), KILN_NOT_FOUND, under);
  unlink(file);
  CHECK_ERR(kiln_module_load_file("/dev/null", sys(), &m), KILN_IO_ERROR, "/dev/null");
  CHECK_ERR(kiln_module_load_file("", sys(), &m), KILN_INVALID_ARGUMENT, NULL);
  CHECK_ERR(kiln_module_load_file(NULL, sys(), &m), KILN_INVALID_ARGUMENT, NULL);
  CHECK(m == NULL);

  /* Over 4 GiB (a sparse file: no disk used): refused before reading. */
  const char* big = tmp_path("big.kiln");
  FILE* f = fopen(big, "wb");
  CHECK(f != NULL);
  if (f) {
    CHECK(ftruncate(fileno(f), (off_t)(4ull << 30) + 1) == 0);
    fclose(f);
    double t0 = now_s();
    CHECK_ERR(kiln_module_load_file(big, sys(), &m), KILN_LIMIT_EXCEEDED, big);
    CHECK(now_s() - t0 < 1.0);
    unlink(big);
  }

  /* A corrupt file on disk names its path. */
  size_t len;
  uint8_t* v = valid_bytes(&len);
  v[len - 1] ^= 0x40;
  const char* corrupt = tmp_path("corrupt.kiln");
  write_file(corrupt, v, len);
  CHECK_ERR(kiln_module_load_file(corrupt, sys(), &m), KILN_PARSE_ERROR, corrupt);
  write_file(corrupt, v, len / 2);
  CHECK_ERR(kiln_module_load_file(corrupt, sys(), &m), KILN_PARSE_ERROR, "truncated");
  unlink(corrupt);
  kiln_allocator_free(sys(), v);
}

int main(void) {
  snprintf(tmpdir, sizeof tmpdir, "/tmp/kiln_badmod_XXXXXX");
  if (!mkdtemp(tmpdir)) {
    perror("mkdtemp");
    return 1;
  }
  RUN(test_tiny_files);
  RUN(test_every_truncation);
  RUN(test_every_byte_flip);
  RUN(test_random_bytes);
  RUN(test_resealed_mutations);
  RUN(test_inconsistent_contents);
  RUN(test_huge_counts);
  RUN(test_versions_and_header);
  RUN(test_section_structure);
  RUN(test_bad_paths);
  rmdir(tmpdir);
  return kiln_test_finish();
}
