"""What goes wrong between nbdurable and Restate, as typed errors (all ``NbdurableError``)."""

from __future__ import annotations

from .._errors import NbdurableError

__all__ = ["RestateDeploymentError", "RestateUnavailableError"]


class RestateUnavailableError(NbdurableError, ConnectionError):
    """The Restate server (its ingress or admin API) could not be reached, or is missing."""


class RestateDeploymentError(NbdurableError):
    """The Restate server refused to register an endpoint's deployment (the reason is its own)."""
