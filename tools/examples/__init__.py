"""Examples a prompt shows: the shipped few-shot files and train-set loaders, and what a user taught
about their own database.

May import: the ground, ``tracing``, ``sql``, ``engines``, ``schema``, ``values``."""
