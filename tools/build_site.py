#!/usr/bin/env python3
"""Build the course as a static site, both editions, from the stored notebooks (nothing is executed).

    python tools/build_site.py                 # -> site/_build/html/index.html (en/ and zh/ beside it)
    python tools/build_site.py --out /tmp/s    # elsewhere
    python tools/build_site.py --check-only    # check the internal links of a built site

Needs the ``docs`` extra (``pip install -e '.[docs]'``: Sphinx and myst-nb). Each edition is staged
in ``<out>/../src/<edition>`` with the repository's layout (``notebooks/``, ``exercises/``,
``solutions/``; the Chinese in their ``zh/`` folders, so that the notebooks' relative links work as
they do in JupyterLab) and an index page, then built by Sphinx with ``site/conf.py`` (myst-nb,
``nb_execution_mode = "off"``: the stored outputs are the pages' outputs). The two editions build
side by side. Then every internal link of the built HTML (``href``/``src`` without a scheme, and its
``#anchor``) is checked: the command fails on a broken one (``tests/test_site.py`` builds and checks).
"""
from __future__ import annotations

import argparse
import os
import re
import shutil
import subprocess
import sys
import time
from concurrent.futures import ThreadPoolExecutor
from html.parser import HTMLParser
from pathlib import Path
from urllib.parse import unquote, urlsplit

ROOT = Path(__file__).resolve().parent.parent
SITE = ROOT / "site"
FOLDERS = ("notebooks", "exercises", "solutions")

INDEX = {
    "en": """# zerolab: learn DeepSpeed ZeRO by running it

The course, read-only: every chapter and exercise with the outputs stored the last time it ran on
real ranks (nothing on these pages was re-run to build them). To run the cells yourself, install the
course (the README's one command) and open it in JupyterLab: `zerolab course`.

<a href="../zh/index.html">中文版 (the Chinese edition)</a>

{toc}
""",
    "zh": """# zerolab：动手跑一遍 DeepSpeed ZeRO

只读版课程：每一章、每道练习都带着最近一次在真实 rank 上运行时存下的输出（生成这些页面时没有重新运行任何单元格）。
想自己运行，请按 README 的那条命令安装课程，在 JupyterLab 里打开：`zerolab course --lang zh`。

<a href="../en/index.html">English edition</a>

{toc}
""",
}
CAPTIONS = {"en": ("Chapters", "Exercises", "Solutions"), "zh": ("章节", "练习", "参考答案")}


def stage(edition: str, src: Path) -> list[str]:
    """Copy one edition's notebooks into ``src`` (the repository's layout) and write its index page."""
    if src.exists():
        shutil.rmtree(src)
    toc = []
    for folder, caption in zip(FOLDERS, CAPTIONS[edition]):
        rel = Path(folder) / ("zh" if edition == "zh" else "")
        notebooks = sorted((ROOT / rel).glob("*.ipynb"))
        (src / rel).mkdir(parents=True, exist_ok=True)
        for nb in notebooks:
            shutil.copyfile(nb, src / rel / nb.name)
        entries = "\n".join(f"{(rel / nb.stem).as_posix()}" for nb in notebooks)
        toc.append(f"```{{toctree}}\n:caption: {caption}\n:maxdepth: 1\n\n{entries}\n```\n")
    (src / "index.md").write_text(INDEX[edition].format(toc="\n".join(toc)), encoding="utf-8")
    return [p.as_posix() for p in src.rglob("*.ipynb")]


def sphinx(edition: str, src: Path, out: Path) -> subprocess.CompletedProcess:
    """Build one edition into ``<src>/../<edition>-build/html`` (myst-nb writes its outputs beside ``html``)."""
    work = src.parent / f"{edition}-build"
    cmd = [sys.executable, "-m", "sphinx", "-b", "html", "-q", "-c", str(SITE), "-d", str(work / "doctrees"),
           "-D", f"language={'zh_CN' if edition == 'zh' else 'en'}", str(src), str(work / "html")]
    env = {**os.environ, "PYDEVD_DISABLE_FILE_VALIDATION": "1"}
    return subprocess.run(cmd, capture_output=True, text=True, env=env)


LANDING = """<!DOCTYPE html>
<html lang="en"><head><meta charset="utf-8"><title>zerolab: the course</title></head>
<body style="font-family: sans-serif; max-width: 40em; margin: 4em auto">
<h1>zerolab: learn DeepSpeed ZeRO by running it</h1>
<p><a href="en/index.html">English edition</a></p>
<p><a href="zh/index.html">中文版</a></p>
</body></html>
"""


def build(out: Path) -> list[str]:
    """Build both editions into ``out``; return Sphinx's warnings (an error raises)."""
    out.mkdir(parents=True, exist_ok=True)
    staging = out.parent / "src"             # the staged sources and Sphinx's working folders
    for edition in INDEX:
        stage(edition, staging / edition)
    with ThreadPoolExecutor(len(INDEX)) as pool:
        runs = dict(zip(INDEX, pool.map(lambda e: sphinx(e, staging / e, out), INDEX)))
    for edition, run in runs.items():
        if run.returncode:
            raise SystemExit(f"sphinx failed on the {edition} edition:\n{run.stdout}\n{run.stderr}")
        if (out / edition).exists():
            shutil.rmtree(out / edition)
        os.replace(staging / f"{edition}-build" / "html", out / edition)
    (out / "index.html").write_text(LANDING, encoding="utf-8")
    return [line for run in runs.values() for line in run.stderr.splitlines() if "WARNING" in line]


# -- the internal links ---------------------------------------------------------------------------

class _Links(HTMLParser):
    def __init__(self):
        super().__init__()
        self.links: list[str] = []
        self.anchors: set[str] = set()

    def handle_starttag(self, tag, attrs):
        for name, value in attrs:
            if name in ("id", "name") and value:
                self.anchors.add(value)
            if name in ("href", "src") and value and tag != "base":
                self.links.append(value)


def _parse(path: Path) -> _Links:
    parser = _Links()
    parser.feed(path.read_text(encoding="utf-8", errors="replace"))
    return parser


def broken_links(html: Path) -> list[str]:
    """Every internal link of the HTML under ``html`` whose file, or ``#anchor`` in it, is missing."""
    pages, bad = {}, []
    for page in sorted(html.rglob("*.html")):
        pages[page] = _parse(page)
    for page, parsed in pages.items():
        for link in parsed.links:
            parts = urlsplit(link)
            if parts.scheme or link.startswith("//"):
                continue
            target = (page.parent / unquote(parts.path)).resolve() if parts.path else page
            if target.is_dir():
                target = target / "index.html"
            where = f"{page.relative_to(html)}: {link}"
            if not target.exists():
                bad.append(f"{where} (no {target.name})")
            elif parts.fragment and target.suffix == ".html":
                anchors = (pages.get(target) or _parse(target)).anchors
                if unquote(parts.fragment) not in anchors:
                    bad.append(f"{where} (no #{parts.fragment} in {target.name})")
    return bad


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--out", type=Path, default=SITE / "_build" / "html")
    parser.add_argument("--check-only", action="store_true")
    args = parser.parse_args(argv)
    if not args.check_only:
        t0 = time.perf_counter()
        warnings = build(args.out)
        print("\n".join(warnings[:50]))
        print(f"built {args.out} in {time.perf_counter() - t0:.0f} s ({len(warnings)} Sphinx warnings)")
    bad = broken_links(args.out)
    print("\n".join(bad[:100]))
    pages = sum(1 for _ in args.out.rglob("*.html"))
    print(f"{pages} pages, {len(bad)} broken internal links" + ("" if bad else f": open {args.out / 'index.html'}"))
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
