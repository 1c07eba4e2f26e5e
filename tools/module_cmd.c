/* `kiln keygen` and `kiln info MODULE.kiln` (tools/module_cmd.h). */
#include "tools/module_cmd.h"

#include <stdio.h>
#include <string.h>

#include "compiler/pipeline_seq.h"
#include "kiln/runtime.h"
#include "runtime/module_impl.h"
#include "runtime/program_staged.h"
#include "runtime/module_sign.h"
#include "tools/runner.h"

static const char* keygen_help =
    "usage: kiln keygen -o KEYBASE\n"
    "\n"
    "Makes an Ed25519 key pair for signing modules (docs/TRUST.md) and writes\n"
    "  KEYBASE.key  the secret key (mode 0600): `kiln compile --sign KEYBASE.key`\n"
    "  KEYBASE.pub  the public key: `kiln run --verify-key KEYBASE.pub`,\n"
    "               `kiln-rt-run --verify-key KEYBASE.pub`\n"
    "Both are two lines of text: 'kiln-ed25519-{secret,public}-key v1' and 64 hex\n"
    "digits. Existing files are never overwritten.\n";

int kiln_cmd_keygen(int argc, char** argv) {
  const char* base = NULL;
  for (int i = 0; i < argc; ++i) {
    if (!strcmp(argv[i], "--help") || !strcmp(argv[i], "-h")) {
      fputs(keygen_help, stdout);
      return 0;
    } else if (!strcmp(argv[i], "-o") && i + 1 < argc) {
      base = argv[++i];
    } else {
      fprintf(stderr, "kiln keygen: unexpected argument '%s'\nTry 'kiln keygen --help'.\n", argv[i]);
      return 2;
    }
  }
  if (!base || !base[0]) {
    fprintf(stderr, "kiln keygen: no -o KEYBASE given\nTry 'kiln keygen --help'.\n");
    return 2;
  }
  kiln_sign_public_key_t pub;
  kiln_status_t s = kiln_sign_keygen(base, &pub);
  if (s) return kiln_cli_fail(s);
  char id[KILN_SIGN_KEY_ID_TEXT + 1];
  kiln_sign_key_id_text(pub.id, id);
  printf("wrote %s.key (secret, mode 0600) and %s.pub (public); key id %s\n", base, base, id);
  return 0;
}

/* A staged module's segments: the compiled stages and the host nodes, with
 * the values each reads and makes (runtime/program_staged.h). */
static void print_ids(const int32_t* ids, int32_t n) {
  for (int32_t k = 0; k < n; ++k) printf(k ? ",%d" : "%d", (int)ids[k]);
}

static void print_staged(const kiln_program_t* p) {
  const kiln_program_staged_t* t = p->staged;
  int32_t stages = 0;
  for (int32_t i = 0; i < t->n_segments; ++i) stages += t->segments[i].op == KILN_STAGED_STAGE;
  printf("staged: %d segments, %d compiled stages and %d host nodes, over %d values\n", (int)t->n_segments, (int)stages,
         (int)(t->n_segments - stages), (int)t->n_values);
  for (int32_t i = 0; i < t->n_segments; ++i) {
    const kiln_staged_segment_t* g = &t->segments[i];
    if (g->op == KILN_STAGED_STAGE)
      printf("  %d: stage '%s' (%d kernels, %.1f KB of weights): values ", (int)i, g->name, (int)g->prog->n_kernels,
             (double)g->prog->weights_len / 1e3);
    else
      printf("  %d: host node '%s' (%s): values ", (int)i, g->name, kiln_staged_op_name(g->op));
    print_ids(g->in, g->n_in);
    printf(" -> ");
    print_ids(g->out, g->n_out);
    printf("\n");
  }
}

int kiln_cmd_module_info(const char* path, const char* verify_key) {
  kiln_module_load_options_t lo = {.verify_key_file = verify_key};
  kiln_module_t* m = NULL;
  kiln_status_t s = kiln_module_load_file_opts(path, &lo, kiln_allocator_system(), &m);
  if (s) return kiln_cli_fail(s);
  kiln_module_info_t mi;
  kiln_module_info(m, &mi);
  printf("module: %s  (format version %u, model '%s')\n", path, mi.format_version, mi.model_name);
  printf("target: %s, precision %s\n", mi.target, mi.precision);
  printf("kernels: %d, buffers: %d, weights: %llu bytes, code: %llu bytes\n", mi.n_kernels, mi.n_buffers,
         (unsigned long long)mi.weights_bytes, (unsigned long long)mi.code_bytes);
  /* CPU machine code compiled ahead of time (`--cpu-target`): where the
   * module runs without a C compiler. */
  const kiln_program_t* p = kiln_module_program(m);
  if (p && p->code.n_native > 0) {
    printf("machine code:");
    for (int32_t i = 0; i < p->code.n_native; ++i)
      printf("%s %s (%.1f KB)", i ? "," : "", p->code.native[i].isa, (double)p->code.native[i].len / 1e3);
    printf("; the C source is the fallback\n");
  }
  /* Device program binaries (`kiln compile -t opencl -o`): where the
   * module loads without building. */
  for (int32_t i = 0; p && i < p->code.n_devbin; ++i) {
    const kiln_program_devbin_t* b = &p->code.devbin[i];
    printf("program binary: %s (%s, driver %s, kiln %s, %.1f KB); the source is the fallback\n", b->device,
           b->vendor, b->driver, b->kiln, (double)b->len / 1e3);
  }
  /* A dynamic dim: dim 0 of the inputs and outputs below is its value. */
  for (int32_t i = 0; i < kiln_module_dim_count(m); ++i) {
    const char* dn;
    int64_t lo_v, hi_v;
    int32_t ax = -1, in = -1;
    for (int32_t k = 0; k < mi.n_inputs && ax < 0; ++k)
      if ((ax = kiln_module_dim_axis(m, false, k)) >= 0) in = k;
    if (kiln_module_dim(m, i, &dn, &lo_v, &hi_v)) continue;
    char mem[300];
    if (ax > 0) {
      printf("dynamic dim '%s': %lld..%lld (inside the shapes: input '%s' dim %d; shapes below are the top of the "
             "range's)\n", dn, (long long)lo_v, (long long)hi_v, kiln_module_input_name(m, in), (int)ax);
      /* the planner at both ends (a module without sizes per length: the top's at both) */
      kiln_status_t ms = kiln_seq_memory_text(p, 64, mem, sizeof mem);
      if (!ms) printf("memory (cpu, per slot): %s%s\n", mem, p->dim_bytes ? "" : "; no sizes per length (section DYNM)");
      kiln_status_free(ms);
    }
    else
      printf("dynamic dim '%s': %lld..%lld (dim 0 of every input and output; shapes below are one sample's)\n", dn,
             (long long)lo_v, (long long)hi_v);
  }
  /* Shape buckets: the sizes of the bucketed dim, one static program each. */
  for (int32_t k = 0; k < kiln_module_bucket_count(m); ++k) {
    const char* bn;
    int64_t v;
    const kiln_program_t* b = kiln_program_bucket(p, k);
    if (!kiln_module_bucket(m, k, &bn, &v) && b)
      printf("%s%s=%lld (%d kernels, %.1f MB of weights)%s", k ? ", " : "shape buckets: ", bn, (long long)v,
             (int)b->n_kernels, (double)b->weights_len / 1e6, k + 1 == kiln_module_bucket_count(m) ? "; shapes below are the first's\n" : "");
  }
  if (p && p->staged) print_staged(p);
  /* The tuning-cache points the template kernels were compiled with. */
  int32_t n_tuned = 0;
  for (int32_t k = 0; p && k < p->n_kernels; ++k) n_tuned += p->kernels[k].tuned != NULL;
  printf("tuned kernels: %d%s\n", (int)n_tuned, n_tuned ? "" : " (default tiles)");
  for (int32_t k = 0; p && k < p->n_kernels; ++k)
    if (p->kernels[k].tuned) printf("  %s: %s\n", p->kernels[k].name, p->kernels[k].tuned);
  /* heterogeneous execution: the kernels that run on the CPU beside the target */
  const int32_t nh = p ? kiln_program_kernels_on(p, KILN_KERNEL_ON_HOST) : 0;
  if (nh) {
    printf("heterogeneous: %d of %d kernels run on the cpu (%.1f KB of C):", (int)nh, (int)p->n_kernels,
           (double)p->host_code.text_len / 1e3);
    for (int32_t k = 0, shown = 0; k < p->n_kernels; ++k)
      if (p->kernels[k].device == KILN_KERNEL_ON_HOST && shown++ < 8)
        printf("%s %s (%s)", shown > 1 ? "," : "", p->kernels[k].node_name, p->kernels[k].op_type);
    printf("%s\n", nh > 8 ? ", ..." : "");
  }
  for (int32_t i = 0; i < mi.n_inputs + mi.n_outputs; ++i) {
    bool in = i < mi.n_inputs;
    int32_t k = in ? i : i - mi.n_inputs;
    kiln_dtype_t dt;
    kiln_shape_t sh = in ? kiln_module_input_shape(m, k, &dt) : kiln_module_output_shape(m, k, &dt);
    printf("%s %s: %s[", in ? "input" : "output", in ? kiln_module_input_name(m, k) : kiln_module_output_name(m, k),
           kiln_dtype_name(dt));
    /* a staged module's data-dependent axis: its bound */
    const kiln_program_staged_t* t = p ? p->staged : NULL;
    const uint32_t dd = t ? t->values[in ? t->model_in[k] : t->model_out[k]].datadep : 0;
    for (int32_t d = 0; d < sh.rank; ++d) printf("%s%s%lld", d ? "," : "", (dd >> d) & 1 ? "<=" : "", (long long)sh.dims[d]);
    printf("]\n");
  }
  if (!mi.signer_key_id[0])
    printf("signature: none (unsigned)\n");
  else if (mi.signature_verified)
    printf("signature: signed by key id %s, verified with %s\n", mi.signer_key_id, verify_key);
  else
    printf("signature: signed by key id %s (not verified: give --verify-key KEY.pub)\n", mi.signer_key_id);
  kiln_module_release(m);
  return 0;
}

kiln_status_t kiln_cli_module_dims(const kiln_module_t* m, const char* const* dims, int n, int64_t* out_value,
                                   int32_t* out_bucket) {
  for (int i = 0; i < n; ++i) {
    kiln_status_t s = kiln_module_bucket_parse(m, dims[i], out_bucket);
    if (s && kiln_status_code(s) == KILN_NOT_FOUND) {
      kiln_status_free(s);
      s = kiln_module_dim_parse(m, dims[i], out_value);
    }
    if (s) return s;
  }
  return NULL;
}

kiln_status_t kiln_cli_print_bucket_memory(const kiln_module_t* m, const kiln_session_t* s, const kiln_array_t* in,
                                           int32_t n_in) {
  if (kiln_module_bucket_count(m) <= 0 || n_in <= 0) return NULL;
  const bool dyn = kiln_module_dim_count(m) > 0 && in[0].shape.rank >= 1;
  kiln_session_memory_t sm;
  kiln_session_memory(s, &sm);
  if (dyn) KILN_RETURN_IF_ERROR(kiln_session_memory_at(s, in[0].shape.dims[0], &sm));
  int32_t k = -1;
  for (int32_t j = 0; j < kiln_module_bucket_count(m) && k < 0; ++j) {
    bool same = true;
    for (int32_t i = 0; i < n_in && same; ++i) {
      kiln_shape_t bs = kiln_module_bucket_input_shape(m, j, i, NULL);
      if (dyn && bs.rank >= 1 && in[i].shape.rank >= 1) bs.dims[0] = in[i].shape.dims[0];
      same = kiln_shape_equal(&bs, &in[i].shape);
    }
    if (same) k = j;
  }
  const char* bn = "";
  int64_t bv = 0;
  if (k < 0) return NULL;
  KILN_RETURN_IF_ERROR(kiln_module_bucket(m, k, &bn, &bv));
  printf("shape bucket '%s' = %lld (%d of %d): arena %llu bytes, lower bound %llu (%.3fx)\n", bn, (long long)bv,
         (int)k + 1, (int)kiln_module_bucket_count(m), (unsigned long long)sm.arena_bytes,
         (unsigned long long)sm.lower_bound_bytes,
         sm.lower_bound_bytes ? (double)sm.arena_bytes / (double)sm.lower_bound_bytes : 1.0);
  return NULL;
}
