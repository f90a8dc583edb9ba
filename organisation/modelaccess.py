"""The groups' model policy, registered into the runtime (agentsite.agent.modelaccess) by organisation.apps.

- A group's `models` null restricts nothing. A user in at least one group with a list may use what any of those
  lists allows (their union); a null group adds nothing to it, so it lifts no restriction. `[]` allows nothing.
- A pattern is a name in which `*` is any text (none included); nothing else is special and case counts:
  `fast` allows `fast` only, `fast*` also `faster`, `workflow:*` every workflow, `local/*` a connection's models.
- An admin acting as one (a dashboard token, an API key with the `admin` scope) is never restricted: the
  operator must be able to try what they configure. Their key without that scope is held to the rule.

Nothing is cached here: the memberships are organisation.selectors' (dropped in every process on any change).
"""

from __future__ import annotations

import functools
import logging
import re
from collections.abc import Callable, Iterable
from typing import TypeVar

from django.contrib.auth import get_user_model

from agentsite.agent.modelaccess import Allowed
from agentsite.agent.usage import Caller
from agentsite.core.dbcall import db
from agentsite.core.errors import AppError
from organisation import selectors
from organisation.selectors import GroupOfUser

logger = logging.getLogger(__name__)
T = TypeVar("T")


@functools.lru_cache(maxsize=1024)
def _compiled(pattern: str) -> re.Pattern[str]:
    return re.compile(".*".join(re.escape(part) for part in pattern.split("*")), re.DOTALL)


def pattern_matches(pattern: str, name: str) -> bool:
    """Whether a model pattern allows the name: `*` is any text, everything else itself, case-sensitive."""
    return _compiled(pattern).fullmatch(name) is not None


def restriction(groups: Iterable[GroupOfUser]) -> tuple[str, ...] | None:
    """The patterns a user in these groups is held to (the union of the restricting groups' lists), or None
    when no group restricts them."""
    lists = [group.models for group in groups if group.models is not None]
    if not lists:
        return None
    return tuple(dict.fromkeys(pattern for patterns in lists for pattern in patterns))


def allows(patterns: tuple[str, ...] | None, name: str) -> bool:
    return patterns is None or any(pattern_matches(pattern, name) for pattern in patterns)


def _is_admin(user_id: int) -> bool:
    return get_user_model().objects.filter(pk=user_id, is_staff=True, is_active=True).exists()


class GroupModelPolicy:
    """agentsite.agent.modelaccess.ModelPolicy over the caller's groups (see the module docstring). Costs no query
    for memberships this process holds, else one on a database thread; a refusal one more (the admin flag).
    Raises AppError 503 `unavailable` when the database cannot say: an access rule fails closed."""

    async def allowed(self, caller: Caller) -> Allowed | None:
        user_id = caller.user_id
        if user_id is None:  # an anonymous /v1 caller belongs to no group
            return None
        groups = selectors.memberships_peek(user_id)
        if groups is None:
            groups = await _read(selectors.memberships, user_id)
        patterns = restriction(groups)
        return None if patterns is None else functools.partial(allows, patterns)

    async def exempt(self, caller: Caller) -> bool:
        if caller.user_id is None or caller.admin is False:  # a key without the admin scope acts as no admin
            return False
        return await _read(_is_admin, caller.user_id)


async def _read(read: Callable[[int], T], user_id: int) -> T:
    try:
        return await db(read, user_id)
    except Exception as exc:  # a boundary: the database away
        logger.warning("The model access of user %s could not be read (%s); the call is refused", user_id, exc)
        raise AppError("unavailable", "Which models you may use could not be checked (the database did not "
                       "answer); try again shortly.", 503) from exc
