"""Where a study runs: a local Ray or a cluster, and where its record may go.

- :mod:`~harness.studies.cluster.connect` storage path and Ray address, the Ray session, resources
- :mod:`~harness.studies.cluster.destinations` no study record inside a Ray job's temporary directories
- :mod:`~harness.studies.cluster.ray_auth` Ray's token authentication for the harness's clients
"""
