/* kiln depthwise 2-D convolution template for OpenCL C 1.2 (one input
 * channel per group), f32 sums:
 *
 *   Y[b][m][oh][ow] = EPI(bias[m] + sum_{kh, kw} W[m][kh][kw] * X[b][m / MG][ih][iw]),
 *   ih = oh*SH + kh*DH - PH, iw = ow*SW + kw*DW - PW (taps outside X add 0)
 *
 * The kernel the lowering computes directly from X (lowering/
 * lower_nn_conv.c, conv_depthwise): no padded copy, so every tap is
 * bounds-checked here. It is memory bound and runs best on PoCL's CPU
 * device (work-items of a work-group are iterations of one loop) when an
 * item does a lot of vector work and the work-group has no barrier.
 *
 * A row is cut the way the lowering cuts it: the interior columns, where
 * every tap lies inside the input row, run as vector runs with one plain
 * vector load per tap (stride 2: a 2*VW load and its even lanes); the last
 * run ends exactly at the interior's end and may overlap the one before
 * it (those outputs are computed twice, the same way, and stored twice).
 * The few border columns left and right go one output at a time with
 * checked taps. Rows outside X skip their taps. A work-item computes KD_RH
 * whole output rows of one channel, so the border code and the index
 * arithmetic are paid once per row, not per vector.
 *
 * f16 storage (--precision fp16): any of X, W, BIAS, Y and the epilogue
 * operands may be a half buffer (CX_F16, CW_F16, CC_F16, CY_F16; the
 * epilogue's own loads), read with vload_half[n] and written with
 * vstore_half[n]_rte (OpenCL C 1.2 without cl_khr_fp16 may not dereference
 * a half pointer); the sums are f32 either way.
 *
 * Instance parameters (the includer defines them before this text and
 * #undefs them after):
 *   KILN_DW_NAME, KILN_DW_SIGNATURE (parameters X, W, Y, optionally BIAS
 *     and the epilogue operands E0, E1, ...; the plan kernel's order)
 *   CN CM CC MG   images, output channels, input channels, outputs per group
 *   IH IW OH OW   input and output plane
 *   KH KW SH SW DH DW PH PW  window
 *   CHAS_BIAS     bias per output channel
 *   CX_F16 CW_F16 CC_F16 CY_F16  1: that buffer holds half (storage only)
 *   KD_EPI(v, b, m, p, LD, LDH)  statement applying the fused epilogue to v
 *     (float or KD_VT) for image b, channel m, dense position p; LD(ptr)
 *     loads a value of v's type from a float pointer, LDH from a half one;
 *     it runs in the scope of KD_EPI_PRE(b, m), which loads the operands
 *     that are the same for all positions once
 *   KD_VW         outputs per vector run (4, 8 or 16; at most 8 when SW > 1)
 *   KD_VW2        2 * KD_VW (the stride-2 loads)
 *   KD_WG         work-items per work-group
 *   KD_RH         output rows per work-item
 *   KD_LO KD_VEND interior columns: vector runs cover [KD_LO, KD_VEND)
 *                 (KD_VEND = KD_LO when no run fits: every column scalar)
 * Launch: global (ceil(CN*CM*ceil(OH/KD_RH) / KD_WG) * KD_WG, 1, 1),
 * local (KD_WG, 1, 1).
 */
#define KD_CAT_(a, b) a##b
#define KD_CAT(a, b) KD_CAT_(a, b)
#define KD_VT KD_CAT(float, KD_VW)
#define KD_VLOAD(p) KD_CAT(vload, KD_VW)(0, (p))
#define KD_VLOAD2(p) KD_CAT(vload, KD_VW2)(0, (p))
#define KD_VSTORE(v, p) KD_CAT(vstore, KD_VW)((v), 0, (p))
#define KD_SLOAD(p) (*(p))
#define KD_VLOADH(p) KD_CAT(vload_half, KD_VW)(0, (p))
#define KD_SLOADH(p) vload_half(0, (p))
/* f16 storage: loads and stores by the buffer's flag h (0 float, 1 half) */
#define KD_LD_0(p, i) ((p)[i])
#define KD_LD_1(p, i) vload_half((i), (p))
#define KD_LD(h, p, i) KD_CAT(KD_LD_, h)(p, i)
#if CX_F16
#define KD_TX half
#define KD_XVLOAD(p) KD_VLOADH(p)
#define KD_XVLOAD2(p) KD_CAT(vload_half, KD_VW2)(0, (p))
#else
#define KD_TX float
#define KD_XVLOAD(p) KD_VLOAD(p)
#define KD_XVLOAD2(p) KD_VLOAD2(p)
#endif
/* the taps as KD_ONE / KD_RUN read them: f16 weights are converted once
 * per work-item into a private float array (a vload_half per tap and run
 * otherwise: 1.8x slower on MobileNetV2's strided layers on PoCL) */
#if CW_F16
#define KD_WTAPS const float*
#else
#define KD_WTAPS const __global float* restrict
#endif
#if CY_F16
#define KD_TY half
#define KD_YVSTORE(v, p) KD_CAT(KD_CAT(vstore_half, KD_VW), _rte)((v), 0, (p))
#define KD_YST(v, p, i) vstore_half_rte((v), (i), (p))
#else
#define KD_TY float
#define KD_YVSTORE(v, p) KD_VSTORE(v, p)
#define KD_YST(v, p, i) ((p)[i] = (v))
#endif
#define KD_RB ((OH + KD_RH - 1) / KD_RH)
#define KD_ONE KD_CAT(KILN_DW_NAME, _one)
#define KD_RUN KD_CAT(KILN_DW_NAME, _run)

/* Output (oh, ow) of the channel whose input plane is |xb| and weights
 * |wm|: every tap checked. */
static inline float KD_ONE(const __global KD_TX* restrict xb, KD_WTAPS wm, const int oh,
                           const int ow, const float bias) {
  float acc = bias;
#pragma unroll
  for (int kh = 0; kh < KH; ++kh) {
    const int ih = oh * SH + kh * DH - PH;
    if (ih < 0 || ih >= IH) continue;
#pragma unroll
    for (int kw = 0; kw < KW; ++kw) {
      const int iw = ow * SW + kw * DW - PW;
      if (iw >= 0 && iw < IW) acc = fma(KD_LD(CX_F16, xb, ih * IW + iw), wm[kh * KW + kw], acc);
    }
  }
  return acc;
}

/* Outputs (oh, ow0 .. ow0 + KD_VW - 1), all interior columns. */
static inline KD_VT KD_RUN(const __global KD_TX* restrict xb, KD_WTAPS wm, const int oh,
                           const int ow0, const float bias) {
  KD_VT acc = (KD_VT)(bias);
#pragma unroll
  for (int kh = 0; kh < KH; ++kh) {
    const int ih = oh * SH + kh * DH - PH;
    if (ih < 0 || ih >= IH) continue;
    const __global KD_TX* xr = xb + ih * IW + ow0 * SW - PW;
#pragma unroll
    for (int kw = 0; kw < KW; ++kw) {
      const __global KD_TX* src = xr + kw * DW;
      KD_VT xv;
#if SW == 1
      xv = KD_XVLOAD(src);
#elif SW == 2
      xv = KD_XVLOAD2(src).even;
#else
      float lanes[KD_VW];
#pragma unroll
      for (int l = 0; l < KD_VW; ++l) lanes[l] = KD_LD(CX_F16, src, l * SW);
      xv = KD_VLOAD(lanes);
#endif
      acc = fma(xv, (KD_VT)(wm[kh * KW + kw]), acc);
    }
  }
  return acc;
}

__kernel __attribute__((reqd_work_group_size(KD_WG, 1, 1))) void KILN_DW_NAME(KILN_DW_SIGNATURE) {
  const int i = (int)get_global_id(0);
  if (i >= CN * CM * KD_RB) return;
  const int nm = i / KD_RB, oh0 = (i % KD_RB) * KD_RH;
  const int b = nm / CM, m = nm % CM;
  const __global KD_TX* xb = X + (b * CC + m / MG) * (IH * IW);
#if CW_F16
  float wtaps[KH * KW];
  for (int t = 0; t < KH * KW; ++t) wtaps[t] = vload_half(m * (KH * KW) + t, W);
  const float* wm = wtaps;
#else
  const __global float* wm = W + m * (KH * KW);
#endif
  __global KD_TY* yb = Y + nm * (OH * OW);
  KD_EPI_PRE(b, m);
#if CHAS_BIAS
  const float bias = KD_LD(CC_F16, BIAS, m);
#else
  const float bias = 0.0f;
#endif
  const int oh1 = min(oh0 + KD_RH, OH);
  for (int oh = oh0; oh < oh1; ++oh) {
    const int p0 = oh * OW;
    for (int ow = 0; ow < KD_LO; ++ow) {
      float v = KD_ONE(xb, wm, oh, ow, bias);
      KD_EPI(v, b, m, p0 + ow, KD_SLOAD, KD_SLOADH);
      KD_YST(v, yb, p0 + ow);
    }
#if KD_VEND > KD_LO
    for (int ow0 = KD_LO;; ow0 += KD_VW) {
      /* the last run ends at KD_VEND, overlapping the previous one */
      const bool last = ow0 + KD_VW >= KD_VEND;
      if (last) ow0 = KD_VEND - KD_VW;
      KD_VT v = KD_RUN(xb, wm, oh, ow0, bias);
      KD_EPI(v, b, m, p0 + ow0, KD_VLOAD, KD_VLOADH);
      KD_YVSTORE(v, yb + p0 + ow0);
      if (last) break;
    }
#endif
    for (int ow = KD_VEND; ow < OW; ++ow) {
      float v = KD_ONE(xb, wm, oh, ow, bias);
      KD_EPI(v, b, m, p0 + ow, KD_SLOAD, KD_SLOADH);
      KD_YST(v, yb, p0 + ow);
    }
  }
}

#undef KD_CAT_
#undef KD_CAT
#undef KD_VT
#undef KD_VLOAD
#undef KD_VLOAD2
#undef KD_VSTORE
#undef KD_SLOAD
#undef KD_VLOADH
#undef KD_SLOADH
#undef KD_LD_0
#undef KD_LD_1
#undef KD_LD
#undef KD_TX
#undef KD_XVLOAD
#undef KD_XVLOAD2
#undef KD_WTAPS
#undef KD_TY
#undef KD_YVSTORE
#undef KD_YST
#undef KD_RB
#undef KD_ONE
#undef KD_RUN
