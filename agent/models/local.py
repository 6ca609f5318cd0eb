"""The embedded local model: llama.cpp in-process, no network, the default model of rein.

Small models do not follow tool-calling chat templates reliably, so when tools are offered the
model is told about them in the system prompt and its output is constrained by grammars. By
default (tool_protocol="action") one generation chooses the next action among the tool names and
`respond`, and a second one, continuing the same prompt (llama.cpp reuses its cached prefix),
writes the tool's arguments under its parameter grammar or the answer as text. The older
tool_protocol="json" constrains the whole turn to one JSON object (answer or tool calls), parsed
leniently into ordinary ToolCall objects. A loaded model is cached per process and
used by one thread at a time, since a llama.cpp context is not thread-safe.

The context window is sized for the job unless n_ctx is given (agent.models.local_loader): it
starts at DEFAULT_N_CTX and is re-created larger when a request needs more (prompt plus reply
budget), up to the context length the model was trained for, read from the GGUF metadata. Short
conversations so never pay for a large KV cache, and a long policy plus tool results does not
overflow a fixed 4096 tokens.

llama.cpp reuses the evaluated prefix of the last prompt only; the KV state at the end of each
prompt's system block (policy and tool list) is also kept in a small LRU per loaded model
(agent.models.prefix_cache), so prompts that take turns on one model (agent, simulated user) and
later dialogues of the same domain evaluate a long policy once, not on every call; those states
are also kept on disk (agent.models.prefix_store), so a later process loads the policy's state
instead of evaluating it. Greedy decoding under a grammar checks the model's best token before
masking the vocabulary (agent.models.greedy_grammar): the same tokens, without testing 152k
tokens against the grammar at every step.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import threading
import time
from collections.abc import AsyncGenerator, AsyncIterator, Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from agent.messages import ModelRequest, ModelResponse, ToolCall, Usage
from agent.models.base import Model, ModelError, StreamItem, TextDelta
from agent.models.gguf import ModelFileError, ensure_model_file
from agent.models.local_loader import LoadedModel, load_model
from agent.models.local_prompt import (
    ACTION_OPEN,
    DEFAULT_TOOL_PROTOCOL,
    Plan,
    ProtocolTextError,
    ToolProtocol,
    action_step,
    answer_only,
    answer_word,
    build_plan,
    parse_action,
    parse_output,
    render_prompt,
    stable_prefix,
)
from agent.models.prefix_cache import (
    CallRecord,
    PrefixStep,
    reused_tokens,
    shared_prefix,
)
from agent.models.toolcall_parse import AnswerStreamExtractor


class LocalModel(Model):
    """A small instruct model run in-process by llama.cpp; see agent.models.gguf for the weights.

    Deterministic for a given seed: greedy decoding by default (small models follow formats best
    that way), seeded sampling when a temperature is set. n_ctx None (the default) sizes the
    context window for each request, up to the model's trained length; a number fixes it.
    tool_protocol "action" (default) chooses the action first and then writes its input; "json"
    is the single-grammar mode of earlier versions (see agent.models.local_prompt). prefix_cache
    False stops this model from restoring and saving system-block states (the loaded model's
    PrefixCache, bounded by `model.load().prefix_cache.configure(max_bytes=..., max_states=...)`).
    fast_grammar False makes greedy decoding under a grammar mask the whole vocabulary before every
    token, as llama.cpp's grammar sampler does, instead of checking the best token first
    (agent.models.greedy_grammar): the same tokens, slower; for comparisons.
    """

    def __init__(
        self,
        name: str = "qwen2.5-coder-1.5b",
        n_ctx: int | None = None,
        n_threads: int | None = None,
        seed: int = 0,
        *,
        temperature: float = 0.0,
        max_tokens: int = 512,
        model_path: str | Path | None = None,
        tool_protocol: ToolProtocol = DEFAULT_TOOL_PROTOCOL,
        prefix_cache: bool = True,
        fast_grammar: bool = True,
    ) -> None:
        if tool_protocol not in ("action", "json"):
            raise ModelError(f"unknown tool_protocol {tool_protocol!r}; use 'action' or 'json'")
        self.model_name = name
        self.name = f"local:{name}"
        self.n_ctx = n_ctx
        self.n_threads = n_threads
        self.seed = seed
        self.temperature = temperature
        self.max_tokens = max_tokens
        self.model_path = Path(model_path) if model_path else None
        self.tool_protocol: ToolProtocol = tool_protocol
        self.prefix_cache = prefix_cache
        self.fast_grammar = fast_grammar
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

    async def _run(self, request: ModelRequest, *, stream: bool) -> AsyncGenerator[StreamItem, None]:
        loaded = await asyncio.to_thread(self.load)
        try:
            plan = build_plan(request, self.tool_protocol)
        except ValueError as exc:
            raise ModelError(f"{self.name}: {exc}") from None
        loop = asyncio.get_running_loop()
        queue: asyncio.Queue[tuple[str, Any]] = asyncio.Queue()
        cancel = threading.Event()

        def emit(kind: str, payload: Any) -> None:
            with contextlib.suppress(RuntimeError):  # the loop closed: nobody is listening
                loop.call_soon_threadsafe(queue.put_nowait, (kind, payload))

        loop.run_in_executor(None, self._generate, _Generation(loaded, request, stream, cancel, emit), plan)
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

    def _generate(self, gen: _Generation, plan: Plan) -> None:
        emit = gen.emit
        try:
            with gen.loaded.lock:
                response = self._generate_locked(gen, plan)
                if response.tool_calls and repeats_answered_calls(gen.request, response):
                    # A 0.5B model tends to call the same tool again with the same arguments after
                    # getting its result, or after the call was refused twice. The result is already
                    # in context, so ask for the answer instead of looping until the step limit (or
                    # the graph's limit on identical failures).
                    if plan.mode == "actions":  # cheaper: the prompt is cached, only the answer is new
                        again = self._act(gen, plan, choice=answer_word(plan), made=True)
                    else:
                        again = self._generate_locked(gen, answer_only(plan))
                    again.usage = again.usage + response.usage
                    response = again
            emit("done", response)
        except ModelError as exc:
            emit("error", exc)
        except Exception as exc:  # llama.cpp's own failures, reported as model errors
            emit("error", ModelError(f"{self.name}: generation failed: {type(exc).__name__}: {exc}"))

    def _generate_locked(self, gen: _Generation, plan: Plan) -> ModelResponse:
        if plan.mode == "actions":
            return self._act(gen, plan)
        text, rendered, stable, budget = self._prompt(gen, plan)
        out = self._sample(gen, text, rendered, plan.grammar, budget, gen.emit if gen.stream else None, stable=stable)
        usage = Usage(input_tokens=out.prompt_tokens, output_tokens=out.output_tokens, requests=1)
        return parse_output(out.text, plan, out.finish, usage, self.name)

    def _act(
        self,
        gen: _Generation,
        plan: Plan,
        *,
        choice: str | None = None,
        made: bool = False,
    ) -> ModelResponse:
        """The action protocol: choose the action (unless given: made), then write its input.

        An answer written as protocol text becomes the call it describes (parse_action); one that
        names no call it may make is asked for again, under a grammar that rules such text out.
        """
        text, rendered, stable, budget = self._prompt(gen, plan)
        loaded = gen.loaded
        chosen_tokens = 0
        if choice is None and len(plan.actions) == 1:
            choice = plan.actions[0]  # nothing to choose (tool_choice "none"): no generation
        if choice is None:
            # Enough tokens for the longest choice; the context is sized for both steps at once, so
            # it is not re-created (losing the cached prompt) between them.
            longest = max(len(loaded.llama.tokenize(f" {c}".encode(), add_bos=False)) for c in plan.actions)
            first = self._sample(
                gen, text, rendered, plan.grammar, min(budget, longest + 1), None,
                reserve=budget + 8, stable=stable,
            )
            choice, chosen_tokens = first.text.strip(), first.output_tokens
            if choice not in plan.actions:  # cut off by a tiny max_tokens
                usage = Usage(input_tokens=first.prompt_tokens, output_tokens=chosen_tokens, requests=1)
                return ModelResponse(text="", usage=usage, finish_reason="length", model=self.name)
        follow, grammar = action_step(plan, choice, made=made)
        is_answer = choice not in plan.argument_grammars
        on_text = _answer_stream(gen.emit) if gen.stream and is_answer else None
        stop = [f"\n{plan.lead.strip()}"] if is_answer else []  # the model starting another action
        out = self._sample(
            gen, f"{text} {choice}{follow}", rendered, grammar,
            max(1, budget - chosen_tokens), on_text, extra_stop=stop, stable=stable,
        )
        usage = Usage(
            input_tokens=out.prompt_tokens - chosen_tokens,
            output_tokens=chosen_tokens + out.output_tokens,
            requests=1,
        )
        try:
            return parse_action(choice, out.text, plan, out.finish, usage, self.name)
        except ProtocolTextError:
            if made:  # the grammar rules protocol text out; reaching here is a bug, not the model
                raise
            again = self._act(gen, plan, choice=choice, made=True)
            again.usage = again.usage + usage
            return again

    def _prompt(self, gen: _Generation, plan: Plan) -> tuple[str, Any, str, int]:
        """The prompt text of a plan, the formatter's response, its cached system block and the
        reply budget."""
        text, rendered = render_prompt(gen.loaded.formatter, plan)
        return text, rendered, self._stable(gen.loaded, plan), gen.request.settings.max_tokens or self.max_tokens

    def _stable(self, loaded: LoadedModel, plan: Plan) -> str:
        """The system block whose state is cached, or "" (cache off for this model)."""
        if not self.prefix_cache or loaded.closed_formatter is None:
            return ""
        return stable_prefix(loaded.closed_formatter, plan)

    def _sample(
        self,
        gen: _Generation,
        text: str,
        rendered: Any,
        grammar_text: str | None,
        budget: int,
        on_text: Callable[[str, Any], None] | None,
        *,
        reserve: int | None = None,
        extra_stop: list[str] | None = None,
        stable: str = "",
    ) -> Sampled:
        """One llama.cpp generation from the prompt text; reserve sizes the context (default
        budget); stable is the text the prompt opens with whose evaluated state is kept."""
        from llama_cpp import LlamaGrammar, LogitsProcessorList, StoppingCriteriaList

        loaded, cancel = gen.loaded, gen.cancel
        started = time.perf_counter()
        add_bos = not rendered.added_special
        prompt = loaded.llama.tokenize(text.encode("utf-8"), add_bos=add_bos, special=True)
        boundary = 0
        if stable and text.startswith(stable):
            # Counted in the prompt's own tokens, in case the tokenizer merges across the boundary.
            head = loaded.llama.tokenize(stable.encode("utf-8"), add_bos=add_bos, special=True)
            boundary = shared_prefix(head, prompt)
        settings = gen.request.settings
        loaded.fit(len(prompt) + (reserve or budget))
        llama = loaded.llama  # after fit: a grown context is a new llama.cpp object
        room = loaded.n_ctx - len(prompt)
        if room < 8:
            raise ModelError(f"{self.name}: {overflow_message(len(prompt), loaded)}")
        step: PrefixStep = "none"
        if boundary:
            step = loaded.prefix_cache.prepare(llama, prompt, boundary)
        reused = reused_tokens(llama, prompt)
        prepared = time.perf_counter()
        max_tokens = min(budget, room)
        stop = [rendered.stop] if isinstance(rendered.stop, str) else list(rendered.stop or [])
        stop += settings.stop or []
        stop += extra_stop or []
        sampled = 0

        def count_and_cancel(_ids: Any, _logits: Any) -> bool:
            nonlocal sampled
            sampled += 1
            return cancel.is_set()

        criteria = StoppingCriteriaList([count_and_cancel])
        if rendered.stopping_criteria is not None:
            criteria.extend(rendered.stopping_criteria)
        temperature = self.temperature if settings.temperature is None else settings.temperature
        grammar, checker = None, None
        if grammar_text and temperature == 0 and self.fast_grammar:
            # Imported here: it needs numpy, which the lean core install (no `local` extra) lacks.
            from agent.models.greedy_grammar import GreedyGrammar

            checker = GreedyGrammar(llama, grammar_text, len(prompt))
        elif grammar_text:
            grammar = LlamaGrammar.from_string(grammar_text, verbose=False)
        output = llama.create_completion(
            prompt=prompt,
            max_tokens=max_tokens,
            temperature=temperature,
            seed=self.seed if settings.seed is None else settings.seed,
            stop=stop,
            stopping_criteria=criteria,
            grammar=grammar,
            logits_processor=LogitsProcessorList([checker]) if checker else None,
            # A repeat penalty fights JSON, which repeats quotes and braces by nature.
            repeat_penalty=1.0 if grammar_text else 1.1,
            stream=True,
        )
        pieces: list[str] = []
        finish: str | None = None
        try:
            for chunk in output:
                if cancel.is_set():
                    break
                choice = chunk["choices"][0]
                if piece := choice.get("text"):
                    pieces.append(piece)
                    if on_text is not None:
                        on_text("delta", piece)
                finish = choice.get("finish_reason") or finish
        finally:
            output.close()
            if checker is not None:
                checker.close()
        # The criteria run once per sampled token and once more after the loop.
        generated = min(max(sampled - 1, 0), max_tokens)
        missed = boundary if step == "evaluate" else 0  # evaluated by prepare, not reused
        loaded.calls.append(CallRecord(
            prompt_tokens=len(prompt),
            step=step,
            reused_tokens=reused - missed,
            restored_tokens=boundary if step == "restore" else 0,
            evaluated_tokens=len(prompt) - reused + missed,
            generated_tokens=generated,
            grammar_masks=checker.masked if checker is not None else (generated if grammar else 0),
            prepare_seconds=prepared - started,
            seconds=time.perf_counter() - started,
        ))
        return Sampled("".join(pieces), finish, len(prompt), generated)


@dataclass
class _Generation:
    """One request's generation on a loaded model: what each of its steps needs."""

    loaded: LoadedModel
    """The model, its lock held for the whole generation."""
    request: ModelRequest
    """The request being answered."""
    stream: bool
    """Whether answer text is sent out as it comes."""
    cancel: threading.Event
    """Set when the caller has gone: generation stops within a token."""
    emit: Callable[[str, Any], None]
    """Sends ("delta", text), ("done", response) or ("error", exc) to the waiting coroutine."""


@dataclass
class Sampled:
    """What one llama.cpp generation produced."""

    text: str
    """The generated text."""
    finish: str | None
    """llama.cpp's finish reason ("stop", "length")."""
    prompt_tokens: int
    """Tokens in the prompt."""
    output_tokens: int
    """Tokens generated."""


def _answer_stream(emit: Callable[[str, Any], None]) -> Callable[[str, Any], None]:
    """emit for an answer's text: the whitespace before the first visible character dropped, and
    nothing passed on while the text may still open as protocol text (`Action:`), nor ever once
    it does, so a call written as an answer never streams to the user."""
    held = ""
    state = "start"  # start → open (passing text on), or start → protocol (passing nothing)

    def forward(kind: str, piece: Any) -> None:
        nonlocal held, state
        if state == "start":
            held = (held + piece).lstrip()
            if ACTION_OPEN.startswith(held):
                return  # empty, or a prefix of `Action:`: not known yet
            state = "protocol" if held.startswith(ACTION_OPEN) else "open"
            piece, held = held, ""
        if state == "open" and piece:
            emit(kind, piece)

    return forward


def overflow_message(prompt_tokens: int, loaded: LoadedModel) -> str:
    """Why a prompt does not fit, and what would make it fit."""
    head = f"the conversation is {prompt_tokens} tokens, too long for the context window of {loaded.n_ctx}"
    trained = loaded.n_ctx_train
    if loaded.automatic or (trained and loaded.n_ctx >= trained):
        limit = f"{trained} tokens" if trained else "its limit"
        return f"{head}, the most this model was trained for (n_ctx_train: {limit}); shorten the history"
    more = f"up to the model's trained {trained} tokens" if trained else "as far as the model allows"
    return f"{head} (n_ctx={loaded.n_ctx} was set; raise it or leave it unset to size the window {more})"


REFUSED_REPEATS = 2
"""How often an identical call may be refused in a user turn before the embedded model is made to
answer instead of sending it again (one retry for a passing failure; the graph ends a turn at the
third identical failure, agent.nodes.tools.REPEATED_FAILURE_LIMIT)."""


def repeats_answered_calls(request: ModelRequest, response: ModelResponse) -> bool:
    """Whether every call in the response was already made in this user turn (same tool, same
    arguments) and answered without error, or refused REFUSED_REPEATS times."""
    answered: set[tuple[str, str]] = set()
    refused: dict[tuple[str, str], int] = {}
    by_id: dict[str, bool] = {}  # tool_call_id -> whether its result was an error
    for m in reversed(request.messages):
        if m.role == "user":
            break
        if m.role == "tool" and m.tool_call_id:
            by_id[m.tool_call_id] = m.is_error
        for tc in m.tool_calls:
            if tc.id not in by_id:
                continue
            if by_id[tc.id]:
                refused[_call_key(tc)] = refused.get(_call_key(tc), 0) + 1
            else:
                answered.add(_call_key(tc))
    done = answered | {key for key, n in refused.items() if n >= REFUSED_REPEATS}
    return bool(done) and all(_call_key(tc) in done for tc in response.tool_calls)


def _call_key(call: ToolCall) -> tuple[str, str]:
    args = call.parsed_arguments()
    return call.name, json.dumps(args, sort_keys=True) if args is not None else call.arguments


def model_info(model: LocalModel) -> dict[str, Any]:
    """Facts about a loaded local model, for `rein models` and benchmarks."""
    loaded = model.load()
    return {
        "name": model.name,
        "path": loaded.path,
        "n_ctx": loaded.n_ctx,
        "n_ctx_train": loaded.n_ctx_train,
        "n_ctx_automatic": loaded.automatic,
        "n_threads": loaded.n_threads,
        "load_seconds": round(loaded.load_seconds, 3),
        "metadata_name": loaded.llama.metadata.get("general.name"),
    }

