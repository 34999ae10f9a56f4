// metal_syntax.h: the Metal built-ins plygrad's metal renderer uses, declared for a C++ syntax and type check of
// rendered MSL by clang (`clang++ -std=c++17 -fsyntax-only`), for tests only. Nothing on Linux compiles MSL.
//
// Only what the renderer uses is declared, with Metal's signatures, so a kernel that uses anything else (a CUDA
// word like __syncthreads, a helper the renderer forgot to emit, a math function with the wrong arity) does not
// compile. The address spaces are clang address spaces, so the check also enforces what MSL enforces about them: a
// `device` pointer cannot be passed where a pointer to another address space is expected, a `const device` buffer
// cannot be written, a `threadgroup` array is one address space, `constant` is read-only. `half` is clang's
// _Float16; `as_type<T>(x)` is a bit cast that must keep the size and rejects bool (metal.py never bit-casts a
// bool). The kernel's buffer attributes (`[[buffer(0)]]`) are ignored by clang; the Python check verifies them.
//
// What it cannot see (metal_emu.py says so too): Metal's own rules beyond C++ (e.g. which attributes a kernel
// parameter may carry), the Metal compiler's limits, and anything about numerics: that is the emulation's job
// (metal_emu.h), and a Mac's.
#pragma once

#define kernel
#define device __attribute__((address_space(1)))
#define constant const __attribute__((address_space(2)))
#define threadgroup static __attribute__((address_space(3)))
#define thread

typedef unsigned char uchar;
typedef unsigned short ushort;
typedef unsigned int uint;
typedef unsigned long ulong;
typedef _Float16 half;
static_assert(sizeof(long) == 8, "Metal's long is 64 bits");

struct uint3 {
    uint x, y, z;
};

namespace metal {
enum class mem_flags { mem_none = 0, mem_device = 1, mem_threadgroup = 2, mem_texture = 4 };
void threadgroup_barrier(mem_flags flags);

template <class T, class U>
T as_type(U value) {
    static_assert(sizeof(T) == sizeof(U), "as_type: Metal reinterprets a value only as a type of the same size");
    static_assert(!__is_same(T, bool) && !__is_same(U, bool), "as_type of a bool");
    return __builtin_bit_cast(T, value);
}

float fma(float a, float b, float c);
float trunc(float x);
namespace precise {
float divide(float a, float b);
float sqrt(float x);
float exp2(float x);
float log2(float x);
float sin(float x);
float pow(float x, float y);
}  // namespace precise
}  // namespace metal
