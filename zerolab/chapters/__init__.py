"""Helpers of the course's chapters, one small module per chapter (``ch05.py`` for chapters 5
and 5b): the runs a chapter sends to its ranks, its tables and its figures, so that a notebook
cell shows a call and its result. Course code, not the engine: nothing in ``zerolab`` imports it."""
