// task_view.h: what a task kernel sees. Kernels get pre-offset pointers, tile shapes
// and per-task metadata; never the grid, never the graph.
#pragma once
#include "abi.h"
#include "platform.h"

namespace mpk {

struct TaskView {
    const MpkTask* task;
    void* ptrs[MPK_MAX_TILES];  // base(tile.tensor) + tile.offset, inputs then outputs
    const MpkMeta* meta;        // meta tensors, for layers that read them

    template <typename T> MPK_HOST_DEVICE T* in(int i) const { return static_cast<T*>(ptrs[i]); }
    template <typename T> MPK_HOST_DEVICE T* out(int j) const {
        return static_cast<T*>(ptrs[task->num_inputs + j]);
    }
    MPK_HOST_DEVICE const MpkTile& in_tile(int i) const { return task->tiles[i]; }
    MPK_HOST_DEVICE const MpkTile& out_tile(int j) const { return task->tiles[task->num_inputs + j]; }
    MPK_HOST_DEVICE int64_t iparam(int k) const { return task->iparams[k]; }
    MPK_HOST_DEVICE double fparam(int k) const { return task->fparams[k]; }
};

}  // namespace mpk
