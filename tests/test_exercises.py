"""The exercises: generated from the solutions, and their checks can fail.

(a) ``exercises/`` is exactly what ``tools/make_exercises.py`` makes from ``solutions/``.
(b) Every exercise notebook, run as shipped (the learner has written nothing yet), makes
    every cell tagged ``check`` raise ExerciseCheckFailed or NotImplementedError: a check
    that passes on an empty exercise checks nothing. Any other cell may only raise those
    two errors (anything else, e.g. an ImportError, is a bug in the notebook).
(c) That the checks *pass* with the solutions is shown by nbval on ``solutions/``
    (``pytest --nbval solutions/``), so it is not repeated here.

Each exercise notebook is executed once (nbclient, the ``python3`` kernel, which
jupyter_client starts with this interpreter). The fifteen share one kernel, each in a namespace
of its own (``%reset -f``, every crew closed, threads and working folder as the kernel started):
a fresh kernel per notebook cost five CPU-seconds each (the kernel's torch and its crew's
forkserver), most of this file's CPU, and what this test asks of a notebook (its checks fail
on the empty exercise, nothing else raises) does not depend on a fresh process. That every
notebook runs in a fresh kernel as a learner's does is what nbval on ``solutions/`` shows.
"""
from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from scaler_answers import update_scale

nbformat = pytest.importorskip("nbformat")
nbclient = pytest.importorskip("nbclient")

ROOT = Path(__file__).resolve().parent.parent
EXERCISES = sorted((ROOT / "exercises").glob("*.ipynb"))
EXPECTED_ERRORS = ("ExerciseCheckFailed", "NotImplementedError")
CELL_TIMEOUT_S = 240

# Run first in the shared kernel, before each notebook: a namespace of its own, every crew the
# last notebook left (its own and the checks') closed, the kernel's threads and folder restored.
FRESH_START = """\
import os as _os, torch as _torch
from zerolab.crew.crew import _close_all as _close_crews
from zerolab.course.checks import close_crews as _close_check_crews
_close_check_crews()
_close_crews()
_torch.set_num_threads(int(_os.environ.setdefault("ZEROLAB_TEST_THREADS", str(_torch.get_num_threads()))))
_os.chdir({folder!r})
%reset -f -s
"""


@pytest.fixture(scope="module")
def exercise_kernel():
    """One python3 kernel for every exercise notebook (see the module's docstring)."""
    from jupyter_client.manager import KernelManager
    km = KernelManager(kernel_name="python3")
    km.start_kernel(cwd=str(EXERCISES[0].parent))
    yield km
    km.shutdown_kernel(now=True)


def test_exercises_are_generated_from_solutions():
    result = subprocess.run([sys.executable, str(ROOT / "tools" / "make_exercises.py"), "--check"],
                            capture_output=True, text=True, cwd=ROOT)
    assert result.returncode == 0, result.stdout + result.stderr


def _errors(cell) -> list[dict]:
    return [o for o in cell.get("outputs", []) if o.get("output_type") == "error"]


def _error_text(err: dict) -> str:
    return f"{err.get('ename')}: {err.get('evalue')}\n" + "\n".join(err.get("traceback", []))


def _mentions_expected(err: dict) -> bool:
    text = _error_text(err)
    return any(name in text for name in EXPECTED_ERRORS)


def _short(cell) -> str:
    first = cell.source.strip().splitlines()[:1]
    return first[0][:80] if first else "<empty>"


@pytest.mark.timeout(900)
@pytest.mark.parametrize("path", EXERCISES, ids=[p.name for p in EXERCISES])
def test_exercise_checks_fail_as_shipped(path: Path, exercise_kernel):
    nb = nbformat.read(path, as_version=4)
    assert any(c.cell_type == "code" and "check" in c.metadata.get("tags", []) for c in nb.cells), \
        f"{path.name}: no code cell tagged 'check'"
    nb.cells.insert(0, nbformat.v4.new_code_cell(FRESH_START.format(folder=str(path.parent))))
    checks = [i for i, c in enumerate(nb.cells)
              if c.cell_type == "code" and "check" in c.metadata.get("tags", [])]

    client = nbclient.NotebookClient(nb, km=exercise_kernel, allow_errors=True, timeout=CELL_TIMEOUT_S)
    try:
        client.execute()
    except BaseException:                  # a cell timed out: the next notebook gets a fresh kernel
        exercise_kernel.restart_kernel(now=True)
        raise
    finally:
        if client.kc is not None:
            client.kc.stop_channels()

    problems = []
    for i, cell in enumerate(nb.cells):
        if cell.cell_type != "code":
            continue
        errors = _errors(cell)
        if i in checks:
            if not errors:
                problems.append(f"cell {i} ({_short(cell)!r}) is tagged 'check' but passed on the empty exercise")
            elif not any(_mentions_expected(e) for e in errors):
                problems.append(f"cell {i} ({_short(cell)!r}) failed, but not with {' or '.join(EXPECTED_ERRORS)}:\n"
                                + _error_text(errors[0])[-2000:])
        else:
            for e in errors:
                if not _mentions_expected(e):
                    problems.append(f"cell {i} ({_short(cell)!r}) raised an unexpected error:\n"
                                    + _error_text(e)[-2000:])
    assert not problems, f"{path.name}:\n" + "\n\n".join(problems)


# -- how a failed check looks -------------------------------------------------------------
# A failed check shows a few lines in Jupyter (what is wrong, what was expected, a hint), not
# ~35 lines of chained traceback through zerolab's internals; the full traceback is there on
# demand (zerolab.course.checks.full_tracebacks()). Run through a real kernel, as a learner sees it.

MAX_SHORT_LINES = 10
ANSI = __import__("re").compile(r"\x1b\[[0-9;]*m")

WRONG_ANSWERS = '''
from zerolab.course.checks.ch04 import check_update_scale
from zerolab.course.checks.ch03 import check_shard_range

def update_scale_forgets_the_count(state, overflow):      # never adds 1 to cur_iter
    if overflow:
        if state["delayed_shift"] == 1 or state["cur_hysteresis"] == 1:
            state["cur_scale"] = max(state["cur_scale"] / state["scale_factor"], state["min_scale"])
        else:
            state["cur_hysteresis"] -= 1
        state["last_overflow_iter"] = state["cur_iter"]

def shard_range_overlapping(padded_numel, world_size, rank):   # one element too many
    size = padded_numel // world_size
    return rank * size, min((rank + 1) * size + 1, padded_numel)
'''


def _shown(err: dict) -> str:
    """The error as Jupyter displays it: the traceback lines, colours removed."""
    return ANSI.sub("", "\n".join(err.get("traceback", [])))


@pytest.mark.timeout(300)
def test_a_failed_check_is_a_few_lines_with_expected_and_hint():
    cells = [WRONG_ANSWERS,
             "check_update_scale(update_scale_forgets_the_count)",
             "check_shard_range(shard_range_overlapping)",
             "import zerolab.course.checks\nzerolab.course.checks.full_tracebacks()",
             "check_update_scale(update_scale_forgets_the_count)"]
    nb = nbformat.v4.new_notebook()
    nb.cells = [nbformat.v4.new_code_cell(c) for c in cells]
    nbclient.NotebookClient(nb, kernel_name="python3", allow_errors=True, timeout=CELL_TIMEOUT_S,
                            resources={"metadata": {"path": str(ROOT)}}).execute()
    errors = [_errors(c) for c in nb.cells]
    assert not errors[0] and not errors[3], [_error_text(e[0]) for e in errors if e][:1]

    scaler = errors[1][0]
    shown = _shown(scaler)
    assert scaler["ename"] == "ExerciseCheckFailed"
    assert len(shown.splitlines()) <= MAX_SHORT_LINES, shown
    assert "expected:" in shown and "yours:" in shown, shown
    assert "hint: cur_iter counts the calls" in shown, shown
    assert "full_tracebacks()" in shown, shown                    # says how to see more
    assert "Traceback" not in shown and "zerolab/checks" not in shown, shown

    shard = _shown(errors[2][0])
    assert len(shard.splitlines()) <= MAX_SHORT_LINES, shard
    assert "an overlap" in shard and "hint: rank r + 1 starts where rank r ends" in shard, shard

    full = _shown(errors[4][0])                                  # on demand: the whole chain
    assert "ch04.py" in full and len(full.splitlines()) > MAX_SHORT_LINES, full


def test_a_rank_failure_puts_the_ranks_error_first_and_its_traceback_in_details():
    from zerolab.course.checks import ExerciseCheckFailed, rank_failure

    class FakeRankError(Exception):
        pass

    text = ("rank 1 raised ZeroDivisionError: division by zero\n(ranks that failed: 1)\n\n"
            "--- traceback from rank 1 ---\n" + "\n".join(f'  File "x.py", line {i}' for i in range(40)))
    exc = rank_failure(FakeRankError(text), "stage 1 with your shard_range on 2 ranks", "divide by world_size")
    assert isinstance(exc, ExerciseCheckFailed)
    short = ANSI.sub("", "\n".join(exc._render_traceback_()))
    assert len(short.splitlines()) <= MAX_SHORT_LINES, short
    assert "ZeroDivisionError: division by zero" in short.splitlines()[0]
    assert "hint: divide by world_size" in short
    assert 'line 39' in str(exc)                                 # nothing lost outside the short view


# -- what the solutions' checks print, as stored -----------------------------------------------
# The tests that ran each solution's check in tests/ (test_ch05_check.py ... test_hooks3_check.py)
# repeated what nbval does on solutions/ three times, so they were removed: nbval re-runs each cell
# below and compares its output with the stored one. What those tests asserted about the output is
# asserted here on the stored output (no kernel, no ranks), so the two together cover the same.
SOLUTION_CLAIMS = {
    "03c_zero1_by_hand": {"PASSED": 1, "bit for bit equal to DDP": 2,
                          "bit for bit (x 1/3 before the sum: DDP's reducer)": 2,
                          "1 reduce_scatter + 1 all_gather = 22,296 bytes": 1,
                          "AdamW states per rank, N=3: 14,868 bytes": 1},
    "05_host_step": {"PASSED": 1, "bit-identical": 1, "stage 3 + offload_param, fp16": 1},
    "06_bucket_params": {"PASSED": 1, "stage 2, reduce_bucket_size 100": 1},
    "07_captains_pick": {"PASSED": 1, "N = 3, fp32": 1, "None: every config over it": 1},
    "08_stage3_knobs": {"PASSED": 1, "bit-identical in all four runs": 1},
    "08c_gather_hooks": {"PASSED": 1, "2 ranks, 3 steps: 38 all-gathers": 1, "peak 1,344 elements": 1,
                         "2 ranks, 3 steps: 34 all-gathers": 1},
    "09_capstone_config": {"PASSED": 1, "engine: 3 ranks": 1},
    "13_block_quantizer": {"PASSED": 1, "inter-node": 1, "0.50": 1,
                           "the same gathered weights as zerolab's quantizer: True": 1},
}


@pytest.mark.parametrize("name", sorted(SOLUTION_CLAIMS))
def test_the_solutions_stored_check_output_says_it_passed(name):
    nb = nbformat.read(ROOT / "solutions" / f"{name}.ipynb", as_version=4)
    cells = [c for c in nb.cells if c.cell_type == "code" and "check" in c.metadata.get("tags", [])]
    assert cells, f"{name}: no cell tagged check"
    text = "".join(o.get("text", "") for c in cells for o in c.outputs if o.output_type == "stream")
    assert not any(o.output_type == "error" for c in cells for o in c.outputs), name
    for claim, at_least in SOLUTION_CLAIMS[name].items():
        assert text.count(claim) >= at_least, f"{name}: {claim!r} not in its check's stored output"
    if name == "03c_zero1_by_hand":
        assert text.startswith("PASSED")


# -- the checks catch plausible wrong answers ------------------------------------------------
# Each check is run on wrong answers a learner might write; each must fail (ExerciseCheckFailed),
# and where the check can tell, its hint names the mistake. The solutions passing is shown by
# nbval on solutions/.

def _fails(check, fn, *hint_words):
    from zerolab.course.checks import ExerciseCheckFailed

    with pytest.raises(ExerciseCheckFailed) as info:
        check(fn)
    text = str(info.value)
    for word in hint_words:
        assert word in text, text
    return text


def _bytes_rule(swap=False, divide_by=None):
    def fn(psi, precision, stage=0, world_size=1):
        p, g, o = (4, 4, 8) if precision == "fp32" else (2, 2, 12)
        n = divide_by or world_size
        out = {"params": psi * p / (n if stage >= 3 else 1), "grads": psi * g / (n if stage >= 2 else 1),
               "optimizer_states": psi * o / (n if stage >= 1 else 1)}
        if swap and precision == "fp16":        # right at stage 0, where both weigh 2 bytes
            out["params"], out["grads"] = out["grads"], out["params"]
        return out
    return fn


@pytest.mark.timeout(300)
def test_exercise1_check_catches_wrong_byte_counts():
    from zerolab.course.checks.ch01 import check_model_state_bytes

    _fails(check_model_state_bytes, _bytes_rule(swap=True), "swapped")
    _fails(check_model_state_bytes, _bytes_rule(divide_by=2), "Figure 1")     # 2 ranks here, 64 in the paper


def _adamw(coupled=False, eps_inside=False, eps=None, betas=None):
    import math

    def fn(param, grad, exp_avg, exp_avg_sq, step, lr, betas_, eps_, weight_decay):
        b1, b2 = betas or betas_
        e = eps_ if eps is None else eps
        if coupled:
            grad = grad + weight_decay * param
        else:
            param.mul_(1 - lr * weight_decay)
        exp_avg.mul_(b1).add_(grad, alpha=1 - b1)
        exp_avg_sq.mul_(b2).addcmul_(grad, grad, value=1 - b2)
        bc1, bc2 = 1 - b1 ** step, 1 - b2 ** step
        if eps_inside:
            denom = (exp_avg_sq / bc2 + e).sqrt()
        else:
            denom = exp_avg_sq.sqrt() / math.sqrt(bc2) + e
        param.addcdiv_(exp_avg, denom, value=-lr / bc1)
    return fn


def test_exercise3_check_catches_wrong_adamw_steps():
    from zerolab.course.checks.ch03 import check_adamw_step

    _fails(check_adamw_step, _adamw(eps=1e-8), "eps argument")               # a hard-coded eps
    _fails(check_adamw_step, _adamw(betas=(0.9, 0.99)))                       # hard-coded betas
    _fails(check_adamw_step, _adamw(coupled=True), "coupled weight decay")
    _fails(check_adamw_step, _adamw(eps_inside=True), "inside the square root")


def _shard_rule(kind):
    def fn(padded_numel, world_size, rank):
        size = padded_numel // world_size
        if kind == "reversed":                                   # tiles, but not in rank order
            rank = world_size - 1 - rank
        if kind == "last_takes_rest" and rank == world_size - 1:  # unequal pieces
            return rank * (size - 1), padded_numel
        if kind == "last_takes_rest":
            return rank * (size - 1), (rank + 1) * (size - 1)
        if kind == "engine_buffer_reversed" and padded_numel == 7206:   # wrong only on the engine's buffer
            rank = world_size - 1 - rank
        return rank * size, (rank + 1) * size
    return fn


@pytest.mark.timeout(300)
def test_exercise3_check_catches_wrong_shard_ranges():
    from zerolab.course.checks.ch03 import check_shard_range, close_crews

    try:
        _fails(check_shard_range, _shard_rule("reversed"), "not in rank order")
        _fails(check_shard_range, _shard_rule("last_takes_rest"), "equal pieces")
        _fails(check_shard_range, _shard_rule("engine_buffer_reversed"),
               "on a flat buffer the engine really made (DeepSpeed's flat buffer)")
        check_shard_range(_shard_rule("right"))                                # the solution passes
    finally:
        close_crews()


def test_exercise4_check_catches_wrong_scalers():
    from zerolab.course.checks.ch04 import check_sequences

    assert check_sequences(update_scale()) > 1000                  # the rule written out passes
    _fails(check_sequences, update_scale(factor=2.0), "scale_factor is 3")
    _fails(check_sequences, update_scale(floor_ignores_hysteresis=True), "hysteresis")


def _stage2_pieces(ready_early=False, no_divide=False, divide_by=None, keep=None, overwrite=False,
                   no_cast=False):
    def add_grad(bucket, where, grad, arrived, i, n_params):
        bucket[where] += grad.reshape(-1)
        arrived.add(i)
        return True if ready_early else len(arrived) == n_params

    def reduce_bucket(bucket, rank, world_size, comm_dtype, reduce_scatter, grad_shard):
        send = bucket.clone() if no_cast else bucket.to(comm_dtype)
        if not no_divide:
            send /= divide_by or world_size
        chunks = reduce_scatter(send)
        mine = chunks[rank if keep is None else keep]
        if overwrite:
            grad_shard.copy_(mine)
        else:
            grad_shard += mine
    return add_grad, reduce_bucket


@pytest.mark.timeout(600)
def test_exercise5_check_catches_wrong_stage2_buckets():
    from zerolab.course.checks.stage2_buckets import check_stage2_buckets, close_crews

    def check(pieces):
        check_stage2_buckets(*pieces)
    try:
        check(_stage2_pieces())                                              # the solution passes
        _fails(check, _stage2_pieces(no_divide=True), "not divided by N")
        _fails(check, _stage2_pieces(divide_by=2), "divided by 2, not by the world size N = 3")
        _fails(check, _stage2_pieces(keep=0), "partial sum that belongs to rank 0")
        _fails(check, _stage2_pieces(overwrite=True), "accumulate across micro-steps")
        _fails(check, _stage2_pieces(ready_early=True), "sent before it was complete")
        text = _fails(check, _stage2_pieces(no_cast=True), "bucket.to(comm_dtype)")
        sent, used = text.split("was sent as ")[1].split(", but this run communicates in ")
        assert sent.split()[0] != used.split()[0], text        # the learner's dtype, not the corrected one
    finally:
        close_crews()


def _ring_all_gather(shift=0, steps=None, into_own=False):
    import torch

    def ring_all_gather(chunks, rank, world_size, send_recv):
        n = world_size
        for s in range(n - 1 if steps is None else steps(n)):
            send_i, recv_i = (rank - s - shift) % n, (rank - s - 1) % n
            buf = torch.empty_like(chunks[recv_i])
            send_recv(chunks[send_i], buf)
            chunks[rank if into_own else recv_i] = buf
        return chunks
    return ring_all_gather


@pytest.mark.timeout(300)
def test_exercise0_check_catches_wrong_ring_all_gathers():
    from zerolab.course.checks.ch00 import check_ring_all_gather

    check_ring_all_gather(_ring_all_gather())                                  # the solution passes
    _fails(check_ring_all_gather, _ring_all_gather(shift=1), "chunk (r - s) % N")   # sends a placeholder
    _fails(check_ring_all_gather, _ring_all_gather(steps=lambda n: n - 2), "placeholder")
    _fails(check_ring_all_gather, _ring_all_gather(steps=lambda n: n), "N-1 = 1 steps")
    _fails(check_ring_all_gather, _ring_all_gather(into_own=True), "(r - s - 1) % N")
