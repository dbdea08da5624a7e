"""The commands that read runs back: report, ls, compare, and reproduce (which trains what
a claim suite is missing, then judges it)."""

from __future__ import annotations

import os
import shlex
import sys
from pathlib import Path

import typer
import yaml

from posexp.cli.app import EXTRA, app
from posexp.cli.errors import fail
from posexp.cli.help import Command
from posexp.config import CONFIG_DIR
from posexp.errors import UsageError
from posexp.timelimit import TIME_LIMIT_EXIT


def preset_names() -> str:
    """The shipped claim presets (configs/reproduce/)."""
    return ", ".join(sorted(p.stem for p in (Path(CONFIG_DIR) / "reproduce").glob("*.yaml")))


def preset_costs() -> str:
    """One line per shipped preset: its name and the cost its ``cost:`` states."""
    lines = []
    for path in sorted((Path(CONFIG_DIR) / "reproduce").glob("*.yaml")):
        try:
            cost = (yaml.safe_load(path.read_text()) or {}).get("cost")
        except (OSError, yaml.YAMLError, AttributeError):  # load_preset says what is wrong
            cost = None
        lines.append(f"      {path.stem:<18} {cost or 'not measured'}")
    return "\n".join(lines)


def write_report_of(root: Path, out: Path | None, style: str, width: str | None,
                    include: list[str], exclude: list[str], label: list[str], wandb: bool,
                    wandb_project: str | None) -> None:
    """posexp report's work, its options checked: a UsageError for a bad one."""
    from posexp.report import load_runs, write_report
    from posexp.report.select import Selection
    from posexp.report.style import look_of
    from posexp.report.wandb import upload_to_wandb

    try:
        look = look_of(style, width)
    except ValueError as e:
        raise UsageError(str(e)) from None
    selection = Selection.parse(include, exclude, label)
    if not root.is_dir():
        raise UsageError(f"{root} is not a directory")
    target = out or root / "report"
    if target.exists() and not target.is_dir():
        raise UsageError(f"--out {target} is a file; --out names a directory to write the "
                         "report into")
    runs, not_done = load_runs(root)
    command = shlex.join(["posexp", "report", str(root), *(["--out", str(out)] * bool(out)),
                          "--style", style, *(["--width", width] * bool(width)),
                          *repeated("--include", include), *repeated("--exclude", exclude),
                          *repeated("--label", label)])
    written = write_report(runs, not_done, target, f"posexp report: {root}", look=look,
                           selection=selection, command=command)
    typer.echo(f"posexp report: {len(runs)} completed runs, {len(not_done)} not included "
               f"-> {target}")
    for f in written:
        typer.echo(f"  {f}")
    if wandb:
        try:
            went = upload_to_wandb(written, runs, target, wandb_project)
            if went:
                typer.echo(went, err=True)
        except Exception as e:
            typer.echo(f"posexp: warning: W&B upload failed ({type(e).__name__}: "
                       f"{str(e).strip()[:200]}); the local report is complete", err=True)


def repeated(option: str, values: list[str]) -> list[str]:
    """``option`` before each of ``values``: a repeatable option, as it was given."""
    return [a for v in values for a in (option, v)]


@app.command(cls=Command)
def report(
    root: Path = typer.Argument(Path("results"), metavar="ROOT", show_default=False,
                                help="Directory searched for runs (default: results)."),
    out: Path | None = typer.Option(None, metavar="DIR",
                                    help="Where to write (default: ROOT/report)."),
    wandb: bool = typer.Option(False, "--wandb", help="Also log figures and tables to W&B "
                               "(WANDB_MODE=offline: for a later wandb sync)."),
    wandb_project: str | None = typer.Option(None, metavar="NAME", show_default=False,
                                             help="W&B project for --wandb (default: "
                                                  "WANDB_PROJECT, else W&B's default)."),
    style: str = typer.Option("screen", metavar="screen|paper",
                              help="screen: titled, captioned, PNG and SVG; paper: no title, "
                                   "8 pt, PDF, SVG and PNG, caption in NAME.caption.txt."),
    width: str | None = typer.Option(None, metavar="one|two", show_default=False,
                                     help="Paper figures one column (3.25 in) or two "
                                          "(6.75 in) wide (default: two)."),
    include: list[str] = typer.Option([], metavar="PATTERN", show_default=False,
                                      help="Draw only series whose label matches (shell "
                                           "pattern; repeatable)."),
    exclude: list[str] = typer.Option([], metavar="PATTERN", show_default=False,
                                      help="Leave out series whose label matches "
                                           "(repeatable)."),
    label: list[str] = typer.Option([], metavar="OLD=NEW", show_default=False,
                                    help="Call the series labelled OLD NEW (repeatable)."),
) -> None:
    """Plots and tables across every run under ROOT.

    Writes extrapolation_<mode>.png/.svg (perplexity against evaluation length),
    per_position.png/.svg, summary.csv, summary.md and summary.tex (booktabs tables for a
    paper; with RoPE scalings, a method x length table). Runs that failed, are unfinished or
    damaged are listed, not plotted. With --wandb, W&B's files go beside the report
    (ROOT/report/wandb, or under WANDB_DIR when that is set). --style paper writes figures
    that go into a paper unchanged (.pdf/.svg/.png and .caption.txt); --include, --exclude
    and --label match series labels as the report's legends print them.

    \b
    Examples:
      posexp report
      posexp report results/my-sweep --out figures
      posexp report results --style paper --width one --exclude '*lr=0.01*'
      posexp report results --label 'rope L=64=RoPE' --label 'alibi L=64=ALiBi'
      posexp report results --wandb --wandb-project my-project
    """
    try:
        write_report_of(root, out, style, width, include, exclude, label, wandb, wandb_project)
    except BaseException as e:
        fail(e)


@app.command("ls", cls=Command)
def ls(
    root: Path = typer.Argument(Path("results"), metavar="DIR", show_default=False,
                                help="Directory searched for runs (default: results)."),
) -> None:
    """One line per run under DIR: what it is, how it ended, how well it extrapolates.

    Columns: experiment/run, encoding, training length L, seed, model size (width x
    layers), status (completed, running, interrupted, failed, diverged, or damaged, with
    the reason), perplexity at L and at the longest length scored (nonoverlapping windows,
    with the 95% interval where eval.json has one). Colour and cut to fit on a terminal,
    plain in a pipe.

    \b
    Examples:
      posexp ls
      posexp ls results/my-sweep
      posexp ls | grep -v completed
    """
    try:
        import shutil

        from posexp.listing import coloured, ls_lines, plain

        terminal = sys.stdout.isatty()
        style = coloured if terminal and not os.environ.get("NO_COLOR") else plain
        width = shutil.get_terminal_size().columns if terminal else None
        typer.echo("\n".join(ls_lines(root, style, width)))
    except BaseException as e:
        fail(e)


@app.command(cls=Command)
def compare(
    run_a: Path = typer.Argument(..., metavar="RUN_A", show_default=False,
                                 help="A completed run directory."),
    run_b: Path = typer.Argument(..., metavar="RUN_B", show_default=False,
                                 help="Another completed run directory."),
) -> None:
    """Two runs side by side: the config keys that differ, then both curves and B/A.

    Identity keys (what determines the weights) come first, then the others, such as
    evaluation settings. Each evaluation length of each mode gets a row with both
    perplexities, their 95% intervals, and the ratio B/A with its paired interval (the
    same blocks of tokens resampled for both) when both points scored the same tokens;
    points scored on different tokens, or runs of different corpora, are said not to be
    comparable.

    \b
    Examples:
      posexp compare results/default/rope-L64-s0 results/default/alibi-L64-s0
      posexp compare results/a/rope-L64-s0 results/b/rope-L64-s0
    """
    try:
        from posexp.listing import compare_lines

        typer.echo("\n".join(compare_lines(run_a, run_b)))
    except BaseException as e:
        fail(e)


@app.command(cls=Command, context_settings=EXTRA)
def reproduce(
    ctx: typer.Context,
    preset: str = typer.Option("cpu", metavar="NAME|FILE", show_default=False,
                               help=f"{preset_names()} (configs/reproduce/), or a YAML file "
                                    "of the same shape (default: cpu)."),
    results_dir: Path = typer.Option(Path("results"), metavar="DIR", show_default=False,
                                     help="Root for the runs and the report (default: "
                                          "results)."),
    config_dir: Path | None = typer.Option(None, "--config-dir", metavar="DIR",
                                           show_default=False,
                                           help="Config files of your own (an encoding, a "
                                                "task) that the preset's runs choose."),
    time_limit: str | None = typer.Option(None, "--time-limit", metavar="DURATION",
                                          show_default=False,
                                          help="Stop within this time (90s, 45m, 2h, "
                                               f"1h30m): exit {TIME_LIMIT_EXIT} with runs "
                                               "pending."),
) -> None:
    """Run a claim suite and print the verdicts.

    The cpu and gpu presets test the claims of Press et al. (ALiBi, ICLR 2022) and two
    about NoPE; rope-scaling and rope-scaling-gpu those about RoPE context extension (PI,
    NTK-aware, YaRN, with and without fine-tuning); encodings and encodings-gpu those about
    the later encodings and randomized positions; tasks and tasks-gpu those about length
    generalization on algorithmic tasks (Kazemnejad et al. 2023: NoPE against absolute
    positions; Ruoss et al. 2023: randomized positions). Trains the runs the preset lists (a
    completed run of the same identity is reused), fine-tunes what it lists, scores each
    run, and writes the report, verdicts.md and verdicts.json under
    RESULTS_DIR/<experiment>/report.

    With --time-limit a run starts only if its estimate (its tokens at the training speed
    the campaign's latest completed run measured) fits in the time left; at the limit the
    run going is checkpointed, claims whose runs are missing read "pending (N runs)", and
    the command ends with a summary and exit status {exit} (run it again to continue). A run
    another process holds is skipped as running elsewhere. hydra/launcher=joblib (this
    machine) or submitit_slurm (a cluster), with hydra.launcher.KEY=VALUE, runs the runs
    through Hydra's launcher as posexp sweep does.

    \b
    Presets and their cost (each preset's cost: key, measured or estimated):
{costs}

    \b
    Examples:
      posexp reproduce                  the cpu preset
      posexp reproduce --preset rope-scaling
      posexp reproduce --preset tasks
      posexp reproduce --preset gpu
      posexp reproduce --preset my_claims.yaml --results-dir out
      posexp reproduce --preset my_claims.yaml --config-dir configs
      posexp reproduce --preset tasks --time-limit 1h30m
      posexp reproduce --preset gpu hydra/launcher=submitit_slurm hydra.launcher.partition=gpu
    """
    try:
        run_suite(ctx.args, preset, results_dir, config_dir, time_limit)
    except BaseException as e:
        fail(e)


def run_suite(args: list[str], preset: str, results_dir: Path, config_dir: Path | None,
              time_limit: str | None) -> None:
    """posexp reproduce's work, its launcher arguments and time limit checked first."""
    from posexp.claims import reproduce as run_claims
    from posexp.claims.campaign import check_launcher_args
    from posexp.timelimit import parse_time_limit

    launcher = check_launcher_args(args)
    seconds = None if time_limit is None else parse_time_limit(time_limit)
    run_claims(preset, results_dir, str(config_dir) if config_dir else None, seconds,
               tuple(launcher))


# the exit status of a campaign stopped at its time limit, defined once (posexp/timelimit.py)
# and each preset's cost, read from the preset (its cost:), not repeated here
reproduce.__doc__ = reproduce.__doc__.replace("{exit}", str(TIME_LIMIT_EXIT)).replace(
    "{costs}", preset_costs())
