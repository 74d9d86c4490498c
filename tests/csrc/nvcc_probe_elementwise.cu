// nvcc_probe_elementwise.cu: compiles the SIMT elementwise task kernels (rmsnorm, silu_mul,
// elementwise_add, identity, tensor_init; csrc/tasks/<stem>.cuh) for the GPU, each for float,
// bf16 and fp16 inside a __global__ wrapper, so that ptxas reports every kernel's registers,
// spills and shared memory. A compile-only check: nothing here runs.
// Run (sm_80 and sm_90a; expect no errors and "0 bytes spill stores/loads" on every line):
//   nvcc -std=c++17 -x cu -arch=sm_80 -Xptxas -v -c tests/csrc/nvcc_probe_elementwise.cu -Icsrc -o /tmp/x.o
//   nvcc -std=c++17 -x cu -gencode arch=compute_90a,code=sm_90a -Xptxas -v -c \
//        tests/csrc/nvcc_probe_elementwise.cu -Icsrc -o /tmp/x.o
#include "tasks/elementwise_add.cuh"
#include "tasks/identity.cuh"
#include "tasks/rmsnorm.cuh"
#include "tasks/silu_mul.cuh"
#include "tasks/tensor_init.cuh"

// One wrapper per kernel and dtype; the view lives in device memory, as the executor's does.
#define MPK_PROBE(stem, T, tag) \
    __global__ void probe_##stem##_##tag(const mpk::TaskView* v) { MPK_RUN_TASK(*v, (mpk::stem##_task<T>)); }
#define MPK_PROBE_ALL(stem)              \
    MPK_PROBE(stem, float, f32)          \
    MPK_PROBE(stem, mpk::bf16_t, bf16)   \
    MPK_PROBE(stem, mpk::fp16_t, fp16)

MPK_PROBE_ALL(rmsnorm)
MPK_PROBE_ALL(silu_mul)
MPK_PROBE_ALL(elementwise_add)
MPK_PROBE_ALL(identity)
MPK_PROBE_ALL(tensor_init)
