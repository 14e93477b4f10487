// inband: the chip layers' forward pass on the GPU, driven by the activation's nonzeros.
//
// The chip's residual is one-hot and level codes: on a pass about 30 of its thousands of
// dims are nonzero, ten of them the anchors, which never change. So a projection is not
// computed row by row; instead
//   - the anchors' share of every row (its "bias") is computed once, on the host, with the
//     input RMSNorm's factor that the anchors pin (the kernel checks the pin on every
//     norm: a non-anchor square of half an ulp of the anchors' sum or more stops the run
//     with an error instead of computing with the wrong factor);
//   - the residual's other dims are listed as they are written (the embedding's one-hots,
//     every out_proj and down entry added), so only listed dims can be nonzero and no
//     pass scans the residual; each nonzero listed dim's column of weights (CSC) is added
//     into the rows it feeds, the columns cut into 32-entry chunks, listed once in a
//     table in shared memory and spread over the warps (where shared memory holds them,
//     the input projections' and gate/up's column starts are resident: the 0.8b shape);
//   - rows are read where they are used, as bias + scattered sum: a conv channel no signal
//     reached outputs its precomputed constant (only channels with delayed taps keep a
//     conv state), and so does a value column's z gate (silu of z's anchors' share); a
//     head whose q and k nothing reached, with decay 1, does nothing, nor does one that
//     neither writes (beta 0) nor reads (a read the chip selects only on some passes, and
//     no signal reached its z); q is computed only for a read, k only for a write, and
//     taken normalised from the host where nothing reached them and they are constant
//     (`pc_base`, the latch); a neuron no signal can reach is constant, its share of down
//     precomputed, and one no signal reached on this pass is at rest (adds nothing), its
//     record not loaded;
//   - a layer whose heads do nothing while their input rows are zero (the ROM's, the
//     memory ports') is left out on a pass where no listed dim has a column in its input
//     projections: its input scatter and heads phase with their barriers (each dim's
//     `readers` bits, gathered as dims are listed, make that one load).
// Sums are added in another order than the CPU's. Most of the chip's terms are integers
// inside fp32's exact range, but not all: silu's tails leave small non-integer terms (the
// residual's last bits can differ from the CPU's; the token choice has margins), and a
// paired step neuron's halves are large (2c - 0.5 and -(2c - 1.5)): a running sum of them
// stays exact only while the halves are added near each other, as here (consecutive
// neurons, adjacent lanes; summed apart, in different blocks of a cluster, the multiplier
// went wrong). The token streams are checked against the CPU engine's.
//
// A value head's work (its q/k normalisation, delta rule, read, gated norm and its
// out_proj columns) is one warp's, with no block barrier; a SwiGLU neuron that fires adds
// its down column into the residual from the thread that computed it (a column longer
// than WIDE_COLUMN by that thread's whole warp; in the last layer, whose field outputs
// fire many short columns on every pass, through the chunk table). A layer's block
// barriers: each scatter's chunks listed and added (input projections, gate/up), the
// delayed conv done (where a layer has one), the heads done, the MLP done (and the last
// layer's down chunks listed). The tables a head's chain reads sit in shared memory for
// the whole launch (its table entry and parameters; a 4-bit palette code per conv channel
// and per value column, the host's `Resident`); every other table a step needs is one
// load (a neuron's record with its down column's first entries, a delayed channel's
// record, an out_proj column's ends).
//
// What bounds it (H200, measured with a pointer chase and ncu): a dependent load costs
// ~290 cycles from L2 and ~375 through L1 when it misses, a 1024-thread barrier 76; the
// kernel issued ~300 k warp instructions a pass (~170 k since the scatters list their
// chunks once) and waits mostly at barriers for the warp with the longest chain: a value
// head's, not for instruction fetches. The profile times warp 0's head by stage: its two
// longest stages are a round of table loads then silus (q's channels, 0.9–2.8 k cycles;
// the z gate, ~2.1 k), the other eleven 0.1–1 k each. The input projections' scatter is
// bound by its shared-memory adds, ~3.5–5 cycles an entry for the block; since the chip
// made its addresses single signals (~1,000 entries a pass, from ~8,500) each layer's
// scatter costs about its two barriers and rounds of loads (1.6–3.8 k cycles). By phase
// (ncu's stall samples of strings' run, summed between barriers by scripts/ncu-phases.py,
// H100, with the layers left out): heads 32 %, MLPs 20 %, gate/up's listing 13 % and its
// adds with the input rows' zeroing 12 %, the input scatter's listing 10 % and adds 4 %.
//
// Measured, not kept: the heads and the scatter as calls instead of inlined (smaller code,
// but slower: 7,300 and 7,800 passes/s against 8,600); out_proj and down as block-wide
// scatters of listed head outputs and firing neurons (fewer load chains, two more
// barriers and 50 % more instructions: 7,500 against 8,300); the input scatters with a
// warp per listed dim (7,700); q's and k's channel tables loaded one after the other
// (8,300 against 8,700); the state rows a head reads or writes loaded four or eight at a
// time (register spills: 9,000 against 9,500); each warp's run of chunks loaded four at a
// time (9,000); a value head split over two warps, each with half the channels and value
// columns, handing over q, k and the read through shared memory (−1 %: a head's chain is
// thirteen dependent stages of ~0.1–3 k cycles, set by their latency, not by a lane's
// share of the work); the channel outputs without branches (every silu computed: −6 %);
// down and out_proj columns added by the whole warp, one column at a time (−22 %); a
// channel's table loaded only where its scattered sum is nonzero, from per-head masks of
// the channels that are then ±0 (−3 %: the loads waited on a shared read first); a head's
// value-channel, z-gate and out_proj-start tables prefetched into L1 at its entry (−3 %:
// every head's chain grew by 1–2 k cycles, in the layers with many heads too, so a head's
// stages are bound by the issue of its memory instructions as much as by their latency); a
// wide down column's entries loaded four at a time (−0.2 to +0.3 %, noise); the input rows
// zeroed with float4 stores (−0.0 to −0.5 %); a head's z-gate table and out_proj column
// ends loaded into registers as soon as it may read (−6 to −8 %; either alone −2 to −6 %:
// spills, and every head's chain 2 k cycles longer); WIDE_COLUMN 4 or 8 instead of 16
// (−0.5 % and +0.1 to +0.7 %, noise). Measured at the block's shape of the time: the
// tables loaded past L1 (`__ldcg`: −0.4 %), so L1 misses are not what the chains wait
// for; the warps without a head prefetching the MLP's neuron records and the next
// scatters' columns into L1 during the heads (−2.6 %: the MLP and scatters were not
// shorter, the heads longer); q's tables then k's (more spills: −0.4 %); the z gate and
// out_proj ends loaded before the delta rule at 512 and 768 threads, where they do not
// spill (no gain); only the input rows a scatter added into zeroed, by a bitmap (−3 %:
// the rows of one word zeroed one after another; the kernel now zeroes them from the
// input chunks themselves, a lane an entry). The next token is no guess to run a
// pass ahead on: in hello, strings and int64 the token that followed the same one (or
// the same two, three) last time comes again 25–43 % of the time. At 768 threads: the warps
// without a head (or without a neuron) adding the gate/up (or the next layer's input)
// columns of the dims the phase cannot write, leaving the rest to a listing after its
// barrier (−2.6 to −3.6 %: fewer warps do that work slower than the whole block, and the
// dims a phase has just written carry most of it); the input rows zeroed after the MLP's
// neurons (+0.0 to +0.2 %, noise); a thread's neurons' records loaded two or four rounds
// ahead (spills: −2.4 and −7 %). With the column starts resident: each warp adding its
// own dims' first four chunks itself, the rest through the table after a barrier, which
// is then left out where no chunk went there (−3.5 %; two chunks −6 %: 47 of a pass's
// ~275 chunks still went through the table, after the warps' own round, and a warp's
// listing grew); a warp's chunks loaded four (or two) at a time before their adds
// (−1.7 %: a scatter's time is mostly its listing phase, 1.2-3.5 k cycles, of which the
// listing warps' own steps are ~1 k; the adds after it are 0.4-1.5 k). Then, together
// (−2.3 to −2.8 %, and no better with any one of them left out; the code grew from 114
// to 156 KB): a row that one entry alone adds into in its phase added with a plain
// read-modify-write instead of the shared-memory atomic (a compare-and-swap loop), a
// warp's chunks placed by a vote where no lane has more than one, and a head with
// constant q adding its last read's outputs again while it has not written and no signal
// reaches its z. On the H100, beside the neurons' records: a value column's first out_proj
// entry in one 16-byte load with its column's ends (+0.0 to +0.5 %, noise); q's and k's
// first four nonzero state rows asked of L1 (`prefetch.global.L1`) as soon as q and k are
// known (−2.5 to −2.9 %); gate/up and the MLP of layers 7 and 8 left out, by two spare
// readers bits, where no listed dim reaches their gate/up (−0.1 to −0.7 %). On the H100,
// beside silu's tail without the division (chip_common.cuh): a head's key head and its
// beta at rest made once a launch (−0.2 to +0.0 %); its reached check's loads or-ed
// without branches and a quiet head's channel tables loaded only for the blocks of 32
// channels a signal reached (+1.1 % alone; with the lean silu 1.1 % slower than it
// alone); one silu a round over a warp's pending arguments (−1.9 to −2.8 %); each scatter
// in one phase, a lane per listed dim, no chunk table (two barriers fewer a layer, but
// its listing longer: −6.2 to −7.4 %); the gate/up scatter setting a bit per neuron it
// reaches and the MLP visiting those instead of scanning every neuron's rows (the bits'
// zeroing costs more than the scan: −4.6 to −5.1 %). On the H100, beside the kernel of
// 9f7b316: silu by the special function unit (`__expf` and a reciprocal instead of expf
// and the IEEE division between -89 and 17): −0.2 to −0.4 %, the profile as long, and
// the token streams of hello, strings and int64 differ from the CPU engine's (their pass
// counts do not): an exponential tens of ulps off is not the math the chip's margins
// were made for. On the H100, beside the kernel of abf0de1: each warp's reached neurons
// queued in shared memory (in its slice of the chunk table) and fired a lane each, one
// round of record loads where they fell in several of its rounds (−4.0 to −4.6 %: every
// layer's MLP grew by ~0.5 k cycles, layers with one round too: the queue's store, warp
// sync and load are steps on the chain of every warp that fires a neuron); the listing as
// one called function for both matrices, instead of inlined twice (code 115 KB against
// 118 KB: −4.3 to −5.2 %, each listing 0.2-0.3 k cycles longer). On the H100, beside the
// kernel of be509b1: gate/up's chunks of the dims listed before the heads listed during
// them by the warps without a head, each chunk holding its dim (its value read where it is
// added, since the heads may add into it), and the few dims the heads listed added after
// them a warp each, with no listing phase (−3.1 to −3.9 %: the listed dims that are zero,
// which a listing skips, went in too, 297 chunks a pass against 218, and the adds' phase
// grew by the new dims' column lookups and a second round of loads by more than the
// listing's phase it saved); the input rows zeroed in float4s during the listing
// (+0.0 %); each reached neuron's record asked of L1 (`prefetch.global.L1`) as gate/up's
// entries are added (−0.6 %); the z gate's silus computed together where a lane needs one
// (+0.1 to +0.3 %, noise); the delayed conv two channels a thread with their loads issued
// together (+0.0 %). On the H100, beside the kernel of 802e474: a firing neuron's two
// first down entries added before either is marked (−0.3 to +0.3 %, noise). Compiled here
// and not run, for their code: the listings' overflow and a delayed channel's rank as
// calls instead of inlined (the calls' register saves made the code larger, with spills).
// On the H100, beside a long column placed by the whole warp: a warp's lanes adding their
// first down entries into one residual row summed in lane order (`__match_any_sync`) and
// added by one atomic (−2.3 to −2.9 %: its vote, match and shuffles are steps on the
// chain of every warp that fires a neuron, where they save a few CAS rounds); that, and
// each placed chunk's entries asked of L1 (`prefetch.global.L1`) as it is placed (−3.3 to
// −4.1 % more). On the H100, beside the kernel of 260da70: OWN_CHUNKS 1, 2 and 8 (−2.5 to
// −5.1 %, −0.3 to −0.6 %, the same); gate/up pulled where a layer's rows are short, each
// signal neuron's gate and up entries in a row of their own that one thread sums (no
// listing, no barrier after it, no adds' round; layer 0, rows of at most 8 entries: the
// same, its pull as long as the listing and adds it replaced, for it reads every entry of
// every neuron; with layer 1's too, rows of up to 18 entries, −2.7 to −3.0 %). On the
// H100, beside the kernel of 7d8cd59: a value head shared by two warps where warps are to
// spare, one running its key's side (k, the delta rule), the other its query's (q, the z
// gate, the read after a named barrier with the first), and the writer of a head that
// does not write computing the z gate for the reader (−3.3 to −3.6 % and −5.5 to −6.0 %;
// at 1,024 threads −9.5 to −12.9 %): layer 3's heads phase grew from 11.1 k to 12.5 k
// cycles a pass and layer 1's from 8.3 k to 9.8 k, so with more warps at work the heads'
// stages wait on the issue of their instructions more than they gain side by side. On the
// H100, beside the kernel of 0acc2dc: a head's q and k reductions only where computed,
// sqrt(dk) once a launch and the gated norm's mean as a multiply (−0.1 %, noise), and
// with q's x / sqrt(dk) as a reciprocal and one correction where that is exact (−0.8 %).
// On the H100, beside the kernel of 7d050e4: a head's layer fields (its codes, palette, z
// rows, out_proj starts) read once at its entry, not where used (34 fewer shared loads in
// the code: −0.1 to −1.0 %; the profile's listings and empty conv phases grew by 20-330
// cycles a layer, so the change moved code more than it took work); a listing warp's chunk
// slots counted by a ballot per bit of its lanes' chunk counts and one atomic a warp, not
// an atomic a lane (−4.3 to −5.3 %); the rare silus between the tails with one copy of
// silu_fast's code, their arguments through local memory (104 KB of code against 108:
// −1.6 to −2.0 %; with add_entries an entry at a time too, 97 KB, +0.1 to +0.5 %: less
// than that change alone). Emulated, not run: the MLP's scan left out where gate/up placed
// no chunk (only layers 6-8 were ever at rest, on 16-35 % of passes). On the H100, beside
// the kernel of a5b4841 (102 KB of code): the rare silus of a head's channels and z gate
// through one copy of silu_fast, a loop not unrolled picking its argument and output by
// selects (98 KB: −0.2 to −0.3 %); that, and a firing neuron's record entries and the rest
// of its column in one loop (96 KB: −0.1 to −0.2 %); that, and over_rows' loop over its
// 32-row blocks not unrolled, each block's vector picked by selects (90 KB: −1.0 to
// −1.2 %); all three (88 KB: −0.7 to −0.9 %); this kernel at 1,024 threads, where it no
// longer spills (−3.1 to −3.4 %). Less code is not a gain of its own at this size. On the
// H100, beside the kernel of 8dad6e9: a head's channel ranges whose codes are all one (q's
// in 103 of the 0.8b chip's 111 heads, k's in 91), found once a launch, read by one code
// and one palette load instead of a lane's four (−1.7 to −2.0 %); the heads whose q and k
// are constant, decay 1 and read not selected (the latch, the pc's row and offset) keeping
// their last read's out_proj adds in S and adding them again on a pass where they do not
// write and no signal reaches their q, k or z (−0.2 to −0.9 %: in the profiles layer 0's
// heads phase fell from ~6.8 k to 4.2 k cycles a pass, but every head's out_proj step was
// rewritten and layer 3's heads phase grew from ~10.6 k to 11.2 k, and the latch, which
// writes on many passes, gained nothing). Built with -DKEEP_READS, not yet run on a GPU:
// the same with the other heads' out_proj loop as before, for the heads the host's
// `keeps_reads` names (the 0.8b chip's pc row and offset heads in layer 0; its latch's
// read is one the chip selects, so it keeps none). Without the option the kernel's code
// is the one before it but for one mask's immediate (nvdisasm).

// The phases of the -DPROFILE cycle counts, per layer (MARK in chip_common.cuh, indexed
// by the layer l being run).
#define PHASES 8
#define MAX_LAYERS 16
// Phase i's cycles go to the layer l being run (the last row: embedding and token choice).
#define PROF_SLOT(i) (l * PHASES + (i))

#include "chip_common.cuh"


// One matrix in compressed sparse columns, without the anchors' columns: column c's
// entries are E[I[start + c] .. I[start + c + 1]), each (row, weight bits).
struct Csc {
    unsigned start;
};

// Per layer offsets (I for indices, W for floats, S for state).
struct Layer {
    Csc xin;              // rows: conv channel c at c, z at z_at, b at b_at, a at a_at
    unsigned codes, zcodes; // resident words: a 4-bit palette code (eight a word) per conv
                            // channel, per value column

    unsigned n_delayed, delayed, taps, conv_state; // channels whose conv reads earlier passes:
                          // I: {channel, its anchors' share} each; W: their four taps each
    unsigned z_at, b_at, a_at;
    unsigned palette;     // resident float4s: PALETTE channel tables {silu(w3 * bias), w3, bias,
                          // 0}, then PALETTE z gates {silu(z's anchors' share), that share,
                          // norm gain, 1 where the value column has out_proj entries}
    unsigned qk_const;    // W: per key head its q then its k, normalised, while nothing reaches
                          // them (used where the head's entry has bit 19)
    unsigned head;        // W: per value head {A_log, dt_bias, b's anchor share, a's}
    unsigned n_heads, heads; // I: the heads whose q and k can be nonzero: the value head
                             // in bits 0-7; bits 8-15: 1 + its kept read's slot, 0 if
                             // none; bit 16: q and k are zero unless a signal reaches
                             // them; bit 17: decay is 1;
                             // bit 18: its read adds nothing unless a signal reaches z;
                             // bit 19: q and k at qk_const while nothing reaches them;
                             // bits 20 up: its key head
    Csc out;              // out_proj: columns are head outputs, rows residual dims
    Csc gate_up;          // gate rows 0..n_neur, up rows n_neur..2 n_neur
    unsigned n_neur, n_signal; // the neurons a signal can reach (the rest are constant), the
                               // first n_signal of the compact order
    unsigned n_awake;     // how many of them add something at rest (no signal reached them)
    unsigned neuron;      // I: each {gate's anchor share, up's, its down column's start, end},
                          // then the column's first INLINE_DOWN entries (zeros past its end)
    unsigned n_fixed, fixed_rows, fixed_vals; // the constant neurons' share of down, per residual row
    Csc down;             // columns are the neurons in that order, rows residual dims
    unsigned rec;
    unsigned xin_cols, gate_up_cols; // resident words, where `d.resident_words` reaches them:
                                     // xin's and gate/up's column starts (`column_of`)
};

// Error codes the kernel leaves in state[3].
#define ERR_NORM_UNPINNED 1u
#define ERR_TOO_MANY_NONZEROS 2u

// Residual dims a pass may list (a pass has about 30 nonzero).
#define NZ_CAP 2048

// The kernel runs more code per pass than the SM's instruction cache holds if every
// helper is inlined at every use: phases that are cheap in instructions then wait on
// instruction fetches (measured: the token choice took 76 k cycles a pass, 5 k after).
// So the pure-arithmetic helper silu is a call, one copy, in the delayed conv (the heads
// inline it and skip the zeros' divisions and gates: 3 % faster; the MLP's neurons inline
// it too: its chain is every layer's, and the call cost 0.5 %). Every silu here is
// silu_fast (chip_common.cuh): silu_f's bits for all 2^32 inputs (checked on the GPU),
// without the IEEE division's slow-path branch after each, so a lane's silus can overlap
// (measured on the H100: +0.7 to +0.9 % passes/s).
__device__ __noinline__ float silu_call(float x) { return silu_fast(x); }

// The helpers that load memory are inlined: their loads issue together with the caller's,
// where a call would wait for each (measured: 15 % slower as calls).
#define HELPER __forceinline__

#define FULL 0xffffffffu

// The input projections' rows sit in shared memory with a gap after every 128: row r at
// spread(r). A signal's column adds into the same channel of many heads (rows 128
// apart), which without the gaps lie in one bank; a shared-memory float add is a
// compare-and-swap loop, and a chunk's 32 adds into one bank went one at a time
// (measured: such a chunk cost ~140 cycles of a pass, one into the gate/up rows ~40;
// with the gaps layer 1's scatter took 5.0 k cycles instead of 6.5 k, layers 5-8's
// ~0.7 k less each). Gaps in the gate/up rows too gained nothing (measured).
__device__ __forceinline__ unsigned spread(unsigned r) { return r + (r >> 7); }
#define SPREAD_ROWS(n) ((n) + ((n) >> 7) + 1)

// The residual's nonzero dims past the anchors are kept as a list, grown as dims are
// written (no scan of the residual): `dirty` has a bit per dim that is listed. Where
// shared memory holds them (the 0.8b and 4b shapes), `readers` has a byte per dim, made
// by the host (`gateable_readers`): bit k set where the k-th of the layers that may be
// left out (at most 8) has a column of that dim in its input projections; `reach`
// gathers the bits of the dims listed this pass, so whether any listed dim reaches such a
// layer is one load instead of a scan of the list. (A byte, not a bit per layer: with 16
// bits a dim the 0.8b block's shared memory was 1.3 KB short.)
struct Listing {
    unsigned *dirty, *cols, *count, *flag;
    const unsigned char *readers; // where not resident, one zero byte: dim r's bits are
    unsigned readers_mask;        // readers[r & readers_mask] (no branch at every mark)
    unsigned *reach;
};

// Lists residual dim r, once per pass, as it is written. (Its readers byte is loaded
// beside the dirty word, and or-ed into `reach` without reading it first: an atomic whose
// result is unused waits for nothing. Two steps fewer on the chain of each write of a
// dim not yet listed.)
__device__ __forceinline__ void mark(const Listing &z, unsigned r) {
    unsigned bit = 1u << (r % 32);
    unsigned m = z.readers[r & z.readers_mask];
    if (z.dirty[r / 32] & bit) return;
    if (atomicOr(z.dirty + r / 32, bit) & bit) return;
    if (m) atomicOr(z.reach, m);
    unsigned at = atomicAdd(z.count, 1u);
    if (at < NZ_CAP) z.cols[at] = r;
    else *z.flag = ERR_TOO_MANY_NONZEROS;
}

// out[row] += weight * x for every entry of the listed dims' columns, x the normed input
// (dim value times the pinned factor), in two steps with a block barrier between.
//
// list_chunks: warp w takes listed dims 32 w .. 32 w + 31 (and every WARPS-th such batch
// after; a layer lists ~90 dims, so most warps take none), skips the zero ones, finds
// their columns (`column_of`: in shared memory at the 0.8b shape) and appends their
// 32-entry chunks {from << 6 | length, x} to a table in shared memory. It also checks
// the pin: every listed square below half an ulp of the anchors' sum (only listed dims
// besides the anchors can be nonzero). Chunks past the table's end are added by the lane
// that found them (slower, never wrong).
//
// run_chunks: warp w takes chunks w, w + WARPS, …: one entry per lane.
//
// Listing once for the block instead of once in every warp (each warp used to scan the
// whole list) cut the kernel's instructions by 43 % (ncu, hello).
#define CHUNK_CAP 1024

// Writes the chunk of entries E[f, f + l) (l <= 32) times x into the chunk table's slot
// as {f << 6 | l, x}; past the table's end it goes to overflow(f, l, x) instead, for the
// lane to add itself (slower, never wrong).
template <typename Overflow>
__device__ __forceinline__ void place_chunk(unsigned slot, unsigned f, unsigned l, float x, uint2 *table,
                                            Overflow overflow) {
    if (slot < CHUNK_CAP) table[slot] = make_uint2((f << 6) | l, __float_as_uint(x));
    else overflow(f, l, x);
}

// Writes entries E[from, from + len) times x into the chunk table from slot `at` on, as
// 32-entry chunks (`place_chunk`).
template <typename Overflow>
__device__ HELPER void place_chunks(unsigned at, unsigned from, unsigned len, float x, uint2 *table,
                                    Overflow overflow) {
    for (unsigned k = 0, chunks = (len + 31) / 32; k < chunks; k++)
        place_chunk(at + k, from + 32 * k, min(32u, len - 32 * k), x, table, overflow);
}

// The sum of x over the warp's lanes up to this one (itself included), and over the whole
// warp in `total`. Every lane of the warp calls it.
__device__ __forceinline__ unsigned warp_inclusive_sum(unsigned x, unsigned &total) {
    unsigned lane = threadIdx.x % 32;
#pragma unroll
    for (unsigned o = 1; o < 32; o <<= 1) {
        unsigned y = __shfl_up_sync(FULL, x, o);
        if (lane >= o) x += y;
    }
    total = __shfl_sync(FULL, x, 31);
    return x;
}

// Appends each lane's entries E[from, from + len) times x to the chunk table as 32-entry
// chunks (`place_chunks`; a prefix sum over the warp, one atomic a warp). Every lane of the
// warp calls it.
template <typename Overflow>
__device__ HELPER void append_chunks(unsigned from, unsigned len, float x, uint2 *table, unsigned *count,
                                     Overflow overflow) {
    unsigned lane = threadIdx.x % 32;
    unsigned chunks = (len + 31) / 32, total, at = 0;
    const unsigned incl = warp_inclusive_sum(chunks, total);
    if (total == 0) return;
    if (lane == 0) at = atomicAdd(count, total);
    at = __shfl_sync(FULL, at, 0) + incl - chunks;
    place_chunks(at, from, len, x, table, overflow);
}

// As append_chunks, for the listings, where few lanes have chunks (a layer lists ~90 dims,
// most with no column in its matrix): each lane places its own with its own shared atomic
// on the count, with no prefix sum over the warp. The lanes' atomics on the word are
// serialised, but the listing's chain loses 8 of its ~15 dependent steps (measured on the
// H100: +3.6 to +4.1 % passes/s; the last layer's down columns, 32 lanes with a chunk
// each, keep the warp's prefix sum).
//
// A lane places up to OWN_CHUNKS chunks itself; a longer column's chunks are placed by the
// whole warp, a chunk a lane, one such column at a time. (A listed dim can feed most of a
// layer's neurons: layer 2's decoder inputs have columns of ~40 chunks, and one lane
// placing them one after another was most of the listing's time: per warp, the lookups
// ~0.6 k cycles, the placing 0.7-3 k. Measured on the H100: +3.2 to +3.7 % passes/s.)
// Every lane of the warp calls it.
#define OWN_CHUNKS 4u
template <typename Overflow>
__device__ HELPER void append_own_chunks(unsigned from, unsigned len, float x, uint2 *table, unsigned *count,
                                         Overflow overflow) {
    unsigned lane = threadIdx.x % 32, chunks = (len + 31) / 32, at = 0;
    if (chunks != 0) at = atomicAdd(count, chunks);
    if (chunks <= OWN_CHUNKS) place_chunks(at, from, len, x, table, overflow);
    for (unsigned m = __ballot_sync(FULL, chunks > OWN_CHUNKS); m; m &= m - 1) {
        unsigned b = __ffs(m) - 1;
        unsigned at_b = __shfl_sync(FULL, at, b), from_b = __shfl_sync(FULL, from, b),
                 len_b = __shfl_sync(FULL, len, b);
        float x_b = __shfl_sync(FULL, x, b);
        for (unsigned k = lane; 32 * k < len_b; k += 32)
            place_chunk(at_b + k, from_b + 32 * k, min(32u, len_b - 32 * k), x_b, table, overflow);
    }
}

// Where column c of matrix m starts (from) and how many entries it has (len): from the
// resident copy of its starts where shared memory holds it (`cols` below
// `d.resident_words`; the host's `resident_columns`: a bitmap of the columns with entries,
// the count before each word, their starts in order), else from L2. ncu sampled the
// scatters' waits on these starts most: each scatter waited a round trip to L2 for them
// before its entries' round trip.
__device__ HELPER void column_of(const Csc &m, unsigned cols, const unsigned *__restrict__ I, const unsigned *res,
                                 const Dims &d, unsigned c, unsigned &from, unsigned &len) {
    if (cols < d.resident_words) {
        const unsigned words = (d.width + 31) / 32, *r = res + cols;
        unsigned word = r[c / 32], bit = 1u << (c % 32);
        unsigned k = r[words + c / 32] + __popc(word & (bit - 1u));
        from = len = 0;
        if (word & bit) {
            from = r[2 * words + k];
            len = r[2 * words + k + 1] - from;
        }
    } else {
        from = __ldg(I + m.start + c);
        len = __ldg(I + m.start + c + 1) - from;
    }
}

// How many warps list_chunks gives a batch of the n listed dims to (every warp where this
// is WARPS or more); the others are free during a listing.
__device__ __forceinline__ unsigned warps_with_batches(unsigned n) { return (n + 31) / 32; }

template <bool SPREAD>
__device__ HELPER void list_chunks(const Csc &m, unsigned m_cols, const unsigned *__restrict__ I,
                                   const uint2 *__restrict__ E, const unsigned *res, const unsigned *cols, unsigned n,
                                   const float *hidden, const Dims &d, unsigned *flag, uint2 *table, unsigned *count,
                                   float *out) {
    unsigned w = threadIdx.x / 32, lane = threadIdx.x % 32;
    for (unsigned batch = 32 * w; batch < n; batch += 32 * WARPS) {
        unsigned t = batch + lane, from = 0, len = 0;
        float x = 0.0f;
        if (t < n) {
            unsigned c = cols[t];
            float v = hidden[c];
            // The column's lookup does not wait for the value's load and test (one step
            // fewer on the listing's chain: +0.6 to +0.7 % passes/s, H100); a zero dim
            // then adds no chunk.
            column_of(m, m_cols, I, res, d, c, from, len);
            if (!(v * v + v * v < d.anchor_ulp)) *flag = ERR_NORM_UNPINNED;
            x = v * d.norm_inv;
            if (v == 0.0f) len = 0;
        }
        append_own_chunks(from, len, x, table, count, [&](unsigned f, unsigned l, float x) {
            #pragma unroll 1
            for (unsigned i = 0; i < l; i++) {
                uint2 e = __ldg(E + f + i);
                atomicAdd(out + (SPREAD ? spread(e.x) : e.x), __uint_as_float(e.y) * x);
            }
        });
    }
}

// (With a listing, the rows added into are residual dims, listed as they are written.)
template <bool SPREAD>
__device__ HELPER void run_chunks(const uint2 *__restrict__ E, const uint2 *table, unsigned count, float *out,
                                  const Listing *z = nullptr) {
    unsigned w = threadIdx.x / 32, lane = threadIdx.x % 32;
    count = min(count, (unsigned)CHUNK_CAP);
    for (unsigned g = w; g < count; g += WARPS) {
        uint2 chunk = table[g];
        // Lanes take the chunk's entries rotated by the chunk, so warps adding into the
        // same rows at once (columns of one neuron block) hit different addresses: a
        // shared-memory float add is a compare-and-swap loop on sm_90.
        unsigned k = (lane + g) & 31;
        if (k < (chunk.x & 63)) {
            uint2 e = __ldg(E + (chunk.x >> 6) + k);
            atomicAdd(out + (SPREAD ? spread(e.x) : e.x), __uint_as_float(e.y) * __uint_as_float(chunk.y));
            if (z) mark(*z, e.x);
        }
    }
}

// The entries E[from..to), each times x, added into the residual (one thread), an entry at
// a time. Few columns have entries past a neuron's record (INLINE_DOWN below), and the last
// layer's many go through the chunk table; loaded four at a time, its two inlined copies
// (a neuron's column, a down chunk past the table) made the kernel 6 KB larger (of ncu's
// samples of the MLP phase's warps not at its barrier, 41 % waited for an instruction
// fetch). Measured on the H100: +0.3 to +0.7 % passes/s beside the kernel before it, 102 KB
// of code against 108; inside the spliced checkpoint, in a later call, within 0.2 % of that
// kernel's rows: the same speed in less code.
__device__ HELPER void add_entries(const uint2 *__restrict__ E, unsigned from, unsigned to, float x, float *hidden,
                                   const Listing &z) {
#pragma unroll 1
    for (unsigned k = from; k < to; k++) {
        const uint2 e = __ldg(E + k);
        atomicAdd(hidden + e.x, __uint_as_float(e.y) * x);
        mark(z, e.x);
    }
}

// The down entries a neuron's record holds (the host's INLINE_DOWN): the chip's columns
// have one or two entries but in its last layers, so a neuron that fires adds its column
// from the record's load, without a second round trip to L2 for the entries (measured on
// the H100 with the listings' own-lane atomics: +6.2 to +6.7 % passes/s together, those
// alone +3.6 to +4.1 %).
#define INLINE_DOWN 2u

// A neuron's first min(len, INLINE_DOWN) down entries {row, weight bits} (its record's
// second half), each times a, added into the residual.
__device__ __forceinline__ void add_first_entries(uint4 first, unsigned len, float a, float *hidden,
                                                  const Listing &z) {
    if (len > 0) {
        atomicAdd(hidden + first.x, __uint_as_float(first.y) * a);
        mark(z, first.x);
    }
    if (len > 1) {
        atomicAdd(hidden + first.z, __uint_as_float(first.w) * a);
        mark(z, first.z);
    }
}

// A down column longer than this is added by the whole warp of the neuron that fired
// (the 0.8b chip's last layer has a neuron with 301 entries that fires on every pass;
// its one thread added them four at a time). Measured with the neurons' loop run per
// warp: +0.5 % passes/s; layer 4's MLP 6.4 k -> 5.1 k cycles, layer 10's unchanged.
#define WIDE_COLUMN 16

// The wide columns (down entries [from, to) times a) of the warp's lanes where `wide`,
// one column at a time, a lane per entry. Every lane of the warp calls it.
__device__ HELPER void add_wide_columns(const uint2 *__restrict__ E, bool wide, uint2 down, float a, float *hidden,
                                        const Listing &z) {
    unsigned lane = threadIdx.x % 32;
    for (unsigned m = __ballot_sync(FULL, wide); m; m &= m - 1) {
        unsigned b = __ffs(m) - 1;
        unsigned from = __shfl_sync(FULL, down.x, b), to = __shfl_sync(FULL, down.y, b);
        float x = __shfl_sync(FULL, a, b);
        for (unsigned k = from + lane; k < to; k += 32) {
            uint2 e = __ldg(E + k);
            atomicAdd(hidden + e.x, __uint_as_float(e.y) * x);
            mark(z, e.x);
        }
    }
}

#define KJ (MAX_DV / 32)

// The tables a value head's chain reads sit in shared memory for the whole launch (the
// host's `Resident`): a layer's conv channels take a handful of distinct tables, so each
// channel and each value column is a 4-bit code into the layer's palette. Measured
// before: each of the chain's table stages (q's channels, the z gate) waited on a round
// of L2 loads, 2-3 k cycles of a head's ~10 k. (They take ~52 KB of shared memory at the
// 0.8b shape, ~158 KB a block in all: one block an SM, as the registers already allow at
// 512 threads and more; a batch run with 256 threads or fewer loses its second block.)
#define PALETTE 16
#define DELAYED_CODE 15u

// The 4-bit code of entry i of a layer's codes.
__device__ __forceinline__ unsigned code_of(const unsigned *codes, unsigned i) {
    return (codes[i >> 3] >> (4 * (i & 7))) & 15u;
}

// The conv outputs of NB groups of channels (group g: channels base[g] + lane + 32 j, j <
// KJ, their scattered sums in sum[g][j]; 0 past n[g]), from each channel's palette table
// {silu(w3 * bias), w3, bias, 0}: a delayed channel's output is its input row (the conv
// phase wrote it there); one no signal reached outputs silu(w3 * bias) (precomputed), else
// silu(0 + w3 * (sum + bias)), the CPU's fold with its zero taps dropped. The groups'
// loads issue together (q's and k's: a head's two sides), and the silus' arguments are
// made only where a signal reached some channel of the warp. (Separate table and output
// steps tested every channel's range in each and made every silu argument: measured on the
// H100 with the input rows' zeroing below, +1.5 to +2.9 % passes/s; ncu counted ~15 k of a
// pass's ~44 k heads' warp instructions in them.)
template <unsigned NB>
__device__ HELPER void channel_outs(const Layer &L, const unsigned *res, const float4 *pal, const unsigned (&base)[NB],
                                    const unsigned (&n)[NB], const float (&sum)[NB][KJ], float (&out)[NB][KJ]) {
    unsigned lane = threadIdx.x % 32;
    float w3[NB][KJ], bias[NB][KJ];
    bool hit[NB][KJ], signal = false;
#pragma unroll
    for (unsigned g = 0; g < NB; g++) {
        // (A side not computed, n 0: zeros without a load.)
        if (n[g] == 0) {
#pragma unroll
            for (unsigned j = 0; j < KJ; j++) {
                out[g][j] = 0.0f;
                w3[g][j] = bias[g][j] = 0.0f;
                hit[g][j] = false;
            }
            continue;
        }
#pragma unroll
        for (unsigned j = 0; j < KJ; j++) {
            const bool in = lane + 32 * j < n[g];
            const unsigned code = in ? code_of(res + L.codes, base[g] + lane + 32 * j) : 0u;
            const bool delayed = code == DELAYED_CODE;
            const float4 t = pal[L.palette + (delayed ? 0u : code)];
            out[g][j] = delayed ? sum[g][j] : in ? t.x : 0.0f;
            w3[g][j] = t.y;
            bias[g][j] = t.z;
            hit[g][j] = in & !delayed & (sum[g][j] != 0.0f);
            signal |= hit[g][j];
        }
    }
    if (!__any_sync(FULL, signal)) return;
    float arg[NB][KJ];
    bool between = false;
#pragma unroll
    for (unsigned g = 0; g < NB; g++)
#pragma unroll
        for (unsigned j = 0; j < KJ; j++) {
            arg[g][j] = 0.0f + w3[g][j] * (sum[g][j] + bias[g][j]);
            between |= hit[g][j] & silu_between_tails(arg[g][j]);
        }
    if (__any_sync(FULL, between)) {
#pragma unroll
        for (unsigned g = 0; g < NB; g++)
#pragma unroll
            for (unsigned j = 0; j < KJ; j++)
                if (hit[g][j]) out[g][j] = silu_fast(arg[g][j]);
    } else {
#pragma unroll
        for (unsigned g = 0; g < NB; g++)
#pragma unroll
            for (unsigned j = 0; j < KJ; j++)
                if (hit[g][j]) out[g][j] = silu_tail(arg[g][j]);
    }
}

// Over the nonzero rows r of vec (row lane + 32 j in vec[j] of each lane), in ascending
// order: the read (WRITE false), acc (value columns lane + 32 jj) += vec[r] * st[r]; or
// the delta rule's write (WRITE true), st[r] += vec[r] * acc.
template <bool WRITE>
__device__ __forceinline__ void over_rows(float *st, unsigned dv, const float (&vec)[KJ], float (&acc)[KJ]) {
    unsigned lane = threadIdx.x % 32;
#pragma unroll
    for (unsigned j = 0; j < KJ; j++) {
        unsigned mask = __ballot_sync(FULL, vec[j] != 0.0f);
        while (mask) {
            unsigned b = __ffs(mask) - 1;
            mask &= mask - 1;
            float kv = __shfl_sync(FULL, vec[j], b);
            float *row = st + (32 * j + b) * dv;
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

#ifdef PROFILE
// The counters live in shared memory (chip_passes): in local memory each mark's
// read-modify-write could miss L1 (the tables' loads evict it) and cost an L2 round trip,
// which the first stage marks did, adding ~20 k cycles more to a pass of ~230 k.
// Cycles of each stage of the heads warp 0 runs (one per layer), by layer, in the order
// they run (HEAD_STAGES names them for the printout; q and k are made together, or taken
// from the host where they are constant).
#define HSTAGES 13
#define HEAD_STAGES "entry+reached q+k qk-const sums norms gates v delta-read delta-write z-gate read gated-norm out"
#define HMARK(i)                                                                                                       \
    if (threadIdx.x == 0) {                                                                                            \
        long long t_ = clock64();                                                                                      \
        hprof[i] += t_ - hlast;                                                                                        \
        hlast = t_;                                                                                                    \
    }
#else
#define HMARK(i)
#endif

// A keeping head's out_proj step (`value_head`'s, with its products written down): each
// entry times the column's output o added into the residual; where `record` (q constant,
// no signal at z) the {row, product} pairs kept in the head's slot too, in the order of
// its lanes, and the slot marked as kept. (A copy of the out_proj loop for the few heads
// that keep: in every head's loop, the counting cost the other heads' chains more than
// the kept reads saved, measured on the H100.)
__device__ HELPER void keep_read(bool record, const float (&acc)[KJ], float inv, const float (&gain)[KJ],
                                 const float (&sz)[KJ], const unsigned (&from)[KJ], const unsigned (&to)[KJ],
                                 const Dims &d, const uint2 *__restrict__ E, float *hidden, const Listing &z,
                                 unsigned *kept) {
    unsigned lane = threadIdx.x % 32, mine = 0;
    float o[KJ];
#pragma unroll
    for (unsigned j = 0; j < KJ; j++) {
        o[j] = lane + 32 * j < d.dv && acc[j] != 0.0f ? (gain[j] * (acc[j] * inv)) * sz[j] : 0.0f;
        if (o[j] != 0.0f) mine += to[j] - from[j];
    }
    unsigned total;
    unsigned at = warp_inclusive_sum(mine, total) - mine;
#pragma unroll
    for (unsigned j = 0; j < KJ; j++) {
        if (o[j] == 0.0f) continue;
        for (unsigned k = from[j]; k < to[j]; k++, at++) {
            uint2 e = __ldg(E + k);
            float p = __uint_as_float(e.y) * o[j];
            atomicAdd(hidden + e.x, p);
            mark(z, e.x);
            if (record) {
                kept[2u + 2u * at] = e.x;
                kept[3u + 2u * at] = __float_as_uint(p);
            }
        }
    }
    if (record && lane == 0) kept[0] = total + 1u;
}

// One value head, by one warp: q/k L2 norms of its key head, decay, delta rule, read,
// gated RMSNorm with silu(z), and its out_proj columns added into the residual.
// `entry` is its heads-table entry, `p` its {A_log, dt_bias, b's and a's anchor shares}.
__device__ HELPER void value_head(unsigned entry, float4 p, const Layer &L, const Dims &d, const unsigned *__restrict__ I,
                                  const uint2 *__restrict__ E, const float *__restrict__ W, const unsigned *res,
                                  const float4 *pal, float *S, const float *xs, float *hidden,
                                  const Listing &z
#ifdef PROFILE
                                  , long long *hprof
#endif
) {
    unsigned lane = threadIdx.x % 32;
    unsigned head = entry & 0xffu;
    bool quiet_unless_reached = (entry >> 16) & 1, no_decay = (entry >> 17) & 1, read_unless_z = (entry >> 18) & 1,
         qk_constant = (entry >> 19) & 1;
    unsigned kh = entry >> 20; // its key head, from the host (a division on the chain before)
#ifdef KEEP_READS
    // 1 + its kept read's slot, 0 where the head keeps none (see below).
    const unsigned keep = (entry >> 8) & 0xffu;
#else
    const unsigned keep = 0;
#endif
#ifdef PROFILE
    long long hlast = clock64();
#endif

    // q and k of the key head, L2-normalised (q also scaled by 1/sqrt(dk)), in registers.
    float q[KJ] = {}, k[KJ] = {};
    // q's and k's scattered sums (their channels' inputs, kept for their outputs below).
    float xqk[2][KJ];
    bool reached = false;
#pragma unroll
    for (unsigned j = 0; j < KJ; j++) {
        unsigned e = lane + 32 * j;
        xqk[0][j] = e < d.dk ? xs[spread(kh * d.dk + e)] : 0.0f;
        xqk[1][j] = e < d.dk ? xs[spread(d.key_dim + kh * d.dk + e)] : 0.0f;
        reached |= (xqk[0][j] != 0.0f) | (xqk[1][j] != 0.0f);
    }
    reached = __any_sync(FULL, reached);
    // Nothing reaches q or k, and the decay is 1: the head neither writes nor reads.
    if (quiet_unless_reached && !reached && no_decay) return;
    // Whether the head writes (beta) and whether its read can add anything (a read the
    // chip selects: some signal reaches z); q is needed only for a read, k for a write.
    float b_raw = xs[spread(L.b_at + head)] + p.z;
    float beta = sigmoid_f(b_raw);
    bool writes = beta != 0.0f, reads = true, z_reached = false;
    if (read_unless_z || keep) {
#pragma unroll
        for (unsigned j = 0; j < KJ; j++) {
            unsigned e = lane + 32 * j;
            if (e < d.dv) z_reached |= xs[spread(L.z_at + head * d.dv + e)] != 0.0f;
        }
        z_reached = __any_sync(FULL, z_reached);
        if (read_unless_z) reads = z_reached;
    }
    HMARK(0);
    // The head neither writes nor reads, and the decay is 1.
    if (no_decay && !writes && !reads) return;
    // (Built with -DKEEP_READS.) A head that keeps its reads (the host's `keeps_reads`: q
    // and k constant while nothing reaches them, decay 1, a read the chip does not select)
    // reads a state only its own writes change: on a pass where it does not write and no
    // signal reaches its q, k or z, its gate, read, norm and out_proj products are the
    // last such read's, kept in S as {row, product} pairs: added again, one round of loads
    // instead of the z gate's, the read's and out_proj's.
    unsigned *kept = (unsigned *)S + d.kept_at + (keep ? keep - 1u : 0u) * d.kept_words;
    if (keep && !writes && !reached && !z_reached) {
        const unsigned n = __ldcg(kept), i = 2u + 2u * lane;
        unsigned row = 0, bits = 0;
        if (i + 1u < d.kept_words) {
            row = __ldcg(kept + i);
            bits = __ldcg(kept + i + 1u);
        }
        if (n != 0) {
            #pragma unroll 1
            for (unsigned pair = lane; pair + 1u < n; pair += 32) {
                if (pair >= 32) {
                    row = __ldcg(kept + 2u + 2u * pair);
                    bits = __ldcg(kept + 3u + 2u * pair);
                }
                atomicAdd(hidden + row, __uint_as_float(bits));
                mark(z, row);
            }
            return;
        }
    }
    // q and k are constants while nothing reaches them: normalised on the host.
    bool constant = qk_constant && !reached;
    if (constant) {
        const float *c = W + L.qk_const + kh * 2 * d.dk;
#pragma unroll
        for (unsigned j = 0; j < KJ; j++) {
            unsigned e = lane + 32 * j;
            if (e < d.dk && reads) q[j] = __ldg(c + e);
            if (e < d.dk && writes) k[j] = __ldg(c + d.dk + e);
        }
    } else if (!quiet_unless_reached || reached) {
        // (Zero channels give zeros without a load: the same code either way.)
        const unsigned base[2] = {kh * d.dk, d.key_dim + kh * d.dk}, n[2] = {reads ? d.dk : 0u, writes ? d.dk : 0u};
        float qk[2][KJ];
        channel_outs<2>(L, res, pal, base, n, xqk, qk);
#pragma unroll
        for (unsigned j = 0; j < KJ; j++) {
            q[j] = qk[0][j];
            k[j] = qk[1][j];
        }
        HMARK(1);
    }
    HMARK(2);
    float a_raw = xs[spread(L.a_at + head)] + p.w;
    // sq and sk: only whether they are 0 matters past the norms.
    float sq = 0.0f, sk = 0.0f;
    if (constant) {
        bool any_q = false, any_k = false;
#pragma unroll
        for (unsigned j = 0; j < KJ; j++) {
            any_q |= q[j] != 0.0f;
            any_k |= k[j] != 0.0f;
        }
        sq = __any_sync(FULL, any_q) ? 1.0f : 0.0f;
        sk = __any_sync(FULL, any_k) ? 1.0f : 0.0f;
    } else {
#pragma unroll
        for (unsigned j = 0; j < KJ; j++) {
            sq += q[j] * q[j];
            sk += k[j] * k[j];
        }
        sq = warp_sum(sq);
        sk = warp_sum(sk);
    }
    HMARK(3);
    if (sq != 0.0f && !constant) {
        float inv = 1.0f / sqrtf(sq + 1e-6f), qs = sqrtf((float)d.dk);
#pragma unroll
        for (unsigned j = 0; j < KJ; j++)
            if (q[j] != 0.0f) q[j] = (q[j] * inv) / qs; // (a zero stays the same zero)
    }
    if (sk != 0.0f && !constant) {
        float inv = 1.0f / sqrtf(sk + 1e-6f);
#pragma unroll
        for (unsigned j = 0; j < KJ; j++) k[j] = k[j] * inv;
    }

    HMARK(4);
    float *st = S + L.rec + head * d.dk * d.dv;
    if (!no_decay) {
        float g = -expf(p.x) * softplus_f(a_raw + p.y);
        float decay = expf(g);
        if (decay != 1.0f) {
            for (unsigned i = lane; i < d.dk * d.dv; i += 32) st[i] *= decay;
            __syncwarp();
        }
    }
    HMARK(5);
    // The delta rule over the key's nonzero rows, in ascending row order.
    if (beta != 0.0f && sk != 0.0f) {
        float v[1][KJ], mem[KJ] = {}, xv[1][KJ];
        const unsigned base[1] = {2 * d.key_dim + head * d.dv}, n[1] = {d.dv};
#pragma unroll
        for (unsigned j = 0; j < KJ; j++) xv[0][j] = lane + 32 * j < d.dv ? xs[spread(base[0] + lane + 32 * j)] : 0.0f;
        channel_outs<1>(L, res, pal, base, n, xv, v);
        HMARK(6);
        over_rows<false>(st, d.dv, k, mem);
        HMARK(7);
#pragma unroll
        for (unsigned jj = 0; jj < KJ; jj++) mem[jj] = (v[0][jj] - mem[jj]) * beta;
        over_rows<true>(st, d.dv, k, mem);
        if (keep && lane == 0) *kept = 0; // the state changed: its kept read is stale
    }
    HMARK(8);
    if (sq == 0.0f) return; // the head reads nothing: its output and out_proj share are 0
    // What the gated norm and out_proj need, loaded before the read so the loads overlap.
    float sz[KJ], gain[KJ], has[KJ], arg[KJ];
    bool hit[KJ];
    unsigned from[KJ], to[KJ];
    bool open = false, between = false;
#pragma unroll
    for (unsigned j = 0; j < KJ; j++) {
        unsigned e = lane + 32 * j, c = head * d.dv + e;
        bool in = e < d.dv;
        float4 zt = in ? pal[L.palette + PALETTE + code_of(res + L.zcodes, c)]
                       : make_float4(0.0f, 0.0f, 0.0f, 0.0f);
        float zx = in ? xs[spread(L.z_at + c)] : 0.0f;
        sz[j] = zt.x; // no signal reached z: silu of its anchors' share
        hit[j] = zx != 0.0f;
        arg[j] = zx + zt.y;
        between |= hit[j] & silu_between_tails(arg[j]);
        gain[j] = zt.z;
        has[j] = zt.w;
        from[j] = in ? __ldg(I + L.out.start + c) : 0;
        to[j] = in ? __ldg(I + L.out.start + c + 1) : 0;
    }
    between = __any_sync(FULL, between);
#pragma unroll
    for (unsigned j = 0; j < KJ; j++) {
        if (hit[j]) sz[j] = between ? silu_fast(arg[j]) : silu_tail(arg[j]);
        // (has: out_proj entries exist; `&`, not `&&`: three tests, no branches)
        open |= (sz[j] != 0.0f) & (gain[j] != 0.0f) & (has[j] != 0.0f);
    }
    // The z gate shuts every column (silu(z) or the gain exactly 0, or no out_proj entry):
    // every output is a zero the out_proj would skip, so the read is not needed. A gated
    // read (the ROM staging's 32 rows outside `bc`) costs nothing on most passes.
    if (!__any_sync(FULL, open)) return;
    HMARK(9);
    // The read over the query's nonzero rows, in ascending row order.
    float acc[KJ] = {};
    over_rows<false>(st, d.dv, q, acc);
    HMARK(10);
    float s = 0.0f;
#pragma unroll
    for (unsigned j = 0; j < KJ; j++) s += acc[j] * acc[j];
    s = warp_sum(s);
    float inv = 1.0f / sqrtf(s / (float)d.dv + d.eps);
    HMARK(11);
    if (keep) {
        keep_read(constant && !z_reached, acc, inv, gain, sz, from, to, d, E, hidden, z, kept);
        HMARK(12);
        return;
    }
#pragma unroll
    for (unsigned j = 0; j < KJ; j++) {
        if (lane + 32 * j >= d.dv || acc[j] == 0.0f) continue; // o would be zero
        float o = (gain[j] * (acc[j] * inv)) * sz[j];
        if (o == 0.0f) continue;
        for (unsigned k = from[j]; k < to[j]; k++) {
            uint2 e = __ldg(E + k);
            atomicAdd(hidden + e.x, __uint_as_float(e.y) * o);
            mark(z, e.x);
        }
    }
    HMARK(12);
}

extern "C" __global__ void __launch_bounds__(THREADS) chip_passes(
    const Dims *dims_p, const Layer *layers_g, const unsigned *I, const uint2 *E, const float *W, float *S_all,
    const SlotWork *slots, const unsigned *inputs_all, unsigned *outputs_all,
    unsigned *ctl_all /* per machine: [0]=passes done, [1]=conv ring position, [2]=last token, [3]=error */) {
    BLOCK_MACHINE;

    extern __shared__ float4 sh4[];
    const Dims d = *dims_p;
    float4 *pal = sh4;                                   // d.palettes: the resident palettes
    float *sh = (float *)(sh4 + d.palettes);
    float *hidden = sh;                                  // width
    float *xs = hidden + d.width;                        // SPREAD_ROWS(d.scratch): the input projections' rows
    float *gu = xs + SPREAD_ROWS(d.scratch);             // d.act: gate and up rows
    unsigned *nz_cols = (unsigned *)(gu + d.act);        // NZ_CAP: the listed dims
    unsigned *dirty = nz_cols + NZ_CAP;                  // (width + 31) / 32: the listed dims' bits
    Layer *layers = (Layer *)(dirty + (d.width + 31) / 32); // d.layers
    unsigned *res = (unsigned *)(layers + d.layers);      // d.resident_words: the resident codes
    // (d.width bytes): each dim's readers bits (`Listing`), where d.readers says they fit.
    unsigned char *readers = d.readers ? (unsigned char *)(res + d.resident_words) : nullptr;
    // Each layer's heads-table entries and every value head's parameters.
    __shared__ unsigned heads_sh[MAX_LAYERS * 32];
    __shared__ float4 params_sh[MAX_LAYERS * 32];
    __shared__ unsigned error_sh, token_sh, kind_sh, nz_count;
    __shared__ Tokens tk;
    // The scatters' chunk tables and their lengths: the input projections' in chunk_n[0],
    // gate/up's placed after them (chunk_n[1] counts from the input chunks' end; they stay
    // until gate/up's listing has zeroed their rows); each scatter zeroes the other's length.
    __shared__ uint2 chunk_sh[CHUNK_CAP];
    __shared__ unsigned chunk_n[2];
    // Per layer, its readers bit where it may be left out (bit k for the k-th such layer),
    // else 0; and the readers bits of the dims listed this pass. (Made once a launch: ncu
    // sampled the layer top's rank count and vote most of the input listing's own samples.)
    __shared__ unsigned gate_bit_sh[MAX_LAYERS], reach_sh;
    __shared__ unsigned char no_readers;
    const Listing z = {dirty, nz_cols, &nz_count, &error_sh, readers ? readers : &no_readers, readers ? ~0u : 0u,
                       &reach_sh};

    // Tables; the residual holds only the anchors, which no layer writes (and which are
    // never listed); every other buffer starts zeroed, and each phase zeroes what it consumed.
    #pragma unroll 1
    for (unsigned i = threadIdx.x; i < d.layers * (unsigned)(sizeof(Layer) / 4); i += THREADS)
        ((unsigned *)layers)[i] = ((const unsigned *)layers_g)[i];
    load_tokens(tk, d, I);
    #pragma unroll 1
    for (unsigned i = threadIdx.x; i < d.resident_words; i += THREADS) res[i] = I[d.resident_at + i];
    #pragma unroll 1
    for (unsigned i = threadIdx.x; i < d.palettes; i += THREADS) pal[i] = ((const float4 *)(W + d.palette_at))[i];
    #pragma unroll 1
    for (unsigned i = threadIdx.x; i < d.width + SPREAD_ROWS(d.scratch) + d.act; i += THREADS)
        hidden[i] = 0.0f;
    for (unsigned i = threadIdx.x; i < (d.width + 31) / 32; i += THREADS) dirty[i] = 0;
    if (threadIdx.x == 0) error_sh = nz_count = chunk_n[0] = chunk_n[1] = reach_sh = no_readers = 0;
#ifdef PROFILE
    // Thread 0's cycles per (layer, phase), the last row the embedding and token choice;
    // warp 0's head by stage; with -DPROFILE_HEADS every value head's cycles (its warp's
    // lane 0, start to end) by layer and head: the longest head of a layer is the chain its
    // other warps wait for. (Those take 4 KB more of shared memory: the 0.8b block then has
    // no room for its column starts beside the readers bits, and reads them from L2.)
    __shared__ long long prof[(MAX_LAYERS + 1) * PHASES], hprof[MAX_LAYERS * HSTAGES];
#ifdef PROFILE_HEADS
    __shared__ unsigned long long head_cycles[MAX_LAYERS * 32];
    for (unsigned i = threadIdx.x; i < MAX_LAYERS * 32; i += THREADS) head_cycles[i] = 0;
#endif
    for (unsigned i = threadIdx.x; i < (MAX_LAYERS + 1) * PHASES; i += THREADS) prof[i] = 0;
    for (unsigned i = threadIdx.x; i < MAX_LAYERS * HSTAGES; i += THREADS) hprof[i] = 0;
#endif
    __syncthreads();
    for (unsigned a = threadIdx.x; a < d.anchors; a += THREADS)
        hidden[d.chip_base + I[d.anchor_dim + a]] = W[d.anchor_value + a];
    for (unsigned i = threadIdx.x; i < d.layers * 32; i += THREADS) {
        const Layer &L = layers[i / 32];
        if (i % 32 < L.n_heads) heads_sh[i] = I[L.heads + i % 32];
        if (i % 32 < d.hv) params_sh[i] = ((const float4 *)(W + L.head))[i % 32];
    }
#ifdef KEEP_READS
    // No read is kept at a launch's start: the host may have written the state since.
    for (unsigned i = threadIdx.x; i < d.kept_slots; i += THREADS) ((unsigned *)S)[d.kept_at + i * d.kept_words] = 0;
#endif
    // A layer may be left out on a pass where no listed dim reaches its input projections
    // (its input rows stay zero): the host's `gateable_readers` says which layers (the
    // 0.8b chip's ROM, layer 1, and the layers the memory ports read, 4-8) and which dims
    // reach each.
    if (threadIdx.x < d.layers) {
        const unsigned g = readers ? d.gateable : 0u, li = threadIdx.x;
        gate_bit_sh[li] = (g >> li) & 1u ? 1u << __popc(g & ((1u << li) - 1u)) : 0u;
    }
    #pragma unroll 1
    for (unsigned i = threadIdx.x; readers && i < (d.width + 3) / 4; i += THREADS)
        ((unsigned *)readers)[i] = I[d.readers_at + i];
    __syncthreads();

    unsigned ring = state[1];
    unsigned token = state[2];
    unsigned done = 0;
#ifdef PROFILE
    long long prof_last = clock64();
    unsigned long long listed[2] = {0, 0}, chunks[2] = {0, 0}, left_out = 0;
    unsigned l = MAX_LAYERS;
#endif
    for (unsigned pass = 0; pass < max_passes; pass++) {
        if (pass < n_inputs) token = inputs[pass];
        // Embed: list and set the kind's and its fields' one-hots (the last pass's listed
        // dims were cleared after its token choice). Warp 0 alone.
        if (threadIdx.x < 32) {
            unsigned lane = threadIdx.x;
            bool mine = lane < d.kinds && tk.kind_off[lane] <= token && (lane + 1 >= d.kinds || token < tk.kind_off[lane + 1]);
            unsigned k = __ffs(__ballot_sync(FULL, mine)) - 1;
            // Lane f < nf sets field f's one-hot (the token's index, digit f in the kind's
            // mixed radix, the last field the lowest), lane nf the kind's dim. (Lane 0 set
            // them all one after another, each `mark` two shared atomics: measured, the
            // lanes at once +0.5 to +1.5 % passes/s.)
            unsigned nf = tk.kind_nf[k], idx = token - tk.kind_off[k];
            unsigned fid = lane < nf ? tk.kind_fields[k * KIND_FIELDS + lane] : 0u;
            unsigned size = lane < nf ? tk.field_size[fid] : 1u;
            // The product of the later fields' sizes (lanes past nf hold 1), by shuffles:
            // after the steps, `later` is the product of this field's size and every later
            // one's, and lane KIND_FIELDS, past every field, holds 1. (It was a loop of two
            // dependent loads a field; with the token choice's loads below issued together:
            // +0.0 to +0.3 % passes/s on the H100.)
            unsigned later = size;
#pragma unroll
            for (unsigned o = 1; o < KIND_FIELDS; o <<= 1) {
                unsigned next = __shfl_sync(FULL, later, (lane + o) & 31u);
                if (lane + o < KIND_FIELDS) later *= next;
            }
            unsigned below = __shfl_sync(FULL, later, (lane + 1) & 31u);
            if (lane == 0) nz_count = 0;
            __syncwarp();
            if (lane <= nf) {
                unsigned r = d.chip_base + tk.kind_dim[k];
                if (lane < nf) r = d.chip_base + tk.field_dim[fid] + (idx / below) % size;
                mark(z, r);
                hidden[r] = 1.0f;
            }
        }
        __syncthreads();
        MARK(0);

        #pragma unroll 1
        for (unsigned li = 0; li < d.layers; li++) {
#ifdef PROFILE
            l = li;
            if (threadIdx.x == 0) listed[0] += nz_count;
#endif
            const Layer &L = layers[li];
            // A layer without heads or delayed channels reads none of its input rows (the
            // 0.8b chip's layer 9): its input scatter is left out, and its gate/up listing
            // checks the pin on the same residual.
            const bool mixes = L.n_heads > 0 || L.n_delayed > 0;
            // A layer that may be left out and that no listed dim reaches: its input
            // scatter, its heads and the zeroing of its input rows are left out, with their
            // barriers (its gate/up listing checks the pin on the same residual, which its
            // heads did not write). The answer is the same in every warp; a vote, so that
            // the compiler sees it uniform (a barrier under a condition it cannot see is
            // uniform moves the layer tables' loads out of uniform registers).
            const unsigned gate_bit = gate_bit_sh[li];
            const bool untouched = __any_sync(FULL, gate_bit != 0u && !(reach_sh & gate_bit));
#ifdef PROFILE
            if (threadIdx.x == 0 && untouched) left_out++;
#endif
            if (mixes && !untouched) {
                list_chunks<true>(L.xin, L.xin_cols, I, E, res, nz_cols, min(nz_count, NZ_CAP), hidden, d, &error_sh,
                                  chunk_sh, chunk_n, xs);
                __syncthreads();
#ifdef PROFILE
                if (threadIdx.x == 0) chunks[0] += chunk_n[0];
#endif
                MARK(0);
                // (gate/up's chunks go after these, which stay in the table until the rows
                // they added into are zeroed, during gate/up's listing)
                if (threadIdx.x == 0) chunk_n[1] = min(chunk_n[0], (unsigned)CHUNK_CAP);
                run_chunks<true>(E, chunk_sh, chunk_n[0], xs);
            }
            if (!untouched) __syncthreads();
            MARK(1);
            // The causal conv of the channels that read earlier passes (raw = scattered sum
            // + anchors' share), its output written over the channel's input row, where the
            // heads read it (a rank among the delayed channels and a buffer of their own put
            // two shared loads and a popc on layer 3's k chains: +1.0 to +1.2 % passes/s
            // without them, H100); the others' conv is a multiply, done where they are read.
            // (Such a layer is never left out, `gateable_readers`: its input rows are zeroed
            // after its heads.)
            if (L.n_delayed > 0) {
                float *cs = S + L.conv_state;
                // (A warp's channels at a time: it calls silu only where one lies between
                // its tails.)
                #pragma unroll 1
                for (unsigned base = threadIdx.x & ~31u; base < L.n_delayed; base += THREADS) {
                    const unsigned i = base + threadIdx.x % 32;
                    const bool in = i < L.n_delayed;
                    float raw = 0.0f, u = 0.0f, *row = xs;
                    if (in) {
                        uint2 ch = __ldg((const uint2 *)(I + L.delayed) + i);
                        float4 w = __ldg((const float4 *)(W + L.taps) + i);
                        float c0 = cs[(ring % 3) * L.n_delayed + i], c1 = cs[((ring + 1) % 3) * L.n_delayed + i],
                              c2 = cs[((ring + 2) % 3) * L.n_delayed + i];
                        row = xs + spread(ch.x);
                        raw = *row + __uint_as_float(ch.y);
                        u += w.x * c0;
                        u += w.y * c1;
                        u += w.z * c2;
                        u += w.w * raw;
                    }
                    const bool between = __any_sync(FULL, in & silu_between_tails(u));
                    if (in) {
                        *row = between ? silu_call(u) : silu_tail(u);
                        cs[(ring % 3) * L.n_delayed + i] = raw; // the oldest slot becomes the newest
                    }
                }
                __syncthreads();
            }
            MARK(2);
            #pragma unroll 1
            for (unsigned h = threadIdx.x / 32; h < (untouched ? 0u : L.n_heads); h += WARPS) {
                unsigned entry = heads_sh[li * 32 + h];
#ifdef PROFILE_HEADS
                long long h0 = clock64();
#endif
                value_head(entry, params_sh[li * 32 + (entry & 0xffu)], L, d, I, E, W, res, pal, S, xs, hidden, z
#ifdef PROFILE
                           , hprof + li * HSTAGES
#endif
                );
#ifdef PROFILE_HEADS
                if (threadIdx.x % 32 == 0) head_cycles[li * 32 + (entry & 0xffu)] += clock64() - h0;
#endif
            }
            if (L.n_heads > 0 && !untouched) __syncthreads();
            MARK(3);
#ifdef PROFILE
            if (threadIdx.x == 0) listed[1] += nz_count;
#endif
            // The input rows are zeroed for the next layer (the heads have read them) by the
            // warps that have no batch of listed dims to list, during the listing (after the
            // adds, by every warp, they took 0.3-0.9 k cycles of a layer on the H100: +0.7 to
            // +1.1 % passes/s); where every warp lists, by all after the adds. A layer that
            // wrote none of them (left out, or without heads and delayed channels) skips it.
            // Only the rows the input chunks added into can be nonzero (their chunks stay in
            // the table: gate/up's are placed after them), unless a chunk went past the
            // table (its lane added it) or the delayed conv wrote its channels' rows: then
            // every row is zeroed. (Every row, ~8.3 k a layer at the 0.8b shape, was 7 % of
            // the kernel's warp instructions, ncu on the H100; a layer's input chunks are a
            // handful. With the heads' channel outputs below, +1.5 to +2.9 % passes/s.)
            const unsigned listed = min(nz_count, NZ_CAP), listing_warps = warps_with_batches(listed);
            const bool zero_rows = mixes && !untouched, zero_while_listing = zero_rows && listing_warps < WARPS;
            // (the input chunks' count: gate/up's chunks follow them in the table)
            const unsigned xin_chunks = zero_rows ? min(chunk_n[0], (unsigned)CHUNK_CAP) : 0u;
            const bool zero_all = L.n_delayed > 0 || chunk_n[0] > CHUNK_CAP;
            if (zero_while_listing && threadIdx.x >= 32 * listing_warps) {
                const unsigned lane = threadIdx.x % 32;
                if (zero_all) {
                    #pragma unroll 1
                    for (unsigned i = threadIdx.x - 32 * listing_warps; i < SPREAD_ROWS(d.scratch); i += THREADS - 32 * listing_warps)
                        xs[i] = 0.0f;
                } else {
                    #pragma unroll 1
                    for (unsigned g = threadIdx.x / 32 - listing_warps; g < xin_chunks; g += WARPS - listing_warps) {
                        const uint2 chunk = chunk_sh[g];
                        if (lane < (chunk.x & 63)) xs[spread(__ldg(E + (chunk.x >> 6) + lane).x)] = 0.0f;
                    }
                }
            }
            list_chunks<false>(L.gate_up, L.gate_up_cols, I, E, res, nz_cols, listed, hidden, d,
                               &error_sh, chunk_sh, chunk_n + 1, gu);
            __syncthreads();
#ifdef PROFILE
            if (threadIdx.x == 0) chunks[1] += chunk_n[1] - xin_chunks;
#endif
            MARK(7);
            run_chunks<false>(E, chunk_sh + xin_chunks, min(chunk_n[1], (unsigned)CHUNK_CAP) - xin_chunks, gu);
            if (threadIdx.x == 0) chunk_n[0] = 0;
            MARK(6);
            #pragma unroll 1
            for (unsigned i = threadIdx.x; i < (zero_rows && !zero_while_listing ? SPREAD_ROWS(d.scratch) : 0u); i += THREADS)
                xs[i] = 0.0f;
            __syncthreads();
            // (gate/up's length, zeroed for the next layer here too: its input scatter,
            // which zeroes it otherwise, may be left out.)
            if (threadIdx.x == 0) chunk_n[1] = 0;
            MARK(4);
            // The constant neurons' share of down (from the last threads, which compute no
            // neuron in most layers); then SwiGLU of the neurons a signal can reach, each
            // adding its down column into the residual when it fires: a short column from
            // the thread that computed it, a wide one by its whole warp. The last layer's
            // columns are many (its field outputs, ~16 entries each, one neuron a thread
            // added them in 5 k cycles of a pass): there they go to the chunk table, added
            // by the whole block after a barrier.
            const bool scatter_down = li + 1 == d.layers;
            #pragma unroll 1
            for (unsigned i = THREADS - 1 - threadIdx.x; i < L.n_fixed; i += THREADS) {
                unsigned r = __ldg(I + L.fixed_rows + i);
                mark(z, r);
                atomicAdd(hidden + r, __ldg(W + L.fixed_vals + i));
            }
            #pragma unroll 1
            for (unsigned base = threadIdx.x & ~31u; base < L.n_signal; base += THREADS) {
                unsigned t = base + threadIdx.x % 32;
                float a = 0.0f;
                uint2 down = make_uint2(0, 0);
                // A neuron no signal reached (gate and up rows 0) is at rest, where it adds
                // nothing (n_awake 0): its record is not loaded (every neuron's record and
                // down ends are ~150 KB a pass at the 0.8b shape, a pass's other tables
                // ~50 KB).
                // The scan of every neuron's gate and up rows was most of the MLPs' samples
                // (ncu): every lane reads its rows (a lane past the end the last neuron's)
                // and one test without branches decides (+1.2 to +1.5 % passes/s, H100).
                const unsigned tc = min(t, L.n_signal - 1u);
                float gs = gu[tc], us = gu[L.n_neur + tc];
                uint4 first = make_uint4(0, 0, 0, 0);
                const bool reached = (t < L.n_signal) & ((gs != 0.0f) | (us != 0.0f) | (L.n_awake != 0));
                float g = 0.0f, u = 0.0f;
                if (reached) {
                    uint4 nr = __ldg((const uint4 *)(I + L.neuron) + 2 * t);
                    first = __ldg((const uint4 *)(I + L.neuron) + 2 * t + 1);
                    down = make_uint2(nr.z, nr.w);
                    g = gs + __uint_as_float(nr.x), u = us + __uint_as_float(nr.y);
                    gu[t] = gu[L.n_neur + t] = 0.0f;
                }
                // (silu inlined: +0.5 % passes/s against the call, H100)
                const bool between = __any_sync(FULL, reached & silu_between_tails(g));
                if (reached) a = (between ? silu_fast(g) : silu_tail(g)) * u;
                if (scatter_down) {
                    append_chunks(down.x, a != 0.0f ? down.y - down.x : 0, a, chunk_sh, chunk_n,
                                  [&](unsigned f, unsigned l, float x) { add_entries(E, f, f + l, x, hidden, z); });
                    continue;
                }
                bool wide = a != 0.0f && down.y - down.x > WIDE_COLUMN;
                if (a != 0.0f && !wide) {
                    add_first_entries(first, down.y - down.x, a, hidden, z);
                    add_entries(E, down.x + INLINE_DOWN, down.y, a, hidden, z);
                }
                add_wide_columns(E, wide, down, a, hidden, z);
            }
            if (scatter_down) {
                __syncthreads();
                run_chunks<false>(E, chunk_sh, chunk_n[0], hidden, &z);
            }
            __syncthreads();
            // (The input scatter of the next pass's first layer counts from 0 again.)
            if (scatter_down && threadIdx.x == 0) chunk_n[0] = 0;
            MARK(5);
        }
        ring = (ring + 1) % 3;
#ifdef PROFILE
        l = MAX_LAYERS;
#endif

        // Choose the next token: each field's best value (first maximum), one warp per
        // field; then one lane per kind adds its fields' best scores in field order, and
        // the first kind of the highest score wins.
        best_field_values(hidden, d, tk);
        __syncthreads();
        MARK(6);
        if (threadIdx.x < 32) {
            unsigned k = threadIdx.x;
            bool have = k < d.kinds;
            float score = -__int_as_float(0x7f800000);
            unsigned idx = 0;
            if (have) {
                score = hidden[d.chip_base + tk.kind_dim[k]];
                // The fields' loads issued together, then added in field order. (It was a
                // loop of dependent loads a field.)
                unsigned nf = tk.kind_nf[k], fid[KIND_FIELDS], size[KIND_FIELDS], best[KIND_FIELDS];
                float fs[KIND_FIELDS];
#pragma unroll
                for (unsigned f = 0; f < KIND_FIELDS; f++) fid[f] = f < nf ? tk.kind_fields[k * KIND_FIELDS + f] : 0u;
#pragma unroll
                for (unsigned f = 0; f < KIND_FIELDS; f++) {
                    fs[f] = tk.field_score[fid[f]];
                    size[f] = tk.field_size[fid[f]];
                    best[f] = tk.field_best[fid[f]];
                }
#pragma unroll
                for (unsigned f = 0; f < KIND_FIELDS; f++)
                    if (f < nf) {
                        score += fs[f];
                        idx = idx * size[f] + best[f];
                    }
            }
            // The first kind with the highest score (the CPU's strict > over kinds in order).
            unsigned best_k = have ? k : 0xffffffffu;
            float best = score;
            for (int o = 16; o > 0; o >>= 1) {
                float os = __shfl_xor_sync(FULL, best, o);
                unsigned ok = __shfl_xor_sync(FULL, best_k, o);
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
        // The residual has given its token: clear its listed dims (the anchors stay) for
        // the next pass's embedding, the whole block at once (warp 0 alone did it in the
        // embedding: ~5 rounds on its chain).
        #pragma unroll 1
        for (unsigned t = threadIdx.x, n = min(nz_count, NZ_CAP); t < n; t += THREADS) {
            unsigned r = nz_cols[t];
            hidden[r] = 0.0f;
            dirty[r / 32] = 0;
        }
        if (threadIdx.x == 0) reach_sh = 0;
        __syncthreads();
        MARK(7);
        done = pass + 1;
        if (failed) break;
        if (pass + 1 >= n_inputs && ((stop_mask >> kind) & 1)) break;
    }
#ifdef PROFILE
    if (threadIdx.x == 0 && done > 0) {
        long long total = 0;
        for (int i = 0; i < (MAX_LAYERS + 1) * PHASES; i++) total += prof[i];
        const long long *o = prof + MAX_LAYERS * PHASES;
        printf("kernel profile (sparse): %u passes, %.0f cycles/pass: embed %.0f fields %.0f kinds %.0f; "
               "listed dims per layer %.1f (xin) %.1f (gate/up); chunks per pass %.1f (xin) %.1f (gate/up); "
               "column starts %s; layers left out per pass %.2f\n",
               done, (double)total / done, (double)o[0] / done, (double)o[6] / done, (double)o[7] / done,
               (double)listed[0] / done / d.layers, (double)listed[1] / done / d.layers, (double)chunks[0] / done,
               (double)chunks[1] / done, layers[0].xin_cols < d.resident_words ? "resident" : "from L2",
               (double)left_out / done);
        for (unsigned li = 0; li < d.layers; li++) {
            const long long *p = prof + li * PHASES, *h = hprof + li * HSTAGES;
            printf("  layer %2u: xin %6.0f (list %5.0f) conv %5.0f heads %6.0f gate_up %6.0f (list %5.0f, zero %5.0f) "
                   "mlp %6.0f\n", li, (double)(p[0] + p[1]) / done, (double)p[0] / done, (double)p[2] / done,
                   (double)p[3] / done, (double)(p[7] + p[6]) / done, (double)p[7] / done, (double)p[4] / done,
                   (double)p[5] / done);
            printf("            warp 0's head by stage (" HEAD_STAGES "):");
            for (int k = 0; k < HSTAGES; k++) printf(" %.0f", (double)h[k] / done);
            printf("\n");
#ifdef PROFILE_HEADS
            // The layer's heads by cycles a pass, the longest first (at most six).
            const unsigned long long *c = head_cycles + li * 32;
            printf("            heads by cycles:");
            for (unsigned shown = 0, last = ~0u; shown < 6; shown++) {
                unsigned best = ~0u;
                for (unsigned h = 0; h < 32; h++)
                    if ((last == ~0u || c[h] < c[last] || (c[h] == c[last] && h > last)) &&
                        (best == ~0u || c[h] > c[best]))
                        best = h;
                if (best == ~0u || c[best] == 0) break;
                printf(" %u:%.0f", best, (double)c[best] / done);
                last = best;
            }
            printf("\n");
#endif
        }
    }
#endif
    if (threadIdx.x == 0) {
        state[0] = done;
        state[1] = ring;
        state[2] = token;
        state[3] = error_sh;
    }
}
