/* kiln Vulkan device: the runtime device (runtime/device.h) on a Vulkan
 * physical device -- Mesa lavapipe in tests, any Vulkan 1.1+ GPU otherwise.
 *
 *   kiln_device_t* d = NULL;
 *   KILN_RETURN_IF_ERROR(kiln_vulkan_device_create(0, false, kiln_allocator_system(), &d));
 *   ... d->vt->buffer_create(d, ...) ...; kiln_device_release(d) (or d->vt->destroy(d))
 *
 * What the slots map to:
 *   buffer_create     one VkDeviceMemory + one VkBuffer (storage, transfer src/dst),
 *                     zeroed with vkCmdFillBuffer; an arena is one of these
 *   view_create       (VkBuffer, offset, range) of its parent: no Vulkan object;
 *                     offsets must be multiples of minStorageBufferOffsetAlignment
 *                     (info.buffer_alignment)
 *   buffer_write/read synchronous copies through one host-visible staging buffer
 *                     (grown on demand up to 64 MiB, larger copies go in chunks)
 *   executable_create one VkShaderModule, descriptor-set layout (binding j = parameter
 *                     j, storage buffer), pipeline layout and compute pipeline per
 *                     distinct SPIR-V blob (identical blobs share one pipeline), created
 *                     through a VkPipelineCache loaded from and saved to
 *                     entry pipelines-<vendor>-<device>-<uuid>.bin of the code cache's
 *                     "vulkan" folder (runtime/code_cache.h: build_options->cache_dir,
 *                     "" disabling it, else $KILN_CACHE_DIR/vulkan, else
 *                     $XDG_CACHE_HOME/kiln/vulkan, else ~/.cache/kiln/vulkan). A
 *                     corrupt or foreign cache file is ignored with a warning on stderr.
 *   cmd_*             one VkCommandBuffer recorded once (re-submittable); descriptor
 *                     sets are allocated per dispatch at record time from descriptor
 *                     pools the command buffer owns; cmd_barrier is a compute -> compute
 *                     memory barrier; timestamps are a VkQueryPool (ns via
 *                     timestampPeriod)
 *   submit / wait     vkQueueSubmit with a fence / vkWaitForFences; a second submit
 *                     of a command buffer still in flight waits for the first.
 *
 * fp16: storageBuffer16BitAccess and shaderFloat16 are enabled when the device
 * has them (info.fp16_storage / info.fp16_arith), and so are shaderInt64,
 * storageBuffer8BitAccess and shaderInt8 (info.int8): the GLSL printer needs
 * int64 in every shader and 8-bit storage for bool/int8 tensors.
 *
 * Validation: with |validation| (or $KILN_VULKAN_VALIDATION=1) the instance
 * enables VK_LAYER_KHRONOS_validation and a debug-utils messenger; every
 * warning or error message is printed to stderr as
 * "kiln vulkan validation: <message>" and counted.
 *
 * Errors follow runtime/device.h: DEVICE_ERROR naming the failing vk call and
 * its VkResult ("device lost" after VK_ERROR_DEVICE_LOST, and every later call
 * fails the same way), OUT_OF_MEMORY naming the byte size, INVALID_ARGUMENT for
 * a SPIR-V blob the device rejects (naming the kernel), NOT_FOUND when there
 * is no Vulkan driver or no device |index|.
 *
 * The kiln devices one process opens on the same physical device (and
 * validation setting) share one instance, VkDevice and queue (submissions
 * take a lock) and the pipelines of executables built with reuse_code;
 * each has its own command pool, staging buffer and memory.
 *
 * Thread-compatible, like every kiln device.
 */
#ifndef KILN_RUNTIME_VULKAN_VULKAN_DEVICE_H_
#define KILN_RUNTIME_VULKAN_VULKAN_DEVICE_H_

#include <stdio.h>

#include "runtime/device.h"

#ifdef __cplusplus
extern "C" {
#endif

/* Opens physical device |index| (vkEnumeratePhysicalDevices order, as
 * `kiln devices` lists them). On success *out holds one reference; on
 * failure nothing is left allocated. */
kiln_status_t kiln_vulkan_device_create(int32_t index, bool validation, kiln_allocator_t al,
                                        kiln_device_t** out);

/* Validation messages counted so far by device |d| (created by
 * kiln_vulkan_device_create) and the kiln devices sharing its VkDevice; NULL: every message of every Vulkan device in
 * this process, including ones reported while devices were destroyed. */
int32_t kiln_vulkan_validation_messages(const kiln_device_t* d);

/* One line per Vulkan physical device: index, name, type, API version,
 * driver, fp16 arithmetic (shaderFloat16), 16-bit storage, int8, subgroup
 * size and max work-group size. NOT_FOUND when there is no Vulkan driver. */
kiln_status_t kiln_vulkan_list_devices(FILE* out);

/* Pipeline-cache facts of the last kiln_device executable_create on |d|
 * (for tests and the benchmark). */
typedef struct kiln_vulkan_cache_stats_s {
  uint64_t loaded_bytes;   /* cache bytes accepted from disk (0: cold or ignored) */
  uint64_t saved_bytes;    /* bytes written back */
  bool ignored_corrupt;    /* a cache file was there but rejected */
  int32_t pipelines;       /* pipelines created (distinct blobs) */
  int32_t reused;          /* pipelines taken from earlier builds (reuse_code), not created */
  int32_t cache_hits;      /* pipelines the driver reported as cache hits (0 when the
                              driver has no VK_EXT_pipeline_creation_feedback) */
  double seconds;          /* wall time of shader module + pipeline creation */
  char path[512];          /* the cache file ("" when the cache is off) */
} kiln_vulkan_cache_stats_t;
void kiln_vulkan_last_cache_stats(const kiln_device_t* d, kiln_vulkan_cache_stats_t* out);

#ifdef __cplusplus
}
#endif
#endif /* KILN_RUNTIME_VULKAN_VULKAN_DEVICE_H_ */
