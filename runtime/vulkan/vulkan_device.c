/* kiln Vulkan device, its run-time half: buffers, transfers, command
 * buffers, submission and the device vtable (see vulkan_device.h for what
 * each slot maps to). Creating devices and building executables is
 * vulkan_build.c; the types both share are vulkan_device_internal.h.
 *
 * Why the structure is what it is:
 *  - Every vk* call that the runtime makes after the device exists happens
 *    inside a vtable slot, so the fault wrapper can fail any of them.
 *  - Host <-> device copies always go through a staging buffer, even on
 *    lavapipe where device memory is host visible: it is the path a
 *    discrete GPU needs, and tests exercise it.
 *  - A lost device poisons the struct (d->lost): every later call returns
 *    "device lost" without touching the driver, and a new device can be
 *    created in the same process.
 *  - Synchronisation: each recorded command buffer opens with a barrier
 *    that makes earlier transfer and compute writes visible to compute, and
 *    closes with one that makes its compute writes visible to transfers and
 *    the host, so buffer_write / submit / buffer_read need nothing else.
 */
#include "runtime/vulkan/vulkan_device_internal.h"

#include <pthread.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include <vulkan/vulkan.h>

#include "runtime/device_registry.h"
#include "runtime/vulkan/vulkan_texel.h"

#define STAGING_MAX (64ull << 20)
#define SETS_PER_POOL 128

/* ---- errors ----------------------------------------------------------- */

const char* kiln_vk_result_name(VkResult r) {
  switch (r) {
#define C(x) case x: return #x
    C(VK_SUCCESS); C(VK_NOT_READY); C(VK_TIMEOUT); C(VK_INCOMPLETE);
    C(VK_ERROR_OUT_OF_HOST_MEMORY); C(VK_ERROR_OUT_OF_DEVICE_MEMORY);
    C(VK_ERROR_INITIALIZATION_FAILED); C(VK_ERROR_DEVICE_LOST); C(VK_ERROR_MEMORY_MAP_FAILED);
    C(VK_ERROR_LAYER_NOT_PRESENT); C(VK_ERROR_EXTENSION_NOT_PRESENT);
    C(VK_ERROR_FEATURE_NOT_PRESENT); C(VK_ERROR_INCOMPATIBLE_DRIVER);
    C(VK_ERROR_TOO_MANY_OBJECTS); C(VK_ERROR_FORMAT_NOT_SUPPORTED); C(VK_ERROR_FRAGMENTED_POOL);
    C(VK_ERROR_OUT_OF_POOL_MEMORY); C(VK_ERROR_INVALID_SHADER_NV); C(VK_ERROR_UNKNOWN);
#undef C
    default: return "VkResult";
  }
}

kiln_status_t kiln_vk_lost_status(void) {
  return kiln_make_status(KILN_DEVICE_ERROR, "vulkan: device lost");
}

kiln_status_t kiln_vk_fail(vk_dev_t* d, VkResult r, const char* what) {
  if (r == VK_ERROR_DEVICE_LOST) {
    if (d) d->lost = true, atomic_store(&d->home->lost, true);
    return kiln_make_status(KILN_DEVICE_ERROR, "vulkan: device lost (%s)", what);
  }
  if (r == VK_ERROR_OUT_OF_HOST_MEMORY || r == VK_ERROR_OUT_OF_DEVICE_MEMORY ||
      r == VK_ERROR_OUT_OF_POOL_MEMORY || r == VK_ERROR_FRAGMENTED_POOL)
    return kiln_make_status(KILN_OUT_OF_MEMORY, "vulkan: %s failed: %s", what, kiln_vk_result_name(r));
  return kiln_make_status(KILN_DEVICE_ERROR, "vulkan: %s failed: %s (%d)", what,
                          kiln_vk_result_name(r), (int)r);
}

static int32_t find_memory(const vk_dev_t* d, uint32_t bits, VkMemoryPropertyFlags want,
                           VkMemoryPropertyFlags prefer) {
  int32_t any = -1;
  for (uint32_t i = 0; i < d->mem.memoryTypeCount; ++i) {
    if (!(bits & (1u << i))) continue;
    VkMemoryPropertyFlags f = d->mem.memoryTypes[i].propertyFlags;
    if ((f & want) != want) continue;
    if ((f & prefer) == prefer) return (int32_t)i;
    if (any < 0) any = (int32_t)i;
  }
  return any;
}

/* Waits for everything on the home's queue (vkDeviceWaitIdle: one queue,
 * held). */
void kiln_vk_device_idle(vk_dev_t* d) {
  pthread_mutex_lock(&d->home->queue_mu);
  vkDeviceWaitIdle(d->dev);
  pthread_mutex_unlock(&d->home->queue_mu);
}

/* vkQueueSubmit on the home's queue, which other kiln devices share. */
static VkResult queue_submit(vk_dev_t* d, const VkSubmitInfo* si, VkFence f) {
  pthread_mutex_lock(&d->home->queue_mu);
  const VkResult r = vkQueueSubmit(d->queue, 1, si, f);
  pthread_mutex_unlock(&d->home->queue_mu);
  return r;
}

/* ---- buffers ----------------------------------------------------------- */

static kiln_status_t make_buffer(vk_dev_t* d, uint64_t bytes, VkBufferUsageFlags usage,
                                 VkMemoryPropertyFlags want, VkMemoryPropertyFlags prefer,
                                 const char* what, VkBuffer* out_buf, VkDeviceMemory* out_mem) {
  VkBufferCreateInfo bci = {.sType = VK_STRUCTURE_TYPE_BUFFER_CREATE_INFO,
                            .size = bytes,
                            .usage = usage,
                            .sharingMode = VK_SHARING_MODE_EXCLUSIVE};
  VkBuffer b = VK_NULL_HANDLE;
  VkResult r = vkCreateBuffer(d->dev, &bci, NULL, &b);
  if (r != VK_SUCCESS)
    return kiln_status_annotate(kiln_vk_fail(d, r, "vkCreateBuffer"), "buffer '%s' of %llu bytes", what,
                                (unsigned long long)bytes);
  VkMemoryRequirements req;
  vkGetBufferMemoryRequirements(d->dev, b, &req);
  int32_t mt = find_memory(d, req.memoryTypeBits, want, prefer);
  if (mt < 0) {
    vkDestroyBuffer(d->dev, b, NULL);
    return kiln_make_status(KILN_DEVICE_ERROR, "vulkan: no memory type for buffer '%s'", what);
  }
  VkMemoryAllocateInfo mai = {.sType = VK_STRUCTURE_TYPE_MEMORY_ALLOCATE_INFO,
                              .allocationSize = req.size,
                              .memoryTypeIndex = (uint32_t)mt};
  VkDeviceMemory m = VK_NULL_HANDLE;
  r = vkAllocateMemory(d->dev, &mai, NULL, &m);
  if (r != VK_SUCCESS) {
    vkDestroyBuffer(d->dev, b, NULL);
    if (r == VK_ERROR_OUT_OF_DEVICE_MEMORY || r == VK_ERROR_OUT_OF_HOST_MEMORY)
      return kiln_make_status(KILN_OUT_OF_MEMORY,
                              "vulkan: out of device memory allocating %llu bytes for '%s' (%s)",
                              (unsigned long long)bytes, what, kiln_vk_result_name(r));
    return kiln_vk_fail(d, r, "vkAllocateMemory");
  }
  if ((r = vkBindBufferMemory(d->dev, b, m, 0)) != VK_SUCCESS) {
    vkDestroyBuffer(d->dev, b, NULL);
    vkFreeMemory(d->dev, m, NULL);
    return kiln_vk_fail(d, r, "vkBindBufferMemory");
  }
  *out_buf = b;
  *out_mem = m;
  return NULL;
}

/* Runs the transfer command buffer recorded by |rec| and waits. */
typedef void (*rec_fn)(vk_dev_t* d, VkCommandBuffer cb, void* u);
static kiln_status_t run_transfer(vk_dev_t* d, rec_fn rec, void* u) {
  VKR(d, vkResetCommandBuffer(d->xfer_cb, 0), "vkResetCommandBuffer");
  VkCommandBufferBeginInfo bi = {.sType = VK_STRUCTURE_TYPE_COMMAND_BUFFER_BEGIN_INFO,
                                 .flags = VK_COMMAND_BUFFER_USAGE_ONE_TIME_SUBMIT_BIT};
  VKR(d, vkBeginCommandBuffer(d->xfer_cb, &bi), "vkBeginCommandBuffer");
  VkMemoryBarrier pre = {.sType = VK_STRUCTURE_TYPE_MEMORY_BARRIER,
                         .srcAccessMask = VK_ACCESS_SHADER_WRITE_BIT | VK_ACCESS_TRANSFER_WRITE_BIT |
                                          VK_ACCESS_HOST_WRITE_BIT,
                         .dstAccessMask = VK_ACCESS_TRANSFER_READ_BIT | VK_ACCESS_TRANSFER_WRITE_BIT};
  vkCmdPipelineBarrier(d->xfer_cb,
                       VK_PIPELINE_STAGE_COMPUTE_SHADER_BIT | VK_PIPELINE_STAGE_TRANSFER_BIT |
                           VK_PIPELINE_STAGE_HOST_BIT,
                       VK_PIPELINE_STAGE_TRANSFER_BIT, 0, 1, &pre, 0, NULL, 0, NULL);
  rec(d, d->xfer_cb, u);
  VkMemoryBarrier post = {.sType = VK_STRUCTURE_TYPE_MEMORY_BARRIER,
                          .srcAccessMask = VK_ACCESS_TRANSFER_WRITE_BIT,
                          .dstAccessMask = VK_ACCESS_HOST_READ_BIT | VK_ACCESS_SHADER_READ_BIT |
                                           VK_ACCESS_SHADER_WRITE_BIT};
  vkCmdPipelineBarrier(d->xfer_cb, VK_PIPELINE_STAGE_TRANSFER_BIT,
                       VK_PIPELINE_STAGE_HOST_BIT | VK_PIPELINE_STAGE_COMPUTE_SHADER_BIT, 0, 1,
                       &post, 0, NULL, 0, NULL);
  VKR(d, vkEndCommandBuffer(d->xfer_cb), "vkEndCommandBuffer");
  VKR(d, vkResetFences(d->dev, 1, &d->xfer_fence), "vkResetFences");
  VkSubmitInfo si = {.sType = VK_STRUCTURE_TYPE_SUBMIT_INFO,
                     .commandBufferCount = 1,
                     .pCommandBuffers = &d->xfer_cb};
  VKR(d, queue_submit(d, &si, d->xfer_fence), "vkQueueSubmit (transfer)");
  VKR(d, vkWaitForFences(d->dev, 1, &d->xfer_fence, VK_TRUE, UINT64_MAX), "vkWaitForFences (transfer)");
  return NULL;
}

typedef struct fill_s {
  VkBuffer b;
  uint64_t size;
} fill_t;
static void rec_fill(vk_dev_t* d, VkCommandBuffer cb, void* u) {
  (void)d;
  fill_t* f = u;
  vkCmdFillBuffer(cb, f->b, 0, VK_WHOLE_SIZE, 0);
}

static kiln_status_t vk_buffer_create(kiln_device_t* base, uint64_t bytes, const char* what,
                                      kiln_device_buffer_t** out) {
  vk_dev_t* d = D(base);
  if (d->lost) return kiln_vk_lost_status();
  if (!what) what = "buffer";
  if (bytes > d->max_alloc)
    return kiln_make_status(KILN_OUT_OF_MEMORY,
                            "vulkan: buffer '%s' of %llu bytes is larger than device '%s' allows "
                            "(%llu bytes)",
                            what, (unsigned long long)bytes, d->props.deviceName,
                            (unsigned long long)d->max_alloc);
  /* Vulkan has no empty buffers; fills and views want 4-byte multiples,
   * texel buffer views (vec4 texels) 16-byte ones. */
  uint64_t size = bytes < 16 ? 16 : (bytes + 15) & ~15ull;
  kiln_device_buffer_t* b = NULL;
  KILN_RETURN_IF_ERROR(kiln_allocator_malloc(base->allocator, sizeof *b, "vulkan buffer", (void**)&b));
  memset(b, 0, sizeof *b);
  kiln_status_t s = make_buffer(d, size,
                                VK_BUFFER_USAGE_STORAGE_BUFFER_BIT | VK_BUFFER_USAGE_UNIFORM_TEXEL_BUFFER_BIT |
                                    VK_BUFFER_USAGE_STORAGE_TEXEL_BUFFER_BIT | VK_BUFFER_USAGE_TRANSFER_SRC_BIT | VK_BUFFER_USAGE_TRANSFER_DST_BIT,
                                0, VK_MEMORY_PROPERTY_DEVICE_LOCAL_BIT, what, &b->buf, &b->mem);
  if (!s) {
    b->size = bytes;
    b->avail = size;
    fill_t f = {b->buf, size};
    s = run_transfer(d, rec_fill, &f);
    if (s) {
      vkDestroyBuffer(d->dev, b->buf, NULL);
      vkFreeMemory(d->dev, b->mem, NULL);
    }
  }
  if (s) {
    kiln_allocator_free(base->allocator, b);
    return s;
  }
  *out = b;
  return NULL;
}

static kiln_status_t vk_view_create(kiln_device_t* base, kiln_device_buffer_t* parent,
                                    uint64_t offset, uint64_t bytes, kiln_device_buffer_t** out) {
  vk_dev_t* d = D(base);
  if (d->lost) return kiln_vk_lost_status();
  if (!parent) return kiln_make_status(KILN_INVALID_ARGUMENT, "vulkan: view of a NULL buffer");
  uint64_t al = base->info.buffer_alignment;
  if ((parent->offset + offset) % al)
    return kiln_make_status(KILN_INVALID_ARGUMENT,
                            "vulkan: view offset %llu is not a multiple of the storage-buffer "
                            "alignment %llu",
                            (unsigned long long)offset, (unsigned long long)al);
  if (offset > parent->size || bytes > parent->size - offset)
    return kiln_make_status(KILN_OUT_OF_RANGE,
                            "vulkan: view [%llu, %llu) is outside its buffer of %llu bytes",
                            (unsigned long long)offset, (unsigned long long)(offset + bytes),
                            (unsigned long long)parent->size);
  kiln_device_buffer_t* v = NULL;
  KILN_RETURN_IF_ERROR(kiln_allocator_malloc(base->allocator, sizeof *v, "vulkan view", (void**)&v));
  memset(v, 0, sizeof *v);
  v->buf = parent->buf;
  v->offset = parent->offset + offset;
  v->size = bytes;
  v->avail = parent->avail - offset;
  v->view = true;
  *out = v;
  return NULL;
}

static void vk_buffer_destroy(kiln_device_t* base, kiln_device_buffer_t* b) {
  if (!b) return;
  vk_dev_t* d = D(base);
  if (!b->view) {
    vkDestroyBuffer(d->dev, b->buf, NULL);
    vkFreeMemory(d->dev, b->mem, NULL);
  }
  kiln_allocator_free(base->allocator, b);
}

/* The staging buffer holds at least min(bytes, STAGING_MAX). */
static kiln_status_t staging_reserve(vk_dev_t* d, uint64_t bytes) {
  if (bytes > STAGING_MAX) bytes = STAGING_MAX;
  if (d->staging && d->staging_size >= bytes) return NULL;
  uint64_t size = d->staging_size ? d->staging_size : (1u << 20);
  while (size < bytes) size *= 2;
  if (size > STAGING_MAX) size = STAGING_MAX;
  VkBuffer nb;
  VkDeviceMemory nm;
  KILN_RETURN_IF_ERROR(make_buffer(d, size,
                                   VK_BUFFER_USAGE_TRANSFER_SRC_BIT | VK_BUFFER_USAGE_TRANSFER_DST_BIT,
                                   VK_MEMORY_PROPERTY_HOST_VISIBLE_BIT | VK_MEMORY_PROPERTY_HOST_COHERENT_BIT,
                                   VK_MEMORY_PROPERTY_HOST_CACHED_BIT, "staging", &nb, &nm));
  void* map = NULL;
  VkResult r = vkMapMemory(d->dev, nm, 0, VK_WHOLE_SIZE, 0, &map);
  if (r != VK_SUCCESS) {
    vkDestroyBuffer(d->dev, nb, NULL);
    vkFreeMemory(d->dev, nm, NULL);
    return kiln_vk_fail(d, r, "vkMapMemory (staging)");
  }
  if (d->staging) {
    vkUnmapMemory(d->dev, d->staging_mem);
    vkDestroyBuffer(d->dev, d->staging, NULL);
    vkFreeMemory(d->dev, d->staging_mem, NULL);
  }
  d->staging = nb;
  d->staging_mem = nm;
  d->staging_map = map;
  d->staging_size = size;
  return NULL;
}

typedef struct copy_s {
  VkBuffer src, dst;
  VkBufferCopy region;
} copy_t;
static void rec_copy(vk_dev_t* d, VkCommandBuffer cb, void* u) {
  (void)d;
  copy_t* c = u;
  vkCmdCopyBuffer(cb, c->src, c->dst, 1, &c->region);
}

static kiln_status_t check_range(const kiln_device_buffer_t* b, uint64_t offset, uint64_t bytes,
                                 const char* what) {
  if (!b) return kiln_make_status(KILN_INVALID_ARGUMENT, "vulkan: %s of a NULL buffer", what);
  if (offset > b->size || bytes > b->size - offset)
    return kiln_make_status(KILN_OUT_OF_RANGE,
                            "vulkan: %s of [%llu, %llu) is outside a buffer of %llu bytes", what,
                            (unsigned long long)offset, (unsigned long long)(offset + bytes),
                            (unsigned long long)b->size);
  return NULL;
}

static kiln_status_t vk_buffer_write(kiln_device_t* base, kiln_device_buffer_t* b, uint64_t offset,
                                     const void* src, uint64_t bytes) {
  vk_dev_t* d = D(base);
  if (d->lost) return kiln_vk_lost_status();
  KILN_RETURN_IF_ERROR(check_range(b, offset, bytes, "write"));
  if (bytes == 0) return NULL;
  KILN_RETURN_IF_ERROR(staging_reserve(d, bytes));
  for (uint64_t done = 0; done < bytes;) {
    uint64_t n = bytes - done < d->staging_size ? bytes - done : d->staging_size;
    memcpy(d->staging_map, (const char*)src + done, n);
    copy_t c = {d->staging, b->buf, {0, b->offset + offset + done, n}};
    KILN_RETURN_IF_ERROR(run_transfer(d, rec_copy, &c), "writing %llu bytes", (unsigned long long)bytes);
    done += n;
  }
  return NULL;
}

static kiln_status_t vk_buffer_read(kiln_device_t* base, kiln_device_buffer_t* b, uint64_t offset,
                                    void* dst, uint64_t bytes) {
  vk_dev_t* d = D(base);
  if (d->lost) return kiln_vk_lost_status();
  KILN_RETURN_IF_ERROR(check_range(b, offset, bytes, "read"));
  if (bytes == 0) return NULL;
  KILN_RETURN_IF_ERROR(staging_reserve(d, bytes));
  for (uint64_t done = 0; done < bytes;) {
    uint64_t n = bytes - done < d->staging_size ? bytes - done : d->staging_size;
    copy_t c = {b->buf, d->staging, {b->offset + offset + done, 0, n}};
    KILN_RETURN_IF_ERROR(run_transfer(d, rec_copy, &c), "reading %llu bytes", (unsigned long long)bytes);
    memcpy((char*)dst + done, d->staging_map, n);
    done += n;
  }
  return NULL;
}

/* ---- pipeline cache file ------------------------------------------------ */


static void vk_cmd_destroy(kiln_device_t* base, kiln_device_cmd_t* c) {
  if (!c) return;
  vk_dev_t* d = D(base);
  if (c->pending && !d->lost) vkWaitForFences(d->dev, 1, &c->fence, VK_TRUE, UINT64_MAX);
  if (d->lost) kiln_vk_device_idle(d);
  for (int32_t i = 0; i < c->n_pools; ++i) vkDestroyDescriptorPool(d->dev, c->pools[i], NULL);
  free(c->pools);
  for (int32_t i = 0; i < c->n_views; ++i) vkDestroyBufferView(d->dev, c->views[i], NULL);
  free(c->views);
  if (c->qp) vkDestroyQueryPool(d->dev, c->qp, NULL);
  if (c->fence) vkDestroyFence(d->dev, c->fence, NULL);
  if (c->cb) vkFreeCommandBuffers(d->dev, d->pool, 1, &c->cb);
  kiln_allocator_free(base->allocator, c);
}

static kiln_status_t cmd_init(vk_dev_t* d, kiln_device_cmd_t* c, int32_t max_timestamps) {
  VkCommandBufferAllocateInfo cai = {.sType = VK_STRUCTURE_TYPE_COMMAND_BUFFER_ALLOCATE_INFO,
                                     .commandPool = d->pool,
                                     .level = VK_COMMAND_BUFFER_LEVEL_PRIMARY,
                                     .commandBufferCount = 1};
  VKR(d, vkAllocateCommandBuffers(d->dev, &cai, &c->cb), "vkAllocateCommandBuffers");
  VkFenceCreateInfo fci = {.sType = VK_STRUCTURE_TYPE_FENCE_CREATE_INFO};
  VKR(d, vkCreateFence(d->dev, &fci, NULL, &c->fence), "vkCreateFence");
  if (max_timestamps > 0) {
    if (!d->base.info.timestamps)
      return kiln_make_status(KILN_UNSUPPORTED, "vulkan: device '%s' has no compute timestamps",
                              d->props.deviceName);
    VkQueryPoolCreateInfo qci = {.sType = VK_STRUCTURE_TYPE_QUERY_POOL_CREATE_INFO,
                                 .queryType = VK_QUERY_TYPE_TIMESTAMP,
                                 .queryCount = (uint32_t)max_timestamps};
    VKR(d, vkCreateQueryPool(d->dev, &qci, NULL, &c->qp), "vkCreateQueryPool");
  }
  c->max_ts = max_timestamps;
  VkCommandBufferBeginInfo bi = {.sType = VK_STRUCTURE_TYPE_COMMAND_BUFFER_BEGIN_INFO};
  VKR(d, vkBeginCommandBuffer(c->cb, &bi), "vkBeginCommandBuffer");
  if (c->qp) vkCmdResetQueryPool(c->cb, c->qp, 0, (uint32_t)max_timestamps);
  VkMemoryBarrier mb = {.sType = VK_STRUCTURE_TYPE_MEMORY_BARRIER,
                        .srcAccessMask = VK_ACCESS_TRANSFER_WRITE_BIT | VK_ACCESS_SHADER_WRITE_BIT |
                                         VK_ACCESS_HOST_WRITE_BIT,
                        .dstAccessMask = VK_ACCESS_SHADER_READ_BIT | VK_ACCESS_SHADER_WRITE_BIT};
  vkCmdPipelineBarrier(c->cb,
                       VK_PIPELINE_STAGE_TRANSFER_BIT | VK_PIPELINE_STAGE_COMPUTE_SHADER_BIT |
                           VK_PIPELINE_STAGE_HOST_BIT,
                       VK_PIPELINE_STAGE_COMPUTE_SHADER_BIT, 0, 1, &mb, 0, NULL, 0, NULL);
  return NULL;
}

static kiln_status_t vk_cmd_create(kiln_device_t* base, kiln_device_executable_t* e,
                                   int32_t max_timestamps, kiln_device_cmd_t** out) {
  vk_dev_t* d = D(base);
  if (d->lost) return kiln_vk_lost_status();
  if (max_timestamps < 0)
    return kiln_make_status(KILN_INVALID_ARGUMENT, "vulkan: %d timestamp slots", (int)max_timestamps);
  kiln_device_cmd_t* c = NULL;
  KILN_RETURN_IF_ERROR(kiln_allocator_malloc(base->allocator, sizeof *c, "vulkan command buffer", (void**)&c));
  memset(c, 0, sizeof *c);
  c->exe = e;
  kiln_status_t s = cmd_init(d, c, max_timestamps);
  if (s) {
    vk_cmd_destroy(base, c);
    return s;
  }
  *out = c;
  return NULL;
}

static kiln_status_t recordable(vk_dev_t* d, kiln_device_cmd_t* c) {
  if (d->lost) return kiln_vk_lost_status();
  if (!c) return kiln_make_status(KILN_INVALID_ARGUMENT, "vulkan: NULL command buffer");
  if (c->ended) return kiln_make_status(KILN_INVALID_ARGUMENT, "vulkan: command buffer already ended");
  return NULL;
}

/* A descriptor set for |layout| from the command buffer's pools (a new pool
 * when the last one is full). */
static kiln_status_t alloc_set(vk_dev_t* d, kiln_device_cmd_t* c, VkDescriptorSetLayout layout,
                               VkDescriptorSet* out) {
  if (c->n_pools == 0 || c->sets_in_last >= SETS_PER_POOL) {
    if (c->n_pools == c->cap_pools) {
      int32_t cap = c->cap_pools ? 2 * c->cap_pools : 4;
      VkDescriptorPool* np = realloc(c->pools, sizeof *np * (size_t)cap);
      if (!np) return kiln_make_status(KILN_OUT_OF_MEMORY, "vulkan: descriptor pools");
      c->pools = np;
      c->cap_pools = cap;
    }
    int32_t per = c->exe && c->exe->max_args > 0 ? c->exe->max_args : 1;
    VkDescriptorPoolSize ps[3] = {{VK_DESCRIPTOR_TYPE_STORAGE_BUFFER, (uint32_t)(SETS_PER_POOL * per)},
                                  {VK_DESCRIPTOR_TYPE_UNIFORM_TEXEL_BUFFER, (uint32_t)(SETS_PER_POOL * per)},
                                  {VK_DESCRIPTOR_TYPE_STORAGE_TEXEL_BUFFER, (uint32_t)(SETS_PER_POOL * per)}};
    VkDescriptorPoolCreateInfo dpi = {.sType = VK_STRUCTURE_TYPE_DESCRIPTOR_POOL_CREATE_INFO,
                                      .maxSets = SETS_PER_POOL,
                                      .poolSizeCount = 3,
                                      .pPoolSizes = ps};
    VKR(d, vkCreateDescriptorPool(d->dev, &dpi, NULL, &c->pools[c->n_pools]), "vkCreateDescriptorPool");
    ++c->n_pools;
    c->sets_in_last = 0;
  }
  VkDescriptorSetAllocateInfo ai = {.sType = VK_STRUCTURE_TYPE_DESCRIPTOR_SET_ALLOCATE_INFO,
                                    .descriptorPool = c->pools[c->n_pools - 1],
                                    .descriptorSetCount = 1,
                                    .pSetLayouts = &layout};
  VKR(d, vkAllocateDescriptorSets(d->dev, &ai, out), "vkAllocateDescriptorSets");
  ++c->sets_in_last;
  return NULL;
}

/* Binding |j| of |k| as a texel buffer of descriptor type |type|: a view
 * of |bi|'s range (in *view, which |w| points at), kept until the command
 * buffer is destroyed. */
static kiln_status_t texel_write(vk_dev_t* d, kiln_device_cmd_t* c, const vk_kernel_t* k, int32_t j,
                                 const VkDescriptorBufferInfo* bi, uint64_t avail, VkDescriptorType type,
                                 VkBufferView* view, VkWriteDescriptorSet* w) {
  if (c->n_views == c->cap_views) {
    int32_t cap = c->cap_views ? 2 * c->cap_views : 16;
    VkBufferView* nv = realloc(c->views, sizeof *nv * (size_t)cap);
    if (!nv) return kiln_make_status(KILN_OUT_OF_MEMORY, "vulkan: kernel '%s': texel buffer views", k->name);
    c->views = nv;
    c->cap_views = cap;
  }
  KILN_RETURN_IF_ERROR(kiln_vk_texel_view(d->dev, bi->buffer, bi->offset, bi->range, avail,
                                          d->props.limits.maxTexelBufferElements, k->htexel >> j & 1, k->name, j,
                                          view));
  c->views[c->n_views++] = *view;
  w->descriptorType = type;
  w->pBufferInfo = NULL;
  w->pTexelBufferView = view;
  return NULL;
}

/* A per-sample program's dispatches launch the grid's dim 2 |n| times
 * (targets/gpu_bind_dyn.h; the conv template steps between images by
 * gl_WorkGroupID.z too). */
static kiln_status_t vk_cmd_dim(kiln_device_t* base, kiln_device_cmd_t* c, int64_t n) {
  vk_dev_t* d = D(base);
  KILN_RETURN_IF_ERROR(recordable(d, c));
  for (int32_t k = 0; c->exe && k < c->exe->n; ++k)
    if (n < 1 || (uint64_t)c->exe->k[k].groups[2] * (uint64_t)n > d->props.limits.maxComputeWorkGroupCount[2])
      return kiln_make_status(KILN_UNSUPPORTED, "vulkan: kernel '%s' at dynamic dim value %lld: %llu work-groups in "
                              "dim 2, device '%s' launches at most %u", c->exe->k[k].name, (long long)n,
                              (unsigned long long)c->exe->k[k].groups[2] * (unsigned long long)n,
                              d->props.deviceName, d->props.limits.maxComputeWorkGroupCount[2]);
  c->dim = n;
  return NULL;
}

static kiln_status_t vk_cmd_dispatch(kiln_device_t* base, kiln_device_cmd_t* c, int32_t kernel,
                                     kiln_device_buffer_t* const* args, int32_t n_args) {
  vk_dev_t* d = D(base);
  KILN_RETURN_IF_ERROR(recordable(d, c));
  kiln_device_executable_t* e = c->exe;
  if (!e || kernel < 0 || kernel >= e->n)
    return kiln_make_status(KILN_OUT_OF_RANGE, "vulkan: kernel %d of %d", (int)kernel, e ? (int)e->n : 0);
  vk_kernel_t* k = &e->k[kernel];
  if (n_args != k->n_args)
    return kiln_make_status(KILN_INVALID_ARGUMENT, "vulkan: kernel '%s' takes %d buffers, got %d",
                            k->name, (int)k->n_args, (int)n_args);
  VkDescriptorBufferInfo bi[64];
  VkWriteDescriptorSet wr[64];
  VkBufferView tv[64]; /* texel bindings are 0-63 */
  VkDescriptorBufferInfo* bip = bi;
  VkWriteDescriptorSet* wrp = wr;
  if (n_args > 64) {
    bip = calloc((size_t)n_args, sizeof *bip);
    wrp = calloc((size_t)n_args, sizeof *wrp);
    if (!bip || !wrp) {
      free(bip);
      free(wrp);
      return kiln_make_status(KILN_OUT_OF_MEMORY, "vulkan: kernel '%s' descriptors", k->name);
    }
  }
  kiln_status_t s = NULL;
  uint64_t al = base->info.buffer_alignment;
  for (int32_t j = 0; !s && j < n_args; ++j) {
    const kiln_device_buffer_t* b = args ? args[j] : NULL;
    if (!b) {
      s = kiln_make_status(KILN_INVALID_ARGUMENT, "vulkan: kernel '%s': buffer %d is NULL", k->name, (int)j);
    } else if (b->offset % al) {
      s = kiln_make_status(KILN_INVALID_ARGUMENT,
                           "vulkan: kernel '%s': buffer %d starts at %llu, not a multiple of %llu",
                           k->name, (int)j, (unsigned long long)b->offset, (unsigned long long)al);
    } else if (b->size > d->props.limits.maxStorageBufferRange) {
      s = kiln_make_status(KILN_UNSUPPORTED,
                           "vulkan: kernel '%s': buffer %d spans %llu bytes, device '%s' binds at "
                           "most %u",
                           k->name, (int)j, (unsigned long long)b->size, d->props.deviceName,
                           d->props.limits.maxStorageBufferRange);
    } else {
      /* Ranges are 4-byte multiples (the allocation is padded to match). */
      uint64_t range = b->size ? (b->size + 3) & ~3ull : 4;
      if (range > b->avail) range = b->avail;
      bip[j] = (VkDescriptorBufferInfo){b->buf, b->offset, range};
      wrp[j] = (VkWriteDescriptorSet){.sType = VK_STRUCTURE_TYPE_WRITE_DESCRIPTOR_SET,
                                      .dstBinding = (uint32_t)j,
                                      .descriptorCount = 1,
                                      .descriptorType = VK_DESCRIPTOR_TYPE_STORAGE_BUFFER,
                                      .pBufferInfo = &bip[j]};
      if (j < 64 && ((k->texel | k->stexel) >> j & 1))
        s = texel_write(d, c, k, j, &bip[j], b->avail,
                        (k->texel >> j & 1) ? VK_DESCRIPTOR_TYPE_UNIFORM_TEXEL_BUFFER
                                            : VK_DESCRIPTOR_TYPE_STORAGE_TEXEL_BUFFER,
                        &tv[j], &wrp[j]);
    }
  }
  VkDescriptorSet set = VK_NULL_HANDLE;
  if (!s) s = alloc_set(d, c, k->dsl, &set);
  if (!s) {
    for (int32_t j = 0; j < n_args; ++j) wrp[j].dstSet = set;
    if (n_args > 0) vkUpdateDescriptorSets(d->dev, (uint32_t)n_args, wrp, 0, NULL);
    vkCmdBindPipeline(c->cb, VK_PIPELINE_BIND_POINT_COMPUTE, k->pipe);
    vkCmdBindDescriptorSets(c->cb, VK_PIPELINE_BIND_POINT_COMPUTE, k->layout, 0, 1, &set, 0, NULL);
    vkCmdDispatch(c->cb, k->groups[0], k->groups[1], k->groups[2] * (uint32_t)(c->dim > 0 ? c->dim : 1));
  }
  if (bip != bi) free(bip);
  if (wrp != wr) free(wrp);
  return s;
}

static kiln_status_t vk_cmd_barrier(kiln_device_t* base, kiln_device_cmd_t* c) {
  vk_dev_t* d = D(base);
  KILN_RETURN_IF_ERROR(recordable(d, c));
  VkMemoryBarrier mb = {.sType = VK_STRUCTURE_TYPE_MEMORY_BARRIER,
                        .srcAccessMask = VK_ACCESS_SHADER_WRITE_BIT,
                        .dstAccessMask = VK_ACCESS_SHADER_READ_BIT | VK_ACCESS_SHADER_WRITE_BIT};
  vkCmdPipelineBarrier(c->cb, VK_PIPELINE_STAGE_COMPUTE_SHADER_BIT, VK_PIPELINE_STAGE_COMPUTE_SHADER_BIT,
                       0, 1, &mb, 0, NULL, 0, NULL);
  return NULL;
}

static kiln_status_t vk_cmd_timestamp(kiln_device_t* base, kiln_device_cmd_t* c, int32_t slot) {
  vk_dev_t* d = D(base);
  KILN_RETURN_IF_ERROR(recordable(d, c));
  if (slot < 0 || slot >= c->max_ts)
    return kiln_make_status(KILN_OUT_OF_RANGE, "vulkan: timestamp slot %d of %d", (int)slot, (int)c->max_ts);
  vkCmdWriteTimestamp(c->cb, VK_PIPELINE_STAGE_BOTTOM_OF_PIPE_BIT, c->qp, (uint32_t)slot);
  return NULL;
}

static kiln_status_t vk_cmd_end(kiln_device_t* base, kiln_device_cmd_t* c) {
  vk_dev_t* d = D(base);
  KILN_RETURN_IF_ERROR(recordable(d, c));
  VkMemoryBarrier mb = {.sType = VK_STRUCTURE_TYPE_MEMORY_BARRIER,
                        .srcAccessMask = VK_ACCESS_SHADER_WRITE_BIT,
                        .dstAccessMask = VK_ACCESS_TRANSFER_READ_BIT | VK_ACCESS_TRANSFER_WRITE_BIT |
                                         VK_ACCESS_HOST_READ_BIT};
  vkCmdPipelineBarrier(c->cb, VK_PIPELINE_STAGE_COMPUTE_SHADER_BIT,
                       VK_PIPELINE_STAGE_TRANSFER_BIT | VK_PIPELINE_STAGE_HOST_BIT, 0, 1, &mb, 0,
                       NULL, 0, NULL);
  VKR(d, vkEndCommandBuffer(c->cb), "vkEndCommandBuffer");
  c->ended = true;
  return NULL;
}

static kiln_status_t wait_fence(vk_dev_t* d, kiln_device_cmd_t* c) {
  if (!c->pending) return NULL;
  VkResult r = vkWaitForFences(d->dev, 1, &c->fence, VK_TRUE, UINT64_MAX);
  if (r != VK_SUCCESS) return kiln_vk_fail(d, r, "vkWaitForFences");
  c->pending = false;
  c->finished = true;
  return NULL;
}

static kiln_status_t vk_submit(kiln_device_t* base, kiln_device_cmd_t* c) {
  vk_dev_t* d = D(base);
  if (d->lost) return kiln_vk_lost_status();
  if (!c || !c->ended)
    return kiln_make_status(KILN_INVALID_ARGUMENT, "vulkan: submit of a command buffer not ended");
  /* Without SIMULTANEOUS_USE a command buffer may be pending once. */
  KILN_RETURN_IF_ERROR(wait_fence(d, c));
  VKR(d, vkResetFences(d->dev, 1, &c->fence), "vkResetFences");
  VkSubmitInfo si = {.sType = VK_STRUCTURE_TYPE_SUBMIT_INFO,
                     .commandBufferCount = 1,
                     .pCommandBuffers = &c->cb};
  VKR(d, queue_submit(d, &si, c->fence), "vkQueueSubmit");
  c->pending = true;
  c->finished = false;
  return NULL;
}

static kiln_status_t vk_wait(kiln_device_t* base, kiln_device_cmd_t* c) {
  vk_dev_t* d = D(base);
  if (d->lost) return kiln_vk_lost_status();
  if (!c) return kiln_make_status(KILN_INVALID_ARGUMENT, "vulkan: wait on a NULL command buffer");
  return wait_fence(d, c);
}

static kiln_status_t vk_timestamps_read(kiln_device_t* base, kiln_device_cmd_t* c, uint64_t* out_ns,
                                        int32_t n) {
  vk_dev_t* d = D(base);
  if (d->lost) return kiln_vk_lost_status();
  if (!c || n < 0 || n > c->max_ts)
    return kiln_make_status(KILN_OUT_OF_RANGE, "vulkan: %d timestamps of %d", (int)n, c ? (int)c->max_ts : 0);
  if (n == 0) return NULL;
  if (!c->finished)
    return kiln_make_status(KILN_INVALID_ARGUMENT, "vulkan: timestamps read before a finished submission");
  uint64_t* ticks = calloc((size_t)n, sizeof *ticks);
  if (!ticks) return kiln_make_status(KILN_OUT_OF_MEMORY, "vulkan: timestamps");
  VkResult r = vkGetQueryPoolResults(d->dev, c->qp, 0, (uint32_t)n, sizeof(uint64_t) * (size_t)n,
                                     ticks, sizeof(uint64_t),
                                     VK_QUERY_RESULT_64_BIT | VK_QUERY_RESULT_WAIT_BIT);
  if (r != VK_SUCCESS) {
    free(ticks);
    return kiln_vk_fail(d, r, "vkGetQueryPoolResults");
  }
  uint64_t mask = d->timestamp_bits >= 64 ? ~0ull : ((1ull << d->timestamp_bits) - 1);
  double period = d->props.limits.timestampPeriod;
  for (int32_t i = 0; i < n; ++i) out_ns[i] = (uint64_t)((double)(ticks[i] & mask) * period);
  free(ticks);
  return NULL;
}

const kiln_device_vtable_t kiln_vk_vtable = {
    .destroy = kiln_vk_destroy, .buffer_create = vk_buffer_create, .view_create = vk_view_create,
    .buffer_destroy = vk_buffer_destroy, .buffer_write = vk_buffer_write, .buffer_read = vk_buffer_read,
    .executable_create = kiln_vk_executable_create, .executable_destroy = kiln_vk_executable_destroy,
    .cmd_create = vk_cmd_create, .cmd_destroy = vk_cmd_destroy, .cmd_dispatch = vk_cmd_dispatch,
    .cmd_barrier = vk_cmd_barrier, .cmd_timestamp = vk_cmd_timestamp, .cmd_end = vk_cmd_end,
    .submit = vk_submit, .wait = vk_wait, .timestamps_read = vk_timestamps_read, .cmd_dim = vk_cmd_dim};

/* ---- registration (runtime/device_registry.h) -------------------------- */

/* KILN_VULKAN_VALIDATION=1 turns on the validation layer for devices opened
 * by name (tests and `kiln run`); kiln_vulkan_device_create takes it as an
 * argument. */
static kiln_status_t vk_api_open(int32_t index, const kiln_device_open_options_t* options,
                                 kiln_allocator_t allocator, kiln_device_t** out_device) {
  const char* v = getenv("KILN_VULKAN_VALIDATION");
  return kiln_vulkan_device_create(index, v && v[0] == '1', allocator, out_device);
}

/* kiln tune's closing build: its pipelines and those taken from earlier
 * builds (0, 0 without reuse_code) */
static void vk_api_units(const kiln_device_executable_t* e, int32_t* units, int32_t* reused) {
  *units = e->pipelines;
  *reused = e->reused;
}

const kiln_device_api_t kiln_device_api_vulkan = {
    .name = "vulkan",
    .code_form = KILN_CODE_BLOB_PER_KERNEL,
    .shared_code = true,
    .open = vk_api_open,
    .list = kiln_vulkan_list_devices,
    .executable_units = vk_api_units,
};
