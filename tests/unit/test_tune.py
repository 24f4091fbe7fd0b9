"""`scidmz tune`: the paper's GA (§3.3) on the simulator, as a user runs it (a tiny search)."""

from __future__ import annotations

import subprocess
import sys

import pytest
import yaml

from scidmz.learn.gains import GainsFileError, load_gains, paper_gains

TINY = ["--generations", "2", "--population", "4", "--parents", "2", "--filters", "pi"]


def _tune(models, *args):
    return subprocess.run(
        [sys.executable, "-m", "scidmz.cli", "tune", "--cca", "cubic", "--models", str(models),
         *args],
        capture_output=True, text=True, timeout=600, check=False,
    )  # fmt: skip


def test_tune_writes_gains_with_fitness_and_settings_and_is_deterministic(tmp_path):
    first = _tune(tmp_path / "a", *TINY, "--seed", "3")
    assert first.returncode == 0, first.stderr
    written = yaml.safe_load((tmp_path / "a" / "cubic" / "gains.yaml").read_text())
    search = written["search"]
    assert (search["generations"], search["population"], search["parents_mating"]) == (2, 4, 2)
    assert (search["crossover_probability"], search["mutation_probability"]) == (0.9, 0.1)
    assert search["selection"] == "sss" and search["seed"] == 3
    assert search["integral_band_fraction"] == 0.05  # the band the cubic gains go with
    fitness = written["fitness"]["pi"]
    # the search starts from the paper's gains and from zero, so it can only improve on them
    assert 0 < fitness["iae_gbit"] <= fitness["paper_gains_iae_gbit"]
    assert fitness["evaluations"] >= 4
    tuned = load_gains(tmp_path / "a", "cubic")
    assert tuned.pi.as_tuple() == tuple(written["pi"][k] for k in ("kp", "ki", "kw"))
    assert tuned.mlc == paper_gains("cubic").mlc  # not tuned in this run: left as they were
    assert "Kp" in first.stdout and "IAE" in first.stdout
    again = _tune(tmp_path / "b", *TINY, "--seed", "3", "--workers", "2")
    assert again.returncode == 0, again.stderr
    # the same seed on two worker processes finds the same gains with the same fitness
    other = load_gains(tmp_path / "b", "cubic")
    assert other.pi == tuned.pi
    assert other.provenance["fitness"]["pi"] == written["fitness"]["pi"]
    # re-tuning one filter keeps the others' gains and recorded fitness, and says so
    path = tmp_path / "b" / "cubic" / "gains.yaml"
    earlier = yaml.safe_load(path.read_text())
    earlier["fitness"]["mlc"] = {"iae_gbit": 1.0, "paper_gains_iae_gbit": 2.0, "evaluations": 9}
    path.write_text(yaml.safe_dump(earlier, sort_keys=False))
    retuned = _tune(tmp_path / "b", *TINY, "--seed", "4")
    assert retuned.returncode == 0, retuned.stderr
    text = path.read_text()
    assert "; mlc, dtn kept from the file's earlier tuning." in text.splitlines()[0]
    assert yaml.safe_load(text)["fitness"]["mlc"] == earlier["fitness"]["mlc"]


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["--cca", "vegas"], "--cca must be cubic or bbr"),
        (["--filters", "pid"], "--filters: unknown pid"),
        (["--generations", "0"], "--generations must be >= 1"),
        (["--steady-episodes", "-1"], "--steady-episodes must be >= 0"),
        (["--parents", "40"], "1 <= --parents <= --population"),
        (["--filters", "mlc"], "tuning mlc or dtn needs"),
    ],
)
def test_tune_refuses_bad_input(tmp_path, args, message):
    argv = ["tune", "--models", str(tmp_path)]
    if "--cca" not in args:
        argv += ["--cca", "cubic"]
    proc = subprocess.run(
        [sys.executable, "-m", "scidmz.cli", *argv, *args],
        capture_output=True, text=True, timeout=60, check=False,
    )  # fmt: skip
    assert proc.returncode == 2, proc.stderr
    assert message in proc.stderr
    assert not (tmp_path / "cubic" / "gains.yaml").exists()


def test_a_broken_gains_file_names_the_field(tmp_path):
    (tmp_path / "cubic").mkdir()
    (tmp_path / "cubic" / "gains.yaml").write_text("mlc: {kp: 0, ki: 0, kw: 0}\npi: {kp: 0}\n")
    with pytest.raises(
        GainsFileError,
        match=r"is invalid: pi\.ki: Field required; pi\.kw: Field required; dtn: Field",
    ):
        load_gains(tmp_path, "cubic")
    (tmp_path / "cubic" / "gains.yaml").write_text(
        "mlc: {kp: .nan, ki: 0, kw: 0}\npi: {kp: 0, ki: 0, kw: 0}\ndtn: {kp: 0, ki: 0, kw: 0}\n"
    )
    with pytest.raises(GainsFileError, match=r"mlc\.kp: Input should be a finite number"):
        load_gains(tmp_path, "cubic")


def test_tuning_episodes_cycle_through_table_5_campus_loads(monkeypatch, tmp_path):
    # one episode per N_s of table 5, so a triple is scored on every load the benchmark
    # judges (tuned on 100 flows only, the mlc lost its integral and failed at 50)
    from scidmz.learn import evaluation
    from scidmz.learn.tune import Fitness, SearchSettings

    loads: list[int] = []

    def scenario_for(cca, seed, campus_flows, transfer_bytes, shorts=False):
        loads.append(campus_flows)
        return evaluation.Scenario()

    class Idle:
        def run(self, targets):
            return []

    monkeypatch.setattr(evaluation, "scenario_for", scenario_for)
    monkeypatch.setattr(evaluation, "make_loop", lambda *args: Idle())
    fitness = Fitness("cubic", "pi", tmp_path, paper_gains("cubic"), SearchSettings(episodes=5))
    assert fitness.iae((0.1, 0.2, 0.3)) == 0.0
    assert loads == [100, 50, 150, 200, 100]


def test_steady_episodes_add_a_constant_target_at_the_benchmarks_ends(monkeypatch, tmp_path):
    # the paper's fitness only sees R* jump every 20 s; the steady runs score what the
    # constant-R* transfers judge (the bias an integral removes), on distinct seeds
    from scidmz.learn import evaluation
    from scidmz.learn.tune import Fitness, SearchSettings

    runs: list[tuple[int, int, bool]] = []
    steady_targets: set[float] = set()

    def scenario_for(cca, seed, campus_flows, transfer_bytes, shorts=False):
        runs.append((seed, campus_flows, False))
        return evaluation.Scenario()

    class Loop:
        def run(self, targets):
            constant = len(set(targets)) == 1
            runs[-1] = (*runs[-1][:2], constant)
            if constant:
                steady_targets.add(targets[0])
            step = type("Step", (), {})()
            step.target_bps = targets[0]
            step.sample = type("S", (), {})()
            step.sample.measured = type("M", (), {"dtn_rate_bps": targets[0] - 1e6})()
            return [step] * len(targets)

    monkeypatch.setattr(evaluation, "scenario_for", scenario_for)
    monkeypatch.setattr(evaluation, "make_loop", lambda *args: Loop())
    search = SearchSettings(episodes=2, steady_episodes=3, episode_s=40.0)
    fitness = Fitness("cubic", "pi", tmp_path, paper_gains("cubic"), search)
    # every run 1 Mb/s under its target for 40 measured samples: 40 Mbit each, averaged
    assert fitness.iae((0.1, 0.2, 0.3)) == pytest.approx(40e6)
    assert [flows for _, flows, _ in runs] == [100, 50, 200, 50, 200]
    assert [constant for *_, constant in runs] == [False, False, True, True, True]
    assert len({seed for seed, *_ in runs}) == 5
    assert steady_targets == {evaluation.TRANSFER_TARGET_BPS}  # the transfers' R*


@pytest.mark.parametrize("name", ["pi", "mlc", "dtn"])
def test_a_search_never_returns_worse_gains_than_those_in_force(monkeypatch, tmp_path, name):
    # the real GA on a bowl whose bottom is the incumbent, away from the paper's gains and
    # zero: one generation of random draws cannot find it, so only a search that starts
    # from the gains in force returns them (a BBR `dtn` search returned worse ones)
    from scidmz.learn.gains import Triple, TunedGains
    from scidmz.learn.tune import Fitness, SearchSettings, tune_filter

    incumbent = (2.1234, 0.4321, 2.7)
    monkeypatch.setattr(
        Fitness, "iae", lambda self, g: sum((a - b) ** 2 for a, b in zip(g, incumbent, strict=True))
    )
    paper = paper_gains("cubic")
    kept = Triple(kp=incumbent[0], ki=incumbent[1], kw=incumbent[2])
    fixed = TunedGains(
        "cubic", *(kept if f == name else getattr(paper, f) for f in ("mlc", "pi", "dtn"))
    )
    search = SearchSettings(generations=1, population=4, parents_mating=2, seed=5)
    result = tune_filter("cubic", name, tmp_path, fixed, search)
    assert result.gains.as_tuple() == incumbent
    assert result.iae_bits == 0.0
