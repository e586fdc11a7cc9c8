"""NVMe files for offload: tensors swapped to a folder on a fast disk, read and written on I/O threads.

Used by the optimizer states' home (``offload.py``, ``offload_optimizer.device: "nvme"``) and by
stage 3's parameter shards (``gather.py``, ``offload_param.device: "nvme"``).
"""
from __future__ import annotations

import multiprocessing.util
import os
import shutil
import socket
import tempfile
import time
import uuid
import weakref
from concurrent.futures import Future, ThreadPoolExecutor

import numpy as np
import torch

from . import disk
from ..i18n import catalogue
from ..crew.procs import pid_alive

__all__ = ["NvmeStore", "NvmePathError", "NvmeFileError", "check_nvme_path", "remove_stale_swap_dirs",
           "block_sums", "CHECKSUM"]

T = catalogue("engine")        # the messages in the edition's language (zerolab/i18n/messages_zh.py)
# what the callers swap to NVMe (check_nvme_path's ``what``: its Chinese is in the catalogue)
WHAT = (T.mark("optimizer states"), T.mark("optimizer states (fp32 masters and moments of every rank)"),
        T.mark("parameter shards of every rank"))

SWAP_PREFIX = "zerolab-swap-"


# How each swap file is checked when it is read back: "sum64" (the default: per 1 MiB block, the
# sum of its 8-byte words mod 2**64; tens of GB/s with numpy), "crc32" (zlib's, per block; about
# 1.5 GB/s here, measured in benchmarks/nvme_checksum.py), or None (not checked). Read when a store
# is made.
CHECKSUM: str | None = "sum64"


class NvmePathError(RuntimeError):
    """``nvme_path`` is missing, not writable, or too small for what would be swapped there."""


class NvmeFileError(RuntimeError):
    """A swap file that could not be written (a full disk ...) or that came back damaged."""


def block_sums(view: memoryview, block: int, how: str = "sum64") -> np.ndarray:
    """One checksum per ``block`` bytes of ``view`` (the last block may be shorter). ``sum64``:
    the sum of the block's 8-byte words mod 2**64 (a last partial word zero-padded): any change of
    one word, a block of zeros or garbage, blocks moved around, all change it (two changes that
    cancel exactly do not: cheap, not cryptographic). ``crc32``: zlib's CRC-32 of the block."""
    n = len(view)
    if how == "crc32":
        import zlib
        return np.array([zlib.crc32(view[a:a + block]) for a in range(0, n, block)], dtype=np.uint64)
    words = n // 8
    a = np.frombuffer(view, dtype=np.uint64, count=words)
    per = block // 8
    full = words // per
    sums = a[:full * per].reshape(full, per).sum(axis=1, dtype=np.uint64)
    if full * per < words or words * 8 < n:
        rest = int(a[full * per:].sum(dtype=np.uint64))
        rest += int.from_bytes(bytes(view[words * 8:]).ljust(8, b"\0"), "little")
        sums = np.append(sums, np.uint64(rest % (1 << 64)))
    return sums


class NvmeStore:
    """Tensors kept in files under ``<nvme_path>/zerolab-swap-<host>-<pid>-<id>/rank<r>/``.

    Reads and writes run on a pool of four I/O threads (Python's file calls release the GIL,
    so they proceed while the optimizer computes), reading 1 MiB at a time; each returns a Future. Every run writes into
    a folder of its own and reads only what it wrote itself, so a killed run's files are never
    trusted by a later one; they are removed at :meth:`close`, when the store is dropped, or when
    the process exits normally with the store still open (a crew's rank included); if the process
    was killed, by the next run on the same host, which deletes folders whose process is gone.

    Each file's checksum (one per block, :func:`block_sums`, ``CHECKSUM``) is taken as it is
    written and checked when it is read back whole: a file damaged in between raises
    :class:`NvmeFileError` naming it, instead of being trained on. A write the disk refuses raises
    :class:`NvmeFileError` too, with the cause (:mod:`zerolab.offload.disk`)."""

    def __init__(self, nvme_path: str, rank: int, needed_bytes: int, *, what: str = "optimizer states",
                 threads: int = 4, block_size: int = 1 << 20, timeline=None):
        self.root = check_nvme_path(nvme_path, needed_bytes, what)
        remove_stale_swap_dirs(self.root)
        name = f"{SWAP_PREFIX}{socket.gethostname()}-{os.getpid()}-{uuid.uuid4().hex[:8]}"
        self.dir = os.path.join(self.root, name, f"rank{rank}")
        os.makedirs(self.dir, mode=0o700)         # private: training data (the files are 0600)
        self.top = os.path.dirname(self.dir)
        os.chmod(self.top, 0o700)                 # (makedirs' mode applies to the last folder only
        os.chmod(self.dir, 0o700)                 #  and is masked by the umask)
        self.block = block_size
        self.pool = ThreadPoolExecutor(max_workers=threads, thread_name_prefix="zerolab-nvme")
        self.sizes: dict[str, int] = {}
        self.checksum = CHECKSUM
        self.sums: dict[str, tuple] = {}      # path -> (its length, its blocks' checksums), as written
        self.bytes_read = self.bytes_written = 0
        self.seconds_reading = self.seconds_writing = 0.0
        self.timeline = timeline
        self.closed = False
        # an engine dropped without close() still takes its folder with it; so does one still open
        # when the process exits normally: weakref.finalize runs at the interpreter's exit, and a
        # crew's rank (a multiprocessing child, which leaves through os._exit without atexit)
        # runs multiprocessing's exit finalizers, where this one is registered too
        self._finalizer = weakref.finalize(self, _remove, self.pool, self.top)
        multiprocessing.util.Finalize(self, self._finalizer, exitpriority=10)

    def _path(self, j, key: str) -> str:
        return os.path.join(self.dir, f"{j}.{key}.bin")

    def write(self, j, key: str, t: torch.Tensor) -> Future:
        path = self._path(j, key)
        t = t.detach()
        self.sizes[path] = t.numel() * t.element_size()
        return self.pool.submit(self._write, path, t)

    def read(self, j, key: str, out: torch.Tensor) -> Future:
        return self.pool.submit(self._read, self._path(j, key), out)

    def _write(self, path: str, t: torch.Tensor) -> None:
        start = time.perf_counter()
        view = memoryview(t.contiguous().view(torch.uint8).numpy())
        self.sums.pop(path, None)               # a file half rewritten is never trusted
        try:
            with open(os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600), "wb", buffering=0) as f:
                for a in range(0, len(view), self.block * 16):
                    f.write(view[a:a + self.block * 16])
        except OSError as e:
            raise NvmeFileError(T("cannot write NVMe swap file {path}: {cause}", path=path,
                                  cause=disk.cause(e, self.root, need=len(view)))) from e
        if self.checksum:
            self.sums[path] = (len(view), block_sums(view, self.block, self.checksum))
        self.bytes_written += len(view)
        end = time.perf_counter()
        self.seconds_writing += end - start
        if self.timeline is not None:
            self.timeline.add("io", f"nvme write {os.path.basename(path)}", start, end)

    def _read(self, path: str, out: torch.Tensor) -> None:
        start = time.perf_counter()
        view = memoryview(out.view(torch.uint8).numpy())
        try:
            with open(path, "rb", buffering=0) as f:
                got = 0
                while got < len(view):            # 1 MiB at a time (DeepSpeed's aio block): measured
                    n = f.readinto(view[got:got + self.block])   # closer to the disk's rate here
                    if not n:
                        raise NvmeFileError(T("NVMe swap file {path} is damaged: it ended after {got} of its {n} "
                                              "bytes. {todo}", path=path, got=got, n=len(view), todo=T.text(_TODO)))
                    got += n
        except OSError as e:
            raise NvmeFileError(T("cannot read NVMe swap file {path}: {cause}. {todo}", path=path,
                                  cause=disk.cause(e, self.root), todo=T.text(_TODO))) from e
        length, want = self.sums.get(path, (None, None))
        if length == len(view):                   # (a read of the whole file, as written)
            got_sums = block_sums(view, self.block, self.checksum)
            if not np.array_equal(got_sums, want):
                bad = int(np.argmax(got_sums != want))
                raise NvmeFileError(T("NVMe swap file {path} is damaged: block {block} (bytes {start} to {end}) "
                                      "differs from what was written there; it was not used. {todo}", path=path,
                                      block=bad, start=bad * self.block,
                                      end=min((bad + 1) * self.block, len(view)), todo=T.text(_TODO)))
        self.bytes_read += len(view)
        end = time.perf_counter()
        self.seconds_reading += end - start
        if self.timeline is not None:
            self.timeline.add("io", f"nvme read {os.path.basename(path)}", start, end)

    def bytes_on_disk(self) -> int:
        return sum(self.sizes.values())

    def close(self) -> None:
        if self.closed:
            return
        self.closed = True
        self._finalizer()


_TODO = T.mark("Something other than this run changed its files (another process, the disk itself): check the disk, "
         "then resume from your last checkpoint (engine.load_checkpoint)")


def _remove(pool: ThreadPoolExecutor, top: str) -> None:
    pool.shutdown(wait=True)
    shutil.rmtree(top, ignore_errors=True)


def check_nvme_path(nvme_path, needed_bytes: int, what: str) -> str:
    """The folder, checked: it exists, is writable, and has room for ``needed_bytes``."""
    if not nvme_path:
        raise NvmePathError(T("offload to nvme needs 'nvme_path' (a folder on a fast disk) for the {what}",
                              what=T.text(what)))
    path = os.path.abspath(os.path.expanduser(str(nvme_path)))
    if not os.path.isdir(path):
        raise NvmePathError(T("nvme_path {path} does not exist or is not a folder (create it first)",
                              path=repr(path)))
    try:
        with tempfile.NamedTemporaryFile(dir=path, prefix=".zerolab-probe-"):
            pass
    except OSError as e:
        raise NvmePathError(T("nvme_path {path} is not writable: {cause}", path=repr(path),
                              cause=disk.cause(e, path))) from None
    free = shutil.disk_usage(path).free
    if needed_bytes > free:
        raise NvmePathError(T("nvme_path {path} has {free} free, but the {what} need {need} there: free {short} "
                              "on that disk, or point nvme_path at a folder on a disk with more room",
                              path=repr(path), free=disk.nice_bytes(free), what=T.text(what),
                              need=disk.nice_bytes(needed_bytes), short=disk.nice_bytes(needed_bytes - free)))
    return path


def remove_stale_swap_dirs(root: str) -> list[str]:
    """Delete swap folders left by killed zerolab runs on this host (their process is gone)."""
    host = socket.gethostname()
    removed = []
    for name in os.listdir(root):
        if not name.startswith(f"{SWAP_PREFIX}{host}-"):
            continue
        try:
            pid = int(name[len(SWAP_PREFIX) + len(host) + 1:].split("-")[0])
        except ValueError:
            continue
        if pid == os.getpid() or pid_alive(pid):
            continue
        shutil.rmtree(os.path.join(root, name), ignore_errors=True)
        removed.append(name)
    return removed
