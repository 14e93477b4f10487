// inband: what the chip kernels share: the launch shape, the dimensions and token tables
// the host fills in (mirrored by `Dims` in gpu/mod.rs), and the activation functions
// written exactly as the CPU path computes them (no fused multiply-adds, no flushing).

// Threads per machine (block): the host compiles a kernel per shape it launches
// (-DTHREADS=n) and launches it with as many.
#ifndef THREADS
#define THREADS 1024
#endif
#define WARPS (THREADS / 32)
#define MAX_KINDS 32
#define MAX_FIELDS 64
#define KIND_FIELDS 8 // the most fields a token kind has (the host's `KIND_FIELDS`)
#define MAX_DV 128

// With -DPROFILE, thread 0 adds up the cycles of each phase (MARK(i) ends phase i; the
// kernel defines PHASES and the counters prof, prof_last, and may define PROF_SLOT(i),
// the counter phase i adds to) and prints them per pass.
#ifndef PROF_SLOT
#define PROF_SLOT(i) (i)
#endif
#ifdef PROFILE
#define MARK(i)                                                                                                        \
    if (threadIdx.x == 0) {                                                                                            \
        long long t_ = clock64();                                                                                      \
        prof[PROF_SLOT(i)] += t_ - prof_last;                                                                          \
        prof_last = t_;                                                                                                \
    }
#else
#define MARK(i)
#endif

struct Dims {
    unsigned width, conv_dim, key_dim, dk, dv, hk, hv, layers;
    float eps;
    unsigned kinds, fields, anchors;
    unsigned kind_dim, kind_fields, kind_nfields, kind_offset; // I offsets (kind_fields: 8 per kind)
    unsigned field_size, field_dim;                            // I offsets
    unsigned anchor_dim, anchor_value;                         // I and W offsets
    unsigned chip_base;                                        // residual index of chip dim 0
    unsigned scratch, act;                                     // floats of the two scratch buffers
    // The activation-sparse kernel only: the input RMSNorm's factor while the residual's
    // mean square is pinned by the anchors (computed on the host as the CPU computes it),
    // and the unit in the last place of the anchors' sum of squares: any other square of
    // half that or more would move the norm, which the kernel reports instead.
    float norm_inv, anchor_ulp;
    unsigned state_floats; // S floats of one machine
    // The activation-sparse kernel only: its tables in shared memory (I words at
    // resident_at, float4 palette entries at W's palette_at), copied in once a launch.
    unsigned resident_at, resident_words, palette_at, palettes;
    // The sparse kernel only: 1 where shared memory also holds each residual dim's readers
    // bits (after the resident words), which let it leave out layers no signal reaches;
    // they are copied in from I at readers_at (a byte a dim), and `gateable` has a bit for
    // each layer that may be left out (the host's `gateable_readers`).
    unsigned readers, readers_at, gateable;
    // The sparse kernel only: the kept reads in S (`value_head`): kept_slots slots of
    // kept_words words from kept_at, a slot {1 + its pairs, 0 where none is kept; a spare
    // word; then {row, product bits} pairs}.
    unsigned kept_at, kept_words, kept_slots;
};

// One machine's work in a launch, one block each (mirrored by `SlotWork` in gpu/mod.rs):
// the machine whose state (S, ctl) the block runs, where its inputs start in the
// launch's inputs and its chosen tokens go in the launch's outputs, and, as a single
// machine's launch takes them, how many inputs it consumes first, how many passes it
// may run and the kinds that stop it once the inputs are used up.
struct SlotWork {
    unsigned machine, input_at, n_inputs, max_passes, stop_mask, output_at;
};

// Declares this block's machine in a chip kernel taking (…, S_all, slots, inputs_all,
// outputs_all, ctl_all): its state S, its inputs, where its choices go (outputs), its
// control words (state: passes done, conv ring position, last token, error), and its
// n_inputs, max_passes and stop_mask.
#define BLOCK_MACHINE                                                                                                  \
    const SlotWork work = slots[blockIdx.x];                                                                           \
    float *S = S_all + (size_t)work.machine * dims_p->state_floats;                                                    \
    const unsigned *inputs = inputs_all + work.input_at;                                                               \
    unsigned *outputs = outputs_all + work.output_at;                                                                  \
    unsigned *state = ctl_all + 4 * work.machine;                                                                      \
    const unsigned n_inputs = work.n_inputs, max_passes = work.max_passes, stop_mask = work.stop_mask

// The CPU's silu to the bit (`qwen35::scalar::silu`): x from 17 up, -0 from -89 down (there
// exp(-x) is +inf and x / inf is -0 for every finite x, NaN for -inf). The tail is x * 0
// rather than the division by inf: that division ran the IEEE division's slow path (its
// divisor check), the heads' most sampled arithmetic line in ncu, and silu of a far
// negative argument is every channel an address does not select (measured on the H100:
// +4.9 to +5.0 % passes/s); x * 0 gives the same -0 and NaN without a division's code in
// each of the kernel's copies of silu (5 KB less code: +1.0 to +1.3 %).
__device__ __forceinline__ float silu_f(float x) {
    if (x >= 17.0f) return x;
    if (x <= -89.0f) return x * 0.0f;
    return x / (1.0f + expf(-x));
}

// silu_f's bits without the IEEE division's slow-path check. CUDA's division x / b is
// a reciprocal estimate, a Newton step and a remainder correction, then a check (FCHK)
// that sends the inputs whose exponents need scaling to a slow path: a branch after
// every division, so the four silus of a lane's channels run one after another. Here the
// same five steps (rcp_approx is the estimate the division's own code uses) with the
// scaling done ahead by selects: b past 2^120 (x below about -83) is scaled by 2^-64 and
// the quotient back (both exact: the quotient stays a normal float), inf and the far
// tail give x * 0 as silu_f does, and a zero keeps its sign. That it equals silu_f for
// every one of the 2^32 inputs is checked on the GPU (scripts/silu-exact.cu, run by
// scripts/gpu-checks.sh's `silu`): the estimate is the GPU's, which no CPU computes.
#ifdef __CUDACC__
__device__ __forceinline__ float rcp_approx(float b) {
    float r;
    asm("rcp.approx.ftz.f32 %0, %1;" : "=f"(r) : "f"(b));
    return r;
}
#endif
__device__ __forceinline__ float silu_fast(float x) {
    float e = expf(-x), b = 1.0f + e;
    float s = b >= 0x1p120f ? 0x1p-64f : 1.0f;
    float bs = b * s, r0 = rcp_approx(bs);
    float r = __fmaf_rn(r0, __fmaf_rn(-bs, r0, 1.0f), r0);
    float q = __fmaf_rn(x, r, 0.0f);
    q = __fmaf_rn(r, __fmaf_rn(-bs, q, x), q) * s;
    q = x >= 17.0f ? x : q;
    q = (x <= -89.0f) | (e == __int_as_float(0x7f800000)) ? x * 0.0f : q;
    return x == 0.0f ? x : q;
}

// The chip's silus almost never fall between the tails: counted by the kernel emulated on
// the CPU over hello and four ISA tests, of 4.95 M arguments (the heads' channels and z
// gates, the MLPs' neurons, the delayed conv) 7,259 lay between -89 and 17, 6,820 of them
// the delayed conv's; its channels, gates and step neurons sit far to one side. There
// silu_fast is x or x * 0, so a warp whose arguments all lie there takes silu_tail, the
// same bits without the exponential and the division (measured on the H100: +1.7 to
// +2.2 % passes/s; with the rare whole silus as calls, smaller code, +0.2 to +0.8 %).
__device__ __forceinline__ bool silu_between_tails(float x) { return !((x >= 17.0f) | (x <= -89.0f)); }
__device__ __forceinline__ float silu_tail(float x) { return x >= 17.0f ? x : x * 0.0f; }

__device__ __forceinline__ float sigmoid_f(float x) {
    if (x >= 17.0f) return 1.0f;
    if (x <= -89.0f) return 0.0f;
    return 1.0f / (1.0f + expf(-x));
}

__device__ __forceinline__ float softplus_f(float x) { return x > 20.0f ? x : log1pf(expf(x)); }

__device__ float warp_sum(float v) {
    for (int o = 16; o > 0; o >>= 1) v += __shfl_xor_sync(0xffffffff, v, o);
    return v;
}

__device__ float warp_max(float v) {
    for (int o = 16; o > 0; o >>= 1) v = fmaxf(v, __shfl_xor_sync(0xffffffff, v, o));
    return v;
}


// The token tables (embedding and token choice) in shared memory.
struct Tokens {
    unsigned kind_dim[MAX_KINDS], kind_nf[MAX_KINDS], kind_off[MAX_KINDS], kind_fields[MAX_KINDS * KIND_FIELDS];
    unsigned field_size[MAX_FIELDS], field_dim[MAX_FIELDS], field_best[MAX_FIELDS];
    float field_score[MAX_FIELDS];
};

// Copies the token tables from I (all threads; the caller synchronises).
__device__ void load_tokens(Tokens &tk, const Dims &d, const unsigned *I) {
    for (unsigned i = threadIdx.x; i < d.kinds; i += THREADS) {
        tk.kind_dim[i] = I[d.kind_dim + i];
        tk.kind_nf[i] = I[d.kind_nfields + i];
        tk.kind_off[i] = I[d.kind_offset + i];
    }
    for (unsigned i = threadIdx.x; i < d.kinds * KIND_FIELDS; i += THREADS) tk.kind_fields[i] = I[d.kind_fields + i];
    for (unsigned i = threadIdx.x; i < d.fields; i += THREADS) {
        tk.field_size[i] = I[d.field_size + i];
        tk.field_dim[i] = I[d.field_dim + i];
    }
}

// Each field's best value (the first maximum) and its score, one half-warp per field (the
// 0.8b chip has 33 fields, all of at most 32 values: one round for 24 warps, where a warp
// a field took two), into tk.field_best and tk.field_score (the caller synchronises).
__device__ void best_field_values(const float *hidden, const Dims &d, Tokens &tk) {
    unsigned w = threadIdx.x / 32, lane = threadIdx.x % 32, sub = lane % 16;
#pragma unroll 1
    for (unsigned f0 = 2 * w; f0 < d.fields; f0 += 2 * WARPS) {
        unsigned f = f0 + lane / 16;
        bool have = f < d.fields;
        const float *h = hidden + d.chip_base + (have ? tk.field_dim[f] : 0);
        float bs = -__int_as_float(0x7f800000);
        unsigned bv = 0xffffffffu, size = have ? tk.field_size[f] : 0;
        for (unsigned v = sub; v < size; v += 16)
            if (bv == 0xffffffffu || h[v] > bs) {
                bs = h[v];
                bv = v;
            }
        // (xor over 8 … 1 stays within each half of the warp)
        for (int o = 8; o > 0; o >>= 1) {
            float os = __shfl_xor_sync(0xffffffff, bs, o);
            unsigned ov = __shfl_xor_sync(0xffffffff, bv, o);
            if (ov != 0xffffffffu && (bv == 0xffffffffu || os > bs || (os == bs && ov < bv))) {
                bs = os;
                bv = ov;
            }
        }
        if (have && sub == 0) {
            tk.field_score[f] = bs;
            tk.field_best[f] = bv;
        }
    }
}
