// The launch decision of csrc/runtime/launch_plan.h as a command, for tests/unit/test_launch_plan.py:
//   launch_plan_main STATIC_SMEM REGISTERS THREADS DYNAMIC_SMEM GRID
//                    SMS SMEM_BLOCK SMEM_BLOCK_OPTIN SMEM_SM SMEM_RESERVED REGS_SM THREADS_SM BLOCKS_SM
// prints the plan as one JSON object.
#include <stdlib.h>
#include "runtime/launch_plan.h"

int main(int argc, char** argv) {
    if (argc != 14) {
        fprintf(stderr, "usage: %s (13 integers; see the header)\n", argv[0]);
        return 2;
    }
    long v[13];
    for (int i = 0; i < 13; ++i) v[i] = strtol(argv[i + 1], nullptr, 10);
    const mpk::KernelResources k{int(v[0]), int(v[1]), int(v[2]), size_t(v[3])};
    const mpk::GpuLimits g{int(v[5]), int(v[6]), int(v[7]), int(v[8]), int(v[9]), int(v[10]), int(v[11]), int(v[12])};
    const mpk::LaunchPlan p = mpk::plan_launch(k, g, int(v[4]));
    printf("{\"fits\": %s, \"opt_in\": %s, \"blocks_per_sm\": %d, \"bound\": \"%s\", \"why\": \"%s\"}\n",
           p.fits ? "true" : "false", p.opt_in ? "true" : "false", p.blocks_per_sm, p.bound, p.why);
    return 0;
}
