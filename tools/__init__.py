"""The ground floor: deterministic machinery with no model in it, in rooms named for what they hold.

Each room imports only the rooms below it (import-linter holds this; see pyproject.toml), from the
bottom up:

- ``errors``, ``json_values``, ``folders``: the root of every error for a person to read, values
  as JSON carries them, and where sqlchorus keeps files of its own. They import nothing of
  sqlchorus.
- ``tracing``: span and attribute names, and what text a span carries.
- ``sql``: SQL as text: parsing within bounds, the guarded path's errors, dialect rewriting,
  result comparison, hardness and DIN-SQL's classes.
- ``engines``: the guarded databases, one module per engine and the catalogue model they read;
  opening a database by name.
- ``schema``: introspection, descriptions, ranking, narrowing, searching and the text views.
- ``values``: the value index and how retrieved values are shown.
- ``candidates``, ``models``, ``examples``, ``steps``: result fingerprints and selection; what
  goes to and comes back from a model (tokens, prices, the response cache, grammars, reading an
  answer); few-shot and taught examples; LIST's decomposer and verifier. None of the four imports
  another.
"""
