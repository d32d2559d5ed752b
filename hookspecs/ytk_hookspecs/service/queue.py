"""A worker's job queue: a fixed set of slots (one per GPU), each running one job at a time in a child
process that dies with the worker.

A subclass says how one job runs (:meth:`SlotQueue.run`, which starts its child with
:meth:`SlotQueue.spawn`) and what a job that broke the slot itself becomes (:meth:`SlotQueue.crashed`).
"""

from __future__ import annotations

import os
import queue
import signal
import subprocess
import sys
import threading
from typing import Any

__all__ = ["SlotQueue", "die_with_parent"]


class SlotQueue:
    """A job queue whose workers each hold one slot (a GPU, or None for a CPU-only worker), so no two jobs share a
    slot."""
    def __init__(self, slots: list[str | None], name: str) -> None:
        self.slots = slots or [None]
        self.name = name
        self._queue: queue.Queue[str | None] = queue.Queue()
        self._waiting: list[str] = []
        self._procs: dict[str, subprocess.Popen[bytes]] = {}
        self._lock = threading.Lock()
        self._threads: list[threading.Thread] = []
        self.stopping = False

    # -- what a subclass implements ------------------------------------------------------------------
    def run(self, job_id: str, slot: str | None) -> None:
        raise NotImplementedError

    def crashed(self, job_id: str, error: Exception) -> None:
        raise NotImplementedError

    # -- the queue -----------------------------------------------------------------------------------
    def start(self) -> None:
        for i, slot in enumerate(self.slots):
            t = threading.Thread(target=self._slot, args=(slot,), name=f"{self.name}-slot-{i}", daemon=True)
            t.start()
            self._threads.append(t)

    def enqueue(self, job_id: str) -> None:
        with self._lock:
            self._waiting.append(job_id)
        self._queue.put(job_id)

    def position(self, job_id: str) -> int | None:
        with self._lock:
            return self._waiting.index(job_id) if job_id in self._waiting else None

    def counts(self) -> tuple[int, int]:
        with self._lock:
            return len(self._waiting), len(self._procs)

    def terminate(self, job_id: str) -> bool:
        """Take a job out of the queue, or end its child; False when it is neither waiting nor running."""
        with self._lock:
            if job_id in self._waiting:
                self._waiting.remove(job_id)  # its slot skips it: the job's record is no longer queued
                return True
            proc = self._procs.get(job_id)
        if proc is None:
            return False
        _end(proc)
        return True

    def stop(self) -> None:
        """The worker is shutting down: running jobs end (their records say what that made them)."""
        self.stopping = True
        with self._lock:
            procs = list(self._procs.values())
        for p in procs:
            _end(p)
        for _ in self._threads:
            self._queue.put(None)
        for t in self._threads:
            t.join(timeout=10)

    def spawn(self, job_id: str, cmd: list[str], env: dict[str, str], **popen: Any) -> subprocess.Popen[bytes]:
        """Start ``cmd`` as ``job_id``'s child, in a process group of its own (ending it ends what it started).
        The caller waits for it and then calls :meth:`reap`."""
        proc = subprocess.Popen(cmd, env=env, stdin=subprocess.DEVNULL, start_new_session=True, **popen)
        with self._lock:
            self._procs[job_id] = proc
        return proc

    def reap(self, job_id: str) -> None:
        with self._lock:
            self._procs.pop(job_id, None)

    def _slot(self, slot: str | None) -> None:
        while True:
            job_id = self._queue.get()
            if job_id is None or self.stopping:
                return
            with self._lock:
                if job_id not in self._waiting:
                    continue  # cancelled while it waited
                self._waiting.remove(job_id)
            try:
                self.run(job_id, slot)
            except Exception as e:  # noqa: BLE001  -- one job's trouble never stops the slot
                self.crashed(job_id, e)


def _end(proc: subprocess.Popen[bytes]) -> None:
    """SIGTERM the child's process group (it may have started compilers of its own)."""
    try:
        os.killpg(proc.pid, signal.SIGTERM)
    except (ProcessLookupError, PermissionError):
        proc.terminate()


def die_with_parent(parent: int) -> None:
    """In a job's child: end when the worker ends, however it ends (Linux), and at once if it already has."""
    if sys.platform.startswith("linux"):
        import ctypes

        try:
            ctypes.CDLL(None, use_errno=True).prctl(1, signal.SIGKILL)  # PR_SET_PDEATHSIG
        except (OSError, AttributeError):
            pass
    if os.getppid() != parent:  # the worker died before prctl took effect
        os._exit(1)
