"""Task runs (data=task): training on answer tokens only, scoring held-out instances per length,
the records in eval.json and run.json, and the CLI end to end for every task."""
import math

import numpy as np
import pytest
import torch
import torch.nn.functional as F

from posexp import config as C
from posexp import stats
from posexp.config import derive
from posexp.data.tasks import (
    TASKS,
    VOCAB_SIZE,
    TaskData,
    constant_baseline,
    heldout,
    padded,
    training_batch,
)
from posexp.encodings import ENCODINGS
from posexp.errors import UsageError
from posexp.evaluate.tasks import row_scores, score_instances, summarize, task_curve
from posexp.model import GPT, GPTConfig
from posexp.run.training import fit as fit_spec
from posexp.run.training import weights_hash
from posexp.run.workloads import IGNORE, TASK_STREAM, task_batch, workload_of
from posexp.runs import Run
from posexp.sinks import Sink
from tests.conftest import (
    compose_args,
    plan_sweep,
)

SMALL = ["model.d_model=32", "model.n_layer=1", "model.n_head=2", "train.seq_len=32",
         "train.tokens=8192", "train.batch_tokens=256", "train.log_every=8",
         "train.val_every_tokens=4096", "task.eval_count=16", "device=cpu"]


def compose(args: list[str]):
    C.register()
    return compose_args(args)


def fit(model: GPT, data, cfg, run, sink, device, progress=False, resume=None) -> dict:
    """The training loop on a composed config (its run spec and workload)."""
    spec = C.RunSpec.of(cfg)
    return fit_spec(model, workload_of(spec), data, spec, run, sink, device, progress, resume)


def build_model(cfg, vocab_size):
    from posexp.run.setup import build_model as build

    return build(C.RunSpec.of(cfg), vocab_size)


def tiny_gpt(encoding: str = "nope", max_positions: int = 32) -> GPT:
    torch.manual_seed(0)
    return GPT(GPTConfig(vocab_size=VOCAB_SIZE, d_model=32, n_layer=1, n_head=2, d_ff=64,
                         encoding=encoding, max_positions=max_positions))


# --- training ------------------------------------------------------------------------------
def test_the_training_loss_counts_answer_tokens_only():
    task, model = TASKS["addition"], tiny_gpt()
    inputs, targets = task_batch(TaskData(task, 5), 8, seed=3, step=7)
    # the same batch, drawn again from the generator task_batch seeds
    raw_in, raw_targets, mask = training_batch(
        task, np.random.default_rng([3, 7, TASK_STREAM]), 8, 5)
    assert np.array_equal(inputs.numpy(), raw_in)
    assert np.array_equal(targets.numpy() == IGNORE, ~mask)
    assert (targets.numpy()[mask] == raw_targets[mask]).all()
    with torch.no_grad():
        loss = model(inputs, targets).item()
        logits = model.head(model.hidden(inputs)).double()
    log_probs = torch.log_softmax(logits, -1).gather(
        -1, torch.from_numpy(raw_targets)[..., None])[..., 0].numpy()
    by_hand = -log_probs[mask].mean()
    assert loss == pytest.approx(by_hand, rel=1e-5)
    # prompt and padding positions would change it: the mask matters
    assert abs(-log_probs.mean() - by_hand) > 1e-3
    # a compiled run's batches, padded to the widest instance (3 x 5 + 4 - 1 inputs), too
    wide_in, wide_targets = task_batch(TaskData(task, 5), 8, seed=3, step=7, fixed_width=True)
    assert inputs.shape == (8, 15) and wide_in.shape == (8, 18)
    assert (wide_targets != IGNORE).sum() == mask.sum()
    with torch.no_grad():
        assert model(wide_in, wide_targets).item() == pytest.approx(loss, rel=1e-5)


def test_resuming_a_task_run_gives_the_weights_of_an_uninterrupted_one(tmp_path):
    cfg = C.resolve(compose(["data=task", "task=copy", "encoding=rope", *SMALL,
                             "train.tokens=4096", f"results_dir={tmp_path}",
                             "train.checkpoint_every=1024", "train.log_every=4"]))  # 4 steps
    data = TaskData(TASKS["copy"], derive.task_max_length(cfg))
    cpu = torch.device("cpu")
    torch.manual_seed(0)
    whole = build_model(cfg, VOCAB_SIZE)
    fit(whole, data, cfg, None, Sink(), cpu, progress=False)

    class StopAt8(Sink):
        def log(self, record: dict) -> None:
            if record.get("step") == 8 and "loss" in record:
                raise KeyboardInterrupt  # after step 8's update, before its checkpoint

    run = Run.create(tmp_path / "run", cfg)
    torch.manual_seed(0)
    first = build_model(cfg, VOCAB_SIZE)
    with pytest.raises(KeyboardInterrupt):
        fit(first, data, cfg, run, StopAt8(), cpu, progress=False)
    state = run.load_checkpoint()
    assert state["step"] == 4
    resumed = build_model(cfg, VOCAB_SIZE)
    resumed.load_state_dict(state["model"])
    fit(resumed, data, cfg, None, Sink(), cpu, progress=False, resume=state)
    assert weights_hash(resumed) == weights_hash(whole)
    assert weights_hash(first) != weights_hash(whole)  # it did stop short


@pytest.mark.parametrize("encoding", sorted(ENCODINGS))
@pytest.mark.parametrize("random_positions", [None, 64])
def test_every_encoding_trains_on_a_task(encoding, random_positions):
    """A few steps of every registered encoding, with and without random positions: the loss
    on the answers falls from where it started, and the weights moved."""
    args = ["data=task", "task=reverse", f"encoding={encoding}", *SMALL, "train.tokens=2048",
            "train.lr=0.01"]
    if random_positions:
        args.append(f"train.random_positions={random_positions}")
    if random_positions and not ENCODINGS[encoding].reads_positions:
        with pytest.raises(UsageError, match=f"{encoding} reads no positions"):
            compose(args)
        return
    cfg = C.resolve(compose(args))
    data = TaskData(TASKS["reverse"], derive.task_max_length(cfg))
    torch.manual_seed(0)
    model = build_model(cfg, VOCAB_SIZE)
    before = weights_hash(model)
    inputs, targets = task_batch(data, 32, seed=5, step=0)
    with torch.no_grad():
        start = model(inputs, targets).item()
    fit(model, data, cfg, None, Sink(), torch.device("cpu"), progress=False)
    with torch.no_grad():
        end = model.eval()(inputs, targets).item()
    assert weights_hash(model) != before
    assert math.isfinite(end) and end < start


# --- scoring ---------------------------------------------------------------------------------
def test_an_oracle_scores_one_and_a_constant_answer_scores_chance():
    instances = heldout(TASKS["parity"], 6, 64, seed=0)
    _, targets, mask = padded(instances)
    t, m = torch.from_numpy(targets), torch.from_numpy(mask)
    oracle = F.one_hot(t, VOCAB_SIZE).float() * 30
    point = summarize(instances, *row_scores(oracle, t, m))
    assert point["exact"] == 1 and point["token_acc"] == 1
    assert point["exact_low"] > 0.94 and point["exact_high"] == 1
    assert point["token_acc_low"] == point["token_acc_high"] == 1
    assert point["answer_loss"] < 1e-9

    # the prompt-blind predictor: the commoner parity bit, then EOS
    bits = np.array([inst.answer[0] for inst in instances])
    values, counts = np.unique(bits, return_counts=True)
    common = values[counts.argmax()]
    constant = torch.zeros(*targets.shape, VOCAB_SIZE)
    constant[..., int(instances[0].answer[-1])] = 1.0  # EOS everywhere ...
    for row, inst in enumerate(instances):
        constant[row, inst.answer_start - 1, int(common)] = 2.0  # ... but the bit's position
    point = summarize(instances, *row_scores(constant, t, m))
    share = counts.max() / len(instances)
    assert point["exact"] == pytest.approx(share)
    assert point["token_acc"] == pytest.approx((share + 1) / 2)
    assert (point["exact"], point["token_acc"]) == pytest.approx(constant_baseline(instances))
    assert (point["chance_exact"], point["chance_token"]) == pytest.approx((share, (share + 1) / 2))
    assert point["exact_low"] < share < point["exact_high"]

    uniform = torch.zeros(*targets.shape, VOCAB_SIZE)
    assert summarize(instances, *row_scores(uniform, t, m))["answer_loss"] == pytest.approx(
        math.log(VOCAB_SIZE))


def test_batches_of_any_size_score_alike():
    model = tiny_gpt("rope").eval()
    instances = heldout(TASKS["reverse"], 7, 10, seed=1)
    one = score_instances(model, instances, torch.device("cpu"), batch_tokens=1)
    all_ = score_instances(model, instances, torch.device("cpu"), batch_tokens=1 << 16)
    assert all(np.array_equal(a, b) for a, b in zip(one[:2], all_[:2], strict=True))
    assert one[2] == pytest.approx(all_[2]) and one[3] == all_[3] == 10 * 8


@pytest.mark.parametrize("encoding", sorted(ENCODINGS))
def test_every_encoding_scores_a_task_or_says_why_not(encoding):
    model = tiny_gpt(encoding, max_positions=16)
    points = task_curve(model, TASKS["copy"], [(3, None), (8, None)], 4, 0,
                        torch.device("cpu"))
    assert [p["tokens"] for p in points] == [8, 18]
    assert points[0]["applicable"] and 0 <= points[0]["exact"] <= 1
    if encoding == "learned":  # 17 input tokens, 16 rows
        assert not points[1]["applicable"]
        assert points[1]["reason"] == ("learned positions stop at 16; there is no position 16 "
                                       "or beyond to read the 17 input tokens of length 8")
    else:
        assert points[1]["applicable"] and math.isfinite(points[1]["answer_loss"])


# --- the config ---------------------------------------------------------------------------
def test_the_identity_holds_the_task_and_not_its_evaluation():
    base = ["data=task", "task=passkey", "device=cpu"]
    ident = C.identity(compose(base))
    assert ident["task.name"] == "passkey" and ident["data.source"] == "task"
    assert ident["data.vocab_size"] == VOCAB_SIZE
    assert not any(k.startswith("eval.") or k in ("task.eval_count", "task.eval_seed",
                                                  "task.depths") for k in ident)
    evaluated = compose([*base, "task.eval_count=10", "task.eval_seed=3",
                             "task.depths=[0.5]", "eval.task_lengths=[8]"])
    assert C.identity(evaluated) == ident
    assert C.identity(compose(["data=task", "task=copy", "device=cpu"])) != ident
    assert not any(k.startswith("task") for k in C.identity(compose(["device=cpu"])))


def test_task_lengths_default_to_multiples_of_the_longest_trained():
    cfg = C.resolve(compose(["data=task", "task=copy", "train.seq_len=32"]))
    assert derive.task_max_length(cfg) == 15
    # 1, 1.25, 1.5, 2, 4 x 15 rounded up: 18.75 and 22.5 become lengths past n_max
    assert list(cfg.eval.task_lengths) == [15, 19, 23, 30, 60]
    assert cfg.task.eval_count == 500


def test_default_task_lengths_are_each_listed_once_past_n_max():
    """n_max = 1 (copy at seq_len 4): 1.25 and 1.5 x 1 both round up to 2, listed once."""
    cfg = C.resolve(compose(["data=task", "task=copy", "train.seq_len=4"]))
    assert derive.task_max_length(cfg) == 1
    assert list(cfg.eval.task_lengths) == [1, 2, 4]


def test_a_sweep_over_tasks_names_each_run_by_its_task(tmp_path):
    C.register()
    jobs, _ = plan_sweep(["data=task", "task=copy,reverse", "encoding=nope,alibi", "device=cpu",
         f"results_dir={tmp_path}", "--cfg", "job"])
    assert sorted(j.cfg.run_name for j in jobs) == [
        "alibi-L64-s0,task=copy", "alibi-L64-s0,task=reverse", "nope-L64-s0,task=copy",
        "nope-L64-s0,task=reverse"]


def test_the_task_recipe_sweep_plans_each_encoding_at_each_rate_and_batch(tmp_path):
    C.register()
    jobs, _ = plan_sweep(["sweep=task-recipe", "data=task", "task=copy", "device=cpu",
                          f"results_dir={tmp_path}", "--cfg", "job"])
    grid = {(j.cfg.encoding.name, j.cfg.train.lr, j.cfg.train.batch_tokens) for j in jobs}
    assert len(jobs) == len(grid) == 5 * 3 * 2
    assert {e for e, _, _ in grid} == {"nope", "learned", "sinusoidal", "rope", "alibi"}
    assert len({j.cfg.run_name for j in jobs}) == 30
    # the tasks preset's scale, which it composes from this file
    cfg = jobs[0].cfg
    assert (cfg.model.d_model, cfg.model.n_layer, cfg.train.seq_len, cfg.task.name) == (
        64, 4, 32, "copy")


def test_the_addition_search_is_bounded_and_at_the_suites_scale(tmp_path):
    """Issue #34: at most 8 runs -- format x n_max x step, RoPE at the suite's rate, seed 0 --
    on the tasks preset's model, so that a recipe that passes is one the preset can adopt."""
    C.register()
    jobs, _ = plan_sweep(["sweep=addition-recipe", "data=task", "device=cpu",
                          f"results_dir={tmp_path}", "--cfg", "job"])
    grid = {(j.cfg.task.name, j.cfg.train.seq_len, j.cfg.train.batch_tokens)
            for j in jobs}
    assert len(jobs) == len(grid) == 8 and len({j.cfg.run_name for j in jobs}) == 8
    assert grid == {(t, n, b) for t in ("addition_reversed", "addition_carries")
                    for n in (32, 16) for b in (512, 256)}
    assert {(j.cfg.encoding.name, j.cfg.train.lr, j.cfg.seed, j.cfg.train.tokens,
             j.cfg.model.d_model, j.cfg.model.n_layer, j.cfg.model.init,
             j.cfg.model.tie_weights) for j in jobs} == {
        ("rope", 0.003, 0, 4_000_000, 64, 4, "torch", False)}


def test_the_interval_of_a_difference_adds_the_distances_in_quadrature():
    d = stats.difference_interval((0.5, 0.4, 0.7), (0.2, 0.1, 0.25))
    assert d.value == pytest.approx(0.3)
    assert d.low == pytest.approx(0.3 - math.hypot(0.1, 0.05))
    assert d.high == pytest.approx(0.3 + math.hypot(0.2, 0.1))
