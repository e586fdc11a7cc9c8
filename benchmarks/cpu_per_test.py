"""A pytest plugin: where a run's CPU goes, test by test and file by file.

    python -m pytest -p benchmarks.cpu_per_test tests/ -p no:xdist
    python -m pytest -p benchmarks.cpu_per_test --nbval --nbval-current-env ... notebooks solutions

Wall time (``--durations``) misleads on a small machine: a test that waits for its ranks is slow
but cheap, and a test whose ranks or kernel run in processes pytest never waits for (the crew's
forkserver, a notebook's kernel) spends CPU that ``RUSAGE_CHILDREN`` never sees. This plugin
reads the whole machine's busy CPU ticks (``/proc/stat``, Linux) before and after each test's
setup, call and teardown, and charges the difference to that test. So run it on an otherwise
quiet machine and on one worker (``-p no:xdist`` or no ``-n``): every busy tick is then the
suite's. At the end it prints the files and tests that cost the most CPU-seconds, what fell
between tests (collection, a kernel's shutdown), and the whole run's total.
"""
from __future__ import annotations

import collections
import os

import pytest

_HZ = os.sysconf("SC_CLK_TCK")


def _busy_seconds() -> float:
    with open("/proc/stat") as f:
        fields = f.readline().split()
    user, nice, system, _idle, _iowait, irq, softirq = map(int, fields[1:8])
    return (user + nice + system + irq + softirq) / _HZ


class CpuPerTest:
    def __init__(self) -> None:
        self.by_test: dict[str, float] = collections.defaultdict(float)
        self.start = _busy_seconds()

    @pytest.hookimpl(hookwrapper=True)
    def pytest_runtest_protocol(self, item):
        before = _busy_seconds()
        yield
        self.by_test[item.nodeid] += _busy_seconds() - before

    def pytest_terminal_summary(self, terminalreporter):
        total = _busy_seconds() - self.start
        by_file: dict[str, float] = collections.defaultdict(float)
        for nodeid, cpu in self.by_test.items():
            by_file[nodeid.split("::")[0]] += cpu
        charged = sum(by_file.values())
        write = terminalreporter.write_line
        terminalreporter.section("CPU-seconds (the whole machine's busy time, /proc/stat)")
        write(f"whole run {total:8.1f}   charged to tests {charged:8.1f}   between tests {total - charged:8.1f}")
        write("files, most first:")
        for path, cpu in sorted(by_file.items(), key=lambda kv: -kv[1])[:40]:
            write(f"  {cpu:8.1f}  {path}")
        write("tests, most first:")
        for nodeid, cpu in sorted(self.by_test.items(), key=lambda kv: -kv[1])[:40]:
            write(f"  {cpu:8.1f}  {nodeid}")


def pytest_configure(config):
    if os.path.exists("/proc/stat"):
        config.pluginmanager.register(CpuPerTest(), "cpu_per_test_counter")
