"""``scidmz tune``: genetic-algorithm tuning of the anti-windup gains (paper §3.3, table 2).

Fitness is −IAE (eq. 2) of the DTN rate over a 120 s run tracking a pseudo-random R*(t)
(a new level in [300, 800] Mb/s every 20 s, after a 20 s warm-up), with the production
controller on the simulator (``learn.closed_loop``). The GA is PyGAD with the paper's
settings: 100 generations, 3 genes (Kp, Ki, Kw), 15 parents mating, 30 solutions, crossover
0.9, mutation 0.1, steady-state selection; genes in [0, 3]. Every solution of a run faces
the same R*(t) and the same simulated network (common random numbers), on tuning seeds
(101, 102, …) that the benchmark's seeds (1 … 10) do not reuse. A run is deterministic per
seed, with or without worker processes.

Episode k runs with ``TUNING_CAMPUS_FLOWS[k mod 4]`` long campus flows (100, 50, 150, 200:
table 5's N_s), so ``--episodes 4`` scores a triple on every load the benchmark judges;
``--episodes 1`` is the 100-flow load the inverse model was trained on. Why it matters: in
one experiment (docs/design/control.md) one episode gave mlc gains without an integral
(Ki = 0), best at 100 flows, while at 50 flows, where the model extrapolates, nothing
removed its bias and a 10 GB transfer ran at 0.33 R*.

Three filters are tuned in turn per DTN congestion control: ``pi`` and ``mlc`` (the campus
filter around B − R* and around the shipped inverse model; campus-only for a Cubic DTN,
with the DTN cap for a BBR DTN, which campus shaping alone cannot hold) and ``dtn`` (the
DTN cap's filter, beside the tuned ``mlc``).

``--steady-episodes N`` adds N runs at a constant R* (``evaluation.TRANSFER_TARGET_BPS``,
600 Mb/s: the benchmark's table-5 transfers) to the
fitness, on ``STEADY_CAMPUS_FLOWS[j mod 2]`` flows (200, 50: the benchmark's ends, where the
inverse model's bias is largest), each scored by its IAE over the same 120 s. Our addition
to eq. 2: the paper's fitness only sees R* jumping every 20 s, where a bias of ~10 Mb/s is a
small part of the IAE and the GA gives up the integral (Ki = 0) that removes it; a product
is judged on both (tracking and the constant-R* transfers). The fitness is the
mean IAE over all runs. 0 (the default) is the paper's fitness.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

import numpy as np
import numpy.typing as npt

from scidmz.api.runtime import TUNED_INTEGRAL_BAND_FRACTION
from scidmz.learn.gains import FILTERS, Triple, TunedGains, load_gains

GENE_HIGH = 3.0
TUNING_SEED_BASE = 100
TUNING_CAMPUS_FLOWS = (100, 50, 150, 200)
STEADY_CAMPUS_FLOWS = (200, 50)


@dataclass(frozen=True)
class SearchSettings:
    """Paper table 2 by default."""

    generations: int = 100
    parents_mating: int = 15
    population: int = 30
    crossover_probability: float = 0.9
    mutation_probability: float = 0.1
    selection: str = "sss"
    gene_low: float = 0.0
    gene_high: float = GENE_HIGH
    episode_s: float = 120.0
    episodes: int = 1
    steady_episodes: int = 0
    seed: int = 1
    workers: int = 1


@dataclass(frozen=True)
class FilterResult:
    name: str
    gains: Triple
    iae_bits: float
    """Mean IAE of the best solution over the tuning episodes (bits)."""
    paper_iae_bits: float
    """The same episodes with the paper's table 4 gains, for comparison."""
    evaluations: int


class Fitness:
    """−IAE of one gain triple; picklable for worker processes (the model loads lazily)."""

    def __init__(
        self, cca: str, name: str, models_dir: Path, fixed: TunedGains, search: SearchSettings
    ) -> None:
        self.cca = cca
        self.name = name
        self.models_dir = models_dir
        self.fixed = fixed
        self.search = search
        self._model: Any = None

    def iae(self, gains: tuple[float, float, float]) -> float:
        from scidmz.control.model import InverseModel
        from scidmz.learn.evaluation import (
            TRANSFER_TARGET_BPS,
            WARMUP,
            Arm,
            make_loop,
            random_targets,
            scenario_for,
        )

        strategy = "pi" if self.name == "pi" else "mlc"
        if strategy == "mlc" and self._model is None:
            self._model = InverseModel(self.models_dir / self.cca / "inverse.onnx")
        triple = Triple(kp=gains[0], ki=gains[1], kw=gains[2])
        if self.name == "dtn":
            tuned = TunedGains(self.cca, self.fixed.mlc, self.fixed.pi, triple)
        else:
            tuned = TunedGains(self.cca, triple, triple, self.fixed.dtn)
        # a BBR DTN is only controllable with its cap: its campus filters are tuned with it
        arm = Arm(strategy, dtn_actuator=self.name == "dtn" or self.cca == "bbr")
        measured = round(self.search.episode_s)
        tracked = self.search.episodes
        runs = tracked + self.search.steady_episodes
        total = 0.0
        for episode in range(runs):
            seed = TUNING_SEED_BASE + self.search.seed + episode
            if episode < tracked:
                targets = random_targets(seed, WARMUP + measured)
                flows = TUNING_CAMPUS_FLOWS[episode % len(TUNING_CAMPUS_FLOWS)]
            else:
                targets = [TRANSFER_TARGET_BPS] * (WARMUP + measured)
                flows = STEADY_CAMPUS_FLOWS[(episode - tracked) % len(STEADY_CAMPUS_FLOWS)]
            scenario = scenario_for(self.cca, seed, flows, None)
            loop = make_loop(arm, self.cca, scenario, targets[0], tuned, self._model)
            steps = loop.run(targets)[WARMUP:]
            period = scenario.sample_time_s
            total += sum(
                abs(s.target_bps - s.sample.measured.dtn_rate_bps) * period
                if math.isfinite(s.sample.measured.dtn_rate_bps)
                else s.target_bps * period
                for s in steps
            )
        return total / runs

    def __call__(self, ga: object, solution: npt.NDArray[np.float64], index: int) -> float:
        return -self.iae((float(solution[0]), float(solution[1]), float(solution[2])))

    def of(self, gains: tuple[float, float, float]) -> float:
        return -self.iae(gains)


class BatchFitness:
    """PyGAD's batch fitness over a process pool (PyGAD's own process mode pickles the GA
    instance, progress callback included); order-preserving, so results do not depend on
    the number of workers."""

    def __init__(self, fitness: Fitness, pool: Any) -> None:
        self.fitness = fitness
        self.pool = pool

    def __call__(self, ga: object, batch: Any, indices: Any) -> list[float]:
        triples = [(float(s[0]), float(s[1]), float(s[2])) for s in np.asarray(batch)]
        return list(self.pool.map(self.fitness.of, triples))

    def __getstate__(self) -> dict[str, Any]:
        return {k: v for k, v in self.__dict__.items() if k != "_model"} | {"_model": None}


def initial_population(
    search: SearchSettings,
    paper: tuple[float, float, float],
    incumbent: tuple[float, float, float],
) -> Any:
    """Uniform in the gene range, plus the paper's gains, all-zero (the pure inverse / the
    fixed split) and the gains in force: a search never starts without its obvious
    candidates, and with elitism it never returns worse gains than those it replaces (a
    BBR `dtn` search without them ended at 4.39 Gbit beside an incumbent's 4.36)."""
    rng = np.random.default_rng(search.seed)
    population = rng.uniform(search.gene_low, search.gene_high, size=(search.population, 3))
    population[0] = paper
    population[1] = 0.0
    if search.population > 2:
        population[2] = np.clip(incumbent, search.gene_low, search.gene_high)
    return population


def tune_filter(
    cca: str,
    name: str,
    models_dir: Path,
    fixed: TunedGains,
    search: SearchSettings,
    on_generation: Callable[[int, float], None] | None = None,
) -> FilterResult:
    """One GA run for one filter; ``on_generation(generation, best_iae_bits)``."""
    import pygad

    from scidmz.api.runtime import PAPER_GAINS

    fitness = Fitness(cca, name, models_dir, fixed, search)

    def report(ga: Any) -> None:
        if on_generation is not None:
            on_generation(int(ga.generations_completed), -float(ga.best_solution()[1]))

    from concurrent.futures import ProcessPoolExecutor

    pool = ProcessPoolExecutor(search.workers) if search.workers > 1 else None
    ga = pygad.GA(
        num_generations=search.generations,
        num_parents_mating=search.parents_mating,
        fitness_func=BatchFitness(fitness, pool) if pool is not None else fitness,
        fitness_batch_size=search.population if pool is not None else None,
        initial_population=initial_population(
            search, PAPER_GAINS[cca], getattr(fixed, name).as_tuple()
        ),
        gene_type=float,
        gene_space=[{"low": search.gene_low, "high": search.gene_high}] * 3,
        parent_selection_type=search.selection,
        crossover_type="single_point",
        crossover_probability=search.crossover_probability,
        mutation_type="random",
        mutation_probability=search.mutation_probability,
        mutation_by_replacement=True,
        keep_elitism=1,
        save_solutions=True,
        random_seed=search.seed,
        on_generation=report,
        suppress_warnings=True,
    )
    try:
        ga.run()
    finally:
        if pool is not None:
            pool.shutdown()
    solution, _, _ = ga.best_solution(pop_fitness=ga.last_generation_fitness)
    gains = Triple(kp=round(float(solution[0]), 4), ki=round(float(solution[1]), 4),
                   kw=round(float(solution[2]), 4))  # fmt: skip
    return FilterResult(
        name=name,
        gains=gains,
        iae_bits=fitness.iae(gains.as_tuple()),
        paper_iae_bits=fitness.iae(PAPER_GAINS[cca]),
        evaluations=len({tuple(s) for s in np.asarray(ga.solutions).tolist()}),
    )


def tune(
    cca: str,
    models_dir: Path,
    search: SearchSettings,
    filters: tuple[str, ...] = FILTERS,
    on_generation: Callable[[str, int, float], None] | None = None,
) -> tuple[TunedGains, list[FilterResult]]:
    """Tune ``filters`` in the order pi, mlc, dtn (dtn rides on the tuned mlc)."""
    from scidmz.learn.evaluation import TRANSFER_TARGET_BPS  # heavy: only when tuning

    current = load_gains(models_dir, cca)
    # the filters not tuned now keep their recorded fitness (read before `current` moves on)
    previous = dict(current.provenance.get("fitness") or {})
    results = []
    for name in ("pi", "mlc", "dtn"):
        if name not in filters:
            continue

        def report(generation: int, best: float, name: str = name) -> None:
            if on_generation is not None:
                on_generation(name, generation, best)

        result = tune_filter(cca, name, models_dir, current, search, report)
        results.append(result)
        current = TunedGains(
            cca,
            result.gains if name == "mlc" else current.mlc,
            result.gains if name == "pi" else current.pi,
            result.gains if name == "dtn" else current.dtn,
        )
    provenance: dict[str, Any] = {
        "fitness": {
            r.name: {
                "iae_gbit": round(r.iae_bits / 1e9, 4),
                "paper_gains_iae_gbit": round(r.paper_iae_bits / 1e9, 4),
                "evaluations": r.evaluations,
            }
            for r in results
        },
        "search": asdict(search)
        | {
            "library": "pygad",
            "tuning_seeds": "101 + seed + episode",
            "campus_flows_by_episode": list(TUNING_CAMPUS_FLOWS),
            "integral_band_fraction": TUNED_INTEGRAL_BAND_FRACTION.get(cca),
        }
        | (
            {
                "steady_target_bps": TRANSFER_TARGET_BPS,
                "campus_flows_by_steady_episode": list(STEADY_CAMPUS_FLOWS),
            }
            if search.steady_episodes
            else {}
        ),
    }
    provenance["fitness"] = {
        name: provenance["fitness"].get(name, previous.get(name))
        for name in FILTERS
        if name in provenance["fitness"] or name in previous
    }
    return TunedGains(cca, current.mlc, current.pi, current.dtn, provenance), results
