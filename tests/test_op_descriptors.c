/* The op descriptors (ir/ops/<family>.def): one line per op gives its schema
 * (ir/op.h) and its lowering (lowering/lower.h). These checks hold the two
 * tables to each other and the template eligibility bits to the template
 * anchors, so a line added to one side only, a duplicated op type or a bit
 * on the wrong op fails here rather than as an "op has no lowering" error
 * on some model. */
#include <string.h>

#include "ir/op.h"
#include "lowering/lower.h"
#include "testing.h"

/* The lowering tables, one per family (their counts are not constant
 * expressions, so this is a function rather than a static array). */
#define N_FAMILIES 3
static const kiln_lower_entry_t* lower_table(size_t k, size_t* n) {
  switch (k) {
    case 0: *n = kiln_lower_elementwise_count; return kiln_lower_elementwise;
    case 1: *n = kiln_lower_nn_count; return kiln_lower_nn;
    default: *n = kiln_lower_tensor_count; return kiln_lower_tensor;
  }
}

/* Ops with a schema but no lowering (the reference executor runs them, no
 * target does). None today; a schema-only op must be listed here with why. */
static const char* const schema_only[] = {NULL};

static bool is_schema_only(const char* op) {
  for (size_t i = 0; schema_only[i]; ++i)
    if (strcmp(schema_only[i], op) == 0) return true;
  return false;
}

static void test_every_schema_lowers(void) {
  CHECK(kiln_op_count() > 0);
  for (size_t i = 0; i < kiln_op_count(); ++i) {
    const char* op = kiln_op_at(i)->op_type;
    if (is_schema_only(op))
      CHECK_MSG(!kiln_lower_lookup(op), "%s is listed as schema-only but has a lowering", op);
    else
      CHECK_MSG(kiln_lower_lookup(op) != NULL, "op %s has a schema but no lowering", op);
  }
}

static void test_every_lowering_has_schema(void) {
  size_t total = 0;
  for (size_t k = 0; k < N_FAMILIES; ++k) {
    size_t n;
    const kiln_lower_entry_t* t = lower_table(k, &n);
    CHECK(n > 0);
    total += n;
    for (size_t i = 0; i < n; ++i) {
      const kiln_lower_entry_t* e = &t[i];
      CHECK_MSG(e->fn != NULL, "lowering of %s is NULL", e->op_type);
      CHECK_MSG(kiln_op_lookup(NULL, e->op_type) != NULL, "op %s has a lowering but no schema",
                e->op_type);
      CHECK_MSG(kiln_lower_lookup(e->op_type) == e->fn, "lowering of %s is shadowed", e->op_type);
    }
  }
  size_t schema_only_n = 0;
  while (schema_only[schema_only_n]) ++schema_only_n;
  CHECK_MSG(total + schema_only_n == kiln_op_count(), "%zu lowerings + %zu schema-only for %zu schemas",
            total, schema_only_n, kiln_op_count());
}

static void test_no_duplicate_op_types(void) {
  for (size_t i = 0; i < kiln_op_count(); ++i)
    for (size_t j = i + 1; j < kiln_op_count(); ++j)
      CHECK_MSG(strcmp(kiln_op_at(i)->op_type, kiln_op_at(j)->op_type) != 0, "op %s has two schemas",
                kiln_op_at(i)->op_type);
  for (size_t a = 0; a < N_FAMILIES; ++a) {
    size_t na;
    const kiln_lower_entry_t* ta = lower_table(a, &na);
    for (size_t i = 0; i < na; ++i)
      for (size_t b = a; b < N_FAMILIES; ++b) {
        size_t nb;
        const kiln_lower_entry_t* tb = lower_table(b, &nb);
        for (size_t j = (a == b ? i + 1 : 0); j < nb; ++j)
          CHECK_MSG(strcmp(ta[i].op_type, tb[j].op_type) != 0, "op %s has two lowerings",
                    ta[i].op_type);
      }
  }
}

/* The template anchors: Conv for the conv/Winograd/depthwise templates,
 * MatMul and Gemm for the GEMM one, Gemm alone with Gemm's operands. */
static uint32_t expected_templates(const char* op) {
  if (strcmp(op, "Conv") == 0) return KILN_OP_TMPL_CONV;
  if (strcmp(op, "MatMul") == 0) return KILN_OP_TMPL_GEMM;
  if (strcmp(op, "Gemm") == 0) return KILN_OP_TMPL_GEMM | KILN_OP_TMPL_GEMM_ATTRS;
  return 0;
}

static void test_template_bits(void) {
  int anchors = 0;
  for (size_t i = 0; i < kiln_op_count(); ++i) {
    const kiln_op_schema_t* s = kiln_op_at(i);
    CHECK_MSG(s->templates == expected_templates(s->op_type), "op %s: template bits 0x%x, expected 0x%x",
              s->op_type, (unsigned)s->templates, (unsigned)expected_templates(s->op_type));
    /* GEMM_ATTRS only qualifies GEMM. */
    CHECK_MSG(!(s->templates & KILN_OP_TMPL_GEMM_ATTRS) || (s->templates & KILN_OP_TMPL_GEMM),
              "op %s: GEMM_ATTRS without GEMM", s->op_type);
    anchors += s->templates != 0;
  }
  CHECK(anchors == 3);
}

/* Nodes a pass added after resolve have no schema yet: the bits come from
 * the op type then; a resolved node's schema wins; other domains get none. */
static void test_node_templates(void) {
  kiln_node_t n;
  memset(&n, 0, sizeof n);
  n.op_type = "Gemm";
  n.domain = "";
  CHECK(kiln_op_node_templates(&n) == (KILN_OP_TMPL_GEMM | KILN_OP_TMPL_GEMM_ATTRS));
  n.domain = "ai.onnx";
  CHECK(kiln_op_node_templates(&n) == (KILN_OP_TMPL_GEMM | KILN_OP_TMPL_GEMM_ATTRS));
  n.domain = "com.example";
  CHECK(kiln_op_node_templates(&n) == 0);
  n.domain = "";
  n.op_type = "Relu";
  CHECK(kiln_op_node_templates(&n) == 0);
  n.op_type = "NoSuchOp";
  CHECK(kiln_op_node_templates(&n) == 0);
  n.schema = kiln_op_lookup(NULL, "Conv");
  CHECK(kiln_op_node_templates(&n) == KILN_OP_TMPL_CONV);
  CHECK(kiln_op_node_templates(NULL) == 0);
}

int main(void) {
  RUN(test_every_schema_lowers);
  RUN(test_every_lowering_has_schema);
  RUN(test_no_duplicate_op_types);
  RUN(test_template_bits);
  RUN(test_node_templates);
  return kiln_test_finish();
}
