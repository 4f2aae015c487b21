"""docs/ARCHITECTURE.md's import table is the code's: every package's imports inside
ragen are the ones its row lists, the rows are layers (each imports only rows above it),
and no two modules import each other in a loop.

Imports are read from the source (``ast``), at the top of a module or inside a
function, so a deferred import counts like any other. An import inside a function is
there for a reason, and says it: one of ragen (or of the standard library) carries a
``# deferred: why`` comment on its line or in the comments just above its group of
imports (what it would load too early: torch, transformers, an optional library).
A third-party package imported inside a function is its own reason (torch,
transformers, peft, Ray, an env library: heavy or optional).
"""

from __future__ import annotations

import ast
import re
import sys
from collections import defaultdict
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
PACKAGE = ROOT / "ragen"
DOC = ROOT / "docs" / "ARCHITECTURE.md"

# No package imports a row below it and no modules import each other; an exception would
# be listed here with the reason it cannot be removed yet.
KNOWN_UPWARD: set[tuple[str, str]] = set()
KNOWN_LOOP: set[str] = set()
# Imports inside functions that say nothing of why (none left; an entry would name the
# module and the import, with the reason it cannot move yet)
KNOWN_SILENT: set[tuple[str, str]] = set()


def _module_name(path: Path) -> str:
    name = ".".join(path.relative_to(ROOT).with_suffix("").parts)
    return name.removesuffix(".__init__")


MODULES = {_module_name(p): p for p in sorted(PACKAGE.rglob("*.py"))}


def _unit(module: str) -> str:
    """``ragen.agent.rollout`` -> ``agent``; ``ragen.errors`` -> ``errors``."""
    return module.split(".")[1]


def _imports(module: str) -> set[str]:
    """The ragen modules ``module`` imports (``from pkg import sub`` names ``pkg.sub``)."""
    path = MODULES[module]
    found = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Import):
            found |= {a.name for a in node.names}
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                base = module.split(".")
                base = base[: len(base) - node.level + (path.name == "__init__.py")]
                origin = ".".join(base + ([node.module] if node.module else []))
            else:
                origin = node.module or ""
            for alias in node.names:
                sub = f"{origin}.{alias.name}"
                found.add(sub if sub in MODULES else origin)
    return {m for m in found if m.startswith("ragen.") and m != module}


GRAPH = {module: _imports(module) for module in MODULES if module != "ragen"}


def _table() -> list[tuple[str, list[str]]]:
    """``[(unit, [listed imports])]`` from the table, in its order."""
    text = DOC.read_text()
    section = text.split("## Packages and what they may import", 1)[1].split("\n## ", 1)[0]
    rows = []
    for line in section.splitlines():
        cells = [c.strip() for c in line.strip().strip("|").split(" | ")]
        if len(cells) == 4 and cells[0].startswith("`ragen/"):
            unit = cells[0].strip("`").removeprefix("ragen/").removesuffix(".py")
            rows.append((unit, re.findall(r"`([\w.]+)`", cells[2])))
    return rows


def test_every_package_has_a_row_and_imports_exactly_what_it_lists():
    rows = _table()
    units = [unit for unit, _ in rows]
    assert sorted(units) == sorted({_unit(m) for m in GRAPH}), "a package without a row"
    for unit, listed in rows:
        actual = {m for src, targets in GRAPH.items() if _unit(src) == unit for m in targets}
        actual = {m for m in actual if _unit(m) != unit}
        covered = {m for m in actual for entry in listed if m == f"ragen.{entry}"
                   or m.startswith(f"ragen.{entry}.")}  # fmt: skip
        assert actual == covered, (
            f"docs/ARCHITECTURE.md: ragen/{unit} imports {sorted(actual - covered)}, which "
            "its row does not list"
        )
        for entry in listed:
            assert any(m == f"ragen.{entry}" or m.startswith(f"ragen.{entry}.") for m in actual), (
                f"docs/ARCHITECTURE.md: ragen/{unit}'s row lists `{entry}`, which it no "
                "longer imports"
            )


def test_the_rows_are_layers():
    order = [unit for unit, _ in _table()]
    for unit, listed in _table():
        for entry in listed:
            above = order.index(entry.split(".")[0]) < order.index(unit)
            assert above or (unit, entry) in KNOWN_UPWARD, (
                f"ragen/{unit} imports `{entry}`, a row below it: an arrow up the layers"
            )


def test_no_import_loops():
    """Strongly connected modules (Tarjan), apart from the known loop."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    loops: list[set[str]] = []

    def visit(module: str) -> None:
        index[module] = low[module] = len(index)
        stack.append(module)
        for target in GRAPH.get(module, ()):
            if target not in GRAPH:
                continue
            if target not in index:
                visit(target)
                low[module] = min(low[module], low[target])
            elif target in stack:
                low[module] = min(low[module], index[target])
        if low[module] == index[module]:
            members = set()
            while True:
                member = stack.pop()
                members.add(member)
                if member == module:
                    break
            if len(members) > 1:
                loops.append(members)

    for module in GRAPH:
        if module not in index:
            visit(module)
    new = [sorted(loop) for loop in loops if not loop <= KNOWN_LOOP]
    assert not new, f"modules that import each other: {new}"


def test_the_table_reader_sees_an_arrow_it_is_not_told_about():
    """The checks above would pass on an empty table reader; they must not."""
    rows = dict(_table())
    assert rows["envs"] == ["cli_utils", "errors"] and "agent" not in rows["envs"]
    assert "ragen.errors" in GRAPH["ragen.config_fields"]
    assert "ragen.trainer.metrics_logger" in GRAPH["ragen.viz.report"]
    parent = defaultdict(set)
    for src, targets in GRAPH.items():
        for target in targets:
            parent[target].add(src)
    assert "ragen.agent.evaluate" in parent["ragen.run_layout"]


def _deferred_imports(path: Path) -> list[tuple[int, str]]:
    """``(line, module)`` of each import inside a function of ``path`` that must say why
    it is deferred: a ragen module (absolute or relative) or a standard-library one."""
    found = []
    for fn in ast.walk(ast.parse(path.read_text())):
        if not isinstance(fn, (ast.FunctionDef, ast.AsyncFunctionDef)):
            continue
        for node in ast.walk(fn):
            if isinstance(node, ast.ImportFrom):
                name = "." * node.level + (node.module or "")
            elif isinstance(node, ast.Import):
                name = node.names[0].name
            else:
                continue
            top = name.split(".")[0]
            if name.startswith(".") or top == "ragen" or top in sys.stdlib_module_names:
                found.append((node.lineno, name))
    return found


def _says_why(lines: list[str], lineno: int) -> bool:
    """Whether the import on line ``lineno`` (1-based) has a ``deferred:`` comment on
    its line or above it: the walk up passes the other imports, comments and blank lines
    of its group and stops at the first line of other code."""
    if "deferred:" in lines[lineno - 1]:
        return True
    for line in reversed(lines[: lineno - 1]):
        text = line.strip()
        if "# deferred:" in text or text.startswith("#") and "deferred:" in text:
            return True
        if text and not text.startswith(("#", "import ", "from ")):
            return False
    return False


def test_imports_inside_functions_say_why():
    silent = []
    for path in MODULES.values():
        lines, where = path.read_text().splitlines(), str(path.relative_to(ROOT))
        for lineno, name in _deferred_imports(path):
            if not _says_why(lines, lineno) and (where, name) not in KNOWN_SILENT:
                silent.append(f"{where}:{lineno}: {name}")
    assert not silent, (
        "imports inside functions without a `# deferred: why` comment (move them to the "
        "module's top unless they defer torch, transformers or an optional library):\n"
        + "\n".join(silent)
    )


def test_the_deferred_import_check_sees_a_silent_one(tmp_path):
    """The check above would pass on a reader that found no imports; it must not."""
    sample = tmp_path / "sample.py"
    sample.write_text(
        "def a():\n    import json\n\n"
        "def b():\n    # deferred: imports torch\n    import torch\n\n    from ragen import algo\n\n"
        "def c():\n    from ragen.models import lora  # deferred: imports torch\n"
        "    from ragen.sft import trainer\n"
    )
    lines = sample.read_text().splitlines()
    verdicts = {name: _says_why(lines, n) for n, name in _deferred_imports(sample)}
    assert verdicts == {"json": False, "ragen": True, "ragen.models": True, "ragen.sft": True}


def test_a_module_over_600_lines_says_why_at_its_top():
    """A module past 600 lines opens with a ``# Over 600 lines: <why>`` comment; the
    others are split (a long module hides its parts)."""
    long = []
    for path in sorted((ROOT / "ragen").rglob("*.py")):
        lines = path.read_text(encoding="utf-8").splitlines()
        if len(lines) > 600 and not lines[0].startswith("# Over 600 lines: "):
            long.append(f"{path.relative_to(ROOT)} ({len(lines)} lines)")
    assert not long, f"modules over 600 lines without a reason at their top: {long}"
