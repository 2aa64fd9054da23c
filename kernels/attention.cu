// Batched decode attention on CUDA: one new query token per sequence, each
// sequence with its own number of keys and its own K/V buffers, f32
// (`attn_decode`) or f16 (`attn_decode_f16`, `[llm] kv_cache = "f16"`: each
// key and value read as the f32 it stands for; the arithmetic is f32).
// Host side: src/inference/kernels/cuda/attention.rs. CPU reference:
// `attention` in src/inference/models/nn.rs (t = 1: causal = all keys so
// far, optionally the last `window` only, optional tanh soft-capping).
//
// q: [n_seq, n_head, hd]. Sequence s: K at kp[s] + kvh * k_hs[s] + key * hd,
// V at vp[s] + kvh * v_hs[s] + key * vd, keys 0 .. lens[s]. Query heads that
// share a key/value head are consecutive (kvh = h / (n_head / n_kv)).
// out: [n_seq, n_head * vd].
//
// One block of AW warps per (head, sequence); warp w takes keys k0 + w,
// k0 + w + AW, ... with an online softmax, the warps' partial results are
// merged at the end. vd <= 32 * MAXV.

#include <cuda_fp16.h>
#include <math.h>
#include <stdint.h>

#define AW 4
#define MAXV 8

__device__ __forceinline__ float warp_sum_a(float v) {
#pragma unroll
  for (int o = 16; o > 0; o >>= 1) v += __shfl_xor_sync(0xffffffffu, v, o);
  return v;
}

__device__ __forceinline__ float to_f32(float x) { return x; }
__device__ __forceinline__ float to_f32(__half x) { return __half2float(x); }

// Shared: q hd, m AW, l AW, acc AW*vd floats. grid (n_head, n_seq), block 32*AW.
template <typename T>
__device__ __forceinline__ void attn_decode_t(const float* __restrict__ q,
                                              const T* const* __restrict__ kp,
                                              const T* const* __restrict__ vp,
                                              const long long* __restrict__ k_hs,
                                              const long long* __restrict__ v_hs,
                                              const int* __restrict__ lens, int n_head, int n_kv,
                                              int hd, int vd, float scale, float softcap,
                                              int window, float* __restrict__ out) {
  extern __shared__ float sm[];
  float* qs = sm;
  float* mw = qs + hd;
  float* lw = mw + AW;
  float* accw = lw + AW;

  const int h = blockIdx.x, s = blockIdx.y;
  const int tid = threadIdx.x, warp = tid / 32, lane = tid % 32;
  const int kvh = h / (n_head / n_kv);
  const int len = lens[s];
  const int k0 = window > 0 ? max(0, len - window) : 0;
  const float* qrow = q + ((size_t)s * n_head + h) * hd;
  for (int d = tid; d < hd; d += 32 * AW) qs[d] = qrow[d];
  __syncthreads();

  const T* kb = kp[s] + (size_t)kvh * k_hs[s];
  const T* vb = vp[s] + (size_t)kvh * v_hs[s];
  float acc[MAXV];
#pragma unroll
  for (int c = 0; c < MAXV; ++c) acc[c] = 0.0f;
  float m = -INFINITY, l = 0.0f;
  for (int key = k0 + warp; key < len; key += AW) {
    const T* kr = kb + (size_t)key * hd;
    float dot = 0.0f;
    for (int d = lane; d < hd; d += 32) dot += qs[d] * to_f32(kr[d]);
    dot = warp_sum_a(dot);
    float sc = dot * scale;
    if (softcap > 0.0f) sc = softcap * tanhf(sc / softcap);
    const float mn = fmaxf(m, sc);
    const float corr = expf(m - mn);
    const float p = expf(sc - mn);
    l = l * corr + p;
    const T* vr = vb + (size_t)key * vd;
#pragma unroll
    for (int c = 0; c < MAXV; ++c) {
      const int d = lane + 32 * c;
      if (d < vd) acc[c] = acc[c] * corr + p * to_f32(vr[d]);
    }
    m = mn;
  }
  if (lane == 0) {
    mw[warp] = m;
    lw[warp] = l;
  }
#pragma unroll
  for (int c = 0; c < MAXV; ++c) {
    const int d = lane + 32 * c;
    if (d < vd) accw[warp * vd + d] = acc[c];
  }
  __syncthreads();
  float M = -INFINITY;
#pragma unroll
  for (int w = 0; w < AW; ++w) M = fmaxf(M, mw[w]);
  float L = 0.0f;
  float f[AW];
#pragma unroll
  for (int w = 0; w < AW; ++w) {
    f[w] = lw[w] > 0.0f ? expf(mw[w] - M) : 0.0f;
    L += lw[w] * f[w];
  }
  float* orow = out + ((size_t)s * n_head + h) * vd;
  for (int d = tid; d < vd; d += 32 * AW) {
    float o = 0.0f;
#pragma unroll
    for (int w = 0; w < AW; ++w) o += accw[w * vd + d] * f[w];
    orow[d] = L > 0.0f ? o / L : 0.0f;
  }
}

#define ATTN_DECODE_ENTRY(NAME, T)                                                          \
  extern "C" __global__ void NAME(const float* __restrict__ q, const T* const* __restrict__ kp, \
                                  const T* const* __restrict__ vp,                          \
                                  const long long* __restrict__ k_hs,                       \
                                  const long long* __restrict__ v_hs,                       \
                                  const int* __restrict__ lens, int n_head, int n_kv, int hd, \
                                  int vd, float scale, float softcap, int window,           \
                                  float* __restrict__ out) {                                \
    attn_decode_t<T>(q, kp, vp, k_hs, v_hs, lens, n_head, n_kv, hd, vd, scale, softcap,     \
                     window, out);                                                          \
  }

ATTN_DECODE_ENTRY(attn_decode, float)
ATTN_DECODE_ENTRY(attn_decode_f16, __half)
