"""TOML configuration: defaults, overrides, and errors that name the key and the reason."""

import subprocess
import sys

import attrs
import pytest

from kvgate.core.config import read_config
from kvgate.core.config_fields import positive
from kvgate.core.config_sections import bind_plugin_sections, load_config
from kvgate.core.errors import ConfigError
from kvgate.core.hookspecs import hookimpl
from kvgate.core.plugins import DuplicateName, build_plugin_manager


def test_defaults_listen_on_loopback_8000():
    config = load_config()
    assert (config.server.host, config.server.port) == ("127.0.0.1", 8000)
    assert config.model.path == "" and config.model.name == "smollm2"
    assert config.model.weights == "auto"


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
    ("[model]\nweights = \"int3\"\n", "model.weights"),
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


# --- plugin sections (register_config_sections): structured in a second step, same errors -----

def write(tmp_path, text: str):
    path = tmp_path / "kvgate.toml"
    path.write_text(text)
    return path


def test_a_valid_plugin_section_reaches_its_plugin(tmp_path):
    from kvgate.plugins.loop_guard import GuardConfig

    config = load_config(write(tmp_path, "[guard]\nmax_token_repeats = 5\n[responses]\nstore_path = \"/x\"\n"))
    guard = config.section("guard")
    assert isinstance(guard, GuardConfig) and guard.max_token_repeats == 5 and guard.max_pattern_period == 32
    assert config.section("responses").store_path == "/x"
    assert config.section("anthropic").normalize_billing_header is True  # absent: its defaults


@pytest.mark.parametrize("text, expected", [
    ("[guard]\nnope = 1\n", "guard.nope: unknown key"),
    ("[guard]\nmax_token_repeats = 0\n", "guard.max_token_repeats: must be positive, got 0"),
    ("[guard]\nmin_pattern_repeats = \"many\"\n", "guard.min_pattern_repeats: invalid value"),
    ("[nonsense]\na = 1\n[guard]\nenabled = false\n", "nonsense: unknown key"),
])
def test_bad_plugin_section_names_the_key(tmp_path, text, expected):
    path = write(tmp_path, text)
    with pytest.raises(ConfigError) as info:
        load_config(path)
    assert expected in str(info.value) and str(path) in str(info.value)


def test_a_disabled_plugins_section_is_ignored(tmp_path, caplog):
    path = write(tmp_path, "[plugins]\ndisabled = [\"loop_guard\"]\n[guard]\nmax_token_repeats = 0\n")
    config = load_config(path)
    with pytest.raises(KeyError, match="guard"):
        config.section("guard")
    assert "[guard] ignored: plugin 'loop_guard' is disabled" in caplog.text


def test_sections_are_unavailable_before_binding():
    from kvgate.core.config import Config

    with pytest.raises(ConfigError, match="not bound"):
        Config().section("guard")


@attrs.define
class WidgetConfig:
    size: int = attrs.field(default=3, validator=positive)
    label: str = "w"


class WidgetPlugin:
    """A third-party plugin with its own ``[widget]`` section, read back through a hook of its own."""

    @hookimpl
    def register_config_sections(self, register):
        register("widget", WidgetConfig)


def widget_manager():
    return build_plugin_manager(extra_plugins=[("widget", WidgetPlugin())])


def test_a_third_party_plugin_declares_and_reads_its_section(tmp_path):
    config = load_config(write(tmp_path, "[widget]\nsize = 7\n[guard]\nenabled = false\n"), pm=widget_manager())
    assert config.section("widget") == WidgetConfig(size=7, label="w")
    assert config.section("guard").enabled is False  # the built-ins' sections stay bound beside it
    with pytest.raises(ConfigError, match="widget.size: must be positive, got -1"):
        load_config(write(tmp_path, "[widget]\nsize = -1\n"), pm=widget_manager())
    with pytest.raises(ConfigError, match="widget: unknown key"):
        load_config(write(tmp_path, "[widget]\nsize = 7\n"))  # without the plugin nobody declares it


def test_rebinding_to_another_manager_keeps_changed_settings():
    config = read_config(None, {"widget": {"label": "x"}})
    bind_plugin_sections(config, widget_manager())
    config.section("guard").max_token_repeats = 4
    bind_plugin_sections(config, widget_manager())
    assert config.section("guard").max_token_repeats == 4 and config.section("widget").label == "x"


def test_a_duplicate_section_name_is_an_error():
    class Again:
        @hookimpl
        def register_config_sections(self, register):
            register("guard", WidgetConfig)

    class Core:
        @hookimpl
        def register_config_sections(self, register):
            register("server", WidgetConfig)

    with pytest.raises(DuplicateName, match="'guard' is registered twice"):
        bind_plugin_sections(read_config(), build_plugin_manager(extra_plugins=[("again", Again())]))
    with pytest.raises(DuplicateName, match="'server' of plugin 'core' is a core section"):
        bind_plugin_sections(read_config(), build_plugin_manager(extra_plugins=[("core", Core())]))


def test_serve_exits_with_a_one_line_error_on_a_bad_plugin_section(tmp_path):
    path = write(tmp_path, "[guard]\nmax_token_repeats = 0\n")
    result = subprocess.run([sys.executable, "-m", "kvgate.core.cli", "serve", "--config", str(path)],
                            capture_output=True, text=True, timeout=120)
    assert result.returncode != 0
    lines = [line for line in result.stderr.splitlines() if line.strip()]
    assert lines == [f"Error: {path}: guard.max_token_repeats: must be positive, got 0"], result.stderr
