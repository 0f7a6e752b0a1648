// The instruction set this translation unit is compiled for, as the name of the inline namespace
// that every header of inline code in this directory (simd.h, norm_stats.h, parallel.h) puts its
// definitions in. Their code differs per instruction set, and translation units built with other
// -march flags than the library (the tests are, and the tests' builds of norm_kernels.cpp for
// every ISA, CMakeLists.txt) would otherwise share one definition of each (an ODR violation): the
// linker keeps one copy, perhaps AVX-512 code, for callers built for a CPU without it. Named
// apart, each translation unit calls the functions of its own ISA.
#pragma once

#if defined(__AVX512F__)
#define NORMLAB_SIMD_ISA isa_avx512
#elif defined(__AVX2__) && defined(__FMA__)
#define NORMLAB_SIMD_ISA isa_avx2
#else
#define NORMLAB_SIMD_ISA isa_portable
#endif
