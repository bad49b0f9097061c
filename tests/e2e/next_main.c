// SPDX-License-Identifier: MIT
// Prints what dlsym(RTLD_NEXT, "which") found from next_a: 2 (next_b's) is right.
#include <stdio.h>

int next_which(void);
int b_loaded(void);

int main(void)
{
    printf("next=%d\n", b_loaded() ? next_which() : 0);
    return 0;
}
