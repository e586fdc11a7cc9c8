"""``zerolab course``: open the course in JupyterLab, in a working copy of it.

Running a notebook autosaves it, outputs and all; run in the clone's own ``notebooks/``, that
makes ``git status`` show the course's files modified, and a later ``git pull`` conflicts. So the
command copies the course (``notebooks/``, ``exercises/``, ``solutions/``, the Chinese edition
inside them) into a working folder, by default ``course/`` at the clone's root (``.gitignore``
keeps git out of it), and opens JupyterLab there:

* a notebook is copied only when the working folder has none of that name: a learner's edits
  and outputs are never overwritten, and a chapter added by a ``git pull`` arrives at the next
  start (to get a chapter's stored version back, delete your copy and start again);
* JupyterLab's news notification (JupyterLab 4.6 asks "would you like to receive official
  Jupyter news?" and covers the bottom right of the outputs) is off: ``fetchNews: "false"`` and
  ``checkForUpdates: false`` in ``overrides.d/zerolab.json`` of the environment's settings
  directory (``<sys.prefix>/share/jupyter/lab/settings``: JupyterLab's own place for an
  environment's defaults; the learner's own settings, in ``~/.jupyter``, are left alone and still
  win);
* ``--LabApp.default_url`` is chapter 0, so the URL JupyterLab prints (with ``--no-browser``, on a
  remote machine) opens chapter 0 too, not the Launcher.

The clone is the one this ``zerolab`` package was installed from (``pip install -e .``); the
working folder and progress records (``zerolab progress``) belong to it.
"""
from __future__ import annotations

import json
import os
import shutil
import sys
from pathlib import Path

from ..i18n import catalogue

T = catalogue("course")

__all__ = ["COURSE_DIRS", "FIRST_CHAPTER", "clone_root", "default_folder", "working_copy", "news_off",
           "lab_argv", "first_chapter", "main"]

COURSE_DIRS = ("notebooks", "exercises", "solutions")
FIRST_CHAPTER = "00_meet_the_crew.ipynb"
WORKING_FOLDER = "course"          # at the clone's root; in .gitignore
NEWS_OFF = {"@jupyterlab/apputils-extension:notification": {"fetchNews": "false", "checkForUpdates": False}}


def clone_root() -> Path | None:
    """The clone this package lives in (its ``notebooks/`` beside ``zerolab/``), or None when
    zerolab was installed from a wheel."""
    root = Path(__file__).resolve().parents[2]     # zerolab/course/workspace.py -> the clone
    return root if (root / "notebooks" / FIRST_CHAPTER).is_file() else None


def default_folder(root: Path) -> Path:
    return root / WORKING_FOLDER


def working_copy(root: Path, dest: Path) -> tuple[int, int]:
    """Copy the course's files from ``root`` into ``dest`` where ``dest`` has none of that name.
    Returns (files copied, files already there and kept as they are)."""
    copied = kept = 0
    for top in COURSE_DIRS:
        src = root / top
        if not src.is_dir():
            continue
        for path in sorted(src.rglob("*")):
            rel = path.relative_to(root)
            if not path.is_file() or any(part.startswith(".") for part in rel.parts):   # .ipynb_checkpoints
                continue
            target = dest / rel
            if target.exists():
                kept += 1
                continue
            target.parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(path, target)
            copied += 1
    return copied, kept


def lab_settings_dir() -> Path:
    """The environment's JupyterLab settings directory (``<app dir>/settings``), where
    ``overrides.json`` and ``overrides.d/*.json`` set an environment's defaults."""
    try:
        from jupyterlab.commands import get_app_dir
        return Path(get_app_dir()) / "settings"
    except ImportError:
        return Path(sys.prefix) / "share" / "jupyter" / "lab" / "settings"


def news_off(settings: Path | None = None) -> Path:
    """Write ``overrides.d/zerolab.json`` (news and update checks off) into ``settings`` (default:
    the environment's); returns the file. Raises OSError when the folder is not writable."""
    path = (settings or lab_settings_dir()) / "overrides.d" / "zerolab.json"
    text = json.dumps(NEWS_OFF, indent=1) + "\n"
    if not path.is_file() or path.read_text() != text:
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text)
    return path


def first_chapter(lang: str) -> str:
    """Chapter 0's path inside the working folder, in the edition ``lang``."""
    return f"notebooks/zh/{FIRST_CHAPTER}" if lang == "zh" else f"notebooks/{FIRST_CHAPTER}"


def lab_argv(folder: Path, chapter: str, extra: list[str]) -> list[str]:
    """The ``jupyter lab`` command: root at ``folder``, opening ``chapter`` (also as the URL it prints)."""
    return [sys.executable, "-m", "jupyterlab", f"--ServerApp.root_dir={folder}",
            f"--LabApp.default_url=/lab/tree/{chapter}", "--LabApp.news_url=None", *extra]


def main(folder: str | None = None, lang: str = "en", extra: list[str] | None = None, dry_run: bool = False) -> int:
    """``zerolab course [--dir DIR] [--no-browser] [--allow-root] [--port N] [jupyter lab options]``."""
    root = clone_root()
    if root is None:
        print(T("zerolab course: the course's notebooks are not beside this zerolab ({path}); install zerolab from "
                "a clone of the repository (pip install -e .) and run it there", path=Path(__file__).parents[1]),
              file=sys.stderr)
        return 2
    dest = Path(folder).expanduser().resolve() if folder else default_folder(root)
    if dest == root or root in dest.parents and dest.relative_to(root).parts[0] in COURSE_DIRS:
        print(T("zerolab course: {path} is the stored course itself; choose a folder of its own", path=dest),
              file=sys.stderr)
        return 2
    copied, kept = working_copy(root, dest)
    print(T("your working copy of the course: {path}", path=dest))
    if copied and kept:
        print(T("  {copied} new files copied from the clone; {kept} already there kept as you left them",
                copied=copied, kept=kept))
    elif copied:
        print(T("  {copied} files copied from the clone; run and save freely: git sees none of it", copied=copied))
    else:
        print(T("  {kept} files, all kept as you left them (to get a stored chapter back, delete your copy and "
                "start again)", kept=kept))
    try:
        print(T("  JupyterLab's news pop-up: off ({path})", path=news_off()))
    except OSError as e:
        print(T("  JupyterLab's news pop-up stays on: cannot write the environment's settings ({error})",
                error=e), file=sys.stderr)
    chapter = first_chapter(lang)
    argv = lab_argv(dest, chapter, list(extra or []))
    print(T("  opening {chapter}; the URL JupyterLab prints opens it too", chapter=chapter), flush=True)
    if dry_run:
        print(" ".join(argv))
        return 0
    os.chdir(dest)
    os.execv(sys.executable, argv)        # JupyterLab in this process: Ctrl-C stops it as usual
