"""``scidmz bench``: benchmarks that print their figures."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer

from scidmz.cli.common import fail

bench_app = typer.Typer(help="Benchmarks that print their figures.", no_args_is_help=True)


@bench_app.command("control")
def bench_control(
    quick: Annotated[bool, typer.Option(help="3 seeds and N_s = 100 only.")] = False,
    seeds: Annotated[int | None, typer.Option(help="Seeds per case (default 10, quick 3).")] = None,
    out: Annotated[Path, typer.Option(help="Report folder.")] = Path(
        "bench/results/control_quality"
    ),
    models: Annotated[
        Path | None, typer.Option(help="Models folder (default: the shipped models/).")
    ] = None,
    workers: Annotated[
        int, typer.Option(help="Worker processes (results do not depend on it).")
    ] = 2,
    cca: Annotated[
        str | None, typer.Option(help="Only this DTN congestion control (default: both).")
    ] = None,
    from_csv: Annotated[
        Path | None,
        typer.Option(
            "--from-csv",
            help="Render the report from a saved episodes.csv instead of running the episodes.",
        ),
    ] = None,
) -> None:
    """Compare the controllers on the simulator: the paper's §4 experiments and more.

    Per controller arm, a report with the targets, tables, paired comparisons and CDFs;
    every episode's figures in episodes.csv beside it."""
    from scidmz.control.settings import default_models_dir
    from scidmz.learn.evaluation import TRANSFER_FLOWS, run_all
    from scidmz.learn.report import episodes_csv, markdown, parse_episodes, plots

    count = seeds or (3 if quick else 10)
    flows = (100,) if quick else TRANSFER_FLOWS
    if count < 1 or workers < 1:
        fail("--seeds and --workers must be >= 1")
    if cca not in (None, "cubic", "bbr"):
        fail(f"--cca must be cubic or bbr, not {cca!r}")
    out.mkdir(parents=True, exist_ok=True)
    if from_csv is not None:
        try:
            episodes = parse_episodes(from_csv.read_text())
        except (OSError, ValueError) as error:
            fail(f"--from-csv {from_csv}: {error}")
            return
        command = f"scidmz bench control --from-csv {from_csv}"
    else:
        command = (
            "scidmz bench control"
            + (" --quick" if quick else "")
            + (f" --seeds {seeds}" if seeds else "")
            + (f" --cca {cca}" if cca else "")
        )
        episodes = run_all(
            models or default_models_dir(), count, flows,
            progress=lambda what: typer.echo(f"  {what}", err=True),
            ccas=(cca,) if cca else ("cubic", "bbr"), workers=workers,
        )  # fmt: skip
        (out / "episodes.csv").write_text(episodes_csv(episodes))
    text = markdown(episodes, command)
    (out / "report.md").write_text(text)
    written = plots(episodes, out)
    typer.echo(text)
    typer.echo(f"wrote {out / 'report.md'}, " + ", ".join(str(p) for p in written))
