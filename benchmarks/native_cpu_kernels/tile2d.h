// tile2d.h: a task tile seen as a 2-D strided matrix, the view every CPU kernel here uses.
//   ndim 0/1: [1, dims[0]]         column stride strides[0]
//   ndim 2:   [dims[0], dims[1]]   row stride strides[0], column stride strides[1]
//   ndim 3/4: leading dims folded into rows, row stride strides[ndim-2]; valid only when
//             the leading dims are packed (the Python side emits 1-D/2-D tiles for these layers).
// Element (r, c) of a tile whose pointer is p is p[r * row_stride + c * col_stride].
// Kept only for benchmarks/qwen3_mlp_pass.py (the former native CPU kernel; the mainline runs
// csrc/tasks/*.cuh). Its output is compared with the emulated kernel's there.
#pragma once
#include "runtime/task_view.h"

namespace mpk {

struct Tile2D {
    int64_t rows, cols, row_stride, col_stride;  // elements
};

inline Tile2D tile2d(const MpkTile& t) {
    if (t.ndim <= 1) return Tile2D{1, t.dims[0], 0, t.strides[0]};
    int64_t rows = 1;
    for (int i = 0; i < t.ndim - 1; ++i) rows *= t.dims[i];
    return Tile2D{rows, t.dims[t.ndim - 1], t.strides[t.ndim - 2], t.strides[t.ndim - 1]};
}

}  // namespace mpk
