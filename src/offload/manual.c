// SPDX-License-Identifier: MIT
// The manual schedule (aoshim_set_schedule): the program names the layers
// to copy out, release and bring back.
#include "offload/internal.h"

// --- the manual schedule -------------------------------------------------------------------
// TransformerEngine's manual synchronizer, and any program that schedules
// its own copies: aoshim_offload_layer names a layer to copy out,
// aoshim_release_layer waits for that copy and gives the memory back,
// aoshim_reload_layer brings it back early. What the automatic schedule
// guarantees still holds: a copy never starts before the layer's release
// point (the next layer has ended: every read and late write of its outputs
// is enqueued), unless the program releases it, and a kernel that needs an
// offloaded layer gets it back (late).
int ao_engine_set_schedule(int schedule)
{
    if (schedule != AOSHIM_SCHEDULE_AUTO && schedule != AOSHIM_SCHEDULE_MANUAL) {
        WARN_ONCE("aoshim_set_schedule(%d): the schedule is AOSHIM_SCHEDULE_AUTO (0) or "
                  "AOSHIM_SCHEDULE_MANUAL (1)",
                  schedule);
        return AOSHIM_EINVAL;
    }
    int rc = ao_engine_enter();
    if (rc) return rc;
    if (ao_eng.open) {
        WARN_ONCE("aoshim_set_schedule(%d) inside layer %d: end the layer first", schedule,
                  ao_eng.open->layer);
        return ao_engine_leave(AOSHIM_ESTATE);
    }
    ao_eng.manual = schedule == AOSHIM_SCHEDULE_MANUAL;
    return ao_engine_leave(0);
}

// The current microbatch's ended forward layer for a manual command; NULL
// with *rc 0 when it tracked nothing (nothing to move), or with an error.
static ao_scope_t *manual_scope(const char *fn, int layer, int *rc)
{
    static int once_auto, once_ran, once_open;
    *rc = AOSHIM_ESTATE;
    if (!ao_eng.manual) {
        ao_warn_once(&once_auto,
                     "%s(%d): only in the manual schedule (call "
                     "aoshim_set_schedule(AOSHIM_SCHEDULE_MANUAL) first)",
                     fn, layer);
        return NULL;
    }
    if (!ao_fwd_ran(layer, ao_eng.mb)) {
        ao_warn_once(&once_ran, "%s(%d): layer %d has not run forward in this step (microbatch %d)",
                     fn, layer, layer, ao_eng.mb);
        return NULL;
    }
    if (ao_eng.open && ao_eng.open->layer == layer && ao_eng.open->mb == ao_eng.mb) {
        ao_warn_once(&once_open, "%s(%d): the layer is still open: end it first", fn, layer);
        return NULL;
    }
    *rc = 0;
    return ao_scope_find(layer, ao_eng.mb);
}

int ao_engine_offload_layer(int layer)
{
    CHECK_ID("aoshim_offload_layer", layer, AO_MAX_LAYERS);
    int rc = ao_engine_enter();
    if (rc) return rc;
    ao_scope_t *s = manual_scope("aoshim_offload_layer", layer, &rc);
    if (!s) return ao_engine_leave(rc);
    if (ao_eng.phase[ao_eng.mb] == PHASE_BACKWARD) {
        WARN_ONCE("aoshim_offload_layer(%d): the backward of microbatch %d has begun", layer,
                  ao_eng.mb);
        return ao_engine_leave(AOSHIM_ESTATE);
    }
    s->wanted = true;
    if (s->offload_pending && s->release_passed) ao_offload(s);
    return ao_engine_leave(0);
}

int ao_engine_release_layer(int layer)
{
    CHECK_ID("aoshim_release_layer", layer, AO_MAX_LAYERS);
    int rc = ao_engine_enter();
    if (rc) return rc;
    ao_scope_t *s = manual_scope("aoshim_release_layer", layer, &rc);
    if (!s) return ao_engine_leave(rc);
    if (!s->wanted) {
        WARN_ONCE("aoshim_release_layer(%d) before aoshim_offload_layer(%d)", layer, layer);
        return ao_engine_leave(AOSHIM_ESTATE);
    }
    // The program is done with the layer's outputs in this forward pass: the
    // copy starts now if its release point has not come (the last layer).
    // Any later use still finds the chunk away and brings it back.
    if (s->offload_pending) ao_offload(s);
    ao_release_sync(s);
    ao_poll_locked();
    return ao_engine_leave(0);
}

int ao_engine_reload_layer(int layer)
{
    CHECK_ID("aoshim_reload_layer", layer, AO_MAX_LAYERS);
    int rc = ao_engine_enter();
    if (rc) return rc;
    ao_scope_t *s = manual_scope("aoshim_reload_layer", layer, &rc);
    if (!s) return ao_engine_leave(rc);
    s->wanted = false; // a copy not started yet is not wanted any more
    if (s->state != AO_OFFLOADED && s->state != AO_OFFLOADING) return ao_engine_leave(0);
    // As a prefetch: the host copy stays until a kernel uses the layer, so
    // the memory can be taken back if the program runs out meanwhile.
    return ao_engine_leave(ao_reload(s, false, true, false));
}
