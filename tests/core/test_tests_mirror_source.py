"""tests/ mirrors the source: a folder for each top-level source folder and for each subpackage of
core/, so the tests of a piece of the host are found where the piece is."""

from __future__ import annotations

from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
SOURCE_FOLDERS = ("core", "adapters", "dialects", "models", "plugins")


def subpackages(folder: Path) -> list[str]:
    return sorted(path.parent.name for path in folder.glob("*/__init__.py"))


def test_each_source_folder_has_a_test_folder():
    missing = [name for name in SOURCE_FOLDERS if not (ROOT / "tests" / name).is_dir()]
    assert not missing, f"source folders without a tests/ folder: {missing}"


def test_each_core_subpackage_has_a_test_folder_with_tests():
    packages = subpackages(ROOT / "core")
    assert {"cache", "engine", "fence", "http", "pipeline", "tokenizer"} <= set(packages)
    untested = [name for name in packages if not list((ROOT / "tests" / "core" / name).glob("test_*.py"))]
    assert not untested, f"core subpackages without tests/core/<name>/test_*.py: {untested}"
