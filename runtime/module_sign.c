/* kiln module signatures: the format and contracts are in module_sign.h.
 *
 * The verifier is written for hostile input like the module reader: it
 * reads the fixed-size header and the fixed-size section at the end, checks
 * each field against what this kiln writes, and only then hashes the rest.
 * Nothing in a module is interpreted before its signature has been checked.
 */
#include "runtime/module_sign.h"

#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <sodium.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#define PUBLIC_HEADER "kiln-ed25519-public-key"
#define SECRET_HEADER "kiln-ed25519-secret-key"
#define KEY_FILE_VERSION 1
#define MAX_KEY_FILE 4096

/* ---- libsodium ---------------------------------------------------------- */

static pthread_once_t sodium_once = PTHREAD_ONCE_INIT;
static int sodium_rc = -1;
static void sodium_start(void) { sodium_rc = sodium_init() < 0 ? -1 : 0; }

static kiln_status_t need_sodium(void) {
  pthread_once(&sodium_once, sodium_start);
  if (sodium_rc != 0) return kiln_make_status(KILN_INTERNAL, "libsodium failed to initialise");
  return NULL;
}

/* ---- little-endian fields -------------------------------------------------- */

static uint32_t ld32(const uint8_t* p) {
  return (uint32_t)p[0] | ((uint32_t)p[1] << 8) | ((uint32_t)p[2] << 16) | ((uint32_t)p[3] << 24);
}
static uint64_t ld64(const uint8_t* p) {
  uint64_t v = 0;
  for (int i = 7; i >= 0; --i) v = (v << 8) | p[i];
  return v;
}
static void st32(uint8_t* p, uint32_t v) {
  for (int i = 0; i < 4; ++i) p[i] = (uint8_t)(v >> (8 * i));
}
static void st64(uint8_t* p, uint64_t v) {
  for (int i = 0; i < 8; ++i) p[i] = (uint8_t)(v >> (8 * i));
}

/* ---- keys ------------------------------------------------------------------ */

void kiln_sign_key_id_text(const uint8_t id[KILN_SIGN_KEY_ID_BYTES], char out[KILN_SIGN_KEY_ID_TEXT + 1]) {
  static const char hx[] = "0123456789abcdef";
  for (int i = 0; i < KILN_SIGN_KEY_ID_TEXT / 2; ++i) {
    out[2 * i] = hx[id[i] >> 4];
    out[2 * i + 1] = hx[id[i] & 15];
  }
  out[KILN_SIGN_KEY_ID_TEXT] = 0;
}

static void set_id(kiln_sign_public_key_t* k) { crypto_hash_sha256(k->id, k->key, sizeof k->key); }

void kiln_sign_secret_key_wipe(kiln_sign_secret_key_t* key) {
  if (key) sodium_memzero(key, sizeof *key);
}

/* Reads a small file whole. Opened non-blocking so a FIFO named as a key
 * fails at fstat instead of waiting for a writer. */
static kiln_status_t read_key_file(const char* path, char* buf, size_t* out_len, mode_t* out_mode) {
  if (!path || !path[0]) return kiln_make_status(KILN_INVALID_ARGUMENT, "key file path is empty");
  int fd;
  do fd = open(path, O_RDONLY | O_NONBLOCK | O_CLOEXEC);
  while (fd < 0 && errno == EINTR);
  if (fd < 0)
    return kiln_make_status(errno == ENOENT || errno == ENOTDIR ? KILN_NOT_FOUND : KILN_IO_ERROR,
                            "%s: cannot open key file: %s", path, strerror(errno));
  kiln_status_t st = NULL;
  struct stat sb;
  if (fstat(fd, &sb) != 0) {
    st = kiln_make_status(KILN_IO_ERROR, "%s: cannot stat key file: %s", path, strerror(errno));
  } else if (S_ISDIR(sb.st_mode)) {
    st = kiln_make_status(KILN_IO_ERROR, "%s: is a directory, not a key file", path);
  } else if (!S_ISREG(sb.st_mode)) {
    st = kiln_make_status(KILN_IO_ERROR, "%s: not a regular file, not a key file", path);
  } else if (sb.st_size > MAX_KEY_FILE) {
    st = kiln_make_status(KILN_IO_ERROR, "%s: %lld bytes, too large to be a kiln key file", path,
                          (long long)sb.st_size);
  } else {
    size_t got = 0;
    while (got < MAX_KEY_FILE) {
      ssize_t k = read(fd, buf + got, MAX_KEY_FILE - got);
      if (k < 0 && errno == EINTR) continue;
      if (k < 0) {
        st = kiln_make_status(KILN_IO_ERROR, "%s: read failed: %s", path, strerror(errno));
        break;
      }
      if (k == 0) break;
      got += (size_t)k;
    }
    *out_len = got;
    *out_mode = sb.st_mode;
  }
  close(fd);
  return st;
}

static int hexval(char c) {
  if (c >= '0' && c <= '9') return c - '0';
  if (c >= 'a' && c <= 'f') return c - 'a' + 10;
  if (c >= 'A' && c <= 'F') return c - 'A' + 10;
  return -1;
}

/* "<want> v1\n<64 hex>\n": the 32 bytes into |out|. Says which key kind a
 * file is when it is the other one, the commonest mix-up. */
static kiln_status_t parse_key_text(const char* path, const char* text, size_t len, bool secret,
                                    uint8_t out[32]) {
  const char* want = secret ? SECRET_HEADER : PUBLIC_HEADER;
  const char* other = secret ? PUBLIC_HEADER : SECRET_HEADER;
  const char* nl = memchr(text, '\n', len);
  size_t l1 = nl ? (size_t)(nl - text) : len;
  if (l1 && text[l1 - 1] == '\r') --l1; /* a key file edited on Windows */
  size_t wl = strlen(want);
  if (l1 >= strlen(other) && !memcmp(text, other, strlen(other)))
    return kiln_make_status(KILN_PARSE_ERROR, secret ? "%s: is a public key; signing needs the secret key (.key)"
                                                     : "%s: is a secret key; a verify key is the public key (.pub)",
                            path);
  if (l1 < wl + 3 || memcmp(text, want, wl) != 0 || text[wl] != ' ' || text[wl + 1] != 'v')
    return kiln_make_status(KILN_PARSE_ERROR, "%s: not a kiln %s key file (its first line should be '%s v%d')",
                            path, secret ? "secret" : "public", want, KEY_FILE_VERSION);
  char vbuf[16];
  size_t vl = l1 - wl - 2;
  if (vl >= sizeof vbuf || vl == 0)
    return kiln_make_status(KILN_PARSE_ERROR, "%s: bad key file version in its first line", path);
  memcpy(vbuf, text + wl + 2, vl);
  vbuf[vl] = 0;
  if (strcmp(vbuf, "1") != 0)
    return kiln_make_status(KILN_PARSE_ERROR, "%s: key file version '%s', this kiln reads version %d", path, vbuf,
                            KEY_FILE_VERSION);
  if (!nl) return kiln_make_status(KILN_PARSE_ERROR, "%s: truncated: no key after the first line", path);
  const char* h = nl + 1;
  size_t rest = len - (size_t)(h - text);
  const char* nl2 = memchr(h, '\n', rest);
  size_t hl = nl2 ? (size_t)(nl2 - h) : rest;
  if (hl && h[hl - 1] == '\r') --hl;
  if (nl2 && (size_t)(nl2 - text) + 1 != len)
    return kiln_make_status(KILN_PARSE_ERROR, "%s: unexpected text after the key line", path);
  for (size_t i = 0; i < hl; ++i)
    if (hexval(h[i]) < 0)
      return kiln_make_status(KILN_PARSE_ERROR, "%s: character %zu of the key line (0x%02x) is not a hex digit",
                              path, i + 1, (unsigned)(unsigned char)h[i]);
  if (hl != 64)
    return kiln_make_status(KILN_PARSE_ERROR, "%s: the key line holds %zu hex digits, a key is 64", path, hl);
  for (int i = 0; i < 32; ++i) out[i] = (uint8_t)(hexval(h[2 * i]) << 4 | hexval(h[2 * i + 1]));
  return NULL;
}

kiln_status_t kiln_sign_public_key_read(const char* path, kiln_sign_public_key_t* out_key) {
  if (!out_key) return kiln_make_status(KILN_INVALID_ARGUMENT, "kiln_sign_public_key_read: NULL out_key");
  KILN_RETURN_IF_ERROR(need_sodium());
  char buf[MAX_KEY_FILE];
  size_t len = 0;
  mode_t mode = 0;
  KILN_RETURN_IF_ERROR(read_key_file(path, buf, &len, &mode));
  kiln_sign_public_key_t k;
  KILN_RETURN_IF_ERROR(parse_key_text(path, buf, len, false, k.key));
  set_id(&k);
  *out_key = k;
  return NULL;
}

kiln_status_t kiln_sign_secret_key_read(const char* path, kiln_sign_secret_key_t* out_key) {
  if (!out_key) return kiln_make_status(KILN_INVALID_ARGUMENT, "kiln_sign_secret_key_read: NULL out_key");
  KILN_RETURN_IF_ERROR(need_sodium());
  char buf[MAX_KEY_FILE];
  size_t len = 0;
  mode_t mode = 0;
  uint8_t seed[KILN_SIGN_SEED_BYTES];
  kiln_status_t st = read_key_file(path, buf, &len, &mode);
  /* Parsed first so a public key given by mistake is named as such. */
  if (!st) st = parse_key_text(path, buf, len, true, seed);
  if (!st && (mode & 077))
    st = kiln_make_status(KILN_PERMISSION_DENIED,
                          "%s: secret key is accessible by group or others (mode %04o); run chmod 600 on it", path,
                          (unsigned)(mode & 07777));
  if (!st) {
    if (crypto_sign_seed_keypair(out_key->pub.key, out_key->sk, seed) != 0)
      st = kiln_make_status(KILN_INTERNAL, "%s: libsodium could not derive the key pair", path);
    else
      set_id(&out_key->pub);
  }
  sodium_memzero(seed, sizeof seed);
  sodium_memzero(buf, sizeof buf);
  return st;
}

/* Creates |path| (never over an existing file) holding |text|. */
static kiln_status_t write_new_file(const char* path, const char* text, mode_t mode) {
  int fd = open(path, O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, mode);
  if (fd < 0)
    return kiln_make_status(errno == EEXIST ? KILN_INVALID_ARGUMENT
                            : errno == EACCES ? KILN_PERMISSION_DENIED : KILN_IO_ERROR,
                            errno == EEXIST ? "%s: exists; kiln keygen does not overwrite keys (%s)"
                                            : "%s: cannot create: %s",
                            path, strerror(errno));
  kiln_status_t st = NULL;
  /* The umask may only clear bits; fchmod makes the mode exactly |mode|. */
  if (fchmod(fd, mode) != 0) st = kiln_make_status(KILN_IO_ERROR, "%s: chmod failed: %s", path, strerror(errno));
  if (!st) st = kiln_module_fd_write_all(fd, text, strlen(text), path);
  if (!st && fsync(fd) != 0 && errno != EINVAL && errno != EROFS)
    st = kiln_make_status(KILN_IO_ERROR, "%s: flushing failed: %s", path, strerror(errno));
  if (close(fd) != 0 && !st) st = kiln_make_status(KILN_IO_ERROR, "%s: closing failed: %s", path, strerror(errno));
  if (st) unlink(path);
  return st;
}

static void hex_line(const uint8_t* b, size_t n, char* out) {
  static const char hx[] = "0123456789abcdef";
  for (size_t i = 0; i < n; ++i) {
    out[2 * i] = hx[b[i] >> 4];
    out[2 * i + 1] = hx[b[i] & 15];
  }
  out[2 * n] = '\n';
  out[2 * n + 1] = 0;
}

kiln_status_t kiln_sign_keygen(const char* keybase, kiln_sign_public_key_t* out_public) {
  if (!keybase || !keybase[0]) return kiln_make_status(KILN_INVALID_ARGUMENT, "kiln keygen: empty key name");
  KILN_RETURN_IF_ERROR(need_sodium());
  size_t bl = strlen(keybase);
  if (bl > 4000) return kiln_make_status(KILN_INVALID_ARGUMENT, "kiln keygen: key name is %zu bytes long", bl);
  char kpath[4100], ppath[4100];
  snprintf(kpath, sizeof kpath, "%s.key", keybase);
  snprintf(ppath, sizeof ppath, "%s.pub", keybase);
  /* Check both before creating either, so an existing .pub does not cost a
   * half-made pair. (write_new_file's O_EXCL still guards the race.) */
  struct stat sb;
  if (lstat(ppath, &sb) == 0)
    return kiln_make_status(KILN_INVALID_ARGUMENT, "%s: exists; kiln keygen does not overwrite keys", ppath);
  if (lstat(kpath, &sb) == 0)
    return kiln_make_status(KILN_INVALID_ARGUMENT, "%s: exists; kiln keygen does not overwrite keys", kpath);

  uint8_t seed[KILN_SIGN_SEED_BYTES], sk[64];
  kiln_sign_public_key_t pub;
  randombytes_buf(seed, sizeof seed);
  kiln_status_t st = NULL;
  if (crypto_sign_seed_keypair(pub.key, sk, seed) != 0)
    st = kiln_make_status(KILN_INTERNAL, "%s: libsodium could not make a key pair", kpath);
  char text[200];
  if (!st) {
    int n = snprintf(text, sizeof text, "%s v%d\n", SECRET_HEADER, KEY_FILE_VERSION);
    hex_line(seed, sizeof seed, text + n);
    st = write_new_file(kpath, text, 0600);
  }
  if (!st) {
    int n = snprintf(text, sizeof text, "%s v%d\n", PUBLIC_HEADER, KEY_FILE_VERSION);
    hex_line(pub.key, sizeof pub.key, text + n);
    st = write_new_file(ppath, text, 0644);
    if (st) unlink(kpath);
  }
  sodium_memzero(seed, sizeof seed);
  sodium_memzero(sk, sizeof sk);
  sodium_memzero(text, sizeof text);
  if (st) return st;
  set_id(&pub);
  if (out_public) *out_public = pub;
  return NULL;
}

/* ---- the 'SIGN' section ------------------------------------------------------ */

/* The section at the end of |d| when it looks like one: tag, flags 0 and
 * the payload length of version 1. NULL otherwise (an unsigned module). */
static const uint8_t* find_section(const uint8_t* d, size_t size) {
  if (!d || size < KILN_MODULE_HEADER_LEN + KILN_SIGN_SECTION_BYTES) return NULL;
  const uint8_t* s = d + size - KILN_SIGN_SECTION_BYTES;
  if (ld32(s) != KILN_MODULE_TAG_SIGN || ld32(s + 4) != 0 || ld64(s + 8) != KILN_SIGN_PAYLOAD_BYTES) return NULL;
  return s;
}

void kiln_module_signature_find(const void* data, size_t size, kiln_module_signature_t* out_sig) {
  if (!out_sig) return;
  memset(out_sig, 0, sizeof *out_sig);
  const uint8_t* s = find_section(data, size);
  if (!s) return;
  out_sig->present = true;
  memcpy(out_sig->key_id, s + 16 + KILN_SIGN_OFF_KEY_ID, KILN_SIGN_KEY_ID_BYTES);
}

/* The header of the module before signing, from the signed file's. */
static void unsigned_header(const uint8_t* d, size_t signed_size, uint64_t body_sum, uint8_t h[KILN_MODULE_HEADER_LEN]) {
  memcpy(h, d, KILN_MODULE_HEADER_LEN);
  st64(h + KILN_MODULE_OFF_TOTAL_LEN, (uint64_t)(signed_size - KILN_SIGN_SECTION_BYTES));
  st32(h + KILN_MODULE_OFF_SECTIONS, ld32(d + KILN_MODULE_OFF_SECTIONS) - 1);
  st64(h + KILN_MODULE_OFF_BODY_SUM, body_sum);
  st64(h + KILN_MODULE_OFF_HEADER_SUM, kiln_module_crc64(0, h, KILN_MODULE_OFF_HEADER_SUM));
}

/* The unsigned module's header (|h|, 48 bytes) then |body| (its bytes from
 * offset 48 on): the message, streamed, never copied. */
static void hash_message(crypto_sign_ed25519ph_state* stt, const uint8_t* h, const uint8_t* body, size_t body_len) {
  crypto_sign_ed25519ph_init(stt);
  crypto_sign_ed25519ph_update(stt, h, KILN_MODULE_HEADER_LEN);
  /* unsigned long long is 64-bit here; chunk anyway so a size_t never
   * narrows on an odd platform. */
  while (body_len) {
    size_t n = body_len > (1u << 30) ? (1u << 30) : body_len;
    crypto_sign_ed25519ph_update(stt, body, (unsigned long long)n);
    body += n;
    body_len -= n;
  }
}

kiln_status_t kiln_module_sign(const void* module, size_t len, const char* name, const kiln_sign_secret_key_t* key,
                               kiln_allocator_t a, uint8_t** out_bytes, size_t* out_len) {
  if (!name || !name[0]) name = "module";
  if (!module || !key || !out_bytes || !out_len)
    return kiln_make_status(KILN_INVALID_ARGUMENT, "%s: kiln_module_sign: NULL argument", name);
  KILN_RETURN_IF_ERROR(need_sodium(), "%s", name);
  const uint8_t* d = module;
  /* Only an intact module is signed: a signature vouches for the bytes, so
   * they had better be the ones the writer meant. */
  if (len < KILN_MODULE_HEADER_LEN || memcmp(d, KILN_MODULE_MAGIC, KILN_MODULE_MAGIC_LEN) != 0)
    return kiln_make_status(KILN_PARSE_ERROR, "%s: cannot sign: not a kiln module", name);
  if (ld64(d + KILN_MODULE_OFF_TOTAL_LEN) != len || len % 8 != 0 ||
      kiln_module_crc64(0, d, KILN_MODULE_OFF_HEADER_SUM) != ld64(d + KILN_MODULE_OFF_HEADER_SUM))
    return kiln_make_status(KILN_PARSE_ERROR, "%s: cannot sign: the module header is damaged", name);
  uint64_t body_sum = ld64(d + KILN_MODULE_OFF_BODY_SUM);
  if (kiln_module_crc64(0, d + KILN_MODULE_HEADER_LEN, len - KILN_MODULE_HEADER_LEN) != body_sum)
    return kiln_make_status(KILN_PARSE_ERROR, "%s: cannot sign: checksum mismatch (module corrupt)", name);
  if (find_section(d, len)) return kiln_make_status(KILN_INVALID_ARGUMENT, "%s: cannot sign: already signed", name);
  uint32_t sections = ld32(d + KILN_MODULE_OFF_SECTIONS);
  if (sections == UINT32_MAX) return kiln_make_status(KILN_PARSE_ERROR, "%s: cannot sign: section count full", name);

  size_t total = len + KILN_SIGN_SECTION_BYTES;
  void* m = NULL;
  KILN_RETURN_IF_ERROR(kiln_allocator_malloc(a, total, "signed module", &m), "%s", name);
  uint8_t* o = m;
  memcpy(o, d, len);
  uint8_t* s = o + len;
  memset(s, 0, KILN_SIGN_SECTION_BYTES);
  st32(s, KILN_MODULE_TAG_SIGN);
  st32(s + 4, 0);
  st64(s + 8, KILN_SIGN_PAYLOAD_BYTES);
  uint8_t* pl = s + 16;
  st32(pl + KILN_SIGN_OFF_VERSION, KILN_SIGN_VERSION);
  st32(pl + KILN_SIGN_OFF_ALG, KILN_SIGN_ALG_ED25519PH);
  memcpy(pl + KILN_SIGN_OFF_KEY_ID, key->pub.id, KILN_SIGN_KEY_ID_BYTES);
  st64(pl + KILN_SIGN_OFF_BODY_SUM, body_sum);

  /* The message is the module as it came in: header and body unchanged. */
  crypto_sign_ed25519ph_state stt;
  hash_message(&stt, d, d + KILN_MODULE_HEADER_LEN, len - KILN_MODULE_HEADER_LEN);
  unsigned long long sl = 0;
  if (crypto_sign_ed25519ph_final_create(&stt, pl + KILN_SIGN_OFF_SIG, &sl, key->sk) != 0 || sl != 64) {
    kiln_allocator_free(a, m);
    return kiln_make_status(KILN_INTERNAL, "%s: libsodium could not sign", name);
  }
  st64(o + KILN_MODULE_OFF_TOTAL_LEN, (uint64_t)total);
  st32(o + KILN_MODULE_OFF_SECTIONS, sections + 1);
  kiln_module_reseal(o, total);
  *out_bytes = o;
  *out_len = total;
  return NULL;
}

kiln_status_t kiln_module_verify(const void* data, size_t size, const char* name, const kiln_sign_public_key_t* key) {
  if (!name || !name[0]) name = "module";
  if (!key) return kiln_make_status(KILN_INVALID_ARGUMENT, "%s: kiln_module_verify: NULL key", name);
  if (!data && size) return kiln_make_status(KILN_INVALID_ARGUMENT, "%s: NULL data", name);
  KILN_RETURN_IF_ERROR(need_sodium(), "%s", name);
  const uint8_t* d = data;
  char want[KILN_SIGN_KEY_ID_TEXT + 1];
  kiln_sign_key_id_text(key->id, want);
  if (size < KILN_MODULE_MAGIC_LEN || memcmp(d, KILN_MODULE_MAGIC, KILN_MODULE_MAGIC_LEN) != 0)
    return kiln_make_status(KILN_PARSE_ERROR, "%s: not a kiln module (bad magic)", name);
  /* A cut file has lost its signature section with its tail: say so
   * rather than "not signed". */
  if (size >= KILN_MODULE_HEADER_LEN && ld64(d + KILN_MODULE_OFF_TOTAL_LEN) > size)
    return kiln_make_status(KILN_PERMISSION_DENIED, "%s: refused: truncated: the file is %zu bytes but its header says %llu",
                            name, size, (unsigned long long)ld64(d + KILN_MODULE_OFF_TOTAL_LEN));
  const uint8_t* s = find_section(d, size);
  if (!s)
    return kiln_make_status(KILN_PERMISSION_DENIED,
                            "%s: refused: the module is not signed (no signature section at its end) and a "
                            "verify key (key id %s) is set",
                            name, want);
  const uint8_t* pl = s + 16;
  uint32_t ver = ld32(pl + KILN_SIGN_OFF_VERSION), alg = ld32(pl + KILN_SIGN_OFF_ALG);
  if (ver != KILN_SIGN_VERSION)
    return kiln_make_status(KILN_PARSE_ERROR, "%s: refused: signature version %u, this kiln reads %d", name, ver,
                            KILN_SIGN_VERSION);
  if (alg != KILN_SIGN_ALG_ED25519PH)
    return kiln_make_status(KILN_PARSE_ERROR, "%s: refused: signature algorithm %u unknown to this kiln", name, alg);
  char got[KILN_SIGN_KEY_ID_TEXT + 1];
  kiln_sign_key_id_text(pl + KILN_SIGN_OFF_KEY_ID, got);
  /* Not secret data: a plain compare is fine. */
  if (memcmp(pl + KILN_SIGN_OFF_KEY_ID, key->id, KILN_SIGN_KEY_ID_BYTES) != 0)
    return kiln_make_status(KILN_PERMISSION_DENIED, "%s: refused: signed by key id %s, not by the verify key (id %s)",
                            name, got, want);
  /* The header fields the signature does not cover must agree with the
   * file, so the parser reads the layout the signer wrote. */
  if (size < KILN_MODULE_HEADER_LEN + KILN_SIGN_SECTION_BYTES || size % 8 != 0 ||
      ld64(d + KILN_MODULE_OFF_TOTAL_LEN) != size || ld32(d + KILN_MODULE_OFF_SECTIONS) == 0 ||
      kiln_module_crc64(0, d, KILN_MODULE_OFF_HEADER_SUM) != ld64(d + KILN_MODULE_OFF_HEADER_SUM))
    return kiln_make_status(KILN_PERMISSION_DENIED,
                            "%s: refused: the module header was changed after signing (length, section count or "
                            "header checksum do not match the file)",
                            name);
  uint8_t h[KILN_MODULE_HEADER_LEN];
  unsigned_header(d, size, ld64(pl + KILN_SIGN_OFF_BODY_SUM), h);
  crypto_sign_ed25519ph_state stt;
  hash_message(&stt, h, d + KILN_MODULE_HEADER_LEN, size - KILN_SIGN_SECTION_BYTES - KILN_MODULE_HEADER_LEN);
  if (crypto_sign_ed25519ph_final_verify(&stt, pl + KILN_SIGN_OFF_SIG, key->key) != 0)
    return kiln_make_status(KILN_PERMISSION_DENIED,
                            "%s: refused: the signature by key id %s does not match the module's bytes (changed "
                            "after signing, or a forged signature)",
                            name, got);
  return NULL;
}

/* ---- writing ------------------------------------------------------------------- */

kiln_status_t kiln_module_write_signed_file(const kiln_program_t* p, const char* path,
                                            const kiln_sign_secret_key_t* key) {
  if (!p || !path || !path[0] || !key)
    return kiln_make_status(KILN_INVALID_ARGUMENT, "kiln_module_write_signed_file: NULL argument or empty path");
  KILN_RETURN_IF_ERROR(kiln_program_validate(p), "%s", path);
  kiln_allocator_t sys = kiln_allocator_system();
  uint8_t* bytes = NULL;
  size_t len = 0;
  KILN_RETURN_IF_ERROR(kiln_module_serialize(p, sys, &bytes, &len), "%s", path);
  uint8_t* sig = NULL;
  size_t sig_len = 0;
  kiln_status_t st = kiln_module_sign(bytes, len, path, key, sys, &sig, &sig_len);
  kiln_allocator_free(sys, bytes);
  if (st) return st;

  /* As kiln_module_write_file: no half module is ever left at |path|. */
  st = kiln_module_write_bytes(sig, sig_len, path);
  kiln_allocator_free(sys, sig);
  return st;
}
