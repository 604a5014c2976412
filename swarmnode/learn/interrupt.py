"""Stop points inside a forward/backward pass, so a stop never waits for a whole group.

Role: ``stop_points(model, should_stop)`` hooks every decoder layer (each child of the
model's ``ModuleList``) so that a requested stop raises ``InterruptedError`` at the
next layer boundary, in the forward pass and in the backward pass alike. Without it,
a stop under load waits for the micro-batch in flight: with the default micro-batch
of a whole group, tens of seconds on a CPU.

Invariants:
- The hooks only read ``should_stop``; with it False they change nothing (no tensor
  is touched), and they are removed on exit, whatever happens.
- An interrupted update never reaches ``optimizer.step``: the weights stay those
  of the last finished round (the caller discards the round).
- Inference (generation) is not hooked here: it polls ``should_stop`` per token.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Any

import torch


def _layers(model: torch.nn.Module) -> list[torch.nn.Module]:
    """The repeated blocks of a transformer: children of its largest ModuleList."""
    lists = [list(m) for m in model.modules() if isinstance(m, torch.nn.ModuleList)]
    return max(lists, key=len) if lists else [model]


@contextmanager
def stop_points(model: torch.nn.Module, should_stop: Callable[[], bool]) -> Iterator[None]:
    """Within the block, raise InterruptedError at a layer boundary once ``should_stop()``."""

    def check(*_: Any) -> None:
        if should_stop():
            raise InterruptedError("stop requested during the update")

    def on_output(_module: torch.nn.Module, _args: Any, out: Any) -> None:
        # A tensor hook on the layer's output fires when the backward pass reaches
        # the layer: cheaper than a module backward hook, which wraps every input.
        first = out[0] if isinstance(out, tuple | list) else out
        if isinstance(first, torch.Tensor) and first.requires_grad:
            first.register_hook(check)

    handles = []
    for layer in _layers(model):
        handles.append(layer.register_forward_pre_hook(check))
        handles.append(layer.register_forward_hook(on_output))
    try:
        yield
    finally:
        for h in handles:
            h.remove()
