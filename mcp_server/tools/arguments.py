"""The tools' argument types: what the model reads about each argument, and the checks the SDK
runs before a tool does.

The server's instructions explain scopes once; each argument says only what its name does not.
A few limits come from the configuration (``[limits]``, ``search.top_k``), which is known only
when the server is built: those are ``Configured`` here, and ``configured`` fills them in.
"""

# No ``from __future__ import annotations``: ``configured`` reads these types at run time.

import functools
import inspect
from collections.abc import Callable
from dataclasses import dataclass
from typing import Annotated, Any, TypeVar, get_args, get_origin

from pydantic import BaseModel, Field

from store.config import Config
from store.records import SentRole
from store.validation import DATE_PATTERN, NO_EXPIRATION

ToolFn = TypeVar("ToolFn", bound=Callable[..., Any])


@dataclass(frozen=True)
class Configured:
    """A part of a tool's signature that the configuration decides: ``of(config)`` stands in its
    place, as ``Annotated`` metadata or as a default, in the signature the server registers.

    The tool function itself keeps the marker, so a direct call passes such an argument itself.
    """

    of: Callable[[Config], Any]


def configured(fn: ToolFn, config: Config) -> ToolFn:
    """``fn`` with the signature the SDK builds its schema and argument checks from: each
    ``Configured`` in it replaced by its value for ``config``."""

    def resolve(value: Any) -> Any:
        return value.of(config) if isinstance(value, Configured) else value

    def annotation(hint: Any) -> Any:
        if get_origin(hint) is not Annotated:
            return hint
        base, *metadata = get_args(hint)  # nested ``Annotated`` is flattened, so ``base`` is a plain type
        return Annotated[(base, *map(resolve, metadata))]

    signature = inspect.signature(fn, eval_str=True)
    parameters = [
        parameter.replace(annotation=annotation(parameter.annotation), default=resolve(parameter.default))
        for parameter in signature.parameters.values()
    ]

    @functools.wraps(fn)
    def bound(*args: Any, **kwargs: Any) -> Any:
        return fn(*args, **kwargs)

    bound.__signature__ = signature.replace(parameters=parameters)
    return bound


UserId = Annotated[str | None, Field(description="Omitted: the default user.")]
AgentId = Annotated[str | None, Field(description="Narrows within the user.")]
RunId = Annotated[str | None, Field(description="Narrows within the user.")]
MemoryId = Annotated[str, Field(min_length=1, description="An id as the other tools show it.")]
Metadata = Annotated[dict[str, Any] | None, Field(description="A JSON object, e.g. {\"category\": \"food\"}.")]
Filters = Annotated[
    dict[str, Any] | None,
    Field(description="On metadata, created_at or updated_at: {\"category\": \"work\"}, {\"priority\": {\"gte\": "
          "3}}, {\"OR\": [...]}, {\"NOT\": {...}}; ops eq ne gt gte lt lte in nin contains icontains."),
]
ShowExpired = Annotated[bool, Field(description="Include memories past their expiration_date.")]
ExpirationDate = Annotated[
    str | None,
    Field(pattern=rf"^\s*{DATE_PATTERN}\s*$", description="YYYY-MM-DD (UTC), today or later; hidden after it."),
]
NewExpirationDate = Annotated[
    str | None,
    Field(pattern=rf"^\s*({DATE_PATTERN}|{NO_EXPIRATION})\s*$", description=f"YYYY-MM-DD (UTC), or '{NO_EXPIRATION}'."),
]
Threshold = Annotated[
    float,
    Field(ge=0.0, le=1.0, description="Least similarity in meaning (0.3+: close ones). Omitted: none if none is "
          "relevant."),
]
# Counts carry their range in the schema only: the engine checks them, so an out-of-range
# count gets the engine's plain message (as on the command line), not pydantic's text and link.
Count = Annotated[
    int, Configured(lambda config: Field(json_schema_extra={"minimum": 1, "maximum": config.limits.max_top_k}))
]
TopK = Annotated[Count, Field(description="How many to return.")]
SEARCH_TOP_K = Configured(lambda config: config.search.top_k)
"""``top_k``'s default: the configured ``search.top_k``."""
# Optional texts are ``Text = None``, not ``Text | None``: the SDK JSON-decodes string
# arguments of every field not typed plain ``str`` (for clients that send objects as JSON
# text), which would turn the fact '["milk", "eggs"]' into a list and refuse it.
Text = Annotated[str, Configured(lambda config: Field(min_length=1, max_length=config.limits.max_text_chars))]


class Message(BaseModel):
    """One turn of a conversation to remember."""

    role: SentRole = Field(description="system is skipped.")
    content: str = Field(min_length=1)
    name: str | None = Field(default=None, description="The speaker.")
