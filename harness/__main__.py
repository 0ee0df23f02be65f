"""`python -m harness ...`, `python run.py ...` in a checkout, or the `kernel-harness` script of an
installed package: the command line, `run` (the default) and the other commands.

Errors the user can fix print `error: <what> (<how to fix>)` and exit 1. Too little free disk
before a run, or a full disk anywhere in one, prints one line `harness error: ...` and exits 5.
An interruption (Ctrl-C, or SIGTERM during a run) exits 130. Anything else is a bug and shows its
traceback.
"""

from __future__ import annotations

import argparse
import os
import sys
from typing import Any, Optional, Sequence

from harness import __version__
from harness.commands import baseline, gate, ingest, leaderboard, lint, run, serve
from harness.core.errors import ExitCode, ResourceError, UserError, no_space
from harness.views.text import visible

COMMANDS = {
    "run": run,
    "ingest": ingest,
    "gate": gate,
    "baseline": baseline,
    "leaderboard": leaderboard,
    "lint": lint,
    "serve": serve,
}


def program_name() -> str:
    """The name this command line was started as, for usage and --version: `run.py`, the
    `kernel-harness` script, or `python3 -m harness` (with the interpreter's name as typed)."""
    name = os.path.basename(sys.argv[0]) if sys.argv else ""
    if name == "__main__.py":
        interpreter = os.path.basename(sys.orig_argv[0]) if sys.orig_argv else "python3"
        return f"{interpreter} -m harness"
    return name if name and name != "-c" else "run.py"


class Version(argparse.Action):
    """`--version`: the program's name and version, then the environment: Python, the kernel,
    torch and its CUDA, and the boundary layers a run would take here (the first one)."""

    def __call__(
        self,
        parser: argparse.ArgumentParser,
        namespace: argparse.Namespace,
        values: Any,
        option_string: Optional[str] = None,
    ) -> None:
        try:
            self._print(parser)
        except BrokenPipeError:  # `--version | head -1`: the reader has what it wanted
            devnull = os.open(os.devnull, os.O_WRONLY)
            os.dup2(devnull, sys.stdout.fileno())  # the interpreter's last flush must not raise again
        parser.exit()

    @staticmethod
    def _print(parser: argparse.ArgumentParser) -> None:
        import platform

        from harness.parent.boundary import layers_here

        print(f"{parser.prog} {__version__}", flush=True)
        print(f"python {platform.python_version()} on {platform.system()} {platform.release()} ({platform.machine()})")
        try:
            import torch

            print(f"torch {torch.__version__}, CUDA {torch.version.cuda or 'none'}")
        except ImportError:
            print("torch: not installed")
        layers = layers_here()
        print(f"boundary around candidates: {layers[0]} (this machine offers: {', '.join(layers)})", flush=True)


def summary(doc: Optional[str]) -> str:
    """A command's one-line help: its docstring's first paragraph, whole (a sentence may run over lines)."""
    paragraph = (doc or "").strip().split("\n\n")[0]
    return " ".join(paragraph.split())


def parser(prog: str = "run.py") -> argparse.ArgumentParser:
    top = argparse.ArgumentParser(
        prog=prog,
        description="Evaluate candidate kernels against reference problems: correctness, then speed.",
        epilog="exit codes: 0 ok, 1 usage error, 2 a candidate failed (or an ingest was refused), 3 the gate found a "
        "regression, 4 reference or harness failure, 5 too little free disk or no space left, 130 interrupted",
    )
    top.add_argument(
        "--version", action=Version, nargs=0, help="print the version and the environment it runs in, and exit"
    )
    top.set_defaults(program=prog)  # how to run it again, e.g. in the line that resumes an interrupted run
    sub = top.add_subparsers(dest="command", metavar="{" + ",".join(COMMANDS) + "}")
    for name, module in COMMANDS.items():
        module.setup_arguments(sub.add_parser(name, help=summary(module.__doc__)))
    return top


def main(argv: Sequence[str] | None = None) -> int:
    prog = program_name() if argv is None else "run.py"  # the command line's own name; a call from code is named run.py
    argv = list(sys.argv[1:] if argv is None else argv)
    if not argv or argv[0] not in COMMANDS and argv[0] not in ("-h", "--help", "--version"):
        argv = ["run", *argv]  # `python run.py --problem X` is the default command
    p = parser(prog)
    try:
        args = p.parse_args(argv)
    except SystemExit as exc:  # argparse exits 2 on usage errors; our code for those is 1
        return int(ExitCode.USAGE) if exc.code not in (0, None) else 0
    try:
        return COMMANDS[args.command].run_from_args(args, argv)
    except UserError as exc:
        print(f"error: {visible(str(exc))}", file=sys.stderr)
        return int(ExitCode.USAGE)
    except ResourceError as exc:
        print(f"harness error: {visible(str(exc))}", file=sys.stderr)
        return int(ExitCode.RESOURCES)
    except KeyboardInterrupt as exc:  # one that arrived outside a run's evaluation loop (which handles its own)
        print(f"{exc or 'interrupted'}", file=sys.stderr)
        return int(ExitCode.INTERRUPTED)
    except Exception as exc:
        message = no_space(exc)
        if message is None:
            raise
        print(f"harness error: {visible(message)}", file=sys.stderr)
        return int(ExitCode.RESOURCES)


if __name__ == "__main__":
    sys.exit(main())
