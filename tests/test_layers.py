"""The package's layering holds: a lower layer never imports a higher one."""

from __future__ import annotations

import ast
import pathlib

SRC = pathlib.Path(__file__).resolve().parent.parent / "src" / "minidb"

# Each layer may import only the layers listed for it (and itself). Modules at the package
# root (errors, _failpoints, _accelerators) are shared infrastructure every layer may use,
# except runtime, which stands alone so it can be reused by any asyncio program.
ALLOWED = {
    "runtime": set(),
    "protocol": {"errors", "_accelerators"},
    "wal": {"errors", "_failpoints", "_accelerators"},
    "store": {"errors", "_failpoints", "_accelerators", "protocol", "wal", "runtime"},
    "objstore": {"errors", "runtime"},
    "replication": {"errors", "_failpoints", "wal", "objstore", "runtime", "store"},
    "server": {
        "errors", "_failpoints", "_accelerators", "protocol", "wal", "store", "runtime",
        "objstore", "replication",
    },
    "client": {"errors", "protocol", "runtime"},
    "batch": {"errors", "_accelerators", "protocol", "client", "runtime", "objstore"},
    "up": {"errors", "server", "batch", "client", "objstore", "store", "wal", "protocol",
           "runtime"},
}


def _minidb_imports(path: pathlib.Path) -> set[str]:
    tree = ast.parse(path.read_text(), filename=str(path))
    found: set[str] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            names = [alias.name for alias in node.names]
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            names = [node.module] + [f"{node.module}.{a.name}" for a in node.names]
        else:
            continue
        for name in names:
            parts = name.split(".")
            # ``from minidb import __version__`` names package metadata, not a layer.
            if parts[0] == "minidb" and len(parts) > 1 and not parts[1].startswith("__"):
                found.add(parts[1])
    return found


def test_layers_lower_never_import_higher() -> None:
    """Every module of a layer imports only minidb layers that the table above allows."""
    problems = []
    for layer, allowed in ALLOWED.items():
        for path in sorted((SRC / layer).rglob("*.py")) if (SRC / layer).exists() else []:
            bad = _minidb_imports(path) - allowed - {layer}
            if bad:
                problems.append(f"{path.relative_to(SRC)} imports {sorted(bad)}")
    assert not problems, "\n".join(problems)


def test_layers_nothing_imports_up() -> None:
    """``minidb.up`` sits on top: no module outside it imports it (the CLI loads it by name)."""
    importers = [
        str(path.relative_to(SRC)) for path in sorted(SRC.rglob("*.py"))
        if "up" in _minidb_imports(path) and path.relative_to(SRC).parts[0] != "up"
    ]
    assert not importers, importers
