"""The commands that train and score runs: train, eval, sweep, resume, finetune.  Each
parses its command line, composes and checks a config (posexp.config), and hands it to the
run layer (posexp.run) or to Hydra's launcher (sweep)."""

from __future__ import annotations

import contextlib
import os
from pathlib import Path

import typer
from omegaconf import DictConfig, OmegaConf

from posexp import scaling
from posexp.cli.app import EXTRA, app
from posexp.cli.args import Args, parse_args, saved_run_args
from posexp.cli.errors import fail
from posexp.cli.help import Command, help_page, print_config, print_hydra
from posexp.config import (
    RunSpec,
    apply_overrides,
    check,
    check_attention,
    check_device_name,
    check_eval,
    compose_overrides,
    split_hydra,
)
from posexp.config.custom import no_imports
from posexp.config.guards import check_overrides, parse_override
from posexp.config.hydra_jobs import (
    hydra_part,
    launch,
    run_job,
    show_hydra_help,
    show_info,
)
from posexp.data.checks import check_paths
from posexp.errors import UsageError
from posexp.timelimit import end_sweep, pop_time_limit, sweep_campaign, timed_job
from posexp.version import __version__

# a task run's evaluation settings are eval.task_lengths and these of the task group
EVAL_KEYS = ("eval.", "device", "attention", "task.eval_count", "task.eval_seed", "task.depths")
# flags with which Hydra shows something and runs nothing
SHOWS = ("--cfg", "--info", "--hydra-help")


def showing(shows: bool) -> contextlib.AbstractContextManager:
    """No encoding module of the user's is imported while a command only shows a config."""
    return no_imports() if shows else contextlib.nullcontext()


def run_dir_arg(path: Path) -> Path:
    """A run directory as given on the command line, made absolute where its name says
    nothing (``.``, ``..``): a run's name and experiment are read from its path."""
    return Path(os.path.abspath(path)) if path.name in ("", ".", "..") else path


def run_config(cfg: DictConfig) -> str:
    """Check a composed config and run it (posexp.run.run): the task of Hydra's entry point
    for posexp train, and of resume and finetune."""
    from posexp.run import run  # torch: not for --help

    check(cfg)
    return run(RunSpec.of(cfg))


@app.command(cls=Command, context_settings={**EXTRA, "help_option_names": []},
             short_help="Train one model on short windows and evaluate it at longer ones.")
def train(ctx: typer.Context) -> None:
    """Train one model on short windows and evaluate it at longer ones.

    Takes Hydra overrides (key=value, group=option) and --cfg job; posexp train --help
    lists them.
    """
    try:
        a = parse_args(ctx.args, "train")
        if "--version" in a.flags:
            typer.echo(f"posexp {__version__}")
            return
        if "--help" in a.flags:
            typer.echo(help_page(a, "train"))
            return
        shows = any(f in a.flags for f in SHOWS)
        with showing(shows):
            cfg, hydra_node = split_hydra(compose_overrides(
                a.overrides, a.config_dir, a.config_name, with_hydra=True))
            check(cfg)
        if shows:
            show(a, cfg, hydra_node)
            return
        from posexp.run import pick_device, run

        check_paths(cfg.data)  # a missing corpus, a FIFO, /dev/zero: refused now
        pick_device(cfg)  # device=cuda:3 on a machine with one GPU: refused now
        run_job(lambda c: run(RunSpec.of(c)), cfg, hydra_node, a.config_dir)
    except BaseException as e:
        fail(e)


def show(a: Args, cfg: DictConfig, hydra_node: DictConfig) -> None:
    """--cfg, --info, --hydra-help: the composed config, or how Hydra composed it; nothing
    runs."""
    if "--info" in a.flags:
        show_info(a.flags["--info"], a.overrides, a.config_dir, a.config_name)
    elif "--hydra-help" in a.flags:
        show_hydra_help(a.overrides, a.config_dir)
    elif a.flags["--cfg"] == "job":
        print_config(cfg, a.flags.get("--package"))
    else:
        print_hydra(cfg, hydra_part(hydra_node), a.flags["--cfg"] == "all",
                    a.flags.get("--package"), "--resolve" in a.flags)


@app.command("eval", cls=Command, context_settings=EXTRA)
def eval_(
    ctx: typer.Context,
    run_dir: Path = typer.Argument(..., metavar="RUN_DIR", show_default=False,
                                   help="A run directory written by posexp train."),
) -> None:
    """Score a trained run again: at other lengths, in another mode, with another stride.

    Nothing is retrained. Overrides may change eval.*, device and attention; the new
    points are written to eval.json beside the old ones (a point of the same mode, length,
    stride, scored tokens and RoPE scaling is replaced). A RoPE run can be scored with
    context-extension scalings: eval.rope_scaling=METHOD ({methods}; plain: as trained)
    and eval.rope_scaling.factor=S, each a comma list whose every
    combination is scored by this one process, on the same tokens. A task run (data=task)
    is scored at eval.task_lengths, on task.eval_count held-out instances of
    task.eval_seed (passkey: at each of task.depths); only the task points eval.json lacks
    are scored. --cfg job prints the config it would use.

    \b
    Examples:
      posexp eval results/default/alibi-L64-s0 eval.lengths=[64,128,4096]
      posexp eval results/default/nope-L64-s0 eval.task_lengths=[16,32,64,128]
      posexp eval results/default/alibi-L64-s0 eval.mode=sliding eval.stride=32
      posexp eval results/default/rope-L64-s0 eval.rope_scaling=yarn eval.rope_scaling.factor=8
      posexp eval results/default/rope-L64-s0 eval.rope_scaling=linear,ntk,dynamic,yarn
                  eval.rope_scaling.factor=2,4,8,16
      posexp eval results/default/rope-L64-s0 device=cuda:1 --cfg job
    """
    try:
        if pretrained_run(run_dir):
            from posexp.cli.pretrained_command import eval_pretrained

            return eval_pretrained(ctx, run_dir)
        from posexp.run import evaluate_dir
        from posexp.runs import Run

        overrides, show = saved_run_args(ctx.args, "eval", "RUN_DIR, overrides of eval.*, "
                                         "device and attention")
        run_dir = run_dir_arg(run_dir)
        run = Run.open(run_dir)
        run.require_checkpoint("posexp eval")
        cfg = apply_overrides(run.config(), overrides, allowed=EVAL_KEYS, run_dir=run_dir)
        check_device_name(cfg.device)
        check_eval(cfg)
        check_attention(cfg)
        if show:
            print_config(cfg, None)
            return
        evaluate_dir(run_dir, RunSpec.of(cfg))
    except BaseException as e:
        fail(e)


@app.command(cls=Command, context_settings=EXTRA)
def sweep(ctx: typer.Context) -> None:
    """Train and evaluate a grid of runs: every comma-separated override is an axis.

    Takes posexp train's overrides (posexp train --help lists groups and keys) with
    comma-separated values. Every job is composed and checked before the first one starts.
    Each job gets its own run directory (swept keys beyond encoding, length and seed are
    added to its name); a completed run of the same identity is skipped, so a re-run
    finishes only what is missing. encoding=glob(*) is every encoding there is a config for
    (the presets' default). Presets: sweep=encodings (the default), lengths, seeds, grid.
    Launchers: hydra/launcher=basic (one job after another), joblib (parallel on this
    machine), submitit_local, submitit_slurm. --time-limit DURATION (90s, 45m, 2h, 1h30m):
    as posexp reproduce's. --cfg job prints every job's config and runs nothing.

    \b
    Examples:
      posexp sweep encoding=alibi,rope train.seq_len=64,128 seed=0,1,2
      posexp sweep sweep=lengths hydra/launcher=joblib
      posexp sweep model.d_model=64,128 --cfg job
      posexp sweep 'encoding=glob(*,exclude=nope)' seed=0,1
    """
    try:
        args, seconds = pop_time_limit(ctx.args)
        a = parse_args(args, "sweep")
        if "--version" in a.flags:
            typer.echo(f"posexp {__version__}")
            return
        if "--info" in a.flags or "--hydra-help" in a.flags:  # composed by Hydra, run nothing
            sweep_info(a)
            return
        from posexp.sweep.plan import plan

        with showing("--cfg" in a.flags):
            jobs, extra = plan(a.overrides, a.config_dir, a.config_name,
                               devices="--cfg" not in a.flags)
        if "--cfg" in a.flags:
            print_jobs(jobs, a)
            return
    except BaseException as e:
        fail(e)
    launch_sweep(a, jobs, extra, seconds)


def launch_sweep(a: Args, jobs: list, extra: list[str], seconds: float | None) -> None:
    """The planned jobs through Hydra's launcher, within ``seconds`` where given; then the
    summary."""
    from posexp.sweep.launch import summarize, sweep_job
    from posexp.sweep.plan import is_hydra
    from posexp.sweep.stop import stop_overrides, stopping

    typer.echo(f"posexp sweep: {len(jobs)} runs", err=True)
    # each job's own overrides name its directory; the hydra.* ones choose the launcher
    hydra = [o for o in [*jobs[0].overrides, *extra] if is_hydra(o)]
    run_name = [o for o in extra if o.startswith("run_name=")]
    # a signal (or the time limit) stops every job, checkpointed, wherever it runs
    with stopping(), sweep_campaign(seconds, [job.cfg for job in jobs]) as (campaign, handed):
        launch(sweep_job if campaign is None else timed_job, [job.cfg for job in jobs],
               [[o for o in [*job.overrides, *run_name] if not is_hydra(o)] for job in jobs],
               [*hydra, *stop_overrides(), *handed], a.config_dir, a.config_name)
    try:
        if campaign is not None:
            end_sweep(campaign, [job.cfg for job in jobs])
        summarize([job.cfg for job in jobs])
    except BaseException as e:
        fail(e)


def print_jobs(jobs: list, a: Args) -> None:
    """posexp sweep --cfg job|hydra|all: every planned job's config; nothing runs."""
    for i, job in enumerate(jobs, 1):
        typer.echo(f"# job {i}/{len(jobs)}: {' '.join(job.overrides)}")
        if a.flags["--cfg"] in ("hydra", "all"):
            typer.echo(OmegaConf.to_yaml({"hydra": job.hydra}).rstrip())
        if a.flags["--cfg"] in ("job", "all"):
            print_config(job.cfg, a.flags.get("--package"))


def sweep_info(a: Args) -> None:
    """posexp sweep --info / --hydra-help: how Hydra composes the sweep's common config,
    once posexp's guards have passed it; nothing runs."""
    check_overrides(a.overrides, "sweep")
    common = [o for o in a.overrides if not parse_override(o).is_sweep_override()]
    compose_overrides(common, a.config_dir, a.config_name, command="sweep", resolve=False)
    if "--info" in a.flags:
        show_info(a.flags["--info"], common, a.config_dir, a.config_name)
    else:
        show_hydra_help(common, a.config_dir)


@app.command(cls=Command)
def resume(
    run_dir: Path = typer.Argument(..., metavar="RUN_DIR", show_default=False,
                                   help="A run directory written by posexp train."),
) -> None:
    """Continue an interrupted run from its last checkpoint, with the config it was given.

    Running the same posexp train command again does the same; resume needs only the
    directory, also after it was moved.

    \b
    Examples:
      posexp resume results/default/rope-L64-s0
      posexp resume results/my-sweep/alibi-L128-s1
    """
    try:
        if pretrained_run(run_dir):
            from posexp.cli.pretrained_command import resume_pretrained

            return resume_pretrained(run_dir)
        from posexp.runs import Run

        if not (run_dir / "config.yaml").is_file():
            raise UsageError(f"{run_dir} is not a posexp run (no config.yaml)")
        refuse_record(Run(run_dir), "posexp resume")
        cfg = apply_overrides(Run(run_dir).config(), [], allowed=(), run_dir=run_dir)
        home = Path(os.path.abspath(run_dir))  # `posexp resume .` names the run by its path
        if Path(os.path.abspath(Path(cfg.results_dir, cfg.experiment, cfg.run_name))) != home:
            # the run was moved (or is named from inside): continue it where it is now
            cfg.results_dir = str(home.parent.parent) if run_dir.is_absolute() else \
                os.path.relpath(home.parent.parent)
            cfg.experiment, cfg.run_name = home.parent.name, home.name
        cfg.train.resume = True
        run_config(cfg)
    except BaseException as e:
        fail(e)


def pretrained_run(path: Path) -> bool:
    """Whether ``path`` holds a pretrained run (its kind, runs/kind.py): eval, resume and
    finetune hand it to pretrained_command.py."""
    from posexp.runs.kind import PRETRAINED, run_kind

    return run_kind(path) == PRETRAINED


def refuse_record(run, needs: str) -> None:
    """A run record (runs.Run.require_checkpoint) refused in one line; a run.json missing or
    damaged is left to the run layer, which says what to do about it."""
    from posexp.errors import PosexpError

    try:
        record = os.path.lexists(run.path / "run.json") and run.is_record(run.info())
    except PosexpError:
        return
    if record:
        run.require_checkpoint(needs)


@app.command(cls=Command, context_settings=EXTRA)
def finetune(
    ctx: typer.Context,
    parent_dir: Path = typer.Argument(..., metavar="PARENT_RUN", show_default=False,
                                      help="A completed run directory to continue."),
) -> None:
    """Continue a completed run from its weights: at a longer length, with RoPE scaling.

    Trains a new run, in the parent's experiment, that starts from the parent's trained
    weights with a fresh optimizer and learning-rate schedule for train.tokens, then scores
    it like posexp train. Overrides may change train.*, eval.*, encoding.scaling.*, seed,
    device, attention, logger.*, results_dir, experiment and run_name; the rest is the
    parent's. encoding.scaling=METHOD ({tunable}) with
    encoding.scaling.factor=S trains RoPE scaled, L being the length the weights were first
    trained at. The run's identity includes the parent's identity and weights hash; its
    default name is PARENT-ft, with -L<seq_len> and -<method><factor> when they change.
    Checkpoints, resume (run the same command again, or posexp resume), the lock and the
    errors are posexp train's. --cfg job prints the config it would use.

    \b
    Examples:
      posexp finetune results/default/rope-L64-s0 train.seq_len=256 train.tokens=200000
      posexp finetune results/default/rope-L64-s0 train.seq_len=256 train.tokens=200000
                      encoding.scaling=linear encoding.scaling.factor=4
    """
    try:
        if pretrained_run(parent_dir):
            from posexp.cli.pretrained_command import finetune_pretrained

            return finetune_pretrained(ctx, parent_dir)
        from posexp.runs.parents import finetune_config

        overrides, show = saved_run_args(ctx.args, "finetune", "PARENT_RUN, overrides")
        with showing(show):
            cfg = finetune_config(run_dir_arg(parent_dir), overrides)
        if show:
            print_config(cfg, None)
            return
        run_config(cfg)
    except BaseException as e:
        fail(e)


# the help names the RoPE scaling methods the table has (posexp/scaling.py)
for _command in (eval_, finetune):
    _command.__doc__ = _command.__doc__.replace("{methods}", scaling.names()).replace(
        "{tunable}", ", ".join(scaling.fine_tunable()))
