"""The OpenAI-compatible adapter: OpenAI, vLLM, Ollama, llama.cpp's server, anything speaking Chat Completions.

Built on the official `openai` SDK with its own retries turned off: rein retries itself
(agent.models.retry) so that backoff, Retry-After and the final error are the same for every
server, and so a failed run can say how many attempts it made.
"""

from __future__ import annotations

import ipaddress
import os
import socket
from collections.abc import AsyncIterator
from typing import Any
from urllib.parse import urlparse

from agent.messages import ModelRequest, ModelResponse
from agent.models.base import Model, ModelError, ReasoningDelta, StreamItem, TextDelta
from agent.models.openai_wire import (
    StreamAccumulator,
    TextCallGate,
    ThinkStreamSplitter,
    error_detail,
    reasoning_of,
    response_from_completion,
    to_openai_messages,
    usage_of,
)
from agent.models.retry import RetryLog, RetryPolicy, Verdict, call_with_retries, parse_retry_after
from agent.models.tool_grammar import callable_tools, tool_names

_RETRY_STATUS = {408, 409, 429}
_LOCAL_KEY = "sk-no-key-required"


def _names(request: ModelRequest) -> list[str]:
    """Tools whose calls may be recovered from text: none when calling tools is ruled out."""
    if not request.tools or request.settings.tool_choice == "none":
        return []
    return tool_names(callable_tools(request.tools, request.settings.allowed_tools))


class ModelAPIError(ModelError):
    """A request to an OpenAI-compatible server failed for good."""

    def __init__(self, message: str, *, status_code: int | None, attempts: int) -> None:
        super().__init__(message)
        self.status_code = status_code
        """HTTP status of the last attempt; None for timeouts and connection errors."""
        self.attempts = attempts
        """Attempts made, the first included."""


def is_local_url(url: str | None) -> bool:
    """Whether a base URL points at this machine or a private network (no API key needed)."""
    if not url:
        return False
    host = (urlparse(url).hostname or "").lower()
    if host in ("localhost", "host.docker.internal") or host.endswith((".local", ".localhost")):
        return True
    try:
        ip = ipaddress.ip_address(host)
    except ValueError:
        return False
    return ip.is_loopback or ip.is_private or ip.is_link_local or ip.is_unspecified


def classify_openai_error(exc: BaseException) -> Verdict:
    """Retry timeouts, lost connections, 408/409/429 and 5xx; nothing else."""
    import openai

    if isinstance(exc, openai.APITimeoutError):
        return Verdict(True, "timeout")
    if isinstance(exc, openai.APIConnectionError):
        return Verdict(True, _connection_failure(exc))
    if isinstance(exc, openai.APIStatusError):
        status = exc.status_code
        headers = dict(exc.response.headers) if exc.response is not None else {}
        detail = error_detail(exc.body, exc.message)
        reason = f"HTTP {status}: {detail}"
        should = headers.get("x-should-retry", "").lower()
        if should in ("true", "false"):
            return Verdict(should == "true", reason, parse_retry_after(headers))
        body = exc.body if isinstance(exc.body, dict) else {}
        err = body.get("error", body)
        if isinstance(err, dict) and err.get("code") == "insufficient_quota":
            return Verdict(False, reason)  # a 429 that waiting cannot fix
        retry = status in _RETRY_STATUS or status >= 500
        return Verdict(retry, reason, parse_retry_after(headers) if retry else None)
    return Verdict(False, f"{type(exc).__name__}: {exc}")


def _connection_failure(exc: BaseException) -> str:
    """What went wrong under the SDK's bare "Connection error.": refused, unknown host, reset, …"""
    # The SDK wraps httpx, which wraps httpcore, which wraps the socket error that says it all.
    chain: list[BaseException] = []
    cause: BaseException | None = exc
    while cause is not None and cause not in chain:
        chain.append(cause)
        cause = cause.__cause__ or cause.__context__
    for err in chain:
        if isinstance(err, ConnectionRefusedError):
            return f"connection refused ({err.strerror or err})"
        if isinstance(err, ConnectionResetError):
            return "connection error: reset by the server"
        if isinstance(err, socket.gaierror):
            return f"connection error: host not found ({err.strerror or err})"
    return f"connection error: {chain[-1]}"


class OpenAIModel(Model):
    """A chat model behind an OpenAI-compatible Chat Completions endpoint.

    base_url, api_key and model come from the arguments, else OPENAI_BASE_URL, OPENAI_API_KEY and
    REIN_MODEL. A local base_url needs no key. With no model name at all, the server's first
    listed model is used (llama.cpp's and vLLM's servers serve exactly one).
    """

    def __init__(
        self,
        model: str | None = None,
        base_url: str | None = None,
        api_key: str | None = None,
        timeout: float = 60.0,
        max_retries: int = 4,
        *,
        retry_policy: RetryPolicy | None = None,
        send_reasoning: bool | None = None,
        parse_text_tool_calls: bool = True,
        stream_usage: bool = True,
        default_headers: dict[str, str] | None = None,
        extra_body: dict[str, Any] | None = None,
    ) -> None:
        import openai

        self.base_url = base_url or os.environ.get("OPENAI_BASE_URL") or None
        self.model = model or os.environ.get("REIN_MODEL") or None
        key = api_key or os.environ.get("OPENAI_API_KEY")
        if not key:
            if not is_local_url(self.base_url):
                raise ModelError(
                    f"no API key for {self.base_url or 'api.openai.com'}: set OPENAI_API_KEY or "
                    "pass api_key (servers on localhost or a private network need none)"
                )
            key = _LOCAL_KEY
        self.official = self.base_url is None or "api.openai.com" in self.base_url
        self.retry_policy = retry_policy or RetryPolicy(max_retries=max_retries)
        # None: send reasoning back to non-OpenAI servers until one rejects the field.
        self.send_reasoning = (not self.official) if send_reasoning is None else send_reasoning
        self._reasoning_adaptive = send_reasoning is None
        self.parse_text_tool_calls = parse_text_tool_calls
        self.stream_usage = stream_usage
        self.extra_body = dict(extra_body or {})
        self.last_retry_log = RetryLog()
        """Attempts, waits and failure reasons of the most recent request."""
        self.client = openai.AsyncOpenAI(
            api_key=key,
            base_url=self.base_url,
            timeout=timeout,
            max_retries=0,
            default_headers=default_headers,
        )
        self.name = f"openai:{self.model or '?'}"

    def _params(self, request: ModelRequest, model: str) -> dict[str, Any]:
        s = request.settings
        params: dict[str, Any] = {
            "model": model,
            "messages": to_openai_messages(request.messages, send_reasoning=self.send_reasoning),
        }
        # A server sees only the tools it may call: allowed_tools has no portable wire form.
        tools = callable_tools(request.tools, s.allowed_tools)
        if tools:
            params["tools"] = tools
            # "auto" is OpenAI's default with tools, but llama-cpp-python's function-calling chat
            # formats treat a request without tool_choice as one without tools: the model never
            # sees them and never calls one. Saying it costs nothing anywhere else.
            params["tool_choice"] = s.tool_choice or "auto"
        if s.temperature is not None:
            params["temperature"] = s.temperature
        if s.max_tokens is not None:
            # OpenAI's newer models refuse max_tokens; other servers may not know the new name.
            params["max_completion_tokens" if self.official else "max_tokens"] = s.max_tokens
        if s.seed is not None:
            params["seed"] = s.seed
        if s.stop:
            params["stop"] = s.stop
        if request.response_format:
            params["response_format"] = request.response_format
        if self.extra_body:
            params["extra_body"] = self.extra_body
        return params

    async def _model_name(self) -> str:
        if self.model:
            return self.model
        try:
            listed = await self._with_retries(lambda: self.client.models.list())
            names = [m.id for m in listed.data]
        except ModelAPIError as exc:
            raise ModelAPIError(
                f"no model name given, and listing the server's models failed: {exc}",
                status_code=exc.status_code,
                attempts=exc.attempts,
            ) from None
        if not names:
            raise ModelError(f"no model name given and {self.base_url} lists no models")
        self.model = names[0]
        self.name = f"openai:{self.model}"
        return self.model

    async def _with_retries(self, attempt: Any) -> Any:
        log = RetryLog()
        self.last_retry_log = log
        try:
            return await call_with_retries(attempt, classify_openai_error, self.retry_policy, log=log)
        except ModelError:
            raise
        except Exception as exc:
            raise self._final_error(exc, log) from exc

    def _final_error(self, exc: BaseException, log: RetryLog) -> ModelAPIError:
        where = self.base_url or "api.openai.com"
        reason = log.reasons[-1] if log.reasons else f"{type(exc).__name__}: {exc}"
        tries = f" after {log.attempts} attempts" if log.attempts > 1 else ""
        return ModelAPIError(
            f"model {self.model or '?'} at {where} failed{tries}: {reason}",
            status_code=getattr(exc, "status_code", None),
            attempts=log.attempts,
        )

    async def _create(self, request: ModelRequest, **extra: Any) -> Any:
        model = await self._model_name()
        while True:
            try:
                return await self._with_retries(
                    lambda: self.client.chat.completions.create(**self._params(request, model), **extra)
                )
            except ModelAPIError as exc:
                if not self._adapt_after(exc, request, extra):
                    raise

    def _adapt_after(self, exc: ModelAPIError, request: ModelRequest, extra: dict[str, Any]) -> bool:
        """Drop an optional field the server rejected (400/422 naming it); True to resend.

        Each field is dropped at most once and remembered, so this cannot loop.
        """
        if exc.status_code not in (400, 422):
            return False
        message = str(exc).lower()
        if "stream_options" in extra and "stream_options" in message:
            del extra["stream_options"]
            self.stream_usage = False
            return True
        sent = self.send_reasoning and any(m.reasoning for m in request.messages if m.role == "assistant")
        if sent and self._reasoning_adaptive and "reasoning" in message:
            self.send_reasoning = False
            return True
        return False

    async def complete(self, request: ModelRequest) -> ModelResponse:
        completion = await self._create(request)
        try:
            return response_from_completion(
                completion,
                model=self.model or "",
                tool_names=_names(request),
                parse_text_calls=self.parse_text_tool_calls,
            )
        except (ValueError, AttributeError, TypeError) as exc:
            raise ModelError(f"model {self.model} at {self.base_url}: malformed response ({exc})") from None

    async def stream(self, request: ModelRequest) -> AsyncIterator[StreamItem]:
        extra: dict[str, Any] = {"stream": True}
        if self.stream_usage:
            extra["stream_options"] = {"include_usage": True}
        chunks = await self._create(request, **extra)
        names = _names(request)
        acc = StreamAccumulator()
        think = ThinkStreamSplitter()
        gate = TextCallGate(active=bool(names) and self.parse_text_tool_calls)
        received = 0
        try:
            async for chunk in chunks:
                acc.model = acc.model or getattr(chunk, "model", "") or ""
                if getattr(chunk, "usage", None) is not None:
                    acc.usage = usage_of(chunk.usage)
                for choice in chunk.choices or []:
                    if choice.index not in (0, None):
                        continue
                    received += 1
                    if choice.delta is not None:
                        for item in self._deltas(acc, think, gate, choice.delta):
                            yield item
                    if choice.finish_reason:
                        acc.finish = choice.finish_reason
        except ModelError:
            raise
        except Exception as exc:
            raise ModelError(
                f"model {self.model} at {self.base_url}: stream broke after {received} chunks "
                f"({type(exc).__name__}: {exc})"
            ) from exc
        finally:
            await chunks.close()
        if received == 0:
            raise ModelError(
                f"model {self.model} at {self.base_url}: the server ended the stream without "
                "sending anything (it may not support streaming this request)"
            )
        reasoning_rest, text_rest = think.flush()
        if reasoning_rest:
            acc.reasoning.append(reasoning_rest)
            yield ReasoningDelta(reasoning_rest)
        if text_rest:
            acc.text.append(text_rest)
            if out := gate.feed(text_rest):
                yield TextDelta(out)
        response = acc.response(
            model=self.model or "", tool_names=names, parse_text_calls=self.parse_text_tool_calls
        )
        if held := gate.release(became_calls=bool(response.tool_calls) and not acc.calls):
            yield TextDelta(held)
        yield response

    @staticmethod
    def _deltas(
        acc: StreamAccumulator, think: ThinkStreamSplitter, gate: TextCallGate, delta: Any
    ) -> list[StreamItem]:
        items: list[StreamItem] = []
        if reasoning := reasoning_of(delta):
            acc.reasoning.append(reasoning)
            items.append(ReasoningDelta(reasoning))
        if delta.content:
            thought, text = think.feed(delta.content)
            if thought:
                acc.reasoning.append(thought)
                items.append(ReasoningDelta(thought))
            if text:
                acc.text.append(text)
                if out := gate.feed(text):
                    items.append(TextDelta(out))
        if getattr(delta, "tool_calls", None):
            acc.add_tool_deltas(delta.tool_calls)
        return items

    async def aclose(self) -> None:
        await self.client.close()
