"""One protocol across commits: a fixed tiny run's training and scored losses are those
tests/golden/protocol.json recorded, bit for bit, under posexp.version.PROTOCOL; other
numbers fail until PROTOCOL is bumped and scripts/golden.py records them."""
import importlib.util
import json
from pathlib import Path

import pytest

from posexp.version import PROTOCOL

SCRIPT = Path(__file__).resolve().parents[2] / "scripts" / "golden.py"


@pytest.fixture(scope="module")
def golden():
    spec = importlib.util.spec_from_file_location("golden", SCRIPT)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_training_and_scoring_compute_the_protocols_golden_numbers(golden):
    recorded = json.loads(golden.GOLDEN.read_text())
    problem = golden.verdict(recorded, golden.measure(), PROTOCOL, golden.machine())
    assert problem is None, problem


def test_another_machine_kind_rounds_the_last_bits_but_not_more(golden):
    """Bit for bit on the record's machine kind; another CPU's kernels may round the last
    bits (9e-8 relative measured between two machines), never 1e-5."""
    here = {"torch": "2.13.0+cpu", "cpu_capability": "AVX512", "processor": "x86_64 A"}
    there = {**here, "cpu_capability": "AVX2"}
    runs = {"rope": {"train_loss": [(5.5).hex()], "eval_loss": {"nonoverlapping@16": "x"}}}
    record = {"protocol": 1, "machine": here, "runs": runs}
    last_bits = {"rope": {"train_loss": [(5.5 * (1 + 9e-8)).hex()],
                          "eval_loss": {"nonoverlapping@16": "x"}}}
    assert golden.verdict(record, last_bits, 1, there) is None
    on_same = golden.verdict(record, last_bits, 1, here)
    assert "rope.train_loss[0]" in on_same and "bit for bit" in on_same
    moved = {"rope": {"train_loss": [(5.5 * (1 + 1e-5)).hex()],
                      "eval_loss": {"nonoverlapping@16": "x"}}}
    elsewhere = golden.verdict(record, moved, 1, there)
    assert "rope.train_loss[0]" in elsewhere and "another machine kind" in elsewhere


def test_other_numbers_or_another_protocol_say_what_to_do(golden):
    runs = {"rope": {"train_loss": [(5.0).hex(), (4.5).hex()],
                     "eval_loss": {"nonoverlapping@16": (4.25).hex()}}}
    here = golden.machine()
    record = {"protocol": 3, "machine": here, "runs": runs}
    assert golden.verdict(record, runs, 3, here) is None
    moved = json.loads(json.dumps(runs))
    moved["rope"]["train_loss"][1] = (4.5 + 2**-40).hex()  # one bit far down the mantissa
    problem = golden.verdict(record, moved, 3, here)
    assert "rope.train_loss[1]" in problem and "bump PROTOCOL" in problem
    assert "scripts/golden.py" in problem
    bumped = golden.verdict(record, moved, 4, here)
    assert "protocol 3" in bumped and "PROTOCOL is 4" in bumped and "scripts/golden.py" in bumped
    fewer = golden.verdict(record, {"rope": {**runs["rope"], "train_loss": [(5.0).hex()]}}, 3,
                           here)
    assert "rope.train_loss" in fewer
