/* The attention block the sequence-range tests compile (test_dyn_seq_range
 * on the CPU, test_dyn_seq_gpu on OpenCL / Vulkan):
 *   X [1,seq,width] -> LayerNorm(X + softmax(0.1 * X Wq (X Wk)^T) X Wv)
 * with seeded weights, written as an ONNX file at |path|; its seeded
 * inputs, and one session run checked against the reference executor.
 * Include after bad_model_util.h (the bm_* builder), testing.h and the
 * headers of the ONNX parser, kiln_model_bind_dim, the reference executor
 * and the runtime. */
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

/* X [1,seq,width] filled from |seed| with floats in [-1, 1). */
static kiln_array_t seq_attn_input(int64_t seq, int64_t width, uint32_t seed) {
  kiln_array_t a;
  memset(&a, 0, sizeof a);
  kiln_shape_t s = kiln_shape_make(3, (const int64_t[]){1, seq, width});
  if (!CHECK_OK(kiln_array_alloc(kiln_allocator_system(), KILN_DTYPE_F32, &s, &a))) return a;
  float* f = a.data;
  for (size_t i = 0; i < a.nbytes / 4; ++i) {
    seed = seed * 1664525u + 1013904223u;
    f[i] = (float)((seed >> 8) & 0xffff) / 32768.0f - 1.0f;
  }
  return a;
}

/* Session |s| of the model at |path| run at |seq| (input from |seed|)
 * against the reference executor on the model bound to it; with
 * |arena_bound| also the run's arena within 1.05x of its lower bound. */
static void seq_attn_check_run(kiln_session_t* s, const char* path, int64_t seq, int64_t width, uint32_t seed,
                               bool arena_bound) {
  const kiln_allocator_t al = kiln_allocator_system();
  kiln_graph_t* g = NULL;
  char q[64];
  snprintf(q, sizeof q, "seq=%lld", (long long)seq);
  kiln_array_t x = seq_attn_input(seq, width, seed), want, got;
  memset(&want, 0, sizeof want);
  memset(&got, 0, sizeof got);
  if (CHECK_OK(kiln_onnx_parse_model(path, NULL, al, &g)) && CHECK_OK(kiln_model_bind_dim(g, q)) &&
      CHECK_OK(kiln_graph_prepare(g)) && CHECK_OK(kiln_ref_run(g, &x, NULL, &want)) &&
      CHECK_OK(kiln_session_run(s, &x, &got))) {
    kiln_shape_t wsh = kiln_shape_make(3, (const int64_t[]){1, seq, width});
    CHECK_MSG(kiln_shape_equal(&got.shape, &wsh), "seq %lld: output shape", (long long)seq);
    double worst = 0;
    for (size_t i = 0; i < want.nbytes / 4 && got.nbytes == want.nbytes; ++i)
      worst = fmax(worst, fabs(((float*)got.data)[i] - ((float*)want.data)[i]));
    CHECK_MSG(got.nbytes == want.nbytes && worst < 1e-4, "seq %lld: max abs error %g", (long long)seq, worst);
    if (arena_bound) {
      kiln_session_memory_t mem;
      kiln_session_memory(s, &mem);
      CHECK_MSG(mem.arena_bytes <= mem.lower_bound_bytes * 105 / 100, "seq %lld: arena %llu, its bound %llu",
                (long long)seq, (unsigned long long)mem.arena_bytes, (unsigned long long)mem.lower_bound_bytes);
    }
  }
  kiln_graph_destroy(g);
  kiln_array_free(al, &x);
  kiln_array_free(al, &want);
  kiln_array_free(al, &got);
}

#endif /* KILN_TESTS_SEQ_ATTN_MODEL_H_ */
