"""Saving a checkpoint through an engine: every rank writes its part into a temporary folder that is
renamed into place only when all ranks have finished (the layout, and why, in
:mod:`zerolab.checkpoint.checkpoint`'s docstring). Loading it back is :mod:`zerolab.checkpoint.load`."""
from __future__ import annotations

import json
import os
import shutil
import socket
import tempfile
from pathlib import Path

import torch
import torch.distributed as dist

from .read import FORMAT, CheckpointError, sha256_of
from .shards import _drop_secondary, _owned_range
from ..offload import disk
from ..i18n import catalogue
from ..memory import tensor_bytes

T = catalogue("around")   # the messages in the edition's language (zerolab/i18n/messages_zh.py)

__all__ = ["save_checkpoint"]


def save_checkpoint(engine, save_dir, tag=None, client_state=None) -> str:
    """Write this engine's state under ``save_dir/tag`` (every rank must call it). Returns the
    checkpoint's folder.

    The ranks agree after each part that can fail on one of them (:meth:`Comm.agree`): rank 0
    making the temporary folder, every rank writing its file, rank 0 writing the rest and
    renaming it into place. If any rank's part fails (a read-only folder, a full disk, a
    permission, any exception), every rank raises :class:`CheckpointError` naming that rank,
    the file and the cause, within seconds; the temporary folder is removed and the previous
    checkpoint, and ``latest``, stay as they were."""
    comm, stage = engine.comm, engine.stage
    tag = str(tag) if tag is not None else f"global_step{engine.global_steps}"
    if not tag or "/" in tag or tag in (".", "..") or tag == "latest":
        raise ValueError(T("invalid checkpoint tag {tag}", tag=repr(tag)))
    _check_client_state(client_state)
    save_dir = Path(save_dir)
    final = save_dir / tag

    # 1. rank 0 makes the temporary folder; everyone writes into it (a shared file system)
    tmp_name, error = [None], None
    if comm.rank == 0:
        try:
            save_dir.mkdir(parents=True, exist_ok=True)
            _sweep(save_dir)
            tmp_name[0] = tempfile.mkdtemp(prefix=f".{tag}.tmp-{_me()}-", dir=save_dir)
        except Exception as e:                                   # noqa: BLE001 (told to every rank)
            error = _write_failed(e, save_dir, save_dir)
    _settle(engine, error, save_dir, None, tag)
    if comm.world_size > 1:
        dist.broadcast_object_list(tmp_name, src=0)
    tmp = Path(tmp_name[0])

    # 2. every rank writes the part of the state it owns
    _drop_secondary(stage)        # hpZ: as DeepSpeed's checkpoint_event_epilogue (never saved)
    mine, digest, error, need = tmp / f"rank_{comm.rank}.pt", None, None, None
    try:
        masters, states = {}, {}
        for g in stage.groups:
            rng = _owned_range(g, stage)
            if rng is None:
                continue
            masters[g.index] = stage.home.group_master(g.index).detach().float().cpu().clone()
            st = stage.home.group_state(g.index)      # joined across sub-group tiles, read from NVMe
            states[g.index] = {k: (v.detach().cpu().clone() if torch.is_tensor(v) else v) for k, v in st.items()
                               if v is not None}
        need = tensor_bytes([masters, states])
        _save_torch({"rank": comm.rank, "masters": masters, "optimizer_states": states}, mine)
        digest = sha256_of(mine)
    except Exception as e:                                       # noqa: BLE001 (told to every rank)
        error = _write_failed(e, mine, save_dir, need)
    _settle(engine, error, save_dir, tmp, tag)
    digests = [None] * comm.world_size
    if comm.world_size > 1:
        dist.all_gather_object(digests, digest)
    else:
        digests = [digest]

    # 3. rank 0 writes the rest and renames the folder into place; the others wait for its word
    untrained = stage.untrained_values()         # (stage 3 gathers them: every rank)
    error = None
    if comm.rank == 0:
        try:
            _publish(engine, save_dir, tmp, final, tag, client_state, untrained, digests)
        except Exception as e:                                   # noqa: BLE001 (told to every rank)
            error = _write_failed(e, getattr(e, "zerolab_path", None)
                                  or getattr(disk.os_error_in(e), "filename", None) or tmp, save_dir)
    _settle(engine, error, save_dir, tmp, tag)
    return str(final)


def _publish(engine, save_dir: Path, tmp: Path, final: Path, tag: str, client_state, untrained,
             digests) -> None:
    """Rank 0: model_states.pt, meta.json and the new ``latest`` (every write that can fail for
    want of room), then the renames into place. Whatever fails, the previous checkpoint of this
    tag and ``latest`` are left (or put back) as they were."""
    comm, stage = engine.comm, engine.stage
    model_states = {
        "buffers": {n: b.detach().cpu().clone() for n, b in engine.module.named_buffers()},
        "frozen": untrained,
        "client_state": client_state if client_state is not None else {},
        "lr_scheduler": (_plain(engine.lr_scheduler.state_dict())
                         if getattr(engine, "lr_scheduler", None) is not None else None),
    }
    _save_torch(model_states, tmp / "model_states.pt")
    opt = engine.optimizer
    meta = {
        "format": FORMAT, "stage": stage.stage, "world_size": comm.world_size,
        "dtype": str(engine.dtype).replace("torch.", ""),
        "groups": [{"names": g.names, "shapes": [list(s) for s in g.shapes], "numel": g.numel,
                    "padded_numel": g.padded_numel, "sharded": stage.shards_optimizer}
                   for g in stage.groups],
        "global_steps": engine.global_steps, "micro_steps": engine.micro_steps,
        "skipped_steps": engine.skipped_steps,
        "loss_scaler": {k: v for k, v in vars(engine.scaler).items() if isinstance(v, (int, float, bool))},
        "optimizer": {"type": type(opt).__name__,
                      "param_groups": [{k: v for k, v in pg.items() if k != "params"}
                                       for pg in opt.param_groups]},
        "tied": _tied_names(engine.module),
        "files": {f"rank_{r}.pt": d for r, d in enumerate(digests)}
                 | {"model_states.pt": sha256_of(tmp / "model_states.pt")},
    }
    _write_text(tmp / "meta.json", json.dumps(meta, indent=1, default=_json_default))
    latest_tmp = save_dir / f".latest.tmp-{os.getpid()}"
    try:
        _write_text(latest_tmp, tag)
    except BaseException:
        latest_tmp.unlink(missing_ok=True)                # (outside tmp: nothing else removes it)
        raise
    # into place: the old checkpoint of the same tag goes only once the new one is complete.
    # Killed between these two renames, the old one waits under .<tag>.old-<host>-<pid>: the
    # loader reads it there, and the next save puts it back or removes it (_sweep)
    old, placed = None, False
    try:
        if final.exists():
            old = save_dir / f".{tag}.old-{_me()}"
            os.replace(final, old)
        os.replace(tmp, final)
        placed = True
        os.replace(latest_tmp, save_dir / "latest")
    except BaseException:
        if placed:
            os.replace(final, tmp)                        # back out (the caller removes tmp)
        if old is not None and old.exists() and not final.exists():
            os.replace(old, final)                        # the previous checkpoint, back in place
        latest_tmp.unlink(missing_ok=True)
        raise
    if old is not None:
        shutil.rmtree(old, ignore_errors=True)


def _save_torch(obj, path: Path) -> None:
    """``torch.save`` through a Python file: a refused write keeps its OSError (errno) in the
    context of torch's RuntimeError, where :func:`zerolab.offload.disk.cause` finds it."""
    try:
        with open(path, "wb") as f:
            torch.save(obj, f)
    except BaseException as e:
        e.zerolab_path = path
        raise


def _write_text(path: Path, text: str) -> None:
    try:
        path.write_text(text)
    except BaseException as e:
        e.zerolab_path = path
        raise


def _write_failed(exc: BaseException, path, save_dir, need: int | None = None) -> str:
    """One rank's error text: the file and what went wrong (told to every rank)."""
    return T("cannot write {path}: {cause}", path=path, cause=disk.cause(exc, save_dir, need))


def _settle(engine, error: str | None, save_dir: Path, tmp: Path | None, tag: str) -> None:
    """Every rank learns whether every rank's part went well; if one failed, the temporary
    folder goes and every rank raises the same :class:`CheckpointError`."""
    comm = engine.comm
    bad = comm.agree(error, tag=f"checkpoint save {tag}", device=engine.device)
    if not bad:
        return
    if comm.rank == 0 and tmp is not None:
        shutil.rmtree(tmp, ignore_errors=True)
    latest = save_dir / "latest"
    try:
        before = T("the previous checkpoint ({tag}) is as it was", tag=latest.read_text().strip()) \
            if latest.is_file() else T("no previous checkpoint there")
    except OSError:
        before = T("no previous checkpoint there")
    raise CheckpointError(T("checkpoint {tag} was not saved: {errors}. Nothing of it is left in {dir}; {before}.",
                            tag=repr(tag), errors=T.text("; ").join(
                                T("rank {rank}: {error}", rank=r, error=e) for r, e in bad[:4]),
                            dir=save_dir, before=before))


def _me() -> str:
    return f"{socket.gethostname()}-{os.getpid()}"


def _leftover(name: str, kind: str):
    """For ``.<tag>.<kind>-<host>-<pid>[-...]`` made on this host: (tag, pid), else None."""
    if not name.startswith(".") or f".{kind}-" not in name:
        return None
    tag, _, rest = name[1:].rpartition(f".{kind}-")
    host = socket.gethostname()
    if not tag or not rest.startswith(f"{host}-"):
        return None
    try:
        return tag, int(rest[len(host) + 1:].split("-")[0])
    except ValueError:
        return None


def _sweep(save_dir: Path) -> None:
    """What saves killed on this host left behind: their temporary folders are removed; a
    previous checkpoint moved aside and never replaced is put back (or removed once its tag has a
    complete checkpoint again)."""
    from ..crew.procs import pid_alive
    for entry in save_dir.iterdir():
        for kind in ("tmp", "old"):
            found = _leftover(entry.name, kind)
            if found is None or found[1] == os.getpid() or pid_alive(found[1]):
                continue
            tag = found[0]
            if kind == "old" and not (save_dir / tag).exists() and (entry / "meta.json").is_file():
                os.replace(entry, save_dir / tag)          # the previous checkpoint, back in place
            else:
                shutil.rmtree(entry, ignore_errors=True)


def _check_client_state(v, where="client_state") -> None:
    """Only what loads back without unpickling code: tensors, numbers, strings, None and
    dicts / lists / tuples of them."""
    if v is None or isinstance(v, (bool, int, float, str)) or torch.is_tensor(v):
        return
    if isinstance(v, dict):
        for k, x in v.items():
            if not isinstance(k, (str, int)):
                raise ValueError(T("{where}: key {key} must be a string or an int", where=where, key=repr(k)))
            _check_client_state(x, f"{where}[{k!r}]")
        return
    if isinstance(v, (list, tuple)):
        for i, x in enumerate(v):
            _check_client_state(x, f"{where}[{i}]")
        return
    raise ValueError(T("{where} is a {type}: a checkpoint keeps only tensors, numbers, strings, None and "
                       "dicts/lists of them, so that loading it never runs pickled code",
                       where=where, type=type(v).__name__))


def _plain(v):
    """A scheduler's state dict without what ``weights_only`` cannot load back (a torch
    LambdaLR's functions): numbers, strings, tensors and containers of them stay."""
    if isinstance(v, dict):
        return {k: _plain(x) for k, x in v.items() if _plain(x) is not _DROP}
    if isinstance(v, (list, tuple)):
        return type(v)(_plain(x) for x in v if _plain(x) is not _DROP)
    if v is None or isinstance(v, (bool, int, float, str)) or torch.is_tensor(v):
        return v
    return _DROP


_DROP = object()


def _tied_names(model) -> dict[str, str]:
    """Every other name of a parameter registered under several (``head.weight`` -> the
    ``embed.weight`` it is tied to)."""
    first: dict[int, str] = {}
    tied = {}
    for n, p in model.named_parameters(remove_duplicate=False):
        if id(p) in first:
            tied[n] = first[id(p)]
        else:
            first[id(p)] = n
    return tied


def _json_default(v):
    if isinstance(v, tuple):
        return list(v)
    if torch.is_tensor(v):
        return v.tolist()
    raise TypeError(T("cannot store {type} in meta.json", type=type(v).__name__))

