"""`?limit=&offset=` pagination (docs/api.md, Lists), strict about what it reads."""

from __future__ import annotations

import re
from typing import TYPE_CHECKING, Any

from rest_framework.pagination import LimitOffsetPagination as _Base
from rest_framework.request import Request

from agentsite.core.errors import AppError

if TYPE_CHECKING:
    from rest_framework.views import APIView

# Digits only: DRF's own parsing took "-1", "1.5", "false" or "" as "use the default" without a word.
_DIGITS = re.compile(r"[0-9]{1,18}")


class LimitOffsetPagination(_Base):
    """`?limit=&offset=`; 50 by default, 200 at most; anything but a non-negative integer is a 400."""

    default_limit = 50
    max_limit = 200

    def get_limit(self, request: Request) -> int:
        limit = _non_negative_int(request, self.limit_query_param)
        if limit is None or limit == 0:  # 0 keeps DRF's meaning (the default): a page of 0 would never advance
            return self.default_limit
        return min(limit, self.max_limit)

    def get_offset(self, request: Request) -> int:
        offset = _non_negative_int(request, self.offset_query_param) or 0
        # Past the end is an empty page; clamped, so the database never sees a huge OFFSET.
        return min(offset, getattr(self, "count", offset))

    def get_schema_operation_parameters(self, view: APIView) -> list[dict[str, Any]]:
        parameters = super().get_schema_operation_parameters(view)
        for parameter in parameters:
            parameter["schema"]["minimum"] = 0
        return parameters


def _non_negative_int(request: Request, name: str) -> int | None:
    raw = request.query_params.get(name)
    if raw is None:
        return None
    if not _DIGITS.fullmatch(raw):
        raise AppError("invalid", f"{name} must be a non-negative integer.", 400,
                       {name: ["Must be a non-negative integer written in digits."]})
    return int(raw)
