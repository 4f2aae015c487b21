"""``ragen view``: a static, offline HTML site of a run folder (docs/VIEWER.md).

Modules, one job each: :mod:`.load` (run folders of the three kinds -> one model; damaged
files skipped and said), :mod:`.data` (the data files the pages load, and what they
cannot read off a record: reasoning sections and facts checked), :mod:`.reasoning_stats`
(thought statistics per step), :mod:`.pictures` (observation pictures from the env's
``render("rgb")`` tiles), :mod:`.charts` (SVG charts), :mod:`.overview` (the overview's
sections), :mod:`.site` (the pages), :mod:`.synthetic` (a synthetic run for the benchmark
and tests) and :mod:`.cli` (the command).
"""

from .site import build_site

__all__ = ["build_site"]
