/* kiln module file (.kiln): a kiln_program_t as bytes, and back.
 *
 * The compiler writes one with kiln_module_write_file; the runtime reads it
 * with kiln_module_parse (via kiln_module_load_file / _load_memory in
 * include/kiln/runtime.h). The reader trusts nothing: every count and length
 * is checked against the bytes that remain before anything is allocated,
 * and the program it builds must pass kiln_program_validate.
 *
 * ---- format, version 1 (all integers little-endian) ----------------------
 *
 * Header, 48 bytes:
 *    0  u8[8]  magic "KILNMOD\0"
 *    8  u32    format version (1). A reader refuses a newer version with
 *              "module format version N, this kiln reads up to 1"; additions
 *              that old readers may ignore go into new optional sections
 *              and keep the version.
 *   12  u32    flags (0; a version-1 reader refuses any bit it does not know)
 *   16  u64    total length of the file in bytes, header included
 *   24  u32    number of sections
 *   28  u32    header length (48)
 *   32  u64    body checksum: CRC-64/XZ of bytes [48, total length)
 *   40  u64    header checksum: CRC-64/XZ of bytes [0, 40)
 *
 * CRC-64/XZ (ECMA-182 polynomial, reflected, init and xorout all ones; the
 * check value of "123456789" is 0x995dc9bbdf1939fa) detects every single-bit
 * error, every burst up to 64 bits and so every single-byte change.
 *
 * Sections follow the header, each starting at an 8-byte aligned offset:
 *    u32 tag, u32 flags, u64 payload length, payload, zero padding to 8.
 * Section flag bit 0 (KILN_MODULE_SECTION_REQUIRED) marks a section that a
 * reader must understand; a reader skips unknown sections without it
 * (forward compatibility) and refuses unknown ones with it. Each known tag
 * appears at most once; the file ends right after the last section's
 * padding. Payloads are packed (no alignment) and built from:
 *    str   = u32 length, then that many bytes, no NUL among them (<= 1 MiB)
 *    count = u64 (a reader caps counts at INT32_MAX and at what the rest of
 *            the payload could hold)
 *
 *   'META' (required)  str target (version 3 on: its name, "cpu", "opencl",
 *                      "vulkan", ...; versions 1-2 wrote a u32 number here,
 *                      0 cpu, 1 opencl, 2 vulkan), str model_name,
 *                      str precision, str options. A reader refuses a
 *                      target this build does not have, naming it
 *   'BUFS' (required)  count n; n x { str name, u32 dtype, u32 kind,
 *                      i32 rank, i64 shape[rank], u64 bytes, i32 alias_of,
 *                      i32 first_use, i32 last_use, u64 const_offset }
 *   'KERN' (required)  count n; n x { str name, str node_name, str op_type,
 *                      count n_args, n_args x { i32 buffer, u8 access },
 *                      i64 groups[3], i64 local[3], i64 flops, i64 bytes,
 *                      i32 inplace_in, i32 inplace_out }
 *   'IO  ' (required)  count n_inputs; n x { i32 buffer, str name };
 *                      count n_outputs; n x { i32 buffer, str name }
 *   'WGHT' (required)  u64 length, u32 pad, u32 reserved (0), pad zero
 *                      bytes, then the weights. The writer picks pad < 64
 *                      so the weights start at a multiple of 64 in the file
 *                      (a reader may map them in place).
 *   'CODE' (required)  u64 text length, text bytes (no NUL);
 *                      count n_parts, n_parts x { u64 offset, u64 length };
 *                      count n_blobs, n_blobs x { u64 length, bytes }
 *   'GEMM' (optional, after 'KERN'; written when a kernel has one)
 *                      count n; n x { i32 kernel, u32 flags (1 trans_a,
 *                      2 trans_b), i64 M, N, K, batch, lda, ldb, ldy, sa,
 *                      sb, sy, f32 alpha (bits), i32 a, b, y } — the
 *                      kiln_program_gemm_t a library may run in the
 *                      kernel's place; a reader without it runs the kernel
 *   'PLUG' (optional; written when kernels compute plugin ops)
 *                      count n; n x { str domain, str name, i32 version }
 *                      — the custom ops (include/kiln/custom_op.h) the
 *                      program needs; the module loader refuses the
 *                      module while no loaded plugin provides each of them
 *   'TUNE' (optional; written when kernels were compiled with points from a
 *                      tuning cache, docs/TUNING.md) count n; n x { i32
 *                      kernel, str point }: a kernel at most once, the
 *                      point its text (kiln_program_kernel_t.tuned)
 *   'NATV' (optional, after 'CODE'; written by `kiln compile --cpu-target`)
 *                      count n; n x { str isa ("x86-64-v3", "aarch64", ...,
 *                      1..63 bytes), u64 length, that many bytes: an ELF
 *                      shared object }. The CPU device loads the best one
 *                      the running CPU executes, without a compiler; a reader
 *                      without it compiles the C source
 *   'DBIN' (optional, after 'CODE'; written by `kiln compile -t opencl -o`)
 *                      count n; n x { str device, str vendor, str driver,
 *                      str kiln_version, u64 source_crc (CRC-64/XZ of the
 *                      CODE text it was built from), u64 length, that many
 *                      bytes: the driver's program binary of the CODE text }.
 *                      The OpenCL device builds the one whose four strings
 *                      match it exactly (clCreateProgramWithBinary) and the
 *                      source when none does, or with a warning naming the
 *                      module when its source_crc is not the text's or the
 *                      driver refuses it; a reader without it builds the
 *                      source
 *   'HOST' (after 'KERN' and 'CODE'; written, with the required flag, for
 *                      heterogeneous programs only) count n (= kernels);
 *                      n x u8 device (0: the target, 1: the host CPU),
 *                      zero padding to 8; then the host kernels' CPU code
 *                      in the 'CODE' layout. Older modules have none: every
 *                      kernel runs on the target
 *   'STGS' (required; staged models only, after 'IO  '; runtime/program_staged.h)
 *                      count n_values; n x { u32 dtype, i32 rank, u32 datadep
 *                      (bit d: axis d depends on data, its size is then the
 *                      bound), i64 size[rank], u8 constant (0/1), when 1:
 *                      u64 length and the bytes }; count n_inputs, i32 value
 *                      per model input; count n_outputs, i32 value per model
 *                      output; count n_segments; n x { u32 op (0 a compiled
 *                      stage, 1 NonZero, 2 NonMaxSuppression), str name,
 *                      count n_in, i32 value each (-1: an omitted optional
 *                      input), count n_out, i32 value each, count n_attrs,
 *                      n_attrs x { str name, i64 value }; a stage then: u64
 *                      length, its module image, zero padding to 8 }. The
 *                      program carrying it is a shell of the model's inputs
 *                      and outputs without kernels or code
 *   'SIGN' (optional, always last; runtime/module_sign.h) an Ed25519
 *                      signature over the rest of the file; checked only
 *                      when a verify key is given, skipped by this reader
 *
 * The writer is deterministic: a program parsed from a file serialises to
 * the same bytes.
 *
 * Errors: PARSE_ERROR for anything malformed (bad magic, version, checksum,
 * truncation, a length past the end, inconsistent contents as reported by
 * kiln_program_validate); LIMIT_EXCEEDED for counts above INT32_MAX;
 * OUT_OF_MEMORY. Messages start with the module's name.
 *
 * Thread-safety: all functions are reentrant.
 */
#ifndef KILN_RUNTIME_MODULE_FILE_H_
#define KILN_RUNTIME_MODULE_FILE_H_

#include <stddef.h>
#include <stdint.h>

#include "kiln/array.h"
#include "kiln/status.h"
#include "runtime/program.h"

#ifdef __cplusplus
extern "C" {
#endif

#define KILN_MODULE_MAGIC "KILNMOD\0" /* 8 bytes, the NUL included */
#define KILN_MODULE_MAGIC_LEN 8
/* 2: kernels carry loop_trips; 3: META names the target instead of
 * numbering it (targets come from a registry, numbers would not scale). */
#define KILN_MODULE_FORMAT_VERSION 3
#define KILN_MODULE_HEADER_LEN 48
#define KILN_MODULE_WEIGHTS_ALIGN 64
#define KILN_MODULE_MAX_STRING (1u << 20)

/* Header field offsets (tests reseal hand-edited files with these). */
#define KILN_MODULE_OFF_VERSION 8
#define KILN_MODULE_OFF_FLAGS 12
#define KILN_MODULE_OFF_TOTAL_LEN 16
#define KILN_MODULE_OFF_SECTIONS 24
#define KILN_MODULE_OFF_HEADER_LEN 28
#define KILN_MODULE_OFF_BODY_SUM 32
#define KILN_MODULE_OFF_HEADER_SUM 40

#define KILN_MODULE_SECTION_REQUIRED 1u

/* Section tags: four ASCII characters read as a little-endian u32. */
#define KILN_MODULE_TAG(a, b, c, d)                                        \
  ((uint32_t)(uint8_t)(a) | ((uint32_t)(uint8_t)(b) << 8) |                \
   ((uint32_t)(uint8_t)(c) << 16) | ((uint32_t)(uint8_t)(d) << 24))
#define KILN_MODULE_TAG_META KILN_MODULE_TAG('M', 'E', 'T', 'A')
#define KILN_MODULE_TAG_BUFS KILN_MODULE_TAG('B', 'U', 'F', 'S')
#define KILN_MODULE_TAG_KERN KILN_MODULE_TAG('K', 'E', 'R', 'N')
#define KILN_MODULE_TAG_IO KILN_MODULE_TAG('I', 'O', ' ', ' ')
#define KILN_MODULE_TAG_WGHT KILN_MODULE_TAG('W', 'G', 'H', 'T')
#define KILN_MODULE_TAG_CODE KILN_MODULE_TAG('C', 'O', 'D', 'E')
#define KILN_MODULE_TAG_GEMM KILN_MODULE_TAG('G', 'E', 'M', 'M')
/* optional: the plugin ops the program uses (domain, name, version each) */
#define KILN_MODULE_TAG_PLUG KILN_MODULE_TAG('P', 'L', 'U', 'G')
#define KILN_MODULE_TAG_NATV KILN_MODULE_TAG('N', 'A', 'T', 'V')
/* required when present: the dynamic dims (name, lo, hi each; runtime/
 * program.h); a kiln without it must refuse the module, whose kernels read
 * the dims' values */
#define KILN_MODULE_TAG_DYNS KILN_MODULE_TAG('D', 'Y', 'N', 'S')
/* required when present: the dynamic dim inside the shapes (runtime/
 * program.h, kiln_program_t.dim_axis): u64 count (inputs + outputs), then
 * an i32 axis each (-1: none), after 'DYNS' and 'IO  ' */
#define KILN_MODULE_TAG_DYNA KILN_MODULE_TAG('D', 'Y', 'N', 'A')
/* optional, after 'BUFS' and 'DYNA': u64 count (the buffers), then per
 * buffer its bytes at the dim's value n as three i64 c0, c1, c2 (c0 + c1*n
 * + c2*n^2; kiln_program_t.dim_bytes). A kiln without it plans every buffer
 * at the top of the range, which is correct, only larger. */
#define KILN_MODULE_TAG_DYNM KILN_MODULE_TAG('D', 'Y', 'N', 'M')
/* optional: the tuning-cache points template kernels were compiled with */
#define KILN_MODULE_TAG_TUNE KILN_MODULE_TAG('T', 'U', 'N', 'E')
/* Optional, required when present: heterogeneous execution, one device
 * byte per kernel (0 the target, 1 the host CPU; padded to 8) and the host
 * kernels' CPU code in the CODE layout. */
#define KILN_MODULE_TAG_HOST KILN_MODULE_TAG('H', 'O', 'S', 'T')
#define KILN_MODULE_MAX_ISA_NAME 63
/* optional: device program binaries (OpenCL), keyed by device and driver */
#define KILN_MODULE_TAG_DBIN KILN_MODULE_TAG('D', 'B', 'I', 'N')
/* Required when present: shape buckets (kiln compile --dim seq=16,64,...):
 * the dim, its sizes and the programs of all sizes but the first, each a
 * whole module image (runtime/program_buckets.c). */
#define KILN_MODULE_TAG_BUCK KILN_MODULE_TAG('B', 'U', 'C', 'K')
#define KILN_MODULE_TAG_STGS KILN_MODULE_TAG('S', 'T', 'G', 'S')

/* CRC-64/XZ of |n| bytes, continuing from |crc| (start with 0)
 * (runtime/module_crc.c: carry-less multiplication where the CPU has it). */
uint64_t kiln_module_crc64(uint64_t crc, const void* data, size_t n);
/* The same with the portable tables only (tests compare the two). */
uint64_t kiln_module_crc64_tables(uint64_t crc, const void* data, size_t n);

/* Recomputes both checksums of the module in |bytes| (at least the header
 * long) after an edit; the total length field is left alone. For tests and
 * tools that patch files. */
void kiln_module_reseal(uint8_t* bytes, size_t len);

/* Serialises |p| as written, without validating it (kiln_module_write_file
 * validates; tests serialise inconsistent programs on purpose). The bytes
 * are allocated with |a| and owned by the caller (kiln_allocator_free).
 * Errors: INVALID_ARGUMENT for negative counts, missing arrays or strings
 * that cannot be stored (NUL-free, <= 1 MiB); OUT_OF_MEMORY. */
kiln_status_t kiln_module_serialize(const kiln_program_t* p, kiln_allocator_t a,
                                    uint8_t** out_bytes, size_t* out_len);

/* Validates |p| and writes it to |path|: the bytes go to "<path>.tmp",
 * which is flushed and renamed over |path|, so a failed write never leaves a
 * half file at |path| (the .tmp is removed). Errors name the path and the
 * OS's reason (IO_ERROR), or are kiln_program_validate's. */
kiln_status_t kiln_module_write_file(const kiln_program_t* p, const char* path);

/* kiln_module_write_file for a program whose native code (section NATV,
 * the last of a CPU module) another thread is still building: everything
 * before it is written first, then |wait(ctx)| is called once, and must
 * return with p->code.native filled (or an error, which fails the write).
 * |wait| is called on every path, errors included, before this returns
 * (so the caller's thread has ended). |p| has no native code or device
 * binaries yet. */
typedef kiln_status_t (*kiln_module_wait_fn)(void* ctx);
kiln_status_t kiln_module_write_file_then(const kiln_program_t* p, const char* path, kiln_module_wait_fn wait,
                                          void* wait_ctx);

/* Writes |len| module bytes to |path| as kiln_module_write_file does
 * (through "<path>.tmp", flushed, then renamed; no half file on failure).
 * The bytes are not checked: callers serialise (and sign) them first. */
kiln_status_t kiln_module_write_bytes(const uint8_t* bytes, size_t len, const char* path);

/* Writes all |n| bytes to |fd|, retrying short writes and EINTR; IO_ERROR
 * naming |name| otherwise. */
kiln_status_t kiln_module_fd_write_all(int fd, const void* data, size_t n, const char* name);

/* Parses |size| bytes at |data| into a new program owned by |a| (nothing of
 * |data| is kept). |name| (a path, or any label) starts every message. The
 * result has passed kiln_program_validate. *out_program is written only on
 * success. */
kiln_status_t kiln_module_parse(const void* data, size_t size, const char* name,
                                kiln_allocator_t a, kiln_program_t** out_program);

/* kiln_module_parse, except that the program's weights are not copied: they
 * point into |data| (kiln_program_t.weights_borrowed), whose 'WGHT'
 * payload the writer aligned to 64 bytes in the file. The caller keeps
 * |data| alive and unchanged for the program's life; kiln_module_load_file
 * maps the file read-only for it, so a 47 MB ResNet-18 is neither read nor
 * copied, only checksummed. */
kiln_status_t kiln_module_parse_borrowing(const void* data, size_t size, const char* name,
                                          kiln_allocator_t a, kiln_program_t** out_program);

#ifdef __cplusplus
}
#endif
#endif /* KILN_RUNTIME_MODULE_FILE_H_ */
