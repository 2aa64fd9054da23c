// Gated delta-net (Qwen3.5's linear attention) on CUDA, f32 throughout.
// Host side and the exact shapes: src/inference/kernels/cuda/delta_net.rs. The CPU
// reference these kernels are tested against: src/inference/models/delta_net.rs
// (the delta rule) and src/inference/models/qwen35.rs (conv, decay, beta).
//
// A batch is several sequences stacked by rows: sequence s owns rows
// seq_off[s] .. seq_off[s+1] of every [n_total, ...] array (the delta-rule
// kernels take a subset of the batch: rows seq_row[s] .. + seq_len[s]). Per-sequence
// states are separate buffers, passed as arrays of device pointers; a null
// input state means "all zeros" (the first step of a sequence).
//
// Conv input row layout (conv_dim = C = 2*n_k*d_k + n_v*d_v): q heads, k
// heads, v heads. Value head h reads key head (tiled ? h % n_k : h / (n_v/n_k)).

#include <stdint.h>

#define TV 32  // value columns per block (blockDim.x)
#define RY 8   // row groups per block (blockDim.y)

__device__ __forceinline__ float softplus_f(float x) {
  return x > 20.0f ? x : log1pf(expf(x));
}

__device__ __forceinline__ float sigmoid_f(float x) { return 1.0f / (1.0f + expf(-x)); }

__device__ __forceinline__ float warp_sum(float v) {
#pragma unroll
  for (int o = 16; o > 0; o >>= 1) v += __shfl_xor_sync(0xffffffffu, v, o);
  return v;
}

__device__ __forceinline__ int key_head(int h, int n_k, int n_v, int tiled) {
  return tiled ? h % n_k : h / (n_v / n_k);
}

// Causal depthwise conv + SiLU. One thread per (row, channel):
// out[r, c] = silu(sum_j w[c, j] * ext(ti + j)) where ext is the sequence's
// conv state (keep = kc - 1 rows, oldest first) followed by its inputs.
// grid (n_total, ceil(C / 256)), block 256.
extern "C" __global__ void gdn_conv_silu(const float* __restrict__ qkv,
                                         const float* const* __restrict__ conv_in,
                                         const float* __restrict__ w,
                                         const int* __restrict__ seq_off,
                                         const int* __restrict__ row_seq, int C, int kc,
                                         float* __restrict__ out) {
  const int c = blockIdx.y * blockDim.x + threadIdx.x;
  const int r = blockIdx.x;
  if (c >= C) return;
  const int s = row_seq[r];
  const int off = seq_off[s];
  const int ti = r - off;
  const int keep = kc - 1;
  const float* st = conv_in[s];
  float acc = 0.0f;
  for (int j = 0; j < kc; ++j) {
    const int p = ti + j;
    float e;
    if (p < keep) {
      e = st ? st[(size_t)p * C + c] : 0.0f;
    } else {
      e = qkv[(size_t)(off + p - keep) * C + c];
    }
    acc += w[(size_t)c * kc + j] * e;
  }
  out[(size_t)r * C + c] = acc / (1.0f + expf(-acc));
}

// The new conv state of each sequence: rows t .. t + keep of ext.
// grid (ceil(C / 256), keep, n_seq), block 256.
extern "C" __global__ void gdn_conv_state(const float* __restrict__ qkv,
                                          const float* const* __restrict__ conv_in,
                                          float* const* __restrict__ conv_out,
                                          const int* __restrict__ seq_off, int C, int kc) {
  const int c = blockIdx.x * blockDim.x + threadIdx.x;
  const int p = blockIdx.y;
  const int s = blockIdx.z;
  if (c >= C) return;
  const int keep = kc - 1;
  const int off = seq_off[s];
  const int t = seq_off[s + 1] - off;
  const int q = t + p;  // position in ext
  const float* st = conv_in[s];
  float e;
  if (q < keep) {
    e = st ? st[(size_t)q * C + c] : 0.0f;
  } else {
    e = qkv[(size_t)(off + q - keep) * C + c];
  }
  conv_out[s][(size_t)p * C + c] = e;
}


// Decay and beta of token row r, value head h.
__device__ __forceinline__ void gate_of(const float* alpha, const float* beta, const float* a,
                                        const float* dt_bias, int n_v, int r, int h, float* g,
                                        float* b) {
  *g = a[h] * softplus_f(alpha[(size_t)r * n_v + h] + dt_bias[h]);
  *b = sigmoid_f(beta[(size_t)r * n_v + h]);
}

// Recurrent form: one token at a time (decoding, or any t). Block (TV, RY)
// per (value head h, sequence s, column tile); the block keeps S[:, tile]
// (d_k x TV) in shared memory; thread (tx, ty) owns rows ty, ty + RY, ...
// of column tx. grid (n_v, n_seq, ceil(d_v / TV)).
// Shared: S d_k*TV, q d_k, k d_k, red RY*TV, scal 4 floats.
extern "C" __global__ void gdn_recurrent(const float* __restrict__ x,
                                         const float* __restrict__ alpha,
                                         const float* __restrict__ beta,
                                         const float* __restrict__ a,
                                         const float* __restrict__ dt_bias,
                                         const int* __restrict__ seq_row,
                                         const int* __restrict__ seq_len,
                                         const float* const* __restrict__ s_in,
                                         float* const* __restrict__ s_out, int n_k, int n_v,
                                         int d_k, int d_v, int tiled, float* __restrict__ out) {
  extern __shared__ float sm[];
  float* S = sm;                  // [d_k][TV]
  float* qs = S + d_k * TV;       // [d_k]
  float* ks = qs + d_k;           // [d_k]
  float* red = ks + d_k;          // [RY][TV]
  float* scal = red + RY * TV;    // q scale, k scale, decay, beta

  const int h = blockIdx.x, s = blockIdx.y;
  const int tx = threadIdx.x, ty = threadIdx.y;
  const int tid = ty * TV + tx, nthr = TV * RY;
  const int j = blockIdx.z * TV + tx;
  const bool col = j < d_v;
  const int C = 2 * n_k * d_k + n_v * d_v;
  const int kh = key_head(h, n_k, n_v, tiled);
  const size_t hs = (size_t)d_k * d_v;
  const float* sin_ = s_in[s];
  float* sout = s_out[s] + (size_t)h * hs;

  for (int i = ty; i < d_k; i += RY) {
    S[i * TV + tx] = (col && sin_) ? sin_[(size_t)h * hs + (size_t)i * d_v + j] : 0.0f;
  }
  const int off = seq_row[s], t = seq_len[s];
  const float inv_sqrt_dk = 1.0f / sqrtf((float)d_k);
  for (int ti = 0; ti < t; ++ti) {
    const int r = off + ti;
    const float* row = x + (size_t)r * C;
    for (int i = tid; i < d_k; i += nthr) {
      qs[i] = row[kh * d_k + i];
      ks[i] = row[n_k * d_k + kh * d_k + i];
    }
    __syncthreads();
    if (ty == 0 || ty == 1) {
      const float* v = ty == 0 ? qs : ks;
      float ss = 0.0f;
      for (int i = tx; i < d_k; i += TV) ss += v[i] * v[i];
      ss = warp_sum(ss);
      if (tx == 0) scal[ty] = 1.0f / sqrtf(ss + 1e-6f) * (ty == 0 ? inv_sqrt_dk : 1.0f);
    } else if (ty == 2 && tx == 0) {
      float g, b;
      gate_of(alpha, beta, a, dt_bias, n_v, r, h, &g, &b);
      scal[2] = expf(g);
      scal[3] = b;
    }
    __syncthreads();
    const float qsc = scal[0], ksc = scal[1], decay = scal[2], b = scal[3];
    // mem = S^T k after the decay.
    float part = 0.0f;
    for (int i = ty; i < d_k; i += RY) {
      const float sv = S[i * TV + tx] * decay;
      S[i * TV + tx] = sv;
      part += sv * (ks[i] * ksc);
    }
    red[ty * TV + tx] = part;
    __syncthreads();
    float delta = 0.0f;
    {
      float mem = 0.0f;
#pragma unroll
      for (int y = 0; y < RY; ++y) mem += red[y * TV + tx];
      const float vj = col ? row[2 * n_k * d_k + h * d_v + j] : 0.0f;
      delta = (vj - mem) * b;
    }
    __syncthreads();  // every thread has read red
    part = 0.0f;
    for (int i = ty; i < d_k; i += RY) {
      const float sv = S[i * TV + tx] + (ks[i] * ksc) * delta;
      S[i * TV + tx] = sv;
      part += sv * (qs[i] * qsc);
    }
    red[ty * TV + tx] = part;
    __syncthreads();
    if (ty == 0 && col) {
      float o = 0.0f;
#pragma unroll
      for (int y = 0; y < RY; ++y) o += red[y * TV + tx];
      out[((size_t)r * n_v + h) * d_v + j] = o;
    }
    __syncthreads();  // before the next token overwrites qs, ks, red, scal
  }
  if (col) {
    for (int i = ty; i < d_k; i += RY) sout[(size_t)i * d_v + j] = S[i * TV + tx];
  }
}

// Chunked form (the UT transform), chunks of L <= 32 tokens (L is the
// host's choice; any L gives the same function). Block (TV, RY) per (value
// head, sequence, column tile), as above. Per chunk, with cum the cumulative
// log decay inside the chunk, q and k normalised:
//   A[i][j]  = beta_i (k_i . k_j) e^{cum_i - cum_j}  (j < i)
//   QK[i][j] = (q_i . k_j) e^{cum_i - cum_j}          (j <= i)
//   u_i      = beta_i (v_i - e^{cum_i} k_i S) - sum_{j<i} A[i][j] u_j
//   o_i      = e^{cum_i} q_i S + sum_{j<=i} QK[i][j] u_j
//   S       <- S e^{cum_last} + sum_i e^{cum_last - cum_i} k_i (x) u_i
// (the CPU form solves for beta v and beta e^{cum} k separately and
// subtracts K S afterwards; the solve is linear, so this is the same u).
// Shared: S d_k*TV, qn L*(d_k+1), kn L*(d_k+1), A L*L, QK L*L, u L*TV,
// os L*TV, cum L, bet L, wl L (floats).
extern "C" __global__ void gdn_chunked(const float* __restrict__ x,
                                       const float* __restrict__ alpha,
                                       const float* __restrict__ beta,
                                       const float* __restrict__ a,
                                       const float* __restrict__ dt_bias,
                                       const int* __restrict__ seq_row,
                                       const int* __restrict__ seq_len,
                                       const float* const* __restrict__ s_in,
                                       float* const* __restrict__ s_out, int n_k, int n_v,
                                       int d_k, int d_v, int tiled, int L,
                                       float* __restrict__ out) {
  extern __shared__ float sm[];
  const int DK1 = d_k + 1;  // padded rows: no bank conflicts across tokens
  float* S = sm;                   // [d_k][TV]
  float* qn = S + d_k * TV;        // [L][DK1]
  float* kn = qn + L * DK1;        // [L][DK1]
  float* A = kn + L * DK1;         // [L][L]
  float* QK = A + L * L;           // [L][L]
  float* u = QK + L * L;           // [L][TV]
  float* os = u + L * TV;          // [L][TV]
  float* cum = os + L * TV;        // [L]
  float* bet = cum + L;            // [L]
  float* wl = bet + L;             // [L]

  const int h = blockIdx.x, s = blockIdx.y;
  const int tx = threadIdx.x, ty = threadIdx.y;
  const int tid = ty * TV + tx, nthr = TV * RY;
  const int warp = tid / 32, lane = tid % 32, nwarp = nthr / 32;
  const int j = blockIdx.z * TV + tx;
  const bool col = j < d_v;
  const int C = 2 * n_k * d_k + n_v * d_v;
  const int kh = key_head(h, n_k, n_v, tiled);
  const size_t hs = (size_t)d_k * d_v;
  const float* sin_ = s_in[s];
  float* sout = s_out[s] + (size_t)h * hs;
  const float inv_sqrt_dk = 1.0f / sqrtf((float)d_k);

  for (int i = ty; i < d_k; i += RY) {
    S[i * TV + tx] = (col && sin_) ? sin_[(size_t)h * hs + (size_t)i * d_v + j] : 0.0f;
  }
  const int off = seq_row[s], t = seq_len[s];
  for (int c0 = 0; c0 < t; c0 += L) {
    const int l = min(L, t - c0);
    // 1. Load q, k of the chunk; decay and beta per token.
    for (int e = tid; e < l * d_k; e += nthr) {
      const int i = e / d_k, d = e % d_k;
      const float* row = x + (size_t)(off + c0 + i) * C;
      qn[i * DK1 + d] = row[kh * d_k + d];
      kn[i * DK1 + d] = row[n_k * d_k + kh * d_k + d];
    }
    if (tid < l) {
      float g, b;
      gate_of(alpha, beta, a, dt_bias, n_v, off + c0 + tid, h, &g, &b);
      cum[tid] = g;
      bet[tid] = b;
    }
    __syncthreads();
    // 2. Normalise (one warp per token); cumulative decay (one thread).
    for (int i = warp; i < l; i += nwarp) {
      float sq = 0.0f, sk = 0.0f;
      for (int d = lane; d < d_k; d += 32) {
        const float qv = qn[i * DK1 + d], kv = kn[i * DK1 + d];
        sq += qv * qv;
        sk += kv * kv;
      }
      sq = warp_sum(sq);
      sk = warp_sum(sk);
      const float fq = 1.0f / sqrtf(sq + 1e-6f) * inv_sqrt_dk;
      const float fk = 1.0f / sqrtf(sk + 1e-6f);
      for (int d = lane; d < d_k; d += 32) {
        qn[i * DK1 + d] *= fq;
        kn[i * DK1 + d] *= fk;
      }
    }
    if (tid == 0) {
      float acc = 0.0f;
      for (int i = 0; i < l; ++i) {
        acc += cum[i];
        cum[i] = acc;
      }
    }
    __syncthreads();
    if (tid < l) wl[tid] = expf(cum[l - 1] - cum[tid]);
    // 3. A (strictly lower) and QK (lower with the diagonal).
    for (int e = tid; e < l * l; e += nthr) {
      const int i = e / l, jj = e % l;
      float av = 0.0f, qv = 0.0f;
      if (jj <= i) {
        float dkk = 0.0f, dqk = 0.0f;
        for (int d = 0; d < d_k; ++d) {
          const float kj = kn[jj * DK1 + d];
          dkk += kn[i * DK1 + d] * kj;
          dqk += qn[i * DK1 + d] * kj;
        }
        const float dec = expf(cum[i] - cum[jj]);
        qv = dqk * dec;
        if (jj < i) av = bet[i] * dkk * dec;
      }
      A[i * L + jj] = av;
      QK[i * L + jj] = qv;
    }
    // 4. With the chunk's starting state: os_i = e^{cum_i} q_i S and the
    // right-hand side of u.
    for (int i = ty; i < l; i += RY) {
      float qsum = 0.0f, ksum = 0.0f;
      for (int r = 0; r < d_k; ++r) {
        const float sv = S[r * TV + tx];
        qsum += qn[i * DK1 + r] * sv;
        ksum += kn[i * DK1 + r] * sv;
      }
      const float e = expf(cum[i]);
      const float vj = col ? x[(size_t)(off + c0 + i) * C + 2 * n_k * d_k + h * d_v + j] : 0.0f;
      os[i * TV + tx] = e * qsum;
      u[i * TV + tx] = bet[i] * (vj - e * ksum);
    }
    __syncthreads();
    // 5. Forward substitution with the unit lower-triangular I + A.
    if (ty == 0) {
      for (int i = 1; i < l; ++i) {
        float acc = u[i * TV + tx];
        for (int jj = 0; jj < i; ++jj) acc -= A[i * L + jj] * u[jj * TV + tx];
        u[i * TV + tx] = acc;
      }
    }
    __syncthreads();
    // 6. Outputs.
    for (int i = ty; i < l; i += RY) {
      float o = os[i * TV + tx];
      for (int jj = 0; jj <= i; ++jj) o += QK[i * L + jj] * u[jj * TV + tx];
      if (col) out[((size_t)(off + c0 + i) * n_v + h) * d_v + j] = o;
    }
    // 7. State update (reads kn, u, wl; nobody reads S until the next chunk).
    const float el = expf(cum[l - 1]);
    for (int r = ty; r < d_k; r += RY) {
      float sv = S[r * TV + tx] * el;
      for (int i = 0; i < l; ++i) sv += kn[i * DK1 + r] * wl[i] * u[i * TV + tx];
      S[r * TV + tx] = sv;
    }
    __syncthreads();
  }
  if (col) {
    for (int i = ty; i < d_k; i += RY) sout[(size_t)i * d_v + j] = S[i * TV + tx];
  }
}
