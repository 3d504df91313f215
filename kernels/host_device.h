// Lets one functor definition serve both backends.
#pragma once

#if defined(__CUDACC__)
#define TC_HOST_DEVICE __host__ __device__ __forceinline__
#else
#define TC_HOST_DEVICE inline
#endif
