// refuse_blockidx.cu: a task kernel that reads blockIdx or gridDim must not compile, on either
// backend (runtime/simt.h; docs/simt.md). Built, never run, by tests/csrc/run_simt_tests.sh (g++,
// mode refuse) and tests/unit/test_nvcc.py (nvcc):
//   -DMPK_READ=1  reads blockIdx.x (line 15): a static_assert "task kernel reads blockIdx: ...",
//                 the compiler's note naming refuse_blockidx.cu:15
//   -DMPK_READ=2  reads gridDim.x (line 17): the same for gridDim
//   -DMPK_READ=0  the control: the same kernel on its task's iparam compiles
// plus the executor's own use (runtime/host_cuda.h under nvcc) keeps compiling: see test_nvcc.py.
#include "runtime/simt.h"

__device__ void refused_task(const mpk::TaskView& v) {
    float* out = v.out<float>(0);
    int64_t row = v.iparam(0);
#if MPK_READ == 1
    row = blockIdx.x;
#elif MPK_READ == 2
    row = gridDim.x;
#endif
    out[row * blockDim.x + threadIdx.x] = 1.0f;
}
