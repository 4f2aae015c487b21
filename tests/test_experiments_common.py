"""The research studies under experiments/: each is a folder with its script, its YAML
config and its results; their shared helpers are one public module; configs resolve."""

from __future__ import annotations

import argparse
import ast
import importlib
from pathlib import Path

import pytest

from experiments.common import load_budget, parse_study_args
from ragen.errors import ConfigError
from ragen.recipes import BUDGETS

ROOT = Path(__file__).resolve().parent.parent
STUDIES = sorted(
    p.parent.name
    for p in (ROOT / "experiments").glob("*/run.py")
    if p.parent.name != "grids"  # the grid study has its own config module
)


def test_every_study_is_a_folder_with_its_results_and_no_study_imports_another():
    assert len(STUDIES) >= 17
    for name in STUDIES:
        folder = ROOT / "experiments" / name
        assert (folder / "results.md").is_file(), f"experiments/{name} has no results.md"
        tree = ast.parse((folder / "run.py").read_text())
        imported = {
            n.module for n in ast.walk(tree) if isinstance(n, ast.ImportFrom) and n.module
        } | {a.name for n in ast.walk(tree) if isinstance(n, ast.Import) for a in n.names}
        own = f"experiments.{name}"  # a study may have modules of its own
        others = {
            m
            for m in imported
            if m.startswith(("experiments.", "bench")) and m != own and not m.startswith(own + ".")
        }
        assert others <= {"experiments.common"}, f"experiments/{name} imports {others}"


@pytest.mark.parametrize(
    "name", [n for n in STUDIES if (ROOT / "experiments" / n / "config.yaml").is_file()]
)
def test_each_config_resolves_against_its_script(name, capsys):
    module = importlib.import_module(f"experiments.{name}.run")
    with pytest.raises(SystemExit) as done:
        module.main(["--print-config"])
    assert done.value.code == 0
    printed = capsys.readouterr().out
    assert printed.startswith(f"# {ROOT / 'experiments' / name / 'config.yaml'}")


def _parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser()
    p.add_argument("--seeds", type=int, nargs="+", default=[0])
    p.add_argument("--env", action="append", choices=("frozen_lake", "sokoban"))
    p.add_argument("--variant", action="append", required=True)
    return p


def _study(tmp_path: Path, text: str) -> str:
    (tmp_path / "config.yaml").write_text(text)
    return str(tmp_path / "run.py")


def test_the_config_gives_defaults_and_the_command_line_wins(tmp_path):
    study = _study(
        tmp_path,
        "seeds: [0, 1, 2]\nenv: [sokoban]\nvariant: ['a:', 'b:x=1']\n"
        "budget: {preset: full, sft_episodes: {sokoban: 8192}, env_groups: 32}\n",
    )
    args = parse_study_args(_parser(), [], study)
    assert args.seeds == [0, 1, 2] and args.env == ["sokoban"] and args.variant == ["a:", "b:x=1"]
    assert args.budget.env_groups == 32
    assert args.budget.sft_episodes == {**BUDGETS["classic"].sft_episodes, "sokoban": 8192}
    args = parse_study_args(_parser(), ["--env", "frozen_lake", "--variant", "c:"], study)
    assert args.env == ["frozen_lake"] and args.variant == ["c:"]  # replaced, not appended


@pytest.mark.parametrize(
    "text, message",
    [
        (
            "sedes: [1]\nvariant: ['a:']\n",
            "'sedes' is not an option of this study. Did you mean 'seeds'",
        ),  # fmt: skip
        ("env: [sokobn]\nvariant: ['a:']\n", "env: unknown value 'sokobn'. Did you mean 'sokoban'"),
        ("variant: ['a:']\nbudget: {env_group: 4}\n", "budget.env_group: not a budget field"),
        ("variant: ['a:']\nbudget: {preset: huge}\n", "budget.preset: unknown 'huge'"),
    ],
)
def test_a_bad_config_is_one_line_naming_the_key(tmp_path, text, message):
    with pytest.raises(ConfigError, match=message.replace("(", r"\(").replace(".", r"\.")):
        parse_study_args(_parser(), [], _study(tmp_path, text))


def test_a_missing_config_names_the_ones_there(tmp_path):
    study = _study(tmp_path, "variant: ['a:']\n")
    with pytest.raises(ConfigError, match="one of config"):
        parse_study_args(_parser(), ["--config", "nope"], study)


def test_budget_presets_merge_per_env_fields():
    toy = load_budget({"preset": "toy", "rl_steps": {"sokoban": 5}})
    assert toy.rl_steps == {**BUDGETS["toy"].rl_steps, "sokoban": 5}
    assert toy.env_groups == BUDGETS["toy"].env_groups
