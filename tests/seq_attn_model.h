/* The attention block the sequence-range tests compile (test_dyn_seq_range
 * on the CPU, test_dyn_seq_gpu on OpenCL / Vulkan):
 *   X [1,seq,width] -> LayerNorm(X + softmax(0.1 * X Wq (X Wk)^T) X Wv)
 * with seeded weights, written as an ONNX file at |path|. Include after
 * bad_model_util.h (the bm_* builder). */
#ifndef KILN_TESTS_SEQ_ATTN_MODEL_H_
#define KILN_TESTS_SEQ_ATTN_MODEL_H_

static bool seq_attn_model_write(const char* path, int64_t width) {
  bm_model_t b;
  bm_init(&b, 17);
  const char* params[3] = {NULL, "seq", NULL};
  int64_t xd[3] = {1, 0, width};
  b.g.input[b.g.n_input++] = bm_value(&b, "X", BM_F32, 3, xd, params);
  int64_t wd[2] = {width, width}, one = 1;
  bm_init_f32(&b, "Wq", 2, wd);
  bm_init_f32(&b, "Wk", 2, wd);
  bm_init_f32(&b, "Wv", 2, wd);
  bm_init_f32(&b, "gamma", 1, &width);
  bm_init_f32(&b, "beta", 1, &width);
  float* sc = bm_alloc(&b, sizeof(float));
  *sc = 0.1f;
  bm_initializer(&b, "scale", BM_F32, 1, &one, sc, sizeof(float));
  bm_node(&b, "MatMul", "q", "X,Wq", "Q");
  bm_node(&b, "MatMul", "k", "X,Wk", "K");
  bm_node(&b, "MatMul", "v", "X,Wv", "V");
  Onnx__NodeProto* kt = bm_node(&b, "Transpose", "kt", "K", "Kt");
  bm_attr_ints(&b, kt, "perm", 3, (const int64_t[]){0, 2, 1});
  bm_node(&b, "MatMul", "scores", "Q,Kt", "S");
  bm_node(&b, "Mul", "scaled", "S,scale", "S2");
  Onnx__NodeProto* sm = bm_node(&b, "Softmax", "softmax", "S2", "P");
  bm_attr_int(&b, sm, "axis", -1);
  bm_node(&b, "MatMul", "mix", "P,V", "H");
  bm_node(&b, "Add", "residual", "H,X", "R");
  Onnx__NodeProto* ln = bm_node(&b, "LayerNormalization", "ln", "R,gamma,beta", "Y");
  bm_attr_int(&b, ln, "axis", -1);
  bm_output(&b, "Y");
  const bool ok = bm_write(&b, path);
  bm_free(&b);
  return ok;
}

#endif /* KILN_TESTS_SEQ_ATTN_MODEL_H_ */
