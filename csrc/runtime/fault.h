// fault.h: negative-control faults, compiled in only with -DMPK_FAULT_INJECTION.
// The generated dispatcher instantiates inject_fault<T> per variant (it knows T, the type of
// output 0) and defines MPK_INJECT_FAULT; the executor's thread 0 calls it after the faulted
// task's kernel (device code under nvcc), mpk_run_task after the task alone (entry.h).
// Test: tests/runtime_python/test_mode/test_negative_controls.py
#pragma once
#include <type_traits>
#include "dtypes.h"
#include "task_view.h"

namespace mpk {

// x moved by `amount`: in fp32 with one rounding to T; an integer output (token ids) by the whole
// amount. (Integer outputs have no from_float: the fault would not link.)
template <typename T> MPK_HOST_DEVICE T perturbed(T x, double amount) {
    if constexpr (std::is_integral<T>::value) return static_cast<T>(x + static_cast<T>(amount));
    else return from_float<T>(to_float(x) + float(amount));
}
template <typename T> MPK_HOST_DEVICE T zero_value() {
    if constexpr (std::is_integral<T>::value) return T(0);
    else return from_float<T>(0.0f);
}

// Adds `amount` to element `element` of output 0's tile (perturbed), counted row-major over the
// tile's dims.
template <typename T> MPK_HOST_DEVICE void perturb_output(const TaskView& v, int64_t element, double amount) {
    const MpkTile& tile = v.out_tile(0);
    int64_t offset = 0, rest = element;
    for (int32_t d = tile.ndim - 1; d >= 0; --d) {
        offset += (rest % tile.dims[d]) * tile.strides[d];
        rest /= tile.dims[d];
    }
    T* p = v.out<T>(0) + offset;
    *p = perturbed<T>(*p, amount);
}

// Address of output 0's tile's last element + 1, in elements of T from the tile's first.
MPK_HOST_DEVICE inline int64_t tile_end(const MpkTile& tile) {
    int64_t last = 0;
    for (int32_t d = 0; d < tile.ndim; ++d) last += (tile.dims[d] - 1) * tile.strides[d];
    return last + 1;
}

// Out-of-bounds accesses for the memory-safety negative controls (docs/runtime.md): `n` elements
// (at least 1) of output 0's type, `gap` elements past the tile's end (overrun: written with 0,
// overread: read) or ending `gap` elements before its start (underrun).
template <typename T> MPK_HOST_DEVICE void out_of_bounds(const TaskView& v, int32_t kind, int64_t gap, int64_t n) {
    T* p = v.out<T>(0);
    const int64_t first = kind == MPK_FAULT_UNDERRUN ? -gap - n : tile_end(v.out_tile(0)) + gap;
    if (kind == MPK_FAULT_OVERREAD) {
        int64_t sum = 0;
        const volatile unsigned char* b = reinterpret_cast<const volatile unsigned char*>(p + first);
        for (int64_t i = 0; i < n * int64_t(sizeof(T)); ++i) sum += b[i];
        (void)sum;
        return;
    }
    for (int64_t i = 0; i < n; ++i) p[first + i] = zero_value<T>();
}

template <typename T> MPK_HOST_DEVICE void inject_fault(const TaskView& v, int32_t kind, int64_t element,
                                                        double amount) {
    if (kind == MPK_FAULT_PERTURB) perturb_output<T>(v, element, amount);
    if (kind >= MPK_FAULT_OVERRUN && kind <= MPK_FAULT_OVERREAD)
        out_of_bounds<T>(v, kind, element, amount >= 1 ? int64_t(amount) : 1);
}

}  // namespace mpk
