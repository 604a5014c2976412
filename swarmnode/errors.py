"""The one error base class: a failure the user must act on, and the exit code it means.

Invariants:
- Every error a command reports as one line (no traceback) derives from
  ``SwarmnodeError``; anything else reaching the top is a bug and keeps its traceback.
- ``exit_code`` says what failed: 2 for what the user gave us (a config field, a key
  file, a model that does not load, a data_dir in use), 1 for what broke while running
  (the network side).
- ``label`` prefixes the one-line message when the message alone would not say which
  part of the node failed.
"""

from __future__ import annotations


class SwarmnodeError(Exception):
    """A failure reported as one line: ``error: [label: ]message``, exit ``exit_code``."""

    exit_code: int = 2
    label: str = ""

    def one_line(self) -> str:
        return f"{self.label}: {self}" if self.label else str(self)
