"""The parent process: executors and lanes, the judge's and the workers' supervision, the reference
pass, one problem's evaluation, the pure verdict, the sanitizer runs, the quiet host, builds ahead,
and the run's scratch. It starts the judge and worker processes and never runs model code itself."""
