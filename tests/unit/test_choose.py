"""scripts/choose.py on hand-built task runs: a recipe (learning rate and batch) chosen by
exact match at n_max, ties broken by the final training loss, and an edge of the grid
named."""
import importlib.util
import json
from pathlib import Path

import pytest

from posexp.config import CONFIG_DIR
from tests.unit.test_reproduce_tasks import make_run

SCRIPT = Path(CONFIG_DIR).parent / "scripts" / "choose.py"


@pytest.fixture(scope="module")
def choose():
    spec = importlib.util.spec_from_file_location("choose", SCRIPT)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def recipe_run(root: Path, encoding: str, lr: float, batch: int, exact: float,
               loss: float) -> None:
    """A copy run at ``lr`` and ``batch`` tokens a step whose exact match at n_max is
    ``exact`` and whose logged training loss is ``loss`` throughout."""
    path = make_run(root, "copy", encoding, 0, [0.0, 0.0], f"train.lr={lr}",
                    f"train.batch_tokens={batch}", at_n_max=exact, suffix=f"-{lr}-{batch}")
    (path / "metrics.jsonl").write_text("".join(
        json.dumps({"step": s, "tokens": 256 * s, "loss": loss}) + "\n" for s in range(1, 11)))


def test_a_recipe_is_chosen_by_exact_match_at_n_max_then_by_loss(choose, tmp_path):
    root = tmp_path / "task-recipe"
    recipe_run(root, "rope", 0.001, 256, exact=0.5, loss=0.2)
    recipe_run(root, "rope", 0.003, 256, exact=1.0, loss=0.01)
    recipe_run(root, "rope", 0.003, 1024, exact=1.0, loss=0.05)  # as exact, more loss
    recipe_run(root, "rope", 0.003, 128, exact=0.8, loss=0.02)
    recipe_run(root, "rope", 0.01, 256, exact=0.9, loss=0.001)  # the lowest loss, less exact
    recipe_run(root, "nope", 0.001, 256, exact=0.95, loss=0.3)
    recipe_run(root, "nope", 0.003, 256, exact=0.1, loss=0.1)
    text = choose.table(root, "recipe", "exact")
    rows = {line.split(" | ")[0].strip("| "): line for line in text.splitlines()
            if " on copy |" in line}
    # inside the grid: rates 0.001-0.01, batches 128-1024
    assert rows["rope on copy"].endswith("| lr 0.003, batch 256 |")
    assert "| **1.0000** |" in rows["rope on copy"]
    # nope's best lies at the lowest rate and the smallest batch the grid tried
    assert rows["nope on copy"].endswith("| lr 0.001, batch 256 (an edge of the grid) |")
    assert text.startswith("# Choice by exact match at n_max (recipe)")
    # by loss alone, rope's rate would be the one that solves fewer instances
    rows = choose.table(root, "lr").splitlines()
    assert next(r for r in rows if r.startswith("| rope on copy")).endswith(
        "| 0.01 (an edge of the grid) |")


def test_exact_match_needs_task_runs_scored_at_n_max(choose, tmp_path):
    root = tmp_path / "grid"
    recipe_run(root, "rope", 0.003, 256, exact=1.0, loss=0.01)
    eval_json = next(root.iterdir()) / "eval.json"
    points = json.loads(eval_json.read_text())
    points["tasks"] = [p for p in points["tasks"] if p["length"] != 7]
    eval_json.write_text(json.dumps(points))
    with pytest.raises(SystemExit, match="has no exact match at n_max"):
        choose.table(root, "recipe", "exact")


def test_no_completed_run_is_refused_not_written_as_an_empty_choice(choose, tmp_path):
    (tmp_path / "grid").mkdir()
    with pytest.raises(SystemExit, match=r"no completed run under .*grid: nothing to choose"):
        choose.table(tmp_path / "grid", "lr")


def test_the_suites_rate_is_chosen_by_validation_loss_at_l_among_the_sweeps_runs(choose,
                                                                                  tmp_path):
    from tests.runs_on_disk import curve_point, losses, write_run

    root = tmp_path / "cpu"

    def run(lr: float, tokens: int, level: float, train_loss: float) -> None:
        path = write_run(root / f"rope-{lr}-{tokens}", [f"train.lr={lr}",
                                                        f"train.tokens={tokens}"],
                         [curve_point("nonoverlapping", 16, losses(level, seed=7))])
        (path / "metrics.jsonl").write_text(json.dumps({"tokens": tokens, "loss": train_loss})
                                            + "\n")

    run(0.002, 8192, level=1.6, train_loss=1.0)
    run(0.004, 8192, level=1.4, train_loss=1.2)  # best at L, worse in training
    run(0.008, 8192, level=1.5, train_loss=1.1)
    run(0.008, 16384, level=0.5, train_loss=0.5)  # a main run: another budget, kept out
    text = choose.table(root, "lr", "val", ("train.tokens=8192",))
    row = next(r for r in text.splitlines() if r.startswith("| rope |"))
    assert row.endswith("| 0.004 |") and row.split(" | ")[2].startswith("**")
    assert text.startswith("# Choice by final validation loss at L (lr)")
    assert "Runs with train.tokens=8192 only." in text
    # without --only the main run's lower loss would choose its rate
    assert choose.table(root, "lr", "val").splitlines()[-1].endswith(
        "| 0.008 (an edge of the grid) |")
    # by training loss alone another rate would win
    assert choose.table(root, "lr", "loss", ("train.tokens=8192",)).splitlines()[-1].endswith(
        "| 0.002 (an edge of the grid) |")
    with pytest.raises(SystemExit, match=r"no completed run under .* with train.tokens=1"):
        choose.table(root, "lr", "val", ("train.tokens=1",))
