// SPDX-License-Identifier: MIT
// See next_a.c.
__attribute__((visibility("default"))) int which(void)
{
    return 2;
}

// Referenced by next_main so that the linker keeps this library loaded.
__attribute__((visibility("default"))) int b_loaded(void)
{
    return 1;
}
