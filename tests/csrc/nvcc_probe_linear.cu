// nvcc_probe_linear.cu: compiles the CUDA task kernels linear, linear_with_residual and allreduce
// (csrc/tasks/*.cuh) as device code for each element type, so ptxas reports registers, spills and
// shared memory per kernel. Nothing here runs (the GPU executor launches the kernels; allreduce's
// wait/signal are host function pointers in TaskView until it exists).
// Build: nvcc -std=c++17 -x cu -arch=sm_80 -Xptxas -v -c tests/csrc/nvcc_probe_linear.cu -Icsrc -o /dev/null
//        nvcc -std=c++17 -x cu -gencode arch=compute_90a,code=sm_90a -Xptxas -v -c tests/csrc/nvcc_probe_linear.cu -Icsrc -o /dev/null
#include "tasks/allreduce.cuh"
#include "tasks/linear.cuh"
#include "tasks/linear_with_residual.cuh"

#define MPK_PROBE(kernel, T, suffix) \
    extern "C" __global__ void probe_##kernel##_##suffix(const mpk::TaskView* v) { mpk::kernel##_task<T>(*v); }

MPK_PROBE(linear, float, f32)
MPK_PROBE(linear, mpk::bf16_t, bf16)
MPK_PROBE(linear, mpk::fp16_t, fp16)
MPK_PROBE(linear_with_residual, float, f32)
MPK_PROBE(linear_with_residual, mpk::bf16_t, bf16)
MPK_PROBE(linear_with_residual, mpk::fp16_t, fp16)
MPK_PROBE(allreduce, float, f32)
MPK_PROBE(allreduce, mpk::bf16_t, bf16)
MPK_PROBE(allreduce, mpk::fp16_t, fp16)
