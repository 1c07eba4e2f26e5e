/* Binding symbolic input dimensions of a parsed (not yet prepared) model:
 * `kiln compile --dim N=4` and the compiler API's "dim" option. */
#ifndef KILN_API_MODEL_DIMS_H_
#define KILN_API_MODEL_DIMS_H_

#include <stdio.h>

#include "ir/graph.h"

/* Binds the symbol of |spec| ("SYMBOL=SIZE") in every input shape of |g|.
 * INVALID_ARGUMENT for a malformed spec, NOT_FOUND for a symbol the model
 * lacks; both messages quote |spec|. */
KILN_MUST_USE kiln_status_t kiln_model_bind_dim(kiln_graph_t* g, const char* spec);

/* Binds every symbol still in an input shape to 1. With |note|, writes one
 * "note: symbolic dims bound to 1 ..." line naming them (nothing when
 * there are none). */
void kiln_model_bind_rest_to_one(kiln_graph_t* g, FILE* note);

#endif
