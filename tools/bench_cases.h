/* `kiln bench` internals: the case tables and one-node graph builders
 * (bench_cases.c), used by the command driver (bench_cmd.c). */
#ifndef KILN_TOOLS_BENCH_CASES_H_
#define KILN_TOOLS_BENCH_CASES_H_

#include <stdbool.h>
#include <stdint.h>

#include "ir/graph.h"

typedef enum bench_kind_e {
  BENCH_GEMM,        /* p: M K N; Y[M,N] = MatMul(A input, B const) */
  BENCH_CONV,        /* p: C H W OC k stride pad group (batch 1, square) */
  BENCH_ADD,         /* p: rows cols; Y = A + B (both inputs) */
  BENCH_RELU,        /* p: rows cols */
  BENCH_MUL_BCAST,   /* p: rows cols; Y[rows,cols] = A * b[cols] */
  BENCH_REDUCE_SUM,  /* p: d0 d1 d2 axis */
  BENCH_REDUCE_MEAN, /* p: d0 d1 d2 axis */
  BENCH_SOFTMAX,     /* p: rows cols (axis -1) */
  BENCH_LAYERNORM,   /* p: rows cols (axis -1, scale and bias const) */
  BENCH_UNARY,       /* p: rows cols; Y = op(A), op the case's ONNX type ("SiLU": Sigmoid, Mul) */
  BENCH_POOL,        /* p: C H W k stride pad (batch 1, square); op MaxPool, AveragePool
                        (count_include_pad 1) or GlobalAveragePool */
} bench_kind_t;

/* Suites, as bits. */
enum {
  BENCH_SUITE_GEMM = 1 << 0,
  BENCH_SUITE_CONV = 1 << 1,
  BENCH_SUITE_DWCONV = 1 << 2,
  BENCH_SUITE_ELEMENTWISE = 1 << 3,
  BENCH_SUITE_REDUCE = 1 << 4,
  BENCH_SUITE_SOFTMAX = 1 << 5,
  BENCH_SUITE_LAYERNORM = 1 << 6,
  BENCH_SUITE_POOL = 1 << 7,
  BENCH_SUITE_ALL = (1 << 8) - 1,
};

/* Suite bit for |name| ("gemm", ...), 0 if unknown. */
uint32_t bench_suite_bit(const char* name);
extern const char* const bench_suite_names; /* "gemm,conv,..." for help */

typedef struct bench_case_s {
  const char* suite;  /* "gemm", "conv", "dwconv", ... */
  char name[96];      /* "resnet18.layer2.0.conv1", "gemm.1024", ... */
  char shape[128];    /* human readable, e.g. "1x64x56x56 * 128x64x3x3 s2 p1" */
  bench_kind_t kind;
  int64_t p[8];
  const char* peer;   /* NULL: kiln; "openblas" / "clblast": the peer row for a gemm */
  const char* op;     /* BENCH_UNARY: the op type */
  double est_flops;   /* analytic, for the ETA only */
  double est_bytes;
} bench_case_t;

/* The cases of the suites in |suites| (--quick drops the largest). Returns
 * a malloc'd array (NULL when out of memory) and its length. Peer rows are
 * added by the driver. */
bench_case_t* bench_cases(uint32_t suites, bool quick, int32_t* out_n);

/* Builds the case's one-node graph (opset 17), prepared; random weights
 * from a fixed seed. */
kiln_status_t bench_build_graph(const bench_case_t* c, kiln_graph_t** out);

/* Bytes the graph reads and writes: its inputs, weights and outputs, each
 * once; the tensors between its nodes (SiLU's Sigmoid output, which the
 * fused kernel keeps in registers) are not counted. */
double bench_graph_bytes(const kiln_graph_t* g);

/* Fills |n| floats deterministically in [-0.5, 0.5). */
void bench_fill(float* p, int64_t n, uint32_t seed);

#endif /* KILN_TOOLS_BENCH_CASES_H_ */
