"""DeepSpeed 0.19.8's collectives, call by call, for the matrix of benchmarks/side_by_side.py.

WHAT DEEPSPEED 0.19.8 DOES (read in its source: file:line under site-packages/deepspeed/; and
measured by this script on CPU/gloo, fp32, ResMLP = 4 Linear(284, 284) of 80,656 + 284 and
3 LayerNorm(284) of 284 + 284, psi = 325,464, reduce_bucket_size 120,000; numbers are per step,
identical in steps 3-5; W = data-parallel world size; "small" = calls of <= 64 bytes)

Stage 0 (the engine; no ZeRO optimizer). engine._backward_epilogue (runtime/engine.py:3165)
calls allreduce_gradients() with its default bucket, MEMORY_OPT_ALLREDUCE_SIZE = 5e8 elements
(engine.py:151, :3073): reduce_bucket_size plays no part at stage 0. buffered_allreduce_fallback
(engine.py:3921) takes the gradients in module.parameters() order (a missing one as zeros), split
by dtype; allreduce_no_retain (engine.py:3828) appends them to a list and flushes after the
append that takes it past 5e8 elements, so below 5e8 parameters: ONE flattened all_reduce of
all gradients (allreduce_bucket, engine.py:3795; averaged after the sum, postscale default).
Clipping: _take_model_step (engine.py:3505) -> clip_grad_norm_ (runtime/utils.py:356): local
norm, times 1/W, one all_reduce SUM of that fp32 0-d tensor (utils.py:418, 4 bytes).
Measured: all_reduce 1 x 325,464; small 1 x 4 B.

Stages 1 and 2 (runtime/zero/stage_1_and_2.py).
* Flat buffer, per param group: the trainable parameters in param-group order (no reordering
  unless round_robin_gradients, no per-parameter padding unless parameter_alignment), the END
  padded with zeros to a multiple of 2*W (nccl_start_alignment_factor 2: :387, :441;
  align_dense_tensors, runtime/utils.py:994). Partition r = [r*P, (r+1)*P), P = padded size / W
  (:586, :2559). A parameter across a boundary belongs to both owners, as two slices
  (initialize_gradient_partition, :1160). ResMLP: 325,464 is a multiple of 4 and of 6, no
  padding; W=2: P = 162,732, lins.2.weight straddles (852 elements on rank 0); W=3: P = 108,488,
  lins.1.weight and lins.2.weight straddle.
* IPG bucket (reduce_independent_p_g_buckets_and_remove_grads, :1414): a gradient for which
  bucket.elements + numel > reduce_bucket_size first flushes the bucket (:1422), then is copied
  into the bucket buffer (contiguous_gradients); a bucket never exceeds reduce_bucket_size except
  a single gradient larger than it, which is reduced alone from its own storage (:1443). The
  epilogue (:1016) flushes the rest. Fed by: stage 2, or stage 1 with overlap_comm, the
  post-accumulate-grad hooks during backward, in hook order (process_gradients, :2290); stage 1
  without overlap_comm, at the end of backward (engine allreduce_gradients -> reduce_gradients,
  :958), in param-group order. Measured (W=2): stage 1: [lins.0.w, lins.0.b] 80,940, [lins.1]
  80,940, [lins.2] 80,940, [lins.3, norms.0-2] 82,644. Stage 2 and stage 1 + overlap (hook order
  lins.3.bias, lins.3.weight, norms.2.weight, norms.2.bias, lins.2.bias, lins.2.weight, ...):
  [lins.3.b, lins.3.w, norms.2, lins.2.b] 81,792, [lins.2.w, norms.1, lins.1.b] 81,508,
  [lins.1.w, norms.0, lins.0.b] 81,508, [lins.0.w] 80,656 (the same at W=3).
* A flush is average_tensor(the filled part of the buffer) (:2229 -> :1590):
  - "reduce_scatter": false -> gradient_reduction_w_predivide (:1485): one all_reduce of the
    bucket tensor itself (numel = bucket.elements), averaged after.
  - "reduce_scatter": true (default) is NOT a reduce-scatter. The bucket is cut into (owner,
    slice) pieces in bucket order (per parameter its slices by offset; a piece merged into the
    previous one when the owner is the same, :1680); the bucket is divided by W (:1688); then
    + "use_multi_rank_bucket_allreduce": true (default): every piece in one group (:1696):
      allreduce_and_scatter (:1545) flattens them (a copy, numel = bucket.elements) into chunks
      flushed after the piece that takes a chunk past reduce_bucket_size (:1568), so ONE
      all_reduce of the whole bucket; each rank then copies back only its own pieces.
    + "use_multi_rank_bucket_allreduce": false: one group per owner, ("reduce", owner) (:1698),
      in the order in which the owners first appear in the bucket; per group allreduce_no_retain
      (:2441) flattens that owner's pieces (bucket order) and calls dist.reduce(flat,
      dst=owner) (:2387) (chunked past reduce_bucket_size only, :2461: never for a normal
      bucket). So per IPG bucket one reduce per distinct owner of its elements, numel = that
      owner's elements in the bucket (two non-adjacent pieces of one owner share one call).
      Measured, stage 2, W=2: 81,792->r1 | 1,136->r0 (852 of lins.2.w + 284 of lins.1.b),
      80,372->r1 | 80,940->r0 (lins.1.w + lins.0.b), 568->r1 | 80,656->r0: 6 reduces. Stage 1,
      W=2: 80,940->r0 | 80,940->r0 | 852->r0, 80,088->r1 | 82,644->r1: 5. Stage 2, W=3:
      81,792->r2 | 55,380->r1, 26,128->r2 | 27,832->r0, 53,108->r1, 568->r2 | 80,656->r0: 7.
  - overlap_comm: the same calls (on CPU there is no side stream); at stage 1 it moves the
    reduction into the backward hooks (hook order, stage 2's buckets).
* Step (:3013): the overflow check runs only if check_grad_overflow (engine.py:2638-2643: fp16
  yes, bf16 per its config, fp32 no): a uint8 all_reduce MAX (:3242, 1 byte). The clipping norm:
  scaled_global_norm (:2943) -> get_grad_norm_direct (:2648) over this rank's partition: one
  fp32 0-d all_reduce SUM per param group (:2693, 4 bytes). After the optimizer:
  all_gather_dp_groups (runtime/utils.py:1019 -> :1008): ONE all_gather_into_tensor of the whole
  padded flat buffer per param group (utils.py:1016; allgather_bucket_size is unused).
* Measured per step, every stage-1/2 config, W=2 and W=3: all_reduce (or reduce) totalling
  325,464 elements, all_gather 1 x 325,464, small 1 x 4 B (the norm); all_reduce calls 4
  (default, allreduce, overlap), reduce calls 5 (s1-owner-reduce), 6 (s2-owner-reduce, W=2),
  7 (s2-owner-reduce, W=3).

Stage 3 (runtime/zero/stage3.py, partition_parameters.py, partitioned_param_coordinator.py).
* Each parameter is partitioned on its own: ceil(n/W) elements per rank, the last one
  zero-padded (partition_parameters.py:1693). Parameters with n <= stage3_param_persistence_
  threshold (default 100,000, zero/config.py:228) persist, gathered (parameter_offload.py:317):
  at the default that is every ResMLP parameter.
* Gradients: IPG bucket in hook order (reduce_independent_p_g_buckets_and_remove_grads :1569,
  __add_grad_to_ipg_bucket :1621); a gradient for which elements + n > reduce_bucket_size and
  the bucket is not empty flushes first (:1583); the epilogue flushes the rest. A flush
  (__reduce_and_partition_ipg_grads, :1648): with "reduce_scatter": false (and contiguous
  gradients), one all_reduce of the contiguous bucket, numel = sum of the UNPADDED n, hook order
  (:1673, __avg_scatter_contiguous_grads :1863 -> :1880). Default: the bucket sorted by ds_id
  (:1677), __avg_scatter_grads (:1912) -> reduce_scatter_coalesced (runtime/comm/
  coalesced_collectives.py:81): each gradient cut in W chunks of ceil(n/W) (:95); the input is,
  for r = 0..W-1, for each gradient in ds_id order, its chunk r padded (uninitialised) to
  ceil(n/W); divided by W (:124); ONE reduce_scatter_tensor SUM (:128) of W * sum ceil(n_i/W)
  elements (a lone gradient divisible by W is used in place). Measured buckets (hook order
  lins.3.w, lins.3.b, norms.2.w, norms.2.b, lins.2.w, ...): [lins.3, norms.2] 81,508,
  [lins.2, norms.1] 81,508, [lins.1, norms.0] 81,508, [lins.0] 80,940; W=3 padded per
  parameter: 81,513 x 3, 80,943 (325,482).
* Parameters: fetch_sub_module (partitioned_param_coordinator.py:310, :353) runs in each
  module's pre-forward and pre-backward. (1) The module's OWN parameters (recursive only for
  z3 leaf modules, :364) that are not available are gathered in ONE call (:381) ->
  all_gather_coalesced (partition_parameters.py:1540): sorted by ds_id (:1584); one parameter:
  _all_gather_sequential (:1373), an all_gather_into_tensor of ceil(n/W)*W; several:
  _all_gather_dtype (:1329), one all_gather_into_tensor per dtype of W * sum ceil(n_i/W) (the
  ranks' partitions concatenated). (2) It waits for them. (3) Then, once the trace is complete,
  it pops the module's own parameters off the trace queue (:422-442) and, if
  stage3_prefetch_bucket_size > 0 (:452), prefetches: budget = min(max_live_parameters - the
  elements available now, prefetch_bucket_size) (:453); it pops trace entries while the
  elements taken < budget (:457: the entry that crosses the budget is taken; entries already
  available, in flight or taken are popped without a gather), counting full n (:476); the
  unavailable ones go in ONE more call (:484). So the current module's fetch and the prefetch
  are two calls, the prefetch issued after the wait. Trace: reset_step runs at every root
  forward (parameter_offload.py:306); step 1 records the module trace (nothing prefetched,
  every parameter released after use and gathered again in backward), step 2 checks it across
  ranks with broadcasts (:260-267) and uses it. A parameter is not released while it is used
  again within stage3_max_reuse_distance (1e9) elements of the trace (__params_to_release, :634):
  here the backward reuses every parameter, so forward releases nothing and backward gathers
  nothing. After the optimizer, _post_step (stage3.py:2835, :2841) gathers the persistent
  parameters: _all_gather (partition_parameters.py:1723) -> _allgather_params_coalesced
  (:2022): one all_gather_into_tensor PER PARAMETER (:2073), ceil(n/W)*W each, in
  named_parameters() order.
* Norm: _get_norm_groups (stage3.py:2573) -> get_grad_norm_direct (:2419): one all_reduce SUM of
  a float64 0-d tensor per sub-group (:2469; fp64 from get_norm_dtype, runtime/zero/utils.py:59;
  one sub-group here): 8 bytes. The overflow all_reduce only with fp16 (:2815).
* Measured (W=2): s3-noprefetch: all_gather 7 (forward: 80,940 lins.0, 568 norms.0, 80,940,
  568, 80,940, 568, 80,940 = 325,464), reduce_scatter 4 (81,508 x 3, 80,940), small 1 x 8 B.
  s3-prefetch: all_gather 1 x 325,464 (the root has no parameters of its own: its fetch is
  empty and its prefetch takes the whole trace), reduce_scatter 4, small 1. s3-allreduce:
  all_gather 1 x 325,464, all_reduce 4 (81,508 x 3, 80,940), small 1. s3-persist-default:
  reduce_scatter 4, then after the step all_gather 14 (80,656 and 284 for lins.0-3, 284 x 6 for
  the norms; 325,464), nothing in forward. W=3, s3-noprefetch: all_gather 7 (80,943, 570, ...;
  325,482), reduce_scatter 4 (81,513 x 3, 80,943; 325,482).

How it is counted: deepspeed.comm's TorchBackend calls torch.distributed.<fn> by attribute at
call time, except all_gather_into_tensor / reduce_scatter_tensor, which it captures when it is
built (comm/torch.py:245-257), and all_gather_base / all_gather_coalesced, which call
torch.distributed.distributed_c10d.<fn> (comm/torch.py:394, :419). So the wrappers go in before
deepspeed is imported, in both namespaces (one wrapper per function; a call made inside another
counted one is not counted again), and a second count is kept one level down, on
ProcessGroup's methods, where every c10d function ends: the two agree call by call in every run
(pg_calls beside calls in the JSON).

Runs under torchrun in a DeepSpeed venv (benchmarks/side_by_side.py --ds-python starts it):

    DS_ACCELERATOR=cpu /path/to/dsvenv/bin/python -m torch.distributed.run --standalone \\
        --nproc_per_node 2 benchmarks/ds_reference/ds_side_by_side.py --out ds.json [--configs a,b]

The matrix (ZERO, MATRIX) and the model/data (ResMLP of benchmarks/step_models.py, 325,464 fp32
parameters; per rank a fixed batch of 8 x 284, loss = mean squared error; Adam lr 1e-3, torch's
implementation on the DeepSpeed side; clipping 1.0) are shared with benchmarks/side_by_side.py,
which imports this file for them (deepspeed is imported only in main()). s3-allreduce is
s3-prefetch (default prefetch) with "reduce_scatter": false.

Rank 0 writes {"meta": {...}, "runs": {"<config>@<W>": {"config", "ds_config", "world",
"same_on_every_rank", "steps": [{"step", "seconds", "loss", "summary", "pg_summary"[, "calls",
"pg_calls"]}]}}}: summary = {"families": {family: {calls, numel, bytes}}, "small": {...}} (calls
over / at most 64 bytes); calls (steady steps only) = every call in order: family, api, numel of
the full tensor, dtype, bytes, phase (forward/backward/step), op, async, index.
"""
from __future__ import annotations

import argparse
import functools
import json
import os
import sys
import time

_HERE = os.path.dirname(os.path.abspath(__file__))

# --------------------------------------------------------------------------- the matrix
BASE = {"train_micro_batch_size_per_gpu": 8, "gradient_accumulation_steps": 1, "gradient_clipping": 1.0,
        "optimizer": {"type": "Adam", "params": {"lr": 1e-3}}, "zero_allow_untested_optimizer": True,
        "steps_per_print": 10 ** 9}
BUCKET = 120_000
_S3 = {"stage": 3, "reduce_bucket_size": BUCKET, "stage3_param_persistence_threshold": 0}
ZERO = {
    "s0-default": {"stage": 0, "reduce_bucket_size": BUCKET},
    **{f"s{s}-{name}": {"stage": s, "reduce_bucket_size": BUCKET, **extra}
       for s in (1, 2)
       for name, extra in (("default", {}), ("owner-reduce", {"use_multi_rank_bucket_allreduce": False}),
                           ("allreduce", {"reduce_scatter": False}), ("overlap", {"overlap_comm": True}))},
    "s3-noprefetch": {**_S3, "stage3_prefetch_bucket_size": 0},
    "s3-prefetch": dict(_S3),
    "s3-allreduce": {**_S3, "reduce_scatter": False},
    "s3-persist-default": {"stage": 3, "reduce_bucket_size": BUCKET},
    # issue 33: where stage 3's schedule is DeepSpeed's per parameter
    "s3-prefetch-reuse0": {**_S3, "stage3_max_reuse_distance": 0},
    "s3-prefetch4096-reuse0": {**_S3, "stage3_prefetch_bucket_size": 4096, "stage3_max_reuse_distance": 0},
    "s3-hpz2": {**_S3, "zero_hpz_partition_size": 2},
    "s3-tied-noprefetch": {**_S3, "stage3_prefetch_bucket_size": 0},
    "s3-tied-default": {"stage": 3, "reduce_bucket_size": BUCKET, "stage3_param_persistence_threshold": 0},
    "s3-ckpt-noprefetch": {**_S3, "stage3_prefetch_bucket_size": 0},
    "s3-ckpt-prefetch": dict(_S3),
}
# the model of each config (benchmarks/step_models.py SIDE_BY_SIDE_MODELS; default "resmlp")
MODEL = {"s3-tied-noprefetch": "tied", "s3-tied-default": "tied", "s3-ckpt-noprefetch": "ckpt",
         "s3-ckpt-prefetch": "ckpt"}
# the runs of the stored reference: (config name, world size); at 3 ranks the partitions and the
# stage-3 padding are uneven
MATRIX = ([(name, 2) for name in ZERO if name != "s3-hpz2"]
          + [(name, 3) for name in ("s2-default", "s2-owner-reduce", "s3-noprefetch", "s3-prefetch",
                                    "s3-persist-default", "s3-prefetch-reuse0", "s3-prefetch4096-reuse0",
                                    "s3-tied-noprefetch", "s3-tied-default", "s3-ckpt-prefetch")]
          + [("s3-hpz2", 4)])
STEPS = 5            # steps run per config
STEADY = (3, 4, 5)   # the steps recorded call by call (1-based)
SMALL_BYTES = 64     # calls of at most this many bytes go to the "small" bucket


def config(name: str) -> dict:
    """The DeepSpeed config of a matrix entry (zerolab reads the same dict)."""
    return {**BASE, "zero_optimization": dict(ZERO[name])}


def key(name: str, world: int) -> str:
    return f"{name}@{world}"


# --------------------------------------------------------------------------- recording
# The counting wrappers live in the package (zerolab/tools/compare_ds.py, which `zerolab compare` runs in a
# DeepSpeed venv too); loaded by path, it imports nothing of zerolab.
def _load_recorder():
    import importlib.util
    path = os.path.join(os.path.dirname(os.path.dirname(_HERE)), "zerolab", "tools", "compare_ds.py")
    spec = importlib.util.spec_from_file_location("zerolab_compare_ds", path)
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


_REC = _load_recorder()
STATE, FAMILY, PG_FAMILY = _REC.STATE, _REC.FAMILY, _REC.PG_FAMILY
_install, dump_json = _REC.install, _REC.dump_json


def summarize(calls: list[dict], small: int = SMALL_BYTES) -> dict:
    return _REC.summarize(calls, small)


# --------------------------------------------------------------------------- one run
def run_config(name: str, world: int, steps: int = STEPS) -> dict:
    import torch
    import deepspeed
    import torch.distributed as dist
    sys.path.insert(0, os.path.dirname(_HERE))
    from step_models import side_by_side_batch

    cfg = config(name)
    ds_cfg = json.loads(json.dumps(cfg))
    ds_cfg["optimizer"]["params"]["torch_adam"] = True     # torch's Adam: no op to build on CPU
    rank = dist.get_rank()
    model, x, loss_fn = side_by_side_batch(MODEL.get(name, "resmlp"), rank)
    engine, *_ = deepspeed.initialize(model=model, model_parameters=model.parameters(), config=ds_cfg)
    per_step = []
    for step in range(1, steps + 1):
        STATE["calls"], STATE["pg"] = [], []
        dist.barrier()                       # (not recorded: recording is off)
        STATE["on"] = True
        t0 = time.perf_counter()
        STATE["phase"] = "forward"
        loss = loss_fn(engine(x))
        STATE["phase"] = "backward"
        engine.backward(loss)
        STATE["phase"] = "step"
        engine.step()
        STATE["on"] = False
        seconds = time.perf_counter() - t0
        calls, pg = STATE["calls"], STATE["pg"]
        for i, c in enumerate(calls):
            c["index"] = i
        rec = {"step": step, "seconds": round(seconds, 4), "loss": float(loss.detach()),
               "summary": summarize(calls), "pg_summary": summarize(pg)}
        if step in STEADY:
            rec["calls"] = calls
            rec["pg_calls"] = pg
        per_step.append(rec)
    # the same collectives on every rank? (compare each step's call list, family/numel/dtype)
    sig = [[(c["family"], c["numel"], c["dtype"]) for c in s.get("calls", [])] for s in per_step]
    sigs = [None] * world
    dist.all_gather_object(sigs, sig)
    destroy = getattr(engine, "destroy", None)
    if callable(destroy):
        try:
            destroy()
        except Exception:     # noqa: BLE001  (an engine that cannot tear down is no reason to stop)
            pass
    return {"config": cfg, "ds_config": ds_cfg, "world": world, "steps": per_step,
            "same_on_every_rank": all(s == sigs[0] for s in sigs)}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--configs", default=None, help="comma-separated names of ZERO (default: every one)")
    ap.add_argument("--steps", type=int, default=STEPS)
    ap.add_argument("--out", required=True, help="JSON to write (rank 0)")
    a = ap.parse_args()
    os.environ.setdefault("DS_ACCELERATOR", "cpu")
    _install()                               # before deepspeed is imported
    import torch
    import deepspeed
    import torch.distributed as dist
    deepspeed.init_distributed(dist_backend="gloo")
    world = dist.get_world_size()
    names = a.configs.split(",") if a.configs else list(ZERO)
    runs = {}
    for name in names:
        runs[key(name, world)] = run_config(name, world, a.steps)
    if dist.get_rank() == 0:
        meta = {"deepspeed": deepspeed.__version__, "torch": torch.__version__, "backend": dist.get_backend(),
                "model": "ResMLP (benchmarks/step_models.py), 325,464 fp32 parameters",
                "batch": "8 x 284 per rank, MSE loss", "steps": a.steps, "steady_steps": list(STEADY),
                "small_bytes": SMALL_BYTES, "date": time.strftime("%Y-%m-%d")}
        dump_json({"meta": meta, "runs": runs}, a.out)
    dist.barrier()
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
