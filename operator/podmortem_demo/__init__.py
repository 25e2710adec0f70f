"""``podmortem demo``: the whole chain on one machine, with nothing else installed.

An emulated Kubernetes API (:mod:`podmortem_demo.emulated`), the real operator, the
real node agent, and a small kubelet (:mod:`podmortem_demo.kubelet`) that runs
a trainer-like program (:mod:`podmortem_demo.trainer`) as the pod's container
in a real memory cgroup. This package's ``__init__`` imports nothing, because
the trainer runs from it inside a capped cgroup and must start small.
"""
