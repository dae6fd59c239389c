"""A role's model calls run on the node that has a named Ray resource (sqlchorus.cluster.remote_model).

The quick tests cover the ``ROLE=RESOURCE`` parser and how a host's errors are carried back. The
slow ones start a real two-node cluster on loopback: a head without the resource, and a node with
``model_node``, where the generation and fixing roles' model must run.
"""

from __future__ import annotations

import doctest
import os
import pickle
import sys
from pathlib import Path
from types import SimpleNamespace

import pytest

from sqlchorus.cluster import remote_model
from sqlchorus.cluster.connect import ClusterError
from sqlchorus.cluster.remote_model import (
    NODE_ID_KEY,
    local_error,
    parse_role_resources,
    portable_error,
    with_role_resources,
)
from sqlchorus.config.settings import ROLES, Settings
from sqlchorus.core.llm import ModelTimeoutError, TransientModelError, is_auth_error, is_transient

# -- parsing ------------------------------------------------------------------------------------


def test_the_parser_s_examples_hold():
    failed, tried = doctest.testmod(remote_model)
    assert tried >= 6 and failed == 0


def test_a_role_takes_a_resource_and_star_stands_for_every_role():
    assert parse_role_resources([]) == {}
    assert parse_role_resources(["generation=gpu_node", "fixing=gpu_node"]) == {
        "generation": "gpu_node", "fixing": "gpu_node"}
    assert parse_role_resources(["all=big"]) == dict.fromkeys(ROLES, "big")
    # a role named on its own wins over *, whichever comes first
    assert parse_role_resources(["generation=gpu", "*=cpu"])["generation"] == "gpu"
    assert parse_role_resources([" generation = gpu_node "]) == {"generation": "gpu_node"}


@pytest.mark.parametrize("value, message", [
    ("generator=gpu_node", "unknown model role 'generator' (did you mean 'generation'?)"),
    ("writer=gpu_node", "unknown model role 'writer'; roles are keywords, linking"),
    ("generation", "not of the form ROLE=RESOURCE"),
    ("generation=", "not of the form ROLE=RESOURCE"),
    ("=gpu_node", "not of the form ROLE=RESOURCE"),
    ("generation,=gpu_node", "not of the form ROLE=RESOURCE"),
    ("generation=gpu node", "a Ray resource name has no spaces"),
])
def test_a_malformed_value_or_an_unknown_role_is_said_in_one_line(value, message):
    with pytest.raises(ValueError, match=None) as info:
        parse_role_resources([value])
    assert message in str(info.value) and "\n" not in str(info.value)


def test_one_role_with_two_resources_is_refused():
    with pytest.raises(ValueError, match="the fixing role already runs on 'a'"):
        parse_role_resources(["fixing=a", "generation,fixing=b"])
    with pytest.raises(ValueError, match="every role already runs on 'a'"):
        parse_role_resources(["*=a", "all=b"])


def test_no_roles_leave_the_settings_as_they_are_without_ray():
    settings = Settings(model="openai:gpt-4o-mini", trace_dir=None)
    assert with_role_resources(settings, {}) is settings


def test_a_role_without_a_model_or_a_process_not_on_a_cluster_is_said_before_any_host_starts():
    from sqlchorus.core.models import ModelConfigError

    with pytest.raises(ModelConfigError):
        with_role_resources(Settings(model=None, trace_dir=None), {"generation": "gpu_node"})
    ray = pytest.importorskip("ray")
    if ray.is_initialized():
        pytest.skip("this process is already on a cluster")
    with pytest.raises(ClusterError, match=r"needs this process connected to a Ray cluster \(--ray\)"):
        with_role_resources(Settings(model="openai:gpt-4o-mini", trace_dir=None), {"generation": "gpu_node"})


# -- errors from the host -----------------------------------------------------------------------


class RateLimitError(Exception):
    """Like an SDK's error: it wants its HTTP response, so it does not rebuild from its pickle."""

    def __init__(self, message, *, response):
        super().__init__(message)
        self.status_code = response


def test_an_sdk_error_that_does_not_unpickle_keeps_its_kind():
    error = local_error(pickle.loads(pickle.dumps(portable_error(RateLimitError("slow down", response=429)))))
    assert type(error).__name__ == "RateLimitError" and str(error) == "slow down"
    assert error.status_code == 429 and is_transient(error) and not is_auth_error(error)
    # the stand-in pickles too (a worker's record may carry it)
    again = pickle.loads(pickle.dumps(error))
    assert type(again).__name__ == "RateLimitError" and again.status_code == 429

    denied = local_error(portable_error(RateLimitError("who are you", response=401)))
    assert is_auth_error(denied)
    timed_out = local_error(portable_error(_SdkTimeout("too slow", response=None)))
    assert isinstance(timed_out, TimeoutError) and is_transient(timed_out)


class _SdkTimeout(TimeoutError):
    def __init__(self, message, *, response):
        super().__init__(message)


def test_an_error_that_unpickles_comes_back_as_itself():
    error = local_error(portable_error(TransientModelError("busy")))
    assert type(error) is TransientModelError and str(error) == "busy"
    assert local_error(KeyError("x")).args == ("x",)  # not the host's model's: as it is


# -- a real two-node cluster ----------------------------------------------------------------------


REMOTE_MODELS = '''
"""Models for `python:remote_models:NAME`: each call of `oracle` leaves a line in $REMOTE_CALLS
(its sqlchorus role, the Ray node it ran on, its process)."""
import os
import time

from sqlchorus.runs.demo import load_demo_questions
from sqlchorus.testing import ScriptedChatModel, current_call, oracle_model

GOLD = {q["question"]: q["sql"] for q in load_demo_questions()}


def node_id():
    import ray

    return ray.get_runtime_context().get_node_id() if ray.is_initialized() else "no-ray"


def oracle():
    """The oracle, whose first query names a table that does not exist, so the fixer is called."""
    inner = oracle_model(GOLD.get, first_answer=lambda q: "SELECT COUNT(*) FROM customer").responses

    def respond(messages):
        answer = inner(messages)
        with open(os.environ["REMOTE_CALLS"], "a", encoding="utf-8") as f:
            f.write(f"{current_call()['role']}\\t{node_id()}\\t{os.getpid()}\\n")
        return answer

    return ScriptedChatModel(respond, name="remote-oracle")


def echo():
    return ScriptedChatModel(["pong"], name="echo")


class RateLimitError(Exception):
    def __init__(self, message, *, response):
        super().__init__(message)
        self.status_code = response


def limited():
    def answer(messages):
        raise RateLimitError("Rate limit reached for requests", response=429)
    return ScriptedChatModel(answer, name="limited")


class AuthenticationError(Exception):
    def __init__(self, message, *, response):
        super().__init__(message)
        self.status_code = response


def refused():
    def answer(messages):
        raise AuthenticationError("Incorrect API key provided", response=401)
    return ScriptedChatModel(answer, name="refused")


def slow():
    def answer(messages):
        time.sleep(5)
        return "late"
    return ScriptedChatModel(answer, name="slow")


def ask_on(settings, question):
    """A worker's view: answer with a Session built from the settings it was sent."""
    import sqlchorus

    with sqlchorus.Session(settings) as session:
        result = session.ask(question)
    return node_id(), result.ok, result.rows, [(u["role"], u["model"]) for u in result.usage]
'''

QUESTION = "How many customers do we have?"


@pytest.fixture(scope="module")
def cluster(tmp_path_factory):
    """A head with one CPU and no model resource, and a node with one CPU and ``model_node``;
    this process joins it with ``remote_models`` importable here and on every worker."""
    ray = pytest.importorskip("ray")
    from ray.cluster_utils import Cluster

    folder = tmp_path_factory.mktemp("remote_models")
    (folder / "remote_models.py").write_text(REMOTE_MODELS, encoding="utf-8")
    calls = folder / "calls.tsv"
    started = Cluster(initialize_head=True, head_node_args={"num_cpus": 1})
    with pytest.MonkeyPatch.context() as mp:
        try:
            model_node = started.add_node(num_cpus=1, resources={"model_node": 1})
            started.wait_for_nodes()
            mp.syspath_prepend(str(folder))
            mp.setenv("REMOTE_CALLS", str(calls))
            ray.init(address=started.address, log_to_driver=False,
                     runtime_env={"env_vars": {"PYTHONPATH": str(folder), "REMOTE_CALLS": str(calls)}})
            yield SimpleNamespace(ray=ray, calls=calls, model_node=model_node.node_id,
                                  head=ray.get_runtime_context().get_node_id())
        finally:
            ray.shutdown()
            started.shutdown()
            sys.modules.pop("remote_models", None)


def _calls(path: Path) -> list[tuple[str, str, int]]:
    if not path.exists():
        return []
    rows = [line.split("\t") for line in path.read_text(encoding="utf-8").splitlines()]
    return [(role, node, int(pid)) for role, node, pid in rows]


def untimed(cost):
    """A run's cost record without its seconds, which no two runs share."""
    if isinstance(cost, dict):
        return {k: untimed(v) for k, v in cost.items() if k not in ("seconds", "model_seconds")}
    return cost


def _settings(**kw) -> Settings:
    return Settings(model="python:remote_models:oracle", trace_dir=None, cache=False, **kw)


@pytest.mark.slow
def test_the_generation_roles_run_on_the_node_with_the_resource(cluster):
    from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

    import sqlchorus
    from sqlchorus.tools.tracing import attributes as attrs

    settings = with_role_resources(_settings(), {"generation": "model_node", "fixing": "model_node"})
    remote = settings.models["generation"]
    assert settings.models["fixing"] is remote  # one spec on one resource: one model, one host
    assert "keywords" not in settings.models and settings.model == "python:remote_models:oracle"
    assert cluster.ray.get(remote.host.where.remote())["node_id"] == cluster.model_node != cluster.head

    cluster.calls.unlink(missing_ok=True)
    spans = InMemorySpanExporter()
    with sqlchorus.Session(settings) as session:
        result = session.ask(QUESTION, exporters=[spans])
    assert result.ok and result.rows == [[62]] and result.sql == "SELECT COUNT(*) FROM customers"
    remote_calls = _calls(cluster.calls)

    # every call of the two roles ran on the model node; the others here, in this process
    by_role = {}
    for role, node, pid in remote_calls:
        by_role.setdefault(role, set()).add((node, pid == os.getpid()))
    assert by_role["generation"] == by_role["fixing"] == {(cluster.model_node, False)}
    assert by_role["keywords"] == by_role["linking"] == {(cluster.head, True)}
    used = [u["role"] for u in result.usage if u["role"] in ("generation", "fixing")]
    assert sorted(used) == sorted(r for r, _, _ in remote_calls if r in ("generation", "fixing"))
    assert {"generation", "fixing"} <= set(used)

    # the same question answered here alone leaves the same usage records and model spans
    cluster.calls.unlink()
    local_spans = InMemorySpanExporter()
    with sqlchorus.Session(_settings()) as session:
        local = session.ask(QUESTION, exporters=[local_spans])
    assert {node for _, node, _ in _calls(cluster.calls)} == {cluster.head}

    def records(run):
        return [(u["node"], u["role"], u["model"], u["input_tokens"], u["output_tokens"], u["cost_usd"], u["priced"])
                for u in run.usage]

    def chats(exported):
        return [(s.name, s.attributes.get(attrs.GEN_AI_PROVIDER), s.attributes.get(attrs.GEN_AI_REQUEST_MODEL),
                 s.attributes.get(attrs.SQLCHORUS_ROLE))
                for s in exported.get_finished_spans() if s.name.startswith("chat ")]

    assert records(result) == records(local)
    assert {u["model"] for u in result.usage} == {"remote-oracle"}
    assert chats(spans) == chats(local_spans)
    # The provider is the model's own (its _llm_type), not the "python" of its python: spec.
    assert ("chat remote-oracle", "scripted", "remote-oracle", "generation") in chats(spans)
    assert untimed(result.cost) == untimed(local.cost)
    assert result.cost["unpriced_models"] == ["remote-oracle"]  # the cost record names the model


@pytest.mark.slow
def test_a_reply_keeps_its_usage_and_names_its_node(cluster):
    settings = with_role_resources(Settings(model="python:remote_models:echo", trace_dir=None), parse_role_resources(["*=model_node"]))
    model = settings.models["selection"]
    assert all(settings.models[role] is model for role in ROLES)
    reply = model.invoke("ping")
    assert reply.content == "pong" and reply.usage_metadata["input_tokens"] >= 1
    assert reply.response_metadata[NODE_ID_KEY] == cluster.model_node
    assert reply.response_metadata["model_name"] == "echo"
    assert model._llm_type == "scripted" and model.model_name == "echo"  # a python: model names its own provider

    # the same settings made again (as each worker does) find the same host
    again = with_role_resources(Settings(model="python:remote_models:echo", trace_dir=None), {"generation": "model_node"})
    assert again.models["generation"].host._actor_id == model.host._actor_id


@pytest.mark.slow
def test_settings_with_remote_models_go_to_a_worker_and_answer_there(cluster):
    from ray.util.scheduling_strategies import NodeAffinitySchedulingStrategy

    import remote_models

    settings = with_role_resources(_settings(), {"generation": "model_node", "fixing": "model_node"})
    assert pickle.loads(pickle.dumps(settings)).models["generation"].model_name == "remote-oracle"
    # a worker handed the driver's settings, and asked to do the same, keeps them
    assert with_role_resources(settings, {"generation": "model_node", "fixing": "model_node"}) is settings
    cluster.calls.unlink(missing_ok=True)
    ask_on = cluster.ray.remote(remote_models.ask_on).options(
        num_cpus=1, scheduling_strategy=NodeAffinitySchedulingStrategy(cluster.head, soft=False))
    node, ok, rows, usage = cluster.ray.get(ask_on.remote(settings, QUESTION))
    assert node == cluster.head and ok and rows == [[62]]
    assert {model for _, model in usage} == {"remote-oracle"}
    ran = {(role, node) for role, node, _ in _calls(cluster.calls)}
    assert {node for role, node in ran if role in ("generation", "fixing")} == {cluster.model_node}
    assert {node for role, node in ran if role in ("keywords", "linking")} == {cluster.head}


@pytest.mark.slow
def test_the_model_s_errors_reach_the_caller_as_their_own_kinds(cluster):
    limited = with_role_resources(Settings(model="python:remote_models:limited", trace_dir=None),
                                  {"generation": "model_node"}).models["generation"]
    with pytest.raises(Exception) as info:
        limited.invoke("hello")
    assert type(info.value).__name__ == "RateLimitError" and "Rate limit reached" in str(info.value)
    assert is_transient(info.value) and not is_auth_error(info.value)

    refused = with_role_resources(Settings(model="python:remote_models:refused", trace_dir=None),
                                  {"generation": "model_node"}).models["generation"]
    with pytest.raises(Exception) as info:
        refused.invoke("hello")
    assert type(info.value).__name__ == "AuthenticationError" and info.value.status_code == 401
    assert is_auth_error(info.value) and not is_transient(info.value)


@pytest.mark.slow
def test_a_resource_no_node_offers_fails_at_once_in_one_line(cluster):
    with pytest.raises(ClusterError) as info:
        with_role_resources(_settings(), {"generation": "gpu_node", "fixing": "gpu_node"})
    message = str(info.value)
    assert message.startswith("No node of the Ray cluster offers the resource 'gpu_node' "
                              "that the generation, fixing models need (its custom resources: model_node)")
    assert "\n" not in message and info.value.exit_code == 3


@pytest.mark.slow
def test_a_model_that_cannot_be_made_on_the_node_is_said_in_one_line(cluster):
    with pytest.raises(ClusterError) as info:
        with_role_resources(Settings(model="python:remote_models:nothing", trace_dir=None),
                            {"generation": "model_node"})
    message = str(info.value)
    assert message.startswith("The model python:remote_models:nothing on resource 'model_node' cannot be "
                              "used there: 'remote_models' has no callable 'nothing'")
    assert "\n" not in message


@pytest.mark.slow
def test_a_model_whose_host_died_starts_another_on_its_next_call(cluster):
    model = with_role_resources(Settings(model="python:remote_models:echo", temperature=0.5, trace_dir=None),
                                {"generation": "model_node"}).models["generation"]
    first = model.host._actor_id
    cluster.ray.kill(model.host)
    reply = model.invoke("ping")
    assert reply.content == "pong" and reply.response_metadata[NODE_ID_KEY] == cluster.model_node
    assert model.host._actor_id != first


@pytest.mark.slow
def test_a_call_past_the_time_limit_is_given_up_as_a_timeout(cluster, monkeypatch):
    monkeypatch.setattr(remote_model, "RESULT_MARGIN_S", 0.0)
    model = with_role_resources(Settings(model="python:remote_models:slow", model_timeout_s=0.2, trace_dir=None),
                                {"generation": "model_node"}).models["generation"]
    with pytest.raises(ModelTimeoutError, match="The slow model on 'model_node' gave no answer within 0.2 s"):
        model.invoke("hello")
