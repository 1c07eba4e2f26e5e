/* Test helper: the small model the tuning tests and the tuning-cache
 * fuzzer apply records to: X [32,96] x W [96,64] -> Y (MatMul);
 * I [1,16,20,20] -> Conv 3x3 pad 1 (32) -> Relu -> depthwise 3x3
 * (32 groups) -> Z. Include after "bad_model_util.h". */
#ifndef KILN_TESTS_TUNE_MODEL_UTIL_H
#define KILN_TESTS_TUNE_MODEL_UTIL_H

#include <stdbool.h>

/* Writes the model to |path|; |dw_pad|: the depthwise conv pads by 1
 * (Z [1,32,20,20]) instead of none (Z [1,32,18,18]). */
static __attribute__((unused)) bool tune_write_model(const char* path, bool dw_pad) {
  bm_model_t b;
  bm_init(&b, 13);
  int64_t xd[2] = {32, 96}, id[4] = {1, 16, 20, 20};
  b.g.input[b.g.n_input++] = bm_value(&b, "X", BM_F32, 2, xd, NULL);
  b.g.input[b.g.n_input++] = bm_value(&b, "I", BM_F32, 4, id, NULL);
  int64_t wd[2] = {96, 64}, vd[4] = {32, 16, 3, 3}, dd[4] = {32, 1, 3, 3};
  bm_init_f32(&b, "W", 2, wd);
  bm_init_f32(&b, "V", 4, vd);
  bm_init_f32(&b, "D", 4, dd);
  bm_node(&b, "MatMul", "mm", "X,W", "Y");
  Onnx__NodeProto* c = bm_node(&b, "Conv", "conv", "I,V", "C");
  bm_attr_ints(&b, c, "pads", 4, (int64_t[]){1, 1, 1, 1});
  bm_node(&b, "Relu", "relu", "C", "R");
  Onnx__NodeProto* d = bm_node(&b, "Conv", "dw", "R,D", "Z");
  bm_attr_int(&b, d, "group", 32);
  if (dw_pad) bm_attr_ints(&b, d, "pads", 4, (int64_t[]){1, 1, 1, 1});
  bm_output(&b, "Y");
  bm_output(&b, "Z");
  const bool ok = bm_write(&b, path);
  bm_free(&b);
  return ok;
}

#endif /* KILN_TESTS_TUNE_MODEL_UTIL_H */
