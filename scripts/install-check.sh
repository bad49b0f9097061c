#!/usr/bin/env bash
# SPDX-License-Identifier: MIT
# The install, checked from the installed copy: `meson install` of build/ (or
# $BUILD_DIR) into a scratch DESTDIR under it, then what a user does with it:
# preload the library (the dev link, and the soname file through aoshim-run)
# into a workload on the simulated GPU, build against aoshim.pc, read
# aoshim-run --help, pass an exit status through, find the Python bootstrap
# and read a report with aoshim-report. Nothing here runs from the build
# tree but the workload and the simulator, so a file the install forgets
# fails here. Any failure: one line saying what, exit status 1.
# shellcheck disable=SC2015,SC2016 # `a && b || fail`: fail is the only way on; '$X' is for sh -c
set -euo pipefail
cd "$(dirname "$0")/.."
dir="${BUILD_DIR:-build}"
stage="$PWD/$dir/install-check"

fail() {
    echo "install-check: FAIL: $*" >&2
    exit 1
}
last_line() { printf '%s\n' "$1" | tail -n 1; }

# The caller's own settings must not decide the outcome.
for v in $(compgen -e); do
    case "$v" in AOSHIM_* | SIM_* | PYTORCH_* | LD_PRELOAD | PYTHONPATH) unset "$v" ;; esac
done

# --- install ---------------------------------------------------------------------------
rm -rf "$stage"
out=$(meson install -C "$dir" --destdir "$stage" --quiet 2>&1) ||
    fail "meson install --destdir: $(last_line "$out")"
layout=$(meson introspect "$dir" --projectinfo --buildoptions | python3 -c '
import json, os, sys
j = json.load(sys.stdin)
o = {x["name"]: x["value"] for x in j["buildoptions"]}
print(j["projectinfo"]["version"], o["prefix"],
      *(os.path.join(o["prefix"], o[k]) for k in ("libdir", "bindir", "includedir")))') ||
    fail "meson introspect $dir: no version and install directories"
read -r version prefix libdir bindir includedir <<<"$layout"
lib="$stage$libdir/libaoshim.so"
run="$stage$bindir/aoshim-run"
report="$stage$bindir/aoshim-report"

[ -L "$lib" ] || fail "$lib is not the dev symlink"
real=$(readlink -f "$lib")
[ "$(basename "$real")" = "libaoshim.so.$version" ] ||
    fail "$lib resolves to $(basename "$real"), not libaoshim.so.$version"
soname=$(readelf -d "$real" | sed -n 's/.*(SONAME).*\[\(.*\)\]/\1/p')
[[ "$soname" =~ ^libaoshim\.so\.[0-9]+$ ]] || fail "libaoshim.so.$version has soname '$soname'"
[ "$stage$libdir/$soname" -ef "$real" ] || fail "no $soname link beside libaoshim.so.$version"
[ -f "$stage$includedir/aoshim.h" ] || fail "aoshim.h not installed in $includedir"
for tool in "$run" "$report"; do
    [ -x "$tool" ] || fail "$tool not installed or not executable"
done

# --- a preloaded workload on the simulated GPU ---------------------------------------
sim="$dir/tests/sim"
ts="$dir/tests/workloads/train_step"
[ -x "$ts" ] || fail "$ts not built (configure with -Dtests=true)"
# AOSHIM_MIN_BYTES=64K and AOSHIM_OFFLOAD_LAYERS=all: it offloads (the default,
# auto, keeps a step this small on the device).
args=(--layers 4 --hidden 128 --seq 64 --steps 1)
export SIM_QUIET=0 LD_LIBRARY_PATH="$PWD/$sim"

checksum() { grep -o 'checksum=[0-9a-f]*' <<<"$1" || true; }
workload() { # label, output, status
    [ "$3" = 0 ] || fail "$1: train_step exited $3: $(last_line "$2")"
    grep -q '^aoshim: memory summary' <<<"$2" || fail "$1: no aoshim summary"
    grep -qE '^aoshim: layer offloads / reloads +[1-9]' <<<"$2" || fail "$1: nothing offloaded"
    grep -q '^simgpu: .* races=0 faults=0 ' <<<"$2" ||
        fail "$1: simulator exit line without races=0 faults=0"
    [ "$(checksum "$2")" = "$base_sum" ] ||
        fail "$1: result $(checksum "$2") differs from the run without aoshim ($base_sum)"
}

out=$("$ts" "${args[@]}" 2>&1) || fail "train_step without aoshim: $(last_line "$out")"
base_sum=$(checksum "$out")
[ -n "$base_sum" ] || fail "train_step printed no checksum"

st=0
out=$(LD_PRELOAD="$lib" AOSHIM_MIN_BYTES=64K AOSHIM_OFFLOAD_LAYERS=all "$ts" "${args[@]}" 2>&1) || st=$?
workload "LD_PRELOAD=$lib" "$out" "$st"

st=0
out=$(RANK=3 "$run" --set MIN_BYTES=64K --layers all --report "$stage/run-%r.json" -- "$ts" "${args[@]}" 2>&1) ||
    st=$?
workload "aoshim-run" "$out" "$st"
[ -f "$stage/run-3.json" ] || fail "aoshim-run --report run-%r.json with RANK=3 wrote no run-3.json"
out=$("$report" "$stage/run-3.json" 2>&1) || fail "aoshim-report: $(last_line "$out")"
grep -q 'device memory in use' <<<"$out" || fail "aoshim-report printed no summary"
st=0
# No --layers: the default is auto, and the budget alone makes it plan.
out=$("$run" --set MIN_BYTES=64K --budget 1M -- "$ts" "${args[@]}" 2>&1) || st=$?
workload "aoshim-run --budget 1M" "$out" "$st"
grep -q '^aoshim: offload plan .*budget \(is\|of\) 1.0 MiB' <<<"$out" ||
    fail "aoshim-run --budget 1M: no offload plan under a 1 MiB budget"
unset LD_LIBRARY_PATH SIM_QUIET

# --- pkg-config and the header --------------------------------------------------------
# The .pc names the configured prefix; the staged copy sits under DESTDIR.
flags=$(PKG_CONFIG_PATH="$stage$libdir/pkgconfig" \
    pkg-config --define-variable=prefix="$stage$prefix" --cflags --libs aoshim 2>&1) ||
    fail "pkg-config --cflags --libs aoshim: $(last_line "$flags")"
[[ " $flags " == *" -I$stage$includedir "* && " $flags " == *" -laoshim "* ]] ||
    fail "pkg-config --cflags --libs aoshim gave '$flags'"
cflags=$(PKG_CONFIG_PATH="$stage$libdir/pkgconfig" \
    pkg-config --define-variable=prefix="$stage$prefix" --cflags aoshim)
libs=$(PKG_CONFIG_PATH="$stage$libdir/pkgconfig" \
    pkg-config --define-variable=prefix="$stage$prefix" --libs aoshim)
cat >"$stage/use_api.c" <<'EOF'
#include <aoshim.h>
#include <stdio.h>

int main(void)
{
    int n = 0;
    if (aoshim_loaded())
        while (aoshim_option_info(n)) n++;
    printf("loaded=%d options=%d\n", aoshim_loaded(), n);
    return 0;
}
EOF
# One program built two ways: Cflags only (the weak aoshim_try_* way: it binds
# to a preloaded library), and linked with -laoshim. The header's
# declarations are weak, and a weak reference does not make a library needed:
# under --as-needed (the toolchain's default here) the link would drop it.
# shellcheck disable=SC2086 # the flags are words
{
    out=$(cc -std=c11 -Wall -Wextra -Werror "$stage/use_api.c" $cflags -o "$stage/use_weak" 2>&1) &&
        out=$(cc -std=c11 -Wall -Wextra -Werror "$stage/use_api.c" $cflags \
            -Wl,--no-as-needed $libs -o "$stage/use_linked" 2>&1)
} || fail "cc use_api.c \$(pkg-config ... aoshim): $(last_line "$out")"

# --- the option table: the parser's own listing against aoshim-run --help ------------
names=$(AOSHIM_VERBOSE=1 LD_PRELOAD="$lib" "$(type -P true)" 2>&1 |
    sed -n 's/^aoshim: option \(AOSHIM_[A-Z0-9_]*\)=.*/\1/p')
count=$(wc -w <<<"$names")
[ "$count" -gt 0 ] || fail "AOSHIM_VERBOSE=1 listed no options"
help=$("$run" --help 2>&1) || fail "aoshim-run --help: $(last_line "$help")"
for n in $names; do
    grep -q "^  $n (default: " <<<"$help" || fail "aoshim-run --help does not list $n"
done
[ "$(grep -c '^  AOSHIM_[A-Z0-9_]* (default: ' <<<"$help")" = "$count" ] ||
    fail "aoshim-run --help lists other options than the library's $count"

out=$("$stage/use_weak")
[ "$out" = "loaded=0 options=0" ] || fail "program built with Cflags only, no shim: '$out'"
out=$(LD_PRELOAD="$lib" "$stage/use_weak")
[ "$out" = "loaded=1 options=$count" ] || fail "program built with Cflags only, preloaded: '$out'"
readelf -d "$stage/use_linked" | grep -q "(NEEDED).*\[$soname\]" ||
    fail "a program linked with -laoshim does not need $soname"
out=$(LD_LIBRARY_PATH="$stage$libdir" "$stage/use_linked")
[ "$out" = "loaded=1 options=$count" ] || fail "program linked with -laoshim: '$out'"

# --- aoshim-run: preload, flags, exit status ----------------------------------------
st=0
out=$("$run" --quiet -- sh -c 'echo $LD_PRELOAD $AOSHIM_QUIET; exit 7') || st=$?
[ "$st" = 7 ] || fail "aoshim-run -- sh -c 'exit 7' exited $st"
read -r pre quiet <<<"$out"
[ "$pre" -ef "$stage$libdir/$soname" ] && [ "$pre" != "${pre#/}" ] ||
    fail "aoshim-run set LD_PRELOAD='$pre', not the installed $soname"
[ "$quiet" = 1 ] || fail "aoshim-run --quiet set AOSHIM_QUIET='$quiet'"
out=$(LD_PRELOAD=/nonexistent/libother.so "$run" -- sh -c 'echo $LD_PRELOAD' 2>/dev/null)
[ "$out" = "/nonexistent/libother.so:$pre" ] || fail "aoshim-run replaced LD_PRELOAD: '$out'"
out=$(LD_PRELOAD="$lib" "$run" -- sh -c 'echo $LD_PRELOAD')
[ "$out" = "$lib" ] || fail "aoshim-run preloaded aoshim twice: '$out'"
st=0
err=$("$run" --no-such-flag -- true 2>&1) || st=$?
[ "$st" = 2 ] && [ "$(wc -l <<<"$err")" = 1 ] && [[ "$err" == "aoshim-run: error: "* ]] ||
    fail "aoshim-run --no-such-flag: exit $st, '$err' (want one error line, exit 2)"

# --- the Python bootstrap and package, found beside the installed library -----------
st=0
out=$(LD_PRELOAD="$lib" AOSHIM_VERBOSE=1 python3 -c \
    'import aoshim; print("package", aoshim.__file__, aoshim.loaded())' 2>&1) || st=$?
grep -qxF "aoshim: Python bootstrap: $stage$libdir/aoshim/python/boot" <<<"$out" ||
    fail "the Python bootstrap was not found in $libdir/aoshim/python/boot"
pkg="$stage$libdir/aoshim/python/aoshim/__init__.py"
[ "$st" = 0 ] && grep -qxF "package $pkg True" <<<"$out" ||
    fail "the aoshim package did not import from the install: $(last_line "$out")"

# --- aoshim-replay: the dispatcher finds its package in the install -----------------
# Beside the installed dispatcher there is no aoshim_replay/: a run that works
# used the package installed under <datadir>/aoshim/python.
replay_tool="$stage$bindir/aoshim-replay"
[ -x "$replay_tool" ] || fail "$replay_tool not installed or not executable"
[ -n "$(find "$stage" -path '*/aoshim/python/aoshim_replay/run.py')" ] ||
    fail "aoshim_replay/run.py not installed under <datadir>/aoshim/python"
out=$("$replay_tool" run tests/replay/data/step4.trace --build "$dir" 2>&1) ||
    fail "aoshim-replay run step4.trace: $(last_line "$out")"
[[ "$(last_line "$out")" == "replay status=ok steps=1 "* ]] ||
    fail "aoshim-replay run step4.trace printed '$(last_line "$out")'"

echo "install-check: ok ($prefix: lib, header, aoshim.pc, aoshim-run, aoshim-report, aoshim-replay, Python)"
