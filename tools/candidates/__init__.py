"""Candidates and their results: fingerprints for clustering and previews, and selection without a
model (clusters, votes, pairwise score sums).

May import: the ground, ``tracing``, ``sql``, ``engines``, ``schema``, ``values``."""
