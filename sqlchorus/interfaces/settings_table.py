"""The command-line options of the settings fields, as a plain table, so that building the
commands' options (and ``sqlchorus --help``) does not import pydantic.

``OPTIONS`` is what :class:`sqlchorus.config.settings.Settings` says of each field the command
line offers (and of ``trace_dir``): its option's shape, help, default, environment variable,
choices and range. Written by ``scripts/build_settings_table.py``, which the test suite runs with
``--check``: do not edit it by hand.
"""

from __future__ import annotations

from typing import Any

OPTIONS: dict[str, dict[str, Any]] = (
{'model': {'option': {'flag': '--model'},
           'help': 'Chat model for every role without its own: a provider:model name '
                   '(openai:gpt-4o-mini, openai-compatible:<model>@<base_url>, local:smollm2) or '
                   'a langchain-core BaseChatModel.',
           'default': None,
           'env': 'SQLCHORUS_MODEL',
           'choices': None,
           'range': None,
           'whole': False},
 'models': {'option': {'flag': '--role-model', 'metavar': 'ROLE=MODEL', 'pairs': True},
            'help': 'A model for one role (keywords, linking, generation, fixing, selection), '
                    'overriding --model for it.',
            'default': {},
            'env': 'SQLCHORUS_MODELS',
            'choices': None,
            'range': None,
            'whole': False},
 'generators': {'option': {'flag': '--generator', 'metavar': 'NAME[=SAMPLES]', 'pairs': True},
                'help': 'Generator branches to run and the samples each draws, 1 to 64 (default: '
                        'divide_conquer once).',
                'default': {'divide_conquer': 1},
                'env': 'SQLCHORUS_GENERATORS',
                'choices': None,
                'range': None,
                'whole': True},
 'preset': {'option': {'flag': '--preset'},
            'help': 'Generators, selection and fixing chosen by cost: fast, balanced, full, paper '
                    "(CHASE-SQL's pool of 21 candidates), or tiny for small local models (options "
                    'you give win over it).',
            'default': None,
            'env': 'SQLCHORUS_PRESET',
            'choices': ('fast', 'balanced', 'full', 'tiny', 'paper'),
            'range': None,
            'whole': False},
 'keywords': {'option': {'flag': '--keywords'},
              'help': "Where value retrieval's keywords come from: the model (CHESS's prompt), or "
                      "the question's own words with no model call (for small local models).",
              'default': 'model',
              'env': 'SQLCHORUS_KEYWORDS',
              'choices': ('model', 'question'),
              'range': None,
              'whole': False},
 'linking': {'option': {'flag': '--linking'},
             'help': "How link_schema links: the model (DIN-SQL's prompt), or lexically, ranking "
                     "tables and columns by the question's words and retrieved values, with no "
                     'model call.',
             'default': 'model',
             'env': 'SQLCHORUS_LINKING',
             'choices': ('model', 'lexical'),
             'range': None,
             'whole': False},
 'din_correction': {'option': {'flag': '--din-correction'},
                    'help': "DIN-SQL's self-correction prompt: gentle (checks, assumes nothing is "
                            'wrong), generic (told the query is buggy) or none (no correction '
                            'call).',
                    'default': 'gentle',
                    'env': 'SQLCHORUS_DIN_CORRECTION',
                    'choices': ('gentle', 'generic', 'none'),
                    'range': None,
                    'whole': False},
 'nrep_conditions': {'option': {'flag': '--nrep-conditions'},
                     'help': "N-rep's system-prompt rule on conditions: paper (always add default "
                             'conditions that filter invalid data, such as deleted_at IS NULL, '
                             'when relevant) or question (only the conditions the question or '
                             'hint asks for, as benchmark gold queries are written).',
                     'default': 'paper',
                     'env': 'SQLCHORUS_NREP_CONDITIONS',
                     'choices': ('paper', 'question'),
                     'range': None,
                     'whole': False},
 'examples_dir': {'option': {'flag': '--examples-dir', 'path': 'dir'},
                  'help': 'A folder of <prompt>_examples.json files that replace the shipped '
                          'few-shot examples of the prompts they name.',
                  'default': None,
                  'env': 'SQLCHORUS_EXAMPLES_DIR',
                  'choices': None,
                  'range': None,
                  'whole': False},
 'examples_store': {'option': {'flag': '--examples-store',
                               'path': 'file',
                               'negate': ('--no-taught',
                                          None,
                                          'Use no taught examples or glossary.')},
                    'help': 'SQLite file, or PostgreSQL database (postgresql://...), where taught '
                            'examples and glossary entries are kept per database and read by '
                            'every run (auto: the checkpoint store; an evaluation or batch uses '
                            "the command line's, ./traces/checkpoints.sqlite).",
                    'default': 'auto',
                    'env': 'SQLCHORUS_EXAMPLES_STORE',
                    'choices': None,
                    'range': None,
                    'whole': False},
 'fix_rounds': {'option': {'flag': '--fix-rounds'},
                'help': "Fixer rounds per broken candidate at most (CHASE-SQL's beta).",
                'default': 3,
                'env': 'SQLCHORUS_FIX_ROUNDS',
                'choices': None,
                'range': (0, 10, False, False),
                'whole': True},
 'retry_temperature': {'option': {'flag': '--retry-temperature'},
                       'help': 'Sampling temperature of every retry after a first attempt failed: '
                               "fixer rounds after the first, LIST's reprompts, rewrites and "
                               "re-plans (LIST's self-correction setting).",
                       'default': 0.8,
                       'env': 'SQLCHORUS_RETRY_TEMPERATURE',
                       'choices': None,
                       'range': (0.0, 2.0, False, False),
                       'whole': False},
 'retry_top_p': {'option': {'flag': '--retry-top-p'},
                 'help': "Top-p of those retries (LIST's setting), sent to models whose API takes "
                         'it per call (OpenAI and OpenAI-compatible; OpenAI reasoning models keep '
                         'their own sampling).',
                 'default': 0.95,
                 'env': 'SQLCHORUS_RETRY_TOP_P',
                 'choices': None,
                 'range': (0.0, 1.0, True, False),
                 'whole': False},
 'schema_format': {'option': {'flag': '--schema-format'},
                   'help': 'Schema view shown to linking and generation.',
                   'default': 'm-schema',
                   'env': 'SQLCHORUS_SCHEMA_FORMAT',
                   'choices': ('ddl', 'm-schema', 'mac-schema', 'json', 'markdown'),
                   'range': None,
                   'whole': False},
 'schema_level': {'option': {'flag': '--schema-level'},
                  'help': 'How much of the schema generation sees: full, the linked tables with '
                          'all their columns, or the linked columns only.',
                  'default': 'full',
                  'env': 'SQLCHORUS_SCHEMA_LEVEL',
                  'choices': ('full', 'tables', 'columns'),
                  'range': None,
                  'whole': False},
 'max_prompt_tokens': {'option': {'flag': '--max-prompt-tokens'},
                       'help': "Prompt tokens per model call at most; a model's own context "
                               'window, when known, lowers it. A call that would not fit is not '
                               'sent.',
                       'default': 32000,
                       'env': 'SQLCHORUS_MAX_PROMPT_TOKENS',
                       'choices': None,
                       'range': (512, 10000000, False, False),
                       'whole': True},
 'max_schema_tokens': {'option': {'flag': '--max-schema-tokens'},
                       'help': 'Tokens one schema view may take in a prompt at most; by default '
                               'only the prompt budget bounds it, less the question, the hint and '
                               '4,000 tokens for the rest of the prompt. A larger schema is '
                               'narrowed to what the question most likely needs.',
                       'default': 10000000,
                       'env': 'SQLCHORUS_MAX_SCHEMA_TOKENS',
                       'choices': None,
                       'range': (256, 10000000, False, False),
                       'whole': True},
 'max_question_tokens': {'option': {'flag': '--max-question-tokens'},
                         'help': "Prompt tokens all of a question's calls may take together, "
                                 'planned ahead; 0 sets no bound (preset balanced: 32,000, '
                                 "N-rep's budget). The schema is shown whole when every call that "
                                 'shows it can carry it within this budget; otherwise those calls '
                                 'show their share: the details of the columns the question most '
                                 'likely needs and the names of the rest.',
                         'default': 0,
                         'env': 'SQLCHORUS_MAX_QUESTION_TOKENS',
                         'choices': None,
                         'range': (0, 100000000, False, False),
                         'whole': True},
 'max_question_chars': {'option': {'flag': '--max-question-chars'},
                        'help': 'Characters a question, or its hint, may have at most.',
                        'default': 8000,
                        'env': 'SQLCHORUS_MAX_QUESTION_CHARS',
                        'choices': None,
                        'range': (1, 10000000, False, False),
                        'whole': True},
 'sql_timeout_s': {'option': {'flag': '--timeout'},
                   'help': 'Time budget per SQL statement, in seconds.',
                   'default': 10.0,
                   'env': 'SQLCHORUS_SQL_TIMEOUT_S',
                   'choices': None,
                   'range': (0.1, 3600, False, False),
                   'whole': False},
 'statement_workers': {'option': {'flag': '--statement-workers'},
                       'help': 'Worker processes per database, so SQL statements running on it at '
                               'once at most; more wait their turn within their time budget, and '
                               "one client's statements hold at most half of the workers (rounded "
                               'up).',
                       'default': 4,
                       'env': 'SQLCHORUS_STATEMENT_WORKERS',
                       'choices': None,
                       'range': (1, 64, False, False),
                       'whole': True},
 'require_readonly_role': {'option': {'negate': ('--require-readonly-role',
                                                 True,
                                                 'Refuse a PostgreSQL role or MySQL user that '
                                                 'could write to the database or reach past it '
                                                 '(the default).')},
                           'help': 'Refuse to open a PostgreSQL database when the connecting role '
                                   'could write to it or reach past it (a superuser, write '
                                   'grants, CREATE or TEMP, membership of pg_read_server_files, '
                                   'pg_write_server_files, pg_execute_server_program or '
                                   'pg_signal_backend), or a MySQL database when the user could '
                                   '(a privilege past SELECT and SHOW VIEW, FILE, SUPER, PROCESS, '
                                   'any on another database): the default. Set, it refuses such a '
                                   'role even with allow_writable_role.',
                           'default': True,
                           'env': 'SQLCHORUS_REQUIRE_READONLY_ROLE',
                           'choices': None,
                           'range': None,
                           'whole': False},
 'allow_writable_role': {'option': {'negate': ('--allow-writable-role',
                                               True,
                                               'Open a PostgreSQL or MySQL database as a role or '
                                               'user that could write to it or reach past it, '
                                               'with a warning on every run.')},
                         'help': 'Open a PostgreSQL or MySQL database even when the connecting '
                                 'role or user could write to it or reach past it; every run is '
                                 'then warned of what no guard can stop under such a role.',
                         'default': False,
                         'env': 'SQLCHORUS_ALLOW_WRITABLE_ROLE',
                         'choices': None,
                         'range': None,
                         'whole': False},
 'answer_rows': {'option': {'flag': '--answer-rows'},
                 'help': 'Rows kept in the final answer.',
                 'default': 1000,
                 'env': 'SQLCHORUS_ANSWER_ROWS',
                 'choices': None,
                 'range': (1, 1000000, False, False),
                 'whole': True},
 'value_cache_dir': {'option': {'flag': '--values-dir', 'path': 'dir'},
                     'help': 'Folder of value index files, built once per database content '
                             '(default: values/ in the sqlchorus cache folder).',
                     'default': None,
                     'env': 'SQLCHORUS_VALUE_CACHE_DIR',
                     'choices': None,
                     'range': None,
                     'whole': False},
 'value_embedder': {'option': {'flag': '--value-embedder', 'path': 'dir'},
                    'help': 'Folder of a sentence-transformers model already on disk (never '
                            'downloaded; needs the embeddings extra) whose similarity re-ranks '
                            'retrieved values beside edit distance, as CHASE-SQL does, and that '
                            'retrieves the few-shot examples of N-rep and schema linking by '
                            'similarity; unset, values are ranked by edit distance alone and '
                            'examples lexically.',
                    'default': None,
                    'env': 'SQLCHORUS_VALUE_EMBEDDER',
                    'choices': None,
                    'range': None,
                    'whole': False},
 'temperature': {'option': {'flag': '--temperature'},
                 'help': 'Sampling temperature of generation (0 is greedy).',
                 'default': 0.0,
                 'env': 'SQLCHORUS_TEMPERATURE',
                 'choices': None,
                 'range': (0.0, 2.0, False, False),
                 'whole': False},
 'max_tokens': {'option': {'flag': '--max-tokens'},
                'help': 'Tokens a model may generate per call at most (local models: 512 at '
                        'most).',
                'default': 2048,
                'env': 'SQLCHORUS_MAX_TOKENS',
                'choices': None,
                'range': (1, 1000000, False, False),
                'whole': True},
 'trace_dir': {'option': {'flag': '--trace-dir',
                          'path': 'dir',
                          'negate': ('--no-trace', None, 'Write no trace file.')},
               'help': "Folder for the run's <run-id>.jsonl trace file (auto: traces in the "
                       'per-user data folder, e.g. ~/.local/share/sqlchorus/traces, so that a '
                       'program using sqlchorus writes nothing into its current folder; the '
                       "command line's default is ./traces).",
               'default': 'auto',
               'env': 'SQLCHORUS_TRACE_DIR',
               'choices': None,
               'range': None,
               'whole': False},
 'checkpoints': {'option': {'flag': '--checkpoints',
                            'path': 'file',
                            'negate': ('--no-checkpoints', None, 'Keep no checkpoints.')},
                 'help': 'SQLite file, or PostgreSQL database (postgresql://...), that keeps '
                         "every run's checkpoints, to resume, inspect or replay it (auto: "
                         'checkpoints.sqlite in the trace folder; none when no trace is written).',
                 'default': 'auto',
                 'env': 'SQLCHORUS_CHECKPOINTS',
                 'choices': None,
                 'range': None,
                 'whole': False},
 'run_heartbeat_s': {'option': {'flag': '--run-heartbeat', 'metavar': 'SECONDS'},
                     'help': 'Servers: how often a server renews, in the checkpoint store, the '
                             'lease of each run it runs; a run whose lease three heartbeats old '
                             'has run out lost its server, and any server may cancel or resume '
                             'it.',
                     'default': 5.0,
                     'env': 'SQLCHORUS_RUN_HEARTBEAT_S',
                     'choices': None,
                     'range': (0.0, 3600.0, True, False),
                     'whole': False},
 'max_pending_runs': {'option': {'flag': '--max-pending-runs'},
                      'help': 'Servers: runs one server takes at most, running and queued (0: '
                              'eight per worker); more get 429.',
                      'default': 0,
                      'env': 'SQLCHORUS_MAX_PENDING_RUNS',
                      'choices': None,
                      'range': (0, 1000000, False, False),
                      'whole': True},
 'keep_runs': {'option': {'flag': '--keep-runs', 'metavar': 'N'},
               'help': "Servers and sqlchorus prune: keep the newest N runs' traces and "
                       'checkpoints, removing older ones (0: keep all; with --keep-days, a run '
                       'goes only when past both). Queued or running runs, and the runs kept runs '
                       'resume from, are never removed.',
               'default': 0,
               'env': 'SQLCHORUS_KEEP_RUNS',
               'choices': None,
               'range': (0, 100000000, False, False),
               'whole': True},
 'keep_days': {'option': {'flag': '--keep-days', 'metavar': 'D'},
               'help': 'Servers and sqlchorus prune: keep the runs younger than D days, removing '
                       'older ones (0: no age limit; with --keep-runs, a run goes only when past '
                       'both).',
               'default': 0.0,
               'env': 'SQLCHORUS_KEEP_DAYS',
               'choices': None,
               'range': (0.0, 36500.0, False, False),
               'whole': False},
 'otlp_endpoint': {'option': {'flag': '--otlp-endpoint'},
                   'help': 'Also send spans to this OTLP/HTTP traces endpoint (default: '
                           '$OTEL_EXPORTER_OTLP_TRACES_ENDPOINT, or $OTEL_EXPORTER_OTLP_ENDPOINT '
                           'with /v1/traces).',
                   'default': None,
                   'env': 'SQLCHORUS_OTLP_ENDPOINT',
                   'choices': None,
                   'range': None,
                   'whole': False},
 'trace_content': {'option': {'flag': '--trace-content'},
                   'help': 'What text spans carry for dashboards: all (question, answer, node '
                           'inputs and updates, model messages, rows previews, retrieved values), '
                           'metadata (names, counts, SQL text, tokens; no rows, values, question '
                           'or prompt text), or none (no content attributes).',
                   'default': 'all',
                   'env': 'SQLCHORUS_TRACE_CONTENT',
                   'choices': ('all', 'metadata', 'none'),
                   'range': None,
                   'whole': False},
 'trace_content_limit': {'option': {'flag': '--trace-content-limit', 'metavar': 'CHARS'},
                         'help': "Characters of one model message (a prompt's message, or an "
                                 "answer) a model call's span keeps; a longer one is cut there, "
                                 'and the span says so with its whole length.',
                         'default': 262144,
                         'env': 'SQLCHORUS_TRACE_CONTENT_LIMIT',
                         'choices': None,
                         'range': (256, 100000000, False, False),
                         'whole': True},
 'trace_conventions': {'option': {'flag': '--trace-conventions'},
                       'help': "Which conventions a model call's messages are written in, once "
                               'each: openinference (llm.input_messages, what Arize Phoenix '
                               "reads), genai (OpenTelemetry's gen_ai.input.messages), both (each "
                               'message twice), or langfuse (langfuse.observation.input/output, '
                               'what Langfuse reads first).',
                       'default': 'openinference',
                       'env': 'SQLCHORUS_TRACE_CONVENTIONS',
                       'choices': ('openinference', 'genai', 'both', 'langfuse'),
                       'range': None,
                       'whole': False},
 'cache': {'option': {'negate': ('--no-cache',
                                 False,
                                 'Neither read nor write the persistent model response cache.')},
           'help': 'Keep model responses in a persistent SQLite cache, so that the same request '
                   'to the same named model is paid for once (a model object passed in is the '
                   "caller's to cache).",
           'default': True,
           'env': None,
           'choices': None,
           'range': None,
           'whole': False},
 'cache_path': {'option': {'flag': '--cache-path', 'path': 'file'},
                'help': 'Response cache file (default: responses.sqlite in $SQLCHORUS_CACHE or '
                        '~/.cache/sqlchorus).',
                'default': None,
                'env': 'SQLCHORUS_CACHE_PATH',
                'choices': None,
                'range': None,
                'whole': False},
 'model_timeout_s': {'option': {'flag': '--model-timeout'},
                     'help': 'Time limit of a model call (of each try), in seconds.',
                     'default': 120.0,
                     'env': 'SQLCHORUS_MODEL_TIMEOUT_S',
                     'choices': None,
                     'range': (0.0, 3600, True, False),
                     'whole': False},
 'model_retries': {'option': {'flag': '--retries'},
                   'help': 'Retries of a model call after a transient error (rate limit, timeout, '
                           'connection, server error), with exponential backoff.',
                   'default': 2,
                   'env': 'SQLCHORUS_MODEL_RETRIES',
                   'choices': None,
                   'range': (0, 10, False, False),
                   'whole': True},
 'rate_limit': {'option': {'flag': '--rate-limit'},
                'help': 'Most model requests per second, shared by all roles of named models.',
                'default': None,
                'env': 'SQLCHORUS_RATE_LIMIT',
                'choices': None,
                'range': (0.001, 1000, False, False),
                'whole': False},
 'model_limits': {'option': {'flag': '--model-limit', 'metavar': 'MODEL=Nrpm,Mtpm', 'pairs': True},
                  'help': 'Requests and tokens per minute one model may use, by its '
                          'provider:model name, shared by every question a command or session '
                          'answers (on a Ray cluster, by all its workers), as MODEL=Nrpm,Mtpm '
                          '(either or both; in the environment, separated by semicolons).',
                  'default': {},
                  'env': 'SQLCHORUS_MODEL_LIMITS',
                  'choices': None,
                  'range': None,
                  'whole': False},
 'prices_file': {'option': {'flag': '--prices', 'path': 'file'},
                 'help': 'JSON or TOML file of model prices, USD per million tokens, read on top '
                         'of the built-in table.',
                 'default': None,
                 'env': 'SQLCHORUS_PRICES',
                 'choices': None,
                 'range': None,
                 'whole': False},
 'grammar': {'option': {'negate': ('--no-grammar',
                                   False,
                                   'Do not constrain local models with the schema grammar.')},
             'help': 'Constrain local models that support it with a grammar built from the '
                     'schema, so generation and fixing can only write one SELECT over real tables '
                     'and columns.',
             'default': True,
             'env': 'SQLCHORUS_GRAMMAR',
             'choices': None,
             'range': None,
             'whole': False},
 'grammar_scope': {'option': {'flag': '--grammar-scope'},
                   'help': 'What the schema grammar lets a local model write: any query over the '
                           "schema's names (schema), or simpler queries whose columns belong to "
                           'the tables in FROM (from).',
                   'default': 'schema',
                   'env': 'SQLCHORUS_GRAMMAR_SCOPE',
                   'choices': ('schema', 'from'),
                   'range': None,
                   'whole': False},
 'pairwise': {'option': {'flag': '--pairwise'},
              'help': 'When the selection model compares candidates pairwise: never (the largest '
                      'result cluster wins), low-confidence (N-rep: only when the vote is not '
                      'confident) or always (CHASE-SQL).',
              'default': 'low-confidence',
              'env': 'SQLCHORUS_PAIRWISE',
              'choices': ('never', 'low-confidence', 'always'),
              'range': None,
              'whole': False},
 'pairwise_max_clusters': {'option': {'flag': '--max-clusters'},
                           'help': 'Result clusters compared pairwise at most (the largest ones); '
                                   'the balanced, full and paper presets compare every cluster, '
                                   'bounded by max_pairwise_calls instead.',
                           'default': 4,
                           'env': 'SQLCHORUS_PAIRWISE_MAX_CLUSTERS',
                           'choices': None,
                           'range': (0, 50, False, False),
                           'whole': True},
 'max_pairwise_calls': {'option': {'flag': '--max-pairwise-calls'},
                        'help': 'Selection model calls per question at most, two per pair of '
                                'clusters (one per order); 0 sets no bound, so every pair of the '
                                'compared clusters meets. When every pair would exceed it, the '
                                'largest clusters meet in a round robin and the smaller ones '
                                'climb a ladder, one match each, for its last place: every '
                                'cluster is compared while the budget allows two calls per '
                                'cluster.',
                        'default': 0,
                        'env': 'SQLCHORUS_MAX_PAIRWISE_CALLS',
                        'choices': None,
                        'range': (0, 100000, False, False),
                        'whole': True},
 'selection_reasoning': {'option': {'negate': ('--no-selection-reasoning',
                                               False,
                                               'Ask the selection model for the letter alone '
                                               "(CHASE-SQL's prompt), for one fine-tuned on it.")},
                         'help': 'Let the selection model reason briefly before its verdict (a '
                                 "final line 'Answer: A' or 'Answer: B'), for a selection model "
                                 "used as is; off, it gets CHASE-SQL's terse prompt, which asks "
                                 'for the letter alone, the prompt a selection model fine-tuned '
                                 'on exported pairs learnt.',
                         'default': True,
                         'env': 'SQLCHORUS_SELECTION_REASONING',
                         'choices': None,
                         'range': None,
                         'whole': False},
 'list_verifier': {'option': {'flag': '--list-verifier'},
                   'help': "LIST's verifier: strong runs every sub-query of a step (errors, empty "
                           "results, join growth); weak runs only the step's whole query.",
                   'default': 'strong',
                   'env': 'SQLCHORUS_LIST_VERIFIER',
                   'choices': ('strong', 'weak'),
                   'range': None,
                   'whole': False}}
)
