"""Tracing: span and attribute names in one place, and what text a run's spans carry.

May import: the ground (``errors``, ``json_values``)."""
