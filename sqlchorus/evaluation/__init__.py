"""Evaluation on Spider and BIRD: datasets, the official scorers' semantics, resumable runs and
the HTML report."""
