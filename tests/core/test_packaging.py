"""Every subpackage on disk is listed in pyproject.toml: an unlisted one imports in an editable
install but is missing from the wheel."""

import tomllib
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


def test_every_subpackage_is_in_the_distribution():
    project = tomllib.loads((ROOT / "pyproject.toml").read_text())
    listed = set(project["tool"]["setuptools"]["packages"])
    mapping = project["tool"]["setuptools"]["package-dir"]
    on_disk = set()
    for package, folder in mapping.items():
        for init in (ROOT / folder).rglob("__init__.py"):
            relative = init.parent.relative_to(ROOT / folder)
            on_disk.add(".".join([package, *relative.parts]))
    missing = sorted(on_disk - listed)
    assert not missing, f"add to [tool.setuptools] packages: {missing}"
    assert not sorted(listed - on_disk), "listed packages that do not exist"


def test_entry_points_import_and_point_into_kvgate():
    import importlib

    project = tomllib.loads((ROOT / "pyproject.toml").read_text())
    for name, target in project["project"]["entry-points"]["kvgate"].items():
        module = importlib.import_module(target)
        assert target.startswith("kvgate."), name
        assert any(hasattr(module, hook) for hook in dir(module) if hook.startswith("register_")), name
