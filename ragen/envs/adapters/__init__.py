"""Worlds of other libraries behind the ragen env contract, each library optional.

gymnasium's discrete envs (``gymnasium_env``), TextArena's single-player games
(``textarena_env``) and two-player games against a fixed opponent
(``textarena_two_player``, its per-game knowledge in ``textarena_duels``), TextWorld's
generated text adventures (``textworld_env``), reasoning-gym's task generators
(``reasoning_gym_env``) and any OpenEnv server (``openenv_client``). The text games share
one base class, :class:`~ragen.envs.adapters.text_game.TextGameEnv`. Each module
imports its library only when one of its envs is built.
"""
