// inband: the H200's latencies the chip kernels are designed around (BENCHMARKS.md, GPU):
// dependent loads at each level of the memory, shared memory, block and cluster barriers,
// distributed shared memory, flag hand-offs between blocks, float atomics; cycles from
// clock64, one thread or block at a time.
//
// On the GPU machine: nvcc -arch=sm_90 -O2 -std=c++17 -o lat scripts/gpu-latency.cu && ./lat
#include <cstdio>
#include <cooperative_groups.h>
namespace cg = cooperative_groups;

__global__ void chase(const unsigned *p, unsigned n, unsigned steps, int cg_only, long long *out, unsigned *sink) {
    unsigned i = 0;
    // warm
    for (unsigned s = 0; s < n / 16 + 64; s++) i = cg_only ? __ldcg(p + i) : p[i];
    long long t0 = clock64();
    for (unsigned s = 0; s < steps; s++) i = cg_only ? __ldcg(p + i) : p[i];
    long long t1 = clock64();
    *out = (t1 - t0) / steps;
    *sink = i;
}

__global__ void smem_chase(unsigned steps, long long *out, unsigned *sink) {
    __shared__ unsigned s[4096];
    for (unsigned k = threadIdx.x; k < 4096; k += blockDim.x) s[k] = (k * 97 + 13) % 4096;
    __syncthreads();
    if (threadIdx.x) return;
    unsigned i = 0;
    long long t0 = clock64();
    for (unsigned k = 0; k < steps; k++) i = s[i];
    long long t1 = clock64();
    *out = (t1 - t0) / steps;
    *sink = i;
}

__global__ void barrier(unsigned steps, long long *out) {
    long long t0 = clock64();
    for (unsigned k = 0; k < steps; k++) __syncthreads();
    long long t1 = clock64();
    if (threadIdx.x == 0) *out = (t1 - t0) / steps;
}

__global__ void cluster_sync_probe(unsigned steps, long long *out) {
    cg::cluster_group cl = cg::this_cluster();
    cl.sync();
    long long t0 = clock64();
    for (unsigned k = 0; k < steps; k++) cl.sync();
    long long t1 = clock64();
    if (threadIdx.x == 0 && cl.block_rank() == 0) *out = (t1 - t0) / steps;
}

// DSMEM chase: rank 0 chases pointers living in rank 1's shared memory.
__global__ void dsmem_chase(unsigned steps, long long *out, unsigned *sink) {
    __shared__ unsigned s[4096];
    cg::cluster_group cl = cg::this_cluster();
    for (unsigned k = threadIdx.x; k < 4096; k += blockDim.x) s[k] = (k * 97 + 13) % 4096;
    cl.sync();
    if (cl.block_rank() == 0 && threadIdx.x == 0) {
        unsigned *r = cl.map_shared_rank(s, 1);
        unsigned i = 0;
        long long t0 = clock64();
        for (unsigned k = 0; k < steps; k++) i = r[i];
        long long t1 = clock64();
        *out = (t1 - t0) / steps;
        *sink = i;
    }
    cl.sync();
}

// Ping-pong between rank 0 and rank R via flags in each other's shared memory.
__device__ __forceinline__ void st_release_cluster(unsigned *p, unsigned v) {
    asm volatile("st.release.cluster.shared::cluster.u32 [%0], %1;" ::"r"((unsigned)__cvta_generic_to_shared(p)), "r"(v) : "memory");
}
__global__ void dsmem_pingpong(unsigned steps, long long *out) {
    __shared__ volatile unsigned flag;
    cg::cluster_group cl = cg::this_cluster();
    flag = 0;
    cl.sync();
    unsigned me = cl.block_rank(), other = me == 0 ? cl.num_blocks() - 1 : 0;
    if (threadIdx.x == 0 && (me == 0 || me == cl.num_blocks() - 1)) {
        unsigned *rf = cl.map_shared_rank((unsigned *)&flag, other);
        long long t0 = clock64();
        for (unsigned k = 1; k <= steps; k++) {
            if (me == 0) {
                *(volatile unsigned *)rf = k;
                __threadfence_block();
                while (flag != k) {}
            } else {
                while (flag != k) {}
                *(volatile unsigned *)rf = k;
            }
        }
        long long t1 = clock64();
        if (me == 0) *out = (t1 - t0) / steps; // round trip
    }
    cl.sync();
}

// Ping-pong between two blocks through global memory (no cluster).
__global__ void global_pingpong(volatile unsigned *flags, unsigned steps, long long *out) {
    if (threadIdx.x) return;
    unsigned me = blockIdx.x;
    long long t0 = clock64();
    for (unsigned k = 1; k <= steps; k++) {
        if (me == 0) {
            flags[32] = k;
            while (flags[0] != k) {}
        } else {
            while (flags[32] != k) {}
            flags[0] = k;
        }
    }
    long long t1 = clock64();
    if (me == 0) *out = (t1 - t0) / steps;
}

__global__ void atomics(float *g, unsigned steps, long long *out) {
    __shared__ float s[64];
    if (threadIdx.x) return;
    s[0] = 0;
    float v = 1.0f;
    long long t0 = clock64();
    for (unsigned k = 0; k < steps; k++) v = atomicAdd(s, v) * 0.0f + 1.0f;
    long long t1 = clock64();
    for (unsigned k = 0; k < steps; k++) v = atomicAdd(g, v) * 0.0f + 1.0f;
    long long t2 = clock64();
    out[0] = (t1 - t0) / steps;
    out[1] = (t2 - t1) / steps;
    g[1] = v + s[0];
}

int main() {
    long long *dout, h[4];
    unsigned *sink;
    cudaMalloc(&dout, 64);
    cudaMalloc(&sink, 64);
    size_t maxn = 512u << 20;
    unsigned *buf;
    cudaMalloc(&buf, maxn * 4);
    unsigned *hb = (unsigned *)malloc(maxn * 4);
    for (size_t kb : {8, 64, 192, 1024, 8192, 30000, 65536, 1 << 21}) {
        size_t n = kb * 256; // words
        // A random cycle over the set's 128-byte lines (Sattolo's shuffle).
        size_t lines = n / 32;
        unsigned *perm = (unsigned *)malloc(lines * 4);
        for (size_t a = 0; a < lines; a++) perm[a] = a;
        srand(1);
        for (size_t a = lines - 1; a > 0; a--) { size_t j = rand() % a; unsigned t = perm[a]; perm[a] = perm[j]; perm[j] = t; }
        for (size_t a = 0; a < lines; a++) hb[a * 32] = perm[a] * 32;
        free(perm);
        cudaMemcpy(buf, hb, lines * 32 * 4, cudaMemcpyHostToDevice);
        for (int cgo = 0; cgo < 2; cgo++) {
            chase<<<1, 1>>>(buf, (unsigned)std::min(lines, (size_t)200000), 4000, cgo, dout, sink);
            cudaMemcpy(h, dout, 8, cudaMemcpyDeviceToHost);
            printf("chase %8zu KB %s: %lld cycles/load\n", kb, cgo ? "ld.cg" : "ld   ", h[0]);
        }
    }
    smem_chase<<<1, 128>>>(10000, dout, sink);
    cudaMemcpy(h, dout, 8, cudaMemcpyDeviceToHost);
    printf("smem chase: %lld cycles/load\n", h[0]);
    for (int t : {1024, 512, 256, 128}) {
        barrier<<<1, t>>>(10000, dout);
        cudaMemcpy(h, dout, 8, cudaMemcpyDeviceToHost);
        printf("__syncthreads %4d threads: %lld cycles\n", t, h[0]);
    }
    cudaFuncSetAttribute(cluster_sync_probe, cudaFuncAttributeNonPortableClusterSizeAllowed, 1);
    cudaFuncSetAttribute(dsmem_pingpong, cudaFuncAttributeNonPortableClusterSizeAllowed, 1);
    for (int cs : {2, 4, 8, 11, 16}) for (int t : {1024, 256}) {
        cudaLaunchConfig_t cfg = {};
        cfg.gridDim = dim3(cs);
        cfg.blockDim = dim3(t);
        cudaLaunchAttribute at[1];
        at[0].id = cudaLaunchAttributeClusterDimension;
        at[0].val.clusterDim.x = cs; at[0].val.clusterDim.y = 1; at[0].val.clusterDim.z = 1;
        cfg.attrs = at; cfg.numAttrs = 1;
        cudaError_t e = cudaLaunchKernelEx(&cfg, cluster_sync_probe, 2000u, dout);
        cudaDeviceSynchronize();
        cudaMemcpy(h, dout, 8, cudaMemcpyDeviceToHost);
        printf("cluster.sync %2d blocks x %4d threads: %lld cycles (%s)\n", cs, t, h[0], cudaGetErrorString(e));
        if (t == 256) {
            e = cudaLaunchKernelEx(&cfg, dsmem_pingpong, 2000u, dout);
            cudaDeviceSynchronize();
            cudaMemcpy(h, dout, 8, cudaMemcpyDeviceToHost);
            printf("dsmem ping-pong rank0<->rank%d: %lld cycles round trip (%s)\n", cs - 1, h[0], cudaGetErrorString(e));
        }
    }
    {
        cudaLaunchConfig_t cfg = {};
        cfg.gridDim = dim3(2); cfg.blockDim = dim3(32);
        cudaLaunchAttribute at[1];
        at[0].id = cudaLaunchAttributeClusterDimension;
        at[0].val.clusterDim.x = 2; at[0].val.clusterDim.y = 1; at[0].val.clusterDim.z = 1;
        cfg.attrs = at; cfg.numAttrs = 1;
        cudaError_t e = cudaLaunchKernelEx(&cfg, dsmem_chase, 4000u, dout, sink);
        cudaDeviceSynchronize();
        cudaMemcpy(h, dout, 8, cudaMemcpyDeviceToHost);
        printf("dsmem chase: %lld cycles/load (%s)\n", h[0], cudaGetErrorString(e));
    }
    unsigned *flags;
    cudaMalloc(&flags, 4096);
    cudaMemset(flags, 0, 4096);
    global_pingpong<<<2, 32>>>(flags, 2000, dout);
    cudaDeviceSynchronize();
    cudaMemcpy(h, dout, 8, cudaMemcpyDeviceToHost);
    printf("global ping-pong: %lld cycles round trip\n", h[0]);
    atomics<<<1, 32>>>((float *)flags + 512, 2000, dout);
    cudaMemcpy(h, dout, 16, cudaMemcpyDeviceToHost);
    printf("atomicAdd float dependent: shared %lld, global %lld cycles\n", h[0], h[1]);
    int clk; cudaDeviceGetAttribute(&clk, cudaDevAttrClockRate, 0);
    printf("clock %d kHz; last error %s\n", clk, cudaGetErrorString(cudaGetLastError()));
}
