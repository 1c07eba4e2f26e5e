/* kiln export: KILN_API marks the functions libkiln_rt exports.
 *
 * libkiln_rt is built with hidden visibility (-fvisibility=hidden), so a
 * function is visible to applications only when its declaration in
 * include/kiln/ carries KILN_API; everything else in the library (devices,
 * planner, module format internals) stays private to it. The ctest
 * rt_exports checks the shared library against these headers. In the
 * static compiler library KILN_API changes nothing.
 *
 * KILN_COMPILER_API marks what libkiln, the compiler as a shared library
 * (kiln/compiler.h), exports; a linker version script keeps everything
 * else in it local (the ctest compiler_exports checks).
 */
#ifndef KILN_EXPORT_H_
#define KILN_EXPORT_H_

#if defined(__GNUC__) || defined(__clang__)
#define KILN_API __attribute__((visibility("default")))
#define KILN_COMPILER_API __attribute__((visibility("default")))
#else
#define KILN_API
#define KILN_COMPILER_API
#endif

#endif /* KILN_EXPORT_H_ */
