/* ONNX backend node-test conformance runner.
 *
 *   kiln_conformance [--filter SUBSTR ...] [--quiet] NODE_TEST_DIR
 *
 * NODE_TEST_DIR is onnx/backend/test/data/node from the onnx wheel: one
 * folder per case with model.onnx and test_data_set_N/{input,output}_K.pb.
 * A case runs when kiln supports everything in it; it is skipped, with the
 * reason listed, when kiln reports UNSUPPORTED (an op, dtype or feature kiln
 * does not claim). Outputs are compared with rtol 1e-4 / atol 1e-5 and a
 * failure names the worst element. Prints a per-op table and closes with
 * "N passed, N failed, N skipped"; exits 1 when any case failed. */
#include <dirent.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "frontend/onnx.h"
#include "ir/op.h"
#include "runtime/compare.h"
#include "runtime/ref_exec.h"

#define RTOL 1e-4
#define ATOL 1e-5

typedef struct {
  char op[64];
  int passed, failed, skipped;
} op_row_t;

typedef struct {
  op_row_t* rows;
  int n, cap;
  char** skipped;
  int n_skipped, cap_skipped;
  char** failures;
  int n_failures, cap_failures;
} report_t;

static op_row_t* row_for(report_t* r, const char* op) {
  for (int i = 0; i < r->n; ++i)
    if (!strcmp(r->rows[i].op, op)) return &r->rows[i];
  if (r->n == r->cap) {
    r->cap = r->cap ? r->cap * 2 : 64;
    r->rows = realloc(r->rows, sizeof(op_row_t) * (size_t)r->cap);
    if (!r->rows) exit(2);
  }
  op_row_t* row = &r->rows[r->n++];
  memset(row, 0, sizeof(*row));
  snprintf(row->op, sizeof row->op, "%s", op);
  return row;
}

static void push(char*** list, int* n, int* cap, const char* fmt, const char* a, const char* b) {
  if (*n == *cap) {
    *cap = *cap ? *cap * 2 : 128;
    *list = realloc(*list, sizeof(char*) * (size_t)*cap);
    if (!*list) exit(2);
  }
  size_t len = strlen(a) + strlen(b) + strlen(fmt) + 1;
  char* s = malloc(len);
  if (!s) exit(2);
  snprintf(s, len, fmt, a, b);
  (*list)[(*n)++] = s;
}

/* "ReduceMean" -> "reducemean"; "reduce_mean_keepdims" -> "reducemeankeepdims". */
static void normalize(const char* in, char* out, size_t n) {
  size_t o = 0;
  for (; *in && o + 1 < n; ++in)
    if (*in != '_') out[o++] = (char)(*in >= 'A' && *in <= 'Z' ? *in + 32 : *in);
  out[o] = 0;
}

/* The op a case is about: the longest op name (from the graph or kiln's op
 * list) that prefixes the case name; else the graph's first op. */
static void primary_op(const char* case_name, const kiln_graph_t* g, char* out, size_t n) {
  char cn[256], on[128];
  normalize(case_name + (strncmp(case_name, "test_", 5) ? 0 : 5), cn, sizeof cn);
  size_t best = 0;
  snprintf(out, n, "%s", g && g->n_nodes ? g->nodes[0].op_type : "?");
  for (int32_t i = 0; g && i < g->n_nodes; ++i) {
    normalize(g->nodes[i].op_type, on, sizeof on);
    size_t l = strlen(on);
    if (l > best && !strncmp(cn, on, l)) {
      best = l;
      snprintf(out, n, "%s", g->nodes[i].op_type);
    }
  }
  for (size_t i = 0; i < kiln_op_count(); ++i) {
    normalize(kiln_op_at(i)->op_type, on, sizeof on);
    size_t l = strlen(on);
    if (l > best && !strncmp(cn, on, l)) {
      best = l;
      snprintf(out, n, "%s", kiln_op_at(i)->op_type);
    }
  }
}

static int cmp_str(const void* a, const void* b) {
  return strcmp(*(char* const*)a, *(char* const*)b);
}

typedef enum { CASE_PASS, CASE_FAIL, CASE_SKIP } outcome_t;

/* Runs every test_data_set of one case. |why| gets the reason for a fail or
 * skip. */
static outcome_t run_case(const char* dir, const char* name, report_t* rep, char* op, size_t opn,
                          char* why, size_t whyn) {
  kiln_allocator_t al = kiln_allocator_system();
  char path[8192];
  snprintf(path, sizeof path, "%s/%s/model.onnx", dir, name);
  kiln_graph_t* g = NULL;
  kiln_status_t s = kiln_onnx_parse_model(path, NULL, al, &g);
  if (!s) {
    primary_op(name, g, op, opn);
    s = kiln_graph_prepare(g);
  } else {
    primary_op(name, NULL, op, opn);
  }
  if (s) {
    outcome_t o = kiln_status_code(s) == KILN_UNSUPPORTED ? CASE_SKIP : CASE_FAIL;
    snprintf(why, whyn, "%s", kiln_status_message(s));
    kiln_status_free(s);
    kiln_graph_destroy(g);
    return o;
  }
  outcome_t result = CASE_PASS;
  int sets = 0;
  for (int set = 0; set < 64 && result == CASE_PASS; ++set) {
    char sdir[4096];
    struct stat st;
    snprintf(sdir, sizeof sdir, "%s/%s/test_data_set_%d", dir, name, set);
    if (stat(sdir, &st) != 0) break;
    ++sets;
    kiln_array_t* in = calloc((size_t)g->n_inputs + 1, sizeof(kiln_array_t));
    kiln_array_t* out = calloc((size_t)g->n_outputs + 1, sizeof(kiln_array_t));
    for (int32_t i = 0; i < g->n_inputs && !s; ++i) {
      snprintf(path, sizeof path, "%s/input_%d.pb", sdir, i);
      s = kiln_onnx_load_tensor(path, NULL, al, &in[i], NULL);
    }
    if (!s) s = kiln_ref_run(g, in, NULL, out);
    if (s) {
      result = kiln_status_code(s) == KILN_UNSUPPORTED ? CASE_SKIP : CASE_FAIL;
      snprintf(why, whyn, "test_data_set_%d: %s", set, kiln_status_message(s));
      kiln_status_free(s);
      s = NULL;
    } else {
      for (int32_t k = 0; k < g->n_outputs && result == CASE_PASS; ++k) {
        kiln_array_t want;
        snprintf(path, sizeof path, "%s/output_%d.pb", sdir, k);
        s = kiln_onnx_load_tensor(path, NULL, al, &want, NULL);
        if (s) {
          result = kiln_status_code(s) == KILN_UNSUPPORTED ? CASE_SKIP : CASE_FAIL;
          snprintf(why, whyn, "output_%d.pb: %s", k, kiln_status_message(s));
          kiln_status_free(s);
          s = NULL;
          break;
        }
        kiln_compare_result_t cr;
        kiln_compare(&out[k], &want, RTOL, ATOL, &cr);
        if (!cr.ok) {
          result = CASE_FAIL;
          snprintf(why, whyn, "test_data_set_%d output '%s': %s", set, g->tensors[g->outputs[k]].name,
                   cr.message);
        }
        kiln_array_free(al, &want);
      }
    }
    for (int32_t i = 0; i < g->n_inputs; ++i) kiln_array_free(al, &in[i]);
    for (int32_t k = 0; k < g->n_outputs; ++k) kiln_array_free(al, &out[k]);
    free(in);
    free(out);
  }
  if (result == CASE_PASS && sets == 0) {
    result = CASE_FAIL;
    snprintf(why, whyn, "no test_data_set_* folders");
  }
  kiln_graph_destroy(g);
  (void)rep;
  return result;
}

int main(int argc, char** argv) {
  const char* dir = NULL;
  const char* filters[64];
  int n_filters = 0;
  bool quiet = false;
  for (int i = 1; i < argc; ++i) {
    if (!strcmp(argv[i], "--filter") && i + 1 < argc) {
      if (n_filters < 64) filters[n_filters++] = argv[++i];
    } else if (!strcmp(argv[i], "--quiet")) {
      quiet = true;
    } else if (!strcmp(argv[i], "--help")) {
      printf("usage: kiln_conformance [--filter SUBSTR ...] [--quiet] NODE_TEST_DIR\n");
      return 0;
    } else {
      dir = argv[i];
    }
  }
  if (!dir) {
    fprintf(stderr, "usage: kiln_conformance [--filter SUBSTR ...] [--quiet] NODE_TEST_DIR\n");
    return 2;
  }
  DIR* d = opendir(dir);
  if (!d) {
    fprintf(stderr, "kiln_conformance: cannot open '%s'\n", dir);
    return 2;
  }
  char** names = NULL;
  int n_names = 0, cap = 0;
  struct dirent* e;
  while ((e = readdir(d))) {
    if (strncmp(e->d_name, "test_", 5) != 0) continue;
    bool keep = n_filters == 0;
    for (int f = 0; f < n_filters && !keep; ++f) keep = strstr(e->d_name, filters[f]) != NULL;
    if (!keep) continue;
    push(&names, &n_names, &cap, "%s%s", e->d_name, "");
  }
  closedir(d);
  if (n_names) qsort(names, (size_t)n_names, sizeof(char*), cmp_str);
  report_t rep = {0};
  int passed = 0, failed = 0, skipped = 0;
  for (int i = 0; i < n_names; ++i) {
    char op[64], why[2048] = "";
    outcome_t o = run_case(dir, names[i], &rep, op, sizeof op, why, sizeof why);
    op_row_t* row = row_for(&rep, op);
    if (o == CASE_PASS) {
      ++passed;
      row->passed++;
    } else if (o == CASE_FAIL) {
      ++failed;
      row->failed++;
      push(&rep.failures, &rep.n_failures, &rep.cap_failures, "%s: %s", names[i], why);
      fprintf(stderr, "FAIL %s: %s\n", names[i], why);
    } else {
      ++skipped;
      row->skipped++;
      push(&rep.skipped, &rep.n_skipped, &rep.cap_skipped, "%s: %s", names[i], why);
    }
  }
  /* Per-op table: ops with any run first, then skipped-only ones. */
  printf("\nONNX node conformance (rtol %g, atol %g) over %s\n", RTOL, ATOL, dir);
  printf("%-28s %7s %7s %8s\n", "op", "passed", "failed", "skipped");
  for (int pass = 0; pass < 2; ++pass)
    for (int i = 0; i < rep.n; ++i) {
      op_row_t* r = &rep.rows[i];
      bool ran = r->passed || r->failed;
      if (ran != (pass == 0)) continue;
      if (pass == 1 && quiet) continue;
      printf("%-28s %7d %7d %8d%s\n", r->op, r->passed, r->failed, r->skipped,
             kiln_op_lookup("", r->op) ? "" : "  (not claimed)");
    }
  if (!quiet && rep.n_skipped) {
    printf("\nskipped (kiln reports the op, dtype or feature as unsupported):\n");
    for (int i = 0; i < rep.n_skipped; ++i) printf("  %s\n", rep.skipped[i]);
  }
  if (rep.n_failures) {
    printf("\nfailures:\n");
    for (int i = 0; i < rep.n_failures; ++i) printf("  %s\n", rep.failures[i]);
  }
  printf("\n%d passed, %d failed, %d skipped\n", passed, failed, skipped);
  for (int i = 0; i < n_names; ++i) free(names[i]);
  free(names);
  for (int i = 0; i < rep.n_skipped; ++i) free(rep.skipped[i]);
  for (int i = 0; i < rep.n_failures; ++i) free(rep.failures[i]);
  free(rep.skipped);
  free(rep.failures);
  free(rep.rows);
  return failed ? 1 : 0;
}
