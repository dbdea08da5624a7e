"""Issue #28: settings that were silently ignored, inputs that failed late with a raw error,
and the friction around them -- each case a row of a table, run through the real command
line (``cli.main`` in this process, Hydra's entry point replaced by a guard: every refusal
must come before anything would run), and the parts behind them tested on their own."""

from __future__ import annotations

import math
import signal

import pytest
import torch
import torch.nn.functional as F
from omegaconf import OmegaConf

from posexp import cli
from posexp import config as C
from posexp.cli import run_commands
from posexp.config.check import check_given
from posexp.config.schema import default
from posexp.errors import UsageError
from tests.bad_inputs import RUN
from tests.conftest import TINY, compose_args


def no_hydra(*args, **kwargs):
    raise AssertionError("reached Hydra's job or launcher: this input would have run")


@pytest.fixture
def run_cli(monkeypatch, capsys, cache_dir, tmp_path):
    """cli.main(args) in this process, from an empty directory, with ``env`` set:
    (exit code, stdout, stderr)."""
    monkeypatch.setattr(run_commands, "run_job", no_hydra)
    monkeypatch.setattr(run_commands, "launch", no_hydra)
    monkeypatch.setenv("POSEXP_CACHE", str(cache_dir))
    for name in ("POSEXP_DEBUG", "WANDB_MODE", "WANDB_DIR", "POSEXP_SWEEP_MAX_JOBS"):
        monkeypatch.delenv(name, raising=False)
    monkeypatch.chdir(tmp_path)

    def run(*args: str, env: dict | None = None) -> tuple[int, str, str]:
        with monkeypatch.context() as mp:
            for key, value in (env or {}).items():
                mp.setenv(key, value)
            with pytest.raises(SystemExit) as done:
                cli.main(list(args))
        out, err = capsys.readouterr()
        return done.value.code, out, err

    return run


# (case, command line, environment, words of the one line); every one exits 2.
# {d} is the directory of tests/bad_inputs.make_inputs, {run} a completed run there.
REFUSED = [
    ("base on an encoding without one", ["train", "encoding=alibi", "encoding.base=500"], {},
     ["encoding.base is set, but encoding=alibi does not read it",
      "only hybrid, partial_rope, rope, sinusoidal and xpos do"]),
    ("base on nope", ["train", "encoding=nope", "encoding.base=500"], {},
     ["encoding=nope does not read it"]),
    ("max_positions on rope", ["train", "encoding=rope", "encoding.max_positions=128"], {},
     ["encoding.max_positions is set, but encoding=rope does not read it", "only learned"]),
    ("stride, nonoverlapping", ["train", "eval.stride=32"], {},
     ["eval.stride is set, but eval.mode=nonoverlapping does not read it", "eval.mode=sliding"]),
    ("stride, nonoverlapping, posexp eval", ["eval", RUN, "eval.stride=8"], {},
     ["eval.stride is set, but eval.mode=nonoverlapping does not read it"]),
    ("yarn's parameter without a method", ["train", "eval.rope_scaling.beta_fast=16"], {},
     ["eval.rope_scaling.beta_fast is set, but eval.rope_scaling has no method",
      "eval.rope_scaling=yarn"]),
    ("llama3's parameter with linear",
     ["train", "eval.rope_scaling=linear", "eval.rope_scaling.low_freq_factor=2"], {},
     ["eval.rope_scaling.low_freq_factor is set, but eval.rope_scaling=linear does not read it",
      "llama3"]),
    ("a fine-tune's parameter without a method", ["train", "encoding.scaling.beta_slow=2"], {},
     ["encoding.scaling.beta_slow is set, but encoding.scaling has no method"]),
    ("depths of a task without depths",
     ["train", "data=task", "task=copy", "task.depths=[0.5]"], {},
     ["task.depths is set, but task=copy has no depth", "task=passkey"]),
    ("a W&B key with the local logger", ["train", "logger.project=foo"], {},
     ["logger.project is set, but logger=local does not read it", "logger=wandb"]),
    ("a W&B key with the local logger, sweep", ["sweep", "seed=0,1", "logger.tags=[a]"], {},
     ["logger.tags is set, but logger=local does not read it"]),
    ("xPos scale_base too small", ["train", "encoding=xpos",
                                   "encoding.hparams.scale_base=1e-300"], {},
     ["encoding=xpos with", "scale_base=1e-300 reaches only 0 positions",
      "fewer than train.seq_len (64)"]),
    ("xPos scale_base too small for random positions",
     ["train", "encoding=xpos", "encoding.hparams.scale_base=0.5",
      "train.random_positions=4096"], {},
     ["reaches only 66 positions", "fewer than train.random_positions (4096)"]),
    ("interval sweep", ["sweep", "seed=interval(0,1)"], {},
     ["seed=interval(0,1): interval() is a continuous range", "seed=range(0,10)"]),
    ("interval sweep, --cfg job", ["sweep", "train.lr=interval(0.001,0.01)", "--cfg", "job"],
     {}, ["interval() is a continuous range"]),
    ("joblib n_jobs=0", ["sweep", "seed=0,1", "hydra/launcher=joblib",
                         "hydra.launcher.n_jobs=0"], {},
     ["hydra.launcher.n_jobs must be a non-zero integer", "got 0"]),
    ("a sweep past the bound of jobs", ["sweep", "seed=range(0,100000)", "--cfg", "job"], {},
     ["this sweep has more than 1,001 jobs", "split it into sweeps of at most 1,000",
      "POSEXP_SWEEP_MAX_JOBS=N"]),
    ("a sweep past the bound, by the product", ["sweep", "encoding=rope", "seed=range(0,40)",
                                                "train.lr=range(1,41)", "--cfg", "job"], {},
     ["this sweep has 1,600 jobs"]),
    ("a sweep of 10**12 jobs", ["sweep", "seed=range(0,1000000000000)"], {},
     ["more than 1,001 jobs"]),
    ("the bound lowered", ["sweep", "encoding=rope", "seed=0,1,2"], {"POSEXP_SWEEP_MAX_JOBS": "2"},
     ["this sweep has 3 jobs", "at most 2 jobs"]),
    ("the bound malformed", ["sweep", "seed=0,1"], {"POSEXP_SWEEP_MAX_JOBS": "lots"},
     ["POSEXP_SWEEP_MAX_JOBS must be a positive integer, got 'lots'"]),
    ("task lengths derived past the bound",
     ["train", "data=task", "task=copy", "train.seq_len=67108864", "train.batch_size=1",
      "train.tokens=100000000"], {},
     ["eval.task_lengths by default are 1, 1.25, 1.5, 2 and 4 x n_max",
      "past the longest task length posexp scores, 1,048,576 (2**20)",
      "set eval.task_lengths=[...]"]),
    ("the batch given twice", ["train", "train.batch_size=8", "train.batch_tokens=2048"], {},
     ["train.batch_tokens=2048 and train.batch_size=8 both size the batch"]),
    ("a warm-up longer than the run", ["train", "train.warmup_tokens=3000000"], {},
     ["train.warmup_tokens (3,000,000) covers the whole run", "never decay"]),
    ("a warm-up as long as the rounded run",
     ["train", "train.tokens=20000", "train.warmup_tokens=19000"], {},
     ["covers the whole run (train.tokens=20,000: 9 steps of 2,048 tokens)"]),
    ("WANDB_MODE bogus", ["train", "logger=wandb"], {"WANDB_MODE": "bogus"},
     ["WANDB_MODE='bogus' is not a W&B mode", "logger.mode=offline"]),
    ("WANDB_DIR a file", ["train", "logger=wandb"], {"WANDB_DIR": "{d}/corpus.txt"},
     ["WANDB_DIR={d}/corpus.txt is a file, not a directory"]),
    ("WANDB_DIR under a file", ["sweep", "seed=0,1", "logger=wandb"],
     {"WANDB_DIR": "{d}/corpus.txt/wandb"}, ["lies under a file"]),
]


@pytest.mark.parametrize("case,args,env,words", REFUSED, ids=[c for c, *_ in REFUSED])
def test_refused_with_one_line_before_anything_runs(run_cli, inputs, tmp_path, case, args,
                                                    env, words):
    fill = lambda text: text.replace("{d}", str(inputs)).replace("{run}", str(inputs))  # noqa: E731
    code, _, err = run_cli(*map(fill, args), env={k: fill(v) for k, v in env.items()})
    lines = err.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("posexp: error: "), err
    assert code == 2, err
    for word in words:
        assert fill(word) in lines[0], err
    assert "Traceback" not in err
    assert not any(tmp_path.iterdir())  # nothing written where the command ran


# (case, command line, environment): each is accepted -- a default, or a value the run reads.
ACCEPTED = [
    ("base's default value on alibi", ["encoding=alibi", "encoding.base=10000"], {}),
    ("base on sinusoidal", ["encoding=sinusoidal", "encoding.base=500"], {}),
    ("max_positions on learned", ["encoding=learned", "encoding.max_positions=128"], {}),
    ("stride in sliding mode", ["eval.mode=sliding", "eval.stride=32"], {}),
    ("stride null", ["eval.stride=null"], {}),
    ("yarn's parameter with yarn", ["eval.rope_scaling=linear,yarn",
                                    "eval.rope_scaling.beta_fast=16"], {}),
    ("depths of passkey", ["data=task", "task=passkey", "task.depths=[0.5]"], {}),
    ("a W&B key with W&B", ["logger=wandb", "logger.project=foo"], {}),
    ("a bogus WANDB_MODE that logger.mode overrides",
     ["logger=wandb", "logger.mode=offline"], {"WANDB_MODE": "bogus"}),
    ("WANDB_MODE of W&B's own", ["logger=wandb"], {"WANDB_MODE": "dryrun"}),
    ("a bogus WANDB_MODE with the local logger", [], {"WANDB_MODE": "bogus"}),
    ("xPos with a gamma that makes it RoPE", ["encoding=xpos",
                                             "encoding.hparams.gamma=1e300"], {}),
    ("xPos with a huge scale_base", ["encoding=xpos", "encoding.hparams.scale_base=1e308"], {}),
    ("a warm-up shorter than the run", ["train.warmup_tokens=1000000"], {}),
    ("task lengths given under the bound",
     ["data=task", "task=copy", "train.seq_len=67108864", "train.batch_size=1",
      "train.tokens=100000000", "eval.task_lengths=[8]"], {}),
]


@pytest.mark.parametrize("case,args,env", ACCEPTED, ids=[c for c, *_ in ACCEPTED])
def test_accepted(run_cli, case, args, env):
    code, out, err = run_cli("train", "--cfg", "job", *args, env=env)
    assert code == 0, err
    assert out.startswith("encoding:") or "\nencoding:" in out


@pytest.mark.parametrize("group", ["encoding", "task", "logger", "model", "data"])
def test_every_option_with_its_defaults_is_accepted(group):
    """No default triggers a refusal: every option of a group, as its file sets it."""
    C.register()
    from posexp.config.compose import group_options

    for option in group_options(group):
        args = {"task": ["data=task", f"task={option}"],
                "data": [f"data={option}", "data.path=x", "data.hf_name=x"]}.get(
            group, [f"{group}={option}"])
        if group == "data" and option in ("text", "enwik8"):
            args = [f"data={option}", "data.path=x"]
        elif group == "data":
            args = [f"data={option}"] + (["data.hf_name=x"] if option == "hf" else []) + (
                ["task=copy"] if option == "task" else [])
        try:
            compose_args(args)
        except UsageError as e:
            assert "is set, but" not in str(e), (option, e)


@pytest.mark.parametrize("encoding", ["rope", "alibi", "learned", "xpos", "nope"])
def test_a_saved_config_passes_again(encoding):
    """resume and finetune check a run's saved config, every derived value filled in
    (max_positions for every encoding, the batch in sequences): nothing of it is 'given'."""
    C.register()
    resolved = C.resolve(compose_args([f"encoding={encoding}", *TINY]))
    C.check(resolved)
    check_given(resolved, [])


def test_a_batch_in_sequences_wins_over_the_default_in_tokens():
    C.register()
    cfg = compose_args(["train.batch_size=8"])
    assert C.resolve(cfg).train.batch_size == 8
    explicit = compose_args(["train.batch_tokens=null", "train.batch_size=8"])
    assert C.identity(cfg) == C.identity(explicit)  # the same run as before
    assert C.resolve(compose_args([])).train.batch_size == 32  # the default is unchanged
    # Hydra's own composition (train's entry point, a sweep's jobs) has no given keys: the
    # batch in sequences wins there too
    raw = compose_args([])
    raw.train.batch_size = 8
    C.check(raw)
    assert C.resolve(raw).train.batch_size == 8


def test_the_sweep_caps_joblib_workers_at_its_jobs():
    from tests.conftest import plan_sweep

    C.register()
    _, extra = plan_sweep(["encoding=rope", "seed=0,1", "hydra/launcher=joblib",
                           "hydra.launcher.n_jobs=8", *TINY, "--cfg", "job"])
    assert "hydra.launcher.n_jobs=2" in extra
    _, extra = plan_sweep(["encoding=rope", "seed=0,1,2", "hydra/launcher=joblib",
                           "hydra.launcher.n_jobs=2",
                           *TINY, "--cfg", "job"])
    assert not any("n_jobs" in o for o in extra)


def test_planning_a_large_sweep_says_how_far_it_is(monkeypatch, capsys):
    from posexp.sweep.plan import Planning

    monkeypatch.setenv("POSEXP_PROGRESS_SECONDS", "0")
    planning = Planning(3)
    for _ in range(3):
        planning.tick()
    err = capsys.readouterr().err
    assert "posexp sweep: planning: 1 of 3 jobs composed and checked" in err
    assert err.count("\n") == 2


def test_max_length_within_is_a_search_not_a_walk():
    from posexp.data.tasks import TASKS, max_length_within

    def walk(task, seq_len):
        n = task.min_length
        while task.why_not(n + 1) is None and task.tokens_for(n + 1) <= seq_len:
            n += 1
        return n

    for task in TASKS.values():
        for seq_len in [*range(task.tokens_for(task.min_length), 200), 4097]:
            assert max_length_within(task, seq_len) == walk(task, seq_len), task.name
        assert max_length_within(task, 2**30) >= 20  # at once: 2**30 steps would hang


def test_xpos_limits_never_raise():
    from posexp.encodings.xpos import XPos

    assert XPos(8, 10000.0, 1e300, 512.0).max_positions is None  # zeta rounds to 1: RoPE
    assert XPos(8, 10000.0, 0.4, 1e308).max_positions is None  # past any length
    assert XPos(8, 10000.0, 0.4, 1e-300).max_positions == 0
    assert XPos(8, 10000.0, 0.4, 512.0).max_positions == 67988  # the README's number


def test_a_wandb_error_is_one_line_cut_at_a_word():
    from posexp.sinks import reason

    e = ValueError("1 validation error for Settings\nmode\n  Input should be 'online', "
                   "'offline', 'shared', 'disabled', 'dryrun' or 'run' [type=literal_error, "
                   "input_value='bogus', input_type=str]\n    For further information visit "
                   "https://errors.pydantic.dev/2.11/v/literal_error")
    text = reason(e)
    assert "\n" not in text and text.startswith("ValueError: 1 validation error")
    assert text.endswith(" ...") and len(text) < 230
    assert text.split()[-2] in str(e).split()  # a whole word before the cut


def test_progress_is_plain_lines_where_stderr_is_not_a_terminal(monkeypatch, capsys):
    from posexp.run.training import Progress

    monkeypatch.setenv("POSEXP_PROGRESS_SECONDS", "0")
    with Progress(4, "win", "scoring nonoverlapping", True) as bar:
        for _ in range(4):
            bar.update(1)
    err = capsys.readouterr().err
    assert "posexp: scoring nonoverlapping: 1 of 4 win (25%)" in err
    assert err.count("\n") == 4 and "\r" not in err
    with Progress(4, "win", "quiet", False) as bar:
        bar.update(4)
    assert capsys.readouterr().err == ""


def test_a_resumed_loop_times_only_its_own_work(monkeypatch, capsys):
    from posexp.run import training

    clock = iter([0.0, 10.0, 10.0])  # start, then the line after 10 s
    monkeypatch.setattr(training.time, "perf_counter", lambda: next(clock))
    monkeypatch.setenv("POSEXP_PROGRESS_SECONDS", "0")
    bar = training.Progress(100, "win", "resumed", True, initial=80)
    bar.update(10)  # 10 in 10 s, 10 left: about 10 s, not the 2 s that 90% of 10 s says
    assert "90 of 100 win (90%), 10s, about 10s left" in capsys.readouterr().err


def test_a_stop_is_written_though_its_folder_was_tidied_away(monkeypatch, tmp_path):
    """A sweep's stop folder in /tmp removed while it runs: a signal writes it again, or no
    job would ever stop (seen: a campaign that started job after job after SIGTERM)."""
    from posexp.run.training import STOP_FILE, stop_requested
    from posexp.sweep.stop import request_stop

    monkeypatch.setenv(STOP_FILE, str(tmp_path / "gone" / "stop"))
    request_stop(signal.SIGTERM)
    assert stop_requested() == signal.SIGTERM


def test_a_stop_file_is_handed_to_this_process_handler(monkeypatch, tmp_path):
    from posexp.run.training import STOP_FILE, Progress, stop_requested
    from posexp.sweep.stop import request_stop

    monkeypatch.setenv(STOP_FILE, str(tmp_path / "stop"))
    assert stop_requested() is None
    request_stop(signal.SIGTERM)
    request_stop(signal.SIGINT)  # a second signal keeps the first one's number
    assert stop_requested() == signal.SIGTERM
    got = []
    previous = signal.signal(signal.SIGTERM, lambda s, f: got.append(s))
    try:
        Progress(2, "win", "x", False).update(1)
    finally:
        signal.signal(signal.SIGTERM, previous)
    assert got == [signal.SIGTERM]


def test_the_rounded_budget_is_said(capsys):
    from posexp.run.training import Plan, note_rounding

    t = OmegaConf.create({"batch_size": 32, "seq_len": 64, "tokens": 20000,
                          "warmup_tokens": 0, "val_every_tokens": 1, "checkpoint_every": 1})
    note_rounding(t, Plan.of(t))
    assert capsys.readouterr().err == ("posexp: train.tokens=20,000 is not a whole number of "
                                       "steps of 2,048 tokens (32 x 64): training 9 steps, "
                                       "18,432 tokens\n")
    for tokens in (20480, 2_000_000):  # whole steps; under 1% left out (the default)
        t.tokens = tokens
        note_rounding(t, Plan.of(t))
        assert capsys.readouterr().err == ""


def test_blocked_causal_attention_is_causal_attention():
    from posexp import attention

    torch.manual_seed(0)
    q, k, v = (torch.randn(2, 3, 777, 8) for _ in range(3))
    want = F.scaled_dot_product_attention(q, k, v, is_causal=True)
    with torch.no_grad():
        got = attention._causal_blocked(q, k, v)
    assert torch.allclose(got, want, atol=1e-6)
    assert not attention._long_inference(q)  # short: one call as before
    big = torch.empty(1, 4, 40000, 32, device="meta")
    with torch.no_grad():
        assert not attention._long_inference(big)  # meta is not the CPU
    assert attention._long_inference(torch.empty(1, 4, 40000, 32)) == (
        not torch.is_grad_enabled())
    with torch.no_grad():
        assert attention._long_inference(torch.empty(1, 4, 40000, 32))


def test_unread_keys_are_found_from_the_registries():
    """Which encoding reads base and max_positions comes from each config dataclass."""
    from posexp.config.check_model import encoding_reads
    from posexp.encodings import ENCODINGS

    readers = {name: encoding_reads(name) for name in ENCODINGS}
    assert readers["learned"] == ("max_positions",)
    assert readers["rope"] == readers["xpos"] == readers["sinusoidal"] == ("base",)
    assert readers["alibi"] == readers["nope"] == ()
    assert math.isclose(default("encoding.base"), 10000.0)
    assert default("task.depths") == [0.0, 0.25, 0.5, 0.75, 1.0]


def test_the_cli_exit_of_a_stopped_sweep(tmp_path, monkeypatch):
    """summarize ends a stopped sweep with one Stopped line: 128 + the signal."""
    from posexp.sweep import launch, stop

    C.register()
    cfgs = [compose_args([*TINY, f"seed={s}", f"results_dir={tmp_path}"]) for s in (0, 1)]
    monkeypatch.setitem(stop.STOPPED, "signum", int(signal.SIGTERM))
    with pytest.raises(Exception) as e:
        launch.summarize(cfgs)
    assert e.value.exit_code == 143
    assert str(e.value) == ("stopped by SIGTERM: 0 runs checkpointed and marked interrupted, "
                            "2 not started; run the same command again to finish the sweep")


@pytest.mark.parametrize(("args", "warmup"), [
    (["train.tokens=30000"], 3000),  # a tenth of a short run, not 100,000 (#35 item 9)
    (["train.tokens=4000000"], 100_000),  # the suites' runs warm up as they always did
    (["train.tokens=30000", "train.warmup_tokens=2048"], 2048),  # given: as given
    (["train.tokens=30000", "train.warmup_tokens=0"], 0),
])
def test_the_default_warm_up_fits_the_run_and_the_learning_rate_decays(args, warmup):
    from posexp.run.training import Plan, lr_at

    spec = C.RunSpec.of(C.compose(args))
    t = spec.cfg.train
    assert t.warmup_tokens == warmup  # config.yaml and the identity hold what trained
    assert spec.identity["train.warmup_tokens"] == warmup
    plan = Plan.of(t)
    rates = [lr_at(s, plan.total_steps, plan.warmup, t.lr, t.min_lr_ratio)
             for s in range(plan.total_steps)]
    assert max(rates) == pytest.approx(t.lr, rel=0.05)  # it reaches its peak...
    assert rates[-1] < 0.2 * t.lr  # ...and decays by the last step

def test_a_launcher_broken_by_a_signal_ends_as_the_stop_it_was():
    """A signal to the whole process group (Ctrl-C, timeout) can end a joblib worker before
    its job has installed its handler; joblib then raises for the dead worker.  Once the
    stop file says a signal came, that error is the stop -- the sweep ends with its stop line
    (exit 128 + n) -- and without one it is raised as it was."""
    from posexp.sweep.launch import stopped_line
    from posexp.sweep.stop import request_stop, stopping, take_stop

    class TerminatedWorkerError(Exception):
        pass

    with stopping():
        request_stop(signal.SIGTERM)
        raise TerminatedWorkerError("A worker process was unexpectedly terminated")
    signum, broke = take_stop()
    assert (signum, broke) == (signal.SIGTERM, "TerminatedWorkerError")
    line = stopped_line([], signum, broke)
    assert line.exit_code == 128 + signal.SIGTERM
    assert "the launcher broken off by a worker the signal ended (TerminatedWorkerError)" in \
        str(line)
    with pytest.raises(TerminatedWorkerError), stopping():
        raise TerminatedWorkerError("no signal came: a failure of its own")
    assert take_stop() == (None, None)


def test_a_stop_is_taken_once_not_read_by_a_later_summary_in_the_same_process(tmp_path):
    """A campaign stopped at its time limit in-process (the API's, the committed-report
    test's) leaves no stop behind: a later sweep's summary there is not 'stopped by SIGTERM'."""
    from posexp.sweep import launch
    from posexp.sweep.stop import request_stop, stopping, take_stop

    with stopping():
        request_stop(signal.SIGTERM)  # what a campaign's deadline writes
    assert take_stop() == (signal.SIGTERM, None)  # the campaign reads it: its time limit
    C.register()
    cfgs = [compose_args([*TINY, f"results_dir={tmp_path}"])]
    (tmp_path / "default").mkdir()  # the sweep's folder; its one run never started
    with pytest.raises(Exception) as e:
        launch.summarize(cfgs)
    assert str(e.value) == "1 of 1 runs did not complete"
