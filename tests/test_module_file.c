/* Unit tests of the .kiln module file (runtime/module_file.h) and the public
 * module API (include/kiln/runtime.h, "modules"): CRC-64 check values; round
 * trips of hand-built programs for every target with every field set (code
 * parts, blobs, weights, aliases, in-place pairs); re-serialising a parsed
 * program gives identical bytes; weights 64-byte aligned in the file;
 * unknown optional sections skipped; file write (atomic, via .tmp) and read;
 * info, name and shape accessors; retain/release; wrapping an in-memory
 * program; every allocation failing in turn while parsing. */
#define _GNU_SOURCE
#include <errno.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "kiln/runtime.h"
#include "runtime/module_file.h"
#include "runtime/module_impl.h"
#include "runtime/program.h"
#include "program_util.h"
#include "testing.h"

static kiln_allocator_t sys(void) { return kiln_allocator_system(); }

/* ---- building programs ------------------------------------------------------ */

static void set_kernel(kiln_program_t* p, int32_t k, const char* name, const char* node, const char* op,
                       int32_t n_args, const int32_t* args, const uint8_t* access, int32_t in, int32_t out) {
  pu_kernel(p, k, name, node, op, n_args, args, access, in, out);
  kiln_program_kernel_t* kk = &p->kernels[k];
  for (int d = 0; d < 3; ++d) { /* distinct values, so a round trip that mixes them up shows */
    kk->groups[d] = 1 + d + k;
    kk->local[d] = 4 << d;
  }
  kk->flops = 1000 + k;
  kk->bytes = 4096 + 7 * k;
}

/* x[2,3] (input) + w[3] (const) -> t[2,3]; v = view of t as [6]; relu(v) ->
 * y[6] (in place over v); plus a second constant and a workspace, so every
 * buffer kind, an alias and an in-place pair appear. */
static kiln_program_t* make_program(const char* target) {
  kiln_program_t* p = NULL;
  if (!CHECK_OK(kiln_program_create(sys(), &p))) abort();
  p->model_name = pu_str(p, "tiny.onnx");
  p->target = target;
  p->precision = pu_str(p, "fp32");
  p->options = pu_str(p, "-O1 threads=0 name=\"x y\"");

  p->n_buffers = 7;
  p->buffers = pu_alloc(p, sizeof(kiln_program_buffer_t) * 7);
  const int64_t d23[2] = {2, 3}, d3[1] = {3}, d6[1] = {6}, d5[3] = {1, 1, 5};
  pu_buffer(p, 0, "x", KILN_DTYPE_F32, KILN_PB_INPUT, 2, d23, -1, 0, 0, 0);
  pu_buffer(p, 1, "w", KILN_DTYPE_F32, KILN_PB_CONST, 1, d3, -1, 0, 0, 0);
  pu_buffer(p, 2, "t", KILN_DTYPE_F32, KILN_PB_INTERMEDIATE, 2, d23, -1, 0, 1, 0);
  pu_buffer(p, 3, "v", KILN_DTYPE_F32, KILN_PB_INTERMEDIATE, 1, d6, 2, 1, 1, 0);
  pu_buffer(p, 4, "y", KILN_DTYPE_F32, KILN_PB_OUTPUT, 1, d6, -1, 1, 1, 0);
  pu_buffer(p, 5, "k_i8", KILN_DTYPE_I8, KILN_PB_CONST, 3, d5, -1, -1, -1, 64);
  pu_buffer(p, 6, "scratch", KILN_DTYPE_I64, KILN_PB_TEMP, 1, d3, -1, 1, 1, 0);

  p->n_kernels = 2;
  p->kernels = pu_alloc(p, sizeof(kiln_program_kernel_t) * 2);
  const int32_t a0[3] = {0, 1, 2}, a1[3] = {3, 4, 6};
  const uint8_t c0[3] = {KILN_ARG_READ, KILN_ARG_READ, KILN_ARG_WRITE};
  const uint8_t c1[3] = {KILN_ARG_READ, KILN_ARG_WRITE, KILN_ARG_READ | KILN_ARG_WRITE};
  set_kernel(p, 0, "k0_add", "add_0", "Add", 3, a0, c0, -1, -1);
  set_kernel(p, 1, "k1_relu", "relu/1", "Relu", 3, a1, c1, 0, 1);

  p->n_inputs = 1;
  p->inputs = pu_alloc(p, sizeof(int32_t));
  p->input_names = pu_alloc(p, sizeof(char*));
  p->inputs[0] = 0;
  p->input_names[0] = pu_str(p, "input:0");
  p->n_outputs = 1;
  p->outputs = pu_alloc(p, sizeof(int32_t));
  p->output_names = pu_alloc(p, sizeof(char*));
  p->outputs[0] = 4;
  p->output_names[0] = pu_str(p, "output/relu");

  p->weights_len = 69;
  p->weights = pu_alloc(p, 69);
  for (int i = 0; i < 69; ++i) p->weights[i] = (uint8_t)(i * 37 + 11);

  kiln_program_code_t* c = &p->code;
  /* Vulkan keeps the GLSL as optional text; CPU splits its text in parts. */
  const char* src = "/* prelude */\nvoid k0_add(void){}\nvoid k1_relu(void){}\n/* end */\n";
  c->text = pu_str(p, src);
  c->text_len = strlen(src);
  if (!strcmp(target, "cpu")) {
    uint64_t u1 = (uint64_t)(strstr(src, "void k0") - src), u2 = (uint64_t)(strstr(src, "void k1") - src);
    uint64_t ep = (uint64_t)(strstr(src, "/* end") - src);
    const uint64_t parts[8] = {0, u1, u1, u2 - u1, u2, ep - u2, ep, c->text_len - ep};
    c->n_parts = 4;
    c->parts = pu_alloc(p, sizeof parts);
    memcpy(c->parts, parts, sizeof parts);
  }
  /* Vulkan needs one blob per kernel; the others carry blobs too, to check
   * they survive whatever the target. The second is empty. */
  c->n_blobs = 2;
  c->blobs = pu_alloc(p, sizeof(uint8_t*) * 2);
  c->blob_lens = pu_alloc(p, sizeof(uint64_t) * 2);
  c->blob_lens[0] = 20;
  c->blobs[0] = pu_alloc(p, 20);
  for (int i = 0; i < 20; ++i) c->blobs[0][i] = (uint8_t)(0x03 + i * 5); /* NULs allowed in blobs */
  c->blobs[0][3] = 0;
  c->blob_lens[1] = 0;
  c->blobs[1] = NULL;
  CHECK_OK(kiln_program_validate(p));
  return p;
}

static void check_same_program(const kiln_program_t* a, const kiln_program_t* b) {
  CHECK(strcmp(a->model_name, b->model_name) == 0);
  CHECK(!strcmp(a->target, b->target));
  CHECK(strcmp(a->precision, b->precision) == 0);
  CHECK(strcmp(a->options, b->options) == 0);
  CHECK(a->n_buffers == b->n_buffers);
  for (int32_t i = 0; i < a->n_buffers && i < b->n_buffers; ++i) {
    const kiln_program_buffer_t *x = &a->buffers[i], *y = &b->buffers[i];
    CHECK_MSG(strcmp(x->name, y->name) == 0, "buffer %d name %s vs %s", i, x->name, y->name);
    CHECK(x->dtype == y->dtype && x->kind == y->kind && x->rank == y->rank);
    for (int32_t k = 0; k < x->rank; ++k) CHECK(x->shape[k] == y->shape[k]);
    CHECK(x->bytes == y->bytes && x->alias_of == y->alias_of);
    CHECK(x->first_use == y->first_use && x->last_use == y->last_use);
    CHECK(x->const_offset == y->const_offset);
  }
  CHECK(a->n_kernels == b->n_kernels);
  for (int32_t k = 0; k < a->n_kernels && k < b->n_kernels; ++k) {
    const kiln_program_kernel_t *x = &a->kernels[k], *y = &b->kernels[k];
    CHECK(strcmp(x->name, y->name) == 0 && strcmp(x->node_name, y->node_name) == 0);
    CHECK(strcmp(x->op_type, y->op_type) == 0);
    CHECK(x->n_args == y->n_args);
    for (int32_t j = 0; j < x->n_args && j < y->n_args; ++j)
      CHECK(x->args[j] == y->args[j] && x->access[j] == y->access[j]);
    for (int d = 0; d < 3; ++d) CHECK(x->groups[d] == y->groups[d] && x->local[d] == y->local[d]);
    CHECK(x->flops == y->flops && x->bytes == y->bytes);
    CHECK(x->inplace_in == y->inplace_in && x->inplace_out == y->inplace_out);
  }
  CHECK(a->n_inputs == b->n_inputs && a->n_outputs == b->n_outputs);
  for (int32_t i = 0; i < a->n_inputs && i < b->n_inputs; ++i)
    CHECK(a->inputs[i] == b->inputs[i] && strcmp(a->input_names[i], b->input_names[i]) == 0);
  for (int32_t i = 0; i < a->n_outputs && i < b->n_outputs; ++i)
    CHECK(a->outputs[i] == b->outputs[i] && strcmp(a->output_names[i], b->output_names[i]) == 0);
  CHECK(a->weights_len == b->weights_len);
  if (a->weights_len == b->weights_len && a->weights_len)
    CHECK(memcmp(a->weights, b->weights, (size_t)a->weights_len) == 0);
  const kiln_program_code_t *c = &a->code, *d = &b->code;
  CHECK(c->text_len == d->text_len);
  if (c->text_len == d->text_len && c->text_len) {
    CHECK(memcmp(c->text, d->text, (size_t)c->text_len) == 0);
    CHECK(d->text[d->text_len] == 0); /* the reader NUL-terminates */
  }
  CHECK(c->n_parts == d->n_parts);
  for (int32_t i = 0; i < 2 * c->n_parts && c->n_parts == d->n_parts; ++i) CHECK(c->parts[i] == d->parts[i]);
  CHECK(c->n_blobs == d->n_blobs);
  for (int32_t i = 0; i < c->n_blobs && c->n_blobs == d->n_blobs; ++i) {
    CHECK(c->blob_lens[i] == d->blob_lens[i]);
    if (c->blob_lens[i] == d->blob_lens[i] && c->blob_lens[i])
      CHECK(memcmp(c->blobs[i], d->blobs[i], (size_t)c->blob_lens[i]) == 0);
  }
}


/* ---- tests ----------------------------------------------------------------- */

static void test_crc64(void) {
  CHECK(kiln_module_crc64(0, "123456789", 9) == 0x995DC9BBDF1939FAull);
  CHECK(kiln_module_crc64(0, "", 0) == 0);
  /* Incremental == one shot, across the 8-byte fast path boundaries. */
  uint8_t buf[1000];
  for (int i = 0; i < 1000; ++i) buf[i] = (uint8_t)(i * 131 + 7);
  uint64_t whole = kiln_module_crc64(0, buf, sizeof buf);
  for (size_t cut = 0; cut <= 17; ++cut) {
    uint64_t c = kiln_module_crc64(0, buf, cut);
    CHECK(kiln_module_crc64(c, buf + cut, sizeof buf - cut) == whole);
  }
  /* The folding path (carry-less multiplication, where the CPU has it) is
   * the tables' CRC on every length around its 16- and 64-byte steps, at
   * every alignment, from any starting state. */
  enum { BIG = 4096 + 64 };
  static uint8_t big[BIG + 16];
  uint64_t r = 0x9E3779B97F4A7C15ull;
  for (int i = 0; i < BIG + 16; ++i) {
    r ^= r << 13, r ^= r >> 7, r ^= r << 17;
    big[i] = (uint8_t)r;
  }
  int bad = 0;
  for (size_t off = 0; off < 16; ++off)
    for (size_t n = 0; n <= 300; ++n)
      bad += kiln_module_crc64(off * 77, big + off, n) != kiln_module_crc64_tables(off * 77, big + off, n);
  for (size_t n = BIG - 40; n <= BIG; ++n)
    bad += kiln_module_crc64(0, big + 3, n) != kiln_module_crc64_tables(0, big + 3, n);
  CHECK_MSG(bad == 0, "%d lengths where the folded CRC is not the tables'", bad);
  CHECK(kiln_module_crc64_tables(0, "123456789", 9) == 0x995DC9BBDF1939FAull);
}

static void round_trip(const char* target) {
  kiln_program_t* p = make_program(target);
  uint8_t* bytes = NULL;
  size_t len = 0;
  if (!CHECK_OK(kiln_module_serialize(p, sys(), &bytes, &len))) abort();
  CHECK(len > KILN_MODULE_HEADER_LEN && len % 8 == 0);
  CHECK(memcmp(bytes, KILN_MODULE_MAGIC, 8) == 0);
  uint64_t total;
  memcpy(&total, bytes + KILN_MODULE_OFF_TOTAL_LEN, 8);
  CHECK(total == len);

  /* Weights start at a multiple of 64 in the file. */
  uint64_t wlen = 0;
  size_t w = pu_find_section(bytes, len, KILN_MODULE_TAG_WGHT, &wlen);
  CHECK(w != 0);
  if (w) {
    uint32_t pad;
    memcpy(&pad, bytes + w + 8, 4);
    size_t data = w + 16 + pad;
    CHECK_MSG(data % 64 == 0, "weights at file offset %zu", data);
    CHECK(data + p->weights_len <= len && memcmp(bytes + data, p->weights, (size_t)p->weights_len) == 0);
  }

  /* Parse from an exact-size heap copy, so ASan sees any overread. */
  uint8_t* copy = malloc(len);
  memcpy(copy, bytes, len);
  kiln_program_t* q = NULL;
  if (CHECK_OK(kiln_module_parse(copy, len, "rt.kiln", sys(), &q))) {
    check_same_program(p, q);
    uint8_t* again = NULL;
    size_t len2 = 0;
    if (CHECK_OK(kiln_module_serialize(q, sys(), &again, &len2))) {
      CHECK(len2 == len && memcmp(again, bytes, len) == 0);
      kiln_allocator_free(sys(), again);
    }
    kiln_program_destroy(q);
  }
  free(copy);
  kiln_allocator_free(sys(), bytes);
  kiln_program_destroy(p);
}

static void test_round_trip_cpu(void) { round_trip("cpu"); }
static void test_round_trip_opencl(void) { round_trip("opencl"); }
static void test_round_trip_vulkan(void) { round_trip("vulkan"); }

/* A program with nothing in it (no kernels, weights or code) is valid. */
static void test_round_trip_empty(void) {
  kiln_program_t* p = NULL;
  if (!CHECK_OK(kiln_program_create(sys(), &p))) return;
  uint8_t* bytes = NULL;
  size_t len = 0;
  if (CHECK_OK(kiln_module_serialize(p, sys(), &bytes, &len))) {
    kiln_program_t* q = NULL;
    if (CHECK_OK(kiln_module_parse(bytes, len, "empty.kiln", sys(), &q))) {
      CHECK(q->n_buffers == 0 && q->n_kernels == 0 && q->weights_len == 0 && q->code.text_len == 0);
      CHECK(q->model_name && q->model_name[0] == 0);
      uint8_t* again = NULL;
      size_t len2 = 0;
      if (CHECK_OK(kiln_module_serialize(q, sys(), &again, &len2))) {
        CHECK(len2 == len && memcmp(again, bytes, len) == 0);
        kiln_allocator_free(sys(), again);
      }
      kiln_program_destroy(q);
    }
    kiln_allocator_free(sys(), bytes);
  }
  kiln_program_destroy(p);
}

/* A section with an unknown tag and no "required" flag is skipped; one
 * with the flag is refused (see test_bad_module_file for the latter). */
static void test_unknown_section_skipped(void) {
  kiln_program_t* p = make_program("cpu");
  uint8_t* bytes = NULL;
  size_t len = 0;
  if (!CHECK_OK(kiln_module_serialize(p, sys(), &bytes, &len))) abort();
  /* Insert "XTRA" (11 bytes of payload, padded to 16) right after the header. */
  size_t extra = 16 + 16;
  uint8_t* b = calloc(1, len + extra);
  memcpy(b, bytes, KILN_MODULE_HEADER_LEN);
  uint32_t tag = KILN_MODULE_TAG('X', 'T', 'R', 'A'), flags = 0;
  uint64_t plen = 11;
  memcpy(b + 48, &tag, 4);
  memcpy(b + 52, &flags, 4);
  memcpy(b + 56, &plen, 8);
  memcpy(b + 64, "future data", 11);
  memcpy(b + 48 + extra, bytes + 48, len - 48);
  uint64_t total = len + extra;
  uint32_t sections;
  memcpy(b + KILN_MODULE_OFF_TOTAL_LEN, &total, 8);
  memcpy(&sections, b + KILN_MODULE_OFF_SECTIONS, 4);
  ++sections;
  memcpy(b + KILN_MODULE_OFF_SECTIONS, &sections, 4);
  kiln_module_reseal(b, len + extra);
  kiln_program_t* q = NULL;
  if (CHECK_OK(kiln_module_parse(b, len + extra, "extra.kiln", sys(), &q))) {
    check_same_program(p, q);
    kiln_program_destroy(q);
  }
  /* ...and not when it is marked required. */
  flags = KILN_MODULE_SECTION_REQUIRED;
  memcpy(b + 52, &flags, 4);
  kiln_module_reseal(b, len + extra);
  CHECK_ERR(kiln_module_parse(b, len + extra, "extra.kiln", sys(), &q), KILN_PARSE_ERROR, "XTRA");
  free(b);
  kiln_allocator_free(sys(), bytes);
  kiln_program_destroy(p);
}

static char tmpdir[64];

static const char* tmp_path(const char* name) {
  static char buf[8][512];
  static int k = 0;
  k = (k + 1) % 8;
  snprintf(buf[k], sizeof buf[k], "%s/%s", tmpdir, name);
  return buf[k];
}

static bool exists(const char* path) {
  struct stat st;
  return stat(path, &st) == 0;
}

static void check_info(kiln_module_t* m, const kiln_program_t* p, uint32_t version) {
  kiln_module_info_t info;
  kiln_module_info(m, &info);
  CHECK(strcmp(info.model_name, "tiny.onnx") == 0);
  CHECK(strcmp(info.target, "cpu") == 0);
  CHECK(strcmp(info.precision, "fp32") == 0);
  CHECK(strcmp(info.options, p->options) == 0);
  CHECK(info.n_inputs == 1 && info.n_outputs == 1 && info.n_kernels == 2 && info.n_buffers == 7);
  CHECK(info.weights_bytes == 69);
  CHECK(info.code_bytes == p->code.text_len + 20);
  CHECK(info.format_version == version);

  CHECK(strcmp(kiln_module_input_name(m, 0), "input:0") == 0);
  CHECK(strcmp(kiln_module_output_name(m, 0), "output/relu") == 0);
  CHECK(kiln_module_input_name(m, 1) == NULL && kiln_module_input_name(m, -1) == NULL);
  CHECK(kiln_module_output_name(m, 1) == NULL && kiln_module_output_name(NULL, 0) == NULL);
  kiln_dtype_t dt = KILN_DTYPE_UNDEFINED;
  kiln_shape_t s = kiln_module_input_shape(m, 0, &dt);
  CHECK(dt == KILN_DTYPE_F32 && s.rank == 2 && s.dims[0] == 2 && s.dims[1] == 3);
  s = kiln_module_output_shape(m, 0, &dt);
  CHECK(dt == KILN_DTYPE_F32 && s.rank == 1 && s.dims[0] == 6);
  s = kiln_module_output_shape(m, 0, NULL);
  CHECK(s.rank == 1);
  s = kiln_module_input_shape(m, 5, &dt);
  CHECK(s.rank == -1 && dt == KILN_DTYPE_UNDEFINED);
  s = kiln_module_output_shape(m, -3, &dt);
  CHECK(s.rank == -1 && dt == KILN_DTYPE_UNDEFINED);
  CHECK(kiln_module_program(m) != NULL && kiln_module_program(m)->n_kernels == 2);
}

static void test_file_write_read(void) {
  kiln_program_t* p = make_program("cpu");
  const char* path = tmp_path("tiny.kiln");
  if (!CHECK_OK(kiln_module_write_file(p, path))) abort();
  char tmp[600];
  snprintf(tmp, sizeof tmp, "%s.tmp", path);
  CHECK(exists(path) && !exists(tmp));
  /* Writing again replaces the file. */
  CHECK_OK(kiln_module_write_file(p, path));
  CHECK(!exists(tmp));

  kiln_module_t* m = NULL;
  if (CHECK_OK(kiln_module_load_file(path, sys(), &m))) {
    check_info(m, p, KILN_MODULE_FORMAT_VERSION);
    check_same_program(p, kiln_module_program(m));
    struct stat st;
    CHECK(stat(path, &st) == 0 && (size_t)st.st_size == m->file_bytes);
    /* Mapped: the weights are the file's bytes where they lie, 64-byte
     * aligned (the writer pads the 'WGHT' payload to 64 in the file). */
    const kiln_program_t* q = kiln_module_program(m);
    CHECK(m->map != NULL && m->map_len == m->file_bytes && q->weights_borrowed);
    CHECK(q->weights >= (const uint8_t*)m->map && q->weights + q->weights_len <= (const uint8_t*)m->map + m->map_len);
    CHECK(((uintptr_t)q->weights & 63) == 0);
    /* Shared: two references, released twice. */
    kiln_module_retain(m);
    CHECK(atomic_load(&m->refs) == 2);
    kiln_module_release(m);
    CHECK(atomic_load(&m->refs) == 1);
    kiln_module_release(m);
  }
  kiln_module_release(NULL);
  kiln_module_retain(NULL);

  /* no_map: read and copied, the same program. */
  kiln_module_load_options_t lo = {.no_map = true};
  m = NULL;
  if (CHECK_OK(kiln_module_load_file_opts(path, &lo, sys(), &m))) {
    check_info(m, p, KILN_MODULE_FORMAT_VERSION);
    check_same_program(p, kiln_module_program(m));
    CHECK(m->map == NULL && !kiln_module_program(m)->weights_borrowed);
    kiln_module_release(m);
  }

  /* The same bytes from memory. */
  uint8_t* bytes = NULL;
  size_t len = 0;
  if (CHECK_OK(kiln_module_serialize(p, sys(), &bytes, &len))) {
    m = NULL;
    if (CHECK_OK(kiln_module_load_memory(bytes, len, "memory", sys(), &m))) {
      check_info(m, p, KILN_MODULE_FORMAT_VERSION);
      kiln_module_release(m);
    }
    kiln_allocator_free(sys(), bytes);
  }
  kiln_module_info_t info;
  kiln_module_info(NULL, &info);
  CHECK(info.n_kernels == 0 && info.model_name && info.target);
  kiln_program_destroy(p);
}

/* A failed write leaves neither a half file nor the .tmp behind. */
static void test_write_failures(void) {
  kiln_program_t* p = make_program("cpu");
  const char* missing = tmp_path("no/such/dir/m.kiln");
  CHECK_ERR(kiln_module_write_file(p, missing), KILN_IO_ERROR, missing);
  CHECK(!exists(missing));

  /* |path| is a directory: the .tmp is written but the rename fails. */
  const char* dir = tmp_path("a_dir");
  CHECK(mkdir(dir, 0755) == 0);
  CHECK_ERR(kiln_module_write_file(p, dir), KILN_IO_ERROR, dir);
  char tmp[600];
  snprintf(tmp, sizeof tmp, "%s.tmp", dir);
  struct stat st;
  CHECK(stat(dir, &st) == 0 && S_ISDIR(st.st_mode) && !exists(tmp));
  rmdir(dir);

  /* An invalid program is refused before anything is written. */
  const char* path = tmp_path("bad.kiln");
  p->kernels[0].args[0] = 99;
  CHECK_ERR(kiln_module_write_file(p, path), KILN_PARSE_ERROR, "argument");
  CHECK(!exists(path));
  kiln_program_destroy(p);
}

static void test_wrap(void) {
  kiln_program_t* p = make_program("cpu");
  kiln_module_t* m = NULL;
  if (CHECK_OK(kiln_module_wrap(p, &m))) {
    check_info(m, kiln_module_program(m), 0);
    CHECK(m->file_bytes == 0);
    kiln_module_release(m);
  }
  /* An invalid program is refused (and destroyed: no leak under ASan). */
  p = make_program("cpu");
  p->buffers[3].alias_of = 3;
  m = NULL;
  CHECK_ERR(kiln_module_wrap(p, &m), KILN_PARSE_ERROR, "alias");
  CHECK(m == NULL);
  CHECK_ERR(kiln_module_wrap(NULL, &m), KILN_INVALID_ARGUMENT, NULL);
}

/* An allocator that fails the n-th allocation: parsing must report
 * OUT_OF_MEMORY for every n and leak nothing (checked by ASan). */
typedef struct {
  int countdown;
  int live;
} fail_state_t;

static void* fail_alloc(void* self, size_t n) {
  fail_state_t* s = self;
  if (s->countdown-- == 0) return NULL;
  void* p = calloc(1, n);
  if (p) s->live++;
  return p;
}
static void* fail_realloc(void* self, void* p, size_t n) {
  fail_state_t* s = self;
  if (s->countdown-- == 0) return NULL;
  return realloc(p, n);
}
static void fail_free(void* self, void* p) {
  fail_state_t* s = self;
  s->live--;
  free(p);
}

static void test_parse_out_of_memory(void) {
  kiln_program_t* p = make_program("cpu");
  uint8_t* bytes = NULL;
  size_t len = 0;
  if (!CHECK_OK(kiln_module_serialize(p, sys(), &bytes, &len))) abort();
  int n;
  for (n = 0; n < 10000; ++n) {
    fail_state_t st = {n, 0};
    kiln_allocator_t a = {&st, fail_alloc, fail_realloc, fail_free};
    kiln_module_t* m = NULL;
    kiln_status_t s = kiln_module_load_memory(bytes, len, "oom.kiln", a, &m);
    if (!s) {
      check_same_program(p, kiln_module_program(m));
      kiln_module_release(m);
      CHECK(st.live == 0);
      break;
    }
    CHECK_MSG(kiln_status_code(s) == KILN_OUT_OF_MEMORY, "allocation %d: %s", n, kiln_status_message(s));
    CHECK_MSG(strstr(kiln_status_message(s), "oom.kiln") != NULL, "allocation %d: %s", n,
              kiln_status_message(s));
    CHECK_MSG(st.live == 0, "allocation %d failing leaks %d blocks", n, st.live);
    kiln_status_free(s);
  }
  CHECK(n > 20 && n < 10000);
  /* The serialiser too. */
  fail_state_t st = {0, 0};
  kiln_allocator_t a = {&st, fail_alloc, fail_realloc, fail_free};
  uint8_t* out = NULL;
  size_t out_len = 0;
  CHECK_ERR(kiln_module_serialize(p, a, &out, &out_len), KILN_OUT_OF_MEMORY, "tiny.onnx");
  kiln_allocator_free(sys(), bytes);
  kiln_program_destroy(p);
}

/* The writer refuses what the reader would refuse. */
static void test_serialize_refuses(void) {
  kiln_program_t* p = make_program("cpu");
  uint8_t* out = NULL;
  size_t len = 0;
  p->code.text[5] = 0;
  CHECK_ERR(kiln_module_serialize(p, sys(), &out, &len), KILN_INVALID_ARGUMENT, "NUL");
  p->code.text[5] = 'x';
  p->n_kernels = -1;
  CHECK_ERR(kiln_module_serialize(p, sys(), &out, &len), KILN_INVALID_ARGUMENT, "kernel table");
  p->n_kernels = 2;
  p->buffers[2].rank = 9;
  CHECK_ERR(kiln_module_serialize(p, sys(), &out, &len), KILN_INVALID_ARGUMENT, "rank");
  p->buffers[2].rank = 2;
  CHECK_OK(kiln_module_serialize(p, sys(), &out, &len));
  kiln_allocator_free(sys(), out);
  kiln_program_destroy(p);
}

/* GEMM descriptors: validated, kept by a round trip (optional section),
 * refused when inconsistent. */
static void test_gemm_descriptor(void) {
  kiln_program_t* p = make_program("opencl");
  /* k0_add's parameters x[2,3], w[3], t[2,3]: t[:, 0] = x @ w as a 2x1x3 GEMM */
  kiln_program_gemm_t g = {.valid = true, .M = 2, .N = 1, .K = 3, .batch = 1, .lda = 3, .ldb = 1, .ldy = 3,
                           .alpha = 0.5f, .a = 0, .b = 1, .y = 2};
  p->kernels[0].gemm = g;
  CHECK_OK(kiln_program_validate(p));
  uint8_t* bytes = NULL;
  size_t len = 0;
  kiln_program_t* q = NULL;
  if (CHECK_OK(kiln_module_serialize(p, sys(), &bytes, &len)) &&
      CHECK_OK(kiln_module_parse(bytes, len, "gemm", sys(), &q))) {
    const kiln_program_gemm_t* h = &q->kernels[0].gemm;
    CHECK(h->valid && h->M == 2 && h->N == 1 && h->K == 3 && h->batch == 1 && h->lda == 3 && h->ldb == 1 &&
          h->ldy == 3 && h->alpha == 0.5f && h->a == 0 && h->b == 1 && h->y == 2 && !h->trans_a && !h->trans_b);
    CHECK(!q->kernels[1].gemm.valid);
  }
  kiln_program_destroy(q);
  kiln_allocator_free(sys(), bytes);
  /* inconsistent descriptors */
  p->kernels[0].gemm.y = 0;
  CHECK_ERR(kiln_program_validate(p), KILN_PARSE_ERROR, "GEMM parameters");
  p->kernels[0].gemm = g;
  p->kernels[0].gemm.y = 1; /* w is read-only and too small */
  p->kernels[0].gemm.b = 2;
  CHECK_ERR(kiln_program_validate(p), KILN_PARSE_ERROR, "does not write");
  p->kernels[0].gemm = g;
  p->kernels[0].gemm.lda = 2;
  CHECK_ERR(kiln_program_validate(p), KILN_PARSE_ERROR, "leading dimension");
  p->kernels[0].gemm = g;
  p->kernels[0].gemm.M = 3;
  CHECK_ERR(kiln_program_validate(p), KILN_PARSE_ERROR, "spans");
  kiln_program_destroy(p);
}

/* The plugin ops a program uses (section 'PLUG', written only when there
 * are some) round-trip; loading the module while no plugin provides them
 * is NOT_FOUND naming each with its version; a PLUG entry of version 0 is
 * a PARSE_ERROR. */
static void test_plugin_section(void) {
  kiln_program_t* p = make_program("cpu");
  p->n_plugin_ops = 2;
  p->plugin_ops = pu_alloc(p, 2 * sizeof(kiln_program_plugin_op_t));
  p->plugin_ops[0] = (kiln_program_plugin_op_t){pu_str(p, "com.example"), pu_str(p, "Fused"), 3};
  p->plugin_ops[1] = (kiln_program_plugin_op_t){pu_str(p, "com.example"), pu_str(p, "Act"), 1};
  uint8_t* bytes = NULL;
  size_t len = 0;
  if (!CHECK_OK(kiln_module_serialize(p, sys(), &bytes, &len))) abort();
  uint64_t plen = 0;
  const size_t at = pu_find_section(bytes, len, KILN_MODULE_TAG_PLUG, &plen);
  CHECK(at != 0);
  kiln_program_t* q = NULL;
  if (CHECK_OK(kiln_module_parse(bytes, len, "plug.kiln", sys(), &q))) {
    CHECK(q->n_plugin_ops == 2 && !strcmp(q->plugin_ops[0].name, "Fused") && q->plugin_ops[0].version == 3 &&
          !strcmp(q->plugin_ops[1].domain, "com.example"));
    kiln_program_destroy(q);
  }
  kiln_module_t* m = NULL;
  kiln_status_t st = kiln_module_load_memory(bytes, len, "plug.kiln", sys(), &m);
  CHECK(st && kiln_status_code(st) == KILN_NOT_FOUND);
  if (st) {
    const char* msg = kiln_status_message(st);
    CHECK_MSG(strstr(msg, "plug.kiln") && strstr(msg, "com.example/Fused version 3") &&
                  strstr(msg, "com.example/Act version 1") && strstr(msg, "--plugin"), "%s", msg);
    kiln_status_free(st);
  }
  /* version 0 of the first entry: u64 count, then u32 len + "com.example", u32 len + "Fused", i32 version */
  if (at) {
    const size_t v = at + 8 + 4 + 11 + 4 + 5;
    memset(bytes + v, 0, 4);
    kiln_module_reseal(bytes, len);
    CHECK_ERR(kiln_module_parse(bytes, len, "plug.kiln", sys(), &q), KILN_PARSE_ERROR, "PLUG");
  }
  kiln_allocator_free(sys(), bytes);
  kiln_program_destroy(p);
}

/* 'TUNE': the points kernels were compiled with come back on their
 * kernels; a kernel out of range or named twice is refused, naming the
 * section. */
static void test_tune_section(void) {
  kiln_program_t* p = make_program("cpu");
  p->kernels[0].tuned = pu_str(p, "gemm 1,16,16,1,2,112,1,1, 1.29x when measured, 8b39e41e5ce9db24");
  uint8_t* bytes = NULL;
  size_t len = 0;
  if (!CHECK_OK(kiln_module_serialize(p, sys(), &bytes, &len))) abort();
  uint64_t plen = 0;
  const size_t at = pu_find_section(bytes, len, KILN_MODULE_TAG_TUNE, &plen);
  CHECK(at != 0);
  kiln_program_t* q = NULL;
  if (CHECK_OK(kiln_module_parse(bytes, len, "tune.kiln", sys(), &q))) {
    CHECK(q->kernels[0].tuned && !strcmp(q->kernels[0].tuned, p->kernels[0].tuned));
    for (int32_t k = 1; k < q->n_kernels; ++k) CHECK(q->kernels[k].tuned == NULL);
    kiln_program_destroy(q);
  }
  /* payload: u64 count, i32 kernel, str point: the kernel out of range */
  if (at) {
    const int32_t bad = p->n_kernels;
    memcpy(bytes + at + 8, &bad, 4);
    kiln_module_reseal(bytes, len);
    CHECK_ERR(kiln_module_parse(bytes, len, "tune.kiln", sys(), &q), KILN_PARSE_ERROR, "TUNE");
  }
  kiln_allocator_free(sys(), bytes);
  /* a kernel named twice */
  kiln_program_destroy(p);
  p = make_program("cpu");
  for (int32_t k = 0; k < p->n_kernels && k < 2; ++k) p->kernels[k].tuned = pu_str(p, "point");
  if (p->n_kernels >= 2 && CHECK_OK(kiln_module_serialize(p, sys(), &bytes, &len))) {
    const size_t at2 = pu_find_section(bytes, len, KILN_MODULE_TAG_TUNE, &plen);
    const int32_t zero = 0;
    if (at2) {
      memcpy(bytes + at2 + 8 + 4 + 4 + 5, &zero, 4); /* the second entry names kernel 0 too */
      kiln_module_reseal(bytes, len);
      CHECK_ERR(kiln_module_parse(bytes, len, "tune.kiln", sys(), &q), KILN_PARSE_ERROR, "twice");
    }
    kiln_allocator_free(sys(), bytes);
  }
  kiln_program_destroy(p);
}

/* kiln_module_write_file streams the module (no module-sized buffer): the
 * file holds exactly what kiln_module_serialize returns, a native object
 * larger than the writer's stage included; kiln_module_write_file_then
 * writes everything before the native code, waits, then appends it, with
 * the same bytes; a failing wait fails the write and leaves no file, and
 * the wait runs even when the write fails before reaching it. */
static uint8_t* slurp(const char* path, size_t* len) {
  FILE* f = fopen(path, "rb");
  if (!f) return NULL;
  fseek(f, 0, SEEK_END);
  long n = ftell(f);
  fseek(f, 0, SEEK_SET);
  uint8_t* b = malloc(n > 0 ? (size_t)n : 1);
  *len = b && n > 0 && fread(b, 1, (size_t)n, f) == (size_t)n ? (size_t)n : 0;
  fclose(f);
  return b;
}

typedef struct native_wait_s {
  kiln_program_t* prog;
  size_t len;
  int calls;
  bool fail;
} native_wait_t;

static void add_native(kiln_program_t* p, size_t len) {
  p->code.native = pu_alloc(p, sizeof(kiln_program_native_t));
  memset(p->code.native, 0, sizeof(kiln_program_native_t));
  p->code.native[0].isa = pu_str(p, "x86-64-v3");
  p->code.native[0].bytes = pu_alloc(p, len);
  for (size_t i = 0; i < len; ++i) p->code.native[0].bytes[i] = (uint8_t)(i * 7 + 3);
  p->code.native[0].len = len;
  p->code.n_native = 1;
}

static kiln_status_t native_wait(void* arg) {
  native_wait_t* w = arg;
  w->calls++;
  if (w->fail) return kiln_make_status(KILN_DEVICE_ERROR, "the test's native build failed");
  add_native(w->prog, w->len);
  return NULL;
}

static bool file_is_serialized(const kiln_program_t* p, const char* path) {
  uint8_t* want = NULL;
  size_t want_len = 0, got_len = 0;
  if (!CHECK_OK(kiln_module_serialize(p, sys(), &want, &want_len))) return false;
  uint8_t* got = slurp(path, &got_len);
  bool same = got && got_len == want_len && memcmp(got, want, want_len) == 0;
  free(got);
  kiln_allocator_free(sys(), want);
  return same;
}

static void test_streamed_write(void) {
  const size_t big = (size_t)700 << 10; /* past the 256 KB stage: written straight from the program */
  kiln_program_t* p = make_program("cpu");
  add_native(p, big);
  const char* path = tmp_path("stream.kiln");
  if (CHECK_OK(kiln_module_write_file(p, path))) CHECK(file_is_serialized(p, path));
  kiln_program_destroy(p);

  for (int k = 0; k < 2; ++k) { /* a small object, then a large one */
    p = make_program("cpu");
    native_wait_t w = {p, k ? big : 4096, 0, false};
    if (CHECK_OK(kiln_module_write_file_then(p, path, native_wait, &w))) CHECK(file_is_serialized(p, path));
    CHECK(w.calls == 1 && p->code.n_native == 1);
    kiln_program_destroy(p);
  }

  p = make_program("cpu");
  native_wait_t w = {p, 4096, 0, true};
  const char* failed = tmp_path("failed.kiln");
  CHECK_ERR(kiln_module_write_file_then(p, failed, native_wait, &w), KILN_DEVICE_ERROR, "native build failed");
  CHECK(w.calls == 1 && !exists(failed));
  char tmp_name[600];
  snprintf(tmp_name, sizeof tmp_name, "%s.tmp", failed);
  CHECK(!exists(tmp_name));
  w.fail = false;
  w.calls = 0;
  CHECK_ERR(kiln_module_write_file_then(p, tmp_path("no/such/dir.kiln"), native_wait, &w), KILN_IO_ERROR, "cannot create");
  CHECK(w.calls == 1);
  kiln_program_destroy(p);
  unlink(path);
}

int main(void) {
  snprintf(tmpdir, sizeof tmpdir, "/tmp/kiln_module_XXXXXX");
  if (!mkdtemp(tmpdir)) {
    perror("mkdtemp");
    return 1;
  }
  RUN(test_crc64);
  RUN(test_round_trip_cpu);
  RUN(test_round_trip_opencl);
  RUN(test_round_trip_vulkan);
  RUN(test_round_trip_empty);
  RUN(test_unknown_section_skipped);
  RUN(test_file_write_read);
  RUN(test_write_failures);
  RUN(test_wrap);
  RUN(test_parse_out_of_memory);
  RUN(test_serialize_refuses);
  RUN(test_gemm_descriptor);
  RUN(test_plugin_section);
  RUN(test_tune_section);
  RUN(test_streamed_write);
  unlink(tmp_path("tiny.kiln"));
  rmdir(tmpdir);
  return kiln_test_finish();
}
