"""sysfs: attributes by path or glob; choice files compare by their selected option.

Cases of a host's files in and a plan out are data, in tests/kinds/sysfs/ (`test_kinds_data`);
what stays here are tables of values, the example hosts and behaviour.
"""

from __future__ import annotations

from pathlib import Path

from conftest import TUNED, UNTUNED, by_id, plan_json

THP = "/sys/kernel/mm/transparent_hugepage/enabled"


def test_example_host_thp_is_always(tmp_path: Path) -> None:
    text = f"name: t\nsysfs:\n  {THP}: madvise\n"
    assert by_id(plan_json(tmp_path, UNTUNED, text))[f"sysfs:{THP}"]["current"] == "always"
    assert plan_json(tmp_path, TUNED, text)["code"] == 0
