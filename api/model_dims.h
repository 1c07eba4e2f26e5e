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

/* Checks that model |g| (parsed, not prepared: this prepares it with the
 * dim symbolic) computes each sample of dim |name| on its own, so that one
 * sample's code run per sample is the model: the dim is dim 0 of every
 * input, every output and every tensor that depends on it, and nowhere
 * else; no node reads it as a value (Shape, Size), moves it (Transpose,
 * Reshape into another dim), slices, pads, concatenates or reduces along it
 * (each changes dim 0), or mixes samples while keeping the shape (Softmax &
 * co. along axis 0, gathers and scatters of per-sample data, Einsum,
 * subgraphs, plugin ops, training-mode BatchNormalization). The error is
 * UNSUPPORTED naming the node (or input/output) and the dim. */
KILN_MUST_USE kiln_status_t kiln_model_check_per_sample(kiln_graph_t* g, const char* name);
