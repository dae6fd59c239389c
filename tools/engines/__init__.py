"""The guarded databases: what every one does, written once (``base``), then one module per engine
(``sqlite``, ``duckdb``, ``postgres``, ``mysql``) holding what is its own, each with what it
checks (``*_guard``, ``*_check``); the catalogue model they all read (``catalog``), how a
database's name says its engine (``names``) and opening one by name (``opening``). Every statement
sqlchorus runs goes through one of these.

May import: the ground, ``tracing``, ``sql``."""
