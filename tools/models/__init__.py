"""What goes to a model and what comes back: token counts, prices, the response cache, grammars
that let only a SELECT out, and reading what a model wrote.

May import: the ground, ``tracing``, ``sql``, ``engines``, ``schema``, ``values``."""
