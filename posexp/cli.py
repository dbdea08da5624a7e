"""The command line: the only place that parses argv.

``posexp train`` hands its arguments to Hydra (overrides, ``--cfg job``, ``--config-dir``
...), after composing them once to turn any config error into one line and exit status 2.
"""

from __future__ import annotations

import os
import sys
import traceback
from collections.abc import Callable
from importlib.resources import files
from pathlib import Path

import typer
from omegaconf import DictConfig, OmegaConf, open_dict
from omegaconf.errors import OmegaConfBaseException

from posexp import config as C
from posexp.errors import PosexpError, UsageError

CONFIG_DIR = str(files("posexp.configs"))
EXTRA = {"allow_extra_args": True, "ignore_unknown_options": True}
# Hydra's flags that take a value; the rest of the arguments are overrides.
HYDRA_VALUE_FLAGS = {"--config-dir", "-cd", "--config-name", "-cn", "--config-path", "-cp",
                     "--cfg", "-c", "--package", "-p", "--experimental-rerun"}

app = typer.Typer(
    add_completion=False,
    no_args_is_help=True,
    pretty_exceptions_enable=False,
    help="Length-extrapolation experiments: train short, evaluate long, compare encodings.",
)


def fail(error: BaseException) -> None:
    """Print one line for the error and exit; POSEXP_DEBUG=1 adds the traceback."""
    if os.environ.get("POSEXP_DEBUG"):
        traceback.print_exception(error)
    if isinstance(error, PosexpError):
        typer.echo(f"posexp: error: {error}", err=True)
        raise SystemExit(error.exit_code)
    if isinstance(error, KeyboardInterrupt):
        typer.echo("posexp: interrupted", err=True)
        raise SystemExit(130)
    detail = str(error).strip().splitlines()[0] if str(error).strip() else ""
    typer.echo(f"posexp: error: {type(error).__name__}: {detail} "
               "(POSEXP_DEBUG=1 shows the traceback)", err=True)
    raise SystemExit(1)


def one_line(error: Exception) -> str:
    """Hydra and OmegaConf spread a message over several lines; keep what a user needs."""
    from hydra.errors import MissingConfigException

    if isinstance(error, MissingConfigException) and error.options is not None:
        group, _, name = (error.missing_cfg_file or "").rpartition("/")
        options = [o for o in error.options if not o.endswith("_schema")]
        return (f"there is no {group or 'config'} {name!r}; available options in "
                f"'{group}': {', '.join(options)}")
    lines = []
    for err in (error, error.__cause__):
        for line in str(err or "").splitlines():
            line = line.strip()
            if line and not line.startswith(("full_key:", "object_type=", "reference_type=")) \
                    and line not in lines:
                lines.append(line)
    text = " ".join(lines).replace("Available options in", "available options in")
    return text.replace("\t", " ").replace(":  ", ": ")


def split_hydra_args(args: list[str]) -> tuple[list[str], dict[str, str]]:
    """(overrides, {flag: value}) from a Hydra command line."""
    overrides, flags, i = [], {}, 0
    while i < len(args):
        a = args[i]
        if a in HYDRA_VALUE_FLAGS and i + 1 < len(args):
            flags[a], i = args[i + 1], i + 2
        elif a.startswith("-"):
            flags[a], i = "", i + 1
        else:
            overrides.append(a)
            i += 1
    return overrides, flags


def compose(args: list[str]) -> DictConfig:
    """Compose and check the config a Hydra run of ``args`` would get, or raise UsageError."""
    overrides, flags = split_hydra_args(args)
    if "-m" in flags or "--multirun" in flags:
        raise UsageError("posexp train runs one config; use posexp sweep for several")
    cfg = compose_overrides(overrides, flags)
    C.check(cfg)
    return cfg


def compose_overrides(overrides: list[str], flags: dict[str, str],
                      with_hydra: bool = False) -> DictConfig:
    from hydra import compose as hydra_compose
    from hydra import initialize_config_dir
    from hydra.errors import HydraException
    from omegaconf.errors import OmegaConfBaseException

    extra_dir = flags.get("--config-dir") or flags.get("-cd")
    if extra_dir:
        if not Path(extra_dir).is_dir():
            raise UsageError(f"--config-dir {extra_dir!r} is not a directory")
        overrides = [f"hydra.searchpath=[file://{Path(extra_dir).resolve()}]", *overrides]
    name = flags.get("--config-name") or flags.get("-cn") or "config"
    try:
        with initialize_config_dir(CONFIG_DIR, version_base="1.3"):
            return hydra_compose(name, overrides=overrides, return_hydra_config=with_hydra)
    except (HydraException, OmegaConfBaseException, ValueError) as e:
        raise UsageError(one_line(e)) from None


def hydra_main(task: Callable[[DictConfig], object], args: list[str]) -> None:
    """Run ``task`` under Hydra's own entry point with ``args`` as its command line."""
    import hydra

    @hydra.main(config_path=CONFIG_DIR, config_name="config", version_base="1.3")
    def entry(cfg: DictConfig) -> None:
        try:
            task(cfg)
        except BaseException as e:  # Hydra would print a traceback; posexp prints one line
            fail(e)

    sys.argv = ["posexp", *args]
    entry()


@app.command(context_settings=EXTRA)
def train(ctx: typer.Context) -> None:
    """Train one model and evaluate it at longer lengths.

    Arguments are Hydra overrides, e.g. `posexp train encoding=alibi train.seq_len=128
    eval.lengths=[128,256,512]`; `--cfg job` prints the composed config without running.
    """
    from posexp.experiment import run

    try:
        compose(ctx.args)
    except PosexpError as e:
        fail(e)
    hydra_main(run, ctx.args)


@app.command("eval", context_settings=EXTRA)
def eval_(
    ctx: typer.Context,
    run_dir: Path = typer.Argument(..., help="A run directory written by posexp train."),
) -> None:
    """Score a trained run again at other lengths or in another mode.

    Overrides may change `eval.*`, `device` and `attention`, e.g. `posexp eval RUN
    eval.mode=sliding eval.stride=64`; the new points are written to eval.json beside the old
    ones (a point of the same mode, length, stride and scored tokens is replaced).
    """
    from posexp.experiment import evaluate_dir
    from posexp.runs import Run

    try:
        run = Run.open(run_dir)
        cfg = apply_overrides(run.config(), ctx.args, allowed=("eval.", "device", "attention"))
        C.check_eval(cfg)
        C.check_attention(cfg)
        if "--cfg" in ctx.args or "-c" in ctx.args:
            typer.echo(OmegaConf.to_yaml(cfg))
            return
        evaluate_dir(run_dir, cfg)
    except BaseException as e:
        fail(e)


@app.command(context_settings=EXTRA)
def sweep(ctx: typer.Context) -> None:
    """Train and evaluate a grid of runs: encodings x training lengths x seeds.

    Hydra multirun syntax, e.g. `posexp sweep encoding=alibi,rope train.seq_len=64,128
    seed=0,1,2`; presets with `sweep=encodings|lengths|seeds|grid`; parallel or cluster
    launchers with `hydra/launcher=joblib|submitit_local|submitit_slurm`. Each job has its
    own run directory (swept keys beyond encoding, length and seed are added to its name);
    completed runs of the same identity are skipped, so a re-run finishes only what is missing.
    """
    from posexp.sweep import summarize, sweep_job

    try:
        jobs, extra = plan_sweep(ctx.args)
    except PosexpError as e:
        fail(e)
    typer.echo(f"posexp sweep: {len(jobs)} runs", err=True)
    hydra_main(sweep_job, ["--multirun", *ctx.args, *extra])
    try:
        summarize(jobs)
    except BaseException as e:
        fail(e)


def plan_sweep(args: list[str]) -> tuple[list[DictConfig], list[str]]:
    """Every job's composed and checked config, before the first one starts, and the
    overrides posexp adds to the sweep (the run name).  Two jobs never share a directory:
    unless run_name is given, it grows with every swept key of the identity that the
    default name does not already hold, in Hydra's override_dirname style
    (rope-L64-s0,d_model=32,lr=0.001); a plan that still puts two jobs in one directory is
    refused."""
    from hydra.core.hydra_config import HydraConfig

    from posexp.experiment import existing
    from posexp.runs import Run
    from posexp.sweep import grid, run_name_override

    overrides, flags = split_hydra_args(args)
    flags.pop("-m", None)
    flags.pop("--multirun", None)
    fixed = [o for o in overrides if not _is_sweep(o)]
    preset = compose_overrides(fixed, flags, with_hydra=True).hydra.sweeper.params or {}
    jobs = grid(overrides, {str(k): str(v) for k, v in preset.items()})
    extra = run_name_override(jobs)
    configs, where = [], {}
    for job in jobs:
        cfg = compose_overrides([*job, *extra], flags, with_hydra=True)
        try:
            HydraConfig.instance().set_config(cfg)  # run names may use ${hydra:runtime.choices.X}
            with open_dict(cfg):
                cfg.run_name = str(cfg.run_name)
                del cfg["hydra"]
            C.check(cfg)
        except PosexpError as e:
            raise UsageError(f"{' '.join(job)}: {e}") from None
        except (OmegaConfBaseException, ValueError) as e:
            raise UsageError(f"{' '.join(job)}: {one_line(e)}") from None
        path = Path(cfg.results_dir) / cfg.experiment / cfg.run_name
        if path in where:
            a = [o for o in where[path] if o not in job]
            b = [o for o in job if o not in where[path]]
            raise UsageError(f"two jobs of this sweep would share the run directory {path}: "
                             f"[{' '.join(a)}] and [{' '.join(b)}]; give each its "
                             "own run_name= or experiment= (e.g. run_name='${encoding.name}-"
                             "${train.lr}'), or sweep evaluation settings with posexp eval")
        where[path] = job
        configs.append(cfg)
    for cfg in configs:  # before any job runs: a directory holding another identity
        if cfg.train.resume:
            existing(Run(Path(cfg.results_dir) / cfg.experiment / cfg.run_name), cfg)
    return configs, extra


def _is_sweep(override: str) -> bool:
    from hydra.core.override_parser.overrides_parser import OverridesParser

    try:
        return OverridesParser.create().parse_override(override).is_sweep_override()
    except Exception as e:
        raise UsageError(one_line(e)) from None


@app.command()
def report(
    root: Path = typer.Argument(Path("results"), help="Directory searched for runs."),
    out: Path | None = typer.Option(None, help="Where to write (default ROOT/report)."),
    wandb: bool = typer.Option(False, "--wandb", help="Also upload figures and tables to W&B."),
    wandb_project: str = typer.Option("posexp", help="W&B project for --wandb."),
) -> None:
    """Plots (PNG, SVG) and tables (summary.csv, summary.md) across every run under ROOT."""
    from posexp.report import load_runs, upload_to_wandb, write_report

    try:
        if not root.is_dir():
            raise UsageError(f"{root} is not a directory")
        target = out or root / "report"
        runs, not_done = load_runs(root)
        files = write_report(runs, not_done, target, f"posexp report: {root}")
        typer.echo(f"posexp report: {len(runs)} completed runs, {len(not_done)} not included "
                   f"-> {target}")
        for f in files:
            typer.echo(f"  {f}")
        if wandb:
            try:
                upload_to_wandb(files, runs, wandb_project)
            except Exception as e:
                typer.echo(f"posexp: warning: W&B upload failed ({type(e).__name__}: "
                           f"{str(e).strip()[:200]}); the local report is complete", err=True)
    except BaseException as e:
        fail(e)


@app.command()
def reproduce(
    preset: str = typer.Option(
        "cpu", help="cpu or gpu (configs/reproduce/), or a YAML file of the same shape."),
    results_dir: Path = typer.Option(Path("results"), help="Root for the runs and the report."),
) -> None:
    """Run the claim suite of Press et al. (ALiBi, ICLR 2022) and print the verdicts."""
    from posexp.reproduce import reproduce as run_claims

    try:
        run_claims(preset, results_dir, Path(CONFIG_DIR), compose)
    except BaseException as e:
        fail(e)


@app.command()
def resume(
    run_dir: Path = typer.Argument(..., help="A run directory written by posexp train."),
) -> None:
    """Continue an interrupted run from its last checkpoint, with the config it was given."""
    from posexp.experiment import run
    from posexp.runs import Run

    try:
        if not (run_dir / "config.yaml").is_file():
            raise UsageError(f"{run_dir} is not a posexp run (no config.yaml)")
        cfg = apply_overrides(Run(run_dir).config(), [], allowed=())
        if Path(cfg.results_dir) / cfg.experiment / cfg.run_name != run_dir:
            # the run was moved: continue it where it is now
            cfg.results_dir, cfg.experiment = str(run_dir.parent.parent), run_dir.parent.name
            cfg.run_name = run_dir.name
        cfg.train.resume = True
        run(cfg)
    except BaseException as e:
        fail(e)


def apply_overrides(saved: DictConfig, args: list[str], allowed: tuple[str, ...]) -> DictConfig:
    """The schema-checked config of a saved run with Hydra-syntax overrides applied."""
    from hydra.core.override_parser.overrides_parser import OverridesParser
    from hydra.errors import HydraException
    from omegaconf.errors import OmegaConfBaseException

    overrides, _ = split_hydra_args(args)
    try:
        cfg = OmegaConf.merge(OmegaConf.structured(C.Config), saved)
        OmegaConf.set_struct(cfg, True)
        for o in OverridesParser.create().parse_overrides(overrides):
            key = o.key_or_group
            if not key.startswith(allowed):
                raise UsageError(f"posexp eval can change only {', '.join(allowed)}*; "
                                 f"got {key!r}")
            OmegaConf.update(cfg, key, o.value(), merge=False)
    except (HydraException, OmegaConfBaseException, ValueError) as e:
        raise UsageError(one_line(e)) from None
    return cfg


def main() -> None:
    C.register()
    app()
