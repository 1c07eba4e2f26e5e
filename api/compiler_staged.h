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

/* The first host node of |m|'s graph, for messages ("node 'nz' (NonZero)"). */
void kiln_api_staged_first(const kiln_api_staged_t* m, char* buf, size_t n);

/* The staged model the compiler's last compile left (NULL: none); in
 * api/compiler_api.c, which owns the compiler's struct. */
kiln_api_staged_t* kiln_api_compiler_staged(const kiln_compiler_t* c);

#endif
