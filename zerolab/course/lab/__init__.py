"""The visual lab: widgets and pictures over real engines on real ranks.

Four modes (chapter 12, ``notebooks/12_visual_lab.ipynb``):

* **Basic**: who holds which shard of each giant (parameters, gradients, optimizer states)
  at each ZeRO stage, read from the tensors of a real engine on N ranks (:func:`holdings`).
* **Core**: one training step played back from the engine's ledger (every collective) and
  timeline (what each rank spent its time on), with the bytes each rank held after every
  collective (:func:`step_trace`, :func:`moved`). The collectives are DeepSpeed's for the config
  (stages 1-2: each bucket all-reduced, one all-gather after the step); at stages 1-2 the paper's
  reduce-scatter is an option (zerolab's ``ideal_reduce_scatter`` switch), labelled as such.
* **Application**: a model size, a GPU count, a GPU memory and an interconnect in; which
  configurations fit and how fast out, from :mod:`zerolab.tools.simulate` and DeepSpeed's
  estimators in :mod:`zerolab.tools.estimate` (:func:`plan`).
* **Extension**: offload, what lives where and when: a real engine with its optimizer
  states on the device, in host memory or on NVMe (and at stage 3 its parameter shards too),
  the bytes each rank keeps in each place (``engine.memory(where)``), and one step's timeline
  with the host optimizer step, sub-group by sub-group, and every NVMe read and write
  (:func:`placement`). At stage 3 it also shows each parameter gather and release, and how many
  gathers were prefetched from the previous step's trace (DeepSpeed's rule: at each module's
  fetch, the next groups while fewer than min(``stage3_max_live_parameters`` - available,
  ``stage3_prefetch_bucket_size``) elements are taken). Its second part is ZeRO++ on a crew in
  virtual nodes (``zerolab.Crew(4, nodes=2)``): ``zero_hpz_partition_size``,
  ``zero_quantized_weights``, ``zero_quantized_gradients`` and the micro-steps per step, the
  bytes each rank sent inside its node and across nodes (the ledger, ``Ledger.by_link()``'s
  filing) beside :func:`zerolab.tools.simulate.simulate`'s formula, and hpZ's secondary shards
  (``engine.memory()``) beside 2Ψ/h (:func:`links`).

The lab runs engines only through zerolab's public entry points (``zerolab.Crew``,
``zerolab.initialize``, ``engine.memory()``, ``engine.ledger``, ``engine.timeline``) and reads the
stage's buffers to say *where* each byte lives; it changes nothing in them. The gathering
functions return plain dataclasses (tested on their own, ``tests/test_lab.py``); the
``draw_*`` functions turn them into matplotlib figures; the ``*_widget`` functions wire
ipywidgets controls to both. matplotlib and ipywidgets are imported only when drawing.

One module per mode: ``basic.py``, ``core.py``, ``application.py``, ``extension.py`` (and its ZeRO++
part, ``zeropp.py``); what they
share (the lab's model and config, a pool of crews, figure helpers) is in ``common.py``.
"""
from __future__ import annotations

from .application import MODELS, Plan, PlanRow, application_widget, draw_plan, plan
from .basic import Holdings, basic_widget, draw_holdings, holdings
from .common import (BUCKET, GIANT_NAMES, GIANTS, LAB_MODEL, MICRO_BATCH, PRECISIONS, CrewPool, lab_box,
                     lab_config, lab_model, pattern)
from .core import Collective, MemorySample, StepTrace, core_widget, draw_step, moved, step_trace
from .extension import (OFFLOAD_DEVICES, PLACE_NAMES, PLACES, SUB_GROUP_SIZES, Placement, draw_placement,
                        extension_widget, offload_config, placement)
from .zeropp import LAYOUTS, Links, draw_links, hpz_choices, links, zeropp_config, zeropp_model, zeropp_widget

__all__ = ["GIANTS", "GIANT_NAMES", "PRECISIONS", "LAB_MODEL", "MICRO_BATCH", "BUCKET", "CrewPool", "lab_config",
           "lab_model", "pattern", "Holdings", "holdings", "Collective", "MemorySample", "StepTrace", "step_trace",
           "moved",
           "MODELS", "PlanRow", "Plan", "plan", "draw_holdings", "draw_step", "draw_plan", "basic_widget",
           "core_widget", "application_widget", "OFFLOAD_DEVICES", "PLACES", "PLACE_NAMES", "SUB_GROUP_SIZES",
           "offload_config", "Placement", "placement", "draw_placement", "extension_widget", "lab_box",
           "LAYOUTS", "Links", "links", "draw_links", "hpz_choices", "zeropp_config", "zeropp_model", "zeropp_widget"]
