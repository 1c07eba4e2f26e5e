#version 450
#extension GL_EXT_control_flow_attributes : enable
// kiln depthwise 2-D convolution (one input channel per group), f32 sums:
//
//   Y[b][m][oh][ow] = EPI(bias[m] + sum_{kh, kw} W[m][kh][kw] * X[b][m / MG][ih][iw]),
//   ih = oh*SH + kh*DH - PH, iw = ow*SW + kw*DW - PW (taps outside X add 0)
//
// One invocation per output position: the taps are unrolled, so an
// invocation runs no loop at all (lavapipe's 65535-iteration limit is far).
// The host puts after the #extension lines: the element types TX TW TC TY,
// the bindings BIND_X BIND_W BIND_C BIND_Y (kernel parameter order), the
// epilogue operands' buffers (e0, e1, ...) and KC_EPI(v, b, m, p) as for
// conv.comp, and
//   CN CM CC MG   images, output channels, input channels, outputs per group
//   IH IW OH OW   input and output plane
//   KH KW SH SW DH DW PH PW  window
//   CHAS_BIAS     bias per output channel
//   WG            invocations per work-group
// Dispatch: (ceil(OH*OW / WG), CN*CM, 1) work-groups.

layout(local_size_x = WG, local_size_y = 1, local_size_z = 1) in;
layout(std430, set = 0, binding = BIND_X) restrict readonly buffer BufX { TX x[]; };
layout(std430, set = 0, binding = BIND_W) restrict readonly buffer BufW { TW w[]; };
#if CHAS_BIAS
layout(std430, set = 0, binding = BIND_C) restrict readonly buffer BufC { TC bias[]; };
#endif
layout(std430, set = 0, binding = BIND_Y) restrict writeonly buffer BufY { TY y[]; };

void main() {
  const int p = int(gl_GlobalInvocationID.x);
  if (p >= OH * OW) return;
  const int nm = int(gl_WorkGroupID.y);
  const int b = nm / CM, m = nm % CM;
  const int oh = p / OW, ow = p % OW;
  const int xb = (b * CC + m / MG) * IH * IW;
#if CHAS_BIAS
  float v = float(bias[m]);
#else
  float v = 0.0;
#endif
  [[unroll]] for (int kh = 0; kh < KH; ++kh) {
    const int ih = oh * SH + kh * DH - PH;
    if (ih < 0 || ih >= IH) continue;
    [[unroll]] for (int kw = 0; kw < KW; ++kw) {
      const int iw = ow * SW + kw * DW - PW;
      if (iw < 0 || iw >= IW) continue;
      v = fma(float(x[xb + ih * IW + iw]), float(w[(m * KH + kh) * KW + kw]), v);
    }
  }
  KC_EPI(v, b, m, p);
  y[nm * OH * OW + p] = TY(v);
}
