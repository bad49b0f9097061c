// SPDX-License-Identifier: MIT
// Serving the program's own stream-ordered allocations from aoshim's memory.
//
// Under PyTorch's backend:cudaMallocAsync every tensor is a cudaMallocAsync
// from the device's default pool, which keeps what it frees. With layers
// tracked, their memory is aoshim's and the rest is the pool's: two
// allocators side by side. A layer's memory freed in the backward then sat
// with aoshim for the next step while the pool grew for the gradients, and
// the pool's reserve sat unused through the next forward while aoshim made
// the layers' memory anew (train_step --pytorch with one layer offloaded:
// 24% more in use than without aoshim; on the real H200 GPT, +3.9 GiB under
// 'all'). Without aoshim one pool serves both.
//
// So while layers are tracked, the program's other stream-ordered
// allocations come from aoshim's memory too: each its own chunk (one buffer,
// the size rounded to the granule), never offloaded, accounted as the
// program's. A freed one becomes a kept mapping at once, with an event at
// its free on the stream: the next allocation of that size on any stream
// takes it after that event on the GPU (the host does not wait, as a
// stream-ordered pool reuses memory), and a layer takes its memory once
// the event is complete. Freed memory of any size backs any other: a range
// takes the idle handles that fit it, and the others go back before new
// memory is made (mem/vmm.c).
//
// When (AOSHIM_SERVE): from the start (1), never (0), or by default (auto)
// where the program's pool would hold memory unused beside aoshim's. It
// keeps what is freed up to its release threshold (PyTorch's
// backend:cudaMallocAsync sets it to the maximum), so through the forward
// it holds what the last backward and optimizer freed, and the driver
// counts it, beside the layers aoshim makes (train_step --pytorch, one
// layer offloaded: 0.54 GB unused for 1.23 GB allocated, the step 7.4%
// above the run without aoshim). So as a forward begins, serving begins
// if the pool's threshold is at least AO_SERVE_UNUSED_MIN, or if it holds
// that much unused and 1% of the device's memory in use (a pool that keeps
// what a step frees for want of a synchronisation). Then aoshim's idle
// memory goes back to the driver (its handles were a layer's size), the
// pool gives its unused reserve back (cuMemPoolTrimTo), and the plan at the
// step's end is made for one pool. A step whose pool gives back what it
// does not use (train_step's synthetic step synchronises: 1.6 MB unused as
// its forward begins) is never served: serving costs the host a mapping
// (about 50 us on the H200) whenever memory moves between a layer and the
// program's allocations.
//
// Once begun, serving goes on under a plan that offloads nothing for a
// given budget: the plan was made for one pool, and the program's pool
// would hold its own fragments beside what aoshim's memory serves (the H200
// GPT, replayed under a budget the link could hide: a plan of nothing for a
// step that needed 21.27 GiB served, the step then 22.77 GiB in the pool,
// and the plans after it swung to 13 layers at 29.31 GiB). Without a given
// budget a plan of nothing pauses it: the program's pool serves, as it
// would without aoshim, at its speed (the 24-layer GPT at batch 1, whose
// peak offloading cannot lower: served, 81 ms a step against 70), and
// aoshim's idle memory goes back to the driver. A plan that offloads again
// resumes it as a forward begins, the pool's unused reserve given back as
// when serving began.
//
// Not served: allocations below AOSHIM_MIN_BYTES, cudaMalloc (not stream
// ordered), a pool the program chose (cudaMallocFromPoolAsync, or a current
// pool other than the default: it may export or share it), allocations on a
// capturing stream (graph memory is the graph's), and anything before
// serving began (a policy that offloads nothing never begins it).
#include "offload/internal.h"

static ao_scope_t *server(CUstream stream)
{
    for (ao_scope_t *s = ao_eng.servers; s; s = s->next)
        if (s->stream == stream) return s;
    ao_scope_t *s = calloc(1, sizeof *s);
    if (!s) return NULL;
    s->layer = -1;
    s->stream = stream;
    s->thread = pthread_self();
    s->state = AO_RESIDENT;
    s->next = ao_eng.servers;
    ao_eng.servers = s;
    return s;
}

// cudaMallocAsync allocates from the device's current pool: served only
// while that is the default one.
static bool default_pool_current(void)
{
    CUmemoryPool cur = NULL, def = ao_program_pool();
    return def && ao_real.cuDeviceGetMemPool &&
           ao_real.cuDeviceGetMemPool(&cur, ao_vmm.device) == CUDA_SUCCESS && cur == def;
}

// The program's allocations on a stream are served in whole pages
// (AO_PAGE, mem/vmm.c), in chunks called segments here: an allocation goes
// where the free space of the stream's live segments fits it best (a page
// of small ones', a large one's tail, or what a segment's first allocation
// left when it went), else in a new segment: its own, its size rounded up
// to pages, for one of a page or more, a new page for a smaller one. With
// large ones kept out of the others' free space, the Hugging Face GPT-2
// held 0.22 GiB more at its peak with one layer offloaded (its 36 MiB fp32
// tensors of a block's weights' size alone in segments of 64) and took
// 1.29x, not 1.27x, under the budget its link hides. Given a mapping of
// its own, the size rounded to the granule, an allocation of 1-4 MiB took
// 12% more than it asked on a small step; and handles of each allocation's
// size were taken apart and made anew whenever the sizes the step asked
// for changed (the forward's, the backward's, the optimizer's): on the
// replayed H200 GPT, one layer offloaded, 490 handles a step and 105 ms of
// the host's in VMM calls for a 153 ms step, which took 1.46x; in pages,
// 1.05x. Segments rounded to the granule instead, their last page
// smaller, the Hugging Face GPT-2 held 0.8 GiB less at its peak but took
// 1.40x for 1.02x (a last page smaller than a page backs little else).
//
// Except where the last page would be mostly unused (SEGMENT_TAIL_UNUSED or
// more of it): there the segment's last part is a handle of its own size.
// The Hugging Face GPT-2's 36 MiB buffers (nineteen live at its peak, in
// the head) each held a 64 MiB segment, 0.52 GiB of the 0.80 its served
// segments left unused there, which the plan under a budget moved to the
// host as well: replayed under the budget its link hides, 1.20x -> 1.05x
// the step without aoshim, 25% under 1.30x -> 1.21x; the H200's GPT 1.025x
// -> 1.035x; the Llama and train_step unchanged. The price is handles made
// and given back each step, GPT-2 121 for 12 and the GPT 12 for 4: a last
// part made gives a page back, a page made gives last parts back (idle
// memory never sits beside new memory). At half a page unused, the Llama
// took 1.08x for 1.10x but went 40 MiB over one budget; at seven eighths
// GPT-2 took 1.09x.
#define SEGMENT_TAIL_UNUSED (AO_PAGE / 4 * 3)

// The program's first optimizer step served (after a backward, before the
// next forward): where an optimizer makes its state, which lives for the
// run. Its segments have a last part of their own size wherever whole pages
// would leave any of the last one unused: made once, such a handle is not
// made and given back each step. AdamW's state on the H200 Llama (fp32
// tensors of a weight's size, 48 of 42.7 MiB) held 64 MiB segments, 5.3 or
// 21.3 MiB of each unused at every peak after (0.31 GiB), which the plan
// under a budget moved to the host as well: replayed under the budget its
// link hides 1.054x -> 1.029x the step without aoshim, 25% under 1.044x ->
// 1.008x. For all the optimizer's allocations (its temporaries too, every
// step), the same took the Llama to 1.12x: its plan then moved layers 0-1
// whole, link-bound in the backward; for every allocation with 20 MiB of a
// page unused, GPT-2's logits (392.6 MiB, two a step) made and gave back a
// 10 MiB last part each step, over its budget in two steps.
static bool optimizer_first = true, optimizer_served;

// A new segment for an allocation of rsize bytes: whole pages, the last
// part of its own size where a whole last page would be mostly unused (or
// in the first optimizer step, unused at all); a page for one smaller than
// a page.
static size_t segment_size(size_t rsize)
{
    const size_t pages = ao_vmm_round(AO_PAGE_ROUND(rsize)), own = ao_vmm_round(rsize);
    const bool state = __atomic_load_n(&ao_stat_where_now, __ATOMIC_RELAXED) == AO_WHERE_AFTER;
    if (state) optimizer_served = true;
    const size_t unused = state && optimizer_first ? 1 : SEGMENT_TAIL_UNUSED;
    return rsize >= AO_PAGE && pages - own >= unused ? own : pages;
}

// A segment's buffer freed on the segment's stream (its live count already
// down): its space is the stream's again at once (stream order), the
// record goes.
void ao_serve_unlink(ao_chunk_t *c, ao_buffer_t *b)
{
    for (ao_buffer_t **pp = &c->buffers; *pp; pp = &(*pp)->next)
        if (*pp == b) {
            *pp = b->next;
            break;
        }
    ao_extents_give(&c->free, b->addr, b->rsize);
    free(b);
}

// A chunk just served that holds nothing goes, once the uses of its memory
// before (ordered on the GPU only) are done: a failure path, rare.
static void serve_drop(ao_chunk_t *c, CUstream stream)
{
    ao_real.cuStreamSynchronize(stream);
    ao_chunk_release(c, NULL, 0);
}

// A buffer of size on s's stream: in the live segment whose free space
// fits it best; else a segment of whole pages, a kept one of the stream's
// if one is no larger, or split off a larger one (ao_chunk_serve).
static ao_buffer_t *serve_buffer(ao_scope_t *s, size_t size, CUstream stream)
{
    size_t rsize = (size + AO_ALIGN - 1) & ~(size_t)(AO_ALIGN - 1);
    ao_buffer_t *b = calloc(1, sizeof *b);
    if (!b) return NULL;
    uint64_t lo = 0, best = 0;
    size_t at = 0;
    ao_chunk_t *c = NULL;
    for (ao_chunk_t *x = s->chunks; x; x = x->next) {
        size_t i;
        uint64_t len;
        if (x->mapped && !x->retiring && x->nlive && (len = ao_extents_best(&x->free, rsize, &i)) &&
            (!best || len < best))
            best = len, at = i, c = x;
        if (best == rsize) break; // an exact fit is the best
    }
    if (c) {
        ao_extents_take_at(&c->free, at, rsize, &lo);
    } else {
        c = ao_chunk_serve(s, segment_size(rsize), ao_vmm_round(rsize), stream);
        if (!c || ao_extents_take(&c->free, rsize, &lo) < 0) {
            if (c) serve_drop(c, stream);
            free(b);
            return NULL;
        }
    }
    b->addr = lo;
    b->chunk = c;
    b->size = size;
    b->rsize = rsize;
    b->site = -1;
    b->next = c->buffers;
    c->buffers = b;
    c->nlive++;
    return b;
}

CUresult ao_engine_serve(size_t size, CUstream stream, CUdeviceptr *out)
{
    CUresult r = CUDA_ERROR_NOT_SUPPORTED;
    if (!ao_engine_serves() || size < ao_config.min_bytes || !size) return r;
    pthread_mutex_lock(&ao_eng.mu);
    if (!ao_eng.ready || !ao_serve_active() || !default_pool_current()) goto out;
    CUstreamCaptureStatus cs = CU_STREAM_CAPTURE_STATUS_NONE;
    if (ao_real.cuStreamIsCapturing(stream, &cs) != CUDA_SUCCESS ||
        cs != CU_STREAM_CAPTURE_STATUS_NONE)
        goto out;
    ao_note_stream_locked(stream);
    ao_poll_locked();
    ao_measuring_room(size);
    ao_scope_t *s = server(stream);
    ao_buffer_t *b = s ? serve_buffer(s, size, stream) : NULL;
    if (!b) goto out;
    ao_chunk_t *c = b->chunk;
    if (!ao_ptrmap_put(&ao_buffers, b->addr, (uint64_t)(uintptr_t)b)) {
        // Unreachable by free: its space goes back now (nothing used it).
        ao_serve_unlink(c, b);
        if (!--c->nlive) serve_drop(c, stream);
        goto out;
    }
    ao_stat_device((int64_t)size, 0, 0);
    ao_stat_add(AO_STAT_SERVED_BYTES, (int64_t)size);
    ao_stat_add(AO_STAT_SERVED_ALLOCS, 1);
    ao_stat_max(AO_STAT_SERVED_PEAK_BYTES, ao_stat_get(AO_STAT_SERVED_BYTES));
    *out = b->addr;
    r = CUDA_SUCCESS;
out:
    pthread_mutex_unlock(&ao_eng.mu);
    return r;
}

bool ao_engine_serving;
static bool paused; // ao_serve_active was false at a forward's start

bool ao_serve_active(void)
{
    return ao_engine_serving && (ao_eng.manual || !ao_offloads_nothing() || ao_budget_given());
}

// The program's frees done on the GPU (the host waits, once), its pool's
// unused reserve back to the driver.
static void pool_give_back(CUmemoryPool pool)
{
    ao_real.cuCtxSynchronize();
    ao_real.cuMemPoolTrimTo(pool, 0);
}

void ao_serve_decide(void)
{
    if (optimizer_served) optimizer_first = false;
    if (ao_engine_serving) { // paused, or resumed as this forward begins
        bool was = paused;
        paused = !ao_serve_active();
        if (was && !paused && default_pool_current()) pool_give_back(ao_program_pool());
        return;
    }
    if (ao_config.serve != AO_SERVE_AUTO || ao_config.check || !ao_eng.ready ||
        ao_offloads_nothing() || !default_pool_current())
        return;
    CUmemoryPool pool = ao_program_pool();
    cuuint64_t reserved = 0, used = 0;
    if (!ao_pool_figures(pool, &reserved, &used)) return;
    uint64_t unused = reserved > used ? reserved - used : 0, in_use = ao_device_in_use();
    const bool keeps = ao_pool_keeps(pool);
    if (!keeps && (unused < AO_SERVE_UNUSED_MIN || unused * 100 < in_use)) return;
    // Handles of a layer's size cannot back granules: they go to the driver,
    // and from now on a handle that is not a granule goes back as it comes
    // free (mem/vmm.c). The pool's reserve can go once the program's frees
    // in it are done on the GPU: the host waits for them, once.
    ao_drain_locked();
    ao_idle_give_back();
    ao_vmm.fine = true;
    __atomic_store_n(&ao_engine_serving, true, __ATOMIC_RELAXED);
    pool_give_back(pool);
    ao_stat_max(AO_STAT_SERVED_FROM_STEP, (uint64_t)ao_eng.steps + 1);
    if (!keeps) ao_stat_max(AO_STAT_SERVE_POOL_UNUSED, unused);
    ao_auto_serving_began();
    if (ao_config.verbose && keeps)
        ao_log(AO_LOG_INFO,
               "serving the program's allocations from aoshim's memory: its pool keeps what it "
               "frees (release threshold; AOSHIM_SERVE=auto)");
    else if (ao_config.verbose)
        ao_log(AO_LOG_INFO,
               "serving the program's allocations from aoshim's memory from step %d: its pool "
               "held %.1f MiB unused as the step's forward began (AOSHIM_SERVE=auto)",
               ao_eng.steps, (double)unused / (1 << 20));
}
