/* Binding symbolic input dimensions of a parsed (not yet prepared) model:
 * `kiln compile --dim N=4` and the compiler API's "dim" option. */
#ifndef KILN_API_MODEL_DIMS_H_
#define KILN_API_MODEL_DIMS_H_

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
