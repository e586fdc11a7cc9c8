#!/usr/bin/env python3
"""Write every chapter's notebooks from its builder (``chNN.py``), the same way for each.

    python tools/build_notebooks/build_all.py            # write the chapters whose cells changed
    python tools/build_notebooks/build_all.py --execute  # ... and run those (one at a time)
    python tools/build_notebooks/build_all.py ch02 ch03 --execute   # only these chapters

Unchanged notebooks, and their stored outputs, are left alone (see ``nbsource.py``).
"""
from __future__ import annotations

import argparse
import sys

import nbsource


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("chapters", nargs="*", help="builder names, e.g. ch00 (default: all)")
    parser.add_argument("--execute", action="store_true")
    parser.add_argument("--force", action="store_true")
    args = parser.parse_args(argv)
    flags = [f for f, on in (("--execute", args.execute), ("--force", args.force)) if on]
    for name in args.chapters or nbsource.builder_names():
        nbsource.main(nbsource.load_builder(name).NOTEBOOKS, flags)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
