#!/usr/bin/env python3
"""Run the Chinese edition in a Chinese kernel: every zh notebook (notebooks/zh, solutions/zh) is
executed into a temporary folder with ``ZEROLAB_LANG=zh`` and held against its English notebook.

    python tools/zh_run.py                 # all (about ten minutes on two cores)
    python tools/zh_run.py ch09 09_a_whole # only notebooks whose name contains one

The stored zh notebooks carry the English outputs (nbval runs the English once for both), so this is
what a Chinese learner sees when re-running a cell: checks, config errors, the engine's errors and
warnings, explain and the lab in Chinese. It fails when a zh run raises where the English did not
(a Chinese template whose format does not fit its value, say) or writes to stderr, and it prints how
many output lines speak Chinese. Not part of run_tests.sh: it runs every chapter a second time.
"""
from __future__ import annotations

import json
import os
import re
import subprocess
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
CJK = re.compile(r"[\u4e00-\u9fff]")


def _outputs(nb: dict, kind: str) -> list[dict]:
    return [o for c in nb["cells"] if c["cell_type"] == "code" for o in c.get("outputs", []) if o["output_type"] == kind]


def _text(o: dict) -> str:
    return "".join(o["text"]) if isinstance(o["text"], list) else o["text"]


def main(names: list[str]) -> int:
    zh = sorted(p for d in ("notebooks/zh", "solutions/zh") for p in (ROOT / d).glob("*.ipynb"))
    zh = [p for p in zh if not names or any(n in p.name for n in names)]
    env = {**os.environ, "ZEROLAB_LANG": "zh", "PYTHONPATH": str(ROOT)}
    bad = 0
    with tempfile.TemporaryDirectory() as tmp:
        for path in zh:
            out = Path(tmp) / f"{path.parent.parent.name}_{path.name}"
            subprocess.run([sys.executable, "-m", "jupyter", "nbconvert", "--to", "notebook", "--execute",
                            "--allow-errors", "--ExecutePreprocessor.timeout=900", "--output", str(out), str(path)],
                           env=env, check=True, capture_output=True)
            ran = json.loads(out.read_text(encoding="utf-8"))
            english = json.loads((path.parent.parent / path.name).read_text(encoding="utf-8"))
            errors = [o["ename"] for o in _outputs(ran, "error")]
            expected = [o["ename"] for o in _outputs(english, "error")]
            stderr = [line for o in _outputs(ran, "stream") if o["name"] == "stderr" for line in _text(o).splitlines()]
            chinese = sum(1 for o in _outputs(ran, "stream") for line in _text(o).splitlines() if CJK.search(line))
            ok = errors == expected and not stderr
            bad += not ok
            print(f"{'ok  ' if ok else 'FAIL'} {path.relative_to(ROOT)}: {chinese} output lines in Chinese"
                  + (f"; errors {errors} (English: {expected})" if errors != expected else "")
                  + (f"; stderr: {stderr[:3]}" if stderr else ""))
    return 1 if bad else 0


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
