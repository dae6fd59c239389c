"""A chat model that calls no provider: it answers from the answers it is given, and refuses the rest.

Replaying a run needs a model to hand the graph even when every answer the run should get is
already kept: the debugger opens a run without one (``kept_answers_model`` in
:mod:`sqlchorus.runs.debugger`), and an exported regression test replays with none
(:mod:`sqlchorus.runs.regression_test`). The run's call log serves its kept answers before any
model is asked, so such a model is reached only by a call the run did not make, and its refusal is
what says so. The scripted models of :mod:`sqlchorus.testing` build on the same class.

While it answers, :func:`current_call` says what the call is for (the prompt template's name, role
and node that :mod:`sqlchorus.core.llm` tags every call with, as run metadata), so an answering
function, or a refusal, can tell which node asked.
"""

from __future__ import annotations

import contextvars
import threading
from collections.abc import Callable, Sequence
from typing import Any, NoReturn

from langchain_core.callbacks import CallbackManagerForLLMRun
from langchain_core.language_models.chat_models import BaseChatModel
from langchain_core.messages import AIMessage, BaseMessage
from langchain_core.messages.ai import UsageMetadata
from langchain_core.outputs import ChatGeneration, ChatResult
from pydantic import ConfigDict, PrivateAttr

from sqlchorus.core.llm import NODE_KEY, PROMPT_KEY, ROLE_KEY
from sqlchorus.tools.errors import EXIT_NO_ANSWER, SqlchorusError

Answer = str | AIMessage
"""One answer: its text, or a message (to answer with tool calls, for structured output)."""

Responder = Callable[[list[BaseMessage]], Any]
"""A function of a call's messages that gives its answer, None to refuse it, or raises."""

NOT_RECORDED = "This call is not among the answers the model was given."
"""What a replay model says, unless told otherwise, when it refuses a call."""

_CALL: contextvars.ContextVar[dict[str, Any]] = contextvars.ContextVar("sqlchorus_replay_call", default={})


def current_call() -> dict[str, Any]:
    """What the call a replay model is answering is for: ``{"prompt", "role", "node"}`` (each
    None when the caller did not say), read from the call's run metadata; empty outside a call."""
    return dict(_CALL.get())


def count_tokens(text: str) -> int:
    """A rough token count (about four characters a token), for the usage a replay model reports."""
    return max(1, (len(text) + 3) // 4) if text else 0


class UnrecordedCallError(SqlchorusError, RuntimeError):
    """A call to a replay model that none of its answers is for."""

    kind = "unrecorded_call"
    exit_code = EXIT_NO_ANSWER
    http_status = 502


class ReplayChatModel(BaseChatModel):
    """A chat model that answers only from what it is given.

    Args:
        answers: the answers, used in turn (a call after the last is refused), or a function
            ``(messages) -> answer`` that gives one, returns None to refuse the call, or raises.
            An answer is a string or an ``AIMessage``.
        name: the model name reported in usage records and traces.
        refusal: what the error of a refused call (:class:`UnrecordedCallError`) says.
    """

    model_config = ConfigDict(arbitrary_types_allowed=True)

    answers: Any = None
    model_name: str = "replay"
    refusal: str = NOT_RECORDED
    calls: int = 0
    """How many calls it has been asked, refused ones too."""
    _lock: threading.Lock = PrivateAttr(default_factory=threading.Lock)
    _index: int = PrivateAttr(default=0)

    def __init__(self, answers: Sequence[Answer] | Responder = (), *, name: str = "replay",
                 refusal: str = NOT_RECORDED, **kw: Any):
        # The fields go in as one mapping: the type checker knows only BaseChatModel's own.
        fields: dict[str, Any] = {"answers": answers if callable(answers) else list(answers),
                                  "model_name": name, "refusal": refusal}
        super().__init__(**fields, **kw)

    @property
    def _llm_type(self) -> str:
        return "replay"

    def _answer(self, messages: list[BaseMessage]) -> Any:
        """The answer to ``messages``: the function's, or the next one given; None refuses."""
        if callable(self.answers):
            return self.answers(messages)
        with self._lock:
            if self._index >= len(self.answers):
                return None
            self._index += 1
            return self.answers[self._index - 1]

    def _refuse(self, messages: list[BaseMessage]) -> NoReturn:
        raise UnrecordedCallError(self.refusal)

    def _generate(
        self,
        messages: list[BaseMessage],
        stop: list[str] | None = None,
        run_manager: CallbackManagerForLLMRun | None = None,
        **kwargs: Any,
    ) -> ChatResult:
        with self._lock:
            self.calls += 1
        meta = getattr(run_manager, "metadata", None) or {}
        token = _CALL.set({"prompt": meta.get(PROMPT_KEY), "role": meta.get(ROLE_KEY), "node": meta.get(NODE_KEY)})
        try:
            reply = self._answer(messages)
            if reply is None:
                self._refuse(messages)
        finally:
            _CALL.reset(token)
        if not isinstance(reply, (str, AIMessage)):
            raise TypeError(f"An answer must be a string or AIMessage, got {type(reply).__name__}.")
        text = reply if isinstance(reply, str) else str(reply.content)
        prompt = "".join(str(m.content) for m in messages)
        usage = UsageMetadata(
            input_tokens=count_tokens(prompt),
            output_tokens=count_tokens(text),
            total_tokens=count_tokens(prompt) + count_tokens(text),
        )
        message = AIMessage(
            content=text,
            tool_calls=[] if isinstance(reply, str) else reply.tool_calls,
            usage_metadata=usage,
            response_metadata={"model_name": self.model_name},
        )
        return ChatResult(generations=[ChatGeneration(message=message)])
