/* Private to the nn op family (ir/ops/nn*.c): schema entry points and the
 * helpers the split files share (spatial window attributes, f32 staging of
 * f16/int inputs, a blocked GEMM). Nothing here is part of kiln's API.
 */
#ifndef KILN_IR_OPS_NN_INTERNAL_H_
#define KILN_IR_OPS_NN_INTERNAL_H_

#include "ir/op.h"

/* ---- schema entry points (one set per op, see nn.c) ------------------ */

#define KILN_NN_DECLARE(name)                                 \
  kiln_status_t kiln_nn_##name##_infer(kiln_infer_t* ctx);    \
  kiln_status_t kiln_nn_##name##_run(const kiln_ref_ctx_t* ctx); \
  int64_t kiln_nn_##name##_flops(const kiln_infer_t* ctx);

KILN_NN_DECLARE(conv)
KILN_NN_DECLARE(conv_transpose)
KILN_NN_DECLARE(matmul)
KILN_NN_DECLARE(gemm)
KILN_NN_DECLARE(batchnorm)
KILN_NN_DECLARE(maxpool)
KILN_NN_DECLARE(avgpool)
KILN_NN_DECLARE(lppool)
KILN_NN_DECLARE(global_avgpool)
KILN_NN_DECLARE(global_maxpool)
KILN_NN_DECLARE(softmax)
KILN_NN_DECLARE(log_softmax)
KILN_NN_DECLARE(layernorm)
KILN_NN_DECLARE(reduce_mean)
KILN_NN_DECLARE(reduce_sum)
KILN_NN_DECLARE(reduce_max)
KILN_NN_DECLARE(reduce_min)
KILN_NN_DECLARE(reduce_prod)
KILN_NN_DECLARE(reduce_l1)
KILN_NN_DECLARE(reduce_l2)
KILN_NN_DECLARE(reduce_sum_square)
KILN_NN_DECLARE(reduce_log_sum)
KILN_NN_DECLARE(reduce_log_sum_exp)
KILN_NN_DECLARE(argmax)
KILN_NN_DECLARE(argmin)
KILN_NN_DECLARE(hardmax)
KILN_NN_DECLARE(instancenorm)
KILN_NN_DECLARE(groupnorm)
KILN_NN_DECLARE(lrn)
KILN_NN_DECLARE(lpnorm)
KILN_NN_DECLARE(mvn)
KILN_NN_DECLARE(lstm)
KILN_NN_DECLARE(gru)
KILN_NN_DECLARE(rnn)
KILN_NN_DECLARE(nll_loss)
KILN_NN_DECLARE(sce_loss)
KILN_NN_DECLARE(det)
KILN_NN_DECLARE(deform_conv)
KILN_NN_DECLARE(quantize_linear)
KILN_NN_DECLARE(dequantize_linear)
KILN_NN_DECLARE(dynamic_quantize_linear)
KILN_NN_DECLARE(matmul_integer)
KILN_NN_DECLARE(qlinear_matmul)
KILN_NN_DECLARE(conv_integer)
KILN_NN_DECLARE(qlinear_conv)
KILN_NN_DECLARE(qlinear_add)
KILN_NN_DECLARE(qlinear_global_avgpool)

#undef KILN_NN_DECLARE

/* The Reduce* kinds (schema in nn_reduce.c; the lowering shares them). */
typedef enum kiln_nn_red_kind_e {
  KILN_NN_RED_MEAN, KILN_NN_RED_SUM, KILN_NN_RED_MAX, KILN_NN_RED_MIN,
  KILN_NN_RED_PROD, KILN_NN_RED_L1, KILN_NN_RED_L2, KILN_NN_RED_SUMSQ,
  KILN_NN_RED_LOGSUM, KILN_NN_RED_LOGSUMEXP
} kiln_nn_red_kind_t;
/* "ReduceMean", ... */
const char* kiln_nn_red_name(kiln_nn_red_kind_t k);

/* ---- recurrent layers (LSTM, GRU, RNN; nn_rnn.c) ------------------------ */

typedef enum kiln_nn_rnn_kind_e {
  KILN_NN_RNN_LSTM = 0, /* gates i, o, f, c; inputs X W R B seq_lens h0 c0 P */
  KILN_NN_RNN_GRU,      /* gates z, r, h; inputs X W R B seq_lens h0 */
  KILN_NN_RNN_RNN,      /* one gate; inputs X W R B seq_lens h0 */
} kiln_nn_rnn_kind_t;

/* The ONNX activation set of the recurrent ops. */
typedef enum kiln_nn_rnn_fn_e {
  KILN_NN_ACT_RELU = 0,
  KILN_NN_ACT_TANH,
  KILN_NN_ACT_SIGMOID,
  KILN_NN_ACT_AFFINE,
  KILN_NN_ACT_LEAKY_RELU,
  KILN_NN_ACT_THRESHOLDED_RELU,
  KILN_NN_ACT_SCALED_TANH,
  KILN_NN_ACT_HARD_SIGMOID,
  KILN_NN_ACT_ELU,
  KILN_NN_ACT_SOFTSIGN,
  KILN_NN_ACT_SOFTPLUS,
} kiln_nn_rnn_fn_t;

typedef struct kiln_nn_rnn_act_s {
  kiln_nn_rnn_fn_t fn;
  float alpha, beta;
} kiln_nn_rnn_act_t;

/* A recurrent node's attributes, checked (kiln_nn_rnn_parse). */
typedef struct kiln_nn_rnn_s {
  kiln_nn_rnn_kind_t kind;
  int32_t gates;      /* 4, 3, 1 */
  int32_t dirs;       /* 1 or 2 */
  bool reverse;       /* direction "reverse" (dirs 1) */
  int64_t hidden;     /* hidden_size, or -1 when absent (then from R) */
  int64_t layout;     /* 0: X [T,B,I]; 1: X [B,T,I] */
  bool has_clip;
  float clip;
  bool input_forget;  /* LSTM: f = 1 - i */
  bool lbr;           /* GRU linear_before_reset */
  int32_t n_act;      /* activations per direction: 3, 2, 1 */
  kiln_nn_rnn_act_t act[2][3]; /* [direction][f, g, h] */
} kiln_nn_rnn_t;

/* Reads and checks the attributes of |n| (an LSTM, GRU or RNN node): unknown
 * activations, bad direction/layout/clip and activation counts are errors
 * naming the node. Alphas and betas are taken in order by the activations
 * that use them, with the ONNX defaults for the rest (as onnxruntime does). */
kiln_status_t kiln_nn_rnn_parse(const kiln_node_t* n, kiln_nn_rnn_kind_t kind,
                                kiln_nn_rnn_t* out);
/* True when direction |d| (0 or 1) runs backwards in time. */
bool kiln_nn_rnn_dir_reverse(const kiln_nn_rnn_t* r, int32_t d);

/* ---- losses (NegativeLogLikelihoodLoss, SoftmaxCrossEntropyLoss; nn_loss.c) */

typedef enum kiln_nn_loss_red_e {
  KILN_NN_LOSS_NONE = 0,
  KILN_NN_LOSS_SUM,
  KILN_NN_LOSS_MEAN,
} kiln_nn_loss_red_t;

typedef struct kiln_nn_loss_s {
  kiln_nn_loss_red_t reduction;
  bool has_ignore; /* ignore_index present */
  int64_t ignore;
} kiln_nn_loss_t;

/* Reads the reduction and ignore_index attributes of a loss node; an unknown
 * reduction is an INVALID_ARGUMENT naming |op| and the node. */
kiln_status_t kiln_nn_loss_parse(const kiln_node_t* node, const char* op, kiln_nn_loss_t* out);

/* ---- messages ---------------------------------------------------------- */

/* "[3,3]" into |buf|; returns |buf|. */
char* kiln_nn_fmt_ints(const int64_t* v, int64_t n, char* buf, size_t size);
/* Name of input |i| for messages ("'W'"), or "input i" when unnamed. */
const char* kiln_nn_in_name(const kiln_infer_t* ctx, int32_t i);

/* ---- spatial windows (Conv, ConvTranspose, pools) ---------------------- */

/* Kernels run on at most 3 spatial dims (1-D and 2-D are padded to 3-D with
 * size-1 leading dims), which covers every ONNX model kiln targets. */
#define KILN_NN_MAX_SPATIAL 3

typedef enum kiln_nn_auto_pad_e {
  KILN_NN_PAD_NOTSET = 0,
  KILN_NN_PAD_SAME_UPPER,
  KILN_NN_PAD_SAME_LOWER,
  KILN_NN_PAD_VALID,
} kiln_nn_auto_pad_t;

typedef struct kiln_nn_window_s {
  int32_t nsp;         /* spatial rank */
  bool has_kernel;     /* kernel_shape attribute present */
  kiln_nn_auto_pad_t auto_pad;
  bool has_pads;       /* pads attribute present */
  int64_t kernel[KILN_MAX_RANK];
  int64_t stride[KILN_MAX_RANK];
  int64_t dilation[KILN_MAX_RANK];
  int64_t pad_begin[KILN_MAX_RANK];
  int64_t pad_end[KILN_MAX_RANK];
} kiln_nn_window_t;

/* Reads kernel_shape, strides, dilations, pads and auto_pad of |n| for
 * |nsp| spatial dims, checking lengths and ranges (strides/dilations >= 1,
 * kernel >= 1, pads >= 0, all below 2^31). |op| prefixes messages. When
 * |kernel_required| the kernel_shape attribute must be present. */
kiln_status_t kiln_nn_window_parse(const kiln_node_t* n, const char* op,
                                   int32_t nsp, bool kernel_required,
                                   kiln_nn_window_t* w);

/* Output size of spatial axis |i| for input size |in| (>= 0), resolving
 * auto_pad SAME_* into w->pad_begin/pad_end[i]. ceil_mode for pools (the
 * last window must start inside the input or its left padding). Fails with
 * a message naming |op| when the output would be <= 0. */
kiln_status_t kiln_nn_window_out(kiln_nn_window_t* w, const char* op,
                                 int32_t i, int64_t in, bool ceil_mode,
                                 int64_t* out);

/* A window flattened to exactly 3 spatial dims (leading dims of size 1). */
typedef struct kiln_nn_win3_s {
  int64_t in[3], out[3], k[3], s[3], d[3], p[3];
} kiln_nn_win3_t;

/* Fills |w3| from |w| and static in/out spatial sizes (nsp entries). */
void kiln_nn_win3(const kiln_nn_window_t* w, const int64_t* in,
                  const int64_t* out, kiln_nn_win3_t* w3);

/* The half-open range [lo, hi) of o in [0, n_out) for which
 * o*stride + offset lies in [0, n_in). */
void kiln_nn_valid_range(int64_t offset, int64_t stride, int64_t n_in,
                         int64_t n_out, int64_t* lo, int64_t* hi);

/* ---- f32 staging --------------------------------------------------------
 * Kernels compute in f32. Inputs of another dtype are converted into a
 * scratch copy; outputs of another dtype are computed into scratch and
 * converted back by kiln_nn_f32_store. Scratch is freed with
 * kiln_nn_scratch_free (NULL is fine). */
kiln_status_t kiln_nn_f32_load(const kiln_ref_ctx_t* ctx, const kiln_array_t* a,
                               const float** out, float** scratch);
kiln_status_t kiln_nn_f32_dest(const kiln_ref_ctx_t* ctx, kiln_array_t* a,
                               float** out, float** scratch);
/* Converts |scratch| into |a| when scratch is non-NULL, then frees it. */
void kiln_nn_f32_store(const kiln_ref_ctx_t* ctx, kiln_array_t* a,
                       float* scratch);
void kiln_nn_scratch_free(const kiln_ref_ctx_t* ctx, void* p);
/* Zeroed scratch of |count| elements of |elem| bytes; OUT_OF_MEMORY names
 * |what|. */
kiln_status_t kiln_nn_scratch(const kiln_ref_ctx_t* ctx, int64_t count,
                              size_t elem, const char* what, void** out);

/* ---- GEMM -------------------------------------------------------------- */

/* C[M,N] += A[M,K] * B[K,N] in f32. A element (i,k) is at
 * a[i*a_rs + k*a_cs] (so transposed A needs no copy); B and C are row-major
 * with leading dims ldb, ldc. Blocked over N and K, j innermost so the
 * compiler vectorises it. */
void kiln_nn_sgemm(int64_t M, int64_t N, int64_t K, const float* a,
                   int64_t a_rs, int64_t a_cs, const float* b, int64_t ldb,
                   float* c, int64_t ldc);

/* ---- misc -------------------------------------------------------------- */

/* a * b for FLOP counts, saturating at INT64_MAX instead of overflowing
 * (absurd shapes must not be undefined behaviour). a, b >= 0. */
int64_t kiln_nn_mul_sat(int64_t a, int64_t b);
/* Product of dims [from, to) of a static shape. */
int64_t kiln_nn_prod(const kiln_shape_t* s, int32_t from, int32_t to);
/* Checks that input |i| has a float dtype (f32/f16) when known. */
kiln_status_t kiln_nn_require_float(const kiln_infer_t* ctx, const char* op,
                                    int32_t i);

#endif /* KILN_IR_OPS_NN_INTERNAL_H_ */
