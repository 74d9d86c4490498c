// platform.h: the few macros that let one header compile for the host and for CUDA.
#pragma once
#if defined(__CUDACC__)
#define MPK_HOST_DEVICE __host__ __device__
#define MPK_DEVICE __device__
#define MPK_INLINE __forceinline__
#else
#define MPK_HOST_DEVICE
#define MPK_DEVICE
#define MPK_INLINE inline
#endif
