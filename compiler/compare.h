/* Array comparison with rtol/atol: |got - want| <= atol + rtol * |want|.
 * NaN matches NaN; +-inf must match exactly. Reports the worst element. */
#ifndef KILN_COMPILER_COMPARE_H_
#define KILN_COMPILER_COMPARE_H_

#include "kiln/array.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef struct kiln_compare_result_s {
  bool ok;
  int64_t mismatches;   /* elements outside tolerance */
  double max_abs_err;
  double max_rel_err;
  int64_t worst_index;  /* flat index of the element with the largest excess */
  double worst_got, worst_want;
  char message[512];    /* one-line summary, also on success */
} kiln_compare_result_t;

/* Shape or dtype class mismatch is reported in the result (ok = false), not
 * as an error. Integer/bool arrays compare exactly. */
void kiln_compare(const kiln_array_t* got, const kiln_array_t* want,
                  double rtol, double atol, kiln_compare_result_t* out);

#ifdef __cplusplus
}
#endif
#endif
