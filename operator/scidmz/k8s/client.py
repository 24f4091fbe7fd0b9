"""The one module that talks to the Kubernetes API (outside kopf's own watching).

It speaks plain dicts: server-side apply with a single field manager, get, status patch with
an optimistic-concurrency precondition, and Events. Errors come out as :class:`KubeApiError`
with predicates, so callers classify them once (see :mod:`scidmz.k8s.reconcile`).
"""

from __future__ import annotations

import json
from typing import Any, Final

import kubernetes
import urllib3

from scidmz.api import link, policy
from scidmz.api.types import GROUP, VERSION

FIELD_MANAGER: Final = "scidmz-operator"

_PLURALS: Final[dict[str, str]] = {
    "ConfigMap": "configmaps",
    "Service": "services",
    "ServiceAccount": "serviceaccounts",
    "Secret": "secrets",
    "Event": "events",
    "Deployment": "deployments",
    "Job": "jobs",
    "Pod": "pods",
    "Node": "nodes",
    "NetworkPolicy": "networkpolicies",
    policy.KIND: policy.PLURAL,
    link.KIND: link.PLURAL,
}
API = f"{GROUP}/{VERSION}"


class KubeApiError(Exception):
    """A failed API call: HTTP status (0 for transport errors), reason and message."""

    def __init__(self, status: int, reason: str, message: str) -> None:
        super().__init__(f"{status} {reason}: {message}")
        self.status = status
        self.reason = reason
        self.message = message

    @property
    def is_not_found(self) -> bool:
        return self.status == 404

    @property
    def is_conflict(self) -> bool:
        return self.status == 409

    @property
    def is_transient(self) -> bool:
        """Worth retrying later: transport failures, throttling, server errors."""
        return self.status in (0, 429) or self.status >= 500


def resource_path(
    api_version: str,
    kind: str,
    namespace: str | None,
    name: str | None = None,
    subresource: str | None = None,
) -> str:
    """REST path of an object (or its collection when ``name`` is None); ``namespace``
    None for a cluster-scoped one."""
    base = "/api/v1" if api_version == "v1" else f"/apis/{api_version}"
    scope = f"/namespaces/{namespace}" if namespace is not None else ""
    path = f"{base}{scope}/{_PLURALS[kind]}"
    if name is not None:
        path += f"/{name}"
    if subresource is not None:
        path += f"/{subresource}"
    return path


class KubeClient:
    """Blocking client over kubernetes' ApiClient; kopf runs sync handlers in threads."""

    def __init__(self, api_client: kubernetes.client.ApiClient) -> None:
        self._api = api_client

    @classmethod
    def from_environment(cls, pool_size: int = 32) -> KubeClient:
        """In-cluster credentials when running in a pod, else $KUBECONFIG / ~/.kube/config."""
        configuration = kubernetes.client.Configuration()
        try:
            kubernetes.config.load_incluster_config(  # type: ignore[no-untyped-call]
                client_configuration=configuration
            )
        except kubernetes.config.ConfigException:
            kubernetes.config.load_kube_config(  # type: ignore[no-untyped-call]
                client_configuration=configuration
            )
        configuration.connection_pool_maxsize = pool_size
        return cls(kubernetes.client.ApiClient(configuration))

    def close(self) -> None:
        self._api.close()  # type: ignore[no-untyped-call]

    def _call(
        self,
        method: str,
        path: str,
        body: Any = None,
        query: list[tuple[str, str]] | None = None,
        content_type: str = "application/json",
    ) -> dict[str, Any]:
        headers = {"Accept": "application/json", "Content-Type": content_type}
        try:
            _, url, headers, body, _ = self._api.param_serialize(
                method,
                path,
                query_params=query or [],
                header_params=headers,
                body=body,
                auth_settings=["BearerToken"],
            )
            response = self._api.call_api(
                method, url, header_params=headers, body=body, _request_timeout=30
            )
            data = response.read()  # type: ignore[no-untyped-call]
        except (urllib3.exceptions.HTTPError, OSError) as error:
            raise KubeApiError(0, "TransportError", str(error)) from error
        payload: dict[str, Any] = json.loads(data) if data else {}
        if response.status >= 400:
            raise KubeApiError(
                response.status,
                str(payload.get("reason", response.reason)),
                str(payload.get("message", data[:500])),
            )
        return payload

    def apply(
        self, obj: dict[str, Any], force: bool = True, dry_run: bool = False
    ) -> dict[str, Any]:
        """Server-side apply ``obj`` as the operator's single field manager.

        An unchanged object is a no-op on the server: its resourceVersion stays put.
        ``dry_run`` runs validation and admission without persisting anything.
        """
        meta = obj["metadata"]
        path = resource_path(obj["apiVersion"], obj["kind"], meta.get("namespace"), meta["name"])
        query = [("fieldManager", FIELD_MANAGER), ("fieldValidation", "Strict")]
        if force:
            query.append(("force", "true"))
        if dry_run:
            query.append(("dryRun", "All"))
        return self._call(
            "PATCH", path, body=obj, query=query, content_type="application/apply-patch+yaml"
        )

    def get(
        self, api_version: str, kind: str, namespace: str | None, name: str
    ) -> dict[str, Any] | None:
        """The object, or None when it does not exist."""
        try:
            return self._call("GET", resource_path(api_version, kind, namespace, name))
        except KubeApiError as error:
            if error.is_not_found:
                return None
            raise

    def list_names(
        self, api_version: str, kind: str, namespace: str, labels: dict[str, str]
    ) -> list[str]:
        """Names of the objects whose labels include ``labels``."""
        selector = ",".join(f"{key}={value}" for key, value in sorted(labels.items()))
        path = resource_path(api_version, kind, namespace)
        listed = self._call("GET", path, query=[("labelSelector", selector)])
        return sorted(item["metadata"]["name"] for item in listed.get("items") or [])

    def annotate(
        self, api_version: str, kind: str, namespace: str, name: str, annotations: dict[str, str]
    ) -> None:
        """Merge-patch ``annotations`` into the object's metadata (other keys kept)."""
        path = resource_path(api_version, kind, namespace, name)
        body = {"metadata": {"annotations": annotations}}
        self._call("PATCH", path, body=body, content_type="application/merge-patch+json")

    def set_owner(
        self, api_version: str, kind: str, namespace: str, name: str, owner: dict[str, Any]
    ) -> None:
        """Make ``owner`` (an ownerReference) the object's only owner: the garbage
        collector deletes it with its owner."""
        path = resource_path(api_version, kind, namespace, name)
        body = {"metadata": {"ownerReferences": [owner]}}
        self._call("PATCH", path, body=body, content_type="application/merge-patch+json")

    def delete_if_present(self, api_version: str, kind: str, namespace: str, name: str) -> bool:
        """DELETE the object; False if it did not exist."""
        try:
            self._call("DELETE", resource_path(api_version, kind, namespace, name))
        except KubeApiError as error:
            if error.is_not_found:
                return False
            raise
        return True

    def create_object(self, obj: dict[str, Any]) -> dict[str, Any]:
        """POST ``obj`` to its collection (409 if it exists)."""
        meta = obj["metadata"]
        path = resource_path(obj["apiVersion"], obj["kind"], meta.get("namespace"))
        return self._call("POST", path, body=obj)

    def merge_patch(
        self, api_version: str, kind: str, namespace: str | None, name: str, body: dict[str, Any]
    ) -> dict[str, Any]:
        """A JSON merge patch of the object."""
        path = resource_path(api_version, kind, namespace, name)
        return self._call("PATCH", path, body=body, content_type="application/merge-patch+json")

    def create_if_absent(self, path: str, obj: dict[str, Any]) -> bool:
        """POST ``obj`` to the collection at ``path``; False if it already existed."""
        try:
            self._call("POST", path, body=obj)
        except KubeApiError as error:
            if error.is_conflict:
                return False
            raise
        return True

    def list_objects(
        self,
        api_version: str,
        kind: str,
        namespace: str | None,
        labels: dict[str, str] | None = None,
    ) -> list[dict[str, Any]]:
        """Every object of a kind (in ``namespace``; everywhere for None), by labels."""
        query = []
        if labels:
            query.append(("labelSelector", ",".join(f"{k}={v}" for k, v in sorted(labels.items()))))
        listed = self._call("GET", resource_path(api_version, kind, namespace), query=query)
        return list(listed.get("items") or [])

    def get_link(self, name: str) -> dict[str, Any] | None:
        return self.get(API, link.KIND, None, name)

    def get_policy(self, namespace: str, name: str) -> dict[str, Any] | None:
        return self.get(API, policy.KIND, namespace, name)

    def patch_status(
        self,
        kind: str,
        namespace: str | None,
        name: str,
        status: dict[str, Any],
        resource_version: str | None = None,
    ) -> dict[str, Any]:
        """Merge-patch a link's or a policy's status subresource; with
        ``resource_version``, 409 if the object changed since it was read."""
        path = resource_path(API, kind, namespace, name, "status")
        body: dict[str, Any] = {"status": status}
        if resource_version is not None:
            body["metadata"] = {"resourceVersion": resource_version}
        return self._call("PATCH", path, body=body, content_type="application/merge-patch+json")

    def patch_policy_status(
        self, namespace: str, name: str, resource_version: str | None, status: dict[str, Any]
    ) -> dict[str, Any]:
        return self.patch_status(policy.KIND, namespace, name, status, resource_version)

    def patch_link_status(
        self, name: str, status: dict[str, Any], resource_version: str | None = None
    ) -> dict[str, Any]:
        return self.patch_status(link.KIND, None, name, status, resource_version)
