/* NonMaxSuppression's box test, shared by the reference kernel
 * (ir/ops/tensor_dataflow.c) and libkiln_rt's host kernel for staged
 * modules (runtime/staged_ops.c), so both select the same boxes:
 * onnxruntime's rule (corners in either order or center + size; an empty
 * box never suppresses). Header-only, no dependencies. */
#ifndef KILN_KERNELS_HOST_NMS_BOX_H_
#define KILN_KERNELS_HOST_NMS_BOX_H_

#include <stdbool.h>

/* fminf/fmaxf without the libm call (the IoU test is NMS's inner loop):
 * NaN gives the other operand as they do; of two zeros either may come
 * back, which no decision below depends on (a zero width, height or area
 * never suppresses). */
static inline float kiln_nms_min(float a, float b) { return a != a ? b : b != b ? a : a < b ? a : b; }
static inline float kiln_nms_max(float a, float b) { return a != a ? b : b != b ? a : a > b ? a : b; }

/* A box's corners and area, computed once per box instead of once per pair. */
typedef struct {
  float y0, y1, x0, x1, area;
} kiln_nms_box_t;

static inline kiln_nms_box_t kiln_nms_box(const float* a, bool center) {
  kiln_nms_box_t o;
  if (center) {
    o.x0 = a[0] - a[2] / 2, o.x1 = a[0] + a[2] / 2, o.y0 = a[1] - a[3] / 2, o.y1 = a[1] + a[3] / 2;
  } else {
    o.y0 = kiln_nms_min(a[0], a[2]), o.y1 = kiln_nms_max(a[0], a[2]);
    o.x0 = kiln_nms_min(a[1], a[3]), o.x1 = kiln_nms_max(a[1], a[3]);
  }
  o.area = (o.x1 - o.x0) * (o.y1 - o.y0);
  return o;
}

/* Whether boxes |a| and |b| overlap by more than |thr|. */
static inline bool kiln_nms_suppress(const kiln_nms_box_t* a, const kiln_nms_box_t* b, float thr) {
  const float iw = kiln_nms_max(kiln_nms_min(a->x1, b->x1) - kiln_nms_max(a->x0, b->x0), 0.0f);
  const float ih = kiln_nms_max(kiln_nms_min(a->y1, b->y1) - kiln_nms_max(a->y0, b->y0), 0.0f);
  const float inter = iw * ih;
  if (inter <= 0.0f) return false;
  const float uni = a->area + b->area - inter;
  if (a->area <= 0.0f || b->area <= 0.0f || uni <= 0.0f) return false;
  return inter / uni > thr;
}

#endif /* KILN_KERNELS_HOST_NMS_BOX_H_ */
