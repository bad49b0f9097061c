// SPDX-License-Identifier: MIT
// The HTML page (AOSHIM_REPORT_HTML): one self-contained file, no network and
// no script, so it opens anywhere and can be attached to a bug report. An
// inline SVG draws device memory over time stacked by layer (untracked
// memory at the bottom), the offloaded bytes as a band on top (whose upper
// edge is the "without aoshim" line), the peak envelope of each timeline
// bucket, and marks both peaks; the per-layer table follows.
#include <stdio.h>
#include <unistd.h>

#include "aoshim.h"
#include "emitter.h"
#include "report.h"
#include "stats.h"

#define R ao_rec

enum { W = 960, H = 380, ML = 70, MR = 20, MT = 20, MB = 40 };

typedef struct plot_s {
    uint64_t t0, t1, ymax;
} plot_t;

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
        snprintf(fill, sizeof fill, "hsl(%d,60%%,55%%)", ((s - 1) * 47 % 360 + 360) % 360);
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
                   "</style></head><body>\n<h1>aoshim memory report</h1>\n"
                   "<p>aoshim %s, pid %d, rank %d%s",
                   (int)getpid(), AO_REPORT_VERSION, (int)getpid(), ao_report_rank(),
                   R.device_name[0] ? ", device " : "");
    ao_emit_escaped(&e, R.device_name, true);
    ao_emit_printf(&e,
                   "</p>\n<p class=\"big\">peak device memory <b>%s</b>; without offloading %s "
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
