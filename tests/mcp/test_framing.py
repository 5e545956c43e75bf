"""Reading a stdio server's messages in bounded memory: lines whole up to the limit, an oversized one
drained and matched to the request it answered (its id before the result, as the Python SDK writes it, or
after, as the TypeScript SDK does), and the next message read as usual."""

from __future__ import annotations

import asyncio
import json

from fugu_cli.mcp.framing import TooLong, read_messages


def _read(data: bytes, limit: int, chunk: int = 7) -> list[bytearray | TooLong]:
    async def go() -> list[bytearray | TooLong]:
        reader = asyncio.StreamReader()
        for i in range(0, len(data), chunk):
            reader.feed_data(data[i : i + chunk])
        reader.feed_eof()
        return [m async for m in read_messages(reader, limit)]

    return asyncio.run(go())


def _line(obj: object) -> bytes:
    return json.dumps(obj).encode() + b"\n"


def test_lines_under_the_limit_come_whole_and_an_oversized_one_is_drained() -> None:
    big_first = _line({"jsonrpc": "2.0", "id": 7, "result": {"text": "x" * 5000}})
    big_last = _line({"result": {"content": [{"id": 99, "text": "y" * 5000}]}, "jsonrpc": "2.0", "id": "b"})
    small = _line({"jsonrpc": "2.0", "id": 8, "result": {}})
    got = _read(small + big_first + small + big_last + small, limit=1000)
    assert [type(m).__name__ for m in got] == ["bytearray", "TooLong", "bytearray", "TooLong", "bytearray"]
    assert all(json.loads(m)["id"] == 8 for m in got if isinstance(m, bytearray))
    first, last = got[1], got[3]
    assert isinstance(first, TooLong) and isinstance(last, TooLong)
    assert first.size == len(big_first) - 1 and len(first.head) <= 8192 and len(first.tail) <= 8192
    error = first.error({7, 8}, limit=1000)
    assert error is not None and error["id"] == 7 and "was dropped" in error["error"]["message"]
    assert last.error({"b", 8}) is not None and last.error({"b", 8})["id"] == "b"  # type: ignore[index]
    assert last.error({5}) is not None  # the only request in flight
    assert last.error({5, 6}) is None  # unknown: that request times out on its own
