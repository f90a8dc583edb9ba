"""The base of every /v1 wire format (a dialect's request and reply models, in `compat/<dialect>/wire.py`).

The models are the one definition of their fields: the views validate bodies with them and /api/schema documents
/v1 from them (compat/schema.py). A constraint belongs on the field, where it is both enforced and documented.
"""

from __future__ import annotations

from pydantic import BaseModel, ConfigDict


class WireModel(BaseModel):
    """A /v1 wire format. Every subclass is documented in /api/schema under its class name (a request model's
    trailing `Request` is kept once: `ChatCompletionRequest`)."""

    # A field a model does not declare is left out of it: the view decides (unknown top-level fields go to a
    # passthrough connection or are refused: compat.run.Run.refuse_unknown). Strict: a value of the wrong JSON
    # type is refused, as by OpenAI ("50" is not a max_tokens, 1 is not a stream flag).
    model_config = ConfigDict(extra="ignore", strict=True)
