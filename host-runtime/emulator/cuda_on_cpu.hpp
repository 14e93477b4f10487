// inband: the CUDA a chip kernel uses, on the CPU, for testing a kernel's logic where no
// GPU is (its speed is the GPU's to measure). A block's threads are fibers on one OS
// thread, switched only where a thread waits on others: a block barrier, or a warp's
// shuffle, vote or sync. So a kernel runs as the GPU may run it, one interleaving of
// its threads between two such points, and its block-level logic (who waits on whom,
// what each phase reads, whether every lane of a warp agrees) is checked for real; what
// it cannot show is a race between two threads that no barrier orders (here each runs
// alone until it waits), nor the GPU's arithmetic (expf here is the C library's, as the
// CPU engine's is).
//
// A kernel source compiles against this header with `__shared__` meaning `static` (one
// block at a time) and its `extern __shared__` array replaced by [`emu::dynamic_shared`]
// (the runner's source rewrite).
#pragma once
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <utility>
#include <vector>

struct uint2 { unsigned x, y; };
struct uint4 { unsigned x, y, z, w; };
struct float4 { float x, y, z, w; };
struct dim3 { unsigned x, y, z; };
inline uint2 make_uint2(unsigned x, unsigned y) { return {x, y}; }
inline uint4 make_uint4(unsigned x, unsigned y, unsigned z, unsigned w) { return {x, y, z, w}; }
inline float4 make_float4(float x, float y, float z, float w) { return {x, y, z, w}; }

#define __global__
#define __device__
#define __forceinline__ inline
#define __noinline__ __attribute__((noinline))
#define __launch_bounds__(...)
#define __shared__ static
#define __restrict__ __restrict

namespace emu {

// A saved stack pointer; `emu_switch` saves the callee-saved registers on the stack it
// leaves and restores them from the one it enters.
struct Context {
    void *sp;
};
extern "C" void emu_switch(Context *from, Context *to);

struct Thread {
    Context context;
    dim3 idx;
    bool done;
    // Where the thread waits: a barrier's generation, still `waiting_at` (the scheduler
    // passes the thread by until it moves on).
    const unsigned *generation;
    unsigned waiting_at;
    unsigned char *stack;
};

// One warp's exchange: a slot per lane in two sets (a lane's next exchange uses the other
// set, so it cannot overwrite a slot another lane has yet to read: the barrier between
// them waits for every lane), and its barrier.
struct Warp {
    unsigned count = 0, generation = 0;
    uint64_t slot[2][32];
    unsigned set[32] = {};
};

struct Block {
    std::vector<Thread> threads;
    std::vector<Warp> warps;
    unsigned barrier_count = 0, barrier_generation = 0, done = 0;
    Context scheduler;
    void (*body)() = nullptr;
};

inline Block block;
inline Thread *current = nullptr;
inline dim3 block_index = {0, 0, 0};
inline std::vector<unsigned char> dynamic_shared_bytes;
inline unsigned long long clock = 0;

template <class T> T *dynamic_shared() { return reinterpret_cast<T *>(dynamic_shared_bytes.data()); }

inline void yield() { emu_switch(&current->context, &block.scheduler); }

// Waits until the barrier's `generation` is no longer `g`.
inline void wait_for(const unsigned *generation, unsigned g) {
    current->generation = generation;
    current->waiting_at = g;
    yield();
    current->generation = nullptr;
}

inline void sync_block() {
    unsigned g = block.barrier_generation;
    if (++block.barrier_count == block.threads.size()) {
        block.barrier_count = 0;
        block.barrier_generation++;
        return;
    }
    wait_for(&block.barrier_generation, g);
}

inline Warp &my_warp() { return block.warps[current->idx.x / 32]; }

inline void sync_warp() {
    Warp &w = my_warp();
    unsigned g = w.generation;
    if (++w.count == 32) {
        w.count = 0;
        w.generation++;
        return;
    }
    wait_for(&w.generation, g);
}

// Every lane offers `bits`; returns the warp's 32 offers (valid until the lane's next
// exchange but one).
inline const uint64_t *exchange(uint64_t bits) {
    Warp &w = my_warp();
    unsigned lane = current->idx.x % 32, s = w.set[lane];
    w.set[lane] ^= 1;
    w.slot[s][lane] = bits;
    sync_warp();
    return w.slot[s];
}

template <class T> uint64_t bits_of(T v) {
    static_assert(sizeof(T) <= 8, "a shuffled value fits 64 bits");
    uint64_t b = 0;
    std::memcpy(&b, &v, sizeof(T));
    return b;
}
template <class T> T from_bits(uint64_t b) {
    T v;
    std::memcpy(&v, &b, sizeof(T));
    return v;
}

extern "C" inline void thread_main() {
    block.body();
    current->done = true;
    block.done++;
    for (;;) yield();
}

// The order the scheduler runs the threads in, each time round (`set_schedule`): the
// threads in order, the other way round, or shuffled from a seed. Where a kernel's result
// depends on it, two threads touch the same data with no barrier between them.
inline unsigned long long schedule = 0; // 0: in order, 1: reversed, else a shuffle's seed

inline void set_schedule(unsigned long long s) { schedule = s; }

inline void reorder(std::vector<unsigned> &order) {
    if (schedule == 0) return;
    if (schedule == 1) {
        for (size_t i = 0; i < order.size(); i++) order[i] = unsigned(order.size() - 1 - i);
        return;
    }
    for (size_t i = order.size() - 1; i > 0; i--) { // Fisher-Yates with xorshift64
        schedule ^= schedule << 13;
        schedule ^= schedule >> 7;
        schedule ^= schedule << 17;
        std::swap(order[i], order[schedule % (i + 1)]);
    }
}

// Runs `body` as a block of `threads` threads (a multiple of 32), to its end.
inline void run_block(unsigned threads, void (*body)()) {
    const size_t stack_bytes = 256 * 1024;
    // (The stacks stay allocated from one launch to the next, untouched until used.)
    static std::vector<unsigned char *> stacks;
    while (stacks.size() < threads) stacks.push_back(new unsigned char[stack_bytes]);
    block.threads.assign(threads, Thread{});
    block.warps.assign(threads / 32, Warp{});
    block.barrier_count = block.barrier_generation = block.done = 0;
    block.body = body;
    for (unsigned t = 0; t < threads; t++) {
        Thread &th = block.threads[t];
        th.idx = {t, 0, 0};
        th.stack = stacks[t];
        // The first switch into a thread pops six saved registers and returns into
        // thread_main, entered as a call is (the stack 8 bytes off a 16-byte boundary).
        uintptr_t top = (reinterpret_cast<uintptr_t>(th.stack) + stack_bytes) & ~uintptr_t(15);
        void **sp = reinterpret_cast<void **>(top);
        *--sp = nullptr;
        *--sp = reinterpret_cast<void *>(&thread_main);
        for (int r = 0; r < 6; r++) *--sp = nullptr;
        th.context.sp = sp;
    }
    std::vector<unsigned> order(threads);
    for (unsigned t = 0; t < threads; t++) order[t] = t;
    while (block.done < threads) {
        bool ran = false;
        reorder(order);
        for (unsigned t : order) {
            Thread &th = block.threads[t];
            if (th.done || (th.generation && *th.generation == th.waiting_at)) continue;
            current = &th;
            ran = true;
            emu_switch(&block.scheduler, &th.context);
        }
        // Every thread left waits on a barrier that will never open: some thread skipped
        // a barrier, or a warp's lanes took different exchanges (on the GPU, a hang or
        // worse).
        if (!ran) {
            unsigned at_block = 0;
            for (Thread &th : block.threads) at_block += !th.done && th.generation == &block.barrier_generation;
            std::fprintf(stderr, "deadlock: %u of %u threads wait at a block barrier, %u at a warp's, %u ended\n",
                         at_block, threads, threads - block.done - at_block, block.done);
            std::exit(3);
        }
    }
    current = nullptr;
}

} // namespace emu

asm(R"(
    .text
    .globl emu_switch
    .type emu_switch, @function
emu_switch:
    pushq %rbp
    pushq %rbx
    pushq %r12
    pushq %r13
    pushq %r14
    pushq %r15
    movq %rsp, (%rdi)
    movq (%rsi), %rsp
    popq %r15
    popq %r14
    popq %r13
    popq %r12
    popq %rbx
    popq %rbp
    ret
    .size emu_switch, .-emu_switch
)");

#define threadIdx (emu::current->idx)
#define blockIdx (emu::block_index)

inline void __syncthreads() { emu::sync_block(); }
inline void __syncwarp(unsigned = 0xffffffffu) { emu::sync_warp(); }

template <class T> T __shfl_sync(unsigned, T v, int src) {
    return emu::from_bits<T>(emu::exchange(emu::bits_of(v))[src & 31]);
}
template <class T> T __shfl_up_sync(unsigned, T v, unsigned delta) {
    unsigned lane = threadIdx.x % 32;
    const uint64_t *all = emu::exchange(emu::bits_of(v));
    return lane >= delta ? emu::from_bits<T>(all[lane - delta]) : v;
}
template <class T> T __shfl_xor_sync(unsigned, T v, int mask) {
    return emu::from_bits<T>(emu::exchange(emu::bits_of(v))[(threadIdx.x % 32) ^ (mask & 31)]);
}
inline unsigned __ballot_sync(unsigned, int predicate) {
    const uint64_t *all = emu::exchange(predicate ? 1 : 0);
    unsigned m = 0;
    for (unsigned l = 0; l < 32; l++) m |= unsigned(all[l]) << l;
    return m;
}
inline bool __any_sync(unsigned mask, int predicate) { return __ballot_sync(mask, predicate) != 0; }
inline bool __all_sync(unsigned mask, int predicate) { return __ballot_sync(mask, predicate) == 0xffffffffu; }

// (Threads switch only at the waits above, so a read-modify-write is never interleaved.)
inline float atomicAdd(float *p, float v) { float o = *p; *p = o + v; return o; }
inline unsigned atomicAdd(unsigned *p, unsigned v) { unsigned o = *p; *p = o + v; return o; }
inline unsigned atomicOr(unsigned *p, unsigned v) { unsigned o = *p; *p = o | v; return o; }

template <class T> T __ldg(const T *p) { return *p; }
template <class T> T __ldcg(const T *p) { return *p; }
inline int __popc(unsigned x) { return __builtin_popcount(x); }
inline int __ffs(int x) { return __builtin_ffs(x); }
inline float __int_as_float(int x) { float f; std::memcpy(&f, &x, 4); return f; }
inline float __uint_as_float(unsigned x) { float f; std::memcpy(&f, &x, 4); return f; }
inline unsigned __float_as_uint(float f) { unsigned x; std::memcpy(&x, &f, 4); return x; }
inline int __float_as_int(float f) { int x; std::memcpy(&x, &f, 4); return x; }
// The GPU's reciprocal estimate (rcp.approx) is its own; the correctly rounded
// reciprocal stands in for it (silu_fast's exactness on the GPU is checked there).
inline float rcp_approx(float b) { return 1.0f / b; }
inline float __fmaf_rn(float a, float b, float c) { return std::fma(a, b, c); }
inline long long clock64() { return (long long)++emu::clock; }
inline unsigned min(unsigned a, unsigned b) { return a < b ? a : b; }
inline unsigned max(unsigned a, unsigned b) { return a > b ? a : b; }
