// inband: the chip layers' forward pass on the GPU, one token at a time, in one thread
// block. The same math as inband-qwen35's sparse path (CSR projections, causal conv,
// GDN delta rule, gated RMSNorm, SwiGLU), run for many passes per launch: each pass
// embeds a token, runs every chip layer, chooses the next token (argmax over the chip
// vocabulary, computed per field as the CPU does) and feeds it back.
//
// All parameters live in two flat arrays (f32 weights W, u32 indices I) described by a
// table of offsets per layer; state (conv rings, GDN memories) in S.

#define THREADS 1024
#define WARPS (THREADS / 32)

struct Dims {
    unsigned width, conv_dim, key_dim, dk, dv, hk, hv, neurons, layers;
    float eps;
    // token tables (offsets into I / W)
    unsigned kinds, kind_dim, kind_fields, kind_nfields, kind_offset, kind_size;
    unsigned field_size, field_dim;   // per field: size, first chip dim (dims are field_dim + value)
    unsigned anchors, anchor_dim, anchor_value; // count, I offset, W offset
    unsigned chip_base;               // residual index of chip dim 0
};

// Per layer offsets (all u32 offsets into I for indices, W for floats, S for state).
struct Layer {
    unsigned in_gain, post_gain;
    unsigned n_live, live, qkv_ptr, qkv_col, qkv_val, taps, conv_state;
    unsigned b_ptr, b_col, b_val, a_ptr, a_col, a_val, a_log, dt_bias, norm;
    unsigned z_ptr, z_col, z_val;
    unsigned n_out, out_rows, out_ptr, out_col, out_val;
    unsigned n_neur, neur, g_ptr, g_col, g_val, u_ptr, u_col, u_val;
    unsigned n_down, down_rows, d_ptr, d_col, d_val;
    unsigned rec;
};

__device__ __forceinline__ float silu_f(float x) {
    if (x >= 17.0f) return x;
    if (x <= -89.0f) return x / __int_as_float(0x7f800000);
    return x / (1.0f + expf(-x));
}

__device__ __forceinline__ float sigmoid_f(float x) {
    if (x >= 17.0f) return 1.0f;
    if (x <= -89.0f) return 0.0f;
    return 1.0f / (1.0f + expf(-x));
}

__device__ __forceinline__ float softplus_f(float x) { return x > 20.0f ? x : log1pf(expf(x)); }

// CSR row r: sum over its entries of val * x[col], in stored (ascending column) order.
__device__ __forceinline__ float row_dot(const unsigned *I, const float *W, unsigned ptr, unsigned col,
                                         unsigned val, unsigned r, const float *x) {
    unsigned s = I[ptr + r], e = I[ptr + r + 1];
    float acc = 0.0f;
    for (unsigned k = s; k < e; k++) acc += W[val + k] * x[I[col + k]];
    return acc;
}

__device__ float block_sum(float v, float *red) {
    for (int o = 16; o > 0; o >>= 1) v += __shfl_down_sync(0xffffffff, v, o);
    int w = threadIdx.x / 32, l = threadIdx.x % 32;
    __syncthreads();
    if (l == 0) red[w] = v;
    __syncthreads();
    float t = 0.0f;
    if (threadIdx.x == 0) {
        for (int i = 0; i < WARPS; i++) t += red[i];
        red[WARPS] = t;
    }
    __syncthreads();
    return red[WARPS];
}

__device__ float warp_sum(float v) {
    for (int o = 16; o > 0; o >>= 1) v += __shfl_xor_sync(0xffffffff, v, o);
    return v;
}

// Zero-centred RMSNorm of x into out with gain offset g (1 + w precomputed on the host).
__device__ void rms_norm(const float *x, float *out, const float *gain, unsigned n, float eps, float *red) {
    float s = 0.0f;
    for (unsigned i = threadIdx.x; i < n; i += THREADS) s += x[i] * x[i];
    float total = block_sum(s, red);
    float inv = 1.0f / sqrtf(total / (float)n + eps);
    for (unsigned i = threadIdx.x; i < n; i += THREADS) out[i] = (x[i] * inv) * gain[i];
    __syncthreads();
}

extern "C" __global__ void __launch_bounds__(THREADS) chip_passes(
    const Dims *dims_p, const Layer *layers, const unsigned *I, const float *W, float *S,
    const unsigned *inputs, unsigned n_inputs, unsigned max_passes, unsigned stop_mask,
    unsigned *outputs, unsigned *state /* [0]=passes done, [1]=conv ring position, [2]=last token */) {
    extern __shared__ float sh[];
    const Dims d = *dims_p;
    float *hidden = sh;                       // width
    float *xn = hidden + d.width;             // width
    float *y = xn + d.width;                  // conv_dim
    float *head_out = y + d.conv_dim;         // hv*dv
    float *act = head_out + d.hv * d.dv;      // neurons
    float *red = act + d.neurons;             // WARPS + 1
    __shared__ unsigned token_sh;
    __shared__ unsigned knz_rows[WARPS][128];
    __shared__ float knz_vals[WARPS][128];
    __shared__ unsigned knz_count[WARPS];

    unsigned ring = state[1];
    unsigned token = state[2];
    unsigned done = 0;
    for (unsigned pass = 0; pass < max_passes; pass++) {
        if (pass < n_inputs) token = inputs[pass];
        // Embed: base dims 0; anchors; kind and field one-hots.
        for (unsigned i = threadIdx.x; i < d.width; i += THREADS) hidden[i] = 0.0f;
        __syncthreads();
        if (threadIdx.x == 0) {
            for (unsigned a = 0; a < d.anchors; a++) hidden[d.chip_base + I[d.anchor_dim + a]] = W[d.anchor_value + a];
            unsigned k = 0;
            while (k + 1 < d.kinds && I[d.kind_offset + k + 1] <= token) k++;
            unsigned idx = token - I[d.kind_offset + k];
            hidden[d.chip_base + I[d.kind_dim + k]] = 1.0f;
            unsigned nf = I[d.kind_nfields + k];
            for (int f = (int)nf - 1; f >= 0; f--) {
                unsigned fid = I[d.kind_fields + k * 8 + f];
                unsigned size = I[d.field_size + fid];
                unsigned v = idx % size;
                idx /= size;
                hidden[d.chip_base + I[d.field_dim + fid] + v] = 1.0f;
            }
        }
        __syncthreads();

        for (unsigned l = 0; l < d.layers; l++) {
            const Layer L = layers[l];
            rms_norm(hidden, xn, W + L.in_gain, d.width, d.eps, red);
            // Projections of the live channels, the causal conv, silu.
            for (unsigned i = threadIdx.x; i < d.conv_dim; i += THREADS) y[i] = 0.0f;
            __syncthreads();
            float *cs = S + L.conv_state;
            for (unsigned i = threadIdx.x; i < L.n_live; i += THREADS) {
                float raw = row_dot(I, W, L.qkv_ptr, L.qkv_col, L.qkv_val, i, xn);
                const float *w = W + L.taps + 4 * i;
                float u = 0.0f;
                for (unsigned j = 0; j < 3; j++) u += w[j] * cs[((ring + j) % 3) * L.n_live + i];
                u += w[3] * raw;
                y[I[L.live + i]] = silu_f(u);
                cs[(ring % 3) * L.n_live + i] = raw;  // the oldest slot becomes the newest
            }
            __syncthreads();
            // q and k: L2-normalise each key head (q also scaled by 1/sqrt(dk)).
            {
                unsigned w = threadIdx.x / 32, lane = threadIdx.x % 32;
                if (w < 2 * d.hk) {
                    float *v = y + (w < d.hk ? w * d.dk : d.key_dim + (w - d.hk) * d.dk);
                    float s = 0.0f;
                    for (unsigned e = lane; e < d.dk; e += 32) s += v[e] * v[e];
                    s = warp_sum(s);
                    if (s != 0.0f) {
                        float inv = 1.0f / sqrtf(s + 1e-6f);
                        float qs = sqrtf((float)d.dk);
                        for (unsigned e = lane; e < d.dk; e += 32) {
                            float x = v[e] * inv;
                            v[e] = w < d.hk ? x / qs : x;
                        }
                    }
                }
            }
            __syncthreads();
            // Delta rule and read, one warp per value head.
            {
                unsigned w = threadIdx.x / 32, lane = threadIdx.x % 32;
                unsigned group = d.hv / d.hk;
                for (unsigned head = w; head < d.hv; head += WARPS) {
                    unsigned kh = head / group;
                    float beta = 0.0f, a = 0.0f;
                    if (lane == 0) {
                        beta = sigmoid_f(row_dot(I, W, L.b_ptr, L.b_col, L.b_val, head, xn));
                        a = row_dot(I, W, L.a_ptr, L.a_col, L.a_val, head, xn);
                    }
                    beta = __shfl_sync(0xffffffff, beta, 0);
                    a = __shfl_sync(0xffffffff, a, 0);
                    float g = -expf(W[L.a_log + head]) * softplus_f(a + W[L.dt_bias + head]);
                    float decay = expf(g);
                    float *st = S + L.rec + head * d.dk * d.dv;
                    if (decay != 1.0f)
                        for (unsigned i = lane; i < d.dk * d.dv; i += 32) st[i] *= decay;
                    const float *key = y + d.key_dim + kh * d.dk;
                    const float *val = y + 2 * d.key_dim + head * d.dv;
                    if (beta != 0.0f) {
                        // nonzero key slots, ascending
                        unsigned slot = w;
                        if (lane == 0) {
                            unsigned c = 0;
                            for (unsigned r = 0; r < d.dk; r++)
                                if (key[r] != 0.0f) {
                                    knz_rows[slot][c] = r;
                                    knz_vals[slot][c] = key[r];
                                    c++;
                                }
                            knz_count[slot] = c;
                        }
                        __syncwarp();
                        unsigned c = knz_count[slot];
                        for (unsigned e = lane; e < d.dv; e += 32) {
                            float mem = 0.0f;
                            for (unsigned k = 0; k < c; k++) mem += st[knz_rows[slot][k] * d.dv + e] * knz_vals[slot][k];
                            float delta = (val[e] - mem) * beta;
                            for (unsigned k = 0; k < c; k++) st[knz_rows[slot][k] * d.dv + e] += knz_vals[slot][k] * delta;
                        }
                        __syncwarp();
                    }
                    const float *q = y + kh * d.dk;
                    float *out = head_out + head * d.dv;
                    unsigned slot = w;
                    if (lane == 0) {
                        unsigned c = 0;
                        for (unsigned r = 0; r < d.dk; r++)
                            if (q[r] != 0.0f) {
                                knz_rows[slot][c] = r;
                                knz_vals[slot][c] = q[r];
                                c++;
                            }
                        knz_count[slot] = c;
                    }
                    __syncwarp();
                    unsigned c = knz_count[slot];
                    if (c == 0) {
                        for (unsigned e = lane; e < d.dv; e += 32) out[e] = 0.0f;
                        __syncwarp();
                        continue;
                    }
                    float s = 0.0f;
                    for (unsigned e = lane; e < d.dv; e += 32) {
                        float acc = 0.0f;
                        for (unsigned k = 0; k < c; k++) acc += st[knz_rows[slot][k] * d.dv + e] * knz_vals[slot][k];
                        out[e] = acc;
                        s += acc * acc;
                    }
                    s = warp_sum(s);
                    float inv = 1.0f / sqrtf(s / (float)d.dv + d.eps);
                    for (unsigned e = lane; e < d.dv; e += 32) {
                        float zv = row_dot(I, W, L.z_ptr, L.z_col, L.z_val, head * d.dv + e, xn);
                        out[e] = (W[L.norm + e] * (out[e] * inv)) * silu_f(zv);
                    }
                    __syncwarp();
                }
            }
            __syncthreads();
            for (unsigned i = threadIdx.x; i < L.n_out; i += THREADS)
                hidden[I[L.out_rows + i]] += row_dot(I, W, L.out_ptr, L.out_col, L.out_val, i, head_out);
            __syncthreads();
            // MLP.
            rms_norm(hidden, xn, W + L.post_gain, d.width, d.eps, red);
            for (unsigned i = threadIdx.x; i < d.neurons; i += THREADS) act[i] = 0.0f;
            __syncthreads();
            for (unsigned i = threadIdx.x; i < L.n_neur; i += THREADS) {
                float gte = row_dot(I, W, L.g_ptr, L.g_col, L.g_val, i, xn);
                float up = row_dot(I, W, L.u_ptr, L.u_col, L.u_val, i, xn);
                act[I[L.neur + i]] = silu_f(gte) * up;
            }
            __syncthreads();
            for (unsigned i = threadIdx.x; i < L.n_down; i += THREADS)
                hidden[I[L.down_rows + i]] += row_dot(I, W, L.d_ptr, L.d_col, L.d_val, i, act);
            __syncthreads();
        }
        ring = (ring + 1) % 3;

        // Choose the next token: per kind, its score plus each field's best value.
        if (threadIdx.x == 0) {
            float best = -__int_as_float(0x7f800000);
            unsigned best_token = 0, best_kind = 0;
            bool have = false;
            for (unsigned k = 0; k < d.kinds; k++) {
                float score = hidden[d.chip_base + I[d.kind_dim + k]];
                unsigned idx = 0;
                unsigned nf = I[d.kind_nfields + k];
                for (unsigned f = 0; f < nf; f++) {
                    unsigned fid = I[d.kind_fields + k * 8 + f];
                    unsigned size = I[d.field_size + fid];
                    unsigned base = d.chip_base + I[d.field_dim + fid];
                    unsigned bv = 0;
                    float bs = -__int_as_float(0x7f800000);
                    for (unsigned v = 0; v < size; v++)
                        if (hidden[base + v] > bs) {
                            bs = hidden[base + v];
                            bv = v;
                        }
                    score += bs;
                    idx = idx * size + bv;
                }
                if (!have || score > best) {
                    have = true;
                    best = score;
                    best_token = I[d.kind_offset + k] + idx;
                    best_kind = k;
                }
            }
            token_sh = best_token;
            outputs[pass] = best_token;
            red[0] = (float)best_kind;
        }
        __syncthreads();
        token = token_sh;
        unsigned kind = (unsigned)red[0];
        __syncthreads();
        done = pass + 1;
        if (pass + 1 >= n_inputs && ((stop_mask >> kind) & 1)) break;
    }
    if (threadIdx.x == 0) {
        state[0] = done;
        state[1] = ring;
        state[2] = token;
    }
}
