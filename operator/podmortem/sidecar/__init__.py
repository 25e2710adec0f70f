"""The sidecar: OOM evidence for one training container from inside its pod, with no host access.

Where the node agent cannot run (no hostPID, no hostPath: managed clusters, Pod Security
"restricted"), ``podmortem sidecar`` runs in the training pod itself, with
``shareProcessNamespace: true``, as the trainer's user and with no capability. It finds the
trainer container's processes (`container`), reads that container's own memory cgroup through its
mount (`cgroup`), samples it (`sampling`), notices a kill (`kill_watch`), and leaves the evidence
(`podmortem.reports.sidecar_document`, written without pydantic; the operator reads it with
`podmortem.reports.sidecar_evidence`) in its termination message (`main`). docs/sidecar.md tells
the whole of it.
"""
