// hip_emu.h: run rendered HIP (the plygrad hip renderer's header-free source) on the CPU, for tests only.
//
// Built on cuda_emu.h, which it includes: the same launcher (each GPU thread a fiber, blocks one after another, a
// barrier a switch to the next thread in a fixed order, `static` shared arrays one per block), the same alignment
// check on `__builtin_assume_aligned`, the same `threadIdx`/`blockIdx`. What the hip renderer spells differently is
// mapped onto it here:
//
// - the launch indices are clang builtins: `__builtin_amdgcn_workitem_id_x()` is `threadIdx.x`,
//   `__builtin_amdgcn_workgroup_id_x()` is `blockIdx.x`;
// - a barrier is `__builtin_amdgcn_s_barrier()` between two workgroup fences: the barrier is `__syncthreads()`, the
//   fences nothing (one fiber runs at a time, so every write is seen by the next one to run);
// - `__attribute__((global/device/shared/constant))`, `amdgpu_flat_work_group_size` and `#pragma clang fp` mean
//   nothing to g++, which ignores them (the harness builds with -w); shared arrays are `static` in the source
//   itself, as cuda_emu.h makes `__shared__`;
// - `__builtin_bit_cast`, `__builtin_nanf`, `__builtin_sqrtf`, `__builtin_exp2f`... are g++ builtins too (the
//   float32 exp2/log2 builtins are the host libm's here, v_exp_f32/v_log_f32 on the device: within an ulp);
// - the matrix-core helpers (codegen/renderer/hip_mma.py) are wavefront-collective: defined below (last section),
//   with the lane layouts of AMD's ISA documents written out here a second time, independently of codegen.
//
// What this cannot show: what the AMDGPU backend does with the source (pair it with the clang-19 compile to code
// objects), and wave-level behaviour the source does not spell (there is none: no shuffles, no ballots).
#pragma once

#include "cuda_emu.h"

#define __builtin_amdgcn_workitem_id_x() (threadIdx.x)
#define __builtin_amdgcn_workitem_id_y() (threadIdx.y)
#define __builtin_amdgcn_workitem_id_z() (threadIdx.z)
#define __builtin_amdgcn_workgroup_id_x() (blockIdx.x)
#define __builtin_amdgcn_workgroup_id_y() (blockIdx.y)
#define __builtin_amdgcn_workgroup_id_z() (blockIdx.z)
#define __builtin_amdgcn_s_barrier() __syncthreads()
#define __builtin_amdgcn_fence(order, scope) ((void)0)

// ---- matrix cores: plygrad's WMMA (RDNA3) and MFMA (CDNA) helpers --------------------------------------------------
// `plygrad_wmma_f32_16x16x16_f16_w32(d, a0..a15, b0..b15)` (and `_bf16_w32`): the 32 lanes of a wave32 wavefront
// compute D = A * B + D on one 16x16x16 tile. Per AMD's RDNA3 ISA ("WMMA" matrix layouts), with col = lane % 16:
// a lane's A elements are row `col` of A (a_i = A[col][i]; lanes 16..31 hold the same as lanes 0..15), its B
// elements column `col` of B (b_i = B[i][col]), and its 8 accumulators D[2i + lane / 16][col].
// `plygrad_mfma_f32_16x16x16_f16(d, a0..a3, b0..b3)` (and `_bf16`): the 64 lanes of a wave64 wavefront, per AMD's
// CDNA ISA (v_mfma_f32_16x16x16f16), with col = lane % 16 and quad = lane / 16: a_i = A[col][4 quad + i],
// b_i = B[4 quad + i][col], and 4 accumulators D[4 quad + i][col].
//
// Each lane deposits its elements in its wavefront's scratch tiles (wavefront = linear thread index / lanes), a
// barrier, then each lane computes its D elements from the whole tiles (products of 16-bit floats are exact in float;
// the sum is in float, k ascending), and a second barrier keeps the next call's deposits from overwriting tiles
// another lane still reads. A wavefront whose lanes do not all make the call, or WMMA lanes 16..31 that disagree with
// lanes 0..15, get NaN in every D element (and a line on stderr): the results show it.
namespace hip_emu {
struct Tiles {
    float a[16][16];
    float b[16][16];
    float c[16][16];
    bool a_set[16][16];
    bool b_set[16][16];
    bool mismatch = false;
    unsigned arrived = 0;
    unsigned read = 0;
};
inline thread_local std::vector<Tiles> tiles;  // one per wavefront of the running block

inline float f16_bits(unsigned short bits) { return cuda_emu::f16_bits_to_float(bits); }
inline float bf16_bits(unsigned short bits) { return cuda_emu::bf16_bits_to_float(bits); }

// where lane `lane`'s element i of A, B and D sits (row, column), for the two instruction families
struct Wmma {
    static constexpr unsigned lanes = 32, elements = 16, accumulators = 8;
    static void a(unsigned lane, unsigned i, unsigned& r, unsigned& c) { r = lane % 16; c = i; }
    static void b(unsigned lane, unsigned i, unsigned& r, unsigned& c) { r = i; c = lane % 16; }
    static void d(unsigned lane, unsigned i, unsigned& r, unsigned& c) { r = 2 * i + lane / 16; c = lane % 16; }
};
struct Mfma {
    static constexpr unsigned lanes = 64, elements = 4, accumulators = 4;
    static void a(unsigned lane, unsigned i, unsigned& r, unsigned& c) { r = lane % 16; c = 4 * (lane / 16) + i; }
    static void b(unsigned lane, unsigned i, unsigned& r, unsigned& c) { r = 4 * (lane / 16) + i; c = lane % 16; }
    static void d(unsigned lane, unsigned i, unsigned& r, unsigned& c) { r = 4 * (lane / 16) + i; c = lane % 16; }
};

inline void deposit(float (&tile)[16][16], bool (&set)[16][16], unsigned r, unsigned c, float value, bool& mismatch) {
    if (set[r][c] && !(tile[r][c] == value || (tile[r][c] != tile[r][c] && value != value))) mismatch = true;
    tile[r][c] = value;
    set[r][c] = true;
}

template <class Layout, float (*ToFloat)(unsigned short), class... Bits>
inline void matrix_core(float* d, Bits... bits) {
    static_assert(sizeof...(Bits) == 2 * Layout::elements, "A and B elements of one lane");
    if (cuda_emu::current == nullptr || cuda_emu::independent) {
        fprintf(stderr, "hip_emu: a matrix-core helper in a kernel launched without cooperative scheduling\n");
        abort();
    }
    if (tiles.size() < cuda_emu::kMaxThreadsPerBlock / Layout::lanes) tiles.resize(cuda_emu::kMaxThreadsPerBlock / 32);
    unsigned thread = threadIdx.x + blockDim.x * (threadIdx.y + blockDim.y * threadIdx.z);
    unsigned lane = thread % Layout::lanes;
    Tiles& t = tiles[thread / Layout::lanes];
    if (t.arrived == 0) {
        for (auto& row : t.a_set) for (bool& s : row) s = false;
        for (auto& row : t.b_set) for (bool& s : row) s = false;
        t.mismatch = false;
    }
    const unsigned short values[] = {static_cast<unsigned short>(bits)...};
    unsigned r = 0, c = 0;
    for (unsigned i = 0; i < Layout::elements; ++i) {
        Layout::a(lane, i, r, c);
        deposit(t.a, t.a_set, r, c, ToFloat(values[i]), t.mismatch);
        Layout::b(lane, i, r, c);
        deposit(t.b, t.b_set, r, c, ToFloat(values[Layout::elements + i]), t.mismatch);
    }
    for (unsigned i = 0; i < Layout::accumulators; ++i) {
        Layout::d(lane, i, r, c);
        t.c[r][c] = d[i];
    }
    ++t.arrived;
    __syncthreads();
    bool whole = t.arrived == Layout::lanes && !t.mismatch;
    for (unsigned i = 0; i < Layout::accumulators; ++i) {
        Layout::d(lane, i, r, c);
        float sum = t.c[r][c];
        for (unsigned k = 0; k < 16; ++k) sum += t.a[r][k] * t.b[k][c];
        d[i] = whole ? sum : NAN;
    }
    static bool reported = false;
    if (!whole && !reported) {
        reported = true;
        fprintf(stderr, "hip_emu: a %u-lane matrix-core call in wavefront %u of block (%u, %u, %u) was made by %u lanes%s; "
                "D is NaN\n", Layout::lanes, thread / Layout::lanes, blockIdx.x, blockIdx.y, blockIdx.z, t.arrived,
                t.mismatch ? " and lanes holding one tile element disagree" : "");
    }
    if (++t.read == t.arrived) t.arrived = t.read = 0;
    __syncthreads();
}
}  // namespace hip_emu
#define plygrad_wmma_f32_16x16x16_f16_w32 ::hip_emu::matrix_core<::hip_emu::Wmma, ::hip_emu::f16_bits>
#define plygrad_wmma_f32_16x16x16_bf16_w32 ::hip_emu::matrix_core<::hip_emu::Wmma, ::hip_emu::bf16_bits>
#define plygrad_mfma_f32_16x16x16_f16 ::hip_emu::matrix_core<::hip_emu::Mfma, ::hip_emu::f16_bits>
#define plygrad_mfma_f32_16x16x16_bf16 ::hip_emu::matrix_core<::hip_emu::Mfma, ::hip_emu::bf16_bits>
