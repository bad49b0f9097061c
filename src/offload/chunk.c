// SPDX-License-Identifier: MIT
// Chunks (one VA range, mapped as a unit) and the scopes that own them:
// mapping, the idle-mapping cache, release and retirement. Under the
// engine's lock.
#include "offload/internal.h"

// --- chunks -------------------------------------------------------------------------------
// A chunk's state and what the launch scan reads about it change together.
// Being copied out, before its release point, a chunk is still plainly
// usable: the release waits for every launch checked before it (see
// release_point). Past it, any use is the engine's business. Reloading, it is
// usable on the stream already made to wait for it.

// Written under the engine's lock, read by the launch scan without it.
void ao_set_safe_stream(ao_chunk_t *c, CUstream s)
{
    __atomic_store_n(&c->safe_stream, s, __ATOMIC_RELAXED);
}

void ao_chunk_set(ao_chunk_t *c, ao_state_t st)
{
    c->state = st;
    // Reloaded, it stays usable without the engine only on the stream that
    // waited for the reload: another stream waits too (on the GPU, even when
    // the reload is long done), so that the order is the GPU's and not only
    // that of the host thread that saw it complete.
    uint8_t g = AO_GS_AWAY;
    if (st == AO_RESIDENT && c->watched)
        g = AO_GS_WATCHED; // every use through the engine until its release point
    else if ((st == AO_RESIDENT && !c->reloaded) ||
             (st == AO_OFFLOADING && !c->scope->release_recorded))
        g = AO_GS_RESIDENT;
    else if ((st == AO_RELOADING || st == AO_RESIDENT) && c->safe_stream)
        g = AO_GS_STREAM;
    ao_vmm_mark(c->base, c->size, g, c);
}

// ao_phys_unmap, once more if it failed: the failure may have been passing.
static CUresult unmap_twice(CUdeviceptr p, size_t size, ao_phys_t *ph)
{
    CUresult r = ao_phys_unmap(p, size, ph);
    return r == CUDA_SUCCESS ? r : ao_phys_unmap(p, size, ph);
}

// False when the mapping stays: a chunk marked unmapped while still mapped
// made its next map at the same address fail, and the layer was refused.
bool ao_chunk_unmap(ao_chunk_t *c)
{
    CUresult r = unmap_twice(c->base, c->size, &c->phys);
    if (r != CUDA_SUCCESS) {
        if (!ao_cuda_gone_at_exit(r))
            WARN_ONCE("cuMemUnmap failed twice (CUDA error %d): the memory stays mapped", (int)r);
        return false;
    }
    c->mapped = false;
    if (!c->served) ao_stat_device(0, -(int64_t)c->size, 0);
    return true;
}

// Physical memory for a chunk. Memory about to be released (an offload copy
// done soon, a freed buffer whose last kernels are queued) is waited for
// rather than adding device memory: a host far ahead of the GPU would
// otherwise map every layer before any release happened, and the peak would
// be the peak without offloading. The wait blocks the host only while the
// GPU still has queued work, so the GPU does not idle.

// Chunks whose buffers are all freed stay mapped, address and memory, for a
// chunk of the same size to come (the same layer, next step): mapping costs
// a cuMemMap per handle, a cuMemSetAccess (29 us a mapping on the H200) and
// later a cuMemUnmap (19.5 us a mapping), per layer and step, and at a
// step's start they are on the host's critical path (measured: 0.2 ms of a
// 13.2 ms GPT-2-small step). Kept mapped, the memory is idle all the same:
// whoever needs memory the pool lacks unmaps them first (idle_unmap), and
// every trim does.
//
// The memory's last uses (a reload's copy, a kernel, a free on another
// stream) are complete when a chunk is kept, as seen by the thread that
// kept it; the events that showed it go with the mapping, and whichever
// thread reuses or unmaps it waits on them first (complete: no wait), so
// that the order is the GPU's and not only that of aoshim's lock (the
// simulator's race checker found an unmap by another thread unordered with
// a reload's copy).
ao_idle_t *ao_idle_mapped; // newest first
size_t ao_idle_mapped_bytes;

// Keep c's mapping with the events of its last uses (taken: the caller
// puts them back only if this fails).
static bool idle_keep(ao_chunk_t *c, CUevent *ev, int nev)
{
    ao_idle_t *i = malloc(sizeof *i);
    if (!i) return false;
    *i = (ao_idle_t){.base = c->base,
                     .size = c->size,
                     .phys = c->phys,
                     .unordered = c->free_unordered,
                     .next = ao_idle_mapped};
    for (int k = 0; k < nev; k++)
        if (ev[k]) i->ev[i->nev++] = ev[k];
    for (int k = 0; k < c->nfree_ev && i->nev < AO_MAX_FREE_EVENTS + 2; k++)
        i->ev[i->nev++] = c->free_ev[k], c->free_ev[k] = NULL;
    if (c->ev_copy && i->nev < AO_MAX_FREE_EVENTS + 2)
        i->ev[i->nev++] = c->ev_copy, c->ev_copy = NULL;
    ao_idle_mapped = i;
    ao_idle_mapped_bytes += c->size;
    return true;
}

// A use of a chunk that no event orders (ao_free_event could make none):
// the thread about to give its memory back waits for every stream the
// program used, itself (the fault matrix's stress_threads, cuEventCreate
// failing: another thread unmapped a layer a program's copy still read).
static void sync_streams(void)
{
    for (int i = 0; i < ao_eng.nstreams; i++)
        ao_real.cuStreamSynchronize(ao_eng.streams[i]);
    ao_real.cuStreamSynchronize(ao_eng.d2h); // and aoshim's copies
    ao_real.cuStreamSynchronize(ao_eng.h2d);
}

static void idle_ordered(ao_idle_t *i)
{
    if (i->unordered) sync_streams();
    for (int k = 0; k < i->nev; k++) {
        ao_ev_wait(i->ev[k]);
        ao_event_put(i->ev[k], false);
    }
    i->nev = 0;
}

// The number of i's first handles that end exactly size bytes in (its
// handles are mapped in address order), or 0.
static unsigned idle_prefix(const ao_idle_t *i, size_t size)
{
    size_t off = 0;
    for (unsigned k = 0; k < i->phys.n && off < size; k++)
        if ((off += i->phys.size[k]) == size) return k + 1;
    return 0;
}

// One of c's size, taken (its memory and address become the chunk's); else
// for a served chunk (serve.c) the smallest of its own stream's of up to
// most bytes, whose size it takes; else, for a served chunk of more than a
// page, the first most bytes of the smallest larger one of its stream's
// whose handles end there, split off: the rest stays kept at its address.
// Its last uses are waited for by the host; for a chunk whose first use is
// ordered by a stream (a stream-ordered allocation: serve.c, or a layer's
// cudaMallocAsync), ordered before the work of that stream on the GPU (the
// host does not wait: the allocation is used in the stream's order).
//
// Split, a kept mapping's pages stay where they are. Unsplit, a range the
// step's next allocations took apart (the H200 GPT's head frees 1.6 GiB,
// then asks for 800 MiB twice) was unmapped and its pages mapped anew, a
// cuMemSetAccess (29 us) for each: the replayed GPT, one layer offloaded,
// 1.05x -> 1.03x. A range of one page is not split off: in train_step
// --pytorch under the budget its link could hide, ranges of a few pages
// split a page at a time fell apart into ever smaller handles, and the step
// grew from 1.21x to 1.31x.
static bool idle_take(ao_chunk_t *c, ao_order_t by, size_t most)
{
    ao_idle_t **at = NULL, **cut = NULL;
    unsigned ncut = 0, n;
    for (ao_idle_t **pp = &ao_idle_mapped; *pp; pp = &(*pp)->next) {
        const ao_idle_t *i = *pp;
        if (i->size == c->size) {
            at = pp;
            break;
        }
        if (!c->served || i->on != by.stream || i->size <= c->size) continue;
        if (i->size <= most && (!at || i->size < (*at)->size))
            at = pp;
        else if (i->size > most && most > AO_PAGE && !i->unordered &&
                 (!cut || i->size < (*cut)->size) && (n = idle_prefix(i, most)) && n < i->phys.n)
            cut = pp, ncut = n;
    }
    if (!at && cut) { // its first ncut handles: the GPU waits for the events, which stay
        ao_idle_t *i = *cut;
        if (!ao_phys_split(&i->phys, ncut, &c->phys)) return false;
        for (int k = 0; k < i->nev; k++)
            ao_gpu_wait(by.stream, i->ev[k]);
        c->base = i->base;
        c->size = most;
        i->base += most;
        i->size -= most;
        ao_idle_mapped_bytes -= most;
        return true;
    }
    if (!at) return false;
    ao_idle_t *i = *at;
    *at = i->next;
    ao_idle_mapped_bytes -= i->size;
    if (!by.gpu) {
        idle_ordered(i);
    } else {
        CUstream st = by.stream;
        if (i->unordered) sync_streams();
        for (int k = 0; k < i->nev; k++) {
            ao_gpu_wait(st, i->ev[k]);
            ao_event_put(i->ev[k], false);
        }
    }
    c->base = i->base;
    c->size = i->size;
    c->phys = i->phys;
    free(i);
    return true;
}

// Unmap kept chunks until at least need bytes went to the pool (SIZE_MAX:
// all) for a chunk of size fit. Those whose last uses are done first: those
// no larger first, largest first, then the others, smallest first (any
// handle backs any range, vmm.c; a kept mapping larger than the chunk is
// more likely a layer's, whose next step takes it whole: unmapped, it cost
// a mapping each step). When none is done (and !done_only), the host waits
// for the oldest kept: its last uses were queued before the others', so
// they are likely done first. Chosen by size, as the done ones are, it
// waited for uses far down the GPU's queue (the H200 GPT-2 under the
// budget its link hides, 9.2 ms for a 36 MiB allocation at its first
// backward layer, which delayed the reloads issued after it): oldest
// first, GPT-2 1.054x -> 1.023x, the GPT 1.013x -> 1.003x, train_step
// --pytorch 1.116x -> 1.106x, but the Llama 25% under 1.065x -> 1.076x.
// Returns whether any did.
static bool idle_better(size_t a, size_t b, size_t fit)
{
    bool fa = a <= fit, fb = b <= fit;
    if (fa != fb) return fa;
    return fa ? a > b : a < b;
}

// Its last uses are complete: unmapping it does not wait. A served chunk's
// mapping is kept at its free, long before the GPU gets there (serve.c):
// waiting for it stalled the host, and the GPU after it (a small step 3.5x
// slower).
static bool idle_done(ao_idle_t *i)
{
    if (i->unordered) return false;
    for (int k = 0; k < i->nev; k++)
        if (!ao_ev_done(i->ev[k])) return false;
    return true;
}

// Unmap i, once its last uses are done (the host waits for them), and give
// its address range back; its handles go to the pool. False when the unmap
// failed twice: still a good mapping, which the caller keeps (exit retries).
static bool idle_unmap_one(ao_idle_t *i)
{
    idle_ordered(i);
    CUresult r = unmap_twice(i->base, i->size, &i->phys);
    if (r != CUDA_SUCCESS) {
        if (!ao_cuda_gone_at_exit(r))
            WARN_ONCE("cuMemUnmap failed twice (CUDA error %d): idle memory stays mapped", (int)r);
        return false;
    }
    ao_va_free(i->base, i->size);
    return true;
}

// Serving, a kept range larger than a need by a page or more gives only
// the last handles that cover the need: unmapped, the rest stays kept at
// its address (a need of 8 MiB unmapped a 480 MiB range whole, 15
// mappings at 19.5 us each on the host's critical path: train_step
// --pytorch's backward). Adds the bytes given to *got; false when it does
// not apply or the unmap failed (the range goes whole: idle_unmap_one).
static bool idle_unmap_tail(ao_idle_t *i, size_t need, size_t *got)
{
    if (!ao_vmm.fine || i->unordered) return false;
    size_t tail = 0;
    unsigned n = i->phys.n;
    while (n > 1 && tail < need)
        tail += i->phys.size[--n];
    if (tail < need || i->size - tail < AO_PAGE) return false;
    ao_phys_t head;
    if (!ao_phys_split(&i->phys, n, &head)) return false; // i->phys: the tail
    idle_ordered(i);
    const CUdeviceptr at = i->base + (i->size - tail);
    if (unmap_twice(at, tail, &i->phys) !=
        CUDA_SUCCESS) { // still mapped, as a whole: the lists joined again
        if (ao_phys_join(&head, &i->phys))
            i->phys = head;
        else
            WARN_ONCE("no memory to list a kept mapping's handles: some stay with it until exit");
        return false;
    }
    i->phys = head; // (the unmap emptied the tail's list)
    ao_va_free(at, tail);
    i->size -= tail;
    ao_idle_mapped_bytes -= tail;
    *got += tail;
    return true;
}

static bool idle_unmap_for(size_t need, size_t fit, bool done_only)
{
    bool any = false;
    size_t got = 0;
    while (ao_idle_mapped && got < need) {
        ao_idle_t **best = NULL;
        for (ao_idle_t **pp = &ao_idle_mapped; *pp; pp = &(*pp)->next)
            if (idle_done(*pp) && (!best || idle_better((*pp)->size, (*best)->size, fit)))
                best = pp;
        if (!best && !done_only) { // none done: the oldest (the list is newest first)
            best = &ao_idle_mapped;
            while ((*best)->next)
                best = &(*best)->next;
        }
        if (!best) break; // none done
        ao_idle_t *i = *best;
        if (idle_unmap_tail(i, need - got, &got)) {
            any = true;
            continue;
        }
        if (!idle_unmap_one(i)) break; // it stays in the cache
        *best = i->next;
        ao_idle_mapped_bytes -= i->size;
        got += i->size;
        any = true;
        free(i);
    }
    return any;
}

// --- lending ---------------------------------------------------------------------------
// A new mapping that needs memory while the idle mappings' last uses are
// still queued on the GPU: unmapping one first made the host wait for those
// uses (on the H200 Llama replayed under a budget, 3.5 to 19 ms at a time,
// a dozen times a step; then every host call of aoshim's showed on the GPU
// until the host was ahead again). Where a stream orders the new mapping's
// first use, the idle mapping's granules are mapped at the new address
// while still mapped at the old one (cuda.h: a handle may be mapped more
// than once; cuMemRelease frees it when every mapping is gone), and that
// stream waits on the GPU for the old mapping's last uses. The lender
// keeps its address, its events and the granules it did not lend until
// those uses are complete, then is unmapped, its granules to the pool
// (ao_poll_locked); nothing uses its address meanwhile. While serving only
// (ao_vmm.fine): any granule backs any range. For a layer's stream-ordered
// allocation and a reload (its copy waits); for the program's own
// allocations that aoshim serves only as served_may_borrow says.
static ao_idle_t *lenders;

// Unmap the lenders whose last uses are complete; wait: all of them, the
// host waiting for those uses.
static void lenders_unmap(bool wait)
{
    for (ao_idle_t **pp = &lenders; *pp;) {
        ao_idle_t *i = *pp;
        if (!wait && !idle_done(i)) {
            pp = &i->next;
            continue;
        }
        size_t owned = 0; // the granules it did not lend
        for (unsigned k = 0; k < i->phys.n; k++)
            owned += i->phys.size[k];
        if (!idle_unmap_one(i)) { // tried again at the next poll
            pp = &i->next;
            if (wait) break;
            continue;
        }
        ao_idle_mapped_bytes -= owned;
        *pp = i->next;
        free(i);
    }
}

void ao_lenders_poll(void)
{
    if (lenders) lenders_unmap(false);
}

void ao_lenders_to_idle(void)
{
    while (lenders) {
        ao_idle_t *i = lenders;
        lenders = i->next;
        i->next = ao_idle_mapped;
        ao_idle_mapped = i;
    }
}

// Handles of idle mappings, up to want bytes, lent to the next ao_phys_map
// (ao_phys_lend: it takes them first), each lender's last uses ordered
// before st's next work on the GPU: a lender's left first, then the mapping
// idle_unmap_for would unmap for a chunk of size fit. Only handles that fit
// in what is still wanted are lent, so that the mapping takes every one,
// and as the pool gives them (mem/vmm.c): pages, and handles smaller than a
// page only for rem, what the range leaves under a page. Returns the bytes
// lent. For the program's allocations (served), what is wanted is the
// range, not only what the idle pages lack: a page lent in place of an
// idle one, which stays idle. Held to what they lacked, the H200 GPT's
// 800 MiB logits, 20 MiB short, could borrow no page, and the host waited
// 53 ms for a kept page whose last use was the forward's end; then, the GPU
// queue empty, it mapped the head's buffers while the GPU idled 5 ms a
// step. For a layer's chunk the same rule made the Llama 25% under slower
// (1.072x -> 1.089x): not for them.
static int lendable(const ao_idle_t *i, size_t room, size_t rem)
{
    for (int k = (int)i->phys.n - 1; k >= 0; k--)
        if (i->phys.size[k] <= room && (i->phys.size[k] >= AO_PAGE || i->phys.size[k] <= rem))
            return k;
    return -1;
}

static size_t lend(size_t want, size_t fit, CUstream st, bool served)
{
    size_t got = 0, rem = fit % AO_PAGE;
    const size_t upto = served ? fit : want; // what the lent handles may add up to
    while (got < want) {
        ao_idle_t *i = NULL, **at = NULL;
        for (ao_idle_t *l = lenders; l && !i; l = l->next)
            if (lendable(l, upto - got, rem) >= 0 && (!served || l->on == st))
                i = l; // a lender's left, first (waits again)
        for (ao_idle_t **pp = &ao_idle_mapped; *pp && !i; pp = &(*pp)->next)
            if (!(*pp)->unordered && (!served || (*pp)->on == st) &&
                lendable(*pp, upto - got, rem) >= 0 &&
                (!at || idle_better((*pp)->size, (*at)->size, fit)))
                at = pp;
        if (at) {
            i = *at;
            *at = i->next;
            i->next = lenders;
            lenders = i;
        }
        if (!i) break;
        for (int k = 0; k < i->nev; k++)
            ao_gpu_wait(st, i->ev[k]); // (the events stay: the unmap waits for them too)
        for (int k; got < want && (k = lendable(i, upto - got, rem)) >= 0;) {
            CUmemGenericAllocationHandle h = i->phys.h[k];
            size_t size = i->phys.size[k];
            if (size < AO_PAGE) rem -= size;
            unsigned last = --i->phys.n; // the lender's order does not matter: it unmaps whole
            i->phys.h[k] = i->phys.h[last];
            i->phys.size[k] = i->phys.size[last];
            ao_phys_lend(size, h);
            ao_idle_mapped_bytes -= size;
            got += size;
        }
    }
    ao_stat_add(AO_STAT_LENT_BYTES, (int64_t)got);
    if (served) ao_stat_add(AO_STAT_LENT_SERVED_BYTES, (int64_t)got);
    return got;
}

// The program's own allocations that aoshim serves borrow only in the head
// (after the forward's last layer, before the backward) and in a backward
// where no layer waits for its reload, and only mappings whose last uses
// were on their own stream (lend's served: the GPU waits for nothing).
// Lent to them everywhere, memory freed early went to them before the
// layers and reloads that needed it next, and the host, no longer held at
// their waits, ran ahead: the H200 Llama replayed under the budget its link
// could hide took 1.06x the step without aoshim, against 1.03x lent to
// none. Measured again with the head's lending: lent everywhere, the Llama
// 1.105x against 1.092x, and three steps over their 25% budgets by 2-9 MiB.
// Where they may, train_step --pytorch under that budget stops waiting
// 1.4 ms on the host at layer 7's backward for a 12 MiB mapping on its own
// stream: 1.075x -> 1.055x, the Llama 1.028x -> 1.027x. In the head, the
// host that waited for a kept page's last use (the forward's end) reached
// the head's allocations with the GPU's queue empty, and the GPU idled
// while it mapped them: the GPT under that budget 1.035x -> 1.013x.
static bool in_head(void)
{
    const int mb = ao_eng.mb;
    return !ao_eng.open && ao_eng.phase[mb] == PHASE_FORWARD && ao_eng.nlayers > 0 &&
           ao_fwd_ran(ao_eng.nlayers - 1, mb);
}

static bool served_may_borrow(void)
{
    if (in_head()) return true;
    if (ao_eng.open || !ao_eng.bwd_open[ao_eng.mb]) return false;
    for (ao_scope_t *t = ao_eng.scopes; t; t = t->next)
        if (t->state == AO_OFFLOADED) return false;
    return true;
}

bool ao_idle_unmap(size_t need)
{
    bool any = idle_unmap_for(need, SIZE_MAX, false);
    if (need == SIZE_MAX && lenders) lenders_unmap(true), any = true;
    return any;
}

size_t ao_idle_give_back(void)
{
    ao_idle_unmap(SIZE_MAX);
    return ao_phys_trim();
}

// Map [p, p+want) for c into ph, or where least < want (a layer's chunk
// that grows as its buffers come) and memory for the whole is not there
// without waiting for a release under way, all the idle memory there is,
// if at least least: *got says how much. A layer's whole saved set asked
// for at its first allocation made the host wait for a release under way
// (train_step --pytorch, layer 7: its 480 MiB with 478 idle), and the GPU
// idled meanwhile; its last buffers come when that release is done. All
// the idle pages and lent handles, which the mapping takes without making
// any (mem/vmm.c): a part of the first buffer's pages beside a lent 2 MiB
// handle made a 30 MiB one, and the steady state made memory each step.
static CUresult map_range(ao_chunk_t *c, CUdeviceptr p, size_t want, size_t least, ao_phys_t *ph,
                          ao_order_t by, size_t *got)
{
    // A layer whose host waits here (for a release, for new physical memory)
    // leaves its stream idle meanwhile. That idle time is exposed copy time,
    // not the layer's compute: counted as compute, it made the planner see a
    // longer forward that hid the copies, and predict half the exposed time
    // the step had; in the backward, a served allocation's waits made the
    // last layer's backward 23 ms for 1.2 of compute (train_step --pytorch
    // replayed under a budget), and the planner count on reloads hidden
    // there. Timed, and taken off the layer's time: in the forward for the
    // open layer, in the backward for the layer whose backward is open on
    // this thread's stream.
    ao_scope_t *s = c->scope;
    CUevent idle0 = NULL;
    int idle_kind = 0, idle_layer = 0, idle_mb = 0;
    const int mb = ao_eng.mb;
    size_t size = want;
    if (ao_phys_idle() >= least) {
    } else if (ao_eng.open && ao_eng.open->ev_fwd0 && ao_eng.open->stream == s->stream) {
        idle_kind = TIMED_IDLE, idle_layer = ao_eng.open->layer, idle_mb = ao_eng.open->mb;
    } else if (!ao_eng.open && ao_eng.bwd0[mb] && ao_eng.bwd_open[mb] &&
               ao_current_stream() == s->stream) {
        idle_kind = TIMED_IDLE_BWD, idle_layer = ao_eng.bwd_open[mb] - 1, idle_mb = mb;
    }
    if (idle_kind) idle0 = ao_ev_record(s->stream, true);
    // Idle mappings whose uses are done first, then (a stream ordering the
    // first use) lent ones, then those whose uses the host waits for; then a
    // growing chunk takes what is there, else the host waits for a release
    // under way.
    const bool lending =
        by.gpu && ao_vmm.fine && !ao_config.check && (!c->served || served_may_borrow());
    size_t lent = 0;
    while (ao_phys_idle() < size) {
        size_t need = size - ao_phys_idle();
        if (idle_unmap_for(need, size, true)) continue;
        size_t l = lending ? lend(need, size, by.stream, c->served) : 0;
        lent += l;
        if (l || idle_unmap_for(need, size, false)) continue;
        const size_t pages = least < size ? ao_phys_idle_pages() : 0;
        if (least < size && pages >= least) {
            size = pages; // all its pages (lent handles first): none is made
            break;
        }
        if (ao_wait_one_release()) continue;
        break;
    }
    const uint64_t made0 = ao_stat_get(AO_STAT_MEM_CREATE_CALLS);
    CUresult r = ao_phys_map(p, size, ph, c->split);
    // Memory made: the device's count can peak here, between boundaries (a
    // served allocation's last part made after a page went back), where
    // the plan's figure for what the device holds beyond the allocations
    // must see it. Sampled only then: a driver call, and in the steady
    // state a few handles a step are made.
    if (ao_auto.on && ao_stat_get(AO_STAT_MEM_CREATE_CALLS) != made0)
        ao_auto_device_note(ao_device_in_use());
    // Not mapped: lent granules went back to the pool, where a mapping
    // ordered by the host may take them. Their lenders' uses first.
    if (r != CUDA_SUCCESS && lent) lenders_unmap(true);
    if (r == CUDA_ERROR_OUT_OF_MEMORY) {
        ao_drain_locked();
        ao_idle_unmap(SIZE_MAX);
        size = least; // what is needed now, the rest when it is
        r = ao_phys_map(p, size, ph, c->split);
    } else if (r != CUDA_SUCCESS) {
        // Once more: a failed map or set-access may have been passing (the
        // failed attempt undid itself), and a chunk left unmapped is a fault
        // for the next kernel that needs it.
        r = ao_phys_map(p, size, ph, c->split);
    }
    if (r == CUDA_SUCCESS && !c->served) ao_stat_device(0, (int64_t)size, 0);
    *got = r == CUDA_SUCCESS ? size : 0;
    if (idle0)
        ao_timed_add(idle0, ao_ev_record(s->stream, true), idle_kind, idle_layer, idle_mb, 0);
    return r;
}

CUresult ao_chunk_map(ao_chunk_t *c, ao_order_t by)
{
    size_t got;
    CUresult r = map_range(c, c->base, c->size, c->size, &c->phys, by, &got);
    if (r == CUDA_SUCCESS) c->mapped = true;
    return r;
}

// The memory a layer's chunk just mapped, counted as chunk_make counts it.
static void layer_mapped(ao_chunk_t *c, size_t bytes)
{
    ao_auto_layer_live(c->scope->layer, (int64_t)bytes);
    ao_stat_device(0, 0, (int64_t)bytes);
    ao_rec_memory(c->scope->layer, (int64_t)bytes, 0);
}

// The least a chunk maps for need bytes more of a range with most left:
// whole pages, or all that is left.
static size_t pages_for(size_t need, size_t most)
{
    return AO_PAGE_ROUND(need) < most ? AO_PAGE_ROUND(need) : most;
}

CUresult ao_chunk_grow(ao_chunk_t *c, CUdeviceptr to, ao_order_t by)
{
    ao_phys_t more;
    size_t got;
    CUdeviceptr p = c->base + c->size;
    const size_t rest = c->vsize - c->size;
    CUresult r = map_range(c, p, rest, pages_for(to - p, rest), &more, by, &got);
    if (r != CUDA_SUCCESS) return r;
    if (!ao_phys_join(&c->phys, &more)) { // no memory for the list: given back
        if (ao_phys_unmap(p, got, &more) == CUDA_SUCCESS) ao_stat_device(0, -(int64_t)got, 0);
        return CUDA_ERROR_OUT_OF_MEMORY;
    }
    c->size += got;
    layer_mapped(c, got);
    ao_stat_add(AO_STAT_GROWN_BYTES, (int64_t)got);
    ao_chunk_set(c, c->state);
    return CUDA_SUCCESS;
}

// Chunk structs are recycled, never freed: the launch scan reads a chunk
// through the granule table without the engine's lock, and may do so just as
// another thread releases it.
static ao_chunk_t *spare_chunks;

static ao_chunk_t *chunk_alloc(void)
{
    ao_chunk_t *c = spare_chunks;
    if (!c) return calloc(1, sizeof *c);
    spare_chunks = c->next;
    // A recycled chunk may still be read by a scan: its safe_stream (already
    // NULL since chunk_recycle) is not part of the plain clear. Its
    // generation survives too, so that pins of its earlier lives stay stale.
    unsigned gen = c->gen, waive_gen = __atomic_load_n(&c->waive_gen, __ATOMIC_RELAXED);
    memset(c, 0, offsetof(ao_chunk_t, safe_stream));
    memset((char *)c + offsetof(ao_chunk_t, safe_stream) + sizeof c->safe_stream, 0,
           sizeof *c - offsetof(ao_chunk_t, safe_stream) - sizeof c->safe_stream);
    c->gen = gen;
    __atomic_store_n(&c->waive_gen, waive_gen + 1, __ATOMIC_SEQ_CST);
    return c;
}

static void chunk_recycle(ao_chunk_t *c)
{
    ao_set_safe_stream(c, NULL);
    c->gen++; // graph pins still naming it no longer hold it (graph pins below)
    c->next = spare_chunks;
    spare_chunks = c;
}

// A chunk of size for s: a kept mapping of that size (served: of at least
// least and at most size), else new address space and memory
// (map_range). served: the program's own allocations on stream st
// (serve.c), accounted as the program's. first: the size of the first
// buffer, of a layer's chunk that may map the rest of its range later
// (ao_chunk_grow) when memory for the whole is not there yet.
static ao_chunk_t *chunk_make(ao_scope_t *s, size_t size, size_t least, size_t first, bool split,
                              bool served, ao_order_t by)
{
    ao_chunk_t *c = chunk_alloc();
    if (!c) return NULL;
    c->size = least; // idle_take sets the size it took
    c->split = split;
    c->scope = s;
    c->state = AO_RESIDENT;
    c->served = served;
    if (!ao_config.check && idle_take(c, by, size)) { // mapped already, at an address of its own
        c->mapped = true;
        size = c->size;
        if (!served) ao_stat_device(0, (int64_t)size, 0);
    } else {
        c->size = size;
        if (ao_va_alloc(size, &c->base) != CUDA_SUCCESS) {
            if (!served) // a served one goes to the program's pool, as before
                WARN_ONCE("aoshim's device address range is full: further buffers are not tracked");
            chunk_recycle(c);
            return NULL;
        }
    }
    c->vsize = size;
    // Grows only where any page backs any range (serving: ao_vmm.fine), in
    // pages: elsewhere a layer's memory is one handle of its size, which the
    // next step's chunk takes whole.
    size_t at_least = size;
    if (!c->mapped && !served && ao_vmm.fine && !ao_config.check) at_least = pages_for(first, size);
    if (!c->mapped && map_range(c, c->base, size, at_least, &c->phys, by, &c->size) == CUDA_SUCCESS)
        c->mapped = true;
    if (!c->mapped || ao_extents_give(&c->free, c->base, size) < 0) {
        if (!c->mapped || ao_chunk_unmap(c)) ao_va_free(c->base, size);
        ao_extents_clear(&c->free);
        chunk_recycle(c);
        return NULL;
    }
    if (!served) layer_mapped(c, c->size);
    ao_chunk_set(c, AO_RESIDENT);
    c->next = s->chunks;
    s->chunks = c;
    return c;
}

ao_chunk_t *ao_chunk_new(ao_scope_t *s, size_t size, size_t first, bool split, ao_order_t by)
{
    return chunk_make(s, size, size, first, split, false, by);
}

ao_chunk_t *ao_chunk_serve(ao_scope_t *s, size_t size, size_t least, CUstream st)
{
    return chunk_make(s, size, least, size, false, true, AO_BY_STREAM(st));
}

// Its buffers' records go, and their host slots.
static void buffers_free(ao_chunk_t *c)
{
    for (ao_buffer_t *b = c->buffers, *n; b; b = n) {
        n = b->next;
        if (b->host) ao_host_free(b->host, b->size);
        free(b);
    }
}

// A chunk whose memory is unmapped or the cache's: its events and the
// live count go, it leaves its scope and is recycled.
static void chunk_drop(ao_chunk_t *c)
{
    ao_extents_clear(&c->free);
    ao_event_put(c->ev_copy, false);
    ao_event_put(c->ev_out, false);
    for (int i = 0; i < c->nfree_ev; i++)
        ao_event_put(c->free_ev[i], false);
    if (!c->served) {
        ao_auto_layer_live(c->scope->layer, -(int64_t)c->size);
        ao_stat_device(0, 0, -(int64_t)c->size);
    }
    for (ao_chunk_t **pp = &c->scope->chunks; *pp; pp = &(*pp)->next)
        if (*pp == c) {
            *pp = c->next;
            break;
        }
    chunk_recycle(c);
}

// No mapping is kept for later: no layer is tracked (a schedule that
// offloads nothing) and aoshim's memory serves no program allocation.
static bool keeps_nothing(void)
{
    return !ao_eng.manual && ao_offloads_nothing() && !ao_serve_active();
}

// A served chunk freed on its own stream, its uses not complete yet: its
// mapping kept with the event at the free, which whoever takes it waits
// for (ao_chunk_serve on the GPU, a layer on the host). False when it
// cannot be kept now (the caller retires it as usual).
bool ao_chunk_keep_freed(ao_chunk_t *c, CUevent ev)
{
    if (ao_config.check || !c->mapped || keeps_nothing() || c->nfree_ev || c->free_unordered ||
        c->ev_copy || !idle_keep(c, &ev, 1))
        return false;
    ao_idle_mapped->on = c->scope->stream;
    buffers_free(c);
    ao_vmm_mark(c->base, c->size, AO_GS_NONE, NULL);
    c->mapped = false; // the mapping is the cache's now
    chunk_drop(c);
    return true;
}

// A chunk with no buffer left, all of whose uses are complete, goes away:
// unmapped, its host slots and address range given back.
// ev, nev: the events that showed c's last uses complete (NULL: none, and
// the mapping is not kept). Returns whether it took them.

bool ao_chunk_release(ao_chunk_t *c, CUevent *ev, int nev)
{
    bool took = false;
    buffers_free(c);
    if (!c->served) // the program's own memory (serve.c), not a layer's
        ao_rec_memory(c->scope->layer, c->mapped ? -(int64_t)c->size : 0,
                      c->mapped ? 0 : -(int64_t)c->size);
    ao_vmm_mark(c->base, c->size, AO_GS_NONE, NULL);
    // Kept mapped only for a tracked layer to come: under a schedule that
    // offloads nothing (known mid-way through the first step) the layers go
    // to the real allocator, which gets the memory back at once instead
    // (held, a 1F1B step of 4 microbatches peaked 71% over its need).
    // Serving, aoshim's memory is that allocator: kept (serve.c).
    bool none = keeps_nothing();
    if (!ao_config.check && c->mapped && ev && !none && idle_keep(c, ev, nev)) {
        took = true;
        if (c->vsize > c->size) ao_va_free(c->base + c->size, c->vsize - c->size); // never mapped
        c->mapped = false; // the mapping is the cache's now
        if (!c->served) ao_stat_device(0, -(int64_t)c->size, 0);
    } else {
        bool unmapped = !c->mapped || ao_chunk_unmap(c);
        // AOSHIM_CHECK: the address stays reserved and unmapped for good, so
        // a use after free faults instead of finding a later buffer there. A
        // range still mapped is never handed out again either.
        if (!ao_config.check && unmapped) ao_va_free(c->base, c->vsize);
    }
    if (none) ao_phys_trim();
    chunk_drop(c);
    return took;
}

bool ao_free_events_done(ao_chunk_t *c)
{
    if (c->free_unordered) sync_streams(); // each thread that gives the memory back
    for (int i = 0; i < c->nfree_ev; i++)
        if (!ao_ev_done(c->free_ev[i])) return false;
    return true;
}

void ao_defer(ao_deferred_t *d)
{
    d->next = ao_eng.deferred;
    ao_eng.deferred = d;
}

// The last buffer of a chunk was freed. Its release waits for: the scope's
// stream (which orders every free made on it), the frees it does not order,
// and any copy still reading or writing the chunk.
void ao_chunk_retire(ao_chunk_t *c)
{
    c->retiring = true;
    bool copying = (c->ev_copy && !ao_ev_done(c->ev_copy)) || c->state == AO_OFFLOADING ||
                   c->state == AO_RELOADING;
    if (!c->mapped && !copying && ao_free_events_done(c)) {
        ao_chunk_release(c, NULL, 0); // offloaded: nothing on the device uses it
        return;
    }
    ao_deferred_t *d = calloc(1, sizeof *d);
    if (!d) {
        // No memory to defer: wait for the whole device. Rare enough that
        // blocking this one caller is the honest fallback.
        sync_streams();
        ao_chunk_release(c, NULL, 0);
        return;
    }
    d->chunk = c;
    d->ev[d->nev++] = ao_ev_record(c->scope->stream, false);
    if (copying)
        d->ev[d->nev++] = ao_ev_record(c->state == AO_RELOADING ? ao_eng.h2d : ao_eng.d2h, false);
    for (int i = 0; i < d->nev; i++)
        if (!d->ev[i]) c->free_unordered = true; // no event: see ao_free_events_done
    ao_defer(d);
}

// --- scopes -------------------------------------------------------------------------------
void ao_learn_free(ao_learn_t *l)
{
    free(l->size);
    free(l->flags);
    memset(l, 0, sizeof *l);
}

bool ao_learn_push(ao_learn_t *l, uint64_t size, uint8_t flags)
{
    if ((l->n & (l->n - 1)) == 0) { // grow at powers of two
        size_t cap = l->n ? l->n * 2 : 16;
        uint64_t *ns = realloc(l->size, cap * sizeof *ns);
        if (ns) l->size = ns;
        uint8_t *nf = realloc(l->flags, cap);
        if (nf) l->flags = nf;
        if (!ns || !nf) return false;
    }
    l->size[l->n] = size;
    l->flags[l->n] = flags;
    l->n++;
    return true;
}

void ao_scope_destroy(ao_scope_t *s)
{
    for (ao_scope_t **pp = &ao_eng.scopes; *pp; pp = &(*pp)->next)
        if (*pp == s) {
            *pp = s->next;
            break;
        }
    ao_event_put(s->ev_release, false);
    ao_event_put(s->ev_copied, false);
    ao_event_put(s->ev_reloaded, false);
    ao_event_put(s->ev_fwd0, true);
    ao_learn_free(&s->rec);
    free(s->stays);
    free(s);
}

ao_scope_t *ao_scope_find(int layer, int mb)
{
    for (ao_scope_t *s = ao_eng.scopes; s; s = s->next)
        if (s->layer == layer && s->mb == mb && !s->recompute) return s;
    return NULL;
}
