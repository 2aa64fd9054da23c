// Mamba-2 selective state-space scan (Nemotron-H's recurrent layers) on
// CUDA, f32. Host side: src/inference/kernels/cuda/mamba2.rs. CPU reference:
// src/inference/models/mamba2.rs. Per head h (state S [head_dim, d_state]),
// per token:  S <- S * exp(dt * A) + (dt * x) (x) B;   y = S . C + D * x.
// Every row i of S (one element of x) evolves on its own, so one warp owns
// one row: lane l keeps S[i][l + 32 k] in registers (d_state <= 32 * MAXN).
//
// Rows of x, B, C may sit inside wider rows (the conv output): row r of x
// starts at x + r * x_stride, B of group g at b + r * bc_stride + g * d_state,
// C likewise from c. Sequence s owns rows seq_row[s] .. + seq_len[s]; its
// state is s_in[s] (null: zeros) -> s_out[s], [n_head, head_dim, d_state].
// grid (ceil(head_dim / RW), n_head, n_seq), block 32 * RW.

#define RW 8
#define MAXN 8

__device__ __forceinline__ float warp_sum_m(float v) {
#pragma unroll
  for (int o = 16; o > 0; o >>= 1) v += __shfl_xor_sync(0xffffffffu, v, o);
  return v;
}

extern "C" __global__ void mamba2_scan(const float* __restrict__ x, const float* __restrict__ b,
                                       const float* __restrict__ c, const float* __restrict__ dt,
                                       const float* __restrict__ a, const float* __restrict__ dskip,
                                       const int* __restrict__ seq_row,
                                       const int* __restrict__ seq_len,
                                       const float* const* __restrict__ s_in,
                                       float* const* __restrict__ s_out, int n_head, int head_dim,
                                       int d_state, int n_group, long long x_stride,
                                       long long bc_stride, float* __restrict__ y) {
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
  const int i = blockIdx.x * RW + warp;
  const int h = blockIdx.y, s = blockIdx.z;
  if (i >= head_dim) return;  // whole warps leave together
  const int g = h / (n_head / n_group);
  const size_t srow = ((size_t)h * head_dim + i) * d_state;
  const float* sin_ = s_in[s];
  float st[MAXN];
#pragma unroll
  for (int k = 0; k < MAXN; ++k) {
    const int n = lane + 32 * k;
    st[k] = (n < d_state && sin_) ? sin_[srow + n] : 0.0f;
  }
  const float av = a[h], dv = dskip[h];
  const int off = seq_row[s], t = seq_len[s];
  for (int ti = 0; ti < t; ++ti) {
    const size_t r = (size_t)(off + ti);
    const float dtv = dt[r * n_head + h];
    const float xi = x[r * x_stride + (size_t)h * head_dim + i];
    const float decay = expf(dtv * av);
    const float u = dtv * xi;
    const float* br = b + r * bc_stride + (size_t)g * d_state;
    const float* cr = c + r * bc_stride + (size_t)g * d_state;
    float acc = 0.0f;
#pragma unroll
    for (int k = 0; k < MAXN; ++k) {
      const int n = lane + 32 * k;
      if (n < d_state) {
        st[k] = st[k] * decay + u * br[n];
        acc += st[k] * cr[n];
      }
    }
    acc = warp_sum_m(acc);
    if (lane == 0) y[(r * n_head + h) * head_dim + i] = acc + dv * xi;
  }
  float* so = s_out[s];
#pragma unroll
  for (int k = 0; k < MAXN; ++k) {
    const int n = lane + 32 * k;
    if (n < d_state) so[srow + n] = st[k];
  }
}
