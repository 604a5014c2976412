"""Progress where a person waits: plain lines in a log (no TTY), a rich bar on a terminal."""

from __future__ import annotations

import io
import logging

import pytest

from swarmnode.learn import progress as progress_mod
from swarmnode.learn.progress import progress


def test_plain_lines_without_a_terminal(
    caplog: pytest.LogCaptureFixture, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(progress_mod, "on_terminal", lambda: False)
    monkeypatch.setattr(progress_mod, "LOG_EVERY_S", 0.0)  # a line per step
    with (
        caplog.at_level(logging.INFO, "swarmnode.learn.progress"),
        progress("evaluating", 4) as step,
    ):
        step(2)
        step(2)
    lines = [r.getMessage() for r in caplog.records]
    assert lines[0] == "evaluating: 0/4 items"
    assert lines[1].startswith("evaluating: 2/4 items (50%")
    assert lines[-1].startswith("evaluating: 4/4 items in ") and len(lines) == 3


def test_the_last_line_is_logged_when_the_work_fails(
    caplog: pytest.LogCaptureFixture, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(progress_mod, "on_terminal", lambda: False)
    with (
        caplog.at_level(logging.INFO, "swarmnode.learn.progress"),
        pytest.raises(RuntimeError),
        progress("dequantizing", 3, "steps") as step,
    ):
        step(1)
        raise RuntimeError("boom")
    assert caplog.records[-1].getMessage().startswith("dequantizing: 1/3 steps in ")


def test_a_bar_on_a_terminal(monkeypatch: pytest.MonkeyPatch) -> None:
    out = io.StringIO()
    monkeypatch.setattr(progress_mod, "on_terminal", lambda: True)
    monkeypatch.setattr(progress_mod.sys, "stderr", out)
    with progress("evaluating", 10) as step:
        step(10, "done")
    assert "evaluating: done" in out.getvalue() and "10/10" in out.getvalue()
