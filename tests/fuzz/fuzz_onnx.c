/* libFuzzer harness: the ONNX loader (frontend/onnx.c) -- the wire-format
 * walk, protobuf-c decoding under a byte budget, tensor conversion (raw,
 * typed and external data), then graph preparation: op resolution, topological
 * sort, shape inference and constant folding.
 *
 * Each input is written as model.onnx into a scratch folder that also holds
 * w.bin (4 KiB), so external-data locations ("w.bin", offsets, lengths, and
 * hostile paths) take their real code paths. Caps are lowered so that one
 * input cannot ask for more than the fuzzer's memory limit: 16 MiB per
 * tensor, 64 MiB of weights. */
#include <stdint.h>
#include <stdlib.h>

#include "frontend/onnx.h"
#include "fuzz_util.h"

int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  static char model[256];
  if (!model[0]) {
    char w[256];
    uint8_t blob[4096];
    for (size_t i = 0; i < sizeof blob; ++i) blob[i] = (uint8_t)(i * 37u + 11u);
    fz_write(fz_path(w, sizeof w, "w.bin"), blob, sizeof blob);
    fz_path(model, sizeof model, "model.onnx");
  }
  fz_write(model, data, size);
  kiln_onnx_options_t o;
  kiln_onnx_options_default(&o);
  o.max_tensor_bytes = 16 << 20;
  o.max_total_bytes = 64 << 20;
  o.max_nodes = 10000;
  kiln_graph_t* g = NULL;
  kiln_status_t s = kiln_onnx_load_model(model, &o, kiln_allocator_system(), &g);
  kiln_status_free(s);
  kiln_graph_destroy(g);
  return 0;
}
