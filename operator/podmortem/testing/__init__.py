"""An emulated Kubernetes API and kubelet logs on kmock, for tests, benchmarks and ``podmortem demo``.

Needs the ``demo`` extra (kmock). Start one with :func:`running_cluster`, add
pods with :meth:`PodLogsApi.add_pod`, make containers write with
``pod.containers[name].write(n)``, and queue faults on
``pod.containers[name].faults`` (see :mod:`podmortem.testing.faults`).
"""

from podmortem.testing import faults
from podmortem.testing.apiserver import KubernetesApi, write_kubeconfig
from podmortem.testing.cluster import kubeconfig_for, running_cluster
from podmortem.testing.kubelet import Container, Pod, PodLogsApi, awkward_text, plain_text, repetitive_text

__all__ = [
    "Container",
    "KubernetesApi",
    "Pod",
    "PodLogsApi",
    "awkward_text",
    "faults",
    "kubeconfig_for",
    "plain_text",
    "repetitive_text",
    "running_cluster",
    "write_kubeconfig",
]
