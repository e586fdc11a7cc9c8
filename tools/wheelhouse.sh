#!/usr/bin/env bash
# An offline install of the course, for venues with slow or no internet.
#
#   tools/wheelhouse.sh build DIR      once, on a machine with internet: every wheel the course
#                                      needs (torch==2.13.0, zerolab with its course and test
#                                      extras, and the build tools for an editable install) into DIR
#   tools/wheelhouse.sh install DIR    on each learner's machine, with no network: a fresh VENV
#                                      (default .venv) from DIR only (pip --no-index --find-links),
#                                      then `zerolab report --preflight`
#
# Run from anywhere; the repository is the one this script lives in. Copy DIR (a USB stick, a
# shared drive) together with the repository. Options, as environment variables:
#   PYTHON=python3.11     the Python that builds the venv (install) / whose pip downloads (build)
#   VENV=.venv            the environment `install` creates (relative to the repository root)
#   TORCH_INDEX=URL       build: where torch comes from, e.g. https://download.pytorch.org/whl/cpu
#                         for the small CPU build (PyPI's Linux torch is the CUDA build, several GB)
#   PLATFORM=manylinux_2_28_x86_64 PYVER=3.11
#                         build: wheels for another machine than this one (binary wheels only);
#                         the learners' machines must match (same OS, CPU architecture, Python)
#   DRY_RUN=1 or --dry-run  print the commands instead of running them
set -euo pipefail

usage() { sed -n '2,20p' "$0" | sed 's/^# \{0,1\}//'; }

ROOT=$(cd "$(dirname "$0")/.." && pwd)
PYTHON=${PYTHON:-python3}
VENV=${VENV:-.venv}
DRY_RUN=${DRY_RUN:-0}
TORCH_PIN="torch==2.13.0"

args=()
for a in "$@"; do
    case "$a" in
        -h|--help) usage; exit 0 ;;
        -n|--dry-run) DRY_RUN=1 ;;
        *) args+=("$a") ;;
    esac
done
[ ${#args[@]} -eq 2 ] || { usage >&2; exit 2; }
cmd=${args[0]}
DIR=${args[1]}
case "$DIR" in /*) ;; *) DIR="$PWD/$DIR" ;; esac

run() {
    printf '+ %s\n' "$*"
    [ "$DRY_RUN" = 1 ] || "$@"
}

case "$cmd" in
build)
    plat=()
    if [ -n "${PLATFORM:-}" ] || [ -n "${PYVER:-}" ]; then
        plat=(--only-binary=:all:)
        [ -n "${PLATFORM:-}" ] && plat+=(--platform "$PLATFORM")
        [ -n "${PYVER:-}" ] && plat+=(--python-version "$PYVER")
    fi
    start=$SECONDS
    run mkdir -p "$DIR"
    # zerolab itself: a pure-Python wheel (for a plain install; `install` below uses the repository)
    run "$PYTHON" -m pip wheel --no-deps --wheel-dir "$DIR" "$ROOT"
    # torch first, from TORCH_INDEX if given, so the rest resolves against this torch
    run "$PYTHON" -m pip download --dest "$DIR" ${plat[@]+"${plat[@]}"} \
        ${TORCH_INDEX:+--index-url "$TORCH_INDEX"} "$TORCH_PIN"
    # everything else: zerolab's dependencies and extras, and setuptools/wheel for `pip install -e`
    whl=$(ls "$DIR"/zerolab-*.whl 2>/dev/null | tail -n 1 || true)
    whl=${whl:-$DIR/zerolab-VERSION-py3-none-any.whl}
    run "$PYTHON" -m pip download --dest "$DIR" --find-links "$DIR" ${plat[@]+"${plat[@]}"} \
        "$TORCH_PIN" "$whl[course,test]" "setuptools>=64" wheel
    if [ "$DRY_RUN" != 1 ]; then
        echo "wheelhouse $DIR: $(ls "$DIR" | wc -l) files, $(du -sh "$DIR" | cut -f1), built in $((SECONDS - start)) s"
        echo "next, on each machine (no network needed): tools/wheelhouse.sh install $DIR"
    fi
    ;;
install)
    [ "$DRY_RUN" = 1 ] || [ -d "$DIR" ] || { echo "no wheelhouse at $DIR (run: tools/wheelhouse.sh build $DIR)" >&2; exit 2; }
    start=$SECONDS
    cd "$ROOT"
    [ -x "$VENV/bin/python" ] || run "$PYTHON" -m venv "$VENV"
    # --no-index: nothing but DIR is read, so this works with no network at all
    run "$VENV/bin/python" -m pip install --no-index --find-links "$DIR" "$TORCH_PIN" -e ".[course,test]"
    if [ "$DRY_RUN" != 1 ]; then
        echo "installed $VENV from $DIR in $((SECONDS - start)) s ($(du -sh "$VENV" | cut -f1))"
    fi
    run "$VENV/bin/zerolab" report --preflight
    ;;
*)
    usage >&2; exit 2 ;;
esac
