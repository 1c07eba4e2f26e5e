/* kiln-rt-run --clients: concurrent single-sample clients, without and
 * with the dynamic batcher (include/kiln/batcher.h), in one run. */
#ifndef KILN_TOOLS_RT_CLIENTS_H_
#define KILN_TOOLS_RT_CLIENTS_H_

#include "kiln/runtime.h"

typedef struct rt_clients_options_s {
  const char* device;        /* NULL: the module's target */
  const char* sample_module; /* the unbatched clients' module (batch 1); NULL: the module's, if batch 1 */
  int32_t clients;           /* threads, each sending one request at a time */
  int32_t max_batch;         /* 0: the module's batch */
  int64_t max_delay_us;
  int64_t requests;          /* per client and phase (when seconds == 0) */
  double seconds;            /* per phase; 0: count requests instead */
  const char* verify_key;
} rt_clients_options_t;

/* Runs the unbatched phase (each client its own device and session of the
 * sample module) and the batched phase (one batcher of |module|), both
 * with the same clients and inputs, and prints throughput, p50/p99 latency,
 * the batcher's figures and how far the two phases' outputs are apart. */
kiln_status_t rt_clients_run(kiln_module_t* module, const char* path, const rt_clients_options_t* o);

#endif /* KILN_TOOLS_RT_CLIENTS_H_ */
