"""The Ray backend (``--backend ray``): each step's executor work runs on a Ray cluster, the run stays here.

:class:`RayExecutor` wraps the run's executor. Its ``perform`` sends the request to an *executor host* — an
async Ray actor, one per node of the cluster, that builds the run's executor once and runs many steps' work
concurrently (agents and model calls wait far more than they compute, so one process per step would cost a
process start per step and a process per slot). The host's executor speaks the step protocol to a
:class:`~stepline.distributed._channel.RemoteSession`, whose every call comes back over one TCP connection to
this process, where the step's real journaled session runs it (see :mod:`stepline.distributed._channel` for
why the channel is a socket). So the coordinating process keeps the lock, the journal and the run state; a
worker holds nothing that a crash could lose.

What a lost worker, a lost coordinator and a step past its timeout do: :class:`RayExecutor`.

Files a CLI agent edits on a worker reach the project only if the worker sees the project at the same path
(one machine, or a shared filesystem such as NFS mounted at the same path on every node): see
docs/guides/cluster.md. Everything that goes through the protocol (``write_output``, file tools) is done here.
"""

from __future__ import annotations

import asyncio
import contextlib
import importlib
import logging
import os
import sys
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any, ClassVar

from stepline.distributed._channel import Channel, RemoteSession, SessionServer, original_failure, serve_calls
from stepline.errors import ExecutorError, SteplineError, UsageError
from stepline.executors import Executor, StepRequest, StepSession, create_executor

__all__ = ["ClusterCapacity", "RayExecutor", "WorkerLost", "check_reachable", "join_cluster", "ray_executor"]

#: How long a cancelled step waits for its remote work to acknowledge the cancel.
_CANCEL_WAIT = 10.0
_INSTALL_HINT = "install it with `pip install 'stepline[ray]'`, or run with --backend local"


@dataclass(frozen=True, slots=True)
class ClusterCapacity:
    """What the Ray cluster offers a run: its live nodes and their CPUs.

    A step's remote work is a coding agent's process or a model call waiting on the network; a CLI agent keeps
    about one CPU busy, so one step per CPU of the cluster is the default ``--concurrency`` on Ray (the hosts
    themselves reserve no CPU, see :class:`RayExecutor`). Runs of model calls only may ask for more with
    ``--concurrency``.
    """

    nodes: int
    cpus: float

    @property
    def concurrency(self) -> int:
        """Steps at once by default on this cluster: one per CPU, at least one."""
        return max(1, int(self.cpus))

    def describe(self) -> str:
        """The line a command prints once at its start."""
        nodes = f"{self.nodes} node{'' if self.nodes == 1 else 's'}"
        return f"ray: {nodes}, {self.cpus:g} CPUs → concurrency {self.concurrency}"


def join_cluster(address: str | None) -> ClusterCapacity:
    """Join the cluster at ``address`` for this process (once; see :class:`RayExecutor` for None) and say what
    it offers. A command calls it before its run starts, to choose ``--concurrency``; the run's executor then
    finds Ray joined and leaves it joined until the process ends."""
    _join(address)
    nodes = [node for node in _ray().nodes() if node.get("Alive")]
    cpus = sum(float((node.get("Resources") or {}).get("CPU", 0)) for node in nodes)
    return ClusterCapacity(nodes=len(nodes), cpus=cpus)


def _join(address: str | None) -> bool:
    """Join (or start) Ray for this process unless it is joined already; True if this call joined it."""
    ray = _ray()
    if ray.is_initialized():
        return False
    check_reachable(address)
    try:
        ray.init(address=address, include_dashboard=False, log_to_driver=False, logging_level="warning")
    except (ConnectionError, RuntimeError, ValueError) as exc:
        where = address or os.environ.get("RAY_ADDRESS") or "a local Ray"
        raise UsageError(f"cannot join the Ray cluster at {where}: {exc}",
                         hint="start it with `ray start --head`, or pass the address it printed to "
                              "--ray-address") from None
    return True


#: Where Ray looks for its auth token (its C++ AuthenticationTokenLoader, in this order).
_TOKEN_PLACES = "RAY_AUTH_TOKEN=<token>, RAY_AUTH_TOKEN_PATH=<file>, or the file ~/.ray/auth_token"


def _token_auth(address: str) -> None:
    """Join a cluster at ``address`` (``HOST:PORT``) with Ray's token auth when, and only when, it uses it.

    ``ray.init(address=…)`` sends no token unless ``RAY_AUTH_MODE=token`` (a token-auth head then refuses it,
    ``InvalidAuthToken``, 20 s of retries, and "cannot connect"), and one sent to a cluster without token auth
    makes its workers fail to call back. So the cluster is asked once without a token; when it refuses, token
    auth is turned on the way ``ray start --head`` turns it on (a token found in :data:`_TOKEN_PLACES`), and a
    missing or refused token is one line saying what to set. ``RAY_AUTH_MODE`` set is obeyed as it is (without
    an address, ``ray.init`` itself turns token auth on for a local cluster when a token is found).
    """
    if os.environ.get("RAY_AUTH_MODE") or _accepted(address):
        return
    setup = importlib.import_module("ray._private.authentication.authentication_token_setup")
    banner = logging.getLogger(setup.__name__)  # its "token auth is enabled for this cluster" is a head's banner
    level = banner.level
    banner.setLevel(logging.ERROR)
    try:
        found = setup.maybe_enable_token_auth_if_token_available(warn_if_disabled=False)
    finally:
        banner.setLevel(level)
    if not found:
        raise UsageError(f"the Ray cluster at {address} uses token auth and this process has no token",
                         hint=f"give it the head's token (`ray get-auth-token` on the head prints it): {_TOKEN_PLACES}")
    if not _accepted(address):
        raise UsageError(f"the Ray cluster at {address} refused this process's auth token",
                         hint=f"it must be the head's (`ray get-auth-token` on the head prints it); Ray reads it "
                              f"from {_TOKEN_PLACES}")


def _accepted(address: str) -> bool:
    """Whether the cluster's GCS at ``address`` lets this process in (one request; Ray's C++ client logs its
    refusal on stderr, which is kept off the terminal: the refusal is reported in our words)."""
    _ray()
    raylet = importlib.import_module("ray._raylet")
    refused = importlib.import_module("ray.exceptions").AuthenticationError
    with _stderr_closed():
        try:
            raylet.GcsClient(address=address)
        except refused:
            return False
        except Exception:  # not a refusal (not up yet, not Ray's GCS): ray.init says what it is
            return True
    return True


@contextlib.contextmanager
def _stderr_closed() -> Iterator[None]:
    """Point file descriptor 2 at /dev/null for a moment (C++ code writes there, past ``sys.stderr``)."""
    sys.stderr.flush()
    saved = os.dup(2)
    try:
        with open(os.devnull, "wb") as null:
            os.dup2(null.fileno(), 2)
        yield
    finally:
        os.dup2(saved, 2)
        os.close(saved)


class WorkerLost(ExecutorError):
    """The Ray worker or node doing a step's work died before the work ended.

    ``replays_calls``: every protocol call of the lost attempt was performed and journaled by the coordinator,
    so the next attempt replays them instead of doing them again (the engine reads this attribute).
    """

    replays_calls: ClassVar[bool] = True

    def __init__(self, message: str) -> None:
        super().__init__(message, retryable=True,
                         hint="the step is retried by its retry policy (retries: / runtime.max_retries)")


class ExecutorHost:
    """The Ray actor that runs steps' executor work on one node (see the module docstring).

    It is given the run's executor recipe once, when it is created (and again by Ray when it restarts), and builds
    the executor at its first step, so a recipe that fails on the worker fails that step, saying why.
    """

    def __init__(self, recipe: bytes) -> None:
        self._recipe = recipe
        self._executor: Executor | None = None

    async def perform(self, request: StepRequest, host: str, port: int, token: str) -> None:
        """Let the run's executor do ``request``, its protocol calls sent to the coordinator's channel ``token``."""
        if self._executor is None:
            self._executor = _build(_ray().cloudpickle.loads(self._recipe))
        executor = self._executor
        try:
            session = await RemoteSession.connect(host, port, token)
        except OSError as exc:
            raise ExecutorError(f"the Ray worker cannot reach the coordinator at {host}:{port}: {exc.strerror or exc}",
                                hint="workers connect back to the coordinator's address: open that port to the "
                                     "cluster's nodes", retryable=False) from None
        try:
            await executor.perform(request, session)
            await session.end()  # the coordinator ends the step on this line, not on Ray's reply
        finally:
            await session.aclose()


def _build(recipe: Any) -> Executor:
    """The executor a recipe names: ``("named", name, options)`` is built here; an executor object is used as it is."""
    if isinstance(recipe, Executor):
        return recipe
    _, name, options = recipe
    return create_executor(name, options)


@dataclass(slots=True)
class _Host:
    actor: Any
    busy: int = 0


class RayExecutor(Executor):
    """Runs another executor's work on a Ray cluster (see the module docstring).

    What happens when something fails:

    - a worker (or its node) dies mid-step: Ray restarts the host, and the step's attempt fails with
      :class:`WorkerLost`, retried by the step's retry policy. Every call the lost attempt made was performed and
      journaled *here*, in full, so the engine lets the next attempt replay them (``replays_calls``): nothing
      the lost attempt did is done twice.
    - the coordinator dies: the hosts are its actors and die with it; ``stepline resume`` (with ``--backend
      ray`` or locally) replays the journal as after any crash.
    - a step past its timeout: the engine cancels the step's task here, and the host's task is cancelled on the
      cluster (``ray.cancel``), so an agent process it runs is stopped too.

    Args:
        inner: the run's executor (built here too, to check it can run remotely).
        recipe: how a worker builds it: ``(name, options)`` for a registered executor; None ships ``inner``
            itself (an executor object a program or a test passes in; it must pickle).
        address: the cluster (``ray start``'s address, ``ray://…``); None: ``RAY_ADDRESS``, else a local
            Ray started for this process.
    """

    name: ClassVar[str] = "ray"

    def __init__(self, inner: Executor, *, recipe: tuple[str, dict[str, Any]] | None = None,
                 address: str | None = None) -> None:
        if inner.speaks_for_user:
            raise UsageError(f"executor {inner.name!r} speaks with the person at this terminal and cannot run on a "
                             "Ray worker", hint="run it with --backend local")
        self.inner = inner
        self.address = address
        self._recipe: Any = ("named", *recipe) if recipe is not None else inner
        self._hosts: list[_Host] = []
        self._server: SessionServer | None = None
        self._owns_ray = False

    def _start(self) -> SessionServer:
        """Join (or start) the cluster and place one executor host per live node; once per run."""
        ray = _ray()
        self._owns_ray = _join(self.address)
        try:
            # Pickled here, once: passed by value, it goes with each host's creation and every restart of it.
            recipe = ray.cloudpickle.dumps(self._recipe)
        except Exception as exc:  # whatever the pickler says, the fix is the same
            raise UsageError(f"executor {self.inner.name!r} cannot be sent to Ray workers "
                             f"({type(exc).__name__}: {exc})", hint="use a registered executor by name, or run "
                             "with --backend local") from None
        host_class = ray.remote(max_restarts=-1, max_task_retries=0, num_cpus=0,
                                max_concurrency=10_000)(ExecutorHost)
        for node in ray.nodes():
            if node.get("Alive"):
                strategy = ray.util.scheduling_strategies.NodeAffinitySchedulingStrategy(node["NodeID"], soft=True)
                self._hosts.append(_Host(host_class.options(scheduling_strategy=strategy).remote(recipe)))
        server = SessionServer(ray.util.get_node_ip_address())
        self._server = server
        return server

    async def perform(self, request: StepRequest, session: StepSession) -> None:
        """Send ``request`` to the least busy host and serve its protocol calls here until it ends."""
        server = self._server or self._start()
        await server.start()
        host = min(self._hosts, key=lambda h: h.busy)
        channel = server.open()
        ref = host.actor.perform.remote(request, server.host, server.port, channel.token)
        result: asyncio.Future[Any] = asyncio.wrap_future(ref.future())
        result.add_done_callback(_retrieve)
        host.busy += 1
        try:
            await serve_calls(channel, session, _first_of(channel.ended, result))
            if not channel.ended.done():  # the work raised, or its worker died: Ray says which
                await result
        except asyncio.CancelledError:
            # The step ran out of time or the run stops: its work stops on the cluster too, and is seen to stop
            # (for a while) before the step's end is recorded; the hosts are not torn down under a cancel.
            _ray().cancel(ref)
            await asyncio.wait({result}, timeout=_CANCEL_WAIT)
            raise
        except Exception as exc:  # translated at this one boundary
            raise _translate(exc, channel) from None
        finally:
            host.busy -= 1
            server.close_channel(channel)

    async def aclose(self) -> None:
        """Stop the hosts (they hold nothing of the run), the listener and, if this process started it, Ray."""
        ray = _ray()
        if self._server is not None:
            await self._server.aclose()
            self._server = None
        for host in self._hosts:
            with contextlib.suppress(Exception):  # a host already gone is what we want
                ray.kill(host.actor, no_restart=True)
        self._hosts = []
        if self._owns_ray:
            ray.shutdown()
            self._owns_ray = False
        await self.inner.aclose()


class _PureRayExecutor(RayExecutor):
    """A :class:`RayExecutor` around a pure executor (no effect outside its process: nothing to make durable)."""

    pure: ClassVar[bool] = True


def ray_executor(inner: Executor, *, recipe: tuple[str, dict[str, Any]] | None = None,
                 address: str | None = None) -> RayExecutor:
    """The Ray backend's executor around ``inner`` (pure when ``inner`` is)."""
    cls = _PureRayExecutor if inner.pure else RayExecutor
    return cls(inner, recipe=recipe, address=address)


def check_reachable(address: str | None, timeout: float = 5.0) -> None:
    """Refuse, in one line, a cluster address (``HOST:PORT``, or ``RAY_ADDRESS``) that nothing answers on (Ray
    itself would retry for minutes), or whose token auth turns this process away; join it with token auth when
    it uses that (:func:`_token_auth`). ``ray://`` and ``auto`` addresses are left to Ray."""
    import socket

    address = address or os.environ.get("RAY_ADDRESS")
    if not address or "://" in address or address in ("auto", "local"):
        return
    host, _, port = address.rpartition(":")
    if not host or not port.isdigit():
        raise UsageError(f"Ray address {address!r} is not HOST:PORT",
                         hint="pass what `ray start --head` printed, e.g. --ray-address 10.0.0.5:6379")
    try:
        socket.create_connection((host, int(port)), timeout=timeout).close()
    except OSError as exc:
        raise UsageError(f"cannot reach the Ray cluster at {address}: {exc.strerror or exc}",
                         hint="start it with `ray start --head`, or pass the address it printed to --ray-address"
                         ) from None
    _token_auth(address)


def _ray() -> Any:
    """The ``ray`` module (typed loosely: its own annotations are partial), or a UsageError saying how to get it."""
    try:
        ray = importlib.import_module("ray")
        importlib.import_module("ray.util.scheduling_strategies")
    except ImportError:
        raise UsageError("--backend ray needs Ray, which is not installed", hint=_INSTALL_HINT) from None
    return ray


def _first_of(*futures: asyncio.Future[Any]) -> asyncio.Future[None]:
    """A future done as soon as one of ``futures`` is (they are left as they are)."""
    first: asyncio.Future[None] = asyncio.get_running_loop().create_future()

    def settle(_: asyncio.Future[Any]) -> None:
        if not first.done():
            first.set_result(None)

    for future in futures:
        future.add_done_callback(settle)
    return first


def _retrieve(future: asyncio.Future[Any]) -> None:
    if not future.cancelled():
        future.exception()  # looked at, so a cancelled step's lost result is not logged as never retrieved


def _translate(exc: BaseException, channel: Channel) -> BaseException:
    """What the engine sees of a remote ``perform`` that raised: the coordinator's own exception when the
    worker's error came from a protocol call, the worker's stepline error, or :class:`WorkerLost`."""
    rex = importlib.import_module("ray.exceptions")

    if isinstance(exc, rex.RayTaskError):
        cause = exc.cause
        original = original_failure(channel, cause)
        if original is not None:
            return original
        if isinstance(cause, SteplineError):
            return cause
        return ExecutorError(f"{type(cause).__name__}: {cause} (on a Ray worker)", retryable=True)
    if isinstance(exc, rex.RayActorError | rex.WorkerCrashedError | rex.NodeDiedError | rex.OwnerDiedError
                  | rex.ObjectLostError | rex.LocalRayletDiedError | rex.TaskCancelledError):
        return WorkerLost(f"the Ray worker running the step died ({type(exc).__name__})")
    if isinstance(exc, rex.RayError):
        return ExecutorError(f"Ray failed to run the step: {type(exc).__name__}: {exc}", retryable=True)
    return exc
