"""The docs' figures, rebuilt from the committed results files.

    python -m experiments.report            # rewrite every generated block in the docs
    python -m experiments.report --check    # exit 1 when a doc differs from its files

README.md, docs/RESULTS.md, docs/FINDINGS.md and experiments/findings/results.md hold
blocks between ``<!-- generated:NAME ARGS -->`` and ``<!-- /generated -->``; everything
outside them is hand-written prose and stays as it is. Each block is rendered by a
function of the results files under ``experiments/<name>/results/`` (grid studies, the
findings' sweeps, the demo over seeds), so no figure in a block is typed by hand:

* :mod:`.markers`: finding and filling the blocks of a page;
* :mod:`.gains`: a before/after gain per seed and pooled, with the interval the data allow
  (``ragen.stats``);
* :mod:`.sources`: reading results files and their provenance (command, device, commit,
  date: in the file, or in ``provenance.yaml`` for files written before they carried it);
* :mod:`.verdicts`: the rule that turns intervals into a finding's verdict;
* :mod:`.grids`, :mod:`.findings`, :mod:`.demo`, :mod:`.summary`: the blocks;
* :mod:`.blocks`: the names a page may use, and the pages.
"""
