"""Every name ``zerolab`` hands on, imported now (``zerolab/__init__.py`` loads them on first use).

The crew's forkserver preloads this module, so that its ranks start with the engine imported, as
before the package face became lazy, instead of each rank importing it again after the fork."""
import zerolab

zerolab._load_face()
