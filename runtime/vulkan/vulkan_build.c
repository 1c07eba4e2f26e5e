/* kiln Vulkan device, its build-time half: the instance and its validation
 * messenger, listing and creating devices (and the process's home of each
 * physical device, vk_home_t), the pipeline cache and building executables.
 * All of it runs while code is built or loaded, so it is compiled for size
 * (CMakeLists.txt); the run-time half is vulkan_device.c. */
#include "runtime/vulkan/vulkan_device_internal.h"

#include <pthread.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>
#include <vulkan/vulkan.h>

#include "runtime/code_cache.h"
#include "runtime/progress.h"
#include "runtime/vulkan/vulkan_texel.h"

static atomic_int g_validation_total;
static pthread_mutex_t g_homes_mu = PTHREAD_MUTEX_INITIALIZER;
static vk_home_t* g_homes;

/* ---- validation messages ---------------------------------------------- */

static VKAPI_ATTR VkBool32 VKAPI_CALL on_message(VkDebugUtilsMessageSeverityFlagBitsEXT sev,
                                                 VkDebugUtilsMessageTypeFlagsEXT type,
                                                 const VkDebugUtilsMessengerCallbackDataEXT* data,
                                                 void* user) {
  (void)type;
  atomic_int* counter = user;
  if (counter) atomic_fetch_add(counter, 1);
  atomic_fetch_add(&g_validation_total, 1);
  fprintf(stderr, "kiln vulkan validation: [%s] %s\n",
          (sev & VK_DEBUG_UTILS_MESSAGE_SEVERITY_ERROR_BIT_EXT) ? "error" : "warning",
          data && data->pMessage ? data->pMessage : "(no message)");
  return VK_FALSE;
}

int32_t kiln_vulkan_validation_messages(const kiln_device_t* d) {
  if (!d) return atomic_load(&g_validation_total);
  return atomic_load(&((const vk_dev_t*)d)->home->messages);
}

/* ---- instance and physical devices ------------------------------------ */

static bool has_layer(const char* name) {
  uint32_t n = 0;
  if (vkEnumerateInstanceLayerProperties(&n, NULL) != VK_SUCCESS || n == 0) return false;
  VkLayerProperties* l = calloc(n, sizeof *l);
  if (!l) return false;
  bool found = false;
  if (vkEnumerateInstanceLayerProperties(&n, l) == VK_SUCCESS)
    for (uint32_t i = 0; i < n && !found; ++i) found = strcmp(l[i].layerName, name) == 0;
  free(l);
  return found;
}

static bool has_instance_ext(const char* name) {
  uint32_t n = 0;
  if (vkEnumerateInstanceExtensionProperties(NULL, &n, NULL) != VK_SUCCESS || n == 0) return false;
  VkExtensionProperties* e = calloc(n, sizeof *e);
  if (!e) return false;
  bool found = false;
  if (vkEnumerateInstanceExtensionProperties(NULL, &n, e) == VK_SUCCESS)
    for (uint32_t i = 0; i < n && !found; ++i) found = strcmp(e[i].extensionName, name) == 0;
  free(e);
  return found;
}

static bool has_device_ext(VkPhysicalDevice p, const char* name) {
  uint32_t n = 0;
  if (vkEnumerateDeviceExtensionProperties(p, NULL, &n, NULL) != VK_SUCCESS || n == 0) return false;
  VkExtensionProperties* e = calloc(n, sizeof *e);
  if (!e) return false;
  bool found = false;
  if (vkEnumerateDeviceExtensionProperties(p, NULL, &n, e) == VK_SUCCESS)
    for (uint32_t i = 0; i < n && !found; ++i) found = strcmp(e[i].extensionName, name) == 0;
  free(e);
  return found;
}

/* Creates an instance (Vulkan 1.3 or 1.2 API when the loader has it, else
 * 1.1; *out_api says which: a device is used at min(that, its own));
 * with |counter| non-NULL the validation layer and a messenger feeding it. */
static kiln_status_t make_instance(atomic_int* counter, VkInstance* out,
                                   VkDebugUtilsMessengerEXT* out_msg,
                                   PFN_vkDestroyDebugUtilsMessengerEXT* out_destroy,
                                   uint32_t* out_api) {
  uint32_t api = VK_API_VERSION_1_1;
  PFN_vkEnumerateInstanceVersion ev =
      (PFN_vkEnumerateInstanceVersion)vkGetInstanceProcAddr(NULL, "vkEnumerateInstanceVersion");
  uint32_t loader = VK_API_VERSION_1_0;
  if (ev && ev(&loader) == VK_SUCCESS && loader >= VK_API_VERSION_1_2)
    api = loader >= VK_API_VERSION_1_3 ? VK_API_VERSION_1_3 : VK_API_VERSION_1_2;
  *out_api = api;
  if (loader < VK_API_VERSION_1_1)
    return kiln_make_status(KILN_NOT_FOUND, "vulkan: the loader supports Vulkan %u.%u, kiln needs 1.1",
                            VK_API_VERSION_MAJOR(loader), VK_API_VERSION_MINOR(loader));
  VkApplicationInfo app = {.sType = VK_STRUCTURE_TYPE_APPLICATION_INFO,
                           .pApplicationName = "kiln",
                           .pEngineName = "kiln",
                           .apiVersion = api};
  const char* layers[1] = {"VK_LAYER_KHRONOS_validation"};
  const char* exts[1] = {VK_EXT_DEBUG_UTILS_EXTENSION_NAME};
  VkDebugUtilsMessengerCreateInfoEXT mci = {
      .sType = VK_STRUCTURE_TYPE_DEBUG_UTILS_MESSENGER_CREATE_INFO_EXT,
      .messageSeverity = VK_DEBUG_UTILS_MESSAGE_SEVERITY_WARNING_BIT_EXT |
                         VK_DEBUG_UTILS_MESSAGE_SEVERITY_ERROR_BIT_EXT,
      .messageType = VK_DEBUG_UTILS_MESSAGE_TYPE_GENERAL_BIT_EXT |
                     VK_DEBUG_UTILS_MESSAGE_TYPE_VALIDATION_BIT_EXT |
                     VK_DEBUG_UTILS_MESSAGE_TYPE_PERFORMANCE_BIT_EXT,
      .pfnUserCallback = on_message,
      .pUserData = counter};
  VkInstanceCreateInfo ci = {.sType = VK_STRUCTURE_TYPE_INSTANCE_CREATE_INFO,
                             .pApplicationInfo = &app};
  if (counter) {
    if (!has_layer(layers[0]))
      return kiln_make_status(KILN_NOT_FOUND,
                              "vulkan: validation asked for but VK_LAYER_KHRONOS_validation is "
                              "not installed (Debian: vulkan-validationlayers)");
    if (!has_instance_ext(exts[0]))
      return kiln_make_status(KILN_NOT_FOUND, "vulkan: validation needs %s", exts[0]);
    ci.enabledLayerCount = 1;
    ci.ppEnabledLayerNames = layers;
    ci.enabledExtensionCount = 1;
    ci.ppEnabledExtensionNames = exts;
    ci.pNext = &mci; /* messages of vkCreateInstance / vkDestroyInstance too */
  }
  VkInstance inst = VK_NULL_HANDLE;
  VkResult r = vkCreateInstance(&ci, NULL, &inst);
  if (r == VK_ERROR_INCOMPATIBLE_DRIVER || r == VK_ERROR_INITIALIZATION_FAILED)
    return kiln_make_status(KILN_NOT_FOUND, "vulkan: no Vulkan driver (vkCreateInstance: %s)",
                            kiln_vk_result_name(r));
  if (r != VK_SUCCESS) return kiln_vk_fail(NULL, r, "vkCreateInstance");
  *out_msg = VK_NULL_HANDLE;
  *out_destroy = NULL;
  if (counter) {
    PFN_vkCreateDebugUtilsMessengerEXT create =
        (PFN_vkCreateDebugUtilsMessengerEXT)vkGetInstanceProcAddr(inst, "vkCreateDebugUtilsMessengerEXT");
    PFN_vkDestroyDebugUtilsMessengerEXT destroy =
        (PFN_vkDestroyDebugUtilsMessengerEXT)vkGetInstanceProcAddr(inst, "vkDestroyDebugUtilsMessengerEXT");
    if (!create || !destroy || create(inst, &mci, NULL, out_msg) != VK_SUCCESS) {
      vkDestroyInstance(inst, NULL);
      return kiln_make_status(KILN_DEVICE_ERROR, "vulkan: cannot create the debug-utils messenger");
    }
    *out_destroy = destroy;
  }
  *out = inst;
  return NULL;
}

static kiln_status_t physical_devices(VkInstance inst, VkPhysicalDevice** out, uint32_t* n) {
  *n = 0;
  *out = NULL;
  VkResult r = vkEnumeratePhysicalDevices(inst, n, NULL);
  if (r != VK_SUCCESS && r != VK_INCOMPLETE) return kiln_vk_fail(NULL, r, "vkEnumeratePhysicalDevices");
  if (*n == 0) return NULL;
  *out = calloc(*n, sizeof(VkPhysicalDevice));
  if (!*out) return kiln_make_status(KILN_OUT_OF_MEMORY, "vulkan: device list");
  r = vkEnumeratePhysicalDevices(inst, n, *out);
  if (r != VK_SUCCESS && r != VK_INCOMPLETE) {
    free(*out);
    *out = NULL;
    return kiln_vk_fail(NULL, r, "vkEnumeratePhysicalDevices");
  }
  return NULL;
}

typedef struct features_s {
  VkPhysicalDeviceFeatures2 f2;
  VkPhysicalDeviceVulkan11Features v11;
  VkPhysicalDeviceVulkan12Features v12;
  VkPhysicalDeviceShaderIntegerDotProductFeatures idot;
  bool has12, has_idot;
} features_t;

/* Queries the features kiln uses (Vulkan 1.2 structs need a 1.2 device;
 * the integer dot product's, 1.3 or its KHR extension). */
static void query_features(VkPhysicalDevice p, uint32_t api, features_t* f) {
  memset(f, 0, sizeof *f);
  f->f2.sType = VK_STRUCTURE_TYPE_PHYSICAL_DEVICE_FEATURES_2;
  f->v11.sType = VK_STRUCTURE_TYPE_PHYSICAL_DEVICE_VULKAN_1_1_FEATURES;
  f->v12.sType = VK_STRUCTURE_TYPE_PHYSICAL_DEVICE_VULKAN_1_2_FEATURES;
  f->idot.sType = VK_STRUCTURE_TYPE_PHYSICAL_DEVICE_SHADER_INTEGER_DOT_PRODUCT_FEATURES;
  f->has12 = api >= VK_API_VERSION_1_2;
  f->has_idot = f->has12 && (api >= VK_API_VERSION_1_3 ||
                             has_device_ext(p, VK_KHR_SHADER_INTEGER_DOT_PRODUCT_EXTENSION_NAME));
  if (f->has12) {
    f->f2.pNext = &f->v11;
    f->v11.pNext = &f->v12;
    if (f->has_idot) f->v12.pNext = &f->idot;
    vkGetPhysicalDeviceFeatures2(p, &f->f2);
  } else {
    vkGetPhysicalDeviceFeatures(p, &f->f2.features);
  }
}

typedef struct props_s {
  VkPhysicalDeviceProperties2 p2;
  VkPhysicalDeviceVulkan11Properties v11;
  VkPhysicalDeviceDriverProperties drv;
  VkPhysicalDeviceMaintenance3Properties m3;
} props_t;

static void query_props(VkPhysicalDevice p, uint32_t api, props_t* q) {
  memset(q, 0, sizeof *q);
  q->p2.sType = VK_STRUCTURE_TYPE_PHYSICAL_DEVICE_PROPERTIES_2;
  q->m3.sType = VK_STRUCTURE_TYPE_PHYSICAL_DEVICE_MAINTENANCE_3_PROPERTIES;
  q->p2.pNext = &q->m3;
  if (api >= VK_API_VERSION_1_2) {
    q->v11.sType = VK_STRUCTURE_TYPE_PHYSICAL_DEVICE_VULKAN_1_1_PROPERTIES;
    q->drv.sType = VK_STRUCTURE_TYPE_PHYSICAL_DEVICE_DRIVER_PROPERTIES;
    q->m3.pNext = &q->v11;
    q->v11.pNext = &q->drv;
  }
  vkGetPhysicalDeviceProperties2(p, &q->p2);
}

static const char* type_name(VkPhysicalDeviceType t) {
  switch (t) {
    case VK_PHYSICAL_DEVICE_TYPE_INTEGRATED_GPU: return "integrated-gpu";
    case VK_PHYSICAL_DEVICE_TYPE_DISCRETE_GPU: return "discrete-gpu";
    case VK_PHYSICAL_DEVICE_TYPE_VIRTUAL_GPU: return "virtual-gpu";
    case VK_PHYSICAL_DEVICE_TYPE_CPU: return "cpu";
    default: return "other";
  }
}

static int32_t compute_queue_family(VkPhysicalDevice p, uint32_t* ts_bits) {
  uint32_t n = 0;
  vkGetPhysicalDeviceQueueFamilyProperties(p, &n, NULL);
  VkQueueFamilyProperties q[32];
  if (n > 32) n = 32;
  vkGetPhysicalDeviceQueueFamilyProperties(p, &n, q);
  int32_t best = -1;
  for (uint32_t i = 0; i < n; ++i) {
    if (!(q[i].queueFlags & VK_QUEUE_COMPUTE_BIT) || q[i].queueCount == 0) continue;
    /* A compute-only family first (async compute on real GPUs). */
    if (best < 0 || !(q[i].queueFlags & VK_QUEUE_GRAPHICS_BIT)) best = (int32_t)i;
  }
  if (best >= 0 && ts_bits) *ts_bits = q[best].timestampValidBits;
  return best;
}

kiln_status_t kiln_vulkan_list_devices(FILE* out) {
  VkInstance inst;
  VkDebugUtilsMessengerEXT msg;
  PFN_vkDestroyDebugUtilsMessengerEXT destroy;
  uint32_t iapi = 0;
  KILN_RETURN_IF_ERROR(make_instance(NULL, &inst, &msg, &destroy, &iapi));
  VkPhysicalDevice* pd = NULL;
  uint32_t n = 0;
  kiln_status_t s = physical_devices(inst, &pd, &n);
  if (!s && n == 0) fprintf(out, "vulkan: no devices\n");
  for (uint32_t i = 0; !s && i < n; ++i) {
    VkPhysicalDeviceProperties bp;
    vkGetPhysicalDeviceProperties(pd[i], &bp);
    uint32_t api = bp.apiVersion < iapi ? bp.apiVersion : iapi;
    props_t q;
    features_t f;
    query_props(pd[i], api, &q);
    query_features(pd[i], api, &f);
    const VkPhysicalDeviceProperties* p = &q.p2.properties;
    char drv[300];
    if (api >= VK_API_VERSION_1_2)
      snprintf(drv, sizeof drv, "%.100s %.150s", q.drv.driverName, q.drv.driverInfo);
    else
      snprintf(drv, sizeof drv, "driver 0x%x", p->driverVersion);
    fprintf(out,
            "vulkan:%u  %s  type=%s  api=%u.%u.%u  driver=%s  fp16=%s  16bit-storage=%s  "
            "int8=%s  int-dot=%s  subgroup=%u  max-workgroup=%u (%u x %u x %u)\n",
            i, p->deviceName, type_name(p->deviceType), VK_API_VERSION_MAJOR(p->apiVersion),
            VK_API_VERSION_MINOR(p->apiVersion), VK_API_VERSION_PATCH(p->apiVersion), drv,
            f.v12.shaderFloat16 ? "yes" : "no", f.v11.storageBuffer16BitAccess ? "yes" : "no",
            f.v12.shaderInt8 && f.v12.storageBuffer8BitAccess ? "yes" : "no",
            f.has_idot && f.idot.shaderIntegerDotProduct ? "yes" : "no", q.v11.subgroupSize,
            p->limits.maxComputeWorkGroupInvocations, p->limits.maxComputeWorkGroupSize[0],
            p->limits.maxComputeWorkGroupSize[1], p->limits.maxComputeWorkGroupSize[2]);
  }
  free(pd);
  vkDestroyInstance(inst, NULL);
  return s;
}

/* ---- device creation --------------------------------------------------- */

/* Whether the comma-separated KILN_VULKAN_FEATURES list |list| (NULL:
 * unset) holds the word |w| itself ("no-subgroup" is not in
 * "no-subgroup-arith"). */
static bool hides(const char* list, const char* w) {
  const size_t n = strlen(w);
  for (const char* p = list; p && (p = strstr(p, w)); p += n)
    if ((p == list || p[-1] == ',') && (p[n] == 0 || p[n] == ',')) return true;
  return false;
}

kiln_status_t kiln_vulkan_device_create(int32_t index, bool validation, kiln_allocator_t al,
                                        kiln_device_t** out) {
  const char* env = getenv("KILN_VULKAN_VALIDATION");
  if (env && strcmp(env, "1") == 0) validation = true;
  vk_dev_t* d = NULL;
  KILN_RETURN_IF_ERROR(kiln_allocator_malloc(al, sizeof(vk_dev_t), "vulkan device", (void**)&d));
  memset(d, 0, sizeof *d);
  kiln_device_init_base(&d->base, &kiln_vk_vtable, al);
  /* this process's home of the device (vk_home_t), else a new one, linked
   * once its VkDevice exists; opens are serialised by g_homes_mu */
  pthread_mutex_lock(&g_homes_mu);
  vk_home_t* h = g_homes;
  while (h && (h->index != index || h->validation != validation || atomic_load(&h->lost))) h = h->next;
  const bool fresh = !h;
  kiln_status_t s = NULL;
  if (h) {
    h->refs++;
  } else if (!(h = calloc(1, sizeof *h))) {
    s = kiln_make_status(KILN_OUT_OF_MEMORY, "vulkan: device");
  } else {
    *h = (vk_home_t){.index = index, .validation = validation, .refs = 1};
    pthread_mutex_init(&h->queue_mu, NULL);
    pthread_mutex_init(&h->memo_mu, NULL);
    s = make_instance(validation ? &h->messages : NULL, &h->instance, &h->messenger, &h->destroy_messenger,
                      &h->iapi);
  }
  d->home = h;
  const uint32_t iapi = h ? h->iapi : 0;
  VkPhysicalDevice* pd = NULL;
  uint32_t n = 0;
  if (s || (s = physical_devices(h->instance, &pd, &n))) goto fail;
  if (n == 0) {
    s = kiln_make_status(KILN_NOT_FOUND, "vulkan: no Vulkan devices");
    goto fail;
  }
  if (index < 0 || (uint32_t)index >= n) {
    s = kiln_make_status(KILN_NOT_FOUND, "vulkan: no device %d (%u device%s)", (int)index, n,
                         n == 1 ? "" : "s");
    free(pd);
    goto fail;
  }
  d->phys = pd[index];
  free(pd);

  vkGetPhysicalDeviceProperties(d->phys, &d->props);
  vkGetPhysicalDeviceMemoryProperties(d->phys, &d->mem);
  if (d->props.apiVersion < VK_API_VERSION_1_1) {
    s = kiln_make_status(KILN_UNSUPPORTED, "vulkan: device '%s' supports Vulkan %u.%u, kiln needs 1.1",
                         d->props.deviceName, VK_API_VERSION_MAJOR(d->props.apiVersion),
                         VK_API_VERSION_MINOR(d->props.apiVersion));
    goto fail;
  }
  /* What the instance lets this device use. */
  uint32_t api = d->props.apiVersion < iapi ? d->props.apiVersion : iapi;
  props_t q;
  features_t have;
  query_props(d->phys, api, &q);
  query_features(d->phys, api, &have);
  d->loop_limit = q.drv.driverID == VK_DRIVER_ID_MESA_LLVMPIPE ? 65535 : 0;
  int32_t qf = compute_queue_family(d->phys, &d->timestamp_bits);
  if (qf < 0) {
    s = kiln_make_status(KILN_UNSUPPORTED, "vulkan: device '%s' has no compute queue",
                         d->props.deviceName);
    goto fail;
  }
  d->queue_family = (uint32_t)qf;

  /* Enable exactly what kiln's shaders can use and the device has. */
  features_t en;
  memset(&en, 0, sizeof en);
  en.f2.sType = VK_STRUCTURE_TYPE_PHYSICAL_DEVICE_FEATURES_2;
  en.v11.sType = VK_STRUCTURE_TYPE_PHYSICAL_DEVICE_VULKAN_1_1_FEATURES;
  en.v12.sType = VK_STRUCTURE_TYPE_PHYSICAL_DEVICE_VULKAN_1_2_FEATURES;
  en.f2.features.shaderInt64 = have.f2.features.shaderInt64;
  en.f2.features.shaderInt16 = have.f2.features.shaderInt16;
  if (have.has12) {
    en.f2.pNext = &en.v11;
    en.v11.pNext = &en.v12;
    en.v11.storageBuffer16BitAccess = have.v11.storageBuffer16BitAccess;
    en.v12.shaderFloat16 = have.v12.shaderFloat16;
    en.v12.shaderInt8 = have.v12.shaderInt8;
    en.v12.storageBuffer8BitAccess = have.v12.storageBuffer8BitAccess;
  }
  en.idot.sType = VK_STRUCTURE_TYPE_PHYSICAL_DEVICE_SHADER_INTEGER_DOT_PRODUCT_FEATURES;
  const bool idot = have.has_idot && have.idot.shaderIntegerDotProduct;
  const char* dexts[2];
  uint32_t n_dexts = 0;
  if (api < VK_API_VERSION_1_3 &&
      has_device_ext(d->phys, VK_EXT_PIPELINE_CREATION_FEEDBACK_EXTENSION_NAME)) {
    dexts[n_dexts++] = VK_EXT_PIPELINE_CREATION_FEEDBACK_EXTENSION_NAME;
    d->creation_feedback = true;
  } else if (api >= VK_API_VERSION_1_3) {
    d->creation_feedback = true; /* core in 1.3 */
  }
  if (idot) {
    en.idot.shaderIntegerDotProduct = VK_TRUE;
    en.v12.pNext = &en.idot;
    if (api < VK_API_VERSION_1_3) dexts[n_dexts++] = VK_KHR_SHADER_INTEGER_DOT_PRODUCT_EXTENSION_NAME;
  }
  float prio = 1.0f;
  VkDeviceQueueCreateInfo qci = {.sType = VK_STRUCTURE_TYPE_DEVICE_QUEUE_CREATE_INFO,
                                 .queueFamilyIndex = d->queue_family,
                                 .queueCount = 1,
                                 .pQueuePriorities = &prio};
  VkDeviceCreateInfo dci = {.sType = VK_STRUCTURE_TYPE_DEVICE_CREATE_INFO,
                            .pNext = &en.f2,
                            .queueCreateInfoCount = 1,
                            .pQueueCreateInfos = &qci,
                            .enabledExtensionCount = n_dexts,
                            .ppEnabledExtensionNames = dexts};
  VkResult r = VK_SUCCESS;
  if (fresh && (r = vkCreateDevice(d->phys, &dci, NULL, &h->dev)) != VK_SUCCESS) {
    h->dev = VK_NULL_HANDLE;
    s = kiln_vk_fail(NULL, r, "vkCreateDevice");
    goto fail;
  }
  if (fresh) vkGetDeviceQueue(h->dev, d->queue_family, 0, &h->queue);
  d->dev = h->dev, d->queue = h->queue;
  VkCommandPoolCreateInfo pci = {.sType = VK_STRUCTURE_TYPE_COMMAND_POOL_CREATE_INFO,
                                 .flags = VK_COMMAND_POOL_CREATE_RESET_COMMAND_BUFFER_BIT,
                                 .queueFamilyIndex = d->queue_family};
  if ((r = vkCreateCommandPool(d->dev, &pci, NULL, &d->pool)) != VK_SUCCESS) {
    s = kiln_vk_fail(NULL, r, "vkCreateCommandPool");
    goto fail;
  }
  VkCommandBufferAllocateInfo cai = {.sType = VK_STRUCTURE_TYPE_COMMAND_BUFFER_ALLOCATE_INFO,
                                     .commandPool = d->pool,
                                     .level = VK_COMMAND_BUFFER_LEVEL_PRIMARY,
                                     .commandBufferCount = 1};
  VkFenceCreateInfo fci = {.sType = VK_STRUCTURE_TYPE_FENCE_CREATE_INFO};
  if ((r = vkAllocateCommandBuffers(d->dev, &cai, &d->xfer_cb)) != VK_SUCCESS ||
      (r = vkCreateFence(d->dev, &fci, NULL, &d->xfer_fence)) != VK_SUCCESS) {
    s = kiln_vk_fail(NULL, r, "transfer command buffer");
    goto fail;
  }

  /* The head's info. */
  kiln_device_info_t* info = &d->base.info;
  snprintf(info->api, sizeof info->api, "vulkan");
  snprintf(info->name, sizeof info->name, "%s", d->props.deviceName);
  info->cpu_backed = d->props.deviceType == VK_PHYSICAL_DEVICE_TYPE_CPU;
  if (api >= VK_API_VERSION_1_2)
    snprintf(info->driver, sizeof info->driver, "%.100s %.120s (Vulkan %u.%u.%u)", q.drv.driverName,
             q.drv.driverInfo, VK_API_VERSION_MAJOR(d->props.apiVersion),
             VK_API_VERSION_MINOR(d->props.apiVersion), VK_API_VERSION_PATCH(d->props.apiVersion));
  else
    snprintf(info->driver, sizeof info->driver, "driver 0x%x (Vulkan %u.%u)",
             d->props.driverVersion, VK_API_VERSION_MAJOR(d->props.apiVersion),
             VK_API_VERSION_MINOR(d->props.apiVersion));
  info->fp16_storage = en.v11.storageBuffer16BitAccess;
  info->fp16_arith = en.v12.shaderFloat16;
  info->int8 = en.v12.shaderInt8 && en.v12.storageBuffer8BitAccess;
  info->timestamps = d->timestamp_bits > 0 && d->props.limits.timestampPeriod > 0;
  d->max_alloc = q.m3.maxMemoryAllocationSize ? q.m3.maxMemoryAllocationSize : (1ull << 31);
  info->max_alloc_bytes = d->max_alloc;
  uint64_t total = 0;
  for (uint32_t i = 0; i < d->mem.memoryHeapCount; ++i)
    if (d->mem.memoryHeaps[i].flags & VK_MEMORY_HEAP_DEVICE_LOCAL_BIT) total += d->mem.memoryHeaps[i].size;
  info->total_bytes = total;
  /* buffers start where both a storage descriptor and a texel view may */
  info->buffer_alignment = d->props.limits.minStorageBufferOffsetAlignment
                               ? d->props.limits.minStorageBufferOffsetAlignment : 1;
  if (d->props.limits.minTexelBufferOffsetAlignment > info->buffer_alignment)
    info->buffer_alignment = d->props.limits.minTexelBufferOffsetAlignment;
  info->max_workgroup_size = d->props.limits.maxComputeWorkGroupInvocations;
  info->local_mem_bytes = d->props.limits.maxComputeSharedMemorySize; /* the tuner's limit */
  info->loop_limit = d->loop_limit;
  info->subgroup_size = (int32_t)q.v11.subgroupSize;
  info->compute_units = 0;
  /* subgroup properties come with Vulkan 1.2's query (query_props); older
   * devices count as without ballot (the shared-memory shaders) */
  info->shader_int64 = en.f2.features.shaderInt64;
  info->subgroup_ballot = api >= VK_API_VERSION_1_2 && (q.v11.subgroupSupportedStages & VK_SHADER_STAGE_COMPUTE_BIT) &&
                          (q.v11.subgroupSupportedOperations & VK_SUBGROUP_FEATURE_BALLOT_BIT);
  info->subgroup_arith = api >= VK_API_VERSION_1_2 && (q.v11.subgroupSupportedStages & VK_SHADER_STAGE_COMPUTE_BIT) &&
                         (q.v11.subgroupSupportedOperations & VK_SUBGROUP_FEATURE_ARITHMETIC_BIT);
  const char* hide = getenv("KILN_VULKAN_FEATURES");
  if (hides(hide, "no-int64")) info->shader_int64 = false;
  if (hides(hide, "no-subgroup")) info->subgroup_ballot = info->subgroup_arith = false; /* both */
  if (hides(hide, "no-subgroup-arith")) info->subgroup_arith = false;
  info->int_dot = idot && !hides(hide, "no-idot");
  info->max_texels = d->props.limits.maxTexelBufferElements;
  VkFormatProperties h16;
  vkGetPhysicalDeviceFormatProperties(d->phys, VK_FORMAT_R16G16B16A16_SFLOAT, &h16);
  info->texel_f16 = (h16.bufferFeatures & VK_FORMAT_FEATURE_STORAGE_TEXEL_BUFFER_BIT) && !hides(hide, "no-texel-f16");
  const char* tx = hide ? strstr(hide, "texels=") : NULL;
  if (tx) {
    const unsigned long long n = strtoull(tx + 7, NULL, 10);
    if (n > 0 && n < info->max_texels) d->props.limits.maxTexelBufferElements = (uint32_t)n, info->max_texels = n;
  }
  info->max_binding_bytes = d->props.limits.maxStorageBufferRange;
  const char* bd = hide ? strstr(hide, "binding=") : NULL;
  if (bd) {
    const unsigned long long n = strtoull(bd + 8, NULL, 10);
    if (n > 0 && n < info->max_binding_bytes)
      d->props.limits.maxStorageBufferRange = (uint32_t)n, info->max_binding_bytes = n;
  }
  const char* gr = hide ? strstr(hide, "groups=") : NULL;
  const unsigned long long gn = gr ? strtoull(gr + 7, NULL, 10) : 0;
  for (int j = 0; j < 3; ++j) {
    if (gn > 0 && gn < d->props.limits.maxComputeWorkGroupCount[j])
      d->props.limits.maxComputeWorkGroupCount[j] = (uint32_t)gn;
    info->max_groups[j] = d->props.limits.maxComputeWorkGroupCount[j];
  }
  if (fresh) h->next = g_homes, g_homes = h;
  pthread_mutex_unlock(&g_homes_mu);
  *out = &d->base;
  return NULL;
fail:
  pthread_mutex_unlock(&g_homes_mu);
  kiln_vk_destroy(&d->base);
  return s;
}

static void shared_release(VkDevice dev, vk_shared_t* sh) {
  if (!sh || atomic_fetch_sub(&sh->refs, 1) != 1) return;
  if (sh->pipe) vkDestroyPipeline(dev, sh->pipe, NULL);
  if (sh->layout) vkDestroyPipelineLayout(dev, sh->layout, NULL);
  if (sh->dsl) vkDestroyDescriptorSetLayout(dev, sh->dsl, NULL);
  if (sh->module) vkDestroyShaderModule(dev, sh->module, NULL);
  free(sh->blob);
  free(sh);
}

/* Drops the memo's references (called with memo_mu held, or by the last
 * device of the home). */
static void memo_clear(vk_home_t* h) {
  for (int32_t i = 0; i < h->n_memo; ++i) shared_release(h->dev, h->memo[i]);
  free(h->memo);
  h->memo = NULL;
  h->n_memo = h->cap_memo = 0;
}

void kiln_vk_destroy(kiln_device_t* base) {
  vk_dev_t* d = D(base);
  if (!d) return;
  if (d->dev) {
    kiln_vk_device_idle(d);
    if (d->staging_map) vkUnmapMemory(d->dev, d->staging_mem);
    if (d->staging) vkDestroyBuffer(d->dev, d->staging, NULL);
    if (d->staging_mem) vkFreeMemory(d->dev, d->staging_mem, NULL);
    if (d->xfer_fence) vkDestroyFence(d->dev, d->xfer_fence, NULL);
    if (d->pool) vkDestroyCommandPool(d->dev, d->pool, NULL);
  }
  /* the last device of its home destroys the memo, VkDevice and instance */
  vk_home_t* h = d->home;
  pthread_mutex_lock(&g_homes_mu);
  const bool last = h && --h->refs == 0;
  for (vk_home_t** p = &g_homes; last && *p; p = &(*p)->next)
    if (*p == h) {
      *p = h->next;
      break;
    }
  pthread_mutex_unlock(&g_homes_mu);
  if (last) {
    if (h->dev) {
      vkDeviceWaitIdle(h->dev);
      memo_clear(h);
      vkDestroyDevice(h->dev, NULL);
    }
    if (h->instance) {
      if (h->messenger && h->destroy_messenger) h->destroy_messenger(h->instance, h->messenger, NULL);
      vkDestroyInstance(h->instance, NULL);
    }
    pthread_mutex_destroy(&h->queue_mu);
    pthread_mutex_destroy(&h->memo_mu);
    free(h);
  }
  kiln_allocator_free(d->base.allocator, d);
}

void kiln_vulkan_last_cache_stats(const kiln_device_t* d, kiln_vulkan_cache_stats_t* out) {
  *out = ((const vk_dev_t*)d)->last_cache;
}

/* The entry name of this device's pipeline cache in the code cache's
 * "vulkan" folder: one file per device and driver (pipelineCacheUUID). */
static void cache_name(const vk_dev_t* d, char* out, size_t n) {
  char uuid[2 * VK_UUID_SIZE + 1];
  for (int i = 0; i < VK_UUID_SIZE; ++i) snprintf(uuid + 2 * i, 3, "%02x", d->props.pipelineCacheUUID[i]);
  snprintf(out, n, "pipelines-%04x-%04x-%s.bin", d->props.vendorID, d->props.deviceID, uuid);
}

/* Reads the entry: the driver's VkPipelineCache data, whose header must name
 * this device and driver. A missing entry is NULL; an unusable one (the code
 * cache rejected it, or it is foreign) is NULL with *corrupt set and a
 * warning. */
static uint8_t* cache_load(const vk_dev_t* d, const kiln_code_cache_t* cache, const char* name,
                           size_t* out_len, bool* corrupt) {
  *out_len = 0;
  uint8_t* data = NULL;
  size_t len = 0;
  kiln_code_cache_result_t r = kiln_code_cache_read(cache, name, &data, &len);
  *corrupt = r == KILN_CODE_CACHE_REJECTED;
  if (r != KILN_CODE_CACHE_HIT) return NULL;
  const char* why = NULL;
  if (len < 32 || len > (256ull << 20)) {
    why = "bad length";
  } else {
    uint32_t hl, ver, vendor, device;
    memcpy(&hl, data, 4);
    memcpy(&ver, data + 4, 4);
    memcpy(&vendor, data + 8, 4);
    memcpy(&device, data + 12, 4);
    if (hl < 32 || ver != VK_PIPELINE_CACHE_HEADER_VERSION_ONE || vendor != d->props.vendorID ||
        device != d->props.deviceID || memcmp(data + 16, d->props.pipelineCacheUUID, VK_UUID_SIZE) != 0)
      why = "made by another device or driver";
  }
  if (why) {
    fprintf(stderr, "kiln: warning: ignoring pipeline cache %s/%s (%s)\n", cache->dir, name, why);
    free(data);
    *corrupt = true;
    return NULL;
  }
  *out_len = len;
  return data;
}

/* Saves |pc| as the entry; the bytes written (0 when nothing was: a cache
 * that cannot be written only costs time next run, and it warned). */
static uint64_t cache_save(vk_dev_t* d, VkPipelineCache pc, const kiln_code_cache_t* cache,
                           const char* name) {
  size_t n = 0;
  if (vkGetPipelineCacheData(d->dev, pc, &n, NULL) != VK_SUCCESS || n == 0) return 0;
  uint8_t* data = malloc(n);
  if (!data) return 0;
  bool ok = vkGetPipelineCacheData(d->dev, pc, &n, data) == VK_SUCCESS &&
            kiln_code_cache_write(cache, name, data, n);
  free(data);
  return ok ? n : 0;
}

/* ---- executables ------------------------------------------------------- */

static double now_s(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

void kiln_vk_executable_destroy(kiln_device_t* base, kiln_device_executable_t* e) {
  if (!e) return;
  vk_dev_t* d = D(base);
  for (int32_t i = 0; i < e->n; ++i) {
    vk_kernel_t* k = &e->k[i];
    if (k->owner == i && k->shared) {
      shared_release(d->dev, k->shared);
    } else if (k->owner == i) {
      if (k->pipe) vkDestroyPipeline(d->dev, k->pipe, NULL);
      if (k->layout) vkDestroyPipelineLayout(d->dev, k->layout, NULL);
      if (k->dsl) vkDestroyDescriptorSetLayout(d->dev, k->dsl, NULL);
      if (k->module) vkDestroyShaderModule(d->dev, k->module, NULL);
    }
    kiln_allocator_free(base->allocator, k->name);
  }
  kiln_allocator_free(base->allocator, e->k);
  kiln_allocator_free(base->allocator, e);
}

/* Module, layouts and pipeline of kernel |i|. */
static kiln_status_t build_kernel(vk_dev_t* d, const kiln_program_t* p, int32_t i, VkPipelineCache pc,
                                  vk_kernel_t* k, bool* hit) {
  const uint8_t* blob = p->code.blobs[i];
  uint64_t len = p->code.blob_lens[i];
  uint32_t magic = 0;
  if (blob && len >= 20) memcpy(&magic, blob, 4);
  if (!blob || len < 20 || len % 4 != 0 || magic != 0x07230203u)
    return kiln_make_status(KILN_INVALID_ARGUMENT,
                            "vulkan: kernel '%s': code blob %d (%llu bytes) is not a SPIR-V binary",
                            k->name, (int)i, (unsigned long long)len);
  if ((uint32_t)k->n_args > d->props.limits.maxPerStageDescriptorStorageBuffers)
    return kiln_make_status(KILN_UNSUPPORTED,
                            "vulkan: kernel '%s' has %d buffer parameters, device '%s' allows %u",
                            k->name, (int)k->n_args, d->props.deviceName,
                            d->props.limits.maxPerStageDescriptorStorageBuffers);
  VkShaderModuleCreateInfo smi = {.sType = VK_STRUCTURE_TYPE_SHADER_MODULE_CREATE_INFO,
                                  .codeSize = (size_t)len,
                                  .pCode = (const uint32_t*)blob};
  KILN_RETURN_IF_ERROR(
      kiln_vk_texel_bindings((const uint32_t*)blob, (size_t)(len / 4), k->name, &k->texel, &k->stexel, &k->htexel));
  if (k->htexel && !d->base.info.texel_f16)
    return kiln_make_status(KILN_UNSUPPORTED, "vulkan: kernel '%s' binds rgba16f texel buffers, device '%s' has no "
                            "R16G16B16A16_SFLOAT storage texel buffers", k->name, d->props.deviceName);
  VkResult r = vkCreateShaderModule(d->dev, &smi, NULL, &k->module);
  if (r != VK_SUCCESS)
    return kiln_status_annotate(kiln_vk_fail(d, r, "vkCreateShaderModule"), "kernel '%s'", k->name);
  VkDescriptorSetLayoutBinding bind[64];
  VkDescriptorSetLayoutBinding* bp = bind;
  if (k->n_args > 64) {
    bp = calloc((size_t)k->n_args, sizeof *bp);
    if (!bp) return kiln_make_status(KILN_OUT_OF_MEMORY, "vulkan: kernel '%s' bindings", k->name);
  }
  for (int32_t j = 0; j < k->n_args; ++j)
    bp[j] = (VkDescriptorSetLayoutBinding){.binding = (uint32_t)j,
                                           .descriptorType = j < 64 && (k->texel >> j & 1)
                                                                 ? VK_DESCRIPTOR_TYPE_UNIFORM_TEXEL_BUFFER
                                                             : j < 64 && (k->stexel >> j & 1)
                                                                 ? VK_DESCRIPTOR_TYPE_STORAGE_TEXEL_BUFFER
                                                                 : VK_DESCRIPTOR_TYPE_STORAGE_BUFFER,
                                           .descriptorCount = 1,
                                           .stageFlags = VK_SHADER_STAGE_COMPUTE_BIT};
  VkDescriptorSetLayoutCreateInfo dli = {.sType = VK_STRUCTURE_TYPE_DESCRIPTOR_SET_LAYOUT_CREATE_INFO,
                                         .bindingCount = (uint32_t)k->n_args,
                                         .pBindings = bp};
  r = vkCreateDescriptorSetLayout(d->dev, &dli, NULL, &k->dsl);
  if (bp != bind) free(bp);
  if (r != VK_SUCCESS)
    return kiln_status_annotate(kiln_vk_fail(d, r, "vkCreateDescriptorSetLayout"), "kernel '%s'", k->name);
  VkPipelineLayoutCreateInfo pli = {.sType = VK_STRUCTURE_TYPE_PIPELINE_LAYOUT_CREATE_INFO,
                                    .setLayoutCount = 1,
                                    .pSetLayouts = &k->dsl};
  r = vkCreatePipelineLayout(d->dev, &pli, NULL, &k->layout);
  if (r != VK_SUCCESS)
    return kiln_status_annotate(kiln_vk_fail(d, r, "vkCreatePipelineLayout"), "kernel '%s'", k->name);
  VkPipelineCreationFeedback fb = {0};
  VkPipelineCreationFeedbackCreateInfo fbi = {
      .sType = VK_STRUCTURE_TYPE_PIPELINE_CREATION_FEEDBACK_CREATE_INFO,
      .pPipelineCreationFeedback = &fb};
  VkComputePipelineCreateInfo cpi = {
      .sType = VK_STRUCTURE_TYPE_COMPUTE_PIPELINE_CREATE_INFO,
      .pNext = d->creation_feedback ? &fbi : NULL,
      .stage = {.sType = VK_STRUCTURE_TYPE_PIPELINE_SHADER_STAGE_CREATE_INFO,
                .stage = VK_SHADER_STAGE_COMPUTE_BIT,
                .module = k->module,
                .pName = "main"},
      .layout = k->layout,
      .basePipelineIndex = -1};
  r = vkCreateComputePipelines(d->dev, pc, 1, &cpi, NULL, &k->pipe);
  if (r != VK_SUCCESS) {
    k->pipe = VK_NULL_HANDLE;
    return kiln_status_annotate(kiln_vk_fail(d, r, "vkCreateComputePipelines"), "kernel '%s'", k->name);
  }
  *hit = (fb.flags & VK_PIPELINE_CREATION_FEEDBACK_VALID_BIT) &&
         (fb.flags & VK_PIPELINE_CREATION_FEEDBACK_APPLICATION_PIPELINE_CACHE_HIT_BIT);
  return NULL;
}

/* The pipelines of one executable, built by several threads: each takes the
 * next kernel that owns its pipeline. The driver's create calls are
 * thread-safe on one device, the pipeline cache synchronises itself (no
 * EXTERNALLY_SYNCHRONIZED flag), and lavapipe compiles each pipeline with
 * LLVM, so a model's cold load scales with the cores. */
#define KILN_VK_MAX_BUILD_THREADS 16

typedef struct build_job_s {
  vk_dev_t* d;
  const kiln_program_t* p;
  VkPipelineCache pc;
  kiln_device_executable_t* e;
  kiln_progress_t* pr; /* stepped under mu */
  atomic_int next, built, hits;
  atomic_bool stop, oom;
  pthread_mutex_t mu;  /* errors, first_error */
  kiln_status_t* errors; /* per kernel, allocated at the first failure */
  kiln_status_t first_error;
  int32_t first_index;
} build_job_t;

static void* build_worker(void* arg) {
  build_job_t* j = arg;
  for (;;) {
    int32_t i = atomic_fetch_add(&j->next, 1);
    if (i >= j->e->n || atomic_load(&j->stop)) return NULL;
    vk_kernel_t* k = &j->e->k[i];
    if (k->owner != i || k->shared) continue; /* a copy, or reused (reuse_code) */
    bool hit = false;
    kiln_status_t s = build_kernel(j->d, j->p, i, j->pc, k, &hit);
    if (!s) {
      atomic_fetch_add(&j->built, 1);
      atomic_fetch_add(&j->hits, hit);
      pthread_mutex_lock(&j->mu);
      kiln_progress_step(j->pr, "pipelines built");
      pthread_mutex_unlock(&j->mu);
      continue;
    }
    /* Keep the failure of the lowest-numbered kernel, as a serial build
     * would report; stop taking new kernels. */
    atomic_store(&j->stop, true);
    pthread_mutex_lock(&j->mu);
    if (!j->errors) j->errors = calloc((size_t)j->e->n, sizeof *j->errors);
    if (!j->errors) {
      atomic_store(&j->oom, true);
      kiln_status_free(s);
    } else {
      j->errors[i] = s;
      if (!j->first_error || i < j->first_index) j->first_error = s, j->first_index = i;
    }
    pthread_mutex_unlock(&j->mu);
  }
}

/* $KILN_VULKAN_BUILD_THREADS (1..16; 1: one at a time) or the online CPUs,
 * at most one per pipeline to build. */
static int32_t build_threads(int32_t pipelines) {
  long n = sysconf(_SC_NPROCESSORS_ONLN);
  const char* env = getenv("KILN_VULKAN_BUILD_THREADS");
  if (env && *env) {
    char* end = NULL;
    long v = strtol(env, &end, 10);
    if (*end == 0 && v >= 1 && v <= KILN_VK_MAX_BUILD_THREADS) n = v;
  }
  if (n > KILN_VK_MAX_BUILD_THREADS) n = KILN_VK_MAX_BUILD_THREADS;
  if (n > pipelines) n = pipelines;
  return n < 1 ? 1 : (int32_t)n;
}

kiln_status_t kiln_vk_executable_create(kiln_device_t* base, const kiln_program_t* p,
                                        const kiln_device_build_options_t* o,
                                        kiln_device_executable_t** out) {
  vk_dev_t* d = D(base);
  if (d->lost) return kiln_vk_lost_status();
  if (!p) return kiln_make_status(KILN_INVALID_ARGUMENT, "vulkan: NULL program");
  if (p->n_kernels > 0 && (p->code.n_blobs != p->n_kernels || !p->code.blobs || !p->code.blob_lens))
    return kiln_make_status(KILN_INVALID_ARGUMENT,
                            "vulkan: program '%s' has %d SPIR-V binaries for %d kernels",
                            p->model_name ? p->model_name : "?", (int)p->code.n_blobs,
                            (int)p->n_kernels);
  kiln_allocator_t al = base->allocator;
  kiln_device_executable_t* e = NULL;
  KILN_RETURN_IF_ERROR(kiln_allocator_malloc(al, sizeof *e, "vulkan executable", (void**)&e));
  memset(e, 0, sizeof *e);
  kiln_status_t s = kiln_allocator_malloc(al, sizeof(vk_kernel_t) * (size_t)(p->n_kernels + 1),
                                          "vulkan kernels", (void**)&e->k);
  if (s) {
    kiln_allocator_free(al, e);
    return s;
  }
  memset(e->k, 0, sizeof(vk_kernel_t) * (size_t)(p->n_kernels + 1));
  e->n = p->n_kernels;
  for (int32_t i = 0; i < e->n; ++i) e->k[i].owner = i;
  for (int32_t i = 0; !s && i < e->n; ++i) {
    const kiln_program_kernel_t* pk = &p->kernels[i];
    vk_kernel_t* k = &e->k[i];
    const char* nm = pk->name ? pk->name : "?";
    size_t l = strlen(nm);
    if ((s = kiln_allocator_malloc(al, l + 1, "kernel name", (void**)&k->name))) break;
    memcpy(k->name, nm, l + 1);
    k->n_args = pk->n_args;
    if (d->loop_limit > 0 && pk->loop_trips > d->loop_limit) {
      s = kiln_make_status(KILN_UNSUPPORTED,
                           "vulkan: kernel '%s' (node '%s', %s): one invocation runs about %lld loop "
                           "iterations; device '%s' ends an invocation after %lld (the results would "
                           "be partial). Run this model on another target or device",
                           k->name, pk->node_name ? pk->node_name : "?", pk->op_type ? pk->op_type : "?",
                           (long long)pk->loop_trips, d->props.deviceName, (long long)d->loop_limit);
      break;
    }
    if (k->n_args > e->max_args) e->max_args = k->n_args;
    for (int j = 0; j < 3; ++j) {
      int64_t g = pk->groups[j] > 0 ? pk->groups[j] : 1;
      if ((uint64_t)g > d->props.limits.maxComputeWorkGroupCount[j]) {
        s = kiln_make_status(KILN_UNSUPPORTED,
                             "vulkan: kernel '%s' (node '%s', %s) launches %lld work-groups in dimension %d, "
                             "device '%s' allows %u (the program was compiled for a device that allows more: "
                             "compile it for this one)",
                             nm, pk->node_name ? pk->node_name : "?", pk->op_type ? pk->op_type : "?", (long long)g,
                             j, d->props.deviceName, d->props.limits.maxComputeWorkGroupCount[j]);
        break;
      }
      k->groups[j] = (uint32_t)g;
    }
  }
  if (s) {
    kiln_vk_executable_destroy(base, e);
    return s;
  }

  kiln_vulkan_cache_stats_t* st = &d->last_cache;
  memset(st, 0, sizeof *st);
  kiln_code_cache_t cache;
  char name[96];
  cache_name(d, name, sizeof name);
  bool cache_on = kiln_code_cache_open(&cache, "vulkan", o ? o->cache_dir : NULL) &&
                  kiln_code_cache_path(&cache, name, st->path, sizeof st->path);
  size_t init_len = 0;
  uint8_t* init = cache_on ? cache_load(d, &cache, name, &init_len, &st->ignored_corrupt) : NULL;
  VkPipelineCacheCreateInfo pci = {.sType = VK_STRUCTURE_TYPE_PIPELINE_CACHE_CREATE_INFO,
                                   .initialDataSize = init_len,
                                   .pInitialData = init};
  VkPipelineCache pc = VK_NULL_HANDLE;
  double t0 = now_s();
  VkResult r = vkCreatePipelineCache(d->dev, &pci, NULL, &pc);
  if (r != VK_SUCCESS && init) {
    /* The driver rejected the data: start empty. */
    fprintf(stderr, "kiln: warning: driver rejected pipeline cache %s; starting empty\n", st->path);
    st->ignored_corrupt = true;
    init_len = 0;
    pci.initialDataSize = 0;
    pci.pInitialData = NULL;
    r = vkCreatePipelineCache(d->dev, &pci, NULL, &pc);
  }
  free(init);
  if (r != VK_SUCCESS) {
    kiln_vk_executable_destroy(base, e);
    return kiln_vk_fail(d, r, "vkCreatePipelineCache");
  }
  st->loaded_bytes = init_len;
  kiln_progress_t pr;
  kiln_progress_start(&pr, o ? o->progress : NULL, d->props.deviceName, e->n, "building");
  /* Identical binaries with the same parameter count share a pipeline. */
  int32_t owners = 0;
  for (int32_t i = 0; i < e->n; ++i) {
    vk_kernel_t* k = &e->k[i];
    for (int32_t j = 0; j < i; ++j)
      if (e->k[j].owner == j && e->k[j].n_args == k->n_args &&
          p->code.blob_lens[j] == p->code.blob_lens[i] && p->code.blobs[j] && p->code.blobs[i] &&
          memcmp(p->code.blobs[j], p->code.blobs[i], (size_t)p->code.blob_lens[i]) == 0) {
        k->owner = j;
        break;
      }
    owners += k->owner == i;
    if (k->owner != i) kiln_progress_step(&pr, "pipelines built");
  }
  /* reuse_code: the pipelines of identical binaries earlier such builds
   * made on this device */
  int32_t reused = 0;
  vk_home_t* h = d->home;
  if (o && o->reuse_code) {
    pthread_mutex_lock(&h->memo_mu);
    for (int32_t i = 0; i < e->n; ++i) {
      vk_kernel_t* k = &e->k[i];
      if (k->owner != i) continue;
      for (int32_t m = 0; m < h->n_memo; ++m) {
        vk_shared_t* sh = h->memo[m];
        if (sh->n_args != k->n_args || sh->len != p->code.blob_lens[i] ||
            memcmp(sh->blob, p->code.blobs[i], (size_t)sh->len) != 0)
          continue;
        atomic_fetch_add(&sh->refs, 1);
        k->shared = sh;
        k->module = sh->module, k->dsl = sh->dsl, k->layout = sh->layout, k->pipe = sh->pipe;
        k->texel = sh->texel, k->stexel = sh->stexel, k->htexel = sh->htexel;
        ++reused;
        kiln_progress_step(&pr, "pipelines reused");
        break;
      }
    }
    pthread_mutex_unlock(&h->memo_mu);
  }
  build_job_t job = {.d = d, .p = p, .pc = pc, .e = e, .pr = &pr, .mu = PTHREAD_MUTEX_INITIALIZER};
  int32_t nt = build_threads(owners - reused > 0 ? owners - reused : 1);
  pthread_t th[KILN_VK_MAX_BUILD_THREADS];
  int32_t started = 0;
  for (; started < nt - 1; ++started)
    if (pthread_create(&th[started], NULL, build_worker, &job)) break; /* fewer threads, same work */
  build_worker(&job);
  for (int32_t t = 0; t < started; ++t) pthread_join(th[t], NULL);
  s = job.first_error; /* the error of the lowest-numbered kernel that failed */
  for (int32_t i = 0; i < e->n; ++i) {
    if (job.errors && job.errors[i] != s) kiln_status_free(job.errors[i]);
    vk_kernel_t* k = &e->k[i];
    if (k->owner == i) continue;
    vk_kernel_t* src = &e->k[k->owner];
    k->module = src->module, k->dsl = src->dsl, k->layout = src->layout, k->pipe = src->pipe;
    k->texel = src->texel, k->stexel = src->stexel, k->htexel = src->htexel; /* the layout's texel bindings */
  }
  free(job.errors);
  if (!s && job.oom) s = kiln_make_status(KILN_OUT_OF_MEMORY, "vulkan: pipeline build of %d kernels", (int)e->n);
  /* reuse_code: this build's new pipelines for later ones (shared from now
   * on: the executable and the memo hold a reference each; a memo that
   * cannot grow only costs their reuse) */
  if (!s && o && o->reuse_code) {
    pthread_mutex_lock(&h->memo_mu);
    for (int32_t i = 0; i < e->n; ++i) {
      vk_kernel_t* k = &e->k[i];
      if (k->owner != i || k->shared) continue;
      if (h->n_memo >= VK_MEMO_MAX) memo_clear(h);
      if (h->n_memo == h->cap_memo) {
        const int32_t cap = h->cap_memo ? 2 * h->cap_memo : 64;
        vk_shared_t** m = realloc(h->memo, sizeof *m * (size_t)cap);
        if (!m) break;
        h->memo = m, h->cap_memo = cap;
      }
      vk_shared_t* sh = calloc(1, sizeof *sh);
      uint8_t* blob = sh ? malloc((size_t)p->code.blob_lens[i]) : NULL;
      if (!blob) {
        free(sh);
        break;
      }
      memcpy(blob, p->code.blobs[i], (size_t)p->code.blob_lens[i]);
      *sh = (vk_shared_t){.blob = blob, .len = p->code.blob_lens[i], .n_args = k->n_args, .texel = k->texel,
                          .stexel = k->stexel, .htexel = k->htexel, .module = k->module, .dsl = k->dsl, .layout = k->layout,
                          .pipe = k->pipe};
      atomic_init(&sh->refs, 2);
      k->shared = sh;
      h->memo[h->n_memo++] = sh;
    }
    pthread_mutex_unlock(&h->memo_mu);
  }
  st->reused = reused;
  if (o && o->reuse_code) e->pipelines = owners, e->reused = reused;
  st->pipelines = atomic_load(&job.built);
  st->cache_hits = atomic_load(&job.hits);
  kiln_progress_end(&pr);
  st->seconds = now_s() - t0;
  if (!s && cache_on) st->saved_bytes = cache_save(d, pc, &cache, name);
  vkDestroyPipelineCache(d->dev, pc, NULL);
  if (s) {
    kiln_vk_executable_destroy(base, e);
    return s;
  }
  *out = e;
  return NULL;
}

/* ---- command buffers ---------------------------------------------------- */
