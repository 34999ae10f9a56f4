// cuda_emu.h: run rendered CUDA C on the CPU, for tests only (no GPU in CI).
//
// The rendered kernel is compiled as host C++20 with this header included first. Every GPU thread of a block is one
// fiber (ucontext) on the calling host thread; blocks run one after another. What the emulation shows is what the
// kernel *means* (indexing, barriers, shared memory, reductions, casts, fp16/bf16 rounding), not what the GPU
// compiler does with it: pair it with the nvcc/NVRTC compile to a cubin.
//
// Scheduling. A kernel that uses `__syncthreads` runs "cooperatively": exactly one fiber of the block runs at a time,
// in a fixed order (thread 0, 1, 2, ... or the reverse), and hands on only when it reaches `__syncthreads()` or
// returns. Fibers rather than OS threads (one per GPU thread) make every run deterministic and a switch cheap, and
// they make a missing barrier fail every time rather than once in a while: in forward order thread 0 runs to its next
// barrier before thread 1 has written anything, so a read of another thread's shared-memory slot that no barrier
// orders sees the old value. Threads that returned early no longer take part in barriers (as on sm_70+). A kernel
// without `__syncthreads` cannot communicate between its threads, so it runs "independently": its threads one after
// another as plain calls (the fast path; the Python side picks the mode from the source).
//
// `__shared__` is `static`: a static local is one object for every fiber running the kernel function, which is
// exactly "one per block" because blocks run one at a time (and launches on different host threads must not overlap
// for one kernel: the Python side runs one launch at a time). Dynamic shared memory (`extern __shared__`), warp
// shuffles/votes, inline PTX in general and the WMMA API are not emulated (a compile error names what is missing);
// plygrad's own tensor-core helper, inline-PTX mma.sync on the device, is (the last section).
//
// Numerics: float/double arithmetic is the host's IEEE arithmetic (build with -ffp-contract=off, as the device code
// must not contract either); `__half`/`__nv_bfloat16` store 16 bits and convert with round-to-nearest-even exactly
// like the device intrinsics; math functions are the host libm's (within a few ulp of the device's; the fast-math
// intrinsics `__expf` etc. are mapped to the accurate host versions).
#pragma once

#include <math.h>
#include <ucontext.h>

#include <algorithm>
#include <atomic>
#include <bit>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <type_traits>
#include <vector>

#ifndef __FLT16_MAX__
#error "cuda_emu.h needs a C++ compiler with _Float16 (g++ >= 12 or clang on x86-64/aarch64)"
#endif

#define __global__
#define __device__
#define __host__
#define __forceinline__ inline
#define __noinline__ __attribute__((noinline))
#define __launch_bounds__(...)
#define __restrict__ __restrict
#define __align__(n) __attribute__((aligned(n)))
#define __shared__ static
#define __constant__ static

// ---- thread and block indices -------------------------------------------------------------------------------------
struct uint3 { unsigned x, y, z; };
struct dim3 { unsigned x = 1, y = 1, z = 1; };
inline thread_local uint3 threadIdx{0, 0, 0};
inline thread_local uint3 blockIdx{0, 0, 0};
inline thread_local dim3 blockDim{};
inline thread_local dim3 gridDim{};
constexpr int warpSize = 32;

// ---- bit casts -----------------------------------------------------------------------------------------------------
inline float __int_as_float(int v) { return std::bit_cast<float>(v); }
inline int __float_as_int(float v) { return std::bit_cast<int>(v); }
inline float __uint_as_float(unsigned v) { return std::bit_cast<float>(v); }
inline unsigned __float_as_uint(float v) { return std::bit_cast<unsigned>(v); }
inline double __longlong_as_double(long long v) { return std::bit_cast<double>(v); }
inline long long __double_as_longlong(double v) { return std::bit_cast<long long>(v); }

// ---- __half and __nv_bfloat16 --------------------------------------------------------------------------------------
namespace cuda_emu {
inline std::uint16_t f32_to_bf16_bits(float f) {
    std::uint32_t u = std::bit_cast<std::uint32_t>(f);
    if ((u & 0x7fffffffu) > 0x7f800000u) return static_cast<std::uint16_t>((u >> 16) | 0x40u);  // quiet NaN
    u += 0x7fffu + ((u >> 16) & 1u);  // round to nearest, ties to even
    return static_cast<std::uint16_t>(u >> 16);
}
// double -> float rounding to odd, then float -> bf16 to nearest even: one correctly rounded double -> bf16 step
inline float f64_to_f32_round_odd(double d) {
    float f = static_cast<float>(d);
    if (static_cast<double>(f) == d || std::isnan(d) || std::isinf(f)) return f;
    if ((std::bit_cast<std::uint32_t>(f) & 1u) == 0) f = nextafterf(f, d > f ? INFINITY : -INFINITY);
    return f;
}
}  // namespace cuda_emu

struct __half {
    std::uint16_t __x = 0;
    __half() = default;
    __half(float f) : __x(std::bit_cast<std::uint16_t>(static_cast<_Float16>(f))) {}
    __half(double d) : __x(std::bit_cast<std::uint16_t>(static_cast<_Float16>(d))) {}
    __half(int i) : __half(static_cast<float>(i)) {}
    __half(unsigned i) : __half(static_cast<float>(i)) {}
    __half(long long i) : __half(static_cast<float>(i)) {}
    __half(unsigned long long i) : __half(static_cast<float>(i)) {}
    operator float() const { return static_cast<float>(std::bit_cast<_Float16>(__x)); }
};
struct __nv_bfloat16 {
    std::uint16_t __x = 0;
    __nv_bfloat16() = default;
    __nv_bfloat16(float f) : __x(cuda_emu::f32_to_bf16_bits(f)) {}
    __nv_bfloat16(double d) : __x(cuda_emu::f32_to_bf16_bits(cuda_emu::f64_to_f32_round_odd(d))) {}
    __nv_bfloat16(int i) : __nv_bfloat16(static_cast<double>(i)) {}
    __nv_bfloat16(unsigned i) : __nv_bfloat16(static_cast<double>(i)) {}
    __nv_bfloat16(long long i) : __nv_bfloat16(static_cast<double>(i)) {}
    __nv_bfloat16(unsigned long long i) : __nv_bfloat16(static_cast<double>(i)) {}
    operator float() const { return std::bit_cast<float>(static_cast<std::uint32_t>(__x) << 16); }
};
typedef __half half;
typedef __nv_bfloat16 nv_bfloat16;
struct __align__(4) __half2 { __half x, y; };
struct __align__(4) __nv_bfloat162 { __nv_bfloat16 x, y; };
typedef __half2 half2;

inline __half __float2half(float f) { return __half(f); }
inline __half __float2half_rn(float f) { return __half(f); }
inline __half __double2half(double d) { return __half(d); }
inline float __half2float(__half h) { return static_cast<float>(h); }
inline __nv_bfloat16 __float2bfloat16(float f) { return __nv_bfloat16(f); }
inline __nv_bfloat16 __float2bfloat16_rn(float f) { return __nv_bfloat16(f); }
inline __nv_bfloat16 __double2bfloat16(double d) { return __nv_bfloat16(d); }
inline float __bfloat162float(__nv_bfloat16 b) { return static_cast<float>(b); }
inline unsigned short __half_as_ushort(__half h) { return h.__x; }
inline short __half_as_short(__half h) { return static_cast<short>(h.__x); }
inline __half __ushort_as_half(unsigned short v) { __half h; h.__x = v; return h; }
inline __half __short_as_half(short v) { return __ushort_as_half(static_cast<unsigned short>(v)); }
inline unsigned short __bfloat16_as_ushort(__nv_bfloat16 b) { return b.__x; }
inline short __bfloat16_as_short(__nv_bfloat16 b) { return static_cast<short>(b.__x); }
inline __nv_bfloat16 __ushort_as_bfloat16(unsigned short v) { __nv_bfloat16 b; b.__x = v; return b; }
inline __nv_bfloat16 __short_as_bfloat16(short v) { return __ushort_as_bfloat16(static_cast<unsigned short>(v)); }
inline __half2 __halves2half2(__half a, __half b) { return {a, b}; }
inline __half2 make_half2(__half a, __half b) { return {a, b}; }
inline __nv_bfloat162 make_bfloat162(__nv_bfloat16 a, __nv_bfloat16 b) { return {a, b}; }
inline bool __hisnan(__half h) { return isnan(static_cast<float>(h)); }
inline bool __hisnan(__nv_bfloat16 h) { return isnan(static_cast<float>(h)); }

// device arithmetic on the 16-bit types: computed in float (exact for +,-,* of two halves), rounded once
#define CUDA_EMU_HALF_OPS(T)                                                                                    \
    inline T operator+(T a, T b) { return T(static_cast<float>(a) + static_cast<float>(b)); }                   \
    inline T operator-(T a, T b) { return T(static_cast<float>(a) - static_cast<float>(b)); }                   \
    inline T operator*(T a, T b) { return T(static_cast<float>(a) * static_cast<float>(b)); }                   \
    inline T operator/(T a, T b) { return T(static_cast<float>(a) / static_cast<float>(b)); }                   \
    inline T operator-(T a) { T r = a; r.__x ^= 0x8000u; return r; }                                            \
    inline bool operator==(T a, T b) { return static_cast<float>(a) == static_cast<float>(b); }                 \
    inline bool operator!=(T a, T b) { return static_cast<float>(a) != static_cast<float>(b); }                 \
    inline bool operator<(T a, T b) { return static_cast<float>(a) < static_cast<float>(b); }                   \
    inline bool operator<=(T a, T b) { return static_cast<float>(a) <= static_cast<float>(b); }                 \
    inline bool operator>(T a, T b) { return static_cast<float>(a) > static_cast<float>(b); }                   \
    inline bool operator>=(T a, T b) { return static_cast<float>(a) >= static_cast<float>(b); }                 \
    inline T& operator+=(T& a, T b) { return a = a + b; }                                                       \
    inline T& operator-=(T& a, T b) { return a = a - b; }                                                       \
    inline T& operator*=(T& a, T b) { return a = a * b; }                                                       \
    inline T& operator/=(T& a, T b) { return a = a / b; }                                                       \
    inline T __hadd(T a, T b) { return a + b; }                                                                 \
    inline T __hsub(T a, T b) { return a - b; }                                                                 \
    inline T __hmul(T a, T b) { return a * b; }                                                                 \
    inline T __hdiv(T a, T b) { return a / b; }                                                                 \
    inline T __hneg(T a) { return -a; }                                                                         \
    inline T __habs(T a) { T r = a; r.__x &= 0x7fffu; return r; }                                               \
    inline T __hmax(T a, T b) { return T(fmaxf(static_cast<float>(a), static_cast<float>(b))); }                \
    inline T __hmin(T a, T b) { return T(fminf(static_cast<float>(a), static_cast<float>(b))); }
CUDA_EMU_HALF_OPS(__half)
CUDA_EMU_HALF_OPS(__nv_bfloat16)
#undef CUDA_EMU_HALF_OPS

// ---- vector types --------------------------------------------------------------------------------------------------
#define CUDA_EMU_VEC(T, N, A)                                                                                   \
    struct __align__(A) N##2 { T x, y; };                                                                       \
    struct __align__(A * 2) N##4 { T x, y, z, w; };                                                             \
    inline N##2 make_##N##2(T x, T y) { return {x, y}; }                                                        \
    inline N##3 make_##N##3(T x, T y, T z) { return {x, y, z}; }                                                \
    inline N##4 make_##N##4(T x, T y, T z, T w) { return {x, y, z, w}; }
#define CUDA_EMU_VEC3(T, N) struct N##3 { T x, y, z; };
CUDA_EMU_VEC3(float, float)
CUDA_EMU_VEC3(int, int)
CUDA_EMU_VEC3(double, double)
CUDA_EMU_VEC3(long long, longlong)
CUDA_EMU_VEC3(char, char)
CUDA_EMU_VEC3(unsigned char, uchar)
CUDA_EMU_VEC3(short, short)
CUDA_EMU_VEC3(unsigned short, ushort)
CUDA_EMU_VEC(float, float, 8)
CUDA_EMU_VEC(int, int, 8)
CUDA_EMU_VEC(unsigned, uint, 8)  // uint3 is threadIdx's type, above
CUDA_EMU_VEC(double, double, 16)
CUDA_EMU_VEC(long long, longlong, 16)
CUDA_EMU_VEC(char, char, 2)
CUDA_EMU_VEC(unsigned char, uchar, 2)
CUDA_EMU_VEC(short, short, 4)
CUDA_EMU_VEC(unsigned short, ushort, 4)
#undef CUDA_EMU_VEC
#undef CUDA_EMU_VEC3

// ---- math ----------------------------------------------------------------------------------------------------------
// min/max overloads as CUDA declares them: the usual arithmetic conversions, float versions ignore a NaN (fmaxf)
template <class A, class B>
inline auto max(A a, B b) -> std::common_type_t<A, B> {
    using T = std::common_type_t<A, B>;
    if constexpr (std::is_floating_point_v<T>) return fmax(static_cast<T>(a), static_cast<T>(b));
    else return static_cast<T>(a) < static_cast<T>(b) ? static_cast<T>(b) : static_cast<T>(a);
}
template <class A, class B>
inline auto min(A a, B b) -> std::common_type_t<A, B> {
    using T = std::common_type_t<A, B>;
    if constexpr (std::is_floating_point_v<T>) return fmin(static_cast<T>(a), static_cast<T>(b));
    else return static_cast<T>(b) < static_cast<T>(a) ? static_cast<T>(b) : static_cast<T>(a);
}
inline float __fadd_rn(float a, float b) { return a + b; }
inline float __fsub_rn(float a, float b) { return a - b; }
inline float __fmul_rn(float a, float b) { return a * b; }
inline float __fdiv_rn(float a, float b) { return a / b; }
inline float __frcp_rn(float a) { return 1.0f / a; }
inline float __fsqrt_rn(float a) { return sqrtf(a); }
inline float __fmaf_rn(float a, float b, float c) { return fmaf(a, b, c); }
inline double __dadd_rn(double a, double b) { return a + b; }
inline double __dsub_rn(double a, double b) { return a - b; }
inline double __dmul_rn(double a, double b) { return a * b; }
inline double __ddiv_rn(double a, double b) { return a / b; }
inline double __fma_rn(double a, double b, double c) { return fma(a, b, c); }
inline float __fdividef(float a, float b) { return a / b; }
inline float __expf(float a) { return expf(a); }
inline float __exp2f(float a) { return exp2f(a); }
inline float __logf(float a) { return logf(a); }
inline float __log2f(float a) { return log2f(a); }
inline float __sinf(float a) { return sinf(a); }
inline float __cosf(float a) { return cosf(a); }
inline float __powf(float a, float b) { return powf(a, b); }
inline float rsqrtf(float a) { return 1.0f / sqrtf(a); }
inline double rsqrt(double a) { return 1.0 / sqrt(a); }
inline float __saturatef(float a) { return isnan(a) ? 0.0f : fminf(fmaxf(a, 0.0f), 1.0f); }

// ---- atomics (one fiber runs at a time, but a kernel may also be launched from several host threads) -------------
template <class T>
inline T atomicAdd(T* addr, T v) { return std::atomic_ref<T>(*addr).fetch_add(v); }
template <class T>
inline T atomicMax(T* addr, T v) {
    std::atomic_ref<T> ref(*addr);
    T old = ref.load();
    while (old < v && !ref.compare_exchange_weak(old, v)) {}
    return old;
}
template <class T>
inline T atomicMin(T* addr, T v) {
    std::atomic_ref<T> ref(*addr);
    T old = ref.load();
    while (v < old && !ref.compare_exchange_weak(old, v)) {}
    return old;
}
inline void __threadfence() { std::atomic_thread_fence(std::memory_order_seq_cst); }
inline void __threadfence_block() { std::atomic_thread_fence(std::memory_order_seq_cst); }

// ---- aligned vector accesses -------------------------------------------------------------------------------------
// The plygrad cuda renderer reads and writes vectors (plygrad_float4, plygrad_half8, ...) through helpers that state
// the alignment the access needs with `__builtin_assume_aligned(p, size)`. On the device that is a fact the compiler
// relies on (one ld.global.v4; a misaligned one faults), while on x86 a misaligned load silently works. So here the
// builtin is a check: the first misaligned address of a launch is recorded, the launch goes on (the host reads
// it fine) and then fails with that address, the access size and the GPU thread that made it.
namespace cuda_emu {
inline thread_local char alignment_error[320] = "";

inline void* checked_aligned(const void* p, unsigned long long align) {
    auto address = static_cast<unsigned long long>(reinterpret_cast<std::uintptr_t>(p));
    if (align != 0 && address % align != 0 && alignment_error[0] == '\0') {
        snprintf(alignment_error, sizeof alignment_error,
                 "misaligned vector access: %llu bytes at address 0x%llx (%llu bytes past a %llu-byte boundary) in "
                 "block (%u, %u, %u) thread (%u, %u, %u); a vector access must be aligned to its size",
                 align, address, address % align, align, blockIdx.x, blockIdx.y, blockIdx.z, threadIdx.x,
                 threadIdx.y, threadIdx.z);
    }
    return const_cast<void*>(p);
}
}  // namespace cuda_emu
#define __builtin_assume_aligned(p, align) cuda_emu::checked_aligned((p), (align))

// ---- the launcher --------------------------------------------------------------------------------------------------
namespace cuda_emu {
constexpr unsigned kMaxThreadsPerBlock = 1024;
constexpr std::size_t kStackBytes = 128 * 1024;  // per GPU thread; kernels keep little on the stack

// A cooperative launch: each GPU thread of the block is a fiber (ucontext) on the launching host thread, so one
// runs at a time and a switch costs a function call, not an OS context switch (a 256-thread block reduction with
// 9 barriers is ~2,500 switches). The scheduler gives each live fiber the turn in `order`; a fiber gives it back
// at `__syncthreads()` or when it returns.
struct Cooperative {
    ucontext_t scheduler;
    std::vector<ucontext_t> fibers;
    std::vector<char> done;
    std::unique_ptr<char[]> stacks;  // uninitialized: only the pages a fiber touches are ever committed
    void (*run)(void*) = nullptr;
    void* body = nullptr;
    unsigned running = 0;
};
inline thread_local Cooperative* current = nullptr;
inline thread_local bool independent = false;

inline void fiber_entry() {
    Cooperative& state = *current;
    state.run(state.body);
    state.done[state.running] = 1;
    // returning resumes `uc_link`, the scheduler
}

inline void set_block(const dim3& grid, unsigned long long b) {
    blockIdx = {static_cast<unsigned>(b % grid.x), static_cast<unsigned>((b / grid.x) % grid.y),
                static_cast<unsigned>(b / (static_cast<unsigned long long>(grid.x) * grid.y))};
}
inline void set_thread(const dim3& block, unsigned t) {
    threadIdx = {t % block.x, (t / block.x) % block.y, t / (block.x * block.y)};
}

inline char last_error[512] = "";

// the end of a launch: 0, or -1 with `last_error` set when an access was misaligned
inline int finish_launch() {
    if (alignment_error[0] == '\0') return 0;
    snprintf(last_error, sizeof last_error, "%s", alignment_error);
    return -1;
}

// Run `body` (one call = one GPU thread) over the grid. Returns 0, or -1 with `last_error` set.
template <class Body>
int launch(const unsigned* grid3, const unsigned* block3, bool cooperative, bool reverse, Body body) {
    dim3 grid{grid3[0], grid3[1], grid3[2]}, block{block3[0], block3[1], block3[2]};
    unsigned long long blocks = 1ull * grid.x * grid.y * grid.z, n64 = 1ull * block.x * block.y * block.z;
    if (n64 == 0 || n64 > kMaxThreadsPerBlock) {
        snprintf(last_error, sizeof last_error, "block of %u x %u x %u threads: the emulator (like the GPU) runs "
                 "1 to %u threads per block", block.x, block.y, block.z, kMaxThreadsPerBlock);
        return -1;
    }
    unsigned n = static_cast<unsigned>(n64);
    alignment_error[0] = '\0';
    gridDim = grid;
    blockDim = block;
    if (!cooperative) {
        independent = true;
        for (unsigned long long b = 0; b < blocks; ++b) {
            set_block(grid, b);
            for (unsigned i = 0; i < n; ++i) { set_thread(block, reverse ? n - 1 - i : i); body(); }
        }
        independent = false;
        return finish_launch();
    }
    Cooperative state;
    state.fibers.resize(n);
    state.done.assign(n, 0);
    state.stacks.reset(new char[n * kStackBytes]);
    state.run = [](void* b) { (*static_cast<Body*>(b))(); };
    state.body = &body;
    Cooperative* outer = current;
    current = &state;
    for (unsigned long long b = 0; b < blocks; ++b) {
        set_block(grid, b);
        for (unsigned t = 0; t < n; ++t) {
            ucontext_t& fiber = state.fibers[t];
            getcontext(&fiber);
            fiber.uc_stack.ss_sp = state.stacks.get() + t * kStackBytes;
            fiber.uc_stack.ss_size = kStackBytes;
            fiber.uc_link = &state.scheduler;
            makecontext(&fiber, fiber_entry, 0);
            state.done[t] = 0;
        }
        // one pass = one barrier phase: every live thread runs to its next barrier (or returns), in order
        for (bool live = true; live;) {
            live = false;
            for (unsigned i = 0; i < n; ++i) {
                unsigned t = reverse ? n - 1 - i : i;
                if (state.done[t]) continue;
                set_thread(block, t);
                state.running = t;
                swapcontext(&state.scheduler, &state.fibers[t]);
                live = live || !state.done[t];
            }
        }
    }
    current = outer;
    return finish_launch();
}
}  // namespace cuda_emu

inline void __syncthreads() {
    if (cuda_emu::independent || cuda_emu::current == nullptr) {
        // the Python side runs a kernel whose source names __syncthreads cooperatively; reaching this is a bug there
        fprintf(stderr, "cuda_emu: __syncthreads() in a kernel launched without cooperative scheduling\n");
        abort();
    }
    cuda_emu::Cooperative& state = *cuda_emu::current;
    swapcontext(&state.fibers[state.running], &state.scheduler);
}
// stronger than the device's (the whole block, not one warp), which only hides races between warps
inline void __syncwarp(unsigned = 0xffffffffu) { __syncthreads(); }

// What a generated launcher passes for a buffer parameter: converts to whatever pointer type the kernel declares.
namespace cuda_emu {
struct AnyPtr {
    void* p;
    template <class T>
    operator T*() const { return static_cast<T*>(p); }
};
}  // namespace cuda_emu

// ---- tensor cores: plygrad's mma.sync helper ----------------------------------------------------------------------
// The cuda renderer computes a tensor-core tile with `plygrad_mma_m16n8k16_f32_f16(d, a0..a7, b0..b3)` (and `_bf16`):
// on the device, inline PTX `mma.sync.aligned.m16n8k16.row.col.f32.f16.f16.f32` defined under `#ifndef` of its name
// (codegen/renderer/cuda_mma.py). Defining the name here replaces it with this emulation of the same warp-collective
// operation: the 32 lanes of a warp call it together, each with its fragments (A: 8 elements, B: 4, C/D: 4) at the
// tile positions the PTX ISA gives ("Matrix Fragments for mma.m16n8k16 with floating point type"), written out here
// a second time, independently of codegen/tensor_core.py: a wrong layout or index there gives wrong results here.
//
// Each lane deposits its fragments in its warp's scratch tiles (warp = linear thread index / 32, lane = the rest, as
// the hardware counts them), a barrier, then each lane computes its four D elements from the whole tiles (products of
// two float16/bfloat16 values are exact in float; the sum is in float, k ascending), and a second barrier keeps the
// next call's deposits from overwriting tiles another lane still reads. The barriers are block-wide (stronger than
// the device's warp), so every thread of the block must make the same calls, as the lowered kernels do. A warp that
// is not 32 lanes making the call together gets NaN in every D element (and a line on stderr): the results show it.
namespace cuda_emu {
struct MmaTiles {
    float a[16][16];
    float b[16][8];
    float c[16][8];
    unsigned arrived = 0;  // lanes that deposited in this call
    unsigned read = 0;     // lanes that computed their D elements in this call
};
inline thread_local std::vector<MmaTiles> mma_tiles;  // one per warp of the running block

inline float f16_bits_to_float(unsigned short bits) { return static_cast<float>(__ushort_as_half(bits)); }
inline float bf16_bits_to_float(unsigned short bits) { return static_cast<float>(__ushort_as_bfloat16(bits)); }

template <float (*ToFloat)(unsigned short)>
inline void mma_m16n8k16(float* d, unsigned short a0, unsigned short a1, unsigned short a2, unsigned short a3,
                         unsigned short a4, unsigned short a5, unsigned short a6, unsigned short a7,
                         unsigned short b0, unsigned short b1, unsigned short b2, unsigned short b3) {
    if (current == nullptr || independent) {
        // the Python side runs a kernel that calls the mma cooperatively; reaching this is a bug there
        fprintf(stderr, "cuda_emu: mma in a kernel launched without cooperative scheduling\n");
        abort();
    }
    if (mma_tiles.empty()) mma_tiles.resize(kMaxThreadsPerBlock / warpSize);
    unsigned thread = threadIdx.x + blockDim.x * (threadIdx.y + blockDim.y * threadIdx.z);
    unsigned lane = thread % warpSize, group = lane >> 2, member = lane % 4;
    MmaTiles& tiles = mma_tiles[thread / warpSize];
    const unsigned short a[8] = {a0, a1, a2, a3, a4, a5, a6, a7}, b[4] = {b0, b1, b2, b3};
    for (unsigned i = 0; i < 8; ++i)
        tiles.a[group + 8 * ((i / 2) % 2)][2 * member + i % 2 + 8 * (i / 4)] = ToFloat(a[i]);
    for (unsigned i = 0; i < 4; ++i) tiles.b[2 * member + i % 2 + 8 * (i / 2)][group] = ToFloat(b[i]);
    for (unsigned i = 0; i < 4; ++i) tiles.c[group + 8 * (i / 2)][2 * member + i % 2] = d[i];
    ++tiles.arrived;
    __syncthreads();
    bool whole = tiles.arrived == static_cast<unsigned>(warpSize);
    for (unsigned i = 0; i < 4; ++i) {
        unsigned row = group + 8 * (i / 2), col = 2 * member + i % 2;
        float sum = tiles.c[row][col];
        for (unsigned k = 0; k < 16; ++k) sum += tiles.a[row][k] * tiles.b[k][col];
        d[i] = whole ? sum : NAN;
    }
    static bool reported = false;
    if (!whole && !reported) {
        reported = true;
        fprintf(stderr, "cuda_emu: mma.sync in warp %u of block (%u, %u, %u) was called by %u lanes, not %d: a warp's "
                "lanes must be 32 consecutive threads (threadIdx.x first) all making the call; D is NaN\n",
                thread / warpSize, blockIdx.x, blockIdx.y, blockIdx.z, tiles.arrived, warpSize);
    }
    if (++tiles.read == tiles.arrived) tiles.arrived = tiles.read = 0;
    __syncthreads();
}
}  // namespace cuda_emu
#define plygrad_mma_m16n8k16_f32_f16 ::cuda_emu::mma_m16n8k16<::cuda_emu::f16_bits_to_float>
#define plygrad_mma_m16n8k16_f32_bf16 ::cuda_emu::mma_m16n8k16<::cuda_emu::bf16_bits_to_float>
