// Text mode on the GPU: Qwen's own decoder layers, the same math as the CPU dense path
// (inband-qwen35 `dense`), one small kernel per step. Every output is computed in an
// order that does not depend on how many tokens come together, so a prefill equals
// feeding its tokens one at a time, bit for bit (what in-band injection relies on).
// Shapes: T tokens of one sequence; activations row-major [T, width].

#define WARP 32

__device__ __forceinline__ float silu(float x) { return x / (expf(-x) + 1.0f); }
__device__ __forceinline__ float sigmoid(float x) { return 1.0f / (expf(-x) + 1.0f); }

// A fixed-order sum over the block (blockDim.x a multiple of 32, at most 1024).
__device__ float block_sum(float v, float* scratch) {
    for (int o = WARP / 2; o > 0; o /= 2) v += __shfl_xor_sync(0xffffffff, v, o);
    int warp = threadIdx.x / WARP, lane = threadIdx.x % WARP, warps = blockDim.x / WARP;
    __syncthreads();
    if (lane == 0) scratch[warp] = v;
    __syncthreads();
    float total = 0.0f;
    for (int w = 0; w < warps; ++w) total += scratch[w];
    __syncthreads();
    return total;
}

__device__ float block_max(float v, float* scratch) {
    for (int o = WARP / 2; o > 0; o /= 2) v = fmaxf(v, __shfl_xor_sync(0xffffffff, v, o));
    int warp = threadIdx.x / WARP, lane = threadIdx.x % WARP, warps = blockDim.x / WARP;
    __syncthreads();
    if (lane == 0) scratch[warp] = v;
    __syncthreads();
    float m = scratch[0];
    for (int w = 1; w < warps; ++w) m = fmaxf(m, scratch[w]);
    __syncthreads();
    return m;
}

// out[t] = table[ids[t]]: grid T.
extern "C" __global__ void embed(const unsigned* ids, const float* table, float* out, unsigned width) {
    const float* row = table + (size_t)ids[blockIdx.x] * width;
    for (unsigned i = threadIdx.x; i < width; i += blockDim.x) out[(size_t)blockIdx.x * width + i] = row[i];
}

// Zero-centred RMSNorm with a precomputed gain (1 + weight): grid = rows; row r is read
// at x + r * stride and written densely.
extern "C" __global__ void rms_norm(const float* x, unsigned stride, const float* gain, float* out, unsigned width,
                                    float eps) {
    __shared__ float scratch[WARP];
    const float* row = x + (size_t)blockIdx.x * stride;
    float ss = 0.0f;
    for (unsigned i = threadIdx.x; i < width; i += blockDim.x) ss += row[i] * row[i];
    float inv = 1.0f / sqrtf(block_sum(ss, scratch) / (float)width + eps);
    for (unsigned i = threadIdx.x; i < width; i += blockDim.x)
        out[(size_t)blockIdx.x * width + i] = row[i] * inv * gain[i];
}

// y[t, o] = x[t] . w[o] for `rows` tokens: one warp per output row and up to TOKENS tokens,
// lane-strided partial sums then a fixed shuffle tree (the same order for any `rows`).
#define TOKENS 8
extern "C" __global__ void linear(const float* x, const float* w, float* y, unsigned n_in, unsigned n_out,
                                  unsigned rows) {
    unsigned o = blockIdx.x * (blockDim.x / WARP) + threadIdx.x / WARP;
    unsigned lane = threadIdx.x % WARP, t0 = blockIdx.y * TOKENS;
    if (o >= n_out) return;
    unsigned n = min(rows - t0, (unsigned)TOKENS);
    const float* wr = w + (size_t)o * n_in;
    float acc[TOKENS];
#pragma unroll
    for (int t = 0; t < TOKENS; ++t) acc[t] = 0.0f;
    for (unsigned i = lane; i < n_in; i += WARP) {
        float wv = wr[i];
#pragma unroll
        for (int t = 0; t < TOKENS; ++t)
            if (t < n) acc[t] += x[(size_t)(t0 + t) * n_in + i] * wv;
    }
#pragma unroll
    for (int t = 0; t < TOKENS; ++t) {
        float v = acc[t];
        for (int off = WARP / 2; off > 0; off /= 2) v += __shfl_xor_sync(0xffffffff, v, off);
        if (lane == 0 && t < n) y[(size_t)(t0 + t) * n_out + o] = v;
    }
}

// gate = silu(gate) * up, elementwise.
extern "C" __global__ void silu_mul(float* gate, const float* up, unsigned n) {
    unsigned i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) gate[i] = silu(gate[i]) * up[i];
}

// h += delta, elementwise.
extern "C" __global__ void add_into(float* h, const float* delta, unsigned n) {
    unsigned i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) h[i] = h[i] + delta[i];
}

// Gated DeltaNet gates, in place over [T, hv]: b -> beta = sigmoid(b),
// a -> decay = exp(-(softplus(a + dt_bias) * exp(A_log))) (torch's softplus threshold 20).
extern "C" __global__ void gdn_gates(float* b, float* a, const float* dt_bias, const float* a_log_exp, unsigned hv,
                                     unsigned n) {
    unsigned i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i >= n) return;
    unsigned h = i % hv;
    b[i] = sigmoid(b[i]);
    float x = a[i] + dt_bias[h];
    float soft = x > 20.0f ? x : logf(expf(x) + 1.0f);
    a[i] = expf(-(soft * a_log_exp[h]));
}

// The causal depthwise conv over T tokens, then SiLU: one thread per channel, the window
// [state (K-1 oldest first), token] in order; the state keeps the last K-1 raw inputs.
extern "C" __global__ void conv_silu(const float* mixed, const float* weight, float* state, float* y, unsigned channels,
                                     unsigned kernel, unsigned rows) {
    unsigned c = blockIdx.x * blockDim.x + threadIdx.x;
    if (c >= channels) return;
    float window[8];
    for (unsigned k = 0; k + 1 < kernel; ++k) window[k] = state[c * (kernel - 1) + k];
    for (unsigned t = 0; t < rows; ++t) {
        window[kernel - 1] = mixed[(size_t)t * channels + c];
        float s = 0.0f;
        for (unsigned k = 0; k < kernel; ++k) s += window[k] * weight[c * kernel + k];
        y[(size_t)t * channels + c] = silu(s);
        for (unsigned k = 0; k + 1 < kernel; ++k) window[k] = window[k + 1];
    }
    for (unsigned k = 0; k + 1 < kernel; ++k) state[c * (kernel - 1) + k] = window[k];
}

// The delta rule over T tokens for one value head per block (threads own value columns):
// q, k l2-normalised (q also scaled by 1/sqrt(dk)); S <- S*decay; delta = (v - k.S)*beta;
// S <- S + k delta^T; o = q.S; then the gated RMSNorm with z. S is [hv, dk, dv].
// Shared memory: q, k (dk each) and the reduction scratch.
extern "C" __global__ void gdn_recurrent(const float* y, const float* z, const float* beta, const float* decay,
                                         const float* norm, float* S, float* out, unsigned rows, unsigned hk,
                                         unsigned hv, unsigned dk, unsigned dv, float eps, float l2eps) {
    extern __shared__ float sh[];
    float* q = sh;
    float* k = q + dk;
    float* scratch = k + dk;
    unsigned h = blockIdx.x, key_head = h / (hv / hk);
    unsigned key_dim = hk * dk, channels = 2 * key_dim + hv * dv;
    float* s = S + (size_t)h * dk * dv;
    float scale = 1.0f / sqrtf((float)dk);
    for (unsigned t = 0; t < rows; ++t) {
        const float* row = y + (size_t)t * channels;
        float qs = 0.0f, ks = 0.0f;
        for (unsigned i = threadIdx.x; i < dk; i += blockDim.x) {
            float qv = row[key_head * dk + i], kv = row[key_dim + key_head * dk + i];
            q[i] = qv;
            k[i] = kv;
            qs += qv * qv;
            ks += kv * kv;
        }
        float q_inv = 1.0f / sqrtf(block_sum(qs, scratch) + l2eps);
        float k_inv = 1.0f / sqrtf(block_sum(ks, scratch) + l2eps);
        for (unsigned i = threadIdx.x; i < dk; i += blockDim.x) {
            q[i] = q[i] * q_inv * scale;
            k[i] = k[i] * k_inv;
        }
        __syncthreads();
        float d = decay[t * hv + h], b = beta[t * hv + h];
        float ss = 0.0f;
        for (unsigned j = threadIdx.x; j < dv; j += blockDim.x) {
            float kv_mem = 0.0f;
            for (unsigned i = 0; i < dk; ++i) kv_mem += s[i * dv + j] * d * k[i];
            float delta = (row[2 * key_dim + h * dv + j] - kv_mem) * b;
            float o = 0.0f;
            for (unsigned i = 0; i < dk; ++i) {
                float v = s[i * dv + j] * d + k[i] * delta;
                s[i * dv + j] = v;
                o += q[i] * v;
            }
            out[(size_t)t * hv * dv + h * dv + j] = o;
            ss += o * o;
        }
        float inv = 1.0f / sqrtf(block_sum(ss, scratch) / (float)dv + eps);
        for (unsigned j = threadIdx.x; j < dv; j += blockDim.x) {
            size_t at = (size_t)t * hv * dv + h * dv + j;
            out[at] = out[at] * inv * norm[j] * silu(z[at]);
        }
        __syncthreads();
    }
}

// NeoX rotation of the first `rot` dims of each row of x [T * heads, hd], in place,
// for positions start + t; inv_freq has rot/2 entries.
extern "C" __global__ void rope(float* x, unsigned heads, unsigned hd, unsigned rot, const float* inv_freq,
                                unsigned start) {
    float* row = x + (size_t)blockIdx.x * hd;
    float p = (float)(start + blockIdx.x / heads);
    unsigned half = rot / 2;
    for (unsigned i = threadIdx.x; i < half; i += blockDim.x) {
        float f = p * inv_freq[i];
        float c = cosf(f), s = sinf(f);
        float x1 = row[i], x2 = row[i + half];
        row[i] = x1 * c + (-x2) * s;
        row[i + half] = x2 * c + x1 * s;
    }
}

// Causal attention for one (token, head) per block over the cache's first past+t+1
// keys ([positions, kvh, hd] each), gated: out = softmax(q.K/sqrt(hd)) V * sigmoid(gate).
// scores: [T * nh, stride] scratch. gate rows sit in qg [T, nh, 2 hd] after each query.
extern "C" __global__ void attend(const float* q, const float* keys, const float* values, const float* qg,
                                  float* scores, float* out, unsigned nh, unsigned kvh, unsigned hd, unsigned past,
                                  unsigned stride) {
    __shared__ float scratch[WARP];
    unsigned t = blockIdx.x / nh, h = blockIdx.x % nh, g = h / (nh / kvh);
    unsigned seen = past + t + 1;
    const float* qr = q + (size_t)blockIdx.x * hd;
    float* sc = scores + (size_t)blockIdx.x * stride;
    float scale = 1.0f / sqrtf((float)hd);
    float m = __int_as_float(0xff800000);  // -inf (NVRTC has no INFINITY)
    for (unsigned j = threadIdx.x; j < seen; j += blockDim.x) {
        const float* kr = keys + ((size_t)j * kvh + g) * hd;
        float s = 0.0f;
        for (unsigned i = 0; i < hd; ++i) s += qr[i] * kr[i];
        s *= scale;
        sc[j] = s;
        m = fmaxf(m, s);
    }
    m = block_max(m, scratch);
    float sum = 0.0f;
    for (unsigned j = threadIdx.x; j < seen; j += blockDim.x) {
        float e = expf(sc[j] - m);
        sc[j] = e;
        sum += e;
    }
    sum = block_sum(sum, scratch);  // its barriers also publish sc
    for (unsigned i = threadIdx.x; i < hd; i += blockDim.x) {
        float acc = 0.0f;
        for (unsigned j = 0; j < seen; ++j) acc += (sc[j] / sum) * values[((size_t)j * kvh + g) * hd + i];
        float gate = qg[((size_t)t * nh + h) * 2 * hd + hd + i];
        out[(size_t)blockIdx.x * hd + i] = acc * sigmoid(gate);
    }
}
