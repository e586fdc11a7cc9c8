"""Reading what DeepSpeed prints: its training log and ``ds_report``.

A DeepSpeed run tells an engineer three things in its own words, and the course reads them from
real recordings (``benchmarks/results/recorded/``, each with where and when it was made):

* the progress line every ``steps_per_print`` steps (``engine.py``'s ``_report_progress``):
  ``step=10, skipped=0, lr=[0.0001], mom=[(0.9, 0.999)]``; ``skipped`` counts the fp16
  overflow steps the loss scaler threw away;
* the throughput line beside it (``utils/timer.py``'s ``ThroughputTimer``):
  ``RunningAvgSamplesPerSec`` (every step since the first ones it skips), ``CurrSamplesPerSec``
  (the last step only), ``MemAllocated`` / ``MaxMemAllocated`` (the accelerator's allocator,
  GB = 2**30 bytes; on a CPU build, what the CPU accelerator reports);
* with ``wall_clock_breakdown: true``, rank 0's timers per step, in ms
  (``fwd``, ``bwd`` = ``bwd_inner`` + ``bwd_allreduce``, ``step``, and ZeRO-1/2's
  ``optimizer_allgather``, ``optimizer_gradients``, ``optimizer_step``).

``ds_report`` lists DeepSpeed's C++/CUDA ops (installed, compatible) and the environment
(torch, CUDA, NCCL versions). :func:`parse_log` and :func:`parse_report` turn both into data.
"""
from __future__ import annotations

import ast
import dataclasses
import re

__all__ = ["DSLog", "parse_log", "parse_report", "read_log", "read_report"]

_ANSI = re.compile(r"\x1b\[[0-9;]*m")
_PROGRESS = re.compile(r"step=(\d+), skipped=(\d+), lr=(\[[^\]]*\]), mom=(\[.*\])")
_THROUGHPUT = re.compile(r"epoch=(\d+)/micro_step=(\d+)/global_step=(\d+), RunningAvgSamplesPerSec=([\d.eE+-]+), "
                         r"CurrSamplesPerSec=([\d.eE+-]+), MemAllocated=([\d.]+)GB, MaxMemAllocated=([\d.]+)GB")
_TIMERS = re.compile(r"time \(ms\) \| (.*)$")
_CONFIG = re.compile(r"\[config\.py:\d+:print\]\s{2,}(\w+) \.*\s(.*)$")


@dataclasses.dataclass
class DSLog:
    """One DeepSpeed training log, as data."""
    progress: list[dict]        # {"step", "skipped", "lr", "mom"}
    throughput: list[dict]      # {"global_step", "micro_step", "running_avg", "current", "mem_gb", "max_mem_gb"}
    timers: list[dict]          # one dict per timer line: {"fwd": ms, "bwd": ms, ...}
    config: dict[str, str]      # the engine's configuration as printed (one-line values only)

    def timer_medians(self) -> dict[str, float]:
        """The median of each timer over the log (the first steps, warm-up included)."""
        values: dict[str, list[float]] = {}
        for line in self.timers:
            for k, v in line.items():
                values.setdefault(k, []).append(v)
        return {k: sorted(v)[len(v) // 2] for k, v in values.items()}


def parse_log(text: str) -> DSLog:
    """Parse a DeepSpeed training log (any rank's lines; ANSI colours stripped)."""
    progress, throughput, timers, config = [], [], [], {}
    for line in _ANSI.sub("", text).splitlines():
        if m := _THROUGHPUT.search(line):
            throughput.append({"epoch": int(m[1]), "micro_step": int(m[2]), "global_step": int(m[3]),
                               "running_avg": float(m[4]), "current": float(m[5]),
                               "mem_gb": float(m[6]), "max_mem_gb": float(m[7])})
        elif m := _PROGRESS.search(line):
            progress.append({"step": int(m[1]), "skipped": int(m[2]), "lr": _literal(m[3]), "mom": _literal(m[4])})
        elif m := _TIMERS.search(line):
            fields = {}
            for part in m[1].split("|"):
                name, _, value = part.partition(":")
                if value.strip():
                    fields[name.strip()] = float(value)
            timers.append(fields)
        elif (m := _CONFIG.search(line)) and m[2].strip() not in ("{", "["):
            config[m[1]] = m[2].strip()
    return DSLog(progress, throughput, timers, config)


def parse_report(text: str) -> dict:
    """Parse ``ds_report``: ``{"ops": {name: (installed, compatible)}, "env": {key: value}}``."""
    ops, env = {}, {}
    for line in _ANSI.sub("", text).splitlines():
        if m := re.match(r"^(\w+) \.*\s*\[(\w+)\]\s*\.+\s*\[(\w+)\]", line.strip()):
            ops[m[1]] = (m[2] == "YES", m[3] == "OKAY")
        elif (m := re.match(r"^(\w[\w ()/]*?) \.{3,}\s(.*)$", line.strip())) and not m[2].startswith("["):
            env[m[1].strip()] = m[2].strip()
    return {"ops": ops, "env": env}


def read_log(path) -> DSLog:
    with open(path, encoding="utf-8") as f:
        return parse_log(f.read())


def read_report(path) -> dict:
    with open(path, encoding="utf-8") as f:
        return parse_report(f.read())


def _literal(text: str):
    try:
        return ast.literal_eval(text)
    except (ValueError, SyntaxError):
        return text
