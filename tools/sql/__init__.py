"""SQL as text: bounded parsing, the errors of the guarded path, rewriting for another dialect,
execution-result comparison with the benchmarks' semantics, Spider hardness and DIN-SQL's classes.

No database is opened here. May import: the ground, ``tracing``."""
