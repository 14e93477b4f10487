// inband: the chip layers' forward pass on the GPU, driven by the activation's nonzeros.
//
// The chip's residual is one-hot and level codes: on a pass about 30 of its thousands of
// dims are nonzero, ten of them the anchors, which never change. So a projection is not
// computed row by row; instead
//   - the anchors' share of every row (its "bias") is computed once, on the host, with the
//     input RMSNorm's factor that the anchors pin (the kernel checks the pin on every
//     norm: a non-anchor square of half an ulp of the anchors' sum or more stops the run
//     with an error instead of computing with the wrong factor);
//   - the residual's other nonzeros are listed (a block-wide compaction), and each one's
//     column of weights (CSC) is added into the rows it feeds;
//   - rows are read where they are used, as bias + scattered sum: a conv channel no signal
//     reached outputs its precomputed constant (only channels with delayed taps keep a
//     conv state); a head whose q and k nothing reached, with decay 1, does nothing; a
//     neuron no signal can reach is constant, its share of down precomputed.
// Sums are over integer-valued terms inside fp32's exact range (the chip's margins), so
// adding them in another order than the CPU gives the same bits; the token streams are
// checked against the CPU engine's.
//
// A value head's work (its q/k normalisation, delta rule, read, gated norm and its
// out_proj columns) is one warp's, with no block barrier; a SwiGLU neuron that fires adds
// its down column into the residual from the thread that computed it. A layer's block
// barriers: the residual listed (two), the input projections summed, the delayed conv
// done (where a layer has one), the heads done, the residual listed again (two), the
// MLP's inputs summed, the MLP done.

#include "chip_common.cuh"

// The phases of the -DPROFILE cycle counts (MARK in chip_common.cuh).
#define PHASES 10

// Residual dims one thread scans when listing the nonzeros (the host sets it from the width).
#ifndef SCAN_PER_THREAD
#define SCAN_PER_THREAD 4
#endif

// One matrix in compressed sparse columns, without the anchors' columns: column c's
// entries are E[I[start + c] .. I[start + c + 1]), each (row, weight bits).
struct Csc {
    unsigned start;
};

// Per layer offsets (I for indices, W for floats, S for state).
struct Layer {
    Csc xin;              // rows: conv channel c at c, z at z_at, b at b_at, a at a_at
    unsigned channel;     // W: per conv channel {silu(w3 * bias), w3, bias, delayed index + 1 or 0}
    unsigned n_delayed, delayed, taps, conv_state; // channels whose conv reads earlier passes
    unsigned z_at, b_at, a_at;
    unsigned z_bias;      // W: the anchors' share of each z row
    unsigned head;        // W: per value head {A_log, dt_bias, b's anchor share, a's}
    unsigned n_heads, heads; // I: the heads whose q and k can be nonzero; bit 16: q and k
                             // are zero unless a signal reaches them; bit 17: decay is 1
    unsigned norm;
    Csc out;              // out_proj: columns are head outputs, rows residual dims
    Csc gate_up;          // gate rows 0..n_neur, up rows n_neur..2 n_neur
    unsigned gu_bias;     // W: per neuron {gate's anchor share, up's}
    unsigned n_neur, n_signal, signal; // I: the neurons a signal can reach (the rest are constant)
    unsigned n_fixed, fixed_rows, fixed_vals; // the constant neurons' share of down, per residual row
    Csc down;             // columns are compact neurons, rows residual dims
    unsigned rec;
};

// Error codes the kernel leaves in state[3].
#define ERR_NORM_UNPINNED 1u
#define ERR_TOO_MANY_NONZEROS 2u

// Nonzero residual dims a norm may list (a pass has about 30); the list's space also
// holds the warps' staged keys and queries while the heads run.
#define NZ_CAP 2048
static_assert(WARPS * MAX_DV <= 2 * NZ_CAP, "the staged keys and queries fit in the list's space");

// The kernel runs more code per pass than the SM's instruction cache holds if every
// helper is inlined at every use: phases that are cheap in instructions then wait on
// instruction fetches (measured: the token choice took 76 k cycles a pass, 5 k after).
// So the pure-arithmetic helpers (silu, the row loops) are calls, one copy each.
__device__ __noinline__ float silu_call(float x) { return silu_f(x); }

// The helpers that load memory are inlined: their loads issue together with the caller's,
// where a call would wait for each (measured: 15 % slower as calls).
#define HELPER __forceinline__

// Marks residual dim r as possibly nonzero (the next embedding clears only marked dims).
__device__ __forceinline__ void mark(unsigned *dirty, unsigned r) { atomicOr(dirty + r / 32, 1u << (r % 32)); }

// Lists the residual's nonzero dims past the anchors into (cols, vals), vals the normed
// input x * norm_inv; returns how many. Also checks the pin: every non-anchor square below
// half an ulp of the anchors' sum. All threads scan the residual (two block barriers):
// measured faster than warp 0 listing from the bitmap of dims that may be nonzero.
__device__ HELPER unsigned list_nonzeros(const float *x, const Dims &d, unsigned *cols, float *vals, unsigned *flag) {
    __shared__ unsigned warp_count[WARPS];
    unsigned w = threadIdx.x / 32, lane = threadIdx.x % 32;
    unsigned anchors_end = d.chip_base + d.anchors;
    unsigned masks[SCAN_PER_THREAD];
    float v[SCAN_PER_THREAD];
    float worst = 0.0f;
    unsigned mine = 0;
#pragma unroll
    for (unsigned j = 0; j < SCAN_PER_THREAD; j++) {
        unsigned i = (j * WARPS + w) * 32 + lane;
        v[j] = i < d.width ? x[i] : 0.0f;
        bool anchor = i >= d.chip_base && i < anchors_end;
        if (!anchor) worst = fmaxf(worst, v[j] * v[j]);
        masks[j] = __ballot_sync(0xffffffff, v[j] != 0.0f && !anchor);
        mine += __popc(masks[j]);
    }
    worst = warp_max(worst);
    if (lane == 0) {
        warp_count[w] = mine;
        if (!(worst + worst < d.anchor_ulp)) *flag = ERR_NORM_UNPINNED;
    }
    __syncthreads();
    unsigned before = lane < w ? warp_count[lane] : 0, all = warp_count[lane];
    for (int o = 16; o > 0; o >>= 1) {
        before += __shfl_xor_sync(0xffffffff, before, o);
        all += __shfl_xor_sync(0xffffffff, all, o);
    }
#pragma unroll
    for (unsigned j = 0; j < SCAN_PER_THREAD; j++) {
        if ((masks[j] >> lane) & 1) {
            unsigned at = before + __popc(masks[j] & ((1u << lane) - 1));
            if (at >= NZ_CAP) continue;
            cols[at] = (j * WARPS + w) * 32 + lane;
            vals[at] = v[j] * d.norm_inv;
        }
        before += __popc(masks[j]);
    }
    if (threadIdx.x == 0 && all > NZ_CAP) *flag = ERR_TOO_MANY_NONZEROS;
    __syncthreads();
    return min(all, NZ_CAP);
}

// out[row] += weight * value for every entry of the listed columns: one warp per column,
// its lanes over the column's entries.
__device__ HELPER void scatter(const Csc &m, const unsigned *__restrict__ I, const uint2 *__restrict__ E,
                                        const unsigned *cols, const float *vals, unsigned n, float *out) {
    unsigned w = threadIdx.x / 32, lane = threadIdx.x % 32;
    for (unsigned t = w; t < n; t += WARPS) {
        unsigned c = cols[t];
        float x = vals[t];
        unsigned from = __ldg(I + m.start + c), to = __ldg(I + m.start + c + 1);
#pragma unroll 4
        for (unsigned k = from + lane; k < to; k += 32) {
            uint2 e = __ldg(E + k);
            atomicAdd(out + e.x, __uint_as_float(e.y) * x);
        }
    }
}

// The entries of column c of m, each times x, added into the residual (one thread).
__device__ HELPER void add_column(const Csc &m, const unsigned *__restrict__ I, const uint2 *__restrict__ E,
                                           unsigned c, float x, float *hidden, unsigned *dirty) {
    unsigned from = __ldg(I + m.start + c), to = __ldg(I + m.start + c + 1);
    for (unsigned k = from; k < to; k++) {
        uint2 e = __ldg(E + k);
        atomicAdd(hidden + e.x, __uint_as_float(e.y) * x);
        mark(dirty, e.x);
    }
}

// Conv channel c's output: a delayed channel's from the conv phase (y, by its index among
// the delayed, plus one, in the table's fourth field); otherwise, with no
// signal reaching it, silu(w3 * bias) (precomputed), else silu(0 + w3 * (sum + bias)),
// the CPU's fold with its zero taps dropped.
__device__ HELPER float channel_out(const Layer &L, const float *__restrict__ W, const float *xs,
                                             const float *y, unsigned c) {
    float s = xs[c];
    float4 ch = __ldg((const float4 *)(W + L.channel) + c);
    if (ch.w != 0.0f) return y[(unsigned)ch.w - 1];
    if (s == 0.0f) return ch.x;
    return silu_call(0.0f + ch.y * (s + ch.z));
}

#define KJ (MAX_DV / 32)

// A warp's key or query (lane + 32 j in v[j]) into its staging row of shared memory.
__device__ __forceinline__ void stage(const float (&v)[KJ], float *staged) {
    unsigned lane = threadIdx.x % 32;
#pragma unroll
    for (unsigned j = 0; j < KJ; j++) staged[32 * j + lane] = v[j];
    __syncwarp();
}

// Over the staged vector's nonzero rows r, in ascending order: the read (WRITE false),
// acc (value columns lane + 32 jj) += staged[r] * st[r]; or the delta rule's write (WRITE
// true), st[r] += staged[r] * acc.
template <bool WRITE>
__device__ __noinline__ void over_rows(float *st, unsigned dv, const float *staged, float (&acc)[KJ]) {
    unsigned lane = threadIdx.x % 32;
#pragma unroll 1
    for (unsigned j = 0; j < KJ; j++) {
        unsigned mask = __ballot_sync(0xffffffff, staged[32 * j + lane] != 0.0f);
        while (mask) {
            unsigned r = 32 * j + __ffs(mask) - 1;
            mask &= mask - 1;
            float kv = staged[r];
            float *row = st + r * dv;
#pragma unroll
            for (unsigned jj = 0; jj < KJ; jj++) {
                if (lane + 32 * jj >= dv) continue;
                if (WRITE) row[lane + 32 * jj] += kv * acc[jj];
                else acc[jj] += row[lane + 32 * jj] * kv;
            }
        }
    }
    __syncwarp();
}

// One value head, by one warp: q/k L2 norms of its key head, decay, delta rule, read,
// gated RMSNorm with silu(z), and its out_proj columns added into the residual.
__device__ HELPER void value_head(unsigned entry, const Layer &L, const Dims &d, const unsigned *__restrict__ I,
                           const uint2 *__restrict__ E, const float *__restrict__ W, float *S, const float *y,
                           const float *xs, float *hidden, unsigned *dirty, float *staged) {
    unsigned lane = threadIdx.x % 32;
    unsigned head = entry & 0xffff;
    bool quiet_unless_reached = (entry >> 16) & 1, no_decay = (entry >> 17) & 1;
    unsigned kh = head / (d.hv / d.hk);

    // q and k of the key head, L2-normalised (q also scaled by 1/sqrt(dk)), in registers.
    float q[KJ] = {}, k[KJ] = {};
    bool reached = false;
#pragma unroll
    for (unsigned j = 0; j < KJ; j++) {
        unsigned e = lane + 32 * j;
        if (e < d.dk) reached |= xs[kh * d.dk + e] != 0.0f || xs[d.key_dim + kh * d.dk + e] != 0.0f;
    }
    reached = __any_sync(0xffffffff, reached);
    // Nothing reaches q or k, and the decay is 1: the head neither writes nor reads.
    if (quiet_unless_reached && !reached && no_decay) return;
    float4 p = __ldg((const float4 *)(W + L.head) + head); // A_log, dt_bias, b and a anchor shares
    float b_raw = xs[L.b_at + head] + p.z;
    float a_raw = xs[L.a_at + head] + p.w;
    if (!quiet_unless_reached || reached) {
#pragma unroll
        for (unsigned j = 0; j < KJ; j++) {
            unsigned e = lane + 32 * j;
            if (e < d.dk) {
                q[j] = channel_out(L, W, xs, y, kh * d.dk + e);
                k[j] = channel_out(L, W, xs, y, d.key_dim + kh * d.dk + e);
            }
        }
    }
    float sq = 0.0f, sk = 0.0f;
#pragma unroll
    for (unsigned j = 0; j < KJ; j++) {
        sq += q[j] * q[j];
        sk += k[j] * k[j];
    }
    sq = warp_sum(sq);
    sk = warp_sum(sk);
    if (sq != 0.0f) {
        float inv = 1.0f / sqrtf(sq + 1e-6f), qs = sqrtf((float)d.dk);
#pragma unroll
        for (unsigned j = 0; j < KJ; j++) q[j] = (q[j] * inv) / qs;
    }
    if (sk != 0.0f) {
        float inv = 1.0f / sqrtf(sk + 1e-6f);
#pragma unroll
        for (unsigned j = 0; j < KJ; j++) k[j] = k[j] * inv;
    }

    float beta = sigmoid_f(b_raw);
    float g = -expf(p.x) * softplus_f(a_raw + p.y);
    float decay = expf(g);
    float *st = S + L.rec + head * d.dk * d.dv;
    if (decay != 1.0f) {
        for (unsigned i = lane; i < d.dk * d.dv; i += 32) st[i] *= decay;
        __syncwarp();
    }
    // The delta rule over the key's nonzero rows, in ascending row order.
    if (beta != 0.0f && sk != 0.0f) {
        float mem[KJ] = {};
        stage(k, staged);
        over_rows<false>(st, d.dv, staged, mem);
#pragma unroll
        for (unsigned jj = 0; jj < KJ; jj++) {
            unsigned e = lane + 32 * jj;
            if (e < d.dv) mem[jj] = (channel_out(L, W, xs, y, 2 * d.key_dim + head * d.dv + e) - mem[jj]) * beta;
        }
        over_rows<true>(st, d.dv, staged, mem);
    }
    if (sq == 0.0f) return; // the head reads nothing: its output and out_proj share are 0
    // The read over the query's nonzero rows, in ascending row order.
    float acc[KJ] = {};
    stage(q, staged);
    over_rows<false>(st, d.dv, staged, acc);
    float s = 0.0f;
#pragma unroll
    for (unsigned j = 0; j < KJ; j++) s += acc[j] * acc[j];
    s = warp_sum(s);
    float inv = 1.0f / sqrtf(s / (float)d.dv + d.eps);
#pragma unroll
    for (unsigned j = 0; j < KJ; j++) {
        unsigned e = lane + 32 * j;
        if (e >= d.dv) continue;
        float z = xs[L.z_at + head * d.dv + e] + __ldg(W + L.z_bias + head * d.dv + e);
        float o = (__ldg(W + L.norm + e) * (acc[j] * inv)) * silu_call(z);
        if (o != 0.0f) add_column(L.out, I, E, head * d.dv + e, o, hidden, dirty);
    }
}

extern "C" __global__ void __launch_bounds__(THREADS) chip_passes(
    const Dims *dims_p, const Layer *layers_g, const unsigned *I, const uint2 *E, const float *W, float *S,
    const unsigned *inputs, unsigned n_inputs, unsigned max_passes, unsigned stop_mask, unsigned *outputs,
    unsigned *state /* [0]=passes done, [1]=conv ring position, [2]=last token, [3]=error */) {
    extern __shared__ float sh[];
    const Dims d = *dims_p;
    float *hidden = sh;                                  // width
    float *y = hidden + d.width;                         // d.delayed: delayed channels' outputs
    float *xs = y + d.delayed;                           // d.scratch: the input projections' rows
    float *gu = xs + d.scratch;                          // d.act: gate and up rows
    float *nz_vals = gu + d.act;                         // NZ_CAP; while the heads run, the
    unsigned *nz_cols = (unsigned *)(nz_vals + NZ_CAP);  // NZ_CAP   warps' staged keys and queries
    float *staging = nz_vals;                            // WARPS * MAX_DV (<= 2 NZ_CAP)
    unsigned *dirty = nz_cols + NZ_CAP;                  // (width + 31) / 32: dims that may be nonzero
    Layer *layers = (Layer *)(dirty + (d.width + 31) / 32); // d.layers
    __shared__ unsigned error_sh, token_sh, kind_sh;
    __shared__ Tokens tk;

    // Tables; the residual holds only the anchors, which no layer writes; every other
    // buffer starts zeroed, and each phase zeroes what it consumed.
    #pragma unroll 1
    for (unsigned i = threadIdx.x; i < d.layers * (unsigned)(sizeof(Layer) / 4); i += THREADS)
        ((unsigned *)layers)[i] = ((const unsigned *)layers_g)[i];
    load_tokens(tk, d, I);
    #pragma unroll 1
    for (unsigned i = threadIdx.x; i < d.width + d.delayed + d.scratch + d.act; i += THREADS) hidden[i] = 0.0f;
    for (unsigned i = threadIdx.x; i < (d.width + 31) / 32; i += THREADS) dirty[i] = 0;
    if (threadIdx.x == 0) error_sh = 0;
    __syncthreads();
    for (unsigned a = threadIdx.x; a < d.anchors; a += THREADS)
        hidden[d.chip_base + I[d.anchor_dim + a]] = W[d.anchor_value + a];
    __syncthreads();

    unsigned ring = state[1];
    unsigned token = state[2];
    unsigned done = 0;
#ifdef PROFILE
    long long prof[PHASES] = {0}, prof_last = clock64();
#endif
    for (unsigned pass = 0; pass < max_passes; pass++) {
        if (pass < n_inputs) token = inputs[pass];
        // Embed: clear the last pass's dims (the anchors stay), set the kind's and its
        // fields' one-hots. Warp 0 alone.
        if (threadIdx.x < 32) {
            unsigned lane = threadIdx.x;
            for (unsigned w = lane; w < (d.width + 31) / 32; w += 32) {
                for (unsigned m = dirty[w]; m; m &= m - 1) hidden[w * 32 + __ffs(m) - 1] = 0.0f;
                dirty[w] = 0;
            }
            bool mine = lane < d.kinds && tk.kind_off[lane] <= token && (lane + 1 >= d.kinds || token < tk.kind_off[lane + 1]);
            unsigned k = __ffs(__ballot_sync(0xffffffff, mine)) - 1;
            __syncwarp();
            if (lane == 0) {
                unsigned idx = token - tk.kind_off[k];
                unsigned r = d.chip_base + tk.kind_dim[k];
                hidden[r] = 1.0f;
                mark(dirty, r);
                for (int f = (int)tk.kind_nf[k] - 1; f >= 0; f--) {
                    unsigned fid = tk.kind_fields[k * 8 + f];
                    unsigned size = tk.field_size[fid];
                    r = d.chip_base + tk.field_dim[fid] + idx % size;
                    hidden[r] = 1.0f;
                    mark(dirty, r);
                    idx /= size;
                }
            }
        }
        __syncthreads();
        MARK(0);

        #pragma unroll 1
        for (unsigned l = 0; l < d.layers; l++) {
            const Layer &L = layers[l];
            unsigned n = list_nonzeros(hidden, d, nz_cols, nz_vals, &error_sh);
            MARK(1);
            scatter(L.xin, I, E, nz_cols, nz_vals, n, xs);
            __syncthreads();
            MARK(2);
            // The causal conv of the channels that read earlier passes (raw = scattered sum
            // + anchors' share); the others' conv is a multiply, done where they are read.
            if (L.n_delayed > 0) {
                float *cs = S + L.conv_state;
                #pragma unroll 1
                for (unsigned i = threadIdx.x; i < L.n_delayed; i += THREADS) {
                    unsigned c = __ldg(I + L.delayed + i);
                    float raw = xs[c] + __ldg(W + L.channel + 4 * c + 2);
                    const float *w = W + L.taps + 4 * i;
                    float u = 0.0f;
                    for (unsigned j = 0; j < 3; j++) u += __ldg(w + j) * cs[((ring + j) % 3) * L.n_delayed + i];
                    u += __ldg(w + 3) * raw;
                    y[i] = silu_call(u);
                    cs[(ring % 3) * L.n_delayed + i] = raw; // the oldest slot becomes the newest
                }
                __syncthreads();
            }
            MARK(3);
            #pragma unroll 1
            for (unsigned h = threadIdx.x / 32; h < L.n_heads; h += WARPS)
                value_head(__ldg(I + L.heads + h), L, d, I, E, W, S, y, xs, hidden, dirty,
                           staging + (threadIdx.x / 32) * MAX_DV);
            __syncthreads();
            MARK(4);
            #pragma unroll 1
            for (unsigned i = threadIdx.x; i < d.scratch; i += THREADS) xs[i] = 0.0f;
            n = list_nonzeros(hidden, d, nz_cols, nz_vals, &error_sh);
            MARK(5);
            scatter(L.gate_up, I, E, nz_cols, nz_vals, n, gu);
            __syncthreads();
            MARK(6);
            // The constant neurons' share of down; then SwiGLU of the neurons a signal can
            // reach, each adding its down column into the residual when it fires.
            #pragma unroll 1
            for (unsigned i = threadIdx.x; i < L.n_fixed; i += THREADS) {
                unsigned r = __ldg(I + L.fixed_rows + i);
                atomicAdd(hidden + r, __ldg(W + L.fixed_vals + i));
                mark(dirty, r);
            }
            #pragma unroll 1
            for (unsigned t = threadIdx.x; t < L.n_signal; t += THREADS) {
                unsigned i = __ldg(I + L.signal + t);
                float2 bias = __ldg((const float2 *)(W + L.gu_bias) + i);
                float g = gu[i] + bias.x, u = gu[L.n_neur + i] + bias.y;
                gu[i] = gu[L.n_neur + i] = 0.0f;
                float a = silu_call(g) * u;
                if (a != 0.0f) add_column(L.down, I, E, i, a, hidden, dirty);
            }
            __syncthreads();
            MARK(7);
        }
        ring = (ring + 1) % 3;

        // Choose the next token: each field's best value (first maximum), one warp per
        // field; then one lane per kind adds its fields' best scores in field order, and
        // the first kind of the highest score wins.
        best_field_values(hidden, d, tk);
        __syncthreads();
        MARK(8);
        if (threadIdx.x < 32) {
            unsigned k = threadIdx.x;
            bool have = k < d.kinds;
            float score = -__int_as_float(0x7f800000);
            unsigned idx = 0;
            if (have) {
                score = hidden[d.chip_base + tk.kind_dim[k]];
                for (unsigned f = 0; f < tk.kind_nf[k]; f++) {
                    unsigned fid = tk.kind_fields[k * 8 + f];
                    score += tk.field_score[fid];
                    idx = idx * tk.field_size[fid] + tk.field_best[fid];
                }
            }
            // The first kind with the highest score (the CPU's strict > over kinds in order).
            unsigned best_k = have ? k : 0xffffffffu;
            float best = score;
            for (int o = 16; o > 0; o >>= 1) {
                float os = __shfl_xor_sync(0xffffffff, best, o);
                unsigned ok = __shfl_xor_sync(0xffffffff, best_k, o);
                if (ok != 0xffffffffu && (best_k == 0xffffffffu || os > best || (os == best && ok < best_k))) {
                    best = os;
                    best_k = ok;
                }
            }
            if (k == best_k) {
                token_sh = tk.kind_off[k] + idx;
                kind_sh = k;
                outputs[pass] = tk.kind_off[k] + idx;
            }
        }
        __syncthreads();
        token = token_sh;
        unsigned kind = kind_sh;
        bool failed = error_sh != 0;
        __syncthreads();
        MARK(9);
        done = pass + 1;
        if (failed) break;
        if (pass + 1 >= n_inputs && ((stop_mask >> kind) & 1)) break;
    }
#ifdef PROFILE
    if (threadIdx.x == 0 && done > 0) {
        long long total = 0;
        for (int i = 0; i < PHASES; i++) total += prof[i];
        printf("kernel profile (sparse): %u passes, %.0f cycles/pass: embed %.0f list1 %.0f xin %.0f conv %.0f "
               "heads %.0f list2 %.0f gate_up %.0f swiglu+down %.0f fields %.0f kinds %.0f\n",
               done, (double)total / done, (double)prof[0] / done, (double)prof[1] / done, (double)prof[2] / done,
               (double)prof[3] / done, (double)prof[4] / done, (double)prof[5] / done, (double)prof[6] / done,
               (double)prof[7] / done, (double)prof[8] / done, (double)prof[9] / done);
    }
#endif
    if (threadIdx.x == 0) {
        state[0] = done;
        state[1] = ring;
        state[2] = token;
        state[3] = error_sh;
    }
}
