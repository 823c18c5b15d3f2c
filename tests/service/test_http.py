"""The HTTP plumbing shared by the routers (service/http.py)."""

from __future__ import annotations

import asyncio

from starlette.types import Message

from firstfault.service.http import JsonRequest
from firstfault.service.middleware import BODY_SCOPE_KEY


async def _no_second_read() -> Message:
    raise AssertionError("the route read the body from the connection again")


def test_a_route_takes_the_body_the_middleware_read_without_copying_it() -> None:
    body = b'{"format": "raw_text", "text": "' + b"x" * 4096 + b'"}'
    scope = {"type": "http", "method": "POST", "path": "/", "headers": [], BODY_SCOPE_KEY: body}

    async def read() -> None:
        request = JsonRequest(scope, _no_second_read)
        assert await request.body() is body
        assert (await request.json())["text"] == "x" * 4096

    asyncio.run(read())


def test_without_the_middleware_the_body_is_read_from_the_connection() -> None:
    messages = [{"type": "http.request", "body": b'{"a": ', "more_body": True},
                {"type": "http.request", "body": b"1}", "more_body": False}]

    async def receive() -> Message:
        return messages.pop(0)

    async def read() -> None:
        request = JsonRequest({"type": "http", "method": "POST", "path": "/", "headers": []}, receive)
        assert await request.json() == {"a": 1}

    asyncio.run(read())
