"""sqlchorus on a Ray cluster: evaluations, batches, selection and value indexes past one machine.

Everything here is reached through ``--ray ADDRESS`` on ``sqlchorus eval``, ``batch``, ``select``
and ``index`` (the ``ray`` extra). It sits above :mod:`sqlchorus.evaluation` and
:mod:`sqlchorus.runs`, whose work it spreads over the cluster's workers, and below the command line;
Ray itself is imported only by the functions that need it.

- :mod:`.connect`: reach a cluster by its address (or start one for one command), and say in one
  line why not.
- :mod:`.workers`: one actor per worker, each holding one :class:`sqlchorus.Session`; questions go
  to them as tasks and their records stream back; a worker that dies has its question run again
  elsewhere.
- :mod:`.staging`: the databases a worker reads, shipped once per node, and what a remote run
  leaves (its trace, its checkpoints) brought back into the run folder.
- :mod:`.limiter`: one rate limit per provider and model for the whole cluster.
- :mod:`.remote_model`: a role's model calls run on the node that has a named Ray resource.
- :mod:`.index_build`: a value index built over columns on the cluster, byte for byte as locally.
"""
