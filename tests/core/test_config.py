"""TOML configuration: defaults, overrides, and errors that name the key and the reason."""

import pytest

from kvgate.core.config import load_config
from kvgate.core.errors import ConfigError


def test_defaults_listen_on_loopback_8000():
    config = load_config()
    assert (config.server.host, config.server.port) == ("127.0.0.1", 8000)
    assert config.model.path == "" and config.model.name == "smollm2"


def test_file_and_overrides(tmp_path):
    path = tmp_path / "kvgate.toml"
    path.write_text('[server]\nport = 9001\n[engine]\nmax_batch = 4\n[plugins]\ndisabled = ["x"]\n')
    config = load_config(path, {"server": {"host": "127.0.0.2"}})
    assert config.server.port == 9001 and config.server.host == "127.0.0.2"
    assert config.engine.max_batch == 4 and config.plugins.disabled == ["x"]


@pytest.mark.parametrize("text, expected", [
    ("[server]\nprot = 1\n", "server.prot: unknown key"),
    ("[engine]\nmax_batch = \"many\"\n", "engine.max_batch: invalid value"),
    ("[engine]\nmax_batch = 0\n", "engine.max_batch"),
    ("[model]\ndtype = \"int3\"\n", "model.dtype"),
    ("[nonsense]\na = 1\n", "nonsense: unknown key"),
    ("[server\n", "not valid TOML"),
])
def test_bad_file_names_the_key(tmp_path, text, expected):
    path = tmp_path / "bad.toml"
    path.write_text(text)
    with pytest.raises(ConfigError) as info:
        load_config(path)
    assert expected in str(info.value) and str(path) in str(info.value)


def test_missing_file(tmp_path):
    with pytest.raises(ConfigError, match="file not found"):
        load_config(tmp_path / "absent.toml")
