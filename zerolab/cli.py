"""The ``zerolab`` command line: what a DeepSpeed config means and what it will cost.

    zerolab explain ds_config.json --world 8      what any DeepSpeed 0.19.8 config asks for, in
        [--params 7e9]                            plain words: what zerolab does with each key,
                                                  which keys have no effect here and why, which
                                                  DeepSpeed features zerolab does not implement
                                                  (and what DeepSpeed does with them), and with
                                                  --params the per-GPU model-state memory per stage.
                                                  Exit status 2 on a real error (typo, bad value,
                                                  batch arithmetic), after what could be explained
    zerolab course [--no-browser]                 open the course in JupyterLab: a working copy in
                                                  course/ (the stored notebooks stay as git has them),
                                                  chapter 0 first, JupyterLab's news pop-up off
    zerolab estimate --params 7B --gpus 8         model-state memory per GPU for each ZeRO stage
                                                  (ZeRO paper formulas), plus DeepSpeed's own
                                                  estimator tables for ZeRO-2 and ZeRO-3
    zerolab simulate --params 7B --gpus 8         memory per GPU and step time per stage, with
                                                  offload (--gpus: GPUs in total, in every command)
    zerolab env                                   torch, backends and devices on this machine
    zerolab train --config ds.json --nproc 2      train a small model (TinyLM, generated data) on N
        [--steps 20]                              ranks from a DeepSpeed config: progress bar, then
                                                  loss, memory per giant, traffic, time, a picture;
                                                  also under torchrun (zerolab/tools/train.py)
    zerolab report [--preflight]                  this machine as the course sees it (one screen);
                                                  --preflight: the learner's check, READY or what
                                                  to fix (exit status 1 when not ready)
    zerolab progress [--json] [--name NAME]       which exercise checks passed on this machine
                                                  (~/.zerolab/progress.json or $ZEROLAB_PROGRESS);
                                                  --json to send to an instructor
    zerolab <command> ... --lang zh               answer in Chinese (every command but env; also
                                                  $ZEROLAB_LANG=zh, or a zh_* locale:
                                                  LANG=zh_CN.UTF-8); zerolab/i18n/language.py

A parameter count is a number (7e9, 7000000000) or one with a suffix: 350M, 1.3b, 7B, 1T.
"""
from __future__ import annotations

import argparse
import sys

from .config.stages import GRADS, PARAMS, SHARDED, shards
from .i18n import add_lang_argument, catalogue, cli_lang, set_lang, width
from .memory import Place, format_bytes, model_state_bytes

T = catalogue("cli")      # the commands' own lines in the edition's language (zerolab/i18n/messages_zh.py)


_SUFFIX = {"k": 1e3, "m": 1e6, "b": 1e9, "g": 1e9, "t": 1e12}


def count(text: str) -> float:
    """A parameter count: ``7e9``, ``7000000000``, ``7_000_000_000``, ``7,000,000,000``, or with a
    suffix ``K``/``M``/``B`` (or ``G``)/``T``, either case: ``350M``, ``1.3b``, ``7B``."""
    raw = str(text).strip().replace(",", "").replace("_", "")
    scale = _SUFFIX.get(raw[-1:].lower(), 1.0) if raw else 1.0
    number = raw[:-1] if scale != 1.0 else raw
    try:
        value = float(number) * scale
    except ValueError:
        raise argparse.ArgumentTypeError(T("not a parameter count: {text!r} (e.g. 7e9, 7B, 1.3b, 350M)",
                                           text=text)) from None
    if not value >= 0 or value == float("inf"):
        raise argparse.ArgumentTypeError(T("not a parameter count: {text!r} (e.g. 7e9, 7B, 1.3b, 350M)",
                                           text=text))
    return value


def _bytes_per_param(precision: str) -> tuple[int, int, int]:
    return (4, 4, 8) if precision == "fp32" else (2, 2, 12)


def _stage_table(psi: float, world: int, precision: str, mark: int | None = None) -> str:
    pb, gb, ob = _bytes_per_param(precision)
    lines = [T("model states per GPU, Psi = {psi:,.0f} parameters, {world} GPU(s), {precision} + Adam ({pb} + "
               "{gb} + {ob} bytes per parameter):", psi=psi, world=world, precision=precision, pb=pb, gb=gb, ob=ob),
             "  stage   " + "".join(_right(T(name), w) for name, w in (
                 ("params", 14), ("grads", 14), ("optimizer", 14), ("total", 14), ("total", 12)))]
    for stage in SHARDED:                  # every stage, in the table's order (0-3)
        m = model_state_bytes(psi, stage, world, param_bytes=pb, grad_bytes=gb, optimizer_bytes=ob)
        lines.append(f"  {stage:<8}" + "".join(f"{format_bytes(m[k], 'GB'):>14}"
                                              for k in ("params", "grads", "optimizer_states", "total"))
                     + f"{format_bytes(m['total'], 'GiB'):>12}" + (T("   <- this config") if stage == mark else ""))
    lines.append(T("  (GB = 1e9 bytes, GiB = 2^30 bytes; activations and buffers come on top)"))
    return "\n".join(lines)


def _right(text: str, columns: int) -> str:
    """``text`` right-aligned in ``columns`` terminal columns (a CJK character takes two)."""
    return " " * max(columns - width(text), 0) + text


def _offload_split(psi: float, world: int, precision: str, cfg) -> str | None:
    """Where DeepSpeed would keep the model states with this config's offload (paper accounting)."""
    opt, par = Place.of(cfg.zero.offload_optimizer.device), Place.of(cfg.zero.offload_param.device)
    if not opt.offloaded and not par.offloaded:
        return None
    pb, gb, ob = _bytes_per_param(precision)
    m = model_state_bytes(psi, cfg.zero.stage, world, param_bytes=pb, grad_bytes=gb, optimizer_bytes=ob)
    gpu, off = dict(m), {}
    gpu.pop("total")
    if opt.offloaded:   # ZeRO-Offload: the optimizer states (and, where sharded: stages 2-3, fp32 grads) leave the GPU
        off["optimizer_states"] = gpu.pop("optimizer_states")
        if shards(cfg.zero.stage, GRADS):
            off["grads"] = 4 * gpu.pop("grads") / gb      # kept in fp32 on the host
    if par.offloaded and shards(cfg.zero.stage, PARAMS):
        off["params"] = gpu.pop("params")
    host = {k: v for k, v in off.items() if (par if k == "params" else opt) is Place.HOST or k == "grads"}
    nvme = {k: v for k, v in off.items() if k not in host}
    names = {"params": T("params"), "grads": T("grads"), "optimizer_states": T("optimizer states")}
    show = lambda d: " + ".join(f"{names[k]} {format_bytes(v, 'GB')}" for k, v in d.items()) or T("none")  # noqa: E731
    total = lambda d: format_bytes(sum(d.values()), "GB")                                                 # noqa: E731
    lines = [T("with this config's offload, per rank at stage {stage} (zerolab runs it; DeepSpeed keeps the same):",
               stage=cfg.zero.stage),
             T("  on the GPU: {what} ({total})", what=show(gpu), total=total(gpu)),
             T("  in host (CPU) memory: {what} ({total})", what=show(host), total=total(host))]
    if nvme:
        lines.append(T("  on NVMe: {what} ({total})", what=show(nvme), total=total(nvme)))
    lines.append(T("  (the paper's accounting of model states; gathered layers, buckets and activations stay on the "
                   "GPU on top; DeepSpeed's own estimator: zerolab estimate --largest-layer ...)"))
    return "\n".join(lines)


def _show(value) -> str:
    from .config.explain import _show as show
    return value if isinstance(value, str) else show(value)


def cmd_explain(a) -> int:
    from .config import ConfigError
    from .config.keys import T as config_text
    from .config.explain import explain_config
    try:
        ex = explain_config(a.config, a.world)
    except ConfigError as e:
        print(T("{command}: {error}", command="zerolab explain", error=e), file=sys.stderr)
        return 2
    cfg = ex.config
    print(cfg.describe())
    if ex.not_implemented:
        print()
        for r in ex.not_implemented:
            print(T("not implemented in zerolab: {path} = {value} ({what}); zerolab.initialize refuses it",
                    path=r.path, value=_show(r.value), what=config_text.text(r.what)))
    if a.params:
        prec = "mixed" if cfg.fp16.enabled or cfg.bf16.enabled else "fp32"
        print()
        print(_stage_table(a.params, a.world, prec, mark=cfg.zero.stage))
        split = _offload_split(a.params, a.world, prec, cfg)
        if split:
            print(split)
    if ex.errors:
        n = len(ex.errors)
        head = T("zerolab explain: {n} errors in {path} (typos, bad values, batch arithmetic; fix them before "
                 "training):", n=n, path=a.config) if n > 1 else T(
                 "zerolab explain: 1 error in {path} (typos, bad values, batch arithmetic; fix it before training):",
                 path=a.config)
        print(head + "\n" + "\n".join(f"  - {e}" for e in ex.errors), file=sys.stderr)
        return 2
    return 0


def _per_node(a) -> int | None:
    """GPUs per node for ``zerolab estimate``: --gpus-per-node, else --gpus (the total, as in
    simulate; with --nodes > 1 still GPUs per node, its old meaning, with a note); None: an error."""
    if a.gpus_per_node is not None:
        if a.gpus is not None and a.gpus != a.gpus_per_node * a.nodes:
            print(T("zerolab estimate: --gpus {gpus} (in total) is not --gpus-per-node {per} x --nodes {nodes}",
                    gpus=a.gpus, per=a.gpus_per_node, nodes=a.nodes), file=sys.stderr)
            return None
        return a.gpus_per_node
    if a.gpus is None:
        return 1
    if a.nodes > 1:
        print(T("zerolab estimate: --gpus {gpus} with --nodes {nodes} is read as GPUs per node ({total} in total), "
                "as before;\n  that meaning is deprecated: say --gpus-per-node {gpus} (DeepSpeed's "
                "num_gpus_per_node),\n  or --gpus {total} --nodes {nodes}: --gpus is the total, as in zerolab simulate",
                gpus=a.gpus, nodes=a.nodes, total=a.gpus * a.nodes), file=sys.stderr)
        return a.gpus
    return a.gpus


def cmd_estimate(a) -> int:
    from .tools import estimate
    per_node = _per_node(a)
    if per_node is None:
        return 2
    a.gpus = per_node
    print(_stage_table(a.params, a.gpus * a.nodes, a.precision))
    print()
    print(T("== ZeRO stage 2, DeepSpeed's own estimator (estimate_zero2_model_states_mem_needs_all_cold, "
            "reproduced).\n   Its GPU column counts 2Ψ + 18Ψ/N, 4Ψ/N above the stage-2 row: DeepSpeed's "
            "step also holds\n   an fp32 copy of the gradient shard, and the estimator counts it; "
            "it assumes mixed precision."))
    estimate.estimate_zero2_model_states_mem_needs_all_cold(
        int(a.params), num_gpus_per_node=a.gpus, num_nodes=a.nodes)
    if a.largest_layer:
        print()
        print(T("== ZeRO stage 3, DeepSpeed's own estimator (estimate_zero3_model_states_mem_needs_all_cold, "
                "reproduced)."))
        estimate.estimate_zero3_model_states_mem_needs_all_cold(
            int(a.params), int(a.largest_layer), num_gpus_per_node=a.gpus, num_nodes=a.nodes)
    return 0


def cmd_env(a) -> int:
    import torch
    import torch.distributed as dist
    from . import __version__
    print(f"zerolab {__version__}, torch {torch.__version__}, python {sys.version.split()[0]}")
    print(f"gloo available: {dist.is_gloo_available()}, nccl available: {dist.is_nccl_available()}")
    n = torch.cuda.device_count() if torch.cuda.is_available() else 0
    print(f"CUDA GPUs: {n}" + "".join(f"\n  cuda:{i} {torch.cuda.get_device_name(i)}" for i in range(n)))
    print(f"a crew of N ranks uses: {'NCCL, one GPU per rank (N <= %d)' % n if n else 'gloo on CPU'}")
    return 0


def cmd_report(a) -> int:
    from .tools import report
    if a.preflight:
        need = report.COURSE_NEEDS_GB if a.need_gb is None else a.need_gb
        return 0 if report.preflight(ranks=a.ranks, need_gb=need) else 1
    print(report.report_text())
    return 0


def cmd_consolidate(a) -> int:
    from .checkpoint import CheckpointError, consolidate
    try:
        sd = consolidate(a.checkpoint, a.out, tag=a.tag)
    except CheckpointError as e:
        print(T("{command}: {error}", command="zerolab consolidate", error=e), file=sys.stderr)
        return 2
    n = sum(t.numel() for t in sd.values())
    print(T("wrote {path}: {tensors} tensors, {n:,} elements (fp32 parameters and the model's buffers); load it "
            "with safetensors.torch.load_file and model.load_state_dict", path=a.out, tensors=len(sd), n=n))
    return 0


def cmd_simulate(a) -> int:
    from .tools import simulate
    if a.calibrate:
        rows = simulate.calibrate(a.nproc)
        print(T("the simulator against {n} real ranks here (a bf16 MLP of 8 Linear(256, 256), stages 0-3):",
                n=a.nproc))
        print(simulate.format_calibration(rows))
        return 0
    if a.params is None:
        print(T("zerolab simulate: --params required (or --calibrate)"), file=sys.stderr)
        return 2
    if a.layers is None or a.hidden is None:
        layers, hidden, like = simulate.default_shape(a.params, a.layers, a.hidden)
        print(T("--layers/--hidden not given: {layers} layers, hidden {hidden} ({like}); they set the activations "
                "and stage 3's\n  gathered layers and calls, never the model states (those follow --params)",
                layers=layers, hidden=hidden, like=T.text(like)))
        a.layers, a.hidden = layers, hidden
    nodes = dict(simulate.CLUSTERS[a.cluster]) if a.cluster else {}
    for key, value in (("gpu", a.gpu), ("link", a.link), ("inter_link", a.inter_link),
                       ("ranks_per_node", a.ranks_per_node)):
        if value is not None:
            nodes[key] = value
    if "inter_link" in nodes and not nodes.get("ranks_per_node"):
        print(T("zerolab simulate: --inter-link needs --ranks-per-node (how many GPUs share a node's link)"),
              file=sys.stderr)
        return 2
    nodes.setdefault("gpu", "a100-80gb")
    nodes.setdefault("link", "nvlink-a100")
    if nodes["link"] not in simulate.LINKS:
        from .tools.bench import Fit
        nodes["link"] = Fit.load(nodes["link"])
    zeropp = {}
    if a.zeropp:
        k = nodes.get("ranks_per_node") or a.gpus
        zeropp = dict(quantized_weights=True, hpz_partition_size=k, quantized_gradients=True)
    try:
        rows = simulate.table(a.params, a.layers, a.hidden, a.seq, a.micro_batch, a.gpus, zeropp=zeropp,
                              grad_accum=a.grad_accum, checkpointing=not a.no_checkpointing,
                              host_bytes=a.host_gb * 1e9 if a.host_gb else None, **nodes)
    except ValueError as exc:
        print(T("{command}: {error}", command="zerolab simulate", error=exc), file=sys.stderr)
        return 2
    where = f"{a.link or nodes['link']}" if "inter_link" not in nodes else T(
        "{link} inside nodes of {k}, {inter} between them", link=nodes["link"], k=nodes["ranks_per_node"],
        inter=nodes["inter_link"])
    print(T("{params:.3g} parameters, {layers} layers, hidden {hidden}, sequence {seq}, micro-batch {micro} x "
            "{accum} accumulation, on {gpus} x {gpu} over {where}", params=a.params, layers=a.layers,
            hidden=a.hidden, seq=a.seq, micro=a.micro_batch, accum=a.grad_accum, gpus=a.gpus, gpu=nodes["gpu"],
            where=where))
    print(simulate.format_table(rows, nodes["gpu"]))
    if "inter_link" in nodes or a.zeropp:
        for r in rows[3:4] + rows[6:]:
            name = "stage 3" + (f" + {r.zeropp}" if r.zeropp else "")
            print(T("{name}: {gb:,.1f} GB leave each node per step; hidden behind compute from {tokens:,.0f} "
                    "tokens per GPU", name=name, gb=r.link_bytes["inter"] / 1e9, tokens=r.hide_tokens))
    return 0


def simulate_clusters() -> list[str]:
    from .tools.simulate import CLUSTERS
    return list(CLUSTERS)


def cmd_bench(a) -> int:
    from .tools import bench
    fit = bench.run(a.nproc)
    print(fit.describe())
    if a.out:
        fit.save(a.out)
        print(T("saved {path}", path=a.out))
    return 0


def cmd_compare(a) -> int:
    from .tools.compare import main as compare
    return compare(a.config, world=a.world, steps=a.steps, model=a.model, ds_python=a.ds_python)


def cmd_course(a) -> int:
    from .course import workspace as course
    extra = list(a.extra) + ["--no-browser"] * a.no_browser + ["--allow-root"] * a.allow_root + (
        [f"--port={a.port}"] if a.port else [])
    return course.main(a.dir, a.lang or cli_lang(None), extra, dry_run=a.dry_run)


def cmd_progress(a) -> int:
    from .course import progress
    return progress.main(as_json=a.json, name=a.name, every_clone=a.all)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="zerolab", description=__doc__.replace("``", ""),
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    sub = ap.add_subparsers(dest="cmd", required=True)
    o = sub.add_parser("course", help="open the course in JupyterLab, in a working copy (chapter 0 first)",
                       description="Copies the course (notebooks, exercises, solutions) into a working folder "
                                   "once, never over your edits, and opens JupyterLab there on chapter 0; any other "
                                   "option is passed to jupyter lab (e.g. --port 8890, --ServerApp.ip=0.0.0.0).")
    o.add_argument("--dir", default=None, help="the working folder (default: course/ at the clone's root)")
    o.add_argument("--no-browser", action="store_true", help="open no browser; open the printed URL yourself "
                   "(a remote machine: through an SSH tunnel)")
    o.add_argument("--allow-root", action="store_true", help="run as root (in a container, say)")
    o.add_argument("--port", type=int, default=None, help="the server's port (default: JupyterLab's, 8888)")
    o.add_argument("--dry-run", action="store_true", help="copy and set up, print the jupyter lab command, "
                   "start nothing")
    add_lang_argument(o, help="the edition to open first (default: $ZEROLAB_LANG, else the locale)")
    o.set_defaults(fn=cmd_course)
    e = sub.add_parser("explain", help="what a DeepSpeed config means (any DeepSpeed 0.19.8 config)")
    e.add_argument("config", help="path to a DeepSpeed JSON config")
    e.add_argument("--world", type=int, default=1, help="data-parallel ranks (GPUs) it will run on")
    e.add_argument("--params", type=count, default=0, help="model size (7e9, 7B, 350M), to print memory per stage")
    e.set_defaults(fn=cmd_explain)
    s = sub.add_parser("estimate", help="model-state memory per GPU for each ZeRO stage")
    s.add_argument("--params", type=count, required=True, help="parameter count: 7e9, 7B, 1.3b, 350M")
    s.add_argument("--gpus", type=int, default=None, help="GPUs in total, as in zerolab simulate (default 1; "
                   "with --nodes > 1 it still means GPUs per node, its old meaning, deprecated, with a note)")
    s.add_argument("--gpus-per-node", type=int, default=None, help="GPUs per node (DeepSpeed's num_gpus_per_node)")
    s.add_argument("--nodes", type=int, default=1, help="nodes (default 1)")
    s.add_argument("--precision", choices=("mixed", "fp32"), default="mixed",
                   help="mixed: 2 + 2 + 12 bytes per parameter (default); fp32: 4 + 4 + 8")
    s.add_argument("--largest-layer", type=count, default=0,
                   help="largest layer's parameters (adds DeepSpeed's ZeRO-3 table)")
    s.set_defaults(fn=cmd_estimate)
    c = sub.add_parser("consolidate", help="one fp32 state dict (safetensors) from a zerolab checkpoint")
    c.add_argument("checkpoint", help="the save_dir given to save_checkpoint (uses its 'latest'), or a tag's folder")
    c.add_argument("out", help="the .safetensors file to write")
    c.add_argument("--tag", default=None, help="a tag other than the latest")
    c.set_defaults(fn=cmd_consolidate)
    m = sub.add_parser("simulate", help="memory per GPU and step time of a model on N GPUs, per stage")
    m.add_argument("--params", type=count, default=None, help="parameters: 7e9, 7B, 1.3b, 350M (required)")
    m.add_argument("--layers", type=int, default=None, help="transformer layers (default: those of the GPT-3/Llama "
                   "model nearest --params, e.g. 32 at 7B)")
    m.add_argument("--hidden", type=int, default=None, help="hidden size (default: from --params and --layers, "
                   "Psi = 12 x layers x hidden^2, e.g. 4096 at 7B)")
    m.add_argument("--seq", type=int, default=2048, help="sequence length in tokens (default 2048)")
    m.add_argument("--micro-batch", type=int, default=1, help="sequences per GPU per forward (default 1)")
    m.add_argument("--grad-accum", type=int, default=1, help="gradient accumulation steps (default 1)")
    m.add_argument("--gpus", type=int, default=8, help="GPUs in total, the data-parallel ranks (default 8); "
                   "per node: --ranks-per-node")
    m.add_argument("--gpu", default=None, help="one of: a100-40gb, a100-80gb (default), h100-80gb, h200-141gb")
    m.add_argument("--link", default=None,
                   help="nvlink-a100 (default), nvlink-h100, pcie4, ib-hdr, ethernet-100g, ib-hdr-8x, ib-ndr-8x, "
                        "ib-ndr-1x, or a zerolab bench JSON fit; with --inter-link: the link inside a node")
    m.add_argument("--inter-link", default=None, help="the link between nodes (needs --ranks-per-node): "
                   "a collective spanning nodes runs at the slower link")
    m.add_argument("--ranks-per-node", "--gpus-per-node", dest="ranks_per_node", type=int, default=None,
                   help="GPUs per node (as zerolab estimate's --gpus-per-node)")
    m.add_argument("--cluster", default=None, choices=sorted(simulate_clusters()),
                   help="a named cluster (GPU, links, GPUs per node); --gpu/--link/... override it")
    m.add_argument("--zeropp", action="store_true",
                   help="add a row: stage 3 with ZeRO++ (qwZ, hpZ of one node, qgZ)")
    m.add_argument("--no-checkpointing", action="store_true", help="activations kept, not recomputed")
    m.add_argument("--host-gb", type=float, default=None, help="host memory of the whole job (GB), to check offload")
    m.add_argument("--calibrate", action="store_true",
                   help="hold the simulator against real ranks here: bytes, calls, time (and the comm_factor)")
    m.add_argument("--nproc", type=int, default=2, help="ranks for --calibrate")
    m.set_defaults(fn=cmd_simulate)
    b = sub.add_parser("bench", help="fit T = alpha + S/beta for each collective on this machine")
    b.add_argument("--nproc", type=int, default=2, help="ranks to measure on")
    b.add_argument("--out", default=None, help="save the fit as JSON (zerolab.tools.bench.Fit.load reads it)")
    b.set_defaults(fn=cmd_bench)
    v = sub.add_parser("env", help="torch, backends and devices here")
    v.set_defaults(fn=cmd_env)
    from .tools import train as train_cmd
    t = sub.add_parser("train", help="train a small model on N ranks from a DeepSpeed config")
    train_cmd.add_arguments(t)
    t.set_defaults(fn=train_cmd.run_from_args)
    r = sub.add_parser("report", help="this machine as the course sees it; --preflight: ready for the course?")
    r.add_argument("--preflight", action="store_true", help="the learner's one-time check: READY or what to fix")
    r.add_argument("--ranks", type=int, default=4, help="ranks of the test crew (preflight)")
    r.add_argument("--need-gb", type=float, default=None,
                   help="free memory the chapters need, in GB (preflight; default: the measured need)")
    r.set_defaults(fn=cmd_report)
    cp = sub.add_parser("compare", help="run a DeepSpeed config on real DeepSpeed and on zerolab (CPU ranks), "
                                         "calls and bytes side by side")
    cp.add_argument("config", help="a DeepSpeed JSON config")
    cp.add_argument("--world", type=int, default=2, help="ranks (default 2)")
    cp.add_argument("--steps", type=int, default=5, help="steps to run; 3 onwards are compared (default 5)")
    cp.add_argument("--model", default="mlp", choices=("mlp", "tied", "gpt2", "llama"),
                    help="mlp: a 325k-parameter residual MLP; tied: a small LM with a tied embedding, "
                         "nn.MultiheadAttention and an external weight; gpt2, llama: Hugging Face "
                         "transformers from small configs (transformers needed on both sides)")
    cp.add_argument("--ds-python", default=None, help="the python of a venv with deepspeed==0.19.8 "
                                                      "(default: this one, if it has deepspeed)")
    cp.set_defaults(fn=cmd_compare)
    g = sub.add_parser("progress", help="which exercises are done (the checks record passes on this machine)")
    g.add_argument("--json", action="store_true", help="print JSON (to send to the instructor, if you choose)")
    g.add_argument("--all", action="store_true", help="count the checks run from every clone on this machine, not "
                   "only this one's")
    g.add_argument("--name", default=None, help="your name, put in the JSON")
    g.set_defaults(fn=cmd_progress)
    for name, command in sub.choices.items():       # every command answers in either language (env: facts only)
        if name not in ("course", "env", "train"):  # course and train declare theirs with their own meaning/module
            add_lang_argument(command)
    args = sys.argv[1:] if argv is None else list(argv)
    if args[:1] == ["course"]:              # jupyter lab's own options pass through
        a, a.extra = ap.parse_known_args(args)
    else:
        a = ap.parse_args(args)
    set_lang(cli_lang(getattr(a, "lang", None)))     # the answer's language: --lang, $ZEROLAB_LANG, the locale
    return a.fn(a)


if __name__ == "__main__":
    raise SystemExit(main())
