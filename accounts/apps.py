from django.apps import AppConfig


class AccountsConfig(AppConfig):
    name = "accounts"
    verbose_name = "Accounts and config"
    default_auto_field = "django.db.models.BigAutoField"

    def ready(self) -> None:
        from agentsite.agent.config import set_settings_loader

        set_settings_loader(_settings_from_config)


def _settings_from_config():
    from accounts.selectors import config_get
    from agentsite.agent.config import AgentSettings

    config = config_get()
    return AgentSettings(
        provider=config.provider, base_url=config.base_url, api_key=config.api_key, model=config.model,
        system_prompt=config.system_prompt, temperature=config.temperature, max_tokens=config.max_tokens,
        tools=tuple(config.tools or ()), kb_enabled=config.kb_enabled, kb_top_k=config.kb_top_k,
        kb_max_chars=config.kb_max_chars,
    )
