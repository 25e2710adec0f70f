"""The Pod Security Standards' "baseline" and "restricted" checks, for a pod spec, as data.

Written from the standard (https://kubernetes.io/docs/concepts/security/pod-security-standards/,
policy version v1.29, the chart's floor), one function per control, each returning what it found
wrong in words. The Pod Security admission controller is Go code in the API server; there is no
API server here, so these are the same rules applied to the manifests the chart renders and the
pods the operator and its webhook make. Controls about fields the chart never writes (Windows
hostProcess, AppArmor, SELinux, /proc mount, sysctls) are checked too, so that a value a user
adds cannot slip by.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from typing import Any

#: Capabilities "baseline" lets a container add.
BASELINE_CAPABILITIES = frozenset({
    "AUDIT_WRITE", "CHOWN", "DAC_OVERRIDE", "FOWNER", "FSETID", "KILL", "MKNOD", "NET_BIND_SERVICE",
    "SETFCAP", "SETGID", "SETPCAP", "SETUID", "SYS_CHROOT",
})
#: Volume types "restricted" allows.
RESTRICTED_VOLUMES = frozenset({
    "configMap", "csi", "downwardAPI", "emptyDir", "ephemeral", "persistentVolumeClaim", "projected",
    "secret",
})
SAFE_SYSCTLS = frozenset({
    "kernel.shm_rmid_forced", "net.ipv4.ip_local_port_range", "net.ipv4.ip_unprivileged_port_start",
    "net.ipv4.tcp_syncookies", "net.ipv4.ping_group_range", "net.ipv4.ip_local_reserved_ports",
    "net.ipv4.tcp_keepalive_time", "net.ipv4.tcp_fin_timeout", "net.ipv4.tcp_keepalive_intvl",
    "net.ipv4.tcp_keepalive_probes",
})
SELINUX_TYPES = frozenset({"", "container_t", "container_init_t", "container_kvm_t", "container_engine_t"})


def containers(spec: Mapping[str, Any]) -> Iterator[Mapping[str, Any]]:
    for part in ("initContainers", "containers", "ephemeralContainers"):
        yield from spec.get(part) or []


def _ctx(obj: Mapping[str, Any]) -> Mapping[str, Any]:
    return obj.get("securityContext") or {}


def baseline(spec: Mapping[str, Any]) -> list[str]:
    """What in ``spec`` (a PodSpec) the "baseline" level forbids; empty: admitted."""
    problems = []
    pod = _ctx(spec)
    for field in ("hostNetwork", "hostPID", "hostIPC"):
        if spec.get(field):
            problems.append(f"host namespaces: {field}")
    if pod.get("windowsOptions", {}).get("hostProcess"):
        problems.append("HostProcess: pod")
    for volume in spec.get("volumes") or []:
        if "hostPath" in volume:
            problems.append(f"hostPath volume {volume['name']}")
    if (pod.get("seLinuxOptions") or {}).get("type", "") not in SELINUX_TYPES:
        problems.append("SELinux type: pod")
    if (pod.get("seccompProfile") or {}).get("type") == "Unconfined":
        problems.append("seccomp Unconfined: pod")
    for sysctl in pod.get("sysctls") or []:
        if sysctl.get("name") not in SAFE_SYSCTLS:
            problems.append(f"sysctl {sysctl.get('name')}")
    for c in containers(spec):
        name, ctx = c.get("name"), _ctx(c)
        if ctx.get("privileged"):
            problems.append(f"privileged: {name}")
        if (ctx.get("windowsOptions") or {}).get("hostProcess"):
            problems.append(f"HostProcess: {name}")
        added = set((ctx.get("capabilities") or {}).get("add") or []) - BASELINE_CAPABILITIES
        if added:
            problems.append(f"capabilities {sorted(added)}: {name}")
        for port in c.get("ports") or []:
            if port.get("hostPort"):
                problems.append(f"hostPort {port['hostPort']}: {name}")
        if (ctx.get("seLinuxOptions") or {}).get("type", "") not in SELINUX_TYPES:
            problems.append(f"SELinux type: {name}")
        if ctx.get("procMount", "Default") != "Default":
            problems.append(f"procMount: {name}")
        if (ctx.get("seccompProfile") or {}).get("type") == "Unconfined":
            problems.append(f"seccomp Unconfined: {name}")
        if (ctx.get("appArmorProfile") or {}).get("type") == "Unconfined":
            problems.append(f"AppArmor Unconfined: {name}")
    return problems


def restricted(spec: Mapping[str, Any]) -> list[str]:
    """What in ``spec`` the "restricted" level forbids (baseline's rules included); empty: admitted."""
    problems = baseline(spec)
    pod = _ctx(spec)
    for volume in spec.get("volumes") or []:
        kinds = set(volume) - {"name"}
        if not kinds <= RESTRICTED_VOLUMES:
            problems.append(f"volume type {sorted(kinds)}: {volume['name']}")
    if pod.get("runAsUser") == 0:
        problems.append("runAsUser 0: pod")
    pod_seccomp = (pod.get("seccompProfile") or {}).get("type")
    for c in containers(spec):
        name, ctx = c.get("name"), _ctx(c)
        if ctx.get("allowPrivilegeEscalation") is not False:
            problems.append(f"allowPrivilegeEscalation not false: {name}")
        non_root = ctx.get("runAsNonRoot", pod.get("runAsNonRoot"))
        if non_root is not True:
            problems.append(f"runAsNonRoot not true: {name}")
        if ctx.get("runAsUser") == 0:
            problems.append(f"runAsUser 0: {name}")
        seccomp = (ctx.get("seccompProfile") or {}).get("type", pod_seccomp)
        if seccomp not in ("RuntimeDefault", "Localhost"):
            problems.append(f"seccomp {seccomp!r}, not RuntimeDefault or Localhost: {name}")
        capabilities = ctx.get("capabilities") or {}
        if "ALL" not in (capabilities.get("drop") or []):
            problems.append(f"capabilities not dropping ALL: {name}")
        added = set(capabilities.get("add") or []) - {"NET_BIND_SERVICE"}
        if added:
            problems.append(f"capabilities {sorted(added)} added: {name}")
    return problems
