"""The Spark side of the service (reserved): the ``stretch`` data source and the pipeline job.

Empty until the Spark integration lands; it will depend on the VSN runtime and the
client, never the other way round.
"""

__all__: list[str] = []
