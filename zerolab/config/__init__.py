"""DeepSpeed's JSON config, read into frozen dataclasses: the config layer's public face.

A DeepSpeed config is zerolab's interface: the user brings the file they already have. So the
defaults are DeepSpeed 0.19.8's *code* defaults (not its docs'), the batch triple is derived
exactly as DeepSpeed derives it, and nothing is silently ignored: a typo is an error naming the
nearest key, a DeepSpeed feature zerolab lacks is an error naming the feature, and a key that has
no effect in zerolab (it changes when or in what memory DeepSpeed works, never the numbers) is
accepted and listed by :meth:`Config.ignored_settings`.

The layer, from the bottom (each module imports only those before it):

* :mod:`zerolab.config.values` (the readers) and :mod:`zerolab.config.stages` (what each value of
  the ``stage`` key shards: ZeRO's P_os, P_os+g, P_os+g+p, which the memory formulas and the
  engine's stage table read too), side by side at the bottom;
* :mod:`zerolab.config.keys`: the table of every key and what zerolab does with it, and the
  readers that check a block against its table;
* :mod:`zerolab.config.types`: the dataclasses (every default's one home) and :class:`ConfigError`;
* :mod:`zerolab.config.parse`: :func:`load_config`, the strict reader the engine uses;
* :mod:`zerolab.config.explain`: :func:`zerolab.config.explain.explain_config`, the lenient reader behind
  ``zerolab explain`` (it explains any DeepSpeed 0.19.8 config, listing what zerolab does not
  implement instead of refusing it), and :func:`zerolab.config.explain.describe`;
* this module: every public name of the layer, where users import them from, and
  :meth:`Config.describe` (``zerolab.config.explain.describe``, given to the class here, above both, so
  that the dataclasses never import the module that describes them).
"""
from __future__ import annotations

from .parse import load_config
from .types import (BF16Config, Config, ConfigError, FP16Config, FrozenDict, OffloadConfig,
                           OptimizerConfig, SchedulerConfig, ZeroConfig, ZerolabConfig)
from .explain import describe as _describe

__all__ = ["Config", "ConfigError", "OptimizerConfig", "SchedulerConfig", "FP16Config", "BF16Config",
           "OffloadConfig", "ZeroConfig", "ZerolabConfig", "FrozenDict", "load_config"]

# ``config.describe()``: plain lines on what this config asks for and what zerolab does with it
# (backs ``zerolab explain``; written in zerolab.config.explain).
Config.describe = _describe
