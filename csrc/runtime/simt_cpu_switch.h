// simt_cpu_switch.h: the context switch between fibers: a hand-written routine for x86-64 SysV and
// aarch64 (mpk_simt_switch_v1) and the frame a new fiber starts from (init_frame); nothing here
// with MPK_SIMT_UCONTEXT (simt_cpu_sched.h uses swapcontext then). Part of runtime/simt_cpu.h.
#pragma once
#if defined(__CUDACC__)
#error "runtime/simt_cpu_switch.h is part of the host compiler's CUDA emulation (runtime/simt_cpu.h)"
#endif
#include <string.h>
#include "simt_cpu_config.h"

namespace mpk {
namespace simt {
#pragma GCC visibility push(hidden)  // module-local: direct calls, no PLT, under -fPIC
namespace detail {
// ---- context switch: mpk_simt_switch_v1(&save_sp, load_sp) saves the callee-saved state on
// the current stack, stores sp, loads the other sp, restores, returns there. A new fiber's
// stack holds a frame whose return address is mpk_simt_entry_v1, which calls entry(arg).
// Each object file carries a copy in a COMDAT group; the linker keeps one.

#if !MPK_SIMT_UCONTEXT
extern "C" __attribute__((visibility("hidden"))) void mpk_simt_switch_v1(void** save_sp, void* load_sp);
extern "C" __attribute__((visibility("hidden"))) void mpk_simt_entry_v1();
#if defined(__x86_64__)
// Frame (low to high): r15 | r14 | r13 | r12 | rbx | rbp | return address. The floating-point
// control state (MXCSR, x87 control word) is not switched: every fiber of a block runs with the
// caller's (saving it doubled the cost of a switch); a kernel must not change rounding modes.
asm(R"(
    .pushsection .text.mpk_simt_switch_v1,"axG",@progbits,mpk_simt_switch_v1,comdat
    .weak mpk_simt_switch_v1
    .hidden mpk_simt_switch_v1
    .type mpk_simt_switch_v1,@function
    .p2align 4
mpk_simt_switch_v1:
    pushq %rbp
    pushq %rbx
    pushq %r12
    pushq %r13
    pushq %r14
    pushq %r15
    movq %rsp, (%rdi)
    movq %rsi, %rsp
    popq %r15
    popq %r14
    popq %r13
    popq %r12
    popq %rbx
    popq %rbp
    ret
    .size mpk_simt_switch_v1,.-mpk_simt_switch_v1
    .weak mpk_simt_entry_v1
    .hidden mpk_simt_entry_v1
    .type mpk_simt_entry_v1,@function
mpk_simt_entry_v1:
    movq %r12, %rdi
    callq *%r13
    ud2
    .size mpk_simt_entry_v1,.-mpk_simt_entry_v1
    .popsection
)");
inline void* init_frame(char* top, void (*entry)(void*), void* arg) {
    // After `ret` sp = top - 16 (16-aligned), so entry() sees sp = 8 mod 16 after the call.
    void** f = reinterpret_cast<void**>(top - 16) - 7;
    f[0] = nullptr;                                     // r15
    f[1] = nullptr;                                     // r14
    f[2] = reinterpret_cast<void*>(entry);              // r13
    f[3] = arg;                                         // r12
    f[4] = nullptr;                                     // rbx
    f[5] = nullptr;                                     // rbp: frame-pointer walks stop here
    f[6] = reinterpret_cast<void*>(&mpk_simt_entry_v1);  // return address
    return f;
}
#elif defined(__aarch64__)
// Frame (low to high): x19..x28, x29, x30 (return address), d8..d15: 160 bytes. FPCR is not
// switched (as on x86-64: every fiber runs with the caller's floating-point control state).
asm(R"(
    .pushsection .text.mpk_simt_switch_v1,"axG",%progbits,mpk_simt_switch_v1,comdat
    .weak mpk_simt_switch_v1
    .hidden mpk_simt_switch_v1
    .type mpk_simt_switch_v1,%function
    .p2align 4
mpk_simt_switch_v1:
    sub sp, sp, #160
    stp x19, x20, [sp, #0]
    stp x21, x22, [sp, #16]
    stp x23, x24, [sp, #32]
    stp x25, x26, [sp, #48]
    stp x27, x28, [sp, #64]
    stp x29, x30, [sp, #80]
    stp d8, d9, [sp, #96]
    stp d10, d11, [sp, #112]
    stp d12, d13, [sp, #128]
    stp d14, d15, [sp, #144]
    mov x9, sp
    str x9, [x0]
    mov sp, x1
    ldp x19, x20, [sp, #0]
    ldp x21, x22, [sp, #16]
    ldp x23, x24, [sp, #32]
    ldp x25, x26, [sp, #48]
    ldp x27, x28, [sp, #64]
    ldp x29, x30, [sp, #80]
    ldp d8, d9, [sp, #96]
    ldp d10, d11, [sp, #112]
    ldp d12, d13, [sp, #128]
    ldp d14, d15, [sp, #144]
    add sp, sp, #160
    ret
    .size mpk_simt_switch_v1,.-mpk_simt_switch_v1
    .weak mpk_simt_entry_v1
    .hidden mpk_simt_entry_v1
    .type mpk_simt_entry_v1,%function
mpk_simt_entry_v1:
    mov x0, x19
    blr x20
    brk #0
    .size mpk_simt_entry_v1,.-mpk_simt_entry_v1
    .popsection
)");
inline void* init_frame(char* top, void (*entry)(void*), void* arg) {
    void** f = reinterpret_cast<void**>(top - 160);
    memset(f, 0, 160);
    f[0] = arg;                                          // x19
    f[1] = reinterpret_cast<void*>(entry);               // x20
    f[11] = reinterpret_cast<void*>(&mpk_simt_entry_v1);  // x30 (x29 = 0: frame walks stop)
    return f;
}
#endif
#endif  // !MPK_SIMT_UCONTEXT
}  // namespace detail
#pragma GCC visibility pop
}  // namespace simt
}  // namespace mpk
