"""What every report's stacked time-series figure ends with (matplotlib, Agg)."""

from __future__ import annotations

from pathlib import Path
from typing import Any


def finish_panels(figure: Any, axes: Any, title: str, path: Path, legend_size: int = 8) -> None:
    """Seconds on the last axis, a legend and grid on each, the title; saved and closed."""
    import matplotlib.pyplot as plt

    axes[-1].set_xlabel("seconds")
    for axis in axes:
        axis.legend(loc="upper right", fontsize=legend_size)
        axis.grid(alpha=0.3)
    figure.suptitle(title)
    figure.tight_layout()
    figure.savefig(path, dpi=100)
    plt.close(figure)
