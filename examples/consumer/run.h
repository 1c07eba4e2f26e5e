/* The runtime half of the example: load module bytes, run them once on
 * the CPU on a deterministic input (x[k] = sin(0.1 k)), print each
 * output's shape and the sum of its values. kiln/runtime.h only. */
#ifndef KILN_EXAMPLE_RUN_H_
#define KILN_EXAMPLE_RUN_H_

#include <stddef.h>

#include "kiln/runtime.h"

kiln_status_t example_run(const void* bytes, size_t n, const char* name);

#endif
