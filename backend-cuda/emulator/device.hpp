// The CUDA device environment the kernel sources expect, on CPU threads, so that the
// kernels in ../src/kernels can be compiled by a host C++ compiler and run against the
// CPU backend without a GPU. One std::thread per CUDA thread; a block's threads run
// together and blocks run one after another, so `__shared__` (a function-local static)
// is the running block's shared memory. Barriers (with `__syncthreads_or`'s vote), warp
// shuffles, the tensor-core mma and the ldmatrix fragment loads are collective operations
// over std::barrier (the mma's bf16 pair conversion, `pack_f32`, is a plain function), and
// `atomicMin` a compare-and-swap loop; the mma reassembles its operands
// from every lane's registers by the fragment layouts the PTX ISA documents for
// mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32, independently of the kernels'
// own loaders.
#pragma once

#include <atomic>
#include <barrier>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <functional>
#include <memory>
#include <thread>
#include <vector>

struct Dim3 {
    unsigned x = 0, y = 0, z = 0;
};

inline thread_local Dim3 threadIdx;
inline thread_local Dim3 blockIdx;
inline Dim3 blockDim;
inline Dim3 gridDim;

#define __global__
#define __device__
#define __forceinline__ inline
#define __launch_bounds__(...)
#define __shared__ static
#define __align__(bytes) __attribute__((aligned(bytes)))

// CUDA's built-in vectors: four floats (16 bytes), two or four unsigned ints (8 or 16
// bytes).
struct alignas(16) float4 {
    float x, y, z, w;
};
struct alignas(8) uint2 {
    unsigned x, y;
};
struct alignas(16) uint4 {
    unsigned x, y, z, w;
};

inline unsigned min(unsigned a, unsigned b) { return a < b ? a : b; }
inline float __expf(float x) { return std::exp(x); }
inline float __int_as_float(int x) {
    float f;
    std::memcpy(&f, &x, 4);
    return f;
}
inline float __uint_as_float(unsigned x) {
    float f;
    std::memcpy(&f, &x, 4);
    return f;
}
inline unsigned __float_as_uint(float x) {
    unsigned u;
    std::memcpy(&u, &x, 4);
    return u;
}

namespace emulator {

constexpr unsigned kWarp = 32;
constexpr unsigned kMaxWarps = 32;

// The running block's barriers and the buffers its collectives exchange through.
struct Block {
    explicit Block(unsigned threads) : all(threads) {
        for (unsigned w = 0; w < (threads + kWarp - 1) / kWarp; w++) {
            warps.push_back(std::make_unique<std::barrier<>>(kWarp));
        }
    }
    std::barrier<> all;
    std::vector<std::unique_ptr<std::barrier<>>> warps;
    std::atomic<int> vote{0};
    float shuffled[kMaxWarps][kWarp];
    unsigned a[kMaxWarps][kWarp][4];
    unsigned b[kMaxWarps][kWarp][2];
    const unsigned short* rows[kMaxWarps][kWarp];
};

inline Block* running = nullptr;

inline unsigned lane() { return threadIdx.x % kWarp; }
inline unsigned warp() { return threadIdx.x / kWarp; }
inline void warp_sync() { running->warps[warp()]->arrive_and_wait(); }

// Runs `kernel` on a grid of (gx, gy) blocks of `threads` threads.
inline void launch(unsigned gx, unsigned gy, unsigned threads, const std::function<void()>& kernel) {
    gridDim = Dim3{gx, gy, 1};
    blockDim = Dim3{threads, 1, 1};
    for (unsigned by = 0; by < gy; by++) {
        for (unsigned bx = 0; bx < gx; bx++) {
            Block block(threads);
            running = &block;
            std::vector<std::thread> pool;
            for (unsigned t = 0; t < threads; t++) {
                pool.emplace_back([&, t] {
                    threadIdx = Dim3{t, 0, 0};
                    blockIdx = Dim3{bx, by, 0};
                    kernel();
                });
            }
            for (auto& thread : pool) {
                thread.join();
            }
            running = nullptr;
        }
    }
}

// The value of a bf16 held in the low (`high` false) or high half of a register.
inline float bf16_half(unsigned reg, bool high) {
    unsigned bits = (high ? reg >> 16 : reg & 0xffffu) << 16;
    return __int_as_float((int)bits);
}

// The bf16 bits of x rounded to nearest even (a NaN stays a quiet NaN).
inline unsigned round_bf16(float x) {
    unsigned bits;
    std::memcpy(&bits, &x, 4);
    if ((bits & 0x7fffffffu) > 0x7f800000u) {
        return (bits >> 16) | 0x40u;
    }
    return (bits + 0x7fffu + ((bits >> 16) & 1u)) >> 16;
}

}  // namespace emulator

// cvt.rn.bf16x2.f32: `low` and `high` rounded to bf16, `low` in the low half.
inline unsigned pack_f32(float low, float high) {
    return emulator::round_bf16(low) | (emulator::round_bf16(high) << 16);
}

inline void __syncthreads() { emulator::running->all.arrive_and_wait(); }
inline void __syncwarp() { emulator::warp_sync(); }

// A block barrier that returns nonzero to every thread when any thread's `predicate` is
// nonzero: votes in, a barrier, every thread reads, a barrier, the vote cleared, a
// barrier (so that the next call starts from zero).
inline int __syncthreads_or(int predicate) {
    auto* block = emulator::running;
    if (predicate) {
        block->vote.store(1);
    }
    block->all.arrive_and_wait();
    const int any = block->vote.load();
    block->all.arrive_and_wait();
    if (threadIdx.x == 0) {
        block->vote.store(0);
    }
    block->all.arrive_and_wait();
    return any;
}

// *address = min(*address, value) as one atomic step; returns the old value.
inline unsigned atomicMin(unsigned* address, unsigned value) {
    std::atomic_ref<unsigned> cell(*address);
    unsigned old = cell.load();
    while (value < old && !cell.compare_exchange_weak(old, value)) {
    }
    return old;
}

inline float shuffle(float v, unsigned source) {
    using namespace emulator;
    running->shuffled[warp()][lane()] = v;
    warp_sync();
    const float got = running->shuffled[warp()][source % kWarp];
    warp_sync();
    return got;
}
inline float __shfl_xor_sync(unsigned, float v, int mask) { return shuffle(v, emulator::lane() ^ (unsigned)mask); }
inline float __shfl_sync(unsigned, float v, int source) { return shuffle(v, (unsigned)source); }

// ldmatrix.sync.aligned.m8n8.x4{.trans}.shared.b16 for the warp: lanes 8m .. 8m + 7 give
// the addresses of matrix m's 8 rows of 8 bf16; register m of lane 4g + t receives row g,
// columns 2t and 2t + 1 of matrix m (the lower column in the low half), or with `trans`
// column g, rows 2t and 2t + 1. A row address that is not 16-byte aligned, which the GPU
// refuses, stops the process.
inline void load_matrices(unsigned r[4], const unsigned short* row, bool trans) {
    using namespace emulator;
    if (reinterpret_cast<std::uintptr_t>(row) % 16 != 0) {
        std::fprintf(stderr, "ldmatrix: a row address is not 16-byte aligned\n");
        std::abort();
    }
    Block& blk = *running;
    const unsigned w = warp();
    blk.rows[w][lane()] = row;
    warp_sync();
    const unsigned g = lane() / 4, t = lane() % 4;
    for (unsigned m = 0; m < 4; m++) {
        const unsigned short* const* matrix = blk.rows[w] + 8 * m;
        const unsigned low = trans ? matrix[2 * t][g] : matrix[g][2 * t];
        const unsigned high = trans ? matrix[2 * t + 1][g] : matrix[g][2 * t + 1];
        r[m] = low | (high << 16);
    }
    warp_sync();
}
inline void ldmatrix_x4(unsigned r[4], const unsigned short* row) { load_matrices(r, row, false); }
inline void ldmatrix_x4_trans(unsigned r[4], const unsigned short* row) { load_matrices(r, row, true); }

// d += a . b for the warp: A 16 x 16, B 16 x 8, C 16 x 8, every lane contributing its
// fragment registers. Layouts (lane = 4 g + t): a register i of A holds row g + 8 (i % 2),
// columns 2 t + 8 (i / 2) and + 1; a register i of B holds rows 2 t + 8 i and + 1, column
// g; d holds rows g, g, g + 8, g + 8 and columns 2 t, 2 t + 1, 2 t, 2 t + 1.
inline void mma_bf16(float d[4], const unsigned a[4], const unsigned b[2]) {
    using namespace emulator;
    Block& blk = *running;
    const unsigned w = warp();
    std::memcpy(blk.a[w][lane()], a, sizeof(unsigned) * 4);
    std::memcpy(blk.b[w][lane()], b, sizeof(unsigned) * 2);
    warp_sync();
    float A[16][16];
    float B[16][8];
    for (unsigned l = 0; l < kWarp; l++) {
        const unsigned g = l / 4, t = l % 4;
        for (unsigned i = 0; i < 4; i++) {
            const unsigned row = g + 8 * (i % 2), col = 2 * t + 8 * (i / 2);
            A[row][col] = bf16_half(blk.a[w][l][i], false);
            A[row][col + 1] = bf16_half(blk.a[w][l][i], true);
        }
        for (unsigned i = 0; i < 2; i++) {
            const unsigned row = 2 * t + 8 * i;
            B[row][g] = bf16_half(blk.b[w][l][i], false);
            B[row + 1][g] = bf16_half(blk.b[w][l][i], true);
        }
    }
    warp_sync();
    const unsigned g = lane() / 4, t = lane() % 4;
    for (unsigned e = 0; e < 4; e++) {
        const unsigned row = g + 8 * (e / 2), col = 2 * t + e % 2;
        float sum = d[e];
        for (unsigned kk = 0; kk < 16; kk++) {
            sum += A[row][kk] * B[kk][col];
        }
        d[e] = sum;
    }
}
