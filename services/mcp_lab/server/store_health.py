"""Whether the lab's store (Redis) answers and takes writes, as the server sees it.

One probe, on a connection of its own, writes a no-op to Redis every
``PROBE_EVERY_SECONDS`` (``SET <replica heartbeat> 1 XX KEEPTTL``: it never creates
the key nor extends it, and Redis refuses it when full, as it refuses any write)
and waits at most ``ANSWER_SECONDS`` for the answer. The store is then:

- ``ok``: it answered and took the write;
- ``unreachable``: it did not answer in time (frozen, hung) or refused the
  connection (down);
- ``full``: it answered, refusing the write for want of memory (``maxmemory``,
  ``noeviction``).

While the store does not answer, the Redis work of a request
(:meth:`StoreHealth.bounded`) fails with :class:`mcp_lab.state.StoreUnavailable`
after at most ``_THAW_GRACE_SECONDS`` (it waits that long for the probe out on
Redis: a Redis that just woke up answers it at once), and work already waiting on
Redis when the probe finds it so is released with that error: no request waits
longer than ``ANSWER_SECONDS`` plus one probe interval for a store that does not
answer. (Work meeting a refused connection fails at once by itself, and is let try:
it works again as soon as Redis is back.) Each change of state is one log line
(``[lab] redis not answering ...``, ``[lab] redis is full ...``, ``[lab] redis answers
again after N s ...``), where each failed request used to log its own error and
FastMCP a traceback of it (:class:`QuietStoreErrors`).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from collections.abc import AsyncIterator, Callable
from typing import Any

from redis.asyncio import Redis
from redis.asyncio.client import Pipeline
from redis.exceptions import OutOfMemoryError, RedisError

from mcp_lab import contract, state
from mcp_lab.process.writer import BatchWriter, Commands

logger = logging.getLogger("mcp_lab.server")

# The longest the lab waits for its store to answer before it says the store did not.
ANSWER_SECONDS = 2.0
# How often the probe writes while the store is fine (and while it is not).
PROBE_EVERY_SECONDS = 0.5

# How often it probes while the store is out, and how late a probe's timeout may
# fire before it is taken for this process standing still rather than Redis.
_OUT_EVERY_SECONDS = 0.05
_STOOD_STILL_SECONDS = 1.0
# How long work that comes while the store does not answer waits for the probe out
# on it (a Redis that just woke up answers it at once) before it is refused.
_THAW_GRACE_SECONDS = 0.25

OK = "ok"
UNREACHABLE = "unreachable"
FULL = "full"


class StoreHealth:
    """The store's state as the last probe found it, and the bound on waiting for it.

    ``url`` None: never probed, always ``ok`` (a lab built without its lifespan).
    """

    def __init__(
        self,
        url: str | None,
        replica: str = "",
        *,
        answer_seconds: float = ANSWER_SECONDS,
        every_seconds: float = PROBE_EVERY_SECONDS,
    ) -> None:
        self._url = url
        self._key = contract.replica_heartbeat_key(replica)
        self.answer_seconds = answer_seconds
        self._every = every_seconds
        self._lost: Callable[[], int] = lambda: 0
        self.state = OK
        self.reason = ""
        # When the current outage began (time.monotonic()), and the lost count then.
        self._since: float | None = None
        self._lost_before = 0
        # Outages so far and the seconds of those that ended (for /healthz to show).
        self.outages = 0
        self.outage_seconds = 0.0
        self._waiting: set[asyncio.Timeout] = set()
        # Set (and replaced) after each probe (see current).
        self._probed = asyncio.Event()

    def count_lost(self, lost: Callable[[], int]) -> None:
        """How many evidence events were lost so far (the recorder's count): the line
        at an outage's end says how many it cost."""
        self._lost = lost

    def down_for(self) -> float:
        """Seconds the current outage has lasted (0 when the store is fine)."""
        return 0.0 if self._since is None else time.monotonic() - self._since

    def unavailable(self) -> state.StoreUnavailable:
        """The error of Redis work refused or abandoned while the store is unreachable."""
        if self.reason.startswith("did not answer"):
            return state.StoreUnavailable(f"it {self.reason}")
        return state.StoreUnavailable(f"it is unreachable ({self.reason})")

    @property
    def frozen(self) -> bool:
        """Unreachable for want of an answer (not a refused connection, which fails
        any work at once by itself: that work is let try, and works as soon as
        Redis is back)."""
        return self.state == UNREACHABLE and self.reason.startswith("did not answer")

    async def current(self) -> str:
        """The store's state: at once when it is not ``ok``, else as the next probe
        finds it (within ``answer_seconds`` plus a probe interval): a freeze that
        began since the last probe is told."""
        if self.state != OK or self._url is None:
            return self.state
        if await self._next_probe(self.answer_seconds + self._every + 0.5):
            return self.state
        return UNREACHABLE

    async def _next_probe(self, seconds: float) -> bool:
        """Wait up to ``seconds`` for the next probe's finding; whether it came."""
        if self._url is None:
            return False
        probed = self._probed
        with contextlib.suppress(TimeoutError):
            async with asyncio.timeout(seconds):
                await probed.wait()
            return True
        return False

    @contextlib.asynccontextmanager
    async def bounded(self) -> AsyncIterator[None]:
        """Run the block's Redis work: refused at once while the store does not answer,
        and cut short (:class:`mcp_lab.state.StoreUnavailable`) as soon as the probe
        finds it not answering."""
        if self.frozen:
            # Redis may have just woken up: the probe waiting on it hears so at once.
            await self._next_probe(_THAW_GRACE_SECONDS)
            if self.frozen:
                raise self.unavailable()
        scope = asyncio.timeout(None)
        try:
            async with scope:
                self._waiting.add(scope)
                try:
                    yield
                finally:
                    self._waiting.discard(scope)
        except TimeoutError:
            if scope.expired():
                raise self.unavailable() from None
            raise

    async def run(self) -> None:
        """Probe until cancelled."""
        if self._url is None:
            return
        client = state.connect(
            self._url,
            socket_timeout=self.answer_seconds,
            max_connections=4,
            pool_timeout=self.answer_seconds,
        )
        try:
            while True:
                found, reason = await self.probe(client)
                self.note(found, reason)
                self._probed.set()
                self._probed = asyncio.Event()
                # While it is out, a probe is nearly always waiting on it: its answer
                # as Redis comes back ends the outage at once.
                await asyncio.sleep(self._every if found == OK else _OUT_EVERY_SECONDS)
        finally:
            with contextlib.suppress(RedisError, OSError, asyncio.CancelledError):
                await client.aclose()

    async def probe(self, client: Redis) -> tuple[str, str]:
        """One probe: the store's state and, when it is not ``ok``, why. A probe that
        ran out of time because this process itself stood still (stopped, or its
        loop blocked) says nothing of Redis: it is made again."""
        while True:
            start = asyncio.get_running_loop().time()
            try:
                async with asyncio.timeout(self.answer_seconds):
                    await client.set(self._key, "1", xx=True, keepttl=True)
            except OutOfMemoryError as exc:
                return FULL, str(exc)
            except (RedisError, OSError) as exc:  # TimeoutError is an OSError
                timed_out = isinstance(exc, TimeoutError) or "timeout" in str(exc).lower()
                if not timed_out:
                    return UNREACHABLE, str(exc) or type(exc).__name__
                late = asyncio.get_running_loop().time() - start - self.answer_seconds
                if late > _STOOD_STILL_SECONDS:
                    continue
                return UNREACHABLE, f"did not answer within {self.answer_seconds:g} s"
            return OK, ""

    def note(self, found: str, reason: str = "") -> None:
        """Take the probe's finding: release the waiting work when unreachable, and
        log once per change of state."""
        before = self.state
        self.state, self.reason = found, reason
        if self.frozen:
            loop = asyncio.get_running_loop()
            for scope in list(self._waiting):
                scope.reschedule(loop.time())
        if found == before:
            return
        if before == OK:
            self._since = time.monotonic()
            self._lost_before = self._lost()
            self.outages += 1
        if found == UNREACHABLE:
            logger.error(
                "[lab] redis not answering (%s): requests that need it get an error "
                "within %g s, and evidence is counted as lost, until it answers",
                reason,
                self.answer_seconds + self._every,
            )
        elif found == FULL:
            logger.error(
                "[lab] redis is full (%s): subscribes are refused and evidence is counted "
                "as lost until memory is freed",
                reason,
            )
        else:
            seconds = self.down_for()
            self.outage_seconds += seconds
            self._since = None
            what = "answers" if before == UNREACHABLE else "takes writes"
            logger.warning(
                "[lab] redis %s again after %.1f s %s; %d evidence event(s) not recorded meanwhile",
                what,
                seconds,
                "unreachable" if before == UNREACHABLE else "full",
                max(0, self._lost() - self._lost_before),
            )


class GuardedWriter(BatchWriter):
    """The server's batch writer, bounded by ``health`` (see :meth:`StoreHealth.bounded`):
    a write refused or cut short while the store is unreachable adds nothing to a
    later pipeline (a subscribe refused then leaves no subscriber nor job behind)."""

    def __init__(self, redis: Redis, health: StoreHealth, **kwargs: Any) -> None:
        super().__init__(redis, **kwargs)
        self._health = health

    async def submit(self, commands: Commands, *, urgent: bool = False) -> list[Any]:
        given_up = False

        def unless_given_up(pipe: Pipeline) -> int:
            return 0 if given_up else commands(pipe)

        try:
            async with self._health.bounded():
                return await super().submit(unless_given_up, urgent=urgent)
        except BaseException:
            given_up = True
            raise


class HealthPing(Redis):
    """A client on the lab's pool whose ``PING`` answers from the probe
    (:meth:`StoreHealth.current`): ``True`` while the store is ``ok``,
    :class:`mcp_lab.state.StoreUnavailable` while it is unreachable or full.
    ``/healthz`` pings it, so it answers within the bound and says ``degraded`` for
    a full store too."""

    def __init__(self, redis: Redis, health: StoreHealth) -> None:
        super().__init__(connection_pool=redis.connection_pool)
        self._health = health

    async def ping(self, **kwargs: Any) -> bool:
        health = self._health
        found = await health.current()
        if found == FULL:
            raise state.StoreUnavailable(f"the lab's store (Redis) is full: {health.reason}")
        if found == UNREACHABLE:
            raise health.unavailable()
        return True


class QuietStoreErrors(logging.Filter):
    """Drops the traceback FastMCP logs for a resource read that failed because the
    store was unreachable or full: the outage has its own log lines, and the read's
    error is the client's answer (it logged ~140 lines per failed read)."""

    def filter(self, record: logging.LogRecord) -> bool:
        error = record.exc_info[1] if record.exc_info else None
        return not (error is not None and getattr(error, STORE_ERROR, False))


# Set on the MCPError a client gets for a store outage (service.redis_failed).
STORE_ERROR = "mcp_lab_store_error"


def quiet_store_errors() -> None:
    """Install :class:`QuietStoreErrors` on FastMCP's server logger (once)."""
    fastmcp_server = logging.getLogger("fastmcp.server.server")
    if not any(isinstance(f, QuietStoreErrors) for f in fastmcp_server.filters):
        fastmcp_server.addFilter(QuietStoreErrors())
