/* Private pieces of the OpenCL target: the GEMM, conv, Winograd and
 * depthwise template instances (printed from the descriptors lowering
 * chose, lowering/template.h) and the GPU re-binding of CPU-style PARALLEL
 * loops. Not for use outside targets/opencl/ (and its tests / the sgemm
 * bench). */
#ifndef KILN_TARGETS_OPENCL_OPENCL_INTERNAL_H_
#define KILN_TARGETS_OPENCL_OPENCL_INTERNAL_H_

#include "lowering/plan.h"
#include "targets/cfamily/printer.h"
#include "lowering/template.h"
#include "targets/gpu_bind.h"
#include "targets/gpu_conv.h"

#ifdef __cplusplus
extern "C" {
#endif

/* Embedded kernels/opencl/gemm.cl (cmake/embed.cmake). */
extern const char kiln_cl_gemm[];
extern const size_t kiln_cl_gemm_len;

/* Tile parameters of the GEMM template (see kernels/opencl/gemm.cl). */
typedef struct kiln_opencl_gemm_tiles_s {
  int32_t tm, tn, vw, wx, wy, bk, mm, mn;
} kiln_opencl_gemm_tiles_t;

/* Replaces |t| with the tiles environment variable |var| gives as
 * "tm,tn,vw,wx,wy,bk,mm,mn" (tuning): true when it was set and valid (all
 * positive, tn a multiple of vw), else |t| stays and false. The tile rules
 * (opencl_tiles.c, run in lowering) read KILN_OPENCL_GEMM_TILES for GEMM
 * instances and KILN_OPENCL_CONV_TILES for implicit-GEMM conv instances. */
bool kiln_opencl_tiles_from_env(const char* var, kiln_opencl_gemm_tiles_t* t);

/* Default tiles of an M x N x K product (measured on PoCL). */
kiln_opencl_gemm_tiles_t kiln_opencl_gemm_default_tiles(int64_t M, int64_t N, int64_t K);

/* The tiles of the instance for |g|: kiln_opencl_gemm_default_tiles, or
 * KILN_OPENCL_GEMM_TILES when set and valid. */
kiln_opencl_gemm_tiles_t kiln_opencl_gemm_tiles(const kiln_template_gemm_t* g);

/* Work-groups and work-group size of an instance with tiles |t|. */
/* Work-groups over a rows x cols output (times |batch|) of the register-
 * and local-tiled templates (GEMM and conv share the micro-kernel). */
void kiln_opencl_tiled_launch(const kiln_opencl_gemm_tiles_t* t, int64_t rows, int64_t cols, int64_t batch,
                              int64_t groups[3], int64_t local[3]);
void kiln_opencl_gemm_launch(const kiln_template_gemm_t* g, const kiln_opencl_gemm_tiles_t* t, int64_t groups[3],
                             int64_t local[3]);

/* What a GEMM library needs to run the instance in the kernel's place
 * (out->valid false when it reads a packed B, adds a bias or has an f16
 * A, B or Y). */
void kiln_opencl_gemm_describe(const kiln_template_gemm_t* g, kiln_program_gemm_t* out);

/* Appends the instance (macros + template + #undefs) named |name| with
 * tiles |t|. INVALID_ARGUMENT (naming the kernel) for bad tiles. */
kiln_status_t kiln_opencl_gemm_print(const kiln_template_gemm_t* g, const kiln_opencl_gemm_tiles_t* t,
                                     const char* name, kiln_cf_out_t* out);
/* The same; |psum| also keeps an f32 Y's partial sums between K slices in
 * a private array (gemm.cl GPSUM 1, as an f16 Y always does): the GPU
 * rules (kiln_opencl_rules_gpu), where they stay in registers instead of
 * a round trip through Y per slice. */
kiln_status_t kiln_opencl_gemm_print_psum(const kiln_template_gemm_t* g, const kiln_opencl_gemm_tiles_t* t,
                                          bool psum, const char* name, kiln_cf_out_t* out);

/* ---- GEMV: the GEMMs with few rows (kernels/opencl/gemv.cl) --------------
 * A GEMM instance with a static M of at most KILN_OPENCL_GEMV_MAX_M runs
 * gemv.cl instead of gemm.cl: its tiles record is vw,nc,wk,on (4 entries,
 * a GEMM's has 8), |on| the switch, 1 gemv.cl, 0 gemm.cl at
 * kiln_opencl_gemm_tiles (a tuner may turn it off per shape). */
#define KILN_OPENCL_GEMV_MAX_M 4

extern const char kiln_cl_gemv[];
extern const size_t kiln_cl_gemv_len;

typedef struct kiln_opencl_gemv_tiles_s {
  int32_t vw; /* vector width along n: 4, 8 or 16 */
  int32_t nc; /* columns of Y per work-group (a multiple of vw) */
  int32_t wk; /* work-items per group splitting K (partial sums in __local) */
  int32_t on; /* 1 gemv.cl, 0 gemm.cl */
} kiln_opencl_gemv_tiles_t;

/* True when |g| is an instance gemv.cl computes: M static, 1..4, B not
 * stored N x K in place (transposed and unpacked). */
bool kiln_opencl_gemv_covers(const kiln_template_gemm_t* g);
/* Default tiles (measured on PoCL). */
kiln_opencl_gemv_tiles_t kiln_opencl_gemv_default_tiles(const kiln_template_gemm_t* g);
/* Replaces |t| with KILN_OPENCL_GEMV_TILES ("vw,nc,wk,on") when set and
 * its switch is 0 or 1 (kiln_opencl_gemv_tiles_check judges the rest). */
bool kiln_opencl_gemv_tiles_from_env(kiln_opencl_gemv_tiles_t* t);
/* The defaults, or KILN_OPENCL_GEMV_TILES when set. */
kiln_opencl_gemv_tiles_t kiln_opencl_gemv_tiles(const kiln_template_gemm_t* g);
/* NULL when gemv.cl takes |t| for |g| (or the switch is off), else why not
 * (static text). */
const char* kiln_opencl_gemv_tiles_check(const kiln_template_gemm_t* g, const kiln_opencl_gemv_tiles_t* t);
void kiln_opencl_gemv_launch(const kiln_template_gemm_t* g, const kiln_opencl_gemv_tiles_t* t, int64_t groups[3],
                             int64_t local[3]);
/* Appends the gemv.cl instance; INVALID_ARGUMENT (naming the kernel) for
 * tiles kiln_opencl_gemv_tiles_check refuses or the switch off. */
kiln_status_t kiln_opencl_gemv_print(const kiln_template_gemm_t* g, const kiln_opencl_gemv_tiles_t* t,
                                     const char* name, kiln_cf_out_t* out);

/* ---- fused epilogues and conv instances (lowering/template.h) ------------ */

/* Prints "#define <macro>_PRE(b, m) ..." (declarations of the operands
 * that broadcast along the position, loaded for image b, channel m) and
 * "#define <macro>(v, b, m, p, LD, LDH) ..." applying |e| to v, which must
 * run in the scope of a <macro>_PRE with the same b and m. Operand j is the
 * kernel parameter named <prefix>j, a half buffer when |f16| (may be NULL:
 * all float) says so: per-position operands load with LD(ptr) from float
 * and LDH(ptr) from half (values of v's type), broadcast ones index a float
 * or vload_half a half (opencl_epilogue.c). */
void kiln_opencl_epi_print(const kiln_template_epi_t* e, const bool* f16, const char* macro, const char* prefix,
                           kiln_cf_out_t* out);
/* The same, operand j's strides along n and m read from KS[ks + 2j] and
 * KS[ks + 2j + 1] (the run-time shapes of conv.cl and winograd.cl; ks < 0:
 * the numbers, as kiln_opencl_epi_print). */
void kiln_opencl_epi_print_ks(const kiln_template_epi_t* e, const bool* f16, const char* macro, const char* prefix,
                              int32_t ks, kiln_cf_out_t* out);

/* The run-time shapes of a conv or Winograd instance (conv.cl and
 * winograd.cl with CRT 1): the int values its kernel reads from its last
 * parameter KS, a constant buffer the emitter adds to the program. Sizes,
 * then the epilogue's strides, then (conv.cl) the tap shifts. */
#define KILN_OPENCL_KS_MAX (24 + 2 * KILN_TEMPLATE_EPI_MAX + KILN_TEMPLATE_CONV_MAX_TAPS)
typedef struct kiln_opencl_ks_s {
  int32_t n;
  int32_t v[KILN_OPENCL_KS_MAX];
} kiln_opencl_ks_t;

/* Embedded kernels/opencl/conv.cl. */
extern const char kiln_cl_conv[];
extern const size_t kiln_cl_conv_len;

typedef kiln_opencl_gemm_tiles_t kiln_opencl_conv_tiles_t;

/* Tiles for a conv with M output channels, a grid of Q positions, K. The
 * environment variable KILN_OPENCL_CONV_TILES="tm,tn,vw,wx,wy,bk,mm,mn"
 * overrides them (tuning). */
kiln_opencl_conv_tiles_t kiln_opencl_conv_default_tiles(int64_t M, int64_t Q, int64_t K);

void kiln_opencl_conv_launch(const kiln_template_conv_t* c, const kiln_opencl_conv_tiles_t* t, int64_t groups[3],
                             int64_t local[3]);

/* Appends the instance named |name|. Any parameter may be an f16 buffer
 * (c->f16: converted on load and store, f32 sums). |psum_private|: partial
 * sums between K slices stay in a private f32 array (CPSUM 1), else they go
 * through the grid 'F' parameter (cropped) or Y, which must then be f32.
 * |wtiled|: W holds the weights in the micro-kernel's order (lowering laid
 * them out for these tiles: KILN_TEMPLATE_W_TILED, lowering/template_weights.c),
 * else the lowering's packed layout.
 * INVALID_ARGUMENT (naming the kernel) for bad tiles, or partial sums asked
 * for in an f16 buffer or a missing grid. */
kiln_status_t kiln_opencl_conv_print(const kiln_template_conv_t* c, const kiln_opencl_conv_tiles_t* t,
                                     bool wtiled, bool psum_private, const char* name, kiln_cf_out_t* out);
/* The same with run-time shapes when |ks| is not NULL: the kernel takes one
 * more parameter, KS, whose values *ks receives (ks->n 0: a value does not
 * fit an int, and the instance was printed with its shapes as numbers).
 * Its __local slices and private sums are then sized for K slices of up to
 * 256 and 8 x 4 micro-tiles (KC_BKX, KC_MMX, KC_MNX), so one text serves
 * every conv with the same register tile (PoCL: one compile) -- 768 KiB of
 * __local floats at the GPU rules' 4 x 4 tiles of 16 x 16 items, past any
 * GPU's 32-64 KiB; |exact_local| (the GPU rules) sizes them for this
 * instance's own slice and micro-tiles instead. */
kiln_status_t kiln_opencl_conv_print_ks(const kiln_template_conv_t* c, const kiln_opencl_conv_tiles_t* t,
                                        bool wtiled, bool psum_private, const char* name, kiln_opencl_ks_t* ks,
                                        bool exact_local, kiln_cf_out_t* out);

/* Prints the instance's parameter list (W, XP, YF, BIAS, Y, E0.., and KS
 * with run-time shapes) and a newline: the body of the KILN_*_SIGNATURE
 * macro conv.cl and winograd.cl are defined with. */
void kiln_opencl_conv_print_params(const kiln_template_conv_t* c, bool ks, kiln_cf_out_t* out);


/* Prints "#define CW_F16 .. CY_F16" (1 where the W, XP, BIAS or Y
 * parameter is an f16 buffer, 0 where it is f32 or absent), as conv.cl and
 * winograd.cl read them. */
void kiln_opencl_conv_print_f16_flags(const kiln_template_conv_t* c, kiln_cf_out_t* out);

/* kiln_opencl_epi_print_ks of |c|'s epilogue, each operand f16 as its
 * parameter is, operand j named Ej, its strides from KS[ks + 2j ..] (ks < 0:
 * the numbers). */
void kiln_opencl_conv_epi_print(const kiln_template_conv_t* c, const char* macro, int32_t ks, kiln_cf_out_t* out);

/* Binds every kernel k of |prog| whose instance printed run-time shapes
 * (ks[keep[k]].n > 0; keep NULL: ks[k]) to an i32 constant of its values,
 * appended to the program's buffers and weights (identical values share
 * one), as its last argument; the lifetimes are recomputed
 * (opencl_ks.c). */
kiln_status_t kiln_opencl_ks_attach(kiln_program_t* prog, const int32_t* keep, const kiln_opencl_ks_t* ks);

/* ---- Winograd F(2x2, 3x3) instances (opencl_winograd.c) ------------------- */

/* Embedded kernels/opencl/winograd.cl. */
extern const char kiln_cl_winograd[];
extern const size_t kiln_cl_winograd_len;

/* Tiles of winograd.cl: TM channels x TN tiles per item (TN the vector
 * width), WX x WY items per group, CB input channels per slice, F the
 * output tile: 2 F(2x2, 3x3) (weights KILN_TEMPLATE_W_WINOGRAD) or 4
 * F(4x4, 3x3) (KILN_TEMPLATE_W_WINOGRAD4). */
typedef struct kiln_opencl_wino_tiles_s {
  int32_t tm, tn, wx, wy, cb, f;
} kiln_opencl_wino_tiles_t;

/* Tiles for |c| (F by the measured rule, or KILN_OPENCL_WINOGRAD=f2|f4;
 * |gpu|: the GPU rules, kiln_opencl_wino_gpu_tiles for the device |lim|
 * (NULL: unknown), F(2x2) unless asked);
 * KILN_OPENCL_WINO_TILES="tm,tn,wx,wy,cb[,f]" overrides them. */
kiln_opencl_wino_tiles_t kiln_opencl_wino_default_tiles(const kiln_template_conv_t* c, bool gpu,
                                                        const kiln_template_limits_t* lim);
/* The default tiles of F(f x f) for |c| (f 2 or 4), no override. */
kiln_opencl_wino_tiles_t kiln_opencl_wino_tiles_for(const kiln_template_conv_t* c, int32_t f);
/* Output tiles of |c| at F(f x f) as winograd.cl numbers them (rows of
 * tiles padded to whole groups of four). */
int64_t kiln_opencl_wino_ntiles(const kiln_template_conv_t* c, int32_t f);
/* NULL when |t| suits winograd.cl (tn a power of two <= 16, tn x wx a
 * multiple of 4, f 2 or 4, the private accumulators within budget), else
 * why not. */
const char* kiln_opencl_wino_tiles_check(const kiln_opencl_wino_tiles_t* t);

void kiln_opencl_wino_launch(const kiln_template_conv_t* c, const kiln_opencl_wino_tiles_t* t, int64_t groups[3],
                             int64_t local[3]);

/* Appends the instance named |name| (its weights transformed by lowering:
 * KILN_TEMPLATE_W_WINOGRAD, or _W_WINOGRAD4 with t->f 4,
 * lowering/template_weights.c). */
kiln_status_t kiln_opencl_wino_print(const kiln_template_conv_t* c, const kiln_opencl_wino_tiles_t* t,
                                     const char* name, kiln_cf_out_t* out);
/* The same with run-time shapes when |ks| is not NULL (as
 * kiln_opencl_conv_print_ks). */
kiln_status_t kiln_opencl_wino_print_ks(const kiln_template_conv_t* c, const kiln_opencl_wino_tiles_t* t,
                                        const char* name, kiln_opencl_ks_t* ks, kiln_cf_out_t* out);

/* ---- depthwise conv instances (opencl_depthwise.c) ------------------------ */

/* Embedded kernels/opencl/depthwise.cl. */
extern const char kiln_cl_depthwise[];
extern const size_t kiln_cl_depthwise_len;

/* Outputs per vector run along a row (vw: 4, 8, or 16 when the stride is
 * 1), output rows per work-item (rh >= 1) and work-items per work-group
 * (wg: 1..256). */
typedef struct kiln_opencl_dw_tiles_s {
  int32_t vw, rh, wg;
} kiln_opencl_dw_tiles_t;

/* The instance's run width and work-group (|gpu|: the GPU rules,
 * kiln_opencl_dw_gpu_tiles for the device |lim|, NULL: unknown);
 * KILN_OPENCL_DW_TILES="vw,rh,wg" overrides them (tuning; ignored unless
 * valid for |d|). */
kiln_opencl_dw_tiles_t kiln_opencl_dw_default_tiles(const kiln_template_dw_t* d, bool gpu,
                                                    const kiln_template_limits_t* lim);

void kiln_opencl_dw_launch(const kiln_template_dw_t* d, const kiln_opencl_dw_tiles_t* t, int64_t groups[3],
                           int64_t local[3]);

/* Appends the instance named |name| with the plan kernel's |n_params|
 * parameters, in its order; any of them may be an f16 buffer (d->f16_*:
 * converted on load and store, f32 sums). INVALID_ARGUMENT for bad tiles
 * or more work-items than an int counts. */
kiln_status_t kiln_opencl_dw_print(const kiln_template_dw_t* d, const kiln_opencl_dw_tiles_t* t, int32_t n_params,
                                   const char* name, kiln_cf_out_t* out);

/* ---- int8 product instances (opencl_q8.c) --------------------------------- */

/* Embedded kernels/opencl/q8.cl. */
extern const char kiln_cl_q8[];
extern const size_t kiln_cl_q8_len;

/* Output channels (tm: 1, 2, 4 or 8) and positions (tp: 1, 2, 4 or 8)
 * per work-item, work-items per work-group (wg: 1..256); rowvec 1 (convs
 * only): q8.cl's row-vector kernel (8 outputs of a row as int vectors;
 * no dot product). */
typedef struct kiln_opencl_q8_tiles_s {
  int32_t tm, tp, wg, rowvec;
} kiln_opencl_q8_tiles_t;

/* The instance's tiles for a device lacking |gpu_lacks|;
 * KILN_OPENCL_Q8_TILES="tm,tp,wg,rowvec" overrides them (ignored unless
 * valid). */
kiln_opencl_q8_tiles_t kiln_opencl_q8_default_tiles(const kiln_template_q8_t* q, uint32_t gpu_lacks);

void kiln_opencl_q8_launch(const kiln_template_q8_t* q, const kiln_opencl_q8_tiles_t* t, int64_t groups[3],
                           int64_t local[3]);

/* Appends the instance named |name| with the plan kernel's |n_params|
 * parameters, in its order (q->bind). INVALID_ARGUMENT for bad tiles,
 * INTERNAL for a parameter without a role. */
kiln_status_t kiln_opencl_q8_print(const kiln_template_q8_t* q, const kiln_opencl_q8_tiles_t* t, int32_t n_params,
                                   const char* name, kiln_cf_out_t* out);

/* ---- tiles in the descriptors (opencl_tiles.c) ----------------------------- */

/* The set's tile rules (kiln_template_set_t.tiles, .weight_blocks): the
 * defaults below and their environment overrides, recorded as
 * kiln_template_tiles_t (GEMM and conv tm,tn,vw,wx,wy,bk,mm,mn; Winograd
 * tm,tn,wx,wy,cb; depthwise vw,rh,wg; int8 tm,tp,wg,rowvec), and the weight geometry conv.cl
 * and winograd.cl read with them. */
void kiln_opencl_template_tiles(kiln_template_t* t);
void kiln_opencl_template_weight_blocks(kiln_template_t* t);

/* Which rule set the OpenCL target takes: true (the GPU rules below) when
 * |gpu_lacks| holds KILN_GPU_CLASS_GPU: the device is a GPU (its OpenCL
 * device type is not CPU) or KILN_OPENCL_RULES=gpu said so where the flags
 * were made (kiln_compile_gpu_lacks, the one reader of the variable). The
 * CPU rules are the ones measured on PoCL's CPU device; the GPU rules are
 * NOT measured on a GPU yet: work-groups of 64-256 work-items sharing
 * __local tiles, small register tiles. */
bool kiln_opencl_rules_gpu(uint32_t gpu_lacks);
/* The GPU rules' work-group bound on device |lim| (NULL or zeros:
 * unknown): 256 items or CL_DEVICE_MAX_WORK_GROUP_SIZE if less; and their
 * __local budget for one group: half the device's local memory (two groups
 * resident), 16 KiB where unknown. */
int64_t kiln_opencl_gpu_items(const kiln_template_limits_t* lim);
uint64_t kiln_opencl_gpu_local(const kiln_template_limits_t* lim);
/* The GPU rules' GEMM / conv tiles of an M x N x K product on device
 * |lim|: 16 x 16 work-items of 4 x 4 outputs (64 x 64 blocks, K slices of
 * 32), or 8 x 8 of them (32 x 32 blocks, slices of 64) where the large
 * blocks leave fewer work-groups than 64 or two a compute unit; vector
 * width 4, one micro-tile an item; fewer items (wy halved first) past
 * the device's work-group size, shorter slices past its __local budget. */
kiln_opencl_gemm_tiles_t kiln_opencl_gemm_gpu_tiles(int64_t M, int64_t N, int64_t K, const kiln_template_limits_t* lim);
/* The GPU rules' Winograd tiles at F(f x f): 16 x 4 work-items, 4 channels
 * x 2 tiles each at F(2x2) (2 x 2 at F(4x4)), 8 (4) channels a slice;
 * fewer items and channels a slice where device |lim| needs. */
kiln_opencl_wino_tiles_t kiln_opencl_wino_gpu_tiles(const kiln_template_conv_t* c, int32_t f,
                                                    const kiln_template_limits_t* lim);
/* The GPU rules' depthwise tiles: runs of 4, one row an item, 128 a group
 * (at most the device's work-group size, whole warps). */
kiln_opencl_dw_tiles_t kiln_opencl_dw_gpu_tiles(const kiln_template_dw_t* d, const kiln_template_limits_t* lim);
/* The GPU rules' GEMV tiles (gemv.cl, M <= 4): 8 columns a group in
 * float4 loads, 128 items splitting K where K >= 1024, else 64 (fewer
 * where K, the device's work-group size or __local budget say), whole
 * warps. */
kiln_opencl_gemv_tiles_t kiln_opencl_gemv_gpu_tiles(const kiln_template_gemm_t* g, const kiln_template_limits_t* lim);

/* The set's search space and constraints (kiln_template_set_t.space,
 * .tiles_check; opencl_tune.c): knob values per tiles entry around the
 * defaults, and the points gemm.cl / conv.cl / winograd.cl /
 * depthwise.cl print within a device's limits. */
bool kiln_opencl_tune_space(const kiln_template_t* t, kiln_template_space_t* out);
const char* kiln_opencl_tune_check(const kiln_template_t* t, const kiln_template_tiles_t* tiles,
                                   const kiln_template_limits_t* lim);
/* .tiles_tie (a Winograd point with the switch off: the default tiles) and
 * .tiles_hints (Winograd off first). */
void kiln_opencl_tune_tie(const kiln_template_t* t, kiln_template_tiles_t* tiles);
int32_t kiln_opencl_tune_hints(const kiln_template_t* t, kiln_template_tiles_t* out, int32_t cap);
/* A point's cost features (kiln_template_set_t.tiles_features): GEMM /
 * conv tm x tn x wx x wy accumulators a work-group, class 1 past 512;
 * Winograd and depthwise one size (their cost does not grow with their
 * tiles on PoCL), class 2 for Winograd off, 1 for the printed depthwise
 * kernel (opencl_tune.c). */
void kiln_opencl_tune_features(const kiln_template_t* t, const kiln_template_tiles_t* x, double* size, int32_t* cls);

/* The tiles recorded in |t| for a GEMM or conv (gemm), Winograd (wino) or
 * depthwise (dw) instance of kernel |name|. INVALID_ARGUMENT when the
 * record is not one the OpenCL rules wrote (another set, or none), or
 * the instance's weights are not laid out for them. */
kiln_status_t kiln_opencl_gemm_tiles_of(const kiln_template_t* t, const char* name, kiln_opencl_gemm_tiles_t* out);
/* A GEMM instance's GEMV record (vw,nc,wk,on; kiln_opencl_gemv_covers). */
kiln_status_t kiln_opencl_gemv_tiles_of(const kiln_template_t* t, const char* name, kiln_opencl_gemv_tiles_t* out);
kiln_status_t kiln_opencl_wino_tiles_of(const kiln_template_t* t, const char* name, kiln_opencl_wino_tiles_t* out);
kiln_status_t kiln_opencl_dw_tiles_of(const kiln_template_t* t, const char* name, kiln_opencl_dw_tiles_t* out);
kiln_status_t kiln_opencl_q8_tiles_of(const kiln_template_t* t, const char* name, kiln_opencl_q8_tiles_t* out);

/* A copy of |f| whose outermost PARALLEL loop is bound to work-groups and
 * work-items (*out NULL when |f| has no such loop, or already binds ids or
 * uses barriers). New nodes come from |ctx|. */
kiln_status_t kiln_opencl_bind_parallel(tir_ctx_t* ctx, const tir_func_t* f, const tir_func_t** out);
/* The same for the GPU rules (kiln_opencl_rules_gpu): groups of 64 items
 * whatever the extent (no one-item groups for small extents). */
kiln_status_t kiln_opencl_bind_parallel_gpu(tir_ctx_t* ctx, const tir_func_t* f, const tir_func_t** out);
/* The binding sizes of the rule set (|gpu|: kiln_opencl_rules_gpu). */
kiln_gpu_bind_t kiln_opencl_bind_how(bool gpu);

#ifdef __cplusplus
}
#endif
#endif
