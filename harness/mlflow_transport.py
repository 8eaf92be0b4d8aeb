"""The way a :class:`harness.mlflow_client.TrackingClient` talks to a tracking server: MLflow's
own REST store and artifact repository, each request sent with the client's HTTP policy.

Why these classes: MLflow 3.18 sends every request through ``rest_utils.http_request``, whose
``max_retries``, ``backoff_factor``, ``backoff_jitter`` and ``timeout`` arguments fall back to
the process environment (``MLFLOW_HTTP_REQUEST_*``) when left out, and the paths the harness
uses leave them out: ``RestStore._call_endpoint`` -> ``rest_utils.call_endpoint`` (which takes
no such argument) and ``HttpArtifactRepository``'s uploads, listings and downloads. So
:class:`PolicyRestStore` and :class:`PolicyHttpArtifactRepository` send the same requests with
the policy's arguments, and :class:`PolicyTrackingService` gives them to one ``MlflowClient``
only (MLflow's own ``TrackingServiceClient`` takes its store from a process-wide registry at
every call, and its artifact repositories from a process-wide cache). Nothing global changes:
another client in the process, and the environment, are left as they were.

Left to MLflow's own settings (its environment defaults): multipart and presigned artifact
transfers, used only when the server enables them (``--artifacts-destination`` on object
storage with ``MLFLOW_ENABLE_PROXY_MULTIPART_*`` or presigned-only serving), and MLflow's
capability probe (``server-info``, never retried by design). This module imports MLflow:
:class:`~harness.mlflow_client.TrackingClient` imports it with its first server client.
"""

from __future__ import annotations

import json
import os
import posixpath
from functools import partial
from typing import Any, Protocol

import requests
from mlflow import MlflowClient
from mlflow.entities import FileInfo
from mlflow.store.artifact.artifact_repo import ArtifactRepository, verify_artifact_path
from mlflow.store.artifact.artifact_repository_registry import get_artifact_repository
from mlflow.store.artifact.http_artifact_repo import HttpArtifactRepository
from mlflow.store.artifact.mlflow_artifacts_repo import MlflowArtifactsRepository
from mlflow.store.tracking.rest_store import RestStore
from mlflow.tracking._tracking_service.client import TrackingServiceClient
from mlflow.utils.credentials import get_default_host_creds
from mlflow.utils.mime_type_utils import _guess_mime_type
from mlflow.utils.proto_json_utils import parse_dict
from mlflow.utils.rest_utils import (
    _RETRY_SAFE_POST_RESPONSES,
    _non_idempotent_write_retry_kwargs,
    augmented_raise_for_status,
    http_request,
    verify_rest_response,
)
from mlflow.utils.uri import validate_path_is_safe


class HttpPolicy(Protocol):
    """What this module needs of a policy (:class:`harness.mlflow_client.HttpPolicy`): the
    arguments of ``http_request`` it sets (declared here, so that this module does not import
    the client's, which imports this one)."""

    def request_kwargs(self) -> dict[str, Any]: ...


#: How many runs' artifact repositories one client keeps (MLflow's own cache keeps 1024).
MAX_CACHED_REPOSITORIES = 1024


def install_http_policy(client: MlflowClient, policy: HttpPolicy) -> None:
    """Make every request of ``client`` (an http(s) tracking URI) follow ``policy``: its
    tracking service becomes a :class:`PolicyTrackingService` of the same URI. Only this client
    changes; ``MlflowClient`` keeps no other reference to its tracking service."""
    client._tracking_client = PolicyTrackingService(client._tracking_client.tracking_uri, policy)


def _send(policy: HttpPolicy, host_creds: Any, endpoint: str, method: str, **kwargs: Any) -> requests.Response:
    """MLflow's ``http_request`` with the policy's retry and timeout arguments (those the user
    set in the environment left to MLflow: see :meth:`HttpPolicy.request_kwargs`)."""
    return http_request(host_creds, endpoint, method, **policy.request_kwargs(), **kwargs)


class PolicyRestStore(RestStore):
    """MLflow's REST store with each request sent under ``policy``."""

    def __init__(self, get_host_creds: Any, policy: HttpPolicy) -> None:
        super().__init__(get_host_creds)
        self.policy = policy

    def _call_endpoint(
        self,
        api: Any,
        json_body: str | None = None,
        endpoint: str | None = None,
        retry_timeout_seconds: int | None = None,
        response_proto: Any = None,
    ) -> Any:
        """``RestStore._call_endpoint`` with ``rest_utils.call_endpoint``'s request made here, so
        that it carries the policy; the rest is MLflow's: a write that a resend could repeat
        (a POST not on MLflow's retry-safe list) is resent only after failures that show the
        server did not process it, the answer is checked and parsed by MLflow's functions."""
        method_to_info = self._V3_METHOD_TO_INFO if api in self._V3_APIS else self._METHOD_TO_INFO
        self._validate_workspace_support_if_specified()
        path, method = method_to_info[api]
        endpoint = endpoint or path
        response_proto = response_proto or api.Response()
        host_creds = self.get_host_creds()
        kwargs: dict[str, Any] = {"raise_on_status": False}  # verify_rest_response reads a 5xx's message
        if retry_timeout_seconds is not None:
            kwargs["retry_timeout_seconds"] = retry_timeout_seconds
        if method == "POST" and response_proto.DESCRIPTOR.full_name not in _RETRY_SAFE_POST_RESPONSES:
            kwargs |= _non_idempotent_write_retry_kwargs(host_creds)
        kwargs["params" if method == "GET" else "json"] = None if json_body is None else json.loads(json_body)
        response = verify_rest_response(_send(self.policy, host_creds, endpoint, method, **kwargs), endpoint)
        if response.status_code != 204:
            parse_dict(js_dict=json.loads(response.text), message=response_proto)
        return response_proto


class PolicyHttpArtifactRepository(HttpArtifactRepository):
    """MLflow's artifact repository of a server, its proxied uploads, listings and downloads
    sent under ``policy`` (as ``HttpArtifactRepository`` sends them, with the policy's
    arguments); multipart and presigned transfers are MLflow's (see the module docstring)."""

    def __init__(self, artifact_uri: str, tracking_uri: str, policy: HttpPolicy) -> None:
        super().__init__(artifact_uri, tracking_uri)
        self.policy = policy

    def log_artifact(self, local_file: str, artifact_path: str | None = None) -> None:
        verify_artifact_path(artifact_path)
        if self._should_multipart_upload(local_file):
            super().log_artifact(local_file, artifact_path)
            return
        name = os.path.basename(local_file)
        endpoint = posixpath.join("/", *([artifact_path] if artifact_path else []), name)
        headers = {"Content-Type": _guess_mime_type(name)}
        with open(local_file, "rb") as f:
            response = _send(self.policy, self._host_creds, endpoint, "PUT", data=f, extra_headers=headers)
        augmented_raise_for_status(response)

    def list_artifacts(self, path: str | None = None) -> list[FileInfo]:
        """The files and folders directly under ``path``; ``[]`` when ``path`` is a file (a
        server lists a file as itself, which looks like a folder holding one file of its name,
        so the parent's listing tells the two apart)."""
        endpoint = "/mlflow-artifacts/artifacts"
        url, tail = self.artifact_uri.split(endpoint, maxsplit=1)
        root = tail.lstrip("/")
        params = {"path": posixpath.join(root, path) if path else root}
        response = _send(self.policy, get_default_host_creds(url), endpoint, "GET", params=params)
        augmented_raise_for_status(response)
        infos = []
        for f in response.json().get("files", []):
            name = validate_path_is_safe(f["path"])
            size = int(f["file_size"]) if "file_size" in f else None
            infos.append(FileInfo(posixpath.join(path, name) if path else name, f["is_dir"], size))
        itself = path and posixpath.join(path, posixpath.basename(path))
        if len(infos) == 1 and not infos[0].is_dir and infos[0].path == itself:
            parent = posixpath.dirname(path) or None
            if not any(f.is_dir and f.path == path for f in self.list_artifacts(parent)):
                return []
        return sorted(infos, key=lambda f: f.path)

    def _download_file(self, remote_file_path: str, local_path: str) -> None:
        if self._artifact_server_base_uri() is not None and (
            self._is_artifacts_presigned_only() or self._is_multipart_download_enabled()
        ):
            super()._download_file(remote_file_path, local_path)
            return
        endpoint = posixpath.join("/", remote_file_path)
        response = _send(self.policy, self._host_creds, endpoint, "GET", stream=True)
        augmented_raise_for_status(response)
        with open(local_path, "wb") as f:
            for chunk in response.iter_content(chunk_size=1024 * 1024):
                f.write(chunk)


def artifact_repository(artifact_uri: str, tracking_uri: str, policy: HttpPolicy) -> ArtifactRepository:
    """The repository of a run's ``artifact_uri``: the server's own (``mlflow-artifacts:`` or
    ``http(s)://``) under ``policy``; any other (object storage, a path) is MLflow's, whose
    requests are not MLflow's HTTP calls."""
    scheme = artifact_uri.split(":", 1)[0].lower()
    if scheme == "mlflow-artifacts":
        return PolicyHttpArtifactRepository(
            MlflowArtifactsRepository.resolve_uri(artifact_uri, tracking_uri), tracking_uri, policy
        )
    if scheme in ("http", "https"):
        return PolicyHttpArtifactRepository(artifact_uri, tracking_uri, policy)
    return get_artifact_repository(artifact_uri, tracking_uri=tracking_uri)


class PolicyTrackingService(TrackingServiceClient):
    """MLflow's tracking service of one client of a server, with its own
    :class:`PolicyRestStore` and artifact repositories (:func:`artifact_repository`), and
    without MLflow's "View run <name> at: <URL>" print (the URL's password included) at the
    end of every run."""

    def __init__(self, tracking_uri: str, policy: HttpPolicy) -> None:
        self.policy = policy
        self._store = PolicyRestStore(partial(get_default_host_creds, tracking_uri), policy)
        self._repositories: dict[str, ArtifactRepository] = {}
        super().__init__(tracking_uri)

    def __getstate__(self) -> dict[str, Any]:
        # A repository holds a thread pool, which does not pickle; MLflow's client pickles.
        return {**self.__dict__, "_repositories": {}}

    @property
    def store(self) -> PolicyRestStore:
        return self._store

    def _log_url(self, run_id: str) -> None:
        return None

    def _get_artifact_repo(self, resource_id: str, *, resource: str = "run") -> ArtifactRepository:
        if resource != "run":
            return super()._get_artifact_repo(resource_id, resource=resource)
        repository = self._repositories.get(resource_id)
        if repository is None:
            uri = self.get_run(resource_id).info.artifact_uri
            repository = artifact_repository(uri, self.tracking_uri, self.policy)
            if len(self._repositories) >= MAX_CACHED_REPOSITORIES:
                self._repositories.clear()  # one step, safe beside another thread's lookup
            self._repositories[resource_id] = repository
        return repository

    def list_artifacts(self, run_id: str, path: str | None = None) -> list[FileInfo]:
        return self._get_artifact_repo(run_id).list_artifacts(path)

    def download_artifacts(self, run_id: str, path: str, dst_path: str | None = None) -> str:
        return self._get_artifact_repo(run_id).download_artifacts(path, dst_path)
