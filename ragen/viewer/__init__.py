"""``ragen view``: a static, offline HTML site of a run folder (docs/VIEWER.md).

Modules, one job each: :mod:`.load` (run folders of the three kinds -> one model),
:mod:`.reasoning_stats` (thought statistics per step), :mod:`.pictures` (observation
pictures from the env's ``render("rgb")`` tiles), :mod:`.charts` (SVG curves),
:mod:`.site` (the pages) and :mod:`.cli` (the command).
"""

from .site import build_site

__all__ = ["build_site"]
