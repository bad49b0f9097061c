// SPDX-License-Identifier: MIT
// The happens-before checker: vector clocks per stream and per host thread,
// and an access history per address range.
//
// Every agent (stream or host thread) owns one slot of a vector clock. An op
// enqueued on stream S gets the epoch (S, S.vc[S]) after S.vc has absorbed
// the enqueuing thread's clock; events carry snapshots; waits and host syncs
// join them. An access conflicts with an earlier one when they overlap, at
// least one writes (or frees), and the later access's clock does not cover
// the earlier epoch: nothing the program did orders them, so a real GPU may
// run them in either order, whatever the virtual timing happened to be.
//
// All of this runs under the global simulator lock (sim_enter).
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "internal.h"

// --- agents -------------------------------------------------------------------
static int n_agents;
static const char *agent_what[SIM_MAX_AGENTS];

int sim_agent_new(const char *what)
{
    // The vector clocks are fixed arrays: an agent past the end would alias
    // another agent's slot and silently hide races, so stop loudly instead.
    if (n_agents >= SIM_MAX_AGENTS) {
        sim_log("error: more than %d streams + host threads over the process lifetime",
                SIM_MAX_AGENTS);
        abort();
    }
    agent_what[n_agents] = what;
    return n_agents++;
}

void sim_vc_join(sim_vc_t *dst, const sim_vc_t *src)
{
    for (int i = 0; i < n_agents; i++)
        if (src->c[i] > dst->c[i]) dst->c[i] = src->c[i];
}

static __thread sim_thread_t *cur_thread;
static sim_thread_t *all_threads[SIM_MAX_AGENTS]; // keeps exited threads' agents reachable

sim_thread_t *sim_thread(void)
{
    // Lazily created, never freed: a thread's history stays valid after it
    // exits (later accesses are compared against its epochs). Lock held.
    if (!cur_thread) {
        sim_thread_t *t = calloc(1, sizeof *t);
        if (!t) abort();
        t->agent = sim_agent_new("host thread");
        // Epoch 0 means "never accessed": start the host at 1 so its first
        // access is a real epoch other agents can cover.
        t->vc.c[t->agent] = 1;
        cur_thread = t;
        all_threads[t->agent] = t;
    }
    return cur_thread;
}

// --- access history -------------------------------------------------------------
// A sorted array of disjoint segments [lo, hi), each with its last writer and
// the readers since (one epoch per agent). A write replaces the whole range by
// one segment, so the array does not grow with repeated writes; reads split at
// most two segments per access.
typedef struct hb_acc_s {
    sim_epoch_t e;
    const char *what;   // kept for the diagnostic; string literals or kernel
    const char *kernel; // names copied by simKernelCreate (never freed)
    uint32_t stream_id; // 0xffffffff: host thread
    uint8_t mode;
} hb_acc_t;

typedef struct hb_seg_s {
    uint64_t lo, hi;
    bool has_writer;
    hb_acc_t writer;
    uint16_t nreaders, capreaders;
    hb_acc_t *readers;
} hb_seg_t;

static hb_seg_t *segs;
static size_t nsegs, capsegs;

// First segment with hi > addr.
static size_t seg_find(uint64_t addr)
{
    size_t lo = 0, hi = nsegs;
    while (lo < hi) {
        size_t mid = (lo + hi) / 2;
        if (segs[mid].hi <= addr)
            lo = mid + 1;
        else
            hi = mid;
    }
    return lo;
}

static void seg_reserve(size_t extra)
{
    if (nsegs + extra <= capsegs) return;
    size_t cap = capsegs ? capsegs * 2 : 256;
    while (cap < nsegs + extra)
        cap *= 2;
    hb_seg_t *n = realloc(segs, cap * sizeof *n);
    if (!n) abort();
    segs = n;
    capsegs = cap;
}

static hb_acc_t *readers_dup(const hb_seg_t *s, uint16_t *cap)
{
    *cap = 0;
    if (!s->nreaders) return NULL;
    hb_acc_t *r = malloc(s->nreaders * sizeof *r);
    if (!r) abort();
    memcpy(r, s->readers, s->nreaders * sizeof *r);
    *cap = s->nreaders;
    return r;
}

// Split the segment containing addr (if any) so that a boundary falls at addr.
static void seg_split_at(uint64_t addr)
{
    size_t i = seg_find(addr);
    if (i >= nsegs || segs[i].lo >= addr) return;
    seg_reserve(1);
    memmove(&segs[i + 1], &segs[i], (nsegs - i) * sizeof *segs);
    nsegs++;
    // segs[i] and segs[i+1] are copies: give the right half its own readers.
    segs[i].hi = addr;
    segs[i + 1].lo = addr;
    segs[i + 1].readers = readers_dup(&segs[i], &segs[i + 1].capreaders);
}

static void seg_add_reader(hb_seg_t *s, const hb_acc_t *a)
{
    for (uint16_t k = 0; k < s->nreaders; k++) {
        if (s->readers[k].e.agent == a->e.agent) {
            s->readers[k] = *a; // an agent's later read covers its earlier one
            return;
        }
    }
    if (s->nreaders == s->capreaders) {
        uint16_t cap = s->capreaders ? s->capreaders * 2 : 2;
        hb_acc_t *r = realloc(s->readers, cap * sizeof *r);
        if (!r) abort();
        s->readers = r;
        s->capreaders = cap;
    }
    s->readers[s->nreaders++] = *a;
}

// --- reporting --------------------------------------------------------------------
static const char *mode_name(int m)
{
    return m == SIM_HB_READ ? "read" : m == SIM_HB_WRITE ? "write" : "free";
}

static int fmt_acc(char *buf, size_t len, const hb_acc_t *a)
{
    if (a->stream_id == 0xffffffffu)
        return snprintf(buf, len, "%s %s by host thread (agent %u, epoch %u)", a->what,
                        mode_name(a->mode), a->e.agent, a->e.clk);
    return snprintf(buf, len, "%s%s%s %s on stream %u (agent %u, epoch %u)", a->what,
                    a->kernel ? " " : "", a->kernel ? a->kernel : "", mode_name(a->mode),
                    a->stream_id, a->e.agent, a->e.clk);
}

static void report_race(const hb_acc_t *earlier, const hb_acc_t *later, uint64_t lo, uint64_t hi)
{
    char a[320], b[320], line[1024];
    fmt_acc(a, sizeof a, earlier);
    fmt_acc(b, sizeof b, later);
    snprintf(line, sizeof line,
             "race on [0x%llx, 0x%llx) (%llu bytes): %s is not ordered before %s",
             (unsigned long long)lo, (unsigned long long)hi, (unsigned long long)(hi - lo), a, b);
    sim_st.races++;
    sim_set_last_race(line);
    sim_log("%s", line);
    if (sim_cfg.race_fatal) {
        sim_exit_line();
        _exit(SIM_EXIT_RACE);
    }
}

// --- the check ---------------------------------------------------------------------
static void hb_check(const hb_acc_t *acc, const sim_vc_t *vc, uint64_t addr, uint64_t bytes)
{
    if (!bytes) return;
    uint64_t end = addr + bytes;
    if (end < addr) end = UINT64_MAX; // a wrapping range: clamp rather than corrupt the array
    seg_split_at(addr);
    seg_split_at(end);

    // One race per access at most: a single unordered pair spanning several
    // segments (or both a writer and a reader of the same op) is one bug.
    bool raced = false;
    size_t i = seg_find(addr);
    size_t first = i;
    for (; i < nsegs && segs[i].lo < end; i++) {
        hb_seg_t *s = &segs[i];
        if (raced) break;
        // An earlier free never races with a later access: the later one
        // passed classification, so the range has a new owner, and handing it
        // out was ordered by the allocator (CUDA's pools insert the same
        // dependencies). Use after free is the classifier's fault, not a race.
        if (s->has_writer && s->writer.mode != SIM_HB_FREE && s->writer.e.agent != acc->e.agent &&
            !sim_vc_covers(vc, s->writer.e)) {
            report_race(&s->writer, acc, s->lo, s->hi);
            raced = true;
            break;
        }
        if (acc->mode != SIM_HB_READ) {
            for (uint16_t k = 0; k < s->nreaders; k++) {
                const hb_acc_t *r = &s->readers[k];
                if (r->e.agent != acc->e.agent && !sim_vc_covers(vc, r->e)) {
                    report_race(r, acc, s->lo, s->hi);
                    raced = true;
                    break;
                }
            }
        }
    }

    // Record the access (even after a race: the later access is the newer
    // state; reporting the same stale writer again would double count).
    i = first;
    if (acc->mode == SIM_HB_READ) {
        // Fill holes with fresh segments so reads of untouched memory are
        // remembered (a later unordered write must see them).
        uint64_t cur = addr;
        while (cur < end) {
            if (i < nsegs && segs[i].lo <= cur) {
                seg_add_reader(&segs[i], acc);
                cur = segs[i].hi;
                i++;
                continue;
            }
            uint64_t hole_end = (i < nsegs && segs[i].lo < end) ? segs[i].lo : end;
            seg_reserve(1);
            memmove(&segs[i + 1], &segs[i], (nsegs - i) * sizeof *segs);
            nsegs++;
            memset(&segs[i], 0, sizeof segs[i]);
            segs[i].lo = cur;
            segs[i].hi = hole_end;
            seg_add_reader(&segs[i], acc);
            cur = hole_end;
            i++;
        }
        return;
    }
    // Write or free: one segment covering [addr, end) replaces what was there.
    size_t j = i;
    while (j < nsegs && segs[j].lo < end) {
        free(segs[j].readers);
        j++;
    }
    size_t removed = j - i;
    if (removed == 0) {
        seg_reserve(1);
        memmove(&segs[i + 1], &segs[i], (nsegs - i) * sizeof *segs);
        nsegs++;
    } else if (removed > 1) {
        memmove(&segs[i + 1], &segs[j], (nsegs - j) * sizeof *segs);
        nsegs -= removed - 1;
    }
    hb_seg_t *s = &segs[i];
    memset(s, 0, sizeof *s);
    s->lo = addr;
    s->hi = end;
    s->has_writer = true;
    s->writer = *acc;
}

void sim_hb_access(const sim_op_t *op, uint64_t addr, uint64_t bytes, int mode)
{
    if (!op) {
        sim_hb_host_access(addr, bytes, mode, "host access");
        return;
    }
    hb_acc_t acc = {
        .e = op->epoch,
        .what = op->what,
        .kernel = op->kernel,
        .stream_id = op->stream ? op->stream->id : 0,
        .mode = (uint8_t)mode,
    };
    hb_check(&acc, op->vc, addr, bytes);
}

void sim_hb_host_access(uint64_t addr, uint64_t bytes, int mode, const char *what)
{
    sim_thread_t *t = sim_thread();
    // A new host epoch: the host's own past is ordered before it, but work it
    // enqueued earlier is not (unless a sync joined that work's clock).
    t->vc.c[t->agent]++;
    hb_acc_t acc = {
        .e = {.agent = (uint16_t)t->agent, .clk = t->vc.c[t->agent]},
        .what = what ? what : "host access",
        .kernel = NULL,
        .stream_id = 0xffffffffu,
        .mode = (uint8_t)mode,
    };
    hb_check(&acc, &t->vc, addr, bytes);
}

void sim_hb_forget(uint64_t addr, uint64_t bytes)
{
    if (!bytes) return;
    uint64_t end = addr + bytes < addr ? UINT64_MAX : addr + bytes;
    seg_split_at(addr);
    seg_split_at(end);
    size_t i = seg_find(addr), j = i;
    while (j < nsegs && segs[j].lo < end) {
        free(segs[j].readers);
        j++;
    }
    if (j == i) return; // nothing there (segs may still be NULL)
    memmove(&segs[i], &segs[j], (nsegs - j) * sizeof *segs);
    nsegs -= j - i;
}

// [to, to + bytes) becomes a second mapping of the memory at [from, ...)
// (cuMemMap of a handle mapped elsewhere too): it takes that range's
// history, so that a use through the new address is checked against the
// uses through the old one (without this, two mappings of one handle hid
// every race between them). Uses made through the old address after this
// are not seen through the new one: a stricter checker would key the
// history by handle and offset. [to, to + bytes) holds no history (a new
// mapping is forgotten first).
void sim_hb_alias(uint64_t from, uint64_t to, uint64_t bytes)
{
    if (!bytes || from == to) return;
    seg_split_at(from);
    seg_split_at(from + bytes);
    size_t i = seg_find(from), n = 0;
    while (i + n < nsegs && segs[i + n].lo < from + bytes)
        n++;
    if (!n) return;
    hb_seg_t *tmp = malloc(n * sizeof *tmp);
    if (!tmp) abort();
    for (size_t k = 0; k < n; k++) {
        tmp[k] = segs[i + k];
        tmp[k].lo = segs[i + k].lo - from + to;
        tmp[k].hi = segs[i + k].hi - from + to;
        tmp[k].readers = readers_dup(&segs[i + k], &tmp[k].capreaders);
    }
    size_t p = seg_find(to);
    seg_reserve(n);
    memmove(&segs[p + n], &segs[p], (nsegs - p) * sizeof *segs);
    memcpy(&segs[p], tmp, n * sizeof *segs);
    nsegs += n;
    free(tmp);
}
