"""Floor 2: the settings of a run (plain data), the presets as data beside them, and errors.

Nothing here imports the graph: a preset is a set of field values that ``Settings`` applies.
"""
