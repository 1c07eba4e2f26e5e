/* Faults of devices and runs (BAD_INPUTS rows 16-19 and 21), injected
 * through the device fault wrapper: every vtable slot failing at its 1st,
 * 2nd and 3rd call, allocation failures naming the size, a device lost
 * mid-run and a context recreated afterwards in the same process, kernel
 * build failures with the compiler's log, no driver -> CPU fallback (and an
 * error under strict), wrong input shapes and dtypes. Run under ASan, so
 * anything leaked on an error path fails the test. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "runtime/cpu/cpu_device.h"
#include "runtime/session_impl.h"
#include "runtime_util.h"

static kiln_device_t* cpu_device(void) {
  kiln_device_t* d = NULL;
  CHECK_OK(kiln_cpu_device_create(2, kiln_allocator_system(), &d));
  return d;
}

/* Creates a session on |d| and runs it once; returns the first error. */
static kiln_status_t session_run_once(kiln_module_t* m, kiln_device_t* d, const kiln_session_options_t* so) {
  kiln_session_t* s = NULL;
  KILN_RETURN_IF_ERROR(kiln_session_create(m, d, so, &s));
  kiln_array_t x = rt_random(4, rt_x_dims);
  kiln_array_t out[2] = {0};
  kiln_status_t st = kiln_session_run(s, &x, out);
  rt_free_arrays(out, 2);
  kiln_array_free(kiln_allocator_system(), &x);
  kiln_session_destroy(s);
  return st;
}

/* Every slot, failing at its nth call, in every mode: an error naming the
 * device (or success when the slot is called fewer times), never a crash
 * or a leak. */
static void test_every_call_fails(void) {
  kiln_module_t* m = rt_module();
  kiln_device_t* cpu = cpu_device();
  if (!m || !cpu) goto out;
  kiln_session_options_t so;
  kiln_session_options_default(&so);
  so.profile = true; /* so timestamps are recorded and read too */
  int failures = 0;
  for (int call = KILN_DEVICE_CALL_BUFFER_CREATE; call < KILN_DEVICE_CALL_COUNT_; ++call)
    for (int nth = 1; nth <= 3; ++nth)
      for (int mode = KILN_FAULT_FAIL; mode <= KILN_FAULT_DEVICE_LOST; ++mode) {
        kiln_fault_spec_t spec = {(kiln_device_call_t)call, nth, (kiln_fault_mode_t)mode};
        kiln_device_t* fd = NULL;
        if (!CHECK_OK(kiln_device_fault_wrap(cpu, &spec, &fd))) continue;
        kiln_status_t st = session_run_once(m, fd, &so);
        bool reached = kiln_device_fault_count(fd, (kiln_device_call_t)call) >= nth;
        /* A failed timestamp read costs the profile, not the run. */
        bool tolerated = call == KILN_DEVICE_CALL_TIMESTAMPS_READ && mode != KILN_FAULT_DEVICE_LOST;
        if (reached && !tolerated) {
          CHECK_MSG(st != NULL, "%s #%d (mode %d) did not fail the run", kiln_device_call_name(call), nth, mode);
          if (st) {
            const char* msg = kiln_status_message(st);
            CHECK_MSG(strstr(msg, cpu->info.name) != NULL, "error does not name the device: %s", msg);
            if (mode == KILN_FAULT_OUT_OF_MEMORY && (call == KILN_DEVICE_CALL_BUFFER_CREATE))
              CHECK_MSG(kiln_status_code(st) == KILN_OUT_OF_MEMORY && strstr(msg, "bytes"),
                        "allocation failure does not name the size: %s", msg);
            if (mode == KILN_FAULT_DEVICE_LOST) CHECK_MSG(strstr(msg, "device lost") != NULL, "%s", msg);
            ++failures;
          }
        } else if (!reached) {
          CHECK_MSG(st == NULL, "%s #%d was never called, yet the run failed: %s", kiln_device_call_name(call),
                    nth, st ? kiln_status_message(st) : "");
        }
        kiln_status_free(st);
        kiln_device_release(fd);
      }
  CHECK(failures > 40);
out:
  kiln_device_release(cpu);
  kiln_module_release(m);
}

/* Row 17: the device is lost during a run: the run's wait returns the
 * error; a new device and session in the same process work. */
static void test_device_lost_then_recreated(void) {
  kiln_module_t* m = rt_module();
  kiln_device_t* cpu = cpu_device();
  if (!m || !cpu) goto out;
  kiln_fault_spec_t spec = {KILN_DEVICE_CALL_WAIT, 2, KILN_FAULT_DEVICE_LOST};
  kiln_device_t* fd = NULL;
  kiln_session_t* s = NULL;
  kiln_array_t x = rt_random(4, rt_x_dims);
  kiln_array_t out[2] = {0};
  if (CHECK_OK(kiln_device_fault_wrap(cpu, &spec, &fd)) && CHECK_OK(kiln_session_create(m, fd, NULL, &s))) {
    CHECK_OK(kiln_session_run(s, &x, out)); /* first wait is fine */
    rt_free_arrays(out, 2);
    CHECK_ERR(kiln_session_run(s, &x, out), KILN_DEVICE_ERROR, "device lost");
    CHECK(out[0].data == NULL && out[1].data == NULL);
    /* Every later call fails the same way: the slot was freed, the submit fails. */
    CHECK_ERR(kiln_session_run(s, &x, out), KILN_DEVICE_ERROR, "device lost");
  }
  kiln_session_destroy(s);
  kiln_device_release(fd);
  kiln_device_release(cpu);
  /* Recreate the context: a fresh device and session. */
  kiln_device_t* d2 = cpu_device();
  kiln_session_t* s2 = NULL;
  if (d2 && CHECK_OK(kiln_session_create(m, d2, NULL, &s2))) {
    CHECK_OK(kiln_session_run(s2, &x, out));
    CHECK(out[0].data != NULL);
    rt_free_arrays(out, 2);
  }
  kiln_session_destroy(s2);
  kiln_device_release(d2);
  kiln_array_free(kiln_allocator_system(), &x);
  cpu = NULL;
out:
  kiln_device_release(cpu);
  kiln_module_release(m);
}

/* Row 18: a buffer larger than the device allows. */
static void test_allocation_too_large(void) {
  kiln_device_t* d = cpu_device();
  if (!d) return;
  kiln_device_buffer_t* b = NULL;
  char want[64];
  snprintf(want, sizeof want, "%llu bytes", (unsigned long long)(d->info.max_alloc_bytes + 1));
  CHECK_ERR(d->vt->buffer_create(d, d->info.max_alloc_bytes + 1, "huge", &b), KILN_OUT_OF_MEMORY, want);
  CHECK(b == NULL);
  /* A module whose arena cannot be had fails session creation, naming the size. */
  kiln_module_t* m = rt_module();
  kiln_fault_spec_t spec = {KILN_DEVICE_CALL_BUFFER_CREATE, 2, KILN_FAULT_OUT_OF_MEMORY};
  kiln_device_t* fd = NULL;
  kiln_session_t* s = NULL;
  if (m && CHECK_OK(kiln_device_fault_wrap(d, &spec, &fd)))
    CHECK_ERR(kiln_session_create(m, fd, NULL, &s), KILN_OUT_OF_MEMORY, "bytes");
  CHECK(s == NULL);
  kiln_device_release(fd);
  kiln_module_release(m);
  kiln_device_release(d);
}

/* Row 19: a kernel that does not compile: the error carries the compiler's
 * log and the source path, and a dump folder receives the source. */
static void test_build_failure(void) {
  kiln_graph_t* g = rt_model();
  kiln_program_t* prog = g ? rt_program(g, true) : NULL;
  kiln_graph_destroy(g);
  if (!prog) return;
  /* Break the first kernel's body (same length, so the parts stay valid). */
  uint64_t off = prog->code.parts[2], len = prog->code.parts[3];
  char* body = strstr(prog->code.text + off, "{");
  CHECK(body && (uint64_t)(body - prog->code.text) < off + len);
  if (body) body[0] = '@';
  kiln_module_t* m = NULL;
  kiln_device_t* d = cpu_device();
  char dir[] = "/tmp/kiln-test-dump-XXXXXX";
  CHECK(mkdtemp(dir) != NULL);
  char cache[300];
  snprintf(cache, sizeof cache, "%s/cache", dir);
  kiln_session_options_t so;
  kiln_session_options_default(&so);
  so.dump_dir = dir;
  so.cache_dir = cache;
  if (CHECK_OK(kiln_module_wrap(prog, &m)) && d) {
    kiln_session_t* s = NULL;
    kiln_status_t st = kiln_session_create(m, d, &so, &s);
    CHECK(st != NULL && s == NULL);
    if (st) {
      const char* msg = kiln_status_message(st);
      CHECK_MSG(strstr(msg, "error") != NULL, "no compiler log in: %s", msg);
      CHECK_MSG(strstr(msg, prog->kernels[0].name) != NULL || strstr(msg, ".c") != NULL,
                "no kernel or source named in: %s", msg);
    }
    kiln_status_free(st);
    /* The injected build failure of another device reads the same way. */
    kiln_fault_spec_t spec = {KILN_DEVICE_CALL_EXECUTABLE_CREATE, 1, KILN_FAULT_BUILD_FAILURE};
    kiln_device_t* fd = NULL;
    if (CHECK_OK(kiln_device_fault_wrap(d, &spec, &fd)))
      CHECK_ERR(kiln_session_create(m, fd, NULL, &s), KILN_INVALID_ARGUMENT, "build log");
    kiln_device_release(fd);
  }
  char cmd[400];
  snprintf(cmd, sizeof cmd, "ls %s/*.c >/dev/null 2>&1", dir);
  CHECK_MSG(system(cmd) == 0, "no generated source dumped into %s", dir);
  snprintf(cmd, sizeof cmd, "rm -rf %s", dir);
  CHECK(system(cmd) == 0);
  kiln_module_release(m);
  kiln_device_release(d);
}

/* Row 16: no driver or no such device: CPU fallback with the reason
 * logged, or an error under strict. */
static void test_fallback_and_strict(void) {
  const char* names[] = {"opencl:99", "vulkan:99"};
  for (int i = 0; i < 2; ++i) {
    FILE* log = tmpfile();
    kiln_device_open_options_t oo = {1, false, log};
    kiln_device_t* d = NULL;
    if (CHECK_OK(kiln_device_open(names[i], &oo, kiln_allocator_system(), &d))) {
      CHECK(!strcmp(kiln_device_api(d), "cpu"));
      char buf[1024] = {0};
      rewind(log);
      size_t n = fread(buf, 1, sizeof buf - 1, log);
      buf[n] = 0;
      CHECK_MSG(strstr(buf, "falling back to the CPU") && strstr(buf, names[i]), "log: %s", buf);
    }
    kiln_device_release(d);
    fclose(log);
    oo.strict = true;
    d = NULL;
    kiln_status_t st = kiln_device_open(names[i], &oo, kiln_allocator_system(), &d);
    CHECK_MSG(st != NULL && d == NULL, "strict open of %s succeeded", names[i]);
    if (st) CHECK(strstr(kiln_status_message(st), names[i]) != NULL);
    kiln_status_free(st);
  }
  kiln_device_t* d = NULL;
  CHECK_ERR(kiln_device_open("tpu", NULL, kiln_allocator_system(), &d), KILN_INVALID_ARGUMENT, "tpu");
  CHECK_ERR(kiln_device_open("cpu:x", NULL, kiln_allocator_system(), &d), KILN_INVALID_ARGUMENT, "index");
}

/* A module compiled for another target does not run on the CPU. */
static void test_target_mismatch(void) {
  kiln_module_t* m = rt_module();
  kiln_device_t* d = cpu_device();
  if (!m || !d) goto out;
  kiln_program_t* p = (kiln_program_t*)kiln_module_program(m);
  p->target = "vulkan";
  kiln_session_t* s = NULL;
  CHECK_ERR(kiln_session_create(m, d, NULL, &s), KILN_INVALID_ARGUMENT, "compiled for target vulkan");
  p->target = "cpu";
out:
  kiln_device_release(d);
  kiln_module_release(m);
}

/* Row 21: inputs of the wrong shape or dtype name the input and both shapes. */
static void test_wrong_inputs(void) {
  kiln_module_t* m = rt_module();
  kiln_device_t* d = cpu_device();
  kiln_session_t* s = NULL;
  if (!m || !d || !CHECK_OK(kiln_session_create(m, d, NULL, &s))) goto out;
  kiln_array_t out[2] = {0};
  kiln_array_t bad = rt_random(4, (int64_t[]){1, 8, 12, 13});
  CHECK_ERR(kiln_session_run(s, &bad, out), KILN_INVALID_ARGUMENT, "input 'x' has shape [1,8,12,13]");
  kiln_status_t st = kiln_session_run(s, &bad, out);
  CHECK(st && strstr(kiln_status_message(st), "[1,8,12,12]"));
  kiln_status_free(st);
  kiln_array_free(kiln_allocator_system(), &bad);
  kiln_array_t i32;
  kiln_shape_t sh = kiln_shape_make(4, rt_x_dims);
  if (CHECK_OK(kiln_array_alloc(kiln_allocator_system(), KILN_DTYPE_I32, &sh, &i32))) {
    CHECK_ERR(kiln_session_run(s, &i32, out), KILN_INVALID_ARGUMENT, "dtype i32");
    kiln_array_free(kiln_allocator_system(), &i32);
  }
  /* The session still works after refused inputs. */
  kiln_array_t x = rt_random(4, rt_x_dims);
  CHECK_OK(kiln_session_run(s, &x, out));
  rt_free_arrays(out, 2);
  kiln_array_free(kiln_allocator_system(), &x);
out:
  kiln_session_destroy(s);
  kiln_device_release(d);
  kiln_module_release(m);
}

int main(void) {
  RUN(test_every_call_fails);
  RUN(test_device_lost_then_recreated);
  RUN(test_allocation_too_large);
  RUN(test_build_failure);
  RUN(test_fallback_and_strict);
  RUN(test_target_mismatch);
  RUN(test_wrong_inputs);
  return kiln_test_finish();
}
