"""When the disk says no: what a refused write means, in words a user can act on.

A write into a checkpoint folder or an NVMe swap folder can fail because the folder is on a
read-only file system (``EROFS``), the disk is full (``ENOSPC``, or a quota: ``EDQUOT``), or the
user running the ranks may not write there (``EACCES``, ``EPERM``). torch's own file writer hides
the ``OSError`` behind a ``RuntimeError`` ("[enforce fail at inline_container.cc:...] unexpected
pos ..."); written through a Python file object (as zerolab writes its checkpoints) the
``OSError`` stays in the exception's context, where :func:`os_error_in` finds it.

:func:`cause` says which of these it was, how much room the folder has (in units that show the
number: KiB, MiB or GiB as fits) and what to do. The checkpoint (``checkpoint.py``) and the NVMe
store (``nvme.py``) put it into their errors. A low layer: the standard library, ``i18n`` and
``memory.format_bytes``.
"""
from __future__ import annotations

import errno
import os
import shutil
from pathlib import Path

from ..i18n import catalogue
from ..memory import format_bytes

T = catalogue("around")   # the messages in the edition's language (zerolab/i18n/messages_zh.py)

__all__ = ["os_error_in", "free_bytes", "cause", "nice_bytes", "FULL", "READ_ONLY", "DENIED"]

READ_ONLY = (errno.EROFS,)
FULL = (errno.ENOSPC, errno.EDQUOT)
DENIED = (errno.EACCES, errno.EPERM)


def nice_bytes(n: float) -> str:
    """``n`` bytes in the unit that shows the number: "512 B", "60.00 KiB", "3.25 MiB", "1.50 GiB"."""
    return format_bytes(n, "auto")


def os_error_in(exc: BaseException | None) -> OSError | None:
    """The OSError that ``exc`` is, or that it was raised from or during (``__cause__``,
    ``__context__``), else None."""
    seen = set()
    while exc is not None and id(exc) not in seen:
        seen.add(id(exc))
        if isinstance(exc, OSError) and exc.errno is not None:
            return exc
        exc = exc.__cause__ or exc.__context__
    return None


def free_bytes(path) -> int | None:
    """Free bytes on the disk of ``path`` (its nearest existing folder); None if it cannot be told."""
    p = Path(path)
    for folder in (p, *p.parents):
        try:
            if folder.exists():
                return shutil.disk_usage(folder).free
        except OSError:
            return None
    return None


def _user() -> str:
    try:
        import getpass
        return getpass.getuser()
    except Exception:                                            # noqa: BLE001 (no name for the uid)
        return f"uid {os.getuid()}"


def cause(exc: BaseException, folder, need: int | None = None, reading: bool = False) -> str:
    """What ``exc`` (raised writing into ``folder``, or ``reading`` from it) means and what to do,
    in one sentence. ``need``: the bytes the write needed, when known."""
    folder = str(folder)
    e = os_error_in(exc)
    code = e.errno if e is not None else None
    if code in READ_ONLY:
        return T("the folder {folder} is on a read-only file system: remount it read-write, or use a writable "
                 "folder", folder=folder)
    free = free_bytes(folder)
    if code in FULL or (e is None and free is not None and free < (1 << 20)
                        and ("unexpected pos" in str(exc) or "write" in str(exc).lower())):
        sure = code in FULL
        if need is not None:
            text = T("the disk of {folder} is full ({free} free, about {need} needed)", folder=folder,
                     free=nice_bytes(free or 0), need=nice_bytes(need))
        else:
            text = T("the disk of {folder} is full ({free} free)", folder=folder, free=nice_bytes(free or 0))
        if code == errno.EDQUOT:
            text = T("your disk quota in {folder} is used up", folder=folder)
        if not sure:
            text = T("{what} (torch said: {error})", what=text, error=exc)
        return T("{what}: free some space there, or use a folder on another disk", what=text)
    if code in DENIED and reading:
        return T("permission denied reading {path}: let the user running the ranks ({user}) read it",
                 path=e.filename or folder, user=_user())
    if code in DENIED:
        return T("permission denied in {folder}: let the user running the ranks ({user}) write there, or use "
                 "another folder", folder=folder, user=_user())
    if e is not None:
        return T("{error} (in {folder})", error=e, folder=folder)
    return T("{type}: {error}", type=type(exc).__name__, error=exc)
