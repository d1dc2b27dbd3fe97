"""The rollout's live table on a terminal: its rows as hosts move, from many threads at once;
a host's text shown as text; Ctrl-C leaves the terminal sane and the journal as it was; when
the table is drawn at all (`Output.live`) against when colour is."""

from __future__ import annotations

import io
import sys
import threading
from pathlib import Path

import pytest
from rich.console import Console
from rich.text import Text

from reconciler.cli.output import Output
from reconciler.cli.rollout_show import RolloutLines, RolloutLive, rollout_show
from reconciler.rollout import journal
from reconciler.rollout.journal import HostEntry, Rollout

SHOW_CURSOR = "\x1b[?25h"
ERASE_LINE = "\x1b[2K"  # how rich redraws the table in place


class Terminal(io.StringIO):
    def isatty(self) -> bool:
        return True


def new_rollout(waves: list[list[str]]) -> Rollout:
    rollout = Rollout(
        rollout_id=journal.new_rollout_id(),
        profile="/p.yaml",
        digest="0" * 64,
        options={},
        waves=waves,
        hosts={name: HostEntry(wave=i) for i, wave in enumerate(waves) for name in wave},
    )
    rollout.save()
    return rollout


def live(
    rollout: Rollout, color: bool = False, height: int = 50
) -> tuple[RolloutLive, io.StringIO]:
    screen = io.StringIO()
    console = Console(
        file=screen,
        force_terminal=True,
        width=120,
        height=height,
        color_system="standard" if color else None,
    )
    out = Output("text", color_choice="always" if color else "never", stream=screen)
    return RolloutLive(rollout, True, out, console), screen


def rows(show: RolloutLive) -> list[tuple[str, ...]]:
    """The table as the terminal shows it now: (wave, host, state, elapsed, message)."""
    columns = [[plain(cell) for cell in column.cells] for column in show.table().columns]
    return list(zip(*columns, strict=True))


def plain(cell: object) -> str:
    assert isinstance(cell, Text)  # never a string rich would read as markup
    return cell.plain


def caption(show: RolloutLive) -> str:
    return plain(show.table().caption)


def without_elapsed(show: RolloutLive) -> list[tuple[str, ...]]:
    return [(wave, host, state, message) for wave, host, state, _, message in rows(show)]


def test_the_table_shows_every_host_as_it_moves() -> None:
    rollout = new_rollout([["h3"], ["h1", "h2"]])
    show, screen = live(rollout)
    with show.showing():
        assert without_elapsed(show) == [
            ("1", "h3", "not-started", ""),
            ("2", "h1", "not-started", ""),
            ("2", "h2", "not-started", ""),
        ]
        show.changed("h3", rollout.hosts["h3"], "applying")
        assert rows(show)[0] == ("1", "h3", "applying", "-", "applying the profile")
        entry = rollout.update("h3", state=journal.IN_FLIGHT, started=100.0, rebooting=True)
        show.changed("h3", entry, "rebooting")
        assert rows(show)[0][2:5:2] == ("rebooting", "rebooting: waiting for a new boot id")
        show.changed("h3", entry, "verifying")
        assert rows(show)[0][2] == "verifying"
        entry = rollout.update("h3", state=journal.DONE, configuration="new", finished=112.5)
        show.changed("h3", entry, journal.DONE)
        show.pausing(30)
        assert rows(show)[0] == ("1", "h3", "done", "12.5s", "on the new configuration")
        assert "Pausing 30 s before the next wave." in caption(show)
        show.changed("h1", rollout.hosts["h1"], "applying")
        assert "Pausing" not in caption(show)
        why = "the new boot lacks processor.max_cstate=1: rolled back."
        entry = rollout.update("h1", state=journal.ROLLED_BACK, why=why, started=1.0, finished=2.0)
        show.changed("h1", entry, journal.ROLLED_BACK)
        assert rows(show)[1] == ("2", "h1", "rolled-back", "1.0s", why)
        assert "1 not-started, 1 done, 1 rolled-back" in caption(show)
    final = screen.getvalue()
    assert final.endswith(SHOW_CURSOR) and ERASE_LINE in final
    last = final.split("WAVE")[-1]  # the last frame drawn
    assert "h3" in last and "on the new configuration" in last and why in last


@pytest.mark.slow
def test_hosts_moving_in_parallel_threads_all_reach_the_table() -> None:
    names = [f"h{n}" for n in range(40)]
    rollout = new_rollout([names])
    show, _ = live(rollout)
    steps = ("applying", "rebooting", "verifying")

    def host(name: str) -> None:
        for step in steps:
            show.changed(name, rollout.hosts[name], step)
        entry = rollout.update(name, state=journal.DONE, configuration="new")
        show.changed(name, entry, journal.DONE)

    def rollout_run() -> None:
        with show.showing():
            workers = [threading.Thread(target=host, args=(name,)) for name in names]
            for worker in workers:
                worker.start()
            for worker in workers:
                worker.join()

    # A daemon, so that a deadlock fails the test instead of hanging it.
    runner = threading.Thread(target=rollout_run, daemon=True)
    runner.start()
    runner.join(timeout=30)
    assert not runner.is_alive(), "a redraw deadlocked"
    assert {row[2] for row in rows(show)} == {"done"}


def test_a_fleet_taller_than_the_terminal_leaves_out_hosts_done_then_the_last_waiting() -> None:
    names = [f"h{n:02}" for n in range(10)]
    rollout = new_rollout([names[:4], names[4:]])
    show, screen = live(rollout, height=12)  # room for 5 rows of hosts
    with show.showing():
        for name in names[:3]:
            show.changed(name, rollout.update(name, state=journal.DONE), journal.DONE)
        show.changed("h03", rollout.update("h03", state=journal.IN_FLIGHT), "rebooting")
        assert [row[1] for row in rows(show)] == ["h03", "h04", "h05", "h06", "6 more"]
        assert rows(show)[-1][2] == "3 done, 3 not-started"
    last = screen.getvalue().split("WAVE")[-1]  # the last frame: every host
    assert all(name in last for name in names) and "more" not in last


def test_a_hosts_text_is_shown_as_text_never_as_markup_or_escapes() -> None:
    rollout = new_rollout([["h1"]])
    show, screen = live(rollout)
    entry = rollout.update("h1", state=journal.FAILED, why="[bold]x[/] [link=http://e]y \x1b[2J")
    with show.showing():
        show.changed("h1", entry, journal.FAILED)
    assert rows(show)[0][4] == "[bold]x[/] [link=http://e]y \\x1b[2J"
    assert "[bold]x[/]" in screen.getvalue() and "\x1b[2J" not in screen.getvalue()


def test_ctrl_c_leaves_the_cursor_shown_the_last_table_drawn_and_the_journal_as_it_was() -> None:
    rollout = new_rollout([["h1", "h2"]])
    entry = rollout.update("h1", state=journal.IN_FLIGHT, rebooting=True, started=1.0)
    assert rollout.path is not None
    journaled = rollout.path.read_bytes()
    show, screen = live(rollout)
    with pytest.raises(KeyboardInterrupt), show.showing():
        show.changed("h1", entry, "rebooting")
        raise KeyboardInterrupt
    drawn = screen.getvalue()
    assert drawn.endswith(SHOW_CURSOR)
    assert "rebooting: waiting for a new boot id" in drawn.split("WAVE")[-1]
    show.changed("h2", rollout.hosts["h2"], "applying")  # a worker thread still running
    assert screen.getvalue() == drawn, "nothing is drawn once the table stopped"
    assert rollout.path.read_bytes() == journaled


def test_colour_follows_color_and_the_table_is_redrawn_without_it() -> None:
    rollout = new_rollout([["h1"]])
    entry = rollout.update("h1", state=journal.DONE)
    for color in (False, True):
        show, screen = live(rollout, color=color)
        with show.showing():
            show.changed("h1", entry, journal.DONE)
        assert ERASE_LINE in screen.getvalue()
        assert ("\x1b[32m" in screen.getvalue()) is color  # done, in green


@pytest.mark.parametrize("same_terminal", [True, False])
def test_what_is_said_on_standard_error_goes_above_the_table_only_on_the_same_terminal(
    same_terminal: bool, monkeypatch: pytest.MonkeyPatch
) -> None:
    errors = Terminal() if same_terminal else io.StringIO()  # else 2>FILE
    monkeypatch.setattr("sys.stderr", errors)
    rollout = new_rollout([["h1"]])
    show, screen = live(rollout)
    with show.showing():
        print("drained h1", file=sys.stderr)  # a hook's output
        show.changed("h1", rollout.hosts["h1"], "applying")
    assert ("drained h1" in screen.getvalue()) is same_terminal
    assert ("drained h1" in errors.getvalue()) is not same_terminal


@pytest.mark.parametrize(
    ("fmt", "path", "stream", "env", "redrawn"),
    [
        ("text", None, Terminal, {}, True),
        ("text", None, Terminal, {"NO_COLOR": "1"}, True),  # colour only: the table stays
        ("text", None, Terminal, {"TERM": "dumb"}, False),  # cannot move its cursor
        ("text", None, io.StringIO, {}, False),  # a pipe, cron, a CI log
        ("json", None, Terminal, {}, False),
        ("text", "report.txt", Terminal, {}, False),
    ],
)
def test_the_table_is_drawn_only_on_a_terminal_that_can_redraw_it(
    fmt: str,
    path: str | None,
    stream: type[io.StringIO],
    env: dict[str, str],
    redrawn: bool,
    monkeypatch: pytest.MonkeyPatch,
    tmp_path: Path,
) -> None:
    monkeypatch.setenv("TERM", "xterm")
    for name, value in env.items():
        monkeypatch.setenv(name, value)
    out = Output(fmt, str(tmp_path / path) if path else None, stream=stream())
    show = rollout_show(new_rollout([["h1"]]), True, out)
    assert isinstance(show, RolloutLive) is redrawn
    assert isinstance(show, RolloutLines)
