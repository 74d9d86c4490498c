// tile_maps.h: the tensor maps the runtime builds for tiles that ask for one (MpkTile::tma_rows > 0, a
// layer's Access.tma), so a task kernel can read its tiles by TMA (runtime/ptx.h). A map covers the 2-D
// tile alone, [dims[0] rows, dims[1] columns] at the tile's first element with its row stride: box
// coordinates are the tile's own, (column, row), and TMA fills zeros outside it, so a kernel reads
// nothing of its tensor past its task's tile through it. Built by mpk_init over its tensors (host_cpu.h
// keeps them in host memory, host_cuda.h copies them to the device) and by mpk_run_task over the run's;
// the kernel finds each slot's map as TaskView::tma(slot) (null: none). Host code.
#pragma once
#include <stdint.h>
#include <string>
#include <vector>
#include "abi.h"
#include "ptx.h"

namespace mpk {

// The map of tile t at `tile` ("" when *out is made, else why not).
inline std::string tile_map(const MpkTile& t, const void* tile, ptx::TensorMap* out) {
    if (t.ndim != 2) return "a tensor map covers a 2-D tile, this one has " + std::to_string(t.ndim) + " dims";
    if (t.strides[1] != 1) return "its columns are " + std::to_string(t.strides[1]) + " elements apart, not contiguous";
    const int32_t s = t.tma_swizzle;
    if (s != 0 && s != 32 && s != 64 && s != 128) return "swizzle " + std::to_string(s) + " bytes is not 0, 32, 64 or 128";
    const uint32_t e = uint32_t(t.tma_elem_bytes);
    const uint64_t dims[2] = {uint64_t(t.dims[1]), uint64_t(t.dims[0])};
    const uint64_t strides[2] = {e, uint64_t(t.strides[0]) * e};
    const uint32_t box[2] = {uint32_t(t.tma_cols), uint32_t(t.tma_rows)};
    return ptx::make_tensor_map(out, tile, 2, e, dims, strides, box, s == 0 ? 0u : s == 32 ? 1u : s == 64 ? 2u : 3u);
}

// One task's maps over the tensors at `bases`: store[i] and out[i] = &store[i] for each slot that asks for
// one, out[i] null for the others. "" or why a map cannot be made, naming the task and the slot.
inline std::string task_tile_maps(const MpkTask& t, int32_t pos, void* const* bases, ptx::TensorMap* store,
                                  const void** out) {
    for (int32_t i = 0; i < MPK_MAX_TILES; ++i) {
        out[i] = nullptr;
        const MpkTile& tile = t.tiles[i];
        if (i >= t.num_inputs + t.num_outputs || tile.tma_rows <= 0) continue;
        const std::string why = tile_map(tile, static_cast<const char*>(bases[tile.tensor]) + tile.offset, &store[i]);
        if (!why.empty())
            return "task " + std::to_string(pos) + " tile " + std::to_string(i) + " (" +
                   (i < t.num_inputs ? "input " + std::to_string(i) : "output " + std::to_string(i - t.num_inputs)) +
                   "): its tensor map (box " + std::to_string(tile.tma_rows) + " x " + std::to_string(tile.tma_cols) +
                   ", swizzle " + std::to_string(tile.tma_swizzle) + "): " + why;
        out[i] = &store[i];
    }
    return "";
}

// Every map of a task table: maps[n] for the n-th requested slot, slot[pos * MPK_MAX_TILES + i] its index
// (-1: none). Empty when no tile asks for one.
struct TileMaps {
    std::vector<ptx::TensorMap> maps;
    std::vector<int32_t> slot;
};
inline std::string build_tile_maps(const MpkTask* tasks, int32_t num_tasks, void* const* bases, TileMaps& m) {
    m.maps.clear();
    m.slot.clear();
    size_t n = 0;
    for (int32_t pos = 1; pos < num_tasks; ++pos)
        for (int32_t i = 0; i < tasks[pos].num_inputs + tasks[pos].num_outputs && i < MPK_MAX_TILES; ++i)
            n += tasks[pos].tiles[i].tma_rows > 0;
    if (!n) return "";
    m.maps.resize(n);
    m.slot.assign(size_t(num_tasks) * MPK_MAX_TILES, -1);
    ptx::TensorMap one[MPK_MAX_TILES];
    const void* at[MPK_MAX_TILES];
    size_t k = 0;
    for (int32_t pos = 1; pos < num_tasks; ++pos) {
        const std::string why = task_tile_maps(tasks[pos], pos, bases, one, at);
        if (!why.empty()) return why;
        for (int32_t i = 0; i < MPK_MAX_TILES; ++i)
            if (at[i]) {
                m.maps[k] = one[i];
                m.slot[size_t(pos) * MPK_MAX_TILES + size_t(i)] = int32_t(k++);
            }
    }
    return "";
}

}  // namespace mpk
