/* Module signing (runtime/module_sign.h, BAD_INPUTS.md row 24): keys, the
 * sign/verify round trip on the CPU, and every way a module or a key can be
 * wrong -- unsigned, another key, any byte changed after signing (with the
 * checksums recomputed, as an attacker would), a truncated signature, bad key
 * files -- refused before the module is parsed. The last test proves the
 * refusal comes before any of the module's code is built: its C carries a
 * constructor that creates a file, which runs when the module is loaded
 * without a key and not at all under one. */
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/types.h>
#include <time.h>
#include <unistd.h>

#include "runtime/module_sign.h"
#include "runtime_util.h"

static char dir[256];
static char path_a_key[300], path_a_pub[300], path_b_key[300], path_b_pub[300];
static kiln_sign_secret_key_t key_a, key_b;
static char id_a[KILN_SIGN_KEY_ID_TEXT + 1], id_b[KILN_SIGN_KEY_ID_TEXT + 1];
static uint8_t* unsigned_bytes; /* the runtime_util model's module */
static size_t unsigned_len;
static uint8_t* signed_bytes; /* the same, signed with key a */
static size_t signed_len;

static void in_dir(char* out, size_t n, const char* name) { snprintf(out, n, "%s/%s", dir, name); }

static bool write_file(const char* path, const void* data, size_t n) {
  FILE* f = fopen(path, "wb");
  if (!f) return false;
  bool ok = fwrite(data, 1, n, f) == n;
  return fclose(f) == 0 && ok;
}

static bool write_text(const char* path, const char* text) { return write_file(path, text, strlen(text)); }

static bool exists(const char* path) {
  struct stat sb;
  return stat(path, &sb) == 0;
}

static kiln_status_t load_with(const void* bytes, size_t n, const char* key_path, kiln_module_t** out) {
  kiln_module_load_options_t o = {.verify_key_file = key_path};
  return kiln_module_load_memory_opts(bytes, n, "m.kiln", &o, kiln_allocator_system(), out);
}

/* Payload offset of the section |tag| in module bytes (-1 when absent). */
static long section_payload(const uint8_t* d, size_t n, uint32_t tag, uint64_t* out_len) {
  size_t off = KILN_MODULE_HEADER_LEN;
  while (off + 16 <= n) {
    uint32_t t = (uint32_t)d[off] | (uint32_t)d[off + 1] << 8 | (uint32_t)d[off + 2] << 16 | (uint32_t)d[off + 3] << 24;
    uint64_t len = 0;
    for (int i = 7; i >= 0; --i) len = len << 8 | d[off + 8 + i];
    if (t == tag) {
      if (out_len) *out_len = len;
      return (long)(off + 16);
    }
    off += 16 + (size_t)len;
    off += (8 - off % 8) % 8;
  }
  return -1;
}

static uint8_t* copy(const uint8_t* d, size_t n) {
  uint8_t* c = malloc(n ? n : 1);
  if (!c) abort();
  memcpy(c, d, n);
  return c;
}

/* ---- keys -------------------------------------------------------------- */

static void test_keygen(void) {
  struct stat sb;
  CHECK(stat(path_a_key, &sb) == 0 && (sb.st_mode & 0777) == 0600);
  CHECK(stat(path_a_pub, &sb) == 0 && (sb.st_mode & 0777) == 0644);
  kiln_sign_public_key_t pa;
  CHECK_OK(kiln_sign_public_key_read(path_a_pub, &pa));
  CHECK(memcmp(pa.key, key_a.pub.key, 32) == 0 && memcmp(pa.id, key_a.pub.id, 32) == 0);
  CHECK(strcmp(id_a, id_b) != 0);
  char base[300];
  in_dir(base, sizeof base, "a");
  CHECK_ERR(kiln_sign_keygen(base, NULL), KILN_INVALID_ARGUMENT, "does not overwrite");
  /* Nowhere to write: an error naming the path, and no half pair left. */
  in_dir(base, sizeof base, "no/such/dir/k");
  CHECK_ERR(kiln_sign_keygen(base, NULL), -1, "no/such/dir/k.key");
  char k[300];
  in_dir(k, sizeof k, "no/such/dir/k.key");
  CHECK(!exists(k));
}

static void test_bad_key_files(void) {
  kiln_sign_public_key_t pk;
  kiln_sign_secret_key_t sk;
  char p[300];
  const char* hex64 = "00112233445566778899aabbccddeeff00112233445566778899aabbccddeeff";
  struct {
    const char* name;
    const char* text;
    const char* needle;
  } cases[] = {
      {"empty.pub", "", "not a kiln public key file"},
      {"header.pub", "ssh-ed25519 AAAAC3NzaC1lZDI1NTE5\n", "not a kiln public key file"},
      {"v2.pub", "kiln-ed25519-public-key v2\n", "key file version '2'"},
      {"nokey.pub", "kiln-ed25519-public-key v1", "no key after the first line"},
      {"short.pub", "kiln-ed25519-public-key v1\n00112233\n", "holds 8 hex digits, a key is 64"},
      {"long.pub", "kiln-ed25519-public-key v1\n00112233445566778899aabbccddeeff00112233445566778899aabbccddeeff00\n",
       "holds 66 hex digits"},
      {"nonhex.pub", "kiln-ed25519-public-key v1\n0011223344556677889zaabbccddeeff00112233445566778899aabbccddeeff\n",
       "is not a hex digit"},
      {"trailing.pub",
       "kiln-ed25519-public-key v1\n00112233445566778899aabbccddeeff00112233445566778899aabbccddeeff\nmore\n",
       "unexpected text after the key line"},
      {"secret.pub", "kiln-ed25519-secret-key v1\n00112233445566778899aabbccddeeff00112233445566778899aabbccddeeff\n",
       "is a secret key; a verify key is the public key"},
  };
  for (size_t i = 0; i < sizeof cases / sizeof cases[0]; ++i) {
    in_dir(p, sizeof p, cases[i].name);
    CHECK(write_text(p, cases[i].text));
    CHECK_ERR(kiln_sign_public_key_read(p, &pk), KILN_PARSE_ERROR, cases[i].needle);
    /* The same through the loader: the message names module and key file. */
    kiln_module_t* m = NULL;
    kiln_status_t s = load_with(signed_bytes, signed_len, p, &m);
    CHECK(s && strstr(kiln_status_message(s), "m.kiln: verify key: ") && strstr(kiln_status_message(s), p));
    kiln_status_free(s);
    CHECK(!m);
  }
  /* A good key without its final newline is accepted. */
  char text[200];
  snprintf(text, sizeof text, "kiln-ed25519-public-key v1\n%s", hex64);
  in_dir(p, sizeof p, "nonl.pub");
  CHECK(write_text(p, text));
  CHECK_OK(kiln_sign_public_key_read(p, &pk));
  /* CRLF line ends are accepted too. */
  snprintf(text, sizeof text, "kiln-ed25519-public-key v1\r\n%s\r\n", hex64);
  in_dir(p, sizeof p, "crlf.pub");
  CHECK(write_text(p, text));
  CHECK_OK(kiln_sign_public_key_read(p, &pk));
  /* Missing, a directory, a FIFO (must not block), too large. */
  in_dir(p, sizeof p, "missing.pub");
  CHECK_ERR(kiln_sign_public_key_read(p, &pk), KILN_NOT_FOUND, "missing.pub: cannot open key file");
  CHECK_ERR(kiln_sign_public_key_read(dir, &pk), KILN_IO_ERROR, "is a directory, not a key file");
  in_dir(p, sizeof p, "fifo.pub");
  CHECK(mkfifo(p, 0600) == 0);
  CHECK_ERR(kiln_sign_public_key_read(p, &pk), KILN_IO_ERROR, "not a regular file");
  in_dir(p, sizeof p, "big.pub");
  char big[5000];
  memset(big, 'a', sizeof big);
  CHECK(write_file(p, big, sizeof big));
  CHECK_ERR(kiln_sign_public_key_read(p, &pk), KILN_IO_ERROR, "too large to be a kiln key file");
  CHECK_ERR(kiln_sign_public_key_read("", &pk), KILN_INVALID_ARGUMENT, "empty");
  /* Secret keys: a public one given instead, and one others can read. */
  CHECK_ERR(kiln_sign_secret_key_read(path_a_pub, &sk), KILN_PARSE_ERROR, "is a public key; signing needs the secret key");
  in_dir(p, sizeof p, "open.key");
  snprintf(text, sizeof text, "kiln-ed25519-secret-key v1\n%s\n", hex64);
  CHECK(write_text(p, text));
  CHECK(chmod(p, 0644) == 0);
  CHECK_ERR(kiln_sign_secret_key_read(p, &sk), KILN_PERMISSION_DENIED, "mode 0644");
  CHECK(chmod(p, 0600) == 0);
  CHECK_OK(kiln_sign_secret_key_read(p, &sk));
  kiln_sign_secret_key_wipe(&sk);
}

/* ---- round trip ---------------------------------------------------------- */

static void run_module(kiln_module_t* m, kiln_array_t* out /* [2] */) {
  kiln_device_t* d = NULL;
  kiln_session_t* s = NULL;
  kiln_session_options_t so;
  kiln_session_options_default(&so);
  char cache[300];
  in_dir(cache, sizeof cache, "cache");
  so.cache_dir = cache;
  rt_rng = 0x1234;
  kiln_array_t x = rt_random(4, rt_x_dims);
  if (CHECK_OK(kiln_device_open("cpu", NULL, kiln_allocator_system(), &d)) &&
      CHECK_OK(kiln_session_create(m, d, &so, &s)))
    CHECK_OK(kiln_session_run(s, &x, out));
  kiln_session_destroy(s);
  kiln_device_release(d);
  kiln_array_free(kiln_allocator_system(), &x);
}

static void test_roundtrip_cpu(void) {
  char sp[300];
  in_dir(sp, sizeof sp, "signed.kiln");
  CHECK(write_file(sp, signed_bytes, signed_len));
  kiln_module_load_options_t o = {.verify_key_file = path_a_pub};
  kiln_module_t* ms = NULL;
  kiln_module_t* mu = NULL;
  if (!CHECK_OK(kiln_module_load_file_opts(sp, &o, kiln_allocator_system(), &ms))) return;
  kiln_module_info_t mi;
  kiln_module_info(ms, &mi);
  CHECK(mi.signature_verified && !strcmp(mi.signer_key_id, id_a));
  CHECK_OK(kiln_module_load_memory(unsigned_bytes, unsigned_len, "u.kiln", kiln_allocator_system(), &mu));
  kiln_array_t ys[2] = {{0}}, yu[2] = {{0}};
  run_module(ms, ys);
  run_module(mu, yu);
  CHECK(rt_same_bytes(&ys[0], &yu[0]) && rt_same_bytes(&ys[1], &yu[1]));
  rt_free_arrays(ys, 2);
  rt_free_arrays(yu, 2);
  kiln_module_info(mu, &mi);
  CHECK(!mi.signature_verified && !strcmp(mi.signer_key_id, ""));
  kiln_module_release(ms);
  kiln_module_release(mu);

  /* Without a key a signed module loads as before; its signature is only
   * reported, not vouched for. */
  ms = NULL;
  if (CHECK_OK(kiln_module_load_file(sp, kiln_allocator_system(), &ms))) {
    kiln_module_info(ms, &mi);
    CHECK(!mi.signature_verified && !strcmp(mi.signer_key_id, id_a));
  }
  kiln_module_release(ms);

  /* A reader that does not know 'SIGN' skips it (it is optional): the
   * program parsed from the signed file writes back the unsigned bytes. */
  kiln_program_t* p = NULL;
  if (CHECK_OK(kiln_module_parse(signed_bytes, signed_len, "signed", kiln_allocator_system(), &p))) {
    uint8_t* again = NULL;
    size_t n = 0;
    if (CHECK_OK(kiln_module_serialize(p, kiln_allocator_system(), &again, &n)))
      CHECK(n == unsigned_len && memcmp(again, unsigned_bytes, n) == 0);
    kiln_allocator_free(kiln_allocator_system(), again);
  }
  kiln_program_destroy(p);

  /* kiln_module_sign refuses what it must not vouch for. */
  uint8_t* out = NULL;
  size_t n = 0;
  CHECK_ERR(kiln_module_sign(signed_bytes, signed_len, "s", &key_a, kiln_allocator_system(), &out, &n),
            KILN_INVALID_ARGUMENT, "already signed");
  uint8_t* bad = copy(unsigned_bytes, unsigned_len);
  bad[unsigned_len - 9] ^= 1;
  CHECK_ERR(kiln_module_sign(bad, unsigned_len, "s", &key_a, kiln_allocator_system(), &out, &n), KILN_PARSE_ERROR,
            "checksum mismatch");
  CHECK_ERR(kiln_module_sign("hello", 5, "s", &key_a, kiln_allocator_system(), &out, &n), KILN_PARSE_ERROR,
            "not a kiln module");
  free(bad);
}

/* ---- refusals -------------------------------------------------------------- */

static void test_unsigned_and_wrong_key(void) {
  kiln_module_t* m = NULL;
  CHECK_ERR(load_with(unsigned_bytes, unsigned_len, path_a_pub, &m), KILN_PERMISSION_DENIED,
            "m.kiln: refused: the module is not signed");
  /* Wrong key: the message names the signer's key id and the expected one. */
  kiln_status_t s = load_with(signed_bytes, signed_len, path_b_pub, &m);
  CHECK(s && kiln_status_code(s) == KILN_PERMISSION_DENIED && strstr(kiln_status_message(s), id_a) &&
        strstr(kiln_status_message(s), id_b) && strstr(kiln_status_message(s), "m.kiln: refused: signed by key id"));
  kiln_status_free(s);
  /* A signature by b relabelled with a's key id: the signature check fails. */
  uint8_t* sb = NULL;
  size_t nb = 0;
  if (CHECK_OK(kiln_module_sign(unsigned_bytes, unsigned_len, "u", &key_b, kiln_allocator_system(), &sb, &nb))) {
    memcpy(sb + nb - KILN_SIGN_PAYLOAD_BYTES + KILN_SIGN_OFF_KEY_ID, key_a.pub.id, KILN_SIGN_KEY_ID_BYTES);
    kiln_module_reseal(sb, nb);
    CHECK_ERR(load_with(sb, nb, path_a_pub, &m), KILN_PERMISSION_DENIED, "does not match the module's bytes");
  }
  kiln_allocator_free(kiln_allocator_system(), sb);
  /* Not a module at all, and empty. */
  CHECK_ERR(load_with("not a module", 12, path_a_pub, &m), KILN_PARSE_ERROR, "not a kiln module");
  CHECK_ERR(load_with("", 0, path_a_pub, &m), KILN_PARSE_ERROR, "not a kiln module");
  CHECK(!m);
}

/* Every single byte of the signed file flipped, one at a time: refused
 * every time, by the signature check except for the header's magic and
 * checksum fields (the parser's own checks, still before anything is
 * built). Then the attacker's edit: a change with both checksums
 * recomputed. */
static void test_any_byte_changed(void) {
  uint8_t* b = copy(signed_bytes, signed_len);
  int refused = 0, by_signature = 0;
  for (size_t i = 0; i < signed_len; ++i) {
    b[i] ^= 0x20;
    kiln_module_t* m = NULL;
    kiln_status_t s = load_with(b, signed_len, path_a_pub, &m);
    if (!s) {
      kiln_test_fail(__FILE__, __LINE__, "byte %zu of %zu flipped: the module loaded", i, signed_len);
      kiln_module_release(m);
      break;
    }
    ++refused;
    kiln_status_code_t c = kiln_status_code(s);
    by_signature += c == KILN_PERMISSION_DENIED;
    bool checksum_field = i >= KILN_MODULE_OFF_BODY_SUM && i < KILN_MODULE_HEADER_LEN;
    bool expect_sig = i >= KILN_MODULE_MAGIC_LEN && !checksum_field &&
                      !(i >= signed_len - KILN_SIGN_PAYLOAD_BYTES && i < signed_len - KILN_SIGN_PAYLOAD_BYTES + 8);
    if (expect_sig && c != KILN_PERMISSION_DENIED) {
      kiln_test_fail(__FILE__, __LINE__, "byte %zu flipped: %s", i, kiln_status_message(s));
      kiln_status_free(s);
      break;
    }
    if (!strstr(kiln_status_message(s), "m.kiln: ")) kiln_test_fail(__FILE__, __LINE__, "unnamed: %s", kiln_status_message(s));
    kiln_status_free(s);
    b[i] ^= 0x20;
  }
  CHECK(refused == (int)signed_len);
  CHECK(by_signature > (int)signed_len - 64);
  printf("  %d bytes flipped one at a time: all refused (%d by the signature check)\n", refused, by_signature);

  /* The attacker's edit, with both checksums recomputed, in each region. */
  uint64_t wl = 0, cl = 0;
  long w = section_payload(signed_bytes, signed_len, KILN_MODULE_TAG_WGHT, &wl);
  long c = section_payload(signed_bytes, signed_len, KILN_MODULE_TAG_CODE, &cl);
  long k = section_payload(signed_bytes, signed_len, KILN_MODULE_TAG_KERN, NULL);
  CHECK(w > 0 && c > 0 && k > 0 && wl > 64 && cl > 64);
  size_t sig = signed_len - KILN_SIGN_PAYLOAD_BYTES + KILN_SIGN_OFF_SIG;
  size_t at[] = {KILN_MODULE_OFF_VERSION, (size_t)k + 12, (size_t)w + wl - 5, (size_t)c + 40, sig, sig + 63,
                 signed_len - KILN_SIGN_PAYLOAD_BYTES + KILN_SIGN_OFF_BODY_SUM};
  const char* what[] = {"header", "kernels", "constants", "code", "signature", "signature end", "recorded checksum"};
  for (size_t i = 0; i < sizeof at / sizeof at[0]; ++i) {
    b[at[i]] ^= 0x01;
    kiln_module_reseal(b, signed_len);
    kiln_module_t* m = NULL;
    kiln_status_t s = load_with(b, signed_len, path_a_pub, &m);
    CHECK_MSG(s && kiln_status_code(s) == KILN_PERMISSION_DENIED, "%s byte changed and resealed: %s", what[i],
              s ? kiln_status_message(s) : "loaded");
    kiln_status_free(s);
    kiln_module_release(m);
    memcpy(b, signed_bytes, signed_len);
  }
  free(b);
}

static void test_truncated_signature(void) {
  kiln_module_t* m = NULL;
  uint8_t* b = copy(signed_bytes, signed_len);
  for (size_t cut = 1; cut <= KILN_SIGN_SECTION_BYTES; ++cut) {
    size_t n = signed_len - cut;
    memcpy(b, signed_bytes, signed_len);
    /* As cut by a bad copy, and with the header patched to the new length. */
    CHECK_ERR(load_with(b, n, path_a_pub, &m), KILN_PERMISSION_DENIED, "m.kiln: refused: truncated");
    uint64_t v = n;
    for (int i = 0; i < 8; ++i) b[KILN_MODULE_OFF_TOTAL_LEN + i] = (uint8_t)(v >> (8 * i));
    kiln_module_reseal(b, n);
    kiln_status_t s = load_with(b, n, path_a_pub, &m);
    CHECK_MSG(s && (kiln_status_code(s) == KILN_PERMISSION_DENIED || kiln_status_code(s) == KILN_PARSE_ERROR),
              "cut %zu: %s", cut, s ? kiln_status_message(s) : "loaded");
    kiln_status_free(s);
  }
  /* The section stripped whole (the unsigned module again). */
  CHECK_ERR(load_with(signed_bytes, signed_len - KILN_SIGN_SECTION_BYTES, path_a_pub, &m), -1, "m.kiln: ");
  /* A section of the wrong version or algorithm. */
  memcpy(b, signed_bytes, signed_len);
  b[signed_len - KILN_SIGN_PAYLOAD_BYTES + KILN_SIGN_OFF_VERSION] = 2;
  CHECK_ERR(load_with(b, signed_len, path_a_pub, &m), KILN_PARSE_ERROR, "signature version 2");
  memcpy(b, signed_bytes, signed_len);
  b[signed_len - KILN_SIGN_PAYLOAD_BYTES + KILN_SIGN_OFF_ALG] = 7;
  CHECK_ERR(load_with(b, signed_len, path_a_pub, &m), KILN_PARSE_ERROR, "signature algorithm 7");
  CHECK(!m);
  free(b);
}

/* ---- a module is code ------------------------------------------------------ */

/* The model's CPU program with a constructor appended to its C: it creates
 * |marker| when the compiled code is loaded. */
static kiln_program_t* evil_program(const char* marker) {
  kiln_graph_t* g = rt_model();
  kiln_program_t* p = g ? rt_program(g, true) : NULL;
  kiln_graph_destroy(g);
  if (!p) return NULL;
  char evil[600];
  snprintf(evil, sizeof evil,
           "\n#include <stdio.h>\n"
           "__attribute__((constructor)) static void kiln_test_evil(void) {\n"
           "  FILE* f = fopen(\"%s\", \"w\");\n  if (f) fclose(f);\n}\n",
           marker);
  kiln_program_code_t* c = &p->code;
  size_t el = strlen(evil);
  /* The epilogue is the last part and ends the text: it takes the addition. */
  uint64_t* last = &c->parts[2 * (c->n_parts - 1)];
  CHECK(c->n_parts >= 2 && last[0] + last[1] == c->text_len);
  void* tm = NULL;
  if (!CHECK_OK(kiln_allocator_malloc(p->allocator, (size_t)c->text_len + el + 1, "text", &tm))) abort();
  char* t = tm;
  memcpy(t, c->text, (size_t)c->text_len);
  memcpy(t + c->text_len, evil, el + 1);
  kiln_allocator_free(p->allocator, c->text);
  c->text = t;
  c->text_len += el;
  last[1] += el;
  return p;
}

static int count_entries(const char* path) {
  char cmd[400];
  snprintf(cmd, sizeof cmd, "find '%s' -type f 2>/dev/null | wc -l", path);
  FILE* f = popen(cmd, "r");
  int n = -1;
  if (f) {
    if (fscanf(f, "%d", &n) != 1) n = -1;
    pclose(f);
  }
  return n;
}

static void test_constructor_refused_before_build(void) {
  char marker[300], cache[300];
  in_dir(marker, sizeof marker, "constructor-ran");
  in_dir(cache, sizeof cache, "evil-cache");
  kiln_program_t* p = evil_program(marker);
  if (!p) return;
  uint8_t* u = NULL;
  size_t un = 0;
  if (!CHECK_OK(kiln_module_serialize(p, kiln_allocator_system(), &u, &un))) {
    kiln_program_destroy(p);
    return;
  }
  kiln_program_destroy(p);
  uint8_t* sb = NULL; /* signed by the attacker's own key b */
  size_t sn = 0;
  CHECK_OK(kiln_module_sign(u, un, "evil", &key_b, kiln_allocator_system(), &sb, &sn));

  kiln_module_load_options_t o = {.verify_key_file = path_a_pub};
  kiln_device_t* d = NULL;
  kiln_session_options_t so;
  kiln_session_options_default(&so);
  so.cache_dir = cache;
  CHECK_OK(kiln_device_open("cpu", NULL, kiln_allocator_system(), &d));
  /* Unsigned, signed by another key, and a's valid signature section moved
   * onto the evil bytes: each refused; nothing compiled, nothing ran. */
  uint8_t* moved = malloc(un + KILN_SIGN_SECTION_BYTES);
  if (!moved) abort();
  memcpy(moved, u, un);
  memcpy(moved + un, signed_bytes + signed_len - KILN_SIGN_SECTION_BYTES, KILN_SIGN_SECTION_BYTES);
  uint64_t total = un + KILN_SIGN_SECTION_BYTES;
  for (int i = 0; i < 8; ++i) moved[KILN_MODULE_OFF_TOTAL_LEN + i] = (uint8_t)(total >> (8 * i));
  moved[KILN_MODULE_OFF_SECTIONS]++;
  kiln_module_reseal(moved, total);
  const struct {
    const uint8_t* b;
    size_t n;
    const char* why;
  } tries[] = {{u, un, "not signed"}, {sb, sn, "signed by key id"}, {moved, total, "does not match"}};
  for (int i = 0; i < 3; ++i) {
    kiln_module_t* m = NULL;
    CHECK_ERR(kiln_module_load_memory_opts(tries[i].b, tries[i].n, "evil.kiln", &o, kiln_allocator_system(), &m),
              KILN_PERMISSION_DENIED, tries[i].why);
    if (m) {
      kiln_session_t* s = NULL;
      kiln_status_free(kiln_session_create(m, d, &so, &s));
      kiln_session_destroy(s);
      kiln_module_release(m);
    }
  }
  CHECK_MSG(!exists(marker), "the constructor ran under a verify key");
  CHECK_MSG(count_entries(cache) <= 0, "code was compiled for a refused module");

  /* Control: without a key the same unsigned module builds and its
   * constructor runs -- so the checks above can fail. */
  kiln_module_t* m = NULL;
  if (CHECK_OK(kiln_module_load_memory(u, un, "evil.kiln", kiln_allocator_system(), &m))) {
    kiln_session_t* s = NULL;
    CHECK_OK(kiln_session_create(m, d, &so, &s));
    kiln_session_destroy(s);
  }
  kiln_module_release(m);
  CHECK_MSG(exists(marker), "control: the constructor did not run without a key");
  kiln_device_release(d);
  free(moved);
  kiln_allocator_free(kiln_allocator_system(), sb);
  kiln_allocator_free(kiln_allocator_system(), u);
}

/* ---- setup ------------------------------------------------------------------ */

static bool setup(void) {
  snprintf(dir, sizeof dir, "sign_test_XXXXXX");
  if (!mkdtemp(dir)) return false;
  char base[300];
  in_dir(base, sizeof base, "a");
  if (!CHECK_OK(kiln_sign_keygen(base, NULL))) return false;
  in_dir(base, sizeof base, "b");
  if (!CHECK_OK(kiln_sign_keygen(base, NULL))) return false;
  in_dir(path_a_key, sizeof path_a_key, "a.key");
  in_dir(path_a_pub, sizeof path_a_pub, "a.pub");
  in_dir(path_b_key, sizeof path_b_key, "b.key");
  in_dir(path_b_pub, sizeof path_b_pub, "b.pub");
  if (!CHECK_OK(kiln_sign_secret_key_read(path_a_key, &key_a)) || !CHECK_OK(kiln_sign_secret_key_read(path_b_key, &key_b)))
    return false;
  kiln_sign_key_id_text(key_a.pub.id, id_a);
  kiln_sign_key_id_text(key_b.pub.id, id_b);
  kiln_graph_t* g = rt_model();
  kiln_program_t* p = g ? rt_program(g, true) : NULL;
  kiln_graph_destroy(g);
  bool ok = p && CHECK_OK(kiln_module_serialize(p, kiln_allocator_system(), &unsigned_bytes, &unsigned_len)) &&
            CHECK_OK(kiln_module_sign(unsigned_bytes, unsigned_len, "m", &key_a, kiln_allocator_system(),
                                      &signed_bytes, &signed_len));
  kiln_program_destroy(p);
  return ok && signed_len == unsigned_len + KILN_SIGN_SECTION_BYTES;
}

int main(void) {
  if (!setup()) {
    fprintf(stderr, "setup failed\n");
    return 1;
  }
  RUN(test_keygen);
  RUN(test_bad_key_files);
  RUN(test_roundtrip_cpu);
  RUN(test_unsigned_and_wrong_key);
  RUN(test_any_byte_changed);
  RUN(test_truncated_signature);
  RUN(test_constructor_refused_before_build);
  kiln_sign_secret_key_wipe(&key_a);
  kiln_sign_secret_key_wipe(&key_b);
  kiln_allocator_free(kiln_allocator_system(), unsigned_bytes);
  kiln_allocator_free(kiln_allocator_system(), signed_bytes);
  char cmd[300];
  snprintf(cmd, sizeof cmd, "rm -rf '%s'", dir);
  if (kiln_test_failures == 0 && system(cmd) != 0) fprintf(stderr, "could not remove %s\n", dir);
  return kiln_test_finish();
}
