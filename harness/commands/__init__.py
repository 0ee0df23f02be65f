"""Subcommands: each has setup_arguments(parser), run_from_args(args) and a run() that tests call."""
