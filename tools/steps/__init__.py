"""LIST's step-wise machinery: a query split into incremental sub-queries, and a step verified
sub-query by sub-query on the database.

May import: the ground, ``tracing``, ``sql``, ``engines``, ``schema``, ``values``."""
