// SPDX-License-Identifier: MIT
// dlsym, interposed: libraries with a static CUDA runtime (cuBLAS, cuDNN,
// NCCL) and Triton's launcher find the driver with dlopen("libcuda.so.1")
// and dlsym on that handle, past every exported hook. For a lookup on
// libcuda's handle of a name aoshim wraps, the wrapper is returned instead;
// everything else is the real dlsym's answer.
//
// The hazard (an interposer that hung `import torch`): dlsym(RTLD_NEXT, ...)
// resolves relative to its *caller*, found from the return address. So the
// pseudo-handles go to the real dlsym by a tail jump, written in assembly so
// that no compiler setting can turn it into a call: the real dlsym sees the
// original caller. Only real handles, whose answer does not depend on the
// caller, reach C. Where there is no such trampoline (not x86-64), dlsym is
// not interposed and those lookups bypass aoshim (docs/safety-net.md says so).
#include <dlfcn.h>
#include <stdbool.h>
#include <string.h>

#include "hook.h"
#include "cuda/real.h"

#if defined(__x86_64__) && defined(__ELF__)
// Lookups on a real handle: ask the real dlsym, then substitute aoshim's
// wrapper when the handle is libcuda's and aoshim exports the same name.
__attribute__((visibility("hidden"))) void *ao_dlsym_handle(void *handle, const char *name)
{
    void *(*real)(void *, const char *) = (void *(*)(void *, const char *))ao_dlsym_init();
    void *r = real ? real(handle, name) : NULL;
    if (!r || !name || name[0] != 'c' || name[1] != 'u' || ao_in_hook) return r;
    // Both handles are found once and never change (a library opened with
    // RTLD_NOLOAD stays loaded while aoshim holds a reference): threads that
    // race to find them store the same value. Relaxed atomics suffice, as
    // the handle is only compared and passed back to the dynamic linker,
    // which orders its own data.
    static void *cuda_h, *self_h;
    void *cuda = __atomic_load_n(&cuda_h, __ATOMIC_RELAXED);
    if (!cuda) {
        cuda = dlopen("libcuda.so.1", RTLD_NOW | RTLD_NOLOAD);
        if (cuda) __atomic_store_n(&cuda_h, cuda, __ATOMIC_RELAXED);
    }
    if (!cuda || handle != cuda) return r;
    // The driver looking itself up (a driver may build its own tables with
    // dlsym) must get its own functions: aoshim's wrappers call those.
    Dl_info caller, found;
    if (dladdr(__builtin_return_address(0), &caller) && dladdr(r, &found) &&
        caller.dli_fbase == found.dli_fbase)
        return r;
    void *self = __atomic_load_n(&self_h, __ATOMIC_RELAXED);
    if (!self) {
        Dl_info info;
        if (dladdr((void *)ao_dlsym_handle, &info) && info.dli_fname)
            self = dlopen(info.dli_fname, RTLD_NOW | RTLD_NOLOAD);
        if (!self) return r;
        __atomic_store_n(&self_h, self, __ATOMIC_RELAXED);
    }
    // The driver's own name of a function aoshim wraps is the name aoshim
    // exports it under (cuLaunchKernel_ptsz, cuMemAlloc_v2, cuGetProcAddress_v2 ...).
    void *mine = real(self, name);
    if (!mine) mine = ao_hook_record_wrapper_by_symbol(name); // AOSHIM_RECORD's, not exported
    return mine ? mine : r;
}

__asm__(".text\n"
        ".globl dlsym\n"
        ".type dlsym, @function\n"
        "dlsym:\n"
        "    cmpq $-1, %rdi\n" // RTLD_NEXT
        "    je 1f\n"
        "    testq %rdi, %rdi\n" // RTLD_DEFAULT
        "    je 1f\n"
        "    jmp ao_dlsym_handle\n"
        "1:  movq ao_real_dlsym(%rip), %rax\n"
        "    testq %rax, %rax\n"
        "    jz 2f\n"
        "    jmp *%rax\n" // the caller's return address is still on the stack
        // First lookup, perhaps from a sanitizer runtime's constructor before
        // aoshim's: ao_dlsym_init runs nothing instrumented (see real.c).
        "2:  pushq %rdi\n"
        "    pushq %rsi\n"
        "    subq $8, %rsp\n" // the call's stack 16-byte aligned
        "    call ao_dlsym_init\n"
        "    addq $8, %rsp\n"
        "    popq %rsi\n"
        "    popq %rdi\n"
        "    testq %rax, %rax\n"
        "    jz 3f\n"
        "    jmp *%rax\n"
        "3:  ret\n" // no real dlsym found: answer NULL rather than jump to 0
        ".size dlsym, .-dlsym\n");
#endif
