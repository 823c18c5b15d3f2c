"""Where a run's parallel work goes: this machine (`local`, the default) or a Ray cluster (`ray`).

One seam for both kinds of parallel work, `analyze`'s per-file scan and the Blueprint's workloads: an `Executor`
hands out a `concurrent.futures.Executor` (`pool`) for module-level functions of plain-data arguments (paths,
contexts, settings) whose results are plain data too (ingest states, result JSON). The callers do not know which
executor runs them.

- `local`: worker processes (forked when that is safe, so they inherit the compiled catalog) or, for work that
  mostly waits on collectors, threads.
- `ray`: every call is a Ray task. `RAY_ADDRESS` names the cluster; without it Ray connects to the one running
  on this machine or starts one (`ray.init`'s own rule). A task whose worker process or node dies is run again
  by Ray (`TASK_RETRIES` times); its result reaches the caller once, whichever attempt produced it. Ray is an
  optional extra (`pip install 'firstfault[ray]'`), imported only when chosen.

A task the executor lost with its worker (`lost()`) can be done again by the caller; an exception the task
itself raised is the task's answer.
"""

from __future__ import annotations

import os
import threading
from collections.abc import Callable, Iterator
from concurrent import futures
from contextlib import AbstractContextManager, contextmanager
from typing import Any, Protocol

from firstfault.errors import ExecutorError

EXECUTORS = ("local", "ray")
# How many times Ray runs a task again after its worker process or node died (not after an exception).
TASK_RETRIES = 3
# The most worker processes the local executor starts on its own (more rarely pays on one machine's disks).
MAX_LOCAL_WORKERS = 8


class Executor(Protocol):
    name: str

    def capacity(self) -> int:
        """How many tasks it runs at once when asked for as many as it can (the `auto` worker count)."""
        ...

    def pool(self, workers: int, *, threads: bool = False) -> AbstractContextManager[futures.Executor]:
        """A pool running up to `workers` tasks at once; `threads` for work that mostly waits (local only:
        a Ray task is a task). Leaving it waits for what was submitted, or cancels it on an exception."""
        ...

    def lost(self, exc: BaseException) -> bool:
        """Whether a task's exception says the executor lost it (its worker died), not that the task failed."""
        ...

    def close(self) -> None: ...


def make_executor(name: str) -> Executor:
    """The executor called `name` (`local` or `ray`); `ray` connects at once, so a wrong address or a missing
    extra is reported before any work starts."""
    if name == "local":
        return LocalExecutor()
    if name == "ray":
        return RayExecutor()
    raise ExecutorError(f"unknown executor {name!r} (one of {', '.join(EXECUTORS)})")


class LocalExecutor:
    """Processes or threads of this machine."""

    name = "local"

    def capacity(self) -> int:
        return max(1, min(os.cpu_count() or 1, MAX_LOCAL_WORKERS))

    @contextmanager
    def pool(self, workers: int, *, threads: bool = False) -> Iterator[futures.Executor]:
        pool: futures.Executor = (futures.ThreadPoolExecutor(workers) if threads else
                                  futures.ProcessPoolExecutor(workers, mp_context=pool_context()))
        with pool:
            yield pool

    def lost(self, exc: BaseException) -> bool:
        from concurrent.futures.process import BrokenProcessPool  # here: with multiprocessing, when a pool ran

        return isinstance(exc, BrokenProcessPool)

    def close(self) -> None:
        return None


def pool_context() -> Any:
    """`fork` when it is safe (a single-threaded parent on a platform that has it): the workers inherit the
    compiled catalog and start in milliseconds. Otherwise `spawn`: each worker loads the catalog once."""
    import multiprocessing  # here: `analyze` in one process (most of them) does not load it

    if "fork" in multiprocessing.get_all_start_methods() and threading.active_count() == 1:
        return multiprocessing.get_context("fork")
    return multiprocessing.get_context("spawn")


class RayExecutor:
    """Ray tasks on the cluster at `RAY_ADDRESS` (or the one `ray.init()` finds or starts on this machine).

    The functions run must be importable on the cluster's workers: firstfault, the same version, installed
    there (a worker with another rule catalog refuses the work; the engine and the Blueprint check)."""

    name = "ray"

    def __init__(self) -> None:
        self.ray = import_ray()
        self._connected_here = False
        if not self.ray.is_initialized():
            address = os.environ.get("RAY_ADDRESS", "")
            where = address or "(none: the local cluster, or a new one)"
            _check_reachable(address)
            try:
                # log_to_driver off: worker output must not mix into `analyze --json`'s standard output
                self.ray.init(log_to_driver=False)
            except Exception as exc:  # noqa: BLE001 - ray.init raises ConnectionError, RuntimeError, ValueError ...
                raise ExecutorError(f"cannot use the Ray cluster at RAY_ADDRESS={where}: "
                                    f"{exc.__class__.__name__}: {exc}") from None
            self._connected_here = True
        self._remote: dict[Callable[..., Any], Any] = {}

    def capacity(self) -> int:
        return max(1, int(self.ray.cluster_resources().get("CPU", 1)))

    @contextmanager
    def pool(self, workers: int, *, threads: bool = False) -> Iterator[futures.Executor]:
        pool = _RayPool(self.ray, self._remote_of)
        try:
            yield pool
        except BaseException:
            pool.shutdown(cancel_futures=True)
            raise

    def lost(self, exc: BaseException) -> bool:
        return isinstance(exc, self.ray.exceptions.RayError)

    def close(self) -> None:
        if self._connected_here:
            self.ray.shutdown()
            self._connected_here = False

    def _remote_of(self, fn: Callable[..., Any]) -> Any:
        remote = self._remote.get(fn)
        if remote is None:
            # retry_exceptions off: an exception is the task's answer; only a lost worker is worth a new attempt
            remote = self.ray.remote(fn).options(max_retries=TASK_RETRIES, retry_exceptions=False)
            self._remote[fn] = remote
        return remote


class _RayPool(futures.Executor):
    """`submit` starts a Ray task and returns a `concurrent.futures.Future` of its value. An exception the task
    raised is set as itself (as a local pool would), not wrapped in Ray's `RayTaskError`. Only tasks still
    running are remembered (to cancel them), so finished results are not kept alive by the pool."""

    def __init__(self, ray: Any, remote_of: Callable[[Callable[..., Any]], Any]) -> None:
        self.ray = ray
        self.remote_of = remote_of
        self.running: dict[int, Any] = {}
        self.lock = threading.Lock()

    def submit(self, fn: Callable[..., Any], /, *args: Any, **kwargs: Any) -> futures.Future[Any]:
        ref = self.remote_of(fn).remote(*args, **kwargs)
        outer: futures.Future[Any] = futures.Future()
        with self.lock:
            self.running[id(outer)] = ref
        ref.future().add_done_callback(lambda inner: self._settle(outer, inner))
        return outer

    def _settle(self, outer: futures.Future[Any], inner: futures.Future[Any]) -> None:
        with self.lock:
            self.running.pop(id(outer), None)
        if outer.done():
            return
        if inner.cancelled():
            outer.cancel()
            return
        exc = inner.exception()
        if exc is None:
            outer.set_result(inner.result())
        else:
            cause = getattr(exc, "cause", None) if isinstance(exc, self.ray.exceptions.RayTaskError) else None
            outer.set_exception(cause if isinstance(cause, BaseException) else exc)

    def shutdown(self, wait: bool = True, *, cancel_futures: bool = False) -> None:
        if not cancel_futures:
            return
        with self.lock:
            refs = list(self.running.values())
        for ref in refs:
            try:
                self.ray.cancel(ref)
            except Exception:  # noqa: BLE001 - a task that finished meanwhile cannot be cancelled: nothing to do
                pass


def _check_reachable(address: str, timeout: float = 5.0) -> None:
    """Fail fast when RAY_ADDRESS names a host and port nothing answers on (Ray itself keeps retrying for
    minutes); `auto`, `local` and no address are left to Ray."""
    import socket

    host, _, port = address.removeprefix("ray://").rpartition(":")
    if not host or not port.isdigit():
        return
    try:
        socket.create_connection((host.strip("[]"), int(port)), timeout=timeout).close()
    except OSError as exc:
        raise ExecutorError(f"cannot reach the Ray cluster at RAY_ADDRESS={address}: {exc.strerror or exc}") from None


def import_ray() -> Any:
    """The `ray` module, or an error naming the extra that installs it."""
    try:
        import ray
    except ImportError as exc:
        raise ExecutorError(f"the `ray` executor needs Ray, which is not installed ({exc}): "
                            "pip install 'firstfault[ray]'") from None
    return ray
