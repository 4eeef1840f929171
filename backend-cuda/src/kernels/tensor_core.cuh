// The tensor-core instruction of the kernels that use one (flash.cu), with the fragment
// loads and the conversion that feed it, prepended to their source after common.cuh;
// the kernel emulator (../../emulator) defines the same functions on CPU threads. The
// ldmatrix asm reads shared memory the block wrote before a __syncthreads, which the
// compiler does not move it across.

// d += a . b for one warp, every lane taking part: a 16 x 16 bf16 A fragment (4
// registers), a 16 x 8 bf16 B fragment (2 registers), a 16 x 8 f32 accumulator (4 floats);
// the layouts are in flash.cu's header.
__device__ __forceinline__ void mma_bf16(float d[4], const u32 a[4], const u32 b[2]) {
    asm volatile(
        "mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32 "
        "{%0, %1, %2, %3}, {%4, %5, %6, %7}, {%8, %9}, {%0, %1, %2, %3};\n"
        : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3])
        : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b[0]), "r"(b[1]));
}

// Two f32 as bf16 in one register, `low` in the low half, each rounded to nearest even as
// to_bf16 rounds it: one instruction for the pair, where to_bf16 takes several per value.
__device__ __forceinline__ u32 pack_f32(float low, float high) {
    u32 packed;
    asm("cvt.rn.bf16x2.f32 %0, %1, %2;\n" : "=r"(packed) : "f"(high), "f"(low));
    return packed;
}

// The shared-memory address of `at`, a pointer into a __shared__ array.
__device__ __forceinline__ u32 shared_address(const void* at) {
    u32 address;
    asm("{ .reg .u64 a; cvta.to.shared.u64 a, %1; cvt.u32.u64 %0, a; }\n"
        : "=r"(address)
        : "l"(at));
    return address;
}

// ldmatrix .x4: four 8 x 8 bf16 matrices from shared memory, whose 8 rows of 16 bytes
// lanes 8m .. 8m + 7 point at (`row`: this lane's row of matrix m = lane / 8). Register m
// of lane 4g + t then holds matrix m's row g, columns 2t and 2t + 1, the one of lower
// column in its low half; with `_trans`, its column g, rows 2t and 2t + 1.
__device__ __forceinline__ void ldmatrix_x4(u32 r[4], const bf16* row) {
    asm volatile("ldmatrix.sync.aligned.m8n8.x4.shared.b16 {%0, %1, %2, %3}, [%4];\n"
                 : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3])
                 : "r"(shared_address(row)));
}
__device__ __forceinline__ void ldmatrix_x4_trans(u32 r[4], const bf16* row) {
    asm volatile("ldmatrix.sync.aligned.m8n8.x4.trans.shared.b16 {%0, %1, %2, %3}, [%4];\n"
                 : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3])
                 : "r"(shared_address(row)));
}
