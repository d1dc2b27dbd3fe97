"""`/var/lib/tune/status.json`: what an engine reads of tune, read back strictly."""

from __future__ import annotations

import pytest

from reconciler.steps.records import RecordError
from reconciler.steps.status import Status, Verification


def test_a_status_reads_back_as_written() -> None:
    status = Status(
        profile="blackwell-8x",
        profile_digest="sha256:ab",
        in_sync=False,
        drift=3,
        reboot_pending=True,
        armed=True,
        pending_run="20261207T000000Z-abcdef",
        last_verification=Verification("boot", "run", "held", "2026-12-07T00:00:00Z"),
    )
    assert Status.from_json(status.to_json()) == status


def test_fields_a_newer_tune_wrote_are_kept_and_ignored() -> None:
    status = Status.from_json('{"in_sync": true, "nodes": [1]}')
    assert status.in_sync is True
    assert status.extra == {"nodes": [1]}
    assert '"nodes": [\n    1\n  ]' in status.to_json()


@pytest.mark.parametrize(
    "text",
    [
        "not json",
        "[]",
        '{"in_sync": "yes"}',
        '{"drift": "3"}',
        '{"last_verification": {"boot_id": "b"}}',
        '{"armed": null}',
    ],
)
def test_a_status_tune_did_not_write_is_refused(text: str) -> None:
    with pytest.raises(RecordError):
        Status.from_json(text)
