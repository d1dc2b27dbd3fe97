"""An Ansible callback for tune's tests: every task result of every host, one JSON line each, in
the file `TUNE_ANSIBLE_RECORD` names (ansible-core ships no JSON callback of its own)."""

from __future__ import annotations

import json
import os
import time
from typing import Any

from ansible.plugins.callback import CallbackBase


class CallbackModule(CallbackBase):  # type: ignore[misc]
    CALLBACK_VERSION = 2.0
    CALLBACK_TYPE = "aggregate"
    CALLBACK_NAME = "record"
    CALLBACK_NEEDS_ENABLED = True

    def _record(self, result: Any, status: str) -> None:
        line = {
            "host": result._host.get_name(),
            "task": result._task.get_name(),
            "status": status,
            "result": result._result,
            "at": time.time(),
        }
        with open(os.environ["TUNE_ANSIBLE_RECORD"], "a") as out:
            out.write(json.dumps(line, default=str) + "\n")

    def v2_runner_on_ok(self, result: Any) -> None:
        self._record(result, "ok")

    def v2_runner_on_failed(self, result: Any, ignore_errors: bool = False) -> None:
        self._record(result, "failed")

    def v2_runner_on_skipped(self, result: Any) -> None:
        self._record(result, "skipped")

    def v2_runner_on_unreachable(self, result: Any) -> None:
        self._record(result, "unreachable")
