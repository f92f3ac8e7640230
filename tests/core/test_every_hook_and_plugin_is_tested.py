"""Every hook has a test whose own plugin implements it, and every installed plugin has a test that
imports it or names it (datasette keeps the same check on its hooks).

A hook is covered by a plugin defined in a test -- ``def register_x(...)`` in a test module -- beyond
the registry mechanics of ``tests/core/test_plugins.py``; ``tests/plugins/test_third_party_plugin.py``
uses them all on a real server. A plugin is covered by a test module that imports its module (or one
inside its package) or names its entry point in quotes.
"""

from __future__ import annotations

import re
import tomllib
from pathlib import Path

from kvgate.core import hookspecs

ROOT = Path(__file__).resolve().parents[2]
MECHANICS_ONLY = {"tests/core/test_plugins.py", "tests/core/test_packaging.py",
                  "tests/core/test_every_hook_and_plugin_is_tested.py"}


def test_sources() -> dict[str, str]:
    texts = {}
    for path in sorted((ROOT / "tests").rglob("*.py")):
        relative = str(path.relative_to(ROOT))
        if relative not in MECHANICS_ONLY:
            texts[relative] = path.read_text()
    return texts


test_sources.__test__ = False  # a helper, not a test


def hooks_without_a_test(hooks: list[str], texts: dict[str, str]) -> list[str]:
    return [hook for hook in hooks if not any(re.search(rf"def {hook}\(", text) for text in texts.values())]


def package_of(target: str) -> str:
    """The module an entry point names, or its package when it names a module inside one."""
    head, _, last = target.rpartition(".")
    return head if last.endswith(("plugin", "cli", "gauges")) else target


def plugins_without_a_test(entry_points: dict[str, str], texts: dict[str, str]) -> list[str]:
    missing = []
    for name, target in entry_points.items():
        module = re.compile(re.escape(package_of(target)) + r"(?![\w])")
        if not any(module.search(text) or f'"{name}"' in text for text in texts.values()):
            missing.append(f"{name} ({target})")
    return missing


def test_every_hook_is_implemented_by_a_plugin_in_a_test():
    hooks = sorted(name for name in dir(hookspecs) if name.startswith("register_"))
    missing = hooks_without_a_test(hooks, test_sources())
    assert not missing, f"hooks no test plugin implements: {missing}"


def test_every_installed_plugin_has_a_test():
    project = tomllib.loads((ROOT / "pyproject.toml").read_text())
    missing = plugins_without_a_test(project["project"]["entry-points"]["kvgate"], test_sources())
    assert not missing, f"plugins no test imports or names: {missing}"


def test_the_checks_see_what_is_missing():
    texts = {"tests/a.py": "from kvgate.plugins.alpha import x\n    def register_dialects(register):\n",
             "tests/b.py": 'disabled=["beta"]'}
    assert hooks_without_a_test(["register_dialects", "register_services"], texts) == ["register_services"]
    entry_points = {"alpha": "kvgate.plugins.alpha", "beta": "kvgate.plugins.b", "gamma": "kvgate.models.gamma.plugin",
                    "alphabet": "kvgate.plugins.alphabet"}
    assert plugins_without_a_test(entry_points, texts) == ["gamma (kvgate.models.gamma.plugin)",
                                                           "alphabet (kvgate.plugins.alphabet)"]
