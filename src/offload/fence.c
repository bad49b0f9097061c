// SPDX-License-Identifier: MIT
#include "offload/fence.h"

#include <sched.h>

int ao_capturing;
int ao_scan_busy[AO_SCAN_SLOTS];
AO_TLS int ao_scan_slot;
AO_TLS const void *ao_scan_waived[8];
AO_TLS unsigned ao_scan_waived_gen[8];
AO_TLS int ao_scan_nwaived;
AO_TLS ao_scan_word_t ao_scan_watched[AO_SCAN_WATCHED_WORDS];
AO_TLS int ao_scan_nwatched;
AO_TLS bool ao_scan_failed;

// Threads past AO_SCAN_SLOTS share slots: the marks are counts.
int ao_scan_slot_init(void)
{
    static int next;
    int i = __atomic_fetch_add(&next, 1, __ATOMIC_RELAXED) % AO_SCAN_SLOTS;
    ao_scan_slot = i + 1;
    return i;
}

void ao_scan_quiesce(void)
{
    __atomic_thread_fence(__ATOMIC_SEQ_CST); // the states written before, the marks read after
    for (int i = 0; i < AO_SCAN_SLOTS; i++)
        while (__atomic_load_n(&ao_scan_busy[i], __ATOMIC_SEQ_CST) > 0)
            sched_yield();
}

void ao_capture_began(void)
{
    __atomic_fetch_add(&ao_capturing, 1, __ATOMIC_RELAXED);
}

void ao_capture_ended(void)
{
    int n = __atomic_load_n(&ao_capturing, __ATOMIC_RELAXED);
    while (n > 0 && !__atomic_compare_exchange_n(&ao_capturing, &n, n - 1, true, __ATOMIC_RELAXED,
                                                 __ATOMIC_RELAXED)) {
    }
}
