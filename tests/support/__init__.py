"""Test-only support code, out of the package (issue 42, move 5): importable as ``support``
(pytest puts ``tests/`` on the path for its conftest).

- :mod:`support.services` what the tests need of local services beyond the fault campaign's
  own (:mod:`harness.bench.local_services`): waiting for a condition, stopping a cluster's
  worker nodes
"""
