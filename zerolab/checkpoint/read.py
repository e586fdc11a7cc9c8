"""Reading a zerolab checkpoint folder back, with no engine and no ranks: its files checked
against their hashes, and each parameter's full fp32 value and full optimizer state rebuilt from
the rank files (:func:`read_full_state`); one plain fp32 state dict written from it
(:func:`consolidate`). The folder's layout is in :mod:`zerolab.checkpoint`'s docstring.
"""
from __future__ import annotations

import hashlib
import json
from pathlib import Path

import torch

from ..i18n import catalogue

T = catalogue("around")   # the messages in the edition's language (zerolab/i18n/messages_zh.py)

FORMAT = "zerolab-checkpoint-1"


class CheckpointError(RuntimeError):
    """A checkpoint that cannot be loaded into this engine (missing, corrupted or different), or
    that could not be saved (a rank's file refused by the disk); raised on every rank."""


def sha256_of(path: Path) -> str:
    """The file's sha256, as meta.json records it."""
    h = hashlib.sha256()
    with open(path, "rb") as f:
        for block in iter(lambda: f.read(1 << 20), b""):
            h.update(block)
    return h.hexdigest()


def _scalar_state(v) -> bool:
    return not torch.is_tensor(v) or v.dim() == 0


# -- reading ----------------------------------------------------------------------------------
def resolve(load_dir, tag) -> Path:
    """The folder of checkpoint ``tag`` (None: the one ``latest`` names) under ``load_dir``."""
    load_dir = Path(load_dir)
    if tag is None:
        latest = load_dir / "latest"
        if not latest.is_file():
            raise CheckpointError(T("no 'latest' file in {dir}: pass tag=, or save a checkpoint there first",
                                    dir=load_dir))
        tag = latest.read_text().strip()
    path = load_dir / str(tag)
    if not (path / "meta.json").is_file():
        # a save killed between moving the old checkpoint aside and renaming the new one in
        aside = sorted(load_dir.glob(f".{tag}.old-*/meta.json"))
        if aside:
            return aside[-1].parent
        raise CheckpointError(T("no checkpoint at {path} (meta.json missing)", path=path))
    return path


def _load(path: Path, digest: str | None):
    if not path.is_file():
        raise CheckpointError(T("checkpoint file {name} is missing from {dir}", name=path.name, dir=path.parent))
    if digest is not None and sha256_of(path) != digest:
        raise CheckpointError(T("checkpoint file {path} is corrupted or truncated (its sha256 differs "
                                "from the one recorded when it was saved)", path=path))
    try:
        return torch.load(path, map_location="cpu", weights_only=True)
    except Exception as e:                                       # noqa: BLE001
        raise CheckpointError(T("cannot read checkpoint file {path}: {error}", path=path, error=e)) from None


def read_full_state(ckpt_path) -> dict:
    """Everything in a checkpoint folder, with each parameter's full fp32 value and full
    optimizer state rebuilt from the rank files: ``{"meta", "params": {name: tensor},
    "states": {name: {key: tensor}}, "scalars": {key: value}, "model_states"}``."""
    path = Path(ckpt_path)
    try:
        meta = json.loads((path / "meta.json").read_text())
    except (OSError, ValueError) as e:
        raise CheckpointError(T("cannot read {path}: {error}", path=path / "meta.json", error=e)) from None
    if meta.get("format") != FORMAT:
        raise CheckpointError(T("{path} is not a zerolab checkpoint of format {format} (found {found})",
                                path=path, format=FORMAT, found=repr(meta.get("format"))))
    files = meta["files"]
    world = meta["world_size"]
    ranks = [_load(path / f"rank_{r}.pt", files.get(f"rank_{r}.pt")) for r in range(world)]
    model_states = _load(path / "model_states.pt", files.get("model_states.pt"))
    params, states, scalars = {}, {}, {}
    for gi, g in enumerate(meta["groups"]):
        def full(pieces):
            flat = torch.cat(pieces) if len(pieces) > 1 else pieces[0]
            if flat.numel() != g["padded_numel"]:
                raise CheckpointError(T("{path}: group {group} has {n} elements in the rank files, meta.json says "
                                        "{want}", path=path, group=gi, n=flat.numel(), want=g["padded_numel"]))
            return flat
        holders = range(world) if g["sharded"] else [0]
        flat = full([ranks[r]["masters"][gi] for r in holders])
        keys = {k for r in holders for k in ranks[r]["optimizer_states"].get(gi, {})}
        flat_states = {}
        for k in sorted(keys):
            vals = [ranks[r]["optimizer_states"][gi][k] for r in holders]
            if all(_scalar_state(v) for v in vals):
                scalars[k] = vals[0]
            else:
                flat_states[k] = full([v.reshape(-1) for v in vals])
        offset = 0
        for name, shape in zip(g["names"], g["shapes"]):
            n = 1
            for s in shape:
                n *= s
            params[name] = flat[offset:offset + n].view(shape).clone()
            states[name] = {k: v[offset:offset + n].view(shape).clone() for k, v in flat_states.items()}
            offset += n
    return {"meta": meta, "params": params, "states": states, "scalars": scalars, "model_states": model_states}


# -- one file for the plain model ----------------------------------------------------------------
def consolidate(ckpt_dir, out, tag=None) -> dict[str, torch.Tensor]:
    """Write one fp32 state dict (safetensors) with the model's own names, as DeepSpeed's
    zero_to_fp32 does: every trained parameter's full fp32 master value, frozen parameters and
    buffers. Tied parameters are written under each of their names (safetensors stores no
    shared tensors), so ``model.load_state_dict(safetensors.torch.load_file(out))`` works
    with strict=True. Needs no ranks. Returns the state dict."""
    from safetensors.torch import save_file

    full = read_full_state(resolve(ckpt_dir, tag) if not (Path(ckpt_dir) / "meta.json").is_file()
                           else Path(ckpt_dir))
    sd = dict(full["params"])
    for n, t in full["model_states"]["frozen"].items():
        sd[n] = t.float() if t.is_floating_point() else t
    sd.update(full["model_states"]["buffers"])
    for alias, name in full["meta"].get("tied", {}).items():
        sd[alias] = sd[name]
    sd = {k: v.contiguous().clone() for k, v in sd.items()}
    Path(out).parent.mkdir(parents=True, exist_ok=True)
    save_file(sd, str(out), metadata={"format": "pt", "source": FORMAT})
    return sd
