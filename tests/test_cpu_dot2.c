/* The CPU prelude's int8 GEMM step (tensor-IR dot2_i16, kernels/cpu/prelude.h):
 * kiln_vdot2_{4,8,16} against the scalar kiln_dot2 and the portable lane
 * code, bit for bit, on random and extreme i16 pairs (-32768 * -32768 twice
 * wraps the i32 sum), and dot4_u8i8's kiln_vdot4_{4,8,16} (vpdpbusd with
 * VNNI) against kiln_dot4 and its lane code. The prelude is compiled by the CPU target's compiler
 * ($KILN_CC or cc) once per instruction set it has a path for: x86-64-v3
 * (vpmaddwd + vpaddd), with AVX-VNNI, x86-64-v4 (AVX512-BW), with
 * AVX512-VNNI (vpdpwssd), and the aarch64 cross compiler when installed.
 * Every variant must compile and use the instruction it is written for
 * (checked in its assembly); it runs where this CPU has the instruction
 * set, and the report says which ran (a CPU without VNNI checks those paths
 * by compiling them only). */
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "testing.h"

extern const char kiln_cf_c_prelude[]; /* kernels/cpu/prelude.h */

static const char* k_main =
    "#include <stdio.h>\n"
    "int main(void) {\n"
    "  unsigned r = 12345u; int bad = 0;\n"
    "  for (int it = 0; it < 20000; ++it) {\n"
    "    kiln_vi16 acc, a, b; int32_t ref[16];\n"
    "    for (int l = 0; l < 16; ++l) {\n"
    "      r = r * 1103515245u + 12345u; acc[l] = (int32_t)r;\n"
    "      r = r * 1103515245u + 12345u; a[l] = (int32_t)r;\n"
    "      r = r * 1103515245u + 12345u; b[l] = (int32_t)r;\n"
    "      if (it % 4 == 1) a[l] = b[l] = (int32_t)0x80008000u;\n"
    "      if (it % 4 == 2) a[l] &= 0x00ff00ff, b[l] |= (int32_t)0xff80ff80u;\n"
    "      ref[l] = kiln_dot2(acc[l], a[l], b[l]);\n"
    "    }\n"
    "    kiln_vi16 v16 = kiln_vdot2_16(acc, a, b), g16 = kiln_vdot2g_16(acc, a, b);\n"
    "    kiln_vi8 v8 = kiln_vdot2_8(*(kiln_vi8*)&acc[0], *(kiln_vi8*)&a[0], *(kiln_vi8*)&b[0]);\n"
    "    kiln_vi4 v4 = kiln_vdot2_4(*(kiln_vi4*)&acc[12], *(kiln_vi4*)&a[12], *(kiln_vi4*)&b[12]);\n"
    "    for (int l = 0; l < 16; ++l) bad += (v16[l] != ref[l]) + (g16[l] != ref[l]);\n"
    "    for (int l = 0; l < 8; ++l) bad += v8[l] != ref[l];\n"
    "    for (int l = 0; l < 4; ++l) bad += v4[l] != ref[12 + l];\n"
    "    /* dot4_u8i8 (vpdpbusd with VNNI) on the same bits */\n"
    "    kiln_vi16 d16 = kiln_vdot4_16(acc, a, b), e16 = kiln_vdot4g_16(acc, a, b);\n"
    "    kiln_vi8 d8 = kiln_vdot4_8(*(kiln_vi8*)&acc[0], *(kiln_vi8*)&a[0], *(kiln_vi8*)&b[0]);\n"
    "    kiln_vi4 d4 = kiln_vdot4_4(*(kiln_vi4*)&acc[12], *(kiln_vi4*)&a[12], *(kiln_vi4*)&b[12]);\n"
    "    for (int l = 0; l < 16; ++l) {\n"
    "      const int32_t r4 = kiln_dot4(acc[l], a[l], b[l]);\n"
    "      bad += (d16[l] != r4) + (e16[l] != r4) + (l < 8 && d8[l] != r4) + (l >= 12 && d4[l - 12] != r4);\n"
    "    }\n"
    "  }\n"
    "  /* four 255 * -128: -130560, no 16-bit saturation */\n"
    "  if (kiln_dot4(0, (int32_t)0xffffffffu, (int32_t)0x80808080u) != -130560) ++bad;\n"
    "  /* the pair -32768*-32768 twice is 2^31: wraps to INT32_MIN */\n"
    "  if (kiln_dot2(0, (int32_t)0x80008000u, (int32_t)0x80008000u) != INT32_MIN) ++bad;\n"
    "  if (kiln_dot2(5, 0x0002fffd, 0x00070003) != 5 + (-3 * 3) + 2 * 7) ++bad;\n"
    "  printf(\"mismatches %d\\n\", bad);\n"
    "  return bad != 0;\n"
    "}\n";

typedef struct isa_s {
  const char* name;
  const char* flags;
  const char* cpu[3];   /* __builtin_cpu_supports names needed to run it */
  const char* insn;     /* an instruction its assembly must contain */
  bool x86;
} isa_t;

static char g_dir[256];

static bool write_src(const char* path) {
  FILE* f = fopen(path, "w");
  if (!f) return false;
  bool ok = fputs(kiln_cf_c_prelude, f) >= 0 && fputs(k_main, f) >= 0;
  return fclose(f) == 0 && ok;
}

static bool has_cpu(const isa_t* i) {
#if defined(__x86_64__) && defined(__GNUC__)
  __builtin_cpu_init();
  for (int k = 0; k < 3 && i->cpu[k]; ++k) {
    /* __builtin_cpu_supports needs literal names */
    const char* n = i->cpu[k];
    bool s = strcmp(n, "avx2") == 0         ? __builtin_cpu_supports("avx2")
             : strcmp(n, "avx512bw") == 0   ? __builtin_cpu_supports("avx512bw")
             : strcmp(n, "avx512vl") == 0   ? __builtin_cpu_supports("avx512vl")
             : strcmp(n, "avx512vnni") == 0 ? __builtin_cpu_supports("avx512vnni")
#if __GNUC__ >= 11
             : strcmp(n, "avxvnni") == 0 ? __builtin_cpu_supports("avxvnni")
#endif
                                            : false;
    if (!s) return false;
  }
  return true;
#else
  (void)i;
  return false;
#endif
}

static bool file_has(const char* path, const char* needle) {
  FILE* f = fopen(path, "r");
  if (!f) return false;
  char line[512];
  bool found = false;
  while (!found && fgets(line, sizeof line, f)) found = strstr(line, needle) != NULL;
  fclose(f);
  return found;
}

static void test_isas(void) {
  const char* cc = getenv("KILN_CC");
  if (!cc || !*cc) cc = "cc";
  snprintf(g_dir, sizeof g_dir, "%s/kiln-dot2-XXXXXX", getenv("TMPDIR") ? getenv("TMPDIR") : "/tmp");
  const bool made = mkdtemp(g_dir) != NULL;
  CHECK(made);
  if (!made) return;
  char src[320];
  snprintf(src, sizeof src, "%s/dot2.c", g_dir);
  const bool wrote = write_src(src);
  CHECK(wrote);
  if (!wrote) return;
  static const isa_t isas[] = {
      {"x86-64-v3", "-march=x86-64-v3", {"avx2", NULL, NULL}, "vpmaddwd", true},
      {"x86-64-v3+avxvnni", "-march=x86-64-v3 -mavxvnni", {"avx2", "avxvnni", NULL}, "vpdpwssd", true},
      {"x86-64-v4", "-march=x86-64-v4", {"avx512bw", "avx512vl", NULL}, "vpmaddwd", true},
      {"x86-64-v4+avx512vnni", "-march=x86-64-v4 -mavx512vnni", {"avx512bw", "avx512vl", "avx512vnni"}, "vpdpwssd",
       true},
      {"native", "-march=native", {NULL, NULL, NULL}, NULL, false},
  };
  int ran = 0;
  for (size_t k = 0; k < sizeof isas / sizeof isas[0]; ++k) {
    const isa_t* i = &isas[k];
#if !defined(__x86_64__)
    if (i->x86) continue;
#endif
    char cmd[2048], exe[320], as[320];
    snprintf(exe, sizeof exe, "%s/dot2_%zu", g_dir, k);
    snprintf(as, sizeof as, "%s/dot2_%zu.s", g_dir, k);
    snprintf(cmd, sizeof cmd, "%s -O2 -w -Wno-psabi %s -o %s %s && %s -O2 -w -Wno-psabi %s -S -o %s %s", cc, i->flags, exe, src, cc,
             i->flags, as, src);
    const bool built = system(cmd) == 0;
    CHECK_MSG(built, "%s: the prelude does not compile (%s)", i->name, cmd);
    if (!built) continue;
    if (i->insn) CHECK_MSG(file_has(as, i->insn), "%s: no %s in the assembly", i->name, i->insn);
    if (i->x86 && !has_cpu(i)) {
      printf("  %s: compiled and checked for %s; this CPU lacks it, not run\n", i->name, i->insn);
      continue;
    }
    snprintf(cmd, sizeof cmd, "%s > /dev/null", exe);
    CHECK_MSG(system(cmd) == 0, "%s: vector and scalar dot2 differ", i->name);
    printf("  %s: ran, bit-exact\n", i->name);
    ++ran;
    unlink(exe);
    unlink(as);
  }
  CHECK(ran >= 1);
  /* aarch64 (NEON: the portable lane code), when the cross compiler is here */
  if (system("aarch64-linux-gnu-gcc --version > /dev/null 2>&1") == 0) {
    char cmd[1024], obj[320];
    snprintf(obj, sizeof obj, "%s/dot2_a64.o", g_dir);
    snprintf(cmd, sizeof cmd, "aarch64-linux-gnu-gcc -O2 -w -Wno-psabi -c -o %s %s", obj, src);
    CHECK_MSG(system(cmd) == 0, "aarch64: the prelude does not compile");
    unlink(obj);
    printf("  aarch64: compiled\n");
  }
}

static void cleanup(void) {
  if (!g_dir[0]) return;
  char cmd[512];
  snprintf(cmd, sizeof cmd, "rm -rf '%s'", g_dir);
  if (system(cmd) != 0) fprintf(stderr, "could not remove %s\n", g_dir);
}

int main(void) {
  RUN(test_isas);
  cleanup();
  return kiln_test_finish();
}
