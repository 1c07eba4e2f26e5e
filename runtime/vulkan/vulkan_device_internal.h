/* What the two halves of the Vulkan device share: the run-time half
 * (vulkan_device.c: buffers, command buffers, submission, the vtable) and
 * the build-time half (vulkan_build.c: instance, listing and creating
 * devices, the pipeline cache, building executables), which runs while code
 * is built or loaded and is compiled for size (CMakeLists.txt). */
#ifndef KILN_RUNTIME_VULKAN_VULKAN_DEVICE_INTERNAL_H_
#define KILN_RUNTIME_VULKAN_VULKAN_DEVICE_INTERNAL_H_

#include <pthread.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <vulkan/vulkan.h>

#include "runtime/vulkan/vulkan_device.h"

/* The VkDevice of physical device |index|, shared by every kiln device of
 * this process that opens it with the same validation setting (refs): the
 * instance, the VkDevice and its queue (a VkQueue is externally
 * synchronised: submissions and waits on it hold queue_mu), and the
 * pipelines that executables made with reuse_code (kiln_device_build_options_t)
 * built on any of those devices, by SPIR-V (memo): a later such build
 * takes the pipeline of an identical binary (with the shader variant the
 * driver compiled at its first dispatch) instead of building it again. A
 * pipeline belongs to its VkDevice, so kiln tune's second device (the
 * kernels alone) shares the first's VkDevice, and the closing build on the
 * first takes the kept points' pipelines from there. A home whose device
 * was lost takes no new kiln devices (a new open makes a fresh one). */
typedef struct vk_home_s {
  int32_t index;
  bool validation;
  int32_t refs; /* under g_homes_mu */
  atomic_bool lost;
  atomic_int messages; /* validation messages */
  VkInstance instance;
  VkDebugUtilsMessengerEXT messenger;
  PFN_vkDestroyDebugUtilsMessengerEXT destroy_messenger;
  uint32_t iapi;
  VkDevice dev;
  VkQueue queue;
  pthread_mutex_t queue_mu, memo_mu;
  struct vk_shared_s** memo;
  int32_t n_memo, cap_memo;
  struct vk_home_s* next;
} vk_home_t;


typedef struct vk_dev_s {
  kiln_device_t base;
  vk_home_t* home; /* one reference */
  VkPhysicalDevice phys;
  VkDevice dev;   /* the home's */
  VkQueue queue;  /* the home's: submit under home->queue_mu */
  uint32_t queue_family;
  VkPhysicalDeviceProperties props;
  VkPhysicalDeviceMemoryProperties mem;
  uint64_t max_alloc;
  uint32_t timestamp_bits;
  bool creation_feedback;
  /* Loop iterations the driver lets one invocation run (0: no known limit):
   * Mesa's llvmpipe/lavapipe ends an invocation after 65535 in all (gallivm
   * LP_MAX_TGSI_LOOP_ITERATIONS) and the outputs are then silently partial. */
  int64_t loop_limit;
  /* transfers */
  VkCommandPool pool;
  VkCommandBuffer xfer_cb;
  VkFence xfer_fence;
  VkBuffer staging;
  VkDeviceMemory staging_mem;
  void* staging_map;
  uint64_t staging_size;
  bool lost;
  kiln_vulkan_cache_stats_t last_cache;
} vk_dev_t;

/* At most this many pipelines are kept for reuse; past it the memo starts
 * afresh (the executables using them keep theirs). */
#define VK_MEMO_MAX 1024

/* A pipeline and its module and layouts, shared by the kernels of several
 * executables and the memo: destroyed when the last reference goes. */
typedef struct vk_shared_s {
  uint8_t* blob; /* the SPIR-V, compared whole */
  uint64_t len;
  int32_t n_args;
  uint64_t texel, stexel, htexel;
  VkShaderModule module;
  VkDescriptorSetLayout dsl;
  VkPipelineLayout layout;
  VkPipeline pipe;
  atomic_int refs;
} vk_shared_t;

struct kiln_device_buffer_s {
  VkBuffer buf;
  VkDeviceMemory mem; /* VK_NULL_HANDLE for views */
  uint64_t offset;    /* into buf */
  uint64_t size;
  uint64_t avail;     /* bytes of buf from offset to its end (>= size, 16-byte padded) */
  bool view;
};

typedef struct vk_kernel_s {
  char* name;
  int32_t n_args;
  int32_t owner; /* kernel whose pipeline this one uses (itself when distinct) */
  uint32_t groups[3];
  VkShaderModule module;
  VkDescriptorSetLayout dsl;
  VkPipelineLayout layout;
  VkPipeline pipe;
  uint64_t texel; /* bit j: binding j is a uniform texel buffer (vulkan_texel.c) */
  uint64_t stexel; /* bit j: binding j is a storage texel buffer */
  uint64_t htexel; /* bit j: ... one of rgba16f texels (else rgba32f) */
  vk_shared_t* shared; /* an owner whose objects are shared (reuse_code): one reference */
} vk_kernel_t;

struct kiln_device_executable_s {
  int32_t n;
  vk_kernel_t* k;
  int32_t max_args;
  int32_t pipelines, reused; /* distinct pipelines, those taken from earlier builds (reuse_code) */
};

struct kiln_device_cmd_s {
  kiln_device_executable_t* exe;
  VkCommandBuffer cb;
  VkFence fence;
  VkQueryPool qp;
  int32_t max_ts;
  VkDescriptorPool* pools;
  int32_t n_pools, cap_pools, sets_in_last;
  VkBufferView* views; /* the texel buffer views its dispatches bind */
  int32_t n_views, cap_views;
  bool ended, pending, finished;
  int64_t dim; /* the dynamic dim's value for dispatches recorded from now (0: none) */
};

static inline vk_dev_t* D(kiln_device_t* d) { return (vk_dev_t*)d; }

/* VK_ERROR_DEVICE_LOST's name, and so on ("VkResult" for others). */
const char* kiln_vk_result_name(VkResult r);

/* "vulkan: device lost". */
kiln_status_t kiln_vk_lost_status(void);

/* Maps a failed VkResult of |what| to a status; VK_ERROR_DEVICE_LOST marks
 * the device lost for good. */
kiln_status_t kiln_vk_fail(vk_dev_t* d, VkResult r, const char* what);

#define VKR(d, call, what)                                     \
  do {                                                         \
    VkResult r_ = (call);                                      \
    if (r_ != VK_SUCCESS) return kiln_vk_fail((d), r_, (what)); \
  } while (0)

/* Waits for everything on the home's queue (vulkan_device.c). */
void kiln_vk_device_idle(vk_dev_t* d);

/* The vtable (vulkan_device.c) and the slots vulkan_build.c fills. */
extern const kiln_device_vtable_t kiln_vk_vtable;
void kiln_vk_destroy(kiln_device_t* base);
kiln_status_t kiln_vk_executable_create(kiln_device_t* base, const kiln_program_t* p,
                                        const kiln_device_build_options_t* options,
                                        kiln_device_executable_t** out);
void kiln_vk_executable_destroy(kiln_device_t* base, kiln_device_executable_t* e);

#endif  /* KILN_RUNTIME_VULKAN_VULKAN_DEVICE_INTERNAL_H_ */
