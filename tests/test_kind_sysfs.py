"""sysfs: attributes by path or glob; choice files compare by their selected option."""

from __future__ import annotations

from pathlib import Path

from conftest import TUNED, UNTUNED, by_id, notes, plan_json, write

THP = "/sys/kernel/mm/transparent_hugepage/enabled"


def test_choice_file_compares_by_the_selected_option(tmp_path: Path) -> None:
    root = tmp_path / "host"
    write(root, THP, "always [madvise] never\n")
    plan = plan_json(tmp_path, root, f"name: t\nsysfs:\n  {THP}: madvise\n")
    assert plan["code"] == 0
    write(root, THP, "[always] madvise never\n")
    plan = plan_json(tmp_path, root, f"name: t\nsysfs:\n  {THP}: madvise\n")
    assert plan["code"] == 2
    change = by_id(plan)[f"sysfs:{THP}"]
    assert (change["current"], change["desired"]) == ("always", "madvise")


def test_example_host_thp_is_always(tmp_path: Path) -> None:
    text = f"name: t\nsysfs:\n  {THP}: madvise\n"
    assert by_id(plan_json(tmp_path, UNTUNED, text))[f"sysfs:{THP}"]["current"] == "always"
    assert plan_json(tmp_path, TUNED, text)["code"] == 0


def test_glob_gives_one_change_per_matched_path(tmp_path: Path) -> None:
    root = tmp_path / "host"
    write(root, "/sys/block/nvme0n1/queue/scheduler", "[none] mq-deadline kyber\n")
    write(root, "/sys/block/nvme1n1/queue/scheduler", "none [mq-deadline] kyber\n")
    write(root, "/sys/block/nvme2n1/queue/scheduler", "none [mq-deadline] kyber\n")
    write(root, "/sys/block/sda/queue/scheduler", "[mq-deadline] none\n")
    plan = plan_json(tmp_path, root, "name: t\nsysfs:\n  /sys/block/nvme*/queue/scheduler: none\n")
    assert plan["code"] == 2
    assert sorted(by_id(plan)) == [
        "sysfs:/sys/block/nvme1n1/queue/scheduler",
        "sysfs:/sys/block/nvme2n1/queue/scheduler",
    ]
    assert {c["current"] for c in plan["changes"]} == {"mq-deadline"}


def test_glob_never_crosses_a_slash(tmp_path: Path) -> None:
    root = tmp_path / "host"
    write(root, "/sys/block/nvme0n1/queue/scheduler", "[none]\n")
    write(root, "/sys/block/nvme0n1/nvme0n1p1/queue/scheduler", "[mq-deadline]\n")
    plan = plan_json(tmp_path, root, "name: t\nsysfs:\n  /sys/block/*/queue/scheduler: none\n")
    assert plan["code"] == 0


def test_glob_matching_nothing_is_one_change_from_none(tmp_path: Path) -> None:
    root = tmp_path / "host"
    write(root, "/sys/block/sda/queue/scheduler", "[mq-deadline] none\n")
    pattern = "/sys/block/nvme*/queue/scheduler"
    plan = plan_json(tmp_path, root, f"name: t\nsysfs:\n  {pattern}: none\n")
    assert plan["code"] == 2
    assert plan["changes"] == [
        {
            "id": f"sysfs:{pattern}",
            "kind": "sysfs",
            "target": pattern,
            "current": None,
            "desired": "none",
            "phase": "runtime",
            "priority": "P1",
            "reason": "",
        }
    ]
    [note] = notes(plan)
    assert note.endswith(f"{pattern} matches nothing on this host.")
    assert note.startswith(f"{tmp_path / 'p.yaml'}:3:")


def test_missing_plain_path_is_a_change_from_none(tmp_path: Path) -> None:
    root = tmp_path / "host"
    write(root, "/sys/kernel/mm/ksm/run", "0\n")
    plan = plan_json(tmp_path, root, f"name: t\nsysfs:\n  {THP}: never\n")
    assert by_id(plan)[f"sysfs:{THP}"]["current"] is None
    assert any(n.endswith(f"{THP} does not exist on this host.") for n in notes(plan))


def test_plain_numbers_normalise_like_sysctls(tmp_path: Path) -> None:
    root = tmp_path / "host"
    pages = "/sys/kernel/mm/transparent_hugepage/khugepaged/pages_to_scan"
    write(root, pages, "4096\n")
    plan = plan_json(tmp_path, root, f"name: t\nsysfs:\n  {pages}: '0x1000'\n")
    assert plan["code"] == 0
