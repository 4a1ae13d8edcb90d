// <cuda_runtime.h> of the host emulation of CUDA: see emulated_cuda.h.
#include "emulated_cuda.h"
