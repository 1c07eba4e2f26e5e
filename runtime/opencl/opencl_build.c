/* kiln OpenCL device (see opencl_device.h), the build-time half: listing
 * and creating devices, building executables (the binary cache, a module's
 * embedded binaries, units reused across builds), embedding binaries and
 * the device's registration. Compiled for size (CMakeLists.txt): it runs
 * while code is built or loaded, never per inference. */
#include "runtime/opencl/opencl_device_internal.h"

#include <errno.h>
#include <inttypes.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "runtime/code_cache.h"
#include "runtime/device_registry.h"
#include "runtime/module_file.h"
#include "runtime/opencl/opencl_gemm_provider.h"
#include "runtime/opencl/opencl_util.h"
#include "runtime/progress.h"

#define OCL_STR_(x) #x
#define OCL_STR(x) OCL_STR_(x)
/* This kiln's version, the last part of a module binary's key. */
#define KILN_OPENCL_KILN_VERSION OCL_STR(KILN_OPENCL_KILN_VERSION_NUMBER)

/* Every kiln device of an OpenCL device shares its context (ocl_home_t). */
static pthread_mutex_t g_homes_mu = PTHREAD_MUTEX_INITIALIZER;
static ocl_home_t* g_homes;

/* ---- listing and creation ----------------------------------------------- */

typedef struct dev_ref_s {
  cl_platform_id platform;
  cl_device_id dev;
} dev_ref_t;

/* All (platform, device) pairs in order. Returns the count, or a negative
 * CL error when there is no platform. */
static cl_int enumerate(dev_ref_t* out, int32_t cap, int32_t* n_out) {
  cl_uint np = 0;
  *n_out = 0;
  cl_int err = clGetPlatformIDs(0, NULL, &np);
  if (err != CL_SUCCESS) return err;
  if (np == 0) return CL_PLATFORM_NOT_FOUND_KHR_;
  cl_platform_id plats[16];
  if (np > 16) np = 16;
  err = clGetPlatformIDs(np, plats, NULL);
  if (err != CL_SUCCESS) return err;
  int32_t n = 0;
  for (cl_uint i = 0; i < np; ++i) {
    cl_uint nd = 0;
    if (clGetDeviceIDs(plats[i], CL_DEVICE_TYPE_ALL, 0, NULL, &nd) != CL_SUCCESS) continue;
    cl_device_id devs[32];
    if (nd > 32) nd = 32;
    if (clGetDeviceIDs(plats[i], CL_DEVICE_TYPE_ALL, nd, devs, NULL) != CL_SUCCESS) continue;
    for (cl_uint j = 0; j < nd; ++j) {
      if (n < cap) {
        out[n].platform = plats[i];
        out[n].dev = devs[j];
      }
      ++n;
    }
  }
  *n_out = n;
  return CL_SUCCESS;
}

int32_t kiln_opencl_device_count(void) {
  dev_ref_t refs[64];
  int32_t n = 0;
  if (enumerate(refs, 64, &n) != CL_SUCCESS) return 0;
  return n;
}

static void dev_str(cl_device_id dev, cl_device_info what, char* buf, size_t n) {
  buf[0] = 0;
  if (clGetDeviceInfo(dev, what, n, buf, NULL) != CL_SUCCESS) buf[0] = 0;
  buf[n - 1] = 0;
}

static uint64_t dev_u64(cl_device_id dev, cl_device_info what) {
  cl_ulong v = 0;
  if (clGetDeviceInfo(dev, what, sizeof v, &v, NULL) != CL_SUCCESS) return 0;
  return v;
}

static uint32_t dev_u32(cl_device_id dev, cl_device_info what) {
  cl_uint v = 0;
  if (clGetDeviceInfo(dev, what, sizeof v, &v, NULL) != CL_SUCCESS) return 0;
  return v;
}

static bool dev_has_ext(cl_device_id dev, const char* ext) {
  size_t n = 0;
  if (clGetDeviceInfo(dev, CL_DEVICE_EXTENSIONS, 0, NULL, &n) != CL_SUCCESS || n == 0) return false;
  char* s = malloc(n + 1);
  if (!s) return false;
  bool has = false;
  if (clGetDeviceInfo(dev, CL_DEVICE_EXTENSIONS, n, s, NULL) == CL_SUCCESS) {
    s[n] = 0;
    size_t l = strlen(ext);
    for (const char* p = s; (p = strstr(p, ext)) != NULL; p += l)
      if ((p == s || p[-1] == ' ') && (p[l] == ' ' || p[l] == 0)) has = true;
  }
  free(s);
  return has;
}

kiln_status_t kiln_opencl_list_devices(FILE* out) {
  dev_ref_t refs[64];
  int32_t n = 0;
  cl_int err = enumerate(refs, 64, &n);
  if (err != CL_SUCCESS) {
    fprintf(out, "opencl: no OpenCL platform / ICD (%s)\n", kiln_cl_error_name(err));
    return kiln_make_status(KILN_NOT_FOUND, "opencl: no OpenCL platform / ICD (clGetPlatformIDs: %s)",
                            kiln_cl_error_name(err));
  }
  if (n == 0) fprintf(out, "opencl: no devices\n");
  for (int32_t i = 0; i < n && i < 64; ++i) {
    char plat[256] = "", name[256] = "", ver[256] = "", drv[128] = "";
    if (clGetPlatformInfo(refs[i].platform, CL_PLATFORM_NAME, sizeof plat, plat, NULL) != CL_SUCCESS)
      plat[0] = 0;
    plat[sizeof plat - 1] = 0;
    dev_str(refs[i].dev, CL_DEVICE_NAME, name, sizeof name);
    dev_str(refs[i].dev, CL_DEVICE_VERSION, ver, sizeof ver);
    dev_str(refs[i].dev, CL_DRIVER_VERSION, drv, sizeof drv);
    fprintf(out,
            "opencl:%d  platform \"%s\"  device \"%s\"  %s (driver %s)  %u compute units  "
            "%.1f GiB global (max alloc %.1f GiB)  fp16 %s  int-dot %s  base-address alignment %u bytes\n",
            (int)i, plat, name, ver, drv, dev_u32(refs[i].dev, CL_DEVICE_MAX_COMPUTE_UNITS),
            (double)dev_u64(refs[i].dev, CL_DEVICE_GLOBAL_MEM_SIZE) / (1024.0 * 1024 * 1024),
            (double)dev_u64(refs[i].dev, CL_DEVICE_MAX_MEM_ALLOC_SIZE) / (1024.0 * 1024 * 1024),
            dev_has_ext(refs[i].dev, "cl_khr_fp16") ? "yes" : "no",
            dev_has_ext(refs[i].dev, "cl_khr_integer_dot_product") ? "yes" : "no",
            dev_u32(refs[i].dev, CL_DEVICE_MEM_BASE_ADDR_ALIGN) / 8);
  }
  return NULL;
}

kiln_status_t kiln_opencl_device_create(int32_t index, kiln_allocator_t al, kiln_device_t** out) {
  dev_ref_t refs[64];
  int32_t n = 0;
  cl_int err = enumerate(refs, 64, &n);
  if (err != CL_SUCCESS)
    return kiln_make_status(KILN_NOT_FOUND, "opencl: no OpenCL platform / ICD (clGetPlatformIDs: %s)",
                            kiln_cl_error_name(err));
  if (index < 0 || index >= n || index >= 64)
    return kiln_make_status(KILN_NOT_FOUND, "opencl: device %d not found (%d device%s)", (int)index,
                            (int)n, n == 1 ? "" : "s");
  ocl_device_t* d = NULL;
  KILN_RETURN_IF_ERROR(kiln_allocator_malloc(al, sizeof *d, "opencl", (void**)&d), "opencl device");
  memset(d, 0, sizeof *d);
  kiln_device_init_base(&d->base, &kiln_ocl_vtable, al);
  d->platform = refs[index].platform;
  d->dev = refs[index].dev;
  d->index = index;
  kiln_device_info_t* info = &d->base.info;
  snprintf(info->api, sizeof info->api, "opencl");
  dev_str(d->dev, CL_DEVICE_NAME, info->name, sizeof info->name);
  char drv[128], pver[128];
  dev_str(d->dev, CL_DRIVER_VERSION, drv, sizeof drv);
  dev_str(d->dev, CL_DEVICE_VERSION, d->version, sizeof d->version);
  dev_str(d->dev, CL_DEVICE_VENDOR, d->vendor, sizeof d->vendor);
  snprintf(d->drv, sizeof d->drv, "%s", drv);
  if (clGetPlatformInfo(d->platform, CL_PLATFORM_VERSION, sizeof pver, pver, NULL) != CL_SUCCESS)
    pver[0] = 0;
  pver[sizeof pver - 1] = 0;
  snprintf(info->driver, sizeof info->driver, "%.120s, driver %.120s", pver, drv);
  /* PoCL keeps every program it builds in its own cache (POCL_CACHE_DIR,
   * unless POCL_KERNEL_CACHE=0), so a rebuild from source is already fast;
   * and its CL_PROGRAM_BINARIES compiles a generic work-group function for
   * every kernel when asked: ResNet-18's cold load took 238 s with kiln's
   * binary cache and 67-86 s without. The kiln binary cache is skipped there. */
  const char* pkc = getenv("POCL_KERNEL_CACHE");
  d->own_cache = strstr(pver, "PoCL") != NULL && !(pkc && !strcmp(pkc, "0"));
  info->fp16_storage = true; /* vload_half / vstore_half are core OpenCL */
  info->fp16_arith = dev_has_ext(d->dev, "cl_khr_fp16");
  /* OpenCL 1.2+ reports double support as a non-zero FP config; older
   * drivers only through the extension */
  cl_device_fp_config fp64 = 0;
  if (clGetDeviceInfo(d->dev, CL_DEVICE_DOUBLE_FP_CONFIG, sizeof fp64, &fp64, NULL) != CL_SUCCESS) fp64 = 0;
  info->fp64 = fp64 != 0 || dev_has_ext(d->dev, "cl_khr_fp64");
  const char* hide = getenv("KILN_OPENCL_FEATURES");
  if (hide && strstr(hide, "no-fp64")) info->fp64 = false;
  info->int8 = true;
  cl_device_type dtype = 0;
  if (clGetDeviceInfo(d->dev, CL_DEVICE_TYPE, sizeof dtype, &dtype, NULL) != CL_SUCCESS) dtype = 0;
  info->cpu_backed = (dtype & CL_DEVICE_TYPE_CPU) != 0;
  info->int_dot = dev_has_ext(d->dev, "cl_khr_integer_dot_product");
  info->timestamps = true;
  info->max_alloc_bytes = dev_u64(d->dev, CL_DEVICE_MAX_MEM_ALLOC_SIZE);
  info->total_bytes = dev_u64(d->dev, CL_DEVICE_GLOBAL_MEM_SIZE);
  uint64_t align = dev_u32(d->dev, CL_DEVICE_MEM_BASE_ADDR_ALIGN) / 8; /* bits -> bytes */
  if (align == 0 || (align & (align - 1))) align = 128;
  info->buffer_alignment = align;
  size_t wg = 0;
  if (clGetDeviceInfo(d->dev, CL_DEVICE_MAX_WORK_GROUP_SIZE, sizeof wg, &wg, NULL) != CL_SUCCESS) wg = 1;
  info->max_workgroup_size = (int64_t)wg;
  size_t items[16] = {0}; /* as many as CL_DEVICE_MAX_WORK_ITEM_DIMENSIONS (at least 3) */
  if (clGetDeviceInfo(d->dev, CL_DEVICE_MAX_WORK_ITEM_SIZES, sizeof items, items, NULL) == CL_SUCCESS)
    memcpy(d->max_items, items, sizeof d->max_items);
  /* KILN_OPENCL_FEATURES=items=N lowers them to N (tests of the refusal) */
  const char* it = hide ? strstr(hide, "items=") : NULL;
  const unsigned long long itn = it ? strtoull(it + 6, NULL, 10) : 0;
  for (int j = 0; j < 3; ++j)
    if (itn > 0 && (d->max_items[j] == 0 || itn < d->max_items[j])) d->max_items[j] = (size_t)itn;
  const uint32_t bits = dev_u32(d->dev, CL_DEVICE_ADDRESS_BITS);
  d->max_global = bits == 0 || bits >= 64 ? UINT64_MAX : (UINT64_C(1) << bits) - 1;
  if (d->max_global > SIZE_MAX) d->max_global = SIZE_MAX;
  info->local_mem_bytes = dev_u64(d->dev, CL_DEVICE_LOCAL_MEM_SIZE);
  /* the warp / wavefront width, which only vendor queries give before a
   * kernel exists (0 where neither answers): the GPU rules make
   * work-groups whole multiples of it (kiln_template_limits_t.warp) */
  info->subgroup_size = (int32_t)dev_u32(d->dev, 0x4003 /* CL_DEVICE_WARP_SIZE_NV */);
  if (!info->subgroup_size) info->subgroup_size = (int32_t)dev_u32(d->dev, 0x4043 /* CL_DEVICE_WAVEFRONT_WIDTH_AMD */);
  info->compute_units = (int32_t)dev_u32(d->dev, CL_DEVICE_MAX_COMPUTE_UNITS);

  pthread_mutex_lock(&g_homes_mu);
  ocl_home_t* h = g_homes;
  while (h && h->dev != d->dev) h = h->next;
  if (!h && (h = calloc(1, sizeof *h))) {
    cl_context_properties props[] = {CL_CONTEXT_PLATFORM, (cl_context_properties)d->platform, 0};
    h->ctx = clCreateContext(props, 1, &d->dev, NULL, NULL, &err);
    if (h->ctx && err == CL_SUCCESS) {
      h->dev = d->dev;
      pthread_mutex_init(&h->memo_mu, NULL);
      h->next = g_homes;
      g_homes = h;
    } else {
      free(h);
      h = NULL;
    }
  }
  if (h) h->refs++;
  pthread_mutex_unlock(&g_homes_mu);
  if (!h) {
    kiln_allocator_free(al, d);
    return kiln_make_status(KILN_DEVICE_ERROR, "opencl:%d %s: clCreateContext: %s", (int)index,
                            info->name, kiln_cl_error_name(err == CL_SUCCESS ? CL_OUT_OF_HOST_MEMORY : err));
  }
  d->home = h;
  d->ctx = h->ctx;
  d->q = clCreateCommandQueue(d->ctx, d->dev, CL_QUEUE_PROFILING_ENABLE, &err);
  if (!d->q || err != CL_SUCCESS) {
    d->q = NULL;
    kiln_status_t s = kiln_make_status(KILN_DEVICE_ERROR, "opencl:%d %s: clCreateCommandQueue: %s", (int)index,
                                       info->name, kiln_cl_error_name(err));
    kiln_ocl_destroy(&d->base);
    return s;
  }
  *out = &d->base;
  return NULL;
}

static void memo_clear(ocl_home_t* h) {
  for (int32_t i = 0; i < h->n_memo; ++i) {
    clReleaseProgram(h->memo[i].prog);
    free(h->memo[i].text);
    free(h->memo[i].sym);
  }
  free(h->memo);
  h->memo = NULL;
  h->n_memo = h->cap_memo = 0;
}

void kiln_ocl_destroy(kiln_device_t* base) {
  ocl_device_t* d = D(base);
  if (d->q) {
    clFinish(d->q);
    clReleaseCommandQueue(d->q);
  }
  /* the last device of its context frees the memo and the context */
  ocl_home_t* h = d->home;
  pthread_mutex_lock(&g_homes_mu);
  const bool last = --h->refs == 0;
  for (ocl_home_t** p = &g_homes; last && *p; p = &(*p)->next)
    if (*p == h) {
      *p = h->next;
      break;
    }
  pthread_mutex_unlock(&g_homes_mu);
  if (last) {
    memo_clear(h);
    pthread_mutex_destroy(&h->memo_mu);
    clReleaseContext(h->ctx);
    free(h);
  }
  kiln_allocator_free(d->base.allocator, d);
}

/* ---- executables -------------------------------------------------------- */

static double now_s(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

static char* build_log(ocl_device_t* d, cl_program prog) {
  size_t n = 0;
  if (clGetProgramBuildInfo(prog, d->dev, CL_PROGRAM_BUILD_LOG, 0, NULL, &n) != CL_SUCCESS) n = 0;
  char* log = malloc(n + 1);
  if (!log) return NULL;
  log[0] = 0;
  if (n && clGetProgramBuildInfo(prog, d->dev, CL_PROGRAM_BUILD_LOG, n, log, NULL) != CL_SUCCESS)
    log[0] = 0;
  log[n] = 0;
  return log;
}

/* Builds |prog| (from source or binary); on failure a status with the log. */
static kiln_status_t build_program(ocl_device_t* d, cl_program prog, const kiln_program_t* p,
                                   const char* source, bool from_binary) {
  cl_int err = clBuildProgram(prog, 1, &d->dev, KILN_OPENCL_BUILD_OPTIONS, NULL, NULL);
  if (err == CL_SUCCESS) return NULL;
  if (err != CL_BUILD_PROGRAM_FAILURE && err != CL_INVALID_BINARY && err != CL_COMPILER_NOT_AVAILABLE)
    return kiln_ocl_cl_fail(d, err, "clBuildProgram", p->model_name);
  char* log = build_log(d, prog);
  char kernel[256];
  kiln_opencl_kernel_at_error(source, log ? log : "", kernel, sizeof kernel);
  kiln_status_t s = kiln_make_status(
      KILN_INVALID_ARGUMENT, "opencl: build of '%s'%s failed for %s (kernel %s): %s:\n%s",
      p->model_name && *p->model_name ? p->model_name : "program", from_binary ? " (binary)" : "",
      d->base.info.name, kernel, kiln_cl_error_name(err), log && *log ? log : "(empty build log)");
  free(log);
  return s;
}

static void free_executable(ocl_device_t* d, kiln_device_executable_t* e) {
  if (!e) return;
  for (int32_t k = 0; k < e->n_kernels; ++k) {
    if (e->kernels[k].k) clReleaseKernel(e->kernels[k].k);
    kiln_allocator_free(d->base.allocator, e->kernels[k].name);
  }
  kiln_allocator_free(d->base.allocator, e->kernels);
  if (e->prog) clReleaseProgram(e->prog);
  for (int32_t i = 0; i < e->n_more; ++i) clReleaseProgram(e->more[i]);
  free(e->more);
  kiln_allocator_free(d->base.allocator, e);
}

/* A program built from |len| bytes of driver binary; NULL with *why set
 * when the driver refuses it (never trusted further than the driver's own
 * checks: the caller then builds the source). */
static cl_program program_from_binary(ocl_device_t* d, const kiln_program_t* p, const uint8_t* bin, size_t len,
                                      const char* source, kiln_status_t* why) {
  cl_int err = CL_SUCCESS, bst = CL_SUCCESS;
  const unsigned char* bp = bin;
  *why = NULL;
  cl_program prog = clCreateProgramWithBinary(d->ctx, 1, &d->dev, &len, &bp, &bst, &err);
  if (!prog || err != CL_SUCCESS || bst != CL_SUCCESS) {
    *why = kiln_make_status(KILN_PARSE_ERROR, "clCreateProgramWithBinary: %s",
                            kiln_cl_error_name(err != CL_SUCCESS ? err : bst));
    if (prog) clReleaseProgram(prog);
    return NULL;
  }
  *why = build_program(d, prog, p, source, true);
  if (*why) {
    clReleaseProgram(prog);
    return NULL;
  }
  return prog;
}

/* The program from cache entry |name|: NULL when there is none or it is
 * unusable (the code cache or this function warned; a binary the driver
 * refuses is deleted). */
static cl_program load_cached(ocl_device_t* d, const kiln_program_t* p,
                              const kiln_code_cache_t* cache, const char* name, const char* path,
                              const char* source, bool* rejected) {
  uint8_t* bin = NULL;
  size_t len = 0;
  kiln_code_cache_result_t r = kiln_code_cache_read(cache, name, &bin, &len);
  *rejected = r == KILN_CODE_CACHE_REJECTED;
  if (r != KILN_CODE_CACHE_HIT) return NULL;
  kiln_status_t s = NULL;
  cl_program prog = program_from_binary(d, p, bin, len, source, &s);
  free(bin);
  if (s) {
    fprintf(stderr, "kiln: warning: opencl cache: ignoring unusable entry '%s': %s\n", path,
            kiln_status_message(s));
    kiln_status_free(s);
    unlink(path);
    *rejected = true;
  }
  return prog;
}

/* The module's binary for this device (module section 'DBIN'): the entry
 * whose device name, vendor, driver version and kiln version all equal
 * this device's and this kiln's, NULL when none does. */
static const kiln_program_devbin_t* find_devbin(const ocl_device_t* d, const kiln_program_t* p) {
  for (int32_t i = 0; i < p->code.n_devbin; ++i) {
    const kiln_program_devbin_t* b = &p->code.devbin[i];
    if (!strcmp(b->device, d->base.info.name) && !strcmp(b->vendor, d->vendor) && !strcmp(b->driver, d->drv) &&
        !strcmp(b->kiln, KILN_OPENCL_KILN_VERSION))
      return b;
  }
  return NULL;
}

/* The module's own binary when it has one for this device; one the driver
 * refuses (corrupt, built by a driver that reports the same version) costs
 * a warning and a build from source, never the load. */
static cl_program load_embedded(ocl_device_t* d, const kiln_program_t* p, const char* source,
                                kiln_opencl_build_stats_t* st) {
  st->n_embedded = p->code.n_devbin;
  const kiln_program_devbin_t* b = find_devbin(d, p);
  if (!b) return NULL;
  kiln_status_t why = NULL;
  cl_program prog = NULL;
  /* A driver trusts its binaries (PoCL reads past the end of a short one):
   * only the code this module's source compiled to is handed over. */
  const uint64_t crc = kiln_module_crc64(0, source, (size_t)p->code.text_len);
  if (crc != b->source_crc)
    why = kiln_make_status(KILN_PARSE_ERROR, "it was built from other source (checksum %016llx, the source's %016llx)",
                           (unsigned long long)b->source_crc, (unsigned long long)crc);
  else
    prog = program_from_binary(d, p, b->bytes, (size_t)b->len, source, &why);
  if (why) {
    fprintf(stderr,
            "kiln: warning: opencl: the program binary in the module of '%s' for %s (driver %s) was refused, "
            "building the program from source: %s\n",
            p->model_name && *p->model_name ? p->model_name : "program", b->device, b->driver,
            kiln_status_message(why));
    kiln_status_free(why);
    st->embedded_refused = true;
  }
  st->embedded_used = prog != NULL;
  return prog;
}

/* A cache that cannot be written only costs time next run (it warned). */
static void store_cached(cl_program prog, const kiln_code_cache_t* cache, const char* name) {
  size_t len = 0;
  if (clGetProgramInfo(prog, CL_PROGRAM_BINARY_SIZES, sizeof len, &len, NULL) != CL_SUCCESS || !len)
    return;
  unsigned char* bin = malloc(len);
  if (!bin) return;
  if (clGetProgramInfo(prog, CL_PROGRAM_BINARIES, sizeof bin, &bin, NULL) == CL_SUCCESS)
    kiln_code_cache_write(cache, name, bin, len);
  free(bin);
}

/* An extension the program enables and the device lacks (cl_khr_fp16 for
 * a module compiled with fp16 arithmetic on another device) fails here,
 * by name, not as a compiler error about 'half' somewhere in the log. */
static kiln_status_t check_extensions(ocl_device_t* d, const kiln_program_t* p) {
  const char* source = p->code.text;
  char ext[128];
  for (size_t pos = 0; kiln_opencl_next_enabled_extension(source, (size_t)p->code.text_len, &pos, ext, sizeof ext);)
    if (!dev_has_ext(d->dev, ext))
      return kiln_make_status(KILN_UNSUPPORTED,
                              "opencl: program '%s' needs %s, which %s does not have%s",
                              p->model_name && *p->model_name ? p->model_name : "program", ext, d->base.info.name,
                              strcmp(ext, "cl_khr_fp16") ? ""
                                                         : " (it was compiled with fp16 arithmetic for another "
                                                           "device; compile it for this one: fp16 storage with "
                                                           "fp32 arithmetic)");
  return NULL;
}

/* |p|'s program for |d|, built: from the module's binary for this device
 * (unless |embedding|), else from the binary cache, else from source
 * (then stored in the cache, unless |embedding|). *name: the cache entry
 * ("" when the binary cache is not used: off, or a driver with its own). *cache / *cache_on: the cache opened for |cache_dir|
 * (see opencl_device.h), for the caller's other records. */
static kiln_status_t get_program(ocl_device_t* d, const kiln_program_t* p, const char* cache_dir, bool embedding,
                                 kiln_code_cache_t* cache, bool* cache_on, char name[48],
                                 kiln_opencl_build_stats_t* st, cl_program* out) {
  const char* source = p->code.text;
  *out = NULL;
  *cache_on = kiln_code_cache_open(cache, "opencl", cache_dir);
  bool bins = *cache_on && !d->own_cache; /* the binary cache; the folder serves other records */
  st->driver_cache = d->own_cache;
  name[0] = 0;
  if (bins) {
    char key[33];
    kiln_opencl_cache_key(source, (size_t)p->code.text_len, d->base.info.name, d->drv, d->version,
                          KILN_OPENCL_BUILD_OPTIONS, key);
    snprintf(name, 48, "%.32s.clbin", key);
    bins = kiln_code_cache_path(cache, name, st->cache_path, sizeof st->cache_path);
    if (!bins) name[0] = 0;
  }
  cl_program prog = embedding ? NULL : load_embedded(d, p, source, st);
  if (!prog && bins) {
    prog = load_cached(d, p, cache, name, st->cache_path, source, &st->cache_rejected);
    st->cache_hit = prog != NULL;
  }
  if (!prog) {
    cl_int err = CL_SUCCESS;
    size_t len = (size_t)p->code.text_len;
    prog = clCreateProgramWithSource(d->ctx, 1, &source, &len, &err);
    if (!prog || err != CL_SUCCESS) return kiln_ocl_cl_fail(d, err, "clCreateProgramWithSource", p->model_name);
    kiln_status_t s = build_program(d, prog, p, source, false);
    if (s) {
      clReleaseProgram(prog);
      return s;
    }
    /* Not when embedding: the driver may fix its binary at the first
     * query, and the embedder asks only after warm_kernels. */
    if (bins && !embedding) store_cached(prog, cache, name);
  }
  *out = prog;
  return NULL;
}

/* ---- units reused across builds (kiln_device_build_options_t.reuse_code) -- */

static uint64_t fnv(uint64_t h, const char* s, size_t n) {
  for (size_t i = 0; i < n; ++i) h = (h ^ (uint8_t)s[i]) * 1099511628211ull;
  return h;
}

static bool ident_char(char c) { return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') || c == '_'; }

static const char* unit_text(const kiln_program_t* p, int32_t u, size_t* len) {
  *len = (size_t)p->code.parts[2 * (u + 1) + 1];
  return p->code.text + p->code.parts[2 * (u + 1)];
}

/* The unit (parts 1 .. n_parts - 2, numbered from 0) whose text holds
 * |name| as a whole identifier; -1 when none or more than one does. */
static int32_t unit_of(const kiln_program_t* p, const char* name) {
  const size_t nl = strlen(name);
  int32_t found = -1;
  for (int32_t u = 0; nl && u < p->code.n_parts - 2; ++u) {
    size_t len;
    const char* t = unit_text(p, u, &len);
    for (size_t i = 0; i + nl <= len; ++i) {
      if (t[i] != name[0] || memcmp(t + i, name, nl) != 0) continue;
      if ((i > 0 && ident_char(t[i - 1])) || (i + nl < len && ident_char(t[i + nl]))) continue;
      if (found >= 0) return -1;
      found = u;
      break;
    }
  }
  return found;
}

/* Whether unit texts |a| (defining kernel |an|) and |b| (|bn|) are the
 * same but for those names: OpenCL programs print identical kernels once,
 * under the first one's name, so an unchanged kernel of a later build may
 * print under another name than the earlier build's. */
static bool same_but_name(const char* a, size_t al, const char* an, const char* b, size_t bl, const char* bn) {
  const size_t anl = strlen(an), bnl = strlen(bn);
  size_t i = 0, j = 0;
  while (i < al && j < bl) {
    if (i + anl <= al && j + bnl <= bl && !memcmp(a + i, an, anl) && !memcmp(b + j, bn, bnl) &&
        !(i > 0 && ident_char(a[i - 1])) && !(i + anl < al && ident_char(a[i + anl])) &&
        !(j + bnl < bl && ident_char(b[j + bnl]))) {
      i += anl, j += bnl;
      continue;
    }
    if (a[i++] != b[j++]) return false;
  }
  return i == al && j == bl;
}

/* Builds |p| for |e| from the units earlier reuse_code builds on |d|
 * compiled with the same prelude (the unit's whole text compared, or all
 * but the name of the kernel it defines: that kernel is then created under
 * the earlier unit's name, here), and its
 * other units as one program of the prelude, those units and the
 * epilogue; each kernel is created from the program holding its unit. On
 * PoCL a build's cost grows with its text (ResNet-18's program is one
 * driver call): kiln tune's closing build differs from its default build
 * only in the kept points' kernels. *applies false (nothing done) where
 * the text has no units (a program from an older kiln) or a kernel's
 * symbol is not in exactly one unit: then it is built whole. */
static kiln_status_t reuse_units(ocl_device_t* d, const kiln_program_t* p, kiln_device_executable_t* e,
                                 bool* applies) {
  *applies = false;
  ocl_home_t* h = d->home;
  const kiln_program_code_t* c = &p->code;
  const int32_t nu = c->n_parts - 2;
  if (nu < 1 || c->parts[0] != 0) return NULL;
  int32_t* ku = malloc(sizeof(int32_t) * (size_t)(p->n_kernels + 1));
  cl_program* up = calloc((size_t)nu + 1, sizeof(cl_program));
  e->more = calloc((size_t)nu + 1, sizeof(cl_program));
  if (!ku || !up || !e->more) {
    free(ku);
    free(up);
    return kiln_make_status(KILN_OUT_OF_MEMORY, "opencl: program units");
  }
  bool ok = true;
  for (int32_t k = 0; k < p->n_kernels && ok; ++k) ok = (ku[k] = unit_of(p, p->kernels[k].name)) >= 0;
  if (!ok) {
    free(ku);
    free(up);
    return NULL;
  }
  *applies = true;
  const size_t plen = (size_t)c->parts[1];
  const size_t eoff = (size_t)c->parts[2 * (nu + 1)], elen = (size_t)c->parts[2 * (nu + 1) + 1];
  const uint64_t ph = fnv(fnv(14695981039346656037ull, c->text, plen), c->text + eoff, elen);
  int32_t missing = 0;
  size_t missing_len = 0;
  pthread_mutex_lock(&h->memo_mu);
  for (int32_t u = 0; u < nu; ++u) {
    size_t len;
    const char* t = unit_text(p, u, &len);
    const char* sym = NULL; /* the kernel it defines */
    for (int32_t k = 0; k < p->n_kernels && !sym; ++k)
      if (ku[k] == u) sym = p->kernels[k].name;
    for (int32_t i = 0; i < h->n_memo && !up[u]; ++i) {
      const ocl_unit_t* m = &h->memo[i];
      if (m->prelude_hash != ph) continue;
      if (m->len == len && !memcmp(m->text, t, len)) {
        up[u] = m->prog;
      } else if (sym && m->sym && same_but_name(t, len, sym, m->text, m->len, m->sym)) {
        /* its kernels are the memo's under the memo's name */
        bool ok = true;
        for (int32_t k = 0; k < p->n_kernels && ok; ++k)
          if (ku[k] == u) ok = (e->kernels[k].k = clCreateKernel(m->prog, m->sym, NULL)) != NULL;
        for (int32_t k = 0; k < p->n_kernels && !ok; ++k)
          if (ku[k] == u && e->kernels[k].k) clReleaseKernel(e->kernels[k].k), e->kernels[k].k = NULL;
        if (ok) up[u] = m->prog;
      }
      if (up[u]) {
        clRetainProgram(up[u]);
        e->more[e->n_more++] = up[u];
      }
    }
    if (!up[u]) ++missing, missing_len += len;
  }
  pthread_mutex_unlock(&h->memo_mu);
  kiln_status_t s = NULL;
  cl_program np = NULL;
  if (missing) {
    char* src = malloc(plen + missing_len + elen + 1);
    if (!src) s = kiln_make_status(KILN_OUT_OF_MEMORY, "opencl: program units");
    size_t n = 0;
    if (src) {
      memcpy(src, c->text, plen);
      n = plen;
      for (int32_t u = 0; u < nu; ++u) {
        size_t len;
        const char* t = unit_text(p, u, &len);
        if (up[u]) continue;
        memcpy(src + n, t, len);
        n += len;
      }
      memcpy(src + n, c->text + eoff, elen);
      n += elen;
      src[n] = 0;
      cl_int err = CL_SUCCESS;
      const char* sp = src;
      np = clCreateProgramWithSource(d->ctx, 1, &sp, &n, &err);
      if (!np || err != CL_SUCCESS) {
        np = NULL;
        s = kiln_ocl_cl_fail(d, err, "clCreateProgramWithSource", p->model_name);
      }
      if (!s) s = build_program(d, np, p, src, false);
      if (s && np) clReleaseProgram(np);
      if (s) np = NULL;
      free(src);
    }
  }
  if (np) {
    e->more[e->n_more++] = np;
    /* the new units for later builds (a memo that cannot grow only costs
     * their reuse) */
    pthread_mutex_lock(&h->memo_mu);
    if (h->n_memo + missing > OCL_MEMO_MAX) memo_clear(h);
    if (h->n_memo + missing > h->cap_memo) {
      const int32_t cap = h->n_memo + missing + 64;
      ocl_unit_t* m = realloc(h->memo, sizeof *m * (size_t)cap);
      if (m) h->memo = m, h->cap_memo = cap;
    }
    for (int32_t u = 0; u < nu && h->n_memo < h->cap_memo; ++u) {
      if (up[u]) continue;
      size_t len;
      const char* t = unit_text(p, u, &len);
      char* copy = malloc(len + 1);
      if (!copy) break;
      memcpy(copy, t, len);
      copy[len] = 0;
      char* sym = NULL;
      for (int32_t k = 0; k < p->n_kernels && !sym; ++k)
        if (ku[k] == u) sym = strdup(p->kernels[k].name);
      clRetainProgram(np);
      h->memo[h->n_memo++] = (ocl_unit_t){.prelude_hash = ph, .text = copy, .len = len, .sym = sym, .prog = np};
    }
    pthread_mutex_unlock(&h->memo_mu);
  }
  for (int32_t k = 0; k < p->n_kernels && !s; ++k) e->kernels[k].prog = up[ku[k]] ? up[ku[k]] : np;
  e->stats.units = nu;
  e->stats.units_reused = nu - missing;
  free(ku);
  free(up);
  return s;
}

kiln_status_t kiln_ocl_executable_create(kiln_device_t* base, const kiln_program_t* p,
                                           const kiln_device_build_options_t* o,
                                           kiln_device_executable_t** out) {
  ocl_device_t* d = D(base);
  CHECK_LOST(d);
  const double t0 = now_s();
  const char* source = p->code.text;
  if (!source || p->code.text_len == 0)
    return kiln_make_status(KILN_INVALID_ARGUMENT, "opencl: program '%s' has no OpenCL source",
                            p->model_name ? p->model_name : "");
  if (o && o->dump_dir && *o->dump_dir)
    KILN_RETURN_IF_ERROR(kiln_opencl_dump_source(o->dump_dir, p->model_name, source,
                                                 (size_t)p->code.text_len));
  KILN_RETURN_IF_ERROR(check_extensions(d, p));
  kiln_device_executable_t* e = NULL;
  KILN_RETURN_IF_ERROR(kiln_allocator_malloc(d->base.allocator, sizeof *e, "opencl", (void**)&e), "opencl executable");
  memset(e, 0, sizeof *e);
  kiln_status_t s = NULL;
  if (p->n_kernels > 0) {
    s = kiln_allocator_malloc(d->base.allocator, sizeof *e->kernels * (size_t)p->n_kernels,
                              "opencl kernels", (void**)&e->kernels);
    if (s) {
      kiln_allocator_free(d->base.allocator, e);
      return s;
    }
    memset(e->kernels, 0, sizeof *e->kernels * (size_t)p->n_kernels);
  }
  e->n_kernels = p->n_kernels;

  kiln_code_cache_t cache;
  bool cache_on = false;
  char name[48];
  /* The program is one driver call; PoCL compiles each kernel's code at
   * its first launch (the first run), so the line has the build and the
   * kernels' creation. */
  kiln_progress_t pr;
  kiln_progress_start(&pr, o ? o->progress : NULL, d->base.info.name, 1 + p->n_kernels, "building");
  bool reused = false;
  if (o && o->reuse_code) s = reuse_units(d, p, e, &reused);
  if (!s && !reused)
    s = get_program(d, p, o ? o->cache_dir : NULL, false, &cache, &cache_on, name, &e->stats, &e->prog);
  if (!s)
    kiln_progress_step(&pr, e->stats.cache_hit          ? "program from the binary cache"
                            : e->stats.units_reused > 0 ? "units of earlier builds reused"
                                                        : "program built");
  for (int32_t k = 0; k < p->n_kernels && !s; ++k) {
    const kiln_program_kernel_t* pk = &p->kernels[k];
    ocl_kernel_t* ek = &e->kernels[k];
    cl_int err = CL_SUCCESS;
    if (!reused) ek->prog = e->prog;
    if (!ek->k) ek->k = clCreateKernel(ek->prog, pk->name, &err); /* else made by reuse_units */
    if (!ek->k || err != CL_SUCCESS) {
      ek->k = NULL;
      s = err == CL_INVALID_KERNEL_NAME
              ? kiln_make_status(KILN_INVALID_ARGUMENT,
                                 "opencl: kernel '%s' is not in the program source", pk->name)
              : kiln_ocl_cl_fail(d, err, "clCreateKernel", pk->name);
      break;
    }
    size_t nl = strlen(pk->name) + 1;
    s = kiln_allocator_malloc(d->base.allocator, nl, "opencl", (void**)&ek->name);
    if (s) break;
    memcpy(ek->name, pk->name, nl);
    ek->n_args = pk->n_args;
    for (int i = 0; i < 3 && !s; ++i) {
      int64_t g = pk->groups[i] > 0 ? pk->groups[i] : 1, l = pk->local[i] > 0 ? pk->local[i] : 1;
      /* a launch the device cannot take is refused here, naming the
       * kernel, rather than by clEnqueueNDRangeKernel at the first run */
      if (d->max_items[i] && (uint64_t)l > d->max_items[i])
        s = kiln_make_status(KILN_UNSUPPORTED,
                             "opencl: kernel '%s' (node '%s') has work-groups of %lld work-items in dimension %d; "
                             "device '%s' allows %zu (CL_DEVICE_MAX_WORK_ITEM_SIZES)",
                             pk->name, pk->node_name ? pk->node_name : "?", (long long)l, i, d->base.info.name,
                             d->max_items[i]);
      else if ((uint64_t)g > d->max_global / (uint64_t)l)
        s = kiln_make_status(KILN_UNSUPPORTED,
                             "opencl: kernel '%s' (node '%s') launches %lld x %lld work-items in dimension %d; "
                             "device '%s' takes global sizes up to %llu (CL_DEVICE_ADDRESS_BITS)",
                             pk->name, pk->node_name ? pk->node_name : "?", (long long)g, (long long)l, i,
                             d->base.info.name, (unsigned long long)d->max_global);
      ek->local[i] = (size_t)l;
      ek->global[i] = (size_t)(g * l);
    }
    if (s) break;
    cl_uint nargs = 0;
    if (clGetKernelInfo(ek->k, CL_KERNEL_NUM_ARGS, sizeof nargs, &nargs, NULL) == CL_SUCCESS &&
        (int32_t)nargs != pk->n_args)
      s = kiln_make_status(KILN_INVALID_ARGUMENT,
                           "opencl: kernel '%s' takes %u arguments, the program binds %d", pk->name,
                           nargs, (int)pk->n_args);
    if (!s) kiln_progress_step(&pr, "kernels created");
  }
  kiln_progress_end(&pr);
  /* GEMM providers, per shape (opencl_gemm_provider.h). */
  if (!s && cache_on)
    kiln_code_cache_path(&cache, "gemm-providers.tsv", e->stats.gemm_record, sizeof e->stats.gemm_record);
  for (int32_t k = 0; k < p->n_kernels && !s; ++k) {
    const kiln_program_gemm_t* g = &p->kernels[k].gemm;
    ocl_kernel_t* ek = &e->kernels[k];
    if (!g->valid) continue;
    kiln_ocl_gemm_choice_t ch;
    s = kiln_ocl_gemm_choose(d->ctx, d->q, d->base.info.name, d->drv, ek->k, ek->n_args, ek->global, ek->local, g,
                             e->stats.gemm_record, &ch);
    if (s) {
      s = kiln_status_annotate(s, "kernel '%s' (node '%s')", p->kernels[k].name, p->kernels[k].node_name);
      break;
    }
    ek->clblast = ch.clblast;
    ek->gemm = *g;
    e->stats.n_gemm_clblast += ch.clblast;
    e->stats.n_gemm_measured += ch.measured;
    e->stats.n_gemm_choices++;
  }
  if (s) {
    free_executable(d, e);
    return s;
  }
  e->stats.build_s = now_s() - t0;
  *out = e;
  return NULL;
}

void kiln_ocl_executable_destroy(kiln_device_t* base, kiln_device_executable_t* e) {
  free_executable(D(base), e);
}

void kiln_opencl_executable_stats(const kiln_device_executable_t* e, kiln_opencl_build_stats_t* out) {
  memset(out, 0, sizeof *out);
  if (e) *out = e->stats;
}

/* ---- registration (runtime/device_registry.h) -------------------------- */

static kiln_status_t ocl_api_open(int32_t index, const kiln_device_open_options_t* options,
                                  kiln_allocator_t allocator, kiln_device_t** out_device) {
  return kiln_opencl_device_create(index, allocator, out_device);
}

static void ocl_api_report(const kiln_device_executable_t* e, FILE* out) {
  kiln_opencl_build_stats_t st;
  kiln_opencl_executable_stats(e, &st);
  fprintf(out, "opencl program: built from %s in %.2f s%s\n",
          st.embedded_used ? "the module's program binary"
          : st.cache_hit   ? "the binary cache"
                           : "source",
          st.build_s,
          st.embedded_refused                    ? " (the module's binary was refused)"
          : st.n_embedded && !st.embedded_used ? " (the module's binaries are for other devices or drivers)"
          : st.driver_cache && !st.embedded_used ? " (the driver's own program cache serves rebuilds)"
                                                 : "");
  if (st.n_gemm_choices)
    fprintf(out, "opencl GEMM providers: %d of %d GEMMs on CLBlast, %d measured now%s%s\n", (int)st.n_gemm_clblast,
            (int)st.n_gemm_choices, (int)st.n_gemm_measured, st.gemm_record[0] ? "; record " : "", st.gemm_record);
}

static void ocl_api_units(const kiln_device_executable_t* e, int32_t* units, int32_t* reused) {
  *units = e->stats.units;
  *reused = e->stats.units_reused;
}

/* Drivers that finish a kernel's code at its first launch, for the launch's
 * geometry (PoCL compiles a work-group function per local size there),
 * would leave that work for every load: launch each kernel once, on zeroed
 * scratch buffers of its arguments' sizes, so the binary taken afterwards
 * holds the code a load runs. Zeros are an input like any other (indices
 * 0, status words left as they are); constants hold their values (the
 * run-time shapes of the conv templates are constants: zero sizes would
 * divide by zero). */
static kiln_status_t warm_kernels(ocl_device_t* d, const kiln_program_t* p, cl_program prog, kiln_progress_t* pr) {
  kiln_status_t s = NULL;
  for (int32_t k = 0; k < p->n_kernels && !s; ++k) {
    const kiln_program_kernel_t* pk = &p->kernels[k];
    cl_int err = CL_SUCCESS;
    cl_kernel kk = clCreateKernel(prog, pk->name, &err);
    if (!kk || err != CL_SUCCESS) return kiln_ocl_cl_fail(d, err, "clCreateKernel", pk->name);
    cl_mem* mems = calloc((size_t)pk->n_args + 1, sizeof(cl_mem));
    if (!mems) s = kiln_make_status(KILN_OUT_OF_MEMORY, "opencl: warming kernel '%s'", pk->name);
    for (int32_t a = 0; a < pk->n_args && !s; ++a) {
      const uint64_t bytes = p->buffers[pk->args[a]].bytes;
      const size_t n = bytes ? (size_t)bytes : 1;
      mems[a] = clCreateBuffer(d->ctx, CL_MEM_READ_WRITE, n, NULL, &err);
      const cl_uchar zero = 0;
      const kiln_program_buffer_t* b = &p->buffers[pk->args[a]];
      if (mems[a] && err == CL_SUCCESS) err = clEnqueueFillBuffer(d->q, mems[a], &zero, 1, 0, n, 0, NULL, NULL);
      if (err == CL_SUCCESS && b->kind == KILN_PB_CONST && bytes && p->weights && b->alias_of < 0)
        err = clEnqueueWriteBuffer(d->q, mems[a], CL_TRUE, 0, (size_t)bytes, p->weights + b->const_offset, 0, NULL,
                                   NULL);
      if (err == CL_SUCCESS) err = clSetKernelArg(kk, (cl_uint)a, sizeof(cl_mem), &mems[a]);
      if (err != CL_SUCCESS) s = kiln_ocl_cl_fail(d, err, "warming the kernels", pk->name);
    }
    if (!s) {
      size_t global[3], local[3];
      for (int i = 0; i < 3; ++i) {
        int64_t g = pk->groups[i] > 0 ? pk->groups[i] : 1, l = pk->local[i] > 0 ? pk->local[i] : 1;
        local[i] = (size_t)l;
        global[i] = (size_t)(g * l);
      }
      err = clEnqueueNDRangeKernel(d->q, kk, 3, NULL, global, local, 0, NULL, NULL);
      if (err == CL_SUCCESS) err = clFinish(d->q);
      if (err != CL_SUCCESS) s = kiln_ocl_cl_fail(d, err, "clEnqueueNDRangeKernel (warming)", pk->name);
    }
    for (int32_t a = 0; mems && a < pk->n_args; ++a)
      if (mems[a]) clReleaseMemObject(mems[a]);
    free(mems);
    clReleaseKernel(kk);
    if (!s) kiln_progress_step(pr, "kernels compiled");
  }
  return s;
}

/* `kiln compile -t opencl -o`: builds |p|'s source for |base| (through
 * the binary cache, as a load would) and adds the driver's binary to |p|
 * under this device's key; an entry |p| had under the same key is
 * replaced. */
static kiln_status_t ocl_api_embed(kiln_device_t* base, kiln_program_t* p, FILE* progress) {
  if (!kiln_opencl_is_device(base))
    return kiln_make_status(KILN_INVALID_ARGUMENT, "opencl: embedding binaries needs an OpenCL device");
  ocl_device_t* d = D(base);
  CHECK_LOST(d);
  if (!p->code.text || !p->code.text_len)
    return kiln_make_status(KILN_INVALID_ARGUMENT, "opencl: program '%s' has no OpenCL source",
                            p->model_name ? p->model_name : "");
  KILN_RETURN_IF_ERROR(check_extensions(d, p));
  /* A heterogeneous program is built per segment at load (runtime/
   * session_hetero.c), never as this whole program. */
  if (kiln_program_kernels_on(p, KILN_KERNEL_ON_HOST))
    return kiln_make_status(KILN_UNSUPPORTED,
                            "opencl: program '%s' runs some kernels on the CPU; its OpenCL part is built per "
                            "segment at load, no binary embedded",
                            p->model_name ? p->model_name : "");
  kiln_code_cache_t cache;
  bool cache_on = false;
  kiln_opencl_build_stats_t st;
  memset(&st, 0, sizeof st);
  cl_program prog = NULL;
  char name[48];
  kiln_progress_t pr;
  kiln_progress_start(&pr, progress, d->base.info.name, 1 + p->n_kernels, "building");
  KILN_RETURN_IF_ERROR(get_program(d, p, NULL, true, &cache, &cache_on, name, &st, &prog),
                       "embedding the program binary");
  kiln_progress_step(&pr, st.cache_hit ? "program from the binary cache" : "program built");
  kiln_status_t ws = warm_kernels(d, p, prog, &pr);
  if (ws) {
    kiln_progress_end(&pr);
    clReleaseProgram(prog);
    return kiln_status_annotate(ws, "embedding the program binary");
  }
  size_t len = 0;
  unsigned char* bin = NULL;
  cl_int err = clGetProgramInfo(prog, CL_PROGRAM_BINARY_SIZES, sizeof len, &len, NULL);
  if (err == CL_SUCCESS && len == 0) err = CL_INVALID_PROGRAM_EXECUTABLE;
  if (err == CL_SUCCESS && !(bin = malloc(len))) err = CL_OUT_OF_HOST_MEMORY;
  if (err == CL_SUCCESS) err = clGetProgramInfo(prog, CL_PROGRAM_BINARIES, sizeof bin, &bin, NULL);
  clReleaseProgram(prog);
  if (err != CL_SUCCESS) {
    free(bin);
    return kiln_ocl_cl_fail(d, err, "clGetProgramInfo(CL_PROGRAM_BINARIES)", p->model_name);
  }
  /* The cache gets the warmed binary too (a load without it still hits). */
  if (cache_on && name[0]) kiln_code_cache_write(&cache, name, bin, len);
  kiln_program_devbin_t key = {d->base.info.name, d->vendor, d->drv, (char*)KILN_OPENCL_KILN_VERSION,
                               kiln_module_crc64(0, p->code.text, (size_t)p->code.text_len), NULL, 0};
  /* Replaced, not duplicated: the loader takes the first match. */
  const kiln_program_devbin_t* old = find_devbin(d, p);
  kiln_status_t s = NULL;
  if (old) {
    int32_t at = (int32_t)(old - p->code.devbin);
    kiln_program_devbin_t* cur = &p->code.devbin[at];
    void* m = NULL;
    s = kiln_allocator_malloc(p->allocator, len, "device binary", &m);
    if (!s) {
      memcpy(m, bin, len);
      kiln_allocator_free(p->allocator, cur->bytes);
      cur->bytes = m;
      cur->len = len;
      cur->source_crc = key.source_crc;
    }
  } else {
    s = kiln_program_devbin_add(p, &key, bin, len);
  }
  free(bin);
  return s;
}

const kiln_device_api_t kiln_device_api_opencl = {
    .name = "opencl",
    .code_form = KILN_CODE_SOURCE,
    .shared_code = true,
    .open = ocl_api_open,
    .list = kiln_opencl_list_devices,
    .executable_report = ocl_api_report,
    .executable_units = ocl_api_units,
    .embed_binaries = ocl_api_embed,
};
