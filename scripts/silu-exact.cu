// Checks on the GPU that silu_fast (host-runtime/src/gpu/chip_common.cuh) gives silu_f's
// bits for every one of the 2^32 float inputs (NaNs: both NaN), and silu_tail for every
// input outside (-89, 17) where the kernels take it: silu_fast's reciprocal estimate is
// the GPU's own, so no CPU can check it. Compiled as the runtime's NVRTC
// compiles the kernels (no fused multiply-adds, no flushing, IEEE division):
//
//   nvcc -arch=sm_90 --fmad=false -ftz=false -prec-div=true -prec-sqrt=true \
//       -o silu-exact scripts/silu-exact.cu && ./silu-exact
//
// Prints the count of inputs that differ (and the first few); exits 1 if any does.
#include <cstdio>
#include <cstring>
#include "../host-runtime/src/gpu/chip_common.cuh"

__global__ void compare(unsigned long long base, unsigned long long *differ, unsigned *first) {
    unsigned bits = (unsigned)(base + blockIdx.x * (unsigned long long)blockDim.x + threadIdx.x);
    float x = __uint_as_float(bits), want = silu_f(x), got = silu_fast(x);
    float tail = silu_between_tails(x) ? want : silu_tail(x);
    bool same = (__float_as_uint(want) == __float_as_uint(got) || (want != want && got != got)) &&
                (__float_as_uint(want) == __float_as_uint(tail) || (want != want && tail != tail));
    if (!same) {
        unsigned long long n = atomicAdd(differ, 1ull);
        if (n < 16) first[n] = bits;
    }
}

int main() {
    unsigned long long *differ;
    unsigned *first;
    cudaMallocManaged(&differ, sizeof *differ);
    cudaMallocManaged(&first, 16 * sizeof *first);
    *differ = 0;
    const unsigned threads = 256, blocks = 1u << 20; // 2^28 inputs a launch
    for (unsigned long long base = 0; base < (1ull << 32); base += (unsigned long long)threads * blocks)
        compare<<<blocks, threads>>>(base, differ, first);
    cudaError_t err = cudaDeviceSynchronize();
    if (err != cudaSuccess) {
        printf("silu-exact: %s\n", cudaGetErrorString(err));
        return 2;
    }
    printf("silu_fast (and silu_tail outside (-89, 17)) against silu_f over all 2^32 inputs: %llu differ\n", *differ);
    for (unsigned long long i = 0; i < *differ && i < 16; i++) {
        float x;
        memcpy(&x, &first[i], 4);
        printf("   x = %a (bits %08x)\n", x, first[i]);
    }
    return *differ ? 1 : 0;
}
