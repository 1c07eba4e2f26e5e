/* kiln module signatures: Ed25519 keys, signing a module's bytes, and
 * checking a signature before anything in a module is parsed.
 *
 * A module is code (docs/TRUST.md): its CPU section is C that is compiled
 * and loaded when a session is created. The module's CRC only catches
 * accidents; a signature says who wrote the bytes. The crypto is
 * libsodium's (Debian libsodium-dev); nothing here is home-made beyond the
 * byte layout.
 *
 *   kiln_sign_keygen("release", &pub);                 // release.key + release.pub
 *   kiln_sign_secret_key_read("release.key", &sk);
 *   kiln_module_write_signed_file(program, "m.kiln", &sk);
 *   ...
 *   kiln_sign_public_key_read("release.pub", &pk);
 *   KILN_RETURN_IF_ERROR(kiln_module_verify(bytes, size, "m.kiln", &pk));
 *   // only now kiln_module_parse(bytes, ...)
 *
 * (kiln_module_load_file_opts with options.verify_key_file does the last two
 * steps.)
 *
 * ---- key files (text, version 1) ------------------------------------------
 *
 *   KEYBASE.pub   "kiln-ed25519-public-key v1\n" + 64 hex digits + "\n"
 *                 (the 32-byte Ed25519 public key)
 *   KEYBASE.key   "kiln-ed25519-secret-key v1\n" + 64 hex digits + "\n"
 *                 (the 32-byte Ed25519 seed the key pair derives from),
 *                 mode 0600; a secret key readable by group or others is
 *                 refused, as ssh does.
 *
 * Exactly these two lines (a missing final newline and CRLF line ends are
 * accepted). The key id
 * is the SHA-256 of the 32 public key bytes; messages show its first 16 hex
 * digits.
 *
 * ---- the 'SIGN' section -----------------------------------------------------
 *
 * A signed module is an ordinary module (runtime/module_file.h) with one
 * more section, always the last, 128 bytes in all:
 *    u32 tag 'SIGN', u32 flags 0 (optional: a kiln that does not know it
 *    skips it, so old readers load signed modules), u64 payload length 112,
 *    payload:
 *      0  u32    signature version (1)
 *      4  u32    algorithm (1: Ed25519ph, RFC 8032, empty context)
 *      8  u8[32] key id: SHA-256 of the signer's public key
 *     40  u64    body checksum of the unsigned module
 *     48  u8[64] signature
 *
 * What is signed is the unsigned module, exactly as it was before the
 * section was appended: the file's bytes up to the section, with the header
 * as it was (total length = the section's offset, one section fewer, the
 * body checksum recorded above, the header checksum recomputed). So every
 * byte of the file is covered except the section itself, whose fields are
 * checked one by one, and the header's length, section count and two
 * checksums, which the verifier checks against the file (the body checksum
 * is left to kiln_module_parse, which reads every byte anyway). Ed25519ph
 * (the prehashed variant) is used so the verifier can feed the rebuilt
 * header and the file's body to SHA-512 without copying the body.
 *
 * Thread-safety: all functions are reentrant (libsodium is initialised once,
 * under pthread_once).
 */
#ifndef KILN_RUNTIME_MODULE_SIGN_H_
#define KILN_RUNTIME_MODULE_SIGN_H_

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "kiln/array.h"
#include "kiln/status.h"
#include "runtime/module_file.h"
#include "runtime/program.h"

#ifdef __cplusplus
extern "C" {
#endif

#define KILN_MODULE_TAG_SIGN KILN_MODULE_TAG('S', 'I', 'G', 'N')
#define KILN_SIGN_SECTION_BYTES 128 /* section header (16) + payload (112) */
#define KILN_SIGN_PAYLOAD_BYTES 112
#define KILN_SIGN_VERSION 1
#define KILN_SIGN_ALG_ED25519PH 1
/* Payload field offsets (tests flip bytes in each). */
#define KILN_SIGN_OFF_VERSION 0
#define KILN_SIGN_OFF_ALG 4
#define KILN_SIGN_OFF_KEY_ID 8
#define KILN_SIGN_OFF_BODY_SUM 40
#define KILN_SIGN_OFF_SIG 48

#define KILN_SIGN_PUBLIC_KEY_BYTES 32
#define KILN_SIGN_SEED_BYTES 32
#define KILN_SIGN_KEY_ID_BYTES 32
#define KILN_SIGN_KEY_ID_TEXT 16 /* hex digits shown in messages */

typedef struct kiln_sign_public_key_s {
  uint8_t key[KILN_SIGN_PUBLIC_KEY_BYTES];
  uint8_t id[KILN_SIGN_KEY_ID_BYTES]; /* SHA-256 of |key| */
} kiln_sign_public_key_t;

/* Holds secret bytes: wipe with kiln_sign_secret_key_wipe when done. */
typedef struct kiln_sign_secret_key_s {
  uint8_t sk[64]; /* libsodium's form: seed || public key */
  kiln_sign_public_key_t pub;
} kiln_sign_secret_key_t;

/* The first KILN_SIGN_KEY_ID_TEXT hex digits of |id|, NUL-terminated. */
void kiln_sign_key_id_text(const uint8_t id[KILN_SIGN_KEY_ID_BYTES], char out[KILN_SIGN_KEY_ID_TEXT + 1]);

/* Makes a new key pair and writes "<keybase>.key" (mode 0600) and
 * "<keybase>.pub". Never overwrites: either file existing is an error
 * (INVALID_ARGUMENT naming it); on any failure neither file is left
 * behind. *out_public (optional) gets the public key. Errors name the path:
 * IO_ERROR / PERMISSION_DENIED from the OS, INTERNAL when libsodium cannot
 * start. */
KILN_MUST_USE kiln_status_t kiln_sign_keygen(const char* keybase, kiln_sign_public_key_t* out_public);

/* Read a key file (format above). Errors name |path|: NOT_FOUND, IO_ERROR
 * (a directory, a FIFO or device -- never blocked on --, unreadable, over
 * 4 KiB), PARSE_ERROR (wrong first line, a secret key given where a public
 * one is wanted or the reverse, wrong number of hex digits, a non-hex
 * character, trailing text), PERMISSION_DENIED (a secret key readable or
 * writable by group or others). */
KILN_MUST_USE kiln_status_t kiln_sign_public_key_read(const char* path, kiln_sign_public_key_t* out_key);
KILN_MUST_USE kiln_status_t kiln_sign_secret_key_read(const char* path, kiln_sign_secret_key_t* out_key);
/* Zeroes the secret (NULL: no-op). */
void kiln_sign_secret_key_wipe(kiln_sign_secret_key_t* key);

/* What the 'SIGN' section at the end of |data| claims, without checking it
 * (for `kiln info`; trust nothing here without kiln_module_verify). */
typedef struct kiln_module_signature_s {
  bool present;
  uint8_t key_id[KILN_SIGN_KEY_ID_BYTES];
} kiln_module_signature_t;
void kiln_module_signature_find(const void* data, size_t size, kiln_module_signature_t* out_sig);

/* Appends a 'SIGN' section to the unsigned module in |module| (|len|
 * bytes; checked as far as its header and both checksums, so only an
 * intact module is signed). The result is allocated with |a| and owned by
 * the caller. Errors: PARSE_ERROR naming |name| for bytes that are not an
 * intact module, INVALID_ARGUMENT for one already signed, OUT_OF_MEMORY. */
KILN_MUST_USE kiln_status_t kiln_module_sign(const void* module, size_t len, const char* name,
                               const kiln_sign_secret_key_t* key, kiln_allocator_t a,
                               uint8_t** out_bytes, size_t* out_len);

/* Checks that |data| is a module signed by |key| whose bytes have not
 * changed since. Reads only the header and the 'SIGN' section before the
 * signature check; everything else is only hashed. OK means the bytes are
 * the signer's (kiln_module_parse must still run: it checks the body
 * checksum and the contents). Errors start with |name|:
 * PERMISSION_DENIED for an unsigned module, one signed by another key
 * (naming both key ids) or one whose bytes changed after signing;
 * PARSE_ERROR for bytes that are not a module or a signature section this
 * kiln does not know (version, algorithm). */
KILN_MUST_USE kiln_status_t kiln_module_verify(const void* data, size_t size, const char* name,
                                 const kiln_sign_public_key_t* key);

/* kiln_module_write_file, signed: validates |p|, serialises it, signs the
 * bytes with |key| and writes them to |path| through "<path>.tmp" and a
 * rename (no half file on failure). Errors as kiln_module_write_file's and
 * kiln_module_sign's. */
KILN_MUST_USE kiln_status_t kiln_module_write_signed_file(const kiln_program_t* p, const char* path,
                                            const kiln_sign_secret_key_t* key);

#ifdef __cplusplus
}
#endif
#endif /* KILN_RUNTIME_MODULE_SIGN_H_ */
