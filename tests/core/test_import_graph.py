"""The host is small: nothing under ``core/`` imports a concrete feature, and no concrete feature
hides in ``core/``. No files of core/, adapters/, dialects/, models/ or plugins/ import each other
around a cycle.

The import graph is read from the source with ``ast`` (every ``import`` and ``from ... import``,
at module level or inside functions), so a lazy import inside a function counts too.
"""

from __future__ import annotations

import ast
import re
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
FEATURE_PACKAGES = ("kvgate.plugins", "kvgate.dialects", "kvgate.models", "kvgate.adapters")


def imported_modules(path: Path) -> set[str]:
    tree = ast.parse(path.read_text(), filename=str(path))
    names: set[str] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            names.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            names.add(node.module)
            names.update(f"{node.module}.{alias.name}" for alias in node.names)
    return names


def core_files() -> list[Path]:
    return sorted((ROOT / "core").rglob("*.py"))


def test_core_imports_no_concrete_feature():
    offenders = []
    for path in core_files():
        for name in imported_modules(path):
            if name.startswith(FEATURE_PACKAGES):
                offenders.append(f"{path.relative_to(ROOT)} imports {name}")
    assert not offenders, "\n".join(offenders)


def test_the_import_graph_check_sees_lazy_imports(tmp_path):
    sample = tmp_path / "sample.py"
    sample.write_text("def f():\n    from kvgate.models.embedded import path\n    import kvgate.plugins.x\n")
    assert {"kvgate.models.embedded", "kvgate.plugins.x"} <= imported_modules(sample)


# Names of concrete features that must live in their plugins: the built-in tiers, dialects,
# grammar engine and architectures. Core may mention them in docstrings and comments only.
CONCRETE_NAMES = re.compile(
    r"""["'](ssd|device|chatml_json|glm_xml|deepseek_dsml|llguidance|llama|qwen2|deepseek|glm)["']"""
)


def code_without_docstrings(path: Path) -> str:
    tree = ast.parse(path.read_text())
    for node in ast.walk(tree):
        body = getattr(node, "body", None)
        if isinstance(body, list) and body and isinstance(body[0], ast.Expr) \
                and isinstance(body[0].value, ast.Constant) and isinstance(body[0].value.value, str):
            body[0] = ast.Pass()
    return ast.unparse(tree)


# The usage split of prompt tokens keeps the metric label values "device" (resident role) and "ssd"
# (backup role) that existing dashboards read; they label roles and never select a tier.
ROLE_LABELS = {"core/observe/metrics.py": {"'device'", "'ssd'"}}


def test_core_names_no_builtin_feature_in_code():
    offenders = []
    for path in core_files():
        relative = str(path.relative_to(ROOT))
        for match in CONCRETE_NAMES.finditer(code_without_docstrings(path)):
            if match.group(0) not in ROLE_LABELS.get(relative, ()):
                offenders.append(f"{relative}: {match.group(0)}")
    assert not offenders, "\n".join(offenders)


def test_core_holds_no_tier_dialect_or_architecture_module():
    names = {path.stem for path in core_files()}
    assert not names & {"ssd_tier", "ssd_store", "manifest", "chunk_files", "device", "grammars_tags"}
    assert not any(name.startswith(("gguf", "llama", "safetensors")) for name in names)


# No import cycles between files. Each file is a node named by its dotted module name (a package
# is its __init__); each import statement, at module level or inside a function, is an edge.
# ``from x import y`` points at ``x.y`` when that is a module and at ``x`` otherwise.
GRAPH_FOLDERS = {"core": "kvgate.core", "adapters": "kvgate.adapters", "dialects": "kvgate.dialects",
                 "models": "kvgate.models", "plugins": "kvgate.plugins"}


def module_names(root: Path, folders: dict[str, str]) -> dict[str, Path]:
    modules = {}
    for folder, package in folders.items():
        for path in (root / folder).rglob("*.py"):
            parts = path.relative_to(root / folder).with_suffix("").parts
            if parts[-1] == "__init__":
                parts = parts[:-1]
            modules[".".join([package, *parts])] = path
    return modules


def import_targets(module: str, path: Path, known: set[str]) -> set[str]:
    package = module if path.name == "__init__.py" else module.rpartition(".")[0]
    targets: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text(), filename=str(path))):
        if isinstance(node, ast.Import):
            targets.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                anchor = package.split(".")[: len(package.split(".")) - node.level + 1]
                base = ".".join([*anchor, *([base] if base else [])])
            for alias in node.names:
                targets.add(f"{base}.{alias.name}" if f"{base}.{alias.name}" in known else base)
    return targets & known - {module}


def import_graph(root: Path, folders: dict[str, str]) -> dict[str, set[str]]:
    modules = module_names(root, folders)
    return {name: import_targets(name, path, set(modules)) for name, path in modules.items()}


def import_cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    """The strongly connected components of more than one module (Tarjan's algorithm)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    cycles: list[list[str]] = []

    def visit(node: str) -> None:
        index[node] = low[node] = len(index)
        stack.append(node)
        for target in sorted(graph[node]):
            if target not in index:
                visit(target)
                low[node] = min(low[node], low[target])
            elif target in stack:
                low[node] = min(low[node], index[target])
        if low[node] == index[node]:
            component = []
            while not component or component[-1] != node:
                component.append(stack.pop())
            if len(component) > 1:
                cycles.append(sorted(component))

    for node in sorted(graph):
        if node not in index:
            visit(node)
    return sorted(cycles)


def test_no_import_cycles_between_files():
    cycles = import_cycles(import_graph(ROOT, GRAPH_FOLDERS))
    assert not cycles, "import cycles:\n" + "\n".join(" <-> ".join(cycle) for cycle in cycles)


def test_the_cycle_check_sees_a_cycle_through_a_lazy_import(tmp_path):
    package = tmp_path / "pkg"
    package.mkdir()
    (package / "__init__.py").write_text("from kvgate.pkg import a\n")
    (package / "a.py").write_text("from kvgate.pkg.b import helper\n")
    (package / "b.py").write_text("def helper():\n    from . import a\n")
    (package / "c.py").write_text("import kvgate.pkg\n")
    graph = import_graph(tmp_path, {"pkg": "kvgate.pkg"})
    assert graph["kvgate.pkg.b"] == {"kvgate.pkg.a"}  # the lazy, relative import
    assert graph["kvgate.pkg.c"] == {"kvgate.pkg"}  # a package import is its __init__
    assert import_cycles(graph) == [["kvgate.pkg.a", "kvgate.pkg.b"]]


# The loop that drives a sequence through the engine (await its messages from a queue, cancel it
# when the consumer leaves first) is written once: kvgate.core.engine.sequence_run.SequenceRun.
ENGINE_MESSAGES = {"EngineMessage", "TokenOut", "PrefillDone", "SequenceDone"}


def awaits_a_queue(function: ast.AsyncFunctionDef) -> bool:
    """``await queue.get()`` or ``await asyncio.wait_for(queue.get(), ...)`` inside ``function``."""
    return any(isinstance(call, ast.Call) and isinstance(call.func, ast.Attribute) and call.func.attr == "get"
               and not call.args for node in ast.walk(function) if isinstance(node, ast.Await)
               for call in ast.walk(node))


def engine_message_loops(path: Path) -> list[str]:
    """The async functions of ``path`` that await a queue and name an engine message."""
    loops = []
    for node in ast.walk(ast.parse(path.read_text(), filename=str(path))):
        if isinstance(node, ast.AsyncFunctionDef) and awaits_a_queue(node):
            if {n.id for n in ast.walk(node) if isinstance(n, ast.Name)} & ENGINE_MESSAGES:
                loops.append(f"{path}:{node.lineno} {node.name}")
    return loops


def test_one_loop_drives_the_engine():
    loops = [loop for path in module_names(ROOT, GRAPH_FOLDERS).values() for loop in engine_message_loops(path)]
    assert len(loops) == 1 and f"{ROOT}/core/engine/sequence_run.py:" in loops[0], "\n".join(loops)


def test_the_engine_loop_check_sees_a_hand_written_loop(tmp_path):
    sample = tmp_path / "loop.py"
    sample.write_text(
        "async def events(queue):\n"
        "    while True:\n"
        "        message = await asyncio.wait_for(queue.get(), timeout=5)\n"
        "        if isinstance(message, SequenceDone):\n"
        "            return\n"
        "async def kv_events(queue):\n"
        "    yield await queue.get()\n")
    assert [loop.rsplit(" ", 1)[1] for loop in engine_message_loops(sample)] == ["events"]
