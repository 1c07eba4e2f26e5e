/* Uniform texel buffers for the Vulkan device (vulkan_texel.h).
 *
 * Why: lavapipe (Mesa 22.x) turns every storage-buffer load whose address
 * differs between the 8 SIMD lanes into a loop over the lanes that inserts
 * each lane's value into a vector kept on the stack (a store-forwarding
 * stall per lane and component), while a texelFetch from a buffer view goes
 * through its texture path: one register gather (AVX2 vgatherdps) for the
 * 8 lanes, and a vec4 texel one 16-byte load per lane. The GEMM and conv
 * shaders read their operands through a samplerBuffer where that measured
 * faster; the device finds those bindings in the SPIR-V itself (so the
 * kernel metadata and the module format stay as they are) and binds each
 * as a view of 4 floats (R32G32B32A32_SFLOAT), or of 4 halves
 * (R16G16B16A16_SFLOAT) where the SPIR-V declares an rgba16f imageBuffer:
 * the printed kernels' f16 parameters, read and written as vec4 in f32. A
 * sampled buffer has no format in SPIR-V, so f16 texels are always images. */
#include "runtime/vulkan/vulkan_texel.h"

#include <stdlib.h>

enum {
  OP_TYPE_IMAGE = 25,
  OP_TYPE_SAMPLED_IMAGE = 27,
  OP_TYPE_POINTER = 32,
  OP_VARIABLE = 59,
  OP_DECORATE = 71,
  DECORATION_BINDING = 33,
  DIM_BUFFER = 5,
  FORMAT_RGBA32F = 1,
  FORMAT_RGBA16F = 2,
};

kiln_status_t kiln_vk_texel_bindings(const uint32_t* w, size_t n, const char* kernel, uint64_t* out,
                                     uint64_t* out_storage, uint64_t* out_half) {
  *out = *out_storage = *out_half = 0;
  if (n < 5) return kiln_make_status(KILN_INVALID_ARGUMENT, "vulkan: kernel '%s': SPIR-V shorter than its header", kernel);
  const uint32_t bound = w[3];
  if (bound == 0 || bound > (1u << 22))
    return kiln_make_status(KILN_INVALID_ARGUMENT, "vulkan: kernel '%s': SPIR-V id bound %u", kernel, bound);
  /* per id: 1 a buffer image type (sampled), 2 a pointer to one, 3 a
   * variable of such a pointer; 4, 5, 6 the same for a storage buffer image
   * (an imageBuffer: a storage texel buffer), 7, 8, 9 for an rgba16f one;
   * binding + 1 of decorated ids */
  uint8_t* kind = calloc(bound, 1);
  uint32_t* binding = calloc(bound, sizeof *binding);
  if (!kind || !binding) {
    free(kind);
    free(binding);
    return kiln_make_status(KILN_OUT_OF_MEMORY, "vulkan: kernel '%s': SPIR-V scan", kernel);
  }
  kiln_status_t s = NULL;
  for (size_t i = 5; i < n && !s;) {
    const uint32_t wc = w[i] >> 16, op = w[i] & 0xffffu;
    if (wc == 0 || i + wc > n) {
      s = kiln_make_status(KILN_INVALID_ARGUMENT, "vulkan: kernel '%s': SPIR-V instruction at word %zu runs past the end",
                           kernel, i);
      break;
    }
    const uint32_t* a = w + i + 1; /* operands */
#define ID_OK(x) ((x) < bound)
    if (op == OP_TYPE_IMAGE && wc >= 9 && ID_OK(a[0])) {
      if (a[2] == DIM_BUFFER && a[6] == 1) kind[a[0]] = 1;
      else if (a[2] == DIM_BUFFER && a[6] == 2 && a[7] != FORMAT_RGBA32F && a[7] != FORMAT_RGBA16F)
        s = kiln_make_status(KILN_UNSUPPORTED, "vulkan: kernel '%s': storage texel buffer of image format %u (the "
                             "device binds rgba32f and rgba16f views)", kernel, a[7]);
      else if (a[2] == DIM_BUFFER && a[6] == 2) kind[a[0]] = a[7] == FORMAT_RGBA16F ? 7 : 4;
    } else if (op == OP_TYPE_SAMPLED_IMAGE && wc >= 3 && ID_OK(a[0]) && ID_OK(a[1])) {
      if (kind[a[1]] == 1) kind[a[0]] = 1;
    } else if (op == OP_TYPE_POINTER && wc >= 4 && ID_OK(a[0]) && ID_OK(a[2])) {
      if (kind[a[2]] % 3 == 1) kind[a[0]] = kind[a[2]] + 1;
    } else if (op == OP_VARIABLE && wc >= 4 && ID_OK(a[0]) && ID_OK(a[1])) {
      if (kind[a[0]] && kind[a[0]] % 3 == 2) kind[a[1]] = kind[a[0]] + 1;
    } else if (op == OP_DECORATE && wc >= 4 && ID_OK(a[0]) && a[1] == DECORATION_BINDING) {
      binding[a[0]] = a[2] + 1;
    }
#undef ID_OK
    i += wc;
  }
  for (uint32_t id = 0; id < bound && !s; ++id) {
    if (!kind[id] || kind[id] % 3 != 0 || binding[id] == 0) continue;
    if (binding[id] - 1 >= 64)
      s = kiln_make_status(KILN_UNSUPPORTED, "vulkan: kernel '%s': texel buffer at binding %u (the device takes 0-63)",
                           kernel, binding[id] - 1);
    else
      *(kind[id] == 3 ? out : out_storage) |= 1ull << (binding[id] - 1),
          *out_half |= (uint64_t)(kind[id] == 9) << (binding[id] - 1);
  }
  free(kind);
  free(binding);
  return s;
}

kiln_status_t kiln_vk_texel_view(VkDevice dev, VkBuffer buf, uint64_t offset, uint64_t range, uint64_t avail,
                                 uint64_t max_texels, bool half, const char* kernel, int32_t arg, VkBufferView* out) {
  *out = VK_NULL_HANDLE;
  /* vec4 texels: the range rounded up to a texel (16 or 8 bytes) where the
   * buffer has it (allocations are padded to 16 bytes), else down */
  const uint64_t tb = half ? 8 : 16;
  range = (range + tb - 1) & ~(tb - 1);
  if (range > avail) range = avail & ~(tb - 1);
  if (range == 0)
    return kiln_make_status(KILN_INVALID_ARGUMENT, "vulkan: kernel '%s': buffer %d is under one texel (%d bytes)",
                            kernel, (int)arg, (int)tb);
  if (range / tb > max_texels)
    return kiln_make_status(KILN_UNSUPPORTED,
                            "vulkan: kernel '%s': buffer %d holds %llu vec4 texels, the device's texel buffers at "
                            "most %llu",
                            kernel, (int)arg, (unsigned long long)(range / tb), (unsigned long long)max_texels);
  VkBufferViewCreateInfo vi = {.sType = VK_STRUCTURE_TYPE_BUFFER_VIEW_CREATE_INFO,
                               .buffer = buf,
                               .format = half ? VK_FORMAT_R16G16B16A16_SFLOAT : VK_FORMAT_R32G32B32A32_SFLOAT,
                               .offset = offset,
                               .range = range};
  VkResult r = vkCreateBufferView(dev, &vi, NULL, out);
  if (r != VK_SUCCESS)
    return kiln_make_status(KILN_INTERNAL, "vulkan: kernel '%s': vkCreateBufferView for buffer %d failed (%d)", kernel,
                            (int)arg, (int)r);
  return NULL;
}
