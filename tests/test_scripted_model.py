"""sqlchorus.testing.ScriptedChatModel: scripted answers, bind_tools, token usage."""

from __future__ import annotations

import pytest
from langchain_core.callbacks import UsageMetadataCallbackHandler
from langchain_core.language_models.fake_chat_models import GenericFakeChatModel
from langchain_core.messages import HumanMessage
from pydantic import BaseModel

from sqlchorus.testing import ScriptedChatModel, oracle_model, prompt_text


def test_list_cycles():
    model = ScriptedChatModel(["a", "b"])
    assert [model.invoke("q").content for _ in range(3)] == ["a", "b", "a"]
    assert model.calls == 3
    assert isinstance(model, GenericFakeChatModel)


def test_callable_sees_messages_and_may_raise():
    model = ScriptedChatModel(lambda messages: prompt_text(messages).upper())
    assert model.invoke([HumanMessage("select")]).content == "SELECT"

    def broken(messages):
        raise TimeoutError("provider timed out")

    with pytest.raises(TimeoutError):
        ScriptedChatModel(broken).invoke("q")


def test_reports_usage_to_langchain_callbacks():
    model = ScriptedChatModel(["SELECT 1"], name="my-model")
    reply = model.invoke("How many singers are there?")
    assert reply.usage_metadata["input_tokens"] > 0 and reply.usage_metadata["output_tokens"] > 0
    handler = UsageMetadataCallbackHandler()
    model.invoke("again", config={"callbacks": [handler]})
    assert handler.usage_metadata["my-model"]["total_tokens"] > 0


def test_bind_tools_and_structured_output():
    class Answer(BaseModel):
        sql: str

    from langchain_core.messages import AIMessage

    call = AIMessage(content="", tool_calls=[{"name": "Answer", "args": {"sql": "SELECT 1"}, "id": "1"}])
    model = ScriptedChatModel([call])
    assert model.bind_tools([Answer]) is model
    structured = model.with_structured_output(Answer)
    assert structured.invoke("q") == Answer(sql="SELECT 1")


def test_rejects_empty_script():
    with pytest.raises(ValueError):
        ScriptedChatModel([])


def test_oracle_answers_each_role():
    from sqlchorus import prompts
    from sqlchorus.core.llm import PROMPT_KEY

    model = oracle_model(lambda q: "SELECT name FROM singer" if q == "Who sings?" else None)

    def ask(prompt):  # tagged with its prompt's name, as every model call of a run is
        return model.invoke(prompt, config={"metadata": {PROMPT_KEY: prompt.name}}).content

    gen = prompts.render("generate_divide_conquer", examples="", schema="", values="", question="Who sings?", evidence="")
    assert ask(gen).endswith("SELECT name FROM singer")
    fix = prompts.render("fix_candidates", examples="", schema="", values="", question="Who sings?", evidence="", earlier="",
                         sql="SELECT nme FROM singer", result="no such column")
    assert ask(fix) == "Final Answer: SELECT name FROM singer"
    other = prompts.render("generate_divide_conquer", examples="", schema="", values="", question="Unknown?", evidence="")
    assert "SELECT" not in ask(other)
    assert model.invoke(gen).content == "I do not understand the request."  # untagged: no role


def test_the_oracle_ignores_the_prompts_wording():
    """Rewording a prompt cannot break a scripted run: the role comes from the call's tag."""
    from sqlchorus import prompts
    from sqlchorus.core.llm import PROMPT_KEY

    model = oracle_model(lambda q: "SELECT name FROM singer")
    reworded = prompts.Prompt("Please write SQL.\nQuestion: Who sings?\n", "fix_candidates")
    answer = model.invoke(reworded, config={"metadata": {PROMPT_KEY: reworded.name}}).content
    assert answer == "Final Answer: SELECT name FROM singer"
