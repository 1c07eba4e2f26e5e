/* Plugin ops in the graph IR: the schema kiln makes for each registered
 * custom op (include/kiln/custom_op.h), and helpers lowering and the
 * targets share. Internal to the compiler. */
#ifndef KILN_IR_OPS_CUSTOM_H_
#define KILN_IR_OPS_CUSTOM_H_

#include "ir/op.h"
#include "kiln/custom_op.h"

#ifdef __cplusplus
extern "C" {
#endif

/* The schema of the plugin op |domain| / |op_type| when one is registered
 * and |opset| (the model's opset of that domain) is in its range, else
 * NULL. Static storage. */
const kiln_op_schema_t* kiln_custom_schema_lookup(const char* domain, const char* op_type, int64_t opset);
/* True for a schema kiln_custom_schema_lookup made. */
bool kiln_op_schema_is_custom(const kiln_op_schema_t* s);
/* The registered op node |n| names (by domain and type), or NULL. */
const kiln_custom_op_t* kiln_custom_op_of(const kiln_node_t* n);
/* The node's attribute values in the op's declaration order (defaults for
 * absent ones); an undeclared, missing required or mistyped attribute is
 * an INVALID_ARGUMENT naming the plugin, the op and the node. The values
 * borrow the node's storage. */
KILN_MUST_USE kiln_status_t kiln_custom_node_attrs(const kiln_custom_op_t* op, const kiln_node_t* n,
                                                   kiln_custom_attr_t out[KILN_CUSTOM_MAX_ATTRS]);
/* The element-wise activation the graph passes fused into node |n| of an
 * op that declares epilogue (ir/pass_plugin.c): its ONNX op type ("Relu",
 * "LeakyRelu", "Sigmoid", "Tanh") and LeakyRelu's alpha, recorded on the
 * node as the attributes KILN_CUSTOM_EPILOGUE_ATTR and ..._ALPHA_ATTR.
 * NULL when none. */
#define KILN_CUSTOM_EPILOGUE_ATTR "kiln_epilogue"
#define KILN_CUSTOM_EPILOGUE_ALPHA_ATTR "kiln_epilogue_alpha"
const char* kiln_custom_node_epilogue(const kiln_node_t* n, float* out_alpha);
/* f(v) of that activation (the reference's). */
float kiln_custom_epilogue_apply(const char* kind, float alpha, float v);

/* "plugin op D/N (plugin 'P') at node 'X'" into |buf|, for messages. */
void kiln_custom_where(const kiln_custom_op_t* op, const kiln_node_t* n, char* buf, size_t cap);

#ifdef __cplusplus
}
#endif
#endif /* KILN_IR_OPS_CUSTOM_H_ */
