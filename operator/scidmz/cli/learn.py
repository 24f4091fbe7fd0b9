"""Models and gains: ``scidmz train`` (identification, the inverse model) and ``scidmz tune``
(the anti-windup gains by the paper's genetic algorithm)."""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Annotated

import typer

from scidmz.api.flags import within
from scidmz.cli.common import fail

if TYPE_CHECKING:
    from scidmz.learn.identification import CampusLoad


def train(
    cca: Annotated[str, typer.Option(help="The DTN's congestion control: cubic or bbr.")],
    out: Annotated[
        Path | None, typer.Option(help="Output directory (default: models/<cca>).")
    ] = None,
    duration: Annotated[
        float,
        typer.Option(
            help="Identification run, simulated seconds (paper: 28,800).",
            callback=within(0, 1e7),
        ),
    ] = 28_800.0,
    seed: Annotated[int, typer.Option(help="Seeds the simulator, excitation and network.")] = 1,
    folds: Annotated[int, typer.Option(help="Cross-validation folds.")] = 3,
    max_epochs: Annotated[int, typer.Option(help="Epoch limit per fit.")] = 200,
    scenario: Annotated[
        Path | None, typer.Option("--scenario", help="Scenario YAML (default: the paper's).")
    ] = None,
    dtn_cap_excitation: Annotated[
        bool | None,
        typer.Option(
            help="Also excite the DTN's sending-rate cap (the DTN actuator). Default: on for "
            "bbr (a BBR DTN takes the link whatever u is, leaving u unidentifiable), off for "
            "cubic (the paper's excitation)."
        ),
    ] = None,
    campus_flows: Annotated[
        str,
        typer.Option(
            help="Campus long flows during identification: MIN..MAX varies the load "
            "(log-uniform levels held 60-300 s, a fifth of them application-limited); one "
            "number N holds N flows throughout (the paper's 100)."
        ),
    ] = "10..250",
) -> None:
    """Identify the network on the simulator and train the MLC inverse model (ONNX)."""
    from rich.progress import BarColumn, Progress, TextColumn, TimeElapsedColumn

    from scidmz.netsim.scenario import ScenarioError, load_scenario

    try:
        from scidmz.learn.inverse_model import FitSettings
        from scidmz.learn.train import TrainSettings
        from scidmz.learn.train import train as run_training
    except ImportError as error:
        fail(f"training needs the [train] extra (pip install 'scidmz[train]'): {error}")
        return
    if cca not in ("cubic", "bbr"):
        fail(f"--cca must be cubic or bbr, not {cca!r}")
    if not duration >= 60 or folds < 2 or max_epochs < 1:
        fail("--duration must be >= 60 s, --folds >= 2 and --max-epochs >= 1")
    try:
        chosen = load_scenario(scenario) if scenario is not None else None
        load = _campus_load(campus_flows)
    except (ScenarioError, ValueError) as error:
        fail(str(error))
        return
    settings = TrainSettings(
        cca=cca,
        out_dir=out or Path("models") / cca,
        duration_s=duration,
        seed=seed,
        folds=folds,
        fit=FitSettings(max_epochs=max_epochs, seed=seed),
        scenario=chosen,
        dtn_cap_excitation=cca == "bbr" if dtn_cap_excitation is None else dtn_cap_excitation,
        campus_load=load,
    )
    columns = (
        TextColumn("{task.description}"),
        BarColumn(),
        TextColumn("{task.completed:.0f}/{task.total:.0f}"),
        TimeElapsedColumn(),
    )
    with Progress(*columns) as bar:
        tasks: dict[str, object] = {}

        def progress(stage: str, done: float, total: float) -> None:
            if stage not in tasks:
                tasks[stage] = bar.add_task(stage, total=total)
            bar.update(tasks[stage], completed=done)  # type: ignore[arg-type]

        report = run_training(settings, progress)
    typer.echo(
        f"{cca}: {report.samples} rows; cross-validated relative error where the shaper "
        f"binds {report.mean('binding'):.1%} (naive {report.mean('naive_binding'):.1%}), "
        f"overall against the binding rate {report.mean('overall'):.1%} "
        f"(naive {report.mean('naive_overall'):.1%}); {report.seconds / 60:.1f} min; "
        f"wrote {settings.out_dir}/inverse.onnx and card.md"
    )


def _campus_load(text: str) -> CampusLoad:
    """``--campus-flows``: ``MIN..MAX`` or ``N``, each at most 10,000 flows."""
    from scidmz.learn.identification import CampusLoad

    low, dots, high = text.partition("..")
    parts = (low, high) if dots else (low, low)
    if not all(p.strip().isdigit() for p in parts):
        raise ValueError(f"--campus-flows wants MIN..MAX or N (whole numbers), got {text!r}")
    least, most = (int(p) for p in parts)
    if not 1 <= least <= most <= 10_000:
        raise ValueError(f"--campus-flows must satisfy 1 <= MIN <= MAX <= 10000, got {text!r}")
    return CampusLoad(least, most) if dots and least < most else CampusLoad.fixed(most)


def tune(
    cca: Annotated[str, typer.Option(help="The DTN's congestion control: cubic or bbr.")],
    models: Annotated[
        Path | None, typer.Option(help="Models folder (default: the shipped models/).")
    ] = None,
    filters: Annotated[
        str, typer.Option(help="Comma-separated filters to tune: pi, mlc, dtn.")
    ] = "pi,mlc,dtn",
    generations: Annotated[int, typer.Option(help="Generations (paper: 100).")] = 100,
    population: Annotated[int, typer.Option(help="Solutions per population (paper: 30).")] = 30,
    parents: Annotated[int, typer.Option(help="Parents mating (paper: 15).")] = 15,
    episodes: Annotated[int, typer.Option(help="120 s runs averaged per fitness.")] = 1,
    steady_episodes: Annotated[
        int,
        typer.Option(
            help="Runs at a constant R* (600 Mb/s) added to the fitness; 0: the paper's "
            "fitness (tracking only)."
        ),
    ] = 0,
    seed: Annotated[int, typer.Option(help="Seeds the GA and the tuning runs.")] = 1,
    workers: Annotated[int, typer.Option(help="Worker processes for the fitness.")] = 1,
) -> None:
    """Tune the anti-windup gains with the paper's genetic algorithm on the simulator.

    The search of §3.3 (table 2); writes models/<cca>/gains.yaml with the gains, the
    fitness of the best solution and of the paper's gains, and the search settings."""
    from rich.progress import BarColumn, Progress, TextColumn, TimeElapsedColumn

    from scidmz.control.settings import default_models_dir
    from scidmz.learn.gains import FILTERS, GAINS_FILE, dump_gains
    from scidmz.learn.tune import SearchSettings
    from scidmz.learn.tune import tune as run_tuning

    if cca not in ("cubic", "bbr"):
        fail(f"--cca must be cubic or bbr, not {cca!r}")
    chosen = tuple(f.strip() for f in filters.split(",") if f.strip())
    unknown = [f for f in chosen if f not in FILTERS]
    if unknown or not chosen:
        fail(f"--filters: unknown {', '.join(unknown) or '(none given)'}; use pi, mlc, dtn")
    if generations < 1 or population < 2 or not 1 <= parents <= population:
        fail("--generations must be >= 1, --population >= 2, 1 <= --parents <= --population")
    if episodes < 1 or workers < 1:
        fail("--episodes and --workers must be >= 1")
    if steady_episodes < 0:
        fail("--steady-episodes must be >= 0")
    folder = models or default_models_dir()
    if ("mlc" in chosen or "dtn" in chosen) and not (folder / cca / "inverse.onnx").is_file():
        fail(f"tuning mlc or dtn needs {folder / cca / 'inverse.onnx'} (scidmz train)")
    search = SearchSettings(
        generations=generations, parents_mating=parents, population=population,
        episodes=episodes, steady_episodes=steady_episodes, seed=seed, workers=workers,
    )  # fmt: skip
    columns = (
        TextColumn("{task.description}"),
        BarColumn(),
        TextColumn("{task.completed:.0f}/{task.total:.0f}"),
        TextColumn("{task.fields[best]}"),
        TimeElapsedColumn(),
    )
    with Progress(*columns) as bar:
        tasks: dict[str, object] = {}

        def progress(name: str, generation: int, best_iae: float) -> None:
            if name not in tasks:
                tasks[name] = bar.add_task(f"{cca} {name}", total=generations, best="")
            best = f"best IAE {best_iae / 1e9:.2f} Gbit"
            bar.update(tasks[name], completed=generation, best=best)  # type: ignore[arg-type]
            if not bar.console.is_terminal and (generation % 10 == 0 or generation == 1):
                # logs and CI get a line now and then instead of a live bar
                typer.echo(f"{cca} {name}: generation {generation}/{generations}, {best}", err=True)

        gains, results = run_tuning(cca, folder, search, chosen, progress)
    command = (
        f"scidmz tune --cca {cca} --filters {','.join(chosen)} --generations {generations} "
        f"--population {population} --parents {parents} --episodes {episodes} "
        + (f"--steady-episodes {steady_episodes} " if steady_episodes else "")
        + f"--seed {seed}"
    )
    path = folder / cca / GAINS_FILE
    path.parent.mkdir(parents=True, exist_ok=True)
    kept = [name for name in FILTERS if name not in chosen]
    header = f"Anti-windup gains for the {cca} DTN, tuned by `{command}`" + (
        f"; {', '.join(kept)} kept from the file's earlier tuning." if kept else "."
    )
    path.write_text(dump_gains(gains, header))
    for r in results:
        typer.echo(
            f"{cca} {r.name}: Kp {r.gains.kp:g} Ki {r.gains.ki:g} Kw {r.gains.kw:g}, "
            f"IAE {r.iae_bits / 1e9:.2f} Gbit (paper table 4 gains: "
            f"{r.paper_iae_bits / 1e9:.2f} Gbit), {r.evaluations} runs"
        )
    typer.echo(f"wrote {path}")
