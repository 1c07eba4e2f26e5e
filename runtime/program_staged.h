/* Staged programs (module section 'STGS'; docs/DESIGN.md, "Data-dependent
 * shapes and control flow"): a model whose graph has nodes with
 * data-dependent output sizes, stored as a sequence of segments -- compiled
 * stages (whole programs, each with fixed buffers) and host nodes the
 * runtime runs itself (runtime/staged_ops.c) -- joined by a table of values.
 *
 * The program that carries the table is a shell: its buffers are the
 * model's inputs and outputs only (a data-dependent axis at its upper
 * bound), it has no kernels and no code, and a session of it runs the
 * segments (runtime/session_staged.c). This version stores stages whose
 * inputs all have fixed shapes; a stage after a data-dependent value (the
 * bucketed stages of the design) is refused by `kiln compile`. */
#ifndef KILN_RUNTIME_PROGRAM_STAGED_H_
#define KILN_RUNTIME_PROGRAM_STAGED_H_

#include <stdint.h>

#include "kiln/array.h"
#include "kiln/status.h"

typedef struct kiln_program_s kiln_program_t;

/* Bounds the parser holds a module to (beyond what its bytes could hold). */
#define KILN_STAGED_MAX_VALUES 65536
#define KILN_STAGED_MAX_SEGMENTS 4096
#define KILN_STAGED_MAX_ATTRS 4
#define KILN_STAGED_MAX_IO 64

/* The closed table of host nodes (their number is what the module stores;
 * 0 is a compiled stage). */
typedef enum kiln_staged_op_e {
  KILN_STAGED_STAGE = 0,
  KILN_STAGED_NONZERO = 1,
  KILN_STAGED_NMS = 2, /* NonMaxSuppression */
  KILN_STAGED_TOPK = 3, /* TopK whose K is computed at run time */
  KILN_STAGED_COMPRESS = 4,
  KILN_STAGED_OP_COUNT_
} kiln_staged_op_t;

typedef struct kiln_staged_value_s {
  kiln_dtype_t dtype;
  int32_t rank;
  /* Per axis its size; an axis whose bit is set in |datadep| has a size
   * known only after the node that makes it ran, and dims[] holds its upper
   * bound. */
  int64_t dims[KILN_MAX_RANK];
  uint32_t datadep;
  /* A constant (a host node's inline input, a stage output folded at
   * compile time): its bytes, owned; NULL for a value made at run time. */
  uint8_t* data;
  uint64_t nbytes;
} kiln_staged_value_t;

typedef struct kiln_staged_attr_s {
  char* name; /* owned */
  int64_t value;
} kiln_staged_attr_t;

typedef struct kiln_staged_segment_s {
  int32_t op; /* kiln_staged_op_t */
  char* name; /* the node's name (a stage: its first node's), owned */
  int32_t n_in, n_out;
  int32_t* in;  /* value ids; -1 an omitted optional input (host nodes) */
  int32_t* out; /* value ids; -1 an output nothing reads (host nodes, not the first) */
  int32_t n_attrs;
  kiln_staged_attr_t* attrs;
  /* A stage: its program, owned (inputs and outputs in the order of
   * in/out); NULL for a host node. Its weights equal to the first stage's
   * are stored once (the first stage's, borrowed). */
  kiln_program_t* prog;
} kiln_staged_segment_t;

typedef struct kiln_program_staged_s {
  int32_t n_values;
  kiln_staged_value_t* values;
  int32_t n_segments;
  kiln_staged_segment_t* segments;
  int32_t* model_in;  /* value id per program input (n_inputs) */
  int32_t* model_out; /* value id per program output (n_outputs) */
} kiln_program_staged_t;

/* The op's name ("NonZero", ...) or NULL outside the table. */
const char* kiln_staged_op_name(int32_t op);
/* The op of |name|, KILN_STAGED_STAGE when it is not in the table. */
int32_t kiln_staged_op_of(const char* name);
/* Whether |name| is an attribute host node |op| takes. */
bool kiln_staged_attr_known(int32_t op, const char* name);
/* The shape |v| has when none of its axes depends on data; bytes of it. */
uint64_t kiln_staged_value_bytes(const kiln_staged_value_t* v);

/* The checks kiln_program_validate makes of p->staged: value ids in range,
 * every value made once and before it is read, model inputs made by
 * nothing, host nodes' input and output counts and attributes, constants'
 * sizes, each stage's program valid and its inputs and outputs of the
 * values' dtypes and shapes. NULL p->staged: nothing to check. */
kiln_status_t kiln_program_validate_staged(const kiln_program_t* p);
void kiln_program_staged_free(kiln_program_t* p);

#endif /* KILN_RUNTIME_PROGRAM_STAGED_H_ */
