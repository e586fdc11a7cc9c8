"""Exercise 3b check: stage 2's gradient buckets, written by the learner, run in the real engine.

The learner writes the two pieces of :class:`zerolab.zero.reduce.ReduceScatterInBackward` that make
stage 2 (and stage 3) keep only a shard of the gradients, reduced during backward::

    def add_grad(bucket, where, grad, arrived, i, n_params):
        # put parameter i's gradient into bucket[where]; note i in `arrived`;
        # return True when the bucket is complete (every one of its n_params has arrived)

    def reduce_bucket(bucket, rank, world_size, comm_dtype, reduce_scatter, grad_shard):
        # send = the bucket in the communication dtype, pre-divided by world_size;
        # chunks = reduce_scatter(send)   (a list of world_size pieces; only chunks[rank]
        #                                 holds the sum over all ranks)
        # keep: add chunks[rank] into grad_shard (accumulated across micro-steps)

:func:`check_stage2_buckets` plugs them into ``ReduceScatterInBackward`` on every rank (for the
duration of the check only), trains TinyLM with stages 2 and 3 on 2 and 3 ranks, in fp32 and
bf16, with gradient accumulation 1 and 2, and compares every parameter with zerolab's own
engine (fp32 runs: also with single-process training, ``zerolab.zero.reference``). Around each call
it watches what the learner did, so that a failure names the likely mistake: a bucket said
complete too early, a send not divided by N or not in the communication dtype, the wrong
chunk kept, a shard overwritten instead of accumulated across micro-steps.

The bucket is the ZeRO paper's: at stage 2 the runs turn on zerolab's own switch
``"zerolab": {"ideal_reduce_scatter": true}``, so each bucket is its own flat buffer of N shards
and is reduce-scattered (DeepSpeed 0.19.8's stage 2 instead keeps one flat buffer and
all-reduces each bucket, chapter 3); stage 3 reduce-scatters its buckets in DeepSpeed too.

The ``reduce_scatter`` handed to the learner is a real one (``engine.comm.reduce_scatter``,
recorded in the ledger); like ``zerolab.comm.ring_reduce_scatter`` it returns every chunk,
and the chunks of other ranks hold only this rank's own contribution (a partial sum).
"""
from __future__ import annotations

from collections.abc import Callable

import torch

from ... import i18n
from . import ExerciseCheckFailed, passed, rank_failure
from . import close_crews, crew_of as _crew  # noqa: F401  (close_crews: the exercise imports it from here)

T = i18n.catalogue("checks.stage2_buckets")    # the messages in the edition's language (zerolab/i18n/messages_zh.py)

__all__ = ["check_stage2_buckets", "close_crews", "CASES"]

CHECK_MODEL = dict(vocab=37, d=26, hidden=53, layers=2, seq_len=16)
BUCKET = 700
GLOBAL_BATCH = 12
STEPS = 2
HP = dict(lr=3e-3, betas=[0.9, 0.99], eps=1e-8, weight_decay=0.1)
# (world size, stage, precision, gradient accumulation steps, communication dtype or None)
CASES = ((2, 2, "fp32", 1, None), (2, 2, "fp32", 2, None), (2, 2, "bf16", 2, "fp32"),
         (2, 3, "bf16", 1, None), (3, 2, "fp32", 2, None), (3, 2, "bf16", 1, None),
         (3, 3, "fp32", 2, None))
# |a - b| <= ATOL + RTOL |b|: against zerolab's own engine (same ops) and the reference
TOL = {"fp32": (1e-6, 1e-5), "bf16": (2e-3, 2e-2)}


class _Wrong(Exception):
    """Raised on a rank when the learner's piece did something the engine cannot use."""


def _config(n: int, stage: int, precision: str, gas: int, comm: str | None) -> dict:
    cfg = {"train_batch_size": GLOBAL_BATCH, "gradient_accumulation_steps": gas,
           "train_micro_batch_size_per_gpu": GLOBAL_BATCH // (n * gas),
           "optimizer": {"type": "AdamW", "params": dict(HP)},
           "zero_optimization": {"stage": stage, "reduce_bucket_size": BUCKET,
                                 "overlap_comm": False},
           # the exercise's bucket is the paper's: reduce-scattered, each its own set of shards
           # (zerolab's opt-in; DeepSpeed's stages 1-2 all-reduce a range of one flat buffer)
           "zerolab": {"ideal_reduce_scatter": True}}
    if stage == 3:             # small parameters stay whole; the rest: one bucket per module
        cfg["zero_optimization"]["stage3_param_persistence_threshold"] = 100
        cfg["zero_optimization"]["reduce_bucket_size"] = 1    # (DeepSpeed packs several modules)
    if precision == "bf16":
        cfg["bf16"] = {"enabled": True}
    if comm:
        cfg["communication_data_type"] = comm
    return cfg


def _close(a: torch.Tensor, b: torch.Tensor, tol) -> bool:
    atol, rtol = tol
    return bool(((a.float() - b.float()).abs() <= atol + rtol * b.float().abs()).all())


def _plug(add_grad: Callable, reduce_bucket: Callable, log: dict):
    """Replace ReduceScatterInBackward.accept / issue / post_backward by versions that call the
    learner's functions and watch them; returns a function that restores the originals."""
    from zerolab.zero.reduce import ReduceScatterInBackward

    saved = {k: ReduceScatterInBackward.__dict__[k] for k in ("accept", "issue", "post_backward")}

    def fail(message: str) -> None:
        # Record the first mistake and let the run go on, repaired, so that every rank issues the
        # same collectives (a rank that stopped alone would leave the others waiting).
        log.setdefault("error", message)

    def accept(self, g, i, grad):
        b, _ = self._where[(g.index, i)]
        assert len(b.parts) == 1 and b.parts[0].group is g      # one bucket = one whole group here
        if b.index < self._next:                 # cannot happen: early 'ready' is refused below
            raise _Wrong(T(
                "bucket {bucket} was sent before it was complete: the gradient of {name} arrived after the bucket "
                "had gone.\n  hint: add_grad must return True only when all n_params gradients of the bucket have "
                "arrived", bucket=repr(g.label), name=repr(g.names[i])))
        bucket = self._buffers.get(b.index)
        if bucket is None:
            bucket = torch.zeros(g.padded_numel, dtype=self.dtype, device=self.device)
            self._buffers[b.index] = bucket
            self.track(f"grads {b.index}", bucket)
        seen = log["seen"].setdefault((id(self), g.index), set())
        shadow = bucket[g.param_slice(i)].clone().add_(grad.reshape(-1))
        arrived = log["arrived"].setdefault((id(self), g.index), set())
        ready = add_grad(bucket, g.param_slice(i), grad, arrived, i, len(g.params))
        seen.add(i)
        if not torch.equal(bucket[g.param_slice(i)], shadow):
            bucket[g.param_slice(i)] = shadow
            fail(T(
                "after add_grad, bucket[where] does not hold the gradient of {name} (parameter {i} of bucket "
                "{bucket}).\n  hint: add the gradient, flattened, into bucket[where] in place: "
                "bucket[where] += grad.reshape(-1)", name=repr(g.names[i]), i=i, bucket=repr(g.label)))
        if ready:
            if len(seen) < len(g.params):
                fail(T(
                    "add_grad said bucket {bucket} was complete after {seen} of its {n} gradients: it would be "
                    "sent before it was complete.\n  hint: return True only when all n_params gradients have "
                    "arrived (len(arrived) == n_params)", bucket=repr(g.label), seen=len(seen), n=len(g.params)))
                return
            self._ready.add(b.index)
            while self._next < len(self.buckets) and self._next in self._ready:
                self._issue_next()

    def issue(self, b):
        g = b.parts[0].group
        bucket = self._buffers.pop(b.index, None)
        if bucket is None:
            bucket = torch.zeros(g.padded_numel, dtype=self.dtype, device=self.device)
        n, r = self.world_size, self.rank
        norm = float(bucket.float().norm())
        right = bucket.to(self.comm_dtype, copy=True)
        if n > 1:
            right.div_(n)
        sent = []

        def really_send(send):
            out = torch.empty(g.shard_numel, dtype=send.dtype, device=send.device)
            self.comm.reduce_scatter(out, send, tag=f"grads {g.label}")
            chunks = [c.clone() for c in send.view(n, g.shard_numel)]
            chunks[r] = out
            sent.append(chunks)

        def reduce_scatter(send):
            if sent:
                fail(T("reduce_scatter was called twice for bucket {bucket}.\n  hint: one reduce-scatter per bucket",
                       bucket=repr(g.label)))
                return [c.clone() for c in sent[0]]
            if not isinstance(send, torch.Tensor) or send.numel() != g.padded_numel:
                what = tuple(send.shape) if isinstance(send, torch.Tensor) else type(send).__name__
                fail(T("reduce_scatter got {what}; send the whole bucket ({n} elements), every rank the same size",
                       what=what, n=g.padded_numel))
                send = right
            elif send.dtype != self.comm_dtype:
                fail(T("the bucket was sent as {sent}, but this run communicates in {comm} (training in {dtype}).\n"
                       "  hint: convert the bucket to comm_dtype before sending: bucket.to(comm_dtype)",
                       sent=send.dtype, comm=self.comm_dtype, dtype=self.dtype))
                send = right
            elif norm > 0:
                ratio = float(send.float().norm()) / norm
                if abs(ratio * n - 1) > 0.02:
                    if abs(ratio - 1) < 0.02:
                        why = T("it was not divided by N (the sum would be N times the average)")
                    elif abs(ratio * 2 - 1) < 0.02:
                        why = T("it was divided by 2, not by the world size N = {n}", n=n)
                    else:
                        why = T("it was scaled by {ratio:.3g}, not by 1/N = 1/{n}", ratio=ratio, n=n)
                    fail(T("bucket {bucket} was sent at {ratio:.3g} x its size: {why}.\n  hint: send bucket / "
                           "world_size, so the sum over ranks is the average gradient", bucket=repr(g.label),
                           ratio=ratio, why=why))
                    send = right
            really_send(send.contiguous())
            return [c.clone() for c in sent[0]]

        shard = self.grad_shards[g.index]
        before = shard.clone()
        micro = log["micro"]
        reduce_bucket(bucket, r, n, self.comm_dtype, reduce_scatter, shard)
        if not sent:
            really_send(right)
            fail(T("reduce_bucket returned without calling reduce_scatter for bucket {bucket}: its gradient never "
                   "left this rank.\n  hint: chunks = reduce_scatter(send)", bucket=repr(g.label)))
        chunks = sent[0]
        tol = TOL["bf16" if torch.bfloat16 in (self.dtype, self.comm_dtype) else "fp32"]
        if not _close(shard, before.float() + chunks[r].float(), tol):
            wrong = shard.clone()
            shard.copy_(before.float() + chunks[r].float())     # repaired: the run goes on
            where = T("rank {r}, bucket {bucket}, micro-step {micro}", r=r, bucket=repr(g.label), micro=micro + 1)
            if before.abs().max() > 0 and _close(wrong, chunks[r], tol):
                fail(T("{where}: grad_shard holds only this micro-step's gradient; the one of the micro-step before "
                       "is gone.\n  hint: accumulate across micro-steps: grad_shard += chunks[rank], not "
                       "grad_shard = ...", where=where))
            for k in range(n):
                if k != r and _close(wrong, before.float() + chunks[k].float(), tol):
                    fail(T("{where}: grad_shard got chunks[{k}], a partial sum that belongs to rank {k}.\n  hint: "
                           "rank r keeps chunks[r], the only chunk that holds the sum over all ranks", where=where,
                           k=k))
            if _close(wrong, before, tol):
                fail(T("{where}: grad_shard did not change.\n  hint: add chunks[rank] into grad_shard in place: "
                       "grad_shard += chunks[rank]", where=where))
            fail(T("{where}: grad_shard is not (its value before) + chunks[{r}].\n  hint: grad_shard += chunks[rank]",
                   where=where, r=r))
        self.track(f"grads {b.index}", None)
        if self.on_group_done is not None:
            self.on_group_done(g)

    def post_backward(self):
        for b in self.buckets:
            g = b.parts[0].group
            seen = log["seen"].get((id(self), g.index), set())
            if len(seen) == len(g.params) and b.index not in self._ready:
                fail(T("all {n} gradients of bucket {bucket} arrived, but add_grad never returned True: the bucket "
                       "waited for the end of backward.\n  hint: return True when len(arrived) == n_params",
                       n=len(g.params), bucket=repr(g.label)))
        log["seen"].clear()
        log["arrived"].clear()
        log["micro"] += 1
        saved["post_backward"](self)

    ReduceScatterInBackward.accept = accept
    ReduceScatterInBackward.issue = issue
    ReduceScatterInBackward.post_backward = post_backward

    def restore():
        for k, v in saved.items():
            setattr(ReduceScatterInBackward, k, v)
    return restore


def _worst(got: dict, ref: dict, tol) -> tuple[str, float, float]:
    atol, rtol = tol
    worst = ("", 0.0, 0.0)
    for k in ref:
        err = (got[k] - ref[k]).abs()
        score = float((err / (atol + rtol * ref[k].abs())).max())
        if score > worst[1]:
            worst = (k, score, float(err.max()))
    return worst


def _train(add_grad: Callable, reduce_bucket: Callable, case, language: str = "en") -> dict:
    with i18n.using(language):          # a rank speaks the language of the notebook that started it
        return _train_here(add_grad, reduce_bucket, case)


def _train_here(add_grad: Callable, reduce_bucket: Callable, case) -> dict:
    """On every rank: train with the learner's pieces plugged in, then with zerolab's own."""
    import zerolab
    from zerolab.models import TinyLM, lm_batches, lm_loss
    from zerolab.zero.reference import train_engine, train_reference

    n, stage, precision, gas, comm = case
    cfg = _config(n, stage, precision, gas, comm)
    batches = lm_batches(STEPS, GLOBAL_BATCH, CHECK_MODEL["seq_len"], CHECK_MODEL["vocab"], seed=5)
    log = {"seen": {}, "arrived": {}, "micro": 0}
    restore = _plug(add_grad, reduce_bucket, log)
    try:
        engine = zerolab.initialize(TinyLM(**CHECK_MODEL), cfg)
        train_engine(engine, batches, lm_loss)
        got = engine.full_params()
        buckets = len(engine.stage.groups)
        rs = sum(1 for rec in engine.ledger.records if rec.op == "reduce_scatter")
        engine.close() if hasattr(engine, "close") else None
    except _Wrong as exc:
        return {"error": str(exc)}
    except Exception as exc:
        text = str(exc)
        if "NotImplementedError" in text or isinstance(exc, NotImplementedError):
            return {"error": text, "not_implemented": isinstance(exc, NotImplementedError)}
        raise
    finally:
        restore()
    own = zerolab.initialize(TinyLM(**CHECK_MODEL), cfg)   # on every rank, error or not:
    train_engine(own, batches, lm_loss)                    # the ranks stay in step
    mine = own.full_params()
    if log.get("error"):
        return {"error": log["error"]}
    out = {"error": None, "buckets": buckets, "reduce_scatters": rs,
           "vs_engine": _worst(got, mine, TOL[precision])}
    if precision == "fp32":
        ref = train_reference(TinyLM(**CHECK_MODEL), cfg, batches, lm_loss)
        out["vs_reference"] = _worst(got, ref, TOL["fp32"])
    return out


def _describe(case) -> str:
    n, stage, precision, gas, comm = case
    text = T("stage {stage}, {n} ranks, {precision}, accumulation {gas}", stage=stage, n=n, precision=precision,
             gas=gas)
    return text + (T(", communication in {comm}", comm=comm) if comm else "")


def check_stage2_buckets(add_grad: Callable, reduce_bucket: Callable, *, cases=CASES) -> None:
    """Train stages 2 and 3 with the learner's ``add_grad`` and ``reduce_bucket`` plugged into
    the engine; raise :class:`ExerciseCheckFailed` naming the mistake, or print what passed."""
    lines = []
    for case in cases:
        what = _describe(case)
        try:
            per_rank = _crew(case[0]).run(_train, add_grad, reduce_bucket, case, i18n.lang())
        except Exception as exc:             # a RankError (a rank raised) or a CrewTimeout
            if "NotImplementedError" in str(exc):
                raise ExerciseCheckFailed(T("add_grad or reduce_bucket raised NotImplementedError: "
                                            "write the parts marked 'Exercise' first.")) from None
            raise rank_failure(exc, what, T("the rank's traceback (zerolab.course.checks.full_tracebacks(), "
                                            "then run again) names the line")) from None
        errors = [res for res in per_rank if res["error"]]
        if errors:
            first = errors[0]
            if first.get("not_implemented") or "NotImplementedError" in first["error"]:
                raise ExerciseCheckFailed(T("add_grad or reduce_bucket raised NotImplementedError: "
                                            "write the parts marked 'Exercise' first."))
            raise ExerciseCheckFailed(T("{what}: {error}", what=what, error=first["error"]))
        for rank, res in enumerate(per_rank):
            for key, against in (("vs_engine", T("zerolab's own engine")),
                                 ("vs_reference", T("single-process training"))):
                if key not in res:
                    continue
                name, score, err = res[key]
                if not score <= 1:
                    raise ExerciseCheckFailed(T(
                        "{what}: trained to different parameters than {against}: on rank {rank}, {name} is off by "
                        "up to {err:.3g}.\n  hint: every bucket must go once, as bucket.to(comm_dtype) / "
                        "world_size, and rank r keeps chunks[r]", what=what, against=against, rank=rank, name=name,
                        err=err))
        res = per_rank[0]
        made = dict(what=what, buckets=res["buckets"], reduce_scatters=res["reduce_scatters"])
        if "vs_reference" in res:
            lines.append(T("{what}: {buckets} buckets, {reduce_scatters} reduce-scatters;\n"
                           "    equal to zerolab's engine and single-process training", **made))
        else:
            lines.append(T("{what}: {buckets} buckets, {reduce_scatters} reduce-scatters;\n"
                           "    equal to zerolab's engine", **made))
    passed(T("your add_grad and reduce_bucket, plugged into zerolab's stages 2 and 3, train like\n"
             "  the engine's own (stage 2 in the paper's pattern: zerolab's ideal_reduce_scatter;\n"
             "  DeepSpeed's stage 2 all-reduces each bucket instead):") + "\n  " + "\n  ".join(lines))
