"""Span and attribute names, in one place.

The ``gen_ai.*`` names follow the OpenTelemetry GenAI conventions, which are still incubating, so
they are kept here as plain strings rather than imported. ``db.*`` names are the stable database
conventions.
"""

RUN_SPAN = "run"
NODE_SPAN_PREFIX = "node:"
ROUTE_EVENT = "route"

GEN_AI_OPERATION = "gen_ai.operation.name"
GEN_AI_REQUEST_MODEL = "gen_ai.request.model"
GEN_AI_USAGE_INPUT = "gen_ai.usage.input_tokens"
GEN_AI_USAGE_OUTPUT = "gen_ai.usage.output_tokens"

DB_SYSTEM = "db.system.name"
DB_NAMESPACE = "db.namespace"
DB_QUERY_TEXT = "db.query.text"

SQLCHORUS_RUN_ID = "sqlchorus.run_id"
SQLCHORUS_QUESTION = "sqlchorus.question"
SQLCHORUS_NODE = "sqlchorus.node"
SQLCHORUS_ROLE = "sqlchorus.role"
SQLCHORUS_ERROR = "sqlchorus.error"
SQLCHORUS_LATENCY_MS = "sqlchorus.latency_ms"
SQLCHORUS_OUTPUT_CHARS = "sqlchorus.output_chars"
SQLCHORUS_UPDATE_KEYS = "sqlchorus.update_keys"
SQLCHORUS_COST_USD = "sqlchorus.cost_usd"
SQLCHORUS_PRICED = "sqlchorus.priced"
SQLCHORUS_CACHE_HIT = "sqlchorus.cache_hit"
SQLCHORUS_ATTEMPTS = "sqlchorus.attempts"
SQLCHORUS_GRAMMAR = "sqlchorus.grammar"
