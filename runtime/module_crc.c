/* CRC-64/XZ of module bytes (module_file.h's kiln_module_crc64).
 *
 * Every load checks the checksum over the whole file, weights included, so
 * for a mapped module it is the one pass over its bytes a load makes: its
 * speed is the load's. Two ways, the same result:
 *   - slice-by-8 tables, anywhere: eight lookups per 8 bytes, ~1-2 GB/s;
 *   - on x86-64 CPUs with PCLMULQDQ, carry-less multiplication folding
 *     (Intel's "Fast CRC Computation for Generic Polynomials Using
 *     PCLMULQDQ"): four 128-bit accumulators fold 64 bytes per step,
 *     several times the tables' speed; the last 16 bytes of the fold and
 *     the tail go through the tables.
 * test_module_file compares the two on every length and alignment.
 *
 * The folding in the reflected domain: a 64-bit reflected value r stands
 * for R(x) = sum r_i x^(63-i) (bit 0 is the stream's first bit), a 128-bit
 * one for sum r_i x^(127-i), and a carry-less product of two reflected
 * 64-bit values is x * A(x) * B(x) as a 128-bit reflected value. An
 * accumulator X = H x^64 + L (H its first 8 bytes) moved forward over N
 * more bits is H x^(N+64) + L x^N, congruent mod P to
 * clmul(H, x^(N+63) mod P) + clmul(L, x^(N-1) mod P) -- 128 bits again.
 * The raw CRC of data whose remainder is X is then X x^64 mod P, which the
 * table loop computes from a zero state over X's 16 bytes. The constants
 * are computed once (x^n mod P by shifting), not copied from anywhere.
 */
#include <pthread.h>
#include <stdbool.h>
#include <stdint.h>
#include <string.h>

#include "runtime/module_file.h"

#if defined(__x86_64__) && (defined(__GNUC__) || defined(__clang__))
#define KILN_CRC_CLMUL 1
#include <immintrin.h>
#endif

#define POLY_REFLECTED 0xC96C5795D7870F42ull /* ECMA-182 */
#define POLY_NORMAL 0x42F0E1EBA9EA3693ull    /* without the x^64 term */

static uint64_t crc_table[8][256];
static pthread_once_t crc_once = PTHREAD_ONCE_INIT;

#ifdef KILN_CRC_CLMUL
static bool have_clmul;
static uint64_t fold64[2], fold16[2]; /* over 512 and 128 bits: {first qword, second} */
#endif

static uint64_t reflect64(uint64_t v) {
  uint64_t r = 0;
  for (int i = 0; i < 64; ++i) r |= ((v >> i) & 1) << (63 - i);
  return r;
}

/* x^n mod P, reflected. */
static uint64_t xpow_mod(unsigned n) {
  uint64_t r = 1; /* x^0, normal bit order */
  for (unsigned i = 0; i < n; ++i) r = (r << 1) ^ ((r >> 63) ? POLY_NORMAL : 0);
  return reflect64(r);
}

static void crc_init(void) {
  for (uint32_t i = 0; i < 256; ++i) {
    uint64_t c = i;
    for (int k = 0; k < 8; ++k) c = (c & 1) ? (c >> 1) ^ POLY_REFLECTED : c >> 1;
    crc_table[0][i] = c;
  }
  for (uint32_t i = 0; i < 256; ++i)
    for (int t = 1; t < 8; ++t)
      crc_table[t][i] = (crc_table[t - 1][i] >> 8) ^ crc_table[0][crc_table[t - 1][i] & 0xff];
#ifdef KILN_CRC_CLMUL
  __builtin_cpu_init();
  have_clmul = __builtin_cpu_supports("pclmul") && __builtin_cpu_supports("sse4.1");
  fold64[0] = xpow_mod(512 + 63);
  fold64[1] = xpow_mod(512 - 1);
  fold16[0] = xpow_mod(128 + 63);
  fold16[1] = xpow_mod(128 - 1);
#endif
}

static uint64_t load_le64(const uint8_t* p) {
#if defined(__BYTE_ORDER__) && __BYTE_ORDER__ == __ORDER_LITTLE_ENDIAN__
  uint64_t v;
  memcpy(&v, p, 8); /* one unaligned load: this is the CRC's inner loop */
  return v;
#else
  uint64_t v = 0;
  for (int i = 7; i >= 0; --i) v = (v << 8) | p[i];
  return v;
#endif
}

/* The tables' loop over the raw (not inverted) state. */
static uint64_t crc_tables(uint64_t crc, const uint8_t* p, size_t n) {
  while (n >= 8) {
    crc ^= load_le64(p);
    crc = crc_table[7][crc & 0xff] ^ crc_table[6][(crc >> 8) & 0xff] ^
          crc_table[5][(crc >> 16) & 0xff] ^ crc_table[4][(crc >> 24) & 0xff] ^
          crc_table[3][(crc >> 32) & 0xff] ^ crc_table[2][(crc >> 40) & 0xff] ^
          crc_table[1][(crc >> 48) & 0xff] ^ crc_table[0][crc >> 56];
    p += 8;
    n -= 8;
  }
  while (n--) crc = crc_table[0][(crc ^ *p++) & 0xff] ^ (crc >> 8);
  return crc;
}

#ifdef KILN_CRC_CLMUL
__attribute__((target("pclmul,sse4.1"))) static inline __m128i fold(__m128i x, __m128i k) {
  return _mm_xor_si128(_mm_clmulepi64_si128(x, k, 0x00), _mm_clmulepi64_si128(x, k, 0x11));
}

/* The raw state after |n| bytes (n >= 64, a multiple of 16). */
__attribute__((target("pclmul,sse4.1"))) static uint64_t crc_clmul(uint64_t crc, const uint8_t* p, size_t n) {
  const __m128i k64 = _mm_set_epi64x((long long)fold64[1], (long long)fold64[0]);
  const __m128i k16 = _mm_set_epi64x((long long)fold16[1], (long long)fold16[0]);
  __m128i x0 = _mm_loadu_si128((const __m128i*)p), x1 = _mm_loadu_si128((const __m128i*)(p + 16));
  __m128i x2 = _mm_loadu_si128((const __m128i*)(p + 32)), x3 = _mm_loadu_si128((const __m128i*)(p + 48));
  x0 = _mm_xor_si128(x0, _mm_set_epi64x(0, (long long)crc)); /* the state joins the first qword */
  p += 64;
  n -= 64;
  for (; n >= 64; p += 64, n -= 64) {
    x0 = _mm_xor_si128(fold(x0, k64), _mm_loadu_si128((const __m128i*)p));
    x1 = _mm_xor_si128(fold(x1, k64), _mm_loadu_si128((const __m128i*)(p + 16)));
    x2 = _mm_xor_si128(fold(x2, k64), _mm_loadu_si128((const __m128i*)(p + 32)));
    x3 = _mm_xor_si128(fold(x3, k64), _mm_loadu_si128((const __m128i*)(p + 48)));
  }
  __m128i x = _mm_xor_si128(fold(x0, k16), x1);
  x = _mm_xor_si128(fold(x, k16), x2);
  x = _mm_xor_si128(fold(x, k16), x3);
  for (; n >= 16; p += 16, n -= 16) x = _mm_xor_si128(fold(x, k16), _mm_loadu_si128((const __m128i*)p));
  uint8_t rest[16];
  _mm_storeu_si128((__m128i*)rest, x);
  return crc_tables(0, rest, 16);
}
#endif

uint64_t kiln_module_crc64(uint64_t crc, const void* data, size_t n) {
  pthread_once(&crc_once, crc_init);
  const uint8_t* p = data;
  crc = ~crc;
#ifdef KILN_CRC_CLMUL
  if (have_clmul && n >= 64) {
    size_t body = n & ~(size_t)15;
    crc = crc_clmul(crc, p, body);
    p += body;
    n -= body;
  }
#endif
  return ~crc_tables(crc, p, n);
}

uint64_t kiln_module_crc64_tables(uint64_t crc, const void* data, size_t n) {
  pthread_once(&crc_once, crc_init);
  return ~crc_tables(~crc, data, n);
}
