"""The call wrapper every non-watch request goes through, and the errors it raises."""

from __future__ import annotations

import json
import time
from collections.abc import Awaitable, Callable, Mapping
from email.utils import parsedate_to_datetime
from typing import Any

import aiohttp

REQUEST_TIMEOUT = 10.0  # seconds, for every non-watch request but the Node writes
JsonObj = dict[str, Any]


class KubeError(Exception):
    """A failed API call: HTTP status (0 for transport errors), reason and Retry-After."""

    def __init__(self, status: int, reason: str, retry_after: float | None = None) -> None:
        super().__init__(f"{status} {reason}" if status else f"no answer: {reason}")
        self.status = status
        self.reason = reason
        self.retry_after = retry_after


class StreamError(Exception):
    """An ERROR event other than 410 in the watch stream."""

    def __init__(self, status: int, message: str) -> None:
        super().__init__(f"{status} {message}")
        self.status = status


#: What a failed API call raises: the API's answer (or its absence), not a bug of ours.
API_FAILURES = (KubeError, aiohttp.ClientError, TimeoutError)


def _retry_after(headers: Mapping[str, str] | None) -> float | None:
    if not headers:
        return None
    value = headers.get("Retry-After")
    if value is None:
        return None
    try:
        return float(value)
    except ValueError:
        pass
    try:
        return max(0.0, parsedate_to_datetime(value).timestamp() - time.time())
    except (TypeError, ValueError):
        return None


async def error_from(resp: aiohttp.ClientResponse) -> KubeError:
    text = await resp.text()
    reason = resp.reason or ""
    try:
        body = json.loads(text)
        reason = str(body.get("message") or body.get("reason") or reason)
    except ValueError:
        pass
    return KubeError(resp.status, reason, _retry_after(resp.headers))


async def call_api(fn: Callable[..., Awaitable[Any]], *args: Any, **kwargs: Any) -> JsonObj:
    """:func:`call_api_within` the default ``REQUEST_TIMEOUT``."""
    return await call_api_within(REQUEST_TIMEOUT, fn, *args, **kwargs)


async def call_api_within(
    request_timeout: float, fn: Callable[..., Awaitable[Any]], *args: Any, **kwargs: Any
) -> JsonObj:
    """Call a generated kubernetes_asyncio API function with a timeout, unparsed, and return
    its JSON body. Every non-watch call of the agent goes through here, so that every caller
    sees the same :class:`KubeError`: a non-2xx status with the server's message and
    ``Retry-After``, or status 0 for a transport error or a body that is not a JSON object."""
    try:
        resp = await fn(*args, _preload_content=False, _request_timeout=request_timeout, **kwargs)
        async with resp:
            if not 200 <= resp.status <= 299:
                raise await error_from(resp)
            text = await resp.text()
        body = json.loads(text) if text else {}
    except (aiohttp.ClientError, TimeoutError, ValueError) as exc:
        raise KubeError(0, f"{_name(fn)}: {describe(exc, request_timeout)}") from exc
    if not isinstance(body, dict):
        raise KubeError(0, f"malformed response: {type(body).__name__}, not an object")
    return body


async def watch_answer(fn: Callable[..., Awaitable[Any]], *args: Any, **kwargs: Any) -> None:
    """Open a watch with ``fn`` and close it once the server has answered, as
    :func:`call_api` would raise: the answer is the status alone. A watch's body is a stream of
    events, one JSON object a line, never one JSON body (``drain-guard preflight``'s rows)."""
    try:
        resp = await fn(
            *args, watch=True, _preload_content=False, _request_timeout=REQUEST_TIMEOUT, **kwargs
        )
        async with resp:
            if not 200 <= resp.status <= 299:
                raise await error_from(resp)
    except (aiohttp.ClientError, TimeoutError) as exc:
        raise KubeError(0, f"{_name(fn)}: {describe(exc, REQUEST_TIMEOUT)}") from exc


def describe(exc: BaseException, timeout: float | None = None) -> str:
    """``Type: message`` on one line; never empty, as a bare TimeoutError's message is."""
    text = " ".join(str(exc).split())
    if not text and isinstance(exc, TimeoutError):
        text = "timed out" if timeout is None else f"no answer within {timeout:g}s"
    return f"{type(exc).__name__}: {text or 'no detail'}"


def _name(fn: Callable[..., Any]) -> str:
    """The generated API function's name (``read_node``), through functools.partial."""
    return str(
        getattr(fn, "__name__", None) or getattr(getattr(fn, "func", None), "__name__", "API call")
    )
