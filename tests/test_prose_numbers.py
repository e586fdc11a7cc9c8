"""The numbers the prose states come from the runs (issue 36).

A chapter's text is written once and its code cells are re-executed whenever the engine changes,
so a sentence can go on saying "15 tiles" after the stored output says 28. Each claim below reads
a number (or several) out of a markdown cell of a stored notebook and checks that the stored
output of a named code cell says the same; the Chinese of the same cell must state the same
numbers. Nothing runs: only the stored notebooks are read (no ranks, well under a second).

A claim is (notebook, markdown cell id, prose regex, code cell id, check). The prose regex's
groups are the numbers; the check is a regex (or a list of them) whose ``{0}``, ``{1}``, ...
are filled with those numbers, escaped, and which must match the code cell's output, or a
function ``(output, numbers) -> bool`` where a number is derived from the output (it gets the
output as printed). For the prose and the regexes, whitespace runs are collapsed to one space,
so line breaks and table alignment do not matter. When a claim fails, fix the sentence (and its Chinese) from the output, or
re-execute the notebook if it is the output that is stale.
"""
from __future__ import annotations

import json
import re
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent


def _num(s: str) -> int:
    return int(s.replace(",", ""))


def _rows(out: str, pattern: str) -> list[re.Match]:
    return list(re.finditer(pattern, out))


def _diff_wire_07(out, n):        # chapter 7: stage 3's wire bytes minus stage 1's
    w = {int(m[1]): _num(m[2]) for m in _rows(out, r"stage (\d): +\d+ collectives per step, +([\d,]+) wire bytes")}
    return w[3] - w[1] == _num(n[0])


def _stage3_extra_07(out, n):     # chapter 7: stage 3's measured model states minus the formula
    m = re.search(r"stage 3 +16n +([\d,]+) +([\d,]+) ", out)
    return m is not None and _num(m[2]) - _num(m[1]) == _num(n[1]) == 2 + 4 * _num(n[0])


def _counters_05(out, n):         # chapter 5: stage 3's optimizer column on the device = 12n + 4 per tile
    shard = re.search(r"its shard n = ([\d,]+) elements", out)
    row = re.search(r"(?m)^stage 3 +device +[\d,]+ +[\d,]+ +([\d,]+) ", out)
    return (shard is not None and row is not None
            and _num(row[1]) - 12 * _num(shard[1]) == _num(n[1]) == 4 * _num(n[0]))


def _nvme_05(out, n):             # chapter 5: the NVMe rows count 4n on the host and 12n in files; the counters
    shard = re.search(r"its shard n = ([\d,]+) elements", out)     # are in neither (stage 3's device row has them)
    rows = re.search(r"(?m)^stage 3 \+ opt nvme \+ param nvme +device[^\n]*\n +host +0 +([\d,]+) +0 +[\d,]+\n"
                     r" +nvme +[\d,]+ +0 +([\d,]+) ", out)
    dev = re.search(r"(?m)^stage 3 +device +[\d,]+ +[\d,]+ +([\d,]+) ", out)
    if shard is None or rows is None or dev is None:
        return False
    k = _num(shard[1])
    return _num(rows[1]) == 4 * k and _num(rows[2]) == 12 * k and _num(dev[1]) - 12 * k == _num(n[0])


def _lab_12(out, n):              # chapter 12: one Adam counter per trained parameter, one gather per module
    m = re.search(r"grads ([\d,]+), optimizer states ([\d,]+),", out)     # 12n + 4 per counter; grads are 2n
    forward = []
    for tag in re.findall(r"(?m)^ +#\d+ +all_gather +(params .+?) +[\d,]+ elements", out):
        if tag in forward:
            break
        forward.append(tag)
    return (m is not None and _num(m[2]) - 6 * _num(m[1]) == 4 * _num(n[0])
            and len(forward) == _num(n[1]) and forward[0] == "params pos + 1 more")


def _lab_holdings_12(out, n):     # chapter 12: stage 3 at N = 4, optimizer states = 6 x grads (12n / 2n) + 4 per counter
    m = re.search(r"(?s)stage 3, N = 4:.*?\n +0 +[\d,]+ B 1/4 +([\d,]+) B 1/4 +([\d,]+) B 1/4", out)
    return m is not None and _num(m[2]) - 6 * _num(m[1]) == 4 * _num(n[0])


def _left_03(out, n):             # chapter 3, question 3: the largest "left" at N = 3 and N = 4
    left = {}
    for m in _rows(out, r"(?m)^ *(\d) +(\d) [^\n]*? (-?[\d,]+)$"):
        left.setdefault(int(m[1]), []).append(_num(m[3]))
    return max(left[3]) == _num(n[0]) and max(left[4]) == _num(n[1])


def _counters_03(out, n):         # chapter 3: stage 3's "left" at N = 4 = the frozen 2 bytes + 4 per counter
    m = re.search(r"(?m)^ *4 +3 [^\n]*? (\d+)$", out)
    return m is not None and int(m[1]) == 2 + 4 * _num(n[0])


def _one_call_02(out, n):         # chapter 2: the stage-0 step's ledger holds one line, the gradient bucket
    lines = [ln for ln in out.splitlines() if re.match(r"\S", ln) and not ln.startswith(("everything", "tag"))]
    return len(lines) == 1 and lines[0].startswith("grads bucket 0")


CLAIMS = [
    # chapter 10 (g): the step's small all-reduces, as DeepSpeed 0.19.8 sends them
    ("notebooks/10_misconceptions", "ch10-21", r"\(2·3/4\)·8 = (\d+) wire bytes at N = 4",
     "ch10-20", r"stage 3 step - - 1 × {0} -"),
    ("notebooks/10_misconceptions", "ch10-21", r"the table rounds to stage 2's `2 × (\d+)`",
     "ch10-20", r"stage 2 step 1 × [\d,]+ - 2 × {0} -"),
    ("notebooks/10_misconceptions", "ch10-21", r"step's (\d+) all-reduces, ([\d,]+) bytes, are its (\d+) buckets, ([\d,]+),",
     "ch10-20", [r"stage 1 step 1 × [\d,]+ - {0} × {1} -", r"stage 2 backward - - {2} × {3} -"]),
    # chapter 7: the norm's all-reduce is the only difference in bytes; stage 3's step counters
    ("notebooks/07_the_captains_checks", "ch07-22", r"stage 3's wire bytes are (\d+) more than stage 1's",
     "ch07-21", _diff_wire_07),
    ("notebooks/07_the_captains_checks", "ch07-05", r"one per trained parameter tensor at stage 3, .*?: (\d+) here, "
     r"2 \+ 4 × \1 = (\d+) bytes over the formula", "ch07-03", _stage3_extra_07),
    # chapter 2: stage 0 sends the gradient and nothing else
    ("notebooks/02_pain_of_data_parallelism", "ch02-10", r"(Nothing else goes out)", "ch02-09", _one_call_02),
    # chapter 3: the bytes left over, and stage 3's step counters
    ("notebooks/03_three_stages", "ch03-27", r"reaches (\d+) bytes at N = 3 \(stage 3\) but at most (\d+) at N = 4",
     "ch03-04", _left_03),
    ("notebooks/03_three_stages", "ch03-05", r"one per trained parameter, (\d+) here", "ch03-04", _counters_03),
    # chapter 5: Adam's step counters, one per tile, and the estimator's differences
    ("notebooks/05_the_warehouse", "ch05-04", r"(\d+) tiles at stage 3, .*? 4 × \1 = (\d+) bytes",
     "ch05-03", _counters_05),
    ("notebooks/05_the_warehouse", "ch05-04", r"(\d+) tiles at stage 3", "ch05-07", r"4 bytes x {0} tiles x 2 ranks"),
    ("notebooks/05_the_warehouse", "ch05-08", r"(\d+) at stage 3, one per trained parameter; 4 × \1 × 2 ranks = (\d+) "
     r"bytes\): 8 - 16 = (-8), \2 - 16 = (\d+), \2 \+ 4 - 18 = (\d+)\.",
     "ch05-07", [r"4 bytes x {0} tiles x 2 ranks = {1} bytes", r"16P CPU [\d,]+ [\d,]+ {2} ",
                 r"4L \+ 2P/N \| 16P CPU [\d,]+ [\d,]+ {3} ", r"4L \| 18P CPU [\d,]+ [\d,]+ {4} "]),
    ("notebooks/05_the_warehouse", "ch05-04", r"a column this table does not print: (\d+) bytes on rank 0",
     "ch05-03", _nvme_05),
    # chapter 5b: groups, tiles and files, one per parameter at stage 3
    ("notebooks/05b_the_corridor", "ch05b-02", r"n = ([\d,]+) elements in (\d+) groups",
     "ch05b-03", r"1,000,000,000 {1} 1 {0} "),
    ("notebooks/05b_the_corridor", "ch05b-04", r"cut into (\d+) tiles .*? and (\d+) sub-groups",
     "ch05b-03", r"5,000 {0} {1} "),
    ("notebooks/05b_the_corridor", "ch05b-04", r"(\d+) bytes at 10⁹ and at 20,000 \((\d+) tiles\), (\d+) at 5,000 \((\d+) tiles\)",
     "ch05b-03", [r"size 1,000,000,000: the host keeps {0} bytes = 4 x {1} tiles: True",
                  r"size 20,000: the host keeps {0} bytes = 4 x {1} tiles: True",
                  r"size 5,000: the host keeps {2} bytes = 4 x {3} tiles: True", r"20,000 {1} ", r"5,000 {3} "]),
    ("notebooks/05b_the_corridor", "ch05b-04", r"(Between steps the host keeps only Adam's step counters)",
     "ch05b-03", r"the notebook in files [\d,]+ bytes \(12n\): True"),
    ("notebooks/05b_the_corridor", "ch05b-07", r"keeps nothing: (\d+) reads\..*? (\d+) writes \(the frozen",
     "ch05b-06", r"parameter shards: {0} reads, {1} writes"),
    ("notebooks/05b_the_corridor", "ch05b-07", r"(\d+) sub-groups, \1 host bars",
     "ch05b-06", r"in {0} sub-groups; host-step bars: {0}"),
    # chapter 10b: the norm's 4 bytes are among the counted calls (the overflow flag is not)
    ("notebooks/10b_the_beliefs", "ch10b-06", r"gradient-norm all-reduce too: (\d+) bytes on the wire at N = 4",
     "ch10b-05", r"stage 1, paper \(zerolab switch\) \d+ × [\d,]+ 1 × {0} "),
    # chapter 12: the lab's model, partitioned per parameter and gathered per module
    ("notebooks/12_visual_lab", "ch12-06", r"has (\d+) trained parameters, .*? \(\1 groups, \1 Adam step counters\);"
     r" .*? Gathers go by module: (\d+) modules own parameters", "ch12-07", _lab_12),
    ("notebooks/12_visual_lab", "ch12-06", r"has (\d+) trained parameters", "ch12-03", _lab_holdings_12),
    # chapter 9: one step counter per trained parameter, on every rank
    ("notebooks/09_a_whole_move", "ch09-13", r"one group per trained parameter, (\d+) here",
     "ch09-12", [r"\+ 4 bytes x {0} groups x 1 rank\(s\): True", r"\+ 4 bytes x {0} groups x 3 rank\(s\): True"]),
]


def _flat(text: str) -> str:
    return re.sub(r"\s+", " ", text)


def _cells(path: Path) -> dict[str, dict]:
    return {c["id"]: c for c in json.loads(path.read_text(encoding="utf-8"))["cells"]}


def _output(cell: dict) -> str:
    parts = []
    for o in cell.get("outputs", []):
        if "text" in o:
            parts.append("".join(o["text"]))
        elif "text/plain" in o.get("data", {}):
            parts.append("".join(o["data"]["text/plain"]))
    return "".join(parts)


def check_claim(root: Path, notebook, md_id, prose, code_id, check) -> list[str]:
    """What is wrong with one claim in the stored notebooks under ``root`` (empty: nothing)."""
    cells = _cells(root / f"{notebook}.ipynb")
    text = _flat("".join(cells[md_id]["source"]))
    m = re.search(prose, text)
    if not m:
        return [f"{notebook} {md_id}: the prose no longer says /{prose}/"]
    numbers = m.groups()
    raw = _output(cells[code_id])
    out = _flat(raw)
    if not out.strip():
        return [f"{notebook} {code_id}: no stored output"]
    problems = []
    if callable(check):
        if not check(raw, numbers):
            problems.append(f"{notebook} {md_id} says {numbers}; {code_id}'s output does not agree ({check.__name__})")
    else:
        for pattern in [check] if isinstance(check, str) else check:
            filled = pattern.format(*(re.escape(n) for n in numbers))
            if not re.search(filled, out):
                problems.append(f"{notebook} {md_id} says {numbers}; {code_id}'s output has no /{filled}/")
    zh = root / Path(notebook).parent / "zh" / f"{Path(notebook).name}.ipynb"
    if zh.exists():
        zh_text = _flat("".join(_cells(zh)[md_id]["source"]))
        for n in numbers:
            if re.fullmatch(r"-?[\d,]+", n) and n not in zh_text:
                problems.append(f"{zh.relative_to(root)} {md_id}: the Chinese does not state {n}")
    return problems


@pytest.mark.parametrize("claim", CLAIMS, ids=[f"{c[0].split('/')[1][:6]}-{c[1]}-{k}" for k, c in enumerate(CLAIMS)])
def test_the_prose_states_the_stored_numbers(claim):
    problems = check_claim(ROOT, *claim)
    assert not problems, "\n".join(problems)
