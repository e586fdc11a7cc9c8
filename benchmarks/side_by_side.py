"""zerolab's collectives beside DeepSpeed 0.19.8's, per config and per collective family.

The model, data and configs are those of ``benchmarks/ds_reference/ds_side_by_side.py`` (ResMLP
of step_models.py, 325,464 fp32 parameters, Adam lr 1e-3, 8 samples per rank, clipping 1.0; the
matrix of stages 0-3 and their switches, named s0-default, s1-default, s1-owner-reduce,
s1-allreduce, s1-overlap, the same for s2, s3-noprefetch, s3-prefetch, s3-allreduce,
s3-persist-default; the stored matrix runs each at 2 ranks and s2-default, s2-owner-reduce and
s3-noprefetch also at 3). Each config runs 5 steps; the table shows the mean of the steady steps 3-5
(a "varies" note says when they differ), per family: calls and bytes of the calls over 64 bytes,
zerolab beside DeepSpeed, and a verdict: "ok" when zerolab's bytes are within 2 % of
DeepSpeed's and it makes the same number of calls (fewer calls is a difference too). Calls of 64 bytes or less (the clipping norm, an
overflow flag) are shown on a "small" row, and zerolab's own 16-byte order-check headers
(records with kind "check", or a tag starting with "check") on a "check" row; neither counts in
the verdict.

    python benchmarks/side_by_side.py                          # the stored matrix, both world sizes
    python benchmarks/side_by_side.py --configs s1-default,s3-noprefetch [--world 2] [--calls]
    python benchmarks/side_by_side.py --ds-python /work/dsvenv/bin/python [--update-reference]

Without ``--ds-python`` the DeepSpeed side comes from ``benchmarks/results/side_by_side_ds.json``
(recorded with DeepSpeed 0.19.8 on CPU/gloo; DeepSpeed is not needed). With it, DeepSpeed runs
now (torchrun, DS_ACCELERATOR=cpu) and ``--update-reference`` merges its runs into that file.
``--calls`` adds each config's call sequence (family and numel of every call of one steady step,
side by side). The output goes to stdout and to ``--out`` (benchmarks/results/side_by_side.txt;
``--json`` beside it).
"""
from __future__ import annotations

import argparse
import importlib.util
import json
import os
import sys
import time

HERE = os.path.dirname(os.path.abspath(__file__))
RESULTS = os.path.join(HERE, "results")
REFERENCE = os.path.join(RESULTS, "side_by_side_ds.json")
DS_SCRIPT = os.path.join(HERE, "ds_reference", "ds_side_by_side.py")
TOLERANCE = 0.02


def _load_ds_module():
    """ds_side_by_side.py, for its matrix (it imports deepspeed only in its main())."""
    spec = importlib.util.spec_from_file_location("ds_side_by_side", DS_SCRIPT)
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


DS = _load_ds_module()

FAMILY = {"all_reduce": "all_reduce", "reduce": "reduce", "reduce_scatter": "reduce_scatter",
          "all_gather": "all_gather", "broadcast": "broadcast", "send": "send/recv", "recv": "send/recv",
          "all_to_all": "all_to_all", "barrier": "barrier"}


def is_check(rec) -> bool:
    """zerolab's own order-check header (never a ZeRO collective)."""
    return getattr(rec, "kind", None) == "check" or str(getattr(rec, "tag", "")).startswith("check")


# --------------------------------------------------------------------------- zerolab side
def zerolab_config(name: str, steps: int | None = None) -> dict:
    """Run one config on this rank (inside a zerolab Crew); per-step call lists. It loads the
    matrix module itself (the function travels to the ranks by value; the module does not)."""
    import torch
    import zerolab
    sys.path.insert(0, HERE)
    from step_models import side_by_side_batch

    ds = _load_ds_module()
    steps = ds.STEPS if steps is None else steps
    rank = zerolab.rank()
    model, x, loss_fn = side_by_side_batch(ds.MODEL.get(name, "resmlp"), rank)   # ds_side_by_side.py's
    engine = zerolab.initialize(model, ds.config(name))
    led = engine.ledger
    per_step = []
    try:
        for step in range(1, steps + 1):
            mark = led.mark()
            t0 = time.perf_counter()
            loss = loss_fn(engine(x))
            n_fwd = len(led.since(mark).records)
            engine.backward(loss)
            n_bwd = len(led.since(mark).records)
            engine.step()
            seconds = time.perf_counter() - t0
            view = led.since(mark)
            seen, calls = set(), []
            for i, r in enumerate(list(view.records) + list(getattr(view, "checks", []) or [])):
                if id(r) in seen:
                    continue
                seen.add(id(r))
                check = is_check(r)
                calls.append({"family": "check" if check else FAMILY.get(r.op, r.op), "api": r.op,
                              "numel": int(r.numel), "dtype": str(r.dtype), "bytes": int(r.bytes),
                              "tag": str(r.tag), "phase": "" if check else
                              ("forward" if i < n_fwd else "backward" if i < n_bwd else "step")})
            rec = {"step": step, "seconds": round(seconds, 4), "loss": float(loss.detach()),
                   "summary": summarize(calls, ds)}
            if step in ds.STEADY:
                rec["calls"] = calls
            per_step.append(rec)
    finally:
        engine.close()
    return {"config": ds.config(name), "world": zerolab.world_size(), "steps": per_step}


def summarize(calls: list[dict], ds) -> dict:
    """As ds_side_by_side.summarize, with zerolab's check headers apart."""
    checks = [c for c in calls if c["family"] == "check"]
    out = ds.summarize([c for c in calls if c["family"] != "check"])
    out["check"] = {"calls": len(checks), "numel": sum(c["numel"] for c in checks),
                    "bytes": sum(c["bytes"] for c in checks)}
    return out


def run_zerolab(names: list[str], world: int) -> dict:
    """name -> result (or {"error": text}), all configs in one crew of ``world`` ranks."""
    import zerolab
    out = {}
    with zerolab.Crew(world, echo=False, timeout=300) as crew:
        for name in names:
            try:
                results = crew.run(zerolab_config, name)
            except Exception as e:            # noqa: BLE001  (one config's failure is a row, not the end)
                last = str(e).strip().splitlines()[-1] if str(e).strip() else ""
                out[name] = {"error": f"{type(e).__name__}: {last}"}
                continue
            res = results[0]
            res["same_on_every_rank"] = all(
                [[(c["family"], c["numel"]) for c in s.get("calls", [])] for s in r["steps"]] ==
                [[(c["family"], c["numel"]) for c in s.get("calls", [])] for s in res["steps"]] for r in results)
            out[name] = res
    return out


# --------------------------------------------------------------------------- DeepSpeed side
def run_deepspeed(python: str, names: list[str], world: int) -> dict:
    sys.path.insert(0, HERE)
    from step_models import run_deepspeed as run
    return run(python, world, DS_SCRIPT, ["--configs", ",".join(names)])


def load_reference() -> dict:
    if not os.path.exists(REFERENCE):
        return {"meta": {}, "runs": {}}
    with open(REFERENCE) as f:
        return json.load(f)


# --------------------------------------------------------------------------- the table
def steady(result: dict | None) -> tuple[dict, bool]:
    """Mean per steady step: family -> (calls, bytes), with "small" and "check" rows; and
    whether the steady steps differed."""
    if not result or "steps" not in result:
        return {}, False
    steps = [s for s in result["steps"] if s["step"] in DS.STEADY]
    if not steps:
        return {}, False
    n = len(steps)
    rows: dict[str, list[float]] = {}
    for s in steps:
        for fam, v in s["summary"]["families"].items():
            rows.setdefault(fam, [0.0, 0.0])
            rows[fam][0] += v["calls"] / n
            rows[fam][1] += v["bytes"] / n
        for v in s["summary"]["small"].values():
            rows.setdefault("small", [0.0, 0.0])
            rows["small"][0] += v["calls"] / n
            rows["small"][1] += v["bytes"] / n
        chk = s["summary"].get("check")
        if chk and chk["calls"]:
            rows.setdefault("check", [0.0, 0.0])
            rows["check"][0] += chk["calls"] / n
            rows["check"][1] += chk["bytes"] / n
    varies = any(json.dumps(s["summary"], sort_keys=True) != json.dumps(steps[0]["summary"], sort_keys=True)
                 for s in steps)
    return {k: (v[0], v[1]) for k, v in rows.items()}, varies


def verdict(zl: tuple[float, float] | None, ds: tuple[float, float] | None) -> bool:
    zc, zb = zl or (0.0, 0.0)
    dc, db = ds or (0.0, 0.0)
    bytes_ok = abs(zb - db) <= TOLERANCE * db if db else zb == 0
    return bytes_ok and abs(zc - dc) < 0.5          # call for call: fewer calls is a difference too


def _num(x: float) -> str:
    return f"{x:,.0f}" if abs(x - round(x)) < 1e-9 else f"{x:,.1f}"


FAMILY_ORDER = ["all_reduce", "reduce", "reduce_scatter", "all_gather", "broadcast", "all_to_all",
                "send/recv", "barrier", "gather/scatter", "object"]


def table(name: str, world: int, zl: dict | None, ds: dict | None, calls: bool = False) -> tuple[str, bool | None]:
    cfg = DS.ZERO.get(name, {})
    extra = {k: v for k, v in cfg.items() if k != "stage"}
    head = f"{name} @ {world} ranks  (stage {cfg.get('stage')}, {json.dumps(extra)})"
    lines = [head]
    if zl is not None and "error" in zl:
        lines.append(f"  zerolab failed: {zl['error']}")
    if ds is None:
        lines.append("  DeepSpeed: no record for this config and world size (run with --ds-python)")
    zrows, zvar = steady(zl)
    drows, dvar = steady(ds)
    fams = [f for f in FAMILY_ORDER if f in zrows or f in drows]
    fams += sorted(f for f in set(zrows) | set(drows) if f not in fams and f not in ("small", "check"))
    w = 16
    lines.append(f"  {'family':<{w}}{'zerolab calls':>14}{'bytes':>13}   {'DeepSpeed calls':>15}{'bytes':>13}   "
                 f"verdict    call sizes")
    ok_all = None if (ds is None or zl is None or "error" in zl) else True
    tz = [0.0, 0.0]
    td = [0.0, 0.0]
    for fam in fams:
        z, d = zrows.get(fam), drows.get(fam)
        good = verdict(z, d)
        if ok_all is not None:
            ok_all = ok_all and good
        for t, v in ((tz, z), (td, d)):
            if v:
                t[0] += v[0]
                t[1] += v[1]
        lines.append(f"  {fam:<{w}}{_num(z[0]) if z else '-':>14}{_num(z[1]) if z else '-':>13}   "
                     f"{_num(d[0]) if d else '-':>15}{_num(d[1]) if d else '-':>13}   "
                     f"{('ok' if good else 'DIFFERENT') if ok_all is not None else 'n/a':<11}"
                     f"{same_sizes(zl, ds, fam) if ok_all is not None else ''}")
    lines.append(f"  {'total > 64 B':<{w}}{_num(tz[0]):>14}{_num(tz[1]):>13}   {_num(td[0]):>15}{_num(td[1]):>13}   "
                 f"{('ok' if verdict(tuple(tz), tuple(td)) else 'DIFFERENT') if ok_all is not None else 'n/a'}")
    for fam, label in (("small", "small <= 64 B"), ("check", "zerolab check")):
        z, d = zrows.get(fam), drows.get(fam)
        if z or d:
            lines.append(f"  {label:<{w}}{_num(z[0]) if z else '-':>14}{_num(z[1]) if z else '-':>13}   "
                         f"{_num(d[0]) if d else '-':>15}{_num(d[1]) if d else '-':>13}   (not compared)")
    notes = []
    if zvar:
        notes.append("zerolab's steps 3-5 differ (mean shown)")
    if dvar:
        notes.append("DeepSpeed's steps 3-5 differ (mean shown)")
    for side, res in (("zerolab", zl), ("DeepSpeed", ds)):
        if res and res.get("same_on_every_rank") is False:
            notes.append(f"{side}'s ranks made different calls (rank 0 shown)")
    if notes:
        lines.append("  note: " + "; ".join(notes))
    if calls:
        lines += call_lines(zl, ds)
    result = "ok" if ok_all else ("DIFFERENT" if ok_all is False else "n/a")
    lines.append(f"  => {result}")
    return "\n".join(lines), ok_all


def _sizes(res: dict | None, fam: str) -> list[int]:
    """numel of each call of ``fam`` over 64 bytes in the first steady step, in order."""
    if not res or "steps" not in res:
        return []
    s = next((s for s in res["steps"] if s["step"] == DS.STEADY[0] and "calls" in s), None)
    return [] if s is None else [c["numel"] for c in s["calls"]
                                 if c["family"] == fam and c["bytes"] > DS.SMALL_BYTES]


def same_sizes(zl: dict | None, ds: dict | None, fam: str) -> str:
    """Whether the calls of a family have DeepSpeed's sizes: "same" (same numel, same order),
    "reordered" (same numels, another order), "differ"."""
    a, b = _sizes(zl, fam), _sizes(ds, fam)
    return "same" if a == b else "reordered" if sorted(a) == sorted(b) else "differ"


def call_lines(zl: dict | None, ds: dict | None) -> list[str]:
    """The calls of the first steady step, in order, side by side (phase, family, numel)."""
    def seq(res):
        if not res or "steps" not in res:
            return []
        s = next((s for s in res["steps"] if s["step"] == DS.STEADY[0] and "calls" in s), None)
        return [] if s is None else [c for c in s["calls"] if c["family"] != "check"]
    a, b = seq(zl), seq(ds)
    out = [f"  calls of step {DS.STEADY[0]} (zerolab | DeepSpeed), check headers left out:"]
    for i in range(max(len(a), len(b))):
        left = f"{a[i]['phase'][:4]:<5}{a[i]['family']:<15}{a[i]['numel']:>9,}" if i < len(a) else ""
        right = f"{b[i]['phase'][:4]:<5}{b[i]['family']:<15}{b[i]['numel']:>9,}" if i < len(b) else ""
        out.append(f"    {i:>3} {left:<30} | {right}")
    return out


# --------------------------------------------------------------------------- main
def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--configs", default=None, help=f"comma-separated, from: {', '.join(DS.ZERO)}")
    ap.add_argument("--world", type=int, default=None,
                    help="ranks (default: the stored matrix: every config at 2 ranks, three also at 3)")
    ap.add_argument("--ds-python", default=None, help="python of a venv with deepspeed==0.19.8 (else the stored JSON)")
    ap.add_argument("--update-reference", action="store_true",
                    help=f"with --ds-python: merge its runs into {REFERENCE}")
    ap.add_argument("--calls", action="store_true", help="also list the calls of one steady step side by side")
    ap.add_argument("--out", default=os.path.join(RESULTS, "side_by_side.txt"))
    ap.add_argument("--json", default=None, help="raw results (default: --out with .json)")
    a = ap.parse_args()

    names = a.configs.split(",") if a.configs else list(DS.ZERO)
    unknown = [n for n in names if n not in DS.ZERO]
    if unknown:
        ap.error(f"unknown config(s) {unknown}; known: {', '.join(DS.ZERO)}")
    if a.world is not None:
        runs = [(n, a.world) for n in names]
    elif a.configs:
        runs = [(n, w) for n, w in DS.MATRIX if n in names]
    else:
        runs = list(DS.MATRIX)
    worlds = sorted({w for _, w in runs})

    reference = load_reference()
    ds_runs = dict(reference.get("runs", {}))
    ds_meta = reference.get("meta", {})
    if a.ds_python:
        for w in worlds:
            fresh = run_deepspeed(a.ds_python, [n for n, ww in runs if ww == w], w)
            ds_runs.update(fresh["runs"])
            ds_meta = fresh["meta"]
            if a.update_reference:
                reference.setdefault("runs", {}).update(fresh["runs"])
                reference["meta"] = fresh["meta"]
        if a.update_reference:
            os.makedirs(RESULTS, exist_ok=True)
            DS.dump_json(reference, REFERENCE)

    t0 = time.perf_counter()
    zl_runs = {}
    for w in worlds:
        for name, res in run_zerolab([n for n, ww in runs if ww == w], w).items():
            zl_runs[DS.key(name, w)] = res
    seconds = time.perf_counter() - t0

    src = (f"run now ({a.ds_python})" if a.ds_python
           else f"stored: {os.path.relpath(REFERENCE, os.path.dirname(HERE))}")
    header = [f"zerolab beside DeepSpeed {ds_meta.get('deepspeed', '0.19.8')} ({ds_meta.get('backend', 'gloo')}, "
              f"recorded {ds_meta.get('date', '?')}; {src})",
              "ResMLP 325,464 fp32 parameters, Adam lr 1e-3, 8 samples per rank, clipping 1.0; per steady step "
              f"(mean of steps {DS.STEADY[0]}-{DS.STEADY[-1]}); bytes = numel x element size of the full tensor",
              f"verdict: zerolab bytes within {TOLERANCE:.0%} of DeepSpeed's and zerolab calls == DeepSpeed calls, "
              "per family of calls over 64 bytes", ""]
    blocks, verdicts = [], {}
    for name, w in runs:
        k = DS.key(name, w)
        text, ok = table(name, w, zl_runs.get(k), ds_runs.get(k), calls=a.calls)
        blocks.append(text)
        verdicts[k] = ok
    n_ok = sum(1 for v in verdicts.values() if v)
    summary = [f"{n_ok} of {len(verdicts)} configs match "
               f"({', '.join(k for k, v in verdicts.items() if v) or 'none'}); zerolab side took {seconds:.0f} s"]
    text = "\n".join(header) + "\n" + "\n\n".join(blocks) + "\n\n" + "\n".join(summary) + "\n"
    print(text, end="")
    if a.out:
        os.makedirs(os.path.dirname(os.path.abspath(a.out)), exist_ok=True)
        with open(a.out, "w") as f:
            f.write(text)
        jpath = a.json or os.path.splitext(a.out)[0] + ".json"
        DS.dump_json({"zerolab": zl_runs, "deepspeed_keys": [DS.key(n, w) for n, w in runs],
                      "verdicts": verdicts}, jpath)


if __name__ == "__main__":
    main()
