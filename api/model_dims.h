/* Binding symbolic input dimensions of a parsed (not yet prepared) model:
 * `kiln compile --dim N=4` and the compiler API's "dim" option. */
#ifndef KILN_API_MODEL_DIMS_H_
#define KILN_API_MODEL_DIMS_H_

#include <stdbool.h>
#include <stddef.h>

#include "ir/graph.h"

/* Binds the symbol of |spec| ("SYMBOL=SIZE") in every input shape of |g|.
 * INVALID_ARGUMENT for a malformed spec, NOT_FOUND for a symbol the model
 * lacks; both messages quote |spec|. */
KILN_MUST_USE kiln_status_t kiln_model_bind_dim(kiln_graph_t* g, const char* spec);

/* Binds every symbol still in an input shape to 1 and returns how many
 * dims it bound; their symbols go into |names| (" N seq", truncated to
 * |n| bytes with the NUL). */
int32_t kiln_model_bind_rest_to_one(kiln_graph_t* g, char* names, size_t n);

#endif

/* ---- dynamic dims: kiln compile --dim NAME=LO..HI ---- */

/* Whether |spec| asks for a range ("NAME=LO..HI"): *out_is_range, and then
 * the name (truncated to |n| bytes) and the bounds. INVALID_ARGUMENT quoting
 * |spec| for a malformed range or one outside 1 <= LO <= HI <= 2^20. */
KILN_MUST_USE kiln_status_t kiln_model_dim_range(const char* spec, char* name, size_t n, int64_t* out_lo,
                                                 int64_t* out_hi, bool* out_is_range);

/* Whether |spec| asks for shape buckets ("NAME=V1,V2,..."): *out_n sizes
 * (0 when it does not), the name (truncated to |n| bytes) and the sizes,
 * ascending, into |values| (room for |max|). INVALID_ARGUMENT quoting
 * |spec| for a malformed list, a size outside 1..2^20, a repeated size,
 * fewer than 2 or more than |max| sizes. */
KILN_MUST_USE kiln_status_t kiln_model_dim_set(const char* spec, char* name, size_t n, int64_t* values, int32_t max,
                                               int32_t* out_n);

/* `batch` names the model's batch dim when no dim of it is called that: the
 * symbol at dim 0 of its first input, copied into |name| (|n| bytes).
 * |name| is left alone for another name or a model with a dim 'batch';
 * UNSUPPORTED when the first input's dim 0 is a fixed size (the model was
 * exported without a dynamic batch). */
KILN_MUST_USE kiln_status_t kiln_model_batch_alias(const kiln_graph_t* g, char* name, size_t n);

/* Checks that the model computes each sample of dim |name| on its own, so
 * that one sample's code run once per sample is the model (api/
 * model_per_sample.c). |sym| is the model parsed (not prepared: its input
 * shapes are checked with the dim symbolic), |at2| and |at3| two more
 * parses of it, which this binds to 2 and 3 and prepares: a tensor whose
 * shape differs between them must differ in dim 0 alone, by the dim's value;
 * one whose shape agrees but whose folded value differs carries the dim as a
 * value (Shape, Size and the arithmetic on them), which only a Reshape's
 * target may take. Every node with a per-sample input keeps the dim as dim 0
 * of every output and does not mix samples while keeping the shape
 * (Softmax & co. along axis 0, gathers and scatters of per-sample data,
 * Einsum, subgraphs, plugin ops, training-mode BatchNormalization). Errors:
 * NOT_FOUND for a dim the model lacks, UNSUPPORTED naming the node (or
 * input, output) and the dim. */
KILN_MUST_USE kiln_status_t kiln_model_check_per_sample(const char* name, kiln_graph_t* sym, kiln_graph_t* at2,
                                                        kiln_graph_t* at3);
