#!/usr/bin/env bash
# Install what the tests need (if it is not there yet) and run the whole suite:
#   1. pytest tests/                      the package: crew, comm, memory, engine, config ...
#   2. pytest --nbval notebooks solutions  every stored notebook re-run and compared, output by output,
#      three times, so that no stored output depends on the CPU's floating-point kernels:
#        a. as the machine is                           (this CPU's best SIMD kernels, all threads)
#        b. ATEN_CPU_CAPABILITY=default MKL_CBWR=COMPATIBLE   (torch's scalar kernels, MKL's
#                                                        conditional-numerical-reproducibility mode)
#        c. ATEN_CPU_CAPABILITY=avx2 OMP_NUM_THREADS=1  (the 256-bit kernels, one thread;
#                                                        x86-64 only, skipped elsewhere)
#      The Chinese edition (notebooks/zh, solutions/zh) is left out: its code cells and stored outputs
#      are the English ones (tests/test_zh_edition.py proves it), so nothing runs twice.
#      On an AVX-512 CPU pass a covers avx512; a number that is rounding noise must be printed
#      as the claim it supports, with its tolerance ("max |difference| < 1e-4"), never as raw digits.
#
#   ./run_tests.sh                 uses ./.venv (creates it if missing)
#   VENV=/path/to/env ./run_tests.sh
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

if "$PY" -c "import torch" 2>/dev/null; then
    step "keeping the installed torch $("$PY" -c 'import torch; print(torch.__version__)')"
else
    # Pinned and installed first: a bare `pip install -e .` on a fresh machine may pull a
    # multi-GB CUDA build of the newest torch.
    step "installing torch==2.13.0"
    "$PY" -m pip install --quiet torch==2.13.0 || exit 1
fi

# matplotlib's font cache lives in the venv: a cache left in ~/.cache by another environment
# (its bundled fonts' paths gone) makes every figure print "findfont" warnings to stderr, which
# nbval counts as an output the stored notebooks do not have.
case "$VENV" in /*) venv_abs=$VENV ;; *) venv_abs=$PWD/$VENV ;; esac
export MPLCONFIGDIR="${MPLCONFIGDIR:-$venv_abs/.matplotlib}"
mkdir -p "$MPLCONFIGDIR"

step "installing zerolab with the course and test extras"
"$PY" -m pip install --quiet -e '.[course,test]' || exit 1

# tests/test_lab_browser.py drives JupyterLab in a real headless Chromium (Debian's package; playwright
# from the test extra launches it, no browser download). Installed here when it is missing and we
# may (root, apt); elsewhere that one test is skipped with a message saying so.
if ! command -v chromium >/dev/null 2>&1 && [ "$(id -u)" = 0 ] && command -v apt-get >/dev/null 2>&1; then
    step "installing chromium (tests/test_lab_browser.py)"
    export DEBIAN_FRONTEND=noninteractive
    { apt-get update -qq && apt-get install -y -qq chromium fonts-dejavu-core >/dev/null; } \
        || echo "(chromium could not be installed: tests/test_lab_browser.py will be skipped)"
fi

step "pytest tests/"
start=$SECONDS
"$PY" -m pytest tests/
rc_tests=$?                      # 5 means "no tests collected": that is a failure here too
tests_s=$((SECONDS - start))

nb_dirs=()
for d in notebooks solutions; do
    if compgen -G "$d/*.ipynb" > /dev/null; then nb_dirs+=("$d"); else echo "(no notebooks in $d/ yet: skipped)"; fi
done

# name | environment (VAR=value ...) for each nbval pass
passes=("as the machine is|"
        "ATEN_CPU_CAPABILITY=default MKL_CBWR=COMPATIBLE|ATEN_CPU_CAPABILITY=default MKL_CBWR=COMPATIBLE")
case "$(uname -m)" in
    x86_64|amd64) passes+=("ATEN_CPU_CAPABILITY=avx2 OMP_NUM_THREADS=1|ATEN_CPU_CAPABILITY=avx2 OMP_NUM_THREADS=1") ;;
    *) echo "(not an x86-64 CPU: the ATEN_CPU_CAPABILITY=avx2 pass is skipped)" ;;
esac
nb_results=()
rc_nb=0
if [ ${#nb_dirs[@]} -gt 0 ]; then
    for p in "${passes[@]}"; do
        name=${p%%|*}
        read -r -a vars <<< "${p#*|}"
        step "pytest --nbval ${nb_dirs[*]}: $name"
        start=$SECONDS
        env ${vars[@]+"${vars[@]}"} "$PY" -m pytest --nbval --nbval-current-env \
            --nbval-sanitize-with tests/nbval_sanitize.cfg -p no:cacheprovider \
            --ignore=notebooks/zh --ignore=solutions/zh "${nb_dirs[@]}"
        rc=$?                        # 5 ("no tests collected") is a failure too
        nb_results+=("nbval ($name): exit $rc after $((SECONDS - start)) s")
        [ "$rc" -ne 0 ] && rc_nb=1
    done
else
    nb_results+=("nbval: no notebooks")
fi

step "summary"
echo "pytest tests/: exit $rc_tests after $tests_s s"
printf '%s\n' "${nb_results[@]}"
if [ "$rc_tests" -ne 0 ] || [ "$rc_nb" -ne 0 ]; then
    echo "FAILED"
    exit 1
fi
echo "all passed"
