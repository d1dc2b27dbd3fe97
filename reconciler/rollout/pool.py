"""A wave's hosts on `--forks` worker threads, however wide the wave: a host waiting for its
reboot holds no thread, and holds its connection only while a spare one is free.

Each host's work is a generator (`rollout.run.roll_host`): it runs on a worker up to the
reboot, then yields `Waiting` and gives the worker back. The calling thread keeps the waiting
hosts by the time of their next poll; a due poll is one more piece of work for the workers,
queued behind the hosts not started yet. A poll that finds the new boot id resumes the host's
generator on the same worker (verify, promote, the hook); a poll that does not puts the host
back to wait. So a wave of 500 hosts starts `forks` threads, not 500.

How a poll waits: on the host (`value_unlike`, reading every `interval` s), for as long as
`poll_window` allows. While the wave has no more hosts left than workers, nobody can queue
behind a poll, and it waits up to `LONG_POLL_S` (a reboot costs a few round trips). With more,
the hosts take turns on the workers, and a poll waits just so long that the turn of a host
queued behind it comes within about one `interval`: a wave a few hosts wider than `--forks`
costs a few round trips a second, not one a host each `interval`; a far wider one, one read a
poll.

Connections: a worker's host has one open (at most `forks`); a waiting host keeps its own
between polls while the open ones stay within `forks + SPARE_CONNECTIONS`, else it is closed
(the least recently parked first) and the next poll connects again. (Over SSH each open
connection also has its transport's thread: paramiko's.)
"""

from __future__ import annotations

import contextlib
import gc
import heapq
import itertools
import queue
import threading
import time
from collections import OrderedDict
from collections.abc import Callable, Generator, Sequence
from dataclasses import dataclass

from ..boot.reboot import LONG_POLL_S, poll_boot_id, reboot_timed_out
from ..core.errors import HostKeyError
from ..hosts.base import Host
from ..hosts.fleet import few_malloc_arenas

# Connections a waiting host may keep open between its polls, beyond one a worker.
SPARE_CONNECTIONS = 8


@dataclass(frozen=True)
class Waiting:
    """What a host's steps yield: wait until `host`'s boot id is no longer `before` (sent back
    as `RebootTimeout`, thrown into the steps, after `timeout` s), reading it every
    `interval` s."""

    host: Host
    before: str | None
    timeout: float
    interval: float


Steps = Generator[Waiting, None, None]


def poll_window(live: int, forks: int, interval: float, left: float) -> float:
    """How long one poll may wait on its host (0: one read), with `live` hosts of the wave not
    ended on `forks` workers and `left` s to the host's deadline. With no more hosts than
    workers, up to `LONG_POLL_S`; with `live - forks` more, each poll holding a worker for `w`
    s keeps the others queued for about `w * (live - forks) / forks` s between their polls:
    `w` is chosen so that this is one `interval` (below one `interval`, one read)."""
    window = min(LONG_POLL_S, left)
    if live > forks:
        window = min(window, interval * forks / (live - forks))
    return window if window >= interval else 0.0


class _Live:
    """One host of the wave: its steps once started, what it waits for."""

    def __init__(self, host: Host, start: Callable[[], Steps]) -> None:
        self.host = host
        self.start = start
        self.steps: Steps | None = None
        self.waiting: Waiting | None = None
        self.deadline = 0.0


def run_pool(
    hosts: Sequence[tuple[Host, Callable[[], Steps]]],
    forks: int,
    *,
    clock: Callable[[], float] = time.monotonic,
) -> None:
    """Each host's steps to their end, `forks` hosts at a time; every host closed at its end.
    A host's own failures are its steps' business (journaled there); anything else one of them
    raises is raised here once every host ended."""
    _Pool(max(1, forks), clock).run([_Live(host, start) for host, start in hosts])


class _Pool:
    def __init__(self, forks: int, clock: Callable[[], float]) -> None:
        self.forks = forks
        self.limit = forks + SPARE_CONNECTIONS
        self.clock = clock
        self.ready: queue.SimpleQueue[_Live | None] = queue.SimpleQueue()
        self.timed: list[tuple[float, int, _Live]] = []  # (due, order, host), a heap
        self.order = itertools.count()
        self.changed = threading.Condition()
        self.live = 0  # hosts not ended
        self.working = 0  # hosts on a worker now
        self.kept: OrderedDict[int, Host] = OrderedDict()  # waiting, connection open
        self.errors: list[BaseException] = []

    def run(self, items: list[_Live]) -> None:
        if not items:
            return
        self.live = len(items)
        for item in items:
            self.ready.put(item)
        workers = min(self.forks, len(items))
        # As `for_each_host` does: what is alive now outlives the wave (kept out of the
        # collector's way), and two malloc arenas, not eight a core.
        freeze = gc.get_freeze_count() == 0
        if freeze:
            gc.freeze()
        if workers > 1:
            few_malloc_arenas()
        for _ in range(workers):
            threading.Thread(target=self._work, daemon=True, name="tune-host").start()
        try:
            with self.changed:
                while self.live:
                    now = self.clock()
                    while self.timed and self.timed[0][0] <= now:
                        self.ready.put(heapq.heappop(self.timed)[2])
                    # A bounded wait keeps this thread responsive to Ctrl-C.
                    wait = min(0.2, self.timed[0][0] - now) if self.timed else 0.2
                    self.changed.wait(max(0.0, wait))
        except KeyboardInterrupt:
            for item in items:
                _close(item.host)
            raise
        finally:
            for _ in range(workers):
                self.ready.put(None)
            if freeze:
                gc.unfreeze()
        if self.errors:
            raise self.errors[0]

    def _work(self) -> None:
        while (item := self.ready.get()) is not None:
            try:
                self._step(item)
            except BaseException as exc:  # not a host's failure (roll_host journals those)
                with self.changed:
                    self.errors.append(exc)
                self._end(item)

    def _step(self, item: _Live) -> None:
        with self.changed:
            self.working += 1
            self.kept.pop(id(item), None)
            self._room()
        try:
            if item.steps is None:
                item.steps = item.start()
                self._advance(item, None)
                return
            waiting = item.waiting
            assert waiting is not None
            with self.changed:
                live = self.live
            tried = self.clock()
            within = poll_window(live, self.forks, waiting.interval, item.deadline - tried)
            try:
                now = poll_boot_id(waiting.host, waiting.before, within, waiting.interval)
            except HostKeyError as exc:
                self._advance(item, exc)
                return
            if now is not None:
                self._advance(item, None)
            elif self.clock() >= item.deadline:
                self._advance(item, reboot_timed_out(waiting.host, waiting.timeout))
            else:
                self._park(item, tried + waiting.interval)
        finally:
            with self.changed:
                self.working -= 1

    def _advance(self, item: _Live, error: BaseException | None) -> None:
        """The host's steps on to their next wait, or their end."""
        assert item.steps is not None
        try:
            waiting = item.steps.throw(error) if error is not None else next(item.steps)
        except StopIteration:
            self._end(item)
            return
        item.waiting = waiting
        item.deadline = self.clock() + waiting.timeout
        self._park(item, self.clock() + waiting.interval)

    def _park(self, item: _Live, due: float) -> None:
        with self.changed:
            # This host's worker is about to be free: it counts among the kept if it stays open.
            if self.working - 1 + len(self.kept) < self.limit:
                self.kept[id(item)] = item.host
            else:
                _close(item.host)
            heapq.heappush(self.timed, (due, next(self.order), item))
            self.changed.notify()

    def _room(self) -> None:
        """Under `changed`: a worker's host may connect; close waiting hosts' connections
        (the longest kept first) until that stays within the limit."""
        while self.kept and self.working + len(self.kept) > self.limit:
            _, host = self.kept.popitem(last=False)
            _close(host)

    def _end(self, item: _Live) -> None:
        _close(item.host)
        with self.changed:
            self.kept.pop(id(item), None)
            self.live -= 1
            self.changed.notify()


def _close(host: Host) -> None:
    with contextlib.suppress(Exception):  # closing what may be broken already
        host.close()
