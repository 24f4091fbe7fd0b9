"""bench/netsim_speed.py's verdicts, and the compiled-function rule its figures rest on."""

from __future__ import annotations

import importlib
import re
import subprocess
import sys
import textwrap
from pathlib import Path

from tests.bench_scripts import load_bench

DEFAULT_TARGETS = ((600, "floor"), (1000, "goal"))


def test_each_target_is_judged_on_its_own() -> None:
    verdicts = load_bench("netsim_speed").verdicts
    column, marks = verdicts(700.0, DEFAULT_TARGETS)
    assert column == ">= 600x (floor), >= 1000x (goal)"
    assert marks == "600x met, 1000x MISSED"


def test_a_floor_is_met_at_the_floor_and_missed_just_under_it() -> None:
    verdicts = load_bench("netsim_speed").verdicts
    assert verdicts(600.0, DEFAULT_TARGETS)[1] == "600x met, 1000x MISSED"
    assert verdicts(599.9, DEFAULT_TARGETS)[1] == "600x MISSED, 1000x MISSED"
    assert verdicts(1000.0, DEFAULT_TARGETS)[1] == "600x met, 1000x met"


def test_a_compiled_function_that_allocates_fails_to_compile(tmp_path: Path) -> None:
    # compiled functions run without reference counting, so one that allocates an array
    # must be refused at compile time rather than leak or crash at run time.
    module = tmp_path / "allocates.py"
    module.write_text(
        textwrap.dedent(
            """
            import numpy as np
            from numba.core.errors import TypingError
            from scidmz.contract.compiled import compiled

            @compiled
            def total(n: int) -> float:
                return float(np.zeros(n).sum())

            try:
                total(3)
            except TypingError:
                print("refused")
            """
        )
    )
    done = subprocess.run(
        [sys.executable, str(module)],
        capture_output=True,
        text=True,
        check=True,
        env={"SCIDMZ_NUMBA_CACHE": str(tmp_path / "cache"), "PATH": "/usr/bin:/bin"},
        timeout=120,
    )
    assert done.stdout.strip() == "refused"


def test_the_reference_package_imports_only_itself(tmp_path: Path) -> None:
    # --against runs git REF's simulator beside this tree's: every import in the extracted
    # package must point at the extracted copy, or the "reference" would run this tree's code.
    bench = load_bench("netsim_speed")
    name = bench.import_at("HEAD", tmp_path)
    try:
        kernel = importlib.import_module(f"{name}.netsim.kernel")
        assert Path(kernel.__file__).is_relative_to(tmp_path)
        assert kernel.advance.py_func.__module__ == f"{name}.netsim.kernel"
        assert kernel.compiled.__module__ == f"{name}.contract.compiled"
        texts = [module.read_text() for module in (tmp_path / name).rglob("*.py")]
        assert not any(re.search(r"^\s*(from|import) scidmz\b", t, re.MULTILINE) for t in texts)
    finally:
        sys.path.remove(str(tmp_path))
        for module in [m for m in sys.modules if m == name or m.startswith(f"{name}.")]:
            del sys.modules[module]


def test_a_scattered_simulator_runs_the_same_trajectory_from_other_addresses() -> None:
    # the placement figure compares layouts of one trajectory, so moving the arrays must
    # change where they lie and nothing they compute
    import random

    import numpy as np

    from scidmz.netsim.scenario import Scenario
    from scidmz.netsim.simulator import Simulator

    bench = load_bench("netsim_speed")
    keep: list[object] = []
    block = Simulator(Scenario())
    moved = bench.scattered(Simulator(Scenario()), random.Random(3), keep)
    for name in bench._PLACED:
        assert getattr(moved, name).ctypes.data % 16 == 0
    assert moved.flow_i.ctypes.data != moved.flow_f.ctypes.data + moved.flow_f.nbytes
    for _ in range(3):
        assert np.array_equal(block.advance(700), moved.advance(700))
    assert np.array_equal(block.flow_f, moved.flow_f)
    assert len(keep) == len(bench._PLACED)
