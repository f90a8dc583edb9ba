"""Agent cards: what each agent says of itself to A2A clients, and the deployment's card.

An agent's card (A2A 1.0 AgentCard, served with the 0.3 fields beside it by the SDK's agent_card_to_dict) names
the agent, its description and version (the agent's version number), its one JSON-RPC interface at
/a2a/<slug>, streaming, the input and output modes, one skill (the agent as a whole: its description and
starters), and how to authenticate: a bearer credential (an API key with the scope `a2a`, or an access token
this server issued for the resource /a2a), and OAuth 2.1 with this server as the authorization server.

The deployment's card at /.well-known/agent-card.json lists the agents anonymous callers may see: those named by
AGENTSITE_A2A_PUBLIC_AGENTS (none by default), one skill each. Naming an agent there makes its card public, never
its use: a call still needs a credential that may use it.
"""

from __future__ import annotations

from dataclasses import dataclass

from a2a.server.request_handlers.response_helpers import agent_card_to_dict
from a2a.types.a2a_pb2 import (
    AgentCapabilities,
    AgentCard,
    AgentInterface,
    AgentProvider,
    AgentSkill,
    AuthorizationCodeOAuthFlow,
    HTTPAuthSecurityScheme,
    OAuth2SecurityScheme,
    OAuthFlows,
    SecurityRequirement,
    SecurityScheme,
    StringList,
)
from django.conf import settings
from google.protobuf import json_format

from a2a_app.paths import A2A_PATH, CARD_NAME, agent_url

PROTOCOL_VERSION = "1.0"
MODES = ["text/plain", "application/json"]
BEARER, OAUTH = "bearer", "oauth2"
SCOPE = "a2a"


@dataclass(frozen=True)
class AgentFacts:
    """What a card says of an agent (a2a_app.server.selectors.agent_facts)."""

    slug: str
    name: str
    description: str
    version: int
    starters: tuple[str, ...] = ()


def public_slugs() -> tuple[str, ...]:
    return tuple(getattr(settings, "AGENTSITE_A2A_PUBLIC_AGENTS", ()))


def agent_card(origin: str, facts: AgentFacts) -> dict:
    """The card of one agent as JSON (both dialects' fields)."""
    description = facts.description or f"The agent {facts.name or facts.slug} of this agentsite server."
    skill = AgentSkill(id=facts.slug, name=facts.name or facts.slug, description=description,
                       tags=["agent", "chat"], examples=list(facts.starters), input_modes=MODES,
                       output_modes=MODES)
    card = AgentCard(
        name=facts.name or facts.slug, description=description, version=str(facts.version),
        supported_interfaces=[AgentInterface(url=agent_url(origin, facts.slug), protocol_binding="JSONRPC",
                                             protocol_version=PROTOCOL_VERSION)],
        provider=AgentProvider(organization=_organisation(), url=origin),
        capabilities=AgentCapabilities(streaming=True, push_notifications=False),
        default_input_modes=MODES, default_output_modes=MODES, skills=[skill])
    _security(card, origin)
    return agent_card_to_dict(card)


def deployment_card(origin: str, agents: list[AgentFacts]) -> dict:
    """The deployment's card: one skill per agent anonymous callers may see, each naming where it is."""
    skills = [AgentSkill(id=facts.slug, name=facts.name or facts.slug,
                         description=(f"{facts.description} " if facts.description else "")
                         + f"An A2A agent at {agent_url(origin, facts.slug)} (its card: "
                           f"{agent_url(origin, facts.slug)}/{CARD_NAME}).",
                         tags=["agent"], examples=list(facts.starters), input_modes=MODES, output_modes=MODES)
              for facts in agents]
    card = AgentCard(
        name=_organisation(),
        description=("The agents of this agentsite server. Each skill is an agent with its own A2A endpoint "
                     f"({origin}{A2A_PATH}/<skill id>); only the agents this server makes public are listed."),
        version="1", provider=AgentProvider(organization=_organisation(), url=origin),
        capabilities=AgentCapabilities(streaming=True, push_notifications=False),
        default_input_modes=MODES, default_output_modes=MODES, skills=skills)
    _security(card, origin)
    # Not agent_card_to_dict: the deployment has no endpoint of its own, so no 0.3 `url` to add beside it.
    shown = json_format.MessageToDict(card)
    shown.setdefault("skills", [])  # protobuf's JSON leaves an empty list out; a reader looks for it
    return shown


def _organisation() -> str:
    return "agentsite"


def _security(card: AgentCard, origin: str) -> None:
    card.security_schemes[BEARER].CopyFrom(SecurityScheme(http_auth_security_scheme=HTTPAuthSecurityScheme(
        scheme="Bearer", description=("An API key (ask-...) with the scope a2a, or an access token this server "
                                      "issued for the resource " + origin + A2A_PATH + "."))))
    card.security_requirements.append(SecurityRequirement(schemes={BEARER: StringList(list=[])}))
    if "oauth" not in settings.INSTALLED_APPS:
        return
    flow = AuthorizationCodeOAuthFlow(authorization_url=f"{origin}/oauth/authorize", token_url=f"{origin}/oauth/token",
                                      refresh_url=f"{origin}/oauth/token",
                                      scopes={SCOPE: "Use your agents over A2A, as you."}, pkce_required=True)
    card.security_schemes[OAUTH].CopyFrom(SecurityScheme(oauth2_security_scheme=OAuth2SecurityScheme(
        description=f"OAuth 2.1 with PKCE; the resource indicator is {origin}{A2A_PATH}.",
        flows=OAuthFlows(authorization_code=flow),
        oauth2_metadata_url=f"{origin}/.well-known/oauth-authorization-server")))
    card.security_requirements.append(SecurityRequirement(schemes={OAUTH: StringList(list=[SCOPE])}))
