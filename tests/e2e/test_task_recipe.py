"""The tasks suite's recipe learns: a copy run on its steps (configs/sweep/task-recipe.yaml:
512 tokens a step, its warm-up) solves copy in distribution.  At 2 layers and a quarter of
its tokens the test takes about a minute on one idle core; measured once at this setting
(2 busy cores), exact match 0.970 [0.936, 0.986] at n_max on 200 held-out instances.
Marked slow as every test under tests/e2e is."""

from tests.conftest import read_json


def test_a_tiny_copy_run_with_the_recipe_solves_copy_at_n_max(posexp, tmp_path):
    r = posexp("train", "sweep=task-recipe", "data=task", "task=copy", "encoding=rope",
                    "model.n_layer=2", "train.batch_tokens=512", "train.tokens=1000000",
                    "train.lr=0.003", "task.eval_count=200", "eval.task_lengths=[15]",
                    "device=cpu", "results_dir=out")
    assert r.returncode == 0, r.stderr
    run = tmp_path / "out" / "default" / "rope-L32-s0"
    assert read_json(run / "run.json")["corpus"]["max_train_length"] == 15  # n_max
    (point,) = read_json(run / "eval.json")["tasks"]
    assert point["length"] == 15 and point["count"] == 200
    assert point["exact"] >= 0.9, point
