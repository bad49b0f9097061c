# SPDX-License-Identifier: MIT
"""aoshim-replay run: a step trace on the simulated GPU, with or without aoshim.

  aoshim-replay run TRACE [--build DIR] [--shim LIB] [--steps N] [--link GBPS]
                          [--check] [--scale K] [--scan-leftovers] [--no-host-pace]
                          [NAME=VALUE ...]

Runs DIR/tests/replay/replay (the meson build DIR, default 'build') on that
build's simulated GPU: LD_LIBRARY_PATH=DIR/tests/sim, SIM_NODATA=1 unless
--check, SIM_CAPACITY from the trace's meta total= (divided by --scale;
80G without one), SIM_D2H_GBPS and SIM_H2D_GBPS from --link. With --shim,
LIB (libaoshim.so) is preloaded and its report (AOSHIM_REPORT, a temporary
file unless given) gives late_reloads, and with --scale K, AOSHIM_MIN_BYTES is
its default divided by K unless given; without --shim, aoshim is not loaded.
NAME=VALUE pairs go into the replay's environment last (AOSHIM_OFFLOAD_LAYERS=
all, SIM_PROFILE=a100, ...). The replay's line is printed last:

  replay status=ok steps=N peak_device_bytes=B peak_in_use_bytes=B
         fwd_in_use_bytes=B step_ns=T late_reloads=K races=R faults=F
         [wrong=W] [scale=K]

--scan-leftovers passes the raw parameter words the replay leaves out as
leftovers (docs/replay.md, "Raw words") to aoshim's launch scan too, as it
sees them on a GPU, where the simulator neither checks nor orders them.

A recorded trace is replayed at its program's host pace: before each call the
host works for the gap its t= recorded, less what the simulator charged the
last call of that kind (docs/replay.md, "The host's pace"). --no-host-pace
issues each call as soon as the last one's cost has passed.

A replay that cannot run says why in status= (bad_header, bad_trace, oom,
fault, ...) and exits non-zero. docs/replay.md (## run) has the details.
Python standard library only.
"""
import gzip
import os
import re
import subprocess
import sys
import tempfile
import threading

PROG = "aoshim-replay run"
KEYS = ("steps", "peak_device_bytes", "peak_in_use_bytes", "fwd_in_use_bytes", "step_ns",
        "late_reloads", "races", "faults")
DEFAULT_CAPACITY = 80 << 30
GRANULE = 2 << 20
MIN_BYTES = 1 << 20  # AOSHIM_MIN_BYTES's default (src/config.h)


class UsageError(Exception):
    pass


def line(status, figures=None, check=False, scale=1):
    """The replay's line, for the cases the replay itself could not print it."""
    f = dict.fromkeys(KEYS, 0)
    f.update(figures or {})
    out = f"replay status={status} " + " ".join(f"{k}={f[k]}" for k in KEYS)
    if check:
        out += f" wrong={f.get('wrong', 0)}"
    if scale != 1:
        out += f" scale={scale}"
    return out


def parse_args(argv):
    o = {"trace": None, "build": "build", "shim": None, "steps": None, "link": None,
         "check": False, "scale": 1, "env": [], "leftovers": False}
    it = iter(argv)
    for a in it:
        if a in ("-h", "--help"):
            o["help"] = True
            return o
        if a in ("--build", "--shim", "--steps", "--link", "--scale"):
            v = next(it, None)
            if v is None:
                raise UsageError(f"{a} needs a value")
            key = a[2:]
            if key in ("steps", "scale"):
                if not re.fullmatch(r"[1-9][0-9]*", v):
                    raise UsageError(f"{a} '{v}': expected a positive integer")
                v = int(v)
            elif key == "link":
                try:
                    if not float(v) > 0:
                        raise ValueError
                except ValueError:
                    raise UsageError(f"--link '{v}': expected GB/s, a positive number") from None
            o[key] = v
        elif a == "--check":
            o["check"] = True
        elif a == "--scan-leftovers":
            o["leftovers"] = True
        elif a == "--no-host-pace":
            o["no_pace"] = True
        elif a.startswith("-"):
            raise UsageError(f"unknown option '{a}'")
        elif re.fullmatch(r"[A-Za-z_][A-Za-z0-9_]*=.*", a):
            o["env"].append(tuple(a.split("=", 1)))
        elif o["trace"] is None:
            o["trace"] = a
        else:
            raise UsageError(f"unexpected argument '{a}' (NAME=VALUE pairs set the environment)")
    if o["trace"] is None:
        raise UsageError("no trace given")
    return o


def trace_total(path):
    """The device's bytes from the trace's meta total=, or None."""
    with open(path, "rb") as raw:
        magic = raw.read(2)
    opener = gzip.open if magic == b"\x1f\x8b" else open
    try:
        with opener(path, "rt", encoding="utf-8", errors="replace") as f:
            for n, text in enumerate(f):
                if n == 0 or not text.strip() or text.startswith("#"):
                    continue
                words = text.split()
                if words[0] != "meta":
                    if words[0] in ("stream", "event", "kernel", "pool"):
                        continue  # declarations may come before the meta lines end
                    return None
                for w in words[1:]:
                    if w.startswith("total=") and w[6:].isdigit():
                        return int(w[6:])
                if n > 10000:
                    return None
    except (OSError, EOFError):
        return None
    return None


def environment(o, report):
    env = dict(os.environ)
    sim = os.path.join(o["build"], "tests", "sim")
    env["LD_LIBRARY_PATH"] = os.path.abspath(sim) + (
        ":" + env["LD_LIBRARY_PATH"] if env.get("LD_LIBRARY_PATH") else "")
    if o["check"]:
        env.pop("SIM_NODATA", None)
    else:
        env["SIM_NODATA"] = "1"
    total = trace_total(o["trace"])
    cap = total if total else DEFAULT_CAPACITY
    if o["scale"] != 1:
        cap = -(-cap // o["scale"])
        cap = -(-cap // GRANULE) * GRANULE
    env["SIM_CAPACITY"] = str(cap)
    if o["link"]:
        env["SIM_D2H_GBPS"] = env["SIM_H2D_GBPS"] = str(o["link"])
    preload = [p for p in env.get("LD_PRELOAD", "").replace(":", " ").split()
               if "libaoshim" not in os.path.basename(p)]
    if o["shim"]:
        preload.append(os.path.abspath(o["shim"]))
        if report:
            env["AOSHIM_REPORT"] = report
        # aoshim's size threshold scales with the sizes: at its default
        # (1 MiB) a step at --scale 64 would offload nothing.
        if o["scale"] != 1 and "AOSHIM_MIN_BYTES" not in env and not any(
                k == "AOSHIM_MIN_BYTES" for k, _ in o["env"]):
            env["AOSHIM_MIN_BYTES"] = str(max(512, -(-MIN_BYTES // o["scale"])))
    if preload:
        env["LD_PRELOAD"] = " ".join(preload)
    else:
        env.pop("LD_PRELOAD", None)
    for k, v in o["env"]:
        env[k] = v
    return env


def sim_figures(err):
    """races, faults and the driver's peak from the simulator's exit line."""
    for text in reversed(err):
        if text.startswith("simgpu: peak_device_bytes="):
            kv = dict(w.split("=", 1) for w in text.split()[1:] if "=" in w)
            out = {}
            for k, to in (("races", "races"), ("faults", "faults"),
                          ("peak_device_bytes", "peak_in_use_bytes")):
                if kv.get(k, "").isdigit():
                    out[to] = int(kv[k])
            return out
    return {}


def main(argv):
    try:
        o = parse_args(argv)
    except UsageError as e:
        sys.stderr.write(f"{PROG}: error: {e}\n")
        sys.stderr.write("usage: aoshim-replay run TRACE [--build DIR] [--shim LIB] [--steps N] "
                         "[--link GBPS] [--check] [--scale K] [--scan-leftovers] [--no-host-pace] [NAME=VALUE ...]\n")
        print(line("usage"))
        return 2
    if o.get("help"):
        print(__doc__.strip())
        return 0
    check, scale = o["check"], o["scale"]
    exe = os.path.join(o["build"], "tests", "replay", "replay")
    if not os.access(exe, os.X_OK):
        sys.stderr.write(f"{PROG}: error: {exe} not found: build the tests first "
                         f"(meson setup {o['build']} && ninja -C {o['build']})\n")
        print(line("no_build", check=check, scale=scale))
        return 2
    if o["shim"] and not os.path.isfile(o["shim"]):
        sys.stderr.write(f"{PROG}: error: --shim {o['shim']}: no such file\n")
        print(line("no_shim", check=check, scale=scale))
        return 2
    if not os.path.isfile(o["trace"]):
        sys.stderr.write(f"{PROG}: error: {o['trace']}: no such file\n")
        print(line("no_trace", check=check, scale=scale))
        return 2

    user_report = any(k == "AOSHIM_REPORT" for k, _ in o["env"]) or "AOSHIM_REPORT" in os.environ
    report = None
    if o["shim"] and not user_report:
        fd, report = tempfile.mkstemp(prefix="aoshim-replay-", suffix=".json")
        os.close(fd)
    env = environment(o, report)
    cmd = [exe, o["trace"]]
    if o["steps"]:
        cmd += ["--steps", str(o["steps"])]
    if check:
        cmd.append("--check")
    if o["leftovers"]:
        cmd.append("--scan-leftovers")
    if o.get("no_pace"):
        cmd.append("--no-host-pace")
    if scale != 1:
        cmd += ["--scale", str(scale)]

    # stderr passes through as it comes (aoshim's and the simulator's lines),
    # and is kept for the simulator's exit line in case the replay faults.
    err_tail = []

    def pump(stream):
        for raw in iter(stream.readline, b""):
            text = raw.decode("utf-8", "replace")
            sys.stderr.write(text)
            sys.stderr.flush()
            err_tail.append(text.rstrip("\n"))
            if len(err_tail) > 200:
                del err_tail[:100]

    try:
        p = subprocess.Popen(cmd, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE)
        t = threading.Thread(target=pump, args=(p.stderr,), daemon=True)
        t.start()
        out = p.stdout.read().decode("utf-8", "replace")
        rc = p.wait()
        t.join()
    finally:
        if report:
            try:
                os.unlink(report)
            except OSError:
                pass
    lines = out.splitlines()
    last = lines[-1] if lines and lines[-1].startswith("replay status=") else None
    for text in lines[:-1] if last else lines:
        print(text)
    if last:
        print(last)
        return rc
    figures = sim_figures(err_tail)
    if rc == 86:
        status = "fault"
        figures.setdefault("faults", 1)
    elif rc == 87:
        status = "race"
        figures.setdefault("races", 1)
    elif rc < 0:
        status = f"signal_{-rc}"
    else:
        status = f"exit_{rc}"
    sys.stderr.write(f"{PROG}: the replay stopped without its line ({status})\n")
    print(line(status, figures, check=check, scale=scale))
    return rc if rc > 0 else 1


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
