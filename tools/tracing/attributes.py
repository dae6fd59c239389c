"""Span and attribute names, in one place.

The ``gen_ai.*`` names follow the OpenTelemetry GenAI conventions, which are still incubating, so
they are kept here as plain strings rather than imported. ``db.*`` names are the stable database
conventions.
"""

RUN_SPAN = "run"
NODE_SPAN_PREFIX = "node:"
ROUTE_EVENT = "route"

GEN_AI_OPERATION = "gen_ai.operation.name"
GEN_AI_PROVIDER = "gen_ai.provider.name"
GEN_AI_REQUEST_MODEL = "gen_ai.request.model"
GEN_AI_REQUEST_TEMPERATURE = "gen_ai.request.temperature"
GEN_AI_REQUEST_TOP_P = "gen_ai.request.top_p"
GEN_AI_USAGE_INPUT = "gen_ai.usage.input_tokens"
GEN_AI_USAGE_OUTPUT = "gen_ai.usage.output_tokens"
GEN_AI_USAGE_CACHE_READ = "gen_ai.usage.cache_read.input_tokens"
"""Of a call answered from sqlchorus's response cache: its input tokens, all read from a cache."""
GEN_AI_REQUEST_MAX_TOKENS = "gen_ai.request.max_tokens"
GEN_AI_RESPONSE_MODEL = "gen_ai.response.model"
GEN_AI_RESPONSE_ID = "gen_ai.response.id"
GEN_AI_RESPONSE_FINISH_REASONS = "gen_ai.response.finish_reasons"

# A statement run through the guard: the database conventions, and sqlchorus's own.
SQL_SPAN = "sql"
SQL_ERROR = "sql.error"
SQL_ERROR_KIND = "sql.error_kind"
SQL_ROWS = "sql.rows"
SQL_TRUNCATED = "sql.truncated"
SQL_ELAPSED_MS = "sql.elapsed_ms"

DB_SYSTEM = "db.system.name"
DB_NAMESPACE = "db.namespace"
SQLCHORUS_DATABASE = "sqlchorus.database"
"""Where a run's database is: a file's path, or a PostgreSQL URL without its password."""
DB_QUERY_TEXT = "db.query.text"
DB_RETURNED_ROWS = "db.response.returned_rows"
ERROR_TYPE = "error.type"

# OpenInference's span kinds, so that Arize Phoenix and other OpenInference readers show each
# span for what it is: the run an AGENT, a node a CHAIN (value retrieval a RETRIEVER), a model
# call an LLM, a SQL statement a TOOL.
OPENINFERENCE_KIND = "openinference.span.kind"
KIND_AGENT, KIND_CHAIN, KIND_RETRIEVER, KIND_LLM, KIND_TOOL = "AGENT", "CHAIN", "RETRIEVER", "LLM", "TOOL"
RETRIEVER_NODES = frozenset({"retrieve_values"})

SQLCHORUS_RUN_ID = "sqlchorus.run_id"
# A node span's LangGraph thread (the run's id) and the checkpoint its input state came from.
SQLCHORUS_THREAD_ID = "sqlchorus.thread_id"
SQLCHORUS_CHECKPOINT_ID = "sqlchorus.checkpoint_id"
SQLCHORUS_QUESTION = "sqlchorus.question"
SQLCHORUS_NODE = "sqlchorus.node"
SQLCHORUS_ROLE = "sqlchorus.role"
SQLCHORUS_ERROR = "sqlchorus.error"
# The run's chosen query, and what kind of failure left it without an answer (see api.failure_kind).
SQLCHORUS_SQL = "sqlchorus.sql"
SQLCHORUS_FAILURE = "sqlchorus.failure"
SQLCHORUS_LATENCY_MS = "sqlchorus.latency_ms"
SQLCHORUS_OUTPUT_CHARS = "sqlchorus.output_chars"
SQLCHORUS_UPDATE_KEYS = "sqlchorus.update_keys"
SQLCHORUS_COST_USD = "sqlchorus.cost_usd"
SQLCHORUS_PRICED = "sqlchorus.priced"
SQLCHORUS_CACHE_HIT = "sqlchorus.cache_hit"
SQLCHORUS_REPLAYED = "sqlchorus.replayed"
SQLCHORUS_TYPED = "sqlchorus.typed"
SQLCHORUS_CALL_ID = "sqlchorus.call_id"
"""A model call span's id in the run's call log (its usage record's ``call``), where its prompt
and answer are kept."""
SQLCHORUS_PAUSED = "sqlchorus.paused"
SQLCHORUS_REPLAY_OF = "sqlchorus.replay_of"
SQLCHORUS_TAUGHT_EXAMPLES = "sqlchorus.taught_examples"
"""A node span's taught examples shown in its prompts: JSON, each one's id, run, source and score."""
SQLCHORUS_GLOSSARY = "sqlchorus.glossary"
"""A run span's glossary entries its question named: JSON, each one's id, term and hint."""
SQLCHORUS_ATTEMPTS = "sqlchorus.attempts"
SQLCHORUS_GRAMMAR = "sqlchorus.grammar"
SQLCHORUS_MODEL_READY_S = "sqlchorus.model.ready_s"
"""Seconds an in-process model call waited before its clock started: loading the weights, and
another call that had the model."""
SQLCHORUS_RATE_LIMIT_WAIT_S = "sqlchorus.rate_limit.wait_s"
"""Seconds a model call waited for its model's requests and tokens per minute (``--model-limit``),
over all its attempts; on every call a run's limiter let through, 0 when it did not wait. Not part
of the call's latency."""
# The prompt budget: a model span's prompt size and budget; a node span's narrowed schema.
SQLCHORUS_PROMPT_TOKENS = "sqlchorus.prompt.tokens"
SQLCHORUS_PROMPT_BUDGET = "sqlchorus.prompt.budget"
SQLCHORUS_PROMPT_TOKENIZER = "sqlchorus.prompt.tokenizer"
SQLCHORUS_SCHEMA_NARROWED = "sqlchorus.schema.narrowed"

# The build of a database's value index, as one span in the trace of the run that waited for it.
VALUE_INDEX_BUILD_SPAN = "value_index.build"
VALUE_INDEX_COLUMNS = "sqlchorus.value_index.columns"
VALUE_INDEX_VALUES = "sqlchorus.value_index.values"
VALUE_INDEX_TRUNCATED = "sqlchorus.value_index.truncated_columns"
VALUE_INDEX_SKIPPED = "sqlchorus.value_index.skipped_columns"
VALUE_INDEX_MAX_VALUES = "sqlchorus.value_index.max_values_per_column"
VALUE_INDEX_SECONDS = "sqlchorus.value_index.seconds"

# What a dashboard reads as a span's content: OpenInference's input and output, messages and
# retrieved documents; OpenTelemetry's session id. Which of them a run writes is
# ``Settings.trace_content`` (see sqlchorus.tools.tracing.content).
SESSION_ID = "session.id"
INPUT_VALUE = "input.value"
INPUT_MIME_TYPE = "input.mime_type"
OUTPUT_VALUE = "output.value"
OUTPUT_MIME_TYPE = "output.mime_type"
MIME_TEXT, MIME_JSON = "text/plain", "application/json"
LLM_MODEL_NAME = "llm.model_name"
LLM_PROVIDER = "llm.provider"
LLM_INVOCATION_PARAMETERS = "llm.invocation_parameters"
LLM_INPUT_MESSAGES = "llm.input_messages"
LLM_OUTPUT_MESSAGES = "llm.output_messages"
MESSAGE_ROLE = "message.role"
MESSAGE_CONTENT = "message.content"
LLM_TOKENS_PROMPT = "llm.token_count.prompt"
LLM_TOKENS_COMPLETION = "llm.token_count.completion"
LLM_TOKENS_TOTAL = "llm.token_count.total"
LLM_TOKENS_PROMPT_CACHE_READ = "llm.token_count.prompt_details.cache_read"
# OpenInference's cost of a call (US dollars), from sqlchorus's price table; the GenAI
# conventions name no cost attribute. Phoenix 20.x does not read these: it prices a span itself,
# from its token counts and its own price table.
LLM_COST_PROMPT = "llm.cost.prompt"
LLM_COST_COMPLETION = "llm.cost.completion"
LLM_COST_TOTAL = "llm.cost.total"
RETRIEVAL_DOCUMENTS = "retrieval.documents"
DOCUMENT_CONTENT = "document.content"
DOCUMENT_SCORE = "document.score"
DOCUMENT_METADATA = "document.metadata"
GEN_AI_INPUT_MESSAGES = "gen_ai.input.messages"
GEN_AI_OUTPUT_MESSAGES = "gen_ai.output.messages"
SQLCHORUS_TRACE_CONTENT = "sqlchorus.trace_content"
SQLCHORUS_USAGE_ESTIMATED = "sqlchorus.usage.estimated"
"""True on a call that got no answer (failed, timed out): its prompt's tokens, as sqlchorus
counted them, are in ``sqlchorus.usage.estimated_input_tokens``, not in the usage a dashboard
bills (``gen_ai.usage.*``, ``llm.token_count.*``)."""
SQLCHORUS_USAGE_ESTIMATED_INPUT = "sqlchorus.usage.estimated_input_tokens"
SQLCHORUS_PROMPT_CHARS = "sqlchorus.prompt.chars"
"""A model call's prompt, every message, in characters: its whole length, however much of it the
span keeps."""
SQLCHORUS_PROMPT_MESSAGE_CHARS = "sqlchorus.prompt.message_chars"
"""Each message of a model call's prompt, in characters, in order (whole lengths)."""
SQLCHORUS_CONTENT_TRUNCATED = "sqlchorus.content.truncated"
"""True on a model call span whose messages or answer were cut at ``Settings.trace_content_limit``
(``sqlchorus.content.limit``): their whole lengths are ``sqlchorus.prompt.message_chars`` and
``sqlchorus.output_chars``."""
SQLCHORUS_CONTENT_LIMIT = "sqlchorus.content.limit"

# What started a run, and what a dashboard files it under. The run's span is named for its
# origin (``ask``, ``eval``, ``batch``, ``debug``, ``serve``, ``mcp``, ``ui``, ``replay``; ``run``
# in traces written before origins existed) and carries it as ``sqlchorus.origin``; its
# metadata and tags are written as OpenInference's (Phoenix) and Langfuse's trace attributes.
SQLCHORUS_ORIGIN = "sqlchorus.origin"
METADATA = "metadata"
"""OpenInference's metadata of a span: one JSON object, as text."""
TAG_TAGS = "tag.tags"
"""OpenInference's tags of a span: a list of strings."""
LANGFUSE_TRACE_METADATA = "langfuse.trace.metadata"
"""Langfuse's trace metadata: one attribute per key, ``langfuse.trace.metadata.<key>``."""
LANGFUSE_TRACE_TAGS = "langfuse.trace.tags"
LANGFUSE_TRACE_NAME = "langfuse.trace.name"
"""Langfuse's name of a trace: the run's origin."""
# Langfuse's own names for a model call (an observation of type ``generation``): what its OTLP
# endpoint reads first, before the GenAI conventions' and OpenInference's.
LANGFUSE_OBSERVATION_TYPE = "langfuse.observation.type"
LANGFUSE_OBSERVATION_INPUT = "langfuse.observation.input"
"""JSON: a model call's messages, ``[{"role": ..., "content": ...}]`` (``--trace-conventions langfuse``)."""
LANGFUSE_OBSERVATION_OUTPUT = "langfuse.observation.output"
LANGFUSE_MODEL_NAME = "langfuse.observation.model.name"
LANGFUSE_USAGE_DETAILS = "langfuse.observation.usage_details"
"""JSON: ``{"input": tokens, "output": tokens}`` (and ``cache_read`` for a cached call)."""
LANGFUSE_COST_DETAILS = "langfuse.observation.cost_details"
"""JSON, US dollars: ``{"input": ..., "output": ..., "total": ...}``; absent for an unpriced call."""

# A debugging session's run span holds one span per command that ran the graph (``debug.step``,
# ``debug.continue``...), saying which and from where: the graph's own work (reading the
# checkpoint it goes on from, writing the new ones) is inside it, beside its nodes.
DEBUG_SPAN_PREFIX = "debug."
SQLCHORUS_DEBUG_COMMAND = "sqlchorus.debug.command"
SQLCHORUS_FORKED = "sqlchorus.debug.forked"
"""True on a debugger's command span that went on from a checkpoint other than the newest: a fork."""

# select_candidate runs the chosen query once more for the answer's rows and columns (the check
# kept only their fingerprint and count): that statement is the child of this span.
ANSWER_ROWS_SPAN = "answer.fetch_rows"
SQLCHORUS_CANDIDATE_ID = "sqlchorus.candidate_id"
