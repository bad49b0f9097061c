#!/usr/bin/env python3
# SPDX-License-Identifier: MIT
"""Render the HTML report in a headless Chromium and check the picture is
not blank, then render its GPU lanes alone and check each lane (compute,
D2H, H2D, waits) has bars drawn in it. Skipped (exit 77) when no Chromium
is installed (scripts/deps.sh --with-browser installs Debian's). With
AO_RENDER_PNG=path the page's screenshot is kept there."""
import os
import shutil
import struct
import subprocess
import sys
import tempfile
import zlib

sys.dont_write_bytecode = True  # no __pycache__ in the source tree
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import runner  # noqa: E402


def png_pixels(path):
    """(width, height, rows of bytes, bytes per pixel) of an 8-bit RGB/RGBA PNG."""
    data = open(path, "rb").read()
    assert data[:8] == b"\x89PNG\r\n\x1a\n", "not a PNG"
    pos, idat, w = 8, b"", 0
    while pos < len(data):
        n, kind = struct.unpack(">I4s", data[pos:pos + 8])
        body = data[pos + 8:pos + 8 + n]
        if kind == b"IHDR":
            w, h, depth, ctype = struct.unpack(">IIBB", body[:10])
            assert depth == 8 and ctype in (2, 6), f"PNG depth {depth} type {ctype}"
            bpp = 3 if ctype == 2 else 4
        elif kind == b"IDAT":
            idat += body
        pos += 12 + n
    raw = zlib.decompress(idat)
    stride = w * bpp
    rows, prev = [], bytearray(stride)
    for y in range(h):
        f = raw[y * (stride + 1)]
        line = bytearray(raw[y * (stride + 1) + 1:(y + 1) * (stride + 1)])
        for x in range(stride):
            a = line[x - bpp] if x >= bpp else 0
            b = prev[x]
            c = prev[x - bpp] if x >= bpp else 0
            if f == 1:
                line[x] = (line[x] + a) & 255
            elif f == 2:
                line[x] = (line[x] + b) & 255
            elif f == 3:
                line[x] = (line[x] + (a + b) // 2) & 255
            elif f == 4:
                p = a + b - c
                pa, pb, pc = abs(p - a), abs(p - b), abs(p - c)
                line[x] = (line[x] + (a if pa <= pb and pa <= pc else b if pb <= pc else c)) & 255
        rows.append(bytes(line))
        prev = line
    return w, h, rows, bpp


def main():
    browser = next((shutil.which(b) for b in ("chromium", "chromium-headless-shell",
                                               "chromium-headless", "chromium-browser",
                                               "google-chrome", "headless_shell") if shutil.which(b)), None)
    rsvg = shutil.which("rsvg-convert")
    if not browser and not rsvg:
        print("SKIP: no chromium / chromium-headless-shell (nor rsvg-convert) installed "
              "(scripts/deps.sh --with-browser installs it); the HTML page is checked by the "
              "'report' test without rendering")
        return 77
    with tempfile.TemporaryDirectory() as d:
        page = os.path.join(d, "run.html")
        # Three steps: the lanes show the one before the last, here a
        # steady step rather than the first (which pins the host pool).
        r = runner.run({"AOSHIM_REPORT_HTML": page, "AOSHIM_OFFLOAD_LAYERS": "all"}, args=runner.WORKLOAD.replace("--steps 2", "--steps 3"))
        if r.returncode != 0 or not os.path.exists(page):
            print(f"FAIL: run exit {r.returncode}:\n{r.stderr[-2000:]}")
            return 1
        png = os.path.join(d, "run.png")
        if browser:
            shoot(browser, page, png, "1100,1250")
        else:
            # No browser: render the page's SVG timeline alone with librsvg.
            html = open(page, encoding="utf-8").read()
            svg = os.path.join(d, "timeline.svg")
            with open(svg, "w", encoding="utf-8") as f:
                f.write(html[html.index("<svg"):html.index("</svg>") + 6])
            subprocess.run([rsvg, "-b", "white", svg, "-o", png], capture_output=True, timeout=120)
        print(f"rendered with {browser or rsvg}")
        if not os.path.exists(png):
            print("FAIL: no picture was rendered")
            return 1
        w, h, rows, bpp = png_pixels(png)
        bg = rows[0][:bpp]
        differ = sum(1 for row in rows for x in range(0, w * bpp, bpp) if row[x:x + bpp] != bg)
        colors = len({row[x:x + 3] for row in rows[::4] for x in range(0, w * bpp, bpp * 4)})
        print(f"rendered {w}x{h}: {differ} pixels differ from the background, {colors} colours")
        if differ < w * h // 50 or colors < 8:
            print("FAIL: the rendered page is (nearly) blank")
            return 1
        keep = os.environ.get("AO_RENDER_PNG")
        if keep:
            shutil.copyfile(png, keep)
            print(f"screenshot kept: {keep}")
        return lanes(browser, rsvg, open(page, encoding="utf-8").read(), d)


def shoot(browser, url_path, png, size):
    subprocess.run([browser, "--headless", "--disable-gpu", "--no-sandbox", "--hide-scrollbars",
                    "--force-device-scale-factor=1", f"--screenshot={png}",
                    f"--window-size={size}", "file://" + url_path],
                   capture_output=True, timeout=120)


# The lanes' geometry in src/report/html.c: lanes LT + i * (LH + LG) high
# LH, from x = ML to W - MR; the axis's tick labels under them.
W, ML, MR, LT, LH, LG = 960, 70, 20, 8, 24, 8


def bar(px):
    """A bar's pixel: a layer's colour (saturated) or a wait's (near black);
    the lane's background and the tick lines, even anti-aliased, are grey."""
    return max(px) - min(px) > 40 or sum(px) < 200


def lanes(browser, rsvg, html, d):
    """The lanes drawn alone, at (0, 0): each lane holds bars (coloured
    pixels, not the grey background or tick lines), the waits lane when
    the page has waits; the axis has its labels."""
    svg = html[html.index('<svg id="lanes"'):]
    svg = svg[:svg.index("</svg>") + 6]
    png = os.path.join(d, "lanes.png")
    if browser:
        page = os.path.join(d, "lanes.html")
        with open(page, "w", encoding="utf-8") as f:
            f.write("<!DOCTYPE html><html><body style=\"margin:0\">" + svg + "</body></html>")
        shoot(browser, page, png, f"{W},200")
    else:
        path = os.path.join(d, "lanes.svg")
        with open(path, "w", encoding="utf-8") as f:
            f.write(svg)
        subprocess.run([rsvg, "-b", "white", path, "-o", png], capture_output=True, timeout=120)
    if not os.path.exists(png):
        print("FAIL: the lanes were not rendered")
        return 1
    w, h, rows, bpp = png_pixels(png)
    bad = 0
    names = ("compute", "D2H copies", "H2D copies", "waits")
    for i, name in enumerate(names):
        y0 = LT + i * (LH + LG)
        drawn = sum(1 for y in range(y0 + 2, y0 + LH - 2) for x in range(ML + 1, W - MR - 1)
                    if bar(rows[y][x * bpp:x * bpp + 3]))
        need = name != "waits" or 'class="wait"' in svg
        print(f"lane {name}: {drawn} pixels drawn")
        if need and drawn < 20:
            bad += 1
            print(f"FAIL: the {name} lane is empty")
    axis = LT + 4 * (LH + LG)
    ink = sum(1 for y in range(axis + 4, min(axis + 18, h)) for x in range(ML, W - MR)
              if sum(rows[y][x * bpp:x * bpp + 3]) < 300)
    print(f"axis labels: {ink} dark pixels")
    if ink < 30:
        bad += 1
        print("FAIL: the lanes' time axis has no tick labels")
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
