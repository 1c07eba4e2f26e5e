/* Exported: the host sets the OpenMP thread count before each run. */
void kiln_set_threads(int n) {
#ifdef _OPENMP
  if (n > 0) omp_set_num_threads(n);
#else
  (void)n;
#endif
}
int kiln_abi_version(void) { return 1; }
