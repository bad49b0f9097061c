#!/usr/bin/env python3
# SPDX-License-Identifier: MIT
"""Render the HTML report in a headless Chromium and check the picture is
not blank. Skipped (exit 77) when no Chromium is installed."""
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
    browser = next((shutil.which(b) for b in ("chromium", "chromium-headless", "chromium-browser",
                                               "google-chrome", "headless_shell") if shutil.which(b)), None)
    rsvg = shutil.which("rsvg-convert")
    if not browser and not rsvg:
        print("SKIP: no chromium / chromium-headless (nor rsvg-convert) installed; the HTML page is "
              "checked by the 'report' test without rendering")
        return 77
    with tempfile.TemporaryDirectory() as d:
        page = os.path.join(d, "run.html")
        r = runner.run({"AOSHIM_REPORT_HTML": page})
        if r.returncode != 0 or not os.path.exists(page):
            print(f"FAIL: run exit {r.returncode}:\n{r.stderr[-2000:]}")
            return 1
        png = os.path.join(d, "run.png")
        if browser:
            subprocess.run([browser, "--headless", "--disable-gpu", "--no-sandbox", "--hide-scrollbars",
                            f"--screenshot={png}", "--window-size=1100,800", "file://" + page],
                           capture_output=True, timeout=120)
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
    return 0


if __name__ == "__main__":
    sys.exit(main())
