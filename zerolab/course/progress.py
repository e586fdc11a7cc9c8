"""Learner progress: which exercise checks passed, recorded on the learner's own machine.

Every exercise check (``zerolab.course.checks.chNN.check_*``) appends one record when it passes or
fails: the exercise, the time (UTC), passed or not, the first line of what the check said, and
the notebook when Jupyter tells the kernel (``JPY_SESSION_NAME``). ``zerolab progress`` prints
which exercises are done; ``zerolab progress --json`` prints the same as JSON, for a learner who
chooses to send it to the instructor. Nothing leaves the machine by itself.

Where: ``$ZEROLAB_PROGRESS`` if set (a file path; ``off``, ``0`` or an empty value: record
nothing), else ``~/.zerolab/progress.json``. Inside a pytest run without ``$ZEROLAB_PROGRESS``
nothing is recorded (nor in the kernels nbval starts, which inherit ``PYTEST_CURRENT_TEST``), so
a test suite that runs the checks on the solutions never marks a learner's exercises done.

Each record names the clone whose ``zerolab`` ran the check (``clone``: the folder that holds the
package, one per clone, since each clone has its own environment); ``zerolab progress`` counts
only the records of the clone it runs from (``--all``: every clone's), so a fresh clone starts at
0 done even when another clone under the same home has passed checks. Records written before
``clone`` was kept count where their notebook's path lies inside this clone.

Checks run from a solution notebook (in ``solutions/``: an instructor's dry run, the course's
rebuild) are not recorded: the learner did not write those answers.

Recording never breaks a check: any error (a read-only home, a damaged file) is reported in one
line on stderr and the check goes on as if nothing happened. A damaged file is left alone (the
warning names it); delete it to start again.
"""
from __future__ import annotations

import contextlib
import datetime
import json
import os
import re
import sys
import tempfile
import time
from pathlib import Path

from ..i18n import catalogue

__all__ = ["EXERCISES", "PROGRESS_ENV", "progress_path", "record", "record_check", "load", "summary",
           "format_summary"]

PROGRESS_ENV = "ZEROLAB_PROGRESS"
MAX_RECORDS = 2000              # the newest are kept; a learner makes a few dozen in a day
MESSAGE_CHARS = 200

T = catalogue("progress")

# The checks a learner runs, by "chapter.function", in course order, with what they check.
EXERCISES = {
    "ch00.check_ring_all_gather": T.mark("Exercise 0  · the ring all-gather (ring_all_gather)"),
    "ch01.check_model_state_bytes": T.mark("Exercise 1  · weigh the backpack (model_state_bytes_per_rank)"),
    "ch02.check_ring_reduce_scatter": T.mark("Exercise 2  · the ring reduce-scatter (ring_reduce_scatter)"),
    "ch03.check_shard_range": T.mark("Exercise 3 (a) · who owns which shard (shard_range)"),
    "ch03.check_adamw_step": T.mark("Exercise 3 (b) · AdamW on one shard (adamw_step)"),
    "stage2_buckets.check_stage2_buckets": T.mark("Exercise 3b · stage 2's buckets (add_grad, reduce_bucket)"),
    "zero1.check_sharded_optimizer": T.mark("Exercise 3c · ZeRO-1 by hand, against DDP (ShardedOptimizer)"),
    "ch04.check_update_scale": T.mark("Exercise 4  · the dynamic loss scaler (update_scale)"),
    "ch05.check_host_step": T.mark("Exercise 5  · design the host optimizer step (host_step)"),
    "ch06.check_bucket_params": T.mark("Exercise 6  · the bucket plan (bucket_params)"),
    "ch07.check_choose_config": T.mark("Exercise 7  · the config that fits a budget (device_bytes, choose_config)"),
    "ch08.check_knobs": T.mark("Exercise 8  · stage-3 knobs for a goal (knobs)"),
    "hooks3.check_gather_hooks": T.mark("Exercise 8c · stage 3's gather and release as module hooks (MyHooks)"),
    "ch09.check_capstone_config": T.mark("Exercise 9  · the capstone's DeepSpeed config"),
    "ch13.check_block_quantizer": T.mark("Exercise 13 · qwZ's block quantizer (quantize, dequantize)"),
    "ch14.check_tokens_to_hide": T.mark("Exercise 14a · the break-even tokens (tokens_to_hide)"),
    "ch14.check_inter_node_bytes": T.mark("Exercise 14b · bytes leaving a node with ZeRO++ (inter_node_bytes)"),
    "ch14.check_offload_hide_tokens": T.mark("Exercise 14c · when offload's PCIe hides (offload_hide_tokens)"),
}
_CHECK_MODULE = re.compile(r"zerolab\.course\.checks\.(ch\d\d|stage2_buckets|zero1|hooks3)")


def progress_path() -> Path | None:
    """The progress file, or None when nothing is to be recorded."""
    value = os.environ.get(PROGRESS_ENV)
    if value is None:
        under_pytest = "pytest" in sys.modules or "PYTEST_CURRENT_TEST" in os.environ   # the latter: nbval's kernels
        return None if under_pytest else Path.home() / ".zerolab" / "progress.json"
    value = value.strip()
    if value.lower() in ("", "0", "off", "no", "false", "none"):
        return None
    return Path(value).expanduser()


def this_clone() -> str:
    """The folder that holds this ``zerolab`` package: the clone (or the site-packages of a wheel)."""
    return str(Path(__file__).resolve().parents[2])     # zerolab/course/progress.py -> the clone


def from_this_clone(rec: dict, clone: str | None = None) -> bool:
    """True if ``rec`` was written by this clone's zerolab (or, for a record older than the
    ``clone`` field, run from a notebook inside this clone)."""
    clone = clone or this_clone()
    if "clone" in rec:
        return rec["clone"] == clone
    notebook = rec.get("notebook", "")
    return bool(notebook) and os.path.isabs(notebook) and (notebook + os.sep).startswith(clone + os.sep)


def _warn(what: str) -> None:
    print(T("zerolab: progress not recorded ({what}); the check itself is unaffected", what=what), file=sys.stderr)


def exercise_from_stack(frame) -> str | None:
    """The outermost ``check_*`` function of a ``zerolab.course.checks.chNN`` module on the stack."""
    found = None
    while frame is not None:
        m = _CHECK_MODULE.fullmatch(frame.f_globals.get("__name__", ""))
        if m and frame.f_code.co_name.startswith("check_"):
            found = f"{m.group(1)}.{frame.f_code.co_name}"
        frame = frame.f_back
    return found


def record_check(passed: bool, message: str = "") -> None:
    """Called by ``zerolab.course.checks`` when a check passes or an ``ExerciseCheckFailed`` is made:
    records it for the check on the stack; nothing inside a rank or outside a check."""
    from ..crew import worker as crew_worker
    if crew_worker._INFO is not None:        # a rank process: its parent's check decides
        return
    exercise = exercise_from_stack(sys._getframe(1))
    if exercise is not None and not running_a_solution():
        record(exercise, passed, message)


def running_a_solution() -> bool:
    """True in a kernel that runs one of the course's solution notebooks (``solutions/``: an
    instructor's dry run, the notebooks' rebuild): the learner did not write that answer."""
    notebook = os.environ.get("JPY_SESSION_NAME", "")
    folder = Path(notebook).parent if notebook else Path.cwd()   # jupyter execute runs in the notebook's folder
    if folder.name == "zh":                     # the Chinese edition: solutions/zh/
        folder = folder.parent
    return folder.name == "solutions"


@contextlib.contextmanager
def _locked(path: Path, wait_s: float = 2.0):
    """An exclusive lock beside the file (two kernels may finish checks at once)."""
    try:
        import fcntl
    except ImportError:                      # not on this platform: last writer wins
        yield
        return
    fd = os.open(f"{path}.lock", os.O_RDWR | os.O_CREAT, 0o644)
    try:
        deadline = time.monotonic() + wait_s
        while True:
            try:
                fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
                break
            except BlockingIOError:
                if time.monotonic() > deadline:
                    raise TimeoutError(f"{path}.lock is held by another process")
                time.sleep(0.02)
        yield
    finally:
        os.close(fd)                         # closing releases the lock


def _read(path: Path) -> list[dict]:
    try:
        text = path.read_text(encoding="utf-8")
    except FileNotFoundError:
        return []
    try:
        data = json.loads(text)
        records = data["records"]
        if not isinstance(records, list):
            raise TypeError("records is not a list")
    except (ValueError, KeyError, TypeError) as e:
        raise ValueError(f"{path} is not a zerolab progress file ({e}); delete it to start again") from None
    return records


def record(exercise: str, passed: bool, message: str = "", *, path: Path | None = None) -> bool:
    """Append one record; True if written. Never raises (a one-line warning instead)."""
    try:
        path = progress_path() if path is None else Path(path)
        if path is None:
            return False
        line = (str(message).strip().splitlines() or [""])[0]
        rec = {"exercise": exercise,
               "time": datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds"),
               "passed": bool(passed), "clone": this_clone(),
               "message": line[:MESSAGE_CHARS - 3] + "..." if len(line) > MESSAGE_CHARS else line}
        notebook = os.environ.get("JPY_SESSION_NAME")
        if notebook:
            rec["notebook"] = notebook
        path.parent.mkdir(parents=True, exist_ok=True)
        with _locked(path):
            records = (_read(path) + [rec])[-MAX_RECORDS:]
            fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=path.name, suffix=".tmp")
            try:
                with os.fdopen(fd, "w", encoding="utf-8") as f:
                    json.dump({"zerolab_progress": 1, "records": records}, f, indent=1, ensure_ascii=False)
                    f.write("\n")
                os.replace(tmp, path)       # atomic: a reader sees the old file or the new one
            except BaseException:
                with contextlib.suppress(OSError):
                    os.remove(tmp)
                raise
        return True
    except Exception as e:                   # noqa: BLE001 - progress must never break a check
        _warn(f"{type(e).__name__}: {e}")
        return False


def load(path: Path | None = None) -> list[dict]:
    """The records in the progress file (oldest first); [] when there is none."""
    path = progress_path() if path is None else Path(path)
    return [] if path is None else _read(path)


def summary(records: list[dict]) -> list[dict]:
    """One entry per exercise (the course's five first, then any other check seen): status
    ``done`` (passed at least once), ``tried`` (only failures) or ``not started``."""
    names = list(EXERCISES) + sorted({r["exercise"] for r in records} - set(EXERCISES))
    out = []
    for name in names:
        mine = [r for r in records if r.get("exercise") == name]
        passes = [r for r in mine if r.get("passed")]
        fails = [r for r in mine if not r.get("passed")]
        out.append({"exercise": name, "title": EXERCISES.get(name, name),
                    "status": T.mark("done") if passes else T.mark("tried") if mine else T.mark("not started"),
                    "attempts": len(mine), "failures": len(fails),
                    "first_passed": passes[0]["time"] if passes else None,
                    "last_failure": fails[-1].get("message", "") if fails else None,
                    "last_time": mine[-1]["time"] if mine else None})
    return out


def _local(stamp: str) -> str:
    try:
        return datetime.datetime.fromisoformat(stamp).astimezone().strftime("%Y-%m-%d %H:%M")
    except (TypeError, ValueError):
        return str(stamp)


def _width(text: str) -> int:
    """Columns a terminal gives ``text`` (a CJK character takes two)."""
    import unicodedata
    return sum(2 if unicodedata.east_asian_width(ch) in "WF" else 1 for ch in text)


def _pad(text: str, width: int) -> str:
    return text + " " * max(0, width - _width(text))


def format_summary(entries: list[dict]) -> str:
    titles = [T.text(e["title"]) for e in entries]
    statuses = [T.text(e["status"]) for e in entries]
    width = max(_width(t) for t in titles)
    status_width = max(12, max(_width(s) for s in statuses))
    lines = []
    for e, title, status in zip(entries, titles, statuses):
        tries = T.plural(e["attempts"], "{n} run", "{n} runs")
        if e["status"] == "done":
            detail = T("passed {when} ({tries})", when=_local(e["first_passed"]), tries=tries)
        elif e["status"] == "tried":
            detail = T("not passed yet ({tries}); last: {message}", tries=tries, message=e["last_failure"])
        else:
            detail = ""
        lines.append(f"  {_pad(status, status_width)} {_pad(title, width)}  {detail}".rstrip())
    known = [e for e in entries if e["exercise"] in EXERCISES]
    done = sum(e["status"] == "done" for e in known)
    lines.append(T("{done} of {total} exercises done", done=done, total=len(known)))
    return "\n".join(lines)


def main(as_json: bool = False, name: str | None = None, every_clone: bool = False) -> int:
    """``zerolab progress [--json] [--name NAME] [--all]``."""
    path = progress_path()
    if path is None:
        print(T("zerolab progress: recording is off (${env}={value})", env=PROGRESS_ENV,
                value=repr(os.environ.get(PROGRESS_ENV, ""))), file=sys.stderr)
        records = []
    else:
        try:
            records = load(path)
        except ValueError as e:
            print(f"zerolab progress: {e}", file=sys.stderr)
            return 2
    others = 0
    if not every_clone:
        mine = [r for r in records if from_this_clone(r)]
        others, records = len(records) - len(mine), mine
    entries = summary(records)
    if as_json:
        print(json.dumps({"zerolab_progress": 1, "name": name,
                          "generated": datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds"),
                          "exercises": entries}, indent=1, ensure_ascii=False))
        return 0
    print(T("exercise checks recorded in {path}:", path=path) if path is not None else T("exercise checks:"))
    if others:
        print(T("({n} records from other clones on this machine not counted; zerolab progress --all counts "
                "them)", n=others))
    print(format_summary(entries))
    return 0
