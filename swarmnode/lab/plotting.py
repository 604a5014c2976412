"""The lab's one plotting helper: a headless figure, and saving it in the house look.

``new_figure`` selects the Agg backend (no display needed) before pyplot loads, so a
module can import matplotlib lazily and only when it plots; ``save_figure`` gives
every axes a light grid and a legend, titles the figure, writes the PNG and closes
the figure (long experiments plot many times).

    from swarmnode.lab.plotting import new_figure, save_figure
    fig, (ax,) = new_figure()
    ax.plot(xs, ys, label="reward")
    save_figure(fig, path, title="...")
"""

from __future__ import annotations

from pathlib import Path
from typing import Any


def new_figure(ncols: int = 1, size: tuple[float, float] = (8.0, 4.5)) -> tuple[Any, list[Any]]:
    """(figure, list of its ``ncols`` axes side by side), on the headless backend."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, axes = plt.subplots(1, ncols, figsize=size, squeeze=False)
    return fig, list(axes[0])


def save_figure(fig: Any, path: Path, title: str | None = None, dpi: int = 120) -> None:
    """Grid and legend on every axes, the title, tight layout; write ``path``; close."""
    import matplotlib.pyplot as plt

    for ax in fig.axes:
        ax.grid(alpha=0.3)
        if ax.get_legend_handles_labels()[0]:
            ax.legend()
    if title:
        if len(fig.axes) == 1:
            fig.axes[0].set_title(title)
        else:
            fig.suptitle(title)
    fig.tight_layout()
    fig.savefig(path, dpi=dpi)
    plt.close(fig)
