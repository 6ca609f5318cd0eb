"""The embedded local model: llama.cpp in-process, no network, the default model of rein.

Small models do not follow tool-calling chat templates reliably, so when tools are offered the
model is told about them in the system prompt and its output is constrained by a grammar built
from a JSON schema of the offered tools (what llama.cpp's `response_format` does); the JSON is
then parsed leniently into ordinary ToolCall objects. A loaded model is cached per process and
used by one thread at a time, since a llama.cpp context is not thread-safe.
"""

from __future__ import annotations

import asyncio
import atexit
import contextlib
import json
import os
import threading
import time
from collections.abc import AsyncIterator, Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from agent.messages import ModelRequest, ModelResponse, ToolCall, Usage
from agent.models.base import Model, ModelError, StreamItem, TextDelta
from agent.models.gguf import ModelFileError, ensure_model_file
from agent.models.local_prompt import Plan, answer_only, build_plan, parse_output
from agent.models.toolcall_parse import AnswerStreamExtractor


@dataclass
class LoadedModel:
    """A llama.cpp model loaded once per process, with the lock that serialises its use."""

    llama: Any
    """The llama_cpp.Llama object."""
    formatter: Any
    """The chat formatter built from the GGUF's own chat template."""
    lock: threading.Lock
    """Held while the model generates or tokenizes."""
    load_seconds: float
    """Wall time the load took."""
    path: str
    """The GGUF file."""


_LOADED: dict[tuple[str, int, int], LoadedModel] = {}
_LOADED_LOCK = threading.Lock()


@atexit.register
def _close_all() -> None:
    # Freed explicitly while the interpreter is intact: llama.cpp's finalizers fail noisily when
    # they run during interpreter teardown.
    with _LOADED_LOCK:
        for loaded in _LOADED.values():
            if not loaded.lock.acquire(timeout=5):  # still generating: leave it to the OS
                continue
            try:
                with contextlib.suppress(Exception):
                    loaded.llama.close()
            finally:
                loaded.lock.release()
        _LOADED.clear()


def default_threads() -> int:
    """Half the usable cores, at least one: on a busy machine more threads run slower, not faster."""
    try:
        cores = len(os.sched_getaffinity(0))
    except AttributeError:  # not on Linux
        cores = os.cpu_count() or 1
    return max(1, cores // 2)


def load_model(path: str | Path, n_ctx: int = 4096, n_threads: int | None = None) -> LoadedModel:
    """The process-wide llama.cpp model for (path, n_ctx, n_threads), loaded on first use."""
    threads = n_threads or default_threads()
    key = (str(Path(path).resolve()), n_ctx, threads)
    with _LOADED_LOCK:
        if key in _LOADED:
            return _LOADED[key]
        # OpenMP threads that spin while waiting starve each other on a shared machine; must be
        # set before llama.cpp's runtime starts.
        os.environ.setdefault("OMP_WAIT_POLICY", "PASSIVE")
        try:
            import llama_cpp
            from llama_cpp import llama_chat_format
        except ImportError as exc:
            raise ModelError(
                f"the embedded model needs llama-cpp-python ({exc}); pip install llama-cpp-python"
            ) from None
        started = time.perf_counter()
        try:
            llama = llama_cpp.Llama(
                model_path=key[0],
                n_ctx=n_ctx,
                n_threads=threads,
                n_threads_batch=threads,
                verbose=False,
            )
        except (ValueError, RuntimeError, OSError) as exc:
            raise ModelFileError(f"llama.cpp could not load {key[0]}: {exc}") from None
        template = llama.metadata.get("tokenizer.chat_template")
        if not template:
            raise ModelFileError(f"{key[0]} has no chat template in its metadata")
        eos = llama.token_eos()
        bos = llama.token_bos()
        formatter = llama_chat_format.Jinja2ChatFormatter(
            template=template,
            eos_token=_token_text(llama, eos),
            bos_token=_token_text(llama, bos),
            stop_token_ids=[eos],
        )
        loaded = LoadedModel(llama, formatter, threading.Lock(), time.perf_counter() - started, key[0])
        _LOADED[key] = loaded
        return loaded


def _token_text(llama: Any, token: int) -> str:
    if token == -1:
        return ""
    return llama.detokenize([token], special=True).decode("utf-8", errors="replace")


class LocalModel(Model):
    """A small instruct model run in-process by llama.cpp; see agent.models.gguf for the weights.

    Deterministic for a given seed: greedy decoding by default (small models follow formats best
    that way), seeded sampling when a temperature is set.
    """

    def __init__(
        self,
        name: str = "qwen2.5-coder-0.5b",
        n_ctx: int = 4096,
        n_threads: int | None = None,
        seed: int = 0,
        *,
        temperature: float = 0.0,
        max_tokens: int = 512,
        model_path: str | Path | None = None,
    ) -> None:
        self.model_name = name
        self.name = f"local:{name}"
        self.n_ctx = n_ctx
        self.n_threads = n_threads
        self.seed = seed
        self.temperature = temperature
        self.max_tokens = max_tokens
        self.model_path = Path(model_path) if model_path else None
        self._loaded: LoadedModel | None = None

    def path(self) -> Path:
        """The verified GGUF file (assembled into the cache on first use)."""
        if self.model_path is not None:
            if not self.model_path.is_file():
                raise ModelFileError(f"model file {self.model_path} does not exist")
            return self.model_path
        return ensure_model_file(self.model_name)

    def load(self) -> LoadedModel:
        """Load (or reuse) the model in this process; blocking."""
        if self._loaded is None:
            self._loaded = load_model(self.path(), self.n_ctx, self.n_threads)
        return self._loaded

    async def complete(self, request: ModelRequest) -> ModelResponse:
        async with contextlib.aclosing(self._run(request, stream=False)) as items:
            async for item in items:
                if isinstance(item, ModelResponse):
                    return item
        raise ModelError(f"{self.name}: generation ended without a response")

    async def stream(self, request: ModelRequest) -> AsyncIterator[StreamItem]:
        # aclosing: a caller that stops early stops the generation now, not at garbage collection.
        async with contextlib.aclosing(self._run(request, stream=True)) as items:
            async for item in items:
                yield item

    async def _run(self, request: ModelRequest, *, stream: bool) -> AsyncIterator[StreamItem]:
        loaded = await asyncio.to_thread(self.load)
        try:
            plan = build_plan(request)
        except ValueError as exc:
            raise ModelError(f"{self.name}: {exc}") from None
        loop = asyncio.get_running_loop()
        queue: asyncio.Queue[tuple[str, Any]] = asyncio.Queue()
        cancel = threading.Event()

        def emit(kind: str, payload: Any) -> None:
            with contextlib.suppress(RuntimeError):  # the loop closed: nobody is listening
                loop.call_soon_threadsafe(queue.put_nowait, (kind, payload))

        loop.run_in_executor(None, self._generate, loaded, request, plan, stream, cancel, emit)
        extractor = AnswerStreamExtractor() if plan.mode == "tools" else None
        try:
            while True:
                kind, payload = await queue.get()
                if kind == "error":
                    raise payload
                if kind == "done":
                    yield payload
                    break
                piece = extractor.feed(payload) if extractor else payload
                if piece:
                    yield TextDelta(piece)
        finally:
            # Stops generation within a token when the caller goes away or is cancelled.
            cancel.set()

    def _generate(
        self,
        loaded: LoadedModel,
        request: ModelRequest,
        plan: Plan,
        stream: bool,
        cancel: threading.Event,
        emit: Callable[[str, Any], None],
    ) -> None:
        try:
            with loaded.lock:
                response = self._generate_locked(loaded, request, plan, stream, cancel, emit)
                if plan.mode == "tools" and response.tool_calls and repeats_answered_calls(request, response):
                    # A 0.5B model under a tool grammar tends to call the same tool again with the
                    # same arguments after getting its result. The result is already in context,
                    # so ask for the answer instead of looping until the step limit.
                    again = self._generate_locked(loaded, request, answer_only(plan), stream, cancel, emit)
                    again.usage = again.usage + response.usage
                    response = again
            emit("done", response)
        except ModelError as exc:
            emit("error", exc)
        except Exception as exc:  # llama.cpp's own failures, reported as model errors
            emit("error", ModelError(f"{self.name}: generation failed: {type(exc).__name__}: {exc}"))

    def _generate_locked(
        self,
        loaded: LoadedModel,
        request: ModelRequest,
        plan: Plan,
        stream: bool,
        cancel: threading.Event,
        emit: Callable[[str, Any], None],
    ) -> ModelResponse:
        from llama_cpp import LlamaGrammar, StoppingCriteriaList

        llama = loaded.llama
        rendered = loaded.formatter(messages=plan.messages)
        prompt = llama.tokenize(
            rendered.prompt.encode("utf-8"), add_bos=not rendered.added_special, special=True
        )
        settings = request.settings
        room = self.n_ctx - len(prompt)
        if room < 8:
            raise ModelError(
                f"{self.name}: the conversation is {len(prompt)} tokens, too long for the context "
                f"window of {self.n_ctx} (raise n_ctx or shorten the history)"
            )
        max_tokens = min(settings.max_tokens or self.max_tokens, room)
        stop = [rendered.stop] if isinstance(rendered.stop, str) else list(rendered.stop or [])
        stop += settings.stop or []
        sampled = 0

        def count_and_cancel(_ids: Any, _logits: Any) -> bool:
            nonlocal sampled
            sampled += 1
            return cancel.is_set()

        criteria = StoppingCriteriaList([count_and_cancel])
        if rendered.stopping_criteria is not None:
            criteria.extend(rendered.stopping_criteria)
        grammar = LlamaGrammar.from_string(plan.grammar, verbose=False) if plan.grammar else None
        temperature = self.temperature if settings.temperature is None else settings.temperature
        output = llama.create_completion(
            prompt=prompt,
            max_tokens=max_tokens,
            temperature=temperature,
            seed=self.seed if settings.seed is None else settings.seed,
            stop=stop,
            stopping_criteria=criteria,
            grammar=grammar,
            # A repeat penalty fights JSON, which repeats quotes and braces by nature.
            repeat_penalty=1.0 if grammar is not None else 1.1,
            stream=True,
        )
        pieces: list[str] = []
        finish: str | None = None
        for chunk in output:
            if cancel.is_set():
                break
            choice = chunk["choices"][0]
            if text := choice.get("text"):
                pieces.append(text)
                if stream:
                    emit("delta", text)
            finish = choice.get("finish_reason") or finish
        # The criteria run once per sampled token and once more after the loop.
        usage = Usage(input_tokens=len(prompt), output_tokens=min(max(sampled - 1, 0), max_tokens), requests=1)
        return parse_output("".join(pieces), plan, finish, usage, self.name)


def repeats_answered_calls(request: ModelRequest, response: ModelResponse) -> bool:
    """Whether every call in the response was already made, and answered without error, in this
    user turn (same tool, same arguments)."""
    answered: set[tuple[str, str]] = set()
    by_id: dict[str, tuple[str, str]] = {}
    for m in reversed(request.messages):
        if m.role == "user":
            break
        if m.role == "tool" and not m.is_error and m.tool_call_id:
            by_id[m.tool_call_id] = ("", "")
        for tc in m.tool_calls:
            if tc.id in by_id:
                answered.add(_call_key(tc))
    return bool(answered) and all(_call_key(tc) in answered for tc in response.tool_calls)


def _call_key(call: ToolCall) -> tuple[str, str]:
    args = call.parsed_arguments()
    return call.name, json.dumps(args, sort_keys=True) if args is not None else call.arguments


def model_info(model: LocalModel) -> dict[str, Any]:
    """Facts about a loaded local model, for `rein models` and benchmarks."""
    loaded = model.load()
    return {
        "name": model.name,
        "path": loaded.path,
        "n_ctx": model.n_ctx,
        "n_threads": loaded.llama.n_threads,
        "load_seconds": round(loaded.load_seconds, 3),
        "metadata_name": loaded.llama.metadata.get("general.name"),
    }

