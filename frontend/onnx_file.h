/* Whole-file reads and atomic writes of ONNX model files, shared by the
 * writers that rewrite a model (onnx_qdq.c, onnx_prune.c). */
#ifndef KILN_FRONTEND_ONNX_FILE_H_
#define KILN_FRONTEND_ONNX_FILE_H_

#include <stddef.h>
#include <stdint.h>

#include "kiln/status.h"
#include "onnx/onnx.pb-c.h"

/* Reads |path| into a new malloc'd buffer (*out, *out_n bytes; free it).
 * Errors name the file. */
KILN_MUST_USE kiln_status_t kiln_onnx_read_file(const char* path, uint8_t** out, size_t* out_n);
/* Writes |size| bytes to |out_path| through a temporary file renamed at the
 * end, so a failure leaves no partial model. Errors name the file. */
KILN_MUST_USE kiln_status_t kiln_onnx_write_file(const char* out_path, const uint8_t* data, size_t size);

/* Packs |m| and writes it to |out_path| (kiln_onnx_write_file) unless |s|
 * is already an error; frees |m| either way and returns the first error. */
KILN_MUST_USE kiln_status_t kiln_onnx_pack_write(Onnx__ModelProto* m, kiln_status_t s, const char* out_path);

#endif /* KILN_FRONTEND_ONNX_FILE_H_ */
