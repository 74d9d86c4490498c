// fault.h: negative-control faults, compiled in only with -DMPK_FAULT_INJECTION.
// The generated dispatcher instantiates perturb_output<T> per variant (it knows T) and
// defines MPK_PERTURB_OUTPUT; the executor's thread 0 calls it after the faulted task's kernel
// (device code under nvcc).
// Test: tests/runtime_python/test_mode/test_negative_controls.py
#pragma once
#include "dtypes.h"
#include "task_view.h"

namespace mpk {

// Adds `amount` (in fp32, one rounding to T) to element `element` of output 0's tile,
// counted row-major over the tile's dims.
template <typename T> MPK_HOST_DEVICE void perturb_output(const TaskView& v, int64_t element, double amount) {
    const MpkTile& tile = v.out_tile(0);
    int64_t offset = 0, rest = element;
    for (int32_t d = tile.ndim - 1; d >= 0; --d) {
        offset += (rest % tile.dims[d]) * tile.strides[d];
        rest /= tile.dims[d];
    }
    T* p = v.out<T>(0) + offset;
    *p = from_float<T>(to_float(*p) + float(amount));
}

}  // namespace mpk
