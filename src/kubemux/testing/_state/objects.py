"""Realistic object bodies for tests and benchmarks."""

from __future__ import annotations

import hashlib
import uuid
from collections.abc import Mapping
from typing import Any

import orjson

__all__ = ["make_pod"]

_TIME = "2025-01-01T00:00:00Z"
_PADDING = "kubemux.dev/padding"


def _managed_fields(labels: Mapping[str, str]) -> list[dict[str, Any]]:
    label_fields: dict[str, Any] = {f"f:{k}": {} for k in labels}
    return [
        {
            "manager": "kube-controller-manager",
            "operation": "Update",
            "apiVersion": "v1",
            "time": _TIME,
            "fieldsType": "FieldsV1",
            "fieldsV1": {
                "f:metadata": {
                    "f:labels": {".": {}, **label_fields},
                    "f:ownerReferences": {".": {}},
                },
                "f:spec": {"f:containers": {'k:{"name":"app"}': {"f:image": {}}}},
            },
        },
        {
            "manager": "kubelet",
            "operation": "Update",
            "apiVersion": "v1",
            "time": _TIME,
            "fieldsType": "FieldsV1",
            "fieldsV1": {
                "f:status": {"f:conditions": {}, "f:phase": {}, "f:podIP": {}},
            },
            "subresource": "status",
        },
    ]


def _container_state(phase: str) -> dict[str, Any]:
    """The container state a pod in ``phase`` has: running, ended, or not started yet."""
    if phase == "Running":
        return {"running": {"startedAt": _TIME}}
    if phase in ("Succeeded", "Failed"):
        code, reason = (0, "Completed") if phase == "Succeeded" else (1, "Error")
        return {
            "terminated": {
                "exitCode": code,
                "reason": reason,
                "startedAt": _TIME,
                "finishedAt": _TIME,
            }
        }
    return {"waiting": {"reason": "ContainerCreating"}}


def make_pod(
    name: str,
    namespace: str = "default",
    *,
    labels: Mapping[str, str] | None = None,
    node: str = "node-1",
    phase: str = "Running",
    size: int = 2000,
    managed_fields: bool = True,
) -> dict[str, Any]:
    """A realistic Pod owned by a ReplicaSet, whose JSON is about ``size`` bytes.

    The body has containers, status, conditions, ``ownerReferences`` and (by default)
    ``managedFields``; an annotation pads it up to ``size`` bytes (it is larger when the
    content alone exceeds ``size``). Deterministic: the same arguments give the same pod.
    ``uid`` and ``resourceVersion`` are left for the cluster to fill.

    Args:
        name: ``metadata.name``.
        namespace: ``metadata.namespace``.
        labels: Labels; default ``{"app": <name without its last dash-suffix>}``.
        node: ``spec.nodeName``.
        phase: ``status.phase``; Ready is true only for ``Running``, and the container
            runs, has ended (``Succeeded``: exit code 0, ``Failed``: 1) or is being created.
        size: Target size of the JSON encoding in bytes.
        managed_fields: Include ``metadata.managedFields``.
    """
    app = name.rsplit("-", 1)[0] or name
    pod_labels = dict(labels) if labels is not None else {"app": app}
    owner = f"{app}-7d4b9c8f6d"
    owner_uid = str(uuid.uuid5(uuid.NAMESPACE_DNS, f"{namespace}/{owner}"))
    ready = "True" if phase == "Running" else "False"
    octet = sum(name.encode()) % 250 + 2
    digest = hashlib.sha256(f"{namespace}/{name}".encode()).hexdigest()
    metadata: dict[str, Any] = {
        "name": name,
        "generateName": f"{owner}-",
        "namespace": namespace,
        "labels": pod_labels,
        "annotations": {"kubernetes.io/psp": "restricted"},
        "ownerReferences": [
            {
                "apiVersion": "apps/v1",
                "kind": "ReplicaSet",
                "name": owner,
                "uid": owner_uid,
                "controller": True,
                "blockOwnerDeletion": True,
            }
        ],
    }
    if managed_fields:
        metadata["managedFields"] = _managed_fields(pod_labels)
    pod: dict[str, Any] = {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": metadata,
        "spec": {
            "containers": [
                {
                    "name": "app",
                    "image": f"registry.example.com/{app}:1.4.2",
                    "ports": [{"name": "http", "containerPort": 8080, "protocol": "TCP"}],
                    "env": [{"name": "LOG_LEVEL", "value": "info"}],
                    "resources": {
                        "requests": {"cpu": "100m", "memory": "128Mi"},
                        "limits": {"memory": "256Mi"},
                    },
                    "readinessProbe": {
                        "httpGet": {"path": "/healthz", "port": 8080, "scheme": "HTTP"},
                        "periodSeconds": 10,
                    },
                    "volumeMounts": [
                        {
                            "name": "kube-api-access",
                            "readOnly": True,
                            "mountPath": "/var/run/secrets/kubernetes.io/serviceaccount",
                        }
                    ],
                    "terminationMessagePath": "/dev/termination-log",
                    "terminationMessagePolicy": "File",
                    "imagePullPolicy": "IfNotPresent",
                }
            ],
            "volumes": [{"name": "kube-api-access", "projected": {"defaultMode": 420}}],
            "restartPolicy": "Always",
            "terminationGracePeriodSeconds": 30,
            "dnsPolicy": "ClusterFirst",
            "serviceAccountName": "default",
            "nodeName": node,
            "schedulerName": "default-scheduler",
            "priority": 0,
        },
        "status": {
            "phase": phase,
            "conditions": [
                {"type": t, "status": s, "lastTransitionTime": _TIME}
                for t, s in (
                    ("Initialized", "True"),
                    ("Ready", ready),
                    ("ContainersReady", ready),
                    ("PodScheduled", "True"),
                )
            ],
            "hostIP": "10.0.0.10",
            "podIP": f"10.244.1.{octet}",
            "podIPs": [{"ip": f"10.244.1.{octet}"}],
            "startTime": _TIME,
            "containerStatuses": [
                {
                    "name": "app",
                    "ready": phase == "Running",
                    "restartCount": 0,
                    "image": f"registry.example.com/{app}:1.4.2",
                    "imageID": f"registry.example.com/{app}@sha256:{digest}",
                    "containerID": f"containerd://{digest[:32]}",
                    "started": phase == "Running",
                    "state": _container_state(phase),
                }
            ],
            "qosClass": "Burstable",
        },
    }
    container = pod["spec"]["containers"][0]
    optional = (  # dropped in this order while the pod is larger than ``size``
        lambda: container.pop("readinessProbe"),
        lambda: (container.pop("volumeMounts"), pod["spec"].pop("volumes")),
        lambda: container.pop("env"),
        lambda: (
            container.pop("terminationMessagePath"),
            container.pop("terminationMessagePolicy"),
        ),
        lambda: metadata.pop("annotations"),
        lambda: metadata.get("managedFields", [None]).pop(),  # the kubelet's entry
        lambda: pod["status"]["conditions"].pop(0),  # Initialized
        lambda: pod["status"].pop("podIPs"),
    )
    for drop in optional:
        if len(orjson.dumps(pod)) <= size:
            break
        drop()
    annotations = metadata.setdefault("annotations", {})
    annotations[_PADDING] = ""
    missing = size - len(orjson.dumps(pod))
    if missing > 0:
        annotations[_PADDING] = "x" * missing
    else:
        del annotations[_PADDING]
        if not annotations:
            del metadata["annotations"]
    return pod
