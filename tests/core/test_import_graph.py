"""The host is small: nothing under ``core/`` imports a concrete feature, and no concrete feature
hides in ``core/``.

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
