"""A database's schema: introspection and descriptions, lexical ranking and narrowing, searching
it a little at a time, DIN-SQL's links and the text views N-rep renders.

May import: the ground, ``tracing``, ``sql``, ``engines``."""
