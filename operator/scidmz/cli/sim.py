"""``scidmz sim``: the embedded campus / Science DMZ network simulator."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer

from scidmz.api.flags import within
from scidmz.cli.common import fail

sim_app = typer.Typer(
    help="The embedded campus / Science DMZ network simulator.", no_args_is_help=True
)


@sim_app.command("run")
def sim_run(
    duration: Annotated[
        float,
        typer.Option(
            help="Simulated seconds (rounded up to whole sample times).", callback=within(0, 1e7)
        ),
    ],
    out: Annotated[
        Path, typer.Option("--out", help="Directory for samples.csv, flows.csv, summary.json.")
    ],
    scenario: Annotated[
        Path | None,
        typer.Option("--scenario", help="Scenario YAML (default: the paper's testbed)."),
    ] = None,
    u_schedule: Annotated[
        Path | None,
        typer.Option("--u-schedule", help="u(t) schedule, YAML (steps or random) or CSV."),
    ] = None,
) -> None:
    """Run the simulator open loop and write per-sample ground truth and a summary."""
    import json

    from rich.progress import BarColumn, Progress, TextColumn, TimeRemainingColumn

    from scidmz.netsim.run import run_simulation
    from scidmz.netsim.scenario import Scenario, ScenarioError, load_scenario
    from scidmz.netsim.schedule import ScheduleError, load_schedule

    try:
        chosen = load_scenario(scenario) if scenario is not None else Scenario()
        schedule = load_schedule(u_schedule) if u_schedule is not None else None
    except (ScenarioError, ScheduleError) as error:
        fail(str(error))
        return
    if not duration > 0:
        fail("--duration must be a positive number of seconds")
    with Progress(
        TextColumn("simulating"),
        BarColumn(),
        TextColumn("{task.completed:.0f}/{task.total:.0f} s"),
        TimeRemainingColumn(),
        transient=True,
    ) as bar:
        task = bar.add_task("sim", total=duration)
        step = chosen.sample_time_s

        def advance(done: int, total: int) -> None:
            bar.update(task, completed=done * step, total=total * step)

        try:
            summary = run_simulation(chosen, duration, out, schedule, progress=advance)
        except ScenarioError as error:
            fail(str(error))
            return
    summary.pop("scenario", None)
    typer.echo(json.dumps(summary, indent=2, default=str))
    typer.echo(f"wrote {out / 'samples.csv'}, {out / 'flows.csv'}, {out / 'summary.json'}")
