"""The CPU time this process may use: its cgroup's CPU quota (a container limited to one CPU
on a big host sees the host's CPUs in ``os.sched_getaffinity`` and ``/proc/stat``, but may use
one of them), which the default thread count of a call and of a plan's builds and the check
for an idle core (:mod:`silvanforge.plan.overlap`) respect."""

from __future__ import annotations

import dataclasses
import functools
import os


def read_file(root: str, path: str) -> str | None:
    """The text of ``path`` under ``root`` (the kernel's files, or a test's), or None."""
    try:
        with open(os.path.join(root, path), encoding="ascii", errors="replace") as f:
            return f.read()
    except OSError:
        return None


def _number(text: str | None) -> float | None:
    try:
        return float(text) if text is not None else None
    except ValueError:
        return None


@dataclasses.dataclass(frozen=True)
class CpuQuota:
    """A cgroup's CPU limit: ``cores`` CPUs' worth of time each period, and where the CPU time
    its processes used is counted (``usage``: a file under the root, read as ``usage_scale``
    seconds a unit; None where there is no count)."""

    cores: float
    usage: tuple[str, str | None, float] | None = None  # (file, key of a "key value" line or None, scale)

    def used(self, root: str) -> float | None:
        """Seconds of CPU time the cgroup's processes used so far, or None."""
        if self.usage is None:
            return None
        path, key, scale = self.usage
        text = read_file(root, path)
        if text is not None and key is not None:
            text = next((line.split()[1] for line in text.splitlines()
                         if len(line.split()) == 2 and line.split()[0] == key), None)
        value = _number(text)
        return None if value is None else value * scale


def _ancestors(path: str) -> list[str]:
    """A cgroup's path and its parents' (relative, the root last): a parent's limit binds too."""
    parts = [p for p in path.split("/") if p and p not in (".", "..")]
    return ["/".join(parts[:k]) for k in range(len(parts), -1, -1)]


def cpu_quota(root: str = "/") -> CpuQuota | None:
    """The tightest CPU quota on this process's cgroups (Linux; v2 ``cpu.max``, v1
    ``cpu.cfs_quota_us`` / ``cpu.cfs_period_us``, in the cgroup and its parents), or None where
    none is set or it cannot be read.  A container limited to one CPU on a big host sees the
    host's CPUs (``os.sched_getaffinity``, ``/proc/stat``) but may use one of them.  ``root``:
    where the files are (tests)."""
    found = []
    for line in (read_file(root, "proc/self/cgroup") or "").splitlines():
        fields = line.split(":", 2)
        if len(fields) != 3:
            continue
        _, controllers, path = fields
        if not controllers:  # v2: one hierarchy, mounted at /sys/fs/cgroup
            mounts = ["sys/fs/cgroup"]
        elif "cpu" in controllers.split(","):  # v1: the cpu controller's own hierarchy
            mounts = [f"sys/fs/cgroup/{controllers}", "sys/fs/cgroup/cpu,cpuacct", "sys/fs/cgroup/cpu"]
        else:
            continue
        for mount in dict.fromkeys(mounts):
            # (inside a container the hierarchy's root is the container's own cgroup, whatever
            # path the file names: the ancestors end there)
            for rel in _ancestors(path):
                where = os.path.join(mount, rel) if rel else mount
                if not controllers:
                    limit = (read_file(root, f"{where}/cpu.max") or "").split()
                    quota, period = (_number(limit[0]), _number(limit[1])) if len(limit) == 2 else (None, None)
                    usage = (f"{where}/cpu.stat", "usage_usec", 1e-6)
                else:
                    quota = _number(read_file(root, f"{where}/cpu.cfs_quota_us"))
                    period = _number(read_file(root, f"{where}/cpu.cfs_period_us"))
                    usage = (f"{where}/cpuacct.usage", None, 1e-9)
                if quota is not None and period and quota > 0:  # ("max" or -1: no limit)
                    found.append(CpuQuota(quota / period, usage if read_file(root, usage[0]) is not None else None))
    return min(found, key=lambda q: q.cores, default=None)


@functools.cache
def quota_cores() -> int | None:
    """Whole CPUs the process's cgroup quota allows (rounded down, at least one; read once a
    process, as threads default to it on every call), or None where no quota is set: threads
    past the quota would only take turns on it."""
    quota = cpu_quota()
    return None if quota is None else max(1, int(quota.cores))
