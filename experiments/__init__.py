"""Research experiments: each folder holds a script, its configs and its results.

Speed and scale benchmarks live in ``bench/``; what an experiment measures about
learning lives here, one study per folder (``experiments/<name>/``), run with
``python -m experiments.<name>.run``.
"""
