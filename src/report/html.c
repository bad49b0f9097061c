// SPDX-License-Identifier: MIT
// The HTML page (AOSHIM_REPORT_HTML): one self-contained file, no network and
// no script, so it opens anywhere and can be attached to a bug report. An
// inline SVG draws device memory over time stacked by layer (untracked
// memory at the bottom), the offloaded bytes as a band on top (whose upper
// edge is the "without aoshim" line), the peak envelope of each timeline
// bucket, and marks both peaks. Under it, GPU lanes on one GPU time axis:
// each layer's forward and backward compute, the offload (D2H) and reload
// (H2D) copies and the compute stream's waits on reloads, so whether the
// copies hide behind compute shows at a glance; then a legend naming each
// layer's colour and the per-layer table.
#include <stdio.h>
#include <stdlib.h>
#include <unistd.h>

#include "aoshim.h"
#include "emitter.h"
#include "record.h"
#include "report.h"
#include "stats.h"
#include "summary.h"

#define R ao_rec

enum { W = 960, H = 380, ML = 70, MR = 20, MT = 20, MB = 40 };

typedef struct plot_s {
    uint64_t t0, t1, ymax;
} plot_t;

// A layer's colour, the same in the memory chart, the lanes and the legend.
static int layer_hue(int layer)
{
    return (layer * 47 % 360 + 360) % 360;
}

static double px(const plot_t *p, uint64_t t)
{
    double span = p->t1 > p->t0 ? (double)(p->t1 - p->t0) : 1.0;
    return ML + (double)(W - ML - MR) * (double)(t - p->t0) / span;
}

static double py(const plot_t *p, uint64_t v)
{
    return MT + (double)(H - MT - MB) * (1.0 - (double)v / (double)(p->ymax ? p->ymax : 1));
}

// A band between lo (bottom) and hi (top) over the timeline.
static void polygon(ao_emitter_t *e, const plot_t *p, const uint64_t *lo, const uint64_t *hi,
                    const char *fill, const char *title)
{
    // A value holds until the next sample: steps, not slopes.
    ao_emit_printf(e, "<polygon fill=\"%s\" points=\"", fill);
    for (int i = 0; i < R.ntl; i++) {
        ao_emit_printf(e, "%.1f,%.1f ", px(p, R.tl[i].t1), py(p, hi[i]));
        if (i + 1 < R.ntl) ao_emit_printf(e, "%.1f,%.1f ", px(p, R.tl[i + 1].t1), py(p, hi[i]));
    }
    for (int i = R.ntl - 1; i >= 0; i--) {
        if (i + 1 < R.ntl) ao_emit_printf(e, "%.1f,%.1f ", px(p, R.tl[i + 1].t1), py(p, lo[i]));
        ao_emit_printf(e, "%.1f,%.1f ", px(p, R.tl[i].t1), py(p, lo[i]));
    }
    AO_LIT(e, "\"><title>");
    ao_emit_escaped(e, title, true);
    AO_LIT(e, "</title></polygon>\n");
}

static void svg(ao_emitter_t *e)
{
    static uint64_t lo[AO_TL_MAX], hi[AO_TL_MAX];
    plot_t p = {R.ntl ? R.tl[0].t0 : 0, R.ntl ? R.tl[R.ntl - 1].t1 : 1, 0};
    int ipeak = 0, iwithout = 0;
    for (int i = 0; i < R.ntl; i++) {
        const ao_rec_bucket_t *b = &R.tl[i];
        if (b->peak_without > p.ymax) p.ymax = b->peak_without;
        if (b->peak > p.ymax) p.ymax = b->peak;
        if (b->peak > R.tl[ipeak].peak) ipeak = i;
        if (b->peak_without > R.tl[iwithout].peak_without) iwithout = i;
    }
    p.ymax += p.ymax / 20;
    char a[32];
    ao_emit_printf(
        e,
        "<svg id=\"timeline\" xmlns=\"http://www.w3.org/2000/svg\" width=\"%d\" height=\"%d\" "
        "viewBox=\"0 0 %d %d\" font-family=\"sans-serif\" font-size=\"11\">\n"
        "<rect x=\"0\" y=\"0\" width=\"%d\" height=\"%d\" fill=\"#ffffff\"/>\n",
        W, H, W, H, W, H);
    // Axes and grid.
    for (int k = 0; k <= 4; k++) {
        uint64_t v = p.ymax / 4 * (uint64_t)k;
        double y = py(&p, v);
        ao_emit_printf(e,
                       "<line x1=\"%d\" y1=\"%.1f\" x2=\"%d\" y2=\"%.1f\" stroke=\"#dddddd\"/>"
                       "<text x=\"%d\" y=\"%.1f\" text-anchor=\"end\">%s</text>\n",
                       ML, y, W - MR, y, ML - 4, y + 4, ao_fmt_bytes(a, sizeof a, v));
    }
    double span_ms = (double)(p.t1 - p.t0) / 1e6;
    ao_emit_printf(
        e,
        "<text x=\"%d\" y=\"%d\">0 ms</text><text x=\"%d\" y=\"%d\" text-anchor=\"end\">%.1f ms "
        "(host clock)</text>\n",
        ML, H - MB + 16, W - MR, H - MB + 16, span_ms);
    if (!R.ntl) {
        ao_emit_printf(e, "<text x=\"%d\" y=\"%d\">no memory events recorded</text>\n", W / 2 - 60,
                       H / 2);
        AO_LIT(e, "</svg>\n");
        return;
    }
    // Untracked memory at the bottom, then each layer, then the offloaded band.
    for (int i = 0; i < R.ntl; i++)
        lo[i] = 0, hi[i] = R.tl[i].passthrough;
    polygon(e, &p, lo, hi, "#bbbbbb", "not tracked by aoshim (weights, temporaries, ...)");
    int top = R.max_layer + 1 < AO_TL_LAYERS ? R.max_layer + 1 : AO_TL_LAYERS - 1;
    for (int s = 0; s <= top; s++) {
        bool any = false;
        for (int i = 0; i < R.ntl; i++) {
            uint64_t v = R.tl_layer[(size_t)i * AO_TL_LAYERS + (size_t)s];
            lo[i] = hi[i];
            hi[i] = lo[i] + v;
            any |= v != 0;
        }
        if (!any) continue;
        char fill[32], title[64];
        snprintf(fill, sizeof fill, "hsl(%d,60%%,55%%)", layer_hue(s - 1));
        snprintf(title, sizeof title, s ? "layer %d (resident)" : "tracked, no layer", s - 1);
        polygon(e, &p, lo, hi, fill, title);
    }
    for (int i = 0; i < R.ntl; i++)
        lo[i] = hi[i], hi[i] = lo[i] + R.tl[i].offloaded;
    polygon(e, &p, lo, hi, "url(#hatch)", "offloaded to pinned host memory");
    ao_emit_printf(
        e, "%s",
        "<defs><pattern id=\"hatch\" width=\"6\" height=\"6\" patternUnits=\"userSpaceOnUse\" "
        "patternTransform=\"rotate(45)\"><rect width=\"6\" height=\"6\" fill=\"#eef3ff\"/>"
        "<line x1=\"0\" y1=\"0\" x2=\"0\" y2=\"6\" stroke=\"#6688cc\" stroke-width=\"2\"/>"
        "</pattern></defs>\n");
    // The counterfactual line and the device peak envelope.
    AO_LIT(e, "<polyline id=\"without\" fill=\"none\" stroke=\"#cc3333\" stroke-dasharray=\"6,3\" "
              "points=\"");
    for (int i = 0; i < R.ntl; i++) // the interval's highest value over the interval
        ao_emit_printf(e, "%.1f,%.1f %.1f,%.1f ", px(&p, R.tl[i].t0), py(&p, R.tl[i].peak_without),
                       px(&p, R.tl[i].t1), py(&p, R.tl[i].peak_without));
    AO_LIT(e, "\"><title>without aoshim (resident + offloaded)</title></polyline>\n");
    AO_LIT(e, "<polyline id=\"device\" fill=\"none\" stroke=\"#222222\" points=\"");
    for (int i = 0; i < R.ntl; i++) // the interval's highest value over the interval
        ao_emit_printf(e, "%.1f,%.1f %.1f,%.1f ", px(&p, R.tl[i].t0), py(&p, R.tl[i].peak),
                       px(&p, R.tl[i].t1), py(&p, R.tl[i].peak));
    AO_LIT(e, "\"><title>device memory (peak in each interval)</title></polyline>\n");
    const ao_rec_bucket_t *bp = &R.tl[ipeak], *bw = &R.tl[iwithout];
    char b1[32], b2[32];
    ao_emit_printf(
        e,
        "<circle cx=\"%.1f\" cy=\"%.1f\" r=\"5\" fill=\"#222222\"/><text x=\"%.1f\" y=\"%.1f\" "
        "text-anchor=\"middle\">peak %s</text>\n",
        px(&p, bp->t1), py(&p, bp->peak), px(&p, bp->t1), py(&p, bp->peak) + 18,
        ao_fmt_bytes(b1, sizeof b1, bp->peak));
    ao_emit_printf(
        e,
        "<circle cx=\"%.1f\" cy=\"%.1f\" r=\"5\" fill=\"#cc3333\"/><text x=\"%.1f\" y=\"%.1f\" "
        "text-anchor=\"middle\" fill=\"#cc3333\">without aoshim %s</text>\n",
        px(&p, bw->t1), py(&p, bw->peak_without), px(&p, bw->t1), py(&p, bw->peak_without) - 8,
        ao_fmt_bytes(b2, sizeof b2, bw->peak_without));
    // Legend, top right.
    ao_emit_printf(
        e,
        "<g transform=\"translate(%d,%d)\"><rect width=\"12\" height=\"10\" fill=\"#bbbbbb\"/>"
        "<text x=\"16\" y=\"9\">not tracked</text>"
        "<rect y=\"14\" width=\"12\" height=\"10\" fill=\"hsl(0,60%%,55%%)\"/>"
        "<text x=\"16\" y=\"23\">resident, by layer</text>"
        "<rect y=\"28\" width=\"12\" height=\"10\" fill=\"url(#hatch)\" stroke=\"#6688cc\"/>"
        "<text x=\"16\" y=\"37\">offloaded</text>"
        "<line x1=\"0\" y1=\"47\" x2=\"12\" y2=\"47\" stroke=\"#cc3333\" stroke-dasharray=\"4,2\"/>"
        "<text x=\"16\" y=\"51\">without aoshim</text></g>\n",
        W - MR - 130, MT + 4);
    AO_LIT(e, "</svg>\n");
}

// --- GPU lanes ---------------------------------------------------------------------------
// The GPU intervals the record kept (R.spans, GPU ns since the engine's
// reference event), one lane each for compute, D2H, H2D and waits. The
// memory chart above runs on the host clock: on a real GPU the two origins
// agree to within launch latency, on the simulated GPU they do not, so the
// lanes carry their own axis.
enum { LANES = 4, LT = 8, LH = 24, LG = 8, LB = 34 };
static const char *const lane_name[LANES] = {"compute", "D2H copies", "H2D copies", "waits"};

static int lane_of(int kind)
{
    return kind == AO_REC_FWD || kind == AO_REC_BWD ? 0
           : kind == AO_REC_D2H                     ? 1
           : kind == AO_REC_H2D                     ? 2
                                                    : 3;
}

// A tick step of 1, 2 or 5 times a power of ten giving 4 to 10 ticks.
static uint64_t nice_step(uint64_t span)
{
    uint64_t step = 1;
    while (span / step > 10) {
        if (span / (step * 2) <= 10) return step * 2;
        if (span / (step * 5) <= 10) return step * 5;
        step *= 10;
    }
    return step;
}

// One rectangle, or several spans merged into one when they touch at this
// scale: 65536 intervals would otherwise make a page of megabytes.
typedef struct lane_rect_s {
    double x0, x1;
    uint64_t n, bytes, ns;
    int kind, layer;
    bool open;
} lane_rect_t;

static void lane_flush(ao_emitter_t *e, lane_rect_t *r, int lane)
{
    static const char *const cls[] = {"d2h", "h2d", "wait", "fwd", "bwd"};
    if (!r->open) return;
    r->open = false;
    double y = LT + lane * (LH + LG);
    char fill[40], b[32];
    if (r->kind == AO_REC_WAIT) // not red: layer 0 is
        snprintf(fill, sizeof fill, "#222222");
    else
        snprintf(fill, sizeof fill, "hsl(%d,60%%,%d%%)", layer_hue(r->layer),
                 r->kind == AO_REC_BWD ? 75 : 55);
    ao_emit_printf(e,
                   "<rect class=\"%s\" x=\"%.1f\" y=\"%.1f\" width=\"%.1f\" height=\"%d\" "
                   "fill=\"%s\"><title>",
                   cls[r->kind], r->x0, y, r->x1 - r->x0 > 0.5 ? r->x1 - r->x0 : 0.5, LH, fill);
    static const char *const what[] = {"offload", "reload", "wait for reload", "forward",
                                       "backward"};
    ao_emit_printf(e, "%s, layer %d: ", what[r->kind], r->layer);
    if (r->n > 1) ao_emit_printf(e, "%llu intervals, ", (unsigned long long)r->n);
    if (r->bytes) ao_emit_printf(e, "%s in ", ao_fmt_bytes(b, sizeof b, r->bytes));
    ao_emit_printf(e, "%.3f ms GPU time", (double)r->ns / 1e6);
    if (r->bytes && r->ns) ao_emit_printf(e, " (%.1f GB/s)", (double)r->bytes / (double)r->ns);
    AO_LIT(e, "</title></rect>\n");
}

static int cmp_span_start(const void *a, const void *b)
{
    const ao_rec_span_t *x = a, *y = b;
    return x->start < y->start ? -1 : x->start > y->start;
}

// The GPU time window the lanes show: one whole step, the one before the
// last (a step is known to end only where the next one starts), else the
// whole run. A step starts where the first layer's forward of the first
// microbatch starts.
typedef struct window_s {
    uint64_t t0, t1;
    int steps; // step starts seen
} window_t;

static int cmp_u64(const void *a, const void *b)
{
    uint64_t x = *(const uint64_t *)a, y = *(const uint64_t *)b;
    return x < y ? -1 : x > y;
}

static window_t lane_window(void)
{
    window_t w = {UINT64_MAX, 0, 0};
    int layer0 = AO_MAX_LAYERS, mb0 = 1 << 30;
    for (uint32_t i = 0; i < R.nspans; i++) {
        const ao_rec_span_t *s = &R.spans[i];
        if (s->start < w.t0) w.t0 = s->start;
        if (s->end > w.t1) w.t1 = s->end;
        if (s->kind == AO_REC_FWD && (s->layer < layer0 || (s->layer == layer0 && s->mb < mb0)))
            layer0 = s->layer, mb0 = s->mb;
    }
    uint64_t *st = malloc((R.nspans ? R.nspans : 1) * sizeof *st);
    if (!st) return w;
    int n = 0;
    for (uint32_t i = 0; i < R.nspans; i++)
        if (R.spans[i].kind == AO_REC_FWD && R.spans[i].layer == layer0 && R.spans[i].mb == mb0)
            st[n++] = R.spans[i].start;
    qsort(st, (size_t)n, sizeof *st, cmp_u64);
    w.steps = n;
    if (n >= 2) w.t0 = st[n - 2], w.t1 = st[n - 1];
    free(st);
    return w;
}

// The share of kind's GPU time that overlapped compute (the union of the
// forward and backward intervals): how much of the copying hid.
static bool clip(const window_t *w, const ao_rec_span_t *in, ao_rec_span_t *out)
{
    *out = *in;
    if (out->start < w->t0) out->start = w->t0;
    if (out->end > w->t1) out->end = w->t1;
    return out->end > out->start ||
           (in->start == in->end && in->start >= w->t0 && in->start <= w->t1);
}

static void hidden_share(const window_t *w, const ao_rec_span_t *compute, size_t nc, int kind,
                         uint64_t *total, uint64_t *hidden)
{
    *total = *hidden = 0;
    for (uint32_t i = 0; i < R.nspans; i++) {
        ao_rec_span_t c, *s = &c;
        if (R.spans[i].kind != kind || !clip(w, &R.spans[i], s) || s->end <= s->start) continue;
        *total += s->end - s->start;
        // compute[] holds disjoint intervals sorted by start: the first that
        // may overlap, by binary search, then forward.
        size_t lo = 0, hi = nc;
        while (lo < hi) {
            size_t mid = (lo + hi) / 2;
            if (compute[mid].end <= s->start)
                lo = mid + 1;
            else
                hi = mid;
        }
        for (size_t j = lo; j < nc && compute[j].start < s->end; j++) {
            uint64_t a = compute[j].start > s->start ? compute[j].start : s->start;
            uint64_t b = compute[j].end < s->end ? compute[j].end : s->end;
            if (b > a) *hidden += b - a;
        }
    }
}

static void hidden_line(ao_emitter_t *e, const window_t *w, uint64_t ncompute)
{
    if (!ncompute) {
        AO_LIT(e, "<p id=\"hidden\">Compute was not timed (no layer marked with "
                  "<code>aoshim_layer_begin</code>), so the compute lane is empty.</p>\n");
        return;
    }
    ao_rec_span_t *c = malloc(ncompute * sizeof *c);
    if (!c) return;
    size_t n = 0;
    for (uint32_t i = 0; i < R.nspans && n < ncompute; i++) {
        ao_rec_span_t x; // not straight into c[n]: clip writes even what it rejects
        if ((R.spans[i].kind == AO_REC_FWD || R.spans[i].kind == AO_REC_BWD) &&
            clip(w, &R.spans[i], &x))
            c[n++] = x;
    }
    qsort(c, n, sizeof *c, cmp_span_start);
    size_t m = 0; // merged into a union of disjoint intervals
    for (size_t i = 0; i < n; i++) {
        if (m && c[i].start <= c[m - 1].end) {
            if (c[i].end > c[m - 1].end) c[m - 1].end = c[i].end;
        } else {
            c[m++] = c[i];
        }
    }
    uint64_t dt, dh, ht, hh;
    hidden_share(w, c, m, AO_REC_D2H, &dt, &dh);
    hidden_share(w, c, m, AO_REC_H2D, &ht, &hh);
    free(c);
    uint64_t waited = 0;
    for (uint32_t i = 0; i < R.nspans; i++) {
        ao_rec_span_t x;
        if (R.spans[i].kind == AO_REC_WAIT && clip(w, &R.spans[i], &x)) waited += x.end - x.start;
    }
    ao_emit_printf(e,
                   "<p id=\"hidden\">In the step shown, copies hidden behind compute (GPU time "
                   "overlapping a layer's forward or backward): offload <b>%.0f%%</b> of %.3f ms, "
                   "reload <b>%.0f%%</b> of %.3f ms; the compute stream waited %.3f ms on "
                   "reloads.</p>\n",
                   dt ? 100.0 * (double)dh / (double)dt : 0.0, (double)dt / 1e6,
                   ht ? 100.0 * (double)hh / (double)ht : 0.0, (double)ht / 1e6,
                   (double)waited / 1e6);
}

static void lanes(ao_emitter_t *e)
{
    window_t w = lane_window();
    uint64_t g0 = w.t0, g1 = w.t1, n[LANES] = {0};
    for (uint32_t i = 0; i < R.nspans; i++) {
        ao_rec_span_t x;
        if (clip(&w, &R.spans[i], &x)) n[lane_of(x.kind)]++;
    }
    int h = LT + LANES * (LH + LG) + LB;
    ao_emit_printf(e,
                   "<svg id=\"lanes\" xmlns=\"http://www.w3.org/2000/svg\" width=\"%d\" "
                   "height=\"%d\" viewBox=\"0 0 %d %d\" font-family=\"sans-serif\" "
                   "font-size=\"11\">\n<rect x=\"0\" y=\"0\" width=\"%d\" height=\"%d\" "
                   "fill=\"#ffffff\"/>\n",
                   W, h, W, h, W, h);
    for (int l = 0; l < LANES; l++) {
        double y = LT + l * (LH + LG);
        ao_emit_printf(e,
                       "<rect x=\"%d\" y=\"%.1f\" width=\"%d\" height=\"%d\" fill=\"#f6f6f6\"/>"
                       "<text x=\"%d\" y=\"%.1f\" text-anchor=\"end\">%s</text>\n",
                       ML, y, W - ML - MR, LH, ML - 4, y + LH / 2 + 4, lane_name[l]);
    }
    int axis_y = LT + LANES * (LH + LG);
    if (!R.nspans) {
        ao_emit_printf(e, "<text x=\"%d\" y=\"%d\">no GPU intervals recorded</text>\n</svg>\n",
                       W / 2 - 60, axis_y + 16);
        return;
    }
    if (g1 <= g0) g1 = g0 + 1;
    plot_t p = {g0, g1, 1};
    // Ticks on the GPU clock, labelled in ms since the engine's reference event.
    uint64_t step = nice_step(g1 - g0);
    int decimals = step >= 1000000 ? 0 : step >= 100000 ? 1 : step >= 10000 ? 2 : 3;
    for (uint64_t t = (g0 + step - 1) / step * step; t <= g1; t += step) {
        double x = px(&p, t);
        ao_emit_printf(e,
                       "<line class=\"tick\" x1=\"%.1f\" y1=\"%d\" x2=\"%.1f\" y2=\"%d\" "
                       "stroke=\"#cccccc\"/><text x=\"%.1f\" y=\"%d\" text-anchor=\"middle\">"
                       "%.*f</text>\n",
                       x, LT - 2, x, axis_y + 2, x, axis_y + 14, decimals, (double)t / 1e6);
    }
    ao_emit_printf(
        e, "<text x=\"%d\" y=\"%d\" text-anchor=\"end\">GPU time, ms (CUDA events)</text>\n",
        W - MR, axis_y + 29);
    lane_rect_t r[LANES] = {{0}};
    for (uint32_t i = 0; i < R.nspans; i++) {
        ao_rec_span_t x, *s = &x;
        if (!clip(&w, &R.spans[i], s)) continue;
        int l = lane_of(s->kind);
        double x0 = px(&p, s->start), x1 = px(&p, s->end);
        lane_rect_t *c = &r[l];
        if (c->open && c->kind == s->kind && c->layer == s->layer && x0 <= c->x1 + 0.5 &&
            x1 >= c->x0 - 0.5) {
            if (x0 < c->x0) c->x0 = x0;
            if (x1 > c->x1) c->x1 = x1;
        } else {
            lane_flush(e, c, l);
            *c = (lane_rect_t){x0, x1, 0, 0, 0, s->kind, s->layer, true};
        }
        c->n++, c->bytes += s->bytes, c->ns += s->end > s->start ? s->end - s->start : 0;
    }
    for (int l = 0; l < LANES; l++)
        lane_flush(e, &r[l], l);
    if (!n[0])
        ao_emit_printf(e, "<text x=\"%d\" y=\"%d\" fill=\"#888888\">not timed</text>\n", ML + 6,
                       LT + LH / 2 + 4);
    AO_LIT(e, "</svg>\n");
    if (w.steps >= 2)
        ao_emit_printf(e,
                       "<p id=\"window\">Step %d of %d shown (GPU %.3f to %.3f ms): the one before "
                       "the last, the last whole step whose end is known (where the next one "
                       "starts). Bars that touch at this scale are drawn as one (its tooltip "
                       "counts them).</p>\n",
                       w.steps - 1, w.steps, (double)w.t0 / 1e6, (double)w.t1 / 1e6);
    hidden_line(e, &w, n[0]);
}

// Each layer's colour, named; at most 64 layers (the hues then repeat the
// same cycle, 47 degrees apart).
static void legend(ao_emitter_t *e)
{
    AO_LIT(e, "<div id=\"legend\" style=\"max-width:960px;line-height:1.8\">");
    AO_LIT(e, "<span class=\"key\"><span class=\"sw\" style=\"background:#bbbbbb\"></span>"
              "not tracked</span>");
    int shown = 0;
    for (int l = -1; l <= R.max_layer && shown < 64; l++) {
        if (!R.layer[l + 1].seen) continue;
        shown++;
        ao_emit_printf(e,
                       "<span class=\"key\"><span class=\"sw\" style=\"background:hsl(%d,60%%,"
                       "55%%)\"></span>",
                       layer_hue(l));
        if (l < 0)
            AO_LIT(e, "tracked, no layer</span>");
        else
            ao_emit_printf(e, "layer %d</span>", l);
    }
    if (R.max_layer + 1 > shown)
        ao_emit_printf(e, "<span class=\"key\">&hellip; (layers up to %d)</span>", R.max_layer);
    AO_LIT(e, "<span class=\"key\"><span class=\"sw\" style=\"background:repeating-linear-"
              "gradient(45deg,#6688cc 0 2px,#eef3ff 2px 5px)\"></span>offloaded</span>"
              "<span class=\"key\"><span class=\"sw\" style=\"background:#222222\"></span>"
              "compute stream waiting for a reload</span></div>\n");
}

static void cell_bytes(ao_emitter_t *e, uint64_t v)
{
    char b[32];
    ao_emit_printf(e, "<td>%s</td>", ao_fmt_bytes(b, sizeof b, v));
}

void ao_report_html(int fd)
{
    bool locked = ao_rec_lock_for_report();
    ao_rec_finish_locked();
    ao_emitter_t e;
    ao_emit_init(&e, fd, AO_EMIT_TEXT);
    uint64_t peak = ao_stat_get(AO_STAT_PEAK_DEVICE_BYTES);
    uint64_t without = ao_stat_get(AO_STAT_PEAK_WITHOUT_BYTES);
    char a[32], b[32], c[32];
    ao_emit_printf(&e,
                   "<!DOCTYPE html>\n<html lang=\"en\"><head><meta charset=\"utf-8\">"
                   "<title>aoshim memory report, pid %d</title>\n<style>"
                   "body{font-family:sans-serif;margin:24px;color:#222}"
                   "table{border-collapse:collapse}td,th{border:1px solid #ccc;padding:3px 8px;"
                   "text-align:right}th{background:#f4f4f4}.big{font-size:20px}"
                   ".key{margin-right:14px;white-space:nowrap}.sw{display:inline-block;"
                   "width:12px;height:10px;margin-right:4px;border:1px solid #999}"
                   "</style></head><body>\n<h1>aoshim memory report</h1>\n"
                   "<p>aoshim %s, pid %d, rank %d%s",
                   (int)getpid(), AO_REPORT_VERSION, (int)getpid(), ao_report_rank(),
                   R.device_name[0] ? ", device " : "");
    ao_emit_escaped(&e, R.device_name, true);
    unsigned long long dev = ao_device_peak(), dev_without = ao_device_peak_without();
    char d[32], dw[32], ds[32];
    ao_emit_printf(
        &e,
        "</p>\n<p class=\"big\">device memory in use at peak <b>%s</b> (the driver's "
        "count); without offloading %s (%s); %s %s</p>\n",
        ao_fmt_bytes(d, sizeof d, dev), ao_fmt_bytes(dw, sizeof dw, dev_without),
        ao_device_without_measured() ? "measured" : "modelled",
        dev > dev_without ? "MORE by" : "saved",
        ao_fmt_bytes(ds, sizeof ds, dev > dev_without ? dev - dev_without : dev_without - dev));
    unsigned long long maybe = ao_device_maybe_more();
    if (maybe) {
        char m[32], pr[32];
        ao_emit_printf(&e,
                       "<p class=\"big\">may have used <b>about %s MORE</b> than without aoshim "
                       "by the program's side: its own allocations with the device's own memory "
                       "and the pool's slack come to %s</p>\n",
                       ao_fmt_bytes(m, sizeof m, maybe),
                       ao_fmt_bytes(pr, sizeof pr, ao_device_without_program()));
    }
    ao_emit_printf(&e,
                   "<p>peak allocated <b>%s</b>; without offloading %s "
                   "(saved %s, %.1f%%)</p>\n",
                   ao_fmt_bytes(a, sizeof a, peak), ao_fmt_bytes(b, sizeof b, without),
                   ao_fmt_bytes(c, sizeof c, without > peak ? without - peak : 0),
                   without ? 100.0 * (double)(without > peak ? without - peak : 0) / (double)without
                           : 0.0);
    ao_emit_printf(&e,
                   "<p>offloaded %s, reloaded %s; compute stream waited %.3f ms on reloads; "
                   "late reloads %llu</p>\n",
                   ao_fmt_bytes(a, sizeof a, ao_stat_get(AO_STAT_OFFLOADED_BYTES)),
                   ao_fmt_bytes(b, sizeof b, ao_stat_get(AO_STAT_RELOADED_BYTES)),
                   (double)ao_stat_get(AO_STAT_RELOAD_WAIT_NS) / 1e6,
                   (unsigned long long)ao_stat_get(AO_STAT_LATE_RELOADS));
    AO_LIT(&e, "<h2>Device memory over time</h2>\n");
    svg(&e);
    ao_emit_printf(
        &e, "%s",
        "<p>Bands, bottom up: memory aoshim does not track (grey), each layer's resident "
        "buffers, the offloaded bytes (hatched). Dashed red: without aoshim. Black: the "
        "highest device memory in each interval.</p>\n");
    legend(&e);
    ao_emit_printf(
        &e, "%s",
        "<h2>GPU lanes, one step</h2>\n<p>On the GPU's clock: each layer's forward (its colour) "
        "and backward (lighter) compute, its offload and reload copies on their own streams, and "
        "the compute stream's waits for reloads (black). Copies under a compute bar ran hidden "
        "behind it.</p>\n");
    lanes(&e);
    ao_emit_printf(&e,
                   "<h2>Per layer</h2>\n<table id=\"layers\"><tr><th>layer</th><th>buffers</th>"
                   "<th>tracked</th><th>offloads</th><th>offloaded</th><th>offload time</th>"
                   "<th>reloads</th><th>reload time</th><th>wait</th><th>missed</th><th>late</th>"
                   "<th>peak resident</th></tr>\n");
    for (int l = -1; l <= R.max_layer; l++) {
        const ao_rec_layer_t *x = &R.layer[l + 1];
        if (!x->seen || (l < 0 && !x->buffers && !x->offloads)) continue;
        ao_emit_printf(&e, "<tr><td>%d</td><td>%llu</td>", l, (unsigned long long)x->buffers);
        cell_bytes(&e, x->tracked_bytes);
        ao_emit_printf(&e, "<td>%llu</td>", (unsigned long long)x->offloads);
        cell_bytes(&e, x->offloaded_bytes);
        ao_emit_printf(&e,
                       "<td>%.3f ms</td><td>%llu</td><td>%.3f ms</td><td>%.3f "
                       "ms</td><td>%llu</td><td>%llu</td>",
                       (double)x->d2h_ns / 1e6, (unsigned long long)x->reloads,
                       (double)x->h2d_ns / 1e6, (double)x->wait_ns / 1e6,
                       (unsigned long long)x->missed, (unsigned long long)x->late);
        cell_bytes(&e, x->peak_resident);
        AO_LIT(&e, "</tr>\n");
    }
    ao_emit_printf(&e,
                   "</table>\n<p>GPU times from CUDA events, summed over all steps. The timeline "
                   "keeps at most %d intervals however long the run.</p>\n</body></html>\n",
                   AO_TL_MAX);
    ao_emit_flush(&e);
    ao_rec_unlock(locked);
}
