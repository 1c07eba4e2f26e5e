/* kiln module: the private body of kiln_module_t (include/kiln/runtime.h).
 *
 * A module is a validated kiln_program_t plus a reference count. It is
 * immutable after creation, so any number of sessions on any threads may
 * share it; only |refs| changes (atomically).
 */
#ifndef KILN_RUNTIME_MODULE_IMPL_H_
#define KILN_RUNTIME_MODULE_IMPL_H_

#include <stdatomic.h>
#include <stddef.h>
#include <stdint.h>

#include "kiln/runtime.h"
#include "runtime/module_sign.h"
#include "runtime/program.h"

#ifdef __cplusplus
extern "C" {
#endif

struct kiln_module_s {
  atomic_int refs;
  kiln_allocator_t allocator; /* the module struct's; the program has its own copy */
  kiln_program_t* program;    /* owned, validated */
  uint32_t format_version;    /* of the file it came from; 0 when wrapped from memory */
  size_t file_bytes;          /* size of that file; 0 when wrapped */
  /* Signature (runtime/module_sign.h): the signer's key id as text, "" when
   * unsigned; verified when the load had a verify key. */
  char signer_key_id[KILN_SIGN_KEY_ID_TEXT + 1];
  bool signature_verified;
  /* The file mapped read-only (kiln_module_load_file), which the program's
   * weights point into (weights_borrowed); unmapped after the program is
   * destroyed. NULL when the module was read, copied or wrapped. */
  void* map;
  size_t map_len;
  /* A shape bucket's or a stage's view (kiln_module_child): the module whose
   * program owns |program| (retained); NULL for a module of its own. */
  kiln_module_t* parent;
};

/* The program inside |m| (borrowed; valid while |m| lives). NULL for NULL. */
const kiln_program_t* kiln_module_program(const kiln_module_t* m);

/* Makes a module (one reference) of an in-memory program, e.g. one the
 * compiler just built, so it can run without a file. Takes ownership of |p|
 * in every case: on failure (kiln_program_validate's error, OUT_OF_MEMORY)
 * |p| has been destroyed. The module uses |p|'s allocator. */
kiln_status_t kiln_module_wrap(kiln_program_t* p, kiln_module_t** out_module);

/* A module (one reference) for shape bucket |k| of |m|'s program, which
 * it borrows: it retains |m| until released. For the bucket's session. */
kiln_status_t kiln_module_bucket_module(kiln_module_t* m, int32_t k, kiln_module_t** out);
/* The same for any program |b| that |m|'s program owns (a staged module's
 * stage). */
kiln_status_t kiln_module_child(kiln_module_t* m, const kiln_program_t* b, kiln_module_t** out);

#ifdef __cplusplus
}
#endif
#endif /* KILN_RUNTIME_MODULE_IMPL_H_ */
