"""Research experiments: each folder holds a script, its configs and its results.

Speed and scale benchmarks live in ``bench/``; what an experiment measures about
learning lives here, one study per folder (``experiments/<name>/``), run with
``python -m experiments.<name>.run``. What the studies share (their YAML configs, the
demo's pipeline on a shared warm start, held-out evaluation, table formatting) is the
public module ``experiments.common``; a study never imports another study's script.
"""
