"""Stored responses as `fugu serve` keeps them (`store`, default true as in OpenAI's API): the history a
`previous_response_id` stands for (the chain of earlier responses' input and output items, oldest first),
readable only with the key that made them and only until they expire, and the fugu session they ran in,
so a continued conversation continues that session. Blocking (SQLite): called from worker threads.
"""

from __future__ import annotations

import hashlib
import time
from collections.abc import Mapping
from typing import Any

from fugu_cli.serve.responses import Asked
from fugu_cli.serve.wire import ApiError
from fugu_cli.store import Store, StoredResponse

MAX_CHAIN = 10_000  # links followed back from one previous_response_id


def owner_of(authorization: str | None) -> str:
    """Who a stored response belongs to: a digest of the bearer key the client sent ("" for none)."""
    token = (authorization or "")[7:].strip() if (authorization or "")[:7].lower() == "bearer " else ""
    return hashlib.blake2b(token.encode(), digest_size=16).hexdigest() if token else ""


def not_found(rid: str, param: str | None = None) -> ApiError:
    return ApiError(
        404,
        f"Response with id '{rid}' not found: it was not stored (store: false), has expired, or was made "
        "with another key",
        code="response_not_found",
        param=param,
    )


class ResponseBook:
    def __init__(self, store: Store, ttl_s: float) -> None:
        self.store = store
        self.ttl_s = ttl_s

    def get(self, rid: str, owner: str) -> StoredResponse:
        found = self.store.get_response(rid, owner)
        if found is None:
            raise not_found(rid)
        return found

    def history(self, previous_id: str | None, owner: str) -> tuple[list[dict[str, Any]], str | None]:
        """(the items `previous_id` stands for, oldest first; the session it ran in)."""
        if previous_id is None:
            return [], None
        chain: list[StoredResponse] = []
        rid: str | None = previous_id
        while rid is not None and len(chain) < MAX_CHAIN:
            found = self.store.get_response(rid, owner)
            if found is None:
                raise not_found(rid, "previous_response_id")
            chain.append(found)
            rid = found.previous_id
        items: list[dict[str, Any]] = []
        for r in reversed(chain):
            items += r.input + [_as_input(i) for i in r.output]
        return items, chain[0].session_id

    def keep(self, asked: Asked, response: Mapping[str, Any], session_id: str, owner: str) -> None:
        """Store the finished response when the request asked for it (`store` is true by default)."""
        if not asked.store or response.get("status") == "failed":
            return
        now = time.time()
        self.store.save_response(
            StoredResponse(
                id=str(response["id"]),
                owner=owner,
                session_id=session_id,
                previous_id=asked.previous_id,
                model=asked.model,
                input=asked.items,
                output=list(response.get("output") or []),
                response=dict(response),
                created_at=now,
                expires_at=now + self.ttl_s,
            )
        )

    def delete(self, rid: str, owner: str) -> None:
        if not self.store.delete_response(rid, owner):
            raise not_found(rid)


def _as_input(item: Mapping[str, Any]) -> dict[str, Any]:
    """An output item as the input item a client would send back (an assistant message keeps its text)."""
    return {k: v for k, v in item.items() if k not in ("status",)}
