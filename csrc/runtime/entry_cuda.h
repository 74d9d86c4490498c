// entry_cuda.h: under nvcc, beside the persistent kernel (host_cuda.h), one launcher that runs ONE
// task on one block, so a GPU check can run each kernel alone where it will run. Included by
// entry.h; never by hand.
#pragma once
#include "runtime.h"

// Run the task `*v` (a TaskView in device memory whose task and pointers are device memory too)
// on this block: launch with one block of MpkConfig::worker_threads threads and smem_bytes of
// dynamic shared memory. *status: 0 done, 1 the dispatcher has no such variant, 2 no launcher.
// A module built with -DMPK_NO_ONE_TASK_LAUNCHER (tests/unit/every_variant.py's every-variant
// build) keeps the entry but not the dispatcher in it (ptxas compiles a called function again for
// each kernel that calls it: twice the work): *status 2.
#if defined(MPK_NO_ONE_TASK_LAUNCHER)
extern "C" __global__ void mpk_execute_one(const mpk::TaskView*, int* status) {
    if (threadIdx.x == 0) *status = 2;
}
#else
extern "C" __global__ void mpk_execute_one(const mpk::TaskView* v, int* status) {
    const bool ok = MPK_EXECUTE_TASK(*v);
    if (threadIdx.x == 0) *status = ok ? 0 : 1;
}
#endif
