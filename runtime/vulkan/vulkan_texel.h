/* Uniform texel buffers for the Vulkan device: which bindings of a kernel's
 * SPIR-V are texel buffers (samplerBuffer), and the vec4 f32 buffer views the
 * device binds there (vulkan_texel.c says why the shaders use them). */
#ifndef KILN_RUNTIME_VULKAN_TEXEL_H
#define KILN_RUNTIME_VULKAN_TEXEL_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <vulkan/vulkan.h>

#include "kiln/status.h"

/* Bit j of *out set when binding j (set 0) of the SPIR-V |w| (|n| words)
 * is a sampled buffer image (a uniform texel buffer), of *out_storage when
 * it is a storage buffer image (imageBuffer: a storage texel buffer), and
 * then also of *out_half when its format is rgba16f (else rgba32f; another
 * format is an UNSUPPORTED error). Errors name |kernel|. */
kiln_status_t kiln_vk_texel_bindings(const uint32_t* w, size_t n, const char* kernel, uint64_t* out,
                                     uint64_t* out_storage, uint64_t* out_half);

/* An R32G32B32A32_SFLOAT view (kiln's texel: 4 floats; |half|: an
 * R16G16B16A16_SFLOAT one, 4 halves) of |range| bytes of |buf| from
 * |offset| (rounded up to whole texels within the |avail| bytes the buffer
 * has from there; at most |max_texels| texels); errors name |kernel| and
 * buffer |arg|. */
kiln_status_t kiln_vk_texel_view(VkDevice dev, VkBuffer buf, uint64_t offset, uint64_t range, uint64_t avail,
                                 uint64_t max_texels, bool half, const char* kernel, int32_t arg, VkBufferView* out);

#endif
