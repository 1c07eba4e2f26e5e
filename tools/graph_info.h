/* `kiln info` on an ONNX model (tools/kiln.c parses the options). */
#ifndef KILN_TOOLS_GRAPH_INFO_H_
#define KILN_TOOLS_GRAPH_INFO_H_

#include <stdbool.h>

#include "ir/graph.h"

/* Prints prepared |g| (loaded from |model|): inputs, outputs, the op
 * histogram, one line per node with its output shape, parameters, FLOPs
 * and bytes moved, the totals; with |fused| the graph passes, lowering and
 * fusion run on |g| (changing it) and the fusion report follows. */
kiln_status_t kiln_cli_print_graph_info(kiln_graph_t* g, const char* model, bool fused);

#endif /* KILN_TOOLS_GRAPH_INFO_H_ */
