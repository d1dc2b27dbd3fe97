"""The fleet runner: every host gets a result, in order; one host's failure touches no other."""

from __future__ import annotations

import threading

import pytest

from reconciler.errors import HostError
from reconciler.fleet import HostResult, fleet_exit_code, for_each_host
from reconciler.host import Files, Host, Request


class CountingHost(Host):
    def __init__(self, name: str, fails: bool = False) -> None:
        self.name = name
        self.fails = fails
        self.closed = 0

    def fetch(self, request: Request) -> Files:
        if self.fails:
            raise HostError(f"{self.name}: cannot connect to {self.name}:22: connection refused.")
        return Files(contents={"/proc/sys/kernel/hostname": self.name.encode()})

    def close(self) -> None:
        self.closed += 1


def test_results_keep_host_order_and_failures_stay_with_their_host() -> None:
    hosts = [CountingHost(f"h{n}", fails=n in (2, 5)) for n in range(8)]
    results = for_each_host(hosts, lambda h: h.fetch(Request()).value("/proc/sys/kernel/hostname"))
    assert [r.name for r in results] == [h.name for h in hosts]
    assert [r.value for r in results] == ["h0", "h1", None, "h3", "h4", None, "h6", "h7"]
    assert [str(r.error) for r in results if r.error] == [
        "h2: cannot connect to h2:22: connection refused.",
        "h5: cannot connect to h5:22: connection refused.",
    ]
    assert all(h.closed == 1 for h in hosts), "every host is closed after its work, failed or not"


def test_no_more_than_forks_hosts_run_at_once() -> None:
    running, most = 0, 0
    lock = threading.Lock()
    gate = threading.Barrier(3, timeout=60)

    def work(host: CountingHost) -> str:
        nonlocal running, most
        with lock:
            running += 1
            most = max(most, running)
        gate.wait()  # three at a time must be possible, or this deadlocks (and times out)
        with lock:
            running -= 1
        return host.name

    results = for_each_host([CountingHost(f"h{n}") for n in range(9)], work, forks=3)
    assert [r.value for r in results] == [f"h{n}" for n in range(9)]
    assert most == 3


def test_a_bug_on_one_host_is_that_host_s_error() -> None:
    def work(host: CountingHost) -> int:
        return 1 // (host.name != "h1")

    results = for_each_host([CountingHost("h0"), CountingHost("h1")], work)
    assert results[0].value == 1
    assert "internal error: ZeroDivisionError" in str(results[1].error)


def test_progress_counts_every_host_once() -> None:
    seen: list[tuple[int, int]] = []
    for_each_host(
        [CountingHost(f"h{n}") for n in range(5)], lambda h: 0, progress=lambda *a: seen.append(a)
    )
    assert sorted(seen) == [(n, 5) for n in range(1, 6)]


@pytest.mark.parametrize(
    ("values", "failed", "code"),
    [([True, True], False, 0), ([True, False], False, 2), ([False, True], True, 1), ([], False, 0)],
)
def test_fleet_exit_code(values: list[bool], failed: bool, code: int) -> None:
    results: list[HostResult[bool]] = [HostResult(f"h{n}", value=v) for n, v in enumerate(values)]
    if failed:
        results.append(HostResult("down", error=HostError("down: connection refused.")))
    assert fleet_exit_code(results, clean=lambda clean: clean) == code
