"""``scidmz bench``: benchmarks that print their figures."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Annotated, Literal, TypeVar

import typer

from scidmz.cli.common import fail

bench_app = typer.Typer(help="Benchmarks that print their figures.", no_args_is_help=True)

T = TypeVar("T")


def saved_episodes(path: Path, parse: Callable[[str], list[T]]) -> list[T]:
    """A saved episodes.csv, parsed; an unreadable or malformed one ends the command
    naming it (exit 2)."""
    try:
        return parse(path.read_text())
    except (OSError, ValueError) as error:
        fail(f"--from-csv {path}: {error}")


def episodes_and_report(
    out: Path,
    from_csv: Path | None,
    name: str,
    command: str,
    run: Callable[[], list[T]],
    csv: Callable[[Sequence[T]], str],
    parse: Callable[[str], list[T]],
    markdown: Callable[[Sequence[T], str], str],
) -> None:
    """A twin bench's common end: its episodes, run (and written to episodes.csv in
    ``out``) or read back with --from-csv, and report.md rendered from them and printed.
    ``command`` is what the report says produced a run."""
    out.mkdir(parents=True, exist_ok=True)
    if from_csv is not None:
        episodes = saved_episodes(from_csv, parse)
        command = f"scidmz bench {name} --from-csv {from_csv}"
    else:
        episodes = run()
        (out / "episodes.csv").write_text(csv(episodes))
    text = markdown(episodes, command)
    (out / "report.md").write_text(text)
    typer.echo(text)
    typer.echo(f"wrote {out / 'report.md'} and {out / 'episodes.csv'}")


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
        episodes = saved_episodes(from_csv, parse_episodes)
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


@bench_app.command("buffer")
def bench_buffer(
    seeds: Annotated[int | None, typer.Option(help="Seeds per case (default 10, quick 3).")] = None,
    first_seed: Annotated[int, typer.Option(help="The first seed (results on fresh seeds).")] = 1,
    loads: Annotated[
        str, typer.Option(help="Campus long flows N, comma-separated (quick: 100).")
    ] = "25,50,100,250",
    cca: Annotated[
        str | None, typer.Option(help="Only this DTN congestion control (default: both).")
    ] = None,
    capacity: Annotated[
        str, typer.Option(help="The link's capacity (10Gbps: the Science DMZ case).")
    ] = "1Gbps",
    quick: Annotated[bool, typer.Option(help="3 seeds, N = 100, Cubic only.")] = False,
    workers: Annotated[
        int, typer.Option(help="Worker processes (results do not depend on it).")
    ] = 2,
    out: Annotated[Path, typer.Option(help="Report folder.")] = Path("bench/results/buffer_sizing"),
    from_csv: Annotated[
        Path | None,
        typer.Option("--from-csv", help="Render the report from a saved episodes.csv."),
    ] = None,
    episode: Annotated[
        str,
        typer.Option(
            help="transfer: a 10 GB transfer; steady: 600 s of DTN traffic with campus load "
            "changes at 200 s and 400 s."
        ),
    ] = "transfer",
    arms: Annotated[
        str,
        typer.Option(
            help="Comma-separated arms (default: the fixed ones and p4bs; p4bs-path and "
            "p4bs-bottleneck read the other loss signals)."
        ),
    ] = "",
) -> None:
    """P4BS buffer sizing against fixed buffers (BDP, Stanford, Tiny, Bloated, 100 ms) on
    the twin with the rate loop on: f̄ (P4BS eq. 2 on the twin's ground truth), which arms
    keep the DTN's target, the search's cost, campus queuing delay, DTN MRAE, FCT;
    report.md and episodes.csv in --out."""
    from scidmz.api.units import parse_rate
    from scidmz.learn.buffer_bench import ARMS, DEFAULT_ARMS, episodes_csv, parse_episodes, run_all
    from scidmz.learn.buffer_report import markdown

    count = seeds if seeds is not None else (3 if quick else 10)
    try:
        load_list = [100] if quick else [int(n) for n in loads.split(",")]
        capacity_bps = parse_rate(capacity)
    except ValueError as error:
        fail(f"--loads must be integers and --capacity a rate such as 10Gbps: {error}")
        return
    if count < 1 or workers < 1 or first_seed < 0 or any(n < 1 for n in load_list):
        fail("--seeds, --workers and every load must be >= 1, --first-seed >= 0")
    if cca not in (None, "cubic", "bbr"):
        fail(f"--cca must be cubic or bbr, not {cca!r}")
    if not 100e6 <= capacity_bps <= 100e9:
        fail("--capacity must be within 100Mbps..100Gbps")
    if episode not in ("transfer", "steady"):
        fail(f"--episode must be transfer or steady, not {episode!r}")
    arm_list = [a for a in arms.split(",") if a] or list(DEFAULT_ARMS)
    unknown = [a for a in arm_list if a not in ARMS]
    if unknown:
        fail(f"--arms: unknown {', '.join(unknown)} (known: {', '.join(ARMS)})")
    ccas = (cca,) if cca else (("cubic",) if quick else ("cubic", "bbr"))
    command = (
        "scidmz bench buffer"
        + (" --quick" if quick else "")
        + (f" --seeds {seeds}" if seeds else "")
        + (f" --first-seed {first_seed}" if first_seed != 1 else "")
        + (f" --loads {loads}" if loads != "25,50,100,250" and not quick else "")
        + (f" --cca {cca}" if cca else "")
        + (f" --capacity {capacity}" if capacity != "1Gbps" else "")
        + (f" --episode {episode}" if episode != "transfer" else "")
        + (f" --arms {arms}" if arms else "")
    )
    kind: Literal["transfer", "steady"] = "steady" if episode == "steady" else "transfer"
    episodes_and_report(
        out, from_csv, "buffer", command,
        lambda: run_all(
            range(first_seed, first_seed + count), load_list, ccas, arm_list,
            capacity_bps=capacity_bps, workers=workers,
            progress=lambda what: typer.echo(f"  {what}", err=True), kind=kind,
        ),
        episodes_csv, parse_episodes, markdown,
    )  # fmt: skip


@bench_app.command("multi-dtn")
def bench_multi_dtn(
    seeds: Annotated[int | None, typer.Option(help="Seeds per case (default 10, quick 3).")] = None,
    first_seed: Annotated[int, typer.Option(help="The first seed (results on fresh seeds).")] = 1,
    quick: Annotated[bool, typer.Option(help="3 seeds, the capped case only.")] = False,
    workers: Annotated[
        int, typer.Option(help="Worker processes (results do not depend on it).")
    ] = 2,
    out: Annotated[Path, typer.Option(help="Report folder.")] = Path("bench/results/multi_dtn"),
    from_csv: Annotated[
        Path | None,
        typer.Option("--from-csv", help="Render the report from a saved episodes.csv."),
    ] = None,
) -> None:
    """Three DTNs on one 1 Gb/s link (Cubic 100 ms, Cubic 50 ms from 60 s to 120 s, BBR
    80 ms; targets 300/200/150 Mb/s) beside 100 campus flows on the twin: the campus loop
    on their sum and a cap per DTN host, against the static split; each DTN's MRAE, the
    sum, utilisation and the disturbance when another DTN starts or stops. report.md and
    episodes.csv (a row per DTN per episode) in --out."""
    from scidmz.learn.multi_dtn_bench import CASES, episodes_csv, parse_episodes, run_all
    from scidmz.learn.multi_dtn_report import markdown

    count = seeds if seeds is not None else (3 if quick else 10)
    if count < 1 or workers < 1 or first_seed < 0:
        fail("--seeds and --workers must be >= 1, --first-seed >= 0")
    command = (
        "scidmz bench multi-dtn"
        + (" --quick" if quick else "")
        + (f" --seeds {seeds}" if seeds else "")
        + (f" --first-seed {first_seed}" if first_seed != 1 else "")
    )
    episodes_and_report(
        out, from_csv, "multi-dtn", command,
        lambda: run_all(
            range(first_seed, first_seed + count),
            cases=CASES[:1] if quick else CASES,
            workers=workers,
            progress=lambda what: typer.echo(f"  {what}", err=True),
        ),
        episodes_csv, parse_episodes, markdown,
    )  # fmt: skip
