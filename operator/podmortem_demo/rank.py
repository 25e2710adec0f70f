"""One rank of ``podmortem demo --distributed``: a training process that does collectives with its peers.

Run as ``python -m podmortem_demo.rank`` in a pod with the environment the Kubeflow training
operator gives a PyTorchJob replica (``RANK``, ``WORLD_SIZE``, ``MASTER_ADDR``, ``MASTER_PORT``).
Rank 0 holds a TCP connection to every other rank; each step every rank sends its share and
waits for rank 0's reply, an all-reduce in miniature. So a rank that dies stalls the others
the way a dead rank stalls an NCCL collective, and the failures that follow are caused by it,
not scheduled:

- the rank named by ``--grow-rank`` keeps a buffer per step (``--grow-mib`` each) until its
  memory limit OOM-kills it (the kernel, in the pod's memory cgroup);
- rank 0 sees the peer's connection end, waits ``--watchdog-s`` as the NCCL watchdog waits for
  the collective, prints the watchdog's timeout and exits 1;
- the other ranks lose rank 0 mid-collective: one prints NCCL's remote error and exits 1, the
  next prints torchrun's agent stopping its workers and dies of SIGTERM (143).

The failure texts are real ones, copied from the threads named in `TEXTS_SOURCE` (the same
lines as ``tests/fixtures/training-logs``, whose SOURCES.md cites each). Only the standard
library is imported: this runs in a capped cgroup and must start small.
"""

from __future__ import annotations

import argparse
import os
import signal
import socket
import sys
import time

MIB = 1024**2

TEXTS_SOURCE = (
    "tests/fixtures/training-logs: nccl-watchdog-torch25.log (hiyouga/LlamaFactory#7396, torch 2.5), "
    "nccl-remote-error.log (NVIDIA/nccl#2076, NCCL 2.21.5), torchrun-sigterm.log (OEvortex/unsloth#10)"
)
#: Rank 0 after the watchdog timeout (nccl-watchdog-torch25.log, verbatim).
NCCL_WATCHDOG = (
    "[rank0]:[E321 02:07:08.408271257 ProcessGroupNCCL.cpp:607] [Rank 0] Watchdog caught collective "
    "operation timeout: WorkNCCL(SeqNum=1580, OpType=ALLREDUCE, NumelIn=466119168, NumelOut=466119168, "
    "Timeout(ms)=600000) ran for 600060 milliseconds before timing out.",
    "[rank0]:[E321 02:07:08.465150152 ProcessGroupNCCL.cpp:1664] [PG 1 Rank 0] Exception (either an error "
    "or timeout) detected by watchdog at work: 1580, last enqueued NCCL work: 1582, last completed NCCL "
    "work: 1579.",
)
#: A rank whose peer went away mid-collective (nccl-remote-error.log, verbatim).
NCCL_REMOTE_ERROR = (
    "torch.distributed.DistBackendError: NCCL error in: "
    "/pytorch/torch/csrc/distributed/c10d/NCCLUtils.hpp:268, "
    "remote process exited or there was a network error, NCCL version 2.21.5",
    "ncclRemoteError: A call failed possibly due to a network error or a remote process exiting prematurely.",
    "Last error:",
    "socketProgressOpt: Call to recv from 172....<33759> failed : Connection reset by peer",
)
#: torchrun's elastic agent stopping its workers (torchrun-sigterm.log, first lines, verbatim).
TORCHRUN_SIGTERM = (
    "W0801 13:23:17.366000 32974 torch/distributed/elastic/multiprocessing/api.py:900] Sending process 33051 "
    "closing signal SIGTERM",
    "W0801 13:23:17.367000 32974 torch/distributed/elastic/multiprocessing/api.py:900] Sending process 33052 "
    "closing signal SIGTERM",
)


def say(line: str) -> None:
    print(line, flush=True)


def _connect(host: str, port: int, rank: int, *, within_s: float) -> socket.socket:
    """Join rank 0 (retrying while it starts), and tell it who we are."""
    deadline = time.monotonic() + within_s
    while True:
        try:
            sock = socket.create_connection((host, port), timeout=1.0)
            break
        except OSError:
            if time.monotonic() > deadline:
                raise
            time.sleep(0.05)
    sock.settimeout(None)
    sock.sendall(bytes([rank]))
    return sock


def _accept_peers(port: int, world: int, *, within_s: float) -> dict[int, socket.socket]:
    listener = socket.create_server(("127.0.0.1", port))
    listener.settimeout(within_s)
    peers: dict[int, socket.socket] = {}
    with listener:
        while len(peers) < world - 1:
            conn, _ = listener.accept()
            conn.settimeout(None)
            peers[conn.recv(1)[0]] = conn
    return peers


def _rank0(peers: dict[int, socket.socket], *, steps: int, step_s: float, watchdog_s: float) -> int:
    """The collectives' hub: each step waits for every peer's share, then answers all.

    A peer that died never sends its share: as NCCL's watchdog, wait ``watchdog_s``, then take the
    process down with the watchdog's words.
    """
    for step in range(steps):
        for sock in peers.values():
            try:
                share = sock.recv(1)
            except OSError:
                share = b""
            if not share:
                time.sleep(watchdog_s)
                for line in NCCL_WATCHDOG:
                    say(line)
                return 1
        for sock in peers.values():
            sock.sendall(b"k")
        say(f"step {step} loss={1.0 / (step + 1):.4f}")
        time.sleep(step_s)
    return 0


def _peer(
    sock: socket.socket, rank: int, *, steps: int, step_s: float, grow: bool, grow_mib: int, after: str
) -> int:
    kept: list[bytearray] = []
    for step in range(steps):
        if grow:
            kept.append(bytearray(b"\x01" * (grow_mib * MIB)))  # touched: resident, charged to the cgroup
            say(f"step {step}: kept {len(kept) * grow_mib} MiB of activations")
        else:
            say(f"step {step}")
        try:
            sock.sendall(b"s")
            reply = sock.recv(1)
        except OSError:
            reply = b""
        if not reply:
            if after == "sigterm":
                for line in TORCHRUN_SIGTERM:
                    say(line)
                os.kill(os.getpid(), signal.SIGTERM)
                time.sleep(5)
            for line in NCCL_REMOTE_ERROR:
                say(line)
            return 1
        time.sleep(step_s)
    return 0


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m podmortem_demo.rank", description=__doc__.split("\n\n")[0])
    p.add_argument("--steps", type=int, default=200)
    p.add_argument("--step-s", type=float, default=0.05)
    p.add_argument("--grow-rank", type=int, default=2, help="the rank that keeps memory until OOM-killed")
    p.add_argument("--grow-mib", type=int, default=16)
    p.add_argument("--grow-after", type=int, default=5, help="steps before the growing rank starts keeping")
    p.add_argument("--watchdog-s", type=float, default=1.5, help="rank 0's wait for a dead peer's share")
    p.add_argument("--sigterm-rank", type=int, default=3, help="the rank torchrun's agent stops")
    args = p.parse_args(argv)
    rank, world = int(os.environ["RANK"]), int(os.environ["WORLD_SIZE"])
    host, port = os.environ.get("MASTER_ADDR", "127.0.0.1"), int(os.environ["MASTER_PORT"])
    say(f"rank {rank}/{world}: process group via {host}:{port}")
    if rank == 0:
        peers = _accept_peers(port, world, within_s=30.0)
        return _rank0(peers, steps=args.steps, step_s=args.step_s, watchdog_s=args.watchdog_s)
    sock = _connect(host, port, rank, within_s=30.0)
    grow = rank == args.grow_rank
    steps_before = args.grow_after if grow else 0
    for step in range(steps_before):
        sock.sendall(b"s")
        if not sock.recv(1):
            return 1
        say(f"step {step}")
        time.sleep(args.step_s)
    return _peer(
        sock,
        rank,
        steps=args.steps - steps_before,
        step_s=args.step_s,
        grow=grow,
        grow_mib=args.grow_mib,
        after="sigterm" if rank == args.sigterm_rank else "error",
    )


if __name__ == "__main__":
    sys.exit(main())
