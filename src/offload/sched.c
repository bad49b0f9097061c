// SPDX-License-Identifier: MIT
// The schedules (sched.h): every policy's answer to "which layers, and
// when", written as data the engine carries out.
#include "offload/sched.h"

#include <stddef.h>

static int16_t clamp16(int v)
{
    return (int16_t)(v > AO_MAX_LAYERS ? AO_MAX_LAYERS : v);
}

// aoshim's own timing: each copy at its release point, the memory going as
// soon as the copy is done, the reload d layers ahead of its backward.
static void fill(ao_sched_t *out, int n, int prefetch)
{
    out->nlayers = n;
    out->none = false;
    out->reload_after_compute = false;
    out->release_waits = false;
    out->min_held = out->min_held_floor = 0;
    out->margin_layers = 0;
    out->name = "aoshim";
    for (int l = 0; l < AO_MAX_LAYERS; l++)
        out->layer[l] = (ao_sched_layer_t){
            .offload = false,
            .copy_at = clamp16(l + 1),
            .release_at = -1,
            .reload_at = clamp16(l + 1 + prefetch),
            .part = 0,
        };
}

static void set_none(ao_sched_t *out)
{
    bool any = false;
    for (int l = 0; l < AO_MAX_LAYERS && !any; l++)
        any = out->layer[l].offload;
    // Before the layer count is known only a set that names no layer at all
    // selects none (AOSHIM_OFFLOAD_LAYERS=none, 0, an empty list): known
    // from the start, so the first step tracks nothing either.
    out->none = !any;
}

// AOSHIM_OFFLOAD_LAYERS as a set. The last layer's backward comes first:
// offloading it saves nothing. With one microbatch 'all' (and auto before
// its plan) also skips the layers whose reload would be issued as soon as
// backward begins (the last 2 + prefetch): copying them saves nothing
// either. With interleaved microbatches (GPipe, 1F1B) a microbatch's layers
// wait while others run, whatever their reload distance (GPipe, 4
// microbatches of 8 layers: 'all' held 16% more from its second step on
// when it skipped them); gradient accumulation runs each backward at once.
static void sched_static(const ao_config_t *cfg, int n, int late_from, bool interleaved,
                         ao_sched_t *out)
{
    const ao_layerset_t *set = &cfg->offload_layers;
    int d = (int)cfg->prefetch;
    bool all = set->kind == AO_LAYERS_ALL || set->kind == AO_LAYERS_AUTO;
    fill(out, n, d);
    for (int l = 0; l < AO_MAX_LAYERS; l++) {
        bool on = ao_layerset_has(set, (unsigned)l, (unsigned)n);
        if (n > 0 && l >= n - 1) on = false;
        if (n > 0 && all && !interleaved && l > n - 3 - d) on = false;
        // 'all' leaves the layers whose copies were late for their reloads
        // (the reload cancelled them: link traffic that saved nothing).
        if (set->kind == AO_LAYERS_ALL && late_from >= 0 && l >= late_from) on = false;
        out->layer[l].offload = on;
    }
    set_none(out);
}

static void sched_plan(const ao_plan_t *p, int n, ao_sched_t *out)
{
    fill(out, n, p->prefetch);
    for (int l = 0; l < p->count && l < AO_MAX_LAYERS; l++)
        out->layer[l].offload = true;
    if (p->count > 0 && p->count <= AO_MAX_LAYERS) out->layer[p->count - 1].part = p->part;
    set_none(out);
}

void ao_sched_te(int k, int n, ao_sched_t *out)
{
    if (k > n - 1) k = n - 1;
    fill(out, n, 0);
    out->name = "te";
    out->reload_after_compute = true;
    out->release_waits = k > 0;
    for (int i = 0; i < k; i++) {
        ao_sched_layer_t *s = &out->layer[i];
        s->offload = true;
        s->copy_at = (int16_t)i; // TransformerEngine copies from the layer's end (see sched.h)
        s->release_at = (int16_t)(n - k + i - 1); // done when layer n-k+i begins
        s->reload_at = (int16_t)(n - 1 - k + i);
    }
    set_none(out);
}

void ao_sched_make(const ao_sched_in_t *in, ao_sched_t *out)
{
    const ao_config_t *cfg = in->cfg;
    if (cfg->offload_layers.kind == AO_LAYERS_AUTO && in->plan) {
        sched_plan(in->plan, in->nlayers, out);
    } else if (cfg->schedule == AO_SCHEDULE_TE && cfg->offload_layers.kind == AO_LAYERS_COUNT &&
               in->nlayers > 0) {
        ao_sched_te((int)cfg->offload_layers.count, in->nlayers, out);
    } else {
        sched_static(cfg, in->nlayers, in->late_from, in->interleaved, out);
        if (cfg->offload_layers.kind == AO_LAYERS_AUTO) {
            out->min_held = in->budget;
            out->min_held_floor = in->budget / 2;
            // Interleaved microbatches: as one begins, the one before still
            // holds its last layers (their copies not begun, or never
            // begun) and this one maps its first two before its first
            // release point: three more (measured: 1F1B and GPipe, 4
            // microbatches, kept their budgets in the measuring step with
            // six, went over by up to 10% with three).
            out->margin_layers = in->interleaved ? 6 : 3;
        }
    }
}
