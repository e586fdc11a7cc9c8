"""Where bytes live: on the compute device, in host memory, or in files on NVMe.

The engine's memory report is split by place (``engine.memory(where)``: "device", "host",
"nvme"), and every switch that holds bytes says in which place it holds them. DeepSpeed's
config names the same places in its own words: ``offload_optimizer.device`` /
``offload_param.device`` is "none" (on the device), "cpu" (host memory) or "nvme" (DeepSpeed
0.19.8, ``runtime/zero/offload_config.py``, ``OffloadDeviceEnum``). The config keeps
DeepSpeed's words (it reads and explains the JSON as written); :meth:`Place.of` turns them into
a place where the engine decides something from them, so no module compares those strings.

A :class:`Place` is a ``StrEnum``: it equals, hashes and prints as its name (``str``, f-strings
and ``format`` all give ``"host"``), so dicts keyed by places read as before and
``engine.memory("host")`` finds them.
"""
from __future__ import annotations

from enum import StrEnum

from ..i18n import catalogue

T = catalogue("engine")        # the messages in the edition's language (zerolab/i18n/messages_zh.py)

__all__ = ["Place"]


class Place(StrEnum):
    """A place bytes live in, named as ``engine.memory(where)`` names it."""

    DEVICE = "device"
    HOST = "host"
    NVME = "nvme"

    @classmethod
    def of(cls, offload_device: str) -> Place:
        """The place an offload block's ``device`` ("none", "cpu", "nvme": DeepSpeed's words) puts
        its tensors in."""
        try:
            return _OF_OFFLOAD[offload_device]
        except (KeyError, TypeError):
            raise ValueError(T("an offload device is 'none', 'cpu' or 'nvme', not {device}",
                               device=repr(offload_device))) from None

    @property
    def offloaded(self) -> bool:
        """Off the compute device: in host memory or in files."""
        return self is not Place.DEVICE


_OF_OFFLOAD = {"none": Place.DEVICE, "cpu": Place.HOST, "nvme": Place.NVME}
