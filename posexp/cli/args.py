"""The command lines of train, sweep, eval and finetune: Hydra overrides and the few of
Hydra's flags posexp passes on, anything else refused by name."""

from __future__ import annotations

from dataclasses import dataclass, field

from posexp.config.guards import scaling_sugar
from posexp.errors import UsageError

# Hydra's flags that posexp passes on, by their long names; -x are their short forms.
VALUE_FLAGS = {"--cfg": ("job", "hydra", "all"), "--package": None, "--config-dir": None,
               "--config-name": None}
SWITCHES = {"--resolve", "--run", "--multirun", "--hydra-help", "--help", "--version"}
INFO = ("all", "config", "defaults", "defaults-tree", "plugins", "searchpath")
SHORT = {"-c": "--cfg", "-p": "--package", "-cd": "--config-dir", "-cn": "--config-name",
         "-r": "--run", "-m": "--multirun", "-h": "--help", "-i": "--info"}
REFUSED = {
    "--experimental-rerun": "--experimental-rerun is refused: it unpickles a file, which can "
                            "run any code; run the same command again instead",
    "--config-path": "--config-path would replace posexp's own configs; add yours with "
                     "--config-dir DIR",
    "-cp": "-cp (--config-path) would replace posexp's own configs; add yours with "
           "--config-dir DIR",
    "--shell-completion": "posexp has no shell completion",
    "-sc": "posexp has no shell completion",
}


@dataclass
class Args:
    """A train/sweep command line: overrides, and Hydra's flags by their long names."""

    overrides: list[str] = field(default_factory=list)
    flags: dict[str, str] = field(default_factory=dict)

    @property
    def config_dir(self) -> str | None:
        return self.flags.get("--config-dir")

    @property
    def config_name(self) -> str | None:
        return self.flags.get("--config-name")


def parse_args(args: list[str], command: str) -> Args:
    """Split a command line into overrides and known Hydra flags; anything else that starts
    with '-' is refused by name (argparse would take an abbreviation of any flag)."""
    out, i = Args(), 0
    while i < len(args):
        arg = args[i]
        i += 1
        if not arg.startswith("-"):
            out.overrides.append(scaling_sugar(arg))
            continue
        name, eq, value = arg.partition("=") if arg.startswith("--") else (arg, "", "")
        name = SHORT.get(name, name)
        if name in REFUSED:
            raise UsageError(REFUSED[name])
        if name in VALUE_FLAGS:
            if not eq:
                if i >= len(args) or args[i].startswith("-"):
                    choices = VALUE_FLAGS[name]
                    raise UsageError(f"{name} needs a value" + (
                        f": {', '.join(choices)}" if choices else ""))
                value, i = args[i], i + 1
            choices = VALUE_FLAGS[name]
            if choices and value not in choices:
                raise UsageError(f"{name} takes {', '.join(choices)}; got {value!r}")
            out.flags[name] = value
        elif name == "--info":
            if not eq and i < len(args) and args[i] in INFO:
                value, i = args[i], i + 1
            if value and value not in INFO:
                raise UsageError(f"--info takes {', '.join(INFO)}; got {value!r}")
            out.flags[name] = value or "all"
        elif name in SWITCHES and not eq:
            out.flags[name] = ""
        else:
            raise UsageError(f"posexp {command} has no option {arg!r}; it takes key=value "
                             f"overrides and --cfg job, --config-dir DIR, --config-name NAME "
                             f"(posexp {command} --help)")
    if command == "train" and "--multirun" in out.flags:
        raise UsageError("posexp train runs one config; posexp sweep runs several "
                         "(the same overrides, with comma-separated values)")
    if command == "sweep" and "--run" in out.flags:
        raise UsageError("posexp sweep runs several configs; posexp train runs one")
    return out


def saved_run_args(args: list[str], command: str, takes: str) -> tuple[list[str], bool]:
    """The overrides of a command on a saved run (eval, finetune), and whether --cfg job asks
    for its config instead of running it; any other option is refused by name."""
    overrides = [a for a in args if a not in ("--cfg", "-c", "job", "--resolve")]
    unknown = [a for a in overrides if a.startswith("-")]
    if unknown:
        raise UsageError(f"posexp {command} has no option {unknown[0]!r}; it takes {takes}, "
                         "and --cfg job")
    return overrides, "--cfg" in args or "-c" in args
