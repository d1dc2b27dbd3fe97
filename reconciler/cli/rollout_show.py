"""What the operator sees while a rollout runs: on a terminal a live table of every host
(`render.rollout_live`), redrawn as hosts move; anywhere else (a pipe, cron, a CI log, `-o
FILE`) a line per host step, or with `--format json` a JSON line per host as it ends; then the
canaries' question and the summary.

Hosts of a wave move in parallel threads: each update is taken under one lock, and the table
is drawn from what the lock guards, never while a worker holds it.
"""

from __future__ import annotations

import contextlib
import sys
import threading
import time
from collections.abc import Iterator, Sequence

from rich.console import Console
from rich.live import Live
from rich.table import Table

from ..core.errors import NotConfirmed
from ..core.printable import printable
from ..core.words import counted
from ..render import rollout as render
from ..render.rollout_live import live_table
from ..rollout import journal
from ..rollout.journal import HostEntry, Rollout
from ..rollout.run import RolloutShow
from .consent import confirm
from .output import Output


def rollout_show(rollout: Rollout, yes: bool, out: Output) -> RolloutLines:
    """The live table where `out` is a terminal that redraws (`Output.live`), else lines."""
    if not out.live:
        return RolloutLines(rollout, yes, out)
    console = Console(
        file=out.stream or sys.stdout,
        force_terminal=True,
        color_system="auto" if out.color else None,
        highlight=False,
    )
    return RolloutLive(rollout, yes, out, console)


class RolloutLines(RolloutShow):
    """Lines (text) or JSON lines as hosts move; the canaries' question; the summary."""

    def __init__(self, rollout: Rollout, yes: bool, out: Output) -> None:
        self.rollout = rollout
        self.yes = yes
        self.out = out
        self.lock = threading.Lock()
        self.waiting = out.progress()  # the counts, on a terminal, under the lines

    @contextlib.contextmanager
    def showing(self) -> Iterator[None]:
        """While the rollout runs (lines need nothing around them)."""
        yield

    def changed(self, name: str, entry: HostEntry, step: str) -> None:
        with self.lock:
            self.waiting.clear()
            if not self.out.json:
                self.out.echo(render.host_line(self.rollout, name, step))
            elif step == entry.state and entry.state != journal.IN_FLIGHT:
                self.out.echo(render.json_line(render.host_document(self.rollout, name, step)))
            self.waiting(render.counts_line(self.rollout))

    def pausing(self, seconds: float) -> None:
        if not self.out.json:
            self.out.echo(pause_note(seconds))

    def canaries_verified(self, names: Sequence[str]) -> None:
        self.waiting.clear()
        rest = sum(len(wave) for wave in self.rollout.waves[1:])
        canaries = printable(", ".join(names))  # inventory names
        failed = [n for n in names if self.rollout.hosts[n].state != journal.DONE]
        others = counted(rest, "host")
        if failed:  # within a budget a resume raised: said as it is, still asked
            question = (
                f"Of the canaries {canaries}, {printable(', '.join(failed))} failed, within "
                f"--max-fail. Go on with the other {others}?"
            )
        else:
            question = f"The canaries {canaries} are verified. Go on with the other {others}?"
        try:
            confirm(
                question,
                yes=self.yes,
                command="tune rollout resume",
                err=self.out.json,
                dry_run=False,
            )
        except NotConfirmed:
            raise NotConfirmed(
                f"the canaries {canaries} are done; the other {counted(rest, 'host')} "
                f"{'is' if rest == 1 else 'are'} not "
                f"started: `tune rollout resume {self.rollout.rollout_id} --yes` goes on."
            ) from None

    def summary(self) -> None:
        self.waiting.clear()
        if self.out.json:
            self.out.echo(render.json_line(render.summary_document(self.rollout)))
        else:
            self.out.echo(render.summary(self.rollout), nl=False)


def pause_note(seconds: float) -> str:
    return f"Pausing {seconds:g} s before the next wave."


# The lines of the live table that are not hosts: the blank line above it, the header, its
# rule, the blank line and the two lines of its caption below, and the cursor's line.
CHROME = 7


class RolloutLive(RolloutLines):
    """The table of every host, redrawn as each moves and twice a second for the elapsed
    times; anything else printed meanwhile (a hook's output, a warning) goes above it. It
    stops, its last state left on the screen, before the canaries' question and when the
    rollout ends or is interrupted."""

    def __init__(self, rollout: Rollout, yes: bool, out: Output, console: Console) -> None:
        super().__init__(rollout, yes, out)
        self.steps: dict[str, str] = {}  # each host's last step seen
        self.note: str | None = None
        self.running = False
        self.live = Live(
            console=console,
            get_renderable=self.table,
            refresh_per_second=2,
            auto_refresh=True,
            # A line on the same terminal would break the redraw: rich prints it above the
            # table. Standard error sent elsewhere (2>FILE) stays where it was sent.
            redirect_stderr=sys.stderr.isatty(),
        )

    def table(self) -> Table:
        """What the terminal shows now; called by rich's refresh thread too. While it is
        redrawn, what fits the terminal's height (rich cannot redraw lines scrolled off it);
        the last time, every host."""
        with self.lock:
            rows = self.live.console.height - CHROME if self.running else None
            return live_table(self.rollout, dict(self.steps), self.note, time.time(), rows)

    @contextlib.contextmanager
    def showing(self) -> Iterator[None]:
        self._start()
        try:
            yield
        finally:
            self._stop()

    def _start(self) -> None:
        with self.lock:
            self.running = True
        self.live.start(refresh=True)

    def _stop(self) -> None:
        with self.lock:
            self.running = False
            self.note = None
        self.live.stop()  # draws the table a last time, shows the cursor again

    def _redraw(self) -> None:
        # Outside `self.lock`: rich's refresh holds its own lock, then asks `table` for ours.
        with self.lock:
            running = self.running
        if running:
            self.live.refresh()

    def changed(self, name: str, entry: HostEntry, step: str) -> None:
        with self.lock:
            self.steps[name] = step
            self.note = None  # the next wave began
        self._redraw()

    def pausing(self, seconds: float) -> None:
        with self.lock:
            self.note = pause_note(seconds)
        self._redraw()

    def canaries_verified(self, names: Sequence[str]) -> None:
        self._stop()  # a question under a table being redrawn could not be read
        super().canaries_verified(names)
        self._start()
