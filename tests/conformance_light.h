/* The onnx wheel's light/ model suite for kiln_conformance (--light).
 *
 * onnx/backend/test/data/light holds light_<name>.onnx (the weights replaced
 * by ConstantOfShape nodes) and light_<name>_output_0.pb, but no inputs: the
 * onnx backend test runner (onnx/backend/test/runner, generate_dummy_data
 * with random=False) makes each float graph input as
 * arange(n).reshape(shape) / n in float32, a dim without a value taken as 1,
 * and writes it with the expected output into a node-test style folder. This
 * module does the same, deterministically, in a temporary folder, so the
 * node-test runner runs the models unchanged: test_light_<name>/model.onnx
 * (a link to the light model), test_data_set_0/input_K.pb (written here) and
 * output_K.pb (links to the expected outputs).
 *
 * Not thread-safe (test helper). Errors name the model and input. */
#ifndef KILN_TESTS_CONFORMANCE_LIGHT_H_
#define KILN_TESTS_CONFORMANCE_LIGHT_H_

#include <stddef.h>

#include "kiln/status.h"

/* Stages every light_*.onnx of |light_dir| into a new temporary folder whose
 * path goes to |out_dir| (|n| bytes). On failure the partly staged folder is
 * removed. */
kiln_status_t light_stage(const char* light_dir, char* out_dir, size_t n);

/* Removes a folder made by light_stage (the links, not what they point at). */
void light_unstage(const char* staged_dir);

/* The tolerances onnx's model test table (onnx/backend/test/case/model)
 * gives case |case_name| ("test_light_<name>"): rtol 1e-3 (2e-3 for
 * densenet121), atol 1e-7. */
void light_tolerance(const char* case_name, double* rtol, double* atol);

#endif /* KILN_TESTS_CONFORMANCE_LIGHT_H_ */
