/* The compiler API's staged models (include/kiln/compiler.h, "staged
 * models"): the prepared graph of a model that runs in stages, shared by
 * the compiler that compiled it and the runners made from it, so that a
 * runner outlives later compiles and the compiler itself. */
#ifndef KILN_API_COMPILER_STAGED_H_
#define KILN_API_COMPILER_STAGED_H_

#include "api/driver.h"
#include "kiln/compiler.h"

typedef struct kiln_api_staged_s {
  int32_t refs;           /* atomic: runners on other threads release theirs */
  kiln_driver_graph_t dg; /* in place: dg.prec points into it */
  const kiln_target_t* target;
  const char* device;     /* the compile's "device" option (owned), NULL: the target's */
  int opt, threads;
  bool strict;
  int32_t host_nodes;
  /* Why the compile made no staged module (kiln_api_staged_module), owned;
   * NULL when it made one or was not asked to. */
  kiln_status_t module_err;
} kiln_api_staged_t;

/* A holder with one reference; its dg is filled by the caller
 * (kiln_driver_compile_or_stage). */
KILN_MUST_USE kiln_status_t kiln_api_staged_new(kiln_api_staged_t** out);
void kiln_api_staged_release(kiln_api_staged_t* m); /* NULL: no-op */

/* After the driver left a staged graph in |m|: names its host nodes in
 * |log| (kiln_staged_log) and splits it once, so that what a runner would
 * refuse (strict on a GPU target, int8/auto precision) is refused at
 * compile. */
KILN_MUST_USE kiln_status_t kiln_api_staged_check(kiln_api_staged_t* m, kiln_compile_log_t* log);

/* The staged module `kiln compile` would write for |m| (section STGS,
 * api/driver_staged.c), built from |r| as the compile's request: its bytes
 * into *out and *out_len (malloc'd). Where this kiln cannot store the model (a
 * stage reading a data-dependent value, a host node outside the runtime's
 * table, a stage that fails to build) the reason is kept in m->module_err
 * and a "staged" line says so; the model still runs with a runner. Returns
 * an error only for OUT_OF_MEMORY. */
KILN_MUST_USE kiln_status_t kiln_api_staged_module(kiln_api_staged_t* m, const kiln_driver_request_t* r,
                                                   kiln_compile_log_t* log, uint8_t** out, size_t* out_len);

/* The first host node of |m|'s graph, for messages ("node 'nz' (NonZero)"). */
void kiln_api_staged_first(const kiln_api_staged_t* m, char* buf, size_t n);

/* The staged model the compiler's last compile left (NULL: none); in
 * api/compiler_api.c, which owns the compiler's struct. */
kiln_api_staged_t* kiln_api_compiler_staged(const kiln_compiler_t* c);

#endif
