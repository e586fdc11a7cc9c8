"""Exercise 3c check: a ZeRO-1 sharded optimizer written in plain torch.distributed.

The learner writes, with no zerolab engine::

    class ShardedOptimizer:
        def __init__(self, params, optimizer_cls, **kwargs): ...   # keep self.optimizer
        def step(self): ...          # after backward: reduce the gradients, step the shard, gather
        def zero_grad(self): ...

:func:`check_sharded_optimizer` (also named :func:`check`) runs the class on real gloo ranks
against ``torch.nn.parallel.DistributedDataParallel`` on the same data and model (5,573
parameters: no multiple of 2 or 3), each rank taking its slice of every global batch:

1. SGD with momentum, then AdamW (betas (0.8, 0.95), weight decay 0.1), on 2 and then 3 ranks;
   after every step the parameters must equal DDP's **bit for bit**. At 3 ranks the sum of three
   floats depends on their order, and gloo's ring orders element i's by where i sits in the
   buffer: DDP keeps its first bucket layout here (the parameters' order, that of a flat buffer
   built from them) instead of packing its buckets again after step 1. And 1/3 is not exact: DDP's
   reducer multiplies by 1/3 before the sum, torch's ``allreduce_hook`` (and DeepSpeed) divide by 3
   before it, a hook may divide after it; the learner's result must equal one of the three. What
   else is accepted at 3 ranks, and why, is in ``TOLERANCE``.
2. The traffic of ``step()``: every ``torch.distributed`` collective is counted while it runs
   (the functions are wrapped on each rank before the learner's class is unpickled there), and
   the bytes on the wire (ring convention, :func:`zerolab.comm.wire_factor`) are set beside
   reduce-scatter + all-gather (2(N-1)/N of the padded buffer) and all-reduce + all-gather
   (DeepSpeed's default, 3(N-1)/N).
3. The memory the optimizer side keeps hold of, measured as the storage behind its tensors (each
   storage once), never as their sizes: a tensor that is a view of a bigger buffer keeps the whole
   buffer alive. Its states, against DDP's optimizer: about 1/N; the tensors it steps (the master
   shard) and their gradients, beyond the model's own parameters and gradients: about 1/N of the
   padded buffer each, not a slice of a whole buffer. And everything the learner's object keeps
   reachable (its attributes and slots, through lists, tuples, dicts and plain objects to a small
   depth, the optimizer included, a function's closure variables and defaults, NumPy arrays by
   the memory they keep), beyond the model's own parameters and gradients: about the states' 1/N plus
   a shard and its gradient, so that a whole-size tensor kept anywhere (a full fp32 copy, a full
   gradient buffer, full-size moments in a list, a lambda that closes over the flat buffer) fails,
   named by its attribute path.

A failure names the likely mistake: forgot to average, averaged twice (or divided by a
constant), each rank stepped with its own gradient, forgot to all-gather, an uneven shard lost
the tail, zero_grad left gradients, the optimizer rebuilt every step, states for all parameters,
a shard (or its gradient, or a state) that is a view of a whole buffer, a whole-size tensor
kept as an attribute.
"""
from __future__ import annotations

import contextlib
import os
import sys

import cloudpickle
import torch
import torch.distributed as dist

from ... import i18n
from ...comm import wire_factor
from ...crew import CrewTimeout, RankError
from . import ExerciseCheckFailed, close_crews, crew_of, passed, rank_failure  # noqa: F401
from ..weigh import held_bytes, kept_bytes, kept_tensors, state_bytes  # noqa: F401  (the learner's notebook reads zero1.state_bytes)

T = i18n.catalogue("checks.zero1")    # the messages in the edition's language (zerolab/i18n/messages_zh.py)

__all__ = ["check_sharded_optimizer", "check", "close_crews", "make_model", "batch", "loss_fn",
           "flat_params", "state_bytes", "held_bytes", "kept_tensors", "kept_bytes", "on_ranks", "counting",
           "wire_bytes", "run_ddp", "psi", "padded", "OPTIMIZERS", "RUNS", "TOLERANCE", "ORDER"]

SIZES = (16, 64, 64, 5)             # an MLP: 16*64+64 + 64*64+64 + 64*5+5 = 5,573 parameters
GLOBAL_BATCH = 12                   # 6 rows per rank on 2 ranks, 4 on 3
STEPS = 3
OPTIMIZERS = {"SGD": (torch.optim.SGD, dict(lr=0.05, momentum=0.9)),
              "AdamW": (torch.optim.AdamW, dict(lr=3e-3, betas=(0.8, 0.95), weight_decay=0.1))}
RUNS = ((2, "SGD"), (2, "AdamW"), (3, "SGD"), (3, "AdamW"))
# At 3 ranks only, |a - b| <= ATOL + RTOL |b| is accepted, and said: a learner who reduces the
# gradients in another layout (one collective per parameter, a buffer padded far beyond N) gets
# gloo's sums in another order in some elements (gloo's ring adds element i's three
# contributions in an order set by which third of the buffer i sits in). SGD passes such
# last-bit differences on as they are; AdamW moves an element whose gradient nearly cancels by
# up to about lr whatever its last bits (appendix 3a), so it is allowed a tenth of lr. At 2 ranks
# nothing is allowed: a + b is b + a, and halving is exact.
TOLERANCE = {"SGD": (1e-6, 1e-5), "AdamW": (3e-4, 0.0)}
COLLECTIVES = {"all_reduce": "all_reduce", "reduce": "reduce", "broadcast": "broadcast",
               "reduce_scatter_single": "reduce_scatter", "reduce_scatter_tensor": "reduce_scatter",
               "_reduce_scatter_base": "reduce_scatter", "reduce_scatter": "reduce_scatter",
               "all_gather_single": "all_gather", "all_gather_into_tensor": "all_gather",
               "_all_gather_base": "all_gather", "all_gather": "all_gather"}


# ------------------------------------------------------------------ the model and data (every rank)

def make_model() -> torch.nn.Module:
    """The check's model, the same on every rank (seed 0)."""
    torch.manual_seed(0)
    layers = []
    for a, b in zip(SIZES, SIZES[1:]):
        layers += [torch.nn.Linear(a, b), torch.nn.Tanh()]
    return torch.nn.Sequential(*layers[:-1])


def batch(step: int, rank: int, world_size: int) -> tuple[torch.Tensor, torch.Tensor]:
    """This rank's rows of global batch ``step`` (the same global batch for every world size)."""
    g = torch.Generator().manual_seed(1000 + step)
    x, y = torch.randn(GLOBAL_BATCH, SIZES[0], generator=g), torch.randn(GLOBAL_BATCH, SIZES[-1], generator=g)
    return x.chunk(world_size)[rank], y.chunk(world_size)[rank]


def loss_fn(model, x, y) -> torch.Tensor:
    return torch.nn.functional.mse_loss(model(x), y)


def flat_params(model) -> torch.Tensor:
    return torch.cat([p.detach().reshape(-1) for p in model.parameters()]).clone()


# ------------------------------------------------------------------ counting collectives (every rank)

class _Count:
    """What :func:`counting` yields: ``on`` (count now?), ``calls`` [(op, numel, bytes)]."""

    def __init__(self):
        self.on, self.depth, self.calls = False, 0, []

    def take(self) -> list:
        calls, self.calls = self.calls, []
        return calls


def _numel(name: str, args, kwargs) -> int:
    """Elements of the full tensor of a call (the ledger's rule: the reduce-scattered input, the
    all-gathered output)."""
    a = list(args) + list(kwargs.values())
    if name in ("reduce_scatter_single", "reduce_scatter_tensor", "_reduce_scatter_base"):
        return a[1].numel()
    if name in ("all_gather_single", "all_gather_into_tensor", "_all_gather_base"):
        return a[0].numel()
    if name == "reduce_scatter":
        return sum(t.numel() for t in a[1])
    if name == "all_gather":
        return sum(t.numel() for t in a[0])
    return a[0].numel()


@contextlib.contextmanager
def counting():
    """Wrap torch.distributed's collectives (both their public names and those in
    ``distributed_c10d``); inside, calls made while ``count.on`` is True are appended to
    ``count.calls`` as (op, numel, bytes). A call made inside another (a deprecated name calling
    its new one) is counted once."""
    count = _Count()
    modules = (dist, dist.distributed_c10d)
    saved = [(m, name, getattr(m, name)) for m in modules for name in COLLECTIVES if hasattr(m, name)]

    def wrap(name, fn):
        def counted(*args, **kwargs):
            if count.on and count.depth == 0:
                numel = _numel(name, args, kwargs)
                size = (list(args) + list(kwargs.values()))[0]
                size = size[0] if isinstance(size, (list, tuple)) else size
                count.calls.append((COLLECTIVES[name], numel, numel * size.element_size()))
            count.depth += 1
            try:
                return fn(*args, **kwargs)
            finally:
                count.depth -= 1
        return counted

    for m, name, fn in saved:
        setattr(m, name, wrap(name, fn))
    try:
        yield count
    finally:
        for m, name, fn in saved:
            setattr(m, name, fn)


def wire_bytes(calls: list, world_size: int) -> float:
    """Bytes a rank puts on the wire for these calls, by the ring convention (zerolab.comm)."""
    return sum(wire_factor(op, world_size) * nbytes for op, _, nbytes in calls)


# ------------------------------------------------------------------ one run on the ranks

def run_ddp(opt_name: str, rounding: str = "builtin", first_layout: bool = True, steps: int = STEPS) -> dict:
    """Train the check's model with torch DDP on the current process group: the parameters after
    each step, the optimizer's state bytes. ``rounding``: "builtin" (DDP's reducer multiplies by
    1/N, then sums), "divide_first" (torch's allreduce_hook: divides by N, then sums),
    "divide_after" (a hook that sums, then divides). DDP rebuilds its buckets after the first
    backward, in the order the gradients arrived (the last layer first), which at 3 ranks changes
    the order of gloo's sums; ``first_layout`` keeps its first layout, the parameters' own order,
    with ``find_unused_parameters=True`` (whose only other effect here is a note on stderr)."""
    from torch.distributed.algorithms.ddp_comm_hooks.default_hooks import allreduce_hook
    from torch.nn.parallel import DistributedDataParallel
    r, n = dist.get_rank(), dist.get_world_size()
    ddp = DistributedDataParallel(make_model(), find_unused_parameters=first_layout)
    if rounding == "divide_first":
        ddp.register_comm_hook(None, allreduce_hook)
    elif rounding == "divide_after":
        def divide_after(_, bucket):
            fut = dist.all_reduce(bucket.buffer(), async_op=True).get_future()
            return fut.then(lambda f: f.value()[0].div_(n))
        ddp.register_comm_hook(None, divide_after)
    cls, hp = OPTIMIZERS[opt_name]
    opt = cls(ddp.parameters(), **hp)
    params = []
    with _quiet_stderr():
        for k in range(steps):
            opt.zero_grad()
            loss_fn(ddp, *batch(k, r, n)).backward()
            opt.step()
            params.append(flat_params(ddp.module))
    return {"params": params, "state_bytes": state_bytes(opt)}


@contextlib.contextmanager
def _quiet_stderr():
    """File descriptor 2 (where torch's C++ notes go) to /dev/null inside."""
    sys.stderr.flush()
    saved, null = os.dup(2), os.open(os.devnull, os.O_WRONLY)
    os.dup2(null, 2)
    try:
        yield
    finally:
        os.dup2(saved, 2)
        os.close(saved)
        os.close(null)


class LearnerError(RuntimeError):
    """The learner's code raised on a rank (raised, not returned: the crew then stops the ranks
    that wait for this one in a collective, instead of letting them hang)."""


def _learner(what: str, call):
    try:
        return call()
    except NotImplementedError:
        raise
    except Exception as exc:                                        # noqa: BLE001
        raise LearnerError(T("{what} raised {name}: {error}", what=what, name=type(exc).__name__,
                             error=exc)) from exc


def _rank_run(blob: bytes, opt_name: str, roundings: tuple, steps: int = STEPS, language: str = "en") -> dict:
    """On one rank: the learner's optimizer (unpickled inside the counting wrappers) for
    ``steps`` steps, then DDP for each rounding (``language``: the notebook's, for errors)."""
    with i18n.using(language):
        return _rank_run_here(blob, opt_name, roundings, steps)


def _rank_run_here(blob: bytes, opt_name: str, roundings: tuple, steps: int) -> dict:
    r, n = dist.get_rank(), dist.get_world_size()
    cls, hp = OPTIMIZERS[opt_name]
    result = {"rank": r, "steps": []}
    with counting() as count:
        learner_cls = cloudpickle.loads(blob)
        model = make_model()
        result["start"] = flat_params(model)
        opt = _learner("ShardedOptimizer(params, optimizer_cls, **kwargs)",
                       lambda: learner_cls(model.parameters(), cls, **hp))
        for k in range(steps):
            _learner("zero_grad()", opt.zero_grad)
            left = [p.grad for p in model.parameters() if p.grad is not None and bool(p.grad.ne(0).any())]
            loss_fn(model, *batch(k, r, n)).backward()
            grad = torch.cat([p.grad.reshape(-1) for p in model.parameters()]).clone()
            count.on = True
            try:
                _learner(T("step() (step {k})", k=k + 1), opt.step)
            finally:
                count.on = False
            result["steps"].append({"params": flat_params(model), "grad": grad, "calls": count.take(),
                                    "grads_left": len(left)})
        result["state_bytes"] = state_bytes(opt)
        result["held"] = held_bytes(opt, model)
        result["kept"] = kept_bytes(opt, model)
    result["ddp"] = {rounding: run_ddp(opt_name, rounding, steps=steps) for rounding in roundings}
    return result


# ------------------------------------------------------------------ the verdict (the parent)

ROUNDINGS = {"builtin": T.mark("x 1/N before the sum: DDP's reducer"),
             "divide_first": T.mark("/ N before the sum: allreduce_hook, DeepSpeed"),
             "divide_after": T.mark("/ N after the sum")}
HOW = {"SGD": T.mark("SGD, momentum 0.9"), "AdamW": T.mark("AdamW (0.8, 0.95), wd 0.1")}
ORDER = ("all_reduce", "reduce_scatter", "reduce", "all_gather", "broadcast")


def psi() -> int:
    """The check's model's parameter count."""
    return sum(a * b + b for a, b in zip(SIZES, SIZES[1:]))


def padded(n: int) -> int:
    """The parameter count rounded up to a multiple of ``n``."""
    return -(-psi() // n) * n


def _close(a: float, b: float) -> bool:
    return abs(a - b) <= 0.01 * abs(b)


def _params(res: dict, k: int, rounding: str | None = None) -> torch.Tensor:
    """The parameters after step k (1-based; 0 = the start): the learner's, or DDP's."""
    if k == 0:
        return res["start"]
    return res["steps"][k - 1]["params"] if rounding is None else res["ddp"][rounding]["params"][k - 1]


def _first_difference(results: list, rounding: str, tolerance: tuple | None = None) -> int | None:
    """The first step (1-based) after which some rank's parameters differ from DDP's (bit for bit,
    or beyond ``tolerance`` = (atol, rtol))."""
    for k in range(1, STEPS + 1):
        for res in results:
            a, b = _params(res, k), _params(res, k, rounding)
            if not (torch.equal(a, b) if tolerance is None else
                    bool(((a - b).abs() <= tolerance[0] + tolerance[1] * b.abs()).all())):
                return k
    return None


def _pad(text: str, columns: int) -> str:
    """``text`` padded with spaces to ``columns`` columns (a CJK character takes two)."""
    return text + " " * (columns - i18n.width(text))


def _scaled(where: str, n: int, ratio: float) -> str | None:
    """The hint for updates that are all ``ratio`` times DDP's (SGD's first step is lr x grad)."""
    what = T("{where}: every update is {ratio:.3g} times DDP's.\n  hint: ", where=where, ratio=ratio)
    if _close(ratio, n):
        return what + T("forgot to average: the gradients were summed over the {n} ranks; DDP averages", n=n)
    if _close(ratio, 1 / n):
        return what + T("averaged twice: divide by N once (not before and after the sum)")
    for c in range(2, 9):
        if _close(ratio, n / c):
            return what + T("the gradients were divided by {c}, not by N = {n}: use dist.get_world_size()", c=c, n=n)
    return what + T("the gradient must be the average over the ranks, and lr reach optimizer_cls")


def _diagnose(n: int, opt_name: str, results: list, k: int) -> str:
    """What is wrong at step k, the first after which the parameters differ from DDP's."""
    where = T("N={n}, {how}, after step {k}", n=n, how=T.text(HOW[opt_name]), k=k)
    mine, before = [_params(res, k) for res in results], [_params(res, k - 1) for res in results]
    ddp, ddp_before = _params(results[0], k, "builtin"), _params(results[0], k - 1, "builtin")
    moved = ddp != ddp_before
    if not all(torch.equal(x, mine[0]) for x in mine):
        kept = [int(((x == b) & moved).sum()) for x, b in zip(mine, before)]
        if min(kept) >= int(moved.sum()) // (2 * n):
            return T("{where}: the ranks disagree.\n  Of the {moved:,} elements DDP changed, each rank kept most at "
                     "their old values ({kept}).\n  hint: forgot to all-gather: each rank updated only its shard; "
                     "all-gather the shards\n  (dist.all_gather_single) and copy them into the parameters",
                     where=where, moved=int(moved.sum()), kept=", ".join(f"{c:,}" for c in kept))
        return T("{where}: the ranks end the step with different parameters.\n  hint: every rank must all-gather "
                 "the same shards, in rank order, and copy them back", where=where)
    kept = ((mine[0] == before[0]) & moved).nonzero().flatten()
    if kept.numel():
        if int(kept.min()) >= psi() - kept.numel() and kept.numel() < psi() // n:
            return T("{where}: the last {kept} of {psi:,} elements never changed.\n  hint: the uneven shard lost "
                     "the tail: {psi:,} does not divide by N = {n}; pad the flat\n  buffer to a multiple of N "
                     "(DeepSpeed pads) so that the last shard owns them", where=where, kept=kept.numel(), psi=psi(),
                     n=n)
        return T("{where}: {kept:,} elements that DDP changed (the first at flat index {first:,})\n  never changed "
                 "here.\n  hint: every element must belong to exactly one rank's shard, and be gathered back",
                 where=where, kept=kept.numel(), first=int(kept[0]))
    step, ddp_step = mine[0] - before[0], ddp - ddp_before
    big = ddp_step.abs() > 1e-3 * ddp_step.abs().max()
    if opt_name == "SGD" and k == 1 and big.any():
        ratio = float((step[big] / ddp_step[big]).median())
        steady = (step[big] - ratio * ddp_step[big]).abs() <= 0.01 * ddp_step[big].abs()
        if float(steady.float().mean()) > 0.9 and not _close(ratio, 1.0):
            return _scaled(where, n, ratio)
        lr, own = OPTIMIZERS["SGD"][1]["lr"], torch.zeros_like(big)
        for res, scale in ((res, scale) for res in results for scale in (1.0, 1.0 / n)):
            own |= (step + lr * scale * res["steps"][0]["grad"]).abs() <= 1e-5 * step.abs() + 1e-9
        if float(own[big].float().mean()) > 0.5:
            return T("{where}: each shard was stepped with its own rank's gradient.\n  hint: reduce the gradients "
                     "over the ranks first (reduce-scatter or all-reduce), then step", where=where)
    if k > 1:
        return T("{where}: step 1 matched DDP bit for bit, step {k} does not.\n  hint: the optimizer's state must "
                 "carry over (build self.optimizer once, in __init__, over\n  a shard tensor that stays the same "
                 "object), and every keyword argument (momentum,\n  betas, weight_decay) must reach optimizer_cls",
                 where=where, k=k)
    worst = max(float((x - ddp).abs().max()) for x in mine)
    return T("{where}: the parameters differ from DDP's (largest |difference| {worst:.1e}).\n  hint: is every "
             "keyword argument passed on to optimizer_cls? Are the gradients the\n  average over the ranks, each "
             "shard stepped once, every shard gathered back?", where=where, worst=worst)


def _compare(n: int, opt_name: str, results: list) -> str:
    """A line saying how the parameters compare with DDP's, or ExerciseCheckFailed."""
    left = max(s["grads_left"] for res in results for s in res["steps"])
    if left:
        raise ExerciseCheckFailed(T(
            "N={n}: after zero_grad() {left} parameters still held a gradient.\n  hint: zero_grad() must clear "
            "every parameter's .grad (set it to None), or backward adds the\n  next step's gradients to the old "
            "ones", n=n, left=left))
    columns = max(i18n.width(T.text(how)) for how in HOW.values()) + 2     # 27 in English
    head = f"N={n}  " + _pad(T.text(HOW[opt_name]), columns)
    for rounding in results[0]["ddp"]:
        if _first_difference(results, rounding) is None:
            return head + (T("bit for bit equal to DDP") if n == 2 else
                           T("bit for bit ({how})", how=T.text(ROUNDINGS[rounding])).replace("N", str(n)))
    atol, rtol = TOLERANCE[opt_name]
    if n >= 3 and _first_difference(results, "builtin", (atol, rtol)) is None:
        bound = f"{atol:.0e}" + (f" + {rtol:.0e} |x|" if rtol else " (lr / 10)")
        return head + T("NOT bit for bit; every |difference| <= {bound}:\n{indent}your sums ran in another order "
                        "than DDP's (see the notebook)", bound=bound, indent=" " * (columns + 7))
    raise ExerciseCheckFailed(_diagnose(n, opt_name, results, _first_difference(results, "builtin")))


def _traffic(n: int, results: list) -> str:
    s = 4 * padded(n)
    rs_ag, ar_ag = 2 * (n - 1) / n * s, 3 * (n - 1) / n * s
    worst = max((st["calls"] for res in results for st in res["steps"]), key=lambda c: wire_bytes(c, n))
    wire, ops = wire_bytes(worst, n), [op for op in ORDER if any(c[0] == op for c in worst)]
    calls = " + ".join(f"{sum(c[0] == op for c in worst)} {op}" for op in ops)
    if wire == 0:
        raise ExerciseCheckFailed(T("N={n}: the check counted no collective in step().\n  hint: call "
                                    "torch.distributed's collectives through the module, dist.<name>(...),\n  so "
                                    "that the check can count them", n=n))
    if wire > 1.01 * (2 * (n - 1) / n * s + (s if "broadcast" in ops else (n - 1) / n * s)) + 64:
        raise ExerciseCheckFailed(T(
            "N={n}: step() put {wire:,.0f} bytes per rank on the wire ({calls});\n  an all-reduce of the gradients "
            "and an all-gather of the parameters need {need:,.0f}.\n  hint: something is sent twice, or a whole "
            "buffer where a shard would do", n=n, wire=wire, calls=calls, need=ar_ag))
    return T("step() per rank, N={n}: {calls} = {wire:,.0f} bytes on the wire\n    (S = the {s:,}-byte padded "
             "buffer: reduce-scatter + all-gather 2(N-1)/N S = {rs_ag:,.0f};\n    DeepSpeed's default, all-reduce + "
             "all-gather, 3(N-1)/N S = {ar_ag:,.0f})", n=n, calls=calls, wire=wire, s=s, rs_ag=rs_ag, ar_ag=ar_ag)


def _views(n: int, results: list, ddp: int) -> None:
    """Fail when the tensors the optimizer steps, their gradients or its states keep more memory
    alive than a shard's worth: a slice of a whole buffer (a view) holds the whole buffer."""
    share = 4 * padded(n) // n                  # one fp32 shard, in bytes
    for res in results:
        held = res.get("held") or {}
        for what, numel_key, name, hint in (
                ("master", "master_numel", T("the tensor self.optimizer steps"),
                 T(".clone() the slice (DeepSpeed clones its fp32 partition), or make a tensor of its own")),
                ("grads", "grads_numel", T("the gradient it steps with (.grad)"),
                 T("give the shard a gradient of its own: reduce-scatter into a shard-sized tensor, or "
                   ".clone() the slice"))):
            numel = held.get(numel_key, 0)
            if held.get(what, 0) > 1.2 * share + 64 and held[what] > 1.2 * 4 * numel + 64:
                raise ExerciseCheckFailed(T(
                    "N={n}, rank {rank}: {name} has {numel:,} elements, but the memory behind it\n  is "
                    "{bytes:,} bytes (a shard's is {share:,}): it is a view of a whole buffer, which it keeps\n"
                    "  alive on every rank.\n  hint: {hint}", n=n, name=name, numel=numel, bytes=held[what],
                    rank=res["rank"], share=share, hint=hint))
        states, numel = held.get("states", 0), held.get("master_numel", 0)
        if states > 1.2 * ddp / n + 64 and 0 < numel <= padded(n) // n + 16:   # a shard's states, a buffer's bytes
            raise ExerciseCheckFailed(T(
                "N={n}, rank {rank}: the optimizer steps a shard of {numel:,} elements, but its states keep\n"
                "  {bytes:,} bytes alive (DDP's {ddp:,} / {n} = {expect:,}): a state is a view of a whole buffer.\n"
                "  hint: let self.optimizer make its own states for the shard",
                n=n, numel=numel, bytes=states, rank=res["rank"], ddp=ddp, expect=ddp // n))


def _size(nbytes: int, n: int) -> str:
    """``nbytes`` beside the whole model's fp32 size (4 bytes a parameter, padded or not)."""
    if 4 * psi() - 64 <= nbytes <= 4 * padded(n) + 64:
        return T("the whole model's size")
    return T("{ratio:.2g} x the whole model's size", ratio=nbytes / (4 * psi()))


def _kept(n: int, results: list, ddp: int) -> None:
    """Fail when a rank keeps more alive beyond the model's own parameters and gradients than
    ZeRO-1 needs, wherever it keeps it: the states (about DDP's / N), the shard it steps and the
    shard's gradient (a padded buffer's 1/N each), with the 20 % and 64 bytes the other bounds allow."""
    share = 4 * padded(n) // n                  # one fp32 shard, in bytes
    need = ddp // n + 2 * share
    for res in results:
        kept = res.get("kept") or {}
        if kept.get("total", 0) <= 1.2 * need + 64:
            continue
        storages = kept["storages"]
        big = [s for s in storages if s[1] > 1.2 * share + 64] or storages[:3]
        named = "\n".join(T("    {path}: {bytes:,} bytes ({size})", path=path, bytes=nbytes, size=_size(nbytes, n))
                          for path, nbytes in big[:4])
        raise ExerciseCheckFailed(T(
            "N={n}, rank {rank}: beyond the model's own parameters and gradients, your object keeps\n"
            "  {bytes:,} bytes alive; ZeRO-1 needs about {need:,} (the states, DDP's {ddp:,} / {n},\n"
            "  plus a {share:,}-byte shard and its gradient). The largest it keeps:\n{named}\n"
            "  hint: a whole-size tensor kept on every rank (a full copy of the parameters, a full\n"
            "  gradient buffer, full-size moments) is what ZeRO-1 removes: keep only this rank's\n"
            "  shard, and let a whole buffer that step() needs be a local variable",
            n=n, rank=res["rank"], bytes=kept["total"], need=need, ddp=ddp, share=share, named=named))


def _memory(n: int, results: list) -> str:
    mine, ddp = [res["state_bytes"] for res in results], results[0]["ddp"]["builtin"]["state_bytes"]
    if any(m is None for m in mine):
        raise ExerciseCheckFailed(T("N={n}: the check found no torch optimizer in your object.\n  hint: keep the "
                                    "optimizer you build with optimizer_cls as self.optimizer", n=n))
    if max(mine) == 0:
        raise ExerciseCheckFailed(T("N={n}: self.optimizer holds no states after {steps} AdamW steps.\n"
                                    "  hint: step the shard with self.optimizer.step(), not by hand", n=n, steps=STEPS))
    _views(n, results, ddp)
    if max(mine) > 1.2 * ddp / n + 64:
        raise ExerciseCheckFailed(T(
            "N={n}: the optimizer states weigh {mine:,} bytes on a rank; DDP's {ddp:,}, and a shard's\n  should "
            "weigh about 1/{n} of that ({share:,}).\n  hint: states for all parameters: every rank steps the whole "
            "model. Build self.optimizer\n  over this rank's shard only", n=n, mine=max(mine), ddp=ddp,
            share=ddp // n))
    _kept(n, results, ddp)
    each = f"{mine[0]:,}" if len(set(mine)) == 1 else ", ".join(f"{m:,}" for m in mine)
    return T("AdamW states per rank, N={n}: {each} bytes; DDP's {ddp:,} / {n} = {share:,}", n=n, each=each, ddp=ddp,
             share=ddp // n)


def _run(blob: bytes, n: int, opt_name: str) -> list:
    roundings = ("builtin",) if n == 2 else tuple(ROUNDINGS)
    try:
        results = crew_of(n).run(_rank_run, blob, opt_name, roundings, STEPS, i18n.lang(), timeout=60)
    except CrewTimeout as exc:
        raise ExerciseCheckFailed(T(
            "N={n}: ranks {ranks} were still waiting after 60 s.\n  hint: every rank must make the same collective "
            "calls, in the same order, with tensors of the same size", n=n, ranks=exc.ranks)) from None
    except RankError as exc:
        if "NotImplementedError" in str(exc):
            raise ExerciseCheckFailed(T("ShardedOptimizer is not written yet (NotImplementedError): write "
                                        "the parts marked 'Exercise'.")) from None
        raise rank_failure(exc, f"N={n}", T("the error is your class's; full_tracebacks() shows the "
                                            "line on the rank")) from None
    return results


def on_ranks(crew, fn, *args, **kwargs) -> list:
    """``crew.run(fn, *args, **kwargs)`` for the exercise's own cells: an unfinished
    ShardedOptimizer (its ``NotImplementedError``) or an error raised in it reads as the check's
    few lines, not as a rank's traceback (``full_tracebacks()`` shows that)."""
    try:
        return crew.run(fn, *args, **kwargs)
    except RankError as exc:
        if "NotImplementedError" in str(exc):
            raise ExerciseCheckFailed(T("ShardedOptimizer is not written yet (NotImplementedError): write "
                                        "the parts marked 'Exercise'."), details=str(exc)) from None
        raise rank_failure(exc, f"N={crew.world_size}", T("the error is your class's; full_tracebacks() shows the "
                                                         "line on the rank")) from None


def check_sharded_optimizer(optimizer_class) -> None:
    """Run ``optimizer_class`` on 2 and 3 gloo ranks against torch DDP; raise
    :class:`ExerciseCheckFailed` naming the likely mistake, or print what was verified."""
    blob = cloudpickle.dumps(optimizer_class)
    lines, extra = [], []
    for n, opt_name in RUNS:
        results = _run(blob, n, opt_name)
        lines.append(_compare(n, opt_name, results))
        if opt_name == "AdamW":
            extra += [_traffic(n, results), _memory(n, results)]
    passed(T("your ShardedOptimizer trains the {psi:,}-parameter MLP as DDP does ({steps} steps each):", psi=psi(),
             steps=STEPS) + "\n  " + "\n  ".join(lines + extra))


check = check_sharded_optimizer
