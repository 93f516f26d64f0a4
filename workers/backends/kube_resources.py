"""The kinds of object the kube backend makes for a job, and the kubernetes_asyncio methods
that create, delete and list each (the backend's calls name a kind, these tables the method)."""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from typing import Any

from workers.backends.kube_client import KubeApi
from workers.gang_scheduling import PodGroupApi
from workers.rendering import AccessPlan

Method = Callable[..., Awaitable[Any]]

JOB_RESOURCES = ("pods", "services", "configmaps", "serviceaccounts", "roles", "rolebindings")
"""Every kind of object the worker creates for a job, all labelled with its uid (and with a
gang scheduler, `POD_GROUPS`)."""
POD_GROUPS = "podgroups"


def access_objects(api: KubeApi, access: AccessPlan) -> list[tuple[str, str, Method, Any]]:
    """(kind, name, create method, manifest) of a launcher's access, in the order they are
    made: ServiceAccount, Role, then the RoleBinding that joins them."""
    core, rbac = api.core, api.rbac
    return [
        (
            "serviceaccounts",
            access.service_account,
            core.create_namespaced_service_account,
            access.service_account_manifest(),
        ),
        ("roles", access.name, rbac.create_namespaced_role, access.role_manifest()),
        (
            "rolebindings",
            access.name,
            rbac.create_namespaced_role_binding,
            access.role_binding_manifest(),
        ),
    ]


def delete_method(api: KubeApi, resource: str, groups: PodGroupApi | None = None) -> Method:
    """Called as (name, namespace, **options); `groups`: where PodGroups live, if anywhere."""
    if resource == POD_GROUPS and groups is not None:
        return _pod_group_methods(api, groups)[0]
    core, rbac = api.core, api.rbac
    methods: dict[str, Method] = {
        "pods": core.delete_namespaced_pod,
        "services": core.delete_namespaced_service,
        "configmaps": core.delete_namespaced_config_map,
        "serviceaccounts": core.delete_namespaced_service_account,
        "roles": rbac.delete_namespaced_role,
        "rolebindings": rbac.delete_namespaced_role_binding,
    }
    return methods[resource]


def list_methods(
    api: KubeApi, resource: str, groups: PodGroupApi | None = None
) -> tuple[Method, Method]:
    """(in every namespace, in one namespace)."""
    if resource == POD_GROUPS and groups is not None:
        return _pod_group_methods(api, groups)[1:]
    core, rbac = api.core, api.rbac
    methods: dict[str, tuple[Method, Method]] = {
        "pods": (core.list_pod_for_all_namespaces, core.list_namespaced_pod),
        "services": (core.list_service_for_all_namespaces, core.list_namespaced_service),
        "configmaps": (
            core.list_config_map_for_all_namespaces,
            core.list_namespaced_config_map,
        ),
        "serviceaccounts": (
            core.list_service_account_for_all_namespaces,
            core.list_namespaced_service_account,
        ),
        "roles": (rbac.list_role_for_all_namespaces, rbac.list_namespaced_role),
        "rolebindings": (
            rbac.list_role_binding_for_all_namespaces,
            rbac.list_namespaced_role_binding,
        ),
    }
    return methods[resource]


def _pod_group_methods(api: KubeApi, groups: PodGroupApi) -> tuple[Method, Method, Method]:
    """(delete, list in every namespace, list in one) for PodGroups, called as the typed
    methods of the other kinds are."""
    return custom_object_methods(api, groups.group, groups.version, groups.plural)


def custom_object_methods(
    api: KubeApi, group: str, version: str, plural: str
) -> tuple[Method, Method, Method]:
    """(delete, list in every namespace, list in one) for a custom resource, called as the
    typed methods of the built-in kinds are: (name, namespace, **options), (**options),
    (namespace, **options)."""
    custom = api.custom

    def delete(name: str, namespace: str, **options: Any) -> Awaitable[Any]:
        return custom.delete_namespaced_custom_object(  # type: ignore[no-any-return]
            group, version, namespace, plural, name, **options
        )

    def everywhere(**options: Any) -> Awaitable[Any]:
        return custom.list_cluster_custom_object(  # type: ignore[no-any-return]
            group, version, plural, **options
        )

    def namespaced(namespace: str, **options: Any) -> Awaitable[Any]:
        return custom.list_namespaced_custom_object(  # type: ignore[no-any-return]
            group, version, namespace, plural, **options
        )

    return delete, everywhere, namespaced
