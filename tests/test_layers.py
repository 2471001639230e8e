"""The package's import layers: every import (module-level, deferred or for typing only)
points down the table below, never up or sideways, so the packages form an acyclic
stack of nine floors (docs/architecture.md, "Packages"). A new module joins a floor
here, or the test says where it is missing."""

from __future__ import annotations

import ast
from pathlib import Path

PACKAGE = Path(__file__).resolve().parent.parent / "server" / "parley"

# Lowest first; a module may import its own floor's package and any floor below.
FLOORS: list[set[str]] = [
    # the leaves: core is pure (numpy, no I/O, no models); weights, the offline bundle
    {"parley", "parley.logs", "parley.core", "parley.weights"},
    {"parley.protocol", "parley.models"},  # the wire types; inference
    {"parley.workers", "parley.client"},  # the model threads; the client SDK
    # sessions over the workers; recordings over them; what the pipeline feeds (runtime:
    # webhooks, metrics, the measured capacity)
    {"parley.sessions", "parley.recordings", "parley.runtime"},
    {"parley.transport", "parley.serving_config", "parley.cli_parser"},
    {"parley.config"},  # every settings section, read from flags and environment
    # the composition root: one pipeline (service), and what it is given (loading)
    {"parley.service", "parley.loading"},
    # siblings over the root: `parley serve` under uvicorn, Ray Serve replicas,
    # `parley transcribe` in-process
    {"parley.app", "parley.cluster", "parley.local"},
    {"parley.cli"},  # `parley` and `python -m parley`
]
# Entry points that belong to a unit they are not named after.
UNIT_OF = {"parley.__main__": "parley.cli"}


def _unit(module: str) -> str:
    """The floor's unit a module belongs to: its subpackage of parley, or itself."""
    return UNIT_OF.get(module, ".".join(module.split(".")[:2]))


def _floor_of(unit: str) -> int:
    for number, units in enumerate(FLOORS):
        if unit in units:
            return number
    raise AssertionError(f"{unit} is on no floor of tests/test_layers.py")


def _modules() -> dict[str, Path]:
    modules = {}
    for path in PACKAGE.rglob("*.py"):
        parts = ("parley", *path.relative_to(PACKAGE).with_suffix("").parts)
        if parts[-1] == "__init__":
            parts = parts[:-1]
        modules[".".join(parts)] = path
    return modules


def _imports(module: str, path: Path) -> set[str]:
    """Every parley module or package this one names in an import, anywhere in it."""
    is_package = path.name == "__init__.py"
    found = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Import):
            found.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                base = module.split(".")
                base = base if is_package else base[:-1]
                base = base[: len(base) - (node.level - 1)]
                target = ".".join([*base, *([node.module] if node.module else [])])
            else:
                target = node.module or ""
            found.add(target)
            found.update(f"{target}.{alias.name}" for alias in node.names)
    return {name for name in found if name == "parley" or name.startswith("parley.")}


def test_every_import_points_down_the_floors():
    modules = _modules()
    upward = []
    for module, path in sorted(modules.items()):
        floor = _floor_of(_unit(module))
        for target in sorted(_imports(module, path)):
            while target not in modules:  # `from parley.x import name`: name is no module
                target = target.rpartition(".")[0]
            if _unit(target) == _unit(module):
                continue
            target_floor = _floor_of(_unit(target))
            if target_floor > floor or (target_floor == floor and _unit(target) != "parley"):
                upward.append(f"{module} (floor {floor}) imports {target} (floor {target_floor})")
    assert not upward, "\n".join(upward)


def test_the_stack_has_nine_floors():
    assert len(FLOORS) == 9


def test_every_unit_sits_on_a_floor_and_none_is_empty():
    units = {_unit(module) for module in _modules()}
    for unit in units:
        _floor_of(unit)
    named = set().union(*FLOORS)
    assert named == units, f"floors name what the package lacks: {sorted(named - units)}"


def test_the_client_and_core_hold_to_their_package_docstrings():
    """The client imports only the protocol and core (no torch, no server); core imports
    nothing of parley's but core."""
    allowed = {"parley.client": {"parley.protocol", "parley.core"}, "parley.core": set()}
    modules = _modules()
    for module, path in modules.items():
        unit = _unit(module)
        if unit not in allowed:
            continue
        for target in _imports(module, path):
            while target not in modules:
                target = target.rpartition(".")[0]
            assert _unit(target) in allowed[unit] | {unit}, f"{module} imports {target}"


MAX_MODULE_LINES = 350  # one job a module: past this it is doing two


def test_no_module_is_longer_than_the_bound():
    long = {
        str(path.relative_to(PACKAGE)): lines
        for path in sorted(PACKAGE.rglob("*.py"))
        if (lines := len(path.read_text().splitlines())) > MAX_MODULE_LINES
    }
    assert long == {}
