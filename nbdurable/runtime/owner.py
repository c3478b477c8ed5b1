"""Who holds a lease (see :mod:`nbdurable.durable.lease_holder`, where it lives)."""

from ..durable.lease_holder import (
    ProcessIdentity,
    describe_holder,
    holder_process,
    lease_holder,
    process_gone,
    this_process,
)

__all__ = [
    "ProcessIdentity",
    "describe_holder",
    "holder_process",
    "lease_holder",
    "process_gone",
    "this_process",
]
