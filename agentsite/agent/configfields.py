"""The agent config's fields as its form shows them: name, label, kind, help, bounds and options.

This is the one description of the form (GET /api/meta answers it as `config_fields`); the dashboard draws
its settings form from it. A select whose options are another registry says so by its kind: `provider`
takes the provider registry's names (agentsite.agent.providers), `voice` the voices /api/voices lists.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass
from typing import Any


@dataclass(frozen=True)
class ConfigField:
    name: str
    label: str
    # text, textarea, url, secret, model, number, integer, bool, list, select, provider, voice
    kind: str
    help: str = ""
    min: float | None = None
    max: float | None = None
    step: float | None = None
    options: tuple[tuple[str, str], ...] = ()  # a select's (value, label) pairs
    connection: bool = False  # it describes the config's connection: an administrator's only


CONFIG_FIELDS: tuple[ConfigField, ...] = (
    ConfigField("provider", "Provider", "provider", connection=True),
    ConfigField("base_url", "Base URL", "url", connection=True,
                help="For an OpenAI-compatible server (Ollama, vLLM...); empty: the provider's default."),
    ConfigField("api_key", "API key", "secret", connection=True),
    ConfigField("model", "Model", "model", help="The agent's default: an alias or <connection>/<model> (the list "
                                                "offers the catalogue's names)."),
    ConfigField("system_prompt", "System prompt", "textarea"),
    ConfigField("temperature", "Temperature", "number", min=0, max=2, step=0.1),
    ConfigField("max_tokens", "Max tokens", "integer", min=1, max=1_000_000),
    ConfigField("tools", "Enabled tools", "list", help="One tool name per line; * enables every tool. Empty: none."),
    ConfigField("kb_enabled", "Use the knowledge base", "bool"),
    ConfigField("kb_top_k", "Knowledge chunks per answer", "integer", min=1, max=50),
    ConfigField("kb_max_chars", "Knowledge context size (characters)", "integer", min=1, max=1_000_000),
    ConfigField("stt_provider", "Speech to text", "select",
                options=(("local", "Local (offline)"), ("hosted", "Hosted"), ("browser", "Browser"))),
    ConfigField("tts_provider", "Text to speech", "select",
                options=(("local", "Local (offline)"), ("hosted", "Hosted"), ("edge", "Edge"), ("browser", "Browser"))),
    ConfigField("tts_voice", "Voice", "voice"),
    ConfigField("allow_registration", "Allow anyone to register", "bool"),
    ConfigField("compat_auth", "/v1 API access", "select",
                help="Who may call the OpenAI-compatible API without an API key.",
                options=(("local", "Local: anonymous calls from this machine only"),
                         ("key", "Key: an API key or a dashboard token"), ("public", "Public: anyone, with any key"))),
)


def describe_config_fields() -> list[dict[str, Any]]:
    """The fields in the form's order, as JSON (absent bounds left out; options as [value, label] pairs)."""
    described = []
    for spec in CONFIG_FIELDS:
        item = {key: value for key, value in asdict(spec).items() if value not in (None, "", ())}
        item["connection"] = spec.connection
        if spec.options:
            item["options"] = [list(pair) for pair in spec.options]
        described.append(item)
    return described
