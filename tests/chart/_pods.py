"""Run a rendered pod's container as a local process: its command, args and env exactly as rendered.

What a kubelet would add or mount is translated, and only that:

- ``valueFrom`` env: ``fieldRef`` from the pod's own fields, ``secretKeyRef`` from the
  rendered Secret;
- volume mounts: a ``hostPath`` volume is the host path itself (the agent reads the
  real /proc, /sys/fs/cgroup and /dev/kmsg); any other volume (emptyDir, PVC, Secret)
  is a fresh directory, a Secret's keys written into it (a cert-manager Certificate's
  Secret: the test PKI's server certificate, as cert-manager would issue one). A path in env or args under
  a mount is rewritten to where that mount is here, since a test cannot mount;
- the service account: ``KUBERNETES_SERVICE_HOST``/``_PORT`` and its token, CA and
  namespace files, found through ``PODMORTEM_SERVICE_ACCOUNT_DIR`` (the only setting
  that exists for tests alone).
"""

from __future__ import annotations

import base64
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from podmortem_demo.emulated.tls import Pki

from . import _render

NODE = "node-a"
POD_IP = "127.0.0.1"


@dataclass(frozen=True)
class PodProcess:
    argv: list[str]
    env: dict[str, str]
    #: The readiness probe's URL on this machine.
    ready_url: str


def _secret(rendered: _render.Rendered, name: str, *, pki: Pki | None = None) -> dict[str, str]:
    for obj in rendered.of_kind("Secret"):
        if obj["metadata"]["name"] == name:
            data = {k: base64.b64decode(v).decode() for k, v in (obj.get("data") or {}).items()}
            data.update(obj.get("stringData") or {})
            return data
    for certificate in rendered.of_kind("Certificate"):
        if certificate["spec"]["secretName"] == name:
            # What cert-manager would store: here the test PKI's server certificate (for 127.0.0.1).
            assert pki is not None, f"Secret {name} holds a certificate: materialize() needs the PKI"
            return {"tls.crt": pki.server_pem.decode(), "tls.key": pki.server_key.decode(),
                    "ca.crt": pki.ca_pem.decode()}
    # An existingSecret the chart does not render: the user made it; stand in with a token.
    return {"token": f"stand-in-for-{name}"}


def _field(path: str, *, pod: str, namespace: str) -> str:
    fields = {
        "metadata.name": pod,
        "metadata.namespace": namespace,
        "spec.nodeName": NODE,
        "status.podIP": POD_IP,
        "status.hostIP": POD_IP,
        "spec.serviceAccountName": "podmortem",
    }
    if path not in fields:
        raise AssertionError(f"the test does not know the pod field {path!r}: add it here")
    return fields[path]


def materialize(rendered: _render.Rendered, workload: dict[str, Any], *, podmortem: str, tmp: Path,
                base_env: dict[str, str], pki: Pki | None = None) -> PodProcess:
    """The first container of ``workload`` as a local process (see the module docstring)."""
    spec = workload["spec"]["template"]["spec"]
    container = spec["containers"][0]
    namespace = workload["metadata"].get("namespace", _render.NAMESPACE)
    pod = f"{workload['metadata']['name']}-0"
    volumes = {v["name"]: v for v in spec.get("volumes", [])}
    mounts: list[tuple[str, str]] = []
    for mount in container.get("volumeMounts", []):
        volume = volumes[mount["name"]]
        if "hostPath" in volume:
            target = volume["hostPath"]["path"]
        else:
            directory = tmp / "volumes" / mount["name"]
            directory.mkdir(parents=True, exist_ok=True)
            if "secret" in volume:
                for key, value in _secret(rendered, volume["secret"]["secretName"], pki=pki).items():
                    (directory / key).write_text(value)
            target = str(directory)
        mounts.append((mount["mountPath"].rstrip("/"), target))
    mounts.sort(key=lambda m: len(m[0]), reverse=True)

    def here(value: str) -> str:
        for mount_path, target in mounts:
            if value == mount_path or value.startswith(mount_path + "/"):
                return target + value[len(mount_path):]
        return value

    env = dict(base_env)
    for item in container.get("env", []):
        if "value" in item:
            env[item["name"]] = here(str(item["value"]))
        elif "fieldRef" in item.get("valueFrom", {}):
            path = item["valueFrom"]["fieldRef"]["fieldPath"]
            env[item["name"]] = _field(path, pod=pod, namespace=namespace)
        elif "secretKeyRef" in item.get("valueFrom", {}):
            ref = item["valueFrom"]["secretKeyRef"]
            env[item["name"]] = _secret(rendered, ref["name"])[ref["key"]]
        else:
            raise AssertionError(f"the test does not know this env source: {item}")
    command = [podmortem if c == "podmortem" else here(c) for c in container.get("command", [])]
    argv = (command or [podmortem]) + [here(str(a)) for a in container.get("args", [])]
    probe = container["readinessProbe"]["httpGet"]
    port = probe["port"]
    if isinstance(port, str):
        port = next(p["containerPort"] for p in container["ports"] if p["name"] == port)
    return PodProcess(argv=argv, env=env, ready_url=f"http://127.0.0.1:{port}{probe['path']}")
