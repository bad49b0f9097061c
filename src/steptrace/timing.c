// SPDX-License-Identifier: MIT
// Timed launches: one in AO_TR_SAMPLE_EVERY of each kernel's launches gets
// two events around it, recorded with aoshim's own real calls on the
// launch's stream. Their difference is read later, off the launch path: at
// the step's end (only the pairs already complete) and at exit (all), and
// written as `sample id=N dur=NS`, matching the launch record's `sample=N`.
//
// A fixed ring of slots, each with its two events made at its first use
// (a slot's events live until exit). A slot is taken with a compare-and-swap
// from FREE; a launch that finds its slot busy (the ring is full of pairs
// not read yet: no step end for a while) is simply not timed.
#include <pthread.h>

#include "cuda/guard.h"
#include "cuda/real.h"
#include "offload/fence.h"
#include "steptrace/internal.h"

#define SLOTS 1024

enum { FREE, TAKEN, PENDING };

typedef struct slot_s {
    CUevent a, b;
    uint32_t id;
    int state; // atomic
} slot_t;

static slot_t slots[SLOTS];
static unsigned next_slot;
static uint32_t next_id;
static pthread_mutex_t mu = PTHREAD_MUTEX_INITIALIZER; // the readers

int ao_tr_timing_take(void)
{
    // A capture turns the events into graph nodes: never time a launch
    // while any stream is being captured.
    if (__atomic_load_n(&ao_capturing, __ATOMIC_RELAXED) || !ao_real_driver()) return -1;
    int i = (int)(__atomic_fetch_add(&next_slot, 1, __ATOMIC_RELAXED) % SLOTS);
    slot_t *sl = &slots[i];
    int free_ = FREE;
    if (!__atomic_compare_exchange_n(&sl->state, &free_, TAKEN, false, __ATOMIC_ACQUIRE,
                                     __ATOMIC_RELAXED))
        return -1;
    if (!sl->a && AO_REAL_CALL(ao_real.cuEventCreate(&sl->a, CU_EVENT_DEFAULT)) != CUDA_SUCCESS)
        sl->a = NULL;
    if (sl->a && !sl->b &&
        AO_REAL_CALL(ao_real.cuEventCreate(&sl->b, CU_EVENT_DEFAULT)) != CUDA_SUCCESS)
        sl->b = NULL;
    if (!sl->a || !sl->b) {
        __atomic_store_n(&sl->state, FREE, __ATOMIC_RELEASE);
        return -1;
    }
    return i;
}

bool ao_tr_timing_arm(int i, CUstream s)
{
    slot_t *sl = &slots[i];
    // A stream captured by a path aoshim does not see (ao_capturing is 0).
    CUstreamCaptureStatus cs = CU_STREAM_CAPTURE_STATUS_NONE;
    if (AO_REAL_CALL(ao_real.cuStreamIsCapturing(s, &cs)) == CUDA_SUCCESS &&
        cs == CU_STREAM_CAPTURE_STATUS_NONE &&
        AO_REAL_CALL(ao_real.cuEventRecord(sl->a, s)) == CUDA_SUCCESS)
        return true;
    __atomic_store_n(&sl->state, FREE, __ATOMIC_RELEASE);
    return false;
}

uint32_t ao_tr_timing_end(int i, CUstream s, bool ok)
{
    slot_t *sl = &slots[i];
    if (!ok || AO_REAL_CALL(ao_real.cuEventRecord(sl->b, s)) != CUDA_SUCCESS) {
        __atomic_store_n(&sl->state, FREE, __ATOMIC_RELEASE);
        return 0;
    }
    uint32_t id = __atomic_add_fetch(&next_id, 1, __ATOMIC_RELAXED);
    sl->id = id;
    __atomic_store_n(&sl->state, PENDING, __ATOMIC_RELEASE);
    return id;
}

static bool driver_gone(CUresult r)
{
    return r == CUDA_ERROR_DEINITIALIZED || r == CUDA_ERROR_NOT_INITIALIZED ||
           r == CUDA_ERROR_INVALID_CONTEXT || r == CUDA_ERROR_CONTEXT_IS_DESTROYED;
}

// At exit the driver may be gone (offload/exit.c says when): the first
// answer that says so ends the reading, and the pairs not read are lost.
void ao_tr_timing_collect(bool wait)
{
    if (!__atomic_load_n(&next_id, __ATOMIC_RELAXED)) return; // nothing was ever timed
    pthread_mutex_lock(&mu);
    char buf[64 * 40], *p = buf;
    for (int i = 0; i < SLOTS; i++) {
        slot_t *sl = &slots[i];
        if (__atomic_load_n(&sl->state, __ATOMIC_ACQUIRE) != PENDING) continue;
        CUresult r = AO_REAL_CALL(ao_real.cuEventQuery(sl->b));
        if (r == CUDA_ERROR_NOT_READY && wait) r = AO_REAL_CALL(ao_real.cuEventSynchronize(sl->b));
        if (r == CUDA_ERROR_NOT_READY) continue;
        if (driver_gone(r)) break;
        float ms = 0;
        if (r == CUDA_SUCCESS &&
            AO_REAL_CALL(ao_real.cuEventElapsedTime_v2(&ms, sl->a, sl->b)) == CUDA_SUCCESS &&
            ms >= 0) {
            p = AO_TR_PUTS(p, "sample id=");
            p = ao_tr_u64(p, sl->id);
            p = AO_TR_PUTS(p, " dur=");
            p = ao_tr_u64(p, (uint64_t)((double)ms * 1e6 + 0.5));
            *p++ = '\n';
            if (p - buf > (long)sizeof buf - 64) {
                ao_trw_side(buf, (size_t)(p - buf));
                p = buf;
            }
        }
        __atomic_store_n(&sl->state, FREE, __ATOMIC_RELEASE);
    }
    if (p > buf) ao_trw_side(buf, (size_t)(p - buf));
    pthread_mutex_unlock(&mu);
}
