// metal_emu.h: run rendered Metal Shading Language on the CPU, for tests only (nothing on Linux runs MSL).
//
// A plygrad Metal kernel is the CUDA kernel of the same lowering in Metal's words (codegen/renderer/metal.py), so
// this header maps those words onto cuda_emu.h's machinery and nothing else: the kernel is compiled as host C++20,
// each GPU thread a fiber, threadgroups one after another, the barrier a switch to the next thread (see cuda_emu.h).
//
// - address spaces: `device` and `thread` are plain memory, `constant` is `const` (a variable's `constant long&`
//   binds the launcher's value), `threadgroup` is `static` (one array per threadgroup, as threadgroups run in turn,
//   exactly as cuda_emu.h does for `__shared__`); `kernel` marks nothing;
// - the thread position attributes are ignored by the host compiler; the generated launcher passes cuda_emu's
//   blockIdx and threadIdx as the kernel's `gid` and `lid` parameters (MetalKernel.launch_extra in metal_emu.py);
// - `threadgroup_barrier(mem_flags::mem_threadgroup)` is `__syncthreads()`;
// - Metal's scalar type names, `half` (cuda_emu.h's: 16 bits, converted to and from float rounding to nearest even),
//   `as_type<T>` (a bit cast that must keep the size), and the `metal::precise::` math the renderer calls, which
//   here are the host libm's (correctly rounded for divide and sqrt, within an ulp or so for the others).
//
// `#include <metal_stdlib>` finds an empty file; `#pragma METAL ...` is ignored by the host compiler (and
// -ffp-contract=off keeps a*b+c two roundings, as the pragma asks of Metal).
#pragma once

#include "cuda_emu.h"

#define kernel
#define device
#define thread
#define constant const
#define threadgroup static

typedef unsigned char uchar;
typedef unsigned short ushort;
typedef unsigned int uint;
typedef unsigned long ulong;
static_assert(sizeof(long) == 8, "metal_emu.h needs an LP64 host: Metal's long is 64 bits");

namespace metal {
enum class mem_flags { mem_none = 0, mem_device = 1, mem_threadgroup = 2, mem_texture = 4 };

inline void threadgroup_barrier(mem_flags) { __syncthreads(); }

template <class T, class U>
inline T as_type(U value) {
    static_assert(sizeof(T) == sizeof(U), "as_type: Metal reinterprets a value only as a type of the same size");
    return std::bit_cast<T>(value);
}

namespace precise {
inline float divide(float a, float b) { return a / b; }
inline float sqrt(float a) { return sqrtf(a); }
inline float exp2(float a) { return exp2f(a); }
inline float log2(float a) { return log2f(a); }
inline float sin(float a) { return sinf(a); }
inline float pow(float a, float b) { return powf(a, b); }
}  // namespace precise
}  // namespace metal
