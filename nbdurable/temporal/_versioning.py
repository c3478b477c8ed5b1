"""Worker versioning: a release's workers serve only the runs that started on that release.

Temporal replays a parked run's whole history on whichever worker picks its
next task up; a worker of another release (other workflow code, another
definition of the run's agent) fails that task with a nondeterminism error, and
the server retries it with a growing backoff. With ``--deployment NAME`` a
worker declares a *Worker Deployment Version*: the deployment ``NAME`` and a
build id derived from what decides the workflows' commands (the nbdurable code
and the fingerprints of the agent and task definitions it serves,
:func:`build_id`). Its workflows are *pinned*: a run stays on the version it
started on, so its tasks only ever reach workers of that build (a restarted
worker of the same release has the same build id and takes them again; one
whose code and definitions did not change, whatever its tool bodies, too).

New runs start on the deployment's *current* version: a worker whose build the
deployment did not know yet (a new release) makes its version current once it
polls (:func:`promote`); a worker of a known build (an earlier release started
again to finish its parked runs) does not take that over. A worker's engine
records on a run pinned to another build what it waits for
(:func:`waiting_for`).
"""

from __future__ import annotations

import asyncio
import functools
import hashlib
import json
from pathlib import Path
from typing import TYPE_CHECKING

from temporalio.api.enums.v1 import VersioningBehavior as VersioningBehaviorProto
from temporalio.api.workflowservice.v1 import (
    DescribeWorkerDeploymentRequest,
    SetWorkerDeploymentCurrentVersionRequest,
)
from temporalio.client import Client
from temporalio.common import VersioningBehavior, WorkerDeploymentVersion
from temporalio.service import RPCError, RPCStatusCode
from temporalio.worker import WorkerDeploymentConfig

from .._version import __version__

if TYPE_CHECKING:
    from ..runtime._seam import RunServices

__all__ = [
    "build_id",
    "deployment_config",
    "known_builds",
    "pinned_version",
    "promote",
    "waiting_for",
    "worker_version",
]

PROMOTE_SECONDS = 30.0
"""How long a new release's worker tries to become current (its version exists once it polls)."""


@functools.cache
def _code_digest() -> str:
    """sha256 of the nbdurable package's Python sources (the workflows' code and all it runs)."""
    root = Path(__file__).resolve().parents[1]
    digest = hashlib.sha256()
    for path in sorted(root.rglob("*.py")):
        digest.update(str(path.relative_to(root)).encode())
        digest.update(path.read_bytes())
    return digest.hexdigest()


def build_id(runtime: RunServices) -> str:
    """The build id of a worker of ``runtime``: ``<nbdurable version>-<16 hex digits>``.

    The digits hash the nbdurable sources and every definition served: each
    agent's ``(id, version, fingerprint)`` and each task's name, version and
    phases. Two workers agree on it exactly when their workflows issue the same
    commands for the same history.
    """
    agents = sorted(
        [agent_id, version, found.fingerprint]
        for (agent_id, version), found in runtime.registry.definitions().items()
    )
    tasks = sorted(
        [task.name, task.version, *task.phase_names]
        for task in getattr(runtime, "tasks", {}).values()
    )
    served = json.dumps([_code_digest(), agents, tasks], separators=(",", ":"))
    return f"{__version__}-{hashlib.sha256(served.encode()).hexdigest()[:16]}"


def worker_version(deployment: str, runtime: RunServices) -> WorkerDeploymentVersion:
    """The deployment version a worker of ``runtime`` declares in ``deployment``."""
    return WorkerDeploymentVersion(deployment_name=deployment, build_id=build_id(runtime))


def deployment_config(version: WorkerDeploymentVersion) -> WorkerDeploymentConfig:
    """The SDK's worker option for ``version``: versioned, its workflows pinned."""
    return WorkerDeploymentConfig(
        version=version,
        use_worker_versioning=True,
        default_versioning_behavior=VersioningBehavior.PINNED,
    )


async def known_builds(client: Client, deployment: str) -> set[str] | None:
    """The build ids ``deployment`` has seen; None when it has no current version yet."""
    request = DescribeWorkerDeploymentRequest(
        namespace=client.namespace, deployment_name=deployment
    )
    try:
        described = await client.workflow_service.describe_worker_deployment(request)
    except RPCError as exc:
        if exc.status == RPCStatusCode.NOT_FOUND:
            return None
        raise
    info = described.worker_deployment_info
    if not info.routing_config.current_deployment_version.build_id:
        return None
    return {summary.deployment_version.build_id for summary in info.version_summaries}


async def promote(client: Client, version: WorkerDeploymentVersion, known: set[str] | None) -> bool:
    """Make ``version`` its deployment's current one, if it is a new release; whether it did.

    ``known``: what :func:`known_builds` said before this worker polled. The
    server knows a version once one of its workers polls, so the call is
    retried for up to :data:`PROMOTE_SECONDS`.
    """
    if known is not None and version.build_id in known:
        return False  # an earlier release back for its pinned runs: new runs stay where they go
    request = SetWorkerDeploymentCurrentVersionRequest(
        namespace=client.namespace,
        deployment_name=version.deployment_name,
        build_id=version.build_id,
        identity=client.identity,
    )
    deadline = asyncio.get_running_loop().time() + PROMOTE_SECONDS
    while True:
        try:
            await client.workflow_service.set_worker_deployment_current_version(request)
            return True
        except RPCError:
            if asyncio.get_running_loop().time() > deadline:
                raise
            await asyncio.sleep(0.2)


async def pinned_version(client: Client, run_id: str) -> WorkerDeploymentVersion | None:
    """The version the workflow of ``run_id`` is pinned to (None: not pinned, or no workflow)."""
    try:
        described = await client.get_workflow_handle(run_id).describe()
    except RPCError:
        return None
    info = described.raw_description.workflow_execution_info.versioning_info
    pinned = info.versioning_override.pinned.version
    if pinned.build_id:  # an operator's override wins over what the workflow declared
        return WorkerDeploymentVersion(pinned.deployment_name, pinned.build_id)
    if info.behavior != VersioningBehaviorProto.VERSIONING_BEHAVIOR_PINNED:
        return None
    found = info.deployment_version
    if not found.build_id:
        return None
    return WorkerDeploymentVersion(found.deployment_name, found.build_id)


def waiting_for(version: WorkerDeploymentVersion) -> str:
    """The waiting reason of a run pinned to ``version`` (read after "it ...")."""
    return (
        f"waits for a Temporal worker of deployment {version.deployment_name!r} build "
        f"{version.build_id} (the release it started on: start a worker with the same "
        "nbdurable and agent definitions)"
    )
