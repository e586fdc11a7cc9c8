"""Helpers of the course's chapters, out of the notebooks' sight (one module per chapter).

A chapter's cell shows a call and its result; what the call does (a training run measured on
every rank, a table printed, a figure drawn) lives here, readable beside the notebook. Nothing
in the engine imports these modules (they sit on the tools floor, docs/ARCHITECTURE.md).
"""
