"""Each dialect says which models it serves and which of its variants fits; ``[model]`` may override both."""

import pytest

from kvgate.core.config import ModelConfig, config_from_dict
from kvgate.core.dialect import Dialect
from kvgate.core.loading.dialect_choice import build_chat_format, build_dialect, dialect_scores
from kvgate.core.errors import ConfigError
from kvgate.core.hookspecs import hookimpl
from kvgate.core.plugins import build_plugin_manager, collect
from kvgate.core.types import ChatRequest, Message, Tool

# The parts of the Qwen2.5-Instruct and Qwen3 templates that tell them apart (tools branch of the
# system turn; Qwen3 has no default system prompt and writes think blocks).
QWEN25_TEMPLATE = (
    "{%- if tools %}{{- '<|im_start|>system\\n' }}{%- if messages[0]['role'] == 'system' %}"
    "{{- messages[0]['content'] }}{%- else %}"
    "{{- 'You are Qwen, created by Alibaba Cloud. You are a helpful assistant.' }}{%- endif %}"
    "{{- \"\\n\\n# Tools\\n\\nYou may call one or more functions...<tool_call>\" }}{%- endif %}"
)
QWEN3_TEMPLATE = (
    "{%- if tools %}{{- '<|im_start|>system\\n' }}{{- \"# Tools ... <tool_call>\" }}{%- endif %}"
    "{%- if enable_thinking is defined and enable_thinking is false %}{{- '<think>\\n\\n</think>\\n\\n' }}{%- endif %}"
)
GLM45_TEMPLATE = "<tool_call>{function-name}\n<arg_key>{arg-key-1}</arg_key>\n<arg_value>{arg-value-1}</arg_value>"
GLM47_TEMPLATE = "<tool_call>{function-name}<arg_key>{arg-key-1}</arg_key><arg_value>{arg-value-1}</arg_value>"


@pytest.fixture(scope="module")
def dialects():
    return collect(build_plugin_manager(), "register_dialects", "dialect")


@pytest.mark.parametrize("architecture,template,name,variant", [
    ("qwen2", QWEN25_TEMPLATE, "chatml_json", "qwen25"),
    ("qwen3", QWEN3_TEMPLATE, "chatml_json", "qwen3"),
    ("llama", "", "chatml_json", "qwen3"),  # no claim by anyone: the fallback chatml_json declares
    ("glm4_moe", GLM45_TEMPLATE, "glm_xml", "glm45"),
    ("glm4_moe", GLM47_TEMPLATE, "glm_xml", "glm47"),
    ("qwen2", GLM45_TEMPLATE, "glm_xml", "glm45"),  # the template's markup is enough
    ("deepseek_v32", "", "deepseek_dsml", "v32"),
    ("DeepseekV4ForCausalLM", "", "deepseek_dsml", "v4"),
])
def test_the_dialect_and_its_variant_come_from_the_model(dialects, architecture, template, name, variant):
    chosen, dialect = build_dialect(ModelConfig(), dialects, architecture, template)
    assert (chosen, dialect.name, dialect.variant) == (name, name, variant)


def test_a_qwen25_template_renders_the_qwen25_default_system_prompt(dialects):
    _, dialect = build_dialect(ModelConfig(), dialects, "qwen2", QWEN25_TEMPLATE)
    turns = dialect.render_messages([Message("user", "hi")], [Tool("lookup")], ChatRequest("m", []).tool_choice)
    assert turns[0]["content"].startswith("You are Qwen, created by Alibaba Cloud. You are a helpful assistant.\n\n")


def test_the_variant_key_overrides_the_template(dialects):
    model = config_from_dict({"model": {"dialect_variant": "qwen25"}}).model
    assert model.dialect_variant == "qwen25"
    assert build_dialect(model, dialects, "qwen3", QWEN3_TEMPLATE)[1].variant == "qwen25"
    glm = ModelConfig(dialect="glm_xml", dialect_variant="glm45")
    assert build_dialect(glm, dialects, "llama", GLM47_TEMPLATE)[1].variant == "glm45"


def test_a_variant_the_dialect_lacks_is_a_config_error(dialects):
    with pytest.raises(ConfigError, match="model.dialect_variant.*chatml_json.*glm47"):
        build_dialect(ModelConfig(dialect_variant="glm47"), dialects, "qwen2", QWEN25_TEMPLATE)


def test_unknown_dialect_key_is_a_config_error(dialects):
    with pytest.raises(ConfigError, match="model.dialect: unknown dialect 'nope'"):
        build_dialect(ModelConfig(dialect="nope"), dialects, "llama", "")


class Claims(Dialect):
    """A third-party dialect claiming one architecture (only its choice matters here)."""

    name = "claims"

    @classmethod
    def serves(cls, architecture, chat_template):
        return 1000 if architecture == "mine" else 0

    def render_messages(self, messages, tools, tool_choice, *, thinking=None):
        return []

    def new_parser(self, tools, call_id, *, start_in="content"):
        raise NotImplementedError

    def fence_grammar(self, plan):
        raise NotImplementedError


class Plugin:
    def __init__(self, name, factory):
        self.name, self.factory = name, factory

    @hookimpl
    def register_dialects(self, register):
        register(self.name, self.factory)


def test_a_plugin_dialect_wins_the_architecture_it_claims():
    pm = build_plugin_manager(extra_plugins=[("claims", Plugin("claims", Claims))])
    dialects = collect(pm, "register_dialects", "dialect")
    assert dialect_scores(dialects, "mine", "")["claims"] == 1000
    assert build_dialect(ModelConfig(), dialects, "mine", "")[0] == "claims"
    assert build_dialect(ModelConfig(), dialects, "llama", "<|im_start|>")[0] == "chatml_json"


def test_an_equal_claim_is_an_error_that_asks_for_the_key():
    pm = build_plugin_manager(extra_plugins=[("a", Plugin("a", Claims)), ("b", Plugin("b", Claims))])
    dialects = collect(pm, "register_dialects", "dialect")
    with pytest.raises(ConfigError, match="a, b all claim.*set \\[model\\] dialect"):
        build_dialect(ModelConfig(), dialects, "mine", "")
    assert build_dialect(ModelConfig(dialect="b"), dialects, "mine", "")[0] == "b"


def test_the_served_smollm2_gets_chatml_json_and_the_configured_variant(smollm2_runtime):
    pm = build_plugin_manager()
    name, dialect, fmt = build_chat_format(config_from_dict({}), pm, smollm2_runtime)
    assert (name, dialect.variant) == ("chatml_json", "qwen3")
    config = config_from_dict({"model": {"dialect_variant": "qwen25"}})
    name, dialect, fmt = build_chat_format(config, pm, smollm2_runtime)
    assert (name, dialect.variant) == ("chatml_json", "qwen25") and fmt.dialect is dialect
    assert "You are Qwen, created by Alibaba Cloud." in fmt.render(ChatRequest("m", [Message("user", "hi")]))


def test_a_chat_format_lends_its_variant_to_the_dialect(smollm2_runtime):
    pm = build_plugin_manager()
    config = config_from_dict({"model": {"dialect": "deepseek_dsml", "chat_format": "deepseek_v4"}})
    name, dialect, fmt = build_chat_format(config, pm, smollm2_runtime)
    assert (name, dialect.variant, fmt.dialect) == ("deepseek_dsml", "v4", dialect)
    conflict = config_from_dict({"model": {"dialect": "deepseek_dsml", "chat_format": "deepseek_v4",
                                           "dialect_variant": "v32"}})
    with pytest.raises(ConfigError, match="model.dialect_variant"):
        build_chat_format(conflict, pm, smollm2_runtime)
