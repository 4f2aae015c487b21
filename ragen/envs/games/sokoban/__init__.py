"""Sokoban: room generator, optimal solver, level files and the environment."""

from .env import SYMBOL_SETS, SokobanEnv, solve
from .generator import generate_room
from .level_files import builtin_level_files, format_levels, load_levels, parse_levels, save_levels
from .room import ACTION_ALIASES, ACTION_NAMES, Room
from .solver import solve_room

__all__ = [
    "ACTION_ALIASES",
    "ACTION_NAMES",
    "SYMBOL_SETS",
    "Room",
    "SokobanEnv",
    "builtin_level_files",
    "format_levels",
    "generate_room",
    "load_levels",
    "parse_levels",
    "save_levels",
    "solve",
    "solve_room",
]
