/* Tests of `kiln bench` (tools/bench_cmd.c, tools/bench_cases.c,
 * tools/bench_gpu.c) and the
 * peak probe (compiler/peak.c). The CLI sources are not in libkiln, so they
 * are compiled into this test directly. The smoke run is kept small with the
 * hidden --cases / --peak-mb options (a few seconds with a warm kernel cache). */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "testing.h"
#include "../tools/bench_cases.c"
#include "../tools/bench_cmd.c"
#include "../tools/bench_gpu.c"

/* ---- a minimal JSON syntax checker ---------------------------------------- */

typedef struct js_s {
  const char* p;
  int depth;
} js_t;

static void ws(js_t* j) {
  while (*j->p == ' ' || *j->p == '\n' || *j->p == '\t' || *j->p == '\r') ++j->p;
}

static bool value(js_t* j);

static bool string(js_t* j) {
  if (*j->p != '"') return false;
  for (++j->p; *j->p && *j->p != '"'; ++j->p) {
    if ((unsigned char)*j->p < 0x20) return false;
    if (*j->p == '\\' && !*++j->p) return false;
  }
  if (*j->p != '"') return false;
  ++j->p;
  return true;
}

static bool value(js_t* j) {
  ws(j);
  if (++j->depth > 64) return false;
  bool ok = true;
  if (*j->p == '{' || *j->p == '[') {
    char close = *j->p == '{' ? '}' : ']';
    bool obj = close == '}';
    ++j->p;
    ws(j);
    if (*j->p == close) {
      ++j->p;
    } else {
      for (;;) {
        if (obj) {
          ws(j);
          if (!string(j)) return false;
          ws(j);
          if (*j->p++ != ':') return false;
        }
        if (!value(j)) return false;
        ws(j);
        if (*j->p == ',') {
          ++j->p;
          continue;
        }
        if (*j->p++ != close) return false;
        break;
      }
    }
  } else if (*j->p == '"') {
    ok = string(j);
  } else if (!strncmp(j->p, "null", 4) || !strncmp(j->p, "true", 4)) {
    j->p += 4;
  } else if (!strncmp(j->p, "false", 5)) {
    j->p += 5;
  } else {
    char* end = NULL;
    strtod(j->p, &end);
    ok = end != j->p;
    j->p = end;
  }
  --j->depth;
  return ok;
}

static bool json_valid(const char* text) {
  js_t j = {text, 0};
  if (!value(&j)) return false;
  ws(&j);
  return *j.p == '\0';
}

/* Every value of "key": in |s| is a number > 0; returns how many. */
static int positive(const char* s, const char* key) {
  int n = 0;
  for (const char* p = strstr(s, key); p; p = strstr(p + 1, key)) {
    char* end = NULL;
    double v = strtod(p + strlen(key), &end);
    CHECK_MSG(end != p + strlen(key) && v > 0, "%s is not a positive number: %.40s", key, p);
    ++n;
  }
  return n;
}

static int bench(int argc, const char** argv) { return kiln_cmd_bench(argc, (char**)argv); }

/* ---- tests ---------------------------------------------------------------- */

static void test_usage_errors(void) {
  const char* a1[] = {"bench", "--bogus"};
  CHECK(bench(2, a1) == 2);
  const char* a2[] = {"bench", "--suite", "gemm,nope"};
  CHECK(bench(3, a2) == 2);
  const char* a3[] = {"bench", "--threads", "0"};
  CHECK(bench(3, a3) == 2);
  const char* a4[] = {"bench", "--repeat", "x"};
  CHECK(bench(3, a4) == 2);
  const char* a5[] = {"bench", "--target", "metal"};
  CHECK(bench(3, a5) == 2);
  const char* a6[] = {"bench", "--json"};
  CHECK(bench(2, a6) == 2);
  const char* a7[] = {"bench", "--help"};
  CHECK(bench(2, a7) == 0);
}

/* The case tables: unique names, depthwise marked, every graph builds and
 * has the output shape the conv arithmetic predicts. */
static void test_cases(void) {
  int32_t n = 0;
  bench_case_t* c = bench_cases(BENCH_SUITE_ALL, false, &n);
  CHECK(c != NULL);
  if (!c) return;
  int32_t convs = 0, dw = 0, gemms = 0;
  for (int32_t i = 0; i < n; ++i) {
    for (int32_t k = 0; k < i; ++k)
      CHECK_MSG(strcmp(c[i].name, c[k].name) != 0, "duplicate case name %s", c[i].name);
    if (c[i].kind == BENCH_GEMM) ++gemms;
    if (c[i].kind != BENCH_CONV) continue;
    ++convs;
    bool is_dw = !strcmp(c[i].suite, "dwconv");
    dw += is_dw;
    CHECK_MSG(is_dw == (c[i].p[7] == c[i].p[0] && c[i].p[7] > 1), "%s: dw marking", c[i].name);
    kiln_graph_t* g = NULL;
    if (!CHECK_OK(bench_build_graph(&c[i], &g))) continue;
    const kiln_tensor_t* y = &g->tensors[g->outputs[0]];
    int64_t oh = (c[i].p[1] + 2 * c[i].p[6] - c[i].p[4]) / c[i].p[5] + 1;
    CHECK(y->shape.rank == 4 && y->shape.dims[1] == c[i].p[3] && y->shape.dims[2] == oh &&
          y->shape.dims[3] == oh);
    kiln_graph_destroy(g);
  }
  CHECK(gemms == 21);  /* 7 square + 4 model shapes + 10 with few rows */
  CHECK(convs == 41);  /* 11 resnet18 + 30 mobilenetv2 */
  CHECK(dw == 10);  /* mobilenetv2's distinct depthwise shapes */
  free(c);
  c = bench_cases(BENCH_SUITE_GEMM, true, &n);
  CHECK(c && n == 17); /* --quick: square up to 1024, B up to 16 MB */
  /* a Gemm with transB, a bias and a Relu: B stored N x K, the bytes
   * count A, B, the bias and Y once */
  for (int32_t i = 0; c && i < n; ++i) {
    if (strcmp(c[i].name, "gemv.1x768x3072.tb.bias_relu")) continue;
    kiln_graph_t* g = NULL;
    if (!CHECK_OK(bench_build_graph(&c[i], &g))) break;
    const int32_t b = kiln_graph_find_tensor(g, "B");
    CHECK(g->n_nodes == 2 && !strcmp(g->nodes[0].op_type, "Gemm") && !strcmp(g->nodes[1].op_type, "Relu"));
    CHECK(b >= 0 && g->tensors[b].shape.dims[0] == 3072 && g->tensors[b].shape.dims[1] == 768);
    CHECK_MSG(bench_graph_bytes(g) == 4.0 * (768 + 768 * 3072 + 3072 + 3072), "%g bytes", bench_graph_bytes(g));
    kiln_graph_destroy(g);
    n = -1;
  }
  CHECK(n == -1); /* found */
  free(c);
  c = bench_cases(BENCH_SUITE_DWCONV, false, &n);
  CHECK(c && n == 10);
  free(c);
  /* bytes: SiLU (Sigmoid, Mul) moves its input and output once, like any
   * other 16M-element activation */
  c = bench_cases(BENCH_SUITE_ELEMENTWISE, false, &n);
  int32_t unary = 0;
  for (int32_t i = 0; c && i < n; ++i) {
    if (c[i].kind != BENCH_UNARY) continue;
    ++unary;
    kiln_graph_t* g = NULL;
    if (!CHECK_OK(bench_build_graph(&c[i], &g))) continue;
    CHECK_MSG(bench_graph_bytes(g) == 8.0 * 16384 * 1024, "%s: %g bytes", c[i].name, bench_graph_bytes(g));
    kiln_graph_destroy(g);
  }
  CHECK(unary == 8);
  free(c);
  /* pools: output shapes and bytes (input and output once) */
  c = bench_cases(BENCH_SUITE_POOL, false, &n);
  CHECK(c && n == 6);
  for (int32_t i = 0; c && i < n; ++i) {
    kiln_graph_t* g = NULL;
    if (!CHECK_OK(bench_build_graph(&c[i], &g))) continue;
    const kiln_tensor_t* y = &g->tensors[g->outputs[0]];
    const int64_t o = (c[i].p[1] + 2 * c[i].p[5] - c[i].p[3]) / c[i].p[4] + 1;
    CHECK_MSG(y->shape.rank == 4 && y->shape.dims[1] == c[i].p[0] && y->shape.dims[2] == o && y->shape.dims[3] == o,
              "%s: output shape", c[i].name);
    CHECK(bench_graph_bytes(g) == 4.0 * (double)(c[i].p[0] * (c[i].p[1] * c[i].p[2] + o * o)));
    kiln_graph_destroy(g);
  }
  free(c);
  /* Non-conv graphs build too (small ones only: gemm.4096 would allocate 64 MiB). */
  c = bench_cases(BENCH_SUITE_REDUCE | BENCH_SUITE_LAYERNORM | BENCH_SUITE_SOFTMAX, false, &n);
  for (int32_t i = 0; c && i < n; ++i) {
    kiln_graph_t* g = NULL;
    if (CHECK_OK(bench_build_graph(&c[i], &g))) kiln_graph_destroy(g);
  }
  free(c);
}

static void test_peak(void) {
  kiln_peak_options_t o;
  kiln_peak_options_default(&o);
  o.threads = 1;
  o.bandwidth_bytes = 8 << 20;
  o.repeat = 2;
  kiln_peak_t pk;
  if (!CHECK_OK(kiln_peak_measure(&o, &pk))) return;
  CHECK(pk.gflops > 0.5 && pk.gbs > 0.1 && pk.threads == 1);
  char m[128];
  kiln_peak_cpu_model(m, sizeof m);
  CHECK(m[0] != '\0');
}

static void test_smoke_json_csv(void) {
  const char* json = "bench_smoke.json";
  const char* csv = "bench_smoke.csv";
  remove(json);
  remove(csv);
  const char* a[] = {"bench",   "--quick", "--suite",     "elementwise,gemm,layernorm",
                     "--repeat", "2",      "--warmup",    "1",
                     "--cases", "4",       "--peak-mb",   "16",
                     "--json",  json,      "--csv",       csv};
  CHECK(bench((int)(sizeof a / sizeof a[0]), a) == 0);
  char* s = kiln_test_read_text(json);
  CHECK(s != NULL);
  if (!s) return;
  CHECK_MSG(json_valid(s), "invalid JSON:\n%s", s);
  CHECK(!strncmp(s, "{\"machine\": {", 13));
  CHECK(strstr(s, "\"cases\": [") != NULL);
  CHECK(strstr(s, "\"cpu\": \"") != NULL);
  CHECK(positive(s, "\"peak_gflops\": ") == 1);
  CHECK(positive(s, "\"peak_gbs\": ") == 1);
  CHECK(positive(s, "\"threads\": ") == 1);
  int kiln_rows = kiln_test_count(s, "\"peer\": null");
  int peer_rows = kiln_test_count(s, "\"peer\": \"openblas\"");
  CHECK(kiln_rows == 4);
  CHECK(peer_rows == 0 || peer_rows == 4); /* OpenBLAS peers when installed */
  int rows = kiln_rows + peer_rows;
  CHECK(positive(s, "\"ms\": ") == rows);
  CHECK(positive(s, "\"gflops\": ") == rows);
  CHECK(positive(s, "\"gbs\": ") == rows);
  CHECK(positive(s, "\"pct_peak\": ") == rows);
  CHECK(positive(s, "\"intensity\": ") == rows);
  CHECK(kiln_test_count(s, "\"bound\": \"compute\"") + kiln_test_count(s, "\"bound\": \"memory\"") == rows);
  CHECK(kiln_test_count(s, "\"error\"") == 0);
  free(s);
  s = kiln_test_read_text(csv);
  CHECK(s != NULL);
  if (s) {
    const char* head = "suite,name,peer,shape,ms,gflops,gbs,pct_peak,bound,intensity,";
    CHECK(!strncmp(s, head, strlen(head)));
    CHECK(kiln_test_count(s, "\n") == 1 + rows);
    free(s);
  }
}

/* A filter that matches nothing still writes a valid, empty report. */
static void test_empty_selection(void) {
  const char* json = "bench_empty.json";
  const char* a[] = {"bench", "--suite", "layernorm", "--filter", "no-such-case",
                     "--peak-mb", "8", "--json", json};
  CHECK(bench((int)(sizeof a / sizeof a[0]), a) == 0);
  char* s = kiln_test_read_text(json);
  CHECK(s && json_valid(s) && strstr(s, "\"cases\": [\n]}"));
  free(s);
}

/* --target vulkan: the smallest gemm case on the device (checked against
 * the reference inside the run); without a Vulkan device the command fails
 * (1) instead of falling back to the CPU. */
static void test_gpu_target(void) {
  kiln_device_t* d = NULL;
  kiln_status_t s = bench_gpu_open("vulkan", &d);
  const bool have = s == NULL;
  kiln_status_free(s);
  kiln_device_release(d);
  const char* json = "bench_vulkan.json";
  const char* a[] = {"bench", "--target", "vulkan", "--quick", "--filter", "square.64", "--repeat", "1",
                     "--peak-mb", "8", "--json", json};
  CHECK(bench((int)(sizeof a / sizeof a[0]), a) == (have ? 0 : 1));
  if (!have) return;
  char* t = kiln_test_read_text(json);
  CHECK(t && json_valid(t) && strstr(t, "\"target\": \"vulkan\"") && strstr(t, "square.64"));
  free(t);
}

/* --target opencl: a gemm case and its CLBlast peer row (when this kiln
 * has CLBlast), both checked against the reference inside the run. */
static void test_opencl_peer(void) {
  kiln_device_t* d = NULL;
  kiln_status_t s = bench_gpu_open("opencl", &d);
  const bool have = s == NULL;
  kiln_status_free(s);
  kiln_device_release(d);
  if (!have) return;
  const char* json = "bench_opencl.json";
  const char* a[] = {"bench", "--target", "opencl", "--suite", "gemm", "--filter", "square.64", "--repeat", "1",
                     "--peak-mb", "8", "--json", json};
  CHECK(bench((int)(sizeof a / sizeof a[0]), a) == 0);
  char* t = kiln_test_read_text(json);
  CHECK(t && json_valid(t) && strstr(t, "\"target\": \"opencl\"") && strstr(t, "square.64"));
#ifdef KILN_HAVE_CLBLAST
  CHECK(t && strstr(t, "\"peer\": \"clblast\"") && !strstr(t, "\"error\""));
#endif
  free(t);
}

/* --target vulkan runs the other suites too: a pool and an element-wise
 * case on the device, against the reference. */
static void test_gpu_suites(void) {
  kiln_device_t* d = NULL;
  kiln_status_t s = bench_gpu_open("vulkan", &d);
  const bool have = s == NULL;
  kiln_status_free(s);
  kiln_device_release(d);
  if (!have) return;
  const char* json = "bench_vulkan_suites.json";
  const char* a[] = {"bench", "--target", "vulkan", "--suite", "pool,elementwise", "--filter", ".1M",
                     "--repeat", "1", "--peak-mb", "8", "--json", json};
  const char* b[] = {"bench", "--target", "vulkan", "--suite", "pool", "--filter", "mobilenetv2.avgpool",
                     "--repeat", "1", "--peak-mb", "8", "--json", json};
  CHECK(bench((int)(sizeof a / sizeof a[0]), a) == 0);
  char* t = kiln_test_read_text(json);
  CHECK(t && json_valid(t) && strstr(t, "relu.1M") && !strstr(t, "\"error\""));
  free(t);
  CHECK(bench((int)(sizeof b / sizeof b[0]), b) == 0);
  t = kiln_test_read_text(json);
  CHECK(t && json_valid(t) && strstr(t, "mobilenetv2.avgpool") && !strstr(t, "\"error\""));
  free(t);
}

int main(void) {
  RUN(test_usage_errors);
  RUN(test_cases);
  RUN(test_peak);
  RUN(test_smoke_json_csv);
  RUN(test_empty_selection);
  RUN(test_gpu_target);
  RUN(test_opencl_peer);
  RUN(test_gpu_suites);
  return kiln_test_finish();
}
