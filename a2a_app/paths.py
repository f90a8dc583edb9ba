"""Where the A2A doors are: each agent at /a2a/<slug> (its JSON-RPC endpoint) with its card beside it, and the
deployment's card at the well-known path of the origin (A2A 1.0, §8.2: /.well-known/agent-card.json)."""

from oauth.resource import A2A_PATH  # the protected resource's path is where the door is

__all__ = ["A2A_PATH", "CARD_NAME", "DEPLOYMENT_CARD_PATH", "agent_url", "card_url"]
CARD_NAME = ".well-known/agent-card.json"
DEPLOYMENT_CARD_PATH = "/" + CARD_NAME


def agent_url(origin: str, slug: str) -> str:
    """The JSON-RPC endpoint of agent `slug` on `origin` (scheme://host[:port])."""
    return f"{origin}{A2A_PATH}/{slug}"


def card_url(origin: str, slug: str) -> str:
    return f"{agent_url(origin, slug)}/{CARD_NAME}"
