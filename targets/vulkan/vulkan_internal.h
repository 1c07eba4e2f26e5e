/* Private parts of the Vulkan target, shared by its files (the same shape
 * as targets/opencl/):
 *   vulkan_target.c     plan -> GLSL per kernel -> one SPIR-V blob per
 *                       kernel in the program; the template set; the
 *                       registry entry
 *   vulkan_compile.c    GLSL -> SPIR-V with libshaderc, checked by SPIRV-Tools
 *   vulkan_trips.c      loop iterations per invocation (lavapipe's limit)
 *   vulkan_gemm.c       the tiled GEMM shader's instances (kernels/vulkan/gemm.comp)
 *   vulkan_conv.c       the implicit-GEMM conv shader's (kernels/vulkan/conv.comp)
 *   vulkan_depthwise.c  the depthwise shader's (kernels/vulkan/depthwise.comp)
 *   vulkan_q8.c         the int8 QLinearConv / QLinearMatMul shader's (kernels/vulkan/q8.comp)
 *   vulkan_pool.c       the window pool shader's (kernels/vulkan/pool.comp)
 *   vulkan_rows.c       the Softmax row shader's (kernels/vulkan/rows.comp)
 *   vulkan_epilogue.c   shader header text and the fused epilogue as GLSL
 *   vulkan_grid.c       template grids folded past the device's work-group counts
 * Instances are printed from lowering's template descriptors
 * (lowering/template.h); nothing here reads the graph. */
#ifndef KILN_TARGETS_VULKAN_INTERNAL_H_
#define KILN_TARGETS_VULKAN_INTERNAL_H_

#include <shaderc/shaderc.h>

#include "lowering/template.h"
#include "targets/vulkan/vulkan_target.h"

#ifdef __cplusplus
extern "C" {
#endif

/* The shaders of kernels/vulkan/, embedded at build time. */
extern const char kiln_vk_gemm[];
extern const size_t kiln_vk_gemm_len;
extern const char kiln_vk_conv[];
extern const size_t kiln_vk_conv_len;
extern const char kiln_vk_depthwise[];
extern const size_t kiln_vk_depthwise_len;
extern const char kiln_vk_pool[];
extern const size_t kiln_vk_pool_len;
extern const char kiln_vk_rows[];
extern const size_t kiln_vk_rows_len;
extern const char kiln_vk_q8[];
extern const size_t kiln_vk_q8_len;
extern const char kiln_vk_winograd[];
extern const size_t kiln_vk_winograd_len;

/* ---- vulkan_compile.c ---------------------------------------------------- */

/* One compiler + options per emit (shaderc objects are not thread-safe to
 * share while compiling, and creation is cheap next to a compile). */
typedef struct kiln_vulkan_cc_s {
  shaderc_compiler_t compiler;
  shaderc_compile_options_t opts;
  int32_t level; /* the shaderc_optimization_level_t it compiles at */
} kiln_vulkan_cc_t;

/* OUT_OF_MEMORY when shaderc cannot start. */
kiln_status_t kiln_vulkan_cc_init(kiln_vulkan_cc_t* c);
void kiln_vulkan_cc_free(kiln_vulkan_cc_t* c);
/* Compiles and validates shader |name|; on success *out_blob (|al|) holds
 * the SPIR-V words. Errors quote the failing GLSL line and the log. */
kiln_status_t kiln_vulkan_cc_compile(kiln_vulkan_cc_t* c, const char* name, const char* glsl, kiln_allocator_t al,
                                     uint8_t** out_blob, uint64_t* out_len);

/* ---- vulkan_trips.c ------------------------------------------------------ */

/* Loop iterations one invocation of a printed kernel runs (an upper
 * estimate: every loop not bound to an id, a branch's longer side). */
int64_t kiln_vulkan_trips_of(const tir_stmt_t* st);
/* The same for the shared-memory tiled shaders over K (|k_unrolled|: the
 * TK steps are unrolled, as in gemm.comp). */
int64_t kiln_vulkan_trips_tiled(int64_t K, const kiln_spirv_gemm_tiles_t* t, bool k_unrolled);

/* ---- vulkan_gemm.c ------------------------------------------------------- */

/* Tiles "TM,TN,TK,RM,RN,SHARED" from environment variable |var| (tuning):
 * true and *out set when it is set and valid (positive, TM % RM == 0,
 * TN % RN == 0); false otherwise, *out untouched. */
bool kiln_vulkan_tiles_from_env(const char* var, kiln_spirv_gemm_tiles_t* out);

/* The shader's view of a GEMM descriptor. */
kiln_spirv_gemm_t kiln_vulkan_gemm_of(const kiln_template_gemm_t* t);

/* ---- vulkan_epilogue.c --------------------------------------------------- */

/* Growing text for a shader header (malloc; *oom on failure). */
typedef struct kiln_vulkan_sb_s {
  char* p;
  size_t len, cap;
  bool oom;
} kiln_vulkan_sb_t;

void kiln_vulkan_sb_printf(kiln_vulkan_sb_t* b, const char* fmt, ...) __attribute__((format(printf, 2, 3)));
/* A shader's text up to and including its first #extension line (the
 * directives that must come before any declaration) into |b|, then the
 * 16-bit storage and f16 arithmetic extensions where |f16|; the kernel
 * header goes after them, then the text from |*rest|. |file| names the
 * shader where it has no #extension line. */
kiln_status_t kiln_vulkan_shader_head(kiln_vulkan_sb_t* b, const char* src, const char* file, bool f16,
                                      const char** rest);
/* The epilogue as GLSL: a macro the shaders apply to each stored value. */
void kiln_vulkan_epi_print(kiln_vulkan_sb_t* b, const kiln_template_epi_t* e);
/* The same for a shader whose sizes are run-time values (winograd.comp's
 * CRT): operand strides equal to |m| * |p|, |p| or |m| print as the
 * shader's (CM * CP), CP and CM, so convs of one kind print one text. */
void kiln_vulkan_epi_print_sized(kiln_vulkan_sb_t* b, const kiln_template_epi_t* e, int64_t m, int64_t p);
/* The same with the operands whose bit is set in |texel_epi| read from the
 * uniform texel buffers kiln_vulkan_conv_params_texel declares: lavapipe
 * runs a storage-buffer load at lane-varying addresses as a loop over the
 * lanes, which its LLVM compiles slowly where a shader stores many values
 * (winograd.comp's F(4x4) residual: 512 loads an invocation), a texel fetch
 * as one gather. */
void kiln_vulkan_epi_print_texel(kiln_vulkan_sb_t* b, const kiln_template_epi_t* e, int64_t m, int64_t p,
                                 uint32_t texel_epi);
/* Whether epilogue operand |i| may be read as vec4 texels in conv.comp's
 * texel stores: f32 (|f16| false), laid out as Y (position stride 1,
 * channel stride |cp|, image stride M * cp or one image), planes of whole
 * texels. */
bool kiln_vulkan_epi_texel_ok(const kiln_template_epi_t* e, int32_t i, bool f16, int64_t M, int64_t cp,
                              int64_t batch);
/* "#define KC_EPI4(v, b, m, q, e) ...": the epilogue of output q + e, q
 * the first position of a whole texel; the operands with a bit in |quads|
 * (each also in |texels|, and kiln_vulkan_epi_texel_ok) read as component
 * e of samplerBuffer teI's texel of q (the 4 outputs of a texel share one
 * fetch: on lavapipe one 16-byte load a lane where a buffer load is a loop
 * over the lanes per float), the others as in KC_EPI with |texels|. */
void kiln_vulkan_epi_print_quad(kiln_vulkan_sb_t* b, const kiln_template_epi_t* e, uint32_t texels, uint32_t quads);
/* How depthwise.comp, winograd.comp and pool.comp store f32 output texels
 * (their Y_VEC4) where they store texels (|texel_y|): 2, pairs as u64vec4s
 * through a storage buffer, where |int64| (the device has shaderInt64) and
 * |pairs| (8-float aligned rows); else 1, vec4s through a storage buffer;
 * 0 without texel stores or with KILN_SPIRV_YSTORE=image (imageStore to a
 * storage texel buffer); KILN_SPIRV_YSTORE=vec4 keeps 1. Prints the 64-bit
 * integer extension for 2 (|b| just past the shader's #extension lines). */
int kiln_vulkan_y_store(kiln_vulkan_sb_t* b, bool texel_y, bool int64, bool pairs);

/* ---- vulkan_conv.c, vulkan_depthwise.c ------------------------------------ */

/* The GLSL of a conv instance with tiles |t| (malloc'd; caller frees)
 * with its launch geometry and loop trips per invocation. |texels_fit|:
 * its weights and input fit the device's texel buffers, and where either
 * is f16 the device binds rgba16f ones (else mode 4 prints as mode 2 with
 * the same tiles); |y_texels_fit|: its output does (mode 4
 * then stores whole vec4 texels where the output is the grid itself). */
/* The W, X, C (bias) and Y parameters of conv instance |c| (|bind| their
 * parameter index, left -1 where absent; |type| "float" or "float16_t"),
 * with the epilogue operands' buffers declared in |b|; a parameter of
 * another role, or no W, X or Y (or no C with a bias), is an internal
 * error naming |what| '|name|'. Used by the conv and Winograd shaders. */
kiln_status_t kiln_vulkan_conv_params(kiln_vulkan_sb_t* b, const kiln_template_conv_t* c, const char* what,
                                      const char* name, int bind[4], const char* type[4]);
/* The same with the f32 epilogue operands whose bit (operand index) is set
 * in |texel_epi| declared as uniform texel buffers of vec4 (te0, te1, ...;
 * kiln_vulkan_epi_print_texel reads them); with KILN_VULKAN_EPI_F16 in
 * |texel_epi| the f16 ones too, as rgba16f storage texel buffers read with
 * imageLoad (the caller knows the device binds those). */
#define KILN_VULKAN_EPI_F16 (1u << 31)
/* In the mask kiln_vulkan_epi_texels returns: operand |i|'s texels are
 * halves (an rgba16f image: imageLoad where an f32 one takes texelFetch). */
#define KILN_VULKAN_EPI_HALF(i) (1u << (KILN_TEMPLATE_EPI_MAX + (i)))
/* The operands of |c| that kiln_vulkan_conv_params_texel declares as texels
 * for |texel_epi| (its f32 ones; f16 ones too with KILN_VULKAN_EPI_F16, each
 * with its KILN_VULKAN_EPI_HALF bit), as kiln_vulkan_epi_print_texel takes
 * them. */
uint32_t kiln_vulkan_epi_texels(const kiln_template_conv_t* c, uint32_t texel_epi);
kiln_status_t kiln_vulkan_conv_params_texel(kiln_vulkan_sb_t* b, const kiln_template_conv_t* c, const char* what,
                                            const char* name, int bind[4], const char* type[4], uint32_t texel_epi);
kiln_status_t kiln_vulkan_conv_source(const kiln_template_conv_t* c, const kiln_spirv_gemm_tiles_t* t,
                                      bool texels_fit, bool y_texels_fit, const char* name, char** out_glsl, int64_t groups[3],
                                      int64_t local[3], int64_t* out_trips);
/* The same for a device with 64-bit integers where |int64| (the output's
 * texels stored in pairs as u64vec4s; kiln_vulkan_conv_source: without). */
kiln_status_t kiln_vulkan_conv_source_int64(const kiln_template_conv_t* c, const kiln_spirv_gemm_tiles_t* t,
                                            bool texels_fit, bool y_texels_fit, bool int64, const char* name,
                                            char** out_glsl, int64_t groups[3], int64_t local[3], int64_t* out_trips);
/* The GLSL of a depthwise instance with |wg| invocations a work-group
 * (malloc'd; caller frees) with its launch geometry; X read as vec4
 * texels where |texels_fit| (the device's texel buffers hold it and, for
 * f16 X, the device binds rgba16f ones), W where |w_texels_fit| (the
 * same), f32 Y stored as vec4 texels where |y_texels_fit|
 * and its rows are whole texels. */
kiln_status_t kiln_vulkan_dw_source(const kiln_template_dw_t* d, int32_t wg, int32_t rw, bool texels_fit,
                                    bool w_texels_fit, bool y_texels_fit, const char* name, char** out_glsl,
                                    int64_t groups[3], int64_t local[3]);
/* The same for a device with 64-bit integers where |int64| (the output's
 * texels stored in pairs as u64vec4s; kiln_vulkan_dw_source: without). */
kiln_status_t kiln_vulkan_dw_source_int64(const kiln_template_dw_t* d, int32_t wg, int32_t rw, bool texels_fit,
                                          bool w_texels_fit, bool y_texels_fit, bool int64, const char* name,
                                          char** out_glsl, int64_t groups[3], int64_t local[3]);
/* True when |d| takes depthwise.comp's FLAT form (RW consecutive outputs
 * of Y seen flat per invocation; rw a multiple of 4 and of Y's size, at
 * most a plane): f32, stride 1, X's planes Y's, one channel per group,
 * rows whose outputs the row form could not store as texels (OW not a
 * multiple of 4), a dispatch of at most 65535 work-groups of |wg|. The
 * device side (texel buffers large enough) is checked by the source. */
bool kiln_vulkan_dw_flat(const kiln_template_dw_t* d, int32_t wg, int32_t rw);
#define KILN_VULKAN_DW_FLAT_RW 16 /* the FLAT form's default outputs per invocation */
/* The FLAT form's outputs per invocation as whole rows: the smallest
 * multiple of OW that is a multiple of 4, divides a plane and is at most 32
 * (MobileNetV2's 14x14 planes: 28), where |d| takes the FLAT form with it;
 * else 0. Pure. */
int32_t kiln_vulkan_dw_flat_rows(const kiln_template_dw_t* d);
/* Rows of |rw| outputs per invocation in the row form (depthwise.comp's
 * RH): 4, 2 or 1, the least kiln_vulkan_dw_plane_cost with work-groups of
 * |wg| (KILN_SPIRV_DW_RH=1|2|4 overrides it where rows are allowed). */
int32_t kiln_vulkan_dw_rows(const kiln_template_dw_t* d, int32_t wg, int32_t rw);
/* A plane's work in the row form with work-groups of |wg| and |rh| rows of
 * |rw| outputs an invocation, in units of one row segment's reads for 8
 * invocations (the work-group's idle SIMD batches count: lavapipe runs
 * them). Pure. */
int64_t kiln_vulkan_dw_plane_cost(const kiln_template_dw_t* d, int32_t wg, int32_t rw, int32_t rh);

/* ---- vulkan_rows.c -------------------------------------------------------- */

/* The GLSL of a Softmax / LogSoftmax / LayerNorm / reduction row instance
 * (malloc'd; caller frees) with its launch and its loop trips an
 * invocation; |texels_fit|: X's view fits the device's texel buffers (a
 * reduction's vec4 steps then read texels). */
kiln_status_t kiln_vulkan_rows_source(const kiln_template_rows_t* q, bool texels_fit, const char* name,
                                      char** out_glsl, int64_t groups[3], int64_t local[3], int64_t* trips);

/* ---- vulkan_pool.c -------------------------------------------------------- */

/* The GLSL of a pool instance (malloc'd; caller frees) with its launch
 * geometry; X read as vec4 texels where |texels_fit|, Y stored as vec4
 * texels where |y_texels_fit| and its rows are whole texels. */
kiln_status_t kiln_vulkan_pool_source(const kiln_template_pool_t* q, bool texels_fit, bool y_texels_fit,
                                      const char* name, char** out_glsl, int64_t groups[3], int64_t local[3]);
/* The same with 64-bit integers where |int64| (kiln_vulkan_y_store) and
 * work-groups of |wg| invocations (8: lavapipe's; KILN_VULKAN_WG_GPU under
 * the GPU rules); INVALID_ARGUMENT for |wg| outside 1..1024. */
kiln_status_t kiln_vulkan_pool_source_int64(const kiln_template_pool_t* q, bool texels_fit, bool y_texels_fit,
                                            bool int64, int32_t wg, const char* name, char** out_glsl,
                                            int64_t groups[3], int64_t local[3]);

/* ---- vulkan_q8.c ---------------------------------------------------------- */

/* The GLSL of an int8 product instance with tiles |tiles| (tm, tp, wg,
 * idot: kernels/vulkan/q8.comp; idot 1 packs the bytes for OpSDotKHR)
 * (malloc'd; caller frees) with its launch geometry and loop trips per
 * invocation. INVALID_ARGUMENT for a record that is not the Vulkan rule's. */
kiln_status_t kiln_vulkan_q8_source(const kiln_template_q8_t* q, const kiln_template_tiles_t* tiles, const char* name,
                                    char** out_glsl, int64_t groups[3], int64_t local[3], int64_t* out_trips);

/* ---- vulkan_tiles.c ---------------------------------------------------------- */

/* The set's tile rules (kiln_template_set_t.tiles): GEMM and conv
 * instances get kiln_spirv_gemm_default_tiles / kiln_spirv_conv_default_tiles
 * (with their environment overrides) recorded as tm,tn,tk,rm,rn,shared,
 * depthwise ones their work-group size. For a device without subgroup
 * ballot (KILN_GPU_LACKS_SUBGROUP in t->device) the subgroup modes become shared-memory
 * tiles; without 64-bit integers (KILN_GPU_LACKS_INT64) mode 2 becomes 3. */
void kiln_vulkan_template_tiles(kiln_template_t* t);
/* Whether conv instance |t|'s weights and input may be read as texels:
 * f32 ones always, f16 ones where t->device binds rgba16f storage texel
 * buffers (no KILN_GPU_LACKS_TEXEL_F16; conv.comp TEXEL_W16 / TEXEL_X16). */
bool kiln_vulkan_conv_texel_types(const kiln_template_t* t);
/* Whether |gpu_lacks| carries the GPU device class (KILN_GPU_CLASS_GPU):
 * the templates then take the GPU rules (vulkan_tiles.c: GEMM / conv in
 * shared-memory tiles of 64-256 invocations, depthwise / pool / Winograd
 * work-groups of 64, KILN_VULKAN_WG_GPU) instead of lavapipe's. Pure. */
bool kiln_vulkan_gpu_rules(uint32_t gpu_lacks);
/* Invocations a work-group of the pool and Winograd shaders under the GPU
 * rules (lavapipe's: 8, one SIMD row). */
#define KILN_VULKAN_WG_GPU 64
/* The shared memory gemm.comp / conv.comp SHARED 1 may take for a second
 * tile buffer (DB): Vulkan's minimum maxComputeSharedMemorySize, so every
 * device runs every such instance; tiles past it keep one buffer. */
#define KILN_VULKAN_SHARED_BUDGET 16384
/* The tiles recorded in |t| for kernel |name|: a GEMM or conv instance's,
 * a depthwise one's work-group. INVALID_ARGUMENT when the record is not
 * one the Vulkan rules wrote (another set, or none). */
kiln_status_t kiln_vulkan_tiles_of(const kiln_template_t* t, const char* name, kiln_spirv_gemm_tiles_t* out);
/* The weight layout of the Vulkan conv (kiln_template_set_t.weight_blocks):
 * a conv's own weights in panels of KILN_VULKAN_W_PANEL channels over the
 * whole K (TILED with one K slice), which conv.comp's packed-layout index
 * reads with CPT = panel and CKBS = K. */
#define KILN_VULKAN_W_PANEL 32
void kiln_vulkan_template_weight_blocks(kiln_template_t* t);
/* |t|'s conv descriptor as conv.comp reads its weights: the lowering's
 * packed panels, or the TILED panels above (which must be laid out). */
kiln_status_t kiln_vulkan_conv_weights(const kiln_template_t* t, const char* name, kiln_template_conv_t* out);
kiln_status_t kiln_vulkan_dw_tiles_of(const kiln_template_t* t, const char* name, int32_t* out_wg,
                                      int32_t* out_rw);

/* ---- vulkan_winograd.c --------------------------------------------------- */

/* Tiles of winograd.comp: TM output channels (4, 8, 16 or 32) x NT WFxWF
 * tiles (4 or 8: one tile row, or two of NT / 2 where
 * kiln_vulkan_wino_tile_rows says) per invocation; recorded as tm,nt,wf. WF
 * (2: F(2x2, 3x3), 4: F(4x4, 3x3)) sets the weight layout
 * (KILN_TEMPLATE_W_WINOGRAD, _W_WINOGRAD4: kiln_vulkan_template_weight_blocks),
 * so a tuned point may change it. */
typedef struct kiln_vulkan_wino_tiles_s {
  int32_t tm, nt, wf;
} kiln_vulkan_wino_tiles_t;

/* The tile rows (1 or 2) an invocation of |c|'s instance with tiles |t|
 * takes its NT tiles from (winograd.comp's NTY): 2, rows of NT / 2 tiles,
 * where a row of tiles is shorter than NT and that leaves fewer
 * invocations than one row of NT, or as $KILN_SPIRV_WINO_ROWS (1 or 2) says. A property
 * of the conv and the tiles, not a knob. */
int32_t kiln_vulkan_wino_tile_rows(const kiln_template_conv_t* c, const kiln_vulkan_wino_tiles_t* t);
/* The measured defaults for |t| (a Winograd instance with its weight
 * layout chosen), or $KILN_SPIRV_WINO_TILES="tm,nt" when set and valid. */
kiln_vulkan_wino_tiles_t kiln_vulkan_wino_default_tiles(const kiln_template_t* t);
/* The GLSL of a Winograd instance (malloc'd; caller frees) with its launch
 * geometry and loop trips per invocation; its weights laid out as
 * KILN_TEMPLATE_W_WINOGRAD (WF 2) or _W_WINOGRAD4 (WF 4) with block =
 * panel = TM, slice 1. |texels_fit|:
 * U and X fit the device's texel buffers, and where either is f16 the
 * device binds rgba16f ones (read as vec4 texels, else as storage
 * buffers); |y_texels_fit|: f32 Y does (stored as vec4 texels where
 * its rows are whole texels). INVALID_ARGUMENT for bad tiles or a conv the
 * template does not cover. */
kiln_status_t kiln_vulkan_wino_source(const kiln_template_conv_t* c, const kiln_vulkan_wino_tiles_t* t,
                                      bool texels_fit, bool y_texels_fit, const char* name, char** out_glsl,
                                      int64_t groups[3], int64_t local[3], int64_t* out_trips);
/* The same with 64-bit integers where |int64| (kiln_vulkan_y_store);
 * |e_texels_fit|: the epilogue's operands fit the device's texel buffers,
 * f16 ones as rgba16f (then read as texels where U and X are;
 * kiln_vulkan_wino_source takes |texels_fit| for it); |wg| invocations a work-group (8: lavapipe's;
 * KILN_VULKAN_WG_GPU under the GPU rules; 1..1024). */
kiln_status_t kiln_vulkan_wino_source_int64(const kiln_template_conv_t* c, const kiln_vulkan_wino_tiles_t* t,
                                            bool texels_fit, bool y_texels_fit, bool e_texels_fit, bool int64,
                                            int32_t wg, const char* name,
                                            char** out_glsl, int64_t groups[3], int64_t local[3],
                                            int64_t* out_trips);
/* Whether the instance of |c| with tiles |t| and U of GLSL type |w_type|
 * reads its sizes at run time (winograd.comp's CRT: F(4x4) with f32 U,
 * sizes exact in f32, X read in place and input and output rows of whole
 * texels; KILN_SPIRV_WINO_SIZES=const keeps them constants),
 * so every conv of its kind shares one pipeline. */
bool kiln_vulkan_wino_runtime_sizes(const kiln_template_conv_t* c, const kiln_vulkan_wino_tiles_t* t,
                                    const char* w_type);
/* A Winograd tiles record: tm, nt, wf, and with an implicit-GEMM
 * alternative (kiln_template_set_t.winograd_switch) the switch after them
 * (1 Winograd, 0 the CONV instance; only 1 is printed as Winograd). */
bool kiln_vulkan_wino_record(const kiln_template_t* t);

/* The tiles recorded in Winograd instance |t| (INVALID_ARGUMENT when it is
 * not one the Vulkan rules wrote or its weights are not laid out for them). */
kiln_status_t kiln_vulkan_wino_tiles_of(const kiln_template_t* t, const char* name, kiln_vulkan_wino_tiles_t* out);

/* ---- vulkan_grid.c -------------------------------------------------------- */

/* Folds a template instance's grid |groups| past the device's work-group
 * counts |max| (0 in a dimension: the spec's minimum, 65535) into a grid
 * that fits, holding as many work-groups: *glsl (malloc'd, replaced) gets
 * the KILN_WG / KILN_GID / KILN_WG_GUARD definitions after its #version
 * line and |groups| the physical grid. Dimension 2 folds too where
 * |z_free| (not in a per-sample or range program, whose device scales it).
 * A grid that fits is left as it is (the shaders' own definitions: the
 * built-in ids). UNSUPPORTED naming kernel |name| and the counts where
 * the grid cannot fold. */
kiln_status_t kiln_vulkan_grid_fold(char** glsl, int64_t groups[3], const uint64_t max[3], bool z_free,
                                    const char* name);

/* ---- vulkan_tune.c ------------------------------------------------------- */

/* The set's search space, constraints and subgroup-mode ties
 * (kiln_template_set_t.space / .tiles_check / .tiles_tie). */
bool kiln_vulkan_tune_space(const kiln_template_t* t, kiln_template_space_t* out);
const char* kiln_vulkan_tune_check(const kiln_template_t* t, const kiln_template_tiles_t* x,
                                   const kiln_template_limits_t* lim);
void kiln_vulkan_tune_tie(const kiln_template_t* t, kiln_template_tiles_t* x);
int32_t kiln_vulkan_tune_hints(const kiln_template_t* t, kiln_template_tiles_t* out, int32_t cap);
/* A point's cost features (kiln_template_set_t.tiles_features): GEMM /
 * conv rm x rn x tk unrolled multiply-adds, class the read mode; depthwise
 * rw outputs an invocation; Winograd (wf + 2)^2 x tm x nt sums, class wf
 * (0 for the implicit-GEMM conv). */
void kiln_vulkan_tune_features(const kiln_template_t* t, const kiln_template_tiles_t* x, double* size, int32_t* cls);

#ifdef __cplusplus
}
#endif
#endif /* KILN_TARGETS_VULKAN_INTERNAL_H_ */
