// random.h: the one seed mixer of the runtime (SplitMix64's finalizer): the executor's schedule
// jitter and the SIMT emulation's thread orders derive their streams from it (docs/runtime.md,
// docs/simt.md), so a seed means the same thing everywhere.
#pragma once
#include <stdint.h>
#include "platform.h"

namespace mpk {

MPK_HOST_DEVICE MPK_INLINE uint64_t splitmix64(uint64_t x) {
    x += 0x9e3779b97f4a7c15ull;
    x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ull;
    x = (x ^ (x >> 27)) * 0x94d049bb133111ebull;
    return x ^ (x >> 31);
}

}  // namespace mpk
