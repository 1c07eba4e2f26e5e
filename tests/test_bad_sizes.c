/* Issue 19, defect 5 (BAD_INPUTS.md rows 5 and 27) and the loader parts of
 * defect 8: sizes that overflow or claim more than there is, checked before
 * anything is allocated, with errors naming the input.
 *
 * - .npy: a 128-byte file whose header claims 6.4 GB is a PARSE_ERROR with
 *   nothing allocated; the byte cap; float64 converted (reported) or refused.
 * - ONNX: a graph input whose byte size overflows; MaxPool / Conv over dims
 *   near 2^62 (UBSan signed overflow in nn_common.c before); a tensor-IR
 *   buffer whose bytes overflow; raw_data together with typed data; a NUL
 *   inside an external-data location (protobuf-c cut it silently).
 * - `kiln run` (KILN_CLI, set by tests/CMakeLists.txt): a declared 64 GiB
 *   input and a huge --dim stop at the input cap naming the input; --dim
 *   out of int64 range; --output DIR is created (nested); float64 --input
 *   warns, and --strict refuses it. */
#include "bad_model_util.h" /* first: it sets _GNU_SOURCE */

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "ir/tir.h"
#include "kiln/npy.h"

static char g_dir[512];

/* A .npy file: |dict| as the header, then |n| bytes of |data|. */
static void write_npy(const char* path, const char* dict, const void* data, size_t n) {
  size_t dl = strlen(dict), total = 10 + dl + 1, pad = (64 - total % 64) % 64, hl = dl + pad + 1;
  unsigned char* buf = calloc(1, 10 + hl + n + 1);
  memcpy(buf, "\x93NUMPY\x01\x00", 8);
  buf[8] = (unsigned char)(hl & 0xff);
  buf[9] = (unsigned char)(hl >> 8);
  memcpy(buf + 10, dict, dl);
  memset(buf + 10 + dl, ' ', pad);
  buf[10 + dl + pad] = '\n';
  if (n) memcpy(buf + 10 + hl, data, n);
  CHECK(bm_write_bytes(path, buf, 10 + hl + n));
  free(buf);
}

static void test_npy(void) {
  bm_counter_t c;
  kiln_allocator_t al = bm_counting(&c);
  kiln_array_t a;
  /* 6.4 GB claimed, 128 bytes held. */
  const char* p = bm_path(g_dir, "claims.npy");
  write_npy(p, "{'descr': '<f4', 'fortran_order': False, 'shape': (1600000000,), }", NULL, 0);
  struct stat st;
  CHECK(stat(p, &st) == 0 && st.st_size == 128);
  CHECK_ERR_ALL(kiln_npy_read(p, al, &a), KILN_PARSE_ERROR, "claims.npy", "truncated", "6400000000");
  CHECK_MSG(c.peak == 0, "peak %zu bytes allocated before the truncation check", c.peak);
  CHECK(a.data == NULL);
  /* Element count times element size overflows. */
  write_npy(p, "{'descr': '<i8', 'fortran_order': False, 'shape': (3, 1152921504606846976), }", NULL, 0);
  CHECK_ERR_ALL(kiln_npy_read(p, al, &a), KILN_LIMIT_EXCEEDED, "claims.npy");
  /* The cap. */
  float f[64] = {0};
  write_npy(p, "{'descr': '<f4', 'fortran_order': False, 'shape': (8, 8), }", f, sizeof f);
  kiln_npy_read_options_t o = {.max_bytes = 255};
  CHECK_ERR_ALL(kiln_npy_read_with(p, &o, al, &a, NULL), KILN_LIMIT_EXCEEDED, "claims.npy", "255-byte cap");
  o.max_bytes = 256;
  if (CHECK_OK(kiln_npy_read_with(p, &o, al, &a, NULL))) kiln_array_free(al, &a);
  /* float64: converted and said so, or refused. */
  const double d[3] = {1.5, -2.25, 1e300};
  const char* p8 = bm_path(g_dir, "f8.npy");
  write_npy(p8, "{'descr': '<f8', 'fortran_order': False, 'shape': (3,), }", d, sizeof d);
  bool conv = true;
  if (CHECK_OK(kiln_npy_read_with(p8, NULL, al, &a, &conv))) {
    CHECK(!conv && a.dtype == KILN_DTYPE_F64 && ((double*)a.data)[2] == 1e300);
    kiln_array_free(al, &a);
  }
  kiln_npy_read_options_t to32 = {.f64_to_f32 = true};
  if (CHECK_OK(kiln_npy_read_with(p8, &to32, al, &a, &conv))) {
    CHECK(conv && a.dtype == KILN_DTYPE_F32 && ((float*)a.data)[1] == -2.25f);
    kiln_array_free(al, &a);
  }
  kiln_npy_read_options_t strict = {.refuse_f64 = true};
  CHECK_ERR_ALL(kiln_npy_read_with(p8, &strict, al, &a, &conv), KILN_UNSUPPORTED, "f8.npy", "float64");
  /* float64 data one element short. */
  write_npy(p8, "{'descr': '<f8', 'fortran_order': False, 'shape': (4,), }", d, sizeof d);
  CHECK_ERR_ALL(kiln_npy_read(p8, al, &a), KILN_PARSE_ERROR, "f8.npy", "truncated");
  CHECK(c.live == 0);
}

/* One-node model: |op| over input X of |rank| dims of |dtype|. */
static kiln_status_t load_op(const char* name, const char* op, int dtype, int rank, const int64_t* dims,
                             const char* attr, size_t n_attr, const int64_t* attr_v) {
  bm_model_t b;
  bm_init(&b, 17);
  bm_input(&b, "X", dtype, rank, dims);
  Onnx__NodeProto* n = bm_node(&b, op, "node0", "X", "Y");
  if (attr) bm_attr_ints(&b, n, attr, n_attr, attr_v);
  bm_output(&b, "Y");
  kiln_status_t s = bm_write_load(&b, bm_path(g_dir, name), NULL);
  bm_free(&b);
  return s;
}

static void test_graph_sizes(void) {
  /* A graph input of 2^62 x 4 floats: 2^66 bytes. */
  const int64_t huge[2] = {(int64_t)1 << 62, 4};
  CHECK_ERR_ALL(load_op("in.onnx", "Relu", BM_F32, 2, huge, NULL, 0, NULL), KILN_LIMIT_EXCEEDED, "in.onnx",
                "graph input 'X'", "overflows");
  /* Pooling over a spatial dim just under 2^62 (u8: the bytes fit). */
  const int64_t sp[4] = {1, 1, 1, ((int64_t)1 << 62) - 1};
  const int64_t k2[2] = {1, 3};
  kiln_status_t s = load_op("pool.onnx", "MaxPool", BM_U8, 4, sp, "kernel_shape", 2, k2);
  CHECK_ERR_ALL(s, KILN_LIMIT_EXCEEDED, "pool.onnx", "node0", "too large");
  /* The same dims in f16 (2^63 - 2 bytes). */
  s = load_op("avg.onnx", "AveragePool", BM_F16, 4, sp, "kernel_shape", 2, k2);
  CHECK_ERR_ALL(s, KILN_LIMIT_EXCEEDED, "avg.onnx", "node0", "too large");
  /* Tensor IR buffers: strides and byte offsets are int64. */
  tir_ctx_t t;
  tir_ctx_init(&t, kiln_allocator_system());
  const int64_t sh[3] = {(int64_t)1 << 40, (int64_t)1 << 20, 16};
  CHECK(tir_buffer(&t, "big_buffer", KILN_DTYPE_F32, 3, sh, TIR_SCOPE_GLOBAL) == NULL);
  CHECK_ERR_ALL(tir_ctx_status(&t), KILN_LIMIT_EXCEEDED, "big_buffer", "overflows");
  tir_ctx_deinit(&t);
}

static void test_tensor_data(void) {
  /* raw_data and float_data both present. */
  bm_model_t b;
  bm_init(&b, 17);
  const int64_t d2[1] = {2};
  bm_input(&b, "X", BM_F32, 1, d2);
  Onnx__TensorProto* w = bm_init_f32(&b, "weights", 1, d2);
  w->n_float_data = 2;
  w->float_data = bm_alloc(&b, 2 * sizeof(float));
  bm_node(&b, "Add", "add0", "X,weights", "Y");
  bm_output(&b, "Y");
  CHECK_ERR_ALL(bm_write_load(&b, bm_path(g_dir, "twice.onnx"), NULL), KILN_INVALID_ARGUMENT, "twice.onnx",
                "'weights'", "raw_data", "typed data");
  bm_free(&b);

  /* A NUL inside an external-data location: "w.bin\0../../etc/passwd". The
   * builder cannot hold a NUL, so the packed bytes are patched. */
  bm_init(&b, 17);
  bm_input(&b, "X", BM_F32, 1, d2);
  Onnx__TensorProto* e = bm_tensor(&b, "ext_w", BM_F32, 1, d2, NULL, 0);
  b.g.initializer[b.g.n_initializer++] = e;
  const char* loc = "w.binZ../../etc/passwd";
  bm_external(&b, e, "location", loc);
  bm_node(&b, "Add", "add0", "X,ext_w", "Y");
  bm_output(&b, "Y");
  const float wv[2] = {1, 2};
  CHECK(bm_write_bytes(bm_path(g_dir, "w.bin"), wv, sizeof wv));
  size_t n = onnx__model_proto__get_packed_size(&b.m);
  uint8_t* buf = malloc(n);
  onnx__model_proto__pack(&b.m, buf);
  uint8_t* z = memmem(buf, n, loc, strlen(loc));
  CHECK(z != NULL);
  if (z) z[5] = 0;
  const char* p = bm_path(g_dir, "nul.onnx");
  CHECK(bm_write_bytes(p, buf, n));
  free(buf);
  CHECK_ERR_ALL(bm_load(p, NULL), KILN_PARSE_ERROR, "nul.onnx", "NUL");
  bm_free(&b);
}

/* ---- kiln run ------------------------------------------------------------ */

/* Runs the CLI with |args| (a shell fragment); returns its exit status and
 * its stdout+stderr in |out|. */
static int cli(char* out, size_t cap, const char* args) {
  const char* exe = getenv("KILN_CLI");
  char cmd[4096];
  snprintf(cmd, sizeof cmd, "%s %s 2>&1", exe, args);
  FILE* f = popen(cmd, "r");
  if (!f) return -1;
  size_t n = fread(out, 1, cap - 1, f);
  out[n] = 0;
  int st = pclose(f);
  return WIFEXITED(st) ? WEXITSTATUS(st) : 128 + (WIFSIGNALED(st) ? WTERMSIG(st) : 0);
}

#define CLI_HAS(rc_want, needle, ...)                                              \
  do {                                                                            \
    char o_[16384];                                                               \
    char a_[2048];                                                                \
    snprintf(a_, sizeof a_, __VA_ARGS__);                                         \
    int rc_ = cli(o_, sizeof o_, a_);                                              \
    CHECK_MSG((rc_want) < 0 ? rc_ != 0 && rc_ < 128 : rc_ == (rc_want),           \
              "kiln %s: exit %d\n%s", a_, rc_, o_);                               \
    CHECK_MSG(strstr(o_, needle) != NULL, "kiln %s: no '%s' in\n%s", a_, needle, o_); \
  } while (0)

static void test_cli(void) {
  if (!getenv("KILN_CLI")) {
    printf("KILN_CLI not set: CLI checks skipped\n");
    return;
  }
  /* A declared 16 x 2^30 f32 input: 64 GiB of random values. */
  bm_model_t b;
  bm_init(&b, 17);
  const int64_t big[2] = {16, (int64_t)1 << 30};
  bm_input(&b, "big_input", BM_F32, 2, big);
  bm_node(&b, "Relu", "relu0", "big_input", "Y");
  bm_output(&b, "Y");
  const char* p = bm_path(g_dir, "big.onnx");
  CHECK(bm_write(&b, p));
  bm_free(&b);
  CLI_HAS(-1, "big_input", "run %s", p);
  /* kiln info sums the costs of tensors as large as int64 allows (UBSan
   * signed overflow before): an i8 Add over [3, 2^61]. */
  bm_init(&b, 17);
  const int64_t wide[2] = {3, (int64_t)1 << 61};
  bm_input(&b, "X", BM_I8, 2, wide);
  bm_node(&b, "Add", "add0", "X,X", "Y");
  bm_output(&b, "Y");
  const char* pw = bm_path(g_dir, "wide.onnx");
  CHECK(bm_write(&b, pw));
  bm_free(&b);
  CLI_HAS(0, "add0", "info %s", pw);
  CLI_HAS(-1, "wide.onnx", "compile %s -o %s/wide.kiln", pw, g_dir);
  CLI_HAS(-1, "--max-input-bytes", "run %s", p);
  /* A symbolic dim and --dim. */
  bm_init(&b, 17);
  const int64_t sd[2] = {0, 4};
  const char* params[2] = {"N", NULL};
  b.g.input[b.g.n_input++] = bm_value(&b, "sym_input", BM_F32, 2, sd, params);
  bm_node(&b, "Relu", "relu0", "sym_input", "Y");
  bm_output(&b, "Y");
  const char* ps = bm_path(g_dir, "sym.onnx");
  CHECK(bm_write(&b, ps));
  bm_free(&b);
  CLI_HAS(-1, "sym_input", "run %s --dim N=4611686018427387904", ps);
  CLI_HAS(-1, "--dim", "run %s --dim N=99999999999999999999999", ps);
  CLI_HAS(-1, "sym_input", "run %s --dim N=1000 --max-input-bytes 1000", ps);
  /* --output creates nested folders. */
  char outdir[700];
  snprintf(outdir, sizeof outdir, "%s/out/a/b", g_dir);
  CLI_HAS(0, "wrote", "run %s --dim N=2 --output %s", ps, outdir);
  struct stat st;
  char yp[800];
  snprintf(yp, sizeof yp, "%s/Y.npy", outdir);
  CHECK_MSG(stat(yp, &st) == 0, "%s not written", yp);
  /* --output naming a file is an error before the run. */
  CLI_HAS(-1, "not a folder", "run %s --dim N=2 --output %s", ps, yp);
  /* float64 inputs: a warning, or an error with --strict. */
  const double d[8] = {1, 2, 3, 4, 5, 6, 7, 8};
  const char* p8 = bm_path(g_dir, "in8.npy");
  write_npy(p8, "{'descr': '<f8', 'fortran_order': False, 'shape': (2, 4), }", d, sizeof d);
  CLI_HAS(0, "float64", "run %s --input sym_input=%s", ps, p8);
  CLI_HAS(-1, "sym_input", "run %s --input sym_input=%s --strict", ps, p8);
  CLI_HAS(-1, "float64", "run %s --input sym_input=%s --strict", ps, p8);
  /* A truncated .npy input names the input and the file. */
  write_npy(p8, "{'descr': '<f4', 'fortran_order': False, 'shape': (1600000000, 4), }", NULL, 0);
  CLI_HAS(-1, "sym_input", "run %s --input sym_input=%s", ps, p8);
}

int main(void) {
  if (!bm_tmpdir("bad-sizes", g_dir, sizeof g_dir)) return 1;
  test_npy();
  test_graph_sizes();
  test_tensor_data();
  test_cli();
  bm_rmtree(g_dir);
  return kiln_test_finish();
}
