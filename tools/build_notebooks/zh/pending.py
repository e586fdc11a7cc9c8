"""The builders whose Chinese edition is not written yet, and why: the one place that says so.

Every builder in ``tools/build_notebooks/`` either has its Chinese in ``zh/<builder>.py`` or is
listed here (``tests/test_zh_edition.py`` checks that it is exactly one of the two, and prints
this list). Take a chapter off the list in the commit that adds its ``zh/<builder>.py``.
"""

PENDING = {}
