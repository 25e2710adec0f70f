"""An emulated Kubernetes API and kubelet logs on kmock, for tests, benchmarks and ``podmortem demo``.

Needs the ``demo`` extra (kmock). Start one with :func:`running_cluster`, add
pods with :meth:`PodLogsApi.add_pod`, make containers write with
``pod.containers[name].write(n)``, and queue faults on
``pod.containers[name].faults`` (see :mod:`podmortem_demo.emulated.faults`).
"""

from podmortem_demo.emulated import faults
from podmortem_demo.emulated.apiserver import KubernetesApi, write_kubeconfig
from podmortem_demo.emulated.calls import ApiCall
from podmortem_demo.emulated.cluster import kubeconfig_for, running_cluster
from podmortem_demo.emulated.kubelet import (
    Container,
    Pod,
    PodLogsApi,
    awkward_text,
    plain_text,
    repetitive_text,
)
from podmortem_demo.emulated.reviews import ReviewedToken, Reviews

__all__ = [
    "ApiCall",
    "Container",
    "KubernetesApi",
    "Pod",
    "PodLogsApi",
    "ReviewedToken",
    "Reviews",
    "awkward_text",
    "faults",
    "kubeconfig_for",
    "plain_text",
    "repetitive_text",
    "running_cluster",
    "write_kubeconfig",
]
