"""The worker's parts talk through public, narrow interfaces (River's executor and its helpers):
no module of console.worker reaches into another object's private members, and the modules import
one another without a cycle -- TYPE_CHECKING imports included, since a cycle there is the same
coupling, only hidden from the interpreter. Both read the source (ast), so a breach fails here
even when nothing breaks at run time."""

from __future__ import annotations

import ast
from pathlib import Path

from tests.conftest import ROOT

WORKER = ROOT / "console" / "worker"
PACKAGE = "console.worker"


def _private(name: str) -> bool:
    return name.startswith("_") and not (name.startswith("__") and name.endswith("__"))


def private_uses(folder: Path) -> list[str]:
    """`x._name` where x is anything but `self` or `cls` (another object's, or another module's,
    private member), and `from m import _name`: one line each, file:line: what."""
    found: list[tuple[str, int, str]] = []
    for path in sorted(folder.glob("*.py")):
        for node in ast.walk(ast.parse(path.read_text(), filename=str(path))):
            if isinstance(node, ast.Attribute) and _private(node.attr) \
                    and not (isinstance(node.value, ast.Name) and node.value.id in ("self", "cls")):
                found.append((path.name, node.lineno, ast.unparse(node)))
            elif isinstance(node, ast.ImportFrom):
                found += [(path.name, node.lineno, f"from {node.module} import {alias.name}")
                          for alias in node.names if _private(alias.name)]
    return [f"{name}:{line}: {what}" for name, line, what in sorted(found)]


def import_graph(folder: Path, package: str = PACKAGE) -> dict[str, set[str]]:
    """Which module of the package imports which, wherever the import stands (module level,
    `if TYPE_CHECKING:`, inside a function)."""
    modules = {p.stem for p in folder.glob("*.py")}

    def target(name: str) -> str | None:
        if name == package:
            return "__init__"
        if name.startswith(package + "."):
            return name[len(package) + 1:].split(".", 1)[0]
        return None

    graph: dict[str, set[str]] = {}
    for path in sorted(folder.glob("*.py")):
        edges = graph.setdefault(path.stem, set())
        for node in ast.walk(ast.parse(path.read_text(), filename=str(path))):
            if isinstance(node, ast.Import):
                edges |= {t for alias in node.names if (t := target(alias.name)) is not None}
            elif isinstance(node, ast.ImportFrom):
                module = node.module or ""
                if node.level:  # relative: from the package itself
                    module = f"{package}.{module}" if module else package
                if (t := target(module)) is None:
                    continue
                if t == "__init__":
                    # `from console.worker import statements` names a module, not the package's API
                    edges |= {alias.name if alias.name in modules else "__init__" for alias in node.names}
                else:
                    edges.add(t)
        edges.discard(path.stem)
    return graph


def cycle(graph: dict[str, set[str]]) -> list[str] | None:
    """One import cycle (its modules in order, the first repeated at the end), or None."""
    done: set[str] = set()

    def walk(module: str, path: list[str]) -> list[str] | None:
        if module in path:
            return [*path[path.index(module):], module]
        if module in done:
            return None
        for imported in sorted(graph.get(module, ())):
            if (found := walk(imported, [*path, module])) is not None:
                return found
        done.add(module)
        return None

    for module in sorted(graph):
        if (found := walk(module, [])) is not None:
            return found
    return None


def test_no_worker_module_uses_a_private_member_of_another_object() -> None:
    assert private_uses(WORKER) == [], "give the other side a public method (console/worker/host.py)"


def test_the_worker_modules_import_one_another_without_a_cycle() -> None:
    graph = import_graph(WORKER)
    assert {"runner", "context", "heartbeat", "calls"} <= set(graph)
    found = cycle(graph)
    assert found is None, "import cycle: " + " -> ".join(found or [])


def test_the_helpers_know_the_runner_only_through_its_interface() -> None:
    graph = import_graph(WORKER)
    for helper in ("context", "heartbeat", "calls", "host"):
        assert not graph.get(helper, set()) & {"runner", "aio", "__init__"}, helper


# ------------------------------------------------------------------ the checks themselves


def test_the_checks_catch_what_they_are_for(tmp_path: Path) -> None:
    (tmp_path / "runner.py").write_text(
        "from console.worker.context import Context\n"
        "from console.worker import statements\n"
        "class Worker:\n"
        "    def go(self, lease):\n"
        "        self._log('ok')\n"
        "        self.worker._late()\n"
        "        lease.stopped._on = True\n"
        "        return self.__class__, statements.__name__\n")
    (tmp_path / "context.py").write_text(
        "from typing import TYPE_CHECKING\n"
        "from console.worker.calls import _Abandoned\n"
        "if TYPE_CHECKING:\n"
        "    from console.worker.runner import Worker\n")
    (tmp_path / "calls.py").write_text("")
    (tmp_path / "statements.py").write_text("")
    assert private_uses(tmp_path) == ["context.py:2: from console.worker.calls import _Abandoned",
                                      "runner.py:6: self.worker._late", "runner.py:7: lease.stopped._on"]
    graph = import_graph(tmp_path)
    assert graph["runner"] == {"context", "statements"}
    assert cycle(graph) == ["context", "runner", "context"]
    del graph["context"]
    assert cycle(graph) is None
