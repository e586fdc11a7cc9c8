#!/usr/bin/env bash
# DeepSpeed 0.19.8 beside zerolab on a lent device machine (no network there), so that
# benchmarks/step_time.py can put DeepSpeed's step time beside zerolab's and torch DDP's on a
# machine with more than two cores (issue 34 asks for the three in one stored run).
#
#   tools/device_deepspeed.sh wheels      here, with PyPI: .whl/ (git-ignored) gets DeepSpeed 0.19.8
#                                         built without ops (DS_BUILD_OPS=0, pure Python), and the
#                                         wheels of its needs that the device image lacks, for
#                                         PYVER (default 3.12, the device's Python)
#   tools/device_deepspeed.sh run OUT     on the device (carry .whl): installs .whl/ into
#                                         /tmp/ds-site (pip --no-index --target), checks that
#                                         DeepSpeed imports, runs tools/gpu_check.py where there is
#                                         a GPU (OUT/gpu_check.json and .txt), then step_time.py at
#                                         2 and 4 ranks over gloo with DeepSpeed and the floors
#                                         beside, writing OUT/step_time_world*.txt (about 7 min in all)
#
# The device call (the device tool's `run`, carry [".whl"], timeout 540):
#     tools/device_deepspeed.sh run "$OUT"
# Options, as environment variables:
#   PYVER=3.12 PYTHON=python3          wheels: the target's Python / the pip that downloads
#   ALL=1                              wheels: also DeepSpeed's needs that the device image holds
#                                      (for trying the kit on another machine, e.g. this one)
#   DS_PY=python3                      run: the Python that has torch (the device's own)
#   WORLDS="2 4" ROUNDS=40 REPEATS=2   run: what step_time.py is asked for
#   GPU_CHECK=1                        run: 0 skips tools/gpu_check.py
#   WHEELS=.whl                        both: the wheels' folder
set -euo pipefail

ROOT=$(cd "$(dirname "$0")/.." && pwd)
WHL=${WHEELS:-$ROOT/.whl}
DS_PIN="deepspeed==0.19.8"
# DeepSpeed's needs that the device image does not hold (KINDS.md: einops, msgpack, ninja, numpy,
# packaging, psutil, py-cpuinfo, tqdm are there; typing-extensions too, but pydantic wants >= 4.16).
# pydantic_core is the one compiled wheel: its version is the one this pydantic asks for.
NEEDS=(hjson "pydantic==2.14.4" "pydantic_core==2.50.5" annotated-types typing-inspection "typing-extensions>=4.16")
IMAGE_HAS=(einops msgpack ninja py-cpuinfo psutil)

usage() { awk 'NR > 1 && /^#/ { sub(/^# ?/, ""); print; next } NR > 1 { exit }' "$0"; }

wheels() {
    local pyver=${PYVER:-3.12} py=${PYTHON:-python3}
    mkdir -p "$WHL"
    rm -f "$WHL"/*.whl
    # DeepSpeed is published as a source archive only; built here without its ops it is one
    # pure-Python wheel that runs on any Python 3 (its ops would be compiled on first use).
    # Its setup.py imports torch, so it builds with this repository's venv (torch 2.13.0).
    DS_BUILD_OPS=0 "$ROOT/.venv/bin/python" -m pip wheel -q --no-deps --no-build-isolation \
        "$DS_PIN" -w "$WHL"
    "$py" -m pip download -q --no-deps --only-binary=:all: --python-version "$pyver" \
        --implementation cp --platform manylinux_2_28_x86_64 --platform manylinux_2_17_x86_64 \
        --platform manylinux2014_x86_64 -d "$WHL" "${NEEDS[@]}" ${ALL:+"${IMAGE_HAS[@]}"}
    ls -l "$WHL"
    du -sh "$WHL"
}

run() {
    local out=${1:?run OUT: the folder the results go to}
    local py=${DS_PY:-python3} site=/tmp/ds-site
    mkdir -p "$out"
    ls "$WHL"/deepspeed-*.whl >/dev/null 2>&1 || { echo "no .whl/deepspeed-*.whl: run '$0 wheels' here first, and carry .whl" >&2; exit 2; }
    "$py" -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target "$site" "$WHL"/*.whl
    export PYTHONPATH="$site:$ROOT${PYTHONPATH:+:$PYTHONPATH}" DS_ACCELERATOR=cpu DS_BUILD_OPS=0
    "$py" -c "import deepspeed, torch; print('deepspeed', deepspeed.__version__, 'torch', torch.__version__)"
    nproc
    # first the GPU check again (about 90 s on one H200), where there is a GPU and GPU_CHECK is not 0
    if [ "${GPU_CHECK:-1}" != 0 ] && "$py" -c "import torch, sys; sys.exit(0 if torch.cuda.is_available() else 1)"; then
        "$py" "$ROOT/tools/gpu_check.py" --out "$out/gpu_check.json" 2>&1 | tail -n 40 || echo "gpu_check: exit status $?"
    fi
    for w in ${WORLDS:-2 4}; do
        echo "== step_time.py, $w ranks over gloo, DeepSpeed beside"
        "$py" "$ROOT/benchmarks/step_time.py" --world "$w" --backend gloo --repeats "${REPEATS:-2}" \
            --rounds "${ROUNDS:-40}" --ds-python "$py" 2>&1 | tee "$out/step_time_world$w.txt"
    done
}

case "${1:-}" in
    wheels) wheels ;;
    run) shift; run "$@" ;;
    -h|--help|"") usage ;;
    *) usage >&2; exit 2 ;;
esac
