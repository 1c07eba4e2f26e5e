# kiln-rt-run --clients (tools/rt/rt_clients.c, the dynamic batcher of
# include/kiln/batcher.h): the tiny CNN at batch 4 served to 3 single-image
# clients, unbatched (each its own session of the batch-1 module) and
# through the batcher, in one run; and the errors of the options. Included
# from tests/cli_tests.cmake (kiln_cli_test, W, M).
kiln_cli_test(compile_module_b4
  CLEAN ${W}/tiny4.kiln FILE ${W}/tiny4.kiln FIXTURE cli_module_b4
  ARGS compile ${M} --dim N=4 -o ${W}/tiny4.kiln)
kiln_cli_test(rt_run_clients REQUIRES cli_module cli_module_b4 EXE kiln_rt_run
  CHECK "STDOUT_MATCHES=unbatched +15 requests in [0-9.]+ s: [0-9.]+ requests/s, latency p50 [0-9.]+ ms, p99"
        "STDOUT_MATCHES=batched +15 requests in"
        "STDOUT_MATCHES=batcher: max batch 4 \\(module batch 4\\), max delay 1000 us: [0-9]+ batches"
        "STDOUT_MATCHES=throughput batched / unbatched: [0-9.]+x"
        "STDOUT_MATCHES=outputs: batched vs unbatched, max \\|difference\\| [0-9.e+-]+ "
  ARGS ${W}/tiny4.kiln --clients 3 --max-batch 4 --max-delay-us 1000 --requests 5 --sample-module ${W}/tiny.kiln)
kiln_cli_test(rt_run_clients_no_sample REQUIRES cli_module_b4 EXE kiln_rt_run RC 1
  CHECK "STDERR_HAS=runs a batch of 4; the unbatched clients need the model at batch 1: --sample-module"
  ARGS ${W}/tiny4.kiln --clients 2)
kiln_cli_test(rt_run_clients_max_batch REQUIRES cli_module cli_module_b4 EXE kiln_rt_run RC 1
  CHECK "STDERR_HAS=max_batch 5 is out of range: input 'image' has batch 4"
  ARGS ${W}/tiny4.kiln --clients 2 --max-batch 5 --requests 1 --sample-module ${W}/tiny.kiln)
kiln_cli_test(rt_run_clients_wrong_sample REQUIRES cli_module_b4 EXE kiln_rt_run RC 1
  CHECK "STDERR_HAS=input 'image' of ${W}/tiny4.kiln is f32 [4,1,28,28]; one sample of ${W}/tiny4.kiln's is f32 [1,1,28,28]"
  ARGS ${W}/tiny4.kiln --clients 2 --sample-module ${W}/tiny4.kiln)
kiln_cli_test(rt_run_batch_without_clients RC 2 EXE kiln_rt_run
  CHECK "STDERR_HAS=--max-batch, --max-delay-us, --requests, --seconds and --sample-module go with --clients"
  ARGS ${W}/tiny4.kiln --max-batch 4)
kiln_cli_test(rt_run_clients_bad_count RC 2 EXE kiln_rt_run
  CHECK "STDERR_HAS=--clients '0' is not a whole number in [1, 1024]"
  ARGS ${W}/tiny4.kiln --clients 0)
