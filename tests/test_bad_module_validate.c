/* Forged .kiln modules whose checksums are valid (BAD_INPUTS.md row 23):
 * every table field the runtime trusts, changed in a real module, must be a
 * PARSE_ERROR at load that names the buffer or kernel and the numbers --
 * before a session allocates or runs anything.
 *
 * The module is examples/tinycnn.onnx compiled for the target under test
 * (--target cpu|opencl|vulkan, default cpu): convolutions, a GEMM, views,
 * constants, an in-place pair. Each case parses the valid file's program,
 * changes one field, serialises it again (kiln_module_serialize recomputes
 * both checksums, so only validation can catch it) and loads the bytes with
 * kiln_module_load_memory from an exact-size heap copy (ASan sees any
 * overread). The issue's own reproduction -- an intermediate's byte size
 * shrunk in the file and the checksum recomputed, which corrupted the heap
 * on every target -- is done on the bytes, with kiln_module_reseal. Sweeps
 * cover every buffer, every kernel argument and every constant; the valid
 * module loads and runs on the target's device, so a case that fails for an
 * unrelated reason would show. On the CPU, a module whose code lacks a
 * kernel's symbol fails at session creation naming it, leaking nothing. */
#define _GNU_SOURCE
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "frontend/onnx.h"
#include "ir/passes.h"
#include "kiln/runtime.h"
#include "lowering/fuse.h"
#include "lowering/plan.h"
#include "lowering/template.h"
#include "runtime/module_file.h"
#include "runtime/program.h"
#include "targets/program_build.h"
#include "targets/registry.h"
#include "program_util.h"
#include "testing.h"

static kiln_allocator_t sys(void) { return kiln_allocator_system(); }

static const char* g_target = "cpu";
static uint8_t* g_valid;    /* the valid module's bytes */
static size_t g_valid_len;
static const char* const NAME = "forged.kiln";

/* ---- the module --------------------------------------------------------- */

static kiln_program_t* compile_model(const char* path) {
  kiln_graph_t* g = NULL;
  kiln_plan_t* plan = NULL;
  kiln_program_t* prog = NULL;
  const kiln_target_t* t = kiln_target_find(g_target);
  CHECK_MSG(t != NULL, "target %s is not built in", g_target);
  if (!t || !CHECK_OK(kiln_onnx_parse_model(path, NULL, sys(), &g))) return NULL;
  for (int32_t i = 0; i < g->n_inputs; ++i) { /* the batch dim N = 1 */
    kiln_tensor_t* x = &g->tensors[g->inputs[i]];
    for (int32_t d = 0; d < x->shape.rank; ++d)
      if (x->shape.dims[d] < 0) x->shape.dims[d] = 1;
  }
  kiln_plan_options_t po = {t->lowering, 0, 0, 0, 0, 0};
  kiln_template_set_t templates;
  kiln_program_templates(t, &templates);
  if (CHECK_OK(kiln_graph_prepare(g)) && CHECK_OK(kiln_graph_optimize(g, 1, NULL)) &&
      CHECK_OK(kiln_plan_build(g, &po, sys(), &plan)) && CHECK_OK(kiln_plan_fuse(plan, NULL, NULL)) &&
      CHECK_OK(kiln_template_choose(plan, &templates)))
    CHECK_OK(kiln_program_build(plan, t, NULL, sys(), &prog));
  kiln_plan_destroy(plan);
  kiln_graph_destroy(g);
  return prog;
}

/* The valid module's program, parsed afresh (each case edits its own). */
static kiln_program_t* fresh(void) {
  kiln_program_t* p = NULL;
  if (!CHECK_OK(kiln_module_parse(g_valid, g_valid_len, "valid.kiln", sys(), &p))) abort();
  return p;
}

/* Loads |len| bytes from an exact-size copy; expects PARSE_ERROR, the
 * module's name first and every non-NULL needle in the message. */
static bool expect_refused_bytes(const uint8_t* bytes, size_t len, const char* n1, const char* n2,
                                 const char* what) {
  uint8_t* copy = malloc(len);
  memcpy(copy, bytes, len);
  kiln_module_t* m = NULL;
  kiln_status_t s = kiln_module_load_memory(copy, len, NAME, sys(), &m);
  free(copy);
  ++kiln_test_checks;
  if (!s) {
    kiln_test_fail(__FILE__, __LINE__, "%s: the forged module loaded", what);
    kiln_module_release(m);
    return false;
  }
  const char* msg = kiln_status_message(s);
  bool ok = kiln_status_code(s) == KILN_PARSE_ERROR && !strncmp(msg, NAME, strlen(NAME)) &&
            (!n1 || strstr(msg, n1)) && (!n2 || strstr(msg, n2));
  if (!ok)
    kiln_test_fail(__FILE__, __LINE__, "%s: want PARSE_ERROR naming '%s' / '%s', got %s: %s", what,
                   n1 ? n1 : "", n2 ? n2 : "", kiln_status_code_name(kiln_status_code(s)), msg);
  kiln_status_free(s);
  return ok;
}

/* Serialises |p| (checksums recomputed), destroys it and expects refusal. */
static bool expect_refused(kiln_program_t* p, const char* n1, const char* n2, const char* what) {
  uint8_t* bytes = NULL;
  size_t len = 0;
  bool ok = false;
  if (CHECK_OK(kiln_module_serialize(p, sys(), &bytes, &len))) {
    ok = expect_refused_bytes(bytes, len, n1, n2, what);
    kiln_allocator_free(sys(), bytes);
  }
  kiln_program_destroy(p);
  return ok;
}

static uint64_t dense(const kiln_program_buffer_t* b) { return kiln_program_buffer_dense_bytes(b); }

static const char* num(uint64_t v, char* buf) {
  sprintf(buf, "%llu", (unsigned long long)v);
  return buf;
}

/* The first buffer matching |pred| (a root, a view, ...), or -1. */
static int32_t find_buffer(const kiln_program_t* p, bool (*pred)(const kiln_program_t*, int32_t)) {
  for (int32_t i = 0; i < p->n_buffers; ++i)
    if (pred(p, i)) return i;
  return -1;
}
static bool is_intermediate_root(const kiln_program_t* p, int32_t i) {
  const kiln_program_buffer_t* b = &p->buffers[i];
  return b->kind == KILN_PB_INTERMEDIATE && b->alias_of < 0 && b->first_use >= 0 && dense(b) > 0;
}
static bool is_view(const kiln_program_t* p, int32_t i) { return p->buffers[i].alias_of >= 0; }
static bool is_used_const(const kiln_program_t* p, int32_t i) {
  return p->buffers[i].kind == KILN_PB_CONST && p->buffers[i].bytes > 0;
}

/* ---- the reproduction, on the file's bytes --------------------- */

/* Offset of buffer |index|'s u64 byte size in the 'BUFS' section (layout in
 * runtime/module_file.h), or 0. */
static size_t bytes_field(const uint8_t* v, size_t len, int32_t index) {
  uint64_t slen = 0;
  size_t at = pu_find_section(v, len, KILN_MODULE_TAG_BUFS, &slen);
  if (!at) return 0;
  at += 8; /* count */
  for (int32_t i = 0; i <= index; ++i) {
    uint32_t nl;
    int32_t rank;
    memcpy(&nl, v + at, 4);
    at += 4 + nl + 4 + 4; /* name, dtype, kind */
    memcpy(&rank, v + at, 4);
    at += 4 + 8 * (size_t)rank;
    if (i == index) return at;
    at += 8 + 4 + 4 + 4 + 8; /* bytes, alias, first, last, const offset */
  }
  return 0;
}

static void test_shrunk_intermediate_in_file(void) {
  kiln_program_t* p = fresh();
  int32_t i = find_buffer(p, is_intermediate_root);
  CHECK(i >= 0);
  if (i < 0) {
    kiln_program_destroy(p);
    return;
  }
  const uint64_t want = dense(&p->buffers[i]);
  size_t at = bytes_field(g_valid, g_valid_len, i);
  uint64_t have = 0;
  if (at) memcpy(&have, g_valid + at, 8);
  CHECK_MSG(at && have == p->buffers[i].bytes, "bytes of buffer %d not found in the file", (int)i);
  uint8_t* b = malloc(g_valid_len);
  const uint64_t sizes[3] = {want / 2, want - 1, 0};
  for (int k = 0; k < 3 && at; ++k) {
    memcpy(b, g_valid, g_valid_len);
    memcpy(b + at, &sizes[k], 8);
    kiln_module_reseal(b, g_valid_len);
    char n1[200], n2[32], what[64];
    snprintf(n1, sizeof n1, "buffer '%s' spans %llu bytes", p->buffers[i].name, (unsigned long long)sizes[k]);
    snprintf(what, sizeof what, "intermediate shrunk to %llu in the file", (unsigned long long)sizes[k]);
    expect_refused_bytes(b, g_valid_len, n1, num(want, n2), what);
  }
  free(b);
  kiln_program_destroy(p);
}

/* ---- sweeps ------------------------------------------------------------- */

/* Every buffer: fewer bytes than its shape, a bigger shape, a wider dtype,
 * a negative dim, dims whose product overflows, bytes above the cap. */
static void test_every_buffer(void) {
  kiln_program_t* v = fresh();
  const int32_t n = v->n_buffers;
  int checked = 0;
  for (int32_t i = 0; i < n; ++i) {
    const kiln_program_buffer_t* b0 = &v->buffers[i];
    const char* nm = b0->name;
    const uint64_t d = dense(b0), esz = kiln_dtype_size(b0->dtype);
    char what[160], n1[200], n2[32];
    const bool is_const = b0->kind == KILN_PB_CONST;
    if (is_const && b0->bytes == 0) continue; /* carries nothing: nothing to shrink */
    if (d > 0) {
      kiln_program_t* p = fresh();
      p->buffers[i].bytes = d - esz;
      snprintf(what, sizeof what, "buffer %d '%s' one element short", (int)i, nm);
      snprintf(n1, sizeof n1, is_const ? "constant '%s' holds %llu bytes" : "buffer '%s' spans %llu bytes", nm,
               (unsigned long long)(d - esz));
      checked += expect_refused(p, n1, num(d, n2), what);

      if (b0->rank > 0) {
        p = fresh();
        p->buffers[i].shape[0] += 1;
        snprintf(what, sizeof what, "buffer %d '%s' with dim 0 + 1", (int)i, nm);
        snprintf(n1, sizeof n1, "'%s'", nm);
        expect_refused(p, n1, "needs", what);
      }
      if (esz < 8) {
        p = fresh();
        p->buffers[i].dtype = KILN_DTYPE_I64;
        snprintf(what, sizeof what, "buffer %d '%s' as i64", (int)i, nm);
        snprintf(n1, sizeof n1, "'%s'", nm);
        expect_refused(p, n1, "i64 [", what);
      }
    }
    if (is_const) {
      kiln_program_t* p = fresh();
      p->buffers[i].bytes += esz;
      p->buffers[i].const_offset = 0;
      snprintf(what, sizeof what, "constant %d '%s' one element long", (int)i, nm);
      snprintf(n1, sizeof n1, "constant '%s' holds %llu bytes", nm, (unsigned long long)(b0->bytes + esz));
      expect_refused(p, n1, NULL, what);
    }
    if (b0->rank > 0) {
      kiln_program_t* p = fresh();
      p->buffers[i].shape[0] = -1;
      snprintf(what, sizeof what, "buffer %d '%s' dim -1", (int)i, nm);
      snprintf(n1, sizeof n1, "buffer '%s' has dim 0 = -1", nm);
      expect_refused(p, n1, NULL, what);

      p = fresh();
      p->buffers[i].rank = 3;
      p->buffers[i].shape[0] = p->buffers[i].shape[1] = p->buffers[i].shape[2] = 1ll << 31;
      snprintf(what, sizeof what, "buffer %d '%s' dims 2^31 x 2^31 x 2^31", (int)i, nm);
      snprintf(n1, sizeof n1, "buffer '%s' (%s [2147483648,2147483648,2147483648]) needs more than the", nm,
               kiln_dtype_name(b0->dtype));
      expect_refused(p, n1, "-byte buffer limit", what);
    }
    kiln_program_t* p = fresh();
    p->buffers[i].bytes = KILN_PROGRAM_MAX_BUFFER_BYTES + 1;
    snprintf(what, sizeof what, "buffer %d '%s' above the cap", (int)i, nm);
    snprintf(n1, sizeof n1, "'%s'", nm);
    expect_refused(p, n1, num(KILN_PROGRAM_MAX_BUFFER_BYTES + 1, n2), what);

    p = fresh();
    p->buffers[i].first_use = p->n_kernels;
    snprintf(what, sizeof what, "buffer %d '%s' first use past the last kernel", (int)i, nm);
    snprintf(n1, sizeof n1, "buffer '%s' has lifetime [%d,", nm, (int)p->n_kernels);
    expect_refused(p, n1, NULL, what);

    p = fresh();
    p->buffers[i].alias_of = n;
    snprintf(what, sizeof what, "buffer %d '%s' aliasing buffer %d", (int)i, nm, (int)n);
    snprintf(n1, sizeof n1, "buffer '%s' aliases buffer %d", nm, (int)n);
    expect_refused(p, n1, NULL, what);
  }
  CHECK_MSG(checked > 0, "no buffer checked");
  kiln_program_destroy(v);
}

/* Views: one that spans more than its root; a cycle. */
static void test_views(void) {
  kiln_program_t* p = fresh();
  int32_t i = find_buffer(p, is_view);
  CHECK_MSG(i >= 0, "the %s module has no view (Flatten/Reshape)", g_target);
  if (i < 0) {
    kiln_program_destroy(p);
    return;
  }
  int32_t r = kiln_program_root(p, i);
  char n1[200], n2[200];
  p->buffers[i].bytes = p->buffers[r].bytes + 4;
  snprintf(n1, sizeof n1, "buffer '%s' (%llu bytes) aliases a smaller root '%s'", p->buffers[i].name,
           (unsigned long long)p->buffers[i].bytes, p->buffers[r].name);
  expect_refused(p, n1, NULL, "view larger than its root");

  p = fresh();
  p->buffers[r].alias_of = i;
  snprintf(n2, sizeof n2, "alias cycle");
  expect_refused(p, n2, NULL, "alias cycle");

  /* A view of a constant is read in place (an Identity of a weight at
   * -O0), so nothing may write through one: not a kernel (the model's
   * output made a view of the largest constant) and not the session (an
   * input made one). */
  p = fresh();
  int32_t c = -1;
  for (int32_t j = 0; j < p->n_buffers; ++j)
    if (is_used_const(p, j) && (c < 0 || p->buffers[j].bytes > p->buffers[c].bytes)) c = j;
  const int32_t o = p->n_outputs ? p->outputs[0] : -1, in = p->n_inputs ? p->inputs[0] : -1;
  const bool fits = c >= 0 && o >= 0 && in >= 0 && p->buffers[o].bytes <= p->buffers[c].bytes &&
                    p->buffers[in].bytes <= p->buffers[c].bytes;
  CHECK_MSG(fits, "the %s module has no constant as large as its input and output", g_target);
  if (!fits) {
    kiln_program_destroy(p);
    return;
  }
  p->buffers[o].alias_of = c;
  expect_refused(p, "writes a constant", NULL, "output aliasing a constant");
  p = fresh();
  p->buffers[in].alias_of = c;
  snprintf(n1, sizeof n1, "aliases constant %d", (int)c);
  expect_refused(p, n1, NULL, "input aliasing a constant");
}

/* Constants: ranges outside the weights, including offsets that overflow
 * when added to the length. */
static void test_constant_ranges(void) {
  kiln_program_t* v = fresh();
  int checked = 0;
  for (int32_t i = 0; i < v->n_buffers; ++i) {
    if (!is_used_const(v, i)) continue;
    const char* nm = v->buffers[i].name;
    const uint64_t offs[3] = {v->weights_len - v->buffers[i].bytes + 1, v->weights_len + 64, UINT64_MAX - 3};
    for (int k = 0; k < 3; ++k) {
      kiln_program_t* p = fresh();
      p->buffers[i].const_offset = offs[k];
      char n1[200], what[160], n2[32];
      snprintf(n1, sizeof n1, "constant '%s' (weights bytes [%llu, +%llu)) is past the weights' end", nm,
               (unsigned long long)offs[k], (unsigned long long)v->buffers[i].bytes);
      snprintf(what, sizeof what, "constant '%s' at offset %llu", nm, (unsigned long long)offs[k]);
      checked += expect_refused(p, n1, num(v->weights_len, n2), what);
    }
  }
  CHECK_MSG(checked > 0, "no constant in the module");
  /* A constant that carries no bytes but is read by a kernel. */
  int32_t c = find_buffer(v, is_used_const);
  if (c >= 0) {
    kiln_program_t* p = fresh();
    p->buffers[c].bytes = 0;
    char n1[200];
    snprintf(n1, sizeof n1, "constant '%s' holds 0 bytes of weights", v->buffers[c].name);
    expect_refused(p, n1, NULL, "used constant without bytes");
  }
  kiln_program_destroy(v);
}

/* Every kernel argument: a buffer index out of range either way, bad
 * access flags; every kernel: launch sizes, in-place pairs, counters. */
static void test_every_kernel(void) {
  kiln_program_t* v = fresh();
  for (int32_t k = 0; k < v->n_kernels; ++k) {
    const char* kn = v->kernels[k].name;
    char n1[200], what[160];
    for (int32_t j = 0; j < v->kernels[k].n_args; ++j) {
      const int32_t bad[2] = {v->n_buffers, -1};
      for (int t = 0; t < 2; ++t) {
        kiln_program_t* p = fresh();
        p->kernels[k].args[j] = bad[t];
        snprintf(n1, sizeof n1, "kernel '%s' argument %d names buffer %d", kn, (int)j, (int)bad[t]);
        snprintf(what, sizeof what, "kernel %d argument %d -> %d", (int)k, (int)j, (int)bad[t]);
        expect_refused(p, n1, NULL, what);
      }
      kiln_program_t* p = fresh();
      p->kernels[k].access[j] = 4;
      snprintf(n1, sizeof n1, "kernel '%s' argument %d has access flags 4", kn, (int)j);
      expect_refused(p, n1, NULL, "access flags 4");
      /* A buffer whose lifetime does not cover this kernel. */
      for (int32_t b = 0; b < v->n_buffers; ++b) {
        const kiln_program_buffer_t* bb = &v->buffers[b];
        if (bb->first_use >= 0 && (bb->first_use > k || bb->last_use < k)) {
          p = fresh();
          p->kernels[k].args[j] = b;
          snprintf(n1, sizeof n1, "kernel '%s' uses a buffer outside its lifetime (argument %d", kn, (int)j);
          expect_refused(p, n1, NULL, "argument outside its buffer's lifetime");
          break;
        }
      }
      /* Writing a constant. */
      for (int32_t b = 0; b < v->n_buffers; ++b) {
        const kiln_program_buffer_t* bb = &v->buffers[b];
        if (bb->kind == KILN_PB_CONST && bb->first_use >= 0 && bb->first_use <= k && bb->last_use >= k) {
          p = fresh();
          p->kernels[k].args[j] = b;
          p->kernels[k].access[j] = KILN_ARG_WRITE;
          snprintf(n1, sizeof n1, "kernel '%s' writes a constant (argument %d)", kn, (int)j);
          expect_refused(p, n1, NULL, "writes a constant");
          break;
        }
      }
    }
    const int64_t groups[2] = {0, (1ll << 31) + 1}, local[2] = {0, 4097};
    for (int t = 0; t < 2; ++t) {
      kiln_program_t* p = fresh();
      p->kernels[k].groups[t] = groups[t];
      snprintf(n1, sizeof n1, "kernel '%s' has launch size %lld x", kn, (long long)groups[t]);
      expect_refused(p, n1, NULL, "work-group count");
      p = fresh();
      p->kernels[k].local[2] = local[t];
      snprintf(n1, sizeof n1, "kernel '%s' has launch size", kn);
      expect_refused(p, n1, NULL, "work-group size");
    }
    const int32_t n_args = v->kernels[k].n_args;
    const int32_t pairs[3][2] = {{0, 0}, {n_args, 0}, {-1, 0}};
    for (int t = 0; t < 3; ++t) {
      kiln_program_t* p = fresh();
      p->kernels[k].inplace_in = pairs[t][0];
      p->kernels[k].inplace_out = pairs[t][1];
      snprintf(n1, sizeof n1, "kernel '%s' has in-place pair (%d, %d)", kn, (int)pairs[t][0], (int)pairs[t][1]);
      expect_refused(p, n1, NULL, "in-place pair");
    }
    for (int32_t j = 0; j < n_args; ++j) /* an output that only reads */
      if (!(v->kernels[k].access[j] & KILN_ARG_WRITE)) {
        kiln_program_t* p = fresh();
        p->kernels[k].inplace_in = j == 0 ? 1 : 0;
        p->kernels[k].inplace_out = j;
        if (n_args < 2 || !(p->kernels[k].access[p->kernels[k].inplace_in] & KILN_ARG_READ)) {
          kiln_program_destroy(p);
          break;
        }
        snprintf(n1, sizeof n1, "kernel '%s' has in-place pair", kn);
        expect_refused(p, n1, NULL, "in-place output that is not written");
        break;
      }
    kiln_program_t* p = fresh();
    p->kernels[k].loop_trips = -1;
    snprintf(n1, sizeof n1, "kernel '%s' records -1 loop trips", kn);
    expect_refused(p, n1, NULL, "negative loop trips");
    p = fresh();
    p->kernels[k].flops = -5;
    snprintf(n1, sizeof n1, "kernel '%s' records 0 loop trips, -5 flops", kn);
    if (p->kernels[k].loop_trips != 0) snprintf(n1, sizeof n1, "kernel '%s' records", kn);
    expect_refused(p, n1, "-5 flops", "negative flops");
  }
  kiln_program_destroy(v);
}

/* GEMM descriptors (a library may run them in the kernel's place): sizes
 * whose spans overflow 64 bits read as too big, never wrap. */
static void test_gemm_descriptors(void) {
  kiln_program_t* v = fresh();
  int seen = 0;
  for (int32_t k = 0; k < v->n_kernels; ++k) {
    if (!v->kernels[k].gemm.valid) continue;
    ++seen;
    char n1[200];
    snprintf(n1, sizeof n1, "kernel '%s'", v->kernels[k].name);
    kiln_program_t* p = fresh();
    p->kernels[k].gemm.batch = 1ll << 40;
    p->kernels[k].gemm.sa = 1ll << 40;
    expect_refused(p, n1, "GEMM operand A spans 18446744073709551615 bytes", "GEMM span overflow");
    p = fresh();
    p->kernels[k].gemm.M += 1;
    expect_refused(p, n1, "GEMM", "GEMM one row too many");
  }
  printf("  %d GEMM descriptors in the %s module\n", seen, g_target);
  kiln_program_destroy(v);
}

/* Inputs and outputs: indices, kinds, names. */
static void test_io(void) {
  kiln_program_t* p = fresh();
  p->inputs[0] = p->n_buffers;
  char n1[128];
  snprintf(n1, sizeof n1, "input 0 names buffer %d", (int)p->n_buffers);
  expect_refused(p, n1, NULL, "input out of range");

  p = fresh();
  int32_t i = find_buffer(p, is_intermediate_root);
  p->inputs[0] = i;
  snprintf(n1, sizeof n1, "input 0 is buffer %d, which is not an input", (int)i);
  expect_refused(p, n1, NULL, "input bound to an intermediate");

  p = fresh();
  p->outputs[0] = -1;
  expect_refused(p, "output 0 names buffer -1", NULL, "output -1");

  p = fresh();
  p->input_names[0][0] = 0;
  expect_refused(p, "input 0 has an empty name", NULL, "empty input name");

  /* Two outputs of one name. */
  p = fresh();
  int32_t* outs = NULL;
  char** names = NULL;
  if (CHECK_OK(kiln_allocator_malloc(p->allocator, 2 * sizeof(int32_t), "t", (void**)&outs)) &&
      CHECK_OK(kiln_allocator_malloc(p->allocator, 2 * sizeof(char*), "t", (void**)&names))) {
    outs[0] = outs[1] = p->outputs[0];
    names[0] = p->output_names[0];
    CHECK_OK(kiln_program_strdup(p, p->output_names[0], &names[1]));
    kiln_allocator_free(p->allocator, p->outputs);
    kiln_allocator_free(p->allocator, p->output_names);
    p->outputs = outs;
    p->output_names = names;
    p->n_outputs = 2;
    snprintf(n1, sizeof n1, "outputs 0 and 1 are both named '%s'", names[0]);
    expect_refused(p, n1, NULL, "duplicate output names");
  } else {
    kiln_allocator_free(p->allocator, outs);
    kiln_program_destroy(p);
  }
}

/* The valid module loads and runs on the target's device; on the CPU a
 * kernel symbol the code lacks is an error naming it, with nothing leaked
 * (the loader used to unload the object's OpenMP runtime with it). */
static void test_valid_runs_and_missing_symbol(void) {
  kiln_module_t* m = NULL;
  kiln_device_t* d = NULL;
  kiln_session_t* s = NULL;
  kiln_device_open_options_t o = {0, true, NULL};
  if (!CHECK_OK(kiln_module_load_memory(g_valid, g_valid_len, "valid.kiln", sys(), &m))) return;
  if (CHECK_OK(kiln_device_open(g_target, &o, sys(), &d)) && CHECK_OK(kiln_session_create(m, d, NULL, &s))) {
    kiln_module_info_t mi;
    kiln_module_info(m, &mi);
    kiln_array_t in[4] = {{0}}, out[4] = {{0}};
    CHECK(mi.n_inputs <= 4 && mi.n_outputs <= 4);
    for (int32_t k = 0; k < mi.n_inputs && k < 4; ++k) {
      kiln_dtype_t dt;
      kiln_shape_t sh = kiln_module_input_shape(m, k, &dt);
      CHECK_OK(kiln_array_alloc(sys(), dt, &sh, &in[k]));
    }
    CHECK_OK(kiln_session_run(s, in, out));
    for (int32_t k = 0; k < 4; ++k) {
      kiln_array_free(sys(), &in[k]);
      kiln_array_free(sys(), &out[k]);
    }
  }
  kiln_session_destroy(s);
  s = NULL;
  kiln_module_release(m);
  m = NULL;

  if (strcmp(g_target, "vulkan") != 0 && d) { /* Vulkan binds kernels by blob, not by name */
    kiln_program_t* p = fresh();
    char* nm = p->kernels[0].name;
    nm[strlen(nm) - 1] = nm[strlen(nm) - 1] == 'Z' ? 'Y' : 'Z';
    char want[200];
    snprintf(want, sizeof want, "%s", nm);
    uint8_t* bytes = NULL;
    size_t len = 0;
    if (CHECK_OK(kiln_module_serialize(p, sys(), &bytes, &len)) &&
        CHECK_OK(kiln_module_load_memory(bytes, len, "nosym.kiln", sys(), &m))) {
      kiln_status_t st = kiln_session_create(m, d, NULL, &s);
      CHECK_MSG(st != NULL, "a module whose code lacks kernel '%s' made a session", want);
      if (st) {
        CHECK_MSG(strstr(kiln_status_message(st), want) != NULL, "error does not name '%s': %s", want,
                  kiln_status_message(st));
        kiln_status_free(st);
      }
      kiln_session_destroy(s);
      kiln_module_release(m);
    }
    kiln_allocator_free(sys(), bytes);
    kiln_program_destroy(p);
  }
  kiln_device_release(d);
}

/* --only device|tables runs the device part or the table cases alone: under
 * the sanitizer the Vulkan run needs LSan's slow unwinder (for the one
 * lavapipe leak suppression, tests/lsan_vulkan.supp), which makes the
 * thousands of parses of the table cases take many minutes. */
static const char* g_only;
#define RUN_PART(part, fn)                      \
  do {                                          \
    if (!g_only || !strcmp(g_only, part)) RUN(fn); \
  } while (0)

int main(int argc, char** argv) {
  const char* model = NULL;
  for (int i = 1; i < argc; ++i) {
    if (!strcmp(argv[i], "--target") && i + 1 < argc) g_target = argv[++i];
    else if (!strcmp(argv[i], "--only") && i + 1 < argc) g_only = argv[++i];
    else model = argv[i];
  }
  if (g_only && strcmp(g_only, "device") && strcmp(g_only, "tables")) {
    fprintf(stderr, "--only takes 'device' or 'tables', not '%s'\n", g_only);
    return 2;
  }
  char path[1024];
  if (!model) {
    const char* src = getenv("KILN_TEST_SRC");
    snprintf(path, sizeof path, "%s/../examples/tinycnn.onnx", src ? src : "tests");
    model = path;
  }
  kiln_program_t* p = compile_model(model);
  if (!p) return kiln_test_finish();
  if (!CHECK_OK(kiln_module_serialize(p, sys(), &g_valid, &g_valid_len))) return kiln_test_finish();
  printf("%s for %s: %d buffers, %d kernels, %llu weight bytes, %zu-byte module\n", model, g_target,
         (int)p->n_buffers, (int)p->n_kernels, (unsigned long long)p->weights_len, g_valid_len);
  kiln_program_destroy(p);
  RUN_PART("device", test_valid_runs_and_missing_symbol);
  RUN_PART("tables", test_shrunk_intermediate_in_file);
  RUN_PART("tables", test_every_buffer);
  RUN_PART("tables", test_views);
  RUN_PART("tables", test_constant_ranges);
  RUN_PART("tables", test_every_kernel);
  RUN_PART("tables", test_gemm_descriptors);
  RUN_PART("tables", test_io);
  kiln_allocator_free(sys(), g_valid);
  return kiln_test_finish();
}
