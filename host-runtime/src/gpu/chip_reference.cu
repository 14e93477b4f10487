// inband: the chip layers' forward pass on the GPU, one token at a time, in one thread
// block. The same math as inband-qwen35's sparse path (sparse projections, causal conv,
// GDN delta rule, gated RMSNorm, SwiGLU), run for many passes per launch: each pass
// embeds a token, runs every chip layer, chooses the next token (argmax over the chip
// vocabulary, computed per field as the CPU does) and feeds it back.
//
// Projections are sliced ELL: rows sorted by length and cut into slices of 32, each
// slice stored column-major so that a warp's 32 lanes (one row each) load consecutive
// words. Each row is summed by one thread in ascending column order, exactly as the CPU
// sums it. Several projections that read the same input are one ELL whose rows write
// into one scratch buffer, so a layer needs few block-wide barriers.
//
// Kept as the reference for the activation-sparse kernel (chip_sparse.cu): selectable
// with `--kernel reference`.

#include "chip_common.cuh"

// The phases of the -DPROFILE cycle counts (MARK in chip_common.cuh).
#define PHASES 12


// One sliced-ELL matrix: rows in slices of 32; slice s's entries at C/V[base[s] + k*32 + lane].
struct Ell {
    unsigned slices, base, len, row_out, row_len; // count; I offsets of per-slice base, length; per-row target, length
};

// Per layer offsets (I offsets for indices, W for floats, S for state).
struct Layer {
    unsigned in_gain, post_gain;
    Ell xin;          // qkv (live channels) | z | b | a, into scratch
    unsigned n_live, live, taps, conv_state, z_at, b_at, a_at;
    unsigned a_log, dt_bias, norm;
    Ell out;          // out_proj, added into hidden
    Ell gate_up;      // gate into scratch[0..n_neur], up into scratch[n_neur..2 n_neur]
    unsigned n_neur;
    Ell down;         // down_proj over compact neurons, added into hidden
    unsigned rec;
};

// out[row_out[r]] = (add ? out[..] : 0) + sum over row r of V * x[C], ascending column
// order. Entries are loaded UNROLL at a time so each warp keeps several loads in flight.
#ifndef UNROLL
#define UNROLL 8
#endif
__device__ __forceinline__ void ell(const Ell &m, const unsigned *__restrict__ I, const unsigned short *__restrict__ C,
                                    const float *__restrict__ V, const float *x, float *out, bool add) {
    unsigned w = threadIdx.x / 32, lane = threadIdx.x % 32;
    for (unsigned s = w; s < m.slices; s += WARPS) {
        unsigned base = __ldg(I + m.base + s), len = __ldg(I + m.len + s);
        unsigned r = s * 32 + lane;
        unsigned mine = __ldg(I + m.row_len + r);
        unsigned target = __ldg(I + m.row_out + r);
        float acc = 0.0f;
        for (unsigned k0 = 0; k0 < len; k0 += UNROLL) {
            unsigned short col[UNROLL];
            float val[UNROLL];
#pragma unroll
            for (unsigned j = 0; j < UNROLL; j++) {
                unsigned at = base + (k0 + j) * 32 + lane;
                bool in = k0 + j < mine;
                col[j] = in ? __ldg(C + at) : 0;
                val[j] = in ? __ldg(V + at) : 0.0f;
            }
#pragma unroll
            for (unsigned j = 0; j < UNROLL; j++)
                if (k0 + j < mine) acc += val[j] * x[col[j]];
        }
        if (target != 0xffffffffu) {
            if (add) out[target] += acc;
            else out[target] = acc;
        }
    }
}

// The sum of squares of the residual exactly as the CPU computes it (a left-to-right f32
// fold), without a serial pass: the base dims are zero and the anchors come first, so
// the fold reaches the anchors' sum A and every later square below half an ulp of A
// leaves it unchanged (the layout's contract: the mean square is an exact power of 4).
// Where that does not hold, thread 0 folds serially.
__device__ float residual_sum_of_squares(const float *x, unsigned n, unsigned chip_base, unsigned anchors, float *red) {
    float base_max = 0.0f, rest_max = 0.0f;
    for (unsigned i = threadIdx.x; i < n; i += THREADS) {
        float v = x[i] * x[i];
        if (i < chip_base) base_max = fmaxf(base_max, v);
        else if (i >= chip_base + anchors) rest_max = fmaxf(rest_max, v);
    }
    base_max = warp_max(base_max);
    rest_max = warp_max(rest_max);
    unsigned w = threadIdx.x / 32, l = threadIdx.x % 32;
    if (l == 0) {
        red[w] = base_max;
        red[WARPS + w] = rest_max;
    }
    __syncthreads();
    if (w == 0) {
        float bm = warp_max(l < WARPS ? red[l] : 0.0f), rm = warp_max(l < WARPS ? red[WARPS + l] : 0.0f);
        float acc = 0.0f;
        if (l == 0) {
            for (unsigned a = 0; a < anchors; a++) acc += x[chip_base + a] * x[chip_base + a];
            float ulp = nextafterf(acc, __int_as_float(0x7f800000)) - acc;
            if (!(bm == 0.0f && acc > 0.0f && rm + rm < ulp)) {
                acc = 0.0f;
                for (unsigned i = 0; i < n; i++) acc += x[i] * x[i];
            }
        }
        if (l == 0) red[2 * WARPS] = acc;
    }
    __syncthreads();
    return red[2 * WARPS];
}

// Zero-centred RMSNorm of the residual x into out with gain g (1 + w precomputed on the host).
__device__ void rms_norm(const float *x, float *out, const float *gain, const Dims &d, float *red) {
    float total = residual_sum_of_squares(x, d.width, d.chip_base, d.anchors, red);
    float inv = 1.0f / sqrtf(total / (float)d.width + d.eps);
    for (unsigned i = threadIdx.x; i < d.width; i += THREADS) out[i] = (x[i] * inv) * gain[i];
    __syncthreads();
}

// The nonzero entries of v[0..n) (n <= 128) in ascending order, found by the whole warp.
__device__ __forceinline__ unsigned nonzeros(const float *v, unsigned n, unsigned *rows, float *vals) {
    unsigned lane = threadIdx.x % 32, count = 0;
    for (unsigned chunk = 0; chunk < n; chunk += 32) {
        unsigned i = chunk + lane;
        float x = i < n ? v[i] : 0.0f;
        unsigned mask = __ballot_sync(0xffffffff, x != 0.0f);
        if (x != 0.0f) {
            unsigned at = count + __popc(mask & ((1u << lane) - 1));
            rows[at] = i;
            vals[at] = x;
        }
        count += __popc(mask);
    }
    __syncwarp();
    return count;
}

// This lane's value columns (lane, lane + 32, ...) of the sum over the c key rows of
// vals[k] * st[rows[k]], in key order. The loads of all columns are independent, so
// they are issued together.
__device__ __forceinline__ void read_memory(const float *st, unsigned dv, const unsigned *rows, const float *vals,
                                            unsigned c, float (&acc)[MAX_DV / 32]) {
    unsigned lane = threadIdx.x % 32;
#pragma unroll
    for (unsigned j = 0; j < MAX_DV / 32; j++) acc[j] = 0.0f;
    for (unsigned k = 0; k < c; k++) {
        const float *row = st + rows[k] * dv;
#pragma unroll
        for (unsigned j = 0; j < MAX_DV / 32; j++)
            if (lane + 32 * j < dv) acc[j] += row[lane + 32 * j] * vals[k];
    }
}

extern "C" __global__ void __launch_bounds__(THREADS) chip_passes(
    const Dims *dims_p, const Layer *layers_g, const unsigned *I, const unsigned short *C, const float *V,
    const float *W, float *S_all, const SlotWork *slots, const unsigned *inputs_all, unsigned *outputs_all,
    unsigned *ctl_all /* per machine: [0]=passes done, [1]=conv ring position, [2]=last token */) {
    BLOCK_MACHINE;

    extern __shared__ float sh[];
    const Dims d = *dims_p;
    float *hidden = sh;                       // width
    float *xn = hidden + d.width;             // width
    float *y = xn + d.width;                  // conv_dim
    float *head_out = y + d.conv_dim;         // hv*dv
    float *scratch = head_out + d.hv * d.dv;  // d.scratch
    float *act = scratch + d.scratch;         // d.act
    Layer *layers = (Layer *)(act + d.act);   // d.layers
    __shared__ float red[2 * WARPS + 1];
    __shared__ unsigned token_sh, kind_sh;
    __shared__ unsigned knz_rows[WARPS][128];
    __shared__ float knz_vals[WARPS][128];
    __shared__ Tokens tk;

    // Tables and zeroed buffers (entries never written stay zero for the whole launch).
    for (unsigned i = threadIdx.x; i < d.layers * (unsigned)(sizeof(Layer) / 4); i += THREADS)
        ((unsigned *)layers)[i] = ((const unsigned *)layers_g)[i];
    load_tokens(tk, d, I);
    for (unsigned i = threadIdx.x; i < d.conv_dim + d.hv * d.dv + d.scratch + d.act; i += THREADS) y[i] = 0.0f;
    __syncthreads();

    unsigned ring = state[1];
    unsigned token = state[2];
    unsigned done = 0;
#ifdef PROFILE
    long long prof[PHASES] = {0}, prof_last = clock64();
#endif
    for (unsigned pass = 0; pass < max_passes; pass++) {
        if (pass < n_inputs) token = inputs[pass];
        // Embed: anchors, then the kind's and its fields' one-hots.
        for (unsigned i = threadIdx.x; i < d.width; i += THREADS) hidden[i] = 0.0f;
        __syncthreads();
        for (unsigned a = threadIdx.x; a < d.anchors; a += THREADS)
            hidden[d.chip_base + I[d.anchor_dim + a]] = W[d.anchor_value + a];
        if (threadIdx.x == 0) {
            unsigned k = 0;
            while (k + 1 < d.kinds && tk.kind_off[k + 1] <= token) k++;
            unsigned idx = token - tk.kind_off[k];
            hidden[d.chip_base + tk.kind_dim[k]] = 1.0f;
            for (int f = (int)tk.kind_nf[k] - 1; f >= 0; f--) {
                unsigned fid = tk.kind_fields[k * KIND_FIELDS + f];
                unsigned size = tk.field_size[fid];
                hidden[d.chip_base + tk.field_dim[fid] + idx % size] = 1.0f;
                idx /= size;
            }
        }
        __syncthreads();
        MARK(0);

        for (unsigned l = 0; l < d.layers; l++) {
            const Layer &L = layers[l];
            rms_norm(hidden, xn, W + L.in_gain, d, red);
            MARK(1);
            ell(L.xin, I, C, V, xn, scratch, false);
            __syncthreads();
            MARK(2);
            // The causal conv and silu on the live channels.
            float *cs = S + L.conv_state;
            for (unsigned i = threadIdx.x; i < L.n_live; i += THREADS) {
                float raw = scratch[i];
                const float *w = W + L.taps + 4 * i;
                float u = 0.0f;
                for (unsigned j = 0; j < 3; j++) u += w[j] * cs[((ring + j) % 3) * L.n_live + i];
                u += w[3] * raw;
                y[I[L.live + i]] = silu_f(u);
                cs[(ring % 3) * L.n_live + i] = raw; // the oldest slot becomes the newest
            }
            __syncthreads();
            MARK(3);
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
            MARK(4);
            // Delta rule and read, one warp per value head.
            {
                unsigned w = threadIdx.x / 32, lane = threadIdx.x % 32;
                unsigned group = d.hv / d.hk;
                for (unsigned head = w; head < d.hv; head += WARPS) {
                    unsigned kh = head / group;
                    float beta = sigmoid_f(scratch[L.b_at + head]);
                    float a = scratch[L.a_at + head];
                    float g = -expf(W[L.a_log + head]) * softplus_f(a + W[L.dt_bias + head]);
                    float decay = expf(g);
                    float *st = S + L.rec + head * d.dk * d.dv;
                    if (decay != 1.0f)
                        for (unsigned i = lane; i < d.dk * d.dv; i += 32) st[i] *= decay;
                    unsigned *rows = knz_rows[w];
                    float *vals = knz_vals[w];
                    // Each lane owns value columns lane, lane + 32, ... (sums in key order).
                    if (beta != 0.0f) {
                        const float *key = y + d.key_dim + kh * d.dk;
                        const float *val = y + 2 * d.key_dim + head * d.dv;
                        unsigned c = nonzeros(key, d.dk, rows, vals);
                        float mem[MAX_DV / 32];
                        read_memory(st, d.dv, rows, vals, c, mem);
#pragma unroll
                        for (unsigned j = 0; j < MAX_DV / 32; j++)
                            if (lane + 32 * j < d.dv) mem[j] = (val[lane + 32 * j] - mem[j]) * beta;
                        for (unsigned k = 0; k < c; k++) {
                            float *row = st + rows[k] * d.dv;
#pragma unroll
                            for (unsigned j = 0; j < MAX_DV / 32; j++)
                                if (lane + 32 * j < d.dv) row[lane + 32 * j] += vals[k] * mem[j];
                        }
                        __syncwarp();
                    }
                    float *out = head_out + head * d.dv;
                    unsigned c = nonzeros(y + kh * d.dk, d.dk, rows, vals);
                    if (c == 0) {
                        for (unsigned e = lane; e < d.dv; e += 32) out[e] = 0.0f;
                        __syncwarp();
                        continue;
                    }
                    float acc[MAX_DV / 32];
                    read_memory(st, d.dv, rows, vals, c, acc);
                    float s = 0.0f;
#pragma unroll
                    for (unsigned j = 0; j < MAX_DV / 32; j++)
                        if (lane + 32 * j < d.dv) {
                            out[lane + 32 * j] = acc[j];
                            s += acc[j] * acc[j];
                        }
                    s = warp_sum(s);
                    float inv = 1.0f / sqrtf(s / (float)d.dv + d.eps);
                    for (unsigned e = lane; e < d.dv; e += 32)
                        out[e] = (W[L.norm + e] * (out[e] * inv)) * silu_f(scratch[L.z_at + head * d.dv + e]);
                    __syncwarp();
                }
            }
            __syncthreads();
            MARK(5);
            ell(L.out, I, C, V, head_out, hidden, true);
            // Clear this layer's conv outputs: the next layer's live channels differ.
            for (unsigned i = threadIdx.x; i < L.n_live; i += THREADS) y[I[L.live + i]] = 0.0f;
            __syncthreads();
            MARK(6);
            // MLP over the compact list of live neurons.
            rms_norm(hidden, xn, W + L.post_gain, d, red);
            MARK(7);
            ell(L.gate_up, I, C, V, xn, scratch, false);
            __syncthreads();
            MARK(8);
            for (unsigned i = threadIdx.x; i < L.n_neur; i += THREADS)
                act[i] = silu_f(scratch[i]) * scratch[L.n_neur + i];
            __syncthreads();
            MARK(9);
            ell(L.down, I, C, V, act, hidden, true);
            __syncthreads();
            MARK(10);
        }
        ring = (ring + 1) % 3;

        // Choose the next token: each field's best value (first maximum), one warp per
        // field; then per kind its score plus its fields' best scores, in field order.
        best_field_values(hidden, d, tk);
        __syncthreads();
        if (threadIdx.x == 0) {
            float best = -__int_as_float(0x7f800000);
            unsigned best_token = 0, best_kind = 0;
            bool have = false;
            for (unsigned k = 0; k < d.kinds; k++) {
                float score = hidden[d.chip_base + tk.kind_dim[k]];
                unsigned idx = 0;
                for (unsigned f = 0; f < tk.kind_nf[k]; f++) {
                    unsigned fid = tk.kind_fields[k * KIND_FIELDS + f];
                    score += tk.field_score[fid];
                    idx = idx * tk.field_size[fid] + tk.field_best[fid];
                }
                if (!have || score > best) {
                    have = true;
                    best = score;
                    best_token = tk.kind_off[k] + idx;
                    best_kind = k;
                }
            }
            token_sh = best_token;
            kind_sh = best_kind;
            outputs[pass] = best_token;
        }
        __syncthreads();
        token = token_sh;
        unsigned kind = kind_sh;
        __syncthreads();
        MARK(11);
        done = pass + 1;
        if (pass + 1 >= n_inputs && ((stop_mask >> kind) & 1)) break;
    }
#ifdef PROFILE
    if (threadIdx.x == 0 && done > 0) {
        long long total = 0;
        for (int i = 0; i < PHASES; i++) total += prof[i];
        printf("kernel profile: %u passes, %.0f cycles/pass: embed %.0f norm1 %.0f xin %.0f conv %.0f qk %.0f "
               "gdn %.0f out %.0f norm2 %.0f gate_up %.0f act %.0f down %.0f choose %.0f\n",
               done, (double)total / done, (double)prof[0] / done, (double)prof[1] / done, (double)prof[2] / done,
               (double)prof[3] / done, (double)prof[4] / done, (double)prof[5] / done, (double)prof[6] / done,
               (double)prof[7] / done, (double)prof[8] / done, (double)prof[9] / done, (double)prof[10] / done,
               (double)prof[11] / done);
    }
#endif
    if (threadIdx.x == 0) {
        state[0] = done;
        state[1] = ring;
        state[2] = token;
    }
}
