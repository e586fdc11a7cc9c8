"""``zerolab compare CONFIG.json``: one DeepSpeed config on real DeepSpeed and on zerolab, side by
side, on CPU ranks (gloo): the collectives of each family (calls and bytes per steady step), the
losses, and zerolab's memory per rank.

DeepSpeed runs in its own processes (torchrun, ``DS_ACCELERATOR=cpu``), from this Python when it
has ``deepspeed`` (``pip install 'zerolab[deepspeed]'`` with ``DS_BUILD_OPS=0``) or from
``--ds-python``; its side is ``compare_ds.py``, which imports nothing of zerolab. zerolab runs the
same model, data and config in a crew. Steps 3 onwards are the steady ones (the trace of stage 3
is recorded in step 2 and followed from step 3).
"""
from __future__ import annotations

import importlib.util
import json
import os
import shutil
import subprocess
import sys
import tempfile

from . import compare_ds
from ..config import ConfigError, load_config
from ..i18n import catalogue
from ..memory import format_bytes

T = catalogue("cli")
INSTALL = ("DeepSpeed is not installed in this Python. Install the reference (CPU build, no ops compiled):\n"
           "    DS_BUILD_OPS=0 pip install 'zerolab[deepspeed]'\n"
           "or point at a venv that has deepspeed==0.19.8: zerolab compare CONFIG --ds-python /path/to/bin/python")


def deepspeed_python(explicit: str | None) -> str | None:
    """The Python to run DeepSpeed with, or None when there is none."""
    if explicit:
        return explicit
    return sys.executable if importlib.util.find_spec("deepspeed") is not None else None


def run_deepspeed(python: str, config: dict, model: str, world: int, steps: int, timeout: int = 900) -> dict:
    with tempfile.TemporaryDirectory() as tmp:
        cfg, out = os.path.join(tmp, "config.json"), os.path.join(tmp, "ds.json")
        # run a copy: a script's own folder comes first on sys.path, and zerolab/deepspeed.py (the
        # drop-in) would stand in for the real ``import deepspeed``
        script = shutil.copy(compare_ds.__file__, os.path.join(tmp, "compare_ds.py"))
        with open(cfg, "w") as f:
            json.dump(config, f)
        # (PET_LOG_DIR: torchrun's --log-dir; by default it leaves a torchelastic_* folder in /tmp a run)
        env = {**os.environ, "DS_ACCELERATOR": "cpu", "OMP_NUM_THREADS": os.environ.get("OMP_NUM_THREADS", "1"),
               "PET_LOG_DIR": os.path.join(tmp, "torchrun-logs")}
        cmd = [python, "-m", "torch.distributed.run", "--standalone", "--nproc_per_node", str(world),
               script, "--config", cfg, "--model", model, "--steps", str(steps), "--out", out]
        p = subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=timeout)
        if p.returncode != 0 or not os.path.exists(out):
            raise RuntimeError(T("DeepSpeed's run failed (exit {rc}):\n{tail}", rc=p.returncode,
                                 tail="\n".join((p.stdout + p.stderr).splitlines()[-25:])))
        with open(out) as f:
            return json.load(f)


def _zerolab_side(config: dict, model: str, steps: int) -> dict:
    """On each rank of a crew: the same model, data and config on zerolab; per-step families."""
    import zerolab
    from zerolab.tools import compare_ds as cd
    net, x, loss_fn = cd.build(model, zerolab.rank())
    engine = zerolab.initialize(net, config)
    x = cd.in_model_dtype(x, engine.module)
    led = engine.ledger
    out = []
    try:
        for step in range(1, steps + 1):
            mark = led.mark()
            loss = loss_fn(engine(x))
            engine.backward(loss)
            engine.step()
            calls = [{"family": r.op if r.op != "all_gather_into_tensor" else "all_gather", "numel": int(r.numel),
                      "bytes": int(r.bytes)} for r in led.since(mark).records
                     if getattr(r, "kind", "zero") != "check" and not str(r.tag).startswith("check")]
            out.append({"step": step, "loss": float(loss.detach()), "summary": cd.summarize(calls)})
        memory = engine.memory()
    finally:
        engine.close()
    return {"steps": out, "memory": memory}


def run_zerolab(config: dict, model: str, world: int, steps: int) -> dict:
    import zerolab
    with zerolab.Crew(world, echo=False, timeout=600) as crew:
        res = crew.run(_zerolab_side, config, model, steps)
    return {"steps": res[0]["steps"], "memory": [r["memory"] for r in res]}


def _steady(steps: list[dict]) -> dict:
    """family -> (calls, bytes), the mean over the steady steps (3 on), calls over 64 bytes."""
    steady = [s for s in steps if s["step"] >= 3] or steps[-1:]
    fams: dict[str, list[float]] = {}
    for s in steady:
        for fam, v in s["summary"]["families"].items():
            acc = fams.setdefault(fam, [0.0, 0.0])
            acc[0] += v["calls"] / len(steady)
            acc[1] += v["bytes"] / len(steady)
    return {k: (v[0], v[1]) for k, v in fams.items()}


def table(ds: dict, zl: dict, tolerance: float = 0.02) -> tuple[str, bool]:
    """The side-by-side table, and whether every family matches call for call (bytes within
    ``tolerance``)."""
    a, b = _steady(zl["steps"]), _steady(ds["steps"])
    lines = [f"  {'family':<16}{'zerolab calls':>14}{'bytes':>13}{'DeepSpeed calls':>17}{'bytes':>13}   verdict"]
    ok = True
    for fam in sorted(set(a) | set(b)):
        zc, zb = a.get(fam, (0, 0))
        dc, db = b.get(fam, (0, 0))
        same = abs(zc - dc) < 0.5 and (abs(zb - db) <= tolerance * db if db else zb == 0)
        ok &= same
        lines.append(f"  {fam:<16}{zc:>14g}{zb:>13,.0f}{dc:>17g}{db:>13,.0f}   {'ok' if same else 'DIFFERENT'}")
    lines.append("")
    lines.append(f"  {'step':<6}{'zerolab loss':>16}{'DeepSpeed loss':>18}")
    for s, d in zip(zl["steps"], ds["steps"]):
        lines.append(f"  {s['step']:<6}{s['loss']:>16.6f}{d['loss']:>18.6f}")
    gap = max((abs(s["loss"] - d["loss"]) for s, d in zip(zl["steps"], ds["steps"])), default=0.0)
    lines.append("  " + (T("the losses: equal bit for bit") if gap == 0 else
                         T("the losses: at most {gap:.2g} apart", gap=gap)))
    lines.append("")
    mem = zl["memory"][0]
    lines.append("  zerolab memory per rank (rank 0, engine.memory()): " + ", ".join(
        f"{k} {format_bytes(v)}" for k, v in mem.items() if isinstance(v, int) and v))
    lines.append("  (DeepSpeed's side: no allocator on CPU to read; its memory is not shown)")
    return "\n".join(lines), ok


def main(config_path: str, *, world: int = 2, steps: int = 5, model: str = "mlp", ds_python: str | None = None,
         out=print) -> int:
    with open(config_path) as f:
        config = json.load(f)
    try:                                # a config DeepSpeed would refuse: zerolab's reason, before minutes
        load_config(config, world)      # of DeepSpeed's start ending in its traceback's last lines
    except ConfigError as e:
        out(T("{config} cannot run on {world} ranks: {reason}", config=config_path, world=world, reason=e))
        return 2
    python = deepspeed_python(ds_python)
    if python is None:
        out(T(INSTALL))
        return 2
    ds = run_deepspeed(python, config, model, world, steps)
    zl = run_zerolab(config, model, world, steps)
    text, ok = table(ds, zl)
    out(T("{config} on {world} CPU ranks (gloo), model {model}, steps 3-{steps} (calls over 64 bytes; "
          "DeepSpeed {version}):", config=config_path, world=world, model=model, steps=steps,
          version=ds.get("deepspeed", "?")))
    out(text)
    out(T("=> the same calls and bytes") if ok else T("=> DIFFERENT: see the rows marked above"))
    return 0 if ok else 1
