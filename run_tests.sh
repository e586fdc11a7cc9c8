#!/usr/bin/env bash
# Install what the tests need (if it is not there yet) and run the whole suite:
#   1. pytest tests/                      the package: crew, comm, memory, engine, config ...
#   2. pytest --nbval notebooks solutions  every stored notebook re-run and compared, output by output,
#      three times, so that no stored output depends on the CPU's floating-point kernels:
#        a. as the machine is                           (this CPU's best SIMD kernels, all threads)
#        b. ATEN_CPU_CAPABILITY=default MKL_CBWR=COMPATIBLE OMP_NUM_THREADS=1   (torch's scalar
#                                                        kernels, MKL's conditional-numerical-
#                                                        reproducibility mode, one thread)
#        c. ATEN_CPU_CAPABILITY=avx2 OMP_NUM_THREADS=1  (the 256-bit kernels, one thread;
#                                                        x86-64 only, skipped elsewhere)
#      The Chinese edition (notebooks/zh, solutions/zh) is left out: its code cells and stored outputs
#      are the English ones (tests/test_zh_edition.py proves it), so nothing runs twice.
#      On an AVX-512 CPU pass a covers avx512; a number that is rounding noise must be printed
#      as the claim it supports, with its tolerance ("max |difference| < 1e-4"), never as raw digits.
#
#   The phases (1, 2a, 2b, 2c, and 3: the two browser tests of tests/) run two at a time (the next
#   starts when one ends), each with a log of its own, shown whole when it ends (with its exit status
#   and time). Then the few tests marked "quiet" (they assert wall-clock promptness) run on their own.
#
#   ./run_tests.sh                 uses ./.venv (creates it if missing)
#   VENV=/path/to/env ./run_tests.sh
#   SLOTS=n ./run_tests.sh         at most n phases at once (2)
#   SERIAL=1 ./run_tests.sh        the phases one after another, one worker each (SLOTS=1)
#   TEST_WORKERS=n NB_WORKERS=m    pytest-xdist workers of pytest tests/ and of each nbval pass (1: none)
#
# torch: if the environment has no torch yet, torch==2.13.0 is installed first (the CPU
# build on a machine without a GPU here). A torch that is already installed, e.g. the CUDA
# build a GPU user put there, is kept: the package only asks for torch>=2.4.
set -uo pipefail
cd "$(dirname "$0")"
VENV=${VENV:-.venv}
PYTHON=${PYTHON:-python3}

step() { printf '\n=== %s\n' "$*"; }

if [ ! -x "$VENV/bin/python" ]; then
    step "creating $VENV"
    "$PYTHON" -m venv "$VENV" || exit 1
fi
PY="$VENV/bin/python"

# Byte-code: pip compiles every module it installs (33 of the 71 s of a fresh install here, for the
# ~15,000 files of torch, JupyterLab and the rest), while the suite imports a few thousand of them.
# So the packages go in uncompiled (--no-compile) and Python writes each module's .pyc the first
# time something imports it (atomically: processes that race only write it twice). That needs byte-
# code writing on: an environment that turns it off (PYTHONDONTWRITEBYTECODE) would recompile
# torch in every process (its import: 1.5 CPU-seconds with byte-code, 3.5 without; suite_time.txt).
unset PYTHONDONTWRITEBYTECODE
pip_install() { "$PY" -m pip install --quiet --no-compile "$@"; }

if "$PY" -c "import torch" 2>/dev/null; then
    step "keeping the installed torch $("$PY" -c 'import torch; print(torch.__version__)')"
else
    # Pinned and installed first: a bare `pip install -e .` on a fresh machine may pull a
    # multi-GB CUDA build of the newest torch.
    step "installing torch==2.13.0"
    pip_install torch==2.13.0 || exit 1
fi

# matplotlib's font cache lives in the venv: a cache left in ~/.cache by another environment
# (its bundled fonts' paths gone) makes every figure print "findfont" warnings to stderr, which
# nbval counts as an output the stored notebooks do not have.
case "$VENV" in /*) venv_abs=$VENV ;; *) venv_abs=$PWD/$VENV ;; esac
export MPLCONFIGDIR="${MPLCONFIGDIR:-$venv_abs/.matplotlib}"
mkdir -p "$MPLCONFIGDIR"

step "installing zerolab with the course and test extras"
pip_install -e '.[course,test]' || exit 1

# tests/test_lab_browser.py drives JupyterLab in a real headless Chromium (Debian's package; playwright
# from the test extra launches it, no browser download). Installed here when it is missing and we
# may (root, apt); elsewhere that one test is skipped with a message saying so.
if ! command -v chromium >/dev/null 2>&1 && [ "$(id -u)" = 0 ] && command -v apt-get >/dev/null 2>&1; then
    step "installing chromium (tests/test_lab_browser.py)"
    export DEBIAN_FRONTEND=noninteractive
    { apt-get update -qq && apt-get install -y -qq chromium fonts-dejavu-core >/dev/null; } \
        || echo "(chromium could not be installed: tests/test_lab_browser.py will be skipped)"
fi

nb_dirs=()
for d in notebooks solutions; do
    if compgen -G "$d/*.ipynb" > /dev/null; then nb_dirs+=("$d"); else echo "(no notebooks in $d/ yet: skipped)"; fi
done

# name | environment (VAR=value ...) for each nbval pass
passes=("as the machine is|"
        "ATEN_CPU_CAPABILITY=default MKL_CBWR=COMPATIBLE OMP_NUM_THREADS=1|ATEN_CPU_CAPABILITY=default MKL_CBWR=COMPATIBLE OMP_NUM_THREADS=1")
case "$(uname -m)" in
    x86_64|amd64) passes+=("ATEN_CPU_CAPABILITY=avx2 OMP_NUM_THREADS=1|ATEN_CPU_CAPABILITY=avx2 OMP_NUM_THREADS=1") ;;
    *) echo "(not an x86-64 CPU: the ATEN_CPU_CAPABILITY=avx2 pass is skipped)" ;;
esac

# Two phases at a time, not one and not all four: alone, a phase keeps about 1.1-1.8 of the 2 cores
# busy (it waits for kernels and ranks to start, and for ranks to meet), so one after another leaves
# a core idle; all four at once (five processes with xdist's two workers, each with ranks of its
# own) overfill the cores, and ranks that wait for a descheduled peer, threads handed off more
# often and caches shared five ways cost CPU of their own: on this 2-core machine, 2026-12-04, all
# four side by side used 2,069 CPU-seconds over 1,070 s, two at a time 1,279 over 751 s, the
# same tests and notebooks. pytest tests/ runs on $TEST_WORKERS pytest-xdist workers (--dist
# loadfile: a file's tests stay together, in order, on one worker); each nbval pass on $NB_WORKERS
# (--dist loadfile: a notebook's cells share one kernel, in order). SERIAL=1 runs one phase at a time.
SLOTS=${SLOTS:-2}
TEST_WORKERS=${TEST_WORKERS:-1}
NB_WORKERS=${NB_WORKERS:-1}
if [ "${SERIAL:-0}" = 1 ]; then SLOTS=1; TEST_WORKERS=0; NB_WORKERS=0; fi
[ "$NB_WORKERS" = 1 ] && NB_WORKERS=0       # one worker: plain pytest, no xdist
[ "$TEST_WORKERS" = 1 ] && TEST_WORKERS=0
xdist() { [ "$1" -gt 0 ] && printf -- '-n %s --dist loadfile' "$1"; }

logs=$(mktemp -d "${TMPDIR:-/tmp}/zerolab-tests.XXXXXX")
names=() cmds=()
# tests/ in two phases: the browser tests (a real JupyterLab in Chromium: about a minute, most of it
# waiting for pages) go last, into the slot the notebook passes leave free near the end, so that
# the two slots end together instead of one idling while the other finishes.
browser_tests=(tests/test_course_browser.py tests/test_lab_browser.py)
names+=("pytest tests/ (but the browser tests)")
cmds+=("\"\$PY\" -m pytest tests/ -m 'not quiet' --durations=15 $(xdist "$TEST_WORKERS") \
$(printf -- '--ignore=%s ' "${browser_tests[@]}")")
if [ ${#nb_dirs[@]} -gt 0 ]; then
    for p in "${passes[@]}"; do
        names+=("pytest --nbval ${nb_dirs[*]}: ${p%%|*}")
        cmds+=("env ${p#*|} \"\$PY\" -m pytest --nbval --nbval-current-env \
--nbval-sanitize-with tests/nbval_sanitize.cfg -p no:cacheprovider --durations=5 $(xdist "$NB_WORKERS") \
--ignore=notebooks/zh --ignore=solutions/zh ${nb_dirs[*]}")
    done
else
    echo "(no notebooks: the nbval passes are skipped)"
fi
names+=("pytest ${browser_tests[*]}")
cmds+=("\"\$PY\" -m pytest -m 'not quiet' --durations=5 ${browser_tests[*]}")

# Each phase writes to a log of its own; a log is shown whole when its phase ends, in the order
# they end, with the phase's exit status and time (5, "no tests collected", is a failure too).
run_phase() {   # index
    local i=$1 t0=$SECONDS
    ( eval "${cmds[$i]}" ) > "$logs/$i.log" 2>&1
    echo "$? $((SECONDS - t0))" > "$logs/$i.done"
}
# The machine's CPU time over the phases (/proc/stat, every process on the machine, Linux only):
# how busy the cores were tells a machine that was short of CPU from a suite that waited.
cpu_ticks() { [ -r /proc/stat ] && awk '/^cpu /{print $2+$3+$4+$7+$8, $2+$3+$4+$5+$6+$7+$8}' /proc/stat; }
cpu_start=$(cpu_ticks)
all_start=$SECONDS
step "running ${#names[@]} phases, $SLOTS at a time (SLOTS=n to change; SERIAL=1: one at a time)"
for i in "${!names[@]}"; do echo "  ${names[$i]}"; done
shown=" "
results=()
failed=0
show_done() {   # show the logs of the phases that have ended since the last call
    local i rc secs
    for i in "${!names[@]}"; do
        [[ "$shown" == *" $i "* ]] && continue
        [ -f "$logs/$i.done" ] || continue
        read -r rc secs < "$logs/$i.done"
        step "${names[$i]}: exit $rc after $secs s"
        cat "$logs/$i.log"
        results[$i]="${names[$i]}: exit $rc after $secs s"
        [ "$rc" -ne 0 ] && failed=1
        shown+="$i "
    done
}
# At most $SLOTS phases at once; the next starts when one ends, in the order above (the longest,
# tests/, first, so that the notebook passes fill the other slot around it, and the short browser
# phase last, into whichever slot frees first).
next=0
while [ ${#results[@]} -lt ${#names[@]} ]; do
    ended=$(find "$logs" -name '*.done' | wc -l)
    while [ "$next" -lt ${#names[@]} ] && [ $((next - ended)) -lt "$SLOTS" ]; do
        echo "  started: ${names[$next]} (at $((SECONDS - all_start)) s)"
        run_phase "$next" &
        next=$((next + 1))
    done
    sleep 1
    show_done
done
# The tests marked "quiet" assert how soon something happens (a killed driver's ranks gone within
# 5 s, a timeout within its second): they run last, on their own, not beside the other phases.
names+=("pytest tests/ -m quiet (on its own)")
cmds+=("\"\$PY\" -m pytest tests/ -m quiet -p no:cacheprovider")
run_phase $((${#names[@]} - 1))
show_done
wait
rm -rf "$logs"

step "summary"
for i in "${!names[@]}"; do echo "${results[$i]}"; done
echo "all phases: $((SECONDS - all_start)) s"
if [ -n "$cpu_start" ]; then
    read -r busy0 total0 <<< "$cpu_start"; read -r busy1 total1 <<< "$(cpu_ticks)"
    hz=$(getconf CLK_TCK); cores=$(getconf _NPROCESSORS_ONLN)
    awk -v b=$((busy1 - busy0)) -v t=$((total1 - total0)) -v hz="$hz" -v n="$cores" 'BEGIN {
        printf "CPU over the phases: %d core-seconds busy of %d (%d cores), %.0f %% (every process on the machine)\n",
               b / hz, t / hz, n, t ? 100 * b / t : 0 }'
fi
if [ "$failed" -ne 0 ]; then
    echo "FAILED"
    exit 1
fi
echo "all passed"
