"""The environments written here, each a subclass of :class:`ragen.envs.base.Env`.

Registered by name in :mod:`ragen.envs.registry` (``ragen envs`` lists them): the
two-armed bandit (``bandit``), Sokoban (``sokoban/``: generator, solver, level files),
FrozenLake (``frozen_lake``), countdown (``countdown``, with its expression parser
``arithmetic``), sudoku, 2048 (``game2048``), the 2x2 Rubik's cube (``cube2x2``) and
Sokoban and FrozenLake seen as pictures (``visual_grids``). ``rgb`` and ``glyphs`` are
the small drawing kit their ``render("rgb")`` shares. No game imports torch.
"""
